"""Run each case in its own forked child, with a memory limit: crash, hang and memory are
pinned to the case that caused them.

``run_each(items, work, ...)`` forks one child per item (up to ``workers`` at once) from
this pre-imported process. The child limits its address space (``RLIMIT_AS``: what it
already maps plus ``memory_limit`` bytes), runs ``work(item)``, and sends back its result
with the growth of its peak resident memory since the fork (``VmHWM``, reset at the
fork: a forked child inherits its parent's high-water mark, far above what it uses). The parent
records, per item:

* ``("done", result, peak_growth_bytes)``;
* ``("crash", "killed by signal SIGSEGV")`` when the child dies without answering;
* ``("hang", "no answer within 20 s")`` when it runs past ``timeout`` (it is killed).

A ``MemoryError`` the limit causes surfaces inside ``work`` as an exception its caller
classifies (tests/fuzz/hostile.py: the ``memory`` column).
"""

from __future__ import annotations

import os
import pickle
import resource
import select
import signal
import time
from collections.abc import Callable, Sequence
from typing import Any

HEADER_BYTES = 8


def _mapped_bytes() -> int:
    """This process's virtual size (what RLIMIT_AS counts)."""
    try:
        with open("/proc/self/statm") as file:
            return int(file.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):  # pragma: no cover - not Linux
        return 0


def _peak_resident_bytes() -> int:
    """This process's resident high-water mark (``VmHWM``; ``ru_maxrss`` off Linux)."""
    try:
        with open("/proc/self/status") as file:
            for line in file:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):  # pragma: no cover - not Linux
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _reset_peak() -> None:
    """Start the high-water mark from the current resident size (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as file:
            file.write("5")
    except OSError:  # pragma: no cover - not Linux, or not allowed: growth is then a floor
        pass


def _child(item: Any, work: Callable[[Any], Any], write_end: int, memory_limit: int) -> None:
    import faulthandler

    faulthandler.disable()  # a crash is the parent's finding, not a dump on stderr
    try:
        limit = _mapped_bytes() + memory_limit
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ValueError, OSError):  # pragma: no cover - a hard limit below ours
        pass
    _reset_peak()
    base = _peak_resident_bytes()
    try:
        result = work(item)
    except BaseException as exc:  # noqa: BLE001 - work classifies; this is a last resort
        result = ("harness", type(exc).__name__, str(exc)[:500])
    growth = _peak_resident_bytes() - base
    try:
        data = pickle.dumps((result, growth))
    except Exception as exc:  # noqa: BLE001 - an unpicklable result
        data = pickle.dumps((("harness", type(exc).__name__, str(exc)[:500]), growth))
    view = memoryview(len(data).to_bytes(HEADER_BYTES, "little") + data)
    while view:
        written = os.write(write_end, view)
        view = view[written:]
    os.close(write_end)


class _Running:
    def __init__(self, index: int, pid: int, read_end: int) -> None:
        self.index, self.pid, self.read_end = index, pid, read_end
        self.started = time.monotonic()
        self.data = bytearray()


def run_each(items: Sequence[Any], work: Callable[[Any], Any], *, workers: int = 2,
             timeout: float = 20.0, memory_limit: int = 3 << 30,
             progress: Callable[[int], None] | None = None) -> list[tuple]:
    """``work(item)`` for every item, each in a fresh forked child; returns one record per
    item, in order (see the module docstring)."""
    records: list[tuple | None] = [None] * len(items)
    pending = list(range(len(items)))[::-1]
    running: dict[int, _Running] = {}

    def finish(job: _Running, record: tuple) -> None:
        os.close(job.read_end)
        del running[job.read_end]
        records[job.index] = record
        if progress:
            progress(job.index)

    while pending or running:
        while pending and len(running) < workers:
            index = pending.pop()
            read_end, write_end = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child
                os.close(read_end)
                code = 0
                try:
                    _child(items[index], work, write_end, memory_limit)
                except BaseException:  # noqa: BLE001 - never return into the parent's loop
                    code = 70
                os._exit(code)
            os.close(write_end)
            running[read_end] = _Running(index, pid, read_end)
        ready, _, _ = select.select(list(running), [], [], 0.5)
        for read_end in ready:
            job = running[read_end]
            chunk = os.read(read_end, 1 << 20)
            if chunk:
                job.data += chunk
                continue
            _, status = os.waitpid(job.pid, 0)
            if len(job.data) > HEADER_BYTES:
                result, growth = pickle.loads(bytes(job.data[HEADER_BYTES:]))
                finish(job, ("done", result, growth))
            elif os.WIFSIGNALED(status):
                name = signal.Signals(os.WTERMSIG(status)).name
                finish(job, ("crash", f"killed by signal {name}"))
            else:
                finish(job, ("crash", f"exited with status {os.WEXITSTATUS(status)} without "
                                      f"an answer"))
        now = time.monotonic()
        for job in list(running.values()):
            if now - job.started > timeout:
                os.kill(job.pid, signal.SIGKILL)
                os.waitpid(job.pid, 0)
                finish(job, ("hang", f"no answer within {timeout:g} s"))
    return records  # type: ignore[return-value]
