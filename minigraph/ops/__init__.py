"""Op wrappers, mirroring ``tensorflow/cc/ops``: ``ops.FusedBatchNormV3(scope, ...)``.

One module per op family; each lists its wrappers in ``__all__``, and this package exports
them all (adding an op touches only its family's module).
"""

from minigraph.ops import (
    activation_ops,
    array_ops,
    batch_norm,
    concat_ops,
    control_flow_ops,
    convolution_ops,
    detection_ops,
    elementwise_ops,
    fused_ops,
    fused_training_ops,
    image_ops,
    index_ops,
    layout_ops,
    linalg_ops,
    math_ops,
    nn_ops,
    pooling_ops,
    reduction_ops,
    selection_ops,
    spatial_ops,
    state_ops,
    training_ops,
    volumetric_ops,
)
from minigraph.ops.activation_ops import *  # noqa: F403
from minigraph.ops.array_ops import *  # noqa: F403
from minigraph.ops.batch_norm import *  # noqa: F403
from minigraph.ops.concat_ops import *  # noqa: F403
from minigraph.ops.control_flow_ops import *  # noqa: F403
from minigraph.ops.convolution_ops import *  # noqa: F403
from minigraph.ops.detection_ops import *  # noqa: F403
from minigraph.ops.elementwise_ops import *  # noqa: F403
from minigraph.ops.image_ops import *  # noqa: F403
from minigraph.ops.index_ops import *  # noqa: F403
from minigraph.ops.layout_ops import *  # noqa: F403
from minigraph.ops.linalg_ops import *  # noqa: F403
from minigraph.ops.math_ops import *  # noqa: F403
from minigraph.ops.nn_ops import *  # noqa: F403
from minigraph.ops.pooling_ops import *  # noqa: F403
from minigraph.ops.reduction_ops import *  # noqa: F403
from minigraph.ops.selection_ops import *  # noqa: F403
from minigraph.ops.spatial_ops import *  # noqa: F403
from minigraph.ops.state_ops import *  # noqa: F403
from minigraph.ops.training_ops import *  # noqa: F403
from minigraph.ops.volumetric_ops import *  # noqa: F403

_FAMILIES = (activation_ops, array_ops, batch_norm, concat_ops, control_flow_ops,
             convolution_ops, detection_ops, elementwise_ops, fused_ops, fused_training_ops,
             image_ops, index_ops, layout_ops, linalg_ops, math_ops, nn_ops, pooling_ops,
             reduction_ops, selection_ops, spatial_ops, state_ops, training_ops, volumetric_ops)
__all__ = sorted(name for family in _FAMILIES for name in family.__all__)
