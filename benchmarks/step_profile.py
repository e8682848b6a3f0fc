"""Where a bound training step's time goes: each entry of the steady loop
(``executor.BoundProgram.program``) timed in place, and the step's wall time minus the sum
of its kernel calls (the executor's own Python, ``Session.Run`` around the loop included).

The step is ``train_peers.py``'s minigraph step (``_training_peers.make_step``). Kernel calls
are timed by wrapping each loop entry (a wrapper costs ~0.2 us), so the profile is that of
kernels in a real step (cold caches after the convolutions, the worker pool as it is), not
of each kernel alone. Per entry: the median over the runs; per step: the median of (wall
time - the run's sum of kernel times). RunMetadata is not used: a run that asks for it runs
unbound, with every check.

    python benchmarks/step_profile.py --model resnet8 [--steps 50] [--top 25]

``--model`` takes every model of ``train_peers.py`` (LeNet-5, VGG blocks, the MobileNet
stack, ResNet-8 at width 2x too). A noisy machine moves every number; compare two checkouts
(``PYTHONPATH=<checkout>``) in alternation, and prefer per-op medians to step times there;
on a machine shared with other busy processes a preempted call shows up as one slow sample
of some entry, so each table also gives the sum of the entries' minima (the step as if no
call had waited for a core).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _training_models import MODELS  # noqa: E402
from _training_peers import make_step  # noqa: E402


def _bound_program(session):
    programs = [plan.bound for plan, _ in session._plans.values()
                if plan.bound is not None and plan.bound.arena is not None]
    if len(programs) != 1:
        raise RuntimeError(f"expected one bound program, found {len(programs)}")
    return programs[0]


def _timed(call, key, times: dict):
    def timed(*args, **kwargs):
        start = time.perf_counter()
        result = call(*args, **kwargs)
        times[key].append(time.perf_counter() - start)
        return result

    return timed


def profile(model: str, steps: int, threads: int) -> tuple[dict, list[float], list[float], int]:
    """(per-entry kernel times by (op type, node name), step wall times, per-step wall time
    minus kernel time, entries in the loop)."""
    step, _ = make_step(MODELS[model], "minigraph", threads=threads)
    for _ in range(8):  # binds, plans the arena, warms up
        step()
    program = _bound_program(step.session)
    times: dict = defaultdict(list)
    program.program = [
        (entry[0], _timed(entry[1], (entry[2].type, entry[2].name) if entry[2] is not None
                          else ("(transfer)", ""), times), *entry[2:])
        for entry in program.program]
    walls, outside = [], []
    for _ in range(steps):
        before = sum(map(sum, times.values()))
        start = time.perf_counter()
        step()
        wall = time.perf_counter() - start
        walls.append(wall)
        outside.append(wall - (sum(map(sum, times.values())) - before))
    return times, walls, outside, len(program.program)


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="resnet8")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--top", type=int, default=25, help="entries listed one by one")
    args = parser.parse_args(argv)
    times, walls, outside, entries = profile(args.model, args.steps, args.threads)
    per_entry = {key: _median(values) for key, values in times.items()}
    by_type: dict = defaultdict(lambda: [0.0, 0, 0.0])
    for (op_type, name), seconds in per_entry.items():
        by_type[op_type][0] += seconds
        by_type[op_type][1] += 1
        by_type[op_type][2] += min(times[op_type, name])
    print(f"{args.model}: step median {_median(walls) * 1e3:.2f} ms over {args.steps} steps, "
          f"{entries} loop entries; wall - kernels: median {_median(outside) * 1e6:.0f} us, "
          f"min {min(outside) * 1e6:.0f} us")
    minima = sum(min(values) for values in times.values())
    print(f"sum of the entries' medians {sum(per_entry.values()) * 1e3:.2f} ms, of their "
          f"minima {minima * 1e3:.2f} ms")
    print("\n| op type | entries | us per step (sum of medians) | (sum of minima) |\n"
          "|---|---|---|---|")
    for op_type, (seconds, count, least) in sorted(by_type.items(), key=lambda kv: -kv[1][0]):
        print(f"| {op_type} | {count} | {seconds * 1e6:.1f} | {least * 1e6:.1f} |")
    print("\n| node | op type | us (median) |\n|---|---|---|")
    for (op_type, name), seconds in sorted(per_entry.items(), key=lambda kv: -kv[1])[:args.top]:
        print(f"| {name} | {op_type} | {seconds * 1e6:.1f} |")


if __name__ == "__main__":
    main()
