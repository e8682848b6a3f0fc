"""Convolution gradient benchmark: ``Conv2DBackpropInput`` and ``Conv2DBackpropFilter``
(float32 NHWC) on the GEMM micro-kernels (kernels_c/conv_gemm_grad.c) against the stride-1
direct kernels (kernels_c/convolution.c, where they apply) and the numpy reference (im2col +
BLAS, its threads limited to the same count with threadpoolctl), at the layers of a CIFAR
ResNet-8 (batch 32) and of ResNet50 (batch 8, 112x112 input). Medians in one process, the
native kernels interleaved, numpy after them; prints ms per call and GFLOP/s (2 * MACs /
time) as a markdown table.

    python benchmarks/conv_grads.py [--threads 2] [--only resnet8]
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
from threadpoolctl import threadpool_limits

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import markdown_table, time_interleaved  # noqa: E402

from minigraph.backends import native  # noqa: E402
from minigraph.backends.conv_gemm_grad import (  # noqa: E402
    c_gemm_backprop_filter,
    c_gemm_backprop_input,
)
from minigraph.backends.convolution_kernels import (  # noqa: E402
    c_conv2d_backprop_filter,
    c_conv2d_backprop_input,
    conv2d_backprop_filter_nhwc,
    conv2d_backprop_input_nhwc,
)
from minigraph.ops.window import Window  # noqa: E402

SAMPLE = 0.02
# (model, layer, input NHWC, filter (kh, kw), out channels, stride); SAME padding
LAYERS = [
    ("resnet8", "conv1 3x3 3->16", (32, 32, 32, 3), (3, 3), 16, 1),
    ("resnet8", "stage1 3x3 16->16", (32, 32, 32, 16), (3, 3), 16, 1),
    ("resnet8", "stage2 start 3x3 16->32 s2", (32, 32, 32, 16), (3, 3), 32, 2),
    ("resnet8", "stage2 proj 1x1 16->32 s2", (32, 32, 32, 16), (1, 1), 32, 2),
    ("resnet8", "stage2 3x3 32->32", (32, 16, 16, 32), (3, 3), 32, 1),
    ("resnet8", "stage3 start 3x3 32->64 s2", (32, 16, 16, 32), (3, 3), 64, 2),
    ("resnet8", "stage3 proj 1x1 32->64 s2", (32, 16, 16, 32), (1, 1), 64, 2),
    ("resnet8", "stage3 3x3 64->64", (32, 8, 8, 64), (3, 3), 64, 1),
    ("resnet50", "conv2 3x3 64->64", (8, 28, 28, 64), (3, 3), 64, 1),
    ("resnet50", "conv2 1x1 64->256", (8, 28, 28, 64), (1, 1), 256, 1),
    ("resnet50", "conv3 1x1 256->128 s2", (8, 28, 28, 256), (1, 1), 128, 2),
    ("resnet50", "conv3 3x3 128->128", (8, 14, 14, 128), (3, 3), 128, 1),
    ("resnet50", "conv4 3x3 256->256", (8, 7, 7, 256), (3, 3), 256, 1),
    ("resnet50", "conv5 1x1 1024->512 s2", (8, 7, 7, 1024), (1, 1), 512, 2),
    ("resnet50", "conv5 3x3 512->512", (8, 4, 4, 512), (3, 3), 512, 1),
]


def same_window(hw: tuple, k: tuple, stride: int) -> Window:
    """TF's SAME window of a k-sized filter over hw with this stride."""
    out, pads = [], []
    for size, ks in zip(hw, k):
        o = -(-size // stride)
        total = max((o - 1) * stride + ks - size, 0)
        out.append(o)
        pads.append((total // 2, total - total // 2))
    return Window(k, (stride, stride), (1, 1), tuple(pads), tuple(out))


def calls(x, f, dy, window: Window) -> dict:
    """Per direction, the ways to compute it."""
    n, h, w, c = x.shape
    direct = window.strides == (1, 1)
    grads = {
        "input": {"gemm": lambda: c_gemm_backprop_input(dy, f, x.shape, window, True),
                  "numpy": lambda: conv2d_backprop_input_nhwc(dy, f, x.shape, window)},
        "filter": {"gemm": lambda: c_gemm_backprop_filter(x, dy, f.shape, window, True),
                   "numpy": lambda: conv2d_backprop_filter_nhwc(x, dy, f.shape, window)},
    }
    if direct:
        grads["input"]["direct"] = lambda: c_conv2d_backprop_input(dy, f, (h, w), window.pads,
                                                                   True)
        grads["filter"]["direct"] = lambda: c_conv2d_backprop_filter(x, dy, f.shape[:2],
                                                                     window.pads, True)
    return grads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", choices=("resnet8", "resnet50"))
    args = parser.parse_args()
    native.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    rows = []
    for model, layer, shape, k, co, stride in LAYERS:
        if args.only and model != args.only:
            continue
        window = same_window(shape[1:3], k, stride)
        x = rng.standard_normal(shape).astype(np.float32)
        f = rng.standard_normal((*k, shape[3], co)).astype(np.float32)
        dy = rng.standard_normal((shape[0], *window.out, co)).astype(np.float32)
        flops = 2 * shape[0] * window.out[0] * window.out[1] * k[0] * k[1] * shape[3] * co
        for direction, ways in calls(x, f, dy, window).items():
            native_ways = {name: fn for name, fn in ways.items() if name != "numpy"}
            times = time_interleaved(native_ways, min_sample=SAMPLE)
            with threadpool_limits(args.threads):
                times.update(time_interleaved({"numpy": ways["numpy"]}, min_sample=SAMPLE))
            direct = times.get("direct")
            rows.append([model, layer, direction,
                         f"{times['gemm'] * 1e3:.2f}",
                         "-" if direct is None else f"{direct * 1e3:.2f}",
                         f"{times['numpy'] * 1e3:.2f}",
                         f"{flops / times['gemm'] / 1e9:.0f}",
                         f"{times['numpy'] / times['gemm']:.1f}x"])
    print(f"threads: {args.threads}, ISA: {native.isa()}")
    print(markdown_table(["model", "layer", "gradient", "GEMM ms", "direct ms", "numpy ms",
                          "GEMM GFLOP/s", "numpy / GEMM"], rows))


if __name__ == "__main__":
    main()
