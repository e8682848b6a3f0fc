"""The remapper's training fusions on a ResNet-style block: one SGD-momentum training step
with ``OptimizerOptions(remapper=False)`` against the default (``_FusedBatchNormEx``,
``_FusedBatchNormGradEx``, ``_FusedApplyMomentum``), interleaved medians, same process
(both are minigraph), results checked bit for bit first.

The block: conv3x3 -> BN (training) -> Relu -> conv3x3 -> BN -> + input -> Relu, twice, then
global average pooling and a dense layer; NHWC, float32.

    python benchmarks/training_fusion.py [--batch 32] [--size 32] [--channels 16]
"""

from __future__ import annotations

import argparse

import numpy as np
from _common import time_interleaved

import minigraph as mg
from minigraph import ops

F32 = np.float32


def build(batch: int, size: int, channels: int, blocks: int = 2):
    """(root, feeds, train target, loss) of the block stack's training step."""
    rng = np.random.default_rng(0)
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root, mg.float32, shape=[batch, size, size, channels])
    labels = ops.Placeholder(root, mg.float32, shape=[batch, 10])
    variables, inits = [], []

    def variable(value):
        v = ops.Variable(root, list(value.shape), mg.float32)
        variables.append(v)
        inits.append(ops.Assign(root, v, value.astype(F32)))
        return v

    def conv_bn(t):
        w = variable(rng.standard_normal((3, 3, channels, channels)) * (2 / (9 * channels)) ** .5)
        conv = ops.Conv2D(root, t, w, [1, 1, 1, 1], "SAME")
        scale, offset = variable(np.ones(channels)), variable(np.zeros(channels))
        return ops.FusedBatchNormV3(root, conv, scale, offset, np.zeros(0, F32),
                                    np.zeros(0, F32)).y

    t = x
    for _ in range(blocks):
        h = ops.Relu(root, conv_bn(t))
        t = ops.Relu(root, ops.AddV2(root, conv_bn(h), t))
    pooled = ops.Mean(root, t, [1, 2])
    logits = ops.MatMul(root, pooled, variable(rng.standard_normal((channels, 10)) * 0.1))
    loss = ops.Mean(root, ops.SoftmaxCrossEntropyWithLogits(root, logits, labels).loss, [0])
    grads = mg.AddSymbolicGradients(root, [loss], variables)
    updates = []
    for v, g in zip(variables, grads):
        accum = ops.Variable(root, v.shape.as_list(), mg.float32)
        inits.append(ops.Assign(root, accum, np.zeros(v.shape.as_list(), F32)))
        updates.append(ops.ApplyMomentum(root, v, accum, F32(0.01), g, F32(0.9)).op)
    train = ops.NoOp(root.WithControlDependencies(updates))
    feeds = {x: rng.standard_normal((batch, size, size, channels)).astype(F32),
             labels: np.eye(10, dtype=F32)[rng.integers(0, 10, batch)]}
    return root, feeds, train, loss, inits, variables


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--channels", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    root, feeds, train, loss, inits, variables = build(args.batch, args.size, args.channels)
    sessions = {}
    for name, options in (("fused", mg.OptimizerOptions()),
                          ("unfused", mg.OptimizerOptions(remapper=False))):
        session = mg.ClientSession(root, optimizer=options)
        session.Run([], [], [i.op for i in inits])
        sessions[name] = session
    first = [s.Run(feeds, [loss, *variables], [train]) for s in sessions.values()]
    same = all(np.array_equal(a, b) for a, b in zip(*first))
    metadata = mg.RunMetadata()
    sessions["fused"].Run(feeds, [loss], [train], run_metadata=metadata)
    fused_ops = sorted({s.op_type for s in metadata.step_stats if s.op_type.startswith("_")})
    times = time_interleaved({name: (lambda s=s: s.Run(feeds, [], [train]))
                              for name, s in sessions.items()}, repeats=args.repeats)
    print(f"ResNet-style block step, batch {args.batch}, {args.size}x{args.size}x"
          f"{args.channels}: results bit for bit equal: {same}; fused ops: {fused_ops}")
    for name, seconds in times.items():
        print(f"  {name:8s} {seconds * 1e3:7.2f} ms/step")
    print(f"  speed-up {times['unfused'] / times['fused']:.2f}x")


if __name__ == "__main__":
    main()
