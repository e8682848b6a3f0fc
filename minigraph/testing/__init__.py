"""Tools for testing graphs, outside the core: the finite-difference gradient checker."""

from minigraph.testing import gradient_checker

__all__ = ["gradient_checker"]
