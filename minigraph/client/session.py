"""ClientSession: runs the part of a graph that some fetches need.

``Run(feeds, fetches, targets)`` prunes the graph to the operations the fetches and targets
need (a fed tensor cuts the walk), orders them topologically (creation order), and caches
that plan per (fetches, feeds, targets) key. Each step validates its inputs with the op's
shared check, then calls its kernel. Execution keeps all state local to the call, so
``Run`` may be called from several threads at once. Variables live in the session's
:class:`SessionState` and persist across calls.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from minigraph import backends
from minigraph.backends.registry import get_kernel
from minigraph.client.state import SessionState
from minigraph.framework.errors import InvalidArgumentError
from minigraph.framework.graph import Graph, Operation, Output
from minigraph.framework.op_def import RunContext
from minigraph.framework.scope import Scope


def value_inputs(op: Operation) -> list[Output | None]:
    """The op's inputs, with None for ref inputs (variables it updates but does not read)."""
    if not any(arg.is_ref for arg in op.op_def.inputs):
        return list(op.inputs)
    return [None if arg.is_ref else inp for arg, inp in zip(op.op_def.inputs, op.inputs)]


class _Step:
    """One operation of a plan, with everything looked up once."""

    __slots__ = ("op", "kernel", "validate", "context", "inputs", "stateful")

    def __init__(self, op: Operation) -> None:
        self.op = op
        self.kernel = get_kernel(op.type)
        self.stateful = op.op_def.is_stateful  # its kernel takes the session state
        self.validate = op.op_def.validate
        self.context = RunContext(op)
        self.inputs = value_inputs(op)


def _as_output(value: Any, role: str) -> Output:
    if isinstance(value, Output):
        return value
    if hasattr(value, "output") and isinstance(value.output, Output):
        return value.output
    raise InvalidArgumentError(f"ClientSession.Run: each {role} must be an Output, got "
                               f"{type(value).__name__}")


def _as_operation(value: Any) -> Operation:
    if isinstance(value, Operation):
        return value
    if isinstance(value, Output):
        return value.op
    if hasattr(value, "operation") and isinstance(value.operation, Operation):
        return value.operation
    raise InvalidArgumentError(f"ClientSession.Run: each target must be an Operation, got "
                               f"{type(value).__name__}")


def _plan(fetches: Sequence[Output], fed: frozenset[Output], targets: Sequence[Operation]
          ) -> list[_Step]:
    """The operations needed for ``fetches``/``targets``, in a topological order."""
    needed: dict[int, Operation] = {}
    stack: list[Operation] = [f.op for f in fetches if f not in fed] + list(targets)
    while stack:
        op = stack.pop()
        if op._id in needed:
            continue
        needed[op._id] = op
        stack.extend(inp.op for inp in value_inputs(op) if inp is not None and inp not in fed)
        stack.extend(op.control_inputs)
    ops = [needed[k] for k in sorted(needed)]
    unfed = [op for op in ops if op.type == "Placeholder"]
    if unfed:
        first = unfed[0]
        raise InvalidArgumentError(
            f"You must feed a value for placeholder tensor '{first.name}' with dtype "
            f"{first.attrs['dtype'].name} and shape {first.attrs['shape']}"
            + (f" (unfed placeholders: {', '.join(op.name for op in unfed)})"
               if len(unfed) > 1 else ""))
    return [_Step(op) for op in ops]


def _check_feed(output: Output, value: Any, promote_float64: bool = False) -> np.ndarray:
    expected = output.dtype.np_dtype
    if promote_float64 and output.dtype.is_floating:
        expected = np.dtype(np.float64)
        value = np.asarray(value, dtype=np.float64)
    if isinstance(value, np.ndarray):
        if value.dtype != expected:
            raise InvalidArgumentError(
                f"feed for '{output.name}' has dtype {value.dtype}, expected "
                f"{output.dtype.name}")
        array = value
    else:
        try:
            array = np.asarray(value, dtype=expected)
        except (TypeError, ValueError) as exc:
            raise InvalidArgumentError(f"feed for '{output.name}' cannot be converted to "
                                       f"{output.dtype.name}: {exc}") from None
    if not output.shape.is_compatible_with(array.shape):
        raise InvalidArgumentError(
            f"feed for '{output.name}' has shape {list(array.shape)}, which is not "
            f"compatible with the tensor's shape {output.shape}")
    return array


class ClientSession:
    """Runs graphs built in ``scope``'s graph; mirrors ``tensorflow::ClientSession``.

    ``backend`` picks the CPU math: ``"native"`` (C kernels), ``"reference"`` (numpy), or
    ``None`` for ``$MINIGRAPH_BACKEND`` / native-when-built.
    """

    def __init__(self, scope: Scope | Graph, backend: str | None = None) -> None:
        self.graph = scope.graph() if isinstance(scope, Scope) else scope
        self.math = backends.select(backend)
        self.backend = self.math.NAME
        self.promote_float64 = getattr(self.math, "FLOAT64", False)
        self.state = SessionState()
        self._plans: dict[tuple, list[_Step]] = {}
        self._lock = threading.Lock()

    def Run(self, feeds: Mapping[Any, Any] | None, fetches: Any,
            targets: Iterable[Any] | None = None) -> Any:
        """Compute ``fetches`` (an Output or a list of them) given ``feeds``.

        Returns a list of numpy arrays, or one array when ``fetches`` is a single Output.
        """
        feeds = feeds or {}
        single = not isinstance(fetches, (list, tuple))
        fetch_list = [_as_output(f, "fetch") for f in ([fetches] if single else fetches)]
        target_ops = [_as_operation(t) for t in (targets or [])]
        env: dict[Output | None, np.ndarray | None] = {None: None}  # None: a ref input
        for key, value in feeds.items():
            output = _as_output(key, "feed key")
            env[output] = _check_feed(output, value, self.promote_float64)
        for output in fetch_list + [o for o in env if o is not None]:
            if output.graph is not self.graph:
                raise InvalidArgumentError(f"'{output.name}' belongs to another graph than "
                                           f"this session's")
        plan = self._get_plan(fetch_list, frozenset(env), target_ops)
        for step in plan:
            values = [env[i] for i in step.inputs]
            if step.validate is not None:
                step.validate(step.context, values)
            results = step.kernel(step.op, values, self.state if step.stateful else self.math)
            for output, result in zip(step.op.outputs, results):
                env.setdefault(output, result)  # a fed output keeps its fed value
        results = [env[f] for f in fetch_list]
        return results[0] if single else results

    def _get_plan(self, fetches: list[Output], fed: frozenset[Output],
                  targets: list[Operation]) -> list[_Step]:
        key = (tuple(fetches), fed, tuple(targets))
        plan = self._plans.get(key)
        if plan is None:
            plan = _plan(fetches, fed, targets)
            with self._lock:
                self._plans[key] = plan
        return plan
