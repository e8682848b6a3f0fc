"""Ops built around integer indices: GatherV2 (Keras' ``Embedding``, ``tf.gather``), its
gradient's UnsortedSegmentSum, GatherNd (``tf.gather_nd``: each index row picks an element
or slice of params) and its gradient's ScatterNd (updates summed into zeros of a given
shape), TensorScatterUpdate / Add / Sub (updates written into, added to or subtracted from
a copy of a tensor at index rows; an update written twice: the last wins), DenseBincount
(``tf.math.bincount``, Keras' ``CategoryEncoding``: how often, or with what summed weight,
each value in [0, size) occurs, per row of a matrix; values >= size are dropped, negative
ones refused), OneHot, Range and LinSpace (``num`` evenly spaced values from
``start`` to ``stop``, both included: the step ``(stop - start) / (num - 1)`` and each
``start + step * i`` rounded in the values' type, the last value ``stop`` itself, as TF's
kernel computes them).

Shape functions and run-time checks follow TensorFlow 2.21's kernels, in their words: an
index out of range is the clean error TF's CPU kernel gives (``indices[0,1] = 7 is not in
[0, 5)``), never a wrapped or clipped read; Range's length is computed from its scalars
before anything is allocated, so an absurd range is refused, not attempted.
"""

from __future__ import annotations

import math

import numpy as np

from minigraph.framework import dtypes
from minigraph.framework.dtypes import FLOATING, INTEGERS, NUMBERS
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
from minigraph.ops.activation_ops import Relu
from minigraph.ops.concat_ops import ConcatV2
from minigraph.ops.layout_ops import Pad, Slice
from minigraph.ops.math_ops import AddV2, Mul, Neg, Reshape, Shape, Transpose, ZerosLike

__all__ = ["DenseBincount", "GatherNd", "GatherV2", "LinSpace", "OneHot", "Range", "ScatterNd",
           "TensorScatterAdd", "TensorScatterSub", "TensorScatterUpdate", "UnsortedSegmentSum"]

INT64_MAX = 2 ** 63 - 1
BAD_INDICES_POLICY = AttrDef(
    "bad_indices_policy", "string", default="", allowed=("", "DEFAULT", "ERROR"),
    doc="TF's policy for an index out of range: minigraph always refuses it.")


def require_scalars(ctx: InferenceContext, names: tuple[str, ...], wording: str) -> None:
    """Each input of ``names`` must be a scalar (or of unknown rank); TF's ``wording`` for
    the error differs from op to op (``must be a scalar, not shape``)."""
    for name in names:
        shape = ctx.input_shape(name)
        if shape.rank not in (None, 0):
            raise ctx.error(f"{name} {wording} {dims_text(shape)} (input '{name}')")


def index_text(shape: tuple[int, ...], flat: int) -> str:
    """Element ``flat`` of a tensor of ``shape`` as TF's messages name it: ``[0,1]``, or
    nothing for a scalar."""
    if not shape:
        return ""
    return "[" + ",".join(str(i) for i in np.unravel_index(flat, shape)) + "]"


# ----------------------------------------------------------------------------- GatherV2


class GatherSpec:
    """A GatherV2's ``axis`` and ``batch_dims``, normalized and checked as TF's kernel does,
    from the ranks (and the axis value) when known; ``error`` raises a message naming the
    op. ``axis``/``batch_dims`` are None while they cannot be known."""

    def __init__(self, params: TensorShape, indices: TensorShape, axis: int | None,
                 batch_dims: int, error) -> None:
        if params.rank == 0:
            raise error("params must be at least 1 dimensional (input 'params')")
        if axis is not None and params.rank is not None:
            if not -params.rank <= axis < params.rank:
                raise error(f"Expected axis in the range [{-params.rank}, {params.rank}), but "
                            f"got {axis} (input 'axis')")
            axis %= params.rank
        if batch_dims and indices.rank is not None:
            if not -indices.rank <= batch_dims <= indices.rank:
                raise error(f"Expected batch_dims in the range [{-indices.rank}, "
                            f"{indices.rank}], but got {batch_dims} (attr 'batch_dims')")
            if batch_dims < 0:
                batch_dims += indices.rank
        elif batch_dims < 0:  # counted from the end of indices, whose rank is unknown
            batch_dims = None
        if batch_dims:
            if params.rank is not None and batch_dims >= params.rank:
                raise error(f"batch_dims ({batch_dims}) must be less than rank(params) "
                            f"({params.rank}). (attr 'batch_dims')")
            if axis is not None and params.rank is not None and axis < batch_dims:
                raise error(f"batch_dims ({batch_dims}) must be less than or equal to axis "
                            f"({axis}). (attr 'batch_dims', input 'axis')")
            if params.rank is not None and indices.rank is not None:
                for i in range(batch_dims):
                    if None not in (params[i], indices[i]) and params[i] != indices[i]:
                        raise error(f"params.shape[{i}]: {params[i]} should be equal to "
                                    f"indices.shape[{i}]: {indices[i]}")
        self.axis, self.batch_dims = axis, batch_dims

    def output(self, params: TensorShape, indices: TensorShape) -> TensorShape:
        """params[:axis] + indices[batch_dims:] + params[axis + 1:]."""
        if None in (self.axis, self.batch_dims, params.rank, indices.rank):
            return TensorShape(None)
        dims = params.dims
        return TensorShape(dims[:self.axis] + indices.dims[self.batch_dims:]
                           + dims[self.axis + 1:])


def _gather_spec(ctx: InferenceContext) -> GatherSpec:
    axis_shape = ctx.input_shape("axis")
    if axis_shape.rank not in (None, 0):
        raise ctx.error(f"axis must be scalar, but got shape {dims_text(axis_shape)} (input "
                        f"'axis')")
    axis = ctx.constant_value("axis")
    return GatherSpec(ctx.input_shape("params"), ctx.input_shape("indices"),
                      None if axis is None else int(axis), ctx.attrs["batch_dims"], ctx.error)


def _gather_shape(ctx: InferenceContext) -> list[TensorShape]:
    return [_gather_spec(ctx).output(ctx.input_shape("params"), ctx.input_shape("indices"))]


def check_indices(ctx: RunContext, indices: np.ndarray, limit: int, name: str,
                  words: str, lowest: int = 0) -> None:
    """Every index in [lowest, limit), else TF's message for the first that is not:
    ``indices[0,1] = 7 is not in [0, 5)`` (``words``: ``is not in``)."""
    if indices.ndim == 0 and lowest <= int(indices) < limit:  # one index (a loop's step)
        return
    bad = (indices < lowest) | (indices >= limit)
    if bad.any():
        flat = int(np.flatnonzero(bad)[0])
        raise ctx.error(f"{name}{index_text(indices.shape, flat)} = {indices.flat[flat]} "
                        f"{words} [0, {limit}) (input '{name}')")


def _validate_gather(ctx: RunContext, inputs: list) -> None:
    """Indices in [0, params.shape[axis]); the shape function checks everything else first
    when the axis or the shapes are wrong (this check then has nothing to say)."""
    params, indices, axis = inputs
    if np.ndim(axis) or not params.ndim or not -params.ndim <= int(axis) < params.ndim:
        return
    check_indices(ctx, indices, params.shape[int(axis) % params.ndim], "indices",
                  "is not in")


GatherV2 = make_wrapper(register_op(OpDef(
    name="GatherV2",
    inputs=[ArgDef("params", type_attr="Tparams", doc="The tensor to read from (rank >= 1)."),
            ArgDef("indices", type_attr="Tindices",
                   doc="Positions along ``axis``, each in [0, params.shape[axis])."),
            ArgDef("axis", type_attr="Taxis", doc="A scalar in [-rank, rank).")],
    outputs=[ArgDef("output", type_attr="Tparams")],
    attrs=[AttrDef("batch_dims", "int", default=0,
                   doc="Leading dimensions shared by params and indices (one gather per "
                       "batch element); negative: counted from the end of indices."),
           required("Tparams", "type"), required("Tindices", "type", allowed=INTEGERS),
           required("Taxis", "type", allowed=INTEGERS)],
    shape_fn=_gather_shape,
    validate=_validate_gather,
)))


# ----------------------------------------------------------------------------- UnsortedSegmentSum


def _segment_sum_shape(ctx: InferenceContext) -> list[TensorShape]:
    """[num_segments] + data.shape[rank(segment_ids):]; data's shape must start with the
    ids' shape."""
    data, ids = ctx.input_shape("data"), ctx.input_shape("segment_ids")
    shape = ctx.input_shape("num_segments")
    if shape.rank not in (None, 0):
        raise ctx.error(f"num_segments should be a scalar, not shape {dims_text(shape)} "
                        f"(input 'num_segments')")
    count = ctx.constant_value("num_segments")
    if count is not None and count < 0:
        raise ctx.error(f"Input num_segments == {count} must not be negative. (input "
                        f"'num_segments')")
    if data.rank is None or ids.rank is None:
        return [TensorShape(None)]
    try:
        if ids.rank > data.rank:
            raise ShapeMismatch("longer")
        TensorShape(data.dims[:ids.rank]).merge_with(ids)
    except ShapeMismatch:
        raise ctx.error(f"data.shape = {dims_text(data)} does not start with segment_ids.shape "
                        f"= {dims_text(ids)} (inputs 'data', 'segment_ids')") from None
    return [TensorShape((count,) + data.dims[ids.rank:])]


def _validate_segment_sum(ctx: RunContext, inputs: list) -> None:
    """Ids below num_segments (negative ones are dropped, as TF's CPU kernel drops them)."""
    _, ids, count = inputs
    if not np.ndim(count) and count >= 0:  # else the shape function says what is wrong
        check_indices(ctx, ids, int(count), "segment_ids", "is out of range",
                      lowest=np.iinfo(ids.dtype).min)


UnsortedSegmentSum = make_wrapper(register_op(OpDef(
    name="UnsortedSegmentSum",
    inputs=[ArgDef("data", type_attr="T"),
            ArgDef("segment_ids", type_attr="Tindices",
                   doc="Where each slice of data goes: ids < num_segments; negative ids "
                       "are dropped."),
            ArgDef("num_segments", type_attr="Tnumsegments", doc="A scalar >= 0.")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=[required("T", "type", allowed=NUMBERS),
           required("Tindices", "type", allowed=INTEGERS),
           AttrDef("Tnumsegments", "type", default=dtypes.int32, allowed=INTEGERS)],
    shape_fn=_segment_sum_shape,
    validate=_validate_segment_sum,
)))


# ----------------------------------------------------------------------------- OneHot


def _one_hot_shape(ctx: InferenceContext) -> list[TensorShape]:
    """indices' shape with ``depth`` inserted at ``axis`` (-1: last)."""
    indices = ctx.input_shape("indices")
    require_scalars(ctx, ("depth", "on_value", "off_value"), "must be a scalar, but got:")
    depth = ctx.constant_value("depth")
    if depth is not None and depth < 0:
        raise ctx.error(f"depth must be non-negative, got: {depth} (input 'depth')")
    if indices.rank is None:
        return [TensorShape(None)]
    axis, rank = ctx.attrs["axis"], indices.rank + 1
    if not (axis == -1 or 0 <= axis < rank):
        raise ctx.error(f"Expected axis to be -1 or between [0, {rank}).  But received: {axis} "
                        f"(attr 'axis')")
    dims = list(indices.dims)
    dims.insert(axis % rank, depth)
    return [TensorShape(dims)]


OneHot = make_wrapper(register_op(OpDef(
    name="OneHot",
    inputs=[ArgDef("indices", type_attr="TI",
                   doc="The hot position of each row; one outside [0, depth) gives a row of "
                       "off_value."),
            ArgDef("depth", dtype=dtypes.int32, doc="A scalar >= 0: the one-hot dimension."),
            ArgDef("on_value", type_attr="T", doc="A scalar: the value at the hot position."),
            ArgDef("off_value", type_attr="T", doc="A scalar: the value elsewhere.")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=[AttrDef("axis", "int", default=-1,
                   doc="Where the new dimension goes: -1 (last) or in [0, rank(indices)]."),
           required("T", "type"),
           AttrDef("TI", "type", default=dtypes.int64, allowed=INTEGERS)],
    shape_fn=_one_hot_shape,
)))


# ----------------------------------------------------------------------------- GatherNd, ScatterNd


def check_index_rows(ctx: InferenceContext, indices_name: str, target: list[int] | None,
                     what: str) -> None:
    """Every row of the known ``indices`` value (its last axis) must address an element of a
    ``target``-shaped tensor: TF's ``indices[3] = [0, 5] does not index into <what> [3,4]``
    (the row counted over the flattened leading axes)."""
    value = ctx.constant_value(indices_name)
    if value is None or target is None or np.ndim(value) == 0 or np.size(value) == 0:
        return
    rows = np.asarray(value).reshape(-1, np.shape(value)[-1])
    bounds = np.array(target[:rows.shape[1]], np.int64)
    bad = np.flatnonzero(((rows < 0) | (rows >= bounds)).any(axis=1))
    if bad.size:
        row = rows[bad[0]].tolist()
        raise ctx.error(f"indices[{bad[0]}] = [{', '.join(map(str, row))}] does not index "
                        f"into {what} [{','.join(map(str, target))}] (input '{indices_name}')")


def _gather_nd_shape(ctx: InferenceContext) -> list[TensorShape]:
    params, indices = ctx.input_shape("params"), ctx.input_shape("indices")
    if indices.rank == 0:
        raise ctx.error("indices must be at least a vector, got a scalar (input 'indices')")
    if indices.rank is None or params.rank is None or indices[-1] is None:
        return [TensorShape(None)]
    depth = indices[-1]
    if depth > params.rank:
        raise ctx.error(f"index innermost dimension length must be <= params rank; saw: "
                        f"{depth} vs. {params.rank} (inputs 'indices' and 'params')")
    known = None if None in params.dims else list(params.dims)
    check_index_rows(ctx, "indices", known, "param shape")
    return [TensorShape([*indices.dims[:-1], *params.dims[depth:]])]


GatherNd = make_wrapper(register_op(OpDef(
    name="GatherNd",
    inputs=[ArgDef("params", type_attr="Tparams"),
            ArgDef("indices", type_attr="Tindices",
                   doc="[..., M]: each row the index of an element (M = rank of params) or of "
                       "a slice (M < rank) of params.")],
    outputs=[ArgDef("output", type_attr="Tparams")],
    attrs=[required("Tparams", "type"), required("Tindices", "type", allowed=INTEGERS),
           BAD_INDICES_POLICY],
    shape_fn=_gather_nd_shape,
)))


def _scatter_nd_shape(ctx: InferenceContext) -> list[TensorShape]:
    indices, updates = ctx.input_shape("indices"), ctx.input_shape("updates")
    target = ctx.shape_input("shape")
    if target is None:
        rank = ctx.input_shape("shape")[0]
        return [TensorShape.unknown(rank) if rank is not None else TensorShape(None)]
    if indices.rank == 0:
        raise ctx.error("indices must be at least a vector, got a scalar (input 'indices')")
    if indices.rank is not None and indices[-1] is not None:
        depth = indices[-1]
        if depth > len(target):
            raise ctx.error(f"Output must have at least {depth} dimensions (the last "
                            f"dimension of input 'indices'), got shape {target}")
        expected = TensorShape([*indices.dims[:-1], *target[depth:]])
        ctx.merge_shapes(expected, updates, f"updates must have shape indices.shape[:-1] + "
                                            f"shape[indices.shape[-1]:] = {expected}, got "
                                            f"{updates} (input 'updates')")
        check_index_rows(ctx, "indices", target, "shape")
    return [TensorShape(target)]


ScatterNd = make_wrapper(register_op(OpDef(
    name="ScatterNd",
    inputs=[ArgDef("indices", type_attr="Tindices"),
            ArgDef("updates", type_attr="T",
                   doc="indices.shape[:-1] + shape[M:]: added at each index (duplicates sum)."),
            ArgDef("shape", type_attr="Tindices", doc="The output's shape.")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=[required("T", "type", allowed=NUMBERS), required("Tindices", "type", allowed=INTEGERS),
           BAD_INDICES_POLICY],
    shape_fn=_scatter_nd_shape,
)))


def _tensor_scatter_shape(ctx: InferenceContext) -> list[TensorShape]:
    """The tensor's shape; updates of indices.shape[:-1] + tensor.shape[M:], every index row
    inside the tensor (TF's words)."""
    tensor, indices, updates = ctx.input_shapes
    if indices.rank == 0:
        raise ctx.error("indices must be at least a vector, got a scalar (input 'indices')")
    if tensor.rank is None or indices.rank is None or indices[-1] is None:
        return [tensor]
    depth = indices[-1]
    if depth > tensor.rank:
        raise ctx.error(f"Output must have at least {depth} dimensions (the last dimension "
                        f"of input 'indices'), got shape {dims_text(tensor)} (input 'tensor')")
    expected = TensorShape([*indices.dims[:-1], *tensor.dims[depth:]])
    ctx.merge_shapes(expected, updates, f"updates must have shape indices.shape[:-1] + "
                                        f"tensor.shape[indices.shape[-1]:] = {expected}, got "
                                        f"{updates} (input 'updates')")
    check_index_rows(ctx, "indices", None if None in tensor.dims else list(tensor.dims),
                     "shape")
    return [tensor]


def _tensor_scatter(name: str) -> type:
    """``tensor`` with ``updates`` written at (Update: the last duplicate wins), added to (Add)
    or subtracted from (Sub) the addressed elements or slices."""
    return make_wrapper(register_op(OpDef(
        name=name,
        inputs=[ArgDef("tensor", type_attr="T"), ArgDef("indices", type_attr="Tindices"),
                ArgDef("updates", type_attr="T")],
        outputs=[ArgDef("output", type_attr="T")],
        attrs=[required("T", "type", allowed=None if name == "TensorScatterUpdate" else NUMBERS),
               required("Tindices", "type", allowed=INTEGERS),
               BAD_INDICES_POLICY],
        shape_fn=_tensor_scatter_shape,
    )))


TensorScatterUpdate = _tensor_scatter("TensorScatterUpdate")
TensorScatterAdd = _tensor_scatter("TensorScatterAdd")
TensorScatterSub = _tensor_scatter("TensorScatterSub")


def _dense_bincount_shape(ctx: InferenceContext) -> list[TensorShape]:
    x, size, weights = (ctx.input_shape(n) for n in ("input", "size", "weights"))
    if x.rank not in (None, 1, 2):
        raise ctx.error(f"input must be 1-D or 2-D, got shape {dims_text(x)} (input 'input')")
    if size.rank not in (None, 0):
        raise ctx.error(f"size must be a scalar, got shape {dims_text(size)} (input 'size')")
    if weights.rank is not None and weights.num_elements() != 0 and x.rank is not None:
        ctx.merge_shapes(x, weights, f"weights must be empty or of input's shape {x}, got "
                                     f"{weights} (inputs 'weights' and 'input')")
    bins = ctx.constant_value("size")
    if bins is not None and int(bins) < 0:
        raise ctx.error(f"size ({int(bins)}) must be non-negative (input 'size')")
    values = ctx.constant_value("input")
    if values is not None and np.size(values) and np.min(values) < 0:
        raise ctx.error(f"Input 'in' must be non-negative! Negative input value found: "
                        f"{int(np.min(values))} (input 'input')")
    width = None if bins is None else int(bins)
    if x.rank is None:
        return [TensorShape(None)]
    return [TensorShape([width] if x.rank == 1 else [x[0], width])]


DenseBincount = make_wrapper(register_op(OpDef(
    name="DenseBincount",
    inputs=[ArgDef("input", type_attr="Tidx", doc="A vector, or a matrix counted by row."),
            ArgDef("size", type_attr="Tidx", doc="A scalar >= 0: the number of bins."),
            ArgDef("weights", type_attr="T",
                   doc="Empty (each value counts 1), or one weight per value.")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=[required("Tidx", "type", allowed=INTEGERS),
           required("T", "type", allowed=(dtypes.int32, dtypes.int64, dtypes.float32,
                                          dtypes.float64)),
           AttrDef("binary_output", "bool", default=False,
                   doc="1 wherever a value occurs, instead of its count or summed weight.")],
    shape_fn=_dense_bincount_shape,
)))


# ----------------------------------------------------------------------------- Range


def _number_text(value: np.generic) -> str:
    """A scalar as TF's messages print it: ``5``, ``0.3``, ``nan`` (no trailing ``.0``)."""
    text = str(value)
    return text[:-2] if text.endswith(".0") else text


def range_size(start: np.generic, limit: np.generic, delta: np.generic, error) -> int:
    """How many elements Range(start, limit, delta) has, with TF's checks: ceil(|limit -
    start| / |delta|) exactly for integers, and computed in the scalars' own type for floats
    (as TF's kernel computes it); ``error`` raises a message naming the op."""
    texts = [_number_text(v) for v in (start, limit, delta)]
    if delta == 0:
        raise error(f"Requires delta != 0: {texts[2]} (input 'delta')")
    if delta > 0 and not start <= limit:
        raise error(f"Requires start <= limit when delta > 0: {texts[0]}/{texts[1]} (inputs "
                    f"'start', 'limit')")
    if not delta > 0 and not start >= limit:
        raise error(f"Requires start >= limit when delta < 0: {texts[0]}/{texts[1]} (inputs "
                    f"'start', 'limit')")
    if isinstance(start, np.integer):
        return -(-abs(int(limit) - int(start)) // abs(int(delta)))
    with np.errstate(all="ignore"):
        size = np.ceil(np.abs((limit - start) / delta))
    if not float(size) <= INT64_MAX:  # exact: a Python float against an int (nan: False)
        raise error(f"Requires ((limit - start) / delta) <= {INT64_MAX} (inputs 'start', "
                    f"'limit', 'delta')")
    return int(float(size))


def _range_shape(ctx: InferenceContext) -> list[TensorShape]:
    names = ("start", "limit", "delta")
    require_scalars(ctx, names, "must be a scalar, not shape")
    scalars = [ctx.constant_value(name) for name in names]
    if any(v is None for v in scalars):
        return [TensorShape([None])]
    cast = ctx.attrs["Tidx"].np_dtype.type
    return [TensorShape([range_size(*(cast(v) for v in scalars), ctx.error)])]


Range = make_wrapper(register_op(OpDef(
    name="Range",
    inputs=[ArgDef("start", type_attr="Tidx", doc="A scalar: the first element."),
            ArgDef("limit", type_attr="Tidx", doc="A scalar: the end, excluded."),
            ArgDef("delta", type_attr="Tidx", doc="A scalar, not 0: the step.")],
    outputs=[ArgDef("output", type_attr="Tidx")],
    attrs=[AttrDef("Tidx", "type", default=dtypes.int32, allowed=FLOATING + INTEGERS)],
    shape_fn=_range_shape,
)))


def _lin_space_shape(ctx: InferenceContext) -> list[TensorShape]:
    require_scalars(ctx, ("start", "stop", "num"), "must be a scalar, not shape")
    num = ctx.constant_value("num")
    if num is None:
        return [TensorShape([None])]
    if int(num) <= 0:
        raise ctx.error(f"Requires num > 0: {int(num)} (input 'num')")
    return [TensorShape([int(num)])]


LinSpace = make_wrapper(register_op(OpDef(
    name="LinSpace",
    inputs=[ArgDef("start", type_attr="T", doc="A scalar: the first value."),
            ArgDef("stop", type_attr="T", doc="A scalar: the last value."),
            ArgDef("num", type_attr="Tidx", doc="A scalar > 0: how many values.")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=[required("T", "type", allowed=FLOATING),
           AttrDef("Tidx", "type", default=dtypes.int32, allowed=INTEGERS)],
    shape_fn=_lin_space_shape,
)))


# ----------------------------------------------------------------------------- gradients
# As TF's array_grad.py and math_grad.py.

NotDifferentiable("OneHot", "Range", "LinSpace", "DenseBincount")


def _static_int(tensor, what: str, op) -> int:
    """The value of a Const input (frozen graphs' axes are), for gradients that need it."""
    if tensor.op.type != "Const":
        raise NotImplementedError(f"{op.type} '{op.name}': its gradient needs {what} to be a "
                                  f"constant")
    return int(tensor.op.attrs["value"])


@RegisterGradient("GatherV2")
def _gather_v2_grad(scope, op, grads):
    """The gradient summed into the rows of params it was read from (TF's ``_GatherV2Grad``):
    the grad's index dimensions moved to the front (after the batch ones), UnsortedSegmentSum
    over the indices (made distinct per batch element: index + A * batch position, A =
    params.shape[axis]), then moved back. Needs the ranks, a constant axis and, with
    batch_dims, static batch dimensions."""
    params, indices, axis = op.inputs
    rank, index_rank = params.shape.rank, indices.shape.rank
    if rank is None or index_rank is None:
        raise NotImplementedError(f"GatherV2 '{op.name}': its gradient needs the ranks of "
                                  f"params and indices")
    spec = GatherSpec(params.shape, indices.shape, _static_int(axis, "'axis'", op),
                      op.attrs["batch_dims"], NotImplementedError)
    a, b = spec.axis, spec.batch_dims
    q = index_rank - b
    batch = params.shape.dims[:b]
    if None in batch:
        raise NotImplementedError(f"GatherV2 '{op.name}': its gradient needs static batch "
                                  f"dimensions, got {params.shape}")
    index = indices.dtype.np_dtype
    shape = Shape(scope, params, out_type=indices.dtype)
    size = Reshape(scope, Slice(scope, shape, np.array([a], index), np.array([1], index)),
                   np.zeros(0, np.int32))  # A, a scalar
    # grad's dimensions: batch [0, b), params' [b, a), indices' [a, a + q), params' after
    perm = [*range(b), *range(a, a + q), *range(b, a), *range(a + q, rank - 1 + q)]
    data = Transpose(scope, grads[0], np.array(perm, np.int32))
    if not b:
        summed = UnsortedSegmentSum(scope, data, indices, size)  # [A] + params' [0, a), after
        back = [*range(1, a + 1), 0, *range(a + 1, rank)]
        return [Transpose(scope, summed, np.array(back, np.int32)), None, None]
    count = math.prod(batch)
    positions = np.arange(count, dtype=index).reshape(batch + (1,) * q)
    ids = AddV2(scope, indices, Mul(scope, positions, size))
    summed = UnsortedSegmentSum(scope, data, ids, Mul(scope, np.array(count, index), size))
    # [B * A] + params' [b, a), after -> batch, A, params' [b, a), after -> params' layout
    target = ConcatV2(scope, [np.array(batch, index), Reshape(scope, size, np.array([1])),
                              Slice(scope, shape, np.array([b], index),
                                    np.array([a - b], index)),
                              Slice(scope, shape, np.array([a + 1], index),
                                    np.array([-1], index))], 0)
    back = [*range(b), *range(b + 1, a + 1), b, *range(a + 1, rank)]
    return [Transpose(scope, Reshape(scope, summed, target), np.array(back, np.int32)),
            None, None]


@RegisterGradient("UnsortedSegmentSum")
def _unsorted_segment_sum_grad(scope, op, grads):
    """Each slice of data gets the gradient of its segment; a dropped (negative) id gets
    zeros: the gradient with a zero row in front, gathered at max(id + 1, 0) (TF's
    ``_GatherDropNegatives``)."""
    _, ids, _ = op.inputs
    rank = op.outputs[0].shape.rank
    if rank is None:
        raise NotImplementedError(f"UnsortedSegmentSum '{op.name}': its gradient needs the "
                                  f"output's rank")
    padded = Pad(scope, grads[0], np.array([[1, 0]] + [[0, 0]] * (rank - 1), np.int32))
    shifted = Relu(scope, AddV2(scope, ids, np.ones((), ids.dtype.np_dtype)))
    return [GatherV2(scope, padded, shifted, np.array(0, np.int32)), None, None]


@RegisterGradient("GatherNd")
def _gather_nd_grad(scope, op, grads):
    """The cotangent summed back into the addressed elements of params (TF's ScatterNd)."""
    params, indices = op.inputs
    return [ScatterNd(scope, indices, grads[0], Shape(scope, params, out_type=indices.dtype)),
            None]


@RegisterGradient("ScatterNd")
def _scatter_nd_grad(scope, op, grads):
    """Each update's cotangent is the output's at its index."""
    indices = op.inputs[0]
    return [None, GatherNd(scope, grads[0], indices), None]


@RegisterGradient("TensorScatterUpdate")
def _tensor_scatter_update_grad(scope, op, grads):
    """The overwritten elements get no gradient from the tensor; each update gets the
    output's at its index."""
    _, indices, updates = op.inputs
    g = grads[0]
    return [TensorScatterUpdate(scope, g, indices, ZerosLike(scope, updates)), None,
            GatherNd(scope, g, indices)]


@RegisterGradient("TensorScatterAdd")
def _tensor_scatter_add_grad(scope, op, grads):
    indices = op.inputs[1]
    return [grads[0], None, GatherNd(scope, grads[0], indices)]


@RegisterGradient("TensorScatterSub")
def _tensor_scatter_sub_grad(scope, op, grads):
    indices = op.inputs[1]
    return [grads[0], None, Neg(scope, GatherNd(scope, grads[0], indices))]
