"""Kernels of the volumetric ops (``ops.volumetric_ops``).

numpy: Conv3D and its backprops run the convolution family's im2col kernels, and MaxPool3D,
AvgPool3D and AvgPool3DGrad the pooling family's pools (one clipped 1-D pass per spatial
axis): they take any number of spatial dims, so they are registered here for the 3-D ops as
they are.

MaxPool3DGrad and MaxPool3DGradGrad have TF's own 3-D rules (its CPU kernels,
``pooling_ops_3d.cc``), not the 2-D ops' argmax. Both loop over the combinations of window
offsets (one per spatial axis) that some output reads in bounds, never over pixels: each
step is a strided slice of the whole batch, and padding is never visited.

* MaxPool3DGrad: every in-bounds element ``x`` of a window with ``|x - orig_output| < 1e-5``
  (computed in TInput) receives the window's grad. Ties and near ties all get it, a NaN or
  infinite maximum gives none, and orig_output's values are used as given. The
  contributions to one element add up in TF's order (outputs by increasing width, then
  height, then planes index: window offsets decreasing), in T: float16/bfloat16 round after
  every addition, as TF's Eigen arithmetic does.
* MaxPool3DGradGrad (and the 2-D MaxPoolGradGrad, TF's same rule, registered here): each
  output takes grad at the first in-bounds element of its window (row-major: planes,
  height, width) equal to orig_output; 0 when none is.

native (``backend="native"``, float32): Conv3D, Conv3DBackpropInputV2 and
Conv3DBackpropFilterV2 on the GEMM micro-kernels (kernels_c/conv3d_gemm.c, wrapped by
``backends.conv3d_kernels``) for every stride, dilation and padding, NDHWC and NCDHW; an
empty tensor, or a size of 2**31 or more, runs the numpy kernel, and so do the cases where
TensorFlow's kernels keep a non-finite operand off the padding's zeros (the GEMM kernels'
zero terms would make 0 * inf = NaN there): a forward or input gradient whose filter holds
a NaN or an infinity (the forward only where the window pads), and a filter gradient whose
out_backprop does at a voxel whose window reads padding (docs/ops/convolution.md,
"Non-finite operands"). MaxPool3D
(float32) runs the numpy kernel's three passes on the 2-D C max pool, AvgPool3D and
AvgPool3DGrad the numpy kernels' passes each in C (kernels_c/window_pass.c), MaxPool3DGrad
and MaxPool3DGradGrad their rules and orders in C (kernels_c/pool3d_grad.c), bit for bit.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np

from minigraph.backends import convolution_kernels, pooling_kernels
from minigraph.backends.compute import fail_for
from minigraph.backends.conv3d_kernels import (
    c_conv3d,
    c_conv3d_backprop_filter,
    c_conv3d_backprop_input,
    channels_last,
    from_channels_last,
)
from minigraph.backends.convolution_kernels import (
    NATIVE_CONV,
    _c_takes,
    all_finite,
    backprop_input_geometry,
    padding_made_nan,
    padding_meets_filter,
)
from minigraph.backends.native import (
    as_f32,
    attrs_fit_int32,
    check_code,
    checked_sizes,
    fbuf,
    lib,
    num_threads,
)
from minigraph.backends.pooling_kernels import Pool, PoolAxis, c_max_pool, pool_setup
from minigraph.backends.registry import register_kernel
from minigraph.framework import dtypes
from minigraph.ops.window import conv_geometry, to_nhwc

register_kernel("Conv3D")(convolution_kernels.conv2d)
register_kernel("Conv3DBackpropInputV2")(convolution_kernels.conv2d_backprop_input)
register_kernel("Conv3DBackpropFilterV2")(convolution_kernels.conv2d_backprop_filter)
register_kernel("MaxPool3D")(pooling_kernels.max_pool)
register_kernel("AvgPool3D")(pooling_kernels.avg_pool)
register_kernel("AvgPool3DGrad")(pooling_kernels.avg_pool_grad)



@register_kernel("Conv3D", **NATIVE_CONV)
def conv3d_native(op, inputs, ctx):
    x, f = inputs
    window = conv_geometry(op.attrs, fail_for(op), x.shape, f.shape)
    if (x.size == 0 or f.size == 0 or not _c_takes(window, x.shape, f.shape)
            or padding_meets_filter(f, window)):  # conv_by_taps
        return convolution_kernels.conv2d(op, inputs, ctx)
    return [c_conv3d(x, f, window, op.attrs["data_format"] == "NDHWC")]


@register_kernel("Conv3DBackpropInputV2", **NATIVE_CONV)
def conv3d_backprop_input_native(op, inputs, ctx):
    sizes, f, dy = inputs
    fmt = op.attrs["data_format"]
    x_shape, window = backprop_input_geometry(op, sizes, f, dy)
    if (dy.size == 0 or 0 in x_shape or not _c_takes(window, x_shape, f.shape)
            or not all_finite(f)):
        return convolution_kernels.conv2d_backprop_input(op, inputs, ctx)
    return [c_conv3d_backprop_input(dy, f, to_nhwc(x_shape, fmt), window, fmt == "NDHWC")]


@register_kernel("Conv3DBackpropFilterV2", **NATIVE_CONV)
def conv3d_backprop_filter_native(op, inputs, ctx):
    x, sizes, dy = inputs
    f_shape = tuple(sizes.tolist())
    window = conv_geometry(op.attrs, fail_for(op), x.shape, f_shape)
    if x.size == 0 or dy.size == 0 or not _c_takes(window, x.shape, f_shape):
        return convolution_kernels.conv2d_backprop_filter(op, inputs, ctx)
    df = c_conv3d_backprop_filter(x, dy, f_shape, window, op.attrs["data_format"] == "NDHWC")
    if padding_made_nan(op, x.shape, dy, window, df):
        return convolution_kernels.conv2d_backprop_filter(op, inputs, ctx)
    return [df]


@register_kernel("MaxPool3D", backend="native", dtypes=(dtypes.float32,),
                 when=lambda op: attrs_fit_int32(op, "ksize", "strides"))
def max_pool3d_native(op, inputs, ctx):
    """The numpy kernel's passes, innermost axis first, on the 2-D C max pool: height and
    width over [n*d, h, w, c] (NCDHW: [n, c*d, h, w]), then the planes as a (kd, 1) window
    over the result seen as [n, d, oh*ow, c] ([n, c, d, oh*ow]). The same bits: each pass
    keeps its window's largest non-NaN value at its first occurrence (MaxPool's rule), so
    the first plane, then the row-major first (h, w) in it: TF's row-major scan."""
    x = inputs[0]
    fmt = op.attrs["data_format"]
    out_shape, pool = pool_setup(op, x.shape, fmt)
    w = pool.window
    n, d, h, wd, c = to_nhwc(x.shape, fmt)
    if 0 in out_shape or max(w.ksize + w.strides + (h * wd, c * d)) >= 2**31:
        return pooling_kernels.max_pool(op, inputs, ctx)
    last = fmt == "NDHWC"
    oh, ow = w.out[1:]
    rows = c_max_pool(x.reshape((n * d, h, wd, c) if last else (n, c * d, h, wd)),
                      w.ksize[1:], w.strides[1:], w.pads[1:], w.out[1:], last)
    planes = rows.reshape((n, d, oh * ow, c) if last else (n, c, d, oh * ow))
    return [c_max_pool(planes, (w.ksize[0], 1), (w.strides[0], 1), (w.pads[0], (0, 0)),
                       (w.out[0], oh * ow), last).reshape(out_shape)]


# AvgPool3D and AvgPool3DGrad: the numpy kernels' passes (Pool.reduce with np.add, one per
# spatial axis, then the division by the window counts; the division, then Pool.spread in
# reverse) with each pass in C (kernels_c/window_pass.c), the same additions in the same
# order: bit for bit.


def _window_pass(what: str, c_fn, a: np.ndarray, axis: int, geo: PoolAxis, result_len: int,
                 source_len: int) -> np.ndarray:
    """One C pass along ``axis`` of ``a`` (whose length there must be ``source_len``):
    the result has ``result_len`` there."""
    a = as_f32(a)
    if a.shape[axis] != source_len:
        raise ValueError(f"native {what}: axis {axis} of {a.shape} is not {source_len}")
    outer, inner = int(np.prod(a.shape[:axis])), int(np.prod(a.shape[axis + 1:]))
    sizes = checked_sizes(what, outer=outer, n=geo.size, inner=inner, k=geo.k,
                          stride=geo.stride, before=geo.before, out=geo.out)
    result = np.empty(a.shape[:axis] + (result_len,) + a.shape[axis + 1:], np.float32)
    check_code(c_fn(*sizes, fbuf(a), fbuf(result), num_threads()), what)
    return result


def _c_avg_pool3d(op) -> bool:
    return attrs_fit_int32(op, "ksize", "strides")


@register_kernel("AvgPool3D", backend="native", dtypes=(dtypes.float32,), when=_c_avg_pool3d)
def avg_pool3d_native(op, inputs, ctx):
    x = inputs[0]
    out_shape, pool = pool_setup(op, x.shape, op.attrs["data_format"])
    if 0 in out_shape or x.size == 0:
        return pooling_kernels.avg_pool(op, inputs, ctx)
    total = x
    for axis, geo in zip(pool.tensor_axes, pool.axes):
        total = _window_pass("AvgPool3D", lib.mg_window_sum, total, axis, geo, geo.out,
                             geo.size)
    return [total / pool.counts().astype(np.float32)]


@register_kernel("AvgPool3DGrad", backend="native", dtypes=(dtypes.float32,),
                 when=_c_avg_pool3d)
def avg_pool3d_grad_native(op, inputs, ctx):
    sizes, g = inputs
    x_shape = tuple(sizes.tolist())
    out_shape, pool = pool_setup(op, x_shape, op.attrs["data_format"])
    if 0 in out_shape or 0 in x_shape:
        return pooling_kernels.avg_pool_grad(op, inputs, ctx)
    dx = as_f32(g) / pool.counts().astype(np.float32)
    for axis, geo in reversed(list(zip(pool.tensor_axes, pool.axes))):
        dx = _window_pass("AvgPool3DGrad", lib.mg_window_spread, dx, axis, geo, geo.size,
                          geo.out)
    return [dx]


# TF's tie tolerance of MaxPool3DGrad, converted to the inputs' type as Eigen does.
TIE_TOLERANCE = 1e-5

Index = tuple[slice, ...]


def _sorted_offsets(geo: PoolAxis, decreasing: bool) -> list[tuple[int, int, slice]]:
    """``geo.offsets()`` ordered by window offset (increasing, or decreasing)."""
    # offset - pad = the input index of output p0, less p0 strides
    return sorted(geo.offsets(), key=lambda o: o[2].start - geo.stride * o[0],
                  reverse=decreasing)


def _window_blocks(pool: Pool, tf_grad_order: bool) -> Iterator[tuple[Index, Index]]:
    """(outputs, inputs) index pairs, one per combination of window offsets some output
    reads in bounds: the outputs that read in bounds at those offsets and the inputs they
    read, as slices over the tensor's axes. Combinations come in row-major window order
    (planes offset outermost, each increasing), or with ``tf_grad_order`` in the order
    MaxPool3DGrad's contributions reach an element in TF (width offset outermost, each
    decreasing)."""
    per_axis = [_sorted_offsets(geo, tf_grad_order) for geo in pool.axes]
    if tf_grad_order:
        per_axis.reverse()
    rank = len(pool.axes) + 2
    for combination in itertools.product(*per_axis):
        if tf_grad_order:
            combination = combination[::-1]
        outputs, inputs = [slice(None)] * rank, [slice(None)] * rank
        for axis, (p0, p1, src) in zip(pool.tensor_axes, combination):
            outputs[axis], inputs[axis] = slice(p0, p1), src
        yield tuple(outputs), tuple(inputs)


@register_kernel("MaxPool3DGrad")
def max_pool3d_grad(op, inputs, ctx):
    """Each window's grad added to its elements within 1e-5 of orig_output (see the module
    docstring), in T."""
    x, y, g = inputs
    out_shape, pool = pool_setup(op, x.shape, op.attrs["data_format"])
    dx = np.zeros(x.shape, g.dtype)
    if 0 in out_shape or x.size == 0:
        return [dx]
    tolerance = np.asarray(TIE_TOLERANCE, x.dtype)
    zero = np.zeros((), g.dtype)
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf: NaN, no tie
        for outputs, window in _window_blocks(pool, tf_grad_order=True):
            tie = np.abs(x[window] - y[outputs]) < tolerance
            dx[window] += np.where(tie, g[outputs], zero)
    return [dx]


def _c_max_pool3d_grads(op, inputs, ctx, numpy_kernel, c_fn, what: str,
                        to_input: bool) -> list:
    """MaxPool3DGrad (``to_input``: the result has x's shape) or MaxPool3DGradGrad (y's) of
    (x, y, g) on the C kernel ``c_fn`` (kernels_c/pool3d_grad.c), NCDHW transposed to NDHWC
    and back; empty tensors on ``numpy_kernel``."""
    x, y, g = inputs
    fmt = op.attrs["data_format"]
    out_shape, pool = pool_setup(op, x.shape, fmt)
    if 0 in out_shape or x.size == 0:
        return numpy_kernel(op, inputs, ctx)
    last = fmt == "NDHWC"
    x, y, g = (channels_last(a, last) for a in (x, y, g))
    w = pool.window
    n, *spatial, c = x.shape
    out = (n, *w.out, c)
    if y.shape != out or g.shape != (out if to_input else x.shape):
        raise ValueError(f"native {what}: orig_output {y.shape} must be {out} and grad "
                         f"{g.shape} {'orig_output' if to_input else 'orig_input'}'s shape")
    sizes = checked_sizes(what, n=n, c=c, in_0=spatial[0], in_1=spatial[1],
                          in_2=spatial[2], k_0=w.ksize[0], k_1=w.ksize[1], k_2=w.ksize[2],
                          s_0=w.strides[0], s_1=w.strides[1], s_2=w.strides[2],
                          pad_0=w.pads[0][0], pad_1=w.pads[1][0], pad_2=w.pads[2][0],
                          out_0=w.out[0], out_1=w.out[1], out_2=w.out[2])
    result = np.empty(x.shape if to_input else out, np.float32)
    check_code(c_fn(sizes, fbuf(x), fbuf(y), fbuf(g), fbuf(result), num_threads()), what)
    return [from_channels_last(result, last)]


def _native_max_pool3d_grads(op) -> bool:
    return op.attrs.get("TInput", op.attrs["T"]) == dtypes.float32 and attrs_fit_int32(
        op, "ksize", "strides")


@register_kernel("MaxPool3DGrad", backend="native", dtypes=(dtypes.float32,),
                 when=_native_max_pool3d_grads)
def max_pool3d_grad_native(op, inputs, ctx):
    """max_pool3d_grad's rule and order in C, bit for bit."""
    return _c_max_pool3d_grads(op, inputs, ctx, max_pool3d_grad, lib.mg_max_pool3d_grad,
                               "MaxPool3DGrad", True)


@register_kernel("MaxPoolGradGrad", "MaxPool3DGradGrad")
def max_pool3d_grad_grad(op, inputs, ctx):
    """grad gathered at each window's first element equal to orig_output (0 if none): TF's
    CPU rule for both ranks (2-D too: not MaxPoolGrad's argmax, so a window whose first
    element is NaN gathers at its maximum, an all-NaN one gets 0)."""
    x, y, g = inputs
    out_shape, pool = pool_setup(op, x.shape, op.attrs["data_format"])
    out = np.zeros(out_shape, g.dtype)
    if 0 in out_shape or x.size == 0:
        return [out]
    found = np.zeros(out_shape, bool)
    for outputs, window in _window_blocks(pool, tf_grad_order=False):
        take = (x[window] == y[outputs]) & ~found[outputs]
        np.copyto(out[outputs], g[window], where=take)
        found[outputs] |= take
    return [out]


@register_kernel("MaxPool3DGradGrad", backend="native", dtypes=(dtypes.float32,),
                 when=_native_max_pool3d_grads)
def max_pool3d_grad_grad_native(op, inputs, ctx):
    """max_pool3d_grad_grad's first exact match in C, bit for bit."""
    return _c_max_pool3d_grads(op, inputs, ctx, max_pool3d_grad_grad,
                               lib.mg_max_pool3d_grad_grad, "MaxPool3DGradGrad", False)
