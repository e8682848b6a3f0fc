"""TopKV2, Where, Bucketize (ops/selection_ops.py), MatrixBandPart, LinSpace, Rank and
BroadcastArgs: values against numpy formulas written here and against ``tf.raw_ops``,
shapes at construction, TF's errors, the list(float) attr through GraphDef export and
import, and frozen Keras graphs using them (``Discretization``, ``tf.math.top_k``,
``tf.sort``, ``tf.linalg.band_part``, ``tf.linspace``). Gradients are checked in
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
RNG = np.random.default_rng(7)


def run(root, fetches, backend="reference", feeds=None):
    return mg.ClientSession(root, backend=backend).Run(feeds or {}, fetches)


def _tf():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return pytest.importorskip("tensorflow")


def _top_k_reference(row, k):
    """Largest first, equal values by index, NaN last: selection by repeated maxima."""
    left = list(range(len(row)))
    picked = []
    for _ in range(k):
        numbers = [i for i in left if not np.isnan(row[i])]
        best = max(numbers, key=lambda i: (row[i], -i)) if numbers else left[0]
        picked.append(best)
        left.remove(best)
    return picked


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, F32, np.float64, np.int32,
                                   np.int64], ids=lambda d: np.dtype(d).name)
def test_top_k_rows_largest_first_ties_by_index(backend, dtype):
    x = RNG.integers(-4, 5, (3, 2, 9)).astype(dtype)  # many ties
    if np.dtype(dtype).kind in "fV":
        x[0, 0, [1, 4]] = np.nan
        x[1, 1, 2], x[1, 1, 3] = -0.0, 0.0
        x[2, 0, 0] = -np.inf
    if np.dtype(dtype) == np.int64:
        x[0, 1, :2] = [np.iinfo(np.int64).min, np.iinfo(np.int64).max]
    root = mg.Scope.NewRootScope()
    fetched = []
    for k in (0, 1, 4, 9):
        top = ops.TopKV2(root, x, np.int32(k), index_type=mg.int64)
        assert top.values.shape == mg.TensorShape([3, 2, k])
        fetched += [top.values, top.indices]
    values = run(root, fetched, backend)
    for k, (got, indices) in zip((0, 1, 4, 9), zip(values[::2], values[1::2])):
        assert indices.dtype == np.int64 and got.dtype == np.dtype(dtype)
        for row in np.ndindex(3, 2):
            expected = _top_k_reference(x[row].astype(np.float64), k)
            np.testing.assert_array_equal(indices[row], expected)
            wide = (lambda a: a.astype(np.float64)) if np.dtype(dtype).kind in "fV" else \
                (lambda a: a)  # NaN == NaN for assert_array_equal (bfloat16's are not)
            np.testing.assert_array_equal(wide(got[row]), wide(x[row][expected]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_where_bucketize_band_part_linspace_rank_broadcast_args(backend):
    x = np.array([[0.0, -0.0, np.nan], [2.0, 0.0, -1.0]], F32)
    boundaries = [-1.0, 0.0, 0.5, 0.5, 3.0]
    values = np.array([[-2.0, -1.0, 0.0, 0.25, 0.5, 2.9, 3.0, 9.0, np.nan]], F32)
    matrices = RNG.standard_normal((2, 4, 5)).astype(F32)
    root = mg.Scope.NewRootScope()
    fetches = [ops.Where(root, x), ops.Where(root, x > 0),
               ops.Bucketize(root, values, boundaries=boundaries),
               ops.Bucketize(root, np.array([-3, 0, 1, 7], np.int64), boundaries=boundaries),
               *[ops.MatrixBandPart(root, matrices, np.int64(lo), np.int64(up))
                 for lo, up in ((0, 0), (1, -1), (-1, 2), (4, 5), (-1, -1))],
               ops.LinSpace(root, F32(-1.5), F32(2.0), np.int32(8)),
               ops.LinSpace(root, np.float64(3), np.float64(3), np.int64(1)),
               ops.Rank(root, matrices),
               ops.BroadcastArgs(root, np.array([2, 1, 5], np.int32), np.array([4, 1], np.int32))]
    (where_nonzero, where_true, buckets, int_buckets, *bands, space, single, rank,
     broadcast) = run(root, fetches, backend)
    np.testing.assert_array_equal(where_nonzero, [[0, 2], [1, 0], [1, 2]])
    np.testing.assert_array_equal(where_true, [[1, 0]])
    assert where_nonzero.dtype == np.int64
    # the count of boundaries <= each value; NaN past them all
    expected = [sum(b <= v for b in boundaries) if not np.isnan(v) else len(boundaries)
                for v in values[0]]
    np.testing.assert_array_equal(buckets, [expected])
    np.testing.assert_array_equal(int_buckets, [0, 2, 4, 5])
    assert buckets.dtype == np.int32
    m, n = np.indices((4, 5))
    for (lo, up), band in zip(((0, 0), (1, -1), (-1, 2), (4, 5), (-1, -1)), bands):
        keep = ((lo < 0) | (m - n <= lo)) & ((up < 0) | (n - m <= up))
        np.testing.assert_array_equal(band, np.where(keep, matrices, 0))
    step = F32((F32(2.0) - F32(-1.5)) / F32(7))
    np.testing.assert_array_equal(space[:-1], F32(-1.5) + step * np.arange(7).astype(F32))
    assert space[-1] == 2.0 and space.dtype == F32
    np.testing.assert_array_equal(single, [3.0])
    assert rank == 3 and rank.dtype == np.int32
    np.testing.assert_array_equal(broadcast, [2, 4, 5])


def test_static_shapes_and_tensorflows_errors():
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root, mg.float32, shape=[None, 6])
    top = ops.TopKV2(root, x, np.int32(2))
    assert top.values.shape == mg.TensorShape([None, 2])
    assert ops.Where(root, x).shape == mg.TensorShape([None, 2])
    assert ops.LinSpace(root, F32(0), F32(1), np.int32(5)).shape == mg.TensorShape([5])
    cases = [
        (lambda: ops.TopKV2(root, x, np.int32(7)),
         "input must have at least k columns. Had 6, needed 7"),
        (lambda: ops.TopKV2(root, x, np.int32(-1)), "Need k >= 0, got -1"),
        (lambda: ops.TopKV2(root, F32(1), np.int32(1)), "input must be >= 1-D"),
        (lambda: ops.Bucketize(root, x, boundaries=[1.0, 0.0]), "Expected sorted boundaries"),
        (lambda: ops.Bucketize(root, x, boundaries=[0.0, float("nan")]),
         "Expected sorted boundaries"),
        (lambda: ops.Bucketize(root, x, boundaries="0,1"), "must be a list of floats"),
        (lambda: ops.MatrixBandPart(root, np.ones((3, 6), F32), np.int64(4), np.int64(0)),
         r"num_lower must be negative or less or equal to number of rows \(M\) \(3\) got: 4"),
        (lambda: ops.MatrixBandPart(root, x, np.int64(0), np.int64(7)),
         r"num_upper must be negative or less or equal to number of columns \(N\) \(6\)"),
        (lambda: ops.MatrixBandPart(root, np.ones(3, F32), np.int64(0), np.int64(0)),
         "input must be at least 2-dim"),
        (lambda: ops.LinSpace(root, F32(0), F32(1), np.int32(0)), r"Requires num > 0: 0"),
        (lambda: ops.BroadcastArgs(root, np.array([2, 3], np.int32), np.array([4], np.int32)),
         r"Incompatible shapes: \[2,3\] vs. \[4\]"),
    ]
    for build, message in cases:
        with pytest.raises(mg.errors.InvalidArgumentError, match=message):
            build()


def test_run_time_values_are_checked_like_constants():
    """k fed at run time is checked before the kernel, with the same words."""
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root, mg.float32, shape=[2, 3])
    k = ops.Placeholder(root, mg.int32, shape=[])
    top = ops.TopKV2(root, x, k)
    with pytest.raises(mg.errors.InvalidArgumentError, match="Had 3, needed 4"):
        run(root, top.values, feeds={x: np.ones((2, 3), F32), k: np.int32(4)})


def test_bucketize_boundaries_survive_export_and_import():
    """list(float) attrs go through GraphDef export and import (float32, as TF stores them)."""
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root, mg.float32, shape=[4])
    ops.Bucketize(root.WithOpName("buckets"), x, boundaries=[-0.1, 0.3, 2.0])
    again = mg.import_graph_def(mg.export_graph_def(root))
    op = again.graph().get_operation("buckets")
    assert op.attrs["boundaries"] == [float(F32(-0.1)), float(F32(0.3)), 2.0]
    feed = np.array([-1.0, 0.3, 1.0, 5.0], F32)
    value = mg.ClientSession(again).Run({"Placeholder:0": feed}, "buckets:0")
    np.testing.assert_array_equal(value, [0, 2, 2, 3])


@pytest.mark.oracle
@pytest.mark.parametrize("backend", BACKENDS)
def test_against_tensorflow(backend):
    tf = _tf()
    raw = tf.raw_ops
    x = RNG.integers(-3, 4, (4, 7)).astype(F32)  # ties
    matrices = RNG.standard_normal((3, 5, 4)).astype(F32)
    values = (RNG.standard_normal(20) * 3).astype(F32)
    root = mg.Scope.NewRootScope()
    top = ops.TopKV2(root, x, np.int32(5))
    cases = [
        (top.values, raw.TopKV2(input=x, k=5).values),
        (top.indices, raw.TopKV2(input=x, k=5).indices),
        (ops.Where(root, x), raw.Where(condition=x)),
        (ops.Bucketize(root, values, boundaries=[-2.0, 0.0, 0.5, 4.0]),
         raw.Bucketize(input=values, boundaries=[-2.0, 0.0, 0.5, 4.0])),
        (ops.MatrixBandPart(root, matrices, np.int64(1), np.int64(2)),
         raw.MatrixBandPart(input=matrices, num_lower=np.int64(1), num_upper=np.int64(2))),
        (ops.LinSpace(root, F32(0.1), F32(0.7), np.int32(3)),
         raw.LinSpace(start=F32(0.1), stop=F32(0.7), num=np.int32(3))),
        (ops.LinSpace(root, F32(-3), F32(11), np.int32(13)),
         raw.LinSpace(start=F32(-3), stop=F32(11), num=np.int32(13))),
        (ops.Rank(root, matrices), raw.Rank(input=matrices)),
        (ops.BroadcastArgs(root, np.array([3, 1], np.int64), np.array([2, 1, 4], np.int64)),
         raw.BroadcastArgs(s0=tf.constant([3, 1], tf.int64), s1=tf.constant([2, 1, 4], tf.int64))),
    ]
    ours = run(root, [c[0] for c in cases], backend)
    for value, (_, theirs) in zip(ours, cases):
        theirs = theirs.numpy()
        assert value.dtype == theirs.dtype
        np.testing.assert_array_equal(value, theirs)


@pytest.mark.oracle
def test_keras_graphs_using_them_import_and_match():
    """Discretization, top_k / sort / argsort, a causal band_part mask and tf.linspace,
    frozen by TF 2.21 and run on every backend."""
    tf = _tf()
    from minigraph.testing import tf_graphs

    keras = tf_graphs.keras()
    layers = keras.layers
    model = keras.Sequential([
        keras.Input((6,)),
        layers.Lambda(lambda t: tf.concat([
            tf.math.top_k(t, 3).values,
            tf.sort(t, direction="DESCENDING"),
            tf.cast(tf.argsort(t), tf.float32),
            t * tf.linspace(0.0, 1.0, 6),
            tf.reduce_sum(tf.linalg.band_part(t[:, :, None] * t[:, None, :], -1, 0), axis=1),
            tf.cast(tf.reduce_all(tf.math.is_finite(t), axis=1, keepdims=True), tf.float32),
        ], axis=1)),
    ])
    graph = tf_graphs.frozen_keras("selection", model, (6,), batch=3)
    discretize = keras.Sequential([keras.Input((5,)),
                                   layers.Discretization(bin_boundaries=[-1.0, 0.0, 0.7])])
    bins = tf_graphs.frozen_keras("discretization", discretize, (5,), batch=3)
    for backend in BACKENDS:
        for frozen in (graph, bins):
            session = mg.ClientSession(mg.import_graph_def(frozen.graph_def), backend=backend)
            ours = session.Run(frozen.feeds, frozen.fetches)[0]
            np.testing.assert_allclose(ours, frozen.expected[0], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_unique_keeps_first_appearances(backend):
    """Distinct values by first appearance; -0 and +0 one value (the first kept); each NaN a
    value of its own; counts with UniqueWithCounts; an empty vector gives empties."""
    x = np.array([3.0, 1.0, np.nan, 3.0, -0.0, 0.0, np.nan, 1.0], F32)
    ints = RNG.integers(0, 5, 30).astype(np.int64)
    root = mg.Scope.NewRootScope()
    u = ops.Unique(root, x)
    w = ops.UniqueWithCounts(root, ints, out_idx=mg.int64)
    e = ops.Unique(root, np.zeros(0, np.int32))
    y, idx, wy, widx, wcount, ey, eidx = run(
        root, [u.y, u.idx, w.y, w.idx, w.count, e.y, e.idx], backend)
    np.testing.assert_array_equal(y, [3.0, 1.0, np.nan, -0.0, np.nan])
    assert np.signbit(y[3]) and idx.dtype == np.int32
    np.testing.assert_array_equal(idx, [0, 1, 2, 0, 3, 3, 4, 1])
    order = list(dict.fromkeys(ints.tolist()))  # first appearances
    np.testing.assert_array_equal(wy, order)
    np.testing.assert_array_equal(widx, [order.index(v) for v in ints])
    np.testing.assert_array_equal(wcount, [int((ints == v).sum()) for v in order])
    assert widx.dtype == wcount.dtype == np.int64
    assert ey.shape == (0,) and eidx.shape == (0,)
    with pytest.raises(mg.errors.InvalidArgumentError, match="unique expects a 1D vector"):
        ops.Unique(root, np.zeros((2, 2), F32))


@pytest.mark.oracle
def test_unique_against_tensorflow():
    tf = _tf()
    x = RNG.integers(-3, 4, 40).astype(F32)
    root = mg.Scope.NewRootScope()
    u = ops.UniqueWithCounts(root, x)
    ours = run(root, [u.y, u.idx, u.count])
    theirs = tf.raw_ops.UniqueWithCounts(x=x)
    for value, expected in zip(ours, (theirs.y, theirs.idx, theirs.count)):
        np.testing.assert_array_equal(value, expected.numpy())
