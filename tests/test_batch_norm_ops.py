"""Values of the batch-norm ops against independent float64 formulas (conftest.py), their edge
cases (docs/tf-semantics.md#forward-edge-cases, docs/tf-semantics.md#gradient-formulas,
docs/tf-semantics.md#global-normalization-gradient), the reserve spaces
(docs/tf-semantics.md#where-minigraph-differs-from-tensorflow), and the errors only the data
shows, raised at Run (unknown-shape placeholders)."""

from __future__ import annotations

import itertools
import warnings
import zlib

import numpy as np
import pytest
from conftest import (
    BF16,
    assert_close,
    assert_identical,
    channel_axis,
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

InvalidArgumentError = mg.errors.InvalidArgumentError
F32 = np.float32
FORMATS = ("NHWC", "NCHW", "NDHWC", "NCDHW")
DTYPES = (np.dtype(np.float32), np.dtype(np.float16), BF16)
FORWARD_OUTPUTS = ("y", "batch_mean", "batch_variance", "reserve_space_1", "reserve_space_2")
GRAD_OUTPUTS = ("x_backprop", "scale_backprop", "offset_backprop")

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def shape_for(data_format: str, n=3, c=4) -> tuple[int, ...]:
    spatial = (3, 2) if len(data_format) == 4 else (2, 3, 2)
    return x_shape(data_format, n, spatial, c)


def feed_all(root, values, static=True):
    """Placeholders for ``values`` (static shapes, or unknown ones) and the feed dict."""
    holders = [ops.Placeholder(root, mg.as_dtype(v.dtype), shape=v.shape if static else None)
               for v in values]
    return holders, dict(zip(holders, values))


def build(op_name, values, static=True, **attrs):
    """Build one op on placeholders for ``values``; return a function that runs it on a
    backend and returns its outputs by name."""
    root = mg.Scope.NewRootScope()
    holders, feeds = feed_all(root, values, static)
    result = getattr(ops, op_name)(root, *holders, **attrs)
    outputs = list(result.operation.outputs)
    names = [a.name for a in result.operation.op_def.outputs]
    return lambda backend: dict(zip(names, run(root, outputs, feeds, backend)))


def forward(backend, x, scale, offset, mean, variance, *, version="V3", static=True,
            **attrs):
    """Run FusedBatchNorm{,V2,V3} and return its outputs by name."""
    op_name = {"V1": "FusedBatchNorm", "V2": "FusedBatchNormV2", "V3": "FusedBatchNormV3"}
    return build(op_name[version], [x, scale, offset, mean, variance], static, **attrs)(backend)


def grad(backend, dy, x, scale, rs1, rs2, rs3=None, *, version="V3", static=True, **attrs):
    values = [dy, x, scale, rs1, rs2] + ([np.zeros(0, F32) if rs3 is None else rs3]
                                         if version == "V3" else [])
    op_name = {"V1": "FusedBatchNormGrad", "V2": "FusedBatchNormGradV2",
               "V3": "FusedBatchNormGradV3"}[version]
    return build(op_name, values, static, **attrs)(backend)


def run_time_error(backend, op_name, values, *parts, **attrs):
    """Building on unknown-shape placeholders succeeds; Run raises an InvalidArgumentError
    whose message contains the node ('<op> '<op>'') and every one of ``parts``."""
    runner = build(op_name, values, static=False, **attrs)
    with pytest.raises(InvalidArgumentError) as info:
        runner(backend)
    message = str(info.value)
    for part in (f"{op_name} '{op_name}'",) + parts:
        assert part in message, f"{part!r} not in {message!r}"


def check_forward(out, x, scale, offset, mean, variance, **attrs):
    """Every mathematical output against the float64 formula; reserve spaces per the
    decision table."""
    ref = fused_bn_forward_f64(x, scale, offset, mean, variance, **attrs)
    assert_close(out["y"], ref["y"], dtype=x.dtype, mag=ref["mag"].get("y"), what="y")
    training = attrs.get("is_training", True)
    for name in FORWARD_OUTPUTS[1:]:
        if not training and x.size:
            # inference: exact copies of mean / variance (decision table)
            source = mean if name in ("batch_mean", "reserve_space_1") else variance
            assert_identical(out[name], source.astype(F32), what=name)
        else:
            assert_close(out[name], ref[name], dtype=F32, mag=ref["mag"].get(name), what=name)
    if "reserve_space_3" in out:
        assert_identical(out["reserve_space_3"], np.zeros(0, F32), what="reserve_space_3")


def check_grad(out, dy, x, scale, rs1, rs2, **attrs):
    reserves = [n for n in out if n.startswith("reserve_space")]
    ref = fused_bn_grad_f64(dy, x, scale, rs1, rs2, **attrs)
    assert_close(out["x_backprop"], ref["x_backprop"], dtype=x.dtype,
                 mag=ref["mag"].get("x_backprop"), what="x_backprop")
    for name in GRAD_OUTPUTS[1:]:
        assert_close(out[name], ref[name], dtype=F32, mag=ref["mag"].get(name), what=name)
    assert len(reserves) == 2
    for name in reserves:
        assert_identical(out[name], np.zeros(0, F32), what=name)


def value_cases() -> list:
    """(version, data_format, is_training, dtype, eaf) for every op version's valid combos."""
    cases = []
    for version, fmt, training, dtype, eaf in itertools.product(
            ("V3", "V2", "V1"), FORMATS, (True, False), DTYPES, (1.0, 0.3)):
        if version != "V3" and len(fmt) == 5:
            continue
        if version == "V1" and dtype != np.float32:
            continue
        cases.append(pytest.param(version, fmt, training, dtype, eaf,
                                  id=f"{version}-{fmt}-{'train' if training else 'infer'}-"
                                     f"{dtype.name}-eaf{eaf}"))
    return cases


# ----------------------------------------------------------------------------- table-driven values


@pytest.mark.parametrize("version, data_format, is_training, dtype, eaf", value_cases())
def test_fused_batch_norm_values(backend, version, data_format, is_training, dtype, eaf):
    rng = np.random.default_rng(zlib.crc32(f"{version}{data_format}{is_training}{dtype}".encode()))
    x, scale, offset, mean, variance = random_case(rng, shape_for(data_format), data_format,
                                                   dtype)
    attrs = {"epsilon": 1e-3, "data_format": data_format, "is_training": is_training,
             "exponential_avg_factor": eaf}
    out = forward(backend, x, scale, offset, mean, variance, version=version, **attrs)
    check_forward(out, x, scale, offset, mean, variance, **attrs)


@pytest.mark.parametrize("version, data_format, is_training, dtype, eaf", [
    c for c in value_cases() if c.values[4] == 1.0])
def test_fused_batch_norm_grad_values(backend, version, data_format, is_training, dtype, eaf):
    rng = np.random.default_rng(7 + len(data_format) + 2 * is_training)
    x, scale, _, mean, variance = random_case(rng, shape_for(data_format), data_format, dtype)
    dy = rng.normal(0, 1, x.shape).astype(F32).astype(dtype)
    if is_training:  # the saved batch statistics of x, as the forward op returns them
        ref = fused_bn_forward_f64(x, scale, scale, mean, variance, data_format=data_format)
        mean, variance = (ref[k].astype(F32) for k in ("reserve_space_1", "reserve_space_2"))
    attrs = {"epsilon": 1e-3, "data_format": data_format, "is_training": is_training}
    out = grad(backend, dy, x, scale, mean, variance, version=version, **attrs)
    check_grad(out, dy, x, scale, mean, variance, **attrs)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("scale_after_normalization", [True, False])
def test_global_normalization_values(backend, dtype, scale_after_normalization):
    rng = np.random.default_rng(3)
    t = rng.normal(1, 2, (3, 4, 2, 5)).astype(dtype)
    m = rng.normal(1, 1, 5).astype(dtype)
    v = rng.uniform(0.5, 3, 5).astype(dtype)
    beta = rng.normal(0, 1, 5).astype(dtype)
    gamma = rng.uniform(-2, 2, 5).astype(dtype)
    backprop = rng.normal(0, 1, t.shape).astype(dtype)
    attrs = {"variance_epsilon": 1e-3, "scale_after_normalization": scale_after_normalization}
    root = mg.Scope.NewRootScope()
    holders, feeds = feed_all(root, [t, m, v, beta, gamma, backprop], static=False)
    y = ops.BatchNormWithGlobalNormalization(root, *holders[:5], **attrs)
    g = ops.BatchNormWithGlobalNormalizationGrad(root, *holders[:3], holders[4], holders[5],
                                                 **attrs)
    results = run(root, [y] + list(g), feeds, backend)
    expected, mag = global_norm_f64(t, m, v, beta, gamma, **attrs)
    assert_close(results[0], expected, dtype=dtype, mag=mag, what="result")
    ref = global_norm_grad_f64(t, m, v, gamma, backprop, **attrs)
    for name, value in zip(("dx", "dm", "dv", "db", "dg"), results[1:]):
        assert_close(value, ref[name], dtype=dtype, mag=ref["mag"][name], what=name)
    if not scale_after_normalization:
        assert not results[5].any()  # dg = 0


# ----------------------------------------------------------------------------- forward semantics


@pytest.mark.parametrize("data_format", FORMATS)
def test_normalization_ignores_running_stats_and_eaf(backend, data_format):
    rng = np.random.default_rng(11)
    case = random_case(rng, shape_for(data_format), data_format, np.float32)
    attrs = {"data_format": data_format}
    first = forward(backend, *case, exponential_avg_factor=1.0, **attrs)
    blended = forward(backend, *case, exponential_avg_factor=0.3, **attrs)
    assert_identical(blended["y"], first["y"], what="y (eaf 1 vs 0.3)")
    assert_identical(blended["reserve_space_1"], first["reserve_space_1"])
    assert_identical(blended["reserve_space_2"], first["reserve_space_2"])
    infer = [forward(backend, *case, is_training=False, exponential_avg_factor=f, **attrs)
             for f in (1.0, 0.3)]
    for name in FORWARD_OUTPUTS:
        assert_identical(infer[0][name], infer[1][name], what=f"{name} (inference)")


@pytest.mark.parametrize("eaf", [0.0, 2.0, -0.5])
def test_exponential_avg_factor_extremes(backend, eaf):
    rng = np.random.default_rng(5)
    case = random_case(rng, (4, 3, 2, 3), "NHWC", np.float32)
    out = forward(backend, *case, exponential_avg_factor=eaf)
    check_forward(out, *case, exponential_avg_factor=eaf)
    if eaf == 0.0:  # the running statistics come back unchanged
        assert_identical(out["batch_mean"], case[3])
        assert_identical(out["batch_variance"], case[4])


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cases=st.lists(st.tuples(st.integers(1, 5), st.integers(1, 4), st.integers(1, 6),
                                st.sampled_from([1.0, 0.5, 0.1, 0.01, 0.0, 1.5, np.nan])
                                | st.floats(0.0009765625, 1.0, width=32),
                                st.sampled_from([None, np.nan, np.inf, -np.inf, 3e38])),
                      min_size=2, max_size=4))
def test_running_statistics_round_as_float32_formulas(backend, cases):
    """The blended running statistics, bit for bit TF's float32 formulas (each product and
    sum rounded): mean * (1 - f) + batch_mean * f and var * (1 - f) +
    (biased_var * (n / (n - 1))) * f, from the op's own batch statistics (reserve spaces),
    for several batch sizes and factors in one process (the scalars are made once per
    count and factor), with a non-finite or huge running statistic and a NaN factor."""
    rng = np.random.default_rng(len(cases))
    for n, c, hw, eaf, special in cases:
        x, scale, offset, mean, variance = random_case(rng, (n, hw, 1, c), "NHWC", np.float32)
        if special is not None:
            mean[rng.integers(0, c)] = special
            variance[rng.integers(0, c)] = special
        out = forward(backend, x, scale, offset, mean, variance, exponential_avg_factor=eaf)
        count = n * hw
        f = F32(eaf)
        bessel = F32(count) / F32(max(count - 1, 1))
        with np.errstate(all="ignore"):
            if f == 1:
                want_mean, want_var = out["reserve_space_1"], out["reserve_space_2"] * bessel
            else:
                keep = F32(1) - f
                want_mean = mean * keep + out["reserve_space_1"] * f
                want_var = variance * keep + out["reserve_space_2"] * bessel * f
        assert_identical(out["batch_mean"], want_mean, what=f"running mean {n, hw, c, eaf}")
        assert_identical(out["batch_variance"], want_var, what=f"running var {n, hw, c, eaf}")


@pytest.mark.parametrize("length", [0, 1, 7])
def test_training_with_eaf_1_accepts_any_length_mean(backend, length):
    rng = np.random.default_rng(2)
    x, scale, offset, _, _ = random_case(rng, (2, 3, 3, 4), "NHWC", np.float32)
    ignored = rng.normal(0, 1, length).astype(F32)
    out = forward(backend, x, scale, offset, ignored, ignored, static=False)
    check_forward(out, x, scale, offset, ignored, ignored)


def test_batch_variance_is_bessel_corrected_and_reserve_space_2_is_biased(backend):
    x = np.array([1.0, 2.0, 4.0, 9.0], F32).reshape(1, 2, 2, 1)
    one = np.ones(1, F32)
    out = forward(backend, x, one, 0 * one, one, one)
    biased = np.var(x.astype(np.float64))
    assert_close(out["reserve_space_2"], [biased], dtype=F32)
    assert_close(out["batch_variance"], [biased * 4 / 3], dtype=F32)
    assert_close(out["reserve_space_1"], [4.0], dtype=F32)


@pytest.mark.parametrize("data_format", ["NCHW", "NCDHW"])
def test_format_equivariance(backend, data_format):
    """Channels-first results equal channels-last results on transposed data."""
    rng = np.random.default_rng(8)
    last = data_format[0] + data_format[2:] + "C"
    x_first, scale, offset, mean, variance = random_case(rng, shape_for(data_format),
                                                         data_format, np.float32)
    to_last = (0, *range(2, x_first.ndim), 1)
    x_last = np.ascontiguousarray(x_first.transpose(to_last))
    dy_first = rng.normal(0, 1, x_first.shape).astype(F32)
    dy_last = np.ascontiguousarray(dy_first.transpose(to_last))
    for training in (True, False):
        a = forward(backend, x_first, scale, offset, mean, variance, data_format=data_format,
                    is_training=training)
        b = forward(backend, x_last, scale, offset, mean, variance, data_format=last,
                    is_training=training)
        assert_close(a["y"].transpose(to_last), b["y"].astype(np.float64), dtype=F32)
        ga = grad(backend, dy_first, x_first, scale, mean, variance, data_format=data_format,
                  is_training=training)
        gb = grad(backend, dy_last, x_last, scale, mean, variance, data_format=last,
                  is_training=training)
        assert_close(ga["x_backprop"].transpose(to_last), gb["x_backprop"].astype(np.float64),
                     dtype=F32)
        for name in GRAD_OUTPUTS[1:]:
            assert_close(ga[name], gb[name].astype(np.float64), dtype=F32)


# ----------------------------------------------------------------------------- forward edge cases


EMPTY_SHAPES = [("NHWC", (0, 3, 4, 5)), ("NHWC", (2, 0, 4, 5)), ("NCHW", (0, 5, 2, 2)),
                ("NDHWC", (0, 1, 2, 2, 3)), ("NCDHW", (2, 3, 0, 2, 2)), ("NDHWC", (1, 2, 0, 2, 3))]


@pytest.mark.parametrize("data_format, shape", EMPTY_SHAPES)
@pytest.mark.parametrize("is_training, eaf", [(True, 1.0), (True, 0.3), (False, 1.0)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_empty_x(backend, data_format, shape, is_training, eaf, dtype):
    c = shape[channel_axis(data_format)]
    x = np.zeros(shape, dtype)
    vec = np.arange(1, c + 1, dtype=F32)
    out = forward(backend, x, vec, vec, vec, vec, data_format=data_format,
                  is_training=is_training, exponential_avg_factor=eaf)
    assert out["y"].shape == shape and out["y"].dtype == dtype
    # NaN batch statistics, even in inference and with eaf != 1 (running stats not blended)
    for name in ("batch_mean", "batch_variance"):
        assert out[name].dtype == F32 and out[name].shape == (c,)
        assert np.isnan(out[name]).all(), name
    # reserve spaces: zeros (oneDNN's deterministic choice; Eigen leaves garbage)
    for name in ("reserve_space_1", "reserve_space_2"):
        assert_identical(out[name], np.zeros(c, F32), what=name)
    assert_identical(out["reserve_space_3"], np.zeros(0, F32))


@pytest.mark.parametrize("is_training", [True, False])
def test_zero_channels(backend, is_training):
    x = np.zeros((2, 2, 2, 0), F32)
    none = np.zeros(0, F32)
    out = forward(backend, x, none, none, none, none, is_training=is_training)
    assert out["y"].shape == (2, 2, 2, 0)
    for name in FORWARD_OUTPUTS[1:]:
        assert_identical(out[name], none, what=name)
    g = grad(backend, x, x, none, none, none, is_training=is_training)
    assert g["x_backprop"].shape == (2, 2, 2, 0)
    for name in GRAD_OUTPUTS[1:]:
        assert_identical(g[name], none, what=name)


@pytest.mark.parametrize("shape, data_format", [((1, 1, 1, 3), "NHWC"), ((1, 3, 1, 1), "NCHW"),
                                                ((1, 1, 1, 1, 2), "NDHWC")])
@pytest.mark.parametrize("dtype", DTYPES)
def test_one_element_per_channel(backend, shape, data_format, dtype):
    rng = np.random.default_rng(4)
    x, scale, offset, mean, variance = random_case(rng, shape, data_format, dtype)
    out = forward(backend, x, scale, offset, mean, variance, data_format=data_format)
    assert_identical(out["y"], offset.reshape(x.shape).astype(dtype), what="y = offset")
    assert_identical(out["batch_variance"], np.zeros_like(scale), what="batch_variance")
    assert_identical(out["reserve_space_2"], np.zeros_like(scale), what="reserve_space_2")
    assert_identical(out["batch_mean"], x.astype(F32).ravel(), what="batch_mean")
    # grad with reserve_space_1 = x: x_backprop = 0 and scale_backprop = 0
    dy = rng.normal(0, 1, shape).astype(dtype)
    g = grad(backend, dy, x, scale, out["reserve_space_1"], out["reserve_space_2"],
             data_format=data_format)
    assert not g["x_backprop"].astype(F32).any()
    assert not g["scale_backprop"].any()
    assert_close(g["offset_backprop"], dy.astype(np.float64).ravel(), dtype=F32)


@pytest.mark.parametrize("shape, data_format", [((3, 1, 2, 2), "NCHW"), ((1, 1, 1, 1), "NHWC"),
                                                ((2, 2, 2, 2, 1), "NDHWC")])
@pytest.mark.parametrize("is_training", [True, False])
def test_one_channel(backend, shape, data_format, is_training):
    rng = np.random.default_rng(6)
    case = random_case(rng, shape, data_format, np.float32)
    attrs = {"data_format": data_format, "is_training": is_training}
    check_forward(forward(backend, *case, **attrs), *case, **attrs)
    dy = rng.normal(0, 1, shape).astype(F32)
    x, scale, _, mean, variance = case
    check_grad(grad(backend, dy, x, scale, mean, variance, **attrs), dy, x, scale, mean,
               variance, **attrs)


@pytest.mark.parametrize("dtype", DTYPES)
def test_constant_channel(backend, dtype):
    x = np.full((2, 3, 3, 2), 1.75, dtype)
    x[..., 1] = -3
    scale, offset = np.array([2.0, -1.0], F32), np.array([0.25, 3.0], F32)
    out = forward(backend, x, scale, offset, scale, scale, epsilon=1e-3)
    assert_identical(out["y"], np.broadcast_to(offset, x.shape).astype(dtype), what="y")
    assert_identical(out["batch_variance"], np.zeros(2, F32))
    out = forward(backend, x, scale, offset, scale, scale, epsilon=0.0)
    assert np.isnan(out["y"].astype(F32)).all()  # 0 * inf
    # grad, training, epsilon 0: x_backprop and scale_backprop are NaN
    dy = np.ones(x.shape, dtype)
    g = grad(backend, dy, x, scale, out["reserve_space_1"], out["reserve_space_2"], epsilon=0.0)
    assert np.isnan(g["x_backprop"].astype(F32)).all()
    assert np.isnan(g["scale_backprop"]).all()
    assert_close(g["offset_backprop"], [18.0, 18.0], dtype=F32)


def test_inference_zero_variance_zero_epsilon(backend):
    x = np.array([-2.0, 0.0, 3.0, 1.0], F32).reshape(1, 2, 2, 1)
    one, zero = np.ones(1, F32), np.zeros(1, F32)
    out = forward(backend, x, one, zero, zero, zero, epsilon=0.0, is_training=False)
    y = out["y"].ravel()
    assert list(y[[0, 2, 3]]) == [-np.inf, np.inf, np.inf]
    assert np.isnan(y[1])  # x == mean: 0 * inf
    g = grad(backend, np.ones_like(x), x, one, zero, zero, epsilon=0.0, is_training=False)
    assert np.isposinf(g["x_backprop"]).all()
    assert np.isposinf(g["scale_backprop"]).all()  # sum(dy*(x-mean)) = 2 > 0, times inf


@pytest.mark.parametrize("dtype", [np.float16, BF16])
def test_tiny_half_inputs(backend, dtype):
    rng = np.random.default_rng(9)
    x = (rng.normal(0, 1e-6, (4, 3, 3, 2)) + 2e-6).astype(F32).astype(dtype)
    one, zero = np.ones(2, F32), np.zeros(2, F32)
    out = forward(backend, x, one, zero, zero, one, epsilon=1e-12)
    check_forward(out, x, one, zero, zero, one, epsilon=1e-12)
    assert np.isfinite(out["y"].astype(F32)).all()


def test_bfloat16_statistics_overflow_float32(backend):
    x = np.array([1e30, -1e30] * 4, F32).astype(BF16).reshape(2, 2, 2, 1)
    scale, offset = np.ones(1, F32), np.array([0.5], F32)
    out = forward(backend, x, scale, offset, scale, scale)
    assert np.isposinf(out["batch_variance"]).all()
    assert np.isposinf(out["reserve_space_2"]).all()
    assert_identical(out["y"], np.full(x.shape, 0.5, BF16), what="y = offset")


def test_half_output_overflows_to_inf(backend):
    x = np.array([60000.0, -60000.0, 1.0, 0.0], np.float16).reshape(1, 2, 2, 1)
    scale, zero, one = np.array([4.0], F32), np.zeros(1, F32), np.ones(1, F32)
    out = forward(backend, x, scale, zero, zero, one, is_training=False, epsilon=0.0)
    assert list(out["y"].ravel()) == [np.inf, -np.inf, 4.0, 0.0]
    check_forward(out, x, scale, zero, zero, one, is_training=False, epsilon=0.0)


def test_half_extremes_do_not_overflow_statistics(backend):
    x = np.array([60000.0, -60000.0] * 4, np.float16).reshape(2, 2, 2, 1)
    one, zero = np.ones(1, F32), np.zeros(1, F32)
    out = forward(backend, x, one, zero, zero, one)
    check_forward(out, x, one, zero, zero, one)
    assert np.isfinite(out["batch_variance"]).all()
    assert_close(out["reserve_space_2"], [3.6e9], dtype=F32)


def test_reserve_spaces_per_decision_table(backend):
    rng = np.random.default_rng(10)
    case = random_case(rng, (2, 3, 3, 4), "NHWC", np.float32)
    x, _, _, mean, variance = case
    for training in (True, False):
        out = forward(backend, *case, is_training=training)
        rs3 = out["reserve_space_3"]
        assert rs3.dtype == F32 and rs3.shape == (0,)
        if training:
            ref = fused_bn_forward_f64(*case)
            assert_close(out["reserve_space_1"], x.astype(np.float64).mean(axis=(0, 1, 2)),
                         dtype=F32, mag=np.abs(x).max())
            assert_close(out["reserve_space_2"], ref["reserve_space_2"], dtype=F32)
        else:
            assert_identical(out["reserve_space_1"], mean)
            assert_identical(out["reserve_space_2"], variance)
    for version in ("V1", "V2"):
        out = forward(backend, *case, version=version)
        assert "reserve_space_3" not in out and len(out) == 5


# ----------------------------------------------------------------------------- grad semantics


@pytest.mark.parametrize("is_training", [True, False])
def test_grad_uses_reserve_spaces_as_given(backend, is_training):
    rng = np.random.default_rng(12)
    x, scale, _, mean, variance = random_case(rng, (3, 2, 2, 3), "NHWC", np.float32)
    dy = rng.normal(0, 1, x.shape).astype(F32)
    attrs = {"is_training": is_training, "epsilon": 1e-3}
    base = grad(backend, dy, x, scale, mean, variance, **attrs)
    shifted = grad(backend, dy, x, scale, mean + 1, variance * 4, **attrs)
    check_grad(shifted, dy, x, scale, mean + 1, variance * 4, **attrs)
    assert not np.allclose(shifted["scale_backprop"], base["scale_backprop"])
    assert_identical(shifted["offset_backprop"], base["offset_backprop"])


@pytest.mark.parametrize("rs3", [np.zeros(0, F32), np.zeros((), F32), np.arange(7, dtype=F32),
                                 np.full((7, 3), np.nan, F32)])
def test_grad_ignores_reserve_space_3(backend, rs3):
    rng = np.random.default_rng(13)
    x, scale, _, mean, variance = random_case(rng, (2, 2, 2, 3), "NHWC", np.float32)
    dy = rng.normal(0, 1, x.shape).astype(F32)
    base = grad(backend, dy, x, scale, mean, variance)
    for static in (True, False):
        other = grad(backend, dy, x, scale, mean, variance, rs3, static=static)
        for name in base:
            assert_identical(other[name], base[name], what=name)


@pytest.mark.parametrize("data_format, shape", EMPTY_SHAPES)
@pytest.mark.parametrize("is_training", [True, False])
def test_grad_empty_x(backend, data_format, shape, is_training):
    c = shape[channel_axis(data_format)]
    x = np.zeros(shape, np.float16)
    vec = np.ones(c, F32)
    out = grad(backend, x, x, vec, vec, vec, data_format=data_format, is_training=is_training)
    # x_backprop keeps x's shape, also for 5-D (TF returns a 4-D shape there: a TF bug)
    assert out["x_backprop"].shape == shape and out["x_backprop"].dtype == np.float16
    assert_identical(out["scale_backprop"], np.zeros(c, F32))
    assert_identical(out["offset_backprop"], np.zeros(c, F32))


@pytest.mark.parametrize("data_format", ["NCHW", "NCDHW"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_inference_grad_channels_first_is_supported(backend, data_format, dtype):
    rng = np.random.default_rng(14)
    x, scale, _, mean, variance = random_case(rng, shape_for(data_format), data_format, dtype)
    dy = rng.normal(0, 1, x.shape).astype(F32).astype(dtype)
    attrs = {"data_format": data_format, "is_training": False}
    check_grad(grad(backend, dy, x, scale, mean, variance, **attrs), dy, x, scale, mean,
               variance, **attrs)


def test_forward_then_grad_graph(backend):
    """The grad consumes the forward op's reserve spaces inside one graph."""
    rng = np.random.default_rng(15)
    x, scale, offset, _, _ = random_case(rng, (4, 2, 3, 3), "NCHW", np.float32)
    dy = rng.normal(0, 1, x.shape).astype(F32)
    root = mg.Scope.NewRootScope()
    xp = ops.Placeholder(root, mg.float32, shape=[None, 2, 3, 3])
    bn = ops.FusedBatchNormV3(root, xp, scale, offset, [], [], epsilon=0.01, data_format="NCHW")
    g = ops.FusedBatchNormGradV3(root, dy, xp, scale, bn.reserve_space_1, bn.reserve_space_2,
                                 bn.reserve_space_3, epsilon=0.01, data_format="NCHW")
    dx, dscale, doffset = run(root, [g.x_backprop, g.scale_backprop, g.offset_backprop],
                              {xp: x}, backend)
    fwd = fused_bn_forward_f64(x, scale, offset, [], [], epsilon=0.01, data_format="NCHW")
    ref = fused_bn_grad_f64(dy, x, scale, fwd["reserve_space_1"], fwd["reserve_space_2"],
                            epsilon=0.01, data_format="NCHW")
    assert_close(dx, ref["x_backprop"], dtype=F32, mag=ref["mag"]["x_backprop"])
    assert_close(dscale, ref["scale_backprop"], dtype=F32, mag=ref["mag"]["scale_backprop"])
    assert_close(doffset, ref["offset_backprop"], dtype=F32, mag=ref["mag"]["offset_backprop"])
    # the textbook identity: the training-mode x_backprop sums to zero per channel
    assert np.abs(dx.sum(axis=(0, 2, 3))).max() < 1e-4 * np.abs(dx).sum()


# ----------------------------------------------------------------------------- global normalization


def global_norm_run(backend, t, m, v, beta, gamma, backprop, *, epsilon, scaled):
    root = mg.Scope.NewRootScope()
    holders, feeds = feed_all(root, [t, m, v, beta, gamma, backprop], static=False)
    y = ops.BatchNormWithGlobalNormalization(root, *holders[:5], epsilon, scaled)
    g = ops.BatchNormWithGlobalNormalizationGrad(root, *holders[:3], holders[4], holders[5],
                                                 epsilon, scaled)
    return run(root, [y] + list(g), feeds, backend)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("scaled", [True, False])
def test_global_normalization_empty(backend, dtype, scaled):
    """Empty t: zero sums, so the vectors are signed zeros: dm = -0 * sign(gamma),
    dv = -0 * sign(gamma) (TF 2.21 gives these; dv is +0 only for negative gamma),
    db = dg = +0 — exactly what the float64 formula gives."""
    t = np.zeros((0, 2, 2, 3), dtype)
    vec = np.array([1.0, -2.0, 0.5], dtype)
    y, dx, dm, dv, db, dg = global_norm_run(backend, t, vec, vec * vec, vec, vec, t,
                                            epsilon=1e-3, scaled=scaled)
    assert y.shape == dx.shape == t.shape and y.dtype == dx.dtype == dtype
    ref = global_norm_grad_f64(t, vec, vec * vec, vec, t, variance_epsilon=1e-3,
                               scale_after_normalization=scaled)
    for name, value in zip(("dm", "dv", "db", "dg"), (dm, dv, db, dg)):
        assert value.dtype == dtype and value.shape == (3,) and (value == 0).all(), name
        assert np.array_equal(np.signbit(value), np.signbit(ref[name])), (
            f"{name}: {value} vs formula {ref[name]}")
    assert np.signbit(dm).tolist() == ([True, False, True] if scaled else [True] * 3)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_global_normalization_zero_variance_zero_epsilon(backend, dtype):
    t = np.array([1.0, 2.0, -1.0, 3.0], dtype).reshape(1, 2, 2, 1)
    one, zero = np.ones(1, dtype), np.zeros(1, dtype)
    y, dx, dm, dv, db, dg = global_norm_run(backend, t, zero, zero, zero, one, np.ones_like(t),
                                            epsilon=0.0, scaled=True)
    assert np.isinf(y).all()
    for value in (dx, dm, dv, dg):
        assert np.isinf(value).all()
    assert db[0] == 4


def test_global_normalization_ignores_gamma_when_not_scaling(backend):
    rng = np.random.default_rng(16)
    t = rng.normal(0, 1, (2, 2, 2, 3)).astype(F32)
    m, v, beta = (rng.uniform(0.5, 1, 3).astype(F32) for _ in range(3))
    outs = [global_norm_run(backend, t, m, v, beta, gamma, t, epsilon=1e-3, scaled=False)
            for gamma in (np.ones(3, F32), np.array([5.0, -2.0, np.nan], F32))]
    for a, b in zip(*outs):
        assert_identical(a, b)
    assert not outs[0][5].any()


# ----------------------------------------------------------------------------- run-time errors


def fused_forward_error(backend, x, scale, offset, mean, variance, *parts, **attrs):
    run_time_error(backend, "FusedBatchNormV3", [x, scale, offset, mean, variance], *parts,
                   **attrs)


X = np.zeros((2, 3, 4, 5), F32)
C5, C4, C6 = np.ones(5, F32), np.ones(4, F32), np.ones(6, F32)


class TestRunTimeErrors:
    """Unknown static shapes: only the fed data shows the problem, so Run raises."""

    @pytest.mark.parametrize("x, data_format, rank", [
        (np.zeros((3, 4, 5), F32), "NHWC", 4), (np.zeros((2, 3, 2, 2, 5), F32), "NHWC", 4),
        (np.zeros((2, 3, 4, 5), F32), "NDHWC", 5), (np.zeros((5,), F32), "NCDHW", 5)])
    def test_x_rank(self, backend, x, data_format, rank):
        fused_forward_error(backend, x, C5, C5, C5, C5, "input 'x'", f"{rank}-dimensional",
                            data_format, "[" + ",".join(map(str, x.shape)) + "]",
                            data_format=data_format)

    @pytest.mark.parametrize("name", ["scale", "offset"])
    def test_scale_offset_size(self, backend, name):
        vectors = {"scale": C5, "offset": C5, "mean": C5, "variance": C5, name: C4}
        fused_forward_error(backend, X, *vectors.values(), f"input '{name}'",
                            "channels of x", "expected 5, got 4")

    @pytest.mark.parametrize("name", ["mean", "variance"])
    def test_running_stats_size(self, backend, name):
        vectors = {"scale": C5, "offset": C5, "mean": C5, "variance": C5, name: C6}
        fused_forward_error(backend, X, *vectors.values(), "When is_training=false",
                            f"input '{name}'", "expected 5, got 6", is_training=False)
        vectors[name] = np.zeros(0, F32)
        fused_forward_error(backend, X, *vectors.values(), "When exponential_avg_factor != 1",
                            f"input '{name}'", "expected 5, got 0", exponential_avg_factor=0.5)

    @pytest.mark.parametrize("name", ["scale", "offset", "mean", "variance"])
    def test_vectors_must_be_1d(self, backend, name):
        vectors = {"scale": C5, "offset": C5, "mean": C5, "variance": C5}
        vectors[name] = np.ones((1, 5), F32)
        fused_forward_error(backend, X, *vectors.values(), f"input '{name}'", "1-dimensional",
                            "[1,5]")
        vectors[name] = np.ones((), F32)  # even when not read (training, eaf = 1)
        fused_forward_error(backend, X, *vectors.values(), f"input '{name}'", "1-dimensional",
                            "[]")

    def test_v1_v2_report_their_own_op(self, backend):
        for op_name in ("FusedBatchNorm", "FusedBatchNormV2"):
            run_time_error(backend, op_name, [X, C4, C5, C5, C5], "input 'scale'",
                           "expected 5, got 4")
        for op_name in ("FusedBatchNormGrad", "FusedBatchNormGradV2"):
            run_time_error(backend, op_name, [X, X, C5, C6, C5], "input 'reserve_space_1'",
                           "expected 5, got 6")

    def grad_error(self, backend, values, *parts, **attrs):
        run_time_error(backend, "FusedBatchNormGradV3", values + [np.zeros(0, F32)], *parts,
                       **attrs)

    def test_grad_shape_mismatch(self, backend):
        other = np.zeros((2, 3, 2, 5), F32)
        self.grad_error(backend, [other, X, C5, C5, C5], "x and y_backprop must have same "
                        "shape, but x has shape [2,3,4,5] and y_backprop has shape [2,3,2,5]")
        self.grad_error(backend, [np.zeros((2, 3, 4, 6), F32), X, C5, C5, C5],
                        "x has shape [2,3,4,5]", "y_backprop has shape [2,3,4,6]")

    def test_grad_rank(self, backend):
        self.grad_error(backend, [X[0], X[0], C5, C5, C5], "input 'y_backprop'",
                        "4-dimensional", "[3,4,5]")
        self.grad_error(backend, [X, X, C5, C5, C5], "input 'y_backprop'", "5-dimensional",
                        data_format="NCDHW")

    @pytest.mark.parametrize("position, name", [(2, "scale"), (3, "reserve_space_1"),
                                                (4, "reserve_space_2")])
    def test_grad_vectors(self, backend, position, name):
        for wrong, text in ((C4, "expected 5, got 4"), (np.zeros(0, F32), "expected 5, got 0"),
                            (np.ones((1, 5), F32), "1-dimensional, got shape [1,5]")):
            values = [X, X, C5, C5, C5]
            values[position] = wrong
            self.grad_error(backend, values, f"input '{name}'", text)

    @pytest.mark.parametrize("op_name", ["BatchNormWithGlobalNormalization",
                                         "BatchNormWithGlobalNormalizationGrad"])
    def test_global_norm_checks_channels(self, backend, op_name):
        """TF reads out of bounds here; minigraph checks (decision table)."""
        t = np.zeros((2, 3, 4, 5), F32)
        names = ("m", "v", "beta", "gamma") if op_name.endswith("tion") else ("m", "v", "gamma")
        for position, name in enumerate(names, start=1):
            values = [t, C5, C5, C5] + ([C5] if op_name.endswith("tion") else [t])
            values[position] = C4
            run_time_error(backend, op_name, values, f"input '{name}'", "channels of t,",
                           "expected 5, got 4", variance_epsilon=1e-3,
                           scale_after_normalization=True)

    def test_global_norm_ranks_and_backprop(self, backend):
        t = np.zeros((2, 3, 4, 5), F32)
        attrs = {"variance_epsilon": 1e-3, "scale_after_normalization": True}
        run_time_error(backend, "BatchNormWithGlobalNormalization", [t[0], C5, C5, C5, C5],
                       "input 't' must be 4-dimensional, got shape [3,4,5]", **attrs)
        run_time_error(backend, "BatchNormWithGlobalNormalizationGrad",
                       [t, C5[None], C5, C5, t],
                       "m must be 1-dimensional, got shape [1,5] (input 'm')", **attrs)
        run_time_error(backend, "BatchNormWithGlobalNormalizationGrad", [t, C5, C5, C5, t[:, :2]],
                       "input 'backprop'", "expected [2,3,4,5], got [2,2,4,5]", **attrs)


def test_deprecated_ops_run_without_warnings_at_run_time(backend):
    root = mg.Scope.NewRootScope()
    t = np.ones((1, 1, 1, 2), F32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = ops.BatchNormWithGlobalNormalization(root, t, t[0, 0, 0], t[0, 0, 0], t[0, 0, 0],
                                                 t[0, 0, 0], 0.0, True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert_close(run(root, y, backend=backend), np.zeros((1, 1, 1, 2)) + 1.0, dtype=F32)
