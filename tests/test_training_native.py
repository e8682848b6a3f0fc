"""A CNN training step runs native end to end (issue 23 §1).

The digits CNN of ``minigraph.examples.train_digits_cnn`` (momentum and Adam; NHWC and
NCHW), the CIFAR-style ResNet-8 of ``minigraph.examples.resnet8`` (batch norm in training
mode, stride-2 projection shortcuts, global average pool, SGD with momentum), the other
models of the training benchmark (``benchmarks/_training_models.py``: LeNet-5's 5x5 VALID
convolutions with biases and dense stack, VGG blocks with Adam, a MobileNet stack of
depthwise convolutions and ReLU6, ResNet-8 at twice the width; at batch 2) and
hypothesis-generated CNNs of those families (convolutions of kernel 1-5, strides 1-2, SAME
or VALID, with or without bias; depthwise of multiplier 1-2; batch norm; ReLU or ReLU6;
max or average pools; a global mean or flatten head with dense layers; gradient descent,
momentum or Adam; NHWC or NCHW; batch 1-4) each run one training step on the native backend
with ``RunMetadata``: no node with a float32 output may pick a ``reference:`` kernel, apart
from the ops listed below; and the step's loss and every variable it updates (weights,
batch-norm statistics, optimizer slots) match the reference backend's step from the same
initial values within a stated tolerance.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

import numpy as np
import pytest
from conftest import NATIVE_AVAILABLE
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import minigraph as mg
from minigraph import nn, ops
from minigraph.examples import train_digits_cnn
from minigraph.examples.resnet8 import build_resnet8_training
from minigraph.ops.state_ops import glorot_uniform
from minigraph.train.variables import variable

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "benchmarks"))
from _training_models import MODELS, initial_arrays, split_arrays  # noqa: E402
from _training_peers import _load_variables, _minigraph_graph  # noqa: E402

pytestmark = pytest.mark.skipif(not NATIVE_AVAILABLE, reason="the native kernels are not built")

F32 = np.float32
# Kernels that move or hold tensors but do no float arithmetic: every backend shares them
# (a NoOp: the remapper leaves one named as each update it fuses that was a run target).
NO_ARITHMETIC = {"Const", "Variable", "VariableV2", "Assign", "_FusedAssign", "Identity", "Reshape",
                 "NoOp"}
# A variable after the step: |native - reference| <= RTOL * max|reference| + ATOL. The two
# backends' convolutions and gradients round differently (GEMM blocking against numpy's
# einsum), each within K * 2^-24 * sum|a*b| per element; batch norm's backward subtracts
# means of products, which may cost a few more digits; one step of lr 0.01-0.05 moves the
# weights by about lr * |grad|.
RTOL, ATOL = 1e-4, 1e-6


def digits_step(optimizer: str, data_format: str = "NHWC") -> dict:
    args = train_digits_cnn.finish_args(argparse.Namespace(
        data_format=data_format, seed=3, dtype="float32", optimizer=optimizer, learning_rate=None))
    g = train_digits_cnn.build(args)
    rng = np.random.default_rng(5)
    feeds = {g["images"]: rng.random((16, 8, 8, 1), dtype=F32),
             g["labels"]: rng.integers(0, 10, 16).astype(np.int32)}
    return {"root": g["root"], "feeds": feeds, "loss": g["loss"], "step": g["step"]}


def resnet8_step() -> dict:
    root = mg.Scope.NewRootScope()
    model = build_resnet8_training(root, 4, seed=11)
    rng = np.random.default_rng(6)
    feeds = {model.images: rng.standard_normal((4, 32, 32, 3)).astype(F32),
             model.labels: rng.integers(0, 10, 4).astype(np.int32)}
    return {"root": root, "feeds": feeds, "loss": model.loss, "step": model.train_op}


BENCHMARK_MODELS = ("lenet5", "vgg-adam", "mobilenet", "resnet8-wide")


def benchmark_step(name: str, batch: int = 2) -> dict:
    """The benchmark's minigraph graph of ``name`` at ``batch``, its initial weights loaded
    after the initializers (which leave these variables at zero)."""
    model = dataclasses.replace(MODELS[name], batch=batch)
    root, images, labels, loss, targets = _minigraph_graph(model, "NHWC")
    weights, x, y = split_arrays(initial_arrays(model, seed=4))
    return {"root": root, "feeds": {images: x, labels: y}, "loss": loss, "step": targets,
            "load": lambda session: _load_variables(session, root.graph(),
                                                    model.minigraph_prefix, weights)}


def run_step(case: dict, backend: str) -> tuple[float, dict[str, np.ndarray], list]:
    """(loss, every variable after the step, the step's NodeStats) on ``backend``."""
    root = case["root"]
    session = mg.ClientSession(root, backend=backend)
    session.Run({}, [], targets=mg.train.global_variables_initializer(root))
    if "load" in case:
        case["load"](session)
    metadata = mg.RunMetadata()
    loss = session.Run(case["feeds"], [case["loss"]], targets=case["step"],
                       run_metadata=metadata)[0]
    variables = [op for op in root.graph().get_operations() if op.type in ("Variable",
                                                                           "VariableV2")]
    values = session.Run({}, [op.outputs[0] for op in variables])
    return float(loss), {op.name: v for op, v in zip(variables, values)}, metadata.step_stats


def float32_reference_nodes(root: mg.Scope, stats) -> list[str]:
    """Nodes with a float32 output that ran a ``reference:`` kernel, beyond the allowed."""
    graph = root.graph()
    offenders = []
    for s in stats:
        if s.backend != "reference" or s.op_type in NO_ARITHMETIC:
            continue
        outputs = graph.get_operation(s.node_name).outputs
        if not any(o.dtype == mg.float32 for o in outputs):
            continue
        offenders.append(f"{s.op_type} '{s.node_name}' ({s.kernel})")
    return offenders


CASES = {"digits-momentum": lambda: digits_step("momentum"),
         "digits-adam": lambda: digits_step("adam"),
         "digits-momentum-nchw": lambda: digits_step("momentum", "NCHW"),
         "resnet8-momentum": resnet8_step,
         **{name: lambda name=name: benchmark_step(name) for name in BENCHMARK_MODELS}}


@pytest.mark.parametrize("name", list(CASES))
def test_training_step_runs_native_and_matches_the_reference(name):
    check_native_step(CASES[name]())


# ----------------------------------------------------------------------------- generated CNNs


@st.composite
def cnn_layers(draw) -> tuple[tuple[int, int, int, int], list[tuple], tuple]:
    """((batch, height, width, channels), body layers, head) of a small CNN: each body layer
    one of ("conv", out, kernel, stride, padding, bias), ("depthwise", kernel, stride,
    multiplier), ("bn",), ("relu",), ("relu6",), ("pool", kind, size, stride, padding), kept
    only where the spatial size takes it, ("residual", kernel, dilation) (x + BN(conv(x)),
    SAME, stride 1: the gradient's fan-out sums); the head ("mean" | "flatten", hidden
    units or 0)."""
    shape = (draw(st.integers(1, 4)), draw(st.integers(5, 12)), draw(st.integers(5, 12)),
             draw(st.integers(1, 4)))
    h, w = shape[1:3]
    channels = shape[3]
    layers = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["conv", "conv", "depthwise", "bn", "relu", "relu6",
                                     "pool", "residual"]))
        if kind == "conv":
            # not 1x1 on one channel: each output channel is then w_c * x, which a batch
            # norm after it (through Relu and pools too) normalizes to sign(w_c) * x-hat, so
            # the filter's exact gradient is 0 and both backends return rounding noise
            k = draw(st.sampled_from([1, 3, 5] if channels > 1 else [3, 5]))
            stride = draw(st.integers(1, 2))
            padding = draw(st.sampled_from(["SAME", "VALID"]))
            layer = ("conv", draw(st.integers(1, 12)), k, stride, padding, draw(st.booleans()))
        elif kind == "depthwise":
            k, stride, padding = 3, draw(st.integers(1, 2)), "SAME"
            layer = ("depthwise", k, stride, draw(st.integers(1, 2)))
        elif kind == "pool":
            k, stride = draw(st.sampled_from([2, 3])), draw(st.integers(1, 2))
            padding = draw(st.sampled_from(["SAME", "VALID"]))
            layer = ("pool", draw(st.sampled_from(["MaxPool", "AvgPool"])), k, stride, padding)
        elif kind == "residual":
            layers.append(("residual", draw(st.sampled_from([1, 3])), draw(st.integers(1, 2))))
            continue
        else:
            layers.append((kind,))
            continue
        if padding == "VALID" and min(h, w) < k:
            continue
        h, w = ((size - k) // stride + 1 if padding == "VALID" else -(-size // stride)
                for size in (h, w))
        channels = (layer[1] if kind == "conv" else channels * layer[3] if kind == "depthwise"
                    else channels)
        layers.append(layer)
    head = (draw(st.sampled_from(["mean", "flatten"])), draw(st.sampled_from([0, 7])))
    return shape, layers, head


def _glorot_filter(scope: mg.Scope, name: str, shape: list[int], seed: int):
    """An HWIO filter variable, Glorot-uniform over its fans."""
    fan_in, fan_out = int(np.prod(shape[:-1])), int(np.prod(shape[:2])) * shape[-1]
    return variable(scope, name, shape, lambda s, shp, dt: glorot_uniform(
        s, shp, fan_in=fan_in, fan_out=fan_out, dtype=dt, seed=seed))


def generated_step(shape: tuple, layers: list[tuple], head: tuple, optimizer: str,
                   data_format: str, seed: int) -> dict:
    """The training step of :func:`cnn_layers`' CNN (Glorot filters from ``seed``; batch-norm
    scales in [0.5, 1.5] and offsets in [-0.5, 0.5], loaded after the initializers: with
    nn.BatchNorm's 0 offsets, a batch norm whose output is averaged feeds the head exact
    zeros plus rounding noise, and a ReLU of those picks its units by that noise)."""
    root = mg.Scope.NewRootScope()
    model, train = root.NewSubScope("model"), root.NewSubScope("train")
    nchw = data_format == "NCHW"
    images = ops.Placeholder(root.WithOpName("images"), mg.float32, shape=list(shape))
    labels = ops.Placeholder(root.WithOpName("labels"), mg.int32, shape=[shape[0]])
    x = ops.Transpose(train, images, [0, 3, 1, 2]) if nchw else images
    axis = 1 if nchw else 3
    variables = []

    def window(size):
        return [1, 1, size, size] if nchw else [1, size, size, 1]

    for index, (kind, *args) in enumerate(layers):
        name, channels = f"layer{index}", x.shape.dims[axis]
        if kind == "conv":
            out, k, stride, padding, bias = args
            layer = nn.Conv2D(model, name, channels, out, k, stride=stride, padding=padding,
                              use_bias=bias, data_format=data_format, seed=seed + index)
            variables += layer.variables
            x = layer(train, x)
        elif kind == "depthwise":
            k, stride, multiplier = args
            f = _glorot_filter(model, f"{name}/filter", [k, k, channels, multiplier],
                               seed + index)
            variables.append(f)
            x = ops.DepthwiseConv2dNative(train, x, f, strides=window(stride), padding="SAME",
                                          data_format=data_format)
        elif kind == "bn":
            layer = nn.BatchNorm(model, name, channels, data_format=data_format)
            variables += layer.variables
            x = layer(train, x, training=True)
        elif kind == "residual":
            k, dilation = args
            f = _glorot_filter(model, f"{name}/filter", [k, k, channels, channels],
                               seed + index)
            bn = nn.BatchNorm(model, f"{name}/bn", channels, data_format=data_format)
            variables += [f, *bn.variables]
            y = ops.Conv2D(train, x, f, strides=window(1), padding="SAME",
                           dilations=window(dilation), data_format=data_format)
            x = ops.AddV2(train, x, bn(train, y, training=True))
        elif kind in ("relu", "relu6"):
            x = (ops.Relu if kind == "relu" else ops.Relu6)(train, x)
        else:
            pool, k, stride, padding = args
            x = getattr(ops, pool)(train, x, ksize=window(k), strides=window(stride),
                                   padding=padding, data_format=data_format)
    reduce, hidden = head
    if reduce == "mean":
        x = ops.Mean(train, x, ops.Const(train, [2, 3] if nchw else [1, 2]))
    else:
        x = nn.flatten(train, x)
    for units, name in ((hidden, "hidden"), (10, "logits")):
        if units:
            layer = nn.Dense(model, name, x.shape.dims[1], units, seed=seed + 50)
            variables += layer.variables
            x = layer(train, x)
            x = ops.Relu(train, x) if name == "hidden" else x
    loss = nn.sparse_softmax_cross_entropy(train, x, labels)
    # Adam's epsilon 1e-3: its first step is lr * g / (|g| + epsilon / sqrt(1 - beta2)), so
    # a gradient that is rounding noise (a batch norm's offset before another one, whose
    # exact gradient is 0) would move by about +-lr, in a direction the rounding picks
    optimizers = {"sgd": mg.train.GradientDescent(0.05), "momentum": mg.train.Momentum(0.05),
                  "adam": mg.train.Adam(0.01, epsilon=1e-3)}
    step = optimizers[optimizer].minimize(train, loss, variables)
    rng = np.random.default_rng(seed)
    batch_norm = {v.op.name: rng.uniform(*bounds, v.shape.dims).astype(F32)
                  for v in variables for suffix, bounds in (("/scale", (0.5, 1.5)),
                                                            ("/offset", (-0.5, 0.5)))
                  if v.op.name.endswith(suffix)}

    def load(session):
        for name, value in batch_norm.items():
            session.state.write(name, value)

    return {"root": root, "loss": loss, "load": load,
            "step": step + root.graph().get_collection(nn.UPDATE_OPS),
            "feeds": {images: rng.standard_normal(shape).astype(F32),
                      labels: rng.integers(0, 10, shape[0]).astype(np.int32)}}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cnn=cnn_layers(), optimizer=st.sampled_from(["sgd", "momentum", "adam"]),
       data_format=st.sampled_from(["NHWC", "NCHW"]), seed=st.integers(0, 1000))
def test_generated_cnn_training_step_runs_native(cnn, optimizer, data_format, seed):
    check_native_step(generated_step(*cnn, optimizer, data_format, seed))


def check_native_step(case: dict) -> None:
    """No float32 reference kernel in the native step; loss and variables as the
    reference backend's step within the stated tolerance."""
    loss, variables, stats = run_step(case, "native")
    assert float32_reference_nodes(case["root"], stats) == []
    backends = {s.op_type: s.backend for s in stats}
    for op_type in ("AddN", "ApplyMomentum", "ApplyAdam", "BiasAddGrad", "Mean",
                    "SparseSoftmaxCrossEntropyWithLogits", "FusedBatchNormGradV3", "ReluGrad"):
        if op_type in backends:  # what the step has runs native (a check of the check)
            assert backends[op_type] == "native", op_type
    ref_loss, ref_variables, _ = run_step(case, "reference")
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5, atol=1e-6)
    assert variables.keys() == ref_variables.keys()
    for key, ref in ref_variables.items():
        bound = RTOL * float(np.abs(ref).max(initial=0.0)) + ATOL
        error = float(np.abs(variables[key] - ref).max(initial=0.0))
        assert error <= bound, (key, error, bound)
