"""Run under mpiexec: data-parallel training equals single-process training.

Every rank builds the digits CNN twice: the data-parallel graph (SyncBatchNorm,
DataParallel's fused gradient all-reduce, its shard of each global batch) and, as the
reference, the ordinary single-process graph trained on the whole global batch. After a few
steps all variables (weights, moving statistics, optimizer slots) must agree. Checks too
that broadcast_variables overwrote the other ranks' (deliberately different) initial values
and that every rank ends with bitwise the same variables. Rank 0 prints ``RESULT {json}``.

argv[1]: {"data_format": "NHWC", "sizes": [per-rank shard sizes], "optimizer": "adam",
          "steps": 3}. Equal shards use the mean loss and merge_op="Mean"; unequal shards use
sum(losses) / global batch and merge_op="Add" (see DataParallel's docstring).
"""

from __future__ import annotations

import json
import sys
import zlib

import numpy as np

import minigraph as mg
from minigraph import distributed as dist
from minigraph import nn, ops
from minigraph.examples.train_digits_cnn import DigitsCNN


def optimizer(name: str):
    return mg.train.Adam(0.01) if name == "adam" else mg.train.Momentum(0.05, 0.9)


def build(config: dict, distributed: bool) -> dict:
    root = mg.Scope.NewRootScope()
    images = ops.Placeholder(root.WithOpName("images"), mg.float32, shape=[None, 8, 8, 1])
    labels = ops.Placeholder(root.WithOpName("labels"), mg.int32, shape=[None])
    model = DigitsCNN(root, config["data_format"], seed=3)
    train = root.NewSubScope("train")
    if not distributed:
        logits = model(train, images, training=True, compute_dtype=mg.float32)
        loss = nn.sparse_softmax_cross_entropy(train, logits, labels)
        step = optimizer(config["optimizer"]).minimize(train, loss, model.variables)
        return {"root": root, "images": images, "labels": labels,
                "step": step + root.graph().get_collection(nn.UPDATE_OPS)}
    dist.convert_sync_batch_norm(model)
    logits = model(train, images, training=True, compute_dtype=mg.float32)
    equal = len(set(config["sizes"])) == 1
    inverse_total = ops.Placeholder(root.WithOpName("inverse_total"), mg.float32, shape=[])
    if equal:
        loss = nn.sparse_softmax_cross_entropy(train, logits, labels)
    else:
        losses = ops.SparseSoftmaxCrossEntropyWithLogits(train, logits, labels).loss
        loss = ops.Mul(train, ops.Sum(train, losses, [0]), inverse_total)
    trainer = dist.DataParallel(optimizer(config["optimizer"]),
                                merge_op="Mean" if equal else "Add")
    step = trainer.minimize(train, loss, model.variables)
    return {"root": root, "images": images, "labels": labels, "inverse_total": inverse_total,
            "step": step + root.graph().get_collection(nn.UPDATE_OPS)}


def variables(session: mg.ClientSession) -> dict[str, np.ndarray]:
    return dict(session.state.variables)


def main() -> int:
    config = json.loads(sys.argv[1])
    rank, size = dist.rank(), dist.size()
    sizes = config["sizes"]
    assert len(sizes) == size
    total = sum(sizes)
    rows = slice(sum(sizes[:rank]), sum(sizes[:rank + 1]))

    dp = build(config, distributed=True)
    dp_session = mg.ClientSession(dp["root"])
    dp_session.Run({}, [], targets=mg.train.global_variables_initializer(dp["root"]))
    if rank != 0:  # different initial values: the broadcast must overwrite them
        for name, value in variables(dp_session).items():
            dp_session.state.write(name, value + np.asarray(rank, value.dtype))
    dist.broadcast_variables(dp_session)

    single = build(config, distributed=False)
    single_session = mg.ClientSession(single["root"])
    single_session.Run({}, [], targets=mg.train.global_variables_initializer(single["root"]))
    start = max(float(np.abs(dp_session.state.read(n) - v).max())
                for n, v in variables(single_session).items())

    rng = np.random.default_rng(7)
    for _ in range(config["steps"]):
        x = rng.uniform(0, 1, (total, 8, 8, 1)).astype(np.float32)
        y = rng.integers(0, 10, total).astype(np.int32)
        feeds = {dp["images"]: x[rows], dp["labels"]: y[rows],
                 dp["inverse_total"]: np.float32(1.0 / total)}
        dp_session.Run(feeds, [], targets=dp["step"])
        single_session.Run({single["images"]: x, single["labels"]: y}, [],
                           targets=single["step"])

    got, want = variables(dp_session), variables(single_session)
    assert sorted(got) == sorted(want), (sorted(set(got) ^ set(want)))
    errors = {name: float(np.abs(got[name] - want[name]).max()
                          / max(float(np.abs(want[name]).max()), 1e-3)) for name in want}
    digest = zlib.crc32(b"".join(got[name].tobytes() for name in sorted(got)))
    digests = dist.all_gather(np.array([digest], np.int64))[:, 0]
    worst = dist.all_gather(np.array([max(errors.values())]))[:, 0]
    if rank == 0:
        print("RESULT " + json.dumps({
            "size": size, "config": config, "initial_difference": start,
            "max_relative_error": float(worst.max()),
            "worst_variable": max(errors, key=errors.get),
            "identical_across_ranks": bool(len(set(digests.tolist())) == 1)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
