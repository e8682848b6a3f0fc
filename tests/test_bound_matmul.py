"""MatMul and _FusedMatMul for bound entries (minigraph/backends/bound_matmul.py): after the
first call they make the GEMM call directly while the weight (and the epilogue's vectors)
are the same read-only arrays. They must give the generic kernels' bits, take the fast call
only where the generic kernel takes the GEMM-with-epilogue route, and drop it when the
weights change (a training step), with every result still right."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import NATIVE_AVAILABLE
from hypothesis import given, settings
from hypothesis import strategies as st

import minigraph as mg
from minigraph import ops
from minigraph.backends import bound_matmul

pytestmark = pytest.mark.skipif(not NATIVE_AVAILABLE, reason="native GEMM")

F32 = np.float32
UNBOUND = mg.OptimizerOptions(memory_planner=False)


def _bound_entries(session) -> list:
    found = []
    for plan, _ in session._plans.values():
        if plan.bound is not None:
            found += [e[1] for e in plan.bound.program if isinstance(e[1], bound_matmul._Bound)]
    return found


def _graph(rng, m, k, n, trans_a, trans_b, stages):
    """x @ w (transposes as asked), then the stages; and the float64 formula of the result
    for given feeds."""
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[k, m] if trans_a else [m, k])
    w = rng.standard_normal((n, k) if trans_b else (k, n)).astype(F32)
    y = ops.MatMul(root.WithOpName("mm"), x, w, transpose_a=trans_a, transpose_b=trans_b)
    feeds = {x: rng.standard_normal((k, m) if trans_a else (m, k)).astype(F32)}
    bias = rng.standard_normal(n).astype(F32)
    skip = None
    if "bias" in stages:
        y = ops.BiasAdd(root, y, bias)
    if "residual" in stages:
        skip = ops.Placeholder(root.WithOpName("skip"), mg.float32, shape=[m, n])
        feeds[skip] = rng.standard_normal((m, n)).astype(F32)
        y = ops.AddV2(root, y, skip)
    if "relu" in stages:
        y = ops.Relu(root, y)

    def expected(values: dict) -> np.ndarray:
        a = values[x].astype(np.float64)
        z = (a.T if trans_a else a) @ (w.T if trans_b else w).astype(np.float64)
        z = z + bias if "bias" in stages else z
        z = z + values[skip] if skip is not None else z
        return np.maximum(z, 0) if "relu" in stages else z

    return root, feeds, y, expected


@settings(max_examples=30, deadline=None)
@given(m=st.integers(1, 40), k=st.integers(1, 70), n=st.integers(1, 90),
       trans_a=st.booleans(), trans_b=st.booleans(),
       stages=st.sets(st.sampled_from(["bias", "residual", "relu"])), seed=st.integers(0, 99))
def test_bound_matmuls_give_the_generic_bits(m, k, n, trans_a, trans_b, stages, seed):
    rng = np.random.default_rng(seed)
    root, feeds, y, expected = _graph(rng, m, k, n, trans_a, trans_b, stages)
    bound = mg.ClientSession(root, backend="native", check_outputs=False)
    plain = mg.ClientSession(root, backend="native", check_outputs=False, optimizer=UNBOUND)
    for run in range(4):
        feeds = {key: (value + run).astype(F32) for key, value in feeds.items()}  # new arrays
        got, want = bound.Run(feeds, y), plain.Run(feeds, y)
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    [entry] = _bound_entries(bound)
    fused = bool(stages - {"residual"}) or "residual" in stages
    assert isinstance(entry, bound_matmul.BoundFusedMatMul if fused else bound_matmul.BoundMatMul)
    assert entry.call is not None  # constant weights: the fast call stays
    np.testing.assert_allclose(got, expected(feeds), rtol=1e-5, atol=1e-5 * np.sqrt(k))


def test_a_weight_that_changes_drops_the_fast_call():
    """Weights fed as new read-only arrays each run (a training step's variables): the
    second run finds another weight, runs the generic kernel and drops the fast call."""
    rng = np.random.default_rng(0)
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[3, 4])
    w = ops.Placeholder(root.WithOpName("w"), mg.float32, shape=[4, 5])
    y = ops.MatMul(root, x, w)
    session = mg.ClientSession(root, backend="native", check_outputs=False)
    for _ in range(5):
        xv = rng.standard_normal((3, 4)).astype(F32)
        wv = rng.standard_normal((4, 5)).astype(F32)
        wv.setflags(write=False)
        got = session.Run({x: xv, w: wv}, y)
        np.testing.assert_allclose(got, xv.astype(np.float64) @ wv, rtol=1e-5, atol=1e-6)
    [entry] = _bound_entries(session)
    assert entry.call is None and not entry.fresh


def test_a_residual_view_and_a_returned_output_are_never_written():
    """The fused fast call takes a residual of the result's shape; the arrays it returned
    stay as they were across later runs (fresh outputs or the arena's, never an input)."""
    rng = np.random.default_rng(1)
    root, feeds, y, _ = _graph(rng, 6, 8, 7, False, False, {"bias", "residual", "relu"})
    session = mg.ClientSession(root, backend="native", check_outputs=False)
    kept = [session.Run(feeds, y) for _ in range(4)]
    copies = [k.copy() for k in kept]
    feeds2 = {key: (value * 2).astype(F32) for key, value in feeds.items()}
    before = {key: value.copy() for key, value in feeds2.items()}
    session.Run(feeds2, y)
    for k, c in zip(kept, copies):
        np.testing.assert_array_equal(k, c)
    for key, value in feeds2.items():
        np.testing.assert_array_equal(value, before[key])
    [entry] = _bound_entries(session)
    assert isinstance(entry, bound_matmul.BoundFusedMatMul) and entry.call is not None
    assert entry.call.residual >= 0


def test_a_fed_bias_is_compared_by_its_bytes():
    """A bias fed as a writeable array (a loop's invariant passes one along): the fast call
    keeps private copies and matches while the bias holds the same bytes, a new array of
    the same values included; a bias changed in place runs the generic kernel, so a result
    is never computed from stale values."""
    rng = np.random.default_rng(3)
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[2, 8])
    bias = ops.Placeholder(root.WithOpName("bias"), mg.float32, shape=[6])
    w = rng.standard_normal((8, 6)).astype(F32)
    y = ops.Relu(root, ops.BiasAdd(root, ops.MatMul(root, x, w), bias))
    session = mg.ClientSession(root, backend="native", check_outputs=False)
    xv, bv = rng.standard_normal((2, 8)).astype(F32), rng.standard_normal(6).astype(F32)

    def check(b):
        got = session.Run({x: xv, bias: b}, y)
        want = np.maximum(xv.astype(np.float64) @ w + b, 0)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

    for _ in range(5):  # checked, observed, then bound runs
        check(bv)
    [entry] = _bound_entries(session)
    assert isinstance(entry, bound_matmul.BoundFusedMatMul) and entry.call is not None
    check(bv.copy())  # another array, the same bytes: still the fast call
    assert entry.call is not None
    bv[:] = bv + 5  # the same array, changed in place
    check(bv)
    assert entry.call is None  # not matched: the generic kernel ran, and the call is gone
    check(bv)
