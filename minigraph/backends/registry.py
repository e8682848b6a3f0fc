"""Kernel registry: which Python function runs an op type on the CPU.

A kernel is ``kernel(op, inputs, math) -> list of numpy arrays``: ``op`` is the node (for its
attrs), ``inputs`` the already validated input values, and ``math`` the CPU math backend the
session chose (``backends.reference`` or ``backends.native``), which the batch-norm kernels
use for their heavy loops. Ops with only numpy kernels ignore ``math``.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import numpy as np

from minigraph.framework.errors import NotFoundError
from minigraph.framework.graph import Operation

Kernel = Callable[[Operation, list[np.ndarray], ModuleType], list[np.ndarray]]
_KERNELS: dict[str, Kernel] = {}


def register_kernel(*op_types: str) -> Callable[[Kernel], Kernel]:
    def decorate(kernel: Kernel) -> Kernel:
        for op_type in op_types:
            if op_type in _KERNELS:
                raise ValueError(f"a kernel for '{op_type}' is already registered")
            _KERNELS[op_type] = kernel
        return kernel

    return decorate


def get_kernel(op_type: str) -> Kernel:
    try:
        return _KERNELS[op_type]
    except KeyError:
        raise NotFoundError(f"no CPU kernel registered for op type '{op_type}'") from None
