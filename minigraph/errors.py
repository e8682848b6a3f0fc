"""Public error classes (``mg.errors.InvalidArgumentError``)."""

from minigraph.framework.errors import InvalidArgumentError, NotFoundError, UnavailableError

__all__ = ["InvalidArgumentError", "NotFoundError", "UnavailableError"]
