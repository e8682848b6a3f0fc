"""Keep freed tensor memory in the process, as TensorFlow's allocator does.

glibc serves each allocation above its mmap threshold (128 KiB to start) with fresh pages
from the kernel, and gives freed memory at the top of the heap back once more than the trim
threshold is free. A session step allocates its intermediates and frees them all when it
ends, so with those defaults every step pays a page fault per 4 KiB of every intermediate
again: an imported residual network ran 2x slower than its kernels (a 2 MiB Relu took
1.1 ms instead of 0.14 ms; docs/performance.md#tensorflow-graphs-benchmarkstf_graphspy).
TensorFlow's BFC allocator and PyTorch's caching allocators keep such memory for the next
step.

:func:`keep_freed_memory` asks glibc (``mallopt``) to serve blocks up to 32 MiB from the
heap and to keep up to 1 GiB of freed heap, so a step reuses the previous step's pages. It
runs once, when the first session is made; it does nothing off glibc or when the user
tuned malloc already (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``,
``MALLOC_TOP_PAD_`` or ``GLIBC_TUNABLES`` set).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's <malloc.h>
MMAP_THRESHOLD = 32 << 20  # glibc's upper limit for it on 64-bit machines
TRIM_THRESHOLD = 1 << 30
USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_",
                 "GLIBC_TUNABLES")


@functools.cache
def keep_freed_memory() -> bool:
    """Apply the settings above once; True when they were applied."""
    if any(name in os.environ for name in USER_SETTINGS):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (macOS, musl without mallopt)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
                and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))

