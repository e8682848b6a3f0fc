"""Op wrappers, mirroring ``tensorflow/cc/ops``: ``ops.FusedBatchNormV3(scope, ...)``."""

from minigraph.ops.array_ops import Const, Identity, Placeholder
from minigraph.ops.batch_norm import (
    BatchNormWithGlobalNormalization,
    BatchNormWithGlobalNormalizationGrad,
    FusedBatchNorm,
    FusedBatchNormGrad,
    FusedBatchNormGradV2,
    FusedBatchNormGradV3,
    FusedBatchNormV2,
    FusedBatchNormV3,
)

__all__ = [
    "BatchNormWithGlobalNormalization", "BatchNormWithGlobalNormalizationGrad", "Const",
    "FusedBatchNorm", "FusedBatchNormGrad", "FusedBatchNormGradV2", "FusedBatchNormGradV3",
    "FusedBatchNormV2", "FusedBatchNormV3", "Identity", "Placeholder",
]
