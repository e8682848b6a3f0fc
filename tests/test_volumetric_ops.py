"""The volumetric ops (``minigraph.ops.volumetric_ops``): Conv3D, Conv3DBackpropInputV2,
Conv3DBackpropFilterV2, MaxPool3D, MaxPool3DGrad, MaxPool3DGradGrad, AvgPool3D and
AvgPool3DGrad.

* Values against independent float64 loops over every output and window offset (below,
  written from TF's definitions): SAME/VALID, strides, dilations, NDHWC/NCDHW, every dtype
  (float16/bfloat16: computed in float32, rounded once). MaxPool3D is bit-exact;
  MaxPool3DGrad follows TF's CPU rule (every element within 1e-5 of the window's maximum,
  added in TF's order in T) and MaxPool3DGradGrad TF's first exact match, bit for bit.
* Shapes (known and unknown dims) and the errors, in TF's words naming op and input.
* Every registered gradient against finite differences
  (``test_every_volumetric_gradient_is_checked`` fails when one is not covered).
* ``oracle`` tests compare with ``tf.raw_ops`` when TensorFlow imports: the convolutions to
  float32 rounding (|ours - TF| <= 1e-5 * (|TF| + 1): BLAS and TF sum in different orders),
  the pools bit for bit, ties included.
"""

from __future__ import annotations

import itertools
import os

import ml_dtypes
import numpy as np
import pytest
from conftest import BACKENDS, assert_close, assert_identical

import minigraph as mg
from minigraph import ops
from minigraph.framework.gradient_registry import registered_gradients
from minigraph.testing.gradient_checker import compute_gradient, max_error

InvalidArgumentError = mg.errors.InvalidArgumentError
F32, F64 = np.float32, np.float64
BF16 = np.dtype(ml_dtypes.bfloat16)
FORMATS = ("NDHWC", "NCDHW")
TOL = 1e-6

# ----------------------------------------------------------------------------- helpers


def ph(scope, name, shape, dtype=mg.float32):
    return ops.Placeholder(scope.WithOpName(name), dtype, shape=shape)


def run(fetches, feeds=None, root=None, backend="reference"):
    graph = root or (fetches[0] if isinstance(fetches, list) else fetches).graph
    return mg.ClientSession(graph, backend=backend).Run(feeds or {}, fetches)


def to_fmt(a: np.ndarray, fmt: str) -> np.ndarray:
    """An NDHWC array in ``fmt``."""
    return a if fmt == "NDHWC" else np.ascontiguousarray(a.transpose(0, 4, 1, 2, 3))


def from_fmt(a: np.ndarray, fmt: str) -> np.ndarray:
    return a if fmt == "NDHWC" else np.ascontiguousarray(a.transpose(0, 2, 3, 4, 1))


def attr5(fmt: str, dhw) -> list[int]:
    """A strides/ksize/dilations attr in ``fmt`` order with batch and channel 1."""
    return [1, *dhw, 1] if fmt == "NDHWC" else [1, 1, *dhw]


def assert_gradients_match(xs, values, y, feeds=None):
    theoretical, numerical = compute_gradient(xs, values, y, feeds=feeds)
    error = max_error(theoretical, numerical)
    worst = max(float(np.abs(n).max()) for n in numerical)
    assert error < TOL, f"max |symbolic - numerical| = {error:.3g}"
    assert worst > 1e-3, f"numerical Jacobian is ~0 (max {worst:.3g}): vacuous check"


def distinct(rng, shape) -> np.ndarray:
    """Values at least 0.1 apart (no ties, no near ties within 1e-5), in random order."""
    return (rng.permutation(int(np.prod(shape))) * 0.1 - 1.0).reshape(shape)


# ----------------------------------------------------------------------------- references
# NDHWC, from TF's definitions, independently of minigraph's kernels: loops over every
# output position and window offset.


def ref_dim(size, k, stride, dilation, padding):
    """(output size, pad before) of one spatial dim."""
    k_eff = (k - 1) * dilation + 1
    if padding == "VALID":
        return max(0, (size - k_eff) // stride + 1), 0
    out = -(-size // stride)
    return out, max(0, (out - 1) * stride + k_eff - size) // 2


def taps(in_dhw, k_dhw, strides, dilations, padding, order=(0, 1, 2)):
    """Yield (output position, window offset, input position), in-bounds reads only; the
    outputs are visited with the spatial dims ``order`` from outermost to innermost."""
    geo = [ref_dim(in_dhw[a], k_dhw[a], strides[a], dilations[a], padding) for a in range(3)]
    ranges = [range(geo[a][0]) for a in order]
    for picked in itertools.product(*ranges):
        out = [0, 0, 0]
        for a, p in zip(order, picked):
            out[a] = p
        for offset in itertools.product(*(range(k) for k in k_dhw)):
            pos = tuple(out[a] * strides[a] + offset[a] * dilations[a] - geo[a][1]
                        for a in range(3))
            if all(0 <= pos[a] < in_dhw[a] for a in range(3)):
                yield tuple(out), offset, pos


def out_dhw(in_dhw, k_dhw, strides, dilations, padding):
    return tuple(ref_dim(in_dhw[a], k_dhw[a], strides[a], dilations[a], padding)[0]
                 for a in range(3))


def conv_ref(x, f, strides, dilations, padding):
    x, f = x.astype(F64), f.astype(F64)
    y = np.zeros((x.shape[0], *out_dhw(x.shape[1:4], f.shape[:3], strides, dilations,
                                       padding), f.shape[4]))
    for out, offset, pos in taps(x.shape[1:4], f.shape[:3], strides, dilations, padding):
        y[(slice(None), *out)] += x[(slice(None), *pos)] @ f[offset]
    return y


def conv_backprop_input_ref(x_shape, f, dy, strides, dilations, padding):
    f, dy = f.astype(F64), dy.astype(F64)
    dx = np.zeros(x_shape)
    for out, offset, pos in taps(x_shape[1:4], f.shape[:3], strides, dilations, padding):
        dx[(slice(None), *pos)] += dy[(slice(None), *out)] @ f[offset].T
    return dx


def conv_backprop_filter_ref(x, f_shape, dy, strides, dilations, padding):
    x, dy = x.astype(F64), dy.astype(F64)
    df = np.zeros(f_shape)
    for out, offset, pos in taps(x.shape[1:4], f_shape[:3], strides, dilations, padding):
        df[offset] += x[(slice(None), *pos)].T @ dy[(slice(None), *out)]
    return df


def windows(in_dhw, ksize, strides, padding, order=(0, 1, 2)):
    """{output position: [input positions of its window, row-major]}, outputs in the
    visiting ``order`` (dict order)."""
    found: dict = {}
    for out, _, pos in taps(in_dhw, ksize, strides, (1, 1, 1), padding, order):
        found.setdefault(out, []).append(pos)
    return found


def max_pool_ref(x, ksize, strides, padding):
    y = np.zeros((x.shape[0], *out_dhw(x.shape[1:4], ksize, strides, (1, 1, 1), padding),
                  x.shape[4]), x.dtype)
    for out, positions in windows(x.shape[1:4], ksize, strides, padding).items():
        y[(slice(None), *out)] = np.max([x[(slice(None), *p)] for p in positions], axis=0)
    return y


def max_pool_grad_ref(x, y, g, ksize, strides, padding):
    """TF's CPU MaxPool3DGrad, literally: outputs by width, then height, then planes index
    (outermost first); each adds its grad, in g's type, to every element of its window
    within 1e-5 (in x's type) of its maximum."""
    dx = np.zeros(x.shape, g.dtype)
    tolerance = np.asarray(1e-5, x.dtype)
    for out, positions in windows(x.shape[1:4], ksize, strides, padding, (2, 1, 0)).items():
        for p in positions:
            tie = np.abs(x[(slice(None), *p)] - y[(slice(None), *out)]) < tolerance
            dx[(slice(None), *p)] += np.where(tie, g[(slice(None), *out)], 0).astype(g.dtype)
    return dx


def max_pool_grad_grad_ref(x, y, g, ksize, strides, padding):
    """grad at each window's first element (row-major) equal to its maximum, else 0."""
    out_g = np.zeros(y.shape, g.dtype)
    for out, positions in windows(x.shape[1:4], ksize, strides, padding).items():
        for n, c in itertools.product(range(x.shape[0]), range(x.shape[4])):
            hit = [p for p in positions if x[(n, *p, c)] == y[(n, *out, c)]]
            if hit:
                out_g[(n, *out, c)] = g[(n, *hit[0], c)]
    return out_g


def avg_pool_ref(x, ksize, strides, padding):
    """The mean of each window's in-bounds elements, float64."""
    y = np.zeros((x.shape[0], *out_dhw(x.shape[1:4], ksize, strides, (1, 1, 1), padding),
                  x.shape[4]))
    for out, positions in windows(x.shape[1:4], ksize, strides, padding).items():
        y[(slice(None), *out)] = np.mean([x[(slice(None), *p)].astype(F64) for p in positions],
                                         axis=0)
    return y


def avg_pool_grad_ref(x_shape, g, ksize, strides, padding):
    """Each output's grad over its window's count, added to the window's elements."""
    dx = np.zeros(x_shape)
    for out, positions in windows(x_shape[1:4], ksize, strides, padding).items():
        for p in positions:
            dx[(slice(None), *p)] += g[(slice(None), *out)].astype(F64) / len(positions)
    return dx


# ----------------------------------------------------------------------------- values

CONV_CASES = [  # (x NDHWC, filter DHWIO, strides, dilations, padding)
    ((2, 4, 5, 3, 2), (2, 3, 2, 2, 3), (1, 1, 1), (1, 1, 1), "SAME"),
    ((1, 5, 4, 6, 3), (3, 2, 3, 3, 2), (2, 1, 2), (1, 1, 1), "SAME"),
    ((2, 5, 6, 4, 2), (2, 2, 3, 2, 2), (1, 2, 1), (1, 1, 1), "VALID"),
    ((1, 6, 5, 5, 1), (2, 2, 2, 1, 2), (2, 2, 1), (2, 1, 2), "SAME"),
    ((1, 7, 5, 6, 2), (3, 2, 2, 2, 1), (1, 1, 2), (2, 2, 1), "VALID"),
    ((1, 2, 3, 2, 2), (3, 4, 3, 2, 2), (3, 1, 2), (1, 1, 1), "SAME"),  # window > input
]
CONV_IDS = [f"{c[4]}-s{''.join(map(str, c[2]))}-d{''.join(map(str, c[3]))}"
            for c in CONV_CASES]


def _conv_attrs(fmt, strides, dilations, padding):
    return {"strides": attr5(fmt, strides), "dilations": attr5(fmt, dilations),
            "padding": padding, "data_format": fmt}


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", CONV_CASES, ids=CONV_IDS)
def test_conv3d_and_backprops_match_the_loops(fmt, case, backend):
    x_shape, f_shape, strides, dilations, padding = case
    rng = np.random.default_rng(1)
    x = rng.standard_normal(x_shape).astype(F32)
    f = rng.standard_normal(f_shape).astype(F32)
    expected = conv_ref(x, f, strides, dilations, padding)
    dy = rng.standard_normal(expected.shape).astype(F32)
    attrs = _conv_attrs(fmt, strides, dilations, padding)
    root = mg.Scope.NewRootScope()
    xf, dyf = to_fmt(x, fmt), to_fmt(dy, fmt)
    y = ops.Conv3D(root, xf, f, **attrs)
    dx = ops.Conv3DBackpropInputV2(root, list(xf.shape), f, dyf, **attrs)
    df = ops.Conv3DBackpropFilterV2(root, xf, list(f_shape), dyf, **attrs)
    assert y.shape == dyf.shape and dx.shape == xf.shape and df.shape == f_shape
    got = run([y, dx, df], root=root, backend=backend)
    assert_close(from_fmt(got[0], fmt), expected, what="Conv3D")
    assert_close(from_fmt(got[1], fmt),
                 conv_backprop_input_ref(x_shape, f, dy, strides, dilations, padding),
                 what="Conv3DBackpropInputV2")
    assert_close(got[2], conv_backprop_filter_ref(x, f_shape, dy, strides, dilations, padding),
                 what="Conv3DBackpropFilterV2")


@pytest.mark.parametrize("dtype", [np.float16, BF16, F64], ids=str)
def test_conv3d_dtypes_compute_in_float32_and_round_once(dtype):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 4, 3, 5, 3)).astype(dtype)
    f = rng.standard_normal((2, 2, 3, 3, 2)).astype(dtype)
    args = ((2, 1, 1), (1, 1, 1), "SAME")
    expected = conv_ref(x, f, *args)
    dy = rng.standard_normal(expected.shape).astype(dtype)
    attrs = _conv_attrs("NDHWC", *args)
    root = mg.Scope.NewRootScope()
    got = run([ops.Conv3D(root, x, f, **attrs),
               ops.Conv3DBackpropInputV2(root, np.array(x.shape, np.int64), f, dy, **attrs),
               ops.Conv3DBackpropFilterV2(root, x, list(f.shape), dy, **attrs)], root=root)
    assert_close(got[0], expected, dtype=dtype, what="Conv3D")
    assert_close(got[1], conv_backprop_input_ref(x.shape, f, dy, *args), dtype=dtype,
                 what="Conv3DBackpropInputV2")
    assert_close(got[2], conv_backprop_filter_ref(x, f.shape, dy, *args), dtype=dtype,
                 what="Conv3DBackpropFilterV2")


def test_empty_batches_give_empty_outputs_and_a_zero_filter_gradient():
    root = mg.Scope.NewRootScope()
    x, f = np.ones((0, 3, 3, 3, 3), F32), np.ones((2, 2, 2, 3, 4), F32)
    dy = np.ones((0, 2, 2, 2, 4), F32)
    attrs = {"strides": [1] * 5, "padding": "VALID"}
    got = run([ops.Conv3D(root, x, f, **attrs),
               ops.Conv3DBackpropInputV2(root, list(x.shape), f, dy, **attrs),
               ops.Conv3DBackpropFilterV2(root, x, list(f.shape), dy, **attrs)], root=root)
    assert got[0].shape == dy.shape and got[1].shape == x.shape
    assert_identical(got[2], np.zeros(f.shape, F32))


POOL_CASES = [  # (x NDHWC, ksize, strides, padding)
    ((2, 4, 5, 3, 2), (2, 2, 2), (2, 2, 2), "VALID"),
    ((1, 5, 4, 6, 3), (3, 2, 3), (1, 2, 1), "SAME"),  # overlapping windows
    ((2, 3, 6, 4, 1), (2, 3, 2), (2, 1, 3), "SAME"),
    ((1, 2, 3, 2, 2), (4, 5, 3), (1, 1, 1), "SAME"),  # window > input
]
POOL_IDS = [f"{c[3]}-k{''.join(map(str, c[1]))}-s{''.join(map(str, c[2]))}"
            for c in POOL_CASES]


def _pool_attrs(fmt, ksize, strides, padding):
    return {"ksize": attr5(fmt, ksize), "strides": attr5(fmt, strides), "padding": padding,
            "data_format": fmt}


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", POOL_CASES, ids=POOL_IDS)
def test_max_pool3d_and_its_gradients_match_the_loops(fmt, case, backend):
    """Small integers make ties (windows with several maxima) in every case."""
    x_shape, ksize, strides, padding = case
    rng = np.random.default_rng(3)
    x = rng.integers(-2, 3, x_shape).astype(F32)
    y = max_pool_ref(x, ksize, strides, padding)
    g = rng.standard_normal(y.shape).astype(F32)
    gg = rng.standard_normal(x_shape).astype(F32)
    attrs = _pool_attrs(fmt, ksize, strides, padding)
    root = mg.Scope.NewRootScope()
    xf, yf = to_fmt(x, fmt), to_fmt(y, fmt)
    outs = [ops.MaxPool3D(root, xf, **attrs),
            ops.MaxPool3DGrad(root, xf, yf, to_fmt(g, fmt), **attrs),
            ops.MaxPool3DGradGrad(root, xf, yf, to_fmt(gg, fmt), **attrs)]
    assert [o.shape for o in outs] == [yf.shape, xf.shape, yf.shape]
    got = [from_fmt(a, fmt) for a in run(outs, root=root, backend=backend)]
    assert_identical(got[0], y, "MaxPool3D")
    assert_identical(got[1], max_pool_grad_ref(x, y, g, ksize, strides, padding),
                     "MaxPool3DGrad")
    assert_identical(got[2], max_pool_grad_grad_ref(x, y, gg, ksize, strides, padding),
                     "MaxPool3DGradGrad")


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", POOL_CASES, ids=POOL_IDS)
def test_avg_pool3d_and_its_gradient_match_the_loops(fmt, case, backend):
    x_shape, ksize, strides, padding = case
    rng = np.random.default_rng(12)
    x = rng.standard_normal(x_shape).astype(F32)
    y = avg_pool_ref(x, ksize, strides, padding)
    g = rng.standard_normal(y.shape).astype(F32)
    attrs = _pool_attrs(fmt, ksize, strides, padding)
    root = mg.Scope.NewRootScope()
    outs = [ops.AvgPool3D(root, to_fmt(x, fmt), **attrs),
            ops.AvgPool3DGrad(root, list(to_fmt(x, fmt).shape), to_fmt(g, fmt), **attrs)]
    assert [o.shape for o in outs] == [to_fmt(y, fmt).shape, to_fmt(x, fmt).shape]
    got = [from_fmt(a, fmt) for a in run(outs, root=root, backend=backend)]
    assert_close(got[0], y, dtype=F32)
    assert_close(got[1], avg_pool_grad_ref(x_shape, g, ksize, strides, padding), dtype=F32)


@pytest.mark.parametrize("dtype", [np.float16, BF16, F64], ids=str)
def test_avg_pool3d_dtypes(dtype):
    """float16/bfloat16 computed in float32 and rounded once; float64 in float64."""
    x_shape, ksize, strides, padding = POOL_CASES[1]
    rng = np.random.default_rng(13)
    x = rng.standard_normal(x_shape).astype(dtype)
    g = rng.standard_normal(out_dhw(x_shape[1:4], ksize, strides, (1, 1, 1), padding))
    g = np.broadcast_to(g[None, ..., None], (x_shape[0], *g.shape, x_shape[4])).astype(dtype)
    attrs = _pool_attrs("NDHWC", ksize, strides, padding)
    root = mg.Scope.NewRootScope()
    y, dx = run([ops.AvgPool3D(root, x, **attrs),
                 ops.AvgPool3DGrad(root, list(x_shape), g, **attrs)], root=root)
    assert y.dtype == dx.dtype == np.dtype(dtype)
    assert_close(y, avg_pool_ref(x, ksize, strides, padding), dtype=dtype)
    assert_close(dx, avg_pool_grad_ref(x_shape, g, ksize, strides, padding), dtype=dtype)


@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=str)
def test_max_pool3d_half_types_and_grad_rounding_in_t(dtype):
    """MaxPool3D is exact in any type; MaxPool3DGrad adds in T (a bfloat16 sum of three
    overlapping windows' grads rounds twice, as TF's does); mixed T/TInput work."""
    rng = np.random.default_rng(4)
    x = rng.integers(0, 2, (1, 4, 4, 4, 2)).astype(dtype)
    attrs = _pool_attrs("NDHWC", (3, 3, 3), (1, 1, 1), "SAME")
    y = max_pool_ref(x, (3, 3, 3), (1, 1, 1), "SAME")
    g = (rng.standard_normal(y.shape) * 100).astype(dtype)
    root = mg.Scope.NewRootScope()
    got = run([ops.MaxPool3D(root, x, **attrs), ops.MaxPool3DGrad(root, x, y, g, **attrs),
               ops.MaxPool3DGrad(root, x.astype(F32), y.astype(F32), g, **attrs)], root=root)
    assert_identical(got[0], y)
    expected = max_pool_grad_ref(x, y, g, (3, 3, 3), (1, 1, 1), "SAME")
    assert_identical(got[1], expected)
    assert_identical(got[2], expected)
    once = max_pool_grad_ref(x, y, g.astype(F32), (3, 3, 3), (1, 1, 1), "SAME").astype(dtype)
    assert not np.array_equal(expected, once)  # the per-addition rounding is observable


def test_max_pool3d_grad_near_ties_and_non_finite_maxima():
    """Elements within 1e-5 of orig_output all receive the gradient; orig_output is used as
    given; a NaN or infinite maximum routes nothing. MaxPool3D ignores NaN (TF's rule)."""
    # two windows along the width: even flat indices (7, 7 - 5e-6, 3, inf), odd (1, 3, 2, inf)
    x = np.array([7.0, 1.0, 7.0 - 5e-6, 3.0, 3.0, 2.0, np.inf, np.inf], F32).reshape(
        1, 2, 2, 2, 1)
    attrs = _pool_attrs("NDHWC", (2, 2, 1), (2, 2, 1), "VALID")
    g = np.array([1.0, 10.0], F32).reshape(1, 1, 1, 2, 1)
    root = mg.Scope.NewRootScope()
    got = run([ops.MaxPool3DGrad(root, x, np.array([7.0, np.inf], F32).reshape(g.shape), g,
                                 **attrs),
               ops.MaxPool3DGrad(root, x, np.array([3.0, 2.0], F32).reshape(g.shape), g,
                                 **attrs),
               ops.MaxPool3D(root, np.where(x == 1.0, np.nan, x).astype(F32), **attrs)],
              root=root)
    np.testing.assert_array_equal(got[0].ravel(), [1, 0, 1, 0, 0, 0, 0, 0])  # inf - inf: NaN
    np.testing.assert_array_equal(got[1].ravel(), [0, 0, 0, 0, 1, 10, 0, 0])
    np.testing.assert_array_equal(got[2].ravel(), [np.inf, np.inf])


def test_max_pool3d_grad_grad_integers():
    rng = np.random.default_rng(5)
    x = rng.integers(-3, 4, (2, 3, 4, 3, 2)).astype(np.int32)
    attrs = _pool_attrs("NDHWC", (2, 2, 2), (1, 2, 1), "SAME")
    y = max_pool_ref(x, (2, 2, 2), (1, 2, 1), "SAME")
    gg = rng.integers(-9, 9, x.shape).astype(np.int32)
    got = run(ops.MaxPool3DGradGrad(mg.Scope.NewRootScope(), x, y, gg, **attrs))
    assert_identical(got, max_pool_grad_grad_ref(x, y, gg, (2, 2, 2), (1, 2, 1), "SAME"))


def test_huge_windows_cost_what_the_input_costs():
    """A 10**6 window over a 3x3x3 input visits only the in-bounds offsets."""
    x = np.arange(54, dtype=F32).reshape(1, 3, 3, 3, 2)
    attrs = _pool_attrs("NDHWC", (10**6,) * 3, (1, 1, 1), "SAME")
    root = mg.Scope.NewRootScope()
    y = ops.MaxPool3D(root, x, **attrs)
    dx = ops.MaxPool3DGrad(root, x, y, np.ones((1, 3, 3, 3, 2), F32), **attrs)
    got = run([y, dx], root=root)
    np.testing.assert_array_equal(got[0], np.broadcast_to([52, 53], (1, 3, 3, 3, 2)))
    assert got[1][0, 2, 2, 2].tolist() == [27, 27] and got[1].sum() == 54


# ----------------------------------------------------------------------------- shapes


def test_static_shapes_known_and_unknown():
    root = mg.Scope.NewRootScope()
    x = ph(root, "x", (None, 7, None, 5, 3))
    f = ph(root, "f", (3, 2, 2, 3, 4))
    strides = [1, 2, 1, 2, 1]
    assert ops.Conv3D(root, x, f, strides=strides, padding="SAME").shape.as_list() == [
        None, 4, None, 3, 4]
    assert ops.Conv3D(root, ph(root, "xc", (2, 3, 7, 6, 5)), f, strides=[1, 1, 2, 1, 2],
                      padding="VALID", data_format="NCDHW").shape.as_list() == [2, 4, 3, 5, 2]
    dy = ph(root, "dy", (2, 4, 6, 3, 4))
    sizes = ops.Placeholder(root.WithOpName("sizes"), mg.int32, shape=[5])
    # unknown sizes leave the depths unknown (the convolution family's rule, where a grouped
    # convolution's depth is a multiple of the filter's in_channels); TF leaves all unknown
    assert ops.Conv3DBackpropInputV2(root, sizes, f, dy, strides=strides,
                                     padding="SAME").shape.as_list() == [2, None, None,
                                                                         None, None]
    assert ops.Conv3DBackpropFilterV2(root, x, ops.Placeholder(root, mg.int32, shape=[5]),
                                      dy, strides=strides, padding="SAME"
                                      ).shape.as_list() == [None, None, None, None, 4]
    pool = ops.MaxPool3D(root, x, ksize=[1, 2, 2, 2, 1], strides=strides, padding="SAME")
    assert pool.shape.as_list() == [None, 4, None, 3, 3]
    assert ops.MaxPool3DGrad(root, x, pool, pool, ksize=[1, 2, 2, 2, 1], strides=strides,
                             padding="SAME").shape.as_list() == [None, 7, None, 5, 3]
    unknown = ops.Placeholder(root, mg.float32)
    assert ops.MaxPool3D(root, unknown, ksize=[1] * 5, strides=[1] * 5,
                         padding="VALID").shape.as_list() == [None] * 5


def test_huge_outputs_are_refused_before_allocating():
    root = mg.Scope.NewRootScope()
    f = np.ones((1, 1, 1, 4, 2), F32)
    big = 2**12
    dx = ops.Conv3DBackpropInputV2(root, [1, big, big, big, 4], f, np.ones((1, 1, 1, 1, 2), F32),
                                   strides=[1, big, big, big, 1], padding="VALID")
    assert dx.shape.as_list() == [1, big, big, big, 4]
    with pytest.raises(mg.errors.ResourceExhaustedError, match="Conv3DBackpropInputV2"):
        run(dx)


def test_absurd_strides_and_dilations_compute_or_are_refused_cleanly():
    """A stride of 2**62 leaves one output per axis (no byte-offset overflow); a dilation
    of 2**40 under SAME asks for zeros beyond any memory: refused before allocating."""
    root = mg.Scope.NewRootScope()
    x = np.ones((1, 3, 4, 5, 2), F32)
    f = np.ones((2, 2, 2, 2, 3), F32)
    y = ops.Conv3D(root, x, f, strides=[1, 2**62, 2**62, 2**62, 1], padding="VALID")
    dy = np.ones((1, 1, 1, 1, 3), F32)
    dx = ops.Conv3DBackpropInputV2(root, list(x.shape), f, dy,
                                   strides=[1, 2**62, 2**62, 2**62, 1], padding="VALID")
    got = run([y, dx], root=root)
    assert_identical(got[0], np.full((1, 1, 1, 1, 3), 16, F32))
    assert got[1].sum() == 8 * 2 * 3
    dilated = ops.Conv3D(root, x, f, strides=[1] * 5, dilations=[1, 2**40, 1, 1, 1],
                         padding="SAME")
    with pytest.raises(mg.errors.ResourceExhaustedError, match=r"Conv3D '\w+': out of memory "
                                                                r".*nothing was allocated"):
        run(dilated)


# ----------------------------------------------------------------------------- errors


def raises(fragment):
    return pytest.raises(InvalidArgumentError, match=fragment)


def test_conv3d_construction_errors():
    root = mg.Scope.NewRootScope()
    x, f = ph(root, "x", (1, 4, 5, 6, 2)), ph(root, "f", (2, 2, 2, 2, 3))
    one = [1] * 5
    with raises(r"Conv3D '\w+': attr 'strides' passed list of length 4 less than "
                r"minimum 5"):
        ops.Conv3D(root, x, f, strides=[1, 1, 1, 1], padding="SAME")
    with raises(r"attr 'strides' has 6 entries: Conv3D requires the stride attribute to "
                r"contain 5 values, but got: 6"):
        ops.Conv3D(root, x, f, strides=[1] * 6, padding="SAME")
    with raises(r"Conv3D requires the dilation attribute to contain 5 values, but got: 6"):
        ops.Conv3D(root, x, f, strides=one, padding="SAME", dilations=[1] * 6)
    with raises(r"Stride must be > 0, but got 0: attr 'strides' must be >= 1"):
        ops.Conv3D(root, x, f, strides=[1, 0, 1, 1, 1], padding="SAME")
    with raises(r"Current implementation does not yet support strides in the batch and "
                r"depth dimensions"):
        ops.Conv3D(root, x, f, strides=[2, 1, 1, 1, 1], padding="SAME")
    with raises(r"Dilation rate must be >= 1, but got 0"):
        ops.Conv3D(root, x, f, strides=one, padding="SAME", dilations=[1, 1, 0, 1, 1])
    with raises(r"does not yet support dilation rates in the batch and depth dimensions"):
        ops.Conv3D(root, x, f, strides=one, padding="SAME", dilations=[1, 1, 1, 1, 2])
    with raises(r"attr 'padding' is 'EXPLICIT', which is not in the allowed values"):
        ops.Conv3D(root, x, f, strides=one, padding="EXPLICIT")
    with raises(r"attr 'data_format' is 'NHWC', which is not in the allowed values"):
        ops.Conv3D(root, x, f, strides=one, padding="SAME", data_format="NHWC")
    with raises(r"Conv3D '\w+': Shape must be rank 5 but is rank 4: input 'input'"):
        ops.Conv3D(root, ph(root, "x4", (4, 5, 6, 2)), f, strides=one, padding="SAME")
    with raises(r"Shape must be rank 5 but is rank 4: input 'filter' must be rank 5 "
                r"\(DHWIO\)"):
        ops.Conv3D(root, x, ph(root, "f4", (2, 2, 2, 3)), strides=one, padding="SAME")
    with raises(r"Depth of input \(2\) is not a multiple of input depth of filter \(3\): "
                r"input 'input' has 2 channels"):
        ops.Conv3D(root, x, ph(root, "f3", (2, 2, 2, 3, 3)), strides=one, padding="SAME")
    with raises(r"input and filter must have the same depth: 4 vs 2: .*grouped convolution "
                r"is not supported"):
        ops.Conv3D(root, ph(root, "x8", (1, 4, 5, 6, 4)), f, strides=one, padding="SAME")
    with raises(r"Depth of filter must not be 0"):
        ops.Conv3D(root, ph(root, "x0", (1, 4, 5, 6, 0)), ph(root, "f0", (2, 2, 2, 0, 3)),
                   strides=one, padding="SAME")
    with raises(r"filter must not have zero elements \(i.e. all dimensions must be "
                r"non-zero\): input 'filter' has shape \[2,2,2,2,0\]"):
        ops.Conv3D(root, x, ph(root, "fz", (2, 2, 2, 2, 0)), strides=one, padding="SAME")
    with raises(r"Negative dimension size caused by subtracting 6 from 4: .*\(the planes of "
                r"input 'input'\)"):
        ops.Conv3D(root, x, ph(root, "f6", (6, 2, 2, 2, 3)), strides=one, padding="VALID")
    with raises(r"input 'input' has dtype int32, not in the allowed values"):
        ops.Conv3D(root, np.ones((1, 2, 2, 2, 1), np.int32), np.ones((1, 1, 1, 1, 1), np.int32),
                   strides=one, padding="SAME")


def test_conv3d_backprop_construction_errors():
    root = mg.Scope.NewRootScope()
    f, dy = ph(root, "f", (2, 2, 2, 2, 3)), ph(root, "dy", (1, 3, 4, 5, 3))
    one = [1] * 5
    with raises(r"Conv3DBackpropInputV2 .*Shape must be rank 5 but is rank 4: input "
                r"'input_sizes' must have 5 elements, got 4"):
        ops.Conv3DBackpropInputV2(root, [1, 4, 5, 6], f, dy, strides=one, padding="VALID")
    with raises(r"Dimension -4 must be >= 0: input 'input_sizes' must be non-negative"):
        ops.Conv3DBackpropInputV2(root, [1, -4, 5, 6, 2], f, dy, strides=one, padding="VALID")
    with raises(r"input and filter_sizes must have the same number of channels. Got 3 for "
                r"input and 2 for filter_sizes: input 'input_sizes' has 3 channels"):
        ops.Conv3DBackpropInputV2(root, [1, 4, 5, 6, 3], f, dy, strides=one, padding="VALID")
    with raises(r"Size of out_backprop doesn't match computed: actual = 2, computed = 3 "
                r"spatial_dim: 1 input: 4 filter: 2 output: 2 stride: 1 dilation: 1: input "
                r"'out_backprop' has planes 2"):
        ops.Conv3DBackpropInputV2(root, [1, 4, 5, 6, 2], f, ph(root, "dy2", (1, 2, 4, 5, 3)),
                                  strides=one, padding="VALID")
    with raises(r"input and out_backprop must have the same batch size. Input batch: 2, "
                r"outbackprop batch: 1, batch_dim: 0"):
        ops.Conv3DBackpropInputV2(root, [2, 4, 5, 6, 2], f, dy, strides=one, padding="VALID")
    with raises(r"out_backprop and filter_sizes must have the same number of channels. Got 2 "
                r"for out_backprop and 3 for filter_sizes: input 'out_backprop' has depth 2"):
        ops.Conv3DBackpropInputV2(root, [1, 4, 5, 6, 2], f, ph(root, "dy3", (1, 3, 4, 5, 2)),
                                  strides=one, padding="VALID")
    with raises(r"input 'input_sizes' must be int32, got float32|input 'input_sizes' has "
                r"dtype float32"):
        ops.Conv3DBackpropInputV2(root, np.array([1, 4, 5, 6, 2], F32), f, dy, strides=one,
                                  padding="VALID")
    x = ph(root, "x", (1, 4, 5, 6, 2))
    with raises(r"Conv3DBackpropFilterV2 .*input and filter_sizes must have the same number "
                r"of channels. Got 2 for input and 3 for filter_sizes"):
        ops.Conv3DBackpropFilterV2(root, x, [2, 2, 2, 3, 3], dy, strides=one, padding="VALID")
    with raises(r"Dimension -2 must be >= 0: input 'filter_sizes' must be non-negative"):
        ops.Conv3DBackpropFilterV2(root, x, [2, 2, -2, 2, 3], dy, strides=one, padding="VALID")
    with raises(r"Got 3 for out_backprop and 4 for filter_sizes"):
        ops.Conv3DBackpropFilterV2(root, x, [2, 2, 2, 2, 4], dy, strides=one, padding="VALID")


def test_max_pool3d_construction_errors():
    root = mg.Scope.NewRootScope()
    x = ph(root, "x", (1, 4, 5, 6, 2))
    k = [1, 2, 2, 2, 1]
    with raises(r"MaxPool3D '\w+': attr 'ksize' has 6 entries: Pool3D requires the "
                r"ksize attribute to contain 5 values, but got: 6"):
        ops.MaxPool3D(root, x, ksize=k + [1], strides=k, padding="VALID")
    with raises(r"attr 'strides' has 6 entries: Pool3D ops require the stride attribute to "
                r"contain 5 values, but got: 6"):
        ops.MaxPool3D(root, x, ksize=k, strides=k + [1], padding="VALID")
    with raises(r"attr 'ksize' passed list of length 3 less than minimum 5"):
        ops.MaxPool3D(root, x, ksize=[2, 2, 2], strides=k, padding="VALID")
    with raises(r"Pooling is not yet supported on the batch dimension: attr 'ksize'"):
        ops.MaxPool3D(root, x, ksize=[2, 2, 2, 2, 1], strides=k, padding="VALID")
    with raises(r"Pooling is not yet supported on the depth dimension: attr 'strides'"):
        ops.MaxPool3D(root, x, ksize=k, strides=[1, 2, 2, 2, 2], padding="VALID")
    with raises(r"Sliding window ksize must be positive. The specified or inferred ksize is: "
                r"1,0,2,2,1"):
        ops.MaxPool3D(root, x, ksize=[1, 0, 2, 2, 1], strides=k, padding="VALID")
    with raises(r"Negative dimension size caused by subtracting 6 from 4"):
        ops.MaxPool3D(root, x, ksize=[1, 6, 2, 2, 1], strides=[1] * 5, padding="VALID")
    with raises(r"input 'input' has dtype float64, not in the allowed values"):
        ops.MaxPool3D(root, np.ones((1, 2, 2, 2, 1)), ksize=k, strides=k, padding="VALID")
    y = ph(root, "y", (1, 2, 2, 3, 2))
    with raises(r"MaxPool3DGrad .*input 'grad' must have shape \[1,2,2,3,2\]"):
        ops.MaxPool3DGrad(root, x, y, ph(root, "g", (1, 2, 2, 2, 2)), ksize=k, strides=k,
                          padding="VALID")
    with raises(r"MaxPool3DGradGrad .*input 'orig_output' must have shape \[1,2,2,3,2\]"):
        ops.MaxPool3DGradGrad(root, x, ph(root, "y2", (1, 2, 2, 2, 2)), x, ksize=k,
                              strides=k, padding="VALID")


def test_avg_pool3d_construction_errors():
    root = mg.Scope.NewRootScope()
    x = ph(root, "x", (1, 4, 5, 6, 2))
    k = [1, 2, 2, 2, 1]
    with raises(r"AvgPool3D '\w+': attr 'ksize' passed list of length 4 less than minimum 5"):
        ops.AvgPool3D(root, x, ksize=[1, 2, 2, 1], strides=k, padding="VALID")
    with raises(r"Pooling is not yet supported on the depth dimension: attr 'ksize'"):
        ops.AvgPool3D(root, x, ksize=[1, 2, 2, 2, 2], strides=k, padding="VALID")
    with raises(r"input 'input' has dtype int32, not in the allowed values"):
        ops.AvgPool3D(root, np.ones((1, 2, 2, 2, 1), np.int32), ksize=k, strides=k,
                      padding="VALID")
    with raises(r"AvgPool3DGrad '\w+': .*input 'grad' must have shape \[1,2,2,3,2\] \(the "
                r"pool of an input of shape \[1,4,5,6,2\]\)"):
        ops.AvgPool3DGrad(root, [1, 4, 5, 6, 2], ph(root, "g", (1, 2, 2, 2, 2)), ksize=k,
                          strides=k, padding="VALID")
    with raises(r"input 'orig_input_shape' must have 5 elements, got 4"):
        ops.AvgPool3DGrad(root, [1, 4, 5, 6], ph(root, "g2", (1, 2, 2, 3, 2)), ksize=k,
                          strides=k, padding="VALID")
    unknown = ops.AvgPool3DGrad(root, ops.Placeholder(root, mg.int32, shape=[5]),
                                ph(root, "g3", (1, 2, 2, 3, 2)), ksize=k, strides=k,
                                padding="VALID", data_format="NCDHW")
    assert unknown.shape.as_list() == [1, 2, None, None, None]


def test_run_time_errors_name_op_and_input():
    """Shapes only the data shows are checked with the construction messages."""
    root = mg.Scope.NewRootScope()
    x, f = ph(root, "x", None), ph(root, "f", None)
    conv = ops.Conv3D(root, x, f, strides=[1] * 5, padding="SAME")
    session = mg.ClientSession(root)
    with raises(r"Conv3D '\w+': Depth of input \(2\) is not a multiple of input depth of "
                r"filter \(3\)"):
        session.Run({x: np.ones((1, 2, 2, 2, 2), F32), f: np.ones((1, 1, 1, 3, 1), F32)}, conv)
    with raises(r"Conv3D '\w+': Shape must be rank 5 but is rank 3: input 'input'"):
        session.Run({x: np.ones((1, 2, 2), F32), f: np.ones((1, 1, 1, 3, 1), F32)}, conv)


# ----------------------------------------------------------------------------- gradients


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", [CONV_CASES[1], CONV_CASES[3]], ids=[CONV_IDS[1], CONV_IDS[3]])
def test_conv3d_gradients(fmt, case):
    x_shape, f_shape, strides, dilations, padding = case
    x_shape = (1, *x_shape[1:4], 2)
    f_shape = (*f_shape[:3], 2, 2)
    rng = np.random.default_rng(6)
    x = to_fmt(rng.standard_normal(x_shape), fmt)
    f = rng.standard_normal(f_shape)
    attrs = _conv_attrs(fmt, strides, dilations, padding)
    root = mg.Scope.NewRootScope()
    xp, fp = ph(root, "x", x.shape), ph(root, "f", f_shape)
    assert_gradients_match([xp, fp], [x, f], ops.Conv3D(root, xp, fp, **attrs))


def test_conv3d_backprop_gradients():
    x_shape, f_shape, strides, dilations, padding = CONV_CASES[1]
    x_shape, f_shape = (1, *x_shape[1:4], 2), (*f_shape[:3], 2, 2)
    rng = np.random.default_rng(7)
    attrs = _conv_attrs("NDHWC", strides, dilations, padding)
    root = mg.Scope.NewRootScope()
    y_shape = ops.Conv3D(root, np.zeros(x_shape, F32), np.zeros(f_shape, F32), **attrs).shape
    xp, fp, dyp = ph(root, "x", x_shape), ph(root, "f", f_shape), ph(root, "dy", y_shape)
    x, f, dy = (rng.standard_normal(s) for s in (x_shape, f_shape, y_shape.dims))
    dx = ops.Conv3DBackpropInputV2(root, list(x_shape), fp, dyp, **attrs)
    assert_gradients_match([fp, dyp], [f, dy], dx)
    df = ops.Conv3DBackpropFilterV2(root, xp, list(f_shape), dyp, **attrs)
    assert_gradients_match([xp, dyp], [x, dy], df)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", POOL_CASES[:3], ids=POOL_IDS[:3])
def test_max_pool3d_gradients(fmt, case):
    """First and second order (MaxPool3D -> MaxPool3DGrad -> MaxPool3DGradGrad -> ...), on
    values without ties."""
    x_shape, ksize, strides, padding = case
    x_shape = (1, *x_shape[1:4], 2)
    rng = np.random.default_rng(8)
    x = to_fmt(distinct(rng, x_shape), fmt)
    attrs = _pool_attrs(fmt, ksize, strides, padding)
    root = mg.Scope.NewRootScope()
    xp = ph(root, "x", x.shape)
    y = ops.MaxPool3D(root, xp, **attrs)
    assert_gradients_match([xp], [x], y)
    gp = ph(root, "g", y.shape)
    dx = ops.MaxPool3DGrad(root, xp, y, gp, **attrs)
    assert_gradients_match([gp], [rng.standard_normal(y.shape.dims)], dx, {xp: x})
    ggp = ph(root, "gg", x.shape)
    ddy = ops.MaxPool3DGradGrad(root, xp, y, ggp, **attrs)
    assert_gradients_match([ggp], [rng.standard_normal(x.shape)], ddy, {xp: x})


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", POOL_CASES[:3], ids=POOL_IDS[:3])
def test_avg_pool3d_gradients(fmt, case):
    """AvgPool3D -> AvgPool3DGrad -> AvgPool3D: both linear, each the other's adjoint."""
    x_shape, ksize, strides, padding = case
    x_shape = (1, *x_shape[1:4], 2)
    rng = np.random.default_rng(14)
    x = to_fmt(rng.standard_normal(x_shape), fmt)
    attrs = _pool_attrs(fmt, ksize, strides, padding)
    root = mg.Scope.NewRootScope()
    xp = ph(root, "x", x.shape)
    y = ops.AvgPool3D(root, xp, **attrs)
    assert_gradients_match([xp], [x], y)
    gp = ph(root, "g", y.shape)
    dx = ops.AvgPool3DGrad(root, list(x.shape), gp, **attrs)
    assert_gradients_match([gp], [rng.standard_normal(y.shape.dims)], dx)


VOLUMETRIC_GRADIENT_TESTS = {
    "AvgPool3D": "test_avg_pool3d_gradients",
    "AvgPool3DGrad": "test_avg_pool3d_gradients",
    "Conv3D": "test_conv3d_gradients",
    "Conv3DBackpropInputV2": "test_conv3d_backprop_gradients",
    "Conv3DBackpropFilterV2": "test_conv3d_backprop_gradients",
    "MaxPool3D": "test_max_pool3d_gradients",
    "MaxPool3DGrad": "test_max_pool3d_gradients",
    "MaxPool3DGradGrad": "test_max_pool3d_gradients",
}


def test_every_volumetric_gradient_is_checked():
    from minigraph.ops import volumetric_ops

    ours = {getattr(volumetric_ops, name).op_def.name for name in volumetric_ops.__all__}
    registered = {op for op, fn in registered_gradients().items()
                  if fn is not None and op in ours}
    assert registered == set(VOLUMETRIC_GRADIENT_TESTS), (
        registered ^ set(VOLUMETRIC_GRADIENT_TESTS))
    assert all(name in globals() for name in VOLUMETRIC_GRADIENT_TESTS.values())


# ----------------------------------------------------------------------------- TensorFlow


@pytest.fixture(scope="module")
def tf():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return pytest.importorskip("tensorflow")


def _close_to_tf(ours, theirs, what):
    """float32: BLAS and TF sum in different orders."""
    assert ours.shape == theirs.shape, what
    error = np.abs(ours.astype(F64) - theirs) / (np.abs(theirs) + 1)
    assert error.max(initial=0) <= 1e-5, f"{what}: {error.max():.3g}"


@pytest.mark.oracle
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", [c for c in CONV_CASES if c[3] == (1, 1, 1)],
                         ids=[i for c, i in zip(CONV_CASES, CONV_IDS) if c[3] == (1, 1, 1)])
def test_convolutions_against_tensorflow(tf, backend, fmt, case):
    """TF runs NDHWC (its Eigen CPU kernels take neither NCDHW nor dilations, which the
    float64 loops above cover): our NCDHW results are compared transposed."""
    x_shape, f_shape, strides, dilations, padding = case
    rng = np.random.default_rng(9)
    x = rng.standard_normal(x_shape).astype(F32)
    f = rng.standard_normal(f_shape).astype(F32)
    tf_attrs = _conv_attrs("NDHWC", strides, dilations, padding)
    y = tf.raw_ops.Conv3D(input=x, filter=f, **tf_attrs).numpy()
    dy = rng.standard_normal(y.shape).astype(F32)
    attrs = _conv_attrs(fmt, strides, dilations, padding)
    root = mg.Scope.NewRootScope()
    ours = run([ops.Conv3D(root, to_fmt(x, fmt), f, **attrs),
                ops.Conv3DBackpropInputV2(root, list(to_fmt(x, fmt).shape), f,
                                          to_fmt(dy, fmt), **attrs),
                ops.Conv3DBackpropFilterV2(root, to_fmt(x, fmt), list(f_shape),
                                           to_fmt(dy, fmt), **attrs)],
               root=root, backend=backend)
    _close_to_tf(from_fmt(ours[0], fmt), y, "Conv3D")
    _close_to_tf(from_fmt(ours[1], fmt), tf.raw_ops.Conv3DBackpropInputV2(
        input_sizes=list(x_shape), filter=f, out_backprop=dy, **tf_attrs).numpy(),
        "Conv3DBackpropInputV2")
    _close_to_tf(ours[2], tf.raw_ops.Conv3DBackpropFilterV2(
        input=x, filter_sizes=list(f_shape), out_backprop=dy, **tf_attrs).numpy(),
        "Conv3DBackpropFilterV2")


@pytest.mark.oracle
@pytest.mark.parametrize("dtype", [np.float16, BF16, F64], ids=str)
def test_conv3d_dtypes_against_tensorflow(tf, dtype):
    """float64 to 1e-12; float16/bfloat16 within TF's own rounding: TF's Eigen kernels add
    in T (up to ``terms * eps_T * sum |x*f|`` off), we round the float32 sum once."""
    rng = np.random.default_rng(10)
    x = rng.standard_normal((2, 4, 3, 5, 3)).astype(dtype)
    f = rng.standard_normal((2, 2, 3, 3, 2)).astype(dtype)
    attrs = _conv_attrs("NDHWC", (2, 1, 1), (1, 1, 1), "SAME")
    ours = run(ops.Conv3D(mg.Scope.NewRootScope(), x, f, **attrs)).astype(F64)
    theirs = tf.raw_ops.Conv3D(input=tf.constant(x), filter=tf.constant(f), **attrs).numpy()
    if dtype == F64:
        assert_close(ours, theirs, dtype=F64)
        return
    terms = tf.raw_ops.Conv3D(input=np.abs(x.astype(F64)), filter=np.abs(f.astype(F64)),
                              **attrs).numpy()
    eps = float(ml_dtypes.finfo(dtype).eps)
    bound = eps * (f.size // f.shape[-1]) * terms + eps * np.abs(theirs.astype(F64))
    assert (np.abs(ours - theirs.astype(F64)) <= bound).all()


@pytest.mark.oracle
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [F32, BF16], ids=str)
@pytest.mark.parametrize("case", POOL_CASES, ids=POOL_IDS)
def test_pools_against_tensorflow_bit_for_bit(tf, backend, dtype, case):
    """With ties (small integers) and overlapping windows. TF's MaxPool3DGrad is its eager
    CPU kernel (a oneDNN graph rewrite routes to the first maximum instead)."""
    x_shape, ksize, strides, padding = case
    rng = np.random.default_rng(11)
    x = rng.integers(-2, 3, x_shape).astype(dtype)
    attrs = _pool_attrs("NDHWC", ksize, strides, padding)
    y = tf.raw_ops.MaxPool3D(input=tf.constant(x), **attrs).numpy()
    g = rng.standard_normal(y.shape).astype(dtype)
    gg = rng.standard_normal(x_shape).astype(dtype)
    theirs = [y, tf.raw_ops.MaxPool3DGrad(orig_input=tf.constant(x), orig_output=tf.constant(y),
                                          grad=tf.constant(g), **attrs).numpy(),
              tf.raw_ops.MaxPool3DGradGrad(orig_input=tf.constant(x), orig_output=tf.constant(y),
                                           grad=tf.constant(gg), **attrs).numpy()]
    root = mg.Scope.NewRootScope()
    ours = run([ops.MaxPool3D(root, x, **attrs), ops.MaxPool3DGrad(root, x, y, g, **attrs),
                ops.MaxPool3DGradGrad(root, x, y, gg, **attrs)], root=root, backend=backend)
    for a, b, what in zip(ours, theirs, ("MaxPool3D", "MaxPool3DGrad", "MaxPool3DGradGrad")):
        assert_identical(a, b, what)


@pytest.mark.oracle
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", POOL_CASES, ids=POOL_IDS)
def test_avg_pools_against_tensorflow(tf, backend, case):
    """AvgPool3D and AvgPool3DGrad (TF's CPU kernels, NDHWC) to float32 rounding."""
    x_shape, ksize, strides, padding = case
    rng = np.random.default_rng(15)
    x = rng.standard_normal(x_shape).astype(F32)
    attrs = _pool_attrs("NDHWC", ksize, strides, padding)
    y = tf.raw_ops.AvgPool3D(input=x, **attrs).numpy()
    g = rng.standard_normal(y.shape).astype(F32)
    dx = tf.raw_ops.AvgPool3DGrad(orig_input_shape=list(x_shape), grad=g, **attrs).numpy()
    root = mg.Scope.NewRootScope()
    ours = run([ops.AvgPool3D(root, x, **attrs),
                ops.AvgPool3DGrad(root, list(x_shape), g, **attrs)], root=root,
               backend=backend)
    _close_to_tf(ours[0], y, "AvgPool3D")
    _close_to_tf(ours[1], dx, "AvgPool3DGrad")
