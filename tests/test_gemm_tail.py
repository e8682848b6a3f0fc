"""The GEMM micro-kernels' fused epilogue (kernels_c/gemm_internal.h ``gemm_tail``: applied to a
tile's sums before it is stored, in registers on AVX-512, on the stored tile elsewhere) over
shape families of the native MatMul core (``mg_gemm``: M, N, K, transposed A) and the implicit
GEMM convolution (``mg_conv_gemm_forward``: batch, channels, kernel 1x1 / 3x3, strides,
groups).

Each stage of the fused epilogue must round as the separate pass ``mg_channel_epilogue``
does (+ bias, ``(y - mean) * k + offset``, + residual, Relu / Relu6 keeping NaN and giving
+0 for -0), so the fused result is compared bit for bit with the unfused one on every ISA
this CPU has, with NaN, signed zeros and values around 0 and 6 in the data. The product
itself is checked against float64 numpy within ``gamma_K * sum |a b|`` (``gamma_K = K u /
(1 - K u)``, u = 2**-24: one chain of K fused multiply-adds per element, kernels_c/gemm.h),
and results are bit-identical for 1, 2 and 3 threads.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import NATIVE_AVAILABLE
from hypothesis import given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.skipif(not NATIVE_AVAILABLE, reason="native kernels are not built")

F32, F64 = np.float32, np.float64
U = 2.0 ** -24
SPECIAL = np.array([np.nan, -0.0, 0.0, 6.0, -6.0, 5.999999, 6.000001, 1e-30, -1e-30], F32)


def _modules():
    from minigraph.backends import activation_kernels, convolution_kernels, gemm, native
    return activation_kernels, convolution_kernels, gemm, native


def _isas(native) -> list[str]:
    """The instruction sets this CPU runs (the kernels' tables differ per ISA)."""
    best = native.best_isa()
    order = ["scalar", "avx2", "avx512"]
    return order[:order.index(best) + 1]


def _epilogue(rng, channels: int, out_shape: tuple, stages: int, activation: int):
    """An Epilogue with the stages of the bit mask ``stages`` (bias, affine, residual) and
    special values planted in its vectors and residual."""
    activation_kernels, *_ = _modules()

    def planted(shape):
        v = rng.standard_normal(shape).astype(F32)
        flat = v.reshape(-1)
        where = rng.integers(0, flat.size, size=min(flat.size, 4))
        flat[where] = rng.choice(SPECIAL, size=where.size)
        return v

    bias = planted(channels) if stages & 1 else None
    mean, k, offset = ((planted(channels), np.abs(planted(channels)), planted(channels))
                       if stages & 2 else (None, None, None))
    residual = planted(out_shape) if stages & 4 else None
    return activation_kernels.Epilogue(bias, mean, k, offset, residual, activation)


def _with(native, isa: str, threads: int, function, *args):
    """function(*args) on instruction set ``isa`` with ``threads`` threads."""
    old_isa = native.isa()
    try:
        native.set_isa(isa)
        native.set_num_threads(threads)
        return function(*args)
    finally:
        native.set_isa(old_isa)
        native.set_num_threads(None)


@settings(max_examples=25, deadline=None)
@given(m=st.integers(1, 150), n=st.integers(1, 80), k=st.integers(1, 300),
       trans_a=st.booleans(), stages=st.integers(0, 7), activation=st.integers(0, 2),
       seed=st.integers(0, 2**16))
def test_gemm_fused_epilogue_is_the_unfused_pass_on_every_isa(m, n, k, trans_a, stages,
                                                               activation, seed):
    activation_kernels, _, gemm, native = _modules()
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(F32)
    a.reshape(-1)[rng.integers(0, a.size)] = 0.0
    b = rng.standard_normal((k, n)).astype(F32)
    packing = gemm.pack_b(b)
    epilogue = _epilogue(rng, n, (m, n), stages, activation)
    product = None
    for isa in _isas(native):
        plain = _with(native, isa, 2, gemm.c_gemm, a, packing, trans_a)
        if product is None:
            product = plain.copy()
        assert plain.tobytes() == product.tobytes(), f"{isa}: another product"
        _with(native, isa, 2, activation_kernels.c_channel_epilogue, plain, epilogue)
        for threads in (1, 2, 3):
            fused = _with(native, isa, threads, gemm.c_gemm, a, packing, trans_a, epilogue)
            assert fused.tobytes() == plain.tobytes(), f"{isa}, {threads} threads"
    a64 = (a.T if trans_a else a).astype(F64)
    exact, mags = a64 @ b.astype(F64), np.abs(a64) @ np.abs(b.astype(F64))
    gamma = k * U / (1 - k * U)
    assert (np.abs(product - exact) <= (gamma + 1e-12) * mags).all()


@st.composite
def conv_cases(draw):
    groups = draw(st.sampled_from([1, 1, 1, 2, 4]))
    cg = draw(st.integers(1, 48))
    cog = draw(st.sampled_from([1, 5, 8, 16, 17, 32, 40, 64, 70]))
    kernel = draw(st.sampled_from([1, 1, 3]))
    stride = draw(st.sampled_from([1, 2]))
    size = draw(st.integers(kernel, 10))
    return dict(n=draw(st.integers(1, 4)), h=size, w=draw(st.integers(kernel, 10)),
                groups=groups, cg=cg, cog=cog, k=kernel, stride=stride,
                pad=(kernel - 1) // 2 if draw(st.booleans()) else 0,
                stages=draw(st.integers(0, 7)), activation=draw(st.integers(0, 2)),
                seed=draw(st.integers(0, 2**16)))


@settings(max_examples=25, deadline=None)
@given(case=conv_cases())
def test_conv_gemm_fused_epilogue_over_shape_families(case):
    """Batch, channels (narrow panels of <= 16 outputs per group, several panels), 1x1 and
    3x3, strides 1 and 2, groups: fused == unfused on every ISA and thread count, the
    product within the gamma bound of float64."""
    from minigraph.ops.window import Window

    activation_kernels, ck, _, native = _modules()
    rng = np.random.default_rng(case["seed"])
    n, h, w, groups, k, s, pad = (case[key] for key in
                                  ("n", "h", "w", "groups", "k", "stride", "pad"))
    c, co = groups * case["cg"], groups * case["cog"]
    x = rng.standard_normal((n, h, w, c)).astype(F32)
    f = rng.standard_normal((k, k, case["cg"], co)).astype(F32)
    oh, ow = (h + 2 * pad - k) // s + 1, (w + 2 * pad - k) // s + 1
    window = Window(ksize=(k, k), strides=(s, s), dilations=(1, 1),
                    pads=((pad, pad), (pad, pad)), out=(oh, ow))
    epilogue = _epilogue(rng, co, (n, oh, ow, co), case["stages"], case["activation"])
    product = None
    for isa in _isas(native):
        plain = _with(native, isa, 2, ck.c_conv_gemm, x, f, window, groups)
        if product is None:
            product = plain.copy()
        assert plain.tobytes() == product.tobytes(), f"{isa}: another product"
        _with(native, isa, 2, activation_kernels.c_channel_epilogue, plain, epilogue)
        for threads in (1, 2, 3):
            fused = _with(native, isa, threads, ck.c_conv_gemm, x, f, window, groups, epilogue)
            assert fused.tobytes() == plain.tobytes(), f"{isa}, {threads} threads"
    # the float64 correlation, group by group
    xp = np.pad(x.astype(F64), ((0, 0), (pad, pad + s), (pad, pad + s), (0, 0)))
    exact, mags = np.zeros((n, oh, ow, co)), np.zeros((n, oh, ow, co))
    cg, cog = case["cg"], case["cog"]
    for i in range(k):
        for j in range(k):
            patch = xp[:, i:i + s * oh:s, j:j + s * ow:s]
            for g in range(groups):
                xs, fs = patch[..., g * cg:(g + 1) * cg], f[i, j, :, g * cog:(g + 1) * cog]
                exact[..., g * cog:(g + 1) * cog] += xs @ fs.astype(F64)
                mags[..., g * cog:(g + 1) * cog] += np.abs(xs) @ np.abs(fs.astype(F64))
    terms = k * k * cg
    gamma = terms * U / (1 - terms * U)
    assert (np.abs(product - exact) <= (gamma + 1e-12) * mags).all()


# Rows of A a multiple of 4 KiB apart (K or stride_w * channels a multiple of 1024 floats)
# are copied per K block before the micro-kernels read them (gemm_rows_crowd_l1): the copy
# changes no chain, so those products equal, bit for bit, the same products on a route that
# reads A in place (a transposed A; the 1x1 convolution's strided pixels gathered into a
# matrix whose rows are 2 KiB apart), and stay within the gamma bound of float64. A single
# panel (n <= 32: a dense layer's few outputs) is copied too, and its M is cut into more
# blocks when the threads would otherwise lack items: neither changes a chain.


@settings(max_examples=8, deadline=None)
@given(m=st.one_of(st.integers(1, 130), st.integers(481, 700)),
       n=st.one_of(st.integers(1, 32), st.integers(65, 128)), k=st.sampled_from([1024, 2048]),
       stages=st.integers(0, 7), threads=st.integers(1, 3), seed=st.integers(0, 2**16))
def test_gemm_rows_4kib_apart_copied_give_the_bits_read_in_place(m, n, k, stages, threads,
                                                                seed):
    activation_kernels, _, gemm, native = _modules()
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(F32)
    b = rng.standard_normal((k, n)).astype(F32)
    packing = gemm.pack_b(b)
    epilogue = _epilogue(rng, n, (m, n), stages, 1)
    copied = _with(native, native.isa(), threads, gemm.c_gemm, a, packing, False, epilogue)
    in_place = _with(native, native.isa(), 2, gemm.c_gemm, np.ascontiguousarray(a.T), packing,
                     True, epilogue)
    assert copied.tobytes() == in_place.tobytes()
    a64, b64 = a.astype(F64), b.astype(F64)
    plain = gemm.c_gemm(a, packing)
    gamma = k * U / (1 - k * U)
    assert (np.abs(plain - a64 @ b64) <= (gamma + 1e-12) * (np.abs(a64) @ np.abs(b64))).all()


@settings(max_examples=3, deadline=None)
@given(n=st.integers(2, 3), size=st.integers(7, 9), c=st.sampled_from([512, 1024]),
       co=st.sampled_from([96, 128]), seed=st.integers(0, 2**16))
def test_strided_1x1_conv_with_rows_4kib_apart_is_the_gemm_of_its_pixels(n, size, c, co, seed):
    """stride 2 x c channels: neighbouring pixels 2 * c floats apart (4 or 8 KiB, copied);
    the same pixels gathered into a matrix (rows c floats apart: 2 KiB for c = 512, read in
    place; 4 KiB for 1024, copied again by the GEMM) give the same bits, and 3x3 SAME
    convolutions with those rows stay within the bound."""
    from minigraph.ops.window import Window

    _, ck, gemm, native = _modules()
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 2 * size, 2 * size, c)).astype(F32)
    f = rng.standard_normal((1, 1, c, co)).astype(F32)
    window = Window(ksize=(1, 1), strides=(2, 2), dilations=(1, 1), pads=((0, 0), (0, 0)),
                    out=(size, size))
    conv = _with(native, native.isa(), 1, ck.c_conv_gemm, x, f, window)
    pixels = np.ascontiguousarray(x[:, ::2, ::2, :]).reshape(-1, c)
    product = gemm.c_gemm(np.ascontiguousarray(pixels.T), gemm.pack_b(f[0, 0]), True)
    assert conv.reshape(-1, co).tobytes() == product.tobytes()
    # a 3x3 SAME convolution at stride (1, 2): tap rows copied, padding rows gathered
    f3 = rng.standard_normal((3, 3, c, co)).astype(F32)
    out_w = size
    window3 = Window(ksize=(3, 3), strides=(1, 2), dilations=(1, 1), pads=((1, 1), (0, 1)),
                     out=(2 * size, out_w))
    y = _with(native, native.isa(), 1, ck.c_conv_gemm, x, f3, window3)
    assert y.tobytes() == _with(native, native.isa(), 3, ck.c_conv_gemm, x, f3,
                                window3).tobytes()
    xp = np.pad(x.astype(F64), ((0, 0), (1, 1), (0, 2), (0, 0)))
    exact, mags = np.zeros(y.shape), np.zeros(y.shape)
    for i in range(3):
        for j in range(3):
            patch = xp[:, i:i + 2 * size, j:j + 2 * out_w:2]
            exact += patch @ f3[i, j].astype(F64)
            mags += np.abs(patch) @ np.abs(f3[i, j].astype(F64))
    terms = 9 * c
    assert (np.abs(y - exact) <= (terms * U / (1 - terms * U) + 1e-12) * mags).all()
