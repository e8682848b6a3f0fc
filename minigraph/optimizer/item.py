"""``GraphItem``: the graph a pass rewrites, as grappler's ``GrapplerItem`` holds it.

Passes work on :class:`Node` records, the Python form of TensorFlow's ``NodeDef``: a name,
an op type, inputs written as text (``"x"`` is output 0 of node ``x``, ``"x:1"`` output 1,
``"^x"`` a control edge, after the data inputs), every attr (defaults included, as an
:class:`~minigraph.framework.graph.Operation` holds them) and a device. A rewrite edits
records (drop a node, point an input elsewhere, add a node) without re-running anything;
:meth:`GraphItem.to_graph` then builds a new :class:`~minigraph.framework.graph.Graph` from
them with ``build_operation``, exactly as ``import_graph_def`` builds one, so every shape
function and attr check runs again on the rewritten graph. Node names are kept, so a fetch,
feed or target of the original graph finds its counterpart by name.

The item also says what must survive (``preserved``): fetched and fed tensors' nodes and
the targets keep their names and outputs, and no pass reads through a fed tensor (its
value is whatever the caller feeds, not what its node computes).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from minigraph.framework.graph import Graph, Operation, Output
from minigraph.framework.op_def import OpDef, build_operation, get_op_def
from minigraph.framework.scope import Scope
from minigraph.framework.toposort import stable_topological_order


def tensor_name(node: str, index: int) -> str:
    """The input text of output ``index`` of ``node`` (``"x"`` for output 0, as TF writes)."""
    return node if index == 0 else f"{node}:{index}"


def parse_input(text: str) -> tuple[str, int]:
    """``"x"`` -> ("x", 0), ``"x:2"`` -> ("x", 2), ``"^x"`` -> ("x", -1) (a control edge)."""
    if text.startswith("^"):
        return text[1:], -1
    name, sep, index = text.rpartition(":")
    if sep and index.isdigit():
        return name, int(index)
    return text, 0


def is_control(text: str) -> bool:
    return text[:1] == "^"


@dataclass
class Node:
    """One node: TF's ``NodeDef`` with minigraph attr values (every default filled in)."""

    name: str
    op: str
    inputs: list[str] = field(default_factory=list)
    attrs: dict[str, Any] = field(default_factory=dict)
    device: str = ""
    # the source graph's operation this node copies, while its op and attrs are that one's
    # (a pass changing either makes a new Node or sets this None): rebuilding it then takes
    # that op's output specs instead of running its checks and shape function again
    origin: Operation | None = field(default=None, repr=False, compare=False)

    @property
    def data_inputs(self) -> list[str]:
        return [text for text in self.inputs if not is_control(text)]

    @property
    def control_inputs(self) -> list[str]:
        """The names of the nodes this one runs after (without the ``^``)."""
        return [text[1:] for text in self.inputs if is_control(text)]

    @property
    def op_def(self) -> OpDef:
        return get_op_def(self.op)

    @classmethod
    def from_operation(cls, op: Operation) -> Node:
        inputs = [tensor_name(inp.op.name, inp.index) for inp in op.inputs]
        inputs += [f"^{control.name}" for control in op.control_inputs]
        return cls(op.name, op.type, inputs, dict(op.attrs), op.device, op)


class GraphItem:
    """The nodes a run needs, the run's fetches, feeds and targets, and the graph they came
    from (whose static shapes and dtypes :meth:`output` reports until a pass changes the
    nodes; afterwards from the rewritten graph, built on demand)."""

    def __init__(self, nodes: Iterable[Node], fetches: Sequence[str] = (),
                 feeds: Iterable[str] = (), targets: Sequence[str] = (),
                 graph: Graph | None = None) -> None:
        self.nodes: dict[str, Node] = {node.name: node for node in nodes}
        self.fetches = [tensor_name(*parse_input(f)) for f in fetches]
        self.feeds = {tensor_name(*parse_input(f)) for f in feeds}
        self.targets = list(targets)
        self._fed_nodes = {parse_input(f)[0] for f in self.feeds}
        self._source = graph  # the graph the nodes came from
        self._graph = graph  # the graph ``nodes`` describe, unless ``stale``
        self.stale = graph is None
        self.changed = False  # whether the nodes differ from the source graph's

    # -- construction --------------------------------------------------------------------
    @classmethod
    def from_graph(cls, graph: Graph, fetches: Sequence[Output] = (),
                   feeds: Iterable[Output] = (), targets: Sequence[Operation] = ()
                   ) -> GraphItem:
        """The item of ``graph`` for these fetches, feeds and targets: every node of the
        graph (pruning is a pass); with no fetches and targets, the whole graph."""
        return cls((Node.from_operation(op) for op in graph.operations()),
                   [f.name for f in fetches], [f.name for f in feeds],
                   [t.name for t in targets], graph)

    # -- queries -------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Node]:
        return iter(list(self.nodes.values()))

    def __len__(self) -> int:
        return len(self.nodes)

    def __contains__(self, name: str) -> bool:
        return name in self.nodes

    def node(self, name: str) -> Node:
        return self.nodes[name]

    @property
    def preserved(self) -> set[str]:
        """Nodes a pass must keep, by name, with their outputs: fetched, fed, targeted."""
        return ({parse_input(f)[0] for f in self.fetches}
                | {parse_input(f)[0] for f in self.feeds} | set(self.targets))

    def is_fed(self, node: str, index: int | None = None) -> bool:
        """Whether output ``index`` of ``node`` (any output, for None) is fed."""
        if index is not None:
            return tensor_name(node, index) in self.feeds
        return node in self._fed_nodes

    def consumers(self) -> dict[str, list[Node]]:
        """Node name -> the nodes reading any of its outputs or running after it."""
        found: dict[str, list[Node]] = {}
        for node in self.nodes.values():
            for text in node.inputs:
                found.setdefault(parse_input(text)[0], []).append(node)
        return found

    def uses(self) -> dict[str, int]:
        """Tensor input text -> how many data inputs read it, fetches included."""
        counts: dict[str, int] = {}
        for node in self.nodes.values():
            for text in node.data_inputs:
                text = tensor_name(*parse_input(text))
                counts[text] = counts.get(text, 0) + 1
        for text in self.fetches:
            counts[text] = counts.get(text, 0) + 1
        return counts

    def output(self, text: str) -> Output:
        """The static dtype and shape of a tensor (an :class:`Output` holding them). Passes
        keep every tensor's meaning under its name, so a name the source graph has is
        described by the source graph's output, however the nodes changed since; a new
        name by the graph of the current nodes (built on demand)."""
        name, index = parse_input(text)
        if self._source is not None:
            try:
                return self._source.get_operation(name).outputs[index]
            except KeyError:
                pass
        return self.graph().get_operation(name).outputs[index]

    def graph(self) -> Graph:
        """The graph of the current nodes (built again only after a change)."""
        return self.to_graph(notify=False)

    # -- edits ---------------------------------------------------------------------------
    def touch(self) -> None:
        """Say that the nodes changed (the edit helpers below do)."""
        self.changed = self.stale = True

    def add(self, node: Node) -> Node:
        if node.name in self.nodes:
            raise ValueError(f"GraphItem: duplicate node name '{node.name}'")
        self.nodes[node.name] = node
        self.touch()
        return node

    def remove(self, name: str) -> None:
        del self.nodes[name]
        self.touch()

    def unique_name(self, wanted: str) -> str:
        """``wanted``, or ``wanted_1``, ``wanted_2``... whichever no node has."""
        name, count = wanted, 0
        while name in self.nodes:
            count += 1
            name = f"{wanted}_{count}"
        return name

    def forward(self, old: str, new: str) -> None:
        """Every data input reading tensor ``old`` reads ``new`` instead."""
        old = tensor_name(*parse_input(old))
        for node in self.nodes.values():
            for i, text in enumerate(node.inputs):
                if not is_control(text) and tensor_name(*parse_input(text)) == old:
                    node.inputs[i] = new
                    self.touch()

    def keep_only(self, names: set[str]) -> None:
        """Drop every node not in ``names``."""
        if len(names) != len(self.nodes):
            self.nodes = {name: node for name, node in self.nodes.items() if name in names}
            self.touch()

    # -- output --------------------------------------------------------------------------
    def to_graph(self, notify: bool = True) -> Graph:
        """The graph of the current nodes: the source graph itself when no pass changed
        them, else a new one (``notify``: seen by ``on_graph_created`` callbacks, as a graph
        handed to the user is)."""
        if self._graph is None or self.stale:
            self._graph = self._build(notify)
            self.stale = False
        return self._graph

    def _build(self, notify: bool) -> Graph:
        with warnings.catch_warnings():  # the source graph's ops warned when first built
            warnings.simplefilter("ignore", DeprecationWarning)
            return self._build_nodes(Graph(notify=notify))

    def _build_nodes(self, graph: Graph) -> Graph:
        root = Scope(graph)
        for node in self._ordered():
            op_def = node.op_def
            sources = []
            for text in node.data_inputs:
                name, index = parse_input(text)
                sources.append(graph.get_operation(name).outputs[index])
            controls = [graph.get_operation(name) for name in node.control_inputs]
            origin = node.origin
            if (origin is not None and origin.type == node.op and len(sources) == len(
                    origin.inputs) and all(a.dtype is b.dtype and a.shape == b.shape
                                           for a, b in zip(sources, origin.inputs))):
                # the same op, attrs and input specs as a node that passed every check
                graph.add_operation(Operation(
                    graph, node.name, origin.op_def, sources, controls, origin.attrs,
                    node.device, [(o.dtype, o.shape) for o in origin.outputs]))
                continue
            scope = (root.WithOpName(node.name).WithDevice(node.device)
                     .WithControlDependencies(controls))
            build_operation(scope, op_def, _arguments(op_def, node.attrs, sources),
                            node.attrs)
        return graph

    def _ordered(self) -> list[Node]:
        """The nodes with every input before its consumers; among ready nodes, the one
        first in ``nodes`` goes first, so an order that is already topological is kept."""
        nodes = list(self.nodes.values())
        sources = {node.name: {parse_input(text)[0] for text in node.inputs} for node in nodes}
        order, stuck = stable_topological_order([node.name for node in nodes], sources)
        if stuck:
            raise ValueError(f"GraphItem: the rewritten graph has a cycle or a missing input "
                             f"(at {sorted(stuck)[:5]})")
        return [nodes[i] for i in order]


def _arguments(op_def: OpDef, attrs: dict[str, Any], sources: list[Output]) -> list[Any]:
    """The flat input tensors grouped per op-def argument (a list argument's as a list)."""
    arguments, start = [], 0
    for arg in op_def.inputs:
        length = arg.length(attrs)
        arguments.append(sources[start:start + length] if arg.is_list else sources[start])
        start += length
    return arguments
