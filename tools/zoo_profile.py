"""Where minigraph's time goes on one Keras zoo model: per-node RunMetadata timings of the
native backend, summed by op type, by kernel (module.function) and, for convolutions, by
the route the forward kernel took (gemm / direct / depthwise) and shape family.

    python tools/zoo_profile.py MODEL [--batch 2] [--threads 2] [--runs 5] [--top 12]
        [--layers 10] [--wall --peak]

Each node's time is the median over ``runs`` profiled runs (after two warm-up runs) of the
process's CPU time (``time.process_time``: a step preempted by another process does not
count; with several threads, a waiting pool thread's spinning does) or, with ``--wall``, of
wall time; ``--peak`` (with ``--wall`` and ``--layers``) also measures the float32 FMA peak
on as many threads (``benchmarks/_common.fma_peak``) and gives the convolutions' GFLOP/s as
a share of it (issue 22's line for ResNet50 at batch 32). On a loaded machine read the
shares, not the absolute times. The graph is the
zoo's cached frozen GraphDef (``minigraph/testing/keras_zoo.py``), its feeds' rows repeated
to ``batch``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import types
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


import minigraph as mg  # noqa: E402
from minigraph.backends import convolution_kernels, native  # noqa: E402
from minigraph.client import session as session_module  # noqa: E402
from minigraph.client.session import RunMetadata  # noqa: E402
from minigraph.testing import keras_zoo  # noqa: E402

_routes: list[tuple[str, float]] = []  # (route and shape, FLOPs) since the last recorded step


def _tracing(route_function):
    """``forward_route`` that also notes the route and the shape family it saw."""
    def traced(x_shape, f_shape, window, groups):
        route = route_function(x_shape, f_shape, window, groups)
        kh, kw, cg, co = f_shape
        stride = "x".join(map(str, window.strides))
        pixels = x_shape[0] * window.out[0] * window.out[1]
        _routes.append((f"{route} {kh}x{kw}/s{stride} g{groups} cin/g {cg} cout {co} "
                        f"px {pixels}", 2.0 * pixels * kh * kw * cg * co))
        return route
    return traced


class _RouteMetadata(RunMetadata):
    """RunMetadata that pins the routes traced during a step to that step."""

    def __init__(self) -> None:
        super().__init__()
        self.routes: list[tuple[str, float] | None] = []

    def record(self, step, seconds: float, *more) -> None:
        super().record(step, seconds, *more)
        self.routes.append(_routes[-1] if _routes else None)
        _routes.clear()


def profile(model: str, batch: int, threads: int, runs: int, wall: bool = False,
            size: int | None = None) -> list[tuple]:
    """(node, op type, kernel, route or None, median seconds, convolution FLOPs or 0) per
    executed step (an application at ``size`` x ``size`` input; None: the zoo's)."""
    native.set_num_threads(threads)
    graph = keras_zoo.load(model, size)
    feeds = keras_zoo.batch_feeds(graph, batch)
    session = mg.ClientSession(mg.import_graph_def(graph.graph_def), backend="native")
    for _ in range(2):
        session.Run(feeds, graph.fetches)
    route_function, clock = convolution_kernels.forward_route, session_module.time
    convolution_kernels.forward_route = _tracing(route_function)
    if not wall:  # the executor times steps with time.perf_counter: give it CPU time
        session_module.time = types.SimpleNamespace(perf_counter=time.process_time)
    try:
        samples = []
        for _ in range(runs):
            metadata = _RouteMetadata()
            session.Run(feeds, graph.fetches, run_metadata=metadata)
            samples.append(metadata)
    finally:
        convolution_kernels.forward_route, session_module.time = route_function, clock
    first = samples[0]
    return [(s.node_name, s.op_type, s.kernel, route and route[0],
             statistics.median(m.step_stats[i].seconds for m in samples),
             route[1] if route else 0.0)
            for i, (s, route) in enumerate(zip(first.step_stats, first.routes))]


def _table(title: str, totals: dict, counts: dict, whole: float, top: int) -> str:
    lines = [f"\n{title}", f"{'ms':>8} {'share':>6} {'nodes':>5}  key"]
    for key, seconds in sorted(totals.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"{seconds * 1e3:8.2f} {100 * seconds / whole:5.1f}% {counts[key]:5d}  {key}")
    return "\n".join(lines)


def report(rows: list[tuple], top: int) -> str:
    whole = sum(r[4] for r in rows)
    parts = [f"{len(rows)} steps, {whole * 1e3:.2f} ms summed"]
    for title, key in (("by op type", lambda r: r[1]),
                       ("by kernel", lambda r: f"{r[1]} {r[2]}"),
                       ("convolution routes", lambda r: r[3])):
        totals: dict = defaultdict(float)
        counts: dict = defaultdict(int)
        for r in rows:
            k = key(r)
            if k is not None:
                totals[k] += r[4]
                counts[k] += 1
        parts.append(_table(title, totals, counts, whole, top))
    route_totals: dict = defaultdict(float)
    for r in rows:
        if r[3]:
            route_totals[r[3].split()[0]] += r[4]
    parts.append("\nroute totals: " + ", ".join(
        f"{k} {100 * v / whole:.1f}%" for k, v in sorted(route_totals.items())))
    return "\n".join(parts)


def layers(rows: list[tuple], top: int, threads: int, wall: bool,
           peak: float | None = None) -> str:
    """The ``top`` slowest convolution nodes: time, GFLOP/s (per thread in CPU time: a
    thread's share of the FMA peak is the same fraction of the whole) and route; with
    ``peak`` (GFLOP/s, wall time) the share of it all convolutions reach."""
    convs = sorted((r for r in rows if r[3]), key=lambda r: -r[4])[:top]
    unit = "GFLOP/s" if wall else "GFLOP/s per thread"
    lines = [f"\nslowest convolutions ({unit}; {threads} threads)",
             f"{'ms':>8} {'GFLOP/s':>8}  route and shape  (node)"]
    for r in convs:
        rate = r[5] / r[4] / 1e9 if r[4] else 0.0
        lines.append(f"{r[4] * 1e3:8.2f} {rate:8.1f}  {r[3]}  ({r[0]})")
    seconds, flops = sum(r[4] for r in rows if r[3]), sum(r[5] for r in rows)
    if seconds:
        rate = flops / seconds / 1e9
        share = f", {100 * rate / peak:.0f} % of the FMA peak ({peak:.0f} GFLOP/s)" \
            if peak else ""
        lines.append(f"all convolutions: {seconds * 1e3:.2f} ms, {rate:.1f} {unit}{share}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", choices=[e.name for e in keras_zoo.entries()])
    parser.add_argument("--batch", type=int, default=keras_zoo.BATCH)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--wall", action="store_true", help="wall time, not CPU time")
    parser.add_argument("--size", type=int, help="an application at SIZE x SIZE input")
    parser.add_argument("--layers", type=int, default=0,
                        help="also list this many slowest convolution nodes with GFLOP/s")
    parser.add_argument("--peak", action="store_true",
                        help="with --wall: the convolutions' share of the FMA peak")
    args = parser.parse_args()
    if args.peak and not (args.wall and args.layers):
        parser.error("--peak needs --wall and --layers")
    clock = "wall" if args.wall else "CPU"
    print(f"{args.model}, batch {args.batch}, {args.threads} threads, {clock} time")
    rows = profile(args.model, args.batch, args.threads, args.runs, args.wall, args.size)
    print(report(rows, args.top))
    if args.layers:
        peak = None
        if args.peak:
            from benchmarks._common import fma_peak
            peak = fma_peak(args.threads)
        print(layers(rows, args.layers, args.threads, args.wall, peak))


if __name__ == "__main__":
    main()
