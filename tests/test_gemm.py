"""The native float32 GEMM (kernels_c/gemm*.c, backends/gemm.py) and its users: MatMul on
the native backend, BatchMatMul, and the 1x1 Conv2D.

Accuracy: every element is one chain of K fused multiply-adds (one rounding each), so by the
recursive-summation bound ``|c - exact| <= gamma_K * sum_k |a_ik b_kj|`` with ``gamma_K =
K u / (1 - K u)``, ``u = 2**-24``; the exact value is the float64 product of the float32
inputs (itself exact to ~2**-53 relative, covered by a 1e-12 allowance). Determinism: the
chain's order depends only on K, so results are bit-identical across thread counts and ISAs.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
from conftest import NATIVE_AVAILABLE
from hypothesis import given, settings
from hypothesis import strategies as st

import minigraph as mg
from minigraph import ops

pytestmark = pytest.mark.skipif(not NATIVE_AVAILABLE, reason="the GEMM is a native kernel")

F32, F64 = np.float32, np.float64
U = 2.0 ** -24


def _native():
    from minigraph.backends import gemm, native
    return gemm, native


def product(a, b, ta=False, tb=False):
    """(float64 exact product, sum |a||b|) of op(a) @ op(b)."""
    a64 = (a.T if ta else a).astype(F64)
    b64 = (b.T if tb else b).astype(F64)
    return a64 @ b64, np.abs(a64) @ np.abs(b64)


def assert_within_gamma(got, exact, mags, k):
    gamma = k * U / (1 - k * U)
    bound = gamma * mags + 1e-12 * mags
    assert got.shape == exact.shape
    excess = np.abs(got.astype(F64) - exact) - bound
    assert not (excess > 0).any(), f"max excess {excess.max()} over the gamma_{k} bound"


def random_pair(rng, m, k, n, ta, tb):
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(F32)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(F32)
    return a, b


@settings(max_examples=40, deadline=None)
@given(m=st.integers(0, 300), k=st.integers(0, 300), n=st.integers(0, 300),
       ta=st.booleans(), tb=st.booleans(), seed=st.integers(0, 2**16))
def test_gemm_matches_float64_within_gamma_k(m, k, n, ta, tb, seed):
    gemm, _ = _native()
    a, b = random_pair(np.random.default_rng(seed), m, k, n, ta, tb)
    got = gemm.c_gemm(a, gemm.pack_b(b, tb), ta)
    exact, mags = product(a, b, ta, tb)
    assert_within_gamma(got, exact, mags, k)
    if k == 0:  # the empty sum
        assert not got.any() and not np.signbit(got).any()


@pytest.fixture
def restore_native():
    _, native = _native()
    isa = native.isa()
    yield native
    native.set_isa(isa)
    native.set_num_threads(None)


# several M blocks (96 rows), K blocks (256) and N blocks (8 panels of 32), ragged edges
@pytest.mark.parametrize("m,k,n", [(200, 600, 300), (2, 1030, 70), (97, 257, 33)])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, True)])
def test_gemm_bit_identical_across_threads_and_isas(m, k, n, ta, tb, restore_native):
    gemm, native = _native()
    a, b = random_pair(np.random.default_rng(m + k + n), m, k, n, ta, tb)
    packing = gemm.pack_b(b, tb)
    results = {}
    for isa in ("scalar", "avx2", "avx512"):
        if native.set_isa(isa) != isa:
            continue  # this CPU lacks it
        for threads in (1, 2, 3):
            native.set_num_threads(threads)
            results[isa, threads] = gemm.c_gemm(a, packing, ta)
    first = next(iter(results.values()))
    for key, value in results.items():
        assert value.tobytes() == first.tobytes(), key
    exact, mags = product(a, b, ta, tb)
    assert_within_gamma(first, exact, mags, k)


@settings(max_examples=25, deadline=None)
@given(m=st.integers(1, 120), k=st.integers(1, 300), n=st.integers(1, 40),
       ta=st.booleans(), tb=st.booleans(), seed=st.integers(0, 2**16))
def test_narrow_panels_bit_identical_across_threads_and_isas(m, k, n, ta, tb, seed):
    """n of 1-40 columns: panels of at most 16 columns run the narrow micro-kernel (more rows
    per tile, gemm_internal.h), wider ones the 32-column kernel; every ISA, 1 and 2 threads
    give the same bits, within the gamma_k bound of the float64 product."""
    gemm, native = _native()
    a, b = random_pair(np.random.default_rng(seed), m, k, n, ta, tb)
    packing = gemm.pack_b(b, tb)
    isa, results = native.isa(), {}
    try:
        for name in ("scalar", "avx2", "avx512"):
            if native.set_isa(name) != name:
                continue  # this CPU lacks it
            for threads in (1, 2):
                native.set_num_threads(threads)
                results[name, threads] = gemm.c_gemm(a, packing, ta).tobytes()
    finally:
        native.set_isa(isa)
        native.set_num_threads(None)
    assert len(set(results.values())) == 1, sorted(results)
    exact, mags = product(a, b, ta, tb)
    got = np.frombuffer(next(iter(results.values())), np.float32).reshape(m, n)
    assert_within_gamma(got, exact, mags, k)


def test_wrapper_refuses_what_c_would_misread():
    gemm, _ = _native()
    b = gemm.pack_b(np.ones((4, 5), F32))
    with pytest.raises(ValueError, match="packed B is 4x5"):
        gemm.c_gemm(np.ones((3, 6), F32), b)  # K mismatch
    with pytest.raises(ValueError, match="expected a matrix"):
        gemm.c_gemm(np.ones((3, 4, 1), F32), b)
    with pytest.raises(ValueError, match="output shape"):
        gemm.c_gemm(np.ones((3, 4), F32), b, out_shape=(3, 4))
    with pytest.raises(ValueError, match="output shape"):
        gemm.c_gemm(np.ones((3, 4), F32), b, out_shape=(5, 3))  # size ok, last axis not n
    short = gemm.PackedB(4, 5, b.data[:-1])  # a packing shorter than C reads
    with pytest.raises(ValueError, match="packed B"):
        gemm.c_gemm(np.ones((3, 4), F32), short)
    np.testing.assert_array_equal(gemm.c_gemm(np.ones((3, 4), F32), b, out_shape=(1, 3, 5)),
                                  np.full((1, 3, 5), 4, F32))


def test_c_entry_points_refuse_bad_sizes():
    from minigraph.backends.native import ffi, lib
    assert lib.mg_gemm_packed_floats(-1, 3) == -1
    assert lib.mg_gemm_packed_floats(3, -1) == -1
    assert lib.mg_gemm_packed_floats(2**40, 2**40) == -1
    assert lib.mg_gemm_packed_floats(3, 33) == 3 * 64
    null = ffi.NULL
    assert lib.mg_gemm(-1, 2, 2, 0, null, null, null, null, 1) == lib.MG_EINVAL
    assert lib.mg_gemm(2, 2, 2, 0, null, null, null, null, 1) == lib.MG_EINVAL
    assert lib.mg_gemm_pack_b(2, 2, 0, null, null, 1) == lib.MG_EINVAL
    assert lib.mg_gemm(0, 0, 0, 0, null, null, null, null, 1) == lib.MG_OK
    bad = ffi.new("mg_epilogue *")
    bad.activation = 7
    out = ffi.new("float[4]")
    assert lib.mg_gemm(2, 2, 0, 0, null, null, out, bad, 1) == lib.MG_EINVAL


def test_packing_cache_only_for_frozen_arrays():
    gemm, _ = _native()
    frozen = np.arange(12, dtype=F32).reshape(3, 4).copy()
    frozen.setflags(write=False)
    reshaped = np.arange(12, dtype=F32).reshape(3, 4)
    reshaped.setflags(write=False)  # its base (the arange) stays writable: not cached
    assert gemm.packed_b(reshaped) is not gemm.packed_b(reshaped)
    assert gemm.packed_b(frozen) is gemm.packed_b(frozen)
    assert gemm.packed_b(frozen, True) is not gemm.packed_b(frozen)  # another packing
    writable = np.ones((3, 4), F32)
    first = gemm.packed_b(writable)
    writable[0, 0] = 5  # a new value must be seen
    assert gemm.packed_b(writable) is not first
    view = writable[:]
    view.setflags(write=False)  # read-only, but its base is not: never cached
    a = np.ones((1, 3), F32)
    before = gemm.c_gemm(a, gemm.packed_b(view))
    writable[1, 1] = 9
    assert gemm.c_gemm(a, gemm.packed_b(view))[0, 1] == before[0, 1] + 8
    key = (id(frozen), "packed_b")
    assert key in gemm._CACHE
    del frozen
    gc.collect()
    assert key not in gemm._CACHE  # dropped with its array


def run_native_and_reference(build):
    out = {}
    for backend in ("native", "reference"):
        root = mg.Scope.NewRootScope()
        y = build(root)
        metadata = mg.RunMetadata()
        out[backend] = mg.ClientSession(root, backend=backend).Run({}, y,
                                                                   run_metadata=metadata)
        out[backend + "_kernel"] = metadata.kernel_of(y.op.name)
    return out


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("m,k,n", [(2, 300, 70), (45, 17, 129), (1, 1, 1), (3, 0, 4)])
def test_matmul_native_runs_the_gemm(m, k, n, ta, tb):
    a, b = random_pair(np.random.default_rng(m * k + n), m, k, n, ta, tb)
    b.setflags(write=False)  # a constant weight: its packing is cached
    out = run_native_and_reference(
        lambda root: ops.MatMul(root, a, b, transpose_a=ta, transpose_b=tb))
    assert out["native_kernel"] == "native:nn_kernels.matmul_native"
    exact, mags = product(a, b, ta, tb)
    assert_within_gamma(out["native"], exact, mags, k)
    np.testing.assert_allclose(out["native"], out["reference"], rtol=1e-4,
                               atol=1e-5 * max(1.0, float(mags.max(initial=0))))


# (batch, h, w, c, co, stride, padding): the GEMM route
CONV_CASES = [(2, 1, 1, 64, 70, 1, "SAME"), (1, 3, 3, 67, 64, 2, "VALID"),
              (2, 9, 7, 80, 65, 2, "SAME"), (8, 1, 1, 128, 1000, 1, "VALID"),
              (2, 7, 7, 64, 64, 1, "VALID")]


def conv_exact(x, f, stride):
    xs = x[:, ::stride, ::stride].astype(F64)
    f64 = f[0, 0].astype(F64)
    return xs @ f64, np.abs(xs) @ np.abs(f64)


@pytest.mark.parametrize("case", CONV_CASES, ids=str)
def test_1x1_conv_on_the_gemm_matches_reference(case, restore_native):
    from minigraph.backends import convolution_kernels as ck
    n, h, w, c, co, s, padding = case
    rng = np.random.default_rng(c + co)
    x = rng.standard_normal((n, h, w, c)).astype(F32)
    f = rng.standard_normal((1, 1, c, co)).astype(F32)
    window = ck.conv_geometry({"strides": [1, s, s, 1], "padding": padding,
                               "data_format": "NHWC", "dilations": [1, 1, 1, 1],
                               "explicit_paddings": []}, ValueError, x.shape, f.shape)
    assert ck.forward_route(x.shape, f.shape, window, 1) == "gemm"  # the route under test
    out = run_native_and_reference(
        lambda root: ops.Conv2D(root, x, f, strides=[1, s, s, 1], padding=padding))
    assert out["native_kernel"] == "native:convolution_kernels.conv2d_native"
    exact, mags = conv_exact(x, f, s)
    assert_within_gamma(out["native"], exact, mags, c)
    assert_within_gamma(out["reference"].astype(F32), exact, mags, c)  # a fair bound
    # the direct AVX-512 kernel sums each output in the same FMA chain (intrinsics): the
    # same bits (the AVX2 template's `acc += x * f` is fused only where the compiler
    # contracts it, at -O2 and up: not compared)
    _, native = _native()
    if native.set_isa("avx512") == "avx512":
        direct = ck.c_conv2d(x, f, window.pads, window.out, True, strides=window.strides)
        assert direct.tobytes() == ck.c_conv_gemm(x, f, window).tobytes()


def test_gemm_epilogue_is_the_unfused_pass():
    from minigraph.backends.activation_kernels import Epilogue, c_channel_epilogue
    gemm, _ = _native()
    rng = np.random.default_rng(7)
    a, b = random_pair(rng, 37, 90, 70, False, False)
    vec = [rng.standard_normal(70).astype(F32) for _ in range(4)]
    residual = rng.standard_normal((37, 70)).astype(F32)
    for activation in (0, 1, 2):
        epilogue = Epilogue(vec[0], vec[1], vec[2], vec[3], residual, activation)
        fused = gemm.c_gemm(a, gemm.pack_b(b), epilogue=epilogue)
        plain = gemm.c_gemm(a, gemm.pack_b(b))
        c_channel_epilogue(plain, epilogue)
        assert fused.tobytes() == plain.tobytes()


def test_imported_and_api_constants_are_frozen():
    """A graph's weights, decoded from a TensorProto or given to ops.Const as an array, are
    read-only down to their data: their packings are cached."""
    from minigraph.interop import protos
    from minigraph.interop.tensors import array_from_proto, array_to_proto
    gemm, _ = _native()
    weights = np.random.default_rng(3).standard_normal((6, 5)).astype(F32)
    proto = protos.message_class("tensorflow.TensorProto")()
    array_to_proto(weights, proto)
    decoded = array_from_proto(proto, "w")
    np.testing.assert_array_equal(decoded, weights)
    assert gemm._frozen(decoded)
    root = mg.Scope.NewRootScope()
    const = ops.Const(root, weights)
    assert gemm._frozen(const.op.attrs["value"])
    assert not gemm._frozen(weights)  # the caller's own array is left writable


@pytest.mark.parametrize("head", ["Conv2D", "MatMul"])
@pytest.mark.parametrize("activation", ["Relu", "Relu6"])
def test_fused_gemm_heads_are_bit_identical_to_the_unfused_ops(head, activation,
                                                               restore_native):
    """A GEMM-route head (a few-pixel 1x1 Conv2D, a MatMul) -> BiasAdd -> [FusedBatchNormV3
    (inference), after the Conv2D] -> AddV2 -> activation, fused into one step, gives the
    bits of the ops run one by one (every ISA)."""
    _, native = _native()
    rng = np.random.default_rng(11)
    c, co = 64, 72
    root = mg.Scope.NewRootScope()
    if head == "Conv2D":
        x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[2, 3, 3, c])
        h = ops.Conv2D(root.WithOpName("head"), x, rng.standard_normal((1, 1, c, co), F32),
                       [1, 1, 1, 1], "VALID")
        x_value = rng.standard_normal((2, 3, 3, c)).astype(F32)
    else:
        x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[5, c])
        h = ops.MatMul(root.WithOpName("head"), x, rng.standard_normal((co, c), F32),
                       transpose_b=True)
        x_value = rng.standard_normal((5, c)).astype(F32)
    b = ops.BiasAdd(root.WithOpName("bias"), h, rng.standard_normal(co).astype(F32))
    bn = b  # FusedBatchNormV3 takes rank 4 only: after the Conv2D
    if head == "Conv2D":
        stats = [rng.uniform(0.5, 1.5, co).astype(F32) for _ in range(4)]
        bn = ops.FusedBatchNormV3(root.WithOpName("bn"), b, *stats, epsilon=1e-3,
                                  is_training=False).y
    skip = ops.Placeholder(root.WithOpName("skip"), mg.float32, shape=h.shape)
    add = ops.AddV2(root.WithOpName("add"), bn, skip)
    act = getattr(ops, activation)(root.WithOpName("act"), add)
    feed = {x: x_value, skip: rng.standard_normal(h.shape.as_list()).astype(F32)}
    for isa in ("scalar", "avx2", "avx512"):
        if native.set_isa(isa) != isa:
            continue
        session = mg.ClientSession(root, backend="native")
        metadata = mg.RunMetadata()
        fused = session.Run(feed, act, run_metadata=metadata)
        one_by_one = session.Run(feed, [h, b, bn, add, act])[-1]  # nothing fuses
        assert metadata.kernel_of("act") == "native:fused_kernels.fused_native"
        assert fused.tobytes() == one_by_one.tobytes(), isa


@st.composite
def batch_matmul_cases(draw):
    """Broadcasting batch dims (either side may hold 1s or fewer dims), adjoints, ragged
    sizes, a shared 2-D y."""
    rank = draw(st.integers(0, 3))
    batch = [draw(st.integers(1, 3)) for _ in range(rank)]
    bx = [d if draw(st.booleans()) else 1 for d in batch]
    by = [d if draw(st.booleans()) else 1 for d in batch][draw(st.integers(0, rank)):]
    m, k, n = draw(st.integers(1, 40)), draw(st.integers(0, 300)), draw(st.integers(1, 70))
    return bx, by, m, k, n, draw(st.booleans()), draw(st.booleans()), draw(st.integers(0, 999))


@settings(max_examples=40, deadline=None)
@given(case=batch_matmul_cases(), version=st.sampled_from(["BatchMatMul", "BatchMatMulV2",
                                                           "BatchMatMulV3"]))
def test_batch_matmul_native_matches_float64_within_gamma_k(case, version):
    bx, by, m, k, n, adj_x, adj_y, seed = case
    if version == "BatchMatMul":  # no broadcasting: the same batch dims
        by = bx
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((*bx, k, m) if adj_x else (*bx, m, k)).astype(F32)
    y = rng.standard_normal((*by, n, k) if adj_y else (*by, k, n)).astype(F32)
    extra = {"Tout": mg.float32} if version == "BatchMatMulV3" else {}
    out = run_native_and_reference(
        lambda root: getattr(ops, version)(root, x, y, adj_x=adj_x, adj_y=adj_y, **extra))
    assert out["native_kernel"] == "native:linalg_kernels.batch_matmul_native"
    x64, y64 = x.astype(F64), y.astype(F64)
    if adj_x:
        x64 = np.swapaxes(x64, -1, -2)
    if adj_y:
        y64 = np.swapaxes(y64, -1, -2)
    assert_within_gamma(out["native"], x64 @ y64, np.abs(x64) @ np.abs(y64), k)


def test_batch_matmul_native_is_bit_identical_across_threads(restore_native):
    _, native = _native()
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 2, 50, 300)).astype(F32)
    y = rng.standard_normal((2, 70, 300)).astype(F32)
    results = set()
    for threads in (1, 2, 3):
        native.set_num_threads(threads)
        root = mg.Scope.NewRootScope()
        z = ops.BatchMatMulV2(root, x, y, adj_y=True)
        results.add(mg.ClientSession(root, backend="native").Run({}, z).tobytes())
    assert len(results) == 1


def test_grouped_packing_is_each_column_block_packed_alone():
    gemm, _ = _native()
    b = np.random.default_rng(2).standard_normal((7, 3 * 40)).astype(F32)
    grouped = gemm.pack_b(b, groups=3)
    blocks = [gemm.pack_b(np.ascontiguousarray(b[:, 40 * g:40 * (g + 1)])).data
              for g in range(3)]
    assert (grouped.k, grouped.n, grouped.groups) == (7, 40, 3)
    np.testing.assert_array_equal(grouped.data, np.concatenate(blocks))
    with pytest.raises(ValueError, match="groups"):
        gemm.c_gemm(np.ones((2, 7), F32), grouped)
    with pytest.raises(ValueError, match="in 7 groups"):
        gemm.pack_b(b, groups=7)
