"""Step time of data-parallel digits-CNN training on 1, 2 and 4 processes (MPI, one machine).

For each global batch size, the same training step (SyncBatchNorm, one fused gradient
all-reduce, Adam) runs under ``mpiexec -n P`` for P in --processes; each rank takes
1/P of the global batch. ``plain`` is the single-process program (FusedBatchNormV3, no
distributed ops) on the whole batch: the baseline for the speedup column. Reported: the
median step time on rank 0, throughput, speedup over ``plain`` and over the same
data-parallel program on one process (the scaling), and the time rank 0 spent
waiting in collectives per step (communication plus waiting for the slowest rank).
Each process gets cores/P native-kernel threads and one BLAS thread; P above the core count
oversubscribes (this project's machine has 2 cores, so P = 4 runs 2 processes per core).

    python benchmarks/dp_scaling.py [--batches 64 256] [--processes 1 2 4] [--steps 30]
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


def mpiexec() -> str:
    local = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return local if os.path.exists(local) else "mpiexec"


def worker(args: argparse.Namespace) -> None:
    import numpy as np

    import minigraph as mg
    from minigraph import distributed as dist
    from minigraph import nn, ops
    from minigraph.examples.train_digits_cnn import DigitsCNN

    rank, size = dist.rank(), dist.size()
    root = mg.Scope.NewRootScope()
    images = ops.Placeholder(root, mg.float32, shape=[None, 8, 8, 1])
    labels = ops.Placeholder(root, mg.int32, shape=[None])
    model = DigitsCNN(root, args.data_format, seed=0)
    train = root.NewSubScope("train")
    if args.plain:
        logits = model(train, images, training=True, compute_dtype=mg.float32)
        loss = nn.sparse_softmax_cross_entropy(train, logits, labels)
        step = mg.train.Adam(0.003).minimize(train, loss, model.variables)
    else:
        dist.convert_sync_batch_norm(model)
        logits = model(train, images, training=True, compute_dtype=mg.float32)
        loss = nn.sparse_softmax_cross_entropy(train, logits, labels)
        step = dist.DataParallel(mg.train.Adam(0.003)).minimize(train, loss, model.variables)
    step += root.graph().get_collection(nn.UPDATE_OPS)
    session = mg.ClientSession(root)
    dist.initialize(session)
    rng = np.random.default_rng(rank)
    local = args.batch // size
    feeds = {images: rng.uniform(size=(local, 8, 8, 1)).astype(np.float32),
             labels: rng.integers(0, 10, local).astype(np.int32)}
    for _ in range(5):
        session.Run(feeds, [], targets=step)
    runtime = dist.init()
    calls, waited = runtime.collective_calls, runtime.collective_seconds
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        session.Run(feeds, [], targets=step)
        times.append(time.perf_counter() - start)
    if rank == 0:
        print("RESULT " + json.dumps({
            "size": size, "batch": args.batch, "local": local,
            "median": statistics.median(times),
            "collectives": (runtime.collective_calls - calls) / args.steps,
            "waited": (runtime.collective_seconds - waited) / args.steps}), flush=True)


def launch(processes: int, batch: int, steps: int, data_format: str, plain: bool) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               MKL_NUM_THREADS="1",
               MINIGRAPH_NUM_THREADS=str(max(1, (os.cpu_count() or 1) // processes)),
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    command = [mpiexec(), "-n", str(processes), sys.executable, "-W", "ignore",
               os.path.abspath(__file__), "--worker", "--batch", str(batch), "--steps",
               str(steps), "--data-format", data_format] + (["--plain"] if plain else [])
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")
    return json.loads(lines[-1][len("RESULT "):])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3,
                        help="repeat every configuration, interleaved; report the best round")
    parser.add_argument("--data-format", choices=["NHWC", "NCHW"], default="NHWC")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--plain", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=64, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    cores = os.cpu_count() or 1
    configs = [(batch, processes) for batch in args.batches for processes in
               [0] + args.processes]  # 0: the plain single-process program
    best: dict[tuple[int, int], dict] = {}
    load_before = os.getloadavg()[0]
    for _ in range(args.rounds):
        for batch, processes in configs:
            result = launch(max(processes, 1), batch, args.steps, args.data_format,
                            plain=processes == 0)
            key = (batch, processes)
            if key not in best or result["median"] < best[key]["median"]:
                best[key] = result
    print(f"digits CNN training step (Adam, {args.data_format}) on {cores} cores: rank 0's "
          f"median of {args.steps} steps, best of {args.rounds} interleaved rounds "
          f"(load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after)\n")
    rows = []
    for batch, processes in configs:
        result = best[(batch, processes)]
        base = best[(batch, 0)]["median"]
        one = best.get((batch, 1), {}).get("median")
        if processes == 0:
            label, wait, scaling = "plain: 1 process, FusedBatchNormV3", "-", "-"
        else:
            label = f"{processes} process{'es' if processes > 1 else ''}, sync BN + DP" + (
                " (oversubscribed)" if processes > cores else "")
            wait = f"{result['waited'] * 1e3:.2f} ({result['collectives']:.0f})"
            scaling = f"{one / result['median']:.2f}" if one else "-"
        rows.append([label, batch, result["local"], f"{result['median'] * 1e3:.2f}",
                     f"{batch / result['median']:.0f}", f"{base / result['median']:.2f}",
                     scaling, wait])
    print(markdown_table(["run", "global batch", "per-rank batch", "step ms", "images/s",
                          "vs plain", "vs 1 process sync BN + DP",
                          "collective wait ms/step (calls)"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
