"""The graph passes' contract on hand-made cases the random graphs of
tests/test_fusion_properties.py reach rarely: feeds cut, preserved names, stateful ops,
control edges, the session's use of the rewritten graph, and ``mg.optimize``'s API."""

from __future__ import annotations

import numpy as np
import pytest

import minigraph as mg
from minigraph import ops

F32 = np.float32
OFF = mg.OptimizerOptions.all_off()


def _types(graph: mg.Graph) -> dict[str, str]:
    return {op.name: op.type for op in graph}


def test_a_fed_shape_is_never_folded_and_a_static_one_is():
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[2, 3])
    shape = ops.Shape(root.WithOpName("shape"), x)
    y = ops.Reshape(root.WithOpName("y"), ops.Reshape(root, x, [-1]), shape)
    assert _types(mg.optimize(root, [y]))["shape"] == "Const"
    assert _types(mg.optimize(root, [y], feeds=[shape]))["shape"] == "Shape"
    session = mg.ClientSession(root)
    value = np.arange(6, dtype=F32).reshape(2, 3)
    np.testing.assert_array_equal(session.Run({x: value}, y), value)
    fed = session.Run({x: value, shape: np.array([3, 2], np.int32)}, y)
    np.testing.assert_array_equal(fed, value.reshape(3, 2))


def test_fetched_and_targeted_nodes_keep_their_names_and_unneeded_ones_go():
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[4])
    kept = ops.Identity(root.WithOpName("kept"), x)
    relay = ops.Identity(root.WithOpName("relay"), kept)
    y = ops.Neg(root.WithOpName("y"), relay)
    ops.Exp(root.WithOpName("unused"), x)
    names = _types(mg.optimize(root, [kept, y]))
    assert names == {"x": "Placeholder", "kept": "Identity", "y": "Neg"}


def test_stateful_ops_are_never_merged_and_pure_duplicates_are():
    root = mg.Scope.NewRootScope()
    shape = ops.Const(root.WithOpName("shape"), np.array([3], np.int32))
    a = ops.RandomUniform(root.WithOpName("a"), shape, dtype=mg.float32)
    b = ops.RandomUniform(root.WithOpName("b"), shape, dtype=mg.float32)
    s1, s2 = ops.Square(root.WithOpName("s1"), a), ops.Square(root.WithOpName("s2"), a)
    total = ops.AddV2(root.WithOpName("total"), ops.AddV2(root, s1, s2), b)
    names = _types(mg.optimize(root, [total]))
    assert {"a", "b", "s1"} <= set(names) and "s2" not in names
    on, off = mg.ClientSession(root), mg.ClientSession(root, optimizer=OFF)
    for _ in range(2):  # the random streams advance alike
        assert on.Run(total).tobytes() == off.Run(total).tobytes()


def test_control_edges_through_removed_nodes_keep_their_order():
    """An Identity reading a variable after a NoOp that joins two Assigns: the NoOp goes,
    the Identity still runs after both Assigns."""
    root = mg.Scope.NewRootScope()
    v = ops.Variable(root.WithOpName("v"), shape=[2], dtype=mg.float32)
    w = ops.Variable(root.WithOpName("w"), shape=[2], dtype=mg.float32)
    set_v = ops.Assign(root.WithOpName("set_v"), v, np.array([1, 2], F32))
    set_w = ops.Assign(root.WithOpName("set_w"), w, np.array([3, 4], F32))
    join = ops.NoOp(root.WithOpName("join").WithControlDependencies([set_v, set_w]))
    read = ops.Identity(root.WithOpName("read").WithControlDependencies([join]), v)
    total = ops.AddV2(root.WithOpName("total"), read, w)
    rewritten = mg.optimize(root, [total], options=mg.OptimizerOptions(remapper=False))
    assert "join" not in _types(rewritten)
    assert {c.name for c in rewritten.get_operation("read").control_inputs} == {"set_v",
                                                                                 "set_w"}
    # the remapper then joins the Assigns into one op (named as the last), which the
    # Identity runs after
    fused = mg.optimize(root, [total])
    assert fused.get_operation("set_w").type == "_FusedAssign"
    assert [c.name for c in fused.get_operation("read").control_inputs] == ["set_w"]
    session = mg.ClientSession(root)
    session.Run({}, [], targets=[set_v, set_w])
    np.testing.assert_array_equal(session.Run(total), [4, 6])


def test_the_session_runs_the_rewritten_graph_and_the_switches_turn_passes_off():
    rng = np.random.default_rng(0)
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[2, 5, 5, 3])
    conv = ops.Conv2D(root.WithOpName("conv"), x, rng.standard_normal((3, 3, 3, 4)).astype(F32),
                      [1, 1, 1, 1], "SAME")
    y = ops.Relu(root.WithOpName("relu"), ops.BiasAdd(root.WithOpName("bias"), conv,
                                                      rng.standard_normal(4).astype(F32)))
    feed = {x: rng.standard_normal((2, 5, 5, 3)).astype(F32)}
    results = {}
    for remapper in (True, False):
        metadata = mg.RunMetadata()
        session = mg.ClientSession(root, optimizer=mg.OptimizerOptions(remapper=remapper))
        results[remapper] = session.Run(feed, y, run_metadata=metadata)
        ran = {s.node_name: s.op_type for s in metadata.step_stats}
        assert ran["relu"] == ("_FusedConv2D" if remapper else "Relu")
        assert ("conv" in ran) != remapper
    assert results[True].tobytes() == results[False].tobytes()
    assert _types(root.graph())["relu"] == "Relu"  # the user's graph is left as built


def test_a_fused_node_checks_its_inputs_as_its_chain_would():
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[1, 4, 4, 3])
    scale = ops.Placeholder(root.WithOpName("scale"), mg.float32)
    conv = ops.Conv2D(root, x, np.ones((1, 1, 3, 2), F32), [1, 1, 1, 1], "VALID")
    stats = [np.ones(2, F32)] * 3
    y = ops.Relu(root.WithOpName("act"), ops.FusedBatchNormV3(
        root, conv, scale, *stats, is_training=False).y)
    session = mg.ClientSession(root)
    with pytest.raises(mg.errors.InvalidArgumentError, match="scale"):
        session.Run({x: np.ones((1, 4, 4, 3), F32), scale: np.ones(3, F32)}, y)
    out = session.Run({x: np.ones((1, 4, 4, 3), F32), scale: np.ones(2, F32)}, y)
    assert out.shape == (1, 4, 4, 2)


def test_optimize_refuses_what_is_not_a_graph_or_its_tensor():
    root, other = mg.Scope.NewRootScope(), mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[1])
    elsewhere = ops.Placeholder(other.WithOpName("x"), mg.float32, shape=[1])
    with pytest.raises(mg.errors.InvalidArgumentError, match="Graph or a Scope"):
        mg.optimize("graph", [x])
    with pytest.raises(mg.errors.InvalidArgumentError, match="fetch"):
        mg.optimize(root, [elsewhere])
    with pytest.raises(mg.errors.InvalidArgumentError, match="must be True or False"):
        mg.OptimizerOptions(pruning="yes")
    assert _types(mg.optimize(root, ["x:0"])) == {"x": "Placeholder"}
