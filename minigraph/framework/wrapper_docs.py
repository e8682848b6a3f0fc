"""What a generated op wrapper tells humans and tools: its signature and its help text.

``op_def.make_wrapper`` builds each ``ops.X`` class from an :class:`~op_def.OpDef`. So that
``inspect.signature(ops.X)``, ``help(ops.X)`` and IDEs show the op rather than
``(scope, *args, **kwargs)``, this module derives from the same OpDef:

* the ``inspect.Signature`` the wrapper advertises, in TF C++ order: ``scope``, the inputs,
  the required attrs, an ``attrs`` builder object, then the optional attrs as keyword-only
  parameters with their defaults (``wrapper_signature``);
* the docstring, with sections Inputs, Attrs, Outputs and Returns (``wrapper_doc``), and
  the docstrings of the ``Attrs()`` builder's setters (``setter_doc``);
* the type names the stub ``minigraph/ops/__init__.pyi`` uses (``attr_type_text``, and the
  aliases ``TensorLike``, ``DTypeLike``, ``ShapeLike`` below, importable for annotations).

Type attrs bound by an input (``T`` of ``x``) are inferred, as in TF C++, so they are left out
of the signature and the builder; the docstring lists them. Everything here is derived, so a
definition's ``doc=`` strings are the only text to write.
"""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

import numpy as np

from minigraph.framework.dtypes import DType
from minigraph.framework.graph import Output
from minigraph.framework.tensor_shape import TensorShape

if TYPE_CHECKING:
    from minigraph.framework.op_def import ArgDef, AttrDef, OpDef


class HasOutput(Protocol):
    """Anything with an ``.output`` Output (accepted wherever a tensor is)."""

    @property
    def output(self) -> Output: ...


# What an op input accepts: an Output, or a value that becomes a Const node under the op's name.
TensorLike: TypeAlias = (Output | HasOutput | np.ndarray | np.generic | bool | int | float
                         | Sequence[Any])
# What a ``type`` attr accepts (``dtypes.as_dtype``): a DType, its name, a numpy dtype or type.
DTypeLike: TypeAlias = DType | str | np.dtype | type
# What a ``shape`` attr accepts: a TensorShape, dims with None or -1 unknown, None for unknown.
ShapeLike: TypeAlias = TensorShape | Sequence[int | None] | None

DOC_WIDTH = 88  # wrapped so the stub's indented docstrings stay within the 100-column limit


# ----------------------------------------------------------------------------- attr groups


def inferred_type_attrs(op_def: OpDef) -> dict[str, str]:
    """Attrs bound by an input: its type attr, and the length attr of a list input (AddN's
    ``N``) or its list of types (IdentityN's ``T``); attr name -> the first input that binds
    it."""
    inferred: dict[str, str] = {}
    for arg in op_def.inputs:
        for attr in (arg.type_attr, arg.number_attr, arg.type_list_attr):
            if attr:
                inferred.setdefault(attr, arg.name)
    return inferred


def settable_attrs(op_def: OpDef) -> list[AttrDef]:
    """The attrs a caller gives (everything but inferred type attrs), in definition order."""
    inferred = inferred_type_attrs(op_def)
    return [a for a in op_def.attrs if a.name not in inferred]


def required_attrs(op_def: OpDef) -> list[AttrDef]:
    return [a for a in settable_attrs(op_def) if not a.has_default]


def optional_attrs(op_def: OpDef) -> list[AttrDef]:
    return [a for a in settable_attrs(op_def) if a.has_default]


# ----------------------------------------------------------------------------- value text


def format_value(value: Any) -> str:
    """An attr value or default as the docs write it: ``"NHWC"``, ``0.0001``, ``[1, 1]``,
    ``float32``, ``<unknown>`` (a shape of unknown rank)."""
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, DType):
        return value.name
    if isinstance(value, TensorShape):
        return str(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    return repr(value)


def arg_type_text(op_def: OpDef, arg: ArgDef) -> str:
    """``T (float16, bfloat16, float32)``, ``T (any type)``, a fixed dtype (``int32``), with
    ``N x`` before it for a list (``N x T (any type)``), or ``T (a list of types)``."""
    if arg.type_list_attr:
        return f"{arg.type_list_attr} (a list of types)"
    if arg.number_attr:
        return f"{arg.number_attr} x {arg_type_text(op_def, replace(arg, number_attr=None))}"
    if arg.dtype is not None:
        return arg.dtype.name
    attr = op_def.attr_def(arg.type_attr)
    allowed = "any type" if attr.allowed is None else ", ".join(d.name for d in attr.allowed)
    return f"{arg.type_attr} ({allowed})"


def attr_summary(attr: AttrDef, inferred_from: str | None = None) -> str:
    """``string, default "NHWC", one of "NHWC", "NCHW"``: kind, default, allowed values."""
    parts = [attr.kind]
    if inferred_from is not None:
        parts.append(f"inferred from input '{inferred_from}'")
    elif attr.has_default:
        parts.append(f"default {format_value(attr.default)}")
    else:
        parts.append("required")
    if attr.allowed is not None:
        parts.append("one of " + ", ".join(format_value(v) for v in attr.allowed))
    return ", ".join(parts)


def setter_doc(attr: AttrDef) -> str:
    """The docstring of the builder setter for ``attr`` (``.DataFormat(...)``)."""
    text = f"Set attr '{attr.name}' ({attr_summary(attr)})."
    return f"{text} {attr.doc}" if attr.doc else text


def attrs_class_doc(op_def: OpDef) -> str:
    """The docstring of ``<OpType>.Attrs``, the C++-style builder."""
    return textwrap.fill(f"The attrs of one {op_def.name} node, set with C++-style chained "
                         f"setters that each return a new builder; pass it after the "
                         f"positional arguments or as attrs=.", DOC_WIDTH - 8)


def attr_type_text(attr: AttrDef) -> str:
    """The annotation of an attr parameter in the stub."""
    if attr.kind == "string" and attr.allowed is not None:
        return "Literal[" + ", ".join(f'"{v}"' for v in attr.allowed) + "]"
    return {"float": "float", "int": "int", "bool": "bool", "string": "str",
            "list(int)": "Sequence[int]", "list(float)": "Sequence[float]",
            "list(type)": "Sequence[DTypeLike]",
            "list(string)": "Sequence[str]",
            "type": "DTypeLike", "shape": "ShapeLike", "tensor": "np.ndarray"}[attr.kind]


# ----------------------------------------------------------------------------- signature


def wrapper_signature(op_def: OpDef) -> inspect.Signature:
    """``(scope, <inputs>, <required attrs>, attrs=None, *, <optional attrs>=<default>)``.

    The wrapper itself takes ``(scope, *args, **kwargs)`` and sorts them out; this is what it
    accepts, for ``inspect.signature``, ``help`` and editors.
    """
    positional = inspect.Parameter.POSITIONAL_OR_KEYWORD
    params = [inspect.Parameter("scope", positional)]
    params += [inspect.Parameter(arg.name, positional) for arg in op_def.inputs]
    params += [inspect.Parameter(attr.name, positional) for attr in required_attrs(op_def)]
    params.append(inspect.Parameter("attrs", positional, default=None))
    params += [inspect.Parameter(attr.name, inspect.Parameter.KEYWORD_ONLY, default=attr.default)
               for attr in optional_attrs(op_def)]
    return inspect.Signature(params)


def with_cls(signature: inspect.Signature) -> inspect.Signature:
    """``signature`` with a leading ``cls``: the wrapper's ``__new__`` as ``help`` lists it."""
    cls = inspect.Parameter("cls", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return signature.replace(parameters=[cls, *signature.parameters.values()])


# ----------------------------------------------------------------------------- docstring


def returns_text(op_def: OpDef) -> str:
    """What the wrapper returns, by the number of outputs."""
    if len(op_def.outputs) == 1 and not op_def.outputs[0].is_list:
        return f"The Output '{op_def.outputs[0].name}'."
    if not op_def.outputs:
        return "The Operation (the op has no outputs)."
    names = ", ".join(f".{arg.name}" for arg in op_def.outputs)
    return (f"An object with the outputs as attributes ({names}), also by index and in "
            f"order when iterated, and the node as .operation.")


def _entry(head: str, text: str, hanging: bool = True) -> str:
    """One indented entry of a section; continuation lines hang under its name."""
    return textwrap.fill(f"{head}{text}", DOC_WIDTH, initial_indent="    ",
                         subsequent_indent=" " * (8 if hanging else 4), break_on_hyphens=False)


def _with_doc(summary: str, doc: str) -> str:
    return f"{summary}. {doc}" if doc else f"{summary}."


def wrapper_doc(op_def: OpDef) -> str:
    """The wrapper's docstring: summary, Inputs, Attrs, Outputs and Returns."""
    lines = [f"Builds one '{op_def.name}' node.", ""]
    if op_def.deprecation:
        lines += textwrap.wrap(f"Deprecated: {op_def.deprecation}", DOC_WIDTH) + [""]
    lines += textwrap.wrap(
        f"Inputs, then required attrs, positionally or by name; optional attrs in a "
        f"{op_def.name}.Attrs() builder (after the positional arguments) or as keywords.",
        DOC_WIDTH)
    if op_def.inputs:
        lines += ["", "Inputs:"]
        for arg in op_def.inputs:
            summary = arg_type_text(op_def, arg)
            if arg.is_ref:
                summary += ", a Variable's output, updated in place"
            lines.append(_entry(f"{arg.name}: ", _with_doc(summary, arg.doc)))
    inferred = inferred_type_attrs(op_def)
    attrs = settable_attrs(op_def) + [a for a in op_def.attrs if a.name in inferred]
    if attrs:
        lines += ["", "Attrs:"]
        for attr in attrs:
            summary = attr_summary(attr, inferred.get(attr.name))
            lines.append(_entry(f"{attr.name}: ", _with_doc(summary, attr.doc)))
    if op_def.outputs:
        lines += ["", "Outputs:"]
        for arg in op_def.outputs:
            lines.append(_entry(f"{arg.name}: ", _with_doc(arg_type_text(op_def, arg),
                                                           arg.doc)))
    lines += ["", "Returns:", _entry("", returns_text(op_def), hanging=False)]
    return "\n".join(lines)
