"""Helpers the numpy kernels share: the compute type of a storage dtype, the error maker
the window geometry takes, and the output range a window offset lands in."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from minigraph.framework.errors import InvalidArgumentError

HALF = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


def fail_for(op):
    """The error maker the window geometry takes: messages name the node."""
    return lambda message: InvalidArgumentError(f"{op.type} '{op.name}': {message}")


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """float32 for the half types, the dtype itself otherwise."""
    return np.dtype(np.float32) if np.dtype(dtype) in HALF else np.dtype(dtype)


def placed_rows(offset: int, stride: int, count: int, length: int) -> tuple[int, int]:
    """The p in [first, last) with 0 <= offset + p*stride < length (and 0 <= p < count)."""
    first = 0 if offset >= 0 else (-offset + stride - 1) // stride
    last = 0 if length - 1 - offset < 0 else min(count, (length - 1 - offset) // stride + 1)
    return first, max(first, last)
