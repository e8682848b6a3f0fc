"""Checkpoints: every Variable of a graph saved to one ``.npz``, written atomically.

``Saver(graph).save(session, path)`` writes to a temporary file in the same directory and
renames it over ``path`` (``os.replace`` is atomic), so a crash never leaves a half-written
checkpoint. ``restore`` checks that the checkpoint holds every variable with the graph's
shape and dtype before assigning anything, and names what does not match.
bfloat16 values are stored as their uint16 bit patterns (``.npz`` has no bfloat16).
"""

from __future__ import annotations

import os
import tempfile
import zipfile

import numpy as np

from minigraph.client.session import ClientSession
from minigraph.framework import dtypes
from minigraph.framework.errors import InvalidArgumentError
from minigraph.framework.graph import Graph, Operation
from minigraph.framework.scope import Scope

BFLOAT16_SUFFIX = "::bfloat16"


class Saver:
    def __init__(self, graph: Graph | Scope, variables: list[Operation] | None = None) -> None:
        graph = graph.graph() if isinstance(graph, Scope) else graph
        self.variables = variables if variables is not None else [
            op for op in graph.operations() if op.type == "Variable"]

    def save(self, session: ClientSession, path: str | os.PathLike) -> str:
        """Write all variables to ``path`` (a ``.npz``) atomically; return the path."""
        path = os.fspath(path)
        arrays = {}
        for op in self.variables:
            value = session.state.read(op.name)
            if op.attrs["dtype"] is dtypes.bfloat16:
                arrays[op.name + BFLOAT16_SUFFIX] = value.view(np.uint16)
            else:
                arrays[op.name] = value
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=directory, suffix=".npz.tmp")
        try:
            with os.fdopen(handle, "wb") as file:
                np.savez(file, **arrays)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise
        return path

    def restore(self, session: ClientSession, path: str | os.PathLike) -> None:
        """Load every variable from ``path``; raise before assigning anything on a mismatch."""
        path = os.fspath(path)
        try:
            with np.load(path, allow_pickle=False) as archive:
                stored = {name: archive[name] for name in archive.files}
        except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
            raise InvalidArgumentError(f"cannot read checkpoint '{path}': {exc}") from None
        values = {}
        for op in self.variables:
            dtype, shape = op.attrs["dtype"], op.attrs["shape"]
            if op.name + BFLOAT16_SUFFIX in stored:
                value = stored[op.name + BFLOAT16_SUFFIX].view(dtypes.bfloat16.np_dtype)
            elif op.name in stored:
                value = stored[op.name]
            else:
                raise InvalidArgumentError(f"checkpoint '{path}' has no value for variable "
                                           f"'{op.name}'")
            if value.dtype != dtype.np_dtype:
                raise InvalidArgumentError(
                    f"checkpoint '{path}': variable '{op.name}' has dtype {value.dtype}, the "
                    f"graph expects {dtype.name}")
            if not shape.is_compatible_with(value.shape):
                raise InvalidArgumentError(
                    f"checkpoint '{path}': variable '{op.name}' has shape {list(value.shape)}, "
                    f"the graph expects {shape}")
            values[op.name] = value
        with session.state.lock:
            for name, value in values.items():
                session.state.write(name, value)
