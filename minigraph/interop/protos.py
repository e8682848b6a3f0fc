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


def parse_text(text: str) -> Any:
    """A GraphDef from protobuf text format (a ``.pbtxt`` file)."""
    from google.protobuf import text_format

    return text_format.Parse(text, GraphDef())


def to_text(message: Any) -> str:
    """Protobuf text format, as TF's ``write_graph(as_text=True)`` writes it."""
    from google.protobuf import text_format

    return text_format.MessageToString(message)
