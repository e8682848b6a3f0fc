"""ClientSession: runs the part of a graph that some fetches need.

``Run(feeds, fetches, targets)`` prunes the graph to the operations the fetches and targets
need (a fed tensor cuts the walk), orders them topologically (creation order), and caches
that plan per (fetches, feeds, targets) key. Each step validates its inputs with the op's
shared check, then calls its kernel. Execution keeps all state local to the call, so
``Run`` may be called from several threads at once. Variables live in the session's
:class:`SessionState` and persist across calls.

Devices: each op is placed once, at plan time, from its scope's device string, as in
TensorFlow. ``""`` or ``/device:CPU:0`` is the host (numpy values, the session's math
backend); ``/device:GPU:N`` and ``/device:OPENCL:N`` are OpenCL devices
(``backends.opencl``), whose values stay device arrays. An op the device has no kernel for
runs on the host instead (soft placement, with a one-time notice). Where an edge crosses
devices the plan holds a transfer step, so a tensor moves once per Run and device, and
consecutive device ops never round-trip through the host. An unusable device raises
:class:`UnavailableError` naming it and the cause when the first plan needs it.
"""

from __future__ import annotations

import re
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from minigraph import backends
from minigraph.backends.registry import get_kernel
from minigraph.client.state import SessionState
from minigraph.framework.errors import InvalidArgumentError, UnavailableError
from minigraph.framework.graph import Graph, Operation, Output
from minigraph.framework.op_def import RunContext
from minigraph.framework.scope import Scope


def value_inputs(op: Operation) -> list[Output | None]:
    """The op's inputs, with None for ref inputs (variables it updates but does not read)."""
    if not any(arg.is_ref for arg in op.op_def.inputs):
        return list(op.inputs)
    return [None if arg.is_ref else inp for arg, inp in zip(op.op_def.inputs, op.inputs)]


class _HostDevice:
    """The CPU: values are numpy arrays and kernels use the session's math backend."""

    name = "/device:CPU:0"

    def __init__(self, math: Any) -> None:
        self.math = math

    def run(self, kernel: Callable, op: Operation, values: list) -> list:
        return kernel(op, values, self.math)


# Env keys: (output, device) holds the output's value on that device; None is a ref input.
_Key = tuple[Output, Any]


class _Step:
    """One operation of a plan, placed on a device, with everything looked up once."""

    __slots__ = ("op", "kernel", "validate", "context", "inputs", "outputs", "device",
                 "stateful")

    def __init__(self, op: Operation, device: Any, inputs: list[_Key | None],
                 outputs: list[_Key | None]) -> None:
        self.op = op
        self.kernel = get_kernel(op.type)
        self.stateful = op.op_def.is_stateful  # its kernel takes the session state
        self.validate = op.op_def.validate
        self.context = RunContext(op)
        self.device = device
        self.inputs = inputs
        self.outputs = outputs  # None for a fed output: it keeps its fed value

    def run(self, env: dict, session: ClientSession) -> None:
        values = [env[key] for key in self.inputs]
        if self.validate is not None:
            self.validate(self.context, values)
        if self.stateful:
            results = self.kernel(self.op, values, session.state)
        else:
            results = self.device.run(self.kernel, self.op, values)
        for key, result in zip(self.outputs, results):
            if key is not None:
                env[key] = result


class _Transfer:
    """Copies one tensor to another device, where an edge crosses devices."""

    __slots__ = ("source", "target", "copy")

    def __init__(self, source: _Key, target: _Key, copy: Callable) -> None:
        self.source, self.target, self.copy = source, target, copy

    def run(self, env: dict, session: ClientSession) -> None:
        env[self.target] = self.copy(env[self.source])


def _copier(source: Any, target: Any, host: _HostDevice) -> Callable:
    if source is host:
        return target.upload
    if target is host:
        return source.download
    return lambda value: target.upload(source.download(value))


_DEVICE_SPEC = re.compile(
    r"(?:/job:[^/]+)?(?:/replica:\d+)?(?:/task:\d+)?/?(?:device:)?([A-Za-z]+):(\d+)")
_soft_placed: set[tuple[str, str, str]] = set()
_soft_placed_lock = threading.Lock()


def parse_device(spec: str) -> tuple[str, int]:
    """``"/device:GPU:1"`` (or ``/gpu:1``, ``GPU:1``, ``/job:.../device:GPU:1``) ->
    ``("GPU", 1)``; the empty string is the CPU."""
    if not spec:
        return "CPU", 0
    match = _DEVICE_SPEC.fullmatch(spec.strip())
    kind = match.group(1).upper() if match else None
    if kind not in ("CPU", "GPU", "OPENCL"):
        raise InvalidArgumentError(f"unknown device '{spec}'; expected '/device:CPU:0', "
                                   f"'/device:GPU:N' or '/device:OPENCL:N'")
    return kind, int(match.group(2))


def _notice_soft_placement(op: Operation, device: Any, reason: str) -> None:
    key = (device.name, op.type, reason)
    with _soft_placed_lock:
        if key in _soft_placed:
            return
        _soft_placed.add(key)
    warnings.warn(f"minigraph: {device.name} has {reason} for {op.type} (first: '{op.name}'); "
                  f"running it on /device:CPU:0 (soft placement)", stacklevel=6)


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


def _plan(fetches: Sequence[Output], fed: frozenset[Output], targets: Sequence[Operation],
          place: Callable[[Operation], Any], host: _HostDevice
          ) -> tuple[list[_Step | _Transfer], list[_Key]]:
    """The steps computing ``fetches``/``targets`` (ops in a topological order, each placed
    by ``place``, with transfers where edges cross devices) and the fetches' host keys."""
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
    steps: list[_Step | _Transfer] = []
    home = {output: host for output in fed}  # where each value is produced
    present = {(output, host) for output in fed}

    def key_on(output: Output | None, device: Any) -> _Key | None:
        if output is None:
            return None
        key = (output, device)
        if key not in present:
            source = (output, home[output])
            steps.append(_Transfer(source, key, _copier(home[output], device, host)))
            present.add(key)
        return key

    for op in ops:
        device = place(op)
        inputs = [key_on(inp, device) for inp in value_inputs(op)]
        outputs = [None if out in fed else (out, device) for out in op.outputs]
        steps.append(_Step(op, device, inputs, outputs))
        for out in op.outputs:
            if out not in fed:
                home[out] = device
                present.add((out, device))
    return steps, [key_on(f, host) for f in fetches]


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
        self.state = SessionState(self.math)
        self.host = _HostDevice(self.math)
        self._devices: dict[str, Any] = {}
        self._plans: dict[tuple, tuple[list, list[_Key]]] = {}
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
        fed: dict[Output, np.ndarray] = {}
        for key, value in feeds.items():
            output = _as_output(key, "feed key")
            fed[output] = _check_feed(output, value, self.promote_float64)
        for output in fetch_list + list(fed):
            if output.graph is not self.graph:
                raise InvalidArgumentError(f"'{output.name}' belongs to another graph than "
                                           f"this session's")
        plan, fetch_keys = self._get_plan(fetch_list, frozenset(fed), target_ops)
        env: dict[_Key | None, Any] = {None: None}  # None: a ref input
        env.update(((output, self.host), value) for output, value in fed.items())
        for step in plan:
            step.run(env, self)
        results = [env[key] for key in fetch_keys]
        return results[0] if single else results

    def _get_plan(self, fetches: list[Output], fed: frozenset[Output],
                  targets: list[Operation]) -> tuple[list, list[_Key]]:
        key = (tuple(fetches), fed, tuple(targets))
        plan = self._plans.get(key)
        if plan is None:
            plan = _plan(fetches, fed, targets, self._place, self.host)
            with self._lock:
                self._plans[key] = plan
        return plan

    def _place(self, op: Operation) -> Any:
        """The device ``op`` runs on: its scope's device, or the host when that device has
        no kernel for it (soft placement). float64 evaluation runs everything on the host."""
        if not op.device or self.promote_float64:
            return self.host
        device = self._devices.get(op.device)
        if device is None:
            kind, index = parse_device(op.device)
            if kind == "CPU":
                if index != 0:
                    raise UnavailableError(f"{op.device} (op '{op.name}') is unavailable: "
                                           f"minigraph has one CPU device, /device:CPU:0")
                device = self.host
            else:
                from minigraph.backends import opencl

                device = opencl.get_device(kind, index)
            self._devices[op.device] = device
        if device is self.host:
            return device
        reason = device.unsupported(op)
        if reason is None:
            return device
        _notice_soft_placement(op, device, reason)
        return self.host
