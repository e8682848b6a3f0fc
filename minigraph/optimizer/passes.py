"""How a graph pass is written and registered (grappler's ``GraphOptimizer`` contract).

A pass is a function ``rewrite(item: GraphItem) -> GraphItem`` registered with
:func:`register_pass` under the name of its :class:`~minigraph.optimizer.options.OptimizerOptions`
switch and an ``order`` (the meta-optimizer, :mod:`minigraph.optimizer.meta`, runs the
switched-on passes by increasing order)::

    @register_pass("common_subexpression", order=30)
    def eliminate_common_subexpressions(item: GraphItem) -> GraphItem:
        ...edit item.nodes (item.add / remove / forward / item.touch())...
        return item

The contract every pass keeps:

* **Results bit for bit.** Running the rewritten graph gives every fetch the exact bits the
  original gives, on every backend (native, reference, float64), for every feed; only
  opt-in passes (off by default) may change rounding, and say so.
* **Names.** ``item.preserved`` (fetched and fed tensors' nodes, targets) keep their names,
  their op's outputs and their meaning; other nodes may be dropped, merged or replaced. A
  node that replaces a chain takes the name of the chain's *last* node, so consumers and
  fetches of that tensor still find it.
* **Feeds cut.** A fed tensor's value is the caller's: never fold, forward or fuse through
  it (``item.is_fed``).
* **State and effects.** Never merge, fold, drop (unless unreachable) or reorder a stateful
  op (``op_def.is_stateful``: variables, their updates, random ops); keep every control
  edge's ordering (an edge to a removed node moves to that node's own control inputs or
  data sources).
* **Record changes.** Edit through ``GraphItem``'s helpers or call ``item.touch()`` after
  editing ``Node`` records in place, so shapes are recomputed (``item.output``) and the
  graph is rebuilt; a pass that changes nothing leaves the item untouched (then the session
  runs the original graph, at no cost).
* **Static information.** ``item.output("x:0")`` gives the dtype and static shape of a tensor
  (from the source graph while the name is the source's: a rewrite keeps every tensor's
  meaning under its name); passes must not assume more than those (feeds match them). A
  pass that changes a node's op or attrs in place sets ``node.origin = None`` (the node is
  then rebuilt with every check instead of from its source op's specs).

A pass that rewrites op patterns inside the remapper (a fusion) registers with
:func:`minigraph.optimizer.remapper.register_fusion` instead: the remapper runs those in
order, and the ``remapper`` switch turns them all off.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from minigraph.optimizer.item import GraphItem

Rewrite = Callable[[GraphItem], GraphItem]


@dataclass(frozen=True)
class GraphPass:
    """A registered pass: its switch's name, its place in the pipeline and its function."""

    name: str
    order: int
    rewrite: Rewrite

    def __call__(self, item: GraphItem) -> GraphItem:
        return self.rewrite(item)


class RewriteRegistry:
    """Named rewrites, each with an ``order``: the graph passes here, the remapper's fusions
    in :mod:`minigraph.optimizer.remapper`. ``kind`` names an entry in the error a second
    registration of one name raises."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, GraphPass] = {}

    def register(self, name: str, order: int) -> Callable[[Rewrite], Rewrite]:
        """A decorator registering its function as ``name``, run at ``order``."""

        def register(rewrite: Rewrite) -> Rewrite:
            if name in self._entries:
                raise ValueError(f"{self.kind} '{name}' is already registered")
            self._entries[name] = GraphPass(name, order, rewrite)
            return rewrite

        return register

    def ordered(self) -> list[GraphPass]:
        """Every entry, by increasing order."""
        return sorted(self._entries.values(), key=lambda p: p.order)


_PASSES = RewriteRegistry("graph pass")


def register_pass(name: str, order: int) -> Callable[[Rewrite], Rewrite]:
    """Register ``rewrite`` as the pass ``name`` (an ``OptimizerOptions`` field), run at
    ``order`` among the others."""
    return _PASSES.register(name, order)


def registered_passes() -> list[GraphPass]:
    """Every registered pass, in the order the meta-optimizer runs them."""
    return _PASSES.ordered()
