"""Shared benchmark plumbing: interleaved median timing, the STREAM and FMA-peak probes, table
printing."""

from __future__ import annotations

import ctypes
import hashlib
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
    library = _probe("stream_triad.c", "stream_triad")
    library.mg_stream_triad.restype = ctypes.c_double
    library.mg_stream_triad.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_size_t, ctypes.c_int]
    n = int(megabytes_per_array * 1e6 / 8)
    a, b, c = np.zeros(n), np.ones(n), np.full(n, 2.0)
    return library.mg_stream_triad(a.ctypes.data, b.ctypes.data, c.ctypes.data, n, reps)


def _probe(source: str, name: str) -> ctypes.CDLL:
    """``benchmarks/<source>`` compiled with gcc (-O3 -march=native -fopenmp) and loaded; the
    build is cached in the temporary directory under a hash of the source, so an edited
    probe (or another checkout's) never loads a stale library."""
    path = os.path.join(HERE, source)
    with open(path, "rb") as file:
        digest = hashlib.sha256(file.read()).hexdigest()[:16]
    build = os.path.join(tempfile.gettempdir(), f"minigraph_{name}_{digest}.so")
    if not os.path.exists(build):
        partial = f"{build}.{os.getpid()}"
        subprocess.run(["gcc", "-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", path,
                        "-o", partial], check=True)
        os.replace(partial, build)
    return ctypes.CDLL(build)


def fma_peak(threads: int, seconds: float = 0.002, reps: int = 30) -> float:
    """GFLOP/s of float32 vector FMAs on ``threads`` OpenMP threads (``fma_peak.c``: each
    thread's best of ``reps`` runs of about ``seconds``, summed): the "% of peak" denominator,
    measured in the same run as the table it divides. Short runs and the best of many keep
    other tenants' preemptions out, so on a busy machine it still reads the cores' peak.
    """
    library = _probe("fma_peak.c", "fma_peak")
    library.mg_fma_peak.restype = ctypes.c_double
    library.mg_fma_peak.argtypes = [ctypes.c_int, ctypes.c_long, ctypes.c_int]
    start = time.perf_counter()
    library.mg_fma_peak(threads, 100_000, 1)  # calibrates the iteration count
    once = max(time.perf_counter() - start, 1e-6)
    iterations = max(100_000, int(100_000 * seconds / once))
    return library.mg_fma_peak(threads, iterations, reps)


def markdown_table(header: list[str], rows: list[list[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def geomean(values: list[float]) -> float:
    values = [v for v in values if v and np.isfinite(v)]
    return float(np.exp(np.mean(np.log(values)))) if values else float("nan")


def parse_options(spec: str) -> tuple[dict[str, object], dict[str, str]]:
    """``--minigraph-options`` text -> (``OptimizerOptions`` keyword arguments, environment).

    ``""`` is the default; ``off`` sets ``MINIGRAPH_OPTIMIZER=off`` (every pass off);
    ``name=on|off,...`` passes each name through to ``mg.OptimizerOptions`` (so passes added
    later need no change here); other values are read as numbers where they parse."""
    if spec.strip().lower() in ("", "default", "on"):
        return {}, {}
    if spec.strip().lower() == "off":
        return {}, {"MINIGRAPH_OPTIMIZER": "off"}
    words = {"on": True, "true": True, "off": False, "false": False}
    kwargs: dict[str, object] = {}
    for item in spec.split(","):
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--minigraph-options: expected name=on|off, got {item!r}")
        value = value.strip().lower()
        if value in words:
            kwargs[name.strip()] = words[value]
        else:
            kwargs[name.strip()] = float(value) if "." in value else int(value)
    return kwargs, {}
