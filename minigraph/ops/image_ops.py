"""Image resize ops: ``ResizeNearestNeighbor``, ``ResizeBilinear``, ``ResizeBicubic``,
``ResizeArea`` and the
gradients ``ResizeNearestNeighborGrad``, ``ResizeBilinearGrad`` (none for bicubic yet), with
TF's names, inputs, outputs and attrs (``core/ops/image_ops.cc``). What Keras'
``UpSampling2D``, ``Resizing`` and ``tf.image.resize`` freeze to.

Images are NHWC; ``size`` is an int32 vector ``[new_height, new_width]``. Two attrs pick
how an output pixel maps to the input (docs/ops/image.md, TF 2.21's ``image_resizer_state.h``):
``align_corners`` (the corner pixels of input and output coincide) and
``half_pixel_centers`` (pixel centres at ``i + 0.5``; what Keras and ``tf.image.resize``
use); neither gives the legacy asymmetric mapping ``in = out * scale``. ResizeBilinear's
output is float32 whatever ``T`` is, as in TF. The gradients are at the bottom.

``RGBToHSV`` / ``HSVToRGB`` (the last axis: 3 channels) and ``AdjustContrastv2`` (each
channel of each image moved away from its mean: ``(x - mean) * factor + mean``) are TF's
colour ops, computed in its expression order (``colorspace_op.h``); none has a gradient yet.

``CropAndResize`` (``tf.image.crop_and_resize``, two-stage detectors' ROI crops) samples a
``crop_size`` grid inside each normalized box ``[y1, x1, y2, x2]`` of image ``box_ind[i]``,
bilinearly or at the nearest pixel, in float32 step by step as TF's kernel does; samples
outside the image take ``extrapolation_value``. It has no gradient yet.
"""

from __future__ import annotations

import numpy as np

from minigraph.framework import dtypes
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
from minigraph.framework.tensor_shape import TensorShape
from minigraph.ops import math_ops as m
from minigraph.ops.layout_ops import StridedSlice

# The wrappers minigraph.ops exports.
__all__ = ["AdjustContrastv2", "CropAndResize", "HSVToRGB", "RGBToHSV", "ResizeArea",
           "ResizeBicubic", "ResizeBilinear", "ResizeBilinearGrad", "ResizeNearestNeighbor",
           "ResizeNearestNeighborGrad"]

# TF's allowed T restricted to minigraph's dtypes
RESIZE_TYPES = (dtypes.int32, dtypes.int64, dtypes.float16, dtypes.float32, dtypes.float64,
                dtypes.bfloat16)
NEAREST_GRAD_TYPES = (dtypes.int32, dtypes.float16, dtypes.float32, dtypes.float64,
                      dtypes.bfloat16)
INT32_MAX = 2 ** 31 - 1


def _mode_attrs() -> list[AttrDef]:
    return [AttrDef("align_corners", "bool", default=False,
                    doc="Map the corner pixels' centres of input and output onto each other."),
            AttrDef("half_pixel_centers", "bool", default=False,
                    doc="Pixel centres at i + 0.5 (Keras, tf.image.resize); both False: the "
                        "legacy asymmetric mapping.")]


def _check_mode(ctx: InferenceContext) -> None:
    if ctx.attrs["half_pixel_centers"] and ctx.attrs["align_corners"]:
        raise ctx.error("If half_pixel_centers is True, align_corners must be False. "
                        "(attrs 'half_pixel_centers' and 'align_corners')")


def _size_input(ctx: InferenceContext, positive: str, name: str = "size"
                ) -> tuple[int | None, int | None]:
    """The (height, width) of input ``name`` (None while unknown), checked as TF does: a
    vector of two elements, each > 0 (``positive`` is TF's message for that)."""
    size = ctx.input_shape(name)
    if size.rank is not None and size.rank != 1:
        raise ctx.error(f"shape_t must be 1-dimensional{size} (input '{name}')")
    if size.rank == 1 and size[0] is not None and size[0] != 2:
        raise ctx.error(f"shape_t must have two elements{size} (input '{name}')")
    value = ctx.constant_value(name)
    if value is None:
        return None, None
    if any(v <= 0 for v in value):
        raise ctx.error(f"{positive}: input '{name}' is {value}")
    return value[0], value[1]


def _image_rank4(ctx: InferenceContext, name: str, what: str) -> TensorShape:
    shape = ctx.input_shape(name)
    if shape.rank is not None and shape.rank != 4:
        raise ctx.error(f"{what} must be 4-dimensional{shape} (input '{name}': NHWC)")
    return shape.with_rank(4)


def _check_extent(ctx: InferenceContext, name: str, height, width, message: str) -> None:
    if height == 0 or width == 0:
        raise ctx.error(f"{message}: input '{name}' has height {height} and width {width}")
    if (height or 0) > INT32_MAX or (width or 0) > INT32_MAX:
        raise ctx.error(f"input sizes must be between 0 and max int32 (input '{name}')")


def resize_shape(ctx: InferenceContext) -> list[TensorShape]:
    """[batch, size[0], size[1], channels]; TF's checks of ``ImageResizerState``."""
    _check_mode(ctx)
    return area_shape(ctx)


def area_shape(ctx: InferenceContext) -> list[TensorShape]:
    """``resize_shape`` without the pixel-centre attrs (``ResizeArea`` has only
    ``align_corners``)."""
    images = _image_rank4(ctx, "images", "input")
    height, width = _size_input(ctx, "output dimensions must be positive")
    if images[3] == 0:
        raise ctx.error(f"image must have at least one channel: input 'images' has shape "
                        f"{images}")
    _check_extent(ctx, "images", images[1], images[2], "input image must be of non-zero size")
    return [TensorShape([images[0], height, width, images[3]])]


def resize_nearest_grad_shape(ctx: InferenceContext) -> list[TensorShape]:
    """[batch, size[0], size[1], channels] of 'grads' (the forward input's shape)."""
    _check_mode(ctx)
    grads = _image_rank4(ctx, "grads", "input")
    height, width = _size_input(ctx, "shape_t's elements must be positive")
    return [TensorShape([grads[0], height, width, grads[3]])]


def resize_bilinear_grad_shape(ctx: InferenceContext) -> list[TensorShape]:
    """The shape of 'original_image', whose batch and channels must be the grads' (TF sizes
    its result from 'grads' and does not check; minigraph refuses a mismatch)."""
    _check_mode(ctx)
    grads = _image_rank4(ctx, "grads", "input_grad")
    original = _image_rank4(ctx, "original_image", "original_image")
    if grads[1] == 0 or grads[2] == 0:
        raise ctx.error(f"resized dimensions must be positive: input 'grads' has shape {grads}")
    _check_extent(ctx, "original_image", original[1], original[2],
                  "original dimensions must be positive")
    batch, channels = (ctx.merge_dim(grads[axis], original[axis],
                                     f"inputs 'grads' {grads} and 'original_image' {original} "
                                     f"must have the same {what} (dimension {axis})")
                       for axis, what in ((0, "batch"), (3, "channels")))
    return [TensorShape([batch, original[1], original[2], channels])]


ResizeNearestNeighbor = make_wrapper(register_op(OpDef(
    name="ResizeNearestNeighbor",
    inputs=[ArgDef("images", type_attr="T", doc="NHWC images."),
            ArgDef("size", dtype=dtypes.int32, doc="[new_height, new_width], each > 0.")],
    outputs=[ArgDef("resized_images", type_attr="T")],
    attrs=[required("T", "type", allowed=RESIZE_TYPES), *_mode_attrs()],
    shape_fn=resize_shape,
)))
def _float_resize(name: str) -> type:
    """A resize whose output is float32 whatever T is (TF's bilinear and bicubic)."""
    return make_wrapper(register_op(OpDef(
        name=name,
        inputs=[ArgDef("images", type_attr="T", doc="NHWC images."),
                ArgDef("size", dtype=dtypes.int32, doc="[new_height, new_width], each > 0.")],
        outputs=[ArgDef("resized_images", dtype=dtypes.float32)],
        attrs=[required("T", "type", allowed=RESIZE_TYPES), *_mode_attrs()],
        shape_fn=resize_shape,
    )))


ResizeBilinear = _float_resize("ResizeBilinear")
# Each output pixel: the average of the input area it covers, partly covered pixels weighed
# by the part (Keras' Resizing(interpolation="area"), tf.image.resize(method="area")).
ResizeArea = make_wrapper(register_op(OpDef(
    name="ResizeArea",
    inputs=[ArgDef("images", type_attr="T", doc="NHWC images."),
            ArgDef("size", dtype=dtypes.int32, doc="[new_height, new_width], each > 0.")],
    outputs=[ArgDef("resized_images", dtype=dtypes.float32)],
    attrs=[required("T", "type", allowed=RESIZE_TYPES),
           AttrDef("align_corners", "bool", default=False,
                   doc="Scale by (in - 1) / (out - 1) instead of in / out.")],
    shape_fn=area_shape,
)))
# Cubic convolution over 4 x 4 input pixels, weights from TF's table of 1025 positions per
# unit (Keys' a = -0.5 with half_pixel_centers, where taps off the image weigh 0 and the rest
# are renormalized; a = -0.75 otherwise, the edge pixels repeated); no gradient yet.
ResizeBicubic = _float_resize("ResizeBicubic")
ResizeNearestNeighborGrad = make_wrapper(register_op(OpDef(
    name="ResizeNearestNeighborGrad",
    inputs=[ArgDef("grads", type_attr="T", doc="The gradient of the resized images."),
            ArgDef("size", dtype=dtypes.int32,
                   doc="[height, width] of the original images, each > 0.")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=[required("T", "type", allowed=NEAREST_GRAD_TYPES), *_mode_attrs()],
    shape_fn=resize_nearest_grad_shape,
)))
ResizeBilinearGrad = make_wrapper(register_op(OpDef(
    name="ResizeBilinearGrad",
    inputs=[ArgDef("grads", dtype=dtypes.float32, doc="The gradient of the resized images."),
            ArgDef("original_image", type_attr="T",
                   doc="The images that were resized (only their shape is read).")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=[required("T", "type", allowed=dtypes.FLOATING), *_mode_attrs()],
    shape_fn=resize_bilinear_grad_shape,
)))


def _three_channels(ctx: InferenceContext) -> list[TensorShape]:
    x = ctx.input_shape("images")
    if x.rank == 0:
        raise ctx.error("input must be at least 1D (input 'images')")
    if x.rank is not None and x[-1] not in (None, 3):
        raise ctx.error(f"input must have 3 channels but input only has {x[-1]} channels "
                        f"(input 'images')")
    return [x]


def _colour(name: str) -> type:
    return make_wrapper(register_op(OpDef(
        name=name,
        inputs=[ArgDef("images", type_attr="T", doc="[..., 3] colours in [0, 1].")],
        outputs=[ArgDef("output", type_attr="T")],
        attrs=[AttrDef("T", "type", default=dtypes.float32, allowed=dtypes.FLOATING)],
        shape_fn=_three_channels,
    )))


RGBToHSV = _colour("RGBToHSV")
HSVToRGB = _colour("HSVToRGB")


def _adjust_contrast_shape(ctx: InferenceContext) -> list[TensorShape]:
    x, factor = ctx.input_shape("images"), ctx.input_shape("contrast_factor")
    if x.rank is not None and x.rank < 3:
        raise ctx.error(f"input must be at least 3-D, got shape{x} (input 'images')")
    if factor.rank not in (None, 0):
        raise ctx.error(f"contrast_factor must be scalar: {factor} (input 'contrast_factor')")
    return [x]


AdjustContrastv2 = make_wrapper(register_op(OpDef(
    name="AdjustContrastv2",
    inputs=[ArgDef("images", type_attr="T", doc="[..., height, width, channels]."),
            ArgDef("contrast_factor", dtype=dtypes.float32, doc="A scalar.")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=[AttrDef("T", "type", default=dtypes.float32,
                   allowed=(dtypes.float16, dtypes.float32))],
    shape_fn=_adjust_contrast_shape,
)))


def _crop_and_resize_shape(ctx: InferenceContext) -> list[TensorShape]:
    image, boxes, box_ind = (ctx.input_shape(n) for n in ("image", "boxes", "box_ind"))
    if image.rank not in (None, 4):
        raise ctx.error(f"input image must be 4-D, got shape {image} (input 'image')")
    if boxes.rank not in (None, 2) or (boxes.rank == 2 and boxes[1] not in (None, 4)):
        raise ctx.error(f"boxes must be 2-D [num_boxes, 4], got shape {boxes} (input 'boxes')")
    if box_ind.rank not in (None, 1):
        raise ctx.error(f"box_index must be 1-D, got shape {box_ind} (input 'box_ind')")
    if boxes.rank == 2 and box_ind.rank == 1 and None not in (boxes[0], box_ind[0]) and \
            boxes[0] != box_ind[0]:
        raise ctx.error(f"box_index has incompatible shape: {box_ind[0]} indices for "
                        f"{boxes[0]} boxes (inputs 'box_ind' and 'boxes')")
    height, width = _size_input(ctx, "crop dimensions must be positive", "crop_size")
    index = ctx.constant_value("box_ind")
    batch = image[0] if image.rank == 4 else None
    if index is not None and batch is not None and np.size(index) and \
            ((np.asarray(index) < 0) | (np.asarray(index) >= batch)).any():
        raise ctx.error(f"box_index has values outside [0, batch_size) = [0, {batch}) (input "
                        f"'box_ind')")
    return [TensorShape([boxes[0] if boxes.rank == 2 else None, height, width,
                         image[3] if image.rank == 4 else None])]


CropAndResize = make_wrapper(register_op(OpDef(
    name="CropAndResize",
    inputs=[ArgDef("image", type_attr="T", doc="[batch, height, width, depth]."),
            ArgDef("boxes", dtype=dtypes.float32,
                   doc="[num_boxes, 4]: y1, x1, y2, x2 normalized to [0, 1] (y2 < y1 flips)."),
            ArgDef("box_ind", dtype=dtypes.int32, doc="[num_boxes]: each box's image."),
            ArgDef("crop_size", dtype=dtypes.int32, doc="[crop_height, crop_width], both > 0.")],
    outputs=[ArgDef("crops", dtype=dtypes.float32)],
    attrs=[required("T", "type", allowed=RESIZE_TYPES),
           AttrDef("method", "string", default="bilinear", allowed=("bilinear", "nearest")),
           AttrDef("extrapolation_value", "float", default=0.0,
                   doc="The value of samples outside the image.")],
    shape_fn=_crop_and_resize_shape,
)))


# ----------------------------------------------------------------------------- gradients
# Every op here is linear in its image input: each gradient is the adjoint resize.


def _mode(op) -> dict:
    return {"align_corners": op.attrs["align_corners"],
            "half_pixel_centers": op.attrs["half_pixel_centers"]}


def _height_width(scope, image):
    """[height, width] of an NHWC tensor as an int32 vector (a Const when static)."""
    if image.shape.rank == 4 and image.shape[1] is not None and image.shape[2] is not None:
        return [image.shape[1], image.shape[2]]
    return StridedSlice(scope, m.Shape(scope, image), [1], [3], [1])


@RegisterGradient("ResizeNearestNeighbor")
def _resize_nearest_grad(scope, op, grads):
    return [ResizeNearestNeighborGrad(scope, grads[0], _height_width(scope, op.inputs[0]),
                                      **_mode(op)), None]


@RegisterGradient("ResizeBilinear")
def _resize_bilinear_grad(scope, op, grads):
    return [ResizeBilinearGrad(scope, grads[0], op.inputs[0], **_mode(op)), None]


@RegisterGradient("ResizeNearestNeighborGrad")
def _resize_nearest_grad_grad(scope, op, grads):
    """The adjoint of the scatter-add is the gather: the forward resize to grads' size."""
    return [ResizeNearestNeighbor(scope, grads[0], _height_width(scope, op.inputs[0]),
                                  **_mode(op)), None]


@RegisterGradient("ResizeBilinearGrad")
def _resize_bilinear_grad_grad(scope, op, grads):
    """The forward resize of the cotangent (any float T; float32 out, as 'grads') to grads'
    size; 'original_image' only gives a shape: no gradient."""
    return [ResizeBilinear(scope, grads[0], _height_width(scope, op.inputs[0]), **_mode(op)), None]
