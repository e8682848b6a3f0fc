"""Framework API: scopes, operations and outputs, input conversion, attrs, dtypes, registry."""

from __future__ import annotations

import inspect
import pathlib
import pickle
import re
import warnings

import ml_dtypes
import numpy as np
import pytest

import minigraph as mg
from minigraph import ops
from minigraph.framework import op_def as op_def_module
from minigraph.ops import batch_norm

InvalidArgumentError = mg.errors.InvalidArgumentError

X_NHWC = np.zeros((2, 3, 3, 4), np.float32)
C4 = np.ones(4, np.float32)
EMPTY = np.zeros(0, np.float32)


def fbn(scope, x=X_NHWC, *args, **kwargs):
    """A FusedBatchNormV3 on 4 channels with default vectors."""
    return ops.FusedBatchNormV3(scope, x, C4, C4, EMPTY, EMPTY, *args, **kwargs)


# ----------------------------------------------------------------------------- scopes


class TestScope:
    def test_new_root_scope_has_empty_graph(self):
        root = mg.Scope.NewRootScope()
        assert isinstance(root.graph(), mg.Graph)
        assert len(root.graph()) == 0
        assert mg.Scope.NewRootScope().graph() is not root.graph()

    def test_unique_names_follow_tensorflow(self):
        root = mg.Scope.NewRootScope()
        names = [ops.Const(root, 1.0).op.name for _ in range(3)]
        assert names == ["Const", "Const_1", "Const_2"]

    def test_sub_scope_prefixes(self):
        root = mg.Scope.NewRootScope()
        b = root.NewSubScope("a").NewSubScope("b")
        assert b.name_prefix == "a/b/"
        c = ops.Const(b, 1.0)
        assert c.op.name == "a/b/Const"
        assert ops.Const(b, 2.0).op.name == "a/b/Const_1"
        assert ops.Const(root, 3.0).op.name == "Const"
        # the same sub-scope name twice gets a unique prefix
        assert root.NewSubScope("a").name_prefix == "a_1/"
        assert ops.Const(root.NewSubScope("a"), 1.0).op.name == "a_2/Const"
        # every derived scope builds into the same graph
        assert b.graph() is root.graph()

    def test_with_op_name(self):
        root = mg.Scope.NewRootScope()
        sub = root.NewSubScope("layer")
        assert ops.Const(root.WithOpName("w"), 1.0).op.name == "w"
        assert ops.Const(root.WithOpName("w"), 1.0).op.name == "w_1"
        assert ops.Const(sub.WithOpName("w"), 1.0).op.name == "layer/w"
        # the scope itself is unchanged (scopes are immutable)
        assert ops.Const(root, 1.0).op.name == "Const"

    def test_with_op_name_names_multi_output_op_and_its_input_constants(self):
        root = mg.Scope.NewRootScope()
        bn = fbn(root.NewSubScope("net").WithOpName("bn"))
        assert bn.operation.name == "net/bn"
        assert [i.op.name for i in bn.operation.inputs] == [
            "net/bn/x", "net/bn/scale", "net/bn/offset", "net/bn/mean", "net/bn/variance"]

    def test_with_device(self):
        root = mg.Scope.NewRootScope()
        on_cpu = root.WithDevice("/cpu:0")
        assert on_cpu.device == "/cpu:0"
        assert ops.Const(on_cpu, 1.0).op.device == "/cpu:0"
        assert ops.Const(root, 1.0).op.device == ""

    def test_with_control_dependencies(self):
        root = mg.Scope.NewRootScope()
        a = ops.Const(root, 1.0)
        b = ops.Const(root, 2.0)
        dependent = root.WithControlDependencies(a)  # an Output
        c = ops.Identity(dependent, b)
        assert c.op.control_inputs == (a.op,)
        both = dependent.WithControlDependencies([b.op])  # a list of Operations, accumulated
        d = ops.Identity(both, b)
        assert d.op.control_inputs == (a.op, b.op)
        assert ops.Identity(both.WithNoControlDependencies(), b).op.control_inputs == ()
        assert ops.Identity(root, b).op.control_inputs == ()

    def test_scopes_are_immutable(self):
        root = mg.Scope.NewRootScope()
        derived = root.WithOpName("n").WithDevice("/cpu:0").NewSubScope("s")
        assert root.device == "" and root.name_prefix == "" and root.control_dependencies == ()
        assert derived.device == "/cpu:0" and derived.name_prefix == "s/"
        with pytest.raises(AttributeError):
            root._prefix = "x/"


# ----------------------------------------------------------------------------- operations


class TestOperationAndOutput:
    def test_output_properties(self):
        root = mg.Scope.NewRootScope()
        x = ops.Placeholder(root.WithOpName("x"), mg.float16, shape=[None, 3, 3, 4])
        bn = fbn(root.WithOpName("bn"), x)
        y = bn.y
        assert y.name == "bn:0"
        assert bn.batch_mean.name == "bn:1"
        assert bn.reserve_space_3.name == "bn:5"
        assert y.op is bn.operation and y.operation is bn.operation
        assert y.index == 0
        assert y.dtype is mg.float16
        assert bn.batch_mean.dtype is mg.float32
        assert y.shape == (None, 3, 3, 4)
        assert isinstance(y.shape, mg.TensorShape)
        assert y.graph is root.graph()
        assert x.consumers() == [bn.operation]
        assert bn[0] is y and list(bn) == list(bn.operation.outputs) and len(bn) == 6
        assert "bn:0" in repr(y)

    def test_operation_properties(self):
        root = mg.Scope.NewRootScope()
        x = ops.Placeholder(root.WithOpName("x"), mg.float32)
        bn = fbn(root.WithOpName("bn"), x)
        op = bn.operation
        assert op.name == "bn" and op.type == "FusedBatchNormV3"
        assert op.num_inputs == 5 and op.num_outputs == 6
        assert op.inputs[0] is x
        assert op.input_named("x") is x
        assert op.input_named("variance") is op.inputs[4]
        assert op.output_named("reserve_space_2") is bn.reserve_space_2
        assert op.output(1) is bn.batch_mean
        assert op.graph is root.graph()
        assert root.graph().get_operation("bn") is op
        assert root.graph().operations()[-1] is op
        with pytest.raises(KeyError, match="nope"):
            root.graph().get_operation("nope")

    @pytest.mark.parametrize("op_type, expected", [
        ("FusedBatchNormV3", {"epsilon": 1e-4, "exponential_avg_factor": 1.0,
                              "data_format": "NHWC", "is_training": True}),
        ("FusedBatchNormGradV3", {"epsilon": 1e-4, "data_format": "NHWC",
                                  "is_training": True}),
    ])
    def test_attrs_have_every_default_filled_in(self, op_type, expected):
        root = mg.Scope.NewRootScope()
        if op_type == "FusedBatchNormV3":
            op = fbn(root).operation
        else:
            op = ops.FusedBatchNormGradV3(root, X_NHWC, X_NHWC, C4, C4, C4, EMPTY).operation
        wanted = {k: as_f32(v) if isinstance(v, float) else v for k, v in expected.items()}
        wanted.update(T=mg.float32, U=mg.float32)
        assert op.attrs == wanted

    def test_global_normalization_attrs(self):
        root = mg.Scope.NewRootScope()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            y = ops.BatchNormWithGlobalNormalization(
                root, np.zeros((1, 2, 2, 3)), np.zeros(3), np.ones(3), np.zeros(3), np.ones(3),
                1e-3, True)
        assert y.op.attrs == {"T": mg.float64, "variance_epsilon": as_f32(1e-3),
                              "scale_after_normalization": True}


def as_f32(value: float) -> float:
    return float(np.float32(value))


# ----------------------------------------------------------------------------- input conversion


class TestInputConversion:
    def test_output_is_used_as_is(self):
        root = mg.Scope.NewRootScope()
        scale = ops.Const(root.WithOpName("s"), C4)
        bn = ops.FusedBatchNormV3(root, X_NHWC, scale, C4, EMPTY, EMPTY)
        assert bn.operation.inputs[1] is scale

    def test_numpy_arrays_keep_their_dtype(self):
        root = mg.Scope.NewRootScope()
        for dtype, expected in [(np.float16, mg.float16), (ml_dtypes.bfloat16, mg.bfloat16),
                                (np.float32, mg.float32)]:
            bn = fbn(root, X_NHWC.astype(dtype))
            x = bn.operation.inputs[0]
            assert x.op.type == "Const" and x.dtype is expected
            assert bn.y.dtype is expected and bn.operation.attrs["T"] is expected
            np.testing.assert_array_equal(x.op.attrs["value"], X_NHWC.astype(dtype))

    def test_python_scalars_and_lists(self):
        root = mg.Scope.NewRootScope()
        bn = ops.FusedBatchNormV3(root, X_NHWC, [1.0, 2.0, 3.0, 4.0], 0.5 * C4, [], [])
        scale, offset, mean = bn.operation.inputs[1:4]
        assert scale.dtype is mg.float32 and offset.dtype is mg.float32
        assert mean.shape == (0,) and mean.dtype is mg.float32
        np.testing.assert_array_equal(scale.op.attrs["value"], [1, 2, 3, 4])
        # an int list stays int32 when nothing binds its type attr (TF C++'s Input rule)
        with pytest.raises(InvalidArgumentError, match="input 'scale' has dtype int32, not in "
                                                       "the allowed values for U: float32"):
            ops.FusedBatchNormV3(root, X_NHWC, [1, 2, 3, 4], [0, 0, 0, 0], [], [])
        # ... but takes the dtype bound by another input
        bn = ops.FusedBatchNormV3(root, X_NHWC, [1, 2, 3, 4], C4, [], [])
        assert bn.operation.inputs[1].dtype is mg.float32

    def test_lists_take_the_dtype_of_their_type_attr(self):
        root = mg.Scope.NewRootScope()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            for dtype in (mg.float16, mg.float64):
                t = ops.Placeholder(root, dtype, shape=[1, 1, 1, 2])
                y = ops.BatchNormWithGlobalNormalization(root, t, [0.5, 1], [1, 1], [0, 0],
                                                         [1, 1], 1e-3, True)
                assert [i.dtype for i in y.op.inputs] == [dtype] * 5

    def test_python_scalar_defaults(self):
        root = mg.Scope.NewRootScope()
        assert ops.Const(root, 1.5).dtype is mg.float32
        assert ops.Const(root, 3).dtype is mg.int32
        assert ops.Const(root, [True, False]).dtype is mg.bool
        assert ops.Const(root, np.int64(3)).dtype is mg.int64
        assert ops.Const(root, 1.5, mg.float64).dtype is mg.float64
        assert ops.Const(root, [[1, 2]], mg.bfloat16).shape == (1, 2)
        assert ops.Identity(root, 2.5).dtype is mg.float32

    def test_const_value_is_read_only(self):
        root = mg.Scope.NewRootScope()
        source = np.ones(3, np.float32)
        c = ops.Const(root, source)
        source[0] = 7  # a copy was taken
        assert c.op.attrs["value"][0] == 1
        with pytest.raises(ValueError):
            c.op.attrs["value"][0] = 5

    def test_operation_as_input_is_rejected(self):
        root = mg.Scope.NewRootScope()
        c = ops.Const(root.WithOpName("c"), C4)
        with pytest.raises(InvalidArgumentError, match=r"input 'scale'.*Operation \('c'\)"):
            ops.FusedBatchNormV3(root, X_NHWC, c.op, C4, EMPTY, EMPTY)

    def test_unconvertible_input_is_rejected(self):
        root = mg.Scope.NewRootScope()
        with pytest.raises(InvalidArgumentError, match="input 'scale'"):
            ops.FusedBatchNormV3(root, X_NHWC, ["a", "b"], C4, EMPTY, EMPTY)
        with pytest.raises(InvalidArgumentError, match="unsupported dtype"):
            ops.Const(root, ["a", "b"])

    def test_argument_errors(self):
        root = mg.Scope.NewRootScope()
        with pytest.raises(InvalidArgumentError, match="missing input 'variance'"):
            ops.FusedBatchNormV3(root, X_NHWC, C4, C4, EMPTY)
        with pytest.raises(InvalidArgumentError, match="too many arguments"):
            ops.FusedBatchNormV3(root, X_NHWC, C4, C4, EMPTY, EMPTY, 1e-3)
        with pytest.raises(InvalidArgumentError, match="input 'x' given twice"):
            ops.FusedBatchNormV3(root, X_NHWC, C4, C4, EMPTY, EMPTY, x=X_NHWC)
        with pytest.raises(InvalidArgumentError, match=r"unknown attr.*'epsilom'"):
            fbn(root, epsilom=1e-3)
        with pytest.raises(InvalidArgumentError, match="first argument must be a Scope"):
            ops.FusedBatchNormV3(X_NHWC, C4, C4, EMPTY, EMPTY)
        with pytest.raises(InvalidArgumentError, match="missing required attr.*dtype|dtype"):
            ops.Placeholder(root)

    def test_inputs_by_keyword(self):
        root = mg.Scope.NewRootScope()
        bn = ops.FusedBatchNormV3(root, X_NHWC, C4, offset=C4, mean=EMPTY, variance=EMPTY)
        assert bn.operation.input_named("offset").shape == (4,)


# ----------------------------------------------------------------------------- attrs


class TestAttrs:
    def test_builder_setters_use_cpp_names_and_chain(self):
        attrs = (ops.FusedBatchNormV3.Attrs().Epsilon(1e-3).DataFormat("NCHW")
                 .IsTraining(False).ExponentialAvgFactor(0.5))
        root = mg.Scope.NewRootScope()
        x = np.zeros((2, 4, 3, 3), np.float32)
        op = ops.FusedBatchNormV3(root, x, C4, C4, C4, C4, attrs).operation
        assert op.attrs["epsilon"] == as_f32(1e-3)
        assert op.attrs["data_format"] == "NCHW"
        assert op.attrs["is_training"] is False
        assert op.attrs["exponential_avg_factor"] == 0.5

    def test_builder_is_immutable(self):
        base = ops.FusedBatchNormV3.Attrs()
        derived = base.Epsilon(0.5)
        assert base.values == {} and derived.values == {"epsilon": 0.5}

    def test_grad_builder(self):
        attrs = ops.FusedBatchNormGradV3.Attrs().Epsilon(0.01).DataFormat("NDHWC").IsTraining(
            False)
        assert not hasattr(attrs, "ExponentialAvgFactor")
        x = np.zeros((1, 2, 2, 2, 4), np.float32)
        root = mg.Scope.NewRootScope()
        op = ops.FusedBatchNormGradV3(root, x, x, C4, C4, C4, EMPTY, attrs).operation
        assert (op.attrs["epsilon"], op.attrs["data_format"], op.attrs["is_training"]) == (
            as_f32(0.01), "NDHWC", False)

    def test_global_normalization_builder(self):
        attrs = ops.BatchNormWithGlobalNormalization.Attrs().VarianceEpsilon(
            0.25).ScaleAfterNormalization(False)
        grad_attrs = ops.BatchNormWithGlobalNormalizationGrad.Attrs().VarianceEpsilon(
            0.5).ScaleAfterNormalization(True)
        root = mg.Scope.NewRootScope()
        t = np.zeros((1, 2, 2, 3), np.float32)
        v = np.ones(3, np.float32)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            y = ops.BatchNormWithGlobalNormalization(root, t, v, v, v, v, attrs)
            g = ops.BatchNormWithGlobalNormalizationGrad(root, t, v, v, v, t, grad_attrs)
            k = ops.BatchNormWithGlobalNormalization(
                root, t, v, v, v, v, variance_epsilon=0.125, scale_after_normalization=True)
            with pytest.raises(InvalidArgumentError, match="variance_epsilon"):
                ops.BatchNormWithGlobalNormalization(root, t, v, v, v, v)
        assert y.op.attrs["variance_epsilon"] == 0.25
        assert y.op.attrs["scale_after_normalization"] is False
        assert g.operation.attrs["variance_epsilon"] == 0.5
        assert g.operation.attrs["scale_after_normalization"] is True
        assert k.op.attrs["variance_epsilon"] == 0.125

    def test_keywords_and_builder_combine(self):
        root = mg.Scope.NewRootScope()
        x = np.zeros((2, 4, 3, 3), np.float32)
        op = ops.FusedBatchNormV3(root, x, C4, C4, EMPTY, EMPTY,
                                  ops.FusedBatchNormV3.Attrs().Epsilon(0.5),
                                  data_format="NCHW").operation
        assert op.attrs["epsilon"] == 0.5 and op.attrs["data_format"] == "NCHW"

    def test_float_attrs_are_stored_as_float32(self):
        root = mg.Scope.NewRootScope()
        op = ops.FusedBatchNormV3(root, X_NHWC, C4, C4, C4, C4, epsilon=0.1,
                                  exponential_avg_factor=0.3).operation
        assert op.attrs["epsilon"] == as_f32(0.1) != 0.1
        assert op.attrs["exponential_avg_factor"] == as_f32(0.3)
        # an explicit 1e-4 and the default 1e-4 are the same attr value
        assert fbn(root, epsilon=1e-4).operation.attrs == fbn(root).operation.attrs
        assert isinstance(op.attrs["epsilon"], float)
        assert fbn(root, epsilon=0).operation.attrs["epsilon"] == 0.0  # 0 stays allowed

    @pytest.mark.parametrize("attr, value, message", [
        ("epsilon", "small", "attr 'epsilon' must be a float, got 'small'"),
        ("epsilon", True, "attr 'epsilon' must be a float"),
        ("is_training", 1, "attr 'is_training' must be a bool, got 1"),
        ("data_format", 4, "attr 'data_format' must be a string, got 4"),
        ("exponential_avg_factor", None, "attr 'exponential_avg_factor' must be a float"),
    ])
    def test_attr_kind_errors(self, attr, value, message):
        root = mg.Scope.NewRootScope()
        with pytest.raises(InvalidArgumentError, match="FusedBatchNormV3") as info:
            fbn(root, **{attr: value})
        assert message in str(info.value)

    @pytest.mark.parametrize("shape", [[-2, 3], [1.5], "abc", 3])
    def test_bad_shape_attr(self, shape):
        root = mg.Scope.NewRootScope()
        with pytest.raises(InvalidArgumentError, match=r"Placeholder 'x': attr 'shape' must be "
                                                       r"a shape, got "):
            ops.Placeholder(root.WithOpName("x"), mg.float32, shape=shape)

    def test_minus_one_is_an_unknown_dim(self):
        """TF's C++ PartialTensorShape spells an unknown dimension -1."""
        root = mg.Scope.NewRootScope()
        x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[-1, 3])
        assert x.shape.dims == (None, 3)

    def test_bad_type_attr(self):
        root = mg.Scope.NewRootScope()
        with pytest.raises(InvalidArgumentError, match=r"Placeholder 'x': attr 'dtype' must be "
                                                       r"a type, got 'float33': unsupported"):
            ops.Placeholder(root.WithOpName("x"), "float33")
        with pytest.raises(InvalidArgumentError, match=r"attr 'T' is mg.float64, which is not "
                                                       r"in the allowed values"):
            fbn(root, T=mg.float64)

    def test_attrs_of_another_op_are_rejected(self):
        root = mg.Scope.NewRootScope()
        with pytest.raises(InvalidArgumentError, match="FusedBatchNormGradV3.Attrs"):
            fbn(root, ops.FusedBatchNormGradV3.Attrs().Epsilon(0.1))


# ----------------------------------------------------------------------------- dtypes


class TestDTypes:
    def test_names_and_storage(self):
        assert mg.float16 is mg.half and mg.float16 == mg.half
        assert mg.bfloat16.np_dtype == np.dtype(ml_dtypes.bfloat16)
        for dtype, np_dtype in [(mg.float16, np.float16), (mg.float32, np.float32),
                                (mg.float64, np.float64), (mg.int32, np.int32),
                                (mg.int64, np.int64), (mg.bool, np.bool_)]:
            assert dtype.np_dtype == np.dtype(np_dtype)
            assert mg.as_dtype(np_dtype) is dtype
            assert mg.as_dtype(np.dtype(np_dtype)) is dtype
            assert mg.as_dtype(dtype.name) is dtype
            assert mg.as_dtype(dtype) is dtype
            assert dtype.itemsize == np.dtype(np_dtype).itemsize
            assert str(dtype) == dtype.name
        assert mg.as_dtype(ml_dtypes.bfloat16) is mg.bfloat16
        assert mg.as_dtype("half") is mg.float16
        assert mg.as_dtype("float") is mg.float32
        assert mg.as_dtype("double") is mg.float64
        assert mg.bool.name == "bool"

    def test_is_floating(self):
        assert all(d.is_floating for d in (mg.float16, mg.bfloat16, mg.float32, mg.float64))
        assert not any(d.is_floating for d in (mg.int32, mg.int64, mg.bool))

    def test_pickle_round_trip_keeps_identity(self):
        for dtype in (mg.float16, mg.bfloat16, mg.float32, mg.float64, mg.int32, mg.bool):
            assert pickle.loads(pickle.dumps(dtype)) is dtype

    @pytest.mark.parametrize("value", ["float8", np.complex64, object, np.uint8])
    def test_unsupported(self, value):
        with pytest.raises(InvalidArgumentError, match="unsupported dtype"):
            mg.as_dtype(value)


# ----------------------------------------------------------------------------- registry, deprecated


class TestRegistryAndDeprecation:
    def test_registered_ops(self):
        registered = set(op_def_module.registered_ops())
        assert {"FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3", "FusedBatchNormGrad",
                "FusedBatchNormGradV2", "FusedBatchNormGradV3",
                "BatchNormWithGlobalNormalization", "BatchNormWithGlobalNormalizationGrad",
                "Placeholder", "Const", "Identity"} <= registered
        with pytest.raises(mg.errors.NotFoundError, match="'NoSuchOp'"):
            op_def_module.get_op_def("NoSuchOp")

    def test_wrappers_expose_their_op_def(self):
        assert ops.FusedBatchNormV3.op_def is op_def_module.get_op_def("FusedBatchNormV3")
        assert str(inspect.signature(ops.FusedBatchNormV3)).startswith(
            "(scope, x, scale, offset, mean, variance, attrs=None, *, epsilon=0.0001")
        assert "Builds one 'FusedBatchNormV3' node." in ops.FusedBatchNormV3.__doc__

    @pytest.mark.parametrize("wrapper, args", [
        ("BatchNormWithGlobalNormalization", 5), ("BatchNormWithGlobalNormalizationGrad", 5)])
    def test_deprecated_ops_warn_once_per_call_site(self, wrapper, args):
        """Each user line that builds one warns once (an op built first by autodiff inside
        minigraph does not use up the user's warning)."""
        root = mg.Scope.NewRootScope()
        inputs = [np.zeros((1, 1, 1, 2), np.float32)] + [np.ones(2, np.float32)] * 3
        inputs.append(np.zeros((1, 1, 1, 2), np.float32) if "Grad" in wrapper
                      else np.ones(2, np.float32))
        build = getattr(ops, wrapper)
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("default")  # Python's rule: once per location
            for _ in range(3):
                build(root, *inputs, 1e-3, True)  # one call site
            build(root, *inputs, 1e-3, True)  # another
        deprecations = [w for w in record if issubclass(w.category, DeprecationWarning)]
        expected = f"Op {wrapper} is deprecated. It will cease to work in GraphDef version 9"
        assert [str(w.message).startswith(expected) for w in deprecations] == [True, True]
        assert {w.filename for w in deprecations} == {__file__}  # points at the caller
        assert deprecations[0].lineno != deprecations[1].lineno

    def test_current_ops_do_not_warn(self):
        root = mg.Scope.NewRootScope()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            fbn(root)
            ops.FusedBatchNormGradV3(root, X_NHWC, X_NHWC, C4, C4, C4, EMPTY)

    def test_helpers(self):
        assert [batch_norm.channel_axis(f) for f in ("NHWC", "NCHW", "NDHWC", "NCDHW")] == [
            3, 1, 4, 1]
        assert [batch_norm.format_rank(f) for f in ("NHWC", "NCHW", "NDHWC", "NCDHW")] == [
            4, 4, 5, 5]


# ----------------------------------------------------------------------------- the op docs


DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs" / "ops"
DOC_PAGES = ["FusedBatchNormV3.md", "FusedBatchNormGradV3.md",
             "BatchNormWithGlobalNormalization.md", "BatchNormWithGlobalNormalizationGrad.md"]


@pytest.mark.parametrize("page", DOC_PAGES)
def test_op_doc_examples_run(page, capsys):
    """Every ```python block of the op pages runs (and its asserts hold)."""
    text = (DOCS / page).read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, f"{page} has no python example"
    for block in blocks:
        exec(compile(block, str(DOCS / page), "exec"), {"__name__": "__doc_example__"})
    assert capsys.readouterr().out  # the examples print what they show


def test_op_docs_index_links_every_page():
    index = (DOCS / "README.md").read_text()
    for page in DOC_PAGES:
        assert f"]({page})" in index


# ----------------------------------------------------------------------------- wrapper docs, stub


def _wrappers():
    """(name, wrapper) for every generated wrapper ``minigraph.ops`` exports."""
    return [(name, getattr(ops, name)) for name in ops.__all__
            if hasattr(getattr(ops, name), "op_def")]


@pytest.mark.parametrize("name, wrapper", _wrappers(), ids=lambda v: v if isinstance(v, str)
                         else "")
def test_wrapper_signature_lists_inputs_and_attrs(name, wrapper):
    """scope, the inputs in order, the required attrs, attrs=None, then the optional attrs
    keyword-only with their defaults; inferred type attrs (and a list's length or types)
    are not parameters."""
    op_def = wrapper.op_def
    inferred = {attr for arg in op_def.inputs
                for attr in (arg.type_attr, arg.number_attr, arg.type_list_attr) if attr}
    required = [a.name for a in op_def.attrs if not a.has_default and a.name not in inferred]
    optional = [a for a in op_def.attrs if a.has_default and a.name not in inferred]
    params = inspect.signature(wrapper).parameters
    names = list(params)
    assert names == (["scope"] + [a.name for a in op_def.inputs] + required + ["attrs"]
                     + [a.name for a in optional])
    positional = inspect.Parameter.POSITIONAL_OR_KEYWORD
    for param_name in names[:names.index("attrs") + 1]:
        assert params[param_name].kind is positional
    assert params["attrs"].default is None
    for attr in optional:
        assert params[attr.name].kind is inspect.Parameter.KEYWORD_ONLY
        assert params[attr.name].default == attr.default
    assert all(params[n].default is inspect.Parameter.empty
               for n in names[:names.index("attrs")])


@pytest.mark.parametrize("name, wrapper", _wrappers(), ids=lambda v: v if isinstance(v, str)
                         else "")
def test_wrapper_help_names_every_input_attr_and_output(name, wrapper):
    import pydoc
    text = pydoc.render_doc(wrapper, renderer=pydoc.plaintext)
    op_def = wrapper.op_def
    assert f"Builds one '{op_def.name}' node." in text
    for section, args in (("Inputs:", op_def.inputs), ("Attrs:", op_def.attrs),
                          ("Outputs:", op_def.outputs)):
        if args:
            assert section in text
        for arg in args:
            assert re.search(rf"\b{re.escape(arg.name)}: ", text), (section, arg.name)
    assert "Returns:" in text


def test_wrapper_docs_carry_kinds_defaults_allowed_values_and_docs():
    doc = ops.FusedBatchNormV3.__doc__
    assert ('data_format: string, default "NHWC", one of "NHWC", "NCHW", "NDHWC", "NCDHW".'
            in doc)
    assert "x: T (float16, bfloat16, float32). The tensor to normalize" in doc
    assert "T: type, inferred from input 'x', one of float16, bfloat16, float32." in doc
    assert "reserve_space_3: U (float32)." in doc
    assert ".y, .batch_mean" in doc and ".operation" in doc
    assert "The Output 'output'." in ops.Conv2D.__doc__
    assert "strides: list(int), required." in ops.Conv2D.__doc__
    assert ops.Conv2D.Attrs.DataFormat.__doc__ == (
        'Set attr \'data_format\' (string, default "NHWC", one of "NHWC", "NCHW").')
    assert ops.FusedBatchNormV3.Attrs.IsTraining.__doc__.startswith(
        "Set attr 'is_training' (bool, default True). True: normalize with the batch")
    assert "Deprecated: It will cease to work in GraphDef version 9" in (
        ops.BatchNormWithGlobalNormalization.__doc__)


def test_every_batch_norm_arg_and_attr_has_a_doc():
    for name in batch_norm.__all__:
        op_def = getattr(ops, name).op_def
        inferred = {arg.type_attr for arg in op_def.inputs if arg.type_attr}
        for item in [*op_def.inputs, *op_def.outputs,
                     *(a for a in op_def.attrs if a.name not in inferred)]:
            assert item.doc, (name, item.name)


def test_wrapper_accepts_attrs_as_keyword_or_none():
    """What the signature advertises for ``attrs`` holds: a keyword, or None positionally."""
    root = mg.Scope.NewRootScope()
    x = np.zeros((2, 4, 3, 3), np.float32)
    by_keyword = ops.FusedBatchNormV3(root, x, C4, C4, EMPTY, EMPTY,
                                      attrs=ops.FusedBatchNormV3.Attrs().DataFormat("NCHW"))
    assert by_keyword.operation.attrs["data_format"] == "NCHW"
    positional_none = ops.FusedBatchNormV3(root, X_NHWC, C4, C4, EMPTY, EMPTY, None)
    assert positional_none.operation.attrs == fbn(root).operation.attrs
    assert fbn(root, attrs=None).operation.attrs == fbn(root).operation.attrs
    with pytest.raises(InvalidArgumentError, match="attrs given twice"):
        ops.FusedBatchNormV3(root, X_NHWC, C4, C4, EMPTY, EMPTY, ops.FusedBatchNormV3.Attrs(),
                             attrs=ops.FusedBatchNormV3.Attrs())
    with pytest.raises(InvalidArgumentError, match="pass FusedBatchNormV3.Attrs"):
        fbn(root, attrs=ops.FusedBatchNormGradV3.Attrs())
    bound = inspect.signature(ops.FusedBatchNormV3).bind(root, X_NHWC, C4, C4, EMPTY, EMPTY,
                                                         epsilon=0.5)
    assert ops.FusedBatchNormV3(*bound.args, **bound.kwargs).operation.attrs["epsilon"] == 0.5


def test_batch_norm_factories_take_keyword_arguments():
    with pytest.raises(TypeError):
        batch_norm._fused_forward("FusedBatchNormV9", batch_norm.HALF_TYPES, "U",
                                  batch_norm.FORMATS_2D, False)
    with pytest.raises(TypeError):
        batch_norm._fused_grad("FusedBatchNormGradV9", batch_norm.HALF_TYPES, "U",
                               batch_norm.FORMATS_2D, False)


def test_ops_stub_is_current_and_valid_python():
    """minigraph/ops/__init__.pyi is what stubgen writes now (regenerate it with
    ``python -m minigraph.framework.stubgen --write``), and parses."""
    import ast

    from minigraph.framework import stubgen
    text = stubgen.stub_text(ops)
    path = stubgen.stub_path(ops)
    assert path == pathlib.Path(ops.__file__).with_name("__init__.pyi")
    tree = ast.parse(path.read_text())
    assert path.read_text() == text, "stale stub: run python -m minigraph.framework.stubgen --write"
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    assert set(ops.__all__) == (set(classes) | functions) - {n for n in classes
                                                             if n.startswith("_")}
    assert {"Const", "AddN"} <= functions
    conv = next(node for node in classes["Conv2D"].body
                if isinstance(node, ast.FunctionDef) and node.name == "__new__")
    assert [a.arg for a in conv.args.args] == ["cls", "scope", "input", "filter", "strides",
                                               "padding", "attrs"]
    assert [a.arg for a in conv.args.kwonlyargs] == ["use_cudnn_on_gpu", "explicit_paddings",
                                                     "data_format", "dilations"]
    assert ast.unparse(conv.returns) == "Output"
    assert "def __new__(" in text and "-> _FusedBatchNormV3Outputs: ..." in text
    assert 'data_format: Literal["NHWC", "NCHW", "NDHWC", "NCDHW"] = "NHWC",' in text
    assert "def Epsilon(self, value: float) -> FusedBatchNormV3.Attrs:" in text
    assert stubgen.main(["--check"]) == 0
