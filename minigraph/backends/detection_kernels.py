"""numpy kernels of the detection ops (``ops.detection_ops``); every backend runs them."""

from __future__ import annotations

import numpy as np

from minigraph.backends.registry import register_kernel


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
