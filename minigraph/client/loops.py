"""Running ``WhileLoop`` (``ops/control_flow_ops.py``): its condition and body are subgraphs,
each run by a session of its own on the backend the loop's session runs on.

Each iteration runs the condition on the loop variables (a scalar bool, TensorFlow's
``LoopCond``), then the body, whose results are the next loop variables followed by one
``(index, item)`` pair per written list. A write follows ``TensorListSetItem``: the index
must lie in ``[0, length)`` (a growable list grows to ``index + 1`` instead), and every
item of a list has the dtype and shape of the first.
After the loop each list is stacked (``TensorListStack``): ``[length, *item shape]``, rows
never written are zeros; a list nobody wrote takes the element shape it was reserved with,
and is refused when that is not fully defined.

A loop that runs more than :data:`MAX_ITERATIONS` times raises ``ResourceExhaustedError``
instead of hanging: a hostile graph's condition may never turn false.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from minigraph.backends.registry import KernelContext, register_kernel
from minigraph.client.session import ClientSession
from minigraph.framework.errors import InvalidArgumentError, ResourceExhaustedError
from minigraph.framework.graph import Operation
from minigraph.framework.limits import check_allocation
from minigraph.framework.tensor_shape import TensorShape
from minigraph.ops.control_flow_ops import Subgraph

# far beyond any recurrent layer's time steps; a loop past it is taken for a runaway
MAX_ITERATIONS = 1 << 20


def _runner(subgraph: Subgraph, backend: str) -> ClientSession:
    """The session that runs ``subgraph`` on ``backend`` (one, shared by every run)."""
    with subgraph.lock:
        session = subgraph.runners.get(backend)
        if session is None:
            session = subgraph.runners[backend] = ClientSession(subgraph.graph, backend)
    return session


def _run(subgraph: Subgraph, session: ClientSession, values: Sequence[np.ndarray]
         ) -> list[np.ndarray]:
    feeds = dict(zip(subgraph.inputs, values))
    return session.Run(feeds, list(subgraph.outputs), targets=subgraph.targets)


class _List:
    """A list the body writes: ``length`` rows, filled as the writes come."""

    def __init__(self, op: Operation, position: int, length: np.ndarray,
                 element_shape: np.ndarray) -> None:
        self.op, self.position, self.length = op, position, int(length)
        self.element_shape = element_shape
        self.growable = position in op.attrs["growable"]
        if self.length < 0:
            raise self.error(f"its reserved length is {self.length}, expected >= 0")
        self.rows: dict[int, np.ndarray] = {}

    def error(self, message: str) -> InvalidArgumentError:
        return InvalidArgumentError(f"{self.op.type} '{self.op.name}': list {self.position}: "
                                    f"{message}")

    def write(self, index: np.ndarray, item: np.ndarray) -> None:
        if index.shape != ():
            raise self.error(f"the index must be a scalar, got shape {index.shape}")
        where = int(index)
        if self.growable and where >= self.length:
            self.length = where + 1
        if not 0 <= where < self.length:
            raise self.error(f"Trying to modify element {where} in a list with "
                             f"{self.length} elements.")
        if self.rows:
            first = next(iter(self.rows.values()))
            if item.shape != first.shape or item.dtype != first.dtype:
                raise self.error(f"item {where} has shape {item.shape} and dtype {item.dtype}; "
                                 f"the list holds items of shape {first.shape} and dtype "
                                 f"{first.dtype}")
        self.rows[where] = item

    def stacked(self) -> np.ndarray:
        dtype = self.op.attrs["list_types"][self.position].np_dtype
        if self.rows:
            shape = next(iter(self.rows.values())).shape
        elif self.element_shape.ndim == 1 and (self.element_shape >= 0).all():
            shape = tuple(int(d) for d in self.element_shape)
        else:
            raise self.error(f"none of its {self.length} elements was written and its "
                             f"element shape {self.element_shape.tolist()} is not fully "
                             f"defined, so it cannot be stacked")
        check_allocation(TensorShape([self.length, *shape]), dtype.itemsize,
                         f"{self.op.type} '{self.op.name}': list {self.position}")
        result = np.zeros((self.length, *shape), dtype)
        for where, item in self.rows.items():
            result[where] = item
        return result


@register_kernel("WhileLoop", backend=("reference", "native", "float64"))
def while_loop(op: Operation, inputs: list, ctx: KernelContext) -> list:
    """Run the loop (see the module's docstring) with the subgraphs on ``ctx.backend``."""
    count = len(op.attrs["T"])
    cond, body = op.attrs["cond"], op.attrs["body"]
    run_cond, run_body = _runner(cond, ctx.backend), _runner(body, ctx.backend)
    values = list(inputs[:count])
    lengths = inputs[count:count + op.attrs["num_lists"]]
    shapes = inputs[count + op.attrs["num_lists"]:]
    lists = [_List(op, k, length, shape)
             for k, (length, shape) in enumerate(zip(lengths, shapes))]
    iterations = 0
    while True:
        (go,) = _run(cond, run_cond, values)
        if go.shape != ():
            raise InvalidArgumentError(f"{op.type} '{op.name}': the condition must be a "
                                       f"scalar, got shape {go.shape}")
        if not go:
            break
        if iterations == MAX_ITERATIONS:
            raise ResourceExhaustedError(f"{op.type} '{op.name}': the loop ran "
                                         f"{MAX_ITERATIONS:,} iterations and its condition "
                                         f"still holds; minigraph stops runaway loops there")
        iterations += 1
        results = _run(body, run_body, values)
        values = results[:count]
        for written, index, item in zip(lists, results[count::2], results[count + 1::2]):
            written.write(index, item)
    return values + [written.stacked() for written in lists]
