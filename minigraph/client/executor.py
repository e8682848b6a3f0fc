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
* every other step (a check to run, a transfer, a device, a zero-copy concat) runs as
  unbound runs run it (``_Step.execute``), so what is new is checked as always; where a
  step's shapes depend on data (``planner.GUARD``), its results' shapes are compared with
  the first run's, and the rest of a run where they differ runs with every check (the
  plan then binds anew).

The first bound run of a signature also observes each arena candidate's result (shape,
dtype, which later values are views of it) and plans the arena from it
(:func:`planner.plan_arena`); later runs hand those buffers to the kernels. Fetched values
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
from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np

from minigraph.client import planner
from minigraph.framework.errors import ResourceExhaustedError

# entry kinds
_DIRECT = 0  # kernel(op, values, ctx)
_OUT = 1  # kernel(op, values, ctx, out=...): in place or into the arena
_GENERIC = 2  # step.execute(values, scratch, session, checked) / a transfer's copy
_GUARD = 3  # _GENERIC, then its results' shapes must be those of the first run

_NONE, _TRASH = 0, 1  # registers: a ref input's None; where a fed output's result goes


def _transfer(copy: Any, values: list, scratch: dict, session: Any) -> list:
    return [copy(values[0])]


class BoundProgram:
    """``steps`` (with their release lists and ``planner.bind`` verdicts) compiled for one
    signature; ``fetch_keys`` are copied back into the run's environment."""

    def __init__(self, signature: tuple, steps: Sequence, release: Sequence,
                 checked: Sequence[int], fetch_keys: Sequence) -> None:
        self.signature = signature
        self.steps = steps
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
            ins = tuple(register(key) for key in
                        ((step.source,) if hasattr(step, "source") else step.inputs))
            outs = tuple(_TRASH if key is None else register(key) for key in
                         ((step.target,) if hasattr(step, "target") else step.outputs))
            drop = tuple(register(key) for key in dead)
            if hasattr(step, "source"):
                entry = (_GENERIC, partial(_transfer, step.copy), None, None, ins, outs, drop,
                         None)
            elif flag == planner.GUARD:  # its expected shapes: from the first run
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
        self.arena: planner.Arena | None = None  # planned by the first run
        # a guard failed: the plan must rebind (``session._Plan`` drops this program)
        self.stale = False
        self._planning = threading.Lock()

    def _direct(self, index: int, step: Any, ins: tuple, outs: tuple, drop: tuple) -> tuple:
        """The entry calling ``step``'s kernel itself (with ``out=`` where it takes one)."""
        if step.kernel_def.takes_out:
            self.candidates.append(index)
            return (_OUT, step.kernel, step.op, step.kernel_context, ins, outs, drop,
                    (step.inplace, step.out_dtype, -1))
        return (_DIRECT, step.kernel, step.op, step.kernel_context, ins, outs, drop, None)

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
        observed, shape_only = self._observe(regs, session)
        for index in shape_only:  # their validate passes for any data of these shapes
            kind, call, op, ctx, ins, outs, drop, step = self.entries[index]
            self.entries[index] = self._direct(index, step, ins, outs, drop)
        for index, entry in enumerate(self.entries):
            if entry[0] == _GUARD:
                shapes = tuple(m.shape for m in observed[index])
                self.entries[index] = (*entry[:7], shapes)
        self.candidates.sort()
        arena = planner.plan_arena(observed, [entry[4] for entry in self.entries],
                                   self.candidates, {index for index, _ in self.fetches})
        self._assign_buffers(observed, arena)
        self.arena = arena

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
        buffers = self.arena.buffers
        take, reusable = planner.Arena.take, planner.reusable
        ndarray, asarray = np.ndarray, np.asarray
        scratch: dict = {}
        entry = None
        try:
            for entry in self.entries:
                kind, call, op, ctx, ins, outs, drop, extra = entry
                values = [regs[i] for i in ins]
                if kind == _DIRECT:
                    results = call(op, values, ctx)
                elif kind == _OUT:
                    inplace, dtype, slot = extra
                    out = reusable(values, inplace, dtype) if inplace else None
                    if out is None and slot is not None:
                        out = take(buffers, slot)
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
            self._checked_rest(self.entries.index(entry) + 1, regs, scratch, session)

    def _checked_rest(self, start: int, regs: list, scratch: dict, session: Any) -> None:
        """Entries ``start`` on with every check, as an unbound run runs them."""
        for entry, step in zip(self.entries[start:], self.steps[start:]):
            values = [regs[i] for i in entry[4]]
            results = (entry[1](values, scratch, session) if hasattr(step, "source")
                       else step.execute(values, scratch, session))
            for i, result in zip(entry[5], results):
                regs[i] = result if type(result) is np.ndarray else np.asarray(result)
            for i in entry[6]:
                regs[i] = None
            results = result = values = None

    def _observe(self, regs: list, session: Any) -> tuple[list, list[int]]:
        """The loop without the arena, recording each result (``planner.Made``): what
        :func:`planner.plan_arena` plans from; and the ``PROBE`` entries whose validate
        is shape-only (``planner.shape_only``)."""
        reusable = planner.reusable
        scratch: dict = {}
        made: list = []  # per entry: a planner.Made per output
        probes, shape_only = set(self.probes), []
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
                made.append(record)
                for i in drop:
                    regs[i] = None
                results = result = values = base = out = None
        except MemoryError as exc:
            _reraise(exc, entry)
        return made, shape_only


class _ShapeChanged(Exception):
    """A ``GUARD`` entry's results do not have the shapes of the first bound run."""


def _reraise(exc: MemoryError, entry: tuple | None) -> None:
    if isinstance(exc, ResourceExhaustedError) or entry is None or entry[2] is None:
        raise exc
    op = entry[2]
    raise ResourceExhaustedError(f"{op.type} '{op.name}': out of memory while running its "
                                 f"kernel ({exc})") from None
