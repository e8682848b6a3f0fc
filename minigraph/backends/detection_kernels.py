"""numpy kernels of the detection ops (``ops.detection_ops``); every backend runs them."""

from __future__ import annotations

import numpy as np

from minigraph.backends.registry import register_kernel
from minigraph.ops.detection_ops import combined_output_size


def _iou_with(boxes: np.ndarray, areas: np.ndarray, i: int, others: np.ndarray) -> np.ndarray:
    """Intersection over union of box i with the boxes ``others``, in float32 as TF's kernel
    computes it (0 where either box has no area)."""
    lo, hi = np.minimum(boxes[:, :2], boxes[:, 2:]), np.maximum(boxes[:, :2], boxes[:, 2:])
    top = np.maximum(lo[others], lo[i])
    bottom = np.minimum(hi[others], hi[i])
    sides = np.maximum(bottom - top, np.float32(0))
    inter = sides[:, 0] * sides[:, 1]
    with np.errstate(all="ignore"):
        iou = inter / (areas[i] + areas[others] - inter)
    return np.where((areas[i] <= 0) | (areas[others] <= 0), np.float32(0), iou)


def select_boxes(boxes, scores, max_output_size, iou_threshold, score_threshold) -> list[int]:
    """Greedy hard non-maximum suppression (``ops.detection_ops``'s rules)."""
    boxes = boxes.astype(np.float32)
    scores = scores.astype(np.float32)
    lo, hi = np.minimum(boxes[:, :2], boxes[:, 2:]), np.maximum(boxes[:, :2], boxes[:, 2:])
    areas = (hi[:, 0] - lo[:, 0]) * (hi[:, 1] - lo[:, 1])
    candidates = np.flatnonzero(scores > np.float32(score_threshold))
    order = candidates[np.argsort(-scores[candidates], kind="stable")]
    selected: list[int] = []
    for i in order:
        if len(selected) >= max_output_size:
            break
        if not selected or not (_iou_with(boxes, areas, i, np.array(selected))
                                > np.float32(iou_threshold)).any():
            selected.append(int(i))
    return selected


@register_kernel("NonMaxSuppressionV3")
def non_max_suppression_v3(op, inputs, ctx):
    boxes, scores, size, iou, score = inputs
    return [np.array(select_boxes(boxes, scores, int(size), iou, score), np.int32)]


@register_kernel("NonMaxSuppressionV4")
def non_max_suppression_v4(op, inputs, ctx):
    boxes, scores, size, iou, score = inputs
    selected = select_boxes(boxes, scores, int(size), iou, score)
    valid = len(selected)
    if op.attrs["pad_to_max_output_size"]:
        selected += [0] * (int(size) - valid)
    return [np.array(selected, np.int32), np.array(valid, np.int32)]


@register_kernel("CombinedNonMaxSuppression")
def combined_non_max_suppression(op, inputs, ctx):
    """Each image: :func:`select_boxes` per class, then the best of all classes by score
    (a stable sort of the classes' selections in class order), clipped and zero-padded."""
    boxes, scores, per_class, total, iou, threshold = inputs
    batch, count, q, _ = boxes.shape
    classes = scores.shape[2]
    per_class, total = int(per_class), int(total)
    size = combined_output_size(per_class, total, classes, op.attrs["pad_per_class"])
    out_boxes = np.zeros((batch, size, 4), np.float32)
    out_scores = np.zeros((batch, size), np.float32)
    out_classes = np.zeros((batch, size), np.float32)
    valid = np.zeros(batch, np.int32)
    for b in range(batch):
        found = []  # (class, box index) in class order, each class's by selection
        for c in range(classes):
            chosen = select_boxes(boxes[b, :, c if q > 1 else 0], scores[b, :, c],
                                  min(per_class, count), iou, threshold)
            found += [(c, i) for i in chosen]
        ranked = sorted(found, key=lambda ci: -scores[b, ci[1], ci[0]])  # stable
        kept = ranked[:min(len(ranked), size)]
        valid[b] = len(kept)
        for j, (c, i) in enumerate(kept):
            box = boxes[b, i, c if q > 1 else 0]
            out_boxes[b, j] = np.clip(box, 0, 1) if op.attrs["clip_boxes"] else box
            out_scores[b, j] = scores[b, i, c]
            out_classes[b, j] = c
    return [out_boxes, out_scores, out_classes, valid]
