"""A bound program replayed over buffers of its own: a loop's body (``client/loops.py``)
and a session's run (``session._Plan``), ``OptimizerOptions.replay``.

A recurrent layer's loop runs its body once an iteration on values of a few hundred
elements, and a small CNN's run is a few hundred kernels on small tensors: their bound
programs (``executor.BoundProgram``) spent most of their time in Python around the kernels
(the run's environment and registers, each kernel's handling of its arguments; an LSTM step
30-40 us of which a few in C). Once a plan's program is bound and planned, :func:`build`
compiles it for the values it is fed into a :class:`LoopReplay`: every value gets a fixed
buffer, and every step a function of no arguments that reads and writes those buffers:

* kernels with a replay maker (``registry.ReplayMaker``: the bound GEMMs, elementwise
  groups, native broadcasts and BiasAdd, convolutions, depthwise convolutions and the fused
  ones, pools, ConcatV2, Pad, Split, GatherV2 of one index, Select, Tile, a loop counter's
  integer ops and comparisons) make their C or numpy call with arguments made once;
* every other step calls its kernel on the buffers (a step that checks its inputs at every
  run: the step, checks included) and copies the results into its own buffers.

The loop variables the body changes live in two sets of buffers: an iteration reads one set
and writes the other, so no step writes what a later step of the same iteration still reads;
the program is made once per set (a session's run has no such variables: one program).
Inputs the program only reads are copied into a buffer of their own at the start (a loop's
input sequence, a run's feeds), or, when read-only all the way down (a frozen graph's
weights, which a bound GEMM knows by identity), are the caller's arrays themselves; a start
with other read-only arrays builds anew. Every value is the bound program's, bit for bit: the
same kernels' loops on the same values.

Steps whose inputs are all frozen (read-only constants, read-only inputs, results of other
such steps) give the same results at every run: they run once, in the trial run
:func:`build` makes to learn every value's shape, and their results are kept frozen (a
GRU's weights sliced in its body: the matmuls then know the slices by identity and keep
their packing).

A program is replayed only where nothing in it depends on more than its inputs and the
signature fixes every shape: no stateful op (random ops, variables), no step whose results'
shapes depend on data (a guard), no zero-copy concat. The trial run has no effect outside
the replay. The values of the steps share one slab by their lifetimes, as a bound
program's arena shares its buffers (:func:`_slab_layout`), but for those read after the
program (its outputs), which have their own; a program whose buffers would take more than
:data:`MAX_BYTES` is not replayed (it runs bound, as before).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from minigraph.backends.gemm import _frozen
from minigraph.backends.native import num_threads
from minigraph.backends.registry import replay_maker, store_results
from minigraph.client import executor

# the most memory a replay's own buffers may take (a recurrent cell's values take a few
# hundred KiB at batch 32; the zoo's CNNs at their sizes 5 MiB at batch 2, DenseNet121 20 at
# batch 8, ResNet50 27 at batch 32, MobileNetV2 77 at batch 32: not replayed)
MAX_BYTES = 1 << 25


class LoopReplay:
    """A program over fixed buffers (see the module docstring). ``start`` loads the inputs
    (a loop's variables, a run's feeds); each ``step`` runs one iteration (or the run) and
    returns the outputs (arrays valid until the next step). A replay serves one loop or run
    at a time (``lock``)."""

    __slots__ = ("programs", "copies", "outputs", "carried", "owned", "borrowed", "threads",
                 "lock", "parity", "pinned")

    def __init__(self, programs: tuple, copies: tuple, outputs: tuple,
                 carried: dict[int, tuple[np.ndarray, np.ndarray]],
                 owned: dict[int, np.ndarray], borrowed: dict[int, np.ndarray],
                 scratch: list[np.ndarray]) -> None:
        self.programs = programs  # per parity: the steps' functions, in order
        self.copies = copies  # per parity: (destination, source) after the steps
        self.outputs = outputs  # per parity: the arrays holding the body's outputs
        self.carried = carried  # loop variable -> its two buffers
        self.owned = owned  # loop variable passed on unchanged -> its buffer
        self.borrowed = borrowed  # read-only loop variable passed on unchanged -> itself
        self.threads = num_threads()  # what the C calls were made for
        self.lock = threading.Lock()
        self.parity = 0
        # every buffer of the replay, held once more: a step run with its checks may write
        # its output into an input only the run holds (``planner.reusable``, by reference
        # count), which a buffer held here never is
        self.pinned = [*scratch, *owned.values(), *(b for pair in carried.values() for b in pair)]

    def start(self, values: Sequence[Any]) -> bool:
        """Load the loop variables ``values``; False when the replay was made for others
        (other arrays passed on unchanged, other shapes) or another thread count."""
        if num_threads() != self.threads:
            return False
        for k, array in self.borrowed.items():
            if values[k] is not array:
                return False
        loads = [(buffer, values[k]) for k, (buffer, _) in self.carried.items()]
        loads += [(buffer, values[k]) for k, buffer in self.owned.items()]
        for buffer, value in loads:
            if (type(value) is not np.ndarray or value.shape != buffer.shape
                    or value.dtype != buffer.dtype):
                return False
        for buffer, value in loads:
            np.copyto(buffer, value)
        self.parity = 0
        return True

    def step(self) -> list[np.ndarray]:
        """One iteration: the body's outputs, in the replay's buffers."""
        parity = self.parity
        for run in self.programs[parity]:
            run()
        for destination, source in self.copies[parity]:
            np.copyto(destination, source)
        self.parity = 1 - parity
        return self.outputs[parity]

    def own(self, values: Sequence[Any]) -> list:
        """``values`` (loop variables a step returned) as arrays the caller may keep:
        copies of the replay's buffers."""
        return [value.copy() if k in self.carried or k in self.owned else value
                for k, value in enumerate(values)]


class ReplayCache:
    """The replay of a plan's bound program for one way of feeding it, kept while the plan
    keeps that program: ``carried`` leading inputs are loop variables (fetch k is variable
    k's next value), the others values it only reads (a loop's body: every input a
    variable; a session's run: none). ``borrow``: frozen inputs are used as they are (a
    loop's, which the graph's own constants feed); a run's feeds, which a caller could make
    writeable again and change, are always copied."""

    def __init__(self, carried: int, borrow: bool) -> None:
        self.carried, self.borrow = carried, borrow
        self.made: tuple | None = None  # (bound program, its replay or None)
        self.building = threading.Lock()

    def started(self, plan: Any, keys: Sequence, fetch_keys: Sequence,
                values: Sequence[Any], session: Any) -> LoopReplay | None:
        """The replay of ``plan``'s bound program (``session._Plan``), made for ``values``
        (fed as ``keys``) if need be, started on them and held by the caller (who releases
        its ``lock``); None: the plan does not run bound for these values yet (its first
        runs bind and plan it), its program may not be replayed, or another thread holds
        the replay."""
        bound, folded = plan.bound, plan.folded
        if (bound is None or bound.arena is None or bound.stale or folded is None
                or bound.steps is not folded[1]):
            return None
        made = self.made
        fresh = made is None or made[0] is not bound
        if fresh:
            made = self._build(plan, bound, keys, fetch_keys, values, session)
        found = None if made is None else made[1]
        if found is None or not found.lock.acquire(blocking=False):
            return None
        try:
            started = found.start(values)
        except BaseException:
            found.lock.release()
            raise
        if started:
            return found
        found.lock.release()
        if fresh:  # made for these very values, which it does not take
            return None
        self.made = None  # made for other read-only arrays: make it anew
        return self.started(plan, keys, fetch_keys, values, session)

    def _build(self, plan: Any, bound: Any, keys: Sequence, fetch_keys: Sequence,
               values: Sequence[Any], session: Any) -> tuple | None:
        """``(bound, its replay for values)``, kept; None when another thread is building
        or the values do not have the signature ``bound`` was made for."""
        if not self.building.acquire(blocking=False):
            return None
        try:
            if plan._signature(dict(zip(keys, values)), session) != bound.signature:
                return None
            self.made = (bound, build(bound, plan.folded[0], keys, fetch_keys, values,
                                      session, self.carried, self.borrow))
            return self.made
        finally:
            self.building.release()


def build(bound: executor.BoundProgram, constants: dict, input_keys: Sequence,
          fetch_keys: Sequence, values: Sequence[Any], session: Any,
          carried: int, borrow: bool = True) -> LoopReplay | None:
    """The replay of ``bound`` (planned: its first run done) for the input ``values``, fed
    as ``input_keys``, of which the first ``carried`` are loop variables: fetch k <
    ``carried`` is variable k's next value. ``constants``: the values of the plan's
    constant keys. ``borrow``: frozen inputs are used as they are, not copied. None where the
    program may not be replayed (see the module docstring) or its trial run raised (the run
    then goes as always, and raises in its place)."""
    program = bound.program
    if bound.preloads or bound.arena is None or not _replayable(program):
        return None
    index_of = {key: k for k, key in enumerate(input_keys)}
    registers: list = [None] * bound.size
    fixed: dict[int, Any] = {}  # registers that hold the same array in both parities
    for register, key in bound.preset:
        if key in index_of:
            registers[register] = values[index_of[key]]
        elif key in constants:
            registers[register] = fixed[register] = constants[key]
        else:
            return None
    for register, value in bound.folded:
        registers[register] = fixed[register] = value
    if not _trial(program, registers, session):
        return None
    written = {register for entry in program for register in entry[5]}
    fetched = {key: register for register, key in bound.fetches}
    sources = [_source(key, index_of, constants, fetched, written) for key in fetch_keys]
    if None in sources or any(type(v) is not np.ndarray for v in values):
        return None
    unchanged = {k for k in range(len(values))
                 if k >= carried or sources[k] == ("input", k)}
    borrowed = {k: values[k] for k in unchanged if borrow and _frozen(values[k])}
    owned = {k: np.array(values[k]) for k in unchanged if k not in borrowed}
    buffers = {}  # loop variable -> its two buffers
    for k in range(carried):
        if k in unchanged:
            continue
        after = _value(sources[k], registers, values)
        if after.shape != values[k].shape or after.dtype != values[k].dtype:
            return None  # a variable whose shape changes from iteration to iteration
        buffers[k] = (np.empty(values[k].shape, values[k].dtype),
                      np.empty(values[k].shape, values[k].dtype))
    for register, key in bound.preset:
        k = index_of.get(key)
        if k in unchanged:
            fixed[register] = borrowed[k] if k in borrowed else owned[k]
    program = _hoisted(program, registers, fixed, {register for register, value in fixed.items()
                                                   if _frozen(value)})
    sources = [("value", fixed[where]) if kind == "register" and where in fixed
               else (kind, where) for kind, where in sources]
    kept = {where for kind, where in sources if kind == "register"}  # read after a step
    offsets, size = _slab_layout(program, registers, kept)
    own = [registers[register] for entry in program for register in entry[5]
           if register not in offsets]
    if size + sum(v.nbytes for v in own) + 2 * sum(v.nbytes for v in values) > MAX_BYTES:
        return None
    scratch = _slab(offsets, size, registers)
    scratch.update({register: np.empty(registers[register].shape, registers[register].dtype)
                    for entry in program for register in entry[5]
                    if register not in offsets})
    made = [_parity(parity, program, sources, buffers, {**borrowed, **owned}, fixed, scratch,
                    bound.preset, index_of, session) for parity in ((0, 1) if buffers else (0,))]
    if not buffers:  # nothing changes from one run to the next: one program serves both
        made.append(made[0])
    return LoopReplay(*zip(*made), buffers, owned, borrowed, list(scratch.values()))


SLAB_ALIGN = 64  # bytes: each value's place in the slab starts on a cache line


def _slab_layout(program: list[tuple], registers: list, kept: set[int]
                 ) -> tuple[dict[int, int], int]:
    """Places in one byte slab for the values ``program`` writes (``registers`` holds one of
    each from the trial run), but the ``kept`` ones (read after the program) and empty ones:
    ``(register -> offset, slab size)``. Values share bytes where their lifetimes do not
    overlap, from the entry writing one to the last entry reading it: an entry's results
    never share its inputs' bytes (those are freed after it), and a place is taken best fit
    from the freed ones, else at the slab's end (the arena's rule, ``planner.plan_arena``)."""
    last = {register: i for i, entry in enumerate(program) for register in entry[4]}
    dying: dict[int, list[int]] = {}
    for register, i in last.items():
        dying.setdefault(i, []).append(register)
    offsets: dict[int, int] = {}
    sizes: dict[int, int] = {}
    free: list[tuple[int, int]] = []  # (size, offset) of each freed block
    size = 0
    for i, entry in enumerate(program):
        for register in entry[5]:
            nbytes = registers[register].nbytes
            if register in kept or not nbytes:
                continue
            need = -(-nbytes // SLAB_ALIGN) * SLAB_ALIGN
            fits = [block for block in free if block[0] >= need]
            if fits:
                block = min(fits)
                free.remove(block)
                offsets[register] = block[1]
                if block[0] > need:
                    free.append((block[0] - need, block[1] + need))
            else:
                offsets[register], size = size, size + need
            sizes[register] = need
        for register in [*dying.get(i, ()), *(r for r in entry[5] if r not in last)]:
            if register in offsets:
                free.append((sizes[register], offsets[register]))
    return offsets, size


def _slab(offsets: dict[int, int], size: int, registers: list) -> dict[int, np.ndarray]:
    """The arrays of :func:`_slab_layout`'s places: views of one slab aligned to
    :data:`SLAB_ALIGN`, each of its value's shape and dtype."""
    raw = np.empty(size + SLAB_ALIGN, np.uint8)
    start = -raw.ctypes.data % SLAB_ALIGN
    views = {}
    for register, offset in offsets.items():
        value = registers[register]
        at = start + offset
        views[register] = raw[at:at + value.nbytes].view(value.dtype).reshape(value.shape)
    return views


def _replayable(program: list[tuple]) -> bool:
    """No guard, no stateful op, no zero-copy concat, no ref input nor discarded output."""
    for kind, _, op, _, ins, outs, _, extra in program:
        if (kind == executor._GUARD or op is None or op.op_def.is_stateful
                or executor._NONE in ins or executor._TRASH in outs):
            return False
        if kind == executor._GENERIC and (extra.region is not None or extra.joins is not None
                                          or extra.refs):
            return False
    return True


def _hoisted(program: list[tuple], registers: list, fixed: dict, frozen: set[int]
             ) -> list[tuple]:
    """``program`` without the entries whose inputs are all ``frozen`` registers (or such
    entries' results): their trial results, copied and made read-only, join ``fixed``."""
    left = []
    for entry in program:
        if all(register in frozen for register in entry[4]):
            for register in entry[5]:
                value = np.array(registers[register])
                value.setflags(write=False)
                fixed[register] = value
                frozen.add(register)
        else:
            left.append(entry)
    return left


def _trial(program: list[tuple], registers: list, session: Any) -> bool:
    """Run ``program`` on ``registers`` as the bound loop does (no arena, nothing dropped),
    leaving every value in its register; False when a step raised."""
    try:
        for kind, call, op, ctx, ins, outs, *_ in program:
            args = [registers[i] for i in ins]
            results = (call(args, {}, session) if kind == executor._GENERIC
                       else call(op, args, ctx))
            for register, result in zip(outs, results):
                registers[register] = np.asarray(result)
    except Exception:  # noqa: BLE001 - the iteration itself raises it again, in its place
        return False
    return True


def _source(key: Any, index_of: dict, constants: dict, fetched: dict, written: set
            ) -> tuple[str, Any] | None:
    """Where a fetched value comes from: ``("input", k)``, ``("value", array)`` (a
    constant) or ``("register", r)`` (a step's result); None when from nowhere known."""
    if key in index_of:
        return "input", index_of[key]
    if key in constants:
        return "value", constants[key]
    register = fetched.get(key)
    return ("register", register) if register in written else None


def _value(source: tuple[str, Any], registers: list, values: Sequence) -> np.ndarray:
    """The trial's value of ``source``."""
    kind, where = source
    return values[where] if kind == "input" else where if kind == "value" else registers[where]


def _parity(parity: int, program: list[tuple], sources: list, carried: dict,
            invariants: dict, fixed: dict, scratch: dict, preset: tuple, index_of: dict,
            session: Any) -> tuple[list, list, list]:
    """The program of one parity: it reads the carried variables from their buffer
    ``parity`` and writes their next values into the other; with the copies that follow it
    and the arrays of the body's outputs."""
    arrays = dict(scratch)
    arrays.update(fixed)
    for register, key in preset:
        k = index_of.get(key)
        if k in carried:
            arrays[register] = carried[k][parity]
    claimed: set[int] = set()
    for k in carried:  # a step's result that is variable k's next value: written there
        kind, where = sources[k]
        if kind == "register" and where not in claimed:
            claimed.add(where)
            arrays[where] = carried[k][1 - parity]

    def of(source: tuple[str, Any]) -> np.ndarray:
        kind, where = source
        if kind == "input":
            return invariants[where] if where in invariants else carried[where][parity]
        return where if kind == "value" else arrays[where]

    copies = [(carried[k][1 - parity], of(sources[k])) for k in carried
              if of(sources[k]) is not carried[k][1 - parity]]
    outputs = [carried[j][1 - parity] if j in carried else of(source)
               for j, source in enumerate(sources)]
    steps = [_step(entry, [arrays[i] for i in entry[4]], [arrays[i] for i in entry[5]],
                   session) for entry in program]
    return steps, copies, outputs


def _step(entry: tuple, ins: list, outs: list, session: Any) -> Callable[[], None]:
    """The function running one entry on fixed arrays: its kernel's replay where one takes
    them, else the entry's call with its results copied into ``outs``."""
    kind, call, op, ctx, _, _, _, extra = entry
    if kind == executor._GENERIC:
        maker, context = replay_maker(extra.kernel, validating=True), extra.kernel_context
    else:
        maker, context = replay_maker(call), ctx
    replayed = maker(op, ins, outs, context) if maker is not None else None
    if replayed is not None:
        return replayed
    if kind == executor._GENERIC:
        return lambda: store_results(op, outs, call(ins, {}, session))
    if kind == executor._OUT:
        return lambda: store_results(op, outs, call(op, ins, ctx, out=outs[0]))
    return lambda: store_results(op, outs, call(op, ins, ctx))
