"""numpy and native kernels of the activation ops (``ops.activation_ops``).

numpy: float16/bfloat16 computed in float32 and rounded once; float64 stays float64.
native (``backend="native"``, float32): kernels_c/activations* (one expression per
activation) through the ``c_unary``/``c_binary`` wrappers at the bottom.
"""

from __future__ import annotations

import numpy as np

from minigraph.backends.compute import compute_dtype
from minigraph.backends.native import (
    as_f32,
    check_code,
    check_same_shape,
    fbuf,
    ffi,
    lib,
    num_threads,
)
from minigraph.backends.registry import register_kernel
from minigraph.framework import dtypes

F32 = np.float32


def _in(x: np.ndarray) -> np.ndarray:
    return x.astype(compute_dtype(x.dtype), copy=False)


@register_kernel("Relu")
def relu(op, inputs, ctx):
    x = inputs[0]
    return [np.maximum(_in(x), 0).astype(x.dtype, copy=False)]


@register_kernel("Relu6")
def relu6(op, inputs, ctx):
    """min(max(x, 0), 6); NaN propagates."""
    x = inputs[0]
    return [np.minimum(np.maximum(_in(x), 0), 6).astype(x.dtype, copy=False)]


def _times_mask(g: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """g * mask (0/1) in g's compute type, rounded once: TF's product, so an infinite or
    NaN gradient under a 0 gives NaN and a negative one -0."""
    ct = compute_dtype(g.dtype)
    with np.errstate(invalid="ignore"):
        return (_in(g) * mask.astype(ct)).astype(g.dtype, copy=False)


@register_kernel("ReluGrad")
def relu_grad(op, inputs, ctx):
    """gradients * (features > 0)."""
    g, features = inputs
    return [_times_mask(g, _in(features) > 0)]


@register_kernel("Relu6Grad")
def relu6_grad(op, inputs, ctx):
    """gradients * (0 < features < 6)."""
    g, features = inputs
    x = _in(features)
    return [_times_mask(g, (x > 0) & (x < 6))]


NATIVE = {"backend": "native", "dtypes": (dtypes.float32,)}


@register_kernel("Relu", **NATIVE)
def relu_native(op, inputs, ctx):
    return [c_unary(lib.mg_relu, inputs[0], "Relu")]


@register_kernel("Relu6", **NATIVE)
def relu6_native(op, inputs, ctx):
    return [c_unary(lib.mg_relu6, inputs[0], "Relu6")]


@register_kernel("ReluGrad", **NATIVE)
def relu_grad_native(op, inputs, ctx):
    return [c_binary(lib.mg_relu_grad, *inputs, "ReluGrad")]


@register_kernel("Relu6Grad", **NATIVE)
def relu6_grad_native(op, inputs, ctx):
    return [c_binary(lib.mg_relu6_grad, *inputs, "Relu6Grad")]


# ----------------------------------------------------------------------------- C wrappers


def c_unary(function, x, what: str) -> np.ndarray:
    """``function`` (an ``mg_<activation>`` of kernels_c/activations.h) over a float32 copy
    of x; the result has x's shape (0-d included)."""
    x = as_f32(x)
    y = np.empty(x.shape, F32)
    check_code(function(x.size, fbuf(x), fbuf(y), num_threads()), what)
    return y


def c_binary(function, g, features, what: str) -> np.ndarray:
    """``function`` (an ``mg_<activation>_grad``) of float32 arrays of one shape, which the
    result has: C reads ``g.size`` elements of each."""
    g, features = as_f32(g), as_f32(features)
    check_same_shape(what, g, features=features)
    dx = np.empty(g.shape, F32)
    check_code(function(g.size, fbuf(g), fbuf(features), fbuf(dx), num_threads()), what)
    return dx


def c_relu(x) -> np.ndarray:
    """x > 0 ? x : +0 of a float32 array, NaN stays NaN (as numpy.maximum(x, 0))."""
    return c_unary(lib.mg_relu, x, "Relu")


def c_relu_grad(g, features) -> np.ndarray:
    """g * (features > 0) of float32 arrays of one shape."""
    return c_binary(lib.mg_relu_grad, g, features, "ReluGrad")


class Epilogue:
    """A convolution's (or matmul's) elementwise successors, fused (``mg_epilogue``,
    kernels_c/activations.h): + bias, the batch-norm inference affine ``(y - mean) * k +
    offset``, + residual, then activation 0 (none), 1 (Relu) or 2 (Relu6); a stage is
    skipped where its values are None. Each vector holds one float32 per channel, the
    residual is laid out as the result."""

    __slots__ = ("bias", "mean", "k", "offset", "residual", "activation", "_fits")

    def __init__(self, bias: np.ndarray | None = None, mean: np.ndarray | None = None,
                 k: np.ndarray | None = None, offset: np.ndarray | None = None,
                 residual: np.ndarray | None = None, activation: int = 0) -> None:
        self.bias, self.mean, self.k, self.offset = bias, mean, k, offset
        self.residual, self.activation = residual, activation
        self._fits: tuple | None = None  # (y_shape, verdict) of the last question

    def fits(self, y_shape: tuple[int, ...]) -> bool:
        """Whether C can apply it to a float32 result of ``y_shape``: every vector one
        float32 per channel, the residual float32 of that shape, all C-contiguous and
        aligned (C reads exactly that much); mean, k and offset all given or none. (The
        arrays are never replaced: the verdict for a shape is kept.)"""
        if self._fits is None or self._fits[0] != y_shape:
            self._fits = (y_shape, self._check(y_shape))
        return self._fits[1]

    def _check(self, y_shape: tuple[int, ...]) -> bool:
        if not y_shape or 0 in y_shape or self.activation not in (0, 1, 2):
            return False
        vectors = (self.bias, self.mean, self.k, self.offset)
        if any(v is not None and not _is_f32_array(v, y_shape[-1:]) for v in vectors):
            return False
        if (self.mean is None) != (self.k is None) or (self.mean is None) != (self.offset is None):
            return False
        return self.residual is None or _is_f32_array(self.residual, y_shape)

    def c_struct(self, y_shape: tuple[int, ...]):
        """The ``mg_epilogue *`` for a result of ``y_shape`` (ValueError unless it
        :meth:`fits`); keep ``self`` alive while C uses it."""
        if not self.fits(y_shape):
            raise ValueError(f"epilogue: does not fit a float32 result of shape {y_shape}")
        struct = ffi.new("mg_epilogue *")
        for name in _VECTORS:
            array = getattr(self, name)
            if array is not None:
                setattr(struct, name, fbuf(array))
        struct.activation = self.activation
        return struct


_VECTORS = ("bias", "mean", "k", "offset", "residual")


def _is_f32_array(array, shape: tuple[int, ...]) -> bool:
    if type(array) is not np.ndarray or array.shape != shape or array.dtype != F32:
        return False
    flags = array.flags
    return flags.c_contiguous and flags.aligned


def c_channel_epilogue(y: np.ndarray, epilogue: Epilogue) -> None:
    """``mg_channel_epilogue``: ``epilogue`` in place on the float32 C-contiguous array
    ``y`` (rows of its last dimension's channels)."""
    if not (_is_f32_array(y, y.shape) and y.flags.writeable):
        raise ValueError("channel_epilogue: y must be a writable aligned C-contiguous float32 "
                         "array")
    channels = y.shape[-1]  # c_struct: y has a dimension, none of them 0
    c_epilogue = epilogue.c_struct(y.shape)
    check_code(lib.mg_channel_epilogue(y.size // channels, channels, fbuf(y), c_epilogue,
                                       num_threads()),
               "channel epilogue")


def c_reduce_rows(x: np.ndarray, outer: int, rows: int, channels: int, mean: bool
                  ) -> np.ndarray:
    """``mg_reduce_rows``: the sums (means) over the middle axis of x viewed as [outer][rows]
    [channels], in numpy's order; x must hold exactly ``outer * rows * channels`` floats."""
    x = as_f32(x)
    if x.size != outer * rows * channels or channels <= 0:
        raise ValueError(f"reduce_rows: x holds {x.size} floats, not {outer}x{rows}x{channels}")
    y = np.empty((outer, channels), F32)
    check_code(lib.mg_reduce_rows(outer, rows, channels, fbuf(x), fbuf(y), int(mean),
                                  num_threads()), "Mean" if mean else "Sum")
    return y
