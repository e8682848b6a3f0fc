"""Training: variables, optimizer formulas, checkpoints, graph files, and real training runs.

Optimizer updates are checked against TF's documented formulas written here in float64;
checkpoints and graph files against their own round trips and against corruption; the
digits CNN must really learn (an accuracy threshold on held-out data) in both layouts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import minigraph as mg
from minigraph import nn, ops
from minigraph.errors import FailedPreconditionError, InvalidArgumentError
from minigraph.examples import train_digits_cnn
from minigraph.ops.state_ops import constant_fill

F32 = np.float32


def _variable_graph(shape=(3, 2)):
    root = mg.Scope.NewRootScope()
    init = np.arange(np.prod(shape), dtype=F32).reshape(shape) / 10
    var = mg.train.variable(root, "w", list(shape), lambda s, sh, dt: ops.Const(s, init))
    return root, var, init


# ----------------------------------------------------------------------------- variables


def test_variable_needs_initialization_then_keeps_its_value():
    root, var, init = _variable_graph()
    session = mg.ClientSession(root)
    with pytest.raises(FailedPreconditionError, match="uninitialized value 'w'"):
        session.Run({}, var)
    session.Run({}, [], targets=mg.train.global_variables_initializer(root))
    np.testing.assert_array_equal(session.Run({}, var), init)
    other = mg.ClientSession(root)  # state belongs to a session
    with pytest.raises(FailedPreconditionError):
        other.Run({}, var)


def test_assign_checks_shape_at_construction_and_run():
    root, var, _ = _variable_graph()
    with pytest.raises(InvalidArgumentError, match="Assign"):
        ops.Assign(root, var, np.zeros((2, 2), F32))
    free = ops.Placeholder(root, mg.float32)
    assign = ops.Assign(root, var, free)
    session = mg.ClientSession(root)
    with pytest.raises(InvalidArgumentError, match=r"input 'value' must have the variable's "
                                                   r"shape \(3, 2\), got \(4,\)"):
        session.Run({free: np.zeros((4,), F32)}, assign)
    with pytest.raises(InvalidArgumentError, match="must be the output of a Variable"):
        ops.Assign(root, free, free)


def test_fetched_values_do_not_change_after_updates():
    root, var, init = _variable_graph()
    session = mg.ClientSession(root)
    session.Run({}, [], targets=mg.train.global_variables_initializer(root))
    before = session.Run({}, var)
    session.Run({}, [], targets=[ops.Assign(root, var, np.ones((3, 2), F32)).op])
    np.testing.assert_array_equal(before, init)
    np.testing.assert_array_equal(session.Run({}, var), np.ones((3, 2)))


def test_glorot_uniform_is_in_range_and_seeded():
    root = mg.Scope.NewRootScope()
    values = []
    for _ in range(2):
        root = mg.Scope.NewRootScope()
        var = mg.train.variable(root, "w", [30, 20], lambda s, sh, dt: ops.state_ops
                                .glorot_uniform(s, sh, fan_in=30, fan_out=20, seed=3))
        session = mg.ClientSession(root)
        session.Run({}, [], targets=mg.train.global_variables_initializer(root))
        values.append(session.Run({}, var))
    limit = np.sqrt(6 / 50)
    assert np.abs(values[0]).max() <= limit and values[0].std() > limit / 3
    np.testing.assert_array_equal(values[0], values[1])


# ----------------------------------------------------------------------------- optimizers


def _run_updates(make_ops, grads, var0, slots=()):
    """Run ``make_ops`` once per gradient; return the variable after each step."""
    root = mg.Scope.NewRootScope()
    var = mg.train.variable(root, "var", list(var0.shape),
                            lambda s, sh, dt: ops.Const(s, var0))
    slot_vars = [mg.train.variable(root, name, list(var0.shape),
                                   lambda s, sh, dt: constant_fill(s, sh, 0.0))
                 for name in slots]
    grad = ops.Placeholder(root, mg.float32, shape=var0.shape)
    update = make_ops(root, var, slot_vars, grad)
    session = mg.ClientSession(root)
    session.Run({}, [], targets=mg.train.global_variables_initializer(root))
    history = []
    for g in grads:
        session.Run({grad: g}, [], targets=update)
        history.append(session.Run({}, var).astype(np.float64))
    return history


@pytest.fixture
def problem():
    rng = np.random.default_rng(0)
    return rng.normal(size=(4, 3)).astype(F32), [rng.normal(size=(4, 3)).astype(F32)
                                                 for _ in range(4)]


def test_gradient_descent(problem):
    var0, grads = problem
    got = _run_updates(lambda r, v, s, g: [ops.ApplyGradientDescent(r, v, F32(0.1), g).op],
                       grads, var0)
    expected = var0.astype(np.float64)
    for g, value in zip(grads, got):
        expected = expected - 0.1 * g
        np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("nesterov", [False, True])
def test_momentum(problem, nesterov):
    var0, grads = problem
    got = _run_updates(lambda r, v, s, g: [ops.ApplyMomentum(
        r, v, s[0], F32(0.1), g, F32(0.9), use_nesterov=nesterov).op], grads, var0,
        slots=["accum"])
    var, accum = var0.astype(np.float64), np.zeros_like(var0, np.float64)
    for g, value in zip(grads, got):
        accum = accum * 0.9 + g
        var = var - (0.1 * g + 0.1 * 0.9 * accum if nesterov else 0.1 * accum)
        np.testing.assert_allclose(value, var, rtol=1e-5, atol=1e-6)


def test_adam_optimizer_matches_tf_formula(problem):
    """mg.train.Adam (ApplyAdam + beta-power variables) against TF's Adam in float64."""
    var0, grads = problem
    optimizer = mg.train.Adam(0.01, 0.9, 0.999, 1e-7)
    got = _run_updates(lambda r, v, s, g: optimizer.apply(r, [(g, v)]), grads, var0)
    var = var0.astype(np.float64)
    m = v = np.zeros_like(var)
    for t, (g, value) in enumerate(zip(grads, got), start=1):
        lr_t = 0.01 * np.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t)
        m = m + (g - m) * 0.1
        v = v + (g * g - v) * 0.001
        var = var - lr_t * m / (np.sqrt(v) + 1e-7)
        np.testing.assert_allclose(value, var, rtol=1e-5, atol=1e-6)


def test_training_ops_reject_non_variables():
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root, mg.float32, shape=[2])
    with pytest.raises(InvalidArgumentError, match="must be the output of a Variable"):
        ops.ApplyGradientDescent(root, x, F32(0.1), x)


# ----------------------------------------------------------------------------- checkpoints


def _initialized(root):
    session = mg.ClientSession(root)
    session.Run({}, [], targets=mg.train.global_variables_initializer(root))
    return session


def test_checkpoint_round_trip_is_atomic(tmp_path):
    root, var, init = _variable_graph()
    bf = mg.train.variable(root, "half", [2], lambda s, sh, dt: ops.Const(
        s, np.array([1.5, -2.25], mg.bfloat16.np_dtype)), mg.bfloat16)
    session = _initialized(root)
    path = mg.train.Saver(root).save(session, tmp_path / "ckpt.npz")
    assert os.listdir(tmp_path) == ["ckpt.npz"]  # no temporary file left behind
    restored = mg.ClientSession(root)
    mg.train.Saver(root).restore(restored, path)
    np.testing.assert_array_equal(restored.Run({}, var), init)
    half = restored.Run({}, bf)
    assert half.dtype == mg.bfloat16.np_dtype and half.astype(F32).tolist() == [1.5, -2.25]


def test_failed_save_keeps_the_old_checkpoint(tmp_path, monkeypatch):
    root, _, _ = _variable_graph()
    session = _initialized(root)
    path = tmp_path / "ckpt.npz"
    mg.train.Saver(root).save(session, path)
    original = path.read_bytes()

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(np.lib.format, "write_array", crash)  # mid-way through the file
    with pytest.raises(OSError, match="disk full"):
        mg.train.Saver(root).save(session, path)
    assert path.read_bytes() == original
    assert os.listdir(tmp_path) == ["ckpt.npz"]


def test_checkpoint_mismatches_are_clear(tmp_path):
    root, _, _ = _variable_graph()
    session = _initialized(root)
    path = tmp_path / "ckpt.npz"
    mg.train.Saver(root).save(session, path)
    bigger, _, _ = _variable_graph((3, 3))
    with pytest.raises(InvalidArgumentError, match=r"'w' has shape \[3, 2\].*expects"):
        mg.train.Saver(bigger).restore(mg.ClientSession(bigger), path)
    other = mg.Scope.NewRootScope()
    mg.train.variable(other, "v", [3, 2], lambda s, sh, dt: constant_fill(s, sh, 0.0))
    with pytest.raises(InvalidArgumentError, match="no value for variable 'v'"):
        mg.train.Saver(other).restore(mg.ClientSession(other), path)
    typed = mg.Scope.NewRootScope()
    mg.train.variable(typed, "w", [3, 2], lambda s, sh, dt: constant_fill(s, sh, 0.0, dt),
                      mg.float64)
    with pytest.raises(InvalidArgumentError, match="dtype float32, the graph expects float64"):
        mg.train.Saver(typed).restore(mg.ClientSession(typed), path)
    corrupt = tmp_path / "corrupt.npz"
    corrupt.write_bytes(path.read_bytes()[:40])
    with pytest.raises(InvalidArgumentError, match="cannot read checkpoint"):
        mg.train.Saver(root).restore(mg.ClientSession(root), corrupt)


# ----------------------------------------------------------------------------- graph files


def test_graph_file_round_trips_exactly(tmp_path):
    args = train_digits_cnn.parse(["--data-format", "NCHW"])
    graph = train_digits_cnn.build(args)["root"].graph()
    first = mg.io.write_graph(graph, tmp_path / "a.json")
    again = mg.io.write_graph(mg.io.read_graph(first), tmp_path / "b.json")
    assert (tmp_path / "a.json").read_text() == (tmp_path / "b.json").read_text()
    rebuilt = mg.io.read_graph(again)
    for old, new in zip(graph.operations(), rebuilt.operations(), strict=True):
        assert (old.name, old.type, old.device) == (new.name, new.type, new.device)
        assert [i.name for i in old.inputs] == [i.name for i in new.inputs]
        assert [o.shape for o in old.outputs] == [o.shape for o in new.outputs]


def test_graph_file_errors(tmp_path):
    root, _, _ = _variable_graph()
    path = mg.io.write_graph(root, tmp_path / "g.json")
    document = json.loads((tmp_path / "g.json").read_text())
    document["version"] = 99
    (tmp_path / "new.json").write_text(json.dumps(document))
    (tmp_path / "new.json.npz").write_bytes((tmp_path / "g.json.npz").read_bytes())
    with pytest.raises(InvalidArgumentError, match="version 99.*upgrade"):
        mg.io.read_graph(tmp_path / "new.json")
    document = json.loads((tmp_path / "g.json").read_text())
    document["ops"][0]["type"] = "NoSuchOp"
    (tmp_path / "odd.json").write_text(json.dumps(document))
    (tmp_path / "odd.json.npz").write_bytes((tmp_path / "g.json.npz").read_bytes())
    with pytest.raises(InvalidArgumentError, match="'NoSuchOp'"):
        mg.io.read_graph(tmp_path / "odd.json")
    assert mg.io.read_graph(path)  # the original still reads


# ----------------------------------------------------------------------------- real training


def _train(tmp_path, *extra):
    args = train_digits_cnn.parse(["--epochs", "3", "--quiet", "--no-plots", "--out",
                                   str(tmp_path), *extra])
    return train_digits_cnn.train(args)


def test_digits_cnn_learns(tmp_path):
    result = _train(tmp_path)
    assert result["test_accuracy"] >= 0.95
    losses = [h["train_loss"] for h in result["history"]]
    assert losses[-1] < losses[0] / 3


def test_nhwc_and_nchw_train_the_same_model(tmp_path):
    nhwc = _train(tmp_path, "--name", "nhwc", "--backend", "reference", "--epochs", "1")
    nchw = _train(tmp_path, "--name", "nchw", "--backend", "reference", "--epochs", "1",
                  "--data-format", "NCHW")
    a, b = nhwc["history"][0], nchw["history"][0]
    assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-4)
    assert a["test_loss"] == pytest.approx(b["test_loss"], rel=1e-4)


def test_resume_continues_the_same_loss_curve(tmp_path):
    """Two epochs straight == one epoch, a checkpoint, a fresh session, one more epoch."""
    straight = _train(tmp_path, "--name", "straight", "--epochs", "2")
    _train(tmp_path, "--name", "resumed", "--epochs", "1")
    resumed = _train(tmp_path, "--name", "resumed", "--epochs", "1", "--resume")
    assert [h["epoch"] for h in resumed["history"]] == [1, 2]
    for key in ("train_loss", "test_loss", "test_accuracy"):
        assert resumed["history"][1][key] == pytest.approx(straight["history"][1][key],
                                                           rel=1e-6)


def test_exported_model_predicts_in_a_fresh_process(tmp_path):
    result = _train(tmp_path, "--name", "export", "--epochs", "2")
    output = subprocess.run(
        [sys.executable, "-m", "minigraph.examples.train_digits_cnn", "--predict",
         result["run_dir"]], capture_output=True, text=True, check=True).stdout
    accuracy = float(output.strip().split()[-1])
    assert accuracy == pytest.approx(result["test_accuracy"], abs=1e-6)


def test_batch_norm_layer_updates_moving_statistics():
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root, mg.float32, shape=[None, 2, 2, 3])
    layer = nn.BatchNorm(root, "bn", 3, momentum=0.75)
    y = layer(root, x, training=True)
    session = _initialized(root)
    value = np.random.default_rng(0).normal(2.0, 3.0, (8, 2, 2, 3)).astype(F32)
    session.Run({x: value}, y, targets=root.graph().get_collection(nn.UPDATE_OPS))
    mean = value.reshape(-1, 3).mean(axis=0)
    variance = value.reshape(-1, 3).var(axis=0, ddof=1)
    np.testing.assert_allclose(session.Run({}, layer.moving_mean), 0.25 * mean, rtol=1e-5)
    np.testing.assert_allclose(session.Run({}, layer.moving_variance), 0.75 + 0.25 * variance,
                               rtol=1e-5)
