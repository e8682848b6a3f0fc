"""Reductions and scans beyond ``Sum``/``Mean``: ``Max``, ``Min``, ``Prod``,
``EuclideanNorm`` (``sqrt(sum(x^2))``), ``All``, ``Any``, ``ArgMin``, ``Cumsum``, ``Cumprod``
and ``CumulativeLogsumexp`` (``log(cumsum(exp(x)))``, floats), with TensorFlow's names,
inputs, outputs, attrs and allowed dtypes (``core/ops/math_ops.cc``, restricted to
minigraph's dtypes).

The reductions share ``Sum``'s signature and shape function (``math_ops.reduction_shape``:
axes a scalar or a vector, each in ``[-rank, rank)``, none twice); ``ArgMin`` shares
``ArgMax``'s (``nn_ops.arg_max_shape``). A reduction over no elements gives the identity of
its operation: ``-inf`` (floats) or the lowest integer for ``Max``, ``+inf`` or the highest
for ``Min``, 1 for ``Prod``, True for ``All``, False for ``Any``. The gradients, TF's formulas
written with minigraph ops, are at the bottom.
"""

from __future__ import annotations

import numpy as np

from minigraph.framework import dtypes
from minigraph.framework.errors import InvalidArgumentError
from minigraph.framework.gradient_registry import NotDifferentiable, RegisterGradient
from minigraph.framework.op_def import (
    ArgDef,
    AttrDef,
    InferenceContext,
    OpDef,
    make_wrapper,
    register_op,
    required,
)
from minigraph.framework.tensor_shape import TensorShape, dims_text
from minigraph.ops.array_ops import Const
from minigraph.ops.elementwise_ops import DivNoNan, Exp, Greater, Less, Log, SelectV2
from minigraph.ops.layout_ops import StridedSlice
from minigraph.ops.math_ops import (
    INDEX,
    NUMBERS,
    AddV2,
    Cast,
    Div,
    Mul,
    Neg,
    OnesLike,
    RealDiv,
    Sub,
    Sum,
    ZerosLike,
    _reduction,
    reduction_shape,
    sum_grad_of,
)
from minigraph.ops.nn_ops import Equal, arg_max_shape

# The wrappers minigraph.ops exports.
__all__ = ["All", "Any", "ArgMin", "Cumprod", "Cumsum", "CumulativeLogsumexp", "EuclideanNorm",
           "Max", "Min", "Prod"]

TIDX = AttrDef("Tidx", "type", default=dtypes.int32, allowed=INDEX)

Max = make_wrapper(_reduction("Max"))
Min = make_wrapper(_reduction("Min"))
Prod = make_wrapper(_reduction("Prod"))
EuclideanNorm = make_wrapper(_reduction("EuclideanNorm"))


def _logical_reduction(name: str) -> type:
    """``All``/``Any``: a bool input reduced to bool, Sum's axes and keep_dims."""
    return make_wrapper(register_op(OpDef(
        name=name,
        inputs=[ArgDef("input", dtype=dtypes.bool_), ArgDef("reduction_indices", type_attr="Tidx")],
        outputs=[ArgDef("output", dtype=dtypes.bool_)],
        attrs=[AttrDef("keep_dims", "bool", default=False), TIDX],
        shape_fn=reduction_shape,
    )))


All = _logical_reduction("All")
Any = _logical_reduction("Any")

ArgMin = make_wrapper(register_op(OpDef(
    name="ArgMin",
    inputs=[ArgDef("input", type_attr="T"), ArgDef("dimension", type_attr="Tidx")],
    outputs=[ArgDef("output", type_attr="output_type")],
    attrs=[required("T", "type", allowed=NUMBERS + (dtypes.bool_,)), TIDX,
           AttrDef("output_type", "type", default=dtypes.int64, allowed=INDEX)],
    shape_fn=arg_max_shape,
)))


def _scan_shape(ctx: InferenceContext) -> list[TensorShape]:
    """The input's shape; 'axis' a scalar in [-rank, rank) (TF's ScanOp checks)."""
    x, axis_shape = ctx.input_shapes
    if axis_shape.rank not in (None, 0):
        raise ctx.error(f"ScanOp: axis must be a scalar, not {dims_text(axis_shape)} "
                        f"(input 'axis')")
    axis = ctx.constant_value("axis")
    if axis is not None and x.rank is not None and not -x.rank <= axis < x.rank:
        raise ctx.error(f"ScanOp: Expected scan axis in the range [{-x.rank}, {x.rank}), but "
                        f"got {axis} (input 'axis', for input 'x' of shape {dims_text(x)})")
    return [x]


def _scan(name: str, allowed: tuple = NUMBERS) -> type:
    """``Cumsum``/``Cumprod``/``CumulativeLogsumexp`` along 'axis'; ``exclusive`` leaves each
    element out of its own result, ``reverse`` runs from the end."""
    return make_wrapper(register_op(OpDef(
        name=name,
        inputs=[ArgDef("x", type_attr="T"), ArgDef("axis", type_attr="Tidx")],
        outputs=[ArgDef("out", type_attr="T")],
        attrs=[AttrDef("exclusive", "bool", default=False,
                       doc="Leave each element out of its own result (the first is the "
                           "identity)."),
               AttrDef("reverse", "bool", default=False, doc="Scan from the last element."),
               required("T", "type", allowed=allowed), TIDX],
        shape_fn=_scan_shape,
    )))


Cumsum = _scan("Cumsum")
Cumprod = _scan("Cumprod")
CumulativeLogsumexp = _scan("CumulativeLogsumexp", dtypes.FLOATING)


# ----------------------------------------------------------------------------- gradients
# Each function returns d(loss)/d(input) for every input, given d(loss)/d(output)
# (TensorFlow's python/ops/math_grad.py formulas).

NotDifferentiable("All", "Any", "ArgMin")


@RegisterGradient("Max")
def _min_or_max_grad(scope, op, grads):
    """The cotangent goes to the elements equal to the result, split evenly among ties."""
    x, axes = op.inputs
    indicators = Cast(scope, Equal(scope, sum_grad_of(scope, op, op.outputs[0]), x),
                      DstT=x.dtype)
    count = Sum(scope, indicators, axes, keep_dims=op.attrs["keep_dims"])
    share = Div(scope, indicators, sum_grad_of(scope, op, count))
    return [Mul(scope, share, sum_grad_of(scope, op, grads[0])), None]


RegisterGradient("Min")(_min_or_max_grad)


def _exclusive_product(scope, z, axis):
    """Along ``axis``, the product of the other elements: exclusive cumulative products from
    both ends, multiplied (no division, so zeros are fine)."""
    return Mul(scope, Cumprod(scope, z, axis, exclusive=True),
               Cumprod(scope, z, axis, exclusive=True, reverse=True))


@RegisterGradient("Prod")
def _prod_grad(scope, op, grads):
    """dy/dx_e is the product of the other elements of e's group. For axes a_1..a_k, with
    P_j = Prod(x, a_(j+1)..a_k, keep_dims) (P_k = x), it is the product over j of P_j's
    product along a_j without e's position (TF moves the axes together with a transpose
    instead; this needs only the number of axes to be static)."""
    x, axes = op.inputs
    if axes.shape.rank == 0:
        axis_list = [axes]
    elif axes.shape.rank == 1 and axes.shape[0] is not None:
        axis_list = [StridedSlice(scope, axes, [i], [i + 1], [1], shrink_axis_mask=1)
                     for i in range(axes.shape[0])]
    else:
        raise InvalidArgumentError(
            f"Prod '{op.name}': its gradient needs the number of reduction indices when the "
            f"graph is built; input 'reduction_indices' has shape {axes.shape}")
    partial, others = x, None
    for axis in reversed(axis_list):
        term = _exclusive_product(scope, partial, axis)
        others = term if others is None else Mul(scope, others, term)
        partial = Prod(scope, partial, axis, keep_dims=True)
    grad = sum_grad_of(scope, op, grads[0])
    return [grad if others is None else Mul(scope, grad, others), None]


@RegisterGradient("Cumsum")
def _cumsum_grad(scope, op, grads):
    """Each input element feeds the outputs after it (before it, reverse): the cotangent
    summed the other way."""
    attrs = op.attrs
    return [Cumsum(scope, grads[0], op.inputs[1], exclusive=attrs["exclusive"],
                   reverse=not attrs["reverse"]), None]


@RegisterGradient("Cumprod")
def _cumprod_grad(scope, op, grads):
    """TF's formula: cumsum(cumprod(x) * g, the other way) / x, with 0 where x = 0 (where
    it is wrong, as TF's is)."""
    x, axis = op.inputs
    attrs = op.attrs
    product = Cumprod(scope, x, axis, exclusive=attrs["exclusive"], reverse=attrs["reverse"])
    total = Cumsum(scope, Mul(scope, product, grads[0]), axis, exclusive=attrs["exclusive"],
                   reverse=not attrs["reverse"])
    return [DivNoNan(scope, total, x), None]


@RegisterGradient("EuclideanNorm")
def _euclidean_norm_grad(scope, op, grads):
    """n = sqrt(sum(x^2)): dx = x / (n / g), n and g broadcast back over the reduced axes
    (TF's form: 0 / 0 is NaN where the norm is 0, as in TF)."""
    x = op.inputs[0]
    return [RealDiv(scope, x, RealDiv(scope, sum_grad_of(scope, op, op.outputs[0]),
                                      sum_grad_of(scope, op, grads[0]))), None]


@RegisterGradient("CumulativeLogsumexp")
def _cumulative_logsumexp_grad(scope, op, grads):
    """TF's form: the cotangent split into its positive and negative parts, each carried in
    log space through the opposite-direction scan: dx = exp(clse(log g+ - out) + x) -
    exp(clse(log g- - out) + x), clse running the other way."""
    x, axis = op.inputs
    g, out = grads[0], op.outputs[0]
    lowest = Const(scope, np.array(np.finfo(x.dtype.np_dtype).min, x.dtype.np_dtype))
    zero = ZerosLike(scope, g)

    def part(mask, magnitude):
        logs = SelectV2(scope, mask, Log(scope, SelectV2(scope, mask, magnitude,
                                                         OnesLike(scope, g))), lowest)
        scanned = CumulativeLogsumexp(scope, Sub(scope, logs, out), axis,
                                      exclusive=op.attrs["exclusive"],
                                      reverse=not op.attrs["reverse"])
        return Exp(scope, AddV2(scope, scanned, x))

    return [Sub(scope, part(Greater(scope, g, zero), g), part(Less(scope, g, zero),
                                                               Neg(scope, g))), None]
