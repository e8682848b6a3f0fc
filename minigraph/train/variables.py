"""A Variable together with its initializer, registered in the graph's "initializers"."""

from __future__ import annotations

from collections.abc import Callable

from minigraph.framework import dtypes
from minigraph.framework.dtypes import DType
from minigraph.framework.graph import Graph, Operation, Output
from minigraph.framework.scope import Scope
from minigraph.ops.state_ops import Assign, Variable

INITIALIZERS = "initializers"


def variable(scope: Scope, name: str, shape: list[int],
             initializer: Callable[[Scope, list[int], DType], Output],
             dtype: DType = dtypes.float32) -> Output:
    """``Variable`` named ``name`` plus an ``Assign`` of ``initializer(scope, shape, dtype)``.

    The Assign joins the graph's initializers; run them with
    ``session.Run({}, [], targets=global_variables_initializer(graph))``.
    """
    ref = Variable(scope.WithOpName(name), shape, dtype)
    init_scope = scope.NewSubScope(f"{name}_init")
    init = Assign(init_scope, ref, initializer(init_scope, shape, dtype))
    scope.graph().add_to_collection(INITIALIZERS, init.op)
    return ref


def global_variables_initializer(graph: Graph | Scope) -> list[Operation]:
    """Every initializer Assign registered by :func:`variable` (targets for one Run)."""
    graph = graph.graph() if isinstance(graph, Scope) else graph
    return graph.get_collection(INITIALIZERS)
