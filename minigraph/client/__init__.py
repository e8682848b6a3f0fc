"""Running graphs (``loops`` registers the kernel of ``WhileLoop``, which runs sessions)."""

from minigraph.client import loops  # noqa: F401
