"""Ops that pick elements by their values: ``TopKV2`` (``tf.math.top_k``, ``tf.sort`` and
``tf.argsort`` are built on it), ``Where`` (the coordinates of the true or nonzero
elements, ``tf.where`` with one argument) and ``Bucketize`` (Keras' ``Discretization``).

Names, inputs, outputs and attrs are TensorFlow 2.21's; the checks are its kernels', in its
words (``input must have at least k columns. Had 6, needed 7``), made at construction where
the values are known and again before the kernel runs.

* ``TopKV2``: the k largest entries of each last-axis row, largest first, equal values in
  index order (-0 and +0 are equal); NaN counts as smaller than every number (TF's CPU
  kernel places NaN inconsistently). ``sorted=False`` gives the same sorted order, which
  TF's "any order" allows.
* ``Where``: an int64 ``[count, rank]`` matrix of the coordinates whose value is true or
  nonzero (NaN is nonzero, -0 is zero), in row-major order.
* ``Bucketize``: for each value the number of boundaries <= it (``upper_bound``): NaN lands
  past the last boundary; boundaries must be sorted and not NaN.
* ``Unique`` / ``UniqueWithCounts``: a vector's distinct values in order of first
  appearance, each element's index into them (and how often each occurs); -0 and +0 are one
  value (the first seen kept), every NaN a value of its own (TF's hash map).
* ``InTopKV2``: whether each row's target class is among its k largest predictions, ties
  at the boundary all counting as in; False for a target out of range or a row holding any
  non-finite prediction (TF's CPU kernel).
"""

from __future__ import annotations

import math

import numpy as np

from minigraph.framework import dtypes
from minigraph.framework.dtypes import INTEGERS, NUMBERS
from minigraph.framework.gradient_registry import NotDifferentiable, RegisterGradient
from minigraph.framework.op_def import (
    ArgDef,
    AttrDef,
    InferenceContext,
    OpDef,
    make_wrapper,
    register_op,
    required,
)
from minigraph.framework.tensor_shape import TensorShape, dims_text
from minigraph.ops.array_ops import Const
from minigraph.ops.index_ops import OneHot
from minigraph.ops.layout_ops import ExpandDims, StridedSlice
from minigraph.ops.math_ops import Cast, Mul, Shape, Sum

__all__ = ["Bucketize", "InTopKV2", "TopKV2", "Unique", "UniqueWithCounts", "Where"]


# ----------------------------------------------------------------------------- TopKV2


def _top_k_shape(ctx: InferenceContext) -> list[TensorShape]:
    x, k_shape = ctx.input_shapes
    if k_shape.rank not in (None, 0):
        raise ctx.error(f"input 'k' must be a scalar, got shape {dims_text(k_shape)}")
    if x.rank == 0:
        raise ctx.error("input must be >= 1-D, got shape [] (input 'input')")
    k = ctx.constant_value("k")
    if k is not None:
        k = int(k)
        if k < 0:
            raise ctx.error(f"Need k >= 0, got {k} (input 'k')")
        if x.rank is not None and x[-1] is not None and x[-1] < k:
            raise ctx.error(f"input must have at least k columns. Had {x[-1]}, needed {k} "
                            f"(inputs 'input' and 'k')")
    if x.rank is None:
        return [TensorShape(None)] * 2
    out = TensorShape([*x.dims[:-1], k])
    return [out, out]


TopKV2 = make_wrapper(register_op(OpDef(
    name="TopKV2",
    inputs=[ArgDef("input", type_attr="T", doc="At least a vector: rows along the last axis."),
            ArgDef("k", type_attr="Tk", doc="A scalar: how many entries each row keeps.")],
    outputs=[ArgDef("values", type_attr="T"), ArgDef("indices", type_attr="index_type")],
    attrs=[AttrDef("sorted", "bool", default=True,
                   doc="TF's 'largest first' flag; minigraph always sorts."),
           required("T", "type", allowed=NUMBERS),
           AttrDef("Tk", "type", default=dtypes.int32, allowed=INTEGERS),
           AttrDef("index_type", "type", default=dtypes.int32, allowed=INTEGERS)],
    shape_fn=_top_k_shape,
)))


# ----------------------------------------------------------------------------- Where


def _where_shape(ctx: InferenceContext) -> list[TensorShape]:
    x = ctx.input_shapes[0]
    return [TensorShape([None, x.rank])]


Where = make_wrapper(register_op(OpDef(
    name="Where",
    inputs=[ArgDef("input", type_attr="T", doc="Any shape: true or nonzero entries count.")],
    outputs=[ArgDef("index", dtype=dtypes.int64)],
    attrs=[AttrDef("T", "type", default=dtypes.bool_, allowed=NUMBERS + (dtypes.bool_,))],
    shape_fn=_where_shape,
)))


# ----------------------------------------------------------------------------- Bucketize


def _sorted_boundaries(boundaries: list[float]) -> str | None:
    """Attr check: TF's "Expected sorted boundaries" (NaN refused too: it sorts nowhere)."""
    if any(math.isnan(b) for b in boundaries):
        return f"Expected sorted boundaries, got a NaN in {boundaries}"
    if any(a > b for a, b in zip(boundaries, boundaries[1:])):
        return f"Expected sorted boundaries, got {boundaries}"
    return None


Bucketize = make_wrapper(register_op(OpDef(
    name="Bucketize",
    inputs=[ArgDef("input", type_attr="T")],
    outputs=[ArgDef("output", dtype=dtypes.int32)],
    attrs=[required("T", "type", allowed=(dtypes.int32, dtypes.int64, dtypes.float32,
                                          dtypes.float64)),
           required("boundaries", "list(float)", check=_sorted_boundaries,
                    doc="Sorted bucket edges; bucket i holds boundaries[i-1] <= x < "
                        "boundaries[i].")],
    shape_fn=lambda ctx: [ctx.input_shapes[0]],
)))


# ----------------------------------------------------------------------------- Unique


def _unique_shape(ctx: InferenceContext) -> list[TensorShape]:
    x = ctx.input_shapes[0]
    if x.rank not in (None, 1):
        raise ctx.error(f"unique expects a 1D vector, got shape {dims_text(x)} (input 'x')")
    n = [None] if x.rank is None else [x[0]]
    return [TensorShape([None]), TensorShape(n)] + \
        ([TensorShape([None])] if len(ctx.op_def.outputs) == 3 else [])


def _unique(name: str, counts: bool) -> type:
    outputs = [ArgDef("y", type_attr="T"), ArgDef("idx", type_attr="out_idx")]
    if counts:
        outputs.append(ArgDef("count", type_attr="out_idx"))
    return make_wrapper(register_op(OpDef(
        name=name,
        inputs=[ArgDef("x", type_attr="T", doc="A vector.")],
        outputs=outputs,
        attrs=[required("T", "type"),
               AttrDef("out_idx", "type", default=dtypes.int32, allowed=INTEGERS)],
        shape_fn=_unique_shape,
    )))


Unique = _unique("Unique", counts=False)
UniqueWithCounts = _unique("UniqueWithCounts", counts=True)


# ----------------------------------------------------------------------------- InTopKV2


def _in_top_k_shape(ctx: InferenceContext) -> list[TensorShape]:
    predictions, targets, k = ctx.input_shapes
    if predictions.rank not in (None, 2):
        raise ctx.error(f"predictions must be 2-dimensional, got shape "
                        f"{dims_text(predictions)} (input 'predictions')")
    if targets.rank not in (None, 1):
        raise ctx.error(f"targets must be 1-dimensional, got shape {dims_text(targets)} "
                        f"(input 'targets')")
    if k.rank not in (None, 0):
        raise ctx.error(f"k must be a scalar, got shape {dims_text(k)} (input 'k')")
    rows = predictions[0] if predictions.rank == 2 else None
    if rows is not None and targets.rank == 1 and targets[0] not in (None, rows):
        raise ctx.error(f"First dimension of predictions {rows} must match length of targets "
                        f"{targets[0]} (inputs 'predictions' and 'targets')")
    return [TensorShape([rows if rows is not None else
                         (targets[0] if targets.rank == 1 else None)])]


InTopKV2 = make_wrapper(register_op(OpDef(
    name="InTopKV2",
    inputs=[ArgDef("predictions", dtype=dtypes.float32, doc="[batch, classes] scores."),
            ArgDef("targets", type_attr="T", doc="[batch] class indices."),
            ArgDef("k", type_attr="T", doc="A scalar: how many top classes count.")],
    outputs=[ArgDef("precision", dtype=dtypes.bool_)],
    attrs=[AttrDef("T", "type", default=dtypes.int32, allowed=INTEGERS)],
    shape_fn=_in_top_k_shape,
)))


# ----------------------------------------------------------------------------- gradients

NotDifferentiable("Where", "Bucketize", "InTopKV2", "Unique", "UniqueWithCounts")


@RegisterGradient("TopKV2")
def _top_k_grad(scope, op, grads):
    """The values' cotangent goes back to the entries they were taken from, zero elsewhere
    (TF scatters it by the indices): dx[..., j] = sum over i of g[..., i] * (indices[..., i]
    == j), a one-hot of the indices over the row's n entries."""
    x, indices, g = op.inputs[0], op.outputs[1], grads[0]
    if g is None:
        return [None, None]
    last = x.shape[-1] if x.shape.rank is not None else None
    if last is not None:
        depth = Const(scope, np.int32(last))
    else:
        depth = StridedSlice(scope, Shape(scope, x), np.array([-1], np.int32),
                             np.array([0], np.int32), np.array([1], np.int32), end_mask=1,
                             shrink_axis_mask=1)
    one, zero = Const(scope, np.array(1, x.dtype.np_dtype)), \
        Const(scope, np.array(0, x.dtype.np_dtype))
    hot = OneHot(scope, Cast(scope, indices, dtypes.int64), depth, one, zero)  # [..., k, n]
    picked = Mul(scope, hot, ExpandDims(scope, g, np.int32(-1)))
    return [Sum(scope, picked, np.int32(-2)), None]
