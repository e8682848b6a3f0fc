"""``mg.import_graph_def``: build a minigraph graph from a TensorFlow GraphDef.

The rules are TensorFlow 2.21's (``ImportGraphDef``): nodes may come in any order; an input
is ``name`` (output 0), ``name:N`` or ``^name`` (a control edge, after the data inputs);
every attr without a default must be present, each of the kind its OpDef declares;
attrs starting with ``_`` (``_class``, ``_output_shapes``) are TF's bookkeeping and skipped,
and attrs the OpDef does not know are ignored with a warning, as TF ignores them. Errors use
TensorFlow's words; minigraph's own checks (shape functions, attr values) then run on every
node, so a graph that imports is one minigraph can run. Calls of the GraphDef's function
library (``PartitionedCall``...) are inlined as they are reached (``interop.functions``).
"""

from __future__ import annotations

import heapq
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from minigraph.framework.dtypes import DType, as_dtype
from minigraph.framework.errors import InvalidArgumentError, NotFoundError, UnimplementedError
from minigraph.framework.graph import Graph, Operation, Output
from minigraph.framework.op_def import (
    OpDef,
    build_operation,
    get_op_def,
)
from minigraph.framework.scope import Scope
from minigraph.interop import attrs, functions, protos, versions
from minigraph.interop.tensors import tf_type_name

TEXT_SUFFIXES = (".pbtxt", ".txt", ".prototxt")
# Nested function calls are inlined recursively: a bound far beyond real graphs (a Keras
# model nests two or three) that keeps Python's stack safe.
MAX_CALL_DEPTH = 64


def load_graph_def(source: Any) -> Any:
    """A GraphDef message from a path (``.pbtxt`` text, else binary), bytes, or a message
    (minigraph's or TensorFlow's own class)."""
    from google.protobuf import message, text_format

    if protos.is_graph_def(source):
        return protos.GraphDef().FromString(source.SerializeToString())
    if isinstance(source, (bytes, bytearray, memoryview)):
        data, text, where = bytes(source), False, "the given bytes"
    elif isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.is_file():
            raise NotFoundError(f"import_graph_def: no such file: {path}")
        data, where = path.read_bytes(), str(path)
        text = path.suffix.lower() in TEXT_SUFFIXES
    else:
        raise InvalidArgumentError(f"import_graph_def: expected a path, bytes or a GraphDef, "
                                   f"got {type(source).__name__}")
    try:
        if text:
            return protos.parse_text(data.decode("utf-8"))
        return protos.GraphDef().FromString(data)
    except (message.DecodeError, text_format.ParseError, UnicodeDecodeError) as exc:
        form = "text" if text else "binary"
        raise InvalidArgumentError(f"import_graph_def: {where} is not a {form} GraphDef: "
                                   f"{exc}") from None


def _parse_input(node: Any, text: str) -> tuple[str, int]:
    """``"name"``/``"name:N"``/``"^name"`` -> (node name, output index; -1 for control)."""
    if text.startswith("^"):
        return text[1:], -1
    name, sep, index = text.rpartition(":")
    if sep and index.isdigit():
        return name, int(index)
    if sep and not index.isdigit():
        raise InvalidArgumentError(f"Node '{node.name}': Malformed input '{text}'")
    return text, 0


def _inputs_by_node(nodes: Sequence[Any]) -> dict[str, list[tuple[str, int]]]:
    """Each node's parsed inputs, checked: known nodes, control inputs after data inputs."""
    names = {node.name for node in nodes}
    parsed = {}
    for node in nodes:
        entries = [_parse_input(node, text) for text in node.input]
        seen_control = False
        for source, index in entries:
            if source not in names:
                raise InvalidArgumentError(f"Node '{node.name}': Unknown input node "
                                           f"'{node.input[entries.index((source, index))]}'")
            if index < 0:
                seen_control = True
            elif seen_control:
                raise InvalidArgumentError(f"Node '{node.name}': Control dependencies must come "
                                           f"after regular dependencies")
        parsed[node.name] = entries
    return parsed


def _topological_order(nodes: Sequence[Any], inputs: dict[str, list[tuple[str, int]]]
                       ) -> list[Any]:
    """Nodes with every input before its consumers; among the nodes that are ready, the one
    first in the file goes first, so a file already in order keeps its order (Kahn). Inputs
    from outside ``nodes`` (a function body's reads of the graph) are already there."""
    position = {node.name: i for i, node in enumerate(nodes)}
    sources = {node.name: {source for source, _ in inputs[node.name] if source in position}
               for node in nodes}
    waiting = {name: len(found) for name, found in sources.items()}
    consumers: dict[str, list[str]] = {}
    for node in nodes:
        for source in sources[node.name]:
            consumers.setdefault(source, []).append(node.name)
    ready = [position[name] for name, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        node = nodes[heapq.heappop(ready)]
        order.append(node)
        for consumer in consumers.get(node.name, []):
            waiting[consumer] -= 1
            if waiting[consumer] == 0:
                heapq.heappush(ready, position[consumer])
    if len(order) != len(nodes):
        raise InvalidArgumentError(f"{len(nodes) - len(order)} nodes in a cycle")
    return order


def _node_attrs(node: Any, op_def: OpDef) -> dict[str, Any]:
    """The NodeDef's attrs as minigraph values; missing required ones and wrong kinds are
    refused with TF's messages."""
    where = f"NodeDef: {{{{node {node.name}}}}}; {attrs.op_signature(op_def)}"
    known = {a.name: a for a in op_def.attrs}
    values = {}
    for name, value in node.attr.items():
        if name.startswith("_"):
            continue
        if name not in known:
            warnings.warn(f"NodeDef mentions attribute {name} which is not in the op "
                          f"definition: {attrs.op_signature(op_def)} This may be expected if "
                          f"your graph generating binary is newer than this binary. Unknown "
                          f"attributes will be ignored. NodeDef: {{{{node {node.name}}}}}",
                          stacklevel=5)
            continue
        values[name] = attrs.attr_from_proto(value, known[name], where)
    for attr in op_def.attrs:
        if not attr.has_default and attr.name not in values:
            raise InvalidArgumentError(f"NodeDef missing attr '{attr.name}' from "
                                       f"{attrs.op_signature(op_def)}; NodeDef: "
                                       f"{{{{node {node.name}}}}}")
    return values


def _arguments(node: Any, op_def: OpDef, node_attrs: dict[str, Any],
               sources: list[Output]) -> list[Any]:
    """The op's input arguments (a list for a list argument: ConcatV2's ``values``, as long
    as the NodeDef's ``N`` or ``T`` says), checked against the NodeDef's types with TF's
    messages."""
    lengths = [arg.length(node_attrs) for arg in op_def.inputs]
    expected: list[DType | None] = []
    if all(0 <= length <= len(sources) for length in lengths):  # else no list is built
        for arg, length in zip(op_def.inputs, lengths):
            expected += ([arg.dtype_at(node_attrs, i) for i in range(length)]
                         if arg.type_list_attr
                         else [arg.dtype or node_attrs.get(arg.type_attr)] * length)
    if sum(lengths) != len(sources):
        names = (", ".join(tf_type_name(d) if d else "?" for d in expected) if expected
                 else f"{sum(lengths)} tensors")
        raise InvalidArgumentError(f"NodeDef expected inputs '{names}' do not match "
                                   f"{len(sources)} inputs specified; "
                                   f"{attrs.op_signature(op_def)}; NodeDef: "
                                   f"{{{{node {node.name}}}}}")
    for index, (source, dtype) in enumerate(zip(sources, expected)):
        if dtype is not None and source.dtype is not dtype:
            raise InvalidArgumentError(
                f"Input {index} of node {node.name} was passed {tf_type_name(source.dtype)} "
                f"from {source.name} incompatible with expected {tf_type_name(dtype)}.")
    arguments, start = [], 0
    for arg, length in zip(op_def.inputs, lengths):
        arguments.append(sources[start:start + length] if arg.is_list else sources[start])
        start += length
    return arguments


def _check_const(node: Any, node_attrs: dict[str, Any]) -> None:
    value, dtype = node_attrs.get("value"), node_attrs.get("dtype")
    if value is not None and dtype is not None and value.dtype != dtype.np_dtype:
        raise InvalidArgumentError(f"Const '{node.name}': its value is a "
                                   f"{tf_type_name(as_dtype(value.dtype))} tensor, but attr dtype "
                                   f"is {tf_type_name(dtype)}")


def import_graph_def(source: Any, name: str = "") -> Scope:
    """Build the nodes of a TensorFlow GraphDef in a new graph; returns its root Scope.

    ``source`` is a path (``.pb`` binary; ``.pbtxt`` text), the file's bytes, or a GraphDef
    message (minigraph's, or TensorFlow's own ``tf.compat.v1.GraphDef``). Nodes keep their
    TF names, under ``name/`` when ``name`` is given, so ``root.graph().get_tensor_by_name(
    "Identity:0")`` finds what TF called ``Identity:0``. Calls of library functions are
    inlined: the body's nodes are ``<call>/<node>``, and ``<call>:i`` is still the call's
    i-th result.
    """
    graph_def = load_graph_def(source)
    versions.check_versions(graph_def.versions)
    nodes = list(graph_def.node)
    seen: set[str] = set()
    for node in nodes:
        if node.name in seen:
            raise InvalidArgumentError(f"Node '{node.name}' is not unique")
        seen.add(node.name)
    inputs = _inputs_by_node(nodes)
    root = Scope(Graph())
    importer = _Importer(root, f"{name}/" if name else "", graph_def.versions.producer,
                         functions.Library(graph_def.library), seen)
    importer.import_nodes(nodes, inputs, ())
    return root


class _Importer:
    """One import: builds nodes in the graph, inlining function calls.

    ``names`` holds every GraphDef-level node name in use (the file's, and the inlined
    bodies'); ``results`` maps a call's ``(name, i)`` to the body tensor (GraphDef form) its
    consumers read instead of the call's own output."""

    def __init__(self, root: Scope, prefix: str, producer: int, library: functions.Library,
                 names: set[str]) -> None:
        self.root, self.prefix, self.producer, self.library = root, prefix, producer, library
        self.names = set(names)
        self.results: dict[tuple[str, int], str] = {}

    def import_nodes(self, nodes: Sequence[Any], inputs: dict[str, list[tuple[str, int]]],
                     calls: tuple[str, ...]) -> None:
        """Build ``nodes`` in dependency order; ``calls``: the functions whose bodies they
        are in (outermost first), for recursion."""
        for node in _topological_order(nodes, inputs):
            call = self.library.call(node)
            if call is None:
                sources, controls = self._sources(node, inputs[node.name])
                _import_node(self.root, node, sources, controls, self.prefix, self.producer)
            else:
                self._inline(call, inputs[node.name], calls)

    def _output(self, node: Any, source: str, index: int) -> Output:
        """Output ``index`` of GraphDef node ``source`` (a call's: its body's tensor, which
        may be another call's result in turn)."""
        while (source, index) in self.results:
            source, index = _parse_input(node, self.results[(source, index)])
        op = self.root.graph().get_operation(self.prefix + source)
        if index >= len(op.outputs):
            raise InvalidArgumentError(f"Node '{node.name}': Connecting to invalid output "
                                       f"{index} of source node {source} which has "
                                       f"{len(op.outputs)} outputs.")
        return op.outputs[index]

    def _sources(self, node: Any, entries: list[tuple[str, int]]
                 ) -> tuple[list[Output], list[Operation]]:
        """The node's data inputs and control inputs."""
        sources, controls = [], []
        for source, index in entries:
            if index < 0:
                controls.append(self.root.graph().get_operation(self.prefix + source))
            else:
                sources.append(self._output(node, source, index))
        return sources, controls

    def _inline(self, call: functions.Call, entries: list[tuple[str, int]],
                calls: tuple[str, ...]) -> None:
        """Replace a call by its function's body (``functions.Library.inline``)."""
        if call.name in calls:
            chain = " -> ".join((*calls, call.name))
            raise InvalidArgumentError(f"{call.where()}: the function calls itself ({chain}); "
                                       f"minigraph cannot inline recursion")
        if len(calls) >= MAX_CALL_DEPTH:
            raise InvalidArgumentError(f"{call.where()}: calls nested {len(calls) + 1} deep; "
                                       f"minigraph inlines at most {MAX_CALL_DEPTH} levels")
        sources, _ = self._sources(call.node, entries)
        self.library.check_arguments(call, sources)
        body = self.library.inline(call, lambda name: name in self.names)
        self.names.update(node.name for node in body.nodes)
        inputs = {node.name: [_parse_input(node, text) for text in node.input]
                  for node in body.nodes}
        try:
            self.import_nodes(body.nodes, inputs, (*calls, call.name))
            results = [self._output(call.node, *_parse_input(call.node, text))
                       for text in body.outputs]
        except (InvalidArgumentError, NotFoundError, UnimplementedError) as exc:
            raise type(exc)(f"{exc} (in function '{call.name}', inlined at node "
                            f"'{call.node.name}')") from None
        self.library.check_results(call, results)
        caller = body.caller
        _import_node(self.root, caller,
                     *self._sources(caller, [_parse_input(caller, t) for t in caller.input]),
                     self.prefix, self.producer)
        for index, text in enumerate(body.outputs):
            self.results[(call.node.name, index)] = text


def _import_node(root: Scope, node: Any, sources: list[Output], controls: list[Operation],
                 prefix: str, producer: int) -> None:
    try:
        op_def = get_op_def(node.op)
    except NotFoundError:
        raise NotFoundError(f"Op type not registered '{node.op}' in minigraph (node "
                            f"'{node.name}'): minigraph.ops.__all__ lists the ops it "
                            f"implements") from None
    versions.check_op_available(op_def, producer)
    node_attrs = _node_attrs(node, op_def)
    if node.op == "Const":
        _check_const(node, node_attrs)
    arguments = _arguments(node, op_def, node_attrs, sources)
    scope = (root.WithOpName(prefix + node.name).WithDevice(node.device)
             .WithControlDependencies(controls))
    op = build_operation(scope, op_def, arguments, node_attrs)
    if op.name != prefix + node.name:  # a name an earlier node's made-up name took
        raise InvalidArgumentError(f"Node '{node.name}' is not unique")
