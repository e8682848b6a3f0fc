"""The layer ops (the convolution, pooling, activation and nn families of
``minigraph.ops``): Conv2D (+ both backprops), BiasAdd(Grad), Relu(Grad), MaxPool(Grad,
GradGrad), AvgPool(Grad), MatMul, Softmax, SparseSoftmaxCrossEntropyWithLogits, ArgMax,
Equal.

* Forward values against independent float64 references written here with direct loops
  over output pixels and window offsets (``conv_ref``, ``pool_ref`` ...), for NHWC and NCHW,
  SAME/VALID/EXPLICIT, strides 1/2/3, dilation 1/2.
* Every registered gradient against float64 central differences
  (``mg.gradient_checker``), including the second-order ones (the gradients of the backprop
  ops); ``test_every_nn_gradient_is_checked`` fails when one is not covered.
* Shape inference (SAME/VALID/EXPLICIT sizes, unknown dims and ranks, NCHW) and the errors
  raised for bad shapes and attrs, at construction and at run time.
* ``oracle`` tests compare with ``tf.raw_ops`` when TensorFlow imports.
"""

from __future__ import annotations

import itertools
import os

import ml_dtypes
import numpy as np
import pytest
from conftest import BACKENDS

import minigraph as mg
from minigraph import ops
from minigraph.framework.gradient_registry import registered_gradients
from minigraph.testing.gradient_checker import compute_gradient, max_error

InvalidArgumentError = mg.errors.InvalidArgumentError
F32, F64 = np.float32, np.float64
TOL = 1e-6
FORMATS = ("NHWC", "NCHW")
PADDINGS = ("SAME", "VALID", "EXPLICIT")


# ----------------------------------------------------------------------------- helpers


def run(fetches, feeds=None):
    graph = (fetches[0] if isinstance(fetches, list) else fetches).graph
    return mg.ClientSession(graph, backend="reference").Run(feeds or {}, fetches)


def ph(scope, name, shape, dtype=mg.float32):
    return ops.Placeholder(scope.WithOpName(name), dtype, shape=shape)


def to_fmt(a: np.ndarray, fmt: str) -> np.ndarray:
    """An NHWC array in ``fmt``."""
    return a if fmt == "NHWC" else np.ascontiguousarray(a.transpose(0, 3, 1, 2))


def from_fmt(a: np.ndarray, fmt: str) -> np.ndarray:
    return a if fmt == "NHWC" else np.ascontiguousarray(a.transpose(0, 2, 3, 1))


def hw_attr(fmt: str, h: int, w: int) -> list[int]:
    """A strides/ksize/dilations attr in ``fmt`` order with batch and depth 1."""
    return [1, h, w, 1] if fmt == "NHWC" else [1, 1, h, w]


def explicit_attr(fmt: str, pads) -> list[int]:
    """explicit_paddings in ``fmt`` order from ((top, bottom), (left, right))."""
    (t, b), (left, r) = pads
    return [0, 0, t, b, left, r, 0, 0] if fmt == "NHWC" else [0, 0, 0, 0, t, b, left, r]


def assert_gradients_match(xs, values, y, *, feeds=None):
    theoretical, numerical = compute_gradient(xs, values, y, feeds=feeds)
    error = max_error(theoretical, numerical)
    worst = max(float(np.abs(n).max()) for n in numerical)
    assert error < TOL, f"max |symbolic - numerical| = {error:.3g}"
    assert worst > 1e-3, f"numerical Jacobian is ~0 (max {worst:.3g}): vacuous check"


# ----------------------------------------------------------------------------- references
# Written from the TF documentation of the ops, independently of minigraph's kernels.


def ref_dim(size, k, stride, dilation, padding, explicit=(0, 0)):
    """(output size, pad before) of one spatial dim."""
    k_eff = (k - 1) * dilation + 1
    if padding == "VALID":
        return max(0, (size - k_eff) // stride + 1), 0
    if padding == "EXPLICIT":
        return max(0, (size + sum(explicit) - k_eff) // stride + 1), explicit[0]
    out = -(-size // stride)
    return out, max(0, (out - 1) * stride + k_eff - size) // 2


def conv_taps(x_hw, k_hw, strides, dilations, padding, explicit):
    """Yield (p, q, i, j, h, w): output pixel, filter tap and the input pixel it reads."""
    (oh, top), (ow, left) = (ref_dim(x_hw[a], k_hw[a], strides[a], dilations[a], padding,
                                     explicit[a]) for a in (0, 1))
    for p, q, i, j in itertools.product(range(oh), range(ow), range(k_hw[0]), range(k_hw[1])):
        h = p * strides[0] + i * dilations[0] - top
        w = q * strides[1] + j * dilations[1] - left
        if 0 <= h < x_hw[0] and 0 <= w < x_hw[1]:
            yield p, q, i, j, h, w


def conv_out_hw(x_hw, k_hw, strides, dilations, padding, explicit):
    return tuple(ref_dim(x_hw[a], k_hw[a], strides[a], dilations[a], padding, explicit[a])[0]
                 for a in (0, 1))


def conv_ref(x, f, strides=(1, 1), dilations=(1, 1), padding="VALID",
             explicit=((0, 0), (0, 0))):
    """NHWC x, HWIO f -> NHWC y in float64."""
    x, f = x.astype(F64), f.astype(F64)
    oh, ow = conv_out_hw(x.shape[1:3], f.shape[:2], strides, dilations, padding, explicit)
    y = np.zeros((x.shape[0], oh, ow, f.shape[3]))
    for p, q, i, j, h, w in conv_taps(x.shape[1:3], f.shape[:2], strides, dilations, padding,
                                      explicit):
        y[:, p, q] += x[:, h, w] @ f[i, j]
    return y


def conv_backprop_input_ref(x_shape, f, dy, strides, dilations, padding, explicit):
    f, dy = f.astype(F64), dy.astype(F64)
    dx = np.zeros(x_shape)
    for p, q, i, j, h, w in conv_taps(x_shape[1:3], f.shape[:2], strides, dilations, padding,
                                      explicit):
        dx[:, h, w] += dy[:, p, q] @ f[i, j].T
    return dx


def conv_backprop_filter_ref(x, f_shape, dy, strides, dilations, padding, explicit):
    x, dy = x.astype(F64), dy.astype(F64)
    df = np.zeros(f_shape)
    for p, q, i, j, h, w in conv_taps(x.shape[1:3], f_shape[:2], strides, dilations, padding,
                                      explicit):
        df[i, j] += x[:, h, w].T @ dy[:, p, q]
    return df


def pool_windows(x_hw, k_hw, strides, padding, explicit):
    """Yield (p, q, [(h, w) in-bounds, row-major]) per output pixel."""
    (oh, top), (ow, left) = (ref_dim(x_hw[a], k_hw[a], strides[a], 1, padding, explicit[a])
                             for a in (0, 1))
    for p, q in itertools.product(range(oh), range(ow)):
        cells = [(p * strides[0] + i - top, q * strides[1] + j - left)
                 for i in range(k_hw[0]) for j in range(k_hw[1])]
        yield p, q, [(h, w) for h, w in cells if 0 <= h < x_hw[0] and 0 <= w < x_hw[1]]


def pool_ref(x, k_hw, strides, padding, explicit=((0, 0), (0, 0)), kind="max", grad=None,
             gradgrad=None):
    """NHWC pools in float64: forward (max/avg), or with ``grad`` the input gradient (max:
    to the first maximum of each window), or with ``gradgrad`` MaxPoolGradGrad."""
    x = x.astype(F64)
    oh, ow = (ref_dim(x.shape[1 + a], k_hw[a], strides[a], 1, padding, explicit[a])[0]
              for a in (0, 1))
    y = np.zeros((x.shape[0], oh, ow, x.shape[3]))
    dx = np.zeros(x.shape)
    for p, q, cells in pool_windows(x.shape[1:3], k_hw, strides, padding, explicit):
        values = np.stack([x[:, h, w] for h, w in cells], axis=1)  # [n, cells, c]
        if kind == "avg":
            y[:, p, q] = values.mean(axis=1)
            if grad is not None:
                for h, w in cells:
                    dx[:, h, w] += grad[:, p, q] / len(cells)
            continue
        first = np.argmax(values, axis=1)  # numpy: the first maximum
        y[:, p, q] = values.max(axis=1)
        for n, c in itertools.product(range(x.shape[0]), range(x.shape[3])):
            h, w = cells[first[n, c]]
            if grad is not None:
                dx[n, h, w, c] += grad[n, p, q, c]
            if gradgrad is not None:
                y[n, p, q, c] = gradgrad[n, h, w, c]
    return dx if grad is not None else y


# ----------------------------------------------------------------------------- conv values

CONV_CASES = [
    # (x NHWC shape, filter HWIO, strides, dilations, padding, explicit)
    ((2, 7, 6, 3), (3, 3, 3, 4), (1, 1), (1, 1), "SAME", None),
    ((2, 7, 6, 3), (3, 3, 3, 4), (2, 2), (1, 1), "SAME", None),
    ((2, 7, 6, 3), (2, 3, 3, 4), (2, 1), (1, 1), "SAME", None),
    ((2, 7, 6, 3), (3, 3, 3, 4), (1, 1), (2, 2), "SAME", None),
    ((2, 8, 8, 2), (2, 2, 2, 3), (2, 2), (2, 1), "SAME", None),
    ((2, 7, 6, 3), (3, 3, 3, 4), (1, 1), (1, 1), "VALID", None),
    ((2, 7, 6, 3), (3, 2, 3, 4), (2, 2), (1, 1), "VALID", None),
    ((2, 7, 6, 3), (2, 2, 3, 4), (1, 2), (2, 2), "VALID", None),
    ((2, 7, 6, 3), (1, 1, 3, 5), (3, 3), (1, 1), "VALID", None),
    ((2, 7, 6, 3), (3, 3, 3, 4), (1, 1), (1, 1), "EXPLICIT", ((1, 2), (2, 0))),
    ((2, 7, 6, 3), (3, 3, 3, 4), (2, 2), (1, 1), "EXPLICIT", ((0, 1), (3, 1))),
    ((2, 7, 6, 3), (2, 3, 3, 4), (1, 2), (2, 1), "EXPLICIT", ((2, 2), (1, 1))),
]


def _conv_case_attrs(fmt, strides, dilations, padding, explicit):
    attrs = {"strides": hw_attr(fmt, *strides), "dilations": hw_attr(fmt, *dilations),
             "padding": padding, "data_format": fmt}
    if explicit:
        attrs["explicit_paddings"] = explicit_attr(fmt, explicit)
    return attrs


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"{c[4]}-s{c[2]}-d{c[3]}-k{c[1][:2]}")
def test_conv2d_and_backprops_match_loop_reference(fmt, case):
    x_shape, f_shape, strides, dilations, padding, explicit_attr_pads = case
    explicit = explicit_attr_pads or ((0, 0), (0, 0))
    rng = np.random.default_rng(sum(x_shape) + 7 * sum(f_shape) + 31 * strides[0])
    x = rng.standard_normal(x_shape).astype(F32)
    f = rng.standard_normal(f_shape).astype(F32)
    expected = conv_ref(x, f, strides, dilations, padding, explicit)
    dy = rng.standard_normal(expected.shape).astype(F32)
    attrs = _conv_case_attrs(fmt, strides, dilations, padding, explicit_attr_pads)
    root = mg.Scope.NewRootScope()
    y = ops.Conv2D(root, to_fmt(x, fmt), f, **attrs)
    dx = ops.Conv2DBackpropInput(root, list(to_fmt(x, fmt).shape), f, to_fmt(dy, fmt), **attrs)
    df = ops.Conv2DBackpropFilter(root, to_fmt(x, fmt), list(f_shape), to_fmt(dy, fmt), **attrs)
    y_v, dx_v, df_v = run([y, dx, df])
    assert y.shape == y_v.shape == to_fmt(expected, fmt).shape
    assert dx.shape == to_fmt(x, fmt).shape and df.shape == f_shape
    assert y_v.dtype == dx_v.dtype == df_v.dtype == F32
    np.testing.assert_allclose(from_fmt(y_v, fmt), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        from_fmt(dx_v, fmt),
        conv_backprop_input_ref(x_shape, f, dy, strides, dilations, padding, explicit),
        rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        df_v, conv_backprop_filter_ref(x, f_shape, dy, strides, dilations, padding, explicit),
        rtol=1e-5, atol=1e-4)


def test_conv2d_backprop_input_accepts_spatial_input_sizes():
    """input_sizes may be [height, width]: batch and depth come from out_backprop/filter."""
    rng = np.random.default_rng(1)
    f = rng.standard_normal((3, 3, 2, 4)).astype(F32)
    dy = rng.standard_normal((2, 3, 3, 4)).astype(F32)
    root = mg.Scope.NewRootScope()
    dx = ops.Conv2DBackpropInput(root, [5, 5], f, dy, strides=[1, 1, 1, 1], padding="VALID")
    assert dx.shape == (2, 5, 5, 2)
    full = ops.Conv2DBackpropInput(root, [2, 5, 5, 2], f, dy, strides=[1, 1, 1, 1],
                                   padding="VALID")
    np.testing.assert_array_equal(*run([dx, full]))


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_conv2d_half_types_compute_in_float32_and_round_once(dtype):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 5, 5, 3)).astype(dtype)
    f = rng.standard_normal((3, 3, 3, 2)).astype(dtype)
    root = mg.Scope.NewRootScope()
    y = run(ops.Conv2D(root, x, f, strides=[1, 1, 1, 1], padding="SAME"))
    assert y.dtype == np.dtype(dtype)
    exact = conv_ref(x.astype(F32), f.astype(F32), padding="SAME")
    expected = exact.astype(F32).astype(dtype).astype(F64)
    ulp = np.abs(np.spacing(np.abs(expected).astype(F32).astype(dtype)).astype(F64))
    assert np.all(np.abs(y.astype(F64) - expected) <= ulp + 1e-5 * np.abs(exact).max())


def test_conv2d_int32_is_exact():
    rng = np.random.default_rng(3)
    x = rng.integers(-5, 5, (1, 4, 5, 2)).astype(np.int32)
    f = rng.integers(-3, 3, (2, 2, 2, 3)).astype(np.int32)
    y = run(ops.Conv2D(mg.Scope.NewRootScope(), x, f, strides=[1, 1, 2, 1], padding="SAME"))
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, conv_ref(x, f, (1, 2), padding="SAME").astype(np.int32))


def test_conv2d_empty_output_and_batch():
    root = mg.Scope.NewRootScope()
    f = np.ones((3, 3, 2, 4), F32)
    y = ops.Conv2D(root, np.ones((2, 2, 2, 2), F32), f, strides=[1, 1, 1, 1], padding="VALID")
    assert y.shape == (2, 0, 0, 4)
    assert run(y).shape == (2, 0, 0, 4)
    z = ops.Conv2D(root, np.ones((0, 4, 4, 2), F32), f, strides=[1, 1, 1, 1], padding="SAME")
    assert run(z).shape == (0, 4, 4, 4)


# ----------------------------------------------------------------------------- pool values

POOL_CASES = [
    # (x NHWC shape, ksize, strides, padding, explicit)
    ((2, 6, 6, 3), (2, 2), (2, 2), "VALID", None),
    ((2, 7, 5, 3), (2, 2), (2, 2), "SAME", None),
    ((2, 7, 5, 3), (3, 3), (1, 1), "SAME", None),
    ((2, 7, 5, 3), (3, 2), (2, 1), "VALID", None),
    ((2, 7, 5, 3), (3, 3), (2, 3), "SAME", None),
    ((2, 7, 5, 3), (3, 3), (2, 2), "EXPLICIT", ((1, 2), (0, 1))),
]


def _pool_attrs(fmt, ksize, strides, padding, explicit):
    attrs = {"ksize": hw_attr(fmt, *ksize), "strides": hw_attr(fmt, *strides),
             "padding": padding, "data_format": fmt}
    if explicit:
        attrs["explicit_paddings"] = explicit_attr(fmt, explicit)
    return attrs


def distinct(rng, shape):
    """Values at least 0.05 apart (no ties, so max-pool gradients are well defined)."""
    return (rng.permutation(int(np.prod(shape))).reshape(shape) * 0.05 - 1).astype(F32)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", POOL_CASES, ids=lambda c: f"{c[3]}-k{c[1]}-s{c[2]}")
def test_max_pool_values_grad_and_gradgrad(fmt, case):
    x_shape, ksize, strides, padding, explicit = case
    rng = np.random.default_rng(4)
    x = distinct(rng, x_shape)
    x[0, 0, 0, 0] = x[0, 0, 1, 0] = 9.0  # one tie: the gradient goes to the first
    pads = explicit or ((0, 0), (0, 0))
    expected = pool_ref(x, ksize, strides, padding, pads)
    g = rng.standard_normal(expected.shape).astype(F32)
    attrs = _pool_attrs(fmt, ksize, strides, padding, explicit)
    root = mg.Scope.NewRootScope()
    y = ops.MaxPool(root, to_fmt(x, fmt), **attrs)
    dx = ops.MaxPoolGrad(root, to_fmt(x, fmt), y, to_fmt(g, fmt), **attrs)
    fetches = [y, dx]
    if padding != "EXPLICIT":
        gg = rng.standard_normal(x.shape).astype(F32)
        fetches.append(ops.MaxPoolGradGrad(root, to_fmt(x, fmt), y, to_fmt(gg, fmt), **attrs))
    values = run(fetches)
    assert y.shape == values[0].shape and dx.shape == to_fmt(x, fmt).shape
    np.testing.assert_array_equal(from_fmt(values[0], fmt), expected)
    np.testing.assert_allclose(from_fmt(values[1], fmt),
                               pool_ref(x, ksize, strides, padding, pads, grad=g), rtol=1e-5,
                               atol=1e-6)
    if padding != "EXPLICIT":
        np.testing.assert_array_equal(from_fmt(values[2], fmt),
                                      pool_ref(x, ksize, strides, padding, gradgrad=gg))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", [c for c in POOL_CASES if c[3] != "EXPLICIT"],
                         ids=lambda c: f"{c[3]}-k{c[1]}-s{c[2]}")
def test_avg_pool_values_and_grad(fmt, case):
    x_shape, ksize, strides, padding, _ = case
    rng = np.random.default_rng(5)
    x = rng.standard_normal(x_shape).astype(F32)
    expected = pool_ref(x, ksize, strides, padding, kind="avg")
    g = rng.standard_normal(expected.shape).astype(F32)
    attrs = _pool_attrs(fmt, ksize, strides, padding, None)
    root = mg.Scope.NewRootScope()
    y = ops.AvgPool(root, to_fmt(x, fmt), **attrs)
    dx = ops.AvgPoolGrad(root, list(to_fmt(x, fmt).shape), to_fmt(g, fmt), **attrs)
    y_v, dx_v = run([y, dx])
    assert y.shape == y_v.shape and dx.shape == dx_v.shape
    np.testing.assert_allclose(from_fmt(y_v, fmt), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(from_fmt(dx_v, fmt),
                               pool_ref(x, ksize, strides, padding, kind="avg", grad=g),
                               rtol=1e-5, atol=1e-6)


def test_max_pool_int_and_half():
    x = np.arange(32, dtype=np.int32).reshape(1, 4, 4, 2)[:, ::-1].copy()
    root = mg.Scope.NewRootScope()
    y = run(ops.MaxPool(root, x, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="SAME"))
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, pool_ref(x, (2, 2), (2, 2), "SAME").astype(np.int32))
    h = run(ops.MaxPool(root, x.astype(np.float16), ksize=[1, 3, 3, 1], strides=[1, 1, 1, 1],
                        padding="SAME"))
    assert h.dtype == np.float16
    np.testing.assert_array_equal(h, pool_ref(x, (3, 3), (1, 1), "SAME"))


# ----------------------------------------------------------------------------- other values


@pytest.mark.parametrize("fmt,shape", [("NHWC", (2, 3, 4, 5)), ("NCHW", (2, 5, 3, 4)),
                                       ("NHWC", (3, 5)), ("NCHW", (2, 5, 3))])
def test_bias_add_and_grad(fmt, shape):
    rng = np.random.default_rng(6)
    x = rng.standard_normal(shape).astype(F32)
    axis = len(shape) - 1 if fmt == "NHWC" else 1
    b = rng.standard_normal(shape[axis]).astype(F32)
    root = mg.Scope.NewRootScope()
    y = ops.BiasAdd(root, x, b, data_format=fmt)
    gb = ops.BiasAddGrad(root, x, data_format=fmt)
    y_v, gb_v = run([y, gb])
    bshape = [1] * len(shape)
    bshape[axis] = -1
    np.testing.assert_allclose(y_v, x + b.reshape(bshape), rtol=1e-6)
    assert gb.shape == (shape[axis],)
    np.testing.assert_allclose(gb_v, x.sum(axis=tuple(a for a in range(len(shape))
                                                        if a != axis)), rtol=1e-5, atol=1e-6)


def test_relu_and_relu_grad():
    x = np.array([[-2.0, -0.0, 0.0, 0.5], [3.0, -1e-30, np.inf, -np.inf]], F32)
    g = np.array([[1, 2, 3, 4], [5, 6, 7, np.nan]], F32)
    root = mg.Scope.NewRootScope()
    y, dx = run([ops.Relu(root, x), ops.ReluGrad(root, g, x)])
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    # TF multiplies by the 0/1 mask: a NaN gradient where the mask is 0 stays NaN
    np.testing.assert_array_equal(dx, [[0, 0, 0, 4], [5, 0, 7, np.nan]])
    assert run(ops.Relu(root, np.array([-3, 4], np.int32))).tolist() == [0, 4]


RELU6_X = np.array([-np.inf, -2.0, -0.0, 0.0, 1e-30, 0.5, 5.999, 6.0, 6.5, np.inf, np.nan],
                   F32)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [F32, np.float16, ml_dtypes.bfloat16, F64, np.int32])
def test_relu6_and_relu6_grad(backend, dtype):
    """relu6 = min(max(x, 0), 6), NaN propagating; relu6_grad = g * (0 < x < 6) (float64
    formulas; a NaN/inf gradient under a 0 mask gives NaN, as TF's product does)."""
    x = RELU6_X if np.dtype(dtype).kind == "f" else np.array([-3, 0, 2, 6, 9])
    x = x.astype(dtype)
    g = np.array([1, -2, 3, np.inf, 5, -6, 7, np.nan, 9, 10, 11][:x.size], F64).astype(dtype) \
        if np.dtype(dtype).kind == "f" else np.arange(1, x.size + 1, dtype=dtype)
    root = mg.Scope.NewRootScope()
    y, dx = mg.ClientSession(root, backend=backend).Run(
        {}, [ops.Relu6(root, x), ops.Relu6Grad(root, g, x)])
    x64, g64 = x.astype(F64), g.astype(F64)
    with np.errstate(invalid="ignore"):
        y_expected = np.minimum(np.maximum(x64, 0), 6)
        dx_expected = g64 * ((x64 > 0) & (x64 < 6))
    assert y.dtype == x.dtype and dx.dtype == x.dtype
    np.testing.assert_array_equal(y.astype(F64), y_expected)
    np.testing.assert_array_equal(dx.astype(F64), dx_expected)


@pytest.mark.parametrize("ta,tb", list(itertools.product([False, True], repeat=2)))
def test_matmul_transposes(ta, tb):
    rng = np.random.default_rng(7)
    a = rng.standard_normal((4, 3) if ta else (3, 4)).astype(F32)
    b = rng.standard_normal((5, 4) if tb else (4, 5)).astype(F32)
    root = mg.Scope.NewRootScope()
    p = ops.MatMul(root, a, b, transpose_a=ta, transpose_b=tb)
    assert p.shape == (3, 5)
    np.testing.assert_allclose(run(p), (a.T if ta else a) @ (b.T if tb else b), rtol=1e-5)


def test_softmax_is_stable_and_sums_to_one():
    logits = np.array([[1000.0, 1000.0, -1000.0], [-5.0, 0.0, 5.0]], F32)
    s = run(ops.Softmax(mg.Scope.NewRootScope(), logits))
    e = np.exp(logits.astype(F64) - logits.max(-1, keepdims=True))
    np.testing.assert_allclose(s, e / e.sum(-1, keepdims=True), rtol=1e-6)
    s3 = run(ops.Softmax(mg.Scope.NewRootScope(), np.ones((2, 3, 4), F32)))
    np.testing.assert_allclose(s3, np.full((2, 3, 4), 0.25), rtol=1e-6)


@pytest.mark.parametrize("label_dtype", [np.int32, np.int64])
def test_sparse_softmax_cross_entropy_values(label_dtype):
    features = np.array([[1000.0, 0.0, -1000.0], [1.0, 2.0, 3.0], [0.0, 0.0, 0.0]], F32)
    labels = np.array([0, 2, 1], label_dtype)
    root = mg.Scope.NewRootScope()
    out = ops.SparseSoftmaxCrossEntropyWithLogits(root, features, labels)
    assert out.loss.shape == (3,) and out.backprop.shape == (3, 3)
    loss, backprop = run([out.loss, out.backprop])
    f = features.astype(F64)
    lse = f.max(1) + np.log(np.exp(f - f.max(1, keepdims=True)).sum(1))
    np.testing.assert_allclose(loss, lse - f[np.arange(3), labels], rtol=1e-6, atol=1e-6)
    onehot = np.eye(3)[labels]
    np.testing.assert_allclose(backprop, np.exp(f - lse[:, None]) - onehot, atol=1e-6)
    assert np.all(np.isfinite(loss))


@pytest.mark.parametrize("backend", BACKENDS)
def test_log_softmax_dense_xent_and_l2_loss_values(backend):
    """float64 formulas: log_softmax = x - logsumexp(x); the dense cross-entropy with labels
    broadcast ([1, classes] and [classes] rows) and extreme logits; L2Loss = sum(t^2) / 2."""
    rng = np.random.default_rng(22)
    logits = np.array([[1000.0, 0.0, -1000.0, 1.0], [1.0, 2.0, 3.0, 4.0],
                       [0.0, 0.0, 0.0, 0.0]], F32)
    labels = rng.dirichlet(np.ones(4), size=3).astype(F32)
    t = rng.standard_normal((2, 3, 4)).astype(F32)
    root = mg.Scope.NewRootScope()
    fetches = [ops.LogSoftmax(root, logits), ops.LogSoftmax(root, t), ops.L2Loss(root, t)]
    for label in (labels, labels[:1], labels[0]):
        out = ops.SoftmaxCrossEntropyWithLogits(root, logits, label)
        assert out.loss.shape == (3,) and out.backprop.shape == (3, 4)
        fetches += [out.loss, out.backprop]
    got = mg.ClientSession(root, backend=backend).Run({}, fetches)
    f = logits.astype(F64)
    log_probs = f - (f.max(1, keepdims=True)
                     + np.log(np.exp(f - f.max(1, keepdims=True)).sum(1, keepdims=True)))
    t64 = t.astype(F64)
    np.testing.assert_allclose(got[0], log_probs, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got[1], t64 - np.log(np.exp(t64).sum(-1, keepdims=True)),
                               rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got[2], (t64 ** 2).sum() / 2, rtol=1e-6)
    for i, label in enumerate((labels, labels[:1], labels[0])):
        y = np.broadcast_to(label.astype(F64), f.shape)
        np.testing.assert_allclose(got[3 + 2 * i], -(y * log_probs).sum(1), rtol=1e-5)
        np.testing.assert_allclose(got[4 + 2 * i], np.exp(log_probs) - y, atol=1e-6)


def test_dense_xent_shape_errors():
    root = mg.Scope.NewRootScope()
    with pytest.raises(InvalidArgumentError, match="logits and labels must be broadcastable: "
                                                   "logits_size=\\[3,4\\] labels_size=\\[2,4\\]"):
        ops.SoftmaxCrossEntropyWithLogits(root, np.ones((3, 4), F32), np.ones((2, 4), F32))
    with pytest.raises(InvalidArgumentError, match="either 2-dimensional, or broadcasted"):
        ops.SoftmaxCrossEntropyWithLogits(root, np.ones(4, F32), np.ones(4, F32))
    with pytest.raises(InvalidArgumentError, match="logits must have >= 1 dimension"):
        ops.LogSoftmax(root, np.float32(1))


def test_arg_max_and_equal():
    x = np.array([[1, 5, 5], [7, 2, 7]], F32)
    root = mg.Scope.NewRootScope()
    a0 = ops.ArgMax(root, x, 0)
    a1 = ops.ArgMax(root, x, -1, output_type=mg.int32)
    assert a0.dtype is mg.int64 and a1.dtype is mg.int32
    assert a0.shape == (3,) and a1.shape == (2,)
    v0, v1 = run([a0, a1])
    assert v0.tolist() == [1, 0, 1] and v1.tolist() == [1, 0]  # ties: the first
    labels = np.array([1, 0], np.int64)
    eq = ops.Equal(root, a1, ops.Cast(root, labels, DstT=mg.int32))
    assert eq.dtype is mg.bool and eq.shape == (2,)
    assert run(eq).tolist() == [True, True]
    assert run(ops.Equal(root, x, np.float32(5))).tolist() == [[False, True, True],
                                                              [False, False, False]]
    loose = ops.Equal(root, np.ones(3, F32), np.ones(4, F32), incompatible_shape_error=False)
    assert loose.shape == () and run(loose).tolist() is False


# ----------------------------------------------------------------------------- gradients


def _conv_grad_cases():
    out = []
    for fmt, padding in itertools.product(FORMATS, PADDINGS):
        for strides, dilations in (((1, 1), (1, 1)), ((2, 2), (1, 1)), ((1, 1), (2, 2))):
            out.append((fmt, padding, strides, dilations))
    return out


@pytest.mark.parametrize("fmt,padding,strides,dilations", _conv_grad_cases())
def test_conv2d_gradient(fmt, padding, strides, dilations):
    rng = np.random.default_rng(8)
    x = rng.standard_normal((1, 5, 4, 2))
    f = rng.standard_normal((2, 2, 2, 2))
    explicit = ((1, 0), (0, 1)) if padding == "EXPLICIT" else None
    attrs = _conv_case_attrs(fmt, strides, dilations, padding, explicit)
    root = mg.Scope.NewRootScope()
    xp = ph(root, "x", to_fmt(x, fmt).shape)
    fp = ph(root, "f", f.shape)
    y = ops.Conv2D(root, xp, fp, **attrs)
    assert_gradients_match([xp, fp], [to_fmt(x, fmt), f], y)


@pytest.mark.parametrize("fmt,padding,strides,dilations", [
    ("NHWC", "SAME", (2, 2), (1, 1)), ("NCHW", "VALID", (1, 1), (2, 2)),
    ("NHWC", "EXPLICIT", (1, 2), (1, 1)), ("NCHW", "SAME", (1, 1), (1, 1))])
def test_conv2d_backprop_gradients(fmt, padding, strides, dilations):
    """Second order: both backprop ops are differentiated (into convolutions again)."""
    rng = np.random.default_rng(9)
    x_shape, f_shape = (1, 5, 4, 2), (2, 2, 2, 3)
    explicit = ((0, 1), (1, 1)) if padding == "EXPLICIT" else None
    attrs = _conv_case_attrs(fmt, strides, dilations, padding, explicit)
    out_hw = conv_out_hw(x_shape[1:3], f_shape[:2], strides, dilations, padding,
                         explicit or ((0, 0), (0, 0)))
    dy_shape = to_fmt(np.zeros((1, *out_hw, 3)), fmt).shape
    x, f, dy = (rng.standard_normal(s) for s in (to_fmt(np.zeros(x_shape), fmt).shape,
                                                 f_shape, dy_shape))
    root = mg.Scope.NewRootScope()
    xp, fp, dyp = ph(root, "x", x.shape), ph(root, "f", f_shape), ph(root, "dy", dy_shape)
    dx = ops.Conv2DBackpropInput(root, list(x.shape), fp, dyp, **attrs)
    assert_gradients_match([fp, dyp], [f, dy], dx)
    df = ops.Conv2DBackpropFilter(root, xp, list(f_shape), dyp, **attrs)
    assert_gradients_match([xp, dyp], [x, dy], df)


@pytest.mark.parametrize("fmt,padding,strides,dilations", [
    ("NHWC", "SAME", (2, 2), (1, 1)), ("NCHW", "VALID", (1, 1), (2, 2)),
    ("NHWC", "EXPLICIT", (1, 2), (1, 1)), ("NCHW", "SAME", (1, 1), (1, 1)),
    ("NHWC", "VALID", (1, 1), (1, 2))])
def test_depthwise_gradients(fmt, padding, strides, dilations):
    """DepthwiseConv2dNative (multiplier 2), then both backprops (second order: into the
    family's ops again)."""
    rng = np.random.default_rng(12)
    x_shape, f_shape = (1, 5, 4, 2), (2, 2, 2, 2)
    explicit = ((1, 0), (0, 1)) if padding == "EXPLICIT" else None
    attrs = _conv_case_attrs(fmt, strides, dilations, padding, explicit)
    out_hw = conv_out_hw(x_shape[1:3], f_shape[:2], strides, dilations, padding,
                         explicit or ((0, 0), (0, 0)))
    dy_shape = to_fmt(np.zeros((1, *out_hw, 4)), fmt).shape
    x, f, dy = (rng.standard_normal(s) for s in (to_fmt(np.zeros(x_shape), fmt).shape,
                                                 f_shape, dy_shape))
    root = mg.Scope.NewRootScope()
    xp, fp, dyp = ph(root, "x", x.shape), ph(root, "f", f_shape), ph(root, "dy", dy_shape)
    assert_gradients_match([xp, fp], [x, f], ops.DepthwiseConv2dNative(root, xp, fp, **attrs))
    dx = ops.DepthwiseConv2dNativeBackpropInput(root, list(x.shape), fp, dyp, **attrs)
    assert_gradients_match([fp, dyp], [f, dy], dx)
    df = ops.DepthwiseConv2dNativeBackpropFilter(root, xp, list(f_shape), dyp, **attrs)
    assert_gradients_match([xp, dyp], [x, dy], df)


def test_conv2d_second_order_through_autodiff():
    """d/dx of sum(d/df (sum(conv(x, f)^2)) * w): gradients of both backprop ops at once."""
    rng = np.random.default_rng(10)
    root = mg.Scope.NewRootScope()
    xp, fp = ph(root, "x", (1, 4, 4, 2)), ph(root, "f", (3, 3, 2, 2))
    y = ops.Conv2D(root, xp, fp, strides=[1, 2, 2, 1], padding="SAME")
    loss = ops.Sum(root, ops.Square(root, y), [0, 1, 2, 3])
    df, = mg.AddSymbolicGradients(root, [loss], [fp])
    assert_gradients_match([xp, fp], [rng.standard_normal((1, 4, 4, 2)),
                                      rng.standard_normal((3, 3, 2, 2))], df)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", POOL_CASES, ids=lambda c: f"{c[3]}-k{c[1]}-s{c[2]}")
def test_max_pool_gradients(fmt, case):
    x_shape, ksize, strides, padding, explicit = case
    x_shape = (1, *x_shape[1:3], 2)
    rng = np.random.default_rng(11)
    x = to_fmt(distinct(rng, x_shape), fmt).astype(F64)
    attrs = _pool_attrs(fmt, ksize, strides, padding, explicit)
    root = mg.Scope.NewRootScope()
    xp = ph(root, "x", x.shape)
    y = ops.MaxPool(root, xp, **attrs)
    assert_gradients_match([xp], [x], y)
    if padding == "EXPLICIT":
        return
    g = rng.standard_normal(y.shape.dims)
    gp = ph(root, "g", g.shape)
    dx = ops.MaxPoolGrad(root, xp, y, gp, **attrs)  # linear in grad -> MaxPoolGradGrad
    assert_gradients_match([gp], [g], dx, feeds={xp: x})
    gg = rng.standard_normal(x.shape)
    ggp = ph(root, "gg", x.shape)
    ddy = ops.MaxPoolGradGrad(root, xp, y, ggp, **attrs)  # -> MaxPoolGrad
    assert_gradients_match([ggp], [gg], ddy, feeds={xp: x})


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", [c for c in POOL_CASES if c[3] != "EXPLICIT"],
                         ids=lambda c: f"{c[3]}-k{c[1]}-s{c[2]}")
def test_avg_pool_gradients(fmt, case):
    x_shape, ksize, strides, padding, _ = case
    x_shape = (1, *x_shape[1:3], 2)
    rng = np.random.default_rng(12)
    x = to_fmt(rng.standard_normal(x_shape), fmt)
    attrs = _pool_attrs(fmt, ksize, strides, padding, None)
    root = mg.Scope.NewRootScope()
    xp = ph(root, "x", x.shape)
    y = ops.AvgPool(root, xp, **attrs)
    assert_gradients_match([xp], [x], y)
    gp = ph(root, "g", y.shape)
    dx = ops.AvgPoolGrad(root, list(x.shape), gp, **attrs)
    assert_gradients_match([gp], [rng.standard_normal(y.shape.dims)], dx)


@pytest.mark.parametrize("fmt,shape", [("NHWC", (2, 3, 2, 3)), ("NCHW", (2, 3, 2, 2)),
                                       ("NHWC", (3, 4)), ("NCHW", (2, 3, 4))])
def test_bias_add_gradients(fmt, shape):
    rng = np.random.default_rng(13)
    axis = len(shape) - 1 if fmt == "NHWC" else 1
    root = mg.Scope.NewRootScope()
    xp, bp = ph(root, "x", shape), ph(root, "b", (shape[axis],))
    y = ops.BiasAdd(root, xp, bp, data_format=fmt)
    assert_gradients_match([xp, bp], [rng.standard_normal(shape),
                                      rng.standard_normal(shape[axis])], y)
    gb = ops.BiasAddGrad(root, xp, data_format=fmt)
    assert_gradients_match([xp], [rng.standard_normal(shape)], gb)


def test_relu6_gradients():
    rng = np.random.default_rng(16)
    x = rng.uniform(-2, 8, (3, 4))
    x[np.abs(x) < 0.1] += 0.3  # away from the kinks at 0 and 6
    x[np.abs(x - 6) < 0.1] += 0.3
    root = mg.Scope.NewRootScope()
    xp, gp = ph(root, "x", x.shape), ph(root, "g", x.shape)
    assert_gradients_match([xp], [x], ops.Relu6(root, xp))
    dx = ops.Relu6Grad(root, gp, xp)
    theoretical, numerical = compute_gradient([gp, xp], [rng.standard_normal(x.shape), x], dx)
    assert max_error(theoretical, numerical) < TOL


def test_relu_gradients():
    rng = np.random.default_rng(14)
    x = rng.uniform(0.1, 1, (3, 4)) * rng.choice([-1, 1], (3, 4))
    root = mg.Scope.NewRootScope()
    xp, gp = ph(root, "x", x.shape), ph(root, "g", x.shape)
    assert_gradients_match([xp], [x], ops.Relu(root, xp))
    dx = ops.ReluGrad(root, gp, xp)
    theoretical, numerical = compute_gradient([gp, xp], [rng.standard_normal(x.shape), x], dx)
    assert max_error(theoretical, numerical) < TOL


@pytest.mark.parametrize("ta,tb", list(itertools.product([False, True], repeat=2)))
def test_matmul_gradients(ta, tb):
    rng = np.random.default_rng(15)
    a_shape, b_shape = ((4, 3) if ta else (3, 4)), ((2, 4) if tb else (4, 2))
    root = mg.Scope.NewRootScope()
    ap, bp = ph(root, "a", a_shape), ph(root, "b", b_shape)
    p = ops.MatMul(root, ap, bp, transpose_a=ta, transpose_b=tb)
    assert_gradients_match([ap, bp], [rng.standard_normal(a_shape),
                                      rng.standard_normal(b_shape)], p)


def test_softmax_gradients():
    rng = np.random.default_rng(16)
    root = mg.Scope.NewRootScope()
    xp = ph(root, "x", (2, 2, 3))
    assert_gradients_match([xp], [rng.standard_normal((2, 2, 3))], ops.Softmax(root, xp))


def test_sparse_softmax_cross_entropy_gradients_first_and_second_order():
    rng = np.random.default_rng(17)
    root = mg.Scope.NewRootScope()
    fp = ph(root, "features", (3, 4))
    labels = np.array([0, 3, 1], np.int64)
    out = ops.SparseSoftmaxCrossEntropyWithLogits(root, fp, labels)
    features = rng.standard_normal((3, 4))
    assert_gradients_match([fp], [features], out.loss)
    # TF prevents this second derivative; here it goes through the softmax Jacobian.
    weights = rng.standard_normal(3)
    loss = ops.Sum(root, ops.Mul(root, out.loss, weights.astype(F32)), [0])
    grad, = mg.AddSymbolicGradients(root, [loss], [fp])
    assert grad.shape == (3, 4)
    assert_gradients_match([fp], [features], grad)


def test_log_softmax_dense_xent_and_l2_loss_gradients():
    """LogSoftmax (and its gradient again), both inputs of the dense cross-entropy (labels
    broadcast: their gradient is summed back), its second derivative, and L2Loss."""
    rng = np.random.default_rng(23)
    root = mg.Scope.NewRootScope()
    xp = ph(root, "x", (2, 2, 3))
    x = rng.standard_normal((2, 2, 3))
    log_softmax = ops.LogSoftmax(root, xp)
    assert_gradients_match([xp], [x], log_softmax)
    grad, = mg.AddSymbolicGradients(root, [ops.Square(root, log_softmax)], [xp])
    assert_gradients_match([xp], [x], grad)
    fp, lp = ph(root, "features", (3, 4)), ph(root, "labels", (1, 4))
    features, labels = rng.standard_normal((3, 4)), rng.dirichlet(np.ones(4), size=1)
    out = ops.SoftmaxCrossEntropyWithLogits(root, fp, lp)
    assert_gradients_match([fp, lp], [features, labels], out.loss)
    assert_gradients_match([fp, lp], [features, labels], out.backprop)
    weights = rng.standard_normal(3).astype(F32)
    loss = ops.Sum(root, ops.Mul(root, out.loss, weights), [0])
    grad, = mg.AddSymbolicGradients(root, [loss], [fp])
    assert_gradients_match([fp], [features], grad, feeds={lp: labels})
    tp = ph(root, "t", (2, 3))
    assert_gradients_match([tp], [rng.standard_normal((2, 3))], ops.L2Loss(root, tp))


def test_arg_max_and_equal_are_not_differentiable():
    root = mg.Scope.NewRootScope()
    xp = ph(root, "x", (2, 3))
    hits = ops.Cast(root, ops.Equal(root, ops.ArgMax(root, xp, 1), np.array([0, 1], np.int64)),
                    DstT=mg.float32)
    loss = ops.Add(root, ops.Sum(root, hits, [0]), ops.Sum(root, ops.Relu(root, xp), [0, 1]))
    grad, = mg.AddSymbolicGradients(root, [loss], [xp])
    x = np.array([[1, -2, 3], [4, 5, -6]], F32)
    np.testing.assert_array_equal(run(grad, {xp: x}), (x > 0).astype(F32))


NN_GRADIENT_TESTS = {
    "Conv2D": "test_conv2d_gradient",
    "Conv2DBackpropInput": "test_conv2d_backprop_gradients",
    "Conv2DBackpropFilter": "test_conv2d_backprop_gradients",
    **dict.fromkeys(["DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropInput",
                     "DepthwiseConv2dNativeBackpropFilter"], "test_depthwise_gradients"),
    "BiasAdd": "test_bias_add_gradients", "BiasAddGrad": "test_bias_add_gradients",
    "MaxPool": "test_max_pool_gradients", "MaxPoolGrad": "test_max_pool_gradients",
    "MaxPoolGradGrad": "test_max_pool_gradients",
    "AvgPool": "test_avg_pool_gradients", "AvgPoolGrad": "test_avg_pool_gradients",
    "MatMul": "test_matmul_gradients", "Softmax": "test_softmax_gradients",
    "SparseSoftmaxCrossEntropyWithLogits":
        "test_sparse_softmax_cross_entropy_gradients_first_and_second_order",
    **dict.fromkeys(["LogSoftmax", "SoftmaxCrossEntropyWithLogits", "L2Loss"],
                    "test_log_softmax_dense_xent_and_l2_loss_gradients"),
}


# (the activation family's gradients are checked in tests/test_gradient_checker.py)
NN_FAMILIES = ("minigraph.ops.nn_ops", "minigraph.ops.convolution_ops",
               "minigraph.ops.pooling_ops")


def test_every_nn_gradient_is_checked():
    """Every op these families define (by the module of its wrapper) with a gradient has a
    finite-difference test here (Conv3D's gradients share the convolution family's code
    but are checked in test_volumetric_ops.py)."""
    import importlib

    ours = set()
    for name in NN_FAMILIES:
        family = importlib.import_module(name)
        ours |= {getattr(family, w).op_def.name for w in family.__all__
                 if hasattr(getattr(family, w), "op_def")}
    registered = {op for op, fn in registered_gradients().items()
                  if fn is not None and op in ours}
    assert registered == set(NN_GRADIENT_TESTS), registered ^ set(NN_GRADIENT_TESTS)
    assert all(name in globals() for name in NN_GRADIENT_TESTS.values())
    assert registered_gradients()["ArgMax"] is None
    assert registered_gradients()["Equal"] is None


# ----------------------------------------------------------------------------- a small CNN


@pytest.mark.parametrize("fmt", FORMATS)
def test_digits_cnn_path_matches_reference(fmt):
    """Conv-ReLU-Conv-ReLU-MaxPool-Dense-loss (the digits model without BN), both formats:
    loss against the loop references, and first-layer filter gradient against finite
    differences of that reference."""
    rng = np.random.default_rng(18)
    images = rng.standard_normal((3, 6, 6, 1)).astype(F32)
    labels = np.array([1, 0, 2], np.int32)
    f1 = (rng.standard_normal((3, 3, 1, 3)) * 0.5).astype(F32)
    f2 = (rng.standard_normal((3, 3, 3, 4)) * 0.5).astype(F32)
    dense = (rng.standard_normal((3 * 3 * 4, 3)) * 0.3).astype(F32)  # rows in NHWC order

    def reference(f1_value):
        h = np.maximum(conv_ref(images, f1_value, padding="SAME"), 0)
        h = np.maximum(conv_ref(h, f2, padding="SAME"), 0)
        h = pool_ref(h, (2, 2), (2, 2), "VALID")
        logits = h.reshape(3, -1) @ dense
        lse = np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1)) + logits.max(1)
        return float((lse - logits[np.arange(3), labels]).mean())

    # NCHW flattens (C, H, W): permute the dense rows to match.
    rows = dense if fmt == "NHWC" else dense.reshape(3, 3, 4, 3).transpose(2, 0, 1, 3).reshape(
        -1, 3)
    root = mg.Scope.NewRootScope()
    one = hw_attr(fmt, 1, 1)
    xp = ph(root, "images", to_fmt(images, fmt).shape)
    w1 = ph(root, "f1", f1.shape)
    h = ops.Relu(root, ops.Conv2D(root, xp, w1, strides=one, padding="SAME", data_format=fmt))
    h = ops.Relu(root, ops.Conv2D(root, h, f2, strides=one, padding="SAME", data_format=fmt))
    h = ops.MaxPool(root, h, ksize=hw_attr(fmt, 2, 2), strides=hw_attr(fmt, 2, 2),
                    padding="VALID", data_format=fmt)
    logits = ops.MatMul(root, ops.Reshape(root, h, [3, -1]), rows)
    xent = ops.SparseSoftmaxCrossEntropyWithLogits(root, logits, labels)
    loss = ops.Mean(root, xent.loss, [0])
    grad, = mg.AddSymbolicGradients(root, [loss], [w1])
    loss_v, grad_v = run([loss, grad], {xp: to_fmt(images, fmt), w1: f1})
    assert abs(float(loss_v) - reference(f1)) < 1e-5
    numeric = np.zeros(f1.shape)
    for index in np.ndindex(*f1.shape):
        step = np.zeros(f1.shape)
        step[index] = 1e-3
        numeric[index] = (reference(f1 + step) - reference(f1 - step)) / 2e-3
    np.testing.assert_allclose(grad_v, numeric, atol=2e-4)


def test_docs_example_runs():
    """The first code block of docs/ops/nn.md builds the shapes its comments say."""
    path = os.path.join(os.path.dirname(__file__), "..", "docs", "ops", "nn.md")
    with open(path) as handle:
        text = handle.read()
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    names: dict = {}
    exec(compile(code, "nn.md", "exec"), names)
    assert names["y"].shape == (None, 4, 4, 32)


# ----------------------------------------------------------------------------- shapes


@pytest.mark.parametrize("fmt", FORMATS)
def test_conv2d_static_shapes(fmt):
    root = mg.Scope.NewRootScope()
    f = ph(root, "f", (3, 3, 3, 8))
    one, two = hw_attr(fmt, 1, 1), hw_attr(fmt, 2, 2)

    def nhwc(dims):  # NHWC dims in fmt order
        return tuple(dims) if fmt == "NHWC" else (dims[0], dims[3], dims[1], dims[2])

    def out(shape, **attrs):
        return ops.Conv2D(root, ph(root, "x", nhwc(shape)), f, data_format=fmt, **attrs).shape

    assert out((2, 7, 6, 3), strides=two, padding="SAME") == nhwc((2, 4, 3, 8))
    assert out((2, 7, 6, 3), strides=two, padding="VALID") == nhwc((2, 3, 2, 8))
    assert out((2, 7, 6, 3), strides=one, padding="VALID",
               dilations=hw_attr(fmt, 2, 2)) == nhwc((2, 3, 2, 8))
    assert out((2, 7, 6, 3), strides=two, padding="EXPLICIT",
               explicit_paddings=explicit_attr(fmt, ((1, 1), (0, 3)))) == nhwc((2, 4, 4, 8))
    assert out((None, 7, None, 3), strides=two, padding="SAME") == nhwc((None, 4, None, 8))
    unknown_rank = ops.Conv2D(root, ph(root, "u", None), f, strides=one, padding="SAME",
                              data_format=fmt)
    assert unknown_rank.shape == nhwc((None, None, None, 8))


def test_backprop_and_pool_static_shapes():
    root = mg.Scope.NewRootScope()
    x = ph(root, "x", (4, 9, 9, 3))
    f = ph(root, "f", (3, 3, 3, 5))
    y = ops.Conv2D(root, x, f, strides=[1, 2, 2, 1], padding="SAME")
    assert y.shape == (4, 5, 5, 5)
    dx, df = mg.AddSymbolicGradients(root, [y], [x, f])
    assert dx.shape == (4, 9, 9, 3) and df.shape == (3, 3, 3, 5)
    sizes = ph(root, "sizes", (4,), mg.int32)
    loose = ops.Conv2DBackpropInput(root, sizes, f, ph(root, "dy", (4, None, None, 5)),
                                    strides=[1, 2, 2, 1], padding="SAME")
    # the depth is a multiple of the filter's in_channels (the groups): unknown, as in TF
    assert loose.shape == (4, None, None, None)
    nchw = ops.MaxPool(root, ph(root, "p", (2, 3, 7, 7)), ksize=[1, 1, 2, 2],
                       strides=[1, 1, 2, 2], padding="SAME", data_format="NCHW")
    assert nchw.shape == (2, 3, 4, 4)
    avg = ops.AvgPool(root, ph(root, "a", (None, 7, 7, 3)), ksize=[1, 3, 3, 1],
                      strides=[1, 2, 2, 1], padding="VALID")
    assert avg.shape == (None, 3, 3, 3)
    grad = ops.AvgPoolGrad(root, [2, 7, 7, 3], ph(root, "g", (2, 3, 3, 3)), ksize=[1, 3, 3, 1],
                           strides=[1, 2, 2, 1], padding="VALID")
    assert grad.shape == (2, 7, 7, 3)
    assert ops.MatMul(root, ph(root, "m", (None, 4)), ph(root, "n", (4, 6))).shape == (None, 6)
    assert ops.BiasAdd(root, ph(root, "b", (None, 3, None)), ph(root, "bb", (None,)),
                       data_format="NCHW").shape == (None, 3, None)
    assert ops.BiasAddGrad(root, ph(root, "bg", (2, 3, 4, 5)), data_format="NCHW").shape == (3,)
    assert ops.ArgMax(root, ph(root, "am", (2, 3, 4)), 1).shape == (2, 4)
    assert ops.ArgMax(root, ph(root, "am2", (2, 3)), ph(root, "d", (), mg.int32)).shape == (
        None,)
    assert ops.Equal(root, ph(root, "e1", (2, 1)), ph(root, "e2", (3,))).shape == (2, 3)
    xent = ops.SparseSoftmaxCrossEntropyWithLogits(root, ph(root, "lg", (None, 10)),
                                                   ph(root, "lb", (8,), mg.int64))
    assert xent.loss.shape == (8,) and xent.backprop.shape == (8, 10)


# ----------------------------------------------------------------------------- errors


def raises(fragment):
    return pytest.raises(InvalidArgumentError, match=fragment)


def test_conv2d_construction_errors():
    root = mg.Scope.NewRootScope()
    x = ph(root, "x", (2, 8, 8, 3))
    f = ph(root, "f", (3, 3, 3, 4))
    with raises(r"Conv2D 'Conv2D': Depth of input \(4\) is not a multiple of input depth of "
                r"filter \(3\): input 'input' has 4 channels .* in_channels 3"):
        ops.Conv2D(root, ph(root, "x4", (2, 8, 8, 4)), f, strides=[1, 1, 1, 1], padding="SAME")
    with raises(r"Conv2D 'Conv2D_1': Depth of output \(4\) is not a multiple of the number of "
                r"groups \(3\): input 'filter' has out_channels 4 .* input 'input''s 3 channels "
                r"make 3 groups"):
        ops.Conv2D(root, x, ph(root, "f1", (3, 3, 1, 4)), strides=[1, 1, 1, 1], padding="SAME")
    with raises(r"has 8 channels \(shape \[2,8,8,3\], data_format NCHW\)"):
        ops.Conv2D(root, x, f, strides=[1, 1, 1, 1], padding="SAME", data_format="NCHW")
    with raises(r"attr 'strides' must specify 4 dimensions, got 2"):
        ops.Conv2D(root, x, f, strides=[1, 1], padding="SAME")
    with raises(r"strides in the batch and depth dimensions must be 1"):
        ops.Conv2D(root, x, f, strides=[2, 1, 1, 1], padding="SAME")
    with raises(r"attr 'dilations' must specify 4 dimensions"):
        ops.Conv2D(root, x, f, strides=[1, 1, 1, 1], padding="SAME", dilations=[1, 2, 2])
    with raises(r"attr 'strides' must be >= 1"):
        ops.Conv2D(root, x, f, strides=[1, 0, 1, 1], padding="SAME")
    with raises(r"attr 'padding' is 'FULL', which is not in the allowed values"):
        ops.Conv2D(root, x, f, strides=[1, 1, 1, 1], padding="FULL")
    with raises(r"attr 'explicit_paddings' must contain 8 values .* got 4"):
        ops.Conv2D(root, x, f, strides=[1, 1, 1, 1], padding="EXPLICIT",
                   explicit_paddings=[1, 1, 1, 1])
    with raises(r"explicit_paddings' must be empty unless padding is EXPLICIT"):
        ops.Conv2D(root, x, f, strides=[1, 1, 1, 1], padding="SAME",
                   explicit_paddings=[0, 0, 1, 1, 1, 1, 0, 0])
    with raises(r"padding the batch or depth dimension is not supported"):
        ops.Conv2D(root, x, f, strides=[1, 1, 1, 1], padding="EXPLICIT",
                   explicit_paddings=[1, 0, 0, 0, 0, 0, 0, 0])
    with raises(r"must be non-negative"):
        ops.Conv2D(root, x, f, strides=[1, 1, 1, 1], padding="EXPLICIT",
                   explicit_paddings=[0, 0, -1, 0, 0, 0, 0, 0])
    with raises(r"Computed output size would be negative: -1 \[input_size: 1, "
                r"effective_filter_size: 3, stride: 1\] \(the height of input 'input'\)"):
        ops.Conv2D(root, ph(root, "small", (1, 1, 8, 3)), f, strides=[1, 1, 1, 1],
                   padding="VALID")
    with raises(r"input 'filter' must be rank 4"):
        ops.Conv2D(root, x, ph(root, "f3", (3, 3, 3)), strides=[1, 1, 1, 1], padding="SAME")
    with raises(r"must not have zero elements"):
        ops.Conv2D(root, x, ph(root, "f0", (0, 3, 3, 4)), strides=[1, 1, 1, 1], padding="SAME")
    with raises(r"input 'input' has dtype int64, not in the allowed values"):
        ops.Conv2D(root, np.ones((1, 3, 3, 3), np.int64), np.ones((1, 1, 3, 1), np.int64),
                   strides=[1, 1, 1, 1], padding="SAME")


def test_conv2d_backprop_construction_errors():
    root = mg.Scope.NewRootScope()
    f = ph(root, "f", (3, 3, 3, 4))
    with raises(r"Conv2DBackpropInput .*input 'out_backprop' has height 4 .* must equal the "
                r"height the forward convolution gives \(stride 2.*\): 5"):
        ops.Conv2DBackpropInput(root, [2, 9, 9, 3], f, ph(root, "dy", (2, 4, 5, 4)),
                                strides=[1, 2, 2, 1], padding="SAME")
    with raises(r"input 'out_backprop' has depth 5 .* out_channels"):
        ops.Conv2DBackpropInput(root, [2, 9, 9, 3], f, ph(root, "dy2", (2, 5, 5, 5)),
                                strides=[1, 2, 2, 1], padding="SAME")
    with raises(r"input 'input_sizes' must have 4 or 2 elements, got 3"):
        ops.Conv2DBackpropInput(root, [2, 9, 9], f, ph(root, "dy3", (2, 5, 5, 4)),
                                strides=[1, 2, 2, 1], padding="SAME")
    with raises(r"Conv2DBackpropFilter .*input 'out_backprop' has batch 3"):
        ops.Conv2DBackpropFilter(root, ph(root, "x", (2, 9, 9, 3)), [3, 3, 3, 4],
                                 ph(root, "dy4", (3, 9, 9, 4)), strides=[1, 1, 1, 1],
                                 padding="SAME")


def test_pool_and_other_construction_errors():
    root = mg.Scope.NewRootScope()
    x = ph(root, "x", (2, 8, 8, 3))
    with raises(r"MaxPool 'MaxPool': attr 'ksize' must specify 4 dimensions, got 2"):
        ops.MaxPool(root, x, ksize=[2, 2], strides=[1, 2, 2, 1], padding="VALID")
    with raises(r"batch and depth window sizes must be 1"):
        ops.MaxPool(root, x, ksize=[1, 2, 2, 2], strides=[1, 2, 2, 1], padding="VALID")
    with raises(r"top padding 2 must be smaller than the window size 2"):
        ops.MaxPool(root, x, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="EXPLICIT",
                    explicit_paddings=[0, 0, 2, 0, 0, 0, 0, 0])
    with raises(r"attr 'padding' is 'EXPLICIT', which is not in the allowed values"):
        ops.AvgPool(root, x, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="EXPLICIT")
    with raises(r"input 'grad' must have shape \[2,4,4,3\]"):
        ops.MaxPoolGrad(root, x, ph(root, "y", (2, 4, 4, 3)), ph(root, "g", (2, 4, 5, 3)),
                        ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="VALID")
    with raises(r"MatMul 'MatMul': Matrix size-incompatible: In\[0\]: \[2,3\], In\[1\]: "
                r"\[4,5\]: .*'a' gives 3 and 'b' gives 4"):
        ops.MatMul(root, ph(root, "a", (2, 3)), ph(root, "b", (4, 5)))
    with raises(r"input 'a' must be rank 2"):
        ops.MatMul(root, ph(root, "a3", (2, 3, 1)), ph(root, "b3", (3, 5)))
    with raises(r"BiasAdd 'BiasAdd': input 'bias' must have one element per channel of "
                r"'value' \(dimension 3 for data_format NHWC\): expected 3, got 4"):
        ops.BiasAdd(root, x, np.zeros(4, F32))
    with raises(r"input 'value' must be at least rank 3 for data_format NCHW"):
        ops.BiasAdd(root, ph(root, "v2", (2, 3)), np.zeros(3, F32), data_format="NCHW")
    with raises(r"same first \(batch\) dimension"):
        ops.SparseSoftmaxCrossEntropyWithLogits(root, ph(root, "lg", (4, 10)),
                                                ph(root, "lb", (5,), mg.int32))
    with raises(r"input 'labels' must be rank 1"):
        ops.SparseSoftmaxCrossEntropyWithLogits(root, ph(root, "lg2", (4, 10)),
                                                ph(root, "lb2", (4, 1), mg.int32))
    with raises(r"input 'dimension' is 2, out of range for an input of rank 2"):
        ops.ArgMax(root, ph(root, "am", (2, 3)), 2)
    with raises(r"Incompatible shapes: \(2,\) vs. \(3,\): inputs 'x' and 'y'"):
        ops.Equal(root, ph(root, "e1", (2,)), ph(root, "e2", (3,)))
    with raises(r"input 'logits' must have at least one dimension"):
        ops.Softmax(root, np.float32(1.0))


def test_run_time_errors():
    root = mg.Scope.NewRootScope()
    x = ph(root, "x", None)
    f = ph(root, "f", None)
    y = ops.Conv2D(root, x, f, strides=[1, 1, 1, 1], padding="SAME")
    with raises(r"Conv2D 'Conv2D': Depth of input \(2\) is not a multiple of input depth of "
                r"filter \(3\): input 'input' has 2 channels \(shape \[1,4,4,2\]"):
        run(y, {x: np.ones((1, 4, 4, 2), F32), f: np.ones((3, 3, 3, 1), F32)})
    with raises(r"Conv2D 'Conv2D': Shape must be rank 4 but is rank 3: input 'input' must be "
                r"rank 4 \(data_format NHWC\), but has shape \(4, 4, 2\)"):
        run(y, {x: np.ones((4, 4, 2), F32), f: np.ones((3, 3, 2, 1), F32)})
    dy = ph(root, "dy", None)
    dx = ops.Conv2DBackpropInput(root, [1, 4, 4, 2], f, dy, strides=[1, 1, 1, 1],
                                 padding="VALID")
    with raises(r"input 'out_backprop' has height 4 .* must equal the height the forward "
                r"convolution gives .*: 2"):
        run(dx, {f: np.ones((3, 3, 2, 1), F32), dy: np.ones((1, 4, 4, 1), F32)})
    logits, labels = ph(root, "logits", (2, 3)), ph(root, "labels", (2,), mg.int64)
    xent = ops.SparseSoftmaxCrossEntropyWithLogits(root, logits, labels)
    with raises(r"Received a label value of 3 which is outside the valid range of \[0, 3\)\. "
                r"Label values: 0 3"):
        run(xent.loss, {logits: np.zeros((2, 3), F32), labels: np.array([0, 3])})
    with raises(r"Received a label value of -1"):
        run(xent.loss, {logits: np.zeros((2, 3), F32), labels: np.array([-1, 0])})
    a, b = ph(root, "a", None), ph(root, "b", None)
    with raises(r"MatMul 'MatMul': Matrix size-incompatible: In\[0\]: \[2,3\], In\[1\]: "
                r"\[2,3\]"):
        run(ops.MatMul(root, a, b), {a: np.ones((2, 3), F32), b: np.ones((2, 3), F32)})
    v, bias = ph(root, "v", None), ph(root, "bias", None)
    with raises(r"input 'bias' must have one element per channel of 'value' \(dimension 3 for "
                r"data_format NHWC\): expected 3, got 2"):
        run(ops.BiasAdd(root, v, bias), {v: np.ones((1, 2, 2, 3), F32),
                                         bias: np.ones(2, F32)})
    am = ph(root, "am", None)
    with raises(r"reduction axis 1 is empty in shape \(2, 0\)"):
        run(ops.ArgMax(root, am, 1), {am: np.ones((2, 0), F32)})
    p = ph(root, "p", None)
    with raises(r"MaxPool 'MaxPool': Shape must be rank 4 but is rank 2: input 'input'"):
        run(ops.MaxPool(root, p, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="VALID"),
            {p: np.ones((2, 2), F32)})


# ----------------------------------------------------------------------------- TensorFlow


@pytest.fixture(scope="module")
def tf():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return pytest.importorskip("tensorflow")


@pytest.mark.oracle
@pytest.mark.parametrize("backend", BACKENDS)
def test_activations_against_tensorflow(tf, backend):
    """Relu, ReluGrad, Relu6, Relu6Grad bit for bit (NaN where TF has NaN), special values
    included: TF's gradients multiply by the mask, so inf/NaN gradients under 0 give NaN."""
    x = np.concatenate([RELU6_X, -RELU6_X, [3.0, -3.0]]).astype(F32)
    g = np.resize(np.array([1, -2, np.inf, -np.inf, np.nan, 0.5, -0.0], F32), x.shape)
    root = mg.Scope.NewRootScope()
    ours = mg.ClientSession(root, backend=backend).Run({}, [
        ops.Relu(root, x), ops.ReluGrad(root, g, x), ops.Relu6(root, x),
        ops.Relu6Grad(root, g, x)])
    theirs = [tf.raw_ops.Relu(features=x), tf.raw_ops.ReluGrad(gradients=g, features=x),
              tf.raw_ops.Relu6(features=x), tf.raw_ops.Relu6Grad(gradients=g, features=x)]
    for name, a, b in zip(("Relu", "ReluGrad", "Relu6", "Relu6Grad"), ours, theirs):
        b = b.numpy()
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b), err_msg=name)
        finite = ~np.isnan(b)
        np.testing.assert_array_equal(a[finite].view(np.uint32), b[finite].view(np.uint32),
                                      err_msg=name)


@pytest.mark.oracle
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"{c[4]}-s{c[2]}-d{c[3]}")
def test_conv2d_against_tensorflow(tf, fmt, case):
    """TF's CPU kernels run NHWC (and reject dilation > 1 in the backprops)."""
    x_shape, f_shape, strides, dilations, padding, explicit = case
    rng = np.random.default_rng(19)
    x = rng.standard_normal(x_shape).astype(F32)
    f = rng.standard_normal(f_shape).astype(F32)
    tf_attrs = {"strides": [1, *strides, 1], "dilations": [1, *dilations, 1],
                "padding": padding, "explicit_paddings":
                    explicit_attr("NHWC", explicit) if explicit else []}
    expected = tf.raw_ops.Conv2D(input=x, filter=f, **tf_attrs).numpy()
    dy = rng.standard_normal(expected.shape).astype(F32)
    attrs = _conv_case_attrs(fmt, strides, dilations, padding, explicit)
    root = mg.Scope.NewRootScope()
    fetches = [ops.Conv2D(root, to_fmt(x, fmt), f, **attrs),
               ops.Conv2DBackpropInput(root, list(to_fmt(x, fmt).shape), f, to_fmt(dy, fmt),
                                       **attrs),
               ops.Conv2DBackpropFilter(root, to_fmt(x, fmt), list(f_shape), to_fmt(dy, fmt),
                                        **attrs)]
    y, dx, df = run(fetches)
    np.testing.assert_allclose(from_fmt(y, fmt), expected, rtol=1e-4, atol=1e-4)
    if dilations != (1, 1):
        return
    tf_dx = tf.raw_ops.Conv2DBackpropInput(input_sizes=x_shape, filter=f, out_backprop=dy,
                                           **tf_attrs).numpy()
    tf_df = tf.raw_ops.Conv2DBackpropFilter(input=x, filter_sizes=f_shape, out_backprop=dy,
                                            **tf_attrs).numpy()
    np.testing.assert_allclose(from_fmt(dx, fmt), tf_dx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(df, tf_df, rtol=1e-4, atol=1e-4)


@pytest.mark.oracle
@pytest.mark.parametrize("case", POOL_CASES, ids=lambda c: f"{c[3]}-k{c[1]}-s{c[2]}")
def test_pools_against_tensorflow(tf, case):
    x_shape, ksize, strides, padding, explicit = case
    rng = np.random.default_rng(20)
    x = rng.standard_normal(x_shape).astype(F32)
    x[0, :2, :2, 0] = 1.5  # ties: TF also routes MaxPoolGrad to the first maximum
    tf_attrs = {"ksize": [1, *ksize, 1], "strides": [1, *strides, 1], "padding": padding}
    attrs = _pool_attrs("NHWC", ksize, strides, padding, explicit)
    max_attrs = dict(tf_attrs, explicit_paddings=attrs.get("explicit_paddings", []))
    y_tf = tf.raw_ops.MaxPool(input=x, **max_attrs).numpy()
    g = rng.standard_normal(y_tf.shape).astype(F32)
    root = mg.Scope.NewRootScope()
    y = ops.MaxPool(root, x, **attrs)
    fetches = [y, ops.MaxPoolGrad(root, x, y, g, **attrs)]
    expected = [y_tf, tf.raw_ops.MaxPoolGrad(orig_input=x, orig_output=y_tf, grad=g,
                                             **max_attrs).numpy()]
    if padding != "EXPLICIT":
        gg = rng.standard_normal(x.shape).astype(F32)
        g2 = rng.standard_normal(y_tf.shape).astype(F32)
        fetches += [ops.MaxPoolGradGrad(root, x, y, gg, **attrs), ops.AvgPool(root, x, **attrs),
                    ops.AvgPoolGrad(root, list(x_shape), g2, **attrs)]
        expected += [tf.raw_ops.MaxPoolGradGrad(orig_input=x, orig_output=y_tf, grad=gg,
                                                **tf_attrs).numpy(),
                     tf.raw_ops.AvgPool(value=x, **tf_attrs).numpy(),
                     tf.raw_ops.AvgPoolGrad(orig_input_shape=x_shape, grad=g2,
                                            **tf_attrs).numpy()]
    for actual, want in zip(run(fetches), expected):
        np.testing.assert_allclose(actual, want, rtol=1e-5, atol=1e-6)


@pytest.mark.oracle
def test_dense_softmax_loss_bias_argmax_against_tensorflow(tf):
    rng = np.random.default_rng(21)
    a = rng.standard_normal((4, 3)).astype(F32)
    b = rng.standard_normal((5, 3)).astype(F32)
    logits = (rng.standard_normal((4, 5)) * 10).astype(F32)
    labels = np.array([4, 0, 2, 2], np.int64)
    x = rng.standard_normal((2, 3, 4, 5)).astype(F32)
    bias = rng.standard_normal(3).astype(F32)
    root = mg.Scope.NewRootScope()
    xent = ops.SparseSoftmaxCrossEntropyWithLogits(root, logits, labels)
    ours = run([ops.MatMul(root, a, b, transpose_b=True), ops.Softmax(root, logits),
                xent.loss, xent.backprop, ops.BiasAdd(root, x, bias, data_format="NCHW"),
                ops.BiasAddGrad(root, x, data_format="NCHW"), ops.ArgMax(root, logits, 1),
                ops.Relu(root, x), ops.ReluGrad(root, x, x - 0.5)])
    tf_loss, tf_backprop = tf.raw_ops.SparseSoftmaxCrossEntropyWithLogits(features=logits,
                                                                          labels=labels)
    theirs = [tf.raw_ops.MatMul(a=a, b=b, transpose_b=True), tf.raw_ops.Softmax(logits=logits),
              tf_loss, tf_backprop, tf.raw_ops.BiasAdd(value=x, bias=bias, data_format="NCHW"),
              tf.raw_ops.BiasAddGrad(out_backprop=x, data_format="NCHW"),
              tf.raw_ops.ArgMax(input=logits, dimension=1), tf.raw_ops.Relu(features=x),
              tf.raw_ops.ReluGrad(gradients=x, features=x - 0.5)]
    for mine, want in zip(ours, theirs):
        want = want.numpy()
        assert mine.dtype == want.dtype and mine.shape == want.shape
        np.testing.assert_allclose(mine, want, rtol=2e-5, atol=1e-5)


@pytest.mark.oracle
@pytest.mark.parametrize("backend", BACKENDS)
def test_log_softmax_dense_xent_l2_loss_against_tensorflow(tf, backend):
    rng = np.random.default_rng(24)
    logits = (rng.standard_normal((4, 5)) * 10).astype(F32)
    labels = rng.dirichlet(np.ones(5), size=4).astype(F32)
    root = mg.Scope.NewRootScope()
    ours = mg.ClientSession(root, backend=backend).Run({}, [
        ops.LogSoftmax(root, logits), ops.L2Loss(root, logits),
        *ops.SoftmaxCrossEntropyWithLogits(root, logits, labels),
        *ops.SoftmaxCrossEntropyWithLogits(root, logits, labels[:1])])
    theirs = [tf.raw_ops.LogSoftmax(logits=logits), tf.raw_ops.L2Loss(t=logits),
              *tf.raw_ops.SoftmaxCrossEntropyWithLogits(features=logits, labels=labels),
              *tf.raw_ops.SoftmaxCrossEntropyWithLogits(features=logits, labels=labels[:1])]
    for mine, want in zip(ours, theirs):
        want = want.numpy()
        assert mine.dtype == want.dtype and mine.shape == want.shape
        np.testing.assert_allclose(mine, want, rtol=2e-6, atol=2e-6)
