"""What a bound program leaves out of its steady loop (minigraph/client/executor.py): values
the signature fixes (a mean's gradient over a fed batch), variable reads no earlier step
writes, NoOps. Training steps run bound must give the bits of a session that never binds
(every check, no memory planner), step after step, across batch sizes; kept values are never
written into; fetched arrays stay theirs; a variable gone after binding still raises.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minigraph as mg
from minigraph import ops
from minigraph.client import executor, planner
from minigraph.errors import FailedPreconditionError

F32 = np.float32
UNIT = planner.MIN_INPLACE_BYTES // 4  # floats in a value in-place writes may take


def _init(value: np.ndarray):
    return lambda scope, shape, dtype: ops.Const(scope, value)


def _model(features: int, classes: int, loss_kind: str, optimizer: str, seed: int):
    """x [None, features] -> logits = x w + b -> a mean loss; the optimizer's update ops."""
    rng = np.random.default_rng(seed)
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[None, features])
    w = mg.train.variable(root, "w", [features, classes],
                          _init(rng.standard_normal((features, classes)).astype(F32)))
    b = mg.train.variable(root, "b", [classes], _init(np.zeros(classes, F32)))
    logits = ops.BiasAdd(root, ops.MatMul(root, x, w), b)
    if loss_kind == "xent":
        labels = ops.Placeholder(root.WithOpName("labels"), mg.int32, shape=[None])
        per_row = ops.SparseSoftmaxCrossEntropyWithLogits(root, logits, labels).loss
        loss = ops.Mean(root.WithOpName("loss"), per_row, [0])
    else:  # a mean over every element of [batch, classes]
        labels = ops.Placeholder(root.WithOpName("labels"), mg.float32, shape=[None, classes])
        loss = ops.Mean(root.WithOpName("loss"), ops.Square(root, ops.Sub(root, logits,
                                                                          labels)), [0, 1])
    method = {"sgd": mg.train.GradientDescent(0.1), "momentum": mg.train.Momentum(0.1, 0.9),
              "adam": mg.train.Adam(0.01)}[optimizer]
    updates = method.minimize(root, loss, [w, b])
    return root, x, labels, loss, [w, b], updates


def _program(session: mg.ClientSession) -> executor.BoundProgram:
    bound = [plan.bound for plan, _ in session._plans.values() if plan.bound is not None]
    assert len(bound) == 1
    return bound[0]


@settings(max_examples=10, deadline=None)
@given(features=st.integers(1, 9), classes=st.integers(2, 5),
       loss_kind=st.sampled_from(["xent", "squares"]),
       optimizer=st.sampled_from(["sgd", "momentum", "adam"]),
       batches=st.lists(st.integers(1, 6), min_size=3, max_size=7), seed=st.integers(0, 999))
def test_bound_training_steps_give_the_bits_of_checked_runs(features, classes, loss_kind,
                                                            optimizer, batches, seed):
    root, x, labels, loss, variables, updates = _model(features, classes, loss_kind,
                                                      optimizer, seed)
    bound = mg.ClientSession(root, backend="native", check_outputs=False)
    plain = mg.ClientSession(root, backend="native", check_outputs=True,
                             optimizer=mg.OptimizerOptions(memory_planner=False))
    for session in (bound, plain):
        session.Run({}, [], targets=mg.train.global_variables_initializer(root))
    rng = np.random.default_rng(seed)
    held = []
    # each batch size twice in a row at least: the second run of a signature is bound
    for rows in [n for n in batches for _ in range(3)]:
        feed = {x: rng.standard_normal((rows, features)).astype(F32),
                labels: (rng.integers(0, classes, rows).astype(np.int32) if loss_kind == "xent"
                         else rng.standard_normal((rows, classes)).astype(F32))}
        got = bound.Run(feed, [loss, *variables], targets=updates)
        want = plain.Run(feed, [loss, *variables], targets=updates)
        for value, reference in zip(got, want):
            np.testing.assert_array_equal(value, reference, strict=True)
        held.append((got, [value.copy() for value in got]))
    for got, copies in held:  # the variables' values a Run returned stay what they were
        for value, copy in zip(got, copies):
            np.testing.assert_array_equal(value, copy, strict=True)
    for name in ("w", "b"):
        np.testing.assert_array_equal(bound.state.read(name), plain.state.read(name))
        # the optimizer's kernels store their new arrays (no copy), read-only
        assert not bound.state.read(name).flags.writeable
    program = _program(bound)  # the loop did leave steps out
    assert program.folded and len(program.preloads) >= 2
    assert len(program.program) < len(program.entries)


def test_mean_gradient_over_a_fed_batch_is_kept_from_the_first_bound_run():
    """The 1/N of a mean's gradient and the shapes of a fed batch are signature constants:
    after binding, the loop runs neither Shape, Size, Cast, Div of sizes nor BroadcastTo."""
    root, x, labels, loss, variables, updates = _model(3, 4, "xent", "sgd", 0)
    session = mg.ClientSession(root, backend="native", check_outputs=False)
    session.Run({}, [], targets=mg.train.global_variables_initializer(root))
    feed = {x: np.ones((5, 3), F32), labels: np.arange(5, dtype=np.int32) % 4}
    for _ in range(3):
        session.Run(feed, loss, targets=updates)
    program = _program(session)
    left = {entry[2].type for entry in program.program if entry[2] is not None}
    assert not left & {"Shape", "Size", "Cast", "BroadcastTo", "OnesLike", "Variable", "NoOp"}
    for _, value in program.folded:
        assert not value.flags.writeable


def test_kept_values_are_never_written_in_place():
    """g = 2 * OnesLike(x) is fixed by x's shape and large enough for in-place writes; the
    AddV2 reading it last must not write into it (the next run would read x + 2 there)."""
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[None, UNIT])
    g = ops.Mul(root, ops.OnesLike(root, x), ops.Const(root, F32(2)))
    y = ops.Relu(root.WithOpName("y"), ops.AddV2(root, g, x))
    shape = ops.Shape(root.WithOpName("shape"), x)
    session = mg.ClientSession(root, backend="native", check_outputs=False)
    rng = np.random.default_rng(1)
    shapes = []
    for _ in range(5):
        value = rng.uniform(-4, 4, (2, UNIT)).astype(F32)
        got, got_shape = session.Run({x: value}, [y, shape])
        np.testing.assert_array_equal(got, np.maximum(value + F32(2), 0), strict=True)
        np.testing.assert_array_equal(got_shape, [2, UNIT])
        shapes.append(got_shape)
    assert _program(session).folded  # g and the ones were kept
    # a fetched fixed value is not kept: each Run returned its own array
    assert len({id(s) for s in shapes}) == len(shapes)
    assert all(s.flags.writeable for s in shapes)


def test_a_variable_gone_after_binding_raises_in_its_place():
    root, x, labels, loss, variables, updates = _model(2, 3, "squares", "momentum", 3)
    session = mg.ClientSession(root, backend="native", check_outputs=False)
    session.Run({}, [], targets=mg.train.global_variables_initializer(root))
    feed = {x: np.ones((4, 2), F32), labels: np.zeros((4, 3), F32)}
    for _ in range(3):
        session.Run(feed, loss, targets=updates)
    assert _program(session).preloads
    kept = session.state.variables.pop("w")
    with pytest.raises(FailedPreconditionError, match="uninitialized value 'w'"):
        session.Run(feed, loss, targets=updates)
    session.state.write("w", kept)
    plain = mg.ClientSession(root, backend="native", check_outputs=True,
                             optimizer=mg.OptimizerOptions(memory_planner=False))
    for name, value in session.state.variables.items():
        plain.state.write(name, value)
    np.testing.assert_array_equal(session.Run(feed, loss, targets=updates),
                                  plain.Run(feed, loss, targets=updates), strict=True)


def test_a_guard_failing_after_skipped_steps_runs_the_rest_checked():
    """a = Tanh(x) dies at Shape(a), which the loop skips (its value is kept): the Reshape
    after it, whose shape is fed (a guard: its results' shapes are compared with the first
    bound run's), drops a in its place. A new shape value fails the guard there; the rest of
    that run runs checked and the plan binds anew."""
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[None, 6])
    dims = ops.Placeholder(root.WithOpName("dims"), mg.int32, shape=[2])
    shape = ops.Shape(root, ops.Tanh(root, x))
    y = ops.Relu(root.WithOpName("y"), ops.Reshape(root, x, dims))
    filled = ops.Fill(root.WithOpName("filled"), shape, ops.Const(root, F32(1)))
    session = mg.ClientSession(root, backend="native", check_outputs=False)
    value = np.arange(-12, 12, dtype=F32).reshape(4, 6)
    for run, new_dims in enumerate([[4, 6]] * 3 + [[6, 4]] * 3 + [[3, 8]] * 3 + [[8, 3]]):
        if run in (3, 6, 9):  # bound and planned (2 runs after a new signature or a
            # failed guard): the guard fails in a lean loop
            program = _program(session)
            assert program.arena is not None and len(program.program) < len(program.entries)
        got_y, got_filled = session.Run({x: value, dims: np.array(new_dims, np.int32)},
                                        [y, filled])
        np.testing.assert_array_equal(got_y, np.maximum(value.reshape(new_dims), 0),
                                      strict=True)
        np.testing.assert_array_equal(got_filled, np.ones((4, 6), F32), strict=True)
