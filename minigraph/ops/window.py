"""Sliding-window geometry shared by the convolution and pooling families: output sizes and
padding (TF's ``GetWindowedOutputSizeVerbose``), the window attrs' checks, NHWC/NCHW axis
bookkeeping and the shape-function helpers both families use.

The shape functions (``ops.convolution_ops``, ``ops.pooling_ops``) and the kernels
(``backends.convolution_kernels``, ``backends.pooling_kernels``) use the same functions, so
a problem is reported with the same message at construction (when the static shapes show
it) and at run time (when only the data does).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from minigraph.framework.graph import Operation
from minigraph.framework.op_def import InferenceContext
from minigraph.framework.tensor_shape import dims_text

FORMATS = ("NHWC", "NCHW")
PADDINGS = ("SAME", "VALID")
PADDINGS_EXPLICIT = ("SAME", "VALID", "EXPLICIT")

Fail = Callable[[str], Exception]
Dims = Sequence[int | None]

# ----------------------------------------------------------------------------- geometry


def spatial_axes(data_format: str) -> tuple[int, int, int]:
    """(height axis, width axis, channel axis) of a 4-D tensor in ``data_format``."""
    return (1, 2, 3) if data_format == "NHWC" else (2, 3, 1)


def to_nhwc(dims: Dims, data_format: str) -> tuple:
    """A 4-entry list in ``data_format`` order (a shape, strides...) reordered as NHWC."""
    h, w, c = spatial_axes(data_format)
    return (dims[0], dims[h], dims[w], dims[c])


def from_nhwc(dims: Dims, data_format: str) -> tuple:
    """The inverse of :func:`to_nhwc`."""
    n, h, w, c = dims
    return (n, h, w, c) if data_format == "NHWC" else (n, c, h, w)


def _trunc_div(a: int, b: int) -> int:
    """C++ integer division (truncates toward zero), as TF's size formula uses."""
    q = abs(a) // b
    return q if a >= 0 else -q


def windowed_output_size(in_size: int | None, k: int | None, stride: int, dilation: int,
                         padding: str, explicit: tuple[int, int], fail: Fail, what: str
                         ) -> tuple[int | None, int, int]:
    """TF's GetWindowedOutputSizeVerbose: (output size, pad before, pad after) of one dim.

    ``k`` is the window (filter) size, ``dilation`` spreads it to ``(k - 1) * dilation + 1``.
    VALID: ``(in - k_eff + stride) / stride``; SAME: ``ceil(in / stride)`` with
    ``max(0, (out - 1) * stride + k_eff - in)`` padding, the odd element after;
    EXPLICIT: VALID on the input padded by ``explicit``. Unknown sizes give None.
    """
    if in_size is None or k is None:
        if padding == "EXPLICIT":
            return None, explicit[0], explicit[1]
        return None, 0, 0
    k_eff = (k - 1) * dilation + 1
    before, after = 0, 0
    if padding == "VALID":
        out = _trunc_div(in_size - k_eff + stride, stride)
    elif padding == "EXPLICIT":
        before, after = explicit
        out = _trunc_div(in_size + before + after - k_eff + stride, stride)
    else:
        out = (in_size + stride - 1) // stride
        needed = max(0, (out - 1) * stride + k_eff - in_size)
        before, after = needed // 2, needed - needed // 2
    if out < 0:
        raise fail(f"Computed output size would be negative: {out} [input_size: {in_size}, "
                   f"effective_filter_size: {k_eff}, stride: {stride}] (the {what})")
    return out, before, after


@dataclass(frozen=True)
class Window:
    """A 2-D sliding window in NHWC terms: sizes, strides, dilations, pads, output size."""

    ksize: tuple[int | None, int | None]
    strides: tuple[int, int]
    dilations: tuple[int, int]
    pads: tuple[tuple[int, int], tuple[int, int]]
    out: tuple[int | None, int | None]


def _int_list(value: Sequence[int], attr: str, length: int, fail: Fail) -> list[int]:
    if len(value) != length:
        raise fail(f"attr '{attr}' must specify {length} dimensions, got {len(value)}: "
                   f"{list(value)}")
    return list(value)


def window_attrs(attrs: dict, fail: Fail, *, window: str | None = None
                 ) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int],
                            tuple[tuple[int, int], tuple[int, int]]]:
    """Check a conv/pool node's attrs; return (ksize, strides, dilations, explicit pads) of
    the spatial dims (H, W). ``window`` is ``"ksize"`` for pools, None for convolutions
    (whose window is the filter; ksize comes back as (None, None))."""
    fmt = attrs["data_format"]
    what = "pooling" if window else "convolution"
    strides = to_nhwc(_int_list(attrs["strides"], "strides", 4, fail), fmt)
    if strides[0] != 1 or strides[3] != 1:
        raise fail(f"attr 'strides' {list(attrs['strides'])}: {what} strides in the batch and "
                   f"depth dimensions must be 1 (data_format {fmt})")
    if min(strides) < 1:
        raise fail(f"attr 'strides' must be >= 1, got {list(attrs['strides'])}")
    if window:
        ksize = to_nhwc(_int_list(attrs[window], window, 4, fail), fmt)
        if ksize[0] != 1 or ksize[3] != 1:
            raise fail(f"attr '{window}' {list(attrs[window])}: pooling is only supported "
                       f"over the spatial dimensions; the batch and depth window sizes must "
                       f"be 1 (data_format {fmt})")
        if min(ksize) < 1:
            raise fail(f"attr '{window}' must be >= 1, got {list(attrs[window])}")
        dilations = (1, 1, 1, 1)
    else:
        ksize = (1, None, None, 1)
        dilations = to_nhwc(_int_list(attrs["dilations"], "dilations", 4, fail), fmt)
        if dilations[0] != 1 or dilations[3] != 1:
            raise fail(f"attr 'dilations' {list(attrs['dilations'])}: dilations in the batch "
                       f"and depth dimensions must be 1 (data_format {fmt})")
        if min(dilations) < 1:
            raise fail(f"attr 'dilations' must be >= 1, got {list(attrs['dilations'])}")
    explicit = list(attrs.get("explicit_paddings", []))
    if attrs["padding"] == "EXPLICIT":
        if len(explicit) != 8:
            raise fail(f"attr 'explicit_paddings' must contain 8 values (a before/after pair "
                       f"per dimension of {fmt}) when padding is EXPLICIT, got {len(explicit)}: "
                       f"{explicit}")
        if min(explicit) < 0:
            raise fail(f"attr 'explicit_paddings' must be non-negative, got {explicit}")
        pairs = to_nhwc([tuple(explicit[2 * i:2 * i + 2]) for i in range(4)], fmt)
        if pairs[0] != (0, 0) or pairs[3] != (0, 0):
            raise fail(f"attr 'explicit_paddings' {explicit}: padding the batch or depth "
                       f"dimension is not supported (data_format {fmt})")
        pads = (pairs[1], pairs[2])
        if window:
            for (before, after), k, side in ((pairs[1], ksize[1], ("top", "bottom")),
                                             (pairs[2], ksize[2], ("left", "right"))):
                for amount, name in zip((before, after), side):
                    if amount >= k:
                        raise fail(f"attr 'explicit_paddings': {name} padding {amount} must "
                                   f"be smaller than the window size {k}")
    else:
        if explicit:
            raise fail(f"attr 'explicit_paddings' must be empty unless padding is EXPLICIT, "
                       f"got {explicit} with padding {attrs['padding']}")
        pads = ((0, 0), (0, 0))
    return ((ksize[1], ksize[2]), (strides[1], strides[2]), (dilations[1], dilations[2]),
            pads)


def make_window(attrs: dict, fail: Fail, in_hw: Dims, k_hw: Dims | None = None,
                input_name: str = "input") -> Window:
    """The :class:`Window` of a node over an input of spatial size ``in_hw``; ``k_hw`` is
    the filter's (H, W) for convolutions (pools take theirs from ``ksize``); errors name
    the input that has that size, ``input_name``."""
    ksize, strides, dilations, explicit = window_attrs(
        attrs, fail, window=None if k_hw is not None else "ksize")
    if k_hw is not None:
        ksize = (k_hw[0], k_hw[1])
    sizes = [windowed_output_size(in_hw[i], ksize[i], strides[i], dilations[i],
                                  attrs["padding"], explicit[i], fail,
                                  f"{('height', 'width')[i]} of input '{input_name}'")
             for i in range(2)]
    return Window(ksize, strides, dilations, ((sizes[0][1], sizes[0][2]),
                                               (sizes[1][1], sizes[1][2])),
                  (sizes[0][0], sizes[1][0]))


def mismatch(a: int | None, b: int | None) -> bool:
    return a is not None and b is not None and a != b


def merge_dims(a: int | None, b: int | None) -> int | None:
    return a if a is not None else b


def conv_geometry(attrs: dict, fail: Fail, input_shape: Dims, filter_shape: Dims,
                  input_name: str = "input") -> Window:
    """Check a convolution's input (data_format order; the shape of input ``input_name``)
    against its HWIO filter and return its window. Works with unknown (None) dims; used at
    construction and at run time."""
    fmt = attrs["data_format"]
    n, h, w, c = to_nhwc(input_shape, fmt)
    kh, kw, ci, _ = filter_shape
    if any(d == 0 for d in filter_shape):
        raise fail(f"input 'filter' must not have zero elements (all dimensions must be "
                   f"non-zero), got shape {dims_text(filter_shape)}")
    if mismatch(c, ci):
        raise fail(f"input depth must equal the filter's input depth: input 'input' has "
                   f"{c} channels (shape {dims_text(input_shape)}, data_format {fmt}) but "
                   f"input 'filter' has in_channels {ci} (dimension 2 of HWIO shape "
                   f"{dims_text(filter_shape)}); grouped convolution is not supported")
    return make_window(attrs, fail, (h, w), (kh, kw), input_name)


def check_out_backprop(attrs: dict, fail: Fail, input_shape: Dims, filter_shape: Dims,
                       out_backprop_shape: Dims, window: Window) -> tuple:
    """Check out_backprop (data_format order) against the forward output the input and
    filter give; return the merged output shape in data_format order."""
    fmt = attrs["data_format"]
    n, _, _, _ = to_nhwc(input_shape, fmt)
    dn, dh, dw, dc = to_nhwc(out_backprop_shape, fmt)
    expected = (n, window.out[0], window.out[1], filter_shape[3])
    why = {"batch": "the input's batch size",
           "depth": "the filter's out_channels (dimension 3 of HWIO)"}
    for axis, name in ((1, "height"), (2, "width")):
        why[name] = (f"the {name} the forward convolution gives (stride "
                     f"{window.strides[axis - 1]}, dilation {window.dilations[axis - 1]}, "
                     f"padding {attrs['padding']})")
    for name, want, got in zip(("batch", "height", "width", "depth"), expected,
                               (dn, dh, dw, dc)):
        if mismatch(want, got):
            raise fail(f"input 'out_backprop' has {name} {got} (shape "
                       f"{dims_text(out_backprop_shape)}, data_format {fmt}) but must equal "
                       f"{why[name]}: {want}")
    return from_nhwc([merge_dims(a, b) for a, b in zip(expected, (dn, dh, dw, dc))], fmt)


def sizes_to_shape(sizes: Sequence[int], name: str, fail: Fail, data_format: str,
                   batch: int | None, depth: int | None) -> tuple:
    """A 4-element shape vector (data_format order) or a 2-element [height, width] one,
    whose batch and depth come from the other inputs (TF accepts both)."""
    sizes = list(sizes)
    if len(sizes) == 4:
        if any(s < 0 for s in sizes):
            raise fail(f"input '{name}' must be non-negative, got {sizes}")
        return tuple(sizes)
    if len(sizes) == 2:
        if any(s < 0 for s in sizes):
            raise fail(f"input '{name}' must be non-negative, got {sizes}")
        return from_nhwc((batch, sizes[0], sizes[1], depth), data_format)
    raise fail(f"input '{name}' must have 4 elements (a {data_format} shape) or 2 "
               f"(height, width), got {len(sizes)}: {sizes}")


# ----------------------------------------------------------------------------- shape helpers


def rank4_input(ctx: InferenceContext, name: str) -> tuple:
    layout = "HWIO" if name == "filter" else f"data_format {ctx.attrs['data_format']}"
    return tuple(ctx.with_rank(name, 4, f" ({layout})").dims)


def vector_input(ctx: InferenceContext, name: str, lengths: Sequence[int]) -> list | None:
    """The constant value of a 1-D int input (None if unknown), its length checked."""
    shape = ctx.with_rank(name, 1)
    if shape[0] is not None and shape[0] not in lengths:
        raise ctx.error(f"input '{name}' must have "
                        f"{' or '.join(str(n) for n in lengths)} elements, got {shape[0]}")
    value = ctx.constant_value(name)
    return None if value is None else list(value)


def copy_attrs(op: Operation, names: Sequence[str]) -> dict:
    """The attrs ``names`` of ``op`` it has (a gradient builds its op with the same
    window)."""
    return {k: op.attrs[k] for k in names if k in op.attrs}
