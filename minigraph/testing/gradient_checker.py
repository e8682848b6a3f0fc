"""Finite-difference gradient checks, in the spirit of ``tf.test.compute_gradient``.

``compute_gradient`` returns, for each x, the symbolic Jacobian (built with
AddSymbolicGradients and evaluated row by row with one-hot cotangents) and the numerical
Jacobian (central differences ``(y(x + d e_i) - y(x - d e_i)) / 2d``). Both are evaluated
on the ``"float64"`` backend, which promotes every floating tensor to float64, so the
comparison is not drowned in float32 rounding and holds at every order: to check a
second-order gradient, pass a first-order gradient tensor as ``y``.

Jacobians have shape ``(x.size, y.size)``, as in TensorFlow.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from minigraph.client.session import ClientSession
from minigraph.framework.errors import InvalidArgumentError
from minigraph.framework.graph import Output
from minigraph.framework.scope import Scope
from minigraph.gradients.add_symbolic_gradients import AddSymbolicGradients
from minigraph.ops.array_ops import Placeholder


def compute_gradient(xs: Sequence[Output], x_values: Sequence[np.ndarray], y: Output, *,
                     feeds: Mapping[Output, Any] | None = None, delta: float = 1e-6
                     ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(theoretical, numerical) Jacobians of ``y`` with respect to each of ``xs``.

    ``xs`` are tensors to perturb (usually placeholders) with values ``x_values``;
    ``feeds`` gives every other tensor the graph needs.
    """
    if len(xs) != len(x_values):
        raise InvalidArgumentError(f"compute_gradient: {len(xs)} xs but {len(x_values)} values")
    graph = y.graph
    scope = Scope(graph).NewSubScope("gradient_checker")
    cotangent = Placeholder(scope.WithOpName("dy"), y.dtype, shape=y.shape)
    grads = AddSymbolicGradients(scope, [y], list(xs), [cotangent])
    session = ClientSession(graph, backend="float64")
    base = {k: v for k, v in (feeds or {}).items()}
    values = [np.asarray(v, np.float64) for v in x_values]
    base.update(zip(xs, values))
    y_shape = np.shape(session.Run(base, y))  # the runtime shape; static dims may be unknown
    y_size = int(np.prod(y_shape))

    theoretical = [np.zeros((v.size, y_size)) for v in values]
    live = [(i, g) for i, g in enumerate(grads) if g is not None]
    for j in range(y_size):
        one_hot = np.zeros(y_size)
        one_hot[j] = 1
        rows = session.Run({**base, cotangent: one_hot.reshape(y_shape)},
                           [g for _, g in live]) if live else []
        for (i, _), row in zip(live, rows):
            theoretical[i][:, j] = np.asarray(row, np.float64).reshape(-1)

    numerical = []
    for i, value in enumerate(values):
        jacobian = np.zeros((value.size, y_size))
        for k in range(value.size):
            shifted = []
            for sign in (1, -1):
                perturbed = value.copy().reshape(-1)
                perturbed[k] += sign * delta
                out = session.Run({**base, xs[i]: perturbed.reshape(value.shape)}, y)
                shifted.append(np.asarray(out, np.float64).reshape(-1))
            jacobian[k] = (shifted[0] - shifted[1]) / (2 * delta)
        numerical.append(jacobian)
    return theoretical, numerical


def max_error(theoretical: Sequence[np.ndarray], numerical: Sequence[np.ndarray]) -> float:
    """The largest absolute difference between matching Jacobian entries."""
    return max((float(np.max(np.abs(t - n))) if t.size else 0.0)
               for t, n in zip(theoretical, numerical))
