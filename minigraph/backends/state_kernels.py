"""Kernels of the variable ops (``ops.state_ops``): Variable, Assign, RandomUniform.

They use the session's :class:`~minigraph.client.state.SessionState` (``ctx.state``):
variables are replaced under its lock, random streams are seeded per op.
"""

from __future__ import annotations

import numpy as np

from minigraph.backends.registry import register_kernel


@register_kernel("Variable")
def variable(op, inputs, ctx):
    return [ctx.state.read(op.name)]


@register_kernel("Assign")
def assign(op, inputs, ctx):
    ref, value = op.inputs[0], inputs[1]  # the shape function checked validate_shape
    with ctx.state.lock:
        return [ctx.state.write(ref.op.name, value.astype(ref.dtype.np_dtype, copy=False))]


@register_kernel("RandomUniform")
def random_uniform(op, inputs, ctx):
    shape = inputs[0].tolist()
    values = ctx.state.generator(op).random(shape, dtype=np.float64)
    return [values.astype(op.attrs["dtype"].np_dtype)]


