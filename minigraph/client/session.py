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

import os
import re
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from minigraph import backends
from minigraph.backends import opencl  # pyopencl itself is imported when a device is used
from minigraph.backends.registry import Kernel, KernelContext, KernelDef, get_kernel
from minigraph.client import executor, memory, planner
from minigraph.client.options import OptimizerOptions
from minigraph.client.replay import LoopReplay, ReplayCache
from minigraph.client.state import SessionState
from minigraph.framework import dtypes
from minigraph.framework.errors import (
    InvalidArgumentError,
    ResourceExhaustedError,
    UnavailableError,
)
from minigraph.framework.graph import Graph, Operation, Output
from minigraph.framework.limits import check_allocation, check_feed_size
from minigraph.framework.names import shown
from minigraph.framework.op_def import RunContext, RunShapeContext, run_shape_fn
from minigraph.framework.scope import Scope
from minigraph.framework.tensor_shape import TensorShape
from minigraph.optimizer.meta import rewrite_for_run


def value_inputs(op: Operation) -> list[Output | None]:
    """The op's inputs, with None for ref inputs (variables it updates but does not read)."""
    if not any(arg.is_ref for arg in op.op_def.inputs):
        return list(op.inputs)
    return [None if ref else inp for ref, inp in zip(op.op_def.ref_inputs(op.attrs), op.inputs)]


class _HostDevice:
    """The CPU: values are numpy arrays; kernels are the session backend's (``native``,
    ``reference`` or ``float64``) or, where it has none, the reference's."""

    name = "/device:CPU:0"

    def __init__(self, backend: str) -> None:
        self.backend = backend

    def kernel_context(self, kernel: KernelDef, state: SessionState) -> KernelContext:
        return KernelContext(kernel.backend, backends.math_for(kernel.backend), state)

    def run(self, kernel: Kernel, op: Operation, values: list, ctx: KernelContext) -> list:
        # numpy returns scalars for 0-d results (np.maximum of 0-d arrays): every value
        # a host op produces is an ndarray, with its 0-d shape
        return [r if type(r) is np.ndarray else np.asarray(r)
                for r in kernel(op, values, ctx)]


# Env keys: (output, device) holds the output's value on that device; None is a ref input.
_Key = tuple[Output, Any]


class _Step:
    """One operation of a plan, placed on a device, with everything looked up once.

    Before the kernel runs, the op's shape function is re-run on the input values' concrete
    shapes (and values, for inputs such as a Reshape's ``shape``), then its ``validate``: a
    kernel on any device only ever sees inputs that fit each other, and outputs whose size
    this machine can hold. Verdicts are cached per input shapes (and read values).
    """

    __slots__ = ("op", "kernel_def", "kernel", "kernel_context", "validate", "context",
                 "inputs", "outputs", "device", "refs", "reads_state", "value_inputs",
                 "verdicts", "inplace", "out_dtype", "undetermined", "region", "joins")

    def __init__(self, op: Operation, device: Any, inputs: list[_Key | None],
                 outputs: list[_Key | None], state: SessionState) -> None:
        self.op = op
        self.kernel_def = get_kernel(op, device.backend)  # chosen once, at plan time
        self.kernel = self.kernel_def.kernel
        self.kernel_context = device.kernel_context(self.kernel_def, state)
        self.validate = op.op_def.validate
        self.context = RunContext(op)
        self.device = device
        self.inputs = inputs
        self.outputs = outputs  # None for a fed output: it keeps its fed value
        self.refs = [(i, inp.op.name) for i, (ref, inp) in
                     enumerate(zip(op.op_def.ref_inputs(op.attrs), op.inputs)) if ref]
        # A Variable's value is whatever was last assigned (Assign with validate_shape=False
        # may change its shape), not a function of inputs its static shape describes.
        self.reads_state = op.op_def.is_stateful and not op.inputs
        self.value_inputs: tuple[int, ...] = ()  # inputs whose values the shape function reads
        self.verdicts: dict[tuple, list[TensorShape]] = {}
        # inputs the kernel may overwrite with output 0 (set by the plan's memory planner)
        self.inplace: tuple[int, ...] = ()
        self.out_dtype = op.outputs[0].dtype.np_dtype if op.outputs else None
        # an output shape the shape function left open for concrete inputs (the kernel
        # decides it): later steps' shapes are not a function of the plan's signature
        self.undetermined = False
        # zero-copy ConcatV2 (``planner.ConcatGroup``): the (group, part) this step's output
        # 0 is written into, and the group a concat step joins
        self.region: tuple[planner.ConcatGroup, int] | None = None
        self.joins: planner.ConcatGroup | None = None

    def output_shapes(self, values: list, state: SessionState) -> list[TensorShape]:
        """The op's output shapes for these input values; raises what the shape function
        raises for inputs that do not fit, and ResourceExhaustedError for outputs beyond this
        machine's memory."""
        input_shapes = [None if v is None else v.shape for v in values]
        for index, name in self.refs:  # a variable the op updates: its current shape, or
            current = state.variables.get(name)  # the declared one before initialization
            input_shapes[index] = (self.op.inputs[index].shape if current is None
                                   else current.shape)
        key = (tuple(input_shapes), tuple(_value_key(values[i]) for i in self.value_inputs))
        shapes = self.verdicts.get(key)
        if shapes is None:
            ctx = RunShapeContext(self.op, values, input_shapes)
            shapes = run_shape_fn(self.op.op_def, ctx)
            for shape, output in zip(shapes, self.op.outputs):
                check_allocation(shape, output.dtype.itemsize,
                                 f"{self.op.type} '{self.op.name}': output {output.index}")
            if not all(shape.is_fully_defined() for shape in shapes):
                self.undetermined = True
            if ctx.value_inputs - set(self.value_inputs):  # the key missed them: next time
                self.value_inputs = tuple(sorted(ctx.value_inputs | set(self.value_inputs)))
            else:
                if len(self.verdicts) >= 64:
                    self.verdicts.clear()
                self.verdicts[key] = shapes
        return shapes

    def run(self, env: dict, session: ClientSession, checked: bool = False) -> None:
        """:meth:`execute` on the values of ``env``, storing the results there."""
        results = self.execute([env[key] for key in self.inputs], env, session, checked)
        for key, result in zip(self.outputs, results):
            if key is not None:
                env[key] = result

    def execute(self, values: list, env: dict, session: ClientSession,
                checked: bool = False) -> list:
        """Check the input ``values``, run the kernel and return its results (``env``: the
        run's environment, where a zero-copy concat keeps its output). ``checked``: the
        plan is bound to its inputs' signature and this step's checks passed for it (see
        ``planner.bind``): they are skipped."""
        if checked:
            shapes = None
        else:
            if self.validate is not None:
                self.validate(self.context, values)
            shapes = self.output_shapes(values, session.state)
        joined = None
        kernel = self.kernel
        if self.region is not None:  # its part of a concat's output
            kernel = partial(kernel, out=self.region[0].region(env, self.region[1]))
        elif self.inplace:  # an input only this run holds, dying here: the output's buffer
            out = planner.reusable(values, self.inplace, self.out_dtype)
            if out is not None:
                kernel = partial(kernel, out=out)
        elif self.joins is not None:  # the inputs already lie in place, joined
            joined = self.joins.joined(env, values)
        try:
            results = ([joined] if joined is not None else
                       self.device.run(kernel, self.op, values, self.kernel_context))
        except MemoryError as exc:
            if isinstance(exc, ResourceExhaustedError):
                raise
            raise ResourceExhaustedError(f"{self.op.type} '{self.op.name}': out of memory "
                                         f"while running its kernel ({exc})") from None
        if shapes is not None and session.check_outputs and not self.reads_state:
            _check_results(self.op, results, shapes, session.promote_float64)
        return results

    @property
    def on_host(self) -> bool:
        return isinstance(self.device, _HostDevice)


def _value_key(value: Any) -> bytes:
    """A small int tensor's value, as part of a cache key (device arrays are read back)."""
    if not isinstance(value, np.ndarray):
        value = value.get()
    return value.tobytes() + str(value.shape).encode()


def _check_results(op: Operation, results: list, shapes: list[TensorShape],
                   float64: bool) -> None:
    """A kernel's results against the op's outputs (count, dtype, shape inferred for these
    inputs): catches a kernel that drops a 0-d shape or returns another dtype."""
    if len(results) != len(op.outputs):
        raise AssertionError(f"{op.type} '{op.name}': kernel returned {len(results)} values "
                             f"for {len(op.outputs)} outputs")
    for result, output, shape in zip(results, op.outputs, shapes):
        expected = output.dtype.np_dtype
        promoted = float64 and output.dtype.is_floating and result.dtype == np.float64
        if (result.dtype != expected and not promoted
                or not shape.is_compatible_with(tuple(result.shape))):
            raise AssertionError(
                f"{op.type} '{op.name}': kernel output {output.index} is {result.dtype} "
                f"{tuple(result.shape)}, expected {expected} {shape}")


class _Plan(list):
    """The steps of one (fetches, feeds, targets) key, in order.

    ``updates_state`` is true when a step writes a variable (Assign, an optimizer update):
    such plans run one at a time per session (``SessionState.step_lock``), so a training
    step is atomic: Adam's update and its beta-power Assigns of one step are never
    interleaved with another thread's step, and no update is lost. Plans that only read
    variables run concurrently.

    Constant steps run once: a ``Const`` on the host and the ``Identity`` steps that only
    pass a constant on (a frozen TensorFlow graph reads every weight through ``Const ->
    Identity``, two thirds of its nodes). The first run runs every step; later runs start
    from the values those steps gave and run the others (``folded``).

    With the memory planner (``client/planner.py``), each value is dropped after its last
    reader (``release``, per step of the full and of the folded list) and steps whose kernel
    may write into a dying input are told which (``_Step.inplace``). A run whose signature
    (fed values' shapes and dtypes, variables' shapes) repeats that of a run in which every
    check passed runs bound (``bound``): the steps whose checks can only pass again
    (``planner.bind``) skip them; a new signature runs every check and rebinds. Sessions
    that check every kernel's output (the tests) never run bound, nor do plans with a step
    on a device (they have a ``_Transfer``: see ``bindable``).
    """

    def __init__(self, steps: list, fetch_keys: Sequence = (), fed_keys: Sequence = (),
                 memory_planner: bool = False, elementwise_groups: bool = False) -> None:
        super().__init__(steps)
        self.elementwise_groups = elementwise_groups
        self.updates_state = any(isinstance(step, _Step) and step.refs for step in steps)
        self.constant_steps = _constant_steps(steps)
        self.constant_keys = frozenset(key for step in self.constant_steps
                                       for key in step.outputs)
        self.fetch_keys = tuple(fetch_keys)
        self.memory_planner = memory_planner
        self.release = self._release(steps)
        # (constant values, the other steps, their release lists)
        self.folded: tuple[dict, list, tuple] | None = None
        self.fed_keys = tuple(fed_keys)
        self.variables = sorted({step.op.name for step in steps
                                 if isinstance(step, _Step) and step.reads_state}
                                | {name for step in steps if isinstance(step, _Step)
                                   for _, name in step.refs})
        # a variable whose shape a step may change (Assign without validate_shape): the
        # signature at the start of a run does not fix later shapes; a step on a device
        # (OpenCL): its values are device arrays, and the bound program's arena, in-place
        # and folding checks work on numpy arrays only
        self.bindable = memory_planner and not any(
            isinstance(step, _Transfer)
            or (step.op.type == "Assign" and not step.op.attrs["validate_shape"])
            for step in steps)
        self.bound: executor.BoundProgram | None = None  # the steps compiled for a signature
        self.replays = ReplayCache(carried=0, borrow=False)  # the bound program's, for Run
        self.feeds: dict[Output, Output] = {}  # each fed Output -> its key's in the plan

    def _release(self, steps: list) -> tuple[tuple, ...]:
        """What to drop after each of ``steps``; sets each step's in-place inputs."""
        if not self.memory_planner:
            return ((),) * len(steps)
        memory_plan = planner.plan_memory(steps, self.fetch_keys, self.constant_keys)
        for step, inplace in zip(steps, memory_plan.inplace):
            if inplace:
                step.inplace = inplace
        for concat, makers, group in planner.concat_groups(steps, self.fetch_keys,
                                                           self.constant_keys):
            concat.joins = group
            for index, maker in enumerate(makers):
                maker.region = (group, index)
        return memory_plan.release

    def _replayed(self, env: dict, session: ClientSession) -> bool:
        """Run the bound program's replay (``client/replay.py``) on the fed values of
        ``env``, storing copies of the fetched values there; False where there is none."""
        replay = self.replays.started(self, self.fed_keys, self.fetch_keys,
                                      [env[key] for key in self.fed_keys], session)
        if replay is None:
            return False
        try:
            env.update(zip(self.fetch_keys, [np.array(value) for value in replay.step()]))
        finally:
            replay.lock.release()
        return True

    def run(self, env: dict, session: ClientSession, metadata: RunMetadata | None,
            replay: bool = False) -> None:
        """One run of the plan; ``replay``: a session's run, which may replay the bound
        program (a loop's body replays through ``PreparedRun.replay`` instead)."""
        folded = self.folded
        if folded is None:
            steps, release = self, self.release
        else:
            env.update(folded[0])
            steps, release = folded[1], folded[2]
        signature = self._signature(env, session)
        bound = self.bound
        if (metadata is None and signature is not None and bound is not None
                and bound.signature == signature and bound.steps is steps):
            if replay and session.optimizer.replay and self._replayed(env, session):
                return
            bound.run(env, session)
            if bound.stale:  # a shape the signature did not fix changed: bind anew
                self.bound = None
            return
        if metadata is None:
            for step, dead in zip(steps, release):
                step.run(env, session)
                for key in dead:
                    env.pop(key, None)
        else:
            live = planner.LiveBytes(env, session.state.variables.values(), self.constant_keys)
            for step, dead in zip(steps, release):
                start = time.perf_counter()
                step.run(env, session)
                seconds = time.perf_counter() - start
                metadata.record(step, seconds, live.add(env, planner.step_writes(step)))
                for key in dead:
                    env.pop(key, None)
                live.drop(dead)
            metadata.peak_bytes = live.peak
            metadata.arena_bytes = 0 if bound is None else bound.arena_bytes
        if folded is None and self.constant_steps:
            values = {key: env[key] for key in self.constant_keys}
            rest = [step for step in self if step not in self.constant_steps]
            self.folded = (values, rest, self._release(rest))
        elif signature is not None and (bound is None or bound.signature != signature
                                        or bound.steps is not steps):  # every check passed
            determined = (*self.fed_keys, *self.constant_keys)
            self.bound = executor.BoundProgram(signature, steps, release,
                                               planner.bind(steps, determined,
                                                            self.constant_keys),
                                               self.fetch_keys, self.constant_keys,
                                               self.elementwise_groups)

    def _signature(self, env: dict, session: ClientSession) -> tuple | None:
        """The fed values' shapes and dtypes and the variables' shapes, or None when this
        plan or session never runs bound."""
        if not self.bindable or session.check_outputs:
            return None
        variables = session.state.variables
        try:
            shapes = tuple([variables[name].shape for name in self.variables])
        except KeyError:  # one not initialized: None in its place
            shapes = tuple(getattr(variables.get(name), "shape", None)
                           for name in self.variables)
        return tuple([(value.shape, value.dtype) for value in map(env.__getitem__,
                                                                  self.fed_keys)]), shapes


# Ops whose outputs are their inputs: of constants, they are constants too.
_PASS_THROUGHS = frozenset({"Identity", "IdentityN", "PreventGradient", "Snapshot", "StopGradient"})


def _constant_steps(steps: list) -> list:
    """The host's ``Const`` steps and the pass-through steps (``Identity``...) reading only
    their values (or another such step's): steps whose outputs are the same arrays on every
    run."""
    constant_keys: set = set()
    found = []
    for step in steps:
        if not (isinstance(step, _Step) and isinstance(step.device, _HostDevice)
                and all(key is not None for key in step.outputs)):
            continue
        if step.op.type == "Const" or (step.op.type in _PASS_THROUGHS
                                       and all(key in constant_keys for key in step.inputs)):
            found.append(step)
            constant_keys.update(step.outputs)
    return found


@dataclass(frozen=True)
class NodeStats:
    """What ran for one step of a Run: the node, where, which kernel and how long."""

    node_name: str
    op_type: str
    device: str
    kernel: str  # ``module.function`` of the kernel, or ``transfer`` between devices
    backend: str  # the backend the kernel was registered for (its math)
    seconds: float
    live_bytes: int = 0  # intermediates' bytes alive while it ran (``client/planner.py``)


@dataclass
class RunMetadata:
    """Pass one to ``Run(..., run_metadata=...)`` to learn, per step, which kernel ran each
    op, for how long and how many bytes of intermediates were alive meanwhile (TF's
    ``RunMetadata.step_stats``), and the run's ``peak_bytes`` of intermediates (values the
    run produced, views counted once; fed values, constants and variables not); timing and
    counting cost nothing otherwise."""

    step_stats: list[NodeStats] = field(default_factory=list)
    peak_bytes: int = 0  # of the last Run
    # bytes the plan keeps between runs for its bound signature (``executor.BoundProgram``'s
    # arena): not intermediates of this Run, which ``peak_bytes`` counts
    arena_bytes: int = 0

    def record(self, step: _Step | _Transfer, seconds: float,
               live_bytes: int = 0) -> None:
        if isinstance(step, _Step):
            self.step_stats.append(NodeStats(step.op.name, step.op.type, step.device.name,
                                             step.kernel_def.name, step.kernel_def.backend,
                                             seconds, live_bytes))
        else:
            self.step_stats.append(NodeStats(step.source[0].name, "transfer",
                                             step.target[1].name, "transfer", "", seconds,
                                             live_bytes))

    def kernel_of(self, node_name: str) -> str:
        """``backend:module.function`` of the kernel that ran ``node_name`` (last Run)."""
        for stats in reversed(self.step_stats):
            if stats.node_name == node_name and stats.op_type != "transfer":
                return f"{stats.backend}:{stats.kernel}"
        raise KeyError(node_name)


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
        raise InvalidArgumentError(f"unknown device '{shown(spec)}'; expected '/device:CPU:0', "
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


def _as_output(value: Any, role: str, graph: Graph) -> Output:
    """A fetch or feed key as an Output: an Output, an object with ``.output``, or a tensor
    name ``"op_name:index"`` of ``graph``."""
    if isinstance(value, Output):
        return value
    if isinstance(value, str):
        try:
            return graph.get_tensor_by_name(value)
        except (KeyError, ValueError) as exc:
            raise InvalidArgumentError(f"ClientSession.Run: {role} {value!r}: "
                                       f"{exc.args[0]}") from None
    if hasattr(value, "output") and isinstance(value.output, Output):
        return value.output
    if isinstance(value, Operation):
        raise InvalidArgumentError(
            f"ClientSession.Run: each {role} must be an Output, got the Operation "
            f"'{value.name}'; to run an op for its effect, pass it in targets=[...]")
    raise InvalidArgumentError(f"ClientSession.Run: each {role} must be an Output or a "
                               f"tensor name, got {type(value).__name__}")


def _as_operation(value: Any, graph: Graph) -> Operation:
    """A target as an Operation: an Operation, an Output's op, or an op name of ``graph``."""
    if isinstance(value, Operation):
        return value
    if isinstance(value, str):
        try:
            return graph.get_operation(value)
        except KeyError as exc:
            raise InvalidArgumentError(f"ClientSession.Run: target {value!r}: "
                                       f"{exc.args[0]}") from None
    if isinstance(value, Output):
        return value.op
    if hasattr(value, "operation") and isinstance(value.operation, Operation):
        return value.operation
    raise InvalidArgumentError(f"ClientSession.Run: each target must be an Operation or an "
                               f"op name, got {type(value).__name__}")


def _plan(fetches: Sequence[Output], fed: frozenset[Output], targets: Sequence[Operation],
          place: Callable[[Operation], Any], host: _HostDevice, state: SessionState,
          memory_planner: bool = True, elementwise_groups: bool = True
          ) -> tuple[_Plan, list[_Key]]:
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
        # a control edge from a fed op is satisfied by the feed (TF moves it onto the feed)
        stack.extend(c for c in op.control_inputs if not any(o in fed for o in c.outputs))
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
        steps.append(_Step(op, device, inputs, outputs, state))
        for out in op.outputs:
            if out not in fed:
                home[out] = device
                present.add((out, device))
    fetch_keys = [key_on(f, host) for f in fetches]
    fed_keys = [(output, host) for output in sorted(fed, key=lambda output: output.name)]
    return _Plan(steps, fetch_keys, fed_keys, memory_planner, elementwise_groups), fetch_keys


def _check_feed(output: Output, value: Any, promote_float64: bool = False) -> np.ndarray:
    """The fed value as an array of the placeholder's dtype, under one rule: numpy values
    must already have that dtype; Python values must convert to it without loss (see
    ``dtypes.python_to_array``). Misaligned arrays are copied once, so kernels only ever see
    aligned data; arrays beyond this machine's memory are refused."""
    what = f"feed for '{output.name}'"
    if isinstance(value, (np.ndarray, np.generic)):
        array = np.asarray(value)
        promoted = promote_float64 and output.dtype.is_floating and array.dtype.kind == "f"
        if array.dtype != output.dtype.np_dtype and not promoted:
            raise InvalidArgumentError(
                f"{what} has dtype {array.dtype}, expected {output.dtype.name} (cast it "
                f"first: minigraph never converts a fed array)")
    else:
        array = dtypes.python_to_array(value, output.dtype, what)
    if not output.shape.is_compatible_with(array.shape):
        raise InvalidArgumentError(
            f"{what} has shape {list(array.shape)}, which is not compatible with the "
            f"tensor's shape {output.shape}")
    check_feed_size(array, what)
    if not array.flags.aligned:
        array = array.copy()
    if promote_float64 and output.dtype.is_floating:
        array = array.astype(np.float64)
    return array


_NO_FETCHES: Any = object()  # Run(fetches) without feeds


class ClientSession:
    """Runs graphs built in ``scope``'s graph; mirrors ``tensorflow::ClientSession``.

    ``backend`` picks the CPU math: ``"native"`` (C kernels), ``"reference"`` (numpy), or
    ``None`` for ``$MINIGRAPH_BACKEND`` / native-when-built. ``optimizer`` switches the
    plan-time rewrites (:class:`OptimizerOptions`; default: all on, unless
    ``$MINIGRAPH_OPTIMIZER=off``).
    """

    def __init__(self, scope: Scope | Graph, backend: str | None = None,
                 check_outputs: bool | None = None,
                 optimizer: OptimizerOptions | None = None) -> None:
        if optimizer is not None and not isinstance(optimizer, OptimizerOptions):
            raise InvalidArgumentError(f"ClientSession: optimizer must be an "
                                       f"OptimizerOptions, got {type(optimizer).__name__}")
        self.optimizer = optimizer or OptimizerOptions.from_environment()
        self.graph = scope.graph() if isinstance(scope, Scope) else scope
        self.backend = backends.select(backend)
        memory.keep_freed_memory()
        self.promote_float64 = self.backend == "float64"  # a session mode: feeds promoted
        # Check every kernel result against its op's outputs (dtype, shape): the test suite
        # turns this on (MINIGRAPH_CHECK_OUTPUTS=1); it costs a little per op.
        self.check_outputs = (os.environ.get("MINIGRAPH_CHECK_OUTPUTS") == "1"
                              if check_outputs is None else bool(check_outputs))
        self.state = SessionState(self.optimizer, self.check_outputs)
        self.host = _HostDevice(self.backend)
        self._devices: dict[str, Any] = {}
        self._plans: dict[tuple, tuple[_Plan, list[_Key]]] = {}
        self._lock = threading.Lock()

    def Run(self, feeds: Mapping[Any, Any] | None, fetches: Any = _NO_FETCHES,
            targets: Iterable[Any] | None = None,
            run_metadata: RunMetadata | None = None) -> Any:
        """Compute ``fetches`` (an Output or a list of them) given ``feeds``.

        ``Run(fetches)`` alone works too (TF C++'s overload without inputs). Feed keys and
        fetches may be Outputs or tensor names (``"x:0"``). Returns a list of numpy arrays,
        or one array when ``fetches`` is a single Output. ``run_metadata`` (a
        :class:`RunMetadata`) receives, per step, the kernel that ran and its time.
        """
        if fetches is _NO_FETCHES:
            if isinstance(feeds, Mapping):
                raise InvalidArgumentError("ClientSession.Run: got feeds but no fetches; "
                                           "call Run(feeds, fetches) or Run(fetches)")
            feeds, fetches = None, feeds
        feeds = feeds or {}
        single = not isinstance(fetches, (list, tuple))
        fetch_list = [_as_output(f, "fetch", self.graph)
                      for f in ([fetches] if single else fetches)]
        target_ops = [t if type(t) is Operation else _as_operation(t, self.graph)
                      for t in (targets or [])]
        fed: dict[Output, np.ndarray] = {}
        for key, value in feeds.items():
            output = _as_output(key, "feed key", self.graph)
            fed[output] = _check_feed(output, value, self.promote_float64)
        for output in fetch_list + list(fed):
            if output.graph is not self.graph:
                raise InvalidArgumentError(f"'{output.name}' belongs to another graph than "
                                           f"this session's")
        plan, fetch_keys = self._get_plan(fetch_list, frozenset(fed), target_ops)
        env: dict[_Key | None, Any] = {None: None}  # None: a ref input
        env.update(((plan.feeds[output], self.host), value) for output, value in fed.items())
        if plan.updates_state:  # one training step at a time: see ``_Plan``
            with self.state.step_lock:
                plan.run(env, self, run_metadata, replay=True)
        else:
            plan.run(env, self, run_metadata, replay=True)
        results = [env[key] for key in fetch_keys]
        return results[0] if single else results

    def prepared(self, feeds: Sequence[Output], fetches: Sequence[Output],
                 targets: Sequence[Operation] = ()) -> PreparedRun:
        """The :class:`PreparedRun` of ``fetches`` and ``targets`` given ``feeds``."""
        plan, fetch_keys = self._get_plan(list(fetches), frozenset(feeds), list(targets))
        return PreparedRun(self, plan, [(plan.feeds[output], self.host) for output in feeds],
                           fetch_keys)

    def _get_plan(self, fetches: list[Output], fed: frozenset[Output],
                  targets: list[Operation]) -> tuple[_Plan, list[_Key]]:
        key = (tuple(fetches), fed, tuple(targets))
        plan = self._plans.get(key)
        if plan is None:
            run = rewrite_for_run(self.graph, fetches, fed, targets, self.optimizer)
            plan = _plan(run.fetches, frozenset(run.feeds.values()), run.targets, self._place,
                         self.host, self.state, self.optimizer.memory_planner,
                         self.optimizer.elementwise_groups)
            plan[0].feeds = run.feeds
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
                device = opencl.get_device(kind, index)
            self._devices[op.device] = device
        if device is self.host:
            return device
        reason = device.unsupported(op)
        if reason is None:
            return device
        _notice_soft_placement(op, device, reason)
        return self.host


class PreparedRun:
    """A function of the values of a session's ``feeds`` (in order) that runs one plan and
    returns the fetched values: ``Run`` without its per-call conversions and checks of the
    feeds, for values minigraph's own kernels made, each already of its placeholder's dtype
    (a loop's variables between iterations, ``client/loops.py``). Where the fetches start
    with one next value per feed (a loop's body), :meth:`replay` gives the plan's bound
    program replayed over fixed buffers (``client/replay.py``)."""

    def __init__(self, session: ClientSession, plan: _Plan, keys: list, fetch_keys: list
                 ) -> None:
        self.session, self.plan, self.keys, self.fetch_keys = session, plan, keys, fetch_keys
        self._replays = ReplayCache(carried=len(keys), borrow=True)

    def __call__(self, values: Sequence[Any]) -> list:
        env: dict[_Key | None, Any] = {None: None}
        env.update(zip(self.keys, values))
        self.plan.run(env, self.session, None)
        return [env[key] for key in self.fetch_keys]

    def replay(self, values: Sequence[Any]) -> LoopReplay | None:
        """The replay of the plan's bound program (every feed a loop variable whose next
        value is the fetch of its position), started on ``values`` and held by the caller
        (who releases its ``lock``); None where there is none (see
        :meth:`ReplayCache.started`) or the session's options turn replays off."""
        if not self.session.optimizer.replay:
            return None
        return self._replays.started(self.plan, self.keys, self.fetch_keys, values,
                                     self.session)
