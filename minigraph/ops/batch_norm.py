"""The batch-normalization op family: definitions, shape functions and run-time checks.

Semantics follow TensorFlow 2.21 on CPU (``docs/tf-semantics.md``):

* ``FusedBatchNormV3`` (and V1/V2) normalizes per channel,
  ``y = (x - mu) * (scale * rsqrt(var + epsilon)) + offset``, with the batch statistics in
  training and the given ``mean``/``variance`` in inference.
* ``FusedBatchNormGradV3`` (and V1/V2) is its gradient, reading the saved statistics from
  ``reserve_space_1`` (mean) and ``reserve_space_2`` (biased variance).
* ``BatchNormWithGlobalNormalization`` and its ``Grad`` are the deprecated, channel-last,
  global-statistics variants.

The kernels live in ``minigraph.backends``; here is everything about the ops themselves.
"""

from __future__ import annotations

import numpy as np

from minigraph.framework import dtypes
from minigraph.framework.gradient_registry import RegisterGradient
from minigraph.framework.op_def import (
    ArgDef,
    AttrDef,
    InferenceContext,
    OpDef,
    OpDeprecation,
    RunContext,
    finite_non_negative,
    make_wrapper,
    register_op,
    required,
)
from minigraph.framework.tensor_shape import ShapeMismatch, TensorShape, dims_text
from minigraph.ops import math_ops as m
from minigraph.ops.array_ops import Const
from minigraph.ops.math_ops import cotangent_or_zeros

# The wrappers minigraph.ops exports.
__all__ = [
    "BatchNormWithGlobalNormalization", "BatchNormWithGlobalNormalizationGrad",
    "FusedBatchNorm", "FusedBatchNormGrad", "FusedBatchNormGradGrad", "FusedBatchNormGradV2",
    "FusedBatchNormGradV3", "FusedBatchNormV2", "FusedBatchNormV3",
]

FORMATS_2D = ("NHWC", "NCHW")
FORMATS_2D_3D = ("NHWC", "NCHW", "NDHWC", "NCDHW")
HALF_TYPES = dtypes.HALF_AND_FLOAT32


def format_rank(data_format: str) -> int:
    """4 for NHWC/NCHW, 5 for NDHWC/NCDHW (TF's graph-mode rule)."""
    return 4 if len(data_format) == 4 else 5


def channels_last(data_format: str) -> bool:
    return data_format.endswith("C")


def channel_axis(data_format: str) -> int:
    return format_rank(data_format) - 1 if channels_last(data_format) else 1


def _attrs(formats: tuple[str, ...], *, training_attrs: bool = True) -> list[AttrDef]:
    """The fused ops' attrs; ``training_attrs`` is False for the gradients (no
    exponential_avg_factor, and is_training then says what the forward op did)."""
    attrs = [AttrDef("epsilon", "float", default=0.0001, check=finite_non_negative,
                     doc="Added to the variance before its reciprocal square root (a gradient's "
                         "must be its forward op's); finite and >= 0.")]
    if training_attrs:
        attrs.append(AttrDef(
            "exponential_avg_factor", "float", default=1.0,
            doc="Training only: the weight f of the batch statistics in batch_mean and "
                "batch_variance, (1 - f) * running + f * batch; with 1, mean and variance "
                "are not read."))
    is_training = ("True: normalize with the batch statistics; False: with mean and variance."
                   if training_attrs else
                   "Whether the forward op was training: True differentiates through the "
                   "batch statistics, False gives y_backprop * scale * rsqrt(variance + "
                   "epsilon).")
    attrs += [AttrDef("data_format", "string", default="NHWC", allowed=formats,
                      doc="The layout of x: N batch, C channels, D/H/W spatial; the channel "
                          "axis is the last (..C) or 1 (NC..)."),
              AttrDef("is_training", "bool", default=True, doc=is_training)]
    return attrs


# ----------------------------------------------------------------------------- shape functions


def _channel_of(ctx: InferenceContext, tensor: str, data_format: str) -> tuple[TensorShape, int]:
    rank = format_rank(data_format)
    shape = ctx.with_rank(tensor, rank, f" for data_format {data_format}")
    return shape, channel_axis(data_format)


def _merge_vector(ctx: InferenceContext, name: str, channel: int | None, of: str = "x"
                  ) -> int | None:
    vector = ctx.with_rank(name, 1)
    return ctx.merge_dim(channel, vector[0],
                         f"input '{name}' must have one element per channel of '{of}'")


def fused_batch_norm_shape(ctx: InferenceContext) -> list[TensorShape]:
    """y: x's shape with the merged channel; statistics: [channel]; reserve_space_3: [0].

    mean/variance join the channel merge only when they are read, that is unless
    ``is_training and exponential_avg_factor == 1`` (TF's FusedBatchNormV3Shape).
    """
    fmt = ctx.attrs["data_format"]
    x, axis = _channel_of(ctx, "x", fmt)
    channel = x[axis]
    uses_running_stats = not (ctx.attrs["is_training"]
                              and ctx.attrs["exponential_avg_factor"] == 1.0)
    for name in ("scale", "offset", "mean", "variance"):
        if name in ("mean", "variance") and not uses_running_stats:
            ctx.with_rank(name, 1)
        else:
            channel = _merge_vector(ctx, name, channel)
    vector = TensorShape([channel])
    shapes = [x.replace_dim(axis, channel)] + [vector] * 4
    if len(ctx.op_def.outputs) == 6:
        shapes.append(TensorShape([0]))
    return shapes


def fused_batch_norm_grad_shape(ctx: InferenceContext) -> list[TensorShape]:
    """x_backprop: y_backprop merged with x (channel merged with all vectors); vectors [C]."""
    fmt = ctx.attrs["data_format"]
    dy, axis = _channel_of(ctx, "y_backprop", fmt)
    x, _ = _channel_of(ctx, "x", fmt)
    channel = ctx.merge_dim(dy[axis], x[axis],
                            "input 'x' must have as many channels as 'y_backprop'")
    for name in ("scale", "reserve_space_1", "reserve_space_2"):
        channel = _merge_vector(ctx, name, channel)
    merged = ctx.merge_shapes(dy, x, f"inputs 'x' and 'y_backprop' must have the same shape, "
                                     f"got {x} and {dy}")
    vector = TensorShape([channel])
    return [merged.replace_dim(axis, channel), vector, vector, TensorShape([0]),
            TensorShape([0])]


# ----------------------------------------------------------------------------- run-time checks


def _check_vector(ctx: RunContext, name: str, value: np.ndarray, channels: int | None,
                  why: str = "", of: str = "x") -> None:
    if value.ndim != 1:
        raise ctx.error(f"{name} must be 1-dimensional, got shape {dims_text(value.shape)} "
                        f"(input '{name}')")
    if channels is not None and value.shape[0] != channels:
        raise ctx.error(f"{why}{name} must have the same number of elements as the channels "
                        f"of {of}, got {value.shape[0]} and {channels} (input '{name}': "
                        f"expected {channels}, got {value.shape[0]})")


def _check_x(ctx: RunContext, name: str, value: np.ndarray, data_format: str) -> int:
    rank = format_rank(data_format)
    if value.ndim != rank:
        raise ctx.error(f"input '{name}' must be {rank}-dimensional for data_format "
                        f"{data_format}, got shape {dims_text(value.shape)}")
    return value.shape[channel_axis(data_format)]


def validate_fused_batch_norm(ctx: RunContext, values: list[np.ndarray]) -> None:
    x, scale, offset, mean, variance = values
    attrs = ctx.op.attrs
    channels = _check_x(ctx, "x", x, attrs["data_format"])
    _check_vector(ctx, "scale", scale, channels)
    _check_vector(ctx, "offset", offset, channels)
    if not attrs["is_training"]:
        why, needed = "When is_training=false, ", channels
    elif attrs["exponential_avg_factor"] != 1.0:
        why, needed = "When exponential_avg_factor != 1, ", channels
    else:
        why, needed = "", None
    _check_vector(ctx, "mean", mean, needed, why)
    _check_vector(ctx, "variance", variance, needed, why)


def validate_fused_batch_norm_grad(ctx: RunContext, values: list[np.ndarray]) -> None:
    dy, x, scale, mean, variance = values[:5]
    fmt = ctx.op.attrs["data_format"]
    _check_x(ctx, "y_backprop", dy, fmt)
    channels = _check_x(ctx, "x", x, fmt)
    if dy.shape != x.shape:
        raise ctx.error(f"x and y_backprop must have same shape, but x has shape "
                        f"{dims_text(x.shape)} and y_backprop has shape "
                        f"{dims_text(dy.shape)}")
    _check_vector(ctx, "scale", scale, channels)
    _check_vector(ctx, "reserve_space_1", mean, channels)
    _check_vector(ctx, "reserve_space_2", variance, channels)


# ----------------------------------------------------------------------------- FusedBatchNorm*


# What each input and output of the fused ops means (docs/ops/FusedBatchNormV3.md and
# FusedBatchNormGradV3.md say more); the wrappers' docstrings and the stub show these.
_FORWARD_DOCS = {
    "x": "The tensor to normalize, 4-D or 5-D as data_format says.",
    "scale": "The per-channel multiplier (gamma).",
    "offset": "The per-channel shift (beta).",
    "mean": "The running mean: normalizes x in inference, enters batch_mean in training "
            "when exponential_avg_factor != 1, else unread (may be empty).",
    "variance": "The running variance, read as mean is.",
    "y": "x normalized, scaled and shifted: x's shape and dtype.",
    "batch_mean": "Training: the batch mean, averaged into mean by exponential_avg_factor; "
                  "inference: mean.",
    "batch_variance": "Training: the unbiased batch variance, averaged into variance by "
                      "exponential_avg_factor; inference: variance.",
    "reserve_space_1": "For the gradient: the batch mean (training) or mean (inference).",
    "reserve_space_2": "For the gradient: the biased batch variance (training) or variance "
                       "(inference).",
    "reserve_space_3": "An empty [0] tensor for FusedBatchNormGradV3, never read.",
}
_GRAD_DOCS = {
    "y_backprop": "The gradient with respect to the forward op's y.",
    "x": "The forward op's x.",
    "scale": "The forward op's scale.",
    "reserve_space_1": "The forward op's reserve_space_1 (batch mean), or the running mean "
                       "in inference.",
    "reserve_space_2": "The forward op's reserve_space_2 (biased batch variance), or the "
                       "running variance in inference; epsilon is added to it again.",
    "reserve_space_3": "The forward op's reserve_space_3; ignored.",
    "x_backprop": "The gradient with respect to x.",
    "scale_backprop": "The gradient with respect to scale.",
    "offset_backprop": "The gradient with respect to offset: y_backprop summed per channel.",
    "reserve_space_4": "An empty [0] tensor that nothing reads.",
    "reserve_space_5": "An empty [0] tensor that nothing reads.",
}


def _fused_forward(name: str, *, t_types: tuple, u_type: str | None,
                   formats: tuple[str, ...], reserve_space_3: bool) -> OpDef:
    vector_type = u_type or "T"
    outputs = [ArgDef("y", type_attr="T", doc=_FORWARD_DOCS["y"])] + [
        ArgDef(n, type_attr=vector_type, doc=_FORWARD_DOCS[n])
        for n in ("batch_mean", "batch_variance", "reserve_space_1", "reserve_space_2")]
    if reserve_space_3:
        outputs.append(ArgDef("reserve_space_3", type_attr=vector_type,
                              doc=_FORWARD_DOCS["reserve_space_3"]))
    type_attrs = [required("T", "type", allowed=t_types)]
    if u_type:
        type_attrs.append(required("U", "type", allowed=(dtypes.float32,)))
    return register_op(OpDef(
        name=name,
        inputs=[ArgDef("x", type_attr="T", doc=_FORWARD_DOCS["x"])] + [
            ArgDef(n, type_attr=vector_type, doc=_FORWARD_DOCS[n])
            for n in ("scale", "offset", "mean", "variance")],
        outputs=outputs,
        attrs=type_attrs + _attrs(formats),
        shape_fn=fused_batch_norm_shape,
        validate=validate_fused_batch_norm,
    ))


def _fused_grad(name: str, *, t_types: tuple, u_type: str | None, formats: tuple[str, ...],
                reserve_space_3: bool) -> OpDef:
    vector_type = u_type or "T"
    docs = dict(_GRAD_DOCS)
    scale = (ArgDef("scale", dtype=dtypes.float32, doc=docs["scale"]) if u_type
             else ArgDef("scale", type_attr="T", doc=docs["scale"]))
    inputs = [ArgDef("y_backprop", type_attr="T", doc=docs["y_backprop"]),
              ArgDef("x", type_attr="T", doc=docs["x"]), scale,
              ArgDef("reserve_space_1", type_attr=vector_type, doc=docs["reserve_space_1"]),
              ArgDef("reserve_space_2", type_attr=vector_type, doc=docs["reserve_space_2"])]
    extra_outputs = ("reserve_space_3", "reserve_space_4")
    if reserve_space_3:
        inputs.append(ArgDef("reserve_space_3", type_attr=vector_type,
                             doc=docs["reserve_space_3"]))
        extra_outputs = ("reserve_space_4", "reserve_space_5")
    else:  # V1/V2 name their unused outputs reserve_space_3 and _4
        docs["reserve_space_3"] = docs["reserve_space_4"]
    type_attrs = [required("T", "type", allowed=t_types)]
    if u_type:
        type_attrs.append(required("U", "type", allowed=(dtypes.float32,)))
    return register_op(OpDef(
        name=name,
        inputs=inputs,
        outputs=[ArgDef("x_backprop", type_attr="T", doc=docs["x_backprop"])] + [
            ArgDef(n, type_attr=vector_type, doc=docs[n])
            for n in ("scale_backprop", "offset_backprop") + extra_outputs],
        attrs=type_attrs + _attrs(formats, training_attrs=False),
        shape_fn=fused_batch_norm_grad_shape,
        validate=validate_fused_batch_norm_grad,
    ))


FUSED_BATCH_NORM = _fused_forward("FusedBatchNorm", t_types=(dtypes.float32,), u_type=None,
                                  formats=FORMATS_2D, reserve_space_3=False)
FUSED_BATCH_NORM_V2 = _fused_forward("FusedBatchNormV2", t_types=HALF_TYPES, u_type="U",
                                     formats=FORMATS_2D, reserve_space_3=False)
FUSED_BATCH_NORM_V3 = _fused_forward("FusedBatchNormV3", t_types=HALF_TYPES, u_type="U",
                                     formats=FORMATS_2D_3D, reserve_space_3=True)
FUSED_BATCH_NORM_GRAD = _fused_grad("FusedBatchNormGrad", t_types=(dtypes.float32,),
                                    u_type=None, formats=FORMATS_2D, reserve_space_3=False)
FUSED_BATCH_NORM_GRAD_V2 = _fused_grad("FusedBatchNormGradV2", t_types=HALF_TYPES, u_type="U",
                                       formats=FORMATS_2D, reserve_space_3=False)
FUSED_BATCH_NORM_GRAD_V3 = _fused_grad("FusedBatchNormGradV3", t_types=HALF_TYPES, u_type="U",
                                       formats=FORMATS_2D_3D, reserve_space_3=True)

FusedBatchNorm = make_wrapper(FUSED_BATCH_NORM)
FusedBatchNormV2 = make_wrapper(FUSED_BATCH_NORM_V2)
FusedBatchNormV3 = make_wrapper(FUSED_BATCH_NORM_V3)
FusedBatchNormGrad = make_wrapper(FUSED_BATCH_NORM_GRAD)
FusedBatchNormGradV2 = make_wrapper(FUSED_BATCH_NORM_GRAD_V2)
FusedBatchNormGradV3 = make_wrapper(FUSED_BATCH_NORM_GRAD_V3)

# ----------------------------------------------------------------------------- global normalization

GLOBAL_NORM_TYPES = (dtypes.float16, dtypes.float32, dtypes.float64)
GLOBAL_NORM_DEPRECATION = OpDeprecation(9, "Use tf.nn.batch_normalization().")


def _global_norm_attrs() -> list[AttrDef]:
    return [required("T", "type", allowed=GLOBAL_NORM_TYPES),
            required("variance_epsilon", "float", check=finite_non_negative,
                     doc="Added to v before its reciprocal square root; finite and >= 0."),
            required("scale_after_normalization", "bool",
                     doc="Whether the normalized t is multiplied by gamma.")]


_GLOBAL_NORM_DOCS = {
    "t": "The 4-D tensor to normalize, channels last.",
    "m": "The per-channel mean.",
    "v": "The per-channel variance.",
    "beta": "The per-channel shift added after normalizing.",
    "gamma": "The per-channel multiplier, used if scale_after_normalization.",
    "backprop": "The gradient with respect to the forward op's result.",
    "result": "t normalized: t's shape and dtype.",
    "dx": "The gradient with respect to t.",
    "dm": "The gradient with respect to m.",
    "dv": "The gradient with respect to v.",
    "db": "The gradient with respect to beta.",
    "dg": "The gradient with respect to gamma.",
}


def global_norm_shape(ctx: InferenceContext) -> list[TensorShape]:
    """result: t's shape with the channel (last dim) merged with m, v, beta, gamma."""
    t = ctx.with_rank("t", 4)
    channel = t[3]
    for name in ("m", "v", "beta", "gamma"):
        channel = _merge_vector(ctx, name, channel, of="t")
    return [t.replace_dim(3, channel)]


def global_norm_grad_shape(ctx: InferenceContext) -> list[TensorShape]:
    """dx: merge(t, backprop) with the merged channel; dm, dv, db, dg: [channel]. As TF:
    t must be rank 4, then backprop merges with it (a rank-3 backprop: "Shapes must be equal
    rank, but are 4 and 3", whether t's shape is known or not)."""
    t = ctx.with_rank("t", 4)
    backprop = ctx.input_shapes[4]
    try:
        merged = t.merge_with(backprop)
    except ShapeMismatch as exc:
        raise ctx.error(f"{exc}: inputs 't' and 'backprop' must have the same shape (input "
                        f"'backprop' has rank {backprop.rank}, shape {backprop}; 't' {t})"
                        ) from None
    channel = merged[3]
    for name in ("m", "v", "gamma"):
        channel = _merge_vector(ctx, name, channel, of="t")
    return [merged.replace_dim(3, channel)] + [TensorShape([channel])] * 4


def _validate_global_norm(ctx: RunContext, t: np.ndarray, vectors: dict[str, np.ndarray]
                          ) -> None:
    if t.ndim != 4:
        raise ctx.error(f"input 't' must be 4-dimensional, got shape {dims_text(t.shape)}")
    for name, value in vectors.items():
        _check_vector(ctx, name, value, t.shape[3], of="t")


def validate_global_norm(ctx: RunContext, values: list[np.ndarray]) -> None:
    t, m, v, beta, gamma = values
    _validate_global_norm(ctx, t, {"m": m, "v": v, "beta": beta, "gamma": gamma})


def validate_global_norm_grad(ctx: RunContext, values: list[np.ndarray]) -> None:
    t, m, v, gamma, backprop = values
    _validate_global_norm(ctx, t, {"m": m, "v": v, "gamma": gamma})
    if backprop.shape != t.shape:
        raise ctx.error(f"input 'backprop' must have the shape of 't', expected "
                        f"{dims_text(t.shape)}, got {dims_text(backprop.shape)}")


BATCH_NORM_WITH_GLOBAL_NORMALIZATION = register_op(OpDef(
    name="BatchNormWithGlobalNormalization",
    inputs=[ArgDef(n, type_attr="T", doc=_GLOBAL_NORM_DOCS[n])
            for n in ("t", "m", "v", "beta", "gamma")],
    outputs=[ArgDef("result", type_attr="T", doc=_GLOBAL_NORM_DOCS["result"])],
    attrs=_global_norm_attrs(),
    shape_fn=global_norm_shape,
    validate=validate_global_norm,
    deprecation=GLOBAL_NORM_DEPRECATION,
))
BATCH_NORM_WITH_GLOBAL_NORMALIZATION_GRAD = register_op(OpDef(
    name="BatchNormWithGlobalNormalizationGrad",
    inputs=[ArgDef(n, type_attr="T", doc=_GLOBAL_NORM_DOCS[n])
            for n in ("t", "m", "v", "gamma", "backprop")],
    outputs=[ArgDef(n, type_attr="T", doc=_GLOBAL_NORM_DOCS[n])
             for n in ("dx", "dm", "dv", "db", "dg")],
    attrs=_global_norm_attrs(),
    shape_fn=global_norm_grad_shape,
    validate=validate_global_norm_grad,
    deprecation=GLOBAL_NORM_DEPRECATION,
))
BatchNormWithGlobalNormalization = make_wrapper(BATCH_NORM_WITH_GLOBAL_NORMALIZATION)
BatchNormWithGlobalNormalizationGrad = make_wrapper(BATCH_NORM_WITH_GLOBAL_NORMALIZATION_GRAD)


# ----------------------------------------------------------------------------- second order


def _validate_grad_grad(ctx: RunContext, values: list[np.ndarray]) -> None:
    validate_fused_batch_norm_grad(ctx, values[:5])
    x, gx, gscale, goffset = values[1], values[5], values[6], values[7]
    if gx.shape != x.shape:
        raise ctx.error(f"input 'grad_x_backprop' must have x's shape {dims_text(x.shape)}, "
                        f"got {dims_text(gx.shape)}")
    channels = x.shape[channel_axis(ctx.op.attrs["data_format"])]
    _check_vector(ctx, "grad_scale_backprop", gscale, channels)
    _check_vector(ctx, "grad_offset_backprop", goffset, channels)


def _grad_grad_shape(ctx: InferenceContext) -> list[TensorShape]:
    x_backprop, vector = fused_batch_norm_grad_shape(ctx)[:2]
    fmt = ctx.attrs["data_format"]
    gx, axis = _channel_of(ctx, "grad_x_backprop", fmt)
    merged = ctx.merge_shapes(x_backprop, gx, f"input 'grad_x_backprop' must have x's shape "
                                              f"{x_backprop}, got {gx}")
    channel = vector[0]
    for name in ("grad_scale_backprop", "grad_offset_backprop"):
        channel = _merge_vector(ctx, name, channel)
    merged = merged.replace_dim(axis, channel)
    return [merged, merged, TensorShape([channel])]


FUSED_BATCH_NORM_GRAD_GRAD = register_op(OpDef(
    name="FusedBatchNormGradGrad",
    inputs=[ArgDef("y_backprop", type_attr="T", doc=_GRAD_DOCS["y_backprop"]),
            ArgDef("x", type_attr="T", doc=_GRAD_DOCS["x"]),
            ArgDef("scale", dtype=dtypes.float32, doc=_GRAD_DOCS["scale"]),
            ArgDef("reserve_space_1", dtype=dtypes.float32, doc=_GRAD_DOCS["reserve_space_1"]),
            ArgDef("reserve_space_2", dtype=dtypes.float32, doc=_GRAD_DOCS["reserve_space_2"]),
            ArgDef("grad_x_backprop", type_attr="T",
                   doc="The gradient with respect to the first-order op's x_backprop."),
            ArgDef("grad_scale_backprop", dtype=dtypes.float32,
                   doc="The gradient with respect to its scale_backprop."),
            ArgDef("grad_offset_backprop", dtype=dtypes.float32,
                   doc="The gradient with respect to its offset_backprop.")],
    outputs=[ArgDef("grad_y_backprop", type_attr="T",
                    doc="The gradient with respect to y_backprop."),
             ArgDef("grad_x", type_attr="T", doc="The gradient with respect to x."),
             ArgDef("grad_scale", dtype=dtypes.float32,
                    doc="The gradient with respect to scale.")],
    attrs=[required("T", "type", allowed=HALF_TYPES)] + _attrs(FORMATS_2D_3D,
                                                               training_attrs=False),
    shape_fn=_grad_grad_shape,
    validate=_validate_grad_grad,
))
FusedBatchNormGradGrad = make_wrapper(FUSED_BATCH_NORM_GRAD_GRAD)


# ----------------------------------------------------------------------------- gradients

def grad_attrs(op) -> dict:
    return {k: op.attrs[k] for k in ("epsilon", "data_format", "is_training")}


def _fused_batch_norm_grad(scope, op, grads):
    """One FusedBatchNormGradV3 fed with the reserve spaces (training) or the population
    statistics (inference). Only y's cotangent is used; mean and variance get no gradient
    (docs/tf-semantics.md#autodiff-first-order)."""
    x, scale, _, mean, variance = op.inputs
    dy = cotangent_or_zeros(scope, op, grads, 0)
    if op.attrs["is_training"]:
        saved_mean, saved_variance = op.outputs[3], op.outputs[4]
    else:
        saved_mean, saved_variance = mean, variance
    reserve_space_3 = op.outputs[5] if len(op.outputs) == 6 else Const(
        scope, np.zeros(0, np.float32))
    grad = FusedBatchNormGradV3(scope, dy, x, scale, saved_mean, saved_variance,
                                reserve_space_3, **grad_attrs(op))
    return [grad.x_backprop, grad.scale_backprop, grad.offset_backprop, None, None]


def _fused_batch_norm_grad_grad(scope, op, grads):
    """The fused second-order op; None for the reserve spaces
    (docs/tf-semantics.md#autodiff-second-order)."""
    dy, x, scale, mean, variance = op.inputs[:5]
    cotangents = [cotangent_or_zeros(scope, op, grads, i) for i in range(3)]
    result = FusedBatchNormGradGrad(scope, dy, x, scale, mean, variance, *cotangents,
                                    **grad_attrs(op))
    return [result.grad_y_backprop, result.grad_x, result.grad_scale, None, None] + [None] * (
        len(op.inputs) - 5)


for _op_type in ("FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3"):
    RegisterGradient(_op_type)(_fused_batch_norm_grad)
for _op_type in ("FusedBatchNormGrad", "FusedBatchNormGradV2", "FusedBatchNormGradV3"):
    RegisterGradient(_op_type)(_fused_batch_norm_grad_grad)


def decomposed_batch_norm_grad(scope, dy, x, scale, mean, variance, *, epsilon, data_format,
                               is_training):
    """The first-order gradient written with elementwise/reduction ops (TF's _BatchNormGrad).

    Training recomputes the statistics from x: ``mu = mean(x)``, ``var = mean((x-mu)^2)``,
    ``x_backprop = scale r (dy - mean(dy) - (x-mu) mean(dy (x-mu)) / (var+eps))``,
    ``scale_backprop = r sum(dy (x-mu))``, ``offset_backprop = sum(dy)``, r = rsqrt(var+eps).
    Inference uses the given mean/variance: ``x_backprop = dy scale r``. Half types are cast
    to float32 and x_backprop back. Differentiating this graph gives exact higher orders.
    """
    rank, axis = format_rank(data_format), channel_axis(data_format)
    axes = Const(scope, [a for a in range(rank) if a != axis])
    per_channel = Const(scope, [-1 if a == axis else 1 for a in range(rank)])

    def channel(vector):
        return m.Reshape(scope, vector, per_channel)

    def mean_of(tensor):
        return m.Mean(scope, tensor, axes, keep_dims=True)

    def total(tensor):
        return m.Sum(scope, tensor, axes)

    dtype = x.dtype
    if dtype is not dtypes.float32:
        dy, x = m.Cast(scope, dy, DstT=dtypes.float32), m.Cast(scope, x, DstT=dtypes.float32)
    eps = Const(scope, epsilon, dtypes.float32)
    if is_training:
        centered = m.Sub(scope, x, mean_of(x))
        rstd = m.Rsqrt(scope, m.Add(scope, mean_of(m.Square(scope, centered)), eps))
        dy_centered = m.Sub(scope, dy, mean_of(dy))
        projection = m.Mul(scope, centered, m.Mul(scope, mean_of(m.Mul(scope, dy, centered)),
                                                  m.Square(scope, rstd)))
        x_backprop = m.Mul(scope, m.Mul(scope, channel(scale), rstd),
                           m.Sub(scope, dy_centered, projection))
    else:
        centered = m.Sub(scope, x, channel(mean))
        rstd = m.Rsqrt(scope, m.Add(scope, channel(variance), eps))
        x_backprop = m.Mul(scope, dy, m.Mul(scope, channel(scale), rstd))
    scale_backprop = total(m.Mul(scope, m.Mul(scope, dy, centered), rstd))
    if dtype is not dtypes.float32:
        x_backprop = m.Cast(scope, x_backprop, DstT=dtype)
    return x_backprop, scale_backprop, total(dy)


@RegisterGradient("BatchNormWithGlobalNormalization")
def _global_norm_grad(scope, op, grads):
    """One BatchNormWithGlobalNormalizationGrad; m and v DO get gradients
    (docs/tf-semantics.md#global-normalization-gradient)."""
    t, m_, v, beta, gamma = op.inputs
    grad = BatchNormWithGlobalNormalizationGrad(
        scope, t, m_, v, gamma, grads[0], op.attrs["variance_epsilon"],
        op.attrs["scale_after_normalization"])
    return [grad.dx, grad.dm, grad.dv, grad.db, grad.dg]
