"""Ops that move elements without arithmetic, as TF graphs use them around models: Pad
(Keras' ZeroPadding2D), Slice, StridedSlice (Python's ``x[1:, ..., None, ::-2]``), Pack
(tf.stack), ExpandDims, Squeeze, Tile, Roll (``tf.roll``: elements shifted cyclically along
axes, shifts of a repeated axis adding up, as TF's kernel does; Swin transformers' windows),
ReverseSequence (``tf.reverse_sequence``: each batch entry's first ``seq_lengths[b]`` steps
reversed, the rest left in place).

Shape functions check index values whenever they are known (constants at construction,
every value at run time), leading with TensorFlow's words; output shapes are exact then, so
the session refuses outputs beyond this machine's memory before any allocation.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from minigraph.framework import dtypes
from minigraph.framework.dtypes import INTEGERS
from minigraph.framework.gradient_registry import NotDifferentiable, RegisterGradient
from minigraph.framework.graph import Output
from minigraph.framework.op_def import (
    ArgDef,
    AttrDef,
    InferenceContext,
    OpDef,
    OpResult,
    build_variadic_operation,
    make_wrapper,
    register_op,
    required,
)
from minigraph.framework.scope import Scope
from minigraph.framework.tensor_shape import ShapeMismatch, TensorShape
from minigraph.ops.array_ops import Const
from minigraph.ops.math_ops import Neg, Reshape, Shape, Sub, Sum, ZerosLike

__all__ = ["ExpandDims", "Pack", "Pad", "ReverseSequence", "Roll", "ShapeN", "Slice", "Squeeze",
           "StridedSlice", "StridedSliceGrad", "Tile", "Unpack"]


def _dims(shape: TensorShape) -> str:
    """A shape as TF's messages print it: ``[2,3,4]``, ``<unknown>`` for an unknown rank."""
    if shape.rank is None:
        return "<unknown>"
    return "[" + ",".join("?" if d is None else str(d) for d in shape.dims) + "]"


def _index_attr(name: str) -> AttrDef:
    return AttrDef(name, "type", default=dtypes.int32, allowed=INTEGERS)


# ----------------------------------------------------------------------------- Pad


def _pad_shape(ctx: InferenceContext) -> list[TensorShape]:
    """input dims + before + after, from paddings [rank, 2] of non-negative values."""
    x = ctx.input_shapes[0]
    paddings = ctx.with_rank("paddings", 2, " ([rank, 2]: before and after each dimension)")
    if paddings[1] is not None and paddings[1] != 2:
        raise ctx.error(f"input 'paddings' must have shape [rank, 2], got {paddings}")
    if x.rank is not None and paddings[0] is not None and paddings[0] != x.rank:
        raise ctx.error(f"The first dimension of paddings must be the rank of inputs"
                        f"{_dims(paddings)} {_dims(x)}: input 'paddings' has {paddings[0]} "
                        f"rows for input 'input' of rank {x.rank}")
    value = ctx.constant_value("paddings")
    rank = x.rank if x.rank is not None else paddings[0]
    if value is None:
        return [TensorShape.unknown(rank)]
    for before, after in value:
        if before < 0 or after < 0:
            raise ctx.error(f"Paddings must be non-negative: {before} {after} (input "
                            f"'paddings')")
    dims = x.dims if x.rank is not None else (None,) * len(value)
    return [TensorShape(None if d is None else d + before + after
                        for d, (before, after) in zip(dims, value))]


Pad = make_wrapper(register_op(OpDef(
    name="Pad",
    inputs=[ArgDef("input", type_attr="T"),
            ArgDef("paddings", type_attr="Tpaddings",
                   doc="[rank, 2]: the zeros to add before and after each dimension.")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=[required("T", "type"), _index_attr("Tpaddings")],
    shape_fn=_pad_shape,
)))


# ----------------------------------------------------------------------------- Slice


def _slice_shape(ctx: InferenceContext) -> list[TensorShape]:
    """size[i] elements from begin[i] along each dimension; size -1: to the end."""
    x = ctx.input_shapes[0]
    begin_shape, size_shape = (ctx.with_rank(n, 1, " (one entry per dimension)")
                               for n in ("begin", "size"))
    lengths = {d for d in (begin_shape[0], size_shape[0], x.rank) if d is not None}
    if len(lengths) > 1:
        raise ctx.error(f"Expected begin and size arguments to be 1-D tensors of size "
                        f"{x.rank}, but got shapes {_dims(begin_shape)} and "
                        f"{_dims(size_shape)} instead.")
    begin, size = ctx.constant_value("begin"), ctx.constant_value("size")
    rank = next(iter(lengths), None)
    if begin is None or size is None or x.rank is None:
        if size is not None:
            return [TensorShape(None if s == -1 else s for s in size)]
        return [TensorShape.unknown(rank)]
    out = []
    for i, (d, b, s) in enumerate(zip(x.dims, begin, size)):
        if d is None:
            out.append(None if s == -1 else s)
            continue
        if not 0 <= b <= d:
            raise ctx.error(f"Expected begin[{i}] in [0, {d}], but got {b} (input 'begin')")
        if s == -1:
            s = d - b
        if not 0 <= s <= d - b:
            raise ctx.error(f"Expected size[{i}] in [0, {d - b}], but got {s} (input 'size')")
        out.append(s)
    return [TensorShape(out)]


Slice = make_wrapper(register_op(OpDef(
    name="Slice",
    inputs=[ArgDef("input", type_attr="T"), ArgDef("begin", type_attr="Index"),
            ArgDef("size", type_attr="Index")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=[required("T", "type"), required("Index", "type", allowed=INTEGERS)],
    shape_fn=_slice_shape,
)))


# ----------------------------------------------------------------------------- Pack


def _pack_shape(ctx: InferenceContext) -> list[TensorShape]:
    """N same-shaped inputs stacked along a new dimension ``axis``."""
    shape = TensorShape(None)
    for i, other in enumerate(ctx.input_shapes):
        try:
            shape = shape.merge_with(other)
        except ShapeMismatch:
            raise ctx.error(f"Shapes of all inputs must match: values[0].shape = "
                            f"{_dims(ctx.input_shapes[0])} != values[{i}].shape = "
                            f"{_dims(other)}") from None
    axis = ctx.attrs["axis"]
    if shape.rank is None:
        return [TensorShape(None)]
    rank = shape.rank + 1
    if not -rank <= axis < rank:
        raise ctx.error(f"axis = {axis} not in [{-rank}, {rank}) (attr 'axis')")
    dims = list(shape.dims)
    dims.insert(axis % rank, len(ctx.input_shapes))
    return [TensorShape(dims)]


PACK = register_op(OpDef(
    name="Pack",
    inputs=[ArgDef("values", type_attr="T", number_attr="N")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=[required("N", "int", check=lambda n: None if n >= 1 else f"must be >= 1, got {n}"),
           required("T", "type"), AttrDef("axis", "int", default=0)],
    shape_fn=_pack_shape,
))


def Pack(scope: Scope, values: list, axis: int = 0, **attrs: Any) -> Output:
    """The tensors of ``values`` (one shape) stacked along a new dimension ``axis``
    (tf.stack)."""
    return build_variadic_operation(scope, PACK, list(values),
                                    {"axis": axis, **attrs}).outputs[0]


def _unpack_shape(ctx: InferenceContext) -> list[TensorShape]:
    """``num`` tensors: the input's slices along ``axis``, that dimension removed."""
    x, num, axis = ctx.input_shapes[0], ctx.attrs["num"], ctx.attrs["axis"]
    if x.rank is None:
        return [TensorShape(None)] * num
    if not -x.rank <= axis < x.rank:
        raise ctx.error(f"axis = {axis} not in [{-x.rank}, {x.rank}) (attr 'axis')")
    axis %= x.rank
    if x[axis] is not None and x[axis] != num:
        raise ctx.error(f"Dimension must be {num} but is {x[axis]}: input 'value' has shape "
                        f"{x}, attr 'num' is {num}")
    return [TensorShape(d for i, d in enumerate(x.dims) if i != axis)] * num


Unpack = make_wrapper(register_op(OpDef(
    name="Unpack",
    inputs=[ArgDef("value", type_attr="T")],
    outputs=[ArgDef("output", type_attr="T", number_attr="num")],
    attrs=[required("num", "int", check=lambda n: None if n >= 0 else f"must be >= 0, got {n}",
                    doc="The size of the input's dimension ``axis``."),
           required("T", "type"), AttrDef("axis", "int", default=0)],
    shape_fn=_unpack_shape,
)))


SHAPE_N = register_op(OpDef(
    name="ShapeN",
    inputs=[ArgDef("input", type_attr="T", number_attr="N")],
    outputs=[ArgDef("output", type_attr="out_type", number_attr="N")],
    attrs=[required("N", "int", check=lambda n: None if n >= 1 else f"must be >= 1, got {n}"),
           required("T", "type"), AttrDef("out_type", "type", default=dtypes.int32,
                                          allowed=INTEGERS)],
    shape_fn=lambda ctx: [TensorShape([s.rank]) for s in ctx.input_shapes],
))


def ShapeN(scope: Scope, input: list, out_type: Any = dtypes.int32, **attrs: Any
           ) -> OpResult:
    """The shapes of N tensors, one int vector each, in one node (TF's gradients of
    convolutions use it): ``.output`` is the list, also by index and in order."""
    return OpResult(build_variadic_operation(scope, SHAPE_N, list(input),
                                             {"out_type": out_type, **attrs}))


# ----------------------------------------------------------------------------- ExpandDims


def _expand_dims_shape(ctx: InferenceContext) -> list[TensorShape]:
    x = ctx.input_shapes[0]
    dim_shape = ctx.input_shape("dim")
    if dim_shape.num_elements() not in (None, 1):
        raise ctx.error(f"'dim' must be a tensor with a single value, got shape {dim_shape}")
    value = ctx.constant_value("dim")
    if value is None or x.rank is None:
        return [TensorShape.unknown(None if x.rank is None else x.rank + 1)]
    dim = int(np.ravel(value)[0])
    if not -x.rank - 1 <= dim <= x.rank:
        raise ctx.error(f"Tried to expand dim index {dim} for tensor with {x.rank} "
                        f"dimensions. (input 'dim')")
    dims = list(x.dims)
    dims.insert(dim % (x.rank + 1), 1)
    return [TensorShape(dims)]


ExpandDims = make_wrapper(register_op(OpDef(
    name="ExpandDims",
    inputs=[ArgDef("input", type_attr="T"), ArgDef("dim", type_attr="Tdim")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=[required("T", "type"), _index_attr("Tdim")],
    shape_fn=_expand_dims_shape,
)))


# ----------------------------------------------------------------------------- Squeeze


def _squeeze_shape(ctx: InferenceContext) -> list[TensorShape]:
    """The dimensions of size 1 removed: those of ``squeeze_dims``, or all when empty."""
    x = ctx.input_shapes[0]
    wanted = ctx.attrs["squeeze_dims"]
    if x.rank is None:
        return [TensorShape(None)]
    for axis in wanted:
        if not -x.rank <= axis < x.rank:
            raise ctx.error(f"Tried to squeeze dim index {axis} for tensor with {x.rank} "
                            f"dimensions. (attr 'squeeze_dims')")
    axes = {a % x.rank for a in wanted}
    dims = []
    for i, d in enumerate(x.dims):
        if i in axes:
            if d is not None and d != 1:
                raise ctx.error(f"Can not squeeze dim[{i}], expected a dimension of 1, got "
                                f"{d} (input 'input' has shape {x})")
            continue
        if not axes and d == 1:
            continue
        if not axes and d is None:
            return [TensorShape(None)]  # might be 1: the rank is unknown until run time
        dims.append(d)
    return [TensorShape(dims)]


Squeeze = make_wrapper(register_op(OpDef(
    name="Squeeze",
    inputs=[ArgDef("input", type_attr="T")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=[required("T", "type"), AttrDef("squeeze_dims", "list(int)", default=())],
    shape_fn=_squeeze_shape,
)))


# ----------------------------------------------------------------------------- Tile


def _tile_shape(ctx: InferenceContext) -> list[TensorShape]:
    x = ctx.input_shapes[0]
    m = ctx.with_rank("multiples", 1, " (one entry per dimension)")
    if x.rank is not None and m[0] is not None and m[0] != x.rank:
        raise ctx.error(f"Expected multiples argument to be a vector of length {x.rank} but "
                        f"got length {m[0]} (input 'multiples')")
    value = ctx.constant_value("multiples")
    if value is None:
        return [TensorShape.unknown(x.rank if x.rank is not None else m[0])]
    if any(v < 0 for v in value):
        raise ctx.error(f"Expected multiples[{[v < 0 for v in value].index(True)}] >= 0, but "
                        f"got {min(value)} (input 'multiples')")
    dims = x.dims if x.rank is not None else (None,) * len(value)
    return [TensorShape(None if d is None else d * v for d, v in zip(dims, value))]


Tile = make_wrapper(register_op(OpDef(
    name="Tile",
    inputs=[ArgDef("input", type_attr="T"), ArgDef("multiples", type_attr="Tmultiples")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=[required("T", "type"), _index_attr("Tmultiples")],
    shape_fn=_tile_shape,
)))


# ----------------------------------------------------------------------------- StridedSlice

MASKS = ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")


class SliceSpec:
    """A StridedSlice spec made dense over the input's dimensions, as TF's
    ``ValidateStridedSliceOp`` makes it: the ellipsis (explicit, or implied at the end)
    expanded, masks applied, negative indices counted from the end and clamped.

    ``begin``/``end``/``strides`` have one entry per input dimension, ready for a Python
    slice (``end`` None: past the front with a negative stride); ``sizes`` is the slice's
    extent per input dimension and ``final`` the output's dimensions (new axes inserted,
    shrunk ones dropped). ``error`` raises a message naming the op."""

    def __init__(self, shape: tuple[int | None, ...], begin: list[int], end: list[int],
                 strides: list[int], attrs: dict[str, Any], error) -> None:
        masks = {name: attrs[name] for name in MASKS}
        if masks["ellipsis_mask"] & (masks["ellipsis_mask"] - 1):
            raise error("Multiple ellipses in slice spec not allowed (attr 'ellipsis_mask')")
        sparse = len(begin)
        if not masks["ellipsis_mask"]:  # an implied ellipsis after the given dimensions
            masks["ellipsis_mask"] = 1 << sparse
            sparse += 1
            begin, end, strides = begin + [0], end + [0], strides + [1]
        ellipsis_at = masks["ellipsis_mask"].bit_length() - 1
        new_after = sum(1 for i in range(ellipsis_at + 1, sparse)
                        if masks["new_axis_mask"] >> i & 1)
        rank = len(shape)
        self.begin, self.end, self.strides, self.sizes = [], [], [], []
        self.final: list[int | None] = []
        dense = 0
        for i in range(sparse):
            if masks["ellipsis_mask"] >> i & 1:
                stop = min(rank - (sparse - i) + 1 + new_after, rank)
                while dense < stop:
                    self._whole(shape[dense])
                    dense += 1
            elif masks["new_axis_mask"] >> i & 1:
                self.final.append(1)
            else:
                if dense >= rank:
                    raise error(f"Index out of range using input dim {dense}; input has only "
                                f"{rank} dims (input 'begin')")
                self._dimension(dense, shape[dense], begin[i], end[i], strides[i],
                                {name: masks[name] >> i & 1 for name in MASKS}, error)
                dense += 1
        while dense < rank:  # dimensions past an explicit ellipsis's reach stay whole
            self._whole(shape[dense])
            dense += 1

    def _whole(self, dim: int | None) -> None:
        self.begin.append(0)
        self.end.append(dim)
        self.strides.append(1)
        self.sizes.append(dim)
        self.final.append(dim)

    def _dimension(self, axis, dim, begin, end, stride, bits, error) -> None:
        if stride == 0:
            raise error(f"strides[{axis}] must be non-zero (input 'strides')")
        if bits["shrink_axis_mask"]:
            if stride <= 0:
                raise error("only stride 1 allowed on non-range indexing. (input 'strides')")
            index = begin + dim if dim is not None and begin < 0 else begin
            if dim is not None and not 0 <= index < dim:
                raise error(f"slice index {begin} of dimension {axis} out of bounds. (input "
                            f"'begin')")
            self.begin.append(index)
            self.end.append(None if index is None else index + 1)
            self.strides.append(1)
            self.sizes.append(1)
            return
        if dim is None:
            self.begin.append(begin)
            self.end.append(end)
            self.strides.append(stride)
            self.sizes.append(None)
            self.final.append(None)
            return
        low, high = (0, dim) if stride > 0 else (-1, dim - 1)

        def canonical(value: int, masked: bool, is_end: bool) -> int:
            if masked:
                return (high if is_end else low) if stride > 0 else (low if is_end else high)
            value = value + dim if value < 0 else value
            return min(max(value, low), high)

        first = canonical(begin, bits["begin_mask"], False)
        last = canonical(end, bits["end_mask"], True)
        length = last - first
        if length == 0 or (length < 0) != (stride < 0):
            size = 0
        else:  # ceil(|length| / |stride|)
            size = (abs(length) + abs(stride) - 1) // abs(stride)
        self.begin.append(first)
        self.end.append(None if last == -1 else last)
        self.strides.append(stride)
        self.sizes.append(size)
        self.final.append(size)

    def index(self) -> tuple[slice, ...]:
        """The dense spec as a numpy index (one slice per input dimension); an empty range
        is slice(0, 0) (a canonical begin of -1, "before the front", would wrap in Python)."""
        return tuple(slice(0, 0) if size == 0 else slice(b, e, s)
                     for b, e, s, size in zip(self.begin, self.end, self.strides, self.sizes))


def _slice_spec_inputs(ctx: InferenceContext) -> tuple[list, list, list] | None:
    """(begin, end, strides) when their values are known, after checking their shapes."""
    names = ("begin", "end", "strides")
    shapes = [ctx.with_rank(n, 1, " (one entry per sliced dimension)") for n in names]
    lengths = {s[0] for s in shapes if s[0] is not None}
    if len(lengths) > 1:
        raise ctx.error("Expected begin, end, and strides to be 1D equal size tensors, but got "
                        f"shapes {', '.join(_dims(s) for s in shapes[:2])}, and "
                        f"{_dims(shapes[2])} instead.")
    values = [ctx.constant_value(n) for n in names]
    return None if any(v is None for v in values) else values


def _strided_slice_shape(ctx: InferenceContext) -> list[TensorShape]:
    x = ctx.input_shapes[0]
    values = _slice_spec_inputs(ctx)
    if values is None or x.rank is None:
        return [TensorShape(None)]
    return [TensorShape(SliceSpec(x.dims, *values, ctx.attrs, ctx.error).final)]


def _strided_slice_attrs() -> list[AttrDef]:
    return [required("T", "type"), required("Index", "type", allowed=INTEGERS),
            *(AttrDef(name, "int", default=0) for name in MASKS)]


StridedSlice = make_wrapper(register_op(OpDef(
    name="StridedSlice",
    inputs=[ArgDef("input", type_attr="T"), ArgDef("begin", type_attr="Index"),
            ArgDef("end", type_attr="Index"), ArgDef("strides", type_attr="Index")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=_strided_slice_attrs(),
    shape_fn=_strided_slice_shape,
)))


def _strided_slice_grad_shape(ctx: InferenceContext) -> list[TensorShape]:
    """The forward input's shape (``shape``); ``dy`` must have the slice's shape."""
    shape = ctx.shape_input("shape")
    values = _slice_spec_inputs(ctx)
    if shape is None:
        return [TensorShape.unknown(ctx.input_shape("shape")[0])]
    if values is not None:
        final = TensorShape(SliceSpec(tuple(shape), *values, ctx.attrs, ctx.error).final)
        ctx.merge_shapes(ctx.input_shape("dy"), final,
                         f"input 'dy' has shape {ctx.input_shape('dy')}, but the slice of "
                         f"'shape' {shape} has shape {final}")
    return [TensorShape(shape)]


StridedSliceGrad = make_wrapper(register_op(OpDef(
    name="StridedSliceGrad",
    inputs=[ArgDef("shape", type_attr="Index"), ArgDef("begin", type_attr="Index"),
            ArgDef("end", type_attr="Index"), ArgDef("strides", type_attr="Index"),
            ArgDef("dy", type_attr="T")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=_strided_slice_attrs(),
    shape_fn=_strided_slice_grad_shape,
)))


def _roll_shape(ctx: InferenceContext) -> list[TensorShape]:
    """shift and axis: scalars or vectors of one length; each axis in [-rank, rank)."""
    x = ctx.input_shape("input")
    if x.rank == 0:
        raise ctx.error("input must be 1-D or higher (input 'input')")
    sizes = []
    for name in ("shift", "axis"):
        shape = ctx.input_shape(name)
        if shape.rank not in (None, 0, 1):
            raise ctx.error(f"{name} must be a scalar or a 1-D vector. Found: {_dims(shape)} "
                            f"(input '{name}')")
        sizes.append(None if shape.rank is None else (1 if shape.rank == 0 else shape[0]))
    if None not in sizes and sizes[0] != sizes[1]:
        raise ctx.error(f"shift and axis must have the same size (inputs 'shift' and 'axis': "
                        f"{sizes[0]} and {sizes[1]})")
    axes = ctx.constant_value("axis")
    if axes is not None and x.rank is not None:
        for axis in np.ravel(axes).tolist():
            if not -x.rank <= axis < x.rank:
                raise ctx.error(f"axis {axis} is out of range (input 'axis', for an input of "
                                f"rank {x.rank})")
    return [x]


def _reverse_sequence_shape(ctx: InferenceContext) -> list[TensorShape]:
    """TF's checks: distinct axes inside the input, one length per batch entry, each length
    in [0, input.dims(seq_dim)]."""
    x, lengths = ctx.input_shape("input"), ctx.input_shape("seq_lengths")
    seq, batch = ctx.attrs["seq_dim"], ctx.attrs["batch_dim"]
    if lengths.rank not in (None, 1):
        raise ctx.error(f"seq_lengths must be 1-dim, not {lengths.rank} (input 'seq_lengths')")
    if seq == batch:
        raise ctx.error(f"batch_dim == seq_dim == {seq}")
    if x.rank is None:
        return [x]
    for name, axis in (("seq_dim", seq), ("batch_dim", batch)):
        if not 0 <= axis < x.rank:
            raise ctx.error(f"Invalid {name} {axis}: the input has rank {x.rank}")
    if lengths.rank == 1 and None not in (lengths[0], x[batch]) and lengths[0] != x[batch]:
        raise ctx.error(f"Length of seq_lengths != input.dims({batch}), ({lengths[0]} vs. "
                        f"{x[batch]})")
    values = ctx.constant_value("seq_lengths")
    if values is not None:
        for i, n in enumerate(np.ravel(values).tolist()):
            if n < 0:
                raise ctx.error(f"seq_lens({i}) < 0")
            if x[seq] is not None and n > x[seq]:
                raise ctx.error(f"seq_lens({i}) > input.dims({seq})")
    return [x]


ReverseSequence = make_wrapper(register_op(OpDef(
    name="ReverseSequence",
    inputs=[ArgDef("input", type_attr="T"),
            ArgDef("seq_lengths", type_attr="Tlen", doc="One length per batch entry.")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=[required("seq_dim", "int", doc="The axis reversed."),
           AttrDef("batch_dim", "int", default=0, doc="The axis of the batch entries."),
           required("T", "type"),
           AttrDef("Tlen", "type", default=dtypes.int64, allowed=INTEGERS)],
    shape_fn=_reverse_sequence_shape,
)))


Roll = make_wrapper(register_op(OpDef(
    name="Roll",
    inputs=[ArgDef("input", type_attr="T"),
            ArgDef("shift", type_attr="Tshift",
                   doc="Positions each element moves along its axis (negative: backwards)."),
            ArgDef("axis", type_attr="Taxis", doc="The axes, one per shift.")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=[required("T", "type"), required("Tshift", "type", allowed=INTEGERS),
           required("Taxis", "type", allowed=INTEGERS)],
    shape_fn=_roll_shape,
)))


# ----------------------------------------------------------------------------- gradients
# As TF's array_grad.py: each returns d(loss)/d(input) for every input.


def _index_const(scope: Scope, values: Any, like: Output) -> Output:
    return Const(scope, np.asarray(values, like.dtype.np_dtype))


@RegisterGradient("Pad")
def _pad_grad(scope, op, grads):
    """The slice of the gradient where the input sits: begin = paddings[:, 0]."""
    x, paddings = op.inputs
    first_column = Slice(scope, paddings, _index_const(scope, [0, 0], paddings),
                         _index_const(scope, [-1, 1], paddings))
    begin = Reshape(scope, first_column, _index_const(scope, [-1], paddings))
    size = Shape(scope, x, out_type=paddings.dtype)
    return [Slice(scope, grads[0], begin, size), None]


@RegisterGradient("Slice")
def _slice_grad(scope, op, grads):
    """The gradient padded back to the input's shape: before = begin, after = the rest."""
    x, begin, _ = op.inputs
    index = begin.dtype
    after = Sub(scope, Sub(scope, Shape(scope, x, out_type=index), begin),
                Shape(scope, op.outputs[0], out_type=index))
    return [Pad(scope, grads[0], Pack(scope, [begin, after], axis=1)), None, None]


@RegisterGradient("Pack")
def _pack_grad(scope, op, grads):
    """Input i's gradient: the i-th slice along ``axis``, without that dimension."""
    rank = op.outputs[0].shape.rank
    if rank is None:
        raise NotImplementedError(f"Pack '{op.name}': its gradient needs the output's rank")
    axis = op.attrs["axis"] % rank
    result = []
    for i, value in enumerate(op.inputs):
        begin = [i if d == axis else 0 for d in range(rank)]
        size = [1 if d == axis else -1 for d in range(rank)]
        piece = Slice(scope, grads[0], np.array(begin, np.int32), np.array(size, np.int32))
        result.append(Reshape(scope, piece, Shape(scope, value)))
    return result


@RegisterGradient("Unpack")
def _unpack_grad(scope, op, grads):
    """The outputs' gradients stacked back (zeros for those no loss reads)."""
    parts = [g if g is not None else ZerosLike(scope, out)
             for g, out in zip(grads, op.outputs)]
    return [Pack(scope, parts, axis=op.attrs["axis"])]


NotDifferentiable("ShapeN")


@RegisterGradient("ExpandDims")
def _expand_dims_grad(scope, op, grads):
    return [Reshape(scope, grads[0], Shape(scope, op.inputs[0])), None]


@RegisterGradient("Squeeze")
def _squeeze_grad(scope, op, grads):
    return [Reshape(scope, grads[0], Shape(scope, op.inputs[0]))]


@RegisterGradient("Tile")
def _tile_grad(scope, op, grads):
    """Sum the copies: the gradient seen as [m0, d0, m1, d1, ...], summed over the m axes."""
    x, multiples = op.inputs
    rank = x.shape.rank
    if rank is None:
        raise NotImplementedError(f"Tile '{op.name}': its gradient needs the input's rank")
    split = Reshape(scope, Pack(scope, [multiples, Shape(scope, x, out_type=multiples.dtype)],
                                axis=1), _index_const(scope, [-1], multiples))
    summed = Sum(scope, Reshape(scope, grads[0], split),
                 np.arange(0, 2 * rank, 2, dtype=np.int32))
    return [Reshape(scope, summed, Shape(scope, x)), None]


@RegisterGradient("StridedSlice")
def _strided_slice_grad(scope, op, grads):
    """The gradient scattered back into zeros of the input's shape (TF's _StridedSliceGrad)."""
    x, begin, end, strides = op.inputs
    masks = {name: op.attrs[name] for name in MASKS}
    shape = Shape(scope, x, out_type=begin.dtype)
    return [StridedSliceGrad(scope, shape, begin, end, strides, grads[0], **masks),
            None, None, None]


@RegisterGradient("StridedSliceGrad")
def _strided_slice_grad_grad(scope, op, grads):
    """Only dy matters: the same slice of the incoming gradient."""
    _, begin, end, strides, _ = op.inputs
    masks = {name: op.attrs[name] for name in MASKS}
    return [None, None, None, None, StridedSlice(scope, grads[0], begin, end, strides, **masks)]


@RegisterGradient("Roll")
def _roll_grad(scope, op, grads):
    """Rolled back by the opposite shifts."""
    _, shift, axis = op.inputs
    return [Roll(scope, grads[0], Neg(scope, shift), axis), None, None]


@RegisterGradient("ReverseSequence")
def _reverse_sequence_grad(scope, op, grads):
    """Reversed back the same way (the reversal is its own inverse)."""
    return [ReverseSequence(scope, grads[0], op.inputs[1], seq_dim=op.attrs["seq_dim"],
                            batch_dim=op.attrs["batch_dim"]), None]
