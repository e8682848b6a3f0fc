"""Public error classes (``mg.errors.InvalidArgumentError``)."""

from minigraph.framework.errors import (
    AlreadyExistsError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    UnavailableError,
    UnimplementedError,
    UnknownError,
)

__all__ = ["AlreadyExistsError", "FailedPreconditionError", "InvalidArgumentError",
           "NotFoundError", "PermissionDeniedError", "ResourceExhaustedError",
           "UnavailableError", "UnimplementedError", "UnknownError"]
