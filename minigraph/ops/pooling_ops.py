"""Pooling ops: ``MaxPool``, ``AvgPool`` and their gradients (``MaxPoolGrad``,
``MaxPoolGradGrad``, ``AvgPoolGrad``), TF's names, inputs, attrs and defaults; NHWC (default)
or NCHW. The window geometry is in ``ops.window``; the gradients are at the bottom. The
shape functions take their rank from ``data_format``: ``ops.volumetric_ops`` uses them for
MaxPool3D and its gradients.
"""

from __future__ import annotations

from collections.abc import Sequence

from minigraph.framework import dtypes
from minigraph.framework.errors import InvalidArgumentError
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
from minigraph.ops.math_ops import FLOATS, NUMBERS
from minigraph.ops.window import (
    FORMATS,
    PADDINGS,
    PADDINGS_EXPLICIT,
    Dims,
    Fail,
    Window,
    cached_geometry,
    copy_attrs,
    from_nhwc,
    image_input,
    make_window,
    merge_dims,
    mismatch,
    to_nhwc,
    vector_input,
)

# The wrappers minigraph.ops exports.
__all__ = ["AvgPool", "AvgPoolGrad", "MaxPool", "MaxPoolGrad", "MaxPoolGradGrad"]

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


@cached_geometry
def pool_output_shape(attrs: dict, fail: Fail, input_shape: Dims, input_name: str = "input"
                      ) -> tuple[tuple, Window]:
    """(output shape in data_format order, window) of a pool over ``input_shape`` (the shape
    of input ``input_name``)."""
    fmt = attrs["data_format"]
    n, *spatial, c = to_nhwc(input_shape, fmt)
    window = make_window(attrs, fail, spatial, input_name=input_name)
    return from_nhwc((n, *window.out, c), fmt), window


def _check_same(ctx: InferenceContext, name: str, shape: Dims, expected: Dims, why: str
                ) -> tuple:
    if any(mismatch(a, b) for a, b in zip(shape, expected)):
        raise ctx.error(f"input '{name}' must have shape {dims_text(expected)} ({why}), "
                        f"got {dims_text(shape)}")
    return tuple(merge_dims(a, b) for a, b in zip(shape, expected))


def pool_shape(ctx: InferenceContext) -> list[TensorShape]:
    name = ctx.op_def.inputs[0].name
    return [TensorShape(pool_output_shape(ctx.attrs, ctx.error, image_input(ctx, name), name)[0])]


def max_pool_grad_shape(ctx: InferenceContext) -> list[TensorShape]:
    """MaxPoolGrad (MaxPool3DGrad): orig_input's shape; MaxPoolGradGrad (MaxPool3DGradGrad):
    orig_output's. Both check all three inputs against each other."""
    x = image_input(ctx, "orig_input")
    y_expected, _ = pool_output_shape(ctx.attrs, ctx.error, x, "orig_input")
    y = _check_same(ctx, "orig_output", image_input(ctx, "orig_output"), y_expected,
                    "the pool of orig_input")
    if not ctx.op_def.name.endswith("GradGrad"):
        _check_same(ctx, "grad", image_input(ctx, "grad"), y, "the shape of orig_output")
        return [TensorShape(x)]
    _check_same(ctx, "grad", image_input(ctx, "grad"), x, "the shape of orig_input")
    return [TensorShape(y)]


def avg_pool_grad_shape(ctx: InferenceContext) -> list[TensorShape]:
    """AvgPoolGrad (AvgPool3DGrad): the shape in ``orig_input_shape`` (4 or 5 entries, as
    data_format says), checked against grad."""
    fmt = ctx.attrs["data_format"]
    dy = image_input(ctx, "grad")
    sizes = vector_input(ctx, "orig_input_shape", (len(fmt),))
    if sizes is None:
        n, *spatial, c = to_nhwc(dy, fmt)
        return [TensorShape(from_nhwc((n, *(None,) * len(spatial), c), fmt))]
    if any(s < 0 for s in sizes):
        raise ctx.error(f"input 'orig_input_shape' must be non-negative, got {sizes}")
    expected, _ = pool_output_shape(ctx.attrs, ctx.error, sizes, "orig_input_shape")
    _check_same(ctx, "grad", dy, expected, f"the pool of an input of shape {dims_text(sizes)}")
    return [TensorShape(sizes)]


POOL_TYPES = NUMBERS
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


# ----------------------------------------------------------------------------- gradients

_POOL_ATTRS = ("ksize", "strides", "padding", "explicit_paddings", "data_format")


@RegisterGradient("MaxPool")
def _max_pool_grad(scope, op, grads):
    return [MaxPoolGrad(scope, op.inputs[0], op.outputs[0], grads[0],
                        **copy_attrs(op, _POOL_ATTRS))]


@RegisterGradient("MaxPoolGrad")
def _max_pool_grad_grad(scope, op, grads):
    """MaxPoolGrad is linear in 'grad' (a scatter to the argmax): its adjoint gathers."""
    if op.attrs["padding"] == "EXPLICIT":
        raise InvalidArgumentError(
            f"gradient of MaxPoolGrad '{op.name}': MaxPoolGradGrad has no explicit_paddings "
            f"(as in TensorFlow), so padding EXPLICIT cannot be differentiated twice")
    x, y, _ = op.inputs
    attrs = copy_attrs(op, _POOL_ATTRS)
    attrs.pop("explicit_paddings", None)
    return [None, None, MaxPoolGradGrad(scope, x, y, grads[0], **attrs)]


@RegisterGradient("MaxPoolGradGrad")
def _max_pool_grad_grad_grad(scope, op, grads):
    x, y, _ = op.inputs
    return [None, None, MaxPoolGrad(scope, x, y, grads[0], **copy_attrs(op, _POOL_ATTRS))]


@RegisterGradient("AvgPool")
def _avg_pool_grad(scope, op, grads):
    return [AvgPoolGrad(scope, m.Shape(scope, op.inputs[0]), grads[0],
                        **copy_attrs(op, _POOL_ATTRS))]


@RegisterGradient("AvgPoolGrad")
def _avg_pool_grad_grad(scope, op, grads):
    """AvgPoolGrad is the adjoint of the (linear) AvgPool, so its adjoint is AvgPool."""
    return [None, AvgPool(scope, grads[0], **copy_attrs(op, _POOL_ATTRS))]


