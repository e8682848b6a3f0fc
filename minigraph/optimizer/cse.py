"""Common-subexpression elimination (grappler's ``ArithmeticOptimizer`` dedup stage).

Two nodes compute the same value when they have the same op type, attrs, device, data
inputs (in order) and control inputs (as a set): the later one is dropped and its readers
read the first. Never merged: stateful ops (variables, their updates, random ops,
anything ``op_def.is_stateful``), ops with ref inputs, ``Placeholder``, preserved nodes
(fetched, fed, targets) as the one dropped, and constants larger than ``MAX_CONST_BYTES``
(comparing weights costs more than it saves). Nodes are visited in topological order, so
duplicates of duplicates merge too.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from minigraph.optimizer.item import GraphItem, Node, is_control, parse_input, tensor_name
from minigraph.optimizer.passes import register_pass

MAX_CONST_BYTES = 1 << 16


def _attr_key(value: Any) -> Any:
    """A hashable, exact form of an attr value (arrays by dtype, shape and bytes)."""
    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_attr_key(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple(sorted((k, _attr_key(v)) for k, v in value.items())))
    if isinstance(value, float):
        return ("float", np.float64(value).tobytes())  # -0.0 and NaNs by their bits
    try:
        hash(value)
    except TypeError:
        return ("id", id(value))
    return (type(value).__name__, value)


def _mergeable(node: Node) -> bool:
    op_def = node.op_def
    if op_def.is_stateful or node.op == "Placeholder" or any(a.is_ref for a in op_def.inputs):
        return False
    value = node.attrs.get("value")
    return not (node.op == "Const" and isinstance(value, np.ndarray)
                and value.nbytes > MAX_CONST_BYTES)


@register_pass("common_subexpression", order=30)
def eliminate_common_subexpressions(item: GraphItem) -> GraphItem:
    preserved = item.preserved
    alias: dict[str, str] = {}  # dropped node -> the node it duplicates
    seen: dict[tuple, str] = {}
    for node in item._ordered():
        _rename_inputs(node, alias)
        if not _mergeable(node):
            continue
        key = (node.op, node.device, tuple(node.data_inputs),
               frozenset(node.control_inputs),
               tuple(sorted((k, _attr_key(v)) for k, v in node.attrs.items())))
        first = seen.get(key)
        if first is None:
            seen[key] = node.name
        elif node.name not in preserved:
            alias[node.name] = first
            item.remove(node.name)
    return item


def _rename_inputs(node: Node, alias: dict[str, str]) -> None:
    """Point ``node``'s inputs at the kept node of each merged one."""
    if not alias:
        return
    renamed = []
    for text in node.inputs:
        name, index = parse_input(text)
        if name in alias:
            text = f"^{alias[name]}" if is_control(text) else tensor_name(alias[name], index)
        if text not in renamed or not is_control(text):
            renamed.append(text)
    node.inputs = renamed
