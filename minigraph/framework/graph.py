"""The dataflow graph: :class:`Graph`, its :class:`Operation` nodes and their :class:`Output` edges.

Nodes are immutable once added: their inputs, attrs (every default filled in), device and
static output shapes are fixed at construction, which is what lets a session cache its plans
and lets autodiff walk the graph without locks.
"""

from __future__ import annotations

import difflib
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from minigraph.framework.dtypes import DType
from minigraph.framework.tensor_shape import TensorShape, dims_text

if TYPE_CHECKING:
    from minigraph.framework.op_def import OpDef


class Output:
    """One output edge of an operation: ``op:index``, with static dtype and shape."""

    __slots__ = ("op", "index", "dtype", "shape")

    def __init__(self, op: Operation, index: int, dtype: DType, shape: TensorShape) -> None:
        self.op = op
        self.index = index
        self.dtype = dtype
        self.shape = shape

    @property
    def operation(self) -> Operation:
        return self.op

    @property
    def name(self) -> str:
        return f"{self.op.name}:{self.index}"

    @property
    def graph(self) -> Graph:
        return self.op.graph

    def consumers(self) -> list[Operation]:
        """Operations that read this output, in creation order."""
        return [op for op in self.op.graph.operations() if any(i is self for i in op.inputs)]

    def get_shape(self) -> TensorShape:
        """The static shape (TF's ``Tensor.get_shape()``)."""
        return self.shape

    def __getattr__(self, name: str) -> Output:
        """TF C++'s named member of a single-output op: ``ops.Add(...).z``,
        ``ops.Relu(...).activations``, ``ops.Identity(...).output`` is the Output itself."""
        if not name.startswith("_"):
            args = self.op.op_def.outputs
            arg = args[self.index] if self.index < len(args) else None
            if arg is not None and arg.name == name and not arg.is_list:
                return self
        raise AttributeError(f"'Output' object has no attribute '{name}'")

    def __repr__(self) -> str:
        return f"<mg.Output '{self.name}' dtype={self.dtype.name} shape={self.shape}>"


class Operation:
    """A node: an op type applied to input edges, with attrs, a device and output edges."""

    __slots__ = ("graph", "name", "type", "op_def", "inputs", "control_inputs", "attrs",
                 "device", "outputs", "_id")

    def __init__(self, graph: Graph, name: str, op_def: OpDef, inputs: Iterable[Output],
                 control_inputs: Iterable[Operation], attrs: dict[str, Any], device: str,
                 output_specs: Iterable[tuple[DType, TensorShape]]) -> None:
        self.graph = graph
        self.name = name
        self.type = op_def.name
        self.op_def = op_def
        self.inputs = tuple(inputs)
        self.control_inputs = tuple(control_inputs)
        self.attrs = dict(attrs)
        self.device = device
        self.outputs = tuple(Output(self, i, dtype, shape)
                             for i, (dtype, shape) in enumerate(output_specs))

    @property
    def num_outputs(self) -> int:
        return len(self.outputs)

    @property
    def num_inputs(self) -> int:
        return len(self.inputs)

    def output(self, index: int) -> Output:
        return self.outputs[index]

    def input_named(self, name: str) -> Output:
        """The input bound to the op-def argument ``name`` (``op.input_named("x")``)."""
        return self.inputs[self.op_def.input_index(name, self.attrs)]

    def output_named(self, name: str) -> Output:
        return self.outputs[self.op_def.output_index(name)]

    def __repr__(self) -> str:
        return f"<mg.Operation '{self.name}' type={self.type}>"


_on_graph_created: list[Callable[[Graph], None]] = []


def on_graph_created(callback: Callable[[Graph], None]) -> Callable[[], None]:
    """Call ``callback(graph)`` for each :class:`Graph` created from now on.

    Lets tools see the graphs a program builds (``python -m minigraph viz`` records them this
    way). Returns a function that unregisters the callback.
    """
    _on_graph_created.append(callback)

    def remove() -> None:
        if callback in _on_graph_created:
            _on_graph_created.remove(callback)

    return remove


class Graph:
    """An append-only collection of operations with unique names.

    ``notify=False`` keeps a graph minigraph builds for itself (a session's optimized graph,
    a fused op's member ops) from the :func:`on_graph_created` callbacks."""

    def __init__(self, *, notify: bool = True) -> None:
        self._ops: list[Operation] = []
        self._by_name: dict[str, Operation] = {}
        self._name_counts: dict[str, int] = {}
        # Named lists of graph objects, like TF collections: "initializers" holds the Assign
        # ops that give Variables their first value.
        self.collections: dict[str, list] = {}
        self._lock = threading.Lock()
        for callback in tuple(_on_graph_created) if notify else ():
            callback(self)

    def unique_name(self, wanted: str) -> str:
        """``wanted`` if unused, else ``wanted_1``, ``wanted_2``... (TensorFlow's rule)."""
        with self._lock:
            if wanted not in self._name_counts and wanted not in self._by_name:
                self._name_counts[wanted] = 0
                return wanted
            count = self._name_counts.get(wanted, 0)
            while True:
                count += 1
                candidate = f"{wanted}_{count}"
                if candidate not in self._name_counts and candidate not in self._by_name:
                    break
            self._name_counts[wanted] = count
            self._name_counts[candidate] = 0
            return candidate

    def add_operation(self, op: Operation) -> Operation:
        with self._lock:
            if op.name in self._by_name:
                raise ValueError(f"duplicate operation name '{op.name}'")
            op._id = len(self._ops)
            self._ops.append(op)
            self._by_name[op.name] = op
        return op

    def add_to_collection(self, name: str, item: object) -> None:
        with self._lock:
            self.collections.setdefault(name, []).append(item)

    def get_collection(self, name: str) -> list:
        with self._lock:
            return list(self.collections.get(name, []))

    def operations(self) -> list[Operation]:
        """All operations in creation order (a topological order: inputs come first)."""
        with self._lock:
            return list(self._ops)

    def get_operations(self) -> list[Operation]:
        """All operations in creation order (TF's ``Graph.get_operations()``)."""
        return self.operations()

    def get_operation(self, name: str) -> Operation:
        """The operation called ``name``; KeyError naming close matches otherwise."""
        try:
            return self._by_name[name]
        except KeyError:
            close = difflib.get_close_matches(name, list(self._by_name), n=3)
            hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
            raise KeyError(f"The name '{name}' refers to an Operation not in the graph{hint}"
                           ) from None

    get_operation_by_name = get_operation  # TF's name

    def get_tensor_by_name(self, name: str) -> Output:
        """The output ``"op_name:index"`` (TF's ``Graph.get_tensor_by_name``)."""
        op_name, sep, index = name.rpartition(":")
        if not sep or not index.isdigit():
            raise ValueError(f"The name '{name}' looks like an Operation name, not a tensor "
                             f"name: tensor names are '<op_name>:<output_index>', e.g. "
                             f"'{name}:0'")
        op = self.get_operation(op_name)
        if int(index) >= len(op.outputs):
            raise KeyError(f"The name '{name}' refers to a Tensor which does not exist: "
                           f"operation '{op_name}' has {len(op.outputs)} output(s)")
        return op.outputs[int(index)]

    def summary(self) -> str:
        """A listing like Keras' ``model.summary()``: every op by name with its type, device,
        output dtypes and static shapes, and the element count of each Variable (its
        parameters), then the totals."""
        rows = [("name", "type", "device", "outputs", "params")]
        params = 0
        for op in self.operations():
            outputs = ", ".join(f"{o.dtype.name}{dims_text(o.shape)}" for o in op.outputs)
            count = op.outputs[0].shape.num_elements() if op.type == "Variable" else None
            params += count or 0
            rows.append((op.name, op.type, op.device or "-", outputs or "-",
                         "" if count is None else f"{count:,}"))
        widths = [max(len(row[i]) for row in rows) for i in range(5)]
        lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
                 for row in rows]
        lines.insert(1, "-" * len(lines[0]))
        lines.append(f"{len(self)} operations, {params:,} parameters in "
                     f"{sum(op.type == 'Variable' for op in self.operations())} variables")
        return "\n".join(lines)

    def __iter__(self) -> Iterator[Operation]:
        return iter(self.operations())

    def __len__(self) -> int:
        return len(self._ops)

    def __repr__(self) -> str:
        return f"<mg.Graph with {len(self._ops)} operations>"

    def __str__(self) -> str:
        return self.summary()
