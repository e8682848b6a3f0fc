"""Time per training step of the digits CNN (batch 64, Adam): minigraph vs PyTorch eager (CPU),
each framework in its own worker process.

Same architecture (Conv(1->32,3x3)-BN-ReLU-Conv(32->64,3x3)-BN-ReLU-MaxPool(2)-Dense(10)),
same initial weights and batch, same optimizer (Adam, lr 0.003), same thread count,
interleaved medians: ``train_peers.py``'s machinery on its ``digits-adam`` model, one table
per layout (minigraph NHWC against PyTorch channels_last, NCHW against NCHW). ``--profile``
prints where minigraph's step time goes, per op type and kernel backend (``RunMetadata``).

    python benchmarks/train_step.py [--data-format NCHW] [--threads 2] [--profile] [--quick]

Earlier versions imported minigraph and PyTorch into one process: PyTorch then ran on the
libgomp minigraph had loaded (for batch norm, then on OpenMP), with its
``GOMP_SPINCOUNT=1000``, and slowed down.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import markdown_table  # noqa: E402
from train_peers import HEADER, measure  # noqa: E402

LAYOUTS = {"NHWC": ["minigraph", "torch-channels-last"], "NCHW": ["minigraph-nchw", "torch-nchw"]}


def profile_table(reply: str) -> str:
    """The minigraph worker's ``profile`` answer as a markdown table (top 15 op types, then
    the time outside kernels: plan walk, validation, dispatch)."""
    data = json.loads(reply)
    wall, ops = data["wall"], data["ops"]
    rows = [[op, f"{t * 1e3:.3f}", f"{100 * t / wall:.1f}%"]
            for op, t in sorted(ops.items(), key=lambda kv: -kv[1])[:15]]
    outside = wall - sum(ops.values())
    rows.append(["(framework: plan walk, validation, dispatch)", f"{outside * 1e3:.3f}",
                 f"{100 * outside / wall:.1f}%"])
    return markdown_table(["op type (kernel backend)", "ms / step", "share"], rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-format", choices=list(LAYOUTS), default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--backend", choices=["native", "reference"], default="native")
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--quick", action="store_true",
                        help="3 rounds of >= 5 ms samples: a smoke run, not a measurement")
    args = parser.parse_args(argv)
    rounds, min_sample = (3, 0.005) if args.quick else (args.rounds, 0.02)
    print(f"# Digits CNN training step (batch 64, Adam), {args.threads} threads, minigraph "
          f"backend {args.backend}, each framework in its own process"
          f"{' (quick: not a measurement)' if args.quick else ''}\n")
    for layout in [args.data_format] if args.data_format else list(LAYOUTS):
        profiles = []

        def inspect(rows, profiles=profiles):
            if args.profile:
                profiles += [(r.label, r.worker.ask("profile 50")) for r in rows
                             if r.label.startswith("minigraph")]

        table, _ = measure("digits-adam", LAYOUTS[layout], [""], args.threads, rounds,
                           min_sample=min_sample, inspect=inspect, backend=args.backend)
        print(f"## {layout}\n\n{markdown_table(HEADER, table)}\n", flush=True)
        for label, reply in profiles:
            print(f"### Where {label}'s step time goes\n\n{profile_table(reply)}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
