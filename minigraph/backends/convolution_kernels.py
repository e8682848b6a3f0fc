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

native (``backend="native"``, float32): the forward on the C kernels of
kernels_c/convolution*.c (dilation 1, SAME/VALID); the gradients for any strides, dilations,
padding and groups on the GEMM micro-kernels (kernels_c/conv_gemm_grad.c,
``backends.conv_gemm_grad``), or on the stride-1 direct kernels where those are faster
(:func:`direct_grad_applies`: every stride-1 filter gradient; :func:`direct_grad_wins`: the
input gradient). The ``c_*`` wrappers check every buffer against what C reads and
writes.

Depthwise (DepthwiseConv2dNative and its backprops): per filter tap, one vectorized
multiply-add over every output pixel the tap reaches, so each sum is a chain in TF's order
(the taps row-major) with TF's CPU rounding: one rounding per step in float32 and the half
types (a fused multiply-add, emulated exactly in numpy), a product and a sum in float64. The
native kernels (kernels_c/depthwise*.c, float32 NHWC, any window; NCHW tensors transposed
around them) compute the same chains: bit-identical results.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numpy.lib.stride_tricks import as_strided

from minigraph.backends.activation_kernels import Epilogue, c_channel_epilogue
from minigraph.backends.compute import compute_dtype, fail_for, placed_rows
from minigraph.backends.conv_gemm_grad import (
    c_gemm_backprop_filter,
    c_gemm_backprop_input,
    from_channels_last,
    to_channels_last,
)
from minigraph.backends.gemm import PackedB, _frozen, frozen_cached, packed_b
from minigraph.backends.native import (
    as_f32,
    attrs_fit_int32,
    c_call,
    check_code,
    check_rank4,
    checked_sizes,
    fbuf,
    ffi,
    lib,
    nhwc_dims,
    num_threads,
    output_array,
    plain_f32,
    shaped,
    unshared,
)
from minigraph.backends.registry import register_kernel, set_replay
from minigraph.framework import dtypes, limits
from minigraph.ops.convolution_ops import depthwise_geometry
from minigraph.ops.window import Window, conv_geometry, sizes_to_shape, to_nhwc

F32, F64 = np.float32, np.float64


# ----------------------------------------------------------------------------- im2col core


def _nhwc(x: np.ndarray, data_format: str) -> np.ndarray:
    """``x`` (data_format) as a contiguous channels-last (NHWC or NDHWC) array: the NHWC
    kernels' BLAS calls then see the very array an NHWC graph gives them, so a layout's
    result does not depend on strides (the layout pass relies on it)."""
    if data_format.endswith("C"):
        return x
    return np.ascontiguousarray(x.transpose(0, *range(2, x.ndim), 1))


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


def groups_of(x_channels: int, f: np.ndarray | tuple) -> int:
    """A convolution's groups: the input's channels over the filter's in_channels (the
    shape function checked that they divide)."""
    shape = f.shape if isinstance(f, np.ndarray) else f
    return x_channels // shape[-2]


def _grouped_matmul(cols: np.ndarray, weights: np.ndarray, groups: int) -> np.ndarray:
    """``cols [rows, k..., groups * ci] @ weights [k..., ci, groups * cog]`` group by group
    (group g's columns times group g's weights: ``[rows, groups * cog]``), one batched
    matmul; one plain matmul when ``groups`` is 1."""
    rows, co = cols.shape[0], weights.shape[-1]
    if groups == 1:
        return np.matmul(cols.reshape(rows, -1), weights.reshape(-1, co))
    ci, cog = weights.shape[-2], co // groups
    per_group = cols.reshape(rows, -1, groups, ci).transpose(2, 0, 1, 3).reshape(groups, rows, -1)
    w = weights.reshape(-1, ci, groups, cog).transpose(2, 0, 1, 3).reshape(groups, -1, cog)
    return np.matmul(per_group, w).transpose(1, 0, 2).reshape(rows, co)


# inf and NaN operands are values like any other (TensorFlow's): no RuntimeWarning for them
_QUIET = np.errstate(invalid="ignore", over="ignore")


@_QUIET
def conv2d_nhwc(x: np.ndarray, f: np.ndarray, window: Window) -> np.ndarray:
    """Cross-correlation of channels-last ``x`` with the HWIO (DHWIO) filter ``f``: im2col
    then one matmul (a batched one per group when x has ``groups`` times the filter's
    in_channels: output channel ``g * cog + o`` reads input channels ``g * ci`` to
    ``(g + 1) * ci``). Any number of spatial dims (Conv3D uses it too). A filter with a
    non-finite weight runs :func:`conv_by_taps` (no weight times the padding's zeros)."""
    n = x.shape[0]
    *k_sizes, ci, co = f.shape
    if n * int(np.prod(window.out)) == 0 or ci == 0:
        return np.zeros((n, *window.out, co), x.dtype)
    if padding_meets_filter(f, window):
        return conv_by_taps(x, f, window)
    cols = _patches(_pad_nhwc(x, window.pads), tuple(k_sizes), window)
    y = _grouped_matmul(cols, f, groups_of(x.shape[-1], f))
    return y.reshape(n, *window.out, co)


@_QUIET
def conv2d_backprop_input_nhwc(dy: np.ndarray, f: np.ndarray, input_shape: tuple,
                               window: Window) -> np.ndarray:
    """d input of a convolution as TensorFlow's CPU kernel forms it: column gradients then
    col2im.

    ``cols[pixel, tap, c] = sum_o dy[pixel, o] * f[tap, c, o]`` (one matmul per group), then
    each tap's columns are added into the input positions that tap reads from its output
    pixels: ``dx[h] = sum_i cols[(h + pad_before - i*d) / s, i]`` over the taps i whose
    position lies inside the input. Padding positions are never multiplied, so a non-finite
    filter weight gives +-inf only where that tap reaches real pixels (TensorFlow's values;
    spreading dy with zeros would make 0 * inf = NaN at the borders). Any number of spatial
    dims; ``input_shape`` is channels-last.
    """
    n, *sizes, c = input_shape
    *k_sizes, ci, co = f.shape
    groups, cog = groups_of(c, f), co // groups_of(c, f)
    taps = int(np.prod(k_sizes))
    out = dy.shape[1:-1]
    pixels = n * int(np.prod(out))
    dx = _zeros((n, *sizes, c), dy.dtype)
    if pixels == 0 or taps * ci == 0:
        return dx
    # [groups, pixels, cog] @ [groups, cog, taps * ci] -> [pixels, taps, groups, ci]
    per_group = dy.reshape(pixels, groups, cog).transpose(1, 0, 2)
    weights = f.reshape(taps, ci, groups, cog).transpose(2, 3, 0, 1).reshape(groups, cog, -1)
    cols = np.matmul(per_group, weights).reshape(groups, n, *out, taps, ci)
    for tap, _, pixels, inputs in _taps_reaching(k_sizes, window, sizes):
        part = cols[(slice(None), slice(None), *pixels, tap)]  # [groups, n, out..., ci]
        view = dx[(slice(None), *inputs)]
        view += np.moveaxis(part, 0, -2).reshape(view.shape)
    return dx


def _tap_reach(offsets: tuple, window: Window, sizes) -> tuple[list, list] | None:
    """Where the tap at ``offsets`` reaches real pixels: (the output pixels' slices, the
    strided slices of the input positions they read), or None when it reads only padding.
    Output pixel p reads input ``p * stride + i * dilation - pad_before`` along each dim."""
    pixels, inputs = [], []
    for i, d, s, (before, _), count, size in zip(offsets, window.dilations, window.strides,
                                                 window.pads, window.out, sizes):
        p0, p1 = placed_rows(i * d - before, s, count, size)
        if p1 <= p0:
            return None
        pixels.append(slice(p0, p1))
        first = p0 * s + i * d - before
        inputs.append(slice(first, first + (p1 - p0 - 1) * s + 1, s))
    return pixels, inputs


def _taps_reaching(k_sizes, window: Window, sizes):
    """Per filter tap (row-major) that reaches real input pixels: (its index, its offsets,
    and :func:`_tap_reach`'s output pixel and input position slices)."""
    for tap, offsets in enumerate(np.ndindex(*k_sizes)):
        reach = _tap_reach(offsets, window, sizes)
        if reach is not None:
            yield tap, offsets, *reach


@_QUIET
def conv_by_taps(x: np.ndarray, f: np.ndarray, window: Window) -> np.ndarray:
    """Cross-correlation of channels-last ``x`` with the HWIO (DHWIO) filter ``f`` as one
    matmul per tap (one per group, batched) over the output pixels where that tap reaches
    real pixels: padding positions are never multiplied, so a non-finite weight gives +-inf
    only where its tap reads the input (TensorFlow's values; im2col's zero padding would
    make 0 * inf = NaN at the borders). Any number of spatial dims."""
    n, *sizes, c = x.shape
    *k_sizes, _, co = f.shape
    y = _zeros((n, *window.out, co), np.result_type(x, f))
    for _, offsets, pixels, inputs in _taps_reaching(k_sizes, window, sizes):
        part = x[(slice(None), *inputs)]  # [n, reached out..., c]
        view = y[(slice(None), *pixels)]
        view += _grouped_matmul(part.reshape(-1, c), f[offsets], groups_of(c, f)
                                ).reshape(view.shape)
    return y


def padding_meets_filter(f: np.ndarray, window: Window) -> bool:
    """Whether a forward convolution must keep the filter ``f`` off the padding (run
    :func:`conv_by_taps`): the window pads and a weight is infinite or NaN. Without padding
    the fast kernels multiply only real pixels: a finite filter, or no padding, skips the
    check's cost (one read of the filter per call for a fed or variable filter)."""
    return any(sum(window.pads, ())) and not all_finite(f)


def all_finite(f: np.ndarray) -> bool:
    """Whether every weight of the filter ``f`` is finite: checked once for a graph's
    constants (:func:`gemm.frozen_cached`), at every call for a variable's value."""
    return frozen_cached(f, "finite", f.shape, lambda: bool(np.isfinite(f).all()))


@_QUIET
def conv2d_backprop_filter_nhwc(x: np.ndarray, dy: np.ndarray, filter_shape: tuple,
                                window: Window, by_taps: bool = False) -> np.ndarray:
    """d filter = patches^T @ out_backprop, one matmul (one per group, batched), any number
    of spatial dims; ``by_taps``: one such matmul per filter tap over the pixels where that
    tap reads the input, so out_backprop never meets the padding's zeros (TensorFlow's
    values where out_backprop is non-finite there: :func:`padding_made_nan`)."""
    *k_sizes, ci, co = filter_shape
    if x.shape[0] * int(np.prod(window.out)) == 0:
        return np.zeros(filter_shape, x.dtype)
    groups = groups_of(x.shape[-1], filter_shape)
    if by_taps:
        df = _zeros(filter_shape, np.result_type(x, dy))
        for _, offsets, pixels, inputs in _taps_reaching(k_sizes, window, x.shape[1:-1]):
            part = x[(slice(None), *inputs)]
            df[offsets] = _grouped_gram(part.reshape(-1, x.shape[-1]),
                                        dy[(slice(None), *pixels)].reshape(-1, co), ci, groups)
        return df
    cols = _patches(_pad_nhwc(x, window.pads), tuple(k_sizes), window)
    return _grouped_gram(cols, dy.reshape(-1, co), ci, groups).reshape(filter_shape)


def _grouped_gram(cols: np.ndarray, dy: np.ndarray, ci: int, groups: int) -> np.ndarray:
    """``cols [rows, k * groups * ci]^T @ dy [rows, groups * cog]`` group by group (group
    g's columns of each of the k taps times group g's columns of dy) as ``[k * ci, groups *
    cog]``: one matmul, a batched one per group when ``groups`` > 1."""
    rows, co = dy.shape
    if groups == 1:
        return np.matmul(cols.T, dy)
    cog = co // groups
    per_group = cols.reshape(rows, -1, groups, ci).transpose(2, 1, 3, 0)  # [g, k, ci, rows]
    dyg = dy.reshape(rows, groups, cog).transpose(1, 0, 2)  # [g, rows, cog]
    df = np.matmul(per_group.reshape(groups, -1, rows), dyg)  # [g, k * ci, cog]
    return df.reshape(groups, -1, ci, cog).transpose(1, 2, 0, 3).reshape(-1, co)


@_QUIET
def padding_made_nan(op, x_shape: tuple, dy: np.ndarray, window: Window, df: np.ndarray
                     ) -> bool:
    """Whether a filter gradient ``df`` computed over the zero-padded input must be computed
    again keeping out_backprop ``dy`` off the padding, as TensorFlow's CPU kernels do: a
    non-finite dy pixel whose window reads padding makes 0 * inf = NaN in df, so only a df
    with a NaN (its sum NaN: one pass over the small df, the whole per-call cost for
    finite values) is looked at, then :func:`padding_meets_non_finite`, where the padding
    is not EXPLICIT (which TensorFlow itself runs on a zero-padded input)."""
    return (math.isnan(df.sum()) and op.attrs["padding"] != "EXPLICIT"
            and padding_meets_non_finite(dy, window, x_shape, op.attrs["data_format"]))


@_QUIET
def padding_meets_non_finite(dy: np.ndarray, window: Window, x_shape: tuple, fmt: str
                             ) -> bool:
    """Whether out_backprop ``dy`` has an infinity or a NaN at an output pixel whose window
    reads padding (``dy`` and the input's shape ``x_shape`` in data_format ``fmt``). Only
    those border slabs are read (:func:`_padding_borders`): a few rows and columns of dy,
    not all of it; a finite sum of a slab proves it finite in one pass."""
    return any(not math.isfinite(dy[border].sum()) and not np.isfinite(dy[border]).all()
               for border in _padding_borders(window, tuple(x_shape), fmt))


@functools.lru_cache(maxsize=512)
def _padding_borders(window: Window, x_shape: tuple, fmt: str) -> tuple:
    """Index tuples of out_backprop's non-empty slabs of output pixels whose window reads
    padding, per spatial dim: the pixels before the first whose tap 0 lies in the input,
    and from the first whose last tap lies beyond it; computed once per geometry."""
    first, sizes = (1 if fmt.endswith("C") else 2), to_nhwc(x_shape, fmt)[1:-1]
    borders = []
    for axis, (k, d, s, (before, _), count, size) in enumerate(
            zip(window.ksize, window.dilations, window.strides, window.pads, window.out,
                sizes), first):
        inside = min(count, placed_rows(-before, s, count, size)[0])
        beyond = placed_rows((k - 1) * d - before, s, count, size)[1]
        borders += [(slice(None),) * axis + (slice(start, stop),)
                    for start, stop in ((0, inside), (beyond, count)) if stop > start]
    return tuple(borders)


# ----------------------------------------------------------------------------- conv kernels


def _c_convolution(op) -> bool:
    """The cases the C convolution gradients handle (besides float32): any strides,
    dilations, padding (SAME/VALID/EXPLICIT) and groups whose attrs fit int32 (the GEMM
    gradients of kernels_c/conv_gemm_grad.c; the stride-1 direct kernels where
    :func:`direct_grad_applies` (filter) or :func:`direct_grad_wins` (input))."""
    return attrs_fit_int32(op, "strides", "dilations", "explicit_paddings")


def _c_forward_convolution(op) -> bool:
    """The cases the C forward convolutions handle (besides float32): any strides,
    dilations and padding (SAME, VALID, EXPLICIT) whose sizes fit int32."""
    return attrs_fit_int32(op, "strides", "dilations", "explicit_paddings")


NATIVE_CONV = {"backend": "native", "dtypes": (dtypes.float32,), "when": _c_convolution}
NATIVE_FORWARD_CONV = {**NATIVE_CONV, "when": _c_forward_convolution}


@register_kernel("Conv2D")
def conv2d(op, inputs, ctx):
    x, f = inputs
    fmt = op.attrs["data_format"]
    window = conv_geometry(op.attrs, fail_for(op), x.shape, f.shape)
    ct = compute_dtype(x.dtype)
    y = conv2d_nhwc(_nhwc(x, fmt).astype(ct, copy=False), f.astype(ct, copy=False), window)
    return [_from_nhwc(y, fmt).astype(x.dtype, copy=False)]


def backprop_input_geometry(op, sizes: np.ndarray, f: np.ndarray, dy: np.ndarray
                            ) -> tuple[tuple, Window]:
    """(the forward input's shape, in data_format, and the window) of a convolution's input
    gradient (2-D or 3-D) from its ``input_sizes``, filter and out_backprop."""
    fmt = op.attrs["data_format"]
    fail = fail_for(op)
    x_shape = sizes_to_shape(sizes.tolist(), "input_sizes", fail, fmt,
                             to_nhwc(dy.shape, fmt)[0], f.shape[-2])
    return x_shape, conv_geometry(op.attrs, fail, x_shape, f.shape)


@register_kernel("Conv2DBackpropInput")
def conv2d_backprop_input(op, inputs, ctx):
    sizes, f, dy = inputs
    fmt = op.attrs["data_format"]
    x_shape, window = backprop_input_geometry(op, sizes, f, dy)
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
    args = (_nhwc(x, fmt).astype(ct, copy=False),
            np.ascontiguousarray(_nhwc(dy, fmt), dtype=ct), f_shape, window)
    df = conv2d_backprop_filter_nhwc(*args)
    if padding_made_nan(op, x.shape, dy, window, df):
        df = conv2d_backprop_filter_nhwc(*args, by_taps=True)
    return [df.astype(x.dtype, copy=False)]


# Grouped convolutions on the C kernels: a filter of one in_channel per group with
# ``groups`` equal to the channels (Keras' Conv2D(groups=C): ConvNeXt's 7x7) is a depthwise
# convolution whose filter is the same array seen as ``[kh, kw, C, out / C]`` (output
# channel ``c * mult + m`` is input channel c through filter column ``c * mult + m``); any
# other grouping runs the GEMM kernels (the forward's implicit GEMM, the gradients), every
# group in one call.


def _channel_axis(channels_last: bool) -> int:
    return -1 if channels_last else 1


def _depthwise_route(groups: int, f_shape: tuple, channels_last: bool) -> bool:
    """Whether a grouped convolution is a depthwise one the C depthwise kernels run (NHWC,
    one in_channel per group)."""
    return groups > 1 and f_shape[2] == 1 and channels_last


def _as_depthwise(f: np.ndarray, channels: int) -> np.ndarray:
    """A one-in_channel-per-group HWIO filter seen as a depthwise ``[kh, kw, C, mult]``."""
    return f.reshape(f.shape[0], f.shape[1], channels, f.shape[3] // channels)


# The forward's kernel per shape (NHWC), chosen at plan time by one small rule:
#   * depthwise (kernels_c/depthwise*.c): groups > 1 with one input channel per group;
#   * the implicit GEMM (kernels_c/conv_gemm.c): every other grouped, dilated or explicitly
#     padded (pads beyond the window) convolution, and the dense ones the table gives it;
#   * the direct kernel (kernels_c/convolution*.c): the other dense ones.
# On AVX-512 both dense kernels sum each output in the same chain (tests/test_conv_gemm.py):
# the route changes speed only. Measured with one thread in CPU time (the machine is shared;
# AMD Zen 4, FMA peak about 115 GFLOP/s per thread), GFLOP/s GEMM vs direct, as (batch,
# h = w, c, k, co): both reach 100-110 over large shapes with 128+ channels ((8, 16, 128, 1,
# 128) 109 vs 109; (32, 8, 128, 3, 128) 107 vs 106; (32, 4, 256, 3, 256) 108 vs 98); the
# direct kernel wins with few channels over many pixels ((8, 32, 64, 1, 64) 98 vs 108;
# (8, 32, 16, 3, 32) 83 vs 104; ResNet's stem (2, 70, 3, 7, 64) stride 2: 76 vs 108); the
# GEMM wins over few pixels ((1, 8, 32, 3, 32) 64 vs 55; (2, 8, 64, 3, 64) 99 vs 93; (2, 4,
# 256, 1, 1024) 106 vs 72; earlier, 2 threads: (2, 2, 512, 1, 2048) 183 vs 67) but not with
# very few channels ((2, 8, 16, 3, 16) 28 vs 48). The rule: (most output pixels of a "few
# pixels" shape, fewest channels for the GEMM there, fewest channels elsewhere), channels
# being min(kw * c, co) (the GEMM's K block is a tap row of kw * c floats).
CONV_ROUTE_RULE = (256, 32, 128)
# Strided (stride > 1 along some axis) dense convolutions: the same rule's form, with fewer
# "few pixels" and the GEMM only from 512 channels. The direct kernel reads a strided
# window as cheaply as a dense one, while the GEMM's rows step sw * c floats. Measured
# (quiet 2 threads, wall, AMD Zen 4, 3x3 stride 2 unless said, ms GEMM / direct, as (batch,
# h = w, c -> co)): (8, 28, 128 -> 128) 2.38 / 2.17, (2, 28, 128 -> 128) 0.60-0.74 / 0.57,
# (8, 14, 256 -> 256) 2.85 / 2.27, (4, 30, 96 -> 192) 1.67 / 1.37, (1, 28, 128 -> 128)
# 0.49 / 0.34, Inception-v3's (8, 35, 288 -> 384) 24.5-24.9 / 23.3, (8, 17, 192 -> 320)
# 4.14-4.17 / 3.31-3.36, (8, 17, 384 -> 384) 8.5-9.1 / 8.6-8.7; the GEMM ahead at (8, 14,
# 512 -> 512) 11.7 / 12.0 and at 49 output pixels (1, 14, 256 -> 256) 0.33 / 0.51. Not for
# 1x1 windows (a GEMM over every sw-th pixel): (8, 56, 256 -> 128) 1.94-1.97 / 2.29-2.34,
# (8, 56, 256 -> 512) 8.04 / 8.52, (8, 28, 512 -> 256) 1.98-2.14 / 2.06-2.09, (16, 32, 64 ->
# 128) 0.38-0.41 / 0.38-0.39.
STRIDED_ROUTE_RULE = (128, 32, 512)
# Stride-1 windows wider than 1x1 over zero padding: the direct kernel runs only the taps
# inside the input (a 3x3 SAME window over 8 x 8 pixels reads 16 % padding, over 14 x 14 9 %)
# where the GEMM multiplies the padding's zeros too. On one thread it led up to 256 channels
# at every size ((1, 14, 256) 104 vs 81 GFLOP/s). On two threads (quiet, wall, AMD Zen 4,
# 3x3 SAME, ms GEMM / direct, as (batch, h = w, c = co); route_grid over batch 1-32, 4-28
# pixels, 64-512 channels) the direct kernel leads at 64 channels everywhere ((2, 4, 64)
# 1.16, (32, 4, 64) 1.76, (8, 28, 64) 1.19) and from 128 channels over more than 256
# output pixels ((2, 16, 128) 1.26, (32, 8, 256) 1.18; (8, 8, 256) 0.87 and (2, 16, 256)
# 0.89 the exceptions); over at most 256 pixels the GEMM splits better from 128 channels
# ((2, 4, 256) 0.60, (8, 4, 256) 0.76, (1, 8, 256) 0.85; (2, 8, 128) 1.04 about even), and
# from 512 channels everywhere ((2, 16, 512) 0.78, (32, 4, 512) 0.97).
PADDED_ROUTE_RULE = (256, 128, 512)


def route_rule(strides: tuple, window_hw: tuple, padded: bool = False
               ) -> tuple[int, int, int]:
    """The dense route's rule (few pixels, fewest channels for the GEMM there, elsewhere)
    for these strides and filter (kh, kw): STRIDED_ROUTE_RULE for a strided window wider
    than 1x1, PADDED_ROUTE_RULE for a stride-1 one over zero padding (`padded`), else
    CONV_ROUTE_RULE."""
    wide = any(k > 1 for k in window_hw)
    if wide and any(s > 1 for s in strides):
        return STRIDED_ROUTE_RULE
    return PADDED_ROUTE_RULE if wide and padded else CONV_ROUTE_RULE
# Grouped convolutions (more than one channel per group) run the implicit GEMM, all groups in
# one call. Per FLOP the direct kernel group by group was up to 1.25x faster at 8-16
# channels per group over large maps (single thread, CPU time: (8, 28, 64, 8, 64) cg 8 19-21
# vs 17-28 GFLOP/s; docs/performance.md "Narrow panels"), but one call per group pays a
# channel-slice copy, a C call and a concatenation per group: at the sizes real models run
# (quiet, 2 threads, 2026-11-27) RegNetX-400MF's 3x3 g16 layer at batch 2 ran 83 GFLOP/s on
# the GEMM against 22 per group, and whole models went from 0.94x to 2.08x TensorFlow
# (RegNetX002) and 0.83x to 1.75x (RegNetY002).


def forward_route(x_shape: tuple, f_shape: tuple, window: Window, groups: int) -> str:
    """The kernel of an NHWC Conv2D forward: "depthwise", "gemm" or "direct" (the rules
    above, :func:`route_rule`)."""
    kh, kw, cg, co = f_shape
    if groups > 1 and cg == 1:
        return "depthwise"
    (top, _), (left, _) = window.pads
    if window.dilations != (1, 1) or top >= kh or left >= kw:
        return "gemm"
    if groups > 1:
        return "gemm"
    few_pixels, few_pixel_channels, channels = route_rule(window.strides, (kh, kw),
                                                          any(sum(window.pads, ())))
    pixels = x_shape[0] * window.out[0] * window.out[1]
    fewest = min(kw * cg, co)
    if pixels <= few_pixels:
        return "gemm" if fewest >= few_pixel_channels else "direct"
    return "gemm" if fewest >= channels else "direct"


def conv2d_forward_nhwc(x, f, window: Window, groups: int, epilogue: Epilogue | None = None,
                        out: np.ndarray | None = None) -> np.ndarray:
    """The native Conv2D of NHWC x (float32, non-empty) on the kernel :func:`forward_route`
    picks, then ``epilogue`` (which must fit y; the depthwise kernel applies it in one pass
    after); in ``out`` where it fits."""
    route = forward_route(x.shape, f.shape, window, groups)
    if route == "gemm":
        return c_conv_gemm(x, f, window, groups, epilogue, out)
    if route == "direct":
        return c_conv2d(x, f, window.pads, window.out, True, epilogue, window.strides, out)
    y = c_depthwise(x, _as_depthwise(f, groups), window, out)
    if epilogue is not None:
        c_channel_epilogue(y, epilogue)
    return y


def _conv2d_native(x, f, op, epilogue: Epilogue | None = None, out: np.ndarray | None = None
                   ) -> np.ndarray:
    """The native Conv2D of non-empty x in the op's data_format: NHWC directly, NCHW
    transposed to NHWC and back (the direct kernel reads NCHW itself, when it is the
    route); ``epilogue`` (NHWC only) applied; in ``out`` where it fits."""
    window = _window(op, x.shape, f.shape)
    if padding_meets_filter(f, window):
        [y] = conv2d(op, [x, f], None)
        if epilogue is not None:
            c_channel_epilogue(y, epilogue)
        return y
    if op.attrs["data_format"] == "NHWC":
        return conv2d_forward_nhwc(x, f, window, groups_of(x.shape[-1], f), epilogue, out)
    groups = groups_of(x.shape[1], f)
    nhwc = (x.shape[0], *x.shape[2:], x.shape[1])
    if forward_route(nhwc, f.shape, window, groups) == "direct":  # one group: reads NCHW
        return c_conv2d(x, f, window.pads, window.out, False, strides=window.strides, out=out)
    y = conv2d_forward_nhwc(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), f, window, groups)
    return from_channels_last(y, False, out, (x, f))


@register_kernel("Conv2D", **NATIVE_FORWARD_CONV, out=True)
def conv2d_native(op, inputs, ctx, out=None):
    x, f = inputs
    window = _window(op, x.shape, f.shape)
    if x.size == 0 or 0 in window.out or not _c_takes(window, x.shape, f.shape):
        return conv2d(op, inputs, ctx)  # zeros, or absurd geometry: the numpy kernel
    return [_conv2d_native(x, f, op, out=out)]


def conv2d_native_epilogue(op, inputs, ctx, epilogue: Epilogue, out=None) -> list:
    """conv2d_native, then ``epilogue`` (the convolution's fused successors) where it fits
    the result: in the convolution's tiles (NHWC), else in one pass after it. Where it does
    not fit, the plain result (the caller runs the successors' own kernels)."""
    x, f = inputs
    window = _window(op, x.shape, f.shape)
    shape = (x.shape[0], *window.out, f.shape[-1])
    if (op.attrs["data_format"] == "NHWC" and x.size and 0 not in window.out
            and _c_takes(window, x.shape, f.shape) and epilogue.fits(shape)):
        return [_conv2d_native(x, f, op, epilogue, out)]
    [y] = conv2d_native(op, inputs, ctx, out)
    if epilogue.fits(y.shape):
        c_channel_epilogue(y, epilogue)
    return [y]


@functools.lru_cache(maxsize=512)
def _window(op, x_shape: tuple, f_shape: tuple):
    """The convolution's window for these shapes (the step's checks passed), computed once
    per op and shapes: a steady step reuses it."""
    return conv_geometry(op.attrs, fail_for(op), x_shape, f_shape)


# The convolution gradients run on the GEMM micro-kernels (backends.conv_gemm_grad) for
# every shape, except where the stride-1 direct kernels of kernels_c/convolution.c (stride 1,
# dilation 1, one group, SAME/VALID) were faster: they keep their outputs in registers over
# all taps, where the GEMM's input gradient stores its C tile after each tap and runs half
# empty 32-column panels below 32 input channels. benchmarks/conv_grads.py (AMD EPYC Zen 4,
# 1 thread, busy shared machine, ms GEMM / direct): ResNet-8 batch 32 16->16 3x3 input
# 26.8 / 7.9, filter 10.9 / 6.0; 64->64 8x8 input 6.2 / 5.6, filter 6.8 / 5.8; ResNet50
# batch 8 3x3 256->256 7x7 input 17.1 / 17.5, filter 26.0 / 17.2; 512->512 4x4 input 35.7 /
# 57.0, filter 37.0 / 51.8. The rule: the direct kernels where they apply and the fewer of
# the channels is below DIRECT_GRAD_MAX_CHANNELS. Re-measured (1 thread, CPU time, noisy)
# with the narrow micro-kernel and zero-filled edge runs (kernels_c/conv_gemm_grad.c):
# ResNet-8 16->16 input 3.5 / 1.6-1.9 (was 5.3), filter 2.5 / 1.6: the rule stands.
# (The stride-2 16->32 input gradient, GEMM only, went from 2.7 to 1.95 ms.) Re-measured with
# the filter gradient reading x in place (1 thread, CPU time, busy machine), filter GEMM /
# direct: ResNet-8 16->16 2.80 / 1.53 ms, 32->32 16x16 1.82 / 1.49, 64->64 8x8 1.76 / 1.53,
# 96->96 12x12 b16 4.71 / 3.93: the direct kernels keep the stride-1 filter gradients.
# With the filter gradient's tiles cut by taps (no padded copy, no padding terms; 1 thread,
# CPU time, busy machine), filter GEMM / direct at 512 channels and more: 3x3 512->512 4x4
# b8 6.66 / 4.35 ms, 7x7 b8 20.1 / 16.6, 14x14 b8 87.9 / 74.3, 28x28 b2 83.8 / 66.3, 3x3
# 512->1024 14x14 b4 87.3 / 72.4, 768->768 7x7 b8 45.8 / 35.9, 1x1 2048->512 7x7 b8 9.61 /
# 8.16, 1024->256 14x14 b8 11.7 / 9.18: the filter gradient takes the direct kernels at
# every channel count (direct_grad_applies), the input gradient below
# DIRECT_GRAD_MAX_CHANNELS.
DIRECT_GRAD_MAX_CHANNELS = 512


def direct_grad_applies(op, window: Window, groups: int) -> bool:
    """Whether the stride-1 direct kernels compute this convolution's gradients: stride and
    dilation 1, one group, SAME/VALID padding (TensorFlow multiplies EXPLICIT padding's
    zeros in the filter gradient; the direct kernels never do)."""
    return (op.attrs["padding"] != "EXPLICIT" and groups == 1
            and window.strides == (1, 1) and window.dilations == (1, 1))


def direct_grad_wins(op, window: Window, in_channels: int, out_channels: int,
                     groups: int) -> bool:
    """Whether the input gradient runs on the stride-1 direct kernels (see above)."""
    return (direct_grad_applies(op, window, groups)
            and min(in_channels, out_channels) < DIRECT_GRAD_MAX_CHANNELS)


@register_kernel("Conv2DBackpropInput", **NATIVE_CONV, out=True)
def conv2d_backprop_input_native(op, inputs, ctx, out=None):
    sizes, f, dy = inputs
    fmt = op.attrs["data_format"]
    x_shape = sizes_to_shape(sizes.tolist(), "input_sizes", fail_for(op), fmt,
                             to_nhwc(dy.shape, fmt)[0], f.shape[-2])
    if dy.size == 0 or 0 in x_shape:
        return conv2d_backprop_input(op, inputs, ctx)
    window = conv_geometry(op.attrs, fail_for(op), x_shape, f.shape)
    # a non-finite filter takes the column kernel: the C kernels' zero terms (padding, a
    # tile's other pixels) would turn its infinities into NaNs where TensorFlow has none
    if not _c_takes(window, x_shape, f.shape) or not all_finite(f):
        return conv2d_backprop_input(op, inputs, ctx)
    channels_last = fmt == "NHWC"
    nhwc_shape = to_nhwc(x_shape, fmt)
    groups = groups_of(nhwc_shape[-1], f)
    if _depthwise_route(groups, f.shape, channels_last):
        return [c_depthwise_backprop_input(dy, _as_depthwise(f, groups), nhwc_shape[1:3],
                                           window, out)]
    if direct_grad_wins(op, window, nhwc_shape[-1], f.shape[-1], groups):
        return [c_conv2d_backprop_input(dy, f, nhwc_shape[1:3], window.pads, channels_last,
                                        out)]
    return [c_gemm_backprop_input(dy, f, nhwc_shape, window, channels_last, out)]


@register_kernel("Conv2DBackpropFilter", **NATIVE_CONV, out=True)
def conv2d_backprop_filter_native(op, inputs, ctx, out=None):
    x, sizes, dy = inputs
    f_shape = tuple(sizes.tolist())
    if x.size == 0 or dy.size == 0:
        return conv2d_backprop_filter(op, inputs, ctx)
    window = conv_geometry(op.attrs, fail_for(op), x.shape, f_shape)
    if not _c_takes(window, x.shape, f_shape):
        return conv2d_backprop_filter(op, inputs, ctx)
    channels_last = op.attrs["data_format"] == "NHWC"
    channels = x.shape[_channel_axis(channels_last)]
    groups = groups_of(channels, f_shape)
    if _depthwise_route(groups, f_shape, channels_last):  # never multiplies the padding
        df = c_depthwise_backprop_filter(x, dy, (*f_shape[:2], groups, f_shape[3] // groups),
                                         window)
        return [df.reshape(f_shape)]
    if direct_grad_applies(op, window, groups):
        df = c_conv2d_backprop_filter(x, dy, f_shape[:2], window.pads, channels_last, out)
    else:
        df = c_gemm_backprop_filter(x, dy, f_shape, window, channels_last, out)
    if padding_made_nan(op, x.shape, dy, window, df):
        return conv2d_backprop_filter(op, inputs, ctx)
    return [df]


# ----------------------------------------------------------------------------- depthwise core


def _fma_f32(acc: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """float32 ``acc + a * b`` rounded once, elementwise: a fused multiply-add, as TF's
    oneDNN float32 kernels and minigraph's C compute. The product of two float32 values is
    exact in float64; Knuth's TwoSum recovers the float64 sum's rounding error exactly, and
    rounding that sum to odd with it (Boldo & Melquiond) makes the one rounding to float32
    the correct one."""
    acc = acc.astype(F64)
    prod = a.astype(F64) * b
    with np.errstate(invalid="ignore", over="ignore"):
        total = acc + prod
        back = total - acc
        err = (acc - (total - back)) + (prod - back)
        nudge = (err != 0) & ((total.view(np.int64) & 1) == 0) & np.isfinite(total)
        total = np.where(nudge, np.nextafter(total, np.where(err > 0, np.inf, -np.inf)), total)
        return total.astype(F32)


def _madd(acc: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``acc + a * b`` in acc's dtype, rounded as TF's CPU depthwise kernels: once in float32
    (oneDNN's fused multiply-add), the product and the sum apart in float64 (Eigen's kernel,
    built without FMA)."""
    return _fma_f32(acc, a, b) if acc.dtype == F32 else acc + a * b


def _reach(offset: int, step: int, count: int, size: int) -> tuple[slice, slice] | None:
    """The t in [0, count) with 0 <= offset + t * step < size, as (slice of t, slice of
    offset + t * step), or None when there are none: the output pixels a filter tap reaches
    (offset = tap * dilation - pad, step = stride), or the taps of an output pixel that fall
    inside the input (offset = pixel * stride - pad, step = dilation)."""
    first, last = placed_rows(offset, step, count, size)
    if first == last:
        return None
    start = offset + first * step
    return slice(first, last), slice(start, start + (last - first - 1) * step + 1, step)


def _tap_regions(window: Window, in_hw: tuple[int, int], k_hw: tuple[int, int]):
    """Per filter tap (i, j), row-major, that reaches the input: (i, j, output rows and
    columns, input rows and columns) as slices; output pixel k of the region reads input
    pixel k of its region (p * stride + i * dilation - pad)."""
    (sh, sw), (dh, dw) = window.strides, window.dilations
    (top, _), (left, _) = window.pads
    for i in range(k_hw[0]):
        rows = _reach(i * dh - top, sh, window.out[0], in_hw[0])
        for j in range(k_hw[1]):
            cols = _reach(j * dw - left, sw, window.out[1], in_hw[1])
            if rows and cols:
                yield i, j, (rows[0], cols[0]), (rows[1], cols[1])


@_QUIET
def depthwise_nhwc(x: np.ndarray, f: np.ndarray, window: Window) -> np.ndarray:
    """Depthwise cross-correlation of NHWC x with f ``[kh, kw, c, mult]``:
    ``y[n, p, q, c*mult + m] = sum_{i, j} x[n, p*s_h + i*d_h - top, q*s_w + j*d_w - left, c]
    * f[i, j, c, m]``, a chain of :func:`_madd` from 0 over the taps (i, j) in row-major
    order that fall inside x (TF's order)."""
    n, h, w, c = x.shape
    kh, kw, _, mult = f.shape
    acc = np.zeros((n, *window.out, c, mult), x.dtype)
    for i, j, (po, qo), (pi, qi) in _tap_regions(window, (h, w), (kh, kw)):
        acc[:, po, qo] = _madd(acc[:, po, qo], x[:, pi, qi, :, None], f[i, j])
    return acc.reshape(n, *window.out, c * mult)


@_QUIET
def depthwise_backprop_input_nhwc(dy: np.ndarray, f: np.ndarray, input_shape: tuple,
                                  window: Window) -> np.ndarray:
    """``dx[n, r, s, c] = sum dy[n, p, q, c*mult + m] * f[i, j, c, m]`` over the taps (i, j)
    and output pixels (p, q) with ``r = p*s_h + i*d_h - top``, ``s = q*s_w + j*d_w - left``:
    a chain of :func:`_madd` from 0 over the taps in row-major order, then m (oneDNN's
    order)."""
    n, h, w, c = input_shape
    kh, kw, _, mult = f.shape
    dyr = dy.reshape(*dy.shape[:3], c, mult)
    dx = np.zeros(input_shape, dy.dtype)
    for i, j, (po, qo), (pi, qi) in _tap_regions(window, (h, w), (kh, kw)):
        region = dx[:, pi, qi]
        for m in range(mult):
            region = _madd(region, dyr[:, po, qo, :, m], f[i, j, :, m])
        dx[:, pi, qi] = region
    return dx


@_QUIET
def depthwise_backprop_filter_nhwc(x: np.ndarray, dy: np.ndarray, filter_shape: tuple,
                                   window: Window) -> np.ndarray:
    """``df[i, j, c, m] = sum_{n, p, q} x[n, p*s_h + i*d_h - top, q*s_w + j*d_w - left, c] *
    dy[n, p, q, c*mult + m]``: per image, a chain of :func:`_madd` from 0 over the output
    pixels (p, q) in row-major order whose tap pixel lies inside x; then the images' sums
    added in image order (the C kernel's order; TF's oneDNN kernel blocks its sums its own
    way and agrees to float32 rounding)."""
    n, h, w, c = x.shape
    kh, kw, _, mult = filter_shape
    (sh, sw), (dh, dw) = window.strides, window.dilations
    (top, _), (left, _) = window.pads
    dyr = dy.reshape(*dy.shape[:3], 1, 1, c, mult)
    part = np.zeros((n, kh, kw, c, mult), x.dtype)
    for p in range(window.out[0]):
        rows = _reach(p * sh - top, dh, kh, h)
        for q in range(window.out[1] if rows else 0):
            cols = _reach(q * sw - left, dw, kw, w)
            if cols:
                taps = (slice(None), rows[0], cols[0])
                part[taps] = _madd(part[taps], x[:, rows[1], cols[1], :, None], dyr[:, p, q])
    total = np.zeros((kh, kw, c, mult), x.dtype) if n == 0 else part[0]
    for image in part[1:]:
        total = total + image
    return total.reshape(filter_shape)


def _unreached(shape: tuple, where: list | None) -> np.ndarray:
    """The positions of ``shape`` (spatial dims) outside the strided slices ``where`` (all
    of them when None), as a bool mask."""
    mask = np.ones(shape, bool)
    if where is not None:
        mask[tuple(where)] = False
    return mask


def explicit_depthwise_input_grad_nans(dx: np.ndarray, f: np.ndarray, window: Window) -> None:
    """TensorFlow's depthwise input gradient with EXPLICIT padding multiplies every weight by
    the zero-padded, stride-dilated out_backprop: 0 * inf = NaN at each input position
    (NHWC ``dx``, in place) of a channel whose non-finite weight's tap reaches it from no
    output pixel (the tap-wise sum leaves those terms out)."""
    bad = ~np.isfinite(f).all(axis=-1)  # [kh, kw, c]
    for offsets in zip(*np.nonzero(bad.any(axis=-1))):
        reach = _tap_reach(offsets, window, dx.shape[1:-1])
        holes = _unreached(dx.shape[1:-1], None if reach is None else reach[1])
        dx[:, holes[:, :, None] & bad[offsets]] = np.nan


def _explicit_filter_grad_nans(op, df: np.ndarray, dy: np.ndarray, window: Window,
                               x_nhwc: tuple) -> None:
    """:func:`explicit_depthwise_filter_grad_nans` where the op's padding is EXPLICIT and
    NHWC ``dy`` is non-finite where the window reads padding."""
    if op.attrs["padding"] == "EXPLICIT" and padding_meets_non_finite(dy, window, x_nhwc,
                                                                      "NHWC"):
        explicit_depthwise_filter_grad_nans(df, dy, window, x_nhwc[1:-1])


def explicit_depthwise_filter_grad_nans(df: np.ndarray, dy: np.ndarray, window: Window,
                                        in_hw: tuple) -> None:
    """TensorFlow's depthwise filter gradient with EXPLICIT padding multiplies out_backprop
    by the padding's zeros: 0 * inf = NaN at each weight (``df [kh, kw, c, mult]``, in
    place) whose tap reads padding at an output pixel where NHWC ``dy`` is non-finite in
    that weight's channel."""
    bad = ~np.isfinite(dy)
    for offsets in np.ndindex(*df.shape[:2]):
        reach = _tap_reach(offsets, window, in_hw)
        holes = _unreached(dy.shape[1:-1], None if reach is None else reach[0])
        df[offsets][bad[:, holes].any(axis=(0, 1)).reshape(df.shape[2:])] = np.nan


# ----------------------------------------------------------------------------- depthwise kernels


def _depthwise_native(op) -> bool:
    """The cases the C depthwise kernels handle (besides float32): any window whose
    geometry fits int32, NHWC (NCHW tensors transposed to NHWC and back around them)."""
    return attrs_fit_int32(op, "strides", "dilations", "explicit_paddings")


NATIVE_DEPTHWISE = {"backend": "native", "dtypes": (dtypes.float32,),
                    "when": _depthwise_native}


def _depthwise_input_shape(op, sizes: np.ndarray, f: np.ndarray, dy: np.ndarray) -> tuple:
    """The input shape (data_format order) ``input_sizes`` gives, checked."""
    fmt = op.attrs["data_format"]
    return sizes_to_shape(sizes.tolist(), "input_sizes", fail_for(op), fmt,
                          to_nhwc(dy.shape, fmt)[0], f.shape[2])


@register_kernel("DepthwiseConv2dNative")
def depthwise_conv2d(op, inputs, ctx):
    x, f = inputs
    fmt = op.attrs["data_format"]
    window = depthwise_geometry(op.attrs, fail_for(op), x.shape, f.shape)
    ct = compute_dtype(x.dtype)
    y = depthwise_nhwc(_nhwc(x, fmt).astype(ct, copy=False), f.astype(ct, copy=False), window)
    return [_from_nhwc(y, fmt).astype(x.dtype, copy=False)]


@register_kernel("DepthwiseConv2dNativeBackpropInput")
def depthwise_conv2d_backprop_input(op, inputs, ctx):
    sizes, f, dy = inputs
    fmt = op.attrs["data_format"]
    x_shape = _depthwise_input_shape(op, sizes, f, dy)
    window = depthwise_geometry(op.attrs, fail_for(op), x_shape, f.shape, "input_sizes")
    ct = compute_dtype(dy.dtype)
    dx = depthwise_backprop_input_nhwc(_nhwc(dy, fmt).astype(ct, copy=False),
                                       f.astype(ct, copy=False), to_nhwc(x_shape, fmt), window)
    if op.attrs["padding"] == "EXPLICIT" and not all_finite(f):
        explicit_depthwise_input_grad_nans(dx, f, window)
    return [_from_nhwc(dx, fmt).astype(dy.dtype, copy=False)]


@register_kernel("DepthwiseConv2dNativeBackpropFilter")
def depthwise_conv2d_backprop_filter(op, inputs, ctx):
    x, sizes, dy = inputs
    fmt = op.attrs["data_format"]
    f_shape = tuple(sizes.tolist())
    window = depthwise_geometry(op.attrs, fail_for(op), x.shape, f_shape)
    ct = compute_dtype(x.dtype)
    dy = _nhwc(dy, fmt).astype(ct, copy=False)
    df = depthwise_backprop_filter_nhwc(_nhwc(x, fmt).astype(ct, copy=False), dy, f_shape,
                                        window)
    _explicit_filter_grad_nans(op, df, dy, window, to_nhwc(x.shape, fmt))
    return [df.astype(x.dtype, copy=False)]


def _c_takes(window: Window, *shapes: tuple) -> bool:
    """Whether every size of the call (the window's, the tensors' dims) is below 2**31, as
    the C kernels require (their int64 offsets then never overflow); absurd geometry (a
    stride of 2**40) runs on the numpy kernels."""
    sizes = (*window.strides, *window.dilations, *sum(window.pads, ()), *window.out,
             *sum(shapes, ()))
    return max(sizes) < 2**31


@register_kernel("DepthwiseConv2dNative", **NATIVE_DEPTHWISE, out=True)
def depthwise_conv2d_native(op, inputs, ctx, out=None):
    x, f = inputs
    window = depthwise_geometry(op.attrs, fail_for(op), x.shape, f.shape)
    if not _c_takes(window, x.shape, f.shape):
        return depthwise_conv2d(op, inputs, ctx)
    last = op.attrs["data_format"] == "NHWC"
    y = c_depthwise(to_channels_last(x, last), f, window, out if last else None)
    return [from_channels_last(y, last, out, (x, f))]


@register_kernel("DepthwiseConv2dNativeBackpropInput", **NATIVE_DEPTHWISE, out=True)
def depthwise_conv2d_backprop_input_native(op, inputs, ctx, out=None):
    sizes, f, dy = inputs
    x_shape = _depthwise_input_shape(op, sizes, f, dy)
    window = depthwise_geometry(op.attrs, fail_for(op), x_shape, f.shape, "input_sizes")
    if not _c_takes(window, x_shape, f.shape):
        return depthwise_conv2d_backprop_input(op, inputs, ctx)
    last = op.attrs["data_format"] == "NHWC"
    dx = c_depthwise_backprop_input(to_channels_last(dy, last), f,
                                    to_nhwc(x_shape, op.attrs["data_format"])[1:3], window,
                                    out if last else None)
    if op.attrs["padding"] == "EXPLICIT" and not all_finite(f):
        explicit_depthwise_input_grad_nans(dx, f, window)
    return [from_channels_last(dx, last, out, (dy, f))]


@register_kernel("DepthwiseConv2dNativeBackpropFilter", **NATIVE_DEPTHWISE, out=True)
def depthwise_conv2d_backprop_filter_native(op, inputs, ctx, out=None):
    x, sizes, dy = inputs
    f_shape = tuple(sizes.tolist())
    window = depthwise_geometry(op.attrs, fail_for(op), x.shape, f_shape)
    if not _c_takes(window, x.shape, f_shape):
        return depthwise_conv2d_backprop_filter(op, inputs, ctx)
    last = op.attrs["data_format"] == "NHWC"
    dy = to_channels_last(dy, last)
    df = c_depthwise_backprop_filter(to_channels_last(x, last), dy, f_shape, window,
                                     unshared(out, x, dy))
    _explicit_filter_grad_nans(op, df, dy, window, to_nhwc(x.shape, op.attrs["data_format"]))
    return [df]


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


def c_conv2d(x, f, pads, out_hw, channels_last, epilogue: Epilogue | None = None,
             strides=(1, 1), out: np.ndarray | None = None):
    """Cross-correlation of x (NHWC or NCHW) with the HWIO filter f, dilation 1; ``strides``
    (height, width), ``pads`` = ((top, bottom), (left, right)), ``out_hw`` the output's
    (height, width): ``y[n, p, q, o] = sum_{i, j, ci} x[n, p * sh + i - top,
    q * sw + j - left, ci] * f[i, j, ci, o]`` (zero outside x); then ``epilogue`` applied to
    each tile in registers (NHWC; it must fit the result); in ``out`` where it fits."""
    x, f = as_f32(x), as_f32(f)
    sizes, shape = _direct_sizes(x, f, pads, out_hw, channels_last, strides)
    y = output_array(out, shape, x, f)
    c_epilogue = ffi.NULL if epilogue is None else epilogue.c_struct(y.shape)
    check_code(lib.mg_conv2d_forward(*sizes, fbuf(x), fbuf(f), fbuf(y), c_epilogue,
                                     num_threads()), "Conv2D")
    return y


def _direct_sizes(x, f, pads, out_hw, channels_last, strides) -> tuple[tuple, tuple]:
    """``mg_conv2d_forward``'s sizes (checked) and the result's shape."""
    check_rank4("Conv2D", x=x, filter=f)
    n, h, w, c = nhwc_dims(x.shape, channels_last)
    kh, kw, _, co = _c_filter("Conv2D", f, c, None)
    sh, sw, top, left, oh, ow = checked_sizes(
        "Conv2D", stride_h=strides[0], stride_w=strides[1], pad_top=pads[0][0],
        pad_left=pads[1][0], out_h=out_hw[0], out_w=out_hw[1])
    return ((n, h, w, c, kh, kw, co, sh, sw, top, left, oh, ow, int(channels_last)),
            shaped(n, oh, ow, co, channels_last))


def c_conv_gemm(x, f, window: Window, groups: int = 1,
                epilogue: Epilogue | None = None, out: np.ndarray | None = None
                ) -> np.ndarray:
    """Cross-correlation of NHWC x with the HWIO filter f (``groups`` groups of f's
    in_channels) over ``window`` (any strides, dilations, pads) as an implicit GEMM
    (kernels_c/conv_gemm.h): ``y[n, p, q, g*cog + o] = sum_{i, j, ci} x[n, p*sh + i*dh - top,
    q*sw + j*dw - left, g*cg + ci] * f[i, j, ci, g*cog + o]`` (zero outside x), the filter
    packed once when it is a constant; then ``epilogue`` (which must fit y) on each tile;
    in ``out`` where it fits."""
    x, f = as_f32(x), as_f32(f)
    sizes, packing = _gemm_sizes(x, f, window, groups)
    y = output_array(out, (x.shape[0], *window.out, f.shape[-1]), x, f)
    c_epilogue = ffi.NULL if epilogue is None else epilogue.c_struct(y.shape)
    check_code(lib.mg_conv_gemm_forward(*sizes, fbuf(x), fbuf(packing.data), fbuf(y),
                                        c_epilogue, num_threads()), "Conv2D")
    return y


def _gemm_sizes(x, f, window: Window, groups: int) -> tuple[tuple, PackedB]:
    """``mg_conv_gemm_forward``'s sizes (checked) and the packed filter."""
    check_rank4("Conv2D", x=x, filter=f)
    n, h, w, c = x.shape
    kh, kw, cg, co = f.shape
    if groups < 1 or cg * groups != c or co % groups:
        raise ValueError(f"native Conv2D: filter shape {f.shape} does not split {c} input "
                         f"channels in {groups} groups")
    (sh, sw), (dh, dw) = window.strides, window.dilations
    geometry = checked_sizes("Conv2D", stride_h=sh, stride_w=sw, dilation_h=dh, dilation_w=dw,
                             pad_top=window.pads[0][0], pad_left=window.pads[1][0],
                             out_h=window.out[0], out_w=window.out[1])
    packing = packed_b(f.reshape(kh * kw * cg, co), owner=f, groups=groups)
    if packing.data.size != groups * lib.mg_gemm_packed_floats(kh * kw * cg, co // groups):
        raise ValueError(f"native Conv2D: the packed filter does not hold {f.shape}")
    return (n, h, w, c, kh, kw, co, groups, *geometry), packing


def conv_replay(op, values: list, outputs: list, ctx=None, epilogue: Epilogue | None = None):
    """A channels-last Conv2D on fixed arrays (``registry.ReplayMaker``), ``epilogue`` (which
    must fit) applied in its tiles: the GEMM or direct route's C call with its arguments made
    once, for a frozen filter (packed and checked for non-finite weights once). None for
    what ``conv2d_native`` would run otherwise (NCHW, the depthwise route, a fed filter)."""
    x, f = values[:2]
    y = outputs[0]
    if (op.attrs["data_format"] != "NHWC" or not plain_f32(x) or x.ndim != 4 or not x.size
            or type(f) is not np.ndarray or f.dtype != np.float32 or f.ndim != 4
            or not _frozen(f) or not plain_f32(y) or not y.flags.writeable):
        return None
    window = _window(op, x.shape, f.shape)
    if (0 in window.out or not _c_takes(window, x.shape, f.shape)
            or padding_meets_filter(f, window) or y.shape != (x.shape[0], *window.out,
                                                              f.shape[-1])
            or epilogue is not None and not epilogue.fits(y.shape)):
        return None
    groups = groups_of(x.shape[-1], f)
    route = forward_route(x.shape, f.shape, window, groups)
    if route == "gemm":
        sizes, packing = _gemm_sizes(x, f, window, groups)
        call, weights, keep = lib.mg_conv_gemm_forward, packing.data, packing
    elif route == "direct":
        sizes, _ = _direct_sizes(x, f, window.pads, window.out, True, window.strides)
        call, weights, keep = lib.mg_conv2d_forward, f, None
    else:
        return None
    c_epilogue = ffi.NULL if epilogue is None else epilogue.c_struct(y.shape)
    args = (*sizes, fbuf(x), fbuf(weights), fbuf(y), c_epilogue, num_threads())
    return c_call(call, args, "Conv2D", (values, outputs, epilogue, keep))


set_replay(conv2d_native, conv_replay)


def c_conv2d_backprop_input(dy, f, input_hw, pads, channels_last, out=None):
    """d input (shape: dy's batch, ``input_hw``, f's in_channels) of conv2d given dy:
    ``dx[n, r, s, ci] = sum dy[n, p, q, o] * f[r - p + top, s - q + left, ci, o]``; in
    ``out`` where it fits."""
    dy, f = as_f32(dy), as_f32(f)
    check_rank4("Conv2DBackpropInput", out_backprop=dy, filter=f)
    n, oh, ow, co = nhwc_dims(dy.shape, channels_last)
    kh, kw, c, _ = _c_filter("Conv2DBackpropInput", f, f.shape[2], co)
    h, w, top, left = checked_sizes("Conv2DBackpropInput", height=input_hw[0], width=input_hw[1],
                             pad_top=pads[0][0], pad_left=pads[1][0])
    dx = output_array(out, shaped(n, h, w, c, channels_last), dy, f)
    check_code(lib.mg_conv2d_backprop_input(
        n, h, w, c, kh, kw, co, top, left, oh, ow, int(channels_last), fbuf(f), fbuf(dy),
        fbuf(dx), num_threads()), "Conv2DBackpropInput")
    return dx


def c_conv2d_backprop_filter(x, dy, filter_hw, pads, channels_last, out=None):
    """d filter (HWIO, spatial size ``filter_hw``) of conv2d given its input x and dy:
    ``df[i, j, ci, o] = sum_{n, p, q} x[n, p + i - top, q + j - left, ci] * dy[n, p, q, o]``;
    in ``out`` where it fits."""
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
    df = output_array(out, (kh, kw, c, co), x, dy)
    check_code(lib.mg_conv2d_backprop_filter(
        n, h, w, c, kh, kw, co, top, left, oh, ow, int(channels_last), fbuf(x), fbuf(dy),
        fbuf(df), num_threads()), "Conv2DBackpropFilter")
    return df


def _c_depthwise_window(what: str, window: Window) -> list[int]:
    """(stride_h, stride_w, dilation_h, dilation_w, pad_top, pad_left, out_h, out_w) of a
    depthwise window, each checked to lie in [0, 2**31)."""
    (sh, sw), (dh, dw) = window.strides, window.dilations
    return checked_sizes(what, stride_h=sh, stride_w=sw, dilation_h=dh, dilation_w=dw,
                         pad_top=window.pads[0][0], pad_left=window.pads[1][0],
                         out_h=window.out[0], out_w=window.out[1])


def _c_depthwise_filter(what: str, f_shape: tuple, in_channels: int) -> None:
    """A depthwise filter ``[kh, kw, c, mult]`` must have the input's channels and no zero
    dimension (C reads ``kh * kw * c * mult`` floats of it, and writes that many of df)."""
    if len(f_shape) != 4 or f_shape[2] != in_channels or 0 in f_shape:
        raise ValueError(f"native {what}: filter shape {f_shape} does not match "
                         f"{in_channels} input channels (or has a zero dimension)")


def _c_out_backprop(what: str, dy: np.ndarray, batch: int, window: Window, depth: int) -> None:
    """out_backprop must be exactly [batch, out_h, out_w, depth]: C reads all of it."""
    if dy.shape != (batch, *window.out, depth):
        raise ValueError(f"native {what}: out_backprop shape {dy.shape} is not "
                         f"{(batch, *window.out, depth)}")


def c_depthwise(x, f, window: Window, out: np.ndarray | None = None) -> np.ndarray:
    """Depthwise cross-correlation of NHWC x with f ``[kh, kw, c, mult]`` over ``window``
    (:func:`depthwise_nhwc`'s formula and rounding, bit for bit); in ``out`` where it fits."""
    x, f = as_f32(x), as_f32(f)
    sizes, shape = _depthwise_sizes(x, f, window)
    y = output_array(out, shape, x, f)
    check_code(lib.mg_depthwise_forward(*sizes, fbuf(x), fbuf(f), fbuf(y), num_threads()),
               "DepthwiseConv2dNative")
    return y


def _depthwise_sizes(x, f, window: Window) -> tuple[tuple, tuple]:
    """``mg_depthwise_forward``'s sizes (checked) and the result's shape."""
    check_rank4("DepthwiseConv2dNative", input=x, filter=f)
    n, h, w, c = x.shape
    _c_depthwise_filter("DepthwiseConv2dNative", f.shape, c)
    kh, kw, _, mult = f.shape
    geometry = _c_depthwise_window("DepthwiseConv2dNative", window)
    return (n, h, w, c, kh, kw, mult, *geometry), (n, *window.out, c * mult)


def depthwise_replay(op, values: list, outputs: list, ctx=None,
                     epilogue: Epilogue | None = None):
    """A channels-last DepthwiseConv2dNative on fixed arrays (``registry.ReplayMaker``),
    then ``epilogue`` (which must fit) in one pass after, as ``fused_native`` applies it:
    the C calls' arguments made once. None for what the native kernel would run otherwise
    (NCHW, absurd geometry)."""
    x, f = values[:2]
    y = outputs[0]
    if (op.attrs["data_format"] != "NHWC" or not plain_f32(x) or x.ndim != 4 or not plain_f32(f)
            or f.ndim != 4 or not plain_f32(y) or not y.flags.writeable):
        return None
    window = depthwise_geometry(op.attrs, fail_for(op), x.shape, f.shape)
    if not _c_takes(window, x.shape, f.shape):
        return None
    sizes, shape = _depthwise_sizes(x, f, window)
    if y.shape != shape or not y.size or epilogue is not None and not epilogue.fits(shape):
        return None
    depthwise = c_call(lib.mg_depthwise_forward, (*sizes, fbuf(x), fbuf(f), fbuf(y),
                                                   num_threads()),
                       "DepthwiseConv2dNative", (values, outputs))
    if epilogue is None:
        return depthwise
    after = c_call(lib.mg_channel_epilogue,
                   (y.size // shape[-1], shape[-1], fbuf(y), epilogue.c_struct(shape),
                    num_threads()), "channel epilogue", epilogue)

    def replayed() -> None:
        depthwise()
        after()

    return replayed


set_replay(depthwise_conv2d_native, depthwise_replay)


def c_depthwise_backprop_input(dy, f, input_hw: tuple, window: Window,
                               out: np.ndarray | None = None) -> np.ndarray:
    """d input (NHWC: dy's batch, ``input_hw``, f's channels) of the depthwise convolution
    over ``window`` given dy (:func:`depthwise_backprop_input_nhwc`, bit for bit); in ``out``
    where it fits."""
    what = "DepthwiseConv2dNativeBackpropInput"
    dy, f = as_f32(dy), as_f32(f)
    check_rank4(what, out_backprop=dy, filter=f)
    kh, kw, c, mult = f.shape
    _c_depthwise_filter(what, f.shape, c)
    _c_out_backprop(what, dy, dy.shape[0], window, c * mult)
    n = dy.shape[0]
    h, w = checked_sizes(what, height=input_hw[0], width=input_hw[1])
    geometry = _c_depthwise_window(what, window)
    dx = output_array(out, (n, h, w, c), dy, f)
    check_code(lib.mg_depthwise_backprop_input(n, h, w, c, kh, kw, mult, *geometry, fbuf(f),
                                               fbuf(dy), fbuf(dx), num_threads()), what)
    return dx


def c_depthwise_backprop_filter(x, dy, filter_shape: tuple, window: Window,
                                out: np.ndarray | None = None) -> np.ndarray:
    """d filter (``filter_shape``) of the depthwise convolution of NHWC x over ``window``
    given dy (:func:`depthwise_backprop_filter_nhwc`, bit for bit); in ``out`` where it fits."""
    what = "DepthwiseConv2dNativeBackpropFilter"
    x, dy = as_f32(x), as_f32(dy)
    check_rank4(what, input=x, out_backprop=dy)
    n, h, w, c = x.shape
    _c_depthwise_filter(what, tuple(filter_shape), c)
    kh, kw, _, mult = filter_shape
    _c_out_backprop(what, dy, n, window, c * mult)
    geometry = _c_depthwise_window(what, window)
    df = output_array(out, (kh, kw, c, mult), x, dy)
    check_code(lib.mg_depthwise_backprop_filter(n, h, w, c, kh, kw, mult, *geometry, fbuf(x),
                                                fbuf(dy), fbuf(df), num_threads()), what)
    return df
