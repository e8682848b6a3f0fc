"""MirrorPad, MirrorPadGrad, SpaceToBatchND, BatchToSpaceND, DepthToSpace, SpaceToDepth,
ReverseV2 (minigraph/ops/spatial_ops.py): values against element-by-element formulas written
here on every backend and dtype, shape inference, errors in TF's words naming the op and
input, TensorFlow's raw ops bit for bit (refusing exactly what TF refuses on random specs).
Gradients are checked in test_gradient_checker.py."""

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
X = RNG.standard_normal((2, 3, 4)).astype(F32)
DTYPES = (np.float16, ml_dtypes.bfloat16, np.float64, np.int32, np.int64, np.bool_)


def run(root, fetches, backend="reference", feeds=None):
    return mg.ClientSession(root, backend=backend).Run(feeds or {}, fetches)


def mirrored_index(j: int, size: int, before: int, reflect: bool) -> int:
    """The input element output position j of a MirrorPad reads along one dimension."""
    k = j - before
    if k < 0:
        return -k if reflect else -k - 1
    if k >= size:
        return 2 * size - k - (2 if reflect else 1)
    return k


def mirror_padded(x, pairs, reflect):
    out_shape = tuple(d + a + b for d, (a, b) in zip(x.shape, pairs))
    out = np.empty(out_shape, x.dtype)
    for position in np.ndindex(*out_shape):
        out[position] = x[tuple(mirrored_index(j, d, a, reflect)
                                for j, d, (a, _) in zip(position, x.shape, pairs))]
    return out


def mirror_folded(grad, pairs, reflect):
    """MirrorPadGrad: every padded position's gradient added onto the element it read."""
    shape = tuple(d - a - b for d, (a, b) in zip(grad.shape, pairs))
    out = np.zeros(shape, np.float64)
    for position in np.ndindex(*grad.shape):
        out[tuple(mirrored_index(j, d, a, reflect) for j, d, (a, _)
                  in zip(position, shape, pairs))] += grad[position]
    return out


def space_to_batch(x, block, pairs):
    """out[(offsets) * batch + n, i_1, ..., rest] = padded[n, i_1 * b_1 + offset_1, ...]."""
    m = len(block)
    padded = np.pad(x, [(0, 0), *pairs] + [(0, 0)] * (x.ndim - 1 - m))
    spatial = [d // b for d, b in zip(padded.shape[1:1 + m], block)]
    batch = x.shape[0]
    out = np.empty((batch * int(np.prod(block)), *spatial, *x.shape[1 + m:]), x.dtype)
    for position in np.ndindex(*out.shape):
        offset, n = divmod(position[0], batch)
        offsets = np.unravel_index(offset, block) if block else ()
        source = [n] + [i * b + o for i, b, o in zip(position[1:1 + m], block, offsets)]
        out[position] = padded[tuple(source) + position[1 + m:]]
    return out


def depth_to_space(x, bs):
    n, h, w, c = x.shape
    out = np.empty((n, h * bs, w * bs, c // bs // bs), x.dtype)
    for b, y, z, k in np.ndindex(*out.shape):
        out[b, y, z, k] = x[b, y // bs, z // bs, ((y % bs) * bs + z % bs) * out.shape[3] + k]
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_values_follow_the_element_formulas(backend):
    root, cases = mg.Scope.NewRootScope(), []
    for mode, pairs in (("REFLECT", [[1, 1], [2, 0], [0, 3]]),
                        ("SYMMETRIC", [[2, 2], [3, 1], [4, 0]])):
        reflect = mode == "REFLECT"
        cases.append((ops.MirrorPad(root, X, np.array(pairs), mode=mode),
                      mirror_padded(X, pairs, reflect)))
        grad = RNG.standard_normal(tuple(d + a + b for d, (a, b) in zip(X.shape, pairs)))
        cases.append((ops.MirrorPadGrad(root, grad, np.array(pairs, np.int64), mode=mode),
                      mirror_folded(grad, pairs, reflect)))
    y = RNG.standard_normal((2, 4, 6, 3)).astype(F32)
    for block, pairs in (([2, 3], [[0, 0], [0, 0]]), ([2, 2], [[1, 1], [0, 2]]),
                         ([4], [[1, 3]]), ([], np.zeros((0, 2), int))):
        s2b = space_to_batch(y, block, [tuple(p) for p in pairs])
        cases.append((ops.SpaceToBatchND(root, y, np.array(block, np.int32),
                                         np.array(pairs, np.int32)), s2b))
        cases.append((ops.BatchToSpaceND(root, s2b, np.array(block, np.int64),
                                         np.array(pairs, np.int64)), y))  # the inverse
    w = RNG.standard_normal((2, 2, 3, 8)).astype(F32)
    cases.append((ops.DepthToSpace(root, w, block_size=2), depth_to_space(w, 2)))
    cases.append((ops.SpaceToDepth(root, depth_to_space(w, 2), block_size=2), w))
    cases.append((ops.DepthToSpace(root, w.transpose(0, 3, 1, 2), block_size=2,
                                   data_format="NCHW"), depth_to_space(w, 2).transpose(0, 3, 1, 2)))
    cases.append((ops.SpaceToDepth(root, depth_to_space(w, 2).transpose(0, 3, 1, 2),
                                   block_size=2, data_format="NCHW"), w.transpose(0, 3, 1, 2)))
    cases.append((ops.ReverseV2(root, X, np.array([0, -1])), X[::-1, :, ::-1]))
    cases.append((ops.ReverseV2(root, X, np.zeros(0, np.int64)), X))
    for (out, expected), value in zip(cases, run(root, [c[0] for c in cases], backend)):
        assert out.shape == mg.TensorShape(expected.shape)
        np.testing.assert_allclose(value, expected, rtol=1e-12, atol=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_dtype_scalars_and_zero_sizes(backend):
    for dtype in DTYPES:
        x = (RNG.standard_normal((2, 3)) * 4).astype(dtype)
        root = mg.Scope.NewRootScope()
        outs = [ops.MirrorPad(root, x, [[1, 0], [2, 2]], mode="SYMMETRIC"),
                ops.MirrorPad(root, np.zeros((0, 3), dtype), [[0, 0], [1, 1]], mode="SYMMETRIC"),
                ops.MirrorPad(root, x[0, 0], np.zeros((0, 2), np.int32), mode="REFLECT"),
                ops.ReverseV2(root, x, [1]),
                ops.SpaceToBatchND(root, np.zeros((0, 4, 1), dtype), [2], [[0, 0]]),
                ops.DepthToSpace(root, np.zeros((1, 0, 2, 4), dtype), block_size=2)]
        values = run(root, outs, backend)
        np.testing.assert_array_equal(values[0], mirror_padded(x, [[1, 0], [2, 2]], False))
        assert values[0].dtype == x.dtype and values[1].shape == (0, 5)
        assert values[2].shape == () and values[2] == x[0, 0]
        np.testing.assert_array_equal(values[3], x[:, ::-1])
        assert values[4].shape == (0, 2, 1) and values[5].shape == (1, 0, 4, 1)
    half = RNG.standard_normal((5, 6)).astype(np.float16)
    root = mg.Scope.NewRootScope()
    folded = run(root, ops.MirrorPadGrad(root, half, [[1, 1], [2, 1]], mode="REFLECT"), backend)
    expected = mirror_folded(half.astype(np.float32), [[1, 1], [2, 1]], True)  # f32, rounded
    np.testing.assert_array_equal(folded, expected.astype(np.float32).astype(np.float16))


def test_unknown_values_give_partial_shapes():
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root, mg.float32, shape=[None, 4, 6, 3])
    unknown = ops.Placeholder(root, mg.int32, shape=[2])
    pairs = ops.Placeholder(root, mg.int32, shape=[2, 2])
    assert ops.SpaceToBatchND(root, x, [2, 3], [[0, 0], [0, 0]]).shape == \
        mg.TensorShape([None, 2, 2, 3])
    assert ops.SpaceToBatchND(root, x, unknown, pairs).shape == \
        mg.TensorShape([None, None, None, 3])
    assert ops.SpaceToBatchND(root, x, [2, 3], pairs).shape == \
        mg.TensorShape([None, None, None, 3])
    assert ops.BatchToSpaceND(root, x, unknown, pairs).shape == \
        mg.TensorShape([None, None, None, 3])
    assert ops.MirrorPad(root, x, ops.Placeholder(root, mg.int32, shape=[4, 2]),
                         mode="REFLECT").shape == mg.TensorShape([None] * 4)
    deep = ops.Placeholder(root, mg.float32, shape=[None, 4, 6, None])
    assert ops.DepthToSpace(root, deep, block_size=3).shape == \
        mg.TensorShape([None, 12, 18, None])
    assert ops.SpaceToDepth(root, ops.Placeholder(root, mg.float32), block_size=2).shape == \
        mg.TensorShape([None] * 4)


@pytest.mark.parametrize("build, match", [
    (lambda r: ops.MirrorPad(r, X, [[2, 0], [0, 0], [0, 0]], mode="REFLECT"),
     r"MirrorPad .*paddings must be less than the dimension size: 2, 0 not less than 2"),
    (lambda r: ops.MirrorPad(r, X, [[3, 0], [0, 0], [0, 0]], mode="SYMMETRIC"),
     r"paddings must be no greater than the dimension size: 3, 0 greater than 2"),
    (lambda r: ops.MirrorPad(r, X, [[-1, 0], [0, 0], [0, 0]], mode="SYMMETRIC"),
     r"paddings must be non-negative: -1 0 \(input 'paddings'\)"),
    (lambda r: ops.MirrorPad(r, X, [[1, 0], [0, 0]], mode="SYMMETRIC"),
     r"The first dimension of paddings must be the rank of inputs\[2,2\], \[2,3,4\]"),
    (lambda r: ops.MirrorPad(r, X, [[1, 0, 1]] * 3, mode="SYMMETRIC"),
     r"paddings must be a matrix with 2 columns: \[3,3\]"),
    (lambda r: ops.MirrorPad(r, X, [[0, 0]] * 3, mode="WRAP"), r"attr 'mode' is 'WRAP'"),
    (lambda r: ops.MirrorPadGrad(r, np.ones((5,), F32), [[2, 2]], mode="REFLECT"),
     r"paddings must be less than the output dimension size: 2, 2 not less than 1"),
    (lambda r: ops.MirrorPadGrad(r, np.ones((4,), F32), [[3, 3]], mode="REFLECT"),
     r"Total paddings must be less than the input dimension size: 6 was not less than 4"),
    (lambda r: ops.MirrorPadGrad(r, np.ones((5,), F32), [[3, 0]], mode="SYMMETRIC"),
     r"paddings must be no greater than the output dimension size: 3, 0 greater than 2"),
    (lambda r: ops.SpaceToBatchND(r, np.zeros((2, 4, 6, 3)), [3, 2], [[0, 0], [0, 0]]),
     r"padded_shape\[0\]=4 is not divisible by block_shape\[0\]=3"),
    (lambda r: ops.SpaceToBatchND(r, np.zeros((2, 4, 6, 3)), [0, 2], [[0, 0], [0, 0]]),
     r"All values in block_shape must be positive, got value, 0 at index 0."),
    (lambda r: ops.SpaceToBatchND(r, np.zeros((2, 4, 6, 3)), [2, 2], [[-1, 1], [0, 0]]),
     r"Paddings must be non-negative"),
    (lambda r: ops.SpaceToBatchND(r, np.zeros((2, 4, 6, 3)), [[2, 2]], [[0, 0], [0, 0]]),
     r"block_shape rank should be 1 instead of 2"),
    (lambda r: ops.SpaceToBatchND(r, np.zeros((2, 4, 6, 3)), [2, 2], [[0, 0, 0]] * 2),
     r"paddings should have shape \[2, 2\] instead of \[2,3\]"),
    (lambda r: ops.SpaceToBatchND(r, np.zeros((2, 4)), [2, 2], [[0, 0]] * 2),
     r"input rank should be >= 3 instead of 2"),
    (lambda r: ops.BatchToSpaceND(r, np.zeros((12, 2, 2, 3)), [5, 1], [[0, 0]] * 2),
     r"Input batch dimension \(12\) is not divisible by product of block sizes \(5\)"),
    (lambda r: ops.BatchToSpaceND(r, np.zeros((12, 2, 2, 3)), [2, 3], [[3, 2], [0, 0]]),
     r"cropped_shape\[0\]=-1 must be non-negative"),
    (lambda r: ops.BatchToSpaceND(r, np.zeros((12, 2, 2, 3)), [0, 3], [[0, 0]] * 2),
     r"Product of block sizes must be positive, got 0"),
    (lambda r: ops.BatchToSpaceND(r, np.zeros((12, 2, 2, 3)), [2, 3], [[-1, 0], [0, 0]]),
     r"Crops must be non-negative"),
    (lambda r: ops.DepthToSpace(r, np.zeros((2, 2, 3, 8)), block_size=3),
     r"Input depth dimension 8 should be divisible by: 9"),
    (lambda r: ops.DepthToSpace(r, np.zeros((2, 3, 8)), block_size=2),
     r"Input rank should be: 4 instead of: 3"),
    (lambda r: ops.DepthToSpace(r, np.zeros((2, 2, 3, 8)), block_size=1),
     r"attr 'block_size' must be at least minimum 2"),
    (lambda r: ops.SpaceToDepth(r, np.zeros((2, 4, 5, 3)), block_size=2),
     r"Image width 5 and height 4 should be divisible by block_size: 2"),
    (lambda r: ops.SpaceToDepth(r, np.zeros((2, 4, 4, 3)), block_size=2,
                                data_format="NCHW_VECT_C"), r"NCHW_VECT_C .* not supported"),
    (lambda r: ops.ReverseV2(r, X, [0, -3]), r"axis 0 specified more than once."),
    (lambda r: ops.ReverseV2(r, X, [3]), r"'axis'\[0\] = 3 is out of valid range"),
    (lambda r: ops.ReverseV2(r, X, 0), r"'dims' must be 1-dimension, not 0"),
])
def test_bad_arguments_are_refused_with_tensorflows_words(build, match):
    with pytest.raises(mg.errors.InvalidArgumentError, match=match):
        build(mg.Scope.NewRootScope())


def test_values_known_only_at_run_time_are_checked_then():
    root = mg.Scope.NewRootScope()
    pairs = ops.Placeholder(root.WithOpName("p"), mg.int64, shape=[3, 2])
    padded = ops.MirrorPad(root.WithOpName("mirror"), X, pairs, mode="REFLECT")
    block = ops.Placeholder(root.WithOpName("b"), mg.int32, shape=[2])
    batched = ops.SpaceToBatchND(root.WithOpName("s2b"), np.zeros((1, 4, 4, 1), F32), block,
                                 [[0, 0], [0, 0]])
    session = mg.ClientSession(root)
    with pytest.raises(mg.errors.InvalidArgumentError, match="mirror.*not less than 2"):
        session.Run({pairs: np.array([[2, 0], [0, 0], [0, 0]])}, padded)
    np.testing.assert_array_equal(session.Run({pairs: np.array([[1, 0], [0, 2], [3, 0]])},
                                              padded),
                                  mirror_padded(X, [[1, 0], [0, 2], [3, 0]], True))
    with pytest.raises(mg.errors.InvalidArgumentError, match=r"s2b.*padded_shape\[1\]=4"):
        session.Run({block: np.array([2, 3], np.int32)}, batched)
    assert session.Run({block: np.array([2, 4], np.int32)}, batched).shape == (8, 2, 1, 1)


def _random_spec(rng, kind: int):
    """(op name, minigraph's inputs, attrs, TF's keyword arguments) of a random MirrorPad,
    MirrorPadGrad, SpaceToBatchND, BatchToSpaceND or ReverseV2 (``kind`` 0-4)."""
    if kind < 2:
        x = rng.standard_normal(rng.integers(1, 5, int(rng.integers(1, 4)))).astype(F32)
        pairs = rng.integers(0, 4, (x.ndim, 2))
        mode = ("REFLECT", "SYMMETRIC")[int(rng.integers(0, 2))]
        return (("MirrorPad", "MirrorPadGrad")[kind], (x, pairs), {"mode": mode},
                {"input": x, "paddings": pairs, "mode": mode})
    if kind < 4:
        block = rng.integers(1, 4, int(rng.integers(1, 3)))
        x = rng.standard_normal((int(rng.integers(1, 4)) * int(np.prod(block)),
                                 *rng.integers(1, 7, block.size), 2)).astype(F32)
        pairs = rng.integers(0, 3, (block.size, 2))
        key = "paddings" if kind == 2 else "crops"
        return (("SpaceToBatchND", "BatchToSpaceND")[kind - 2], (x, block, pairs), {},
                {"input": x, "block_shape": block, key: pairs})
    x = rng.standard_normal(rng.integers(1, 4, int(rng.integers(1, 4)))).astype(F32)
    axes = rng.integers(-x.ndim - 1, x.ndim + 1, int(rng.integers(0, 3)))
    return "ReverseV2", (x, axes), {}, {"tensor": x, "axis": axes}


@pytest.mark.oracle
@pytest.mark.parametrize("backend", BACKENDS)
def test_random_specs_agree_with_tensorflow(backend):
    """300 random specs of every op: TF and minigraph refuse the same ones and give the same
    values bit for bit for the rest."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    tf = pytest.importorskip("tensorflow")
    raw = tf.raw_ops
    rng = np.random.default_rng(9)
    refused = 0
    for trial in range(300):
        name, args, attrs, keywords = _random_spec(rng, trial % 5)
        theirs = getattr(raw, name)
        try:
            expected = theirs(**keywords).numpy()
        except (tf.errors.InvalidArgumentError, ValueError):
            expected = None
        root = mg.Scope.NewRootScope()
        try:
            out = getattr(ops, name)(root, *args, **attrs)
        except mg.errors.InvalidArgumentError:
            assert expected is None, (name, args, attrs)
            refused += 1
            continue
        assert expected is not None, (name, args, attrs)
        np.testing.assert_array_equal(run(root, out, backend), expected)
    assert 30 < refused < 270


def _patches_reference(x, ksize, strides, rates, padding):
    """Window by window from the definition: output pixel (r, c) reads rows r * sh - top +
    i * rh and columns c * sw - left + j * rw (zero outside), flattened (i, j, depth)."""
    n, h, w, d = x.shape
    (kh, kw), (sh, sw), (rh, rw) = ksize, strides, rates
    eff_h, eff_w = (kh - 1) * rh + 1, (kw - 1) * rw + 1
    if padding == "VALID":
        oh, ow, top, left = (h - eff_h) // sh + 1, (w - eff_w) // sw + 1, 0, 0
    else:
        oh, ow = -(-h // sh), -(-w // sw)
        top = max(0, (oh - 1) * sh + eff_h - h) // 2
        left = max(0, (ow - 1) * sw + eff_w - w) // 2
    out = np.zeros((n, oh, ow, kh * kw * d), x.dtype)
    for r in range(oh):
        for c in range(ow):
            for i in range(kh):
                for j in range(kw):
                    row, col = r * sh - top + i * rh, c * sw - left + j * rw
                    if 0 <= row < h and 0 <= col < w:
                        out[:, r, c, (i * kw + j) * d:(i * kw + j + 1) * d] = x[:, row, col]
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("ksize,strides,rates,padding", [
    ((2, 3), (2, 2), (1, 1), "VALID"), ((2, 2), (3, 2), (2, 1), "SAME"),
    ((3, 3), (1, 1), (1, 1), "SAME"), ((4, 4), (4, 4), (1, 1), "VALID"),
    ((1, 1), (2, 3), (1, 1), "VALID")])
def test_extract_image_patches_against_the_definition(backend, ksize, strides, rates, padding):
    x = np.random.default_rng(2).standard_normal((2, 8, 7, 3)).astype(np.float32)
    x[0, 1, 1, 0] = np.nan  # passed through, not mixed into its neighbours
    root = mg.Scope.NewRootScope()
    out = ops.ExtractImagePatches(root, x, [1, *ksize, 1], [1, *strides, 1], [1, *rates, 1],
                                  padding=padding)
    value = mg.ClientSession(root, backend=backend).Run({}, out)
    expected = _patches_reference(x, ksize, strides, rates, padding)
    assert out.shape == mg.TensorShape(expected.shape)
    np.testing.assert_array_equal(value, expected)


def test_extract_image_patches_refuses_what_tf_refuses():
    root = mg.Scope.NewRootScope()
    x = np.zeros((1, 5, 6, 2), np.float32)
    for attrs, words in ((dict(ksizes=[2, 2, 2, 1]), "Only support ksizes across space"),
                         (dict(rates=[1, 0, 1, 1]), "rates is out of range"),
                         (dict(ksizes=[1, 9, 1, 1]), "Computed output size would be negative")):
        full = dict(ksizes=[1, 2, 2, 1], strides=[1, 1, 1, 1], rates=[1, 1, 1, 1],
                    padding="VALID")
        full.update(attrs)
        with pytest.raises(mg.errors.InvalidArgumentError, match=words):
            ops.ExtractImagePatches(root, x, **full)


@pytest.mark.oracle
def test_extract_image_patches_against_tensorflow():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    tf = pytest.importorskip("tensorflow")
    x = np.random.default_rng(3).standard_normal((2, 9, 10, 3)).astype(np.float32)
    root = mg.Scope.NewRootScope()
    attrs = dict(ksizes=[1, 3, 2, 1], strides=[1, 2, 3, 1], rates=[1, 2, 1, 1],
                 padding="SAME")
    ours = mg.ClientSession(root).Run({}, ops.ExtractImagePatches(root, x, **attrs))
    theirs = tf.raw_ops.ExtractImagePatches(images=x, **attrs).numpy()
    np.testing.assert_array_equal(ours, theirs)
