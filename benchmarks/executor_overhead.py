"""Per-node executor overhead: a chain of N tiny ops (8 floats each: Relu, AddV2 with the
previous value, Sigmoid, Mul...), so the time per node is the session's Python around each
kernel call (and the kernels' own wrappers), not the math; and a chain of N ``Identity``
ops (kept: ``identity_removal`` off), whose kernel returns its input, so the time per node
is the session's alone. ``--models digits resnet8``: the session's time in those training
steps (``train_peers.py``'s), every kernel replaced by one returning the results it gave
once, so only the executor's Python remains (per step and per node of the step's plan).

Prints microseconds per node for each configuration, measured interleaved in one process:
the calling thread's CPU time (``time.thread_time``, which a busy shared machine disturbs
much less than wall time; kernels this small run on the calling thread) and wall time,
medians of the samples.

    python benchmarks/executor_overhead.py [--nodes 200] [--backend native]
        [--models digits resnet8]

Run it on two checkouts (``PYTHONPATH=<checkout>``) for a before/after comparison.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from collections.abc import Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import markdown_table, time_interleaved  # noqa: E402

import minigraph as mg  # noqa: E402
from minigraph import ops  # noqa: E402

CYCLE = ("Relu", "AddV2", "Sigmoid", "Mul", "Tanh", "Sub")


def chain(nodes: int):
    """A Placeholder and ``nodes`` ops, each reading the previous value (and the one before
    it, for binary ops)."""
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[8])
    previous, current = x, x
    for i in range(nodes):
        op_type = CYCLE[i % len(CYCLE)]
        if op_type in ("AddV2", "Mul", "Sub"):
            value = getattr(ops, op_type)(root, current, previous)
        else:
            value = getattr(ops, op_type)(root, current)
        previous, current = current, value
    return root, x, current


def identity_chain(nodes: int):
    """A Placeholder and ``nodes`` Identity ops in a row."""
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[8])
    current = x
    for _ in range(nodes):
        current = ops.Identity(root, current)
    return root, x, current


def _cached(kernel):
    """``kernel``, computing once: later calls return the first call's results."""
    first: list = []

    def cached(op, values, ctx, out=None):
        if not first:
            first.append(kernel(op, values, ctx))
        return list(first[0])

    return cached


def session_only(model_name: str) -> tuple[Callable[[], object], int]:
    """The training step of ``model_name`` (1 thread) with cached kernels, and the number
    of steps of its plan (constants folded)."""
    from _training_models import MODELS, initial_arrays, split_arrays
    from _training_peers import minigraph_step

    model = MODELS[model_name]
    weights, images, labels = split_arrays(initial_arrays(model))
    step, _ = minigraph_step(model, "NHWC", weights, images, labels, threads=1)
    step()
    step()  # constants folded
    plan = max((plan for plan, _ in step.session._plans.values()), key=len)
    for item in plan:
        if hasattr(item, "kernel"):
            item.kernel = _cached(item.kernel)
    plan.bound = None  # bound plans compile the kernels they call: bind anew
    nodes = len(plan.folded[1]) if plan.folded else len(plan)
    return step, nodes


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--backend", default="native")
    parser.add_argument("--models", nargs="*", default=[], choices=["digits", "resnet8"])
    args = parser.parse_args(argv)
    root, x, y = chain(args.nodes)
    feed = {x: np.linspace(-1, 1, 8, dtype=np.float32)}
    fields = {f.name for f in dataclasses.fields(mg.OptimizerOptions)}
    configurations = {"default": mg.OptimizerOptions()}
    if "memory_planner" in fields:
        configurations["memory planner off"] = mg.OptimizerOptions(memory_planner=False)
    runs = {}
    for name, options in configurations.items():
        session = mg.ClientSession(root, backend=args.backend, optimizer=options)
        runs[name] = (lambda s: lambda: s.Run(feed, y))(session)
    identity_root, ix, iy = identity_chain(args.nodes)
    session = mg.ClientSession(identity_root, backend=args.backend,
                               optimizer=mg.OptimizerOptions(identity_removal=False))
    identity_feed = {ix: feed[x]}
    runs["Identity chain (session only)"] = lambda: session.Run(identity_feed, iy)
    cpu = time_interleaved(runs, repeats=15, clock=time.thread_time)
    wall = time_interleaved(runs, repeats=15)
    print(f"{args.nodes} nodes of 8 floats, backend {args.backend}, "
          f"check_outputs={os.environ.get('MINIGRAPH_CHECK_OUTPUTS', '0')}")
    print(markdown_table(["configuration", "us per node (thread CPU)", "us per node (wall)"],
                         [[name, f"{cpu[name] / args.nodes * 1e6:.2f}",
                           f"{wall[name] / args.nodes * 1e6:.2f}"] for name in runs]))
    if args.models:
        steps = {name: session_only(name) for name in args.models}
        cpu = time_interleaved({name: step for name, (step, _) in steps.items()},
                               repeats=15, clock=time.thread_time)
        print("\ntraining steps, kernels cached (the session's time only), 1 thread")
        print(markdown_table(["model", "nodes", "us per step (thread CPU)", "us per node"],
                             [[name, nodes, f"{cpu[name] * 1e6:.0f}",
                               f"{cpu[name] / nodes * 1e6:.2f}"]
                              for name, (_, nodes) in steps.items()]))


if __name__ == "__main__":
    main()
