"""The single-pass Relu/max-pool fusions (``_FusedReluMaxPool``: ``mg_relu_max_pool``;
``_FusedMaxPoolGradReluGrad``: ``mg_max_pool_grad_relu``) give the unfused graph's bits.

Hypothesis draws pool geometries (windows 1-4, strides 1-3 per axis, SAME / VALID /
EXPLICIT, NHWC and NCHW, channel counts that take the scalar, vector and AVX-512 2x2 paths)
and inputs full of ties, NaN, infinities and signed zeros; the graph ``Relu -> MaxPool``,
``MaxPoolGrad -> ReluGrad`` runs with the remapper on (fused) and off (the native Relu,
MaxPool, MaxPoolGrad and ReluGrad kernels), on every ISA the CPU has and several thread
counts, and every output bit must agree.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import NATIVE_AVAILABLE
from hypothesis import given, settings
from hypothesis import strategies as st

import minigraph as mg
from minigraph import ops
from minigraph.backends import native, pooling_kernels

pytestmark = pytest.mark.skipif(not NATIVE_AVAILABLE, reason="the fused C kernels")

F32 = np.float32
REMAPPER_OFF = mg.OptimizerOptions(remapper=False)
FUSED = ("_FusedReluMaxPool", "_FusedMaxPoolGradReluGrad")
# few distinct values: ties in every window, and the exceptional ones
VALUES = np.array([-2, -1, 0, 1, 2, 3, np.nan, np.inf, -np.inf, -0.0], F32)


def _isas() -> list[str]:
    return list(native.ISAS[:native.ISAS.index(native.best_isa()) + 1])


def _nhwc_to(layout: str, values: list[int]) -> list[int]:
    """A per-dimension list given in NHWC order, in ``layout``'s."""
    n, h, w, c = values
    return [n, h, w, c] if layout == "NHWC" else [n, c, h, w]


@st.composite
def _geometry(draw, hw_range=(1, 9), channels=(1, 2, 3, 7, 16, 20), batch=(1, 2)):
    layout = draw(st.sampled_from(["NHWC", "NCHW"]))
    k = [draw(st.integers(1, 4)) for _ in range(2)]
    s = [draw(st.integers(1, 3)) for _ in range(2)]
    padding = draw(st.sampled_from(["SAME", "VALID", "EXPLICIT"]))
    hw = [draw(st.integers(max(hw_range[0], k[i] if padding == "VALID" else 1), hw_range[1]))
          for i in range(2)]
    n, c = draw(st.integers(*batch)), draw(st.sampled_from(channels))
    attrs = {"ksize": _nhwc_to(layout, [1, *k, 1]), "strides": _nhwc_to(layout, [1, *s, 1]),
             "padding": padding, "data_format": layout}
    if padding == "EXPLICIT":  # pads below the window (each window starts in the image)
        pads = [[draw(st.integers(0, k[i] - 1)), draw(st.integers(0, k[i] - 1))]
                for i in range(2)]
        hw = [max(size, k[i] - sum(pads[i])) for i, size in enumerate(hw)]
        attrs["explicit_paddings"] = [p for pair in _nhwc_to(layout, [[0, 0], *pads, [0, 0]])
                                      for p in pair]
    return tuple(_nhwc_to(layout, [n, *hw, c])), attrs


def _graph(attrs: dict):
    """(root, x, g, fetches): Relu -> MaxPool, and MaxPoolGrad -> ReluGrad of a fed
    gradient, the Relu's output read by the pool and both gradient ops (training's
    pattern) and by a Neg (an exact sign flip) that shows all of it."""
    root = mg.Scope.NewRootScope()
    x, g = ops.Placeholder(root, mg.float32), ops.Placeholder(root, mg.float32)
    relu = ops.Relu(root, x)
    pool = ops.MaxPool(root, relu, **attrs)
    routed = ops.MaxPoolGrad(root, relu, pool, g, **attrs)
    return root, x, g, [pool, ops.ReluGrad(root, routed, relu), ops.Neg(root, relu)]


def _draw_values(rng: np.random.Generator, shape, special: float) -> np.ndarray:
    """Mostly ties among a few integers; ``special`` of the elements drawn from VALUES."""
    values = rng.integers(-2, 4, shape).astype(F32)
    pick = rng.random(shape) < special
    values[pick] = rng.choice(VALUES, int(pick.sum()))
    return values


def _run(root, feeds, fetches, optimizer=None) -> list[np.ndarray]:
    kwargs = {} if optimizer is None else {"optimizer": optimizer}
    metadata = mg.RunMetadata()
    values = mg.ClientSession(root, backend="native", **kwargs).Run(
        feeds, fetches, run_metadata=metadata)
    ran = {stats.op_type: stats.kernel for stats in metadata.step_stats}
    if optimizer is None:  # the fused ops ran, on their single-pass C kernels
        assert [ran.get(name, "").rsplit(".", 1)[-1] for name in FUSED] == [
            "fused_relu_max_pool_native", "fused_max_pool_grad_relu_grad_native"], ran
    return values


def _assert_same_bits(first: list, second: list) -> None:
    for a, b in zip(first, second, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype == F32
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


def _compare(shape, attrs, seed: int, special: float, threads: list[int]) -> None:
    root, x, g, fetches = _graph(attrs)
    assert sorted(op.type for op in mg.optimize(root, fetches).operations()
                  if op.type in FUSED) == sorted(FUSED)
    rng = np.random.default_rng(seed)
    x_value = _draw_values(rng, shape, special)
    pooled = mg.ClientSession(root, backend="native", optimizer=REMAPPER_OFF).Run(
        {x: x_value}, [fetches[0]])[0]
    feeds = {x: x_value, g: _draw_values(rng, pooled.shape, special)}
    before = native.num_threads()
    try:
        for isa in _isas():  # (a NaN's sign may differ between ISAs, fused or not)
            native.set_isa(isa)
            native.set_num_threads(1)
            expected = _run(root, feeds, fetches, REMAPPER_OFF)
            for count in threads:
                native.set_num_threads(count)
                _assert_same_bits(_run(root, feeds, fetches), expected)
    finally:
        native.set_isa(native.best_isa())
        native.set_num_threads(before)


@settings(max_examples=60, deadline=None)
@given(_geometry(), st.integers(0, 2 ** 16), st.sampled_from([0.0, 0.1, 0.5]))
def test_fused_relu_max_pool_and_its_gradient_give_the_unfused_bits(case, seed, special):
    """Small tensors (one thread runs them), every geometry, every ISA."""
    shape, attrs = case
    _compare(shape, attrs, seed, special, threads=[1])


@settings(max_examples=6, deadline=None)
@given(_geometry(hw_range=(24, 40), channels=(16, 24), batch=(4, 4)), st.integers(0, 2 ** 16))
def test_fused_pool_kernels_give_the_same_bits_for_any_thread_count(case, seed):
    """Tensors large enough for the worker pool: chunks of output rows, each writing the
    Relu of the input rows it owns, give the one-thread (and unfused) bits."""
    shape, attrs = case
    assert np.prod(shape) >= 1 << 15  # (mg_stream_threads: smaller tensors take one thread)
    _compare(shape, attrs, seed, 0.05, threads=[1, 2, 3, 7])


def _row_major_max(plane: np.ndarray, k, s, pads, out) -> np.ndarray:
    """Each window's in-bounds elements scanned row-major from the first, a later element
    replacing the maximum when greater or NaN (kernels_c/pooling.h's MaxPool: the last NaN,
    else the first of equal maxima, so +0 and -0 keep their order)."""
    h, w = plane.shape
    result = np.empty(out, F32)
    for oy in range(out[0]):
        for ox in range(out[1]):
            top, left = oy * s[0] - pads[0], ox * s[1] - pads[1]
            window = [plane[y, x] for y in range(max(top, 0), min(top + k[0], h))
                      for x in range(max(left, 0), min(left + k[1], w))]
            best = window[0]
            for v in window[1:]:
                best = v if (v > best or v != v) else best
            result[oy, ox] = best
    return result


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.integers(1, 3), st.integers(1, 3),
       st.integers(1, 30), st.integers(1, 12), st.data())
def test_single_channel_max_pool_scans_each_window_row_major(kh, kw, sh, sw, w, h, data):
    """NCHW planes (MaxPool's single-channel loops, whole windows a window offset at a time
    over a row of outputs, clipped ones alone): every output's bits, signed zeros and NaN
    payloads included, are the row-major scan's, on every ISA."""
    pt, pl = data.draw(st.integers(0, kh - 1)), data.draw(st.integers(0, kw - 1))
    h, w = max(h, kh - pt), max(w, kw - pl)
    out = ((h + pt - kh) // sh + 1, (w + pl - kw) // sw + 1)
    out = tuple(max(o, 1) for o in out)
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 16)))
    x = rng.choice(VALUES, (2, 3, h, w))
    x.view(np.uint32)[rng.random(x.shape) < 0.1] = 0x7FC00001  # a NaN of another payload
    try:
        for isa in _isas():
            native.set_isa(isa)
            got = pooling_kernels.c_max_pool(x, (kh, kw), (sh, sw), ((pt, 0), (pl, 0)), out,
                                             False)
            for i in np.ndindex(x.shape[:2]):
                expected = _row_major_max(x[i], (kh, kw), (sh, sw), (pt, pl), out)
                np.testing.assert_array_equal(got[i].view(np.uint32), expected.view(np.uint32))
    finally:
        native.set_isa(native.best_isa())
