"""Declarative op definitions, the op registry, and the generated Python wrappers.

Each op is defined once by an :class:`OpDef`: its inputs and outputs (each typed either by a
type attr such as ``T`` or by a fixed dtype), its attrs with defaults and allowed values, a
shape function run at construction, and a run-time ``validate`` run before any kernel.
``make_wrapper`` turns an OpDef into the user-facing callable that mirrors
``tensorflow/cc/ops``: ``ops.FusedBatchNormGradV3(scope, *inputs, attrs, **keyword_attrs)``
with a ``.Attrs()`` builder whose setters use the C++ spelling (``.DataFormat("NCHW")``).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from minigraph.framework import dtypes, limits, wrapper_docs
from minigraph.framework.dtypes import DType
from minigraph.framework.errors import InvalidArgumentError, NotFoundError
from minigraph.framework.graph import Operation, Output
from minigraph.framework.scope import Scope
from minigraph.framework.tensor_shape import ShapeMismatch, TensorShape, as_shape, merge_dim

# ----------------------------------------------------------------------------- definitions


@dataclass(frozen=True)
class ArgDef:
    """An input or output: a name and either a type attr (``"T"``) or a fixed dtype.

    ``is_ref`` marks an input that names a Variable to update rather than a value to read
    (``Assign``'s ``ref``, an optimizer's ``var``): its kernel gets ``None`` there and the
    session does not run the Variable op for it. ``number_attr`` names the int attr holding
    the length of an input that is a list of tensors (TF's ``number_attr``: ``AddN``'s
    ``N``), set from the list's length by ``build_operation``; ``type_list_attr`` names the
    ``list(type)`` attr of a list of tensors of any types, one entry each (``IdentityN``'s
    ``T``). ``doc`` is one or two sentences for the wrapper's docstring and the stub
    (``wrapper_docs``).
    """

    name: str
    type_attr: str | None = None
    dtype: DType | None = None
    is_ref: bool = False
    number_attr: str | None = None
    doc: str = ""
    type_list_attr: str | None = None

    @property
    def is_list(self) -> bool:
        """Whether the argument is a list of tensors (its length set by an attr)."""
        return bool(self.number_attr or self.type_list_attr)

    def length(self, attrs: dict[str, Any]) -> int:
        """How many tensors the argument stands for in a node with ``attrs``."""
        if self.number_attr:
            return attrs[self.number_attr]
        if self.type_list_attr:
            return len(attrs[self.type_list_attr])
        return 1

    def dtype_at(self, attrs: dict[str, Any], position: int) -> DType:
        """The dtype of the argument's tensor ``position`` in a node with ``attrs``."""
        if self.dtype is not None:
            return self.dtype
        if self.type_list_attr:
            return attrs[self.type_list_attr][position]
        return attrs[self.type_attr]


@dataclass(frozen=True)
class AttrDef:
    """An attr: kind is float, int, bool, string, type, shape, tensor or a list of int,
    float, string or type; ``doc`` says what it means, for the wrapper's docstring, its
    builder setter and the stub."""

    name: str
    kind: str
    default: Any = None
    has_default: bool = True
    allowed: tuple | None = None
    check: Callable[[Any], str | None] | None = None  # returns an error text or None
    doc: str = ""


def required(name: str, kind: str, **kw: Any) -> AttrDef:
    """An attr with no default: the caller must give it."""
    return AttrDef(name, kind, has_default=False, **kw)


def finite_non_negative(value: float) -> str | None:
    """Attr check for epsilons: TF accepts negative/NaN epsilon and yields NaN; we reject it."""
    if not math.isfinite(value) or value < 0:
        return f"must be a finite number >= 0, got {value}"
    return None


@dataclass(frozen=True)
class OpDeprecation:
    """TF's OpDeprecation: the op works in GraphDefs made before producer ``version`` and is
    refused in newer ones; ``explanation`` says what replaces it."""

    version: int
    explanation: str

    def __str__(self) -> str:
        return f"It will cease to work in GraphDef version {self.version}. {self.explanation}"


@dataclass
class OpDef:
    name: str
    inputs: Sequence[ArgDef]
    outputs: Sequence[ArgDef]
    attrs: Sequence[AttrDef] = ()
    shape_fn: Callable[[InferenceContext], list[TensorShape]] | None = None
    validate: Callable[[RunContext, list[np.ndarray]], None] | None = None
    deprecation: OpDeprecation | None = None
    is_stateful: bool = False

    def attr_def(self, name: str) -> AttrDef:
        for a in self.attrs:
            if a.name == name:
                return a
        raise KeyError(name)

    def input_index(self, name: str, attrs: dict[str, Any] | None = None) -> int:
        """The position of input ``name`` among a node's flat inputs: list arguments before
        it count their tensors, so ``attrs`` (the node's) is needed after one."""
        index = 0
        for arg in self.inputs:
            if arg.name == name:
                return index
            if arg.is_list and attrs is None:
                raise ValueError(f"{self.name}: the position of input '{name}' depends on "
                                 f"the length of list input '{arg.name}': pass the attrs")
            index += arg.length(attrs or {})
        raise ValueError(f"{self.name} has no input '{name}'")

    def output_index(self, name: str) -> int:
        return [a.name for a in self.outputs].index(name)

    def ref_inputs(self, attrs: dict[str, Any]) -> list[bool]:
        """Per flat input of a node with ``attrs``: whether it is a ref input (a variable
        the op updates; a list argument's flag repeated for each of its tensors)."""
        return [arg.is_ref for arg in self.inputs for _ in range(arg.length(attrs))]


_REGISTRY: dict[str, OpDef] = {}


def register_op(op_def: OpDef) -> OpDef:
    if op_def.name in _REGISTRY:
        raise ValueError(f"op type '{op_def.name}' is already registered")
    _REGISTRY[op_def.name] = op_def
    return op_def


def get_op_def(op_type: str) -> OpDef:
    try:
        return _REGISTRY[op_type]
    except KeyError:
        raise NotFoundError(f"op type '{op_type}' is not registered") from None


def registered_ops() -> list[str]:
    return sorted(_REGISTRY)


# ----------------------------------------------------------------------------- contexts


def format_shapes(shapes: Sequence[TensorShape]) -> str:
    return ", ".join(str(s) for s in shapes)


class InferenceContext:
    """What a shape function sees: input shapes/dtypes and the node's attrs.

    Its helpers raise :class:`InvalidArgumentError` messages that name the op, the input and
    the expected versus actual value, followed by all input shapes.
    """

    def __init__(self, op_def: OpDef, name: str, inputs: Sequence[Output],
                 attrs: dict[str, Any]) -> None:
        self.op_def = op_def
        self.name = name
        self.inputs = list(inputs)
        self.input_shapes = [i.shape for i in inputs]
        self.input_dtypes = [i.dtype for i in inputs]
        self.attrs = attrs

    def error(self, message: str) -> InvalidArgumentError:
        return InvalidArgumentError(
            f"{self.op_def.name} '{self.name}': {message} (input shapes: "
            f"{format_shapes(self.input_shapes)})")

    def constant_value(self, name: str) -> Any:
        """The value of input ``name`` if it is known at construction, else None.

        Known means: the input is a Const, or the Shape of a tensor whose static shape is
        fully defined. Used to infer static shapes through Reshape, Sum axes, Fill...
        """
        return self.value_at(self.op_def.input_index(name, self.attrs))

    def value_at(self, index: int) -> Any:
        """``constant_value`` of the node's input ``index`` (a tensor of a list argument:
        ConcatOffset's ``shape[i]``)."""
        source = self.inputs[index]
        if source.op.type == "Const":
            return source.op.attrs["value"].tolist()
        if source.op.type == "Shape" and source.op.inputs[0].shape.is_fully_defined():
            return list(source.op.inputs[0].shape.dims)
        return None

    def shape_input(self, name: str, allow_unknown: bool = False) -> list[int] | None:
        """The value of input ``name`` holding a shape (Reshape's ``shape``, Fill's ``dims``),
        checked: a vector of dimensions >= 0 (or -1, unknown, where ``allow_unknown``).
        None while the value is not known."""
        self.with_rank(name, 1, " (a shape vector)")
        value = self.constant_value(name)
        if value is None:
            return None
        lowest = -1 if allow_unknown else 0
        if any(d < lowest for d in value):
            allowed = "non-negative or -1" if allow_unknown else "non-negative"
            raise self.error(f"input '{name}' must hold {allowed} dimensions, got {value}")
        return list(value)

    def axes_input(self, name: str, rank: int | None) -> list[int] | None:
        """The value of input ``name`` holding axes of a rank-``rank`` tensor (a scalar or a
        vector), each in [-rank, rank), none twice; returned in [0, rank). None while the
        value (or the rank) is not known."""
        shape = self.input_shape(name)
        if shape.rank is not None and shape.rank > 1:
            raise self.error(f"input '{name}' must be a scalar or a vector of axes, but has "
                             f"shape {shape}")
        value = self.constant_value(name)
        if value is None or rank is None:
            return None
        axes = value if isinstance(value, list) else [value]
        normalized: list[int] = []
        for axis in axes:
            if not -rank <= axis < rank:
                raise self.error(f"axis {axis} in input '{name}' is out of range for a tensor "
                                 f"of rank {rank}: expected [{-rank}, {rank})")
            if axis % rank in normalized:
                raise self.error(f"axis {axis} in input '{name}' is specified more than once")
            normalized.append(axis % rank)
        return normalized

    def input_shape(self, name: str) -> TensorShape:
        return self.input_shapes[self.op_def.input_index(name, self.attrs)]

    def with_rank(self, name: str, rank: int, why: str = "") -> TensorShape:
        shape = self.input_shape(name)
        try:
            return shape.with_rank(rank)
        except ShapeMismatch:
            raise self.error(f"Shape must be rank {rank} but is rank {shape.rank}: input "
                             f"'{name}' must be rank {rank}{why}, but has shape {shape}"
                             ) from None

    def merge_shapes(self, first: TensorShape, second: TensorShape, message: str
                     ) -> TensorShape:
        """The two shapes merged (unknown dims filled from the other), or an error with
        ``message`` (which names the inputs) when they cannot be the same shape."""
        try:
            return first.merge_with(second)
        except ShapeMismatch:
            raise self.error(message) from None

    def merge_dim(self, current: int | None, value: int | None, what: str) -> int | None:
        try:
            return merge_dim(current, value)
        except ShapeMismatch:
            raise self.error(f"{what}: expected {current}, got {value}") from None


class RunContext:
    """What a run-time check sees: the node, for error messages naming it."""

    def __init__(self, op: Operation) -> None:
        self.op = op

    def error(self, message: str) -> InvalidArgumentError:
        return InvalidArgumentError(f"{self.op.type} '{self.op.name}': {message}")


class RunShapeContext(InferenceContext):
    """The shape function's view at run time: the input shapes are the values' concrete
    shapes and every input's value is known (``constant_value`` returns it).

    Re-running the shape function that checked the static shapes at construction checks the
    data with the same rules and messages, so every op's inputs are validated before its
    kernel on any device (TF's kernels re-check in ``Compute``); ``value_inputs`` records
    which inputs' values the function read, for the session's cache key.
    """

    def __init__(self, op: Operation, values: Sequence[Any], shapes: Sequence[Any]) -> None:
        super().__init__(op.op_def, op.name, op.inputs, op.attrs)
        self.input_shapes = [as_shape(shape) for shape in shapes]
        self.values = values
        self.value_inputs: set[int] = set()

    def value_at(self, index: int) -> Any:
        self.value_inputs.add(index)
        value = self.values[index]
        if not isinstance(value, np.ndarray):  # a device array
            value = value.get()
        return value.tolist()


def run_shape_fn(op_def: OpDef, ctx: InferenceContext) -> list[TensorShape]:
    """The op's output shapes for ``ctx`` (unknown when it has no shape function); a shape
    error becomes an InvalidArgumentError naming the op and listing the input shapes."""
    if op_def.shape_fn is None:
        return [TensorShape(None)] * len(output_args(op_def, ctx.attrs))
    try:
        return op_def.shape_fn(ctx)
    except ShapeMismatch as exc:
        raise ctx.error(str(exc)) from None


# ----------------------------------------------------------------------------- building nodes


def _convert_input(scope: Scope, op_type: str, arg: ArgDef, value: Any,
                   dtype_hint: DType | None) -> Output:
    """Turn a user value (Output, numpy array, scalar, list) into an Output."""
    if isinstance(value, Output):
        return value
    if hasattr(value, "output") and isinstance(value.output, Output):
        return value.output
    if isinstance(value, Operation):
        raise InvalidArgumentError(
            f"{op_type}: input '{arg.name}' got an Operation ('{value.name}'); pass one of its "
            f"outputs instead")
    what = f"{op_type}: input '{arg.name}'"
    if isinstance(value, (np.ndarray, np.generic)):
        array = np.asarray(value)
        limits.check_feed_size(array, what)  # a 0-stride view may claim any size
    else:
        array = dtypes.python_to_array(value, dtype_hint or arg.dtype, what)
    try:
        dtypes.as_dtype(array.dtype)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"{what} has dtype {array.dtype}, which minigraph does not "
                                   f"support: {exc}") from None
    if _make_constant is None:
        raise NotFoundError("no constant op is registered (import minigraph.ops)")
    return _make_constant(scope.WithOpName(f"{arg.name}"), array)


# The op that turns an array into a tensor (``ops.Const``), registered by the ops layer: the
# framework knows no op (TF keeps this conversion, ``AsNodeOut``, beside ``Const`` too).
_make_constant: Callable[[Scope, np.ndarray], Output] | None = None


def register_constant_op(make_constant: Callable[[Scope, np.ndarray], Output]) -> None:
    """Set the function ``build_operation`` uses for inputs given as values."""
    global _make_constant
    _make_constant = make_constant


INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1


def _short_repr(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters, so an error never prints a whole array."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _int64_attr(value: Any, where: str) -> int:
    """An int attr value (TF stores them as int64): a Python or numpy integer in int64 range;
    bools, floats and strings are refused as TensorFlow refuses them."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise InvalidArgumentError(f"{where} must be an int, got {_short_repr(value)} of type "
                                   f"{type(value).__name__}")
    value = int(value)
    if not INT64_MIN <= value <= INT64_MAX:
        raise InvalidArgumentError(f"{where} must fit in int64, got {value}")
    return value


def _shape_attr(value: Any) -> TensorShape:
    """A shape attr; -1 means an unknown dimension, as in TF's C++ PartialTensorShape."""
    if value is None or isinstance(value, TensorShape):
        return as_shape(value)
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise TypeError(f"expected a list of dimensions, got {type(value).__name__}")
    dims = []
    for d in value:
        d = None if d is None else _int64_attr(d, "each dimension")
        if d is not None and d < -1:
            raise ValueError(f"dimensions must be >= -1 (-1: unknown), got {d}")
        dims.append(None if d == -1 else d)
    return TensorShape(dims)


def _check_attr(op_def: OpDef, name: str, attr: AttrDef, value: Any) -> Any:
    where = f"{op_def.name} '{name}': attr '{attr.name}'"
    kind = attr.kind
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float, np.floating,
                                                               np.integer)):
            raise InvalidArgumentError(f"{where} must be a float, got {value!r}")
        with np.errstate(over="ignore"):  # beyond float32's range: inf, for the check below
            value = float(np.float32(value))  # attrs are stored as float32, as in TF's AttrValue
    elif kind == "int":
        value = _int64_attr(value, where)
    elif kind == "bool":
        if not isinstance(value, (bool, np.bool_)):
            raise InvalidArgumentError(f"{where} must be a bool, got {value!r}")
        value = bool(value)
    elif kind == "string":
        if not isinstance(value, str):
            raise InvalidArgumentError(f"{where} must be a string, got {value!r}")
    elif kind == "list(int)":
        if isinstance(value, np.ndarray) and value.ndim == 1:
            value = value.tolist()
        if not isinstance(value, (list, tuple)):
            raise InvalidArgumentError(f"{where} must be a list of ints, got "
                                       f"{_short_repr(value)}")
        value = [_int64_attr(item, f"{where} element {i}") for i, item in enumerate(value)]
    elif kind == "list(float)":
        if isinstance(value, np.ndarray) and value.ndim == 1:
            value = value.tolist()
        if not isinstance(value, (list, tuple)) or any(
                isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer))
                for v in value):
            raise InvalidArgumentError(f"{where} must be a list of floats, got "
                                       f"{_short_repr(value)}")
        with np.errstate(over="ignore"):  # stored as float32, as in TF's AttrValue
            value = [float(np.float32(v)) for v in value]
    elif kind == "list(string)":
        if not (isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)):
            raise InvalidArgumentError(f"{where} must be a list of strings, got "
                                       f"{_short_repr(value)}")
        value = list(value)
    elif kind == "list(type)":
        if not isinstance(value, (list, tuple)):
            raise InvalidArgumentError(f"{where} must be a list of types, got "
                                       f"{_short_repr(value)}")
        try:
            value = [dtypes.as_dtype(item) for item in value]
        except (TypeError, ValueError) as exc:
            raise InvalidArgumentError(f"{where} must be a list of types: {exc}") from None
    elif kind in ("type", "shape"):
        convert = {"type": dtypes.as_dtype, "shape": _shape_attr}[kind]
        try:
            value = convert(value)
        except (TypeError, ValueError) as exc:  # InvalidArgumentError is a ValueError too
            raise InvalidArgumentError(f"{where} must be a {kind}, got {value!r}: {exc}"
                                       ) from None
    if attr.allowed is not None and value not in attr.allowed:
        allowed = ", ".join(f'"{a}"' if isinstance(a, str) else str(a) for a in attr.allowed)
        raise InvalidArgumentError(f"{where} is {value!r}, which is not in the allowed values: "
                                   f"{allowed}")
    if attr.check is not None:
        problem = attr.check(value)
        if problem:
            raise InvalidArgumentError(f"{where} {problem}")
    return value


def _resolve_types(op_def: OpDef, name: str, inputs: list[tuple[ArgDef, str, Output]],
                   attrs: dict[str, Any], explicit: set[str]) -> None:
    """Bind type attrs from the inputs ((argument, label, tensor) each), or check the inputs
    against the ones the caller gave (``explicit``); a type attr's default only applies when
    no input binds it. A ``list(type)`` attr is the list of its argument's dtypes."""
    bound_by = {a.name: "the explicit attr" for a in op_def.attrs
                if a.kind == "type" and a.name in explicit}
    type_lists: dict[str, list[DType]] = {arg.type_list_attr: [] for arg in op_def.inputs
                                          if arg.type_list_attr}
    for arg, label, value in inputs:
        if arg.type_list_attr:
            type_lists[arg.type_list_attr].append(value.dtype)
        elif arg.dtype is not None:
            if value.dtype is not arg.dtype:
                raise InvalidArgumentError(
                    f"{op_def.name} '{name}': input {label} must be {arg.dtype.name}, got "
                    f"{value.dtype.name}")
        elif arg.type_attr not in bound_by:
            attr = op_def.attr_def(arg.type_attr)
            if attr.allowed is not None and value.dtype not in attr.allowed:
                allowed = ", ".join(d.name for d in attr.allowed)
                raise InvalidArgumentError(
                    f"{op_def.name} '{name}': input {label} has dtype {value.dtype.name}, "
                    f"not in the allowed values for {arg.type_attr}: {allowed}")
            attrs[arg.type_attr] = value.dtype
            bound_by[arg.type_attr] = f"argument {label}"
        elif value.dtype is not attrs[arg.type_attr]:
            raise InvalidArgumentError(
                f"{op_def.name} '{name}': input {label} has dtype {value.dtype.name} that "
                f"does not match dtype {attrs[arg.type_attr].name} of {bound_by[arg.type_attr]}")
    for attr_name, found in type_lists.items():
        if attr_name not in explicit:
            attrs[attr_name] = _check_attr(op_def, name, op_def.attr_def(attr_name), found)
        elif attrs[attr_name] != found:
            given = ", ".join(d.name for d in attrs[attr_name])
            raise InvalidArgumentError(
                f"{op_def.name} '{name}': attr '{attr_name}' is [{given}], but the inputs have "
                f"dtypes [{', '.join(d.name for d in found)}]")


def _flat_inputs(op_def: OpDef, name: str, raw_inputs: Sequence[Any]
                 ) -> list[tuple[ArgDef, str, Any]]:
    """(argument, label, raw value) per input tensor: a list argument's value (a list or
    tuple) stands for its items, labelled ``'values'[1]``."""
    flat: list[tuple[ArgDef, str, Any]] = []
    for arg, value in zip(op_def.inputs, raw_inputs):
        if not arg.is_list:
            flat.append((arg, f"'{arg.name}'", value))
        elif isinstance(value, (list, tuple)):
            flat += [(arg, f"'{arg.name}'[{i}]", item) for i, item in enumerate(value)]
        else:
            raise InvalidArgumentError(f"{op_def.name} '{name}': input '{arg.name}' must be a "
                                       f"list of tensors, got {type(value).__name__}")
    return flat


def _dtype_hints(op_def: OpDef, flat: Sequence[tuple[ArgDef, str, Any]],
                 attrs: dict[str, Any]) -> list[DType | None]:
    """The dtype a Python scalar/list input should take: its type attr's binding, if any."""
    bound = {k: v for k, v in attrs.items() if isinstance(v, DType)}
    for arg, _, value in flat:
        if isinstance(value, Output) and arg.type_attr and arg.type_attr not in bound:
            bound[arg.type_attr] = value.dtype
        elif isinstance(value, np.ndarray) and arg.type_attr and arg.type_attr not in bound:
            try:
                bound[arg.type_attr] = dtypes.as_dtype(value.dtype)
            except InvalidArgumentError:
                pass
    return [arg.dtype or bound.get(arg.type_attr) for arg, _, _ in flat]


def _list_lengths(op_def: OpDef, name: str, raw_inputs: Sequence[Any],
                  attrs: dict[str, Any]) -> None:
    """Set each list argument's length attr (``N``) from its list, checked by the attr's own
    rule (TF's minimum); one the caller gave must agree with the list."""
    for arg, value in zip(op_def.inputs, raw_inputs):
        if not arg.number_attr:
            continue
        count = _check_attr(op_def, name, op_def.attr_def(arg.number_attr), len(value))
        if attrs.get(arg.number_attr, count) != count:
            raise InvalidArgumentError(
                f"{op_def.name} '{name}': attr '{arg.number_attr}' is "
                f"{attrs[arg.number_attr]}, but input '{arg.name}' has {count} tensors")
        attrs[arg.number_attr] = count


def _check_same_graph(scope: Scope, op_type: str, name: str, inputs: Sequence[Output],
                      labels: Sequence[str]) -> None:
    """Every input (and control input) must come from the scope's graph, as TF requires."""
    graph = scope.graph()
    for label, value in zip(labels, inputs):
        if value.graph is not graph:
            raise InvalidArgumentError(
                f"{op_type} '{name}': input {label} ('{value.name}') is from a different graph "
                f"than the scope's; all inputs of an op must come from the same graph")
    for control in scope.control_dependencies:
        if control.graph is not graph:
            raise InvalidArgumentError(
                f"{op_type} '{name}': control input '{control.name}' is from a different graph "
                f"than the scope's")


def build_operation(scope: Scope, op_def: OpDef, raw_inputs: Sequence[Any],
                    attrs: dict[str, Any]) -> Operation:
    """Create, check and add one node; raise InvalidArgumentError on anything wrong.

    ``raw_inputs`` has one entry per input argument; a list argument's entry is a list of
    tensors (ConcatV2's ``values``), which sets its length and type attrs."""
    if op_def.deprecation:  # Python's warning registry shows it once per call site
        warnings.warn(f"Op {op_def.name} is deprecated. {op_def.deprecation}", DeprecationWarning,
                      stacklevel=3)
    if len(raw_inputs) != len(op_def.inputs):
        names = ", ".join(a.name for a in op_def.inputs)
        raise InvalidArgumentError(f"{op_def.name}: expected {len(op_def.inputs)} inputs "
                                   f"({names}), got {len(raw_inputs)}")
    unknown = set(attrs) - {a.name for a in op_def.attrs}
    if unknown:
        raise InvalidArgumentError(f"{op_def.name}: unknown attr(s) {sorted(unknown)}; known: "
                                   f"{[a.name for a in op_def.attrs]}")
    name = scope.unique_op_name(op_def.name)
    flat = _flat_inputs(op_def, name, raw_inputs)
    hints = _dtype_hints(op_def, flat, attrs)
    input_scope = scope.Under(name)
    inputs = [_convert_input(input_scope, op_def.name, arg, value, hint)
              for (arg, _, value), hint in zip(flat, hints)]
    full_attrs: dict[str, Any] = {}
    for attr in op_def.attrs:
        if attr.name in attrs:
            full_attrs[attr.name] = _check_attr(op_def, name, attr, attrs[attr.name])
        elif attr.has_default:
            full_attrs[attr.name] = _check_attr(op_def, name, attr, attr.default)
    _list_lengths(op_def, name, raw_inputs, full_attrs)
    labels = [label for _, label, _ in flat]
    _check_same_graph(scope, op_def.name, name, inputs, labels)
    _resolve_types(op_def, name, [(arg, label, value) for (arg, label, _), value
                                  in zip(flat, inputs)], full_attrs, set(attrs))
    missing = [a.name for a in op_def.attrs if a.name not in full_attrs]
    if missing:
        raise InvalidArgumentError(f"{op_def.name} '{name}': missing required attr(s) {missing}")
    for arg in op_def.outputs:
        if arg.is_list:  # a list output: its length attr says how many tensors to build
            limits.check_output_count(
                arg.length(full_attrs),
                f"{op_def.name} '{name}': attr '{arg.number_attr or arg.type_list_attr}'")
    shapes = run_shape_fn(op_def, InferenceContext(op_def, name, inputs, full_attrs))
    op = Operation(scope.graph(), name, op_def, inputs, scope.control_dependencies, full_attrs,
                   scope.device, output_specs(op_def, full_attrs, shapes))
    return scope.graph().add_operation(op)


def single_output(op_def: OpDef) -> bool:
    """Whether the op has exactly one output tensor (its wrapper returns that Output)."""
    return len(op_def.outputs) == 1 and not op_def.outputs[0].is_list


def output_args(op_def: OpDef, attrs: dict[str, Any]) -> list[ArgDef]:
    """One ArgDef per output tensor: a list output (``number_attr``: Unpack's ``num``,
    ShapeN's ``N``; ``type_list_attr``: IdentityN's ``T``) stands for that many."""
    return [arg for arg in op_def.outputs for _ in range(arg.length(attrs))]


def input_args(op_def: OpDef, attrs: dict[str, Any]) -> list[ArgDef]:
    """One ArgDef per input tensor: a list input (``ConcatV2``'s ``values``) stands for as
    many as its length attr says."""
    return [arg for arg in op_def.inputs for _ in range(arg.length(attrs))]


def output_specs(op_def: OpDef, attrs: dict[str, Any], shapes: list[TensorShape]
                 ) -> list[tuple[DType, TensorShape]]:
    """(dtype, static shape) of every output tensor."""
    kinds = [arg.dtype_at(attrs, i) for arg in op_def.outputs for i in range(arg.length(attrs))]
    return list(zip(kinds, shapes))


def build_variadic_operation(scope: Scope, op_def: OpDef, raw_inputs: Sequence[Any],
                             extra_attrs: dict[str, Any] | None = None) -> Operation:
    """Build an op whose single input argument is a non-empty list of tensors of one dtype
    (``AddN``, ``Pack``): ``build_operation`` with the list as that argument; its type and
    length attrs follow from the list, ``extra_attrs`` gives the others (``Pack``'s ``axis``;
    defaults fill the rest)."""
    if not raw_inputs:
        raise InvalidArgumentError(f"{op_def.name}: needs at least one input")
    return build_operation(scope, op_def, [list(raw_inputs)], dict(extra_attrs or {}))


# ----------------------------------------------------------------------------- wrappers


def camel_case(attr_name: str) -> str:
    """``exponential_avg_factor`` -> ``ExponentialAvgFactor`` (the C++ Attrs setter name)."""
    return "".join(part.capitalize() for part in attr_name.split("_"))


def _make_attrs_class(op_def: OpDef) -> type:
    """``<OpType>.Attrs``: one setter per attr the caller gives (inferred type attrs have
    none), each documented with the attr's kind, default, allowed values and doc."""
    class Attrs:
        """Optional attrs, set with C++-style chained setters that return a new builder."""

        __slots__ = ("values",)

        def __init__(self, **values: Any) -> None:
            self.values = dict(values)

        def __repr__(self) -> str:
            return f"{op_def.name}.Attrs({self.values})"

    def make_setter(attr: AttrDef):
        def setter(self, value):
            return Attrs(**{**self.values, attr.name: value})

        setter.__name__ = camel_case(attr.name)
        setter.__qualname__ = f"{op_def.name}.Attrs.{setter.__name__}"
        setter.__doc__ = wrapper_docs.setter_doc(attr)
        return setter

    for attr in wrapper_docs.settable_attrs(op_def):
        setattr(Attrs, camel_case(attr.name), make_setter(attr))
    Attrs.__name__ = Attrs.__qualname__ = f"{op_def.name}.Attrs"
    Attrs.__doc__ = wrapper_docs.attrs_class_doc(op_def)
    return Attrs


class OpResult:
    """The value of a multi-output op wrapper: named outputs plus ``.operation``."""

    def __init__(self, operation: Operation) -> None:
        self.operation = operation
        self.outputs = list(operation.outputs)
        for arg, out in zip(output_args(operation.op_def, operation.attrs), operation.outputs):
            if arg.is_list:  # a list output: the list of its tensors
                if not hasattr(self, arg.name):
                    setattr(self, arg.name, [])
                getattr(self, arg.name).append(out)
            else:
                setattr(self, arg.name, out)

    def __getitem__(self, index: int) -> Output:
        return self.outputs[index]

    def __iter__(self):
        return iter(self.outputs)

    def __len__(self) -> int:
        return len(self.outputs)

    def __repr__(self) -> str:
        return f"<{self.operation.type} '{self.operation.name}' outputs={len(self.outputs)}>"


def make_wrapper(op_def: OpDef) -> type:
    """Generate ``ops.<OpType>``: call it like the TF C++ constructor.

    Positional arguments are the inputs, then the required attrs, then optionally an
    ``Attrs()`` object (or ``attrs=``); attrs may also be keywords. Returns the Output for
    single-output ops, the Operation for ops without outputs, and an object with named outputs
    otherwise. The class carries the ``__signature__`` and docstring ``wrapper_docs`` derives
    from the OpDef, so ``inspect.signature`` and ``help`` show the op's real arguments.
    """
    attrs_class = _make_attrs_class(op_def)
    required_attrs = [a.name for a in wrapper_docs.required_attrs(op_def)]
    n_inputs = len(op_def.inputs)
    n_positional = n_inputs + len(required_attrs)
    signature = ", ".join([a.name for a in op_def.inputs] + required_attrs)
    takes_attrs_keyword = "attrs" not in {a.name for a in op_def.attrs}

    def __new__(cls, scope: Scope, *args: Any, **kwargs: Any):
        if not isinstance(scope, Scope):
            raise InvalidArgumentError(f"{op_def.name}: the first argument must be a Scope, got "
                                       f"{type(scope).__name__}")
        args = list(args)
        attrs: dict[str, Any] = {}
        builder = None
        if args and (isinstance(args[-1], attrs_class)
                     or (len(args) == n_positional + 1 and args[-1] is None)):
            builder = args.pop()  # None in the attrs position means no Attrs() object
        elif args and type(args[-1]).__name__.endswith(".Attrs"):
            raise InvalidArgumentError(f"{op_def.name}: got {type(args[-1]).__name__}; pass "
                                       f"{op_def.name}.Attrs()")
        if takes_attrs_keyword and "attrs" in kwargs:
            if builder is not None:
                raise InvalidArgumentError(f"{op_def.name}: attrs given twice")
            builder = kwargs.pop("attrs")
            if builder is not None and not isinstance(builder, attrs_class):
                raise InvalidArgumentError(f"{op_def.name}: attrs= got "
                                           f"{type(builder).__name__}; pass "
                                           f"{op_def.name}.Attrs()")
        if builder is not None:
            attrs.update(builder.values)
        if len(args) > n_inputs + len(required_attrs):
            raise InvalidArgumentError(f"{op_def.name}({signature}): too many arguments "
                                       f"({len(args)})")
        inputs = args[:n_inputs]
        for attr_name, value in zip(required_attrs, args[n_inputs:]):
            attrs[attr_name] = value
        for key in list(kwargs):
            if key in [a.name for a in op_def.inputs]:
                if len(inputs) > [a.name for a in op_def.inputs].index(key):
                    raise InvalidArgumentError(f"{op_def.name}: input '{key}' given twice")
        named_inputs = {k: kwargs.pop(k) for k in list(kwargs)
                        if k in [a.name for a in op_def.inputs]}
        for arg in op_def.inputs[len(inputs):]:
            if arg.name not in named_inputs:
                raise InvalidArgumentError(f"{op_def.name}({signature}): missing input "
                                           f"'{arg.name}'")
            inputs.append(named_inputs[arg.name])
        attrs.update(kwargs)
        op = build_operation(scope, op_def, inputs, attrs)
        if single_output(op_def):
            return op.outputs[0]
        if not op_def.outputs:
            return op
        return OpResult(op)

    call_signature = wrapper_docs.wrapper_signature(op_def)
    __new__.__signature__ = wrapper_docs.with_cls(call_signature)
    __new__.__doc__ = f"Build one '{op_def.name}' node (see the class docstring)."
    wrapper = type(op_def.name, (), {
        "__new__": __new__,
        "Attrs": attrs_class,
        "op_def": op_def,
        "__signature__": call_signature,
        "__doc__": wrapper_docs.wrapper_doc(op_def),
        # TF C++'s static setters: ops.Placeholder.Shape([-1, 4]) is Attrs().Shape(...)
        **{name: staticmethod(_static_setter(attrs_class, name))
           for name in vars(attrs_class) if name[:1].isupper()},
    })
    return wrapper


def _static_setter(attrs_class: type, name: str) -> Callable[[Any], Any]:
    """``Op.<Setter>(value)``: a new ``Op.Attrs()`` with that one attr set."""
    def setter(value: Any) -> Any:
        return getattr(attrs_class(), name)(value)

    setter.__name__ = name
    setter.__doc__ = getattr(attrs_class, name).__doc__
    return setter
