"""The native wrappers' per-signature caches (``math_kernels.broadcast_plan`` and
``reduce_plan``, layout_kernels' StridedSlice spec): a cached plan gives the same bits as
numpy for every shape family, a second call with the same shapes and other values too, and
bad input still raises an error naming the op."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minigraph as mg
from minigraph import ops
from minigraph.backends import math_kernels, native

pytestmark = pytest.mark.skipif(not native.available(), reason="native backend not built")

F32 = np.float32


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, F32).view(np.uint32)


@st.composite
def reductions(draw):
    """A float32 array of rank 1-5 (some size-1 dims) and a non-empty set of axes."""
    shape = tuple(draw(st.lists(st.sampled_from([1, 2, 3, 5, 8, 17]), min_size=1, max_size=5)))
    axes = tuple(sorted(draw(st.sets(st.integers(0, len(shape) - 1), min_size=1))))
    seed = draw(st.integers(0, 2**16))
    return shape, axes, seed


@settings(max_examples=60, deadline=None)
@given(reductions())
def test_c_reduce_equals_numpy_bit_for_bit_on_repeated_calls(case):
    """Every route of c_reduce (pairwise trailing rows, rows, gather, and the trailing rows
    followed by the others), twice per shape: the second call reads the cached plan."""
    shape, axes, seed = case
    rng = np.random.default_rng(seed)
    for mean in (False, True):
        for _ in range(2):
            x = (rng.standard_normal(shape) * 10.0 ** rng.uniform(-3, 3, shape)).astype(F32)
            expected = x.mean(axis=axes) if mean else x.sum(axis=axes)
            ours = math_kernels.c_reduce(x, axes, mean)
            np.testing.assert_array_equal(_bits(ours), _bits(np.ravel(expected)))


@st.composite
def broadcasts(draw):
    """Two shapes that broadcast (each dim of one either the other's or 1), as plain
    arrays or broadcast views."""
    rank = draw(st.integers(1, 4))
    full = draw(st.lists(st.sampled_from([1, 2, 3, 7]), min_size=rank, max_size=rank))
    shapes = [tuple(n if draw(st.booleans()) else 1 for n in full) for _ in range(2)]
    shapes[1] = shapes[1][draw(st.integers(0, rank - 1)):]  # y of lower rank at times
    return shapes, draw(st.booleans()), draw(st.integers(0, 2**16))


@settings(max_examples=60, deadline=None)
@given(broadcasts())
def test_c_broadcast_equals_numpy_bit_for_bit_on_repeated_calls(case):
    (x_shape, y_shape), view, seed = case
    rng = np.random.default_rng(seed)
    z_shape = np.broadcast_shapes(x_shape, y_shape)
    for _ in range(2):
        x = rng.standard_normal(x_shape).astype(F32)
        y = rng.standard_normal(y_shape).astype(F32)
        if view:  # BroadcastTo's read-only views: C reads what they repeat
            x = np.broadcast_to(x, z_shape)
        for c_name, function in (("add", np.add), ("mul", np.multiply),
                                 ("sub", np.subtract)):
            z = math_kernels.c_broadcast(c_name, x, y)
            assert z.shape == z_shape
            np.testing.assert_array_equal(_bits(z), _bits(function(x, y)))


def test_c_broadcast_of_shapes_that_do_not_broadcast_raises_every_time():
    """A failed plan is not cached: the second call raises too."""
    x, y = np.ones((2, 3), F32), np.ones((4,), F32)
    for _ in range(2):
        with pytest.raises(ValueError):
            math_kernels.c_broadcast("add", x, y)


def _strided_slice(x, begin, end, strides, **masks):
    root = mg.Scope.NewRootScope()
    feed = ops.Placeholder(root.WithOpName("x"), mg.float32)
    specs = [ops.Placeholder(root.WithOpName(n), mg.int32) for n in ("b", "e", "s")]
    y = ops.StridedSlice(root.WithOpName("cut"), feed, *specs, **masks)
    session = mg.ClientSession(root, backend="native")

    def run(b, e, s):
        return session.Run({feed: x, specs[0]: np.array(b, np.int32),
                            specs[1]: np.array(e, np.int32),
                            specs[2]: np.array(s, np.int32)}, [y])[0]
    return run


def test_strided_slice_cached_spec_follows_the_values_and_still_rejects_bad_ones():
    """One node run with several specs of one shape: each result is numpy's slice (the
    cache is keyed by the values, not the node); a zero stride after good runs still names
    the op."""
    x = np.arange(4 * 6, dtype=F32).reshape(4, 6)
    run = _strided_slice(x, None, None, None, shrink_axis_mask=1)
    for b, e, s in [([1, 0], [2, 6], [1, 2]), ([-1, 1], [0, 5], [1, 1]), ([1, 0], [2, 6], [1, 2]),
                    ([2, 5], [3, 0], [1, -2])]:
        np.testing.assert_array_equal(run(b, e, s), x[b[0], b[1]:e[1]:s[1]])
    with pytest.raises(mg.errors.InvalidArgumentError, match="cut"):
        run([0, 0], [1, 6], [1, 0])
    with pytest.raises(mg.errors.InvalidArgumentError, match="cut"):
        run([0, 0], [1, 6], [1, 0])


def _outcome(function, *args):
    """A geometry function's Window (its repr: 1.0 is not 1), or the message it failed
    with."""
    try:
        return repr(function(*args))
    except ValueError as error:
        return f"error: {error}"


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(["NHWC", "NCHW"]), st.sampled_from(["SAME", "VALID", "EXPLICIT"]),
       st.tuples(st.integers(0, 3), st.integers(1, 3)),
       st.tuples(st.integers(1, 2), st.integers(1, 2)),
       st.lists(st.integers(0, 2), min_size=4, max_size=4),
       st.tuples(st.integers(1, 3), st.integers(1, 9), st.integers(1, 9), st.integers(1, 4)),
       st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(1, 4), st.integers(1, 3)),
       st.sampled_from(["conv", "depthwise", "pool"]))
def test_cached_window_geometry_is_the_uncached_one_also_for_bad_attrs(
        fmt, padding, strides, dilations, pads, input_shape, filter_shape, which):
    """conv_geometry, depthwise_geometry and pool_output_shape through their cache, called
    twice, give what the uncached functions give: the same Window, or the same error (bad
    strides, pads, channel counts; an error is not cached): each attr is part of the key,
    with its type (1.0 is not 1)."""
    from minigraph.ops.convolution_ops import depthwise_geometry
    from minigraph.ops.pooling_ops import pool_output_shape
    from minigraph.ops.window import conv_geometry

    function = {"conv": conv_geometry, "depthwise": depthwise_geometry,
                "pool": pool_output_shape}[which]
    args = (input_shape,) if which == "pool" else (input_shape, filter_shape)
    spatial_first = fmt == "NHWC"  # (a stride of 0 and pads too large are bad attrs)
    strides = [1, *strides, 1] if spatial_first else [1, 1, *strides]
    dilations = [1, *dilations, 1] if spatial_first else [1, 1, *dilations]
    pads = [0, 0, *pads, 0, 0] if spatial_first else [0, 0, 0, 0, *pads]
    attrs = {"data_format": fmt, "padding": padding, "strides": strides,
             "explicit_paddings": pads if padding == "EXPLICIT" else []}
    if which == "pool":
        attrs["ksize"] = [1, *filter_shape[:2], 1] if spatial_first else [1, 1, *filter_shape[:2]]
    else:
        attrs["dilations"] = dilations

    def fail(message):
        return ValueError(message)

    variants = (attrs, {**attrs, "strides": [s + 1 if s > 1 else s for s in strides]},
                {**attrs, "strides": [float(s) for s in strides]}, attrs)
    if which == "pool":
        variants += ({**attrs, "ksize": [1, 2, 3, 1] if spatial_first else [1, 1, 2, 3]},)
    for attrs_now in variants:
        expected = _outcome(function.__wrapped__, attrs_now, fail, *args)
        for _ in range(2):
            assert _outcome(function, attrs_now, fail, *args) == expected
