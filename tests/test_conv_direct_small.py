"""The direct convolution kernels (kernels_c/convolution.c: Conv2D and the stride-1
Conv2DBackpropInput, whose work items hold several whole small images and whose tiles take
pixels across rows and images; Conv2DBackpropFilter, whose chunks hold several small
images) on batches of small images: shape families of 1-9 pixel sides, 4-40 images, 1-70
channels, both layouts, the forward's strides 1-2, SAME / VALID.

Accuracy: every output is one chain of K fused multiply-adds (taps row-major, then
channels; K = kh * kw * c forward, kh * kw * co for the input gradient), so
``|result - exact| <= gamma_K * sum |terms|`` against the float64 correlation
(test_conv_gemm.exact_conv, independent of the kernels; the filter gradient's K is the
n * out_h * out_w pixels). Determinism: the chain depends on
the shape only, so the bits do not change with the thread count (which changes how many
images an item holds), nor (AVX-512) between the direct and the implicit GEMM routes, and
the fused epilogue gives the bits of the separate pass.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import NATIVE_AVAILABLE
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from test_conv_gemm import assert_within_gamma, exact_conv

pytestmark = pytest.mark.skipif(not NATIVE_AVAILABLE, reason="native kernels are not built")
F32 = np.float32
THREADS = (1, 2, 3)


@st.composite
def small_image_cases(draw):
    k = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    return dict(n=draw(st.integers(4, 40)), h=draw(st.integers(1, 9)),
                w=draw(st.integers(1, 9)), c=draw(st.integers(1, 24)),
                co=draw(st.integers(1, 70)), k=k,
                strides=(draw(st.integers(1, 2)), draw(st.integers(1, 2))),
                padding=draw(st.sampled_from(["SAME", "VALID"])),
                channels_last=draw(st.booleans()), seed=draw(st.integers(0, 2**16)))


def geometry(case, strides):
    """(pads ((top, bottom), (left, right)), output (height, width)) as TF computes them."""
    pads, out = [], []
    for size, k, s in zip((case["h"], case["w"]), case["k"], strides):
        o = -(-size // s) if case["padding"] == "SAME" else (size - k) // s + 1
        total = max((o - 1) * s + k - size, 0) if case["padding"] == "SAME" else 0
        pads.append((total // 2, total - total // 2))
        out.append(o)
    return tuple(pads), tuple(out)


def layout(a, channels_last):
    return a if channels_last else np.ascontiguousarray(a.transpose(0, 3, 1, 2))


def nhwc(a, channels_last):
    return a if channels_last else a.transpose(0, 2, 3, 1)


def each_thread_count(native, call):
    """call()'s result for every thread count of THREADS, checked bit-identical."""
    results = []
    try:
        for threads in THREADS:
            native.set_num_threads(threads)
            results.append(call())
    finally:
        native.set_num_threads(None)
    assert all(r.tobytes() == results[0].tobytes() for r in results[1:])
    return results[0]


def exact_input_gradient(dy, f, pads, hw, out):
    """The float64 input gradient of a stride-1 correlation (and each output's sum of
    |terms|): the correlation of dy, padded by (k - 1 - top, ...) to the input's size
    ``hw``, with the filter flipped in H and W and its channels swapped."""
    k = f.shape[:2]
    flipped = np.ascontiguousarray(f[::-1, ::-1].transpose(0, 1, 3, 2))
    before = [kk - 1 - top for kk, (top, _) in zip(k, pads)]
    dpads = tuple((b, size + kk - 1 - o - b) for b, size, kk, o in zip(before, hw, k, out))
    return exact_conv(dy, flipped, (1, 1), (1, 1), dpads, 1)


def assert_gemm_route_bits(x, f, pads, out, k, strides=(1, 1)):
    """On AVX-512 (where this CPU runs it), the direct kernel's NHWC forward gives the
    implicit GEMM route's bits (the same chains, taps in the same order)."""
    from minigraph.backends import convolution_kernels as ck
    from minigraph.backends import native
    from minigraph.ops.window import Window
    isa = native.isa()
    try:
        if native.set_isa("avx512") != "avx512":
            return
        window = Window(k, strides, (1, 1), pads, out)
        assert (ck.c_conv2d(x, f, pads, out, True, strides=strides).tobytes()
                == ck.c_conv_gemm(x, f, window).tobytes())
    finally:
        native.set_isa(isa)


@settings(max_examples=30, deadline=None)
@given(case=small_image_cases())
def test_forward_within_gamma_and_bit_identical_for_any_thread_count(case):
    from minigraph.backends import convolution_kernels as ck
    from minigraph.backends import native
    pads, out = geometry(case, case["strides"])
    assume(min(out) > 0)
    rng = np.random.default_rng(case["seed"])
    x = rng.standard_normal((case["n"], case["h"], case["w"], case["c"])).astype(F32)
    f = rng.standard_normal((*case["k"], case["c"], case["co"])).astype(F32)
    last = case["channels_last"]
    y = each_thread_count(native, lambda: ck.c_conv2d(layout(x, last), f, pads, out, last,
                                                      strides=case["strides"]))
    exact, mags = exact_conv(x, f, case["strides"], (1, 1), pads, 1)
    assert_within_gamma(nhwc(y, last), exact, mags, case["k"][0] * case["k"][1] * case["c"])


@settings(max_examples=30, deadline=None)
@given(case=small_image_cases())
def test_input_gradient_within_gamma_and_bit_identical_for_any_thread_count(case):
    """dx[n, r, s, ci] = sum dy[n, p, q, o] f[r - p + top, s - q + left, ci, o]: the
    correlation of dy, padded by (k - 1 - top, ...), with the flipped, swapped filter."""
    from minigraph.backends import convolution_kernels as ck
    from minigraph.backends import native
    pads, out = geometry(case, (1, 1))
    assume(min(out) > 0)
    rng = np.random.default_rng(case["seed"])
    dy = rng.standard_normal((case["n"], *out, case["co"])).astype(F32)
    f = rng.standard_normal((*case["k"], case["c"], case["co"])).astype(F32)
    last = case["channels_last"]
    hw = (case["h"], case["w"])
    dx = each_thread_count(native, lambda: ck.c_conv2d_backprop_input(layout(dy, last), f, hw,
                                                                      pads, last))
    exact, mags = exact_input_gradient(dy, f, pads, hw, out)
    assert_within_gamma(nhwc(dx, last), exact, mags, case["k"][0] * case["k"][1] * case["co"])


@settings(max_examples=20, deadline=None)
@given(case=small_image_cases(), activation=st.sampled_from([0, 1, 2]))
def test_forward_is_the_gemm_route_bit_for_bit_and_fuses_its_epilogue(case, activation):
    """AVX-512: the implicit GEMM sums each output in the same chain; the epilogue (bias,
    batch norm, residual, activation) in the tiles is the separate pass, bit for bit."""
    from minigraph.backends import convolution_kernels as ck
    from minigraph.backends.activation_kernels import Epilogue, c_channel_epilogue
    pads, out = geometry(case, case["strides"])
    assume(min(out) > 0)
    rng = np.random.default_rng(case["seed"])
    x = rng.standard_normal((case["n"], case["h"], case["w"], case["c"])).astype(F32)
    f = rng.standard_normal((*case["k"], case["c"], case["co"])).astype(F32)
    y = ck.c_conv2d(x, f, pads, out, True, strides=case["strides"])
    vectors = [rng.standard_normal(case["co"]).astype(F32) for _ in range(4)]
    residual = rng.standard_normal(y.shape).astype(F32)
    epilogue = Epilogue(vectors[0], vectors[1], np.abs(vectors[2]), vectors[3], residual,
                        activation)
    fused = ck.c_conv2d(x, f, pads, out, True, epilogue, case["strides"])
    c_channel_epilogue(y, epilogue)
    assert fused.tobytes() == y.tobytes()
    assert_gemm_route_bits(x, f, pads, out, case["k"], case["strides"])


@settings(max_examples=30, deadline=None)
@given(case=small_image_cases())
def test_filter_gradient_within_gamma_and_bit_identical_for_any_thread_count(case):
    """df[i, j, ci, o] = sum over images and output pixels of x[n, p + i - top, q + j - left,
    ci] * dy[n, p, q, o]: per element, chains over consecutive pixels, image by image (one,
    or shape-fixed groups of output rows added in order; chunks of several small images
    carry a chain through df), at most n * out_h * out_w roundings in a row, whatever the
    thread count."""
    from minigraph.backends import convolution_kernels as ck
    from minigraph.backends import native
    pads, out = geometry(case, (1, 1))
    assume(min(out) > 0)
    rng = np.random.default_rng(case["seed"])
    x = rng.standard_normal((case["n"], case["h"], case["w"], case["c"])).astype(F32)
    dy = rng.standard_normal((case["n"], *out, case["co"])).astype(F32)
    last = case["channels_last"]
    df = each_thread_count(native, lambda: ck.c_conv2d_backprop_filter(
        layout(x, last), layout(dy, last), case["k"], pads, last))
    # the correlation of x (as [c images of one channel]) with dy (as a [out, n, co] filter)
    xt = x.transpose(3, 1, 2, 0)  # [c, h, w, n]
    (top, bottom), (left, right) = pads
    back = ((top, bottom + out[0] - 1 - (case["h"] + top + bottom - case["k"][0])),
            (left, right + out[1] - 1 - (case["w"] + left + right - case["k"][1])))
    exact, mags = exact_conv(xt, dy.transpose(1, 2, 0, 3), (1, 1), (1, 1), back, 1)
    exact, mags = (a.transpose(1, 2, 0, 3) for a in (exact, mags))
    assert_within_gamma(df, exact[:case["k"][0], :case["k"][1]],
                        mags[:case["k"][0], :case["k"][1]], case["n"] * out[0] * out[1])
