"""The native 3-D convolutions on the GEMM micro-kernels (kernels_c/conv3d_gemm.c,
backends/conv3d_kernels.py): Conv3D, Conv3DBackpropInputV2 and Conv3DBackpropFilterV2,
float32, any strides, dilations, SAME/VALID, NDHWC and NCDHW.

References: the float64 loops of test_volumetric_ops (over every output voxel and tap,
written from TF's definitions, independent of minigraph's kernels), with the GEMM error
bound ``|got - exact| <= K * 2**-24 * sum |a*b|`` (K terms per element: taps * in channels
for the forward, taps * out channels for the input gradient, the output voxels for the
filter gradient; ``sum |a*b|`` from the same loops on absolute values); bit-identical
results for 1, 2 and 3 threads; TensorFlow 2.21 itself (``oracle``); a Conv3D training step
that picks no ``reference:`` kernel.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_conv_gemm_grad import assert_within
from test_training_native import float32_reference_nodes
from test_volumetric_ops import (
    attr5,
    conv_backprop_filter_ref,
    conv_backprop_input_ref,
    conv_ref,
    from_fmt,
    out_dhw,
    to_fmt,
)

import minigraph as mg
from minigraph import ops
from minigraph.backends import native

pytestmark = pytest.mark.skipif(not native.available(), reason="native kernels not built")
F32, F64 = np.float32, np.float64
KERNELS = {"conv": "native:volumetric_kernels.conv3d_native",
           "input": "native:volumetric_kernels.conv3d_backprop_input_native",
           "filter": "native:volumetric_kernels.conv3d_backprop_filter_native"}


@st.composite
def cases(draw, max_size=9, max_channels=20):
    """(x NDHWC, f DHWIO, dy NDHWC, strides, dilations, padding, fmt) with a non-empty
    output."""
    c, co = draw(st.integers(1, max_channels)), draw(st.integers(1, max_channels))
    k = tuple(draw(st.integers(1, 3)) for _ in range(3))
    strides = tuple(draw(st.integers(1, 3)) for _ in range(3))
    dilations = tuple(draw(st.integers(1, 2)) for _ in range(3))
    padding = draw(st.sampled_from(["SAME", "VALID"]))
    n = draw(st.integers(1, 3))
    # VALID windows must fit: at least the dilated filter
    sizes = tuple(draw(st.integers(1 if padding == "SAME" else (kd - 1) * d + 1,
                                   max(max_size, (kd - 1) * d + 1)))
                  for kd, d in zip(k, dilations))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = rng.standard_normal((n, *sizes, c)).astype(F32)
    f = rng.standard_normal((*k, c, co)).astype(F32)
    out = out_dhw(sizes, k, strides, dilations, padding)
    dy = rng.standard_normal((n, *out, co)).astype(F32)
    return x, f, dy, strides, dilations, padding, draw(st.sampled_from(["NDHWC", "NCDHW"]))


def attrs_of(fmt, strides, dilations, padding):
    return {"strides": attr5(fmt, strides), "dilations": attr5(fmt, dilations),
            "padding": padding, "data_format": fmt}


def graph_of(x, f, dy, strides, dilations, padding, fmt):
    """(root, [Conv3D, its input gradient, its filter gradient]) on constants in ``fmt``."""
    root = mg.Scope.NewRootScope()
    attrs = attrs_of(fmt, strides, dilations, padding)
    xf, dyf = to_fmt(x, fmt), to_fmt(dy, fmt)
    return root, [ops.Conv3D(root.WithOpName("conv"), xf, f, **attrs),
                  ops.Conv3DBackpropInputV2(root.WithOpName("input"), list(xf.shape), f, dyf,
                                            **attrs),
                  ops.Conv3DBackpropFilterV2(root.WithOpName("filter"), xf, list(f.shape),
                                             dyf, **attrs)]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_native_ops_within_the_gemm_bound(case):
    """The three ops in a graph on the native backend run the native kernels and agree with
    the float64 loops within the GEMM bound."""
    x, f, dy, strides, dilations, padding, fmt = case
    root, fetches = graph_of(*case)
    metadata = mg.RunMetadata()
    y, dx, df = mg.ClientSession(root, backend="native").Run({}, fetches,
                                                             run_metadata=metadata)
    for name, kernel in KERNELS.items():
        assert metadata.kernel_of(name) == kernel
    args = (strides, dilations, padding)
    a = np.abs
    taps = int(np.prod(f.shape[:3]))
    assert_within(from_fmt(y, fmt), conv_ref(x, f, *args), conv_ref(a(x), a(f), *args),
                  taps * f.shape[3], "Conv3D")
    assert_within(from_fmt(dx, fmt), conv_backprop_input_ref(x.shape, f, dy, *args),
                  conv_backprop_input_ref(x.shape, a(f), a(dy), *args), taps * f.shape[4],
                  "Conv3DBackpropInputV2")
    assert_within(df, conv_backprop_filter_ref(x, f.shape, dy, *args),
                  conv_backprop_filter_ref(a(x), f.shape, a(dy), *args),
                  dy.size // dy.shape[-1], "Conv3DBackpropFilterV2")


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(max_size=12, max_channels=80))
def test_bit_identical_for_any_thread_count(case):
    """Each element's chain is fixed by the shapes: 1, 2 and 3 threads give the same bits
    (channel counts up to 80: several panels, K blocks cut inside a tap)."""
    root, fetches = graph_of(*case)
    session = mg.ClientSession(root, backend="native")
    results = []
    try:
        for threads in (1, 2, 3):
            native.set_num_threads(threads)
            results.append(session.Run({}, fetches))
    finally:
        native.set_num_threads(None)
    for other in results[1:]:
        for got, first in zip(other, results[0]):
            assert np.array_equal(got, first)


def test_wide_channels_and_many_voxels_within_the_bound():
    """K blocks cut inside a tap (300 input channels), several panels of output channels,
    filter-gradient voxel ranges summed apart (more than 2048 output voxels)."""
    rng = np.random.default_rng(4)
    for x_shape, f_shape, strides, dilations in (((1, 3, 4, 5, 300), (2, 3, 2, 300, 40),
                                                  (1, 2, 1), (1, 1, 2)),
                                                 ((2, 12, 14, 13, 4), (3, 3, 3, 4, 5),
                                                  (1, 1, 1), (1, 1, 1))):
        x = rng.standard_normal(x_shape).astype(F32)
        f = rng.standard_normal(f_shape).astype(F32)
        out = out_dhw(x_shape[1:4], f_shape[:3], strides, dilations, "SAME")
        dy = rng.standard_normal((x_shape[0], *out, f_shape[4])).astype(F32)
        root, fetches = graph_of(x, f, dy, strides, dilations, "SAME", "NDHWC")
        y, dx, df = mg.ClientSession(root, backend="native").Run({}, fetches)
        args = (strides, dilations, "SAME")
        a = np.abs
        taps = int(np.prod(f_shape[:3]))
        assert_within(y, conv_ref(x, f, *args), conv_ref(a(x), a(f), *args),
                      taps * f_shape[3], "Conv3D")
        assert_within(dx, conv_backprop_input_ref(x_shape, f, dy, *args),
                      conv_backprop_input_ref(x_shape, a(f), a(dy), *args), taps * f_shape[4],
                      "Conv3DBackpropInputV2")
        assert_within(df, conv_backprop_filter_ref(x, f_shape, dy, *args),
                      conv_backprop_filter_ref(a(x), f_shape, a(dy), *args),
                      dy.size // dy.shape[-1], "Conv3DBackpropFilterV2")


@pytest.mark.parametrize("fmt", ["NDHWC", "NCDHW"])
def test_a_conv3d_training_step_runs_native(fmt):
    """Conv3D -> Relu -> MaxPool3D -> AvgPool3D -> Conv3D (stride 2) -> sum(y * r), gradient
    descent on both filters: no float32 node picks a ``reference:`` kernel, and the updated filters
    match the reference backend's step."""
    rng = np.random.default_rng(8)
    root = mg.Scope.NewRootScope()
    x = to_fmt(rng.standard_normal((2, 6, 7, 5, 3)).astype(F32), fmt)
    f1 = ops.Variable(root.WithOpName("f1"), [3, 3, 3, 3, 8], mg.float32)
    f2 = ops.Variable(root.WithOpName("f2"), [2, 3, 2, 8, 4], mg.float32)
    values = {"f1": rng.standard_normal((3, 3, 3, 3, 8)).astype(F32) * 0.2,
              "f2": rng.standard_normal((2, 3, 2, 8, 4)).astype(F32) * 0.2}
    inits = [ops.Assign(root, f1, values["f1"]), ops.Assign(root, f2, values["f2"])]
    h = ops.Relu(root, ops.Conv3D(root, x, f1, **attrs_of(fmt, (1, 1, 1), (1, 2, 1), "SAME")))
    h = ops.MaxPool3D(root, h, ksize=attr5(fmt, (1, 2, 2)), strides=attr5(fmt, (1, 1, 2)),
                      padding="SAME", data_format=fmt)
    h = ops.AvgPool3D(root, h, ksize=attr5(fmt, (2, 2, 2)), strides=attr5(fmt, (1, 1, 1)),
                      padding="SAME", data_format=fmt)
    y = ops.Conv3D(root, h, f2, **attrs_of(fmt, (2, 2, 2), (1, 1, 1), "VALID"))
    r = rng.standard_normal(tuple(y.shape)).astype(F32)
    loss = ops.Sum(root, ops.Mul(root, y, r), [0, 1, 2, 3, 4])
    g1, g2 = mg.AddSymbolicGradients(root, [loss], [f1, f2])
    step = [ops.ApplyGradientDescent(root, f1, np.float32(0.01), g1),
            ops.ApplyGradientDescent(root, f2, np.float32(0.01), g2)]
    updated = {}
    for backend in ("native", "reference"):
        session = mg.ClientSession(root, backend=backend)
        session.Run({}, inits)
        metadata = mg.RunMetadata()
        session.Run({}, step, run_metadata=metadata)
        if backend == "native":
            assert float32_reference_nodes(root, metadata.step_stats) == []
            kinds = {s.op_type for s in metadata.step_stats}
            assert {"Conv3D", "Conv3DBackpropInputV2", "Conv3DBackpropFilterV2",
                    "MaxPool3D", "MaxPool3DGrad", "AvgPool3D", "AvgPool3DGrad"} <= kinds
        updated[backend] = session.Run({}, [f1, f2])
    for got, want in zip(updated["native"], updated["reference"]):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def tf():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return pytest.importorskip("tensorflow")


@pytest.mark.oracle
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_against_tensorflow(tf, case):
    """TF 2.21's CPU Conv3D ops (oneDNN; both layouts, strides and dilations) against the
    native kernels: each within the GEMM bound of the float64 loops, so within twice the
    bound of each other (TF sums in another order)."""
    x, f, dy, strides, dilations, padding, fmt = case
    root, fetches = graph_of(*case)
    ours = mg.ClientSession(root, backend="native").Run({}, fetches)
    attrs = attrs_of(fmt, strides, dilations, padding)
    xf, dyf = to_fmt(x, fmt), to_fmt(dy, fmt)
    theirs = [tf.raw_ops.Conv3D(input=xf, filter=f, **attrs).numpy(),
              tf.raw_ops.Conv3DBackpropInputV2(input_sizes=list(xf.shape), filter=f,
                                               out_backprop=dyf, **attrs).numpy(),
              tf.raw_ops.Conv3DBackpropFilterV2(input=xf, filter_sizes=list(f.shape),
                                                out_backprop=dyf, **attrs).numpy()]
    args = (strides, dilations, padding)
    a = np.abs
    taps = int(np.prod(f.shape[:3]))
    mags = [to_fmt(conv_ref(a(x), a(f), *args), fmt),
            to_fmt(conv_backprop_input_ref(x.shape, a(f), a(dy), *args), fmt),
            conv_backprop_filter_ref(a(x), f.shape, a(dy), *args)]
    terms = [taps * f.shape[3], taps * f.shape[4], dy.size // dy.shape[-1]]
    for got, want, mag, k, what in zip(ours, theirs, mags, terms, ("Conv3D", "input", "filter")):
        assert_within(got, want.astype(F64), 2 * mag, k, what)


@st.composite
def pool_cases(draw, max_k=3, max_size=8, max_batch=3):
    """(fmt, attrs, NDHWC shape, rng) of a 3-D pool with a non-empty output."""
    fmt = draw(st.sampled_from(["NDHWC", "NCDHW"]))
    ksize = tuple(draw(st.integers(1, max_k)) for _ in range(3))
    strides = tuple(draw(st.integers(1, max_k)) for _ in range(3))
    sizes = tuple(draw(st.integers(k, max_size)) for k in ksize)
    shape = (draw(st.integers(1, max_batch)), *sizes, draw(st.integers(1, 20)))
    attrs = {"ksize": attr5(fmt, ksize), "strides": attr5(fmt, strides),
             "padding": draw(st.sampled_from(["SAME", "VALID"])), "data_format": fmt}
    return fmt, attrs, shape, np.random.default_rng(draw(st.integers(0, 2**32 - 1)))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pool_cases())
def test_max_pool3d_native_matches_the_reference(case):
    """MaxPool3D on the native backend (the 2-D C max pool, planes pass then height and
    width) gives the reference backend's values, NaN and infinities included. The sign of a
    zero maximum between -0 and +0 may differ, as it does between the 2-D MaxPool's native
    and numpy kernels (the C kernel keeps the first of equal values, numpy.maximum the
    second)."""
    fmt, attrs, shape, rng = case
    x = rng.choice(np.array([-1.5, -0.0, 0.0, 0.5, 2.0, np.inf, -np.inf, np.nan], F32),
                   shape, p=[0.3, 0.1, 0.1, 0.2, 0.2, 0.03, 0.03, 0.04])
    x = to_fmt(x + rng.standard_normal(shape).astype(F32) * (rng.random(shape) < 0.5), fmt)
    root = mg.Scope.NewRootScope()
    y = ops.MaxPool3D(root.WithOpName("pool"), x, **attrs)
    metadata = mg.RunMetadata()
    got = mg.ClientSession(root, backend="native").Run({}, [y], run_metadata=metadata)[0]
    assert metadata.kernel_of("pool") == "native:volumetric_kernels.max_pool3d_native"
    want = mg.ClientSession(root, backend="reference").Run({}, [y])[0]
    assert np.array_equal(got, want, equal_nan=True)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pool_cases(max_k=4, max_size=9))
def test_avg_pool3d_and_its_gradient_native_bit_for_bit(case):
    """AvgPool3D and AvgPool3DGrad on the native backend (the numpy kernels' passes, each
    in C) give the reference backend's bits, non-finite values included."""
    fmt, attrs, shape, rng = case
    x = rng.standard_normal(shape).astype(F32)
    x[rng.random(shape) < 0.02] = np.inf
    x[rng.random(shape) < 0.02] = -0.0
    x = to_fmt(x, fmt)
    root = mg.Scope.NewRootScope()
    y = ops.AvgPool3D(root.WithOpName("pool"), x, **attrs)
    g = rng.standard_normal(tuple(y.shape)).astype(F32)
    dx = ops.AvgPool3DGrad(root.WithOpName("grad"), list(x.shape), g, **attrs)
    metadata = mg.RunMetadata()
    got = mg.ClientSession(root, backend="native").Run({}, [y, dx], run_metadata=metadata)
    assert metadata.kernel_of("pool") == "native:volumetric_kernels.avg_pool3d_native"
    assert metadata.kernel_of("grad") == "native:volumetric_kernels.avg_pool3d_grad_native"
    want = mg.ClientSession(root, backend="reference").Run({}, [y, dx])
    for a, b in zip(got, want):
        assert a.dtype == b.dtype == F32 and a.tobytes() == b.tobytes()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pool_cases(max_batch=2))
def test_max_pool3d_grads_native_bit_for_bit(case):
    """MaxPool3DGrad (TF's CPU rule) and MaxPool3DGradGrad (the first exact match) on the
    native backend give the reference backend's bits: exact ties, near ties within and
    beyond 1e-5, infinities and NaN in the input and the output (orig_output as given, not
    recomputed)."""
    fmt, attrs, shape, rng = case
    x = rng.integers(-3, 4, shape).astype(F32) * 0.5  # many exact ties
    x += (rng.random(shape) < 0.2) * rng.choice(np.array([4e-6, -8e-6, 2e-5], F32), shape)
    x[rng.random(shape) < 0.02] = np.inf
    x[rng.random(shape) < 0.02] = np.nan
    root = mg.Scope.NewRootScope()
    xf = to_fmt(x, fmt)
    y = mg.ClientSession(root, backend="reference").Run(
        {}, [ops.MaxPool3D(root, xf, **attrs)])[0]
    y[rng.random(y.shape) < 0.05] = np.inf
    g = rng.standard_normal(y.shape).astype(F32)
    dx = ops.MaxPool3DGrad(root.WithOpName("grad"), xf, y, g, **attrs)
    gg = ops.MaxPool3DGradGrad(root.WithOpName("gradgrad"), xf, y,
                               rng.standard_normal(xf.shape).astype(F32), **attrs)
    metadata = mg.RunMetadata()
    got = mg.ClientSession(root, backend="native").Run({}, [dx, gg], run_metadata=metadata)
    for name, kernel in (("grad", "grad"), ("gradgrad", "grad_grad")):
        assert metadata.kernel_of(name) == f"native:volumetric_kernels.max_pool3d_{kernel}_native"
    want = mg.ClientSession(root, backend="reference").Run({}, [dx, gg])
    for a, b in zip(got, want):
        assert a.tobytes() == b.tobytes()
