"""Volumetric (3-D) ops: ``Conv3D`` with its backprops ``Conv3DBackpropInputV2`` and
``Conv3DBackpropFilterV2``, ``MaxPool3D`` with ``MaxPool3DGrad`` and ``MaxPool3DGradGrad``,
``AvgPool3D`` with ``AvgPool3DGrad`` (TF's ``core/ops/nn_ops.cc`` names, inputs, attrs and
defaults).

Tensors are NDHWC (default) or NCDHW; filters are DHWIO (``[filter_planes, filter_height,
filter_width, in_channels, out_channels]``) in both formats, as in TF. The window geometry
is ``ops.window``'s and the shape functions are the convolution and pooling families' (both
take their rank from ``data_format``), after the checks TF's 3-D shape functions make in
their own words: the window attrs' 5 entries (as attr checks) and the convolutions' channel
counts. The gradients, at the bottom, are TF's ``nn_grad.py``.
"""

from __future__ import annotations

from collections.abc import Callable

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
from minigraph.ops.convolution_ops import (
    conv_backprop_filter_shape,
    conv_backprop_input_shape,
    conv_shape,
    register_convolution_gradients,
)
from minigraph.ops.pooling_ops import avg_pool_grad_shape, max_pool_grad_shape, pool_shape
from minigraph.ops.window import (
    FORMATS_3D,
    PADDINGS,
    copy_attrs,
    image_input,
    mismatch,
    to_nhwc,
    vector_input,
)

# The wrappers minigraph.ops exports.
__all__ = ["AvgPool3D", "AvgPool3DGrad", "Conv3D", "Conv3DBackpropFilterV2",
           "Conv3DBackpropInputV2", "MaxPool3D", "MaxPool3DGrad", "MaxPool3DGradGrad"]

CONV_TYPES = dtypes.FLOATING
POOL_TYPES = dtypes.HALF_AND_FLOAT32
# TF's MaxPool3DGradGrad takes every real type; these are the ones minigraph has.
GRAD_GRAD_TYPES = dtypes.NUMBERS

# ----------------------------------------------------------------------------- attrs


def _five_values(subject: str) -> Callable[[list[int]], str | None]:
    """The check of a window attr: at least 5 entries (the OpDef's minimum) and exactly 5
    (the shape function's), in TF's words; ``subject`` starts TF's sentence for the second
    ("Conv3D requires the stride attribute")."""
    def check(value: list[int]) -> str | None:
        if len(value) < 5:
            return f"passed list of length {len(value)} less than minimum 5"
        if len(value) > 5:
            return (f"has {len(value)} entries: {subject} to contain 5 values, but got: "
                    f"{len(value)}")
        return None
    return check


_PADDING_DOC = ("SAME (ceil(size / stride) outputs; the padding, odd element after, reads "
                "zeros in convolutions and is ignored by pools) or VALID (windows inside the "
                "input only).")
_FORMAT_DOC = ("NDHWC (channels last) or NCDHW (channels first); D, H, W are the planes, "
               "height and width.")


def _format_attr() -> AttrDef:
    return AttrDef("data_format", "string", default="NDHWC", allowed=FORMATS_3D,
                   doc=_FORMAT_DOC)


def _conv_attrs() -> list[AttrDef]:
    """Conv3D's attrs, shared by its backprops, in TF's order."""
    return [required("T", "type", allowed=CONV_TYPES),
            required("strides", "list(int)",
                     check=_five_values("Conv3D requires the stride attribute"),
                     doc="The window's step per dimension of data_format; batch and channel "
                         "entries must be 1."),
            required("padding", "string", allowed=PADDINGS, doc=_PADDING_DOC),
            _format_attr(),
            AttrDef("dilations", "list(int)", default=(1, 1, 1, 1, 1),
                    check=_five_values("Conv3D requires the dilation attribute"),
                    doc="The filter's spacing per dimension of data_format (1: dense); batch "
                        "and channel entries must be 1.")]


def _pool_attrs(t: AttrDef, *extra: AttrDef) -> list[AttrDef]:
    """The 3-D pools' attrs in TF's order: window, strides, padding, format, then types."""
    return [required("ksize", "list(int)",
                     check=_five_values("Pool3D requires the ksize attribute"),
                     doc="The window's size per dimension of data_format; batch and channel "
                         "entries must be 1."),
            required("strides", "list(int)",
                     check=_five_values("Pool3D ops require the stride attribute"),
                     doc="The window's step per dimension of data_format; batch and channel "
                         "entries must be 1."),
            required("padding", "string", allowed=PADDINGS, doc=_PADDING_DOC),
            _format_attr(), t, *extra]


# ----------------------------------------------------------------------------- shapes


def _check_channels(ctx: InferenceContext, depth: int | None, in_channels: int | None,
                    input_name: str, words: str) -> None:
    """The input's channel count must equal the filter's in_channels (TF's CPU kernels do
    no grouped convolution); ``words`` is TF's message for the op."""
    if mismatch(depth, in_channels):
        raise ctx.error(f"{words}: input '{input_name}' has {depth} channels (data_format "
                        f"{ctx.attrs['data_format']}) but the filter has in_channels "
                        f"{in_channels} (dimension 3 of DHWIO); grouped convolution is not "
                        f"supported")


def conv3d_shape(ctx: InferenceContext) -> list[TensorShape]:
    """TF's Conv3D channel checks, then the convolution family's shape function."""
    depth = to_nhwc(image_input(ctx, "input"), ctx.attrs["data_format"])[-1]
    f = image_input(ctx, "filter")
    if f[3] == 0:
        raise ctx.error(f"Depth of filter must not be 0: input 'filter' has in_channels 0 "
                        f"(DHWIO shape {dims_text(f)})")
    if depth is not None and f[3] is not None and depth % f[3]:
        words = f"Depth of input ({depth}) is not a multiple of input depth of filter ({f[3]})"
    else:
        words = f"input and filter must have the same depth: {depth} vs {f[3]}"
    _check_channels(ctx, depth, f[3], "input", words)
    return conv_shape(ctx)


def _sizes_words(depth: int | None, in_channels: int | None, name: str) -> str:
    return (f"{name} and filter_sizes must have the same number of channels. Got {depth} for "
            f"{name} and {in_channels} for filter_sizes")


def conv3d_backprop_input_shape(ctx: InferenceContext) -> list[TensorShape]:
    """The shape in ``input_sizes`` (5 entries), its channels checked against the filter's
    in TF's words, then the convolution family's checks."""
    sizes = vector_input(ctx, "input_sizes", (5,))
    f = image_input(ctx, "filter")
    if sizes is not None and min(sizes) >= 0:  # negative sizes: the family's message
        depth = to_nhwc(sizes, ctx.attrs["data_format"])[-1]
        _check_channels(ctx, depth, f[3], "input_sizes",
                        _sizes_words(depth, f[3], "input"))
    return conv_backprop_input_shape(ctx)


def conv3d_backprop_filter_shape(ctx: InferenceContext) -> list[TensorShape]:
    """The DHWIO shape in ``filter_sizes``, its in_channels checked against the input's
    channels in TF's words, then the convolution family's checks."""
    depth = to_nhwc(image_input(ctx, "input"), ctx.attrs["data_format"])[-1]
    sizes = vector_input(ctx, "filter_sizes", (5,))
    if sizes is not None and min(sizes) >= 0:
        _check_channels(ctx, depth, sizes[3], "input", _sizes_words(depth, sizes[3], "input"))
    return conv_backprop_filter_shape(ctx)


# ----------------------------------------------------------------------------- ops

_IMAGE = "A 5-D tensor in data_format."
_FILTER = "DHWIO: [planes, height, width, in_channels, out_channels]."
_OUT_BACKPROP = "The gradient of the forward convolution's output (its shape)."

CONV3D = register_op(OpDef(
    name="Conv3D",
    inputs=[ArgDef("input", type_attr="T", doc=_IMAGE),
            ArgDef("filter", type_attr="T", doc=_FILTER)],
    outputs=[ArgDef("output", type_attr="T", doc="The cross-correlation, in data_format.")],
    attrs=_conv_attrs(),
    shape_fn=conv3d_shape,
))
CONV3D_BACKPROP_INPUT_V2 = register_op(OpDef(
    name="Conv3DBackpropInputV2",
    inputs=[ArgDef("input_sizes", type_attr="Tshape",
                   doc="The forward input's shape, 5 entries in data_format order."),
            ArgDef("filter", type_attr="T", doc=_FILTER),
            ArgDef("out_backprop", type_attr="T", doc=_OUT_BACKPROP)],
    outputs=[ArgDef("output", type_attr="T", doc="The gradient of the forward input.")],
    attrs=_conv_attrs() + [AttrDef("Tshape", "type", default=dtypes.int32,
                                   allowed=dtypes.INTEGERS)],
    shape_fn=conv3d_backprop_input_shape,
))
CONV3D_BACKPROP_FILTER_V2 = register_op(OpDef(
    name="Conv3DBackpropFilterV2",
    inputs=[ArgDef("input", type_attr="T", doc=_IMAGE),
            ArgDef("filter_sizes", dtype=dtypes.int32,
                   doc="The filter's DHWIO shape, 5 entries."),
            ArgDef("out_backprop", type_attr="T", doc=_OUT_BACKPROP)],
    outputs=[ArgDef("output", type_attr="T", doc="The gradient of the filter (DHWIO).")],
    attrs=_conv_attrs(),
    shape_fn=conv3d_backprop_filter_shape,
))
Conv3D = make_wrapper(CONV3D)
Conv3DBackpropInputV2 = make_wrapper(CONV3D_BACKPROP_INPUT_V2)
Conv3DBackpropFilterV2 = make_wrapper(CONV3D_BACKPROP_FILTER_V2)

_ORIG_INPUT = "The forward pool's input."
_ORIG_OUTPUT = "The forward pool's output (the window maxima)."

MaxPool3D = make_wrapper(register_op(OpDef(
    name="MaxPool3D",
    inputs=[ArgDef("input", type_attr="T", doc=_IMAGE)],
    outputs=[ArgDef("output", type_attr="T", doc="The maximum of each window.")],
    attrs=_pool_attrs(required("T", "type", allowed=POOL_TYPES)),
    shape_fn=pool_shape,
)))
MaxPool3DGrad = make_wrapper(register_op(OpDef(
    name="MaxPool3DGrad",
    inputs=[ArgDef("orig_input", type_attr="TInput", doc=_ORIG_INPUT),
            ArgDef("orig_output", type_attr="TInput", doc=_ORIG_OUTPUT),
            ArgDef("grad", type_attr="T", doc="The gradient of orig_output.")],
    outputs=[ArgDef("output", type_attr="T",
                    doc="Each window's grad added to every element within 1e-5 of its "
                        "maximum.")],
    attrs=_pool_attrs(AttrDef("T", "type", default=dtypes.float32, allowed=POOL_TYPES),
                      AttrDef("TInput", "type", default=dtypes.float32, allowed=POOL_TYPES)),
    shape_fn=max_pool_grad_shape,
)))
MaxPool3DGradGrad = make_wrapper(register_op(OpDef(
    name="MaxPool3DGradGrad",
    inputs=[ArgDef("orig_input", type_attr="T", doc=_ORIG_INPUT),
            ArgDef("orig_output", type_attr="T", doc=_ORIG_OUTPUT),
            ArgDef("grad", type_attr="T", doc="A gradient of orig_input's shape.")],
    outputs=[ArgDef("output", type_attr="T",
                    doc="grad at each window's first element equal to its maximum.")],
    attrs=_pool_attrs(required("T", "type", allowed=GRAD_GRAD_TYPES)),
    shape_fn=max_pool_grad_shape,
)))
AvgPool3D = make_wrapper(register_op(OpDef(
    name="AvgPool3D",
    inputs=[ArgDef("input", type_attr="T", doc=_IMAGE)],
    outputs=[ArgDef("output", type_attr="T",
                    doc="The mean of each window's in-bounds elements (padding not "
                        "counted).")],
    attrs=_pool_attrs(required("T", "type", allowed=CONV_TYPES)),
    shape_fn=pool_shape,
)))
AvgPool3DGrad = make_wrapper(register_op(OpDef(
    name="AvgPool3DGrad",
    inputs=[ArgDef("orig_input_shape", dtype=dtypes.int32,
                   doc="The forward pool's input shape, 5 entries in data_format order."),
            ArgDef("grad", type_attr="T", doc="The gradient of the forward pool's output.")],
    outputs=[ArgDef("output", type_attr="T",
                    doc="Each window's grad over its in-bounds count, added to every "
                        "in-bounds element of the window.")],
    attrs=_pool_attrs(required("T", "type", allowed=CONV_TYPES)),
    shape_fn=avg_pool_grad_shape,
)))


# ----------------------------------------------------------------------------- gradients

_POOL_ATTRS = ("ksize", "strides", "padding", "data_format")


register_convolution_gradients(Conv3D, Conv3DBackpropInputV2, Conv3DBackpropFilterV2)


@RegisterGradient("MaxPool3D")
def _max_pool3d_grad(scope, op, grads):
    return [MaxPool3DGrad(scope, op.inputs[0], op.outputs[0], grads[0],
                          **copy_attrs(op, _POOL_ATTRS))]


@RegisterGradient("MaxPool3DGrad")
def _max_pool3d_grad_grad(scope, op, grads):
    """MaxPool3DGrad is linear in 'grad'; TF differentiates it with MaxPool3DGradGrad (a
    gather at each window's first maximum: the adjoint where no window holds two elements
    within 1e-5 of its maximum) and gives orig_input and orig_output none."""
    x, y, _ = op.inputs
    return [None, None, MaxPool3DGradGrad(scope, x, y, grads[0], **copy_attrs(op, _POOL_ATTRS))]


@RegisterGradient("MaxPool3DGradGrad")
def _max_pool3d_grad_grad_grad(scope, op, grads):
    """MaxPool3DGradGrad is linear in 'grad': TF's adjoint is MaxPool3DGrad."""
    x, y, _ = op.inputs
    return [None, None, MaxPool3DGrad(scope, x, y, grads[0], **copy_attrs(op, _POOL_ATTRS))]


@RegisterGradient("AvgPool3D")
def _avg_pool3d_grad(scope, op, grads):
    return [AvgPool3DGrad(scope, m.Shape(scope, op.inputs[0]), grads[0],
                          **copy_attrs(op, _POOL_ATTRS))]


@RegisterGradient("AvgPool3DGrad")
def _avg_pool3d_grad_grad(scope, op, grads):
    """AvgPool3DGrad is the adjoint of the (linear) AvgPool3D, so its adjoint is AvgPool3D;
    orig_input_shape gets none."""
    return [None, AvgPool3D(scope, grads[0], **copy_attrs(op, _POOL_ATTRS))]
