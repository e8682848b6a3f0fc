"""``mg.export_graph_def``: write a minigraph graph as a TensorFlow GraphDef.

Every node keeps its name, op type, device, inputs (``name``, ``name:N``, ``^name`` for
control edges) and all its attrs, defaults included, so TensorFlow imports it without
guessing. The producer version is TF 2.21's, or 8 when the graph holds the
global-normalization ops TF removed at 9 (``versions.producer_for``). Ops TensorFlow does not
have are written as the constant they compute when their inputs are all constants, and
refused with an error naming the node otherwise.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from minigraph.client.session import ClientSession
from minigraph.framework import files
from minigraph.framework.errors import InvalidArgumentError
from minigraph.framework.graph import Graph, Operation, Output
from minigraph.framework.names import is_valid_node_name, shown
from minigraph.framework.op_def import build_operation
from minigraph.framework.scope import Scope
from minigraph.interop import asserts, attrs, protos, tensors, versions
from minigraph.interop.importer import TEXT_SUFFIXES
from minigraph.io import atomic_write

# minigraph's own ops: what each is, for the error when it cannot be folded to a constant
MINIGRAPH_ONLY_OPS = {
    "FusedBatchNormGradGrad": "minigraph's fused second-order batch-norm gradient (TF builds "
                              "it from elementwise ops in Python)",
    "ReducedShape": "minigraph's shape-of-a-reduction op (TF computes it from Range, Mod, "
                    "DynamicStitch and Fill, which minigraph lacks)",
    "FlatConcat": "minigraph's flatten-and-concatenate of data-parallel gradients (TF builds "
                  "it from Reshape and ConcatV2)",
    "WhileLoop": "minigraph's form of a while loop imported from TF (its condition and body "
                 "are subgraphs; TF's frozen graphs hold the loop's frame of Enter, Merge, "
                 "Switch and Exit nodes)",
    "Conditional": "minigraph's form of a tf.cond or tf.switch_case imported from TF (its "
                   "branches are subgraphs; TF's frozen graphs hold Switch and Merge nodes)",
}
# attrs of TF's ops that minigraph adds, and how each is written for TF instead: Assert's
# message (TF carries it as a string tensor among the data; interop.asserts folds it back)
MINIGRAPH_ONLY_ATTRS = {"Assert": ("message",)}
# inputs that make a value unknown until a step runs
_NON_CONSTANT_OPS = ("Placeholder", "Variable", "RandomUniform")
# ops whose value is their input's static shape, known once that shape is fully defined
_SHAPE_OPS = ("Shape", "Size")


def _input_text(output: Output) -> str:
    return output.op.name if output.index == 0 else f"{output.op.name}:{output.index}"


def _varying_source(output: Output) -> Operation | None:
    """None if ``output``'s value is known before any step runs (a function of constants
    and of fully known static shapes), else an op that makes it vary (a Placeholder, a
    Variable, a random op)."""
    stack, seen = [output], set()
    while stack:
        current = stack.pop()
        op = current.op
        if op.name in seen:
            continue
        seen.add(op.name)
        if op.type in _SHAPE_OPS and op.inputs[0].shape.is_fully_defined():
            continue
        if op.type in _NON_CONSTANT_OPS or op.op_def.is_stateful:
            return op
        stack.extend(op.inputs)
    return None


def _static_value(output: Output) -> np.ndarray:
    """The value of an output with no varying source (``_varying_source`` is None)."""
    op = output.op
    if op.type in _SHAPE_OPS and op.inputs[0].shape.is_fully_defined():
        shape = op.inputs[0].shape
        value = shape.as_list() if op.type == "Shape" else shape.num_elements()
        return np.array(value, output.dtype.np_dtype)
    return ClientSession(op.graph).Run(output)


def _folded_values(op: Operation) -> list[np.ndarray]:
    """The values of a minigraph-only op whose inputs are known before any step runs: the op
    rebuilt on constants of those values in a scratch graph and run there. Otherwise an
    error naming the node and what it depends on."""
    for source in op.inputs:
        varying = _varying_source(source)
        if varying is not None:
            raise InvalidArgumentError(
                f"export_graph_def: node '{op.name}' is a {op.type}, "
                f"{MINIGRAPH_ONLY_OPS[op.type]}; TensorFlow has no such op, and its value "
                f"depends on '{varying.name}' (a {varying.type}), so it cannot be written as a "
                f"constant")
    scratch = Scope.NewRootScope()
    values = [_static_value(source) for source in op.inputs]
    folded = build_operation(scratch, op.op_def, values, dict(op.attrs))
    return ClientSession(scratch).Run(list(folded.outputs))


def _add_node(graph_def: Any, op: Operation, renamed: dict[str, str]) -> None:
    node = graph_def.node.add()
    node.name, node.op, node.device = op.name, op.type, op.device
    node.input.extend(renamed.get(_input_text(i), _input_text(i)) for i in op.inputs)
    node.input.extend(f"^{c.name}" for c in op.control_inputs)
    skipped = MINIGRAPH_ONLY_ATTRS.get(op.type, ())
    for attr in op.op_def.attrs:
        if attr.name in op.attrs and attr.name not in skipped:
            attrs.attr_to_proto(op.attrs[attr.name], attr.kind, node.attr[attr.name])
    if op.type == "Assert" and op.attrs["message"]:
        _add_assert_message(graph_def, node, op)


def _add_assert_message(graph_def: Any, node: Any, op: Operation) -> None:
    """TF's form of an Assert's message: a string Const (``<name>/message``, or the first
    free ``<name>/message_N``) as its first data tensor."""
    taken = {n.name for n in graph_def.node} | {o.name for o in op.graph.operations()}
    name, n = f"{op.name}/message", 0
    while name in taken:
        n += 1
        name = f"{op.name}/message_{n}"
    message = graph_def.node.add()
    message.name, message.op, message.device = name, "Const", op.device
    message.attr["dtype"].type = asserts.DT_STRING
    tensor = message.attr["value"].tensor
    tensor.dtype = asserts.DT_STRING
    tensor.tensor_shape.SetInParent()
    tensor.string_val.append(op.attrs["message"].encode("utf-8"))
    node.input.insert(1, name)
    node.attr["T"].list.type.insert(0, asserts.DT_STRING)


def _add_folded(graph_def: Any, op: Operation, renamed: dict[str, str]) -> None:
    """Write a minigraph-only op as one Const per output (``name`` for output 0,
    ``name/output_N`` for the others) that its consumers read instead."""
    for output, value in zip(op.outputs, _folded_values(op)):
        name = op.name if output.index == 0 else f"{op.name}/output_{output.index}"
        renamed[_input_text(output)] = name
        node = graph_def.node.add()
        node.name, node.op, node.device = name, "Const", op.device
        node.input.extend(f"^{c.name}" for c in op.control_inputs)
        node.attr["dtype"].type = tensors.dtype_to_enum(output.dtype)
        tensors.array_to_proto(value, node.attr["value"].tensor)


def graph_to_graph_def(graph: Graph, for_display: bool = False) -> Any:
    """The GraphDef message of ``graph``. ``for_display`` keeps minigraph-only ops as they
    are (TensorBoard draws any op type; TensorFlow could not run the result)."""
    graph_def = protos.GraphDef()
    operations = graph.operations()
    graph_def.versions.producer = versions.producer_for([op.op_def for op in operations])
    renamed: dict[str, str] = {}
    for op in operations:
        if not for_display and not is_valid_node_name(op.name):
            raise InvalidArgumentError(
                f"export_graph_def: node '{shown(op.name)}' has a name TensorFlow refuses "
                f"(Node name contains invalid characters: ASCII letters, digits and '.' "
                f"first, then also '-', '/', '_'); rename it with Scope.WithOpName")
        if op.type in MINIGRAPH_ONLY_OPS and not for_display:
            _add_folded(graph_def, op, renamed)
        else:
            _add_node(graph_def, op, renamed)
    return graph_def


def export_graph_def(scope_or_graph: Scope | Graph, path: str | os.PathLike | None = None,
                     as_text: bool | None = None) -> Any:
    """The graph as a TensorFlow GraphDef message; with ``path``, also written there.

    The file is protobuf text when ``as_text`` is true, or when it is None and the path ends
    in ``.pbtxt``/``.txt``; binary otherwise (``.pb``). TensorFlow reads either with
    ``tf.compat.v1.GraphDef`` and ``tf.graph_util.import_graph_def``. It is written
    atomically (:func:`minigraph.io.atomic_write`); a path no file can have and every OS
    error are ``mg.errors`` exceptions naming the file (:mod:`minigraph.framework.files`).
    """
    graph = scope_or_graph.graph() if isinstance(scope_or_graph, Scope) else scope_or_graph
    if not isinstance(graph, Graph):
        raise InvalidArgumentError(f"export_graph_def: expected a Scope or a Graph, got "
                                   f"{type(scope_or_graph).__name__}")
    if path is not None:
        path = files.check_path(path, "export_graph_def")
    graph_def = graph_to_graph_def(graph)
    if path is not None:
        if as_text is None:
            as_text = Path(path).suffix.lower() in TEXT_SUFFIXES
        data = protos.to_text(graph_def).encode() if as_text else graph_def.SerializeToString()
        atomic_write(path, lambda file: file.write(data), "export_graph_def")
    return graph_def
