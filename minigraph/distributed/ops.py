"""Ops for data-parallel training: the all-reduce, gradient packing, and split batch norm.

Collectives (stateful: their kernels talk to the other replicas through
:mod:`minigraph.distributed.runtime`):

* ``CollectiveAllReduce(input) -> data``: the element-wise ``merge_op`` ("Add" or "Mean")
  of ``input`` over all replicas (TF's ``CollectiveReduceV2`` with ``merge_op=Add`` and
  ``final_op=Id`` or ``Div``). Gradient: the same all-reduce of the cotangent.
* ``CollectiveBatchNormStats(count, mean, m2) -> (count, mean, m2)``: per-channel moments of
  the global batch from every replica's local moments, combined exactly with Chan's
  parallel formula (so unequal per-replica batch sizes are right).

Plumbing for the fused gradient all-reduce: ``FlatConcat(values) -> output`` (flatten each
input, concatenate) and ``FlatSlice(input) -> output`` (elements ``[begin, begin + n)``
reshaped to the attr ``shape``).

Batch norm in training mode over the global batch, split so that each piece is an ordinary
op (single-process ``FusedBatchNormV3`` stays untouched):

forward:  ``BatchNormLocalStats`` (x -> count, mean, M2 per channel, float64) ->
          ``CollectiveBatchNormStats`` -> ``BatchNormApply`` (y and FusedBatchNormV3's
          batch_mean / batch_variance / reserve_space_1 / reserve_space_2)
backward: ``BatchNormLocalGradSums`` (sum dy, sum dy*(x-mean)) -> ``CollectiveAllReduce`` ->
          ``BatchNormGradApply`` (x_backprop with the GLOBAL N and sums; local scale and
          offset backprops, which data-parallel gradient averaging then reduces)

``BatchNormApply``'s registered gradient builds the backward chain: like FusedBatchNormV3
(docs/tf-semantics.md#autodiff-first-order) only y's cotangent is used, and its x gradient
already accounts for the statistics' dependence on x, so the statistics ops themselves are
not differentiable.
"""

from __future__ import annotations

import numpy as np

from minigraph.framework import dtypes
from minigraph.framework.gradient_registry import NotDifferentiable, RegisterGradient
from minigraph.framework.graph import Output
from minigraph.framework.op_def import (
    ArgDef,
    AttrDef,
    InferenceContext,
    OpDef,
    RunContext,
    build_variadic_operation,
    finite_non_negative,
    make_wrapper,
    register_op,
    required,
)
from minigraph.framework.scope import Scope
from minigraph.framework.tensor_shape import TensorShape, dims_text
from minigraph.ops.batch_norm import (
    FORMATS_2D_3D,
    HALF_TYPES,
    _channel_of,
    _check_vector,
    _merge_vector,
)
from minigraph.ops.batch_norm import _check_x as _check_x_format
from minigraph.ops.math_ops import cotangent_or_zeros

REDUCIBLE_TYPES = dtypes.NUMBERS
F64 = dtypes.float64
F32 = dtypes.float32


def _timeout_attr() -> AttrDef:
    """Seconds to wait for the other replicas; 0 means $MINIGRAPH_COLLECTIVE_TIMEOUT / 60."""
    return AttrDef("timeout_seconds", "float", default=0.0, check=finite_non_negative)


def _data_format_attr() -> AttrDef:
    return AttrDef("data_format", "string", default="NHWC", allowed=FORMATS_2D_3D)


def _epsilon_attr() -> AttrDef:
    return AttrDef("epsilon", "float", default=0.0001, check=finite_non_negative)


# ----------------------------------------------------------------------------- all-reduce

COLLECTIVE_ALL_REDUCE = register_op(OpDef(
    name="CollectiveAllReduce",
    inputs=[ArgDef("input", type_attr="T")],
    outputs=[ArgDef("data", type_attr="T")],
    attrs=[required("T", "type", allowed=REDUCIBLE_TYPES),
           AttrDef("merge_op", "string", default="Add", allowed=("Add", "Mean")),
           _timeout_attr()],
    shape_fn=lambda ctx: [ctx.input_shapes[0]],
    is_stateful=True,
))
CollectiveAllReduce = make_wrapper(COLLECTIVE_ALL_REDUCE)


# ----------------------------------------------------------------------------- packing


def _flat_concat_shape(ctx: InferenceContext) -> list[TensorShape]:
    sizes = [shape.num_elements() for shape in ctx.input_shapes]
    return [TensorShape([None if None in sizes else sum(sizes)])]


FLAT_CONCAT = register_op(OpDef(
    name="FlatConcat",
    inputs=[ArgDef("values", type_attr="T", number_attr="N")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=[required("N", "int", check=lambda n: None if n >= 1 else f"must be >= 1, got {n}"),
           required("T", "type")],
    shape_fn=_flat_concat_shape,
))


def FlatConcat(scope: Scope, values: list) -> Output:
    """One 1-D tensor: every input flattened (row-major), concatenated in order."""
    return build_variadic_operation(scope, FLAT_CONCAT, list(values)).outputs[0]


def _flat_slice_shape(ctx: InferenceContext) -> list[TensorShape]:
    ctx.with_rank("input", 1)
    shape = ctx.attrs["shape"]
    if not shape.is_fully_defined():
        raise ctx.error(f"attr 'shape' must be fully defined, got {shape}")
    if ctx.attrs["begin"] < 0:
        raise ctx.error(f"attr 'begin' must be >= 0, got {ctx.attrs['begin']}")
    total = ctx.input_shapes[0][0]
    end = ctx.attrs["begin"] + shape.num_elements()
    if total is not None and end > total:
        raise ctx.error(f"elements [{ctx.attrs['begin']}, {end}) are out of range for input "
                        f"'input' of {total} elements")
    return [shape]


def _validate_flat_slice(ctx: RunContext, values: list[np.ndarray]) -> None:
    (flat,) = values
    begin, shape = ctx.op.attrs["begin"], ctx.op.attrs["shape"]
    end = begin + shape.num_elements()
    if flat.ndim != 1 or end > flat.size:
        raise ctx.error(f"input 'input' must be 1-D with at least {end} elements, got shape "
                        f"{dims_text(flat.shape)}")


FLAT_SLICE = register_op(OpDef(
    name="FlatSlice",
    inputs=[ArgDef("input", type_attr="T")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=[required("T", "type"), required("begin", "int"), required("shape", "shape")],
    shape_fn=_flat_slice_shape,
    validate=_validate_flat_slice,
))
FlatSlice = make_wrapper(FLAT_SLICE)


# ----------------------------------------------------------------------------- shape helpers
# (the batch-norm family's own checks, so that messages read the same)


def _x_channel(ctx: InferenceContext, name: str) -> tuple[TensorShape, int]:
    return _channel_of(ctx, name, ctx.attrs["data_format"])


def _merge_sums(ctx: InferenceContext, name: str, channel: int | None) -> int | None:
    sums = ctx.with_rank(name, 2)
    ctx.merge_dim(2, sums[0], f"input '{name}' must have 2 rows (sum dy, sum dy*(x-mean))")
    return ctx.merge_dim(channel, sums[1], f"input '{name}' must have one column per channel")


def _check_x(ctx: RunContext, name: str, value: np.ndarray) -> int:
    return _check_x_format(ctx, name, value, ctx.op.attrs["data_format"])


def _check_scalar(ctx: RunContext, name: str, value: np.ndarray) -> None:
    if value.ndim != 0:
        raise ctx.error(f"input '{name}' must be a scalar, got shape {dims_text(value.shape)}")


def _check_sums(ctx: RunContext, name: str, value: np.ndarray, channels: int) -> None:
    if value.shape != (2, channels):
        raise ctx.error(f"input '{name}' must have shape [2,{channels}], got "
                        f"{dims_text(value.shape)}")


# ----------------------------------------------------------------------------- forward


def _local_stats_shape(ctx: InferenceContext) -> list[TensorShape]:
    x, axis = _x_channel(ctx, "x")
    vector = TensorShape([x[axis]])
    return [TensorShape([]), vector, vector]


def _validate_local_stats(ctx: RunContext, values: list[np.ndarray]) -> None:
    _check_x(ctx, "x", values[0])


BATCH_NORM_LOCAL_STATS = register_op(OpDef(
    name="BatchNormLocalStats",
    inputs=[ArgDef("x", type_attr="T")],
    outputs=[ArgDef("count", dtype=F64), ArgDef("mean", dtype=F64), ArgDef("m2", dtype=F64)],
    attrs=[required("T", "type", allowed=HALF_TYPES), _data_format_attr()],
    shape_fn=_local_stats_shape,
    validate=_validate_local_stats,
))
BatchNormLocalStats = make_wrapper(BATCH_NORM_LOCAL_STATS)


def _stats_shape(ctx: InferenceContext) -> list[TensorShape]:
    ctx.with_rank("count", 0)
    channel = _merge_vector(ctx, "mean", None)
    channel = _merge_vector(ctx, "m2", channel, of="mean")
    vector = TensorShape([channel])
    return [TensorShape([]), vector, vector]


def _validate_stats(ctx: RunContext, values: list[np.ndarray]) -> None:
    count, mean, m2 = values
    _check_scalar(ctx, "count", count)
    _check_vector(ctx, "mean", mean, None)
    _check_vector(ctx, "m2", m2, mean.shape[0], of="mean")


COLLECTIVE_BATCH_NORM_STATS = register_op(OpDef(
    name="CollectiveBatchNormStats",
    inputs=[ArgDef("count", dtype=F64), ArgDef("mean", dtype=F64), ArgDef("m2", dtype=F64)],
    outputs=[ArgDef("global_count", dtype=F64), ArgDef("global_mean", dtype=F64),
             ArgDef("global_m2", dtype=F64)],
    attrs=[_timeout_attr()],
    shape_fn=_stats_shape,
    validate=_validate_stats,
    is_stateful=True,
))
CollectiveBatchNormStats = make_wrapper(COLLECTIVE_BATCH_NORM_STATS)


def _apply_shape(ctx: InferenceContext) -> list[TensorShape]:
    """y: x's shape with the merged channel; the four statistics: [channel].

    mean/variance join the channel merge only when they are read (exponential_avg_factor
    != 1), as in FusedBatchNormV3's shape function."""
    x, axis = _x_channel(ctx, "x")
    channel = x[axis]
    for name in ("scale", "offset", "stat_mean", "stat_m2"):
        channel = _merge_vector(ctx, name, channel)
    for name in ("mean", "variance"):
        if ctx.attrs["exponential_avg_factor"] != 1.0:
            channel = _merge_vector(ctx, name, channel)
        else:
            ctx.with_rank(name, 1)
    ctx.with_rank("stat_count", 0)
    return [x.replace_dim(axis, channel)] + [TensorShape([channel])] * 4


def _validate_apply(ctx: RunContext, values: list[np.ndarray]) -> None:
    x, scale, offset, mean, variance, count, stat_mean, stat_m2 = values
    channels = _check_x(ctx, "x", x)
    for name, value in (("scale", scale), ("offset", offset), ("stat_mean", stat_mean),
                        ("stat_m2", stat_m2)):
        _check_vector(ctx, name, value, channels)
    needed = channels if ctx.op.attrs["exponential_avg_factor"] != 1.0 else None
    _check_vector(ctx, "mean", mean, needed)
    _check_vector(ctx, "variance", variance, needed)
    _check_scalar(ctx, "stat_count", count)


BATCH_NORM_APPLY = register_op(OpDef(
    name="BatchNormApply",
    inputs=[ArgDef("x", type_attr="T"), ArgDef("scale", type_attr="U"),
            ArgDef("offset", type_attr="U"), ArgDef("mean", type_attr="U"),
            ArgDef("variance", type_attr="U"), ArgDef("stat_count", dtype=F64),
            ArgDef("stat_mean", dtype=F64), ArgDef("stat_m2", dtype=F64)],
    outputs=[ArgDef("y", type_attr="T")] + [
        ArgDef(n, type_attr="U")
        for n in ("batch_mean", "batch_variance", "reserve_space_1", "reserve_space_2")],
    attrs=[required("T", "type", allowed=HALF_TYPES), required("U", "type", allowed=(F32,)),
           _epsilon_attr(), AttrDef("exponential_avg_factor", "float", default=1.0),
           _data_format_attr()],
    shape_fn=_apply_shape,
    validate=_validate_apply,
))
BatchNormApply = make_wrapper(BATCH_NORM_APPLY)


# ----------------------------------------------------------------------------- backward


def _grad_sums_shape(ctx: InferenceContext) -> list[TensorShape]:
    dy, axis = _x_channel(ctx, "y_backprop")
    x, _ = _x_channel(ctx, "x")
    channel = ctx.merge_dim(dy[axis], x[axis],
                            "input 'x' must have as many channels as 'y_backprop'")
    channel = _merge_vector(ctx, "stat_mean", channel)
    return [TensorShape([2, channel])]


def _check_dy_x(ctx: RunContext, dy: np.ndarray, x: np.ndarray) -> int:
    _check_x(ctx, "y_backprop", dy)
    channels = _check_x(ctx, "x", x)
    if dy.shape != x.shape:
        raise ctx.error(f"x and y_backprop must have same shape, but x has shape "
                        f"{dims_text(x.shape)} and y_backprop has shape "
                        f"{dims_text(dy.shape)}")
    return channels


def _validate_grad_sums(ctx: RunContext, values: list[np.ndarray]) -> None:
    dy, x, mean = values
    _check_vector(ctx, "stat_mean", mean, _check_dy_x(ctx, dy, x))


BATCH_NORM_LOCAL_GRAD_SUMS = register_op(OpDef(
    name="BatchNormLocalGradSums",
    inputs=[ArgDef("y_backprop", type_attr="T"), ArgDef("x", type_attr="T"),
            ArgDef("stat_mean", dtype=F64)],
    outputs=[ArgDef("sums", dtype=F64)],
    attrs=[required("T", "type", allowed=HALF_TYPES), _data_format_attr()],
    shape_fn=_grad_sums_shape,
    validate=_validate_grad_sums,
))
BatchNormLocalGradSums = make_wrapper(BATCH_NORM_LOCAL_GRAD_SUMS)


def _grad_apply_shape(ctx: InferenceContext) -> list[TensorShape]:
    dy, axis = _x_channel(ctx, "y_backprop")
    x, _ = _x_channel(ctx, "x")
    channel = ctx.merge_dim(dy[axis], x[axis],
                            "input 'x' must have as many channels as 'y_backprop'")
    for name in ("scale", "stat_mean", "stat_m2"):
        channel = _merge_vector(ctx, name, channel)
    for name in ("local_sums", "global_sums"):
        channel = _merge_sums(ctx, name, channel)
    ctx.with_rank("stat_count", 0)
    try:
        merged = dy.merge_with(x)
    except ValueError:
        raise ctx.error(f"inputs 'x' and 'y_backprop' must have the same shape, got {x} and "
                        f"{dy}") from None
    vector = TensorShape([channel])
    return [merged.replace_dim(axis, channel), vector, vector]


def _validate_grad_apply(ctx: RunContext, values: list[np.ndarray]) -> None:
    dy, x, scale, count, mean, m2, local_sums, global_sums = values
    channels = _check_dy_x(ctx, dy, x)
    for name, value in (("scale", scale), ("stat_mean", mean), ("stat_m2", m2)):
        _check_vector(ctx, name, value, channels)
    _check_scalar(ctx, "stat_count", count)
    _check_sums(ctx, "local_sums", local_sums, channels)
    _check_sums(ctx, "global_sums", global_sums, channels)


BATCH_NORM_GRAD_APPLY = register_op(OpDef(
    name="BatchNormGradApply",
    inputs=[ArgDef("y_backprop", type_attr="T"), ArgDef("x", type_attr="T"),
            ArgDef("scale", dtype=F32), ArgDef("stat_count", dtype=F64),
            ArgDef("stat_mean", dtype=F64), ArgDef("stat_m2", dtype=F64),
            ArgDef("local_sums", dtype=F64), ArgDef("global_sums", dtype=F64)],
    outputs=[ArgDef("x_backprop", type_attr="T"), ArgDef("scale_backprop", dtype=F32),
             ArgDef("offset_backprop", dtype=F32)],
    attrs=[required("T", "type", allowed=HALF_TYPES), _epsilon_attr(), _data_format_attr()],
    shape_fn=_grad_apply_shape,
    validate=_validate_grad_apply,
))
BatchNormGradApply = make_wrapper(BATCH_NORM_GRAD_APPLY)


# ----------------------------------------------------------------------------- gradients

# The statistics' dependence on x is part of BatchNormApply's x gradient (see the module
# docstring); FlatSlice is only used after the gradients are computed.
NotDifferentiable("BatchNormLocalStats", "CollectiveBatchNormStats", "BatchNormLocalGradSums")


@RegisterGradient("CollectiveAllReduce")
def _collective_all_reduce_grad(scope, op, grads):
    """Every replica's output is the same function of every replica's input, so the
    cotangent of input i is the all-reduce (same merge_op) of all replicas' cotangents."""
    return [CollectiveAllReduce(scope, grads[0], merge_op=op.attrs["merge_op"],
                                timeout_seconds=op.attrs["timeout_seconds"])]


@RegisterGradient("FlatConcat")
def _flat_concat_grad(scope, op, grads):
    """Each input gets its slice of the cotangent (inputs need fully defined shapes)."""
    result, begin = [], 0
    for value in op.inputs:
        if not value.shape.is_fully_defined():
            return [None] * len(op.inputs)  # cannot slice statically: no gradient
        result.append(FlatSlice(scope, grads[0], begin, value.shape))
        begin += value.shape.num_elements()
    return result


@RegisterGradient("BatchNormApply")
def _batch_norm_apply_grad(scope, op, grads):
    """Synchronized batch-norm backward, with N and the sums over the GLOBAL batch:

    ``x_backprop = scale r (dy - sum_dy/N - (x-mean) sum_dy_xc/N r^2)``, r = rsqrt(var+eps),
    where sum_dy and sum_dy_xc = sum(dy (x-mean)) are all-reduced over the replicas. The
    scale/offset backprops are this replica's share (local sums); summing them over the
    replicas (what data-parallel gradient reduction does) gives the global ones.
    Only y's cotangent is used (docs/tf-semantics.md#autodiff-first-order); the statistics
    inputs get no gradient.
    """
    x, scale = op.inputs[0], op.inputs[1]
    count, mean, m2 = op.inputs[5:8]
    dy = cotangent_or_zeros(scope, op, grads, 0)
    attrs = {"data_format": op.attrs["data_format"]}
    local_sums = BatchNormLocalGradSums(scope, dy, x, mean, **attrs)
    global_sums = CollectiveAllReduce(scope, local_sums, merge_op="Add")
    grad = BatchNormGradApply(scope, dy, x, scale, count, mean, m2, local_sums, global_sums,
                              epsilon=op.attrs["epsilon"], **attrs)
    return [grad.x_backprop, grad.scale_backprop, grad.offset_backprop] + [None] * 5
