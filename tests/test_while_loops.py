"""TensorFlow's lowered while loops at import (``interop/loops.py``) and ``WhileLoop``
(``ops/control_flow_ops.py``, run by ``client/loops.py``).

* Hand-built frames (TF's lowered form, written node by node): values against numpy
  formulas for every trip count from 0, loop invariants, a written list, control edges on
  the frame; every refusal names the loop and the node (a Merge without NextIteration, two
  LoopConds, a body reading past the frame, a float condition, a next value of another
  dtype, the wrong number of inputs), and the run-time checks (a non-scalar condition, a write past
  a list's end, a runaway loop).
* ``oracle``: graphs TensorFlow freezes (``convert_variables_to_constants_v2`` lowers their
  loops): a data-dependent trip count, nested loops, a TensorArray read and written over a
  time axis fed at several lengths, a dynamic-size TensorArray, ``maximum_iterations``, an
  Assert in the body, and a Keras LSTM over a sequence of unknown length; each against
  TensorFlow's own run of the frozen function, on every backend. (The Keras zoo runs the
  recurrent layers too: ``tests/test_keras_zoo.py``.)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import test_function_library as function_library
from conftest import BACKENDS, wrong_from_threads

import minigraph as mg
from minigraph.client import loops as loop_kernel
from minigraph.framework.errors import (
    InvalidArgumentError,
    ResourceExhaustedError,
    UnimplementedError,
)
from minigraph.interop import importer, protos

DT = protos.data_type_numbers()
FLOAT, INT32, BOOL, VARIANT = DT["DT_FLOAT"], DT["DT_INT32"], DT["DT_BOOL"], DT["DT_VARIANT"]


# ----------------------------------------------------------------------------- building frames


def add(graph: Any, name: str, op: str, inputs=(), **attrs: Any) -> Any:
    """A node of ``graph``; attrs as ``test_function_library.add`` takes them."""
    return function_library.add(graph.node, name, op, inputs, **attrs)


def const(graph: Any, name: str, value: Any, inputs=()) -> Any:
    return function_library.const(graph.node, name, np.asarray(value), inputs)


def enter(graph: Any, name: str, source: str, dtype: int, constant: bool = False,
          frame: str = "loop") -> Any:
    return add(graph, name, "Enter", [source], T=("type", dtype), frame_name=frame,
               is_constant=constant, parallel_iterations=10)


def variable(graph: Any, name: str, initial: str, dtype: int, pred: str = "loop/cond"):
    """A loop variable's Enter, Merge (its NextIteration added by :func:`next_value`),
    Switch, Exit and the body's Identity of Switch:1."""
    enter(graph, f"loop/{name}/enter", initial, dtype)
    add(graph, f"loop/{name}/merge", "Merge", [f"loop/{name}/enter", f"loop/{name}/next"],
        T=("type", dtype), N=2)
    add(graph, f"loop/{name}/switch", "Switch", [f"loop/{name}/merge", pred],
        T=("type", dtype))
    add(graph, f"loop/{name}/exit", "Exit", [f"loop/{name}/switch"], T=("type", dtype))
    add(graph, f"loop/{name}/body", "Identity", [f"loop/{name}/switch:1"], T=("type", dtype))


def next_value(graph: Any, name: str, source: str, dtype: int) -> None:
    add(graph, f"loop/{name}/next", "NextIteration", [source], T=("type", dtype))


def counting_loop(cond_op: str = "Less", write: bool = False) -> Any:
    """``i, a = 0, x; while i < n: i, a = i + 1, a * half (+ i)`` as TF lowers it (``n`` and
    ``half`` enter as loop invariants), returning ``a`` (``out``) and ``i`` (``count``); with
    ``write`` the body also writes ``a`` to row ``i`` of a list reserved with ``rows``
    rows, stacked after the loop (``stacked``)."""
    graph = protos.GraphDef()
    add(graph, "x", "Placeholder", dtype=("type", FLOAT))
    add(graph, "n", "Placeholder", dtype=("type", INT32))
    const(graph, "zero", np.int32(0))
    const(graph, "half_outer", np.float32(0.5))
    enter(graph, "loop/n", "n", INT32, constant=True)
    enter(graph, "loop/half", "half_outer", FLOAT, constant=True)
    variable(graph, "i", "zero", INT32)
    variable(graph, "a", "x", FLOAT)
    add(graph, "loop/less", cond_op, ["loop/i/merge", "loop/n"], T=("type", INT32))
    add(graph, "loop/cond", "LoopCond", ["loop/less"])
    const(graph, "loop/one", np.int32(1), ["^loop/i/body"])  # in the frame by control edge
    add(graph, "loop/i_next", "AddV2", ["loop/i/body", "loop/one"], T=("type", INT32))
    add(graph, "loop/a_next", "Mul", ["loop/a/body", "loop/half"], T=("type", FLOAT))
    next_value(graph, "i", "loop/i_next", INT32)
    next_value(graph, "a", "loop/a_next", FLOAT)
    if write:
        add(graph, "rows", "Placeholder", dtype=("type", INT32))
        const(graph, "item_shape", np.int32(-1))
        add(graph, "reserve", "TensorListReserve", ["item_shape", "rows"],
            element_dtype=("type", FLOAT), shape_type=("type", INT32))
        variable(graph, "list", "reserve", VARIANT)
        add(graph, "loop/set", "TensorListSetItem", ["loop/list/body", "loop/i/body",
                                                     "loop/a/body"],
            element_dtype=("type", FLOAT))
        next_value(graph, "list", "loop/set", VARIANT)
        const(graph, "stack_shape", np.int32(-1))
        add(graph, "stacked", "TensorListStack", ["loop/list/exit", "stack_shape"],
            element_dtype=("type", FLOAT))
    add(graph, "out", "Identity", ["loop/a/exit"], T=("type", FLOAT))
    add(graph, "count", "Identity", ["loop/i/exit"], T=("type", INT32))
    return graph


def node(graph: Any, name: str) -> Any:
    return next(n for n in graph.node if n.name == name)


def run(graph: Any, fetches, backend: str = "reference", **feeds) -> Any:
    root = mg.import_graph_def(graph)
    return mg.ClientSession(root, backend=backend).Run(
        {f"{k}:0": v for k, v in feeds.items()}, fetches)


X = np.array([[1.0, -2.0, 3.5]], np.float32)


# ----------------------------------------------------------------------------- hand-built frames


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [0, 1, 2, 7])
def test_counting_loop_runs_n_iterations(backend, n):
    out, count = run(counting_loop(), ["out:0", "count:0"], backend, x=X, n=np.int32(n))
    assert count == n
    np.testing.assert_array_equal(out, X * np.float32(0.5) ** n)  # exact: powers of two


def test_the_loop_is_one_node_whose_subgraphs_hold_the_frame():
    root = mg.import_graph_def(counting_loop())
    types = [op.type for op in root.graph().operations()]
    assert "WhileLoop" in types
    assert not {"Enter", "Merge", "Switch", "Exit", "NextIteration", "LoopCond"} & set(types)
    loop = next(op for op in root.graph().operations() if op.type == "WhileLoop")
    body = {op.type for op in loop.attrs["body"].graph.operations()}
    assert {"AddV2", "Mul", "Placeholder"} <= body
    assert [op.type for op in loop.attrs["cond"].outputs[0].op.graph.operations()
            if op.type == "Less"] == ["Less"]



@pytest.mark.parametrize("options", [mg.OptimizerOptions(),
                                     mg.OptimizerOptions(elementwise_groups=False),
                                     mg.OptimizerOptions.all_off()])
def test_subgraphs_run_with_the_sessions_optimizer_options(options):
    """The body's and condition's sessions take the loop's session's options (a user who
    turns a pass off turns it off inside loops too) and output checks, one session per
    backend, options and checks."""
    root = mg.import_graph_def(counting_loop())
    for check_outputs in (False, True):
        session = mg.ClientSession(root, backend="reference", optimizer=options,
                                   check_outputs=check_outputs)
        [out] = session.Run({"x:0": X, "n:0": np.int32(3)}, ["out:0"])
        np.testing.assert_array_equal(out, X * np.float32(0.125))
    loop = next(op for op in root.graph().operations() if op.type == "WhileLoop")
    for subgraph in (loop.attrs["body"], loop.attrs["cond"]):
        assert list(subgraph.runners) == [("reference", options, False),
                                          ("reference", options, True)]
        assert [run.session.check_outputs for run in subgraph.runners.values()] == [False,
                                                                                    True]

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n, rows", [(0, 0), (3, 3), (2, 5)])
def test_written_list_is_stacked_with_unwritten_rows_zero(backend, n, rows):
    graph = counting_loop(write=True)
    if n == 0:  # nothing written: the reserved shape must say the rows' shape
        node(graph, "stack_shape").attr["value"].CopyFrom(node(graph, "stack_shape").attr[
            "value"])
        graph.node.remove(node(graph, "stack_shape"))
        const(graph, "stack_shape", np.array([1, 3], np.int32))
    stacked = run(graph, "stacked:0", backend, x=X, n=np.int32(n), rows=np.int32(rows))
    expected = np.zeros((rows, 1, 3), np.float32)
    for i in range(n):
        expected[i] = X * np.float32(0.5) ** i
    np.testing.assert_array_equal(stacked, expected)


def test_write_past_the_end_of_a_list_is_refused():
    with pytest.raises(InvalidArgumentError,
                       match=r"WhileLoop 'loop': list 0: Trying to modify element 2 in a list "
                             r"with 2 elements"):
        run(counting_loop(write=True), "stacked:0", x=X, n=np.int32(3), rows=np.int32(2))


def test_an_unwritten_list_of_unknown_item_shape_is_refused():
    with pytest.raises(InvalidArgumentError, match="none of its 4 elements was written"):
        run(counting_loop(write=True), "stacked:0", x=X, n=np.int32(0), rows=np.int32(4))


def test_runaway_loop_is_stopped(monkeypatch):
    monkeypatch.setattr(loop_kernel, "MAX_ITERATIONS", 40)
    graph = counting_loop(cond_op="GreaterEqual")  # i >= n: forever once true
    with pytest.raises(ResourceExhaustedError, match="ran 40 iterations and its condition "
                                                     "still holds"):
        run(graph, "out:0", x=X, n=np.int32(0))


def test_non_scalar_condition_is_refused_at_run_time():
    graph = counting_loop()
    node(graph, "n").attr["shape"].shape.unknown_rank = True
    with pytest.raises(InvalidArgumentError, match="the condition must be a scalar, got "
                                                   r"shape \(2,\)"):
        run(graph, "out:0", x=X, n=np.array([3, 4], np.int32))


def test_loop_waits_for_the_control_inputs_of_its_enters_and_exit_readers_wait_for_it():
    graph = counting_loop()
    add(graph, "before", "NoOp")
    node(graph, "loop/i/enter").input.append("^before")
    add(graph, "after", "NoOp", ["^loop/a/exit"])
    root = mg.import_graph_def(graph)
    loop = next(op for op in root.graph().operations() if op.type == "WhileLoop")
    assert [op.name for op in loop.control_inputs] == ["before"]
    assert [op.name for op in root.graph().get_operation("after").control_inputs] == [
        "loop/a/exit"]
    exit_relay = root.graph().get_operation("loop/a/exit")  # an Identity of the loop's output
    assert (exit_relay.type, exit_relay.inputs[0].name) == ("Identity", "loop:1")


def _refused(graph: Any, error: type, pattern: str) -> None:
    with pytest.raises(error, match=pattern):
        mg.import_graph_def(graph)


def test_merge_without_next_iteration_is_refused():
    graph = counting_loop()
    node(graph, "loop/a/merge").input[1] = "loop/a/body"
    _refused(graph, InvalidArgumentError, "while loop 'loop': Merge 'loop/a/merge' must read "
                                          "its Enter, then a NextIteration")


@pytest.mark.parametrize("name, op, count, wanted", [
    ("loop/a/next", "NextIteration", 0, 1), ("loop/a/switch", "Switch", 1, 2),
    ("loop/a/merge", "Merge", 3, 2), ("loop/cond", "LoopCond", 2, 1)])
def test_frame_nodes_with_the_wrong_number_of_inputs_are_refused(name, op, count, wanted):
    graph = counting_loop()
    inputs = node(graph, name).input
    while len(inputs) > count:
        inputs.pop()
    while len(inputs) < count:
        inputs.append("x")
    _refused(graph, InvalidArgumentError, f"Node '{name}' \\(a {op}\\) has {count} data "
                                          f"inputs, expected {wanted}")


def test_enter_reading_a_list_made_otherwise_is_refused():
    graph = counting_loop(write=True)
    node(graph, "reserve").op = "EmptyTensorList"
    _refused(graph, UnimplementedError, "a loop variable comes from 'reserve', a "
                                        "EmptyTensorList")


def test_switches_of_two_loop_conds_are_refused():
    graph = counting_loop()
    add(graph, "loop/cond2", "LoopCond", ["loop/less"])
    node(graph, "loop/a/switch").input[1] = "loop/cond2"
    _refused(graph, InvalidArgumentError, "controlled by one LoopCond")


def test_body_reading_outside_the_frame_without_enter_is_refused():
    graph = counting_loop()
    node(graph, "loop/a_next").input[1] = "half_outer"
    _refused(graph, InvalidArgumentError, "its body reads 'half_outer' from outside the loop "
                                          "without an Enter")


def test_nodes_of_the_frame_nothing_reads_are_dropped():
    """A node reading the body without an Exit is in the loop's frame, as in TF (which
    cannot fetch it either); nothing reads it, so it does not run."""
    graph = counting_loop()
    add(graph, "dead", "Identity", ["loop/a_next"], T=("type", FLOAT))
    root = mg.import_graph_def(graph)
    with pytest.raises(InvalidArgumentError, match="'dead' refers to an Operation not in the "
                                                   "graph"):
        mg.ClientSession(root).Run({"x:0": X, "n:0": np.int32(1)}, "dead:0")


def test_condition_must_be_bool():
    graph = counting_loop()
    graph.node.remove(node(graph, "loop/less"))
    add(graph, "loop/less", "Cast", ["loop/i/merge"], SrcT=("type", INT32),
        DstT=("type", FLOAT))
    _refused(graph, InvalidArgumentError, "while loop 'loop': its condition is float32, "
                                          "expected bool")


def test_next_value_of_another_dtype_is_refused():
    graph = counting_loop()
    add(graph, "loop/i_float", "Cast", ["loop/i_next"], SrcT=("type", INT32),
        DstT=("type", FLOAT))
    node(graph, "loop/i/next").input[0] = "loop/i_float"
    _refused(graph, InvalidArgumentError, "while loop 'loop': loop variable 0 enters as int32 "
                                          r"\('zero:0'\) and its next value is float32 "
                                          r"\('loop/i_float:0'\)")


def test_other_list_ops_in_a_loop_are_refused():
    graph = counting_loop(write=True)
    add(graph, "loop/length", "TensorListLength", ["loop/list/body"])
    add(graph, "loop/length_next", "AddV2", ["loop/i_next", "loop/length"],
        T=("type", INT32))
    node(graph, "loop/i/next").input[0] = "loop/length_next"
    _refused(graph, UnimplementedError, r"while loop 'loop': its body reads a list it writes "
                                        r"\(in 'loop/length', a TensorListLength\)")


def test_export_refuses_a_loop_that_depends_on_a_feed():
    root = mg.import_graph_def(counting_loop())
    with pytest.raises(InvalidArgumentError, match="'loop' is a WhileLoop"):
        mg.export_graph_def(root)


def test_unread_variant_placeholders_are_dropped():
    graph = counting_loop()
    add(graph, "unused_control_flow_input", "Placeholder", dtype=("type", VARIANT))
    root = mg.import_graph_def(graph)
    assert "unused_control_flow_input" not in [op.name for op in root.graph().operations()]


# ----------------------------------------------------------------------------- TF's frozen loops


def _frozen(body, specs):
    """``body`` traced for ``specs`` and frozen (its loops lowered) by TensorFlow: the
    frozen function and its GraphDef."""
    tf = pytest.importorskip("minigraph.testing.tf_graphs").tensorflow()
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    frozen = convert_variables_to_constants_v2(tf.function(body).get_concrete_function(*specs))
    return frozen, frozen.graph.as_graph_def()


def _matches_tensorflow(frozen, graph_def, cases, backends=BACKENDS, exact=False):
    tf = pytest.importorskip("minigraph.testing.tf_graphs").tensorflow()
    root = mg.import_graph_def(graph_def.SerializeToString())
    names = [t.name for t in frozen.outputs]
    for values in cases:
        expected = frozen(*[tf.constant(v) for v in values])
        expected = [e.numpy() for e in (expected if isinstance(expected, (list, tuple))
                                        else [expected])]
        feeds = {t.name: v for t, v in zip(frozen.inputs, values)}
        for backend in backends:
            got = mg.ClientSession(root, backend=backend).Run(feeds, names)
            for actual, want in zip(got, expected):
                assert actual.shape == want.shape
                if exact:
                    np.testing.assert_array_equal(actual, want)
                else:
                    np.testing.assert_allclose(actual, want, rtol=2e-6, atol=2e-6)


@pytest.mark.oracle
def test_tf_loop_with_data_dependent_trip_count():
    tf = pytest.importorskip("minigraph.testing.tf_graphs").tensorflow()

    def body(x, n):
        def step(i, acc):
            return i + 1, acc * 0.75 + x * tf.cast(i, tf.float32)
        return tf.while_loop(lambda i, acc: i < n, step, [0, tf.zeros_like(x)])[1]

    frozen, graph_def = _frozen(body, [tf.TensorSpec([None, 3], tf.float32),
                                       tf.TensorSpec([], tf.int32)])
    assert "LoopCond" in {n.op for n in graph_def.node}
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    _matches_tensorflow(frozen, graph_def, [(x, np.int32(n)) for n in (0, 1, 6)])


@pytest.mark.oracle
def test_tf_nested_loops(monkeypatch):
    tf = pytest.importorskip("minigraph.testing.tf_graphs").tensorflow()

    def body(x, n):
        def outer(i, acc):
            inner = tf.while_loop(lambda j, a: j < i,
                                  lambda j, a: (j + 1, a + x * tf.cast(j, tf.float32)),
                                  [0, acc])[1]
            return i + 1, inner * 0.5
        return tf.while_loop(lambda i, acc: i < n, outer, [0, tf.zeros_like(x)])[1]

    frozen, graph_def = _frozen(body, [tf.TensorSpec([3], tf.float32),
                                       tf.TensorSpec([], tf.int32)])
    frames = {n.attr["frame_name"].s for n in graph_def.node if n.op == "Enter"}
    assert len(frames) == 2
    x = np.array([1.0, -0.5, 2.0], np.float32)
    _matches_tensorflow(frozen, graph_def, [(x, np.int32(n)) for n in (0, 1, 4)])
    monkeypatch.setattr(importer, "MAX_CALL_DEPTH", 1)  # the bound on nesting holds
    with pytest.raises(InvalidArgumentError, match="loops, conditionals and calls nested 2 "
                                                   "deep; minigraph imports at most 1 levels"):
        mg.import_graph_def(graph_def.SerializeToString())


@pytest.mark.oracle
@pytest.mark.parametrize("dynamic", [False, True], ids=["fixed", "dynamic_size"])
def test_tf_tensor_array_over_time_fed_at_several_lengths(dynamic):
    """Unstack a time-major sequence, write tanh(x_t + state) each step, stack: a
    TensorArray read (TensorListFromTensor/GetItem) and one written (Reserve/SetItem/
    Stack); with ``dynamic_size`` the written one grows from 0."""
    tf = pytest.importorskip("minigraph.testing.tf_graphs").tensorflow()

    def body(xs):
        steps = tf.shape(xs)[0]
        inputs = tf.TensorArray(tf.float32, size=steps).unstack(xs)
        outputs = tf.TensorArray(tf.float32, size=0 if dynamic else steps,
                                 dynamic_size=dynamic, element_shape=[None, 4])

        def step(t, state, out):
            state = tf.tanh(inputs.read(t) + state * 0.9)
            return t + 1, state, out.write(t, state)
        _, final, out = tf.while_loop(lambda t, *_: t < steps, step,
                                      [0, tf.zeros_like(xs[0]), outputs])
        return out.stack(), final

    frozen, graph_def = _frozen(body, [tf.TensorSpec([None, None, 4], tf.float32)])
    ops = {n.op for n in graph_def.node}
    assert {"TensorListFromTensor", "TensorListReserve", "TensorListStack"} <= ops
    rng = np.random.default_rng(1)
    _matches_tensorflow(frozen, graph_def,
                        [(rng.standard_normal((t, 2, 4)).astype(np.float32),)
                         for t in (1, 4, 9)])


@pytest.mark.oracle
def test_tf_maximum_iterations():
    tf = pytest.importorskip("minigraph.testing.tf_graphs").tensorflow()

    def body(x, cap):
        return tf.while_loop(lambda a: tf.reduce_sum(a) < 1e6, lambda a: a * 2.0 + 1.0, [x],
                             maximum_iterations=cap)[0]

    frozen, graph_def = _frozen(body, [tf.TensorSpec([2], tf.float32),
                                       tf.TensorSpec([], tf.int32)])
    x = np.array([0.5, 1.0], np.float32)
    _matches_tensorflow(frozen, graph_def, [(x, np.int32(c)) for c in (0, 3, 1000)],
                        exact=True)


@pytest.mark.oracle
def test_tf_assert_in_the_body_fires_when_tf_s_does():
    tf = pytest.importorskip("minigraph.testing.tf_graphs").tensorflow()

    def body(x, n):
        def step(i, acc):
            with tf.control_dependencies([tf.debugging.assert_less(i, 3)]):
                return i + 1, acc + x
        return tf.while_loop(lambda i, acc: i < n, step, [0, x])[1]

    frozen, graph_def = _frozen(body, [tf.TensorSpec([2], tf.float32),
                                       tf.TensorSpec([], tf.int32)])
    x = np.array([1.0, 2.0], np.float32)
    _matches_tensorflow(frozen, graph_def, [(x, np.int32(3))])
    with pytest.raises(tf.errors.InvalidArgumentError):
        frozen(tf.constant(x), tf.constant(5))
    root = mg.import_graph_def(graph_def.SerializeToString())
    feeds = {t.name: v for t, v in zip(frozen.inputs, (x, np.int32(5)))}
    with pytest.raises(InvalidArgumentError, match="assert"):
        mg.ClientSession(root).Run(feeds, [t.name for t in frozen.outputs])


@pytest.mark.oracle
def test_keras_lstm_over_sequences_of_unknown_length():
    from minigraph.testing import tf_graphs

    tf, keras = tf_graphs.tensorflow(), tf_graphs.keras()
    inputs = keras.Input((None, 3))
    model = keras.Model(inputs, keras.layers.LSTM(4, return_sequences=True)(inputs))
    frozen, graph_def = _frozen(lambda x: model(x, training=False),
                                [tf.TensorSpec([None, None, 3], tf.float32)])
    rng = np.random.default_rng(2)
    _matches_tensorflow(frozen, graph_def,
                        [(rng.standard_normal((2, t, 3)).astype(np.float32),)
                         for t in (1, 5, 12)])


@pytest.mark.oracle
def test_tf_map_fn_scan_and_foldl():
    """``tf.map_fn`` (two results: two written lists), ``tf.foldl``, which starts from the
    first item, read before the loop (``TensorListGetItem`` of the unstacked input), and
    ``tf.scan``, which also writes that item before the loop (``TensorListSetItem`` of the
    reserved list)."""
    tf = pytest.importorskip("minigraph.testing.tf_graphs").tensorflow()
    spec = [tf.TensorSpec([None, 3], tf.float32)]
    x = np.random.default_rng(4).standard_normal((4, 3)).astype(np.float32)
    for body in (lambda v: tf.map_fn(lambda r: (r + 1.0, tf.reduce_sum(r * r) + r), v,
                                     fn_output_signature=(tf.float32, tf.float32)),
                 lambda v: tf.foldl(lambda a, r: a * 0.5 + r, v),
                 lambda v: tf.scan(lambda a, r: a * 0.5 + r, v)):
        _matches_tensorflow(*_frozen(body, spec), [(x,), (x[:1],)])


def _tf1_loop(dynamic: bool = False, sized: bool = False):
    """A TF 1 ``tf.compat.v1.while_loop`` (control flow v1: ``TensorArrayV3`` handles and
    flows) over the time axis: an unstacked input array read at each step, an output array
    written (with ``dynamic_size``, from size 0) and stacked, frozen by TF 1's
    ``convert_variables_to_constants``; with ``sized``, the loop also reads the output
    array's size (``TensorArraySizeV3``). Returns the GraphDef and a function running TF."""
    from minigraph.testing import tf_graphs

    tf = tf_graphs.tensorflow()
    tf1 = tf.compat.v1
    tf1.disable_control_flow_v2()
    try:
        graph = tf.Graph()
        with graph.as_default():
            x = tf1.placeholder(tf.float32, [None, None, 3], name="x")
            w = tf1.get_variable("w", initializer=tf.constant(
                np.random.default_rng(1).standard_normal((3, 3)).astype(np.float32)))
            xs = tf.transpose(x, [1, 0, 2])
            steps = tf.shape(xs)[0]
            inputs = tf1.TensorArray(tf.float32, size=steps).unstack(xs)
            outputs = tf1.TensorArray(tf.float32, size=0 if dynamic else steps,
                                      dynamic_size=dynamic)

            def body(t, h, out):
                h = tf.tanh(tf.matmul(inputs.read(t), w) + h * 0.5)
                if sized:
                    h = h + tf.cast(out.size(), tf.float32)
                return t + 1, h, out.write(t, h)

            _, _, out = tf1.while_loop(lambda t, *_: t < steps, body,
                                       [0, tf.zeros_like(xs[0]), outputs])
            y = tf.identity(tf.transpose(out.stack(), [1, 0, 2]), name="y")
            session = tf1.Session(graph=graph)
            session.run(tf1.global_variables_initializer())
            graph_def = tf1.graph_util.convert_variables_to_constants(
                session, graph.as_graph_def(), ["y"])
    finally:
        tf1.enable_control_flow_v2()
    return graph_def, lambda value: session.run(y, {x: value})


@pytest.mark.oracle
@pytest.mark.parametrize("dynamic", [False, True], ids=["fixed", "dynamic_size"])
def test_tf1_tensor_array_loop(dynamic):
    graph_def, tensorflow_run = _tf1_loop(dynamic)
    ops = {n.op for n in graph_def.node}
    assert {"TensorArrayV3", "TensorArrayScatterV3", "TensorArrayReadV3",
            "TensorArrayWriteV3", "TensorArrayGatherV3"} <= ops
    root = mg.import_graph_def(graph_def.SerializeToString())
    rng = np.random.default_rng(5)
    for steps in (1, 4, 7):
        x = rng.standard_normal((2, steps, 3)).astype(np.float32)
        expected = tensorflow_run(x)
        for backend in BACKENDS:
            got = mg.ClientSession(root, backend=backend).Run({"x:0": x}, "y:0")
            assert got.shape == expected.shape
            np.testing.assert_allclose(got, expected, rtol=2e-6, atol=2e-6)


@pytest.mark.oracle
def test_tf1_tensor_array_size_is_refused():
    graph_def, _ = _tf1_loop(dynamic=True, sized=True)  # the size in the loop
    with pytest.raises(UnimplementedError, match="a TensorArraySizeV3, uses the array"):
        mg.import_graph_def(graph_def.SerializeToString())


def test_a_loop_graph_draws_and_goes_to_tensorboard(tmp_path):
    """The drawing and TensorBoard's graph show the loop as one node (its subgraphs named
    by size), and a Split's third output (of a list output) is drawn as its own edge."""
    from minigraph.viz import to_dot

    graph = counting_loop(write=True)
    const(graph, "axis", np.int32(2))
    add(graph, "thirds", "Split", ["axis", "stacked"], T=("type", FLOAT), num_split=3)
    add(graph, "third", "Identity", ["thirds:2"], T=("type", FLOAT))
    root = mg.import_graph_def(graph)
    dot = to_dot(root.graph())
    assert "WhileLoop" in dot and "stacked" in dot
    with mg.summary.FileWriter(tmp_path, root) as writer:
        writer.flush()
    assert any(p.stat().st_size > 0 for p in tmp_path.iterdir())


def test_loops_run_from_several_threads_at_once():
    """One session, four threads, each running the loop with other trip counts and batch
    sizes: the subgraphs' shared sessions give every run its own values."""
    root = mg.import_graph_def(counting_loop(write=True))
    session = mg.ClientSession(root)
    cases = [(np.full((1 + i % 3, 3), i, np.float32), np.int32(1 + i % 4), np.int32(4))
             for i in range(8)]
    feeds = [{"x:0": x, "n:0": n, "rows:0": rows} for x, n, rows in cases]
    expected = [session.Run(f, ["out:0", "stacked:0"]) for f in feeds]

    def right(i: int) -> bool:
        got = session.Run(feeds[i], ["out:0", "stacked:0"])
        return all(np.array_equal(a, b) for a, b in zip(got, expected[i]))

    assert wrong_from_threads(right, len(feeds), steps=25) == []
