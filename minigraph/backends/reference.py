"""The numpy reference backend: the ground truth every faster backend is tested against.

It implements the batch-norm math primitives with the same signatures as the native
(C) backend. Tensors may be float16, bfloat16 or float32 (computed in float32 and rounded
once to the storage type, as TensorFlow does) or float64 (computed in float64, used by
BatchNormWithGlobalNormalization). Per-channel sums are accumulated in float64 and rounded
to the compute type, so the reference is at least as accurate as any kernel it checks.

Layout: ``channels_last`` puts the channel on the last axis (NHWC/NDHWC), otherwise on
axis 1 (NCHW/NCDHW). Reductions run over every other axis, in place, with no transposes.
"""

from __future__ import annotations

import numpy as np

NAME = "reference"


def _compute_type(x: np.ndarray) -> type:
    return np.float64 if x.dtype == np.float64 else np.float32


class _Layout:
    """Reduction axes and a broadcastable view of per-channel vectors for one tensor."""

    def __init__(self, x: np.ndarray, channels_last: bool) -> None:
        self.axis = x.ndim - 1 if channels_last else 1
        self.axes = tuple(a for a in range(x.ndim) if a != self.axis)
        self.channel_shape = [1] * x.ndim
        self.channel_shape[self.axis] = x.shape[self.axis]
        self.count = x.size // max(x.shape[self.axis], 1)
        self.compute = _compute_type(x)

    def channel(self, vector: np.ndarray) -> np.ndarray:
        """A [C] vector reshaped to broadcast along the channel axis, in the compute type."""
        return np.asarray(vector, self.compute).reshape(self.channel_shape)

    def total(self, values: np.ndarray) -> np.ndarray:
        """Per-channel sum, accumulated in float64, returned in the compute type."""
        return values.sum(axis=self.axes, dtype=np.float64).astype(self.compute)

    def mean(self, values: np.ndarray) -> np.ndarray:
        return (values.sum(axis=self.axes, dtype=np.float64) / self.count).astype(self.compute)


def _rsqrt(values: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return (1 / np.sqrt(values)).astype(values.dtype)


def _normalize(x: np.ndarray, layout: _Layout, scale, offset, mean, variance, epsilon
               ) -> np.ndarray:
    """y = (x - mean) * (scale * rsqrt(variance + epsilon)) + offset, rounded once to x.dtype."""
    ct = layout.compute
    factor = np.asarray(scale, ct) * _rsqrt(np.asarray(variance, ct) + ct(epsilon))
    with np.errstate(invalid="ignore", over="ignore"):
        y = (x.astype(ct) - layout.channel(mean)) * layout.channel(factor) + layout.channel(offset)
        return y.astype(x.dtype)


def bn_forward_training(x, scale, offset, epsilon, channels_last):
    """Batch statistics (two-pass: mean, then the mean of centered squares) and y.

    Returns (y, mean, biased variance), the statistics float32 (float64 for float64 x).
    """
    layout = _Layout(x, channels_last)
    x_c = x.astype(layout.compute)
    mean = layout.mean(x_c)
    centered = x_c - layout.channel(mean)
    with np.errstate(over="ignore", invalid="ignore"):
        variance = layout.mean(centered * centered)
    return _normalize(x, layout, scale, offset, mean, variance, epsilon), mean, variance


def bn_forward_inference(x, scale, offset, mean, variance, epsilon, channels_last):
    return _normalize(x, _Layout(x, channels_last), scale, offset, mean, variance, epsilon)


def _backward_sums(dy, x, mean, variance, epsilon, layout):
    ct = layout.compute
    dy_c = dy.astype(ct)
    x_centered = x.astype(ct) - layout.channel(mean)
    rstd = _rsqrt(np.asarray(variance, ct) + ct(epsilon))
    sum_dy = layout.total(dy_c)
    sum_dy_xc = layout.total(dy_c * x_centered)
    return dy_c, x_centered, rstd, sum_dy, sum_dy_xc


def bn_backward_training(dy, x, scale, mean, variance, epsilon, channels_last):
    """Training-mode gradient with the saved statistics (TF_SEMANTICS §3.2).

    dx = scale*r*(dy - sum(dy)/n - xc*(sum(dy*xc)/n)*r^2); scale_backprop = sum(dy*xc)*r;
    offset_backprop = sum(dy), where r = rsqrt(variance + epsilon) and xc = x - mean.
    """
    layout = _Layout(x, channels_last)
    ct = layout.compute
    dy_c, xc, rstd, sum_dy, sum_dy_xc = _backward_sums(dy, x, mean, variance, epsilon, layout)
    n = ct(layout.count)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        dx = layout.channel(np.asarray(scale, ct) * rstd) * (
            dy_c - layout.channel(sum_dy / n)
            - xc * layout.channel((sum_dy_xc / n) * rstd * rstd))
        return dx.astype(x.dtype), (sum_dy_xc * rstd).astype(ct), sum_dy


def bn_backward_inference(dy, x, scale, mean, variance, epsilon, channels_last):
    """Inference-mode gradient: dx = dy*scale*r, same scale/offset backprops as training."""
    layout = _Layout(x, channels_last)
    ct = layout.compute
    dy_c, _, rstd, sum_dy, sum_dy_xc = _backward_sums(dy, x, mean, variance, epsilon, layout)
    with np.errstate(invalid="ignore", over="ignore"):
        dx = dy_c * layout.channel(np.asarray(scale, ct) * rstd)
        return dx.astype(x.dtype), (sum_dy_xc * rstd).astype(ct), sum_dy
