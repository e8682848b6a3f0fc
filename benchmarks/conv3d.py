"""3-D convolution benchmark: ``Conv3D``, ``Conv3DBackpropInputV2`` and
``Conv3DBackpropFilterV2`` (float32 NDHWC) on the GEMM micro-kernels
(kernels_c/conv3d_gemm.c) against the numpy reference (im2col + BLAS, its threads limited to
the same count with threadpoolctl), at layers of C3D- and 3-D U-Net-style video / volume
networks. Medians in one process (native, then numpy); prints ms per call and GFLOP/s
(2 * MACs / time) as a markdown table. The filter is a writable array, as a training
step's variable is: the forward packs it at every call. A second table times the 3-D pools
and their gradients (a graph of the op on each backend, interleaved).

    python benchmarks/conv3d.py [--threads 2] [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
from threadpoolctl import threadpool_limits

import minigraph as mg
from minigraph import ops

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import markdown_table, time_interleaved  # noqa: E402

from minigraph.backends import native  # noqa: E402
from minigraph.backends.conv3d_kernels import (  # noqa: E402
    c_conv3d,
    c_conv3d_backprop_filter,
    c_conv3d_backprop_input,
)
from minigraph.backends.convolution_kernels import (  # noqa: E402
    conv2d_backprop_filter_nhwc,
    conv2d_backprop_input_nhwc,
    conv2d_nhwc,
)
from minigraph.ops.window import Window, conv_geometry  # noqa: E402

SAMPLE = 0.02
# (layer, input NDHWC, filter (kd, kh, kw), out channels, stride); SAME padding
LAYERS = [
    ("C3D conv1 3x3x3 3->64", (1, 8, 56, 56, 3), (3, 3, 3), 64, 1),
    ("C3D conv2 3x3x3 64->128", (1, 8, 28, 28, 64), (3, 3, 3), 128, 1),
    ("U-Net 3x3x3 32->32", (1, 16, 32, 32, 32), (3, 3, 3), 32, 1),
    ("U-Net down 3x3x3 32->64 s2", (1, 16, 32, 32, 32), (3, 3, 3), 64, 2),
    ("U-Net 1x1x1 64->16", (1, 16, 32, 32, 64), (1, 1, 1), 16, 1),
]
QUICK = ("U-Net 3x3x3 32->32", "U-Net down 3x3x3 32->64 s2")


def same_window(x_shape: tuple, f_shape: tuple, stride: int) -> Window:
    """The ops' own SAME window of the DHWIO filter over the NDHWC input."""
    attrs = {"strides": [1, stride, stride, stride, 1], "dilations": [1] * 5,
             "padding": "SAME", "data_format": "NDHWC"}
    return conv_geometry(attrs, ValueError, x_shape, f_shape)


def calls(x, f, dy, window: Window) -> dict:
    """Per op, (native, numpy) calls."""
    return {
        "Conv3D": (lambda: c_conv3d(x, f, window, True), lambda: conv2d_nhwc(x, f, window)),
        "input grad": (lambda: c_conv3d_backprop_input(dy, f, x.shape, window, True),
                       lambda: conv2d_backprop_input_nhwc(dy, f, x.shape, window)),
        "filter grad": (lambda: c_conv3d_backprop_filter(x, dy, f.shape, window, True),
                        lambda: conv2d_backprop_filter_nhwc(x, dy, f.shape, window)),
    }


# (pool, input NDHWC, ksize, stride, padding)
POOLS = [("MaxPool3D", (1, 16, 32, 32, 32), 2, 2, "VALID"),
         ("MaxPool3D", (1, 8, 28, 28, 64), 3, 2, "SAME"),
         ("AvgPool3D", (1, 16, 32, 32, 32), 2, 2, "VALID"),
         ("AvgPool3D", (1, 8, 28, 28, 64), 3, 1, "SAME")]


def pool_runs(pool: str, shape: tuple, k: int, stride: int, padding: str, rng) -> dict:
    """Per backend, the pool and its gradient as one session call each."""
    root = mg.Scope.NewRootScope()
    x = rng.standard_normal(shape).astype(np.float32)
    attrs = {"ksize": [1, k, k, k, 1], "strides": [1, stride, stride, stride, 1],
             "padding": padding}
    y = getattr(ops, pool)(root, x, **attrs)
    g = rng.standard_normal(tuple(y.shape)).astype(np.float32)
    grad = (ops.MaxPool3DGrad(root, x, y, g, **attrs) if pool == "MaxPool3D"
            else ops.AvgPool3DGrad(root, list(shape), g, **attrs))
    runs = {}
    for backend in ("native", "reference"):
        session = mg.ClientSession(root, backend=backend)
        runs[backend] = {"forward": lambda s=session: s.Run({}, [y]),
                         "gradient": lambda s=session: s.Run({}, [grad])}
    return runs


def pool_table(threads: int, rng) -> str:
    """The pools on both backends, interleaved (no BLAS in either)."""
    rows = []
    for pool, shape, k, stride, padding in POOLS:
        runs = pool_runs(pool, shape, k, stride, padding, rng)
        for which in ("forward", "gradient"):
            times = time_interleaved({b: runs[b][which] for b in ("native", "reference")},
                                     min_sample=SAMPLE)
            ms, ref = times["native"], times["reference"]
            rows.append([f"{pool} {k}x{k}x{k} s{stride} {padding} {shape[1:]}", which,
                         f"{ms * 1e3:.2f}", f"{ref * 1e3:.2f}", f"{ref / ms:.1f}x"])
    return markdown_table(["pool", "op", "native ms", "numpy ms", "numpy / native"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="two layers only")
    args = parser.parse_args()
    native.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    rows = []
    for layer, shape, k, co, stride in LAYERS:
        if args.quick and layer not in QUICK:
            continue
        x = rng.standard_normal(shape).astype(np.float32)
        f = rng.standard_normal((*k, shape[4], co)).astype(np.float32)
        window = same_window(x.shape, f.shape, stride)
        dy = rng.standard_normal((shape[0], *window.out, co)).astype(np.float32)
        flops = 2 * shape[0] * int(np.prod(window.out)) * int(np.prod(k)) * shape[4] * co
        for op, (ours, numpy_call) in calls(x, f, dy, window).items():
            ms = time_interleaved({"native": ours}, min_sample=SAMPLE)["native"]
            with threadpool_limits(args.threads):
                ref = time_interleaved({"numpy": numpy_call}, min_sample=SAMPLE)["numpy"]
            rows.append([layer, op, f"{ms * 1e3:.2f}", f"{ref * 1e3:.2f}",
                         f"{flops / ms / 1e9:.0f}", f"{flops / ref / 1e9:.0f}",
                         f"{ref / ms:.1f}x"])
    print(f"threads: {args.threads}, ISA: {native.isa()}")
    print(markdown_table(["layer", "op", "native ms", "numpy ms", "native GFLOP/s",
                          "numpy GFLOP/s", "numpy / native"], rows))
    if not args.quick:
        print()
        print(pool_table(args.threads, rng))


if __name__ == "__main__":
    main()
