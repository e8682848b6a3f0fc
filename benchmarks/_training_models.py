"""The training benchmarks' models, written once over a small op vocabulary.

A model is a ``forward(f, images)`` function over ``f``'s ops (``conv``, ``depthwise``,
``bias``, ``bn``, ``relu``, ``relu6``, ``add``, ``max_pool``, ``global_mean``, ``flatten``,
``dense``); each peer supplies ``f`` for
its framework (``_training_peers.py``), and :class:`Trace` runs it on shapes, which gives
the parameter list (names and shapes as minigraph's builders name their variables, HWIO
filters), the analytic FLOP count and so the initial weights every peer loads. No framework
is imported here: the coordinator uses this module too.

Conventions every ``f`` follows (those of TensorFlow and minigraph): convolutions have no
bias (``bias`` adds one) and TF's SAME padding by default (stride 2 on an even size pads one
row/column after, none before) or VALID; ``depthwise`` is a depth multiplier 1 convolution
(HWC1 filter, SAME); ``dense`` has a bias; batch norm runs in training mode with epsilon
1e-3 and moving statistics blended with factor 0.1, ``flatten`` flattens in NHWC order, the
loss is the batch mean of the softmax cross entropy with integer labels.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

BN_EPSILON = 1e-3
BN_AVERAGE_FACTOR = 0.1  # moving = (1 - f) moving + f batch (TF's exponential_avg_factor)
MOMENTUM = 0.9
ADAM_EPSILON = 1e-7  # minigraph's and TF's default
MOVING = ("/moving_mean", "/moving_variance")


def resnet8_forward(f, x, widths=(16, 32, 64)):
    """CIFAR ResNet-8 (``minigraph/examples/resnet8.py``): conv3x3(16)-BN-ReLU, basic blocks
    of 16, 32, 64 channels (the last two start with stride 2 and a 1x1 conv + BN projection),
    global average pool, Dense(10); ``widths`` scales the channel counts."""
    x = f.relu(f.bn(f.conv(x, "stem/conv", widths[0], 3, 1), "stem/bn"))
    channels = widths[0]
    for index, out in enumerate(widths):
        stride, name = (1 if index == 0 else 2), f"block{index + 1}"
        y = f.relu(f.bn(f.conv(x, f"{name}/a/conv", out, 3, stride), f"{name}/a/bn"))
        y = f.bn(f.conv(y, f"{name}/b/conv", out, 3, 1), f"{name}/b/bn")
        if stride != 1 or channels != out:
            x = f.bn(f.conv(x, f"{name}/proj/conv", out, 1, stride), f"{name}/proj/bn")
        x = f.relu(f.add(y, x))
        channels = out
    return f.dense(f.global_mean(x), "dense", 10)


def resnet8_wide_forward(f, x):
    """ResNet-8 at twice the width: blocks of 32, 64, 128 channels."""
    return resnet8_forward(f, x, (32, 64, 128))


def lenet5_forward(f, x):
    """LeNet-5 as usually written for MNIST: Conv5x5(6, VALID)+bias-ReLU-MaxPool(2),
    Conv5x5(16, VALID)+bias-ReLU-MaxPool(2), Dense(120)-ReLU, Dense(84)-ReLU, Dense(10)."""
    for name, out in (("conv1", 6), ("conv2", 16)):
        x = f.max_pool(f.relu(f.bias(f.conv(x, name, out, 5, 1, "VALID"), name)), 2)
    x = f.flatten(x)
    for name, out in (("dense1", 120), ("dense2", 84)):
        x = f.relu(f.dense(x, name, out))
    return f.dense(x, "dense3", 10)


def vgg_forward(f, x):
    """Two VGG blocks: [Conv3x3-BN-ReLU] x 2 of 32 channels, MaxPool(2), the same with 64,
    MaxPool(2), then Dense(128)-ReLU, Dense(10)."""
    for block, out in ((1, 32), (2, 64)):
        for layer in (1, 2):
            name = f"block{block}/conv{layer}"
            x = f.relu(f.bn(f.conv(x, name, out, 3, 1), f"{name}/bn"))
        x = f.max_pool(x, 2)
    return f.dense(f.relu(f.dense(f.flatten(x), "dense1", 128)), "dense2", 10)


def mobilenet_forward(f, x):
    """A MobileNet-v1 stack: Conv3x3(32, stride 2)-BN-ReLU6, then depthwise-separable blocks
    (Depthwise3x3-BN-ReLU6, Conv1x1-BN-ReLU6) of 64, 128 (stride 2), 128, 256 (stride 2)
    channels, global average pool, Dense(10)."""
    x = f.relu6(f.bn(f.conv(x, "stem/conv", 32, 3, 2), "stem/bn"))
    for index, (out, stride) in enumerate(((64, 1), (128, 2), (128, 1), (256, 2))):
        name = f"block{index + 1}"
        x = f.relu6(f.bn(f.depthwise(x, f"{name}/dw", 3, stride), f"{name}/dw/bn"))
        x = f.relu6(f.bn(f.conv(x, f"{name}/pw", out, 1, 1), f"{name}/pw/bn"))
    return f.dense(f.global_mean(x), "dense", 10)


def digits_forward(f, x):
    """The digits CNN (``minigraph/examples/train_digits_cnn.py``): Conv(32)-BN-ReLU,
    Conv(64)-BN-ReLU, MaxPool(2), Dense(10)."""
    for index, out in ((1, 32), (2, 64)):
        x = f.relu(f.bn(f.conv(x, f"conv{index}", out, 3, 1), f"bn{index}"))
    return f.dense(f.flatten(f.max_pool(x, 2)), "dense", 10)


@dataclass(frozen=True)
class Model:
    """One benchmarked training step: the forward, the input (NHWC image shape, batch), the
    optimizer (``momentum`` 0.9 or ``adam``) and the prefix of minigraph's variable names."""

    name: str
    forward: Callable
    image_shape: tuple[int, int, int]
    batch: int
    optimizer: str
    learning_rate: float
    minigraph_prefix: str
    title: str
    builder: str = "generic"  # or the example whose builder makes minigraph's graph


MODELS = {m.name: m for m in (
    Model("resnet8", resnet8_forward, (32, 32, 3), 32, "momentum", 0.01, "resnet8/model/",
          "CIFAR ResNet-8 (32x32x3, batch 32, SGD momentum 0.9)", "resnet8"),
    Model("digits", digits_forward, (8, 8, 1), 64, "momentum", 0.01, "model/",
          "digits CNN (8x8x1, batch 64, SGD momentum 0.9)", "digits"),
    Model("digits-adam", digits_forward, (8, 8, 1), 64, "adam", 0.003, "model/",
          "digits CNN (8x8x1, batch 64, Adam)", "digits"),
    Model("resnet8-wide", resnet8_wide_forward, (32, 32, 3), 16, "momentum", 0.01, "model/",
          "ResNet-8 at width 2x (32x32x3, batch 16, SGD momentum 0.9)"),
    Model("lenet5", lenet5_forward, (28, 28, 1), 64, "momentum", 0.01, "model/",
          "LeNet-5 (28x28x1, 5x5 VALID, batch 64, SGD momentum 0.9)"),
    Model("vgg-adam", vgg_forward, (32, 32, 3), 16, "adam", 0.0001, "model/",
          "VGG blocks 32-32-64-64 with BN (32x32x3, batch 16, Adam)"),
    Model("mobilenet", mobilenet_forward, (64, 64, 3), 16, "momentum", 0.01, "model/",
          "MobileNet-style depthwise-separable net (64x64x3, batch 16, SGD momentum 0.9)"),
)}


def same_padding(size: int, kernel: int, stride: int) -> tuple[int, int]:
    """TF's SAME padding (before, after) of one spatial dimension."""
    total = max((math.ceil(size / stride) - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


def output_size(size: int, kernel: int, stride: int, padding: str) -> int:
    """A convolution's output size along one spatial dimension (TF's SAME or VALID)."""
    return math.ceil(size / stride) if padding == "SAME" else (size - kernel) // stride + 1


@dataclass
class _Shape:
    dims: tuple[int, ...]  # NHWC, or [N, features]
    needs_grad: bool  # False for the images: no input gradient is computed for them


class Trace:
    """The ``f`` of shapes: runs a forward to collect the parameters (name -> shape, in
    creation order) and the multiply-add count of its convolutions and matmuls, forward and
    backward (gradient of the input where the input needs one, gradient of the weights)."""

    def __init__(self, model: Model) -> None:
        self.parameters: dict[str, tuple[int, ...]] = {}
        self.forward_macs = self.input_grad_macs = self.weight_grad_macs = 0
        model.forward(self, _Shape((model.batch, *model.image_shape), False))

    @property
    def flops(self) -> float:
        """2 x the multiply-adds of one training step (forward + both backward products)."""
        return 2.0 * (self.forward_macs + self.input_grad_macs + self.weight_grad_macs)

    def _product(self, x: _Shape, macs: int) -> None:
        self.forward_macs += macs
        self.weight_grad_macs += macs
        self.input_grad_macs += macs if x.needs_grad else 0

    def conv(self, x: _Shape, name: str, out: int, kernel: int, stride: int,
             padding: str = "SAME") -> _Shape:
        n, h, w, c = x.dims
        self.parameters[f"{name}/filter"] = (kernel, kernel, c, out)
        ho, wo = (output_size(size, kernel, stride, padding) for size in (h, w))
        self._product(x, n * ho * wo * out * kernel * kernel * c)
        return _Shape((n, ho, wo, out), True)

    def depthwise(self, x: _Shape, name: str, kernel: int, stride: int) -> _Shape:
        n, h, w, c = x.dims
        self.parameters[f"{name}/filter"] = (kernel, kernel, c, 1)
        ho, wo = (output_size(size, kernel, stride, "SAME") for size in (h, w))
        self._product(x, n * ho * wo * c * kernel * kernel)
        return _Shape((n, ho, wo, c), True)

    def bias(self, x: _Shape, name: str) -> _Shape:
        self.parameters[f"{name}/bias"] = (x.dims[-1],)
        return x

    def bn(self, x: _Shape, name: str) -> _Shape:
        for suffix in ("/scale", "/offset", *MOVING):
            self.parameters[name + suffix] = (x.dims[-1],)
        return x

    def dense(self, x: _Shape, name: str, out: int) -> _Shape:
        n, features = x.dims
        self.parameters[f"{name}/kernel"] = (features, out)
        self.parameters[f"{name}/bias"] = (out,)
        self._product(x, n * features * out)
        return _Shape((n, out), True)

    def relu(self, x: _Shape) -> _Shape:
        return x

    relu6 = relu

    def add(self, x: _Shape, y: _Shape) -> _Shape:
        return x

    def max_pool(self, x: _Shape, size: int) -> _Shape:
        n, h, w, c = x.dims
        return _Shape((n, h // size, w // size, c), x.needs_grad)

    def global_mean(self, x: _Shape) -> _Shape:
        return _Shape((x.dims[0], x.dims[-1]), x.needs_grad)

    def flatten(self, x: _Shape) -> _Shape:
        return _Shape((x.dims[0], int(np.prod(x.dims[1:]))), x.needs_grad)


def is_trainable(name: str) -> bool:
    return not name.endswith(MOVING)


def initial_arrays(model: Model, seed: int = 0) -> dict[str, np.ndarray]:
    """The step's inputs every peer loads: ``w:<name>`` parameters (Glorot-uniform filters and
    kernels; batch-norm scales in [0.5, 1.5] and offsets and biases in [-0.1, 0.1], so a
    swapped or missed parameter changes the loss; moving statistics 0 and 1), ``images``
    (standard normal, NHWC) and ``labels`` (uniform over the 10 classes)."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for name, shape in Trace(model).parameters.items():
        if name.endswith(("/filter", "/kernel")):
            fan_in = int(np.prod(shape[:-1]))
            fan_out = int(np.prod(shape[:-2])) * shape[-1]
            limit = math.sqrt(6.0 / (fan_in + fan_out))
            value = rng.uniform(-limit, limit, shape)
        elif name.endswith("/scale"):
            value = rng.uniform(0.5, 1.5, shape)
        elif name.endswith(MOVING):
            value = np.full(shape, 0.0 if name.endswith("/moving_mean") else 1.0)
        else:
            value = rng.uniform(-0.1, 0.1, shape)
        arrays[f"w:{name}"] = value.astype(np.float32)
    arrays["images"] = rng.standard_normal((model.batch, *model.image_shape)).astype(np.float32)
    arrays["labels"] = rng.integers(0, 10, model.batch).astype(np.int32)
    return arrays


def split_arrays(arrays: dict[str, np.ndarray]
                 ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """(weights by parameter name, images, labels) of :func:`initial_arrays`' dict."""
    weights = {k[2:]: v for k, v in arrays.items() if k.startswith("w:")}
    return weights, arrays["images"], arrays["labels"]
