"""The meta-optimizer: runs the switched-on passes in order (grappler's ``MetaOptimizer``).

``optimize`` (``mg.optimize``) returns the rewritten graph for inspection: printing it,
drawing it, TensorBoard and ``RunMetadata`` show the fused ops by name. ``rewrite_for_run``
is what a ``ClientSession`` calls once per plan: the graph to plan and the fetches, feeds
and targets in it. The user's graph is never changed (export writes it as built).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from minigraph.framework.errors import InvalidArgumentError
from minigraph.framework.graph import Graph, Operation, Output
from minigraph.framework.scope import Scope
from minigraph.optimizer import (  # noqa: F401 (each module registers its pass)
    batch_norm_folding,
    constant_folding,
    cse,
    dependency,
    layout,
    pruning,
    remapper,
    training_fusions,
)
from minigraph.optimizer.item import GraphItem
from minigraph.optimizer.options import OptimizerOptions
from minigraph.optimizer.passes import registered_passes


def run_passes(item: GraphItem, options: OptimizerOptions) -> GraphItem:
    """``item`` after every pass ``options`` switches on, in their registered order."""
    for graph_pass in registered_passes():
        if options.enabled(graph_pass.name):
            item = graph_pass(item)
    if options.pruning and item.changed:  # what the rewrites left unread (folded inputs)
        pruning.prune(item)
    return item


@dataclass(frozen=True)
class RunRewrite:
    """A run's graph after the passes, and its fetches, feeds and targets in that graph
    (``feeds`` maps each original fed Output to its counterpart)."""

    graph: Graph
    fetches: list[Output]
    feeds: dict[Output, Output]
    targets: list[Operation]


def rewrite_for_run(graph: Graph, fetches: Sequence[Output], fed: Iterable[Output],
                    targets: Sequence[Operation], options: OptimizerOptions) -> RunRewrite:
    """The graph a session plans for this run. The item starts pruned (the plan prunes the
    same way), so when no other pass changes anything the original graph is planned as it
    is, at no cost."""
    fed = list(fed)
    if not options.any_on:
        return RunRewrite(graph, list(fetches), {f: f for f in fed}, list(targets))
    item = GraphItem.from_graph(graph, fetches, fed, targets)
    pruning.prune(item)
    item.changed = item.stale = False  # the plan prunes the original graph just so
    item = run_passes(item, options)
    if not item.changed:
        return RunRewrite(graph, list(fetches), {f: f for f in fed}, list(targets))
    new = item.to_graph(notify=False)
    return RunRewrite(new, [new.get_tensor_by_name(f.name) for f in fetches],
                      {f: new.get_tensor_by_name(f.name) for f in fed},
                      [new.get_operation(t.name) for t in targets])


def optimize(graph_or_scope: Graph | Scope, fetches: Any = (), feeds: Iterable[Any] = (),
             targets: Iterable[Any] = (), options: OptimizerOptions | None = None) -> Graph:
    """The graph the optimizer makes of ``graph_or_scope`` for these fetches (Outputs or
    ``"op:0"`` names), fed tensors and target ops: a new :class:`Graph` whose nodes keep
    their names (a fused op takes its chain's last node's name). ``options`` switches the
    passes (default: all on, as a session has them). The given graph is left as it is.
    """
    graph = graph_or_scope.graph() if isinstance(graph_or_scope, Scope) else graph_or_scope
    if not isinstance(graph, Graph):
        raise InvalidArgumentError(f"mg.optimize: expected a Graph or a Scope, got "
                                   f"{type(graph_or_scope).__name__}")
    if options is None:
        options = OptimizerOptions()
    fetch_list = [_tensor(graph, f) for f in
                  ([fetches] if isinstance(fetches, (Output, str)) else fetches)]
    item = GraphItem.from_graph(graph, fetch_list, [_tensor(graph, f) for f in feeds],
                                [_operation(graph, t) for t in targets])
    item = run_passes(item, options)
    return item.to_graph() if item.changed else _copy(item)


def _copy(item: GraphItem) -> Graph:
    """A new graph of the item's nodes (``optimize`` never hands back the caller's own)."""
    item.touch()
    return item.to_graph()


def _tensor(graph: Graph, value: Any) -> Output:
    if isinstance(value, str):
        return graph.get_tensor_by_name(value)
    if not isinstance(value, Output) and isinstance(getattr(value, "output", None), Output):
        value = value.output  # a wrapper's result object
    if isinstance(value, Output) and value.graph is graph:
        return value
    raise InvalidArgumentError(f"mg.optimize: each fetch and feed must be an Output of the "
                               f"graph or a tensor name, got {value!r}")


def _operation(graph: Graph, value: Any) -> Operation:
    if isinstance(value, str):
        return graph.get_operation(value)
    if isinstance(value, Operation) and value.graph is graph:
        return value
    if isinstance(value, Output) and value.graph is graph:
        return value.op
    raise InvalidArgumentError(f"mg.optimize: each target must be an Operation of the "
                               f"graph or an op name, got {value!r}")
