"""A session's bound run replayed over buffers of its own (``client/replay.py``,
``OptimizerOptions.replay``).

Sessions here bind (``check_outputs=False``); a spy on :meth:`LoopReplay.step` shows whether
runs were replayed. Each case compares the replayed session's outputs bit for bit with a
session that runs every step unbound (``OptimizerOptions.all_off()``):

* the Keras zoo (TensorFlow's frozen graphs, ``oracle``): every CI application and layer
  block, runs with new values each time;
* generated networks (hypothesis): chains of convolutions (both routes, fused bias, residual
  and activation), depthwise convolutions, pools, Pad, ConcatV2, Mean and a matmul;
* hand-built graphs: returned arrays are fresh and never written by a later run, feeds are
  never written, read-only feeds (copied: a caller may change them) from run to run, a batch
  size that changes (the plan binds anew and replays again), an index out of range (the
  op's own error), several threads at once, and the runs that do not replay: the option off,
  ``RunMetadata``, a training step (variables), a program beyond the memory cap.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import NATIVE_AVAILABLE, counting_replays, wrong_from_threads
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import minigraph as mg
from minigraph import ops
from minigraph.client import replay as replay_module
from minigraph.framework.errors import InvalidArgumentError

pytestmark = pytest.mark.skipif(not NATIVE_AVAILABLE, reason="the native kernels' replays")
F32 = np.float32


def sessions(root) -> tuple[mg.ClientSession, mg.ClientSession]:
    return (mg.ClientSession(root, backend="native", check_outputs=False),
            mg.ClientSession(root, backend="native", check_outputs=False,
                             optimizer=mg.OptimizerOptions.all_off()))


def same_bits(a: list, b: list) -> bool:
    return all(x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
               for x, y in zip(a, b))


def small_net():
    """A convolution, a group of elementwise ops, a gather of fed rows and a matmul."""
    rng = np.random.default_rng(0)
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[None, 6, 6, 3])
    rows = ops.Placeholder(root.WithOpName("rows"), mg.int32, shape=[None])
    f = rng.standard_normal((3, 3, 3, 8)).astype(F32)
    y = ops.Relu(root, ops.BiasAdd(root, ops.Conv2D(root, x, f, [1, 1, 1, 1], "SAME"),
                                   rng.standard_normal(8).astype(F32)))
    flat = ops.Reshape(root, y, np.array([-1, 6 * 6 * 8], np.int32))
    picked = ops.GatherV2(root, flat, rows, np.int32(0))
    logits = ops.MatMul(root, picked, rng.standard_normal((6 * 6 * 8, 5)).astype(F32))
    out = ops.Tanh(root.WithOpName("out"), ops.Mul(root, logits, logits))
    return root, x, rows, out, y


def feeds_for(x, rows, batch: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {x: rng.standard_normal((batch, 6, 6, 3)).astype(F32),
            rows: rng.integers(0, batch, 3).astype(np.int32)}


def test_replayed_runs_give_the_unbound_bits_and_fresh_arrays(replayed_steps):
    root, x, rows, out, y = small_net()
    replaying, unbound = sessions(root)
    kept = []
    for run in range(6):
        feeds = feeds_for(x, rows, 2, run)
        fed = {key: value.copy() for key, value in feeds.items()}
        got = replaying.Run(feeds, [out, y])
        assert same_bits(got, unbound.Run(feeds, [out, y]))
        assert all(np.array_equal(feeds[key], fed[key]) for key in feeds)  # not written
        kept.append((got, [a.copy() for a in got]))
    assert len(replayed_steps) >= 3
    for got, copy in kept:  # what a run returned stays as it was
        assert same_bits(got, copy)
    a, b = kept[-1][0][0], kept[-2][0][0]
    assert not np.shares_memory(a, b)
    a[...] = 7  # a caller writes into a result: the next run does not see it
    feeds = feeds_for(x, rows, 2, 99)
    assert same_bits(replaying.Run(feeds, [out, y]), unbound.Run(feeds, [out, y]))


def test_a_new_batch_size_binds_anew_and_replays_again(replayed_steps):
    root, x, rows, out, _ = small_net()
    replaying, unbound = sessions(root)
    for batch in (2, 2, 2, 2, 5, 5, 5, 5, 2, 2):
        feeds = feeds_for(x, rows, batch, batch)
        assert same_bits(replaying.Run(feeds, [out]), unbound.Run(feeds, [out]))
    assert len(replayed_steps) >= 3  # both batch sizes (a signature binds at its second run)


def test_read_only_feeds_are_copied_and_may_change(replayed_steps):
    """A run copies its feeds, read-only ones too (a caller may make one writeable again
    and change it): new values in the same arrays give new results."""
    root, x, rows, out, _ = small_net()
    replaying, unbound = sessions(root)
    feeds = feeds_for(x, rows, 2, 0)
    for run in range(6):
        for value in feeds.values():
            value.setflags(write=True)
        feeds[x][...] = np.random.default_rng(run).standard_normal(feeds[x].shape)
        for value in feeds.values():
            value.setflags(write=False)
        assert same_bits(replaying.Run(feeds, [out]), unbound.Run(feeds, [out]))
    assert replayed_steps


def test_an_index_out_of_range_raises_the_ops_error_in_a_replayed_run(replayed_steps):
    root, x, rows, out, _ = small_net()
    replaying, unbound = sessions(root)
    for run in range(4):
        replaying.Run(feeds_for(x, rows, 2, run), [out])
    assert replayed_steps
    bad = feeds_for(x, rows, 2, 0)
    bad[rows] = np.array([0, 2, 1], np.int32)
    messages = []
    for session in (replaying, unbound):
        with pytest.raises(InvalidArgumentError) as raised:
            session.Run(bad, [out])
        messages.append(str(raised.value))
    assert "indices[1] = 2 is not in [0, 2)" in messages[0]
    assert messages[0] == messages[1]
    feeds = feeds_for(x, rows, 2, 5)
    assert same_bits(replaying.Run(feeds, [out]), unbound.Run(feeds, [out]))


def test_runs_from_several_threads_at_once(replayed_steps):
    root, x, rows, out, y = small_net()
    replaying, unbound = sessions(root)
    cases = [feeds_for(x, rows, 2, k) for k in range(6)]
    expected = [unbound.Run(feeds, [out, y]) for feeds in cases]
    assert wrong_from_threads(
        lambda k: same_bits(replaying.Run(cases[k], [out, y]), expected[k]), len(cases),
        steps=30) == []
    assert replayed_steps


def test_runs_that_do_not_replay(replayed_steps, monkeypatch):
    """The option off, RunMetadata, a program beyond the memory cap: the bound (or checked)
    run, the same bits."""
    root, x, rows, out, _ = small_net()
    off = mg.ClientSession(root, backend="native", check_outputs=False,
                           optimizer=mg.OptimizerOptions(replay=False))
    replaying, unbound = sessions(root)
    feeds = feeds_for(x, rows, 2, 1)
    expected = unbound.Run(feeds, [out])
    for _ in range(5):
        assert same_bits(off.Run(feeds, [out]), expected)
        assert same_bits(replaying.Run(feeds, [out], run_metadata=mg.RunMetadata()),
                         expected)
    assert not replayed_steps
    monkeypatch.setattr(replay_module, "MAX_BYTES", 100)
    capped, _ = sessions(root)
    for _ in range(5):
        assert same_bits(capped.Run(feeds, [out]), expected)
    assert not replayed_steps


def test_a_training_step_is_not_replayed(replayed_steps):
    """Variables: a step reads and writes the session's state, which a replay does not."""
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[4, 3])
    w = ops.Variable(root.WithOpName("w"), [3, 2], mg.float32)
    init = ops.Assign(root, w, np.ones((3, 2), F32))
    loss = ops.Sum(root, ops.Square(root, ops.MatMul(root, x, w)), np.array([0, 1], np.int32))
    update = ops.ApplyGradientDescent(
        root, w, np.float32(0.01),
        ops.MatMul(root, x, ops.Mul(root, np.float32(2), ops.MatMul(root, x, w)),
                   transpose_a=True))
    sessions_ = [mg.ClientSession(root, backend="native", check_outputs=False),
                 mg.ClientSession(root, backend="native", check_outputs=False,
                                  optimizer=mg.OptimizerOptions.all_off())]
    values = []
    for session in sessions_:
        session.Run([init])
        xv = np.arange(12, dtype=F32).reshape(4, 3) / 10
        values.append([session.Run({x: xv}, [loss, update])[0] for _ in range(6)])
    assert same_bits(values[0], values[1])
    assert not replayed_steps


@st.composite
def generated_nets(draw):
    """``(build, input shape)``: a chain of NHWC layers, each drawn from the ops whose
    kernels have replay makers (convolutions on both routes with a fused bias, residual and
    activation, depthwise ones fused or not, max and average pools, Pad, ConcatV2 of two
    branches) and ops that run as kernels (Mean, Reshape), then a matmul."""
    batch, size, channels = draw(st.integers(1, 3)), draw(st.integers(4, 11)), draw(
        st.integers(1, 20))
    layers = draw(st.lists(st.sampled_from(["conv", "depthwise", "pool", "pad", "concat",
                                            "residual", "activation", "batch_norm"]),
                           min_size=1, max_size=6))
    seed = draw(st.integers(0, 2**16))
    choices = [draw(st.tuples(st.integers(1, 3), st.integers(1, 2), st.booleans(),
                              st.integers(1, 24))) for _ in layers]

    def build(root, x):
        rng = np.random.default_rng(seed)
        y, c = x, channels
        extra = []  # more outputs to fetch: a batch norm's statistics
        for layer, (k, stride, same, width) in zip(layers, choices):
            padding = "SAME" if same or k > y_size(y) else "VALID"
            strides = [1, stride, stride, 1]
            if layer == "conv":
                f = (rng.standard_normal((k, k, c, width)) / (k * np.sqrt(c))).astype(F32)
                y = ops.Conv2D(root, y, f, strides, padding)
                y = ops.Relu(root, ops.BiasAdd(root, y, rng.standard_normal(width).astype(F32)))
                c = width
            elif layer == "depthwise":
                mult = 1 + width % 2
                f = (rng.standard_normal((k, k, c, mult)) / k).astype(F32)
                y = ops.DepthwiseConv2dNative(root, y, f, strides, padding)
                c *= mult
                if width % 3:
                    y = ops.Relu6(root, ops.BiasAdd(root, y,
                                                    rng.standard_normal(c).astype(F32)))
            elif layer == "pool":
                pool = ops.MaxPool if width % 2 else ops.AvgPool
                y = pool(root, y, [1, k, k, 1], strides, padding)
            elif layer == "pad":
                y = ops.Pad(root, y, np.array([[0, 0], [k - 1, 1], [0, k], [0, 0]], np.int32))
            elif layer == "concat":
                f = rng.standard_normal((1, 1, c, width)).astype(F32)
                y = ops.ConcatV2(root, [y, ops.Conv2D(root, y, f, [1, 1, 1, 1], "SAME")],
                                 np.int32(3))
                c += width
            elif layer == "batch_norm":  # inference; with a Relu, or a side input too
                stats = [rng.uniform(0.5, 2, c).astype(F32), rng.standard_normal(c).astype(F32),
                         rng.standard_normal(c).astype(F32), rng.uniform(0.5, 2, c).astype(F32)]
                norm = ops.FusedBatchNormV3(root, y, *stats, is_training=False, epsilon=0.001)
                normed = norm[0]
                extra.extend(norm[1:5])
                if width % 3 == 1:
                    normed = ops.Relu(root, normed)
                elif width % 3 == 2:
                    normed = ops.Relu(root, ops.AddV2(root, normed, y))
                y = normed
            elif layer == "activation":  # alone: no group, no convolution to fuse into
                if width % 4 == 3:
                    y = ops.LeakyRelu(root, y, alpha=0.1 * k)
                else:
                    y = (ops.Sigmoid, ops.Tanh, ops.Elu)[width % 4](root, y)
            else:  # a residual: conv(y) + y, then Relu
                f = (rng.standard_normal((k, k, c, c)) / (k * np.sqrt(c))).astype(F32)
                y = ops.Relu(root, ops.AddV2(root, ops.Conv2D(root, y, f, [1, 1, 1, 1],
                                                              "SAME"), y))
        pooled = ops.Mean(root, y, np.array([1, 2], np.int32))
        return [ops.MatMul(root, pooled, rng.standard_normal((c, 3)).astype(F32)), *extra]

    return build, (batch, size, size, channels)


def y_size(y) -> int:
    """The spatial height of ``y`` as far as the graph knows it (a VALID window must fit)."""
    return y.shape[1] if y.shape.dims is not None and y.shape[1] is not None else 0


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(generated_nets(), st.integers(0, 2**16))
def test_generated_networks_replay_the_unbound_bits(net, seed):
    build, shape = net
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=list(shape))
    fetches = build(root, x)
    replaying, unbound = sessions(root)
    rng = np.random.default_rng(seed)
    with counting_replays() as runs:
        for run in range(6):
            feeds = {x: rng.standard_normal(shape).astype(F32)}
            assert same_bits(replaying.Run(feeds, fetches), unbound.Run(feeds, fetches)), run
    assert runs


@pytest.mark.oracle
def test_keras_zoo_runs_replay_the_unbound_bits(replayed_steps):
    """Every CI application and layer block but the recurrent ones (whose loops replay,
    ``test_loop_replay.py``) and those with random ops."""
    from minigraph.testing import keras_zoo

    skipped = []
    for entry in keras_zoo.entries(full=False):
        if entry.kind == "vocabulary":
            continue
        try:
            graph = keras_zoo.load(entry.name)
        except ImportError as error:
            pytest.skip(f"{entry.name} is not cached and TensorFlow is needed: {error}")
        root = mg.import_graph_def(graph.graph_def)
        replaying, unbound = sessions(root)
        rng = np.random.default_rng(7)
        before = len(replayed_steps)
        for run in range(4):
            feeds = {key: (value if value.dtype.kind in "iu"
                           else rng.uniform(-2, 2, value.shape).astype(value.dtype))
                     for key, value in graph.feeds.items()}
            got = replaying.Run(feeds, graph.fetches)
            assert same_bits(got, unbound.Run(feeds, graph.fetches)), f"{entry.name} {run}"
        if len(replayed_steps) == before:
            skipped.append(entry.name)
    loops = {"lstm", "gru", "simple_rnn", "bidirectional", "conv_lstm2d", "stacked_recurrent",
             "masked_lstm", "center_crop"}
    assert set(skipped) <= loops | {"random_flip", "noise_and_regularization"}, skipped


def test_a_replayed_step_runs_its_kernel_once_its_watched_inputs_change():
    """``registry.while_unchanged``: the fast call while an input it was made for (an axis,
    paddings) holds the same bytes, the kernel's results (copied into the output) once it
    holds others, and the fast call again when they come back."""
    from minigraph.backends.registry import while_unchanged

    axis, x, out = np.array(1, np.int32), np.arange(6, dtype=F32).reshape(2, 3), np.empty(3, F32)
    op = type("Op", (), {"type": "Sum", "name": "sum"})()
    calls = []

    def fast():
        calls.append("fast")
        np.copyto(out, x.sum(axis=0))

    def kernel(op, values, ctx):
        calls.append("kernel")
        return [np.full(3, int(values[0]), F32)]

    step = while_unchanged([axis], fast, op, [out], kernel, [axis, x], None)
    step()
    np.testing.assert_array_equal(out, [3, 5, 7])
    axis[...] = 0
    step()
    np.testing.assert_array_equal(out, [0, 0, 0])
    axis[...] = 5
    step()
    np.testing.assert_array_equal(out, [5, 5, 5])
    axis[...] = 1
    step()
    np.testing.assert_array_equal(out, [3, 5, 7])
    assert calls == ["fast", "kernel", "kernel", "fast"]
