"""GEMM benchmark: minigraph's native GEMM (kernels_c/gemm*.c) against numpy's matmul (its
BLAS limited to the same thread count with threadpoolctl) and the direct convolution kernel
running the same product as a 1x1 convolution, at the GEMM shapes of ResNet50's 1x1 layers
and dense head (batch 2, 64x64 input) and of a few-pixel 1x1 layer. Medians in one process,
the two native kernels interleaved, numpy after them; prints GFLOP/s (2 M K N / time) per
thread count as a markdown table.

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

# seconds per sample: long enough for the steady state of back-to-back kernels (a model's
# step); with 2 ms samples the pool's wake-up after each settling sleep showed (512x256x64
# on 2 threads: 140 instead of 180 GFLOP/s)
SAMPLE = 0.02
# (what, the convolution's input (batch, height, width): M pixels, K, N)
SHAPES = [("ResNet50 conv2 1x1 in", (2, 16, 16), 256, 64),
          ("ResNet50 conv2 1x1 out", (2, 16, 16), 64, 256),
          ("ResNet50 conv4 1x1 out", (2, 4, 4), 256, 1024),
          ("ResNet50 conv5 1x1 out", (2, 2, 2), 512, 2048),
          ("ResNet50 dense head", (2, 1, 1), 2048, 1000),
          ("1x1 after global pooling", (8, 1, 1), 512, 512)]


def candidates(a: np.ndarray, b: np.ndarray, image: tuple[int, int, int]) -> dict:
    """The three ways to compute a @ b, as calls to time (the convolution's input: a as
    ``image`` batch, height, width)."""
    packing = pack_b(b)
    x, f = a.reshape(*image, a.shape[1]), b.reshape(1, 1, *b.shape)
    return {"gemm": lambda: c_gemm(a, packing),
            "conv": lambda: c_conv2d(x, f, ((0, 0), (0, 0)), image[1:], True),
            "numpy": lambda: a @ b}


def main() -> None:
    rng = np.random.default_rng(0)
    rows = []
    for what, image, k, n in SHAPES:
        m = int(np.prod(image))
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        calls = candidates(a, b, image)
        cells = [what, "x".join(map(str, image)), f"{m}x{k}x{n}"]
        for threads in (1, 2):
            native.set_num_threads(threads)
            times = time_interleaved({k: calls[k] for k in ("gemm", "conv")},
                                     min_sample=SAMPLE)
            # numpy last, on its own: OpenBLAS's idle threads spin for a while after each
            # call, and interleaved they took the second core from the native kernels' pool
            with threadpool_limits(threads):  # numpy's BLAS: the same thread count
                times.update(time_interleaved({"numpy": calls["numpy"]}, min_sample=SAMPLE))
            cells += [f"{2 * m * k * n / times[key] / 1e9:.0f}"
                      for key in ("gemm", "conv", "numpy")]
        rows.append(cells)
    print(markdown_table(["layer", "input NxHxW", "M x K x N", "GEMM 1t", "direct conv 1t",
                          "numpy 1t", "GEMM 2t", "direct conv 2t", "numpy 2t"], rows))


if __name__ == "__main__":
    main()
