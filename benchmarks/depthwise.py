"""Depthwise convolution benchmark: minigraph's native kernels against TensorFlow's
``tf.raw_ops.DepthwiseConv2dNative`` (and its two backprops), measured interleaved in one run
with 2 threads each, each framework in its own process (``_workers.serve_cases``), on the
depthwise layers of MobileNetV2 (width 0.35, 96x96 input, batch 32; Keras' layout: stride-1
layers SAME, stride-2 layers VALID after a (0, 1) zero pad).

For each layer and op it prints the median time of minigraph's C kernel call
(``c_depthwise*``: the op's kernel without the session), of a whole ``ClientSession.Run`` of
the op, and of TF's op inside a ``tf.function``, and the ratio TF / minigraph kernel.

    python benchmarks/depthwise.py            # forward and both backprops
    python benchmarks/depthwise.py --forward  # forward only
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import geomean, markdown_table  # noqa: E402
from _workers import Worker, serve_cases, time_case  # noqa: E402

THREADS = 2
BATCH = 32
# (input h = w, channels, stride) of MobileNetV2-0.35's depthwise layers at 96x96; stride-2
# inputs are the zero-padded ones (an odd size, VALID).
LAYERS = [(48, 16, 1), (49, 48, 2), (24, 48, 1), (25, 48, 2), (12, 96, 1), (13, 96, 2),
          (6, 144, 1), (6, 192, 1), (7, 192, 2), (3, 336, 1)]
OPS = ("forward", "input grad", "filter grad")


def layer_name(size: int, channels: int, stride: int) -> str:
    return f"{size}x{size}x{channels} s{stride} {'SAME' if stride == 1 else 'VALID'}"


class Layer:
    """One layer's tensors and attrs, the same in every worker (one seed)."""

    def __init__(self, size: int, channels: int, stride: int):
        from minigraph.ops.convolution_ops import depthwise_geometry

        rng = np.random.default_rng(0)
        self.padding = "SAME" if stride == 1 else "VALID"
        self.attrs = {"strides": [1, stride, stride, 1], "padding": self.padding}
        self.x = rng.standard_normal((BATCH, size, size, channels)).astype(np.float32)
        self.f = rng.standard_normal((3, 3, channels, 1)).astype(np.float32)
        self.window = depthwise_geometry({**self.attrs, "data_format": "NHWC",
                                          "dilations": [1, 1, 1, 1]},
                                         ValueError, self.x.shape, self.f.shape)
        self.dy = rng.standard_normal((BATCH, *self.window.out, channels)).astype(np.float32)


def kernel_call(layer: Layer, op: str):
    """The native kernel's C call (what the session's kernel does after its checks)."""
    from minigraph.backends import convolution_kernels as ck

    x, f, dy, window = layer.x, layer.f, layer.dy, layer.window
    if op == "forward":
        return lambda: ck.c_depthwise(x, f, window)
    if op == "input grad":
        return lambda: ck.c_depthwise_backprop_input(dy, f, x.shape[1:3], window)
    return lambda: ck.c_depthwise_backprop_filter(x, dy, f.shape, window)


def session_call(layer: Layer, op: str):
    """A whole ClientSession.Run of the op (placeholders fed each step)."""
    import minigraph as mg
    from minigraph import ops

    root = mg.Scope.NewRootScope()
    x, f, dy = (ops.Placeholder(root, mg.float32, shape=a.shape)
                for a in (layer.x, layer.f, layer.dy))
    if op == "forward":
        out = ops.DepthwiseConv2dNative(root, x, f, **layer.attrs)
    elif op == "input grad":
        out = ops.DepthwiseConv2dNativeBackpropInput(root, list(layer.x.shape), f, dy,
                                                     **layer.attrs)
    else:
        out = ops.DepthwiseConv2dNativeBackpropFilter(root, x, list(layer.f.shape), dy,
                                                      **layer.attrs)
    session = mg.ClientSession(root, backend="native")
    feeds = {x: layer.x, f: layer.f, dy: layer.dy}
    return lambda: session.Run(feeds, out)


def tf_call(tf, layer: Layer, op: str):
    x, f, dy = (tf.constant(a) for a in (layer.x, layer.f, layer.dy))
    raw = tf.raw_ops
    if op == "forward":
        run = tf.function(lambda x, f: raw.DepthwiseConv2dNative(input=x, filter=f,
                                                                 **layer.attrs))
        return lambda: run(x, f)
    if op == "input grad":
        run = tf.function(lambda f, dy: raw.DepthwiseConv2dNativeBackpropInput(
            input_sizes=list(layer.x.shape), filter=f, out_backprop=dy, **layer.attrs))
        return lambda: run(f, dy)
    run = tf.function(lambda x, dy: raw.DepthwiseConv2dNativeBackpropFilter(
        input=x, filter_sizes=list(layer.f.shape), out_backprop=dy, **layer.attrs))
    return lambda: run(x, dy)


def worker(framework: str) -> None:
    """Serve ``_workers.serve_cases``: a case is {"layer": index into LAYERS, "op": op}."""
    if framework == "minigraph":
        from minigraph.backends import native

        native.set_num_threads(THREADS)
        ready = {"isa": native.isa()}
    else:
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(THREADS)
        tf.config.threading.set_inter_op_parallelism_threads(1)
        ready = {}

    def factories(spec: dict) -> dict:
        layer, op = Layer(*LAYERS[spec["layer"]]), spec["op"]
        if framework == "minigraph":
            return {"kernel": lambda: kernel_call(layer, op),
                    "session": lambda: session_call(layer, op)}
        return {"tf": lambda: tf_call(tf, layer, op)}

    serve_cases(factories, ready)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--forward", action="store_true", help="the forward op only")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--worker", choices=("minigraph", "tensorflow"), help=argparse.SUPPRESS)
    parser.add_argument("--launched", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
        return
    workers = {"minigraph": Worker([os.path.abspath(__file__), "--worker", "minigraph"],
                                   name="minigraph")}
    try:
        workers["tensorflow"] = Worker([os.path.abspath(__file__), "--worker", "tensorflow"],
                                       name="tensorflow")
    except RuntimeError as error:
        print(f"TensorFlow left out ({error})", file=sys.stderr)
    rows, ratios = [], {op: [] for op in OPS}
    try:
        for index, (size, channels, stride) in enumerate(LAYERS):
            for op in OPS[:1] if args.forward else OPS:
                times = time_case(workers, {"layer": index, "op": op}, args.repeats, 2e-3)
                ratio = times["tf"] / times["kernel"] if "tf" in times else float("nan")
                ratios[op].append(ratio)
                rows.append([layer_name(size, channels, stride), op,
                             f"{times['kernel'] * 1e3:.3f}", f"{times['session'] * 1e3:.3f}",
                             f"{times['tf'] * 1e3:.3f}" if "tf" in times else "n/a",
                             f"{ratio:.2f}"])
    finally:
        for w in workers.values():
            w.close()
    print(f"depthwise 3x3, batch {BATCH}, float32 NHWC, {THREADS} threads, "
          f"ISA {workers['minigraph'].ready['isa']}; each framework in its own process; "
          "medians in ms; ratio = TF / minigraph kernel (> 1: faster)\n")
    print(markdown_table(["layer (input)", "op", "minigraph kernel", "minigraph Run",
                          "TF tf.function", "ratio"], rows))
    print()
    for op in OPS[:1] if args.forward else OPS:
        print(f"geometric mean ratio, {op}: {geomean(ratios[op]):.2f}")


if __name__ == "__main__":
    main()
