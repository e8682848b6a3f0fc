"""Helpers the numpy kernels share: compute types and exact branch-free selects."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from minigraph.framework.errors import InvalidArgumentError

HALF = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


_INT_OF_SIZE = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}



def select(take: np.ndarray, new: np.ndarray, old: np.ndarray) -> np.ndarray:
    """``np.where(take, new, old)`` for same-dtype arrays, exact and branch-free."""
    ints = _INT_OF_SIZE[old.dtype.itemsize]
    o, n = old.view(ints), np.asarray(new).view(ints)
    return (o ^ ((o ^ n) & -take.astype(ints))).view(old.dtype)


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
