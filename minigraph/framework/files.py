"""Paths given to minigraph's file surfaces, and the OS errors they meet.

Every file minigraph reads or writes (``import_graph_def``/``export_graph_def`` paths,
``summary.FileWriter``'s logdir, ``io.write_graph``/``read_graph``, checkpoints) checks its
path with :func:`check_path` before touching the file system, and turns an ``OSError`` into
the ``mg.errors`` class TensorFlow gives its errno (``tsl::errors::ErrnoToCode``) with
:func:`os_errors`, so a caller sees one family of exceptions whose message names the
operation and the file:

============================================  ==========================================
errno                                         class
============================================  ==========================================
ENOENT, ENODEV, ENXIO                         ``NotFoundError``
EEXIST                                        ``AlreadyExistsError``
EACCES, EPERM, EROFS                          ``PermissionDeniedError``
ENOTDIR, EISDIR, ENOTEMPTY, EBUSY, ETXTBSY    ``FailedPreconditionError``
ENOSPC, EDQUOT, EFBIG, EMFILE, ENFILE, ENOMEM ``ResourceExhaustedError``
ENAMETOOLONG, EINVAL, ELOOP, EILSEQ           ``InvalidArgumentError``
EAGAIN, EINTR                                 ``UnavailableError``
ENOSYS, ENOTSUP, EXDEV                        ``UnimplementedError``
anything else (EIO...)                        ``UnknownError``
============================================  ==========================================
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from typing import Any

from minigraph.framework import errors
from minigraph.framework.names import shown

# The most bytes one path component and a whole path may have (Linux's NAME_MAX and
# PATH_MAX; a longer one fails with ENAMETOOLONG on every common file system).
NAME_MAX = 255
PATH_MAX = 4096

_ERRNO_CLASSES: dict[int, type[Exception]] = {}
for _class, _names in (
        (errors.NotFoundError, ("ENOENT", "ENODEV", "ENXIO")),
        (errors.AlreadyExistsError, ("EEXIST",)),
        (errors.PermissionDeniedError, ("EACCES", "EPERM", "EROFS")),
        (errors.FailedPreconditionError, ("ENOTDIR", "EISDIR", "ENOTEMPTY", "EBUSY",
                                          "ETXTBSY")),
        (errors.ResourceExhaustedError, ("ENOSPC", "EDQUOT", "EFBIG", "EMFILE", "ENFILE",
                                         "ENOMEM")),
        (errors.InvalidArgumentError, ("ENAMETOOLONG", "EINVAL", "ELOOP", "EILSEQ")),
        (errors.UnavailableError, ("EAGAIN", "EINTR")),
        (errors.UnimplementedError, ("ENOSYS", "ENOTSUP", "EXDEV"))):
    for _name in _names:
        if hasattr(errno, _name):
            _ERRNO_CLASSES[getattr(errno, _name)] = _class


def check_path(path: Any, what: str) -> str:
    """``path`` (a str, bytes or ``os.PathLike``) as a str, or InvalidArgumentError naming
    ``what`` when no file can have it: not a path, empty, holding NUL, not encodable for the
    file system (a lone surrogate), or too long (a component over NAME_MAX bytes, the whole
    over PATH_MAX)."""
    try:
        text = os.fspath(path)
    except TypeError:
        raise errors.InvalidArgumentError(f"{what}: expected a path (str, bytes or "
                                          f"os.PathLike), got {type(path).__name__}") from None
    if isinstance(text, bytes):
        try:
            text = os.fsdecode(text)
        except UnicodeDecodeError:  # pragma: no cover - fsdecode escapes undecodable bytes
            raise errors.InvalidArgumentError(f"{what}: the path is not decodable") from None
    if not isinstance(text, str):
        raise errors.InvalidArgumentError(f"{what}: expected a path, got "
                                          f"{type(text).__name__}")
    if not text:
        raise errors.InvalidArgumentError(f"{what}: the path is empty")
    if "\0" in text:
        raise errors.InvalidArgumentError(f"{what}: the path '{shown(text)}' holds a NUL "
                                          f"character")
    try:
        encoded = os.fsencode(text)
    except UnicodeEncodeError as exc:
        raise errors.InvalidArgumentError(
            f"{what}: the path '{shown(text)}' cannot be encoded for the file system "
            f"({exc.reason} at character {exc.start})") from None
    longest = max(len(part) for part in encoded.split(b"/"))
    if longest > NAME_MAX or len(encoded) > PATH_MAX:
        raise errors.InvalidArgumentError(
            f"{what}: the path '{shown(text)}' is too long ({len(encoded):,} bytes, a "
            f"component of {longest:,}; at most {PATH_MAX} and {NAME_MAX})")
    return text


def os_error(exc: OSError, what: str) -> Exception:
    """The ``mg.errors`` exception for ``exc``: ``"<what>: <strerror> (<ERRNO>): '<file>'"``
    of the class TensorFlow gives the errno (an OSError without one: UnknownError); the file
    is left out when ``what`` names it already."""
    cls = _ERRNO_CLASSES.get(exc.errno, errors.UnknownError)
    reason = exc.strerror or str(exc) or type(exc).__name__
    code = errno.errorcode.get(exc.errno, "") if exc.errno else ""
    if cls is errors.NotFoundError:
        reason = f"does not exist ({reason.lower()})"
    message = f"{what}: {reason}" + (f" ({code})" if code else "")
    if exc.filename is not None:
        name = shown(os.fsdecode(exc.filename))
        if name not in what:
            message += f": '{name}'"
    return cls(message)


@contextlib.contextmanager
def os_errors(what: str) -> Iterator[None]:
    """Raise any OSError of the block as :func:`os_error` gives it (minigraph's own errors,
    which may be OSErrors too, pass unchanged)."""
    try:
        yield
    except OSError as exc:
        if type(exc).__module__ == errors.__name__:
            raise
        raise os_error(exc, what) from None


def require_regular_file(path: str, what: str) -> None:
    """Refuse (FailedPreconditionError) a path that is not a regular file before it is
    opened: opening a FIFO blocks until a writer comes, and a device like /dev/zero never
    ends. OS errors (a missing file: NotFoundError) as :func:`os_error` gives them."""
    with os_errors(what):
        info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
        raise errors.FailedPreconditionError(f"{what}: '{shown(path)}' is {kind}")
