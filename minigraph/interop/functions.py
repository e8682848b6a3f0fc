"""Function libraries of imported GraphDefs: calls are inlined, with TensorFlow's semantics.

A GraphDef's ``library`` holds FunctionDefs (a Keras model frozen by TF 2.21 keeps one per
``jit_compile`` convolution, RegNet's and ConvNeXt's grouped ``Conv2D``). A node calls one
when its op is ``PartitionedCall`` or ``StatefulPartitionedCall`` (attr ``f`` names the
function and carries its instantiation attrs) or is the function's own name (a direct
call, whose attrs are the instantiation attrs). minigraph has no call op: the importer
replaces each call by the function's body, as TensorFlow's ``InlineFunctionBody`` does
before it runs a graph. :meth:`Library.inline` translates a body into GraphDef form:

* body nodes are named ``<call>/<node>`` (``<call>_1/<node>``... when a name is taken);
* a body input is an argument's name (``x``), an output ``node:out_arg:index`` (the op's
  OpDef turns ``out_arg`` into a position, a list output counting its length attr), or a
  control edge ``^node``; arguments become the call's inputs, by position;
* placeholder attrs (``T: placeholder "T"``) take the instantiation attr of that name (or
  the default of the signature's attr);
* the call's control inputs go to every body node that reads nothing from the body (only
  arguments, or nothing), so the whole body runs after them;
* ``Body.outputs`` are the tensors of the signature's ``ret``: consumers of ``call:i`` read
  them directly; a node named like the call (``Identity`` for one output, ``IdentityN`` for
  several, ``NoOp`` for none) reads them too and waits for the ``control_ret`` nodes, so
  ``call:i`` stays fetchable by name and ``^call`` waits for the whole call.

Calls inside a body are inlined in turn when the importer reaches them. What cannot be
honoured is refused, naming the call node and the function: a function not in the library,
recursion, a function with a gradient function in the library (minigraph would
differentiate the body instead), arguments that do not match the signature in count or
type, list arguments, a body op minigraph lacks, a malformed body.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from minigraph.framework.dtypes import DType
from minigraph.framework.errors import InvalidArgumentError, NotFoundError
from minigraph.framework.graph import Output
from minigraph.framework.op_def import get_op_def, output_args, registered_ops
from minigraph.interop import attrs
from minigraph.interop.tensors import dtype_to_enum, enum_to_dtype, tf_type_name

CALL_OPS = ("PartitionedCall", "StatefulPartitionedCall")


@dataclass(frozen=True)
class Call:
    """A node that calls a library function: the NodeDef, the FunctionDef and the
    instantiation attrs (``AttrValue`` messages by name)."""

    node: Any
    function: Any
    attrs: dict[str, Any]

    @property
    def name(self) -> str:
        """The function's name."""
        return self.function.signature.name

    def where(self) -> str:
        """The call, as messages name it."""
        kind = self.node.op if self.node.op in CALL_OPS else "direct call"
        return f"Node '{self.node.name}' (a {kind} of function '{self.name}')"

    def attr(self, name: str) -> Any | None:
        """The instantiation attr ``name``, else the default of the signature's attr."""
        if name in self.attrs:
            return self.attrs[name]
        for attr in self.function.signature.attr:
            if attr.name == name and attr.HasField("default_value"):
                return attr.default_value
        return None

    def arg_dtype(self, arg: Any, what: str) -> DType:
        """The dtype of a signature argument (input or output): fixed, or its type attr's
        instantiation value. List arguments are refused."""
        if arg.number_attr or arg.type_list_attr:
            raise InvalidArgumentError(f"{self.where()}: {what} '{arg.name}' is a list of "
                                       f"tensors, which minigraph does not inline")
        if not arg.type_attr:
            return enum_to_dtype(arg.type, f"{self.where()}: {what} '{arg.name}'")
        value = self.attr(arg.type_attr)
        if value is None or value.WhichOneof("value") != "type":
            raise InvalidArgumentError(f"{self.where()}: {what} '{arg.name}' has type attr "
                                       f"'{arg.type_attr}', which the call does not set to a "
                                       f"type")
        return enum_to_dtype(value.type, f"{self.where()}: {what} '{arg.name}'")

    def input_dtypes(self) -> list[DType]:
        return [self.arg_dtype(arg, "argument") for arg in self.function.signature.input_arg]

    def output_dtypes(self) -> list[DType]:
        return [self.arg_dtype(arg, "result") for arg in self.function.signature.output_arg]


@dataclass(frozen=True)
class Body:
    """A call's function body in GraphDef form: its nodes, the tensors of its results (in
    signature order) and the node that takes the call's name."""

    nodes: list[Any]
    outputs: list[str]
    caller: Any


def data_inputs(node: Any) -> list[str]:
    """A NodeDef's data inputs (its control inputs, ``^name``, come last)."""
    return [text for text in node.input if not text.startswith("^")]


def _type_names(dtypes: Sequence[DType]) -> str:
    return ", ".join(tf_type_name(d) for d in dtypes)


class Library:
    """A GraphDef's function library: which nodes are calls, and their bodies."""

    def __init__(self, library: Any) -> None:
        self.functions: dict[str, Any] = {}
        ops = set(registered_ops())
        for function in library.function:
            name = function.signature.name
            if name in self.functions:
                raise InvalidArgumentError(f"Cannot add function '{name}' because a different "
                                           f"function with the same name already exists.")
            if name in ops:
                raise InvalidArgumentError(f"Cannot add function '{name}' because an op with "
                                           f"the same name already exists.")
            self.functions[name] = function
        self.gradients = {g.function_name: g.gradient_func for g in library.gradient}

    def call(self, node: Any) -> Call | None:
        """The :class:`Call` a node makes, or None when it calls no function."""
        if node.op in CALL_OPS:
            if "f" not in node.attr or node.attr["f"].WhichOneof("value") != "func":
                raise InvalidArgumentError(f"Node '{node.name}': a {node.op} needs attr 'f' "
                                           f"naming the function it calls")
            name, given = node.attr["f"].func.name, dict(node.attr["f"].func.attr)
        elif node.op in self.functions:
            name = node.op
            given = {k: v for k, v in node.attr.items() if not k.startswith("_")}
        else:
            return None
        function = self.functions.get(name)
        if function is None:
            raise NotFoundError(f"Function {name} is not defined: node '{node.name}' (a "
                                f"{node.op}) calls it, but the GraphDef's library has no "
                                f"such function")
        call = Call(node, function, given)
        if name in self.gradients:
            raise InvalidArgumentError(
                f"{call.where()}: the library gives the function a gradient function "
                f"('{self.gradients[name]}'); minigraph inlines calls and would differentiate "
                f"the body instead, so it refuses the graph")
        return call

    def check_arguments(self, call: Call, sources: Sequence[Output]) -> None:
        """The call's data inputs against the signature (count, then each dtype, in TF's
        words) and a PartitionedCall's ``Tin``/``Tout`` against it."""
        expected = call.input_dtypes()
        results = call.output_dtypes()
        if len(sources) != len(expected):
            raise InvalidArgumentError(f"{call.where()}: the call has {len(sources)} inputs "
                                       f"but the function takes {len(expected)} "
                                       f"({_type_names(expected)})")
        if call.node.op in CALL_OPS:
            for attr, want in (("Tin", expected), ("Tout", results)):
                given = [enum_to_dtype(t, f"{call.where()}: attr '{attr}'")
                         for t in call.node.attr[attr].list.type]
                if given != want:
                    raise InvalidArgumentError(
                        f"{call.where()}: attr '{attr}' is [{_type_names(given)}] but the "
                        f"function's {'arguments' if attr == 'Tin' else 'results'} are "
                        f"[{_type_names(want)}]")
        for index, (source, dtype) in enumerate(zip(sources, expected)):
            if source.dtype is not dtype:
                raise InvalidArgumentError(
                    f"Input {index} of node {call.node.name} was passed "
                    f"{tf_type_name(source.dtype)} from {source.name} incompatible with "
                    f"expected {tf_type_name(dtype)}. ({call.where()}: argument "
                    f"'{call.function.signature.input_arg[index].name}')")

    def check_results(self, call: Call, results: Sequence[Output]) -> None:
        """The body's result tensors against the signature's result types."""
        for arg, result, dtype in zip(call.function.signature.output_arg, results,
                                      call.output_dtypes()):
            if result.dtype is not dtype:
                raise InvalidArgumentError(
                    f"{call.where()}: result '{arg.name}' is {tf_type_name(result.dtype)} "
                    f"('{result.name}') but the signature says {tf_type_name(dtype)}")

    def inline(self, call: Call, taken: Callable[[str], bool]) -> Body:
        """The body of ``call`` in GraphDef form (see the module docstring); ``taken`` says
        whether a node name is in use."""
        function = call.function
        signature = function.signature
        args = dict(zip((arg.name for arg in signature.input_arg), data_inputs(call.node)))
        names = [node.name for node in function.node_def]
        _check_names(call, list(args), names)
        prefix = _free_prefix(call.node.name, names, taken)
        nodes = [_instantiated(call, node, prefix) for node in function.node_def]
        positions = {body.name: self._output_positions(call, node, body)
                     for node, body in zip(nodes, function.node_def)}
        refer = _Translator(call, args, positions, prefix)
        controls = [text for text in call.node.input if text.startswith("^")]
        for node, body in zip(nodes, function.node_def):
            del node.input[:]
            node.input.extend(refer(text, body.name) for text in body.input)
            if controls and not any(refer.is_body(text) for text in body.input):
                node.input.extend(controls)
        outputs = []
        for arg in signature.output_arg:
            if arg.name not in function.ret:
                raise InvalidArgumentError(f"{call.where()}: the function has no ret for its "
                                           f"result '{arg.name}'")
            outputs.append(refer(function.ret[arg.name], f"ret {arg.name}"))
        waits = []
        for name in signature.control_output:
            target = function.control_ret.get(name)
            if target not in positions:
                raise InvalidArgumentError(f"{call.where()}: control output '{name}' names no "
                                           f"node of the body ({target!r})")
            waits.append(f"^{prefix}{target}")
        return Body(nodes, outputs, _caller(call, outputs, waits))

    def _output_positions(self, call: Call, node: Any, body: Any
                          ) -> dict[str, tuple[int, int]]:
        """(first output index, length) of each output argument of a body node: its OpDef's
        (``output_args``: a list output counts its length attr), a PartitionedCall's
        ``output`` (``Tout``), or a called function's results."""
        if node.op in CALL_OPS:
            return {"output": (0, len(node.attr["Tout"].list.type))}
        if node.op in self.functions:
            return {arg.name: (i, 1)
                    for i, arg in enumerate(self.functions[node.op].signature.output_arg)}
        try:
            op_def = get_op_def(node.op)
        except NotFoundError:
            raise NotFoundError(f"Op type not registered '{node.op}' in minigraph: {call.where()}"
                                f" has body node '{body.name}' of that type (minigraph.ops."
                                f"__all__ lists the ops it implements)") from None
        # a list output's length is an int attr (N) or a list(type) attr's length (T)
        where = f"{call.where()}: body node '{body.name}'"
        lengths = {attr.name: attrs.attr_from_proto(node.attr[attr.name], attr, where)
                   for attr in op_def.attrs
                   if attr.kind in ("int", "list(type)") and attr.name in node.attr}
        try:
            per_tensor = output_args(op_def, lengths)
        except KeyError as missing:
            raise InvalidArgumentError(f"{where} lacks attr {missing}, which says how many "
                                       f"outputs it has") from None
        positions: dict[str, tuple[int, int]] = {}
        for index, arg in enumerate(per_tensor):
            start, length = positions.get(arg.name, (index, 0))
            positions[arg.name] = (start, length + 1)
        for arg in op_def.outputs:  # an empty list output
            positions.setdefault(arg.name, (len(per_tensor), 0))
        return positions


def _check_names(call: Call, args: list[str], names: list[str]) -> None:
    """Argument and node names are one namespace, each name once (TF's rule)."""
    seen: set[str] = set()
    for name in [*args, *names]:
        if name in seen:
            raise InvalidArgumentError(f"{call.where()}: the name '{name}' is used twice in "
                                       f"the function (arguments and body nodes)")
        seen.add(name)


def _free_prefix(call_name: str, names: Sequence[str], taken: Callable[[str], bool]) -> str:
    """``<call>/``, or ``<call>_1/``... when a body name under it is already in use."""
    candidates = (f"{call_name}/" if k == 0 else f"{call_name}_{k}/" for k in itertools.count())
    return next(prefix for prefix in candidates
                if not any(taken(prefix + name) for name in names))


def _instantiated(call: Call, body: Any, prefix: str) -> Any:
    """A copy of body node ``body`` renamed under ``prefix``, its placeholder attrs
    replaced by the call's values."""
    node = type(body)()
    node.CopyFrom(body)
    node.name = prefix + body.name
    for name, value in node.attr.items():
        _substitute(call, body.name, name, value)
    return node


def _substitute(call: Call, node: str, attr: str, value: Any) -> None:
    """Replace a placeholder ``value`` (and those in a function attr's attrs) in place."""
    kind = value.WhichOneof("value")
    if kind == "placeholder":
        given = call.attr(value.placeholder)
        if given is None:
            raise InvalidArgumentError(f"{call.where()}: body node '{node}' attr '{attr}' is "
                                       f"the placeholder '{value.placeholder}', which the call "
                                       f"does not set")
        value.CopyFrom(given)
    elif kind == "func":
        for name, inner in value.func.attr.items():
            _substitute(call, node, f"{attr}.{name}", inner)


class _Translator:
    """FunctionDef-form input names to GraphDef form: arguments to the call's inputs, body
    outputs ``node:out_arg:index`` to ``<prefix>node:position``."""

    def __init__(self, call: Call, args: dict[str, str], positions: dict, prefix: str
                 ) -> None:
        self.call, self.args, self.positions, self.prefix = call, args, positions, prefix

    def is_body(self, text: str) -> bool:
        """Whether an input names a body node (data or control), not an argument (one
        namespace: ``_check_names``)."""
        return text.lstrip("^").split(":")[0] in self.positions

    def __call__(self, text: str, user: str) -> str:
        if text.startswith("^"):
            name = text[1:]
            if name in self.args:
                return "^" + self.args[name].split(":")[0]
            if name in self.positions:
                return f"^{self.prefix}{name}"
            return self._unknown(text, user)
        if text in self.args:
            return self.args[text]
        parts = text.split(":")
        if len(parts) not in (2, 3) or parts[0] not in self.positions:
            return self._unknown(text, user)
        node, arg = parts[0], parts[1]
        outputs = self.positions[node]
        if arg not in outputs or (len(parts) == 3 and not parts[2].isdigit()):
            return self._unknown(text, user, f"body node '{node}' has outputs "
                                             f"{sorted(outputs)}")
        index = int(parts[2]) if len(parts) == 3 else 0
        start, length = outputs[arg]
        if index >= length:
            return self._unknown(text, user, f"output '{arg}' of '{node}' has {length} "
                                             f"tensor(s)")
        position = start + index
        return f"{self.prefix}{node}" + (f":{position}" if position else "")

    def _unknown(self, text: str, user: str, why: str = "") -> str:
        why = f": {why}" if why else ""
        raise InvalidArgumentError(f"{self.call.where()}: '{user}' reads '{text}', which is no "
                                   f"argument, body node output or control edge of the "
                                   f"function{why}")


def _caller(call: Call, outputs: list[str], waits: list[str]) -> Any:
    """The node that takes the call's name: the results through Identity (one) or IdentityN
    (several), else a NoOp; it waits for the control outputs."""
    node = type(call.node)()
    node.name, node.device = call.node.name, call.node.device
    node.input.extend([*outputs, *waits])
    dtypes = call.output_dtypes()
    if not outputs:
        node.op = "NoOp"
    elif len(outputs) == 1:
        node.op = "Identity"
        node.attr["T"].type = dtype_to_enum(dtypes[0])
    else:
        node.op = "IdentityN"
        node.attr["T"].list.type.extend(dtype_to_enum(d) for d in dtypes)
    return node
