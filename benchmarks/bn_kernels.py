"""Batch-norm kernel benchmark: minigraph (native kernel, full ClientSession.Run, reference)
against PyTorch CPU and TensorFlow CPU, measured interleaved in one run, each framework in its
own process.

For each dtype, shape, layout and op (fwd-train, fwd-infer, bwd-train, bwd-infer) it prints
medians of interleaved runs, effective GB/s on two-pass bytes (fwd-train 3T, fwd-infer 2T,
bwd-train 5T, bwd-infer 3T; T = tensor bytes), % of the warm STREAM triad measured here, the
ratio best-peer time / minigraph kernel time, and the two-pass ceiling: the best-peer time over
the time the two-pass bytes take at the warm STREAM rate, i.e. the largest ratio that any
kernel streaming those bytes could show in this run. Then the target summary and the
second-order comparison (forward + first + second order gradients).

Why processes (``_workers``): with TensorFlow merely imported into minigraph's process, idle,
some cells took twice their time (bfloat16 128x14x14x256 NHWC fwd-train 1.48 ms against
0.78 ms in a process of its own; float16 256x7x7x512 fwd-infer 0.71 against 0.40 ms). The
coordinator imports no framework; the minigraph, PyTorch and TensorFlow workers start in the
default environment, build each cell's inputs from the same seed, and are sampled in turn
(rotating order, a 5 ms pause before each sample, two untimed calls, then k calls lasting at
least 2 ms).

    python benchmarks/bn_kernels.py            # everything (several minutes)
    python benchmarks/bn_kernels.py --rounds 3 # the same, each cell the median of 3 sweeps
    python benchmarks/bn_kernels.py --quick    # float32, two shapes
    python benchmarks/bn_kernels.py --dtypes float32 --shapes 128x14x14x256 \
        --formats NHWC --ops fwd-train,bwd-train --no-second-order   # a few cells
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _common import geomean, markdown_table, stream_triad  # noqa: E402
from _workers import Worker, serve_cases, time_case  # noqa: E402

SHAPES = [(32, 56, 56, 64), (64, 28, 28, 128), (128, 14, 14, 256), (8, 112, 112, 32),
          (256, 7, 7, 512), (16, 8, 8, 16), (8, 16, 16, 16, 32)]
LARGE = [(32, 56, 56, 64), (64, 28, 28, 128), (128, 14, 14, 256), (256, 7, 7, 512)]
OPS = ["fwd-train", "fwd-infer", "bwd-train", "bwd-infer"]
TWO_PASS_BYTES = {"fwd-train": 3, "fwd-infer": 2, "bwd-train": 5, "bwd-infer": 3}
ITEM_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
PEERS = ("torch", "tf")
EPSILON = 1e-3
MIN_SAMPLE = 2e-3  # seconds a sample lasts at least (k back-to-back calls)


def formats_for(shape) -> list[str]:
    return ["NHWC", "NCHW"] if len(shape) == 4 else ["NDHWC", "NCDHW"]


def logical(shape, data_format):
    """The tensor's shape in memory for a channels-last (N,...,C) benchmark shape."""
    if data_format.endswith("C"):
        return shape
    return (shape[0], shape[-1], *shape[1:-1])


# ----------------------------------------------------------------------------- workers


class Case:
    """Inputs of one (shape, format, dtype) cell, the same in every worker (one seed)."""

    def __init__(self, shape, data_format, dtype_name: str):
        import ml_dtypes

        np_dtype = np.dtype(ml_dtypes.bfloat16 if dtype_name == "bfloat16" else dtype_name)
        rng = np.random.default_rng(0)
        self.shape, self.data_format, self.dtype_name = logical(shape, data_format), \
            data_format, dtype_name
        self.channels = shape[-1]
        self.x = rng.normal(size=self.shape).astype(np.float32).astype(np_dtype)
        self.dy = rng.normal(size=self.shape).astype(np.float32).astype(np_dtype)
        self.scale = rng.uniform(0.5, 1.5, self.channels).astype(np.float32)
        self.offset = rng.normal(size=self.channels).astype(np.float32)
        self.mean = rng.normal(size=self.channels).astype(np.float32) * 0.1
        self.variance = rng.uniform(0.5, 1.5, self.channels).astype(np.float32)
        self.last = data_format.endswith("C")


def kernel_call(math, case: Case, op: str):
    """The bare math call of a backend (native or reference)."""
    c = case
    if op == "fwd-train":
        return lambda: math.bn_forward_training(c.x, c.scale, c.offset, EPSILON, c.last)
    if op == "fwd-infer":
        return lambda: math.bn_forward_inference(c.x, c.scale, c.offset, c.mean, c.variance,
                                                 EPSILON, c.last)
    backward = math.bn_backward_training if op == "bwd-train" else math.bn_backward_inference
    return lambda: backward(c.dy, c.x, c.scale, c.mean, c.variance, EPSILON, c.last)


def session_call(case: Case, op: str, backend: str):
    """The full ClientSession.Run of a one-op graph fed with x (and dy)."""
    import minigraph as mg
    from minigraph import ops

    c = case
    root = mg.Scope.NewRootScope()
    dtype = mg.as_dtype(c.dtype_name)
    x = ops.Placeholder(root, dtype, shape=c.shape)
    training = op.endswith("train")
    if op.startswith("fwd"):
        stats = (np.zeros(0, np.float32),) * 2 if training else (c.mean, c.variance)
        node = ops.FusedBatchNormV3(root, x, c.scale, c.offset, *stats, epsilon=EPSILON,
                                    data_format=c.data_format, is_training=training)
        fetches, feeds = [node.y, node.batch_mean, node.batch_variance], {x: c.x}
    else:
        dy = ops.Placeholder(root, dtype, shape=c.shape)
        node = ops.FusedBatchNormGradV3(root, dy, x, c.scale, c.mean, c.variance,
                                        np.zeros(0, np.float32), epsilon=EPSILON,
                                        data_format=c.data_format, is_training=training)
        fetches, feeds = [node.x_backprop, node.scale_backprop, node.offset_backprop], \
            {x: c.x, dy: c.dy}
    session = mg.ClientSession(root, backend=backend)
    return lambda: session.Run(feeds, fetches)


def torch_call(torch, case: Case, op: str):
    c = case
    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16,
                   "float16": torch.float16}[c.dtype_name]

    def tensor(array):
        t = torch.from_numpy(np.asarray(array, np.float32)).to(torch_dtype)
        if c.last:  # NHWC memory, NCHW logical: channels_last(_3d)
            t = t.permute(0, t.dim() - 1, *range(1, t.dim() - 1))
        return t

    x, dy = tensor(c.x), tensor(c.dy)
    weight, bias = torch.from_numpy(c.scale), torch.from_numpy(c.offset)
    mean, var = torch.from_numpy(c.mean), torch.from_numpy(c.variance)
    training = op.endswith("train")
    if op.startswith("fwd"):
        return lambda: torch.ops.aten.native_batch_norm(x, weight, bias, mean.clone(),
                                                        var.clone(), training, 0.1, EPSILON)
    _, save_mean, save_invstd = torch.ops.aten.native_batch_norm(x, weight, bias, mean.clone(),
                                                                 var.clone(), True, 0.1, EPSILON)
    return lambda: torch.ops.aten.native_batch_norm_backward(
        dy, x, weight, mean, var, save_mean, save_invstd, training, EPSILON, [True] * 3)


def tf_call(tf, case: Case, op: str):
    c = case
    tf_dtype = {"float32": tf.float32, "bfloat16": tf.bfloat16, "float16": tf.float16}[
        c.dtype_name]
    x = tf.constant(c.x.astype(np.float32), dtype=tf.float32)
    x = tf.cast(x, tf_dtype)
    dy = tf.cast(tf.constant(c.dy.astype(np.float32)), tf_dtype)
    scale, offset = tf.constant(c.scale), tf.constant(c.offset)
    mean, var = tf.constant(c.mean), tf.constant(c.variance)
    empty = tf.zeros([0])
    training = op.endswith("train")
    if op.startswith("fwd"):
        @tf.function
        def run(x):
            out = tf.raw_ops.FusedBatchNormV3(
                x=x, scale=scale, offset=offset, mean=empty if training else mean,
                variance=empty if training else var, epsilon=EPSILON,
                data_format=c.data_format, is_training=training)
            return out[0], out[1], out[2]
        call = lambda: run(x)  # noqa: E731
    else:
        @tf.function
        def run(dy, x):
            out = tf.raw_ops.FusedBatchNormGradV3(
                y_backprop=dy, x=x, scale=scale, reserve_space_1=mean, reserve_space_2=var,
                reserve_space_3=empty, epsilon=EPSILON, data_format=c.data_format,
                is_training=training)
            return out[0], out[1], out[2]
        call = lambda: run(dy, x)  # noqa: E731
    call()  # TF refuses some combos (f16/NCHW inference grad): raise here, report n/a
    return call


SECOND_SHAPE = (32, 28, 28, 64)


def second_order_inputs():
    """Inputs of the second-order comparison (the same seed in every worker)."""
    rng = np.random.default_rng(1)
    x, dy, v = (rng.normal(size=SECOND_SHAPE).astype(np.float32) for _ in range(3))
    channels = SECOND_SHAPE[-1]
    return x, dy, v, np.ones(channels, np.float32), np.zeros(channels, np.float32)


def minigraph_second(first_only: bool = False):
    """Forward + first order + second order (d/d(x, scale, dy) of <x_backprop, v>), training
    mode; ``first_only``: the forward and first order alone."""
    import minigraph as mg
    from minigraph import ops

    x_value, dy_value, v_value, scale_value, offset_value = second_order_inputs()
    root = mg.Scope.NewRootScope()
    x, dy, v = (ops.Placeholder(root, mg.float32, shape=SECOND_SHAPE) for _ in range(3))
    scale = ops.Placeholder(root, mg.float32, shape=[SECOND_SHAPE[-1]])
    empty = np.zeros(0, np.float32)
    bn = ops.FusedBatchNormV3(root, x, scale, offset_value, empty, empty, epsilon=EPSILON)
    dx, = mg.AddSymbolicGradients(root, [bn.y], [x], [dy])
    product = ops.Sum(root, ops.Mul(root, dx, v), [0, 1, 2, 3])
    second = [] if first_only else mg.AddSymbolicGradients(root, [product], [x, scale, dy])
    session = mg.ClientSession(root, backend="native")
    feeds = {x: x_value, dy: dy_value, v: v_value, scale: scale_value}
    return lambda: session.Run(feeds, [bn.y, dx] + second)


def tf_second(tf):
    x_value, dy_value, v_value, scale_value, offset_value = second_order_inputs()
    tx, tdy, tv = (tf.constant(a) for a in (x_value, dy_value, v_value))
    tscale, toffset = tf.constant(scale_value), tf.constant(offset_value)

    @tf.function
    def second(x, scale, dy):
        with tf.GradientTape() as outer:
            outer.watch([x, scale, dy])
            with tf.GradientTape() as inner:
                inner.watch(x)
                y = tf.raw_ops.FusedBatchNormV3(
                    x=x, scale=scale, offset=toffset, mean=tf.zeros([0]),
                    variance=tf.zeros([0]), epsilon=EPSILON, is_training=True)[0]
            dx = inner.gradient(y, x, output_gradients=dy)
            product = tf.reduce_sum(dx * tv)
        return y, dx, outer.gradient(product, [x, scale, dy])

    return lambda: second(tx, tscale, tdy)


def torch_second(torch):
    x_value, dy_value, v_value, scale_value, offset_value = second_order_inputs()

    def second():
        px = torch.from_numpy(x_value).permute(0, 3, 1, 2).requires_grad_()
        pscale = torch.from_numpy(scale_value.copy()).requires_grad_()
        pdy = torch.from_numpy(dy_value).permute(0, 3, 1, 2).requires_grad_()
        y = torch.nn.functional.batch_norm(px, None, None, pscale,
                                           torch.from_numpy(offset_value), True, 0.1, EPSILON)
        dx, = torch.autograd.grad(y, px, pdy, create_graph=True)
        product = (dx * torch.from_numpy(v_value).permute(0, 3, 1, 2)).sum()
        return torch.autograd.grad(product, [px, pscale, pdy])

    return second


def worker(framework: str) -> None:
    """Serve ``_workers.serve_cases`` for one framework: a case is a JSON object with shape,
    format, dtype, op and reference, or {"second": true}."""
    if framework == "minigraph":
        from minigraph.backends import native, reference

        ready = {"threads": native.num_threads(), "isa": native.isa(),
                 "l3_mb": int(native.lib.mg_cache_size(3)) >> 20}
    elif framework == "torch":
        import torch

        torch.set_num_threads(os.cpu_count() or 1)
        ready = {"threads": torch.get_num_threads()}
    else:
        import tensorflow as tf

        ready = {"threads": os.cpu_count()}

    def factories(spec: dict) -> dict:
        if spec.get("second"):
            if framework == "minigraph":
                return {"minigraph": minigraph_second,
                        "minigraph 1st order only": lambda: minigraph_second(first_only=True)}
            if framework == "torch":
                return {"pytorch": lambda: torch_second(torch)}
            return {"tensorflow": lambda: tf_second(tf)}
        case = Case(tuple(spec["shape"]), spec["format"], spec["dtype"])
        op = spec["op"]
        if framework == "minigraph":
            found = {"kernel": lambda: kernel_call(native, case, op),
                     "session": lambda: session_call(case, op, "native")}
            if spec["reference"]:
                found["reference"] = lambda: kernel_call(reference, case, op)
            return found
        if framework == "torch":
            return {"torch": lambda: torch_call(torch, case, op)}
        return {"tf": lambda: tf_call(tf, case, op)}

    serve_cases(factories, ready)


# ----------------------------------------------------------------------------- coordinator


def start_workers(skip: set[str]) -> dict[str, Worker]:
    """The minigraph worker, and each peer that starts (one that is not installed is left
    out, with a line on stderr)."""
    argv = [os.path.abspath(__file__), "--worker"]
    workers = {"minigraph": Worker(argv + ["minigraph"], name="minigraph")}
    for peer in PEERS:
        if peer in skip:
            continue
        try:
            workers[peer] = Worker(argv + [peer], name=peer)
        except RuntimeError as error:
            print(f"{peer}: left out ({error})", file=sys.stderr)
    return workers


def benchmark_table(workers, dtype_name, shapes, warm_gbs, repeats, with_reference,
                    formats=None, op_names=OPS, rounds=1):
    """Every cell timed in ``rounds`` sweeps over the whole table (minutes apart, so that a
    slow drift of the shared host's memory bandwidth hits a cell in one round, not all):
    a cell's times are the medians over rounds of each round's interleaved medians, and its
    ratio the median of the per-round ratios (each from one interleaved run), with their
    range beside it."""
    peers = [p for p in PEERS if p in workers]
    cells = [(shape, data_format, op) for shape in shapes for data_format in formats_for(shape)
             if not formats or data_format in formats for op in op_names]
    per_round: dict = {cell: [] for cell in cells}
    for r in range(rounds):
        for shape, data_format, op in cells:
            spec = {"shape": shape, "format": data_format, "dtype": dtype_name, "op": op,
                    "reference": with_reference}
            times = time_case(workers, spec, repeats, MIN_SAMPLE)
            per_round[(shape, data_format, op)].append(times)
            peer_times = {k: v for k, v in times.items() if k in peers}
            best = min(peer_times.values()) / times["kernel"] if peer_times else float("nan")
            print(f"  round {r + 1}/{rounds} {'x'.join(map(str, shape))} {data_format} {op}: "
                  f"kernel {times['kernel'] * 1e3:.3f} ms, best peer / mg {best:.2f}x",
                  file=sys.stderr, flush=True)
    rows, results = [], {}
    for (shape, data_format, op), samples in per_round.items():
        case_bytes = math.prod(shape) * ITEM_BYTES[dtype_name]
        times = {name: statistics.median(t[name] for t in samples) for name in samples[0]}
        peer_times = {k: v for k, v in times.items() if k in peers}
        best_peer = min(peer_times, key=peer_times.get) if peer_times else None
        ratios = [t[best_peer] / t["kernel"] for t in samples] if best_peer else [float("nan")]
        ratio = statistics.median(ratios)
        gbs = TWO_PASS_BYTES[op] * case_bytes / times["kernel"] / 1e9
        ceiling_time = TWO_PASS_BYTES[op] * case_bytes / (warm_gbs * 1e9)
        ceiling = peer_times[best_peer] / ceiling_time if best_peer else float("nan")
        results[(shape, data_format, op)] = {**times, "ratio": ratio, "gbs": gbs,
                                             "best_peer": best_peer, "ceiling": ceiling}
        ms = {k: f"{v * 1e3:.3f}" for k, v in times.items()}
        spread = f" [{min(ratios):.2f}-{max(ratios):.2f}]" if len(ratios) > 1 else ""
        rows.append(["x".join(map(str, shape)), data_format, op, ms["kernel"],
                     ms["session"], ms.get("reference", "-"), ms.get("torch", "n/a"),
                     ms.get("tf", "n/a"), f"{gbs:.1f}", f"{100 * gbs / warm_gbs:.0f}%",
                     f"{ratio:.2f}x{spread} ({best_peer})" if best_peer else "-",
                     f"{ceiling:.2f}x"])
    header = ["shape (N..C)", "format", "op", "mg kernel ms", "mg Run ms", "reference ms",
              "torch ms", "tf ms", "GB/s (2-pass)", "% warm STREAM", "best peer / mg",
              "2-pass ceiling"]
    return markdown_table(header, rows), results


def summary(dtype_name, results, warm_gbs) -> list[list[str]]:
    target = 1.5 if dtype_name == "float32" else 2.0
    rows = []
    for op in ("fwd-train", "bwd-train"):
        for layout in ("channels-last", "channels-first"):
            cells = [r for (shape, fmt, o), r in results.items()
                     if o == op and shape in LARGE and fmt.endswith("C") == (
                         layout == "channels-last")]
            value = geomean([r["ratio"] for r in cells])
            ceiling = geomean([r["ceiling"] for r in cells])
            rows.append([dtype_name, op, layout, f"{value:.2f}", f">= {target}",
                         "PASS" if value >= target else "FAIL", f"{ceiling:.2f}"])
    worst = min((r["ratio"] for r in results.values() if np.isfinite(r["ratio"])),
                default=float("nan"))
    rows.append([dtype_name, "all", "worst cell", f"{worst:.2f}", ">= 1.0",
                 "PASS" if worst >= 1.0 else "FAIL", "-"])
    if dtype_name == "float32":
        for op in ("fwd-train", "bwd-train"):
            bandwidth = [r["gbs"] / warm_gbs for (shape, fmt, o), r in results.items()
                         if o == op and shape in LARGE]
            if bandwidth:
                value = float(np.mean(bandwidth))
                rows.append([dtype_name, op, "mean % warm STREAM (large)",
                             f"{100 * value:.0f}%", ">= 90%",
                             "PASS" if value >= 0.9 else "FAIL", "100%"])
        tiny = [r["session"] - r["kernel"] for (shape, fmt, op), r in results.items()
                if shape == (16, 8, 8, 16)]
        if tiny:
            value = max(tiny) * 1e6
            rows.append([dtype_name, "all", "Run overhead, 16x8x8x16 (max)", f"{value:.0f} us",
                         "<= 30 us", "PASS" if value <= 30 else "FAIL", "-"])
    return rows


def second_order(workers, repeats) -> str:
    """Forward + first order + second order (d/d(x, scale, dy) of <x_backprop, v>),
    32x28x28x64 NHWC float32, training mode."""
    times = time_case(workers, {"second": True}, max(5, repeats // 3), min_sample=0)
    peers_only = {k: t for k, t in times.items() if k in ("tensorflow", "pytorch")}
    best = min(peers_only.values()) if peers_only else float("nan")
    rows = [[name, f"{t * 1e3:.2f}", f"{best / t:.2f}x" if peers_only else "-"]
            for name, t in times.items()]
    return markdown_table(["implementation", "ms", "best peer / this"], rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=1,
                        help="sweeps over the whole table; cells report the median round")
    parser.add_argument("--dtypes", default="float32,bfloat16,float16")
    parser.add_argument("--skip", default="", help="comma list of peers to skip: torch,tf")
    parser.add_argument("--no-reference", action="store_true")
    parser.add_argument("--shapes", default="",
                        help="comma list of N..C shapes such as 128x14x14x256 (default: all)")
    parser.add_argument("--formats", default="",
                        help="comma list of data formats to keep: NHWC,NCHW,NDHWC,NCDHW")
    parser.add_argument("--ops", default=",".join(OPS), help="comma list of " + ", ".join(OPS))
    parser.add_argument("--no-second-order", action="store_true")
    parser.add_argument("--worker", choices=("minigraph", *PEERS), help=argparse.SUPPRESS)
    parser.add_argument("--launched", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker)
        return 0
    op_names = [op for op in args.ops.split(",") if op]
    if not set(op_names) <= set(OPS):
        parser.error(f"--ops: expected a comma list of {', '.join(OPS)}")
    workers = start_workers(set(filter(None, args.skip.split(","))))
    try:
        return report(workers, args, op_names)
    finally:
        for w in workers.values():
            w.close()


def report(workers: dict[str, Worker], args, op_names: list[str]) -> int:
    """The tables, printed as they are measured."""
    facts = workers["minigraph"].ready
    # Median of five probes (each the best of its repetitions): the machine is shared, and
    # neither one busy moment nor one implausibly fast repetition must set the bar.
    warm = statistics.median(stream_triad(26) for _ in range(5))
    dram = statistics.median(stream_triad(256, reps=5) for _ in range(3))
    peers = [p for p in PEERS if p in workers]
    print(f"# Batch-norm kernels: minigraph native vs peers\n\nthreads: {facts['threads']}"
          f", ISA: {facts['isa']}, L3 {facts['l3_mb']} MB, peers: {', '.join(peers) or 'none'}"
          f" (each framework in its own process); STREAM triad (measured now): warm "
          f"(3x26 MB) {warm:.1f} GB/s, DRAM (3x256 MB) {dram:.1f} GB/s\n")
    shapes = [SHAPES[0], SHAPES[5]] if args.quick else SHAPES
    if args.shapes:
        shapes = [tuple(int(d) for d in s.split("x")) for s in args.shapes.split(",")]
    formats = set(filter(None, args.formats.split(",")))
    dtypes = ["float32"] if args.quick else args.dtypes.split(",")
    summaries = []
    for name in dtypes:
        table, results = benchmark_table(workers, name, shapes, warm, args.repeats,
                                         with_reference=not args.no_reference and name ==
                                         "float32", formats=formats, op_names=op_names,
                                         rounds=args.rounds)
        print(f"## {name}\n\n{table}\n", flush=True)
        summaries += summary(name, results, warm)
    print("## Targets\n\n(two-pass ceiling: the same measure for a kernel that streams the "
          "two-pass bytes at the warm STREAM rate measured above)\n\n" + markdown_table(
              ["dtype", "op", "measure", "value", "target", "", "two-pass ceiling"], summaries)
          + "\n")
    if not args.no_second_order:
        print("## Second order (32x28x28x64 NHWC float32: forward + 1st + 2nd order)\n\n"
              + second_order(workers, args.repeats) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
