"""numpy and native kernels of the convolution ops (``ops.convolution_ops``).

numpy: im2col + one BLAS matmul. The (padded) input is viewed with ``as_strided`` as
``[batch, out_h, out_w, kh, kw, in_channels]`` patches, copied once into a
``[batch*out_h*out_w, kh*kw*in_channels]`` matrix and multiplied by the HWIO filter seen as
``[kh*kw*in_channels, out_channels]``. The filter gradient is the same patch matrix,
transposed, times out_backprop; the input gradient is a stride-1 convolution of
out_backprop (stride-dilated and padded) with the spatially flipped, in/out-swapped filter.
NCHW tensors are transposed to NHWC and back. The numpy functions and kernels take any
number of spatial dims (the tensors' rank): ``backends.volumetric_kernels`` runs the 3-D
convolutions on them. float16/bfloat16 are computed in float32 and rounded once; float64
(the gradient checker's evaluation) stays float64.

native (``backend="native"``, float32, stride 1, dilation 1, SAME/VALID): the C kernels of
kernels_c/convolution*.c through the ``c_*`` wrappers at the bottom, which check every buffer
against what C reads and writes.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import as_strided

from minigraph.backends.compute import compute_dtype, fail_for, placed_rows
from minigraph.backends.native import (
    as_f32,
    check_code,
    check_rank4,
    checked_sizes,
    fbuf,
    lib,
    nhwc_dims,
    num_threads,
    shaped,
)
from minigraph.backends.registry import register_kernel
from minigraph.framework import dtypes, limits
from minigraph.ops.window import Window, conv_geometry, sizes_to_shape, to_nhwc

F32 = np.float32


# ----------------------------------------------------------------------------- im2col core


def _nhwc(x: np.ndarray, data_format: str) -> np.ndarray:
    """``x`` (data_format) viewed channels-last (NHWC or NDHWC)."""
    if data_format.endswith("C"):
        return x
    return x.transpose(0, *range(2, x.ndim), 1)


def _from_nhwc(y: np.ndarray, data_format: str) -> np.ndarray:
    """The inverse of :func:`_nhwc`, contiguous."""
    if data_format.endswith("C"):
        return y
    return np.ascontiguousarray(y.transpose(0, y.ndim - 1, *range(1, y.ndim - 1)))


def _zeros(shape: tuple, dtype: np.dtype) -> np.ndarray:
    """``np.zeros(shape, dtype)``, refused with a MemoryError (which the session reports as
    ResourceExhaustedError naming the op) before allocating when this machine cannot hold
    it: a huge dilation or padding asks for zeros beyond any memory, or any int64 size."""
    nbytes = math.prod(shape) * np.dtype(dtype).itemsize
    if nbytes > limits.memory_bytes():
        raise MemoryError(f"an intermediate of shape {list(shape)} needs {nbytes:,} bytes, "
                          f"more than this machine's {limits.memory_bytes():,}; nothing was "
                          f"allocated")
    return np.zeros(shape, dtype)


def _pad_nhwc(x: np.ndarray, pads) -> np.ndarray:
    """Channels-last ``x`` zero-padded by the (before, after) ``pads`` of its spatial dims."""
    if not any(before or after for before, after in pads):
        return x
    out = _zeros((x.shape[0], *(n + b + a for n, (b, a) in zip(x.shape[1:-1], pads)),
                  x.shape[-1]), x.dtype)
    out[(slice(None), *(slice(b, b + n) for n, (b, _) in zip(x.shape[1:-1], pads)))] = x
    return out


def _patches(xp: np.ndarray, k_sizes: tuple, window: Window) -> np.ndarray:
    """``[n*out..., k...*c]`` patch matrix of a padded channels-last input (one copy): the
    view ``[n, out..., k..., c]`` whose output steps are the strides and whose window steps
    are the dilations (0 along an axis of length 1, which never steps: a huge stride or
    dilation there would overflow the byte offsets)."""
    n, c = xp.shape[0], xp.shape[-1]
    steps = xp.strides[1:-1]
    view = as_strided(xp, (n, *window.out, *k_sizes, c),
                      (xp.strides[0],
                       *(t * s if out > 1 else 0
                         for t, s, out in zip(steps, window.strides, window.out)),
                       *(t * d if k > 1 else 0
                         for t, d, k in zip(steps, window.dilations, k_sizes)),
                       xp.strides[-1]),
                      writeable=False)
    return view.reshape(n * int(np.prod(window.out)), int(np.prod(k_sizes)) * c)


def conv2d_nhwc(x: np.ndarray, f: np.ndarray, window: Window) -> np.ndarray:
    """Cross-correlation of channels-last ``x`` with the HWIO (DHWIO) filter ``f``: im2col
    then one matmul. Any number of spatial dims (Conv3D uses it too)."""
    n = x.shape[0]
    *k_sizes, ci, co = f.shape
    if n * int(np.prod(window.out)) == 0 or ci == 0:
        return np.zeros((n, *window.out, co), x.dtype)
    cols = _patches(_pad_nhwc(x, window.pads), tuple(k_sizes), window)
    return np.matmul(cols, f.reshape(-1, co)).reshape(n, *window.out, co)


def conv2d_backprop_input_nhwc(dy: np.ndarray, f: np.ndarray, input_shape: tuple,
                               window: Window) -> np.ndarray:
    """d input of a convolution, as a stride-1 convolution of out_backprop.

    With out_backprop spread onto a grid of step ``stride`` (zeros between) and padded so
    that output row h sees the rows h + pad_before - i*dilation for every filter row i,
    correlating with the filter flipped in every spatial dim (in/out channels swapped) gives
    d input[h] = sum_i dy[(h + pad_before - i*d) / s] f[i]. Out-of-range rows are cropped.
    Any number of spatial dims; ``input_shape`` is channels-last.
    """
    n, *sizes, _ = input_shape
    *k_sizes, _, co = f.shape
    lengths = [size + (k - 1) * d for size, k, d in zip(sizes, k_sizes, window.dilations)]
    offsets = [(k - 1) * d - before
               for k, d, (before, _) in zip(k_sizes, window.dilations, window.pads)]
    rows = [placed_rows(off, s, count, length) for off, s, count, length
            in zip(offsets, window.strides, dy.shape[1:-1], lengths)]
    spread = _zeros((n, *lengths, co), dy.dtype)
    if all(p1 > p0 for p0, p1 in rows):
        target = tuple(slice(off + p0 * s, off + (p1 - 1) * s + 1, s)
                       for off, (p0, p1), s in zip(offsets, rows, window.strides))
        spread[(slice(None), *target)] = dy[(slice(None), *(slice(p0, p1) for p0, p1 in rows))]
    flip = tuple(slice(None, None, -1) for _ in k_sizes)
    rank = f.ndim
    flipped = np.ascontiguousarray(f[flip].transpose(*range(rank - 2), rank - 1, rank - 2))
    unit = Window(tuple(k_sizes), (1,) * len(sizes), window.dilations,
                  ((0, 0),) * len(sizes), tuple(sizes))
    return conv2d_nhwc(spread, flipped, unit)


def conv2d_backprop_filter_nhwc(x: np.ndarray, dy: np.ndarray, filter_shape: tuple,
                                window: Window) -> np.ndarray:
    """d filter = patches^T @ out_backprop, one matmul (any number of spatial dims)."""
    *k_sizes, ci, co = filter_shape
    if x.shape[0] * int(np.prod(window.out)) == 0:
        return np.zeros(filter_shape, x.dtype)
    cols = _patches(_pad_nhwc(x, window.pads), tuple(k_sizes), window)
    return np.matmul(cols.T, dy.reshape(-1, co)).reshape(filter_shape)


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
    window = conv_geometry(op.attrs, fail_for(op), x.shape, f.shape)
    ct = compute_dtype(x.dtype)
    y = conv2d_nhwc(_nhwc(x, fmt).astype(ct, copy=False), f.astype(ct, copy=False), window)
    return [_from_nhwc(y, fmt).astype(x.dtype, copy=False)]


@register_kernel("Conv2DBackpropInput")
def conv2d_backprop_input(op, inputs, ctx):
    sizes, f, dy = inputs
    fmt = op.attrs["data_format"]
    fail = fail_for(op)
    x_shape = sizes_to_shape(sizes.tolist(), "input_sizes", fail, fmt,
                             to_nhwc(dy.shape, fmt)[0], f.shape[-2])
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
    window = conv_geometry(op.attrs, fail_for(op), x.shape, f_shape)
    ct = compute_dtype(x.dtype)
    df = conv2d_backprop_filter_nhwc(_nhwc(x, fmt).astype(ct, copy=False),
                                     np.ascontiguousarray(_nhwc(dy, fmt), dtype=ct),
                                     f_shape, window)
    return [df.astype(x.dtype, copy=False)]


@register_kernel("Conv2D", **NATIVE_CONV)
def conv2d_native(op, inputs, ctx):
    x, f = inputs
    window = conv_geometry(op.attrs, fail_for(op), x.shape, f.shape)
    if x.size == 0 or 0 in window.out:  # nothing for C to do: the numpy kernel's zeros
        return conv2d(op, inputs, ctx)
    return [c_conv2d(x, f, window.pads, window.out, op.attrs["data_format"] == "NHWC")]


@register_kernel("Conv2DBackpropInput", **NATIVE_CONV)
def conv2d_backprop_input_native(op, inputs, ctx):
    sizes, f, dy = inputs
    fmt = op.attrs["data_format"]
    x_shape = sizes_to_shape(sizes.tolist(), "input_sizes", fail_for(op), fmt,
                             to_nhwc(dy.shape, fmt)[0], f.shape[-2])
    if dy.size == 0 or 0 in x_shape:
        return conv2d_backprop_input(op, inputs, ctx)
    window = conv_geometry(op.attrs, fail_for(op), x_shape, f.shape)
    return [c_conv2d_backprop_input(dy, f, to_nhwc(x_shape, fmt)[1:3], window.pads,
                                         fmt == "NHWC")]


@register_kernel("Conv2DBackpropFilter", **NATIVE_CONV)
def conv2d_backprop_filter_native(op, inputs, ctx):
    x, sizes, dy = inputs
    f_shape = tuple(sizes.tolist())
    if x.size == 0 or dy.size == 0:
        return conv2d_backprop_filter(op, inputs, ctx)
    window = conv_geometry(op.attrs, fail_for(op), x.shape, f_shape)
    return [c_conv2d_backprop_filter(x, dy, f_shape[:2], window.pads,
                                          op.attrs["data_format"] == "NHWC")]


# ----------------------------------------------------------------------------- C wrappers


def _c_filter(what: str, f: np.ndarray, in_channels: int, out_channels: int | None
                 ) -> tuple[int, int, int, int]:
    """(kh, kw, c, co) of an HWIO filter whose in (and out, when given) channels must be the
    tensors' own: C reads ``kh * kw * c * co`` floats of it."""
    kh, kw, c, co = f.shape
    if c != in_channels or (out_channels is not None and co != out_channels) or not f.size:
        raise ValueError(f"native {what}: filter shape {f.shape} does not match "
                         f"{in_channels} input / {out_channels} output channels (or is empty)")
    return kh, kw, c, co


def c_conv2d(x, f, pads, out_hw, channels_last):
    """Cross-correlation of x (NHWC or NCHW) with the HWIO filter f, stride 1, dilation 1;
    ``pads`` = ((top, bottom), (left, right)), ``out_hw`` the output's (height, width):
    ``y[n, p, q, o] = sum_{i, j, ci} x[n, p + i - top, q + j - left, ci] * f[i, j, ci, o]``
    (zero outside x)."""
    x, f = as_f32(x), as_f32(f)
    check_rank4("Conv2D", x=x, filter=f)
    n, h, w, c = nhwc_dims(x.shape, channels_last)
    kh, kw, _, co = _c_filter("Conv2D", f, c, None)
    top, left, oh, ow = checked_sizes("Conv2D", pad_top=pads[0][0], pad_left=pads[1][0],
                               out_h=out_hw[0], out_w=out_hw[1])
    y = np.empty(shaped(n, oh, ow, co, channels_last), F32)
    check_code(lib.mg_conv2d_forward(
        n, h, w, c, kh, kw, co, top, left, oh, ow, int(channels_last), fbuf(x), fbuf(f),
        fbuf(y), num_threads()), "Conv2D")
    return y


def c_conv2d_backprop_input(dy, f, input_hw, pads, channels_last):
    """d input (shape: dy's batch, ``input_hw``, f's in_channels) of conv2d given dy:
    ``dx[n, r, s, ci] = sum dy[n, p, q, o] * f[r - p + top, s - q + left, ci, o]``."""
    dy, f = as_f32(dy), as_f32(f)
    check_rank4("Conv2DBackpropInput", out_backprop=dy, filter=f)
    n, oh, ow, co = nhwc_dims(dy.shape, channels_last)
    kh, kw, c, _ = _c_filter("Conv2DBackpropInput", f, f.shape[2], co)
    h, w, top, left = checked_sizes("Conv2DBackpropInput", height=input_hw[0], width=input_hw[1],
                             pad_top=pads[0][0], pad_left=pads[1][0])
    dx = np.empty(shaped(n, h, w, c, channels_last), F32)
    check_code(lib.mg_conv2d_backprop_input(
        n, h, w, c, kh, kw, co, top, left, oh, ow, int(channels_last), fbuf(f), fbuf(dy),
        fbuf(dx), num_threads()), "Conv2DBackpropInput")
    return dx


def c_conv2d_backprop_filter(x, dy, filter_hw, pads, channels_last):
    """d filter (HWIO, spatial size ``filter_hw``) of conv2d given its input x and dy:
    ``df[i, j, ci, o] = sum_{n, p, q} x[n, p + i - top, q + j - left, ci] * dy[n, p, q, o]``."""
    x, dy = as_f32(x), as_f32(dy)
    check_rank4("Conv2DBackpropFilter", input=x, out_backprop=dy)
    n, h, w, c = nhwc_dims(x.shape, channels_last)
    dn, oh, ow, co = nhwc_dims(dy.shape, channels_last)
    if dn != n:
        raise ValueError(f"native Conv2DBackpropFilter: out_backprop batch {dn} differs from "
                         f"the input's {n}")
    kh, kw, top, left = checked_sizes("Conv2DBackpropFilter", filter_h=filter_hw[0],
                               filter_w=filter_hw[1], pad_top=pads[0][0],
                               pad_left=pads[1][0])
    df = np.empty((kh, kw, c, co), F32)
    check_code(lib.mg_conv2d_backprop_filter(
        n, h, w, c, kh, kw, co, top, left, oh, ow, int(channels_last), fbuf(x), fbuf(dy),
        fbuf(df), num_threads()), "Conv2DBackpropFilter")
    return df
