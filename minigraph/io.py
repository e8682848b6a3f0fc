"""Graph files: a documented, versioned JSON format that round-trips exactly.

``write_graph(graph, "model.json")`` writes::

    {"format": "minigraph-graph", "version": 1,
     "ops": [{"name": "bn", "type": "FusedBatchNormV3", "device": "",
              "inputs": ["x:0", "scale:0", ...], "control_inputs": ["init"],
              "attrs": {"epsilon": {"float": 0.001}, "T": {"type": "float32"},
                        "shape": {"shape": [null, 8]}, "value": {"tensor": "Const"}}}]}

in creation (topological) order, and the values of tensor attrs (Const values) in
``model.npz`` beside it (bfloat16 as uint16 bits). ``read_graph`` rebuilds the graph
through the normal op constructors, so every shape function and check runs again, and
gives the same names, attrs, edges and devices. An unknown op type or a newer format
version is a clear error.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from minigraph.framework import dtypes
from minigraph.framework.errors import InvalidArgumentError
from minigraph.framework.graph import Graph
from minigraph.framework.op_def import build_operation, build_variadic_operation, get_op_def
from minigraph.framework.scope import Scope
from minigraph.framework.tensor_shape import TensorShape

FORMAT = "minigraph-graph"
VERSION = 1
BFLOAT16_SUFFIX = "::bfloat16"


def _constants_path(path: str) -> str:
    return os.path.splitext(path)[0] + ".npz"


def _encode(name: str, value: Any, arrays: dict[str, np.ndarray], op_name: str) -> dict:
    if isinstance(value, dtypes.DType):
        return {"type": value.name}
    if isinstance(value, TensorShape):
        return {"shape": None if value.rank is None else list(value.dims)}
    if isinstance(value, np.ndarray):
        key = f"{op_name}/{name}"
        if value.dtype == dtypes.bfloat16.np_dtype:
            arrays[key + BFLOAT16_SUFFIX] = value.view(np.uint16)
        else:
            arrays[key] = value
        return {"tensor": key}
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, float):
        return {"float": value}
    if isinstance(value, str):
        return {"string": value}
    if isinstance(value, list):
        return {"list": value}
    raise InvalidArgumentError(f"write_graph: op '{op_name}' attr '{name}' has a value of "
                               f"type {type(value).__name__} that the format cannot store")


def _decode(encoded: dict, arrays: dict[str, np.ndarray]) -> Any:
    (kind, value), = encoded.items()
    if kind == "type":
        return dtypes.as_dtype(value)
    if kind == "shape":
        return TensorShape(value)
    if kind == "tensor":
        if value + BFLOAT16_SUFFIX in arrays:
            return arrays[value + BFLOAT16_SUFFIX].view(dtypes.bfloat16.np_dtype)
        return arrays[value]
    return value


def write_graph(graph: Graph | Scope, path: str | os.PathLike) -> str:
    """Write ``graph`` to ``path`` (JSON) and its constants beside it (``.npz``)."""
    graph = graph.graph() if isinstance(graph, Scope) else graph
    path = os.fspath(path)
    arrays: dict[str, np.ndarray] = {}
    ops = [{
        "name": op.name, "type": op.type, "device": op.device,
        "inputs": [i.name for i in op.inputs],
        "control_inputs": [c.name for c in op.control_inputs],
        "attrs": {k: _encode(k, v, arrays, op.name) for k, v in sorted(op.attrs.items())},
    } for op in graph.operations()]
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    np.savez(_constants_path(path), **arrays)
    with open(path, "w") as file:
        json.dump({"format": FORMAT, "version": VERSION, "ops": ops}, file, indent=1)
    return path


def read_graph(path: str | os.PathLike) -> Graph:
    """Rebuild the graph written by :func:`write_graph`."""
    path = os.fspath(path)
    with open(path) as file:
        document = json.load(file)
    if document.get("format") != FORMAT:
        raise InvalidArgumentError(f"'{path}' is not a minigraph graph file")
    if document.get("version", 0) > VERSION:
        raise InvalidArgumentError(
            f"'{path}' has graph format version {document['version']}; this minigraph reads "
            f"versions up to {VERSION}: upgrade minigraph")
    with np.load(_constants_path(path), allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    graph = Graph()
    root = Scope(graph)
    for entry in document["ops"]:
        try:
            op_def = get_op_def(entry["type"])
        except LookupError:
            raise InvalidArgumentError(
                f"'{path}': op '{entry['name']}' has type '{entry['type']}', which this "
                f"minigraph does not know") from None
        inputs = [_tensor(graph, name) for name in entry["inputs"]]
        scope = root.WithOpName(entry["name"]).WithDevice(entry["device"])
        if entry["control_inputs"]:
            scope = scope.WithControlDependencies(
                [graph.get_operation(n) for n in entry["control_inputs"]])
        attrs = {k: _decode(v, arrays) for k, v in entry["attrs"].items()}
        if len(inputs) != len(op_def.inputs):  # a list input (AddN)
            op = build_variadic_operation(scope, op_def, inputs)
        else:
            op = build_operation(scope, op_def, inputs, attrs)
        if op.name != entry["name"]:
            raise InvalidArgumentError(f"'{path}': op '{entry['name']}' was rebuilt as "
                                       f"'{op.name}' (duplicate name in the file?)")
    return graph


def _tensor(graph: Graph, name: str):
    op_name, index = name.rsplit(":", 1)
    return graph.get_operation(op_name).outputs[int(index)]
