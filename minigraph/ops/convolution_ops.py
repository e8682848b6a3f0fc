"""Convolution ops: ``Conv2D``, ``DepthwiseConv2dNative`` and their backprops (TF's
``core/ops/nn_ops.cc`` names, inputs, attrs and defaults). Image tensors are NHWC (default)
or NCHW; Conv2D filters are HWIO (``[filter_height, filter_width, in_channels,
out_channels]``), depthwise filters ``[filter_height, filter_width, in_channels,
channel_multiplier]``, in both formats, as in TF. The window geometry is in ``ops.window``;
the gradients are at the bottom. Conv2D's shape functions take their rank from
``data_format``: ``ops.volumetric_ops`` builds Conv3D's on them.
"""

from __future__ import annotations

from collections.abc import Sequence

from minigraph.framework import dtypes
from minigraph.framework.gradient_registry import RegisterGradient
from minigraph.framework.op_def import (
    ArgDef,
    AttrDef,
    InferenceContext,
    OpDef,
    make_wrapper,
    register_op,
    required,
)
from minigraph.framework.tensor_shape import TensorShape, dims_text
from minigraph.ops import math_ops as m
from minigraph.ops.math_ops import FLOATS
from minigraph.ops.window import (
    FORMATS,
    PADDINGS_EXPLICIT,
    SIZES_LENGTHS,
    Dims,
    Fail,
    Window,
    cached_geometry,
    check_out_backprop,
    conv_geometry,
    copy_attrs,
    from_nhwc,
    image_input,
    merge_dims,
    mismatch,
    sizes_to_shape,
    to_nhwc,
    vector_input,
)

# The wrappers minigraph.ops exports.
__all__ = ["Conv2D", "Conv2DBackpropFilter", "Conv2DBackpropInput", "DepthwiseConv2dNative",
           "DepthwiseConv2dNativeBackpropFilter", "DepthwiseConv2dNativeBackpropInput"]

CONV_TYPES = FLOATS + (dtypes.int32,)


def _conv_attrs(padding: Sequence[str] = PADDINGS_EXPLICIT, types=CONV_TYPES,
                cudnn: bool = True) -> list[AttrDef]:
    """The attrs of a 2-D convolution op (depthwise ones have no ``use_cudnn_on_gpu``)."""
    return [required("T", "type", allowed=types),
            required("strides", "list(int)"),
            *([AttrDef("use_cudnn_on_gpu", "bool", default=True)] if cudnn else []),
            required("padding", "string", allowed=tuple(padding)),
            AttrDef("explicit_paddings", "list(int)", default=()),
            AttrDef("data_format", "string", default="NHWC", allowed=FORMATS),
            AttrDef("dilations", "list(int)", default=(1, 1, 1, 1))]


# ----------------------------------------------------------------------------- convolution


def conv_shape(ctx: InferenceContext) -> list[TensorShape]:
    """[batch, out spatial..., out_channels] (channels-first formats: [batch, out_channels,
    out spatial...]); 2 or 3 spatial dims, as data_format says."""
    fmt = ctx.attrs["data_format"]
    x, f = image_input(ctx, "input"), image_input(ctx, "filter")
    window = conv_geometry(ctx.attrs, ctx.error, x, f)
    return [TensorShape(from_nhwc((to_nhwc(x, fmt)[0], *window.out, f[-1]), fmt))]


def conv_backprop_input_shape(ctx: InferenceContext) -> list[TensorShape]:
    """The shape in ``input_sizes``, checked against filter and out_backprop."""
    fmt = ctx.attrs["data_format"]
    f, dy = image_input(ctx, "filter"), image_input(ctx, "out_backprop")
    sizes = vector_input(ctx, "input_sizes", SIZES_LENGTHS[len(fmt)])
    batch = to_nhwc(dy, fmt)[0]
    if sizes is None:  # the depth: a multiple of the filter's in_channels (the groups)
        x = from_nhwc((batch, *(None,) * (len(fmt) - 1)), fmt)
    else:
        x = sizes_to_shape(sizes, "input_sizes", ctx.error, fmt, batch, f[-2])
    window = conv_geometry(ctx.attrs, ctx.error, x, f, "input_sizes")
    check_out_backprop(ctx.attrs, ctx.error, x, f, dy, window)
    n, *spatial, c = to_nhwc(x, fmt)
    return [TensorShape(from_nhwc((merge_dims(n, batch), *spatial, c), fmt))]


def conv_backprop_filter_shape(ctx: InferenceContext) -> list[TensorShape]:
    """The HWIO (DHWIO) shape in ``filter_sizes``, checked against input and
    out_backprop."""
    fmt = ctx.attrs["data_format"]
    x, dy = image_input(ctx, "input"), image_input(ctx, "out_backprop")
    sizes = vector_input(ctx, "filter_sizes", (len(fmt),))
    if sizes is not None and any(s < 0 for s in sizes):
        raise ctx.error(f"Dimension {next(s for s in sizes if s < 0)} must be >= 0: input "
                        f"'filter_sizes' must be non-negative, got {sizes}")
    co = to_nhwc(dy, fmt)[-1]
    # unknown sizes: in_channels is the input's depth over the groups, unknown too
    f = tuple(sizes) if sizes is not None else (*(None,) * (len(fmt) - 1), co)
    window = conv_geometry(ctx.attrs, ctx.error, x, f)
    check_out_backprop(ctx.attrs, ctx.error, x, f, dy, window)
    return [TensorShape((*f[:-1], merge_dims(f[-1], co)))]


CONV2D = register_op(OpDef(
    name="Conv2D",
    inputs=[ArgDef("input", type_attr="T"), ArgDef("filter", type_attr="T")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=_conv_attrs(),
    shape_fn=conv_shape,
))
CONV2D_BACKPROP_INPUT = register_op(OpDef(
    name="Conv2DBackpropInput",
    inputs=[ArgDef("input_sizes", dtype=dtypes.int32), ArgDef("filter", type_attr="T"),
            ArgDef("out_backprop", type_attr="T")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=_conv_attrs(),
    shape_fn=conv_backprop_input_shape,
))
CONV2D_BACKPROP_FILTER = register_op(OpDef(
    name="Conv2DBackpropFilter",
    inputs=[ArgDef("input", type_attr="T"), ArgDef("filter_sizes", dtype=dtypes.int32),
            ArgDef("out_backprop", type_attr="T")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=_conv_attrs(types=FLOATS),
    shape_fn=conv_backprop_filter_shape,
))
Conv2D = make_wrapper(CONV2D)
Conv2DBackpropInput = make_wrapper(CONV2D_BACKPROP_INPUT)
Conv2DBackpropFilter = make_wrapper(CONV2D_BACKPROP_FILTER)


# ----------------------------------------------------------------------------- depthwise

DEPTHWISE_FILTER = "[filter_height, filter_width, in_channels, channel_multiplier]"


def _depthwise_filter(ctx: InferenceContext) -> tuple:
    """The dims of input 'filter', checked to be rank 4."""
    return tuple(ctx.with_rank("filter", 4, f" ({DEPTHWISE_FILTER})").dims)


@cached_geometry
def depthwise_geometry(attrs: dict, fail: Fail, input_shape: Dims, filter_shape: Dims,
                       input_name: str = "input") -> Window:
    """Check a depthwise convolution's input (data_format order; the shape of input
    ``input_name``) against its filter ``[fh, fw, in_channels, channel_multiplier]`` and
    return its window: the same as a convolution's by an HWIO filter of that height and
    width (``conv_geometry``). Works with unknown (None) dims; used at construction and at
    run time."""
    fmt = attrs["data_format"]
    c, ci = to_nhwc(input_shape, fmt)[-1], filter_shape[2]
    if mismatch(c, ci):
        raise fail(f"Dimensions must be equal, but are {c} and {ci}: input '{input_name}' "
                   f"has {c} channels (shape {dims_text(input_shape)}, data_format {fmt}) but "
                   f"input 'filter' has in_channels {ci} (dimension 2 of {DEPTHWISE_FILTER} "
                   f"shape {dims_text(filter_shape)})")
    return conv_geometry(attrs, fail, input_shape, filter_shape, input_name)


def depthwise_out_channels(in_channels: int | None, filter_shape: Dims) -> int | None:
    """in_channels * channel_multiplier (None when either is unknown): output channel
    ``c * channel_multiplier + m`` is input channel c through filter column m."""
    c, mult = merge_dims(in_channels, filter_shape[2]), filter_shape[3]
    return None if c is None or mult is None else c * mult


def check_depthwise_out_backprop(attrs: dict, fail: Fail, input_shape: Dims,
                                 filter_shape: Dims, out_backprop_shape: Dims,
                                 window: Window) -> None:
    """Check out_backprop (data_format order) against the forward output: its depth against
    in_channels * channel_multiplier, then its batch and spatial dims as a convolution's."""
    fmt = attrs["data_format"]
    depth = depthwise_out_channels(to_nhwc(input_shape, fmt)[-1], filter_shape)
    got = to_nhwc(out_backprop_shape, fmt)[-1]
    if mismatch(depth, got):
        raise fail(f"depth_multiplier * in_depth not equal to out_depth: input "
                   f"'out_backprop' has depth {got} (shape {dims_text(out_backprop_shape)}, "
                   f"data_format {fmt}) but must equal in_channels * channel_multiplier of "
                   f"input 'filter' ({filter_shape[2]} * {filter_shape[3]}): {depth}")
    check_out_backprop(attrs, fail, input_shape, (*filter_shape[:3], depth),
                       out_backprop_shape, window)


def depthwise_shape(ctx: InferenceContext) -> list[TensorShape]:
    """[batch, out_h, out_w, in_channels * channel_multiplier] (NCHW: the channels
    second)."""
    fmt = ctx.attrs["data_format"]
    x, f = image_input(ctx, "input"), _depthwise_filter(ctx)
    window = depthwise_geometry(ctx.attrs, ctx.error, x, f)
    n, *_, c = to_nhwc(x, fmt)
    return [TensorShape(from_nhwc((n, *window.out, depthwise_out_channels(c, f)), fmt))]


def depthwise_backprop_input_shape(ctx: InferenceContext) -> list[TensorShape]:
    """The shape in ``input_sizes`` (4 elements: TF takes no [height, width] form here),
    checked against filter and out_backprop."""
    fmt = ctx.attrs["data_format"]
    f, dy = _depthwise_filter(ctx), image_input(ctx, "out_backprop")
    sizes = vector_input(ctx, "input_sizes", (4,))
    batch = to_nhwc(dy, fmt)[0]
    x = (from_nhwc((batch, None, None, f[2]), fmt) if sizes is None
         else sizes_to_shape(sizes, "input_sizes", ctx.error, fmt, batch, f[2]))
    window = depthwise_geometry(ctx.attrs, ctx.error, x, f, "input_sizes")
    check_depthwise_out_backprop(ctx.attrs, ctx.error, x, f, dy, window)
    n, h, w, c = to_nhwc(x, fmt)
    return [TensorShape(from_nhwc((merge_dims(n, batch), h, w, merge_dims(c, f[2])), fmt))]


def depthwise_backprop_filter_shape(ctx: InferenceContext) -> list[TensorShape]:
    """The shape in ``filter_sizes``, checked against input and out_backprop (when unknown:
    ``[?, ?, in_channels, out_depth / in_channels]``)."""
    fmt = ctx.attrs["data_format"]
    x, dy = image_input(ctx, "input"), image_input(ctx, "out_backprop")
    sizes = vector_input(ctx, "filter_sizes", (4,))
    c, depth = to_nhwc(x, fmt)[-1], to_nhwc(dy, fmt)[-1]
    if sizes is None:
        mult = depth // c if c and depth is not None and depth % c == 0 else None
        f = (None, None, c, mult)
    else:
        f = sizes_to_shape(sizes, "filter_sizes", ctx.error, fmt, None, None)
    window = depthwise_geometry(ctx.attrs, ctx.error, x, f)
    check_depthwise_out_backprop(ctx.attrs, ctx.error, x, f, dy, window)
    return [TensorShape((f[0], f[1], merge_dims(f[2], c), f[3]))]


DEPTHWISE = register_op(OpDef(
    name="DepthwiseConv2dNative",
    inputs=[ArgDef("input", type_attr="T"), ArgDef("filter", type_attr="T")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=_conv_attrs(types=FLOATS, cudnn=False),
    shape_fn=depthwise_shape,
))
DEPTHWISE_BACKPROP_INPUT = register_op(OpDef(
    name="DepthwiseConv2dNativeBackpropInput",
    inputs=[ArgDef("input_sizes", dtype=dtypes.int32), ArgDef("filter", type_attr="T"),
            ArgDef("out_backprop", type_attr="T")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=_conv_attrs(types=FLOATS, cudnn=False),
    shape_fn=depthwise_backprop_input_shape,
))
DEPTHWISE_BACKPROP_FILTER = register_op(OpDef(
    name="DepthwiseConv2dNativeBackpropFilter",
    inputs=[ArgDef("input", type_attr="T"), ArgDef("filter_sizes", dtype=dtypes.int32),
            ArgDef("out_backprop", type_attr="T")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=_conv_attrs(types=FLOATS, cudnn=False),
    shape_fn=depthwise_backprop_filter_shape,
))
DepthwiseConv2dNative = make_wrapper(DEPTHWISE)
DepthwiseConv2dNativeBackpropInput = make_wrapper(DEPTHWISE_BACKPROP_INPUT)
DepthwiseConv2dNativeBackpropFilter = make_wrapper(DEPTHWISE_BACKPROP_FILTER)


# ----------------------------------------------------------------------------- gradients

_CONV_ATTRS = ("strides", "padding", "explicit_paddings", "data_format", "dilations",
               "use_cudnn_on_gpu")


def register_convolution_gradients(forward, backprop_input, backprop_filter) -> None:
    """The gradients of a convolution family (TF's nn_grad.py; the same for Conv2D,
    DepthwiseConv2dNative and Conv3D): the forward is bilinear in input and filter, each backprop
    bilinear in its two tensor inputs, so every gradient is one of the three ops with the
    same attrs (the sizes inputs get none)."""
    names = [wrapper.op_def.name for wrapper in (forward, backprop_input, backprop_filter)]

    @RegisterGradient(names[0])
    def _forward_grad(scope, op, grads):
        """d input = BackpropInput(shape(input), filter, g);
        d filter = BackpropFilter(input, shape(filter), g)."""
        x, f = op.inputs
        attrs = copy_attrs(op, _CONV_ATTRS)
        return [backprop_input(scope, m.Shape(scope, x), f, grads[0], **attrs),
                backprop_filter(scope, x, m.Shape(scope, f), grads[0], **attrs)]

    @RegisterGradient(names[1])
    def _backprop_input_grad(scope, op, grads):
        """Linear in filter and in out_backprop (a transposed convolution):
        d filter = BackpropFilter(g, shape(filter), out_backprop);
        d out_backprop = forward(g, filter)."""
        _, f, dy = op.inputs
        attrs = copy_attrs(op, _CONV_ATTRS)
        return [None,
                backprop_filter(scope, grads[0], m.Shape(scope, f), dy, **attrs),
                forward(scope, grads[0], f, **attrs)]

    @RegisterGradient(names[2])
    def _backprop_filter_grad(scope, op, grads):
        """d input = BackpropInput(shape(input), g, out_backprop);
        d out_backprop = forward(input, g)."""
        x, _, dy = op.inputs
        attrs = copy_attrs(op, _CONV_ATTRS)
        return [backprop_input(scope, m.Shape(scope, x), grads[0], dy, **attrs),
                None,
                forward(scope, x, grads[0], **attrs)]


register_convolution_gradients(Conv2D, Conv2DBackpropInput, Conv2DBackpropFilter)
register_convolution_gradients(DepthwiseConv2dNative, DepthwiseConv2dNativeBackpropInput,
                               DepthwiseConv2dNativeBackpropFilter)
