"""The native (C) fast paths of the layer ops against the numpy kernels they replace.

With the native backend, float32 Conv2D / Conv2DBackpropInput / Conv2DBackpropFilter
(stride 1, dilation 1, SAME/VALID), MaxPool, MaxPoolGrad (any windows), Relu,
ReluGrad and ApplyAdam run in C (kernels_c/convolution*, pooling*, activations*,
optimizers*). Each test builds the op in a
graph and runs it in a "native" and a "reference" session (the numpy kernels, themselves
tested against loop references and TensorFlow in test_nn_ops.py):

* convolutions over awkward shapes (batch 1, odd H/W, C_in 1/3/17/32, C_out 1/5/33/64/80/
  130, 1x1 to 5x3 filters, NHWC and NCHW, SAME and VALID) within 1e-5 of the float64 result
  relative to the magnitude of the summed terms (the same bound holds for the numpy path);
* MaxPoolGrad, ReLU and Adam bit for bit (ties, NaN, infinities, signed zeros), MaxPool
  equal (NaN included; the sign of a zero maximum may differ);
* the cases the C code does not take (strides, dilations, EXPLICIT padding, other dtypes)
  still give the numpy results;
* determinism: bit-identical results for the same inputs and any thread count; every
  instruction set; a forked child; and a short digits training run reaching the reference
  backend's accuracy.
"""

from __future__ import annotations

import functools
import itertools
import multiprocessing

import ml_dtypes
import numpy as np
import pytest

import minigraph as mg
from minigraph import ops
from minigraph.backends import convolution_kernels, native
from minigraph.backends.activation_kernels import c_relu, c_relu_grad
from minigraph.backends.convolution_kernels import (
    c_conv2d,
    c_conv2d_backprop_filter,
    c_conv2d_backprop_input,
)
from minigraph.backends.pooling_kernels import c_max_pool, c_max_pool_grad
from minigraph.backends.training_kernels import c_apply_adam
from minigraph.ops.window import Window, windowed_output_size
from minigraph.train import optimizers

if not native.available():
    pytest.skip(f"native backend unavailable: {native.unavailable_reason()}",
                allow_module_level=True)

F32, F64 = np.float32, np.float64
RTOL = 1e-5
FORMATS = ("NHWC", "NCHW")
ISAS = [isa for isa in native.ISAS if native.ISAS.index(isa) <= native.ISAS.index(
    native.best_isa())]


# ----------------------------------------------------------------------------- helpers


def to_fmt(a: np.ndarray, fmt: str) -> np.ndarray:
    return a if fmt == "NHWC" else np.ascontiguousarray(a.transpose(0, 3, 1, 2))


def hw_attr(fmt: str, h: int, w: int) -> list[int]:
    return [1, h, w, 1] if fmt == "NHWC" else [1, 1, h, w]


def run_both(build):
    """Build fetches with ``build(scope)`` and run them on the native and reference
    backends; returns (native results, reference results)."""
    root = mg.Scope.NewRootScope()
    fetches = build(root)
    results = [mg.ClientSession(root, backend=b).Run({}, fetches)
               for b in ("native", "reference")]
    return results[0], results[1]


def bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view(np.uint32 if a.dtype == F32 else np.uint64)


def assert_bitwise(actual, expected, what=""):
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, what
    assert np.array_equal(bits(actual), bits(expected)), (
        f"{what}: {int((bits(actual) != bits(expected)).sum())} of {actual.size} differ")


def _fail(message):
    return ValueError(message)


def window(h, w, kh, kw, padding):
    """The stride-1 Window of a convolution (output sizes <= 0 when the filter is larger
    than a VALID input)."""
    if padding == "VALID" and (kh > h or kw > w):
        return Window((kh, kw), (1, 1), (1, 1), ((0, 0), (0, 0)), (h - kh + 1, w - kw + 1))
    sizes = [windowed_output_size(n, k, 1, 1, padding, (0, 0), _fail, "size")
             for n, k in ((h, kh), (w, kw))]
    return Window((kh, kw), (1, 1), (1, 1), ((sizes[0][1], sizes[0][2]),
                                             (sizes[1][1], sizes[1][2])),
                  (sizes[0][0], sizes[1][0]))


def conv_expected(x, f, dy, win):
    """float64 (y, dx, df) from the numpy kernels, and the magnitudes of their sums
    (the same sums over |terms|): results must be within RTOL * magnitude."""
    x64, f64, dy64 = (a.astype(F64) for a in (x, f, dy))
    exact = (convolution_kernels.conv2d_nhwc(x64, f64, win),
             convolution_kernels.conv2d_backprop_input_nhwc(dy64, f64, x.shape, win),
             convolution_kernels.conv2d_backprop_filter_nhwc(x64, dy64, f.shape, win))
    ax, af, ady = np.abs(x64), np.abs(f64), np.abs(dy64)
    mags = (convolution_kernels.conv2d_nhwc(ax, af, win),
            convolution_kernels.conv2d_backprop_input_nhwc(ady, af, x.shape, win),
            convolution_kernels.conv2d_backprop_filter_nhwc(ax, ady, f.shape, win))
    return exact, mags


def assert_within(actual, exact, mag, what):
    err = np.abs(actual.astype(F64) - exact)
    bound = RTOL * (mag + 1e-30)
    worst = float((err / bound).max()) if err.size else 0.0
    assert worst <= 1.0, f"{what}: error {worst:.3g} x the allowed {RTOL} * magnitude"


def conv_ops(root, fmt, padding, x, f, dy):
    attrs = {"strides": [1, 1, 1, 1], "padding": padding, "data_format": fmt}
    xf, dyf = to_fmt(x, fmt), to_fmt(dy, fmt)
    return [ops.Conv2D(root, xf, f, **attrs),
            ops.Conv2DBackpropInput(root, list(xf.shape), f, dyf, **attrs),
            ops.Conv2DBackpropFilter(root, xf, list(f.shape), dyf, **attrs)]


def from_fmt(a: np.ndarray, fmt: str) -> np.ndarray:
    return a if fmt == "NHWC" else np.ascontiguousarray(a.transpose(0, 2, 3, 1))


# (n, h, w, c_in, c_out, kh, kw)
CONV_CASES = [
    (64, 8, 8, 32, 64, 3, 3),  # the digits CNN's second convolution
    (64, 8, 8, 1, 32, 3, 3),   # ... and its first
    (1, 7, 5, 3, 5, 3, 3),
    (2, 7, 5, 17, 33, 3, 3),
    (1, 5, 7, 1, 1, 1, 1),
    (3, 6, 4, 3, 1, 2, 3),     # even filter: asymmetric SAME pads
    (2, 9, 4, 17, 64, 5, 3),
    (2, 6, 6, 17, 80, 3, 3),   # two channel blocks, the second partial
    (1, 4, 5, 5, 130, 3, 3),   # three blocks
    (2, 1, 1, 3, 17, 3, 3),    # every tap but the centre is padding (SAME)
    (5, 3, 3, 32, 16, 3, 3),   # VALID: a single output pixel
]


def conv_id(case):
    return "x".join(str(v) for v in case)


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", CONV_CASES, ids=conv_id)
def test_conv_matches_numpy(case, fmt, padding):
    n, h, w, c, co, kh, kw = case
    win = window(h, w, kh, kw, padding)
    if min(win.out) <= 0:
        pytest.skip("filter larger than the VALID input")
    rng = np.random.default_rng(sum(case))
    x = rng.standard_normal((n, h, w, c)).astype(F32)
    f = rng.standard_normal((kh, kw, c, co)).astype(F32)
    dy = rng.standard_normal((n, *win.out, co)).astype(F32)
    got, ref = run_both(lambda root: conv_ops(root, fmt, padding, x, f, dy))
    exact, mags = conv_expected(x, f, dy, win)
    for name, a, r, e, m in zip(("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"),
                                got, ref, exact, mags):
        a, r = (v if name.endswith("Filter") else from_fmt(v, fmt) for v in (a, r))
        assert a.dtype == F32 and a.shape == e.shape
        assert_within(r, e, m, f"{name} numpy path")  # the bound is fair
        assert_within(a, e, m, f"{name} native")


def test_conv_uses_the_native_path():
    """The graph-level test above would pass vacuously if the C kernels never ran: the run
    metadata names the kernel each op ran with."""
    x = np.ones((1, 4, 4, 2), F32)
    f = np.ones((3, 3, 2, 3), F32)
    root = mg.Scope.NewRootScope()
    fetches = conv_ops(root, "NHWC", "SAME", x, f, np.ones((1, 4, 4, 3), F32))
    metadata = mg.RunMetadata()
    mg.ClientSession(root, backend="native").Run({}, fetches, run_metadata=metadata)
    kernels = {s.op_type: f"{s.backend}:{s.kernel}" for s in metadata.step_stats}
    assert [kernels[op] for op in ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter")] \
        == ["native:convolution_kernels.conv2d_native",
            "native:convolution_kernels.conv2d_backprop_input_native",
            "native:convolution_kernels.conv2d_backprop_filter_native"]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("strides", [(2, 2), (2, 1), (1, 3), (3, 2)])
def test_strided_forward_conv_runs_in_c(strides, isa, restore_isa):
    """The forward convolution takes any strides in C (its gradients stay at stride 1): on
    every ISA, both layouts and paddings, channel counts across vector and block edges,
    within rounding of the float64 sums (as the numpy kernel is)."""
    native.set_isa(isa)
    rng = np.random.default_rng(sum(strides))
    for n, h, w, c, co, kh, kw in [(2, 9, 8, 3, 16, 3, 3), (1, 11, 7, 17, 70, 3, 2),
                                   (3, 6, 6, 16, 5, 1, 1), (2, 5, 9, 8, 33, 2, 4)]:
        x = rng.standard_normal((n, h, w, c)).astype(F32)
        f = rng.standard_normal((kh, kw, c, co)).astype(F32)
        for fmt in FORMATS:
            for padding in ("SAME", "VALID"):
                attrs = {"strides": [1, *strides, 1] if fmt == "NHWC" else [1, 1, *strides],
                         "padding": padding, "data_format": fmt}
                metadata = mg.RunMetadata()
                root = mg.Scope.NewRootScope()
                y = ops.Conv2D(root, to_fmt(x, fmt), f, **attrs)
                got = mg.ClientSession(root, backend="native").Run(
                    {}, y, run_metadata=metadata)
                assert metadata.kernel_of(y.op.name) == \
                    "native:convolution_kernels.conv2d_native"
                sizes = [windowed_output_size(d, k, s, 1, padding, (0, 0), _fail, "size")
                         for d, k, s in ((h, kh, strides[0]), (w, kw, strides[1]))]
                win = Window((kh, kw), strides, (1, 1), ((sizes[0][1], sizes[0][2]),
                                                         (sizes[1][1], sizes[1][2])),
                             (sizes[0][0], sizes[1][0]))
                exact = convolution_kernels.conv2d_nhwc(x.astype(F64), f.astype(F64), win)
                mags = convolution_kernels.conv2d_nhwc(np.abs(x.astype(F64)),
                                                       np.abs(f.astype(F64)), win)
                assert_within(from_fmt(got, fmt), exact, mags, f"strides {strides}")
                ref = mg.ClientSession(root, backend="reference").Run({}, y)
                assert_within(from_fmt(ref, fmt), exact, mags, "numpy")  # a fair bound


@pytest.mark.parametrize("attrs,dtype", [
    ({"strides": [1, 1, 1, 1], "padding": "SAME"}, np.float16),
    ({"strides": [1, 1, 1, 1], "padding": "SAME"}, ml_dtypes.bfloat16),
    ({"strides": [1, 1, 1, 1], "padding": "SAME"}, F64),
], ids=["float16", "bfloat16", "float64"])
def test_conv_cases_the_c_code_does_not_take_are_unchanged(attrs, dtype):
    """Other dtypes than float32 stay on the numpy kernels (float32 with dilations or
    explicit pads: tests/test_conv_gemm_grad.py)."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 7, 6, 3)).astype(dtype)
    f = rng.standard_normal((3, 3, 3, 4)).astype(dtype)

    def build(root):
        y = ops.Conv2D(root, x, f, **attrs)
        dy = ops.OnesLike(root, y)
        return [y, ops.Conv2DBackpropInput(root, list(x.shape), f, dy, **attrs),
                ops.Conv2DBackpropFilter(root, x, list(f.shape), dy, **attrs)]

    for a, r in zip(*run_both(build)):
        assert a.dtype == r.dtype and a.tobytes() == r.tobytes()


def test_conv_edge_sizes():
    """Empty batches and a zero-size input stay on the numpy path (zeros)."""
    f = np.ones((3, 3, 2, 4), F32)
    got, ref = run_both(lambda root: [
        ops.Conv2D(root, np.ones((0, 4, 4, 2), F32), f, strides=[1, 1, 1, 1],
                   padding="SAME"),
        ops.Conv2DBackpropFilter(root, np.ones((0, 4, 4, 2), F32), [3, 3, 2, 4],
                                 np.ones((0, 4, 4, 4), F32), strides=[1, 1, 1, 1],
                                 padding="SAME")])
    for a, r in zip(got, ref):
        assert_bitwise(a, r)


# ----------------------------------------------------------------------------- pools

# (n, h, w, c, (kh, kw), (sh, sw))
POOL_CASES = [
    (64, 8, 8, 64, (2, 2), (2, 2)),  # the digits CNN's pool
    (1, 7, 5, 1, (2, 2), (2, 2)),    # odd sizes: VALID drops a row/column, SAME pads them
    (2, 7, 5, 3, (2, 2), (2, 2)),
    (3, 6, 7, 17, (3, 3), (3, 3)),
    (2, 7, 9, 70, (2, 3), (3, 3)),   # gaps between windows; > 64 channels
    (2, 5, 5, 5, (1, 1), (2, 2)),
    (2, 9, 8, 4, (3, 3), (2, 2)),    # overlapping windows: gradients scattered per image
    (1, 9, 8, 17, (3, 3), (2, 2)),   # ... gathered per input row (fewer images than threads)
    (3, 11, 10, 70, (3, 3), (2, 2)),
    (2, 6, 7, 5, (3, 3), (1, 1)),
    (2, 6, 37, 3, (2, 2), (2, 2)),   # NCHW rows of more than 16 windows, odd width
    (1, 5, 64, 2, (2, 2), (2, 2)),   # ... exactly 32 windows
    (2, 4, 2, 3, (2, 2), (2, 2)),    # NCHW even sizes, 16 / out_w output rows per vector:
    (3, 6, 4, 5, (2, 2), (2, 2)),    # 1, 2 (and a partial block), 8, 16 windows a row
    (1, 4, 16, 7, (2, 2), (2, 2)),
    (2, 2, 32, 3, (2, 2), (2, 2)),
]


def pool_ops(root, fmt, padding, x, g, ksize, strides):
    attrs = {"ksize": hw_attr(fmt, *ksize), "strides": hw_attr(fmt, *strides),
             "padding": padding, "data_format": fmt}
    xf = to_fmt(x, fmt)
    y = ops.MaxPool(root, xf, **attrs)
    return [y, ops.MaxPoolGrad(root, xf, y, to_fmt(g, fmt), **attrs)]


def pool_out(h, w, ksize, strides, padding):
    return tuple(windowed_output_size(n, k, s, 1, padding, (0, 0), _fail, "size")[0]
                 for n, k, s in ((h, ksize[0], strides[0]), (w, ksize[1], strides[1])))


@pytest.mark.parametrize("values", ["ties", "normal", "special"])
@pytest.mark.parametrize("padding", ["SAME", "VALID"])
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", POOL_CASES, ids=lambda c: "x".join(map(str, c[:4])) +
                         f"_k{c[4][0]}{c[4][1]}s{c[5][0]}{c[5][1]}")
def test_max_pool_matches_numpy_bit_for_bit(case, fmt, padding, values):
    n, h, w, c, ksize, strides = case
    rng = np.random.default_rng(c + h)
    if values == "ties":  # many equal maxima: the gradient goes to the first one
        x = rng.integers(0, 3, (n, h, w, c)).astype(F32)
    elif values == "normal":
        x = rng.standard_normal((n, h, w, c)).astype(F32)
    else:
        x = rng.choice(np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1.0, -1.0], F32),
                       (n, h, w, c))
    oh, ow = pool_out(h, w, ksize, strides, padding)
    g = rng.standard_normal((n, oh, ow, c)).astype(F32)
    g[..., ::3] = -0.0  # routed -0 must come out as 0 + -0 = +0, as numpy adds it
    got, ref = run_both(lambda root: pool_ops(root, fmt, padding, x, g, ksize, strides))
    # max of a window holding both 0 and -0: either zero (numpy.maximum's own choice
    # depends on its SIMD vs scalar loop); everything else, NaN included, is equal
    np.testing.assert_array_equal(got[0], ref[0], "MaxPool")
    assert_bitwise(got[1], ref[1], "MaxPoolGrad")


@pytest.mark.parametrize("threads", ["1", "2", "3"])
def test_overlapping_max_pool_grad_bits_for_any_thread_count(threads, monkeypatch):
    """Overlapping windows scatter per image (images >= threads, or single-channel NCHW
    planes) or gather per input row: the numpy kernel's bits either way."""
    monkeypatch.setenv("MINIGRAPH_NUM_THREADS", threads)
    rng = np.random.default_rng(int(threads))
    for n, h, w, c in ((1, 9, 8, 17), (2, 12, 11, 3), (4, 7, 9, 33)):
        x = rng.integers(0, 4, (n, h, w, c)).astype(F32)  # ties: the first maximum wins
        for fmt, padding in itertools.product(FORMATS, ("SAME", "VALID")):
            oh, ow = pool_out(h, w, (3, 3), (2, 2), padding)
            g = rng.standard_normal((n, oh, ow, c)).astype(F32)
            got, ref = run_both(functools.partial(pool_ops, fmt=fmt, padding=padding, x=x,
                                                  g=g, ksize=(3, 3), strides=(2, 2)))
            assert_bitwise(got[1], ref[1], f"MaxPoolGrad {n}x{h}x{w}x{c} {fmt} {padding}")


def test_max_pool_uses_the_native_path():
    x = np.arange(32, dtype=F32).reshape(1, 4, 4, 2)
    root = mg.Scope.NewRootScope()
    fetches = pool_ops(root, "NHWC", "VALID", x, np.ones((1, 2, 2, 2), F32), (2, 2), (2, 2))
    metadata = mg.RunMetadata()
    mg.ClientSession(root, backend="native").Run({}, fetches, run_metadata=metadata)
    kernels = {s.op_type: f"{s.backend}:{s.kernel}" for s in metadata.step_stats}
    assert kernels["MaxPool"] == "native:pooling_kernels.max_pool_native"
    assert kernels["MaxPoolGrad"] == "native:pooling_kernels.max_pool_grad_native"


def test_max_pool_other_dtypes_unchanged():
    x = np.random.default_rng(2).standard_normal((2, 6, 6, 3))
    for dtype in (np.float16, F64, np.int32):
        xd = (x * 4).astype(dtype)
        got, ref = run_both(lambda root, xd=xd: [ops.MaxPool(
            root, xd, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="SAME")])
        assert got[0].dtype == dtype and got[0].tobytes() == ref[0].tobytes()


# ----------------------------------------------------------------------------- relu


SPECIAL = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 3.5, -2.0],
                   F32)


@pytest.mark.parametrize("size", [0, 1, 17, 1000, 100_003])
def test_relu_and_grad_match_numpy_bit_for_bit(size):
    rng = np.random.default_rng(size)
    x = rng.choice(SPECIAL, size).astype(F32) * rng.integers(1, 3, size).astype(F32)
    g = rng.standard_normal(size).astype(F32)
    g[::5] = -0.0
    got, ref = run_both(lambda root: [ops.Relu(root, x), ops.ReluGrad(root, g, x)])
    assert_bitwise(got[0], ref[0], "Relu")
    assert_bitwise(got[1], ref[1], "ReluGrad")


def test_relu_4d_and_other_dtypes():
    x = np.random.default_rng(3).standard_normal((3, 5, 7, 2)).astype(F32)
    got, ref = run_both(lambda root: [ops.Relu(root, x), ops.Relu(root, x.astype(F64)),
                                      ops.ReluGrad(root, x, x),
                                      ops.Relu(root, x.astype(np.float16))])
    for a, r in zip(got, ref):
        assert_bitwise(a.astype(F32), r.astype(F32))
        assert a.dtype == r.dtype and a.shape == r.shape


# ----------------------------------------------------------------------------- adam


class NesterovAdam(mg.train.Adam):
    def apply_one(self, scope, grad, var):
        beta1_power, beta2_power = self._beta_powers(scope, var)
        m, v = optimizers._slot(scope, var, "m"), optimizers._slot(scope, var, "v")
        return ops.ApplyAdam(scope, var, m, v, beta1_power, beta2_power,
                             *(optimizers._scalar(scope, value, var) for value in (
                                 self.learning_rate, self.beta1, self.beta2, self.epsilon)),
                             grad, use_nesterov=True).op


def adam_graph(nesterov: bool, steps: int, backend: str, shapes=((37,), (3, 5, 2))):
    """Variables after ``steps`` Adam steps on a loss with numpy-only gradients."""
    root = mg.Scope.NewRootScope()
    rng = np.random.default_rng(4)
    variables, loss = [], None
    for i, shape in enumerate(shapes):
        init = rng.standard_normal(shape).astype(F32)
        var = mg.train.variable(root, f"w{i}", list(shape),
                                lambda s, shp, dt, v=init: ops.Const(s, v))
        target = ops.Const(root, rng.standard_normal(shape).astype(F32))
        diff = ops.Sub(root, var, target)
        term = ops.Mean(root, ops.Mul(root, ops.Mul(root, diff, diff), diff),
                        ops.Const(root, list(range(len(shape)))))
        loss = term if loss is None else ops.Add(root, loss, term)
        variables.append(var)
    optimizer = NesterovAdam(0.01) if nesterov else mg.train.Adam(0.01)
    step = optimizer.minimize(root, loss, variables)
    session = mg.ClientSession(root, backend=backend)
    session.Run({}, [], targets=mg.train.global_variables_initializer(root))
    for _ in range(steps):
        session.Run({}, [], targets=step)
    return session.Run({}, variables)


@pytest.mark.parametrize("nesterov", [False, True])
def test_adam_matches_numpy_bit_for_bit(nesterov):
    native_values = adam_graph(nesterov, 5, "native")
    reference_values = adam_graph(nesterov, 5, "reference")
    for a, r in zip(native_values, reference_values):
        assert_bitwise(a, r, "Adam variables")


def test_adam_function_formula():
    rng = np.random.default_rng(5)
    var, m, grad = (rng.standard_normal(1001).astype(F32) for _ in range(3))
    v = rng.random(1001).astype(F32)
    lr_t, b1, b2, eps = F32(0.01), F32(0.9), F32(0.999), F32(1e-7)
    for nesterov in (False, True):
        got = c_apply_adam(var, m, v, grad, lr_t, b1, b2, eps, nesterov)
        m1 = m + (grad - m) * (1 - b1)
        v1 = v + (grad * grad - v) * (1 - b2)
        step = m1 * b1 + (1 - b1) * grad if nesterov else m1
        expected = [var - lr_t * step / (np.sqrt(v1) + eps), m1, v1]
        for a, e in zip(got, expected):
            assert_bitwise(a, e, f"adam nesterov={nesterov}")
        assert np.array_equal(m, m) and got[0] is not var  # inputs untouched, new arrays


# ----------------------------------------------------------------------------- determinism


def all_native_outputs(seed=6):
    """Every native function on one set of awkward inputs (NHWC and NCHW)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((5, 9, 7, 19)).astype(F32)
    f = rng.standard_normal((3, 3, 19, 70)).astype(F32)
    dy = rng.standard_normal((5, 9, 7, 70)).astype(F32)
    pads = ((1, 1), (1, 1))
    out = []
    for cl in (True, False):
        xf, dyf = (a if cl else np.ascontiguousarray(a.transpose(0, 3, 1, 2)) for a in (x, dy))
        out += [c_conv2d(xf, f, pads, (9, 7), cl),
                c_conv2d_backprop_input(dyf, f, (9, 7), pads, cl),
                c_conv2d_backprop_filter(xf, dyf, (3, 3), pads, cl)]
        p = c_max_pool(xf, (2, 2), (2, 2), ((0, 0), (0, 0)), (4, 3), cl)
        out += [p, c_max_pool_grad(xf, p, (2, 2), (2, 2), ((0, 0), (0, 0)), (4, 3), cl)]
        xe = np.ascontiguousarray(xf[:, :, :8, :4] if not cl else xf[:, :8, :4])  # even sizes
        p = c_max_pool(xe, (2, 2), (2, 2), ((0, 0), (0, 0)), (4, 2), cl)
        out += [p, c_max_pool_grad(xe, p, (2, 2), (2, 2), ((0, 0), (0, 0)), (4, 2), cl)]
    out += [c_relu(x), c_relu_grad(dy, dy)]
    return out


def test_deterministic_for_any_thread_count(monkeypatch):
    first = all_native_outputs()
    for threads in ("1", "2", "3", "7"):
        monkeypatch.setenv("MINIGRAPH_NUM_THREADS", threads)
        for a, b in zip(first, all_native_outputs()):
            assert_bitwise(a, b, f"{threads} threads")


@pytest.fixture
def restore_isa():
    before = native.isa()
    yield
    native.set_isa(before)


@pytest.mark.parametrize("isa", ISAS)
def test_every_isa(isa, restore_isa):
    """The generic (non-AVX-512) kernels too: against the numpy path."""
    assert native.set_isa(isa) == isa
    rng = np.random.default_rng(7)
    for case in [(2, 7, 5, 17, 33, 3, 3), (3, 6, 4, 3, 70, 2, 3), (2, 5, 5, 1, 1, 3, 3)]:
        n, h, w, c, co, kh, kw = case
        for padding in ("SAME", "VALID"):
            win = window(h, w, kh, kw, padding)
            x = rng.standard_normal((n, h, w, c)).astype(F32)
            f = rng.standard_normal((kh, kw, c, co)).astype(F32)
            dy = rng.standard_normal((n, *win.out, co)).astype(F32)
            exact, mags = conv_expected(x, f, dy, win)
            for fmt in FORMATS:
                got, _ = run_both(functools.partial(conv_ops, fmt=fmt, padding=padding, x=x,
                                                    f=f, dy=dy))
                for i, (a, e, m) in enumerate(zip(got, exact, mags)):
                    assert_within(a if i == 2 else from_fmt(a, fmt), e, m, f"{isa} {case}")
    x = rng.integers(0, 3, (3, 7, 5, 70)).astype(F32)
    g = rng.standard_normal((3, 4, 3, 70)).astype(F32)
    for fmt in FORMATS:
        got, ref = run_both(functools.partial(pool_ops, fmt=fmt, padding="SAME", x=x, g=g,
                                              ksize=(2, 2), strides=(2, 2)))
        for a, r in zip(got, ref):
            assert_bitwise(a, r, f"{isa} pools")
    for a, r in zip(adam_graph(True, 2, "native"), adam_graph(True, 2, "reference")):
        assert_bitwise(a, r, f"{isa} adam")


def _child(queue):
    queue.put([a.tobytes() for a in all_native_outputs()])


def test_works_in_a_forked_child():
    """The worker pool does not survive fork(): a child runs serially, same results."""
    expected = [a.tobytes() for a in all_native_outputs()]  # the parent used its threads
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_child, args=(queue,))
    child.start()
    try:
        got = queue.get(timeout=60)  # before join: the child exits once its data is read
    finally:
        child.join(10)
        if child.exitcode is None:
            child.kill()
    assert child.exitcode == 0, "the forked child hung or crashed"
    assert got == expected


def test_convolutions_from_many_threads_at_once_match_one_thread():
    """The convolutions' worker pool runs one job at a time; a call made while another
    thread's job runs does its items itself. Eight Python threads at once, each result
    bit for bit the single-threaded one."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(7)
    cases = [(rng.standard_normal((4, 12, 12, 8)).astype(F32),
              rng.standard_normal((3, 3, 8, 20)).astype(F32)) for _ in range(8)]

    def all_three(x, f):
        y = c_conv2d(x, f, ((1, 1), (1, 1)), (12, 12), True)
        return (y, c_conv2d_backprop_input(y, f, (12, 12), ((1, 1), (1, 1)), True),
                c_conv2d_backprop_filter(x, y, (3, 3), ((1, 1), (1, 1)), True))

    native.set_num_threads(1)
    try:
        expected = [all_three(x, f) for x, f in cases]
        native.set_num_threads(3)
        with ThreadPoolExecutor(8) as threads:
            for _ in range(5):
                for got, want in zip(threads.map(lambda case: all_three(*case), cases),
                                     expected):
                    for a, b in zip(got, want):
                        assert_bitwise(a, b, "concurrent convolution")
    finally:
        native.set_num_threads(None)


def test_rejects_bad_geometry():
    x = np.ones((1, 4, 4, 2), F32)
    with pytest.raises(ValueError):  # input-gradient pads must be < the filter size
        c_conv2d_backprop_input(np.ones((1, 4, 4, 3), F32), np.ones((3, 3, 2, 3), F32),
                                     (4, 4), ((3, 0), (1, 1)), True)
    with pytest.raises(ValueError):  # a pad as large as the window
        c_max_pool_grad(x, np.ones((1, 3, 3, 2), F32), (2, 2), (1, 1),
                        ((2, 0), (0, 0)), (3, 3), True)


# ----------------------------------------------------------------------------- huge windows


def clipped_windows(in_hw, ksize, strides, padding, explicit):
    """(p, q, rows, cols) per output pixel: its window clipped to the input, in float64
    reference terms (the leading pads from TF's window geometry)."""
    sizes = [windowed_output_size(n, k, s, 1, padding, e, _fail, "size")
             for n, k, s, e in zip(in_hw, ksize, strides, explicit)]
    (oh, top, _), (ow, left, _) = sizes
    for p in range(oh):
        r0 = p * strides[0] - top
        rows = range(max(r0, 0), min(r0 + ksize[0], in_hw[0]))
        for q in range(ow):
            c0 = q * strides[1] - left
            yield p, q, rows, range(max(c0, 0), min(c0 + ksize[1], in_hw[1]))


def pool_reference(x, g_out, g_in, ksize, strides, padding, explicit):
    """float64 NHWC (max, mean, MaxPoolGrad, AvgPoolGrad, MaxPoolGradGrad) by the formulas:
    per output, the max / mean over the clipped window; the max gradient to the window's
    first maximum in row-major order; the mean gradient g / count over the window."""
    n, h, w, c = x.shape
    x64, g64, gi64 = x.astype(F64), g_out.astype(F64), g_in.astype(F64)
    oh, ow = g_out.shape[1:3]
    out = [np.zeros((n, oh, ow, c)), np.zeros((n, oh, ow, c)), np.zeros(x.shape),
           np.zeros(x.shape), np.zeros((n, oh, ow, c))]
    for p, q, rows, cols in clipped_windows((h, w), ksize, strides, padding, explicit):
        window = x64[:, rows][:, :, cols].reshape(n, -1, c)
        out[0][:, p, q] = window.max(1)
        out[1][:, p, q] = window.mean(1)
        first = window.argmax(1)  # first maximum in row-major order
        for b in range(n):
            for ch in range(c):
                r, col = rows[first[b, ch] // len(cols)], cols[first[b, ch] % len(cols)]
                out[2][b, r, col, ch] += g64[b, p, q, ch]
                out[4][b, p, q, ch] = gi64[b, r, col, ch]
        out[3][:, rows.start:rows.stop, cols.start:cols.stop] += (
            g64[:, p, q] / (len(rows) * len(cols)))[:, None, None]
    return out


HUGE_POOLS = [  # (n, h, w, c), ksize, strides, padding, explicit pads (H, W)
    ((2, 8, 8, 3), (3000, 3000), (1, 1), "SAME", None),
    ((1, 8, 8, 2), (3000, 3000), (3000, 3000), "SAME", None),
    ((2, 7, 5, 3), (3000, 2), (1, 2), "SAME", None),
    ((1, 6, 9, 2), (4, 10**9), (3, 5), "SAME", None),
    ((2, 9, 8, 1), (2**31 - 1, 2**31 - 1), (2, 1), "SAME", None),
    ((1, 5, 6, 2), (40, 3), (1, 2), "EXPLICIT", ((39, 38), (1, 2))),
    ((1, 4, 3, 2), (30, 30), (7, 29), "EXPLICIT", ((29, 29), (0, 29))),
]


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", HUGE_POOLS, ids=lambda c: f"k{c[1][0]}x{c[1][1]}_{c[3]}")
def test_windows_far_larger_than_the_input_are_clipped(case, fmt, dtype):
    """Pools cost (output size) x (clipped window), not ksize: a 3000 x 3000 (even
    2**31 - 1) window over 8 x 8 finishes at once and equals the float64 formulas, on both
    backends (native: MaxPool, MaxPoolGrad, AvgPool and AvgPoolGrad in C)."""
    shape, ksize, strides, padding, explicit = case
    explicit = explicit or ((0, 0), (0, 0))
    rng = np.random.default_rng(sum(shape))
    x = rng.integers(-2, 3, shape).astype(dtype)  # ties: the gradient goes to the first
    x[0, 0, 0, 0] = 0.5
    oh, ow = (windowed_output_size(n, k, s, 1, padding, e, _fail, "size")[0]
              for n, k, s, e in zip(shape[1:3], ksize, strides, explicit))
    g = rng.standard_normal((shape[0], oh, ow, shape[3])).astype(dtype)
    gg = rng.standard_normal(shape).astype(dtype)
    expected = pool_reference(x, g, gg, ksize, strides, padding, explicit)
    attrs = {"ksize": hw_attr(fmt, *ksize), "strides": hw_attr(fmt, *strides),
             "padding": padding, "data_format": fmt}
    if padding == "EXPLICIT":
        attrs["explicit_paddings"] = [v for pair in to_fmt_list(
            [(0, 0), explicit[0], explicit[1], (0, 0)], fmt) for v in pair]

    def build(root):
        xf, gf = to_fmt(x, fmt), to_fmt(g, fmt)
        y = ops.MaxPool(root, xf, **attrs)
        fetches = [y, ops.MaxPoolGrad(root, xf, y, gf, **attrs)]
        if padding != "EXPLICIT":
            plain = {k: v for k, v in attrs.items() if k != "explicit_paddings"}
            fetches += [ops.AvgPool(root, xf, **plain),
                        ops.AvgPoolGrad(root, list(xf.shape), gf, **plain),
                        ops.MaxPoolGradGrad(root, xf, y, to_fmt(gg, fmt), **plain)]
        return fetches

    rtol = 1e-6 if dtype == F32 else 1e-13
    for results in run_both(build):
        order = [0, 2] if padding == "EXPLICIT" else [0, 2, 1, 3, 4]
        for got, k in zip(results, order):
            got = from_fmt(got, fmt)
            assert got.dtype == dtype
            np.testing.assert_allclose(got, expected[k], rtol=rtol, atol=rtol, err_msg=str(k))


def to_fmt_list(nhwc: list, fmt: str) -> list:
    return nhwc if fmt == "NHWC" else [nhwc[0], nhwc[3], nhwc[1], nhwc[2]]


def test_clipped_max_pool_grad_keeps_nan_and_overlap_rules():
    """The clipped (separable) argmax keeps the sequential scan's rule: a window whose first
    element is NaN routes to it, otherwise NaN never wins; overlapping windows add up."""
    x = np.array([[1, 1, 7], [np.nan, 5, 2], [3, 4, np.nan]], F64).reshape(1, 3, 3, 1)
    g = np.arange(1, 5, dtype=F64).reshape(1, 2, 2, 1)
    root = mg.Scope.NewRootScope()
    attrs = {"ksize": [1, 2, 2, 1], "strides": [1, 1, 1, 1], "padding": "VALID"}
    y = ops.MaxPool(root, x, **attrs)
    dx = ops.MaxPoolGrad(root, x, y, g, **attrs)
    ddy = ops.MaxPoolGradGrad(root, x, y, x * 10, **attrs)
    got_y, got_dx, got_ddy = mg.ClientSession(root, backend="reference").Run({}, [y, dx, ddy])
    # windows: (0,0) [1 1; nan 5] -> 5 at (1,1); (0,1) [1 7; 5 2] -> 7 at (0,2);
    # (1,0) [nan 5; 3 4] -> first is NaN: (1,0); (1,1) [5 2; 4 nan] -> 5 at (1,1)
    expected = np.zeros((3, 3))
    expected[1, 1] = 1 + 4
    expected[0, 2] = 2
    expected[1, 0] = 3
    np.testing.assert_array_equal(got_dx[0, :, :, 0], expected)
    # MaxPoolGradGrad gathers at the first element equal to y (TF's rule): MaxPool ignored
    # the NaN, so window (1,0) gives 5 and gathers at (1,1), not at MaxPoolGrad's NaN
    np.testing.assert_array_equal(got_y[0, :, :, 0], [[5, 7], [5, 5]])
    np.testing.assert_array_equal(got_ddy[0, :, :, 0], [[50, 70], [50, 50]])


# ----------------------------------------------------------------------------- wrapper safety


def misaligned(values) -> np.ndarray:
    """A float32 view of ``values`` starting one byte into a buffer (misaligned)."""
    values = np.asarray(values, F32)
    buf = bytearray(values.nbytes + 1)
    view = np.frombuffer(buf, F32, count=values.size, offset=1).reshape(values.shape)
    buf[1:] = values.tobytes()
    assert not view.flags.aligned
    return view


ODD_ARRAYS = {  # name: (array, ...) as the wrappers may receive them
    "0-d": np.array(-1.5, F32),
    "empty": np.zeros((2, 0, 3), F32),
    "strided": np.arange(-10, 10, dtype=F32)[::3],
    "transposed": np.arange(-6, 6, dtype=F32).reshape(3, 4).T,
    "misaligned": misaligned(np.arange(-3, 4, dtype=F32).reshape(7, 1)),
    "float64": np.linspace(-2, 2, 5),
    "big-endian": np.arange(-2, 3, dtype=">f4"),
}


@pytest.mark.parametrize("name", list(ODD_ARRAYS))
def test_elementwise_wrappers_keep_the_shape(name):
    """relu, relu_grad and apply_adam return exactly their input's shape (0-d included)
    with the formula's values, whatever the layout, alignment or dtype they are given."""
    x = ODD_ARRAYS[name]
    x32 = np.asarray(x, F32)
    y = c_relu(x)
    assert y.shape == x.shape and y.dtype == F32
    assert_bitwise(y, np.maximum(x32, F32(0)))
    dx = c_relu_grad(x, x)
    assert dx.shape == x.shape
    assert_bitwise(dx, x32 * (x32 > 0).astype(F32))  # TF: gradients times the 0/1 mask
    v = np.abs(x32)
    got = c_apply_adam(x, x, v, x, 0.5, 0.9, 0.999, 1e-7, False)
    m1 = x32 + (x32 - x32) * (1 - F32(0.9))
    v1 = v + (x32 * x32 - v) * (1 - F32(0.999))
    for a, e in zip(got, [x32 - F32(0.5) * m1 / (np.sqrt(v1) + F32(1e-7)), m1, v1]):
        assert a.shape == x.shape and a.dtype == F32
        assert_bitwise(a, e.astype(F32))


def test_wrappers_reject_mismatched_buffers():
    """Every buffer C reads or writes is checked against the sizes C is given: mismatches
    are a ValueError, never a read past a buffer."""
    big, small = np.ones(1000, F32), np.ones(10, F32)
    with pytest.raises(ValueError):  # the gradient smaller than the variable
        c_apply_adam(big, big, big, small, 0.1, 0.9, 0.999, 1e-7, False)
    for i in range(3):  # m or v smaller
        args = [big, big, big]
        args[i] = small
        with pytest.raises(ValueError):
            c_apply_adam(big, *args, 0.1, 0.9, 0.999, 1e-7, True)
    with pytest.raises(ValueError):  # same size, other shape
        c_apply_adam(big, big, big, big.reshape(10, 100), 0.1, 0.9, 0.999, 1e-7, False)
    with pytest.raises(ValueError):
        c_relu_grad(big, small)
    with pytest.raises(ValueError):
        c_relu_grad(np.ones((2, 3), F32), np.ones((3, 2), F32))
    x = np.ones((1, 4, 4, 2), F32)
    pads = ((0, 0), (0, 0))
    for bad in (np.ones((4, 4), F32), np.array(1.0, F32)):  # pools take 4-D tensors only
        with pytest.raises(ValueError):
            c_max_pool(bad, (2, 2), (2, 2), pads, (2, 2), True)
    with pytest.raises(ValueError):  # output rows past the input
        c_max_pool(x, (2, 2), (2, 2), pads, (3, 2), True)
    with pytest.raises(ValueError):
        c_max_pool(x, (2, 2), (2, 2), pads, (2, 5), False)
    with pytest.raises(ValueError):  # pads not smaller than the window
        c_max_pool(x, (2, 2), (2, 2), ((2, 0), (0, 0)), (2, 2), True)
    with pytest.raises(ValueError):  # geometry beyond int32
        c_max_pool(x, (2**40, 2), (1, 2), pads, (4, 2), True)
    with pytest.raises(ValueError):
        c_max_pool(x, (-1, 2), (1, 2), pads, (4, 2), True)
    with pytest.raises(ValueError):  # grad not of the pool's shape
        c_max_pool_grad(x, np.ones((1, 2, 2, 1), F32), (2, 2), (2, 2), pads, (2, 2), True)
    with pytest.raises(ValueError):
        c_max_pool_grad(x, np.ones((1, 3, 3, 2), F32), (2, 2), (2, 2), pads, (3, 3), True)
    f = np.ones((3, 3, 3, 4), F32)  # in_channels 3, x has 2
    with pytest.raises(ValueError):
        c_conv2d(x, f, ((1, 1), (1, 1)), (4, 4), True)
    with pytest.raises(ValueError):  # dy has 5 channels, the filter's out_channels are 4
        c_conv2d_backprop_input(np.ones((1, 4, 4, 5), F32), f, (4, 4), ((1, 1), (1, 1)),
                                     True)
    with pytest.raises(ValueError):  # batch 1 vs 3
        c_conv2d_backprop_filter(x, np.ones((3, 4, 4, 4), F32), (3, 3), ((1, 1), (1, 1)),
                                      True)
    with pytest.raises(ValueError):  # empty filter
        c_conv2d(x, np.ones((3, 3, 2, 0), F32), ((1, 1), (1, 1)), (4, 4), True)


def test_pool_and_conv_wrappers_copy_misaligned_and_strided_inputs():
    """Misaligned or strided float32 tensors are copied to aligned C-contiguous buffers
    first: same results as the plain arrays."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 6, 6, 3)).astype(F32)
    g = rng.standard_normal((2, 3, 3, 3)).astype(F32)
    f = rng.standard_normal((3, 3, 3, 4)).astype(F32)
    pads = ((0, 0), (0, 0))
    wide = np.repeat(x, 2, axis=3)[..., ::2]  # a strided view equal to x
    for variant in (misaligned(x), wide):
        assert_bitwise(c_max_pool(variant, (2, 2), (2, 2), pads, (3, 3), True),
                       c_max_pool(x, (2, 2), (2, 2), pads, (3, 3), True))
        assert_bitwise(c_max_pool_grad(variant, misaligned(g), (2, 2), (2, 2), pads,
                                            (3, 3), True),
                       c_max_pool_grad(x, g, (2, 2), (2, 2), pads, (3, 3), True))
        assert_bitwise(c_conv2d(variant, misaligned(f), ((1, 1), (1, 1)), (6, 6), True),
                       c_conv2d(x, f, ((1, 1), (1, 1)), (6, 6), True))


# ----------------------------------------------------------------------------- training


def test_digits_training_reaches_reference_accuracy():
    from threadpoolctl import threadpool_limits

    from minigraph.examples.train_digits_cnn import build, load_digits, parse

    x_train, y_train, x_test, y_test = load_digits(0)
    accuracies = {}
    with threadpool_limits(1, user_api="blas"):
        for backend in ("native", "reference"):
            g = build(parse(["--backend", backend]))
            session = mg.ClientSession(g["root"], backend=backend)
            session.Run({}, [], targets=mg.train.global_variables_initializer(g["root"]))
            order = np.random.default_rng(0).permutation(len(y_train))
            for _ in range(2):
                for begin in range(0, len(order), 64):
                    index = order[begin:begin + 64]
                    session.Run({g["images"]: x_train[index], g["labels"]: y_train[index]},
                                [], targets=g["step"])
            accuracies[backend] = float(session.Run(
                {g["images"]: x_test, g["labels"]: y_test}, g["eval_accuracy"]))
    assert accuracies["reference"] > 0.85, accuracies
    assert abs(accuracies["native"] - accuracies["reference"]) <= 0.03, accuracies



# ----------------------------------------------------------------------------- Transpose


@pytest.mark.parametrize("shape, perm", [
    ((2, 8, 3), (1, 0, 2)),  # a recurrent layer's [B, T, F] -> [T, B, F]: numpy's copy
    ((4, 4096), (1, 0)),  # 16384 elements: c_transpose from here on
    ((8, 32, 64, 3), (0, 3, 1, 2)),  # NHWC -> NCHW
    ((3, 5, 7, 11, 13), (4, 2, 0, 3, 1)),
    ((1, 128, 1, 256), (3, 2, 1, 0)),  # size-1 axes dropped, the rest merged
    ((64, 1024), (0, 1)),  # the identity permutation
])
@pytest.mark.parametrize("threads", [1, 2])
def test_native_transpose_is_numpy_s_copy_on_both_sides_of_the_small_limit(shape, perm,
                                                                           threads):
    x = np.random.default_rng(0).standard_normal(shape).astype(F32)
    root = mg.Scope.NewRootScope()
    y = ops.Transpose(root, x, np.array(perm, np.int32))
    previous = native.num_threads()
    native.set_num_threads(threads)
    try:
        got = mg.ClientSession(root, backend="native").Run(y)
    finally:
        native.set_num_threads(previous)
    assert got.flags.c_contiguous
    np.testing.assert_array_equal(got, np.transpose(x, perm))
