"""Inference time of TensorFlow-made graphs imported into minigraph, against TensorFlow
running the same frozen GraphDef (a v1 Session, grappler on), each framework in its own
process, interleaved medians, batch 32, float32, 2 threads each.

    python benchmarks/tf_graphs.py [--batch 32] [--threads 2] [--repeats 15]

Graphs: the Keras CNN and residual stack of the interop tests (issue target: minigraph >=
1.0x TensorFlow) and MobileNetV2 (alpha 0.35, 96x96; reported). The ratio column is
TensorFlow's time over minigraph's: above 1 means minigraph is faster. Also prints the
largest difference between the two outputs.

The TensorFlow worker builds and freezes the graph and writes it, with the batch to feed, to
a file the minigraph worker reads (minigraph's process never imports TensorFlow: an idle
TensorFlow in the same process slowed some minigraph kernels twofold, see
``bn_kernels.py``). The workers start in the default environment and are sampled in turn
(``_workers.interleaved_medians``: rotating order, a 5 ms pause before each sample).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import markdown_table  # noqa: E402
from _workers import Worker, interleaved_medians, serve  # noqa: E402
from keras_zoo import minigraph_runner, tensorflow_runner  # noqa: E402

GRAPHS = ("keras_cnn", "residual_stack", "mobilenet_v2")
FRAMEWORKS = ("tensorflow", "minigraph")


def export(name: str, batch: int, path: str):
    """Build graph ``name`` (minigraph.testing.tf_graphs, needs TensorFlow), draw a standard
    normal batch for its input and write both to ``path``; returns the TFGraph fed with it."""
    from minigraph.testing import tf_graphs

    graph = getattr(tf_graphs, name)()
    (feed, value), = graph.feeds.items()
    x = np.random.default_rng(0).standard_normal((batch, *value.shape[1:])).astype(np.float32)
    graph.feeds = {feed: x}
    np.savez(path, graph_def=np.frombuffer(graph.graph_def, np.uint8), feed=feed, x=x,
             fetches=np.array(graph.fetches))
    return graph


def load(path: str):
    """The graph and batch :func:`export` wrote."""
    from minigraph.testing.tf_graphs import TFGraph

    with np.load(path) as data:
        return TFGraph(os.path.basename(path), data["graph_def"].tobytes(),
                       {str(data["feed"]): data["x"]}, [str(f) for f in data["fetches"]])


def worker(framework: str, name: str, batch: int, threads: int, path: str) -> None:
    """Serve ``_workers``' protocol, plus ``save PATH`` (the outputs, npz)."""
    if framework == "tensorflow":
        graph = export(name, batch, path)
        run, _ = tensorflow_runner(graph, graph.feeds, threads)
    else:
        graph = load(path)
        run, _ = minigraph_runner(graph, graph.feeds, threads)
    run()

    def save(out: str) -> str:
        np.savez(out, *[np.asarray(v) for v in run()])
        return "saved"

    serve(run, {}, {"save": save})


def measure(name: str, batch: int, threads: int, repeats: int) -> list[str]:
    """One table row: graph ``name`` at ``batch`` in both frameworks."""
    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "graph.npz")
        workers: dict[str, Worker] = {}
        try:
            for framework in FRAMEWORKS:  # TensorFlow first: it writes the graph
                workers[framework] = Worker(
                    [os.path.abspath(__file__), "--worker", framework, "--graphs", name,
                     "--batch", str(batch), "--threads", str(threads), "--path", path],
                    name=f"{framework} ({name})")
            times = interleaved_medians(workers, repeats)
            outputs = {}
            for framework, w in workers.items():
                out = os.path.join(scratch, f"{framework}.npz")
                w.ask(f"save {out}")
                with np.load(out) as data:
                    outputs[framework] = [data[f"arr_{i}"] for i in range(len(data.files))]
        finally:
            for w in workers.values():
                w.close()
    difference = max(float(np.max(np.abs(a - b)))
                     for a, b in zip(outputs["minigraph"], outputs["tensorflow"]))
    return [name, f"{times['minigraph'] * 1e3:.2f}", f"{times['tensorflow'] * 1e3:.2f}",
            f"{times['tensorflow'] / times['minigraph']:.2f}x", f"{difference:.1e}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--graphs", nargs="*", default=list(GRAPHS), choices=list(GRAPHS))
    parser.add_argument("--worker", choices=FRAMEWORKS, help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--launched", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.graphs[0], args.batch, args.threads, args.path)
        return
    print(f"each framework in its own process, {args.threads} threads each (minigraph's pool, "
          f"TensorFlow's intra-op pool); batch {args.batch}, float32")
    rows = [measure(name, args.batch, args.threads, args.repeats) for name in args.graphs]
    print(markdown_table(["graph", "minigraph ms", "TensorFlow ms", "TF / minigraph",
                          "max |diff|"], rows))


if __name__ == "__main__":
    main()
