"""GraphDefs with a function library (``minigraph.interop.functions``): calls inlined at
import with TensorFlow's semantics.

* Hand-built libraries (TF's FunctionDef form, written with minigraph's own messages):
  arguments bound by position, ``node:out_arg:index`` outputs (list outputs too), results
  read by the call's consumers, placeholder attrs, direct calls, the call's control inputs,
  control outputs, name clashes, libraries nothing calls, and every refusal, naming the call
  node and the function. Values against numpy formulas.
* ``oracle``: the same hand-built graphs run by TensorFlow give what minigraph gives; graphs
  TensorFlow writes (nested tf.functions with two results; frozen Keras models whose grouped
  convolutions are jit-compiled functions: RegNetX002, ConvNeXtTiny and a ConvNeXt-like
  model of convolutions only) import, run on every backend and match TensorFlow; the
  imported graph exports back and runs in TensorFlow. (``test_tf_interop`` runs Keras'
  grouped Conv2D/Conv1D layers through every form TF writes a graph in.)
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
from conftest import BACKENDS

import minigraph as mg
from minigraph.framework.errors import InvalidArgumentError, NotFoundError
from minigraph.interop import protos, tensors

F32, F64 = np.float32, np.float64
DT = protos.data_type_numbers()
FLOAT, DOUBLE, INT32 = DT["DT_FLOAT"], DT["DT_DOUBLE"], DT["DT_INT32"]


# ----------------------------------------------------------------------------- building


class Placeholder(str):
    """An attr value that is a placeholder for the instantiation attr of that name."""


def set_attr(proto: Any, value: Any) -> None:
    """An AttrValue from a Python value: ("type", enum), ("types", [enums]), ("func", name,
    {attrs}), a Placeholder, an array (tensor), an int, a list of ints, a string or a
    bool."""
    if isinstance(value, Placeholder):
        proto.placeholder = str(value)
    elif isinstance(value, tuple) and value[0] == "type":
        proto.type = value[1]
    elif isinstance(value, tuple) and value[0] == "types":
        proto.list.type.extend(value[1])
        proto.list.SetInParent()
    elif isinstance(value, tuple) and value[0] == "func":
        proto.func.name = value[1]
        for name, inner in (value[2] if len(value) > 2 else {}).items():
            set_attr(proto.func.attr[name], inner)
    elif isinstance(value, np.ndarray):
        tensors.array_to_proto(value, proto.tensor)
    elif isinstance(value, bool):
        proto.b = value
    elif isinstance(value, int):
        proto.i = value
    elif isinstance(value, str):
        proto.s = value.encode()
    else:
        proto.list.i.extend(value)
        proto.list.SetInParent()


def add(nodes: Any, name: str, op: str, inputs=(), **attrs: Any) -> Any:
    node = nodes.add()
    node.name, node.op = name, op
    node.input.extend(inputs)
    for key, value in attrs.items():
        set_attr(node.attr[key], value)
    return node


def const(nodes: Any, name: str, value: np.ndarray, inputs=()) -> Any:
    dtype = tensors.dtype_to_enum(mg.as_dtype(value.dtype))
    return add(nodes, name, "Const", inputs, dtype=("type", dtype), value=value)


def placeholder(graph: Any, name: str, dtype: int = FLOAT) -> Any:
    return add(graph.node, name, "Placeholder", dtype=("type", dtype))


def function(graph: Any, name: str, inputs, outputs, ret: dict[str, str],
             control_ret: dict[str, str] | None = None, attrs=()) -> Any:
    """A FunctionDef in ``graph``'s library: ``inputs``/``outputs`` are (name, DataType enum
    or type attr name) pairs, ``attrs`` (name, type, default enum or None); add its body to
    the returned message's ``node_def``."""
    fdef = graph.library.function.add()
    fdef.signature.name = name
    for args, specs in ((fdef.signature.input_arg, inputs), (fdef.signature.output_arg,
                                                            outputs)):
        for arg_name, kind in specs:
            arg = args.add()
            arg.name = arg_name
            if isinstance(kind, str):
                arg.type_attr = kind
            else:
                arg.type = kind
    for attr_name, attr_type, default in attrs:
        attr = fdef.signature.attr.add()
        attr.name, attr.type = attr_name, attr_type
        if default is not None:
            attr.default_value.type = default
    for key, value in ret.items():
        fdef.ret[key] = value
    for key, value in (control_ret or {}).items():
        fdef.signature.control_output.append(key)
        fdef.control_ret[key] = value
    return fdef


def call(nodes: Any, name: str, fn: str, inputs, tin, tout, op="PartitionedCall",
         **f_attrs) -> Any:
    """A call node in ``nodes`` (a GraphDef's or a FunctionDef's)."""
    return add(nodes, name, op, inputs, Tin=("types", tin), Tout=("types", tout),
               f=("func", fn, f_attrs))


def mul_add_function(graph: Any, name: str = "mul_add") -> Any:
    """f(x, y) = x * y + x, float."""
    fdef = function(graph, name, [("x", FLOAT), ("y", FLOAT)], [("out", FLOAT)],
                    {"out": "add:z:0"})
    add(fdef.node_def, "mul", "Mul", ["x", "y"], T=("type", FLOAT))
    add(fdef.node_def, "add", "AddV2", ["mul:z:0", "x"], T=("type", FLOAT))
    return fdef


def run(root: mg.Scope, fetches, feeds, backend="reference", metadata=None):
    return mg.ClientSession(root, backend=backend).Run(feeds, fetches, run_metadata=metadata)


X = np.array([[1.0, -2.0], [3.0, 0.5]], F32)
Y = np.array([[0.5, 4.0], [-1.0, 2.0]], F32)


# ----------------------------------------------------------------------------- inlining


def simple_call_graph() -> Any:
    graph = protos.GraphDef()
    placeholder(graph, "a")
    placeholder(graph, "b")
    mul_add_function(graph)
    call(graph.node, "call", "mul_add", ["a", "b"], [FLOAT, FLOAT], [FLOAT])
    add(graph.node, "out", "Neg", ["call"], T=("type", FLOAT))
    return graph


@pytest.mark.parametrize("backend", BACKENDS)
def test_call_is_replaced_by_the_body_under_its_name(backend):
    root = mg.import_graph_def(simple_call_graph())
    g = root.graph()
    assert {"call/mul", "call/add"} <= {op.name for op in g.get_operations()}
    assert g.get_operation("call").type == "Identity"  # keeps call:0 fetchable
    assert g.get_operation("out").inputs[0].op.name == "call/add"  # reads the body itself
    out, result = run(root, ["out:0", "call:0"], {"a:0": X, "b:0": Y}, backend)
    np.testing.assert_array_equal(result, X * Y + X)
    np.testing.assert_array_equal(out, -(X * Y + X))


def test_stateful_and_direct_calls_with_placeholder_attrs():
    """A function polymorphic in T: called by StatefulPartitionedCall with T in ``f``'s
    attrs (double), and directly (the node's op is the function's name) with T float; a
    third call leaves T to the signature's default (float). Its body reads an output of a
    list-output op (Unpack's ``output:1``)."""
    graph = protos.GraphDef()
    placeholder(graph, "a", DOUBLE)
    placeholder(graph, "b")
    fdef = function(graph, "second_row_scaled", [("x", "T")], [("y", "T")],
                    {"y": "scaled:z:0"}, attrs=[("T", "type", FLOAT)])
    add(fdef.node_def, "rows", "Unpack", ["x"], T=Placeholder("T"), num=2, axis=0)
    add(fdef.node_def, "scaled", "Mul", ["rows:output:1", "rows:output:1"],
        T=Placeholder("T"))
    call(graph.node, "c64", "second_row_scaled", ["a"], [DOUBLE], [DOUBLE],
         op="StatefulPartitionedCall", T=("type", DOUBLE))
    add(graph.node, "c32", "second_row_scaled", ["b"], T=("type", FLOAT))
    call(graph.node, "c_default", "second_row_scaled", ["b"], [FLOAT], [FLOAT])
    root = mg.import_graph_def(graph)
    assert root.graph().get_operation("c64/scaled").inputs[0].name == "c64/rows:1"
    r64, r32, default = run(root, ["c64:0", "c32:0", "c_default:0"],
                            {"a:0": X.astype(F64), "b:0": X})
    assert r64.dtype == F64 and r32.dtype == default.dtype == F32
    np.testing.assert_array_equal(r64, X[1].astype(F64) ** 2)
    np.testing.assert_array_equal(r32, X[1] ** 2)
    np.testing.assert_array_equal(default, X[1] ** 2)


def test_a_result_that_is_an_argument():
    """``ret`` may name an argument (a body without nodes): the call's consumers read the
    call's input."""
    graph = protos.GraphDef()
    placeholder(graph, "a")
    placeholder(graph, "b")
    function(graph, "second", [("x", FLOAT), ("y", FLOAT)], [("p", FLOAT)], {"p": "y"})
    call(graph.node, "call", "second", ["a", "b"], [FLOAT, FLOAT], [FLOAT])
    add(graph.node, "out", "Sub", ["call", "a"], T=("type", FLOAT))
    root = mg.import_graph_def(graph)
    assert [i.name for i in root.graph().get_operation("out").inputs] == ["b:0", "a:0"]
    np.testing.assert_array_equal(run(root, ["out:0", "call:0"], {"a:0": X, "b:0": Y}),
                                  [Y - X, Y])


def control_graph() -> Any:
    """A call with a control input (``^gate``) and a control output, read by ``^call``."""
    graph = protos.GraphDef()
    placeholder(graph, "a")
    add(graph.node, "gate", "NoOp")
    fdef = function(graph, "offset", [("x", FLOAT)], [("y", FLOAT)], {"y": "plus:z:0"},
                    control_ret={"side": "side"})
    const(fdef.node_def, "one", np.array(1.0, F32))
    add(fdef.node_def, "twice", "AddV2", ["x", "x"], T=("type", FLOAT))
    add(fdef.node_def, "plus", "AddV2", ["twice:z:0", "one:output:0"], T=("type", FLOAT))
    add(fdef.node_def, "side", "NoOp", ["^plus"])
    call(graph.node, "call", "offset", ["a", "^gate"], [FLOAT], [FLOAT])
    add(graph.node, "after", "NoOp", ["^call"])
    add(graph.node, "reader", "Identity", ["call", "^call"], T=("type", FLOAT))
    return graph


def test_call_control_inputs_reach_every_body_node_that_reads_no_body_node():
    root = mg.import_graph_def(control_graph())
    g = root.graph()
    controls = {op.name: [c.name for c in op.control_inputs] for op in g.get_operations()}
    assert controls["call/one"] == ["gate"]  # no inputs at all
    assert controls["call/twice"] == ["gate"]  # reads only the argument
    assert controls["call/plus"] == [] and controls["call/side"] == ["call/plus"]
    metadata = mg.RunMetadata()  # the graph as imported: no pass may drop the NoOp gate
    unoptimized = mg.ClientSession(root, backend="reference",
                                   optimizer=mg.OptimizerOptions.all_off())
    result = unoptimized.Run({"a:0": X}, ["call:0"], run_metadata=metadata)[0]
    np.testing.assert_array_equal(result, 2 * X + 1)
    assert "gate" in {s.node_name for s in metadata.step_stats}


def test_control_outputs_are_what_control_consumers_wait_for():
    root = mg.import_graph_def(control_graph())
    g = root.graph()
    assert [c.name for c in g.get_operation("after").control_inputs] == ["call"]
    assert [c.name for c in g.get_operation("call").control_inputs] == ["call/side"]
    metadata = mg.RunMetadata()  # the graph as imported: no pass may drop the NoOps
    mg.ClientSession(root, optimizer=mg.OptimizerOptions.all_off()).Run(
        {"a:0": X}, [], targets=["after"], run_metadata=metadata)
    ran = {s.node_name for s in metadata.step_stats}
    assert {"call/side", "call/plus", "call", "gate"} <= ran
    np.testing.assert_array_equal(run(root, ["reader:0"], {"a:0": X})[0], 2 * X + 1)


def test_body_names_avoid_names_in_use():
    """A node of the file already named like a body node: the body goes under call_1/."""
    graph = simple_call_graph()
    const(graph.node, "call/mul", np.array(3.0, F32))
    add(graph.node, "other", "Mul", ["call/mul", "call"], T=("type", FLOAT))
    root = mg.import_graph_def(graph, name="imported")
    names = {op.name for op in root.graph().get_operations()}
    assert {"imported/call_1/mul", "imported/call_1/add", "imported/call/mul"} <= names
    result = run(root, ["imported/other:0"], {"imported/a:0": X, "imported/b:0": Y})[0]
    np.testing.assert_array_equal(result, 3 * (X * Y + X))


def test_a_library_nothing_calls_is_fine():
    """Even a function with an op minigraph lacks, as long as no node calls it."""
    graph = simple_call_graph()
    fdef = function(graph, "unused", [("s", DT["DT_STRING"])], [("t", DT["DT_STRING"])],
                    {"t": "j:image:0"})
    add(fdef.node_def, "j", "DecodeJpeg", ["s"])
    root = mg.import_graph_def(graph)
    assert "unused" not in {op.type for op in root.graph().get_operations()}


def test_errors_in_a_body_name_the_function_and_the_call():
    graph = protos.GraphDef()
    placeholder(graph, "a")
    fdef = function(graph, "bad_matmul", [("x", FLOAT)], [("y", FLOAT)], {"y": "mm:product:0"})
    add(fdef.node_def, "mm", "MatMul", ["x", "x"], T=("type", FLOAT))
    const(graph.node, "v", np.ones(3, F32))
    call(graph.node, "call", "bad_matmul", ["v"], [FLOAT], [FLOAT])
    with pytest.raises(InvalidArgumentError, match=r"MatMul 'call/mm'.*\(in function "
                                                   r"'bad_matmul', inlined at node 'call'\)"):
        mg.import_graph_def(graph)


# ----------------------------------------------------------------------------- refusals


def _unknown_function(graph):
    call(graph.node, "call", "nope", ["a", "b"], [FLOAT, FLOAT], [FLOAT])


def _recursion(graph):
    fdef = function(graph, "loop", [("x", FLOAT)], [("y", FLOAT)], {"y": "again:output:0"})
    call(fdef.node_def, "again", "loop", ["x"], [FLOAT], [FLOAT])
    call(graph.node, "call", "loop", ["a"], [FLOAT], [FLOAT])


def _mutual_recursion(graph):
    for name, other in (("ping", "pong"), ("pong", "ping")):
        fdef = function(graph, name, [("x", FLOAT)], [("y", FLOAT)], {"y": "next:y:0"})
        add(fdef.node_def, "next", other, ["x"])
    add(graph.node, "call", "ping", ["a"])


def _deep_nesting(graph):
    """f0 calls f1 ... calls f70 (no recursion, but deeper than minigraph inlines)."""
    for level in range(71):
        fdef = function(graph, f"f{level}", [("x", FLOAT)], [("y", FLOAT)], {"y": "n:y:0"})
        if level < 70:
            add(fdef.node_def, "n", f"f{level + 1}", ["x"])
        else:
            add(fdef.node_def, "n", "Neg", ["x"], T=("type", FLOAT))
    add(graph.node, "call", "f0", ["a"])


def _gradient(graph):
    mul_add_function(graph)
    mul_add_function(graph, "mul_add_grad")
    gradient = graph.library.gradient.add()
    gradient.function_name, gradient.gradient_func = "mul_add", "mul_add_grad"
    call(graph.node, "call", "mul_add", ["a", "b"], [FLOAT, FLOAT], [FLOAT])


def _too_few_arguments(graph):
    mul_add_function(graph)
    call(graph.node, "call", "mul_add", ["a"], [FLOAT], [FLOAT])


def _argument_type(graph):
    mul_add_function(graph)
    placeholder(graph, "i", INT32)
    call(graph.node, "call", "mul_add", ["a", "i"], [FLOAT, INT32], [FLOAT])


def _argument_dtype_not_tin(graph):
    mul_add_function(graph)
    placeholder(graph, "i", INT32)
    add(graph.node, "call", "mul_add", ["a", "i"])


def _tout(graph):
    mul_add_function(graph)
    call(graph.node, "call", "mul_add", ["a", "b"], [FLOAT, FLOAT], [DOUBLE])


def _missing_op(graph):
    fdef = function(graph, "decode", [("x", FLOAT)], [("y", FLOAT)], {"y": "j:image:0"})
    add(fdef.node_def, "j", "DecodeJpeg", ["x"])
    call(graph.node, "call", "decode", ["a"], [FLOAT], [FLOAT])


def _bad_output_name(graph):
    fdef = function(graph, "f", [("x", FLOAT)], [("y", FLOAT)], {"y": "n:nosuch:0"})
    add(fdef.node_def, "n", "Neg", ["x"], T=("type", FLOAT))
    call(graph.node, "call", "f", ["a"], [FLOAT], [FLOAT])


def _bad_output_index(graph):
    fdef = function(graph, "f", [("x", FLOAT)], [("y", FLOAT)], {"y": "n:y:1"})
    add(fdef.node_def, "n", "Neg", ["x"], T=("type", FLOAT))
    call(graph.node, "call", "f", ["a"], [FLOAT], [FLOAT])


def _missing_length_attr(graph):
    fdef = function(graph, "f", [("x", FLOAT)], [("y", FLOAT)], {"y": "rows:output:0"})
    add(fdef.node_def, "rows", "Unpack", ["x"], T=("type", FLOAT))
    call(graph.node, "call", "f", ["a"], [FLOAT], [FLOAT])


def _missing_ret(graph):
    fdef = function(graph, "f", [("x", FLOAT)], [("y", FLOAT)], {})
    add(fdef.node_def, "n", "Neg", ["x"], T=("type", FLOAT))
    call(graph.node, "call", "f", ["a"], [FLOAT], [FLOAT])


def _wrong_result_type(graph):
    fdef = function(graph, "f", [("x", FLOAT)], [("y", DOUBLE)], {"y": "n:y:0"})
    add(fdef.node_def, "n", "Neg", ["x"], T=("type", FLOAT))
    call(graph.node, "call", "f", ["a"], [FLOAT], [DOUBLE])


def _unset_placeholder(graph):
    fdef = function(graph, "f", [("x", FLOAT)], [("y", FLOAT)], {"y": "n:y:0"})
    add(fdef.node_def, "n", "Neg", ["x"], T=Placeholder("U"))
    call(graph.node, "call", "f", ["a"], [FLOAT], [FLOAT])


def _list_argument(graph):
    fdef = function(graph, "f", [], [("y", FLOAT)], {"y": "n:sum:0"})
    arg = fdef.signature.input_arg.add()
    arg.name, arg.type, arg.number_attr = "xs", FLOAT, "N"
    add(fdef.node_def, "n", "AddN", ["xs"], T=("type", FLOAT), N=2)
    add(graph.node, "call", "f", ["a", "b"], N=2)


def _duplicate_function(graph):
    mul_add_function(graph)
    mul_add_function(graph)


def _function_named_like_an_op(graph):
    mul_add_function(graph, "Relu")


def _name_used_twice(graph):
    fdef = function(graph, "f", [("x", FLOAT)], [("y", FLOAT)], {"y": "x:y:0"})
    add(fdef.node_def, "x", "Neg", ["x"], T=("type", FLOAT))
    call(graph.node, "call", "f", ["a"], [FLOAT], [FLOAT])


REFUSALS = [
    (_unknown_function, NotFoundError, r"Function nope is not defined: node 'call' \(a "
                                       r"PartitionedCall\) calls it"),
    (_recursion, InvalidArgumentError, r"Node 'call/again' \(a PartitionedCall of function "
                                       r"'loop'\): the function calls itself \(loop -> loop\)"),
    (_mutual_recursion, InvalidArgumentError, r"calls itself \(ping -> pong -> ping\)"),
    (_deep_nesting, InvalidArgumentError, r"Node 'call(/n){64}' \(a direct call of function "
                                          r"'f64'\): calls nested 65 deep; minigraph inlines "
                                          r"at most 64 levels"),
    (_gradient, InvalidArgumentError, r"Node 'call' \(a PartitionedCall of function "
                                      r"'mul_add'\): the library gives the function a gradient "
                                      r"function \('mul_add_grad'\)"),
    (_too_few_arguments, InvalidArgumentError, r"Node 'call' \(a PartitionedCall of function "
                                               r"'mul_add'\): the call has 1 inputs but the "
                                               r"function takes 2 \(float, float\)"),
    (_argument_type, InvalidArgumentError, r"attr 'Tin' is \[float, int32\] but the "
                                           r"function's arguments are \[float, float\]"),
    (_argument_dtype_not_tin, InvalidArgumentError,
     r"Input 1 of node call was passed int32 from i:0 incompatible with expected float. "
     r"\(Node 'call' \(a direct call of function 'mul_add'\): argument 'y'\)"),
    (_tout, InvalidArgumentError, r"attr 'Tout' is \[double\] but the function's results are "
                                  r"\[float\]"),
    (_missing_op, NotFoundError, r"Op type not registered 'DecodeJpeg' in minigraph: Node "
                                 r"'call' \(a PartitionedCall of function 'decode'\) has body "
                                 r"node 'j'"),
    (_bad_output_name, InvalidArgumentError, r"'ret y' reads 'n:nosuch:0', which is no "
                                             r"argument, body node output or control edge of "
                                             r"the function: body node 'n' has outputs "
                                             r"\['y'\]"),
    (_bad_output_index, InvalidArgumentError, r"'ret y' reads 'n:y:1'.*output 'y' of 'n' has "
                                              r"1 tensor"),
    (_missing_length_attr, InvalidArgumentError, r"body node 'rows' lacks attr 'num', which "
                                                 r"says how many outputs it has"),
    (_missing_ret, InvalidArgumentError, r"the function has no ret for its result 'y'"),
    (_wrong_result_type, InvalidArgumentError, r"result 'y' is float \('call/n:0'\) but the "
                                               r"signature says double"),
    (_unset_placeholder, InvalidArgumentError, r"body node 'n' attr 'T' is the placeholder "
                                               r"'U', which the call does not set"),
    (_list_argument, InvalidArgumentError, r"argument 'xs' is a list of tensors, which "
                                           r"minigraph does not inline"),
    (_duplicate_function, InvalidArgumentError, r"Cannot add function 'mul_add' because a "
                                                r"different function with the same name "
                                                r"already exists"),
    (_function_named_like_an_op, InvalidArgumentError, r"Cannot add function 'Relu' because an "
                                                       r"op with the same name already exists"),
    (_name_used_twice, InvalidArgumentError, r"the name 'x' is used twice in the function"),
]


@pytest.mark.parametrize("build,error,match", REFUSALS, ids=[r[0].__name__[1:] for r in REFUSALS])
def test_libraries_that_cannot_be_honoured_are_refused(build, error, match):
    graph = protos.GraphDef()
    placeholder(graph, "a")
    placeholder(graph, "b")
    build(graph)
    with pytest.raises(error, match=match):
        mg.import_graph_def(graph)


# ----------------------------------------------------------------------------- TensorFlow


@pytest.fixture(scope="module")
def tf_graphs():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    pytest.importorskip("tensorflow")
    from minigraph.testing import tf_graphs

    return tf_graphs


def _assert_close(actual, expected, what, truth=None):
    """Within 64 float32 ulps of the output's scale of TF's result; with ``truth`` (the
    float64 run of the same graph), of the truth instead, and no farther from TF than TF's
    own float32 result is from the truth plus that (deep models: TF's float32 rounding
    drifts further than ours)."""
    for index, (a, e) in enumerate(zip(actual, expected)):
        assert a.dtype == e.dtype and a.shape == e.shape, (what, index)
        scale = max(1.0, float(np.abs(e).max())) if e.size else 1.0
        atol = 64 * 2.0 ** -23 * scale
        if truth is None:
            np.testing.assert_allclose(a, e, rtol=0, atol=atol,
                                       err_msg=f"{what}: output {index}")
            continue
        t = truth[index].astype(np.float64)
        np.testing.assert_allclose(a, t, rtol=0, atol=atol, err_msg=f"{what}: output {index}")
        tf_error = float(np.abs(e - t).max()) if e.size else 0.0
        np.testing.assert_allclose(a, e, rtol=0, atol=tf_error + atol,
                                   err_msg=f"{what}: output {index} vs TF")


@pytest.mark.oracle
@pytest.mark.parametrize("build,fetches,feeds", [
    (simple_call_graph, ["out:0", "call:0"], {"a:0": X, "b:0": Y}),
    (control_graph, ["reader:0", "call:0"], {"a:0": X}),
])
def test_hand_built_libraries_run_as_tensorflow_runs_them(tf_graphs, build, fetches, feeds):
    data = build().SerializeToString()
    theirs = tf_graphs.run_graph_def(data, feeds, fetches)
    for backend in BACKENDS:
        _assert_close(run(mg.import_graph_def(data), fetches, feeds, backend), theirs,
                      f"{build.__name__} {backend}")


@pytest.mark.oracle
def test_nested_tf_functions_with_two_results(tf_graphs):
    """``outer`` calls ``middle`` (which calls ``inner``) and ``inner``; the second result of
    a call feeds the graph's outputs and is fetchable by the call's name (an ``IdentityN``
    keeps the name of a call with two results)."""
    graph = tf_graphs.nested_functions()
    root = mg.import_graph_def(graph.graph_def)
    g = root.graph()
    assert "PartitionedCall/PartitionedCall/mul" in {op.name for op in g.get_operations()}
    for backend in BACKENDS:
        _assert_close(run(root, graph.fetches, graph.feeds, backend), graph.expected,
                      f"nested {backend}")
    by_name = run(root, ["PartitionedCall_1:1"], graph.feeds)[0]
    np.testing.assert_array_equal(by_name, graph.expected[1])


@pytest.mark.oracle
@pytest.mark.parametrize("builder", ["regnet_x002", "convnext_like", "convnext_tiny"])
def test_frozen_keras_models_with_jit_compiled_functions(tf_graphs, builder):
    """Frozen by TF 2.21, their grouped convolutions are PartitionedCalls of jit-compiled
    library functions: imported, run on every backend, they match TF; the graph exported
    from minigraph (inlined: no library) runs in TensorFlow too."""
    graph = getattr(tf_graphs, builder)()
    assert protos.GraphDef().FromString(graph.graph_def).library.function
    root = mg.import_graph_def(graph.graph_def)
    assert "PartitionedCall" not in {op.type for op in root.graph().get_operations()}
    truth = run(root, graph.fetches, graph.feeds, "float64")
    for backend in BACKENDS:
        _assert_close(run(root, graph.fetches, graph.feeds, backend), graph.expected,
                      f"{builder} {backend}", truth)
    exported = mg.export_graph_def(root)
    assert not exported.library.function
    theirs = tf_graphs.run_graph_def(exported.SerializeToString(), graph.feeds, graph.fetches)
    _assert_close(theirs, graph.expected, f"{builder} exported, run by TensorFlow")
