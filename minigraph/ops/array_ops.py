"""Graph inputs and plumbing: Placeholder, Const, Identity."""

from __future__ import annotations

from typing import Any

import numpy as np

from minigraph.framework import dtypes, limits
from minigraph.framework.dtypes import DType
from minigraph.framework.errors import InvalidArgumentError
from minigraph.framework.graph import Output
from minigraph.framework.op_def import (
    ArgDef,
    AttrDef,
    OpDef,
    build_operation,
    make_wrapper,
    register_constant_op,
    register_op,
    required,
)
from minigraph.framework.scope import Scope
from minigraph.framework.tensor_shape import TensorShape

# The wrappers minigraph.ops exports.
__all__ = ["Const", "Identity", "NoOp", "Placeholder"]

PLACEHOLDER = register_op(OpDef(
    name="Placeholder",
    inputs=[],
    outputs=[ArgDef("output", type_attr="dtype")],
    attrs=[required("dtype", "type"), AttrDef("shape", "shape", default=TensorShape(None))],
    shape_fn=lambda ctx: [ctx.attrs["shape"]],
))
Placeholder = make_wrapper(PLACEHOLDER)

CONST = register_op(OpDef(
    name="Const",
    inputs=[],
    outputs=[ArgDef("output", type_attr="dtype")],
    attrs=[required("value", "tensor"), required("dtype", "type")],
    shape_fn=lambda ctx: [TensorShape(ctx.attrs["value"].shape)],
))


def Const(scope: Scope, value: Any, dtype: DType | None = None) -> Output:
    """A constant tensor from a numpy array, scalar or (nested) list.

    Without ``dtype``, numpy arrays keep their dtype and Python floats/ints become float32/int32
    (TensorFlow's conversion rule).
    """
    if dtype is not None:
        dtype = dtypes.as_dtype(dtype)
    if isinstance(value, (np.ndarray, np.generic)):
        try:
            dtypes.as_dtype(value.dtype)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"Const: cannot make a constant of dtype {value.dtype}: "
                                       f"{exc}") from None
        # a copy (the caller may change its array later) that keeps a broadcast view's
        # repeated axes unexpanded; dtype: an explicit cast the caller asked for
        array = limits.compact_copy(np.asarray(value), "Const: value",
                                    None if dtype is None else dtype.np_dtype)
    else:
        array = dtypes.python_to_array(value, dtype, "Const: value")
    inferred = dtypes.as_dtype(array.dtype)
    array.setflags(write=False)
    return build_operation(scope, CONST, [], {"value": array, "dtype": inferred}).outputs[0]


register_constant_op(Const)  # values given to any op's inputs become Const nodes


IDENTITY = register_op(OpDef(
    name="Identity",
    inputs=[ArgDef("input", type_attr="T")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=[required("T", "type")],
    shape_fn=lambda ctx: [ctx.input_shapes[0]],
))
Identity = make_wrapper(IDENTITY)

# Does nothing: a target that groups control inputs (frozen TF 2 graphs hang every output
# on one), so ``Run(targets=[no_op])`` runs them all.
NoOp = make_wrapper(register_op(OpDef(name="NoOp", inputs=[], outputs=[])))
