"""A CIFAR-style ResNet-8 training step built with ``minigraph.ops`` / ``minigraph.nn``.

The model of issue 23's benchmark (He et al. 2016, the CIFAR variant): on 32x32x3 images,
conv3x3(16) - BN - ReLU, then three basic blocks of 16, 32 and 64 channels (two conv3x3-BN
pairs each; the 32- and 64-channel blocks start with stride 2 and take a 1x1 stride-2
conv + BN projection shortcut), global average pool, Dense(10). Batch norm runs in training
mode (its moving-statistics Assigns go with the train op), the loss is the batch mean of the
sparse softmax cross entropy and SGD with momentum 0.9 updates every trainable variable.

Used by the training benchmark (``benchmarks/train_peers.py``) and by the tests that check
every kernel of a training step runs native.
"""

from __future__ import annotations

from dataclasses import dataclass

import minigraph as mg
from minigraph import nn, ops
from minigraph.framework.graph import Operation, Output

BLOCK_CHANNELS = (16, 32, 64)
CLASSES = 10
IMAGE_SHAPE = (32, 32, 3)


@dataclass
class ResNet8Training:
    """What ``build_resnet8_training`` returns: feed ``images`` (NHWC float32 [batch, 32, 32,
    3]) and ``labels`` (int32 [batch]), fetch ``loss``, run ``train_op`` as targets."""

    images: Output
    labels: Output
    logits: Output
    loss: Output
    train_op: list[Operation]
    variables: list[Output]


class _ConvBN:
    """Conv2D (no bias, SAME) followed by batch norm in training mode."""

    def __init__(self, scope: mg.Scope, name: str, cin: int, cout: int, size: int,
                 stride: int, data_format: str, seed: int) -> None:
        self.conv = nn.Conv2D(scope, f"{name}/conv", cin, cout, size, stride=stride,
                              data_format=data_format, seed=seed)
        self.bn = nn.BatchNorm(scope, f"{name}/bn", cout, data_format=data_format)
        self.variables = self.conv.variables + self.bn.variables

    def __call__(self, scope: mg.Scope, x: Output) -> Output:
        return self.bn(scope, self.conv(scope, x), training=True)


class _BasicBlock:
    """relu(bn(conv(relu(bn(conv(x))))) + shortcut(x)); the shortcut is a 1x1 conv + BN
    projection where the block changes the channel count or the stride, else identity."""

    def __init__(self, scope: mg.Scope, name: str, cin: int, cout: int, stride: int,
                 data_format: str, seed: int) -> None:
        self.first = _ConvBN(scope, f"{name}/a", cin, cout, 3, stride, data_format, seed)
        self.second = _ConvBN(scope, f"{name}/b", cout, cout, 3, 1, data_format, seed + 1)
        self.projection = (_ConvBN(scope, f"{name}/proj", cin, cout, 1, stride, data_format,
                                   seed + 2) if stride != 1 or cin != cout else None)
        layers = [self.first, self.second] + ([self.projection] if self.projection else [])
        self.variables = [v for layer in layers for v in layer.variables]

    def __call__(self, scope: mg.Scope, x: Output) -> Output:
        y = self.second(scope, nn.relu(scope, self.first(scope, x)))
        shortcut = self.projection(scope, x) if self.projection else x
        return nn.relu(scope, ops.AddV2(scope, y, shortcut))


def build_resnet8_training(scope: mg.Scope, batch: int | None, data_format: str = "NHWC",
                           seed: int = 0, learning_rate: float = 0.01,
                           momentum: float = 0.9) -> ResNet8Training:
    """Adds ResNet-8's training step to ``scope``'s graph (under ``resnet8/``).

    The placeholders are NHWC whatever ``data_format`` is: with "NCHW" the model transposes
    the images once and runs every layer NCHW. Weights are Glorot-uniform from ``seed``
    (deterministic), so two graphs built with one seed start from the same weights.
    """
    if data_format not in ("NHWC", "NCHW"):
        raise mg.errors.InvalidArgumentError(
            f"build_resnet8_training: data_format must be 'NHWC' or 'NCHW', not {data_format!r}")
    root = scope.NewSubScope("resnet8")
    images = ops.Placeholder(root.WithOpName("images"), mg.float32,
                             shape=[batch, *IMAGE_SHAPE])
    labels = ops.Placeholder(root.WithOpName("labels"), mg.int32, shape=[batch])
    model = root.NewSubScope("model")
    stem = _ConvBN(model, "stem", IMAGE_SHAPE[2], BLOCK_CHANNELS[0], 3, 1, data_format, seed)
    blocks, cin = [], BLOCK_CHANNELS[0]
    for index, cout in enumerate(BLOCK_CHANNELS):
        stride = 1 if index == 0 else 2
        blocks.append(_BasicBlock(model, f"block{index + 1}", cin, cout, stride, data_format,
                                  seed + 10 * (index + 1)))
        cin = cout
    dense = nn.Dense(model, "dense", BLOCK_CHANNELS[-1], CLASSES, seed=seed + 100)
    variables = stem.variables + [v for b in blocks for v in b.variables] + dense.variables

    train = root.NewSubScope("train")
    x = images if data_format == "NHWC" else ops.Transpose(train, images, [0, 3, 1, 2])
    x = nn.relu(train, stem(train, x))
    for block in blocks:
        x = block(train, x)
    spatial = [1, 2] if data_format == "NHWC" else [2, 3]
    pooled = ops.Mean(train, x, ops.Const(train, spatial))  # global average pool
    logits = ops.Identity(train.WithOpName("logits"), dense(train, pooled))
    loss = ops.Identity(train.WithOpName("loss"),
                        nn.sparse_softmax_cross_entropy(train, logits, labels))
    train_op = mg.train.Momentum(learning_rate, momentum).minimize(train, loss, variables)
    train_op += root.graph().get_collection(nn.UPDATE_OPS)
    return ResNet8Training(images, labels, logits, loss, train_op, variables)
