"""Sliding-window geometry shared by the convolution, pooling and volumetric families:
output sizes and padding (TF's ``GetWindowedOutputSizeVerbose``), the window attrs' checks,
channels-first/last axis bookkeeping and the shape-function helpers the families use.

Everything works for 2 spatial dimensions (4-D tensors: NHWC/NCHW, HWIO filters) and 3
(5-D tensors: NDHWC/NCDHW, DHWIO filters): the rank comes from ``data_format``. "NHWC" in a
name means channels-last order (NDHWC for 5-D tensors).

The shape functions (``ops.convolution_ops``, ``ops.pooling_ops``, ``ops.volumetric_ops``)
and the kernels use the same functions, so a problem is reported with the same message at
construction (when the static shapes show it) and at run time (when only the data does).
Messages lead with TensorFlow's words where TF has some for the problem.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from minigraph.framework.graph import Operation
from minigraph.framework.op_def import InferenceContext
from minigraph.framework.tensor_shape import dims_text

FORMATS = ("NHWC", "NCHW")
FORMATS_3D = ("NDHWC", "NCDHW")
PADDINGS = ("SAME", "VALID")
PADDINGS_EXPLICIT = ("SAME", "VALID", "EXPLICIT")

Fail = Callable[[str], Exception]
Dims = Sequence[int | None]
T = TypeVar("T")

# ----------------------------------------------------------------------------- geometry


# The spatial dimensions' names (messages), by count, and the sides of each (explicit pads).
SPATIAL_NAMES = {2: ("height", "width"), 3: ("planes", "height", "width")}
_SIDES = {"planes": ("front", "back"), "height": ("top", "bottom"), "width": ("left", "right")}
# The lengths TF accepts for a convolution's input_sizes, by rank: the shape, or (4-D only)
# its spatial sizes.
SIZES_LENGTHS = {4: (4, 2), 5: (5,)}


def spatial_axes(data_format: str) -> tuple[int, ...]:
    """(spatial axes..., channel axis) of a tensor in ``data_format``: (1, 2, 3) for NHWC,
    (2, 3, 1) for NCHW, (1, 2, 3, 4) for NDHWC, (2, 3, 4, 1) for NCDHW."""
    rank = len(data_format)
    if data_format.endswith("C"):
        return (*range(1, rank - 1), rank - 1)
    return (*range(2, rank), 1)


def to_nhwc(dims: Dims, data_format: str) -> tuple:
    """A list in ``data_format`` order (a shape, strides...) reordered channels-last."""
    *spatial, c = spatial_axes(data_format)
    return (dims[0], *(dims[a] for a in spatial), dims[c])


def from_nhwc(dims: Dims, data_format: str) -> tuple:
    """The inverse of :func:`to_nhwc`."""
    n, *spatial, c = dims
    return (n, *spatial, c) if data_format.endswith("C") else (n, c, *spatial)


def filter_layout(data_format: str) -> str:
    """The filter layout of a convolution over ``data_format`` tensors: HWIO or DHWIO."""
    return "HWIO" if len(data_format) == 4 else "DHWIO"


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
        padded = in_size + before + after
        raise fail(f"Negative dimension size caused by subtracting {k_eff} from {padded}: "
                   f"Computed output size would be negative: {out} [input_size: {in_size}, "
                   f"effective_filter_size: {k_eff}, stride: {stride}] (the {what})")
    return out, before, after


@dataclass(frozen=True)
class Window:
    """A sliding window over the spatial dims (in channels-last order: (H, W) or (D, H, W)):
    sizes, strides, dilations, (before, after) pads and output sizes, one entry per dim."""

    ksize: tuple[int | None, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads: tuple[tuple[int, int], ...]
    out: tuple[int | None, ...]


def _int_list(value: Sequence[int], attr: str, length: int, fail: Fail) -> list[int]:
    if len(value) != length:
        raise fail(f"attr '{attr}' must specify {length} dimensions, got {len(value)}: "
                   f"{list(value)}")
    return list(value)


def _pool_unsupported(values: Sequence[int]) -> str:
    """TF's words for a pool window or stride (channels-last) over the batch or depth."""
    where = "batch" if values[0] != 1 else "depth"
    return f"Pooling is not yet supported on the {where} dimension"


def window_attrs(attrs: dict, fail: Fail, *, window: str | None = None
                 ) -> tuple[tuple, tuple[int, ...], tuple[int, ...], tuple[tuple[int, int], ...]]:
    """Check a conv/pool node's attrs; return (ksize, strides, dilations, explicit pads) of
    the spatial dims. ``window`` is ``"ksize"`` for pools, None for convolutions (whose
    window is the filter; ksize comes back as Nones)."""
    fmt = attrs["data_format"]
    rank = len(fmt)
    what = "pooling" if window else "convolution"
    strides = to_nhwc(_int_list(attrs["strides"], "strides", rank, fail), fmt)
    if strides[0] != 1 or strides[-1] != 1:
        words = (_pool_unsupported(strides) if window else "Current implementation does not "
                 "yet support strides in the batch and depth dimensions")
        raise fail(f"{words}: attr 'strides' {list(attrs['strides'])}: {what} strides in the "
                   f"batch and depth dimensions must be 1 (data_format {fmt})")
    if min(strides) < 1:
        raise fail(f"Stride must be > 0, but got {min(strides)}: attr 'strides' must be >= 1, "
                   f"got {list(attrs['strides'])}")
    if window:
        ksize = to_nhwc(_int_list(attrs[window], window, rank, fail), fmt)
        if ksize[0] != 1 or ksize[-1] != 1:
            raise fail(f"{_pool_unsupported(ksize)}: attr '{window}' {list(attrs[window])}: "
                       f"pooling is only supported over the spatial dimensions; the batch and "
                       f"depth window sizes must be 1 (data_format {fmt})")
        if min(ksize) < 1:
            raise fail(f"Sliding window ksize must be positive. The specified or inferred "
                       f"ksize is: {','.join(str(k) for k in attrs[window])}: attr "
                       f"'{window}' must be >= 1, got {list(attrs[window])}")
        dilations = (1,) * rank
    else:
        ksize = (1, *(None,) * (rank - 2), 1)
        dilations = to_nhwc(_int_list(attrs["dilations"], "dilations", rank, fail), fmt)
        if dilations[0] != 1 or dilations[-1] != 1:
            raise fail(f"Current implementation does not yet support dilation rates in the "
                       f"batch and depth dimensions: attr 'dilations' "
                       f"{list(attrs['dilations'])}: dilations in the batch and depth "
                       f"dimensions must be 1 (data_format {fmt})")
        if min(dilations) < 1:
            raise fail(f"Dilation rate must be >= 1, but got {min(dilations)}: attr "
                       f"'dilations' must be >= 1, got {list(attrs['dilations'])}")
    pads = _explicit_pads(attrs, fail, ksize if window else None)
    return ksize[1:-1], strides[1:-1], dilations[1:-1], pads


def _explicit_pads(attrs: dict, fail: Fail, ksize: tuple | None
                   ) -> tuple[tuple[int, int], ...]:
    """The (before, after) pads of the spatial dims: ``explicit_paddings`` checked when
    padding is EXPLICIT (a pool's, whose channels-last window is ``ksize``, smaller than
    it), zeros otherwise."""
    fmt = attrs["data_format"]
    rank = len(fmt)
    explicit = list(attrs.get("explicit_paddings", []))
    if attrs["padding"] != "EXPLICIT":
        if explicit:
            raise fail(f"attr 'explicit_paddings' must be empty unless padding is EXPLICIT, "
                       f"got {explicit} with padding {attrs['padding']}")
        return ((0, 0),) * (rank - 2)
    if len(explicit) != 2 * rank:
        raise fail(f"attr 'explicit_paddings' must contain {2 * rank} values (a before/after "
                   f"pair per dimension of {fmt}) when padding is EXPLICIT, got "
                   f"{len(explicit)}: {explicit}")
    if min(explicit) < 0:
        raise fail(f"attr 'explicit_paddings' must be non-negative, got {explicit}")
    pairs = to_nhwc([tuple(explicit[2 * i:2 * i + 2]) for i in range(rank)], fmt)
    if pairs[0] != (0, 0) or pairs[-1] != (0, 0):
        raise fail(f"attr 'explicit_paddings' {explicit}: padding the batch or depth "
                   f"dimension is not supported (data_format {fmt})")
    pads = tuple(pairs[1:-1])
    if ksize is not None:
        for pair, k, name in zip(pads, ksize[1:-1], SPATIAL_NAMES[rank - 2]):
            for amount, side in zip(pair, _SIDES[name]):
                if amount >= k:
                    raise fail(f"attr 'explicit_paddings': {side} padding {amount} must be "
                               f"smaller than the window size {k}")
    return pads


def make_window(attrs: dict, fail: Fail, in_sizes: Dims, k_sizes: Dims | None = None,
                input_name: str = "input") -> Window:
    """The :class:`Window` of a node over an input of spatial sizes ``in_sizes``;
    ``k_sizes`` is the filter's spatial sizes for convolutions (pools take theirs from
    ``ksize``); errors name the input that has that size, ``input_name``."""
    ksize, strides, dilations, explicit = window_attrs(
        attrs, fail, window=None if k_sizes is not None else "ksize")
    if k_sizes is not None:
        ksize = tuple(k_sizes)
    names = SPATIAL_NAMES[len(in_sizes)]
    sizes = [windowed_output_size(in_sizes[i], ksize[i], strides[i], dilations[i],
                                  attrs["padding"], explicit[i], fail,
                                  f"{names[i]} of input '{input_name}'")
             for i in range(len(in_sizes))]
    return Window(tuple(ksize), strides, dilations, tuple((s[1], s[2]) for s in sizes),
                  tuple(s[0] for s in sizes))


def mismatch(a: int | None, b: int | None) -> bool:
    return a is not None and b is not None and a != b


def merge_dims(a: int | None, b: int | None) -> int | None:
    return a if a is not None else b


def conv_groups(attrs: dict, fail: Fail, input_shape: Dims, filter_shape: Dims,
                input_name: str = "input") -> int | None:
    """The number of groups of a convolution: the input's channels over the filter's
    in_channels (1 for an ordinary convolution; in_channels for a depthwise one through an
    HWIO filter). Output channel o reads input channels ``(o // (out_channels / groups)) *
    in_channels`` onwards, so the input's channels must be a multiple of the filter's and the
    output's a multiple of the groups (TF's shape function's words). None when unknown."""
    fmt = attrs["data_format"]
    c = to_nhwc(input_shape, fmt)[-1]
    ci, co = filter_shape[-2], filter_shape[-1]
    if c is None or ci is None:
        return None
    layout = filter_layout(fmt)
    if c % ci:
        raise fail(f"Depth of input ({c}) is not a multiple of input depth of filter ({ci}): "
                   f"input '{input_name}' has {c} channels (shape {dims_text(input_shape)}, "
                   f"data_format {fmt}) but input 'filter' has in_channels {ci} (dimension "
                   f"{len(filter_shape) - 2} of {layout} shape {dims_text(filter_shape)}); a "
                   f"grouped convolution needs a multiple")
    groups = c // ci
    if groups == 0:
        raise fail(f"Number of groups must not be 0: input '{input_name}' has 0 channels (shape "
                   f"{dims_text(input_shape)}, data_format {fmt}) but input 'filter' has "
                   f"in_channels {ci} (dimension {len(filter_shape) - 2} of {layout} shape "
                   f"{dims_text(filter_shape)})")
    if co is not None and co % groups:
        raise fail(f"Depth of output ({co}) is not a multiple of the number of groups "
                   f"({groups}): input 'filter' has out_channels {co} (dimension "
                   f"{len(filter_shape) - 1} of {layout} shape {dims_text(filter_shape)}), but "
                   f"input '{input_name}''s {c} channels make {groups} groups of the filter's "
                   f"{ci} in_channels")
    return groups


_GEOMETRY_ATTRS = ("data_format", "padding", "strides", "dilations", "explicit_paddings",
                   "ksize")
_MAX_CACHED = 4096


def _typed(value: object) -> object:
    """An attr value or argument as part of a cache key: lists as tuples, with the type of
    each value (1.0 is not 1: a window of float sizes must stay what it is)."""
    if type(value) is list or type(value) is tuple:
        return tuple(value), tuple(map(type, value))
    return type(value), value


def cached_geometry(function: Callable[..., T]) -> Callable[..., T]:
    """``function(attrs, fail, *args)`` (a convolution's or pool's checks and window; args:
    shapes and the input's name, positional) memoized on the args and the values of the
    window attrs: kernels call it at every step with the same few signatures, and what it
    returns is immutable (a frozen :class:`Window`, tuples). A failing check raises through
    ``fail`` at every call (errors are not cached); unhashable values are not cached."""
    cache: dict[tuple, T] = {}

    @functools.wraps(function)
    def cached(attrs: dict, fail: Fail, *args) -> T:
        try:
            key = (*map(_typed, args), *map(_typed, map(attrs.get, _GEOMETRY_ATTRS)))
            found = cache.get(key)
        except TypeError:  # an unhashable value: checked (and rejected) uncached
            return function(attrs, fail, *args)
        if found is None:
            found = function(attrs, fail, *args)
            if len(cache) >= _MAX_CACHED:
                cache.clear()
            cache[key] = found
        return found

    return cached


@cached_geometry
def conv_geometry(attrs: dict, fail: Fail, input_shape: Dims, filter_shape: Dims,
                  input_name: str = "input") -> Window:
    """Check a convolution's input (data_format order; the shape of input ``input_name``)
    against its HWIO (DHWIO) filter, grouped or not (``conv_groups``), and return its
    window. Works with unknown (None) dims; used at construction and at run time."""
    fmt = attrs["data_format"]
    _, *spatial, _ = to_nhwc(input_shape, fmt)
    *k_sizes, _, _ = filter_shape
    if any(d == 0 for d in filter_shape):
        raise fail(f"filter must not have zero elements (i.e. all dimensions must be "
                   f"non-zero): input 'filter' has shape {dims_text(filter_shape)}")
    conv_groups(attrs, fail, input_shape, filter_shape, input_name)
    return make_window(attrs, fail, spatial, k_sizes, input_name)


def _out_backprop_words(axis: int, got: int | None, want: int | None, input_shape: tuple,
                        filter_shape: Dims, window: Window, attrs: dict
                        ) -> tuple[str, str, str]:
    """(TF's words, dimension name, why) for out_backprop's channels-last dim ``axis``
    holding ``got`` where the forward convolution gives ``want``."""
    fmt = attrs["data_format"]
    if axis == 0:
        return (f"input and out_backprop must have the same batch size. Input batch: {want}, "
                f"outbackprop batch: {got}, batch_dim: 0", "batch", "the input's batch size")
    if axis == len(input_shape) - 1:
        return (f"out_backprop and filter_sizes must have the same number of channels. Got "
                f"{got} for out_backprop and {want} for filter_sizes", "depth",
                f"the filter's out_channels (dimension {len(filter_shape) - 1} of "
                f"{filter_layout(fmt)})")
    d = axis - 1
    name = SPATIAL_NAMES[len(window.out)][d]
    stride, dilation = window.strides[d], window.dilations[d]
    return (f"Size of out_backprop doesn't match computed: actual = {got}, computed = "
            f"{want} spatial_dim: {spatial_axes(fmt)[d]} input: {input_shape[axis]} filter: "
            f"{filter_shape[d]} output: {got} stride: {stride} dilation: {dilation}", name,
            f"the {name} the forward convolution gives (stride {stride}, dilation "
            f"{dilation}, padding {attrs['padding']})")


def check_out_backprop(attrs: dict, fail: Fail, input_shape: Dims, filter_shape: Dims,
                       out_backprop_shape: Dims, window: Window) -> tuple:
    """Check out_backprop (data_format order) against the forward output the input and
    filter give; return the merged output shape in data_format order."""
    fmt = attrs["data_format"]
    x, dy = to_nhwc(input_shape, fmt), to_nhwc(out_backprop_shape, fmt)
    expected = (x[0], *window.out, filter_shape[-1])
    for axis, (want, got) in enumerate(zip(expected, dy)):
        if mismatch(want, got):
            words, name, why = _out_backprop_words(axis, got, want, x, filter_shape, window,
                                                   attrs)
            raise fail(f"{words}: input 'out_backprop' has {name} {got} (shape "
                       f"{dims_text(out_backprop_shape)}, data_format {fmt}) but must equal "
                       f"{why}: {want}")
    return from_nhwc([merge_dims(a, b) for a, b in zip(expected, dy)], fmt)


def sizes_to_shape(sizes: Sequence[int], name: str, fail: Fail, data_format: str,
                   batch: int | None, depth: int | None) -> tuple:
    """A shape vector in data_format order, or (4-D only, as TF accepts) its spatial sizes
    alone, whose batch and depth come from the other inputs."""
    sizes = list(sizes)
    rank = len(data_format)
    spatial = rank - 2
    if len(sizes) not in SIZES_LENGTHS[rank]:
        alone = (f" or {spatial} ({', '.join(SPATIAL_NAMES[spatial])})"
                 if spatial in SIZES_LENGTHS[rank] else "")
        raise fail(f"input '{name}' must have {rank} elements (a {data_format} shape){alone}, "
                   f"got {len(sizes)}: {sizes}")
    negative = [s for s in sizes if s < 0]
    if negative:
        raise fail(f"Dimension {negative[0]} must be >= 0: input '{name}' must be "
                   f"non-negative, got {sizes}")
    if len(sizes) == rank:
        return tuple(sizes)
    return from_nhwc((batch, *sizes, depth), data_format)


# ----------------------------------------------------------------------------- shape helpers


def image_input(ctx: InferenceContext, name: str) -> tuple:
    """The dims of input ``name``, checked to have the rank of ``data_format`` (4 or 5; a
    filter too: HWIO or DHWIO)."""
    fmt = ctx.attrs["data_format"]
    layout = filter_layout(fmt) if name == "filter" else f"data_format {fmt}"
    return tuple(ctx.with_rank(name, len(fmt), f" ({layout})").dims)


def vector_input(ctx: InferenceContext, name: str, lengths: Sequence[int]) -> list | None:
    """The constant value of a 1-D int input (None if unknown), its length checked."""
    shape = ctx.with_rank(name, 1)
    if shape[0] is not None and shape[0] not in lengths:
        words = (f"Shape must be rank {lengths[0]} but is rank {shape[0]}: "
                 if len(lengths) == 1 else "")
        raise ctx.error(f"{words}input '{name}' must have "
                        f"{' or '.join(str(n) for n in lengths)} elements, got {shape[0]}")
    value = ctx.constant_value(name)
    return None if value is None else list(value)


def copy_attrs(op: Operation, names: Sequence[str]) -> dict:
    """The attrs ``names`` of ``op`` it has (a gradient builds its op with the same
    window)."""
    return {k: op.attrs[k] for k in names if k in op.attrs}
