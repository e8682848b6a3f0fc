"""Op-level kernels of the batch-norm family, one body for every backend.

Each kernel reads its node's attrs, handles what is the same on every backend (empty
tensors, the statistics outputs, reserve spaces, exponential averaging, the global-
normalization vector gradients) and hands the per-element loops to ``ctx.math``, the
:class:`~minigraph.backends.registry.BatchNormMath` of the backend it was registered for:
``backends.reference`` (numpy), ``backends.native`` (C) or a device's ``OpenCLMath``.
Arrays are made through ``ctx.math.xp``: numpy on the CPU, the device's array functions
elsewhere. Inputs were already validated by the session.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache, partial
from typing import Any

import numpy as np

from minigraph.backends import native
from minigraph.backends.registry import (
    BatchNormMath,
    KernelContext,
    register_kernel,
    set_replay,
)
from minigraph.framework import dtypes
from minigraph.framework.graph import Operation
from minigraph.ops.batch_norm import channel_axis, channels_last

F32 = np.float32
# The fused ops' kernels run on every backend with its own math (float64 sessions fall back
# to the reference's); the global-normalization ones only for the dtypes the C and OpenCL
# loops take (float64 runs on the reference).
EVERY = ("reference", "native", "opencl")
# The fused ops' native kernels also take out= (y, x_backprop: a bound plan's arena; used
# for float32 x, ``native._bn_out``); the other backends' math takes no buffer.
NOT_NATIVE = ("reference", "opencl")
FAST = ("native", "opencl")
FLOAT16_32 = (dtypes.float16, dtypes.float32)


def _empty_reserve(xp) -> np.ndarray:
    """reserve_space_3 (forward) and reserve_space_4/5 (grad): float32 [0], never read."""
    return xp.zeros(0, F32)


def _compute_type(x: np.ndarray) -> type:
    """float32 statistics (TF's U), float64 only when the session evaluates in float64."""
    return np.float64 if x.dtype == np.float64 else F32


def _vector(xp, value: np.ndarray, ct: type = F32) -> np.ndarray:
    return xp.ascontiguousarray(value, dtype=ct)


@register_kernel("FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3", backend=NOT_NATIVE)
@register_kernel("FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3", backend="native",
                 out=True)
def fused_batch_norm(op: Operation, inputs: list[np.ndarray], ctx: KernelContext,
                     out: np.ndarray | None = None) -> list[np.ndarray]:
    """y plus (batch_mean, batch_variance, reserve_space_1, reserve_space_2), as in
    docs/tf-semantics.md#fusedbatchnormv3-forward.

    Training: batch_mean/batch_variance are the batch mean and the Bessel-corrected variance
    (k = n / max(n-1, 1)), blended with the incoming mean/variance when
    exponential_avg_factor != 1; reserve spaces hold the mean and the biased variance.
    Inference: copies of mean/variance everywhere. Empty x: NaN batch statistics.
    ``out`` (native only): y's buffer where it fits.
    """
    training, inference = ctx.math.bn_forward_training, ctx.math.bn_forward_inference
    if out is not None:
        training, inference = partial(training, out=out), partial(inference, out=out)
    return batch_norm_forward(op, inputs, ctx, training, inference)


@lru_cache(maxsize=256)
def _blend_scalars(ct: type, count: int, factor: float) -> tuple:
    """(Bessel's n / max(n - 1, 1), the averaging factor f, 1 - f) as ``ct`` scalars, for
    the running statistics ``mean * (1 - f) + batch_mean * f`` and ``variance * (1 - f) +
    (biased_variance * bessel) * f`` (made once per shape and factor: numpy scalar
    arithmetic costs a microsecond an operation at every training step)."""
    f = ct(factor)
    return ct(count) / ct(max(count - 1, 1)), f, ct(1) - f


def batch_norm_forward(op: Operation, inputs: list[np.ndarray], ctx: KernelContext,
                       training: Callable, inference: Callable) -> list[np.ndarray]:
    """:func:`fused_batch_norm`'s outputs, y computed by ``training(x, scale, offset,
    epsilon, channels_last)`` -> (y, mean, biased variance) or ``inference(x, scale, offset,
    mean, variance, epsilon, channels_last)`` -> y: a BatchNormMath's functions, or
    _FusedBatchNormEx's, which also add the side input and apply the activation."""
    x, scale, offset, mean, variance = inputs
    attrs = op.attrs
    epsilon, last = attrs["epsilon"], channels_last(attrs["data_format"])
    xp = ctx.math.xp
    x = xp.ascontiguousarray(x)
    ct = _compute_type(x)
    scale, offset, mean, variance = (_vector(xp, v, ct)
                                     for v in (scale, offset, mean, variance))
    channels = x.shape[channel_axis(attrs["data_format"])]
    count = x.size // channels if channels else 0
    if x.size == 0:
        nan = xp.full(channels, np.nan, ct)
        zeros = xp.zeros(channels, ct)
        outputs = [xp.empty(x.shape, x.dtype), nan, nan.copy(), zeros, zeros.copy()]
    elif attrs["is_training"]:
        y, batch_mean, biased_variance = training(x, scale, offset, epsilon, last)
        bessel, factor, keep = _blend_scalars(ct, count, attrs["exponential_avg_factor"])
        if factor == 1:
            running_mean, running_variance = batch_mean.copy(), biased_variance * bessel
        else:
            running_mean = mean * keep + batch_mean * factor
            running_variance = variance * keep + biased_variance * bessel * factor
        outputs = [y, running_mean, running_variance, batch_mean, biased_variance]
    else:
        y = inference(x, scale, offset, mean, variance, epsilon, last)
        outputs = [y, mean.copy(), variance.copy(), mean.copy(), variance.copy()]
    if len(op.outputs) == 6:
        outputs.append(_empty_reserve(xp))
    return outputs


def bn_inference_replay(op: Operation, values: list, outputs: list, ctx: KernelContext,
                        ex: tuple | None = None):
    """The native inference forward on fixed float32 arrays (``registry.ReplayMaker``):
    the C call with its arguments made once (``native.bn_inference_call``; ``ex``: a
    _FusedBatchNormEx's (side input or None, relu)), then the four statistics outputs, which
    inference copies from mean and variance. None in training, off the native backend, or
    for arrays the native kernel would not take as they are."""
    x, scale, offset, mean, variance = values[:5]
    y = outputs[0]
    if (op.attrs["is_training"] or ctx.backend != "native" or not x.size
            or not all(native.plain_f32(a) for a in (x, scale, offset, mean, variance, y))
            or y.shape != x.shape or not y.flags.writeable
            or any(o.shape != mean.shape or o.dtype != F32 for o in outputs[1:5])):
        return None
    try:
        function, args = native.bn_inference_call(x, scale, offset, mean, variance,
                                                  op.attrs["epsilon"],
                                                  channels_last(op.attrs["data_format"]), y, ex)
    except (TypeError, ValueError):
        return None
    copies = list(zip(outputs[1:5], (mean, variance, mean, variance)))
    normalized = native.c_call(function, args, "batch norm", (values, outputs))

    def replayed() -> None:
        normalized()
        for out, value in copies:
            np.copyto(out, value)

    return replayed


set_replay(fused_batch_norm, bn_inference_replay)


@register_kernel("FusedBatchNormGrad", "FusedBatchNormGradV2", "FusedBatchNormGradV3",
                 backend=NOT_NATIVE)
@register_kernel("FusedBatchNormGrad", "FusedBatchNormGradV2", "FusedBatchNormGradV3",
                 backend="native", out=True)
def fused_batch_norm_grad(op: Operation, inputs: list[np.ndarray], ctx: KernelContext,
                          out: np.ndarray | None = None) -> list[np.ndarray]:
    """(x_backprop, scale_backprop, offset_backprop, two empty reserves), as in
    docs/tf-semantics.md#gradient-formulas.

    reserve_space_1/2 are used as given (mean and biased variance); reserve_space_3 is ignored.
    Empty x: x_backprop empty of x's shape (also 5-D), zero scale/offset backprops.
    ``out`` (native only): x_backprop's buffer where it fits.
    """
    dy, x, scale, mean, variance = inputs[:5]
    attrs = op.attrs
    math, xp = ctx.math, ctx.math.xp
    ct = _compute_type(x)
    channels = x.shape[channel_axis(attrs["data_format"])]
    if x.size == 0:
        outputs = [xp.empty(x.shape, x.dtype), xp.zeros(channels, ct), xp.zeros(channels, ct)]
    else:
        backward = math.bn_backward_training if attrs["is_training"] else \
            math.bn_backward_inference
        if out is not None:
            backward = partial(backward, out=out)
        outputs = list(backward(xp.ascontiguousarray(dy), xp.ascontiguousarray(x),
                                _vector(xp, scale, ct), _vector(xp, mean, ct),
                                _vector(xp, variance, ct), attrs["epsilon"],
                                channels_last(attrs["data_format"])))
    return outputs + [_empty_reserve(xp), _empty_reserve(xp)]


@register_kernel("FusedBatchNormGradGrad", backend=EVERY)
def fused_batch_norm_grad_grad(op: Operation, inputs: list[np.ndarray], ctx: KernelContext
                               ) -> list[np.ndarray]:
    """Second order of FusedBatchNormGradV3 (see ``reference.bn_grad_grad_training``):
    (grad_y_backprop, grad_x, grad_scale). Training recomputes the statistics from x."""
    dy, x, scale, mean, variance, gx, gscale, goffset = inputs
    attrs = op.attrs
    math, xp = ctx.math, ctx.math.xp
    ct = _compute_type(x)
    if x.size == 0:
        channels = x.shape[channel_axis(attrs["data_format"])]
        return [xp.empty(x.shape, x.dtype), xp.empty(x.shape, x.dtype), xp.zeros(channels, ct)]
    dy, x, gx = (xp.ascontiguousarray(t) for t in (dy, x, gx))
    scale, mean, variance, gscale, goffset = (
        _vector(xp, v, ct) for v in (scale, mean, variance, gscale, goffset))
    epsilon, last = attrs["epsilon"], channels_last(attrs["data_format"])
    if attrs["is_training"]:
        return list(math.bn_grad_grad_training(dy, x, scale, gx, gscale, goffset, epsilon,
                                               last))
    return list(math.bn_grad_grad_inference(dy, x, scale, mean, variance, gx, gscale, goffset,
                                            epsilon, last))


def _global_norm_setup(t: np.ndarray, ctx: KernelContext, vectors: list
                       ) -> tuple[BatchNormMath, Any, type, list[np.ndarray]]:
    """(math, xp, compute type, vectors): float16/32 compute in float32, float64 in float64
    (on the reference backend: native registers these kernels for float16/32 only)."""
    ct = _compute_type(t)
    xp = ctx.math.xp
    return ctx.math, xp, ct, [_vector(xp, v, ct) for v in vectors]


@register_kernel("BatchNormWithGlobalNormalization")
@register_kernel("BatchNormWithGlobalNormalization", backend=FAST, dtypes=FLOAT16_32)
def batch_norm_with_global_normalization(op: Operation, inputs: list[np.ndarray],
                                         ctx: KernelContext) -> list[np.ndarray]:
    """y = (t - m) * (rsqrt(v + eps) * gamma) + beta (gamma only if scale_after_normalization),
    as in docs/tf-semantics.md#global-normalization-forward. float16 is computed in float32
    and rounded once."""
    t, m, v, beta, gamma = inputs
    math, xp, ct, (m, v, beta, gamma) = _global_norm_setup(t, ctx, [m, v, beta, gamma])
    t = xp.ascontiguousarray(t)
    if not op.attrs["scale_after_normalization"]:
        gamma = xp.ones_like(gamma)
    if t.size == 0:
        return [xp.empty(t.shape, t.dtype)]
    return [math.bn_forward_inference(t, gamma, beta, m, v, op.attrs["variance_epsilon"], True)]


@register_kernel("BatchNormWithGlobalNormalizationGrad")
@register_kernel("BatchNormWithGlobalNormalizationGrad", backend=FAST, dtypes=FLOAT16_32)
def batch_norm_with_global_normalization_grad(op: Operation, inputs: list[np.ndarray],
                                              ctx: KernelContext) -> list[np.ndarray]:
    """docs/tf-semantics.md#global-normalization-gradient, with r = rsqrt(v + eps),
    db = sum(backprop), s2 = sum(backprop*(t-m)):

    dx = backprop * r * gamma, dm = -db * r * gamma, dv = -0.5 * s2 * gamma / (v + eps)^1.5,
    dg = s2 * r (gamma and dg replaced by 1 and 0 when not scale_after_normalization).
    """
    t, m, v, gamma, backprop = inputs
    dtype = t.dtype
    math, xp, ct, (m, v, gamma) = _global_norm_setup(t, ctx, [m, v, gamma])
    t, backprop = xp.ascontiguousarray(t), xp.ascontiguousarray(backprop)
    scaled = op.attrs["scale_after_normalization"]
    eps = ct(op.attrs["variance_epsilon"])
    factor = gamma if scaled else xp.ones_like(gamma)
    if t.size == 0:  # empty sums; the vector formulas below still give TF's signed zeros
        dx, s2_times_r, db = xp.empty(t.shape, dtype), xp.zeros_like(v), xp.zeros_like(v)
    else:
        dx, s2_times_r, db = math.bn_backward_inference(backprop, t, factor, m, v, eps, True)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        rstd = xp.asarray(1 / xp.sqrt(v + eps), ct)
        dm = -db * (rstd * factor)
        dv = s2_times_r * (ct(-0.5) / (v + eps)) * factor
        dg = s2_times_r if scaled else xp.zeros_like(s2_times_r)
    return [dx] + [xp.asarray(xp.asarray(vec, ct), dtype) for vec in (dm, dv, db, dg)]
