"""Per-layer convolution peers: minigraph's native Conv2D, Conv2DBackpropInput and
Conv2DBackpropFilter kernels against PyTorch eager (oneDNN) at every convolution of the
ResNet-8 and digits training steps (benchmarks/train_peers.py), and at shapes nobody tuned on.

    python benchmarks/conv_peers.py [--models resnet8 digits unseen] [--layout nhwc]
        [--threads 2] [--clock time|cputime] [--rounds 9]

Each framework runs in its own worker process (``_workers``: minigraph's pool and PyTorch's
OpenMP team never share one), started in the default environment with ``--threads`` threads
(``torch.set_num_threads``, ``native.set_num_threads``). Per (layer, direction) the
coordinator points both workers at the case and samples them interleaved (rotating order,
two untimed calls, then k calls lasting >= 20 ms per sample) and reports the median and the
minimum; ``--clock cputime`` times the workers' CPU seconds instead of wall time (with one
thread, a measure that other tenants' preemptions leave out).

minigraph runs the registered native kernels themselves (``conv2d_native`` and the two
gradients, with the routing a training step takes: direct or implicit GEMM forward, direct
stride-1 or GEMM gradients). PyTorch runs ``F.conv2d`` (no autograd) and
``aten.convolution_backward`` with one output each (what autograd calls), ``channels_last``
tensors for ``--layout nhwc`` and contiguous NCHW for ``nchw``; symmetric padding k // 2 (the
stride-2 SAME pads of TF differ by one row, the work does not). The stem's input gradient
(of the images) is computed by neither step, so it is left out. GFLOP/s = 2 * multiply-adds
/ median; the last rows weigh each layer by its uses in one step.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from _common import markdown_table  # noqa: E402
from _workers import Worker, interleaved_samples, serve  # noqa: E402

# (model, layer, input NHWC, kernel, out channels, stride, uses per step, input gradient)
LAYERS = [
    ("resnet8", "stem 3x3 3->16", (32, 32, 32, 3), 3, 16, 1, 1, False),
    ("resnet8", "stage1 3x3 16->16", (32, 32, 32, 16), 3, 16, 1, 2, True),
    ("resnet8", "stage2 a 3x3 16->32 s2", (32, 32, 32, 16), 3, 32, 2, 1, True),
    ("resnet8", "stage2 proj 1x1 16->32 s2", (32, 32, 32, 16), 1, 32, 2, 1, True),
    ("resnet8", "stage2 b 3x3 32->32", (32, 16, 16, 32), 3, 32, 1, 1, True),
    ("resnet8", "stage3 a 3x3 32->64 s2", (32, 16, 16, 32), 3, 64, 2, 1, True),
    ("resnet8", "stage3 proj 1x1 32->64 s2", (32, 16, 16, 32), 1, 64, 2, 1, True),
    ("resnet8", "stage3 b 3x3 64->64", (32, 8, 8, 64), 3, 64, 1, 1, True),
    ("digits", "conv1 3x3 1->32", (64, 8, 8, 1), 3, 32, 1, 1, False),
    ("digits", "conv2 3x3 32->64", (64, 8, 8, 32), 3, 64, 1, 1, True),
    ("unseen", "3x3 24->48 20x20 b16", (16, 20, 20, 24), 3, 48, 1, 1, True),
    ("unseen", "3x3 96->96 12x12 b16", (16, 12, 12, 96), 3, 96, 1, 1, True),
    ("unseen", "1x1 48->24 20x20 b16", (16, 20, 20, 48), 1, 24, 1, 1, True),
    ("unseen", "3x3 8->16 28x28 b16", (16, 28, 28, 8), 3, 16, 1, 1, True),
    ("unseen", "3x3 40->40 10x10 b8", (8, 10, 10, 40), 3, 40, 1, 1, True),
    ("unseen", "3x3 128->128 4x4 b64", (64, 4, 4, 128), 3, 128, 1, 1, True),
    ("unseen", "3x3 12->20 15x15 s2 b24", (24, 15, 15, 12), 3, 20, 2, 1, True),
]
DIRECTIONS = ("forward", "input", "filter")


def out_size(size: int, kernel: int, stride: int) -> int:
    """SAME output size (TF and PyTorch's padding k // 2 agree for odd kernels)."""
    return -(-size // stride) if kernel % 2 else (size - 1) // stride + 1


def case_arrays(index: int, seed: int = 0):
    """(x NHWC, f HWIO, dy NHWC) of layer ``index``, float32 standard normal."""
    import numpy as np

    _, _, (n, h, w, c), k, co, stride, _, _ = LAYERS[index]
    rng = np.random.default_rng(seed + index)
    oh, ow = out_size(h, k, stride), out_size(w, k, stride)
    return (rng.standard_normal((n, h, w, c), dtype=np.float32),
            rng.standard_normal((k, k, c, co), dtype=np.float32),
            rng.standard_normal((n, oh, ow, co), dtype=np.float32))


def flops(index: int) -> float:
    _, _, (n, h, w, c), k, co, stride, _, _ = LAYERS[index]
    return 2.0 * n * out_size(h, k, stride) * out_size(w, k, stride) * k * k * c * co


# ----------------------------------------------------------------------------- workers


class _Op:
    """The attributes a convolution kernel reads of its op (hashable, as ``_window``'s cache
    needs)."""

    def __init__(self, stride: int, fmt: str) -> None:
        self.type, self.name = "Conv2D", "conv_peers"
        strides = [1, stride, stride, 1] if fmt == "NHWC" else [1, 1, stride, stride]
        self.attrs = {"strides": strides, "padding": "SAME", "data_format": fmt,
                      "dilations": [1, 1, 1, 1], "explicit_paddings": []}


def minigraph_call(index: int, direction: str, nchw: bool, threads: int):
    import numpy as np

    from minigraph.backends import convolution_kernels as ck
    from minigraph.backends import native

    native.set_num_threads(threads)
    x, f, dy = case_arrays(index)
    if nchw:
        x, dy = (np.ascontiguousarray(a.transpose(0, 3, 1, 2)) for a in (x, dy))
    op = _Op(LAYERS[index][5], "NCHW" if nchw else "NHWC")
    if direction == "forward":
        return lambda: ck.conv2d_native(op, [x, f], None)
    if direction == "input":
        sizes = np.array(x.shape, np.int32)
        return lambda: ck.conv2d_backprop_input_native(op, [sizes, f, dy], None)
    sizes = np.array(f.shape, np.int32)
    return lambda: ck.conv2d_backprop_filter_native(op, [x, sizes, dy], None)


def torch_call(index: int, direction: str, nchw: bool, threads: int):
    import torch

    torch.set_num_threads(threads)
    memory = torch.contiguous_format if nchw else torch.channels_last
    x, f, dy = (torch.from_numpy(a) for a in case_arrays(index))
    x, dy = (a.permute(0, 3, 1, 2).contiguous(memory_format=memory) for a in (x, dy))
    w = f.permute(3, 2, 0, 1).contiguous(memory_format=memory)
    k, stride = LAYERS[index][3], LAYERS[index][5]
    pad = [k // 2] * 2
    if direction == "forward":
        def run():
            with torch.no_grad():
                return torch.nn.functional.conv2d(x, w, stride=stride, padding=pad)
        return run
    mask = [direction == "input", direction == "filter", False]
    return lambda: torch.ops.aten.convolution_backward(
        dy, x, w, None, [stride] * 2, pad, [1, 1], False, [0, 0], 1, mask)


def worker_main(args) -> None:
    make = minigraph_call if args.worker == "minigraph" else torch_call
    current = {"run": lambda: None}

    def select(argument: str) -> str:
        index, direction = argument.split()
        current["run"] = make(int(index), direction, args.layout == "nchw", args.threads)
        current["run"]()  # builds caches, checks that it runs
        return "ok"

    serve(lambda: current["run"](), {"peer": args.worker}, {"case": select})


# ----------------------------------------------------------------------------- coordinator


def start(peer: str, args) -> Worker:
    argv = [os.path.abspath(__file__), "--worker", peer, "--threads", str(args.threads),
            "--layout", args.layout]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in [env.get("PYTHONPATH")] if p])
    return Worker(argv, env, peer)


def measure(args) -> tuple[list[list[str]], dict]:
    workers = {peer: start(peer, args) for peer in ("minigraph", "torch")}
    rows, totals = [], {}
    try:
        for index, (model, layer, *_, uses, input_grad) in enumerate(LAYERS):
            if model not in args.models:
                continue
            for direction in DIRECTIONS:
                if direction == "input" and not input_grad:
                    continue
                for w in workers.values():
                    w.ask(f"case {index} {direction}")
                samples = interleaved_samples(workers, args.rounds, args.min_sample,
                                              command=args.clock)
                med = {p: statistics.median(s) for p, s in samples.items()}
                low = {p: min(s) for p, s in samples.items()}
                for p in med:
                    key = (model, p)
                    totals[key] = totals.get(key, 0.0) + uses * med[p]
                gf = flops(index) / 1e9
                rows.append([model, layer, direction,
                             f"{med['minigraph'] * 1e3:.3f} ({low['minigraph'] * 1e3:.3f})",
                             f"{med['torch'] * 1e3:.3f} ({low['torch'] * 1e3:.3f})",
                             f"{gf / med['minigraph']:.0f}", f"{gf / med['torch']:.0f}",
                             f"{med['torch'] / med['minigraph']:.2f}x"])
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    finally:
        for w in workers.values():
            w.close()
    return rows, totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", choices=("resnet8", "digits", "unseen"),
                        default=["resnet8", "digits", "unseen"])
    parser.add_argument("--layout", choices=("nhwc", "nchw"), default="nhwc")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--clock", choices=("time", "cputime"), default="time")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--min-sample", type=float, default=0.02)
    parser.add_argument("--worker", choices=("minigraph", "torch"), help=argparse.SUPPRESS)
    parser.add_argument("--launched", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker_main(args)
        return
    rows, totals = measure(args)
    print(f"threads: {args.threads}, layout: {args.layout}, clock: {args.clock}, "
          f"{args.rounds} rounds; ms median (minimum)\n")
    print(markdown_table(["model", "layer", "direction", "minigraph ms", "PyTorch ms",
                          "minigraph GFLOP/s", "PyTorch GFLOP/s", "PyTorch / minigraph"],
                         rows))
    print()
    for model in args.models:
        if (model, "minigraph") in totals:
            mg, pt = totals[(model, "minigraph")], totals[(model, "torch")]
            print(f"{model}: convolutions of one step (each layer times its uses, medians): "
                  f"minigraph {mg * 1e3:.2f} ms, PyTorch {pt * 1e3:.2f} ms ({pt / mg:.2f}x)")


if __name__ == "__main__":
    main()
