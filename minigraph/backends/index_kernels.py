"""Kernels of the index family (GatherV2, UnsortedSegmentSum, OneHot, Range): numpy, the same
on every backend. The shape functions and the ops' ``validate`` checked every index before
these run."""

from __future__ import annotations

import math

import numpy as np

from minigraph.backends.compute import compute_dtype
from minigraph.backends.registry import register_kernel, set_replay, store_results
from minigraph.framework.op_def import RunContext
from minigraph.framework.tensor_shape import TensorShape
from minigraph.ops.index_ops import GatherSpec, range_size


@register_kernel("GatherV2")
def gather_v2(op, inputs, ctx):
    """output[batch..., p_before..., i..., p_after...] =
    params[batch..., p_before..., indices[batch..., i...], p_after...]."""
    params, indices, axis = inputs
    if not op.attrs["batch_dims"]:  # the common case, checked already: a plain take
        return [np.take(params, indices, axis=int(axis) % max(params.ndim, 1))]
    spec = GatherSpec(TensorShape(params.shape), TensorShape(indices.shape), int(axis),
                      op.attrs["batch_dims"], lambda message: ctx.error(op, message))
    a, b = spec.axis, spec.batch_dims
    batch, q = params.shape[:b], indices.ndim - b
    count = math.prod(batch)
    moved = np.moveaxis(params.reshape((count,) + params.shape[b:]), a - b + 1, 1)
    rows = np.arange(count).reshape((count,) + (1,) * q)
    picked = moved[rows, indices.reshape((count,) + indices.shape[b:])]
    # [B, i..., p_before..., p_after...] -> [B, p_before..., i..., p_after...]
    before = a - b
    order = [0, *range(1 + q, 1 + q + before), *range(1, 1 + q),
             *range(1 + q + before, picked.ndim)]
    out = np.ascontiguousarray(picked.transpose(order))
    return [out.reshape(batch + out.shape[1:])]


def _gather_replay(op, values: list, outputs: list, ctx):
    """GatherV2 of one index on fixed arrays (``registry.ReplayMaker``), a recurrent loop's
    read of its input at step i: the row copied where the index is in range and the axis as
    when made; otherwise the kernel after the op's own check, which raises its error."""
    params, indices, axis = values
    out = outputs[0]
    if (op.attrs["batch_dims"] or indices.ndim or indices.dtype.kind not in "iu"
            or np.ndim(axis) or not params.ndim):
        return None
    made = int(axis)
    if not -params.ndim <= made < params.ndim:
        return None
    where = made % params.ndim
    limit, before = params.shape[where], (slice(None),) * where
    if out.shape != params.shape[:where] + params.shape[where + 1:] or out.dtype != params.dtype:
        return None

    def replayed() -> None:
        index = int(indices)
        if 0 <= index < limit and int(axis) == made:
            np.copyto(out, params[(*before, index)])
        else:
            op.op_def.validate(RunContext(op), values)
            store_results(op, outputs, gather_v2(op, values, ctx))

    return replayed


set_replay(gather_v2, _gather_replay, validates=True)


@register_kernel("UnsortedSegmentSum")
def unsorted_segment_sum(op, inputs, ctx):
    """output[j] = the sum of data[i] over the i with segment_ids[i] == j (negative ids
    dropped), in the order of i; half precision sums in float32, rounded once."""
    data, ids, count = inputs
    inner = data.shape[ids.ndim:]
    flat_ids = ids.reshape(-1)
    kept = flat_ids >= 0
    rows = data.reshape((flat_ids.size,) + inner)[kept]
    out = np.zeros((int(count),) + inner, compute_dtype(data.dtype))
    np.add.at(out, flat_ids[kept], rows.astype(out.dtype))
    return [out.astype(data.dtype)]


@register_kernel("OneHot")
def one_hot(op, inputs, ctx):
    """on_value where the new dimension's position equals the index, off_value elsewhere
    (everywhere for an index outside [0, depth))."""
    indices, depth, on_value, off_value = inputs
    hot = indices[..., None] == np.arange(int(depth))
    out = np.where(hot, on_value, off_value).astype(on_value.dtype)
    axis = op.attrs["axis"]
    return [np.ascontiguousarray(out if axis == -1 else np.moveaxis(out, -1, axis))]


@register_kernel("Range")
def range_(op, inputs, ctx):
    """start + i * delta for i < size, computed as TF's kernel computes it: exactly for
    integers, in the scalars' own type for floats (i converted, multiplied, added)."""
    start, limit, delta = (v[()] for v in inputs)
    size = range_size(start, limit, delta, lambda message: ctx.error(op, message))
    if isinstance(start, np.integer):  # exact modulo 2**64; every element fits the type
        wrapped = (np.uint64(int(start) % 2 ** 64)
                   + np.arange(size, dtype=np.uint64) * np.uint64(int(delta) % 2 ** 64))
        return [wrapped.view(np.int64).astype(start.dtype)]
    steps = np.arange(size).astype(start.dtype)
    return [start + steps * delta]


@register_kernel("LinSpace")
def lin_space(op, inputs, ctx):
    """start + step * i in the values' type (step = (stop - start) / (num - 1) rounded to
    it), the last value stop itself; num == 1 gives [start] (TF's kernel)."""
    start, stop, num = (v[()] for v in inputs)
    num = int(num)
    if num == 1:
        return [np.array([start])]
    dtype = start.dtype
    step = dtype.type((stop - start) / dtype.type(num - 1))
    out = start + step * np.arange(num).astype(dtype)
    out[-1] = stop
    return [out.astype(dtype, copy=False)]


@register_kernel("GatherNd")
def gather_nd(op, inputs, ctx):
    """params[tuple(row)] for each row of indices (the shape function checked the rows)."""
    params, indices = inputs
    depth = indices.shape[-1]
    rows = indices.reshape(math.prod(indices.shape[:-1]), depth)
    picked = params[tuple(rows.T)] if depth else np.broadcast_to(
        params, (rows.shape[0], *params.shape))
    return [np.ascontiguousarray(picked).reshape(indices.shape[:-1] + params.shape[depth:])]


@register_kernel("ScatterNd")
def scatter_nd(op, inputs, ctx):
    """Zeros of ``shape`` with each update added at its index (duplicates summed in index
    order, as TF's CPU kernel adds them)."""
    indices, updates, shape = inputs
    out = np.zeros(tuple(shape.tolist()), updates.dtype)
    depth = indices.shape[-1]
    rows = indices.reshape(math.prod(indices.shape[:-1]), depth)
    np.add.at(out, tuple(rows.T), updates.reshape(rows.shape[0], *out.shape[depth:]))
    return [out]


def _tensor_scatter(combine):
    """A TensorScatter kernel: a copy of the tensor, ``combine(copy, index, updates)`` in
    index-row order (the shape function checked the rows)."""
    def kernel(op, inputs, ctx):
        tensor, indices, updates = inputs
        out = tensor.copy()
        depth = indices.shape[-1]
        rows = indices.reshape(math.prod(indices.shape[:-1]), depth)
        combine(out, tuple(rows.T), updates.reshape(rows.shape[0], *tensor.shape[depth:]))
        return [out]

    return kernel


def _assign_in_order(out, index, updates):
    """Writes in index order, so a row written twice keeps the last update (TF's CPU)."""
    for position in range(updates.shape[0]):
        out[tuple(axis[position] for axis in index)] = updates[position]


register_kernel("TensorScatterUpdate")(_tensor_scatter(_assign_in_order))
register_kernel("TensorScatterAdd")(_tensor_scatter(np.add.at))
register_kernel("TensorScatterSub")(_tensor_scatter(np.subtract.at))


@register_kernel("DenseBincount")
def dense_bincount(op, inputs, ctx):
    """Per row (or for the vector), the count or summed weight of each value in [0, size),
    1 where it occurs with binary_output; larger values dropped."""
    x, size, weights = inputs
    bins = int(size)
    rows = x.reshape(1, -1) if x.ndim == 1 else x
    out = np.zeros((rows.shape[0], bins), weights.dtype)
    keep = rows < bins
    row_index = np.broadcast_to(np.arange(rows.shape[0])[:, None], rows.shape)[keep]
    if op.attrs["binary_output"]:
        out[row_index, rows[keep]] = 1
    else:
        added = np.ones(rows.shape, weights.dtype) if weights.size == 0 else \
            weights.reshape(rows.shape)
        np.add.at(out, (row_index, rows[keep]), added[keep])
    return [out[0] if x.ndim == 1 else out]
