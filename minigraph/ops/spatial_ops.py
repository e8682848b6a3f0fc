"""Ops that rearrange or mirror the spatial dimensions: MirrorPad (REFLECT / SYMMETRIC) and
its gradient MirrorPadGrad, SpaceToBatchND and BatchToSpaceND (what a dilated convolution
freezes to: ``atrous`` = SpaceToBatchND, Conv2D, BatchToSpaceND), SpaceToDepth and
DepthToSpace (pixel shuffles), ReverseV2, ExtractImagePatches (``tf.image.extract_patches``,
a ViT's patch embedding: each window of the image flattened into the depth, row by row,
column by column, then the channels; VALID or SAME windows with strides and rates, zeros
in the SAME padding).

Shape functions run TensorFlow 2.21's checks in its kernels' words, on the index inputs'
values whenever they are known (constants at construction, everything at run time), so
every output shape is exact before anything is allocated.
"""

from __future__ import annotations

import math

import numpy as np

from minigraph.framework import dtypes
from minigraph.framework.dtypes import INTEGERS
from minigraph.framework.gradient_registry import RegisterGradient
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
from minigraph.ops.convolution_ops import Conv2DBackpropInput
from minigraph.ops.math_ops import Shape
from minigraph.ops.window import windowed_output_size

__all__ = ["BatchToSpaceND", "DepthToSpace", "ExtractImagePatches", "MirrorPad",
           "MirrorPadGrad", "ReverseV2", "SpaceToBatchND", "SpaceToDepth"]


def _index_attr(name: str) -> AttrDef:
    return AttrDef(name, "type", default=dtypes.int32, allowed=INTEGERS)


# ----------------------------------------------------------------------------- MirrorPad

MODE = required("mode", "string", allowed=("REFLECT", "SYMMETRIC"),
                doc="REFLECT mirrors without the edge (paddings < size), SYMMETRIC with it "
                    "(paddings <= size).")


def _mirror_paddings(ctx: InferenceContext, rank_words: str) -> list | None:
    """paddings, a [rank, 2] matrix (its value when known); ``rank_words`` is TF's message
    for a row count that is not the input's rank, with ``{rows}`` and ``{input}``."""
    x, paddings = ctx.input_shape("input"), ctx.input_shape("paddings")
    if paddings.rank not in (None, 2) or paddings.rank == 2 and paddings[1] not in (None, 2):
        raise ctx.error(f"paddings must be a matrix with 2 columns: {dims_text(paddings)} "
                        f"(input 'paddings')")
    paddings = paddings.with_rank(2)
    if None not in (x.rank, paddings[0]) and paddings[0] != x.rank:
        raise ctx.error(rank_words.format(rows=dims_text(paddings), input=dims_text(x))
                        + " (input 'paddings')")
    return ctx.constant_value("paddings")


def _mirror_pad_geometry(ctx: InferenceContext, rank_message: str
                         ) -> tuple[tuple, list, bool] | TensorShape:
    """(the input's dims, the paddings' (before, after) rows, whether mode is REFLECT), or
    the output's shape (rank only) while the paddings are unknown."""
    x = ctx.input_shape("input")
    value = _mirror_paddings(ctx, rank_message)
    if value is None:
        return TensorShape.unknown(x.rank if x.rank is not None
                                   else ctx.input_shape("paddings")[0])
    dims = x.dims if x.rank is not None else (None,) * len(value)
    return dims, value, ctx.attrs["mode"] == "REFLECT"


def _mirror_pad_shape(ctx: InferenceContext) -> list[TensorShape]:
    """d + before + after per dimension; REFLECT needs before, after < d, SYMMETRIC <= d."""
    geometry = _mirror_pad_geometry(ctx, "The first dimension of paddings must be the rank "
                                         "of inputs{rows}, {input}")
    if isinstance(geometry, TensorShape):
        return [geometry]
    dims, value, reflect = geometry
    for d, (before, after) in zip(dims, value):
        if before < 0 or after < 0:
            raise ctx.error(f"paddings must be non-negative: {before} {after} (input "
                            f"'paddings')")
        if d is None:
            continue
        if reflect and (before >= d or after >= d):
            raise ctx.error(f"paddings must be less than the dimension size: {before}, {after} "
                            f"not less than {d} (input 'paddings', mode REFLECT)")
        if not reflect and (before > d or after > d):
            raise ctx.error(f"paddings must be no greater than the dimension size: {before}, "
                            f"{after} greater than {d} (input 'paddings', mode SYMMETRIC)")
    return [TensorShape(None if d is None else d + b + a for d, (b, a) in zip(dims, value))]


MirrorPad = make_wrapper(register_op(OpDef(
    name="MirrorPad",
    inputs=[ArgDef("input", type_attr="T"),
            ArgDef("paddings", type_attr="Tpaddings",
                   doc="[rank, 2]: how many mirrored elements go before and after each "
                       "dimension.")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=[required("T", "type"), _index_attr("Tpaddings"), MODE],
    shape_fn=_mirror_pad_shape,
)))


def _mirror_pad_grad_shape(ctx: InferenceContext) -> list[TensorShape]:
    """The forward input's shape: d - before - after, checked as MirrorPad checks it."""
    geometry = _mirror_pad_geometry(ctx, "The first dimension of paddings must be the rank "
                                         "of inputs{rows} {input}")
    if isinstance(geometry, TensorShape):
        return [geometry]
    dims, value, reflect = geometry
    out = []
    for d, (before, after) in zip(dims, value):
        if before < 0 or after < 0:
            raise ctx.error(f"Paddings must be non-negative: {before}, {after} (input "
                            f"'paddings')")
        if d is None:
            out.append(None)
            continue
        if before + after >= d:
            raise ctx.error(f"Total paddings must be less than the input dimension size: "
                            f"{before + after} was not less than {d} (input 'paddings')")
        size = d - before - after
        if reflect and (before >= size or after >= size):
            raise ctx.error(f"paddings must be less than the output dimension size: {before}, "
                            f"{after} not less than {size} (input 'paddings', mode REFLECT)")
        if not reflect and (before > size or after > size):
            raise ctx.error(f"paddings must be no greater than the output dimension size: "
                            f"{before}, {after} greater than {size} (input 'paddings', mode "
                            f"SYMMETRIC)")
        out.append(size)
    return [TensorShape(out)]


MirrorPadGrad = make_wrapper(register_op(OpDef(
    name="MirrorPadGrad",
    inputs=[ArgDef("input", type_attr="T", doc="The gradient of MirrorPad's output."),
            ArgDef("paddings", type_attr="Tpaddings", doc="MirrorPad's paddings.")],
    outputs=[ArgDef("output", type_attr="T",
                    doc="The gradient of MirrorPad's input: the mirrored parts added back "
                        "onto the elements they copied.")],
    attrs=[required("T", "type"), _index_attr("Tpaddings"), MODE],
    shape_fn=_mirror_pad_grad_shape,
)))


# ----------------------------------------------------------------------------- SpaceToBatchND


class BlockSpec:
    """The block_shape [M] and paddings/crops [M, 2] of SpaceToBatchND/BatchToSpaceND,
    checked against the input's rank (>= 1 + M); ``block``/``pairs`` hold their values, or
    None while unknown."""

    def __init__(self, ctx: InferenceContext, pairs_name: str) -> None:
        x = ctx.input_shape("input")
        block_shape = ctx.input_shape("block_shape")
        if block_shape.rank not in (None, 1):
            raise ctx.error(f"block_shape rank should be 1 instead of {block_shape.rank} "
                            f"(input 'block_shape')")
        m = block_shape.with_rank(1)[0]
        pairs = ctx.input_shape(pairs_name)
        if pairs.rank not in (None, 2) or pairs.rank == 2 and (
                pairs[1] not in (None, 2) or None not in (m, pairs[0]) and pairs[0] != m):
            raise ctx.error(f"{pairs_name} should have shape [{'?' if m is None else m}, 2] "
                            f"instead of {dims_text(pairs)} (input '{pairs_name}')")
        m = m if m is not None else pairs.with_rank(2)[0]
        if None not in (m, x.rank) and x.rank < 1 + m:
            raise ctx.error(f"input rank should be >= {1 + m} instead of {x.rank} (input "
                            f"'input')")
        self.m, self.x = m, x
        self.block = ctx.constant_value("block_shape")
        self.pairs = ctx.constant_value(pairs_name)
        if self.block is not None:
            product = math.prod(self.block)
            if pairs_name == "crops" and product <= 0:
                raise ctx.error(f"Product of block sizes must be positive, got {product} "
                                f"(input 'block_shape')")
            for i, size in enumerate(self.block):
                if size < 1:
                    raise ctx.error(f"All values in block_shape must be positive, got value, "
                                    f"{size} at index {i}. (input 'block_shape')")
        if self.pairs is not None and any(v < 0 for pair in self.pairs for v in pair):
            word = "Paddings" if pairs_name == "paddings" else "Crops"
            raise ctx.error(f"{word} must be non-negative (input '{pairs_name}')")

    def output(self, batch, spatial) -> TensorShape:
        """[batch] + spatial + the input's remaining dimensions (unknown rank while M or the
        input's rank is)."""
        if self.m is None or self.x.rank is None:
            return TensorShape(None)
        return TensorShape([batch, *spatial, *self.x.dims[1 + self.m:]])


def _space_to_batch_shape(ctx: InferenceContext) -> list[TensorShape]:
    """[batch * prod(block)] + (d_i + pads_i) / block_i + the rest; padded dimensions must
    divide."""
    spec = BlockSpec(ctx, "paddings")
    if spec.m is None or spec.x.rank is None:
        return [TensorShape(None)]
    batch, spatial = None, [None] * spec.m  # both depend on block_shape
    if spec.block is not None:
        batch = None if spec.x[0] is None else spec.x[0] * math.prod(spec.block)
        if spec.pairs is not None:
            for i, (d, b, (before, after)) in enumerate(zip(spec.x.dims[1:], spec.block,
                                                            spec.pairs)):
                if d is None:
                    continue
                padded = d + before + after
                if padded % b:
                    raise ctx.error(f"padded_shape[{i}]={padded} is not divisible by "
                                    f"block_shape[{i}]={b} (inputs 'input', 'paddings', "
                                    f"'block_shape')")
                spatial[i] = padded // b
    return [spec.output(batch, spatial)]


SpaceToBatchND = make_wrapper(register_op(OpDef(
    name="SpaceToBatchND",
    inputs=[ArgDef("input", type_attr="T", doc="[batch] + M spatial dimensions + the rest."),
            ArgDef("block_shape", type_attr="Tblock_shape",
                   doc="[M] block sizes >= 1, one per spatial dimension."),
            ArgDef("paddings", type_attr="Tpaddings",
                   doc="[M, 2] zeros added before and after each spatial dimension.")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=[required("T", "type"), _index_attr("Tblock_shape"), _index_attr("Tpaddings")],
    shape_fn=_space_to_batch_shape,
)))


def _batch_to_space_shape(ctx: InferenceContext) -> list[TensorShape]:
    """[batch / prod(block)] + d_i * block_i - crops_i + the rest."""
    spec = BlockSpec(ctx, "crops")
    if spec.m is None or spec.x.rank is None:
        return [TensorShape(None)]
    batch, spatial = None, [None] * spec.m  # both depend on block_shape
    if spec.block is not None:
        product = math.prod(spec.block)
        if spec.x[0] is not None and spec.x[0] % product:
            raise ctx.error(f"Input batch dimension ({spec.x[0]}) is not divisible by product "
                            f"of block sizes ({product}) (inputs 'input', 'block_shape')")
        batch = None if spec.x[0] is None else spec.x[0] // product
        if spec.pairs is not None:
            for i, (d, b, (before, after)) in enumerate(zip(spec.x.dims[1:], spec.block,
                                                            spec.pairs)):
                if d is None:
                    continue
                size = d * b - before - after
                if size < 0:
                    raise ctx.error(f"cropped_shape[{i}]={size} must be non-negative (inputs "
                                    f"'input', 'crops')")
                spatial[i] = size
    return [spec.output(batch, spatial)]


BatchToSpaceND = make_wrapper(register_op(OpDef(
    name="BatchToSpaceND",
    inputs=[ArgDef("input", type_attr="T",
                   doc="[batch] + M spatial dimensions + the rest; batch a multiple of "
                       "prod(block_shape)."),
            ArgDef("block_shape", type_attr="Tblock_shape",
                   doc="[M] block sizes >= 1, one per spatial dimension."),
            ArgDef("crops", type_attr="Tcrops",
                   doc="[M, 2] elements removed before and after each spatial dimension.")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=[required("T", "type"), _index_attr("Tblock_shape"), _index_attr("Tcrops")],
    shape_fn=_batch_to_space_shape,
)))


# ----------------------------------------------------------------------------- depth <-> space

BLOCK_SIZE = required("block_size", "int",
                      check=lambda n: None if n >= 2 else f"must be at least minimum 2, got {n}",
                      doc="The side of the square block of pixels one depth group holds.")
DEPTH_FORMAT = AttrDef("data_format", "string", default="NHWC",
                       allowed=("NHWC", "NCHW", "NCHW_VECT_C"),
                       doc="NHWC or NCHW (NCHW_VECT_C is TensorFlow's qint8 layout: refused).")


def _image(ctx: InferenceContext) -> tuple[int | None, ...] | None:
    """(batch, height, width, depth) of the 4-D input, in NHWC order; None at unknown rank."""
    if ctx.attrs["data_format"] == "NCHW_VECT_C":
        raise ctx.error("data_format NCHW_VECT_C (int8 vectors) is not supported; use NHWC or "
                        "NCHW (attr 'data_format')")
    x = ctx.input_shape("input")
    if x.rank is None:
        return None
    if x.rank != 4:
        raise ctx.error(f"Input rank should be: 4 instead of: {x.rank} (input 'input')")
    n, a, b, c = x.dims
    return (n, a, b, c) if ctx.attrs["data_format"] == "NHWC" else (n, b, c, a)


def _image_shape(ctx: InferenceContext, n, h, w, c) -> list[TensorShape]:
    dims = (n, h, w, c) if ctx.attrs["data_format"] == "NHWC" else (n, c, h, w)
    return [TensorShape(dims)]


def _times(d: int | None, k: int) -> int | None:
    return None if d is None else d * k


def _depth_to_space_shape(ctx: InferenceContext) -> list[TensorShape]:
    """[n, h * bs, w * bs, c / bs^2]; the depth must divide by bs^2."""
    image, bs = _image(ctx), ctx.attrs["block_size"]
    if image is None:
        return [TensorShape.unknown(4)]
    n, h, w, c = image
    if c is not None and c % (bs * bs):
        raise ctx.error(f"Input depth dimension {c} should be divisible by: {bs * bs} (input "
                        f"'input', attr 'block_size')")
    return _image_shape(ctx, n, _times(h, bs), _times(w, bs), None if c is None else c // bs // bs)


def _space_to_depth_shape(ctx: InferenceContext) -> list[TensorShape]:
    """[n, h / bs, w / bs, c * bs^2]; height and width must divide by bs."""
    image, bs = _image(ctx), ctx.attrs["block_size"]
    if image is None:
        return [TensorShape.unknown(4)]
    n, h, w, c = image
    if any(d is not None and d % bs for d in (h, w)):
        raise ctx.error(f"Image width {'?' if w is None else w} and height "
                        f"{'?' if h is None else h} should be divisible by block_size: {bs} "
                        f"(input 'input')")
    return _image_shape(ctx, n, None if h is None else h // bs, None if w is None else w // bs,
                        _times(c, bs * bs))


DepthToSpace = make_wrapper(register_op(OpDef(
    name="DepthToSpace",
    inputs=[ArgDef("input", type_attr="T")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=[required("T", "type"), BLOCK_SIZE, DEPTH_FORMAT],
    shape_fn=_depth_to_space_shape,
)))

SpaceToDepth = make_wrapper(register_op(OpDef(
    name="SpaceToDepth",
    inputs=[ArgDef("input", type_attr="T")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=[required("T", "type"), BLOCK_SIZE, DEPTH_FORMAT],
    shape_fn=_space_to_depth_shape,
)))


# ----------------------------------------------------------------------------- ReverseV2


def reverse_axes(ctx: InferenceContext) -> list[int] | None:
    """ReverseV2's axes in [0, rank), each once, when the value and the rank are known."""
    shape = ctx.input_shape("axis")
    if shape.rank not in (None, 1):
        raise ctx.error(f"'dims' must be 1-dimension, not {shape.rank} (input 'axis')")
    value, rank = ctx.constant_value("axis"), ctx.input_shape("tensor").rank
    if value is None or rank is None:
        return None
    axes: list[int] = []
    for i, axis in enumerate(value):
        if not -rank <= axis < rank:
            raise ctx.error(f"'axis'[{i}] = {axis} is out of valid range [{-rank}, {rank}) "
                            f"(input 'axis')")
        if axis % rank in axes:
            raise ctx.error(f"axis {axis % rank} specified more than once. (input 'axis')")
        axes.append(axis % rank)
    return axes


def _reverse_shape(ctx: InferenceContext) -> list[TensorShape]:
    reverse_axes(ctx)
    return [ctx.input_shape("tensor")]


ReverseV2 = make_wrapper(register_op(OpDef(
    name="ReverseV2",
    inputs=[ArgDef("tensor", type_attr="T"),
            ArgDef("axis", type_attr="Tidx",
                   doc="The dimensions to reverse, each in [-rank, rank), none twice.")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=[_index_attr("Tidx"), required("T", "type")],
    shape_fn=_reverse_shape,
)))


def patch_geometry(attrs: dict, fail, shape) -> tuple:
    """(ksize, strides, rates, pads, out) over the rows and columns of an NHWC ``shape`` for
    ExtractImagePatches' attrs (TF's checks: 4 entries each, 1 in the batch and depth
    entries, every entry >= 1); ``fail(message)`` makes the error."""
    lists = {}
    for name in ("ksizes", "strides", "rates"):
        value = list(attrs[name])
        if len(value) != 4:
            raise fail(f"{name} must be a list of 4 ints, got {value}")
        if value[0] != 1 or value[3] != 1:
            raise fail(f"Only support {name} across space: {name} is {value}")
        if min(value) < 1:
            raise fail(f"{name} is out of range: {value}")
        lists[name] = value[1:3]
    sizes = [windowed_output_size(shape[1 + i], lists["ksizes"][i], lists["strides"][i],
                                  lists["rates"][i], attrs["padding"], (0, 0), fail,
                                  ("rows", "columns")[i] + " of input 'images'")
             for i in range(2)]
    return (lists["ksizes"], lists["strides"], lists["rates"],
            [(s[1], s[2]) for s in sizes], [s[0] for s in sizes])


def _extract_patches_shape(ctx: InferenceContext) -> list[TensorShape]:
    x = ctx.input_shape("images")
    if x.rank not in (None, 4):
        raise ctx.error(f"input must be 4-dimensional, got shape {dims_text(x)} (input "
                        f"'images')")
    dims = [None] * 4 if x.rank is None else list(x.dims)
    ksize, _, _, _, out = patch_geometry(ctx.attrs, ctx.error, dims)
    depth = None if dims[3] is None else ksize[0] * ksize[1] * dims[3]
    return [TensorShape([dims[0], out[0], out[1], depth])]


ExtractImagePatches = make_wrapper(register_op(OpDef(
    name="ExtractImagePatches",
    inputs=[ArgDef("images", type_attr="T", doc="[batch, rows, cols, depth].")],
    outputs=[ArgDef("patches", type_attr="T")],
    attrs=[required("ksizes", "list(int)", doc="[1, rows, cols, 1] of a patch."),
           required("strides", "list(int)", doc="[1, rows, cols, 1] between patches."),
           required("rates", "list(int)", doc="[1, rows, cols, 1] between a patch's pixels."),
           required("T", "type", allowed=dtypes.NUMBERS),
           required("padding", "string", allowed=("SAME", "VALID"))],
    shape_fn=_extract_patches_shape,
)))


# ----------------------------------------------------------------------------- gradients
# As TF's array_grad.py: each op's gradient is its inverse (or, for MirrorPad, the folding).


def _attrs_of(op, *names: str) -> dict:
    return {name: op.attrs[name] for name in names}


@RegisterGradient("MirrorPad")
def _mirror_pad_grad(scope, op, grads):
    return [MirrorPadGrad(scope, grads[0], op.inputs[1], **_attrs_of(op, "mode")), None]


@RegisterGradient("MirrorPadGrad")
def _mirror_pad_grad_grad(scope, op, grads):
    return [MirrorPad(scope, grads[0], op.inputs[1], **_attrs_of(op, "mode")), None]


@RegisterGradient("SpaceToBatchND")
def _space_to_batch_grad(scope, op, grads):
    return [BatchToSpaceND(scope, grads[0], op.inputs[1], op.inputs[2]), None, None]


@RegisterGradient("BatchToSpaceND")
def _batch_to_space_grad(scope, op, grads):
    return [SpaceToBatchND(scope, grads[0], op.inputs[1], op.inputs[2]), None, None]


@RegisterGradient("DepthToSpace")
def _depth_to_space_grad(scope, op, grads):
    return [SpaceToDepth(scope, grads[0], **_attrs_of(op, "block_size", "data_format"))]


@RegisterGradient("SpaceToDepth")
def _space_to_depth_grad(scope, op, grads):
    return [DepthToSpace(scope, grads[0], **_attrs_of(op, "block_size", "data_format"))]


@RegisterGradient("ReverseV2")
def _reverse_grad(scope, op, grads):
    return [ReverseV2(scope, grads[0], op.inputs[1]), None]


@RegisterGradient("ExtractImagePatches")
def _extract_image_patches_grad(scope, op, grads):
    """Every patch entry's cotangent summed back onto the pixel it was read from: the
    transposed convolution of the cotangent with the one-hot filter that extracts the
    patches (filter[i, j, c, (i * kw + j) * depth + c] = 1; the rates as dilations)."""
    x = op.inputs[0]
    depth = x.shape[3] if x.shape.rank == 4 else None
    if depth is None:
        raise NotImplementedError(f"ExtractImagePatches '{op.name}': its gradient needs the "
                                  f"input's depth")
    attrs = op.attrs
    kh, kw = attrs["ksizes"][1:3]
    eye = np.eye(kh * kw * depth, dtype=x.dtype.np_dtype).reshape(kh, kw, depth,
                                                                   kh * kw * depth)
    return [Conv2DBackpropInput(scope, Shape(scope, x), Const(scope, eye), grads[0],
                                strides=attrs["strides"], padding=attrs["padding"],
                                dilations=attrs["rates"])]
