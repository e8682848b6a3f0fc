"""GatherV2, UnsortedSegmentSum, OneHot, Range (minigraph/ops/index_ops.py): values against
float64/numpy formulas written here on every backend, shape inference, TF's words for bad
input (out-of-range indices name the element), TensorFlow's raw ops bit for bit, and Range's
length known (and refused when absurd) before anything is allocated. Gradients are checked in
test_gradient_checker.py."""

from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import pytest
from conftest import BACKENDS

import minigraph as mg
from minigraph import ops

F32 = np.float32
RNG = np.random.default_rng(0)
P = RNG.standard_normal((2, 3, 4, 5)).astype(F32)


def run(root, fetches, backend="reference", feeds=None):
    return mg.ClientSession(root, backend=backend).Run(feeds or {}, fetches)


def gathered(params, indices, axis, batch_dims):
    """out[b..., before..., i..., after...] = params[b..., before..., indices[b..., i...],
    after...], element by element."""
    b, q = batch_dims, indices.ndim - batch_dims
    out_shape = params.shape[:axis] + indices.shape[b:] + params.shape[axis + 1:]
    out = np.empty(out_shape, params.dtype)
    for position in np.ndindex(*out_shape):
        batch, before = position[:b], position[b:axis]
        index_at, after = position[axis:axis + q], position[axis + q:]
        row = indices[batch + index_at]
        out[position] = params[batch + before + (row,) + after]
    return out


SPECS = [(axis, b) for b in (0, 1, 2) for axis in range(b, 4)]


@pytest.mark.parametrize("axis, batch_dims", SPECS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_gather_reads_what_the_formula_says(backend, axis, batch_dims):
    rng = np.random.default_rng(axis * 3 + batch_dims)
    index_shape = P.shape[:batch_dims] + (2, 3)
    indices = rng.integers(0, P.shape[axis], index_shape)
    root = mg.Scope.NewRootScope()
    outs = [ops.GatherV2(root, P, indices.astype(np.int32), np.int32(axis),
                         batch_dims=batch_dims),  # negative axis and batch_dims too
            ops.GatherV2(root, P, indices, np.int64(axis - 4),
                         batch_dims=batch_dims - indices.ndim if batch_dims else 0)]
    expected = gathered(P, indices, axis, batch_dims)
    for out, value in zip(outs, run(root, outs, backend)):
        assert out.shape == mg.TensorShape(expected.shape)
        np.testing.assert_array_equal(value, expected)


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_dtype_scalar_indices_and_zero_sizes(backend):
    for dtype in (np.float16, ml_dtypes.bfloat16, np.float64, np.int32, np.int64, np.bool_):
        params = (RNG.standard_normal((5, 3)) * 4).astype(dtype)
        root = mg.Scope.NewRootScope()
        row = ops.GatherV2(root, params, np.int32(4), np.int32(0))
        none = ops.GatherV2(root, params, np.zeros((2, 0), np.int64), np.int32(1))
        empty = ops.GatherV2(root, np.zeros((0, 3), dtype), np.zeros((0,), np.int32), 0)
        a, b, c = run(root, [row, none, empty], backend)
        np.testing.assert_array_equal(a, params[4])
        assert a.dtype == params.dtype and b.shape == (5, 2, 0) and c.shape == (0, 3)


@pytest.mark.parametrize("indices, axis, match", [
    (np.array([[0, 7]]), 0, r"indices\[0,1\] = 7 is not in \[0, 5\) \(input 'indices'\)"),
    (np.array([[0, 1], [2, -1]]), 1, r"indices\[1,1\] = -1 is not in \[0, 3\)"),
    (np.int64(9), 0, r"indices = 9 is not in \[0, 5\)"),
])
def test_out_of_range_indices_are_tensorflows_error(indices, axis, match):
    """The index check of TF's CPU kernel, at run time and for constant indices alike."""
    params = RNG.standard_normal((5, 3)).astype(F32)
    root = mg.Scope.NewRootScope()
    fed = ops.Placeholder(root.WithOpName("i"), mg.as_dtype(np.asarray(indices).dtype))
    out = ops.GatherV2(root.WithOpName("gather"), params, fed, np.int32(axis))
    with pytest.raises(mg.errors.InvalidArgumentError, match=rf"GatherV2 'gather': {match}"):
        mg.ClientSession(root).Run({fed: indices}, out)
    constant = ops.GatherV2(root.WithOpName("const"), params, indices, np.int32(axis))
    with pytest.raises(mg.errors.InvalidArgumentError, match=match):
        mg.ClientSession(root).Run(constant)


@pytest.mark.parametrize("build, match", [
    (lambda r: ops.GatherV2(r, P, [0], 4), r"Expected axis in the range \[-4, 4\), but got 4"),
    (lambda r: ops.GatherV2(r, F32(1), [0], 0), r"params must be at least 1 dimensional"),
    (lambda r: ops.GatherV2(r, P, [0], [0]), r"axis must be scalar, but got shape \[1\]"),
    (lambda r: ops.GatherV2(r, P, np.zeros((2, 3), np.int32), 2, batch_dims=3),
     r"Expected batch_dims in the range \[-2, 2\], but got 3"),
    (lambda r: ops.GatherV2(r, P, np.zeros((2, 3), np.int32), 0, batch_dims=1),
     r"batch_dims \(1\) must be less than or equal to axis \(0\)."),
    (lambda r: ops.GatherV2(r, P, np.zeros((3, 3), np.int32), 1, batch_dims=1),
     r"params.shape\[0\]: 2 should be equal to indices.shape\[0\]: 3"),
    (lambda r: ops.GatherV2(r, P[0, 0, 0], np.zeros((5,), np.int32), 0, batch_dims=1),
     r"batch_dims \(1\) must be less than rank\(params\) \(1\)."),
    (lambda r: ops.GatherV2(r, P, np.array([0.5]), 0), r"input 'indices' has dtype float64"),
    (lambda r: ops.UnsortedSegmentSum(r, P[0], [0, 1], 3),
     r"data.shape = \[3,4,5\] does not start with segment_ids.shape = \[2\]"),
    (lambda r: ops.UnsortedSegmentSum(r, P[0], [0, 1, 1], -1),
     r"Input num_segments == -1 must not be negative."),
    (lambda r: ops.UnsortedSegmentSum(r, P[0], [0, 1, 1], [3]),
     r"num_segments should be a scalar, not shape \[1\]"),
    (lambda r: ops.OneHot(r, [0, 2], 3, 1.0, 0.0, axis=2),
     r"Expected axis to be -1 or between \[0, 2\).  But received: 2"),
    (lambda r: ops.OneHot(r, [0, 2], -1, 1.0, 0.0), r"depth must be non-negative, got: -1"),
    (lambda r: ops.OneHot(r, [0, 2], 3, [1.0], 0.0), r"on_value must be a scalar, but got: \[1\]"),
    (lambda r: ops.OneHot(r, [0, 2], 3, 1.0, np.float64(0)),
     r"input 'off_value' has dtype float64 that does not match dtype float32"),
    (lambda r: ops.Range(r, 0, 5, 0), r"Requires delta != 0: 0 \(input 'delta'\)"),
    (lambda r: ops.Range(r, 0, 5, -1), r"Requires start >= limit when delta < 0: 0/5"),
    (lambda r: ops.Range(r, 5.5, 0.0, 1.0), r"Requires start <= limit when delta > 0: 5.5/0"),
    (lambda r: ops.Range(r, 0.0, float("nan"), 1.0),
     r"Requires start <= limit when delta > 0: 0/nan"),
    (lambda r: ops.Range(r, 0.0, 1e30, 1e-10),
     r"Requires \(\(limit - start\) / delta\) <= 9223372036854775807"),
    (lambda r: ops.Range(r, [0, 1], 5, 1), r"start must be a scalar, not shape \[2\]"),
])
def test_bad_arguments_are_refused_with_tensorflows_words(build, match):
    with pytest.raises(mg.errors.InvalidArgumentError, match=match):
        build(mg.Scope.NewRootScope())


def test_unknown_values_give_partial_shapes():
    root = mg.Scope.NewRootScope()
    indices = ops.Placeholder(root, mg.int32, shape=[None, 2])
    axis = ops.Placeholder(root, mg.int32, shape=[])
    scalar = ops.Placeholder(root, mg.int64, shape=[])
    assert ops.GatherV2(root, P, indices, 1).shape == mg.TensorShape([2, None, 2, 4, 5])
    assert ops.GatherV2(root, P, indices, axis).shape == mg.TensorShape(None)
    assert ops.OneHot(root, indices, 4, 1.0, 0.0, axis=1).shape == \
        mg.TensorShape([None, 4, 2])
    assert ops.OneHot(root, indices, ops.Placeholder(root, mg.int32), 1.0, 0.0).shape == \
        mg.TensorShape([None, 2, None])
    assert ops.Range(root, scalar, np.int64(5), np.int64(1)).shape == mg.TensorShape([None])
    ids = ops.Placeholder(root, mg.int32, shape=[None, 3])
    assert ops.UnsortedSegmentSum(root, P, ids, 7).shape == mg.TensorShape([7, 4, 5])
    assert ops.UnsortedSegmentSum(root, P, ids, axis).shape == mg.TensorShape([None, 4, 5])


@pytest.mark.parametrize("backend", BACKENDS)
def test_unsorted_segment_sum_one_hot_and_range_values(backend):
    data = RNG.standard_normal((2, 3, 4)).astype(np.float64)
    ids = np.array([[0, -1, 3], [2, 2, 0]], np.int32)
    expected = np.zeros((5, 4))
    for position in np.ndindex(2, 3):
        if ids[position] >= 0:
            expected[ids[position]] += data[position]
    root = mg.Scope.NewRootScope()
    summed = ops.UnsortedSegmentSum(root, data, ids, np.int64(5))
    half = ops.UnsortedSegmentSum(root, data.astype(np.float16), ids, 5)
    hot = ops.OneHot(root, np.array([[0, 3], [-1, 1]]), 3, np.int32(7), np.int32(-2), axis=0)
    ranges = [ops.Range(root, np.int64(-2 ** 62), np.int64(2 ** 62), np.int64(2 ** 61)),
              ops.Range(root, np.int32(3), np.int32(-4), np.int32(-2)),
              ops.Range(root, 0.5, 2.0, 0.5)]
    got = run(root, [summed, half, hot, *ranges], backend)
    np.testing.assert_allclose(got[0], expected, rtol=1e-14)
    # half: the float32 sum of the float16 values, rounded once
    np.testing.assert_array_equal(got[1], _f16_sums(data, ids, 5))
    hot_expected = np.full((3, 2, 2), -2, np.int32)
    hot_expected[0, 0, 0] = hot_expected[1, 1, 1] = 7  # index 3 and -1: no hot position
    np.testing.assert_array_equal(got[2], hot_expected)
    assert got[3].tolist() == [-2 ** 62 + k * 2 ** 61 for k in range(4)]
    assert got[4].tolist() == [3, 1, -1, -3] and got[5].tolist() == [0.5, 1.0, 1.5]


def _f16_sums(data, ids, count):
    sums = np.zeros((count,) + data.shape[ids.ndim:], np.float32)
    for position in np.ndindex(*ids.shape):
        if ids[position] >= 0:
            sums[ids[position]] += data[position].astype(np.float16).astype(np.float32)
    return sums.astype(np.float16)


def test_segment_ids_beyond_num_segments_are_refused():
    root = mg.Scope.NewRootScope()
    out = ops.UnsortedSegmentSum(root.WithOpName("seg"), np.ones((2, 2, 3), F32),
                                 np.array([[0, 1], [1, 7]]), 3)
    with pytest.raises(mg.errors.InvalidArgumentError,
                       match=r"seg.*segment_ids\[1,1\] = 7 is out of range \[0, 3\)"):
        run(root, out)


def test_range_length_is_known_before_allocation():
    """A range too long for this machine is refused by its length; nothing is allocated."""
    root = mg.Scope.NewRootScope()
    limit = ops.Placeholder(root.WithOpName("limit"), mg.int64, shape=[])
    out = ops.Range(root.WithOpName("range"), np.int64(0), limit, np.int64(1))
    assert ops.Range(root, np.int64(0), np.int64(2 ** 62), np.int64(1)).shape == \
        mg.TensorShape([2 ** 62])
    session = mg.ClientSession(root)
    assert session.Run({limit: 4}, out).tolist() == [0, 1, 2, 3]
    with pytest.raises(mg.errors.ResourceExhaustedError, match="Range 'range'"):
        session.Run({limit: 2 ** 40}, out)  # 8 TiB of int64


@pytest.mark.oracle
@pytest.mark.parametrize("backend", BACKENDS)
def test_against_tensorflow(backend):
    """Every op bit for bit against TF's raw ops, Range in every dtype (half types included:
    TF rounds i * delta and the sum, as minigraph does)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    tf = pytest.importorskip("tensorflow")
    raw = tf.raw_ops
    rng = np.random.default_rng(4)
    root = mg.Scope.NewRootScope()
    pairs = []
    for axis, b in SPECS:
        indices = rng.integers(0, P.shape[axis], P.shape[:b] + (3,)).astype(np.int64)
        pairs.append((ops.GatherV2(root, P, indices, axis, batch_dims=b),
                      raw.GatherV2(params=P, indices=indices, axis=axis, batch_dims=b)))
    ids = np.array([[0, -1, 3], [2, 2, 0]], np.int32)
    data = rng.standard_normal((2, 3, 4)).astype(F32)
    pairs.append((ops.UnsortedSegmentSum(root, data, ids, 5),
                  raw.UnsortedSegmentSum(data=data, segment_ids=ids, num_segments=5)))
    for axis in (-1, 0, 1, 2):
        pairs.append((ops.OneHot(root, ids, 4, 2.5, -1.0, axis=axis),
                      raw.OneHot(indices=ids, depth=4, on_value=2.5, off_value=-1.0, axis=axis)))
    for dtype in (np.float16, ml_dtypes.bfloat16, F32, np.float64, np.int32, np.int64):
        triples = ((0, 8, 3), (5, -3, -2), (1, 300, 7)) if np.dtype(dtype).kind == "i" \
            else ((0.1, 7.7, 0.3), (5, -3, -2), (1, 300, 7.1))
        for triple in triples:
            values = [np.array(v, dtype) for v in triple]
            pairs.append((ops.Range(root, *values),
                          raw.Range(start=tf.constant(values[0]), limit=tf.constant(values[1]),
                                    delta=tf.constant(values[2]))))
    for ours, (_, theirs) in zip(run(root, [p[0] for p in pairs], backend), pairs):
        theirs = theirs.numpy()
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
        np.testing.assert_array_equal(ours, theirs)


# ----------------------------------------------------------------------------- GatherNd


def _gather_nd_reference(params, indices):
    """out[i...] = params[indices[i..., 0], ..., indices[i..., M-1]] element by element."""
    lead, depth = indices.shape[:-1], indices.shape[-1]
    out = np.empty(lead + params.shape[depth:], params.dtype)
    for position in np.ndindex(*lead):
        out[position] = params[tuple(int(v) for v in indices[position])]
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("index", [np.int32, np.int64])
def test_gather_nd_and_scatter_nd_values(backend, index):
    """Elements (M = rank), slices (M < rank), batched index grids, empty index lists; and
    ScatterNd summing duplicates into zeros."""
    cases = [np.array([[0, 1, 2, 3], [1, 2, 3, 4]], index),  # elements
             np.array([[[1, 0], [0, 2]], [[1, 1], [0, 0]]], index),  # slices, a 2x2 grid
             np.array([[1], [0], [1]], index), np.zeros((0, 3), index),
             np.zeros((2, 0), index)]
    root = mg.Scope.NewRootScope()
    gathers = [ops.GatherNd(root, P, c) for c in cases]
    indices = np.array([[0, 1], [3, 2], [0, 1], [1, 4]], index)
    updates = RNG.standard_normal((4, 6)).astype(F32)
    scatter = ops.ScatterNd(root, indices, updates, np.array([4, 5, 6], index))
    *values, scattered = run(root, [*gathers, scatter], backend)
    for c, out, value in zip(cases, gathers, values):
        expected = _gather_nd_reference(P, c)
        assert out.shape == mg.TensorShape(expected.shape)
        np.testing.assert_array_equal(value, expected)
    expected = np.zeros((4, 5, 6), F32)
    for row, update in zip(indices, updates):
        expected[tuple(row)] += update
    np.testing.assert_array_equal(scattered, expected)
    # one index row addressing an element: a scalar
    scalar = run(root, ops.GatherNd(root, np.array([5.0, 6.0], F32), np.array([1], index)),
                 backend)
    assert scalar.shape == () and scalar == 6.0


def test_gather_nd_and_scatter_nd_refuse_bad_indices():
    root = mg.Scope.NewRootScope()
    bad = [(lambda: ops.GatherNd(root, P, np.array([[0, 3]], np.int32)),
            r"indices\[0\] = \[0, 3\] does not index into param shape \[2,3,4,5\]"),
           (lambda: ops.GatherNd(root, P, np.array([[0, 0], [-1, 0]], np.int64)),
            r"indices\[1\] = \[-1, 0\] does not index into param shape"),
           (lambda: ops.GatherNd(root, P, np.zeros((1, 5), np.int32)),
            "index innermost dimension length must be <= params rank; saw: 5 vs. 4"),
           (lambda: ops.GatherNd(root, P, np.int32(0)), "indices must be at least a vector"),
           (lambda: ops.ScatterNd(root, np.array([[4]], np.int32), np.ones((1, 2), F32),
                                  np.array([4, 2], np.int32)),
            r"indices\[0\] = \[4\] does not index into shape \[4,2\]"),
           (lambda: ops.ScatterNd(root, np.array([[1]], np.int32), np.ones((1, 3), F32),
                                  np.array([4, 2], np.int32)),
            r"updates must have shape indices.shape\[:-1\] \+ shape\[indices.shape\[-1\]:\]")]
    for build, message in bad:
        with pytest.raises(mg.errors.InvalidArgumentError, match=message):
            build()
    x = ops.Placeholder(root, mg.int32, shape=[None, 2])
    picked = ops.GatherNd(root, P, x)  # checked at run time, with the same words
    with pytest.raises(mg.errors.InvalidArgumentError, match="does not index into param"):
        run(root, picked, feeds={x: np.array([[1, 3]], np.int32)})


@pytest.mark.oracle
def test_gather_nd_scatter_nd_against_tensorflow():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    tf = pytest.importorskip("tensorflow")
    indices = np.array([[[1, 0], [0, 2]], [[1, 1], [0, 0]]], np.int64)
    root = mg.Scope.NewRootScope()
    ours = run(root, [ops.GatherNd(root, P, indices),
                      ops.ScatterNd(root, indices, P[:2, :2].copy(),
                                    tf.constant([3, 3, 4, 5], tf.int64).numpy())])
    theirs = [tf.raw_ops.GatherNd(params=P, indices=indices),
              tf.raw_ops.ScatterNd(indices=indices, updates=P[:2, :2],
                                   shape=tf.constant([3, 3, 4, 5], tf.int64))]
    for value, expected in zip(ours, theirs):
        np.testing.assert_array_equal(value, expected.numpy())
