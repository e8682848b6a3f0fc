"""Kernels of the concat family (ConcatV2, Concat, ConcatOffset, Split, SplitV): numpy
copies, the same on every backend, and ConcatV2/Concat in C for float32 (``mg_concat`` in
kernels_c/layout.c: each output row's spans copied from the inputs, rows shared between the
worker pool's threads), bit for bit ``np.concatenate``. The shape functions checked the
axis and every shape before these run."""

from __future__ import annotations

import math

import numpy as np

from minigraph.backends.native import (
    as_f32,
    c_call,
    check_code,
    fbuf,
    ffi,
    lib,
    num_threads,
    plain_f32,
)
from minigraph.backends.registry import register_kernel, set_replay, while_unchanged
from minigraph.framework import dtypes


def _joined(op, inputs) -> tuple[list[np.ndarray], int]:
    """(the tensors to join, the axis in [0, rank)) of a ConcatV2 (values, axis) or a Concat
    (concat_dim, values)."""
    count = op.attrs["N"]
    if op.type == "Concat":
        values, axis = inputs[1:], inputs[0]
    else:
        values, axis = inputs[:count], inputs[count]
    return list(values), int(axis) % values[0].ndim


@register_kernel("ConcatV2", "Concat")
def concat(op, inputs, ctx):
    values, axis = _joined(op, inputs)
    return [np.concatenate(values, axis=axis)]


@register_kernel("ConcatV2", "Concat", backend="native", dtypes=(dtypes.float32,))
def concat_native(op, inputs, ctx):
    """The concatenation in C: bit for bit the numpy kernel's copy."""
    values, axis = _joined(op, inputs)
    return [c_concat(values, axis)]


def c_concat(values: list[np.ndarray], axis: int) -> np.ndarray:
    """``mg_concat`` of float32 tensors along ``axis``; C reads each input's elements and
    writes the returned array's, whose sizes are checked here first."""
    values = [as_f32(v) for v in values]
    first = values[0].shape
    for v in values:
        if v.ndim != len(first) or v.shape[:axis] != first[:axis] or \
                v.shape[axis + 1:] != first[axis + 1:]:
            raise ValueError(f"c_concat: shapes {[v.shape for v in values]} do not join along "
                             f"axis {axis}")
    y = np.empty(first[:axis] + (sum(v.shape[axis] for v in values),) + first[axis + 1:],
                 np.float32)
    args, buffers = _concat_args(values, axis, y)  # the buffers kept alive through the call
    check_code(lib.mg_concat(*args), "Concat")
    return y


def _concat_args(values: list[np.ndarray], axis: int, y: np.ndarray) -> tuple[tuple, list]:
    """``mg_concat``'s arguments joining ``values`` along ``axis`` into ``y``, and the
    buffers its pointers point into."""
    first = values[0].shape
    outer, inner = math.prod(first[:axis]), math.prod(first[axis + 1:])
    buffers = [fbuf(v) for v in values]
    pointers = ffi.new("const float *[]", buffers)
    widths = ffi.new("int64_t[]", [v.shape[axis] * inner for v in values])
    return (outer, len(values), widths, pointers, fbuf(y), num_threads()), buffers


def _concat_replay(op, values: list, outputs: list, ctx):
    """``concat_native`` on fixed arrays (``registry.ReplayMaker``): ``mg_concat`` with its
    arguments made once; a call whose axis holds another value than when made runs the
    kernel."""
    tensors, axis = _joined(op, values)
    y = outputs[0]
    if (not all(plain_f32(v) for v in tensors) or not plain_f32(y) or not y.flags.writeable
            or y.shape != np.broadcast_shapes(y.shape) or tensors[0].ndim != y.ndim
            or y.shape[axis] != sum(v.shape[axis] for v in tensors)):
        return None
    where = values[0] if op.type == "Concat" else values[-1]
    args, buffers = _concat_args(tensors, axis, y)
    join = c_call(lib.mg_concat, args, "Concat", (values, outputs, buffers))
    return while_unchanged([where], join, op, outputs, concat_native, values, ctx)


set_replay(concat_native, _concat_replay)


@register_kernel("ConcatOffset")
def concat_offset(op, inputs, ctx):
    """Zeros but for the axis: the running sum of the sizes before each input."""
    shapes = inputs[1:]
    axis = int(inputs[0]) % max(shapes[0].size, 1)
    offsets, start = [], 0
    for shape in shapes:
        offset = np.zeros_like(shape)
        offset[axis] = start
        start += int(shape[axis])
        offsets.append(offset)
    return offsets


def _pieces(x: np.ndarray, sizes: list[int], axis: int) -> list[np.ndarray]:
    """x cut along ``axis`` into consecutive pieces of ``sizes``, each a C-ordered copy
    (slices taken directly: ``np.split``'s Python layer costs more than copying a
    recurrent cell's gates)."""
    index: list[slice] = [slice(None)] * x.ndim
    pieces, start = [], 0
    for size in sizes:
        index[axis] = slice(start, start + size)
        pieces.append(np.array(x[tuple(index)], order="C"))
        start += size
    return pieces


def _views(x: np.ndarray, sizes: list[int], axis: int) -> list[np.ndarray]:
    """x cut along ``axis`` into consecutive views of ``sizes``."""
    index: list[slice] = [slice(None)] * x.ndim
    views, start = [], 0
    for size in sizes:
        index[axis] = slice(start, start + size)
        views.append(x[tuple(index)])
        start += size
    return views


def _pieces(x: np.ndarray, sizes: list[int], axis: int) -> list[np.ndarray]:
    """x cut along ``axis`` into consecutive pieces of ``sizes``, each a C-ordered copy
    (slices taken directly: ``np.split``'s Python layer costs more than copying a
    recurrent cell's gates)."""
    return [np.array(view, order="C") for view in _views(x, sizes, axis)]


def _split_sizes(op, inputs: list) -> tuple[np.ndarray, list[int], int]:
    """Split's and SplitV's input, piece sizes and axis."""
    if op.type == "Split":
        axis, x = int(inputs[0]) % inputs[1].ndim, inputs[1]
        count = op.attrs["num_split"]
        return x, [x.shape[axis] // count] * count, axis
    x, sizes, axis = inputs
    axis = int(axis) % x.ndim
    sizes = sizes.tolist()
    if -1 in sizes:
        sizes[sizes.index(-1)] = x.shape[axis] - (sum(sizes) + 1)
    return x, sizes, axis


@register_kernel("Split", "SplitV")
def split(op, inputs, ctx):
    return _pieces(*_split_sizes(op, inputs))


def _split_replay(op, values: list, outputs: list, ctx):
    """Split or SplitV on fixed arrays (``registry.ReplayMaker``): each output a copy of its
    view of the input, the views made once; a call whose axis or sizes (inputs, usually
    constants) hold other values than when made runs the kernel."""
    if values[1 if op.type == "Split" else 0].ndim == 0:
        return None
    x, sizes, axis = _split_sizes(op, values)
    pairs = list(zip(outputs, _views(x, sizes, axis)))
    if any(out.shape != view.shape or out.dtype != view.dtype for out, view in pairs):
        return None
    def copied() -> None:
        for out, view in pairs:
            np.copyto(out, view)

    return while_unchanged([v for v in values if v is not x], copied, op, outputs, split,
                           values, ctx)


set_replay(split, _split_replay)
