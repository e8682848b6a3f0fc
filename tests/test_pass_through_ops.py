"""IdentityN, StopGradient, Snapshot, PreventGradient (minigraph/ops/array_ops.py): each hands
its inputs on uncopied, on every backend; they differ from Identity only in their gradients
(StopGradient: none, PreventGradient: an error quoting its message); of constants they are
folded like Identity (run once, in the first Run); TF's own graph with them imports."""

from __future__ import annotations

import os

import numpy as np
import pytest
from conftest import BACKENDS

import minigraph as mg
from minigraph import ops

F32 = np.float32
X = np.arange(6, dtype=F32).reshape(2, 3)
SINGLE = (ops.StopGradient, ops.Snapshot, ops.PreventGradient)


@pytest.mark.parametrize("backend", BACKENDS)
def test_inputs_are_handed_on_uncopied(backend):
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root, mg.float32, shape=[None, 3])
    n = ops.Placeholder(root, mg.int64, shape=[])
    outs = [wrapper(root, x) for wrapper in SINGLE]
    both = ops.IdentityN(root, [x, n])
    assert [o.shape for o in outs] == [mg.TensorShape([None, 3])] * 3
    assert [o.dtype for o in both.output] == [mg.float32, mg.int64]
    assert both.output[1].shape == mg.TensorShape([]) and len(both) == 2
    count = np.int64(7)
    values = mg.ClientSession(root, backend=backend).Run({x: X, n: count},
                                                          [*outs, *both.output])
    for value in values[:4]:
        assert np.shares_memory(value, X) or value is X
        np.testing.assert_array_equal(value, X)
    assert values[4] == 7 and values[4].dtype == np.int64


def test_identity_n_checks_its_types():
    root = mg.Scope.NewRootScope()
    with pytest.raises(mg.errors.InvalidArgumentError, match=r"attr 'T' must have at least 1"):
        ops.IdentityN(root, [])
    with pytest.raises(mg.errors.InvalidArgumentError,
                       match=r"attr 'T' is \[float32, int32\], but the inputs have dtypes "
                             r"\[float32, float32\]"):
        ops.IdentityN(root, [X, X], T=[mg.float32, mg.int32])
    with pytest.raises(mg.errors.InvalidArgumentError, match="must be a list of tensors"):
        ops.IdentityN(root, X)


def test_gradients():
    """d/dx of x * (StopGradient(x) + Snapshot(x) + IdentityN(x, x)[1]) = 3x + x + x: the
    stopped factor is a constant; PreventGradient refuses with its reason."""
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[2, 3])
    factor = ops.AddN(root, [ops.StopGradient(root, x), ops.Snapshot(root, x),
                             ops.IdentityN(root, [x, x])[1]])
    grad, = mg.AddSymbolicGradients(root, [ops.Mul(root, x, factor)], [x])
    np.testing.assert_array_equal(mg.ClientSession(root).Run({x: X}, grad), 5 * X)
    stopped = mg.AddSymbolicGradients(root, [ops.StopGradient(root, x)], [x])
    assert stopped == [None]
    blocked = ops.PreventGradient(root.WithOpName("blocked"), x, message="no second order")
    with pytest.raises(mg.errors.InvalidArgumentError,
                       match=r"PreventGradient 'blocked': Gradient explicitly disabled. Reason: "
                             r"no second order"):
        mg.AddSymbolicGradients(root, [blocked], [x])


def test_pass_throughs_of_constants_run_once():
    """Like Const -> Identity, a pass-through of constants is folded: the second Run runs
    only the step that reads the feed (the executor's own folding, so the graph passes,
    which would remove the pass-throughs before it, are off)."""
    root = mg.Scope.NewRootScope()
    weight = ops.Identity(root, ops.Const(root, X))
    chain = ops.IdentityN(root, [ops.Snapshot(root, ops.StopGradient(root, weight)),
                                 ops.PreventGradient(root, weight)])
    x = ops.Placeholder(root, mg.float32)
    y = ops.Mul(root, ops.Mul(root, x, chain[0]), chain[1])
    session = mg.ClientSession(root, optimizer=mg.OptimizerOptions.all_off())
    ran = []
    for _ in range(2):
        metadata = mg.RunMetadata()
        np.testing.assert_array_equal(session.Run({x: F32(2)}, y, run_metadata=metadata),
                                      2 * X * X)
        ran.append([stats.op_type for stats in metadata.step_stats])
    assert {"IdentityN", "Snapshot", "StopGradient", "PreventGradient"} <= set(ran[0])
    assert ran[1] == ["Mul", "Mul"]


@pytest.mark.oracle
def test_a_tensorflow_graph_with_the_pass_throughs_imports():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    tf = pytest.importorskip("tensorflow")
    from minigraph.testing import tf_graphs

    def body(x, n):
        raw = tf.raw_ops
        a, b = raw.IdentityN(input=[x, n])
        return (raw.StopGradient(input=a) * 2, raw.Snapshot(input=b),
                raw.PreventGradient(input=a, message="frozen"))

    graph = tf_graphs._concrete("pass_through", body, [tf.TensorSpec([None, 3], tf.float32),
                                                       tf.TensorSpec([], tf.int64)],
                                [X, np.int64(3)])
    root = mg.import_graph_def(graph.graph_def)
    for backend in BACKENDS:
        ours = mg.ClientSession(root, backend=backend).Run(graph.feeds, graph.fetches)
        for a, b in zip(ours, graph.expected):
            assert a.dtype == b.dtype
            np.testing.assert_array_equal(a, b)
