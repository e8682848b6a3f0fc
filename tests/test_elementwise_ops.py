"""The elementwise family (minigraph/ops/elementwise_ops.py): values against float64 formulas
written here and against ``tf.raw_ops`` (NaN, infinities, signed zeros, integers, every float
type, broadcasting), shape inference and errors in TF's words, the float64 error function
against ``math.erf``, and a frozen TF graph using the ops. Gradients are checked in
test_gradient_checker.py."""

from __future__ import annotations

import math
import os

import ml_dtypes
import numpy as np
import pytest
from conftest import BACKENDS, assert_close

import minigraph as mg
from minigraph import ops
from minigraph.backends.error_function import erf, erfc

F32, F64, BF16 = np.float32, np.float64, np.dtype(ml_dtypes.bfloat16)
FLOAT_TYPES = (np.float16, BF16, F32, F64)
INT_TYPES = (np.int32, np.int64)
SPECIAL = [-np.inf, -7.25, -2.5, -1.5, -1.0, -0.5, -0.0, 0.0, 0.3, 0.5, 1.0, 1.5, 2.5, 3.75,
           12.0, np.inf, np.nan]
RNG = np.random.default_rng(0)
X = np.concatenate([SPECIAL, RNG.standard_normal(23) * 3]).reshape(5, 8)


def run(root, fetches, backend="reference", feeds=None):
    return mg.ClientSession(root, backend=backend).Run(feeds or {}, fetches)


def _half_to_even(x):
    """Rounding to the nearest integer, ties to the even one (written from the definition)."""
    low = np.floor(x)
    diff = x - low
    up = (diff > 0.5) | ((diff == 0.5) & (np.fmod(low, 2) != 0))
    return np.where(up, low + 1, low)


def _sign(x):
    return np.where(np.isnan(x), x, (x > 0).astype(x.dtype) - (x < 0).astype(x.dtype))


# float64 references, written from the definitions (math.erf for the error function)
UNARY = {
    "Exp": np.exp, "Log": np.log, "Log1p": np.log1p, "Expm1": np.expm1, "Sqrt": np.sqrt,
    "Erf": np.vectorize(math.erf, otypes=[F64]), "Erfc": np.vectorize(math.erfc, otypes=[F64]),
    "Floor": np.floor, "Ceil": np.ceil, "Sin": np.sin, "Cos": np.cos, "Abs": np.abs,
    "Round": _half_to_even, "Sign": _sign, "Rint": _half_to_even, "Tan": np.tan,
    "Asin": np.arcsin, "Acos": np.arccos, "Atan": np.arctan, "Sinh": np.sinh, "Cosh": np.cosh,
    "Asinh": np.arcsinh, "Acosh": np.arccosh, "Atanh": np.arctanh,
}
INTEGER_UNARY = {"Abs": np.abs, "Round": lambda x: x, "Sign": np.sign}


def _floor_mod(x, y):
    """x - floor(x / y) * y, the remainder with y's sign."""
    return x - np.floor(x / y) * y


BINARY = {
    "Maximum": lambda x, y: np.where(np.isnan(x) | np.isnan(y), np.nan, np.maximum(x, y)),
    "Minimum": lambda x, y: np.where(np.isnan(x) | np.isnan(y), np.nan, np.minimum(x, y)),
    "Pow": np.power, "SquaredDifference": lambda x, y: (x - y) ** 2,
    "FloorDiv": lambda x, y: np.floor(x / y), "FloorMod": _floor_mod,
    "TruncateDiv": lambda x, y: np.trunc(x / y), "TruncateMod": np.fmod,
    "DivNoNan": lambda x, y: np.where(y == 0, 0.0, x / np.where(y == 0, 1.0, y)),
    "MulNoNan": lambda x, y: np.where(y == 0, 0.0, x * y),
    # 0 wherever x is 0, whatever y is (NaN, 0 or infinite)
    "Xlogy": lambda x, y: np.where(x == 0, 0.0, x * np.log(y)),
    "Xdivy": lambda x, y: np.where(x == 0, 0.0, x / y),
    "Xlog1py": lambda x, y: np.where(x == 0, 0.0, x * np.log1p(y)),
}
COMPARISONS = {"Less": np.less, "LessEqual": np.less_equal, "Greater": np.greater,
               "GreaterEqual": np.greater_equal, "NotEqual": np.not_equal}


def _rounded(expected, dtype):
    """A float64 value as float32/float64 store it (an underflow is 0); the half types are
    rounded by assert_close (through float32)."""
    return expected if np.dtype(dtype) in (np.float16, BF16) else \
        expected.astype(dtype).astype(F64)


def _wrapper(name):
    return getattr(ops, name)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", FLOAT_TYPES, ids=lambda d: np.dtype(d).name)
def test_unary_floats_match_float64_formulas(backend, dtype):
    """Every unary op on every float type: the float64 value rounded once (within one ulp
    of T for the half types; float32 within 1e-5 of each element)."""
    x = X.astype(dtype)
    root = mg.Scope.NewRootScope()
    outs = [_wrapper(name)(root, x) for name in UNARY]
    with np.errstate(all="ignore"):
        for name, out, value in zip(UNARY, outs, run(root, outs, backend)):
            assert out.shape == mg.TensorShape(x.shape)
            assert_close(value, _rounded(UNARY[name](x.astype(F64)), dtype), dtype=np.dtype(dtype),
                         mag=0.0, what=name)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", INT_TYPES, ids=lambda d: np.dtype(d).name)
def test_unary_integers(backend, dtype):
    info = np.iinfo(dtype)
    x = np.array([info.min, info.min + 1, -7, -1, 0, 1, 8, info.max], dtype)
    root = mg.Scope.NewRootScope()
    outs = [_wrapper(name)(root, x) for name in INTEGER_UNARY]
    for name, value in zip(INTEGER_UNARY, run(root, outs, backend)):
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(value, INTEGER_UNARY[name](x), err_msg=name)
        assert value.dtype == dtype
    assert run(root, ops.Abs(root, x), backend)[0] == info.min  # wraps around, as TF's


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", FLOAT_TYPES, ids=lambda d: np.dtype(d).name)
def test_binary_floats_broadcast(backend, dtype):
    """x (5, 1, 8) against y (3, 1): each binary op broadcasts to (5, 3, 8)."""
    x = X.reshape(5, 1, 8).astype(dtype)
    y = np.array([[2.5], [-0.75], [0.0]]).astype(dtype)
    root = mg.Scope.NewRootScope()
    outs = [_wrapper(name)(root, x, y) for name in BINARY]
    with np.errstate(all="ignore"):
        for name, out, value in zip(BINARY, outs, run(root, outs, backend)):
            assert out.shape == mg.TensorShape([5, 3, 8])
            expected = BINARY[name](x.astype(F64), y.astype(F64))
            if name in ("FloorDiv", "FloorMod", "TruncateDiv", "TruncateMod"):
                expected = np.where(np.isfinite(x.astype(F64)) & (y != 0), expected, value)
            assert_close(value, _rounded(expected, dtype), dtype=np.dtype(dtype), mag=0.0,
                         what=name)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", INT_TYPES, ids=lambda d: np.dtype(d).name)
def test_binary_integers_follow_python(backend, dtype):
    """Integer FloorDiv/FloorMod are Python's // and %, Pow and SquaredDifference exact."""
    x = np.array([[-7], [7], [0], [5], [-1]], dtype)
    y = np.array([2, -3, 1, 4], dtype)
    root = mg.Scope.NewRootScope()
    names = ["Maximum", "Minimum", "Pow", "SquaredDifference", "FloorDiv", "FloorMod"]
    outs = [_wrapper(name)(root, x, np.abs(y) if name == "Pow" else y) for name in names]
    python = {"Maximum": max, "Minimum": min, "Pow": pow,
              "SquaredDifference": lambda a, b: (a - b) ** 2,
              "FloorDiv": lambda a, b: a // b, "FloorMod": lambda a, b: a % b}
    for name, value in zip(names, run(root, outs, backend)):
        exponents = np.abs(y) if name == "Pow" else y
        expected = [[python[name](int(a), int(b)) for b in exponents] for a in x[:, 0]]
        assert value.dtype == dtype
        np.testing.assert_array_equal(value, np.array(expected, dtype), err_msg=name)


@pytest.mark.parametrize("backend", BACKENDS)
def test_ties_nan_and_signed_zeros(backend):
    """Maximum/Minimum return x on ties (-0 vs +0 too) and NaN from either side; Sign gives
    +0 for -0; Round rounds half to even; FloorDiv is floor of the rounded quotient (1 / 0.1
    = 10 in float32, numpy's floor_divide says 9); DivNoNan is 0 for y = 0 even for x NaN."""
    x = np.array([-0.0, 0.0, np.nan, 1.0], F32)
    y = np.array([0.0, -0.0, 1.0, np.nan], F32)
    root = mg.Scope.NewRootScope()
    fetches = [ops.Maximum(root, x, y), ops.Minimum(root, x, y), ops.Sign(root, x),
               ops.Round(root, np.array([0.5, 1.5, 2.5, -0.5, -2.5], F32)),
               ops.FloorDiv(root, np.float32(1), np.float32(0.1)),
               ops.DivNoNan(root, np.array([np.nan, np.inf, 1.0], F32),
                            np.array([0.0, 0.0, -0.0], F32))]
    maximum, minimum, sign, rounded, quotient, safe = run(root, fetches, backend)
    for value in (maximum, minimum):
        np.testing.assert_array_equal(np.signbit(value[:2]), [True, False])
        assert np.isnan(value[2:]).all()
    np.testing.assert_array_equal(np.signbit(sign), [False, False, False, False])
    np.testing.assert_array_equal(rounded, [0, 2, 2, -0.0, -2])
    assert quotient == 10 and np.floor_divide(np.float32(1), np.float32(0.1)) == 9
    np.testing.assert_array_equal(safe, [0, 0, 0])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", FLOAT_TYPES, ids=lambda d: np.dtype(d).name)
def test_float_predicates_and_atan2(backend, dtype):
    """IsFinite/IsInf/IsNan are numpy's tests (bool results); Atan2(y, x) is the angle of
    (x, y), quadrant and signed zeros included (atan2(+0, -0) = pi, atan2(-0, -1) = -pi)."""
    x = X.astype(dtype)
    y = np.array([0.0, -0.0, 1.0, 0.0, -2.5, np.inf, np.nan, -1.0]).astype(dtype)
    a = np.array([-0.0, -1.0, 0.0, 0.0, -np.inf, -np.inf, 1.0, 3.0]).astype(dtype)
    root = mg.Scope.NewRootScope()
    tests = {"IsFinite": np.isfinite, "IsInf": np.isinf, "IsNan": np.isnan}
    fetches = [_wrapper(name)(root, x) for name in tests] + [ops.Atan2(root, y, a)]
    *flags, angle = run(root, fetches, backend)
    for name, value in zip(tests, flags):
        assert value.dtype == np.bool_
        np.testing.assert_array_equal(value, tests[name](x.astype(F64)), err_msg=name)
    expected = np.arctan2(y.astype(F64), a.astype(F64))
    assert_close(angle, _rounded(expected, dtype), dtype=np.dtype(dtype), mag=0.0, what="Atan2")
    np.testing.assert_array_equal(np.signbit(angle[:4]), [False, True, False, False])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", INT_TYPES, ids=lambda d: np.dtype(d).name)
def test_integer_truncating_division_rounds_toward_zero(backend, dtype):
    """TruncateDiv/TruncateMod of integers are C's / and % (toward 0, the dividend's sign),
    the minimum over -1 wrapping around as TF's does, not trapping."""
    info = np.iinfo(dtype)
    x = np.array([[-7], [7], [0], [5], [-1], [info.min]], dtype)
    y = np.array([2, -3, 1, 4, -1], dtype)
    root = mg.Scope.NewRootScope()
    quotient, remainder = run(root, [ops.TruncateDiv(root, x, y), ops.TruncateMod(root, x, y)],
                              backend)
    span = 1 << info.bits

    def c_quotient(a: int, b: int) -> int:
        exact = (abs(a) // abs(b)) * (-1 if (a < 0) != (b < 0) else 1)
        return (exact - info.min) % span + info.min  # wrapped into the type

    expected_q = [[c_quotient(a, int(b)) for b in y] for a in map(int, x[:, 0])]
    np.testing.assert_array_equal(quotient, np.array(expected_q, dtype))
    np.testing.assert_array_equal(remainder, x - quotient * y)
    assert quotient.dtype == remainder.dtype == dtype


@pytest.mark.parametrize("backend", BACKENDS)
def test_comparisons_and_logical_ops(backend):
    x = X.reshape(5, 1, 8).astype(F32)
    y = np.array([[0.5], [-0.0], [np.nan]], F32)
    root = mg.Scope.NewRootScope()
    outs = [_wrapper(name)(root, x, y) for name in COMPARISONS]
    a, b = x > 0, ~(y > 0)
    logical = [ops.LogicalAnd(root, a, b), ops.LogicalOr(root, a, b), ops.LogicalNot(root, a)]
    values = run(root, outs + logical, backend)
    for name, value in zip(COMPARISONS, values):
        assert value.dtype == np.bool_ and value.shape == (5, 3, 8)
        np.testing.assert_array_equal(value, COMPARISONS[name](x, y), err_msg=name)
    for value, expected in zip(values[len(COMPARISONS):], [a & b, a | b, ~a]):
        np.testing.assert_array_equal(value, expected)
    int_less = ops.Less(root, np.array([1, 5], np.int64), np.int64(3))
    assert run(root, int_less, backend).tolist() == [True, False]


@pytest.mark.parametrize("backend", BACKENDS)
def test_select_and_select_v2(backend):
    t = RNG.standard_normal((2, 3)).astype(F32)
    e = -t
    root = mg.Scope.NewRootScope()
    rows = ops.Select(root, np.array([True, False]), t, e)  # a vector picks rows
    whole = ops.Select(root, np.array(False), t, e)  # a scalar picks one of them
    same = ops.Select(root, t > 0, t, e)  # elementwise
    v2 = ops.SelectV2(root, np.array([True, False, True]), t, np.float32(7))
    ints = ops.SelectV2(root, np.array([[True], [False]]), np.int32(1), np.array([5, 6], np.int32))
    values = run(root, [rows, whole, same, v2, ints], backend)
    np.testing.assert_array_equal(values[0], np.stack([t[0], e[1]]))
    np.testing.assert_array_equal(values[1], e)
    np.testing.assert_array_equal(values[2], np.abs(t))
    np.testing.assert_array_equal(values[3], np.where([True, False, True], t, 7))
    np.testing.assert_array_equal(values[4], [[1, 1], [5, 6]])
    assert [o.shape for o in (rows, whole, v2, ints)] == [mg.TensorShape([2, 3])] * 3 + [
        mg.TensorShape([2, 2])]


@pytest.mark.parametrize("backend", BACKENDS)
def test_maximum_and_minimum_gradients_route_ties_to_x(backend):
    """TF's masks: Maximum's cotangent goes to x where x >= y, Minimum's where x <= y."""
    x = np.array([1.0, 2.0, 3.0, 4.0], F32)
    y = np.array([1.0, 0.0, 3.0, 5.0], F32)
    root = mg.Scope.NewRootScope()
    a, b = ops.Const(root, x), ops.Const(root, y)
    grads = [mg.AddSymbolicGradients(root, [op(root, a, b)], [a, b])
             for op in (ops.Maximum, ops.Minimum)]
    values = run(root, grads[0] + grads[1], backend)
    assert [v.tolist() for v in values] == [[1, 1, 1, 0], [0, 0, 0, 1], [1, 0, 1, 1],
                                            [0, 1, 0, 0]]


def test_shapes_known_only_partly():
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root, mg.float32, shape=[None, 3])
    assert ops.Maximum(root, x, np.zeros((4, 1, 1), F32)).shape == mg.TensorShape([4, None, 3])
    assert ops.Exp(root, x).shape == mg.TensorShape([None, 3])
    condition = ops.Placeholder(root, mg.bool, shape=[None])
    assert ops.Select(root, condition, x, x).shape == mg.TensorShape([None, 3])
    assert ops.SelectV2(root, condition, np.float32(0), x).shape == mg.TensorShape([None, 3])
    assert ops.NotEqual(root, x, np.zeros(4, F32), incompatible_shape_error=False).shape == \
        mg.TensorShape([])


T, E = np.zeros((2, 3), F32), np.ones((2, 3), F32)


@pytest.mark.parametrize("build, match", [
    (lambda r: ops.Select(r, np.array([True, False, True]), T, E),
     r"Select .*Number of batches of 'then' must match size of 'cond', but saw: 2 vs. 3"),
    (lambda r: ops.Select(r, np.ones((2, 3), bool), T, np.ones(3, F32)),
     r"Select .*must have the same size and shape: input 't' \[2,3\] != input 'e' \[3\]"),
    (lambda r: ops.Select(r, np.ones((2, 1), bool), T, E),
     r"Select .*input 'condition' \[2,1\] != input 't' \[2,3\]"),
    (lambda r: ops.Select(r, np.array([True]), np.float32(1), np.float32(2)),
     r"Select .*'then' must be at least a vector, but saw shape: \[\]"),
    (lambda r: ops.SelectV2(r, np.array([True, False]), T, np.float32(0)),
     r"SelectV2 .*condition \[2\], then \[2,3\], and else \[\] must be broadcastable"),
    (lambda r: ops.Maximum(r, T, np.ones(4, F32)), r"Maximum .*Incompatible shapes"),
    (lambda r: ops.Exp(r, np.int32(1)), r"Exp .*input 'x' has dtype int32"),
    (lambda r: ops.Less(r, np.array([True]), np.array([False])), r"Less .*dtype bool"),
    (lambda r: ops.LogicalAnd(r, T, T), r"LogicalAnd .*input 'x' must be bool, got float32"),
    (lambda r: ops.DivNoNan(r, np.int32(1), np.int32(1)), r"DivNoNan .*dtype int32"),
    (lambda r: ops.SqrtGrad(r, T, np.ones(3, F32)),
     r"SqrtGrad .*inputs 'y' and 'dy' must have the same shape"),
])
def test_bad_inputs_are_refused_with_tensorflows_words(build, match):
    with pytest.raises(mg.errors.InvalidArgumentError, match=match):
        build(mg.Scope.NewRootScope())


@pytest.mark.parametrize("backend", BACKENDS)
def test_integer_division_by_zero_and_negative_powers_fail_at_run(backend):
    """The data shows these: TF's words, at Run, naming the op and input 'y'."""
    root = mg.Scope.NewRootScope()
    y = ops.Placeholder(root.WithOpName("y"), mg.int32, shape=[2])
    fetches = {"FloorDiv": ops.FloorDiv(root, np.int32(7), y),
               "FloorMod": ops.FloorMod(root, np.int32(7), y),
               "Pow": ops.Pow(root, np.int32(2), y)}
    session = mg.ClientSession(root, backend=backend)
    for name in ("FloorDiv", "FloorMod"):
        with pytest.raises(mg.errors.InvalidArgumentError,
                           match=f"{name} .*Integer division by zero \\(input 'y'"):
            session.Run({y: np.array([3, 0], np.int32)}, fetches[name])
    with pytest.raises(mg.errors.InvalidArgumentError,
                       match=r"Pow .*Integers to negative integer powers are not allowed"):
        session.Run({y: np.array([3, -1], np.int32)}, fetches["Pow"])
    values = session.Run({y: np.array([3, -2], np.int32)}, [fetches["FloorDiv"],
                                                             fetches["FloorMod"]])
    assert [v.tolist() for v in values] == [[2, -4], [1, -1]]
    floats = ops.FloorDiv(root, np.float32(1), np.float32(0))  # floats: IEEE, no error
    assert session.Run(floats) == np.inf


# ----------------------------------------------------------------------------- erf


def test_error_function_is_float64_accurate():
    """Against math.erf/erfc over [-30, 30] (dense), tiny arguments and the pieces' seams:
    relative error below 1e-14 (erfc down to 1e-300), so float32 results are the correctly
    rounded ones."""
    x = np.concatenate([np.linspace(-30, 30, 60001), np.geomspace(1e-300, 0.6, 400),
                        -np.geomspace(1e-300, 0.6, 400), [0.0, -0.0, 0.5, -0.5, 26.0, 27.3]])
    x = np.concatenate([x, np.nextafter(x, np.inf)])
    for ours, theirs in ((erf, math.erf), (erfc, math.erfc)):
        got = ours(x)
        want = np.array([theirs(v) for v in x])
        normal = np.abs(want) > 1e-300
        relative = np.abs(got - want)[normal] / np.abs(want[normal])
        assert relative.max() < 1e-14, (ours.__name__, relative.max())
        assert np.all(got[~normal] < 1e-290)
        x32 = x[np.abs(x) < 10].astype(F32)
        np.testing.assert_array_equal(ours(x32).astype(F32),
                                      np.array([theirs(v) for v in x32.astype(F64)], F32))
    assert np.isnan(erf(np.array([np.nan]))).all() and np.isnan(erfc(np.array(np.nan)))
    np.testing.assert_array_equal(erf(np.array([np.inf, -np.inf])), [1, -1])
    np.testing.assert_array_equal(erfc(np.array([np.inf, -np.inf])), [0, 2])
    assert erf(np.array(0.25)).shape == ()


@pytest.mark.skipif("native" not in BACKENDS, reason="the native backend did not build")
@pytest.mark.parametrize("threads", [1, 2])
def test_native_error_function_is_the_float64_one_rounded(threads, monkeypatch):
    """The native float32 Erf/Erfc (the C library's double erf/erfc, rounded once) give the
    numpy kernels' bits (NaN stays NaN): every 4099th float32 bit pattern (both signs,
    subnormals, +-inf, NaN), the seams of the numpy evaluation and signed zeros, in a
    tensor large enough for the worker pool."""
    monkeypatch.setenv("MINIGRAPH_NUM_THREADS", str(threads))
    patterns = np.arange(0, 2 ** 32, 4099, dtype=np.uint64).astype(np.uint32)
    x = np.concatenate([patterns.view(F32), np.array([0.0, -0.0, 0.5, -0.5, 26.0, 27.3, 9.2,
                                                      -9.2, np.inf, -np.inf, np.nan], F32)])
    root = mg.Scope.NewRootScope()
    fetches = [ops.Erf(root, x), ops.Erfc(root, x)]
    for ours, theirs in zip(run(root, fetches, "native"), run(root, fetches, "reference")):
        assert ours.dtype == F32
        nan = np.isnan(theirs)
        np.testing.assert_array_equal(np.isnan(ours), nan)  # NaN stays NaN (any payload)
        np.testing.assert_array_equal(ours[~nan].view(np.uint32), theirs[~nan].view(np.uint32))


# ----------------------------------------------------------------------------- TensorFlow


def _tf():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return pytest.importorskip("tensorflow")


# TF's float32 kernels approximate these (Eigen's polynomials; SqrtGrad rounds twice, in an
# order that depends on the element's position): compare at float32 tolerance, elementwise;
# the others are exact, so they must agree bit for bit
APPROXIMATE = {"Exp", "Log", "Log1p", "Expm1", "Erf", "Erfc", "Sin", "Cos", "Pow", "SqrtGrad",
               "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Atan2",
               "Xlogy", "Xlog1py"}


def _assert_matches_tf(name, ours, theirs):
    theirs = np.asarray(theirs)
    assert ours.dtype == theirs.dtype, name
    if name in APPROXIMATE:
        assert_close(ours, theirs.astype(F64), dtype=ours.dtype, mag=0.0, what=name)
    else:
        np.testing.assert_array_equal(ours, theirs, err_msg=name)  # NaN == NaN here


@pytest.mark.oracle
@pytest.mark.parametrize("backend", BACKENDS)
def test_against_tensorflow(backend):
    tf = _tf()
    raw = tf.raw_ops
    x32 = X.astype(F32)
    xb, yb = X.reshape(5, 1, 8).astype(F32), np.array([[2.5], [-0.75], [0.0]], F32)
    ints = (np.array([[-7], [7], [0], [5]], np.int64), np.array([2, -3, 1, 4], np.int64))
    powers = (ints[0], np.abs(ints[1]))
    root = mg.Scope.NewRootScope()
    cases = [(name, _wrapper(name)(root, x32), getattr(raw, name)(x=x32)) for name in UNARY]
    cases += [(name, _wrapper(name)(root, xb, yb), getattr(raw, name)(x=xb, y=yb))
              for name in list(BINARY) + list(COMPARISONS)]
    cases += [(name, _wrapper(name)(root, *ints), getattr(raw, name)(x=ints[0], y=ints[1]))
              for name in ("Maximum", "Minimum", "SquaredDifference", "FloorDiv", "FloorMod",
                           "TruncateDiv", "TruncateMod", "Less", "NotEqual")]
    cases += [(name, _wrapper(name)(root, x32), getattr(raw, name)(x=x32))
              for name in ("IsFinite", "IsInf", "IsNan")]
    cases.append(("Atan2", ops.Atan2(root, xb, yb), raw.Atan2(y=xb, x=yb)))
    cases.append(("Pow", ops.Pow(root, *powers), raw.Pow(x=powers[0], y=powers[1])))
    cases += [(name, _wrapper(name)(root, ints[0]), getattr(raw, name)(x=ints[0]))
              for name in ("Abs", "Sign")]
    a, b = xb > 0, yb < 1
    cases += [("LogicalAnd", ops.LogicalAnd(root, a, b), raw.LogicalAnd(x=a, y=b)),
              ("LogicalNot", ops.LogicalNot(root, a), raw.LogicalNot(x=a)),
              ("Select", ops.Select(root, [True, False, True, True, False], x32, -x32),
               raw.Select(condition=[True, False, True, True, False], x=x32, y=-x32)),
              ("SelectV2", ops.SelectV2(root, a, xb, yb), raw.SelectV2(condition=a, t=xb, e=yb)),
              ("SqrtGrad", ops.SqrtGrad(root, np.abs(x32) + 1, x32),
               raw.SqrtGrad(y=np.abs(x32) + 1, dy=x32)),
              ("NotEqual", ops.NotEqual(root, x32, np.ones(3, F32),
                                        incompatible_shape_error=False),
               raw.NotEqual(x=x32, y=np.ones(3, F32), incompatible_shape_error=False))]
    ours = run(root, [c[1] for c in cases], backend)
    for (name, _, theirs), value in zip(cases, ours):
        _assert_matches_tf(name, value, theirs.numpy())


@pytest.mark.oracle
def test_error_function_against_tensorflow_on_a_dense_grid():
    """TF's float32 Erf is within 6 ulps of the correctly rounded value that minigraph gives,
    its Erfc within 1e-5 relative (65 ulps at worst, near x = 8.8) while the result is a
    normal float32 (TF flushes the subnormal results beyond x = 9.2 to 0)."""
    tf = _tf()
    x = np.concatenate([np.linspace(-9.1, 9.1, 400001, dtype=F32),
                        np.geomspace(1e-37, 0.5, 2001).astype(F32)])
    x = np.concatenate([x, -x])
    root = mg.Scope.NewRootScope()
    ours = run(root, [ops.Erf(root, x), ops.Erfc(root, x)])
    theirs = tf.raw_ops.Erf(x=x).numpy()
    distance = np.abs(ours[0].view(np.int32).astype(np.int64) - theirs.view(np.int32))
    assert distance.max() <= 6
    assert_close(ours[1], tf.raw_ops.Erfc(x=x).numpy().astype(F64), dtype=F32, mag=0.0,
                 what="Erfc")


@pytest.mark.oracle
def test_a_tensorflow_graph_with_the_elementwise_ops_imports():
    """tf.function of what Keras layers write (exact GELU: an Erfc, masks, clipping...),
    imported and run on every backend."""
    tf = _tf()
    from minigraph.testing import tf_graphs

    def body(x, y):
        return (tf.nn.gelu(x, approximate=False), tf.where(x > y, x, y * 2.0),
                tf.maximum(tf.minimum(x, 1.0), -1.0), tf.math.squared_difference(x, y),
                tf.math.floormod(x, 1.5), tf.math.floordiv(x, 0.75), tf.math.divide_no_nan(x, y),
                tf.sqrt(tf.abs(x)), tf.exp(-tf.square(x)), tf.math.log1p(tf.abs(y)),
                tf.math.expm1(y), tf.math.log(tf.abs(x) + 1e-3), tf.pow(tf.abs(x), y),
                tf.round(x * 2.0), tf.math.sign(y), tf.math.floor(x) + tf.math.ceil(y),
                tf.sin(x) * tf.cos(y), tf.math.erf(y),
                tf.logical_and(tf.not_equal(x, y), tf.logical_not(x <= y)) | (x >= 2.0))

    rng = np.random.default_rng(3)
    values = [rng.standard_normal((4, 6)).astype(F32), rng.standard_normal((1, 6)).astype(F32)]
    values[1][0, 2] = 0.0
    specs = [tf.TensorSpec([None, 6], tf.float32), tf.TensorSpec([1, 6], tf.float32)]
    graph = tf_graphs._concrete("elementwise", body, specs, values)
    root = mg.import_graph_def(graph.graph_def)
    types = {op.type for op in root.graph().get_operations()}
    assert {"Erf", "Erfc", "SelectV2", "Maximum", "FloorMod", "DivNoNan", "LogicalOr"} <= types
    for backend in BACKENDS:
        ours = mg.ClientSession(root, backend=backend).Run(graph.feeds, graph.fetches)
        for a, b in zip(ours, graph.expected):
            assert a.dtype == b.dtype
            if a.dtype == np.bool_:
                np.testing.assert_array_equal(a, b)
            else:
                assert_close(a, b.astype(F64), dtype=F32, what=f"{backend}")
