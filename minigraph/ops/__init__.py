"""Op wrappers, mirroring ``tensorflow/cc/ops``: ``ops.FusedBatchNormV3(scope, ...)``."""

from minigraph.ops.array_ops import Const, Identity, Placeholder
from minigraph.ops.batch_norm import (
    BatchNormWithGlobalNormalization,
    BatchNormWithGlobalNormalizationGrad,
    FusedBatchNorm,
    FusedBatchNormGrad,
    FusedBatchNormGradGrad,
    FusedBatchNormGradV2,
    FusedBatchNormGradV3,
    FusedBatchNormV2,
    FusedBatchNormV3,
)
from minigraph.ops.math_ops import (
    Add,
    AddN,
    BroadcastGradientArgs,
    BroadcastTo,
    Cast,
    Div,
    Fill,
    Mean,
    Mul,
    Neg,
    OnesLike,
    Reciprocal,
    ReducedShape,
    Reshape,
    Rsqrt,
    Shape,
    Size,
    Square,
    Sub,
    Sum,
    Transpose,
    ZerosLike,
)
from minigraph.ops.nn_ops import (
    ArgMax,
    AvgPool,
    AvgPoolGrad,
    BiasAdd,
    BiasAddGrad,
    Conv2D,
    Conv2DBackpropFilter,
    Conv2DBackpropInput,
    Equal,
    MatMul,
    MaxPool,
    MaxPoolGrad,
    MaxPoolGradGrad,
    Relu,
    ReluGrad,
    Softmax,
    SparseSoftmaxCrossEntropyWithLogits,
)
from minigraph.ops.state_ops import Assign, RandomUniform, Variable
from minigraph.ops.training_ops import ApplyAdam, ApplyGradientDescent, ApplyMomentum

__all__ = [
    "ArgMax", "AvgPool", "AvgPoolGrad", "BiasAdd", "BiasAddGrad", "Conv2D",
    "Conv2DBackpropFilter", "Conv2DBackpropInput", "Equal", "MatMul", "MaxPool", "MaxPoolGrad",
    "MaxPoolGradGrad", "Relu", "ReluGrad", "Softmax", "SparseSoftmaxCrossEntropyWithLogits",
    "ApplyAdam", "ApplyGradientDescent", "ApplyMomentum", "Assign", "RandomUniform", "Variable",
    "Add", "AddN", "BroadcastGradientArgs", "BroadcastTo", "Cast", "Div", "Fill", "Mean", "Mul",
    "Neg", "OnesLike", "Reciprocal", "ReducedShape", "Reshape", "Rsqrt", "Shape", "Size",
    "Square", "Sub", "Sum", "Transpose", "ZerosLike", "FusedBatchNormGradGrad",
    "BatchNormWithGlobalNormalization", "BatchNormWithGlobalNormalizationGrad", "Const",
    "FusedBatchNorm", "FusedBatchNormGrad", "FusedBatchNormGradV2", "FusedBatchNormGradV3",
    "FusedBatchNormV2", "FusedBatchNormV3", "Identity", "Placeholder",
]
