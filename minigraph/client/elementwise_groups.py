"""Groups of elementwise steps of a bound program, each run as one native pass.

A bound program's first run shows every step's result shapes (``executor.BoundProgram``),
and the signature fixes them for every later run. Steps whose kernel a native elementwise
instruction stands for (``backends.elementwise_program.instruction``: the native
activations and their gradients, the binary arithmetic, a channels-last BiasAdd, the error
functions and the exactly rounded Neg/Abs/Square/Sqrt/Rsqrt/Reciprocal), each with one
float32 result of one shape, are grouped where they feed each other: a group becomes one
entry, placed where its last member was, running :class:`~minigraph.backends.
elementwise_program.Program` on the group's inputs and writing only the results read outside
it (or fetched). A recurrent cell's gates (Sigmoid, Tanh, Mul, AddV2 on a few rows) are one
call instead of nine.

Each value is bit for bit the one the ops give one by one (each instruction runs its op's own
C loop); a run whose inputs the program does not take (another dtype, a broadcast it does not
do) runs the members' own kernels instead, in order.

A group may only move a member's work later, to its last member's place, where that changes
nothing:

* no other step before that place reads a member's result;
* no other step between the group's first and last members reads one of the group's inputs
  (it could be the input's last reader, which may overwrite it in place);
* no guard step lies between them (a guard whose shapes change runs the rest of the plan
  step by step from there: ``executor.BoundProgram._checked_rest``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from minigraph.backends import elementwise_program
from minigraph.backends.elementwise_program import ARITH, Program

F32 = np.dtype(np.float32)


class _Member:
    """One grouped step: its entry's kernel call and the group's registers it reads."""

    __slots__ = ("call", "op", "ctx", "reads")

    def __init__(self, call: Callable, op: Any, ctx: Any, reads: tuple[int, ...]) -> None:
        self.call, self.op, self.ctx, self.reads = call, op, ctx, reads


class Group:
    """The entry's kernel: ``group(op, values, ctx)`` gives the group's outputs from its
    inputs, by the program or, where it does not take them, by the members' kernels."""

    __slots__ = ("program", "members", "outputs", "__name__")

    def __init__(self, program: Program, members: list[_Member], outputs: tuple[int, ...]
                 ) -> None:
        self.program, self.members, self.outputs = program, members, outputs
        self.__name__ = "elementwise_group"

    def __call__(self, op: Any, values: list, ctx: Any) -> list:
        results = self.program.run(values)
        if results is not None:
            return results
        registers = list(values)
        for member in self.members:
            result = member.call(member.op, [registers[i] for i in member.reads], member.ctx)[0]
            registers.append(np.asarray(result))
        return [registers[i] for i in self.outputs]

    def replay(self, op: Any, values: list, outputs: list, ctx: Any
               ) -> Callable[[], None] | None:
        """The group's replay (``registry.ReplayMaker``): the program on fixed arrays, or,
        where C declines a call, the members' kernels with the results copied out."""
        program = self.program.replay(values, outputs)
        if program is None:
            return None

        def replayed() -> None:
            if not program():
                for out, result in zip(outputs, self(op, values, ctx)):
                    np.copyto(out, result)

        return replayed


def fuse(program: list[tuple], kernels: Sequence[Any], shapes: Sequence[Any],
         guards: Sequence[bool], fetched: set[int]) -> list[tuple]:
    """``program`` (executor entries) with its elementwise groups as one entry each.
    ``kernels[p]``, ``shapes[p]`` and ``guards[p]`` describe entry p: its step's
    ``KernelDef`` (None: not a candidate), its results' observed ``(shape, dtype)`` pairs,
    whether it is a guard; ``fetched``: the registers the run returns."""
    readers: dict[int, list[int]] = {}
    for p, entry in enumerate(program):
        for register in entry[4]:
            readers.setdefault(register, []).append(p)
    groups = _groups(program, kernels, shapes, guards, readers, fetched)
    if not groups:
        return program
    placed = {members[-1]: members for members in groups}
    grouped = {p for members in groups for p in members}
    fused = []
    for p, entry in enumerate(program):
        if p in placed:
            fused.append(_entry(program, placed[p], kernels, shapes, readers, fetched))
        elif p not in grouped:
            fused.append(entry)
    return fused


def _instruction(entry: tuple, kernel: Any, shape: Any) -> tuple | None:
    """The instruction of a candidate entry (a direct kernel call with one float32 result
    of a non-empty shape, one or two inputs), else None."""
    if kernel is None or entry[0] not in (0, 1) or len(shape) != 1:  # _DIRECT, _OUT
        return None
    (dims, dtype), = shape
    if dtype != F32 or not all(dims) or len(entry[4]) not in (1, 2):
        return None
    return elementwise_program.instruction(entry[2], kernel)


def _groups(program: list[tuple], kernels: Sequence[Any], shapes: Sequence[Any],
            guards: Sequence[bool], readers: dict[int, list[int]], fetched: set[int]
            ) -> list[list[int]]:
    """Lists of entry positions (in order), each a valid group with fewer outputs than
    members (a group that writes every member's result saves only calls)."""
    producer: dict[int, int] = {}  # register -> candidate entry making it
    group_of: dict[int, list[int]] = {}  # candidate entry -> its group (shared list)
    last_guard = -1
    for p, entry in enumerate(program):
        if guards[p]:
            last_guard = p
        if _instruction(entry, kernels[p], shapes[p]) is None:
            continue
        shape = shapes[p][0][0]
        joined: list[int] = [p]
        for register in entry[4]:
            q = producer.get(register)
            if q is None or shapes[q][0][0] != shape or q < last_guard:
                continue
            group = group_of[q]
            if group is not joined and group[0] not in joined:
                candidate = sorted(set(group) | set(joined))
                if _valid(candidate, program, readers):
                    joined = candidate
        for q in joined:
            group_of[q] = joined
        producer[entry[5][0]] = p
    found, seen = [], set()
    for members in group_of.values():
        if id(members) not in seen and len(members) > 1:
            seen.add(id(members))
            outputs = _outputs(program, members, readers, fetched)
            if (0 < len(outputs) < len(members) and len(members)
                    + len(_inputs(program, members)) <= elementwise_program.MAX_REGISTERS):
                found.append(members)
    return found


def _inputs(program: list[tuple], members: list[int]) -> list[int]:
    """The registers the members read that no member makes, in order of first use."""
    made = {program[p][5][0] for p in members}
    inputs: list[int] = []
    for p in members:
        for register in program[p][4]:
            if register not in made and register not in inputs:
                inputs.append(register)
    return inputs


def _valid(members: list[int], program: list[tuple], readers: dict[int, list[int]]) -> bool:
    """Whether the members may run as one entry at the last one's place (module docstring)."""
    first, last, inside = members[0], members[-1], set(members)
    for p in members:
        for q in readers.get(program[p][5][0], ()):
            if q not in inside and q < last:
                return False
    for register in _inputs(program, members):
        if any(first < q < last and q not in inside for q in readers.get(register, ())):
            return False
    return True


def _outputs(program: list[tuple], members: list[int], readers: dict[int, list[int]],
             fetched: set[int]) -> list[int]:
    """The members' results read after the group or fetched."""
    last = members[-1]
    return [program[p][5][0] for p in members
            if program[p][5][0] in fetched
            or any(q > last for q in readers.get(program[p][5][0], ()))]


def _entry(program: list[tuple], members: list[int], kernels: Sequence[Any],
           shapes: Sequence[Any], readers: dict[int, list[int]], fetched: set[int]) -> tuple:
    """The group's entry: its inputs, the members' results read after it or fetched, every
    member's drops; its kernel a :class:`Group`."""
    inputs = _inputs(program, members)
    local = {register: i for i, register in enumerate(inputs)}
    code, group_members, last = [], [], members[-1]
    uses: dict[int, set[int]] = {i: set() for i in range(len(inputs))}
    for p in members:
        entry = program[p]
        kind, function, alpha = _instruction(entry, kernels[p], shapes[p])
        reads = tuple(local[register] for register in entry[4])
        for i in reads:
            if i < len(inputs):
                uses[i].add(kind)
        a, b = reads if len(reads) == 2 else (reads[0], 0)
        code.append((kind, function, a, b, alpha))
        group_members.append(_Member(entry[1], entry[2], entry[3], reads))
        local[entry[5][0]] = len(inputs) + len(code) - 1
    outputs = _outputs(program, members, readers, fetched)
    out_local = tuple(local[register] for register in outputs)
    broadcastable = [uses[i] == {ARITH} for i in range(len(inputs))]
    shape = shapes[last][0][0]
    group = Group(Program(len(inputs), code, out_local, shape, broadcastable), group_members,
                  out_local)
    drops = tuple(register for p in members for register in program[p][6])
    return (0, group, program[last][2], None, tuple(inputs), tuple(outputs), drops, None)
