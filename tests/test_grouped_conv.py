"""Grouped Conv2D (input channels a multiple of the filter's in_channels) and its backprops.

Output channel ``g * cog + o`` (``cog = out_channels / groups``) convolves input channels
``g * ci .. (g + 1) * ci`` with filter column ``g * cog + o``: the float64 references below
run the dense loop references of ``test_nn_ops`` on each group's channels. Every CPU backend
(the native one takes the depthwise kernels for one in_channel per group, the GEMM kernels
with every group in one call otherwise), TensorFlow's kernels, finite differences (first and second
order) and TF's error words are checked.
"""

from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import pytest
from conftest import BACKENDS
from test_nn_ops import (
    assert_gradients_match,
    conv_backprop_filter_ref,
    conv_backprop_input_ref,
    conv_out_hw,
    conv_ref,
    from_fmt,
    hw_attr,
    ph,
    to_fmt,
)

import minigraph as mg
from minigraph import ops
from minigraph.framework.errors import InvalidArgumentError

F32, F64 = np.float32, np.float64


def _groups(x_channels: int, f_shape: tuple) -> tuple[int, int]:
    """(groups, out channels per group)."""
    groups = x_channels // f_shape[2]
    return groups, f_shape[3] // groups


def grouped_ref(x, f, strides, dilations, padding, explicit=((0, 0), (0, 0))):
    """NHWC x, HWIO f (in_channels = x's channels / groups) -> NHWC y, float64."""
    groups, cog = _groups(x.shape[3], f.shape)
    ci = f.shape[2]
    return np.concatenate([conv_ref(x[..., g * ci:(g + 1) * ci], f[..., g * cog:(g + 1) * cog],
                                    strides, dilations, padding, explicit)
                           for g in range(groups)], axis=3)


def grouped_backprop_input_ref(x_shape, f, dy, strides, dilations, padding,
                               explicit=((0, 0), (0, 0))):
    groups, cog = _groups(x_shape[3], f.shape)
    ci = f.shape[2]
    return np.concatenate([conv_backprop_input_ref(
        (*x_shape[:3], ci), f[..., g * cog:(g + 1) * cog], dy[..., g * cog:(g + 1) * cog],
        strides, dilations, padding, explicit) for g in range(groups)], axis=3)


def grouped_backprop_filter_ref(x, f_shape, dy, strides, dilations, padding,
                                explicit=((0, 0), (0, 0))):
    groups, cog = _groups(x.shape[3], f_shape)
    ci = f_shape[2]
    return np.concatenate([conv_backprop_filter_ref(
        x[..., g * ci:(g + 1) * ci], (*f_shape[:3], cog), dy[..., g * cog:(g + 1) * cog],
        strides, dilations, padding, explicit) for g in range(groups)], axis=3)


def _attrs(fmt, strides, dilations, padding, explicit=None):
    attrs = {"strides": hw_attr(fmt, *strides), "dilations": hw_attr(fmt, *dilations),
             "padding": padding, "data_format": fmt}
    if explicit:
        (t, b), (left, r) = explicit
        attrs["explicit_paddings"] = ([0, 0, t, b, left, r, 0, 0] if fmt == "NHWC"
                                      else [0, 0, 0, 0, t, b, left, r])
    return attrs


GROUPED_CASES = [
    # (x NHWC, filter HWIO, strides, dilations, padding, explicit)
    ((2, 7, 6, 6), (3, 3, 2, 9), (1, 1), (1, 1), "SAME", None),  # 3 groups of 2 -> 3
    ((2, 7, 6, 6), (3, 3, 3, 4), (2, 2), (1, 1), "SAME", None),  # 2 groups of 3 -> 2
    ((2, 7, 6, 4), (3, 3, 1, 4), (1, 1), (1, 1), "SAME", None),  # depthwise (ConvNeXt)
    ((2, 7, 6, 4), (2, 3, 1, 8), (1, 2), (1, 1), "VALID", None),  # depthwise, multiplier 2
    ((2, 8, 8, 4), (3, 3, 1, 4), (1, 1), (2, 2), "SAME", None),  # dilated
    ((2, 7, 6, 6), (2, 2, 2, 6), (1, 1), (1, 1), "EXPLICIT", ((1, 0), (2, 1))),
]
CASE_IDS = [f"g{c[0][3] // c[1][2]}-ci{c[1][2]}-{c[4]}-s{c[2]}-d{c[3]}" for c in GROUPED_CASES]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
@pytest.mark.parametrize("case", GROUPED_CASES, ids=CASE_IDS)
def test_grouped_conv_and_backprops_match_float64(backend, fmt, case):
    x_shape, f_shape, strides, dilations, padding, explicit = case
    pads = explicit or ((0, 0), (0, 0))
    rng = np.random.default_rng(sum(x_shape) + 5 * sum(f_shape))
    x = rng.standard_normal(x_shape).astype(F32)
    f = rng.standard_normal(f_shape).astype(F32)
    expected = grouped_ref(x, f, strides, dilations, padding, pads)
    dy = rng.standard_normal(expected.shape).astype(F32)
    attrs = _attrs(fmt, strides, dilations, padding, explicit)
    root = mg.Scope.NewRootScope()
    y = ops.Conv2D(root, to_fmt(x, fmt), f, **attrs)
    dx = ops.Conv2DBackpropInput(root, list(to_fmt(x, fmt).shape), f, to_fmt(dy, fmt), **attrs)
    df = ops.Conv2DBackpropFilter(root, to_fmt(x, fmt), list(f_shape), to_fmt(dy, fmt), **attrs)
    assert y.shape == to_fmt(expected, fmt).shape
    assert dx.shape == to_fmt(x, fmt).shape and df.shape == f_shape
    y_v, dx_v, df_v = mg.ClientSession(root, backend=backend).Run([y, dx, df])
    np.testing.assert_allclose(from_fmt(y_v, fmt), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        from_fmt(dx_v, fmt),
        grouped_backprop_input_ref(x_shape, f, dy, strides, dilations, padding, pads),
        rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        df_v, grouped_backprop_filter_ref(x, f_shape, dy, strides, dilations, padding, pads),
        rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_grouped_conv_then_bias_and_relu(backend):
    """The chain a Keras grouped Conv2D layer freezes to (the native backend fuses it; a
    grouped head runs its epilogue after the convolution)."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 6, 6, 8)).astype(F32)
    f = rng.standard_normal((3, 3, 2, 8)).astype(F32)
    b = rng.standard_normal(8).astype(F32)
    root = mg.Scope.NewRootScope()
    xp = ph(root, "x", x.shape)
    y = ops.Relu(root, ops.BiasAdd(root, ops.Conv2D(root, xp, f, strides=[1, 1, 1, 1],
                                                    padding="SAME"), b))
    got = mg.ClientSession(root, backend=backend).Run({xp: x}, [y])[0]
    expected = np.maximum(grouped_ref(x, f, (1, 1), (1, 1), "SAME") + b, 0)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float64, np.int32])
def test_grouped_conv_other_dtypes(dtype):
    """Half types computed in float32 and rounded once; float64 and int32 exact enough."""
    rng = np.random.default_rng(5)
    x = rng.integers(-3, 4, (1, 5, 5, 4)).astype(dtype)
    f = rng.integers(-2, 3, (3, 3, 2, 6)).astype(dtype)
    y = mg.ClientSession(root := mg.Scope.NewRootScope()).Run(
        [ops.Conv2D(root, x, f, strides=[1, 1, 1, 1], padding="SAME")])[0]
    assert y.dtype == np.dtype(dtype)
    # small integers: every sum is exact in each type
    np.testing.assert_array_equal(y.astype(F64),
                                  grouped_ref(x.astype(F64), f.astype(F64), (1, 1), (1, 1),
                                              "SAME"))


# ----------------------------------------------------------------------------- gradients


@pytest.mark.parametrize("fmt,padding,strides,dilations,f_shape", [
    ("NHWC", "SAME", (1, 1), (1, 1), (2, 2, 2, 4)),
    ("NCHW", "VALID", (2, 1), (1, 1), (2, 2, 1, 4)),
    ("NHWC", "SAME", (1, 1), (2, 1), (2, 2, 1, 8)),
])
def test_grouped_conv_gradients(fmt, padding, strides, dilations, f_shape):
    """d/dx and d/df of a grouped Conv2D, then of both backprops (second order), against
    float64 finite differences."""
    rng = np.random.default_rng(6)
    x_shape = (1, 5, 4, 4)
    out_hw = conv_out_hw(x_shape[1:3], f_shape[:2], strides, dilations, padding,
                         ((0, 0), (0, 0)))
    dy_shape = to_fmt(np.zeros((1, *out_hw, f_shape[3])), fmt).shape
    x = rng.standard_normal(to_fmt(np.zeros(x_shape), fmt).shape)
    f, dy = rng.standard_normal(f_shape), rng.standard_normal(dy_shape)
    attrs = _attrs(fmt, strides, dilations, padding)
    root = mg.Scope.NewRootScope()
    xp, fp, dyp = ph(root, "x", x.shape), ph(root, "f", f_shape), ph(root, "dy", dy_shape)
    assert_gradients_match([xp, fp], [x, f], ops.Conv2D(root, xp, fp, **attrs))
    dx = ops.Conv2DBackpropInput(root, list(x.shape), fp, dyp, **attrs)
    assert_gradients_match([fp, dyp], [f, dy], dx)
    df = ops.Conv2DBackpropFilter(root, xp, list(f_shape), dyp, **attrs)
    assert_gradients_match([xp, dyp], [x, dy], df)


# ----------------------------------------------------------------------------- errors


def raises(fragment):
    return pytest.raises(InvalidArgumentError, match=fragment)


def test_grouped_conv_errors_in_tensorflow_words():
    root = mg.Scope.NewRootScope()
    x = ph(root, "x", (2, 5, 5, 6))
    with raises(r"Conv2D 'Conv2D': Depth of input \(6\) is not a multiple of input depth of "
                r"filter \(4\): input 'input' has 6 channels \(shape \[2,5,5,6\], data_format "
                r"NHWC\) but input 'filter' has in_channels 4"):
        ops.Conv2D(root, x, ph(root, "f4", (3, 3, 4, 9)), strides=[1] * 4, padding="SAME")
    with raises(r"Conv2D 'Conv2D_1': Depth of output \(8\) is not a multiple of the number of "
                r"groups \(3\): input 'filter' has out_channels 8"):
        ops.Conv2D(root, x, ph(root, "f8", (3, 3, 2, 8)), strides=[1] * 4, padding="SAME")
    with raises(r"Conv2DBackpropInput 'Conv2DBackpropInput': Depth of input \(6\) is not a "
                r"multiple of input depth of filter \(4\): input 'input_sizes' has 6 channels"):
        ops.Conv2DBackpropInput(root, [2, 5, 5, 6], ph(root, "g4", (3, 3, 4, 9)),
                                ph(root, "dy", (2, 5, 5, 9)), strides=[1] * 4, padding="SAME")
    with raises(r"Conv2DBackpropFilter 'Conv2DBackpropFilter': Depth of output \(8\) is not a "
                r"multiple of the number of groups \(3\)"):
        ops.Conv2DBackpropFilter(root, x, [3, 3, 2, 8], ph(root, "dy8", (2, 5, 5, 8)),
                                 strides=[1] * 4, padding="SAME")


@pytest.mark.parametrize("backend", BACKENDS)
def test_grouped_conv_run_time_errors(backend):
    """Shapes known only at run time get the same words before any kernel runs."""
    root = mg.Scope.NewRootScope()
    x, f = ph(root, "x", None), ph(root, "f", None)
    y = ops.Conv2D(root, x, f, strides=[1] * 4, padding="SAME")
    session = mg.ClientSession(root, backend=backend)
    with raises(r"Depth of input \(6\) is not a multiple of input depth of filter \(4\)"):
        session.Run({x: np.ones((1, 4, 4, 6), F32), f: np.ones((3, 3, 4, 6), F32)}, [y])
    with raises(r"Depth of output \(5\) is not a multiple of the number of groups \(3\)"):
        session.Run({x: np.ones((1, 4, 4, 6), F32), f: np.ones((3, 3, 2, 5), F32)}, [y])
    # an input of 0 channels is a multiple of any in_channels, but makes 0 groups
    with raises(r"Conv2D 'Conv2D': Number of groups must not be 0: input 'input' has 0 "
                r"channels \(shape \[1,4,4,0\]"):
        session.Run({x: np.ones((1, 4, 4, 0), F32), f: np.ones((3, 3, 2, 8), F32)}, [y])
    with raises(r"Conv2DBackpropFilter 'Conv2DBackpropFilter': Number of groups must not be 0"):
        ops.Conv2DBackpropFilter(root, np.ones((1, 4, 4, 0), F32), [3, 3, 2, 8],
                                 np.ones((1, 4, 4, 8), F32), strides=[1] * 4, padding="SAME")


# ----------------------------------------------------------------------------- TensorFlow


@pytest.fixture(scope="module")
def tf():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return pytest.importorskip("tensorflow")


@pytest.mark.oracle
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", GROUPED_CASES, ids=CASE_IDS)
def test_grouped_conv_against_tensorflow(tf, backend, case):
    """tf.raw_ops.Conv2D and its backprops on grouped filters (TF's CPU kernels, NHWC)."""
    x_shape, f_shape, strides, dilations, padding, explicit = case
    rng = np.random.default_rng(7)
    x = rng.standard_normal(x_shape).astype(F32)
    f = rng.standard_normal(f_shape).astype(F32)
    attrs = _attrs("NHWC", strides, dilations, padding, explicit)
    expected = tf.raw_ops.Conv2D(input=x, filter=f, **attrs).numpy()
    dy = rng.standard_normal(expected.shape).astype(F32)
    root = mg.Scope.NewRootScope()
    fetches = [ops.Conv2D(root, x, f, **attrs),
               ops.Conv2DBackpropInput(root, list(x_shape), f, dy, **attrs),
               ops.Conv2DBackpropFilter(root, x, list(f_shape), dy, **attrs)]
    y, dx, df = mg.ClientSession(root, backend=backend).Run(fetches)
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)
    if dilations != (1, 1) or explicit:  # TF's CPU backprops refuse these (grouped: its
        return  # Eigen kernels say "Gradients for grouped convolutions are not supported")
    tf_dx = tf.raw_ops.Conv2DBackpropInput(input_sizes=x_shape, filter=f, out_backprop=dy,
                                           **attrs).numpy()
    tf_df = tf.raw_ops.Conv2DBackpropFilter(input=x, filter_sizes=f_shape, out_backprop=dy,
                                            **attrs).numpy()
    np.testing.assert_allclose(dx, tf_dx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(df, tf_df, rtol=1e-4, atol=1e-4)


@pytest.mark.oracle
def test_frozen_keras_dilated_convolutions(tf):
    """Keras' dilated Conv1D (causal, SAME) and Conv2D layers, and a dilated grouped Conv2D,
    frozen by TF 2.21: imported, run on every backend, they match TF."""
    from minigraph.testing import tf_graphs

    graph = tf_graphs.keras_dilated_convs()
    # TF writes dilations as SpaceToBatchND/BatchToSpaceND around a Conv2D
    root = mg.import_graph_def(graph.graph_def)
    for backend in BACKENDS:
        [y] = mg.ClientSession(root, backend=backend).Run(graph.feeds, graph.fetches)
        np.testing.assert_allclose(y, graph.expected[0], rtol=1e-5, atol=1e-5)
