"""numpy CPU kernels of the convolution and pooling ops (``ops.nn_ops``).

Convolutions are im2col + one BLAS matmul: the (padded) input is viewed with
``as_strided`` as ``[batch, out_h, out_w, kh, kw, in_channels]`` patches, copied once into a
``[batch*out_h*out_w, kh*kw*in_channels]`` matrix and multiplied by the HWIO filter seen as
``[kh*kw*in_channels, out_channels]``. The filter gradient is the same patch matrix,
transposed, times out_backprop; the input gradient is a stride-1 convolution of
out_backprop (stride-dilated and padded) with the spatially flipped, in/out-swapped filter.
NCHW tensors are transposed to NHWC and back.

Pools loop over the ``kh * kw`` window offsets (never over pixels), each step a strided
slice of the whole batch, in the tensor's own layout. float16/bfloat16 are computed in
float32 and rounded once; float64 (the gradient checker's evaluation) stays float64.

With the native backend (``math`` is ``backends.native``), float32 convolutions with stride 1,
dilation 1 and SAME/VALID padding, max pools, and max-pool gradients with non-overlapping
windows run in C instead (kernels_c/conv.c, pool.c), after the same checks.
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
from numpy.lib.stride_tricks import as_strided

from minigraph.backends.registry import register_kernel
from minigraph.framework.errors import InvalidArgumentError
from minigraph.ops.nn_ops import (
    Window,
    check_out_backprop,
    conv_geometry,
    pool_output_shape,
    shape_text,
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


def _check_rank4(op, name: str, value: np.ndarray) -> None:
    if value.ndim != 4:
        raise _fail(op)(f"input '{name}' must be 4-dimensional, got shape "
                        f"{shape_text(value.shape)}")


def _shape_vector(op, name: str, value: np.ndarray, lengths: tuple[int, ...]) -> list[int]:
    if value.ndim != 1 or value.shape[0] not in lengths:
        raise _fail(op)(f"input '{name}' must be a vector of "
                        f"{' or '.join(str(n) for n in lengths)} elements, got shape "
                        f"{shape_text(value.shape)}")
    return [int(v) for v in value]


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


def _native_conv(math, op, window: Window, *arrays: np.ndarray) -> bool:
    """True when the session's math backend has the C convolutions and handles this case:
    float32, stride 1, dilation 1, SAME/VALID padding, no empty tensor."""
    return (getattr(math, "conv2d_backprop_filter", None) is not None
            and op.attrs["padding"] != "EXPLICIT"
            and window.strides == (1, 1) and window.dilations == (1, 1)
            and all(a.dtype == np.float32 and a.size for a in arrays))



@register_kernel("Conv2D")
def conv2d(op, inputs, math):
    x, f = inputs
    _check_rank4(op, "input", x)
    _check_rank4(op, "filter", f)
    fmt = op.attrs["data_format"]
    window = conv_geometry(op.attrs, _fail(op), x.shape, f.shape)
    if _native_conv(math, op, window, x, f) and 0 not in window.out:
        return [math.conv2d(x, f, window.pads, window.out, fmt == "NHWC")]
    ct = compute_dtype(x.dtype)
    y = conv2d_nhwc(_nhwc(x, fmt).astype(ct, copy=False), f.astype(ct, copy=False), window)
    return [_from_nhwc(y, fmt).astype(x.dtype, copy=False)]


@register_kernel("Conv2DBackpropInput")
def conv2d_backprop_input(op, inputs, math):
    sizes, f, dy = inputs
    _check_rank4(op, "filter", f)
    _check_rank4(op, "out_backprop", dy)
    fmt = op.attrs["data_format"]
    fail = _fail(op)
    vector = _shape_vector(op, "input_sizes", sizes, (4, 2))
    x_shape = sizes_to_shape(vector, "input_sizes", fail, fmt, to_nhwc(dy.shape, fmt)[0],
                             f.shape[2])
    window = conv_geometry(op.attrs, fail, x_shape, f.shape)
    check_out_backprop(op.attrs, fail, x_shape, f.shape, dy.shape, window)
    if _native_conv(math, op, window, f, dy) and 0 not in x_shape:
        hw = to_nhwc(x_shape, fmt)[1:3]
        return [math.conv2d_backprop_input(dy, f, hw, window.pads, fmt == "NHWC")]
    ct = compute_dtype(dy.dtype)
    dx = conv2d_backprop_input_nhwc(_nhwc(dy, fmt).astype(ct, copy=False),
                                    f.astype(ct, copy=False), to_nhwc(x_shape, fmt), window)
    return [_from_nhwc(dx, fmt).astype(dy.dtype, copy=False)]


@register_kernel("Conv2DBackpropFilter")
def conv2d_backprop_filter(op, inputs, math):
    x, sizes, dy = inputs
    _check_rank4(op, "input", x)
    _check_rank4(op, "out_backprop", dy)
    fmt = op.attrs["data_format"]
    fail = _fail(op)
    f_shape = tuple(_shape_vector(op, "filter_sizes", sizes, (4,)))
    if min(f_shape) < 0:
        raise fail(f"input 'filter_sizes' must be non-negative, got {list(f_shape)}")
    window = conv_geometry(op.attrs, fail, x.shape, f_shape)
    check_out_backprop(op.attrs, fail, x.shape, f_shape, dy.shape, window)
    if _native_conv(math, op, window, x, dy):
        return [math.conv2d_backprop_filter(x, dy, f_shape[:2], window.pads, fmt == "NHWC")]
    ct = compute_dtype(x.dtype)
    df = conv2d_backprop_filter_nhwc(_nhwc(x, fmt).astype(ct, copy=False),
                                     np.ascontiguousarray(_nhwc(dy, fmt), dtype=ct),
                                     f_shape, window)
    return [df.astype(x.dtype, copy=False)]


# ----------------------------------------------------------------------------- pooling core


class _Pool:
    """A pooling window over a tensor in its own layout: offsets, slices, validity."""

    def __init__(self, window: Window, data_format: str, in_hw: tuple[int, int]) -> None:
        self.window = window
        self.h_axis, self.w_axis, _ = spatial_axes(data_format)
        self.in_hw = in_hw
        (self.top, self.bottom), (self.left, self.right) = window.pads
        self.padded = bool(self.top or self.bottom or self.left or self.right)

    @functools.cached_property
    def valid_h(self) -> np.ndarray:
        """[kh, out_h]: whether window row i of output row y is in bounds."""
        rows = (np.arange(self.window.ksize[0])[:, None]
                + self.window.strides[0] * np.arange(self.window.out[0])[None, :] - self.top)
        return (rows >= 0) & (rows < self.in_hw[0])

    @functools.cached_property
    def valid_w(self) -> np.ndarray:
        """[kw, out_w]: whether window column j of output column x is in bounds."""
        cols = (np.arange(self.window.ksize[1])[:, None]
                + self.window.strides[1] * np.arange(self.window.out[1])[None, :] - self.left)
        return (cols >= 0) & (cols < self.in_hw[1])

    def offsets(self):
        """(k, slicing index into the padded tensor, validity mask or None) per offset."""
        out_h, out_w = self.window.out
        sh, sw = self.window.strides
        kh, kw = self.window.ksize
        for i in range(kh):
            for j in range(kw):
                index = [slice(None)] * 4
                index[self.h_axis] = slice(i, i + (out_h - 1) * sh + 1, sh)
                index[self.w_axis] = slice(j, j + (out_w - 1) * sw + 1, sw)
                mask = None
                if self.padded:
                    mask = self.spatial(self.valid_h[i][:, None] & self.valid_w[j][None, :])
                yield i * kw + j, tuple(index), mask

    def spatial(self, hw: np.ndarray) -> np.ndarray:
        """An [out_h, out_w] array reshaped to broadcast against the tensor's layout."""
        shape = [1, 1, 1, 1]
        shape[self.h_axis], shape[self.w_axis] = hw.shape
        return hw.reshape(shape)

    def pad(self, x: np.ndarray, value=0) -> np.ndarray:
        if not self.padded:
            return x
        shape = list(x.shape)
        shape[self.h_axis] += self.top + self.bottom
        shape[self.w_axis] += self.left + self.right
        out = np.full(shape, value, x.dtype)
        out[self.interior(x.shape)] = x
        return out

    def interior(self, shape) -> tuple:
        index = [slice(None)] * 4
        index[self.h_axis] = slice(self.top, self.top + shape[self.h_axis])
        index[self.w_axis] = slice(self.left, self.left + shape[self.w_axis])
        return tuple(index)

    def padded_zeros(self, shape, dtype) -> np.ndarray:
        shape = list(shape)
        shape[self.h_axis] += self.top + self.bottom
        shape[self.w_axis] += self.left + self.right
        return np.zeros(shape, dtype)

    def counts(self) -> np.ndarray:
        """How many in-bounds input elements each output window covers."""
        return self.spatial(np.outer(self.valid_h.sum(0), self.valid_w.sum(0)))

    def argmax(self, xp: np.ndarray, out_shape) -> np.ndarray:
        """Offset k of the first maximum (row-major in the window) of every window, over the
        in-bounds elements only (TF: strictly greater replaces, so ties keep the first)."""
        best = arg = None
        for k, index, mask in self.offsets():
            value = xp[index]
            if best is None:
                best = np.array(np.broadcast_to(value, out_shape))
                arg = np.zeros(out_shape, np.int32)
                if mask is not None:  # a padded first offset: unset (-1) where out of bounds
                    arg -= ~np.broadcast_to(mask, out_shape)
                continue
            with np.errstate(invalid="ignore"):
                take = value > best
            if mask is not None:
                take |= arg < 0
                take &= mask
            best = select(take, value, best)
            arg += (k - arg) * take
        return arg


def _pool_setup(op, x_shape, data_format):
    out_shape, window = pool_output_shape(op.attrs, _fail(op), x_shape)
    h, w, _ = spatial_axes(data_format)
    return tuple(out_shape), _Pool(window, data_format, (x_shape[h], x_shape[w]))


def _lowest(dtype: np.dtype):
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


@register_kernel("MaxPool")
def max_pool(op, inputs, math):
    x = inputs[0]
    _check_rank4(op, "input", x)
    out_shape, pool = _pool_setup(op, x.shape, op.attrs["data_format"])
    if 0 in out_shape:
        return [np.zeros(out_shape, x.dtype)]
    if x.dtype == np.float32 and getattr(math, "max_pool", None) is not None:
        w = pool.window
        return [math.max_pool(x, w.ksize, w.strides, w.pads, w.out,
                              op.attrs["data_format"] == "NHWC")]
    ct = compute_dtype(x.dtype)
    xp = pool.pad(x.astype(ct, copy=False), _lowest(ct))
    out = None
    for _, index, _ in pool.offsets():
        out = xp[index].copy() if out is None else np.maximum(out, xp[index], out=out)
    return [out.astype(x.dtype, copy=False)]


def _max_pool_grad_inputs(op, inputs):
    x, y, g = inputs
    for name, value in zip(("orig_input", "orig_output", "grad"), inputs):
        _check_rank4(op, name, value)
    out_shape, pool = _pool_setup(op, x.shape, op.attrs["data_format"])
    if y.shape != out_shape:
        raise _fail(op)(f"input 'orig_output' must have shape {shape_text(out_shape)} (the "
                        f"pool of orig_input {shape_text(x.shape)}), got {shape_text(y.shape)}")
    expected = out_shape if op.type == "MaxPoolGrad" else x.shape
    if g.shape != expected:
        raise _fail(op)(f"input 'grad' must have shape {shape_text(expected)}, got "
                        f"{shape_text(g.shape)}")
    return x, g, out_shape, pool


@register_kernel("MaxPoolGrad")
def max_pool_grad(op, inputs, math):
    """Each output's gradient goes to the first maximum of its window (TF's CPU rule)."""
    x, g, out_shape, pool = _max_pool_grad_inputs(op, inputs)
    ct = compute_dtype(x.dtype)
    if 0 in out_shape or x.size == 0:
        return [np.zeros(x.shape, x.dtype)]
    w = pool.window
    if (x.dtype == np.float32 and getattr(math, "max_pool_grad", None) is not None
            and w.strides[0] >= w.ksize[0] and w.strides[1] >= w.ksize[1]):
        return [math.max_pool_grad(x, g, w.ksize, w.strides, w.pads, w.out,
                                   op.attrs["data_format"] == "NHWC")]
    arg = pool.argmax(pool.pad(x.astype(ct, copy=False), _lowest(ct)), out_shape)
    g = g.astype(ct, copy=False)
    dxp = pool.padded_zeros(x.shape, ct)
    for k, index, _ in pool.offsets():
        dxp[index] += masked(g, arg == k)
    return [dxp[pool.interior(x.shape)].astype(x.dtype)]


@register_kernel("MaxPoolGradGrad")
def max_pool_grad_grad(op, inputs, math):
    """The adjoint of MaxPoolGrad: each output gathers grad at its window's first maximum."""
    x, g, out_shape, pool = _max_pool_grad_inputs(op, inputs)
    ct = compute_dtype(x.dtype)
    if 0 in out_shape:
        return [np.zeros(out_shape, x.dtype)]
    arg = pool.argmax(pool.pad(x.astype(ct, copy=False), _lowest(ct)), out_shape)
    gp = pool.pad(g.astype(ct, copy=False), 0)
    out = np.zeros(out_shape, ct)
    for k, index, _ in pool.offsets():
        out = select(arg == k, gp[index], out)
    return [out.astype(x.dtype, copy=False)]


@register_kernel("AvgPool")
def avg_pool(op, inputs, math):
    """Window sums over the zero-padded input divided by the in-bounds element count."""
    x = inputs[0]
    _check_rank4(op, "value", x)
    out_shape, pool = _pool_setup(op, x.shape, op.attrs["data_format"])
    if 0 in out_shape:
        return [np.zeros(out_shape, x.dtype)]
    ct = compute_dtype(x.dtype)
    xp = pool.pad(x.astype(ct, copy=False), 0)
    total = np.zeros(out_shape, ct)
    for _, index, _ in pool.offsets():
        total += xp[index]
    return [(total / pool.counts().astype(ct)).astype(x.dtype, copy=False)]


@register_kernel("AvgPoolGrad")
def avg_pool_grad(op, inputs, math):
    """Each output's gradient, divided by its window's count, spread over the window."""
    sizes, g = inputs
    _check_rank4(op, "grad", g)
    fail = _fail(op)
    x_shape = tuple(_shape_vector(op, "orig_input_shape", sizes, (4,)))
    if min(x_shape) < 0:
        raise fail(f"input 'orig_input_shape' must be non-negative, got {list(x_shape)}")
    out_shape, pool = _pool_setup(op, x_shape, op.attrs["data_format"])
    if g.shape != out_shape:
        raise fail(f"input 'grad' must have shape {shape_text(out_shape)} (the pool of an "
                   f"input of shape {shape_text(x_shape)}), got {shape_text(g.shape)}")
    ct = compute_dtype(g.dtype)
    if 0 in out_shape:
        return [np.zeros(x_shape, g.dtype)]
    share = g.astype(ct, copy=False) / pool.counts().astype(ct)
    dxp = pool.padded_zeros(x_shape, ct)
    for _, index, _ in pool.offsets():
        dxp[index] += share
    return [dxp[pool.interior(x_shape)].astype(g.dtype)]

