"""Graph inputs and plumbing: Placeholder, Const, Identity."""

from __future__ import annotations

from typing import Any

import numpy as np

from minigraph.framework import dtypes
from minigraph.framework.dtypes import DType
from minigraph.framework.errors import InvalidArgumentError
from minigraph.framework.graph import Output
from minigraph.framework.op_def import (
    ArgDef,
    AttrDef,
    OpDef,
    build_operation,
    make_wrapper,
    register_op,
    required,
)
from minigraph.framework.scope import Scope
from minigraph.framework.tensor_shape import TensorShape

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
    try:
        if dtype is not None:
            dtype = dtypes.as_dtype(dtype)
            array = np.array(value, dtype=dtype.np_dtype)
        else:
            array = np.array(value)
    except (TypeError, ValueError) as exc:  # ragged lists, strings for a float dtype...
        raise InvalidArgumentError(f"Const: cannot make a tensor of {value!r}: {exc}") from None
    if dtype is None and not isinstance(value, (np.ndarray, np.generic)):
        if array.dtype == np.float64:
            array = array.astype(np.float32)
        elif array.dtype == np.int64:
            array = array.astype(np.int32)
    try:
        inferred = dtypes.as_dtype(array.dtype)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"Const: cannot make a constant of {value!r}: {exc}") from None
    array.setflags(write=False)
    return build_operation(scope, CONST, [], {"value": array, "dtype": inferred}).outputs[0]



IDENTITY = register_op(OpDef(
    name="Identity",
    inputs=[ArgDef("input", type_attr="T")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=[required("T", "type")],
    shape_fn=lambda ctx: [ctx.input_shapes[0]],
))
Identity = make_wrapper(IDENTITY)
