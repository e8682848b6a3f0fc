"""Constant folding with shape materialization (grappler's ``ConstantFolding``).

Two kinds of node become ``Const`` nodes of their value:

* **Shape materialization**: ``Shape``, ``ShapeN``, ``Size`` and ``Rank`` of a tensor whose
  static shape is fully defined (a feed must match the static shape, so the value is the
  same for every run), whatever computes that tensor.
* **Integer subgraphs**: a stateless node whose data inputs are all constants (not fed) and
  whose inputs and outputs are all integers or booleans: ``BroadcastGradientArgs`` of
  materialized shapes, reduction indices (``Range`` over a known rank), shape arithmetic.
  Integer results are the same on every backend, which is what keeps this pass bit-exact;
  floating-point nodes are never folded (a folded value would be the reference kernel's
  rounding, not the session backend's).

A result is folded only when it is small (``MAX_FOLD_BYTES``): a graph must not grow by
constants. A single-output node keeps its name (its Const replaces it); a multi-output one
(``ShapeN``, ``BroadcastGradientArgs``) is replaced by one Const per output,
``<name>/folded_<i>``, unless it is preserved. The replaced node's control inputs stay on
its Const. Nodes are visited in topological order, so chains fold through.
"""

from __future__ import annotations

import numpy as np

from minigraph.backends import reference
from minigraph.backends.registry import KernelContext, get_kernel
from minigraph.framework import dtypes
from minigraph.framework.errors import (
    InvalidArgumentError,
    NotFoundError,
    ResourceExhaustedError,
    UnimplementedError,
)
from minigraph.framework.graph import Operation, Output
from minigraph.framework.limits import check_allocation
from minigraph.framework.op_def import RunContext, RunShapeContext, run_shape_fn
from minigraph.optimizer.item import GraphItem, Node, is_control, parse_input, tensor_name
from minigraph.optimizer.passes import register_pass

MAX_FOLD_BYTES = 1 << 14
SHAPE_OPS = frozenset({"Shape", "ShapeN", "Size", "Rank"})
_EXACT = frozenset({dtypes.int32, dtypes.int64, dtypes.bool_})
# ops whose results' sizes the shape function cannot say but their inputs bound (a rank)
BOUNDED = frozenset({"BroadcastGradientArgs", "ReducedShape", "ConcatOffset",
                     "InvertPermutation"})


def _materialized(node: Node, inputs: list[Output]) -> list[np.ndarray] | None:
    """The value of a shape op of fully defined static shapes, else None."""
    if not all(inp.shape.is_fully_defined() for inp in inputs):
        return None
    out = node.attrs.get("out_type", dtypes.int32).np_dtype
    if node.op in ("Shape", "ShapeN"):
        return [np.array(inp.shape.as_list(), out) for inp in inputs]
    if node.op == "Size":
        return [np.array(inputs[0].shape.num_elements(), out)]
    return [np.array(inputs[0].shape.rank, np.int32)]


def _evaluated(op: Operation, values: list[np.ndarray]) -> list[np.ndarray] | None:
    """``op``'s reference kernel on the constant ``values``, after the checks a session
    makes (the op's ``validate`` and its shape function on the values); None when they
    raise (the node then stays, and a run raises where it always did)."""
    try:
        if op.op_def.validate is not None:
            op.op_def.validate(RunContext(op), values)
        shapes = run_shape_fn(op.op_def, RunShapeContext(op, values, [v.shape for v in values]))
        if op.type not in BOUNDED and not (
                all(shape.is_fully_defined() for shape in shapes) and sum(
                    shape.num_elements() * output.dtype.itemsize
                    for shape, output in zip(shapes, op.outputs)) <= MAX_FOLD_BYTES):
            return None  # a result of unknown or large size is never computed here
        for shape, output in zip(shapes, op.outputs):
            check_allocation(shape, output.dtype.itemsize, f"{op.type} '{op.name}'")
        kernel = get_kernel(op, "reference")
        results = kernel.kernel(op, values, KernelContext("reference", reference))
    except (InvalidArgumentError, ResourceExhaustedError, UnimplementedError, NotFoundError):
        return None
    results = [np.asarray(r) for r in results]
    if any(r.dtype != o.dtype.np_dtype or not s.is_compatible_with(tuple(r.shape))
           for r, o, s in zip(results, op.outputs, shapes)):
        return None
    return results


def _fold(node: Node, item: GraphItem, constants: dict[str, np.ndarray]
          ) -> list[np.ndarray] | None:
    """The values of ``node``'s outputs when it folds, else None."""
    if item.is_fed(node.name) or node.op == "Const" or not node.data_inputs:
        return None
    # the node's op (inputs of the same specs, passes keep them): static shapes and dtypes
    op = node.origin or item.graph().get_operation(node.name)
    if op.op_def.is_stateful or not op.outputs:
        return None
    if node.op in SHAPE_OPS:
        values = _materialized(node, list(op.inputs))
    else:
        keys = [tensor_name(*parse_input(text)) for text in node.data_inputs]
        if not all(key in constants for key in keys):
            return None
        if not all(o.dtype in _EXACT for o in (*op.inputs, *op.outputs)):
            return None
        values = _evaluated(op, [constants[key] for key in keys])
    if values is None or sum(v.nbytes for v in values) > MAX_FOLD_BYTES:
        return None
    return values


def _const(name: str, value: np.ndarray, controls: list[str], device: str) -> Node:
    value = np.array(value)
    value.setflags(write=False)
    return Node(name, "Const", [f"^{c}" for c in controls],
                {"value": value, "dtype": dtypes.as_dtype(value.dtype)}, device)


@register_pass("constant_folding", order=40)
def fold_constants(item: GraphItem) -> GraphItem:
    preserved = item.preserved
    constants: dict[str, np.ndarray] = {}  # tensor text -> value, for unfed constants
    alias: dict[str, str] = {}  # output of a replaced multi-output node -> its Const
    for node in item._ordered():
        if alias:
            node.inputs = [text if is_control(text)
                           else alias.get(tensor_name(*parse_input(text)), text)
                           for text in node.inputs]
        if node.op == "Const":
            if not item.is_fed(node.name, 0):
                constants[node.name] = node.attrs["value"]
            continue
        values = _fold(node, item, constants)
        if values is None:
            continue
        if len(values) == 1:
            item.nodes[node.name] = _const(node.name, values[0], node.control_inputs,
                                           node.device)
            constants[node.name] = values[0]
        elif node.name not in preserved:
            names = []
            for index, value in enumerate(values):
                name = item.unique_name(f"{node.name}/folded_{index}")
                item.add(_const(name, value, node.control_inputs, node.device))
                alias[tensor_name(node.name, index)] = name
                constants[name] = value
                names.append(name)
            item.remove(node.name)
            _redirect_controls(item, node.name, names[0])
        else:
            continue
        item.touch()
    return item


def _redirect_controls(item: GraphItem, old: str, new: str) -> None:
    """``^old`` edges become ``^new``."""
    for node in item:
        if f"^{old}" in node.inputs:
            node.inputs = [f"^{new}" if text == f"^{old}" else text for text in node.inputs]
