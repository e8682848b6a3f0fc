"""Kernels of the spatial family (MirrorPad, MirrorPadGrad, SpaceToBatchND, BatchToSpaceND,
DepthToSpace, SpaceToDepth, ReverseV2): numpy copies (reshapes and transposes, as TF's own
definitions are written), the same on every backend. The shape functions checked every
index before these run."""

from __future__ import annotations

import math

import numpy as np

from minigraph.backends.compute import compute_dtype
from minigraph.backends.registry import register_kernel
from minigraph.ops.spatial_ops import patch_geometry


def _pairs(paddings: np.ndarray) -> list[list[int]]:
    return paddings.reshape(-1, 2).tolist()


@register_kernel("MirrorPad")
def mirror_pad(op, inputs, ctx):
    x, paddings = inputs
    mode = "reflect" if op.attrs["mode"] == "REFLECT" else "symmetric"
    return [np.pad(x, _pairs(paddings), mode=mode) if x.ndim else x.copy()]


@register_kernel("MirrorPadGrad")
def mirror_pad_grad(op, inputs, ctx):
    """Each mirrored element's gradient added onto the element it copied, one dimension at
    a time: REFLECT's before-part lands on [1, before], SYMMETRIC's on [0, before) (and the
    after-part likewise from the end). Half precision sums in float32, rounded once."""
    grad, paddings = inputs
    edge = 1 if op.attrs["mode"] == "REFLECT" else 0
    out = grad.astype(compute_dtype(grad.dtype))
    for axis, (before, after) in enumerate(_pairs(paddings)):
        size = out.shape[axis] - before - after
        moved = np.moveaxis(out, axis, 0)
        center = moved[before:before + size].copy()
        center[edge:edge + before] += moved[:before][::-1]
        center[size - edge - after:size - edge] += moved[before + size:][::-1]
        out = np.moveaxis(center, 0, axis)
    return [np.asarray(out.astype(grad.dtype), order="C")]  # 0-d stays 0-d


@register_kernel("SpaceToBatchND")
def space_to_batch_nd(op, inputs, ctx):
    """Zero-pad the M spatial dimensions, cut each into (d / b, b), move the block offsets
    in front of the batch: [b_1, ..., b_M, batch, d_1 / b_1, ..., rest] flattened."""
    x, block, paddings = inputs
    block, m = block.tolist(), block.size
    rest = x.shape[1 + m:]
    padded = np.pad(x, [[0, 0], *_pairs(paddings)] + [[0, 0]] * len(rest))
    split = [padded.shape[0]]
    for d, b in zip(padded.shape[1:1 + m], block):
        split += [d // b, b]
    blocks = padded.reshape(split + list(rest))
    order = [*range(2, 2 * m + 1, 2), 0, *range(1, 2 * m, 2), *range(2 * m + 1, blocks.ndim)]
    out = blocks.transpose(order)
    return [np.ascontiguousarray(out).reshape(
        [x.shape[0] * math.prod(block), *split[1::2], *rest])]


@register_kernel("BatchToSpaceND")
def batch_to_space_nd(op, inputs, ctx):
    """SpaceToBatchND's inverse: [b_1, ..., b_M, batch', d_1, ..., rest] interleaved into
    [batch', d_1 * b_1, ...], then cropped."""
    x, block, crops = inputs
    block, m = block.tolist(), block.size
    rest = x.shape[1 + m:]
    batch = x.shape[0] // math.prod(block)
    blocks = x.reshape([*block, batch, *x.shape[1:]])
    order = [m, *(i for k in range(m) for i in (m + 1 + k, k)),
             *range(2 * m + 1, blocks.ndim)]
    spatial = [d * b for d, b in zip(x.shape[1:1 + m], block)]
    joined = np.ascontiguousarray(blocks.transpose(order)).reshape([batch, *spatial, *rest])
    window = tuple(slice(before, d - after) for d, (before, after)
                   in zip(spatial, _pairs(crops)))
    return [np.ascontiguousarray(joined[(slice(None), *window)])]


def _nhwc(x: np.ndarray, data_format: str) -> np.ndarray:
    return x if data_format == "NHWC" else x.transpose(0, 2, 3, 1)


def _from_nhwc(y: np.ndarray, data_format: str) -> np.ndarray:
    return np.ascontiguousarray(y if data_format == "NHWC" else y.transpose(0, 3, 1, 2))


@register_kernel("DepthToSpace")
def depth_to_space(op, inputs, ctx):
    """out[n, h * bs + i, w * bs + j, c] = in[n, h, w, (i * bs + j) * C + c]."""
    bs, fmt = op.attrs["block_size"], op.attrs["data_format"]
    x = _nhwc(inputs[0], fmt)
    n, h, w, c = x.shape
    blocks = x.reshape(n, h, w, bs, bs, c // bs // bs).transpose(0, 1, 3, 2, 4, 5)
    return [_from_nhwc(blocks.reshape(n, h * bs, w * bs, c // bs // bs), fmt)]


@register_kernel("SpaceToDepth")
def space_to_depth(op, inputs, ctx):
    """DepthToSpace's inverse: out[n, h, w, (i * bs + j) * C + c] = in[n, h * bs + i,
    w * bs + j, c]."""
    bs, fmt = op.attrs["block_size"], op.attrs["data_format"]
    x = _nhwc(inputs[0], fmt)
    n, h, w, c = x.shape
    blocks = x.reshape(n, h // bs, bs, w // bs, bs, c).transpose(0, 1, 3, 2, 4, 5)
    return [_from_nhwc(blocks.reshape(n, h // bs, w // bs, bs * bs * c), fmt)]


@register_kernel("ReverseV2")
def reverse_v2(op, inputs, ctx):
    x, axis = inputs
    axes = tuple(a % x.ndim for a in axis.tolist()) if x.ndim else ()
    return [np.flip(x, axes).copy() if axes else x.copy()]


@register_kernel("ExtractImagePatches")
def extract_image_patches(op, inputs, ctx):
    """Each output pixel's window, read pixel by pixel (zeros in the SAME padding) and
    flattened as (row, column, depth): a gather, so Inf and NaN pass through unmixed."""
    x = inputs[0]
    (kh, kw), (sh, sw), (rh, rw), ((top, bottom), (left, right)), (oh, ow) = patch_geometry(
        op.attrs, lambda message: ctx.error(op, message), x.shape)
    padded = np.pad(x, [(0, 0), (top, bottom), (left, right), (0, 0)])
    n, depth = x.shape[0], x.shape[3]
    out = np.empty((n, oh, ow, kh, kw, depth), x.dtype)
    for i in range(kh):
        for j in range(kw):
            out[:, :, :, i, j] = padded[:, i * rh:i * rh + (oh - 1) * sh + 1:sh,
                                        j * rw:j * rw + (ow - 1) * sw + 1:sw]
    return [out.reshape(n, oh, ow, kh * kw * depth)]
