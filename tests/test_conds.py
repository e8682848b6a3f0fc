"""TensorFlow's lowered conditionals at import (``interop/conds.py``) and ``Conditional``
(``ops/control_flow_ops.py``, run by ``client/loops.py``).

* Hand-built conditionals (TF's lowered form: ``Switch``/``Merge``, a predicate Switch and
  its pivots, constants in a branch by control edge): both branches against numpy, the
  untaken branch not run (it would fail), values read from outside without a Switch, two
  results; refusals naming the node (a node reading both branches, a Merge of one branch,
  a reader of ``value_index``, a non-bool predicate) and the run-time check of a
  non-scalar predicate.
* ``oracle``: graphs TensorFlow freezes: a data-dependent ``tf.cond``, nested conditionals,
  ``tf.switch_case`` (indices in and out of range) and ``tf.case``,
  two conditionals on one predicate (the second reading the first), a conditional inside a
  while loop and a loop inside a conditional, and Keras' ``CenterCrop`` on an input of
  unknown size (crop when it is large enough, resize when not); each against TensorFlow's
  own run on every backend.
* Rewired graphs: random edits of a lowered loop and a conditional import and run, or fail
  with one of minigraph's errors.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
from conftest import BACKENDS
from test_while_loops import (
    FLOAT,
    _frozen,
    _matches_tensorflow,
    add,
    const,
    counting_loop,
    node,
)

import minigraph as mg
from minigraph.framework.errors import InvalidArgumentError, UnimplementedError
from minigraph.interop import protos
from tests.fuzz.hostile_cases import rewire

BOOL = protos.data_type_numbers()["DT_BOOL"]
X = np.array([[-1.0, 2.0, -3.0]], np.float32)


def conditional(extra_output: bool = False) -> Any:
    """``y = relu(x) * 2 + w if p else x - 1`` as TF lowers it (``w``: read from outside
    without a Switch); with ``extra_output`` a second result, ``x`` in both branches."""
    graph = protos.GraphDef()
    add(graph, "x", "Placeholder", dtype=("type", FLOAT))
    add(graph, "p", "Placeholder", dtype=("type", BOOL))
    const(graph, "w", np.float32(0.25))
    add(graph, "cond/switch_pred", "Switch", ["p", "p"], T=("type", BOOL))
    add(graph, "cond/pivot_t", "Identity", ["cond/switch_pred:1"], T=("type", BOOL))
    add(graph, "cond/pivot_f", "Identity", ["cond/switch_pred"], T=("type", BOOL))
    add(graph, "cond/x", "Switch", ["x", "p"], T=("type", FLOAT))
    add(graph, "cond/then/relu", "Relu", ["cond/x:1"], T=("type", FLOAT))
    const(graph, "cond/then/two", np.float32(2.0), ["^cond/pivot_t"])
    add(graph, "cond/then/mul", "Mul", ["cond/then/relu", "cond/then/two"], T=("type", FLOAT))
    add(graph, "cond/then/add", "AddV2", ["cond/then/mul", "w"], T=("type", FLOAT))
    const(graph, "cond/else/one", np.float32(1.0), ["^cond/pivot_f"])
    add(graph, "cond/else/sub", "Sub", ["cond/x", "cond/else/one"], T=("type", FLOAT))
    add(graph, "cond/output", "Merge", ["cond/then/add", "cond/else/sub"], T=("type", FLOAT),
        N=2)
    add(graph, "y", "Identity", ["cond/output"], T=("type", FLOAT))
    if extra_output:
        add(graph, "cond/output_1", "Merge", ["cond/x:1", "cond/x"], T=("type", FLOAT), N=2)
        add(graph, "z", "Identity", ["cond/output_1"], T=("type", FLOAT))
    return graph


def run(graph: Any, fetches, backend: str = "reference", **feeds) -> Any:
    root = mg.import_graph_def(graph)
    return mg.ClientSession(root, backend=backend).Run(
        {f"{k}:0": v for k, v in feeds.items()}, fetches)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("p", [True, False])
def test_conditional_runs_the_branch_the_predicate_picks(backend, p):
    y, z = run(conditional(extra_output=True), ["y:0", "cond/output_1:0"], backend, x=X,
               p=np.bool_(p))
    expected = np.maximum(X, 0) * 2 + np.float32(0.25) if p else X - 1
    np.testing.assert_array_equal(y, expected)
    np.testing.assert_array_equal(z, X)


def test_the_conditional_is_one_node_and_the_untaken_branch_does_not_run():
    """The then branch slices 3 elements of its input: fed 2, it would fail; with p false
    it does not run."""
    graph = conditional()
    const(graph, "cond/then/begin", np.array([0, 0], np.int32), ["^cond/pivot_t"])
    const(graph, "cond/then/size", np.array([1, 3], np.int32), ["^cond/pivot_t"])
    add(graph, "cond/then/slice", "Slice", ["cond/then/relu", "cond/then/begin",
                                            "cond/then/size"], T=("type", FLOAT),
        Index=("type", protos.data_type_numbers()["DT_INT32"]))
    node(graph, "cond/then/mul").input[0] = "cond/then/slice"
    root = mg.import_graph_def(graph)
    types = [op.type for op in root.graph().operations()]
    assert "Conditional" in types and "Switch" not in types and "Merge" not in types
    session = mg.ClientSession(root)
    x = X[:, :2]
    np.testing.assert_array_equal(session.Run({"x:0": x, "p:0": np.bool_(False)}, "y:0"),
                                  x - 1)
    with pytest.raises(InvalidArgumentError, match="Slice"):
        session.Run({"x:0": x, "p:0": np.bool_(True)}, "y:0")


def test_non_scalar_predicate_is_refused_at_run_time():
    with pytest.raises(InvalidArgumentError, match="the selector must be a scalar, got "
                                                   r"shape \(2,\)"):
        run(conditional(), "y:0", x=X, p=np.array([True, False]))


def _refused(graph: Any, error: type, pattern: str) -> None:
    with pytest.raises(error, match=pattern):
        mg.import_graph_def(graph)


def test_node_reading_both_branches_is_refused():
    graph = conditional()
    add(graph, "cond/both", "AddV2", ["cond/then/mul", "cond/else/sub"], T=("type", FLOAT))
    _refused(graph, UnimplementedError, "tf.cond at node 'cond/both': the AddV2 reads values "
                                        "live under different conditions")


def test_merge_of_one_branch_is_refused():
    graph = conditional()
    node(graph, "cond/output").input[1] = "cond/then/relu"
    _refused(graph, UnimplementedError, "tf.cond at node 'cond/output': the Merge does not "
                                        "join the branches of one conditional")


def test_reader_of_value_index_is_refused():
    graph = conditional()
    add(graph, "which", "Identity", ["cond/output:1"], T=("type",
                                                           protos.data_type_numbers()[
                                                               "DT_INT32"]))
    _refused(graph, UnimplementedError, "a node reads the Merge's value_index")


def test_predicate_must_be_bool():
    graph = conditional()
    for name in ("p", "cond/switch_pred", "cond/pivot_t", "cond/pivot_f"):
        graph.node.remove(node(graph, name))
    add(graph, "p", "Placeholder", dtype=("type", FLOAT))
    add(graph, "cond/switch_pred", "Switch", ["p", "p"], T=("type", FLOAT))
    add(graph, "cond/pivot_t", "Identity", ["cond/switch_pred:1"], T=("type", FLOAT))
    add(graph, "cond/pivot_f", "Identity", ["cond/switch_pred"], T=("type", FLOAT))
    _refused(graph, InvalidArgumentError, "tf.cond 'cond': its selector 'p:0' is float32, "
                                          "expected bool or int32")


# ----------------------------------------------------------------------------- TF's frozen conds


@pytest.mark.oracle
def test_tf_cond_on_data():
    tf = pytest.importorskip("minigraph.testing.tf_graphs").tensorflow()

    def body(x):
        return tf.cond(tf.reduce_sum(x) > 0, lambda: tf.nn.relu(x) * 2.0,
                       lambda: tf.square(x) - 1.0)

    frozen, graph_def = _frozen(body, [tf.TensorSpec([None, 3], tf.float32)])
    assert {"Switch", "Merge"} <= {n.op for n in graph_def.node}
    _matches_tensorflow(frozen, graph_def, [(X,), (-X,), (np.zeros((0, 3), np.float32),)],
                        exact=True)


@pytest.mark.oracle
def test_tf_nested_conds_and_two_conds_on_one_predicate():
    tf = pytest.importorskip("minigraph.testing.tf_graphs").tensorflow()

    def body(x, p, q):
        inner = tf.cond(p, lambda: tf.cond(q, lambda: x + 1.0, lambda: x * 3.0),
                        lambda: x - 2.0)
        return tf.cond(p, lambda: inner * 0.5, lambda: inner + x)  # reads the first

    frozen, graph_def = _frozen(body, [tf.TensorSpec([3], tf.float32),
                                       tf.TensorSpec([], tf.bool), tf.TensorSpec([], tf.bool)])
    x = np.array([1.0, -2.0, 0.5], np.float32)
    _matches_tensorflow(frozen, graph_def, [(x, np.bool_(p), np.bool_(q))
                                            for p in (True, False) for q in (True, False)],
                        exact=True)


@pytest.mark.oracle
def test_tf_cond_in_a_loop_and_a_loop_in_a_cond():
    tf = pytest.importorskip("minigraph.testing.tf_graphs").tensorflow()

    def body(x, n):
        def step(i, acc):
            acc = tf.cond(i % 2 == 0, lambda: acc + x, lambda: acc * 0.5)
            return i + 1, acc
        looped = tf.while_loop(lambda i, a: i < n, step, [0, x])[1]
        return tf.cond(n > 2, lambda: tf.while_loop(lambda a: tf.reduce_sum(a) < 50.0,
                                                    lambda a: a * 2.0 + 1.0, [looped])[0],
                       lambda: looped - 1.0)

    frozen, graph_def = _frozen(body, [tf.TensorSpec([2], tf.float32),
                                       tf.TensorSpec([], tf.int32)])
    x = np.array([0.5, 1.5], np.float32)
    _matches_tensorflow(frozen, graph_def, [(x, np.int32(n)) for n in (0, 2, 5)],
                        exact=True)


@pytest.mark.oracle
def test_tf_switch_case_and_case():
    """``tf.switch_case`` (``_SwitchN`` on an index; out of range: the last branch) and
    ``tf.case`` (nested conditionals on predicates)."""
    tf = pytest.importorskip("minigraph.testing.tf_graphs").tensorflow()
    x = np.random.default_rng(6).standard_normal((3, 4)).astype(np.float32)
    frozen, graph_def = _frozen(
        lambda v, i: tf.switch_case(i, [lambda: v * 2.0, lambda: v - 1.0,
                                        lambda: tf.nn.relu(v)]),
        [tf.TensorSpec([None, 4], tf.float32), tf.TensorSpec([], tf.int32)])
    assert "_SwitchN" in {n.op for n in graph_def.node}
    _matches_tensorflow(frozen, graph_def, [(x, np.int32(i)) for i in (0, 1, 2, 7, -1)],
                        exact=True)
    frozen, graph_def = _frozen(
        lambda v: tf.case([(tf.reduce_sum(v) > 0, lambda: v + 1.0),
                           (tf.reduce_max(v) > 1, lambda: v * 3.0)], default=lambda: -v),
        [tf.TensorSpec([None, 4], tf.float32)])
    _matches_tensorflow(frozen, graph_def, [(x,), (-x,), (x * 0 - 5,)], exact=True)


@pytest.mark.oracle
def test_keras_center_crop_crops_or_resizes_by_the_input_size():
    from minigraph.testing import tf_graphs

    tf, keras = tf_graphs.tensorflow(), tf_graphs.keras()
    inputs = keras.Input((None, None, 3))
    model = keras.Model(inputs, keras.layers.CenterCrop(5, 7)(inputs))
    frozen, graph_def = _frozen(lambda x: model(x, training=False),
                                [tf.TensorSpec([None, None, None, 3], tf.float32)])
    rng = np.random.default_rng(3)
    _matches_tensorflow(frozen, graph_def,
                        [(rng.standard_normal((2, h, w, 3)).astype(np.float32),)
                         for h, w in ((8, 9), (5, 7), (3, 4))])


# ----------------------------------------------------------------------------- rewired graphs


def _rewired(graph: Any, rng: random.Random) -> Any:
    """A copy of ``graph`` with one to three of the hostile-file campaign's edits
    (``tests/fuzz/hostile_cases.rewire``)."""
    graph = type(graph).FromString(graph.SerializeToString())
    rewire(graph, rng, rng.randint(1, 3))
    return graph


@pytest.mark.parametrize("seed", range(4))
def test_rewired_control_flow_imports_and_runs_or_fails_clearly(seed):
    """Hostile edits of a lowered loop (with a written list) and of a conditional: each
    imports and runs, or fails with one of minigraph's errors; never another exception or
    a hang."""
    rng = random.Random(seed)
    bases = [counting_loop(write=True), conditional(extra_output=True)]
    feeds = {"x:0": X, "n:0": np.int32(3), "rows:0": np.int32(4), "p:0": np.bool_(True)}
    for _ in range(100):
        graph = _rewired(rng.choice(bases), rng)
        try:
            root = mg.import_graph_def(graph)
            names = {op.name for op in root.graph().operations()}
            fetches = [f"{name}:0" for name in ("y", "z", "out", "count", "stacked")
                       if name in names]
            placeholders = {f"{op.name}:0" for op in root.graph().operations()
                            if op.type == "Placeholder"}
            mg.ClientSession(root).Run({k: v for k, v in feeds.items() if k in placeholders},
                                       fetches)
        except (InvalidArgumentError, UnimplementedError, mg.errors.NotFoundError,
                mg.errors.ResourceExhaustedError):
            pass
