"""Runnable examples shipped with the package (``python -m minigraph demo``)."""
