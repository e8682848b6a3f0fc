"""Native and reference backends agree on non-finite and overflowing inputs.

Every batch-norm op (FusedBatchNormV3 and FusedBatchNormGradV3 in training and inference
mode, FusedBatchNormGradGrad in both modes, BatchNormWithGlobalNormalization and its Grad)
runs through a session on backend="native" and backend="reference" with one channel of one
input holding +inf, -inf, NaN, 1e38, 3.4e38 or -3.4e38 (in one element, in every element, or
+v and -v alternating), for each dtype, NHWC and NCHW, and every instruction set of the
native kernels. The two must agree exactly on which elements are NaN, +inf and -inf, and
closely on the finite ones.

The reference's semantics (TensorFlow's float32 formulas, with per-channel sums of the
float32 terms accumulated in float64): the mean of a channel holding -inf is -inf and its
variance (x - mean)^2 is NaN; an infinite reserve-space variance gives r = 0; the mean of
finite values is finite even when their float32 sum would overflow (TensorFlow's Eigen sums
overflow or not depending on the order of the elements, so that overflow is no semantics).
"""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest

import minigraph as mg
from minigraph import ops
from minigraph.backends import native

if not native.available():
    pytest.skip(f"native backend unavailable: {native.unavailable_reason()}",
                allow_module_level=True)

F32 = np.float32
BF16 = np.dtype(ml_dtypes.bfloat16)
SPECIALS = {"+inf": np.inf, "-inf": -np.inf, "nan": np.nan, "1e38": 1e38, "3.4e38": 3.4e38,
            "-3.4e38": -3.4e38}
MODES = ("one", "all", "alternating")  # the special value in one / every element of channel 1
N, H, W, C = 3, 6, 6, 3  # NCHW planes of 36 (plane blocks), NHWC rows of 3 (row blocks)
EPS = 1e-3
TOLERANCE = {np.dtype(F32): 1e-4, np.dtype(np.float16): 2e-3, BF16: 1.6e-2}

# op -> (input names in the op's order: tensors "t:", vectors "v:", empty "e:";
#        the inputs that get the special values; attrs; dtypes)
FUSED = {"epsilon": EPS}
GLOBAL = {"variance_epsilon": EPS, "scale_after_normalization": True}
ALL_DTYPES = (np.dtype(F32), np.dtype(np.float16), BF16)
OPS = {
    "FusedBatchNormV3-training": (
        "FusedBatchNormV3", ["t:x", "v:scale", "v:offset", "e:mean", "e:variance"],
        ["x"], dict(FUSED, is_training=True), ALL_DTYPES),
    "FusedBatchNormV3-inference": (
        "FusedBatchNormV3", ["t:x", "v:scale", "v:offset", "v:mean", "v:variance"],
        ["x", "mean", "variance"], dict(FUSED, is_training=False), ALL_DTYPES),
    "FusedBatchNormGradV3-training": (
        "FusedBatchNormGradV3",
        ["t:dy", "t:x", "v:scale", "v:mean", "v:variance", "e:reserve_space_3"],
        ["dy", "x", "mean", "variance"], dict(FUSED, is_training=True), ALL_DTYPES),
    "FusedBatchNormGradV3-inference": (
        "FusedBatchNormGradV3",
        ["t:dy", "t:x", "v:scale", "v:mean", "v:variance", "e:reserve_space_3"],
        ["dy", "x", "mean", "variance"], dict(FUSED, is_training=False), ALL_DTYPES),
    "FusedBatchNormGradGrad-training": (
        "FusedBatchNormGradGrad",
        ["t:dy", "t:x", "v:scale", "v:mean", "v:variance", "t:gx", "v:gscale", "v:goffset"],
        ["dy", "x", "gx"], dict(FUSED, is_training=True), ALL_DTYPES),
    "FusedBatchNormGradGrad-inference": (
        "FusedBatchNormGradGrad",
        ["t:dy", "t:x", "v:scale", "v:mean", "v:variance", "t:gx", "v:gscale", "v:goffset"],
        ["dy", "x", "gx", "mean", "variance"], dict(FUSED, is_training=False), ALL_DTYPES),
    "BatchNormWithGlobalNormalization": (
        "BatchNormWithGlobalNormalization", ["t:x", "V:mean", "V:variance", "V:offset",
                                             "V:scale"],
        ["x", "mean", "variance"], GLOBAL, ALL_DTYPES[:2]),
    "BatchNormWithGlobalNormalizationGrad": (
        "BatchNormWithGlobalNormalizationGrad",
        ["t:x", "V:mean", "V:variance", "V:scale", "t:dy"],
        ["x", "dy", "mean", "variance"], GLOBAL, ALL_DTYPES[:2]),
}


@pytest.fixture(params=native.ISAS)
def isa(request):
    previous = native.isa()
    if native.set_isa(request.param) != request.param:
        native.set_isa(previous)
        pytest.skip(f"this CPU has no {request.param}")
    yield request.param
    native.set_isa(previous)


def base_values(dtype: np.dtype, channels_last: bool) -> dict[str, np.ndarray]:
    """Finite inputs: tensors in x's shape (storage dtype), float32 vectors of C."""
    rng = np.random.default_rng(7)
    shape = (N, H, W, C) if channels_last else (N, C, H, W)

    def tensor(loc):
        return (rng.standard_normal(shape) + loc).astype(F32)

    def vector(lo, hi):
        return rng.uniform(lo, hi, C).astype(F32)

    return {"x": tensor(1.0), "dy": tensor(0.3), "gx": tensor(-0.2),
            "scale": vector(0.5, 1.0), "offset": vector(-1, 1), "mean": vector(0.5, 1.5),
            "variance": vector(1, 3), "gscale": vector(-1, 1), "goffset": vector(-1, 1)}


def with_special(values: dict, name: str, value: float, mode: str, channels_last: bool
                 ) -> dict:
    """A copy of values with channel 1 of input ``name`` holding ``value`` (per ``mode``);
    per-channel vectors get it at index 1."""
    values = {k: v.copy() for k, v in values.items()}
    target = values[name]
    if target.ndim == 1:
        target[1] = value
        return values
    channel = target[..., 1] if channels_last else target[:, 1]
    flat = channel.reshape(-1)
    if mode == "one":
        flat[flat.size // 2 + 1] = value
    elif mode == "all":
        flat[:] = value
    else:
        flat[0::2], flat[1::2] = value, -value
    if channels_last:
        target[..., 1] = flat.reshape(channel.shape)
    else:
        target[:, 1] = flat.reshape(channel.shape)
    return values


def build(op_key: str, dtype: np.dtype, channels_last: bool):
    """(placeholders by input name, fetches, the sessions by backend) of one op."""
    op_name, inputs, _, attrs, _ = OPS[op_key]
    root = mg.Scope.NewRootScope()
    shape = [N, H, W, C] if channels_last else [N, C, H, W]
    holders, args = {}, []
    for spec in inputs:
        kind, name = spec.split(":")
        if kind == "e":
            args.append(ops.Const(root, np.zeros(0, F32)))
            continue
        holder_dtype, holder_shape = {"t": (dtype, shape), "v": (F32, [C]),
                                      "V": (dtype, [C])}[kind]
        holders[name] = ops.Placeholder(root, mg.as_dtype(np.dtype(holder_dtype)),
                                        shape=holder_shape)
        args.append(holders[name])
    if op_name.startswith("Fused"):
        attrs = dict(attrs, data_format="NHWC" if channels_last else "NCHW")
    elif not channels_last:
        return None  # BatchNormWithGlobalNormalization is channels-last only
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        result = getattr(ops, op_name)(root, *args, **attrs)
    fetches = list(result.operation.outputs)
    sessions = {b: mg.ClientSession(root, backend=b) for b in ("native", "reference")}
    return holders, fetches, sessions


def feeds_for(holders: dict, values: dict, dtype: np.dtype) -> dict:
    feeds = {}
    with np.errstate(over="ignore"):
        for name, holder in holders.items():
            value = values[name]
            feeds[holder] = value.astype(dtype) if value.ndim > 1 or holder.dtype != mg.float32 \
                else value
    return feeds


def assert_agree(native_out: np.ndarray, reference_out: np.ndarray, what: str) -> None:
    assert native_out.dtype == reference_out.dtype and native_out.shape == reference_out.shape
    a, b = native_out.astype(np.float64), reference_out.astype(np.float64)
    for test in (np.isnan, np.isposinf, np.isneginf):
        np.testing.assert_array_equal(test(a), test(b), err_msg=f"{what}: {test.__name__}")
    tol = TOLERANCE[np.dtype(reference_out.dtype)] if reference_out.dtype != np.float64 else 1e-12
    finite = np.isfinite(b)
    np.testing.assert_allclose(a[finite], b[finite], rtol=tol,
                               atol=tol * max(1.0, float(np.abs(b[finite]).max(initial=0))),
                               equal_nan=True, err_msg=what)


@pytest.mark.parametrize("channels_last", [True, False], ids=["NHWC", "NCHW"])
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("op_key", list(OPS))
def test_native_agrees_with_reference_on_non_finite_inputs(isa, op_key, dtype, channels_last):
    if dtype not in OPS[op_key][4]:
        pytest.skip(f"{OPS[op_key][0]} has no {dtype.name}")
    built = build(op_key, dtype, channels_last)
    if built is None:
        pytest.skip("channels-last only")
    holders, fetches, sessions = built
    base = base_values(dtype, channels_last)
    for name in OPS[op_key][2]:
        for (label, value), mode in ((s, m) for s in SPECIALS.items() for m in MODES):
            if base[name].ndim == 1 and mode != "one":
                continue
            feeds = feeds_for(holders, with_special(base, name, value, mode, channels_last),
                              dtype)
            with np.errstate(all="ignore"):
                results = {b: s.Run(feeds, fetches) for b, s in sessions.items()}
            for i, (got, expected) in enumerate(zip(results["native"], results["reference"])):
                assert_agree(got, expected, f"{op_key} {isa} output {i}: {name} = {label} "
                                            f"({mode})")


def test_reference_matches_tensorflow_on_non_finite_statistics():
    """The decisions above against TensorFlow 2.21 (CPU, float32): a channel holding -inf has
    mean -inf and variance NaN; +inf / NaN give NaN variances; infinite reserve spaces give
    the same NaN / zero pattern in FusedBatchNormGradV3 (both modes)."""
    tf = pytest.importorskip("tensorflow")
    from minigraph.backends import reference

    values = base_values(np.dtype(F32), True)
    empty = np.zeros(0, F32)
    with np.errstate(all="ignore"):
        for value in (np.inf, -np.inf, np.nan):
            for mode in MODES:
                v = with_special(values, "x", value, mode, True)
                got = tf.raw_ops.FusedBatchNormV3(x=v["x"], scale=v["scale"], offset=v["offset"],
                                                  mean=empty, variance=empty, epsilon=EPS,
                                                  is_training=True)
                ours = reference.bn_forward_training(v["x"], v["scale"], v["offset"], EPS, True)
                for theirs, mine in zip((got[0], got[3], got[4]), ours):
                    assert_agree(mine, theirs.numpy(), f"forward x = {value} ({mode})")
        for name in ("mean", "variance"):
            for value in (np.inf, -np.inf):
                v = with_special(values, name, value, "one", True)
                for training in (True, False):
                    got = tf.raw_ops.FusedBatchNormGradV3(
                        y_backprop=v["dy"], x=v["x"], scale=v["scale"],
                        reserve_space_1=v["mean"], reserve_space_2=v["variance"],
                        reserve_space_3=empty, epsilon=EPS, is_training=training)
                    call = (reference.bn_backward_training if training
                            else reference.bn_backward_inference)
                    ours = call(v["dy"], v["x"], v["scale"], v["mean"], v["variance"], EPS, True)
                    for theirs, mine in zip(got[:3], ours):
                        assert_agree(mine, theirs.numpy(), f"grad {name} = {value}")


# Huge per-channel inputs combined with huge tensors: the inference element outputs must follow
# the reference's float32 order, so that an intermediate overflows (or not) as it does there.
# (x - mean) * k + offset with |offset| ~ FLT_MAX: a fused multiply-add keeps the overflowing
# product and gives -4.86e36 where the reference gives -inf; (gscale * (x - mean)) * r and
# (gscale * dy) * r overflow where (gscale * r) * (x - mean) and dy * (gscale * r) do not.
FLT_MAX = float(np.finfo(F32).max)
HUGE_CASES = {
    "FusedBatchNormV3-inference": {
        "huge x": dict(x="huge", scale=[2.8, 1.0, 0.5], variance=[0.5, 1.65, 3.0]),
        "huge x, mean, offset": dict(x="huge", scale=[1.64, 2.8, 0.44],
                                     mean=[FLT_MAX, -FLT_MAX, 1e38],
                                     offset=[FLT_MAX, FLT_MAX, -FLT_MAX], variance=[1.65] * 3),
        "huge x, mean; infinite offset": dict(x="huge", mean=[FLT_MAX, -FLT_MAX, 3e38],
                                              offset=[np.inf, -np.inf, np.nan],
                                              scale=[2.8, 2.8, 2.8], variance=[0.5] * 3),
        "huge mean, offset": dict(mean=[3e38, -3e38, 2.0 ** 61],
                                  offset=[-3e38, 3e38, -2.0 ** 61], scale=[2.8, 1.5, 3.0],
                                  variance=[0.5, 0.1, 1e-3]),
        "huge scale": dict(x="huge", scale=[FLT_MAX, 1e30, -1e38],
                           offset=[FLT_MAX, -1e38, 1.0], variance=[3.0, 1e30, 1e-3]),
    },
    "FusedBatchNormGradGrad-inference": {
        # sum(gx * dy) stays small: the element outputs alone decide
        "huge x": dict(x="huge", scale=[2.8, 1.0, -1.0], gscale=[2.0, -3.0, 1.5],
                       variance=[3.0, 10.0, 1e-3]),
        "huge dy, zero gx": dict(dy="huge", gx="zero", gscale=[2.0, -3.0, 1.5],
                                 variance=[3.0, 10.0, 1e-3]),
        "huge x, mean, goffset": dict(x="huge", mean=[FLT_MAX, -3e38, 1e38],
                                      gscale=[2.0, 3.0, 1.5], goffset=[FLT_MAX, -3e38, 1.0],
                                      variance=[3.0, 1.0, 0.1]),
        "huge tensors": dict(x="huge", dy="huge", gx="huge", scale=[2.8, 1.0, -1.0],
                             gscale=[2.0, -3.0, 1.5], variance=[3.0, 10.0, 1e-3]),
        "huge tensors, mean, gscale": dict(x="huge", dy="huge", gx="huge",
                                           mean=[FLT_MAX, -3e38, 1e38],
                                           gscale=[2.0 ** 61, -FLT_MAX, 1e30],
                                           goffset=[FLT_MAX, 1.0, -FLT_MAX],
                                           variance=[3.0, 1e30, 0.1]),
        "huge per-channel inputs": dict(mean=[3e38, -3e38, 2.0 ** 61],
                                        gscale=[FLT_MAX, 1e30, -2.0 ** 61],
                                        goffset=[-FLT_MAX, 3e38, 2.0 ** 62],
                                        scale=[FLT_MAX, 1e30, 2.0], variance=[0.5, 3.0, 1e-3]),
        "huge tensors, infinite goffset": dict(x="huge", dy="huge", gx="huge",
                                               goffset=[np.inf, -np.inf, np.nan],
                                               gscale=[2.0, 2.0, -2.0], variance=[3.0] * 3),
    },
}


def huge_tensor(like: np.ndarray, dtype: np.dtype, seed: int) -> np.ndarray:
    """Half the elements within a factor 3 of the dtype's largest finite value (either sign),
    half ordinary."""
    rng = np.random.default_rng(seed)
    top = float(np.finfo(dtype).max) if dtype != BF16 else float(ml_dtypes.finfo(BF16).max)
    big = rng.uniform(0.3, 1.0, like.shape) * top * rng.choice([-1.0, 1.0], like.shape)
    return np.where(rng.random(like.shape) < 0.5, big, like).astype(F32)


@pytest.mark.parametrize("channels_last", [True, False], ids=["NHWC", "NCHW"])
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("op_key", list(HUGE_CASES))
def test_native_agrees_with_reference_on_huge_inference_inputs(isa, op_key, dtype,
                                                                channels_last):
    holders, fetches, sessions = build(op_key, dtype, channels_last)
    base = base_values(dtype, channels_last)
    for seed, (label, case) in enumerate(HUGE_CASES[op_key].items()):
        values = dict(base)
        for name, value in case.items():
            if value == "huge":
                values[name] = huge_tensor(base[name], dtype, seed)
            elif value == "zero":
                values[name] = np.zeros_like(base[name])
            else:
                values[name] = np.asarray(value, F32)
        feeds = feeds_for(holders, values, dtype)
        with np.errstate(all="ignore"):
            results = {b: s.Run(feeds, fetches) for b, s in sessions.items()}
        for i, (got, expected) in enumerate(zip(results["native"], results["reference"])):
            assert_agree(got, expected, f"{op_key} {isa} output {i}: {label}")


@pytest.mark.parametrize("channels_last", [True, False], ids=["NHWC", "NCHW"])
def test_grad_grad_inference_outputs_bit_identical_to_reference(isa, channels_last):
    """d_dy and d_x of the inference grad-grad follow the reference's float32 operations one
    by one (no fused multiply-adds): the same bits, huge tensors or not."""
    from minigraph.backends import reference
    base = base_values(np.dtype(F32), channels_last)
    for values in (base, dict(base, x=huge_tensor(base["x"], np.dtype(F32), 1),
                              dy=huge_tensor(base["dy"], np.dtype(F32), 2))):
        args = ([values[k] for k in ("dy", "x", "scale", "mean", "variance", "gx", "gscale",
                                     "goffset")] + [EPS, channels_last])
        with np.errstate(all="ignore"):
            got = native.bn_grad_grad_inference(*args)
            expected = reference.bn_grad_grad_inference(*args)
        for i in (0, 1):
            np.testing.assert_array_equal(got[i].view(np.uint32), expected[i].view(np.uint32))
