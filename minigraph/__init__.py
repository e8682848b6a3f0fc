"""minigraph: a small dataflow-graph deep-learning framework with TensorFlow's C++ API shape.

Build a graph with :class:`Scope` and the wrappers in :mod:`minigraph.ops`, run it with
:class:`ClientSession`.
"""

import importlib

from minigraph import errors, io, ops, train, viz
from minigraph.client.options import OptimizerOptions
from minigraph.client.session import ClientSession, RunMetadata
from minigraph.framework.dtypes import (
    DType,
    as_dtype,
    bfloat16,
    float16,
    float32,
    float64,
    half,
    int32,
    int64,
)
from minigraph.framework.dtypes import bool_ as bool  # noqa: A001 (TF's name)
from minigraph.framework.gradient_registry import NotDifferentiable, RegisterGradient
from minigraph.framework.graph import Graph, Operation, Output
from minigraph.framework.scope import Scope
from minigraph.framework.tensor_shape import TensorShape
from minigraph.gradients import AddSymbolicGradients
from minigraph.optimizer import optimize
from minigraph.testing import gradient_checker

__version__ = "0.1.0"

# Submodules imported on first use (``mg.nn``, ``mg.distributed``...), so ``import minigraph``
# stays fast and never pulls in MPI or scikit-learn.
_LAZY_SUBMODULES = ("nn", "distributed", "examples", "interop", "summary")
# Functions of lazy submodules (protobuf loads with the first GraphDef, not with minigraph).
_LAZY_FUNCTIONS = {"import_graph_def": "interop", "export_graph_def": "interop"}


def __getattr__(name: str):
    if name in _LAZY_SUBMODULES:
        return importlib.import_module(f"minigraph.{name}")
    if name in _LAZY_FUNCTIONS:
        return getattr(importlib.import_module(f"minigraph.{_LAZY_FUNCTIONS[name]}"), name)
    raise AttributeError(f"module 'minigraph' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY_SUBMODULES) | set(_LAZY_FUNCTIONS))

__all__ = [
    "AddSymbolicGradients", "ClientSession", "DType", "Graph", "NotDifferentiable", "Operation",
    "OptimizerOptions", "RunMetadata", "optimize",
    "Output", "RegisterGradient", "Scope", "TensorShape", "as_dtype", "bfloat16", "bool",
    "errors", "export_graph_def", "float16", "float32", "float64", "gradient_checker", "half",
    "import_graph_def", "int32", "int64", "io", "ops", "train", "viz",
]
