"""numpy CPU kernels of the non-convolution layer ops (``ops.nn_ops``): BiasAdd, Relu,
MatMul, Softmax, SparseSoftmaxCrossEntropyWithLogits, ArgMax and Equal.

float16/bfloat16 are computed in float32 and rounded once to the storage type; float64 (the
gradient checker's evaluation) stays float64; integer ops stay in their own type. With the
native backend, float32 Relu and ReluGrad run in C (kernels_c/pool.c).
"""

from __future__ import annotations

import numpy as np

from minigraph.backends.conv_kernels import compute_dtype, masked
from minigraph.backends.registry import register_kernel
from minigraph.framework.errors import InvalidArgumentError
from minigraph.ops.nn_ops import bias_channel_axis, shape_text


def _error(op, message: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{op.type} '{op.name}': {message}")


def _in(x: np.ndarray) -> np.ndarray:
    return x.astype(compute_dtype(x.dtype), copy=False)


def _bias_axis(op, value: np.ndarray, name: str) -> int:
    fmt = op.attrs["data_format"]
    need = 3 if fmt == "NCHW" else 2
    if value.ndim < need:
        raise _error(op, f"input '{name}' must be at least {need}-dimensional for data_format "
                         f"{fmt}, got shape {shape_text(value.shape)}")
    return bias_channel_axis(fmt, value.ndim)


@register_kernel("BiasAdd")
def bias_add(op, inputs, math):
    value, bias = inputs
    axis = _bias_axis(op, value, "value")
    if bias.ndim != 1:
        raise _error(op, f"input 'bias' must be 1-dimensional, got shape "
                         f"{shape_text(bias.shape)}")
    if bias.shape[0] != value.shape[axis]:
        raise _error(op, f"input 'bias' must have as many elements as the channel dimension "
                         f"{axis} of 'value' (data_format {op.attrs['data_format']}): expected "
                         f"{value.shape[axis]} (value shape {shape_text(value.shape)}), got "
                         f"{bias.shape[0]}")
    shape = [1] * value.ndim
    shape[axis] = -1
    return [(_in(value) + _in(bias).reshape(shape)).astype(value.dtype, copy=False)]


@register_kernel("BiasAddGrad")
def bias_add_grad(op, inputs, math):
    """Sum over every axis but the channel one."""
    dy = inputs[0]
    axis = _bias_axis(op, dy, "out_backprop")
    axes = tuple(a for a in range(dy.ndim) if a != axis)
    return [_in(dy).sum(axis=axes).astype(dy.dtype, copy=False)]


@register_kernel("Relu")
def relu(op, inputs, math):
    x = inputs[0]
    if x.dtype == np.float32 and getattr(math, "relu", None) is not None:
        return [math.relu(x)]
    return [np.maximum(_in(x), 0).astype(x.dtype, copy=False)]


@register_kernel("ReluGrad")
def relu_grad(op, inputs, math):
    """gradients where features > 0, else 0."""
    g, features = inputs
    if g.shape != features.shape:
        raise _error(op, f"inputs 'gradients' and 'features' must have the same shape, got "
                         f"{shape_text(g.shape)} and {shape_text(features.shape)}")
    if (g.dtype == np.float32 and features.dtype == np.float32
            and getattr(math, "relu_grad", None) is not None):
        return [math.relu_grad(g, features)]
    return [masked(g, _in(features) > 0)]


@register_kernel("MatMul")
def matmul(op, inputs, math):
    a, b = inputs
    for name, value in (("a", a), ("b", b)):
        if value.ndim != 2:
            raise _error(op, f"input '{name}' must be a matrix (2-dimensional), got shape "
                             f"{shape_text(value.shape)}")
    left = a.T if op.attrs["transpose_a"] else a
    right = b.T if op.attrs["transpose_b"] else b
    if left.shape[1] != right.shape[0]:
        raise _error(op, f"matrix size-incompatible: In[0]: {shape_text(a.shape)}"
                         f"{' (transposed)' if op.attrs['transpose_a'] else ''}, In[1]: "
                         f"{shape_text(b.shape)}"
                         f"{' (transposed)' if op.attrs['transpose_b'] else ''}")
    return [np.matmul(_in(left), _in(right)).astype(a.dtype, copy=False)]


def _log_softmax_parts(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(logits - max, log(sum(exp(logits - max)))) along the last axis, keepdims."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    with np.errstate(divide="ignore"):
        return shifted, np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


@register_kernel("Softmax")
def softmax(op, inputs, math):
    logits = inputs[0]
    if logits.ndim < 1:
        raise _error(op, "input 'logits' must have at least one dimension, got a scalar")
    if logits.size == 0:
        return [np.zeros(logits.shape, logits.dtype)]
    with np.errstate(invalid="ignore", over="ignore"):
        shifted = _in(logits) - _in(logits).max(axis=-1, keepdims=True)
        e = np.exp(shifted)
        return [(e / e.sum(axis=-1, keepdims=True)).astype(logits.dtype, copy=False)]


@register_kernel("SparseSoftmaxCrossEntropyWithLogits")
def sparse_softmax_cross_entropy_with_logits(op, inputs, math):
    """loss = logsumexp(features) - features[label]; backprop = softmax(features) - onehot."""
    features, labels = inputs
    if features.ndim != 2:
        raise _error(op, f"input 'features' must be 2-dimensional [batch, classes], got shape "
                         f"{shape_text(features.shape)}")
    if labels.ndim != 1:
        raise _error(op, f"input 'labels' must be 1-dimensional [batch], got shape "
                         f"{shape_text(labels.shape)}")
    batch, classes = features.shape
    if labels.shape[0] != batch:
        raise _error(op, f"inputs 'features' and 'labels' must have the same first dimension, "
                         f"got features shape {shape_text(features.shape)} and labels shape "
                         f"{shape_text(labels.shape)}")
    if batch == 0:
        return [np.zeros(0, features.dtype), np.zeros(features.shape, features.dtype)]
    if classes == 0:
        raise _error(op, f"must have at least one class, but got features shape "
                         f"{shape_text(features.shape)}")
    bad = (labels < 0) | (labels >= classes)
    if bad.any():
        raise _error(op, f"received a label value of {int(labels[bad][0])} which is outside "
                         f"the valid range of [0, {classes}). Label values: "
                         f"{' '.join(str(v) for v in labels.tolist())}")
    with np.errstate(invalid="ignore", over="ignore"):
        shifted, lse = _log_softmax_parts(_in(features))
        rows = np.arange(batch)
        loss = lse[:, 0] - shifted[rows, labels]
        backprop = np.exp(shifted - lse)
        backprop[rows, labels] -= 1
    return [loss.astype(features.dtype, copy=False),
            backprop.astype(features.dtype, copy=False)]


@register_kernel("ArgMax")
def arg_max(op, inputs, math):
    """Index of the first largest value along 'dimension'."""
    x, dimension = inputs
    if dimension.ndim != 0:
        raise _error(op, f"input 'dimension' must be a scalar, got shape "
                         f"{shape_text(dimension.shape)}")
    if x.ndim == 0:
        raise _error(op, "input 'input' must have at least one dimension, got a scalar")
    axis = int(dimension)
    if not -x.ndim <= axis < x.ndim:
        raise _error(op, f"input 'dimension' is {axis}, out of range for an input of rank "
                         f"{x.ndim}: expected [{-x.ndim}, {x.ndim})")
    axis %= x.ndim
    if x.shape[axis] == 0:
        raise _error(op, f"reduction axis {axis} is empty in shape {shape_text(x.shape)}")
    return [np.argmax(_in(x), axis=axis).astype(op.attrs["output_type"].np_dtype)]


@register_kernel("Equal")
def equal(op, inputs, math):
    x, y = inputs
    try:
        shape = np.broadcast_shapes(x.shape, y.shape)
    except ValueError:
        if not op.attrs["incompatible_shape_error"]:
            return [np.array(False)]
        raise _error(op, f"incompatible shapes {shape_text(x.shape)} and "
                         f"{shape_text(y.shape)}") from None
    return [np.asarray(np.equal(x, y), np.bool_).reshape(shape)]
