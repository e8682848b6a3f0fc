"""numpy kernels of the selection ops (``ops.selection_ops``): TopKV2, Where, Bucketize.
Every backend runs them; the shape functions checked k, the rank and the boundaries."""

from __future__ import annotations

import numpy as np

from minigraph.backends.registry import register_kernel


@register_kernel("TopKV2")
def top_k(op, inputs, ctx):
    """Each row's k largest entries, largest first, equal ones in index order, NaN after
    every number: a stable sort on (is NaN, -x) for floats (-0 == +0), on ~x for integers
    (-x - 1: decreasing in x, and the minimum's has no overflow)."""
    x, k = inputs
    if x.dtype.kind in "fV":  # bfloat16 is numpy kind 'V'
        wide = x.astype(np.float64)
        order = np.lexsort((-wide, np.isnan(wide)), axis=-1)
    else:
        order = np.argsort(~x, axis=-1, kind="stable")
    indices = order[..., :int(k)]
    return [np.take_along_axis(x, indices, axis=-1),
            indices.astype(op.attrs["index_type"].np_dtype)]


@register_kernel("Where")
def where(op, inputs, ctx):
    """The coordinates of the true / nonzero entries, row-major, as int64 [count, rank]."""
    return [np.argwhere(inputs[0] != 0).astype(np.int64)]


@register_kernel("Bucketize")
def bucketize(op, inputs, ctx):
    """How many boundaries are <= each value (upper_bound; NaN: all of them)."""
    x = inputs[0]
    boundaries = np.array(op.attrs["boundaries"], np.float64)
    return [np.searchsorted(boundaries, x.astype(np.float64), side="right").astype(np.int32)]


@register_kernel("InTopKV2")
def in_top_k(op, inputs, ctx):
    """Fewer than k predictions of the row strictly above the target's, the target in range
    and every prediction of the row finite."""
    predictions, targets, k = inputs
    rows, classes = predictions.shape
    valid = (targets >= 0) & (targets < classes)
    picked = predictions[np.arange(rows), np.where(valid, targets, 0)]
    above = (predictions > picked[:, None]).sum(axis=1)
    finite = np.isfinite(predictions).all(axis=1)
    return [valid & finite & (above < int(k))]


@register_kernel("Unique", "UniqueWithCounts")
def unique(op, inputs, ctx):
    """Distinct values by first appearance (-0 == +0; each NaN its own value), each element's
    index into them, and (UniqueWithCounts) their counts."""
    x = inputs[0]
    index_type = op.attrs["out_idx"].np_dtype
    first: dict = {}
    idx = np.empty(x.shape[0], index_type)
    order = []
    for i, value in enumerate(x.tolist()):
        key = (i,) if value != value else value  # NaN != NaN: a key of its own
        if key not in first:
            first[key] = len(order)
            order.append(i)
        idx[i] = first[key]
    y = x[np.array(order, np.int64)] if order else x[:0].copy()
    outputs = [np.ascontiguousarray(y), idx]
    if op.type == "UniqueWithCounts":
        outputs.append(np.bincount(idx, minlength=len(order)).astype(index_type))
    return outputs
