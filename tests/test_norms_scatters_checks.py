"""EuclideanNorm and CumulativeLogsumexp (ops/reduction_ops.py), TensorScatterUpdate / Add /
Sub (ops/index_ops.py), CheckNumerics (ops/array_ops.py), LRN (ops/nn_ops.py) and InTopKV2
(ops/selection_ops.py): values against float64 formulas written here, TF's errors, and
``tf.raw_ops`` on the same inputs. Gradients are checked in test_gradient_checker.py."""

from __future__ import annotations

import os

import numpy as np
import pytest
from conftest import BACKENDS, assert_close

import minigraph as mg
from minigraph import ops

F32, F64 = np.float32, np.float64
RNG = np.random.default_rng(3)
X = RNG.standard_normal((3, 4, 5)).astype(F32)


def run(root, fetches, backend="reference", feeds=None):
    return mg.ClientSession(root, backend=backend).Run(feeds or {}, fetches)


def _tf():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return pytest.importorskip("tensorflow")


def _lrn_reference(x, radius, bias, alpha, beta):
    """Each channel over the squares of its window [c - r, c + r], written out."""
    x = x.astype(F64)
    out = np.empty_like(x)
    channels = x.shape[-1]
    for c in range(channels):
        window = x[..., max(0, c - radius):min(channels, c + radius + 1)]
        out[..., c] = x[..., c] / (bias + alpha * (window ** 2).sum(-1)) ** beta
    return out


def _cumulative_logsumexp_reference(x, axis, exclusive, reverse):
    """log(sum(exp)) of each prefix (suffix with reverse; the element left out when
    exclusive, -inf for an empty one), with the running maximum taken out."""
    x = np.moveaxis(x.astype(F64), axis, -1)
    out = np.empty_like(x)
    n = x.shape[-1]
    for i in range(n):
        part = range(i, n) if reverse else range(i + 1)
        part = [j for j in part if not (exclusive and j == i)]
        if not part:
            out[..., i] = -np.inf
            continue
        values = x[..., part]
        top = values.max(-1, keepdims=True)
        out[..., i] = (top + np.log(np.exp(values - top).sum(-1, keepdims=True)))[..., 0]
    return np.moveaxis(out, -1, axis)


@pytest.mark.parametrize("backend", BACKENDS)
def test_norms_scans_and_lrn_match_float64_formulas(backend):
    root = mg.Scope.NewRootScope()
    norms = [ops.EuclideanNorm(root, X, np.array(axes, np.int32), keep_dims=keep)
             for axes, keep in (([1], False), ([0, 2], True), ([], False))]
    ints = ops.EuclideanNorm(root, np.array([[3, 4], [1, 1]], np.int32), np.int32(1))
    scans = [(axis, exclusive, reverse,
              ops.CumulativeLogsumexp(root, X * 20, np.int32(axis), exclusive=exclusive,
                                      reverse=reverse))
             for axis, exclusive, reverse in ((1, False, False), (-1, True, True),
                                              (0, True, False))]
    lrn = ops.LRN(root, X.reshape(3, 2, 2, 5), depth_radius=2, bias=1.5, alpha=0.3, beta=0.75)
    values = run(root, [*norms, ints, *[s[-1] for s in scans], lrn], backend)
    for (axes, keep), value in zip((([1], False), ([0, 2], True), ([], False)), values[:3]):
        expected = np.sqrt((X.astype(F64) ** 2).sum(axis=tuple(axes), keepdims=keep))
        assert_close(value, expected, dtype=F32, mag=0.0, what=f"EuclideanNorm {axes}")
    np.testing.assert_array_equal(values[3], [5, 1])  # sqrt(2) truncated, as TF's
    for (axis, exclusive, reverse, _), value in zip(scans, values[4:7]):
        expected = _cumulative_logsumexp_reference(X * 20, axis, exclusive, reverse)
        assert_close(value, expected, dtype=F32, mag=0.0, what="CumulativeLogsumexp")
    assert_close(values[7], _lrn_reference(X.reshape(3, 2, 2, 5), 2, 1.5, 0.3, 0.75),
                 dtype=F32, mag=0.0, what="LRN")


@pytest.mark.parametrize("backend", BACKENDS)
def test_tensor_scatters_and_check_numerics(backend):
    tensor = RNG.standard_normal((4, 3)).astype(F32)
    indices = np.array([[2], [0], [2]], np.int64)  # row 2 twice
    updates = RNG.standard_normal((3, 3)).astype(F32)
    root = mg.Scope.NewRootScope()
    fetches = [ops.TensorScatterUpdate(root, tensor, indices, updates),
               ops.TensorScatterAdd(root, tensor, indices, updates),
               ops.TensorScatterSub(root, tensor, np.array([[1, 2], [3, 0]], np.int32),
                                    np.array([10.0, 20.0], F32)),
               ops.CheckNumerics(root, tensor, message="fine")]
    updated, added, subtracted, checked = run(root, fetches, backend)
    expected = tensor.copy()
    expected[0], expected[2] = updates[1], updates[2]  # the last write wins
    np.testing.assert_array_equal(updated, expected)
    expected = tensor.copy()
    for row, update in zip(indices[:, 0], updates):
        expected[row] += update
    np.testing.assert_allclose(added, expected, rtol=1e-6)
    expected = tensor.copy()
    expected[1, 2] -= 10.0
    expected[3, 0] -= 20.0
    np.testing.assert_array_equal(subtracted, expected)
    np.testing.assert_array_equal(checked, tensor)
    for bad, words in ((np.array([1.0, np.nan], F32), "Tensor had NaN values"),
                       (np.array([np.inf, np.nan], F32), "Tensor had Inf and NaN values")):
        root = mg.Scope.NewRootScope()
        x = ops.Placeholder(root, mg.float32, shape=[2])
        checked = ops.CheckNumerics(root, x, message="my tensor")
        with pytest.raises(mg.errors.InvalidArgumentError, match=f"my tensor : {words}"):
            run(root, checked, backend, feeds={x: bad})


@pytest.mark.parametrize("backend", BACKENDS)
def test_in_top_k_counts_ties_in_and_non_finite_rows_out(backend):
    p = np.array([[0.1, 0.5, 0.5, 0.2], [np.nan, 1.0, 2.0, 3.0], [0.3, 0.3, 0.3, 0.3],
                  [np.inf, 1.0, 2.0, 0.0], [0.4, 0.1, 0.9, 0.2]], F32)
    root = mg.Scope.NewRootScope()
    cases = [([1, 3, 0, 1, 2], 1), ([2, 2, 3, 0, 0], 2), ([-1, 5, 3, 0, 3], 3),
             ([0, 0, 0, 0, 1], 0)]
    outs = [ops.InTopKV2(root, p, np.array(t, np.int32), np.int32(k)) for t, k in cases]
    for (targets, k), value in zip(cases, run(root, outs, backend)):
        expected = []
        for row, target in zip(p, targets):
            if not 0 <= target < 4 or not np.isfinite(row).all():
                expected.append(False)
            else:
                expected.append(int((row > row[target]).sum()) < k)
        np.testing.assert_array_equal(value, expected)


def test_tensorflows_errors():
    root = mg.Scope.NewRootScope()
    t = np.zeros((4, 3), F32)
    cases = [
        (lambda: ops.TensorScatterUpdate(root, t, np.array([[4]], np.int32),
                                         np.ones((1, 3), F32)),
         r"indices\[0\] = \[4\] does not index into shape \[4,3\]"),
        (lambda: ops.TensorScatterAdd(root, t, np.array([[1]], np.int32),
                                      np.ones((1, 2), F32)),
         r"updates must have shape indices.shape\[:-1\] \+ tensor.shape"),
        (lambda: ops.LRN(root, t), "input must be 4-dimensional"),
        (lambda: ops.InTopKV2(root, t, np.zeros(3, np.int32), np.int32(1)),
         "First dimension of predictions 4 must match length of targets 3"),
        (lambda: ops.CumulativeLogsumexp(root, np.arange(3), np.int32(0)),
         "has dtype int64, not in the allowed values for T"),
        (lambda: ops.CheckNumerics(root, np.arange(3), message="m"),
         "has dtype int64, not in the allowed values for T"),
    ]
    for build, message in cases:
        with pytest.raises(mg.errors.InvalidArgumentError, match=message):
            build()


@pytest.mark.oracle
@pytest.mark.parametrize("backend", BACKENDS)
def test_against_tensorflow(backend):
    tf = _tf()
    raw = tf.raw_ops
    x4 = X.reshape(3, 2, 2, 5)
    p = RNG.integers(0, 4, (6, 5)).astype(F32)  # ties
    targets = RNG.integers(0, 5, 6).astype(np.int32)
    root = mg.Scope.NewRootScope()
    cases = [
        (ops.EuclideanNorm(root, X, np.array([0, 2], np.int32), keep_dims=True),
         raw.EuclideanNorm(input=X, axis=[0, 2], keep_dims=True), True),
        (ops.CumulativeLogsumexp(root, X, np.int32(1), exclusive=True, reverse=True),
         raw.CumulativeLogsumexp(x=X, axis=1, exclusive=True, reverse=True), True),
        (ops.LRN(root, x4, depth_radius=1, bias=2.0, alpha=0.1, beta=0.6),
         raw.LRN(input=x4, depth_radius=1, bias=2.0, alpha=0.1, beta=0.6), True),
        (ops.TensorScatterUpdate(root, X, np.array([[1, 2], [0, 0]], np.int32), X[:2, 0]),
         raw.TensorScatterUpdate(tensor=X, indices=[[1, 2], [0, 0]], updates=X[:2, 0]), False),
        (ops.InTopKV2(root, p, targets, np.int32(2)),
         raw.InTopKV2(predictions=p, targets=targets, k=np.int32(2)), False),
    ]
    ours = run(root, [c[0] for c in cases], backend)
    for value, (_, theirs, approximate) in zip(ours, cases):
        theirs = theirs.numpy()
        if approximate:
            assert_close(value, theirs.astype(F64), dtype=theirs.dtype, mag=0.0)
        else:
            np.testing.assert_array_equal(value, theirs)
