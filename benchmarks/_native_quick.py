"""Quick timing of the native batch-norm functions (minigraph.backends.native).

    python benchmarks/_native_quick.py [--rounds 3] [--dtypes float32,bfloat16]
                                       [--shapes 32x56x56x64,16x8x8x16] [--threads N]

Shapes are given NHWC and run in both layouts (NCHW = the same tensor sizes transposed).
Every configuration is warmed up with two calls, then timed as back-to-back calls (samples of
>= 3 ms); the table shows the best of `rounds` medians, interleaving the configurations in
each round (the machine may be shared). GB/s counts two-pass bytes, T = one tensor:
fwd_train 3T, fwd_infer 2T, bwd_train 5T, bwd_infer 3T, gg_train 8T, gg_infer 5T.
"""

from __future__ import annotations

import argparse
import os
import time

import ml_dtypes
import numpy as np

from minigraph.backends import native

PASS_BYTES = {"fwd_train": 3, "fwd_infer": 2, "bwd_train": 5, "bwd_infer": 3,
              "gg_train": 8, "gg_infer": 5}
DTYPES = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16}


def calls(x, dy, gx, channels, channels_last):
    s = np.ones(channels, np.float32)
    o = np.zeros(channels, np.float32)
    m = np.full(channels, 0.1, np.float32)
    v = np.full(channels, 0.9, np.float32)
    cl, eps = channels_last, 1e-3
    return {
        "fwd_train": lambda: native.bn_forward_training(x, s, o, eps, cl),
        "fwd_infer": lambda: native.bn_forward_inference(x, s, o, m, v, eps, cl),
        "bwd_train": lambda: native.bn_backward_training(dy, x, s, m, v, eps, cl),
        "bwd_infer": lambda: native.bn_backward_inference(dy, x, s, m, v, eps, cl),
        "gg_train": lambda: native.bn_grad_grad_training(dy, x, s, gx, s, o, eps, cl),
        "gg_infer": lambda: native.bn_grad_grad_inference(dy, x, s, m, v, gx, s, o, eps, cl),
    }


def sample(function, repeats):
    start = time.perf_counter()
    for _ in range(repeats):
        function()
    return (time.perf_counter() - start) / repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=7)
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--shapes", default="32x56x56x64,16x8x8x16")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if not native.available():
        raise SystemExit(f"native backend unavailable: {native.unavailable_reason()}")
    if args.threads:
        os.environ["MINIGRAPH_NUM_THREADS"] = str(args.threads)

    rng = np.random.default_rng(0)
    configs = []
    for dtype_name in args.dtypes.split(","):
        for text in args.shapes.split(","):
            n, h, w, c = (int(v) for v in text.split("x"))
            for channels_last in (True, False):
                shape = (n, h, w, c) if channels_last else (n, c, h, w)
                x, dy, gx = (rng.standard_normal(shape).astype(np.float32)
                             .astype(DTYPES[dtype_name]) for _ in range(3))
                for op, function in calls(x, dy, gx, c, channels_last).items():
                    key = (dtype_name, text, "NHWC" if channels_last else "NCHW", op)
                    configs.append((key, function, PASS_BYTES[op] * x.nbytes))

    medians: dict = {key: [] for key, _, _ in configs}
    for _ in range(args.rounds):
        for key, function, _ in configs:
            function()
            function()
            repeats = max(1, int(3e-3 / sample(function, 1)))
            medians[key].append(np.median([sample(function, repeats)
                                           for _ in range(args.samples)]))

    print(f"native ISA {native.isa()}, {native.num_threads()} threads")
    print(f"{'dtype':9s} {'shape (NHWC)':14s} {'layout':6s} {'function':10s} "
          f"{'time':>11s} {'GB/s':>7s}")
    for key, _, nbytes in configs:
        best = min(medians[key])
        shown = f"{best * 1e3:8.3f} ms" if best >= 1e-4 else f"{best * 1e6:8.1f} us"
        print(f"{key[0]:9s} {key[1]:14s} {key[2]:6s} {key[3]:10s} {shown:>11s} "
              f"{nbytes / best / 1e9:7.1f}")


if __name__ == "__main__":
    main()
