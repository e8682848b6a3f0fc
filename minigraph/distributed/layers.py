"""Synchronized batch norm: the graph builder and a layer like ``nn.BatchNorm``.

``sync_batch_norm(scope, x, scale, offset, mean, variance, ...)`` is FusedBatchNormV3 in
training mode whose statistics are those of the GLOBAL batch (every replica's x together):
the same outputs (y, batch_mean, batch_variance, reserve_space_1, reserve_space_2) and, on
one process, the same values as FusedBatchNormV3. :class:`SyncBatchNorm` is
``nn.BatchNorm`` with that op in training mode (inference mode, which reads only the moving
statistics, is FusedBatchNormV3 unchanged). Its moving statistics are updated from the
global statistics, so they stay identical on every replica.
"""

from __future__ import annotations

from typing import Any

from minigraph import nn
from minigraph.distributed.ops import (
    BatchNormApply,
    BatchNormLocalStats,
    CollectiveBatchNormStats,
)
from minigraph.framework import dtypes
from minigraph.framework.dtypes import DType
from minigraph.framework.graph import Output
from minigraph.framework.op_def import OpResult
from minigraph.framework.scope import Scope
from minigraph.ops.math_ops import Cast
from minigraph.ops.state_ops import Assign


def sync_batch_norm(scope: Scope, x: Any, scale: Any, offset: Any, mean: Any, variance: Any,
                    *, epsilon: float = 0.0001, exponential_avg_factor: float = 1.0,
                    data_format: str = "NHWC", timeout_seconds: float = 0.0,
                    name: str = "SyncBatchNorm") -> OpResult:
    """Training-mode batch norm over the global batch; returns BatchNormApply's outputs
    ``.y, .batch_mean, .batch_variance, .reserve_space_1, .reserve_space_2``.

    Three ops: BatchNormLocalStats (this replica's count, mean, M2 per channel, float64),
    CollectiveBatchNormStats (Chan's combination over the replicas), BatchNormApply.
    Differentiable (first order) through BatchNormApply's gradient, which all-reduces
    sum(dy) and sum(dy * (x - mean)) once per layer. The ops go under ``<name>/``.
    """
    inner = scope.NewSubScope(name)
    stats = BatchNormLocalStats(inner, x, data_format=data_format)
    combined = CollectiveBatchNormStats(inner, stats.count, stats.mean, stats.m2,
                                        timeout_seconds=timeout_seconds)
    return BatchNormApply(inner.WithOpName("BatchNormApply"), x, scale, offset, mean, variance,
                          combined.global_count, combined.global_mean, combined.global_m2,
                          epsilon=epsilon, exponential_avg_factor=exponential_avg_factor,
                          data_format=data_format)


class SyncBatchNorm(nn.BatchNorm):
    """``nn.BatchNorm`` whose training mode normalizes with the global batch statistics.

    Same variables (names included), so checkpoints move freely between a single-process
    model and a data-parallel one. ``SyncBatchNorm.from_batch_norm(layer)`` wraps an existing
    ``nn.BatchNorm``'s variables without creating new ones.
    """

    timeout_seconds = 0.0

    @classmethod
    def from_batch_norm(cls, layer: nn.BatchNorm) -> SyncBatchNorm:
        synced = cls.__new__(cls)
        synced.__dict__.update(layer.__dict__)
        return synced

    def __call__(self, scope: Scope, x: Output, *, training: bool,
                 compute_dtype: DType = dtypes.float32) -> Output:
        if not training:
            return super().__call__(scope, x, training=False, compute_dtype=compute_dtype)
        source_dtype = x.dtype
        if compute_dtype is not source_dtype:
            x = Cast(scope, x, DstT=compute_dtype)
        bn = sync_batch_norm(scope, x, self.scale, self.offset,
                             self.moving_mean, self.moving_variance, epsilon=self.epsilon,
                             exponential_avg_factor=1.0 - self.momentum,
                             data_format=self.data_format,
                             timeout_seconds=self.timeout_seconds, name=self.name)
        graph = scope.graph()
        graph.add_to_collection(nn.UPDATE_OPS, Assign(scope, self.moving_mean,
                                                      bn.batch_mean).op)
        graph.add_to_collection(nn.UPDATE_OPS, Assign(scope, self.moving_variance,
                                                      bn.batch_variance).op)
        y = bn.y
        return Cast(scope, y, DstT=source_dtype) if y.dtype is not source_dtype else y


def convert_sync_batch_norm(model: Any) -> Any:
    """Replace every ``nn.BatchNorm`` attribute of ``model`` (and of list/tuple attributes)
    by a :class:`SyncBatchNorm` sharing its variables; return ``model`` (PyTorch's
    ``SyncBatchNorm.convert_sync_batchnorm``). Call it before building the graph."""
    def convert(value: Any) -> Any:
        if isinstance(value, nn.BatchNorm) and not isinstance(value, SyncBatchNorm):
            return SyncBatchNorm.from_batch_norm(value)
        if isinstance(value, (list, tuple)):
            items = [convert(v) for v in value]
            if any(new is not old for new, old in zip(items, value)):
                return type(value)(items)
        return value

    for key, value in list(vars(model).items()):
        converted = convert(value)
        if converted is not value:
            setattr(model, key, converted)
    return model
