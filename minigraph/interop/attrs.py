"""Conversions between TensorFlow's ``AttrValue`` messages and minigraph's attr values, by
the attr's kind in the OpDef (``type``, ``int``, ``list(int)``, ``shape``, ``tensor``...)."""

from __future__ import annotations

from typing import Any

import numpy as np

from minigraph.framework.dtypes import DType
from minigraph.framework.errors import InvalidArgumentError
from minigraph.framework.op_def import ArgDef, AttrDef, OpDef
from minigraph.framework.tensor_shape import TensorShape
from minigraph.interop import tensors

# AttrValue's oneof field for each scalar kind, and ListValue's field for each list kind
_SCALAR_FIELDS = {"string": "s", "int": "i", "float": "f", "bool": "b", "type": "type",
                  "shape": "shape", "tensor": "tensor"}
_KIND_OF_FIELD = {field: kind for kind, field in _SCALAR_FIELDS.items()}
# ListValue's fields in the order TF's AttrValueHasType checks them
_LIST_FIELDS = ("s", "i", "f", "b", "type", "shape", "tensor", "func")


def value_kind(value: Any, expected: str | None = None) -> str:
    """TF's name for the kind an AttrValue holds (``'int'``, ``'list(int)'``), as TF's
    "AttrValue had value with type 'int' when 'type' expected" names it. A list holding
    several kinds is named by its first field (in TF's order) that is not ``expected``."""
    field = value.WhichOneof("value")
    if field == "list":
        held = [f"list({_KIND_OF_FIELD.get(f, f)})" for f in _LIST_FIELDS
                if len(getattr(value.list, f))]
        others = [kind for kind in held if kind != expected]
        return (others or held or ["list"])[0]
    return _KIND_OF_FIELD.get(field, field or "<unset>")


def _kind_matches(value: Any, kind: str) -> bool:
    field = value.WhichOneof("value")
    if kind.startswith("list("):
        # every field the list holds must be of that kind; an empty list fits any list kind
        return field == "list" and value_kind(value, kind) in (kind, "list")
    return field == _SCALAR_FIELDS[kind]


def attr_from_proto(value: Any, attr: AttrDef, where: str) -> Any:
    """The minigraph value of an AttrValue for ``attr``; raises TF's message when the
    AttrValue holds another kind. Values are then checked by the op's own attr rules."""
    if not _kind_matches(value, attr.kind):
        raise InvalidArgumentError(f"AttrValue had value with type "
                                   f"'{value_kind(value, attr.kind)}' when "
                                   f"'{attr.kind}' expected\n\t for attr '{attr.name}'\n\t; "
                                   f"{where}")
    if attr.kind == "list(int)":
        return list(value.list.i)
    if attr.kind == "list(float)":
        return list(value.list.f)
    if attr.kind == "list(string)":
        try:
            return [raw.decode("utf-8") for raw in value.list.s]
        except UnicodeDecodeError:
            raise InvalidArgumentError(f"{where}: attr '{attr.name}' is not UTF-8 text"
                                       ) from None
    if attr.kind == "list(type)":
        return [tensors.enum_to_dtype(raw, f"{where}: attr '{attr.name}'")
                for raw in value.list.type]
    field = _SCALAR_FIELDS[attr.kind]
    raw = getattr(value, field)
    if attr.kind == "type":
        return tensors.enum_to_dtype(raw, f"{where}: attr '{attr.name}'")
    if attr.kind == "shape":
        return tensors.shape_from_proto(raw, f"{where}: attr '{attr.name}'")
    if attr.kind == "tensor":
        return tensors.array_from_proto(raw, f"{where}: attr '{attr.name}'")
    if attr.kind == "string":
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidArgumentError(f"{where}: attr '{attr.name}' is not UTF-8 text"
                                       ) from None
    return raw


def attr_to_proto(value: Any, kind: str, proto: Any) -> None:
    """Fill an AttrValue with a minigraph attr value of ``kind``."""
    if kind == "list(int)":
        proto.list.SetInParent()  # an empty list is still a list
        proto.list.i.extend(int(v) for v in value)
    elif kind == "list(float)":
        proto.list.SetInParent()
        proto.list.f.extend(float(v) for v in value)
    elif kind == "list(string)":
        proto.list.SetInParent()
        proto.list.s.extend(v.encode("utf-8") for v in value)
    elif kind == "list(type)":
        proto.list.SetInParent()
        proto.list.type.extend(tensors.dtype_to_enum(v) for v in value)
    elif kind == "type":
        proto.type = tensors.dtype_to_enum(value)
    elif kind == "shape":
        proto.shape.SetInParent()  # a scalar shape has no dims: still a shape
        tensors.shape_to_proto(value, proto.shape)
    elif kind == "tensor":
        tensors.array_to_proto(np.asarray(value), proto.tensor)
    elif kind == "string":
        proto.s = value.encode("utf-8")
    elif kind == "func":  # a loop's subgraph, only ever written for display (TensorBoard)
        proto.func.name = f"subgraph of {len(value.graph)} nodes"
    elif kind == "list(func)":  # a conditional's branches, likewise
        proto.list.SetInParent()
        for subgraph in value:
            proto.list.func.add().name = f"subgraph of {len(subgraph.graph)} nodes"
    else:
        setattr(proto, _SCALAR_FIELDS[kind], value)


def _default_text(attr: AttrDef) -> str:
    value = attr.default
    if isinstance(value, TensorShape):
        return "<unknown>" if value.rank is None else str(value.as_list())
    if isinstance(value, DType):
        return tensors.tf_type_name(value)
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


def _arg_type(arg: ArgDef) -> str:
    """An argument's type as TF's signatures write it: ``T``, ``float``, ``N*T``, ``T`` of
    a type list."""
    kind = arg.type_attr or arg.type_list_attr or tensors.tf_type_name(arg.dtype)
    return f"{arg.number_attr}*{kind}" if arg.number_attr else kind


def op_signature(op_def: OpDef) -> str:
    """The op's definition in TF's one-line form: ``Op<name=Identity; signature=input:T ->
    output:T; attr=T:type>``, as TF's import errors show it."""
    def args(defs) -> str:
        return ", ".join(f"{a.name}:{_arg_type(a)}" for a in defs)

    parts = [f"name={op_def.name}", f"signature={args(op_def.inputs)} -> {args(op_def.outputs)}"]
    for attr in op_def.attrs:
        text = f"attr={attr.name}:{attr.kind}"
        if attr.has_default:
            text += f",default={_default_text(attr)}"
        parts.append(text)
    return "Op<" + "; ".join(parts) + ">"
