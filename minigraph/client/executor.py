"""The bound program: a plan's steps compiled, once per input signature, into a flat loop.

A plan whose signature (fed shapes and dtypes, variables' shapes) repeats that of a run in
which every check passed runs bound (``session._Plan``). Its steps are compiled here into
tuples holding everything a step needs, so that the loop does no lookup a previous run
already did:

* every environment key becomes a register (an index into one list per run): inputs,
  outputs and the keys to drop after the step (``planner.MemoryPlan.release``) are tuples of
  ints, so the loop reads no dict and hashes no key;
* a host step whose checks can only pass again (``planner.bind``) calls its kernel directly,
  with ``out=`` where its kernel takes one: a dying input only the run holds
  (``planner.reusable``, as unbound runs do) or else its buffer of the plan's arena
  (:class:`planner.Arena`);
* every other step (a check to run, a zero-copy concat) runs as unbound runs run it
  (``_Step.execute``), so what is new is checked as always; where a step's shapes depend
  on data (``planner.GUARD``), its results' shapes are compared with the first run's, and
  the rest of a run where they differ runs with every check (the plan then binds anew).
  Plans with a step on a device (an OpenCL ``_Transfer``) never run bound
  (``session._Plan.bindable``).

The first bound run of a signature also observes each arena candidate's result (shape,
dtype, which later values are views of it) and plans the arena from it
(:func:`planner.plan_arena`); later runs hand those buffers to the kernels. Three kinds of
steps do nothing a later run needs to repeat, and the steady loop (``program``) leaves
them out:

* **values the signature fixes** (``planner.Binding.fixed``): a host step of a stateless
  op whose inputs are all constants or such values (``Shape`` of a fed batch, the mean
  gradient's ``1/N`` broadcast to it, ``OnesLike`` of the loss) gives the same bits on
  every run of the signature; its results, observed in the first bound run (by the
  session's own kernels: no other rounding), are kept, read-only, and set in the
  registers at the start of each run (at most ``FOLD_BYTES`` a value; never a fetched
  one, so a Run still returns a fresh array);
* **variable reads** that no earlier step of the plan writes (a training step reads its
  weights before its updates): the value the step would read is the one at the start of
  the run, so the registers take it from the session state there (a missing variable
  runs the whole run with every check: the ``Variable`` step raises in its place);
* **``NoOp`` steps** (an optimizer's group of updates): nothing to run. Fetched values
are returned as the kernels produced them: an arena buffer is only handed to a kernel when
nothing but the arena holds it (a reference count, like ``planner.reusable``), so an array
a Run returned, or a view of one, is never overwritten by a later Run.

All per-run state (the registers, the concat regions) is local to ``run``: bound programs
run concurrently from several threads as unbound plans do (the first bound run observes
and plans under a lock; other threads wait for it, then run the loop).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Sequence
from functools import partial
from typing import Any

import numpy as np

from minigraph.backends.state_kernels import variable as variable_kernel
from minigraph.client import elementwise_groups, planner
from minigraph.framework.errors import ResourceExhaustedError

# entry kinds
_DIRECT = 0  # kernel(op, values, ctx)
_OUT = 1  # kernel(op, values, ctx, out=...): in place or into the arena
_GENERIC = 2  # step.execute(values, scratch, session, checked)
_GUARD = 3  # _GENERIC, then its results' shapes must be those of the first run

_NONE, _TRASH = 0, 1  # registers: a ref input's None; where a fed output's result goes
# the largest value a bound program keeps from one run to the next as fixed by the signature
FOLD_BYTES = 1 << 16


class BoundProgram:
    """``steps`` (with their release lists and ``planner.bind`` verdicts) compiled for one
    signature; ``fetch_keys`` are copied back into the run's environment."""

    def __init__(self, signature: tuple, steps: Sequence, release: Sequence,
                 binding: planner.Binding, fetch_keys: Sequence,
                 constant_keys: Iterable = (), elementwise_groups: bool = False) -> None:
        self.signature = signature
        self.elementwise_groups = elementwise_groups
        self.steps = steps
        checked = binding.checks
        registers: dict = {}

        def register(key: Any) -> int:
            if key is None:
                return _NONE
            index = registers.get(key)
            if index is None:
                index = registers[key] = len(registers) + 2
            return index

        written = {key for step in steps for key in planner.step_writes(step)}
        outside = dict.fromkeys(key for step in steps for key in planner.step_reads(step)
                                if key not in written)  # fed values, folded constants
        self.preset = tuple((register(key), key) for key in outside)
        self.entries: list[tuple] = []
        self.candidates: list[int] = []  # entries that may take an arena buffer
        self.probes: list[int] = []  # entries to check once: is their validate shape-only?
        for index, (step, dead, flag) in enumerate(zip(steps, release, checked)):
            ins = tuple(register(key) for key in step.inputs)
            outs = tuple(_TRASH if key is None else register(key) for key in step.outputs)
            drop = tuple(register(key) for key in dead)
            if flag == planner.GUARD:  # its expected shapes: from the first run
                entry = (_GUARD, partial(step.execute, checked=False), step.op, None, ins,
                         outs, drop, None)
            elif (flag == planner.CHECK or not step.on_host or step.region is not None
                  or step.joins is not None):  # as unbound runs run it
                entry = (_GENERIC, partial(step.execute, checked=flag == planner.SKIP),
                         step.op, None, ins, outs, drop, step)
            elif flag == planner.PROBE:
                self.probes.append(index)
                entry = (_GENERIC, partial(step.execute, checked=False), step.op, None, ins,
                         outs, drop, step)
            else:
                entry = self._direct(index, step, ins, outs, drop)
            self.entries.append(entry)
        self.size = len(registers) + 2
        self.fetches = tuple((register(key), key) for key in fetch_keys
                             if key in registers)
        # entries whose results the signature fixes (kept if small: ``_fold``)
        self.foldable = _foldable(steps, binding.fixed, set(constant_keys), set(fetch_keys))
        self.constants = frozenset(registers[key] for key in constant_keys
                                   if key in registers)
        self.reads = _early_reads(steps)  # entry index -> variable name
        self.folded: tuple = ()  # (register, value) of each value the signature fixes
        self.preloads: tuple = ()  # (register, variable name) read at the start of a run
        self.program: list[tuple] = self.entries  # the steady loop's entries
        self.positions: dict[int, int] = {}  # id of a program entry -> its index in entries
        self.arena: planner.Arena | None = None  # planned by the first run
        # a guard failed: the plan must rebind (``session._Plan`` drops this program)
        self.stale = False
        self._planning = threading.Lock()

    def _direct(self, index: int, step: Any, ins: tuple, outs: tuple, drop: tuple) -> tuple:
        """The entry calling ``step``'s kernel itself (with ``out=`` where it takes one), or
        the kernel's bound variant made for this entry (``KernelDef.bound``)."""
        bound = step.kernel_def.bound
        kernel = step.kernel if bound is None else bound(step.op)
        if step.kernel_def.takes_out:
            self.candidates.append(index)
            return (_OUT, kernel, step.op, step.kernel_context, ins, outs, drop,
                    (step.inplace, step.out_dtype, -1))
        return (_DIRECT, kernel, step.op, step.kernel_context, ins, outs, drop, None)

    @property
    def arena_bytes(self) -> int:
        return 0 if self.arena is None else self.arena.nbytes

    def run(self, env: dict, session: Any) -> None:
        """One run: the preset keys' values from ``env``, the fetches' values into it."""
        regs: list = [None] * self.size
        for index, key in self.preset:
            regs[index] = env[key]
        planned = False
        if self.arena is None:
            with self._planning:  # one thread observes and plans; the others wait
                if self.arena is None:
                    self._plan(regs, session)
                    planned = True
        if not planned:
            self._loop(regs, session)
        for index, key in self.fetches:
            env[key] = regs[index]

    def _plan(self, regs: list, session: Any) -> None:
        """The first run (:meth:`_observe`), then the entries refined with what it saw and
        the arena planned; ``self.arena`` is set last (other threads then run the loop)."""
        observed, shape_only, kept = self._observe(regs, session)
        for index in shape_only:  # their validate passes for any data of these shapes
            kind, call, op, ctx, ins, outs, drop, step = self.entries[index]
            self.entries[index] = self._direct(index, step, ins, outs, drop)
        for index, entry in enumerate(self.entries):
            if entry[0] == _GUARD:
                shapes = tuple(m.shape for m in observed[index])
                self.entries[index] = (*entry[:7], shapes)
        folded = self._fold(observed, kept)
        for index in folded.intersection(self.candidates):  # run no more: no buffer
            self.entries[index] = (_DIRECT, *self.entries[index][1:7], None)
        self.candidates = sorted(index for index in self.candidates if index not in folded)
        arena = planner.plan_arena(observed, [entry[4] for entry in self.entries],
                                   self.candidates, {index for index, _ in self.fetches})
        self._assign_buffers(observed, arena)
        self.preloads = tuple((self.entries[index][5][0], name)
                              for index, name in self.reads.items())
        skipped = folded | set(self.reads) | {
            index for index, step in enumerate(self.steps)
            if getattr(getattr(step, "op", None), "type", None) == "NoOp"
            and not self.entries[index][6]}
        self.program, self.positions = _without(self.entries, skipped)
        if self.elementwise_groups:
            self.program = self._grouped(self.program, observed)
        self.arena = arena

    def _grouped(self, program: list[tuple], observed: list) -> list[tuple]:
        """``program`` with its groups of elementwise steps as one entry each
        (``elementwise_groups``), from what the first run observed."""
        indices = [self.positions[id(entry)] for entry in program]
        return elementwise_groups.fuse(
            program, [getattr(self.steps[i], "kernel_def", None) for i in indices],
            [[(m.shape, m.dtype) for m in observed[i]] for i in indices],
            [entry[0] == _GUARD for entry in program], {i for i, _ in self.fetches})

    def _fold(self, observed: list, results: dict) -> set[int]:
        """The ``foldable`` entries whose ``results`` (the first run's, by register) are
        kept: each of at most ``FOLD_BYTES``, with inputs that are constants or kept."""
        folded: set[int] = set()
        kept = set(self.constants)
        for index in self.foldable:
            made = observed[index]
            if ((self.steps[index].op.type in planner.SHAPE_OPS
                 or all(i in kept for i in self.entries[index][4]))
                    and all(math.prod(m.shape) * m.dtype.itemsize <= FOLD_BYTES
                            for m in made)):
                folded.add(index)
                kept.update(m.register for m in made)
        self.folded = tuple((m.register, _frozen(results[m.register]))
                            for index in sorted(folded) for m in observed[index])
        return folded

    def _assign_buffers(self, made: list, arena: planner.Arena) -> None:
        """Refine the ``_OUT`` entries with what the first run saw (the signature fixes
        their inputs' shapes): in-place candidates below ``planner.MIN_INPLACE_BYTES`` are
        dropped, and an entry left with neither an in-place candidate nor an arena buffer
        calls its kernel directly."""
        sizes = {m.register: math.prod(m.shape) * m.dtype.itemsize
                 for results in made for m in results}
        slots = arena.slots
        for index in self.candidates:
            kind, call, op, ctx, ins, outs, drop, (inplace, dtype, _) = self.entries[index]
            inplace = tuple(i for i in inplace
                            if sizes.get(ins[i], 0) >= planner.MIN_INPLACE_BYTES)
            slot = slots.get(index)
            if inplace or slot is not None:
                self.entries[index] = (kind, call, op, ctx, ins, outs, drop,
                                       (inplace, dtype, slot))
            else:
                self.entries[index] = (_DIRECT, call, op, ctx, ins, outs, drop, None)

    def _loop(self, regs: list, session: Any) -> None:
        """The steady-state loop: no check the signature settled, no lookup but registers."""
        buffers, skips = self.arena.buffers, self.arena.skips
        take, reusable = planner.Arena.take, planner.reusable
        ndarray, asarray = np.ndarray, np.asarray
        scratch: dict = {}
        for i, value in self.folded:
            regs[i] = value
        variables = session.state.variables
        for i, name in self.preloads:
            value = variables.get(name)
            if value is None:  # not initialized (or gone): its step raises in its place
                self._checked_rest(0, regs, scratch, session)
                return
            regs[i] = value
        value = None
        entry = None
        try:
            for entry in self.program:
                kind, call, op, ctx, ins, outs, drop, extra = entry
                values = [regs[i] for i in ins]
                if kind == _DIRECT:
                    results = call(op, values, ctx)
                elif kind == _OUT:
                    inplace, dtype, slot = extra
                    out = reusable(values, inplace, dtype) if inplace else None
                    if out is None and slot is not None:
                        out = take(buffers, skips, slot)
                    results = (call(op, values, ctx) if out is None
                               else call(op, values, ctx, out=out))
                    out = None
                else:
                    results = call(values, scratch, session)
                    if kind == _GUARD and tuple(r.shape for r in results) != extra:
                        raise _ShapeChanged
                if len(outs) == 1:
                    result = results[0]
                    regs[outs[0]] = result if type(result) is ndarray else asarray(result)
                else:
                    for i, result in zip(outs, results):
                        regs[i] = result if type(result) is ndarray else asarray(result)
                for i in drop:
                    regs[i] = None
                # no local may hold a value: the next step's reference counts see them
                results = result = values = None
        except MemoryError as exc:
            _reraise(exc, entry)
        except _ShapeChanged:  # this entry's results stand; later shapes are not known
            self.stale = True
            for i, result in zip(entry[5], results):
                regs[i] = result if type(result) is ndarray else asarray(result)
            for i in entry[6]:
                regs[i] = None
            results = result = values = None
            self._checked_rest(self.positions[id(entry)] + 1, regs, scratch, session)

    def _checked_rest(self, start: int, regs: list, scratch: dict, session: Any) -> None:
        """Entries ``start`` on with every check, as an unbound run runs them."""
        for entry, step in zip(self.entries[start:], self.steps[start:]):
            values = [regs[i] for i in entry[4]]
            results = step.execute(values, scratch, session)
            for i, result in zip(entry[5], results):
                regs[i] = result if type(result) is np.ndarray else np.asarray(result)
            for i in entry[6]:
                regs[i] = None
            results = result = values = None

    def _observe(self, regs: list, session: Any) -> tuple[list, list[int], dict]:
        """The loop without the arena, recording each result (``planner.Made``): what
        :func:`planner.plan_arena` plans from; the ``PROBE`` entries whose validate
        is shape-only (``planner.shape_only``); and the ``foldable`` entries' results of at
        most ``FOLD_BYTES`` (by register: what ``_fold`` keeps)."""
        reusable = planner.reusable
        scratch: dict = {}
        made: list = []  # per entry: a planner.Made per output
        probes, shape_only = set(self.probes), []
        foldable, kept = set(self.foldable), {}
        identity = planner.Identities()
        entry = None
        try:
            for entry in self.entries:
                kind, call, op, ctx, ins, outs, drop, extra = entry
                values = [regs[i] for i in ins]
                out = None
                if kind == _GENERIC or kind == _GUARD:
                    if len(made) in probes and planner.shape_only(extra.validate,
                                                                  extra.context, values):
                        shape_only.append(len(made))
                    results = call(values, scratch, session)
                else:
                    out = (reusable(values, extra[0], extra[1])
                           if kind == _OUT and extra[0] else None)
                    results = (call(op, values, ctx) if out is None
                               else call(op, values, ctx, out=out))
                record = []
                for i, result in zip(outs, results):
                    if type(result) is not np.ndarray:
                        result = np.asarray(result)
                    regs[i] = result
                    base = planner.root(result)
                    record.append(planner.Made(i, identity(base), result.shape, result.dtype,
                                               base is result and result.flags.c_contiguous,
                                               out is not None and base is planner.root(out)))
                if len(made) in foldable:
                    kept.update((i, regs[i]) for i in outs if regs[i].nbytes <= FOLD_BYTES)
                made.append(record)
                for i in drop:
                    regs[i] = None
                results = result = values = base = out = None
        except MemoryError as exc:
            _reraise(exc, entry)
        return made, shape_only, kept


def _foldable(steps: Sequence, fixed: frozenset, constants: set, fetched: set) -> list[int]:
    """The indices of ``steps`` whose results the signature fixes (``fixed``: see
    ``planner.bind``) and a bound program may keep from its first run: host steps of
    stateless ops whose inputs are constants or such results (or of any fixed shape, for
    ``planner.SHAPE_OPS``), none of their outputs fetched or fed, none writing into a
    concat's output."""
    kept, found = set(constants), []
    for index, step in enumerate(steps):
        op = getattr(step, "op", None)
        outputs = getattr(step, "outputs", ())
        if (op is None or op.op_def.is_stateful or not outputs or not step.on_host
                or step.region is not None or step.joins is not None
                or any(key is None or key in fetched or key not in fixed for key in outputs)
                or op.type not in planner.SHAPE_OPS
                and not all(key in kept for key in planner.step_reads(step))):
            continue
        kept.update(outputs)
        found.append(index)
    return found


def _early_reads(steps: Sequence) -> dict[int, str]:
    """``{index: variable name}`` of the host ``Variable`` steps of ``steps`` that no earlier
    step writes (its ref inputs): each reads the value the variable had when the run
    began."""
    written: set[str] = set()
    reads = {}
    for index, step in enumerate(steps):
        op = getattr(step, "op", None)
        if op is None:
            continue
        if (op.type == "Variable" and step.on_host and op.name not in written
                and step.kernel is variable_kernel):
            reads[index] = op.name
        written.update(name for _, name in step.refs)
    return reads


def _without(entries: list[tuple], skipped: set[int]) -> tuple[list[tuple], dict[int, int]]:
    """``entries`` but the ``skipped`` ones, whose registers to drop the next entry left
    drops (a ``Shape`` skipped may have been its input's last reader); and the index in
    ``entries`` of each entry left (by ``id``)."""
    program: list[tuple] = []
    positions: dict[int, int] = {}
    pending: tuple = ()
    for index, entry in enumerate(entries):
        if index in skipped:
            pending += entry[6]
            continue
        if pending:
            entry = (*entry[:6], entry[6] + pending, entry[7])
            pending = ()
        program.append(entry)
        positions[id(entry)] = index
    return program, positions


def _frozen(value: np.ndarray) -> np.ndarray:
    """``value`` as kept from run to run: its own memory (a view is copied), read-only, so
    no kernel's in-place write or ``out=`` ever takes it (``planner.reusable``,
    ``native.output_array`` need writeable arrays)."""
    if value.base is not None:
        value = value.copy()
    value.setflags(write=False)
    return value


class _ShapeChanged(Exception):
    """A ``GUARD`` entry's results do not have the shapes of the first bound run."""


def _reraise(exc: MemoryError, entry: tuple | None) -> None:
    if isinstance(exc, ResourceExhaustedError) or entry is None or entry[2] is None:
        raise exc
    op = entry[2]
    raise ResourceExhaustedError(f"{op.type} '{op.name}': out of memory while running its "
                                 f"kernel ({exc})") from None
