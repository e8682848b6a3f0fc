"""Peers in their own processes: a worker loop, its coordinator-side handle, interleaved medians.

Why processes: in one process two thread runtimes' idle threads compete for the same cores
(minigraph's worker pool beside PyTorch's OpenMP team; before minigraph's batch norm moved
to the pool, the first library to load libgomp also set its spin policy for the other). Each
framework therefore runs in a worker process started in the default environment; the
coordinator (which imports no framework) asks the workers for samples in turn, so every
ratio is measured in the same run.

The protocol is one line each way. The worker prints ``ready <json>`` once it is set up (its
own facts: losses, time to first step, ...), then answers ``time K`` (seconds for K calls,
after two untimed ones), ``cputime K`` (the same in the process's CPU seconds, all its
threads: with one thread, a measure that a busy machine's preemptions leave out), ``rss``
(peak resident bytes, ``VmHWM``), any command of its
``handlers`` (``name argument`` -> one line back) and stops at ``quit`` or end of input.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

WARMUP_CALLS = 2  # untimed calls before each sample: the pools wake up, caches refill


def peak_rss_bytes() -> int:
    """This process's peak resident set (``VmHWM`` of /proc/self/status), 0 where unknown."""
    try:
        with open("/proc/self/status") as file:
            for line in file:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def serve(run: Callable[[], object], ready: dict,
          handlers: dict[str, Callable[[str], str]] | None = None) -> None:
    """The worker's side: announce ``ready`` (a JSON object), then answer the coordinator on
    stdin/stdout until ``quit``."""
    handlers = handlers or {}
    print("ready " + json.dumps(ready), flush=True)
    for line in sys.stdin:
        command, _, argument = line.strip().partition(" ")
        if command in ("time", "cputime"):
            clock = time.perf_counter if command == "time" else time.process_time
            for _ in range(WARMUP_CALLS):
                run()
            start = clock()
            for _ in range(int(argument)):
                run()
            reply = str(clock() - start)
        elif command == "rss":
            reply = str(peak_rss_bytes())
        elif command in handlers:
            reply = handlers[command](argument)
        else:
            return
        print(reply, flush=True)


class Worker:
    """The coordinator's handle on one worker process (``argv`` after the interpreter).

    ``launched`` is the wall-clock time just before the process started, so the worker can
    report its time to first step from process start (``time.time() - launched``).
    """

    def __init__(self, argv: list[str], env: dict[str, str] | None = None,
                 name: str = "worker") -> None:
        self.name = name
        self.launched = time.time()
        self.process = subprocess.Popen(
            [sys.executable, *argv, "--launched", repr(self.launched)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env=dict(os.environ if env is None else env, TF_CPP_MIN_LOG_LEVEL="2"))
        line = self.process.stdout.readline()
        if not line.startswith("ready "):
            self.process.kill()
            self.process.wait()
            raise RuntimeError(f"the {name} worker did not start (exit status "
                               f"{self.process.returncode}; its stderr says why)")
        self.ready: dict = json.loads(line[len("ready "):])

    def ask(self, command: str) -> str:
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        reply = self.process.stdout.readline()
        if not reply:
            raise RuntimeError(f"the {self.name} worker died answering {command!r}")
        return reply.strip()

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.process.stdin.write("quit\n")
                self.process.stdin.close()
                self.process.wait(timeout=60)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()


def interleaved_samples(workers: dict[str, Worker], repeats: int, min_sample: float = 0.02,
                        settle: float = 0.005, command: str = "time") -> dict[str, list[float]]:
    """``repeats`` samples of seconds per call of each worker's ``run``, taken round-robin,
    the order rotating each round; before each sample the previous worker's threads get
    ``settle`` seconds to stop spinning, and a sample times k calls, k chosen so it lasts at
    least ``min_sample`` (as ``_common.time_interleaved`` does inside one process).
    ``command``: the worker's timing command (``time``: wall seconds, ``cputime``: the
    worker's CPU seconds; a worker may add others)."""
    counts = {name: max(1, int(min_sample / max(float(w.ask(f"{command} 1")), 1e-7)))
              for name, w in workers.items()}
    samples: dict[str, list[float]] = {name: [] for name in workers}
    names = list(workers)
    for r in range(repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:
            time.sleep(settle)
            samples[name].append(float(workers[name].ask(f"{command} {counts[name]}"))
                                 / counts[name])
    return samples


def interleaved_medians(workers: dict[str, Worker], repeats: int, min_sample: float = 0.02,
                        settle: float = 0.005, command: str = "time",
                        statistic: Callable[[list[float]], float] = statistics.median
                        ) -> dict[str, float]:
    """Per worker, ``statistic`` (the median; ``min`` on a busy machine) of its
    :func:`interleaved_samples` timed with ``command``."""
    samples = interleaved_samples(workers, repeats, min_sample, settle, command)
    return {name: statistic(values) for name, values in samples.items()}


# --------------------------------------------------------------- several callables per case


def serve_cases(factories: Callable[[dict], dict[str, Callable[[], Callable[[], object]]]],
                ready: dict) -> None:
    """:func:`serve` for a worker that times several callables per case (a kernel, a whole
    session run, ...): ``case JSON`` calls ``factories(spec)`` and builds each callable (one
    whose factory raises, a combination the framework refuses, is left out), answering the
    JSON list of their names; ``use NAME`` picks the one ``time`` runs."""
    current: dict = {"callables": {}, "run": None}

    def case(argument: str) -> str:
        built = {}
        for name, factory in factories(json.loads(argument)).items():
            try:
                built[name] = factory()
            except Exception:  # noqa: BLE001  the framework refuses this case
                continue
        current["callables"] = built
        return json.dumps(list(built))

    def use(name: str) -> str:
        current["run"] = current["callables"][name]
        return "ok"

    serve(lambda: current["run"](), ready, {"case": case, "use": use})


class CaseCallable:
    """One callable of a :func:`serve_cases` worker, as :func:`interleaved_samples` asks it:
    picks it, then asks."""

    def __init__(self, worker: Worker, name: str) -> None:
        self.worker, self.name = worker, name

    def ask(self, command: str) -> str:
        self.worker.ask(f"use {self.name}")
        return self.worker.ask(command)


def time_case(workers: dict[str, Worker], spec: dict, repeats: int, min_sample: float = 0.02,
              settle: float = 0.005) -> dict[str, float]:
    """Median seconds per call of every callable the :func:`serve_cases` workers build for
    ``spec``, sampled interleaved across all of them (:func:`interleaved_samples`)."""
    callables = {name: CaseCallable(w, name) for w in workers.values()
                 for name in json.loads(w.ask("case " + json.dumps(spec)))}
    samples = interleaved_samples(callables, repeats, min_sample, settle)
    return {name: statistics.median(values) for name, values in samples.items()}
