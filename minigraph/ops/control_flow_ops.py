"""Control flow: ``WhileLoop`` and ``Conditional``, what TensorFlow's ``while`` loops and
conditionals become when minigraph imports a frozen graph.

TensorFlow lowers a ``while`` loop (a Keras ``LSTM``, ``GRU`` or ``SimpleRNN`` layer, any
``tf.while_loop``) into a frame of ``Enter``, ``Merge``, ``Switch``, ``NextIteration``,
``LoopCond`` and ``Exit`` nodes before it freezes a graph; its tensor arrays become
``TensorList`` ops on a ``variant`` tensor. minigraph has neither frames nor variants: the
importer (``interop/loops.py``) lifts each frame back into one ``WhileLoop`` node whose
condition and body are :class:`Subgraph`s, and the session runs it by running those
subgraphs (``client/loops.py``)::

    values = loop_vars
    go = cond(values)                 # a scalar bool
    while go:
        values, (index, item)..., go = body(values)  # go: cond(next values)
        lists[k][index] = item        # the loop's TensorListSetItem, one per list
    return values, stack(lists)       # the TensorListStack after the loop

A list read in the body (``TensorListGetItem`` of a list made by ``TensorListFromTensor``)
is the tensor it was made from, read with ``GatherV2``; a list written in the body (a
``TensorListReserve``'d list, ``TensorListSetItem``) is an accumulator of the op: the body
returns each write's index and item after the loop variables, and the op returns each
list stacked (``[length, *item shape]``; rows never written are zeros; a list nobody
wrote takes its reserved element shape, which must then be fully defined) after the final
loop variables. A ``growable`` list (a dynamic-size TensorArray's) grows to ``index + 1``
on a write past its end; items written before the loop (``tf.scan`` writes its first so)
are inputs, written in order before the first iteration.

``Conditional(selector, inputs)`` is a lowered ``tf.cond`` or ``tf.switch_case``
(``Switch``/``_SwitchN`` and ``Merge`` nodes, lifted by ``interop/conds.py``): the session
runs the branch the scalar ``selector`` picks (a bool: branch 1 when true, 0 when false;
an int32 index: that branch, the last one when out of range, as TF's ``_SwitchN``) on the
inputs and returns its results; the others do not run (they may fail on these inputs: a
crop larger than the image).

Both are minigraph's own ops (TensorFlow's ``While`` and ``If`` call library functions),
have no gradient and are not exported back to a GraphDef.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from minigraph.framework import dtypes
from minigraph.framework.graph import Graph, Operation, Output
from minigraph.framework.op_def import (
    ArgDef,
    AttrDef,
    InferenceContext,
    OpDef,
    register_op,
    required,
)
from minigraph.framework.tensor_shape import TensorShape

# no wrappers: loops come from imported graphs (``mg.import_graph_def``)
__all__: list[str] = []


@dataclass(eq=False)
class Subgraph:
    """A loop's condition or body: a graph of its own, fed at ``inputs`` (Placeholders, one
    per loop variable), computing ``outputs``; ``targets`` are run too for their effects
    (an ``Assert`` only a control edge keeps). ``runners`` caches one session per backend
    and optimizer options (``client/loops.py``)."""

    graph: Graph
    inputs: tuple[Output, ...]
    outputs: tuple[Output, ...]
    targets: tuple[Operation, ...] = ()
    runners: dict[tuple, Any] = field(default_factory=dict, repr=False)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __repr__(self) -> str:
        return (f"<Subgraph of {len(self.graph)} nodes: {len(self.inputs)} inputs -> "
                f"{len(self.outputs)} outputs>")


def _common_shape(a: TensorShape, b: TensorShape) -> TensorShape:
    """The static shape true of both ``a`` and ``b``: their dims where they agree."""
    if a.rank is None or b.rank is None or a.rank != b.rank:
        return TensorShape(None)
    return TensorShape([x if x == y else None for x, y in zip(a.dims, b.dims)])


def _while_loop_shapes(ctx: InferenceContext) -> list[TensorShape]:
    """A loop variable's shape is what its initial value and every body result share (zero
    iterations return the initial value); a stacked list is ``[length, *item shape]``."""
    count, lists = len(ctx.attrs["T"]), ctx.attrs["num_lists"]
    body = ctx.attrs["body"]
    prewritten = ctx.attrs["prewritten"]
    if len(prewritten) != ctx.attrs["num_prewrites"] or any(
            not 0 <= k < lists for k in prewritten):
        raise ctx.error(f"attr 'prewritten' {prewritten} must name one of the {lists} lists "
                        f"for each of the {ctx.attrs['num_prewrites']} items written before "
                        f"the loop")
    for k in range(lists):
        length, shape = ctx.input_shapes[count + k], ctx.input_shapes[count + lists + k]
        if length.rank not in (None, 0):
            raise ctx.error(f"list length {k} must be a scalar, got shape {length}")
        if shape.rank not in (None, 0, 1):
            raise ctx.error(f"element shape {k} must be a scalar or a vector, got shape "
                            f"{shape}")
    shapes = [_common_shape(ctx.input_shapes[i], body.outputs[i].shape) for i in range(count)]
    items = body.outputs[count + 1:count + 2 * lists:2]
    shapes += [TensorShape(None) if item.shape.rank is None
               else TensorShape([None, *item.shape.dims]) for item in items]
    return shapes


WHILE_LOOP = register_op(OpDef(
    name="WhileLoop",
    inputs=[ArgDef("loop_vars", type_list_attr="T",
                   doc="The loop variables' initial values."),
            ArgDef("list_lengths", dtype=dtypes.int32, number_attr="num_lists",
                   doc="The length each written list was reserved with."),
            ArgDef("element_shapes", dtype=dtypes.int32, number_attr="num_lists",
                   doc="Each written list's item shape as reserved (-1: unknown), for "
                       "stacking a list nobody wrote."),
            ArgDef("prewrite_indices", dtype=dtypes.int32, number_attr="num_prewrites",
                   doc="Where items are written before the loop (tf.scan's first)."),
            ArgDef("prewrite_items", type_list_attr="prewrite_types",
                   doc="The items written there.")],
    outputs=[ArgDef("outputs", type_list_attr="T",
                    doc="The loop variables when the condition turns false."),
             ArgDef("stacked", type_list_attr="list_types",
                    doc="Each written list, stacked: [length, *item shape].")],
    attrs=[required("T", "list(type)", doc="The loop variables' dtypes."),
           required("num_lists", "int",
                    check=lambda n: None if n >= 0 else f"must be >= 0, got {n}",
                    doc="How many lists the body writes."),
           AttrDef("list_types", "list(type)", default=[],
                   doc="The item dtype of each written list."),
           required("num_prewrites", "int",
                    check=lambda n: None if n >= 0 else f"must be >= 0, got {n}",
                    doc="How many items are written before the loop."),
           AttrDef("prewrite_types", "list(type)", default=[],
                   doc="Their dtypes."),
           AttrDef("prewritten", "list(int)", default=[],
                   doc="Into which list each item before the loop is written."),
           AttrDef("growable", "list(int)", default=[],
                   doc="The lists a write past their end grows (a dynamic-size "
                       "TensorArray's), by position."),
           required("cond", "func", doc="The condition: loop variables -> scalar bool."),
           required("body", "func",
                    doc="The body: loop variables -> next loop variables, an (index, item) "
                        "pair per written list, then the condition on the next loop "
                        "variables.")],
    shape_fn=_while_loop_shapes,
    is_stateful=True,  # never folded or merged: its subgraphs are not compared by value
))


def _conditional_shapes(ctx: InferenceContext) -> list[TensorShape]:
    """A result's shape is what every branch's result shares."""
    if ctx.input_shapes[0].rank not in (None, 0):
        raise ctx.error(f"the selector must be a scalar, got shape {ctx.input_shapes[0]}")
    branches = ctx.attrs["branches"]
    if not branches or len({len(b.outputs) for b in branches}) != 1:
        raise ctx.error("the branches must give the same number of results")
    shapes = [output.shape for output in branches[0].outputs]
    for branch in branches[1:]:
        shapes = [_common_shape(a, b.shape) for a, b in zip(shapes, branch.outputs)]
    return shapes


CONDITIONAL = register_op(OpDef(
    name="Conditional",
    inputs=[ArgDef("selector", type_attr="Tselector",
                   doc="Which branch runs: a bool (false: branch 0, true: branch 1) or an "
                       "index (outside [0, n): the last branch), a scalar."),
            ArgDef("input", type_list_attr="Tin", doc="What the branches read.")],
    outputs=[ArgDef("output", type_list_attr="Tout", doc="The branch's results.")],
    attrs=[required("Tselector", "type", allowed=(dtypes.bool_, dtypes.int32),
                    doc="bool (tf.cond) or int32 (tf.switch_case)."),
           required("Tin", "list(type)", doc="The inputs' dtypes."),
           required("Tout", "list(type)", doc="The results' dtypes."),
           required("branches", "list(func)",
                    doc="The branches, each inputs -> results, by selector value.")],
    shape_fn=_conditional_shapes,
    is_stateful=True,  # never folded or merged: its subgraphs are not compared by value
))
