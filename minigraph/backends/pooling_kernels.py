"""numpy and native kernels of the pooling ops (``ops.pooling_ops``).

numpy: one 1-D pass per spatial axis (height, width; planes first for the 3-D pools of
``backends.volumetric_kernels``) over the window offsets that some output reads in
bounds (never over pixels), each step a strided slice of the whole batch, in the tensor's
own layout; windows are clipped to the input (no padded copy), so the cost is the output
size times the clipped window, whatever ksize is. MaxPool is TF's (NaN ignored:
``tf_max``). MaxPoolGrad locates each window's first maximum with the same passes, then
scatters at it. float16/bfloat16 are computed in float32 and rounded once; float64 stays
float64.

native (``backend="native"``, float32): MaxPool, MaxPoolGrad, AvgPool and AvgPoolGrad for
every window, stride and padding, in C (kernels_c/pooling*.c) through the ``c_*`` wrappers
at the bottom: the numpy kernels' results bit for bit (the same additions in the same
order), whatever the thread count.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from minigraph.backends.compute import compute_dtype, fail_for, placed_rows
from minigraph.backends.native import (
    as_f32,
    attrs_fit_int32,
    c_call,
    check_code,
    check_rank4,
    checked_sizes,
    fbuf,
    lib,
    nhwc_dims,
    num_threads,
    output_array,
    plain_f32,
    shaped,
    unshared,
)
from minigraph.backends.registry import register_kernel, set_replay
from minigraph.framework import dtypes
from minigraph.ops.pooling_ops import pool_output_shape
from minigraph.ops.window import Window, spatial_axes

F32 = np.float32


# ----------------------------------------------------------------------------- pooling core
#
# A pool window is a rectangle, so every pool is two 1-D passes (height, then width, or the
# reverse for the adjoints), each a loop over the window offsets that some output reads in
# bounds. Windows are clipped to the input: nothing is padded, an offset that only ever
# lands in padding is never visited, and the work is (output size) x (clipped window) plus
# one pass over the input, whatever ksize is (a 3000 x 3000 window over 8 x 8 costs what an
# 8 x 8 one does). Along one axis with input length n, window k, stride s, leading pad b and
# `out` outputs, output p reads the inputs r = i + s*p - b for the offsets i in [0, k) with
# 0 <= r < n; consecutive outputs overlap when s < n, so the offsets read are one run of at
# most min(k, n + s*(out - 1)) values, and otherwise at most min(k, n) per output.


def _placed(axis: int, index) -> tuple:
    """An index of a tensor: ``index`` on ``axis``, everything elsewhere."""
    return (slice(None),) * axis + (index,)


class PoolAxis:
    """The window geometry of one spatial axis (see the comment above)."""

    def __init__(self, size: int, k: int, stride: int, before: int, out: int) -> None:
        self.size, self.k, self.stride, self.before, self.out = size, k, stride, before, out

    def offsets(self):
        """(p0, p1, input slice): for each window offset i, in increasing order, that some
        output reads in bounds, the outputs p in [p0, p1) that do and the inputs
        ``i + s*p - b`` they read (a strided slice)."""
        n, k, s, b, out = self.size, self.k, self.stride, self.before, self.out
        if out <= 0 or n <= 0:
            return
        if s < n:  # the in-bounds offsets of consecutive outputs overlap: one run
            runs = [(max(0, b - s * (out - 1)), min(k, b + n))]
        else:  # disjoint runs, one per output (the last output has the smallest offsets)
            runs = [(max(0, b - s * p), min(k, b - s * p + n)) for p in range(out - 1, -1, -1)]
        for lo, hi in runs:
            for i in range(lo, hi):
                p0, p1 = placed_rows(i - b, s, out, n)
                if p1 > p0:
                    start = i - b + s * p0
                    yield p0, p1, slice(start, start + s * (p1 - p0 - 1) + 1, s)

    def first(self) -> np.ndarray:
        """[out]: the first in-bounds input index of each output's window."""
        return np.maximum(self.stride * np.arange(self.out) - self.before, 0)

    def counts(self) -> np.ndarray:
        """[out]: how many in-bounds inputs each output's window covers,
        ``min(n, s*p - b + k) - max(0, s*p - b)``."""
        start = self.stride * np.arange(self.out, dtype=np.int64) - self.before
        return np.minimum(start + self.k, self.size) - np.maximum(start, 0)


class Pool:
    """A pool's spatial axes (2, or 3 for the 3-D pools) over a tensor in its own layout
    (channels last or first). ``argmax`` and ``flat_index`` serve the 2-D max-pool
    gradients."""

    def __init__(self, window: Window, data_format: str, in_sizes: tuple[int, ...]) -> None:
        self.window = window
        self.tensor_axes = spatial_axes(data_format)[:-1]
        self.h_axis, self.w_axis = self.tensor_axes[-2:]
        self.axes = tuple(PoolAxis(size, window.ksize[d], window.strides[d],
                                   window.pads[d][0], window.out[d])
                          for d, size in enumerate(in_sizes))

    def _along(self, d: int) -> tuple[int, PoolAxis]:
        return self.tensor_axes[d], self.axes[d]

    def reduce(self, x: np.ndarray, d: int, combine, init) -> np.ndarray:
        """``combine`` (np.add, tf_max) of each window of spatial axis ``d`` (0: the
        first, height or planes), starting from ``init``; in bounds only, offsets in
        increasing order."""
        axis, geo = self._along(d)
        shape = list(x.shape)
        shape[axis] = geo.out
        out = np.full(shape, init, x.dtype)
        for p0, p1, src in geo.offsets():
            block = out[_placed(axis, slice(p0, p1))]
            combine(block, x[_placed(axis, src)], out=block)
        return out

    def spread(self, g: np.ndarray, d: int) -> np.ndarray:
        """The adjoint of ``reduce(., d, np.add, 0)``: every output's value added to each
        in-bounds input of its window along axis ``d``."""
        axis, geo = self._along(d)
        shape = list(g.shape)
        shape[axis] = geo.size
        out = np.zeros(shape, g.dtype)
        for p0, p1, dst in geo.offsets():
            out[_placed(axis, dst)] += g[_placed(axis, slice(p0, p1))]
        return out

    def counts(self) -> np.ndarray:
        """How many in-bounds input elements each output window covers (broadcastable)."""
        total = np.ones((), np.int64)
        for geo in self.axes:
            total = np.multiply.outer(total, geo.counts())
        return self.spatial(total)

    def spatial(self, sizes: np.ndarray) -> np.ndarray:
        """An array of the output's spatial shape reshaped to broadcast against the
        tensor's layout."""
        shape = [1] * (len(self.axes) + 2)
        for axis, size in zip(self.tensor_axes, sizes.shape):
            shape[axis] = size
        return sizes.reshape(shape)

    def _first_max(self, key: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
        """(max, input index of its first occurrence) of ``key`` over each window of axis
        ``d``: a later offset replaces the best only when strictly greater."""
        axis, geo = self._along(d)
        shape = list(key.shape)
        shape[axis] = geo.out
        best = np.zeros(shape, key.dtype)
        arg = np.full(shape, -1, np.int64)
        bshape = [1] * key.ndim
        for p0, p1, src in geo.offsets():
            block = _placed(axis, slice(p0, p1))
            value, b, a = key[_placed(axis, src)], best[block], arg[block]
            take = (value > b) | (a < 0)
            np.copyto(b, value, where=take)
            bshape[axis] = p1 - p0
            where = np.arange(src.start, src.stop, src.step).reshape(bshape)
            np.copyto(a, where, where=take)
        return best, arg

    def argmax(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(row, column) input indices, output-shaped, of the first maximum of every window
        in row-major order over its in-bounds elements, where a later element replaces the
        maximum only when strictly greater (TF's CPU rule; ties keep the first).

        That scan ends on the window's first element when it is NaN (nothing is greater),
        and otherwise on the first occurrence of the maximum with NaN read as -inf (NaN never
        replaces a number). The first occurrence in row-major order is separable: the first
        maximum of every row's segment (width pass), then the first row whose segment
        maximum is largest (height pass)."""
        key = x
        if x.dtype.kind == "f":
            nan = np.isnan(x)
            if nan.any():
                key = np.where(nan, -np.inf, x).astype(x.dtype)
        row_best, cols = self._first_max(key, 1)
        _, rows = self._first_max(row_best, 0)
        cols = np.take_along_axis(cols, rows, axis=self.h_axis)
        if key is not x:  # windows whose first element is NaN keep it
            first_h = self.spatial(self.axes[0].first()[:, None])
            first_w = self.spatial(self.axes[1].first()[None, :])
            first = x.take(self.axes[0].first(), self.h_axis).take(self.axes[1].first(),
                                                                    self.w_axis)
            stuck = np.isnan(first)
            rows = np.where(stuck, first_h, rows)
            cols = np.where(stuck, first_w, cols)
        return rows, cols

    def flat_index(self, x_shape, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """Flat (C-order) indices into a tensor of ``x_shape`` of the elements at (rows,
        cols) of every output's own batch and channel."""
        strides = np.cumprod((1,) + tuple(x_shape[:0:-1]))[::-1]
        index = rows * int(strides[self.h_axis]) + cols * int(strides[self.w_axis])
        for axis in range(4):
            if axis not in (self.h_axis, self.w_axis):
                shape = [1, 1, 1, 1]
                shape[axis] = x_shape[axis]
                index = index + (np.arange(x_shape[axis]) * int(strides[axis])).reshape(shape)
        return index


def pool_setup(op, x_shape, data_format) -> tuple[tuple, Pool]:
    """(output shape, :class:`Pool`) of the pool node ``op`` over an input of ``x_shape``."""
    out_shape, window = pool_output_shape(op.attrs, fail_for(op), x_shape)
    *spatial, _ = spatial_axes(data_format)
    return tuple(out_shape), Pool(window, data_format, tuple(x_shape[a] for a in spatial))


def pool_lowest(dtype: np.dtype):
    """TF's starting maximum of a max pool over ``dtype``: the lowest finite value, except
    bfloat16's -inf (TF pools it from float32's lowest, which rounds to -inf)."""
    dtype = np.dtype(dtype)
    if dtype == np.dtype(ml_dtypes.bfloat16):
        return -np.inf
    return np.finfo(dtype).min if dtype.kind == "f" else np.iinfo(dtype).min


def tf_max(best: np.ndarray, x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """TF's max-pool step: ``out = x where x > best else best``. NaN never wins and ties
    keep the earlier element (-0 then +0 gives -0); from :func:`pool_lowest`, a window of
    NaN (and -inf) only gives that lowest value."""
    np.copyto(out, best)
    np.copyto(out, x, where=x > best)
    return out


def c_pool_fits(op) -> bool:
    """The pools the C kernels handle (besides float32): a geometry that fits int32 (any
    real one does; padding never exceeds the window)."""
    return attrs_fit_int32(op, "ksize", "strides", "explicit_paddings")


@register_kernel("MaxPool")
def max_pool(op, inputs, ctx):
    """TF's CPU maximum of each window's in-bounds elements (:func:`tf_max` from
    :func:`pool_lowest`: NaN ignored, the first of equal zeros kept), one spatial axis after
    the other, innermost (width) first (any number of them: MaxPool3D runs it too). The
    passes give the row-major scan's result: each keeps the largest non-NaN value at its
    first occurrence, so the width pass the first in each row, the next the first row."""
    x = inputs[0]
    out_shape, pool = pool_setup(op, x.shape, op.attrs["data_format"])
    if 0 in out_shape:
        return [np.zeros(out_shape, x.dtype)]
    ct = compute_dtype(x.dtype)
    y = x.astype(ct, copy=False)
    for d in reversed(range(len(pool.axes))):  # innermost first: the row-major first
        y = pool.reduce(y, d, tf_max, pool_lowest(x.dtype))
    return [y.astype(x.dtype, copy=False)]


def _max_pool_grad_inputs(op, inputs):
    x, _, g = inputs
    out_shape, pool = pool_setup(op, x.shape, op.attrs["data_format"])
    return x, g, out_shape, pool


@register_kernel("MaxPoolGrad")
def max_pool_grad(op, inputs, ctx):
    """Each output's gradient goes to the first maximum of its window (TF's CPU rule);
    the contributions to one input element add up from the last output to the first."""
    x, g, out_shape, pool = _max_pool_grad_inputs(op, inputs)
    ct = compute_dtype(x.dtype)
    if 0 in out_shape or x.size == 0:
        return [np.zeros(x.shape, x.dtype)]
    w = pool.window
    disjoint = w.strides[0] >= w.ksize[0] and w.strides[1] >= w.ksize[1]
    rows, cols = pool.argmax(x.astype(ct, copy=False))
    index = pool.flat_index(x.shape, rows, cols).ravel()
    dx = np.zeros(x.size, ct)
    if disjoint:  # one contribution per element at most: 0 + g (a -0 gradient gives +0)
        dx[index] = np.asarray(0, ct) + g.astype(ct, copy=False).ravel()
    else:  # in reverse output order: the order the window offsets once added them in
        np.add.at(dx, index[::-1], g.astype(ct, copy=False).ravel()[::-1])
    return [dx.reshape(x.shape).astype(x.dtype, copy=False)]


def _pool_native(op, inputs, ctx, c_pool, numpy_pool, out=None):
    """A forward pool on the C kernel ``c_pool`` (into ``out`` where it fits); an empty
    output on ``numpy_pool``."""
    x = inputs[0]
    out_shape, pool = pool_setup(op, x.shape, op.attrs["data_format"])
    if 0 in out_shape:
        return numpy_pool(op, inputs, ctx)
    w = pool.window
    return [c_pool(x, w.ksize, w.strides, w.pads, w.out, op.attrs["data_format"] == "NHWC",
                   out=out)]


@register_kernel("MaxPool", backend="native", dtypes=(dtypes.float32,), when=c_pool_fits,
                 out=True)
def max_pool_native(op, inputs, ctx, out=None):
    return _pool_native(op, inputs, ctx, c_max_pool, max_pool, out)


def _pool_replay(c_name: str):
    """The replay maker (``registry.ReplayMaker``) of a forward pool on the C entry point
    ``c_name`` (``mg_max_pool``, ``mg_avg_pool``): its arguments made once."""
    def maker(op, values: list, outputs: list, ctx):
        x, y = values[0], outputs[0]
        if not (plain_f32(x) and plain_f32(y) and y.flags.writeable):
            return None
        out_shape, pool = pool_setup(op, x.shape, op.attrs["data_format"])
        if 0 in out_shape or y.shape != tuple(out_shape):
            return None
        w = pool.window
        args = (*_c_pool_args(op.type, x, w.ksize, w.strides, w.pads, w.out,
                              op.attrs["data_format"] == "NHWC"),
                fbuf(x), fbuf(y), num_threads())
        return c_call(getattr(lib, c_name), args, op.type, (values, outputs))

    return maker


@register_kernel("MaxPoolGrad", backend="native", dtypes=(dtypes.float32,), when=c_pool_fits,
                 out=True)
def max_pool_grad_native(op, inputs, ctx, out=None):
    x, g, out_shape, pool = _max_pool_grad_inputs(op, inputs)
    if 0 in out_shape or x.size == 0:
        return max_pool_grad(op, inputs, ctx)
    w = pool.window
    return [c_max_pool_grad(x, g, w.ksize, w.strides, w.pads, w.out,
                            op.attrs["data_format"] == "NHWC", out=unshared(out, inputs[1]))]


@register_kernel("AvgPool")
def avg_pool(op, inputs, ctx):
    """Window sums over the in-bounds elements (one spatial axis after the other: height,
    then width; planes first in 3-D) divided by the in-bounds element count (TF: padding
    is not counted). AvgPool3D runs it too."""
    x = inputs[0]
    out_shape, pool = pool_setup(op, x.shape, op.attrs["data_format"])
    if 0 in out_shape:
        return [np.zeros(out_shape, x.dtype)]
    ct = compute_dtype(x.dtype)
    total = x.astype(ct, copy=False)
    for d in range(len(pool.axes)):
        total = pool.reduce(total, d, np.add, 0)
    return [(total / pool.counts().astype(ct)).astype(x.dtype, copy=False)]


@register_kernel("AvgPool", backend="native", dtypes=(dtypes.float32,), when=c_pool_fits,
                 out=True)
def avg_pool_native(op, inputs, ctx, out=None):
    return _pool_native(op, inputs, ctx, c_avg_pool, avg_pool, out)


set_replay(max_pool_native, _pool_replay("mg_max_pool"))
set_replay(avg_pool_native, _pool_replay("mg_avg_pool"))


@register_kernel("AvgPoolGrad")
def avg_pool_grad(op, inputs, ctx):
    """Each output's gradient, divided by its window's count, spread over the window's
    in-bounds elements (the last spatial axis first: the adjoint of AvgPool's passes).
    AvgPool3DGrad runs it too."""
    sizes, g = inputs
    x_shape = tuple(sizes.tolist())
    out_shape, pool = pool_setup(op, x_shape, op.attrs["data_format"])
    ct = compute_dtype(g.dtype)
    if 0 in out_shape:
        return [np.zeros(x_shape, g.dtype)]
    dx = g.astype(ct, copy=False) / pool.counts().astype(ct)
    for d in reversed(range(len(pool.axes))):
        dx = pool.spread(dx, d)
    return [dx.astype(g.dtype)]


@register_kernel("AvgPoolGrad", backend="native", dtypes=(dtypes.float32,), when=c_pool_fits,
                 out=True)
def avg_pool_grad_native(op, inputs, ctx, out=None):
    sizes, g = inputs
    x_shape = tuple(sizes.tolist())
    out_shape, pool = pool_setup(op, x_shape, op.attrs["data_format"])
    if 0 in out_shape or 0 in x_shape:
        return avg_pool_grad(op, inputs, ctx)
    w = pool.window
    return [c_avg_pool_grad(g, x_shape, w.ksize, w.strides, w.pads, w.out,
                            op.attrs["data_format"] == "NHWC", out=out)]


# ----------------------------------------------------------------------------- C wrappers


def _c_pool_args(what, x, ksize, strides, pads, out_hw, channels_last):
    """The C arguments of a pool over x, checked: every window must start inside the image
    (``(out - 1) * stride - pad_before < size``, true of SAME, VALID and EXPLICIT windows
    with pads smaller than the window), so C reads x only at clipped in-bounds positions
    and writes exactly ``n * out_h * out_w * c`` outputs."""
    check_rank4(what, input=x)
    n, h, w, c = nhwc_dims(x.shape, channels_last)
    kh, kw, sh, sw, top, left, oh, ow = checked_sizes(
        what, ksize_h=ksize[0], ksize_w=ksize[1], stride_h=strides[0], stride_w=strides[1],
        pad_top=pads[0][0], pad_left=pads[1][0], out_h=out_hw[0], out_w=out_hw[1])
    for k, s, pad, out, size, axis in ((kh, sh, top, oh, h, "height"),
                                       (kw, sw, left, ow, w, "width")):
        if k < 1 or s < 1 or pad >= k or (out and (out - 1) * s - pad >= size):
            raise ValueError(f"native {what}: {out} windows of size {k}, stride {s} and "
                             f"padding {pad} do not fit an input of {axis} {size}")
    return (n, h, w, c, kh, kw, sh, sw, top, left, oh, ow, int(channels_last))


def _c_pool_forward(what, c_fn, x, ksize, strides, pads, out_hw, channels_last, out=None):
    """The forward pool ``what`` on the checked C entry point ``c_fn`` (mg_max_pool or
    mg_avg_pool: the same arguments), into ``out`` where it fits."""
    x = as_f32(x)
    args = _c_pool_args(what, x, ksize, strides, pads, out_hw, channels_last)
    y = output_array(out, shaped(args[0], args[10], args[11], args[3], channels_last), x)
    check_code(c_fn(*args, fbuf(x), fbuf(y), num_threads()), what)
    return y


def c_max_pool(x, ksize, strides, pads, out_hw, channels_last, out=None):
    """TF's max of each window's in-bounds elements (NaN ignored; see ``max_pool``)."""
    return _c_pool_forward("MaxPool", lib.mg_max_pool, x, ksize, strides, pads, out_hw,
                           channels_last, out)


def _check_grad(what: str, g: np.ndarray, args: tuple, channels_last: bool) -> None:
    expected = shaped(args[0], args[10], args[11], args[3], channels_last)
    if g.shape != expected:
        raise ValueError(f"native {what}: grad must have the pool's shape {expected}, "
                         f"got {g.shape}")


def c_max_pool_grad(x, g, ksize, strides, pads, out_hw, channels_last, relu=False, out=None):
    """Each window's gradient g to its first maximum in x (row-major, strict >), summed
    where windows overlap (kernels_c/pooling.h: the numpy kernel's order). g has the pool's
    output shape. ``relu``: x is a Relu's output and ReluGrad's mask ``x > 0`` is applied in
    the same store (``mg_max_pool_grad_relu``: ReluGrad(MaxPoolGrad(x, g), x) bit for bit).
    dx in ``out`` where it fits."""
    what = "_FusedMaxPoolGradReluGrad" if relu else "MaxPoolGrad"
    x, g = as_f32(x), as_f32(g)
    args = _c_pool_args(what, x, ksize, strides, pads, out_hw, channels_last)
    _check_grad(what, g, args, channels_last)
    dx = output_array(out, x.shape, x, g)
    c_fn = lib.mg_max_pool_grad_relu if relu else lib.mg_max_pool_grad
    check_code(c_fn(*args, fbuf(x), fbuf(g), fbuf(dx), num_threads()), what)
    return dx


def c_relu_max_pool(x, ksize, strides, pads, out_hw, channels_last, out=None):
    """(MaxPool(Relu(x)), Relu(x)) in one pass over x (``mg_relu_max_pool``): the native
    Relu's and MaxPool's bits; the pool in ``out`` where it fits."""
    x = as_f32(x)
    args = _c_pool_args("_FusedReluMaxPool", x, ksize, strides, pads, out_hw, channels_last)
    y = output_array(out, shaped(args[0], args[10], args[11], args[3], channels_last), x)
    r = np.empty(x.shape, F32)
    check_code(lib.mg_relu_max_pool(*args, fbuf(x), fbuf(y), fbuf(r), num_threads()),
               "_FusedReluMaxPool")
    return y, r


def c_avg_pool(x, ksize, strides, pads, out_hw, channels_last, out=None):
    """Mean over each window's in-bounds elements (kernels_c/pooling.h's order)."""
    return _c_pool_forward("AvgPool", lib.mg_avg_pool, x, ksize, strides, pads, out_hw,
                           channels_last, out)


def c_avg_pool_grad(g, x_shape, ksize, strides, pads, out_hw, channels_last, out=None):
    """AvgPool's input gradient for an input of ``x_shape``: each window's g / count spread
    over its in-bounds elements (kernels_c/pooling.h's order). g has the pool's shape; dx
    in ``out`` where it fits."""
    g = as_f32(g)
    shape_only = np.broadcast_to(F32(0), tuple(x_shape))  # the geometry checks read shapes
    args = _c_pool_args("AvgPoolGrad", shape_only, ksize, strides, pads, out_hw,
                        channels_last)
    _check_grad("AvgPoolGrad", g, args, channels_last)
    dx = output_array(out, tuple(x_shape), g)
    check_code(lib.mg_avg_pool_grad(*args, fbuf(g), fbuf(dx), num_threads()), "AvgPoolGrad")
    return dx
