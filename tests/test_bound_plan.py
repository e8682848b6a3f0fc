"""Bound plans (minigraph/client/executor.py): a plan run again with the signature of a run
whose checks all passed runs as a compiled loop with an output arena. It must give the same
bits as an unbound session, never overwrite an array a Run returned, rebind when the feed
shapes change, and still raise for bad data that only a check of the data can see.
(tests/test_planner.py runs its random graphs through bound runs too.)
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from conftest import NATIVE_AVAILABLE
from hypothesis import given, settings
from hypothesis import strategies as st

import minigraph as mg
from minigraph import ops
from minigraph.client import planner
from minigraph.framework.op_def import RunContext

F32 = np.float32
UNIT = planner.MIN_INPLACE_BYTES // 4  # floats in a tensor the arena keeps
BACKENDS = ["native", "reference"] if NATIVE_AVAILABLE else ["reference"]
native_only = pytest.mark.skipif(not NATIVE_AVAILABLE, reason="kernels taking out= are native")


def _graph(rows: int):
    """x [rows, UNIT] -> a = Tanh(x), b = Sigmoid(a), c = Mul(a, b), d = Relu(Reshape(c)):
    a is read twice (no in-place write into it), b dies at c, d reads a view of c; fetched:
    d and a Reshape view of b's successor."""
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[None, UNIT])
    a = ops.Tanh(root.WithOpName("a"), x)
    b = ops.Sigmoid(root.WithOpName("b"), a)
    c = ops.Mul(root.WithOpName("c"), a, b)
    d = ops.Relu(root.WithOpName("d"), ops.Reshape(root, c, [-1]))
    e = ops.Reshape(root.WithOpName("e"), ops.AddV2(root, c, a), [rows, -1])
    return root, x, [d, e]


def _expected(x: np.ndarray) -> list[np.ndarray]:
    a = np.tanh(x.astype(np.float64))
    c = a / (1 + np.exp(-a))
    return [np.maximum(c, 0).ravel(), c + a]


def _sessions(root, backend):
    bound = mg.ClientSession(root, backend=backend, check_outputs=False)
    plain = mg.ClientSession(root, backend=backend, check_outputs=True,
                             optimizer=mg.OptimizerOptions(memory_planner=False))
    return bound, plain


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=8, deadline=None)
@given(rows=st.integers(1, 3), runs=st.integers(4, 7), seed=st.integers(0, 2**16))
def test_bound_runs_give_the_unbound_bits_and_keep_returned_arrays(backend, rows, runs, seed):
    root, x, fetches = _graph(rows)
    bound, plain = _sessions(root, backend)
    rng = np.random.default_rng(seed)
    held = []
    for _ in range(runs):
        feed = {x: rng.standard_normal((rows, UNIT)).astype(F32)}
        got = bound.Run(feed, fetches)
        want = plain.Run(feed, fetches)
        for value, reference in zip(got, want):
            np.testing.assert_array_equal(value.view(np.uint32), reference.view(np.uint32),
                                          strict=True)
        for value, exact in zip(got, _expected(feed[x])):
            np.testing.assert_allclose(value, exact, rtol=2e-6, atol=1e-7)
        held.append((got, [value.copy() for value in got]))
    for got, copies in held:  # later runs never wrote into what a Run returned
        for value, copy in zip(got, copies):
            np.testing.assert_array_equal(value, copy, strict=True)
    arrays = [value for got, _ in held for value in got]
    for i, one in enumerate(arrays):
        for other in arrays[i + 1:]:
            assert not np.shares_memory(one, other)


@native_only
def test_the_arena_keeps_buffers_between_runs_and_reports_them():
    """b = Mul(a, a) cannot be written into a (a is read again later): in steady state it
    comes from the arena, reported in RunMetadata as arena bytes, not as the run's
    intermediates; c overwrites a in place (a is the run's, not the arena's)."""
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[UNIT])
    a = ops.Tanh(root.WithOpName("a"), x)
    b = ops.Mul(root.WithOpName("b"), a, a)  # a is still read below: b is a new buffer
    c = ops.AddV2(root.WithOpName("c"), a, b)
    total = ops.Sum(root.WithOpName("total"), c, [0])
    session = mg.ClientSession(root, check_outputs=False)
    feed = {x: np.linspace(-2, 2, UNIT, dtype=F32)}
    for _ in range(3):  # fold the constants, bind, plan the arena
        session.Run(feed, total)
    metadata = mg.RunMetadata()
    session.Run(feed, total, run_metadata=metadata)
    assert metadata.arena_bytes == 4 * UNIT  # b's buffer
    live = {s.node_name: s.live_bytes for s in metadata.step_stats}
    assert metadata.peak_bytes == max(live.values())  # the unbound run's own count
    values = [session.Run(feed, total) for _ in range(3)]
    xs = np.tanh(np.linspace(-2, 2, UNIT))
    for value in values:
        np.testing.assert_allclose(value, np.sum(xs + xs * xs), rtol=1e-5)
        assert value == values[0]


def test_changing_feed_shapes_rebinds():
    """Each new row count runs every check again and binds anew; the old one comes back."""
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[None, UNIT])
    y = ops.Relu(root.WithOpName("y"), ops.Mul(root, ops.Tanh(root, x), ops.Sigmoid(root, x)))
    session = mg.ClientSession(root, check_outputs=False)
    rng = np.random.default_rng(3)
    for rows in (1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 1, 3, 3, 3):
        value = rng.standard_normal((rows, UNIT)).astype(F32)
        got = session.Run({x: value}, y)
        v = value.astype(np.float64)
        np.testing.assert_allclose(got, np.maximum(np.tanh(v) / (1 + np.exp(-v)), 0),
                                   rtol=2e-6, atol=1e-7)
        assert got.shape == (rows, UNIT)


def _bound_session(root, feed, fetches, runs=4):
    session = mg.ClientSession(root, check_outputs=False)
    for _ in range(runs):
        session.Run(feed, fetches)
    return session


def test_a_bound_plan_still_checks_data():
    """Checks that read data (an integer divisor's zeros, gather indices' range) run on
    every bound run: a bad value with the bound signature is refused."""
    root = mg.Scope.NewRootScope()
    n = ops.Placeholder(root.WithOpName("n"), mg.int32, shape=[4])
    d = ops.Placeholder(root.WithOpName("d"), mg.int32, shape=[4])
    i = ops.Placeholder(root.WithOpName("i"), mg.int32, shape=[3])
    q = ops.FloorDiv(root.WithOpName("q"), n, d)
    g = ops.GatherV2(root.WithOpName("g"), q, i, 0)
    good = {n: np.array([7, 8, 9, 10], np.int32), d: np.array([2, 3, 4, 5], np.int32),
            i: np.array([0, 3, 1], np.int32)}
    session = _bound_session(root, good, g)
    np.testing.assert_array_equal(session.Run(good, g), [3, 2, 2])
    with pytest.raises(mg.errors.InvalidArgumentError, match="'q'"):
        session.Run({**good, d: np.array([2, 0, 4, 5], np.int32)}, g)
    with pytest.raises(mg.errors.InvalidArgumentError, match="'g'"):
        session.Run({**good, i: np.array([0, 4, 1], np.int32)}, g)
    np.testing.assert_array_equal(session.Run(good, g), [3, 2, 2])


def test_shape_only_tells_validators_apart():
    """A validator reading shapes only (batch norm's) passes on shape stand-ins; one that may
    read data (an integer FloorDiv's divisor zeros, gather indices) does not."""
    root = mg.Scope.NewRootScope()
    ints = ops.FloorDiv(root, np.ones(3, np.int32), np.ones(3, np.int32)).op
    gather = ops.GatherV2(root, np.ones(3, F32), np.zeros(2, np.int32), 0).op
    vector = np.ones(3, F32)
    bn = ops.FusedBatchNormV3(root, np.ones((1, 2, 2, 3), F32), vector, vector, vector,
                              vector, is_training=False).y.op
    cases = [(ints, [np.ones(3, np.int32)] * 2, False),
             (gather, [np.ones(3, F32), np.zeros(2, np.int32), np.asarray(0, np.int32)], False),
             (bn, [np.ones((1, 2, 2, 3), F32), *[vector] * 4], True)]
    for op, values, expected in cases:
        op.op_def.validate(RunContext(op), values)  # the real values pass
        assert planner.shape_only(op.op_def.validate, RunContext(op), values) is expected


@native_only
@pytest.mark.parametrize("warm_runs", [2, 4])  # bound, its arena not yet planned; planned
def test_bound_runs_from_several_threads(warm_runs):
    """Two threads running one bound read-only plan: one plans the arena while the other
    waits, and each gets its own arena buffer or a fresh one (the arena hands a buffer only
    to one holder), so every result is right."""
    root, x, fetches = _graph(2)
    session = _bound_session(root, {x: np.zeros((2, UNIT), F32)}, fetches, warm_runs)
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(30):
                value = rng.standard_normal((2, UNIT)).astype(F32)
                got = session.Run({x: value}, fetches)
                for result, exact in zip(got, _expected(value)):
                    np.testing.assert_allclose(result, exact, rtol=2e-6, atol=1e-7)
        except AssertionError as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors[0]


def test_the_arena_hands_out_a_buffer_only_while_it_alone_holds_it():
    arena = planner.Arena.of_sizes({}, [UNIT * 4])
    buffers, skips = arena.buffers, arena.skips
    slot = planner.Slot(0, (UNIT,), np.dtype(F32))
    first = planner.Arena.take(buffers, skips, slot)
    assert first.shape == (UNIT,) and first.dtype == F32
    assert np.shares_memory(first, buffers[0]) and first.ctypes.data % 64 == 0
    first[:] = 1
    view = first.reshape(2, -1)  # a caller keeps a view: the buffer is theirs now
    del first
    second = planner.Arena.take(buffers, skips, slot)
    assert np.shares_memory(second, buffers[0]) and not np.shares_memory(second, view)
    assert second.ctypes.data % 64 == 0
    second[:] = 2
    np.testing.assert_array_equal(view, np.ones((2, UNIT // 2), F32))
    del view
    third = planner.Arena.take(buffers, skips,
                               planner.Slot(0, (2, UNIT // 4), np.dtype(np.float64)))
    assert third.shape == (2, UNIT // 4) and np.shares_memory(third, buffers[0])
    assert arena.nbytes == UNIT * 4


def _made(register, root, size=UNIT, in_place=False, owns=True):
    return [planner.Made(register, root, (size,), np.dtype(F32), owns, in_place)]


@given(sizes=st.lists(st.sampled_from([UNIT, 2 * UNIT]), min_size=2, max_size=6),
       spans=st.lists(st.integers(0, 3), min_size=6, max_size=6),
       fetched=st.sets(st.integers(0, 5)), in_place=st.sets(st.integers(0, 5)))
def test_arena_plans_disjoint_lifetimes_and_leaves_out_what_others_hold(sizes, spans, fetched,
                                                                       in_place):
    """Entry e makes register e (root e) read by entries e+1 .. e+spans[e]; no two values
    alive at once share a buffer, each buffer holds its values' bytes (values of any size
    share one), and fetched values and values written in place get none."""
    count = len(sizes)
    made = [_made(e, e, sizes[e], in_place=e in in_place) for e in range(count)]
    reads = [[] for _ in range(count)]
    for e in range(count):
        for reader in range(e + 1, min(count, e + spans[e] + 1)):
            reads[reader].append(e)
    arena = planner.plan_arena(made, reads, range(count), {f for f in fetched if f < count})
    end = {e: max([r for r in range(count) if e in reads[r]], default=e) for e in range(count)}
    for e, slot in arena.slots.items():
        assert e not in fetched and e not in in_place
        assert slot.shape == (sizes[e],) and slot.dtype == F32
        assert arena.buffers[slot.buffer].nbytes >= 4 * sizes[e]
        for other, other_slot in arena.slots.items():
            if other != e and other_slot.buffer == slot.buffer:
                assert end[e] < other or end[other] < e
    assert arena.nbytes <= 4 * sum(sizes)
    assert set(arena.slots) == {e for e in range(count) if e not in fetched | in_place}


def test_shapes_that_data_decide_are_guarded():
    """A Reshape to a fed shape: a bound run given another shape value (same signature)
    runs the later steps with their checks: a MatMul that no longer fits is refused with its
    message, a Relu gives the new shape; the right shape runs bound again."""
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[6])
    s = ops.Placeholder(root.WithOpName("s"), mg.int32, shape=[2])
    y = ops.Reshape(root.WithOpName("y"), x, s)
    w = np.arange(6, dtype=F32).reshape(3, 2)
    m = ops.MatMul(root.WithOpName("m"), y, w)
    r = ops.Relu(root.WithOpName("r"), y)
    xs = np.linspace(-1, 1, 6, dtype=F32)
    good = {x: xs, s: np.array([2, 3], np.int32)}
    session = _bound_session(root, good, [m, r])
    for _ in range(2):
        got_m, got_r = session.Run(good, [m, r])
        np.testing.assert_allclose(got_m, xs.reshape(2, 3).astype(np.float64) @ w, rtol=1e-6)
        np.testing.assert_array_equal(got_r, np.maximum(xs.reshape(2, 3), 0))
    with pytest.raises(mg.errors.InvalidArgumentError, match="'m'"):
        session.Run({x: xs, s: np.array([3, 2], np.int32)}, [m, r])
    np.testing.assert_array_equal(session.Run({x: xs, s: np.array([1, 6], np.int32)}, r),
                                  np.maximum(xs.reshape(1, 6), 0))
    for _ in range(3):
        got_m = session.Run(good, m)
        np.testing.assert_allclose(got_m, xs.reshape(2, 3).astype(np.float64) @ w, rtol=1e-6)


def test_sparse_labels_are_checked_on_every_bound_run():
    root = mg.Scope.NewRootScope()
    logits = ops.Placeholder(root.WithOpName("logits"), mg.float32, shape=[4, 3])
    labels = ops.Placeholder(root.WithOpName("labels"), mg.int32, shape=[4])
    loss = ops.SparseSoftmaxCrossEntropyWithLogits(root.WithOpName("xent"), logits, labels)
    total = ops.Sum(root.WithOpName("total"), loss.loss, [0])
    values = np.linspace(-1, 1, 12, dtype=F32).reshape(4, 3)
    good = {logits: values, labels: np.array([0, 2, 1, 2], np.int32)}
    session = _bound_session(root, good, total)
    with pytest.raises(mg.errors.InvalidArgumentError, match="xent"):
        session.Run({**good, labels: np.array([0, 3, 1, 2], np.int32)}, total)
    v = values.astype(np.float64)
    log_softmax = v - np.log(np.exp(v).sum(1, keepdims=True))
    np.testing.assert_allclose(session.Run(good, total),
                               -log_softmax[np.arange(4), [0, 2, 1, 2]].sum(), rtol=1e-5)
