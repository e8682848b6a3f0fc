"""Checkpoints: every Variable of a graph saved to one ``.npz``, written atomically.

``Saver(graph).save(session, path)`` writes to a temporary file in the same directory and
renames it over ``path`` (``os.replace`` is atomic), so a crash never leaves a half-written
checkpoint; the temporary is removed on any error, and one left by a killed process is
removed by the next save (see :func:`minigraph.io.atomic_write`). The file gets mode
``0o666`` less the umask, like any other output.

``restore`` reads only the members it needs, one at a time, and checks each member's
``.npy`` header (dtype and shape against the variable, byte count against the zip
directory) before reading its data, so a member claiming a huge shape is refused without
being read. It checks every variable before assigning anything, and names what does not
match; an unreadable file (not a ``.npz``, a ``.npy``, an unknown compression, a truncated
member) is an :class:`InvalidArgumentError`, a missing one a :class:`NotFoundError`.
bfloat16 values are stored as their uint16 bit patterns (``.npz`` has no bfloat16).
"""

from __future__ import annotations

import os

import numpy as np

from minigraph.client.session import ClientSession
from minigraph.framework import dtypes
from minigraph.framework.errors import InvalidArgumentError
from minigraph.framework.graph import Graph, Operation
from minigraph.framework.scope import Scope
from minigraph.io import NpzReader, atomic_write, write_npz

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
        return atomic_write(path, lambda file: write_npz(file, arrays))

    def restore(self, session: ClientSession, path: str | os.PathLike) -> None:
        """Load every variable from ``path``; raise before assigning anything on a mismatch."""
        path = os.fspath(path)
        values = {}
        with NpzReader(path, "checkpoint") as archive:
            for op in self.variables:
                values[op.name] = _read_variable(archive, op)
        with session.state.lock:
            for name, value in values.items():
                session.state.write(name, value)


def _read_variable(archive: NpzReader, op: Operation) -> np.ndarray:
    """Variable ``op``'s value, its member's header checked against the variable first."""
    dtype, shape = op.attrs["dtype"], op.attrs["shape"]
    bfloat16 = op.name + BFLOAT16_SUFFIX in archive
    if bfloat16:
        member = op.name + BFLOAT16_SUFFIX
    elif op.name in archive:
        member = op.name
    else:
        raise InvalidArgumentError(f"checkpoint '{archive.path}' has no value for variable "
                                   f"'{op.name}'")
    stored_dtype = np.dtype(np.uint16) if bfloat16 else dtype.np_dtype

    def check(found: np.dtype, found_shape: tuple[int, ...]) -> str | None:
        if found.newbyteorder("=") != stored_dtype:
            what = f"{found} (bfloat16 is stored as uint16 bits)" if bfloat16 else found
            raise InvalidArgumentError(
                f"checkpoint '{archive.path}': variable '{op.name}' has dtype {what}, the "
                f"graph expects {dtype.name}")
        if not shape.is_compatible_with(found_shape):
            raise InvalidArgumentError(
                f"checkpoint '{archive.path}': variable '{op.name}' has shape "
                f"{list(found_shape)}, the graph expects {shape}")
        return None

    value = archive.read(member, check)
    return value.view(dtypes.bfloat16.np_dtype) if bfloat16 else value
