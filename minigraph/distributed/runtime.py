"""The MPI runtime behind ``minigraph.distributed``: one communicator, collectives with deadlines.

mpi4py is imported here, lazily, on the first call that needs the communicator (nothing else
in minigraph imports it), and only when an MPI launcher started the process (it sets
``PMI_RANK``, ``PMIX_RANK``, ``OMPI_COMM_WORLD_RANK`` or ``MV2_COMM_WORLD_RANK``) or
``$MINIGRAPH_MPI=1`` asks for it (``0`` forbids it). Otherwise the process is a single
replica, rank 0 of 1, every collective is the identity, and MPI is never initialized. If a
launcher started several processes but mpi4py is missing, :class:`UnavailableError` says to
install the ``minigraph[mpi]`` extra instead of silently training N unsynchronized copies.

Every collective is non-blocking (``Iallreduce`` / ``Iallgather`` / ``Ibcast`` /
``Ibarrier``) and completed by a polling loop with a deadline: ``timeout`` seconds, default
``$MINIGRAPH_COLLECTIVE_TIMEOUT`` (60 s). When a peer dies, raises, hangs, or runs different
collectives, the ranks still waiting raise :class:`UnavailableError` naming the collective,
their rank and the timeout, instead of hanging forever. The communicator is unusable after
that (the abandoned request may still complete later), so every later collective raises at
once, and the process calls ``MPI_Abort`` at exit rather than ``MPI_Finalize`` (which could
wait for the dead peer).

In a job of more than one process, :func:`init` also installs a ``sys.excepthook`` that
prints the traceback and then calls ``MPI_Abort``: a rank raising in user code (or
uncaught ``UnavailableError``) ends the whole job at once instead of leaving the others
blocked in their next collective. ``init(abort_on_exception=False)`` leaves the hook alone.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
import traceback
from typing import Any

import ml_dtypes
import numpy as np

from minigraph.framework.errors import InvalidArgumentError, UnavailableError

ENV_TIMEOUT = "MINIGRAPH_COLLECTIVE_TIMEOUT"
ENV_MPI = "MINIGRAPH_MPI"
DEFAULT_TIMEOUT = 60.0
# Launchers that start N copies of a program say so in the environment (MPICH/Hydra, Intel
# MPI, Slurm's PMI2: PMI_*; PMIx launchers: PMIX_*; Open MPI: OMPI_*; MVAPICH2: MV2_*).
_LAUNCHER_RANK_VARS = ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK")
_LAUNCHER_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")
# Polling: MPI_Test with sched_yield in between (the waiting rank hands its core to any
# runnable process, which matters when ranks oversubscribe the cores, and otherwise polls
# as fast as a blocking call) for up to _YIELD_SECONDS, then sleeps doubling from 50 us to
# 1 ms, so that a rank waiting long for a slow peer stops burning a core.
_YIELD_SECONDS = 0.05
_MIN_SLEEP, _MAX_SLEEP = 5e-5, 1e-3
_CLOCK_EVERY = 32  # polls between clock reads
# Before MPI_Abort: time for the launcher to forward what this rank just wrote (Hydra kills
# its proxies on abort, and output still in their pipes is lost).
_ABORT_GRACE_SECONDS = 1.0
# Reductions MPI does natively; float16 / bfloat16 are reduced in float32 and rounded back.
_MPI_NATIVE = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int32),
               np.dtype(np.int64))
_HALF_FLOATS = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))
MERGE_OPS = ("Add", "Mean")


class Runtime:
    """The process's view of the job: communicator, rank, size, and failure state."""

    def __init__(self, mpi: Any, comm: Any) -> None:
        self.MPI = mpi
        self.comm = comm
        self.rank = 0 if comm is None else comm.Get_rank()
        self.size = 1 if comm is None else comm.Get_size()
        self.broken: str | None = None  # why the communicator can no longer be used
        self.abandoned: list = []  # requests (and their buffers) that never completed
        self.collective_calls = 0  # counters for benchmarks: collectives completed...
        self.collective_seconds = 0.0  # ...and the wall time spent waiting in them

    def __repr__(self) -> str:
        backend = "mpi4py" if self.comm is not None else "no MPI"
        return f"<minigraph.distributed runtime: rank {self.rank} of {self.size} ({backend})>"


_runtime: Runtime | None = None
_lock = threading.Lock()
_previous_excepthook = None


def _launcher_size() -> int:
    for name in _LAUNCHER_SIZE_VARS:
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 1


def _wants_mpi() -> bool:
    setting = os.environ.get(ENV_MPI, "").strip()
    if setting in ("0", "1"):
        return setting == "1"
    if setting:
        raise InvalidArgumentError(f"${ENV_MPI} must be 0 or 1, got {setting!r}")
    return any(name in os.environ for name in _LAUNCHER_RANK_VARS)


def _import_mpi(force: bool = False):
    if not (force or _wants_mpi()):
        return None
    try:
        from mpi4py import MPI
    except ImportError:
        return None
    return MPI


def init(comm: Any = None, *, abort_on_exception: bool = True) -> Runtime:
    """Start (once) and return the runtime; ``comm`` replaces the communicator (default
    ``MPI.COMM_WORLD``). Called implicitly by every function that needs it."""
    global _runtime
    if _runtime is not None and comm is None:  # the common case, on every collective
        return _runtime
    with _lock:
        if _runtime is not None and comm is None:
            return _runtime
        mpi = _import_mpi(force=comm is not None)
        if mpi is None:
            if comm is not None:
                raise UnavailableError("minigraph.distributed.init: a communicator was given "
                                       "but mpi4py is not installed")
            launched = _launcher_size()
            if launched > 1 or os.environ.get(ENV_MPI) == "1":
                raise UnavailableError(
                    f"minigraph.distributed: this process is one of {launched} started by an "
                    f"MPI launcher (or ${ENV_MPI}=1), but mpi4py is not installed; install the "
                    f"extra: pip install 'minigraph[mpi]'")
            _runtime = Runtime(None, None)
            return _runtime
        _runtime = Runtime(mpi, comm if comm is not None else mpi.COMM_WORLD)
        if _runtime.size > 1:
            if abort_on_exception:
                install_excepthook()
            atexit.register(_abort_if_broken)
        return _runtime


def rank() -> int:
    """This process's rank in the job (0 without MPI)."""
    return init().rank


def size() -> int:
    """The number of processes (replicas) in the job (1 without MPI)."""
    return init().size


def is_chief() -> bool:
    """Whether this is rank 0: the one that prints progress and writes checkpoints."""
    return rank() == 0


def timeout(value: float | None = None) -> float:
    """The collective timeout in seconds: ``value`` when given and > 0, else
    ``$MINIGRAPH_COLLECTIVE_TIMEOUT``, else 60."""
    if value:
        return float(value)
    text = os.environ.get(ENV_TIMEOUT, "").strip()
    if not text:
        return DEFAULT_TIMEOUT
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds > 0 or seconds == float("inf"):
        raise InvalidArgumentError(f"${ENV_TIMEOUT} must be a positive number of seconds, "
                                   f"got {text!r}")
    return seconds


# ----------------------------------------------------------------------------- failures


def install_excepthook() -> None:
    """Make an uncaught exception on any rank end the whole job: print it, then MPI_Abort."""
    global _previous_excepthook
    if _previous_excepthook is not None:
        return
    _previous_excepthook = sys.excepthook

    def abort_on_exception(exc_type, exc, tb):
        rt = _runtime
        if rt is None or rt.comm is None or rt.size == 1:
            _previous_excepthook(exc_type, exc, tb)
            return
        where = f"rank {rt.rank} of {rt.size}"
        if _previous_excepthook is sys.__excepthook__:  # one write: ranks interleave less
            text = "".join(traceback.format_exception(exc_type, exc, tb))
            sys.stderr.write(f"[{where}] {text}")
        else:
            _previous_excepthook(exc_type, exc, tb)
        sys.stderr.write(f"minigraph.distributed: {where} stopped on an uncaught "
                         f"{exc_type.__name__}; calling MPI_Abort so that the other ranks "
                         f"stop instead of waiting for it\n")
        _abort(rt)

    sys.excepthook = abort_on_exception


def _abort(rt: Runtime) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    time.sleep(_ABORT_GRACE_SECONDS)
    rt.comm.Abort(1)


def _abort_if_broken() -> None:
    """At exit after a failed collective: MPI_Finalize could wait for the dead peer."""
    rt = _runtime
    if rt is not None and rt.broken and rt.comm is not None:
        sys.stderr.write(f"minigraph.distributed: {_where(rt)} exits after a failed "
                         f"collective; calling MPI_Abort\n")
        _abort(rt)


def _where(rt: Runtime) -> str:
    return f"rank {rt.rank} of {rt.size}"


def _wait(rt: Runtime, request: Any, what: str, seconds: float, buffers: tuple) -> None:
    """Poll ``request`` until it completes; raise UnavailableError after ``seconds``."""
    start = time.monotonic()
    deadline = start + seconds
    yield_until = start + min(_YIELD_SECONDS, seconds)
    polls, delay = 0, _MIN_SLEEP
    try:
        while not request.Test():
            polls += 1
            if polls % _CLOCK_EVERY:
                os.sched_yield()
                continue
            now = time.monotonic()
            if now >= deadline:
                rt.abandoned.append((request, buffers))
                rt.broken = (f"{what} timed out after {seconds:g} s on {_where(rt)}: a peer "
                             f"rank died, raised, is stuck, or runs different collectives "
                             f"(every rank must run the same collectives in the same order); "
                             f"raise ${ENV_TIMEOUT} if a step legitimately takes longer")
                raise UnavailableError(rt.broken)
            if now < yield_until:
                os.sched_yield()
            else:
                time.sleep(delay)
                delay = min(delay * 2, _MAX_SLEEP)
    except rt.MPI.Exception as exc:
        rt.abandoned.append((request, buffers))
        rt.broken = (f"{what} failed on {_where(rt)}: {exc.Get_error_string().strip()} "
                     f"(a peer rank probably died, or the ranks disagree on the tensor shape)")
        raise UnavailableError(rt.broken) from None
    rt.collective_calls += 1
    rt.collective_seconds += time.monotonic() - start


def _check_usable(rt: Runtime, what: str) -> None:
    if rt.broken:
        raise UnavailableError(f"{what} on {_where(rt)}: the communicator is unusable after "
                               f"an earlier failure: {rt.broken}")


def _reducible(array: np.ndarray) -> np.ndarray:
    """A contiguous buffer MPI can reduce: float16/bfloat16 go through float32, other
    integers through int64."""
    array = np.asarray(array)
    if array.dtype not in _MPI_NATIVE:
        if array.dtype in _HALF_FLOATS:
            array = array.astype(np.float32)
        elif array.dtype.kind in "iu":
            array = array.astype(np.int64)
        else:
            raise InvalidArgumentError(f"cannot all-reduce a tensor of dtype {array.dtype}")
    return np.asarray(array, order="C")  # keeps 0-d (ascontiguousarray does not)


def all_reduce(value: np.ndarray, merge_op: str = "Add", *, what: str = "all_reduce",
               timeout_seconds: float | None = None) -> np.ndarray:
    """Element-wise sum (``"Add"``) or mean (``"Mean"``) of ``value`` over all ranks.

    Every rank gets the same result, with ``value``'s dtype and shape. float16 and bfloat16
    are summed in float32. The mean of integers is floor-divided.
    """
    if merge_op not in MERGE_OPS:
        raise InvalidArgumentError(f"{what}: merge_op must be one of {MERGE_OPS}, got "
                                   f"{merge_op!r}")
    value = np.asarray(value)
    rt = init()
    if rt.size == 1:
        return value.copy()
    _check_usable(rt, what)
    send = _reducible(value)
    receive = np.empty_like(send)
    seconds = timeout(timeout_seconds)
    name = f"{what} (Iallreduce of {send.size} {send.dtype.name}, {merge_op})"
    request = rt.comm.Iallreduce(send, receive, op=rt.MPI.SUM)
    _wait(rt, request, name, seconds, (send, receive))
    if merge_op == "Mean":
        receive = receive / rt.size if receive.dtype.kind == "f" else receive // rt.size
    return receive.astype(value.dtype, copy=False).reshape(value.shape)


def all_gather(value: np.ndarray, *, what: str = "all_gather",
               timeout_seconds: float | None = None) -> np.ndarray:
    """``[size, *value.shape]``: every rank's ``value`` (all ranks must pass the same shape)."""
    value = np.array(value, order="C")  # a copy, 0-d kept
    rt = init()
    if rt.size == 1:
        return value[None]
    _check_usable(rt, what)
    receive = np.empty((rt.size,) + value.shape, value.dtype)
    seconds = timeout(timeout_seconds)
    name = f"{what} (Iallgather of {value.size} {value.dtype.name} per rank)"
    request = rt.comm.Iallgather(value, receive)
    _wait(rt, request, name, seconds, (value, receive))
    return receive


def broadcast(value: np.ndarray, root: int = 0, *, what: str = "broadcast",
              timeout_seconds: float | None = None) -> np.ndarray:
    """Rank ``root``'s ``value`` on every rank (the others pass a buffer of the same shape
    and dtype, whose contents are ignored)."""
    rt = init()
    buffer = np.array(value, copy=True, order="C")
    if rt.size == 1:
        return buffer
    _check_usable(rt, what)
    seconds = timeout(timeout_seconds)
    raw = buffer.reshape(-1).view(np.uint8)  # any dtype (bfloat16 too), as bytes
    name = f"{what} (Ibcast of {raw.size} bytes from rank {root})"
    request = rt.comm.Ibcast(raw, root=root)
    _wait(rt, request, name, seconds, (buffer,))
    return buffer


def barrier(*, what: str = "barrier", timeout_seconds: float | None = None) -> None:
    """Wait until every rank has reached this point (with the collective timeout)."""
    rt = init()
    if rt.size == 1:
        return
    _check_usable(rt, what)
    request = rt.comm.Ibarrier()
    _wait(rt, request, f"{what} (Ibarrier)", timeout(timeout_seconds), ())
