"""numpy CPU kernels of the dense-layer, loss and metric ops (``ops.nn_ops``): BiasAdd,
MatMul, Softmax, LogSoftmax, the softmax cross-entropies (dense and sparse labels), L2Loss,
ArgMax and Equal. MatMul's BLAS threads are limited like the batched matmuls'
(``linalg_kernels.blas_matmul``); the native backend runs float32 MatMul on minigraph's own
GEMM (``backends.gemm``: no BLAS thread pool, a constant weight matrix packed once).

float16/bfloat16 are computed in float32 and rounded once to the storage type; float64 (the
gradient checker's evaluation) stays float64; integer ops stay in their own type.
"""

from __future__ import annotations

import numpy as np

from minigraph.backends.activation_kernels import Epilogue
from minigraph.backends.compute import compute_dtype
from minigraph.backends.gemm import c_gemm, packed_b
from minigraph.backends.linalg_kernels import blas_matmul
from minigraph.backends.math_kernels import broadcast_replay, c_broadcast, c_reduce
from minigraph.backends.native import (
    as_f32,
    check_code,
    check_same_shape,
    fbuf,
    ffi,
    lib,
    num_threads,
    output_array,
)
from minigraph.backends.reduction_kernels import arg_extreme
from minigraph.backends.registry import register_kernel, set_replay
from minigraph.framework import dtypes
from minigraph.ops.nn_ops import bias_channel_axis

F32 = np.float32


def c_softmax_xent(features: np.ndarray, *, dense: np.ndarray | None = None,
                   sparse: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(loss [rows], backprop [rows, classes]) of ``mg_softmax_xent`` for float32 features
    [rows, classes] and either dense float32 labels of that shape or integer labels [rows],
    each in [0, classes) (checked: C reads features[label])."""
    x = as_f32(features)
    if x.ndim != 2:
        raise ValueError(f"native softmax cross entropy: features must be 2-D, got {x.shape}")
    rows, classes = x.shape
    loss, backprop = np.empty(rows, F32), np.empty(x.shape, F32)
    if x.size == 0:  # no class: nothing to normalize (TF's zeros)
        return np.zeros(rows, F32), backprop
    if dense is not None:
        labels = as_f32(dense)
        check_same_shape("softmax cross entropy", x, labels=labels)
        dense_buf, sparse_buf = fbuf(labels), ffi.NULL
    else:
        index = np.ascontiguousarray(sparse, np.int64)
        if index.shape != (rows,) or ((index < 0) | (index >= classes)).any():
            raise ValueError(f"native softmax cross entropy: labels must be {rows} indices "
                             f"in [0, {classes})")
        dense_buf, sparse_buf = ffi.NULL, ffi.from_buffer("int64_t[]", index)
    check_code(lib.mg_softmax_xent(rows, classes, fbuf(x), dense_buf, sparse_buf, fbuf(loss),
                                   fbuf(backprop), num_threads()), "softmax cross entropy")
    return loss, backprop


def _in(x: np.ndarray) -> np.ndarray:
    return x.astype(compute_dtype(x.dtype), copy=False)


@register_kernel("BiasAdd")
def bias_add(op, inputs, ctx):
    value, bias = inputs
    axis = bias_channel_axis(op.attrs["data_format"], value.ndim)
    shape = [1] * value.ndim
    shape[axis] = -1
    return [(_in(value) + _in(bias).reshape(shape)).astype(value.dtype, copy=False)]


@register_kernel("BiasAdd", backend="native", dtypes=(dtypes.float32,), inplace=(0,))
def bias_add_native(op, inputs, ctx, out=None):
    """``value + bias`` along the channel axis in C (``c_broadcast``'s add: one rounding, the
    numpy kernel's bits); inputs C does not take run the numpy kernel."""
    value, bias = inputs
    axis = bias_channel_axis(op.attrs["data_format"], value.ndim)
    if axis != value.ndim - 1 and bias.ndim == 1:
        bias = bias.reshape((-1,) + (1,) * (value.ndim - 1 - axis))
    z = c_broadcast("add", value, bias, out=out)
    return bias_add(op, inputs, ctx) if z is None else [z]


def _bias_add_replay(op, values: list, outputs: list, ctx):
    """``bias_add_native`` on fixed arrays (``registry.ReplayMaker``)."""
    value, bias = values
    axis = bias_channel_axis(op.attrs["data_format"], value.ndim)
    if not bias.flags.c_contiguous:  # (a reshape would copy it once, not at each call)
        return None
    if axis != value.ndim - 1 and bias.ndim == 1:
        bias = bias.reshape((-1,) + (1,) * (value.ndim - 1 - axis))
    return broadcast_replay("add", value, bias, outputs[0])


set_replay(bias_add_native, _bias_add_replay)


@register_kernel("BiasAddGrad")
def bias_add_grad(op, inputs, ctx):
    """Sum over every axis but the channel one."""
    dy = inputs[0]
    axis = bias_channel_axis(op.attrs["data_format"], dy.ndim)
    axes = tuple(a for a in range(dy.ndim) if a != axis)
    return [_in(dy).sum(axis=axes).astype(dy.dtype, copy=False)]


@register_kernel("BiasAddGrad", backend="native", dtypes=(dtypes.float32,))
def bias_add_grad_native(op, inputs, ctx):
    """``c_reduce`` over every axis but the channel one: NHWC's (and 2-D's) leading axes
    are one run, summed row after row in numpy's order (the numpy kernel's bits); NCHW's
    sum each image's plane pairwise, then the images in order (c_reduce's bound)."""
    dy = inputs[0]
    axis = bias_channel_axis(op.attrs["data_format"], dy.ndim)
    if dy.size == 0:
        return bias_add_grad(op, inputs, ctx)
    return [c_reduce(dy, tuple(a for a in range(dy.ndim) if a != axis), mean=False)]


@register_kernel("MatMul")
def matmul(op, inputs, ctx):
    a, b = inputs
    left = a.T if op.attrs["transpose_a"] else a
    right = b.T if op.attrs["transpose_b"] else b
    return [blas_matmul(_in(left), _in(right)).astype(a.dtype, copy=False)]


@register_kernel("MatMul", backend="native", dtypes=(dtypes.float32,), out=True)
def matmul_native(op, inputs, ctx, out=None):
    """``op(a) @ op(b)`` on the native GEMM (b's packing cached when it is a constant)."""
    return matmul_native_epilogue(op, inputs, ctx, None, out)


def matmul_native_epilogue(op, inputs, ctx, epilogue: Epilogue | None, out=None) -> list:
    """matmul_native, then ``epilogue`` (the fused successors, ``backends.fused_kernels``) where it
    fits the result, as ``mg_channel_epilogue`` applies it; else the plain product (the
    caller runs the successors' own kernels); in ``out`` where it fits."""
    a, b = inputs
    packing = packed_b(b, op.attrs["transpose_b"])
    m = a.shape[1] if op.attrs["transpose_a"] else a.shape[0]
    fits = epilogue is not None and epilogue.fits((m, packing.n))
    return [c_gemm(a, packing, op.attrs["transpose_a"], epilogue if fits else None,
                   out=output_array(out, (m, packing.n), a, b))]


def _log_softmax_parts(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(logits - max, log(sum(exp(logits - max)))) along the last axis, keepdims."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    with np.errstate(divide="ignore"):
        return shifted, np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


@register_kernel("Softmax")
def softmax(op, inputs, ctx):
    logits = inputs[0]
    if logits.size == 0:
        return [np.zeros(logits.shape, logits.dtype)]
    with np.errstate(invalid="ignore", over="ignore"):
        shifted = _in(logits) - _in(logits).max(axis=-1, keepdims=True)
        e = np.exp(shifted)
        return [(e / e.sum(axis=-1, keepdims=True)).astype(logits.dtype, copy=False)]


@register_kernel("LogSoftmax")
def log_softmax(op, inputs, ctx):
    """(logits - max) - log(sum(exp(logits - max))) along the last axis."""
    logits = inputs[0]
    if logits.size == 0:
        return [np.zeros(logits.shape, logits.dtype)]
    with np.errstate(invalid="ignore", over="ignore"):
        shifted, lse = _log_softmax_parts(_in(logits))
        return [(shifted - lse).astype(logits.dtype, copy=False)]


@register_kernel("SoftmaxCrossEntropyWithLogits")
def softmax_cross_entropy_with_logits(op, inputs, ctx):
    """TF's xent: with s = features - max, loss = sum(labels * (log(sum(exp(s))) - s)),
    backprop = exp(s) / sum(exp(s)) - labels; features and labels broadcast to one matrix."""
    features, labels = inputs
    shape = np.broadcast_shapes(features.shape, labels.shape)
    f = np.broadcast_to(_in(features), shape)
    y = np.broadcast_to(_in(labels), shape)
    if f.size == 0:
        return [np.zeros(shape[0], features.dtype), np.zeros(shape, features.dtype)]
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        shifted, lse = _log_softmax_parts(f)
        loss = (y * (lse - shifted)).sum(axis=-1)
        backprop = np.exp(shifted) / np.exp(shifted).sum(axis=-1, keepdims=True) - y
    return [loss.astype(features.dtype, copy=False),
            backprop.astype(features.dtype, copy=False)]


@register_kernel("SoftmaxCrossEntropyWithLogits", "SparseSoftmaxCrossEntropyWithLogits",
                 backend="native", dtypes=(dtypes.float32,))
def softmax_cross_entropy_native(op, inputs, ctx):
    """Both cross entropies in C (``c_softmax_xent``: kernels_c/activations.h's formulas and
    bounds); dense labels that broadcast against the features are expanded first."""
    features, labels = inputs
    if op.type == "SoftmaxCrossEntropyWithLogits":
        shape = np.broadcast_shapes(features.shape, labels.shape)
        features, labels = np.broadcast_to(features, shape), np.broadcast_to(labels, shape)
        return list(c_softmax_xent(features, dense=labels))
    return list(c_softmax_xent(features, sparse=labels))


@register_kernel("L2Loss")
def l2_loss(op, inputs, ctx):
    """sum(t ** 2) / 2."""
    t = _in(inputs[0])
    return [np.asarray((t * t).sum() / 2, inputs[0].dtype)]


@register_kernel("SparseSoftmaxCrossEntropyWithLogits")
def sparse_softmax_cross_entropy_with_logits(op, inputs, ctx):
    """loss = logsumexp(features) - features[label]; backprop = softmax(features) - onehot."""
    features, labels = inputs
    batch = features.shape[0]
    if batch == 0:
        return [np.zeros(0, features.dtype), np.zeros(features.shape, features.dtype)]
    with np.errstate(invalid="ignore", over="ignore"):
        shifted, lse = _log_softmax_parts(_in(features))
        rows = np.arange(batch)
        loss = lse[:, 0] - shifted[rows, labels]
        backprop = np.exp(shifted - lse)
        backprop[rows, labels] -= 1
    return [loss.astype(features.dtype, copy=False),
            backprop.astype(features.dtype, copy=False)]


@register_kernel("ArgMax")
def arg_max(op, inputs, ctx):
    """Index of the first largest value along 'dimension', NaN skipped as in TF."""
    x, dimension = inputs
    axis = int(dimension) % x.ndim  # the shape function checked rank, range and emptiness
    return [arg_extreme(x, axis, True, op.attrs["output_type"].np_dtype)]


@register_kernel("Equal")
def equal(op, inputs, ctx):
    x, y = inputs
    try:
        shape = np.broadcast_shapes(x.shape, y.shape)
    except ValueError:  # only with incompatible_shape_error=False (the shape function)
        return [np.array(False)]
    return [np.asarray(np.equal(x, y), np.bool_).reshape(shape)]


@register_kernel("LRN")
def lrn(op, inputs, ctx):
    """x / (bias + alpha * sum of x^2 over channels [c - r, c + r])^beta, in float64 (each
    window summed directly, offset by offset: no running-sum differences to cancel)."""
    x = inputs[0]
    a = op.attrs
    wide = x.astype(np.float64)
    channels, r = x.shape[-1], min(a["depth_radius"], x.shape[-1])
    squares = np.pad(wide * wide, [(0, 0)] * (x.ndim - 1) + [(r, r)])
    window = np.zeros_like(wide)
    for offset in range(2 * r + 1):
        window += squares[..., offset:offset + channels]
    with np.errstate(all="ignore"):
        return [(wide / (a["bias"] + a["alpha"] * window) ** a["beta"]).astype(x.dtype)]
