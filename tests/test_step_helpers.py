"""The small helpers every training step runs, in their fast forms: ``broadcast_view`` (the
BroadcastTo kernels and the broadcasting binary ops' results) against ``np.broadcast_to``,
``native.as_f32`` against ``np.require``, ``native.padded_bytes``' alignment and the
reductions' axes, on hypothesis-drawn shapes, dtypes and layouts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minigraph.backends import math_kernels, native


@st.composite
def _broadcasts(draw):
    """(x, a shape x broadcasts to): x's dims each the target's or 1, leading dims added."""
    rank = draw(st.integers(0, 4))
    target = draw(st.lists(st.integers(0, 4), min_size=rank, max_size=rank))
    lead = draw(st.integers(0, rank))
    x_shape = [size if draw(st.booleans()) else 1 for size in target[lead:]]
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    dtype = draw(st.sampled_from([np.float32, np.float64, np.int32]))
    x = np.asarray((rng.standard_normal(x_shape) * 10).astype(dtype))
    if draw(st.booleans()) and x.ndim:  # a strided view: the slow path
        x = np.repeat(x, 2, axis=-1)[..., ::2]
    if draw(st.booleans()):
        x.flags.writeable = False
    return x, tuple(target)


@settings(max_examples=200, deadline=None)
@given(_broadcasts())
def test_broadcast_view_is_numpys_view(case):
    x, shape = case
    want = np.broadcast_to(x, shape)
    got = math_kernels.broadcast_view(x, shape)
    assert got.shape == want.shape and got.dtype == want.dtype
    assert got.strides == want.strides
    assert not got.flags.writeable
    np.testing.assert_array_equal(got, want)
    assert np.shares_memory(got, x) or got.size == 0 or x.size == 0
    node = got  # the base chain ends in x's memory (the planner's aliasing follows it)
    while isinstance(node, np.ndarray) and node.base is not None and node is not x:
        node = node.base
    assert node is x or np.shares_memory(node, x) or got.size == 0


@pytest.mark.parametrize("x_shape, shape", [((3,), (2, 4)), ((2, 3), (3,)), ((2,), (-1, 2))])
def test_broadcast_view_refuses_what_numpy_refuses(x_shape, shape):
    x = np.ones(x_shape, np.float32)
    with pytest.raises(ValueError):
        np.broadcast_to(x, shape)
    with pytest.raises(ValueError):
        math_kernels.broadcast_view(x, shape)


@st.composite
def _arrays(draw):
    """Arrays C may not read as they are: other dtypes, byte orders, strides, 0-d, an
    offset of one byte (misaligned), and plain float32 ones."""
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=0, max_size=3)))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    kind = draw(st.sampled_from(["plain", "float64", "swapped", "strided", "misaligned"]))
    values = rng.standard_normal(shape) * 100
    if kind == "plain":
        return values.astype(np.float32)
    if kind == "float64":
        return values
    if kind == "swapped":
        return values.astype(">f4")
    if kind == "strided":
        return np.repeat(values.astype(np.float32).reshape(-1, 1), 2, axis=1)[:, 0].reshape(
            shape) if shape else values.astype(np.float32)[()]
    raw = np.zeros(values.size * 4 + 1, np.uint8)[1:]
    misaligned = raw.view(np.float32).reshape(shape)
    misaligned[...] = values
    return misaligned


@settings(max_examples=150, deadline=None)
@given(_arrays())
def test_as_f32_is_np_require(array):
    got = native.as_f32(array)
    want = np.require(array, np.float32, ("C", "A", "E"))
    assert native.plain_f32(got) and got.shape == np.shape(array)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("nbytes", [0, 1, 63, 64, 65, 4096, 100_003])
def test_padded_bytes_start_a_cache_line(nbytes):
    for _ in range(8):  # several allocations: numpy's offsets vary
        raw, skip = native.padded_bytes(nbytes)
        assert (raw.ctypes.data + skip) % native.CACHE_LINE == 0
        assert 0 <= skip < native.CACHE_LINE and raw.nbytes - skip >= nbytes


@pytest.mark.parametrize("axes", [np.array(2), np.array([0, -1]), np.array([], np.int32)])
def test_reduction_axes_of_any_rank(axes):
    x = np.zeros((2, 3, 4))
    assert math_kernels._axes(x, axes) == tuple(int(a) % 3 for a in np.atleast_1d(axes).ravel())
