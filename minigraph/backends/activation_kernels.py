"""numpy and native kernels of the activation ops (``ops.activation_ops``).

numpy: float16/bfloat16 computed in float32 and rounded once; float64 stays float64. The
exponential activations (Sigmoid, Tanh, Elu, Selu, Softplus) are computed in float64 and
rounded once to float32 (then to a half type): the reference is the float32 value nearest
the exact one. The gradient ops and the rational activations follow TensorFlow's order of
operations in the compute type (SoftplusGrad's 1 + e^-x from float64, rounded to it), so
they overflow where TF's do.
native (``backend="native"``, float32): kernels_c/activations* (one expression per
activation) through the ``c_unary``/``c_binary`` wrappers at the bottom: bit for bit the
numpy kernels for the rational ones, within the ulp bounds of kernels_c/activations.h for
the exponential ones. The elementwise ops Erf and Erfc (exact GELU's) have their native
float32 kernels here too: the C library's double erf/erfc rounded once, the same float32
bits as the numpy kernels' float64 evaluation (elementwise_kernels), 10x faster.
"""

from __future__ import annotations

import numpy as np

from minigraph.backends.compute import compute_dtype
from minigraph.backends.native import (
    as_f32,
    c_call,
    check_code,
    check_same_shape,
    fbuf,
    ffi,
    lib,
    num_threads,
    out_array,
    plain_f32,
)
from minigraph.backends.registry import register_kernel, set_replay
from minigraph.framework import dtypes
from minigraph.ops.activation_ops import SELU_SCALE, SELU_SCALE_ALPHA

F32 = np.float32


def _in(x: np.ndarray) -> np.ndarray:
    return x.astype(compute_dtype(x.dtype), copy=False)


def _out(value: np.ndarray, like: np.ndarray) -> np.ndarray:
    """A result computed in the compute type of ``like`` (or in float64), in like's dtype:
    float64 -> float32 -> a half type rounds like the float32 kernel, then once more."""
    if like.dtype != np.float64:
        value = value.astype(F32, copy=False)
    return value.astype(like.dtype, copy=False)


def _exact(function):
    """A kernel computing ``function`` of float64 values (NaN/inf arithmetic silent)."""
    def kernel(op, inputs, ctx):
        with np.errstate(all="ignore"):
            return [_out(function(*(v.astype(np.float64) for v in inputs)), inputs[0])]
    return kernel


def _sigmoid64(x: np.ndarray) -> np.ndarray:
    """1 / (1 + e^-x), as e^x / (1 + e^x) for x < 0 (no overflow, tiny results exact)."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0, e) / (1.0 + e)


for _name, _function in {
    "Sigmoid": _sigmoid64,
    "Tanh": np.tanh,
    "Elu": lambda x: np.where(x < 0, np.expm1(x), x),
    "Selu": lambda x: np.where(x < 0, SELU_SCALE_ALPHA * np.expm1(x), SELU_SCALE * x),
    "Softplus": lambda x: np.logaddexp(0.0, x),
}.items():
    register_kernel(_name)(_exact(_function))


def _rational(function):
    """A kernel computing ``function(*inputs, op)`` in the compute type, as TF orders it."""
    def kernel(op, inputs, ctx):
        with np.errstate(all="ignore"):
            return [function(*(_in(v) for v in inputs), op).astype(inputs[0].dtype,
                                                                    copy=False)]
    return kernel


def _const(value: float, like: np.ndarray):
    """A float constant in like's (compute) type, rounded as TF's static_cast<T>."""
    return like.dtype.type(value)


for _name, _function in {
    "Softsign": lambda x, op: x / (np.abs(x) + 1),
    "LeakyRelu": lambda x, op: np.where(x > 0, x, x * _const(op.attrs["alpha"], x)),
    "SigmoidGrad": lambda y, dy, op: dy.reshape(y.shape) * (y * (1 - y)),  # TF's packet order
    "TanhGrad": lambda y, dy, op: dy.reshape(y.shape) * (1 - y * y),
    "EluGrad": lambda g, y, op: np.where(y < 0, g * (y + 1), g),
    "SeluGrad": lambda g, y, op: np.where(y < 0, g * (y + _const(SELU_SCALE_ALPHA, y)),
                                          g * _const(SELU_SCALE, y)),
    "LeakyReluGrad": lambda g, x, op: np.where(x > 0, g, g * _const(op.attrs["alpha"], g)),
    "SoftsignGrad": lambda g, x, op: g / np.square(np.abs(x) + 1),
    # 1 + e^-x from float64, rounded to the compute type: inf past e^88.7 in float32, as
    # TF's float32 exp (so an infinite gradient there gives NaN, as TF's)
    "SoftplusGrad": lambda g, x, op: g / (np.exp(-x.astype(np.float64)) + 1).astype(x.dtype),
}.items():
    register_kernel(_name)(_rational(_function))


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
# the C loops read element i of every input before writing element i and never read it
# again, so the output may be one of the inputs (the memory planner's ``out=``)
UNARY_INPLACE = {**NATIVE, "inplace": (0,)}
BINARY_INPLACE = {**NATIVE, "inplace": (0, 1)}


@register_kernel("Relu", **UNARY_INPLACE)
def relu_native(op, inputs, ctx, out=None):
    return [c_unary(lib.mg_relu, inputs[0], "Relu", out=out)]


@register_kernel("Relu6", **UNARY_INPLACE)
def relu6_native(op, inputs, ctx, out=None):
    return [c_unary(lib.mg_relu6, inputs[0], "Relu6", out=out)]


@register_kernel("ReluGrad", **BINARY_INPLACE)
def relu_grad_native(op, inputs, ctx, out=None):
    return [c_binary(lib.mg_relu_grad, *inputs, "ReluGrad", out=out)]


@register_kernel("Relu6Grad", **BINARY_INPLACE)
def relu6_grad_native(op, inputs, ctx, out=None):
    return [c_binary(lib.mg_relu6_grad, *inputs, "Relu6Grad", out=out)]


def _unary_replay(c_name: str, alpha: bool = False):
    """The replay maker (``registry.ReplayMaker``) of the native activation ``mg_<c_name>``
    (``c_unary``'s call, its arguments made once; ``alpha``: LeakyRelu's attr its one
    parameter)."""
    def maker(op, values: list, outputs: list, ctx):
        x, y = values[0], outputs[0]
        if not (plain_f32(x) and plain_f32(y) and y.flags.writeable and x.shape == y.shape):
            return None
        params = (op.attrs["alpha"],) if alpha else ()
        return c_call(getattr(lib, c_name), (x.size, fbuf(x), fbuf(y), *params, num_threads()),
                      op.type, (values, outputs))

    return maker



def _native_unary(op_type: str, c_name: str):
    """The float32 kernel of ``op_type``: the C activation ``mg_<c_name>``."""
    def kernel(op, inputs, ctx, out=None):
        return [c_unary(getattr(lib, c_name), inputs[0], op_type, out=out)]
    kernel.__name__ = f"{c_name}_native"
    return kernel


for _name, _c_name in {"Sigmoid": "mg_sigmoid", "Tanh": "mg_tanh", "Elu": "mg_elu",
                       "Selu": "mg_selu", "Softplus": "mg_softplus",
                       "Softsign": "mg_softsign", "Erf": "mg_erf", "Erfc": "mg_erfc"}.items():
    set_replay(register_kernel(_name, **UNARY_INPLACE)(_native_unary(_name, _c_name)),
               _unary_replay(_c_name))


@register_kernel("LeakyRelu", **UNARY_INPLACE)
def leaky_relu_native(op, inputs, ctx, out=None):
    return [c_unary(lib.mg_leaky_relu, inputs[0], "LeakyRelu", op.attrs["alpha"], out=out)]


set_replay(relu_native, _unary_replay("mg_relu"))
set_replay(relu6_native, _unary_replay("mg_relu6"))
set_replay(leaky_relu_native, _unary_replay("mg_leaky_relu", alpha=True))



# ----------------------------------------------------------------------------- C wrappers


def c_unary(function, x, what: str, *params: float, out: np.ndarray | None = None
            ) -> np.ndarray:
    """``function`` (an ``mg_<activation>`` of kernels_c/activations.h, with its float
    ``params`` such as LeakyRelu's alpha) over a float32 copy of x; the result has x's shape
    (0-d included), written into ``out`` where it fits (``native.out_array``)."""
    x = as_f32(x)
    y = out_array(out, x.shape, x)
    code = function(x.size, fbuf(x), fbuf(y), *params, num_threads())
    if code:
        check_code(code, what)
    return y


def c_binary(function, g, features, what: str, out: np.ndarray | None = None
             ) -> np.ndarray:
    """``function`` (an ``mg_<activation>_grad``) of float32 arrays of one shape, which the
    result has (written into ``out`` where it fits): C reads ``g.size`` elements of each."""
    g, features = as_f32(g), as_f32(features)
    if features.shape != g.shape:
        check_same_shape(what, g, features=features)
    dx = out_array(out, g.shape, g, features)
    code = function(g.size, fbuf(g), fbuf(features), fbuf(dx), num_threads())
    if code:
        check_code(code, what)
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

    __slots__ = ("bias", "mean", "k", "offset", "residual", "activation", "_fits", "_struct")

    def __init__(self, bias: np.ndarray | None = None, mean: np.ndarray | None = None,
                 k: np.ndarray | None = None, offset: np.ndarray | None = None,
                 residual: np.ndarray | None = None, activation: int = 0) -> None:
        self.bias, self.mean, self.k, self.offset = bias, mean, k, offset
        self.residual, self.activation = residual, activation
        self._fits: tuple | None = None  # (y_shape, verdict) of the last question
        self._struct: tuple | None = None  # (y_shape, mg_epilogue *) of the last c_struct

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
        :meth:`fits`); keep ``self`` alive while C uses it. The arrays are never replaced
        (and numpy never moves an array's data): the struct of the last shape is kept, so a
        cached epilogue (a fused node's constant vectors) builds it once."""
        last = self._struct
        if last is not None and last[0] == y_shape:
            return last[1]
        if not self.fits(y_shape):
            raise ValueError(f"epilogue: does not fit a float32 result of shape {y_shape}")
        struct = ffi.new("mg_epilogue *")
        for name in _VECTORS:
            array = getattr(self, name)
            if array is not None:
                setattr(struct, name, fbuf(array))
        struct.activation = self.activation
        self._struct = (y_shape, struct)
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
