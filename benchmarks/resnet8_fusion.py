"""ResNet-8's training step (``minigraph.examples.resnet8``: CIFAR 32x32x3, batch 32, BN in
training mode, SGD momentum) with one graph pass on and off (``--pass``: the remapper, i.e.
the training fusions, by default; ``layout`` with ``--data-format NCHW`` for the layout
pass): results checked bit for bit over three steps from the same weights, then interleaved
medians in one process (both are minigraph), and the fused ops the step ran.

    python benchmarks/resnet8_fusion.py [--batch 32] [--repeats 9] [--pass remapper]
        [--data-format NHWC]
"""

from __future__ import annotations

import argparse
from dataclasses import fields, replace

import numpy as np
from _common import time_interleaved

import minigraph as mg
from minigraph.examples.resnet8 import build_resnet8_training


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--pass", dest="graph_pass", default="remapper",
                        choices=[f.name for f in fields(mg.OptimizerOptions)])
    parser.add_argument("--data-format", default="NHWC", choices=["NHWC", "NCHW"])
    args = parser.parse_args()
    root = mg.Scope.NewRootScope()
    model = build_resnet8_training(root, args.batch, data_format=args.data_format)
    rng = np.random.default_rng(0)
    feeds = {model.images: rng.standard_normal((args.batch, 32, 32, 3)).astype(np.float32),
             model.labels: rng.integers(0, 10, args.batch).astype(np.int32)}
    sessions = {}
    for name, options in (("on", mg.OptimizerOptions()),
                          ("off", replace(mg.OptimizerOptions(), **{args.graph_pass: False}))):
        session = mg.ClientSession(root, optimizer=options)
        session.Run({}, [], targets=mg.train.global_variables_initializer(root))
        sessions[name] = session
    results = {name: [s.Run(feeds, [model.loss], targets=model.train_op)[0] for _ in range(3)]
               + s.Run({}, model.variables) for name, s in sessions.items()}
    same = all(a.tobytes() == b.tobytes() for a, b in zip(results["on"], results["off"]))
    metadata = mg.RunMetadata()
    sessions["on"].Run(feeds, [model.loss], targets=model.train_op, run_metadata=metadata)
    fused = sorted({s.op_type for s in metadata.step_stats if s.op_type.startswith("_")})
    transposes = sum(s.op_type == "Transpose" for s in metadata.step_stats)
    times = time_interleaved({name: (lambda s=s: s.Run(feeds, [], targets=model.train_op))
                              for name, s in sessions.items()}, repeats=args.repeats)
    print(f"ResNet-8 training step, batch {args.batch}, {args.data_format}, {args.graph_pass} "
          f"on/off: three steps bit for bit equal: {same}; fused ops: {fused}; "
          f"transposes run: {transposes}")
    for name, seconds in times.items():
        print(f"  {args.graph_pass} {name:4s} {seconds * 1e3:7.2f} ms/step")
    print(f"  speed-up {times['off'] / times['on']:.2f}x")


if __name__ == "__main__":
    main()
