"""One training step per framework, and the worker process that serves it.

    python benchmarks/_training_peers.py --model resnet8 --peer torch-channels-last \\
        --arrays ARRAYS.npz --threads 2 [--minigraph-options remapper=off] [--backend native]

(the coordinators, ``train_peers.py`` and ``train_step.py``, start these; one framework per
process, see ``_workers.py``). A worker loads the weights and the batch from the ``.npz``
(``_training_models.initial_arrays``), builds its step, runs three steps on that batch
(their losses and the time from process start to the end of the first go in its ``ready``
line) and then serves ``time K`` / ``rss`` / ``profile K`` (minigraph: seconds per op type).

Peers: ``minigraph`` (native backend, NHWC; the graph of ``minigraph/examples``' builder),
``minigraph-nchw``, ``torch-nchw`` and ``torch-channels-last`` (PyTorch eager),
``torch-compile`` (``torch.compile`` of forward + loss, so inductor compiles the forward and
AOTAutograd's backward; the optimizer step stays eager), ``tf`` (TensorFlow ``tf.function``
of the whole step, NHWC) and ``tf-xla`` (the same with ``jit_compile=True``). Threads:
``torch.set_num_threads``, TF's intra-op pool (inter-op: 1, as the other peers run one op
at a time), minigraph's ``native.set_num_threads``; no environment variable is set.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import numpy as np  # noqa: E402
from _common import parse_options  # noqa: E402
from _training_models import (  # noqa: E402
    ADAM_EPSILON,
    BN_AVERAGE_FACTOR,
    BN_EPSILON,
    MODELS,
    MOMENTUM,
    Model,
    initial_arrays,
    is_trainable,
    same_padding,
    split_arrays,
)
from _workers import serve  # noqa: E402

PEERS = {
    "minigraph": "minigraph (native, NHWC)",
    "minigraph-nchw": "minigraph (native, NCHW)",
    "torch-nchw": "PyTorch eager, NCHW",
    "torch-channels-last": "PyTorch eager, channels_last",
    "torch-compile": "torch.compile (inductor), NCHW",
    "tf": "TensorFlow tf.function",
    "tf-xla": "TensorFlow tf.function, XLA",
}


# ----------------------------------------------------------------------------- minigraph


class _MinigraphOps:
    """The model vocabulary in minigraph (``minigraph.nn`` layers where they exist, so the
    graph is the one a user writes; variables named as :class:`Trace` names parameters
    under ``model/``; weights are loaded after the initializers, so these start at zero)."""

    def __init__(self, scope, data_format: str) -> None:
        import minigraph as mg
        from minigraph import nn, ops

        self.mg, self.nn, self.ops = mg, nn, ops
        self.model, self.train = scope.NewSubScope("model"), scope.NewSubScope("train")
        self.data_format, self.variables = data_format, []
        self.channel_axis = 1 if data_format == "NCHW" else 3

    def _zeros(self, name: str, shape: list[int]):
        from minigraph.ops.state_ops import constant_fill
        from minigraph.train.variables import variable

        v = variable(self.model, name, shape,
                     lambda scope, shape, dtype: constant_fill(scope, shape, 0.0, dtype))
        self.variables.append(v)
        return v

    def _window(self, size: int) -> list[int]:
        return [1, 1, size, size] if self.data_format == "NCHW" else [1, size, size, 1]

    def conv(self, x, name, out, kernel, stride, padding="SAME"):
        layer = self.nn.Conv2D(self.model, name, x.shape.dims[self.channel_axis], out, kernel,
                               stride=stride, padding=padding, data_format=self.data_format)
        self.variables += layer.variables
        return layer(self.train, x)

    def depthwise(self, x, name, kernel, stride):
        w = self._zeros(f"{name}/filter", [kernel, kernel, x.shape.dims[self.channel_axis], 1])
        return self.ops.DepthwiseConv2dNative(self.train, x, w, strides=self._window(stride),
                                              padding="SAME", data_format=self.data_format)

    def bias(self, x, name):
        b = self._zeros(f"{name}/bias", [x.shape.dims[self.channel_axis]])
        return self.ops.BiasAdd(self.train, x, b, data_format=self.data_format)

    def bn(self, x, name):
        layer = self.nn.BatchNorm(self.model, name, x.shape.dims[self.channel_axis],
                                  data_format=self.data_format, momentum=1 - BN_AVERAGE_FACTOR,
                                  epsilon=BN_EPSILON)
        self.variables += layer.variables
        return layer(self.train, x, training=True)

    def relu(self, x):
        return self.ops.Relu(self.train, x)

    def relu6(self, x):
        return self.ops.Relu6(self.train, x)

    def add(self, x, y):
        return self.ops.AddV2(self.train, x, y)

    def max_pool(self, x, size):
        return self.nn.max_pool(self.train, x, size, data_format=self.data_format)

    def global_mean(self, x):
        spatial = [2, 3] if self.data_format == "NCHW" else [1, 2]
        return self.ops.Mean(self.train, x, self.ops.Const(self.train, spatial))

    def flatten(self, x):
        if self.data_format == "NCHW":  # the vocabulary flattens in NHWC order
            x = self.ops.Transpose(self.train, x, [0, 2, 3, 1])
        return self.nn.flatten(self.train, x)

    def dense(self, x, name, out):
        layer = self.nn.Dense(self.model, name, x.shape.dims[1], out)
        self.variables += layer.variables
        return layer(self.train, x)


def _minigraph_generic(model: Model, data_format: str):
    """(scope, images, labels, loss, targets) of ``model.forward`` over :class:`_MinigraphOps`
    with ``minigraph.train``'s optimizer and the batch norms' update ops."""
    import minigraph as mg
    from minigraph import nn, ops

    root = mg.Scope.NewRootScope()
    images = ops.Placeholder(root.WithOpName("images"), mg.float32,
                             shape=[model.batch, *model.image_shape])
    labels = ops.Placeholder(root.WithOpName("labels"), mg.int32, shape=[model.batch])
    f = _MinigraphOps(root, data_format)
    x = images if data_format == "NHWC" else ops.Transpose(f.train, images, [0, 3, 1, 2])
    loss = nn.sparse_softmax_cross_entropy(f.train, model.forward(f, x), labels)
    optimizer = (mg.train.Adam(model.learning_rate, epsilon=ADAM_EPSILON)
                 if model.optimizer == "adam" else
                 mg.train.Momentum(model.learning_rate, MOMENTUM))
    targets = optimizer.minimize(f.train, loss, f.variables)
    return root, images, labels, loss, targets + root.graph().get_collection(nn.UPDATE_OPS)


def _minigraph_graph(model: Model, data_format: str):
    """(scope, images, labels, loss, targets) of ``model``: the example builder's graph for
    the models that have one, else :func:`_minigraph_generic`."""
    import minigraph as mg

    if model.builder == "resnet8":
        from minigraph.examples.resnet8 import build_resnet8_training

        root = mg.Scope.NewRootScope()
        t = build_resnet8_training(root, model.batch, data_format=data_format,
                                   learning_rate=model.learning_rate, momentum=MOMENTUM)
        return root, t.images, t.labels, t.loss, t.train_op
    if model.builder == "digits":
        from minigraph.examples.train_digits_cnn import build, parse

        g = build(parse(["--data-format", data_format, "--optimizer", model.optimizer,
                         "--learning-rate", repr(model.learning_rate)]))
        return g["root"], g["images"], g["labels"], g["loss"], g["step"]
    return _minigraph_generic(model, data_format)


def _load_variables(session, graph, prefix: str, weights: dict[str, np.ndarray]) -> None:
    """Write ``weights`` into the graph's variables ``prefix + name``; fail unless every
    weight has its variable (same shape) and every variable an optimizer updates has a
    weight: the benchmark's parameter list is exactly the builder's model."""
    variables = {op.name: op for op in graph.operations() if op.type == "Variable"}
    for name, value in weights.items():
        op = variables.get(prefix + name)
        if op is None or tuple(op.outputs[0].shape.dims) != value.shape:
            raise RuntimeError(f"minigraph's model has no variable {prefix + name} of shape "
                               f"{value.shape}")
        session.state.write(op.name, value)
    updated = {op.inputs[0].op.name for op in graph.operations()
               if op.type.startswith("Apply")}
    missing = sorted(updated - {prefix + name for name in weights})
    if missing:
        raise RuntimeError(f"minigraph trains variables the benchmark does not load: {missing}")


def minigraph_step(model: Model, data_format: str, weights, images, labels,
                   threads: int | None, options: dict | None = None,
                   backend: str | None = "native"):
    """The minigraph step (returns the loss) and its profile handler; ``threads`` None keeps
    the thread count of the environment (``$MINIGRAPH_NUM_THREADS`` or the default)."""
    import minigraph as mg
    from minigraph.backends import native

    if threads is not None:
        native.set_num_threads(threads)
    root, x, y, loss, targets = _minigraph_graph(model, data_format)
    optimizer = mg.OptimizerOptions(**options) if options else None
    session = mg.ClientSession(root, backend=backend, optimizer=optimizer)
    session.Run({}, [], targets=mg.train.global_variables_initializer(root))
    _load_variables(session, root.graph(), model.minigraph_prefix, weights)
    feeds = {x: images, y: labels}

    def step():
        return session.Run(feeds, [loss], targets=targets)[0]

    step.session = session  # for benchmarks/executor_overhead.py --models

    def profile(argument: str) -> str:
        """Seconds per step by op type and kernel backend over ``argument`` steps (from
        ``RunMetadata``), and the wall time per step, as JSON."""
        steps = int(argument or 20)
        metadata = mg.RunMetadata()
        start = time.perf_counter()
        for _ in range(steps):
            session.Run(feeds, [loss], targets=targets, run_metadata=metadata)
        wall = (time.perf_counter() - start) / steps
        totals: dict[str, float] = defaultdict(float)
        for stats in metadata.step_stats:
            if stats.op_type != "transfer":
                totals[f"{stats.op_type} ({stats.backend or 'fused'})"] += stats.seconds / steps
        return json.dumps({"wall": wall, "ops": totals})

    return step, {"profile": profile}


# ----------------------------------------------------------------------------- PyTorch


class _TorchOps:
    """The model vocabulary in PyTorch (NCHW logical order; ``channels_last`` only changes
    the memory layout of the same tensors)."""

    def __init__(self, torch, params: dict, buffers: dict) -> None:
        self.torch, self.F, self.params, self.buffers = torch, torch.nn.functional, params, \
            buffers

    def _conv(self, x, w, stride, padding, groups=1):
        if padding == "VALID":
            return self.F.conv2d(x, w, stride=stride, groups=groups)
        (top, bottom), (left, right) = (same_padding(size, w.shape[-1], stride)
                                        for size in x.shape[2:])
        if top == bottom and left == right:
            return self.F.conv2d(x, w, stride=stride, padding=(top, left), groups=groups)
        return self.F.conv2d(self.F.pad(x, (left, right, top, bottom)), w, stride=stride,
                             groups=groups)

    def conv(self, x, name, out, kernel, stride, padding="SAME"):
        return self._conv(x, self.params[f"{name}/filter"], stride, padding)

    def depthwise(self, x, name, kernel, stride):
        # HWC1 loads as [1, C, k, k]; a grouped convolution takes [C, 1, k, k] (a view)
        w = self.params[f"{name}/filter"].transpose(0, 1)
        return self._conv(x, w, stride, "SAME", x.shape[1])

    def bias(self, x, name):
        return x + self.params[f"{name}/bias"].view(1, -1, 1, 1)

    def bn(self, x, name):
        return self.F.batch_norm(x, self.buffers[f"{name}/moving_mean"],
                                 self.buffers[f"{name}/moving_variance"],
                                 self.params[f"{name}/scale"], self.params[f"{name}/offset"],
                                 training=True, momentum=BN_AVERAGE_FACTOR, eps=BN_EPSILON)

    def relu(self, x):
        return self.F.relu(x)

    def relu6(self, x):
        return self.F.relu6(x)

    def add(self, x, y):
        return x + y

    def max_pool(self, x, size):
        return self.F.max_pool2d(x, size)

    def global_mean(self, x):
        return x.mean((2, 3))

    def flatten(self, x):
        return x.permute(0, 2, 3, 1).reshape(x.shape[0], -1)

    def dense(self, x, name, out):
        return self.torch.addmm(self.params[f"{name}/bias"], x, self.params[f"{name}/kernel"])


def torch_step(model: Model, layout: str, compiled: bool, weights, images, labels,
               threads: int):
    import torch

    torch.set_num_threads(threads)
    memory = torch.channels_last if layout == "channels_last" else torch.contiguous_format
    params, buffers = {}, {}
    for name, value in weights.items():
        tensor = torch.from_numpy(value.copy())
        if name.endswith("/filter"):  # HWIO -> OIHW
            tensor = tensor.permute(3, 2, 0, 1).contiguous(memory_format=memory)
        if is_trainable(name):
            params[name] = tensor.requires_grad_()
        else:
            buffers[name] = tensor
    x = torch.from_numpy(images).permute(0, 3, 1, 2).contiguous(memory_format=memory)
    y = torch.from_numpy(labels).long()
    f = _TorchOps(torch, params, buffers)

    def loss_of(x, y):
        return torch.nn.functional.cross_entropy(model.forward(f, x), y)

    if compiled:
        loss_of = torch.compile(loss_of)
    if model.optimizer == "adam":
        optimizer = torch.optim.Adam(params.values(), lr=model.learning_rate, eps=ADAM_EPSILON)
    else:
        optimizer = torch.optim.SGD(params.values(), lr=model.learning_rate, momentum=MOMENTUM)

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = loss_of(x, y)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return step, {}


# ----------------------------------------------------------------------------- TensorFlow


class _TFOps:
    """The model vocabulary in TensorFlow (NHWC; batch norm as minigraph builds it: one
    ``FusedBatchNormV3`` blending the moving statistics, then two assigns)."""

    def __init__(self, tf, variables: dict) -> None:
        self.tf, self.variables = tf, variables

    def conv(self, x, name, out, kernel, stride, padding="SAME"):
        return self.tf.nn.conv2d(x, self.variables[f"{name}/filter"], stride, padding)

    def depthwise(self, x, name, kernel, stride):
        return self.tf.nn.depthwise_conv2d(x, self.variables[f"{name}/filter"],
                                           [1, stride, stride, 1], "SAME")

    def bias(self, x, name):
        return self.tf.nn.bias_add(x, self.variables[f"{name}/bias"])

    def bn(self, x, name):
        v = self.variables
        mean, variance = v[f"{name}/moving_mean"], v[f"{name}/moving_variance"]
        y, batch_mean, batch_variance, *_ = self.tf.raw_ops.FusedBatchNormV3(
            x=x, scale=v[f"{name}/scale"], offset=v[f"{name}/offset"], mean=mean,
            variance=variance, epsilon=BN_EPSILON, exponential_avg_factor=BN_AVERAGE_FACTOR,
            data_format="NHWC", is_training=True)
        mean.assign(batch_mean)
        variance.assign(batch_variance)
        return y

    def relu(self, x):
        return self.tf.nn.relu(x)

    def relu6(self, x):
        return self.tf.nn.relu6(x)

    def add(self, x, y):
        return x + y

    def max_pool(self, x, size):
        return self.tf.nn.max_pool2d(x, size, size, "VALID")

    def global_mean(self, x):
        return self.tf.reduce_mean(x, [1, 2])

    def flatten(self, x):
        return self.tf.reshape(x, [x.shape[0], -1])

    def dense(self, x, name, out):
        return self.tf.matmul(x, self.variables[f"{name}/kernel"]) + \
            self.variables[f"{name}/bias"]


def tf_step(model: Model, xla: bool, weights, images, labels, threads: int):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    variables = {name: tf.Variable(value, name=name.replace("/", "_"))
                 for name, value in weights.items()}
    trainable = [v for name, v in variables.items() if is_trainable(name)]
    slots = [[tf.Variable(tf.zeros_like(v)) for v in trainable]
             for _ in range(2 if model.optimizer == "adam" else 1)]
    powers = [tf.Variable(b, dtype=tf.float32) for b in (0.9, 0.999)]
    x, y = tf.constant(images), tf.constant(labels)
    f = _TFOps(tf, variables)
    lr = tf.constant(model.learning_rate, tf.float32)

    @tf.function(jit_compile=xla)
    def step():
        with tf.GradientTape() as tape:
            logits = model.forward(f, x)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=y, logits=logits))
        grads = tape.gradient(loss, trainable)
        if model.optimizer == "adam":
            updates = [tf.raw_ops.ResourceApplyAdam(
                var=v.handle, m=m.handle, v=s.handle, beta1_power=powers[0],
                beta2_power=powers[1], lr=lr, beta1=0.9, beta2=0.999, epsilon=ADAM_EPSILON,
                grad=g) for v, m, s, g in zip(trainable, *slots, grads)]
            with tf.control_dependencies(updates):
                powers[0].assign(powers[0] * 0.9)
                powers[1].assign(powers[1] * 0.999)
        else:
            for v, accum, g in zip(trainable, slots[0], grads):
                tf.raw_ops.ResourceApplyMomentum(var=v.handle, accum=accum.handle, lr=lr,
                                                 grad=g, momentum=MOMENTUM)
        return loss

    return step, {}


# ----------------------------------------------------------------------------- worker


def make_step(model: Model, peer: str, arrays: dict | None = None, threads: int | None = 2,
              options: dict | None = None, backend: str | None = "native"):
    """``(step, handlers)`` of ``peer`` on ``model``: ``step()`` runs one training step on
    the batch and returns its loss (``arrays``: :func:`initial_arrays`' dict, by default
    those of seed 0)."""
    weights, images, labels = split_arrays(arrays or initial_arrays(model))
    if peer.startswith("minigraph"):
        return minigraph_step(model, "NCHW" if peer.endswith("nchw") else "NHWC", weights,
                              images, labels, threads, options, backend)
    if peer.startswith("torch"):
        return torch_step(model, "channels_last" if peer.endswith("channels-last") else
                          "NCHW", peer == "torch-compile", weights, images, labels, threads)
    if peer in ("tf", "tf-xla"):
        return tf_step(model, peer == "tf-xla", weights, images, labels, threads)
    raise ValueError(f"unknown peer {peer!r}; the peers are {', '.join(PEERS)}")


def worker(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), required=True)
    parser.add_argument("--peer", choices=sorted(PEERS), required=True)
    parser.add_argument("--arrays", required=True, help=".npz of initial_arrays")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--minigraph-options", default="")
    parser.add_argument("--backend", default="native")
    parser.add_argument("--launched", type=float, default=None,
                        help="time.time() when the coordinator started this process")
    args = parser.parse_args(argv)
    launched = args.launched if args.launched is not None else time.time()
    with np.load(args.arrays) as data:
        arrays = {name: data[name] for name in data.files}
    options, _ = parse_options(args.minigraph_options)
    step, handlers = make_step(MODELS[args.model], args.peer, arrays, args.threads, options,
                               args.backend)
    losses = [float(step())]
    first_step = time.time() - launched
    losses += [float(step()) for _ in range(2)]
    serve(step, {"losses": losses, "first_step_s": first_step}, handlers)


if __name__ == "__main__":
    worker()
