"""DepthwiseConv2dNative and its backprops (ops.convolution_ops, backends.convolution_kernels,
kernels_c/depthwise*): values against float64 formulas written here from TF's docs (einsum
over explicitly gathered windows), the rounding (every sum a chain of fused multiply-adds in
TF's order) against libm's fmaf, shapes and errors, native against reference bit for bit
(every ISA, any thread count), and TensorFlow 2.21 bit for bit where its kernels are
deterministic (``@pytest.mark.oracle``). The gradients are checked by finite differences in
test_nn_ops.py (NN_GRADIENT_TESTS).

Tolerances: float32 within 1e-5 of the float64 formula relative to the sum of |terms|
(conftest.assert_close); float16/bfloat16 within that plus one ulp of the type (computed in
float32, rounded once); float64 1e-12. Against TF: the forward bit for bit (float32, bfloat16,
float64), the input gradient bit for bit with SAME/VALID padding and no dilation, the filter
gradient within float32 rounding (TF's oneDNN blocks the sums its own way); float16 within
kh*kw/2 ulps of the summed |terms| (TF's Eigen kernel rounds to half after every tap).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import itertools
import os

import ml_dtypes
import numpy as np
import pytest
from conftest import BACKENDS, NATIVE_AVAILABLE, assert_close
from hypothesis import given, settings
from hypothesis import strategies as st

import minigraph as mg
from minigraph import ops
from minigraph.backends import convolution_kernels as ck
from minigraph.errors import InvalidArgumentError

F32, F64 = np.float32, np.float64
BF16 = np.dtype(ml_dtypes.bfloat16)
OPS = ("DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropInput",
       "DepthwiseConv2dNativeBackpropFilter")
needs_native = pytest.mark.skipif(not NATIVE_AVAILABLE, reason="native kernels not built")


# ----------------------------------------------------------------------------- references
# Written from TF's documentation of the ops, independently of minigraph's geometry code.


def out_and_pad(size, k, stride, dilation, padding, explicit=(0, 0)):
    """(output size, pad before, pad after) of one spatial dim."""
    k_eff = (k - 1) * dilation + 1
    if padding == "VALID":
        return (size - k_eff) // stride + 1, 0, 0
    if padding == "EXPLICIT":
        return (size + sum(explicit) - k_eff) // stride + 1, *explicit
    out = -(-size // stride)
    total = max(0, (out - 1) * stride + k_eff - size)
    return out, total // 2, total - total // 2


def windows(x, k_hw, strides, dilations, padding, explicit):
    """The zero-padded NHWC input's windows: [n, out_h, out_w, kh, kw, c] (float64)."""
    dims = [out_and_pad(x.shape[1 + a], k_hw[a], strides[a], dilations[a], padding,
                        explicit[a]) for a in (0, 1)]
    (oh, top, bottom), (ow, left, right) = dims
    xp = np.pad(x.astype(F64), ((0, 0), (top, bottom + 2 * k_hw[0] * dilations[0]),
                                (left, right + 2 * k_hw[1] * dilations[1]), (0, 0)))
    rows = np.arange(oh)[:, None] * strides[0] + np.arange(k_hw[0]) * dilations[0]
    cols = np.arange(ow)[:, None] * strides[1] + np.arange(k_hw[1]) * dilations[1]
    return xp[:, rows[:, None, :, None], cols[None, :, None, :]], (top, left)


def depthwise_f64(x, f, strides=(1, 1), dilations=(1, 1), padding="VALID",
                  explicit=((0, 0), (0, 0))):
    """y[n, p, q, c*M + m] = sum_{i, j} window[n, p, q, i, j, c] * f[i, j, c, m]."""
    win, _ = windows(x, f.shape[:2], strides, dilations, padding, explicit)
    y = np.einsum("npqijc,ijcm->npqcm", win, f.astype(F64))
    return y.reshape(*y.shape[:3], -1)


def depthwise_filter_grad_f64(x, dy, f_shape, strides, dilations, padding, explicit):
    """df[i, j, c, m] = sum_{n, p, q} window[n, p, q, i, j, c] * dy[n, p, q, c*M + m]."""
    win, _ = windows(x, f_shape[:2], strides, dilations, padding, explicit)
    dyr = dy.astype(F64).reshape(*dy.shape[:3], f_shape[2], f_shape[3])
    return np.einsum("npqijc,npqcm->ijcm", win, dyr)


def depthwise_input_grad_f64(x_shape, f, dy, strides, dilations, padding, explicit):
    """dx = the forward's adjoint: each out_backprop pixel scattered through its window."""
    n, h, w, c = x_shape
    kh, kw, _, mult = f.shape
    dyr = dy.astype(F64).reshape(*dy.shape[:3], c, mult)
    _, (top, left) = windows(np.zeros(x_shape), (kh, kw), strides, dilations, padding,
                             explicit)
    dx = np.zeros(x_shape)
    for p, q, i, j in itertools.product(range(dy.shape[1]), range(dy.shape[2]), range(kh),
                                        range(kw)):
        r = p * strides[0] + i * dilations[0] - top
        s = q * strides[1] + j * dilations[1] - left
        if 0 <= r < h and 0 <= s < w:
            dx[:, r, s] += (dyr[:, p, q] * f[i, j].astype(F64)).sum(-1)
    return dx


# ----------------------------------------------------------------------------- helpers


def to_fmt(a, fmt):
    return a if fmt == "NHWC" else np.ascontiguousarray(a.transpose(0, 3, 1, 2))


def from_fmt(a, fmt):
    return a if fmt == "NHWC" else np.ascontiguousarray(a.transpose(0, 2, 3, 1))


def attrs_for(fmt, strides, dilations, padding, explicit):
    """The ops' attrs in ``fmt`` order from NHWC-style (h, w) pairs."""
    def hw(a, b):
        return [1, a, b, 1] if fmt == "NHWC" else [1, 1, a, b]
    attrs = {"strides": hw(*strides), "dilations": hw(*dilations), "padding": padding,
             "data_format": fmt}
    if padding == "EXPLICIT":
        pads = [0, 0, *explicit[0], *explicit[1], 0, 0]
        attrs["explicit_paddings"] = pads if fmt == "NHWC" else pads[:2] + pads[6:] + pads[2:6]
    return attrs


def run_all(x, f, dy, attrs, backend, dtype=None):
    """(y, dx, df) of the three ops (inputs in attrs' data_format), on ``backend``."""
    root = mg.Scope.NewRootScope()
    fetches = [ops.DepthwiseConv2dNative(root, x, f, **attrs),
               ops.DepthwiseConv2dNativeBackpropInput(root, list(x.shape), f, dy, **attrs),
               ops.DepthwiseConv2dNativeBackpropFilter(root, x, list(f.shape), dy, **attrs)]
    return mg.ClientSession(root, backend=backend).Run({}, fetches)


def expected_all(x, f, dy, strides, dilations, padding, explicit):
    """float64 (y, dx, df) and the sums of |terms| (the tolerances' magnitudes); NHWC."""
    geo = (strides, dilations, padding, explicit)
    exact = (depthwise_f64(x, f, *geo), depthwise_input_grad_f64(x.shape, f, dy, *geo),
             depthwise_filter_grad_f64(x, dy, f.shape, *geo))
    ax, af, ady = (np.abs(a.astype(F64)) for a in (x, f, dy))
    mags = (depthwise_f64(ax, af, *geo), depthwise_input_grad_f64(x.shape, af, ady, *geo),
            depthwise_filter_grad_f64(ax, ady, f.shape, *geo))
    return exact, mags


def bits(a):
    a = np.ascontiguousarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def assert_bitwise(actual, expected, what):
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, what
    differ = bits(actual) != bits(expected)
    assert not differ.any(), f"{what}: {int(differ.sum())} of {differ.size} elements differ"


# ----------------------------------------------------------------------------- values

# (x NHWC, filter [kh, kw, c, mult], strides, dilations, padding, explicit pads)
CASES = [
    ((2, 7, 6, 3), (3, 3, 3, 1), (1, 1), (1, 1), "SAME", None),
    ((2, 7, 6, 3), (3, 3, 3, 2), (2, 2), (1, 1), "SAME", None),
    ((1, 8, 9, 4), (3, 2, 4, 3), (1, 2), (1, 1), "VALID", None),
    ((2, 9, 7, 2), (3, 3, 2, 1), (1, 1), (2, 2), "SAME", None),
    ((1, 9, 9, 5), (2, 3, 5, 2), (2, 1), (2, 3), "VALID", None),
    ((2, 6, 7, 3), (3, 3, 3, 1), (1, 1), (1, 1), "EXPLICIT", ((1, 2), (3, 0))),
    ((1, 7, 7, 2), (3, 3, 2, 2), (2, 2), (1, 1), "EXPLICIT", ((0, 1), (4, 1))),
    ((1, 3, 4, 17), (5, 5, 17, 1), (1, 1), (1, 1), "SAME", None),
    ((3, 5, 5, 1), (1, 1, 1, 4), (1, 1), (1, 1), "VALID", None),
]


def case_id(case):
    return f"{case[4]}-s{case[2]}-d{case[3]}-f{case[1]}"


def draw(case, dtype, seed=0):
    x_shape, f_shape, strides, dilations, padding, explicit = case
    explicit = explicit or ((0, 0), (0, 0))
    rng = np.random.default_rng(seed + sum(x_shape) + 7 * sum(f_shape))
    x = rng.standard_normal(x_shape).astype(F32).astype(dtype)
    f = rng.standard_normal(f_shape).astype(F32).astype(dtype)
    y_hw = [out_and_pad(x_shape[1 + a], f_shape[a], strides[a], dilations[a], padding,
                        explicit[a])[0] for a in (0, 1)]
    dy = rng.standard_normal((x_shape[0], *y_hw, f_shape[2] * f_shape[3])).astype(F32)
    return x, f, dy.astype(dtype), (strides, dilations, padding, explicit)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fmt", ("NHWC", "NCHW"))
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_values_match_float64_formula(case, fmt, backend):
    x, f, dy, geo = draw(case, F32)
    attrs = attrs_for(fmt, *geo)
    got = run_all(to_fmt(x, fmt), f, to_fmt(dy, fmt), attrs, backend)
    exact, mags = expected_all(x, f, dy, *geo)
    for name, a, e, m in zip(OPS, got, exact, mags):
        a = a if name.endswith("Filter") else from_fmt(a, fmt)
        assert_close(a, e, dtype=F32, mag=float(m.max()), what=f"{name} {backend} {fmt}")


@pytest.mark.parametrize("dtype", [np.float16, BF16, F64], ids=str)
@pytest.mark.parametrize("case", CASES[:6:2], ids=case_id)
def test_other_dtypes(case, dtype):
    """float16/bfloat16: computed in float32, rounded once; float64 stays float64."""
    x, f, dy, geo = draw(case, dtype)
    got = run_all(x, f, dy, attrs_for("NHWC", *geo), "reference")
    exact, mags = expected_all(x, f, dy, *geo)
    for name, a, e, m in zip(OPS, got, exact, mags):
        assert_close(a, e, dtype=dtype, mag=float(m.max()), what=f"{name} {dtype}")


def test_output_channel_order():
    """Output channel c * multiplier + m is input channel c through filter column m."""
    x = np.zeros((1, 1, 1, 2), F32)
    x[..., 0], x[..., 1] = 1, 10
    f = np.array([1, 2, 3, 4, 5, 6], F32).reshape(1, 1, 2, 3)
    y = run_all(x, f, np.ones((1, 1, 1, 6), F32), attrs_for("NHWC", (1, 1), (1, 1),
                                                             "VALID", None), "reference")[0]
    np.testing.assert_array_equal(y.ravel(), [1, 2, 3, 40, 50, 60])


# ----------------------------------------------------------------------------- rounding


def _libm_fmaf():
    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    libm.fmaf.restype = ctypes.c_float
    libm.fmaf.argtypes = [ctypes.c_float] * 3
    return libm.fmaf


def test_fma_emulation_rounds_once():
    """_fma_f32 against libm's fmaf bit for bit: random values, exact halfway cases (the
    float64 sum alone would round twice), cancellations, subnormal results, signed zeros and
    overflow."""
    fmaf = _libm_fmaf()
    rng = np.random.default_rng(3)
    a = rng.standard_normal(4000).astype(F32)
    b = (rng.standard_normal(4000) * np.exp2(rng.integers(-30, 30, 4000))).astype(F32)
    acc = (rng.standard_normal(4000) * np.exp2(rng.integers(-40, 40, 4000))).astype(F32)
    one_ulp = np.float32(2.0 ** -23)
    tie = np.float32(1 + 2.0 ** -12)  # (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24: a float32 tie
    special = [(tie, tie, np.float32(0)), (tie, -tie, np.float32(1)), (one_ulp, one_ulp, 1),
               (1e-30, 1e-30, 0), (-1e-30, 1e-30, 0), (-0.0, 5, 0), (3e38, 10, 0),
               (1e-20, -1e-20, 1e-40), (np.inf, 1, 5), (np.inf, 0, 1), (2, 3, np.nan)]
    a = np.append(a, [s[0] for s in special]).astype(F32)
    b = np.append(b, [s[1] for s in special]).astype(F32)
    acc = np.append(acc, [s[2] for s in special]).astype(F32)
    with np.errstate(all="ignore"):
        got = ck._fma_f32(acc, a, b)
    want = np.array([fmaf(*map(float, t)) for t in zip(a, b, acc)], F32)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    finite = ~np.isnan(want)
    assert_bitwise(got[finite], want[finite], "fma emulation")


@pytest.mark.parametrize("backend", BACKENDS)
def test_forward_is_a_fused_chain_in_tap_order(backend):
    """float32 y = fmaf chain from +0 over the taps inside the input, row-major (what TF's
    oneDNN kernel computes), checked element by element with libm's fmaf."""
    fmaf = _libm_fmaf()
    x, f, dy, geo = draw(((1, 5, 6, 3), (3, 3, 3, 2), (2, 1), (1, 2), "SAME", None), F32)
    y = run_all(x, f, dy, attrs_for("NHWC", *geo), backend)[0]
    (sh, sw), (dh, dw) = geo[0], geo[1]
    _, (top, left) = windows(x, (3, 3), *geo)
    want = np.zeros_like(y)
    for p, q, c, m in itertools.product(*map(range, (*y.shape[1:3], 3, 2))):
        acc = 0.0
        for i, j in itertools.product(range(3), range(3)):
            r, s = p * sh + i * dh - top, q * sw + j * dw - left
            if 0 <= r < 5 and 0 <= s < 6:
                acc = fmaf(float(x[0, r, s, c]), float(f[i, j, c, m]), acc)
        want[0, p, q, c * 2 + m] = acc
    assert_bitwise(y, want, backend)


# ----------------------------------------------------------------------------- shapes, errors


def ph(root, name, shape, dtype=mg.float32):
    return ops.Placeholder(root.WithOpName(name), dtype, shape=shape)


def test_static_shapes():
    root = mg.Scope.NewRootScope()
    x, f = ph(root, "x", (2, 7, 6, 3)), ph(root, "f", (3, 3, 3, 2))
    same2 = {"strides": [1, 2, 2, 1], "padding": "SAME"}
    assert ops.DepthwiseConv2dNative(root, x, f, **same2).shape == (2, 4, 3, 6)
    nchw = ops.DepthwiseConv2dNative(root, ph(root, "xc", (2, 3, 7, 6)), f,
                                     strides=[1, 1, 2, 2], padding="VALID", data_format="NCHW")
    assert nchw.shape == (2, 6, 3, 2)
    loose = ops.DepthwiseConv2dNative(root, ph(root, "u", (None, None, 9, None)),
                                      ph(root, "fu", (3, 3, None, 4)), **same2)
    assert loose.shape.as_list() == [None, None, 5, None]
    sizes = ops.Shape(root, x)
    dy = ph(root, "dy", (2, 4, 3, 6))
    assert ops.DepthwiseConv2dNativeBackpropInput(root, sizes, f, dy, **same2).shape == x.shape
    unknown = ops.DepthwiseConv2dNativeBackpropInput(root, ph(root, "s", (4,), mg.int32), f,
                                                     dy, **same2)
    assert unknown.shape.as_list() == [2, None, None, 3]
    assert ops.DepthwiseConv2dNativeBackpropFilter(root, x, [3, 3, 3, 2], dy,
                                                   **same2).shape == (3, 3, 3, 2)
    inferred = ops.DepthwiseConv2dNativeBackpropFilter(root, x, ph(root, "fs", (4,), mg.int32),
                                                       dy, **same2)
    assert inferred.shape.as_list() == [None, None, 3, 2]


def raises(fragment):
    return pytest.raises(InvalidArgumentError, match=fragment)


def test_construction_errors_name_op_and_input():
    root = mg.Scope.NewRootScope()
    x, f = ph(root, "x", (2, 8, 8, 3)), ph(root, "f", (3, 3, 3, 2))
    one = {"strides": [1, 1, 1, 1], "padding": "SAME"}
    with raises(r"DepthwiseConv2dNative 'DepthwiseConv2dNative': Dimensions must be equal, but "
                r"are 3 and 4: input 'input' has 3 channels .* input 'filter' has "
                r"in_channels 4 \(dimension 2 of \[filter_height, filter_width, in_channels, "
                r"channel_multiplier\]"):
        ops.DepthwiseConv2dNative(root, x, ph(root, "f4", (3, 3, 4, 2)), **one)
    with raises(r"Shape must be rank 4 but is rank 3: input 'filter' must be rank 4 "
                r"\(\[filter_height"):
        ops.DepthwiseConv2dNative(root, x, ph(root, "f3", (3, 3, 3)), **one)
    with raises(r"input 'input' must be rank 4 \(data_format NHWC\)"):
        ops.DepthwiseConv2dNative(root, ph(root, "x3", (8, 8, 3)), f, **one)
    with raises(r"Negative dimension size caused by subtracting 3 from 1: .*the height of "
                r"input 'input'"):
        ops.DepthwiseConv2dNative(root, ph(root, "x1", (1, 1, 8, 3)), f, strides=[1, 1, 1, 1],
                                  padding="VALID")
    with raises(r"filter must not have zero elements .* input 'filter' has shape \[3,3,3,0\]"):
        ops.DepthwiseConv2dNative(root, x, ph(root, "f0", (3, 3, 3, 0)), **one)
    with raises(r"Current implementation does not yet support strides in the batch and depth"):
        ops.DepthwiseConv2dNative(root, x, f, strides=[2, 1, 1, 1], padding="SAME")
    with raises(r"attr 'explicit_paddings' must contain 8 values"):
        ops.DepthwiseConv2dNative(root, x, f, strides=[1, 1, 1, 1], padding="EXPLICIT",
                                  explicit_paddings=[1, 1, 1, 1])
    with raises(r"input 'input' has dtype int32, not in the allowed values"):
        ops.DepthwiseConv2dNative(root, np.ones((1, 3, 3, 1), np.int32),
                                  np.ones((1, 1, 1, 1), np.int32), **one)
    with raises(r"DepthwiseConv2dNative: unknown attr\(s\) \['use_cudnn_on_gpu'\]"):
        ops.DepthwiseConv2dNative(root, x, f, use_cudnn_on_gpu=True, **one)


def test_backprop_construction_errors():
    root = mg.Scope.NewRootScope()
    f = ph(root, "f", (3, 3, 3, 2))
    two = {"strides": [1, 2, 2, 1], "padding": "SAME"}
    with raises(r"DepthwiseConv2dNativeBackpropInput .*depth_multiplier \* in_depth not equal "
                r"to out_depth: input 'out_backprop' has depth 5 .* \(3 \* 2\): 6"):
        ops.DepthwiseConv2dNativeBackpropInput(root, [2, 8, 8, 3], f,
                                               ph(root, "dy", (2, 4, 4, 5)), **two)
    with raises(r"Size of out_backprop doesn't match computed: actual = 3, computed = 4 .* "
                r"input 'out_backprop' has height 3"):
        ops.DepthwiseConv2dNativeBackpropInput(root, [2, 8, 8, 3], f,
                                               ph(root, "dy2", (2, 3, 4, 6)), **two)
    with raises(r"Shape must be rank 4 but is rank 2: input 'input_sizes' must have 4 "
                r"elements, got 2"):
        ops.DepthwiseConv2dNativeBackpropInput(root, [8, 8], f, ph(root, "dy3", (2, 4, 4, 6)),
                                               **two)
    with raises(r"Dimensions must be equal, but are 4 and 3: input 'input_sizes' has 4 "
                r"channels"):
        ops.DepthwiseConv2dNativeBackpropInput(root, [2, 8, 8, 4], f,
                                               ph(root, "dy4", (2, 4, 4, 6)), **two)
    with raises(r"DepthwiseConv2dNativeBackpropFilter .*input and out_backprop must have the "
                r"same batch size"):
        ops.DepthwiseConv2dNativeBackpropFilter(root, ph(root, "x", (2, 8, 8, 3)), [3, 3, 3, 2],
                                                ph(root, "dy5", (3, 4, 4, 6)), **two)
    with raises(r"Dimension -3 must be >= 0: input 'filter_sizes' must be non-negative"):
        ops.DepthwiseConv2dNativeBackpropFilter(root, ph(root, "x2", (2, 8, 8, 3)),
                                                [3, -3, 3, 2], ph(root, "dy6", (2, 4, 4, 6)),
                                                **two)


@pytest.mark.parametrize("backend", BACKENDS)
def test_run_time_errors(backend):
    """Shapes only the data shows are checked at Run with the same messages."""
    root = mg.Scope.NewRootScope()
    x, f = ph(root, "x", None), ph(root, "f", None)
    y = ops.DepthwiseConv2dNative(root, x, f, strides=[1, 1, 1, 1], padding="SAME")
    sizes, dy = ph(root, "sizes", None, mg.int32), ph(root, "dy", None)
    dx = ops.DepthwiseConv2dNativeBackpropInput(root, sizes, f, dy, strides=[1, 1, 1, 1],
                                                padding="SAME")
    session = mg.ClientSession(root, backend=backend)
    with raises(r"DepthwiseConv2dNative 'DepthwiseConv2dNative': Dimensions must be equal, but "
                r"are 3 and 2"):
        session.Run({x: np.ones((1, 4, 4, 3), F32), f: np.ones((3, 3, 2, 1), F32)}, y)
    with raises(r"DepthwiseConv2dNativeBackpropInput .*input 'input_sizes' must be "
                r"non-negative"):
        session.Run({sizes: [1, -4, 4, 3], f: np.ones((3, 3, 3, 1), F32),
                     dy: np.ones((1, 4, 4, 3), F32)}, dx)


def test_empty_tensors():
    x, f, dy, geo = draw(((0, 5, 5, 3), (3, 3, 3, 2), (1, 1), (1, 1), "SAME", None), F32)
    for backend in BACKENDS:
        y, dx, df = run_all(x, f, dy, attrs_for("NHWC", *geo), backend)
        assert y.shape == (0, 5, 5, 6) and dx.shape == x.shape
        assert_bitwise(df, np.zeros(f.shape, F32), f"{backend} filter gradient of no images")


@pytest.mark.parametrize("attrs", [
    {"strides": [1, 2**40, 2**40, 1], "padding": "SAME"},
    {"strides": [1, 2**62, 1, 1], "padding": "VALID"},
    {"strides": [1, 1, 1, 1], "padding": "SAME", "dilations": [1, 2**40, 1, 1]},
    {"strides": [1, 1, 1, 1], "padding": "EXPLICIT",
     "explicit_paddings": [0, 0, 2**40, 0, 0, 0, 0, 0]}], ids=str)
def test_absurd_geometry_computes_or_is_refused(attrs):
    """Strides, dilations and paddings far beyond the tensors: the same results on every
    backend (the C kernels hand sizes >= 2**31 to numpy), or a ResourceExhaustedError
    naming the op before anything is allocated."""
    x, f = np.ones((1, 3, 3, 2), F32), np.ones((2, 2, 2, 1), F32)
    results = []
    for backend in BACKENDS:
        root = mg.Scope.NewRootScope()
        y = ops.DepthwiseConv2dNative(root, x, f, **attrs)
        dy = ops.OnesLike(root, y)
        fetches = [y, ops.DepthwiseConv2dNativeBackpropInput(root, list(x.shape), f, dy, **attrs),
                   ops.DepthwiseConv2dNativeBackpropFilter(root, x, list(f.shape), dy, **attrs)]
        try:
            results.append(mg.ClientSession(root, backend=backend).Run({}, fetches))
        except mg.errors.ResourceExhaustedError as error:
            assert "DepthwiseConv2dNative 'DepthwiseConv2dNative': output 0" in str(error)
            results.append(None)
    for other in results[1:]:
        assert (other is None) == (results[0] is None)
        for a, b in zip(other or (), results[0] or ()):
            assert_bitwise(a, b, str(attrs))


# ----------------------------------------------------------------------------- native


NATIVE_CASES = [  # channels 1..200 (vector tails), strides, dilations, EXPLICIT, multipliers
    ((2, 9, 9, 16), (3, 3, 16, 1), (1, 1), (1, 1), "SAME", None),
    ((3, 12, 11, 48), (3, 3, 48, 1), (2, 2), (1, 1), "SAME", None),
    ((2, 10, 10, 200), (3, 3, 200, 1), (1, 1), (1, 1), "VALID", None),
    ((2, 7, 9, 17), (3, 3, 17, 1), (2, 1), (1, 1), "VALID", None),
    ((1, 13, 14, 8), (3, 3, 8, 1), (1, 1), (2, 3), "SAME", None),
    ((2, 6, 20, 33), (5, 5, 33, 1), (1, 2), (1, 1), "SAME", None),
    ((1, 8, 8, 5), (3, 3, 5, 3), (1, 1), (1, 1), "EXPLICIT", ((2, 0), (1, 4))),
    ((2, 5, 6, 1), (2, 4, 1, 7), (3, 2), (1, 1), "SAME", None),
    ((1, 4, 30, 96), (1, 1, 96, 2), (1, 1), (1, 1), "VALID", None),
    ((1, 3, 3, 24), (7, 7, 24, 1), (1, 1), (1, 1), "EXPLICIT", ((5, 5), (0, 7))),
    ((1, 9, 41, 6), (3, 3, 6, 2), (2, 2), (2, 2), "SAME", None),
    ((2, 5, 50, 19), (3, 4, 19, 1), (3, 3), (1, 2), "EXPLICIT", ((2, 1), (3, 0))),
]


def native_vs_reference(case, seed=0):
    x, f, dy, geo = draw(case, F32, seed)
    attrs = attrs_for("NHWC", *geo)
    return run_all(x, f, dy, attrs, "native"), run_all(x, f, dy, attrs, "reference")


@needs_native
@pytest.mark.parametrize("case", NATIVE_CASES, ids=case_id)
def test_native_matches_reference_bitwise(case):
    got, ref = native_vs_reference(case)
    for name, a, r in zip(OPS, got, ref):
        assert_bitwise(a, r, f"{name} {case_id(case)}")


@needs_native
@pytest.mark.parametrize("case", NATIVE_CASES, ids=case_id)
def test_native_nchw_matches_reference_bitwise(case):
    """NCHW runs the same C kernels (the tensors transposed around them): the reference's
    bits too."""
    x, f, dy, geo = draw(case, F32, 0)
    attrs = attrs_for("NCHW", *geo)
    got, ref = (run_all(to_fmt(x, "NCHW"), f, to_fmt(dy, "NCHW"), attrs, backend)
                for backend in ("native", "reference"))
    for name, a, r in zip(OPS, got, ref):
        assert_bitwise(a, r, f"{name} NCHW {case_id(case)}")


@pytest.fixture
def restore_isa():
    from minigraph.backends import native
    before = native.isa()
    yield native
    native.set_isa(before)


@needs_native
def test_every_isa_and_thread_count(restore_isa, monkeypatch):
    """Each ISA's loops (and 1, 2, 3 threads) give the reference's bits."""
    native = restore_isa
    big = ((4, 24, 24, 64), (3, 3, 64, 1), (1, 1), (1, 1), "SAME", None)  # 3 threads' work
    # narrow maps of many channels: single pixels, several channel vectors at a time
    wide = [((2, 5, 5, 139), (3, 3, 139, 1), (1, 1), (1, 1), "SAME", None),
            ((1, 4, 6, 136), (3, 3, 136, 2), (2, 1), (1, 1), "SAME", None)]
    cases = [NATIVE_CASES[i] for i in (1, 3, 6, 9)] + [big, *wide]
    expected = [native_vs_reference(case)[1] for case in cases]
    isas = native.ISAS[:native.ISAS.index(native.best_isa()) + 1]
    for isa, threads in itertools.product(isas, ("1", "2", "3")):
        assert native.set_isa(isa) == isa
        monkeypatch.setenv("MINIGRAPH_NUM_THREADS", threads)
        for case, ref in zip(cases, expected):
            got, _ = native_vs_reference(case)
            for name, a, r in zip(OPS, got, ref):
                assert_bitwise(a, r, f"{name} {isa} {threads} threads {case_id(case)}")


@st.composite
def filter_grad_cases(draw_from):
    """3x3 and 5x5 depthwise geometries (the filter gradients that keep their sums in
    registers) around the filter gradient's interior pixels (those whose window lies inside
    the input run without per-tap checks): maps from narrower than the
    window to a few vectors wide, strides 1-3, dilations 1-2, SAME / VALID / EXPLICIT pads
    up to 3 (asymmetric), channels across a vector's end, multipliers 1-2."""
    strides = (draw_from(st.integers(1, 3)), draw_from(st.integers(1, 3)))
    dilations = (draw_from(st.integers(1, 2)), draw_from(st.integers(1, 2)))
    padding = draw_from(st.sampled_from(["SAME", "VALID", "EXPLICIT"]))
    explicit = tuple((draw_from(st.integers(0, 3)), draw_from(st.integers(0, 3)))
                     for _ in range(2)) if padding == "EXPLICIT" else None
    k = draw_from(st.sampled_from([3, 5]))
    reach = [(k - 1) * d + 1 for d in dilations]
    pads = [sum(pair) for pair in explicit] if explicit else [0, 0]
    least = [1 if padding == "SAME" else max(1, r - p) for r, p in zip(reach, pads)]
    hw = [draw_from(st.integers(lo, lo + 12)) for lo in least]
    c, mult = draw_from(st.sampled_from([1, 5, 16, 17, 33])), draw_from(st.integers(1, 2))
    return ((draw_from(st.integers(1, 2)), *hw, c), (k, k, c, mult), strides, dilations,
            padding, explicit)


@needs_native
@settings(max_examples=40, deadline=None)
@given(case=filter_grad_cases())
def test_native_filter_gradient_interior_matches_reference_bitwise(case):
    """Every ISA's loops give the reference's bits."""
    from minigraph.backends import native

    before = native.isa()
    try:
        for isa in native.ISAS[:native.ISAS.index(native.best_isa()) + 1]:
            assert native.set_isa(isa) == isa
            got, ref = native_vs_reference(case)
            for name, a, r in zip(OPS, got, ref):
                assert_bitwise(a, r, f"{name} {isa} {case_id(case)}")
    finally:
        native.set_isa(before)


@needs_native
def test_native_kernel_choice():
    """float32 runs in C (NCHW transposed to NHWC around it); other dtypes on the numpy
    kernels."""
    for fmt, dtype, kernel in (("NHWC", F32, "native:convolution_kernels.depthwise_conv2d_native"),
                               ("NCHW", F32, "native:convolution_kernels.depthwise_conv2d_native"),
                               ("NHWC", F64, "reference:convolution_kernels.depthwise_conv2d")):
        root = mg.Scope.NewRootScope()
        x = ops.Const(root, np.ones((1, 4, 4, 2), dtype))
        ops.DepthwiseConv2dNative(root.WithOpName("dw"), x, np.ones((3, 3, 4 if fmt == "NCHW"
                                                                      else 2, 1), dtype),
                                  strides=[1, 1, 1, 1], padding="SAME", data_format=fmt)
        metadata = mg.RunMetadata()
        mg.ClientSession(root, backend="native").Run({}, ["dw:0"], run_metadata=metadata)
        assert metadata.kernel_of("dw") == kernel


@needs_native
def test_c_wrappers_check_buffers():
    """The C wrappers refuse arrays that do not match what C reads and writes."""
    x, f, dy, geo = draw(NATIVE_CASES[0], F32)
    from minigraph.ops.convolution_ops import depthwise_geometry
    window = depthwise_geometry(attrs_for("NHWC", *geo), ValueError, x.shape, f.shape)
    with pytest.raises(ValueError, match="filter shape"):
        ck.c_depthwise(x, f[:, :, :8], window)
    with pytest.raises(ValueError, match="out_backprop shape"):
        ck.c_depthwise_backprop_input(dy[:, :-1], f, x.shape[1:3], window)
    with pytest.raises(ValueError, match="out_backprop shape"):
        ck.c_depthwise_backprop_filter(x[1:], dy, f.shape, window)
    with pytest.raises(ValueError, match="must be 4-dimensional"):
        ck.c_depthwise(x[0], f, window)
    with pytest.raises(ValueError, match=r"outside \[0, 2\*\*31\)"):
        ck.c_depthwise_backprop_input(dy, f, (-1, 9), window)


# ----------------------------------------------------------------------------- TensorFlow


TF_CASES = CASES[:5] + [CASES[7], ((2, 9, 9, 48), (3, 3, 48, 1), (2, 2), (1, 1), "SAME", None)]


def _tf():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return pytest.importorskip("tensorflow")


def tf_all(tf, x, f, dy, attrs):
    """TF's (y, dx, df); the backprops only without dilation (TF 2.21's oneDNN backprops
    fail or go wrong with dilated windows; its Eigen ones refuse them)."""
    raw = tf.raw_ops
    y = raw.DepthwiseConv2dNative(input=x, filter=f, **attrs).numpy()
    if set(attrs["dilations"]) != {1}:
        return (y,)
    return (y, raw.DepthwiseConv2dNativeBackpropInput(input_sizes=list(x.shape), filter=f,
                                                      out_backprop=dy, **attrs).numpy(),
            raw.DepthwiseConv2dNativeBackpropFilter(input=x, filter_sizes=list(f.shape),
                                                    out_backprop=dy, **attrs).numpy())


@pytest.mark.oracle
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [F32, BF16], ids=str)
@pytest.mark.parametrize("fmt", ("NHWC", "NCHW"))
@pytest.mark.parametrize("case", TF_CASES, ids=case_id)
def test_against_tensorflow(case, fmt, dtype, backend):
    """The forward bit for bit; without dilation the input gradient bit for bit and the
    filter gradient within float32 rounding (dilated backprops: against the formulas above
    and TF's autodiff below)."""
    tf = _tf()
    x, f, dy, geo = draw(case, dtype, seed=1)
    attrs = attrs_for(fmt, *geo)
    xs, dys = to_fmt(x, fmt), to_fmt(dy, fmt)
    ours, theirs = run_all(xs, f, dys, attrs, backend), tf_all(tf, xs, f, dys, attrs)
    assert_bitwise(ours[0], theirs[0], "forward")
    if len(theirs) == 1:
        return
    assert_bitwise(ours[1], theirs[1], "input gradient")
    _, mags = expected_all(x.astype(F32), f.astype(F32), dy.astype(F32), *geo)
    assert_close(ours[2], theirs[2].astype(F64), dtype=dtype, mag=float(mags[2].max()),
                 what="filter gradient")


# TF's Eigen kernels (float64, float16) take NHWC, equal strides and no dilation.
EIGEN_CASES = [CASES[i] for i in (0, 1, 5, 6, 7)]


@pytest.mark.oracle
@pytest.mark.parametrize("case", EIGEN_CASES, ids=case_id)
def test_float64_and_explicit_padding_against_tensorflow(case):
    """float64 (TF's Eigen kernel) bit for bit on the forward; the backprops, and the
    float32 backprops with EXPLICIT padding (another TF kernel, another order), within
    rounding."""
    tf = _tf()
    for dtype, rtol in ((F64, 1e-12), (F32, 1e-5)):
        x, f, dy, geo = draw(case, dtype, seed=2)
        attrs = attrs_for("NHWC", *geo)
        ours, theirs = run_all(x, f, dy, attrs, "reference"), tf_all(tf, x, f, dy, attrs)
        if dtype == F64:
            assert_bitwise(ours[0], theirs[0], "float64 forward")
        _, mags = expected_all(x, f, dy, *geo)
        for name, a, t, m in zip(OPS, ours, theirs, mags):
            assert_close(a, t, dtype=dtype, rtol=rtol, mag=float(m.max()), what=name)


@pytest.mark.oracle
@pytest.mark.parametrize("case", EIGEN_CASES, ids=case_id)
def test_float16_against_tensorflow(case):
    """TF's float16 kernel (Eigen) rounds to half after every tap; minigraph rounds once:
    within kh*kw/2 ulps of half at the magnitude of the summed |terms|."""
    tf = _tf()
    x, f, dy, geo = draw(case, np.float16, seed=3)
    attrs = attrs_for("NHWC", *geo)
    ours = run_all(x, f, dy, attrs, "reference")[0].astype(F64)
    theirs = tf.raw_ops.DepthwiseConv2dNative(input=x, filter=f, **attrs).numpy().astype(F64)
    mag = expected_all(x, f, dy, *geo)[1][0]
    ulp = np.exp2(np.floor(np.log2(np.maximum(mag, 2.0 ** -14))) - 10)
    taps = f.shape[0] * f.shape[1]
    assert np.all(np.abs(ours - theirs) <= taps / 2 * ulp)


@pytest.mark.oracle
def test_dilated_gradients_against_tensorflow_autodiff():
    """TF's own gradient of a dilated depthwise convolution (tf.nn.depthwise_conv2d runs it
    as space-to-batch around undilated ops) agrees with minigraph's dilated backprops."""
    tf = _tf()
    x, f, dy, geo = draw(((2, 9, 8, 3), (3, 3, 3, 2), (1, 1), (2, 2), "SAME", None), F32)
    attrs = attrs_for("NHWC", *geo)
    xt, ft = tf.constant(x), tf.constant(f)
    with tf.GradientTape() as tape:
        tape.watch([xt, ft])
        y = tf.nn.depthwise_conv2d(xt, ft, [1, 1, 1, 1], "SAME", dilations=[2, 2])
        loss = tf.reduce_sum(y * dy)
    theirs = tape.gradient(loss, [xt, ft])
    ours = run_all(x, f, dy, attrs, "reference")
    _, mags = expected_all(x, f, dy, *geo)
    for a, t, m, what in ((ours[1], theirs[0], mags[1], "input"), (ours[2], theirs[1],
                                                                    mags[2], "filter")):
        assert_close(a, t.numpy().astype(F64), dtype=F32, mag=float(m.max()), what=what)


@pytest.mark.oracle
@pytest.mark.parametrize("backend", BACKENDS)
def test_imported_tensorflow_graph_runs_bit_for_bit(backend):
    """A TF graph of depthwise layers (what tf.nn.depthwise_conv2d writes) imports and gives
    TF's output bits."""
    tf = _tf()
    rng = np.random.default_rng(4)
    f1, f2 = (rng.standard_normal((3, 3, 16, m)).astype(F32) for m in (1, 2))

    @tf.function(input_signature=[tf.TensorSpec((4, 24, 24, 16), tf.float32)])
    def net(x):
        h = tf.nn.relu6(tf.nn.depthwise_conv2d(x, f1, [1, 1, 1, 1], "SAME"))
        return tf.nn.depthwise_conv2d(h, f2, [1, 2, 2, 1], "VALID")

    graph_fn = net.get_concrete_function()
    x = rng.standard_normal((4, 24, 24, 16)).astype(F32)
    graph = mg.import_graph_def(graph_fn.graph.as_graph_def()).graph()
    ours = mg.ClientSession(graph, backend=backend).Run(
        {graph.get_tensor_by_name("x:0"): x}, graph.get_tensor_by_name(graph_fn.outputs[0].name))
    assert_bitwise(ours, net(tf.constant(x)).numpy(), "imported graph")
