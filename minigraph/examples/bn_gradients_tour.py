"""Demo: a forward FusedBatchNormV3 feeding FusedBatchNormGradV3, run and explained.

Builds the graph with the TF C++-style API, runs it, and prints y's per-channel statistics
and the gradients next to a float64 numpy recomputation, so the numbers can be trusted.
"""

from __future__ import annotations

import argparse

import numpy as np

import minigraph as mg
from minigraph import ops


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-format", default="NHWC", choices=["NHWC", "NCHW"])
    parser.add_argument("--backend", default=None, choices=["native", "reference"])
    args = parser.parse_args(argv)

    rng = np.random.default_rng(0)
    shape = (8, 6, 6, 4) if args.data_format == "NHWC" else (8, 4, 6, 6)
    axes = (0, 1, 2) if args.data_format == "NHWC" else (0, 2, 3)
    x_value = rng.normal(2.0, 3.0, shape).astype(np.float32)
    dy_value = rng.normal(0.0, 1.0, shape).astype(np.float32)
    scale_value = np.array([1.0, 0.5, 2.0, -1.0], np.float32)

    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[None, *shape[1:]])
    dy = ops.Placeholder(root.WithOpName("dy"), mg.float32)
    scale = ops.Const(root.WithOpName("scale"), scale_value)
    offset = ops.Const(root.WithOpName("offset"), np.zeros(4, np.float32))
    empty = np.zeros(0, np.float32)
    bn = ops.FusedBatchNormV3(root.WithOpName("bn"), x, scale, offset, empty, empty,
                              epsilon=1e-3, data_format=args.data_format, is_training=True)
    grad = ops.FusedBatchNormGradV3(
        root.WithOpName("bn_grad"), dy, x, scale, bn.reserve_space_1, bn.reserve_space_2,
        bn.reserve_space_3,
        ops.FusedBatchNormGradV3.Attrs().Epsilon(1e-3).DataFormat(args.data_format))
    print(f"graph: {len(root.graph())} ops; y static shape {bn.y.shape}, "
          f"x_backprop static shape {grad.x_backprop.shape}")

    session = mg.ClientSession(root, backend=args.backend)
    y, mean, variance, dx, dscale, doffset = session.Run(
        {x: x_value, dy: dy_value},
        [bn.y, bn.batch_mean, bn.batch_variance, grad.x_backprop, grad.scale_backprop,
         grad.offset_backprop])

    x64, dy64 = x_value.astype(np.float64), dy_value.astype(np.float64)
    n = x64.size // 4
    mu = x64.mean(axis=axes, keepdims=True)
    var = x64.var(axis=axes, keepdims=True)
    xhat = (x64 - mu) / np.sqrt(var + 1e-3)
    s = scale_value.reshape(mu.shape)
    dx64 = s / np.sqrt(var + 1e-3) * (dy64 - dy64.mean(axis=axes, keepdims=True)
                                      - xhat * (dy64 * xhat).mean(axis=axes, keepdims=True))
    print(f"backend: {session.backend}")
    print(f"batch_mean      {np.round(mean, 4)}")
    print(f"batch_variance  {np.round(variance, 4)}  (Bessel-corrected, n={n})")
    print(f"y per-channel mean {np.round(y.mean(axis=axes), 4)}, "
          f"std {np.round(y.std(axis=axes), 4)}  (~0 and ~|scale|)")
    print(f"scale_backprop  {np.round(dscale, 4)}")
    print(f"offset_backprop {np.round(doffset, 4)}")
    print(f"max |x_backprop - float64 formula| = {np.abs(dx - dx64).max():.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
