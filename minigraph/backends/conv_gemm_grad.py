"""Python wrappers of the convolution gradients on the GEMM micro-kernels
(kernels_c/conv_gemm_grad.c): ``Conv2DBackpropInput`` and ``Conv2DBackpropFilter`` for any
strides, dilations, padding and groups, NHWC or NCHW (NCHW tensors are transposed to NHWC
and back around the NHWC kernels), float32.

Formulas (NHWC terms; group g owns input channels ``g*cig ..`` and output channels
``g*cog ..``; output pixel (p, q) reads input pixel (p*sh + i*dh - top, q*sw + j*dw - left)
through tap (i, j)):

- ``dx[n, r, s, g*cig + c] = sum_{i, j, o} dy[n, p, q, g*cog + o] * f[i, j, c, g*cog + o]``
  over the (p, q) that reach (r, s) through (i, j): one fused multiply-add chain per element,
  i ascending, j descending within a filter row, then o;
- ``df[i, j, c, g*cog + o] = sum_{n, p, q} x[n, r, s, g*cig + c] * dy[n, p, q, g*cog + o]``:
  chains over fixed ranges of pixels (``lib.mg_conv2d_gemm_filter_chunks``), added in order.

Both are bit-identical for any thread count; against the exact sums the error is at most
``K * 2**-24 * sum |a*b|`` (K terms; conv_gemm_grad.h).

Each wrapper checks every buffer and size against what C reads and writes before the call.
"""

from __future__ import annotations

import numpy as np

from minigraph.backends.native import (
    as_f32,
    check_code,
    check_rank4,
    checked_sizes,
    fbuf,
    lib,
    num_threads,
    output_array,
)
from minigraph.ops.window import Window

F32 = np.float32


def to_channels_last(a: np.ndarray, channels_last: bool) -> np.ndarray:
    """``a`` (NHWC or NCHW) as a C-contiguous float32 NHWC array."""
    a = as_f32(a)
    return a if channels_last else as_f32(a.transpose(0, 2, 3, 1))


def from_channels_last(a: np.ndarray, channels_last: bool, out: np.ndarray | None = None,
                       reads: tuple = ()) -> np.ndarray:
    """The NHWC result ``a`` in the op's layout (a contiguous NCHW copy when not NHWC,
    written into ``out`` where it fits and is none of the op's inputs ``reads``:
    :func:`~minigraph.backends.native.output_array`)."""
    if channels_last:
        return a
    n, h, w, c = a.shape
    target = output_array(out, (n, c, h, w), a, *reads)
    np.copyto(target, a.transpose(0, 3, 1, 2))
    return target


def _geometry(what: str, window: Window) -> list[int]:
    """(stride_h, stride_w, dilation_h, dilation_w, pad_top, pad_left, out_h, out_w), each
    checked to lie in [0, 2**31)."""
    (sh, sw), (dh, dw), ((top, _), (left, _)) = window.strides, window.dilations, window.pads
    return checked_sizes(what, stride_h=sh, stride_w=sw, dilation_h=dh, dilation_w=dw,
                         pad_top=top, pad_left=left, out_h=window.out[0], out_w=window.out[1])


def _groups(what: str, channels: int, out_channels: int, f_shape: tuple) -> int:
    """The groups of an HWIO filter ``f_shape`` on ``channels`` input channels: its
    in_channels must divide them, and the groups its out_channels."""
    kh, kw, cig, co = f_shape
    if (co != out_channels or cig <= 0 or channels < cig or channels % cig
            or co % (channels // cig)):
        raise ValueError(f"native {what}: filter shape {tuple(f_shape)} does not fit "
                         f"{channels} input and {out_channels} output channels")
    checked_sizes(what, filter_h=kh, filter_w=kw)
    return channels // cig


def c_gemm_backprop_input(dy: np.ndarray, f: np.ndarray, input_shape: tuple, window: Window,
                          channels_last: bool, out: np.ndarray | None = None) -> np.ndarray:
    """d input of the convolution over ``window`` (``input_shape``: NHWC (n, h, w, c))
    given dy (the op's layout) and the HWIO filter f; the result in the op's layout (in
    ``out`` where it fits)."""
    what = "Conv2DBackpropInput"
    check_rank4(what, out_backprop=dy, filter=f)
    reads = (dy, f)
    dy, f = to_channels_last(dy, channels_last), as_f32(f)
    n, h, w, c = checked_sizes(what, batch=input_shape[0], height=input_shape[1],
                               width=input_shape[2], channels=input_shape[3])
    groups = _groups(what, c, dy.shape[-1], f.shape)
    geometry = _geometry(what, window)
    if dy.shape != (n, *window.out, f.shape[3]):
        raise ValueError(f"native {what}: out_backprop shape {dy.shape} is not "
                         f"{(n, *window.out, f.shape[3])}")
    dx = output_array(out if channels_last else None, (n, h, w, c), dy, f)
    check_code(lib.mg_conv2d_gemm_backprop_input(
        n, h, w, c, f.shape[0], f.shape[1], f.shape[3], groups, *geometry, fbuf(f), fbuf(dy),
        fbuf(dx), num_threads()), what)
    return from_channels_last(dx, channels_last, out, reads)


def c_gemm_backprop_filter(x: np.ndarray, dy: np.ndarray, filter_shape: tuple, window: Window,
                           channels_last: bool, out: np.ndarray | None = None) -> np.ndarray:
    """d filter (HWIO ``filter_shape``) of the convolution of x over ``window`` given dy
    (both in the op's layout), in ``out`` where it fits."""
    what = "Conv2DBackpropFilter"
    check_rank4(what, input=x, out_backprop=dy)
    given = (x, dy)  # the op's own inputs: out must not be one of them, even when NCHW copies
    x, dy = to_channels_last(x, channels_last), to_channels_last(dy, channels_last)
    n, h, w, c = x.shape
    groups = _groups(what, c, dy.shape[-1], tuple(filter_shape))
    geometry = _geometry(what, window)
    if dy.shape != (n, *window.out, filter_shape[3]):
        raise ValueError(f"native {what}: out_backprop shape {dy.shape} is not "
                         f"{(n, *window.out, filter_shape[3])}")
    kh, kw, _, co = filter_shape
    df = output_array(out, tuple(filter_shape), x, dy, *given)
    check_code(lib.mg_conv2d_gemm_backprop_filter(
        n, h, w, c, kh, kw, co, groups, *geometry, fbuf(x), fbuf(dy), fbuf(df),
        num_threads()), what)
    return df
