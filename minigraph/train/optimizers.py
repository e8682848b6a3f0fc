"""Optimizers that build TF's update ops (ApplyGradientDescent/Momentum/Adam) for variables.

``optimizer.minimize(scope, loss, variables)`` adds the gradients (AddSymbolicGradients),
the slot variables the method needs (momentum accumulators, Adam's m, v and beta powers,
all registered as initializers) and one update op per variable, and returns the list of
update ops to run as targets.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from minigraph.framework.graph import Operation, Output
from minigraph.framework.scope import Scope
from minigraph.gradients.add_symbolic_gradients import AddSymbolicGradients
from minigraph.ops.array_ops import Const
from minigraph.ops.math_ops import Mul
from minigraph.ops.state_ops import Assign, constant_fill
from minigraph.ops.training_ops import ApplyAdam, ApplyGradientDescent, ApplyMomentum
from minigraph.train.variables import variable


def _zeros(scope: Scope, shape, dtype) -> Output:
    return constant_fill(scope, list(shape), 0.0, dtype)


def _slot(scope: Scope, var: Output, slot: str) -> Output:
    return variable(scope, f"{var.op.name}/{slot}", list(var.shape.dims), _zeros, var.dtype)


class Optimizer:
    """Base: ``minimize`` = gradients + ``apply``; subclasses define ``apply_one``."""

    def minimize(self, scope: Scope, loss: Output, variables: Sequence[Output]
                 ) -> list[Operation]:
        grads = AddSymbolicGradients(scope, [loss], list(variables))
        return self.apply(scope, list(zip(grads, variables)))

    def apply(self, scope: Scope, grads_and_vars: list[tuple[Output, Output]]
              ) -> list[Operation]:
        scope = scope.NewSubScope(type(self).__name__)
        updates = [self.apply_one(scope, grad, var) for grad, var in grads_and_vars
                   if grad is not None]
        return updates + self.finish(scope, updates)

    def apply_one(self, scope: Scope, grad: Output, var: Output) -> Operation:
        raise NotImplementedError

    def finish(self, scope: Scope, updates: list[Operation]) -> list[Operation]:
        """Ops to run after every variable update (Adam's beta powers)."""
        return []


def _scalar(scope: Scope, value: float, like: Output) -> Output:
    return Const(scope, np.asarray(value, like.dtype.np_dtype))


class GradientDescent(Optimizer):
    def __init__(self, learning_rate: float) -> None:
        self.learning_rate = learning_rate

    def apply_one(self, scope, grad, var):
        return ApplyGradientDescent(scope, var, _scalar(scope, self.learning_rate, var),
                                    grad).op


class Momentum(Optimizer):
    def __init__(self, learning_rate: float, momentum: float = 0.9,
                 use_nesterov: bool = False) -> None:
        self.learning_rate, self.momentum, self.use_nesterov = learning_rate, momentum, \
            use_nesterov

    def apply_one(self, scope, grad, var):
        accum = _slot(scope, var, "Momentum")
        return ApplyMomentum(scope, var, accum, _scalar(scope, self.learning_rate, var), grad,
                             _scalar(scope, self.momentum, var),
                             use_nesterov=self.use_nesterov).op


class Adam(Optimizer):
    """Adam with TF's bias correction through the beta1^t / beta2^t power variables."""

    def __init__(self, learning_rate: float = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-7) -> None:
        self.learning_rate, self.beta1, self.beta2, self.epsilon = (
            learning_rate, beta1, beta2, epsilon)
        self._powers: tuple[Output, Output] | None = None

    def _beta_powers(self, scope: Scope, like: Output) -> tuple[Output, Output]:
        if self._powers is None:
            self._powers = tuple(
                variable(scope, name, [], lambda s, shape, dtype, v=value: Const(
                    s, np.asarray(v, dtype.np_dtype)), like.dtype)
                for name, value in (("beta1_power", self.beta1), ("beta2_power", self.beta2)))
        return self._powers

    def apply_one(self, scope, grad, var):
        beta1_power, beta2_power = self._beta_powers(scope, var)
        m, v = _slot(scope, var, "m"), _slot(scope, var, "v")
        return ApplyAdam(scope, var, m, v, beta1_power, beta2_power,
                         *(_scalar(scope, value, var) for value in (
                             self.learning_rate, self.beta1, self.beta2, self.epsilon)),
                         grad).op

    def finish(self, scope, updates):
        """beta_power *= beta, after every ApplyAdam of this step."""
        if self._powers is None:
            return []
        after = scope.WithControlDependencies(updates)
        return [Assign(after, power, Mul(after, power, _scalar(after, beta, power))).op
                for power, beta in zip(self._powers, (self.beta1, self.beta2))]
