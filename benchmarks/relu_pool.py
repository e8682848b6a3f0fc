"""The single-pass Relu/max-pool kernels against the two kernels they replace: per shape,
``_FusedReluMaxPool``'s ``mg_relu_max_pool`` against the native Relu then MaxPool, and
``_FusedMaxPoolGradReluGrad``'s ``mg_max_pool_grad_relu`` against MaxPoolGrad then
ReluGrad; interleaved medians in one process (both are minigraph), results checked bit for
bit first. Input tensors are re-drawn per call set so the comparison is not only cache.

    python benchmarks/relu_pool.py [--threads 2]
"""

from __future__ import annotations

import argparse

import numpy as np
from _common import markdown_table, time_interleaved

from minigraph.backends import native
from minigraph.backends import pooling_kernels as pool
from minigraph.backends.activation_kernels import c_relu, c_relu_grad

# (NHWC shape, window, stride, layout)
CASES = [((32, 28, 28, 32), 2, 2, "NHWC"), ((32, 28, 28, 32), 2, 2, "NCHW"),
         ((32, 32, 32, 16), 3, 2, "NHWC"), ((16, 56, 56, 64), 2, 2, "NHWC"),
         ((8, 56, 56, 64), 3, 2, "NCHW")]


def _case(shape, k, s, layout, rng):
    n, h, w, c = shape
    x = rng.standard_normal(shape if layout == "NHWC" else (n, c, h, w)).astype(np.float32)
    out = ((h - k) // s + 1, (w - k) // s + 1)
    geometry = ((k, k), (s, s), ((0, 0), (0, 0)), out, layout == "NHWC")
    y, r = pool.c_relu_max_pool(x, *geometry)
    g = rng.standard_normal(y.shape).astype(np.float32)
    chain_y = pool.c_max_pool(c_relu(x), *geometry)
    chain_dx = c_relu_grad(pool.c_max_pool_grad(r, g, *geometry), r)
    fused_dx = pool.c_max_pool_grad(r, g, *geometry, relu=True)
    for a, b in ((y, chain_y), (fused_dx, chain_dx)):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    return {
        "forward, chain": lambda: pool.c_max_pool(c_relu(x), *geometry),
        "forward, fused": lambda: pool.c_relu_max_pool(x, *geometry),
        "backward, chain": lambda: c_relu_grad(pool.c_max_pool_grad(r, g, *geometry), r),
        "backward, fused": lambda: pool.c_max_pool_grad(r, g, *geometry, relu=True),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    native.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    rows = []
    for shape, k, s, layout in CASES:
        t = time_interleaved(_case(shape, k, s, layout, rng), repeats=args.repeats)
        rows.append([f"{shape} {k}x{k}/{s} {layout}",
                     *(f"{t[name] * 1e3:.3f}" for name in t),
                     f"{t['forward, chain'] / t['forward, fused']:.2f}x",
                     f"{t['backward, chain'] / t['backward, fused']:.2f}x"])
    print(markdown_table(["input (NHWC dims), window/stride, layout", "fwd chain ms",
                          "fwd fused ms", "bwd chain ms", "bwd fused ms", "fwd speedup",
                          "bwd speedup"], rows))


if __name__ == "__main__":
    main()
