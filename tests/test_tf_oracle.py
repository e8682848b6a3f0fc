"""Differential tests against TensorFlow 2.21 (CPU): random cases through ``tf.raw_ops`` and
through minigraph must agree, and every bad input TensorFlow rejects minigraph rejects too.

What is compared (docs/tf-semantics.md#two-cpu-kernels): y, batch_mean, batch_variance,
x/scale/offset backprops everywhere; reserve_space_1/2 only in training with non-empty x (in
inference TF's Eigen kernel leaves them uninitialized). reserve_space_3/4/5 are never compared
(their shape depends on the kernel TF picks). Tolerances: float32 ~1e-5 relative to the term
size, float16/bfloat16 one ulp of the storage type (both compute in float32 and round once) —
see conftest.assert_close.

BatchNormWithGlobalNormalization(Grad) only run in TF through a legacy GraphDef (producer
version 8, docs/tf-semantics.md#running-them-in-tensorflow). TF does their float16 math in
half precision while minigraph computes in float32 and rounds once, so float16 is compared
with a looser tolerance (``HALF_MATH_RTOL``).
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
from conftest import (
    BACKENDS,
    BF16,
    assert_close,
    fused_bn_forward_f64,
    fused_bn_grad_f64,
    global_norm_f64,
    global_norm_grad_f64,
    random_case,
    run,
    x_shape,
)

import minigraph as mg
from minigraph import ops

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

pytestmark = [pytest.mark.oracle, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

F32 = np.float32
FORMATS = ("NHWC", "NCHW", "NDHWC", "NCDHW")
DTYPES = (np.dtype(F32), np.dtype(np.float16), BF16)
FORWARD = ("y", "batch_mean", "batch_variance", "reserve_space_1", "reserve_space_2")
GRAD = ("x_backprop", "scale_backprop", "offset_backprop")
# float16 BatchNormWithGlobalNormalization(Grad): TF rounds every intermediate (and its sums) to
# half; allow 4 half-precision epsilons of the term size on top of one ulp (observed: <= 1).
HALF_MATH_RTOL = 4 * 2.0**-10


@pytest.fixture(scope="module")
def tf():
    """TensorFlow, imported once; the module is skipped only when the import fails."""
    return pytest.importorskip("tensorflow")


def tf_names(version: str, grad: bool = False) -> str:
    base = "FusedBatchNormGrad" if grad else "FusedBatchNorm"
    return base + ("" if version == "V1" else version)


# ----------------------------------------------------------------------------- running both sides


def tf_forward(tf, version, x, scale, offset, mean, variance, **attrs):
    op = getattr(tf.raw_ops, tf_names(version))
    result = op(x=x, scale=scale, offset=offset, mean=mean, variance=variance, **attrs)
    return dict(zip(FORWARD, (t.numpy() for t in result)))


def tf_grad(tf, version, dy, x, scale, rs1, rs2, rs3=None, **attrs):
    op = getattr(tf.raw_ops, tf_names(version, grad=True))
    extra = {"reserve_space_3": np.zeros(0, F32) if rs3 is None else rs3} \
        if version == "V3" else {}
    result = op(y_backprop=dy, x=x, scale=scale, reserve_space_1=rs1, reserve_space_2=rs2,
                **extra, **attrs)
    return dict(zip(GRAD, (t.numpy() for t in result)))


def mg_forward(backend, version, x, scale, offset, mean, variance, **attrs):
    root = mg.Scope.NewRootScope()
    wrapper = {"V1": ops.FusedBatchNorm, "V2": ops.FusedBatchNormV2,
               "V3": ops.FusedBatchNormV3}[version]
    xp = ops.Placeholder(root, mg.as_dtype(x.dtype))
    bn = wrapper(root, xp, scale, offset, mean, variance, **attrs)
    return dict(zip(FORWARD, run(root, list(bn)[:5], {xp: x}, backend)))


def mg_grad(backend, version, dy, x, scale, rs1, rs2, rs3=None, **attrs):
    root = mg.Scope.NewRootScope()
    dyp, xp = (ops.Placeholder(root, mg.as_dtype(x.dtype)) for _ in range(2))
    if version == "V3":
        g = ops.FusedBatchNormGradV3(root, dyp, xp, scale, rs1, rs2,
                                     np.zeros(0, F32) if rs3 is None else rs3, **attrs)
    else:
        wrapper = ops.FusedBatchNormGradV2 if version == "V2" else ops.FusedBatchNormGrad
        g = wrapper(root, dyp, xp, scale, rs1, rs2, **attrs)
    return dict(zip(GRAD, run(root, list(g)[:3], {dyp: dy, xp: x}, backend)))


def compare_forward(mine, theirs, ref, dtype, *, training, empty=False, what=""):
    names = FORWARD if training and not empty else FORWARD[:3]
    for name in names:
        assert_close(mine[name], np.asarray(theirs[name], np.float64),
                     dtype=dtype if name == "y" else F32, mag=ref["mag"].get(name),
                     what=f"{what} {name}")


def compare_grad(mine, theirs, ref, dtype, what=""):
    for name in GRAD:
        assert_close(mine[name], np.asarray(theirs[name], np.float64),
                     dtype=dtype if name == "x_backprop" else F32, mag=ref["mag"].get(name),
                     what=f"{what} {name}")


def random_shape(rng, data_format):
    spatial = tuple(int(d) for d in rng.integers(1, 5, len(data_format) - 2))
    return x_shape(data_format, int(rng.integers(1, 4)), spatial, int(rng.integers(1, 7)))


# ----------------------------------------------------------------------------- forward


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("data_format", FORMATS)
def test_forward_v3_random(tf, backend, data_format, dtype):
    rng = np.random.default_rng(sum(map(ord, data_format + dtype.name)))
    for trial in range(6):
        shape = random_shape(rng, data_format)
        case = random_case(rng, shape, data_format, dtype, centre=rng.choice([0.0, 2.0, -9.0]),
                           spread=rng.choice([0.5, 3.0]))
        for training in (True, False):
            for eaf in (1.0, 0.3):
                attrs = {"epsilon": float(rng.choice([1e-4, 1e-3, 0.1])),
                         "data_format": data_format, "is_training": training,
                         "exponential_avg_factor": eaf}
                theirs = tf_forward(tf, "V3", *case, **attrs)
                mine = mg_forward(backend, "V3", *case, **attrs)
                ref = fused_bn_forward_f64(*case, **attrs)
                compare_forward(mine, theirs, ref, dtype, training=training,
                                what=f"trial {trial} {shape} {attrs}")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("version", ["V1", "V2"])
def test_forward_v1_v2_random(tf, backend, version):
    rng = np.random.default_rng(len(version))
    for data_format in ("NHWC", "NCHW"):
        for dtype in DTYPES if version == "V2" else (np.dtype(F32),):
            for training in (True, False):
                case = random_case(rng, random_shape(rng, data_format), data_format, dtype)
                attrs = {"epsilon": 1e-3, "data_format": data_format, "is_training": training,
                         "exponential_avg_factor": 0.5}
                theirs = tf_forward(tf, version, *case, **attrs)
                mine = mg_forward(backend, version, *case, **attrs)
                ref = fused_bn_forward_f64(*case, **attrs)
                compare_forward(mine, theirs, ref, dtype, training=training,
                                what=f"{version} {attrs}")


# ----------------------------------------------------------------------------- grad


def grad_case(rng, data_format, dtype, training, tf, version="V3"):
    """dy, x, scale and the reserve spaces TF's own forward op saves (training), or
    population statistics (inference)."""
    x, scale, offset, mean, variance = random_case(rng, random_shape(rng, data_format),
                                                   data_format, dtype)
    dy = rng.normal(0, 1, x.shape).astype(F32).astype(dtype)
    rs3 = None
    if training:
        fwd = getattr(tf.raw_ops, tf_names("V3" if len(data_format) == 5 else version))
        saved = fwd(x=x, scale=scale, offset=offset, mean=mean, variance=variance,
                    epsilon=1e-3, data_format=data_format, is_training=True)
        mean, variance = saved[3].numpy(), saved[4].numpy()
        rs3 = saved[5].numpy() if len(saved) == 6 else None  # [0] or [] depending on kernel
    return dy, x, scale, mean, variance, rs3


def tf_refuses(error) -> bool:
    return "only support NHWC" in str(error)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("data_format", FORMATS)
def test_grad_v3_random(tf, backend, data_format, dtype):
    rng = np.random.default_rng(100 + sum(map(ord, data_format + dtype.name)))
    for trial in range(6):
        for training in (True, False):
            dy, x, scale, rs1, rs2, rs3 = grad_case(rng, data_format, dtype, training, tf)
            attrs = {"epsilon": 1e-3, "data_format": data_format, "is_training": training}
            mine = mg_grad(backend, "V3", dy, x, scale, rs1, rs2, rs3, **attrs)
            ref = fused_bn_grad_f64(dy, x, scale, rs1, rs2, **attrs)
            try:
                theirs = tf_grad(tf, "V3", dy, x, scale, rs1, rs2, rs3, **attrs)
            except tf.errors.InvalidArgumentError as error:
                # TF's Eigen kernel refuses inference with channels-first formats
                # (docs/tf-semantics.md#channels-first-inference-gradient). Its autodiff
                # transposes to channels-last instead; compare with that route.
                assert tf_refuses(error) and not training and data_format[1] == "C", error
                theirs = tf_channels_last_grad(tf, dy, x, scale, rs1, rs2, **attrs)
            compare_grad(mine, theirs, ref, dtype, what=f"trial {trial} {x.shape} {attrs}")


def tf_channels_last_grad(tf, dy, x, scale, rs1, rs2, *, data_format, **attrs):
    to_last = (0, *range(2, x.ndim), 1)
    back = (0, x.ndim - 1, *range(1, x.ndim - 1))
    last = data_format[0] + data_format[2:] + "C"
    out = tf_grad(tf, "V3", np.ascontiguousarray(dy.transpose(to_last)),
                  np.ascontiguousarray(x.transpose(to_last)), scale, rs1, rs2,
                  data_format=last, **attrs)
    out["x_backprop"] = out["x_backprop"].transpose(back)
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("version", ["V1", "V2"])
def test_grad_v1_v2_random(tf, backend, version):
    rng = np.random.default_rng(200 + len(version))
    for data_format in ("NHWC", "NCHW"):
        for dtype in DTYPES if version == "V2" else (np.dtype(F32),):
            for training in (True, False):
                dy, x, scale, rs1, rs2, _ = grad_case(rng, data_format, dtype, training, tf,
                                                      version)
                attrs = {"epsilon": 1e-3, "data_format": data_format, "is_training": training}
                mine = mg_grad(backend, version, dy, x, scale, rs1, rs2, **attrs)
                ref = fused_bn_grad_f64(dy, x, scale, rs1, rs2, **attrs)
                try:
                    theirs = tf_grad(tf, version, dy, x, scale, rs1, rs2, **attrs)
                except tf.errors.InvalidArgumentError as error:
                    assert tf_refuses(error), error
                    continue  # the refused combos are checked against the formula elsewhere
                compare_grad(mine, theirs, ref, dtype, what=f"{version} {attrs}")


# ----------------------------------------------------------------------------- edge cases


def edge_cases():
    """(name, data_format, x, scale, offset, mean, variance, attrs) of
    docs/tf-semantics.md#forward-edge-cases."""
    rng = np.random.default_rng(300)
    c3 = np.array([1.5, -0.5, 2.0], F32)
    o3 = np.array([0.25, 1.0, -3.0], F32)
    m3, v3 = np.array([0.5, 1.0, -1.0], F32), np.array([2.0, 0.5, 1.0], F32)
    constant = np.full((2, 2, 2, 3), 1.75, F32)
    constant[..., 1] = -3
    cases = [
        ("n=1", "NHWC", rng.normal(0, 1, (1, 1, 1, 3)).astype(F32), c3, o3, m3, v3, {}),
        ("n=1 5-D", "NCDHW", rng.normal(0, 1, (1, 3, 1, 1, 1)).astype(F32), c3, o3, m3, v3, {}),
        ("C=1 NCHW", "NCHW", rng.normal(0, 1, (3, 1, 2, 2)).astype(F32), c3[:1], o3[:1],
         m3[:1], v3[:1], {}),
        ("C=1 single", "NHWC", np.full((1, 1, 1, 1), 2.0, F32), c3[:1], o3[:1], m3[:1],
         v3[:1], {}),
        ("constant", "NHWC", constant, c3, o3, m3, v3, {"epsilon": 1e-3}),
        ("constant eps 0", "NHWC", constant, c3, o3, m3, v3, {"epsilon": 0.0}),
        ("inference var 0 eps 0", "NHWC", rng.normal(0, 1, (2, 2, 2, 3)).astype(F32), c3, o3,
         m3, np.zeros(3, F32), {"epsilon": 0.0, "is_training": False}),
        ("eaf 0", "NHWC", rng.normal(0, 1, (2, 2, 2, 3)).astype(F32), c3, o3, m3, v3,
         {"exponential_avg_factor": 0.0}),
        ("eaf 2", "NCHW", rng.normal(0, 1, (2, 3, 2, 2)).astype(F32), c3, o3, m3, v3,
         {"exponential_avg_factor": 2.0}),
        ("half tiny", "NHWC", (rng.normal(0, 1e-6, (4, 3, 3, 3)) + 2e-6).astype(np.float16),
         np.ones(3, F32), np.zeros(3, F32), m3, v3, {"epsilon": 1e-12}),
        ("half overflow", "NHWC", np.array([[[[60000.0], [-60000.0], [1.0], [0.0]]]],
                                           np.float16),
         np.array([4.0], F32), np.zeros(1, F32), np.zeros(1, F32), np.ones(1, F32),
         {"epsilon": 0.0, "is_training": False}),
        ("half extremes", "NHWC", np.array([60000.0, -60000.0] * 4, np.float16).reshape(2, 2, 2, 1),
         np.ones(1, F32), np.zeros(1, F32), np.zeros(1, F32), np.ones(1, F32), {}),
        ("bf16 stats overflow", "NHWC", np.array([1e30, -1e30] * 4, F32).astype(BF16)
         .reshape(2, 2, 2, 1), np.ones(1, F32), np.array([0.5], F32), np.zeros(1, F32),
         np.ones(1, F32), {}),
    ]
    for shape, fmt in (((0, 3, 4, 3), "NHWC"), ((2, 3, 0, 2), "NCHW"),
                       ((0, 1, 2, 2, 3), "NDHWC"), ((2, 3, 1, 0, 2), "NCDHW")):
        for training, eaf in ((True, 1.0), (True, 0.3), (False, 1.0)):
            cases.append((f"empty {shape} {fmt} training={training} eaf={eaf}", fmt,
                          np.zeros(shape, F32), c3, o3, m3, v3,
                          {"is_training": training, "exponential_avg_factor": eaf}))
    cases.append(("C=0", "NHWC", np.zeros((2, 2, 2, 0), F32), *[np.zeros(0, F32)] * 4, {}))
    return cases


@pytest.mark.parametrize("backend", BACKENDS)
def test_forward_edge_cases(tf, backend):
    for name, fmt, x, scale, offset, mean, variance, attrs in edge_cases():
        attrs = {"data_format": fmt, **attrs}
        theirs = tf_forward(tf, "V3", x, scale, offset, mean, variance, **attrs)
        mine = mg_forward(backend, "V3", x, scale, offset, mean, variance, **attrs)
        ref = fused_bn_forward_f64(x, scale, offset, mean, variance, **attrs)
        compare_forward(mine, theirs, ref, x.dtype, training=attrs.get("is_training", True),
                        empty=x.size == 0, what=name)


@pytest.mark.parametrize("backend", BACKENDS)
def test_grad_edge_cases(tf, backend):
    rng = np.random.default_rng(301)
    ones = np.ones(3, F32)
    constant = np.full((2, 2, 2, 3), 1.75, F32)
    x1 = rng.normal(0, 1, (1, 1, 1, 3)).astype(F32)
    xr = rng.normal(0, 1, (2, 2, 2, 3)).astype(F32)
    cases = [
        ("n=1, reserve_space_1 = x", x1, x1.ravel(), np.zeros(3, F32), {}),
        ("constant, eps 0", constant, np.full(3, 1.75, F32), np.zeros(3, F32),
         {"epsilon": 0.0}),
        ("inference, var 0, eps 0", xr, np.zeros(3, F32), np.zeros(3, F32),
         {"epsilon": 0.0, "is_training": False}),
        ("inconsistent reserve spaces", xr, np.full(3, 1.0, F32), np.full(3, 4.0, F32), {}),
        ("empty", np.zeros((0, 2, 2, 3), F32), ones, ones, {}),
        ("empty inference", np.zeros((2, 0, 2, 3), F32), ones, ones, {"is_training": False}),
    ]
    for name, x, rs1, rs2, attrs in cases:
        dy = rng.normal(0, 1, x.shape).astype(F32)
        scale = np.array([1.5, -0.5, 2.0], F32)
        theirs = tf_grad(tf, "V3", dy, x, scale, rs1, rs2, **attrs)
        mine = mg_grad(backend, "V3", dy, x, scale, rs1, rs2, **attrs)
        ref = fused_bn_grad_f64(dy, x, scale, rs1, rs2, **attrs)
        compare_grad(mine, theirs, ref, F32, what=name)


@pytest.mark.parametrize("backend", BACKENDS)
def test_grad_empty_5d_keeps_x_shape(tf, backend):
    """TF's Eigen kernel returns a 4-D x_backprop for empty 5-D x (a TF bug,
    docs/tf-semantics.md#gradient-formulas); minigraph returns x's shape. Everything else
    agrees."""
    x = np.zeros((0, 1, 2, 2, 3), F32)
    ones = np.ones(3, F32)
    theirs = tf_grad(tf, "V3", x, x, ones, ones, ones, data_format="NDHWC")
    mine = mg_grad(backend, "V3", x, x, ones, ones, ones, data_format="NDHWC")
    assert mine["x_backprop"].shape == x.shape
    assert theirs["x_backprop"].size == 0
    for name in GRAD[1:]:
        np.testing.assert_array_equal(mine[name], theirs[name])


@pytest.mark.parametrize("rs3", [np.zeros(0, F32), np.zeros((), F32), np.ones((7, 3), F32)])
def test_reserve_space_3_is_ignored_by_both(tf, rs3):
    rng = np.random.default_rng(302)
    dy, x, scale, rs1, rs2, _ = grad_case(rng, "NHWC", np.dtype(F32), True, tf)
    theirs = tf_grad(tf, "V3", dy, x, scale, rs1, rs2, rs3)
    mine = mg_grad("reference", "V3", dy, x, scale, rs1, rs2, rs3)
    ref = fused_bn_grad_f64(dy, x, scale, rs1, rs2)
    compare_grad(mine, theirs, ref, F32)


# ----------------------------------------------------------------------------- deliberate


def test_negative_epsilon_tf_yields_nan_minigraph_rejects(tf):
    x = np.random.default_rng(303).normal(0, 1, (2, 2, 2, 3)).astype(F32)
    small = np.full(3, 0.25, F32)
    theirs = tf_forward(tf, "V3", x, small, small, small, small, epsilon=-0.5,
                        is_training=False)
    assert np.isnan(theirs["y"]).all()  # 0.25 - 0.5 < 0
    with pytest.raises(mg.errors.InvalidArgumentError, match="attr 'epsilon'.*>= 0"):
        mg_forward("reference", "V3", x, small, small, small, small, epsilon=-0.5,
                   is_training=False)


# ----------------------------------------------------------------------------- rejected inputs


X4 = np.zeros((2, 3, 4, 5), F32)
C5, C4, C6, E = np.ones(5, F32), np.ones(4, F32), np.ones(6, F32), np.zeros(0, F32)


def fwd_inputs(**changes):
    inputs = {"x": X4, "scale": C5, "offset": C5, "mean": C5, "variance": C5}
    inputs.update(changes)
    return inputs


def grad_inputs(**changes):
    inputs = {"y_backprop": X4, "x": X4, "scale": C5, "reserve_space_1": C5,
              "reserve_space_2": C5, "reserve_space_3": E}
    inputs.update(changes)
    return inputs


F16 = np.float16
REJECTED = [
    # (case id, op, inputs, attrs, TF mode: "eager" or "graph" where eager is kernel-dependent)
    ("scale != C", "FusedBatchNormV3", fwd_inputs(scale=C4), {}, "eager"),
    ("offset != C", "FusedBatchNormV3", fwd_inputs(offset=C6), {}, "eager"),
    ("mean != C inference", "FusedBatchNormV3", fwd_inputs(mean=C6), {"is_training": False},
     "eager"),
    ("variance != C inference", "FusedBatchNormV3", fwd_inputs(variance=C4),
     {"is_training": False}, "eager"),
    ("mean empty, eaf != 1", "FusedBatchNormV3", fwd_inputs(mean=E),
     {"exponential_avg_factor": 0.5}, "eager"),
    ("variance != C, eaf != 1", "FusedBatchNormV3", fwd_inputs(variance=C6),
     {"exponential_avg_factor": 0.5}, "eager"),
    ("mean scalar", "FusedBatchNormV3", fwd_inputs(mean=np.float32(1)), {}, "eager"),
    ("variance 2-D", "FusedBatchNormV3", fwd_inputs(variance=C5[None]), {"is_training": False},
     "eager"),
    ("scale 2-D", "FusedBatchNormV3", fwd_inputs(scale=C5[None]), {}, "eager"),
    ("offset 2-D", "FusedBatchNormV3", fwd_inputs(offset=C5[None]), {}, "eager"),
    ("x rank 3", "FusedBatchNormV3", fwd_inputs(x=X4[0]), {}, "eager"),
    ("x rank 6", "FusedBatchNormV3", fwd_inputs(x=X4[None, None]), {}, "eager"),
    ("x rank 5, NHWC", "FusedBatchNormV3", fwd_inputs(x=X4[None]), {}, "graph"),
    ("x rank 4, NDHWC", "FusedBatchNormV3", fwd_inputs(), {"data_format": "NDHWC"}, "graph"),
    ("x rank 4, NCDHW", "FusedBatchNormV3", fwd_inputs(), {"data_format": "NCDHW"}, "graph"),
    ("data_format foo", "FusedBatchNormV3", fwd_inputs(), {"data_format": "foo"}, "eager"),
    ("data_format nhwc", "FusedBatchNormV3", fwd_inputs(), {"data_format": "nhwc"}, "eager"),
    ("x float64", "FusedBatchNormV3", fwd_inputs(x=X4.astype(np.float64)), {}, "eager"),
    ("x int32", "FusedBatchNormV3", fwd_inputs(x=X4.astype(np.int32)), {}, "eager"),
    ("all float64", "FusedBatchNormV3",
     {k: v.astype(np.float64) for k, v in fwd_inputs().items()}, {}, "eager"),
    ("offset float16", "FusedBatchNormV3", fwd_inputs(offset=C5.astype(F16)), {}, "eager"),
    ("U float16", "FusedBatchNormV3",
     {k: v.astype(F16) for k, v in fwd_inputs().items()}, {}, "eager"),
    ("U bfloat16 (no CPU kernel)", "FusedBatchNormV3",
     {k: v.astype(BF16) for k, v in fwd_inputs().items()}, {}, "eager"),
    ("V2 5-D format", "FusedBatchNormV2", fwd_inputs(x=X4[None]), {"data_format": "NDHWC"},
     "eager"),
    ("V2 scale != C", "FusedBatchNormV2", fwd_inputs(scale=C4), {}, "eager"),
    ("V1 float16", "FusedBatchNorm",
     {k: v.astype(F16) for k, v in fwd_inputs().items()}, {}, "eager"),
    ("grad scale != C", "FusedBatchNormGradV3", grad_inputs(scale=C4), {}, "eager"),
    ("grad reserve_space_1 != C", "FusedBatchNormGradV3", grad_inputs(reserve_space_1=C6), {},
     "eager"),
    ("grad reserve_space_1 empty", "FusedBatchNormGradV3", grad_inputs(reserve_space_1=E), {},
     "eager"),
    ("grad reserve_space_2 != C", "FusedBatchNormGradV3", grad_inputs(reserve_space_2=C4), {},
     "eager"),
    ("grad reserve_space_1 2-D", "FusedBatchNormGradV3",
     grad_inputs(reserve_space_1=C5[None]), {}, "eager"),
    ("grad reserve_space_2 2-D", "FusedBatchNormGradV3",
     grad_inputs(reserve_space_2=C5[None]), {}, "eager"),
    ("grad y_backprop channels", "FusedBatchNormGradV3",
     grad_inputs(y_backprop=np.zeros((2, 3, 4, 6), F32)), {}, "eager"),
    ("grad y_backprop other dims", "FusedBatchNormGradV3",
     grad_inputs(y_backprop=np.zeros((2, 3, 2, 5), F32)), {}, "eager"),
    ("grad x rank 3", "FusedBatchNormGradV3", grad_inputs(x=X4[0], y_backprop=X4[0]), {},
     "eager"),
    ("grad x rank 4, NDHWC", "FusedBatchNormGradV3", grad_inputs(), {"data_format": "NDHWC"},
     "graph"),
    ("grad x vs y_backprop dtype", "FusedBatchNormGradV3", grad_inputs(y_backprop=X4.astype(F16)),
     {}, "eager"),
    ("grad scale float16", "FusedBatchNormGradV3",
     grad_inputs(y_backprop=X4.astype(F16), x=X4.astype(F16), scale=C5.astype(F16)), {},
     "eager"),
    ("grad reserve_space_3 float16", "FusedBatchNormGradV3",
     grad_inputs(reserve_space_3=E.astype(F16)), {}, "eager"),
    ("grad x float64", "FusedBatchNormGradV3",
     grad_inputs(y_backprop=X4.astype(np.float64), x=X4.astype(np.float64)), {}, "eager"),
    ("grad data_format", "FusedBatchNormGradV3", grad_inputs(), {"data_format": "CHWN"},
     "eager"),
    ("grad V1 float16", "FusedBatchNormGrad",
     {k: v.astype(F16) for k, v in grad_inputs().items() if k != "reserve_space_3"}, {},
     "eager"),
]


def run_tf(tf, op_name, inputs, attrs, mode):
    op = getattr(tf.raw_ops, op_name)
    if mode == "eager":  # tensors, so that no input is silently converted to another's dtype
        return op(**{k: tf.constant(v) for k, v in inputs.items()}, **attrs)

    @tf.function
    def traced():
        return op(**{k: tf.constant(v) for k, v in inputs.items()}, **attrs)

    return traced()


def run_minigraph(op_name, inputs, attrs, static):
    """Build with static shapes (Const inputs) or unknown-shape placeholders, then run."""
    root = mg.Scope.NewRootScope()
    feeds = {}
    args = []
    for value in inputs.values():
        value = np.asarray(value)
        if static:
            args.append(value)
        else:
            holder = ops.Placeholder(root, mg.as_dtype(value.dtype))
            feeds[holder] = value
            args.append(holder)
    result = getattr(ops, op_name)(root, *args, **attrs)
    return run(root, list(result), feeds)


@pytest.mark.parametrize("case, op_name, inputs, attrs, mode", REJECTED,
                         ids=[c[0] for c in REJECTED])
def test_rejected_by_tf_and_by_minigraph(tf, case, op_name, inputs, attrs, mode):
    with pytest.raises((tf.errors.OpError, ValueError, TypeError, AssertionError)):
        run_tf(tf, op_name, inputs, attrs, mode)
    for static in (True, False):
        with pytest.raises(mg.errors.InvalidArgumentError) as info:
            run_minigraph(op_name, inputs, attrs, static)
        assert op_name in str(info.value)


# ----------------------------------------------------------------------------- global normalization


@pytest.fixture(scope="module")
def legacy_graphs(tf):
    """One legacy graph (GraphDef producer 8) per dtype with both ops for both values of
    scale_after_normalization, fed through unknown-shape placeholders."""
    from tensorflow.core.framework import graph_pb2

    graphs = {}
    for dtype in (np.float16, np.float32, np.float64):
        graph = tf.Graph()
        empty = graph_pb2.GraphDef()
        empty.versions.producer = 8
        with graph.as_default():
            tf.graph_util.import_graph_def(empty, name="")
            tf_dtype = tf.as_dtype(dtype)
            t, backprop = (tf.compat.v1.placeholder(tf_dtype, [None] * 4) for _ in range(2))
            m, v, beta, gamma = (tf.compat.v1.placeholder(tf_dtype, [None]) for _ in range(4))
            outputs = {}
            for scaled in (True, False):
                outputs[scaled] = [tf.raw_ops.BatchNormWithGlobalNormalization(
                    t=t, m=m, v=v, beta=beta, gamma=gamma, variance_epsilon=1e-3,
                    scale_after_normalization=scaled)] + list(
                    tf.raw_ops.BatchNormWithGlobalNormalizationGrad(
                        t=t, m=m, v=v, gamma=gamma, backprop=backprop, variance_epsilon=1e-3,
                        scale_after_normalization=scaled))
        session = tf.compat.v1.Session(graph=graph)
        graphs[np.dtype(dtype)] = (session, (t, m, v, beta, gamma, backprop), outputs)
    yield graphs
    for session, _, _ in graphs.values():
        session.close()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64], ids=str)
def test_global_normalization_vs_tf(legacy_graphs, backend, dtype):
    session, holders, outputs = legacy_graphs[np.dtype(dtype)]
    rng = np.random.default_rng(400)
    for _ in range(6):
        shape = tuple(int(d) for d in rng.integers(1, 4, 4))
        c = shape[3]
        t = rng.normal(1, 2, shape).astype(dtype)
        m, beta = rng.normal(1, 1, c).astype(dtype), rng.normal(0, 1, c).astype(dtype)
        v = rng.uniform(0.25, 3, c).astype(dtype)
        gamma = rng.uniform(-2, 2, c).astype(dtype)
        backprop = rng.normal(0, 1, shape).astype(dtype)
        values = (t, m, v, beta, gamma, backprop)
        for scaled in (True, False):
            theirs = session.run(outputs[scaled], dict(zip(holders, values)))
            root = mg.Scope.NewRootScope()
            y = ops.BatchNormWithGlobalNormalization(root, t, m, v, beta, gamma, 1e-3, scaled)
            g = ops.BatchNormWithGlobalNormalizationGrad(root, t, m, v, gamma, backprop, 1e-3,
                                                         scaled)
            mine = run(root, [y] + list(g), backend=backend)
            attrs = {"variance_epsilon": 1e-3, "scale_after_normalization": scaled}
            _, y_mag = global_norm_f64(t, m, v, beta, gamma, **attrs)
            ref = global_norm_grad_f64(t, m, v, gamma, backprop, **attrs)
            mags = [y_mag] + [ref["mag"][k] for k in ("dx", "dm", "dv", "db", "dg")]
            for name, a, b, mag in zip(("result", "dx", "dm", "dv", "db", "dg"), mine, theirs,
                                       mags):
                assert a.shape == b.shape and a.dtype == b.dtype, name
                rtol = HALF_MATH_RTOL if dtype == np.float16 else None
                assert_close(a, b.astype(np.float64), dtype=dtype, rtol=rtol, mag=mag,
                             what=f"{name} {shape} scaled={scaled}")


def test_global_normalization_edge_cases_vs_tf(legacy_graphs):
    session, holders, outputs = legacy_graphs[np.dtype(np.float32)]
    one, zero = np.ones(2, F32), np.zeros(2, F32)
    cases = [
        ("empty", np.zeros((0, 2, 2, 2), F32), one, one),
        ("v = 0 with eps 1e-3", np.arange(8, dtype=F32).reshape(1, 2, 2, 2), one, zero),
    ]
    for name, t, m, v in cases:
        for scaled in (True, False):
            theirs = session.run(outputs[scaled], dict(zip(holders, (t, m, v, one, one, t))))
            root = mg.Scope.NewRootScope()
            y = ops.BatchNormWithGlobalNormalization(root, t, m, v, one, one, 1e-3, scaled)
            g = ops.BatchNormWithGlobalNormalizationGrad(root, t, m, v, one, t, 1e-3, scaled)
            mine = run(root, [y] + list(g))
            for a, b in zip(mine, theirs):
                assert_close(a, b.astype(np.float64), dtype=F32, what=f"{name} {scaled}")
                assert np.array_equal(np.signbit(a), np.signbit(b)), f"{name}: signs of zeros"


GLOBAL_REJECTED = [
    ("t rank 3", {"t": np.zeros((3, 4, 5), F32)}, "runtime"),
    ("m rank 2", {"m": np.ones((1, 5), F32)}, "runtime"),
    ("gamma rank 2", {"gamma": np.ones((1, 5), F32)}, "runtime"),
    ("backprop rank 3", {"backprop": np.zeros((3, 4, 5), F32)}, "runtime"),
    ("v != C", {"v": np.ones(4, F32)}, "static"),
    ("backprop shape", {"backprop": np.zeros((2, 2, 4, 5), F32)}, "static"),
    ("bfloat16", "bfloat16", "runtime"),
]


@pytest.mark.parametrize("case, change, where", GLOBAL_REJECTED,
                         ids=[c[0] for c in GLOBAL_REJECTED])
def test_global_normalization_rejected_by_tf_and_minigraph(tf, case, change, where):
    from tensorflow.core.framework import graph_pb2

    inputs = {"t": np.zeros((2, 3, 4, 5), F32), "m": C5, "v": C5, "gamma": C5,
              "backprop": np.zeros((2, 3, 4, 5), F32)}
    if change == "bfloat16":
        inputs = {k: v.astype(BF16) for k, v in inputs.items()}
    else:
        inputs.update(change)
    graph = tf.Graph()
    empty = graph_pb2.GraphDef()
    empty.versions.producer = 8
    with pytest.raises((tf.errors.OpError, ValueError)):
        with graph.as_default():
            tf.graph_util.import_graph_def(empty, name="")
            if where == "static":  # TF's shape inference sees it
                args = {k: tf.constant(v) for k, v in inputs.items()}
            else:  # only the data shows it
                args = {k: tf.compat.v1.placeholder(tf.as_dtype(v.dtype)) for k, v in
                        inputs.items()}
            grad = tf.raw_ops.BatchNormWithGlobalNormalizationGrad(
                **args, variance_epsilon=1e-3, scale_after_normalization=True)
        with tf.compat.v1.Session(graph=graph) as session:
            feeds = {args[k]: v for k, v in inputs.items()} if where == "runtime" else {}
            session.run(list(grad), feeds)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for static in (True, False):
            with pytest.raises(mg.errors.InvalidArgumentError,
                               match="BatchNormWithGlobalNormalizationGrad"):
                run_minigraph("BatchNormWithGlobalNormalizationGrad", inputs,
                              {"variance_epsilon": 1e-3, "scale_after_normalization": True},
                              static)

