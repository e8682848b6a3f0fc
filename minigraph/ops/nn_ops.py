"""Dense-layer, loss and metric ops: ``BiasAdd`` (+ grad), ``MatMul``, ``Softmax``, the sparse
softmax cross-entropy loss, and ``ArgMax``/``Equal`` for accuracy. Names, inputs, outputs,
attrs and defaults are TensorFlow's (``core/ops/nn_ops.cc``, ``math_ops.cc``). The
gradients are at the bottom.
"""

from __future__ import annotations

from minigraph.framework import dtypes
from minigraph.framework.errors import InvalidArgumentError
from minigraph.framework.gradient_registry import NotDifferentiable, RegisterGradient
from minigraph.framework.op_def import (
    ArgDef,
    AttrDef,
    InferenceContext,
    OpDef,
    make_wrapper,
    register_op,
    required,
)
from minigraph.framework.tensor_shape import ShapeMismatch, TensorShape, dims_text
from minigraph.ops import math_ops as m
from minigraph.ops.array_ops import Const
from minigraph.ops.math_ops import (
    FLOATS,
    INDEX,
    NUMBERS,
    binary_shape,
    broadcast_shapes,
    cotangent_or_zeros,
)
from minigraph.ops.window import FORMATS, mismatch

# The wrappers minigraph.ops exports.
__all__ = [
    "ArgMax", "BiasAdd", "BiasAddGrad", "Equal", "L2Loss", "LRN", "LogSoftmax", "MatMul",
    "Softmax", "SoftmaxCrossEntropyWithLogits", "SparseSoftmaxCrossEntropyWithLogits",
]



# ----------------------------------------------------------------------------- bias


def bias_channel_axis(data_format: str, rank: int) -> int:
    """NHWC: the last axis; NCHW: axis 1 (for any rank >= 3, as TF)."""
    return rank - 1 if data_format == "NHWC" else 1


def _bias_min_rank(data_format: str) -> int:
    return 3 if data_format == "NCHW" else 2


def bias_add_shape(ctx: InferenceContext) -> list[TensorShape]:
    fmt = ctx.attrs["data_format"]
    value = ctx.input_shape("value")
    bias = ctx.with_rank("bias", 1)
    need = _bias_min_rank(fmt)
    if value.rank is None:
        return [value]
    if value.rank < need:
        raise ctx.error(f"input 'value' must be at least rank {need} for data_format {fmt}, "
                        f"but has shape {value} (rank {value.rank})")
    axis = bias_channel_axis(fmt, value.rank)
    channel = ctx.merge_dim(value[axis], bias[0],
                            f"input 'bias' must have one element per channel of 'value' "
                            f"(dimension {axis} for data_format {fmt})")
    return [value.replace_dim(axis, channel)]


def bias_add_grad_shape(ctx: InferenceContext) -> list[TensorShape]:
    fmt = ctx.attrs["data_format"]
    dy = ctx.input_shape("out_backprop")
    need = _bias_min_rank(fmt)
    if dy.rank is None:
        return [TensorShape([None])]
    if dy.rank < need:
        raise ctx.error(f"input 'out_backprop' must be at least rank {need} for data_format "
                        f"{fmt}, but has shape {dy} (rank {dy.rank})")
    return [TensorShape([dy[bias_channel_axis(fmt, dy.rank)]])]


BiasAdd = make_wrapper(register_op(OpDef(
    name="BiasAdd",
    inputs=[ArgDef("value", type_attr="T"), ArgDef("bias", type_attr="T")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=[required("T", "type", allowed=NUMBERS),
           AttrDef("data_format", "string", default="NHWC", allowed=FORMATS)],
    shape_fn=bias_add_shape,
)))
BiasAddGrad = make_wrapper(register_op(OpDef(
    name="BiasAddGrad",
    inputs=[ArgDef("out_backprop", type_attr="T")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=[required("T", "type", allowed=NUMBERS),
           AttrDef("data_format", "string", default="NHWC", allowed=FORMATS)],
    shape_fn=bias_add_grad_shape,
)))

# ----------------------------------------------------------------------------- dense


def matmul_shape(ctx: InferenceContext) -> list[TensorShape]:
    """[m, k] x [k, n] -> [m, n], each operand transposed first if its attr says so."""
    a, b = ctx.with_rank("a", 2), ctx.with_rank("b", 2)
    ta, tb = ctx.attrs["transpose_a"], ctx.attrs["transpose_b"]
    m, ka = (a[1], a[0]) if ta else (a[0], a[1])
    kb, n = (b[1], b[0]) if tb else (b[0], b[1])
    if mismatch(ka, kb):
        raise ctx.error(f"Matrix size-incompatible: In[0]: {dims_text(a)}"
                        f"{' (transposed)' if ta else ''}, In[1]: {dims_text(b)}"
                        f"{' (transposed)' if tb else ''}: the inner dimensions must be equal, "
                        f"but 'a' gives {ka} and 'b' gives {kb}")
    return [TensorShape([m, n])]


MatMul = make_wrapper(register_op(OpDef(
    name="MatMul",
    inputs=[ArgDef("a", type_attr="T"), ArgDef("b", type_attr="T")],
    outputs=[ArgDef("product", type_attr="T")],
    attrs=[AttrDef("transpose_a", "bool", default=False),
           AttrDef("transpose_b", "bool", default=False),
           required("T", "type", allowed=NUMBERS),
           AttrDef("grad_a", "bool", default=False),
           AttrDef("grad_b", "bool", default=False)],
    shape_fn=matmul_shape,
)))

# ----------------------------------------------------------------------------- softmax / loss


def _softmax_shape(ctx: InferenceContext) -> list[TensorShape]:
    logits = ctx.input_shape("logits")
    if logits.rank == 0:
        raise ctx.error("logits must have >= 1 dimension, got []: input 'logits' must have at "
                        "least one dimension, got a scalar")
    return [logits]


def xent_shape(ctx: InferenceContext) -> list[TensorShape]:
    """loss: [batch]; backprop: [batch, classes]: 'features' and 'labels' broadcast to one
    matrix (TF's kernel broadcasts them)."""
    features, labels = ctx.input_shape("features"), ctx.input_shape("labels")
    try:
        shape = broadcast_shapes(features, labels)
    except ShapeMismatch:
        raise ctx.error(f"logits and labels must be broadcastable: logits_size="
                        f"{dims_text(features)} labels_size={dims_text(labels)} (inputs "
                        f"'features' and 'labels')") from None
    if shape.rank is not None and shape.rank != 2:
        raise ctx.error(f"logits and labels must be either 2-dimensional, or broadcasted to be "
                        f"2-dimensional: inputs 'features' {features} and 'labels' {labels} "
                        f"give rank {shape.rank}")
    shape = shape.with_rank(2)
    return [TensorShape([shape[0]]), shape]


def sparse_xent_shape(ctx: InferenceContext) -> list[TensorShape]:
    """loss: [batch]; backprop: [batch, classes]."""
    features = ctx.with_rank("features", 2)
    labels = ctx.with_rank("labels", 1)
    batch = ctx.merge_dim(features[0], labels[0],
                          f"inputs 'features' {features} and 'labels' {labels} must have the "
                          f"same first (batch) dimension")
    classes = features[1]
    if batch and classes == 0:
        raise ctx.error(f"Must have at least one class, but got logits shape {features} "
                        f"(input 'features')")
    values = ctx.constant_value("labels") if classes is not None else None
    bad = [label for label in values or () if not 0 <= label < classes]
    if bad:  # TF's CPU kernel raises (its GPU kernel gives NaN)
        shown = " ".join(str(v) for v in values[:64]) + (" ..." if len(values) > 64 else "")
        raise ctx.error(f"Received a label value of {bad[0]} which is outside the valid "
                        f"range of [0, {classes}). Label values: {shown} (input 'labels')")
    return [TensorShape([batch]), TensorShape([batch, classes])]


def _softmax_op(name: str, output: str) -> OpDef:
    """A normalization over the last axis of ``logits`` (Softmax, LogSoftmax)."""
    return register_op(OpDef(
        name=name,
        inputs=[ArgDef("logits", type_attr="T")],
        outputs=[ArgDef(output, type_attr="T")],
        attrs=[required("T", "type", allowed=FLOATS)],
        shape_fn=_softmax_shape,
    ))


Softmax = make_wrapper(_softmax_op("Softmax", "softmax"))
LogSoftmax = make_wrapper(_softmax_op("LogSoftmax", "logsoftmax"))
SoftmaxCrossEntropyWithLogits = make_wrapper(register_op(OpDef(
    name="SoftmaxCrossEntropyWithLogits",
    inputs=[ArgDef("features", type_attr="T", doc="Logits, [batch, classes]."),
            ArgDef("labels", type_attr="T",
                   doc="Probabilities, broadcastable to the features' shape.")],
    outputs=[ArgDef("loss", type_attr="T"), ArgDef("backprop", type_attr="T")],
    attrs=[required("T", "type", allowed=FLOATS)],
    shape_fn=xent_shape,
)))
L2Loss = make_wrapper(register_op(OpDef(
    name="L2Loss",
    inputs=[ArgDef("t", type_attr="T")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=[required("T", "type", allowed=FLOATS)],
    shape_fn=lambda ctx: [TensorShape([])],
)))
SparseSoftmaxCrossEntropyWithLogits = make_wrapper(register_op(OpDef(
    name="SparseSoftmaxCrossEntropyWithLogits",
    inputs=[ArgDef("features", type_attr="T"), ArgDef("labels", type_attr="Tlabels")],
    outputs=[ArgDef("loss", type_attr="T"), ArgDef("backprop", type_attr="T")],
    attrs=[required("T", "type", allowed=FLOATS),
           AttrDef("Tlabels", "type", default=dtypes.int64, allowed=INDEX)],
    shape_fn=sparse_xent_shape,
)))

# ----------------------------------------------------------------------------- argmax / equal


def arg_max_shape(ctx: InferenceContext) -> list[TensorShape]:
    """The input shape without the reduced dimension."""
    x = ctx.input_shape("input")
    dim_shape = ctx.input_shape("dimension")
    if dim_shape.rank not in (None, 0):
        raise ctx.error(f"input 'dimension' must be a scalar, got shape {dim_shape}")
    axis = ctx.constant_value("dimension")
    if x.rank is None:
        return [TensorShape(None)]
    if x.rank == 0:
        raise ctx.error("input 'input' must have at least one dimension, got a scalar")
    if axis is None:
        return [TensorShape.unknown(x.rank - 1)]
    if not -x.rank <= axis < x.rank:
        raise ctx.error(f"input 'dimension' is {axis}, out of range for an input of rank "
                        f"{x.rank}: expected [{-x.rank}, {x.rank})")
    axis %= x.rank
    if x[axis] == 0:
        raise ctx.error(f"reduction axis {axis} is empty in shape {x}")
    return [TensorShape(d for i, d in enumerate(x.dims) if i != axis)]


def equal_shape(ctx: InferenceContext) -> list[TensorShape]:
    """Broadcasting like Add; with ``incompatible_shape_error=False`` shapes that do not
    broadcast give a scalar False instead of an error, as in TF."""
    if ctx.attrs["incompatible_shape_error"]:
        return binary_shape(ctx)
    try:
        return [broadcast_shapes(ctx.input_shapes[0], ctx.input_shapes[1])]
    except ShapeMismatch:
        return [TensorShape([])]


ArgMax = make_wrapper(register_op(OpDef(
    name="ArgMax",
    inputs=[ArgDef("input", type_attr="T"), ArgDef("dimension", type_attr="Tidx")],
    outputs=[ArgDef("output", type_attr="output_type")],
    attrs=[required("T", "type", allowed=NUMBERS + (dtypes.bool_,)),
           AttrDef("Tidx", "type", default=dtypes.int32, allowed=INDEX),
           AttrDef("output_type", "type", default=dtypes.int64, allowed=INDEX)],
    shape_fn=arg_max_shape,
)))
Equal = make_wrapper(register_op(OpDef(
    name="Equal",
    inputs=[ArgDef("x", type_attr="T"), ArgDef("y", type_attr="T")],
    outputs=[ArgDef("z", dtype=dtypes.bool_)],
    attrs=[required("T", "type"), AttrDef("incompatible_shape_error", "bool", default=True)],
    shape_fn=equal_shape,
)))



def _lrn_shape(ctx: InferenceContext) -> list[TensorShape]:
    x = ctx.input_shapes[0]
    if x.rank not in (None, 4):
        raise ctx.error(f"input must be 4-dimensional, got shape {x} (input 'input')")
    return [x]


# Local response normalization (AlexNet, GoogLeNet v1): over each channel window
# [c - r, c + r] of the last axis, sqr_sum = sum(x^2); out = x / (bias + alpha * sqr_sum)^beta
# (computed in float64, rounded once). No gradient yet (TF's LRNGrad is not implemented).
LRN = make_wrapper(register_op(OpDef(
    name="LRN",
    inputs=[ArgDef("input", type_attr="T", doc="4-D, channels last.")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=[AttrDef("depth_radius", "int", default=5,
                   check=lambda r: None if 0 <= r <= 2**31 - 1 else
                   f"must be in [0, 2**31 - 1], got {r}",
                   doc="Half-width r of the channel window."),
           AttrDef("bias", "float", default=1.0, doc="Added to the scaled sum."),
           AttrDef("alpha", "float", default=1.0, doc="Scale of the sum of squares."),
           AttrDef("beta", "float", default=0.5, doc="Exponent of the divisor."),
           AttrDef("T", "type", default=dtypes.float32,
                   allowed=(dtypes.float16, dtypes.bfloat16, dtypes.float32))],
    shape_fn=_lrn_shape,
)))


# ----------------------------------------------------------------------------- gradients
# Each function returns d(loss)/d(input) for every input, given d(loss)/d(output).

NotDifferentiable("ArgMax", "Equal")


@RegisterGradient("BiasAdd")
def _bias_add_grad(scope, op, grads):
    return [grads[0], BiasAddGrad(scope, grads[0], data_format=op.attrs["data_format"])]


@RegisterGradient("BiasAddGrad")
def _bias_add_grad_grad(scope, op, grads):
    """BiasAddGrad sums over every axis but the channel: its gradient broadcasts back."""
    dy = op.inputs[0]
    g = grads[0]
    if op.attrs["data_format"] == "NCHW":
        rank = dy.shape.rank
        if rank is None:
            raise InvalidArgumentError(
                f"gradient of BiasAddGrad '{op.name}' with data_format NCHW needs the rank of "
                f"input 'out_backprop', which is unknown")
        g = m.Reshape(scope, g, Const(scope, [-1] + [1] * (rank - 2)))
    return [m.BroadcastTo(scope, g, m.Shape(scope, dy))]


@RegisterGradient("MatMul")
def _matmul_grad(scope, op, grads):
    """For P = op(a) op(b): the four transpose cases of TF's _MatMulGrad."""
    a, b = op.inputs
    g = grads[0]
    ta, tb = op.attrs["transpose_a"], op.attrs["transpose_b"]

    def mm(x, y, tx, ty, which):
        return MatMul(scope, x, y, transpose_a=tx, transpose_b=ty, **{which: True})

    if not ta and not tb:
        return [mm(g, b, False, True, "grad_a"), mm(a, g, True, False, "grad_b")]
    if not ta and tb:
        return [mm(g, b, False, False, "grad_a"), mm(g, a, True, False, "grad_b")]
    if ta and not tb:
        return [mm(b, g, False, True, "grad_a"), mm(a, g, False, False, "grad_b")]
    return [mm(b, g, True, True, "grad_a"), mm(g, a, True, True, "grad_b")]


def _softmax_vjp(scope, g, softmax):
    """(g - sum(g * s, -1, keepdims)) * s: the softmax Jacobian applied to g."""
    dot = m.Sum(scope, m.Mul(scope, g, softmax), Const(scope, [-1]), keep_dims=True)
    return m.Mul(scope, m.Sub(scope, g, dot), softmax)


@RegisterGradient("Softmax")
def _softmax_grad(scope, op, grads):
    return [_softmax_vjp(scope, grads[0], op.outputs[0])]


@RegisterGradient("SparseSoftmaxCrossEntropyWithLogits")
def _sparse_xent_grad(scope, op, grads):
    """d features = g_loss[:, None] * backprop (TF's gradient, from the op's own output).

    Where 'backprop' itself gets a cotangent (a second derivative, TF prevents it), it adds
    that cotangent through d backprop / d features = the softmax Jacobian."""
    features = op.inputs[0]
    total = None
    if grads[0] is not None:
        column = m.Reshape(scope, grads[0], Const(scope, [-1, 1]))
        total = m.Mul(scope, column, op.outputs[1])
    if grads[1] is not None:
        extra = _softmax_vjp(scope, grads[1], Softmax(scope, features))
        total = extra if total is None else m.Add(scope, total, extra)
    return [total, None]


@RegisterGradient("LogSoftmax")
def _log_softmax_grad(scope, op, grads):
    """g - sum(g, -1, keepdims) * softmax(logits) (TF's _LogSoftmaxGrad, whose
    exp(logsoftmax) is the softmax)."""
    g = grads[0]
    total = m.Sum(scope, g, Const(scope, [-1]), keep_dims=True)
    return [m.Sub(scope, g, m.Mul(scope, total, Softmax(scope, op.inputs[0])))]


@RegisterGradient("SoftmaxCrossEntropyWithLogits")
def _xent_grad(scope, op, grads):
    """d features = g_loss[:, None] * backprop (+ the softmax Jacobian applied to the
    cotangent g_bp of 'backprop', if any); d labels = -g_loss[:, None] *
    log_softmax(features) (- g_bp).
    Each is summed back to its input's shape where the kernel broadcast it (TF's
    _SoftmaxCrossEntropyWithLogitsGrad, for unbroadcast inputs)."""
    features, labels = op.inputs
    column = m.Reshape(scope, cotangent_or_zeros(scope, op, grads, 0), Const(scope, [-1, 1]))
    d_features = m.Mul(scope, column, op.outputs[1])
    logits = m.Add(scope, features, m.ZerosLike(scope, op.outputs[1]))  # broadcast
    log_probs = LogSoftmax(scope, logits)
    d_labels = m.Neg(scope, m.Mul(scope, column, log_probs))
    if grads[1] is not None:  # backprop = softmax(features) - labels
        d_features = m.Add(scope, d_features,
                           _softmax_vjp(scope, grads[1], Softmax(scope, logits)))
        d_labels = m.Sub(scope, d_labels, grads[1])
    return [m.reduce_to_shape_of(scope, d_features, features),
            m.reduce_to_shape_of(scope, d_labels, labels)]


@RegisterGradient("L2Loss")
def _l2_loss_grad(scope, op, grads):
    """d/dt sum(t^2) / 2 = t, times the scalar cotangent."""
    return [m.Mul(scope, op.inputs[0], grads[0])]
