"""TensorBoard event files: ``mg.summary.FileWriter(logdir)``.

An event file (``events.out.tfevents.<time>.<host>.<pid>.<n>``) is a TFRecord stream of
``tensorflow.Event`` messages: first ``file_version: "brain.Event:2"``, then one event per
graph (``graph_def``: the serialized GraphDef) or scalar (``summary.value[].simple_value``).
``tensorboard --logdir <logdir>`` shows the curves and draws the graph. Events are buffered
and written on ``flush``/``close`` (and when the writer is garbage collected), each flush
appending to the same file.
"""

from __future__ import annotations

import contextlib
import itertools
import operator
import os
import socket
import sys
import threading
import time
import warnings
from typing import Any

from minigraph.framework import files
from minigraph.framework.errors import InvalidArgumentError
from minigraph.framework.graph import Graph
from minigraph.framework.names import shown
from minigraph.framework.scope import Scope
from minigraph.interop import exporter, protos, records

FILE_VERSION = "brain.Event:2"
_file_counter = itertools.count()


class FileWriter:
    """Writes scalars and graphs for TensorBoard into a new event file under ``logdir``
    (TF 1's ``tf.compat.v1.summary.FileWriter``; use as a context manager to close it).

    Every problem is an ``mg.errors`` exception naming the writer's file: a logdir that is
    no path or cannot be a directory (:mod:`minigraph.framework.files` maps OS errors as
    TensorFlow does), a tag, value or step an Event cannot hold. A flush that fails keeps
    its events buffered and the file as it was (a partly written record is cut off), so a
    later ``flush`` or ``close`` retries them; ``close`` raises while they cannot be
    written, and the writer stays open.
    """

    def __init__(self, logdir: str | os.PathLike, graph: Graph | Scope | None = None) -> None:
        self.logdir = files.check_path(logdir, "FileWriter: logdir")
        self.path = os.path.join(
            self.logdir, f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}."
                         f"{os.getpid()}.{next(_file_counter)}")
        self._pending: list[bytes] = []
        self._lock = threading.Lock()
        self._closed = True  # until the file exists: __del__ has nothing to flush
        with files.os_errors(f"FileWriter: cannot create the event file in logdir "
                             f"'{shown(self.logdir)}'"):
            os.makedirs(self.logdir, exist_ok=True)
            with open(self.path, "xb"):  # the file exists from now on, empty until a flush
                pass
        self._closed = False
        self._add_event(file_version=FILE_VERSION)
        if graph is not None:
            self.add_graph(graph)

    def _add_event(self, step: int = 0, **fields: Any) -> None:
        event = protos.Event()
        event.wall_time, event.step = time.time(), step
        for name, value in fields.items():
            if name == "summary":
                event.summary.CopyFrom(value)
            else:
                setattr(event, name, value)
        with self._lock:
            if self._closed:
                raise InvalidArgumentError(f"FileWriter for {self.path} is closed")
            self._pending.append(event.SerializeToString())

    def add_graph(self, graph: Graph | Scope) -> None:
        """Record ``graph`` (as its GraphDef; minigraph-only ops drawn as they are) for
        TensorBoard's Graphs tab."""
        if isinstance(graph, Scope):
            graph = graph.graph()
        if not isinstance(graph, Graph):
            raise InvalidArgumentError(f"add_graph: expected a Graph or a Scope, got "
                                       f"{type(graph).__name__}")
        graph_def = exporter.graph_to_graph_def(graph, for_display=True)
        self._add_event(graph_def=graph_def.SerializeToString())

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        """Record one point of the curve ``tag`` (TensorBoard's Scalars tab): ``value`` is
        stored as a float32 (beyond its range: +-inf, as TF stores it), ``step`` is an
        int64."""
        if not isinstance(tag, str) or not tag:
            raise InvalidArgumentError(f"add_scalar: tag must be a non-empty string, got "
                                       f"{shown(repr(tag))}")
        try:
            tag.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidArgumentError(f"add_scalar '{shown(tag)}': the tag is not valid "
                                       f"text ({exc.reason} at character {exc.start})") from None
        try:
            if isinstance(value, (str, bytes)):  # float("1.5") would read it
                raise TypeError("a string is not a number")
            value = float(value)
        except (TypeError, ValueError, OverflowError) as exc:
            raise InvalidArgumentError(f"add_scalar '{shown(tag)}': value must be a number, got "
                                       f"{shown(_number_text(value))} ({exc})") from None
        try:
            if isinstance(step, bool):
                raise TypeError
            step = operator.index(step)  # an int, or numpy's
        except TypeError:
            raise InvalidArgumentError(f"add_scalar '{shown(tag)}': step must be an int, got "
                                       f"{shown(repr(step))}") from None
        if not -2**63 <= step < 2**63:
            raise InvalidArgumentError(f"add_scalar '{shown(tag)}': step must be an int64, "
                                       f"got {shown(_number_text(step))}")
        summary = protos.message_class("tensorflow.Summary")()
        entry = summary.value.add()
        entry.tag, entry.simple_value = tag, value
        self._add_event(step=step, summary=summary)

    def flush(self) -> None:
        """Append the buffered events to the event file. When that fails, the events stay
        buffered, the file keeps only its complete records, and the OS error is raised as
        the ``mg.errors`` class TensorFlow gives it."""
        with self._lock:
            if not self._pending:
                return
            data = b"".join(records.framed(event) for event in self._pending)
            with files.os_errors(f"FileWriter: cannot write the event file "
                                 f"'{shown(self.path)}'"):
                _append(self.path, data)
            self._pending = []

    def close(self) -> None:
        """Flush, then refuse further events. A flush that fails raises and leaves the
        writer open, its events still buffered."""
        self.flush()
        with self._lock:
            self._closed = True

    def __enter__(self) -> FileWriter:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_closed", True):
            return
        try:
            self.close()
        except Exception as exc:  # noqa: BLE001 - a finalizer must not raise
            if sys.is_finalizing():  # the interpreter is tearing down what writing needs
                return
            warnings.warn(f"FileWriter for {self.path}: {len(self._pending)} buffered events "
                          f"were never written: {exc}", RuntimeWarning, stacklevel=1)


def _append(path: str, data: bytes) -> None:
    """Append ``data`` to ``path``, all or nothing: a failed write is cut back to the file's
    previous end, so the file never ends in half a record."""
    with open(path, "ab") as file:
        end = file.seek(0, os.SEEK_END)
        try:
            file.write(data)
            file.flush()
        except OSError:
            with contextlib.suppress(OSError):
                file.truncate(end)
            raise


def _number_text(value: Any) -> str:
    """A value for a message; an int of thousands of digits by its magnitude."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**18:
        return f"{'-' if value < 0 else ''}about 2**{abs(value).bit_length() - 1}"
    return repr(value)
