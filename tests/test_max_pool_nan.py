"""The max-pool family on NaN, infinities and signed zeros: TF 2.21's CPU rules, bit for bit,
on every backend and ISA.

* MaxPool / MaxPool3D: from the dtype's lowest finite value (-FLT_MAX; bfloat16: -inf), each
  in-bounds element of the window in row-major order replaces the maximum when strictly
  greater: NaN is ignored, -inf never wins, an all-NaN window gives -FLT_MAX and of equal
  zeros the first is kept.
* MaxPoolGrad: each output's gradient goes to the window's first element, replaced by a
  later one only when strictly greater (a NaN first element keeps it; an all-NaN window
  routes to its first element). orig_output is not read.
* MaxPoolGradGrad / MaxPool3DGradGrad: grad at the window's first element equal to
  orig_output (0 if none: all-NaN windows). MaxPool3DGrad: every element within 1e-5 of
  orig_output.

The references are scalar loops written from those rules (independent of the kernels);
``oracle`` tests run TF itself on the same hypothesis-drawn inputs (windows 1-4, strides
1-3, SAME/VALID, channels-last and -first, 2-D and 3-D, values among NaN, +-inf, +-0,
+-FLT_MAX and a few integers so every window has ties).
"""

from __future__ import annotations

import itertools
import os

import ml_dtypes
import numpy as np
import pytest
from conftest import BACKENDS, NATIVE_AVAILABLE, assert_identical
from hypothesis import given, settings
from hypothesis import strategies as st

import minigraph as mg
from minigraph import ops
from minigraph.backends import native

F32 = np.float32
LOWEST = np.finfo(F32).min
VALUES = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1, -1, 2, LOWEST, -LOWEST], F32)
ISAS = (list(native.ISAS[:native.ISAS.index(native.best_isa()) + 1])
        if NATIVE_AVAILABLE else [])
# (backend, ISA or None): the numpy kernels, and the native ones on every ISA the CPU has
RUNS = [("reference", None)] + [("native", isa) for isa in ISAS if "native" in BACKENDS]


# ----------------------------------------------------------------------------- geometry


@st.composite
def cases(draw, rank=None):
    """(x channels-last, ksize, strides, padding, channels_last, seed)."""
    rank = rank or draw(st.sampled_from([2, 3]))
    padding = draw(st.sampled_from(["SAME", "VALID"]))
    k = [draw(st.integers(1, 4)) for _ in range(rank)]
    s = [draw(st.integers(1, 3)) for _ in range(rank)]
    top = 6 if rank == 2 else 4
    sizes = [draw(st.integers(k[i] if padding == "VALID" else 1, max(top, k[i])))
             for i in range(rank)]
    n, c = draw(st.integers(1, 2)), draw(st.sampled_from([1, 2, 3, 17]))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    x = rng.choice(VALUES, (n, *sizes, c))
    x[rng.random(x.shape) < draw(st.sampled_from([0.1, 0.5, 0.9]))] = np.nan
    return x, k, s, padding, draw(st.booleans())


def geometry(size: int, k: int, s: int, padding: str) -> tuple[int, int]:
    """(outputs, leading pad) of one spatial axis, TF's SAME / VALID."""
    if padding == "VALID":
        return (size - k) // s + 1, 0
    out = -(-size // s)
    return out, max((out - 1) * s + k - size, 0) // 2


def windows(x_shape, k, s, padding):
    """(output index, [in-bounds input index in row-major order]) over the spatial axes."""
    axes = [geometry(size, k[i], s[i], padding) for i, size in enumerate(x_shape[1:-1])]
    for out in itertools.product(*(range(o) for o, _ in axes)):
        ranges = [range(max(o * s[i] - p, 0), min(o * s[i] - p + k[i], x_shape[1 + i]))
                  for i, (o, (_, p)) in enumerate(zip(out, axes))]
        yield out, list(itertools.product(*ranges))


def out_shape(x_shape, k, s, padding):
    spatial = [geometry(size, k[i], s[i], padding)[0] for i, size in enumerate(x_shape[1:-1])]
    return (x_shape[0], *spatial, x_shape[-1])


# ----------------------------------------------------------------------------- references


def ref_max_pool(x, k, s, padding, lowest=LOWEST):
    y = np.empty(out_shape(x.shape, k, s, padding), x.dtype)
    for b, ci in itertools.product(range(x.shape[0]), range(x.shape[-1])):
        for out, window in windows(x.shape, k, s, padding):
            best = x.dtype.type(lowest)
            for i in window:
                v = x[(b, *i, ci)]
                best = v if v > best else best
            y[(b, *out, ci)] = best
    return y


def ref_max_pool_grad(x, g, k, s, padding):
    """2-D: g to each window's first element, a later one taking over when greater."""
    dx = np.zeros(x.shape, F32)
    for b, ci in itertools.product(range(x.shape[0]), range(x.shape[-1])):
        for out, window in windows(x.shape, k, s, padding):
            at = window[0]
            for i in window[1:]:
                at = i if x[(b, *i, ci)] > x[(b, *at, ci)] else at
            dx[(b, *at, ci)] += g[(b, *out, ci)]
    return dx


def ref_max_pool_grad_grad(x, y, g, k, s, padding):
    """g at each window's first element equal to y, else 0 (2-D and 3-D)."""
    result = np.zeros(y.shape, F32)
    for b, ci in itertools.product(range(x.shape[0]), range(x.shape[-1])):
        for out, window in windows(x.shape, k, s, padding):
            hits = [i for i in window if x[(b, *i, ci)] == y[(b, *out, ci)]]
            if hits:
                result[(b, *out, ci)] = g[(b, *hits[0], ci)]
    return result


def ref_max_pool3d_grad(x, y, g, k, s, padding):
    """3-D: g to every element within 1e-5 of y (integer g: any order, the same sum)."""
    dx = np.zeros(x.shape, F32)
    for b, ci in itertools.product(range(x.shape[0]), range(x.shape[-1])):
        for out, window in windows(x.shape, k, s, padding):
            for i in window:
                with np.errstate(invalid="ignore", over="ignore"):
                    if abs(x[(b, *i, ci)] - y[(b, *out, ci)]) < F32(1e-5):
                        dx[(b, *i, ci)] += g[(b, *out, ci)]
    return dx


# ----------------------------------------------------------------------------- minigraph


def to_layout(a: np.ndarray, channels_last: bool) -> np.ndarray:
    return a if channels_last else np.ascontiguousarray(np.moveaxis(a, -1, 1))


def from_layout(a: np.ndarray, channels_last: bool) -> np.ndarray:
    return a if channels_last else np.ascontiguousarray(np.moveaxis(a, 1, -1))


def attrs(rank, k, s, padding, channels_last):
    fmt = ("NHWC" if channels_last else "NCHW") if rank == 2 else (
        "NDHWC" if channels_last else "NCDHW")
    def full(v):
        return [1, *v, 1] if channels_last else [1, 1, *v]
    return {"ksize": full(k), "strides": full(s), "padding": padding, "data_format": fmt}


def run_family(x, g_out, g_in, k, s, padding, channels_last, backend, isa, dtype=mg.float32):
    """minigraph's (forward, grad, grad-grad) on channels-last arrays, run in the layout."""
    rank = x.ndim - 2
    a = attrs(rank, k, s, padding, channels_last)
    root = mg.Scope.NewRootScope()
    xp, gp, hp = (ops.Placeholder(root, dtype) for _ in range(3))
    if rank == 2:
        y = ops.MaxPool(root, xp, **a)
        fetches = [y, ops.MaxPoolGrad(root, xp, y, gp, **a),
                   ops.MaxPoolGradGrad(root, xp, y, hp, **a)]
    else:
        y = ops.MaxPool3D(root, xp, **a)
        fetches = [y, ops.MaxPool3DGrad(root, xp, y, gp, **a),
                   ops.MaxPool3DGradGrad(root, xp, y, hp, **a)]
    feeds = {xp: to_layout(x, channels_last), gp: to_layout(g_out, channels_last),
             hp: to_layout(g_in, channels_last)}
    if isa is not None:
        native.set_isa(isa)
    try:
        got = mg.ClientSession(root, backend=backend).Run(feeds, fetches)
    finally:
        if isa is not None:
            native.set_isa(native.best_isa())
    return [from_layout(v, channels_last) for v in got]


def gradient_feeds(x, k, s, padding, seed=0):
    """Integer gradients (exact sums in any order): one per output, one per input."""
    rng = np.random.default_rng(seed)
    shape = out_shape(x.shape, k, s, padding)
    return rng.integers(1, 5, shape).astype(F32), rng.integers(1, 5, x.shape).astype(F32)


@settings(max_examples=40, deadline=None)
@given(cases())
def test_max_pool_family_follows_tf_rules_on_every_backend(case):
    x, k, s, padding, channels_last = case
    g_out, g_in = gradient_feeds(x, k, s, padding)
    y = ref_max_pool(x, k, s, padding)
    if x.ndim == 4:
        dx = ref_max_pool_grad(x, g_out, k, s, padding)
    else:
        dx = ref_max_pool3d_grad(x, y, g_out, k, s, padding)
    ddy = ref_max_pool_grad_grad(x, y, g_in, k, s, padding)
    for backend, isa in RUNS:
        got = run_family(x, g_out, g_in, k, s, padding, channels_last, backend, isa)
        for what, a, b in zip(("forward", "grad", "grad-grad"), got, (y, dx, ddy)):
            assert_identical(a, b, f"{what} on {backend} {isa or ''}")


def test_all_nan_and_signed_zero_windows():
    """The rule's corner cases, spelled out: [NaN, 0, -1, -2] -> 0, [-1, NaN, 2, -3] -> 2,
    all NaN -> -FLT_MAX (its grad to the first element, its grad-grad 0), [-0, +0] -> -0,
    [+0, -0] -> +0, [-inf, NaN] -> -FLT_MAX."""
    rows = np.array([[np.nan, 0, -1, -2], [-1, np.nan, 2, -3], [np.nan] * 4,
                     [-0.0, 0.0, -1, -1], [0.0, -0.0, -1, -1], [-np.inf, np.nan] * 2], F32)
    x = rows.reshape(1, 6, 4, 1)
    g_out = np.full((1, 6, 1, 1), 5, F32)
    g_in = np.arange(1, 25, dtype=F32).reshape(x.shape)
    want_y = np.array([0, 2, LOWEST, -0.0, 0.0, LOWEST], F32)
    for backend, isa in RUNS:
        for channels_last in (True, False):
            y, dx, ddy = run_family(x, g_out, g_in, (1, 4), (1, 1), "VALID", channels_last,
                                    backend, isa)
            assert_identical(y.ravel(), want_y, f"{backend} {isa}")
            assert_identical(np.argmax(dx.reshape(6, 4), axis=1), np.array([0, 2, 0, 0, 0, 0]))
            assert_identical(ddy.ravel(), np.array([2, 7, 0, 13, 17, 0], F32))


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float64])
def test_other_float_types_start_at_tf_lowest(dtype):
    """float16 and float64 start at their lowest finite value, bfloat16 at -inf (TF pools it
    from float32's lowest, which rounds to -inf)."""
    x = np.array([np.nan, np.nan, -1, np.nan, 3, np.nan], dtype).reshape(1, 1, 6, 1)
    lowest = -np.inf if dtype == ml_dtypes.bfloat16 else np.finfo(dtype).min
    root = mg.Scope.NewRootScope()
    xp = ops.Placeholder(root, mg.as_dtype(np.dtype(dtype)))
    y = ops.MaxPool(root, xp, ksize=[1, 1, 2, 1], strides=[1, 1, 1, 1], padding="VALID")
    for backend in BACKENDS:
        got = mg.ClientSession(root, backend=backend).Run({xp: x}, [y])[0]
        assert_identical(got.ravel(), np.array([lowest, -1, -1, 3, 3], dtype))


# ----------------------------------------------------------------------------- TensorFlow


@pytest.fixture(scope="module")
def tf():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return pytest.importorskip("tensorflow")


def tf_family(tf, x, g_out, g_in, k, s, padding):
    """TF's raw ops, channels-last (TF's CPU max-pool gradients take no other layout)."""
    raw = tf.raw_ops
    ksize, strides = [1, *k, 1], [1, *s, 1]
    if x.ndim == 4:
        y = raw.MaxPool(input=x, ksize=ksize, strides=strides, padding=padding)
        dx = raw.MaxPoolGrad(orig_input=x, orig_output=y, grad=g_out, ksize=ksize,
                             strides=strides, padding=padding)
        ddy = raw.MaxPoolGradGrad(orig_input=x, orig_output=y, grad=g_in, ksize=ksize,
                                  strides=strides, padding=padding)
    else:
        y = raw.MaxPool3D(input=x, ksize=ksize, strides=strides, padding=padding)
        dx = raw.MaxPool3DGrad(orig_input=x, orig_output=y, grad=g_out, ksize=ksize,
                               strides=strides, padding=padding)
        ddy = raw.MaxPool3DGradGrad(orig_input=x, orig_output=y, grad=g_in, ksize=ksize,
                                    strides=strides, padding=padding)
    return [v.numpy() for v in (y, dx, ddy)]


@pytest.mark.oracle
@settings(max_examples=40, deadline=None)
@given(cases())
def test_max_pool_family_matches_tensorflow(tf, case):
    x, k, s, padding, channels_last = case
    g_out, g_in = gradient_feeds(x, k, s, padding)
    theirs = tf_family(tf, x, g_out, g_in, k, s, padding)
    for backend, isa in RUNS:
        mine = run_family(x, g_out, g_in, k, s, padding, channels_last, backend, isa)
        for what, a, b in zip(("forward", "grad", "grad-grad"), mine, theirs):
            assert_identical(a, b, f"{what} on {backend} {isa or ''} vs TF")


@pytest.mark.oracle
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float64])
@settings(max_examples=10, deadline=None)
@given(case=cases(rank=2))
def test_other_float_types_match_tensorflow(tf, dtype, case):
    x, k, s, padding, channels_last = case
    with np.errstate(over="ignore"):  # +-FLT_MAX: +-inf in float16
        x = x.astype(dtype)
    ksize, strides = [1, *k, 1], [1, *s, 1]
    theirs = tf.raw_ops.MaxPool(input=tf.constant(x), ksize=ksize, strides=strides,
                                padding=padding).numpy()
    root = mg.Scope.NewRootScope()
    xp = ops.Placeholder(root, mg.as_dtype(np.dtype(dtype)))
    y = ops.MaxPool(root, xp, **attrs(2, k, s, padding, channels_last))
    for backend in BACKENDS:
        got = mg.ClientSession(root, backend=backend).Run({xp: to_layout(x, channels_last)},
                                                          [y])[0]
        assert_identical(from_layout(got, channels_last), theirs, f"{dtype} on {backend}")
