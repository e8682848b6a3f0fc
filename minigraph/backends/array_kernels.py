"""CPU kernels of the plumbing ops (numpy, the same on every backend)."""

from __future__ import annotations

import numpy as np

from minigraph.backends.registry import register_kernel


@register_kernel("Const")
def const(op, inputs, ctx):
    return [op.attrs["value"]]


@register_kernel("Const", backend="float64", when=lambda op: op.attrs["dtype"].is_floating)
def const_float64(op, inputs, ctx):
    """Floating constants promoted, as the float64 session's feeds are."""
    return [op.attrs["value"].astype(np.float64)]


@register_kernel("Identity", "StopGradient", "Snapshot", "PreventGradient", "IdentityN",
                 "CheckNumerics",
                 backend=("reference", "opencl"))
def identity(op, inputs, ctx):
    """The inputs themselves, uncopied (values are never updated in place)."""
    return list(inputs)


@register_kernel("NoOp")
def no_op(op, inputs, ctx):
    return []


@register_kernel("Placeholder")
def placeholder(op, inputs, ctx):
    """Never runs: a plan with an unfed placeholder is refused before any step."""
    raise ctx.error(op, f"You must feed a value for placeholder tensor '{op.name}' with "
                        f"dtype {op.attrs['dtype'].name} and shape {op.attrs['shape']}")


@register_kernel("Assert")
def assert_(op, inputs, ctx):
    """Nothing left to do: the run-time check (ops.array_ops) already held."""
    return []
