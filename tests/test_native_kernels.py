"""The native (C) batch-norm math functions against float64 numpy formulas written here.

Table-driven over channels_last x dtype (float32, float16, bfloat16) x rank (4, 5) x awkward
shapes (C = 1, 3, 17, 65; planes of 1, 7, 35 elements; one tensor large enough for several
blocks and threads) x every function of ``minigraph.backends.native``. The expected values
come only from the formulas below (docs/tf-semantics.md#fusedbatchnormv3-forward,
docs/tf-semantics.md#fusedbatchnormgradv3, docs/tf-semantics.md#autodiff), evaluated in
float64 on the exact input values.

Tolerance: float32 results must satisfy ``|actual - expected| <= 1e-5 * (|expected| + mag)``
where ``mag`` is the size of the terms the result is made of; float16/bfloat16 results must
be within one ulp of T of ``expected.astype(float32).astype(T)``, plus the same float32
allowance (it matters only near zero, where cancellation in float32 exceeds an ulp of T).
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import tracemalloc

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minigraph.backends import native

if not native.available():
    pytest.skip(f"native backend unavailable: {native.unavailable_reason()}",
                allow_module_level=True)

F32, F64 = np.float32, np.float64
BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = [np.dtype(F32), np.dtype(np.float16), BF16]
RTOL = 1e-5
EPS = 1e-3

# (id, N, C, spatial dims for rank 5; rank 4 merges the last two)
CASES = [
    ("C1_plane7", 3, 1, (7, 1, 1)),
    ("C3_plane1", 5, 3, (1, 1, 1)),
    ("C17_plane7", 2, 17, (1, 7, 1)),
    ("C65_plane1", 3, 65, (1, 1, 1)),
    ("C65_plane35", 2, 65, (5, 1, 7)),
    ("C3_plane20", 2, 3, (4, 5, 1)),
    ("large", 4, 17, (37, 41, 1)),  # 103 K elements: threads, several blocks, tails
    ("C32_plane49", 3, 32, (7, 7, 1)),  # short channels-first planes (7x7)
    ("C48_plane36", 40, 48, (6, 6, 1)),  # the same with threads and several blocks
]
FUNCTIONS = ["fwd_train", "fwd_infer", "bwd_train", "bwd_infer", "gg_train", "gg_infer"]


def make_shape(n, c, spatial, rank, channels_last):
    spatial = spatial if rank == 5 else (spatial[0], spatial[1] * spatial[2])
    return (n, *spatial, c) if channels_last else (n, c, *spatial)


# ------------------------------------------------------------------------ float64 formulas


class Layout:
    """Reduction axes and per-channel broadcasting for a tensor shape."""

    def __init__(self, shape, channels_last):
        self.axis = len(shape) - 1 if channels_last else 1
        self.axes = tuple(a for a in range(len(shape)) if a != self.axis)
        self.count = int(np.prod([shape[a] for a in self.axes]))
        self.bshape = [1] * len(shape)
        self.bshape[self.axis] = shape[self.axis]

    def b(self, v):  # per-channel vector -> broadcastable
        return np.asarray(v, F64).reshape(self.bshape)

    def sum(self, t):
        return t.sum(axis=self.axes)

    def mean(self, t):
        return t.mean(axis=self.axes)


def ref_fwd_train(lay, x, scale, offset, eps):
    mu = lay.mean(x)
    var = lay.mean((x - lay.b(mu)) ** 2)
    y = (x - lay.b(mu)) * lay.b(scale / np.sqrt(var + eps)) + lay.b(offset)
    return y, mu, var


def ref_fwd_infer(lay, x, scale, offset, mean, var, eps):
    return (x - lay.b(mean)) * lay.b(scale / np.sqrt(var + eps)) + lay.b(offset)


def ref_bwd(lay, dy, x, scale, mean, var, eps, training):
    r = 1 / np.sqrt(var + eps)
    xc = x - lay.b(mean)
    sum_dy, sum_dy_xc = lay.sum(dy), lay.sum(dy * xc)
    n = lay.count
    if training:
        dx = lay.b(scale * r) * (dy - lay.b(sum_dy / n) - xc * lay.b(sum_dy_xc / n * r**2))
    else:
        dx = dy * lay.b(scale * r)
    return dx, sum_dy_xc * r, sum_dy


def first_order_training(lay, dy, x, scale, eps):
    """(dx, scale_backprop, offset_backprop) with batch statistics taken from x."""
    mu = lay.mean(x)
    var = lay.mean((x - lay.b(mu)) ** 2)
    return ref_bwd(lay, dy, x, scale, mu, var, eps, True)


def ref_gg_train(lay, dy, x, scale, gx, gscale, goffset, eps):
    mu = lay.mean(x)
    var = lay.mean((x - lay.b(mu)) ** 2)
    r = 1 / np.sqrt(var + eps)
    xh = (x - lay.b(mu)) * lay.b(r)
    mdy, mgx = lay.mean(dy), lay.mean(gx)
    mdyxh, mgxxh, mgxdy = lay.mean(dy * xh), lay.mean(gx * xh), lay.mean(gx * dy)
    b = lay.b
    d_dy = b(scale * r) * (gx - b(mgx) - xh * b(mgxxh)) + b(gscale) * xh + b(goffset)
    d_scale = r * lay.sum(gx * (dy - b(mdy) - xh * b(mdyxh)))
    d_x = (-b(scale * r**2) * (xh * b(mgxdy - mgx * mdy - 3 * mdyxh * mgxxh)
                               + b(mgxxh) * (dy - b(mdy)) + b(mdyxh) * (gx - b(mgx)))
           + b(gscale * r) * (dy - b(mdy) - xh * b(mdyxh)))
    return d_dy, d_x, d_scale


def ref_gg_infer(lay, dy, x, scale, mean, var, gx, gscale, goffset, eps):
    r = 1 / np.sqrt(var + eps)
    b = lay.b
    d_dy = gx * b(scale * r) + b(gscale) * (x - b(mean)) * b(r) + b(goffset)
    return d_dy, b(gscale * r) * dy, lay.sum(gx * dy * b(r))


# ------------------------------------------------------------------------------ comparison


def ulp(values):
    """One ulp of a float16/bfloat16 array at each value (float64)."""
    magnitude = np.abs(values)
    bits = magnitude.view(np.uint16)
    return (bits + np.uint16(1)).view(values.dtype).astype(F64) - magnitude.astype(F64)


def assert_close(actual, expected, mag, what):
    """actual (any dtype) vs the float64 expected value; mag: scalar or broadcastable."""
    expected = np.asarray(expected, F64)
    allowance = RTOL * (np.abs(expected) + mag)
    if actual.dtype == F32:
        err = np.abs(actual.astype(F64) - expected)
    else:
        rounded = expected.astype(F32).astype(actual.dtype)
        err = np.abs(actual.astype(F64) - rounded.astype(F64))
        allowance = allowance + ulp(rounded)
    bad = ~(err <= allowance)
    if bad.any():
        i = np.flatnonzero(bad)[0]
        raise AssertionError(
            f"{what}: {bad.sum()} of {bad.size} elements off, first at flat index {i}: "
            f"actual {actual.flat[i]!r}, expected {expected.flat[i]!r}, "
            f"err {err.flat[i]:.3g} > {allowance.flat[i]:.3g}")


def channel_mag(lay, terms):
    """Per-channel sum of |terms| (the size of a per-channel sum)."""
    return lay.sum(np.abs(terms))


# ----------------------------------------------------------------------------------- data


def make_inputs(shape, channels_last, dtype, seed=0):
    rng = np.random.default_rng(seed)
    lay = Layout(shape, channels_last)
    channels = shape[lay.axis]

    def tensor(loc, spread):
        return (rng.standard_normal(shape) * spread + loc).astype(F32).astype(dtype)

    def vector(lo, hi):
        return rng.uniform(lo, hi, channels).astype(F32)

    return {
        "lay": lay,
        "x": tensor(1.5, 2.0), "dy": tensor(0.3, 1.0), "gx": tensor(-0.2, 0.8),
        "scale": vector(0.5, 2.0), "offset": vector(-1, 1), "mean": vector(0.5, 2.5),
        "var": vector(2.0, 6.0), "gscale": vector(-1, 1), "goffset": vector(-1, 1),
    }


def f64(*arrays):
    return [np.asarray(a, F64) for a in arrays]


def run_and_check(function, shape, channels_last, dtype, seed=0):
    d = make_inputs(shape, channels_last, dtype, seed)
    lay = d["lay"]
    x, dy, gx = f64(d["x"], d["dy"], d["gx"])
    scale, offset, mean, var, gscale, goffset = f64(
        d["scale"], d["offset"], d["mean"], d["var"], d["gscale"], d["goffset"])
    cl = channels_last
    what = f"{function} {shape} {'NHWC' if cl else 'NCHW'} {np.dtype(dtype).name}"

    if function == "fwd_train":
        y, m, v = native.bn_forward_training(d["x"], d["scale"], d["offset"], EPS, cl)
        ey, em, ev = ref_fwd_train(lay, x, scale, offset, EPS)
        assert y.dtype == d["x"].dtype and y.shape == shape and m.dtype == v.dtype == F32
        assert_close(m, em, lay.mean(np.abs(x)), what + " mean")
        assert_close(v, ev, 0, what + " variance")
        assert_close(y, ey, np.abs(ey).max(), what + " y")
    elif function == "fwd_infer":
        y = native.bn_forward_inference(d["x"], d["scale"], d["offset"], d["mean"], d["var"],
                                        EPS, cl)
        ey = ref_fwd_infer(lay, x, scale, offset, mean, var, EPS)
        assert y.dtype == d["x"].dtype and y.shape == shape
        assert_close(y, ey, np.abs(ey).max(), what + " y")
    elif function in ("bwd_train", "bwd_infer"):
        training = function == "bwd_train"
        call = native.bn_backward_training if training else native.bn_backward_inference
        dx, sb, ob = call(d["dy"], d["x"], d["scale"], d["mean"], d["var"], EPS, cl)
        edx, esb, eob = ref_bwd(lay, dy, x, scale, mean, var, EPS, training)
        assert dx.dtype == d["x"].dtype and dx.shape == shape and sb.dtype == ob.dtype == F32
        r = 1 / np.sqrt(var + EPS)
        assert_close(ob, eob, channel_mag(lay, dy), what + " offset_backprop")
        assert_close(sb, esb, channel_mag(lay, dy * (x - lay.b(mean))) * r,
                     what + " scale_backprop")
        assert_close(dx, edx, np.abs(dy * lay.b(scale * r)).max() * 3, what + " dx")
    elif function == "gg_train":
        ddy, dx, ds = native.bn_grad_grad_training(
            d["dy"], d["x"], d["scale"], d["gx"], d["gscale"], d["goffset"], EPS, cl)
        eddy, edx, eds = ref_gg_train(lay, dy, x, scale, gx, gscale, goffset, EPS)
        assert ddy.dtype == dx.dtype == d["x"].dtype and ds.dtype == F32
        # magnitudes of the terms of each formula (see ref_gg_train)
        b, mu = lay.b, lay.mean(x)
        r = 1 / np.sqrt(lay.mean((x - b(mu)) ** 2) + EPS)
        xh, dc, gc = (x - b(mu)) * b(r), np.abs(dy - b(lay.mean(dy))), np.abs(gx - b(lay.mean(gx)))
        mdyxh, mgxxh = np.abs(lay.mean(dy * xh)), np.abs(lay.mean(gx * xh))
        xh = np.abs(xh)
        k = np.abs(lay.mean(gx * dy)) + np.abs(lay.mean(gx) * lay.mean(dy)) + 3 * mdyxh * mgxxh
        dx_terms = (b(np.abs(scale) * r**2) * (xh * b(k) + b(mgxxh) * dc + b(mdyxh) * gc)
                    + b(np.abs(gscale) * r) * (dc + xh * b(mdyxh)))
        ddy_terms = (b(np.abs(scale) * r) * (gc + xh * b(mgxxh)) + b(np.abs(gscale)) * xh
                     + b(np.abs(goffset)))
        ds_terms = np.abs(gx) * (dc + xh * b(mdyxh))
        assert_close(ds, eds, channel_mag(lay, ds_terms) * r, what + " d_scale")
        assert_close(ddy, eddy, ddy_terms.max(), what + " d_dy")
        assert_close(dx, edx, dx_terms.max(), what + " d_x")
    elif function == "gg_infer":
        ddy, dx, ds = native.bn_grad_grad_inference(
            d["dy"], d["x"], d["scale"], d["mean"], d["var"], d["gx"], d["gscale"],
            d["goffset"], EPS, cl)
        eddy, edx, eds = ref_gg_infer(lay, dy, x, scale, mean, var, gx, gscale, goffset, EPS)
        assert ddy.dtype == dx.dtype == d["x"].dtype and ds.dtype == F32
        r = 1 / np.sqrt(var + EPS)
        assert_close(ds, eds, channel_mag(lay, gx * dy) * r, what + " d_scale")
        assert_close(ddy, eddy, np.abs(eddy).max() * 3, what + " d_dy")
        assert_close(dx, edx, np.abs(edx).max(), what + " d_x")
    else:
        raise AssertionError(function)


# ----------------------------------------------------------------------------------- tests


@pytest.mark.parametrize("function", FUNCTIONS)
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("rank", [4, 5])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("channels_last", [True, False], ids=["NHWC", "NCHW"])
def test_matches_float64_formulas(function, case, rank, dtype, channels_last):
    _, n, c, spatial = case
    shape = make_shape(n, c, spatial, rank, channels_last)
    run_and_check(function, shape, channels_last, dtype)


BLOCK_CASES = [  # shapes that cross the kernels' block boundaries (blocks hold ~128 KB)
    ((2, 3, 1, 70001), False),  # planes longer than a block: split into chunks
    ((3, 2, 5, 9999), False),   # float32: chunks; bfloat16: whole planes; masked tails
    ((300, 3, 5, 7), False),    # planes of 35: several channels per block, masked tails
    ((1000, 5, 3, 3), False),   # planes of 9: processed as rows of C * 9, two row blocks
    ((4, 25, 25, 17), True),    # C = 17: rows replicated to whole vectors, two row blocks
    ((2, 9, 9, 1300), True),    # C = 1300: no replication, masked row tails, three blocks
]


@pytest.mark.parametrize("function", FUNCTIONS)
@pytest.mark.parametrize("dtype", [np.dtype(F32), BF16], ids=lambda d: d.name)
@pytest.mark.parametrize("shape, channels_last", BLOCK_CASES, ids=lambda v: str(v))
def test_block_boundaries(function, dtype, shape, channels_last):
    run_and_check(function, shape, channels_last, dtype, seed=1)


@pytest.fixture(params=native.ISAS)
def isa(request):
    """Every instruction set this CPU supports (the kernels are written once for all)."""
    previous = native.isa()
    if native.set_isa(request.param) != request.param:
        native.set_isa(previous)
        pytest.skip(f"this CPU has no {request.param}")
    yield request.param
    native.set_isa(previous)


@pytest.mark.parametrize("function", FUNCTIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("shape, channels_last", [((3, 5, 7, 17), True), ((3, 17, 5, 7), False),
                                                  ((2, 3, 40, 40), False),
                                                  ((4, 32, 7, 7), False)], ids=str)
def test_every_isa(isa, function, dtype, shape, channels_last):
    run_and_check(function, shape, channels_last, dtype, seed=2)


@pytest.fixture(params=[True, False], ids=["bf16-instructions", "integer-rounding"])
def bf16_stores(request):
    """Both bfloat16 stores of the AVX-512 kernels: AVX512-BF16's vcvtneps2bf16 (NaN and
    subnormal lanes through the exact integer rounding) and the integer rounding alone."""
    if request.param and not native.lib.mg_bn_set_bf16_instructions(1):
        pytest.skip("this CPU has no AVX512-BF16")
    native.lib.mg_bn_set_bf16_instructions(int(request.param))
    yield request.param
    native.lib.mg_bn_set_bf16_instructions(1)


@pytest.mark.parametrize("dtype", [np.dtype(np.float16), BF16], ids=lambda d: d.name)
def test_rounding_is_round_to_nearest_even(isa, bf16_stores, dtype):
    """y = (x - mean) * 1 + offset with x = 0 is exactly float32 (0 - mean) + offset rounded
    to T: compare bit for bit over random float32 bit patterns and the edge cases (ties,
    float16 overflow at 65520, subnormals, inf, NaN: bfloat16 NaNs are the canonical quiet
    NaN with the sign, as ml_dtypes gives)."""
    rng = np.random.default_rng(3)
    bits = rng.integers(0, 2**32, 6000, dtype=np.uint64).astype(np.uint32)
    ties = (rng.integers(0, 2**16, 2000, dtype=np.uint32) << 16) | 0x8000  # bfloat16 ties
    values = np.concatenate([
        bits.view(F32), ties.view(F32),
        rng.uniform(-7e4, 7e4, 2000).astype(F32), rng.uniform(-1e-4, 1e-4, 2000).astype(F32),
        np.array([65504, 65519.996, 65520, -65520, 6e-8, 2.9e-8, 3e-8, 1e-45, 0, -0.0,
                  np.inf, -np.inf, np.nan, 3.4e38], F32),
    ])
    channels = values.size
    x = np.zeros((1, 1, 1, channels), dtype)
    ones = np.ones(channels, F32)
    zeros = np.zeros(channels, F32)
    with np.errstate(invalid="ignore", over="ignore"):
        y = native.bn_forward_inference(x, ones, zeros, -values, ones, 0.0, True)
        expected = ((np.zeros(channels, F32) - (-values)) * F32(1) + zeros).astype(dtype)
    y = y.reshape(-1)
    nan = np.isnan(expected.astype(F32))
    assert np.array_equal(np.isnan(y.astype(F32)), nan)
    compared = np.ones_like(nan) if dtype == BF16 else ~nan
    assert np.array_equal(y.view(np.uint16)[compared], expected.view(np.uint16)[compared])


def test_bf16_instruction_stores_give_the_same_bits():
    """Every function's bfloat16 outputs are bit-identical with either store (inputs with
    NaNs, infinities and values whose outputs are subnormal)."""
    previous = native.isa()
    if native.set_isa("avx512") != "avx512" or not native.lib.mg_bn_set_bf16_instructions(1):
        native.set_isa(previous)
        pytest.skip("this CPU has no AVX-512 with AVX512-BF16")
    try:
        for channels_last in (True, False):
            d = make_inputs((3, 40, 5, 7) if channels_last else (3, 7, 40, 5), channels_last,
                            BF16, seed=11)
            for key in ("x", "dy", "gx"):
                flat = d[key].reshape(-1)
                flat[:4] = np.array([np.nan, np.inf, -np.inf, 1e-39], F32).astype(BF16)
                flat[4:40] = (flat[4:40].astype(F32) * F32(1e-38)).astype(BF16)
            with np.errstate(all="ignore"):
                native.lib.mg_bn_set_bf16_instructions(1)
                with_instructions = call_all(d, channels_last)
                native.lib.mg_bn_set_bf16_instructions(0)
                integer_only = call_all(d, channels_last)
            assert_bitwise_equal(with_instructions, integer_only)
    finally:
        native.lib.mg_bn_set_bf16_instructions(1)
        native.set_isa(previous)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(n=st.integers(1, 4), c=st.integers(1, 40), spatial=st.integers(1, 300),
       channels_last=st.booleans(), stream=st.sampled_from([0, 1]),
       specials=st.lists(st.integers(0, 10**6), max_size=4), data=st.data())
def test_bf16_unchecked_stores_rerun_where_a_lane_needs_the_exact_rounding(
        n, c, spatial, channels_last, stream, specials, data):
    """With AVX512-BF16 the runs that only write store with vcvtneps2bf16 unchecked and run
    again with the checked store when a lane was NaN or subnormal (BN_DEFERRED_STORES): for
    any shape, layout (row runs, plane runs, plane walks), streaming mode and placement of
    such lanes (none, or a few anywhere: in one block, a head, a tail), every function gives
    the bits of the integer rounding alone; an in-place inference forward (y over x, where
    a second run would read its own output) gives the out-of-place bits."""
    previous = native.isa()
    if native.set_isa("avx512") != "avx512" or not native.lib.mg_bn_set_bf16_instructions(1):
        native.set_isa(previous)
        pytest.skip("this CPU has no AVX-512 with AVX512-BF16")
    shape = (n, spatial, c) if channels_last else (n, c, spatial)
    d = make_inputs(shape, channels_last, BF16, seed=spatial * 53 + c)
    size = d["x"].size
    for i in specials:  # outputs NaN (from x), or subnormal (x - mean tiny, offset 0)
        ch = data.draw(st.integers(0, c - 1))
        d["mean"][ch], d["offset"][ch] = F32(1e-38), F32(0.0)
        d["x"].reshape(-1)[i % size] = BF16.type(data.draw(st.sampled_from(
            [np.nan, 1.5e-38, -2e-39])))
    try:
        native.lib.mg_bn_set_streaming(stream)
        with np.errstate(all="ignore"):
            native.lib.mg_bn_set_bf16_instructions(0)
            integer_only = call_all(d, channels_last) + call_fused(d, channels_last)
            native.lib.mg_bn_set_bf16_instructions(1)
            unchecked_first = call_all(d, channels_last) + call_fused(d, channels_last)
            in_place = d["x"].copy()
            code, outer, channels, inner = native._geometry(in_place, channels_last)
            ff = functools.partial(native.ffi.from_buffer, "float[]")
            buf = native.ffi.from_buffer(in_place)
            assert native.lib.mg_bn_forward_inference(
                code, outer, channels, inner, buf, ff(d["scale"]), ff(d["offset"]),
                ff(d["mean"]), ff(d["var"]), EPS, buf, 1) == 0
        assert_bitwise_equal(integer_only, unchecked_first)
        assert_bitwise_equal([(integer_only[1][0],)], [(in_place,)])
    finally:
        native.lib.mg_bn_set_streaming(-1)
        native.lib.mg_bn_set_bf16_instructions(1)
        native.set_isa(previous)


def test_grad_grad_training_formula_by_finite_differences():
    """d_x, d_dy, d_scale of ref_gg_train are the exact gradient of
    L = <gx, dx> + <gscale, scale_backprop> + <goffset, offset_backprop>, where the first-order
    training gradient uses batch statistics computed from x (float64 central differences)."""
    shape = (3, 2, 2, 3)
    d = make_inputs(shape, True, F32, seed=4)
    lay = d["lay"]
    x, dy, gx = f64(d["x"], d["dy"], d["gx"])
    scale, gscale, goffset = f64(d["scale"], d["gscale"], d["goffset"])
    eps = 0.3

    def loss(x, dy, scale):
        dx, sb, ob = first_order_training(lay, dy, x, scale, eps)
        return (gx * dx).sum() + (gscale * sb).sum() + (goffset * ob).sum()

    def numeric(f, at):
        grad = np.zeros_like(at)
        h = 1e-6
        for i in range(at.size):
            step = np.zeros_like(at)
            step.flat[i] = h
            grad.flat[i] = (f(at + step) - f(at - step)) / (2 * h)
        return grad

    d_dy, d_x, d_scale = ref_gg_train(lay, dy, x, scale, gx, gscale, goffset, eps)
    np.testing.assert_allclose(numeric(lambda v: loss(v, dy, scale), x), d_x, atol=1e-7)
    np.testing.assert_allclose(numeric(lambda v: loss(x, v, scale), dy), d_dy, atol=1e-7)
    np.testing.assert_allclose(numeric(lambda v: loss(x, dy, v), scale), d_scale, atol=1e-7)


def call_all(d, channels_last):
    x, dy, gx = d["x"], d["dy"], d["gx"]
    s, o, m, v, gs, go = (d[k] for k in ("scale", "offset", "mean", "var", "gscale",
                                         "goffset"))
    return [
        native.bn_forward_training(x, s, o, EPS, channels_last),
        (native.bn_forward_inference(x, s, o, m, v, EPS, channels_last),),
        native.bn_backward_training(dy, x, s, m, v, EPS, channels_last),
        native.bn_backward_inference(dy, x, s, m, v, EPS, channels_last),
        native.bn_grad_grad_training(dy, x, s, gx, gs, go, EPS, channels_last),
        native.bn_grad_grad_inference(dy, x, s, m, v, gx, gs, go, EPS, channels_last),
    ]


def assert_bitwise_equal(first, second):
    for outs_a, outs_b in zip(first, second, strict=True):
        for a, b in zip(outs_a, outs_b, strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape
            assert np.array_equal(a.view(np.uint8), b.view(np.uint8))


def shifted_copy(array, shift_bytes):
    """A C-contiguous copy of array that starts shift_bytes past a 64-byte boundary."""
    raw = np.empty(array.nbytes + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + shift_bytes
    copy = raw[start:start + array.nbytes].view(array.dtype).reshape(array.shape)
    copy[...] = array
    return copy


@pytest.mark.parametrize("dtype", [np.dtype(F32), BF16], ids=lambda d: d.name)
@pytest.mark.parametrize("shape, channels_last", [((8, 33, 35, 64), True),
                                                  ((8, 33, 35, 17), True),
                                                  ((8, 17, 33, 35), False),
                                                  ((16, 3, 64, 64), False),
                                                  ((64, 32, 7, 7), False),
                                                  ((256, 64, 7, 7), False),
                                                  ((600, 6, 3, 3), False)], ids=str)
def test_deterministic_for_any_thread_count_and_alignment(monkeypatch, dtype, shape,
                                                          channels_last):
    d = make_inputs(shape, channels_last, dtype, seed=5)
    monkeypatch.setenv("MINIGRAPH_NUM_THREADS", "2")
    first = call_all(d, channels_last)
    again = call_all(d, channels_last)
    monkeypatch.setenv("MINIGRAPH_NUM_THREADS", "1")
    single = call_all(d, channels_last)
    monkeypatch.setenv("MINIGRAPH_NUM_THREADS", "3")
    three = call_all(d, channels_last)
    assert_bitwise_equal(first, again)
    assert_bitwise_equal(first, single)
    assert_bitwise_equal(first, three)
    for shift in (4, 16, 36):  # inputs at other alignments (outputs come from np.empty)
        moved = {k: shifted_copy(v, shift) if isinstance(v, np.ndarray) and v.ndim > 1 else v
                 for k, v in d.items()}
        assert_bitwise_equal(first, call_all(moved, channels_last))


def test_calls_from_many_threads_at_once_match_one_thread(monkeypatch):
    """Batch norm runs on the worker pool, which runs one job at a time: a call made while
    another thread's job runs does its blocks on its own thread (its own workspace). Six
    Python threads at once, each result bit for bit the single-threaded one."""
    from concurrent.futures import ThreadPoolExecutor

    cases = [(make_inputs(shape, last, F32, seed=i), last)
             for i, (shape, last) in enumerate([((8, 17, 19, 64), True), ((4, 24, 30, 30), False),
                                                ((16, 9, 9, 33), True), ((2, 3, 128, 128), False),
                                                ((6, 14, 14, 96), True), ((8, 40, 7, 7), False)])]
    monkeypatch.setenv("MINIGRAPH_NUM_THREADS", "1")
    expected = [call_all(d, last) for d, last in cases]
    monkeypatch.setenv("MINIGRAPH_NUM_THREADS", "2")
    with ThreadPoolExecutor(len(cases)) as executor:
        for _ in range(3):
            got = list(executor.map(lambda case: call_all(*case), cases))
            for first, second in zip(expected, got, strict=True):
                assert_bitwise_equal(first, second)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(n=st.integers(1, 9), c=st.integers(1, 48), elements=st.integers(1 << 15, 3 << 16),
       rows=st.integers(1, 3), rank5=st.booleans(), channels_last=st.booleans(),
       threads=st.integers(2, 5), dtype=st.sampled_from(DTYPES),
       isa=st.sampled_from(native.ISAS))
def test_blocks_in_thread_shares_match_one_thread(n, c, elements, rows, rank5, channels_last,
                                                  threads, dtype, isa):
    """Tensors of at least 2^15 elements run their blocks on the pool, thread t first taking
    the t-th contiguous share of them (mg_pool_run), the others' leftovers after: for
    any thread count, block count and plane length (shares that do not divide the blocks,
    planes that are not whole vectors, few planes against the threads; the write-only plane
    runs walk whole planes with vectors across their boundaries), on every instruction set,
    every block runs once and every function gives the single thread's bits; the inference
    forward matches the float64 formula."""
    plane = -(-elements // (n * c * rows))
    spatial = (rows, 1, plane) if rank5 else (rows, plane)
    shape = (n, *spatial, c) if channels_last else (n, c, *spatial)
    d = make_inputs(shape, channels_last, dtype, seed=elements)
    previous = native.isa()
    if native.set_isa(isa) != isa:
        native.set_isa(previous)
        return  # this CPU lacks the ISA: the example checks nothing else
    try:
        native.set_num_threads(1)
        single = call_all(d, channels_last)
        native.set_num_threads(threads)
        assert_bitwise_equal(single, call_all(d, channels_last))
    finally:
        native.set_num_threads(None)
        native.set_isa(previous)
    lay = d["lay"]
    x, scale, offset, mean, var = f64(d["x"], d["scale"], d["offset"], d["mean"], d["var"])
    expected = ref_fwd_infer(lay, x, scale, offset, mean, var, EPS)
    assert_close(single[1][0], expected, np.abs(expected).max(), f"fwd_infer {shape}")


def assert_channels_isolated(n, c, plane, dtype, isa, picked_channels):
    """Replacing every channel's inputs but the picked ones (by other values, infinities and
    NaNs among them) leaves the picked channels' outputs bit for bit as they were, for every
    function (channels-first (n, c, plane) on instruction set isa)."""
    previous = native.isa()
    if native.set_isa(isa) != isa:
        native.set_isa(previous)
        return  # this CPU lacks the ISA: the example checks nothing else
    try:
        d = make_inputs((n, c, plane), False, dtype, seed=plane * 41 + c)
        whole = call_all(d, False)
        others = make_inputs((n, c, plane), False, dtype, seed=plane * 41 + c + 1)
        for name in ("x", "dy", "gx"):  # non-finite values next to the kept channel
            flat = others[name].reshape(-1)
            flat[::7] = np.inf
            flat[3::11] = np.nan
        for ch in picked_channels:
            mixed = {k: v.copy() for k, v in others.items() if k != "lay"}
            for k, v in mixed.items():
                if v.ndim > 1:
                    v[:, ch] = d[k][:, ch]
                else:
                    v[ch] = d[k][ch]
            changed = call_all(mixed, False)
            picked = [tuple(a[:, ch:ch + 1] if a.ndim > 1 else a[ch:ch + 1] for a in outs)
                      for outs in whole]
            kept = [tuple(a[:, ch:ch + 1] if a.ndim > 1 else a[ch:ch + 1] for a in outs)
                    for outs in changed]
            assert_bitwise_equal(picked, kept)
    finally:
        native.set_isa(previous)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(n=st.integers(1, 3), c=st.integers(2, 40), plane=st.integers(32, 150),
       dtype=st.sampled_from(DTYPES), isa=st.sampled_from(native.ISAS), data=st.data())
def test_plane_channel_results_do_not_depend_on_the_other_channels(n, c, plane, dtype, isa,
                                                                    data):
    """Channels-first planes of >= 32 elements (plane runs) reduce each plane's vector sums
    to one float; AVX-512 reduces the sums of 16 planes at once (vf_hsum_batch). Every
    per-channel output and every element of a channel depends only on that channel's data,
    on every instruction set, for every function."""
    picked = sorted(set(data.draw(st.lists(st.integers(0, c - 1), min_size=1, max_size=3))))
    assert_channels_isolated(n, c, plane, dtype, isa, picked)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("n, c, plane", [(2, 5, 49), (3, 17, 33), (1, 40, 63), (5, 3, 36),
                                          (2, 4, 196), (1, 9, 255)])
def test_short_plane_walk_keeps_each_plane_to_its_channel(n, c, plane, dtype):
    """AVX-512 sums planes shorter than 16 vectors in one walk, whose boundary vectors hold
    the end of one plane and the start of the next: no lane of a neighbour reaches a
    channel's sums (neighbours with infinities and NaNs included), first, middle and last
    channels alike."""
    assert_channels_isolated(n, c, plane, dtype, "avx512", [0, c // 2, c - 1])


@pytest.mark.parametrize("dtype", [np.dtype(F32), BF16], ids=lambda d: d.name)
@pytest.mark.parametrize("shape, channels_last", [((1, 1, 1, 5), True), ((3, 2, 2, 17), True),
                                                  ((2, 5, 3, 3), False), ((4, 3, 3, 64), True),
                                                  ((2, 3, 2, 33), False), ((2, 3, 4, 16), False),
                                                  ((2, 3, 3, 200), True), ((2, 3, 2, 24), False)],
                         ids=str)
@pytest.mark.parametrize("stream", [0, 1], ids=["plain-stores", "non-temporal"])
def test_output_alignment_does_not_matter(dtype, shape, channels_last, stream):
    """The C functions write into buffers at any alignment (row runs in memory order start
    at the first aligned output element), with plain or non-temporal stores: bit-identical
    results, per-channel sums included, nothing written outside."""
    d = make_inputs(shape, channels_last, dtype, seed=7)
    lay, x, s, o, m, v = d["lay"], d["x"], d["scale"], d["offset"], d["mean"], d["var"]
    channels = shape[lay.axis]
    outer, inner = ((x.size // channels, 1) if channels_last
                    else (shape[0], int(np.prod(shape[2:]))))
    code = {np.dtype(F32): 0, BF16: 2}[np.dtype(dtype)]
    native.lib.mg_bn_set_streaming(0)
    expected = [native.bn_forward_inference(x, s, o, m, v, EPS, channels_last),
                *native.bn_forward_training(x, s, o, EPS, channels_last),
                *native.bn_backward_training(d["dy"], x, s, m, v, EPS, channels_last),
                *native.bn_backward_inference(d["dy"], x, s, m, v, EPS, channels_last)]
    native.lib.mg_bn_set_streaming(stream)
    try:
        check_outputs_at_every_alignment(d, expected, code, outer, inner)
    finally:
        native.lib.mg_bn_set_streaming(-1)


def check_outputs_at_every_alignment(d, expected, code, outer, inner):
    x, s, o, m, v = d["x"], d["scale"], d["offset"], d["mean"], d["var"]
    shape, channels = x.shape, s.size
    ffi, lib, threads = native.ffi, native.lib, native.num_threads()
    fb, ff = ffi.from_buffer, (lambda a: ffi.from_buffer("float[]", a))
    for shift in range(0, 64, x.itemsize):
        raw = np.full(x.nbytes + 128, 0xA5, np.uint8)
        start = (-raw.ctypes.data) % 64 + shift
        y = raw[start:start + x.nbytes].view(x.dtype).reshape(shape)
        vec = [np.empty(channels, F32) for _ in range(2)]
        outputs = []
        assert lib.mg_bn_forward_inference(code, outer, channels, inner, fb(x), ff(s), ff(o),
                                           ff(m), ff(v), EPS, fb(y), threads) == 0
        outputs.append(y.copy())
        assert lib.mg_bn_forward_training(code, outer, channels, inner, fb(x), ff(s), ff(o),
                                          EPS, fb(y), ff(vec[0]), ff(vec[1]), threads) == 0
        outputs += [y.copy(), *(a.copy() for a in vec)]
        for backward in (lib.mg_bn_backward_training, lib.mg_bn_backward_inference):
            assert backward(code, outer, channels, inner, fb(d["dy"]), fb(x), ff(s), ff(m),
                            ff(v), EPS, fb(y), ff(vec[0]), ff(vec[1]), threads) == 0
            outputs += [y.copy(), *(a.copy() for a in vec)]
        for got, want in zip(outputs, expected, strict=True):
            assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), shift
        assert (raw[:start] == 0xA5).all() and (raw[start + x.nbytes:] == 0xA5).all()


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("shape, channels_last", [((3, 5, 7, 16), True), ((5, 3, 7, 24), True),
                                                  ((3, 5, 7, 17), True), ((2, 3, 8, 16), False),
                                                  ((2, 3, 7, 9), False), ((1, 4, 32, 32), False),
                                                  ((2, 1, 300, 301), False)], ids=str)
def test_non_temporal_stores_give_the_same_bits(isa, dtype, shape, channels_last):
    """Element passes store whole aligned vectors non-temporally when a call's tensors exceed
    the last-level cache (small here: forced on): every function's outputs are the bits of
    plain stores, with inputs and outputs at any alignment (row heads, plane segment heads,
    segments that are or are not a whole number of vectors apart, the two outputs of the
    second-order functions), nothing written outside the outputs."""
    d = make_inputs(shape, channels_last, dtype, seed=13)

    def every_function(d):
        return call_all(d, channels_last) + call_fused(d, channels_last)

    native.lib.mg_bn_set_streaming(0)
    try:
        plain = every_function(d)
        native.lib.mg_bn_set_streaming(1)
        assert_bitwise_equal(plain, every_function(d))
        for shift in (4, 16, 36):
            moved = {k: shifted_copy(v, shift) if isinstance(v, np.ndarray) and v.ndim > 1
                     else v for k, v in d.items()}
            assert_bitwise_equal(plain, every_function(moved))
    finally:
        native.lib.mg_bn_set_streaming(-1)


def call_fused(d, channels_last):
    """The fused training entry points (_FusedBatchNormEx / _FusedBatchNormGradEx): side
    input and Relu in the apply pass; the backward writes dx and the side input's gradient."""
    x, dy, gx = d["x"], d["dy"], d["gx"]
    s, o, m, v = d["scale"], d["offset"], d["mean"], d["var"]
    fused = native.bn_forward_training_ex(x, s, o, EPS, channels_last, side=dy, relu=True)
    return [fused,
            (native.bn_forward_inference_ex(x, s, o, m, v, EPS, channels_last, side=gx,
                                            relu=True),),
            native.bn_backward_training_ex(dy, x, s, m, v, fused[0], EPS, channels_last,
                                           side_backprop=True)]


def _forked_child(queue, d, expected):
    result = call_all(d, True)
    queue.put(all(np.array_equal(a.view(np.uint8), b.view(np.uint8))
                  for outs_a, outs_b in zip(result, expected, strict=True)
                  for a, b in zip(outs_a, outs_b, strict=True)))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_works_in_a_forked_child(monkeypatch):
    """The worker pool's threads do not survive fork(): in a child forked after the parent
    used them, the kernels run on one thread (same bits), and nothing hangs."""
    monkeypatch.setenv("MINIGRAPH_NUM_THREADS", "2")
    d = make_inputs((8, 16, 16, 17), True, F32, seed=8)
    expected = call_all(d, True)  # the parent uses its thread pool
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_forked_child, args=(queue, d, expected))
    child.start()
    child.join(60)
    if child.exitcode is None:
        child.kill()
        pytest.fail("the forked child hung")
    assert child.exitcode == 0 and queue.get(timeout=5)


def test_num_threads(monkeypatch):
    monkeypatch.setenv("MINIGRAPH_NUM_THREADS", "3")
    assert native.num_threads() == 3
    monkeypatch.setenv("MINIGRAPH_NUM_THREADS", "zero")
    assert native.num_threads() == (os.cpu_count() or 1)
    monkeypatch.delenv("MINIGRAPH_NUM_THREADS")
    assert native.num_threads() == (os.cpu_count() or 1)


def rss_bytes():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_no_leaks():
    d = make_inputs((4, 9, 9, 65), True, F32, seed=6)
    e = make_inputs((4, 65, 9, 9), False, BF16, seed=6)
    for _ in range(20):  # warm up allocator pools
        call_all(d, True)
        call_all(e, False)
    tracemalloc.start()
    rss_before = rss_bytes() if os.path.exists("/proc/self/statm") else 0
    snapshot = tracemalloc.take_snapshot()
    for _ in range(300):
        call_all(d, True)
        call_all(e, False)
    grown = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(snapshot, "filename"))
    tracemalloc.stop()
    assert grown < 64 * 1024
    if rss_before:
        assert rss_bytes() - rss_before < 8 * 1024 * 1024


def test_empty_and_degenerate_sizes_do_not_crash():
    s = np.ones(4, F32)
    z = np.zeros(4, F32)
    y, m, v = native.bn_forward_training(np.zeros((0, 3, 3, 4), F32), s, z, EPS, True)
    assert y.shape == (0, 3, 3, 4) and np.isnan(m).all() and np.isnan(v).all()
    dx, sb, ob = native.bn_backward_training(np.zeros((2, 4, 0, 3), BF16),
                                             np.zeros((2, 4, 0, 3), BF16), s, z, s, EPS, False)
    assert dx.shape == (2, 4, 0, 3) and not sb.any() and not ob.any()
    e = np.zeros(0, F32)
    y = native.bn_forward_inference(np.zeros((2, 0, 3, 3), F32), e, e, e, e, EPS, False)
    assert y.shape == (2, 0, 3, 3)


def test_single_element_per_channel_and_constant_channels():
    x = np.full((1, 1, 1, 5), 3.0, F32)
    scale, offset = np.ones(5, F32), np.arange(5, dtype=F32)
    y, m, v = native.bn_forward_training(x, scale, offset, EPS, True)
    assert np.array_equal(y, offset.reshape(x.shape)) and not v.any() and (m == 3).all()
    y, _, _ = native.bn_forward_training(np.ones((2, 5, 3, 3), F32), scale, offset, 0.0, False)
    assert np.isnan(y).all()  # 0 * rsqrt(0): TF gives NaN too


def test_rejects_malformed_arguments():
    x = np.zeros((2, 3, 4, 5), F32)
    s = np.ones(5, F32)
    with pytest.raises(TypeError):
        native.bn_forward_training(x.astype(F64), s, s, EPS, True)
    with pytest.raises(ValueError):
        native.bn_forward_training(x, np.ones(4, F32), s, EPS, True)
    with pytest.raises(ValueError):
        native.bn_forward_training(x[..., ::2], s[:3], s[:3], EPS, True)
    with pytest.raises(ValueError):
        native.bn_backward_training(x[:1], x, s, s, s, EPS, True)
    with pytest.raises(ValueError):
        native.bn_backward_training(x.astype(np.float16), x, s, s, s, EPS, True)
    with pytest.raises(ValueError):  # float32 elements that are not 4-byte aligned
        native.bn_forward_training(shifted_copy(x, 2), s, s, EPS, True)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("channels_last", [True, False], ids=["NHWC", "NCHW"])
def test_inference_x_backprop_is_bit_identical_to_the_reference(isa, dtype, channels_last):
    """Inference x_backprop = dy * (scale * rsqrt(variance + eps)) with the per-channel factor
    in float32 (1 / sqrt(variance + float32(eps)), then times scale), as the reference: the
    same bits, also for bfloat16 where a factor formed in double differed by one ulp."""
    from minigraph.backends import reference

    rng = np.random.default_rng(12)
    shape = (4, 9, 10, 33) if channels_last else (4, 33, 9, 10)  # 11880 elements
    x = (rng.standard_normal(shape) * 2 + 1).astype(F32).astype(dtype)
    dy = rng.standard_normal(shape).astype(F32).astype(dtype)
    scale = rng.uniform(0.1, 3, 33).astype(F32)
    mean = rng.uniform(-1, 1, 33).astype(F32)
    var = rng.uniform(0.01, 5, 33).astype(F32)
    got = native.bn_backward_inference(dy, x, scale, mean, var, EPS, channels_last)[0]
    expected = reference.bn_backward_inference(dy, x, scale, mean, var, EPS, channels_last)[0]
    assert got.dtype == expected.dtype
    assert np.array_equal(got.view(np.uint8), expected.view(np.uint8))


# ----------------------------------------------------------------------------- Sum / Mean


@pytest.mark.parametrize("isa", [i for i in native.ISAS
                                 if native.ISAS.index(i) <= native.ISAS.index(native.best_isa())])
def test_native_sum_and_mean_over_inner_axes_equal_numpy_bit_for_bit(isa):
    """Global average pooling and friends in C (math_kernels.reduce_native): the same float32
    sums as numpy (row after row; pairwise along a reduced last axis; one running sum over
    non-consecutive axes), and the same rounding of the mean, on every ISA."""
    import minigraph as mg
    from minigraph import ops

    before = native.isa()
    native.set_isa(isa)
    try:
        rng = np.random.default_rng(11)
        for shape, axes, keep in [((4, 7, 9, 16), [1, 2], False), ((2, 5, 300), [1], True),
                                  ((3, 2, 2, 2, 3), [0, 1, 2], False), ((5, 4, 1), [1], False),
                                  ((6, 4, 5), [2], False), ((3, 4, 5, 6), [0, 2], True),
                                  ((1, 70000, 2), [1], False)]:
            x = (rng.standard_normal(shape) * 10.0 ** rng.uniform(-4, 4, shape)).astype(F32)
            for op in (ops.Sum, ops.Mean):
                root = mg.Scope.NewRootScope()
                y = op(root, x, np.array(axes, np.int32), keep_dims=keep)
                ours = mg.ClientSession(root, backend="native").Run(y)
                expected = getattr(x, "sum" if op is ops.Sum else "mean")(
                    axis=tuple(axes), keepdims=keep)
                assert ours.shape == expected.shape
                np.testing.assert_array_equal(ours.view(np.uint32),
                                              expected.astype(F32).view(np.uint32))
    finally:
        native.set_isa(before)
