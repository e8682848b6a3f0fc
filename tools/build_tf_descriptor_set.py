"""Rebuild ``minigraph/interop/tf_protos.binpb``: TensorFlow's message definitions as a
compiled ``FileDescriptorSet``.

The set holds ``graph.proto`` (GraphDef), ``event.proto`` (Event) and ``summary.proto``
(Summary) with every file they import (node_def, attr_value, tensor, tensor_shape, types,
versions, function, op_def, resource_handle, full_type, graph_debug_info, histogram): about
14 KB. TensorFlow's ``.proto`` files are Apache-2.0 (https://github.com/tensorflow/tensorflow,
``tensorflow/core/framework/*.proto``, ``tensorflow/core/util/event.proto``).

It is read from the descriptors compiled into an installed TensorFlow, so it is exactly what
that TensorFlow speaks. Run with the ``oracle`` extra installed::

    python tools/build_tf_descriptor_set.py            # writes the file
    python tools/build_tf_descriptor_set.py --check    # exit 1 if the shipped file differs

The same could be done with ``protoc --include_imports --descriptor_set_out=...`` over the
``.proto`` files of a TensorFlow checkout (protoc adds no source info without
``--include_source_info``, so the bytes are the same).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

TARGET = Path(__file__).resolve().parent.parent / "minigraph" / "interop" / "tf_protos.binpb"
# the generated modules whose files (and their imports) make up the set
ROOT_MODULES = ("tensorflow.core.framework.graph_pb2", "tensorflow.core.util.event_pb2")


def descriptor_set_bytes() -> bytes:
    """The serialized FileDescriptorSet, dependencies before the files that import them."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from google.protobuf import descriptor_pb2

    files: dict[str, descriptor_pb2.FileDescriptorProto] = {}

    def add(file_descriptor) -> None:
        if file_descriptor.name in files:
            return
        for dependency in file_descriptor.dependencies:
            add(dependency)
        proto = descriptor_pb2.FileDescriptorProto()
        file_descriptor.CopyToProto(proto)
        files[file_descriptor.name] = proto

    for module in ROOT_MODULES:
        add(importlib.import_module(module).DESCRIPTOR)
    return descriptor_pb2.FileDescriptorSet(file=list(files.values())).SerializeToString(
        deterministic=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="compare with the shipped file instead of writing it")
    args = parser.parse_args()
    data = descriptor_set_bytes()
    if args.check:
        same = TARGET.read_bytes() == data
        print(f"{TARGET}: {'up to date' if same else 'DIFFERS from the installed TensorFlow'}")
        return 0 if same else 1
    TARGET.write_bytes(data)
    print(f"wrote {TARGET} ({len(data)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
