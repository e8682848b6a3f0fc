"""The native backend: batch-norm math in C (SIMD, worker pool), loaded from ``minigraph._native``.

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

Every kernel, batch norm's included, runs on minigraph's own worker pool
(kernels_c/mg_runtime.c, pthreads; no OpenMP): idle workers poll, yielding their core, for
300 us, then sleep, so back-to-back kernels start at once and a busy neighbour process gets
its fair share of the cores.
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np

from minigraph.framework.errors import InvalidArgumentError

try:
    from minigraph._native import ffi, lib
except ImportError as error:  # not built (no compiler at install time) or built for another Python
    ffi = lib = None
    _REASON: str | None = (
        f"the C extension minigraph._native is not available ({error}); reinstall minigraph "
        "with a C compiler (gcc/clang) to build it")
else:
    _REASON = None

NAME = "native"
xp = np  # the array functions for this backend's tensors (BatchNormMath.xp)
F32 = np.float32
_F32_DTYPE = np.dtype(F32)
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


# ``fbuf(array)``: a float32 array's buffer as the ``float *`` C reads (callers check the
# array first: ``plain_f32``, ``as_f32``); a partial, not a def: one Python frame less on
# every kernel call of every wrapper
fbuf = functools.partial(ffi.from_buffer, "float[]") if ffi is not None else None


# --------------------------------------------------------------------------------------------
# the math primitives (same signatures as backends.reference)


def _bn_out(out: np.ndarray | None, x: np.ndarray, *reads: np.ndarray | None) -> np.ndarray:
    """A batch-norm kernel's output of x's shape and dtype: ``out`` (a bound plan's arena)
    where x is float32 and :func:`output_array` takes it, else a fresh array."""
    if out is None or x.dtype != F32:
        return np.empty(x.shape, x.dtype)
    return output_array(out, x.shape, x, *(r for r in reads if r is not None))


def bn_forward_training(x, scale, offset, epsilon, channels_last, *, out=None):
    """(y, mean, biased variance): mu = mean(x), var = mean((x - mu)^2) per channel,
    y = (x - mu) * (scale * rsqrt(var + epsilon)) + offset (y in ``out`` where it fits)."""
    code, outer, channels, inner = _geometry(x, channels_last)
    _vectors(channels, scale, offset)
    y = _bn_out(out, x)
    mean = np.empty(channels, F32)
    variance = np.empty(channels, F32)
    check_code(lib.mg_bn_forward_training(
        code, outer, channels, inner, _buf(x), fbuf(scale), fbuf(offset), float(epsilon),
        _buf(y), fbuf(mean), fbuf(variance), num_threads()))
    return y, mean, variance


def _side(x: np.ndarray, side: np.ndarray | None):
    """The side input's buffer (C reads x.size elements of it), or NULL."""
    if side is None:
        return ffi.NULL
    _same_as_x(x, side)
    return _buf(side)


def bn_forward_training_ex(x, scale, offset, epsilon, channels_last, *, side=None,
                           relu=False, out=None):
    """bn_forward_training with y = relu?(y + side) in the same pass (_FusedBatchNormEx):
    each stage rounds as AddV2's and Relu's kernels do."""
    code, outer, channels, inner = _geometry(x, channels_last)
    _vectors(channels, scale, offset)
    side_buf = _side(x, side)
    y = _bn_out(out, x, side)
    mean = np.empty(channels, F32)
    variance = np.empty(channels, F32)
    check_code(lib.mg_bn_forward_training_ex(
        code, outer, channels, inner, _buf(x), fbuf(scale), fbuf(offset), float(epsilon),
        side_buf, int(relu), _buf(y), fbuf(mean), fbuf(variance), num_threads()))
    return y, mean, variance


def bn_forward_inference_ex(x, scale, offset, mean, variance, epsilon, channels_last, *,
                            side=None, relu=False, out=None):
    """bn_forward_inference with y = relu?(y + side) in the same pass."""
    y = _bn_out(out, x, side)
    function, args = bn_inference_call(x, scale, offset, mean, variance, epsilon,
                                       channels_last, y, (side, relu))
    check_code(function(*args))
    return y


def bn_inference_call(x, scale, offset, mean, variance, epsilon, channels_last, y,
                      ex: tuple | None = None) -> tuple:
    """``(C function, its arguments)`` of the inference forward of x into y (checked):
    ``mg_bn_forward_inference``, or with ``ex = (side or None, relu)``
    ``mg_bn_forward_inference_ex``."""
    code, outer, channels, inner = _geometry(x, channels_last)
    _vectors(channels, scale, offset, mean, variance)
    head = (code, outer, channels, inner, _buf(x), fbuf(scale), fbuf(offset), fbuf(mean),
            fbuf(variance), float(epsilon))
    if ex is None:
        return lib.mg_bn_forward_inference, (*head, _buf(y), num_threads())
    side, relu = ex
    return lib.mg_bn_forward_inference_ex, (*head, _side(x, side), int(relu), _buf(y),
                                            num_threads())


def bn_backward_training_ex(dy, x, scale, mean, variance, y, epsilon, channels_last, *,
                            side_backprop=False, out=None, addend=None):
    """(dx, scale_backprop, offset_backprop, side_backprop or None): bn_backward_training of
    g = y > 0 ? dy : dy * 0 (ReluGrad's mask from the forward's output y), g itself as the
    side input's gradient when asked (_FusedBatchNormGradEx). With ``addend`` (float32 x
    only), of dy + addend (AddN's sum: _FusedAddBatchNormGradEx), or None where a channel
    needs the exceptional recomputation (``MG_BN_UNFUSED``: the caller adds and calls again
    without it)."""
    code, outer, channels, inner = _geometry(x, channels_last)
    _same_as_x(x, dy, y)
    _vectors(channels, scale, mean, variance)
    if addend is not None:
        _same_as_x(x, addend)
        if x.dtype != F32:
            raise TypeError(f"native batch norm: an addend needs float32, got {x.dtype}")
    dx = _bn_out(out, x, dy, y, addend)
    side = np.empty(x.shape, x.dtype) if side_backprop else None
    scale_backprop = np.empty(channels, F32)
    offset_backprop = np.empty(channels, F32)
    args = (_buf(x), fbuf(scale), fbuf(mean), fbuf(variance), _buf(y), float(epsilon),
            _buf(dx), ffi.NULL if side is None else _buf(side), fbuf(scale_backprop),
            fbuf(offset_backprop), num_threads())
    if addend is None:
        check_code(lib.mg_bn_backward_training_ex(code, outer, channels, inner, _buf(dy),
                                                  *args))
    else:
        rc = lib.mg_bn_backward_training_ex_add(code, outer, channels, inner, _buf(dy),
                                                _buf(addend), *args)
        if rc == lib.MG_BN_UNFUSED:
            return None
        check_code(rc)
    return dx, scale_backprop, offset_backprop, side


def bn_forward_inference(x, scale, offset, mean, variance, epsilon, channels_last, *,
                         out=None):
    """y = (x - mean) * (scale * rsqrt(variance + epsilon)) + offset (in ``out`` where it
    fits)."""
    y = _bn_out(out, x)
    function, args = bn_inference_call(x, scale, offset, mean, variance, epsilon,
                                       channels_last, y)
    check_code(function(*args))
    return y


def _backward(function, dy, x, scale, mean, variance, epsilon, channels_last, out=None):
    code, outer, channels, inner = _geometry(x, channels_last)
    _same_as_x(x, dy)
    _vectors(channels, scale, mean, variance)
    dx = _bn_out(out, x, dy)
    scale_backprop = np.empty(channels, F32)
    offset_backprop = np.empty(channels, F32)
    check_code(function(
        code, outer, channels, inner, _buf(dy), _buf(x), fbuf(scale), fbuf(mean),
        fbuf(variance), float(epsilon), _buf(dx), fbuf(scale_backprop),
        fbuf(offset_backprop), num_threads()))
    return dx, scale_backprop, offset_backprop


def bn_backward_training(dy, x, scale, mean, variance, epsilon, channels_last, *, out=None):
    """(dx, scale_backprop, offset_backprop) with the given batch mean / biased variance:
    r = rsqrt(variance + epsilon), xc = x - mean, offset_backprop = sum(dy),
    scale_backprop = sum(dy * xc) * r,
    dx = scale * r * (dy - sum(dy)/n - xc * (sum(dy * xc)/n) * r^2) (dx in ``out`` where it
    fits)."""
    return _backward(lib.mg_bn_backward_training, dy, x, scale, mean, variance, epsilon,
                     channels_last, out)


def bn_backward_inference(dy, x, scale, mean, variance, epsilon, channels_last, *,
                          out=None):
    """As bn_backward_training, but dx = dy * scale * r (the statistics are constants)."""
    return _backward(lib.mg_bn_backward_inference, dy, x, scale, mean, variance, epsilon,
                     channels_last, out)


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
    check_code(lib.mg_bn_grad_grad_training(
        code, outer, channels, inner, _buf(dy), _buf(x), fbuf(scale), _buf(gx),
        fbuf(gscale), fbuf(goffset), float(epsilon), _buf(d_dy), _buf(d_x), fbuf(d_scale),
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
    check_code(lib.mg_bn_grad_grad_inference(
        code, outer, channels, inner, _buf(dy), _buf(x), fbuf(scale), fbuf(mean),
        fbuf(variance), _buf(gx), fbuf(gscale), fbuf(goffset), float(epsilon), _buf(d_dy),
        _buf(d_x), fbuf(d_scale), num_threads()))
    return d_dy, d_x, d_scale


# --------------------------------------------------------------------------------------------
# services for the other families' C wrappers (convolution_kernels, pooling_kernels,
# activation_kernels, training_kernels): they check every buffer against what C reads and
# writes, so no call can touch memory out of bounds.


def check_code(code: int, what: str = "batch norm") -> None:
    """A C kernel's return code (mg_runtime.h's MG_OK / MG_EINVAL / MG_ENOMEM) as an
    exception naming the call."""
    if code == lib.MG_ENOMEM:
        raise MemoryError(f"native {what}: out of memory for the kernel's workspace")
    if code != lib.MG_OK:
        raise ValueError(f"native {what}: invalid arguments (code {code})")


def c_call(function: Any, args: tuple, what: str, keep: Any = None) -> Callable[[], None]:
    """A function of no arguments making the C call ``function(*args)`` with arguments made
    once (a replayed step, ``client/replay.py``), its return code raised as
    :func:`check_code` raises it; ``keep``: what the arguments' pointers point into, held as
    long as the function."""
    def called() -> None:
        code = function(*args)
        if code:
            check_code(code, what)

    called.keep = keep
    return called


def plain_f32(array) -> bool:
    """Whether ``array`` is an ndarray C may read as it is: float32 (native byte order),
    C-contiguous and aligned."""
    if type(array) is not np.ndarray or array.dtype != _F32_DTYPE:
        return False
    flags = array.flags
    return flags.c_contiguous and flags.aligned


def as_f32(array) -> np.ndarray:
    """``array`` as a C-contiguous, aligned float32 ndarray of exactly its shape (a 0-d
    array stays 0-d). Copies only when needed: another dtype or byte order, a strided view,
    or misaligned data (a buffer offset by a byte), which C must never see."""
    if plain_f32(array):  # the usual case, without np.require's cost
        return array
    if type(array) is np.ndarray and array.ndim:  # a broadcast or strided view: a C copy
        copy = np.ascontiguousarray(array, F32)
        if plain_f32(copy):
            return copy
    return np.require(array, F32, ("C", "A", "E"))


def out_array(out: np.ndarray | None, shape: tuple[int, ...], *inputs: np.ndarray
              ) -> np.ndarray:
    """The float32 array of ``shape`` an elementwise kernel writes: ``out`` when it fits
    (C-contiguous, aligned, writeable float32 of ``shape``, and either one of ``inputs``
    itself, which the loop reads element i of before writing element i, or sharing no
    memory with any), else a fresh one. The session's memory planner passes a dying input
    as ``out`` (``client/planner.py``)."""
    if out is not None and type(out) is np.ndarray and out.shape == shape and plain_f32(out):
        if out.flags.writeable:
            for x in inputs:  # a loop, not all(generator): this runs at every kernel call
                if x is not out and np.may_share_memory(out, x):
                    break
            else:
                return out
    return np.empty(shape, F32)


CACHE_LINE = 64  # bytes


def padded_bytes(nbytes: int) -> tuple[np.ndarray, int]:
    """A fresh byte buffer holding ``nbytes`` that start at a cache line, and the offset of
    that line in it. numpy's large arrays start 16 bytes past one, so a kernel's 64-byte
    vector loads and stores of them would each split two lines (about 5 % of a K=64 GEMM's
    time, in its output stores). The buffer itself owns its memory: arrays made on it with
    ``np.ndarray(shape, dtype, buffer, offset)`` keep it as their base (reference counts)."""
    raw = np.empty(nbytes + CACHE_LINE, np.uint8)
    return raw, -_address(raw) % CACHE_LINE


def _address(array: np.ndarray) -> int:
    """The address of ``array``'s data: through cffi where the extension is built
    (``array.ctypes.data`` builds a ctypes object, 3x the cost at every kernel call that
    makes a line-aligned buffer), else numpy's."""
    if ffi is None:
        return array.ctypes.data
    return int(ffi.cast("uintptr_t", ffi.from_buffer(array)))


def line_aligned_bytes(nbytes: int) -> np.ndarray:
    """``nbytes`` uninitialized bytes starting at a cache line (see :func:`padded_bytes`)."""
    raw, skip = padded_bytes(nbytes)
    return raw[skip:skip + nbytes]

def output_array(out: np.ndarray | None, shape: tuple[int, ...], *inputs: np.ndarray
                 ) -> np.ndarray:
    """The float32 array of ``shape`` a kernel that writes every element of its output
    (and reads its inputs after writing some) fills: ``out`` when it fits as for
    :func:`out_array` and is none of ``inputs`` nor shares memory with one, else a fresh
    one. A bound plan passes its arena's buffers (``KernelDef.takes_out``)."""
    z = out_array(out, tuple(shape), *inputs)
    return np.empty(shape, F32) if any(z is x for x in inputs) else z


def unshared(out: np.ndarray | None, *unread: np.ndarray) -> np.ndarray | None:
    """``out``, or None where it shares memory with an input the C call does not read (a
    MaxPoolGrad's orig_output): a kernel never writes into any of its inputs."""
    if out is None or not any(np.may_share_memory(out, array) for array in unread):
        return out
    return None


_INT32_MAX = 2**31 - 1


def attrs_fit_int32(op, *names: str) -> bool:
    """Whether the op's int and list(int) attrs ``names`` (strides, dilations, ksize,
    explicit_paddings) all lie in [0, 2**31), as the C kernels' geometry must; a kernel's
    ``when`` that asks this sends other windows (a stride of 2**62) to the numpy kernel,
    which handles any size."""
    values = []
    for name in names:
        value = op.attrs.get(name, ())
        values.extend(value if isinstance(value, (list, tuple)) else [value])
    return all(0 <= v <= _INT32_MAX for v in values)


def checked_sizes(what: str, **values) -> list[int]:
    """The integer geometry arguments, each checked to lie in [0, 2**31): C computes offsets
    like ``row * stride + ksize`` in int64, which such values can never overflow."""
    checked = list(values.values())
    for value in checked:  # the usual case, plain ints, without isinstance's cost
        if type(value) is not int or not 0 <= value <= _INT32_MAX:
            break
    else:
        return checked
    checked = []
    for name, value in values.items():
        if not isinstance(value, (int, np.integer)) or not 0 <= value <= _INT32_MAX:
            raise ValueError(f"native {what}: {name} = {value} is outside [0, 2**31)")
        checked.append(int(value))
    return checked


def check_rank4(what: str, **arrays: np.ndarray) -> None:
    for name, array in arrays.items():
        if array.ndim != 4:
            raise ValueError(f"native {what}: {name} must be 4-dimensional, got shape "
                             f"{array.shape}")


def nhwc_dims(shape: tuple, channels_last: bool) -> tuple[int, int, int, int]:
    n, a, b, c = shape
    return (n, a, b, c) if channels_last else (n, b, c, a)


def shaped(n: int, h: int, w: int, c: int, channels_last: bool) -> tuple[int, ...]:
    return (n, h, w, c) if channels_last else (n, c, h, w)


def check_same_shape(what: str, first: np.ndarray, **others: np.ndarray) -> None:
    for name, array in others.items():
        if array.shape != first.shape:
            raise ValueError(f"native {what}: {name} must have shape {first.shape}, got "
                             f"{array.shape}")
