"""numpy kernels of the reductions and scans (``ops.reduction_ops``); every backend runs them.

``Max``/``Min`` are exact in ``T`` (NaN propagates, as in TF); ``Prod``, ``EuclideanNorm``,
``Cumsum``, ``Cumprod`` and ``CumulativeLogsumexp`` accumulate floating types in float64
and round once to ``T`` (TF accumulates in ``T``: for long float16 sums the results differ,
see docs/ops/reductions.md), integers in
``T`` (wrapping around as TF's do). ``ArgMin`` (and ``ArgMax``, whose kernel in
``nn_kernels`` calls :func:`arg_extreme`) skip NaN as TF's CPU kernels do.
"""

from __future__ import annotations

import numpy as np

from minigraph.backends.compute import compute_dtype
from minigraph.backends.math_kernels import _axes
from minigraph.backends.registry import register_kernel


def _empty_identity(x: np.ndarray, largest: bool):
    """The value a Max (``largest``) or Min of no elements gives: -inf/+inf for floats, the
    lowest/highest integer."""
    if x.dtype.kind in "iu":
        info = np.iinfo(x.dtype)
        return info.min if largest else info.max
    return -np.inf if largest else np.inf


def _extreme(largest: bool):
    function = np.max if largest else np.min

    def kernel(op, inputs, ctx):
        x, axes = inputs
        value = function(x, axis=_axes(x, axes), keepdims=op.attrs["keep_dims"],
                         initial=_empty_identity(x, largest))
        return [np.asarray(value, x.dtype)]

    return kernel


register_kernel("Max")(_extreme(largest=True))
register_kernel("Min")(_extreme(largest=False))


def _accumulation_dtype(x: np.ndarray) -> np.dtype:
    """float64 for floating types, ``T`` for integers."""
    return np.dtype(np.float64) if x.dtype.kind in "fV" else x.dtype


@register_kernel("Prod")
def reduce_prod(op, inputs, ctx):
    x, axes = inputs
    with np.errstate(all="ignore"):  # overflow to inf, also when rounding to T
        value = np.prod(x, axis=_axes(x, axes), keepdims=op.attrs["keep_dims"],
                        dtype=_accumulation_dtype(x))
        return [np.asarray(value).astype(x.dtype, copy=False)]


@register_kernel("All")
def reduce_all(op, inputs, ctx):
    x, axes = inputs
    return [np.asarray(np.all(x, axis=_axes(x, axes), keepdims=op.attrs["keep_dims"]))]


@register_kernel("Any")
def reduce_any(op, inputs, ctx):
    x, axes = inputs
    return [np.asarray(np.any(x, axis=_axes(x, axes), keepdims=op.attrs["keep_dims"]))]


def arg_extreme(x: np.ndarray, axis: int, largest: bool, out_dtype: np.dtype) -> np.ndarray:
    """The index of the first largest (smallest) element along ``axis``, NaN skipped as TF's
    CPU kernels skip it (a comparison with NaN is false): an all-NaN row gives 0."""
    values = x.astype(compute_dtype(x.dtype), copy=False)
    if values.dtype.kind == "f":
        values = np.where(np.isnan(values), -np.inf if largest else np.inf, values)
    index = np.argmax(values, axis=axis) if largest else np.argmin(values, axis=axis)
    return np.asarray(index).astype(out_dtype)


@register_kernel("ArgMin")
def arg_min(op, inputs, ctx):
    """Index of the first smallest value along 'dimension' (checked by the shape function)."""
    x, dimension = inputs
    return [arg_extreme(x, int(dimension) % x.ndim, False, op.attrs["output_type"].np_dtype)]


def _scan(ufunc, identity: int):
    """A Cumsum (``np.add``) or Cumprod (``np.multiply``) kernel."""
    def kernel(op, inputs, ctx):
        x, axis = inputs
        axis = int(axis) % x.ndim  # the shape function checked it
        values = x.astype(_accumulation_dtype(x), copy=False)
        if op.attrs["reverse"]:
            values = np.flip(values, axis)
        with np.errstate(all="ignore"):  # overflow to inf, also when rounding to T
            result = ufunc.accumulate(values, axis=axis, dtype=values.dtype)
            if op.attrs["exclusive"] and x.shape[axis]:
                first = np.full_like(np.take(result, [0], axis=axis), identity)
                result = np.concatenate([first, np.delete(result, -1, axis=axis)], axis=axis)
            if op.attrs["reverse"]:
                result = np.flip(result, axis)
            return [np.ascontiguousarray(result).astype(x.dtype, copy=False)]

    return kernel


register_kernel("Cumsum")(_scan(np.add, 0))
register_kernel("Cumprod")(_scan(np.multiply, 1))
register_kernel("CumulativeLogsumexp")(_scan(np.logaddexp, -np.inf))


@register_kernel("EuclideanNorm")
def euclidean_norm(op, inputs, ctx):
    """sqrt(sum(x^2)) accumulated in float64 (integers too), rounded once to T (integers
    truncated, as TF's sqrt of an integer sum is)."""
    x, axes = inputs
    wide = x.astype(np.float64)
    with np.errstate(all="ignore"):
        value = np.sqrt(np.sum(wide * wide, axis=_axes(x, axes),
                               keepdims=op.attrs["keep_dims"]))
        return [np.asarray(value).astype(x.dtype, copy=False)]
