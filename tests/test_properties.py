"""Property tests: random shapes (size-1 dims included), formats, dtypes, modes and
exponential_avg_factor, forward and grad against the float64 formulas of conftest.py."""

from __future__ import annotations

import warnings

import numpy as np
from conftest import (
    BACKENDS,
    BF16,
    assert_close,
    assert_identical,
    fused_bn_forward_f64,
    fused_bn_grad_f64,
    global_norm_f64,
    global_norm_grad_f64,
    random_case,
    run,
    x_shape,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import minigraph as mg
from minigraph import ops

F32 = np.float32
SETTINGS = settings(max_examples=400, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


@st.composite
def batch_norm_cases(draw):
    data_format = draw(st.sampled_from(["NHWC", "NCHW", "NDHWC", "NCDHW"]))
    spatial = tuple(draw(st.integers(1, 3)) for _ in range(len(data_format) - 2))
    shape = x_shape(data_format, draw(st.integers(1, 3)), spatial, draw(st.integers(1, 4)))
    return {
        "shape": shape,
        "data_format": data_format,
        "dtype": draw(st.sampled_from([np.dtype(F32), np.dtype(np.float16), BF16])),
        "is_training": draw(st.booleans()),
        "eaf": draw(st.sampled_from([1.0, 1.0, 0.3, 0.0, 0.9])),
        "epsilon": draw(st.sampled_from([1e-4, 1e-3, 0.1, 1e-5])),
        "centre": draw(st.sampled_from([0.0, 1.5, -20.0])),
        "spread": draw(st.sampled_from([1.0, 3.0, 0.01])),
        "seed": draw(st.integers(0, 2**32 - 1)),
        "backend": draw(st.sampled_from(BACKENDS)),
    }


def make_inputs(case):
    rng = np.random.default_rng(case["seed"])
    return rng, random_case(rng, case["shape"], case["data_format"], case["dtype"],
                            centre=case["centre"], spread=case["spread"])


@SETTINGS
@given(batch_norm_cases())
def test_forward_matches_formula(case):
    _, (x, scale, offset, mean, variance) = make_inputs(case)
    attrs = {"epsilon": case["epsilon"], "data_format": case["data_format"],
             "is_training": case["is_training"], "exponential_avg_factor": case["eaf"]}
    root = mg.Scope.NewRootScope()
    xp = ops.Placeholder(root, mg.as_dtype(x.dtype))
    bn = ops.FusedBatchNormV3(root, xp, scale, offset, mean, variance, **attrs)
    out = dict(zip(("y", "batch_mean", "batch_variance", "reserve_space_1",
                    "reserve_space_2", "reserve_space_3"),
                   run(root, list(bn), {xp: x}, case["backend"])))
    ref = fused_bn_forward_f64(x, scale, offset, mean, variance, **attrs)
    assert_close(out["y"], ref["y"], dtype=x.dtype, mag=ref["mag"]["y"], what="y")
    for name in ("batch_mean", "batch_variance", "reserve_space_1", "reserve_space_2"):
        assert_close(out[name], ref[name], dtype=F32, mag=ref["mag"][name], what=name)
    assert_identical(out["reserve_space_3"], np.zeros(0, F32))


@SETTINGS
@given(batch_norm_cases())
def test_grad_matches_formula(case):
    rng, (x, scale, offset, mean, variance) = make_inputs(case)
    dtype, fmt = case["dtype"], case["data_format"]
    dy = rng.normal(0, 1, x.shape).astype(F32).astype(dtype)
    if case["is_training"]:
        stats = fused_bn_forward_f64(x, scale, offset, mean, variance, data_format=fmt)
        mean = stats["reserve_space_1"].astype(F32)
        variance = stats["reserve_space_2"].astype(F32)
    attrs = {"epsilon": case["epsilon"], "data_format": fmt, "is_training": case["is_training"]}
    root = mg.Scope.NewRootScope()
    dyp, xp = (ops.Placeholder(root, mg.as_dtype(dtype)) for _ in range(2))
    g = ops.FusedBatchNormGradV3(root, dyp, xp, scale, mean, variance, np.zeros(0, F32),
                                 **attrs)
    out = dict(zip(("x_backprop", "scale_backprop", "offset_backprop"),
                   run(root, list(g)[:3], {dyp: dy, xp: x}, case["backend"])))
    ref = fused_bn_grad_f64(dy, x, scale, mean, variance, **attrs)
    assert_close(out["x_backprop"], ref["x_backprop"], dtype=dtype,
                 mag=ref["mag"]["x_backprop"], what="x_backprop")
    for name in ("scale_backprop", "offset_backprop"):
        assert_close(out[name], ref[name], dtype=F32, mag=ref["mag"][name], what=name)


@settings(max_examples=200, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 3),
                       st.integers(1, 4)),
       dtype=st.sampled_from([np.float16, np.float32, np.float64]),
       scale_after_normalization=st.booleans(),
       epsilon=st.sampled_from([1e-3, 0.0, 0.5]),
       seed=st.integers(0, 2**32 - 1),
       backend=st.sampled_from(BACKENDS))
def test_global_normalization_matches_formula(shape, dtype, scale_after_normalization, epsilon,
                                              seed, backend):
    rng = np.random.default_rng(seed)
    c = shape[3]
    t = rng.normal(1, 2, shape).astype(dtype)
    m, beta = rng.normal(1, 1, c).astype(dtype), rng.normal(0, 1, c).astype(dtype)
    v = rng.uniform(0.25, 3, c).astype(dtype)
    gamma = rng.uniform(-2, 2, c).astype(dtype)
    backprop = rng.normal(0, 1, shape).astype(dtype)
    attrs = {"variance_epsilon": epsilon, "scale_after_normalization": scale_after_normalization}
    root = mg.Scope.NewRootScope()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        y = ops.BatchNormWithGlobalNormalization(root, t, m, v, beta, gamma, **attrs)
        g = ops.BatchNormWithGlobalNormalizationGrad(root, t, m, v, gamma, backprop, **attrs)
    results = run(root, [y] + list(g), backend=backend)
    expected, mag = global_norm_f64(t, m, v, beta, gamma, **attrs)
    assert_close(results[0], expected, dtype=dtype, mag=mag, what="result")
    ref = global_norm_grad_f64(t, m, v, gamma, backprop, **attrs)
    for name, value in zip(("dx", "dm", "dv", "db", "dg"), results[1:]):
        assert_close(value, ref[name], dtype=dtype, mag=ref["mag"][name], what=name)
