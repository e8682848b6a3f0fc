"""GEMM benchmark: minigraph's native GEMM (kernels_c/gemm*.c) against numpy's matmul (its
BLAS limited to the same thread count with threadpoolctl) and the direct convolution kernel
running the same product as a 1x1 convolution, at the GEMM shapes of ResNet50's 1x1 layers
and dense head (batch 2, 64x64 input) and of a few-pixel 1x1 layer. Interleaved medians in
one process; prints GFLOP/s (2 M K N / time) per thread count as a markdown table.

    python benchmarks/gemm.py
"""

from __future__ import annotations

import os
import sys

import numpy as np
from threadpoolctl import threadpool_limits

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import markdown_table, time_interleaved  # noqa: E402

from minigraph.backends import native  # noqa: E402
from minigraph.backends.convolution_kernels import c_conv2d  # noqa: E402
from minigraph.backends.gemm import c_gemm, pack_b  # noqa: E402

# (what, M, K, N)
SHAPES = [("ResNet50 conv2 1x1 in (2x16x16 px)", 512, 256, 64),
          ("ResNet50 conv2 1x1 out", 512, 64, 256),
          ("ResNet50 conv5 1x1 (2x4x4 px)", 32, 1024, 2048),
          ("ResNet50 dense head", 2, 2048, 1000),
          ("1x1 after global pooling", 8, 512, 512)]


def candidates(a: np.ndarray, b: np.ndarray) -> dict:
    """The three ways to compute a @ b, as calls to time."""
    m, k = a.shape
    packing = pack_b(b)
    x, f = a.reshape(1, 1, m, k), b.reshape(1, 1, *b.shape)
    return {"gemm": lambda: c_gemm(a, packing),
            "conv": lambda: c_conv2d(x, f, ((0, 0), (0, 0)), (1, m), True),
            "numpy": lambda: a @ b}


def main() -> None:
    rng = np.random.default_rng(0)
    rows = []
    for what, m, k, n in SHAPES:
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        calls = candidates(a, b)
        cells = [what, f"{m}x{k}x{n}"]
        for threads in (1, 2):
            native.set_num_threads(threads)
            with threadpool_limits(threads):  # numpy's BLAS: the same thread count
                times = time_interleaved(calls)
            cells += [f"{2 * m * k * n / times[key] / 1e9:.0f}"
                      for key in ("gemm", "conv", "numpy")]
        rows.append(cells)
    print(markdown_table(["layer", "M x K x N", "GEMM 1t", "direct conv 1t", "numpy 1t",
                          "GEMM 2t", "direct conv 2t", "numpy 2t"], rows))


if __name__ == "__main__":
    main()
