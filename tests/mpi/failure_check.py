"""Run under mpiexec: one rank fails mid-training; the others must stop, not hang.

argv: MODE CHECKPOINT_DIR. Data-parallel training of a small model (sync batch norm, fused
gradient all-reduce) where rank 0 saves a checkpoint after every step through
``distributed.Saver`` (rank 0 only, atomic). At step FAIL_STEP the last rank
* ``exit``: dies with ``os._exit(3)`` (no exception, no MPI_Finalize),
* ``raise``: raises RuntimeError (the excepthook prints it and calls MPI_Abort),
* ``hang``: sleeps (stuck: a peer that neither dies nor answers).
The survivors block in their next collective and raise UnavailableError after
$MINIGRAPH_COLLECTIVE_TIMEOUT seconds (the excepthook then aborts the job). Rank 0 prints
``SAVED <step>`` after each checkpoint.

``build(scope)`` is importable: the test rebuilds the graph to restore the checkpoint.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

import minigraph as mg
from minigraph import distributed as dist
from minigraph import nn, ops

FAIL_STEP = 3
BATCH = 4


def build(root: mg.Scope, *, distributed: bool) -> dict:
    images = ops.Placeholder(root.WithOpName("images"), mg.float32, shape=[None, 4, 4, 2])
    labels = ops.Placeholder(root.WithOpName("labels"), mg.int32, shape=[None])
    conv = nn.Conv2D(root, "conv", 2, 4, 3, seed=1)
    norm = nn.BatchNorm(root, "bn", 4)
    dense = nn.Dense(root, "dense", 4 * 4 * 4, 10, seed=2)
    if distributed:
        norm = dist.SyncBatchNorm.from_batch_norm(norm)
    x = nn.relu(root, norm(root, conv(root, images), training=True))
    loss = nn.sparse_softmax_cross_entropy(root, dense(root, nn.flatten(root, x)), labels)
    optimizer = mg.train.Momentum(0.1)
    variables = conv.variables + norm.variables + dense.variables
    step = (dist.DataParallel(optimizer).minimize(root, loss, variables) if distributed
            else optimizer.minimize(root, loss, variables))
    return {"images": images, "labels": labels, "loss": loss,
            "step": step + root.graph().get_collection(nn.UPDATE_OPS)}


def main() -> int:
    mode, directory = sys.argv[1], sys.argv[2]
    rank, size = dist.rank(), dist.size()
    root = mg.Scope.NewRootScope()
    g = build(root, distributed=True)
    session = mg.ClientSession(root)
    dist.initialize(session)
    saver = dist.Saver(root)
    rng = np.random.default_rng(rank)
    for step in range(1, 100):
        if step == FAIL_STEP and rank == size - 1:
            if mode == "exit":
                os._exit(3)
            if mode == "raise":
                raise RuntimeError(f"injected failure on rank {rank} at step {step}")
            if mode == "hang":
                time.sleep(600)
        x = rng.uniform(size=(BATCH, 4, 4, 2)).astype(np.float32)
        y = rng.integers(0, 10, BATCH).astype(np.int32)
        session.Run({g["images"]: x, g["labels"]: y}, [g["loss"]], targets=g["step"])
        saver.save(session, os.path.join(directory, "checkpoint.npz"))
        if rank == 0:
            print(f"SAVED {step}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
