"""Inference time of every ``tf_keras.applications`` family of the Keras zoo, TensorFlow 2.21
against minigraph on the same frozen GraphDef, each framework in its own process.

    python benchmarks/keras_zoo.py [--models resnet50 ... | --all] [--batch 2] [--threads 2]
                                   [--repeats 11] [--large-batch 32 --large-models ...]
                                   [--size N] [--minigraph-options elementwise_groups=off]

The graphs are the zoo's (``minigraph/testing/keras_zoo.py``: random weights, the stated small
input, frozen by TensorFlow and cached on disk; the CI set, one model per family and the cheap
variants, or with ``--all`` every variant: deeper, wider and narrower models); ``--size N`` runs
every model at N x N input instead (``keras_zoo.application_at``: sizes nobody tuned for; a
family whose smallest size is above N fails in Keras). For each model the harness starts one
worker process per framework in the default environment (no BLAS or OpenMP variables set),
``threads`` intra-op threads each (TensorFlow: a v1 Session with grappler and oneDNN as shipped;
minigraph: the native backend), and samples them interleaved, in alternating order, each sample
after the other worker has been idle for a few milliseconds and two untimed runs
(``_workers.interleaved_medians``); the table gives the medians, TensorFlow's time over
minigraph's (above 1: minigraph is faster), minigraph's GFLOP/s (2 x multiply-adds of its
convolutions and matmuls) and share of the machine's FMA peak at the same thread count, measured
in the same run (``_common.fma_peak``: the nominal clock x 64 FLOP per cycle overstates what a
hypervisor's cores sustain), each process's peak resident memory, and the largest difference
between the two outputs. ``--minigraph-options`` runs minigraph with ``OptimizerOptions``
switches (``name=on|off,...``; ``off``: every pass off), to see what one pass is worth
against the same TensorFlow column.
"""

from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import numpy as np  # noqa: E402
from _common import fma_peak, markdown_table, parse_options  # noqa: E402
from _workers import Worker, interleaved_medians, serve  # noqa: E402

FRAMEWORKS = ("tensorflow", "minigraph")


# ----------------------------------------------------------------------------- workers


def tensorflow_runner(graph, feeds: dict, threads: int):
    from minigraph.testing import tf_graphs

    tf = tf_graphs.tensorflow()
    tf_graph = tf.Graph()
    with tf_graph.as_default():
        tf.graph_util.import_graph_def(tf.compat.v1.GraphDef.FromString(graph.graph_def),
                                       name="")
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads,
                                      inter_op_parallelism_threads=1)
    session = tf.compat.v1.Session(graph=tf_graph, config=config)
    return lambda: session.run(graph.fetches, feeds), None


PRODUCTS = ("Conv2D", "Conv3D", "Conv2DBackpropInput", "Conv3DBackpropInputV2",
            "DepthwiseConv2dNative", "MatMul", "BatchMatMul", "BatchMatMulV2")


def graph_flops(session, graph, feeds: dict) -> float:
    """2 x the multiply-adds of the graph's convolutions and matmuls, from the shapes one run
    gives (fetching their operands: no static shape is needed): a convolution output element
    takes taps x input channels per group of them (a transposed one counts its input's
    elements), a depthwise one taps, a matmul element K."""
    ops = [op for op in graph.get_operations() if op.type in PRODUCTS]
    fetches = [t for op in ops for t in (op.inputs[0], op.inputs[1], op.outputs[0])]
    shapes = iter(value.shape for value in session.Run(feeds, fetches))
    total = 0
    for op in ops:
        x, w, y = next(shapes), next(shapes), next(shapes)
        if op.type in ("Conv2D", "Conv3D"):
            total += np.prod(y) * np.prod(w[:-1])
        elif op.type in ("Conv2DBackpropInput", "Conv3DBackpropInputV2"):
            dy = session.Run(feeds, op.inputs[2]).shape
            total += np.prod(dy) * np.prod(w[:-1])
        elif op.type == "DepthwiseConv2dNative":
            total += np.prod(y) * np.prod(w[:2])
        elif op.type == "MatMul":
            total += np.prod(y) * x[0 if op.attrs["transpose_a"] else 1]
        else:
            total += np.prod(y) * x[-2 if op.attrs["adj_x"] else -1]
    return 2.0 * float(total)


def minigraph_runner(graph, feeds: dict, threads: int, options: str = ""):
    import minigraph as mg
    from minigraph.backends import native

    native.set_num_threads(threads)
    root = mg.import_graph_def(graph.graph_def)
    kwargs, _ = parse_options(options)
    session = mg.ClientSession(root, backend="native",
                               optimizer=mg.OptimizerOptions(**kwargs) if kwargs else None)
    return lambda: session.Run(feeds, graph.fetches), graph_flops(session, root.graph(), feeds)


def worker(framework: str, model: str, batch: int, threads: int, size: int | None,
           options: str = "") -> None:
    """Serve ``_workers``' protocol, plus ``save PATH`` (the outputs, npz)."""
    from minigraph.testing import keras_zoo

    graph = keras_zoo.load(model, size)
    feeds = keras_zoo.batch_feeds(graph, batch)
    if framework == "tensorflow":
        run, flops = tensorflow_runner(graph, feeds, threads)
    else:
        run, flops = minigraph_runner(graph, feeds, threads, options)
    run()

    def save(path: str) -> str:
        np.savez(path, *[np.asarray(v) for v in run()])
        return "saved"

    serve(run, {"flops": flops or 0}, {"save": save})


# ----------------------------------------------------------------------------- coordinator


def _start(framework: str, model: str, batch: int, threads: int, size: int | None,
           options: str = "") -> Worker:
    sized = ["--size", str(size)] if size else []
    env = None
    if framework == "minigraph":
        sized += ["--minigraph-options", options]
        env = dict(os.environ, **parse_options(options)[1])
    return Worker([os.path.abspath(__file__), "--worker", framework, "--models", model,
                   "--batch", str(batch), "--threads", str(threads), *sized], env=env,
                  name=f"{framework} ({model})")


def measure(model: str, batch: int, threads: int, repeats: int, peak: float,
            size: int | None = None, settle: float = 0.005, options: str = "") -> list:
    """One table row: ``model`` (at ``size`` x ``size`` input, None: the zoo's) at
    ``batch`` in both frameworks; ``peak`` is the FMA peak in GFLOP/s at ``threads``
    threads; ``options``: minigraph's ``--minigraph-options``."""
    workers = {f: _start(f, model, batch, threads, size, options) for f in FRAMEWORKS}
    try:
        medians = interleaved_medians(workers, repeats, settle=settle)
        outputs = {}
        for name, w in workers.items():
            path = os.path.join("/tmp", f"keras_zoo_{name}_{os.getpid()}.npz")
            w.ask(f"save {path}")
            with np.load(path) as data:
                outputs[name] = [data[k] for k in sorted(data.files,
                                                         key=lambda s: int(s.split("_")[1]))]
            os.unlink(path)
        rss = {name: int(w.ask("rss")) for name, w in workers.items()}
        flops = float(workers["minigraph"].ready["flops"])
    finally:
        for w in workers.values():
            w.close()
    tf_s, mg_s = (medians[f] for f in FRAMEWORKS)
    diff = max(float(np.max(np.abs(a.astype(np.float64) - b))) if a.size else 0.0
               for a, b in zip(outputs["minigraph"], outputs["tensorflow"]))
    gflops = flops / mg_s / 1e9
    return [f"{model}@{size}" if size else model, batch, f"{tf_s * 1e3:.2f}",
            f"{mg_s * 1e3:.2f}", f"{tf_s / mg_s:.2f}x",
            f"{flops / 1e9:.3f}", f"{gflops:.1f}", f"{100 * gflops / peak:.0f}%",
            f"{rss['tensorflow'] >> 20}", f"{rss['minigraph'] >> 20}", f"{diff:.1e}"]


def main() -> None:
    from minigraph.testing import keras_zoo

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*",
                        help="zoo application names (default: the CI set)")
    parser.add_argument("--all", action="store_true",
                        help="every application of the zoo, the families' variants included")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--large-batch", type=int, default=32)
    parser.add_argument("--large-models", nargs="*", default=["resnet50", "mobilenet_v2"])
    parser.add_argument("--size", type=int, help="every model at SIZE x SIZE input")
    parser.add_argument("--minigraph-options", default="",
                        help="minigraph's OptimizerOptions: name=on|off,... or off")
    parser.add_argument("--worker", choices=FRAMEWORKS, help=argparse.SUPPRESS)
    parser.add_argument("--launched", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.models[0], args.batch, args.threads, args.size,
               args.minigraph_options)
        return
    if args.models is None:
        args.models = [e.name for e in keras_zoo.entries("application", full=args.all)]
    header = ["model", "batch", "TF ms", "minigraph ms", "TF / minigraph", "GFLOP",
              "minigraph GFLOP/s", "of FMA peak", "TF peak RSS MiB", "minigraph peak RSS MiB",
              "max |diff|"]
    rows = []
    runs = [(m, args.batch) for m in args.models]
    runs += [(m, args.large_batch) for m in args.large_models if args.large_batch]
    peak = fma_peak(args.threads)
    print(f"FMA peak at {args.threads} threads (measured now): {peak:.0f} GFLOP/s",
          file=sys.stderr, flush=True)
    for model, batch in runs:
        rows.append(measure(model, batch, args.threads, args.repeats, peak, args.size,
                            options=args.minigraph_options))
        print(" | ".join(str(c) for c in rows[-1]), file=sys.stderr, flush=True)
    ratios = [float(r[4][:-1]) for r in rows if r[1] == args.batch]
    print(f"FMA peak at {args.threads} threads, measured in this run: {peak:.0f} GFLOP/s\n")
    print(markdown_table(header, rows))
    if ratios:
        print(f"\ngeometric mean TF / minigraph at batch {args.batch}: "
              f"{float(np.exp(np.mean(np.log(ratios)))):.2f}x over {len(ratios)} models")


if __name__ == "__main__":
    main()
