"""Error classes raised by minigraph.

Every error minigraph raises for bad user input is an :class:`InvalidArgumentError`
(a ``ValueError``), whether it is found while building the graph (shape inference,
attr checking) or while running it (what only the data shows). Messages name the op,
the input or attr, and the expected versus the actual value.
"""

from __future__ import annotations


class InvalidArgumentError(ValueError):
    """Bad input: wrong shape, dtype, attr value, or a feed that does not fit."""


class NotFoundError(LookupError):
    """A name that should exist does not: an op type, a kernel, a gradient function."""


class UnimplementedError(NotImplementedError):
    """An operation not supported in this context: an op removed from the GraphDef version a
    graph was made at, or a tensor TensorFlow can hold and numpy cannot (more than 64
    dimensions)."""


class UnavailableError(RuntimeError):
    """A requested device or backend cannot be used on this machine."""


class FailedPreconditionError(InvalidArgumentError):
    """The graph is fine but the session's state is not ready (an uninitialized variable)."""


class ResourceExhaustedError(MemoryError):
    """A tensor would need more memory than this machine has (a claimed shape of terabytes):
    refused before anything is allocated."""


# The OS's file errors, as TensorFlow names them (``tsl::errors`` maps errno the same way);
# each is also the matching OSError, so code that catches OSError still catches it.


class PermissionDeniedError(PermissionError):
    """The OS refuses the access: a read-only directory, a file without read permission."""


class AlreadyExistsError(FileExistsError):
    """Something that must be created already exists (a file where a directory must go)."""


class UnknownError(OSError):
    """An OS error no other class describes (an I/O error, a full disk's "disk full")."""
