"""One training step of ResNet-8 and the digits CNN (by default; also LeNet-5, VGG blocks with
Adam, a MobileNet-style depthwise-separable stack and ResNet-8 at twice the width:
``_training_models.MODELS``): minigraph against PyTorch eager (NCHW and channels_last),
torch.compile (inductor) and TensorFlow tf.function with and without XLA, each framework in
its own worker process.

    python benchmarks/train_peers.py [--models resnet8 digits lenet5 vgg-adam mobilenet
        resnet8-wide] [--peers minigraph tf ...]
        [--minigraph-options "" off remapper=off] [--each-pass] [--threads 2]
        [--rounds 15] [--quick]

For each model the coordinator (which imports no framework) writes the initial weights and
one batch (numpy, ``_training_models.initial_arrays``) to an ``.npz`` that every worker
loads, starts the workers one after the other in the default environment (no BLAS or
OpenMP variable set; ``--threads`` threads each through the frameworks' own calls), and
samples them interleaved (``_workers.interleaved_medians``: rotating order, a 5 ms pause
before each sample, two untimed steps, then k steps lasting >= 20 ms). Every worker trains
on the same batch, so its first three losses must agree with the first row's: the table
shows them and the largest relative difference (tolerance ``LOSS_RTOL``).

minigraph gets one row per ``--minigraph-options`` entry (``""``: the default, every
optimizer pass on; ``off``: ``MINIGRAPH_OPTIMIZER=off``; ``name=off,...``: those
``mg.OptimizerOptions`` fields), and ``--each-pass`` adds a row with each boolean field of
``OptimizerOptions`` turned off alone.

Columns: ms/step (median); "x minigraph" = that row's time over the first row's (above 1:
minigraph is faster); GFLOP/s = the step's analytic FLOPs (2 x multiply-adds of every
convolution and matmul: forward, gradient of the input except the images', gradient of the
weights) over its time, and that as % of the float32 FMA peak ``_common.fma_peak`` measures
on as many threads in the same run; first step s = process start to the end of the first
step (imports, graph building, compilation included); peak RSS = the worker's ``VmHWM``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
from collections.abc import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import numpy as np  # noqa: E402
from _common import fma_peak, markdown_table, parse_options  # noqa: E402
from _training_models import MODELS, Trace, initial_arrays  # noqa: E402
from _training_peers import PEERS  # noqa: E402
from _workers import Worker, interleaved_medians  # noqa: E402

LOSS_RTOL = 1e-4  # float32 steps, different summation orders: measured differences ~1e-6
DEFAULT_PEERS = ["minigraph", "torch-nchw", "torch-channels-last", "torch-compile", "tf",
                 "tf-xla"]
ROOT = os.path.dirname(HERE)


@dataclasses.dataclass
class Row:
    label: str
    worker: Worker
    seconds: float = float("nan")
    rss: int = 0


def row_label(peer: str, options: str) -> str:
    label = PEERS[peer]
    if peer.startswith("minigraph") and options:
        label += f", optimizer {options}"
    return label


def start_workers(model: str, peers: list[str], option_sets: list[str], arrays_path: str,
                  threads: int, backend: str = "native") -> list[Row]:
    """One worker per (peer, minigraph options), started one after the other (so each one's
    time to first step has the machine to itself); a peer that cannot start (its framework
    missing) is reported on stderr and left out."""
    rows = []
    for peer in peers:
        for options in (option_sets if peer.startswith("minigraph") else [""]):
            _, env = parse_options(options)
            argv = [os.path.join(HERE, "_training_peers.py"), "--model", model, "--peer", peer,
                    "--arrays", arrays_path, "--threads", str(threads),
                    "--minigraph-options", options, "--backend", backend]
            environment = dict(os.environ, **env)
            environment["PYTHONPATH"] = os.pathsep.join(
                [ROOT] + [p for p in [os.environ.get("PYTHONPATH")] if p])
            label = row_label(peer, options)
            try:
                rows.append(Row(label, Worker(argv, environment, label)))
            except RuntimeError as error:
                print(f"skipped: {error}", file=sys.stderr, flush=True)
                continue
            print(f"started {label}: first step after "
                  f"{rows[-1].worker.ready['first_step_s']:.2f} s", file=sys.stderr, flush=True)
    return rows


def measure(model_name: str, peers: list[str], option_sets: list[str], threads: int,
            rounds: int, seed: int = 0, min_sample: float = 0.02,
            inspect: Callable[[list[Row]], None] | None = None, backend: str = "native"
            ) -> tuple[list[list[object]], float]:
    """(table rows, the FMA peak GFLOP/s); ``inspect(rows)`` may ask the workers more before
    they are closed."""
    model = MODELS[model_name]
    arrays = initial_arrays(model, seed)
    handle, arrays_path = tempfile.mkstemp(suffix=".npz", prefix=f"train_peers_{model_name}_")
    os.close(handle)
    try:
        np.savez(arrays_path, **arrays)
        rows = start_workers(model_name, peers, option_sets, arrays_path, threads, backend)
    finally:
        os.unlink(arrays_path)
    try:
        return _tabulate(model, rows, threads, rounds, min_sample, inspect)
    finally:
        for r in rows:
            r.worker.close()


def _tabulate(model, rows: list[Row], threads: int, rounds: int, min_sample: float,
              inspect) -> tuple[list[list[object]], float]:
    if not rows:
        raise RuntimeError("no worker started")
    medians = interleaved_medians({r.label: r.worker for r in rows}, rounds, min_sample)
    peak = fma_peak(threads)
    flops = Trace(model).flops
    reference = rows[0]
    reference_losses = np.array(reference.worker.ready["losses"])
    table = []
    for r in rows:
        r.seconds, r.rss = medians[r.label], int(r.worker.ask("rss"))
        losses = np.array(r.worker.ready["losses"])
        difference = float(np.max(np.abs(losses - reference_losses) / np.abs(reference_losses)))
        gflops = flops / r.seconds / 1e9
        table.append([
            r.label, f"{r.seconds * 1e3:.2f}", f"{r.seconds / reference.seconds:.2f}x",
            f"{gflops:.1f}", f"{100 * gflops / peak:.0f}%",
            f"{r.worker.ready['first_step_s']:.2f}", f"{r.rss / 2**20:.0f}",
            " ".join(f"{v:.6f}" for v in losses),
            f"{difference:.1e}" + ("" if difference <= LOSS_RTOL else " MISMATCH")])
    if inspect is not None:
        inspect(rows)
    return table, peak


HEADER = ["implementation", "ms/step", "x minigraph", "GFLOP/s", "% FMA peak", "first step s",
          "peak RSS MiB", "losses 1-3", "max rel. loss diff"]


def each_pass_options() -> list[str]:
    """``name=off`` for every boolean field of ``mg.OptimizerOptions`` (its passes)."""
    from minigraph.client.options import OptimizerOptions

    return [f"{field.name}=off" for field in dataclasses.fields(OptimizerOptions)
            if field.type in (bool, "bool")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS),
                        default=["resnet8", "digits"])
    parser.add_argument("--peers", nargs="+", choices=list(PEERS), default=DEFAULT_PEERS)
    parser.add_argument("--minigraph-options", nargs="*", default=["", "off"],
                        help='one minigraph row each: "" (default), off, name=on|off,...')
    parser.add_argument("--each-pass", action="store_true",
                        help="add a minigraph row per optimizer pass turned off alone")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--quick", action="store_true",
                        help="3 rounds of >= 5 ms samples: a smoke run, not a measurement")
    args = parser.parse_args(argv)
    option_sets = list(args.minigraph_options) or [""]
    if args.each_pass:
        option_sets += [o for o in each_pass_options() if o not in option_sets]
    rounds, min_sample = (3, 0.005) if args.quick else (args.rounds, 0.02)
    for model in args.models:
        table, peak = measure(model, args.peers, option_sets, args.threads, rounds,
                              min_sample=min_sample)
        print(f"## {MODELS[model].title}: {Trace(MODELS[model]).flops / 1e9:.3f} GFLOP/step, "
              f"{args.threads} threads, FMA peak {peak:.0f} GFLOP/s (measured now), "
              f"{rounds} rounds{' (quick: not a measurement)' if args.quick else ''}\n")
        print(markdown_table(HEADER, table) + "\n", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
