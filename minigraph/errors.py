"""Public error classes (``mg.errors.InvalidArgumentError``)."""

from minigraph.framework.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    UnavailableError,
)

__all__ = ["FailedPreconditionError", "InvalidArgumentError", "NotFoundError", "UnavailableError"]
