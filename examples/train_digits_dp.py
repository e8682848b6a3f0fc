"""Train the digits CNN data-parallel over MPI, with synchronized batch norm.

    mpiexec -n 2 .venv/bin/python examples/train_digits_dp.py
    mpiexec -n 4 .venv/bin/python examples/train_digits_dp.py --epochs 5

The model and data are those of ``minigraph/examples/train_digits_cnn.py`` (single process);
here every rank builds the same graph with SyncBatchNorm layers (batch statistics of the
GLOBAL batch) and a DataParallel optimizer (one fused all-reduce of all gradients per step).
Each global batch of ``--batch-size`` examples is split across the ranks (shards differ by
at most one example). Each rank's loss is sum(its examples' losses) / global batch size and
the gradients are summed over the ranks, so every step is the step the single-process
program would take on the same global batch, up to float rounding, even with unequal
shards. Rank 0 initializes the variables and broadcasts them, prints the progress and
the test accuracy, and writes ``runs/<name>/checkpoint.npz`` (the checkpoint has the
single-process program's variable names; rank 0 reloads it into that program's graph and
scores the test set as a check).

Failures: a rank that raises ends the job (MPI_Abort from the excepthook); a rank that dies
or hangs makes the others raise UnavailableError after $MINIGRAPH_COLLECTIVE_TIMEOUT s.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time

import numpy as np

import minigraph as mg
from minigraph import distributed as dist
from minigraph import nn, ops
from minigraph.examples import train_digits_cnn as single
from minigraph.examples.train_digits_cnn import DigitsCNN, load_digits


def build(args: argparse.Namespace) -> dict:
    root = mg.Scope.NewRootScope()
    images = ops.Placeholder(root.WithOpName("images"), mg.float32, shape=[None, 8, 8, 1])
    labels = ops.Placeholder(root.WithOpName("labels"), mg.int32, shape=[None])
    inverse_batch = ops.Placeholder(root.WithOpName("inverse_global_batch"), mg.float32,
                                    shape=[])
    model = dist.convert_sync_batch_norm(DigitsCNN(root, args.data_format, args.seed))
    compute_dtype = mg.as_dtype(args.dtype)
    train = root.NewSubScope("train")
    logits = model(train, images, training=True, compute_dtype=compute_dtype)
    losses = ops.SparseSoftmaxCrossEntropyWithLogits(train, logits, labels).loss
    loss_sum = ops.Sum(train, losses, [0])
    loss = ops.Mul(train, loss_sum, inverse_batch)  # this rank's share of the global mean
    hits = ops.Sum(train, ops.Cast(train, ops.Equal(train, ops.ArgMax(
        train, logits, 1, output_type=mg.int32), labels), DstT=mg.float32), [0])
    optimizer = (mg.train.Adam(args.learning_rate) if args.optimizer == "adam"
                 else mg.train.Momentum(args.learning_rate, 0.9))
    step = dist.DataParallel(optimizer, merge_op="Add").minimize(train, loss, model.variables)
    step += root.graph().get_collection(nn.UPDATE_OPS)
    evaluation = root.NewSubScope("eval")
    eval_logits = model(evaluation, images, training=False, compute_dtype=compute_dtype)
    eval_loss_sum = ops.Sum(evaluation, ops.SparseSoftmaxCrossEntropyWithLogits(
        evaluation, eval_logits, labels).loss, [0])
    eval_hits = ops.Sum(evaluation, ops.Cast(evaluation, ops.Equal(evaluation, ops.ArgMax(
        evaluation, eval_logits, 1, output_type=mg.int32), labels), DstT=mg.float32), [0])
    return {"root": root, "images": images, "labels": labels, "inverse_batch": inverse_batch,
            "loss_sum": loss_sum, "hits": hits, "step": step, "eval_loss_sum": eval_loss_sum,
            "eval_hits": eval_hits}


def shard(indices: np.ndarray) -> np.ndarray:
    """This rank's part of ``indices`` (np.array_split: sizes differ by at most one)."""
    return np.array_split(indices, dist.size())[dist.rank()]


def evaluate(session: mg.ClientSession, g: dict, x: np.ndarray, y: np.ndarray
             ) -> tuple[float, float]:
    """(mean loss, accuracy) over the whole set: each rank scores its shard, one all-reduce."""
    mine = shard(np.arange(len(y)))
    loss_sum, hits = session.Run({g["images"]: x[mine], g["labels"]: y[mine]},
                                 [g["eval_loss_sum"], g["eval_hits"]])
    loss_sum, hits = dist.all_reduce(np.array([loss_sum, hits], np.float64),
                                     what="evaluate")
    return float(loss_sum / len(y)), float(hits / len(y))


def train(args: argparse.Namespace) -> dict:
    start = time.perf_counter()
    chief = dist.is_chief()
    x_train, y_train, x_test, y_test = load_digits(args.seed)
    g = build(args)
    session = mg.ClientSession(g["root"], backend=args.backend)
    run_dir = os.path.join(args.out, args.name)
    checkpoint = os.path.join(run_dir, "checkpoint.npz")
    saver = dist.Saver(g["root"])
    if args.resume and os.path.exists(checkpoint):
        saver.restore(session, checkpoint)  # rank 0 reads, everyone gets its values
    else:
        dist.initialize(session)  # initializers, then rank 0's values broadcast
    rng = np.random.default_rng(args.seed)  # same on every rank: same global batches
    history = []
    for epoch in range(1, args.epochs + 1):
        order = rng.permutation(len(y_train))
        totals = np.zeros(3)  # loss sum, hits, examples (this rank)
        epoch_start = time.perf_counter()
        for begin in range(0, len(order), args.batch_size):
            batch = order[begin:begin + args.batch_size]
            mine = shard(batch)
            loss_sum, hits = session.Run(
                {g["images"]: x_train[mine], g["labels"]: y_train[mine],
                 g["inverse_batch"]: np.float32(1.0 / len(batch))},
                [g["loss_sum"], g["hits"]], targets=g["step"])
            totals += (loss_sum, hits, len(mine))
        loss_sum, hits, seen = dist.all_reduce(totals, what="epoch totals")
        test_loss, test_accuracy = evaluate(session, g, x_test, y_test)
        history.append({"epoch": epoch, "train_loss": loss_sum / seen,
                        "train_accuracy": hits / seen, "test_loss": test_loss,
                        "test_accuracy": test_accuracy,
                        "seconds": time.perf_counter() - epoch_start})
        if chief and not args.quiet:
            h = history[-1]
            print(f"epoch {epoch:2d}: train loss {h['train_loss']:.4f} acc "
                  f"{h['train_accuracy']:.4f} | test loss {test_loss:.4f} acc "
                  f"{test_accuracy:.4f} | {h['seconds']:.2f} s", flush=True)
        saver.save(session, checkpoint)  # rank 0 writes; everyone waits for it
    return {"history": history, "checkpoint": checkpoint,
            "seconds": time.perf_counter() - start,
            "test_accuracy": history[-1]["test_accuracy"] if history else None}


def reload_single_process(args: argparse.Namespace, checkpoint: str) -> float:
    """Restore the checkpoint into the single-process program's graph; its test accuracy."""
    single_args = single.parse(["--data-format", args.data_format, "--optimizer",
                                args.optimizer, "--dtype", args.dtype, "--seed",
                                str(args.seed)])
    g = single.build(single_args)
    session = mg.ClientSession(g["root"], backend=args.backend)
    mg.train.Saver(g["root"]).restore(session, checkpoint)
    _, _, x_test, y_test = load_digits(args.seed)
    return single.evaluate(session, g, x_test, y_test)[1]


def parse(argv: list[str] | None) -> argparse.Namespace:
    return single.finish_args(
        single.training_parser(__doc__, epochs=10, name="digits_dp").parse_args(argv))


def _blas_limit(threads: int):
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(threads, user_api="blas")


def share_cores() -> None:
    """Give each process of this machine its share of the cores for the native kernels
    (unless $MINIGRAPH_NUM_THREADS is set): the launcher says how many run here."""
    local = next((int(os.environ[name]) for name in ("MPI_LOCALNRANKS",
                                                      "OMPI_COMM_WORLD_LOCAL_SIZE")
                  if os.environ.get(name, "").isdigit()), dist.size())
    os.environ.setdefault("MINIGRAPH_NUM_THREADS",
                          str(max(1, (os.cpu_count() or 1) // max(local, 1))))


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    share_cores()
    with _blas_limit(args.blas_threads):
        result = train(args)
        if dist.is_chief():
            print(f"final test accuracy: {result['test_accuracy']:.4f} on {dist.size()} "
                  f"process(es) ({result['seconds']:.1f} s); checkpoint "
                  f"{result['checkpoint']}", flush=True)
            reloaded = reload_single_process(args, result["checkpoint"])
            print(f"checkpoint reloaded into the single-process graph: test accuracy "
                  f"{reloaded:.4f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
