"""CPU kernels of the plumbing ops (numpy, the same on every backend)."""

from __future__ import annotations

import numpy as np

from minigraph.backends.registry import register_kernel
from minigraph.framework.errors import InvalidArgumentError


@register_kernel("Const")
def const(op, inputs, math):
    value = op.attrs["value"]
    if getattr(math, "FLOAT64", False) and op.attrs["dtype"].is_floating:
        return [value.astype(np.float64)]
    return [value]


@register_kernel("Identity")
def identity(op, inputs, math):
    return [inputs[0]]


@register_kernel("Placeholder")
def placeholder(op, inputs, math):
    raise InvalidArgumentError(f"You must feed a value for placeholder tensor '{op.name}' with "
                               f"dtype {op.attrs['dtype'].name} and shape {op.attrs['shape']}")
