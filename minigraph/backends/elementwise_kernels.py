"""numpy kernels of the elementwise ops (``ops.elementwise_ops``); every backend runs them.

Two ways to compute, by what matches TensorFlow best:

* **float64, rounded once** (``Exp``, ``Log``, ``Log1p``, ``Expm1``, ``Sqrt``, ``Erf``,
  ``Erfc``, the trigonometric and hyperbolic functions and their inverses, ``Atan2``,
  ``Xlogy``, ``Xdivy``, ``Xlog1py``, ``Pow``, ``SqrtGrad``): floating inputs are promoted to float64
  and the result rounded once to ``T``, so float32 results are within one rounding of the
  exact value (TF's own float32 approximations are a few ulps off: the tests bound the
  distance). Integer ``Pow`` wraps around in ``T`` as TF's does.
* **in T** (float16 and bfloat16 in float32, rounded once: minigraph's rule) where the result
  is exact (``Abs``, ``Floor``, ``Ceil``, ``Round``, ``Rint``, ``Sign``, ``Maximum``,
  ``Minimum``, ``IsFinite``, ``IsInf``, ``IsNan``, comparisons, ``Select``) or where TF's
  float32 result depends on float32's own rounding:
  ``SquaredDifference`` is ``(x - y) * (x - y)`` with the difference rounded
  (TF's two roundings; integers wrap), ``FloorDiv`` is ``floor(x / y)`` of the quotient
  rounded to ``T`` (so ``floor(1 / 0.1) = 10``, not numpy's 9), ``FloorMod`` is
  ``fmod(x, y)`` moved into ``y``'s sign (``+ y``, rounded in ``T``), ``DivNoNan`` is
  ``x / y`` or 0 where ``y = 0``, ``MulNoNan`` ``x * y`` or 0 where ``y = 0``,
  ``TruncateDiv`` is ``trunc(x / y)`` of the rounded quotient (integers: C's division,
  rounding toward 0), ``TruncateMod`` is ``fmod(x, y)`` (the dividend's sign). (TF rounds
  each step to float16/bfloat16 in those types.)
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from minigraph.backends.compute import compute_dtype
from minigraph.backends.error_function import erf, erfc
from minigraph.backends.math_kernels import same_dtype_replay
from minigraph.backends.registry import register_kernel, set_replay


def _is_floating(x: np.ndarray) -> bool:
    """float16/32/64 or bfloat16 (an ml_dtypes type, numpy kind 'V')."""
    return x.dtype.kind in "fV"


def _float64(x: np.ndarray) -> np.ndarray:
    """Floating arrays promoted to float64; integer and bool arrays as they are."""
    return x.astype(np.float64, copy=False) if _is_floating(x) else x


def _computed(x: np.ndarray) -> np.ndarray:
    """float16/bfloat16 arrays in float32 (the compute type), others as they are."""
    return x.astype(compute_dtype(x.dtype), copy=False)


def _kernel(function: Callable, promote: Callable = _computed,
            out_dtype: Callable | None = None, quiet: bool = False):
    """A kernel applying ``function`` to the inputs in their ``promote``d type, the result
    rounded once to the output's dtype (``out_dtype(op)``, default the first input's).
    ``quiet``: the function never signals a floating-point error (comparisons, logical
    ops), so numpy's error state need not be set around it (1.2 us a call)."""
    def kernel(op, inputs, ctx):
        values = [promote(v) for v in inputs]
        dtype = out_dtype(op) if out_dtype else inputs[0].dtype
        if quiet:
            return [np.asarray(function(*values)).astype(dtype, copy=False)]
        with np.errstate(all="ignore"):  # IEEE results (inf, NaN), also when rounding to T
            return [np.asarray(function(*values)).astype(dtype, copy=False)]

    return kernel


def _bool(op) -> np.dtype:
    return np.dtype(np.bool_)


def _register(table: dict[str, Callable], replay: bool = False, **options) -> None:
    """Register ``_kernel(function, **options)`` for each op; ``replay``: with a replay
    maker (``registry.ReplayMaker``) for the comparisons and logical ops, whose result is
    exact in any dtype that needs no promotion."""
    for name, function in table.items():
        kernel = register_kernel(name)(_kernel(function, **options))
        if replay:
            set_replay(kernel, _predicate_replay(function))


def _predicate_replay(function: np.ufunc) -> Callable:
    """The replay maker of a comparison or logical kernel: the ufunc into the fixed bool
    output, for inputs of one dtype that the kernel computes in as it is (not half
    precision, which it compares in float32)."""
    maker = same_dtype_replay(function)

    def predicate_maker(op, values: list, outputs: list, ctx=None) -> Callable[[], None] | None:
        dtype = values[0].dtype
        if outputs[0].dtype != np.bool_ or not (dtype.kind in "iub" or dtype in _EXACT_FLOATS):
            return None
        return maker(op, values, outputs, ctx)

    return predicate_maker


_EXACT_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _round(x: np.ndarray) -> np.ndarray:
    """Half to even for floats; integers are already whole (TF 2.21's CPU kernel returns 0
    for them, a bug: minigraph returns x, as ``tf.math.round`` does)."""
    return np.rint(x) if _is_floating(x) else x.copy()


def _sign(x: np.ndarray) -> np.ndarray:
    """-1, 0 or 1 (+0 for -0, as TF), NaN for NaN."""
    return np.sign(x) + np.zeros((), x.dtype)


def _maximum(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """y where x < y or y is NaN, else x: ties (-0 vs +0 included) and a NaN x give x."""
    return np.where((x < y) | np.isnan(y), y, x)


def _minimum(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.where((y < x) | np.isnan(y), y, x)


def _floor_div(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Integers: numpy's floor division (``INT_MIN // -1`` wraps to ``INT_MIN``, as TF);
    floats: ``floor(x / y)`` of the quotient rounded to T."""
    return np.floor(x / y) if _is_floating(x) else np.floor_divide(x, y)


def _floor_mod(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The remainder with the divisor's sign: integers by numpy; floats as TF,
    ``fmod(x, y)``, plus ``y`` when it is nonzero and its sign differs from ``y``'s."""
    if not _is_floating(x):
        return np.remainder(x, y)
    truncated = np.fmod(x, y)
    shift = (truncated != 0) & ((y < 0) != (truncated < 0))
    return np.where(shift, truncated + y, truncated)


def _squared_difference(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """(x - y) * (x - y), the difference rounded to T first (TF's two roundings)."""
    difference = x - y
    return difference * difference


def _div_no_nan(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """x / y, and 0 wherever y == 0 (even for x NaN or infinite)."""
    return np.where(y == 0, np.zeros((), x.dtype), x / y)


def _truncate_div(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The quotient rounded toward 0: floats ``trunc(x / y)`` of the quotient rounded to T;
    integers as C divides (floor division moved up by one where a remainder is left and the
    signs differ; the minimum by -1 wraps around instead of trapping)."""
    if _is_floating(x):
        return np.trunc(x / y)
    quotient = np.floor_divide(x, y)
    inexact = (x - quotient * y != 0) & ((x < 0) != (y < 0))
    return quotient + inexact.astype(quotient.dtype)


def _where_x_zero(function: Callable) -> Callable:
    """``function(x, y)``, and 0 wherever x == 0 (whatever y: NaN, 0, infinite), as TF's
    Xlogy, Xdivy and Xlog1py."""
    def kernel(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.where(x == 0, np.zeros((), x.dtype), function(x, y))

    return kernel


def _mul_no_nan(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """x * y, and 0 wherever y == 0 (even for x NaN or infinite)."""
    return np.where(y == 0, np.zeros((), x.dtype), x * y)


_register({"Exp": np.exp, "Log": np.log, "Log1p": np.log1p, "Expm1": np.expm1,
           "Sqrt": np.sqrt, "Erf": erf, "Erfc": erfc, "Sin": np.sin, "Cos": np.cos,
           "Tan": np.tan, "Asin": np.arcsin, "Acos": np.arccos, "Atan": np.arctan,
           "Sinh": np.sinh, "Cosh": np.cosh, "Asinh": np.arcsinh, "Acosh": np.arccosh,
           "Atanh": np.arctanh, "Atan2": np.arctan2,
           "Xlogy": _where_x_zero(lambda x, y: x * np.log(y)),
           "Xdivy": _where_x_zero(lambda x, y: x / y),
           "Xlog1py": _where_x_zero(lambda x, y: x * np.log1p(y)),
           "Pow": np.power, "SqrtGrad": lambda y, dy: 0.5 * dy / y}, promote=_float64)
_register({"Abs": np.abs, "Floor": np.floor, "Ceil": np.ceil, "Round": _round, "Sign": _sign,
           "Rint": np.rint, "Maximum": _maximum, "Minimum": _minimum, "FloorDiv": _floor_div,
           "FloorMod": _floor_mod, "TruncateDiv": _truncate_div, "TruncateMod": np.fmod,
           "DivNoNan": _div_no_nan, "MulNoNan": _mul_no_nan,
           "SquaredDifference": _squared_difference})
_register({"Less": np.less, "LessEqual": np.less_equal, "Greater": np.greater,
           "GreaterEqual": np.greater_equal, "LogicalAnd": np.logical_and,
           "LogicalOr": np.logical_or, "LogicalNot": np.logical_not, "IsFinite": np.isfinite,
           "IsInf": np.isinf, "IsNan": np.isnan}, out_dtype=_bool, quiet=True, replay=True)


@register_kernel("NotEqual")
def not_equal(op, inputs, ctx):
    """x != y; shapes that do not broadcast (allowed by ``incompatible_shape_error=False``)
    give a scalar True, as in TF."""
    x, y = inputs
    try:
        shape = np.broadcast_shapes(x.shape, y.shape)
    except ValueError:
        return [np.array(True)]
    return [np.asarray(np.not_equal(x, y), np.bool_).reshape(shape)]


@register_kernel("Select")
def select(op, inputs, ctx):
    """A scalar condition picks 't' or 'e' whole; a vector one picks rows of a 't' of higher
    rank; otherwise elementwise (the shape function checked which case applies)."""
    condition, t, e = inputs
    if condition.ndim == 1 and t.ndim > 1:
        condition = condition.reshape(condition.shape + (1,) * (t.ndim - 1))
    return [np.where(condition, t, e)]


@register_kernel("SelectV2")
def select_v2(op, inputs, ctx):
    """'t' where the condition holds, else 'e', all three broadcast together."""
    return [np.where(*inputs)]


def _select_replay(op, values: list, outputs: list, ctx) -> Callable[[], None] | None:
    """Select or SelectV2 on fixed arrays (``registry.ReplayMaker``): 'e' copied into the
    output, then 't' where the condition holds (``np.where``'s elements, its bits), for a
    bool condition and branches of the output's dtype."""
    condition, t, e = values
    out = outputs[0]
    if op.type == "Select" and condition.ndim == 1 and t.ndim > 1:
        condition = condition.reshape(condition.shape + (1,) * (t.ndim - 1))
    if (condition.dtype != np.bool_ or t.dtype != out.dtype or e.dtype != out.dtype
            or np.broadcast_shapes(condition.shape, t.shape, e.shape) != out.shape):
        return None

    def replayed() -> None:
        np.copyto(out, e)
        np.copyto(out, t, where=condition)

    return replayed


set_replay(select, _select_replay)
set_replay(select_v2, _select_replay)
