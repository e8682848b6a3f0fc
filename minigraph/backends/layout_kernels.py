"""Kernels of the layout ops (Pad, Slice, StridedSlice, Pack, Unpack, ExpandDims, Squeeze,
Tile, ShapeN): numpy copies, the same on every backend, and Pad in C for float32 (MobileNet
pads its activations four times). The shape functions checked every index before these run."""

from __future__ import annotations

import functools

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
from minigraph.ops.layout_ops import MASKS, SliceSpec

PAD_MAX_RANK = 8  # kernels_c/layout.c


def _windows(begin, size) -> tuple[slice, ...]:
    return tuple(slice(b, b + s) for b, s in zip(begin, size))


@register_kernel("Pad")
def pad(op, inputs, ctx):
    """Zeros around x: out[before_i : before_i + d_i] = x along every dimension i."""
    x, paddings = inputs
    pairs = paddings.reshape(-1, 2).tolist()
    out = np.zeros([d + a + b for d, (a, b) in zip(x.shape, pairs)], x.dtype)
    out[_windows([a for a, _ in pairs], x.shape)] = x
    return [out]


@register_kernel("Pad", backend="native", dtypes=(dtypes.float32,))
def pad_native(op, inputs, ctx):
    """Pad in C (row-wise memcpy and memset), bit for bit the numpy kernel's copy."""
    x, paddings = inputs
    if x.ndim > PAD_MAX_RANK:
        return pad(op, inputs, ctx)
    return [c_pad(x, paddings.reshape(-1, 2).tolist())]


def _pad_replay(op, values: list, outputs: list, ctx):
    """Pad on fixed arrays (``registry.ReplayMaker``): float32 as ``pad_native`` (``mg_pad``
    with its arguments made once), other dtypes as ``pad`` (zeros, then x copied into the
    interior). A call whose paddings hold other values than when made runs the kernel."""
    x, paddings = values
    out = outputs[0]
    pairs = paddings.reshape(-1, 2).tolist()
    if (len(pairs) != x.ndim or x.dtype != out.dtype or not out.flags.writeable
            or not out.flags.c_contiguous or any(a < 0 or b < 0 for a, b in pairs)
            or out.shape != tuple(d + a + b for d, (a, b) in zip(x.shape, pairs))):
        return None
    if plain_f32(x) and plain_f32(out) and x.ndim <= PAD_MAX_RANK:
        padded = c_call(lib.mg_pad, (*_pad_args(x, pairs), fbuf(x), fbuf(out), num_threads()),
                        "Pad", (values, outputs))
    else:
        interior = out[_windows([a for a, _ in pairs], x.shape)]

        def padded() -> None:
            out[...] = 0
            np.copyto(interior, x)

    return while_unchanged([paddings], padded, op, outputs, pad, values, ctx)


def c_pad(x: np.ndarray, pairs: list[list[int]]) -> np.ndarray:
    """``mg_pad`` of float32 x with (before, after) per dimension; C reads x.size floats and
    writes the returned array's."""
    x = as_f32(x)
    if len(pairs) != x.ndim or any(a < 0 or b < 0 for a, b in pairs):
        raise ValueError(f"c_pad: paddings {pairs} do not fit an input of rank {x.ndim}")
    y = np.empty([d + a + b for d, (a, b) in zip(x.shape, pairs)], np.float32)
    check_code(lib.mg_pad(*_pad_args(x, pairs), fbuf(x), fbuf(y), num_threads()), "Pad")
    return y


def _pad_args(x: np.ndarray, pairs: list[list[int]]) -> tuple:
    """``mg_pad``'s rank, dims, before and after of x padded by ``pairs``."""
    dims = ffi.new("int64_t[]", list(x.shape) or [0])
    before = ffi.new("int64_t[]", [a for a, _ in pairs] or [0])
    after = ffi.new("int64_t[]", [b for _, b in pairs] or [0])
    return x.ndim, dims, before, after


set_replay(pad, _pad_replay)
set_replay(pad_native, _pad_replay)


@register_kernel("Slice")
def slice_(op, inputs, ctx):
    x, begin, size = inputs
    begin = begin.tolist()
    size = [d - b if s == -1 else s for d, b, s in zip(x.shape, begin, size.tolist())]
    return [np.array(x[_windows(begin, size)], order="C")]


@register_kernel("Pack")
def pack(op, inputs, ctx):
    return [np.stack(inputs, axis=op.attrs["axis"])]


@register_kernel("Unpack")
def unpack(op, inputs, ctx):
    x, axis = inputs[0], op.attrs["axis"]
    return [np.array(part, order="C") for part in np.moveaxis(x, axis, 0)]


@register_kernel("ShapeN")
def shape_n(op, inputs, ctx):
    return [np.array(x.shape, op.attrs["out_type"].np_dtype) for x in inputs]


@register_kernel("ExpandDims")
def expand_dims(op, inputs, ctx):
    x, dim = inputs
    return [np.expand_dims(x, int(dim.reshape(-1)[0]))]


@register_kernel("Squeeze")
def squeeze(op, inputs, ctx):
    """The dims of ``squeeze_dims`` (a set, as TF's kernel reads it: one may repeat) or
    every dim of size 1."""
    x = inputs[0]
    axes = op.attrs["squeeze_dims"]
    return [np.squeeze(x, axis=tuple(sorted({a % x.ndim for a in axes})) if axes else None)]


@register_kernel("Tile")
def tile(op, inputs, ctx):
    x, multiples = inputs
    return [np.tile(x, multiples.tolist()) if x.ndim else x.copy()]


def _tile_replay(op, values: list, outputs: list, ctx):
    """Tile on fixed arrays (``registry.ReplayMaker``): x broadcast into the output seen as
    [m0, d0, m1, d1, ...] (``np.tile``'s copies); a call whose multiples hold other values
    than when made runs the kernel."""
    x, multiples = values
    out = outputs[0]
    reps = [int(m) for m in multiples.tolist()] if x.ndim else []
    if (not x.ndim or len(reps) != x.ndim or x.dtype != out.dtype or not x.flags.c_contiguous
            or not out.flags.c_contiguous
            or out.shape != tuple(m * d for m, d in zip(reps, x.shape))):
        return None
    target = out.reshape([n for m, d in zip(reps, x.shape) for n in (m, d)])
    source = x.reshape([n for d in x.shape for n in (1, d)])
    return while_unchanged([multiples], lambda: np.copyto(target, source), op, outputs, tile,
                           values, ctx)


set_replay(tile, _tile_replay)


class _SliceError(Exception):
    """A bad slice spec's message, before the kernel names the op in it."""


@functools.lru_cache(maxsize=1024)
def _cached_spec(shape: tuple, begin: tuple, end: tuple, strides: tuple, masks: tuple
                 ) -> tuple[SliceSpec, tuple[slice, ...]]:
    """The dense spec and its numpy index, which follow from the shape, the spec's values
    and the masks alone (cached: a model's Shape -> StridedSlice chains slice the same
    shapes at every step); a bad spec raises :class:`_SliceError` (not cached)."""
    spec = SliceSpec(shape, list(begin), list(end), list(strides), dict(zip(MASKS, masks)),
                     _SliceError)
    return spec, spec.index()


def _spec(op, x_shape, begin, end, strides, ctx) -> tuple[SliceSpec, tuple[slice, ...]]:
    try:
        return _cached_spec(tuple(x_shape), tuple(begin.tolist()), tuple(end.tolist()),
                            tuple(strides.tolist()), tuple(op.attrs[m] for m in MASKS))
    except _SliceError as error:
        raise ctx.error(op, str(error)) from None


@register_kernel("StridedSlice")
def strided_slice(op, inputs, ctx):
    x, begin, end, strides = inputs
    spec, index = _spec(op, x.shape, begin, end, strides, ctx)
    return [np.array(x[index], order="C").reshape(spec.final)]


@register_kernel("StridedSliceGrad")
def strided_slice_grad(op, inputs, ctx):
    """Zeros of the forward input's shape with dy where the slice took its elements."""
    shape, begin, end, strides, dy = inputs
    spec, index = _spec(op, shape.tolist(), begin, end, strides, ctx)
    out = np.zeros(shape.tolist(), dy.dtype)
    out[index] = dy.reshape(spec.sizes)
    return [out]


@register_kernel("Roll")
def roll(op, inputs, ctx):
    """np.roll with the shifts of each axis added up (a repeated axis rolls by the sum)."""
    x, shift, axis = inputs
    total: dict[int, int] = {}
    for s, a in zip(np.ravel(shift).tolist(), np.ravel(axis).tolist()):
        a %= x.ndim
        total[a] = total.get(a, 0) + s
    axes = list(total)
    return [np.roll(x, [total[a] for a in axes], axis=axes) if axes else x.copy()]


@register_kernel("ReverseSequence")
def reverse_sequence(op, inputs, ctx):
    """Each batch entry's first seq_lengths[b] steps reversed, the rest copied."""
    x, lengths = inputs
    seq, batch = op.attrs["seq_dim"], op.attrs["batch_dim"]
    out = x.copy()
    moved_in, moved_out = np.moveaxis(x, (batch, seq), (0, 1)), np.moveaxis(out, (batch, seq),
                                                                            (0, 1))
    for b, n in enumerate(np.ravel(lengths).tolist()):
        moved_out[b, :n] = moved_in[b, :n][::-1]
    return [out]
