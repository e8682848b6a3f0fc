"""Public error classes (``mg.errors.InvalidArgumentError``)."""

from minigraph.framework.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    ResourceExhaustedError,
    UnavailableError,
    UnimplementedError,
)

__all__ = ["FailedPreconditionError", "InvalidArgumentError", "NotFoundError",
           "ResourceExhaustedError", "UnavailableError", "UnimplementedError"]
