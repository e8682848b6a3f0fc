"""Run cases in forked worker processes.

A worker is forked from this (pre-imported) process and runs a batch of cases, for each
case every target in order, reporting ``start`` and ``done`` messages over a pipe. The parent
watches up to ``workers`` of them at once:

* no message for ``timeout`` seconds after a ``start``: that (case, target) hangs; the worker
  is killed and the rest of the batch goes on in a new one;
* the pipe closes while a (case, target) is started: the worker crashed (its signal is
  recorded); every case of the batch up to that one is rerun alone, one per process, so the
  crash is pinned to one case (a case that crashes only after others says so).

Under AddressSanitizer (tests/fuzz/sanitized.py: libasan in ``LD_PRELOAD``) the workers get no
address-space limit (ASan's shadow memory exceeds any) and write their stderr to a file, so a
crash's message carries the ASan / UBSan report.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import tempfile
import time
from collections import deque
from multiprocessing.connection import wait

from tests.fuzz.cases import Case, Outcome, execute

# A worker's address space: a case that needs more (a legal 4 GiB Tile of 2**31 halves) gets
# a clean ResourceExhaustedError at once instead of filling memory for seconds (a "hang" on
# a loaded machine); no bad-input check needs an output that large.
MEMORY_LIMIT = 4 << 30
SANITIZED = "libasan" in os.environ.get("LD_PRELOAD", "")
REPORT_CHARS = 6000


def _worker(cases: list[Case], targets: list[str], conn, stderr_path: str | None = None) -> None:
    import faulthandler

    faulthandler.disable()  # a crash is reported by the parent, not dumped to stderr
    if stderr_path:  # the sanitizer's report, for the parent to read
        os.dup2(os.open(stderr_path, os.O_WRONLY | os.O_APPEND), 2)
    try:
        import resource

        if SANITIZED:  # ASan's allocator_may_return_null + max_allocation_size_mb instead
            raise ValueError
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    except (ImportError, ValueError, OSError):
        pass
    for case in cases:
        for target in targets:
            conn.send(("start", case.index, target))
            outcome = execute(case, target)
            outcome.results = [_shrink(r) for r in outcome.results]
            try:
                conn.send(("done", case.index, target, outcome))
            except Exception as exc:  # noqa: BLE001 - an unpicklable result
                conn.send(("done", case.index, target, Outcome(
                    "other", "run", type(exc).__name__, f"result cannot be sent: {exc}")))
    conn.close()
    os._exit(0)


BIG = 1 << 24  # bytes: larger results go back as (shape, dtype) only


class BigResult:
    """A result too large to send back: only its shape and dtype."""

    def __init__(self, value) -> None:
        self.shape, self.dtype = value.shape, value.dtype


def _sanitizer_report(text: str) -> str:
    """' [summary line]\nreport' from a crashed worker's stderr (findings are deduplicated by a
    crash message's first line), or ''."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if "ERROR: AddressSanitizer" in line
              or "ERROR: LeakSanitizer" in line or ": runtime error:" in line]
    if not starts:
        return ""
    lines = lines[starts[0]:]
    summary = [line for line in lines if ": runtime error:" in line
               or line.startswith("SUMMARY:")]
    head = summary[0].removeprefix("SUMMARY: ").strip() if summary else lines[0].strip()
    report = "\n".join(lines)
    if len(report) > REPORT_CHARS:
        report = report[:REPORT_CHARS] + "\n[... report cut]"
    return f" [{head}]\n{report}"


def _shrink(value):
    return BigResult(value) if getattr(value, "nbytes", 0) > BIG else value


class _Job:
    def __init__(self, ctx, cases: list[Case], targets: list[str], solo: bool) -> None:
        self.cases, self.solo = cases, solo
        receive, send = ctx.Pipe(duplex=False)
        self.conn = receive
        self.stderr_path = None
        if SANITIZED:
            handle, self.stderr_path = tempfile.mkstemp(prefix="fuzz-worker-", suffix=".txt")
            os.close(handle)
        self.process = ctx.Process(target=_worker, args=(cases, targets, send, self.stderr_path),
                                   daemon=True)
        self.process.start()
        send.close()
        self.current: tuple[int, str] | None = None
        self.done_cases: list[int] = []
        self.last = time.monotonic()

    def stderr(self) -> str:
        """What the (ended) worker wrote to stderr when it was captured; removes the file."""
        if not self.stderr_path:
            return ""
        try:
            with open(self.stderr_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""
        finally:
            try:
                os.remove(self.stderr_path)
            except OSError:
                pass


def run_cases(cases: list[Case], targets: list[str], *, workers: int = 2, batch: int = 40,
              timeout: float = 10.0, progress=None) -> dict[tuple[int, str], Outcome]:
    """Run every case on every target; returns {(case.index, target): Outcome}."""
    ctx = multiprocessing.get_context("fork")
    by_index = {c.index: c for c in cases}
    queue: deque[tuple[list[Case], bool]] = deque(
        (cases[i:i + batch], False) for i in range(0, len(cases), batch))
    outcomes: dict[tuple[int, str], Outcome] = {}
    batch_crash: dict[tuple[int, str], Outcome] = {}
    active: list[_Job] = []

    def finish_rest(job: _Job, after: int, why: str) -> None:
        """Mark the other targets of the stuck case skipped; requeue the batch's rest."""
        position = [c.index for c in job.cases].index(after)
        for target in targets:
            outcomes.setdefault((after, target), Outcome("skipped", message=why))
        rest = job.cases[position + 1:]
        if rest:
            queue.appendleft((rest, job.solo))

    while queue or active:
        while queue and len(active) < workers:
            chunk, solo = queue.popleft()
            active.append(_Job(ctx, chunk, targets, solo))
        ready = wait([j.conn for j in active], timeout=1.0)
        now = time.monotonic()
        for job in list(active):
            if job.conn in ready:
                try:
                    message = job.conn.recv()
                except (EOFError, OSError):
                    message = None
                if message is not None:
                    job.last = now
                    if message[0] == "start":
                        job.current = (message[1], message[2])
                    else:
                        _, index, target, outcome = message
                        key = (index, target)
                        if job.solo and key in batch_crash and outcome.kind != "crash":
                            first = batch_crash[key]
                            outcome = Outcome("crash", first.phase, first.exc_type,
                                              f"{first.message}; alone the case gives "
                                              f"{outcome.kind} {outcome.exc_type}: "
                                              f"{outcome.message[:200]}")
                        outcomes[key] = outcome
                        job.current = None
                        if target == targets[-1]:
                            job.done_cases.append(index)
                            if progress:
                                progress(by_index[index])
                    continue
                # the worker is gone
                job.process.join(5)
                active.remove(job)
                report = _sanitizer_report(job.stderr())
                if job.current is None:
                    continue  # finished normally
                index, target = job.current
                code = job.process.exitcode
                sig = -code if code is not None and code < 0 else None
                text = (f"killed by signal {signal.Signals(sig).name}" if sig
                        else f"exited with status {code}")
                if job.solo or not job.done_cases:
                    outcomes[(index, target)] = Outcome("crash", "run", "", text + report)
                    finish_rest(job, index, f"{target} crashed")
                else:
                    earlier = job.done_cases[:]
                    batch_crash[(index, target)] = Outcome(
                        "crash", "run", "",
                        f"{text} after cases {earlier} in the same process{report}")
                    for i in earlier:
                        for t in targets:
                            outcomes.pop((i, t), None)
                    position = [c.index for c in job.cases].index(index)
                    rest = job.cases[position + 1:]
                    if rest:
                        queue.appendleft((rest, False))
                    for c in reversed(job.cases[:position + 1]):
                        queue.appendleft(([c], True))
            elif job.current is not None and now - job.last > timeout:
                index, target = job.current
                job.process.kill()
                job.process.join(5)
                job.conn.close()
                job.stderr()
                active.remove(job)
                outcomes[(index, target)] = Outcome(
                    "hang", "run", "", f"no answer within {timeout:g} s")
                finish_rest(job, index, f"{target} hung")
    return outcomes
