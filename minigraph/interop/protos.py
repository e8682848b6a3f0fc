"""TensorFlow's protobuf messages (GraphDef, NodeDef, AttrValue, TensorProto, Event...),
without TensorFlow.

The message definitions ship as a compiled ``FileDescriptorSet`` (``tf_protos.binpb``, built
from TensorFlow 2.21's ``.proto`` files by ``tools/build_tf_descriptor_set.py``). They are
loaded into a private descriptor pool on first use, so:

* only the ``protobuf`` package is needed, and no generated ``*_pb2`` code with its
  protobuf-version checks (the runtime reflection API used here is stable across 4.x-7.x);
* the classes never clash with TensorFlow's own ``tensorflow.GraphDef`` when both are loaded
  in one process (the default pool would refuse the second definition); messages cross
  between the two as bytes (``SerializeToString`` / ``ParseFromString``).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

DESCRIPTOR_SET = Path(__file__).with_name("tf_protos.binpb")


@functools.cache
def _pool() -> Any:
    from google.protobuf import descriptor_pb2, descriptor_pool

    pool = descriptor_pool.DescriptorPool()
    for file_proto in descriptor_pb2.FileDescriptorSet.FromString(
            DESCRIPTOR_SET.read_bytes()).file:
        pool.Add(file_proto)
    return pool


@functools.cache
def message_class(full_name: str) -> type:
    """The message class for ``full_name`` (``"tensorflow.GraphDef"``) from the private pool."""
    from google.protobuf import message_factory

    descriptor = _pool().FindMessageTypeByName(full_name)
    if hasattr(message_factory, "GetMessageClass"):  # protobuf >= 4.22
        return message_factory.GetMessageClass(descriptor)
    return message_factory.MessageFactory(_pool()).GetPrototype(descriptor)


def GraphDef() -> Any:
    """An empty ``tensorflow.GraphDef`` message."""
    return message_class("tensorflow.GraphDef")()


def Event() -> Any:
    """An empty ``tensorflow.Event`` message (a TensorBoard event-file record)."""
    return message_class("tensorflow.Event")()


def is_graph_def(value: Any) -> bool:
    """Whether ``value`` is a GraphDef message, ours or TensorFlow's own class."""
    descriptor = getattr(value, "DESCRIPTOR", None)
    return getattr(descriptor, "full_name", None) == "tensorflow.GraphDef"


@functools.cache
def data_type_numbers() -> dict[str, int]:
    """``tensorflow.DataType`` enum: name (``"DT_FLOAT"``) -> number."""
    enum = _pool().FindEnumTypeByName("tensorflow.DataType")
    return {value.name: value.number for value in enum.values}


def parse_text(text: str, where: str = "the text") -> Any:
    """A GraphDef from protobuf text format (a ``.pbtxt`` file), parsed with bounded memory
    and nesting (:mod:`minigraph.interop.pbtxt`); InvalidArgumentError naming ``where``."""
    from minigraph.interop import pbtxt

    return pbtxt.parse(text, GraphDef(), where)


@functools.cache
def _may_hold_maps(descriptor: Any) -> bool:
    """Whether messages of this type can hold a map field, themselves or nested."""
    seen: set[str] = set()
    stack = [descriptor]
    while stack:
        current = stack.pop()
        if current.full_name in seen:
            continue
        seen.add(current.full_name)
        for field in current.fields:
            if field.message_type is None:
                continue
            if field.message_type.GetOptions().map_entry:
                return True
            stack.append(field.message_type)
    return False


@functools.cache
def _map_fields(descriptor: Any) -> dict[int, Any]:
    """The map fields of a message type, by field number."""
    return {f.number: f for f in descriptor.fields
            if f.message_type is not None and f.message_type.GetOptions().map_entry}


def restore_map_entries(message: Any, where: str) -> None:
    """Put back the map entries the upb backend set aside, throughout ``message``.

    upb drops a map entry holding a field its entry message does not declare (an attr
    entry with a stray field 3) into the parent's unknown fields, so the attr would
    silently take its default; TensorFlow's C++ parser keeps such an entry and ignores the
    stray field. Each set-aside entry is parsed and restored; one whose key another entry
    also sets (which one wins depends on their order, which is lost) is refused.
    """
    from google.protobuf import unknown_fields

    stack = [message]
    while stack:
        current = stack.pop()
        maps = _map_fields(current.DESCRIPTOR)
        if maps:
            for unknown in unknown_fields.UnknownFieldSet(current):
                field = maps.get(unknown.field_number)
                if field is not None:
                    _restore_entry(current, field, unknown.data, where)
        for field, value in current.ListFields():
            if field.message_type is None or not _may_hold_maps(field.message_type):
                continue
            if field.number in maps:
                if field.message_type.fields_by_name["value"].message_type is not None:
                    stack.extend(value.values())
            elif hasattr(value, "ListFields"):  # one message
                stack.append(value)
            else:  # a repeated message field
                stack.extend(value)


def _restore_entry(parent: Any, field: Any, data: Any, where: str) -> None:
    from google.protobuf import message as protobuf_message

    from minigraph.framework.errors import InvalidArgumentError
    from minigraph.framework.names import shown

    if not isinstance(data, bytes):
        raise InvalidArgumentError(f"{where}: a '{field.name}' map entry of a "
                                   f"{parent.DESCRIPTOR.name} is not a message")
    try:
        entry = message_class(field.message_type.full_name).FromString(data)
    except protobuf_message.DecodeError as exc:
        raise InvalidArgumentError(f"{where}: a '{field.name}' map entry of a "
                                   f"{parent.DESCRIPTOR.name} cannot be parsed: {exc}") from None
    target = getattr(parent, field.name)
    if entry.key in target:
        owner = parent.DESCRIPTOR.name
        if "name" in parent.DESCRIPTOR.fields_by_name:  # a NodeDef: which one
            owner += f" '{shown(parent.name)}'"
        raise InvalidArgumentError(
            f"{where}: {owner} sets '{field.name}' entry "
            f"'{shown(str(entry.key))}' twice, once with a field its entry does not declare; "
            f"which one TensorFlow keeps depends on their order")
    if field.message_type.fields_by_name["value"].message_type is not None:
        target[entry.key].CopyFrom(entry.value)
    else:
        target[entry.key] = entry.value


def to_text(message: Any) -> str:
    """Protobuf text format, as TF's ``write_graph(as_text=True)`` writes it."""
    from google.protobuf import text_format

    return text_format.MessageToString(message)
