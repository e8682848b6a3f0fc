"""TensorBoard event files: ``mg.summary.FileWriter(logdir)``.

An event file (``events.out.tfevents.<time>.<host>.<pid>.<n>``) is a TFRecord stream of
``tensorflow.Event`` messages: first ``file_version: "brain.Event:2"``, then one event per
graph (``graph_def``: the serialized GraphDef) or scalar (``summary.value[].simple_value``).
``tensorboard --logdir <logdir>`` shows the curves and draws the graph. Events are buffered
and written on ``flush``/``close`` (and when the writer is garbage collected), each flush
appending to the same file.
"""

from __future__ import annotations

import itertools
import os
import socket
import threading
import time
from typing import Any

from minigraph.framework.errors import InvalidArgumentError
from minigraph.framework.graph import Graph
from minigraph.framework.scope import Scope
from minigraph.interop import exporter, protos, records

FILE_VERSION = "brain.Event:2"
_file_counter = itertools.count()


class FileWriter:
    """Writes scalars and graphs for TensorBoard into a new event file under ``logdir``
    (TF 1's ``tf.compat.v1.summary.FileWriter``; use as a context manager to close it)."""

    def __init__(self, logdir: str | os.PathLike, graph: Graph | Scope | None = None) -> None:
        self.logdir = os.fspath(logdir)
        os.makedirs(self.logdir, exist_ok=True)
        self.path = os.path.join(
            self.logdir, f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}."
                         f"{os.getpid()}.{next(_file_counter)}")
        self._pending: list[bytes] = []
        self._lock = threading.Lock()
        self._closed = False
        with open(self.path, "xb"):  # the file exists from now on, empty until a flush
            pass
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
        """Record one point of the curve ``tag`` (TensorBoard's Scalars tab)."""
        if not isinstance(tag, str) or not tag:
            raise InvalidArgumentError(f"add_scalar: tag must be a non-empty string, got "
                                       f"{tag!r}")
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"add_scalar '{tag}': value must be a number, got "
                                       f"{value!r}") from None
        if isinstance(step, bool) or not isinstance(step, int):
            raise InvalidArgumentError(f"add_scalar '{tag}': step must be an int, got {step!r}")
        summary = protos.message_class("tensorflow.Summary")()
        entry = summary.value.add()
        entry.tag, entry.simple_value = tag, value
        self._add_event(step=step, summary=summary)

    def flush(self) -> None:
        """Append the buffered events to the event file."""
        with self._lock:
            pending, self._pending = self._pending, []
            if pending:
                with open(self.path, "ab") as file:
                    for data in pending:
                        records.write_record(file, data)

    def close(self) -> None:
        """Flush, then refuse further events."""
        self.flush()
        with self._lock:
            self._closed = True

    def __enter__(self) -> FileWriter:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            self.close()
