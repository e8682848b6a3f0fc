"""The native backend: batch-norm math in C (SIMD + OpenMP), loaded from ``minigraph._native``.

The extension is built from ``kernels_c/`` by ``pip install`` (cffi, API mode); when it could
not be built, :func:`available` is False and :func:`unavailable_reason` says why, and the
framework falls back to the numpy reference backend.

Tensors are C-contiguous float32 / float16 / bfloat16 arrays (rank >= 2, in practice 4 or 5),
all tensors of one call with x's dtype and shape; ``channels_last`` puts the channel on the
last axis (NHWC/NDHWC), otherwise on axis 1 (NCHW/NCDHW). Per-channel vectors are float32
[C], inputs and outputs. The C code sees the tensor as (outer, C, inner) and never transposes.
Math is float32 with per-channel sums combined in double in a fixed order, so results are
bit-identical whatever the thread count; float16/bfloat16 results are rounded once. The GIL
is released while the C code runs.

``MINIGRAPH_NUM_THREADS`` sets the thread count (an integer from 1 to :data:`MAX_THREADS`;
default: ``os.cpu_count()``), looked up at every call; :func:`set_num_threads` overrides it.
``MINIGRAPH_NATIVE_ISA`` (``avx512``, ``avx2`` or ``scalar``) picks a narrower instruction
set than the best one the CPU has, at import; :func:`set_isa` does it later. An invalid value
of either variable warns once, naming it, and the default is used.
"""

from __future__ import annotations

import os
import warnings

import ml_dtypes
import numpy as np

from minigraph.framework.errors import InvalidArgumentError

try:
    from minigraph._native import ffi, lib
except ImportError as error:  # not built (no compiler at install time) or built for another Python
    ffi = lib = None
    _REASON: str | None = (
        f"the C extension minigraph._native is not available ({error}); reinstall minigraph "
        "with a C compiler (gcc/clang with OpenMP) to build it")
else:
    _REASON = None

NAME = "native"
xp = np  # the array functions for this backend's tensors (BatchNormMath.xp)
F32 = np.float32
ISAS = ("scalar", "avx2", "avx512")  # index = the C code MG_BN_ISA_*
_DTYPE_CODES = {np.dtype(np.float32): 0, np.dtype(np.float16): 1,
                np.dtype(ml_dtypes.bfloat16): 2}


def available() -> bool:
    """True iff the C extension was imported."""
    return lib is not None


def unavailable_reason() -> str | None:
    """Why the extension is missing, or None when it is available."""
    return _REASON


# --------------------------------------------------------------------------------------------
# configuration: thread count and instruction set, each checked once with a clear warning

_CPU_COUNT = os.cpu_count() or 1
_THREADS_VAR = "MINIGRAPH_NUM_THREADS"
_ISA_VAR = "MINIGRAPH_NATIVE_ISA"
# The most threads a call may use. The C kernels take an ``int`` (so 99999999999 cannot
# even be passed), and past the core count threads only oversubscribe; 1024 is above any
# machine's core count minigraph targets, so it only catches typos and nonsense.
MAX_THREADS = 1024
DEFAULT_THREADS = min(_CPU_COUNT, MAX_THREADS)
try:  # os.environ's own mapping: a plain dict lookup instead of ~0.5 us of encoding per call
    _ENV_DATA, _ENV_KEY = os.environ._data, os.environ.encodekey(_THREADS_VAR)
except AttributeError:  # pragma: no cover - not CPython's os.environ
    _ENV_DATA, _ENV_KEY = os.environ, _THREADS_VAR
_threads_cache: tuple[object, int] = (None, DEFAULT_THREADS)
_threads_override: int | None = None


def _thread_count(value: object) -> int | None:
    """``value`` (an int, or the text of one) as a thread count in [1, MAX_THREADS], or None."""
    if isinstance(value, (str, bytes)):
        text = value.decode(errors="replace") if isinstance(value, bytes) else value
        text = text.strip()
        if not (text.isascii() and text.isdigit() and len(text) <= 6):
            return None
        value = int(text)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        return None
    return int(value) if 1 <= value <= MAX_THREADS else None


def _threads_from_environment(raw: object) -> int:
    """The thread count ``$MINIGRAPH_NUM_THREADS`` (``raw``) asks for; an invalid value warns
    once, naming the variable and the value, and gives the default."""
    if raw is None or not raw.strip():  # unset or empty: the default, silently
        return DEFAULT_THREADS
    threads = _thread_count(raw)
    if threads is None:
        text = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
        warnings.warn(f"minigraph: ignoring {_THREADS_VAR}={text!r}: it must be an integer "
                      f"from 1 to {MAX_THREADS}; using {DEFAULT_THREADS} threads (the CPU "
                      "count)", RuntimeWarning, stacklevel=3)
        return DEFAULT_THREADS
    return threads


def num_threads() -> int:
    """Threads a call may use: the :func:`set_num_threads` value if one was set, else
    ``$MINIGRAPH_NUM_THREADS`` if it is an integer in [1, :data:`MAX_THREADS`], else
    ``os.cpu_count()`` (capped at MAX_THREADS).

    The variable is looked up at every call (a dict lookup) but parsed and checked only when
    its value changed, so an invalid value warns once, not at every kernel call.
    """
    global _threads_cache
    if _threads_override is not None:
        return _threads_override
    raw = _ENV_DATA.get(_ENV_KEY)
    if raw != _threads_cache[0]:
        _threads_cache = (raw, _threads_from_environment(raw))
    return _threads_cache[1]


def set_num_threads(threads: int | None) -> None:
    """Make every native kernel use ``threads`` threads (an int in [1, :data:`MAX_THREADS`]),
    overriding ``$MINIGRAPH_NUM_THREADS``; ``None`` goes back to the environment/default.
    Results are bit-identical whatever the count."""
    global _threads_override
    if threads is None:
        _threads_override = None
        return
    checked = _thread_count(threads) if not isinstance(threads, (str, bytes)) else None
    if checked is None:
        raise InvalidArgumentError(f"set_num_threads: the thread count must be an integer "
                                   f"from 1 to {MAX_THREADS}, got {threads!r}")
    _threads_override = checked


def isa() -> str:
    """The instruction set the kernels use now: "avx512", "avx2" or "scalar"."""
    return ISAS[lib.mg_bn_isa()]


def best_isa() -> str:
    """The best instruction set this CPU supports."""
    return ISAS[lib.mg_bn_best_isa()]


def set_isa(name: str) -> str:
    """Use instruction set ``name`` if the CPU supports it (else keep the current one);
    returns the one in use. Meant for tests and benchmarks."""
    if name not in ISAS:
        raise InvalidArgumentError(f"unknown instruction set {name!r}; expected one of {ISAS}")
    return ISAS[lib.mg_bn_set_isa(ISAS.index(name))]


def _isa_from_environment() -> None:
    """Apply ``$MINIGRAPH_NATIVE_ISA`` at import. An unknown name, or one this CPU cannot
    run, warns once (naming the variable and the value) and keeps the best instruction set:
    a typo must not break every session."""
    raw = os.environ.get(_ISA_VAR, "")
    name = raw.strip().lower()
    if lib is None or not name:
        return
    if name not in ISAS:
        warnings.warn(f"minigraph: ignoring {_ISA_VAR}={raw!r}: expected one of "
                      f"{', '.join(ISAS)}; using {best_isa()}", RuntimeWarning, stacklevel=2)
        return
    used = set_isa(name)
    if used != name:
        warnings.warn(f"minigraph: {_ISA_VAR}={raw!r}: this CPU does not support {name}; "
                      f"using {used}", RuntimeWarning, stacklevel=2)


_isa_from_environment()


# --------------------------------------------------------------------------------------------
# argument checks and buffers


def _geometry(x: np.ndarray, channels_last: bool) -> tuple[int, int, int, int]:
    """(dtype code, outer, C, inner) of x viewed as (outer, C, inner)."""
    code = _DTYPE_CODES.get(x.dtype)
    if code is None:
        raise TypeError(f"native batch norm: x must be float32, float16 or bfloat16, "
                        f"got {x.dtype}")
    flags = x.flags
    if x.ndim < 2 or not (flags.c_contiguous and flags.aligned):
        raise ValueError(f"native batch norm: x must be C-contiguous and aligned with rank "
                         f">= 2, got shape {x.shape}")
    shape = x.shape
    if channels_last:
        channels = shape[-1]
        return code, x.size // channels if channels else 0, channels, 1
    inner = 1
    for dim in shape[2:]:
        inner *= dim
    return code, shape[0], shape[1], inner


def _same_as_x(x: np.ndarray, *tensors: np.ndarray) -> None:
    for tensor in tensors:
        flags = tensor.flags
        if (tensor.dtype != x.dtype or tensor.shape != x.shape
                or not (flags.c_contiguous and flags.aligned)):
            raise ValueError(f"native batch norm: dy/gx must be C-contiguous aligned "
                             f"{x.dtype} arrays of shape {x.shape}, got {tensor.dtype} "
                             f"{tensor.shape}")


def _vectors(channels: int, *vectors: np.ndarray) -> None:
    shape = (channels,)
    for vector in vectors:
        flags = vector.flags
        if (vector.dtype != F32 or vector.shape != shape
                or not (flags.c_contiguous and flags.aligned)):
            raise ValueError(f"native batch norm: per-channel vectors must be contiguous "
                             f"float32 arrays of shape {shape}, got {vector.dtype} "
                             f"{vector.shape}")


def _buf(array: np.ndarray):
    return ffi.from_buffer(array)


def _fbuf(array: np.ndarray):
    return ffi.from_buffer("float[]", array)


def _check(code: int) -> None:
    if code == 2:
        raise MemoryError("native batch norm: out of memory for the kernel's workspace")
    if code:
        raise ValueError("native batch norm: invalid arguments")


# --------------------------------------------------------------------------------------------
# the math primitives (same signatures as backends.reference)


def bn_forward_training(x, scale, offset, epsilon, channels_last):
    """(y, mean, biased variance): mu = mean(x), var = mean((x - mu)^2) per channel,
    y = (x - mu) * (scale * rsqrt(var + epsilon)) + offset."""
    code, outer, channels, inner = _geometry(x, channels_last)
    _vectors(channels, scale, offset)
    y = np.empty(x.shape, x.dtype)
    mean = np.empty(channels, F32)
    variance = np.empty(channels, F32)
    _check(lib.mg_bn_forward_training(
        code, outer, channels, inner, _buf(x), _fbuf(scale), _fbuf(offset), float(epsilon),
        _buf(y), _fbuf(mean), _fbuf(variance), num_threads()))
    return y, mean, variance


def bn_forward_inference(x, scale, offset, mean, variance, epsilon, channels_last):
    """y = (x - mean) * (scale * rsqrt(variance + epsilon)) + offset."""
    code, outer, channels, inner = _geometry(x, channels_last)
    _vectors(channels, scale, offset, mean, variance)
    y = np.empty(x.shape, x.dtype)
    _check(lib.mg_bn_forward_inference(
        code, outer, channels, inner, _buf(x), _fbuf(scale), _fbuf(offset), _fbuf(mean),
        _fbuf(variance), float(epsilon), _buf(y), num_threads()))
    return y


def _backward(function, dy, x, scale, mean, variance, epsilon, channels_last):
    code, outer, channels, inner = _geometry(x, channels_last)
    _same_as_x(x, dy)
    _vectors(channels, scale, mean, variance)
    dx = np.empty(x.shape, x.dtype)
    scale_backprop = np.empty(channels, F32)
    offset_backprop = np.empty(channels, F32)
    _check(function(
        code, outer, channels, inner, _buf(dy), _buf(x), _fbuf(scale), _fbuf(mean),
        _fbuf(variance), float(epsilon), _buf(dx), _fbuf(scale_backprop),
        _fbuf(offset_backprop), num_threads()))
    return dx, scale_backprop, offset_backprop


def bn_backward_training(dy, x, scale, mean, variance, epsilon, channels_last):
    """(dx, scale_backprop, offset_backprop) with the given batch mean / biased variance:
    r = rsqrt(variance + epsilon), xc = x - mean, offset_backprop = sum(dy),
    scale_backprop = sum(dy * xc) * r,
    dx = scale * r * (dy - sum(dy)/n - xc * (sum(dy * xc)/n) * r^2)."""
    return _backward(lib.mg_bn_backward_training, dy, x, scale, mean, variance, epsilon,
                     channels_last)


def bn_backward_inference(dy, x, scale, mean, variance, epsilon, channels_last):
    """As bn_backward_training, but dx = dy * scale * r (the statistics are constants)."""
    return _backward(lib.mg_bn_backward_inference, dy, x, scale, mean, variance, epsilon,
                     channels_last)


def bn_grad_grad_training(dy, x, scale, gx, gscale, goffset, epsilon, channels_last):
    """(d_dy, d_x, d_scale): the gradient of the training backward's (dx, scale_backprop,
    offset_backprop), statistics recomputed from x, against cotangents (gx, gscale, goffset).
    See kernels_c/batch_norm.c (mg_bn_grad_grad_training) for the formulas."""
    code, outer, channels, inner = _geometry(x, channels_last)
    _same_as_x(x, dy, gx)
    _vectors(channels, scale, gscale, goffset)
    d_dy = np.empty(x.shape, x.dtype)
    d_x = np.empty(x.shape, x.dtype)
    d_scale = np.empty(channels, F32)
    _check(lib.mg_bn_grad_grad_training(
        code, outer, channels, inner, _buf(dy), _buf(x), _fbuf(scale), _buf(gx),
        _fbuf(gscale), _fbuf(goffset), float(epsilon), _buf(d_dy), _buf(d_x), _fbuf(d_scale),
        num_threads()))
    return d_dy, d_x, d_scale


def bn_grad_grad_inference(dy, x, scale, mean, variance, gx, gscale, goffset, epsilon,
                           channels_last):
    """(d_dy, d_x, d_scale) of the inference backward: r = rsqrt(variance + epsilon),
    d_dy = gx*scale*r + gscale*(x - mean)*r + goffset, d_x = gscale*dy*r,
    d_scale = sum(gx*dy*r)."""
    code, outer, channels, inner = _geometry(x, channels_last)
    _same_as_x(x, dy, gx)
    _vectors(channels, scale, mean, variance, gscale, goffset)
    d_dy = np.empty(x.shape, x.dtype)
    d_x = np.empty(x.shape, x.dtype)
    d_scale = np.empty(channels, F32)
    _check(lib.mg_bn_grad_grad_inference(
        code, outer, channels, inner, _buf(dy), _buf(x), _fbuf(scale), _fbuf(mean),
        _fbuf(variance), _buf(gx), _fbuf(gscale), _fbuf(goffset), float(epsilon), _buf(d_dy),
        _buf(d_x), _fbuf(d_scale), num_threads()))
    return d_dy, d_x, d_scale


# --------------------------------------------------------------------------------------------
# convolutions, max pooling, ReLU and Adam (kernels_c/conv.c, pool.c): float32 fast paths for
# the numpy kernels (backends.conv_kernels, nn_kernels, state_kernels), which call them when
# the session's math backend is this module and the case is one the C code handles
# (float32; convolutions with stride 1, dilation 1 and SAME/VALID padding; max-pool
# gradients with non-overlapping windows). Geometry (pads, output size) comes from the op's
# Window. Results are bit-identical for any thread count.


def _check_nn(code: int, what: str) -> None:
    if code == 2:
        raise MemoryError(f"native {what}: out of memory for the kernel's scratch")
    if code:
        raise ValueError(f"native {what}: invalid arguments")


def _f32(array) -> np.ndarray:
    """``array`` as a C-contiguous, aligned float32 ndarray of exactly its shape (a 0-d
    array stays 0-d). Copies only when needed: another dtype or byte order, a strided view,
    or misaligned data (a buffer offset by a byte), which C must never see."""
    return np.require(array, F32, ("C", "A", "E"))


_INT32_MAX = 2**31 - 1


def _sizes(what: str, **values) -> list[int]:
    """The integer geometry arguments, each checked to lie in [0, 2**31): C computes offsets
    like ``row * stride + ksize`` in int64, which such values can never overflow."""
    checked = []
    for name, value in values.items():
        if not isinstance(value, (int, np.integer)) or not 0 <= value <= _INT32_MAX:
            raise ValueError(f"native {what}: {name} = {value} is outside [0, 2**31)")
        checked.append(int(value))
    return checked


def _rank4(what: str, **arrays: np.ndarray) -> None:
    for name, array in arrays.items():
        if array.ndim != 4:
            raise ValueError(f"native {what}: {name} must be 4-dimensional, got shape "
                             f"{array.shape}")


def _nhwc_dims(shape: tuple, channels_last: bool) -> tuple[int, int, int, int]:
    n, a, b, c = shape
    return (n, a, b, c) if channels_last else (n, b, c, a)


def _shaped(n: int, h: int, w: int, c: int, channels_last: bool) -> tuple[int, ...]:
    return (n, h, w, c) if channels_last else (n, c, h, w)


def _conv_filter(what: str, f: np.ndarray, in_channels: int, out_channels: int | None
                 ) -> tuple[int, int, int, int]:
    """(kh, kw, c, co) of an HWIO filter whose in (and out, when given) channels must be the
    tensors' own: C reads ``kh * kw * c * co`` floats of it."""
    kh, kw, c, co = f.shape
    if c != in_channels or (out_channels is not None and co != out_channels) or not f.size:
        raise ValueError(f"native {what}: filter shape {f.shape} does not match "
                         f"{in_channels} input / {out_channels} output channels (or is empty)")
    return kh, kw, c, co


def conv2d(x, f, pads, out_hw, channels_last):
    """Cross-correlation of x (NHWC or NCHW) with the HWIO filter f, stride 1, dilation 1;
    ``pads`` = ((top, bottom), (left, right)), ``out_hw`` the output's (height, width):
    ``y[n, p, q, o] = sum_{i, j, ci} x[n, p + i - top, q + j - left, ci] * f[i, j, ci, o]``
    (zero outside x)."""
    x, f = _f32(x), _f32(f)
    _rank4("Conv2D", x=x, filter=f)
    n, h, w, c = _nhwc_dims(x.shape, channels_last)
    kh, kw, _, co = _conv_filter("Conv2D", f, c, None)
    top, left, oh, ow = _sizes("Conv2D", pad_top=pads[0][0], pad_left=pads[1][0],
                               out_h=out_hw[0], out_w=out_hw[1])
    y = np.empty(_shaped(n, oh, ow, co, channels_last), F32)
    _check_nn(lib.mg_conv2d_forward(
        n, h, w, c, kh, kw, co, top, left, oh, ow, int(channels_last), _fbuf(x), _fbuf(f),
        _fbuf(y), num_threads()), "Conv2D")
    return y


def conv2d_backprop_input(dy, f, input_hw, pads, channels_last):
    """d input (shape: dy's batch, ``input_hw``, f's in_channels) of conv2d given dy:
    ``dx[n, r, s, ci] = sum dy[n, p, q, o] * f[r - p + top, s - q + left, ci, o]``."""
    dy, f = _f32(dy), _f32(f)
    _rank4("Conv2DBackpropInput", out_backprop=dy, filter=f)
    n, oh, ow, co = _nhwc_dims(dy.shape, channels_last)
    kh, kw, c, _ = _conv_filter("Conv2DBackpropInput", f, f.shape[2], co)
    h, w, top, left = _sizes("Conv2DBackpropInput", height=input_hw[0], width=input_hw[1],
                             pad_top=pads[0][0], pad_left=pads[1][0])
    dx = np.empty(_shaped(n, h, w, c, channels_last), F32)
    _check_nn(lib.mg_conv2d_backprop_input(
        n, h, w, c, kh, kw, co, top, left, oh, ow, int(channels_last), _fbuf(f), _fbuf(dy),
        _fbuf(dx), num_threads()), "Conv2DBackpropInput")
    return dx


def conv2d_backprop_filter(x, dy, filter_hw, pads, channels_last):
    """d filter (HWIO, spatial size ``filter_hw``) of conv2d given its input x and dy:
    ``df[i, j, ci, o] = sum_{n, p, q} x[n, p + i - top, q + j - left, ci] * dy[n, p, q, o]``."""
    x, dy = _f32(x), _f32(dy)
    _rank4("Conv2DBackpropFilter", input=x, out_backprop=dy)
    n, h, w, c = _nhwc_dims(x.shape, channels_last)
    dn, oh, ow, co = _nhwc_dims(dy.shape, channels_last)
    if dn != n:
        raise ValueError(f"native Conv2DBackpropFilter: out_backprop batch {dn} differs from "
                         f"the input's {n}")
    kh, kw, top, left = _sizes("Conv2DBackpropFilter", filter_h=filter_hw[0],
                               filter_w=filter_hw[1], pad_top=pads[0][0],
                               pad_left=pads[1][0])
    df = np.empty((kh, kw, c, co), F32)
    _check_nn(lib.mg_conv2d_backprop_filter(
        n, h, w, c, kh, kw, co, top, left, oh, ow, int(channels_last), _fbuf(x), _fbuf(dy),
        _fbuf(df), num_threads()), "Conv2DBackpropFilter")
    return df


def _pool_args(what, x, ksize, strides, pads, out_hw, channels_last):
    """The C arguments of a pool over x, checked: every window must start inside the image
    (``(out - 1) * stride - pad_before < size``, true of SAME, VALID and EXPLICIT windows
    with pads smaller than the window), so C reads x only at clipped in-bounds positions
    and writes exactly ``n * out_h * out_w * c`` outputs."""
    _rank4(what, input=x)
    n, h, w, c = _nhwc_dims(x.shape, channels_last)
    kh, kw, sh, sw, top, left, oh, ow = _sizes(
        what, ksize_h=ksize[0], ksize_w=ksize[1], stride_h=strides[0], stride_w=strides[1],
        pad_top=pads[0][0], pad_left=pads[1][0], out_h=out_hw[0], out_w=out_hw[1])
    for k, s, pad, out, size, axis in ((kh, sh, top, oh, h, "height"),
                                       (kw, sw, left, ow, w, "width")):
        if k < 1 or s < 1 or pad >= k or (out and (out - 1) * s - pad >= size):
            raise ValueError(f"native {what}: {out} windows of size {k}, stride {s} and "
                             f"padding {pad} do not fit an input of {axis} {size}")
    return (n, h, w, c, kh, kw, sh, sw, top, left, oh, ow, int(channels_last))


def max_pool(x, ksize, strides, pads, out_hw, channels_last):
    """Max over each window's in-bounds elements (NaN propagates, as numpy.maximum)."""
    x = _f32(x)
    args = _pool_args("MaxPool", x, ksize, strides, pads, out_hw, channels_last)
    y = np.empty(_shaped(args[0], args[10], args[11], args[3], channels_last), F32)
    _check_nn(lib.mg_max_pool(*args, _fbuf(x), _fbuf(y), num_threads()), "MaxPool")
    return y


def max_pool_grad(x, g, ksize, strides, pads, out_hw, channels_last):
    """Each window's gradient g to its first maximum in x (row-major, strict >); windows
    must not overlap (strides >= ksize). g has the pool's output shape."""
    x, g = _f32(x), _f32(g)
    args = _pool_args("MaxPoolGrad", x, ksize, strides, pads, out_hw, channels_last)
    expected = _shaped(args[0], args[10], args[11], args[3], channels_last)
    if g.shape != expected:
        raise ValueError(f"native MaxPoolGrad: grad must have the pool's shape {expected}, "
                         f"got {g.shape}")
    dx = np.empty(x.shape, F32)
    _check_nn(lib.mg_max_pool_grad(*args, _fbuf(x), _fbuf(g), _fbuf(dx), num_threads()),
              "MaxPoolGrad")
    return dx


def _same_shape(what: str, first: np.ndarray, **others: np.ndarray) -> None:
    for name, array in others.items():
        if array.shape != first.shape:
            raise ValueError(f"native {what}: {name} must have shape {first.shape}, got "
                             f"{array.shape}")


def relu(x):
    """x > 0 ? x : +0 of a float32 array, NaN stays NaN (as numpy.maximum(x, 0)); the
    result has x's shape (0-d included)."""
    x = _f32(x)
    y = np.empty(x.shape, F32)
    _check_nn(lib.mg_relu(x.size, _fbuf(x), _fbuf(y), num_threads()), "Relu")
    return y


def relu_grad(g, features):
    """g where features > 0, else +0 (float32 arrays of one shape, which the result has)."""
    g, features = _f32(g), _f32(features)
    _same_shape("ReluGrad", g, features=features)
    dx = np.empty(g.shape, F32)
    _check_nn(lib.mg_relu_grad(g.size, _fbuf(g), _fbuf(features), _fbuf(dx), num_threads()),
              "ReluGrad")
    return dx


def apply_adam(var, m, v, grad, lr_t, beta1, beta2, epsilon, use_nesterov):
    """(var', m', v') of one Adam step (pool.h has the formulas); new float32 arrays of
    var's shape (0-d included). m, v and grad must have var's shape: C reads var.size
    elements of each."""
    var, m, v, grad = _f32(var), _f32(m), _f32(v), _f32(grad)
    _same_shape("ApplyAdam", var, m=m, v=v, grad=grad)
    size = var.size
    out = np.empty(3 * size, F32)  # one block: var', m', v' (views)
    buf = _fbuf(out)
    _check_nn(lib.mg_apply_adam(
        size, _fbuf(var), _fbuf(m), _fbuf(v), _fbuf(grad), float(lr_t), float(beta1),
        float(beta2), float(epsilon), int(use_nesterov), buf, buf + size, buf + 2 * size),
        "ApplyAdam")
    return [out[i * size:(i + 1) * size].reshape(var.shape) for i in range(3)]
