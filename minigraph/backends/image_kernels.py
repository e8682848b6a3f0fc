"""Kernels of the image resize ops (``ops.image_ops``): numpy on every backend, and the two
forward resizes in C for float32 (kernels_c/image.c, rows on the worker pool).

Where each output pixel reads is TF 2.21's CPU rule, computed once per call as per-row and
per-column tables in float32 exactly as TF does (``scale`` a float32 quotient; legacy
``in = i * scale``, half-pixel ``in = (i + 0.5) * scale - 0.5``, nearest's half-pixel
``in = (i + 0.5) * scale``; nearest rounds with ``roundf`` under ``align_corners``, else
floors). The C kernels take these tables, so numpy and C read the same pixels, and the
bilinear arithmetic (``top = tl + (tr - tl) * xl``, ``bottom`` likewise, ``top + (bottom -
top) * yl``, float32, no FMA) is the same in both: results are bit for bit TF's.

The gradients scatter-add in TF's order (output rows, then columns, then the four corners),
so float32 sums are TF's too; float16/bfloat16 sum in float32 and round once (TF sums in
the half type). A float64 session (gradient checking) computes in float64 (its promoted tensors are
float64 where the graph says another type).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from minigraph.backends.compute import compute_dtype
from minigraph.backends.native import as_f32, check_code, checked_sizes, fbuf, ffi, lib, num_threads
from minigraph.backends.registry import register_kernel
from minigraph.framework import dtypes

F32 = np.float32


def resize_scale(in_size: int, out_size: int, align_corners: bool) -> np.float32:
    """TF's ``CalculateResizeScale``: a float32 quotient; ``align_corners`` scales by
    ``(in - 1) / (out - 1)`` only when both sides have more than one pixel."""
    if align_corners and in_size > 1 and out_size > 1:
        return F32(in_size - 1) / F32(out_size - 1)
    return F32(in_size) / F32(out_size)


def nearest_indices(out_size: int, in_size: int, align_corners: bool,
                    half_pixel_centers: bool) -> np.ndarray:
    """The input index each of ``out_size`` output indices copies (int64)."""
    scale = resize_scale(in_size, out_size, align_corners)
    i = np.arange(out_size, dtype=F32)
    source = (i + F32(0.5)) * scale if half_pixel_centers else i * scale
    # roundf (half away from zero) of a float32 >= 0: floor(x + 0.5) in float64 is exact
    rounded = np.floor(source.astype(np.float64) + 0.5) if align_corners else np.floor(source)
    return np.clip(rounded.astype(np.int64), 0, in_size - 1)


class LinearTable(NamedTuple):
    """Per output index: the two input indices read and the float32 weight of the upper."""

    lower: np.ndarray
    upper: np.ndarray
    lerp: np.ndarray


def linear_table(out_size: int, in_size: int, align_corners: bool,
                 half_pixel_centers: bool) -> LinearTable:
    """TF's ``compute_interpolation_weights`` for one axis."""
    scale = resize_scale(in_size, out_size, align_corners)
    i = np.arange(out_size, dtype=F32)
    source = (i + F32(0.5)) * scale - F32(0.5) if half_pixel_centers else i * scale
    floor = np.floor(source)
    lower = np.clip(floor.astype(np.int64), 0, in_size - 1)
    upper = np.minimum(np.ceil(source).astype(np.int64), in_size - 1)
    return LinearTable(lower, upper, (source - floor).astype(F32))


def _mode(op) -> tuple[bool, bool]:
    return op.attrs["align_corners"], op.attrs["half_pixel_centers"]


def _tables(op, in_hw, out_hw, table):
    """(rows, columns): ``table`` (nearest_indices or linear_table) for both axes."""
    return tuple(table(o, i, *_mode(op)) for o, i in zip(out_hw, in_hw))


def _work_dtype(tensor: np.ndarray, declared) -> np.dtype:
    """float64 where a float64 session promoted ``tensor`` (float64 data for a tensor the
    graph declares ``declared``, another type), float32 otherwise: TF's bilinear math is
    float32 whatever the image type."""
    promoted = tensor.dtype == np.float64 and declared != dtypes.float64
    return np.dtype(np.float64) if promoted else np.dtype(F32)


# ----------------------------------------------------------------------------- forward


@register_kernel("ResizeNearestNeighbor")
def resize_nearest_neighbor(op, inputs, ctx):
    images, size = inputs
    rows, cols = _tables(op, images.shape[1:3], size.tolist(), nearest_indices)
    return [np.ascontiguousarray(images[:, rows][:, :, cols])]


def bilinear(images: np.ndarray, rows: LinearTable, cols: LinearTable,
             dtype: np.dtype) -> np.ndarray:
    """Bilinear interpolation from the tables, computed in ``dtype`` in TF's order; a resize
    to the same size is a plain copy (as TF: infinities stay, no inf - inf)."""
    x = images.astype(dtype, copy=False)
    if (len(rows.lower), len(cols.lower)) == images.shape[1:3]:
        return x.copy() if x is images else x
    xl = cols.lerp.astype(dtype)[:, None]
    yl = rows.lerp.astype(dtype)[:, None, None]
    top_rows, bottom_rows = x[:, rows.lower], x[:, rows.upper]
    top = top_rows[:, :, cols.lower] + (top_rows[:, :, cols.upper]
                                        - top_rows[:, :, cols.lower]) * xl
    bottom = bottom_rows[:, :, cols.lower] + (bottom_rows[:, :, cols.upper]
                                              - bottom_rows[:, :, cols.lower]) * xl
    return top + (bottom - top) * yl


@register_kernel("ResizeBilinear")
def resize_bilinear(op, inputs, ctx):
    images, size = inputs
    rows, cols = _tables(op, images.shape[1:3], size.tolist(), linear_table)
    return [bilinear(images, rows, cols, _work_dtype(images, op.attrs["T"]))]


# ----------------------------------------------------------------------------- gradients


def _scatter_add(grads: np.ndarray, out_hw, rows: np.ndarray, cols: np.ndarray,
                 values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Zeros [batch, *out_hw, channels] plus each of ``values`` ([K, batch, channels], in
    order) at (rows[k], cols[k]): one element after the other, as TF's loops add them."""
    n, c = grads.shape[0], grads.shape[3]
    out = np.zeros((*out_hw, n, c), dtype)
    np.add.at(out, (rows, cols), values)
    return out.transpose(2, 0, 1, 3)


@register_kernel("ResizeNearestNeighborGrad")
def resize_nearest_neighbor_grad(op, inputs, ctx):
    """Each gradient pixel added to the input pixel the forward resize copied it from."""
    grads, size = inputs
    out_hw = tuple(size.tolist())
    rows, cols = _tables(op, out_hw, grads.shape[1:3], nearest_indices)
    dtype = compute_dtype(grads.dtype)
    n, oh, ow, c = grads.shape
    values = grads.astype(dtype, copy=False).transpose(1, 2, 0, 3).reshape(oh * ow, n, c)
    out = _scatter_add(grads, out_hw, np.repeat(rows, ow), np.tile(cols, oh), values, dtype)
    return [np.ascontiguousarray(out).astype(grads.dtype, copy=False)]


@register_kernel("ResizeBilinearGrad")
def resize_bilinear_grad(op, inputs, ctx):
    """Each gradient pixel spread over its four input pixels with the forward weights:
    ``g * (1 - yl) * (1 - xl)`` to the top left, then top right, bottom left, bottom right
    (products in float32, as TF, then summed in the output type)."""
    grads, original = inputs
    out_hw = original.shape[1:3]
    rows, cols = _tables(op, out_hw, grads.shape[1:3], linear_table)
    work = _work_dtype(grads, dtypes.float32)
    dtype = np.dtype(np.float64) if work == np.float64 else compute_dtype(original.dtype)
    n, oh, ow, c = grads.shape
    g = grads.astype(work, copy=False).transpose(1, 2, 0, 3)[:, :, None]  # [oh, ow, 1, n, c]
    yl, xl = rows.lerp.astype(work), cols.lerp.astype(work)
    wy = np.stack([1 - yl, 1 - yl, yl, yl], axis=1)[:, None, :, None, None]  # [oh, 1, 4, 1, 1]
    wx = np.stack([1 - xl, xl, 1 - xl, xl], axis=1)[None, :, :, None, None]  # [1, ow, 4, 1, 1]
    values = ((g * wy) * wx).astype(dtype, copy=False).reshape(oh * ow * 4, n, c)
    y_at = np.stack([rows.lower, rows.lower, rows.upper, rows.upper], axis=1)  # [oh, 4]
    x_at = np.stack([cols.lower, cols.upper, cols.lower, cols.upper], axis=1)  # [ow, 4]
    out = _scatter_add(grads, out_hw, np.broadcast_to(y_at[:, None], (oh, ow, 4)).ravel(),
                       np.broadcast_to(x_at[None], (oh, ow, 4)).ravel(), values, dtype)
    result = np.ascontiguousarray(out)
    return [result if work == np.float64 else result.astype(original.dtype, copy=False)]


# ----------------------------------------------------------------------------- native


@register_kernel("ResizeNearestNeighbor", backend="native", dtypes=(dtypes.float32,))
def resize_nearest_neighbor_native(op, inputs, ctx):
    images, size = inputs
    rows, cols = _tables(op, images.shape[1:3], size.tolist(), nearest_indices)
    return [c_resize_nearest(images, rows, cols)]


@register_kernel("ResizeBilinear", backend="native", dtypes=(dtypes.float32,))
def resize_bilinear_native(op, inputs, ctx):
    images, size = inputs
    if tuple(size.tolist()) == images.shape[1:3]:  # TF's no-op resize: a copy
        return [images.copy()]
    rows, cols = _tables(op, images.shape[1:3], size.tolist(), linear_table)
    return [c_resize_bilinear(images, rows, cols)]


def _indices(what: str, values: np.ndarray, limit: int):
    """An int64 index table for C, each entry checked to lie in [0, limit)."""
    values = np.ascontiguousarray(values, np.int64)
    if values.size and (values.min() < 0 or values.max() >= limit):
        raise ValueError(f"{what}: index table outside [0, {limit})")
    return values


def _geometry(what: str, images: np.ndarray, oh: int, ow: int) -> tuple[np.ndarray, list[int]]:
    images = as_f32(images)
    if images.ndim != 4:
        raise ValueError(f"{what}: images must be 4-D, got shape {images.shape}")
    return images, checked_sizes(what, n=images.shape[0], h=images.shape[1],
                                 w=images.shape[2], c=images.shape[3], oh=oh, ow=ow)


def c_resize_nearest(images: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """``mg_resize_nearest``: y[b, i, j] = x[b, rows[i], cols[j]] (float32 NHWC)."""
    images, (n, h, w, c, oh, ow) = _geometry("c_resize_nearest", images, len(rows), len(cols))
    rows, cols = _indices("c_resize_nearest rows", rows, h), _indices("c_resize_nearest cols",
                                                                      cols, w)
    y = np.empty((n, oh, ow, c), F32)
    check_code(lib.mg_resize_nearest(n, h, w, c, oh, ow, _i64(rows), _i64(cols), fbuf(images),
                                     fbuf(y), num_threads()), "ResizeNearestNeighbor")
    return y


def c_resize_bilinear(images: np.ndarray, rows: LinearTable, cols: LinearTable) -> np.ndarray:
    """``mg_resize_bilinear`` from the tables: :func:`bilinear` in float32, in C."""
    images, (n, h, w, c, oh, ow) = _geometry("c_resize_bilinear", images, len(rows.lower),
                                             len(cols.lower))
    tables = [_indices("c_resize_bilinear rows", t, h) for t in (rows.lower, rows.upper)]
    tables += [_indices("c_resize_bilinear cols", t, w) for t in (cols.lower, cols.upper)]
    y_lerp, x_lerp = as_f32(rows.lerp), as_f32(cols.lerp)
    if y_lerp.shape != (oh,) or x_lerp.shape != (ow,) or any(
            t.shape != (s,) for t, s in zip(tables, (oh, oh, ow, ow))):
        raise ValueError("c_resize_bilinear: tables do not match the output size")
    y = np.empty((n, oh, ow, c), F32)
    check_code(lib.mg_resize_bilinear(n, h, w, c, oh, ow, *map(_i64, tables), fbuf(y_lerp),
                                      fbuf(x_lerp), fbuf(images), fbuf(y), num_threads()),
               "ResizeBilinear")
    return y


def _i64(array: np.ndarray):
    return ffi.cast("const int64_t *", ffi.from_buffer(array))


def _crop_coordinates(lo, hi, size: int, crop: int) -> np.ndarray:
    """[boxes, crop] sample positions in the image along one axis, in float32 as TF's kernel
    computes them: lo * (size - 1) + i * scale, scale = (hi - lo) * (size - 1) / (crop - 1);
    one sample: the box's centre, 0.5 * (lo + hi) * (size - 1) rounded once."""
    f32 = np.float32
    if crop > 1:
        scale = (hi - lo) * f32(size - 1) / f32(crop - 1)
        return lo[:, None] * f32(size - 1) + np.arange(crop, dtype=f32)[None, :] * scale[:, None]
    centre = 0.5 * (lo.astype(np.float64) + hi.astype(np.float64)) * (size - 1)
    return centre.astype(f32)[:, None]


@register_kernel("CropAndResize")
def crop_and_resize(op, inputs, ctx):
    """Each box's crop_size grid sampled bilinearly (top + (bottom - top) * y_lerp of the
    row lerps) or at the nearest pixel (roundf), extrapolation_value outside the image."""
    image, boxes, box_ind, size = inputs
    f32 = np.float32
    img = image.astype(f32)
    _, height, width, _ = img.shape
    crop_h, crop_w = (int(v) for v in size)
    ys = _crop_coordinates(boxes[:, 0], boxes[:, 2], height, crop_h)  # [n, crop_h]
    xs = _crop_coordinates(boxes[:, 1], boxes[:, 3], width, crop_w)  # [n, crop_w]
    fill = f32(op.attrs["extrapolation_value"])
    inside = ((ys >= 0) & (ys <= height - 1))[:, :, None] & \
        ((xs >= 0) & (xs <= width - 1))[:, None, :]
    b = box_ind[:, None, None]
    if op.attrs["method"] == "nearest":
        yi = np.clip(np.floor(ys + f32(0.5)) * (ys >= 0) + np.ceil(ys - f32(0.5)) * (ys < 0),
                     0, height - 1).astype(np.int64)
        xi = np.clip(np.floor(xs + f32(0.5)) * (xs >= 0) + np.ceil(xs - f32(0.5)) * (xs < 0),
                     0, width - 1).astype(np.int64)
        samples = img[b, yi[:, :, None], xi[:, None, :]]
    else:
        top, left = np.floor(ys), np.floor(xs)
        y_lerp, x_lerp = (ys - top)[:, :, None, None], (xs - left)[:, None, :, None]
        t = np.clip(top, 0, height - 1).astype(np.int64)[:, :, None]
        bo = np.clip(np.ceil(ys), 0, height - 1).astype(np.int64)[:, :, None]
        le = np.clip(left, 0, width - 1).astype(np.int64)[:, None, :]
        ri = np.clip(np.ceil(xs), 0, width - 1).astype(np.int64)[:, None, :]
        upper = img[b, t, le] + (img[b, t, ri] - img[b, t, le]) * x_lerp
        lower = img[b, bo, le] + (img[b, bo, ri] - img[b, bo, le]) * x_lerp
        samples = upper + (lower - upper) * y_lerp
    return [np.where(inside[..., None], samples, fill).astype(f32)]


CUBIC_TABLE_SIZE = 1 << 10


@functools.lru_cache(maxsize=2)
def _cubic_table(a: float) -> np.ndarray:
    """TF's coefficient table: [i, 0] the weight of a tap at distance i / 1024 (|x| <= 1),
    [i, 1] at distance 1 + i / 1024, computed in double and stored as float32."""
    x = np.arange(CUBIC_TABLE_SIZE + 1, dtype=np.float64) / CUBIC_TABLE_SIZE
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far_x = x + 1.0
    far = ((a * far_x - 5 * a) * far_x + 8 * a) * far_x - 4 * a
    return np.stack([near, far], axis=1).astype(F32)


def cubic_weights(out_size: int, in_size: int, align_corners: bool, half_pixel_centers: bool
                  ) -> tuple[np.ndarray, np.ndarray]:
    """TF's GetWeightsAndIndices for one axis: ([out, 4] input indices, [out, 4] float32
    weights) of the taps at floor(position) - 1 .. + 2."""
    scale = resize_scale(in_size, out_size, align_corners)
    i = np.arange(out_size, dtype=F32)
    position = (i + F32(0.5)) * scale - F32(0.5) if half_pixel_centers else i * scale
    base = np.floor(position).astype(np.int64)
    delta = (position - base.astype(F32)).astype(F32)
    offset = np.rint(delta * F32(CUBIC_TABLE_SIZE)).astype(np.int64)  # lrintf: half to even
    table = _cubic_table(-0.5 if half_pixel_centers else -0.75)
    weights = np.stack([table[offset, 1], table[offset, 0], table[CUBIC_TABLE_SIZE - offset, 0],
                        table[CUBIC_TABLE_SIZE - offset, 1]], axis=1)
    taps = base[:, None] + np.arange(-1, 3)[None, :]
    indices = np.clip(taps, 0, in_size - 1)
    if half_pixel_centers:  # taps off the image weigh 0, the others renormalized
        weights = np.where(indices == taps, weights, F32(0))
        total = ((weights[:, 0] + weights[:, 1]) + weights[:, 2]) + weights[:, 3]
        usable = np.abs(total) >= F32(1000) * np.finfo(F32).tiny
        weights = np.where(usable[:, None], weights * (F32(1) / np.where(usable, total, 1))
                           [:, None], weights)
    return indices, weights.astype(F32)


def _weighted_four(values, weights) -> np.ndarray:
    """v0 * w0 + v1 * w1 + v2 * w2 + v3 * w3 in float32, left to right (TF's Interpolate1D)."""
    total = values[0] * weights[0] + values[1] * weights[1]
    return (total + values[2] * weights[2]) + values[3] * weights[3]


@register_kernel("ResizeBicubic")
def resize_bicubic(op, inputs, ctx):
    """Each output pixel: the 4 x 4 taps interpolated down the columns first (the row
    weights), then across (the column weights), in float32 as TF's kernel does."""
    images, size = inputs
    x = images.astype(F32)
    (out_h, out_w), (in_h, in_w) = (int(v) for v in size), x.shape[1:3]
    rows, row_w = cubic_weights(out_h, in_h, *_mode(op))
    cols, col_w = cubic_weights(out_w, in_w, *_mode(op))
    # [n, out_h, in_w, c]: each output row from its 4 input rows
    columns = _weighted_four([x[:, rows[:, t]] for t in range(4)],
                             [row_w[None, :, t, None, None] for t in range(4)])
    out = _weighted_four([columns[:, :, cols[:, t]] for t in range(4)],
                         [col_w[None, None, :, t, None] for t in range(4)])
    return [np.ascontiguousarray(out, dtype=F32)]


class AreaTable(NamedTuple):
    """Per output index: the first input index it covers, how many it covers (``taps``),
    and the float32 weights of the first and the last of them (the inner ones weigh 1)."""

    start: np.ndarray
    taps: np.ndarray
    first: np.ndarray
    last: np.ndarray


def area_table(out_size: int, in_size: int, align_corners: bool) -> AreaTable:
    """Output ``o`` covers input ``[o * scale, (o + 1) * scale)``; a pixel ``v`` partly
    inside weighs its part: ``v + 1 - in`` at the start, ``in1 - v`` at the end, ``scale``
    when the area lies within it (TF's ``CachedInterpolation``, in float32)."""
    scale = resize_scale(in_size, out_size, align_corners)
    o = np.arange(out_size, dtype=F32)
    lo, hi = o * scale, (o + F32(1)) * scale
    start = np.floor(lo).astype(np.int64)
    end = np.ceil(hi).astype(np.int64)

    def weight(v: np.ndarray) -> np.ndarray:
        v1 = v.astype(F32) + F32(1)
        return np.where(v.astype(F32) < lo, np.where(v1 > hi, scale, v1 - lo),
                        np.where(v1 > hi, hi - v.astype(F32), F32(1))).astype(F32)

    return AreaTable(start, end - start, weight(start), weight(end - 1))


@register_kernel("ResizeArea")
def resize_area(op, inputs, ctx):
    """TF's float32 steps: each input row covered, its covered pixels summed in order (the
    first and the last weighed, ``sum_y``), the rows' sums weighed and summed in order, and
    the total times ``1 / (height_scale * width_scale)``. Indices past the image (with
    ``align_corners``) read its edge."""
    images, size = inputs
    x = images.astype(F32)
    (out_h, out_w), (in_h, in_w) = (int(v) for v in size), x.shape[1:3]
    align = op.attrs["align_corners"]
    rows, cols = area_table(out_h, in_h, align), area_table(out_w, in_w, align)
    with np.errstate(divide="ignore"):  # a 1-pixel side with align_corners: scale 0, inf
        scale = F32(np.float64(1.0) / np.float64(resize_scale(in_h, out_h, align)
                                                 * resize_scale(in_w, out_w, align)))
    # each input row's sums over each output column's pixels: [n, in_h, out_w, c]
    pixel = np.clip(cols.start, 0, in_w - 1)
    sums = x[:, :, pixel] * cols.first[None, None, :, None]
    for t in range(1, int(cols.taps.max(initial=1))):
        pixel = np.clip(cols.start + t, 0, in_w - 1)
        weight = np.where(t == cols.taps - 1, cols.last, F32(1))[None, None, :, None]
        value = x[:, :, pixel] * weight if (t == cols.taps - 1).any() else x[:, :, pixel]
        sums = np.where((t < cols.taps)[None, None, :, None], sums + value, sums)
    out = np.zeros((x.shape[0], out_h, out_w, x.shape[3]), F32)
    for t in range(int(rows.taps.max(initial=1))):
        row = np.clip(rows.start + t, 0, in_h - 1)
        weight = np.where(t == 0, rows.first, np.where(t == rows.taps - 1, rows.last,
                                                        F32(1)))[None, :, None, None]
        out = np.where((t < rows.taps)[None, :, None, None], out + sums[:, row] * weight, out)
    with np.errstate(invalid="ignore"):  # 0 * inf: NaN, as TF gives there
        return [np.ascontiguousarray(out * scale, dtype=F32)]


@register_kernel("RGBToHSV")
def rgb_to_hsv(op, inputs, ctx):
    """TF's colorspace_op.h in T's arithmetic (half types in float32): value = max, range =
    max - min, saturation = range / value (0 at black), hue from the largest channel with
    norm = (1 / range) * (1 / 6), in [0, 1)."""
    x = inputs[0]
    work = compute_dtype(x.dtype)
    c = x.astype(work)
    r, g, b = c[..., 0], c[..., 1], c[..., 2]
    t = work.type
    value = np.maximum(np.maximum(r, g), b)
    spread = value - np.minimum(np.minimum(r, g), b)
    with np.errstate(all="ignore"):
        saturation = np.where(value > 0, spread / value, t(0))
        norm = (t(1) / spread) * (t(1) / t(6))
        hue = np.where(r == value, norm * (g - b),
                       np.where(g == value, norm * (b - r) + t(2) / t(6),
                                norm * (r - g) + t(4) / t(6)))
    hue = np.where(spread > 0, hue, t(0))
    hue = np.where(hue < 0, hue + t(1), hue)
    return [np.stack([hue, saturation, value], axis=-1).astype(x.dtype)]


@register_kernel("HSVToRGB")
def hsv_to_rgb(op, inputs, ctx):
    """TF's colorspace_op.h: each channel (1 - s + s * clamp(...(6 h)...)) * v."""
    x = inputs[0]
    work = compute_dtype(x.dtype)
    c = x.astype(work)
    h, s, v = c[..., 0], c[..., 1], c[..., 2]
    t = work.type
    dh = h * t(6)
    dr = np.clip(np.abs(dh - t(3)) - t(1), t(0), t(1))
    dg = np.clip(-np.abs(dh - t(2)) + t(2), t(0), t(1))
    db = np.clip(-np.abs(dh - t(4)) + t(2), t(0), t(1))
    one_s = -s + t(1)
    rgb = [(one_s + s * d) * v for d in (dr, dg, db)]
    return [np.stack(rgb, axis=-1).astype(x.dtype)]


@register_kernel("AdjustContrastv2")
def adjust_contrast(op, inputs, ctx):
    """(x - mean) * factor + mean, the mean of each channel over height and width, in
    float32 (half images too); the mean summed in float64 and rounded once."""
    x, factor = inputs
    work = x.astype(F32)
    mean = work.astype(np.float64).mean(axis=(-3, -2), keepdims=True).astype(F32)
    return [((work - mean) * F32(factor) + mean).astype(x.dtype)]
