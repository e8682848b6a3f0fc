"""Detection post-processing: ``NonMaxSuppressionV3`` (``tf.image.non_max_suppression``),
``NonMaxSuppressionV4`` (``tf.image.non_max_suppression_padded``) and
``CombinedNonMaxSuppression`` (``tf.image.combined_non_max_suppression``: per class, then
across classes, batched), TF's names, inputs, outputs and attrs (``core/ops/image_ops.cc``).

Greedy hard suppression as TF's CPU kernel does it: the boxes scoring strictly above
``score_threshold`` are visited by score, highest first (equal scores by index; NaN scores
never qualify); a box is kept unless its intersection over union with a kept box is
strictly above ``iou_threshold`` (in float32, each box's corners in either order; a box of
no area overlaps nothing); at most ``max_output_size`` are kept. V4 can pad the indices
with zeros to ``max_output_size`` and also returns how many are valid.

``CombinedNonMaxSuppression`` runs that selection for each image and class (each class's
boxes, or the shared ones when ``q`` is 1), at most ``min(max_output_size_per_class,
num_boxes)`` a class, then keeps the best ``max_total_size`` of all classes by score (equal
scores: by class, then by selection order; TF leaves their order to its sort), the boxes
clipped to [0, 1] with ``clip_boxes``, zeros after the valid ones. ``pad_per_class`` pads
to ``min(max_total_size, max_output_size_per_class * num_classes)`` instead of
``max_total_size``.
"""

from __future__ import annotations

from minigraph.framework import dtypes
from minigraph.framework.gradient_registry import NotDifferentiable
from minigraph.framework.op_def import (
    ArgDef,
    AttrDef,
    InferenceContext,
    OpDef,
    make_wrapper,
    register_op,
)
from minigraph.framework.tensor_shape import TensorShape, dims_text

__all__ = ["CombinedNonMaxSuppression", "NonMaxSuppressionV3", "NonMaxSuppressionV4"]

BOX_TYPES = (dtypes.float16, dtypes.float32)


def _nms_checks(ctx: InferenceContext) -> int | None:
    """TF's checks of the inputs; the known max_output_size, else None."""
    boxes, scores = ctx.input_shape("boxes"), ctx.input_shape("scores")
    if boxes.rank not in (None, 2):
        raise ctx.error(f"boxes must be 2-D, got shape {dims_text(boxes)} (input 'boxes')")
    if boxes.rank == 2 and boxes[1] not in (None, 4):
        raise ctx.error(f"boxes must have 4 columns, got shape {dims_text(boxes)} (input "
                        f"'boxes')")
    if scores.rank not in (None, 1):
        raise ctx.error(f"scores must be 1-D, got shape {dims_text(scores)} (input 'scores')")
    if boxes.rank == 2 and scores.rank == 1 and None not in (boxes[0], scores[0]) and \
            boxes[0] != scores[0]:
        raise ctx.error(f"scores has incompatible shape: {boxes[0]} boxes, {scores[0]} "
                        f"scores (inputs 'boxes' and 'scores')")
    for name in ("max_output_size", "iou_threshold", "score_threshold"):
        shape = ctx.input_shape(name)
        if shape.rank not in (None, 0):
            raise ctx.error(f"{name} must be 0-D, got shape {dims_text(shape)} (input "
                            f"'{name}')")
    iou = ctx.constant_value("iou_threshold")
    if iou is not None and not 0 <= float(iou) <= 1:
        raise ctx.error(f"iou_threshold must be in [0, 1], got {float(iou)} (input "
                        f"'iou_threshold')")
    size = ctx.constant_value("max_output_size")
    if size is not None and int(size) < 0:
        raise ctx.error(f"output size must be non-negative, got {int(size)} (input "
                        f"'max_output_size')")
    return None if size is None else int(size)


def _nms_v3_shape(ctx: InferenceContext) -> list[TensorShape]:
    _nms_checks(ctx)
    return [TensorShape([None])]


def _nms_v4_shape(ctx: InferenceContext) -> list[TensorShape]:
    size = _nms_checks(ctx)
    padded = ctx.attrs["pad_to_max_output_size"] and size is not None
    return [TensorShape([size if padded else None]), TensorShape([])]


def _inputs() -> list[ArgDef]:
    return [ArgDef("boxes", type_attr="T", doc="[num_boxes, 4]: y1, x1, y2, x2 (corners in "
                                               "either order)."),
            ArgDef("scores", type_attr="T", doc="[num_boxes]."),
            ArgDef("max_output_size", dtype=dtypes.int32, doc="A scalar >= 0."),
            ArgDef("iou_threshold", type_attr="T_threshold", doc="A scalar in [0, 1]."),
            ArgDef("score_threshold", type_attr="T_threshold",
                   doc="A scalar: only boxes scoring above it are considered.")]


def _attrs() -> list[AttrDef]:
    return [AttrDef("T", "type", default=dtypes.float32, allowed=BOX_TYPES),
            AttrDef("T_threshold", "type", default=dtypes.float32, allowed=BOX_TYPES)]


NonMaxSuppressionV3 = make_wrapper(register_op(OpDef(
    name="NonMaxSuppressionV3",
    inputs=_inputs(),
    outputs=[ArgDef("selected_indices", dtype=dtypes.int32)],
    attrs=_attrs(),
    shape_fn=_nms_v3_shape,
)))
NonMaxSuppressionV4 = make_wrapper(register_op(OpDef(
    name="NonMaxSuppressionV4",
    inputs=_inputs(),
    outputs=[ArgDef("selected_indices", dtype=dtypes.int32),
             ArgDef("valid_outputs", dtype=dtypes.int32)],
    attrs=[*_attrs(), AttrDef("pad_to_max_output_size", "bool", default=False,
                              doc="Pad the indices with zeros to max_output_size.")],
    shape_fn=_nms_v4_shape,
)))

INT32_MAX = 2**31 - 1


def combined_output_size(per_class: int, total: int, classes: int, pad_per_class: bool
                         ) -> int:
    """How many detections an image's outputs hold (TF's ``per_batch_size``)."""
    if not pad_per_class:
        return total
    return min(total, min(INT32_MAX, per_class * classes))


def _combined_shape(ctx: InferenceContext) -> list[TensorShape]:
    """TF's checks: boxes [batch, num_boxes, q, 4] with q 1 or num_classes, scores [batch,
    num_boxes, num_classes], scalar sizes > 0 and thresholds, iou_threshold in [0, 1]."""
    boxes, scores = ctx.input_shape("boxes"), ctx.input_shape("scores")
    if boxes.rank not in (None, 4):
        raise ctx.error(f"boxes must be 4-D [batch, num_boxes, q, 4], got shape "
                        f"{dims_text(boxes)} (input 'boxes')")
    if scores.rank not in (None, 3):
        raise ctx.error(f"scores must be 3-D [batch, num_boxes, num_classes], got shape "
                        f"{dims_text(scores)} (input 'scores')")
    boxes, scores = boxes.with_rank(4), scores.with_rank(3)
    if boxes[3] not in (None, 4):
        raise ctx.error(f"boxes must have 4 columns, got shape {dims_text(boxes)} (input "
                        f"'boxes')")
    if None not in (boxes[2], scores[2]) and boxes[2] not in (1, scores[2]):
        raise ctx.error(f"third dimension of boxes must be either 1 or num classes: boxes "
                        f"{dims_text(boxes)}, scores {dims_text(scores)}")
    for axis, what in ((0, "batch size"), (1, "number of boxes")):
        if None not in (boxes[axis], scores[axis]) and boxes[axis] != scores[axis]:
            raise ctx.error(f"boxes and scores must have the same {what}: boxes "
                            f"{dims_text(boxes)}, scores {dims_text(scores)}")
    sizes = {}
    for name in ("max_output_size_per_class", "max_total_size", "iou_threshold",
                 "score_threshold"):
        shape = ctx.input_shape(name)
        if shape.rank not in (None, 0):
            raise ctx.error(f"{name} must be 0-D, got shape {dims_text(shape)} (input "
                            f"'{name}')")
        sizes[name] = ctx.constant_value(name)
    for name in ("max_output_size_per_class", "max_total_size"):
        if sizes[name] is not None and int(sizes[name]) <= 0:
            raise ctx.error(f"{name} must be > 0, got {int(sizes[name])} (input '{name}')")
    iou = sizes["iou_threshold"]
    if iou is not None and not 0 <= float(iou) <= 1:
        raise ctx.error(f"iou_threshold must be in [0, 1], got {float(iou)} (input "
                        f"'iou_threshold')")
    per_class, total = sizes["max_output_size_per_class"], sizes["max_total_size"]
    size = None
    if total is not None and not ctx.attrs["pad_per_class"]:
        size = int(total)
    elif None not in (total, per_class, scores[2]):
        size = combined_output_size(int(per_class), int(total), scores[2], True)
    batch = boxes[0] if boxes[0] is not None else scores[0]
    return [TensorShape([batch, size, 4]), TensorShape([batch, size]),
            TensorShape([batch, size]), TensorShape([batch])]


CombinedNonMaxSuppression = make_wrapper(register_op(OpDef(
    name="CombinedNonMaxSuppression",
    inputs=[ArgDef("boxes", dtype=dtypes.float32,
                   doc="[batch, num_boxes, q, 4]: q is 1 (boxes shared by the classes) or "
                       "num_classes."),
            ArgDef("scores", dtype=dtypes.float32, doc="[batch, num_boxes, num_classes]."),
            ArgDef("max_output_size_per_class", dtype=dtypes.int32, doc="A scalar > 0."),
            ArgDef("max_total_size", dtype=dtypes.int32, doc="A scalar > 0."),
            ArgDef("iou_threshold", dtype=dtypes.float32, doc="A scalar in [0, 1]."),
            ArgDef("score_threshold", dtype=dtypes.float32,
                   doc="A scalar: only boxes scoring above it are considered.")],
    outputs=[ArgDef("nmsed_boxes", dtype=dtypes.float32),
             ArgDef("nmsed_scores", dtype=dtypes.float32),
             ArgDef("nmsed_classes", dtype=dtypes.float32),
             ArgDef("valid_detections", dtype=dtypes.int32)],
    attrs=[AttrDef("pad_per_class", "bool", default=False,
                   doc="Pad to max_output_size_per_class * num_classes when that is below "
                       "max_total_size."),
           AttrDef("clip_boxes", "bool", default=True,
                   doc="Clip the boxes' coordinates to [0, 1].")],
    shape_fn=_combined_shape,
)))

NotDifferentiable("NonMaxSuppressionV3", "NonMaxSuppressionV4", "CombinedNonMaxSuppression")
