"""``OptimizerOptions``: which plan-time graph rewrites a session applies.

TensorFlow switches grappler's passes in ``ConfigProto.graph_options.rewrite_options``;
minigraph's counterpart is a small frozen dataclass given to ``ClientSession``. Every rewrite
must leave results bit for bit unchanged, so turning one off is for inspecting and testing
(compare a fused plan with the plain one), never for correctness.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from minigraph.framework.errors import InvalidArgumentError

OPTIMIZER_VAR = "MINIGRAPH_OPTIMIZER"  # "off": every rewrite off (the default is "on")


@dataclass(frozen=True)
class OptimizerOptions:
    """``remapper``: fuse a convolution's or matmul's elementwise successors into one step
    (``BiasAdd -> FusedBatchNormV3 (inference) -> AddV2 -> Relu/Relu6``, see
    ``client/fusion.py``). ``memory_planner``: drop each intermediate after its last reader
    and let kernels write into inputs that die there (``client/planner.py``; not a graph
    rewrite: ``$MINIGRAPH_OPTIMIZER`` leaves it on)."""

    remapper: bool = True
    memory_planner: bool = True

    @classmethod
    def from_environment(cls) -> OptimizerOptions:
        """The default: every rewrite on, or off when ``$MINIGRAPH_OPTIMIZER`` is ``off``."""
        value = os.environ.get(OPTIMIZER_VAR, "on").strip().lower()
        if value not in ("on", "off"):
            raise InvalidArgumentError(f"${OPTIMIZER_VAR} must be 'on' or 'off', got "
                                       f"{value!r}")
        return cls(remapper=value == "on")
