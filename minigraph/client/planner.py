"""The memory plan of a fixed step list: when each value dies, which steps may write their
output into a dying input, and how many bytes of intermediates a run holds.

TensorFlow's executor drops a tensor when its last consumer has run (reference counts per
edge) and lets kernels forward an input buffer to an output (``forward_input_or_allocate_
output``) when nothing else holds it; PyTorch frees on the last Python reference and offers
``out=``/in-place ops to the user. minigraph plans both once per plan, from its def-use edges:

* **Liveness.** Every value a step produces is dropped right after its last reader runs
  (``MemoryPlan.release``), or right after its producer when nothing reads it (a batch
  norm's reserve spaces). Fetched values live to the end of the run; fed values and the
  folded constants are owned elsewhere and are never counted or dropped.
* **In place.** A kernel registered with ``inplace=(i, ...)`` (``backends.registry``) may
  write its output 0 into input ``i`` when given ``out=`` that array. The plan offers it
  where input ``i`` dies at that step (its only reader there, not fetched, produced by a step
  of this plan, not a constant); at run time :func:`reusable` also requires that no one else
  holds the array (its reference count, so an ``Identity`` alias, a view, a variable that an
  ``Assign`` stored it into, a cached coefficient or a caller's reference all veto it) and
  that it owns its memory, is writeable, C-contiguous and of the output's dtype. The kernel
  itself checks the shape and falls back to a fresh array for anything else.
* **Peak bytes.** With ``RunMetadata``, each step records the bytes of distinct
  intermediate buffers alive while it ran (inputs, outputs and everything held for later
  steps; views counted once, by the array owning the memory), and the run its peak
  (:class:`LiveBytes`).

* **Arena.** A plan bound to a signature (``client/executor.py``) keeps the output buffers of
  its steps whose kernels take ``out=`` from one run to the next (:class:`Arena`, planned by
  :func:`plan_arena` from the first bound run: buffers shared between values of one shape
  and dtype whose lifetimes, views included, do not overlap), so a steady step allocates
  none of them. A buffer is handed to a kernel only while the arena alone holds it.

``OptimizerOptions(memory_planner=False)`` keeps every value to the end of the run and
turns in-place execution off: results are bit for bit the same either way
(``tests/test_planner.py``).
"""

from __future__ import annotations

import itertools
import math
import sys
import weakref
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from minigraph.backends.native import CACHE_LINE, padded_bytes


def _references(values: list, index: int) -> int:
    """The reference count of ``values[index]`` as seen from here."""
    value = values[index]
    return sys.getrefcount(value)


def _sole_references() -> int:
    """:func:`_references` of an array held once by a dict (the run's environment) and once
    by a list (the step's inputs): measured, not assumed, since what getrefcount counts
    (stack references, its own argument) differs between Python versions."""
    value = np.empty(1)
    env, values = {0: value}, [value]
    del value
    count = _references(values, 0)
    del env
    return count


_SOLE_REFERENCES = _sole_references()
# Smaller arrays are not overwritten: malloc serves them from its free lists faster than the
# checks below run, and they weigh nothing in the peak (tests lower it to reach tiny graphs).
MIN_INPLACE_BYTES = 1 << 15


def step_reads(step: Any) -> list:
    """The environment keys ``step`` reads: a step's inputs, a transfer's source (None
    entries, ref inputs, left out)."""
    if hasattr(step, "source"):
        keys = [step.source]
    else:
        keys = list(step.inputs)
    return [key for key in keys if key is not None]


def step_writes(step: Any) -> list:
    """The environment keys ``step`` stores."""
    if hasattr(step, "target"):
        keys = [step.target]
    else:
        keys = list(step.outputs)
    return [key for key in keys if key is not None]


@dataclass(frozen=True)
class MemoryPlan:
    """``release[i]``: the keys to drop after step ``i``; ``inplace[i]``: the inputs step
    ``i`` may overwrite (indices into its ``inputs``), empty when none."""

    release: tuple[tuple, ...]
    inplace: tuple[tuple[int, ...], ...]


def plan_memory(steps: Sequence, fetch_keys: Iterable, keep: Iterable = ()) -> MemoryPlan:
    """Liveness and in-place candidates of ``steps`` (run in this order); ``fetch_keys``
    live to the end, ``keep`` (constants' keys) are never dropped or overwritten."""
    pinned = set(fetch_keys) | set(keep)
    produced: set = set()
    last_read: dict = {}
    for index, step in enumerate(steps):
        for key in step_writes(step):
            produced.add(key)
            last_read.setdefault(key, index)  # unread: dropped after its producer
        for key in step_reads(step):
            last_read[key] = index
    release: list[list] = [[] for _ in steps]
    for key, index in last_read.items():
        if key in produced and key not in pinned:
            release[index].append(key)
    inplace = []
    for index, step in enumerate(steps):
        candidates = getattr(getattr(step, "kernel_def", None), "inplace", ())
        if not candidates:
            inplace.append(())
            continue
        dying = set(release[index])
        inputs = step.inputs
        inplace.append(tuple(i for i in candidates if i < len(inputs) and inputs[i] in dying
                             and inputs.count(inputs[i]) == 1))
    return MemoryPlan(tuple(tuple(keys) for keys in release), tuple(inplace))


def reusable(values: list, candidates: tuple[int, ...], dtype: np.dtype) -> np.ndarray | None:
    """The first input among ``candidates`` (of at least ``MIN_INPLACE_BYTES``) that only the
    run holds and that a kernel may overwrite with an output of ``dtype``, or None. Call
    with ``values`` the step's input list and the environment holding each value once."""
    for index in candidates:
        if (type(values[index]) is not np.ndarray or values[index].nbytes < MIN_INPLACE_BYTES
                or _references(values, index) > _SOLE_REFERENCES):
            continue
        value = values[index]
        if value.dtype == dtype:
            flags = value.flags
            if flags.owndata and flags.writeable and flags.c_contiguous:
                return value
    return None


# Ops whose outputs are functions of their inputs' shapes alone (not of their values): the
# shape ops, and the gradient's seeds ``OnesLike``/``ZerosLike`` (a loss's ones, a missing
# gradient's zeros).
SHAPE_OPS = frozenset({"Shape", "ShapeN", "Size", "Rank", "OnesLike", "ZerosLike"})


CHECK, SKIP, PROBE, GUARD = 0, 1, 2, 3  # what :func:`bind` says of a step


class Binding(NamedTuple):
    """:func:`bind`'s verdicts: ``checks[i]`` for step ``i``, and ``fixed``, the keys whose
    values the signature fixes (the constants' and those computed from them and from fixed
    shapes alone: a mean's gradient ``1/N`` broadcast to a fed batch's shape)."""

    checks: tuple[int, ...]
    fixed: frozenset


def bind(steps: Sequence, determined: Iterable, fixed: Iterable = ()) -> Binding:
    """Which of ``steps`` may skip their checks (``_Step.run(checked=True)``) in a run whose
    signature equals that of a run in which every check passed, and which values that
    signature fixes.

    The signature fixes the shapes and dtypes of the ``determined`` keys (fed values and
    constants) and of the variables, and the values of the ``fixed`` keys (constants, the
    same arrays on every run). A step's output shapes are then fixed too when its inputs'
    shapes are and its shape function leaves no dimension open and reads only fixed values
    (a ``Reshape`` whose shape is a constant, or computed by a ``Shape`` of a fixed-shape
    value: the outputs of ``SHAPE_OPS`` and of stateless ops of fixed values are fixed).
    Such a step's checks can only pass again (``SKIP``) unless it has a ``validate``, which
    may read data (``PROBE``: :func:`shape_only` tells, in the first bound run). A step whose
    shape function reads values the signature does not fix (a check of sparse labels'
    range) runs its checks, and its outputs count as of fixed shapes for the steps after it
    (``GUARD``): the bound program checks at run time that they have the shapes they had,
    and runs the rest of the run with every check where not. Every other step runs its
    checks (``CHECK``). A step that updates a variable is checked against the variable's
    shape, which the signature fixes (a plan whose ``Assign`` may change a shape never
    binds). Transfers run as always."""
    known, fixed = set(determined), set(fixed)
    flags = []
    for step in steps:
        writes, reads = step_writes(step), step_reads(step)
        inputs_known = all(key in known for key in reads)
        if hasattr(step, "source"):
            static, flag = True, CHECK
            if step.source in fixed:
                fixed.update(writes)
        else:
            static = not step.undetermined
            if not inputs_known or not static:
                flag = CHECK
            elif not all(step.inputs[i] in fixed for i in step.value_inputs):
                flag = GUARD
            else:
                flag = SKIP if step.validate is None else PROBE
            if inputs_known and (step.op.type in SHAPE_OPS or not step.op.op_def.is_stateful
                                 and all(key in fixed for key in reads)):
                fixed.update(writes)
        if inputs_known and static:
            known.update(writes)
        flags.append(flag)
    return Binding(tuple(flags), frozenset(fixed))


class _ReadsData(Exception):
    """A ``validate`` probed by :func:`shape_only` looked at more than shapes and dtypes."""


class _ShapeOf:
    """An array's shape and dtype, and nothing else: every other use raises _ReadsData."""

    __slots__ = ("shape", "dtype", "ndim", "size", "itemsize", "nbytes")

    def __init__(self, value: np.ndarray) -> None:
        self.shape, self.dtype, self.ndim = value.shape, value.dtype, value.ndim
        self.size, self.itemsize, self.nbytes = value.size, value.itemsize, value.nbytes

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise _ReadsData

    __getattr__ = __array__ = __getitem__ = __iter__ = __len__ = __bool__ = _refuse
    __float__ = __int__ = __index__ = __complex__ = _refuse
    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _refuse  # type: ignore[assignment]
    __add__ = __sub__ = __mul__ = __truediv__ = __mod__ = __neg__ = __abs__ = _refuse
    __array_ufunc__ = __array_function__ = _refuse
    __hash__ = object.__hash__


def shape_only(validate: Any, context: Any, values: list) -> bool:
    """Whether ``validate(context, values)`` passes when it is shown only the values' shapes
    and dtypes (each ndarray replaced by an object refusing any other use): then it passes
    for every value of those shapes and dtypes, and a bound run may skip it."""
    try:
        validate(context, [_ShapeOf(v) if type(v) is np.ndarray else v for v in values])
    except Exception:  # noqa: BLE001 - any failure: it needs the data (or raises): keep it
        return False
    return True


class ConcatGroup:
    """A ``ConcatV2`` whose inputs' producers write straight into its output (no copy).

    Each input is output 0 of a native kernel taking ``out=`` (``KernelDef.takes_out``), read
    by the concat alone, not fetched; the concatenated output's static shape is fully
    known and every input's part of it is contiguous (all dimensions before the axis are
    1: an axis-0 concat, a batch-1 NCHW channel concat). The first producer to run
    allocates the output (kept in the run's environment under the group), each producer is
    given its part as ``out=``, and the concat checks that every input value is its part,
    in place: then the output is the concatenation as it stands, bit for bit what the copy
    gives; otherwise (a kernel that returned another array) it copies as always.
    """

    def __init__(self, shape: tuple[int, ...], axis: int, parts: list[tuple[int, ...]]
                 ) -> None:
        self.shape = shape
        self.parts = parts
        inner = math.prod(shape[axis + 1:])
        self.starts = list(itertools.accumulate((p[axis] * inner for p in parts), initial=0))

    def region(self, env: dict, index: int) -> np.ndarray:
        """Part ``index`` of this run's output (allocated by the first producer)."""
        output = env.get(self)
        if output is None:
            output = env[self] = np.empty(self.shape, np.float32)
        return output.reshape(-1)[self.starts[index]:self.starts[index + 1]].reshape(
            self.parts[index])

    def joined(self, env: dict, values: list) -> np.ndarray | None:
        """This run's output when every input value is its part, in place; else None."""
        output = env.pop(self, None)
        if output is None:
            return None
        base = output.ctypes.data
        for value, start, part in zip(values, self.starts, self.parts):
            if not (type(value) is np.ndarray and value.shape == part
                    and value.dtype == np.float32 and value.flags.c_contiguous
                    and value.ctypes.data == base + 4 * start):
                return None
        return output


def concat_groups(steps: Sequence, fetch_keys: Iterable, keep: Iterable = ()
                  ) -> list[tuple[Any, list, ConcatGroup]]:
    """The (concat step, producer steps, group) of every ``ConcatV2`` of ``steps`` whose
    inputs can be written in place (:class:`ConcatGroup`)."""
    pinned = set(fetch_keys) | set(keep)
    reads: Counter = Counter(key for step in steps for key in step_reads(step))
    producer = {key: step for step in steps if hasattr(step, "kernel_def")
                for key in step.outputs[:1] if key is not None}
    claimed: set[int] = set()
    groups = []
    for step in steps:
        op = getattr(step, "op", None)
        if (op is None or op.type != "ConcatV2" or step.kernel_def.backend != "native"
                or op.outputs[0].dtype.np_dtype != np.float32):
            continue
        count = op.attrs["N"]
        keys, axis_input = step.inputs[:count], op.inputs[count]
        shape = op.outputs[0].shape
        if axis_input.op.type != "Const" or not shape.is_fully_defined():
            continue
        dims = tuple(shape.as_list())
        axis = int(axis_input.op.attrs["value"]) % len(dims)
        makers = [producer.get(key) for key in keys]
        if (math.prod(dims[:axis]) != 1 or len(set(keys)) != count
                or any(key in pinned or reads[key] != 1 for key in keys)
                or any(maker is None or not maker.kernel_def.takes_out or id(maker) in claimed
                       or not maker.op.outputs[0].shape.is_fully_defined()
                       for maker in makers)):
            continue
        parts = [tuple(maker.op.outputs[0].shape.as_list()) for maker in makers]
        claimed.update(id(maker) for maker in makers)
        groups.append((step, makers, ConcatGroup(dims, axis, parts)))
    return groups


def root(value: Any) -> Any:
    """The array owning ``value``'s memory (a view's base, followed to the end)."""
    while isinstance(getattr(value, "base", None), np.ndarray):
        value = value.base
    return value


class LiveBytes:
    """Bytes of distinct intermediate buffers alive during a run, tracked per key.

    The values already in ``env`` (fed values, folded constants) and ``owned`` (variables'
    storage) were produced outside the run, and so are the values under ``skip_keys`` (the
    constants of a plan's first run): values living in them are not intermediates."""

    def __init__(self, env: dict, owned: Iterable = (), skip_keys: Iterable = ()) -> None:
        # held, so that no intermediate made during the run can reuse one of their ids
        self.owners = [root(value) for value in (*env.values(), *owned) if value is not None]
        self.outside = {id(owner) for owner in self.owners}
        self.skip_keys = frozenset(skip_keys)
        self.held: dict[int, list] = {}  # root id -> [bytes, number of keys on it]
        self.keys: dict = {}  # key -> root id
        self.current = 0
        self.peak = 0

    def add(self, env: dict, keys: Iterable) -> int:
        """Count the values just stored under ``keys``; returns the bytes now alive."""
        for key in keys:
            value = env.get(key)
            if value is None or key in self.keys or key in self.skip_keys:
                continue
            owner = root(value)
            ident = id(owner)
            if ident in self.outside:
                continue
            self.keys[key] = ident
            entry = self.held.get(ident)
            if entry is None:
                nbytes = int(getattr(owner, "nbytes", 0))
                self.held[ident] = [nbytes, 1]
                self.current += nbytes
            else:
                entry[1] += 1
        self.peak = max(self.peak, self.current)
        return self.current

    def drop(self, keys: Iterable) -> None:
        """Forget the values under ``keys`` (dropped from the environment)."""
        for key in keys:
            ident = self.keys.pop(key, None)
            if ident is None:
                continue
            entry = self.held[ident]
            entry[1] -= 1
            if entry[1] == 0:
                self.current -= entry[0]
                del self.held[ident]


class Identities:
    """Numbers arrays for as long as they live: unlike ``id``, a number is never reused by
    an array made after the first one died (a weak reference tells)."""

    def __init__(self) -> None:
        self.seen: dict[int, tuple[weakref.ref, int]] = {}
        self.count = 0

    def __call__(self, array: np.ndarray) -> int:
        known = self.seen.get(id(array))
        if known is not None and known[0]() is array:
            return known[1]
        self.count += 1
        self.seen[id(array)] = (weakref.ref(array), self.count)
        return self.count


class Made(NamedTuple):
    """A result a bound program's first run observed: its register, the number
    (:class:`Identities`) of the array owning its memory (:func:`root`), its shape and
    dtype, whether it is that owning C-contiguous array itself, and whether the kernel
    wrote it into an input (in place)."""

    register: int
    root: int
    shape: tuple[int, ...]
    dtype: np.dtype
    owns: bool
    in_place: bool


def _free_references() -> int:
    """What ``sys.getrefcount`` reports in :meth:`Arena.take` for a buffer only the arena's
    list holds (measured, as :func:`_sole_references`)."""
    buffers = [np.empty(1)]
    buffer = buffers[0]
    return sys.getrefcount(buffer)


_FREE_REFERENCES = _free_references()


@dataclass(frozen=True)
class Slot:
    """An arena entry's place: its buffer and the array it is seen as there."""

    buffer: int
    shape: tuple[int, ...]
    dtype: np.dtype


@dataclass
class Arena:
    """The output buffers of a bound program: raw byte buffers (``buffers``), each shared by
    the entries whose lifetimes do not overlap, its arrays starting ``skips`` bytes in (at a
    cache line); ``slots`` maps an entry (a step) to its :class:`Slot`."""

    slots: dict[int, Slot]
    buffers: list[np.ndarray]
    skips: list[int]

    @classmethod
    def of_sizes(cls, slots: dict[int, Slot], sizes: Sequence[int]) -> Arena:
        """The arena of fresh buffers holding ``sizes`` bytes each."""
        buffers, skips = zip(*map(padded_bytes, sizes)) if sizes else ((), ())
        return cls(slots, list(buffers), list(skips))

    @property
    def nbytes(self) -> int:
        return sum(buffer.nbytes - CACHE_LINE for buffer in self.buffers)

    @staticmethod
    def take(buffers: list[np.ndarray], skips: list[int], slot: Slot) -> np.ndarray:
        """The slot's array in its buffer when nothing but the arena holds that buffer (no
        value of this run, no array or view a Run returned, no other thread's run: each of
        those keeps a reference to it); else in a fresh buffer of the same size, which
        becomes the arena's (the old one is left to whoever holds it)."""
        buffer = buffers[slot.buffer]
        if sys.getrefcount(buffer) > _FREE_REFERENCES:
            buffer, skips[slot.buffer] = padded_bytes(buffer.nbytes - CACHE_LINE)
            buffers[slot.buffer] = buffer
        return np.ndarray(slot.shape, slot.dtype, buffer, skips[slot.buffer])


def plan_arena(made: Sequence[Sequence[Made]], reads: Sequence[Sequence[int]],
               candidates: Iterable[int], fetched: Iterable[int]) -> Arena:
    """The arena of a bound program from its first run: ``made[e]`` the results of entry
    ``e``, ``reads[e]`` the registers it reads, ``candidates`` the entries whose kernels
    take ``out=``, ``fetched`` the fetched registers.

    A candidate's buffer lives from its step to the last step reading any value with the
    same root (views, aliases). A candidate gets none when a fetched value shares its root
    (the caller keeps it), when its result was written in place or a later step writes in
    place into it (the run holds that memory already: an arena buffer would veto the in-place
    write), or when its result is not an owning C-contiguous array of at least
    ``MIN_INPLACE_BYTES``. Buffers are bytes, shared by candidates of any shape and dtype
    whose lifetimes do not overlap: in step order, each candidate takes the smallest free
    buffer that holds it, else grows the largest free one, else gets a new one (best fit,
    as a malloc's free lists would reuse the memory)."""
    root_of = {m.register: m.root for results in made for m in results}
    last: dict[int, int] = {}
    for entry, registers in enumerate(reads):
        for register in registers:
            if register in root_of:
                last[root_of[register]] = entry
    excluded = {root_of[r] for r in fetched if r in root_of}
    excluded.update(m.root for results in made for m in results if m.in_place)
    slots: dict[int, Slot] = {}
    sizes: list[int] = []
    ends: list[int] = []
    for entry in candidates:
        if not made[entry]:
            continue
        m = made[entry][0]
        nbytes = math.prod(m.shape) * m.dtype.itemsize
        if not m.owns or m.root in excluded or nbytes < MIN_INPLACE_BYTES:
            continue
        free = [i for i in range(len(sizes)) if ends[i] < entry]
        fitting = [i for i in free if sizes[i] >= nbytes]
        if fitting:
            index = min(fitting, key=lambda i: sizes[i])
        elif free:
            index = max(free, key=lambda i: sizes[i])
            sizes[index] = nbytes
        else:
            index = len(sizes)
            sizes.append(nbytes)
            ends.append(entry)
        ends[index] = last.get(m.root, entry)
        slots[entry] = Slot(index, tuple(m.shape), np.dtype(m.dtype))
    return Arena.of_sizes(slots, sizes)
