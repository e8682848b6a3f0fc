"""Memory limits: refuse a tensor this machine cannot hold before anything is allocated.

A shape claimed by a feed (a 0-stride view "holding" 2**40 elements), by a Fill's ``dims``,
by attrs or by a graph file could otherwise end in numpy's ``MemoryError`` or ``array is too
big`` half-way through a kernel, or in the machine swapping. A tensor larger than the
physical memory raises :class:`ResourceExhaustedError` naming the op or feed, like
TensorFlow's allocator; a shape TensorFlow itself refuses (more than 2**63 - 1 elements) is
an :class:`InvalidArgumentError` in TensorFlow's words, and one numpy cannot represent (more
than 64 dimensions, or 2**63 bytes counting only its non-zero dimensions, as ``[0, 2**62]``)
an :class:`UnimplementedError`. Messages show huge numbers by their magnitude, never by
thousands of digits.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Sequence

import numpy as np

from minigraph.framework.errors import (
    InvalidArgumentError,
    ResourceExhaustedError,
    UnimplementedError,
)
from minigraph.framework.tensor_shape import TensorShape, dims_text

# The most output tensors one node may have (Unpack's num, Split's num_split): an attr, not
# the file, says how many, and each costs Python objects (2**20 take seconds and 200 MB to
# build). TensorFlow's own limit is 2**31 - 1 ("Number of outputs is too big").
MAX_OUTPUTS_PER_OP = 1 << 16
NUMPY_MAX_RANK = 64  # NPY_MAXDIMS: numpy holds no array of more dimensions
TF_MAX_RANK = 254  # TensorShape::MaxDimensions()
_INT64_MAX = 2**63 - 1


@functools.lru_cache(maxsize=1)
def memory_bytes() -> int:
    """This machine's physical memory in bytes (64 GiB when the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # pragma: no cover - not POSIX
        return 64 << 30


def count_text(number: int) -> str:
    """``1,024``; a number past 10**18 as ``about 2**N`` (a claimed shape's product may have
    thousands of digits, more than Python even converts to text)."""
    return f"{number:,}" if number < 10**18 else f"about 2**{number.bit_length() - 1}"


def _refuse(nbytes: int, what: str, shape: object) -> None:
    raise ResourceExhaustedError(
        f"{what}: a tensor of shape {shape} needs {count_text(nbytes)} bytes, more than this "
        f"machine's {memory_bytes():,} bytes of memory; nothing was allocated")


def check_dims(dims: Sequence[int], what: str, itemsize: int | None = None) -> None:
    """Refuse known dims TensorFlow refuses (more than 254 of them, or more than 2**63 - 1
    elements counted up to the first zero; TF's words) and, for an array of ``itemsize``
    bytes per element, dims numpy cannot represent (more than 64, or non-zero dims whose
    bytes multiply past 2**63 - 1, as ``[0, 2**62]``)."""
    if len(dims) > TF_MAX_RANK:
        raise InvalidArgumentError(f"{what}: Shape {dims_text(dims)} has too many dimensions "
                                   f"({len(dims)}; at most {TF_MAX_RANK})")
    count = 1
    for d in dims:  # TF's order: a product that overflows before any zero dim is refused
        count *= d
        if count > _INT64_MAX:
            raise InvalidArgumentError(f"{what}: Shape {dims_text(dims)} is too large (more "
                                       f"than 2**63 - 1 entries)")
    if itemsize is None:
        return
    if len(dims) > NUMPY_MAX_RANK:
        raise UnimplementedError(f"{what}: a tensor of shape {dims_text(dims)} has "
                                 f"{len(dims)} dimensions; minigraph's arrays (numpy's) hold "
                                 f"at most {NUMPY_MAX_RANK}")
    if math.prod(d for d in dims if d) * itemsize > _INT64_MAX:
        raise UnimplementedError(f"{what}: a tensor of shape {dims_text(dims)} cannot be "
                                 f"represented by numpy (its non-zero dimensions need more "
                                 f"than 2**63 - 1 bytes)")


def check_output_count(count: int, what: str) -> None:
    """Refuse a node with more output tensors than TF (2**31 - 1; its words) or minigraph
    (MAX_OUTPUTS_PER_OP) builds, before any is made."""
    if count > 2**31 - 1:
        raise InvalidArgumentError(f"{what}: Number of outputs is too big: {count_text(count)}")
    if count > MAX_OUTPUTS_PER_OP:
        raise ResourceExhaustedError(f"{what}: {count:,} outputs; minigraph builds at most "
                                     f"{MAX_OUTPUTS_PER_OP:,} per node")


def check_allocation(shape: TensorShape, itemsize: int, what: str) -> None:
    """Refuse an output of a fully known ``shape`` that cannot be represented
    (:func:`check_dims`) or cannot fit in memory."""
    if not shape.is_fully_defined():
        return
    check_dims(shape.dims, what, itemsize)
    elements = shape.num_elements()
    if elements * itemsize > memory_bytes():
        _refuse(elements * itemsize, what, shape)


def check_feed_size(array: np.ndarray, what: str) -> None:
    """Refuse a fed array (a broadcast view may claim any size) that cannot fit in memory."""
    nbytes = math.prod(array.shape) * array.itemsize
    if nbytes > memory_bytes():
        _refuse(nbytes, what, list(array.shape))


def compact_copy(array: np.ndarray, what: str, dtype: np.dtype | None = None) -> np.ndarray:
    """A read-only copy of ``array`` (cast to ``dtype``) that owns its values without
    expanding broadcast axes: a 0-stride view of 2**30 elements (one value repeated) costs
    one element, held as a read-only broadcast of that copy. Refused
    (ResourceExhaustedError) when its full size would not fit in memory, as a feed is."""
    check_feed_size(array, what)
    repeated = {i for i, (n, s) in enumerate(zip(array.shape, array.strides))
                if s == 0 and n > 1}
    core = array[tuple(slice(0, 1) if i in repeated else slice(None)
                       for i in range(array.ndim))]
    copy = np.array(core, dtype)
    if repeated:
        copy = np.broadcast_to(copy, array.shape)
    copy.setflags(write=False)
    return copy
