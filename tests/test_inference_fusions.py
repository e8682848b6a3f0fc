"""The remapper on inference graphs: where the convolution epilogue fusion leaves a batch
norm, ``FusedBatchNormV3 (inference) -> [AddV2] -> Relu`` becomes one ``_FusedBatchNormEx``
(a pre-activation ResNet's normalized residual sum), and a ``Relu`` read only by a
``MaxPool`` stays a plain Relu the convolution before it takes as its epilogue (no
``_FusedReluMaxPool``: that fusion is for training graphs, where the Relu's output is also
read by the gradients). Results bit for bit those of the unfused graph, on every backend."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import NATIVE_AVAILABLE
from hypothesis import given, settings
from hypothesis import strategies as st

import minigraph as mg
from minigraph import ops

F32 = np.float32
BACKENDS = ["reference"] + (["native"] if NATIVE_AVAILABLE else [])
REMAPPER_OFF = mg.OptimizerOptions(remapper=False)


def _run_both(root, fetches: list, feeds: dict) -> None:
    """The fetches with the remapper on and off agree bit for bit on every backend."""
    for backend in BACKENDS:
        on = mg.ClientSession(root, backend=backend).Run(feeds, fetches)
        off = mg.ClientSession(root, backend=backend, optimizer=REMAPPER_OFF).Run(feeds, fetches)
        for a, b in zip(on, off, strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


@settings(max_examples=20, deadline=None)
@given(layout=st.sampled_from(["NHWC", "NCHW"]), n=st.integers(1, 3), hw=st.integers(1, 7),
       c=st.integers(1, 37), with_side=st.booleans(), seed=st.integers(0, 2**16))
def test_inference_batch_norm_relu_of_a_sum_fuses(layout, n, hw, c, with_side, seed):
    rng = np.random.default_rng(seed)
    shape = [n, hw, hw, c] if layout == "NHWC" else [n, c, hw, hw]
    a, b, s = (rng.standard_normal(shape).astype(F32) for _ in range(3))
    scale, offset, mean = (rng.standard_normal(c).astype(F32) for _ in range(3))
    variance = rng.uniform(0.1, 2, c).astype(F32)
    root = mg.Scope.NewRootScope()
    A, B, S = (ops.Placeholder(root, mg.float32, shape=shape) for _ in range(3))
    total = ops.AddV2(root, A, B)  # a residual sum: no convolution epilogue takes the norm
    bn = ops.FusedBatchNormV3(root, total, scale, offset, mean, variance, is_training=False,
                              data_format=layout, epsilon=1e-3)
    y = ops.Relu(root, ops.AddV2(root, bn.y, S) if with_side else bn.y)
    types = [op.type for op in mg.optimize(root, [y]).operations()]
    assert "_FusedBatchNormEx" in types and "FusedBatchNormV3" not in types
    assert "Relu" not in types
    _run_both(root, [y], {A: a, B: b, S: s})


@settings(max_examples=10, deadline=None)
@given(cin=st.integers(1, 9), cout=st.integers(1, 40), seed=st.integers(0, 2**16))
def test_inference_batch_norm_after_a_convolution_stays_its_epilogue(cin, cout, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 6, 6, cin)).astype(F32)
    w = rng.standard_normal((3, 3, cin, cout)).astype(F32)
    scale, offset, mean = (rng.standard_normal(cout).astype(F32) for _ in range(3))
    variance = rng.uniform(0.1, 2, cout).astype(F32)
    root = mg.Scope.NewRootScope()
    X = ops.Placeholder(root, mg.float32, shape=[2, 6, 6, cin])
    conv = ops.Conv2D(root, X, w, [1, 1, 1, 1], "SAME")
    bn = ops.FusedBatchNormV3(root, conv, scale, offset, mean, variance, is_training=False)
    y = ops.Relu(root, bn.y)
    types = [op.type for op in mg.optimize(root, [y]).operations()]
    assert "_FusedConv2D" in types and "_FusedBatchNormEx" not in types
    _run_both(root, [y], {X: x})


@settings(max_examples=10, deadline=None)
@given(cin=st.integers(1, 9), cout=st.integers(1, 40), hw=st.integers(2, 9),
       pool=st.sampled_from([(2, 2, "VALID"), (3, 2, "SAME"), (3, 1, "SAME")]),
       seed=st.integers(0, 2**16))
def test_relu_before_a_max_pool_joins_the_convolution_in_inference(cin, cout, hw, pool, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, hw, hw, cin)).astype(F32)
    w = rng.standard_normal((3, 3, cin, cout)).astype(F32)
    bias = rng.standard_normal(cout).astype(F32)
    size, stride, padding = pool
    root = mg.Scope.NewRootScope()
    X = ops.Placeholder(root, mg.float32, shape=[2, hw, hw, cin])
    relu = ops.Relu(root, ops.BiasAdd(root, ops.Conv2D(root, X, w, [1, 1, 1, 1], "SAME"),
                                      bias))
    y = ops.MaxPool(root, relu, [1, size, size, 1], [1, stride, stride, 1], padding)
    graph = mg.optimize(root, [y])
    [conv] = [op for op in graph.operations() if op.type == "_FusedConv2D"]
    assert list(conv.attrs["fused_ops"]) == ["BiasAdd", "Relu"]
    assert [op.type for op in graph.operations() if "Pool" in op.type] == ["MaxPool"]
    _run_both(root, [y], {X: x})


@settings(max_examples=15, deadline=None)
@given(cin=st.integers(1, 9), cout=st.integers(1, 40), per_channel=st.booleans(),
       activation=st.sampled_from(["Relu6", "Relu", None]), special=st.booleans(),
       seed=st.integers(0, 2**16))
def test_constant_addend_after_a_convolution_is_its_epilogue_affine(
        cin, cout, per_channel, activation, special, seed):
    """``Relu6(conv + b + 3)`` (MobileNetV3's hard sigmoid: a constant scalar or per-channel
    addend after the bias) runs in the convolution's epilogue, as the affine ``fma(y - 0, 1,
    r)`` (no trip through the member kernels), bit for bit the unfused chain's, also where
    the convolution gives inf, NaN or -0."""
    from minigraph.backends import fused_kernels

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 5, 5, cin)).astype(F32)
    if special:
        x.flat[rng.integers(0, x.size, 4)] = [np.inf, -np.inf, np.nan, -0.0]
    w = rng.standard_normal((1, 1, cin, cout)).astype(F32)
    bias = rng.standard_normal(cout).astype(F32)
    addend = (rng.standard_normal(cout) if per_channel else np.array(3.0)).astype(F32)
    root = mg.Scope.NewRootScope()
    X = ops.Placeholder(root, mg.float32, shape=[2, 5, 5, cin])
    y = ops.AddV2(root, ops.BiasAdd(root, ops.Conv2D(root, X, w, [1, 1, 1, 1], "VALID"), bias),
                  addend)
    y = getattr(ops, activation)(root, y) if activation else y
    types = [op.type for op in mg.optimize(root, [y]).operations()]
    assert "_FusedConv2D" in types and "AddV2" not in types

    def no_members(*args, **kwargs):
        raise AssertionError("the fused node ran its member kernels")

    if NATIVE_AVAILABLE:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(fused_kernels, "run_members", no_members)
            mg.ClientSession(root, backend="native").Run({X: x}, [y])
    _run_both(root, [y], {X: x})
