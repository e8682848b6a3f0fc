"""Static shapes (docs/tf-semantics.md#static-shape-inference,
docs/tf-semantics.md#global-normalization-gradient) and every error graph construction can
already see (docs/tf-semantics.md#dtypes, docs/tf-semantics.md#errors and
docs/tf-semantics.md#where-minigraph-differs-from-tensorflow), raised as
InvalidArgumentError naming the op, the input or attr, and the expected versus the actual
value."""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest

import minigraph as mg
from minigraph import ops

InvalidArgumentError = mg.errors.InvalidArgumentError
U = None  # an unknown dimension, for readability: [U, U, U, 5]

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def ph(scope, shape, dtype=mg.float32):
    """A placeholder with a static shape (None: unknown rank)."""
    return ops.Placeholder(scope, dtype, shape=shape)


def shapes(result):
    return [o.shape for o in result]


def op_scope(root, name):
    return root.WithOpName(name) if name else root


def fbn_v3(root, x, scale=None, offset=None, mean=None, variance=None, *, version="V3",
           dtype=mg.float32, name=None, **attrs):
    """FusedBatchNorm{,V2,V3} with placeholders of the given static shapes (None: unknown)."""
    wrapper = {"V1": ops.FusedBatchNorm, "V2": ops.FusedBatchNormV2,
               "V3": ops.FusedBatchNormV3}[version]
    return wrapper(op_scope(root, name), ph(root, x, dtype), ph(root, scale), ph(root, offset),
                   ph(root, mean), ph(root, variance), **attrs)


def fbn_grad(root, dy, x, scale=None, rs1=None, rs2=None, rs3=None, *, version="V3",
             dtype=mg.float32, name=None, **attrs):
    inputs = [ph(root, dy, dtype), ph(root, x, dtype), ph(root, scale), ph(root, rs1),
              ph(root, rs2)]
    if version == "V3":
        return ops.FusedBatchNormGradV3(op_scope(root, name), *inputs, ph(root, rs3), **attrs)
    wrapper = ops.FusedBatchNormGradV2 if version == "V2" else ops.FusedBatchNormGrad
    return wrapper(op_scope(root, name), *inputs, **attrs)


# ----------------------------------------------------------------------------- FusedBatchNormV3


@pytest.mark.parametrize("x, vectors, attrs, y, vector", [
    # the examples in docs/ops/FusedBatchNormV3.md#shapes-and-static-shape-inference
    ([U, U, U, U], {"scale": [5]}, {}, [U, U, U, 5], [5]),
    ([U, U, U, U], {"mean": [5]}, {}, [U, U, U, U], [U]),  # mean is not read in training
    ([U, U, U, U], {"mean": [5]}, {"is_training": False}, [U, U, U, 5], [5]),
    (None, {"scale": [5]}, {"data_format": "NCDHW"}, [U, 5, U, U, U], [5]),
    ([2, U, U, U], {}, {}, [2, U, U, U], [U]),
    # more
    (None, {}, {}, [U, U, U, U], [U]),
    (None, {}, {"data_format": "NDHWC"}, [U, U, U, U, U], [U]),
    ([2, 3, 4, 5], {}, {}, [2, 3, 4, 5], [5]),
    ([2, 3, 4, 5], {}, {"data_format": "NCHW"}, [2, 3, 4, 5], [3]),
    ([2, U, 4, 5], {"offset": [U]}, {"data_format": "NCHW"}, [2, U, 4, 5], [U]),
    ([2, U, 4, 5], {"offset": [7]}, {"data_format": "NCHW"}, [2, 7, 4, 5], [7]),
    ([U, U, U, U, U], {"variance": [3]}, {"data_format": "NDHWC",
                                         "exponential_avg_factor": 0.5}, [U, U, U, U, 3], [3]),
    ([U, U, U, U], {"variance": [3], "mean": [U]}, {"exponential_avg_factor": 0.0},
     [U, U, U, 3], [3]),
    ([U, U, U, U], {"mean": [0], "variance": [9]}, {}, [U, U, U, U], [U]),  # empty: ignored
    ([0, 2, 2, 0], {}, {}, [0, 2, 2, 0], [0]),  # empty x, C = 0
])
def test_fused_batch_norm_v3_static_shapes(x, vectors, attrs, y, vector):
    root = mg.Scope.NewRootScope()
    bn = fbn_v3(root, x, **vectors, **attrs)
    assert shapes(bn) == [y, vector, vector, vector, vector, [0]]
    assert [o.dtype for o in bn] == [mg.float32] * 6


@pytest.mark.parametrize("version", ["V1", "V2"])
@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
def test_fused_batch_norm_v1_v2_static_shapes(version, data_format):
    root = mg.Scope.NewRootScope()
    bn = fbn_v3(root, None, scale=[6], version=version, data_format=data_format)
    y = [U, U, U, 6] if data_format == "NHWC" else [U, 6, U, U]
    assert shapes(bn) == [y, [6], [6], [6], [6]]
    assert [a.name for a in bn.operation.op_def.outputs] == [
        "y", "batch_mean", "batch_variance", "reserve_space_1", "reserve_space_2"]


def test_fused_batch_norm_v3_dtypes():
    root = mg.Scope.NewRootScope()
    for dtype in (mg.float16, mg.bfloat16, mg.float32):
        bn = fbn_v3(root, [2, 2, 2, 3], dtype=dtype)
        assert bn.y.dtype is dtype
        assert all(o.dtype is mg.float32 for o in list(bn)[1:])
        assert bn.operation.attrs["T"] is dtype and bn.operation.attrs["U"] is mg.float32


# ----------------------------------------------------------------------------- FusedBatchNormGradV3


@pytest.mark.parametrize("dy, x, vectors, attrs, dx, vector", [
    # minigraph merges x's known dims into x_backprop (decision table; TF would say [?,?,?,?])
    ([U, U, U, U], [2, 3, 4, U], {}, {}, [2, 3, 4, U], [U]),
    ([2, U, 4, U], [U, 3, U, U], {}, {"data_format": "NCHW"}, [2, 3, 4, U], [3]),
    (None, None, {"scale": [5]}, {}, [U, U, U, 5], [5]),
    (None, None, {"rs1": [5]}, {"data_format": "NCDHW"}, [U, 5, U, U, U], [5]),
    (None, [U, U, U, U, 4], {"rs2": [U]}, {"data_format": "NDHWC"}, [U, U, U, U, 4], [4]),
    ([2, 3, 4, 5], [2, 3, 4, 5], {"rs3": [7, 3]}, {}, [2, 3, 4, 5], [5]),  # rs3: any shape
    ([2, 3, 4, 5], None, {"rs3": []}, {"is_training": False}, [2, 3, 4, 5], [5]),
])
def test_fused_batch_norm_grad_v3_static_shapes(dy, x, vectors, attrs, dx, vector):
    root = mg.Scope.NewRootScope()
    grad = fbn_grad(root, dy, x, **vectors, **attrs)
    assert shapes(grad) == [dx, vector, vector, [0], [0]]


@pytest.mark.parametrize("version", ["V1", "V2"])
def test_fused_batch_norm_grad_v1_v2_static_shapes(version):
    root = mg.Scope.NewRootScope()
    grad = fbn_grad(root, [U, 4, U, U], None, scale=[4], version=version, data_format="NCHW")
    assert shapes(grad) == [[U, 4, U, U], [4], [4], [0], [0]]
    assert [a.name for a in grad.operation.op_def.outputs] == [
        "x_backprop", "scale_backprop", "offset_backprop", "reserve_space_3", "reserve_space_4"]


def test_fused_batch_norm_grad_v3_dtypes():
    root = mg.Scope.NewRootScope()
    for dtype in (mg.float16, mg.bfloat16, mg.float32):
        grad = fbn_grad(root, [2, 2, 2, 3], None, dtype=dtype)
        assert grad.x_backprop.dtype is dtype
        assert all(o.dtype is mg.float32 for o in list(grad)[1:])


# ----------------------------------------------------------------------------- global normalization


def global_norm(root, t, m=None, v=None, beta=None, gamma=None, dtype=mg.float32, name=None):
    return ops.BatchNormWithGlobalNormalization(
        op_scope(root, name), ph(root, t, dtype), ph(root, m, dtype), ph(root, v, dtype),
        ph(root, beta, dtype), ph(root, gamma, dtype), 1e-3, True)


def global_norm_grad(root, t, m=None, v=None, gamma=None, backprop=None, dtype=mg.float32):
    return ops.BatchNormWithGlobalNormalizationGrad(
        root, ph(root, t, dtype), ph(root, m, dtype), ph(root, v, dtype),
        ph(root, gamma, dtype), ph(root, backprop, dtype), 1e-3, True)


@pytest.mark.parametrize("t, vectors, y", [
    ([2, U, U, U], {}, [2, U, U, U]),
    (None, {"gamma": [5]}, [U, U, U, 5]),
    ([U, 3, 3, U], {"m": [U], "beta": [4]}, [U, 3, 3, 4]),
    ([1, 2, 3, 4], {}, [1, 2, 3, 4]),
])
def test_global_normalization_static_shapes(t, vectors, y):
    root = mg.Scope.NewRootScope()
    for dtype in (mg.float16, mg.float32, mg.float64):
        out = global_norm(root, t, dtype=dtype, **vectors)
        assert out.shape == y and out.dtype is dtype


@pytest.mark.parametrize("t, backprop, vectors, dx, vector", [
    ([2, U, U, U], [U, 3, U, 7], {}, [2, 3, U, 7], [7]),  # the doc example (ops page)
    (None, None, {"v": [5]}, [U, U, U, 5], [5]),
    (None, [1, 2, 2, U], {"m": [3]}, [1, 2, 2, 3], [3]),
    ([1, 2, 2, 3], None, {}, [1, 2, 2, 3], [3]),
])
def test_global_normalization_grad_static_shapes(t, backprop, vectors, dx, vector):
    root = mg.Scope.NewRootScope()
    for dtype in (mg.float16, mg.float32, mg.float64):
        grad = global_norm_grad(root, t, backprop=backprop, dtype=dtype, **vectors)
        assert shapes(grad) == [dx, vector, vector, vector, vector]
        assert all(o.dtype is dtype for o in grad)


# ----------------------------------------------------------------------------- construction errors


def raises(*parts):
    """Context manager: an InvalidArgumentError whose message contains every one of parts."""
    return _Raises(parts)


class _Raises:
    def __init__(self, parts):
        self.parts = parts

    def __enter__(self):
        self.context = pytest.raises(InvalidArgumentError)
        self.info = self.context.__enter__()
        return self.info

    def __exit__(self, *exc):
        suppressed = self.context.__exit__(*exc)
        message = str(self.info.value)
        for part in self.parts:
            assert part in message, f"{part!r} not in error message {message!r}"
        return suppressed


class TestFusedBatchNormErrors:
    @pytest.mark.parametrize("x, data_format, rank", [
        ([3, 4, 5], "NHWC", 4), ([2, 3, 2, 2, 5], "NHWC", 4), ([2, 3, 4, 5], "NDHWC", 5),
        ([2, 3, 4, 5, 6, 7], "NCDHW", 5), ([2, 3, 4, 5, 6], "NCHW", 4), ([5], "NCHW", 4)])
    def test_x_rank_must_match_data_format(self, x, data_format, rank):
        root = mg.Scope.NewRootScope()
        with raises("FusedBatchNormV3 'bn'", "input 'x'", f"must be rank {rank}",
                    f"data_format {data_format}", f"rank {len(x)}"):
            fbn_v3(root, x, data_format=data_format, name="bn")

    @pytest.mark.parametrize("name", ["scale", "offset", "mean", "variance"])
    def test_vectors_must_be_rank_1(self, name):
        root = mg.Scope.NewRootScope()
        # even when mean/variance are not read (training, eaf = 1): TF checks their rank too
        with raises("FusedBatchNormV3", f"input '{name}'", "must be rank 1", "(1, 5)", "rank 2"):
            fbn_v3(root, [2, 3, 4, 5], **{name: [1, 5]})
        with raises("FusedBatchNormV3", f"input '{name}'", "must be rank 1", "rank 0"):
            fbn_v3(root, [2, 3, 4, 5], **{name: []})

    @pytest.mark.parametrize("name, attrs", [
        ("scale", {}), ("offset", {}),
        ("scale", {"is_training": False}), ("offset", {"data_format": "NCHW"}),
        ("mean", {"is_training": False}), ("variance", {"is_training": False}),
        ("mean", {"exponential_avg_factor": 0.3}),
        ("variance", {"exponential_avg_factor": 0.0}),
    ])
    def test_channel_count_mismatch(self, name, attrs):
        root = mg.Scope.NewRootScope()
        fmt = attrs.get("data_format", "NHWC")
        x = [2, 3, 4, 5] if fmt == "NHWC" else [2, 5, 3, 4]
        with raises("FusedBatchNormV3 'FusedBatchNormV3'", f"input '{name}'", "per channel",
                    "expected 5, got 4", "(4,)"):
            fbn_v3(root, x, **{name: [4]}, **attrs)

    def test_channel_mismatch_between_vectors_of_unknown_x(self):
        root = mg.Scope.NewRootScope()
        with raises("input 'offset'", "expected 5, got 6"):
            fbn_v3(root, None, scale=[5], offset=[6])

    @pytest.mark.parametrize("mean", [[0], [7], [U]])
    def test_training_with_eaf_1_ignores_mean_and_variance_length(self, mean):
        root = mg.Scope.NewRootScope()
        bn = fbn_v3(root, [2, 3, 4, 5], mean=mean, variance=mean)
        assert bn.batch_mean.shape == [5]

    @pytest.mark.parametrize("data_format", ["foo", "nhwc", "", "NHWC "])
    def test_bad_data_format(self, data_format):
        root = mg.Scope.NewRootScope()
        with raises("FusedBatchNormV3", "attr 'data_format'", repr(data_format),
                    '"NHWC", "NCHW", "NDHWC", "NCDHW"'):
            fbn_v3(root, None, data_format=data_format)

    @pytest.mark.parametrize("version", ["V1", "V2"])
    @pytest.mark.parametrize("data_format", ["NDHWC", "NCDHW"])
    def test_v1_v2_have_no_5d_formats(self, version, data_format):
        root = mg.Scope.NewRootScope()
        with raises(f"FusedBatchNorm{version if version != 'V1' else ''} ",
                    "attr 'data_format'", data_format, '"NHWC", "NCHW"'):
            fbn_v3(root, None, version=version, data_format=data_format)

    @pytest.mark.parametrize("version", ["V1", "V2", "V3"])
    @pytest.mark.parametrize("dtype", [mg.float64, mg.int32, mg.int64, mg.bool])
    def test_x_dtype_rejected(self, version, dtype):
        root = mg.Scope.NewRootScope()
        allowed = "float32" if version == "V1" else "float16, bfloat16, float32"
        with raises("input 'x'", f"dtype {dtype.name}", f"allowed values for T: {allowed}"):
            fbn_v3(root, None, version=version, dtype=dtype)

    @pytest.mark.parametrize("version", ["V1"])
    @pytest.mark.parametrize("dtype", [mg.float16, mg.bfloat16])
    def test_v1_is_float32_only(self, version, dtype):
        root = mg.Scope.NewRootScope()
        with raises("FusedBatchNorm ", "input 'x'", f"dtype {dtype.name}"):
            ops.FusedBatchNorm(root, ph(root, None, dtype), ph(root, None), ph(root, None),
                               ph(root, None), ph(root, None))

    @pytest.mark.parametrize("dtype", [mg.float16, mg.bfloat16, mg.float64])
    def test_u_must_be_float32(self, dtype):
        root = mg.Scope.NewRootScope()
        x = ph(root, [2, 2, 2, 3], mg.float16)
        v = ph(root, [3], dtype)
        with raises("FusedBatchNormV3", "input 'scale'", f"dtype {dtype.name}",
                    "allowed values for U: float32"):
            ops.FusedBatchNormV3(root, x, v, v, v, v)

    def test_offset_dtype_must_match_scale(self):
        root = mg.Scope.NewRootScope()
        f32, f16 = ph(root, [3]), ph(root, [3], mg.float16)
        with raises("FusedBatchNormV3", "input 'offset'", "dtype float16",
                    "does not match dtype float32 of argument 'scale'"):
            ops.FusedBatchNormV3(root, ph(root, None), f32, f16, f32, f32)

    def test_explicit_type_attr_must_match(self):
        root = mg.Scope.NewRootScope()
        with raises("input 'x'", "dtype float32", "does not match dtype float16",
                    "explicit attr"):
            fbn_v3(root, None, T=mg.float16)

    @pytest.mark.parametrize("epsilon", [-1e-3, -0.5, float("nan"), float("inf"),
                                         float("-inf"), 1e300])
    @pytest.mark.parametrize("wrapper", ["FusedBatchNormV3", "FusedBatchNormV2",
                                         "FusedBatchNorm"])
    def test_negative_or_non_finite_epsilon_rejected(self, wrapper, epsilon):
        root = mg.Scope.NewRootScope()
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # no numpy overflow warning leaks
            with raises(f"{wrapper} ", "attr 'epsilon'", "finite number >= 0"):
                fbn_v3(root, None, version=wrapper.replace("FusedBatchNorm", "") or "V1",
                       epsilon=epsilon)

    def test_epsilon_zero_and_any_eaf_allowed(self):
        root = mg.Scope.NewRootScope()
        for eaf in (0.0, 0.3, 1.0, 2.0, -1.0):
            bn = fbn_v3(root, None, epsilon=0.0, exponential_avg_factor=eaf)
            assert bn.operation.attrs["epsilon"] == 0.0


class TestFusedBatchNormGradErrors:
    @pytest.mark.parametrize("which", ["y_backprop", "x"])
    @pytest.mark.parametrize("shape, data_format, rank", [
        ([3, 4, 5], "NHWC", 4), ([2, 3, 4, 5], "NCDHW", 5), ([1, 2, 3, 4, 5], "NCHW", 4)])
    def test_rank_must_match_data_format(self, which, shape, data_format, rank):
        root = mg.Scope.NewRootScope()
        dy, x = (shape, None) if which == "y_backprop" else (None, shape)
        with raises("FusedBatchNormGradV3 'g'", f"input '{which}'", f"must be rank {rank}",
                    f"rank {len(shape)}"):
            fbn_grad(root, dy, x, data_format=data_format, name="g")

    def test_channel_mismatch_between_x_and_y_backprop(self):
        root = mg.Scope.NewRootScope()
        with raises("FusedBatchNormGradV3", "input 'x'", "channels", "expected 6, got 5"):
            fbn_grad(root, [2, 3, 4, 6], [2, 3, 4, 5])

    def test_other_dim_mismatch_between_x_and_y_backprop(self):
        # TF only finds this at run time; minigraph merges the shapes at construction
        root = mg.Scope.NewRootScope()
        with raises("FusedBatchNormGradV3", "'x' and 'y_backprop' must have the same shape",
                    "(2, 3, 2, 5)", "(2, 3, 4, 5)"):
            fbn_grad(root, [2, 3, 4, 5], [2, 3, 2, 5])

    @pytest.mark.parametrize("name, key", [("scale", "scale"), ("reserve_space_1", "rs1"),
                                           ("reserve_space_2", "rs2")])
    def test_vector_sizes(self, name, key):
        root = mg.Scope.NewRootScope()
        for wrong in (4, 6, 0):
            with raises("FusedBatchNormGradV3", f"input '{name}'", f"expected 5, got {wrong}"):
                fbn_grad(root, [2, 3, 4, 5], None, **{key: [wrong]})
        with raises("FusedBatchNormGradV3", f"input '{name}'", "must be rank 1", "rank 2"):
            fbn_grad(root, [2, 3, 4, 5], None, **{key: [1, 5]})

    @pytest.mark.parametrize("version", ["V1", "V2", "V3"])
    @pytest.mark.parametrize("dtype", [mg.float64, mg.int32])
    def test_x_dtype_rejected(self, version, dtype):
        root = mg.Scope.NewRootScope()
        with raises("input 'y_backprop'", f"dtype {dtype.name}", "allowed values for T"):
            fbn_grad(root, None, None, version=version, dtype=dtype)

    def test_x_dtype_must_match_y_backprop(self):
        root = mg.Scope.NewRootScope()
        with raises("FusedBatchNormGradV3", "input 'x'", "dtype float32",
                    "does not match dtype float16 of argument 'y_backprop'"):
            ops.FusedBatchNormGradV3(root, ph(root, None, mg.float16), ph(root, None),
                                     ph(root, None), ph(root, None), ph(root, None),
                                     ph(root, None))

    @pytest.mark.parametrize("name", ["scale", "reserve_space_1", "reserve_space_2",
                                      "reserve_space_3"])
    @pytest.mark.parametrize("dtype", [mg.float16, mg.bfloat16, mg.float64])
    def test_float32_inputs(self, name, dtype):
        root = mg.Scope.NewRootScope()
        inputs = {n: ph(root, None) for n in ("scale", "reserve_space_1", "reserve_space_2",
                                              "reserve_space_3")}
        inputs[name] = ph(root, None, dtype)
        with raises("FusedBatchNormGradV3", f"input '{name}'", dtype.name, "float32"):
            ops.FusedBatchNormGradV3(root, ph(root, None, mg.float16), ph(root, None, mg.float16),
                                     **inputs)

    @pytest.mark.parametrize("epsilon", [-1e-5, float("nan"), float("inf")])
    @pytest.mark.parametrize("version", ["V1", "V2", "V3"])
    def test_negative_or_non_finite_epsilon_rejected(self, version, epsilon):
        root = mg.Scope.NewRootScope()
        with raises("FusedBatchNormGrad", "attr 'epsilon'", "finite number >= 0"):
            fbn_grad(root, None, None, version=version, epsilon=epsilon)

    def test_bad_data_format(self):
        root = mg.Scope.NewRootScope()
        with raises("FusedBatchNormGradV3", "attr 'data_format'", "'NCWH'"):
            fbn_grad(root, None, None, data_format="NCWH")
        with raises("FusedBatchNormGradV2", "attr 'data_format'", "'NDHWC'"):
            fbn_grad(root, None, None, version="V2", data_format="NDHWC")


class TestGlobalNormalizationErrors:
    def test_t_must_be_4d(self):
        root = mg.Scope.NewRootScope()
        with raises("BatchNormWithGlobalNormalization 'n'", "input 't'", "must be rank 4",
                    "rank 3"):
            global_norm(root, [3, 4, 5], name="n")
        with raises("BatchNormWithGlobalNormalizationGrad", "input 't'", "rank 5"):
            global_norm_grad(root, [1, 2, 3, 4, 5])
        with raises("BatchNormWithGlobalNormalizationGrad", "input 'backprop'", "rank 3"):
            global_norm_grad(root, None, backprop=[3, 4, 5])

    @pytest.mark.parametrize("name", ["m", "v", "beta", "gamma"])
    def test_vectors(self, name):
        root = mg.Scope.NewRootScope()
        with raises("BatchNormWithGlobalNormalization", f"input '{name}'",
                    "one element per channel of 't'", "expected 5, got 4"):
            global_norm(root, [2, 3, 4, 5], **{name: [4]})
        with raises("BatchNormWithGlobalNormalization", f"input '{name}'", "must be rank 1",
                    "rank 2"):
            global_norm(root, [2, 3, 4, 5], **{name: [1, 5]})
        if name != "beta":
            with raises("BatchNormWithGlobalNormalizationGrad", f"input '{name}'",
                        "expected 5, got 4"):
                global_norm_grad(root, [2, 3, 4, 5], **{name: [4]})

    def test_backprop_shape(self):
        root = mg.Scope.NewRootScope()
        with raises("BatchNormWithGlobalNormalizationGrad", "'t' and 'backprop'",
                    "(2, 3, 4, 5)", "(2, 2, 4, 5)"):
            global_norm_grad(root, [2, 3, 4, 5], backprop=[2, 2, 4, 5])

    @pytest.mark.parametrize("dtype", [mg.bfloat16, mg.int32])
    def test_dtypes(self, dtype):
        root = mg.Scope.NewRootScope()
        with raises("BatchNormWithGlobalNormalization", "input 't'", dtype.name,
                    "float16, float32, float64"):
            global_norm(root, None, dtype=dtype)
        with raises("BatchNormWithGlobalNormalizationGrad", "input 't'", dtype.name):
            global_norm_grad(root, None, dtype=dtype)

    def test_inputs_share_t(self):
        root = mg.Scope.NewRootScope()
        t = ph(root, None, mg.float64)
        v = ph(root, None, mg.float32)
        with raises("BatchNormWithGlobalNormalization", "input 'm'", "float32",
                    "does not match dtype float64 of argument 't'"):
            ops.BatchNormWithGlobalNormalization(root, t, v, v, v, v, 1e-3, True)

    @pytest.mark.parametrize("epsilon", [-1.0, float("nan"), float("inf")])
    def test_variance_epsilon(self, epsilon):
        root = mg.Scope.NewRootScope()
        t = ph(root, None)
        with raises("BatchNormWithGlobalNormalization ", "attr 'variance_epsilon'",
                    "finite number >= 0"):
            ops.BatchNormWithGlobalNormalization(root, t, t, t, t, t, epsilon, True)
        with raises("BatchNormWithGlobalNormalizationGrad", "attr 'variance_epsilon'"):
            ops.BatchNormWithGlobalNormalizationGrad(root, t, t, t, t, t, epsilon, False)

    def test_required_attrs(self):
        root = mg.Scope.NewRootScope()
        t = ph(root, None)
        with raises("BatchNormWithGlobalNormalization", "missing required attr",
                    "scale_after_normalization"):
            ops.BatchNormWithGlobalNormalization(root, t, t, t, t, t, 1e-3)
        with raises("attr 'scale_after_normalization' must be a bool"):
            ops.BatchNormWithGlobalNormalization(root, t, t, t, t, t, 1e-3, "yes")


def test_numpy_inputs_of_every_float_dtype_get_static_shapes():
    root = mg.Scope.NewRootScope()
    x = np.zeros((2, 3, 4, 5), ml_dtypes.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bn = ops.FusedBatchNormV3(root, x, np.ones(5, np.float32), np.zeros(5, np.float32),
                                  np.zeros(0, np.float32), np.zeros(0, np.float32))
    assert bn.y.shape == (2, 3, 4, 5) and bn.y.dtype is mg.bfloat16
