"""Memory limits: refuse a tensor this machine cannot hold before anything is allocated.

A shape claimed by a feed (a 0-stride view "holding" 2**40 elements), by a Fill's ``dims``
or by attrs could otherwise end in numpy's ``MemoryError`` or ``array is too big`` half-way
through a kernel, or in the machine swapping. A tensor larger than the physical memory
raises :class:`ResourceExhaustedError` naming the op or feed, like TensorFlow's allocator.
"""

from __future__ import annotations

import functools
import os

import numpy as np

from minigraph.framework.errors import ResourceExhaustedError
from minigraph.framework.tensor_shape import TensorShape


@functools.lru_cache(maxsize=1)
def memory_bytes() -> int:
    """This machine's physical memory in bytes (64 GiB when the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # pragma: no cover - not POSIX
        return 64 << 30


def _refuse(nbytes: int, what: str, shape: object) -> None:
    raise ResourceExhaustedError(
        f"{what}: a tensor of shape {shape} needs {nbytes:,} bytes, more than this "
        f"machine's {memory_bytes():,} bytes of memory; nothing was allocated")


def check_allocation(shape: TensorShape, itemsize: int, what: str) -> None:
    """Refuse an output of a fully known ``shape`` that cannot fit in memory."""
    elements = shape.num_elements()
    if elements is not None and elements * itemsize > memory_bytes():
        _refuse(elements * itemsize, what, shape)


def check_feed_size(array: np.ndarray, what: str) -> None:
    """Refuse a fed array (a broadcast view may claim any size) that cannot fit in memory."""
    nbytes = int(np.prod(array.shape, dtype=object)) * array.itemsize
    if nbytes > memory_bytes():
        _refuse(nbytes, what, list(array.shape))
