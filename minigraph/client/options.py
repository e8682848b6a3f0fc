"""``OptimizerOptions``, the switches of the graph passes a session runs before it plans a
run: defined with the passes (``minigraph/optimizer/options.py``), given to
``ClientSession(optimizer=...)``."""

from minigraph.optimizer.options import OPTIMIZER_VAR, OptimizerOptions

__all__ = ["OPTIMIZER_VAR", "OptimizerOptions"]
