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
xp = np  # the array functions for this backend's tensors (BatchNormMath.xp)


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
    """Training-mode gradient with the saved statistics (docs/tf-semantics.md#gradient-formulas).

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


def bn_grad_grad_training(dy, x, scale, gx, gscale, goffset, epsilon, channels_last):
    """Second order of the training-mode gradient, statistics recomputed from x
    (docs/tf-semantics.md#autodiff-second-order).

    With mu, var the batch mean and biased variance of x, r = rsqrt(var + eps),
    xh = (x - mu) r and per-channel means mdy, mgx, mdyxh = mean(dy xh), mgxxh = mean(gx xh),
    mgxdy = mean(gx dy), the cotangents (gx, gscale, goffset) of
    (x_backprop, scale_backprop, offset_backprop) pull back to
      d_dy    = scale r (gx - mgx - xh mgxxh) + gscale xh + goffset
      d_scale = r n (mgxdy - mgx mdy - mgxxh mdyxh)
      d_x     = -scale r^2 (xh (mgxdy - mgx mdy - 3 mdyxh mgxxh) + mgxxh (dy - mdy)
                            + mdyxh (gx - mgx)) + gscale r (dy - mdy - xh mdyxh)
    """
    layout = _Layout(x, channels_last)
    ct, ch = layout.compute, layout.channel
    x_c, dy_c, gx_c = (t.astype(ct) for t in (x, dy, gx))
    mean = layout.mean(x_c)
    centered = x_c - ch(mean)
    with np.errstate(all="ignore"):
        rstd = _rsqrt(layout.mean(centered * centered) + ct(epsilon))
        xh = centered * ch(rstd)
        m_dy, m_gx = ch(layout.mean(dy_c)), ch(layout.mean(gx_c))
        m_dy_xh, m_gx_xh = ch(layout.mean(dy_c * xh)), ch(layout.mean(gx_c * xh))
        m_gx_dy = ch(layout.mean(gx_c * dy_c))
        s, r = ch(scale), ch(rstd)
        d_dy = s * r * (gx_c - m_gx - xh * m_gx_xh) + ch(gscale) * xh + ch(goffset)
        d_scale = rstd * ct(layout.count) * (m_gx_dy - m_gx * m_dy - m_gx_xh * m_dy_xh
                                              ).reshape(-1)
        d_x = -s * r * r * (xh * (m_gx_dy - m_gx * m_dy - 3 * m_dy_xh * m_gx_xh)
                            + m_gx_xh * (dy_c - m_dy) + m_dy_xh * (gx_c - m_gx)) \
            + ch(gscale) * r * (dy_c - m_dy - xh * m_dy_xh)
        return d_dy.astype(x.dtype), d_x.astype(x.dtype), d_scale.astype(ct)


def bn_grad_grad_inference(dy, x, scale, mean, variance, gx, gscale, goffset, epsilon,
                           channels_last):
    """Second order of the inference-mode gradient (closed form in
    docs/tf-semantics.md#autodiff-second-order), r = rsqrt(var+eps):
    d_dy = gx scale r + gscale (x - mean) r + goffset; d_x = gscale dy r;
    d_scale = sum(gx dy r)."""
    layout = _Layout(x, channels_last)
    ct, ch = layout.compute, layout.channel
    x_c, dy_c, gx_c = (t.astype(ct) for t in (x, dy, gx))
    with np.errstate(all="ignore"):
        rstd = _rsqrt(np.asarray(variance, ct) + ct(epsilon))
        r = ch(rstd)
        d_dy = gx_c * ch(np.asarray(scale, ct) * rstd) + ch(gscale) * (x_c - ch(mean)) * r \
            + ch(goffset)
        d_x = ch(gscale) * dy_c * r
        d_scale = layout.total(gx_c * dy_c) * rstd
        return d_dy.astype(x.dtype), d_x.astype(x.dtype), d_scale.astype(ct)
