"""The five-minute tour of the seed op: FusedBatchNormV3, its gradient, and its second order.

1. Builds a forward FusedBatchNormV3 (training mode) with the TF C++-style API.
2. Lets AddSymbolicGradients wire the FusedBatchNormGradV3 node and prints its outputs.
3. Differentiates again (a fused FusedBatchNormGradGrad node) for a Hessian-vector product.
4. Checks both against central finite differences in float64 (mg.gradient_checker).
"""

from __future__ import annotations

import argparse

import numpy as np

import minigraph as mg
from minigraph import ops
from minigraph.testing.gradient_checker import compute_gradient, max_error


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-format", default="NHWC", choices=["NHWC", "NCHW"],
                        help="the layout of x (default: NHWC)")
    parser.add_argument("--backend", default=None, choices=["native", "reference"],
                        help="the CPU kernels (default: native when the C kernels are built)")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    nhwc = args.data_format == "NHWC"
    shape = (4, 3, 3, 2) if nhwc else (4, 2, 3, 3)
    axes = [0, 1, 2, 3]

    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=shape)
    scale = ops.Placeholder(root.WithOpName("scale"), mg.float32, shape=[2])
    offset = ops.Const(root.WithOpName("offset"), np.array([0.1, -0.2], np.float32))
    empty = np.zeros(0, np.float32)
    bn = ops.FusedBatchNormV3(root.WithOpName("bn"), x, scale, offset, empty, empty,
                              epsilon=1e-3, data_format=args.data_format, is_training=True)
    weights = ops.Const(root.WithOpName("w"), rng.normal(size=shape).astype(np.float32))
    loss = ops.Sum(root.WithOpName("loss"), ops.Mul(root, bn.y, weights), axes)
    dx, dscale, doffset = mg.AddSymbolicGradients(root, [loss], [x, scale, offset])
    grad_op = dx.op
    print(f"1st order: {grad_op.type} '{grad_op.name}' fed by "
          f"{[i.name for i in grad_op.inputs[3:]]}")

    probe = ops.Const(root.WithOpName("v"), rng.normal(size=shape).astype(np.float32))
    hvp = ops.Sum(root, ops.Mul(root, dx, probe), axes)
    d2x, d2scale = mg.AddSymbolicGradients(root, [hvp], [x, scale])
    print(f"2nd order: {d2x.op.type} '{d2x.op.name}' (one fused node)")

    x_value = rng.normal(1.0, 2.0, shape).astype(np.float32)
    scale_value = np.array([1.5, -0.5], np.float32)
    session = mg.ClientSession(root, backend=args.backend)
    feeds = {x: x_value, scale: scale_value}
    values = session.Run(feeds, [dx, dscale, doffset, d2x, d2scale])
    for name, value in zip(["x_backprop", "scale_backprop", "offset_backprop",
                            "d<x_backprop, v>/dx", "d<x_backprop, v>/dscale"], values):
        print(f"{name:>24}: shape {value.shape}, |max| {np.abs(value).max():.4f}")

    worst = 0.0
    for label, tensor in (("x_backprop", dx), ("second order d/dx", d2x)):
        theoretical, numerical = compute_gradient([x, scale], [x_value, scale_value], tensor)
        error = max_error(theoretical, numerical)
        worst = max(worst, error)
        print(f"finite differences vs symbolic Jacobian of {label}: max error {error:.2e}")
    print("OK" if worst < 1e-6 else "MISMATCH")
    return 0 if worst < 1e-6 else 1


if __name__ == "__main__":
    raise SystemExit(main())
