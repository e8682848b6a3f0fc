"""Elementwise, reduction and shape ops: what losses and decomposed gradients are built from.

Binary ops broadcast like numpy. Reductions take their axes as an int32 input (TF style),
so ``Sum(x, [0, 1, 2], keep_dims=True)``. The integer shape ops (``Shape``, ``Size``,
``ReducedShape``, ``BroadcastGradientArgs``) exist so that gradients of broadcasting and
reductions work when static shapes are unknown; they carry no gradient themselves.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from minigraph.framework import dtypes
from minigraph.framework.gradient_registry import NotDifferentiable, RegisterGradient
from minigraph.framework.graph import Operation, Output
from minigraph.framework.op_def import (
    ArgDef,
    AttrDef,
    InferenceContext,
    OpDef,
    build_variadic_operation,
    make_wrapper,
    register_op,
    required,
)
from minigraph.framework.scope import Scope
from minigraph.framework.tensor_shape import ShapeMismatch, TensorShape, dims_text
from minigraph.ops.array_ops import Const

# The wrappers minigraph.ops exports.
__all__ = [
    "Add", "AddN", "AddV2", "BroadcastArgs", "BroadcastGradientArgs", "BroadcastTo", "Cast",
    "Div", "Fill", "InvertPermutation", "Mean", "Mul", "Neg", "OnesLike", "Rank", "RealDiv",
    "Reciprocal", "ReducedShape", "Reshape", "Rsqrt", "Shape", "Size", "Square", "Sub", "Sum",
    "Transpose", "ZerosLike",
]

FLOATS, NUMBERS, INDEX = dtypes.FLOATING, dtypes.NUMBERS, dtypes.INTEGERS


def broadcast_shapes(a: TensorShape, b: TensorShape) -> TensorShape:
    """numpy broadcasting of two static shapes; unknown dims stay unknown unless decided."""
    if a.rank is None or b.rank is None:
        return TensorShape(None)
    rank = max(a.rank, b.rank)
    left = [1] * (rank - a.rank) + list(a.dims)
    right = [1] * (rank - b.rank) + list(b.dims)
    dims = []
    for x, y in zip(left, right):
        if x == 1:
            dims.append(y)
        elif y == 1:
            dims.append(x)
        elif x is None or y is None:
            dims.append(x if y is None else y)
        elif x == y:
            dims.append(x)
        else:
            raise ShapeMismatch(f"Incompatible shapes for broadcasting: {a} and {b}")
    return TensorShape(dims)


def binary_shape(ctx: InferenceContext) -> list[TensorShape]:
    """numpy broadcasting of inputs 'x' and 'y'."""
    x, y = ctx.input_shapes
    try:
        return [broadcast_shapes(x, y)]
    except ShapeMismatch:
        raise ctx.error(f"Incompatible shapes: {x} vs. {y}: inputs 'x' and 'y' cannot be "
                        f"broadcast together") from None


def _same_shape(ctx: InferenceContext) -> list[TensorShape]:
    return [ctx.input_shapes[0]]


def _binary(name: str, allowed=NUMBERS) -> OpDef:
    return register_op(OpDef(
        name=name,
        inputs=[ArgDef("x", type_attr="T"), ArgDef("y", type_attr="T")],
        outputs=[ArgDef("z", type_attr="T")],
        attrs=[required("T", "type", allowed=allowed)],
        shape_fn=binary_shape,
    ))


def _unary(name: str, allowed=NUMBERS) -> OpDef:
    return register_op(OpDef(
        name=name,
        inputs=[ArgDef("x", type_attr="T")],
        outputs=[ArgDef("y", type_attr="T")],
        attrs=[required("T", "type", allowed=allowed)],
        shape_fn=_same_shape,
    ))


Add = make_wrapper(_binary("Add"))
AddV2 = make_wrapper(_binary("AddV2"))  # TF 2's name for Add (what tf.add writes)
Sub = make_wrapper(_binary("Sub"))
Mul = make_wrapper(_binary("Mul"))
Div = make_wrapper(_binary("Div", FLOATS))
RealDiv = make_wrapper(_binary("RealDiv", FLOATS))  # TF 2's x / y for floats
Neg = make_wrapper(_unary("Neg"))
Square = make_wrapper(_unary("Square"))
Rsqrt = make_wrapper(_unary("Rsqrt", FLOATS))
Reciprocal = make_wrapper(_unary("Reciprocal", FLOATS))
ZerosLike = make_wrapper(_unary("ZerosLike", NUMBERS + (dtypes.bool_,)))
OnesLike = make_wrapper(_unary("OnesLike", NUMBERS + (dtypes.bool_,)))


def _add_n_shape(ctx: InferenceContext) -> list[TensorShape]:
    shape = TensorShape(None)
    for index, other in enumerate(ctx.input_shapes):
        try:
            shape = shape.merge_with(other)
        except ShapeMismatch:
            raise ctx.error(f"input {index} of 'inputs' has shape {other}, but the inputs "
                            f"before it have shape {shape}; all must have the same shape"
                            ) from None
    return [shape]


ADD_N = register_op(OpDef(
    name="AddN",
    inputs=[ArgDef("inputs", type_attr="T", number_attr="N")],
    outputs=[ArgDef("sum", type_attr="T")],
    attrs=[required("N", "int", check=lambda n: None if n >= 1 else f"must be >= 1, got {n}"),
           required("T", "type", allowed=NUMBERS)],
    shape_fn=_add_n_shape,
))


def AddN(scope: Scope, inputs: list, **attrs: Any) -> Output:
    """Sum of a list of same-shaped tensors, one node (used to aggregate gradients)."""
    return build_variadic_operation(scope, ADD_N, list(inputs), attrs).outputs[0]


def _cast_shape(ctx: InferenceContext) -> list[TensorShape]:
    return [ctx.input_shapes[0]]


Cast = make_wrapper(register_op(OpDef(
    name="Cast",
    inputs=[ArgDef("x", type_attr="SrcT")],
    outputs=[ArgDef("y", type_attr="DstT")],
    attrs=[required("SrcT", "type"), required("DstT", "type"),
           AttrDef("Truncate", "bool", default=False)],
    shape_fn=_cast_shape,
)))


def reduction_shape(ctx: InferenceContext) -> list[TensorShape]:
    """A reduction's result: input 'input' without (or, keep_dims, with 1 at) the axes in
    input 'reduction_indices' (shared by the reduction family, ``ops.reduction_ops``)."""
    x = ctx.input_shapes[0]
    keep = ctx.attrs["keep_dims"]
    axes = ctx.axes_input("reduction_indices", x.rank)
    if axes is None:
        return [TensorShape.unknown(x.rank) if keep else TensorShape(None)]
    if keep:
        return [TensorShape(1 if i in axes else d for i, d in enumerate(x.dims))]
    return [TensorShape(d for i, d in enumerate(x.dims) if i not in axes)]


def _reduction(name: str) -> OpDef:
    return register_op(OpDef(
        name=name,
        inputs=[ArgDef("input", type_attr="T"), ArgDef("reduction_indices", type_attr="Tidx")],
        outputs=[ArgDef("output", type_attr="T")],
        attrs=[required("T", "type", allowed=NUMBERS), AttrDef("keep_dims", "bool", default=False),
               AttrDef("Tidx", "type", default=dtypes.int32, allowed=INDEX)],
        shape_fn=reduction_shape,
    ))


Sum = make_wrapper(_reduction("Sum"))
Mean = make_wrapper(_reduction("Mean"))


def _reshape_shape(ctx: InferenceContext) -> list[TensorShape]:
    target = ctx.shape_input("shape", allow_unknown=True)
    if target is None:
        return [TensorShape(None)]
    if target.count(-1) > 1:
        raise ctx.error(f"input 'shape' {target}: only one dimension may be -1")
    dims = [None if d == -1 else d for d in target]
    x = ctx.input_shapes[0]
    total = x.num_elements()
    known = 1
    for d in dims:
        known *= d if d is not None else 1
    if None in dims and total is not None:
        if known == 0 or total % known:
            raise ctx.error(f"Input to reshape is a tensor with {total} values, but the "
                            f"requested shape {target} cannot hold them (input 'tensor' to "
                            f"input 'shape')")
        dims[dims.index(None)] = total // known
    elif total is not None and known != total:
        raise ctx.error(f"Input to reshape is a tensor with {total} values, but the "
                        f"requested shape has {known}: cannot reshape input 'tensor' to "
                        f"input 'shape' {target}")
    return [TensorShape(dims)]


Reshape = make_wrapper(register_op(OpDef(
    name="Reshape",
    inputs=[ArgDef("tensor", type_attr="T"), ArgDef("shape", type_attr="Tshape")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=[required("T", "type"), AttrDef("Tshape", "type", default=dtypes.int32, allowed=INDEX)],
    shape_fn=_reshape_shape,
)))


def _transpose_shape(ctx: InferenceContext) -> list[TensorShape]:
    ctx.with_rank("perm", 1, " (a permutation)")
    perm = ctx.constant_value("perm")
    x = ctx.input_shapes[0]
    if perm is None:
        return [TensorShape.unknown(x.rank)]
    rank = x.rank if x.rank is not None else len(perm)
    if sorted(perm) != list(range(rank)):
        raise ctx.error(f"input 'perm' must be a permutation of 0..{rank - 1} (the input's "
                        f"axes), got {perm}")
    return [TensorShape(x[p] for p in perm) if x.rank is not None
            else TensorShape.unknown(len(perm))]


Transpose = make_wrapper(register_op(OpDef(
    name="Transpose",
    inputs=[ArgDef("x", type_attr="T"), ArgDef("perm", type_attr="Tperm")],
    outputs=[ArgDef("y", type_attr="T")],
    attrs=[required("T", "type"), AttrDef("Tperm", "type", default=dtypes.int32, allowed=INDEX)],
    shape_fn=_transpose_shape,
)))


def _shape_of_shape(ctx: InferenceContext) -> list[TensorShape]:
    return [TensorShape([ctx.input_shapes[0].rank])]


OUT_TYPE = AttrDef("out_type", "type", default=dtypes.int32, allowed=INDEX,
                   doc="The integer type of the result.")
Shape = make_wrapper(register_op(OpDef(
    name="Shape",
    inputs=[ArgDef("input", type_attr="T")],
    outputs=[ArgDef("output", type_attr="out_type")],
    attrs=[required("T", "type"), OUT_TYPE],
    shape_fn=_shape_of_shape,
)))
Size = make_wrapper(register_op(OpDef(
    name="Size",
    inputs=[ArgDef("input", type_attr="T")],
    outputs=[ArgDef("output", type_attr="out_type")],
    attrs=[required("T", "type"), OUT_TYPE],
    shape_fn=lambda ctx: [TensorShape([])],
)))
Rank = make_wrapper(register_op(OpDef(
    name="Rank",
    inputs=[ArgDef("input", type_attr="T")],
    outputs=[ArgDef("output", dtype=dtypes.int32)],
    attrs=[required("T", "type")],
    shape_fn=lambda ctx: [TensorShape([])],
)))


def _fill_shape(ctx: InferenceContext) -> list[TensorShape]:
    ctx.with_rank("value", 0, " (a scalar)")
    dims = ctx.shape_input("dims")
    if dims is None:
        return [TensorShape.unknown(ctx.input_shapes[0][0])]
    return [TensorShape(dims)]


Fill = make_wrapper(register_op(OpDef(
    name="Fill",
    inputs=[ArgDef("dims", type_attr="index_type"), ArgDef("value", type_attr="T")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=[required("T", "type"),
           AttrDef("index_type", "type", default=dtypes.int32, allowed=INDEX)],
    shape_fn=_fill_shape,
)))


def _broadcast_to_shape(ctx: InferenceContext) -> list[TensorShape]:
    target = ctx.shape_input("shape")
    if target is None:
        return [TensorShape.unknown(ctx.input_shapes[1][0])]
    x = ctx.input_shapes[0]
    try:
        merged = broadcast_shapes(x, TensorShape(target))
    except ShapeMismatch:
        merged = None
    if x.rank is not None and (merged is None or x.rank > len(target)
                               or not merged.is_compatible_with(tuple(target))):
        raise ctx.error(f"cannot broadcast input 'input' of shape {x} to shape {target}")
    return [TensorShape(target)]


BroadcastTo = make_wrapper(register_op(OpDef(
    name="BroadcastTo",
    inputs=[ArgDef("input", type_attr="T"), ArgDef("shape", type_attr="Tidx")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=[required("T", "type"), AttrDef("Tidx", "type", default=dtypes.int32, allowed=INDEX)],
    shape_fn=_broadcast_to_shape,
)))
def _reduced_shape_shape(ctx: InferenceContext) -> list[TensorShape]:
    """input_shape with the reduced axes set to 1 (the shape a keep_dims reduction gives)."""
    shape = ctx.shape_input("input_shape")
    rank = None if shape is None else len(shape)
    ctx.axes_input("axes", rank)
    return [ctx.input_shapes[0]]


ReducedShape = make_wrapper(register_op(OpDef(
    name="ReducedShape",
    inputs=[ArgDef("input_shape", dtype=dtypes.int32), ArgDef("axes", dtype=dtypes.int32)],
    outputs=[ArgDef("output", dtype=dtypes.int32)],
    shape_fn=_reduced_shape_shape,
)))


def _invert_permutation_shape(ctx: InferenceContext) -> list[TensorShape]:
    ctx.with_rank("x", 1, " (a permutation)")
    perm = ctx.constant_value("x")
    if perm is not None and sorted(perm) != list(range(len(perm))):
        raise ctx.error(f"input 'x' must be a permutation of 0..{len(perm) - 1}, got {perm}")
    return [ctx.input_shapes[0]]


InvertPermutation = make_wrapper(register_op(OpDef(
    name="InvertPermutation",
    inputs=[ArgDef("x", type_attr="T")],
    outputs=[ArgDef("y", type_attr="T")],
    attrs=[AttrDef("T", "type", default=dtypes.int32, allowed=INDEX)],
    shape_fn=_invert_permutation_shape,
)))


def _broadcast_gradient_args_shape(ctx: InferenceContext) -> list[TensorShape]:
    """Two shape vectors that must broadcast together; outputs: the axes each was
    broadcast along."""
    s0, s1 = ctx.shape_input("s0"), ctx.shape_input("s1")
    if s0 is not None and s1 is not None:
        try:
            broadcast_shapes(TensorShape(s0), TensorShape(s1))
        except ShapeMismatch:
            raise ctx.error(f"Incompatible shapes: {s0} vs. {s1}: the shapes in inputs 's0' "
                            f"and 's1' cannot be broadcast together") from None
    return [TensorShape([None]), TensorShape([None])]


def _broadcast_args_shape(ctx: InferenceContext) -> list[TensorShape]:
    """Two shape vectors that must broadcast together; output: their broadcast shape."""
    for name in ("s0", "s1"):
        shape = ctx.input_shape(name)
        if shape.rank not in (None, 1):
            raise ctx.error(f"input '{name}' must be a vector of dimensions, got shape "
                            f"{dims_text(shape)}")
    s0, s1 = ctx.shape_input("s0"), ctx.shape_input("s1")
    if s0 is None or s1 is None:
        ranks = [ctx.input_shape(n)[0] for n in ("s0", "s1")]
        return [TensorShape([max(ranks) if None not in ranks else None])]
    try:
        return [TensorShape([len(broadcast_shapes(TensorShape(s0), TensorShape(s1)).dims)])]
    except ShapeMismatch:
        raise ctx.error(f"Incompatible shapes: {dims_text(TensorShape(s0))} vs. "
                        f"{dims_text(TensorShape(s1))} (inputs 's0' and 's1')") from None


BroadcastArgs = make_wrapper(register_op(OpDef(
    name="BroadcastArgs",
    inputs=[ArgDef("s0", type_attr="T"), ArgDef("s1", type_attr="T")],
    outputs=[ArgDef("r0", type_attr="T")],
    attrs=[AttrDef("T", "type", default=dtypes.int32, allowed=INDEX)],
    shape_fn=_broadcast_args_shape,
)))


BroadcastGradientArgs = make_wrapper(register_op(OpDef(
    name="BroadcastGradientArgs",
    inputs=[ArgDef("s0", type_attr="T"), ArgDef("s1", type_attr="T")],
    outputs=[ArgDef("r0", type_attr="T"), ArgDef("r1", type_attr="T")],
    attrs=[AttrDef("T", "type", default=dtypes.int32, allowed=INDEX)],
    shape_fn=_broadcast_gradient_args_shape,
)))


# ----------------------------------------------------------------------------- gradients
# Each function returns d(loss)/d(input) for every input, given d(loss)/d(output).


NotDifferentiable("InvertPermutation", "Shape", "Size", "Rank", "BroadcastArgs",
                  "ReducedShape", "BroadcastGradientArgs", "ZerosLike", "OnesLike")


def _same_static_shape(a: Output, b: Output) -> bool:
    return a.shape.is_fully_defined() and a.shape == b.shape


def cotangent_or_zeros(scope: Scope, op: Operation, grad_outputs: Sequence[Output | None],
                       index: int) -> Output:
    """``grad_outputs[index]``, or zeros shaped like that output when it is None (for
    gradient functions that need every output's cotangent)."""
    grad = grad_outputs[index]
    return grad if grad is not None else ZerosLike(scope, op.outputs[index])


def reduce_to_shape_of(scope: Scope, grad: Output, like: Output) -> Output:
    """Sum ``grad`` over the axes along which ``like`` was broadcast, then give it like's shape."""
    if _same_static_shape(grad, like):
        return grad
    like_shape = Shape(scope, like)
    axes = BroadcastGradientArgs(scope, like_shape, Shape(scope, grad)).r0
    return Reshape(scope, Sum(scope, grad, axes), like_shape)


@RegisterGradient("Add")
def _add_grad(scope, op, grads):
    x, y = op.inputs
    return [reduce_to_shape_of(scope, grads[0], x), reduce_to_shape_of(scope, grads[0], y)]


RegisterGradient("AddV2")(_add_grad)


@RegisterGradient("Sub")
def _sub_grad(scope, op, grads):
    x, y = op.inputs
    return [reduce_to_shape_of(scope, grads[0], x),
            reduce_to_shape_of(scope, Neg(scope, grads[0]), y)]


@RegisterGradient("Mul")
def _mul_grad(scope, op, grads):
    x, y = op.inputs
    return [reduce_to_shape_of(scope, Mul(scope, grads[0], y), x),
            reduce_to_shape_of(scope, Mul(scope, x, grads[0]), y)]


@RegisterGradient("Div")
def _div_grad(scope, op, grads):
    """z = x / y: dx = g / y, dy = -g * x / y^2 = -g * z / y."""
    x, y = op.inputs
    g = grads[0]
    return [reduce_to_shape_of(scope, Div(scope, g, y), x),
            reduce_to_shape_of(scope, Neg(scope, Div(scope, Mul(scope, g, op.outputs[0]), y)), y)]


RegisterGradient("RealDiv")(_div_grad)


@RegisterGradient("Neg")
def _neg_grad(scope, op, grads):
    return [Neg(scope, grads[0])]


@RegisterGradient("Square")
def _square_grad(scope, op, grads):
    """d(x^2) = 2 x g."""
    x = op.inputs[0]
    return [Mul(scope, grads[0], Mul(scope, Const(scope, 2.0, x.dtype), x))]


@RegisterGradient("Rsqrt")
def _rsqrt_grad(scope, op, grads):
    """y = x^(-1/2): dy/dx = -y^3 / 2."""
    y = op.outputs[0]
    half = Const(scope, -0.5, y.dtype)
    return [Mul(scope, grads[0], Mul(scope, half, Mul(scope, y, Square(scope, y))))]


@RegisterGradient("Reciprocal")
def _reciprocal_grad(scope, op, grads):
    """y = 1/x: dy/dx = -y^2."""
    return [Neg(scope, Mul(scope, grads[0], Square(scope, op.outputs[0])))]


@RegisterGradient("AddN")
def _add_n_grad(scope, op, grads):
    return [grads[0]] * len(op.inputs)


@RegisterGradient("Identity")
def _identity_grad(scope, op, grads):
    return [grads[0]]


@RegisterGradient("Cast")
def _cast_grad(scope, op, grads):
    source = op.inputs[0]
    if not source.dtype.is_floating:
        return [None]
    return [Cast(scope, grads[0], DstT=source.dtype)]


@RegisterGradient("Transpose")
def _transpose_grad(scope, op, grads):
    """Transpose back with the inverse permutation."""
    perm = op.inputs[1]
    inverse = Const(scope, np.argsort(perm.op.attrs["value"]).astype(np.int32)) \
        if perm.op.type == "Const" else InvertPermutation(scope, perm)
    return [Transpose(scope, grads[0], inverse), None]


@RegisterGradient("Reshape")
def _reshape_grad(scope, op, grads):
    return [Reshape(scope, grads[0], Shape(scope, op.inputs[0])), None]


def sum_grad_of(scope: Scope, op: Operation, grad: Output) -> Output:
    """Broadcast a reduction's cotangent (or any tensor of its output's shape) back over the
    reduced axes of its input."""
    x, axes = op.inputs
    input_shape = Shape(scope, x)
    if axes.dtype is not dtypes.int32:
        axes = Cast(scope, axes, DstT=dtypes.int32)
    kept = grad if op.attrs["keep_dims"] else Reshape(
        scope, grad, ReducedShape(scope, input_shape, axes))
    return BroadcastTo(scope, kept, input_shape)


@RegisterGradient("Sum")
def _sum_grad(scope, op, grads):
    return [sum_grad_of(scope, op, grads[0]), None]


@RegisterGradient("Mean")
def _mean_grad(scope, op, grads):
    """Sum's gradient divided by the number of elements averaged per output element."""
    x, y = op.inputs[0], op.outputs[0]
    count = Div(scope, Cast(scope, Size(scope, x), DstT=x.dtype),
                Cast(scope, Size(scope, y), DstT=x.dtype))
    return [Div(scope, sum_grad_of(scope, op, grads[0]), count), None]


@RegisterGradient("BroadcastTo")
def _broadcast_to_grad(scope, op, grads):
    return [reduce_to_shape_of(scope, grads[0], op.inputs[0]), None]


@RegisterGradient("Fill")
def _fill_grad(scope, op, grads):
    """Every element is the scalar ``value``, so its gradient is the sum of the cotangent."""
    flat = Reshape(scope, grads[0], Const(scope, [-1]))
    return [None, Sum(scope, flat, Const(scope, [0]))]
