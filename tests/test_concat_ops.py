"""ConcatV2, Concat, ConcatOffset, Split, SplitV (minigraph/ops/concat_ops.py): values against
numpy's own functions on every backend and dtype, shape inference, errors in TF's words
naming the op and input, TensorFlow's raw ops (the same values, and refusing exactly what TF
refuses on random specs), and the native float32 concatenation bit for bit. Gradients are
checked in test_gradient_checker.py."""

from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import pytest
from conftest import BACKENDS, NATIVE_AVAILABLE

import minigraph as mg
from minigraph import ops

F32 = np.float32
RNG = np.random.default_rng(0)
A = RNG.standard_normal((2, 3, 4)).astype(F32)
B = RNG.standard_normal((2, 1, 4)).astype(F32)
DTYPES = (np.float16, ml_dtypes.bfloat16, np.float32, np.float64, np.int32, np.int64, np.bool_)


def run(root, fetches, backend="reference", feeds=None):
    return mg.ClientSession(root, backend=backend).Run(feeds or {}, fetches)


def _cases(root, index=np.int32):
    """(op output, numpy's value) for each op on A (2, 3, 4) and B (2, 1, 4)."""
    a, b = ops.Const(root, A), ops.Const(root, B)
    split = ops.Split(root, np.int32(-1), a, num_split=2)
    split_v = ops.SplitV(root, a, np.array([1, -1, 0], index), np.int32(1), num_split=3)
    offsets = ops.ConcatOffset(root, np.int32(1), [np.array(A.shape, index),
                                                   np.array(B.shape, index)])
    return [
        (ops.ConcatV2(root, [a, b, a], index(1)), np.concatenate([A, B, A], 1)),
        (ops.ConcatV2(root, [a, a], index(-3)), np.concatenate([A, A], 0)),
        (ops.Concat(root, np.int32(2), [a, a]), np.concatenate([A, A], 2)),
        (split[0], A[..., :2]), (split[1], A[..., 2:]),
        (split_v[0], A[:, :1]), (split_v[1], A[:, 1:]), (split_v[2], A[:, 3:]),
        (offsets[0], np.array([0, 0, 0], index)), (offsets[1], np.array([0, 3, 0], index)),
    ]


@pytest.mark.parametrize("index", [np.int32, np.int64])
@pytest.mark.parametrize("backend", BACKENDS)
def test_values_equal_numpys(backend, index):
    root = mg.Scope.NewRootScope()
    cases = _cases(root, index)
    for (out, expected), value in zip(cases, run(root, [c[0] for c in cases], backend)):
        assert out.shape == mg.TensorShape(expected.shape)  # inferred at construction
        assert value.dtype == expected.dtype
        np.testing.assert_array_equal(value, expected)


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_dtype_and_zero_sizes(backend):
    for dtype in DTYPES:
        x = (RNG.standard_normal((2, 3)) * 4).astype(dtype)
        empty = np.zeros((0, 3), dtype)
        root = mg.Scope.NewRootScope()
        joined = ops.ConcatV2(root, [x, empty, x], 0)
        nothing = ops.ConcatV2(root, [empty, empty], 0)
        pieces = ops.SplitV(root, x, np.array([0, 3, 0]), np.int32(1), num_split=3)
        thirds = ops.Split(root, np.int32(1), np.zeros((0, 6), dtype), num_split=3)
        values = run(root, [joined, nothing, *pieces, *thirds], backend)
        np.testing.assert_array_equal(values[0], np.concatenate([x, x]))
        assert values[0].dtype == x.dtype and values[1].shape == (0, 3)
        assert [v.shape for v in values[2:5]] == [(2, 0), (2, 3), (2, 0)]
        np.testing.assert_array_equal(values[3], x)
        assert [v.shape for v in values[5:]] == [(0, 2)] * 3


def test_unknown_values_give_partial_shapes():
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root, mg.float32, shape=[None, 3])
    y = ops.Placeholder(root, mg.float32, shape=[2, None])
    anything = ops.Placeholder(root, mg.float32)
    axis = ops.Placeholder(root, mg.int32, shape=[])
    assert ops.ConcatV2(root, [x, y], 0).shape == mg.TensorShape([None, 3])
    assert ops.ConcatV2(root, [x, y], 1).shape == mg.TensorShape([2, None])
    assert ops.ConcatV2(root, [x, y, anything], axis).shape == mg.TensorShape([None, None])
    assert ops.ConcatV2(root, [anything, anything], 0).shape == mg.TensorShape(None)
    assert ops.Split(root, axis, x, num_split=3)[2].shape == mg.TensorShape([None, None])
    assert ops.Split(root, 1, x, num_split=3)[0].shape == mg.TensorShape([None, 1])
    sizes = ops.Placeholder(root, mg.int64, shape=[2])
    assert ops.SplitV(root, x, sizes, 1, num_split=2)[1].shape == mg.TensorShape([None, None])
    assert ops.SplitV(root, y, [1, -1], 1, num_split=2)[1].shape == mg.TensorShape([2, None])


@pytest.mark.parametrize("build, match", [
    (lambda r: ops.ConcatV2(r, [A, A], 3),
     r"ConcatV2 .*ConcatOp : Expected concatenating dimensions in the range \[-3, 3\), but got "
     r"3 \(input 'axis'\)"),
    (lambda r: ops.ConcatV2(r, [A, B], 0),
     r"ConcatOp : Dimension 1 in both shapes must be equal: shape\[0\] = \[2,3,4\] vs. "
     r"shape\[1\] = \[2,1,4\]"),
    (lambda r: ops.ConcatV2(r, [A, A[0]], 0),
     r"ConcatOp : Ranks of all input tensors should match: shape\[0\] = \[2,3,4\] vs. "
     r"shape\[1\] = \[3,4\]"),
    (lambda r: ops.ConcatV2(r, [F32(1), F32(2)], 0),
     r"Can't concatenate scalars \(use tf.stack instead\)"),
    (lambda r: ops.ConcatV2(r, [A, A], [0]),
     r"Concat dim tensor should be a scalar, but got shape \[1\] \(input 'axis'\)"),
    (lambda r: ops.ConcatV2(r, [A], 0), r"attr 'N' must be at least minimum 2, got 1"),
    (lambda r: ops.ConcatV2(r, [A, A.astype(np.float64)], 0),
     r"input 'values'\[1\] has dtype float64 that does not match dtype float32"),
    (lambda r: ops.Concat(r, np.int32(-4), [A, A]), r"Concat .*range \[-3, 3\), but got -4"),
    (lambda r: ops.ConcatOffset(r, np.int32(2), [[2, 3], [2, 5]]),
     r"Concat dim is out of range: 2 vs. 2"),
    (lambda r: ops.ConcatOffset(r, np.int32(1), [[2, 3], [3, 5]]),
     r"All dimensions except 1 must match. Input 1 has shape \[3 5\] and doesn't match input "
     r"0 with shape \[2 3\]."),
    (lambda r: ops.ConcatOffset(r, np.int32(1), [[2, 3], [2, 5, 1]]),
     r"input 1 should contain 2 elements, but got 3"),
    (lambda r: ops.Split(r, np.int32(3), A, num_split=2),
     r"-input rank\(-3\) <= split_dim < input rank \(3\), but got 3"),
    (lambda r: ops.Split(r, np.int32(1), A, num_split=2),
     r"Number of ways to split should evenly divide the split dimension, but got split_dim 1 "
     r"\(size = 3\) and num_split 2"),
    (lambda r: ops.Split(r, [0], A, num_split=1), r"split_dim must be a scalar but has rank 1"),
    (lambda r: ops.Split(r, 0, A, num_split=0), r"attr 'num_split' must be at least minimum 1"),
    (lambda r: ops.SplitV(r, A, [-1, -1], 1, num_split=2),
     r"There can only be one -1 in the input."),
    (lambda r: ops.SplitV(r, A, [1, 1], 1, num_split=2),
     r"Determined shape must either match input shape along split_dim exactly if fully "
     r"specified, or be less than the size of the input along split_dim if not fully "
     r"specified.  Got: 2"),
    (lambda r: ops.SplitV(r, A, [-2, 5], 1, num_split=2),
     r"Split size at index 0 must be >= 0. Got: -2"),
    (lambda r: ops.SplitV(r, A, [1, 2, 0], 1, num_split=2),
     r"size of the split_tensor must be 1-D and have the same elements as outputs got 1 -D "
     r"and 3 elements"),
    (lambda r: ops.SplitV(r, A, [-1], 1, num_split=1),
     r"If there is only one output, it must have the same size as the input. Input size: 3 "
     r"output size: -1"),
    (lambda r: ops.Split(r, 0, A, num_split=2 ** 31),
     r"attr 'num_split': Number of outputs is too big"),
])
def test_bad_arguments_are_refused_with_tensorflows_words(build, match):
    with pytest.raises(mg.errors.InvalidArgumentError, match=match):
        build(mg.Scope.NewRootScope())


def test_values_known_only_at_run_time_are_checked_then():
    root = mg.Scope.NewRootScope()
    axis = ops.Placeholder(root.WithOpName("axis"), mg.int32, shape=[])
    x = ops.Placeholder(root.WithOpName("x"), mg.float32)
    joined = ops.ConcatV2(root.WithOpName("join"), [x, A], axis)
    pieces = ops.SplitV(root.WithOpName("cut"), A, ops.Placeholder(root.WithOpName("s"),
                                                                   mg.int64), 2, num_split=2)
    session = mg.ClientSession(root)
    np.testing.assert_array_equal(session.Run({axis: -2, x: B}, joined),
                                  np.concatenate([B, A], -2))
    with pytest.raises(mg.errors.InvalidArgumentError,
                       match=r"join.*Dimension 1 in both shapes must be equal"):
        session.Run({axis: 0, x: B}, joined)
    with pytest.raises(mg.errors.InvalidArgumentError, match=r"join.*but got 5"):
        session.Run({axis: 5, x: A}, joined)
    with pytest.raises(mg.errors.InvalidArgumentError, match=r"cut.*Got: 5"):
        session.Run({"s:0": np.array([5, -1])}, pieces[0])


@pytest.mark.oracle
@pytest.mark.parametrize("backend", BACKENDS)
def test_against_tensorflow(backend):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    tf = pytest.importorskip("tensorflow")
    raw = tf.raw_ops
    i64 = np.int64
    split = raw.Split(axis=-1, value=A, num_split=2)
    split_v = raw.SplitV(value=A, size_splits=np.array([1, -1, 0], i64), axis=1, num_split=3)
    offsets = raw.ConcatOffset(concat_dim=1, shape=[tf.constant(A.shape, tf.int64),
                                                   tf.constant(B.shape, tf.int64)])
    theirs = [raw.ConcatV2(values=[A, B, A], axis=i64(1)), raw.ConcatV2(values=[A, A], axis=-3),
              raw.Concat(concat_dim=2, values=[A, A]), *split, *split_v, *offsets]
    root = mg.Scope.NewRootScope()
    ours = run(root, [c[0] for c in _cases(root, i64)], backend)
    for a, b in zip(ours, theirs):
        assert a.dtype == b.numpy().dtype
        np.testing.assert_array_equal(a, b.numpy())


def _random_concat(rng):
    rank = int(rng.integers(1, 4))
    shape = rng.integers(0, 4, rank)
    axis = int(rng.integers(-rank - 1, rank + 1))
    shapes = []
    for _ in range(int(rng.integers(2, 4))):
        dims = shape.copy()
        if -rank <= axis < rank:
            dims[axis] = rng.integers(0, 4)
        if rng.random() < 0.15:
            dims[int(rng.integers(0, rank))] += 1
        shapes.append(dims)
    return [rng.standard_normal(s).astype(F32) for s in shapes], axis


def _random_case(rng, trial: int, tf):
    """(TF's call, minigraph's call) of a random ConcatV2 (odd trials) or SplitV."""
    values, axis = _random_concat(rng)
    if trial % 2:
        return (lambda: tf.raw_ops.ConcatV2(values=values, axis=axis),
                lambda root: ops.ConcatV2(root, values, axis))
    x, sizes = values[0], [int(v) for v in rng.integers(-1, 3, int(rng.integers(1, 4)))]
    return (lambda: tf.raw_ops.SplitV(value=x, size_splits=sizes, axis=axis,
                                      num_split=len(sizes)),
            lambda root: ops.SplitV(root, x, sizes, axis, num_split=len(sizes)))


@pytest.mark.oracle
def test_concat_and_split_refuse_what_tensorflow_refuses():
    """300 random concatenations and splits: TF and minigraph refuse the same ones and give
    the same values for the rest."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    tf = pytest.importorskip("tensorflow")
    rng = np.random.default_rng(5)
    refused = 0
    for trial in range(300):
        tf_op, mg_op = _random_case(rng, trial, tf)
        try:
            theirs = tf_op()
            theirs = [t.numpy() for t in (theirs if isinstance(theirs, list) else [theirs])]
        except (tf.errors.InvalidArgumentError, ValueError):
            theirs = None
        root = mg.Scope.NewRootScope()
        try:
            node = mg_op(root)
        except mg.errors.InvalidArgumentError:
            assert theirs is None, trial
            refused += 1
            continue
        assert theirs is not None, trial
        ours = run(root, list(node) if hasattr(node, "outputs") else [node])
        for a, b in zip(ours, theirs):
            np.testing.assert_array_equal(a, b)
    assert 30 < refused < 270  # both kinds of case were drawn


@pytest.mark.skipif(not NATIVE_AVAILABLE, reason="the native kernels are not built")
def test_native_concat_copies_bit_for_bit():
    """ConcatV2 in C (mg_concat, kernels_c/layout.c) against np.concatenate: ranks 1-5, every
    axis, empty inputs, strided and misaligned inputs, few rows cut into spans, one and two
    threads."""
    from minigraph.backends import native

    rng = np.random.default_rng(3)
    try:
        for threads in (1, 2):
            native.set_num_threads(threads)
            for trial in range(120):
                rank = int(rng.integers(1, 6))
                shape = [int(v) for v in rng.integers(0, 5, rank)]
                if trial % 10 == 0:  # one long row (axis before the last): the spans path
                    shape = [1] * (rank - 1) + [20000]
                axis = int(rng.integers(0, rank))
                values = []
                for _ in range(int(rng.integers(2, 5))):
                    dims = list(shape)
                    dims[axis] = int(rng.integers(0, 4))
                    x = rng.standard_normal(dims).astype(F32)
                    if rng.integers(0, 3) == 0:
                        x = np.asfortranarray(x)
                    elif rng.integers(0, 3) == 0:
                        raw = np.empty(x.size + 1, F32)[1:]
                        raw[:] = x.reshape(-1)
                        x = raw.reshape(x.shape)
                    values.append(x)
                root = mg.Scope.NewRootScope()
                y = ops.ConcatV2(root, values, axis - rank)
                metadata = mg.RunMetadata()
                ours = mg.ClientSession(root, backend="native").Run(y, run_metadata=metadata)
                assert metadata.kernel_of(y.op.name) == "native:concat_kernels.concat_native"
                np.testing.assert_array_equal(ours.view(np.uint32),
                                              np.concatenate(values, axis).view(np.uint32))
    finally:
        native.set_num_threads(None)


@pytest.mark.skipif(not NATIVE_AVAILABLE, reason="the native kernels are not built")
def test_native_concat_wrapper_checks_its_buffers():
    from minigraph.backends.concat_kernels import c_concat

    with pytest.raises(ValueError, match="do not join along axis 1"):
        c_concat([np.zeros((2, 3), F32), np.zeros((3, 3), F32)], 1)
