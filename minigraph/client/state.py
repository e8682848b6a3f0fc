"""The state one ClientSession keeps between Run calls: variable values and random streams.

Values are replaced, never mutated in place, so an array a Run returned keeps its value
after later updates. A lock makes each read-modify-write of a variable atomic. A kernel may
reuse the memory of a value it replaced once no one holds that value or a view of it any
more (``buffers``: the fused optimizer updates take turns between two such blocks).
"""

from __future__ import annotations

import threading
import zlib
from typing import Any

import numpy as np

from minigraph.framework.errors import FailedPreconditionError
from minigraph.framework.graph import Operation


class SessionState:
    def __init__(self, optimizer: Any = None, check_outputs: bool = False) -> None:
        # the session's OptimizerOptions and whether it checks every kernel's results: the
        # sessions of its loops' and conditionals' subgraphs run with the same
        # (client/loops.py)
        self.optimizer = optimizer
        self.check_outputs = check_outputs
        self.variables: dict[str, np.ndarray] = {}
        self.lock = threading.RLock()
        self.step_lock = threading.Lock()  # held by a Run that writes variables (a step)
        self._generators: dict[str, np.random.Generator] = {}
        # memory kernels keep from one step to the next to write variables' new values
        # into, by their own keys (``fused_training_kernels._Slab``); used under ``lock``
        self.buffers: dict[Any, Any] = {}

    def read(self, name: str) -> np.ndarray:
        try:
            return self.variables[name]
        except KeyError:
            raise FailedPreconditionError(
                f"Attempting to use uninitialized value '{name}': run its initializer (an "
                f"Assign) first, or restore a checkpoint") from None

    def write(self, name: str, value: np.ndarray) -> np.ndarray:
        value = np.array(value)  # a private copy: callers may keep the array they passed
        value.setflags(write=False)
        self.variables[name] = value
        return value

    def adopt(self, name: str, value: np.ndarray) -> np.ndarray:
        """Store ``value`` itself, made read-only, without :meth:`write`'s copy: for an
        array its caller just made and gives away (an optimizer kernel's new values, which
        no one else holds: a later write into it is then impossible)."""
        value.setflags(write=False)
        self.variables[name] = value
        return value

    def generator(self, op: Operation) -> np.random.Generator:
        """A deterministic stream per random op: seeded by its (seed, seed2, name). The seeds
        are int64 attrs, negative ones included (as TF takes them): their two's-complement
        bits seed numpy, which takes only non-negative words."""
        with self.lock:
            if op.name not in self._generators:
                words = [op.attrs["seed"] % 2**64, op.attrs["seed2"] % 2**64,
                         zlib.crc32(op.name.encode())]
                self._generators[op.name] = np.random.default_rng(words)
            return self._generators[op.name]
