"""Convolution layer benchmark: the native float32 Conv2D forward (NHWC) at every distinct
Conv2D of ResNet50 (built from its layer table, no TensorFlow needed) at batch 2 and 32, at
VGG16's 3x3 layers and at grouped RegNet layers; GFLOP/s (2 * pixels * kh * kw * c/groups *
co / time) per layer and over each model (total FLOP / total time), as a share of the FMA
peak measured in the same run (``_common.fma_peak``, the same thread count).

The default runs what the native kernel chooses per shape (``conv2d_forward_nhwc``); with
``--compare`` each layer also runs on the direct kernel (kernels_c/convolution*.c, groups 1
and dilation 1 only) and the implicit GEMM (kernels_c/conv_gemm.c), interleaved: the
measurements behind the choice table (``CONV_ROUTE_RULE`` in
minigraph/backends/convolution_kernels.py).

    python benchmarks/conv_layers.py [--size 224] [--batches 2 32] [--threads 2] [--compare]
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import fma_peak, markdown_table, time_interleaved  # noqa: E402

from minigraph.backends import native  # noqa: E402
from minigraph.backends.convolution_kernels import (  # noqa: E402
    c_conv2d,
    c_conv_gemm,
    conv2d_forward_nhwc,
    forward_route,
)
from minigraph.ops.window import Window  # noqa: E402


def resnet50_layers(size: int) -> list[tuple]:
    """ResNet50's (v1, tf_keras) distinct convolutions at a ``size`` x ``size`` input:
    (name, input h, w, c, kh, kw, co, stride, padding, groups)."""
    layers = [("conv1 7x7/2", size + 6, size + 6, 3, 7, 7, 64, 2, "VALID", 1)]
    hw, c = (size + 6 - 7) // 2 + 1, 64
    hw = (hw + 2 - 3) // 2 + 1  # the 3x3/2 max pool after ZeroPadding2D(1)
    for stage, width in enumerate((64, 128, 256, 512), start=2):
        stride = 1 if stage == 2 else 2
        out_hw = (hw - 1) // stride + 1
        layers += [(f"conv{stage} 1x1/{stride} in", hw, hw, c, 1, 1, width, stride, "VALID", 1),
                   (f"conv{stage} 3x3", out_hw, out_hw, width, 3, 3, width, 1, "SAME", 1),
                   (f"conv{stage} 1x1 out", out_hw, out_hw, width, 1, 1, 4 * width, 1,
                    "VALID", 1),
                   (f"conv{stage} 1x1/{stride} shortcut", hw, hw, c, 1, 1, 4 * width, stride,
                    "VALID", 1),
                   (f"conv{stage} 1x1 in (identity)", out_hw, out_hw, 4 * width, 1, 1, width,
                    1, "VALID", 1)]
        hw, c = out_hw, 4 * width
    return layers


def vgg16_layers(size: int) -> list[tuple]:
    """VGG16's 3x3 convolutions (one per distinct shape) at a ``size`` input."""
    layers, c, hw = [], 3, size
    for block, (width, convs) in enumerate(((64, 2), (128, 2), (256, 3), (512, 3), (512, 3)),
                                           start=1):
        layers.append((f"block{block} 3x3 {c}->{width}", hw, hw, c, 3, 3, width, 1, "SAME", 1))
        if convs > 1 and c != width:
            layers.append((f"block{block} 3x3 {width}->{width}", hw, hw, width, 3, 3, width, 1,
                           "SAME", 1))
        c, hw = width, hw // 2
    return layers


def regnet_layers(size: int) -> list[tuple]:
    """Grouped 3x3 convolutions of RegNetX-400MF/-1.6GF (group widths 16 and 24)."""
    hw = size // 8
    return [("RegNetX-400MF 3x3 g16", hw, hw, 160, 3, 3, 160, 1, "SAME", 10),
            ("RegNetX-1.6GF 3x3/2 g24", 2 * hw, 2 * hw, 168, 3, 3, 168, 2, "SAME", 7),
            ("RegNetX-1.6GF 3x3 g24", hw, hw, 408, 3, 3, 408, 1, "SAME", 17)]


def window_of(h: int, w: int, kh: int, kw: int, stride: int, padding: str) -> Window:
    if padding == "SAME":
        out = ((h + stride - 1) // stride, (w + stride - 1) // stride)
        pads = tuple(((max((o - 1) * stride + k - n, 0)) // 2,
                      max((o - 1) * stride + k - n, 0) - max((o - 1) * stride + k - n, 0) // 2)
                     for o, k, n in zip(out, (kh, kw), (h, w)))
    else:
        out = ((h - kh) // stride + 1, (w - kw) // stride + 1)
        pads = ((0, 0), (0, 0))
    return Window((kh, kw), (stride, stride), (1, 1), pads, out)


def layer_calls(x: np.ndarray, f: np.ndarray, window: Window, groups: int,
                compare: bool) -> dict:
    """The calls to time: the chosen kernel, and with ``compare`` the GEMM and (groups 1)
    the direct kernel."""
    calls = {"chosen": lambda: conv2d_forward_nhwc(x, f, window, groups)}
    if compare:
        calls["gemm"] = lambda: c_conv_gemm(x, f, window, groups)
        if groups == 1:
            calls["direct"] = lambda: c_conv2d(x, f, window.pads, window.out, True,
                                               strides=window.strides)
    return calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=64, help="input height and width")
    parser.add_argument("--batches", type=int, nargs="*", default=[2, 32])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--compare", action="store_true")
    args = parser.parse_args()
    native.set_num_threads(args.threads)
    peak = fma_peak(args.threads)
    rng = np.random.default_rng(0)
    models = [("ResNet50", resnet50_layers(args.size), args.batches),
              ("VGG16", vgg16_layers(args.size), args.batches[:1]),
              ("RegNetX", regnet_layers(args.size), args.batches[:1])]
    rows, totals = [], []
    for model, layers, batches in models:
        for batch in batches:
            flops_sum = seconds_sum = 0.0
            for name, h, w, c, kh, kw, co, stride, padding, groups in layers:
                x = rng.standard_normal((batch, h, w, c)).astype(np.float32)
                f = rng.standard_normal((kh, kw, c // groups, co)).astype(np.float32)
                f.flags.writeable = False  # a frozen constant: packed once
                window = window_of(h, w, kh, kw, stride, padding)
                flops = 2 * batch * window.out[0] * window.out[1] * kh * kw * c // groups * co
                times = time_interleaved(layer_calls(x, f, window, groups, args.compare),
                                         repeats=args.repeats, min_sample=0.02)
                flops_sum += flops
                seconds_sum += times["chosen"]
                rate = {k: flops / t / 1e9 for k, t in times.items()}
                rows.append([model, batch, name, f"{h}x{w}x{c}->{co}",
                             forward_route((batch, h, w, c), f.shape, window, groups),
                             f"{rate['chosen']:.0f}", f"{100 * rate['chosen'] / peak:.0f}%"]
                            + ([f"{rate.get('direct', float('nan')):.0f}",
                                f"{rate['gemm']:.0f}"] if args.compare else []))
            overall = flops_sum / seconds_sum / 1e9
            totals.append([model, batch, f"{flops_sum / 1e9:.2f}", f"{seconds_sum * 1e3:.1f}",
                           f"{overall:.0f}", f"{100 * overall / peak:.0f}%"])
    print(f"FMA peak, {args.threads} threads, measured: {peak:.0f} GFLOP/s; input "
          f"{args.size}x{args.size}\n")
    print(markdown_table(["model", "batch", "layer", "input -> co", "route", "GFLOP/s",
                          "of peak"] + (["direct", "gemm"] if args.compare else []), rows))
    print()
    print(markdown_table(["model", "batch", "GFLOP", "ms (sum of layers)", "GFLOP/s",
                          "of peak"], totals))


if __name__ == "__main__":
    main()
