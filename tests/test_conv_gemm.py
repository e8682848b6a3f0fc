"""The native Conv2D forward on the implicit GEMM (kernels_c/conv_gemm.c) and its choice of
kernel per shape (backends/convolution_kernels.py ``forward_route``).

Accuracy: each output is one chain of K = kh * kw * (c / groups) fused multiply-adds (taps
row-major, then channels; padding taps add 0 * f), so ``|y - exact| <= gamma_K * sum |x f|``
with ``gamma_K = K u / (1 - K u)``, ``u = 2**-24``, the exact value the float64 correlation of
the float32 inputs (a formula of this file, independent of the kernels). Determinism: the
chain depends only on the shape, so results are bit-identical for any thread count and ISA,
and the fused epilogue gives the bits of the separate pass.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import NATIVE_AVAILABLE
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

import minigraph as mg
from minigraph import ops

pytestmark = pytest.mark.skipif(not NATIVE_AVAILABLE, reason="native kernels are not built")

F32, F64 = np.float32, np.float64
U = 2.0 ** -24


def exact_conv(x, f, strides, dilations, pads, groups):
    """(float64 correlation, the same of |x| and |f|) of NHWC x with HWIO f:
    y[n, p, q, g*cog + o] = sum_{i, j, ci} x[n, p*sh + i*dh - top, q*sw + j*dw - left,
    g*cg + ci] f[i, j, ci, g*cog + o], zero outside x."""
    (sh, sw), (dh, dw), ((top, bottom), (left, right)) = strides, dilations, pads
    n, h, w, c = x.shape
    kh, kw, cg, co = f.shape
    oh = (h + top + bottom - (kh - 1) * dh - 1) // sh + 1
    ow = (w + left + right - (kw - 1) * dw - 1) // sw + 1
    xp = np.zeros((n, h + top + bottom + sh * oh + dh * kh, w + left + right + sw * ow + dw * kw,
                   c))
    xp[:, top:top + h, left:left + w] = x
    cog = co // groups
    out = np.zeros((2, n, oh, ow, co))
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, i * dh:i * dh + sh * oh:sh, j * dw:j * dw + sw * ow:sw]
            for g in range(groups):
                xs = patch[..., g * cg:(g + 1) * cg]
                fs = f[i, j, :, g * cog:(g + 1) * cog].astype(F64)
                out[0, ..., g * cog:(g + 1) * cog] += xs @ fs
                out[1, ..., g * cog:(g + 1) * cog] += np.abs(xs) @ np.abs(fs)
    return out[0], out[1]


def assert_within_gamma(got, exact, mags, k):
    gamma = k * U / (1 - k * U)
    assert got.shape == exact.shape
    excess = np.abs(got.astype(F64) - exact) - (gamma + 1e-12) * mags
    assert (excess <= 0).all(), f"max excess {excess.max()} over the gamma_{k} bound (NaN fails)"


@st.composite
def conv_cases(draw, max_channels=9, group_counts=(1, 1, 2, 3, 4)):
    """A Conv2D drawn from the shapes real models have, and odd ones: groups, strides,
    dilations, SAME / VALID / EXPLICIT (asymmetric) padding, NHWC / NCHW."""
    groups = draw(st.sampled_from(group_counts))
    cg = draw(st.integers(1, max_channels))
    cog = draw(st.integers(1, 40))
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    strides = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilations = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    padding = draw(st.sampled_from(["SAME", "VALID", "EXPLICIT"]))
    explicit = [draw(st.integers(0, 3)) for _ in range(4)] if padding == "EXPLICIT" else []
    n, h, w = draw(st.integers(1, 3)), draw(st.integers(1, 10)), draw(st.integers(1, 10))
    fmt = draw(st.sampled_from(["NHWC", "NHWC", "NCHW"]))
    return dict(n=n, h=h, w=w, groups=groups, cg=cg, cog=cog, kh=kh, kw=kw, strides=strides,
                dilations=dilations, padding=padding, explicit=explicit, fmt=fmt,
                seed=draw(st.integers(0, 2**16)))


def pads_of(case):
    """((top, bottom), (left, right)) as TF computes them."""
    if case["padding"] == "EXPLICIT":
        e = case["explicit"]
        return (e[0], e[1]), (e[2], e[3])
    pads = []
    for size, k, s, d in zip((case["h"], case["w"]), (case["kh"], case["kw"]),
                             case["strides"], case["dilations"]):
        if case["padding"] == "VALID":
            pads.append((0, 0))
            continue
        total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
        pads.append((total // 2, total - total // 2))
    return tuple(pads)


def conv_attrs(case):
    (sh, sw), (dh, dw) = case["strides"], case["dilations"]
    nhwc = case["fmt"] == "NHWC"
    attrs = {"strides": [1, sh, sw, 1] if nhwc else [1, 1, sh, sw],
             "dilations": [1, dh, dw, 1] if nhwc else [1, 1, dh, dw],
             "data_format": case["fmt"]}
    if case["padding"] == "EXPLICIT":
        (t, b), (left, r) = pads_of(case)
        attrs["explicit_paddings"] = ([0, 0, t, b, left, r, 0, 0] if nhwc
                                      else [0, 0, 0, 0, t, b, left, r])
    return attrs


def output_hw(case):
    (top, bottom), (left, right) = pads_of(case)
    return tuple((size + a + b - (k - 1) * d - 1) // s + 1 for size, a, b, k, d, s in zip(
        (case["h"], case["w"]), (top, left), (bottom, right), (case["kh"], case["kw"]),
        case["dilations"], case["strides"]))


def data(case):
    rng = np.random.default_rng(case["seed"])
    c, co = case["groups"] * case["cg"], case["groups"] * case["cog"]
    x = rng.standard_normal((case["n"], case["h"], case["w"], c)).astype(F32)
    f = rng.standard_normal((case["kh"], case["kw"], case["cg"], co)).astype(F32)
    return x, f


def run_conv(case, x, f, backend="native", **session):
    """The session's Conv2D of NHWC x (laid out as case["fmt"]), its kernel, NHWC result."""
    nchw = case["fmt"] == "NCHW"
    root = mg.Scope.NewRootScope()
    y = ops.Conv2D(root, x.transpose(0, 3, 1, 2).copy() if nchw else x, f,
                   padding=case["padding"], **conv_attrs(case))
    metadata = mg.RunMetadata()
    value = mg.ClientSession(root, backend=backend, **session).Run({}, y,
                                                                   run_metadata=metadata)
    return (value.transpose(0, 2, 3, 1) if nchw else value), metadata.kernel_of(y.op.name)


@settings(max_examples=60, deadline=None)
@given(case=conv_cases())
def test_native_conv2d_matches_float64_within_gamma(case):
    assume(min(output_hw(case)) > 0)
    x, f = data(case)
    got, kernel = run_conv(case, x, f)
    assert kernel == "native:convolution_kernels.conv2d_native"  # no numpy fallback
    exact, mags = exact_conv(x, f, case["strides"], case["dilations"], pads_of(case),
                             case["groups"])
    assert_within_gamma(got, exact, mags, case["kh"] * case["kw"] * case["cg"])


@pytest.fixture
def restore_native():
    from minigraph.backends import native
    isa = native.isa()
    yield native
    native.set_isa(isa)
    native.set_num_threads(None)


def window_of(case):
    from minigraph.ops.window import Window
    return Window((case["kh"], case["kw"]), case["strides"], case["dilations"], pads_of(case),
                  output_hw(case))


@settings(max_examples=15, deadline=None)
@given(case=conv_cases(max_channels=300))
def test_conv_gemm_is_bit_identical_for_any_thread_count_and_isa(case):
    """Large channel counts too: several K chunks per tap (256 floats), several M blocks."""
    from minigraph.backends import convolution_kernels as ck
    from minigraph.backends import native
    assume(min(output_hw(case)) > 0)
    x, f = data(case)
    isa = native.isa()
    try:
        results = set()
        for name in ("scalar", "avx2", "avx512"):
            if native.set_isa(name) != name:
                continue  # this CPU lacks it
            for threads in (1, 2, 3):
                native.set_num_threads(threads)
                results.add(ck.c_conv_gemm(x, f, window_of(case), case["groups"]).tobytes())
    finally:
        native.set_isa(isa)
        native.set_num_threads(None)
    assert len(results) == 1


@settings(max_examples=25, deadline=None)
@given(case=conv_cases(max_channels=40, group_counts=(1, 2, 4, 6)))
def test_narrow_groups_bit_identical_and_within_gamma(case):
    """Grouped convolutions of 1-40 channels per group and 1-40 outputs per group (RegNet /
    ResNeXt widths: panels of <= 16 columns run the narrow micro-kernel), all groups in one
    call: every ISA, 1 and 2 threads give the same bits, within the gamma bound."""
    from minigraph.backends import convolution_kernels as ck
    from minigraph.backends import native
    assume(min(output_hw(case)) > 0)
    x, f = data(case)
    isa, results = native.isa(), set()
    try:
        for name in ("scalar", "avx2", "avx512"):
            if native.set_isa(name) != name:
                continue  # this CPU lacks it
            for threads in (1, 2):
                native.set_num_threads(threads)
                results.add(ck.c_conv_gemm(x, f, window_of(case), case["groups"]).tobytes())
    finally:
        native.set_isa(isa)
        native.set_num_threads(None)
    assert len(results) == 1
    exact, mags = exact_conv(x, f, case["strides"], case["dilations"], pads_of(case),
                             case["groups"])
    got = np.frombuffer(results.pop(), F32).reshape(exact.shape)
    assert_within_gamma(got, exact, mags, case["kh"] * case["kw"] * case["cg"])


@settings(max_examples=20, deadline=None)
@given(case=conv_cases(max_channels=80))
def test_direct_and_gemm_routes_give_the_same_bits_on_avx512(case):
    """Both sum each output in the same FMA chain (taps row-major, then channels): the
    choice of kernel per shape never changes a result (AVX-512 intrinsics on both sides)."""
    from minigraph.backends import convolution_kernels as ck
    from minigraph.backends import native
    case = {**case, "groups": 1, "dilations": (1, 1), "fmt": "NHWC"}
    assume(min(output_hw(case)) > 0)
    (top, _), (left, _) = pads_of(case)
    assume(top < case["kh"] and left < case["kw"])
    x, f = data(case)
    isa = native.isa()
    try:
        if native.set_isa("avx512") != "avx512":
            return
        window = window_of(case)
        direct = ck.c_conv2d(x, f, window.pads, window.out, True, strides=window.strides)
        assert direct.tobytes() == ck.c_conv_gemm(x, f, window).tobytes()
    finally:
        native.set_isa(isa)


@st.composite
def padded_small_images(draw):
    """Windows wider than the image (Inception's 1x7 over 3 x 3 maps, a 3x3 over 1 x 1) and
    explicit pads wider than it: tap rows, tap columns and whole blocks of output pixels that
    read only the padding."""
    pads = [draw(st.integers(0, 8)) for _ in range(4)]
    return dict(n=draw(st.integers(1, 3)), h=draw(st.integers(1, 3)), w=draw(st.integers(1, 3)),
                groups=1, cg=draw(st.sampled_from([1, 5, 70, 300])),
                cog=draw(st.integers(1, 40)), kh=draw(st.integers(1, 7)),
                kw=draw(st.integers(1, 7)),
                strides=(draw(st.integers(1, 2)), draw(st.integers(1, 2))),
                dilations=(draw(st.integers(1, 2)), draw(st.integers(1, 2))),
                padding=draw(st.sampled_from(["SAME", "EXPLICIT"])), explicit=pads,
                fmt="NHWC", seed=draw(st.integers(0, 2**16)))


@st.composite
def border_pixels(draw):
    """Images of a few pixels under 3x3 and 5x5 windows: the border pixels of a block read
    some K chunks (tap rows; tap columns, where a column's channels fill whole chunks of 256
    floats) only from the padding, the interior ones never, so that each pixel skips its own
    chunks: runs of pixels with different first and last chunks inside one tile."""
    k = draw(st.sampled_from([3, 5]))
    pads = [draw(st.integers(0, k - 1)) for _ in range(4)]
    return dict(n=draw(st.integers(1, 3)), h=draw(st.integers(2, 9)), w=draw(st.integers(2, 9)),
                groups=1, cg=draw(st.sampled_from([5, 256, 300, 512])),
                cog=draw(st.integers(1, 70)), kh=k, kw=k, strides=(1, 1), dilations=(1, 1),
                padding=draw(st.sampled_from(["SAME", "EXPLICIT"])), explicit=pads,
                fmt="NHWC", seed=draw(st.integers(0, 2**16)))


def _vgg_block5(n):
    """VGG16's last block at a 112 x 112 input: 3x3 SAME over 7 x 7 maps of 512 channels."""
    return dict(n=n, h=7, w=7, groups=1, cg=512, cog=40, kh=3, kw=3, strides=(1, 1),
                dilations=(1, 1), padding="SAME", explicit=[], fmt="NHWC", seed=11)


def _all_padding_block(k, cg):
    """A 1 x 1 image under pads of 8: the first block of output pixels reads only padding."""
    return dict(n=1, h=1, w=1, groups=1, cg=cg, cog=7, kh=k, kw=k, strides=(1, 1),
                dilations=(1, 1), padding="EXPLICIT", explicit=[8, 8, 8, 8], fmt="NHWC", seed=3)


@settings(max_examples=40, deadline=None)
@given(case=st.one_of(padded_small_images(), border_pixels()))
@example(case=_all_padding_block(1, 5))
@example(case=_all_padding_block(3, 300))
@example(case=_vgg_block5(3))
def test_chunks_reading_only_padding_are_skipped_exactly(case):
    """The GEMM skips, per pixel, the K chunks whose rows are the padding's zeros; a pixel's
    first chunk run starts its sums, its last applies the epilogue. The
    sums keep their bits: within gamma of float64, +0 where a window reads only padding,
    the direct route's bits where it runs the shape, and the unfused epilogue's bits (the
    output buffer starts as NaN, so a chunk that loaded it before any wrote it would show)."""
    from minigraph.backends import convolution_kernels as ck
    from minigraph.backends import native
    from minigraph.backends.activation_kernels import Epilogue, c_channel_epilogue
    assume(min(output_hw(case)) > 0)
    x, f = data(case)
    window = window_of(case)
    shape = (case["n"], *output_hw(case), case["cog"])
    got = ck.c_conv_gemm(x, f, window, out=np.full(shape, np.nan, F32))
    exact, mags = exact_conv(x, f, case["strides"], case["dilations"], pads_of(case), 1)
    assert_within_gamma(got, exact, mags, case["kh"] * case["kw"] * case["cg"])
    assert not np.signbit(got[mags == 0]).any()
    rng = np.random.default_rng(case["seed"])
    vec = [rng.standard_normal(case["cog"]).astype(F32) for _ in range(4)]
    epilogue = Epilogue(vec[0], vec[1], np.abs(vec[2]), vec[3],
                        rng.standard_normal(shape).astype(F32), 1)
    fused = ck.c_conv_gemm(x, f, window, 1, epilogue, out=np.full(shape, np.nan, F32))
    c_channel_epilogue(got, epilogue)
    assert fused.tobytes() == got.tobytes()
    (top, _), (left, _) = pads_of(case)
    if case["dilations"] == (1, 1) and top < case["kh"] and left < case["kw"]:
        isa = native.isa()
        try:
            if native.set_isa("avx512") == "avx512":
                plain = ck.c_conv_gemm(x, f, window)
                direct = ck.c_conv2d(x, f, window.pads, window.out, True,
                                     strides=window.strides)
                assert direct.tobytes() == plain.tobytes()
        finally:
            native.set_isa(isa)


@pytest.mark.parametrize("groups,cg,cog,k,dilation", [(1, 70, 40, 3, 1), (4, 24, 16, 3, 2),
                                                      (2, 300, 33, 1, 1), (8, 8, 8, 3, 1)])
def test_conv_gemm_epilogue_is_the_unfused_pass(groups, cg, cog, k, dilation):
    from minigraph.backends import convolution_kernels as ck
    from minigraph.backends.activation_kernels import Epilogue, c_channel_epilogue
    case = dict(n=2, h=9, w=7, groups=groups, cg=cg, cog=cog, kh=k, kw=k, strides=(1, 2),
                dilations=(dilation, 1), padding="SAME", explicit=[], fmt="NHWC", seed=cg)
    x, f = data(case)
    rng = np.random.default_rng(5)
    co = groups * cog
    vec = [rng.standard_normal(co).astype(F32) for _ in range(4)]
    residual = rng.standard_normal((2, *output_hw(case), co)).astype(F32)
    for activation in (0, 1, 2):
        epilogue = Epilogue(vec[0], vec[1], np.abs(vec[2]), vec[3], residual, activation)
        fused = ck.c_conv_gemm(x, f, window_of(case), groups, epilogue)
        plain = ck.c_conv_gemm(x, f, window_of(case), groups)
        c_channel_epilogue(plain, epilogue)
        assert fused.tobytes() == plain.tobytes()


@settings(max_examples=15, deadline=None)
@given(case=conv_cases(max_channels=40), relu6=st.booleans())
def test_fused_conv_chain_is_bit_identical_to_the_unfused_ops(case, relu6):
    """Conv2D (any route: grouped, dilated, explicit pads, NCHW) -> BiasAdd -> Relu(6), fused
    by the remapper, gives the bits of the plain plan."""
    assume(min(output_hw(case)) > 0)
    x, f = data(case)
    bias = np.random.default_rng(case["seed"] + 1).standard_normal(f.shape[-1]).astype(F32)
    nchw = case["fmt"] == "NCHW"
    results = []
    for remapper in (True, False):
        root = mg.Scope.NewRootScope()
        xp = ops.Placeholder(root, mg.float32)
        y = ops.Conv2D(root, xp, f, padding=case["padding"], **conv_attrs(case))
        y = ops.BiasAdd(root, y, bias, data_format=case["fmt"])
        y = (ops.Relu6 if relu6 else ops.Relu)(root, y)
        session = mg.ClientSession(root, backend="native",
                                   optimizer=mg.OptimizerOptions(remapper=remapper))
        feed = x.transpose(0, 3, 1, 2).copy() if nchw else x
        results.append(session.Run({xp: feed}, y).tobytes())
    assert results[0] == results[1]


@pytest.mark.parametrize("n,h,c,co,stride", [(2, 9, 3, 16, 2), (1, 6, 64, 80, 1),
                                              (2, 5, 200, 40, 2), (8, 20, 64, 64, 1),
                                              (8, 20, 128, 256, 2), (4, 9, 8, 32, 1),
                                              (8, 14, 256, 256, 2), (8, 14, 512, 512, 2),
                                              (1, 20, 128, 128, 2), (8, 28, 128, 128, 1),
                                              (2, 8, 512, 512, 1), (1, 7, 600, 520, 1),
                                              (2, 8, 128, 128, 1)])
def test_forward_route_follows_the_rule(n, h, c, co, stride):
    """Every route is taken by the shapes the rule sends to it."""
    from minigraph.backends import convolution_kernels as ck
    from minigraph.ops.window import Window
    out = (h - 1) // stride + 1
    window = Window((3, 3), (stride, stride), (1, 1), ((1, 1), (1, 1)), (out, out))
    few_pixels, few_pixel_channels, channels = (ck.PADDED_ROUTE_RULE if stride == 1
                                                else ck.STRIDED_ROUTE_RULE)
    one = Window((1, 1), (stride, stride), (1, 1), ((0, 0), (0, 0)), (out, out))
    pixels_1x1 = n * out * out  # a 1x1 window: the unstrided rule at any stride
    rule = ck.CONV_ROUTE_RULE
    least_1x1 = rule[1] if pixels_1x1 <= rule[0] else rule[2]
    assert ck.forward_route((n, h, h, c), (1, 1, c, co), one, 1) == (
        "gemm" if min(c, co) >= least_1x1 else "direct")
    least = few_pixel_channels if n * out * out <= few_pixels else channels
    dense = ck.forward_route((n, h, h, c), (3, 3, c, co), window, 1)
    assert dense == ("gemm" if min(3 * c, co) >= least else "direct")
    if stride == 1:  # no padding: nothing for the direct kernel to skip
        valid = Window((3, 3), (1, 1), (1, 1), ((0, 0), (0, 0)), (h - 2, h - 2))
        least = rule[1] if n * (h - 2) ** 2 <= rule[0] else rule[2]
        assert ck.forward_route((n, h, h, c), (3, 3, c, co), valid, 1) == (
            "gemm" if min(3 * c, co) >= least else "direct")
    assert ck.forward_route((n, h, h, c), (3, 3, 1, c), window, c) == "depthwise"
    for per_group in (2, 8, 16, 17, 64):  # grouped: every group in one implicit GEMM call
        assert ck.forward_route((n, h, h, 2 * per_group), (3, 3, per_group, co), window,
                                2) == "gemm"
    dilated = Window((3, 3), (1, 1), (2, 2), ((2, 2), (2, 2)), (h, h))
    assert ck.forward_route((n, h, h, c), (3, 3, c, co), dilated, 1) == "gemm"
