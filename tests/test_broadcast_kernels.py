"""The native broadcasting binary ops (kernels_c/broadcast*, registered in
minigraph/backends/math_kernels.py): Add, AddV2, Sub, Mul, Div, RealDiv, Maximum, Minimum and
SquaredDifference in float32 are the numpy kernels' float32 results bit for bit (IEEE single
operations, one rounding each), for hypothesis-drawn broadcast shapes and values
(infinities, NaN, zeros of both signs and subnormals included), for the per-channel
broadcasts real models have on every ISA and thread count, and through the numpy fallback
for layouts C does not take. The C entry point refuses shapes that are not a broadcast.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import NATIVE_AVAILABLE
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import minigraph as mg
from minigraph import ops

pytestmark = pytest.mark.skipif(not NATIVE_AVAILABLE, reason="the native kernels are not built")

F32 = np.float32
OPS = {"Add": np.add, "AddV2": np.add, "Sub": np.subtract, "Mul": np.multiply,
       "Div": np.divide, "RealDiv": np.divide,
       # the reference kernels' own rules (NaN from either side, ties to x; two roundings)
       "Maximum": lambda x, y: np.where((x < y) | np.isnan(y), y, x),
       "Minimum": lambda x, y: np.where((y < x) | np.isnan(y), y, x),
       "SquaredDifference": lambda x, y: np.subtract(x, y) * np.subtract(x, y)}
SETTINGS = settings(max_examples=150, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


def assert_numpy_bits(ours: np.ndarray, x, y, function, what: str) -> None:
    """``ours`` is numpy's float32 ``function(x, y)``: the same bits, NaN where numpy has
    NaN (a NaN's payload depends on which operand the hardware returns)."""
    with np.errstate(all="ignore"):
        expected = function(x, y)
    assert ours.dtype == expected.dtype and ours.shape == expected.shape, what
    nan = np.isnan(expected)
    np.testing.assert_array_equal(np.isnan(ours), nan, err_msg=what)
    np.testing.assert_array_equal(ours[~nan].view(np.uint32), expected[~nan].view(np.uint32),
                                  err_msg=what)


def run_native(x, y, names=tuple(OPS), feed_views: bool = False):
    """Every op of ``names`` on x and y in one native session; with the kernels that ran."""
    root = mg.Scope.NewRootScope()
    xp = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=np.shape(x))
    yp = ops.Placeholder(root.WithOpName("y"), mg.float32, shape=np.shape(y))
    fetches = [getattr(ops, name)(root.WithOpName(name), xp, yp) for name in names]
    metadata = mg.RunMetadata()
    results = mg.ClientSession(root, backend="native").Run({xp: x, yp: y}, fetches,
                                                           run_metadata=metadata)
    kernels = {s.node_name: s.kernel for s in metadata.step_stats}
    return results, [kernels[name] for name in names]


def values(shape) -> st.SearchStrategy:
    return hnp.arrays(F32, shape, elements=st.floats(width=32, allow_subnormal=True),
                      fill=st.sampled_from([0.0, -0.0, 1.0, np.inf, -np.inf, np.nan, 1e-40]))


@SETTINGS
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=6,
                                                max_side=4),
       data=st.data())
def test_native_binary_ops_are_numpy_bit_for_bit(shapes, data):
    x_shape, y_shape = shapes.input_shapes
    x, y = data.draw(values(x_shape), "x"), data.draw(values(y_shape), "y")
    results, kernels = run_native(x, y)
    for (name, function), result, kernel in zip(OPS.items(), results, kernels):
        assert kernel.startswith("math_kernels.") and kernel.endswith("_native"), kernel
        assert_numpy_bits(result, x, y, function, f"{name} {x_shape} {y_shape}")


# the broadcasts of real models: biases, batch-norm folds, squeeze-excite gates, NCHW
# channel scales, scalars, plus a shape whose inner dimension is not a multiple of 16
MODEL_SHAPES = [
    ((4, 14, 14, 96), (96,)), ((4, 14, 14, 96), (1, 1, 1, 96)), ((4, 14, 14, 96), (4, 1, 1, 96)),
    ((4, 96, 14, 14), (4, 96, 1, 1)), ((4, 14, 14, 96), ()), ((), (4, 14, 14, 96)),
    ((4, 14, 14, 96), (4, 14, 14, 96)), ((1, 1, 1, 96), (4, 14, 14, 96)), ((37, 1, 53), (1, 29, 1)),
]


@pytest.mark.parametrize("x_shape,y_shape", MODEL_SHAPES, ids=str)
def test_model_broadcasts_on_every_isa_and_thread_count(x_shape, y_shape):
    from minigraph.backends import native

    rng = np.random.default_rng(len(x_shape) + 10 * len(y_shape))
    x = rng.standard_normal(x_shape).astype(F32)
    y = (rng.standard_normal(y_shape) + 0.1).astype(F32)
    try:
        for isa in native.ISAS[:native.ISAS.index(native.best_isa()) + 1]:
            native.set_isa(isa)
            for threads in (1, 3):
                native.set_num_threads(threads)
                results, kernels = run_native(x, y)
                for (name, function), result, kernel in zip(OPS.items(), results, kernels):
                    assert kernel.endswith("_native"), kernel
                    assert_numpy_bits(result, x, y, function, f"{name} {isa} x{threads}")
    finally:
        native.set_isa(native.best_isa())
        native.set_num_threads(None)


def test_layouts_c_does_not_take_run_numpys_kernel():
    """c_broadcast declines a strided or misaligned input (C reads plain arrays only); the
    session then runs the reference kernel, with the same result."""
    from minigraph.backends.math_kernels import c_broadcast

    rng = np.random.default_rng(7)
    transposed = rng.standard_normal((6, 5)).astype(F32).T  # a Fortran-ordered view
    misaligned = np.zeros(4 * 30 + 1, np.uint8)[1:].view(F32).reshape(5, 6)
    misaligned[...] = rng.standard_normal((5, 6))
    row = rng.standard_normal(6).astype(F32)
    for x in (transposed, misaligned):
        assert c_broadcast("add", x, row) is None and c_broadcast("mul", row, x) is None
    results, kernels = run_native(transposed, row)
    assert all(kernel.endswith("_native") for kernel in kernels)
    for (name, function), result in zip(OPS.items(), results):
        assert_numpy_bits(result, transposed, row, function, name)


def test_neighbouring_dimensions_that_broadcast_alike_are_merged():
    from minigraph.backends import native
    from minigraph.backends.math_kernels import broadcast_plan

    def plan(x_shape, y_shape):
        z_shape, rank, dims, x_dims, y_dims = broadcast_plan(x_shape, y_shape)
        return z_shape, [list(native.ffi.unpack(a, rank)) for a in (dims, x_dims, y_dims)]

    assert plan((4, 14, 14, 96), (96,)) == ((4, 14, 14, 96), [[784, 96], [784, 96], [1, 96]])
    assert plan((4, 14, 14, 96), (4, 1, 1, 96)) == ((4, 14, 14, 96),
                                                    [[4, 196, 96], [4, 196, 96], [4, 1, 96]])
    assert plan((2, 3), (2, 3)) == ((2, 3), [[6], [6], [6]])
    assert plan((), ()) == ((), [[1], [1], [1]])
    assert plan((1, 5, 1), (3, 1, 1, 1)) == ((3, 1, 5, 1), [[3, 5], [1, 5], [3, 1]])
    assert broadcast_plan((0, 3), (3,)) is None  # empty: numpy's kernel


def test_c_entry_point_refuses_what_is_not_a_broadcast():
    from minigraph.backends.native import ffi, lib

    one = np.ones(8, F32)
    buf = ffi.from_buffer("float[]", one)

    def call(op, dims, x_dims, y_dims, x=buf):
        arrays = [ffi.new("int64_t[]", d) for d in (dims, x_dims, y_dims)]
        return lib.mg_broadcast(op, len(dims), *arrays, x, buf, buf, 1)

    names = [ffi.string(lib.mg_broadcast_op_name(i)).decode()
             for i in range(lib.mg_broadcast_op_count())]
    assert names[:4] == ["add", "sub", "mul", "div"]
    assert lib.mg_broadcast_op_name(lib.mg_broadcast_op_count()) == ffi.NULL
    assert call(0, [2, 4], [2, 4], [1, 4]) == lib.MG_OK
    assert call(lib.mg_broadcast_op_count(), [2], [2], [2]) == lib.MG_EINVAL  # unknown op
    assert call(0, [2, 4], [2, 3], [1, 4]) == lib.MG_EINVAL  # 3 is neither 4 nor 1
    assert call(0, [4], [1], [1]) == lib.MG_EINVAL  # z larger than both operands
    assert call(0, [-1], [-1], [-1]) == lib.MG_EINVAL
    assert call(0, [2**62, 4], [2**62, 4], [1, 4]) == lib.MG_EINVAL  # 2^64 elements
    assert call(0, [2], [2], [2], x=ffi.NULL) == lib.MG_EINVAL
    assert call(0, [0, 4], [0, 4], [1, 4], x=ffi.NULL) == lib.MG_OK  # nothing to read
    assert lib.mg_broadcast(0, 0, ffi.NULL, ffi.NULL, ffi.NULL, buf, buf, buf, 1) == \
        lib.MG_EINVAL
    assert lib.mg_broadcast(0, lib.MG_BROADCAST_MAX_RANK + 1, *[ffi.new(
        "int64_t[]", [1] * 9)] * 3, buf, buf, buf, 1) == lib.MG_EINVAL
