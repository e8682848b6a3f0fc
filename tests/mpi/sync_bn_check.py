"""Run under mpiexec: synchronized batch norm vs single-process FusedBatchNormV3.

Every rank draws the same global batch, keeps its shard (sizes given per rank, unequal and
empty shards included), and builds sync_batch_norm + AddSymbolicGradients of
sum(y * w_shard). Its y, batch statistics and x gradient must equal the matching rows of
FusedBatchNormV3 + AddSymbolicGradients on the whole batch in one process; the scale and
offset gradients, summed over the replicas (CollectiveAllReduce), must equal the global
ones. Also checks CollectiveAllReduce and its gradient. Rank 0 prints one line
``RESULT {json}`` with the largest relative error of each quantity.
"""

from __future__ import annotations

import json
import sys

import numpy as np

import minigraph as mg
from minigraph import distributed as dist
from minigraph import ops

CHANNELS = 5


def layout(data_format: str, batch: int) -> tuple[int, ...]:
    spatial = (3, 4) if len(data_format) == 4 else (2, 2, 3)
    if data_format.endswith("C"):
        return (batch, *spatial, CHANNELS)
    return (batch, CHANNELS, *spatial)


def relative_error(actual: np.ndarray, expected: np.ndarray) -> float:
    """max |actual - expected| / max |expected| (norm-wise)."""
    if expected.size == 0:
        return 0.0 if actual.shape == expected.shape else float("inf")
    if actual.shape != expected.shape:
        return float("inf")
    scale = float(np.abs(expected).max()) or 1.0
    return float(np.abs(actual.astype(np.float64) - expected).max() / scale)


def check_batch_norm(data_format: str, sizes: list[int], factor: float) -> dict[str, float]:
    rank = dist.rank()
    rng = np.random.default_rng(len(sizes) * 100 + sum(sizes))
    total = sum(sizes)
    x = rng.normal(1.5, 2.0, layout(data_format, total))
    # Shards with different means: averaging per-replica variances would be visibly wrong.
    shift = np.repeat(np.arange(len(sizes)) * 3.0, sizes)
    x = (x + shift.reshape((-1,) + (1,) * (x.ndim - 1))).astype(np.float32)
    w = rng.normal(size=x.shape).astype(np.float32)
    scale = rng.normal(1.0, 0.3, CHANNELS).astype(np.float32)
    offset = rng.normal(size=CHANNELS).astype(np.float32)
    moving_mean = rng.normal(size=CHANNELS).astype(np.float32)
    moving_variance = rng.uniform(0.5, 2.0, CHANNELS).astype(np.float32)
    begin = sum(sizes[:rank])
    rows = slice(begin, begin + sizes[rank])
    attrs = {"epsilon": 1e-3, "exponential_avg_factor": factor, "data_format": data_format}
    axes = list(range(x.ndim))

    # This replica: sync BN on its shard.
    root = mg.Scope.NewRootScope()
    xs = ops.Placeholder(root, mg.float32)
    scale_t, offset_t = ops.Const(root, scale), ops.Const(root, offset)
    bn = dist.sync_batch_norm(root, xs, scale_t, offset_t, moving_mean, moving_variance, **attrs)
    loss = ops.Sum(root, ops.Mul(root, bn.y, ops.Const(root, w[rows])), axes)
    dx, dscale, doffset = mg.AddSymbolicGradients(root, [loss], [xs, scale_t, offset_t])
    dscale_all = dist.CollectiveAllReduce(root, dscale, merge_op="Add")
    doffset_all = dist.CollectiveAllReduce(root, doffset, merge_op="Add")
    session = mg.ClientSession(root)
    got = session.Run({xs: x[rows]}, [bn.y, bn.batch_mean, bn.batch_variance,
                                      bn.reserve_space_1, bn.reserve_space_2, dx, dscale_all,
                                      doffset_all])

    # One process, the whole batch: FusedBatchNormV3.
    single = mg.Scope.NewRootScope()
    xf = ops.Placeholder(single, mg.float32)
    scale_f, offset_f = ops.Const(single, scale), ops.Const(single, offset)
    ref = ops.FusedBatchNormV3(single, xf, scale_f, offset_f, moving_mean, moving_variance,
                               is_training=True, **attrs)
    loss_f = ops.Sum(single, ops.Mul(single, ref.y, ops.Const(single, w)), axes)
    grads = mg.AddSymbolicGradients(single, [loss_f], [xf, scale_f, offset_f])
    want = mg.ClientSession(single).Run({xf: x}, [ref.y, ref.batch_mean, ref.batch_variance,
                                                  ref.reserve_space_1, ref.reserve_space_2]
                                        + grads)
    want[0], want[5] = want[0][rows], want[5][rows]
    names = ["y", "batch_mean", "batch_variance", "reserve_space_1", "reserve_space_2",
             "x_backprop", "scale_backprop", "offset_backprop"]
    return {name: relative_error(a, b) for name, a, b in zip(names, got, want)}


def check_all_reduce() -> dict[str, float]:
    """z = CollectiveAllReduce(v * a); d sum(z * w_rank) / dv = a * reduce(w_rank)."""
    rank, size = dist.rank(), dist.size()
    errors = {}
    for merge_op in ("Add", "Mean"):
        root = mg.Scope.NewRootScope()
        v = ops.Placeholder(root, mg.float32)
        a = np.float32(rank + 1.5)
        z = dist.CollectiveAllReduce(root, ops.Mul(root, v, ops.Const(root, a)),
                                     merge_op=merge_op)
        w = np.arange(6, dtype=np.float32).reshape(2, 3) * (rank + 1)
        (dv,) = mg.AddSymbolicGradients(root, [ops.Sum(root, ops.Mul(root, z, w), [0, 1])],
                                        [v])
        value = np.full((2, 3), rank, np.float32) + np.arange(6, dtype=np.float32).reshape(2, 3)
        got_z, got_dv = mg.ClientSession(root).Run({v: value}, [z, dv])
        ranks = np.arange(size, dtype=np.float64)
        base = np.arange(6, dtype=np.float64).reshape(2, 3)
        want_z = sum((base + r) * (r + 1.5) for r in ranks)
        want_w = sum(base * (r + 1) for r in ranks)
        if merge_op == "Mean":
            want_z, want_w = want_z / size, want_w / size
        errors[f"all_reduce_{merge_op}"] = relative_error(got_z, want_z)
        errors[f"all_reduce_{merge_op}_grad"] = relative_error(got_dv, a * want_w)
    # Scalars keep their shape; bfloat16 / int32 are reduced through float32 / natively.
    root = mg.Scope.NewRootScope()
    scalar = dist.CollectiveAllReduce(root, np.float32(rank + 1))
    half = dist.CollectiveAllReduce(root, np.full(3, rank, mg.bfloat16.np_dtype),
                                    merge_op="Mean")
    count = dist.CollectiveAllReduce(root, np.int32(rank))
    got = mg.ClientSession(root).Run({}, [scalar, half, count])
    want = [np.float32(size * (size + 1) / 2), np.full(3, (size - 1) / 2),
            np.int32(size * (size - 1) // 2)]
    errors["all_reduce_dtypes"] = max(
        relative_error(np.asarray(g, np.float64), np.asarray(w, np.float64))
        if np.shape(g) == np.shape(w) and g.dtype == d else float("inf")
        for g, w, d in zip(got, want, (np.float32, mg.bfloat16.np_dtype, np.int32)))
    return errors


def main() -> int:
    size = dist.size()
    configs = json.loads(sys.argv[1])  # [[data_format, [size per rank], factor], ...]
    results = {"size": size, "all_reduce": check_all_reduce(), "batch_norm": []}
    for data_format, sizes, factor in configs:
        assert len(sizes) == size, f"{sizes} needs {len(sizes)} ranks, got {size}"
        errors = check_batch_norm(data_format, sizes, factor)
        worst = dist.all_gather(np.array([errors[k] for k in sorted(errors)]))
        results["batch_norm"].append({
            "data_format": data_format, "sizes": sizes, "factor": factor,
            "errors": dict(zip(sorted(errors), worst.max(axis=0).tolist()))})
    if dist.rank() == 0:
        print("RESULT " + json.dumps(results), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
