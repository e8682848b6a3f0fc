"""Time per training step of the digits CNN (batch 64): minigraph vs PyTorch eager (CPU).

Same architecture (Conv(1->32,3x3)-BN-ReLU-Conv(32->64,3x3)-BN-ReLU-MaxPool(2)-Dense(10)),
same optimizer (Adam), same thread count, interleaved medians. ``--profile`` prints where
minigraph's step time goes, per op type.

    python benchmarks/train_step.py [--data-format NCHW] [--threads 1] [--profile]
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import markdown_table, time_interleaved  # noqa: E402

import minigraph as mg  # noqa: E402
from minigraph.client import session as session_module  # noqa: E402
from minigraph.examples.train_digits_cnn import build, load_digits, parse  # noqa: E402


def minigraph_step(data_format: str, backend: str | None):
    args = parse(["--data-format", data_format] + (["--backend", backend] if backend else []))
    g = build(args)
    session = mg.ClientSession(g["root"], backend=args.backend)
    session.Run({}, [], targets=mg.train.global_variables_initializer(g["root"]))
    x, y, _, _ = load_digits(0)
    feeds = {g["images"]: x[:64], g["labels"]: y[:64]}
    return (lambda: session.Run(feeds, [g["loss"]], targets=g["step"])), session, feeds, g


def torch_step(torch, data_format: str):
    nn = torch.nn
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32, eps=1e-3), nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64, eps=1e-3), nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(1024, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.003)
    x, y, _, _ = load_digits(0)
    images = torch.from_numpy(x[:64]).permute(0, 3, 1, 2).contiguous()
    if data_format == "NHWC":
        model = model.to(memory_format=torch.channels_last)
        images = images.to(memory_format=torch.channels_last)
    labels = torch.from_numpy(y[:64]).long()
    loss_fn = nn.CrossEntropyLoss()

    def step():
        optimizer.zero_grad()
        loss = loss_fn(model(images), labels)
        loss.backward()
        optimizer.step()
        return loss

    return step


def profile(session, feeds, g, steps: int = 50) -> str:
    """Seconds per op type in one step, by timing every kernel call of ``steps`` steps."""
    totals: dict[str, float] = collections.defaultdict(float)
    original = session_module._Step.__init__

    def timed_init(self, op, *rest, **kw):
        original(self, op, *rest, **kw)
        kernel = self.kernel

        def timed(*args, _kernel=kernel, _type=op.type):
            start = time.perf_counter()
            result = _kernel(*args)
            totals[_type] += time.perf_counter() - start
            return result

        self.kernel = timed

    session_module._Step.__init__ = timed_init
    try:
        session._plans.clear()
        run = lambda: session.Run(feeds, [g["loss"]], targets=g["step"])  # noqa: E731
        run()
        totals.clear()
        start = time.perf_counter()
        for _ in range(steps):
            run()
        wall = (time.perf_counter() - start) / steps
    finally:
        session_module._Step.__init__ = original
        session._plans.clear()
    kernels = sum(totals.values()) / steps
    rows = [[op, f"{t / steps * 1e3:.3f}", f"{100 * t / steps / wall:.1f}%"]
            for op, t in sorted(totals.items(), key=lambda kv: -kv[1])[:15]]
    rows.append(["(framework: plan walk, validation, dispatch)",
                 f"{(wall - kernels) * 1e3:.3f}", f"{100 * (wall - kernels) / wall:.1f}%"])
    return markdown_table(["op type", "ms / step", "share"], rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-format", choices=["NHWC", "NCHW"], default=None)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--backend", choices=["native", "reference"], default=None)
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    from threadpoolctl import threadpool_limits

    try:
        import torch

        torch.set_num_threads(args.threads)
    except ImportError:
        torch = None
    os.environ["MINIGRAPH_NUM_THREADS"] = str(args.threads)
    rows = []
    formats = [args.data_format] if args.data_format else ["NHWC", "NCHW"]
    profiles = []
    with threadpool_limits(1, user_api="blas"):
        for data_format in formats:
            step, session, feeds, g = minigraph_step(data_format, args.backend)
            functions = {"minigraph": step}
            if torch is not None:
                functions["pytorch eager"] = torch_step(torch, data_format)
            times = time_interleaved(functions, args.repeats, min_sample=0.02)
            ratio = times["pytorch eager"] / times["minigraph"] if torch is not None else None
            rows.append([data_format, f"{times['minigraph'] * 1e3:.2f}",
                         f"{times['pytorch eager'] * 1e3:.2f}" if torch else "n/a",
                         f"{ratio:.2f}x" if ratio else "-"])
            if args.profile:
                profiles.append((data_format, profile(session, feeds, g)))
    isa = ""
    if session.backend == "native":
        from minigraph.backends import native

        isa = f" (ISA {native.isa()}: C convolutions, pools, ReLU, batch norm, Adam)"
    print(f"# Digits CNN training step (batch 64, Adam), threads={args.threads}, minigraph "
          f"backend={session.backend}{isa}, BLAS threads=1\n")
    print(markdown_table(["format", "minigraph ms/step", "pytorch eager ms/step",
                          "pytorch / minigraph"], rows))
    for data_format, table in profiles:
        print(f"\n## Where minigraph's step time goes ({data_format})\n\n{table}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
