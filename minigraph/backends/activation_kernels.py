"""numpy and native kernels of the activation ops (``ops.activation_ops``).

numpy: float16/bfloat16 computed in float32 and rounded once; float64 stays float64.
native (``backend="native"``, float32): kernels_c/ activations in C through the ``c_*``
wrappers at the bottom.
"""

from __future__ import annotations

import numpy as np

from minigraph.backends.compute import compute_dtype, masked
from minigraph.backends.native import as_f32, check_code, check_same_shape, fbuf, lib, num_threads
from minigraph.backends.registry import register_kernel
from minigraph.framework import dtypes

F32 = np.float32


def _in(x: np.ndarray) -> np.ndarray:
    return x.astype(compute_dtype(x.dtype), copy=False)


@register_kernel("Relu")
def relu(op, inputs, ctx):
    x = inputs[0]
    return [np.maximum(_in(x), 0).astype(x.dtype, copy=False)]


@register_kernel("Relu", backend="native", dtypes=(dtypes.float32,))
def relu_native(op, inputs, ctx):
    return [c_relu(inputs[0])]


@register_kernel("ReluGrad")
def relu_grad(op, inputs, ctx):
    """gradients where features > 0, else 0."""
    g, features = inputs
    return [masked(g, _in(features) > 0)]


@register_kernel("ReluGrad", backend="native", dtypes=(dtypes.float32,))
def relu_grad_native(op, inputs, ctx):
    return [c_relu_grad(*inputs)]


# ----------------------------------------------------------------------------- C wrappers


def c_relu(x):
    """x > 0 ? x : +0 of a float32 array, NaN stays NaN (as numpy.maximum(x, 0)); the
    result has x's shape (0-d included)."""
    x = as_f32(x)
    y = np.empty(x.shape, F32)
    check_code(lib.mg_relu(x.size, fbuf(x), fbuf(y), num_threads()), "Relu")
    return y


def c_relu_grad(g, features):
    """g where features > 0, else +0 (float32 arrays of one shape, which the result has)."""
    g, features = as_f32(g), as_f32(features)
    check_same_shape("ReluGrad", g, features=features)
    dx = np.empty(g.shape, F32)
    check_code(lib.mg_relu_grad(g.size, fbuf(g), fbuf(features), fbuf(dx), num_threads()),
              "ReluGrad")
    return dx
