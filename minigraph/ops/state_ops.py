"""Variables: state that lives in a ClientSession across Run calls.

``Variable(scope, shape, dtype)`` declares one; reading its output gives the current value.
``Assign(scope, variable, value)`` replaces it (initializers are Assigns run once as
targets). ``RandomUniform`` and the initializer helpers build initial values.
Variables are keyed by their op name, which is what checkpoints store.
"""

from __future__ import annotations

import math

import numpy as np

from minigraph.framework import dtypes
from minigraph.framework.dtypes import DType
from minigraph.framework.errors import InvalidArgumentError
from minigraph.framework.gradient_registry import NotDifferentiable
from minigraph.framework.graph import Output
from minigraph.framework.op_def import (
    ArgDef,
    AttrDef,
    InferenceContext,
    OpDef,
    make_wrapper,
    register_op,
    required,
)
from minigraph.framework.scope import Scope
from minigraph.framework.tensor_shape import TensorShape
from minigraph.ops.array_ops import Const
from minigraph.ops.math_ops import Add, Fill, Mul

# The wrappers minigraph.ops exports.
__all__ = ["Assign", "RandomUniform", "Variable"]

VARIABLE = register_op(OpDef(
    name="Variable",
    inputs=[],
    outputs=[ArgDef("ref", type_attr="dtype")],
    attrs=[required("shape", "shape"), required("dtype", "type"),
           AttrDef("container", "string", default="",
                   doc="TF's resource container; minigraph keeps every variable in the "
                       "session, and the attr only travels with GraphDefs."),
           AttrDef("shared_name", "string", default="",
                   doc="TF's sharing name; kept for GraphDefs, as container.")],
    shape_fn=lambda ctx: [ctx.attrs["shape"]],
    is_stateful=True,
))
Variable = make_wrapper(VARIABLE)


def variable_of(ref: Output, op_type: str, input_name: str) -> Output:
    """Check that ``ref`` is a Variable's output (the only thing stateful ops may update)."""
    if ref.op.type != "Variable":
        raise InvalidArgumentError(f"{op_type}: input '{input_name}' must be the output of a "
                                   f"Variable, got '{ref.name}' of op type {ref.op.type}")
    return ref


def _assign_shape(ctx: InferenceContext) -> list[TensorShape]:
    variable_of(ctx.inputs[0], "Assign", "ref")
    ref, value = ctx.input_shapes
    if ctx.attrs["validate_shape"]:
        return [ctx.merge_shapes(ref, value, f"input 'value' must have the variable's shape "
                                             f"{ref}, got {value}")]
    return [value]


ASSIGN = register_op(OpDef(
    name="Assign",
    inputs=[ArgDef("ref", type_attr="T", is_ref=True), ArgDef("value", type_attr="T")],
    outputs=[ArgDef("output_ref", type_attr="T")],
    attrs=[required("T", "type"), AttrDef("validate_shape", "bool", default=True),
           AttrDef("use_locking", "bool", default=True)],
    shape_fn=_assign_shape,
    is_stateful=True,
))
Assign = make_wrapper(ASSIGN)


def _random_shape(ctx: InferenceContext) -> list[TensorShape]:
    dims = ctx.shape_input("shape")
    return [TensorShape(dims) if dims is not None
            else TensorShape.unknown(ctx.input_shapes[0][0])]


RANDOM_UNIFORM = register_op(OpDef(
    name="RandomUniform",
    inputs=[ArgDef("shape", type_attr="T")],
    outputs=[ArgDef("output", type_attr="dtype")],
    attrs=[AttrDef("seed", "int", default=0), AttrDef("seed2", "int", default=0),
           required("dtype", "type", allowed=(dtypes.float16, dtypes.bfloat16, dtypes.float32,
                                              dtypes.float64)),
           required("T", "type", allowed=dtypes.INTEGERS)],
    shape_fn=_random_shape,
    is_stateful=True,
))
RandomUniform = make_wrapper(RANDOM_UNIFORM)
NotDifferentiable("Variable", "Assign", "RandomUniform")


def glorot_uniform(scope: Scope, shape: list[int], *, fan_in: int, fan_out: int,
                   dtype: DType = dtypes.float32, seed: int = 0) -> Output:
    """Uniform in [-limit, limit], limit = sqrt(6 / (fan_in + fan_out)) (Glorot & Bengio)."""
    limit = math.sqrt(6.0 / (fan_in + fan_out))
    unit = RandomUniform(scope, Const(scope, list(shape)), dtype=dtype, seed=seed, seed2=1)
    return Add(scope, Mul(scope, unit, Const(scope, 2 * limit, dtype)),
               Const(scope, -limit, dtype))


def constant_fill(scope: Scope, shape: list[int], value: float,
                  dtype: DType = dtypes.float32) -> Output:
    """A tensor of ``shape`` filled with ``value`` (zeros/ones initializers)."""
    return Fill(scope, Const(scope, np.array(shape, np.int32)), Const(scope, value, dtype))
