"""Optimizer update ops with TensorFlow's formulas; each updates Variables inside Run.

* ``ApplyGradientDescent``: ``var -= alpha * delta``.
* ``ApplyMomentum``: ``accum = accum * momentum + grad``; ``var -= lr * accum``, or with
  Nesterov ``var -= lr * grad + lr * momentum * accum``.
* ``ApplyAdam``: ``lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t)``,
  ``m += (grad - m)(1 - beta1)``, ``v += (grad^2 - v)(1 - beta2)``,
  ``var -= lr_t * m / (sqrt(v) + epsilon)`` (Nesterov: ``m`` replaced by
  ``beta1 m + (1 - beta1) grad``).

Each returns the updated variable (``out``).
"""

from __future__ import annotations

from minigraph.framework.gradient_registry import NotDifferentiable
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
from minigraph.ops.math_ops import FLOATS
from minigraph.ops.state_ops import variable_of

# The wrappers minigraph.ops exports.
__all__ = ["ApplyAdam", "ApplyGradientDescent", "ApplyMomentum"]


def _training_shape(state_inputs: tuple[str, ...], grad_input: str):
    def shape_fn(ctx: InferenceContext) -> list[TensorShape]:
        for name in state_inputs:
            variable_of(ctx.inputs[ctx.op_def.input_index(name)], ctx.op_def.name, name)
        shape = ctx.input_shape("var")
        for name in state_inputs[1:] + (grad_input,):
            shape = ctx.merge_shapes(shape, ctx.input_shape(name),
                                     f"input '{name}' must have the shape of 'var' {shape}, "
                                     f"got {ctx.input_shape(name)}")
        for arg in ctx.op_def.inputs:
            if arg.name not in state_inputs + (grad_input,):
                ctx.with_rank(arg.name, 0, " (a scalar)")
        return [shape]

    return shape_fn


def _training_op(name: str, inputs: list[str], state: tuple[str, ...], grad: str,
                 extra_attrs: list[AttrDef] = ()) -> OpDef:
    return register_op(OpDef(
        name=name,
        inputs=[ArgDef(n, type_attr="T", is_ref=n in state) for n in inputs],
        outputs=[ArgDef("out", type_attr="T")],
        attrs=[required("T", "type", allowed=FLOATS), AttrDef("use_locking", "bool",
                                                               default=False)]
        + list(extra_attrs),
        shape_fn=_training_shape(state, grad),
        is_stateful=True,
    ))


ApplyGradientDescent = make_wrapper(_training_op(
    "ApplyGradientDescent", ["var", "alpha", "delta"], ("var",), "delta"))
ApplyMomentum = make_wrapper(_training_op(
    "ApplyMomentum", ["var", "accum", "lr", "grad", "momentum"], ("var", "accum"), "grad",
    [AttrDef("use_nesterov", "bool", default=False)]))
ApplyAdam = make_wrapper(_training_op(
    "ApplyAdam", ["var", "m", "v", "beta1_power", "beta2_power", "lr", "beta1", "beta2",
                  "epsilon", "grad"], ("var", "m", "v"), "grad",
    [AttrDef("use_nesterov", "bool", default=False)]))
NotDifferentiable("ApplyGradientDescent", "ApplyMomentum", "ApplyAdam")
