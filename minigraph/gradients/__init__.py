"""Automatic differentiation: AddSymbolicGradients, the gradient registry, the checker."""
