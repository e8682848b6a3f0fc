"""Automatic differentiation: ``AddSymbolicGradients`` and the gradients that need it.

Importing the package registers those gradients (``higher_order``); the finite-difference
checker lives in ``minigraph.testing``.
"""

from minigraph.gradients import higher_order  # noqa: F401  (registers gradients)
from minigraph.gradients.add_symbolic_gradients import AddSymbolicGradients

__all__ = ["AddSymbolicGradients"]
