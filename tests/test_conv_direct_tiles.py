"""The direct forward / input-gradient kernels (kernels_c/convolution.c) cut a work item's
pixels into rectangles whose windows cross the input's edges alike (one rectangle across
the item's images), run only the taps inside the input (the zero padding's skipped), cut
each rectangle into the fewest tiles the widest micro-kernel allows, of widths that differ
by at most one (AVX-512 tiles of every width), and pack the input gradient's flipped
filter by 16 x 16 transposes. Families: images of 3-20 pixels a side, 1x1 / 3x3 / 5x5
SAME and VALID windows (rectangles of every size, whole images or bands), 1-136 output
channels (1-3 channel blocks, a last vector of up to 8 lanes in a ymm register), 1-40
input channels, both layouts.

Accuracy: every output is one chain of at most K fused multiply-adds, taps in order (K =
kh * kw * c forward, kh * kw * co for the input gradient; a skipped padding tap would add
0 * w to a sum that starts at +0, which changes no bit), whatever tile holds the pixel:
``|result - exact| <= gamma_K * sum |terms|`` against the float64 correlation
(test_conv_gemm.exact_conv) on every instruction set this CPU runs, the same bits for 1, 2
and 3 threads (which change the items and so the rectangles) and, AVX-512, the bits of the
implicit GEMM route.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import NATIVE_AVAILABLE
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from test_conv_direct_narrow import each_isa
from test_conv_direct_small import (
    assert_gemm_route_bits,
    each_thread_count,
    exact_input_gradient,
    geometry,
    layout,
    nhwc,
)
from test_conv_gemm import assert_within_gamma, exact_conv

pytestmark = pytest.mark.skipif(not NATIVE_AVAILABLE, reason="native kernels are not built")
F32 = np.float32


@st.composite
def tile_run_cases(draw):
    k = draw(st.sampled_from([1, 3, 5]))
    return dict(n=draw(st.integers(1, 5)), h=draw(st.integers(3, 20)),
                w=draw(st.integers(3, 20)), c=draw(st.integers(1, 40)),
                co=draw(st.integers(1, 136)), k=(k, k),
                padding=draw(st.sampled_from(["SAME", "VALID"])),
                channels_last=draw(st.booleans()), seed=draw(st.integers(0, 2**16)))


@settings(max_examples=40, deadline=None)
@given(case=tile_run_cases())
def test_forward_tiles_of_any_width_within_gamma_and_bit_identical(case):
    from minigraph.backends import convolution_kernels as ck
    from minigraph.backends import native
    pads, out = geometry(case, (1, 1))
    assume(min(out) > 0)
    rng = np.random.default_rng(case["seed"])
    x = rng.standard_normal((case["n"], case["h"], case["w"], case["c"])).astype(F32)
    f = rng.standard_normal((*case["k"], case["c"], case["co"])).astype(F32)
    last = case["channels_last"]
    exact, mags = exact_conv(x, f, (1, 1), (1, 1), pads, 1)

    def check(isa):
        y = each_thread_count(native, lambda: ck.c_conv2d(layout(x, last), f, pads, out, last))
        assert_within_gamma(nhwc(y, last), exact, mags,
                            case["k"][0] * case["k"][1] * case["c"])
    each_isa(check)
    assert_gemm_route_bits(x, f, pads, out, case["k"])


@settings(max_examples=40, deadline=None)
@given(case=tile_run_cases())
def test_input_gradient_tiles_of_any_width_within_gamma_and_bit_identical(case):
    """dx is the correlation of dy, padded by (k - 1 - top, ...), with the flipped filter,
    its channels swapped (packed by transposes)."""
    from minigraph.backends import convolution_kernels as ck
    from minigraph.backends import native
    pads, out = geometry(case, (1, 1))
    assume(min(out) > 0)
    rng = np.random.default_rng(case["seed"])
    dy = rng.standard_normal((case["n"], *out, case["co"])).astype(F32)
    f = rng.standard_normal((*case["k"], case["c"], case["co"])).astype(F32)
    last = case["channels_last"]
    hw = (case["h"], case["w"])
    exact, mags = exact_input_gradient(dy, f, pads, hw, out)

    def check(isa):
        dx = each_thread_count(native, lambda: ck.c_conv2d_backprop_input(
            layout(dy, last), f, hw, pads, last))
        assert_within_gamma(nhwc(dx, last), exact, mags,
                            case["k"][0] * case["k"][1] * case["co"])
    each_isa(check)
