"""The reduction family (minigraph/ops/reduction_ops.py): Max, Min, Prod, All, Any, ArgMin,
Cumsum, Cumprod against float64 formulas written here and against ``tf.raw_ops`` (every dtype,
NaN, empty reductions, negative and int64 axes, keep_dims, exclusive/reverse scans), shape
inference and errors, and a frozen TF graph using them. Gradients are checked in
test_gradient_checker.py."""

from __future__ import annotations

import itertools
import os

import ml_dtypes
import numpy as np
import pytest
from conftest import BACKENDS, assert_close

import minigraph as mg
from minigraph import ops

F32, F64, BF16 = np.float32, np.float64, np.dtype(ml_dtypes.bfloat16)
FLOAT_TYPES = (np.float16, BF16, F32, F64)
RNG = np.random.default_rng(1)
X = RNG.uniform(-2, 2, (3, 4, 5))
AXES = [[0], [1, 2], [-1], [0, 1, 2], [], 1]


def run(root, fetches, backend="reference", feeds=None):
    return mg.ClientSession(root, backend=backend).Run(feeds or {}, fetches)


def _np_axes(axes):
    return tuple(np.atleast_1d(np.array(axes, np.int64)).tolist())


def _scan(x, axis, exclusive, reverse, multiply):
    """Cumulative sums/products by an explicit loop over the positions (float64)."""
    x = np.moveaxis(np.asarray(x, F64), axis, 0)
    order = range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0])
    out = np.empty_like(x)
    total = np.ones_like(x[0]) if multiply else np.zeros_like(x[0])
    for i in order:
        if exclusive:
            out[i] = total
        total = total * x[i] if multiply else total + x[i]
        if not exclusive:
            out[i] = total
    return np.moveaxis(out, 0, axis)


REDUCTIONS = {"Max": np.max, "Min": np.min, "Prod": np.prod}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", FLOAT_TYPES + (np.int32, np.int64),
                         ids=lambda d: np.dtype(d).name)
def test_reductions_match_numpy(backend, dtype):
    x = (X * 3).astype(dtype)
    root = mg.Scope.NewRootScope()
    cases = [(name, axes, keep, getattr(ops, name)(root, x, np.array(axes, np.int32),
                                                    keep_dims=keep))
             for name, axes, keep in itertools.product(REDUCTIONS, AXES, (False, True))]
    for (name, axes, keep, out), value in zip(cases, run(root, [c[3] for c in cases], backend)):
        expected = REDUCTIONS[name](x.astype(F64), axis=_np_axes(axes), keepdims=keep)
        assert out.shape == mg.TensorShape(expected.shape), (name, axes, keep)
        if np.dtype(dtype).kind == "i":
            assert value.dtype == dtype
            np.testing.assert_array_equal(value, expected.astype(dtype), err_msg=name)
        else:
            assert_close(value, expected, dtype=np.dtype(dtype), mag=0.0, what=f"{name} {axes}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_logical_reductions_and_arg_min(backend):
    x = X > 0.5
    root = mg.Scope.NewRootScope()
    outs = [ops.All(root, x, [0, 2]), ops.Any(root, x, -1, keep_dims=True),
            ops.All(root, np.zeros((0, 3), bool), [0]), ops.Any(root, np.zeros((0, 3), bool), 0),
            ops.ArgMin(root, X.astype(F32), 1), ops.ArgMin(root, x, np.int64(0),
                                                          output_type=mg.int32)]
    values = run(root, outs, backend)
    np.testing.assert_array_equal(values[0], x.all(axis=(0, 2)))
    np.testing.assert_array_equal(values[1], x.any(axis=-1, keepdims=True))
    np.testing.assert_array_equal(values[2], [True] * 3)
    np.testing.assert_array_equal(values[3], [False] * 3)
    assert values[4].dtype == np.int64 and values[5].dtype == np.int32
    np.testing.assert_array_equal(values[4], X.astype(F32).argmin(axis=1))
    np.testing.assert_array_equal(values[5], x.argmin(axis=0))


@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_reductions_give_the_identity(backend):
    root = mg.Scope.NewRootScope()
    cases = []
    for dtype in FLOAT_TYPES + (np.int32, np.int64):
        empty = np.zeros((0, 2), dtype)
        lowest, highest = ((np.iinfo(dtype).min, np.iinfo(dtype).max)
                           if np.dtype(dtype).kind == "i" else (-np.inf, np.inf))
        cases += [(ops.Max(root, empty, 0), lowest), (ops.Min(root, empty, 0), highest),
                  (ops.Prod(root, empty, 0), 1)]
    for (out, expected), value in zip(cases, run(root, [c[0] for c in cases], backend)):
        assert value.dtype == out.dtype.np_dtype
        np.testing.assert_array_equal(value, np.full(2, expected, value.dtype))


@pytest.mark.parametrize("backend", BACKENDS)
def test_nan_propagates_in_max_and_is_skipped_by_arg_min_and_arg_max(backend):
    """As TF's CPU kernels: Max/Min give NaN, ArgMin/ArgMax ignore it (0 for all NaN)."""
    x = np.array([[1.0, np.nan, 3.0], [np.nan, np.nan, np.nan], [np.nan, 2.0, -1.0]], F32)
    root = mg.Scope.NewRootScope()
    values = run(root, [ops.Max(root, x, 1), ops.Min(root, x, 0), ops.ArgMin(root, x, 1),
                        ops.ArgMax(root, x, 1)], backend)
    assert np.isnan(values[0]).all() and np.isnan(values[1]).all()
    assert values[2].tolist() == [0, 0, 2] and values[3].tolist() == [2, 0, 1]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", FLOAT_TYPES + (np.int32, np.int64),
                         ids=lambda d: np.dtype(d).name)
def test_scans_match_a_loop(backend, dtype):
    x = (X * 2).astype(dtype)
    root = mg.Scope.NewRootScope()
    cases = [(op, axis, exclusive, reverse,
              getattr(ops, op)(root, x, np.int64(axis), exclusive=exclusive, reverse=reverse))
             for op in ("Cumsum", "Cumprod") for axis in (0, -1, 1)
             for exclusive in (False, True) for reverse in (False, True)]
    for (op, axis, exclusive, reverse, out), value in zip(cases, run(root, [c[-1] for c in cases],
                                                                     backend)):
        expected = _scan(x, axis, exclusive, reverse, op == "Cumprod")
        assert out.shape == mg.TensorShape(x.shape)
        what = f"{op} axis={axis} exclusive={exclusive} reverse={reverse}"
        if np.dtype(dtype).kind == "i":
            np.testing.assert_array_equal(value, expected.astype(dtype), err_msg=what)
        else:
            assert_close(value, expected, dtype=np.dtype(dtype), what=what)
    empty = run(root, ops.Cumsum(root, np.zeros((0, 2), F32), 0, exclusive=True), backend)
    assert empty.shape == (0, 2)


def test_shapes_known_only_partly():
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root, mg.float32, shape=[None, 3, 4])
    axes = ops.Placeholder(root, mg.int32, shape=[2])
    assert ops.Max(root, x, [0, 2]).shape == mg.TensorShape([3])
    assert ops.Prod(root, x, [-1], keep_dims=True).shape == mg.TensorShape([None, 3, 1])
    assert ops.Min(root, x, axes).shape == mg.TensorShape(None)
    assert ops.Any(root, ops.Greater(root, x, 0.0), axes, keep_dims=True).shape == \
        mg.TensorShape([None, None, None])
    assert ops.ArgMin(root, x, 2).shape == mg.TensorShape([None, 3])
    assert ops.Cumprod(root, x, ops.Placeholder(root, mg.int32, shape=[])).shape == x.shape


@pytest.mark.parametrize("build, match", [
    (lambda r: ops.Max(r, X, [3]), r"Max .*axis 3 in input 'reduction_indices' is out of range"),
    (lambda r: ops.Prod(r, X, [1, -2]), r"Prod .*axis -2 .* is specified more than once"),
    (lambda r: ops.All(r, X, [0]), r"All .*input 'input' must be bool, got float64"),
    (lambda r: ops.Max(r, X > 0, [0]), r"Max .*input 'input' has dtype bool"),
    (lambda r: ops.ArgMin(r, np.zeros((0, 3), F32), 0), r"ArgMin .*reduction axis 0 is empty"),
    (lambda r: ops.Cumsum(r, X, [1]), r"Cumsum .*ScanOp: axis must be a scalar, not \[1\]"),
    (lambda r: ops.Cumprod(r, X, 3),
     r"Cumprod .*ScanOp: Expected scan axis in the range \[-3, 3\), but got 3"),
    (lambda r: ops.Cumsum(r, np.float32(1), 0), r"Cumsum .*range \[0, 0\), but got 0"),
    (lambda r: ops.Cumsum(r, X > 0, 0), r"Cumsum .*input 'x' has dtype bool"),
])
def test_bad_inputs_are_refused_with_tensorflows_words(build, match):
    with pytest.raises(mg.errors.InvalidArgumentError, match=match):
        build(mg.Scope.NewRootScope())


@pytest.mark.parametrize("backend", BACKENDS)
def test_axes_known_only_at_run_time_are_checked_then(backend):
    root = mg.Scope.NewRootScope()
    axis = ops.Placeholder(root.WithOpName("axis"), mg.int32, shape=[])
    scan = ops.Cumsum(root.WithOpName("scan"), X, axis)
    biggest = ops.Max(root.WithOpName("max"), X, axis)
    session = mg.ClientSession(root, backend=backend)
    with pytest.raises(mg.errors.InvalidArgumentError, match=r"Cumsum 'scan'.*got -4"):
        session.Run({axis: np.int32(-4)}, scan)
    with pytest.raises(mg.errors.InvalidArgumentError, match=r"Max 'max'.*axis 3"):
        session.Run({axis: np.int32(3)}, biggest)
    np.testing.assert_allclose(session.Run({axis: np.int32(-1)}, scan), np.cumsum(X, -1))


# ----------------------------------------------------------------------------- TensorFlow


def _tf():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return pytest.importorskip("tensorflow")


@pytest.mark.oracle
@pytest.mark.parametrize("backend", BACKENDS)
def test_against_tensorflow(backend):
    tf = _tf()
    raw = tf.raw_ops
    x = (X * 3).astype(F32)
    x[0, 1, 2] = np.nan
    ints = (X * 10).astype(np.int64)
    b = X > 0
    root = mg.Scope.NewRootScope()
    cases = []
    for name, value in itertools.product(("Max", "Min", "Prod"), (x, ints)):
        for axes, keep in ((np.array([0, -1], np.int64), False), (np.int32(1), True)):
            cases.append((getattr(ops, name)(root, value, axes, keep_dims=keep),
                          getattr(raw, name)(input=value, axis=axes, keep_dims=keep)))
    for name in ("All", "Any"):
        cases.append((getattr(ops, name)(root, b, [1], keep_dims=True),
                      getattr(raw, name)(input=b, axis=[1], keep_dims=True)))
    cases += [(ops.ArgMin(root, value, -1, output_type=mg.int32),
               raw.ArgMin(input=value, dimension=-1, output_type=tf.int32)) for value in (x, ints)]
    cases.append((ops.ArgMax(root, x, 2), raw.ArgMax(input=x, dimension=2)))
    for name, exclusive, reverse in itertools.product(("Cumsum", "Cumprod"), (False, True),
                                                      (False, True)):
        for value in (x, ints):
            cases.append((getattr(ops, name)(root, value, 1, exclusive=exclusive,
                                             reverse=reverse),
                          getattr(raw, name)(x=value, axis=1, exclusive=exclusive,
                                             reverse=reverse)))
    cases.append((ops.Max(root, np.zeros((0, 2), np.int32), 0),
                  raw.Max(input=np.zeros((0, 2), np.int32), axis=0)))
    ours = run(root, [c[0] for c in cases], backend)
    for (out, theirs), value in zip(cases, ours):
        theirs = theirs.numpy()
        assert value.dtype == theirs.dtype, out.op.type
        if value.dtype == F32:  # float64 accumulation vs TF's float32: float32 tolerance
            assert_close(value, theirs.astype(F64), dtype=F32, what=out.op.type)
        else:
            np.testing.assert_array_equal(value, theirs, err_msg=out.op.type)


@pytest.mark.oracle
def test_a_tensorflow_graph_with_the_reductions_imports():
    tf = _tf()
    from minigraph.testing import tf_graphs

    def body(x):
        return (tf.reduce_max(x, axis=[1, 2]), tf.reduce_min(x, axis=-1, keepdims=True),
                tf.reduce_prod(x, axis=0), tf.reduce_all(x > -1.0, axis=1),
                tf.reduce_any(x > 1.5), tf.argmin(x, axis=2, output_type=tf.int32),
                tf.math.cumsum(x, axis=1, exclusive=True),
                tf.math.cumprod(x, axis=-1, reverse=True))

    x = np.random.default_rng(2).standard_normal((2, 3, 4)).astype(F32)
    graph = tf_graphs._concrete("reductions", body, [tf.TensorSpec([None, 3, 4], tf.float32)],
                                [x])
    root = mg.import_graph_def(graph.graph_def)
    for backend in BACKENDS:
        ours = mg.ClientSession(root, backend=backend).Run(graph.feeds, graph.fetches)
        for a, b in zip(ours, graph.expected):
            assert a.dtype == b.dtype
            if a.dtype == F32:
                assert_close(a, b.astype(F64), dtype=F32, what=backend)
            else:
                np.testing.assert_array_equal(a, b)


@pytest.mark.oracle
@pytest.mark.parametrize("backend", BACKENDS)
def test_gradients_against_tensorflow(backend):
    """Max's ties share the cotangent evenly, Prod's zero gets the others' product, Cumprod
    and Cumsum scan back the other way: as tf.GradientTape computes them."""
    tf = _tf()
    x = np.array([[2.0, -1.0, 2.0], [0.0, 3.0, 0.5]], F32)
    w = np.array([[0.5, -2.0, 1.5], [1.0, 0.25, -1.0]], F32)
    builders = {
        "max_ties": (lambda s, v: ops.Max(s, v, 1), lambda v: tf.reduce_max(v, axis=1)),
        "min_all": (lambda s, v: ops.Min(s, v, [0, 1]), lambda v: tf.reduce_min(v)),
        "prod_zero": (lambda s, v: ops.Prod(s, v, [1, 0]), lambda v: tf.reduce_prod(v, [1, 0])),
        "cumprod": (lambda s, v: ops.Mul(s, ops.Cumprod(s, v, 1, exclusive=True), w),
                    lambda v: tf.math.cumprod(v, 1, exclusive=True) * w),
        "cumsum": (lambda s, v: ops.Mul(s, ops.Cumsum(s, v, 0, reverse=True), w),
                   lambda v: tf.math.cumsum(v, 0, reverse=True) * w),
    }
    for name, (ours, theirs) in builders.items():
        root = mg.Scope.NewRootScope()
        v = ops.Const(root, x)
        (grad,) = mg.AddSymbolicGradients(root, [ours(root, v)], [v])
        tensor = tf.constant(x)
        with tf.GradientTape() as tape:
            tape.watch(tensor)
            y = theirs(tensor)
        expected = tape.gradient(y, tensor).numpy()
        assert_close(run(root, grad, backend), expected.astype(F64), dtype=F32, what=name)

