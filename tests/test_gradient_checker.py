"""Every registered gradient, checked against float64 central finite differences.

``mg.gradient_checker.compute_gradient`` returns the symbolic Jacobian (AddSymbolicGradients)
and the numerical one (central differences), both evaluated on the ``"float64"`` backend, so
the two agree to ~1e-9 when the gradient is right; the tolerance is ``TOL = 1e-6``.

* Math/array ops: broadcasting in every direction, scalars, keep_dims, negative/scalar/int64
  axes, unknown static shapes (the dynamic ``Shape``/``BroadcastGradientArgs``/
  ``ReducedShape`` path), AddN, Identity, Cast, Reshape, BroadcastTo, Fill, and the
  non-differentiable ops (their true derivative is 0).
* Layout families: ConcatV2/Concat (ConcatOffset slices), Split/SplitV (an unused or empty
  piece gets zeros), GatherV2 at every kind of axis and with batch_dims, repeated indices
  (UnsortedSegmentSum, whose own gradient drops negative ids), MirrorPad(Grad) in both
  modes, SpaceToBatchND/BatchToSpaceND, DepthToSpace/SpaceToDepth, ReverseV2, IdentityN,
  Snapshot.
* Activations: every op of the family (Relu ... Softsign) at first order, each gradient op
  in both of its inputs, and the exponential ones' gradients differentiated again.
* Elementwise and reduction families: every unary op (the piecewise-constant Floor, Ceil,
  Round and Sign seen through ``x * op(x)``), the broadcasting binary ops, Select's row
  condition and SelectV2's broadcasting, SqrtGrad (Sqrt's second order), Max/Min, Prod over
  one to three axes (a zero in the group included), Cumsum/Cumprod with exclusive/reverse.
* Batch norm: FusedBatchNormV3 at orders 1, 2 and 3 (order k checks the Jacobian of an
  order-(k-1) gradient tensor) in NHWC/NCHW/NDHWC/NCDHW, training and inference;
  FusedBatchNorm/V2 at order 1; the raw FusedBatchNormGrad/V2/V3 ops (whose gradient is
  FusedBatchNormGradGrad) and the raw FusedBatchNormGradGrad (whose gradient is the third
  order); BatchNormWithGlobalNormalization with and without scale_after_normalization.

``test_every_registered_gradient_is_checked`` fails when a gradient registered in
math_ops/array_ops/layout_ops/activation_ops/batch_norm is for an op type that no case here covers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

import minigraph as mg
from minigraph import ops
from minigraph.framework.gradient_registry import registered_gradients
from minigraph.testing.gradient_checker import compute_gradient, max_error

TOL = 1e-6
F32 = np.float32


def ph(scope: mg.Scope, name: str, shape, dtype=mg.float32) -> mg.Output:
    return ops.Placeholder(scope.WithOpName(name), dtype, shape=shape)


def assert_gradients_match(xs, values, y, *, feeds=None, nonzero=True):
    """Symbolic vs numerical Jacobians of ``y`` w.r.t. ``xs`` within TOL (float64)."""
    theoretical, numerical = compute_gradient(xs, values, y, feeds=feeds)
    y_size = int(np.prod(y.shape.dims))
    for value, t, n in zip(values, theoretical, numerical):
        assert t.shape == n.shape == (np.size(value), y_size)
    error = max_error(theoretical, numerical)
    worst = max(float(np.abs(n).max()) if n.size else 0.0 for n in numerical)
    assert error < TOL, f"max |symbolic - numerical| = {error:.3g} (largest entry {worst:.3g})"
    if nonzero:  # the check must not pass vacuously on all-zero Jacobians
        assert worst > 1e-3, f"numerical Jacobian is ~0 (max {worst:.3g})"
    return theoretical, numerical


# ============================================================================ math / array ops


@dataclass(frozen=True)
class Case:
    """``build(scope, rng) -> (xs, x_values, y[, feeds])``; ``covers``: the op types whose
    gradient it checks."""

    name: str
    covers: tuple[str, ...]
    build: Callable
    nonzero: bool = True


def _binary(op, x_shape, y_shape, *, y_low=None):
    def build(s, rng):
        x, y = ph(s, "x", x_shape), ph(s, "y", y_shape)
        y_value = rng.normal(size=y_shape)
        if y_low is not None:  # keep divisors away from zero
            y_value = rng.uniform(y_low, 2.0, y_shape) * rng.choice([-1, 1], y_shape)
        return [x, y], [rng.normal(size=x_shape), y_value], op(s, x, y)
    return build


def _unary(op, shape, low=None):
    def build(s, rng):
        x = ph(s, "x", shape)
        value = rng.normal(size=shape) if low is None else rng.uniform(low, 2.0, shape)
        return [x], [value], op(s, x)
    return build


def _reduction(op, shape, axes, keep_dims, axes_dtype=np.int32):
    def build(s, rng):
        x = ph(s, "x", shape)
        axis = ops.Const(s, np.array(axes, axes_dtype))
        # Square first, so the cotangent reaching the reduction is not constant
        return [x], [rng.normal(size=shape)], op(s, ops.Square(s, x), axis, keep_dims=keep_dims)
    return build


def _dynamic_binary(op):
    """x [?, 3] op y [?]: static shapes unknown, so the gradient needs BroadcastGradientArgs."""
    def build(s, rng):
        x, y = ph(s, "x", [None, 3]), ph(s, "y", [None])
        z = op(s, ops.Square(s, x), y)
        return [x, y], [rng.normal(size=(2, 3)), rng.uniform(0.5, 2, 3)], ops.Reshape(s, z, [6])
    return build


def _dynamic_reduction(op, keep_dims):
    def build(s, rng):
        x = ph(s, "x", [None, None, 2])
        z = op(s, ops.Square(s, x), [1, -1], keep_dims=keep_dims)
        return [x], [rng.normal(size=(2, 3, 2))], ops.Reshape(s, z, [2])
    return build


def _add_n(s, rng):
    x, y = ph(s, "x", (2, 3)), ph(s, "y", (2, 3))
    return [x, y], [rng.normal(size=(2, 3)), rng.normal(size=(2, 3))], ops.AddN(
        s, [x, ops.Mul(s, x, y), y])


def _identity(s, rng):
    x, y = ph(s, "x", (2, 3)), ph(s, "y", (2, 3))
    return [x, y], [rng.normal(size=(2, 3)), rng.normal(size=(2, 3))], ops.Mul(
        s, ops.Identity(s, x), y)


def _reshape(target):
    def build(s, rng):
        x = ph(s, "x", (2, 3, 4))
        return [x], [rng.normal(size=(2, 3, 4))], ops.Reshape(s, ops.Square(s, x), target)
    return build


def _cast(source, target):
    def build(s, rng):
        x = ph(s, "x", (2, 3), source)
        return [x], [rng.normal(size=(2, 3))], ops.Mul(
            s, ops.Cast(s, x, DstT=target), ops.Const(s, rng.normal(size=(2, 3)), target))
    return build


def _cast_through_int(s, rng):
    """Cast to int32 and back: no gradient (None), and the true derivative is 0 as well."""
    x = ph(s, "x", (2, 3))
    value = rng.integers(-3, 3, (2, 3)) + rng.uniform(0.2, 0.8, (2, 3))  # away from integers
    as_int = ops.Cast(s, x, DstT=mg.int32)
    return [x], [value], ops.Cast(s, as_int, DstT=mg.float32)


def _broadcast_to(in_shape, out_shape):
    def build(s, rng):
        x = ph(s, "x", in_shape)
        y = ops.BroadcastTo(s, x, ops.Const(s, np.array(out_shape, np.int32)))
        return [x], [rng.normal(size=in_shape)], ops.Mul(s, y, ops.Const(
            s, rng.normal(size=out_shape).astype(F32)))
    return build


def _transpose(s, rng):
    x = ph(s, "x", (2, 3, 4))
    y = ops.Transpose(s, ops.Square(s, x), [2, 0, 1])
    return [x], [rng.normal(size=(2, 3, 4))], y


def _transpose_fed_perm(s, rng):
    """perm known only at run time: the gradient uses InvertPermutation."""
    x, perm = ph(s, "x", (2, 3, 4)), ph(s, "perm", [3], mg.int32)
    y = ops.Reshape(s, ops.Transpose(s, ops.Square(s, x), perm), [4, 2, 3])
    return [x], [rng.normal(size=(2, 3, 4))], y, {perm: np.array([2, 0, 1], np.int32)}


def _fill(s, rng):
    value = ph(s, "value", [])
    filled = ops.Fill(s, ops.Const(s, np.array([2, 3], np.int32)), value)
    return [value], [np.array(1.5)], ops.Mul(s, filled, ops.Const(
        s, rng.normal(size=(2, 3)).astype(F32)))


def _zeros_ones_like(s, rng):
    x = ph(s, "x", (2, 3))
    y = ops.Add(s, ops.Mul(s, x, ops.OnesLike(s, x)), ops.ZerosLike(s, ops.Square(s, x)))
    return [x], [rng.normal(size=(2, 3))], y


def _shape_size(s, rng):
    """Size/Shape feed the value only through integers: derivative through them is 0."""
    x = ph(s, "x", (2, 3))
    size = ops.Cast(s, ops.Size(s, x), DstT=mg.float32)
    y = ops.Mul(s, ops.Square(s, x), size)
    return [x], [rng.normal(size=(2, 3))], ops.Reshape(s, y, ops.Shape(s, x))


MATH_CASES = [
    Case("add_same_shape", ("Add",), _binary(ops.Add, (2, 3), (2, 3))),
    Case("add_row_vector", ("Add",), _binary(ops.Add, (2, 3), (3,))),
    Case("add_outer", ("Add",), _binary(ops.Add, (2, 1), (1, 3))),
    Case("add_rank_expansion", ("Add",), _binary(ops.Add, (4, 1), (2, 1, 3))),
    Case("add_scalar", ("Add",), _binary(ops.Add, (2, 3), ())),
    Case("add_v2_row_vector", ("AddV2",), _binary(ops.AddV2, (2, 3), (3,))),
    Case("pad", ("Pad", "Slice"), _unary(
        lambda s, x: ops.Pad(s, x, np.array([[1, 0], [0, 2]], np.int64)), (2, 3))),
    Case("slice", ("Slice", "Pad", "Pack"), _unary(
        lambda s, x: ops.Slice(s, x, np.array([1, 0], np.int32), np.array([-1, 2], np.int32)),
        (3, 4))),
    Case("pack_axis_1", ("Pack",), _binary(lambda s, x, y: ops.Pack(s, [x, y], axis=1),
                                           (2, 3), (2, 3))),
    Case("expand_dims_squeeze", ("ExpandDims", "Squeeze"), _unary(
        lambda s, x: ops.Squeeze(s, ops.ExpandDims(s, x, -1), squeeze_dims=[0]), (1, 3))),
    Case("strided_slice_masks", ("StridedSlice", "StridedSliceGrad"), _unary(
        lambda s, x: ops.StridedSlice(s, ops.Square(s, x), np.array([1, 0, -1], np.int32),
                                      np.array([0, 0, 0], np.int32),
                                      np.array([1, 1, -2], np.int32), end_mask=5,
                                      new_axis_mask=2), (3, 4))),
    Case("strided_slice_grad_dy", ("StridedSliceGrad", "StridedSlice"), _unary(
        lambda s, dy: ops.StridedSliceGrad(s, np.array([3, 4], np.int64),
                                           np.array([2, 0], np.int64),
                                           np.array([0, 4], np.int64),
                                           np.array([1, 2], np.int64), dy,
                                           shrink_axis_mask=1), (2,))),
    Case("unpack_middle", ("Unpack", "Pack"), _unary(
        lambda s, x: ops.Mul(s, ops.Unpack(s, x, 3, axis=1)[1],
                             ops.Unpack(s, x, 3, axis=1)[2]), (2, 3, 2))),
    Case("tile", ("Tile",), _unary(
        lambda s, x: ops.Tile(s, x, np.array([2, 1, 3], np.int32)), (2, 3, 2))),
    Case("sub_same_shape", ("Sub",), _binary(ops.Sub, (2, 3), (2, 3))),
    Case("sub_broadcast_left", ("Sub",), _binary(ops.Sub, (3,), (2, 3))),
    Case("sub_scalar_left", ("Sub",), _binary(ops.Sub, (), (2, 3))),
    Case("mul_same_shape", ("Mul",), _binary(ops.Mul, (2, 3), (2, 3))),
    Case("mul_rank_expansion", ("Mul",), _binary(ops.Mul, (2, 1, 3), (4, 1))),
    Case("mul_scalar", ("Mul",), _binary(ops.Mul, (), (2, 3))),
    Case("div_same_shape", ("Div",), _binary(ops.Div, (2, 3), (2, 3), y_low=0.5)),
    Case("real_div_broadcast", ("RealDiv",), _binary(ops.RealDiv, (2, 3), (3,), y_low=0.5)),
    Case("div_by_vector", ("Div",), _binary(ops.Div, (2, 3), (3,), y_low=0.5)),
    Case("div_scalar_numerator", ("Div",), _binary(ops.Div, (), (2, 3), y_low=0.5)),
    Case("div_outer", ("Div",), _binary(ops.Div, (3, 1), (1, 2), y_low=0.5)),
    Case("neg", ("Neg",), _unary(ops.Neg, (2, 3))),
    Case("square", ("Square",), _unary(ops.Square, (2, 3))),
    Case("rsqrt", ("Rsqrt",), _unary(ops.Rsqrt, (2, 3), low=0.5)),
    Case("reciprocal", ("Reciprocal",), _unary(ops.Reciprocal, (2, 3), low=0.5)),
    Case("sum_axes", ("Sum",), _reduction(ops.Sum, (2, 3, 4), [0, 2], False)),
    Case("sum_axes_keep_dims", ("Sum",), _reduction(ops.Sum, (2, 3, 4), [0, 2], True)),
    Case("sum_negative_axis", ("Sum",), _reduction(ops.Sum, (2, 3, 4), [-1], False)),
    Case("sum_scalar_axis", ("Sum",), _reduction(ops.Sum, (2, 3, 4), 1, False)),
    Case("sum_all_keep_dims", ("Sum",), _reduction(ops.Sum, (2, 3), [0, 1], True)),
    Case("sum_int64_axes", ("Sum",), _reduction(ops.Sum, (2, 3, 4), [1], False, np.int64)),
    Case("mean_axes", ("Mean",), _reduction(ops.Mean, (2, 3, 4), [0, 2], False)),
    Case("mean_axes_keep_dims", ("Mean",), _reduction(ops.Mean, (2, 3, 4), [0, 2], True)),
    Case("mean_negative_axis", ("Mean",), _reduction(ops.Mean, (2, 3, 4), [-2], True)),
    Case("mean_all", ("Mean",), _reduction(ops.Mean, (2, 3), [0, 1], False)),
    Case("mean_int64_axes", ("Mean",), _reduction(ops.Mean, (2, 3, 4), [2], True, np.int64)),
    Case("dynamic_add", ("Add",), _dynamic_binary(ops.Add)),
    Case("dynamic_mul", ("Mul",), _dynamic_binary(ops.Mul)),
    Case("dynamic_div", ("Div",), _dynamic_binary(ops.Div)),
    Case("dynamic_sum", ("Sum",), _dynamic_reduction(ops.Sum, False)),
    Case("dynamic_mean_keep_dims", ("Mean",), _dynamic_reduction(ops.Mean, True)),
    Case("add_n", ("AddN", "Mul"), _add_n),
    Case("identity", ("Identity",), _identity),
    Case("reshape_infer_dim", ("Reshape",), _reshape([4, -1])),
    Case("reshape_flat", ("Reshape",), _reshape([24])),
    Case("cast_f32_to_f64", ("Cast",), _cast(mg.float32, mg.float64)),
    Case("cast_f16_to_f32", ("Cast",), _cast(mg.float16, mg.float32)),
    Case("cast_f32_to_bf16", ("Cast",), _cast(mg.float32, mg.bfloat16)),
    Case("cast_through_int32", ("Cast",), _cast_through_int, nonzero=False),
    Case("broadcast_to_rows", ("BroadcastTo",), _broadcast_to((3,), (2, 3))),
    Case("broadcast_to_rank_expansion", ("BroadcastTo",), _broadcast_to((2, 1), (4, 2, 3))),
    Case("transpose", ("Transpose",), _transpose),
    Case("transpose_fed_perm", ("Transpose",), _transpose_fed_perm),
    Case("fill_value", ("Fill",), _fill),
    Case("zeros_like_ones_like", ("ZerosLike", "OnesLike"), _zeros_ones_like),
    Case("shape_size", ("Shape", "Size"), _shape_size),
]


def _values(op, *draws):
    """``op(scope, *placeholders)`` at the values ``draws[i](rng)`` (shapes from them)."""
    def build(s, rng):
        values = [draw(rng) for draw in draws]
        xs = [ph(s, f"x{i}", np.shape(v)) for i, v in enumerate(values)]
        return xs, values, op(s, *xs)
    return build


def _normal(*shape):
    return lambda rng: rng.normal(size=shape)


def _away_from_zero(*shape, low=0.5):
    """|values| in [low, 2], random signs (divisors, cumulative products)."""
    return lambda rng: rng.uniform(low, 2.0, shape) * rng.choice([-1, 1], shape)


def _positive(*shape):
    return lambda rng: rng.uniform(0.5, 2.0, shape)


def _off_integers(*shape):
    """Values at least 0.1 from any integer or half-integer (Floor, Ceil, Round jump there)."""
    return lambda rng: rng.integers(-3, 4, shape) + rng.uniform(0.1, 0.4, shape)


def _times_input(op):
    """x * op(x): the piecewise-constant op's (zero) gradient seen through a nonzero one."""
    return lambda s, x: ops.Mul(s, op(s, x), x)


def _scan_case(op, axis, exclusive, reverse, draw):
    return _values(lambda s, x: op(s, x, np.int32(axis), exclusive=exclusive, reverse=reverse),
                   draw)


def _prod_with_a_zero(s, rng):
    """A zero in the reduced group: the other elements' product, no division by it."""
    x = ph(s, "x", (2, 3, 2))
    value = rng.uniform(0.5, 1.5, (2, 3, 2))
    value[1, 1, 0] = 0.0
    return [x], [value], ops.Prod(s, x, np.array([1, 2], np.int32))


ELEMENTWISE_CASES = [
    Case("exp", ("Exp",), _values(ops.Exp, _normal(2, 3))),
    Case("log", ("Log",), _values(ops.Log, _positive(2, 3))),
    Case("log1p", ("Log1p",), _values(ops.Log1p, _positive(2, 3))),
    Case("expm1", ("Expm1",), _values(ops.Expm1, _normal(2, 3))),
    Case("sqrt", ("Sqrt", "SqrtGrad"), _values(ops.Sqrt, _positive(2, 3))),
    Case("sqrt_grad", ("SqrtGrad",), _values(ops.SqrtGrad, _positive(2, 3), _normal(2, 3))),
    Case("erf", ("Erf",), _values(ops.Erf, _normal(2, 3))),
    Case("erfc", ("Erfc",), _values(ops.Erfc, _normal(2, 3))),
    Case("abs", ("Abs",), _values(ops.Abs, _away_from_zero(2, 3, low=0.1))),
    Case("sin_cos", ("Sin", "Cos"),
         _values(lambda s, x, y: ops.Mul(s, ops.Sin(s, x), ops.Cos(s, y)), _normal(2, 3),
                 _normal(3))),
    Case("tan_atan", ("Tan", "Atan"),
         _values(lambda s, x, y: ops.Mul(s, ops.Tan(s, x), ops.Atan(s, y)),
                 lambda rng: rng.uniform(-1.2, 1.2, (2, 3)), _normal(3))),
    Case("asin_acos_atanh", ("Asin", "Acos", "Atanh"),
         _values(lambda s, x: ops.Add(s, ops.Mul(s, ops.Asin(s, x), ops.Acos(s, x)),
                                      ops.Atanh(s, x)),
                 lambda rng: rng.uniform(-0.85, 0.85, (2, 3)))),
    Case("sinh_cosh", ("Sinh", "Cosh"),
         _values(lambda s, x, y: ops.Mul(s, ops.Sinh(s, x), ops.Cosh(s, y)), _normal(2, 3),
                 _normal(3))),
    Case("asinh_acosh", ("Asinh", "Acosh"),
         _values(lambda s, x, y: ops.Mul(s, ops.Asinh(s, x), ops.Acosh(s, y)), _normal(2, 3),
                 lambda rng: rng.uniform(1.2, 3.0, (3,)))),
    Case("atan2_broadcast", ("Atan2",), _values(ops.Atan2, _normal(2, 3), _away_from_zero(3))),
    Case("xlogy_xdivy_xlog1py", ("Xlogy", "Xdivy", "Xlog1py"),
         _values(lambda s, x, y: ops.Add(s, ops.Add(s, ops.Xlogy(s, x, y), ops.Xdivy(s, x, y)),
                                         ops.Xlog1py(s, x, y)), _normal(2, 3), _positive(3))),
    Case("mul_no_nan", ("MulNoNan",), _values(ops.MulNoNan, _normal(2, 3), _normal(2, 1))),
    Case("rint", ("Rint",), _values(_times_input(ops.Rint), _off_integers(2, 3))),
    Case("top_k", ("TopKV2",),
         _values(lambda s, x: ops.TopKV2(s, x, np.int32(3)).values,
                 lambda rng: rng.permutation(np.arange(12.0)).reshape(2, 6) * 0.5)),
    Case("gather_nd_duplicates", ("GatherNd", "ScatterNd"),
         _values(lambda s, x: ops.GatherNd(s, x, np.array([[0, 2], [1, 0], [0, 2]], np.int32)),
                 _normal(2, 3, 4))),
    Case("scatter_nd", ("ScatterNd", "GatherNd"),
         _values(lambda s, u: ops.ScatterNd(s, np.array([[1], [3], [1]], np.int64), u,
                                            np.array([4, 2], np.int64)), _normal(3, 2))),
    Case("reverse_sequence", ("ReverseSequence",),
         _values(lambda s, x: ops.ReverseSequence(s, x, np.array([2, 0, 3], np.int64),
                                                  seq_dim=1, batch_dim=0), _normal(3, 4))),
    Case("extract_image_patches", ("ExtractImagePatches", "Conv2DBackpropInput"),
         _values(lambda s, x: ops.ExtractImagePatches(s, x, [1, 2, 2, 1], [1, 2, 1, 1],
                                                      [1, 1, 2, 1], padding="SAME"),
                 _normal(1, 5, 6, 2))),
    Case("roll", ("Roll",),
         _values(lambda s, x: ops.Roll(s, x, np.array([1, -2], np.int32),
                                       np.array([0, 1], np.int32)), _normal(3, 4))),
    Case("euclidean_norm", ("EuclideanNorm",),
         _values(lambda s, x: ops.EuclideanNorm(s, x, np.array([0, 2], np.int32)),
                 _normal(2, 3, 2))),
    Case("cumulative_logsumexp", ("CumulativeLogsumexp",),
         _values(lambda s, x: ops.CumulativeLogsumexp(s, x, np.int32(1)), _normal(2, 4))),
    Case("cumulative_logsumexp_exclusive", ("CumulativeLogsumexp",),
         _values(lambda s, x: ops.Exp(s, ops.CumulativeLogsumexp(s, x, np.int32(1),
                                                                 exclusive=True)),
                 _normal(2, 4))),
    Case("cumulative_logsumexp_reverse", ("CumulativeLogsumexp",),
         _values(lambda s, x: ops.CumulativeLogsumexp(s, x, np.int32(0), reverse=True),
                 _normal(3, 2))),
    Case("tensor_scatter_update", ("TensorScatterUpdate", "GatherNd"),
         _values(lambda s, t, u: ops.TensorScatterUpdate(s, t, np.array([[2], [0]], np.int32),
                                                         u), _normal(4, 3), _normal(2, 3))),
    Case("tensor_scatter_add_sub", ("TensorScatterAdd", "TensorScatterSub", "GatherNd"),
         _values(lambda s, t, u, v: ops.TensorScatterSub(
             s, ops.TensorScatterAdd(s, t, np.array([[1, 1], [1, 1]], np.int64), u),
             np.array([[0, 2]], np.int64), v), _normal(2, 3), _normal(2), _normal(1))),
    Case("check_numerics", ("CheckNumerics",),
         _values(lambda s, x: ops.Square(s, ops.CheckNumerics(s, x, message="m")),
                 _normal(2, 3))),
    Case("matrix_band_part", ("MatrixBandPart",),
         _values(lambda s, x: ops.MatrixBandPart(s, x, np.int64(1), np.int64(0)),
                 _normal(2, 3, 4))),
    Case("floor", ("Floor",), _values(_times_input(ops.Floor), _off_integers(2, 3))),
    Case("ceil", ("Ceil",), _values(_times_input(ops.Ceil), _off_integers(2, 3))),
    Case("round", ("Round",), _values(_times_input(ops.Round), _off_integers(2, 3))),
    Case("sign", ("Sign",), _values(_times_input(ops.Sign), _away_from_zero(2, 3, low=0.1))),
    Case("maximum_broadcast", ("Maximum", "SelectV2"),
         _values(ops.Maximum, _normal(2, 3), _normal(3))),
    Case("minimum_outer", ("Minimum", "SelectV2"),
         _values(ops.Minimum, _normal(2, 1), _normal(1, 3))),
    Case("pow_broadcast", ("Pow",), _values(ops.Pow, _positive(2, 3), _normal(3))),
    Case("pow_negative_base", ("Pow",),
         _values(lambda s, x: ops.Pow(s, x, np.float32(3.0)), _normal(2, 3))),
    Case("squared_difference", ("SquaredDifference",),
         _values(ops.SquaredDifference, _normal(2, 3), _normal(2, 1))),
    Case("floor_mod", ("FloorMod",),
         _values(ops.FloorMod, _normal(2, 3), _away_from_zero(3))),
    Case("div_no_nan", ("DivNoNan",),
         _values(ops.DivNoNan, _normal(2, 3), _away_from_zero(3))),
    Case("select_rows", ("Select",),
         _values(lambda s, t, e: ops.Select(s, np.array([True, False]), ops.Square(s, t), e),
                 _normal(2, 3), _normal(2, 3))),
    Case("select_v2_broadcast", ("SelectV2",),
         _values(lambda s, t, e: ops.SelectV2(s, np.array([True, False, True]),
                                              ops.Square(s, t), e), _normal(2, 3), _normal())),
]

REDUCTION_CASES = [
    Case("max_axes", ("Max",), _reduction(ops.Max, (2, 3, 4), [0, 2], False)),
    Case("max_keep_dims_int64", ("Max",), _reduction(ops.Max, (2, 3, 4), [1], True, np.int64)),
    Case("min_scalar_axis", ("Min",), _reduction(ops.Min, (2, 3, 4), -1, False)),
    Case("prod_axes", ("Prod",), _reduction(ops.Prod, (2, 3, 4), [0, 2], False)),
    Case("prod_three_axes_keep_dims", ("Prod",),
         _values(lambda s, x: ops.Prod(s, x, np.array([2, 0, 1], np.int32), keep_dims=True),
                 _away_from_zero(2, 3, 2, low=0.8))),
    Case("prod_scalar_axis", ("Prod",), _reduction(ops.Prod, (2, 3), -1, False, np.int64)),
    Case("prod_no_axes", ("Prod",), _reduction(ops.Prod, (2, 3), np.zeros(0, np.int32), False)),
    Case("prod_with_a_zero", ("Prod",), _prod_with_a_zero),
    Case("cumsum", ("Cumsum",), _scan_case(ops.Cumsum, 1, False, False, _normal(2, 3, 2))),
    Case("cumsum_exclusive_reverse", ("Cumsum",),
         _scan_case(ops.Cumsum, -1, True, True, _normal(2, 3))),
    Case("cumprod", ("Cumprod",),
         _scan_case(ops.Cumprod, 0, False, False, _away_from_zero(3, 2))),
    Case("cumprod_exclusive", ("Cumprod",),
         _scan_case(ops.Cumprod, 1, True, False, _away_from_zero(2, 3))),
    Case("cumprod_reverse", ("Cumprod",),
         _scan_case(ops.Cumprod, -1, False, True, _away_from_zero(2, 3))),
]

ALL_CASES = MATH_CASES + ELEMENTWISE_CASES + REDUCTION_CASES


@pytest.mark.parametrize("case", ALL_CASES, ids=[c.name for c in ALL_CASES])
def test_math_gradient(case):
    scope = mg.Scope.NewRootScope()
    xs, values, y, *feeds = case.build(scope, np.random.default_rng(len(case.name)))
    assert_gradients_match(xs, values, y, feeds=feeds[0] if feeds else None,
                           nonzero=case.nonzero)


# ============================================================================ activations


def _away(rng, shape, low, high, kinks=()):
    """Uniform values in [low, high), moved off the ``kinks`` (where one-sided derivatives
    differ and central differences straddle them)."""
    value = rng.uniform(low, high, shape)
    for kink in kinks:
        value[np.abs(value - kink) < 0.15] += 0.3
    return value


def _activation(op, low, high, kinks=(), **attrs):
    def build(s, rng):
        x = ph(s, "x", (2, 3))
        return [x], [_away(rng, (2, 3), low, high, kinks)], op(s, x, **attrs)
    return build


def _activation_grad(op, second, kinks=(), **attrs):
    """op(first, second) with both inputs varied: ``second`` = (low, high) of its values."""
    def build(s, rng):
        a, b = ph(s, "a", (2, 3)), ph(s, "b", (2, 3))
        values = [rng.normal(size=(2, 3)), _away(rng, (2, 3), *second, kinks)]
        if op in (ops.SigmoidGrad, ops.TanhGrad):  # (y, dy): the output comes first
            values.reverse()
        return [a, b], values, op(s, a, b, **attrs)
    return build


def _second_order(op, low, high, kinks=()):
    """d/dx and d/dw of the gradient w . d op(x)/dx: the registered gradient's gradient."""
    def build(s, rng):
        x, w = ph(s, "x", (2, 3)), ph(s, "w", (2, 3))
        (dx,) = mg.AddSymbolicGradients(s, [op(s, x)], [x], [w])
        return [x, w], [_away(rng, (2, 3), low, high, kinks), rng.normal(size=(2, 3))], dx
    return build


ACTIVATION_CASES = [
    Case("relu", ("Relu",), _activation(ops.Relu, -2, 2, (0,))),
    Case("relu6", ("Relu6",), _activation(ops.Relu6, -2, 8, (0, 6))),
    Case("sigmoid", ("Sigmoid",), _activation(ops.Sigmoid, -4, 4)),
    Case("tanh", ("Tanh",), _activation(ops.Tanh, -3, 3)),
    Case("elu", ("Elu",), _activation(ops.Elu, -3, 2, (0,))),
    Case("selu", ("Selu",), _activation(ops.Selu, -3, 2, (0,))),
    Case("leaky_relu", ("LeakyRelu",), _activation(ops.LeakyRelu, -2, 2, (0,))),
    Case("leaky_relu_alpha", ("LeakyRelu",), _activation(ops.LeakyRelu, -2, 2, (0,),
                                                         alpha=1.5)),
    Case("softplus", ("Softplus",), _activation(ops.Softplus, -5, 5)),
    Case("softsign", ("Softsign",), _activation(ops.Softsign, -3, 3, (0,))),
    Case("relu_grad", ("ReluGrad",), _activation_grad(ops.ReluGrad, (-2, 2), (0,))),
    Case("relu6_grad", ("Relu6Grad",), _activation_grad(ops.Relu6Grad, (-2, 8), (0, 6))),
    Case("sigmoid_grad", ("SigmoidGrad",), _activation_grad(ops.SigmoidGrad, (0.05, 0.95))),
    Case("tanh_grad", ("TanhGrad",), _activation_grad(ops.TanhGrad, (-0.95, 0.95))),
    Case("elu_grad", ("EluGrad",), _activation_grad(ops.EluGrad, (-0.95, 2), (0,))),
    Case("selu_grad", ("SeluGrad",), _activation_grad(ops.SeluGrad, (-1.7, 2), (0,))),
    Case("leaky_relu_grad", ("LeakyReluGrad",),
         _activation_grad(ops.LeakyReluGrad, (-2, 2), (0,), alpha=0.3)),
    Case("softplus_grad", ("SoftplusGrad",), _activation_grad(ops.SoftplusGrad, (-5, 5))),
    Case("softsign_grad", ("SoftsignGrad",),
         _activation_grad(ops.SoftsignGrad, (-3, 3), (0,))),
    Case("sigmoid_second_order", ("Sigmoid", "SigmoidGrad"),
         _second_order(ops.Sigmoid, -4, 4)),
    Case("tanh_second_order", ("Tanh", "TanhGrad"), _second_order(ops.Tanh, -3, 3)),
    Case("elu_second_order", ("Elu", "EluGrad"), _second_order(ops.Elu, -3, 2, (0,))),
    Case("selu_second_order", ("Selu", "SeluGrad"), _second_order(ops.Selu, -3, 2, (0,))),
    Case("softplus_second_order", ("Softplus", "SoftplusGrad"),
         _second_order(ops.Softplus, -5, 5)),
    Case("softsign_second_order", ("Softsign", "SoftsignGrad"),
         _second_order(ops.Softsign, -3, 3, (0,))),
]


@pytest.mark.parametrize("case", ACTIVATION_CASES, ids=[c.name for c in ACTIVATION_CASES])
def test_activation_gradient(case):
    """First order for every activation, second order through each gradient op (both of its
    inputs) and through AddSymbolicGradients of the exponential ones."""
    scope = mg.Scope.NewRootScope()
    xs, values, y = case.build(scope, np.random.default_rng(len(case.name)))
    assert_gradients_match(xs, values, y)


# ============================================================================ layout families
# concat_ops, index_ops, spatial_ops and the pass-throughs of array_ops


def _joined(build, *shapes):
    """``build(scope, *xs)`` of placeholders of ``shapes``, each squared first (so the
    cotangents are not constant)."""
    def make(s, rng):
        xs = [ph(s, f"x{i}", shape) for i, shape in enumerate(shapes)]
        return xs, [rng.normal(size=shape) for shape in shapes], \
            build(s, *[ops.Square(s, x) for x in xs])
    return make


def _split_pieces(s, x):
    parts = ops.Split(s, np.int32(1), x, num_split=2)
    return ops.Mul(s, parts[0], parts[1])


def _split_v_pieces(s, x):
    a, b, _ = ops.SplitV(s, x, np.array([1, -1, 0], np.int64), np.int32(-1), num_split=3)
    return ops.ConcatV2(s, [ops.Square(s, a), b], np.int32(1))  # the empty piece: zeros


def _gather(indices, axis, batch_dims=0):
    return lambda s, x: ops.GatherV2(s, x, np.array(indices, np.int32), np.int64(axis),
                                     batch_dims=batch_dims)


def _mirror_pad_grad(mode):
    def build(s, rng):
        dy = ph(s, "dy", (5, 6))
        return [dy], [rng.normal(size=(5, 6))], ops.MirrorPadGrad(
            s, ops.Square(s, dy), np.array([[1, 1], [2, 1]], np.int32), mode=mode)
    return build


LAYOUT_CASES = [
    Case("concat_v2", ("ConcatV2",), _joined(
        lambda s, x, y: ops.ConcatV2(s, [x, y, x], np.int32(-1)), (2, 3), (2, 2))),
    Case("concat_v2_int64_axis", ("ConcatV2",), _joined(
        lambda s, x, y: ops.ConcatV2(s, [y, x], np.int64(0)), (2, 3), (1, 3))),
    Case("concat", ("Concat",), _joined(
        lambda s, x, y: ops.Concat(s, np.int32(1), [x, y]), (2, 3), (2, 1))),
    Case("split", ("Split", "ConcatV2"), _joined(_split_pieces, (2, 4))),
    Case("split_one_piece_unused", ("Split",), _joined(
        lambda s, x: ops.Split(s, np.int32(0), x, num_split=3)[1], (3, 2))),
    Case("split_v", ("SplitV", "ConcatV2"), _joined(_split_v_pieces, (2, 5))),
    Case("gather_rows_repeated", ("GatherV2", "UnsortedSegmentSum"), _joined(
        _gather([[0, 2], [2, 2]], 0), (3, 2))),
    Case("gather_middle_axis", ("GatherV2",), _joined(_gather([3, 0, 3], -2), (2, 4, 3))),
    Case("gather_batch_dims", ("GatherV2",), _joined(
        _gather([[1, 1, 0], [2, 0, 0]], 2, batch_dims=1), (2, 3, 3, 2))),
    Case("unsorted_segment_sum", ("UnsortedSegmentSum", "GatherV2", "Pad"), _joined(
        lambda s, x: ops.UnsortedSegmentSum(s, x, np.array([[1, -1], [0, 1]], np.int64), 3),
        (2, 2, 3))),
    Case("mirror_pad_reflect", ("MirrorPad", "MirrorPadGrad"), _joined(
        lambda s, x: ops.MirrorPad(s, x, np.array([[1, 2], [0, 2]]), mode="REFLECT"), (3, 4))),
    Case("mirror_pad_symmetric", ("MirrorPad",), _joined(
        lambda s, x: ops.MirrorPad(s, x, np.array([[2, 0], [3, 3]]), mode="SYMMETRIC"),
        (2, 3))),
    Case("mirror_pad_grad_reflect", ("MirrorPadGrad", "MirrorPad"), _mirror_pad_grad("REFLECT")),
    Case("mirror_pad_grad_symmetric", ("MirrorPadGrad",), _mirror_pad_grad("SYMMETRIC")),
    Case("space_to_batch", ("SpaceToBatchND", "BatchToSpaceND"), _joined(
        lambda s, x: ops.SpaceToBatchND(s, x, np.array([2, 2], np.int32),
                                        np.array([[1, 1], [0, 2]], np.int32)), (1, 2, 2, 2))),
    Case("batch_to_space", ("BatchToSpaceND", "SpaceToBatchND"), _joined(
        lambda s, x: ops.BatchToSpaceND(s, x, np.array([2, 1], np.int64),
                                        np.array([[1, 0], [0, 1]], np.int64)), (4, 2, 2, 1))),
    Case("depth_to_space", ("DepthToSpace", "SpaceToDepth"), _joined(
        lambda s, x: ops.DepthToSpace(s, x, block_size=2), (1, 1, 2, 8))),
    Case("space_to_depth_nchw", ("SpaceToDepth", "DepthToSpace"), _joined(
        lambda s, x: ops.SpaceToDepth(s, x, block_size=2, data_format="NCHW"), (1, 2, 2, 4))),
    Case("reverse", ("ReverseV2",), _joined(
        lambda s, x: ops.ReverseV2(s, x, np.array([0, -1], np.int32)), (2, 3, 2))),
    Case("identity_n_snapshot", ("IdentityN", "Snapshot"), _joined(
        lambda s, x, y: ops.Mul(s, ops.IdentityN(s, [x, y])[1], ops.Snapshot(s, x)), (2, 3),
        (2, 3))),
]


@pytest.mark.parametrize("case", LAYOUT_CASES, ids=[c.name for c in LAYOUT_CASES])
def test_layout_gradient(case):
    scope = mg.Scope.NewRootScope()
    xs, values, y = case.build(scope, np.random.default_rng(len(case.name)))
    assert_gradients_match(xs, values, y, nonzero=case.nonzero)


# ============================================================================ batch norm

FORMATS = ("NHWC", "NCHW", "NDHWC", "NCDHW")
EPSILON = 0.01


def bn_shape(data_format: str) -> tuple[int, ...]:
    """24 elements, C = 3 channels."""
    return {"NHWC": (2, 2, 2, 3), "NCHW": (2, 3, 2, 2), "NDHWC": (2, 1, 2, 2, 3),
            "NCDHW": (2, 3, 1, 2, 2)}[data_format]


C = 3


def bn_values(rng, data_format):
    """x (spread out, so no channel is nearly constant), scale, offset."""
    return [rng.normal(0.5, 2.0, bn_shape(data_format)),
            rng.uniform(0.5, 2.0, C) * rng.choice([-1, 1], C), rng.normal(size=C)]


def population_stats(rng, c):
    """Inference-mode mean and variance (float32 arrays, made constants by the op)."""
    return rng.normal(size=c).astype(F32), rng.uniform(0.5, 2.0, c).astype(F32)


FORWARD_OPS = {"FusedBatchNorm": ops.FusedBatchNorm, "FusedBatchNormV2": ops.FusedBatchNormV2,
               "FusedBatchNormV3": ops.FusedBatchNormV3}
GRAD_OPS = {"FusedBatchNormGrad": ops.FusedBatchNormGrad,
            "FusedBatchNormGradV2": ops.FusedBatchNormGradV2,
            "FusedBatchNormGradV3": ops.FusedBatchNormGradV3}


def build_forward(scope, op_type, data_format, is_training, rng, **attrs):
    """Placeholders x, scale, offset; returns (xs, values, forward op result, axes)."""
    shape, c = bn_shape(data_format), C
    x, scale, offset = ph(scope, "x", shape), ph(scope, "scale", [c]), ph(scope, "offset", [c])
    mean, variance = population_stats(rng, c)
    bn = FORWARD_OPS[op_type](scope, x, scale, offset, mean, variance, epsilon=EPSILON,
                              data_format=data_format, is_training=is_training, **attrs)
    return [x, scale, offset], bn_values(rng, data_format), bn, list(range(len(shape)))


def weighted_sum(scope, tensor, rng):
    """sum(tensor * w) with a fixed random w: a scalar whose cotangent for tensor is w."""
    w = ops.Const(scope, rng.normal(size=tensor.shape.dims).astype(F32))
    return ops.Sum(scope, ops.Mul(scope, tensor, w), list(range(tensor.shape.rank)))


def first_and_second_order(scope, xs, bn, axes, rng):
    """g = d loss/d(x, scale, offset) with loss = sum(w * y^2) (so the cotangent of y depends
    on every input), and h = d<(g_x, g_scale), (v, u)>/d(x, scale, offset)."""
    loss = weighted_sum(scope, ops.Square(scope, bn.y), rng)
    g = mg.AddSymbolicGradients(scope, [loss], xs)
    inner = ops.Add(scope, weighted_sum(scope, g[0], rng), weighted_sum(scope, g[1], rng))
    h = mg.AddSymbolicGradients(scope, [inner], xs)
    return g, h


V3_CASES = [(f, t, o) for f in FORMATS for t in (True, False) for o in (1, 2, 3)]


@pytest.mark.parametrize("data_format,is_training,order", V3_CASES,
                         ids=[f"{f}-{'train' if t else 'infer'}-order{o}" for f, t, o in V3_CASES])
def test_fused_batch_norm_v3(data_format, is_training, order):
    scope = mg.Scope.NewRootScope()
    rng = np.random.default_rng(FORMATS.index(data_format) * 10 + order + 5 * is_training)
    xs, values, bn, axes = build_forward(scope, "FusedBatchNormV3", data_format, is_training, rng)
    if order == 1:
        targets = [bn.y]
    else:
        g, h = first_and_second_order(scope, xs, bn, axes, rng)
        targets = g if order == 2 else h
    for target in targets:
        # offset's first-order gradient does not depend on scale/offset in inference, but
        # the Jacobian w.r.t. all three inputs together is never zero
        assert_gradients_match(xs, values, target)


LEGACY_CASES = [(op, f, t) for op in ("FusedBatchNorm", "FusedBatchNormV2")
                for f in ("NHWC", "NCHW") for t in (True, False)]


@pytest.mark.parametrize("op_type,data_format,is_training", LEGACY_CASES,
                         ids=[f"{o}-{f}-{'train' if t else 'infer'}" for o, f, t in LEGACY_CASES])
def test_fused_batch_norm_v1_v2_order1(op_type, data_format, is_training):
    scope = mg.Scope.NewRootScope()
    rng = np.random.default_rng(len(op_type) + 3 * is_training)
    xs, values, bn, _ = build_forward(scope, op_type, data_format, is_training, rng)
    assert_gradients_match(xs, values, bn.y)


@pytest.mark.parametrize("exponential_avg_factor", [0.5, 0.0])
def test_fused_batch_norm_v3_exponential_avg_factor_order2(exponential_avg_factor):
    """eaf != 1 only changes batch_mean/batch_variance; y and its derivatives are unchanged."""
    scope = mg.Scope.NewRootScope()
    rng = np.random.default_rng(11)
    xs, values, bn, axes = build_forward(scope, "FusedBatchNormV3", "NHWC", True, rng,
                                         exponential_avg_factor=exponential_avg_factor)
    g, _ = first_and_second_order(scope, xs, bn, axes, rng)
    for target in [bn.y, *g]:
        assert_gradients_match(xs, values, target)


RAW_GRAD_CASES = ([("FusedBatchNormGradV3", f, t) for f in FORMATS for t in (True, False)]
                  + [(op, f, t) for op in ("FusedBatchNormGrad", "FusedBatchNormGradV2")
                     for f in ("NHWC", "NCHW") for t in (True, False)])


@pytest.mark.parametrize("op_type,data_format,is_training", RAW_GRAD_CASES,
                         ids=[f"{o}-{f}-{'train' if t else 'infer'}"
                              for o, f, t in RAW_GRAD_CASES])
def test_raw_fused_batch_norm_grad(op_type, data_format, is_training):
    """The gradient of the grad op itself (FusedBatchNormGradGrad) w.r.t. dy, x and scale.

    In training the reserve spaces come from a forward op on the same x (the second order
    recomputes the statistics from x, docs/tf-semantics.md#autodiff-second-order, so they must
    be x's statistics for the derivative to be the true one); in inference they are the given
    population statistics.
    """
    scope = mg.Scope.NewRootScope()
    rng = np.random.default_rng(len(op_type) + FORMATS.index(data_format))
    shape, c = bn_shape(data_format), C
    dy, x, scale = ph(scope, "dy", shape), ph(scope, "x", shape), ph(scope, "scale", [c])
    forward = "FusedBatchNormV3" if op_type.endswith("V3") else (
        "FusedBatchNormV2" if op_type.endswith("V2") else "FusedBatchNorm")
    mean, variance = population_stats(rng, c)
    bn = FORWARD_OPS[forward](scope, x, scale, np.zeros(c, F32), mean, variance,
                              epsilon=EPSILON, data_format=data_format, is_training=is_training)
    saved = (bn.reserve_space_1, bn.reserve_space_2) if is_training else (
        ops.Const(scope, mean), ops.Const(scope, variance))
    extra = [bn.reserve_space_3] if op_type.endswith("V3") else []
    grad = GRAD_OPS[op_type](scope, dy, x, scale, *saved, *extra, epsilon=EPSILON,
                             data_format=data_format, is_training=is_training)
    values = [rng.normal(size=shape), *bn_values(rng, data_format)[:2]]
    for target in (grad.x_backprop, grad.scale_backprop, grad.offset_backprop):
        assert_gradients_match([dy, x, scale], values, target)


@pytest.mark.parametrize("data_format,is_training",
                         [(f, t) for f in FORMATS for t in (True, False)],
                         ids=[f"{f}-{'train' if t else 'infer'}" for f in FORMATS
                              for t in (True, False)])
def test_raw_fused_batch_norm_grad_grad(data_format, is_training):
    """The gradient of FusedBatchNormGradGrad (the third order) w.r.t. all six inputs that
    get one: y_backprop, x, scale and the three second-level cotangents."""
    scope = mg.Scope.NewRootScope()
    rng = np.random.default_rng(40 + FORMATS.index(data_format) + 4 * is_training)
    shape, c = bn_shape(data_format), C
    dy, x, scale = ph(scope, "dy", shape), ph(scope, "x", shape), ph(scope, "scale", [c])
    gx, gscale, goffset = ph(scope, "gx", shape), ph(scope, "gscale", [c]), ph(scope, "goff", [c])
    mean, variance = population_stats(rng, c)
    bn = ops.FusedBatchNormV3(scope, x, scale, np.zeros(c, F32), mean, variance,
                              epsilon=EPSILON, data_format=data_format, is_training=is_training)
    saved = (bn.reserve_space_1, bn.reserve_space_2) if is_training else (
        ops.Const(scope, mean), ops.Const(scope, variance))
    result = ops.FusedBatchNormGradGrad(scope, dy, x, scale, *saved, gx, gscale, goffset,
                                        epsilon=EPSILON, data_format=data_format,
                                        is_training=is_training)
    xs = [dy, x, scale, gx, gscale, goffset]
    values = [rng.normal(size=shape), *bn_values(rng, data_format)[:2],
              rng.normal(size=shape), rng.normal(size=c), rng.normal(size=c)]
    for target in result:
        assert_gradients_match(xs, values, target)


@pytest.mark.parametrize("is_training", [True, False], ids=["train", "infer"])
def test_third_order_with_one_tensor_in_two_roles(is_training):
    """d/dw of a Hessian-vector product that uses the same tensor w as the cotangent at both
    levels: FusedBatchNormGradGrad gets w as y_backprop AND as grad_x_backprop, and its
    gradient must give each role its own share (regression: w's was counted twice)."""
    scope = mg.Scope.NewRootScope()
    rng = np.random.default_rng(3)
    xs, values, bn, _ = build_forward(scope, "FusedBatchNormV3", "NHWC", is_training, rng)
    x, scale, offset = xs
    w = ph(scope, "w", bn_shape("NHWC"))
    (g_x,) = mg.AddSymbolicGradients(scope, [bn.y], [x], [w])
    h_x, h_scale = mg.AddSymbolicGradients(scope, [g_x], [x, scale], [w])
    grad_grad = [op for op in scope.graph().operations() if op.type == "FusedBatchNormGradGrad"]
    assert len(grad_grad) == 1 and grad_grad[0].inputs[0] is w and grad_grad[0].inputs[5] is w
    for target in (h_x, h_scale):
        # in inference h_x = 0 identically (g_x = w * scale * r does not depend on x)
        assert_gradients_match([x, scale, w], [*values[:2], rng.normal(size=bn_shape("NHWC"))],
                               target, feeds={offset: values[2]},
                               nonzero=is_training or target is h_scale)


@pytest.mark.filterwarnings("ignore:BatchNormWithGlobalNormalization:DeprecationWarning")
@pytest.mark.parametrize("scale_after_normalization", [True, False])
def test_batch_norm_with_global_normalization(scale_after_normalization):
    """Gradients for all five inputs, m and v included
    (docs/tf-semantics.md#global-normalization-gradient); gamma's is 0 when unused."""
    scope = mg.Scope.NewRootScope()
    rng = np.random.default_rng(7 + scale_after_normalization)
    shape, c = (2, 2, 2, 3), 3
    t = ph(scope, "t", shape)
    m, v, beta, gamma = (ph(scope, name, [c]) for name in ("m", "v", "beta", "gamma"))
    y = ops.BatchNormWithGlobalNormalization(scope, t, m, v, beta, gamma, EPSILON,
                                             scale_after_normalization)
    values = [rng.normal(size=shape), rng.normal(size=c), rng.uniform(0.5, 2.0, c),
              rng.normal(size=c), rng.uniform(0.5, 2.0, c) * rng.choice([-1, 1], c)]
    theoretical, numerical = assert_gradients_match([t, m, v, beta, gamma], values,
                                                    weighted_sum(scope, ops.Square(scope, y),
                                                                 rng))
    assert_gradients_match([t, m, v, beta, gamma], values, y)
    assert bool(np.abs(numerical[4]).max() > 1e-3) == scale_after_normalization


# ============================================================================ coverage

COVERED = (
    {op for case in ALL_CASES + ACTIVATION_CASES + LAYOUT_CASES for op in case.covers}
    | {"PreventGradient"}  # its gradient is an error: tests/test_pass_through_ops.py
    | set(FORWARD_OPS) | set(GRAD_OPS)
    | {"FusedBatchNormGradGrad", "BatchNormWithGlobalNormalization"}
)


# the modules whose gradients this file is responsible for (the autodiff core); gradients
# registered elsewhere (minigraph.ops.nn_ops, ...) are checked by their own test files
CHECKED_MODULES = ("minigraph.ops.math_ops", "minigraph.ops.array_ops",
                   "minigraph.ops.elementwise_ops", "minigraph.ops.reduction_ops",
                   "minigraph.ops.layout_ops", "minigraph.ops.activation_ops",
                   "minigraph.ops.concat_ops", "minigraph.ops.index_ops",
                   "minigraph.ops.spatial_ops",
                   "minigraph.ops.batch_norm", "minigraph.gradients.higher_order")


def test_every_registered_gradient_is_checked():
    registered = {op for op, fn in registered_gradients().items()
                  if fn is not None and fn.__module__ in CHECKED_MODULES}
    assert {"Add", "FusedBatchNormV3", "FusedBatchNormGradGrad"} <= registered
    missing = registered - COVERED
    assert not missing, (f"gradients registered for {sorted(missing)} are not checked by "
                         f"tests/test_gradient_checker.py: add a case")
