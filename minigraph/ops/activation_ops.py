"""Activation ops: ``Relu``, ``Relu6`` and their gradients (TF's names, inputs, outputs):

* ``Relu``: ``max(features, 0)``; ``ReluGrad``: ``gradients * (features > 0)``;
* ``Relu6``: ``min(max(features, 0), 6)``; ``Relu6Grad``:
  ``gradients * (0 < features < 6)``.

NaN features propagate; gradients are multiplied by their 0/1 mask as in TensorFlow, so an
infinite or NaN gradient where the mask is 0 gives NaN. The gradients are at the bottom.
"""

from __future__ import annotations

from minigraph.framework.gradient_registry import RegisterGradient
from minigraph.framework.op_def import (
    ArgDef,
    InferenceContext,
    OpDef,
    make_wrapper,
    register_op,
    required,
)
from minigraph.framework.tensor_shape import TensorShape
from minigraph.ops.math_ops import NUMBERS

# The wrappers minigraph.ops exports.
__all__ = ["Relu", "Relu6", "Relu6Grad", "ReluGrad"]

# ----------------------------------------------------------------------------- relu


def _relu_grad_shape(ctx: InferenceContext) -> list[TensorShape]:
    gradients, features = ctx.input_shape("gradients"), ctx.input_shape("features")
    return [ctx.merge_shapes(gradients, features, f"inputs 'gradients' and 'features' must "
                                                  f"have the same shape, got {gradients} and "
                                                  f"{features}")]


def _activation(name: str) -> OpDef:
    """An elementwise activation: ``features`` -> ``activations`` of the same shape."""
    return register_op(OpDef(
        name=name,
        inputs=[ArgDef("features", type_attr="T")],
        outputs=[ArgDef("activations", type_attr="T")],
        attrs=[required("T", "type", allowed=NUMBERS)],
        shape_fn=lambda ctx: [ctx.input_shapes[0]],
    ))


def _activation_grad(name: str) -> OpDef:
    """Its gradient: (``gradients``, ``features``) of one shape -> ``backprops``."""
    return register_op(OpDef(
        name=name,
        inputs=[ArgDef("gradients", type_attr="T"), ArgDef("features", type_attr="T")],
        outputs=[ArgDef("backprops", type_attr="T")],
        attrs=[required("T", "type", allowed=NUMBERS)],
        shape_fn=_relu_grad_shape,
    ))


Relu = make_wrapper(_activation("Relu"))
ReluGrad = make_wrapper(_activation_grad("ReluGrad"))
Relu6 = make_wrapper(_activation("Relu6"))
Relu6Grad = make_wrapper(_activation_grad("Relu6Grad"))


# ----------------------------------------------------------------------------- gradients


@RegisterGradient("Relu")
def _relu_grad(scope, op, grads):
    return [ReluGrad(scope, grads[0], op.outputs[0])]


@RegisterGradient("ReluGrad")
def _relu_grad_grad(scope, op, grads):
    """Linear in 'gradients' with the same mask; zero (None) almost everywhere in features."""
    return [ReluGrad(scope, grads[0], op.inputs[1]), None]


@RegisterGradient("Relu6")
def _relu6_grad(scope, op, grads):
    """The mask from the output, as TF: 0 < min(max(x, 0), 6) < 6 iff 0 < x < 6."""
    return [Relu6Grad(scope, grads[0], op.outputs[0])]


@RegisterGradient("Relu6Grad")
def _relu6_grad_grad(scope, op, grads):
    return [Relu6Grad(scope, grads[0], op.inputs[1]), None]


