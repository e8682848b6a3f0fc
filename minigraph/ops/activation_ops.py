"""Activation ops: ``Relu`` and ``ReluGrad`` (TF's names, inputs and outputs); the
gradients are at the bottom.
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
__all__ = ["Relu", "ReluGrad"]

# ----------------------------------------------------------------------------- relu


def _relu_grad_shape(ctx: InferenceContext) -> list[TensorShape]:
    gradients, features = ctx.input_shape("gradients"), ctx.input_shape("features")
    return [ctx.merge_shapes(gradients, features, f"inputs 'gradients' and 'features' must "
                                                  f"have the same shape, got {gradients} and "
                                                  f"{features}")]


Relu = make_wrapper(register_op(OpDef(
    name="Relu",
    inputs=[ArgDef("features", type_attr="T")],
    outputs=[ArgDef("activations", type_attr="T")],
    attrs=[required("T", "type", allowed=NUMBERS)],
    shape_fn=lambda ctx: [ctx.input_shapes[0]],
)))
ReluGrad = make_wrapper(register_op(OpDef(
    name="ReluGrad",
    inputs=[ArgDef("gradients", type_attr="T"), ArgDef("features", type_attr="T")],
    outputs=[ArgDef("backprops", type_attr="T")],
    attrs=[required("T", "type", allowed=NUMBERS)],
    shape_fn=_relu_grad_shape,
)))


# ----------------------------------------------------------------------------- gradients


@RegisterGradient("Relu")
def _relu_grad(scope, op, grads):
    return [ReluGrad(scope, grads[0], op.outputs[0])]


@RegisterGradient("ReluGrad")
def _relu_grad_grad(scope, op, grads):
    """Linear in 'gradients' with the same mask; zero (None) almost everywhere in features."""
    return [ReluGrad(scope, grads[0], op.inputs[1]), None]


