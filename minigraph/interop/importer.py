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

import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from minigraph.framework import dtypes, files
from minigraph.framework.dtypes import DType, as_dtype
from minigraph.framework.errors import (
    InvalidArgumentError,
    NotFoundError,
    ResourceExhaustedError,
    UnimplementedError,
)
from minigraph.framework.graph import Graph, Operation, Output
from minigraph.framework.names import device_problem, is_valid_node_name, shown
from minigraph.framework.op_def import (
    ArgDef,
    OpDef,
    build_operation,
    get_op_def,
)
from minigraph.framework.scope import Scope
from minigraph.framework.toposort import stable_topological_order
from minigraph.interop import asserts, attrs, conds, functions, loops, protos, versions
from minigraph.interop.node_lists import node_def
from minigraph.interop.tensors import enum_to_dtype, tf_type_name
from minigraph.ops.array_ops import IDENTITY, PLACEHOLDER
from minigraph.ops.control_flow_ops import CONDITIONAL, WHILE_LOOP, Subgraph

TEXT_SUFFIXES = (".pbtxt", ".txt", ".prototxt")
# protobuf refuses messages over 2 GiB; TF's GraphDefs never are larger
MAX_GRAPH_DEF_BYTES = (2 << 30) - 1
# Nested function calls are inlined, and nested while loops' bodies imported, recursively: a
# bound far beyond real graphs (a Keras model nests two or three) that keeps Python's stack
# safe.
MAX_CALL_DEPTH = 64


def load_graph_def(source: Any) -> Any:
    """A GraphDef message from a path (``.pbtxt`` text, else binary), bytes, or a message
    (minigraph's or TensorFlow's own class).

    The input is hostile by default: a path must name a regular file of at most 2 GiB,
    text is parsed with bounded memory and nesting (:mod:`minigraph.interop.pbtxt`), and map
    entries the protobuf backend set aside are restored (:func:`protos.restore_map_entries`).
    Every problem is an ``mg.errors`` exception naming the file.
    """
    from google.protobuf import message

    if protos.is_graph_def(source):
        source = source.SerializeToString()
    if isinstance(source, (bytes, bytearray, memoryview)):
        data, text, where = bytes(source), False, "the given bytes"
    elif isinstance(source, (str, os.PathLike)):
        path = files.check_path(source, "import_graph_def")
        data, where = _read_file(path), path
        text = Path(path).suffix.lower() in TEXT_SUFFIXES
    else:
        raise InvalidArgumentError(f"import_graph_def: expected a path, bytes or a GraphDef, "
                                   f"got {type(source).__name__}")
    if len(data) > MAX_GRAPH_DEF_BYTES:
        raise InvalidArgumentError(f"import_graph_def: {where} holds {len(data):,} bytes; a "
                                   f"GraphDef is at most 2 GiB")
    if text:
        try:
            decoded = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidArgumentError(f"import_graph_def: {where} is not a text GraphDef: "
                                       f"not UTF-8 at byte {exc.start}") from None
        graph_def = protos.parse_text(decoded, f"import_graph_def: {where}")
    else:
        try:
            graph_def = protos.GraphDef().FromString(data)
        except message.DecodeError as exc:
            raise InvalidArgumentError(f"import_graph_def: {where} is not a binary GraphDef: "
                                       f"{exc}") from None
    protos.restore_map_entries(graph_def, f"import_graph_def: {where}")
    graph_def.DiscardUnknownFields()  # TF ignores them; the restored entries replace theirs
    return graph_def


def _read_file(path: str) -> bytes:
    """The bytes of the regular file ``path``, refused when larger than a GraphDef may be."""
    what = f"import_graph_def: cannot read '{shown(path)}'"
    files.require_regular_file(path, what)
    with files.os_errors(what), open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        if size > MAX_GRAPH_DEF_BYTES:
            raise InvalidArgumentError(f"import_graph_def: '{shown(path)}' holds {size:,} "
                                       f"bytes; a GraphDef is at most 2 GiB")
        return file.read(MAX_GRAPH_DEF_BYTES + 1)


def _parse_input(text: str) -> tuple[str, int]:
    """``"name"``/``"name:N"``/``"^name"`` -> (node name, output index; -1 for control), as
    TF's ``ParseTensorName`` reads them: N is ASCII digits only, anything else after a ``:``
    (``x:٣``, ``x:-1``, ``x:``) leaves the whole text a node name, which no node has."""
    if text.startswith("^"):
        return text[1:], -1
    name, sep, index = text.rpartition(":")
    if sep and index.isascii() and index.isdigit():
        return name, int(index) if len(index) <= 18 else 2**63  # past any output count
    return text, 0


def _inputs_by_node(nodes: Sequence[Any]) -> dict[str, list[tuple[str, int]]]:
    """Each node's parsed inputs, checked: known nodes, control inputs after data inputs."""
    names = {node.name for node in nodes}
    parsed = {}
    for node in nodes:
        entries = []
        seen_control = False
        for text in node.input:
            source, index = _parse_input(text)
            if source not in names:
                raise InvalidArgumentError(f"Node '{shown(node.name)}': Unknown input node "
                                           f"'{shown(text)}'")
            if index < 0:
                seen_control = True
            elif seen_control:
                raise InvalidArgumentError(f"Node '{shown(node.name)}': Control dependencies "
                                           f"must come after regular dependencies")
            entries.append((source, index))
        parsed[node.name] = entries
    return parsed


def _a_cycle(left: set[str], inputs: dict[str, list[tuple[str, int]]]) -> list[str]:
    """One cycle among the nodes ``left`` over (each waits on another of them): follow
    inputs within ``left`` until a node repeats."""
    path, position = [], {}
    current = min(left)
    while current not in position:
        position[current] = len(path)
        path.append(current)
        current = next(source for source, _ in inputs[current] if source in left)
    return path[position[current]:] + [current]


def _topological_order(nodes: Sequence[Any], inputs: dict[str, list[tuple[str, int]]]
                       ) -> list[Any]:
    """Nodes with every input before its consumers; among the nodes that are ready, the one
    first in the file goes first, so a file already in order keeps its order (Kahn). Inputs
    from outside ``nodes`` (a function body's reads of the graph) are already there."""
    names = {node.name for node in nodes}
    sources = {node.name: {source for source, _ in inputs[node.name] if source in names}
               for node in nodes}
    order, stuck = stable_topological_order([node.name for node in nodes], sources)
    if stuck:
        cycle = _a_cycle(set(stuck), inputs)
        shown_cycle = " -> ".join(f"'{shown(name)}'" for name in cycle[:8])
        if len(cycle) > 8:
            shown_cycle += f" -> ... ({len(cycle) - 1} nodes)"
        raise InvalidArgumentError(f"{len(nodes) - len(order)} nodes in a cycle; one cycle: "
                                   f"{shown_cycle}")
    return [nodes[i] for i in order]


def _node_attrs(node: Any, op_def: OpDef) -> dict[str, Any]:
    """The NodeDef's attrs as minigraph values; missing required ones and wrong kinds are
    refused with TF's messages."""
    where = f"NodeDef: {{{{node {shown(node.name)}}}}}; {attrs.op_signature(op_def)}"
    known = {a.name: a for a in op_def.attrs}
    values = {}
    for name, value in node.attr.items():
        if name.startswith("_"):
            continue
        if name not in known:
            warnings.warn(f"NodeDef mentions attribute {shown(name)} which is not in the op "
                          f"definition: {attrs.op_signature(op_def)} This may be expected if "
                          f"your graph generating binary is newer than this binary. Unknown "
                          f"attributes will be ignored. NodeDef: {{{{node {shown(node.name)}}}}}",
                          stacklevel=5)
            continue
        values[name] = attrs.attr_from_proto(value, known[name], where)
    for attr in op_def.attrs:
        if not attr.has_default and attr.name not in values:
            raise InvalidArgumentError(f"NodeDef missing attr '{attr.name}' from "
                                       f"{attrs.op_signature(op_def)}; NodeDef: "
                                       f"{{{{node {shown(node.name)}}}}}")
    return values


def _expected(arg: ArgDef, node_attrs: dict[str, Any], count: int) -> list[DType | None]:
    """The dtypes of the argument's first ``count`` tensors, from its fixed dtype or the
    NodeDef's type attrs."""
    if arg.type_list_attr:
        return [arg.dtype_at(node_attrs, i) for i in range(count)]
    return [arg.dtype or node_attrs.get(arg.type_attr)] * count


def _expected_text(op_def: OpDef, lengths: list[int], node_attrs: dict[str, Any]) -> str:
    """TF's ``'float, float'`` list of the expected input types (a claimed list of 2**31
    shows its first few and its length)."""
    dtypes = [d for arg, length in zip(op_def.inputs, lengths)
              for d in _expected(arg, node_attrs, max(0, min(length, 8)))][:8]
    count = sum(lengths)
    names = ", ".join(tf_type_name(d) if d else "?" for d in dtypes)
    return names + (f", ... ({count:,} inputs)" if count > 8 else "")


def _arguments(node: Any, op_def: OpDef, node_attrs: dict[str, Any],
               sources: list[Output]) -> list[Any]:
    """The op's input arguments (a list for a list argument: ConcatV2's ``values``, as long
    as the NodeDef's ``N`` or ``T`` says), checked against the NodeDef's types with TF's
    messages; a claimed length is compared before any list of it is built."""
    lengths = [arg.length(node_attrs) for arg in op_def.inputs]
    if sum(lengths) != len(sources) or min(lengths, default=0) < 0:
        raise InvalidArgumentError(f"NodeDef expected inputs "
                                   f"'{_expected_text(op_def, lengths, node_attrs)}' do not "
                                   f"match {len(sources)} inputs specified; "
                                   f"{attrs.op_signature(op_def)}; NodeDef: "
                                   f"{{{{node {shown(node.name)}}}}}")
    expected = [d for arg, length in zip(op_def.inputs, lengths)
                for d in _expected(arg, node_attrs, length)]
    for index, (source, dtype) in enumerate(zip(sources, expected)):
        if dtype is not None and source.dtype is not dtype:
            raise InvalidArgumentError(
                f"Input {index} of node {shown(node.name)} was passed "
                f"{tf_type_name(source.dtype)} from {shown(source.name)} incompatible with "
                f"expected {tf_type_name(dtype)}.")
    arguments, start = [], 0
    for arg, length in zip(op_def.inputs, lengths):
        arguments.append(sources[start:start + length] if arg.is_list else sources[start])
        start += length
    return arguments


def _check_const(node: Any, node_attrs: dict[str, Any]) -> None:
    value, dtype = node_attrs.get("value"), node_attrs.get("dtype")
    if value is not None and dtype is not None and value.dtype != dtype.np_dtype:
        raise InvalidArgumentError(f"Const '{shown(node.name)}': its value is a "
                                   f"{tf_type_name(as_dtype(value.dtype))} tensor, but attr dtype "
                                   f"is {tf_type_name(dtype)}")


def import_graph_def(source: Any, name: str = "") -> Scope:
    """Build the nodes of a TensorFlow GraphDef in a new graph; returns its root Scope.

    ``source`` is a path (``.pb`` binary; ``.pbtxt`` text), the file's bytes, or a GraphDef
    message (minigraph's, or TensorFlow's own ``tf.compat.v1.GraphDef``). Nodes keep their
    TF names, under ``name/`` when ``name`` is given, so ``root.graph().get_tensor_by_name(
    "Identity:0")`` finds what TF called ``Identity:0``. Calls of library functions are
    inlined: the body's nodes are ``<call>/<node>``, and ``<call>:i`` is still the call's
    i-th result. An error about a node of a file ends by naming the file:
    ``... (in 'model.pb')``.
    """
    graph_def = load_graph_def(source)
    try:
        return _build_graph(graph_def, name)
    except (InvalidArgumentError, NotFoundError, UnimplementedError,
            ResourceExhaustedError) as exc:
        if not isinstance(source, (str, os.PathLike)):
            raise
        raise type(exc)(f"{exc} (in '{shown(os.fsdecode(source))}')") from None


def _build_graph(graph_def: Any, name: str) -> Scope:
    versions.check_versions(graph_def.versions)
    nodes = list(graph_def.node)
    seen: set[str] = set()
    for node in nodes:
        if not is_valid_node_name(node.name):
            raise InvalidArgumentError(f"Node '{shown(node.name)}': Node name contains "
                                       f"invalid characters")
        if node.name in seen:
            raise InvalidArgumentError(f"Node '{shown(node.name)}' is not unique")
        seen.add(node.name)
        problem = device_problem(node.device) if node.device else None
        if problem:
            raise InvalidArgumentError(f"Node '{shown(node.name)}': {problem}")
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
        are in (outermost first), for recursion. Assert messages held in string constants
        are folded into the Asserts first (``interop.asserts``), and lowered while loops
        and conditionals lifted (``interop.loops``, ``interop.conds``)."""
        nodes, inputs = asserts.fold_string_messages(nodes, inputs)
        nodes, inputs = loops.lift(nodes, inputs, lambda name: name in self.names)
        nodes, inputs = conds.lift(nodes, inputs, lambda name: name in self.names)
        for node in _topological_order(nodes, inputs):
            if isinstance(node, loops.Loop):
                self._import_loop(node, inputs[node.name], calls)
                continue
            if isinstance(node, conds.Conditional):
                self._import_cond(node, inputs[node.name], calls)
                continue
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
            source, index = _parse_input(self.results[(source, index)])
        op = self.root.graph().get_operation(self.prefix + source)
        if index >= len(op.outputs):
            raise InvalidArgumentError(f"Node '{shown(node.name)}': Connecting to invalid "
                                       f"output {shown(str(index))} of source node "
                                       f"{shown(source)} which has {len(op.outputs)} outputs.")
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

    def _import_loop(self, loop: loops.Loop, entries: list[tuple[str, int]],
                     calls: tuple[str, ...]) -> None:
        """Build a lifted while loop: its condition and body, each imported into a graph of
        its own fed by one Placeholder per loop variable, then the ``WhileLoop`` node."""
        calls = _nested(calls, f"while loop '{shown(loop.frame)}'")
        sources, controls = self._sources(loop, entries)
        initial = sources[:loop.variables]
        lists, before = len(loop.list_types), len(loop.prewritten)
        at = loop.variables
        lengths, shapes = sources[at:at + lists], sources[at + lists:at + 2 * lists]
        at += 2 * lists
        indices, items = sources[at:at + before], sources[at + before:at + 2 * before]
        try:
            cond = self._subgraph(loop.frame, loop.placeholders, initial, *loop.cond[:2],
                                  [loop.cond[2]], [], calls)
            body = self._subgraph(loop.frame, loop.placeholders, initial, *loop.body,
                                  loop.body_targets, calls, condition=loop.cond)
        except (InvalidArgumentError, NotFoundError, UnimplementedError) as exc:
            raise type(exc)(f"{exc} (in while loop '{shown(loop.frame)}')") from None
        if cond.outputs[0].dtype is not dtypes.bool_:
            raise InvalidArgumentError(f"while loop '{shown(loop.frame)}': its condition is "
                                       f"{cond.outputs[0].dtype.name}, expected bool")
        list_types = [enum_to_dtype(t, f"while loop '{shown(loop.frame)}'")
                      for t in loop.list_types]
        writes = list(body.outputs[loop.variables:loop.variables + 2 * lists])
        writes += [value for pair in zip(indices, items) for value in pair]
        for position, (index, item) in enumerate(zip(writes[::2], writes[1::2])):
            if position >= lists:  # an item written before the loop
                position = loop.prewritten[position - lists]
            if index.dtype is not dtypes.int32 or item.dtype is not list_types[position]:
                raise InvalidArgumentError(
                    f"while loop '{shown(loop.frame)}': list {position} holds "
                    f"{list_types[position].name} items at int32 indices; a write puts "
                    f"{item.dtype.name} ('{shown(item.name)}') at {index.dtype.name}")
        self._build_lifted(loop, controls, WHILE_LOOP,
                           [initial, lengths, shapes, indices, items],
                           {"list_types": list_types, "growable": loop.growable,
                            "prewritten": loop.prewritten, "cond": cond, "body": body})

    def _import_cond(self, cond: conds.Conditional, entries: list[tuple[str, int]],
                     calls: tuple[str, ...]) -> None:
        """Build a lifted conditional: each branch imported into a graph of its own fed by
        one Placeholder per input, then the ``Conditional`` node."""
        calls = _nested(calls, f"tf.cond '{shown(cond.name)}'")
        (selector, *initial), controls = self._sources(cond, entries)
        if selector.dtype not in (dtypes.bool_, dtypes.int32):
            raise InvalidArgumentError(f"tf.cond '{shown(cond.name)}': its selector "
                                       f"'{shown(selector.name)}' is "
                                       f"{selector.dtype.name}, expected bool or int32")
        try:
            branches = [self._subgraph(cond.name, cond.placeholders, initial, b.nodes,
                                       b.inputs, b.outputs, b.targets, calls)
                        for b in cond.branches]
        except (InvalidArgumentError, NotFoundError, UnimplementedError) as exc:
            raise type(exc)(f"{exc} (in tf.cond '{shown(cond.name)}')") from None
        for position, branch in enumerate(branches[1:], 1):
            for index, (a, b) in enumerate(zip(branches[0].outputs, branch.outputs)):
                if a.dtype is not b.dtype:
                    raise InvalidArgumentError(
                        f"tf.cond '{shown(cond.name)}': result {index} is {a.dtype.name} in "
                        f"branch 0 ('{shown(a.name)}') and {b.dtype.name} in branch "
                        f"{position} ('{shown(b.name)}')")
        self._build_lifted(cond, controls, CONDITIONAL, [selector, initial],
                           {"Tout": [o.dtype for o in branches[0].outputs],
                            "branches": branches})

    def _build_lifted(self, lifted: Any, controls: list[Operation], op_def: OpDef,
                      arguments: list[Any], node_attrs: dict[str, Any]) -> None:
        """The ``WhileLoop`` or ``Conditional`` node of a lifted loop or conditional."""
        scope = (self.root.WithOpName(self.prefix + lifted.name).WithDevice(lifted.device)
                 .WithControlDependencies(controls))
        build_operation(scope, op_def, arguments, node_attrs)

    def _subgraph(self, where: str, placeholders: list[str], initial: list[Output],
                  nodes: list[Any], inputs: dict[str, list[tuple[str, int]]],
                  outputs: list[tuple[str, int]], targets: list[str], calls: tuple[str, ...],
                  condition: tuple | None = None) -> Subgraph:
        """``nodes`` imported into a new graph whose ``placeholders`` take the dtypes of
        ``initial`` (a loop's or conditional's inputs; ``where``: its name). A loop's body
        gets its ``condition``: the condition's nodes are imported again, under
        ``<frame>/next_condition/``, on the next values, and its result is the last output,
        so that an iteration is one run."""
        root = Scope(Graph())
        importer = _Importer(root, "", self.producer, self.library, self.names)
        feeds = [build_operation(root.WithOpName(name), PLACEHOLDER, [],
                                 {"dtype": value.dtype}).outputs[0]
                 for name, value in zip(placeholders, initial)]
        importer.names.update(placeholders)
        importer.import_nodes(nodes, inputs, calls)
        site = node_def(name=where)  # what errors about an output name
        results = [_through_identities(importer._output(site, *entry)) for entry in outputs]
        if condition is not None:
            for position, (start, after) in enumerate(zip(initial, results)):
                if start.dtype is not after.dtype:
                    raise InvalidArgumentError(
                        f"while loop '{shown(where)}': loop variable {position} enters "
                        f"as {start.dtype.name} ('{shown(start.name)}') and its next value "
                        f"is {after.dtype.name} ('{shown(after.name)}')")
            prefix = f"{where}/next_condition/"
            for name, value in zip(placeholders, results):
                build_operation(root.WithOpName(prefix + name), IDENTITY, [value], {})
            importer = _Importer(root, prefix, self.producer, self.library, importer.names)
            importer.import_nodes(*condition[:2], calls)
            results.append(_through_identities(importer._output(site, *condition[2])))
        self.names |= importer.names
        graph = root.graph()
        return Subgraph(graph, tuple(feeds), tuple(results),
                        tuple(graph.get_operation(name) for name in targets))

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
        inputs = {node.name: [_parse_input(text) for text in node.input]
                  for node in body.nodes}
        try:
            self.import_nodes(body.nodes, inputs, (*calls, call.name))
            results = [self._output(call.node, *_parse_input(text)) for text in body.outputs]
        except (InvalidArgumentError, NotFoundError, UnimplementedError) as exc:
            raise type(exc)(f"{exc} (in function '{call.name}', inlined at node "
                            f"'{call.node.name}')") from None
        self.library.check_results(call, results)
        caller = body.caller
        _import_node(self.root, caller,
                     *self._sources(caller, [_parse_input(t) for t in caller.input]),
                     self.prefix, self.producer)
        for index, text in enumerate(body.outputs):
            self.results[(call.node.name, index)] = text


def _nested(calls: tuple[str, ...], what: str) -> tuple[str, ...]:
    """``calls`` with ``what`` (a loop or conditional whose subgraphs are imported next)
    added; refused past :data:`MAX_CALL_DEPTH` levels."""
    if len(calls) >= MAX_CALL_DEPTH:
        raise InvalidArgumentError(f"{what}: loops, conditionals and calls nested "
                                   f"{len(calls) + 1} deep; minigraph imports at most "
                                   f"{MAX_CALL_DEPTH} levels")
    return (*calls, what)


def _through_identities(output: Output) -> Output:
    """The tensor an ``Identity`` chain (without control inputs) ending at ``output``
    passes on: a subgraph's outputs are fetched from there, so the chain's nodes need not
    run (a fetched node is kept by the graph optimizer)."""
    while output.op.type == "Identity" and not output.op.control_inputs:
        output = output.op.inputs[0]
    return output


def _import_node(root: Scope, node: Any, sources: list[Output], controls: list[Operation],
                 prefix: str, producer: int) -> None:
    try:
        op_def = get_op_def(node.op)
    except NotFoundError:
        raise NotFoundError(f"Op type not registered '{shown(node.op)}' in minigraph (node "
                            f"'{shown(node.name)}'): minigraph.ops.__all__ lists the ops it "
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
        raise InvalidArgumentError(f"Node '{shown(node.name)}' is not unique")
