"""First- and second-order gradients of FusedBatchNormV3 against TensorFlow 2.21 autodiff.

TensorFlow side: nested ``tf.GradientTape`` around ``tf.raw_ops.FusedBatchNormV3``;
minigraph side: ``AddSymbolicGradients`` applied twice. With random x, scale, offset, w, v:

* first order: ``g = d loss/d(x, scale, offset)`` with ``loss = sum(float32(y) * w)``;
* second order: ``h = d<float32(g_x), v>/d(x, scale)``, which goes through TF's registered
  gradient of FusedBatchNormGradV3 (statistics recomputed from x in training,
  docs/tf-semantics.md#autodiff-second-order) and through minigraph's fused
  FusedBatchNormGradGrad.

All four data formats, training and inference, float32/float16/bfloat16 x. The losses are
summed in float32 on both sides, so the cotangents reaching the batch-norm ops are the same
half-rounded tensors on both sides.

Tolerances (``conftest.assert_close``, norm-wise: relative to the largest |TF value|):

* float32 outputs (every float32 x result, and scale/offset results for every T): 1e-5 at
  first order; 1e-4 at second order, where TF evaluates its decomposed formula (~30 float32
  ops, with the cancellations x - mean and dy - mean(dy)) and minigraph one fused float32
  kernel, so the two round differently (observed: < 1e-6).
* float16/bfloat16 results (x's gradients): both sides compute in float32 and round once to
  T, but their float32 values differ by the rounding above, which can move the result to
  the neighbouring T value; so one ulp of T is allowed on top of the float32 allowance.
  (The inputs of the half kernels are identical on both sides, so nothing looser is needed.)

Gradients for mean and variance must be None on both sides, at both orders
(docs/tf-semantics.md#autodiff-first-order).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from conftest import BF16, assert_close, random_case, run, x_shape

import minigraph as mg
from minigraph import ops

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
tf = pytest.importorskip("tensorflow")

pytestmark = pytest.mark.oracle

FORMATS = ("NHWC", "NCHW", "NDHWC", "NCDHW")
DTYPES = {"float32": (np.dtype(np.float32), mg.float32),
          "float16": (np.dtype(np.float16), mg.float16),
          "bfloat16": (BF16, mg.bfloat16)}
EPSILON = 0.001
FIRST_RTOL, SECOND_RTOL = 1e-5, 1e-4


def make_case(data_format, is_training, dtype):
    rng = np.random.default_rng(
        [FORMATS.index(data_format), int(is_training), list(DTYPES).index(dtype)])
    spatial = (3, 2) if len(data_format) == 4 else (2, 1, 3)
    shape = x_shape(data_format, 2, spatial, 4)
    x, scale, offset, mean, variance = random_case(rng, shape, data_format, DTYPES[dtype][0])
    w = rng.normal(size=shape).astype(np.float32)
    v = rng.normal(size=shape).astype(np.float32)
    return x, scale, offset, mean, variance, w, v


def tf_gradients(x, scale, offset, mean, variance, w, v, *, data_format, is_training):
    """[g_x, g_scale, g_offset, g_mean, g_variance], [h_x, h_scale, h_mean, h_variance]."""
    x, scale, offset, mean, variance, w, v = (
        tf.constant(a) for a in (x, scale, offset, mean, variance, w, v))
    with tf.GradientTape() as outer:
        outer.watch([x, scale, mean, variance])
        with tf.GradientTape() as inner:
            inner.watch([x, scale, offset, mean, variance])
            y = tf.raw_ops.FusedBatchNormV3(
                x=x, scale=scale, offset=offset, mean=mean, variance=variance,
                epsilon=EPSILON, data_format=data_format, is_training=is_training)[0]
            loss = tf.reduce_sum(tf.cast(y, tf.float32) * w)
        g = inner.gradient(loss, [x, scale, offset, mean, variance])
        second = tf.reduce_sum(tf.cast(g[0], tf.float32) * v)
    h = outer.gradient(second, [x, scale, mean, variance])
    return ([None if t is None else t.numpy() for t in g],
            [None if t is None else t.numpy() for t in h])


def minigraph_gradients(x, scale, offset, mean, variance, w, v, *, data_format, is_training,
                        backend):
    s = mg.Scope.NewRootScope()
    dtype = mg.as_dtype(x.dtype)
    px = ops.Placeholder(s.WithOpName("x"), dtype, shape=x.shape)
    pscale = ops.Placeholder(s.WithOpName("scale"), mg.float32, shape=scale.shape)
    poffset = ops.Placeholder(s.WithOpName("offset"), mg.float32, shape=offset.shape)
    pmean = ops.Placeholder(s.WithOpName("mean"), mg.float32, shape=mean.shape)
    pvariance = ops.Placeholder(s.WithOpName("variance"), mg.float32, shape=variance.shape)
    y = ops.FusedBatchNormV3(s, px, pscale, poffset, pmean, pvariance, epsilon=EPSILON,
                             data_format=data_format, is_training=is_training).y
    axes = list(range(x.ndim))
    loss = ops.Sum(s, ops.Mul(s, ops.Cast(s, y, DstT=mg.float32), w), axes)
    g = mg.AddSymbolicGradients(s, [loss], [px, pscale, poffset, pmean, pvariance])
    second = ops.Sum(s, ops.Mul(s, ops.Cast(s, g[0], DstT=mg.float32), v), axes)
    h = mg.AddSymbolicGradients(s, [second], [px, pscale, pmean, pvariance])
    live = [t for t in g + h if t is not None]
    values = iter(run(s, live, {px: x, pscale: scale, poffset: offset, pmean: mean,
                                pvariance: variance}, backend))
    return ([None if t is None else next(values) for t in g],
            [None if t is None else next(values) for t in h])


CASES = [(f, t, d) for f in FORMATS for t in (True, False) for d in DTYPES]


@pytest.mark.parametrize("data_format,is_training,dtype", CASES,
                         ids=[f"{f}-{'train' if t else 'infer'}-{d}" for f, t, d in CASES])
def test_first_and_second_order_match_tensorflow(data_format, is_training, dtype, backend):
    case = make_case(data_format, is_training, dtype)
    options = {"data_format": data_format, "is_training": is_training}
    tf_g, tf_h = tf_gradients(*case, **options)
    mg_g, mg_h = minigraph_gradients(*case, **options, backend=backend)
    # no gradient for mean and variance, at either order (docs/tf-semantics.md#autodiff-first-order)
    assert tf_g[3:] == [None, None] and tf_h[2:] == [None, None]
    assert mg_g[3:] == [None, None] and mg_h[2:] == [None, None]
    for actual, expected, name in zip(mg_g, tf_g[:3], ("x", "scale", "offset")):
        assert_close(actual, expected, dtype=expected.dtype, rtol=FIRST_RTOL,
                     what=f"first order, {name}")
    for actual, expected, name in zip(mg_h, tf_h[:2], ("x", "scale")):
        assert_close(actual, expected, dtype=expected.dtype, rtol=SECOND_RTOL,
                     what=f"second order, {name}")
    if not is_training:  # g_x = w * scale * r does not depend on x
        np.testing.assert_array_equal(mg_h[0], 0)
