"""The native convolution gradients on the GEMM micro-kernels (kernels_c/conv_gemm_grad.c,
backends/conv_gemm_grad.py): Conv2DBackpropInput and Conv2DBackpropFilter, float32, for any
strides, dilations, padding (SAME/VALID/EXPLICIT), groups, NHWC and NCHW.

References: the dense float64 loop formulas of test_nn_ops / test_grouped_conv (written from
TF's documentation, independent of minigraph's kernels), with the GEMM error bound
``|got - exact| <= K * 2**-24 * sum |a*b|`` (K terms per element: taps * out channels per
group for the input gradient, the output pixels for the filter gradient; ``sum |a*b|`` from
the same formulas on absolute values); finite differences of the float64 forward through a
graph; bit-identical results for 1, 2 and 3 threads and on every ISA.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_grouped_conv import (
    grouped_backprop_filter_ref,
    grouped_backprop_input_ref,
    grouped_ref,
)
from test_nn_ops import conv_out_hw, explicit_attr, from_fmt, hw_attr, to_fmt

import minigraph as mg
from minigraph import ops
from minigraph.backends import native

needs_native = pytest.mark.skipif(not native.available(), reason="native kernels not built")
F32, F64 = np.float32, np.float64
KERNELS = {"input": "native:convolution_kernels.conv2d_backprop_input_native",
           "filter": "native:convolution_kernels.conv2d_backprop_filter_native"}


def assert_within(got, exact, mags, k, what):
    """|got - exact| <= k * 2**-24 * mags elementwise (plus the float32 rounding of the
    result itself and of tiny values)."""
    bound = (k + 1) * 2.0**-24 * mags + 1e-30
    err = np.abs(got.astype(F64) - exact)
    worst = np.unravel_index(np.argmax(err - bound), err.shape) if err.size else None
    assert got.shape == exact.shape, what
    assert np.all(err <= bound), (f"{what}: error {err[worst]:.3g} over the bound "
                                  f"{bound[worst]:.3g} at {worst}")


@st.composite
def cases(draw, formats=("NHWC", "NCHW"), group_counts=(1, 1, 2, 3), max_channels=20):
    """(x NHWC, f, dy NHWC, strides, dilations, padding, explicit, fmt): a convolution whose
    output is not empty."""
    groups = draw(st.sampled_from(group_counts))
    cig, cog = draw(st.integers(1, max_channels)), draw(st.integers(1, max_channels))
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    strides = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilations = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    padding = draw(st.sampled_from(["SAME", "VALID", "EXPLICIT"]))
    explicit = tuple((draw(st.integers(0, 3)), draw(st.integers(0, 3))) for _ in range(2))
    if padding != "EXPLICIT":
        explicit = ((0, 0), (0, 0))
    n, h, w = draw(st.integers(1, 3)), draw(st.integers(1, 11)), draw(st.integers(1, 11))
    out = conv_out_hw((h, w), (kh, kw), strides, dilations, padding, explicit)
    if min(out) <= 0:
        h, w = h + (kh - 1) * dilations[0], w + (kw - 1) * dilations[1]
        out = conv_out_hw((h, w), (kh, kw), strides, dilations, padding, explicit)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = rng.standard_normal((n, h, w, groups * cig)).astype(F32)
    f = rng.standard_normal((kh, kw, cig, groups * cog)).astype(F32)
    dy = rng.standard_normal((n, *out, groups * cog)).astype(F32)
    return x, f, dy, strides, dilations, padding, explicit, draw(st.sampled_from(formats))


def references(x, f, dy, strides, dilations, padding, explicit):
    """(exact dx, its magnitudes, exact df, its magnitudes), float64 NHWC."""
    args = (strides, dilations, padding, explicit)
    a = np.abs
    return (grouped_backprop_input_ref(x.shape, f, dy, *args),
            grouped_backprop_input_ref(x.shape, a(f), a(dy), *args),
            grouped_backprop_filter_ref(x, f.shape, dy, *args),
            grouped_backprop_filter_ref(a(x), f.shape, a(dy), *args))


def attrs_of(fmt, strides, dilations, padding, explicit):
    attrs = {"strides": hw_attr(fmt, *strides), "dilations": hw_attr(fmt, *dilations),
             "padding": padding, "data_format": fmt}
    if padding == "EXPLICIT":
        attrs["explicit_paddings"] = explicit_attr(fmt, explicit)
    return attrs


@needs_native
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_ops_on_the_native_backend_within_the_bound(case):
    """Both ops in a graph on the native backend: the native kernels run (whichever route:
    GEMM, stride-1 direct or depthwise) and agree with the float64 loops."""
    x, f, dy, strides, dilations, padding, explicit, fmt = case
    root = mg.Scope.NewRootScope()
    attrs = attrs_of(fmt, strides, dilations, padding, explicit)
    shape_attr = list(to_fmt(x, fmt).shape)
    dx = ops.Conv2DBackpropInput(root.WithOpName("input"), shape_attr, f, to_fmt(dy, fmt),
                                 **attrs)
    df = ops.Conv2DBackpropFilter(root.WithOpName("filter"), to_fmt(x, fmt), list(f.shape),
                                  to_fmt(dy, fmt), **attrs)
    metadata = mg.RunMetadata()
    got_dx, got_df = mg.ClientSession(root, backend="native").Run({}, [dx, df],
                                                                  run_metadata=metadata)
    for name, kernel in KERNELS.items():
        assert metadata.kernel_of(name) == kernel
    exact_dx, mags_dx, exact_df, mags_df = references(x, f, dy, strides, dilations, padding,
                                                      explicit)
    taps, cog = f.shape[0] * f.shape[1], f.shape[3] // (x.shape[3] // f.shape[2])
    assert_within(from_fmt(got_dx, fmt), exact_dx, mags_dx, taps * cog, "input gradient")
    assert_within(got_df, exact_df, mags_df, dy.shape[0] * dy.shape[1] * dy.shape[2],
                  "filter gradient")


@needs_native
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_gemm_wrappers_within_the_bound(case):
    """The GEMM kernels themselves (also at the stride-1 shapes the direct kernels take in
    a graph)."""
    from minigraph.backends.conv_gemm_grad import c_gemm_backprop_filter, c_gemm_backprop_input

    x, f, dy, strides, dilations, padding, explicit, fmt = case
    window = _window(x.shape, f.shape, strides, dilations, padding, explicit)
    last = fmt == "NHWC"
    got_dx = from_fmt(c_gemm_backprop_input(to_fmt(dy, fmt), f, x.shape, window, last), fmt)
    got_df = c_gemm_backprop_filter(to_fmt(x, fmt), to_fmt(dy, fmt), f.shape, window, last)
    exact_dx, mags_dx, exact_df, mags_df = references(x, f, dy, strides, dilations, padding,
                                                      explicit)
    taps, cog = f.shape[0] * f.shape[1], f.shape[3] // (x.shape[3] // f.shape[2])
    assert_within(got_dx, exact_dx, mags_dx, taps * cog, "input gradient")
    assert_within(got_df, exact_df, mags_df, dy.shape[0] * dy.shape[1] * dy.shape[2],
                  "filter gradient")


def _window(x_shape, f_shape, strides, dilations, padding, explicit):
    """The convolution's window as the ops compute it (NHWC attrs)."""
    from minigraph.ops.window import conv_geometry

    attrs = attrs_of("NHWC", strides, dilations, padding, explicit)

    def fail(message):
        return ValueError(message)

    return conv_geometry(attrs, fail, x_shape, f_shape)


@needs_native
@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
def test_finite_differences_through_a_graph(fmt):
    """L = sum(Conv2D(x, f) * r) is linear in x and in f: the native float32 gradients of
    AddSymbolicGradients match central differences of the float64 forward (exact up to
    rounding for a linear function), at a stride-2, dilated, grouped, padded convolution."""
    rng = np.random.default_rng(3)
    strides, dilations, explicit = (2, 3), (2, 1), ((1, 2), (0, 1))
    x = rng.standard_normal((2, 9, 10, 6)).astype(F32)
    f = rng.standard_normal((3, 2, 3, 8)).astype(F32)
    out = conv_out_hw(x.shape[1:3], f.shape[:2], strides, dilations, "EXPLICIT", explicit)
    r = rng.standard_normal((2, *out, 8))
    root = mg.Scope.NewRootScope()
    attrs = attrs_of(fmt, strides, dilations, "EXPLICIT", explicit)
    xp = ops.Placeholder(root, mg.float32, shape=to_fmt(x, fmt).shape)
    fp = ops.Placeholder(root, mg.float32, shape=f.shape)
    y = ops.Conv2D(root, xp, fp, **attrs)
    loss = ops.Sum(root, ops.Mul(root, y, to_fmt(r.astype(F32), fmt)), [0, 1, 2, 3])
    gx, gf = mg.AddSymbolicGradients(root, [loss], [xp, fp])
    metadata = mg.RunMetadata()
    got_gx, got_gf = mg.ClientSession(root, backend="native").Run(
        {xp: to_fmt(x, fmt), fp: f}, [gx, gf], run_metadata=metadata)
    kernels = {s.kernel for s in metadata.step_stats}
    assert {"convolution_kernels.conv2d_backprop_input_native",
            "convolution_kernels.conv2d_backprop_filter_native"} <= kernels

    def loss64(xv, fv):
        return float(np.sum(grouped_ref(xv, fv, strides, dilations, "EXPLICIT", explicit) * r))

    for array, got, other in ((x, from_fmt(got_gx, fmt), None), (f, got_gf, "f")):
        picks = rng.choice(array.size, 12, replace=False)
        for flat in picks:
            index = np.unravel_index(flat, array.shape)
            plus, minus = array.astype(F64), array.astype(F64)
            plus[index] += 1.0
            minus[index] -= 1.0
            if other is None:
                numeric = (loss64(plus, f) - loss64(minus, f)) / 2
            else:
                numeric = (loss64(x, plus) - loss64(x, minus)) / 2
            assert abs(got[index] - numeric) <= 1e-4 * (1 + abs(numeric)), (other, index)


def _same_bits_everywhere_within_the_bound(x, f, dy, strides, dilations, padding, explicit):
    """Both NHWC gradients on the GEMM kernels: every ISA this CPU has with 1 and 2 threads
    gives the same bits, within the bound of the float64 formula."""
    from minigraph.backends.conv_gemm_grad import c_gemm_backprop_filter, c_gemm_backprop_input

    window = _window(x.shape, f.shape, strides, dilations, padding, explicit)
    before_isa, results = native.isa(), set()
    isas = native.ISAS[:native.ISAS.index(native.best_isa()) + 1]
    try:
        for isa, threads in itertools.product(isas, (1, 2)):
            native.set_isa(isa)
            native.set_num_threads(threads)
            results.add((c_gemm_backprop_input(dy, f, x.shape, window, True).tobytes(),
                         c_gemm_backprop_filter(x, dy, f.shape, window, True).tobytes()))
    finally:
        native.set_isa(before_isa)
        native.set_num_threads(None)
    assert len(results) == 1
    dx_bytes, df_bytes = results.pop()
    dx_exact, dx_mags, df_exact, df_mags = references(x, f, dy, strides, dilations, padding,
                                                      explicit)
    taps, pixels = f.shape[0] * f.shape[1] * f.shape[3] // (x.shape[3] // f.shape[2]), dy.size
    assert_within(np.frombuffer(dx_bytes, F32).reshape(x.shape), dx_exact, dx_mags, taps, "dx")
    assert_within(np.frombuffer(df_bytes, F32).reshape(f.shape), df_exact, df_mags,
                  pixels // f.shape[3], "df")


@needs_native
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(formats=("NHWC",), group_counts=(1, 1, 2, 4), max_channels=40))
def test_narrow_channels_bit_identical_and_within_the_bound(case):
    """1-40 channels per group on both sides (the input gradient's narrow micro-kernel below
    17 input channels, its edge pixels' zero-filled row copies; the filter gradient's narrow
    last panel): every ISA, 1 and 2 threads give the same bits, within the bound."""
    x, f, dy, strides, dilations, padding, explicit, _ = case
    _same_bits_everywhere_within_the_bound(x, f, dy, strides, dilations, padding, explicit)


@st.composite
def edge_cases(draw):
    """(x, f, dy, strides, dilations, explicit pads): a grouped convolution with 1-140
    channels per group on either side, strides and dilations 1-3 and explicit pads of 0-5 on
    each side (windows that cross x's edges, or lie wholly in the padding), odd sizes."""
    groups = draw(st.sampled_from((1, 1, 2, 3)))
    cig, cog = draw(st.integers(1, 140)), draw(st.integers(1, 140))
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    strides = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilations = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    explicit = tuple((draw(st.integers(0, 5)), draw(st.integers(0, 5))) for _ in range(2))
    n, h, w = draw(st.integers(1, 2)), draw(st.integers(1, 9)), draw(st.integers(1, 13))
    out = conv_out_hw((h, w), (kh, kw), strides, dilations, "EXPLICIT", explicit)
    if min(out) <= 0:
        h, w = h + (kh - 1) * dilations[0], w + (kw - 1) * dilations[1]
        out = conv_out_hw((h, w), (kh, kw), strides, dilations, "EXPLICIT", explicit)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = rng.standard_normal((n, h, w, groups * cig)).astype(F32)
    f = rng.standard_normal((kh, kw, cig, groups * cog)).astype(F32)
    dy = rng.standard_normal((n, *out, groups * cog)).astype(F32)
    return x, f, dy, strides, dilations, explicit


@needs_native
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edge_cases())
def test_filter_gradient_edges_read_in_place(case):
    """The filter gradient reads x in place, each output row cut where a tap column's window
    leaves x (segments of zeros, of any length, between segments of x): every ISA, 1 and 2
    threads give the same bits, within the bound of the float64 formula; the input
    gradient (partial tiles of every height, 17-24 and 1-8 column panels) likewise."""
    x, f, dy, strides, dilations, explicit = case
    _same_bits_everywhere_within_the_bound(x, f, dy, strides, dilations, "EXPLICIT", explicit)


@pytest.mark.parametrize("shape,k,co,stride,groups", [
    ((4, 32, 32, 3), (3, 3), 16, 1, 1),  # a first layer: one panel, the pixels cut in ranges
    ((3, 17, 15, 24), (3, 3), 36, 2, 1),
    ((2, 14, 14, 32), (3, 3), 64, 2, 4),
    ((2, 12, 12, 64), (1, 1), 96, 2, 1),
])
def test_bit_identical_for_any_thread_count_and_isa(shape, k, co, stride, groups):
    """1, 2 and 3 threads, every ISA this CPU runs: the same bits (fixed summation order)."""
    from minigraph.backends.conv_gemm_grad import c_gemm_backprop_filter, c_gemm_backprop_input

    rng = np.random.default_rng(5)
    x = rng.standard_normal(shape).astype(F32)
    f = rng.standard_normal((*k, shape[3] // groups, co)).astype(F32)
    window = _window(shape, f.shape, (stride, stride), (1, 1), "SAME", ((0, 0), (0, 0)))
    dy = rng.standard_normal((shape[0], *window.out, co)).astype(F32)
    before_isa, results = native.isa(), []
    isas = native.ISAS[:native.ISAS.index(native.best_isa()) + 1]
    try:
        for isa, threads in itertools.product(isas, (1, 2, 3)):
            native.set_isa(isa)
            native.set_num_threads(threads)
            results.append((c_gemm_backprop_input(dy, f, shape, window, True).tobytes(),
                            c_gemm_backprop_filter(x, dy, f.shape, window, True).tobytes()))
    finally:
        native.set_isa(before_isa)
        native.set_num_threads(None)
    assert all(r == results[0] for r in results[1:])


@needs_native
def test_wrappers_refuse_mismatched_buffers():
    """The wrappers check what C reads: a filter that does not fit the channels, an
    out_backprop of the wrong shape."""
    from minigraph.backends.conv_gemm_grad import c_gemm_backprop_filter, c_gemm_backprop_input

    x = np.ones((1, 5, 5, 4), F32)
    window = _window(x.shape, (3, 3, 4, 6), (2, 2), (1, 1), "SAME", ((0, 0), (0, 0)))
    dy = np.ones((1, *window.out, 6), F32)
    with pytest.raises(ValueError, match="filter shape"):
        c_gemm_backprop_input(dy, np.ones((3, 3, 3, 6), F32), x.shape, window, True)
    with pytest.raises(ValueError, match="out_backprop shape"):
        c_gemm_backprop_input(dy[:, :1], np.ones((3, 3, 4, 6), F32), x.shape, window, True)
    with pytest.raises(ValueError, match="filter shape"):
        c_gemm_backprop_filter(x, dy, (3, 3, 4, 5), window, True)
    for channels in (0, 8):  # no group fits: no channels, or more per group than x has
        with pytest.raises(ValueError, match="filter shape"):
            c_gemm_backprop_filter(x, dy, (3, 3, channels, 6), window, True)
    with pytest.raises(ValueError, match="out_backprop shape"):
        c_gemm_backprop_filter(x, dy[:, 1:], (3, 3, 4, 6), window, True)


@needs_native
@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
def test_every_convolution_of_a_resnet8_step_runs_native(fmt):
    """ResNet-8's training step (stride-2 starts, 1x1 stride-2 projections): every
    convolution and convolution gradient runs a native kernel."""
    from minigraph.examples.resnet8 import build_resnet8_training

    root = mg.Scope.NewRootScope()
    model = build_resnet8_training(root, 2, fmt)
    session = mg.ClientSession(root, backend="native")
    session.Run({}, [], mg.train.global_variables_initializer(root))
    rng = np.random.default_rng(0)
    metadata = mg.RunMetadata()
    session.Run({model.images: rng.standard_normal((2, 32, 32, 3)).astype(F32),
                 model.labels: np.array([1, 7], np.int32)}, [model.loss], model.train_op,
                run_metadata=metadata)
    convolutions = {(s.op_type, f"{s.backend}:{s.kernel}") for s in metadata.step_stats
                    if s.op_type.startswith("Conv2D")}
    assert {op for op, _ in convolutions} == {"Conv2D", "Conv2DBackpropInput",
                                              "Conv2DBackpropFilter"}
    assert all(kernel.startswith("native:") for _, kernel in convolutions), convolutions


def _padding_and_sizes(draw, k: tuple, strides: tuple, dilations: tuple, max_batch: int,
                       max_size: int) -> tuple:
    """(padding, explicit pads, (n, h, w), output size) drawn for a 2-D window: SAME, VALID
    or EXPLICIT (0-3 per side), an input grown by the dilated kernel where it gives no
    output."""
    padding = draw(st.sampled_from(["SAME", "VALID", "EXPLICIT"]))
    explicit = ((0, 0), (0, 0))
    if padding == "EXPLICIT":
        explicit = tuple((draw(st.integers(0, 3)), draw(st.integers(0, 3))) for _ in range(2))
    n = draw(st.integers(1, max_batch))
    h, w = draw(st.integers(1, max_size)), draw(st.integers(1, max_size))
    out = conv_out_hw((h, w), k, strides, dilations, padding, explicit)
    if min(out) <= 0:
        h, w = h + (k[0] - 1) * dilations[0], w + (k[1] - 1) * dilations[1]
        out = conv_out_hw((h, w), k, strides, dilations, padding, explicit)
    return padding, explicit, (n, h, w), out


@st.composite
def phase_cases(draw):
    """Convolutions for the input gradient's phase tiles (kernels_c/conv_gemm_grad.c):
    strides 2-3 mostly (phases without taps where the filter is smaller than the stride or
    the input than a stride), 1 with filters up to 7x7 (a phase of 49 taps), dilations,
    SAME/VALID/EXPLICIT, groups, odd sizes, 1-48 input channels per group (the narrow
    micro-kernel's runs of taps up to 16; wide panels, the last one narrow, above) and output
    channels per group past the K block of 256 (the wide path's blocks of a tap)."""
    groups = draw(st.sampled_from((1, 1, 2, 3)))
    cig = draw(st.one_of(st.integers(1, 16), st.integers(17, 48)))
    cog = draw(st.one_of(st.integers(1, 40), st.integers(1, 40), st.integers(257, 280)))
    strides = (draw(st.sampled_from((1, 2, 2, 3))), draw(st.sampled_from((1, 2, 2, 3))))
    kmax = 7 if strides == (1, 1) else 4
    kh, kw = draw(st.integers(1, kmax)), draw(st.integers(1, kmax))
    dilations = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    padding, explicit, (n, h, w), out = _padding_and_sizes(draw, (kh, kw), strides, dilations,
                                                           max_batch=2, max_size=13)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = rng.standard_normal((n, h, w, groups * cig)).astype(F32)
    f = rng.standard_normal((kh, kw, cig, groups * cog)).astype(F32)
    dy = rng.standard_normal((n, *out, groups * cog)).astype(F32)
    return x, f, dy, strides, dilations, padding, explicit, draw(st.sampled_from(["NHWC",
                                                                                  "NCHW"]))


def _input_over_nans(dy, f, x_shape, window):
    """The C input gradient (NHWC) written over a buffer of NaNs: every element must be
    written (the wrapper's fresh buffer may hold zeros already)."""
    from minigraph.backends.conv_gemm_grad import _geometry
    from minigraph.backends.native import fbuf, lib

    dx = np.full(x_shape, np.nan, F32)
    groups = x_shape[3] // f.shape[2]
    code = lib.mg_conv2d_gemm_backprop_input(
        *x_shape, f.shape[0], f.shape[1], f.shape[3], groups, *_geometry("test", window),
        fbuf(f), fbuf(dy), fbuf(dx), native.num_threads())
    assert code == 0
    return dx


@needs_native
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(phase_cases())
def test_phase_tiles_within_the_bound_and_bit_identical(case):
    """The input gradient per stride phase (tiles of a phase row written in place, every tap
    of the phase in one chain) and the filter gradient (dy read in place): within the bound
    of the float64 sums, NHWC and NCHW, and the same bits for 1 and 2 threads on every ISA."""
    from minigraph.backends.conv_gemm_grad import c_gemm_backprop_filter, c_gemm_backprop_input

    x, f, dy, strides, dilations, padding, explicit, fmt = case
    window = _window(x.shape, f.shape, strides, dilations, padding, explicit)
    last = fmt == "NHWC"
    before_isa, results = native.isa(), set()
    isas = native.ISAS[:native.ISAS.index(native.best_isa()) + 1]
    try:
        for isa, threads in itertools.product(isas, (1, 2)):
            native.set_isa(isa)
            native.set_num_threads(threads)
            dx = c_gemm_backprop_input(to_fmt(dy, fmt), f, x.shape, window, last)
            df = c_gemm_backprop_filter(to_fmt(x, fmt), to_fmt(dy, fmt), f.shape, window, last)
            results.add((from_fmt(dx, fmt).tobytes(), df.tobytes()))
            results.add((_input_over_nans(dy, f, x.shape, window).tobytes(), df.tobytes()))
    finally:
        native.set_isa(before_isa)
        native.set_num_threads(None)
    assert len(results) == 1
    dx_bytes, df_bytes = results.pop()
    exact_dx, mags_dx, exact_df, mags_df = references(x, f, dy, strides, dilations, padding,
                                                      explicit)
    taps, cog = f.shape[0] * f.shape[1], f.shape[3] // (x.shape[3] // f.shape[2])
    assert_within(np.frombuffer(dx_bytes, F32).reshape(x.shape), exact_dx, mags_dx,
                  taps * cog, "input gradient")
    assert_within(np.frombuffer(df_bytes, F32).reshape(f.shape), exact_df, mags_df,
                  dy.shape[0] * dy.shape[1] * dy.shape[2], "filter gradient")


@st.composite
def filter_cases(draw):
    """Convolutions for the filter gradient's in-place rows (kernels_c/conv_gemm_grad.c):
    strides 1-3, 1x1 to 4x4 filters, dilations, SAME/VALID/EXPLICIT (x read in place one
    output row at a time, or its zero-padded copy where some window crosses its edges), groups,
    1-70 in channels per group (tiles of C rows across taps), 1-140 out channels per group
    (narrow, wide and narrow-last panels, blocks of up to 4 panels), batches up to 12 and
    sizes up to 36 (several blocks of output rows, several chunks summed in order)."""
    groups = draw(st.sampled_from((1, 1, 1, 2, 3)))
    cig = draw(st.one_of(st.integers(1, 16), st.integers(17, 70)))
    cog = draw(st.one_of(st.integers(1, 16), st.integers(17, 40), st.integers(60, 140)))
    kh, kw = draw(st.sampled_from((1, 1, 2, 3, 3, 4))), draw(st.sampled_from((1, 1, 2, 3, 3, 4)))
    strides = (draw(st.sampled_from((1, 2, 2, 3))), draw(st.sampled_from((1, 2, 2, 3))))
    dilations = (draw(st.sampled_from((1, 1, 2))), draw(st.sampled_from((1, 1, 2))))
    padding, explicit, (n, h, w), out = _padding_and_sizes(draw, (kh, kw), strides, dilations,
                                                           max_batch=12, max_size=36)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = rng.standard_normal((n, h, w, groups * cig)).astype(F32)
    dy = rng.standard_normal((n, *out, groups * cog)).astype(F32)
    return x, (kh, kw, cig, groups * cog), dy, strides, dilations, padding, explicit


def _filter_bits(x, f_shape, dy, window, settings_):
    """The C filter gradient's bytes under each (isa, threads) of settings_."""
    from minigraph.backends.conv_gemm_grad import c_gemm_backprop_filter

    before_isa, results = native.isa(), set()
    try:
        for isa, threads in settings_:
            native.set_isa(isa)
            native.set_num_threads(threads)
            results.add(c_gemm_backprop_filter(x, dy, f_shape, window, True).tobytes())
    finally:
        native.set_isa(before_isa)
        native.set_num_threads(None)
    return results


@needs_native
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(filter_cases())
def test_filter_gradient_rows_in_place_within_the_bound_and_bit_identical(case):
    """The filter gradient: within the bound of the float64 sums (K = the output pixels) and
    the same bits for 1, 2 and 3 threads on the best ISA and 1 thread on the others."""
    x, f_shape, dy, strides, dilations, padding, explicit = case
    window = _window(x.shape, f_shape, strides, dilations, padding, explicit)
    best = native.best_isa()
    others = native.ISAS[:native.ISAS.index(best)]
    results = _filter_bits(x, f_shape, dy, window,
                           [(best, 1), (best, 2), (best, 3), *((isa, 1) for isa in others)])
    assert len(results) == 1
    a = np.abs
    exact = grouped_backprop_filter_ref(x, f_shape, dy, strides, dilations, padding, explicit)
    mags = grouped_backprop_filter_ref(a(x), f_shape, a(dy), strides, dilations, padding,
                                       explicit)
    assert_within(np.frombuffer(results.pop(), F32).reshape(f_shape), exact, mags,
                  dy.shape[0] * dy.shape[1] * dy.shape[2], "filter gradient")


@needs_native
@pytest.mark.parametrize("shape,k,co,stride,padding", [
    ((32, 32, 32, 16), 3, 32, 2, "SAME"),  # ResNet-8 stage 2: edge rows and columns
    ((32, 32, 32, 16), 1, 32, 2, "VALID"),  # its projection: dy is B itself, no edges
    ((32, 16, 16, 32), 3, 64, 2, "EXPLICIT"),  # stage 3, pads 1 on every side
    ((16, 16, 16, 32), 1, 64, 2, "VALID"),  # a projection with B packed from dy
    ((24, 21, 19, 5), 3, 150, 3, "SAME"),  # stride 3, 5 panels (2 blocks), narrow last
])
def test_filter_gradient_chunks_bit_identical_and_within_the_bound(shape, k, co, stride,
                                                                   padding):
    """Shapes whose pixels are cut into several chunks (summed in order; the count is a
    function of the shapes: mg_conv2d_gemm_filter_chunks) and several blocks of output rows:
    the same bits for 1, 2 and 3 threads and every ISA, within the float64 bound."""
    from minigraph.backends.native import lib

    rng = np.random.default_rng(11)
    explicit = ((1, 1), (1, 1)) if padding == "EXPLICIT" else ((0, 0), (0, 0))
    f_shape = (k, k, shape[3], co)
    window = _window(shape, f_shape, (stride, stride), (1, 1), padding, explicit)
    x = rng.standard_normal(shape).astype(F32)
    dy = rng.standard_normal((shape[0], *window.out, co)).astype(F32)
    chunks = lib.mg_conv2d_gemm_filter_chunks(shape[0], *window.out, 1, k, k, shape[3], co)
    assert chunks > 1
    isas = native.ISAS[:native.ISAS.index(native.best_isa()) + 1]
    results = _filter_bits(x, f_shape, dy, window, itertools.product(isas, (1, 2, 3)))
    assert len(results) == 1
    a = np.abs
    args = ((stride, stride), (1, 1), padding, explicit)
    exact = grouped_backprop_filter_ref(x, f_shape, dy, *args)
    mags = grouped_backprop_filter_ref(a(x), f_shape, a(dy), *args)
    assert_within(np.frombuffer(results.pop(), F32).reshape(f_shape), exact, mags,
                  dy.shape[0] * dy.shape[1] * dy.shape[2], "filter gradient")
