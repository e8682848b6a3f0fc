"""Pad, Slice, Pack, ExpandDims, Squeeze, Tile (minigraph/ops/layout_ops.py): values against
numpy's own functions, shape inference, errors in TF's words naming the op and input, and
TensorFlow's raw ops bit for bit. Their gradients are checked in test_gradient_checker.py."""

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
X = RNG.standard_normal((2, 3, 4)).astype(F32)


def run(root, fetches, backend="reference"):
    return mg.ClientSession(root, backend=backend).Run(fetches)


def _cases(root, x, index=np.int32):
    """(op result, numpy's value) for each op on x of shape (2, 3, 4)."""
    i = index
    return [
        (ops.Pad(root, x, np.array([[1, 0], [0, 2], [3, 1]], i)),
         np.pad(X, [[1, 0], [0, 2], [3, 1]])),
        (ops.Slice(root, x, np.array([1, 0, 2], i), np.array([-1, 2, 2], i)), X[1:, 0:2, 2:4]),
        (ops.Pack(root, [x, ops.Neg(root, x)], axis=-1), np.stack([X, -X], axis=-1)),
        (ops.ExpandDims(root, x, np.array(-2, i)), np.expand_dims(X, -2)),
        (ops.Squeeze(root, ops.ExpandDims(root, x, 0)), X),
        (ops.Tile(root, x, np.array([2, 1, 3], i)), np.tile(X, [2, 1, 3])),
    ]


@pytest.mark.parametrize("index", [np.int32, np.int64])
@pytest.mark.parametrize("backend", BACKENDS)
def test_values_equal_numpys(backend, index):
    root = mg.Scope.NewRootScope()
    cases = _cases(root, ops.Const(root, X), index)
    for (out, expected), value in zip(cases, run(root, [c[0] for c in cases], backend)):
        assert out.shape == mg.TensorShape(expected.shape)  # inferred at construction
        np.testing.assert_array_equal(value, expected)


def test_every_dtype_and_zero_sizes():
    for dtype in (np.float16, ml_dtypes.bfloat16, np.float64, np.int32, np.int64, np.bool_):
        x = (RNG.standard_normal((2, 0, 3)) > 0).astype(dtype)
        root = mg.Scope.NewRootScope()
        padded = ops.Pad(root, x, np.array([[0, 1], [2, 0], [0, 0]], np.int32))
        tiled = ops.Tile(root, x, np.array([0, 5, 1], np.int32))
        a, b = run(root, [padded, tiled])
        assert a.dtype == x.dtype and a.shape == (3, 2, 3) and not a.any()
        assert b.shape == (0, 0, 3)
    root = mg.Scope.NewRootScope()
    scalar = ops.Pad(root, np.float32(2.5), np.zeros((0, 2), np.int32))
    assert run(root, scalar) == np.float32(2.5)


def test_unknown_values_give_partial_shapes():
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root, mg.float32, shape=[None, 3])
    paddings = ops.Placeholder(root, mg.int32, shape=[2, 2])
    assert ops.Pad(root, x, paddings).shape == mg.TensorShape([None, None])
    assert ops.Squeeze(root, x).shape == mg.TensorShape(None)
    assert ops.Squeeze(root, x, squeeze_dims=[0]).shape == mg.TensorShape([3])
    assert ops.Pack(root, [x, x]).shape == mg.TensorShape([2, None, 3])
    assert ops.Tile(root, x, np.array([2, 2], np.int32)).shape == mg.TensorShape([None, 6])


@pytest.mark.parametrize("build, match", [
    (lambda r: ops.Pad(r, X, np.array([[1, 0], [0, 1]], np.int32)),
     r"Pad .*The first dimension of paddings must be the rank of inputs\[2,2\] \[2,3,4\]"),
    (lambda r: ops.Pad(r, X, np.array([[1, 0], [-1, 0], [0, 0]], np.int32)),
     r"Pad .*Paddings must be non-negative: -1 0 \(input 'paddings'\)"),
    (lambda r: ops.Slice(r, X, np.array([0, 0, 3], np.int32), np.array([1, 1, 2], np.int32)),
     r"Slice .*Expected size\[2\] in \[0, 1\], but got 2 \(input 'size'\)"),
    (lambda r: ops.Slice(r, X, np.array([0, 5, 0], np.int32), np.array([1, -1, 1], np.int32)),
     r"Slice .*Expected begin\[1\] in \[0, 3\], but got 5"),
    (lambda r: ops.Slice(r, X, np.array([0, 0], np.int32), np.array([1, 1, 1], np.int32)),
     r"Slice .*Expected begin and size arguments to be 1-D tensors of size 3"),
    (lambda r: ops.Pack(r, [X, X[:1]]),
     r"Pack .*Shapes of all inputs must match: values\[0\].shape = \[2,3,4\] != "
     r"values\[1\].shape = \[1,3,4\]"),
    (lambda r: ops.Pack(r, [X, X], axis=4), r"Pack .*axis = 4 not in \[-4, 4\)"),
    (lambda r: ops.ExpandDims(r, X, 4),
     r"ExpandDims .*Tried to expand dim index 4 for tensor with 3 dimensions"),
    (lambda r: ops.Squeeze(r, X, squeeze_dims=[1]),
     r"Squeeze .*Can not squeeze dim\[1\], expected a dimension of 1, got 3"),
    (lambda r: ops.Squeeze(r, X, squeeze_dims=[3]),
     r"Squeeze .*Tried to squeeze dim index 3 for tensor with 3 dimensions"),
    (lambda r: ops.Tile(r, X, np.array([1, 2], np.int32)),
     r"Tile .*Expected multiples argument to be a vector of length 3 but got length 2"),
    (lambda r: ops.Tile(r, X, np.array([1, -2, 1], np.int32)),
     r"Tile .*Expected multiples\[1\] >= 0, but got -2"),
])
def test_bad_indices_are_refused_with_tensorflows_words(build, match):
    with pytest.raises(mg.errors.InvalidArgumentError, match=match):
        build(mg.Scope.NewRootScope())


def test_values_known_only_at_run_time_are_checked_then():
    root = mg.Scope.NewRootScope()
    paddings = ops.Placeholder(root.WithOpName("p"), mg.int64, shape=[3, 2])
    padded = ops.Pad(root.WithOpName("pad"), X, paddings)
    session = mg.ClientSession(root)
    with pytest.raises(mg.errors.InvalidArgumentError, match="pad.*Paddings must be non-neg"):
        session.Run({paddings: np.array([[0, 0], [0, -3], [0, 0]], np.int64)}, padded)
    with pytest.raises(mg.errors.ResourceExhaustedError, match="Pad 'pad'"):
        session.Run({paddings: np.array([[0, 0], [0, 2 ** 40], [0, 0]], np.int64)}, padded)
    multiples = ops.Placeholder(root.WithOpName("m"), mg.int32, shape=[3])
    tiled = ops.Tile(root.WithOpName("tile"), X, multiples)
    with pytest.raises(mg.errors.ResourceExhaustedError, match="Tile 'tile'"):
        session.Run({multiples: np.array([2 ** 20, 2 ** 20, 1], np.int32)}, tiled)
    # more than 2**63 - 1 elements: TF's shape error, before any memory question
    with pytest.raises(mg.errors.InvalidArgumentError, match="Tile 'tile'.*too large"):
        session.Run({multiples: np.array([2 ** 30, 2 ** 30, 1], np.int32)}, tiled)


@pytest.mark.oracle
@pytest.mark.parametrize("backend", BACKENDS)
def test_against_tensorflow(backend):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    tf = pytest.importorskip("tensorflow")
    raw = tf.raw_ops
    i64 = np.int64
    theirs = [
        raw.Pad(input=X, paddings=np.array([[1, 0], [0, 2], [3, 1]], i64)),
        raw.Slice(input=X, begin=np.array([1, 0, 2], i64), size=np.array([-1, 2, 2], i64)),
        raw.Pack(values=[X, -X], axis=-1),
        raw.ExpandDims(input=X, axis=np.array(-2, i64)),
        raw.Squeeze(input=raw.ExpandDims(input=X, axis=0)),
        raw.Tile(input=X, multiples=np.array([2, 1, 3], i64)),
    ]
    root = mg.Scope.NewRootScope()
    ours = run(root, [c[0] for c in _cases(root, ops.Const(root, X), i64)], backend)
    for a, b in zip(ours, theirs):
        assert a.dtype == b.numpy().dtype
        np.testing.assert_array_equal(a, b.numpy())


# ----------------------------------------------------------------------------- StridedSlice


def _random_spec(rng):
    count = int(rng.integers(1, 4))
    spec = {name: rng.integers(-7, 7, count).astype(np.int32) for name in ("begin", "end")}
    spec["strides"] = rng.choice([-3, -2, -1, 1, 2, 3], count).astype(np.int32)
    masks = {m: int(rng.integers(0, 2 ** count))
             for m in ("begin_mask", "end_mask", "new_axis_mask", "shrink_axis_mask")}
    masks["ellipsis_mask"] = int(rng.choice([0, 0, 1 << int(rng.integers(0, count))]))
    return spec, masks


def test_strided_slice_is_pythons_basic_indexing():
    x = RNG.standard_normal((4, 5, 6)).astype(F32)
    i = np.int32
    cases = [  # (begin, end, strides, masks, the numpy index)
        ([1, -1], [4, 0], [1, -2], {}, np.s_[1:4, -1:0:-2]),
        ([0, 2], [0, 0], [1, 1], {"begin_mask": 1, "end_mask": 3}, np.s_[:, 2:]),
        ([0, 3], [0, 0], [1, -1], {"ellipsis_mask": 1, "end_mask": 2}, np.s_[..., 3::-1]),
        ([2, 0, 1], [3, 0, 2], [1, 1, 1], {"new_axis_mask": 2, "shrink_axis_mask": 5},
         np.s_[2, None, 1]),
        ([-1], [0], [1], {"shrink_axis_mask": 1}, np.s_[-1]),
        ([0, 0], [0, 0], [1, 1], {"new_axis_mask": 1, "ellipsis_mask": 2}, np.s_[None, ...]),
    ]
    root = mg.Scope.NewRootScope()
    outs = [ops.StridedSlice(root, x, np.array(b, i), np.array(e, i), np.array(s, i), **m)
            for b, e, s, m, _ in cases]
    for out, value, (*_, index) in zip(outs, run(root, outs), cases):
        assert out.shape == mg.TensorShape(x[index].shape)
        np.testing.assert_array_equal(value, x[index])


@pytest.mark.parametrize("attrs, match", [
    ({"ellipsis_mask": 3}, "Multiple ellipses in slice spec not allowed"),
    ({"shrink_axis_mask": 1, "begin": [7, 0]}, r"slice index 7 of dimension 0 out of bounds"),
    ({"strides": [1, 0]}, r"strides\[1\] must be non-zero"),
    ({"end": [1, 1, 1]}, "Expected begin, end, and strides to be 1D equal size tensors"),
])
def test_bad_slice_specs_are_refused_with_tensorflows_words(attrs, match):
    spec = {"begin": [0, 0], "end": [1, 1], "strides": [1, 1]}
    spec.update({k: attrs.pop(k) for k in list(attrs) if k in spec})
    with pytest.raises(mg.errors.InvalidArgumentError, match=f"StridedSlice .*{match}"):
        ops.StridedSlice(mg.Scope.NewRootScope(), X, *(np.array(spec[k], np.int32)
                                                        for k in ("begin", "end", "strides")),
                         **attrs)


@pytest.mark.oracle
@pytest.mark.parametrize("backend", BACKENDS)
def test_strided_slice_and_its_grad_agree_with_tensorflow_on_random_specs(backend):
    """500 random specs, every mask: TF and minigraph refuse the same ones and give the same
    values (and the same StridedSliceGrad scatter) for the rest."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    tf = pytest.importorskip("tensorflow")
    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 5, 6)).astype(F32)
    refused = 0
    for _ in range(500):
        spec, masks = _random_spec(rng)
        try:
            theirs = tf.raw_ops.StridedSlice(input=x, **spec, **masks).numpy()
        except (tf.errors.InvalidArgumentError, ValueError):
            theirs = None
        root = mg.Scope.NewRootScope()
        try:
            y = ops.StridedSlice(root, x, spec["begin"], spec["end"], spec["strides"], **masks)
        except mg.errors.InvalidArgumentError:
            assert theirs is None, (spec, masks)
            refused += 1
            continue
        assert theirs is not None, (spec, masks)
        dy = rng.standard_normal(theirs.shape).astype(F32)
        grad = ops.StridedSliceGrad(root, np.array(x.shape, np.int32), spec["begin"],
                                    spec["end"], spec["strides"], dy, **masks)
        ours, our_grad = mg.ClientSession(root, backend=backend).Run([y, grad])
        np.testing.assert_array_equal(ours, theirs)
        their_grad = tf.raw_ops.StridedSliceGrad(shape=np.array(x.shape, np.int32), dy=dy,
                                                 **spec, **masks).numpy()
        np.testing.assert_array_equal(our_grad, their_grad)
    assert 50 < refused < 450  # both kinds of case were drawn



# ----------------------------------------------------------------------------- Unpack, ShapeN


@pytest.mark.parametrize("backend", BACKENDS)
def test_unpack_and_shape_n(backend):
    root = mg.Scope.NewRootScope()
    parts = ops.Unpack(root, X, 3, axis=-2)
    shapes = ops.ShapeN(root, [X, parts[0]], out_type=mg.int64)
    assert [p.shape for p in parts] == [mg.TensorShape([2, 4])] * 3
    assert len(parts.output) == 3 and shapes[1].shape == mg.TensorShape([2])
    values = run(root, [*parts, *shapes], backend)
    for got, expected in zip(values, [X[:, i, :] for i in range(3)]):
        np.testing.assert_array_equal(got, expected)
    assert values[3].dtype == np.int64 and values[3].tolist() == [2, 3, 4]
    assert values[4].tolist() == [2, 4]
    with pytest.raises(mg.errors.InvalidArgumentError,
                       match=r"Unpack .*Dimension must be 2 but is 3"):
        ops.Unpack(root, X, 2, axis=1)
    with pytest.raises(mg.errors.InvalidArgumentError, match=r"Unpack .*axis = 3 not in"):
        ops.Unpack(root, X, 2, axis=3)


@pytest.mark.oracle
def test_a_tensorflow_graph_with_the_layout_ops_imports():
    """TF's own graph (tf.function) of every layout op, imported and run here."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    tf = pytest.importorskip("tensorflow")
    from minigraph.testing import tf_graphs

    def body(x):
        raw = tf.raw_ops
        a, b, c = raw.Unpack(value=x, num=3, axis=1)
        shapes = raw.ShapeN(input=[x, a], out_type=tf.int64)
        dynamic = raw.StridedSlice(input=raw.Shape(input=x), begin=[0], end=[1], strides=[1],
                                   shrink_axis_mask=1)  # tf.shape(x)[0]
        flat = raw.Reshape(tensor=x, shape=raw.Pack(values=[dynamic, -1]))
        return (raw.Pad(input=a, paddings=[[1, 1], [0, 2]]), raw.Tile(input=b, multiples=[2, 1]),
                raw.Squeeze(input=raw.ExpandDims(input=c, axis=0)), shapes[0], shapes[1],
                x[:, ::-1, None, 1:3], flat)

    graph = tf_graphs._concrete("layout", body, [tf.TensorSpec([None, 3, 4], tf.float32)], [X])
    root = mg.import_graph_def(graph.graph_def)
    for backend in BACKENDS:
        ours = mg.ClientSession(root, backend=backend).Run(graph.feeds, graph.fetches)
        for a, b in zip(ours, graph.expected):
            assert a.dtype == b.dtype
            np.testing.assert_array_equal(a, b)



@pytest.mark.skipif(not NATIVE_AVAILABLE, reason="the native kernels are not built")
def test_native_pad_copies_bit_for_bit():
    """Pad in C (kernels_c/layout.c) against np.pad: ranks 1-6, empty dimensions, strided,
    Fortran-ordered and misaligned inputs, one and two threads."""
    from minigraph.backends import native

    rng = np.random.default_rng(3)
    try:
        for threads in (1, 2):
            native.set_num_threads(threads)
            for _ in range(150):
                rank = int(rng.integers(1, 7))
                shape = tuple(int(v) for v in rng.integers(0, 6, rank))
                pads = rng.integers(0, 4, (rank, 2))
                x = rng.standard_normal(shape).astype(F32)
                x = [x, np.asfortranarray(x), x[..., ::-1]][int(rng.integers(0, 3))]
                if rng.integers(0, 4) == 0:  # an input 4 bytes off its natural alignment
                    raw = np.empty(x.size + 1, F32)[1:]
                    raw[:] = x.reshape(-1)
                    x = raw.reshape(x.shape)
                root = mg.Scope.NewRootScope()
                y = ops.Pad(root, x, pads.astype(np.int64))
                metadata = mg.RunMetadata()
                ours = mg.ClientSession(root, backend="native").Run(y, run_metadata=metadata)
                assert metadata.kernel_of(y.op.name) == "native:layout_kernels.pad_native"
                np.testing.assert_array_equal(ours.view(np.uint32),
                                              np.pad(x, pads).view(np.uint32))
    finally:
        native.set_num_threads(None)  # back to the environment's count


@pytest.mark.parametrize("backend", BACKENDS)
def test_squeeze_dims_may_repeat_and_pack_names_an_unknown_rank(backend):
    """TF reads squeeze_dims as a set; a Pack shape error about an input of unknown rank
    prints it as TF does (found by the sanitized fuzz campaign)."""
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32)
    y = ops.Squeeze(root, x, squeeze_dims=[0, -3, 0])
    value = np.arange(4, dtype=np.float32).reshape(1, 4, 1)
    np.testing.assert_array_equal(mg.ClientSession(root, backend=backend).Run({x: value}, y),
                                  value.reshape(4, 1))
    with pytest.raises(mg.errors.InvalidArgumentError, match=r"Pack .*values\[0\]\.shape = "
                                                             r"<unknown> != values\[2\]"):
        ops.Pack(root, [x, ops.Placeholder(root, mg.float32, shape=[4, 2]),
                        ops.Placeholder(root, mg.float32, shape=[3])], axis=1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_roll_shifts_cyclically_and_adds_repeated_axes(backend):
    """Roll against index arithmetic: out[(i + shift) % n] = x[i] along each axis; a repeated
    axis rolls by the sum of its shifts; negative axes and shifts beyond the length wrap."""
    x = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    cases = [(np.int32(1), np.int32(0)), (np.array([-2, 7], np.int64), np.array([1, -1])),
             (np.array([1, 2], np.int32), np.array([2, 2], np.int32))]
    root = mg.Scope.NewRootScope()
    outs = [ops.Roll(root, x, shift, np.asarray(axis, np.int32)) for shift, axis in cases]
    for (shift, axis), value in zip(cases, run(root, outs, backend)):
        expected = np.empty_like(x)
        totals = {}
        for s, a in zip(np.ravel(shift), np.ravel(axis)):
            totals[int(a) % 3] = totals.get(int(a) % 3, 0) + int(s)
        for position in np.ndindex(*x.shape):
            moved = list(position)
            for a, s in totals.items():
                moved[a] = (position[a] + s) % x.shape[a]
            expected[tuple(moved)] = x[position]
        np.testing.assert_array_equal(value, expected)
    with pytest.raises(mg.errors.InvalidArgumentError, match="shift and axis must have the "
                                                              "same size"):
        ops.Roll(root, x, np.array([1, 2], np.int32), np.int32(0))
    with pytest.raises(mg.errors.InvalidArgumentError, match="axis 3 is out of range"):
        ops.Roll(root, x, np.int32(1), np.int32(3))


@pytest.mark.parametrize("backend", BACKENDS)
def test_reverse_sequence_reverses_each_prefix(backend):
    """Batch entry b's first seq_lengths[b] steps along seq_dim reversed, the rest in place;
    batch_dim after seq_dim too; TF's errors for bad lengths and axes."""
    x = np.arange(2 * 4 * 3, dtype=np.float32).reshape(2, 4, 3)
    root = mg.Scope.NewRootScope()
    cases = [(np.array([2, 4], np.int64), 1, 0), (np.array([0, 1, 3], np.int32), 1, 2)]
    outs = [ops.ReverseSequence(root, x, lengths, seq_dim=seq, batch_dim=batch)
            for lengths, seq, batch in cases]
    for (lengths, seq, batch), value in zip(cases, run(root, outs, backend)):
        expected = x.copy()
        for b, n in enumerate(lengths):
            index = [slice(None)] * 3
            index[batch] = b
            for step in range(n):
                index[seq] = step
                source = list(index)
                source[seq] = n - 1 - step
                expected[tuple(index)] = x[tuple(source)]
        np.testing.assert_array_equal(value, expected)
    for lengths, seq, batch, words in (([5, 1], 1, 0, r"seq_lens\(0\) > input.dims\(1\)"),
                                       ([-1, 1], 1, 0, r"seq_lens\(0\) < 0"),
                                       ([1, 1], 0, 0, "batch_dim == seq_dim == 0"),
                                       ([1, 1, 1], 1, 0, "Length of seq_lengths != input")):
        with pytest.raises(mg.errors.InvalidArgumentError, match=words):
            ops.ReverseSequence(root, x, np.array(lengths, np.int64), seq_dim=seq,
                                batch_dim=batch)
