"""Inference time of TensorFlow-made graphs imported into minigraph, against TensorFlow
running the same frozen GraphDef (a v1 Session, grappler on), same process, interleaved
medians, batch 32, float32, 2 threads each.

    python benchmarks/tf_graphs.py [--batch 32] [--threads 2] [--repeats 15]

Graphs: the Keras CNN and residual stack of the interop tests (issue target: minigraph >=
1.0x TensorFlow) and MobileNetV2 (alpha 0.35, 96x96; reported). The ratio column is
TensorFlow's time over minigraph's: above 1 means minigraph is faster. Also prints the
largest difference between the two outputs.

minigraph's kernels here run on its worker pool (kernels_c/mg_runtime.c: idle workers poll,
yielding their core, for 300 us before they sleep), TensorFlow's on its own thread pool; the
harness lets both settle for 5 ms before each sample (benchmarks/_common.py).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
from _common import markdown_table, time_interleaved  # noqa: E402

import minigraph as mg  # noqa: E402
from minigraph.backends import native  # noqa: E402
from minigraph.testing import tf_graphs  # noqa: E402

GRAPHS = {"keras_cnn": tf_graphs.keras_cnn, "residual_stack": tf_graphs.residual_stack,
          "mobilenet_v2": tf_graphs.mobilenet_v2}


def tensorflow_runner(tf, graph: tf_graphs.TFGraph, feeds: dict, threads: int):
    """TensorFlow running the frozen GraphDef (grappler rewrites it on the first run)."""
    tf_graph = tf.Graph()
    with tf_graph.as_default():
        tf.graph_util.import_graph_def(tf.compat.v1.GraphDef.FromString(graph.graph_def),
                                       name="")
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads,
                                      inter_op_parallelism_threads=1)
    session = tf.compat.v1.Session(graph=tf_graph, config=config)
    return lambda: session.run(graph.fetches, feeds)


def minigraph_runner(graph: tf_graphs.TFGraph, feeds: dict):
    session = mg.ClientSession(mg.import_graph_def(graph.graph_def), backend="native")
    return lambda: session.Run(feeds, graph.fetches)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--graphs", nargs="*", default=list(GRAPHS), choices=list(GRAPHS))
    args = parser.parse_args()
    tf = tf_graphs.tensorflow()
    native.set_num_threads(args.threads)
    print(f"minigraph native ISA {native.isa()}, {native.num_threads()} threads; TensorFlow "
          f"{tf.__version__}, {args.threads} intra-op threads; batch {args.batch}, float32")
    rows = []
    for name in args.graphs:
        graph = GRAPHS[name]()
        shape = next(iter(graph.feeds.values())).shape[1:]
        x = np.random.default_rng(0).standard_normal((args.batch, *shape)).astype(np.float32)
        feeds = {next(iter(graph.feeds)): x}
        ours, theirs = minigraph_runner(graph, feeds), tensorflow_runner(tf, graph, feeds,
                                                                         args.threads)
        difference = max(float(np.max(np.abs(a - b))) for a, b in zip(ours(), theirs()))
        times = time_interleaved({"minigraph": ours, "tensorflow": theirs},
                                 repeats=args.repeats)
        rows.append([name, f"{times['minigraph'] * 1e3:.2f}", f"{times['tensorflow'] * 1e3:.2f}",
                     f"{times['tensorflow'] / times['minigraph']:.2f}x", f"{difference:.1e}"])
    print(markdown_table(["graph", "minigraph ms", "TensorFlow ms", "TF / minigraph",
                          "max |diff|"], rows))


if __name__ == "__main__":
    main()
