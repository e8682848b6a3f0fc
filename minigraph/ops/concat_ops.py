"""Joining and splitting along one axis: ConcatV2 (Keras' ``Concatenate``: DenseNet,
Inception and NASNet freeze to hundreds of them), the older Concat (axis first), ConcatOffset
(where each input sits in a concatenation: the gradient's slices), Split and SplitV.

Shape functions follow TensorFlow's (``ConcatShape``, ``SplitShape``) and its kernels'
words; the axis is checked whenever its value is known (a constant at construction, every
value at run time), so the output's shape is exact before anything is allocated.
"""

from __future__ import annotations

from typing import Any

from minigraph.framework import dtypes
from minigraph.framework.dtypes import INTEGERS
from minigraph.framework.gradient_registry import NotDifferentiable, RegisterGradient
from minigraph.framework.op_def import (
    ArgDef,
    AttrDef,
    InferenceContext,
    OpDef,
    make_wrapper,
    register_op,
    required,
)
from minigraph.framework.tensor_shape import TensorShape, dims_text
from minigraph.ops.layout_ops import ShapeN, Slice
from minigraph.ops.math_ops import Cast, ZerosLike

__all__ = ["Concat", "ConcatOffset", "ConcatV2", "Split", "SplitV"]


def _at_least(minimum: int):
    """An int attr check: TF's ``has_minimum`` (ConcatV2's ``N`` >= 2)."""
    return lambda n: None if n >= minimum else f"must be at least minimum {minimum}, got {n}"


def scalar_value(ctx: InferenceContext, name: str, what: str) -> int | None:
    """The value of the scalar input ``name`` when known; TF's "``what`` should be a scalar"
    when it is not one."""
    shape = ctx.input_shape(name)
    if shape.rank not in (None, 0):
        raise ctx.error(f"{what} should be a scalar, but got shape {dims_text(shape)} "
                        f"(input '{name}')")
    value = ctx.constant_value(name)
    return None if value is None else int(value)


def check_axis(ctx: InferenceContext, axis: int, rank: int, words: str) -> int:
    """``axis`` in [-rank, rank), returned in [0, rank); else TF's ``words`` (a format with
    ``{low}``, ``{high}``, ``{axis}``)."""
    if not -rank <= axis < rank:
        raise ctx.error(words.format(low=-rank, high=rank, axis=axis))
    return axis % rank


# ----------------------------------------------------------------------------- ConcatV2, Concat


def concat_shape(ctx: InferenceContext, shapes: list[TensorShape], axis_input: str
                 ) -> TensorShape:
    """The shapes of ``values`` joined along the axis held by ``axis_input``: one rank, not
    0; every dimension but the axis equal; the axis dimension their sum (TF's
    ``ConcatShapeHelper``, in the ConcatOp kernel's words)."""
    axis = scalar_value(ctx, axis_input, "Concat dim tensor")
    first = next((i for i, s in enumerate(shapes) if s.rank is not None), None)
    if first is None:
        return TensorShape(None)
    for i, shape in enumerate(shapes):
        if shape.rank is not None and shape.rank != shapes[first].rank:
            raise ctx.error(f"ConcatOp : Ranks of all input tensors should match: "
                            f"shape[{first}] = {dims_text(shapes[first])} vs. shape[{i}] = "
                            f"{dims_text(shape)} (input 'values')")
    rank = shapes[first].rank
    if rank == 0:
        raise ctx.error("ConcatOp : Can't concatenate scalars (use tf.stack instead) (input "
                        "'values')")
    if axis is None:
        return TensorShape.unknown(rank)
    axis = check_axis(ctx, axis, rank, "ConcatOp : Expected concatenating dimensions in the "
                                       "range [{low}, {high}), but got {axis} (input "
                                       f"'{axis_input}')")
    dims = list(shapes[first].dims)
    total: int | None = 0
    for i, shape in enumerate(shapes):
        if shape.rank is None:
            total = None
            continue
        for d, size in enumerate(shape.dims):
            if d == axis:
                total = None if total is None or size is None else total + size
            elif dims[d] is None:
                dims[d] = size
            elif size is not None and size != dims[d]:
                raise ctx.error(f"ConcatOp : Dimension {d} in both shapes must be equal: "
                                f"shape[{first}] = {dims_text(shapes[first])} vs. shape[{i}] = "
                                f"{dims_text(shape)} (input 'values')")
    dims[axis] = total
    return TensorShape(dims)


def _values_shapes(ctx: InferenceContext) -> list[TensorShape]:
    start = ctx.op_def.input_index("values", ctx.attrs)
    return ctx.input_shapes[start:start + ctx.attrs["N"]]


CONCAT_N = required("N", "int", check=_at_least(2), doc="How many tensors are joined (>= 2).")

ConcatV2 = make_wrapper(register_op(OpDef(
    name="ConcatV2",
    inputs=[ArgDef("values", type_attr="T", number_attr="N",
                   doc="The tensors to join: one rank, equal but for the axis dimension."),
            ArgDef("axis", type_attr="Tidx",
                   doc="A scalar in [-rank, rank): the dimension to join along.")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=[CONCAT_N, required("T", "type"),
           AttrDef("Tidx", "type", default=dtypes.int32, allowed=INTEGERS)],
    shape_fn=lambda ctx: [concat_shape(ctx, _values_shapes(ctx), "axis")],
)))

Concat = make_wrapper(register_op(OpDef(
    name="Concat",
    inputs=[ArgDef("concat_dim", dtype=dtypes.int32,
                   doc="A scalar in [-rank, rank): the dimension to join along."),
            ArgDef("values", type_attr="T", number_attr="N",
                   doc="The tensors to join: one rank, equal but for the axis dimension.")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=[CONCAT_N, required("T", "type")],
    shape_fn=lambda ctx: [concat_shape(ctx, _values_shapes(ctx), "concat_dim")],
)))


# ----------------------------------------------------------------------------- ConcatOffset


def _concat_offset_shape(ctx: InferenceContext) -> list[TensorShape]:
    """One vector per input shape, of its length; with the values known, TF's kernel
    checks: one length, the axis in range, every dimension but the axis equal."""
    axis = scalar_value(ctx, "concat_dim", "Concat dim tensor")
    shapes = _shape_inputs(ctx)
    lengths = [s[0] for s in shapes]
    rank = next((n for n in lengths if n is not None), None)
    for i, length in enumerate(lengths):
        if length is not None and length != rank:
            raise ctx.error(f"input {i} should contain {rank} elements, but got {length} "
                            f"(input 'shape')")
    values = [ctx.value_at(i) for i in _shape_positions(ctx)]
    if axis is not None and rank is not None:
        axis = check_axis(ctx, axis, rank, "Concat dim is out of range: {axis} vs. {high} "
                                           "(input 'concat_dim')")
        if all(v is not None for v in values):
            for i, value in enumerate(values):
                if any(a != b for d, (a, b) in enumerate(zip(values[0], value)) if d != axis):
                    raise ctx.error(
                        f"All dimensions except {axis} must match. Input {i} has shape "
                        f"[{' '.join(map(str, value))}] and doesn't match input 0 with shape "
                        f"[{' '.join(map(str, values[0]))}]. (input 'shape')")
    return [TensorShape([rank])] * len(shapes)


def _shape_positions(ctx: InferenceContext) -> range:
    start = ctx.op_def.input_index("shape", ctx.attrs)
    return range(start, start + ctx.attrs["N"])


def _shape_inputs(ctx: InferenceContext) -> list[TensorShape]:
    shapes = []
    for i, position in enumerate(_shape_positions(ctx)):
        shape = ctx.input_shapes[position]
        if shape.rank not in (None, 1):
            raise ctx.error(f"input {i} should be a vector, but got shape {dims_text(shape)} "
                            f"(input 'shape')")
        shapes.append(shape.with_rank(1))
    return shapes


ConcatOffset = make_wrapper(register_op(OpDef(
    name="ConcatOffset",
    inputs=[ArgDef("concat_dim", dtype=dtypes.int32,
                   doc="A scalar in [-rank, rank): the dimension the inputs are joined along."),
            ArgDef("shape", type_attr="shape_type", number_attr="N",
                   doc="The shapes of the joined tensors, one vector each.")],
    outputs=[ArgDef("offset", type_attr="shape_type", number_attr="N",
                    doc="Where each input starts in the concatenation: zeros but for the "
                        "axis, the sum of the sizes before it.")],
    attrs=[CONCAT_N, AttrDef("shape_type", "type", default=dtypes.int32, allowed=INTEGERS)],
    shape_fn=_concat_offset_shape,
)))


# ----------------------------------------------------------------------------- Split, SplitV

SPLIT_RANGE = "-input rank({low}) <= split_dim < input rank ({high}), but got {axis}"
NUM_SPLIT = required("num_split", "int", check=_at_least(1),
                     doc="How many tensors the input is cut into (>= 1).")


def _split_dim(ctx: InferenceContext, value: TensorShape) -> int | None:
    """The value of ``split_dim`` (a scalar) in [0, rank) when it and the rank are known."""
    shape = ctx.input_shape("split_dim")
    if shape.rank not in (None, 0):
        raise ctx.error(f"split_dim must be a scalar but has rank {shape.rank} (input "
                        f"'split_dim')")
    axis = ctx.constant_value("split_dim")
    if axis is None or value.rank is None:
        return None
    return check_axis(ctx, int(axis), value.rank, SPLIT_RANGE + " (input 'split_dim')")


def _split_shape(ctx: InferenceContext) -> list[TensorShape]:
    """``num_split`` equal parts along ``split_dim``, which they must divide."""
    value, count = ctx.input_shape("value"), ctx.attrs["num_split"]
    axis = _split_dim(ctx, value)
    if axis is None:
        return [TensorShape.unknown(value.rank)] * count
    size = value[axis]
    if size is not None and size % count:
        raise ctx.error(f"Number of ways to split should evenly divide the split dimension, "
                        f"but got split_dim {axis} (size = {size}) and num_split {count}")
    return [value.replace_dim(axis, None if size is None else size // count)] * count


Split = make_wrapper(register_op(OpDef(
    name="Split",
    inputs=[ArgDef("split_dim", dtype=dtypes.int32,
                   doc="A scalar in [-rank, rank): the dimension to cut."),
            ArgDef("value", type_attr="T")],
    outputs=[ArgDef("output", type_attr="T", number_attr="num_split")],
    attrs=[NUM_SPLIT, required("T", "type")],
    shape_fn=_split_shape,
)))


def split_sizes(ctx: InferenceContext, sizes: list[int], total: int | None) -> list[int | None]:
    """SplitV's ``size_splits`` checked as TF's kernel checks them: sizes >= 0 but one -1 (the
    rest of the dimension), adding up to the dimension (``total``, when known)."""
    if sizes.count(-1) > 1:
        raise ctx.error("There can only be one -1 in the input. (input 'size_splits')")
    for i, size in enumerate(sizes):
        if size < -1:
            raise ctx.error(f"Split size at index {i} must be >= 0. Got: {size} (input "
                            f"'size_splits')")
    if total is None:
        return [None if s == -1 else s for s in sizes]
    if len(sizes) == 1 and sizes[0] != total:
        raise ctx.error(f"If there is only one output, it must have the same size as the "
                        f"input. Input size: {total} output size: {sizes[0]} (input "
                        f"'size_splits')")
    known = sum(s for s in sizes if s != -1)
    if known > total or (-1 not in sizes and known != total):
        raise ctx.error(f"Determined shape must either match input shape along split_dim "
                        f"exactly if fully specified, or be less than the size of the input "
                        f"along split_dim if not fully specified.  Got: {known} (input "
                        f"'size_splits')")
    return [total - known if s == -1 else s for s in sizes]


def _split_v_shape(ctx: InferenceContext) -> list[TensorShape]:
    value, count = ctx.input_shape("value"), ctx.attrs["num_split"]
    axis = _split_dim(ctx, value)
    sizes_shape = ctx.input_shape("size_splits")
    if sizes_shape.rank is not None and (sizes_shape.rank != 1 or sizes_shape[0] not in
                                         (None, count)):
        elements = sizes_shape.num_elements()
        raise ctx.error(f"size of the split_tensor must be 1-D and have the same elements as "
                        f"outputs got {sizes_shape.rank} -D and "
                        f"{'?' if elements is None else elements} elements (input "
                        f"'size_splits', attr 'num_split' = {count})")
    sizes = ctx.constant_value("size_splits")
    if axis is None or sizes is None:
        return [TensorShape.unknown(value.rank)] * count
    return [value.replace_dim(axis, size) for size in split_sizes(ctx, sizes, value[axis])]


SplitV = make_wrapper(register_op(OpDef(
    name="SplitV",
    inputs=[ArgDef("value", type_attr="T"),
            ArgDef("size_splits", type_attr="Tlen",
                   doc="num_split sizes >= 0 adding up to the dimension; one may be -1: the "
                       "rest."),
            ArgDef("split_dim", dtype=dtypes.int32,
                   doc="A scalar in [-rank, rank): the dimension to cut.")],
    outputs=[ArgDef("output", type_attr="T", number_attr="num_split")],
    attrs=[NUM_SPLIT, required("T", "type"),
           AttrDef("Tlen", "type", default=dtypes.int64, allowed=INTEGERS)],
    shape_fn=_split_v_shape,
)))


# ----------------------------------------------------------------------------- gradients
# As TF's array_grad.py.


def _concat_grad(scope, op, grads, axis_position: int):
    """Input i's gradient: the slice of the output's gradient where input i sits, at the
    offsets ConcatOffset computes from the inputs' shapes (TF's ``_ConcatGradHelper``)."""
    start = 0 if axis_position else 1  # ConcatV2: values first; Concat: after concat_dim
    values = list(op.inputs[start:start + op.attrs["N"]])
    axis = op.inputs[axis_position]
    if axis.dtype is not dtypes.int32:
        axis = Cast(scope, axis, DstT=dtypes.int32)
    shapes = ShapeN(scope, values).output
    offsets = ConcatOffset(scope, axis, shapes).offset
    pieces = [Slice(scope, grads[0], begin, size) for begin, size in zip(offsets, shapes)]
    return pieces + [None] if axis_position else [None] + pieces


@RegisterGradient("ConcatV2")
def _concat_v2_grad(scope, op, grads):
    return _concat_grad(scope, op, grads, axis_position=op.attrs["N"])


@RegisterGradient("Concat")
def _concat_v1_grad(scope, op, grads):
    return _concat_grad(scope, op, grads, axis_position=0)


NotDifferentiable("ConcatOffset")


def _pieces(scope, op, grads) -> list:
    """Every output's gradient, zeros for those no loss reads."""
    return [g if g is not None else ZerosLike(scope, out) for g, out in zip(grads, op.outputs)]


def _join(scope, parts: list, split_dim: Any):
    return parts[0] if len(parts) == 1 else ConcatV2(scope, parts, split_dim)


@RegisterGradient("Split")
def _split_grad(scope, op, grads):
    """The pieces' gradients joined back along ``split_dim``."""
    return [None, _join(scope, _pieces(scope, op, grads), op.inputs[0])]


@RegisterGradient("SplitV")
def _split_v_grad(scope, op, grads):
    return [_join(scope, _pieces(scope, op, grads), op.inputs[2]), None, None]

