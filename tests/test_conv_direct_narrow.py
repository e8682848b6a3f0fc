"""The direct convolution kernels (kernels_c/convolution.c) at few channels over larger
images: the shapes whose filter gradient has few tiles (1-8 input channels, few output
channels), summed in several fixed groups of output rows and added in order, with tiles of
any height up to the registers; and forward / input-gradient tiles over larger images,
whose border pixels' tiles skip the taps that read the padding.

Accuracy: the filter gradient sums each element as groups of consecutive pixels (each a
chain of fused multiply-adds) then adds the groups in order: at most n * out_h * out_w
roundings in a row, so ``|df - exact| <= gamma_N * sum |terms|`` with N the pixel count;
the forward and input gradient are one chain of K = kh * kw * c (kh * kw * co) terms per
output. The groups depend on the shape only: 1, 2 and 3 threads give the same bits, on
every instruction set this CPU runs.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import NATIVE_AVAILABLE
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from test_conv_direct_small import each_thread_count, geometry, layout, nhwc
from test_conv_gemm import assert_within_gamma, exact_conv

pytestmark = pytest.mark.skipif(not NATIVE_AVAILABLE, reason="native kernels are not built")
F32, F64 = np.float32, np.float64


def cpu_isas():
    from minigraph.backends import native
    return [isa for isa in native.ISAS
            if native.ISAS.index(isa) <= native.ISAS.index(native.best_isa())]


def each_isa(call):
    """call(isa) for every ISA this CPU runs (the ISA restored after)."""
    from minigraph.backends import native
    before = native.isa()
    try:
        for isa in cpu_isas():
            assert native.set_isa(isa) == isa
            call(isa)
    finally:
        native.set_isa(before)


@st.composite
def narrow_filter_cases(draw):
    """Few input channels (the stem's 3 among them), few output channels, images of up to
    40 x 40: few tiles over many pixels."""
    return dict(n=draw(st.integers(1, 6)), h=draw(st.integers(4, 40)),
                w=draw(st.integers(4, 40)), c=draw(st.integers(1, 8)),
                co=draw(st.integers(1, 40)),
                k=(draw(st.integers(1, 3)), draw(st.integers(1, 3))),
                padding=draw(st.sampled_from(["SAME", "VALID"])),
                channels_last=draw(st.booleans()), seed=draw(st.integers(0, 2**16)))


def exact_filter_gradient(x, dy, k, pads):
    """(float64 df, the same of |x| |dy|): df[i, j, ci, o] = sum over n, p, q of
    x[n, p + i - top, q + j - left, ci] dy[n, p, q, o] (zero outside x)."""
    (top, bottom), (left, right) = pads
    xp = np.pad(x.astype(F64), ((0, 0), (top, bottom), (left, right), (0, 0)))
    oh, ow = dy.shape[1:3]
    df = np.zeros((2, *k, x.shape[-1], dy.shape[-1]))
    for i in range(k[0]):
        for j in range(k[1]):
            patch = xp[:, i:i + oh, j:j + ow]
            df[0, i, j] = np.einsum("npqc,npqo->co", patch, dy.astype(F64))
            df[1, i, j] = np.einsum("npqc,npqo->co", np.abs(patch), np.abs(dy.astype(F64)))
    return df[0], df[1]


@settings(max_examples=25, deadline=None)
@given(case=narrow_filter_cases())
def test_narrow_filter_gradient_within_gamma_and_bit_identical_for_any_thread_count(case):
    from minigraph.backends import convolution_kernels as ck
    from minigraph.backends import native
    pads, out = geometry(case, (1, 1))
    assume(min(out) > 0)
    rng = np.random.default_rng(case["seed"])
    x = rng.standard_normal((case["n"], case["h"], case["w"], case["c"])).astype(F32)
    dy = rng.standard_normal((case["n"], *out, case["co"])).astype(F32)
    last = case["channels_last"]
    exact, mags = exact_filter_gradient(x, dy, case["k"], pads)

    def check(isa):
        df = each_thread_count(native, lambda: ck.c_conv2d_backprop_filter(
            layout(x, last), layout(dy, last), case["k"], pads, last))
        assert_within_gamma(df, exact, mags, case["n"] * out[0] * out[1])

    each_isa(check)


@st.composite
def larger_image_cases(draw):
    """4-64 channels over 16-34 pixel sides (whole images or bands per work item, interior
    pixels read in place), strides 1-2."""
    k = draw(st.integers(1, 3))
    return dict(n=draw(st.integers(1, 3)), h=draw(st.integers(16, 34)),
                w=draw(st.integers(16, 34)), c=draw(st.integers(4, 64)),
                co=draw(st.integers(4, 64)), k=(k, draw(st.integers(1, 3))),
                strides=(draw(st.integers(1, 2)), draw(st.integers(1, 2))),
                padding=draw(st.sampled_from(["SAME", "VALID"])),
                seed=draw(st.integers(0, 2**16)))


@settings(max_examples=20, deadline=None)
@given(case=larger_image_cases())
def test_forward_on_larger_images_within_gamma_bit_identical_and_the_gemm_route(case):
    """NHWC, tiles reading the input itself (the border's skipping the padding's taps):
    every thread count gives the same bits, and (AVX-512) the implicit GEMM's."""
    from minigraph.backends import convolution_kernels as ck
    from minigraph.backends import native
    from minigraph.ops.window import Window
    pads, out = geometry(case, case["strides"])
    assume(min(out) > 0)
    rng = np.random.default_rng(case["seed"])
    x = rng.standard_normal((case["n"], case["h"], case["w"], case["c"])).astype(F32)
    f = rng.standard_normal((*case["k"], case["c"], case["co"])).astype(F32)
    y = each_thread_count(native, lambda: ck.c_conv2d(x, f, pads, out, True,
                                                      strides=case["strides"]))
    exact, mags = exact_conv(x, f, case["strides"], (1, 1), pads, 1)
    assert_within_gamma(y, exact, mags, case["k"][0] * case["k"][1] * case["c"])
    if "avx512" in cpu_isas():
        before = native.isa()
        try:
            native.set_isa("avx512")
            window = Window(case["k"], case["strides"], (1, 1), pads, out)
            assert (ck.c_conv2d(x, f, pads, out, True, strides=case["strides"]).tobytes()
                    == ck.c_conv_gemm(x, f, window).tobytes())
        finally:
            native.set_isa(before)


@settings(max_examples=20, deadline=None)
@given(case=larger_image_cases(), channels_last=st.booleans())
def test_input_gradient_on_larger_images_within_gamma_and_bit_identical(case, channels_last):
    from minigraph.backends import convolution_kernels as ck
    from minigraph.backends import native
    pads, out = geometry(case, (1, 1))
    assume(min(out) > 0)
    rng = np.random.default_rng(case["seed"])
    dy = rng.standard_normal((case["n"], *out, case["co"])).astype(F32)
    f = rng.standard_normal((*case["k"], case["c"], case["co"])).astype(F32)
    hw = (case["h"], case["w"])
    dx = each_thread_count(native, lambda: ck.c_conv2d_backprop_input(
        layout(dy, channels_last), f, hw, pads, channels_last))
    flipped = np.ascontiguousarray(f[::-1, ::-1].transpose(0, 1, 3, 2))
    before = [k - 1 - top for k, (top, _) in zip(case["k"], pads)]
    dpads = tuple((b, size + k - 1 - o - b) for b, size, k, o in zip(before, hw, case["k"], out))
    exact, mags = exact_conv(dy, flipped, (1, 1), (1, 1), dpads, 1)
    assert_within_gamma(nhwc(dx, channels_last), exact, mags,
                        case["k"][0] * case["k"][1] * case["co"])
