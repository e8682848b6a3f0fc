"""Shared benchmark plumbing: interleaved median timing, the STREAM probe, table printing."""

from __future__ import annotations

import ctypes
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def time_interleaved(functions: dict[str, Callable[[], object]], repeats: int = 15,
                     min_sample: float = 2e-3, settle: float = 0.005,
                     clock: Callable[[], float] = time.perf_counter) -> dict[str, float]:
    """Median seconds per call of each function, sampled round-robin in rotating order.

    As in shared/bench/ANCHORS.md: before each sample the previous library's worker threads
    get a moment to stop spinning (a short sleep), then two untimed calls warm this one up;
    a sample times k back-to-back calls, k chosen so it lasts at least ``min_sample``.
    ``clock``: wall time by default (``time.thread_time`` counts the calling thread's CPU).
    """
    counts = {}
    for name, function in functions.items():
        function()
        function()
        start = time.perf_counter()
        function()
        once = max(time.perf_counter() - start, 1e-7)
        counts[name] = max(1, int(min_sample / once))
    samples: dict[str, list[float]] = {name: [] for name in functions}
    names = list(functions)
    for r in range(repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:
            function, k = functions[name], counts[name]
            time.sleep(settle)
            function()
            function()
            start = clock()
            for _ in range(k):
                function()
            samples[name].append((clock() - start) / k)
    return {name: statistics.median(values) for name, values in samples.items()}


def stream_triad(megabytes_per_array: float, reps: int = 10) -> float:
    """GB/s of a float64 OpenMP triad over three arrays of the given size (built with gcc)."""
    build = os.path.join(tempfile.gettempdir(), "minigraph_stream_triad.so")
    if not os.path.exists(build):
        subprocess.run(["gcc", "-O3", "-march=native", "-fopenmp", "-shared", "-fPIC",
                        os.path.join(HERE, "stream_triad.c"), "-o", build], check=True)
    library = ctypes.CDLL(build)
    library.mg_stream_triad.restype = ctypes.c_double
    library.mg_stream_triad.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_size_t, ctypes.c_int]
    n = int(megabytes_per_array * 1e6 / 8)
    a, b, c = np.zeros(n), np.ones(n), np.full(n, 2.0)
    return library.mg_stream_triad(a.ctypes.data, b.ctypes.data, c.ctypes.data, n, reps)


def markdown_table(header: list[str], rows: list[list[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def geomean(values: list[float]) -> float:
    values = [v for v in values if v and np.isfinite(v)]
    return float(np.exp(np.mean(np.log(values)))) if values else float("nan")
