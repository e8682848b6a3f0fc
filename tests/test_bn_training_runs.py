"""The batch-norm training kernels' element walks (kernels_c/bn_runs_template.h): a row run
whose period fits the AVX-512 registers walks memory order with its coefficients and sums in
registers, starting after a masked head that depends on where the output lies, and
_FusedBatchNormGradEx stores the masked dy in its sums pass and computes dx from it.
Both must leave every bit where the position-array walk and the ReluGrad-then-backward
chain put it, for any output alignment and thread count."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minigraph.backends import native

pytestmark = pytest.mark.skipif(not native.available(), reason="native kernels not built")
F32 = np.float32
EPS = 1e-3


def _at(array: np.ndarray, shift: int) -> np.ndarray:
    """A copy of `array` starting `shift` float32 elements past a 64-byte boundary."""
    buf = np.empty(array.size + 32, F32)
    start = (-buf.ctypes.data % 64) // 4 + shift
    view = buf[start:start + array.size].reshape(array.shape)
    view[...] = array
    return view


def _relu_grad(dy: np.ndarray, y: np.ndarray) -> np.ndarray:
    """ReluGrad as mg_relu_grad: y > 0 ? dy : dy * 0."""
    return np.where(y > 0, dy, dy * F32(0))


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint32)


@settings(max_examples=25, deadline=None)
@given(channels=st.sampled_from([1, 3, 8, 16, 24, 32, 64, 100, 128, 130]),
       rows=st.one_of(st.integers(1, 300), st.integers(2000, 5000)),
       shifts=st.lists(st.integers(0, 15), min_size=2, max_size=2),
       threads=st.sampled_from([1, 2, 3]), seed=st.integers(0, 2 ** 16),
       isa=st.sampled_from(["avx512", "avx2", "scalar"]))
def test_training_walks_keep_the_bits(channels, rows, shifts, threads, seed, isa):
    rng = np.random.default_rng(seed)
    shape = (rows, 1, 1, channels)
    x, side, dy = (rng.standard_normal(shape).astype(F32) * 2 + 0.5 for _ in range(3))
    scale = rng.uniform(0.5, 1.5, channels).astype(F32)
    offset = rng.standard_normal(channels).astype(F32)
    native.set_isa(isa)
    try:
        results = []
        for shift, nt in ((shifts[0], 1), (shifts[1], threads)):
            native.set_num_threads(nt)
            y_out, dx_out = _at(x, shift), _at(x, shift)
            y, mean, variance = native.bn_forward_training_ex(
                x, scale, offset, EPS, True, side=side, relu=True, out=y_out)
            fused = native.bn_backward_training_ex(dy, x, scale, mean, variance, y, EPS, True,
                                                   side_backprop=True, out=dx_out)
            assert y is y_out and fused[0] is dx_out  # the shifted buffers were written
            masked = native.bn_backward_training_ex(dy, x, scale, mean, variance, y, EPS,
                                                    True, out=_at(x, 15 - shift))
            chain = native.bn_backward_training(_relu_grad(dy, y), x, scale, mean, variance,
                                                EPS, True, out=_at(x, shift))
            # the side gradient is the masked dy; dx, scale and offset gradients are the
            # chain's whether dx comes from the stored masked dy or masks dy again
            np.testing.assert_array_equal(_bits(fused[3]), _bits(_relu_grad(dy, y)))
            assert masked[3] is None
            for a, b, c in zip(fused[:3], masked[:3], chain, strict=True):
                np.testing.assert_array_equal(_bits(a), _bits(c))
                np.testing.assert_array_equal(_bits(b), _bits(c))
            results.append([y, mean, variance, *fused])
        # output alignment (the masked head) and thread count do not move a bit
        for a, b in zip(*results, strict=True):
            np.testing.assert_array_equal(_bits(a), _bits(b))
        # and the statistics are the batch's, within float32 summation error (float64 formula)
        x64 = x.astype(np.float64).reshape(-1, channels)
        np.testing.assert_allclose(results[0][1], x64.mean(0), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(results[0][2], x64.var(0), rtol=1e-4, atol=1e-5)
    finally:
        native.set_isa(native.best_isa())
        native.set_num_threads(None)
