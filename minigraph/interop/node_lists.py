"""NodeDef lists as the importer holds them before building: the helpers shared by the
lifting of lowered control flow (``loops.py``: while frames; ``conds.py``: tf.cond).

A node list is GraphDef ``NodeDef`` messages with their inputs parsed apart, per node name:
``(source, output)`` entries, output ``-1`` for a control edge (``^source``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from minigraph.framework.errors import InvalidArgumentError
from minigraph.framework.names import shown
from minigraph.framework.toposort import stable_topological_order
from minigraph.interop import protos

Entry = tuple[str, int]  # (node, output); output -1: a control edge


def node_def(**fields: Any) -> Any:
    """A new NodeDef message."""
    return protos.message_class("tensorflow.NodeDef")(**fields)


def data(inputs: dict[str, list[Entry]], name: str) -> list[Entry]:
    """The data inputs of node ``name``."""
    return [entry for entry in inputs[name] if entry[1] >= 0]


def consumers(nodes: Sequence[Any], inputs: dict[str, list[Entry]]
              ) -> dict[str, list[tuple[str, int]]]:
    """source -> [(consumer, output index read; -1 for a control edge)]."""
    found: dict[str, list[tuple[str, int]]] = {}
    for node in nodes:
        for source, index in inputs[node.name]:
            found.setdefault(source, []).append((node.name, index))
    return found


def relay(node: Any, source: str, index: int, dtype: int) -> Any:
    """An Identity named like ``node`` (on its device) reading ``source:index``: what a
    lifted node leaves in place of a node its readers (and fetches by name) still read."""
    identity = node_def(name=node.name, op="Identity", device=node.device)
    identity.input.append(f"{source}:{index}")
    identity.attr["T"].type = dtype
    return identity


def relay_entry(identity: Any) -> Entry:
    """The parsed input of a :func:`relay`."""
    name, _, index = identity.input[0].rpartition(":")
    return name, int(index)


def copied(node: Any) -> Any:
    """A copy of a NodeDef, to change without changing the file's."""
    copy = type(node)()
    copy.CopyFrom(node)
    return copy


def without_inert_controls(nodes: list[Any], inputs: dict[str, list[Entry]],
                           placeholders: set[str]) -> dict[str, list[Entry]]:
    """``inputs`` without the control edges on *inert* nodes: ``Identity`` and ``NoOp``
    nodes that only read ``placeholders`` and other inert nodes. They are always ready and
    cannot fail, so waiting for them orders nothing. TF's lowering puts a loop body's or a
    branch's nodes in it with such edges (``^input_control_node``); without them the graph
    optimizer can drop the Identity relays (a third of an LSTM body's steps)."""
    names = [node.name for node in nodes]
    within = set(names)
    sources = {name: {s for s, _ in inputs[name] if s in within} for name in names}
    order, _ = stable_topological_order(names, sources)
    inert = set(placeholders)
    for position in order:
        node = nodes[position]
        if node.op in ("Identity", "NoOp") and all(s in inert for s, _ in inputs[node.name]):
            inert.add(node.name)
    return {name: [(s, i) for s, i in entries if i >= 0 or s not in inert]
            for name, entries in inputs.items()}


def check_arity(nodes: Sequence[Any], inputs: dict[str, list[Entry]],
                arity: dict[str, int]) -> None:
    """Each node of an op in ``arity`` has that many data inputs (a ``Merge`` as many as
    its attr ``N``): what TF's OpDef says, for the ops minigraph rewrites before building
    (it has no OpDef of them to check a node against)."""
    for node in nodes:
        wanted = node.attr["N"].i if node.op == "Merge" else arity.get(node.op)
        if wanted is None:
            continue
        count = len(data(inputs, node.name))
        if count != wanted:
            raise InvalidArgumentError(f"Node '{shown(node.name)}' (a {node.op}) has {count} "
                                       f"data inputs, expected {wanted}")
