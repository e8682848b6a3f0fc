"""numpy CPU kernels of the convolution and pooling ops (``ops.nn_ops``).

Convolutions are im2col + one BLAS matmul: the (padded) input is viewed with
``as_strided`` as ``[batch, out_h, out_w, kh, kw, in_channels]`` patches, copied once into a
``[batch*out_h*out_w, kh*kw*in_channels]`` matrix and multiplied by the HWIO filter seen as
``[kh*kw*in_channels, out_channels]``. The filter gradient is the same patch matrix,
transposed, times out_backprop; the input gradient is a stride-1 convolution of
out_backprop (stride-dilated and padded) with the spatially flipped, in/out-swapped filter.
NCHW tensors are transposed to NHWC and back.

Pools are two 1-D passes (height, width) over the window offsets that some output reads in
bounds (never over pixels), each step a strided slice of the whole batch, in the tensor's
own layout; windows are clipped to the input (no padded copy), so the cost is the output
size times the clipped window, whatever ksize is. Max-pool gradients locate each window's
first maximum with the same passes, then scatter (or gather) at it. float16/bfloat16 are
computed in float32 and rounded once; float64 (the gradient checker's evaluation) stays
float64.

On the native backend, float32 convolutions with stride 1, dilation 1 and SAME/VALID padding,
max pools, and max-pool gradients with non-overlapping windows have C kernels of their own
(``*_native``, registered for ``backend="native"``; kernels_c/conv.c, pool.c).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
from numpy.lib.stride_tricks import as_strided

from minigraph.backends import native
from minigraph.backends.registry import register_kernel
from minigraph.framework import dtypes
from minigraph.framework.errors import InvalidArgumentError
from minigraph.ops.nn_ops import (
    Window,
    conv_geometry,
    pool_output_shape,
    sizes_to_shape,
    spatial_axes,
    to_nhwc,
)

HALF = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


_INT_OF_SIZE = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}


def masked(values: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """``np.where(keep, values, 0)``, exact (bitwise AND), and without the branchy
    ``np.where`` path that costs ~8 ns an element on random masks."""
    values = np.asarray(values)
    ints = _INT_OF_SIZE[values.dtype.itemsize]
    bits = -np.asarray(keep).astype(ints)  # all ones where kept
    return (values.view(ints) & bits).view(values.dtype)


def select(take: np.ndarray, new: np.ndarray, old: np.ndarray) -> np.ndarray:
    """``np.where(take, new, old)`` for same-dtype arrays, exact and branch-free."""
    ints = _INT_OF_SIZE[old.dtype.itemsize]
    o, n = old.view(ints), np.asarray(new).view(ints)
    return (o ^ ((o ^ n) & -take.astype(ints))).view(old.dtype)


def _fail(op):
    return lambda message: InvalidArgumentError(f"{op.type} '{op.name}': {message}")


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """float32 for the half types, the dtype itself otherwise."""
    return np.dtype(np.float32) if np.dtype(dtype) in HALF else np.dtype(dtype)


# ----------------------------------------------------------------------------- im2col core


def _nhwc(x: np.ndarray, data_format: str) -> np.ndarray:
    return x if data_format == "NHWC" else x.transpose(0, 2, 3, 1)


def _from_nhwc(y: np.ndarray, data_format: str) -> np.ndarray:
    return y if data_format == "NHWC" else np.ascontiguousarray(y.transpose(0, 3, 1, 2))


def _pad_nhwc(x: np.ndarray, pads) -> np.ndarray:
    (top, bottom), (left, right) = pads
    if not (top or bottom or left or right):
        return x
    n, h, w, c = x.shape
    out = np.zeros((n, h + top + bottom, w + left + right, c), x.dtype)
    out[:, top:top + h, left:left + w] = x
    return out


def _patches(xp: np.ndarray, kh: int, kw: int, window: Window) -> np.ndarray:
    """``[n*out_h*out_w, kh*kw*c]`` patch matrix of a padded NHWC input (one copy)."""
    n, _, _, c = xp.shape
    out_h, out_w = window.out
    sn, sh, sw, sc = xp.strides
    (stride_h, stride_w), (dil_h, dil_w) = window.strides, window.dilations
    view = as_strided(xp, (n, out_h, out_w, kh, kw, c),
                      (sn, sh * stride_h, sw * stride_w, sh * dil_h, sw * dil_w, sc),
                      writeable=False)
    return view.reshape(n * out_h * out_w, kh * kw * c)


def conv2d_nhwc(x: np.ndarray, f: np.ndarray, window: Window) -> np.ndarray:
    """Cross-correlation of NHWC ``x`` with HWIO ``f``: im2col then one matmul."""
    n = x.shape[0]
    kh, kw, ci, co = f.shape
    out_h, out_w = window.out
    if n * out_h * out_w == 0 or ci == 0:
        return np.zeros((n, out_h, out_w, co), x.dtype)
    cols = _patches(_pad_nhwc(x, window.pads), kh, kw, window)
    return np.matmul(cols, f.reshape(kh * kw * ci, co)).reshape(n, out_h, out_w, co)


def _placed_rows(offset: int, stride: int, count: int, length: int) -> tuple[int, int]:
    """The p in [first, last) with 0 <= offset + p*stride < length (and 0 <= p < count)."""
    first = 0 if offset >= 0 else (-offset + stride - 1) // stride
    last = 0 if length - 1 - offset < 0 else min(count, (length - 1 - offset) // stride + 1)
    return first, max(first, last)


def conv2d_backprop_input_nhwc(dy: np.ndarray, f: np.ndarray, input_shape: tuple,
                               window: Window) -> np.ndarray:
    """d input of a convolution, as a stride-1 convolution of out_backprop.

    With out_backprop spread onto a grid of step ``stride`` (zeros between) and padded so
    that output row h sees the rows h + pad_top - i*dilation for every filter row i,
    correlating with the filter flipped in H and W (in/out channels swapped) gives
    d input[h] = sum_i dy[(h + pad_top - i*d) / s] f[i]. Out-of-range rows are cropped.
    """
    n, h, w, c = input_shape
    kh, kw, ci, co = f.shape
    (stride_h, stride_w), (dil_h, dil_w) = window.strides, window.dilations
    (top, _), (left, _) = window.pads
    out_h, out_w = dy.shape[1], dy.shape[2]
    len_h, len_w = h + (kh - 1) * dil_h, w + (kw - 1) * dil_w
    off_h, off_w = (kh - 1) * dil_h - top, (kw - 1) * dil_w - left
    spread = np.zeros((n, len_h, len_w, co), dy.dtype)
    p0, p1 = _placed_rows(off_h, stride_h, out_h, len_h)
    q0, q1 = _placed_rows(off_w, stride_w, out_w, len_w)
    if p1 > p0 and q1 > q0:
        spread[:, off_h + p0 * stride_h:off_h + (p1 - 1) * stride_h + 1:stride_h,
               off_w + q0 * stride_w:off_w + (q1 - 1) * stride_w + 1:stride_w] = \
            dy[:, p0:p1, q0:q1]
    flipped = np.ascontiguousarray(f[::-1, ::-1].transpose(0, 1, 3, 2))
    unit = Window((kh, kw), (1, 1), (dil_h, dil_w), ((0, 0), (0, 0)), (h, w))
    return conv2d_nhwc(spread, flipped, unit)


def conv2d_backprop_filter_nhwc(x: np.ndarray, dy: np.ndarray, filter_shape: tuple,
                                window: Window) -> np.ndarray:
    """d filter = patches^T @ out_backprop, one matmul."""
    kh, kw, ci, co = filter_shape
    if x.shape[0] * window.out[0] * window.out[1] == 0:
        return np.zeros(filter_shape, x.dtype)
    cols = _patches(_pad_nhwc(x, window.pads), kh, kw, window)
    return np.matmul(cols.T, dy.reshape(-1, co)).reshape(kh, kw, ci, co)


# ----------------------------------------------------------------------------- conv kernels


def _c_convolution(op) -> bool:
    """The cases the C convolutions handle (besides float32): stride 1, dilation 1,
    SAME/VALID padding."""
    return (op.attrs["padding"] != "EXPLICIT" and set(op.attrs["strides"]) == {1}
            and set(op.attrs["dilations"]) == {1})


NATIVE_CONV = {"backend": "native", "dtypes": (dtypes.float32,), "when": _c_convolution}


@register_kernel("Conv2D")
def conv2d(op, inputs, ctx):
    x, f = inputs
    fmt = op.attrs["data_format"]
    window = conv_geometry(op.attrs, _fail(op), x.shape, f.shape)
    ct = compute_dtype(x.dtype)
    y = conv2d_nhwc(_nhwc(x, fmt).astype(ct, copy=False), f.astype(ct, copy=False), window)
    return [_from_nhwc(y, fmt).astype(x.dtype, copy=False)]


@register_kernel("Conv2DBackpropInput")
def conv2d_backprop_input(op, inputs, ctx):
    sizes, f, dy = inputs
    fmt = op.attrs["data_format"]
    fail = _fail(op)
    x_shape = sizes_to_shape(sizes.tolist(), "input_sizes", fail, fmt,
                             to_nhwc(dy.shape, fmt)[0], f.shape[2])
    window = conv_geometry(op.attrs, fail, x_shape, f.shape)
    ct = compute_dtype(dy.dtype)
    dx = conv2d_backprop_input_nhwc(_nhwc(dy, fmt).astype(ct, copy=False),
                                    f.astype(ct, copy=False), to_nhwc(x_shape, fmt), window)
    return [_from_nhwc(dx, fmt).astype(dy.dtype, copy=False)]


@register_kernel("Conv2DBackpropFilter")
def conv2d_backprop_filter(op, inputs, ctx):
    x, sizes, dy = inputs
    fmt = op.attrs["data_format"]
    f_shape = tuple(sizes.tolist())
    window = conv_geometry(op.attrs, _fail(op), x.shape, f_shape)
    ct = compute_dtype(x.dtype)
    df = conv2d_backprop_filter_nhwc(_nhwc(x, fmt).astype(ct, copy=False),
                                     np.ascontiguousarray(_nhwc(dy, fmt), dtype=ct),
                                     f_shape, window)
    return [df.astype(x.dtype, copy=False)]


@register_kernel("Conv2D", **NATIVE_CONV)
def conv2d_native(op, inputs, ctx):
    x, f = inputs
    window = conv_geometry(op.attrs, _fail(op), x.shape, f.shape)
    if x.size == 0 or 0 in window.out:  # nothing for C to do: the numpy kernel's zeros
        return conv2d(op, inputs, ctx)
    return [native.conv2d(x, f, window.pads, window.out, op.attrs["data_format"] == "NHWC")]


@register_kernel("Conv2DBackpropInput", **NATIVE_CONV)
def conv2d_backprop_input_native(op, inputs, ctx):
    sizes, f, dy = inputs
    fmt = op.attrs["data_format"]
    x_shape = sizes_to_shape(sizes.tolist(), "input_sizes", _fail(op), fmt,
                             to_nhwc(dy.shape, fmt)[0], f.shape[2])
    if dy.size == 0 or 0 in x_shape:
        return conv2d_backprop_input(op, inputs, ctx)
    window = conv_geometry(op.attrs, _fail(op), x_shape, f.shape)
    return [native.conv2d_backprop_input(dy, f, to_nhwc(x_shape, fmt)[1:3], window.pads,
                                         fmt == "NHWC")]


@register_kernel("Conv2DBackpropFilter", **NATIVE_CONV)
def conv2d_backprop_filter_native(op, inputs, ctx):
    x, sizes, dy = inputs
    f_shape = tuple(sizes.tolist())
    if x.size == 0 or dy.size == 0:
        return conv2d_backprop_filter(op, inputs, ctx)
    window = conv_geometry(op.attrs, _fail(op), x.shape, f_shape)
    return [native.conv2d_backprop_filter(x, dy, f_shape[:2], window.pads,
                                          op.attrs["data_format"] == "NHWC")]


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
    """An index of a 4-D tensor: ``index`` on ``axis``, everything elsewhere."""
    full = [slice(None)] * 4
    full[axis] = index
    return tuple(full)


class _PoolAxis:
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
                p0, p1 = _placed_rows(i - b, s, out, n)
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


class _Pool:
    """A pool's two axes over a tensor in its own layout (NHWC or NCHW)."""

    def __init__(self, window: Window, data_format: str, in_hw: tuple[int, int]) -> None:
        self.window = window
        self.h_axis, self.w_axis, _ = spatial_axes(data_format)
        self.axes = tuple(_PoolAxis(in_hw[d], window.ksize[d], window.strides[d],
                                    window.pads[d][0], window.out[d]) for d in range(2))

    def _along(self, d: int) -> tuple[int, _PoolAxis]:
        return (self.h_axis, self.w_axis)[d], self.axes[d]

    def reduce(self, x: np.ndarray, d: int, combine, init) -> np.ndarray:
        """``combine`` (np.add, np.maximum) of each window of axis ``d`` (0: height,
        1: width), starting from ``init``; in bounds only, offsets in increasing order."""
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
        return self.spatial(np.outer(self.axes[0].counts(), self.axes[1].counts()))

    def spatial(self, hw: np.ndarray) -> np.ndarray:
        """An [out_h, out_w] array reshaped to broadcast against the tensor's layout."""
        shape = [1, 1, 1, 1]
        shape[self.h_axis], shape[self.w_axis] = hw.shape
        return hw.reshape(shape)

    def _first_max(self, key: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
        """(max, input index of its first occurrence) of ``key`` over each window of axis
        ``d``: a later offset replaces the best only when strictly greater."""
        axis, geo = self._along(d)
        shape = list(key.shape)
        shape[axis] = geo.out
        best = np.zeros(shape, key.dtype)
        arg = np.full(shape, -1, np.int64)
        bshape = [1, 1, 1, 1]
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


def _pool_setup(op, x_shape, data_format):
    out_shape, window = pool_output_shape(op.attrs, _fail(op), x_shape)
    h, w, _ = spatial_axes(data_format)
    return tuple(out_shape), _Pool(window, data_format, (x_shape[h], x_shape[w]))


def _lowest(dtype: np.dtype):
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def _c_pool(op) -> bool:
    """The pools the C kernels handle (besides float32): a geometry that fits int32 (any
    real one does; padding never exceeds the window)."""
    return max(*op.attrs["ksize"], *op.attrs["strides"],
               *op.attrs.get("explicit_paddings", ())) < 2**31


def _c_pool_grad(op) -> bool:
    """The C max-pool gradient: non-overlapping windows (strides >= ksize)."""
    return _c_pool(op) and all(s >= k for s, k in zip(op.attrs["strides"], op.attrs["ksize"]))


@register_kernel("MaxPool")
def max_pool(op, inputs, ctx):
    """The maximum over each window's in-bounds elements (NaN propagates)."""
    x = inputs[0]
    out_shape, pool = _pool_setup(op, x.shape, op.attrs["data_format"])
    if 0 in out_shape:
        return [np.zeros(out_shape, x.dtype)]
    ct = compute_dtype(x.dtype)
    low = _lowest(ct)
    rows = pool.reduce(x.astype(ct, copy=False), 0, np.maximum, low)
    return [pool.reduce(rows, 1, np.maximum, low).astype(x.dtype, copy=False)]


def _max_pool_grad_inputs(op, inputs):
    x, _, g = inputs
    out_shape, pool = _pool_setup(op, x.shape, op.attrs["data_format"])
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


@register_kernel("MaxPool", backend="native", dtypes=(dtypes.float32,), when=_c_pool)
def max_pool_native(op, inputs, ctx):
    x = inputs[0]
    out_shape, pool = _pool_setup(op, x.shape, op.attrs["data_format"])
    if 0 in out_shape:
        return max_pool(op, inputs, ctx)
    w = pool.window
    return [native.max_pool(x, w.ksize, w.strides, w.pads, w.out,
                            op.attrs["data_format"] == "NHWC")]


@register_kernel("MaxPoolGrad", backend="native", dtypes=(dtypes.float32,), when=_c_pool_grad)
def max_pool_grad_native(op, inputs, ctx):
    x, g, out_shape, pool = _max_pool_grad_inputs(op, inputs)
    if 0 in out_shape or x.size == 0:
        return max_pool_grad(op, inputs, ctx)
    w = pool.window
    return [native.max_pool_grad(x, g, w.ksize, w.strides, w.pads, w.out,
                                 op.attrs["data_format"] == "NHWC")]


@register_kernel("MaxPoolGradGrad")
def max_pool_grad_grad(op, inputs, ctx):
    """The adjoint of MaxPoolGrad: each output gathers grad at its window's first maximum."""
    x, g, out_shape, pool = _max_pool_grad_inputs(op, inputs)
    if 0 in out_shape or x.size == 0:
        return [np.zeros(out_shape, x.dtype)]
    rows, cols = pool.argmax(x.astype(compute_dtype(x.dtype), copy=False))
    return [g.ravel()[pool.flat_index(x.shape, rows, cols)]]


@register_kernel("AvgPool")
def avg_pool(op, inputs, ctx):
    """Window sums over the in-bounds elements (height, then width) divided by the
    in-bounds element count (TF: padding is not counted)."""
    x = inputs[0]
    out_shape, pool = _pool_setup(op, x.shape, op.attrs["data_format"])
    if 0 in out_shape:
        return [np.zeros(out_shape, x.dtype)]
    ct = compute_dtype(x.dtype)
    total = pool.reduce(pool.reduce(x.astype(ct, copy=False), 0, np.add, 0), 1, np.add, 0)
    return [(total / pool.counts().astype(ct)).astype(x.dtype, copy=False)]


@register_kernel("AvgPoolGrad")
def avg_pool_grad(op, inputs, ctx):
    """Each output's gradient, divided by its window's count, spread over the window's
    in-bounds elements (width, then height: the adjoint of AvgPool's passes)."""
    sizes, g = inputs
    x_shape = tuple(sizes.tolist())
    out_shape, pool = _pool_setup(op, x_shape, op.attrs["data_format"])
    ct = compute_dtype(g.dtype)
    if 0 in out_shape:
        return [np.zeros(x_shape, g.dtype)]
    share = g.astype(ct, copy=False) / pool.counts().astype(ct)
    return [pool.spread(pool.spread(share, 1), 0).astype(g.dtype)]
