"""Training beside another multi-threaded numeric process: quiet vs contended wall time.

Two cases, each run quiet and then beside a competitor, in fresh processes (one per
configuration: thread settings are read when the kernels first run):

* ``demo``: the digits demo's training (``python -m minigraph demo``'s loop: the same graph,
  data order and per-epoch evaluation, ``--epochs`` epochs, BLAS on 1 thread), writing no
  files and drawing no plots;
* ``step``: ``benchmarks/train_step.py``'s minigraph training step (NHWC, batch 64),
  ``--steps`` steps back to back.

The competitor is the issue's "other ML process": PyTorch matmuls of 256x256 float32 on 2
threads with a 1 ms sleep after each (without PyTorch, numpy's BLAS on 2 threads with the same
duty cycle; the header says which). Every configuration is measured in the same run, in a
rotating order, and each cell is the median of ``--repeats`` runs.

    python benchmarks/contention.py [--epochs 4] [--steps 100] [--repeats 3] [--configs ...]

A configuration is a name and the environment its worker processes get (on top of this
process's environment, minus the OpenMP/minigraph variables it sets or clears):

* ``default``: nothing set: what a user gets (every kernel, batch norm's included, on
  minigraph's worker pool, one thread per CPU; no OpenMP runtime is loaded);
* ``threads-1``: ``MINIGRAPH_NUM_THREADS=1``: every kernel on the calling thread.

(Before batch norm moved to the worker pool, this benchmark also varied libgomp's wait policy,
``GOMP_SPINCOUNT`` and ``OMP_WAIT_POLICY``: see docs/performance.md for those results; those
variables no longer touch minigraph.)

On a shared machine, ``--wait-idle`` waits before each run until no other process is
runnable; run it under ``nice -n -10`` to keep other tenants' bursts out of both columns.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from _common import markdown_table  # noqa: E402

CPUS = os.cpu_count() or 1
# the variables a configuration controls: cleared first, then set from the configuration
# (the OpenMP ones too, for both processes: the competitor's PyTorch runs with its defaults)
CONTROLLED = ("MINIGRAPH_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS",
              "OMP_DYNAMIC")
CONFIGS: dict[str, dict[str, str]] = {
    "default": {},
    "threads-1": {"MINIGRAPH_NUM_THREADS": "1"},
}


# --------------------------------------------------------------------------------------------
# workers (run in child processes)


def _work_demo(epochs: int) -> float:
    """Seconds of the demo's training loop (graph build and data load included, as the
    demo's own timer counts them), writing nothing."""
    import numpy as np
    from threadpoolctl import threadpool_limits

    import minigraph as mg
    from minigraph.examples.train_digits_cnn import build, evaluate, load_digits, parse

    args = parse(["--epochs", str(epochs), "--no-plots", "--quiet"])
    with threadpool_limits(args.blas_threads, user_api="blas"):
        start = time.perf_counter()
        x_train, y_train, x_test, y_test = load_digits(args.seed)
        g = build(args)
        session = mg.ClientSession(g["root"], backend=args.backend)
        session.Run({}, [], targets=mg.train.global_variables_initializer(g["root"]))
        rng = np.random.default_rng(args.seed)
        for _ in range(args.epochs):
            order = rng.permutation(len(y_train))
            for begin in range(0, len(order), args.batch_size):
                index = order[begin:begin + args.batch_size]
                session.Run({g["images"]: x_train[index], g["labels"]: y_train[index]},
                            [g["loss"], g["accuracy"]], targets=g["step"])
            evaluate(session, g, x_test, y_test)
        return time.perf_counter() - start


def _work_step(steps: int) -> float:
    """Seconds of ``steps`` training steps of train_step.py's minigraph step (NHWC, Adam,
    the thread count of the configuration's environment)."""
    from _training_models import MODELS
    from _training_peers import make_step
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1, user_api="blas"):
        step, _ = make_step(MODELS["digits-adam"], "minigraph", threads=None, backend=None)
        for _ in range(5):  # warm: plans, buffers, the worker pool
            step()
        start = time.perf_counter()
        for _ in range(steps):
            step()
        return time.perf_counter() - start


def _compete() -> None:
    """The competitor: 256x256 matmuls on 2 threads with 1 ms sleeps, until killed."""
    try:
        import torch

        torch.set_num_threads(2)
        a, b = torch.randn(256, 256), torch.randn(256, 256)
        matmul = torch.mm
        limits = None
    except ImportError:
        import numpy as np
        from threadpoolctl import threadpool_limits

        limits = threadpool_limits(2, user_api="blas")
        a, b = np.random.rand(256, 256).astype("f4"), np.random.rand(256, 256).astype("f4")
        matmul = np.dot
    print("ready", flush=True)
    while True:
        matmul(a, b)
        time.sleep(0.001)
    del limits  # pragma: no cover


def competitor_kind() -> str:
    try:
        import torch  # noqa: F401

        return "PyTorch torch.mm 256x256 float32, torch.set_num_threads(2), 1 ms sleeps"
    except ImportError:
        return "numpy BLAS dot 256x256 float32, 2 BLAS threads, 1 ms sleeps (no PyTorch)"


# --------------------------------------------------------------------------------------------
# driver


def _environment(config: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in CONTROLLED}
    env.update(config)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


def running_others() -> int:
    """Runnable threads on the machine now, this one excluded (/proc/loadavg's 4th field)."""
    try:
        with open("/proc/loadavg") as file:
            return int(file.read().split()[3].split("/")[0]) - 1
    except (OSError, ValueError, IndexError):
        return 0


def wait_idle(limit: float) -> bool:
    """Wait (at most ``limit`` s) until nothing else ran in 5 looks 0.1 s apart: on a shared
    machine the "quiet" runs should be quiet. True if it got there."""
    deadline, calm = time.monotonic() + limit, 0
    while time.monotonic() < deadline:
        calm = calm + 1 if running_others() <= 0 else 0
        if calm >= 5:
            return True
        time.sleep(0.1)
    return False


def run_case(case: str, size: int, config: dict[str, str]) -> float:
    out = subprocess.run([sys.executable, __file__, "--worker", case, "--size", str(size)],
                         env=_environment(config), capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(f"worker {case} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])["seconds"]


class Competitor:
    def __enter__(self) -> Competitor:
        env = {k: v for k, v in os.environ.items() if k not in CONTROLLED}
        self.process = subprocess.Popen([sys.executable, __file__, "--worker", "compete"],
                                        stdout=subprocess.PIPE, text=True, env=env)
        self.process.stdout.readline()  # "ready": torch imported, threads started
        time.sleep(0.5)
        return self

    def __exit__(self, *exc) -> None:
        self.process.kill()
        self.process.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=4, help="demo epochs (default: 4)")
    parser.add_argument("--steps", type=int, default=100, help="train steps (default: 100)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per cell (default: 3)")
    parser.add_argument("--cases", nargs="+", default=["demo", "step"],
                        choices=["demo", "step"])
    parser.add_argument("--configs", nargs="+", default=["default", "threads-1"],
                        choices=sorted(CONFIGS), help="default: default threads-1")
    parser.add_argument("--quiet-only", action="store_true",
                        help="skip the contended runs (quiet speed of each configuration)")
    parser.add_argument("--wait-idle", type=float, default=20.0, metavar="S",
                        help="before each run wait up to S s for other processes to go idle "
                             "(default: %(default)s)")
    parser.add_argument("--worker", choices=["demo", "step", "compete"], help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker == "compete":
        _compete()
        return 0
    if args.worker:
        seconds = (_work_demo if args.worker == "demo" else _work_step)(args.size)
        print(json.dumps({"seconds": seconds}))
        return 0

    sizes = {"demo": args.epochs, "step": args.steps}
    quiet: dict[tuple[str, str], list[float]] = {}
    loud: dict[tuple[str, str], list[float]] = {}
    loads, idle = [], 0
    for r in range(args.repeats):
        names = args.configs[r % len(args.configs):] + args.configs[:r % len(args.configs)]
        for name in names:
            for case in args.cases:
                key = (case, name)
                idle += wait_idle(args.wait_idle)
                loads.append(os.getloadavg()[0])
                quiet.setdefault(key, []).append(run_case(case, sizes[case], CONFIGS[name]))
                if args.quiet_only:
                    loud.setdefault(key, []).append(float("nan"))
                else:
                    idle += wait_idle(args.wait_idle)
                    with Competitor():
                        loud.setdefault(key, []).append(
                            run_case(case, sizes[case], CONFIGS[name]))
                print(f"  repeat {r + 1}: {case:4s} {name:18s} quiet {quiet[key][-1]:6.2f} s"
                      f"  contended {loud[key][-1]:6.2f} s", file=sys.stderr, flush=True)
    rows = []
    for case in args.cases:
        for name in args.configs:
            q, c = statistics.median(quiet[(case, name)]), statistics.median(loud[(case, name)])
            ratio = c / q
            label = (f"{case} ({args.epochs} epochs)" if case == "demo"
                     else f"train step (x{args.steps})")
            if args.quiet_only:
                rows.append([label, name, f"{q:.2f}", "-", "-", "-"])
                continue
            rows.append([label, name, f"{q:.2f}", f"{c:.2f}", f"{ratio:.1f}x",
                         "yes" if ratio <= 3 else "**no**"])
    print(f"# Quiet vs beside a competitor ({competitor_kind()}); {CPUS} CPUs, median of "
          f"{args.repeats}; 1-min load average at the starts: "
          f"{min(loads):.1f}-{max(loads):.1f}; other processes idle before {idle} of "
          f"{len(loads) * (1 if args.quiet_only else 2)} runs\n")
    print(markdown_table(["case", "config", "quiet s", "contended s", "ratio",
                          "target <= 3x"], rows))
    for name in args.configs:
        print(f"\n`{name}`: " + (" ".join(f"{k}={v}" for k, v in CONFIGS[name].items())
                                 or "no minigraph variable set"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
