"""Elementwise math ops beyond the arithmetic of ``math_ops``: what frozen Keras graphs use
(``Exp``, ``Sqrt``, ``Erf`` for GELU, ``Maximum``, ``SquaredDifference``, comparisons and
``SelectV2`` for masks...), with TensorFlow's names, inputs, outputs, attrs and allowed dtypes
(``core/ops/math_ops.cc``, restricted to minigraph's dtypes).

* unary, floats: ``Exp``, ``Log``, ``Log1p``, ``Expm1``, ``Sqrt``, ``Erf``, ``Erfc``,
  ``Floor``, ``Ceil``, ``Rint`` (half to even), ``Sin``, ``Cos``, ``Tan``, ``Asin``,
  ``Acos``, ``Atan``, ``Sinh``, ``Cosh``, ``Asinh``, ``Acosh``, ``Atanh``; numbers: ``Abs``,
  ``Round`` (half to even), ``Sign``; floats to bool: ``IsFinite``, ``IsInf``, ``IsNan``;
* binary, broadcasting like numpy: ``Maximum``, ``Minimum``, ``Pow``, ``SquaredDifference``,
  ``FloorDiv``, ``FloorMod``, ``TruncateDiv``, ``TruncateMod`` (numbers), ``DivNoNan``,
  ``MulNoNan``, ``Atan2`` (inputs ``y``, ``x``), ``Xlogy``, ``Xdivy``, ``Xlog1py`` (floats:
  0 where ``x`` is 0, whatever ``y``);
* comparisons (bool result): ``Less``, ``LessEqual``, ``Greater``, ``GreaterEqual``
  (numbers), ``NotEqual`` (any type, with ``Equal``'s ``incompatible_shape_error``);
  ``LogicalAnd``, ``LogicalOr``, ``LogicalNot`` (bool);
* ``Select`` (TF 1's rules: a scalar or same-shaped condition, or a vector picking rows) and
  ``SelectV2`` (all three broadcast);
* ``SqrtGrad``, the op ``Sqrt``'s gradient is (as in TF).

Integer ``FloorDiv``/``FloorMod``/``TruncateDiv``/``TruncateMod`` by zero and integer ``Pow``
to a negative power are refused
at run time with TF's words (``validate``). The gradients, TF's formulas written with
minigraph ops, are at the bottom.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from minigraph.framework import dtypes
from minigraph.framework.dtypes import DType
from minigraph.framework.gradient_registry import NotDifferentiable, RegisterGradient
from minigraph.framework.op_def import (
    ArgDef,
    AttrDef,
    InferenceContext,
    OpDef,
    RunContext,
    make_wrapper,
    register_op,
    required,
)
from minigraph.framework.tensor_shape import ShapeMismatch, TensorShape, dims_text
from minigraph.ops.array_ops import Const
from minigraph.ops.math_ops import (
    FLOATS,
    NUMBERS,
    Add,
    Mul,
    Neg,
    OnesLike,
    RealDiv,
    Reciprocal,
    Square,
    Sub,
    ZerosLike,
    binary_shape,
    broadcast_shapes,
    reduce_to_shape_of,
)
from minigraph.ops.nn_ops import equal_shape

# The wrappers minigraph.ops exports.
__all__ = [
    "Abs", "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atan2", "Atanh", "Ceil", "Cos", "Cosh",
    "DivNoNan", "Erf", "Erfc", "Exp", "Expm1", "Floor", "FloorDiv", "FloorMod", "Greater",
    "GreaterEqual", "IsFinite", "IsInf", "IsNan", "Less", "LessEqual", "Log", "Log1p",
    "LogicalAnd", "LogicalNot", "LogicalOr", "Maximum", "Minimum", "MulNoNan", "NotEqual", "Pow",
    "Rint", "Round", "Select", "SelectV2", "Sign", "Sin", "Sinh", "Sqrt", "SqrtGrad",
    "SquaredDifference", "Tan", "TruncateDiv", "TruncateMod", "Xdivy", "Xlog1py", "Xlogy",
]

BOOL = dtypes.bool_
Validate = Callable[[RunContext, list], None]


def _arg(name: str, fixed: DType | None) -> ArgDef:
    """An input or output typed by ``T``, or of the ``fixed`` dtype (bool)."""
    return ArgDef(name, dtype=fixed) if fixed else ArgDef(name, type_attr="T")


def _elementwise(name: str, inputs: tuple[str, ...], allowed: tuple | None, *,
                 output: str, output_dtype: DType | None = None, input_dtype: DType | None = None,
                 attrs: tuple = (), shape_fn=None, validate: Validate | None = None) -> OpDef:
    """An elementwise op: ``inputs`` typed ``T`` (from ``allowed``; None: any type) or all of
    ``input_dtype``; one output, typed ``T`` or ``output_dtype``; unary ops keep the shape,
    binary ones broadcast."""
    type_attrs = [] if input_dtype else [required("T", "type", allowed=allowed)]
    if shape_fn is None:
        shape_fn = binary_shape if len(inputs) == 2 else (lambda ctx: [ctx.input_shapes[0]])
    return register_op(OpDef(
        name=name,
        inputs=[_arg(n, input_dtype) for n in inputs],
        outputs=[_arg(output, output_dtype)],
        attrs=[*type_attrs, *attrs],
        shape_fn=shape_fn,
        validate=validate,
    ))


def _unary(name: str, allowed: tuple = FLOATS) -> type:
    return make_wrapper(_elementwise(name, ("x",), allowed, output="y"))


def _binary(name: str, allowed: tuple = NUMBERS, validate: Validate | None = None) -> type:
    return make_wrapper(_elementwise(name, ("x", "y"), allowed, output="z", validate=validate))


def _comparison(name: str) -> type:
    return make_wrapper(_elementwise(name, ("x", "y"), NUMBERS, output="z", output_dtype=BOOL))


def _host(value) -> np.ndarray:
    """A kernel input as a numpy array (a device array is read back)."""
    return value if isinstance(value, np.ndarray) else value.get()


def _nonzero_integer_divisor(ctx: RunContext, values: list) -> None:
    """TF refuses an integer division by zero (floats give inf/NaN)."""
    y = _host(values[1])
    if y.dtype.kind == "i" and not y.all():
        raise ctx.error("Integer division by zero (input 'y' holds a 0)")


def _non_negative_integer_exponent(ctx: RunContext, values: list) -> None:
    """TF refuses an integer base to a negative integer power (1/x is not an integer)."""
    y = _host(values[1])
    if y.dtype.kind == "i" and (y < 0).any():
        raise ctx.error("Integers to negative integer powers are not allowed (input 'y' holds "
                        "a negative value)")


# ----------------------------------------------------------------------------- unary

Exp = _unary("Exp")
Log = _unary("Log")
Log1p = _unary("Log1p")
Expm1 = _unary("Expm1")
Sqrt = _unary("Sqrt")
Erf = _unary("Erf")
Erfc = _unary("Erfc")
Floor = _unary("Floor")
Ceil = _unary("Ceil")
Sin = _unary("Sin")
Cos = _unary("Cos")
Tan = _unary("Tan")
Asin = _unary("Asin")
Acos = _unary("Acos")
Atan = _unary("Atan")
Sinh = _unary("Sinh")
Cosh = _unary("Cosh")
Asinh = _unary("Asinh")
Acosh = _unary("Acosh")
Atanh = _unary("Atanh")
Rint = _unary("Rint")
Abs = _unary("Abs", NUMBERS)
Round = _unary("Round", NUMBERS)
Sign = _unary("Sign", NUMBERS)


def _sqrt_grad_shape(ctx: InferenceContext) -> list[TensorShape]:
    y, dy = ctx.input_shapes
    return [ctx.merge_shapes(y, dy, f"inputs 'y' and 'dy' must have the same shape, got {y} "
                                    f"and {dy}")]


SqrtGrad = make_wrapper(_elementwise("SqrtGrad", ("y", "dy"), FLOATS, output="z",
                                     shape_fn=_sqrt_grad_shape))


def _predicate(name: str) -> type:
    """A float -> bool elementwise test."""
    return make_wrapper(_elementwise(name, ("x",), FLOATS, output="y", output_dtype=BOOL))


IsFinite = _predicate("IsFinite")
IsInf = _predicate("IsInf")
IsNan = _predicate("IsNan")

# ----------------------------------------------------------------------------- binary

Maximum = _binary("Maximum")
Minimum = _binary("Minimum")
Pow = _binary("Pow", validate=_non_negative_integer_exponent)
SquaredDifference = _binary("SquaredDifference")
FloorDiv = _binary("FloorDiv", validate=_nonzero_integer_divisor)
FloorMod = _binary("FloorMod", validate=_nonzero_integer_divisor)
DivNoNan = _binary("DivNoNan", FLOATS)
TruncateDiv = _binary("TruncateDiv", validate=_nonzero_integer_divisor)
TruncateMod = _binary("TruncateMod", validate=_nonzero_integer_divisor)
MulNoNan = _binary("MulNoNan", FLOATS)
Xlogy = _binary("Xlogy", FLOATS)
Xdivy = _binary("Xdivy", FLOATS)
Xlog1py = _binary("Xlog1py", FLOATS)
Atan2 = make_wrapper(_elementwise("Atan2", ("y", "x"), FLOATS, output="z"))

# ----------------------------------------------------------------------------- comparisons

Less = _comparison("Less")
LessEqual = _comparison("LessEqual")
Greater = _comparison("Greater")
GreaterEqual = _comparison("GreaterEqual")
NotEqual = make_wrapper(_elementwise(
    "NotEqual", ("x", "y"), None, output="z", output_dtype=BOOL,
    attrs=(AttrDef("incompatible_shape_error", "bool", default=True),), shape_fn=equal_shape))
LogicalAnd = make_wrapper(_elementwise("LogicalAnd", ("x", "y"), None, output="z",
                                       output_dtype=BOOL, input_dtype=BOOL))
LogicalOr = make_wrapper(_elementwise("LogicalOr", ("x", "y"), None, output="z",
                                      output_dtype=BOOL, input_dtype=BOOL))
LogicalNot = make_wrapper(_elementwise("LogicalNot", ("x",), None, output="y",
                                       output_dtype=BOOL, input_dtype=BOOL))

# ----------------------------------------------------------------------------- select


def _select_shape(ctx: InferenceContext) -> list[TensorShape]:
    """TF's Select: 't' and 'e' of one shape; 'condition' a scalar (picks one of them), of
    that same shape (elementwise), or a vector with one entry per row of 't'."""
    condition, t, e = ctx.input_shapes
    data = ctx.merge_shapes(t, e, f"Inputs to operation Select must have the same size and "
                                  f"shape: input 't' {dims_text(t)} != input 'e' {dims_text(e)}")
    if condition.rank is None or data.rank is None or condition.rank == 0:
        return [data]
    if condition.rank == 1 and data.rank == 0:
        raise ctx.error(f"'then' must be at least a vector, but saw shape: {dims_text(data)} "
                        f"(input 't', for the vector input 'condition' {dims_text(condition)})")
    if condition.rank == 1 and data.rank > 1:
        rows = data[0]
        if None not in (rows, condition[0]) and rows != condition[0]:
            raise ctx.error(f"Number of batches of 'then' must match size of 'cond', but saw: "
                            f"{rows} vs. {condition[0]} (inputs 't' and 'condition')")
        return [data.merge_with(TensorShape([condition[0]] + [None] * (data.rank - 1)))]
    return [ctx.merge_shapes(data, condition, f"Inputs to operation Select must have the same "
                                              f"size and shape: input 'condition' "
                                              f"{dims_text(condition)} != input 't' "
                                              f"{dims_text(data)}")]


def _select_v2_shape(ctx: InferenceContext) -> list[TensorShape]:
    """The three inputs broadcast together (numpy's rules)."""
    condition, t, e = ctx.input_shapes
    try:
        return [broadcast_shapes(broadcast_shapes(condition, t), e)]
    except ShapeMismatch:
        raise ctx.error(f"condition {dims_text(condition)}, then {dims_text(t)}, and else "
                        f"{dims_text(e)} must be broadcastable (inputs 'condition', 't' and "
                        f"'e')") from None


def _select(name: str, shape_fn) -> type:
    return make_wrapper(register_op(OpDef(
        name=name,
        inputs=[ArgDef("condition", dtype=BOOL), ArgDef("t", type_attr="T"),
                ArgDef("e", type_attr="T")],
        outputs=[ArgDef("output", type_attr="T")],
        attrs=[required("T", "type")],
        shape_fn=shape_fn,
    )))


Select = _select("Select", _select_shape)
SelectV2 = _select("SelectV2", _select_v2_shape)


# ----------------------------------------------------------------------------- gradients
# Each function returns d(loss)/d(input) for every input, given d(loss)/d(output)
# (TensorFlow's python/ops/math_grad.py formulas).

NotDifferentiable("Less", "LessEqual", "Greater", "GreaterEqual", "NotEqual", "LogicalAnd",
                  "LogicalOr", "LogicalNot", "FloorDiv", "TruncateDiv", "TruncateMod",
                  "IsFinite", "IsInf", "IsNan")


def _constant(scope, value: float, like):
    """A scalar constant of ``like``'s dtype (an int ``value`` fits integer types too)."""
    return Const(scope, value, like.dtype)


def _unary_gradient(op_type: str, derivative: Callable) -> None:
    """Register ``g * derivative(scope, op)`` as the gradient of a unary op."""
    @RegisterGradient(op_type)
    def gradient(scope, op, grads):
        return [Mul(scope, grads[0], derivative(scope, op))]

    gradient.__name__ = f"_{op_type.lower()}_grad"


def _erf_slope(scope, op, sign: float):
    """``sign * 2/sqrt(pi) * exp(-x^2)``: the derivative of erf (sign 1) or erfc (-1)."""
    x = op.inputs[0]
    return Mul(scope, _constant(scope, sign * 2 / np.sqrt(np.pi), x),
               Exp(scope, Neg(scope, Square(scope, x))))


_unary_gradient("Exp", lambda s, op: op.outputs[0])
_unary_gradient("Log", lambda s, op: Reciprocal(s, op.inputs[0]))
_unary_gradient("Log1p", lambda s, op: Reciprocal(s, Add(s, _constant(s, 1, op.inputs[0]),
                                                         op.inputs[0])))
_unary_gradient("Expm1", lambda s, op: Exp(s, op.inputs[0]))
_unary_gradient("Erf", lambda s, op: _erf_slope(s, op, 1.0))
_unary_gradient("Erfc", lambda s, op: _erf_slope(s, op, -1.0))
_unary_gradient("Abs", lambda s, op: Sign(s, op.inputs[0]))
_unary_gradient("Sin", lambda s, op: Cos(s, op.inputs[0]))
_unary_gradient("Cos", lambda s, op: Neg(s, Sin(s, op.inputs[0])))
_unary_gradient("Tan", lambda s, op: Square(s, Reciprocal(s, Cos(s, op.inputs[0]))))
_unary_gradient("Sinh", lambda s, op: Cosh(s, op.inputs[0]))
_unary_gradient("Cosh", lambda s, op: Sinh(s, op.inputs[0]))
_unary_gradient("Atan", lambda s, op: Reciprocal(s, Add(s, _constant(s, 1, op.inputs[0]),
                                                        Square(s, op.inputs[0]))))
_unary_gradient("Atanh", lambda s, op: Reciprocal(s, Sub(s, _constant(s, 1, op.inputs[0]),
                                                         Square(s, op.inputs[0]))))
# asinh' = 1 / cosh(asinh x), acosh' = 1 / sinh(acosh x): TF's forms, from the output
_unary_gradient("Asinh", lambda s, op: Reciprocal(s, Cosh(s, op.outputs[0])))
_unary_gradient("Acosh", lambda s, op: Reciprocal(s, Sinh(s, op.outputs[0])))


def _one_minus_square_root(scope, x):
    """sqrt(1 - x^2): asin' = 1 / it, acos' = -1 / it."""
    return Sqrt(scope, Sub(scope, _constant(scope, 1, x), Square(scope, x)))


_unary_gradient("Asin", lambda s, op: Reciprocal(s, _one_minus_square_root(s, op.inputs[0])))
_unary_gradient("Acos", lambda s, op: Neg(s, Reciprocal(s, _one_minus_square_root(
    s, op.inputs[0]))))


@RegisterGradient("Floor")
def _floor_grad(scope, op, grads):
    """Piecewise constant: zero almost everywhere."""
    return [None]


RegisterGradient("Ceil")(_floor_grad)
RegisterGradient("Round")(_floor_grad)
RegisterGradient("Rint")(_floor_grad)


@RegisterGradient("Sign")
def _sign_grad(scope, op, grads):
    """Zeros (TF returns zeros_like(x) rather than None)."""
    return [ZerosLike(scope, op.inputs[0])]


@RegisterGradient("Sqrt")
def _sqrt_grad(scope, op, grads):
    """y = sqrt(x): dx = g * 0.5 / y, the op SqrtGrad(y, g)."""
    return [SqrtGrad(scope, op.outputs[0], grads[0])]


@RegisterGradient("SqrtGrad")
def _sqrt_grad_grad(scope, op, grads):
    """z = 0.5 * dy / y: dz/dy = -z / y, dz/d(dy) = 0.5 / y."""
    y, z = op.inputs[0], op.outputs[0]
    ga = RealDiv(scope, grads[0], y)
    return [Neg(scope, Mul(scope, ga, z)), Mul(scope, _constant(scope, 0.5, y), ga)]


def _reduced_pair(scope, op, gx, gy) -> list:
    """The two cotangents of a broadcasting binary op, each summed back to its input's shape."""
    x, y = op.inputs
    return [reduce_to_shape_of(scope, gx, x), reduce_to_shape_of(scope, gy, y)]


def _routed_grad(mask_op: type):
    """Maximum (mask x >= y) and Minimum (x <= y): the cotangent goes to x where the mask
    holds (ties included), to y elsewhere."""
    def gradient(scope, op, grads):
        g = grads[0]
        x, y = op.inputs
        mask = mask_op(scope, x, y)
        zeros = ZerosLike(scope, g)
        return _reduced_pair(scope, op, SelectV2(scope, mask, g, zeros),
                             SelectV2(scope, mask, zeros, g))
    return gradient


RegisterGradient("Maximum")(_routed_grad(GreaterEqual))
RegisterGradient("Minimum")(_routed_grad(LessEqual))


@RegisterGradient("Pow")
def _pow_grad(scope, op, grads):
    """z = x^y: dx = g * y * x^(y-1); dy = g * z * log(x) where x > 0, else 0."""
    g = grads[0]
    x, y = op.inputs
    gx = Mul(scope, g, Mul(scope, y, Pow(scope, x, Sub(scope, y, _constant(scope, 1, y)))))
    positive = Greater(scope, x, ZerosLike(scope, x))
    safe_x = SelectV2(scope, positive, x, OnesLike(scope, x))
    log_x = SelectV2(scope, positive, Log(scope, safe_x), ZerosLike(scope, x))
    gy = Mul(scope, Mul(scope, g, op.outputs[0]), log_x)
    return _reduced_pair(scope, op, gx, gy)


@RegisterGradient("SquaredDifference")
def _squared_difference_grad(scope, op, grads):
    """z = (x - y)^2: dx = 2 g (x - y), dy = -dx."""
    x, y = op.inputs
    gx = Mul(scope, Mul(scope, _constant(scope, 2, x), grads[0]), Sub(scope, x, y))
    return _reduced_pair(scope, op, gx, Neg(scope, gx))


@RegisterGradient("FloorMod")
def _floor_mod_grad(scope, op, grads):
    """z = x - floor(x / y) * y: dx = g, dy = -g * floor(x / y)."""
    x, y = op.inputs
    return _reduced_pair(scope, op, grads[0],
                         Mul(scope, grads[0], Neg(scope, FloorDiv(scope, x, y))))


@RegisterGradient("DivNoNan")
def _div_no_nan_grad(scope, op, grads):
    """z = x / y (0 where y = 0): dx = g / y, dy = g * (-x / y) / y, each 0 where y = 0."""
    g = grads[0]
    x, y = op.inputs
    return _reduced_pair(scope, op, DivNoNan(scope, g, y),
                         Mul(scope, g, DivNoNan(scope, DivNoNan(scope, Neg(scope, x), y), y)))


@RegisterGradient("MulNoNan")
def _mul_no_nan_grad(scope, op, grads):
    """z = x * y (0 where y = 0): dx = g * y, dy = x * g, each 0 where its other factor
    is 0 (TF's mul_no_nan forms)."""
    g = grads[0]
    x, y = op.inputs
    return _reduced_pair(scope, op, MulNoNan(scope, g, y), MulNoNan(scope, x, g))


@RegisterGradient("Atan2")
def _atan2_grad(scope, op, grads):
    """z = atan2(y, x): dy = g * x / (x^2 + y^2), dx = -g * y / (x^2 + y^2)."""
    y, x = op.inputs
    scaled = RealDiv(scope, grads[0], Add(scope, Square(scope, x), Square(scope, y)))
    return _reduced_pair(scope, op, Mul(scope, scaled, x), Neg(scope, Mul(scope, scaled, y)))


def _nonzero(scope, x):
    """1 where x != 0, else 0, in x's dtype (the x-derivatives of Xlogy & co. vanish at 0)."""
    return SelectV2(scope, NotEqual(scope, x, ZerosLike(scope, x)), OnesLike(scope, x),
                    ZerosLike(scope, x))


@RegisterGradient("Xlogy")
def _xlogy_grad(scope, op, grads):
    """z = x log y (0 at x = 0): dx = g * xlogy(x != 0, y), dy = g * xdivy(x, y)."""
    x, y = op.inputs
    g = grads[0]
    return _reduced_pair(scope, op, Mul(scope, g, Xlogy(scope, _nonzero(scope, x), y)),
                         Mul(scope, g, Xdivy(scope, x, y)))


@RegisterGradient("Xdivy")
def _xdivy_grad(scope, op, grads):
    """z = x / y (0 at x = 0): dx = g * xdivy(x != 0, y), dy = g * xdivy(-x, y^2)."""
    x, y = op.inputs
    g = grads[0]
    return _reduced_pair(scope, op, Mul(scope, g, Xdivy(scope, _nonzero(scope, x), y)),
                         Mul(scope, g, Xdivy(scope, Neg(scope, x), Square(scope, y))))


@RegisterGradient("Xlog1py")
def _xlog1py_grad(scope, op, grads):
    """z = x log(1 + y) (0 at x = 0): dx = g * xlog1py(x != 0, y), dy = g * xdivy(x, y + 1)."""
    x, y = op.inputs
    g = grads[0]
    return _reduced_pair(scope, op, Mul(scope, g, Xlog1py(scope, _nonzero(scope, x), y)),
                         Mul(scope, g, Xdivy(scope, x, Add(scope, y, _constant(scope, 1, y)))))


@RegisterGradient("Select")
def _select_grad(scope, op, grads):
    """The cotangent goes to 't' where the condition holds, to 'e' elsewhere."""
    condition, t = op.inputs[0], op.inputs[1]
    zeros = ZerosLike(scope, t)
    return [None, Select(scope, condition, grads[0], zeros),
            Select(scope, condition, zeros, grads[0])]


@RegisterGradient("SelectV2")
def _select_v2_grad(scope, op, grads):
    """As Select's, each summed back over the axes its input was broadcast along."""
    g = grads[0]
    condition, t, e = op.inputs
    zero = Const(scope, 0, g.dtype)
    return [None, reduce_to_shape_of(scope, SelectV2(scope, condition, g, zero), t),
            reduce_to_shape_of(scope, SelectV2(scope, condition, zero, g), e)]
