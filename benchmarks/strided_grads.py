"""Strided convolution gradients, layer by layer: minigraph's ``Conv2DBackpropInput`` and
``Conv2DBackpropFilter`` kernels (kernels_c/conv_gemm_grad.c, float32 NHWC) against PyTorch's
(``aten.convolution_backward`` on channels_last tensors: oneDNN), each in its own worker
process (``_workers``), ``--threads`` threads each.

    python benchmarks/strided_grads.py [--threads 2] [--rounds 11] [--only resnet8]
        [--clock wall|cpu] [--statistic median|min] [--baseline DIR]

The layers are the stride-2 convolutions of a CIFAR ResNet-8 (batch 32), shapes no kernel
was tuned on, and ResNet50's (batch 8, 112x112 input, so stage 3 starts at 28x28). Both
frameworks get the same problem: symmetric pads ``k // 2`` (PyTorch's ``padding``; TF's SAME
pads 0 before and 1 after for these stride-2 layers, the same work), the same random arrays
(seeded per layer). Each worker answers ``select LAYER GRADIENT`` (make that the timed call
and return digest numbers of its result, which must agree), then ``time K``; the
coordinator (which imports no framework) samples the two interleaved
(``_workers.interleaved_medians``). Columns: ms per call (median), GFLOP/s (2 x multiply-adds
/ time), PyTorch's time over minigraph's (above 1: minigraph is faster). ``--baseline DIR``
adds a third worker importing minigraph from DIR (another checkout with its extension
built): before / after in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _common import markdown_table  # noqa: E402
from _workers import WARMUP_CALLS, Worker, interleaved_medians, serve  # noqa: E402

# (model, layer, input NHWC, filter size, output channels); stride 2
LAYERS = [
    ("resnet8", "stage2 3x3 16->32", (32, 32, 32, 16), 3, 32),
    ("resnet8", "stage2 proj 1x1 16->32", (32, 32, 32, 16), 1, 32),
    ("resnet8", "stage3 3x3 32->64", (32, 16, 16, 32), 3, 64),
    ("resnet8", "stage3 proj 1x1 32->64", (32, 16, 16, 32), 1, 64),
    ("untuned", "3x3 24->48 20x20 b16", (16, 20, 20, 24), 3, 48),
    ("untuned", "1x1 64->128 16x16", (32, 16, 16, 64), 1, 128),
    ("untuned", "3x3 48->96 15x15 b8", (8, 15, 15, 48), 3, 96),
    ("resnet50", "conv3 proj 1x1 256->512", (8, 28, 28, 256), 1, 512),
    ("resnet50", "conv3 3x3 128->128", (8, 28, 28, 128), 3, 128),
    ("resnet50", "conv4 proj 1x1 512->1024", (8, 14, 14, 512), 1, 1024),
    ("resnet50", "conv4 3x3 256->256", (8, 14, 14, 256), 3, 256),
]
GRADIENTS = ("input", "filter")
STRIDE = 2
DIGEST_RTOL = 1e-3  # float32 sums of up to ~1e4 terms in different orders


def layer_arrays(index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x (NHWC), f (HWIO) and dy (NHWC) of layer ``index``, the same in every process."""
    _, _, (n, h, w, c), k, co = LAYERS[index]
    rng = np.random.default_rng(index)
    out_h, out_w = (h + 2 * (k // 2) - k) // STRIDE + 1, (w + 2 * (k // 2) - k) // STRIDE + 1
    return (rng.standard_normal((n, h, w, c), np.float32),
            rng.standard_normal((k, k, c, co), np.float32),
            rng.standard_normal((n, out_h, out_w, co), np.float32))


def flops(index: int) -> float:
    """2 x the multiply-adds of the layer's convolution (each gradient does as many)."""
    _, _, (n, h, w, c), k, co = LAYERS[index]
    out = (h + 2 * (k // 2) - k) // STRIDE + 1
    return 2.0 * n * out * ((w + 2 * (k // 2) - k) // STRIDE + 1) * k * k * c * co


def minigraph_calls(index: int, threads: int) -> dict:
    from minigraph.backends import native
    from minigraph.backends.conv_gemm_grad import c_gemm_backprop_filter, c_gemm_backprop_input
    from minigraph.ops.window import Window

    native.set_num_threads(threads)
    x, f, dy = layer_arrays(index)
    k, pad = f.shape[0], f.shape[0] // 2
    window = Window((k, k), (STRIDE, STRIDE), (1, 1), ((pad, pad), (pad, pad)), dy.shape[1:3])
    return {"input": lambda: c_gemm_backprop_input(dy, f, x.shape, window, True),
            "filter": lambda: c_gemm_backprop_filter(x, dy, f.shape, window, True)}


def torch_calls(index: int, threads: int) -> dict:
    import torch

    torch.set_num_threads(threads)
    x, f, dy = layer_arrays(index)
    last = torch.channels_last
    tx = torch.from_numpy(x).permute(0, 3, 1, 2).contiguous(memory_format=last)
    tf = torch.from_numpy(f).permute(3, 2, 0, 1).contiguous(memory_format=last)
    tdy = torch.from_numpy(dy).permute(0, 3, 1, 2).contiguous(memory_format=last)
    pad = f.shape[0] // 2

    def backward(mask: list[bool]):
        return torch.ops.aten.convolution_backward(
            tdy, tx, tf, None, [STRIDE, STRIDE], [pad, pad], [1, 1], False, [0, 0], 1, mask)

    def as_nhwc(t) -> np.ndarray:  # NCHW-indexed tensor -> NHWC numpy
        return t.permute(0, 2, 3, 1).numpy()

    return {"input": lambda: as_nhwc(backward([True, False, False])[0]),
            "filter": lambda: backward([False, True, False])[1].permute(2, 3, 1, 0).numpy()}


def digest(result: np.ndarray) -> list[float]:
    """Two numbers of a result that any correct kernel reproduces to rounding."""
    values = np.asarray(result, np.float64).ravel()
    weights = np.cos(np.arange(values.size) * 0.37)
    return [float(values.sum()), float(values @ weights)]


def worker(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", choices=("minigraph", "torch"), required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--launched", type=float, default=None)
    args = parser.parse_args(argv)
    make = minigraph_calls if args.worker == "minigraph" else torch_calls
    state = {"run": lambda: None}

    def select(argument: str) -> str:
        index, gradient = argument.split()
        state["run"] = make(int(index), args.threads)[gradient]
        return json.dumps(digest(state["run"]()))

    def cpu_seconds(argument: str) -> str:  # ``time K`` on the process's CPU clock
        for _ in range(WARMUP_CALLS):
            state["run"]()
        start = time.process_time()
        for _ in range(int(argument)):
            state["run"]()
        return str(time.process_time() - start)

    serve(lambda: state["run"](), {}, {"select": select, "cpu": cpu_seconds})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--only", choices=sorted({layer[0] for layer in LAYERS}))
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="cpu: the worker's process CPU seconds (all its threads), "
                             "steadier than wall time on a busy machine with --threads 1")
    parser.add_argument("--statistic", choices=("median", "min"), default="median")
    parser.add_argument("--baseline", help="a checkout whose minigraph to time beside")
    args = parser.parse_args()
    command = "time" if args.clock == "wall" else "cpu"
    statistic = statistics.median if args.statistic == "median" else min
    def start(name: str, kind: str, env: dict | None = None) -> Worker:
        return Worker([__file__, "--worker", kind, "--threads", str(args.threads)], env, name)

    workers = {name: start(name, name) for name in ("minigraph", "torch")}
    if args.baseline:
        workers["baseline"] = start("baseline", "minigraph",
                                    dict(os.environ, PYTHONPATH=os.path.abspath(args.baseline)))
    rows = []
    try:
        for index, (model, layer, *_rest) in enumerate(LAYERS):
            if args.only and model != args.only:
                continue
            for gradient in GRADIENTS:
                digests = {name: np.array(json.loads(w.ask(f"select {index} {gradient}")))
                           for name, w in workers.items()}
                ours = digests["minigraph"]
                agree = all(np.abs(ours - d).max() <= DIGEST_RTOL * (np.abs(ours).max() + 1.0)
                            for d in digests.values())
                times = interleaved_medians(workers, args.rounds, command=command,
                                            statistic=statistic)
                before = [times["baseline"]] if args.baseline else []
                rows.append([model, layer, gradient,
                             *(f"{t * 1e3:.3f} ({flops(index) / t / 1e9:.0f})"
                               for t in [*before, times["minigraph"], times["torch"]]),
                             f"{times['torch'] / times['minigraph']:.2f}x",
                             "yes" if agree else "NO"])
    finally:
        for w in workers.values():
            w.close()
    print(f"threads: {args.threads}, {args.clock} clock, {args.statistic} of {args.rounds} "
          f"interleaved samples, {time.strftime('%Y-%m-%d %H:%M')}")
    before = ["baseline ms (GFLOP/s)"] if args.baseline else []
    print(markdown_table(["model", "layer (stride 2)", "gradient", *before,
                          "minigraph ms (GFLOP/s)", "PyTorch ms (GFLOP/s)",
                          "PyTorch / minigraph", "results agree"], rows))


if __name__ == "__main__":
    if "--worker" in sys.argv:
        worker(sys.argv[1:])
    else:
        main()
