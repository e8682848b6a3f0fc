"""Running ``WhileLoop`` and ``Conditional`` (``ops/control_flow_ops.py``): their
condition, body and branches are subgraphs, each run by a session of its own on the backend
the op's session runs on.

``Conditional`` checks that its selector is a scalar and runs the branch it picks on its
inputs (an index out of range picks the last, as TF's ``_SwitchN``).

The condition runs on the initial loop variables (a scalar bool, TensorFlow's
``LoopCond``); while it holds, the body runs: its results are the next loop variables, one
``(index, item)`` pair per written list, and the condition on the next variables (the
importer builds the body so: one run an iteration). Items written before the loop are
written first, in order. A write follows ``TensorListSetItem``: the index
must lie in ``[0, length)`` (a growable list grows to ``index + 1`` instead), and every
item of a list has the dtype and shape of the first.
After the loop each list is stacked (``TensorListStack``): ``[length, *item shape]``, rows
never written are zeros; a list nobody wrote takes the element shape it was reserved with,
and is refused when that is not fully defined.

A loop that runs more than :data:`MAX_ITERATIONS` times raises ``ResourceExhaustedError``
instead of hanging: a hostile graph's condition may never turn false.
"""

from __future__ import annotations

import numpy as np

from minigraph.backends.registry import KernelContext, register_kernel
from minigraph.client.session import ClientSession, PreparedRun
from minigraph.framework.errors import InvalidArgumentError, ResourceExhaustedError
from minigraph.framework.graph import Operation
from minigraph.framework.limits import check_allocation
from minigraph.framework.tensor_shape import TensorShape
from minigraph.ops.control_flow_ops import Subgraph

# far beyond a recurrent layer's time steps (131,072); a loop past it is taken for a
# runaway. A program that needs more sets ``minigraph.client.loops.MAX_ITERATIONS``.
MAX_ITERATIONS = 1 << 17


def _runner(subgraph: Subgraph, ctx: KernelContext) -> PreparedRun:
    """What runs ``subgraph`` on ``ctx``'s backend with the calling session's optimizer
    options and output checks (one session per such key, shared by every run): its loop
    variables in, its outputs out."""
    optimizer = getattr(ctx.state, "optimizer", None)
    check_outputs = getattr(ctx.state, "check_outputs", None)
    key = (ctx.backend, optimizer, check_outputs)
    with subgraph.lock:
        run = subgraph.runners.get(key)
        if run is None:
            session = ClientSession(subgraph.graph, ctx.backend, optimizer=optimizer,
                                    check_outputs=check_outputs)
            run = subgraph.runners[key] = session.prepared(
                subgraph.inputs, subgraph.outputs, subgraph.targets)
    return run


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


def _holds(op: Operation, go: np.ndarray) -> bool:
    """The condition's value, checked: a scalar (TF's ``LoopCond`` takes one)."""
    if go.shape != ():
        raise InvalidArgumentError(f"{op.type} '{op.name}': the condition must be a scalar, "
                                   f"got shape {go.shape}")
    return bool(go)


@register_kernel("WhileLoop", backend=("reference", "native", "float64"))
def while_loop(op: Operation, inputs: list, ctx: KernelContext) -> list:
    """Run the loop (see the module's docstring) with the subgraphs on ``ctx.backend``. The
    body computes the condition on its results too, so an iteration is one run."""
    count, lists = len(op.attrs["T"]), op.attrs["num_lists"]
    run_cond = _runner(op.attrs["cond"], ctx)
    run_body = _runner(op.attrs["body"], ctx)
    values = list(inputs[:count])
    written = [_List(op, k, length, shape) for k, (length, shape) in
               enumerate(zip(inputs[count:count + lists],
                             inputs[count + lists:count + 2 * lists]))]
    prewrites = inputs[count + 2 * lists:]
    half = len(prewrites) // 2
    for k, index, item in zip(op.attrs["prewritten"], prewrites[:half], prewrites[half:]):
        written[k].write(index, item)
    go = _holds(op, run_cond(values)[0])
    iterations = 0
    replay = None  # the body replayed over its own buffers, once its plan is bound
    try:
        while go:
            if iterations == MAX_ITERATIONS:
                raise ResourceExhaustedError(f"{op.type} '{op.name}': the loop ran "
                                             f"{MAX_ITERATIONS:,} iterations and its "
                                             f"condition still holds; minigraph stops "
                                             f"runaway loops there")
            iterations += 1
            if replay is None:
                replay = run_body.replay(values)
            results = run_body(values) if replay is None else replay.step()
            values = results[:count]
            for target, index, item in zip(written, results[count::2], results[count + 1::2]):
                target.write(index, item if replay is None else item.copy())
            go = _holds(op, results[-1])
        if replay is not None:
            values = replay.own(values)
    finally:
        if replay is not None:
            replay.lock.release()
    return values + [target.stacked() for target in written]


@register_kernel("Conditional", backend=("reference", "native", "float64"))
def conditional(op: Operation, inputs: list, ctx: KernelContext) -> list:
    """The results of the branch the selector picks (the others do not run)."""
    selector, branches = inputs[0], op.attrs["branches"]
    if selector.shape != ():
        raise InvalidArgumentError(f"{op.type} '{op.name}': the selector must be a scalar, "
                                   f"got shape {selector.shape}")
    index = int(selector)
    if not 0 <= index < len(branches):  # TF's _SwitchN: out of range, the last branch
        index = len(branches) - 1
    return list(_runner(branches[index], ctx)(inputs[1:]))
