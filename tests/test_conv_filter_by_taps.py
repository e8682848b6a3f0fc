"""The stride-1 direct filter gradient (kernels_c/convolution.c, mg_conv2d_backprop_filter)
where its tiles are cut by taps: 8 or more input channels (and, for the AVX2 and baseline
kernels, channel counts their one tile height divides). A tile of one tap reads x itself at
only the output pixels where that tap lies inside the input, so no term meets the padding.

Families: 1-6 images of 1-14 pixel sides, 5-140 input channels (both sides of the cut's
threshold, tiles of two heights), 1-140 output channels (partial vectors of at most 8
lanes, a last block of 1-4 vectors), kernels 1-5 (even ones: SAME pads one more after),
SAME / VALID, NHWC / NCHW.

- Accuracy and determinism: per element one chain over the pixels in order (shape-fixed
  groups of output rows added in order), so on every ISA the bits do not depend on the
  thread count (1, 2, 3) nor the layout (NCHW is transposed to NHWC first), and
  ``|df - exact| <= gamma_K * sum |x * dy|`` (K = n * out_h * out_w) against a float64
  formula over an explicitly zero-padded x.
- Non-finite out_backprop: by taps, an infinity in dy multiplies no padding, so NaN, +inf
  and -inf fall exactly where the tap-wise float64 reference (TensorFlow's rule, see
  tests/test_conv_non_finite.py) has them, before the Python wrapper's NaN check.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from conftest import NATIVE_AVAILABLE
from hypothesis import given, settings
from hypothesis import strategies as st
from test_conv_gemm import assert_within_gamma
from test_conv_non_finite import same_specials_and_close

pytestmark = pytest.mark.skipif(not NATIVE_AVAILABLE, reason="native kernels are not built")
F32, F64 = np.float32, np.float64


@st.composite
def tap_cases(draw, min_channels=5):
    k = (draw(st.integers(1, 5)), draw(st.integers(1, 5)))
    return dict(n=draw(st.integers(1, 6)), h=draw(st.integers(1, 14)),
                w=draw(st.integers(1, 14)), c=draw(st.integers(min_channels, 140)),
                co=draw(st.integers(1, 140)), k=k,
                padding=draw(st.sampled_from(["SAME", "VALID"])),
                seed=draw(st.integers(0, 2**16)))


def same_or_valid(case):
    """(pads ((top, bottom), (left, right)), output (height, width)) at stride 1, as TF."""
    pads, out = [], []
    for size, k in zip((case["h"], case["w"]), case["k"]):
        total = k - 1 if case["padding"] == "SAME" else 0
        pads.append((total // 2, total - total // 2))
        out.append(size + total - k + 1)
    return tuple(pads), tuple(out)


def exact_filter_grad(x, dy, k, pads):
    """float64 df[i, j] = sum_{n,p,q} xpad[n, p + i, q + j]^T dy[n, p, q] over the
    explicitly zero-padded x, and the same sum of |terms| (the bound's magnitudes)."""
    (top, bottom), (left, right) = pads
    xp = np.pad(x.astype(F64), ((0, 0), (top, bottom), (left, right), (0, 0)))
    d = dy.astype(F64)
    oh, ow = dy.shape[1:3]
    exact = np.empty((*k, x.shape[-1], dy.shape[-1]))
    mags = np.empty_like(exact)
    for i, j in itertools.product(range(k[0]), range(k[1])):
        window = xp[:, i:i + oh, j:j + ow]
        exact[i, j] = np.einsum("npqc,npqo->co", window, d)
        mags[i, j] = np.einsum("npqc,npqo->co", np.abs(window), np.abs(d))
    return exact, mags


def native_filter_grads(x, dy, k, pads, isa, threads=(1, 2, 3)):
    """df from NHWC and NCHW operands at each thread count on ``isa``: checked
    bit-identical, returned once."""
    from minigraph.backends import convolution_kernels as ck
    from minigraph.backends import native
    before = native.isa()
    results = set()
    try:
        native.set_isa(isa)
        for t, last in itertools.product(threads, (True, False)):
            native.set_num_threads(t)
            xs, ds = (a if last else np.ascontiguousarray(a.transpose(0, 3, 1, 2))
                      for a in (x, dy))
            df = ck.c_conv2d_backprop_filter(xs, ds, k, pads, last)
            results.add(df.tobytes())
    finally:
        native.set_isa(before)
        native.set_num_threads(None)
    assert len(results) == 1
    return df


def isas():
    from minigraph.backends import native
    return native.ISAS[:native.ISAS.index(native.best_isa()) + 1]


@settings(max_examples=25, deadline=None)
@given(case=tap_cases())
def test_filter_gradient_by_taps_within_gamma_and_bit_identical(case):
    pads, out = same_or_valid(case)
    if min(out) <= 0:
        return
    rng = np.random.default_rng(case["seed"])
    x = rng.standard_normal((case["n"], case["h"], case["w"], case["c"])).astype(F32)
    dy = rng.standard_normal((case["n"], *out, case["co"])).astype(F32)
    exact, mags = exact_filter_grad(x, dy, case["k"], pads)
    for isa in isas():
        df = native_filter_grads(x, dy, case["k"], pads, isa)
        assert_within_gamma(df, exact, mags, case["n"] * out[0] * out[1])


@settings(max_examples=15, deadline=None)
@given(case=tap_cases(min_channels=8), data=st.data())
def test_filter_gradient_by_taps_multiplies_no_padding(case, data):
    """dy non-finite at a border pixel (and one anywhere): the C kernel's NaN / +-inf
    positions are those of the tap-wise reference, which never multiplies padding."""
    from minigraph.backends import native
    from minigraph.backends.convolution_kernels import conv2d_backprop_filter_nhwc
    from minigraph.ops.window import Window
    case["padding"] = "SAME"
    pads, out = same_or_valid(case)
    rng = np.random.default_rng(case["seed"])
    x = rng.standard_normal((case["n"], case["h"], case["w"], case["c"])).astype(F32)
    dy = rng.standard_normal((case["n"], *out, case["co"])).astype(F32)
    for _ in range(2):
        edge = data.draw(st.sampled_from([0, out[0] - 1]))
        where = (data.draw(st.integers(0, case["n"] - 1)), edge,
                 data.draw(st.integers(0, out[1] - 1)), data.draw(st.integers(0, case["co"] - 1)))
        dy[where] = data.draw(st.sampled_from([np.inf, -np.inf, np.nan]))
    window = Window(case["k"], (1, 1), (1, 1), pads, out)
    expected = conv2d_backprop_filter_nhwc(x.astype(F64), dy.astype(F64),
                                           (*case["k"], case["c"], case["co"]), window,
                                           by_taps=True)
    df = native_filter_grads(x, dy, case["k"], pads, native.best_isa(), threads=(1, 2))
    same_specials_and_close(df, expected, str(case))
