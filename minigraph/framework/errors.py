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
    """An operation TensorFlow no longer supports in this context (an op removed from the
    GraphDef version a graph was made at)."""


class UnavailableError(RuntimeError):
    """A requested device or backend cannot be used on this machine."""


class FailedPreconditionError(InvalidArgumentError):
    """The graph is fine but the session's state is not ready (an uninitialized variable)."""


class ResourceExhaustedError(MemoryError):
    """A tensor would need more memory than this machine has (a claimed shape of terabytes):
    refused before anything is allocated."""
