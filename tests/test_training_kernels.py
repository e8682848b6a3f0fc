"""The native kernels of a training step, one by one (issue 23 §1).

- ApplyGradientDescent / ApplyMomentum (plain and Nesterov) / ApplyAdam: TF's formulas in
  float32 operations (numpy), bit for bit, on every ISA and thread count; and TF 2.21's own
  ResourceApply* ops bit for bit (oracle).
- AddN: the inputs added in order, bit for bit the numpy kernel.
- Sum / Mean over any axes (keep_dims or not): numpy's float32 sums bit for bit, and within
  n * 2^-24 * sum|x| of the float64 sum (n reduced elements).
- BiasAddGrad (NHWC and NCHW): within that bound of the float64 sum; NHWC bit for bit.
- Softmax cross entropy (dense and sparse labels): within a few float32 ulps of the float64
  formulas, and of TF's (oracle).
- The broadcasting binary ops read BroadcastTo's views in place: numpy's bits.
Hypothesis draws the shapes, values (special ones included) and hyper-parameters.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import NATIVE_AVAILABLE
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import minigraph as mg
from minigraph import ops
from minigraph.backends import native
from minigraph.backends.math_kernels import c_add_n
from minigraph.backends.nn_kernels import c_softmax_xent
from minigraph.backends.training_kernels import (
    c_apply_adam,
    c_apply_gradient_descent,
    c_apply_momentum,
)

pytestmark = pytest.mark.skipif(not NATIVE_AVAILABLE, reason="the native kernels are not built")

F32 = np.float32
SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])
EPS32 = 2.0**-24


def each_isa_and_thread_count():
    """(isa, threads) for every ISA this CPU has, 1 and 3 threads; restores the defaults."""
    try:
        for isa in native.ISAS[:native.ISAS.index(native.best_isa()) + 1]:
            native.set_isa(isa)
            for threads in (1, 3):
                native.set_num_threads(threads)
                yield isa, threads
    finally:
        native.set_isa(native.best_isa())
        native.set_num_threads(None)


def assert_bits(ours: np.ndarray, expected: np.ndarray, what: str) -> None:
    expected = np.asarray(expected, F32)
    assert ours.shape == expected.shape, (what, ours.shape, expected.shape)
    nan = np.isnan(expected)
    np.testing.assert_array_equal(np.isnan(ours), nan, err_msg=what)
    np.testing.assert_array_equal(ours[~nan].view(np.uint32), expected[~nan].view(np.uint32),
                                  err_msg=what)


def finite(shape, *, width: float = 1024.0) -> st.SearchStrategy:
    return hnp.arrays(F32, shape, elements=st.floats(-width, width, width=32))


def normal(shape) -> st.SearchStrategy:
    """Zeros and values of magnitude 2^-40 .. 1024: the updates' intermediates stay normal
    floats (TF's threads flush subnormals to zero, FTZ/DAZ; minigraph keeps them)."""
    return hnp.arrays(F32, shape, elements=st.floats(-1024, 1024, width=32).filter(
        lambda v: v == 0 or abs(v) >= 2.0**-40))


def specials(shape) -> st.SearchStrategy:
    return hnp.arrays(F32, shape, elements=st.floats(width=32, allow_subnormal=True),
                      fill=st.sampled_from([0.0, -0.0, 1.0, np.inf, -np.inf, np.nan, 1e-40]))


def scalar(low: float, high: float) -> st.SearchStrategy:
    """float32 values in [low, high] (the bounds rounded inward to float32)."""
    low, high = float(np.nextafter(F32(low), F32(np.inf))), float(np.nextafter(F32(high), F32(0)))
    return st.floats(low, high, width=32).map(F32)


# ----------------------------------------------------------------------------- optimizers


def momentum_f32(var, accum, grad, lr, momentum, nesterov):
    """TF's ApplyMomentum (training_ops.cc) in float32 numpy operations."""
    accum = accum * momentum + grad
    if nesterov:
        return var - (grad * lr + accum * momentum * lr), accum
    return var - lr * accum, accum


def adam_f32(var, m, v, grad, lr_t, beta1, beta2, epsilon, nesterov):
    """TF's ApplyAdam with alpha = lr_t, float32 numpy operations in its order."""
    m = m + (grad - m) * (F32(1) - beta1)
    v = v + (grad * grad - v) * (F32(1) - beta2)
    step = (m * beta1 + (F32(1) - beta1) * grad) if nesterov else m
    return var - lr_t * step / (np.sqrt(v) + epsilon), m, v


@SETTINGS
@given(shape=hnp.array_shapes(min_dims=0, max_dims=3, max_side=40), data=st.data(),
       lr=scalar(1e-4, 1.0), momentum=scalar(0.0, 0.999), nesterov=st.booleans())
def test_momentum_and_sgd_are_tf_formulas_bit_for_bit(shape, data, lr, momentum, nesterov):
    var, accum, grad = (data.draw(specials(shape), name) for name in ("var", "accum", "grad"))
    with np.errstate(all="ignore"):
        expected = momentum_f32(var, accum, grad, lr, momentum, nesterov)
        expected_sgd = var - lr * grad
    for isa, threads in each_isa_and_thread_count():
        what = f"{isa} x{threads}"
        for ours, want in zip(c_apply_momentum(var, accum, grad, lr, momentum, nesterov),
                              expected):
            assert_bits(ours, want, f"momentum {what}")
        assert_bits(c_apply_gradient_descent(var, grad, lr)[0], expected_sgd, f"sgd {what}")


@SETTINGS
@given(shape=hnp.array_shapes(min_dims=0, max_dims=3, max_side=40), data=st.data(),
       lr_t=scalar(1e-4, 0.1), beta1=scalar(0.5, 0.99), beta2=scalar(0.9, 0.9999),
       epsilon=scalar(1e-8, 1e-3), nesterov=st.booleans())
def test_adam_is_tf_formula_bit_for_bit(shape, data, lr_t, beta1, beta2, epsilon, nesterov):
    var, m, grad = (data.draw(finite(shape), name) for name in ("var", "m", "grad"))
    v = np.abs(data.draw(finite(shape), "v"))
    with np.errstate(all="ignore"):
        expected = adam_f32(var, m, v, grad, lr_t, beta1, beta2, epsilon, nesterov)
    for isa, threads in each_isa_and_thread_count():
        ours = c_apply_adam(var, m, v, grad, lr_t, beta1, beta2, epsilon, nesterov)
        for name, a, b in zip(("var", "m", "v"), ours, expected):
            assert_bits(a, b, f"adam {name} {isa} x{threads}")


def test_update_ops_run_native_and_write_the_variables():
    """ApplyMomentum and ApplyGradientDescent in a session: native kernels, the variables
    hold the formulas' values after each of two steps, as on the reference backend."""
    rng = np.random.default_rng(0)
    shape = (33, 70)  # over mg_stream_threads' single-thread size: the pool splits it
    grad = rng.standard_normal(shape).astype(F32)
    results = {}
    for backend in ("native", "reference"):
        root = mg.Scope.NewRootScope()
        init = rng.standard_normal(shape).astype(F32)
        var = mg.train.variables.variable(root, "w", list(shape),
                                          lambda s, sh, dt, v=init: ops.Const(s, v))
        var2 = mg.train.variables.variable(root, "u", list(shape),
                                           lambda s, sh, dt, v=init: ops.Const(s, v))
        g = ops.Placeholder(root.WithOpName("g"), mg.float32, shape=list(shape))
        steps = (mg.train.Momentum(0.05, 0.9, use_nesterov=True).apply(root, [(g, var)])
                 + mg.train.GradientDescent(0.1).apply(root, [(g, var2)]))
        session = mg.ClientSession(root, backend=backend)
        session.Run({}, [], targets=mg.train.global_variables_initializer(root))
        metadata = mg.RunMetadata()
        for _ in range(2):
            session.Run({g: grad}, [], targets=steps, run_metadata=metadata)
        for s in metadata.step_stats:
            if s.op_type.startswith("Apply"):
                assert s.backend == backend, (s.op_type, s.kernel)
        results[backend] = session.Run({}, [var, var2])
        w, a, u = init, np.zeros(shape, F32), init
        for _ in range(2):
            w, a = momentum_f32(w, a, grad, F32(0.05), F32(0.9), True)
            u = u - F32(0.1) * grad
        assert_bits(results[backend][0], w, f"momentum on {backend}")
        assert_bits(results[backend][1], u, f"sgd on {backend}")


@pytest.mark.oracle
@SETTINGS
@given(shape=hnp.array_shapes(min_dims=1, max_dims=2, max_side=20), data=st.data(),
       lr=scalar(1e-4, 1.0), momentum=scalar(1e-3, 0.999), nesterov=st.booleans())
def test_updates_match_tensorflow_bit_for_bit(shape, data, lr, momentum, nesterov):
    """TF 2.21's ResourceApplyMomentum / GradientDescent / Adam on the same values (normal
    floats throughout: TF flushes subnormal results to zero)."""
    tf = pytest.importorskip("tensorflow")
    var, accum, grad, m = (data.draw(normal(shape), n) for n in ("var", "accum", "grad", "m"))
    v = np.abs(data.draw(normal(shape), "v"))
    tv, ta = tf.Variable(var), tf.Variable(accum)
    tf.raw_ops.ResourceApplyMomentum(var=tv.handle, accum=ta.handle, lr=lr, grad=grad,
                                     momentum=momentum, use_nesterov=nesterov)
    ours = c_apply_momentum(var, accum, grad, lr, momentum, nesterov)
    assert_bits(ours[0], tv.numpy(), "momentum var")
    assert_bits(ours[1], ta.numpy(), "momentum accum")
    tv = tf.Variable(var)
    tf.raw_ops.ResourceApplyGradientDescent(var=tv.handle, alpha=lr, delta=grad)
    assert_bits(c_apply_gradient_descent(var, grad, lr)[0], tv.numpy(), "sgd")
    beta1, beta2, eps = F32(0.9), F32(0.999), F32(1e-7)
    b1p, b2p = F32(0.9**3), F32(0.999**3)
    tv, tm, tvv = tf.Variable(var), tf.Variable(m), tf.Variable(v)
    tf.raw_ops.ResourceApplyAdam(var=tv.handle, m=tm.handle, v=tvv.handle, beta1_power=b1p,
                                 beta2_power=b2p, lr=lr, beta1=beta1, beta2=beta2,
                                 epsilon=eps, grad=grad, use_nesterov=nesterov)
    lr_t = lr * np.sqrt(F32(1) - b2p) / (F32(1) - b1p)  # TF's alpha, in float32
    ours = c_apply_adam(var, m, v, grad, lr_t, beta1, beta2, eps, nesterov)
    for name, a, t in zip(("var", "m", "v"), ours, (tv, tm, tvv)):
        assert_bits(a, t.numpy(), f"adam {name}")


# ----------------------------------------------------------------------------- AddN


@SETTINGS
@given(shape=hnp.array_shapes(min_dims=0, max_dims=4, max_side=12), n=st.integers(1, 6),
       data=st.data())
def test_add_n_adds_in_input_order_bit_for_bit(shape, n, data):
    inputs = [data.draw(specials(shape), f"x{k}") for k in range(n)]
    expected = inputs[0].copy()
    with np.errstate(all="ignore"):
        for x in inputs[1:]:
            expected = expected + x
    for isa, threads in each_isa_and_thread_count():
        assert_bits(c_add_n(inputs), expected, f"AddN of {n} {isa} x{threads}")


def test_add_n_of_large_gradients_splits_across_threads_alike():
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal((8, 16, 16, 32)).astype(F32) for _ in range(3)]
    expected = (inputs[0] + inputs[1]) + inputs[2]
    for isa, threads in each_isa_and_thread_count():
        assert_bits(c_add_n(inputs), expected, f"{isa} x{threads}")


# ----------------------------------------------------------------------------- reductions


@st.composite
def reduction_cases(draw):
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=5, min_side=1, max_side=9))
    axes = draw(st.lists(st.integers(0, len(shape) - 1), unique=True, max_size=len(shape)))
    x = draw(finite(shape, width=128.0))
    return x, sorted(axes), draw(st.booleans())


def run_ops(backend: str, x: np.ndarray, build) -> tuple[list[np.ndarray], list]:
    """``build(scope, placeholder) -> fetches`` on ``backend``: (values, NodeStats)."""
    root = mg.Scope.NewRootScope()
    xp = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=x.shape)
    fetches = build(root, xp)
    metadata = mg.RunMetadata()
    values = mg.ClientSession(root, backend=backend).Run({xp: x}, fetches,
                                                         run_metadata=metadata)
    return values, metadata.step_stats


@SETTINGS
@given(case=reduction_cases())
def test_sum_and_mean_over_any_axes_are_numpys_sums(case):
    x, axes, keep = case

    def build(root, xp):
        indices = ops.Const(root, np.array(axes, np.int32))
        return [ops.Sum(root.WithOpName("sum"), xp, indices, keep_dims=keep),
                ops.Mean(root.WithOpName("mean"), xp, indices, keep_dims=keep)]

    (total, mean), stats = run_ops("native", x, build)
    assert {s.op_type: s.backend for s in stats}.keys() >= {"Sum", "Mean"}
    assert all(s.backend == "native" for s in stats if s.op_type in ("Sum", "Mean"))
    assert_bits(total, x.sum(axis=tuple(axes), keepdims=keep), f"Sum {x.shape} {axes}")
    assert_bits(mean, x.mean(axis=tuple(axes), keepdims=keep), f"Mean {x.shape} {axes}")
    count = int(np.prod([x.shape[a] for a in axes]))
    exact = x.astype(np.float64).sum(axis=tuple(axes), keepdims=keep)
    bound = max(count, 1) * EPS32 * np.abs(x).astype(np.float64).sum(axis=tuple(axes),
                                                                       keepdims=keep)
    assert np.all(np.abs(total - exact) <= bound + 1e-30)


def test_reductions_of_long_rows_split_across_threads_alike():
    """Rows long enough for numpy's pairwise recursion (> 128) and for the pool."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((6, 50, 1000)).astype(F32)
    for axes in ((2,), (1, 2), (0, 2), (0,), (0, 1, 2)):
        for isa, threads in each_isa_and_thread_count():
            (total, mean), _ = run_ops("native", x, lambda root, xp, a=axes: [
                ops.Sum(root, xp, ops.Const(root, np.array(a, np.int32))),
                ops.Mean(root, xp, ops.Const(root, np.array(a, np.int32)))])
            assert_bits(total, x.sum(axis=axes), f"Sum {axes} {isa} x{threads}")
            assert_bits(mean, x.mean(axis=axes), f"Mean {axes} {isa} x{threads}")


@SETTINGS
@given(shape=hnp.array_shapes(min_dims=2, max_dims=4, min_side=1, max_side=9),
       data_format=st.sampled_from(["NHWC", "NCHW"]), data=st.data())
def test_bias_add_grad_is_the_channel_sum(shape, data_format, data):
    if data_format == "NCHW" and len(shape) < 3:
        data_format = "NHWC"
    dy = data.draw(finite(shape, width=128.0), "dy")
    axis = 1 if data_format == "NCHW" else len(shape) - 1
    (grad,), stats = run_ops("native", dy, lambda root, xp: [
        ops.BiasAddGrad(root.WithOpName("bias_grad"), xp, data_format=data_format)])
    assert [s.backend for s in stats if s.op_type == "BiasAddGrad"] == ["native"]
    axes = tuple(a for a in range(len(shape)) if a != axis)
    exact = dy.astype(np.float64).sum(axis=axes)
    bound = dy.size / shape[axis] * EPS32 * np.abs(dy).astype(np.float64).sum(axis=axes)
    assert grad.shape == (shape[axis],) and grad.dtype == F32
    assert np.all(np.abs(grad - exact) <= bound + 1e-30)
    if data_format == "NHWC":
        assert_bits(grad, dy.sum(axis=axes), "BiasAddGrad NHWC")


# ----------------------------------------------------------------------------- cross entropy


def xent_f64(x: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = x.astype(np.float64)
    shifted = x - x.max(axis=1, keepdims=True)
    lse = np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return (labels * (lse - shifted)).sum(axis=1), np.exp(shifted - lse) - labels


@settings(SETTINGS, max_examples=25)
@given(rows=st.integers(1, 12), classes=st.integers(1, 24), sparse=st.booleans(),
       data=st.data())
def test_softmax_cross_entropy_within_a_few_ulps(rows, classes, sparse, data):
    x = data.draw(finite((rows, classes), width=64.0), "logits")
    if sparse:
        index = np.array(data.draw(st.lists(st.integers(0, classes - 1), min_size=rows,
                                            max_size=rows)), np.int32)
        labels = np.eye(classes, dtype=F32)[index]
        loss, backprop = c_softmax_xent(x, sparse=index)
    else:
        labels = data.draw(hnp.arrays(F32, (rows, classes),
                                      elements=st.floats(0, 1, width=32)), "labels")
        loss, backprop = c_softmax_xent(x, dense=labels)
    want_loss, want_backprop = xent_f64(x, labels)
    # per element: x - max rounded (relative error |x - max| eps in the exp), exp within 1.5
    # ulp, the classes' exps summed in order (classes roundings), a quotient, a difference;
    # the loss: classes terms summed in order (subnormal results: absolute steps of 2^-149)
    x64 = x.astype(np.float64)
    shift = np.abs(x64 - x64.max(axis=1, keepdims=True))
    softmax = want_backprop + labels
    assert np.all(np.abs(backprop - want_backprop)
                  <= (classes + 8 + shift) * EPS32 * softmax + 2 * EPS32 * np.abs(labels)
                  + 2.0**-147)  # subnormal results: a few of their steps
    terms = np.abs(labels * (shift + np.log(classes)))
    bound = (classes + 8) * EPS32 * terms.sum(axis=1) + 8 * EPS32
    assert np.all(np.abs(loss - want_loss) <= bound)


def test_cross_entropy_ops_run_native_with_nan_and_broadcast_labels():
    x = np.array([[1.0, np.nan, 0.0], [3.0, -2.0, 0.5]], F32)
    labels = np.array([0.2, 0.3, 0.5], F32)  # broadcast over the rows
    root = mg.Scope.NewRootScope()
    xp = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[2, 3])
    dense = ops.SoftmaxCrossEntropyWithLogits(root.WithOpName("dense"), xp,
                                              ops.Const(root, labels))
    sparse = ops.SparseSoftmaxCrossEntropyWithLogits(root.WithOpName("sparse"), xp,
                                                     ops.Const(root, np.array([2, 0],
                                                                              np.int32)))
    metadata = mg.RunMetadata()
    values = mg.ClientSession(root, backend="native").Run(
        {xp: x}, [dense.loss, dense.backprop, sparse.loss, sparse.backprop],
        run_metadata=metadata)
    assert {s.node_name: s.backend for s in metadata.step_stats}["dense"] == "native"
    assert {s.node_name: s.backend for s in metadata.step_stats}["sparse"] == "native"
    for index, onehot in ((0, np.broadcast_to(labels, (2, 3))),
                          (2, np.eye(3, dtype=F32)[[2, 0]])):
        loss, backprop = values[index], values[index + 1]
        assert np.isnan(loss[0]) and np.all(np.isnan(backprop[0]))  # a NaN logit: NaN row
        want_loss, want_backprop = xent_f64(x[1:], onehot[1:])
        np.testing.assert_allclose(loss[1:], want_loss, rtol=1e-6)
        np.testing.assert_allclose(backprop[1:], want_backprop, atol=1e-7)


@pytest.mark.oracle
def test_softmax_cross_entropy_matches_tensorflow():
    tf = pytest.importorskip("tensorflow")
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((64, 10)) * 5).astype(F32)
    index = rng.integers(0, 10, 64).astype(np.int32)
    loss, backprop = c_softmax_xent(x, sparse=index)
    t_loss, t_backprop = tf.raw_ops.SparseSoftmaxCrossEntropyWithLogits(features=x,
                                                                        labels=index)
    np.testing.assert_allclose(loss, t_loss.numpy(), rtol=4e-6, atol=1e-6)
    np.testing.assert_allclose(backprop, t_backprop.numpy(), atol=2e-7)


# ----------------------------------------------------------------------------- broadcast views


@SETTINGS
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=1, max_dims=4,
                                                max_side=5),
       data=st.data())
def test_binary_ops_read_broadcast_views_in_place(shapes, data):
    """Mul/AddV2/RealDiv of a BroadcastTo view (the Mean gradient's cotangent) and another
    tensor: native, numpy's bits, whichever side repeats."""
    x_shape, y_shape = shapes.input_shapes
    target = shapes.result_shape
    x, y = data.draw(specials(x_shape), "x"), data.draw(specials(y_shape), "y")
    root = mg.Scope.NewRootScope()
    xp = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=x_shape)
    yp = ops.Placeholder(root.WithOpName("y"), mg.float32, shape=y_shape)
    view = ops.BroadcastTo(root, xp, ops.Const(root, np.array(target, np.int32)))
    fetches = [ops.Mul(root.WithOpName("mul"), view, yp),
               ops.AddV2(root.WithOpName("add"), yp, view),
               ops.RealDiv(root.WithOpName("div"), view, yp)]
    metadata = mg.RunMetadata()
    values = mg.ClientSession(root, backend="native").Run({xp: x, yp: y}, fetches,
                                                          run_metadata=metadata)
    assert all(s.backend == "native" for s in metadata.step_stats
               if s.op_type in ("Mul", "AddV2", "RealDiv", "BroadcastTo"))
    big = np.broadcast_to(x, target)
    with np.errstate(all="ignore"):
        for value, want in zip(values, (big * y, y + big, big / y)):
            assert_bits(np.asarray(value), want, f"{x_shape} {y_shape}")


# ----------------------------------------------------------------------------- pooling


@st.composite
def pool_cases(draw):
    """A pool over NHWC/NCHW input: window 1-4, stride 1-3 (overlapping windows, gaps and
    tilings), SAME/VALID (MaxPool also EXPLICIT pads below the window), batch 1-3."""
    n, h, w = draw(st.integers(1, 3)), draw(st.integers(1, 9)), draw(st.integers(1, 9))
    c = draw(st.sampled_from([1, 2, 3, 17, 70]))
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    padding = draw(st.sampled_from(["SAME", "VALID", "EXPLICIT"]))
    fmt = draw(st.sampled_from(["NHWC", "NCHW"]))
    pads = [draw(st.integers(0, k - 1)) for k in (kh, kh, kw, kw)]
    if padding == "VALID" and (h < kh or w < kw):
        padding = "SAME"
    if padding == "EXPLICIT" and (h + pads[0] + pads[1] < kh or w + pads[2] + pads[3] < kw):
        padding = "SAME"
    values = draw(st.sampled_from(["ties", "normal", "special"]))
    return (n, h, w, c), (kh, kw), (sh, sw), padding, pads, fmt, values


def layout(fmt: str, h: int, w: int) -> list[int]:
    return [1, 1, h, w] if fmt == "NCHW" else [1, h, w, 1]


@settings(SETTINGS, max_examples=30)
@given(case=pool_cases())
def test_pool_gradients_of_every_window_are_the_numpy_kernels_bits(case):
    """MaxPool/MaxPoolGrad (EXPLICIT too) and AvgPool/AvgPoolGrad run native for every
    window, stride and padding and give the numpy kernels' bits on every ISA and thread
    count (those kernels are checked against TF and loops in test_nn_ops.py)."""
    shape, ksize, strides, padding, pads, fmt, values = case
    rng = np.random.default_rng(sum(shape) + 7 * ksize[0] + strides[1])
    if values == "ties":
        x = rng.integers(0, 3, shape).astype(F32)
    elif values == "normal":
        x = rng.standard_normal(shape).astype(F32)
    else:
        x = rng.choice(np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1.0, -1.0], F32), shape)
    if fmt == "NCHW":
        x = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    attrs = {"ksize": layout(fmt, *ksize), "strides": layout(fmt, *strides),
             "padding": padding, "data_format": fmt}
    if padding == "EXPLICIT":
        pairs = [(0, 0), (pads[0], pads[1]), (pads[2], pads[3]), (0, 0)]
        if fmt == "NCHW":
            pairs = [pairs[0], pairs[3], pairs[1], pairs[2]]
        attrs["explicit_paddings"] = [v for pair in pairs for v in pair]

    def build(root, xp):
        y = ops.MaxPool(root.WithOpName("max"), xp, **attrs)
        grad = np.random.default_rng(1).standard_normal(y.shape.as_list()).astype(F32)
        grad[..., ::3] = -0.0  # a routed -0 comes out +0 (0 + -0), as numpy adds it
        g = ops.Const(root, grad)
        fetches = [y, ops.MaxPoolGrad(root.WithOpName("max_grad"), xp, y, g, **attrs)]
        if padding != "EXPLICIT":
            avg = ops.AvgPool(root.WithOpName("avg"), xp, **attrs)
            fetches += [avg, ops.AvgPoolGrad(root.WithOpName("avg_grad"), list(x.shape), g,
                                             **attrs)]
        return fetches

    reference, _ = run_ops("reference", x, build)
    for isa, threads in each_isa_and_thread_count():
        ours, stats = run_ops("native", x, build)
        assert all(s.backend == "native" for s in stats if "Pool" in s.op_type), stats
        for name, a, b in zip(("MaxPool", "MaxPoolGrad", "AvgPool", "AvgPoolGrad"), ours,
                              reference):
            if name == "MaxPool":  # the max of 0 and -0 may be either (numpy's own choice)
                np.testing.assert_array_equal(a, b, name)
            else:
                assert_bits(a, b, f"{name} {case} {isa} x{threads}")


def test_avg_pool_and_its_gradient_against_float64_loops():
    """AvgPool / AvgPoolGrad with overlapping SAME windows (padding not counted, as TF)
    against plain float64 loops, within a few float32 ulps."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 7, 6, 5)).astype(F32)
    g = rng.standard_normal((2, 4, 3, 5)).astype(F32)  # SAME, stride 2: ceil(7/2), ceil(6/2)
    attrs = {"ksize": [1, 3, 3, 1], "strides": [1, 2, 2, 1], "padding": "SAME"}
    (y, dx), stats = run_ops("native", x, lambda root, xp: [
        ops.AvgPool(root, xp, **attrs), ops.AvgPoolGrad(root, list(x.shape), g, **attrs)])
    assert all(s.backend == "native" for s in stats if "Pool" in s.op_type)
    want_y, want_dx = np.zeros(y.shape), np.zeros(x.shape)
    for oy in range(4):
        for ox in range(3):
            ys = slice(max(2 * oy - 1, 0), min(2 * oy + 2, 7))  # SAME: pad top 1, left 0
            xs = slice(2 * ox, min(2 * ox + 3, 6))
            window = x[:, ys, xs, :].astype(np.float64)
            count = window.shape[1] * window.shape[2]
            want_y[:, oy, ox, :] = window.sum(axis=(1, 2)) / count
            want_dx[:, ys, xs, :] += g[:, oy, ox, :].astype(np.float64)[:, None, None] / count
    np.testing.assert_allclose(y, want_y, rtol=0, atol=16 * EPS32 * np.abs(x).max())
    np.testing.assert_allclose(dx, want_dx, rtol=0, atol=16 * EPS32 * np.abs(g).max())


# ----------------------------------------------------------------------------- transpose


@SETTINGS
@given(shape=hnp.array_shapes(min_dims=0, max_dims=6, min_side=1, max_side=6),
       data=st.data())
def test_transpose_of_any_permutation_is_numpys_copy(shape, data):
    """Transpose (an NCHW model's layout changes) runs native for every permutation: the
    same elements as numpy's, on every thread count."""
    perm = data.draw(st.permutations(range(len(shape))), "perm")
    x = data.draw(specials(shape), "x")
    for isa, threads in each_isa_and_thread_count():
        (y,), stats = run_ops("native", x, lambda root, xp: [
            ops.Transpose(root.WithOpName("t"), xp, np.array(perm, np.int32))])
        assert [s.backend for s in stats if s.op_type == "Transpose"] == ["native"]
        assert_bits(y, x.transpose(perm), f"{shape} {perm} {isa} x{threads}")


def test_transpose_of_images_splits_across_threads_alike():
    x = np.random.default_rng(5).standard_normal((8, 32, 32, 16)).astype(F32)
    for perm in ((0, 3, 1, 2), (0, 2, 3, 1), (3, 2, 1, 0)):
        for isa, threads in each_isa_and_thread_count():
            (y,), _ = run_ops("native", x, lambda root, xp, p=perm: [
                ops.Transpose(root, xp, np.array(p, np.int32))])
            assert_bits(y, x.transpose(perm), f"{perm} {isa} x{threads}")


# ----------------------------------------------------------------------------- gradient seeds


@SETTINGS
@given(x=hnp.arrays(np.int32, hnp.array_shapes(min_dims=0, max_dims=3, max_side=9),
                    elements=st.integers(-2**31, 2**31 - 1)))
def test_int32_to_float32_casts_and_fills_are_numpys(x):
    """Cast int32 -> float32 (a mean gradient's element count; round to nearest even above
    2^24) and OnesLike / ZerosLike (a loss gradient's seed) run native, numpy's bits."""
    root = mg.Scope.NewRootScope()
    xp = ops.Placeholder(root.WithOpName("x"), mg.int32, shape=x.shape)
    cast = ops.Cast(root.WithOpName("cast"), xp, DstT=mg.float32)
    fetches = [cast, ops.OnesLike(root.WithOpName("ones"), cast),
               ops.ZerosLike(root.WithOpName("zeros"), cast)]
    for isa, threads in each_isa_and_thread_count():
        metadata = mg.RunMetadata()
        values = mg.ClientSession(root, backend="native").Run({xp: x}, fetches,
                                                              run_metadata=metadata)
        assert all(s.backend == "native" for s in metadata.step_stats
                   if s.op_type in ("Cast", "OnesLike", "ZerosLike"))
        for value, want in zip(values, (x.astype(F32), np.ones(x.shape, F32),
                                        np.zeros(x.shape, F32))):
            assert_bits(np.asarray(value), want, f"{x.shape} {isa} x{threads}")
