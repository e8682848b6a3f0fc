"""The convolution family with infinities and NaNs in its operands, against TensorFlow 2.21's
CPU kernels (``@pytest.mark.oracle``): NaN, +inf and -inf at exactly TensorFlow's positions,
the finite rest within rtol = atol = 1e-4.

TensorFlow's CPU kernels multiply an operand only where the window reads real input, never
by the padding's zeros: a non-finite filter weight gives +-inf only where its tap reaches the
input (im2col over a zero-padded input would give 0 * inf = NaN at the borders), and a
non-finite out_backprop pixel gives a finite filter gradient for the taps that read padding
there. The exception is EXPLICIT padding in the gradients that TensorFlow runs on explicitly
zero-padded tensors: Conv2DBackpropFilter and DepthwiseConv2dNativeBackpropFilter (the
padding's zeros multiply out_backprop) and DepthwiseConv2dNativeBackpropInput (the zeros
around and between out_backprop's pixels multiply every weight).

Every op of the family over hypothesis-drawn batch, sizes, channels, groups (Conv2D), kernel
sizes, strides, dilations, SAME/VALID/EXPLICIT padding, data formats and positions of inf,
-inf and NaN in one operand; each operand both a graph constant (run twice: the second run
reads the cached finiteness) and a fed value; on every backend. TensorFlow's CPU kernels take
NHWC (NDHWC) only: the NCHW (NCDHW) cases run minigraph on transposed tensors. Excluded are
the combinations TensorFlow refuses (dilations with EXPLICIT padding in the Conv2D backprops,
EXPLICIT padding in Conv3D) and dilations in the depthwise backprops, whose TensorFlow CPU
kernels ignore the dilations (or refuse them) where the op's gradient needs them.
"""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest
from conftest import BACKENDS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_nn_ops import ref_dim

import minigraph as mg
from minigraph import ops

F32 = np.float32
SPECIALS = (np.inf, -np.inf, np.nan)


@pytest.fixture(scope="module")
def tf():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return pytest.importorskip("tensorflow")


def same_specials_and_close(actual: np.ndarray, expected: np.ndarray, what: str = "") -> None:
    """NaN, +inf and -inf exactly where ``expected`` has them; the finite rest close."""
    assert actual.shape == expected.shape, what
    for special in (np.isnan, np.isposinf, np.isneginf):
        np.testing.assert_array_equal(special(actual), special(expected),
                                      err_msg=f"{what} {special.__name__}")
    finite = np.isfinite(expected)
    np.testing.assert_allclose(actual[finite], expected[finite], rtol=1e-4, atol=1e-4,
                               err_msg=what)


# ----------------------------------------------------------------------------- the family

# op -> (forward op, spatial dims, which input is which: "x", "f", "dy" or "sizes")
FAMILY = {
    "Conv2D": ("Conv2D", 2, ("x", "f")),
    "Conv2DBackpropInput": ("Conv2D", 2, ("x_sizes", "f", "dy")),
    "Conv2DBackpropFilter": ("Conv2D", 2, ("x", "f_sizes", "dy")),
    "DepthwiseConv2dNative": ("DepthwiseConv2dNative", 2, ("x", "f")),
    "DepthwiseConv2dNativeBackpropInput": ("DepthwiseConv2dNative", 2, ("x_sizes", "f", "dy")),
    "DepthwiseConv2dNativeBackpropFilter": ("DepthwiseConv2dNative", 2, ("x", "f_sizes", "dy")),
    "Conv3D": ("Conv3D", 3, ("x", "f")),
    "Conv3DBackpropInputV2": ("Conv3D", 3, ("x_sizes", "f", "dy")),
    "Conv3DBackpropFilterV2": ("Conv3D", 3, ("x", "f_sizes", "dy")),
}
# TensorFlow's CPU kernels (oneDNN) pick other algorithms for some shapes, and some of those
# multiply the padding's zeros (NaN where the rule above gives +-inf or a finite value):
# an input of one channel (per group; Conv2D with a batch above 1, Conv3D, a depthwise
# multiplier above 1, some gradients), a tensor one or two pixels wide along a spatial dim
# or narrower than the (dilated) filter, filter gradients dilated along the outermost
# spatial dim (Conv3D's depth; Conv2D's height with strides above 1), a dilated depthwise
# convolution of multiplier 1 with EXPLICIT padding (outputs that read only padding), and
# input gradients with VALID padding and strides above 1 (NaN at positions no rule we found
# predicts, seen with small inputs). The family is drawn outside those: 2 or more channels
# per group, inputs 3 and outputs 2 or more pixels along every spatial dim and as wide as
# the dilated filter, undilated filter gradients and EXPLICIT depthwise convolutions,
# stride 1 for VALID input gradients.
TF_NAMES = {"x": "input", "f": "filter", "dy": "out_backprop", "x_sizes": "input_sizes",
            "f_sizes": "filter_sizes"}


def _channels_first(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.moveaxis(a, -1, 1))


def _channels_last(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.moveaxis(a, 1, -1))


@st.composite
def cases(draw, op: str):
    """(op, tensors by role (channels-last), attrs (channels-last), minigraph's data_format)
    with one operand holding 1-3 of inf, -inf and NaN, its output not empty."""
    forward, dims, roles = FAMILY[op]
    depthwise = forward == "DepthwiseConv2dNative"
    backprop = "Backprop" in op
    paddings = ["SAME", "VALID"] + (["EXPLICIT"] if dims == 2 else [])
    padding = draw(st.sampled_from(paddings))
    no_dilation = (depthwise and backprop) or (padding == "EXPLICIT" and (backprop or depthwise)
                                               ) or "Filter" in op
    k = [draw(st.integers(1, 4)) for _ in range(dims)]
    strides = [draw(st.integers(1, 3)) for _ in range(dims)]
    if "BackpropInput" in op and padding == "VALID":
        strides = [1] * dims
    dilations = [1 if no_dilation else draw(st.integers(1, 2)) for _ in range(dims)]
    if depthwise:  # equal strides (TF refuses others) and dilations (another oneDNN path)
        strides, dilations = [strides[0]] * dims, [dilations[0]] * dims
    pads = [(draw(st.integers(0, 3)), draw(st.integers(0, 3))) if padding == "EXPLICIT"
            else (0, 0) for _ in range(dims)]
    sizes = [draw(st.integers(1, 8 if dims == 2 else 5)) for _ in range(dims)]
    geometry = list(zip(k, strides, dilations, pads))
    for axis, (kk, s, d, p) in enumerate(geometry):
        while (sizes[axis] < max(3, (kk - 1) * d + 1)
               or ref_dim(sizes[axis], kk, s, d, padding, p)[0] < 2):
            sizes[axis] += 1
    out = [ref_dim(n, kk, s, d, padding, p)[0] for n, (kk, s, d, p) in zip(sizes, geometry)]
    batch = draw(st.integers(1, 2))
    groups = draw(st.sampled_from([1, 1, 2])) if op == "Conv2D" else 1
    c = groups * draw(st.integers(2, 4))
    co = draw(st.integers(1, 3)) if depthwise else groups * draw(st.integers(2, 4))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    f_shape = (*k, c // groups, co)
    tensors = {"x": rng.standard_normal((batch, *sizes, c)).astype(F32),
               "f": rng.standard_normal(f_shape).astype(F32),
               "dy": rng.standard_normal((batch, *out, c * co if depthwise else co)
                                         ).astype(F32)}
    poisoned = tensors[draw(st.sampled_from([r for r in roles if r in tensors]))]
    for _ in range(draw(st.integers(1, 3))):  # half the coordinates on a border
        at = tuple(draw(st.sampled_from([0, n - 1]) if draw(st.booleans()) else
                        st.integers(0, n - 1)) for n in poisoned.shape)
        poisoned[at] = draw(st.sampled_from(SPECIALS))
    tensors["x_sizes"] = np.array(tensors["x"].shape, np.int32)
    tensors["f_sizes"] = np.array(f_shape, np.int32)
    attrs = {"strides": [1, *strides, 1], "dilations": [1, *dilations, 1],
             "padding": padding}
    if padding == "EXPLICIT":
        attrs["explicit_paddings"] = [0, 0, *sum(pads, ()), 0, 0]
    fmt = draw(st.sampled_from(["channels_last", "channels_first"]))
    return op, {r: tensors[r] for r in roles}, attrs, fmt


def _mg_attrs(attrs: dict, fmt: str, dims: int) -> dict:
    """``attrs`` (channels-last) for minigraph in ``fmt``."""
    if fmt == "channels_last":
        return {**attrs, "data_format": "NHWC" if dims == 2 else "NDHWC"}
    move = lambda v: [v[0], v[-1], *v[1:-1]]  # noqa: E731
    moved = {**attrs, "strides": move(attrs["strides"]), "dilations": move(attrs["dilations"]),
             "data_format": "NCHW" if dims == 2 else "NCDHW"}
    if "explicit_paddings" in attrs:
        pairs = [attrs["explicit_paddings"][i:i + 2] for i in range(0, 8, 2)]
        moved["explicit_paddings"] = sum(move(pairs), [])
    return moved


def run_minigraph(op: str, tensors: dict, attrs: dict, fmt: str, backend: str
                  ) -> list[np.ndarray]:
    """The op's result (channels-last) with its array operands as constants (two runs) and
    as fed values."""
    dims = FAMILY[op][1]
    first = fmt == "channels_first"
    values = {r: (_channels_first(v) if first and r in ("x", "dy") else
                  v if not first or r != "x_sizes" else
                  np.array([v[0], v[-1], *v[1:-1]], np.int32))
              for r, v in tensors.items()}
    root = mg.Scope.NewRootScope()
    feeds, fed_args, const_args = {}, [], []
    for role, value in values.items():
        if role.endswith("sizes"):
            fed_args.append(list(value))
            const_args.append(list(value))
            continue
        p = ops.Placeholder(root, mg.float32)
        feeds[p] = value
        fed_args.append(p)
        const_args.append(ops.Const(root, value))
    kw = _mg_attrs(attrs, fmt, dims)
    outputs = [getattr(ops, op)(root, *const_args, **kw), getattr(ops, op)(root, *fed_args, **kw)]
    session = mg.ClientSession(root, backend=backend)
    results = session.Run(feeds, outputs) + session.Run(feeds, outputs[:1])
    return [_channels_last(y) if first and "Filter" not in op else y for y in results]


@pytest.mark.oracle
@pytest.mark.parametrize("op", list(FAMILY))
def test_non_finite_operands_against_tensorflow(tf, op):
    @settings(max_examples=40, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(cases(op))
    def check(case):
        op_name, tensors, attrs, fmt = case
        expected = getattr(tf.raw_ops, op_name)(
            **{TF_NAMES[r]: v for r, v in tensors.items()}, **attrs).numpy()
        for backend in BACKENDS:
            for y, how in zip(run_minigraph(op_name, tensors, attrs, fmt, backend),
                              ("constant", "fed", "constant, second run")):
                same_specials_and_close(y, expected, f"{op_name} {backend} {fmt} {how}")

    check()


# ----------------------------------------------------------------------------- fused epilogues


def _batch_norm_relu6(tf, y, vectors):
    scale, offset, mean, variance = vectors
    normed = tf.raw_ops.FusedBatchNormV3(x=y, scale=scale, offset=offset, mean=mean,
                                         variance=variance, epsilon=1e-3, is_training=False)[0]
    return tf.nn.relu6(normed).numpy()


@pytest.mark.oracle
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("head", ["Conv2D", "DepthwiseConv2dNative"])
@pytest.mark.parametrize("strides,padding,dilations", [
    ((1, 1), "SAME", (1, 1)), ((2, 2), "SAME", (1, 1)), ((1, 1), "VALID", (1, 1)),
    ((1, 1), "SAME", (2, 2))])
def test_fused_non_finite_filter_against_tensorflow(tf, backend, head, strides, padding,
                                                    dilations):
    """A filter with inf, -inf and NaN weights under the epilogues the remapper fuses
    (BiasAdd + Relu; FusedBatchNormV3 + Relu6): the fused kernels give TensorFlow's
    unfused chain's NaN and +-inf positions, with the filter a constant (its finiteness
    cached: two runs) and fed."""
    rng = np.random.default_rng(29)
    x = rng.standard_normal((2, 9, 8, 4)).astype(F32)
    depthwise = head == "DepthwiseConv2dNative"
    f = rng.standard_normal((3, 3, 4, 2 if depthwise else 6)).astype(F32)
    f[0, 0, 1, 1], f[2, 1, 0, 0], f[1, 2, 3, 1] = np.inf, -np.inf, np.nan
    co = 8 if depthwise else 6
    bias = rng.standard_normal(co).astype(F32)
    vectors = [rng.standard_normal(co).astype(F32) for _ in range(3)]
    vectors.append(rng.random(co).astype(F32) + 0.5)
    attrs = {"strides": [1, *strides, 1], "padding": padding, "dilations": [1, *dilations, 1]}
    y = getattr(tf.raw_ops, head)(input=x, filter=f, **attrs)
    assert np.isnan(y.numpy()).any() and np.isinf(y.numpy()).any()
    expected = [tf.nn.relu(tf.nn.bias_add(y, bias)).numpy(), _batch_norm_relu6(tf, y, vectors)]

    for fed, batch_norm in itertools.product((False, True), (False, True)):
        root = mg.Scope.NewRootScope()  # one graph per chain: CSE would merge the heads
        xp, fp = ops.Placeholder(root, mg.float32), ops.Placeholder(root, mg.float32)
        conv = getattr(ops, head)(root, xp, fp if fed else ops.Const(root, f), **attrs)
        if batch_norm:
            normed = ops.FusedBatchNormV3(root, conv, *vectors, epsilon=1e-3,
                                          is_training=False)
            y = ops.Relu6(root, normed[0])
        else:
            y = ops.Relu(root, ops.BiasAdd(root, conv, bias))
        session = mg.ClientSession(root, backend=backend)
        for _ in range(2):
            metadata = mg.RunMetadata()
            [got] = session.Run({xp: x, fp: f}, [y], run_metadata=metadata)
            same_specials_and_close(got, expected[batch_norm], f"{head} fed={fed}")
        assert {s.node_name: s.op_type for s in metadata.step_stats}[y.op.name] == \
            f"_Fused{head}"
