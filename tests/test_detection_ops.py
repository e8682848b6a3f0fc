"""NonMaxSuppressionV3/V4 and CombinedNonMaxSuppression (ops/detection_ops.py): greedy
suppression against a reference written here from the definition, TF's errors, and
``tf.raw_ops`` on random boxes."""

from __future__ import annotations

import os

import numpy as np
import pytest
from conftest import BACKENDS

import minigraph as mg
from minigraph import ops

F32 = np.float32


def run(root, fetches, backend="reference"):
    return mg.ClientSession(root, backend=backend).Run({}, fetches)


def _random_boxes(rng, n):
    """Clustered boxes (so that many overlap), some with swapped corners, some of no area."""
    centres = rng.uniform(0, 4, (n, 2)).round(1)
    sizes = rng.uniform(0.2, 2.0, (n, 2))
    boxes = np.concatenate([centres - sizes / 2, centres + sizes / 2], 1).astype(F32)
    swap = rng.random(n) < 0.2
    boxes[swap] = boxes[swap][:, [2, 3, 0, 1]]
    flat = rng.random(n) < 0.05
    boxes[flat, 2] = boxes[flat, 0]  # no height: overlaps nothing
    return boxes


def _reference(boxes, scores, size, iou_threshold, score_threshold):
    """Visit by score (ties: lower index), keep unless overlapping a kept box by more than
    the threshold."""
    def iou(a, b):
        ya0, ya1 = sorted(a[::2]); xa0, xa1 = sorted(a[1::2])  # noqa: E702
        yb0, yb1 = sorted(b[::2]); xb0, xb1 = sorted(b[1::2])  # noqa: E702
        area_a, area_b = (ya1 - ya0) * (xa1 - xa0), (yb1 - yb0) * (xb1 - xb0)
        if area_a <= 0 or area_b <= 0:
            return 0.0
        inter = max(min(ya1, yb1) - max(ya0, yb0), 0) * max(min(xa1, xb1) - max(xa0, xb0), 0)
        return inter / (area_a + area_b - inter)

    order = sorted((i for i in range(len(scores)) if scores[i] > score_threshold),
                   key=lambda i: (-scores[i], i))
    kept = []
    for i in order:
        if len(kept) == size:
            break
        if all(iou(boxes[i].astype(float), boxes[k].astype(float)) <= iou_threshold
               for k in kept):
            kept.append(i)
    return kept


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(4))
def test_greedy_suppression_matches_the_definition(backend, seed):
    rng = np.random.default_rng(seed)
    boxes = _random_boxes(rng, 40)
    scores = rng.integers(0, 20, 40).astype(F32) / 20  # ties
    scores[rng.integers(0, 40, 2)] = np.nan
    settings = [(10, 0.5, 0.2), (40, 0.3, -np.inf), (3, 0.0, 0.5), (0, 0.5, 0.0)]
    root = mg.Scope.NewRootScope()
    fetches = []
    for size, iou, score in settings:
        fetches.append(ops.NonMaxSuppressionV3(root, boxes, scores, np.int32(size), F32(iou),
                                               F32(score)))
        padded = ops.NonMaxSuppressionV4(root, boxes, scores, np.int32(size), F32(iou),
                                         F32(score), pad_to_max_output_size=True)
        fetches += [padded.selected_indices, padded.valid_outputs]
    values = run(root, fetches, backend)
    for k, (size, iou, score) in enumerate(settings):
        expected = _reference(boxes, scores, size, iou, score)
        v3, v4, valid = values[3 * k:3 * k + 3]
        np.testing.assert_array_equal(v3, expected)
        assert v3.dtype == np.int32 and valid == len(expected)
        np.testing.assert_array_equal(v4, expected + [0] * (size - len(expected)))


def test_tensorflows_errors():
    root = mg.Scope.NewRootScope()
    boxes, scores = np.zeros((3, 4), F32), np.zeros(3, F32)
    cases = [
        (lambda: ops.NonMaxSuppressionV3(root, boxes, scores, np.int32(2), F32(1.5), F32(0)),
         r"iou_threshold must be in \[0, 1\]"),
        (lambda: ops.NonMaxSuppressionV3(root, boxes, scores, np.int32(-1), F32(0.5), F32(0)),
         "output size must be non-negative"),
        (lambda: ops.NonMaxSuppressionV3(root, np.zeros((3, 3), F32), scores, np.int32(2),
                                         F32(0.5), F32(0)), "boxes must have 4 columns"),
        (lambda: ops.NonMaxSuppressionV3(root, boxes, np.zeros(4, F32), np.int32(2),
                                         F32(0.5), F32(0)), "scores has incompatible shape"),
    ]
    for build, message in cases:
        with pytest.raises(mg.errors.InvalidArgumentError, match=message):
            build()


@pytest.mark.oracle
@pytest.mark.parametrize("seed", range(3))
def test_against_tensorflow(seed):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    tf = pytest.importorskip("tensorflow")
    rng = np.random.default_rng(10 + seed)
    boxes = _random_boxes(rng, 60)
    scores = rng.random(60).astype(F32)
    root = mg.Scope.NewRootScope()
    ours = run(root, [ops.NonMaxSuppressionV3(root, boxes, scores, np.int32(15), F32(0.4),
                                              F32(0.1))])[0]
    theirs = tf.raw_ops.NonMaxSuppressionV3(boxes=boxes, scores=scores, max_output_size=15,
                                            iou_threshold=0.4, score_threshold=0.1)
    np.testing.assert_array_equal(ours, theirs.numpy())


def _combined_reference(boxes, scores, per_class, total, iou, threshold, pad_per_class,
                        clip):
    """Per image: the definition's selection per class (``_reference``), then all classes'
    picks by score (ties: class, then pick order), the best ``size`` of them, zero-padded."""
    batch, _, q, _ = boxes.shape
    classes = scores.shape[2]
    size = min(total, per_class * classes) if pad_per_class else total
    outputs = [np.zeros((batch, size, 4), F32), np.zeros((batch, size), F32),
               np.zeros((batch, size), F32), np.zeros(batch, np.int32)]
    for b in range(batch):
        picks = [(c, i) for c in range(classes)
                 for i in _reference(boxes[b, :, c if q > 1 else 0], scores[b, :, c],
                                     min(per_class, boxes.shape[1]), iou, threshold)]
        picks = sorted(picks, key=lambda ci: -scores[b, ci[1], ci[0]])[:size]
        outputs[3][b] = len(picks)
        for j, (c, i) in enumerate(picks):
            box = boxes[b, i, c if q > 1 else 0]
            outputs[0][b, j] = np.clip(box, 0, 1) if clip else box
            outputs[1][b, j], outputs[2][b, j] = scores[b, i, c], c
    return outputs


COMBINED_SETTINGS = [  # q, per_class, total, iou, score threshold, pad_per_class, clip
    (1, 5, 12, 0.5, 0.1, False, True), (3, 4, 30, 0.3, 0.0, True, False),
    (3, 20, 6, 0.6, 0.5, False, False), (1, 2, 100, 0.5, -np.inf, True, True)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("setting", COMBINED_SETTINGS, ids=str)
def test_combined_suppression_matches_the_definition(backend, setting):
    q, per_class, total, iou, threshold, pad_per_class, clip = setting
    rng = np.random.default_rng(q + per_class)
    boxes = np.stack([np.stack([_random_boxes(rng, 25) / 4 for _ in range(q)], 1)
                      for _ in range(2)])
    scores = rng.random((2, 25, 3)).astype(F32)
    root = mg.Scope.NewRootScope()
    result = ops.CombinedNonMaxSuppression(root, boxes, scores, np.int32(per_class),
                                           np.int32(total), F32(iou), F32(threshold),
                                           pad_per_class=pad_per_class, clip_boxes=clip)
    values = run(root, list(result.operation.outputs), backend)
    expected = _combined_reference(boxes, scores, per_class, total, iou, threshold,
                                   pad_per_class, clip)
    for got, want in zip(values, expected):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    assert result.nmsed_boxes.shape == mg.TensorShape(list(expected[0].shape))


def test_combined_suppression_errors():
    root = mg.Scope.NewRootScope()
    boxes, scores = np.zeros((2, 5, 1, 4), F32), np.zeros((2, 5, 3), F32)
    sizes = (np.int32(2), np.int32(4), F32(0.5), F32(0))
    cases = [
        ((boxes, scores, np.int32(0), *sizes[1:]), "max_output_size_per_class must be > 0"),
        ((boxes, scores, sizes[0], np.int32(-1), *sizes[2:]), "max_total_size must be > 0"),
        ((boxes, scores, *sizes[:2], F32(2), sizes[3]), r"iou_threshold must be in \[0, 1\]"),
        ((np.zeros((2, 5, 2, 4), F32), scores, *sizes),
         "third dimension of boxes must be either 1 or num classes"),
        ((np.zeros((2, 5, 4), F32), scores, *sizes), "boxes must be 4-D"),
        ((boxes, np.zeros((3, 5, 3), F32), *sizes), "the same batch size"),
    ]
    for inputs, message in cases:
        with pytest.raises(mg.errors.InvalidArgumentError, match=message):
            ops.CombinedNonMaxSuppression(root, *inputs)


@pytest.mark.oracle
@pytest.mark.parametrize("setting", COMBINED_SETTINGS, ids=str)
def test_combined_suppression_against_tensorflow(setting):
    """Distinct scores (TF's order among equal scores is its sort's)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    tf = pytest.importorskip("tensorflow")
    q, per_class, total, iou, threshold, pad_per_class, clip = setting
    rng = np.random.default_rng(20 + q)
    boxes = np.stack([np.stack([_random_boxes(rng, 40) / 4 for _ in range(q)], 1)
                      for _ in range(3)])
    scores = rng.permutation(3 * 40 * 3).reshape(3, 40, 3).astype(F32) / 360
    root = mg.Scope.NewRootScope()
    ours = run(root, list(ops.CombinedNonMaxSuppression(
        root, boxes, scores, np.int32(per_class), np.int32(total), F32(iou), F32(threshold),
        pad_per_class=pad_per_class, clip_boxes=clip).operation.outputs))
    theirs = tf.raw_ops.CombinedNonMaxSuppression(
        boxes=boxes, scores=scores, max_output_size_per_class=per_class,
        max_total_size=total, iou_threshold=iou, score_threshold=threshold,
        pad_per_class=pad_per_class, clip_boxes=clip)
    for got, want in zip(ours, theirs):
        np.testing.assert_array_equal(got, want.numpy())
