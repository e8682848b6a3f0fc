"""The batched matrix products (``minigraph.ops.linalg_ops``): BatchMatMul, BatchMatMulV2,
BatchMatMulV3 and Einsum.

* Values against float64 numpy formulas (``np.matmul``, ``np.einsum`` in float64), every
  backend, adj_x/adj_y, broadcast batch dims, integer and half types.
* Einsum: the equations tf_keras emits (EinsumDense, MultiHeadAttention), one-operand
  transposes and reductions, labels summed in one operand; the refused ones (diagonals,
  ellipses, three operands) and TF's words for bad shapes.
* Every gradient against float64 central differences (Einsum's own gradient is an Einsum).
* ``oracle``: ``tf.raw_ops`` and frozen tf_keras MultiHeadAttention / EinsumDense graphs.
* BLAS threads are limited to minigraph's thread count during a product (threadpoolctl).
"""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest
from conftest import BACKENDS

import minigraph as mg
from minigraph import ops
from minigraph.framework.gradient_registry import registered_gradients
from minigraph.testing import tf_graphs
from minigraph.testing.gradient_checker import compute_gradient, max_error

F32, F64 = np.float32, np.float64
InvalidArgumentError = mg.errors.InvalidArgumentError
KERAS_EQUATIONS = ["abc,cd->abd", "abc,cde->abde", "aecd,abcd->acbe", "acbe,aecd->abcd",
                   "abcd,cde->abe"]
MORE_EQUATIONS = ["ab,bc->ac", "ab,cb->ca", "abc,cd->ad", "ab,cd->abcd", "ij->ji", "abc->b",
                  "ab->", "abc,abd->cd", "bij,bjk->bik"]


def run(fetches, backend="reference", feeds=None):
    graph = (fetches[0] if isinstance(fetches, list) else fetches).graph
    return mg.ClientSession(graph, backend=backend).Run(feeds or {}, fetches)


def operand_shapes(equation: str, sizes="abcdeijk", dims=(2, 3, 4, 5, 3, 2, 3, 4)):
    size_of = dict(zip(sizes, dims))
    return [tuple(size_of[c] for c in s) for s in equation.split("->")[0].split(",")]


def random_operands(equation, rng, dtype=F32):
    return [rng.standard_normal(s).astype(dtype) for s in operand_shapes(equation)]


# ----------------------------------------------------------------------------- BatchMatMul


def matmul_f64(x, y, adj_x, adj_y):
    x, y = x.astype(F64), y.astype(F64)
    return np.matmul(np.swapaxes(x, -1, -2) if adj_x else x,
                     np.swapaxes(y, -1, -2) if adj_y else y)


def operands(x_batch, y_batch, adj_x, adj_y, m=3, k=4, n=2, rng=None, dtype=F32):
    rng = rng or np.random.default_rng(0)
    x = rng.standard_normal((*x_batch, *((k, m) if adj_x else (m, k)))).astype(dtype)
    y = rng.standard_normal((*y_batch, *((n, k) if adj_y else (k, n)))).astype(dtype)
    return x, y


ADJ = list(itertools.product([False, True], repeat=2))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("adj_x,adj_y", ADJ)
def test_batch_matmuls_match_float64(backend, adj_x, adj_y):
    rng = np.random.default_rng(1)
    root = mg.Scope.NewRootScope()
    x, y = operands((2, 3), (2, 3), adj_x, adj_y, rng=rng)
    bx, by = operands((2, 1, 3), (4, 1), adj_x, adj_y, rng=rng)
    kw = dict(adj_x=adj_x, adj_y=adj_y)
    outs = run([ops.BatchMatMul(root, x, y, **kw), ops.BatchMatMulV2(root, bx, by, **kw),
                ops.BatchMatMulV3(root, x, y, Ta=mg.float32, Tb=mg.float32, Tout=mg.float32,
                                  **kw)], backend)
    for out, want in zip(outs, [matmul_f64(x, y, adj_x, adj_y),
                                matmul_f64(bx, by, adj_x, adj_y),
                                matmul_f64(x, y, adj_x, adj_y)]):
        assert out.dtype == F32 and out.shape == want.shape
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_batch_matmul_types_and_empty(backend):
    rng = np.random.default_rng(2)
    xi = rng.integers(-9, 9, (2, 3, 4)).astype(np.int32)
    yi = rng.integers(-9, 9, (4, 2)).astype(np.int32)[None]
    xh, yh = xi.astype(np.float16) / 4, yi.astype(np.float16) / 4
    root = mg.Scope.NewRootScope()
    ints, halves, empty = run([ops.BatchMatMulV2(root, xi, yi), ops.BatchMatMulV2(root, xh, yh),
                               ops.BatchMatMulV2(root, np.ones((2, 3, 0), F32),
                                                 np.ones((1, 0, 5), F32))], backend)
    assert ints.dtype == np.int32 and halves.dtype == np.float16
    np.testing.assert_array_equal(ints, np.matmul(xi.astype(np.int64), yi))
    np.testing.assert_array_equal(halves, np.matmul(xh.astype(F64), yh).astype(np.float16))
    np.testing.assert_array_equal(empty, np.zeros((2, 3, 5), F32))


def test_batch_matmul_shapes_and_errors():
    root = mg.Scope.NewRootScope()
    px = ops.Placeholder(root, mg.float32, shape=(None, 1, 3, 4))
    py = ops.Placeholder(root, mg.float32, shape=(5, None, 2))
    assert ops.BatchMatMulV2(root, px, py).shape == (None, 5, 3, 2)
    unknown = ops.Placeholder(root, mg.float32)
    assert ops.BatchMatMulV2(root, unknown, py).shape.rank is None
    a, b = np.ones((2, 3, 4), F32), np.ones((3, 4, 5), F32)
    cases = [
        (lambda: ops.BatchMatMulV2(root, a, b), "In\\[0\\] and In\\[1\\] must have compatible "
                                                "batch dimensions: \\[2,3,4\\] vs. \\[3,4,5\\]"),
        (lambda: ops.BatchMatMulV2(root, a, np.ones((2, 5, 6), F32)),
         "Matrix size-incompatible: In\\[0\\]: \\[2,3,4\\], In\\[1\\]: \\[2,5,6\\]"),
        (lambda: ops.BatchMatMulV2(root, np.ones(3, F32), b), "In\\[0\\] ndims must be >= 2: 1"),
        (lambda: ops.BatchMatMul(root, np.ones((2, 1, 3, 4), F32), np.ones((5, 4, 2), F32)),
         "In\\[0\\] and In\\[1\\] has different ndims"),
        (lambda: ops.BatchMatMul(root, a, np.ones((1, 4, 2), F32)),
         "In\\[0\\].dim\\(0\\) and In\\[1\\].dim\\(0\\) must be the same"),
        (lambda: ops.BatchMatMulV3(root, a, a.astype(F64), Ta=mg.float32, Tb=mg.float64,
                                   Tout=mg.float32), "must be one type"),
    ]
    for build, words in cases:
        with pytest.raises(InvalidArgumentError, match=words):
            build()
    py2 = ops.Placeholder(root, mg.float32, shape=(None, None, None))
    y = ops.BatchMatMulV2(root.WithOpName("bmm"), a, py2)
    with pytest.raises(InvalidArgumentError, match="BatchMatMulV2 'bmm': Matrix size"):
        run(y, feeds={py2: np.ones((2, 5, 2), F32)})


# ----------------------------------------------------------------------------- Einsum


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("equation", KERAS_EQUATIONS + MORE_EQUATIONS)
def test_einsum_matches_float64(backend, equation):
    rng = np.random.default_rng(3)
    inputs = random_operands(equation, rng)
    root = mg.Scope.NewRootScope()
    out = ops.Einsum(root, inputs, equation)
    want = np.einsum(equation, *[a.astype(F64) for a in inputs])
    assert out.shape == want.shape
    got = run(out, backend)
    assert got.dtype == F32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_einsum_types():
    rng = np.random.default_rng(4)
    x = rng.integers(-5, 5, (2, 3)).astype(np.int64)
    y = rng.integers(-5, 5, (3, 4)).astype(np.int64)
    root = mg.Scope.NewRootScope()
    ints, halves = run([ops.Einsum(root, [x, y], "ab,bc->ac"),
                        ops.Einsum(root, [x.astype(np.float16), y.astype(np.float16)],
                                   "ab,bc->ac")])
    np.testing.assert_array_equal(ints, x @ y)
    assert halves.dtype == np.float16
    np.testing.assert_array_equal(halves, (x @ y).astype(np.float16))


def test_einsum_refusals_and_shape_errors():
    root = mg.Scope.NewRootScope()
    a, b = np.ones((2, 3), F32), np.ones((3, 4), F32)
    cases = [
        ([a, b], "ab,bc", "Expecting exactly one '->' in einsum equation"),
        ([a, b, b], "ab,bc,cd->ad", "Expecting 1 or 2 input subscripts"),
        ([np.ones((2, 2, 3), F32), b], "aab,bc->ac", "repeated in input 0.*diagonals"),
        ([a, b], "ab,bc->aa", "repeated in the output"),
        ([a, b], "...b,bc->...c", "ellipsis"),
        ([a, b], "ab,bc->acx", "appear in no input"),
        ([a, b], "a1,1c->ac", "invalid label"),
        ([a], "ab,bc->ac", "has 2 input subscripts, but the op has 1 inputs"),
        ([np.ones((2, 3, 4), F32), b], "ab,bc->ac", "Expected input 0 to have rank 2 but got: 3"),
        ([a, np.ones((4, 5), F32)], "ab,bc->ac",
         "Expected dimension 3 at axis 0 of the input shaped \\[4,5\\] but got dimension 4"),
    ]
    for inputs, equation, words in cases:
        with pytest.raises(InvalidArgumentError, match=f"Einsum '.*': .*{words}"):
            ops.Einsum(root, inputs, equation)
    p = ops.Placeholder(root, mg.float32, shape=(None, None))
    y = ops.Einsum(root.WithOpName("e"), [p, b], "ab,bc->ac")
    assert y.shape == (None, 4)
    with pytest.raises(InvalidArgumentError, match="Einsum 'e': Expected dimension"):
        run(y, feeds={p: np.ones((2, 5), F32)})


# ----------------------------------------------------------------------------- gradients


def assert_gradients_match(xs, values, y):
    theoretical, numerical = compute_gradient(xs, values, y)
    assert max_error(theoretical, numerical) < 1e-6
    assert max(float(np.abs(n).max()) for n in numerical) > 1e-3


@pytest.mark.parametrize("adj_x,adj_y", ADJ)
def test_batch_matmul_gradients(adj_x, adj_y):
    rng = np.random.default_rng(5)
    kw = dict(adj_x=adj_x, adj_y=adj_y)
    for op, (x_batch, y_batch) in ((ops.BatchMatMul, ((2,), (2,))),
                                   (ops.BatchMatMulV2, ((2, 1), (3,))),
                                   (ops.BatchMatMulV3, ((1,), (2,)))):
        x, y = operands(x_batch, y_batch, adj_x, adj_y, m=2, k=3, n=2, rng=rng, dtype=F64)
        root = mg.Scope.NewRootScope()
        xp = ops.Placeholder(root, mg.float32, shape=x.shape)
        yp = ops.Placeholder(root, mg.float32, shape=y.shape)
        extra = dict(Ta=mg.float32, Tb=mg.float32, Tout=mg.float32) \
            if op is ops.BatchMatMulV3 else {}
        assert_gradients_match([xp, yp], [x, y], op(root, xp, yp, **kw, **extra))


@pytest.mark.parametrize("equation", KERAS_EQUATIONS + ["abc,cd->ad", "abc->b", "ij->ji",
                                                        "ab,cd->abcd", "ab->"])
def test_einsum_gradients(equation):
    rng = np.random.default_rng(6)
    values = [v.astype(F64) for v in random_operands(equation, rng)]
    root = mg.Scope.NewRootScope()
    xs = [ops.Placeholder(root, mg.float32, shape=v.shape) for v in values]
    assert_gradients_match(xs, values, ops.Einsum(root, xs, equation))


@pytest.mark.parametrize("lower,upper", [(0, -1), (1, 0), (-1, 2)])
def test_matrix_band_part_gradients(lower, upper):
    """The band passes the cotangent through; the zeroed entries stop it."""
    value = np.random.default_rng(8).standard_normal((2, 3, 4))
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root, mg.float32, shape=value.shape)
    assert_gradients_match([x], [value], ops.MatrixBandPart(root, x, np.int64(lower),
                                                            np.int64(upper)))


LINALG_GRADIENT_TESTS = {"BatchMatMul": "test_batch_matmul_gradients",
                         "BatchMatMulV2": "test_batch_matmul_gradients",
                         "BatchMatMulV3": "test_batch_matmul_gradients",
                         "Einsum": "test_einsum_gradients",
                         "MatrixBandPart": "test_matrix_band_part_gradients",
                         "MatrixDiagPartV3": "test_matrix_diagonal_gradients",
                         "MatrixDiagV3": "test_matrix_diagonal_gradients",
                         "MatrixSetDiagV3": "test_matrix_diagonal_gradients"}


def test_every_linalg_gradient_is_checked():
    from minigraph.ops import linalg_ops
    ours = {getattr(linalg_ops, name).op_def.name if hasattr(getattr(linalg_ops, name),
                                                            "op_def") else name
            for name in linalg_ops.__all__}
    registered = {op for op, fn in registered_gradients().items() if fn is not None
                  and op in ours}
    assert registered == set(LINALG_GRADIENT_TESTS)
    assert all(name in globals() for name in LINALG_GRADIENT_TESTS.values())


# ----------------------------------------------------------------------------- BLAS threads


def test_blas_threads_are_limited_during_a_product(monkeypatch):
    threadpoolctl = pytest.importorskip("threadpoolctl")
    from minigraph.backends import linalg_kernels

    # numpy's BLAS, loaded with numpy before minigraph's first product; a BLAS another
    # library (TensorFlow, PyTorch) loads later never runs np.matmul, so it is not checked
    numpy_blas = {lib.filepath for lib in linalg_kernels._blas_controller().lib_controllers
                  if lib.user_api == "blas"}
    assert numpy_blas
    seen = []
    original = np.matmul

    def recording_matmul(a, b):
        seen.append([i["num_threads"] for i in threadpoolctl.threadpool_info()
                     if i["filepath"] in numpy_blas])
        return original(a, b)

    monkeypatch.setattr(linalg_kernels, "num_threads", lambda: 1)
    monkeypatch.setattr(np, "matmul", recording_matmul)
    linalg_kernels.blas_matmul(np.ones((2, 2), F32), np.ones((2, 2), F32))
    assert seen and all(n == 1 for n in seen[0])


# ----------------------------------------------------------------------------- TensorFlow


@pytest.fixture(scope="module")
def tf():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return pytest.importorskip("tensorflow")


@pytest.mark.oracle
@pytest.mark.parametrize("backend", BACKENDS)
def test_against_tensorflow(tf, backend):
    rng = np.random.default_rng(7)
    root = mg.Scope.NewRootScope()
    mine, theirs = [], []
    for adj_x, adj_y in ADJ:
        x, y = operands((2, 1), (3,), adj_x, adj_y, rng=rng)
        mine.append(ops.BatchMatMulV2(root, x, y, adj_x=adj_x, adj_y=adj_y))
        theirs.append(tf.raw_ops.BatchMatMulV2(x=x, y=y, adj_x=adj_x, adj_y=adj_y))
    for equation in KERAS_EQUATIONS + MORE_EQUATIONS:
        inputs = random_operands(equation, rng)
        mine.append(ops.Einsum(root, inputs, equation))
        theirs.append(tf.raw_ops.Einsum(inputs=inputs, equation=equation))
    for a, b in zip(run(mine, backend), theirs):
        b = b.numpy()
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.oracle
@pytest.mark.parametrize("backend", BACKENDS)
def test_frozen_keras_attention_and_einsum_dense(tf, backend):
    keras = pytest.importorskip("tf_keras")
    layers = keras.layers
    keras.utils.set_random_seed(8)
    inp = keras.Input((7, 8))
    attention = keras.Model(inp, layers.MultiHeadAttention(num_heads=2, key_dim=4)(inp, inp))
    dense = keras.Sequential([layers.EinsumDense("abc,cd->abd", output_shape=(None, 6),
                                                 bias_axes="d")])
    x = np.random.default_rng(9).standard_normal((3, 7, 8)).astype(F32)
    for model in (attention, dense):
        types, ours, theirs = tf_graphs.run_frozen(model, x, backend)
        assert "Einsum" in types
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


@pytest.mark.oracle
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("block", ["dense_3d", "layer_norm_gelu"])
def test_frozen_keras_sequence_blocks(tf, backend, block):
    """Dense on (batch, time, features) (tf_keras lowers it to a tensordot: Transpose,
    Reshape, MatMul, GatherV2, ConcatV2, Prod) and LayerNormalization + GELU."""
    keras = pytest.importorskip("tf_keras")

    layers = keras.layers
    keras.utils.set_random_seed(10)
    model = keras.Sequential([layers.Dense(6)] if block == "dense_3d" else
                             [layers.LayerNormalization(), layers.Activation("gelu")])
    x = np.random.default_rng(11).standard_normal((3, 7, 5)).astype(F32)
    _, ours, theirs = tf_graphs.run_frozen(model, x, backend)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- diagonals

ALIGNS = ["RIGHT_LEFT", "LEFT_RIGHT", "LEFT_LEFT", "RIGHT_RIGHT"]


def _diagonals_reference(x, low, high, align, padding):
    """Row i holds diagonal d = high - i, entries (m, m + d) in order of m, padded to the
    longest diagonal on the side ``align`` names for it (RIGHT_LEFT: superdiagonals right)."""
    rows, cols = x.shape[-2:]
    entries = {d: [(i, i + d) for i in range(rows) if 0 <= i + d < cols]
               for d in range(low, high + 1)}
    longest = max(len(e) for e in entries.values())
    out = np.full((*x.shape[:-2], high - low + 1, longest), padding, x.dtype)
    for row, d in enumerate(range(high, low - 1, -1)):
        right = (d >= 0 and align.startswith("RIGHT")) or (d <= 0 and align.endswith("RIGHT"))
        start = longest - len(entries[d]) if right else 0
        for n, (i, j) in enumerate(entries[d]):
            out[..., row, start + n] = x[..., i, j]
    return out[..., 0, :] if low == high else out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("align", ALIGNS)
@pytest.mark.parametrize("shape,band", [((3, 4), (0, 0)), ((2, 3, 4), (-1, 2)),
                                         ((5, 3), (-3, 1)), ((4, 4), (1, 3)),
                                         ((2, 6, 2), (-2, -1))])
def test_matrix_diagonals_round_trip(backend, align, shape, band):
    """MatrixDiagPartV3 against the definition; MatrixSetDiagV3 writes exactly those
    entries; MatrixDiagV3 builds a matrix whose diagonals read back the same."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal(shape).astype(F32)
    low, high = band
    k = np.array([low, high], np.int32) if low != high else np.int32(low)
    expected = _diagonals_reference(x, low, high, align, -7.0)
    new = rng.standard_normal(expected.shape).astype(F32)
    root = mg.Scope.NewRootScope()
    part = ops.MatrixDiagPartV3(root, x, k, F32(-7.0), align=align)
    setd = ops.MatrixSetDiagV3(root, x, new, k, align=align)
    built = ops.MatrixDiagV3(root, new, k, np.int32(shape[-2]), np.int32(shape[-1]), F32(0),
                             align=align)
    again = ops.MatrixDiagPartV3(root, built, k, F32(-7.0), align=align)
    part_v, set_v, built_v, again_v = mg.ClientSession(root, backend=backend).Run(
        {}, [part, setd, built, again])
    assert part.shape == mg.TensorShape(expected.shape)
    np.testing.assert_array_equal(part_v, expected)
    changed = _diagonals_reference(set_v, low, high, align, -7.0)
    keep = expected != -7.0  # the padding slots hold no entry
    np.testing.assert_array_equal(changed[keep], new[keep])
    band_mask = (lambda i, j: (j - i >= low) & (j - i <= high))(*np.indices(shape[-2:]))
    np.testing.assert_array_equal(set_v[..., ~band_mask], x[..., ~band_mask])
    np.testing.assert_array_equal(built_v[..., ~band_mask], 0)
    np.testing.assert_array_equal(again_v[keep], new[keep])


@pytest.mark.oracle
@pytest.mark.parametrize("align", ALIGNS)
def test_matrix_diagonals_against_tensorflow(align):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    tf = pytest.importorskip("tensorflow")
    raw = tf.raw_ops
    x = np.random.default_rng(10).standard_normal((2, 4, 5)).astype(F32)
    d = np.random.default_rng(11).standard_normal((2, 3, 4)).astype(F32)
    root = mg.Scope.NewRootScope()
    k = np.array([-1, 1], np.int32)
    ours = mg.ClientSession(root).Run({}, [
        ops.MatrixDiagPartV3(root, x, k, F32(5), align=align),
        ops.MatrixSetDiagV3(root, x, d, k, align=align),
        ops.MatrixDiagV3(root, d, k, np.int32(-1), np.int32(-1), F32(2), align=align),
        ops.MatrixDiagV3(root, d[:, 0], np.int32(1), np.int32(-1), np.int32(6), F32(0),
                         align=align)])
    theirs = [raw.MatrixDiagPartV3(input=x, k=k, padding_value=F32(5), align=align),
              raw.MatrixSetDiagV3(input=x, diagonal=d, k=k, align=align),
              raw.MatrixDiagV3(diagonal=d, k=k, num_rows=-1, num_cols=-1,
                               padding_value=F32(2), align=align),
              raw.MatrixDiagV3(diagonal=d[:, 0], k=1, num_rows=-1, num_cols=6,
                               padding_value=F32(0), align=align)]
    for value, expected in zip(ours, theirs):
        np.testing.assert_array_equal(value, expected.numpy())


def test_matrix_diagonal_errors():
    root = mg.Scope.NewRootScope()
    m = np.ones((3, 4), F32)
    d = np.ones((2, 3), F32)
    cases = [(lambda: ops.MatrixDiagPartV3(root, m, np.array([2, 1], np.int32), F32(0)),
              "lower_diag_index must not be larger than upper_diag_index: 2 > 1"),
             (lambda: ops.MatrixDiagPartV3(root, m, np.array([0, 4], np.int32), F32(0)),
              "upper_diag_index is out of bound: 4"),
             (lambda: ops.MatrixDiagV3(root, d, np.array([0, 2], np.int32), np.int32(-1),
                                       np.int32(-1), F32(0)),
              "The number of diagonals provided in the input does not match"),
             (lambda: ops.MatrixDiagV3(root, np.ones(2, F32), np.int32(0), np.int32(1),
                                       np.int32(-1), F32(0)), "The number of rows is too small"),
             (lambda: ops.MatrixSetDiagV3(root, m, np.ones(2, F32), np.int32(0)),
              "Either first dimensions of diagonal don't match")]
    for build, words in cases:
        with pytest.raises(mg.errors.InvalidArgumentError, match=words):
            build()


@pytest.mark.parametrize("band", [(0, 0), (-1, 1)])
def test_matrix_diagonal_gradients(band):
    """Part, set and build: each passes the cotangent of exactly the diagonal entries."""
    rng = np.random.default_rng(12)
    low, high = band
    k = np.array([low, high], np.int32) if low != high else np.int32(low)
    x_value = rng.standard_normal((2, 3, 4))
    diag_shape = (2, 3) if low == high else (2, high - low + 1, 3)
    d_value = rng.standard_normal(diag_shape)
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root, mg.float32, shape=x_value.shape)
    d = ops.Placeholder(root, mg.float32, shape=d_value.shape)
    assert_gradients_match([x], [x_value], ops.MatrixDiagPartV3(root, x, k, F32(0)))
    assert_gradients_match([x, d], [x_value, d_value], ops.MatrixSetDiagV3(root, x, d, k))
    assert_gradients_match([d], [d_value], ops.MatrixDiagV3(root, d, k, np.int32(3),
                                                            np.int32(4), F32(0)))
