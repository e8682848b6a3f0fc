"""Data-parallel training: fused gradient all-reduce, variable broadcast, rank-0 checkpoints.

Each replica (one process per rank) builds the same graph, feeds its shard of every global
batch and runs the same fetches. ``DataParallel(optimizer)`` reduces the gradients with ONE
all-reduce per step (per gradient dtype): every gradient is flattened, the pieces are
concatenated (``FlatConcat``), all-reduced once (``CollectiveAllReduce``), and sliced back
(``FlatSlice``) before the wrapped optimizer's update ops. :func:`broadcast_variables`
makes rank 0's initial values everyone's, and :class:`Saver` writes checkpoints on rank 0
only.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np

from minigraph.client.session import ClientSession
from minigraph.distributed import runtime
from minigraph.distributed.ops import CollectiveAllReduce, FlatConcat, FlatSlice
from minigraph.framework.errors import InvalidArgumentError
from minigraph.framework.graph import Graph, Operation, Output
from minigraph.framework.scope import Scope
from minigraph.framework.tensor_shape import TensorShape, as_shape
from minigraph.gradients.add_symbolic_gradients import AddSymbolicGradients
from minigraph.train import checkpoint
from minigraph.train.optimizers import Optimizer
from minigraph.train.variables import global_variables_initializer


def fused_all_reduce(scope: Scope, tensors: Sequence[Output], *, merge_op: str = "Mean",
                     shapes: Sequence[TensorShape] | None = None,
                     timeout_seconds: float = 0.0) -> list[Output]:
    """All-reduce ``tensors`` with one collective per dtype: flatten, concatenate, reduce
    once, slice back to ``shapes`` (default: the tensors' static shapes, which must be fully
    defined). Returns the reduced tensors in order."""
    tensors = list(tensors)
    shapes = [t.shape for t in tensors] if shapes is None else [as_shape(s) for s in shapes]
    for tensor, shape in zip(tensors, shapes):
        if not shape.is_fully_defined():
            raise InvalidArgumentError(f"fused_all_reduce: '{tensor.name}' needs a fully "
                                       f"defined shape, got {shape}")
    result: list[Output | None] = [None] * len(tensors)
    by_dtype: dict = {}
    for index, tensor in enumerate(tensors):
        by_dtype.setdefault(tensor.dtype, []).append(index)
    for dtype, indices in by_dtype.items():
        group = scope.NewSubScope(f"fused_all_reduce_{dtype.name}")
        packed = FlatConcat(group, [tensors[i] for i in indices])
        reduced = CollectiveAllReduce(group, packed, merge_op=merge_op,
                                      timeout_seconds=timeout_seconds)
        begin = 0
        for i in indices:
            result[i] = FlatSlice(group, reduced, begin, shapes[i])
            begin += shapes[i].num_elements()
    return result


class DataParallel:
    """Wrap an optimizer so that ``minimize``/``apply`` use the replicas' reduced gradients.

    ``merge_op="Mean"`` (default) averages: right when every replica's loss is the mean over
    an equal share of the global batch. For unequal shards, make each replica's loss
    ``sum(per-example losses) / global_batch_size`` and use ``merge_op="Add"``: the sum of
    the replicas' gradients is then exactly the gradient of the global mean loss.
    """

    def __init__(self, optimizer: Optimizer, *, merge_op: str = "Mean",
                 timeout_seconds: float = 0.0) -> None:
        if merge_op not in runtime.MERGE_OPS:
            raise InvalidArgumentError(f"DataParallel: merge_op must be one of "
                                       f"{runtime.MERGE_OPS}, got {merge_op!r}")
        self.optimizer, self.merge_op, self.timeout_seconds = optimizer, merge_op, \
            timeout_seconds

    def compute_gradients(self, scope: Scope, loss: Output, variables: Sequence[Output]
                          ) -> list[tuple[Output | None, Output]]:
        """This replica's gradients (no communication yet)."""
        grads = AddSymbolicGradients(scope, [loss], list(variables))
        return list(zip(grads, variables))

    def reduce_gradients(self, scope: Scope,
                         grads_and_vars: Sequence[tuple[Output | None, Output]]
                         ) -> list[tuple[Output | None, Output]]:
        """The gradients reduced over the replicas by one fused all-reduce."""
        live = [(g, v) for g, v in grads_and_vars if g is not None]
        if not live:
            return list(grads_and_vars)
        reduced = iter(fused_all_reduce(
            scope.NewSubScope("DataParallel"), [g for g, _ in live], merge_op=self.merge_op,
            shapes=[v.shape for _, v in live], timeout_seconds=self.timeout_seconds))
        return [(next(reduced) if g is not None else None, v) for g, v in grads_and_vars]

    def apply(self, scope: Scope, grads_and_vars: Sequence[tuple[Output | None, Output]]
              ) -> list[Operation]:
        """The wrapped optimizer's update ops, fed with the reduced gradients."""
        return self.optimizer.apply(scope, self.reduce_gradients(scope, grads_and_vars))

    def minimize(self, scope: Scope, loss: Output, variables: Sequence[Output]
                 ) -> list[Operation]:
        return self.apply(scope, self.compute_gradients(scope, loss, variables))


# ----------------------------------------------------------------------------- variables


def _variable_ops(graph: Graph, variables: Sequence[Operation | Output] | None
                  ) -> list[Operation]:
    if variables is None:
        return [op for op in graph.operations() if op.type == "Variable"]
    return [v.op if isinstance(v, Output) else v for v in variables]


def _layout(ops: Sequence[Operation]) -> list[tuple[str, np.dtype, tuple[int, ...]]]:
    layout = []
    for op in ops:
        shape = op.attrs["shape"]
        if not shape.is_fully_defined():
            raise InvalidArgumentError(f"broadcast_variables: variable '{op.name}' needs a "
                                       f"fully defined shape, got {shape}")
        layout.append((op.name, op.attrs["dtype"].np_dtype, tuple(shape.dims)))
    return layout


def _check_same_variables(layout: list, what: str) -> None:
    """Every rank must hold the same variables (names, dtypes, shapes): compare a CRC."""
    text = ";".join(f"{name}:{dtype}:{shape}" for name, dtype, shape in layout)
    mine = np.array([zlib.crc32(text.encode()), len(layout)], np.int64)
    table = runtime.all_gather(mine, what=f"{what} (variable check)")
    differ = [r for r in range(len(table)) if not np.array_equal(table[r], table[0])]
    if differ:
        raise InvalidArgumentError(
            f"{what}: ranks {differ} have other variables (names, dtypes or shapes) than "
            f"rank 0; every rank must build the same graph")


def broadcast_variables(session: ClientSession, variables: Sequence | None = None,
                        root: int = 0) -> None:
    """Give every rank ``root``'s values of ``variables`` (default: all the graph's
    Variables) with one broadcast of their bytes. Run after the initializers (or a restore)
    on ``root``; the other ranks need not have initialized them."""
    ops = _variable_ops(session.graph, variables)
    layout = _layout(ops)
    if runtime.size() == 1:
        return
    _check_same_variables(layout, "broadcast_variables")
    sizes = [int(np.prod(shape, dtype=np.int64)) * dtype.itemsize for _, dtype, shape in layout]
    buffer = np.empty(sum(sizes), np.uint8)
    if runtime.rank() == root:
        begin = 0
        for (name, dtype, _), nbytes in zip(layout, sizes):
            value = np.ascontiguousarray(session.state.read(name), dtype)
            buffer[begin:begin + nbytes] = value.reshape(-1).view(np.uint8)
            begin += nbytes
    buffer = runtime.broadcast(buffer, root, what="broadcast_variables")
    with session.state.lock:
        begin = 0
        for (name, dtype, shape), nbytes in zip(layout, sizes):
            session.state.write(name, buffer[begin:begin + nbytes].view(dtype).reshape(shape))
            begin += nbytes


def initialize(session: ClientSession, root: int = 0) -> None:
    """Run the graph's initializers, then broadcast ``root``'s values to every rank."""
    session.Run({}, [], targets=global_variables_initializer(session.graph))
    broadcast_variables(session, root=root)


# ----------------------------------------------------------------------------- checkpoints


class Saver(checkpoint.Saver):
    """``train.Saver`` for a data-parallel job: rank 0 writes, rank 0 reads and broadcasts.

    ``save`` is collective (every rank calls it): a barrier, rank 0 writes the checkpoint
    atomically (temporary file + rename), then rank 0 tells everyone whether it succeeded.
    While rank 0 writes, the others wait inside ``save``, so a failure elsewhere in their
    code cannot make the job abort halfway through the write. ``restore`` is collective too:
    rank 0 reads the file (it need not exist on the other machines) and broadcasts the values.
    """

    def __init__(self, graph: Graph | Scope, variables: list[Operation] | None = None,
                 root: int = 0) -> None:
        super().__init__(graph, variables)
        self.root = root

    def _collective(self, what: str, action) -> object:
        runtime.barrier(what=f"{what} (before)")
        result, error = None, ""
        if runtime.rank() == self.root:
            try:
                result = action()
            except Exception as exc:  # every rank raises it, below
                error = f"{type(exc).__name__}: {exc}"
                if runtime.size() == 1:
                    raise
        status = np.frombuffer(error.encode()[:1024].ljust(1024, b"\0"), np.uint8).copy()
        status = runtime.broadcast(status, self.root, what=f"{what} (status)")
        message = status.tobytes().rstrip(b"\0").decode(errors="replace")
        if message:
            raise InvalidArgumentError(f"{what} failed on rank {self.root}: {message}")
        return result

    def save(self, session: ClientSession, path) -> str | None:
        """Rank 0: write ``path`` and return it; other ranks: return None."""
        return self._collective("Saver.save", lambda: super(Saver, self).save(session, path))

    def restore(self, session: ClientSession, path) -> None:
        self._collective("Saver.restore",
                         lambda: super(Saver, self).restore(session, path))
        broadcast_variables(session, self.variables, root=self.root)
