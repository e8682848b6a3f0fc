"""ResNet-8's training step (``minigraph.examples.resnet8``: CIFAR 32x32x3, batch 32, BN in
training mode, SGD momentum) with the remapper on (the training fusions) and off: results
checked bit for bit over three steps from the same weights, then interleaved medians in one
process (both are minigraph), and the fused ops the step ran.

    python benchmarks/resnet8_fusion.py [--batch 32] [--repeats 9]
"""

from __future__ import annotations

import argparse

import numpy as np
from _common import time_interleaved

import minigraph as mg
from minigraph.examples.resnet8 import build_resnet8_training


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    root = mg.Scope.NewRootScope()
    model = build_resnet8_training(root, args.batch)
    rng = np.random.default_rng(0)
    feeds = {model.images: rng.standard_normal((args.batch, 32, 32, 3)).astype(np.float32),
             model.labels: rng.integers(0, 10, args.batch).astype(np.int32)}
    sessions = {}
    for name, options in (("fused", mg.OptimizerOptions()),
                          ("unfused", mg.OptimizerOptions(remapper=False))):
        session = mg.ClientSession(root, optimizer=options)
        session.Run({}, [], targets=mg.train.global_variables_initializer(root))
        sessions[name] = session
    results = {name: [s.Run(feeds, [model.loss], targets=model.train_op)[0] for _ in range(3)]
               + s.Run({}, model.variables) for name, s in sessions.items()}
    same = all(np.array_equal(a, b) for a, b in zip(results["fused"], results["unfused"]))
    metadata = mg.RunMetadata()
    sessions["fused"].Run(feeds, [model.loss], targets=model.train_op, run_metadata=metadata)
    fused = sorted({s.op_type for s in metadata.step_stats if s.op_type.startswith("_")})
    times = time_interleaved({name: (lambda s=s: s.Run(feeds, [], targets=model.train_op))
                              for name, s in sessions.items()}, repeats=args.repeats)
    print(f"ResNet-8 training step, batch {args.batch}: three steps bit for bit equal: "
          f"{same}; fused ops: {fused}")
    for name, seconds in times.items():
        print(f"  {name:8s} {seconds * 1e3:7.2f} ms/step")
    print(f"  speed-up {times['unfused'] / times['fused']:.2f}x")


if __name__ == "__main__":
    main()
