"""Thin layer helpers: they only build ops, so a model reads like a model.

Each layer object creates its Variables once (with initializers registered in the graph)
and can be applied several times: the digits example builds a training graph and an
inference graph from the same layers, so both use the same weights. Batch norm in training
mode also adds ``Assign`` ops updating its moving statistics to the graph's
``"update_ops"`` collection (run them with the train step).
"""

from __future__ import annotations

import numpy as np

from minigraph import ops
from minigraph.framework import dtypes
from minigraph.framework.dtypes import DType
from minigraph.framework.graph import Output
from minigraph.framework.scope import Scope
from minigraph.framework.tensor_shape import dims_text
from minigraph.ops.array_ops import Const
from minigraph.ops.batch_norm import FusedBatchNormV3
from minigraph.ops.math_ops import Cast, Mean, Reshape
from minigraph.ops.state_ops import Assign, constant_fill, glorot_uniform
from minigraph.train.variables import variable

UPDATE_OPS = "update_ops"


def _glorot(fan_in: int, fan_out: int, seed: int):
    return lambda scope, shape, dtype: glorot_uniform(scope, shape, fan_in=fan_in,
                                                      fan_out=fan_out, dtype=dtype, seed=seed)


def _filled(value: float):
    return lambda scope, shape, dtype: constant_fill(scope, shape, value, dtype)


class Layer:
    """What every layer has: a ``name`` and the ``variables`` it trains; prints them."""

    name: str
    variables: list[Output]

    def __repr__(self) -> str:
        weights = ", ".join(f"{v.op.name.rsplit('/', 1)[-1]}{dims_text(v.shape)}"
                            for v in self.variables)
        count = sum(v.shape.num_elements() or 0 for v in self.variables)
        return f"<{type(self).__name__} '{self.name}': {weights} ({count:,} parameters)>"


class Conv2D(Layer):
    """3-D filter variable (HWIO, Glorot-uniform) + optional bias; SAME padding by default."""

    def __init__(self, scope: Scope, name: str, in_channels: int, out_channels: int,
                 kernel_size: int, *, data_format: str = "NHWC", padding: str = "SAME",
                 stride: int = 1, use_bias: bool = False, seed: int = 0) -> None:
        self.scope, self.name, self.data_format, self.padding = scope, name, data_format, padding
        self.strides = [1, 1, stride, stride] if data_format == "NCHW" else [1, stride, stride, 1]
        fan = kernel_size * kernel_size
        self.filter = variable(scope, f"{name}/filter",
                               [kernel_size, kernel_size, in_channels, out_channels],
                               _glorot(fan * in_channels, fan * out_channels, seed))
        self.bias = variable(scope, f"{name}/bias", [out_channels], _filled(0.0)) \
            if use_bias else None
        self.variables = [self.filter] + ([self.bias] if use_bias else [])

    def __call__(self, scope: Scope, x: Output) -> Output:
        y = ops.Conv2D(scope.WithOpName(self.name), x, self.filter, strides=self.strides,
                          padding=self.padding, data_format=self.data_format)
        if self.bias is not None:
            y = ops.BiasAdd(scope, y, self.bias, data_format=self.data_format)
        return y


class BatchNorm(Layer):
    """FusedBatchNormV3 with scale/offset and moving mean/variance variables.

    Training: batch statistics, and ``exponential_avg_factor = 1 - momentum`` blends them
    into the moving statistics (the Assigns go to ``"update_ops"``). Inference:
    ``is_training=False`` with the moving statistics. ``compute_dtype`` bfloat16 runs the op
    on bfloat16 activations (float32 statistics and parameters: mixed precision).
    """

    def __init__(self, scope: Scope, name: str, channels: int, *, data_format: str = "NHWC",
                 momentum: float = 0.9, epsilon: float = 1e-3) -> None:
        self.scope, self.name, self.data_format = scope, name, data_format
        self.momentum, self.epsilon = momentum, epsilon
        self.scale = variable(scope, f"{name}/scale", [channels], _filled(1.0))
        self.offset = variable(scope, f"{name}/offset", [channels], _filled(0.0))
        self.moving_mean = variable(scope, f"{name}/moving_mean", [channels], _filled(0.0))
        self.moving_variance = variable(scope, f"{name}/moving_variance", [channels],
                                        _filled(1.0))
        self.variables = [self.scale, self.offset]

    def __call__(self, scope: Scope, x: Output, *, training: bool,
                 compute_dtype: DType = dtypes.float32) -> Output:
        source_dtype = x.dtype
        if compute_dtype is not source_dtype:
            x = Cast(scope, x, DstT=compute_dtype)
        bn = FusedBatchNormV3(scope.WithOpName(self.name), x, self.scale, self.offset,
                              self.moving_mean, self.moving_variance, epsilon=self.epsilon,
                              exponential_avg_factor=1.0 - self.momentum if training else 1.0,
                              data_format=self.data_format, is_training=training)
        if training:
            graph = scope.graph()
            graph.add_to_collection(UPDATE_OPS, Assign(scope, self.moving_mean,
                                                       bn.batch_mean).op)
            graph.add_to_collection(UPDATE_OPS, Assign(scope, self.moving_variance,
                                                       bn.batch_variance).op)
        y = bn.y
        return Cast(scope, y, DstT=source_dtype) if y.dtype is not source_dtype else y


class Dense(Layer):
    """y = x W + b with Glorot-uniform W."""

    def __init__(self, scope: Scope, name: str, in_features: int, out_features: int, *,
                 seed: int = 0) -> None:
        self.name = name
        self.kernel = variable(scope, f"{name}/kernel", [in_features, out_features],
                               _glorot(in_features, out_features, seed))
        self.bias = variable(scope, f"{name}/bias", [out_features], _filled(0.0))
        self.variables = [self.kernel, self.bias]

    def __call__(self, scope: Scope, x: Output) -> Output:
        return ops.BiasAdd(scope.WithOpName(self.name),
                              ops.MatMul(scope, x, self.kernel), self.bias)


def relu(scope: Scope, x: Output) -> Output:
    return ops.Relu(scope, x)


def max_pool(scope: Scope, x: Output, size: int, *, data_format: str = "NHWC") -> Output:
    window = [1, 1, size, size] if data_format == "NCHW" else [1, size, size, 1]
    return ops.MaxPool(scope, x, ksize=window, strides=window, padding="VALID",
                          data_format=data_format)


def flatten(scope: Scope, x: Output) -> Output:
    """[N, ...] -> [N, prod(...)] (the trailing dims must be statically known)."""
    features = int(np.prod(x.shape.dims[1:]))
    return Reshape(scope, x, Const(scope, [-1, features]))


def sparse_softmax_cross_entropy(scope: Scope, logits: Output, labels: Output) -> Output:
    """Mean over the batch of -log softmax(logits)[label]."""
    loss = ops.SparseSoftmaxCrossEntropyWithLogits(scope, logits, labels).loss
    return Mean(scope, loss, Const(scope, [0]))


def accuracy(scope: Scope, logits: Output, labels: Output) -> Output:
    """Fraction of rows whose arg-max logit equals the label."""
    predicted = ops.ArgMax(scope, logits, Const(scope, 1), output_type=labels.dtype)
    hits = Cast(scope, ops.Equal(scope, predicted, labels), DstT=dtypes.float32)
    return Mean(scope, hits, Const(scope, [0]))
