"""Python wrappers of the native 3-D convolutions (kernels_c/conv3d_gemm.c): ``Conv3D``,
``Conv3DBackpropInputV2`` and ``Conv3DBackpropFilterV2`` for any strides, dilations and
padding, NDHWC or NCDHW (NCDHW tensors are transposed to NDHWC and back), float32, on the
GEMM micro-kernels.

Formulas (NDHWC terms; output voxel u reads input voxel ``u*s - pad + a*d`` through tap a,
per spatial dim):

- ``y[n, u, o] = sum_{a, c} x[n, u*s - pad + a*d, c] * f[a, c, o]``: one fused multiply-add
  chain per element, taps row-major then c;
- ``dx[n, v, c] = sum_{a, o} dy[n, (v + pad - a*d) / s, o] * f[a, c, o]`` over the taps whose
  quotient is a whole dy voxel: one chain per element (a0, a1 ascending, a2 descending, o);
- ``df[a, c, o] = sum_{n, u} x[n, u*s - pad + a*d, c] * dy[n, u, o]``: chains over fixed
  voxel ranges (``lib.mg_conv3d_gemm_filter_chunks``), added in order.

All three are bit-identical for any thread count; against the exact sums the error is at
most ``K * 2**-24 * sum |a*b|`` (K terms; conv3d_gemm.h). Each wrapper checks every buffer
and size against what C reads and writes before the call.
"""

from __future__ import annotations

import numpy as np

from minigraph.backends.gemm import packed_b
from minigraph.backends.native import as_f32, check_code, checked_sizes, fbuf, ffi, lib, num_threads
from minigraph.ops.window import Window

F32 = np.float32


def channels_last(a: np.ndarray, is_channels_last: bool) -> np.ndarray:
    """A 5-D ``a`` (NDHWC or NCDHW) as a C-contiguous float32 NDHWC array."""
    a = as_f32(a)
    return a if is_channels_last else as_f32(a.transpose(0, 2, 3, 4, 1))


def from_channels_last(a: np.ndarray, is_channels_last: bool) -> np.ndarray:
    """The NDHWC result ``a`` in the op's layout (a contiguous NCDHW copy when not NDHWC)."""
    return a if is_channels_last else np.ascontiguousarray(a.transpose(0, 4, 1, 2, 3))


def _check_rank5(what: str, **arrays: np.ndarray) -> None:
    for name, array in arrays.items():
        if array.ndim != 5:
            raise ValueError(f"native {what}: {name} must be 5-dimensional, got shape "
                             f"{array.shape}")


def _shape(what: str, x_shape: tuple, f_shape: tuple, window: Window):
    """The ``mg_conv3d_shape`` of NDHWC ``x_shape`` and the DHWIO ``f_shape`` over
    ``window``, every size checked to lie in [0, 2**31) and the filter's in_channels to be
    the input's (TF's Conv3D has no groups)."""
    n, *spatial, c = x_shape
    *k_sizes, ci, co = f_shape
    if ci != c or len(spatial) != 3 or len(k_sizes) != 3:
        raise ValueError(f"native {what}: filter shape {tuple(f_shape)} does not fit input "
                         f"shape {tuple(x_shape)}")
    sizes = checked_sizes(what, batch=n, channels=c, out_channels=co, in_0=spatial[0],
                          in_1=spatial[1], in_2=spatial[2], k_0=k_sizes[0], k_1=k_sizes[1],
                          k_2=k_sizes[2], out_0=window.out[0], out_1=window.out[1],
                          out_2=window.out[2], stride_0=window.strides[0],
                          stride_1=window.strides[1], stride_2=window.strides[2],
                          dilation_0=window.dilations[0], dilation_1=window.dilations[1],
                          dilation_2=window.dilations[2], pad_0=window.pads[0][0],
                          pad_1=window.pads[1][0], pad_2=window.pads[2][0])
    return ffi.new("mg_conv3d_shape *", {
        "n": sizes[0], "c": sizes[1], "co": sizes[2], "in": sizes[3:6], "k": sizes[6:9],
        "out": sizes[9:12], "stride": sizes[12:15], "dilation": sizes[15:18],
        "pad": sizes[18:21]})


def _check_dy(what: str, dy: np.ndarray, n: int, window: Window, co: int) -> None:
    if dy.shape != (n, *window.out, co):
        raise ValueError(f"native {what}: out_backprop shape {dy.shape} is not "
                         f"{(n, *window.out, co)}")


def c_conv3d(x: np.ndarray, f: np.ndarray, window: Window, is_channels_last: bool
             ) -> np.ndarray:
    """Cross-correlation of x (the op's layout) with the DHWIO filter f over ``window``; the
    filter packed once when it is a constant (``backends.gemm.packed_b``)."""
    what = "Conv3D"
    _check_rank5(what, input=x, filter=f)
    x, f = channels_last(x, is_channels_last), as_f32(f)
    shape = _shape(what, x.shape, f.shape, window)
    k, co = int(np.prod(f.shape[:4])), f.shape[4]
    packing = packed_b(f.reshape(k, co), owner=f)
    if packing.data.size != lib.mg_gemm_packed_floats(k, co):
        raise ValueError(f"native {what}: the packed filter does not hold {f.shape}")
    y = np.empty((x.shape[0], *window.out, co), F32)
    check_code(lib.mg_conv3d_gemm_forward(shape, fbuf(x), fbuf(packing.data), fbuf(y),
                                          num_threads()), what)
    return from_channels_last(y, is_channels_last)


def c_conv3d_backprop_input(dy: np.ndarray, f: np.ndarray, input_shape: tuple,
                            window: Window, is_channels_last: bool) -> np.ndarray:
    """d input (NDHWC ``input_shape``) of the convolution over ``window`` given dy (the op's
    layout) and the DHWIO filter f; the result in the op's layout."""
    what = "Conv3DBackpropInputV2"
    _check_rank5(what, out_backprop=dy, filter=f)
    dy, f = channels_last(dy, is_channels_last), as_f32(f)
    shape = _shape(what, tuple(input_shape), f.shape, window)
    _check_dy(what, dy, input_shape[0], window, f.shape[4])
    dx = np.empty(tuple(input_shape), F32)
    check_code(lib.mg_conv3d_gemm_backprop_input(shape, fbuf(f), fbuf(dy), fbuf(dx),
                                                 num_threads()), what)
    return from_channels_last(dx, is_channels_last)


def c_conv3d_backprop_filter(x: np.ndarray, dy: np.ndarray, filter_shape: tuple,
                             window: Window, is_channels_last: bool) -> np.ndarray:
    """d filter (DHWIO ``filter_shape``) of the convolution of x over ``window`` given dy
    (both in the op's layout)."""
    what = "Conv3DBackpropFilterV2"
    _check_rank5(what, input=x, out_backprop=dy)
    x, dy = channels_last(x, is_channels_last), channels_last(dy, is_channels_last)
    shape = _shape(what, x.shape, tuple(filter_shape), window)
    _check_dy(what, dy, x.shape[0], window, filter_shape[4])
    df = np.empty(tuple(filter_shape), F32)
    check_code(lib.mg_conv3d_gemm_backprop_filter(shape, fbuf(x), fbuf(dy), fbuf(df),
                                                  num_threads()), what)
    return df
