"""Scope: where a new op goes, mirroring ``tensorflow/cc/framework/scope.h``.

A scope carries the graph, a name prefix (``a/b/``), an optional exact op name for the next
op (``WithOpName``), a device string and control dependencies. Every ``With*``/``New*``
method returns a new scope; scopes are never mutated, so they are safe to share.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from minigraph.framework.graph import Graph, Operation, Output


@dataclass(frozen=True)
class Scope:
    _graph: Graph
    _prefix: str = ""
    _op_name: str | None = None
    _device: str = ""
    _control_deps: tuple[Operation, ...] = field(default=())

    @staticmethod
    def NewRootScope() -> Scope:
        """A scope on a fresh, empty graph."""
        return Scope(Graph())

    def graph(self) -> Graph:
        return self._graph

    def NewSubScope(self, name: str) -> Scope:
        """A child scope whose ops are named ``<prefix><name>/...``; the name is made unique."""
        if not name:
            return replace(self, _op_name=None)
        unique = self._graph.unique_name(self._prefix + name)
        return replace(self, _prefix=unique + "/", _op_name=None)

    def Under(self, op_name: str) -> Scope:
        """A scope whose ops go under an existing op's full name (``op_name/...``).

        Used for the constants made from non-tensor inputs, so they sit beside their op.
        """
        return replace(self, _prefix=op_name + "/", _op_name=None)

    def WithOpName(self, name: str) -> Scope:
        """The next op built in the returned scope is named ``<prefix><name>`` (made unique)."""
        return replace(self, _op_name=name)

    def WithDevice(self, device: str) -> Scope:
        return replace(self, _device=device)

    def WithControlDependencies(self, deps: Iterable[Operation | Output] | Operation | Output
                                ) -> Scope:
        """Ops built in the returned scope run after ``deps`` (ops, or the ops of outputs)."""
        if isinstance(deps, (Operation, Output)):
            deps = [deps]
        ops = [d.op if isinstance(d, Output) else d for d in deps]
        return replace(self, _control_deps=self._control_deps + tuple(ops))

    def WithNoControlDependencies(self) -> Scope:
        return replace(self, _control_deps=())

    @property
    def device(self) -> str:
        return self._device

    @property
    def control_dependencies(self) -> tuple[Operation, ...]:
        return self._control_deps

    @property
    def name_prefix(self) -> str:
        return self._prefix

    def unique_op_name(self, default_name: str) -> str:
        """The name for a new op of type ``default_name`` built in this scope."""
        return self._graph.unique_name(self._prefix + (self._op_name or default_name))

    def __repr__(self) -> str:
        return f"<mg.Scope prefix='{self._prefix}' device='{self._device}'>"
