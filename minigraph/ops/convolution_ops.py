"""Convolution ops: ``Conv2D`` and its two backprops (TF's ``core/ops/nn_ops.cc`` names,
inputs, attrs and defaults). Image tensors are NHWC (default) or NCHW; filters are HWIO
(``[filter_height, filter_width, in_channels, out_channels]``) in both formats, as in TF.
The window geometry is in ``ops.window``; the gradients are at the bottom. The shape
functions take their rank from ``data_format``: ``ops.volumetric_ops`` builds Conv3D's on
them.
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
from minigraph.framework.tensor_shape import TensorShape
from minigraph.ops import math_ops as m
from minigraph.ops.math_ops import FLOATS
from minigraph.ops.window import (
    FORMATS,
    PADDINGS_EXPLICIT,
    SIZES_LENGTHS,
    check_out_backprop,
    conv_geometry,
    copy_attrs,
    from_nhwc,
    image_input,
    merge_dims,
    sizes_to_shape,
    to_nhwc,
    vector_input,
)

# The wrappers minigraph.ops exports.
__all__ = ["Conv2D", "Conv2DBackpropFilter", "Conv2DBackpropInput"]

CONV_TYPES = FLOATS + (dtypes.int32,)


def _conv_attrs(padding: Sequence[str] = PADDINGS_EXPLICIT, types=CONV_TYPES) -> list[AttrDef]:
    return [required("T", "type", allowed=types),
            required("strides", "list(int)"),
            AttrDef("use_cudnn_on_gpu", "bool", default=True),
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
    if sizes is None:
        x = from_nhwc((batch, *(None,) * (len(fmt) - 2), f[-2]), fmt)
    else:
        x = sizes_to_shape(sizes, "input_sizes", ctx.error, fmt, batch, f[-2])
    window = conv_geometry(ctx.attrs, ctx.error, x, f, "input_sizes")
    check_out_backprop(ctx.attrs, ctx.error, x, f, dy, window)
    n, *spatial, c = to_nhwc(x, fmt)
    return [TensorShape(from_nhwc((merge_dims(n, batch), *spatial, merge_dims(c, f[-2])),
                                  fmt))]


def conv_backprop_filter_shape(ctx: InferenceContext) -> list[TensorShape]:
    """The HWIO (DHWIO) shape in ``filter_sizes``, checked against input and
    out_backprop."""
    fmt = ctx.attrs["data_format"]
    x, dy = image_input(ctx, "input"), image_input(ctx, "out_backprop")
    sizes = vector_input(ctx, "filter_sizes", (len(fmt),))
    if sizes is not None and any(s < 0 for s in sizes):
        raise ctx.error(f"Dimension {next(s for s in sizes if s < 0)} must be >= 0: input "
                        f"'filter_sizes' must be non-negative, got {sizes}")
    c, co = to_nhwc(x, fmt)[-1], to_nhwc(dy, fmt)[-1]
    f = tuple(sizes) if sizes is not None else (*(None,) * (len(fmt) - 2), c, co)
    window = conv_geometry(ctx.attrs, ctx.error, x, f)
    check_out_backprop(ctx.attrs, ctx.error, x, f, dy, window)
    return [TensorShape((*f[:-2], merge_dims(f[-2], c), merge_dims(f[-1], co)))]


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


# ----------------------------------------------------------------------------- gradients

_CONV_ATTRS = ("strides", "padding", "explicit_paddings", "data_format", "dilations",
               "use_cudnn_on_gpu")


@RegisterGradient("Conv2D")
def _conv2d_grad(scope, op, grads):
    """d input = Conv2DBackpropInput(shape(input), filter, g);
    d filter = Conv2DBackpropFilter(input, shape(filter), g)."""
    x, f = op.inputs
    attrs = copy_attrs(op, _CONV_ATTRS)
    return [Conv2DBackpropInput(scope, m.Shape(scope, x), f, grads[0], **attrs),
            Conv2DBackpropFilter(scope, x, m.Shape(scope, f), grads[0], **attrs)]


@RegisterGradient("Conv2DBackpropInput")
def _conv2d_backprop_input_grad(scope, op, grads):
    """The op is linear in filter and in out_backprop (a transposed convolution):
    d filter = Conv2DBackpropFilter(g, shape(filter), out_backprop);
    d out_backprop = Conv2D(g, filter)."""
    _, f, dy = op.inputs
    attrs = copy_attrs(op, _CONV_ATTRS)
    return [None,
            Conv2DBackpropFilter(scope, grads[0], m.Shape(scope, f), dy, **attrs),
            Conv2D(scope, grads[0], f, **attrs)]


@RegisterGradient("Conv2DBackpropFilter")
def _conv2d_backprop_filter_grad(scope, op, grads):
    """d input = Conv2DBackpropInput(shape(input), g, out_backprop);
    d out_backprop = Conv2D(input, g)."""
    x, _, dy = op.inputs
    attrs = copy_attrs(op, _CONV_ATTRS)
    return [Conv2DBackpropInput(scope, m.Shape(scope, x), grads[0], dy, **attrs),
            None,
            Conv2D(scope, x, grads[0], **attrs)]


