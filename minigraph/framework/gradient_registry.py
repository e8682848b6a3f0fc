"""The gradient registry: a plain table from op type to gradient function
(``@mg.RegisterGradient("FusedBatchNormV3")``), filled by the op modules, read by
``gradients.AddSymbolicGradients``. It knows no op, so every layer can register into it.

A gradient function is ``grad_fn(scope, op, grad_outputs) -> list`` with one entry per input
of ``op``: an Output, or None where the input gets no gradient (TF's ``NoGradient``).
``grad_outputs[i]`` is the cotangent of ``op.outputs[i]`` or None when nothing downstream
needs that output (``ops.math_ops.cotangent_or_zeros`` turns it into zeros). Gradient
functions build ordinary minigraph ops, so the gradient graph is differentiable again.
"""

from __future__ import annotations

from collections.abc import Callable

from minigraph.framework.errors import NotFoundError
from minigraph.framework.graph import Operation
from minigraph.framework.scope import Scope

GradFn = Callable[[Scope, Operation, list], list]
_GRADIENTS: dict[str, GradFn | None] = {}


def RegisterGradient(op_type: str) -> Callable[[GradFn], GradFn]:
    """Decorator registering ``grad_fn`` as the gradient of ``op_type``."""

    def decorate(grad_fn: GradFn) -> GradFn:
        if op_type in _GRADIENTS:
            raise ValueError(f"a gradient for '{op_type}' is already registered")
        _GRADIENTS[op_type] = grad_fn
        return grad_fn

    return decorate


def NotDifferentiable(*op_types: str) -> None:
    """Declare ops whose inputs never get gradients (shape ops, integer ops)."""
    for op_type in op_types:
        _GRADIENTS[op_type] = None


def get_gradient_function(op: Operation) -> GradFn | None:
    """The op's gradient function, None if it is not differentiable; raise if unknown."""
    try:
        return _GRADIENTS[op.type]
    except KeyError:
        raise NotFoundError(
            f"No gradient defined for operation '{op.name}' (op type: {op.type}); it lies on the "
            f"path from the outputs to the inputs of AddSymbolicGradients. Register one with "
            f"@mg.RegisterGradient('{op.type}')") from None


def registered_gradients() -> dict[str, GradFn | None]:
    """A copy of the table: op type -> gradient function, or None for ops declared not
    differentiable (coverage checks read it)."""
    return dict(_GRADIENTS)
