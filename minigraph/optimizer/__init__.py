"""Graph passes run before a session plans a run, in grappler's shape (see ``passes.py``
for the contract, ``meta.py`` for the pipeline)."""

from minigraph.optimizer.meta import optimize, rewrite_for_run, run_passes

__all__ = ["optimize", "rewrite_for_run", "run_passes"]
