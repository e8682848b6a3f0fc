"""Neural-network layer ops: convolution, bias, ReLU, pooling, dense, softmax and the sparse
softmax cross-entropy loss, plus ``ArgMax``/``Equal`` for accuracy.

Names, inputs, outputs, attrs and defaults are TensorFlow's (``core/ops/nn_ops.cc``,
``math_ops.cc``). Image tensors are NHWC (default) or NCHW; convolution filters are HWIO
(``[filter_height, filter_width, in_channels, out_channels]``) in both formats, as in TF.

The window geometry (``windowed_output_size``, :class:`Window`, the attr checks) is shared
by the shape functions here and the numpy kernels in ``backends/conv_kernels.py``, so a
problem is reported with the same message at construction (when the static shapes show it)
and at run time (when only the data does). The gradients are at the bottom.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from minigraph.framework import dtypes
from minigraph.framework.errors import InvalidArgumentError
from minigraph.framework.gradient_registry import NotDifferentiable, RegisterGradient
from minigraph.framework.op_def import (
    ArgDef,
    AttrDef,
    InferenceContext,
    OpDef,
    make_wrapper,
    register_op,
    required,
)
from minigraph.framework.tensor_shape import ShapeMismatch, TensorShape
from minigraph.ops import math_ops as m
from minigraph.ops.array_ops import Const
from minigraph.ops.math_ops import binary_shape, broadcast_shapes

FLOATS = (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)
REALS = FLOATS + (dtypes.int32, dtypes.int64)
CONV_TYPES = FLOATS + (dtypes.int32,)
INDEX = (dtypes.int32, dtypes.int64)
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


def shape_text(dims: Dims) -> str:
    return "[" + ",".join("?" if d is None else str(d) for d in dims) + "]"


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


def _mismatch(a: int | None, b: int | None) -> bool:
    return a is not None and b is not None and a != b


def _merge(a: int | None, b: int | None) -> int | None:
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
                   f"non-zero), got shape {shape_text(filter_shape)}")
    if _mismatch(c, ci):
        raise fail(f"input depth must equal the filter's input depth: input 'input' has "
                   f"{c} channels (shape {shape_text(input_shape)}, data_format {fmt}) but "
                   f"input 'filter' has in_channels {ci} (dimension 2 of HWIO shape "
                   f"{shape_text(filter_shape)}); grouped convolution is not supported")
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
        if _mismatch(want, got):
            raise fail(f"input 'out_backprop' has {name} {got} (shape "
                       f"{shape_text(out_backprop_shape)}, data_format {fmt}) but must equal "
                       f"{why[name]}: {want}")
    return from_nhwc([_merge(a, b) for a, b in zip(expected, (dn, dh, dw, dc))], fmt)


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


def _rank4(ctx: InferenceContext, name: str) -> tuple:
    layout = "HWIO" if name == "filter" else f"data_format {ctx.attrs['data_format']}"
    return tuple(ctx.with_rank(name, 4, f" ({layout})").dims)


def _vector_input(ctx: InferenceContext, name: str, lengths: Sequence[int]) -> list | None:
    """The constant value of a 1-D int input (None if unknown), its length checked."""
    shape = ctx.with_rank(name, 1)
    if shape[0] is not None and shape[0] not in lengths:
        raise ctx.error(f"input '{name}' must have "
                        f"{' or '.join(str(n) for n in lengths)} elements, got {shape[0]}")
    value = ctx.constant_value(name)
    return None if value is None else list(value)


def _conv_attrs(padding: Sequence[str] = PADDINGS_EXPLICIT, types=CONV_TYPES) -> list[AttrDef]:
    return [required("T", "type", allowed=types),
            required("strides", "list(int)"),
            AttrDef("use_cudnn_on_gpu", "bool", default=True),
            required("padding", "string", allowed=tuple(padding)),
            AttrDef("explicit_paddings", "list(int)", default=()),
            AttrDef("data_format", "string", default="NHWC", allowed=FORMATS),
            AttrDef("dilations", "list(int)", default=(1, 1, 1, 1))]


# ----------------------------------------------------------------------------- convolution


def conv2d_shape(ctx: InferenceContext) -> list[TensorShape]:
    """[batch, out_h, out_w, out_channels] (NCHW: [batch, out_channels, out_h, out_w])."""
    fmt = ctx.attrs["data_format"]
    x, f = _rank4(ctx, "input"), _rank4(ctx, "filter")
    window = conv_geometry(ctx.attrs, ctx.error, x, f)
    return [TensorShape(from_nhwc((to_nhwc(x, fmt)[0], window.out[0], window.out[1], f[3]),
                                  fmt))]


def conv2d_backprop_input_shape(ctx: InferenceContext) -> list[TensorShape]:
    """The shape in ``input_sizes``, checked against filter and out_backprop."""
    fmt = ctx.attrs["data_format"]
    f, dy = _rank4(ctx, "filter"), _rank4(ctx, "out_backprop")
    sizes = _vector_input(ctx, "input_sizes", (4, 2))
    if sizes is None:
        x = from_nhwc((to_nhwc(dy, fmt)[0], None, None, f[2]), fmt)
    else:
        x = sizes_to_shape(sizes, "input_sizes", ctx.error, fmt, to_nhwc(dy, fmt)[0], f[2])
    window = conv_geometry(ctx.attrs, ctx.error, x, f, "input_sizes")
    check_out_backprop(ctx.attrs, ctx.error, x, f, dy, window)
    n, h, w, c = to_nhwc(x, fmt)
    return [TensorShape(from_nhwc((_merge(n, to_nhwc(dy, fmt)[0]), h, w, _merge(c, f[2])),
                                  fmt))]


def conv2d_backprop_filter_shape(ctx: InferenceContext) -> list[TensorShape]:
    """The HWIO shape in ``filter_sizes``, checked against input and out_backprop."""
    fmt = ctx.attrs["data_format"]
    x, dy = _rank4(ctx, "input"), _rank4(ctx, "out_backprop")
    sizes = _vector_input(ctx, "filter_sizes", (4,))
    if sizes is not None and any(s < 0 for s in sizes):
        raise ctx.error(f"input 'filter_sizes' must be non-negative, got {sizes}")
    f = tuple(sizes) if sizes is not None else (None, None, to_nhwc(x, fmt)[3],
                                                 to_nhwc(dy, fmt)[3])
    window = conv_geometry(ctx.attrs, ctx.error, x, f)
    check_out_backprop(ctx.attrs, ctx.error, x, f, dy, window)
    return [TensorShape((f[0], f[1], _merge(f[2], to_nhwc(x, fmt)[3]),
                         _merge(f[3], to_nhwc(dy, fmt)[3])))]


CONV2D = register_op(OpDef(
    name="Conv2D",
    inputs=[ArgDef("input", type_attr="T"), ArgDef("filter", type_attr="T")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=_conv_attrs(),
    shape_fn=conv2d_shape,
))
CONV2D_BACKPROP_INPUT = register_op(OpDef(
    name="Conv2DBackpropInput",
    inputs=[ArgDef("input_sizes", dtype=dtypes.int32), ArgDef("filter", type_attr="T"),
            ArgDef("out_backprop", type_attr="T")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=_conv_attrs(),
    shape_fn=conv2d_backprop_input_shape,
))
CONV2D_BACKPROP_FILTER = register_op(OpDef(
    name="Conv2DBackpropFilter",
    inputs=[ArgDef("input", type_attr="T"), ArgDef("filter_sizes", dtype=dtypes.int32),
            ArgDef("out_backprop", type_attr="T")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=_conv_attrs(types=FLOATS),
    shape_fn=conv2d_backprop_filter_shape,
))
Conv2D = make_wrapper(CONV2D)
Conv2DBackpropInput = make_wrapper(CONV2D_BACKPROP_INPUT)
Conv2DBackpropFilter = make_wrapper(CONV2D_BACKPROP_FILTER)

# ----------------------------------------------------------------------------- bias


def bias_channel_axis(data_format: str, rank: int) -> int:
    """NHWC: the last axis; NCHW: axis 1 (for any rank >= 3, as TF)."""
    return rank - 1 if data_format == "NHWC" else 1


def _bias_min_rank(data_format: str) -> int:
    return 3 if data_format == "NCHW" else 2


def bias_add_shape(ctx: InferenceContext) -> list[TensorShape]:
    fmt = ctx.attrs["data_format"]
    value = ctx.input_shape("value")
    bias = ctx.with_rank("bias", 1)
    need = _bias_min_rank(fmt)
    if value.rank is None:
        return [value]
    if value.rank < need:
        raise ctx.error(f"input 'value' must be at least rank {need} for data_format {fmt}, "
                        f"but has shape {value} (rank {value.rank})")
    axis = bias_channel_axis(fmt, value.rank)
    channel = ctx.merge_dim(value[axis], bias[0],
                            f"input 'bias' must have one element per channel of 'value' "
                            f"(dimension {axis} for data_format {fmt})")
    return [value.replace_dim(axis, channel)]


def bias_add_grad_shape(ctx: InferenceContext) -> list[TensorShape]:
    fmt = ctx.attrs["data_format"]
    dy = ctx.input_shape("out_backprop")
    need = _bias_min_rank(fmt)
    if dy.rank is None:
        return [TensorShape([None])]
    if dy.rank < need:
        raise ctx.error(f"input 'out_backprop' must be at least rank {need} for data_format "
                        f"{fmt}, but has shape {dy} (rank {dy.rank})")
    return [TensorShape([dy[bias_channel_axis(fmt, dy.rank)]])]


BiasAdd = make_wrapper(register_op(OpDef(
    name="BiasAdd",
    inputs=[ArgDef("value", type_attr="T"), ArgDef("bias", type_attr="T")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=[required("T", "type", allowed=REALS),
           AttrDef("data_format", "string", default="NHWC", allowed=FORMATS)],
    shape_fn=bias_add_shape,
)))
BiasAddGrad = make_wrapper(register_op(OpDef(
    name="BiasAddGrad",
    inputs=[ArgDef("out_backprop", type_attr="T")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=[required("T", "type", allowed=REALS),
           AttrDef("data_format", "string", default="NHWC", allowed=FORMATS)],
    shape_fn=bias_add_grad_shape,
)))

# ----------------------------------------------------------------------------- relu


def _relu_grad_shape(ctx: InferenceContext) -> list[TensorShape]:
    try:
        return [ctx.input_shape("gradients").merge_with(ctx.input_shape("features"))]
    except ShapeMismatch:
        raise ctx.error(f"inputs 'gradients' and 'features' must have the same shape, got "
                        f"{ctx.input_shape('gradients')} and {ctx.input_shape('features')}"
                        ) from None


Relu = make_wrapper(register_op(OpDef(
    name="Relu",
    inputs=[ArgDef("features", type_attr="T")],
    outputs=[ArgDef("activations", type_attr="T")],
    attrs=[required("T", "type", allowed=REALS)],
    shape_fn=lambda ctx: [ctx.input_shapes[0]],
)))
ReluGrad = make_wrapper(register_op(OpDef(
    name="ReluGrad",
    inputs=[ArgDef("gradients", type_attr="T"), ArgDef("features", type_attr="T")],
    outputs=[ArgDef("backprops", type_attr="T")],
    attrs=[required("T", "type", allowed=REALS)],
    shape_fn=_relu_grad_shape,
)))

# ----------------------------------------------------------------------------- pooling


def _pool_attrs(padding: Sequence[str], types, default_float: bool) -> list[AttrDef]:
    t = (AttrDef("T", "type", default=dtypes.float32, allowed=types) if default_float
         else required("T", "type", allowed=types))
    attrs = [t, required("ksize", "list(int)"), required("strides", "list(int)"),
             required("padding", "string", allowed=tuple(padding))]
    if "EXPLICIT" in padding:
        attrs.append(AttrDef("explicit_paddings", "list(int)", default=()))
    attrs.append(AttrDef("data_format", "string", default="NHWC", allowed=FORMATS))
    return attrs


def pool_output_shape(attrs: dict, fail: Fail, input_shape: Dims, input_name: str = "input"
                      ) -> tuple[tuple, Window]:
    """(output shape in data_format order, window) of a pool over ``input_shape`` (the shape
    of input ``input_name``)."""
    fmt = attrs["data_format"]
    n, h, w, c = to_nhwc(input_shape, fmt)
    window = make_window(attrs, fail, (h, w), input_name=input_name)
    return from_nhwc((n, window.out[0], window.out[1], c), fmt), window


def _check_same(ctx: InferenceContext, name: str, shape: Dims, expected: Dims, why: str
                ) -> tuple:
    if any(_mismatch(a, b) for a, b in zip(shape, expected)):
        raise ctx.error(f"input '{name}' must have shape {shape_text(expected)} ({why}), "
                        f"got {shape_text(shape)}")
    return tuple(_merge(a, b) for a, b in zip(shape, expected))


def pool_shape(ctx: InferenceContext) -> list[TensorShape]:
    name = ctx.op_def.inputs[0].name
    return [TensorShape(pool_output_shape(ctx.attrs, ctx.error, _rank4(ctx, name), name)[0])]


def max_pool_grad_shape(ctx: InferenceContext) -> list[TensorShape]:
    """MaxPoolGrad: orig_input's shape; MaxPoolGradGrad: orig_output's. Both check all three
    inputs against each other."""
    x = _rank4(ctx, "orig_input")
    y_expected, _ = pool_output_shape(ctx.attrs, ctx.error, x, "orig_input")
    y = _check_same(ctx, "orig_output", _rank4(ctx, "orig_output"), y_expected,
                    "the pool of orig_input")
    if ctx.op_def.name == "MaxPoolGrad":
        _check_same(ctx, "grad", _rank4(ctx, "grad"), y, "the shape of orig_output")
        return [TensorShape(x)]
    _check_same(ctx, "grad", _rank4(ctx, "grad"), x, "the shape of orig_input")
    return [TensorShape(y)]


def avg_pool_grad_shape(ctx: InferenceContext) -> list[TensorShape]:
    fmt = ctx.attrs["data_format"]
    dy = _rank4(ctx, "grad")
    sizes = _vector_input(ctx, "orig_input_shape", (4,))
    if sizes is None:
        n, _, _, c = to_nhwc(dy, fmt)
        return [TensorShape(from_nhwc((n, None, None, c), fmt))]
    if any(s < 0 for s in sizes):
        raise ctx.error(f"input 'orig_input_shape' must be non-negative, got {sizes}")
    expected, _ = pool_output_shape(ctx.attrs, ctx.error, sizes, "orig_input_shape")
    _check_same(ctx, "grad", dy, expected, f"the pool of an input of shape {shape_text(sizes)}")
    return [TensorShape(sizes)]


POOL_TYPES = REALS
MaxPool = make_wrapper(register_op(OpDef(
    name="MaxPool",
    inputs=[ArgDef("input", type_attr="T")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=_pool_attrs(PADDINGS_EXPLICIT, POOL_TYPES, default_float=True),
    shape_fn=pool_shape,
)))
MaxPoolGrad = make_wrapper(register_op(OpDef(
    name="MaxPoolGrad",
    inputs=[ArgDef("orig_input", type_attr="T"), ArgDef("orig_output", type_attr="T"),
            ArgDef("grad", type_attr="T")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=_pool_attrs(PADDINGS_EXPLICIT, POOL_TYPES, default_float=True),
    shape_fn=max_pool_grad_shape,
)))
MaxPoolGradGrad = make_wrapper(register_op(OpDef(
    name="MaxPoolGradGrad",
    inputs=[ArgDef("orig_input", type_attr="T"), ArgDef("orig_output", type_attr="T"),
            ArgDef("grad", type_attr="T")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=_pool_attrs(PADDINGS, POOL_TYPES, default_float=False),
    shape_fn=max_pool_grad_shape,
)))
AvgPool = make_wrapper(register_op(OpDef(
    name="AvgPool",
    inputs=[ArgDef("value", type_attr="T")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=_pool_attrs(PADDINGS, FLOATS, default_float=False),
    shape_fn=pool_shape,
)))
AvgPoolGrad = make_wrapper(register_op(OpDef(
    name="AvgPoolGrad",
    inputs=[ArgDef("orig_input_shape", dtype=dtypes.int32), ArgDef("grad", type_attr="T")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=_pool_attrs(PADDINGS, FLOATS, default_float=False),
    shape_fn=avg_pool_grad_shape,
)))

# ----------------------------------------------------------------------------- dense


def matmul_shape(ctx: InferenceContext) -> list[TensorShape]:
    """[m, k] x [k, n] -> [m, n], each operand transposed first if its attr says so."""
    a, b = ctx.with_rank("a", 2), ctx.with_rank("b", 2)
    ta, tb = ctx.attrs["transpose_a"], ctx.attrs["transpose_b"]
    m, ka = (a[1], a[0]) if ta else (a[0], a[1])
    kb, n = (b[1], b[0]) if tb else (b[0], b[1])
    if _mismatch(ka, kb):
        raise ctx.error(f"matrix size-incompatible: In[0]: {shape_text(a)}"
                        f"{' (transposed)' if ta else ''}, In[1]: {shape_text(b)}"
                        f"{' (transposed)' if tb else ''}: the inner dimensions must be equal, "
                        f"but 'a' gives {ka} and 'b' gives {kb}")
    return [TensorShape([m, n])]


MatMul = make_wrapper(register_op(OpDef(
    name="MatMul",
    inputs=[ArgDef("a", type_attr="T"), ArgDef("b", type_attr="T")],
    outputs=[ArgDef("product", type_attr="T")],
    attrs=[AttrDef("transpose_a", "bool", default=False),
           AttrDef("transpose_b", "bool", default=False),
           required("T", "type", allowed=REALS),
           AttrDef("grad_a", "bool", default=False),
           AttrDef("grad_b", "bool", default=False)],
    shape_fn=matmul_shape,
)))

# ----------------------------------------------------------------------------- softmax / loss


def _softmax_shape(ctx: InferenceContext) -> list[TensorShape]:
    logits = ctx.input_shape("logits")
    if logits.rank == 0:
        raise ctx.error("input 'logits' must have at least one dimension, got a scalar")
    return [logits]


def sparse_xent_shape(ctx: InferenceContext) -> list[TensorShape]:
    """loss: [batch]; backprop: [batch, classes]."""
    features = ctx.with_rank("features", 2)
    labels = ctx.with_rank("labels", 1)
    batch = ctx.merge_dim(features[0], labels[0],
                          f"inputs 'features' {features} and 'labels' {labels} must have the "
                          f"same first (batch) dimension")
    classes = features[1]
    if batch and classes == 0:
        raise ctx.error(f"Must have at least one class, but got logits shape {features} "
                        f"(input 'features')")
    values = ctx.constant_value("labels") if classes is not None else None
    bad = [label for label in values or () if not 0 <= label < classes]
    if bad:  # TF's CPU kernel raises (its GPU kernel gives NaN)
        shown = " ".join(str(v) for v in values[:64]) + (" ..." if len(values) > 64 else "")
        raise ctx.error(f"Received a label value of {bad[0]} which is outside the valid "
                        f"range of [0, {classes}). Label values: {shown} (input 'labels')")
    return [TensorShape([batch]), TensorShape([batch, classes])]


Softmax = make_wrapper(register_op(OpDef(
    name="Softmax",
    inputs=[ArgDef("logits", type_attr="T")],
    outputs=[ArgDef("softmax", type_attr="T")],
    attrs=[required("T", "type", allowed=FLOATS)],
    shape_fn=_softmax_shape,
)))
SparseSoftmaxCrossEntropyWithLogits = make_wrapper(register_op(OpDef(
    name="SparseSoftmaxCrossEntropyWithLogits",
    inputs=[ArgDef("features", type_attr="T"), ArgDef("labels", type_attr="Tlabels")],
    outputs=[ArgDef("loss", type_attr="T"), ArgDef("backprop", type_attr="T")],
    attrs=[required("T", "type", allowed=FLOATS),
           AttrDef("Tlabels", "type", default=dtypes.int64, allowed=INDEX)],
    shape_fn=sparse_xent_shape,
)))

# ----------------------------------------------------------------------------- argmax / equal


def arg_max_shape(ctx: InferenceContext) -> list[TensorShape]:
    """The input shape without the reduced dimension."""
    x = ctx.input_shape("input")
    dim_shape = ctx.input_shape("dimension")
    if dim_shape.rank not in (None, 0):
        raise ctx.error(f"input 'dimension' must be a scalar, got shape {dim_shape}")
    axis = ctx.constant_value("dimension")
    if x.rank is None:
        return [TensorShape(None)]
    if x.rank == 0:
        raise ctx.error("input 'input' must have at least one dimension, got a scalar")
    if axis is None:
        return [TensorShape.unknown(x.rank - 1)]
    if not -x.rank <= axis < x.rank:
        raise ctx.error(f"input 'dimension' is {axis}, out of range for an input of rank "
                        f"{x.rank}: expected [{-x.rank}, {x.rank})")
    axis %= x.rank
    if x[axis] == 0:
        raise ctx.error(f"reduction axis {axis} is empty in shape {x}")
    return [TensorShape(d for i, d in enumerate(x.dims) if i != axis)]


def equal_shape(ctx: InferenceContext) -> list[TensorShape]:
    """Broadcasting like Add; with ``incompatible_shape_error=False`` shapes that do not
    broadcast give a scalar False instead of an error, as in TF."""
    if ctx.attrs["incompatible_shape_error"]:
        return binary_shape(ctx)
    try:
        return [broadcast_shapes(ctx.input_shapes[0], ctx.input_shapes[1])]
    except ShapeMismatch:
        return [TensorShape([])]


ArgMax = make_wrapper(register_op(OpDef(
    name="ArgMax",
    inputs=[ArgDef("input", type_attr="T"), ArgDef("dimension", type_attr="Tidx")],
    outputs=[ArgDef("output", type_attr="output_type")],
    attrs=[required("T", "type", allowed=REALS + (dtypes.bool_,)),
           AttrDef("Tidx", "type", default=dtypes.int32, allowed=INDEX),
           AttrDef("output_type", "type", default=dtypes.int64, allowed=INDEX)],
    shape_fn=arg_max_shape,
)))
Equal = make_wrapper(register_op(OpDef(
    name="Equal",
    inputs=[ArgDef("x", type_attr="T"), ArgDef("y", type_attr="T")],
    outputs=[ArgDef("z", dtype=dtypes.bool_)],
    attrs=[required("T", "type"), AttrDef("incompatible_shape_error", "bool", default=True)],
    shape_fn=equal_shape,
)))


# ----------------------------------------------------------------------------- gradients
# Each function returns d(loss)/d(input) for every input, given d(loss)/d(output).


NotDifferentiable("ArgMax", "Equal")

_CONV_ATTRS = ("strides", "padding", "explicit_paddings", "data_format", "dilations",
               "use_cudnn_on_gpu")
_POOL_ATTRS = ("ksize", "strides", "padding", "explicit_paddings", "data_format")


def _attrs_of(op, names: Sequence[str]) -> dict:
    return {k: op.attrs[k] for k in names if k in op.attrs}


@RegisterGradient("Conv2D")
def _conv2d_grad(scope, op, grads):
    """d input = Conv2DBackpropInput(shape(input), filter, g);
    d filter = Conv2DBackpropFilter(input, shape(filter), g)."""
    x, f = op.inputs
    attrs = _attrs_of(op, _CONV_ATTRS)
    return [Conv2DBackpropInput(scope, m.Shape(scope, x), f, grads[0], **attrs),
            Conv2DBackpropFilter(scope, x, m.Shape(scope, f), grads[0], **attrs)]


@RegisterGradient("Conv2DBackpropInput")
def _conv2d_backprop_input_grad(scope, op, grads):
    """The op is linear in filter and in out_backprop (a transposed convolution):
    d filter = Conv2DBackpropFilter(g, shape(filter), out_backprop);
    d out_backprop = Conv2D(g, filter)."""
    _, f, dy = op.inputs
    attrs = _attrs_of(op, _CONV_ATTRS)
    return [None,
            Conv2DBackpropFilter(scope, grads[0], m.Shape(scope, f), dy, **attrs),
            Conv2D(scope, grads[0], f, **attrs)]


@RegisterGradient("Conv2DBackpropFilter")
def _conv2d_backprop_filter_grad(scope, op, grads):
    """d input = Conv2DBackpropInput(shape(input), g, out_backprop);
    d out_backprop = Conv2D(input, g)."""
    x, _, dy = op.inputs
    attrs = _attrs_of(op, _CONV_ATTRS)
    return [Conv2DBackpropInput(scope, m.Shape(scope, x), grads[0], dy, **attrs),
            None,
            Conv2D(scope, x, grads[0], **attrs)]


@RegisterGradient("BiasAdd")
def _bias_add_grad(scope, op, grads):
    return [grads[0], BiasAddGrad(scope, grads[0], data_format=op.attrs["data_format"])]


@RegisterGradient("BiasAddGrad")
def _bias_add_grad_grad(scope, op, grads):
    """BiasAddGrad sums over every axis but the channel: its gradient broadcasts back."""
    dy = op.inputs[0]
    g = grads[0]
    if op.attrs["data_format"] == "NCHW":
        rank = dy.shape.rank
        if rank is None:
            raise InvalidArgumentError(
                f"gradient of BiasAddGrad '{op.name}' with data_format NCHW needs the rank of "
                f"input 'out_backprop', which is unknown")
        g = m.Reshape(scope, g, Const(scope, [-1] + [1] * (rank - 2)))
    return [m.BroadcastTo(scope, g, m.Shape(scope, dy))]


@RegisterGradient("Relu")
def _relu_grad(scope, op, grads):
    return [ReluGrad(scope, grads[0], op.outputs[0])]


@RegisterGradient("ReluGrad")
def _relu_grad_grad(scope, op, grads):
    """Linear in 'gradients' with the same mask; zero (None) almost everywhere in features."""
    return [ReluGrad(scope, grads[0], op.inputs[1]), None]


@RegisterGradient("MaxPool")
def _max_pool_grad(scope, op, grads):
    return [MaxPoolGrad(scope, op.inputs[0], op.outputs[0], grads[0],
                        **_attrs_of(op, _POOL_ATTRS))]


@RegisterGradient("MaxPoolGrad")
def _max_pool_grad_grad(scope, op, grads):
    """MaxPoolGrad is linear in 'grad' (a scatter to the argmax): its adjoint gathers."""
    if op.attrs["padding"] == "EXPLICIT":
        raise InvalidArgumentError(
            f"gradient of MaxPoolGrad '{op.name}': MaxPoolGradGrad has no explicit_paddings "
            f"(as in TensorFlow), so padding EXPLICIT cannot be differentiated twice")
    x, y, _ = op.inputs
    attrs = _attrs_of(op, _POOL_ATTRS)
    attrs.pop("explicit_paddings", None)
    return [None, None, MaxPoolGradGrad(scope, x, y, grads[0], **attrs)]


@RegisterGradient("MaxPoolGradGrad")
def _max_pool_grad_grad_grad(scope, op, grads):
    x, y, _ = op.inputs
    return [None, None, MaxPoolGrad(scope, x, y, grads[0], **_attrs_of(op, _POOL_ATTRS))]


@RegisterGradient("AvgPool")
def _avg_pool_grad(scope, op, grads):
    return [AvgPoolGrad(scope, m.Shape(scope, op.inputs[0]), grads[0],
                        **_attrs_of(op, _POOL_ATTRS))]


@RegisterGradient("AvgPoolGrad")
def _avg_pool_grad_grad(scope, op, grads):
    """AvgPoolGrad is the adjoint of the (linear) AvgPool, so its adjoint is AvgPool."""
    return [None, AvgPool(scope, grads[0], **_attrs_of(op, _POOL_ATTRS))]


@RegisterGradient("MatMul")
def _matmul_grad(scope, op, grads):
    """For P = op(a) op(b): the four transpose cases of TF's _MatMulGrad."""
    a, b = op.inputs
    g = grads[0]
    ta, tb = op.attrs["transpose_a"], op.attrs["transpose_b"]

    def mm(x, y, tx, ty, which):
        return MatMul(scope, x, y, transpose_a=tx, transpose_b=ty, **{which: True})

    if not ta and not tb:
        return [mm(g, b, False, True, "grad_a"), mm(a, g, True, False, "grad_b")]
    if not ta and tb:
        return [mm(g, b, False, False, "grad_a"), mm(g, a, True, False, "grad_b")]
    if ta and not tb:
        return [mm(b, g, False, True, "grad_a"), mm(a, g, False, False, "grad_b")]
    return [mm(b, g, True, True, "grad_a"), mm(g, a, True, True, "grad_b")]


def _softmax_vjp(scope, g, softmax):
    """(g - sum(g * s, -1, keepdims)) * s: the softmax Jacobian applied to g."""
    dot = m.Sum(scope, m.Mul(scope, g, softmax), Const(scope, [-1]), keep_dims=True)
    return m.Mul(scope, m.Sub(scope, g, dot), softmax)


@RegisterGradient("Softmax")
def _softmax_grad(scope, op, grads):
    return [_softmax_vjp(scope, grads[0], op.outputs[0])]


@RegisterGradient("SparseSoftmaxCrossEntropyWithLogits")
def _sparse_xent_grad(scope, op, grads):
    """d features = g_loss[:, None] * backprop (TF's gradient, from the op's own output).

    Where 'backprop' itself gets a cotangent (a second derivative, TF prevents it), it adds
    that cotangent through d backprop / d features = the softmax Jacobian."""
    features = op.inputs[0]
    total = None
    if grads[0] is not None:
        column = m.Reshape(scope, grads[0], Const(scope, [-1, 1]))
        total = m.Mul(scope, column, op.outputs[1])
    if grads[1] is not None:
        extra = _softmax_vjp(scope, grads[1], Softmax(scope, features))
        total = extra if total is None else m.Add(scope, total, extra)
    return [total, None]
