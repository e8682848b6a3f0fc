"""Gradients that differentiate a subgraph themselves, so they need the autodiff engine:
registered here, above the op modules (which never import ``gradients``).

* ``FusedBatchNormGradGrad`` (third order and beyond): the second order is rebuilt from the
  decomposed first-order gradient (``ops.batch_norm.decomposed_batch_norm_grad``) by
  differentiating it once, then differentiated again.
"""

from __future__ import annotations

from minigraph.framework.gradient_registry import RegisterGradient
from minigraph.gradients.add_symbolic_gradients import AddSymbolicGradients
from minigraph.ops.array_ops import Identity
from minigraph.ops.batch_norm import decomposed_batch_norm_grad, grad_attrs


@RegisterGradient("FusedBatchNormGradGrad")
def _fused_batch_norm_grad_grad_grad(scope, op, grads):
    """Third order: rebuild the second order from the decomposed first-order gradient
    (differentiated once), then differentiate that. Exact at every further order too.

    Each differentiated input goes through its own Identity first: one tensor may fill
    several roles (the same cotangent fed as y_backprop and grad_x_backprop, say), and the
    roles must get separate gradients, not each the total one."""
    dy, x, scale, gx, gscale, goffset = (Identity(scope, op.inputs[i]) for i in (0, 1, 2, 5, 6, 7))
    mean, variance = op.inputs[3:5]
    first = decomposed_batch_norm_grad(scope, dy, x, scale, mean, variance, **grad_attrs(op))
    second = AddSymbolicGradients(scope, list(first), [dy, x, scale], [gx, gscale, goffset],
                                  stop_at_inputs=True)
    live = [(out, g) for out, g in zip(second, grads) if out is not None and g is not None]
    wrt = [dy, x, scale, gx, gscale, goffset]
    third = AddSymbolicGradients(scope, [o for o, _ in live], wrt, [g for _, g in live],
                                 stop_at_inputs=True)
    return third[:3] + [None, None] + third[3:]
