"""Internal fused training ops, formed by the remapper (``minigraph/optimizer/``), never by
user code: each computes what a chain of ordinary ops computes, bit for bit on the backend
that runs it, in one kernel call (one trip through memory instead of one per op).

* ``_FusedBatchNormEx`` (TensorFlow's op, its definition: ``tests/test_tf_interop.py``
  compares it): ``FusedBatchNormV3 -> [AddV2 side input] -> [Relu]``; ``y`` is
  ``activation(bn(x) + side_input)``, the statistics outputs are FusedBatchNormV3's.
* ``_FusedBatchNormGradEx`` (TensorFlow's op): ``ReluGrad -> FusedBatchNormGradV3``, the Relu
  mask taken from the forward's saved output ``y`` (as ReluGrad takes it from the Relu's
  output); ``side_input_backprop`` is the masked gradient, which is what the side input's
  ``AddV2`` passes back. ``offset`` is read by TF's GPU kernel only; here it is unread.

* ``_FusedAddBatchNormGradEx`` (minigraph's own): ``AddN(y_backprop, y_backprop_addend) ->
  _FusedBatchNormGradEx``: a residual network's gradient at a block's output (the sum of
  what its readers pass back) masked and back through the batch norm without AddN's pass
  over memory; ``_FusedBatchNormGradEx``'s inputs, then the addend.
* ``_FusedReluMaxPool`` (minigraph's own): ``Relu -> MaxPool``; outputs the pool and the
  Relu's output (which the backward reads).
* ``_FusedMaxPoolGradReluGrad`` (minigraph's own): ``MaxPoolGrad -> ReluGrad`` where the
  pool's input is the Relu output whose mask ReluGrad applies.
* ``_FusedApplyGradientDescent``, ``_FusedApplyMomentum``, ``_FusedApplyAdam`` (minigraph's
  own): every ``ApplyGradientDescent`` / ``ApplyMomentum`` / ``ApplyAdam`` of a step in one
  op, each input of the single op a list of ``N`` tensors (variable ``k`` is updated by the
  single op's formula with the ``k``-th entries), the outputs the ``N`` updated variables.
* ``_FusedAssign`` (minigraph's own): ``N`` ``Assign`` nodes of a step in one op, the same
  layout (``ref`` and ``value`` lists; a batch norm's moving averages).

TensorFlow forms its ``_FusedBatchNormEx`` and ``_FusedBatchNormGradEx`` on GPU and oneDNN
only; on CPU these run the native kernels of ``backends/fused_training_kernels.py``.
"""

from __future__ import annotations

import copy

import numpy as np

from minigraph.framework import dtypes
from minigraph.framework.op_def import (
    ArgDef,
    AttrDef,
    InferenceContext,
    OpDef,
    RunContext,
    make_wrapper,
    register_op,
    required,
)
from minigraph.framework.tensor_shape import TensorShape, dims_text
from minigraph.ops import state_ops, training_ops
from minigraph.ops.batch_norm import (
    FORMATS_2D,
    HALF_TYPES,
    fused_batch_norm_grad_shape,
    fused_batch_norm_shape,
    validate_fused_batch_norm,
    validate_fused_batch_norm_grad,
)
from minigraph.ops.pooling_ops import MaxPool, MaxPoolGrad, max_pool_grad_shape, pool_shape

# Internal ops: not exported as minigraph.ops wrappers (the remapper builds them).
__all__: list[str] = []

ACTIVATIONS = ("Identity", "Relu")  # the activation_mode values these kernels compute


def _side_inputs(value: int) -> str | None:
    return None if value in (0, 1) else f"must be 0 or 1 (at most one side input), got {value}"


def _ex_attrs() -> list[AttrDef]:
    return [
        AttrDef("num_side_inputs", "int", default=0, check=_side_inputs,
                doc="1: a tensor of x's shape is added before the activation; 0: none."),
        AttrDef("activation_mode", "string", default="Identity", allowed=ACTIVATIONS,
                doc="The activation applied last: Identity (none) or Relu."),
    ]


def _same_shapes(ctx: InferenceContext, shape: TensorShape, first: int, count: int,
                 what: str) -> TensorShape:
    """``shape`` merged with the shapes of the flat inputs [first, first + count)."""
    for index in range(first, first + count):
        other = ctx.input_shapes[index]
        shape = ctx.merge_shapes(shape, other, f"input '{what}' must have x's shape {shape}, "
                                               f"got {other}")
    return shape


def _fused_batch_norm_ex_shape(ctx: InferenceContext) -> list[TensorShape]:
    shapes = fused_batch_norm_shape(ctx)
    first = ctx.op_def.input_index("side_input", ctx.attrs)
    shapes[0] = _same_shapes(ctx, shapes[0], first, ctx.attrs["num_side_inputs"], "side_input")
    return shapes


def _fused_batch_norm_grad_ex_shape(ctx: InferenceContext) -> list[TensorShape]:
    shapes = fused_batch_norm_grad_shape(ctx)
    ctx.with_rank("offset", 1)
    y = ctx.op_def.input_index("y", ctx.attrs)
    dx = _same_shapes(ctx, shapes[0], y, 1, "y")
    return [dx] + shapes[1:] + [dx] * ctx.attrs["num_side_inputs"]


def _check_like_x(ctx: RunContext, name: str, values: list[np.ndarray], x: np.ndarray) -> None:
    for value in values:
        if value.shape != x.shape:
            raise ctx.error(f"input '{name}' must have x's shape {dims_text(x.shape)}, got "
                            f"{dims_text(value.shape)}")


def _validate_ex(ctx: RunContext, values: list[np.ndarray]) -> None:
    validate_fused_batch_norm(ctx, values[:5])
    _check_like_x(ctx, "side_input", values[5:], values[0])


def _validate_grad_ex(ctx: RunContext, values: list[np.ndarray]) -> None:
    validate_fused_batch_norm_grad(ctx, values[:5])
    _check_like_x(ctx, "y", values[7:8], values[1])


_VECTORS = ("scale", "offset", "mean", "variance")

FUSED_BATCH_NORM_EX = register_op(OpDef(
    name="_FusedBatchNormEx",
    inputs=[ArgDef("x", type_attr="T", doc="The tensor to normalize.")]
    + [ArgDef(n, type_attr="U", doc=f"FusedBatchNormV3's {n}.") for n in _VECTORS]
    + [ArgDef("side_input", type_attr="T", number_attr="num_side_inputs",
              doc="Added to the normalized x before the activation (x's shape).")],
    outputs=[ArgDef("y", type_attr="T", doc="activation(normalized x + side_input).")]
    + [ArgDef(n, type_attr="U", doc=f"FusedBatchNormV3's {n}.")
       for n in ("batch_mean", "batch_variance", "reserve_space_1", "reserve_space_2",
                 "reserve_space_3")],
    attrs=[required("T", "type", allowed=HALF_TYPES),
           required("U", "type", allowed=(dtypes.float32,)),
           AttrDef("epsilon", "float", default=0.0001, doc="FusedBatchNormV3's epsilon."),
           AttrDef("exponential_avg_factor", "float", default=1.0,
                   doc="FusedBatchNormV3's exponential_avg_factor."),
           *_ex_attrs(),
           AttrDef("data_format", "string", default="NHWC", allowed=FORMATS_2D,
                   doc="The layout of x."),
           AttrDef("is_training", "bool", default=True, doc="FusedBatchNormV3's is_training.")],
    shape_fn=_fused_batch_norm_ex_shape,
    validate=_validate_ex,
))

FUSED_BATCH_NORM_GRAD_EX = register_op(OpDef(
    name="_FusedBatchNormGradEx",
    inputs=[ArgDef("y_backprop", type_attr="T", doc="The gradient with respect to y."),
            ArgDef("x", type_attr="T", doc="The forward op's x."),
            ArgDef("scale", dtype=dtypes.float32, doc="The forward op's scale."),
            ArgDef("reserve_space_1", type_attr="U", doc="The forward's batch mean."),
            ArgDef("reserve_space_2", type_attr="U", doc="The forward's biased variance."),
            ArgDef("reserve_space_3", type_attr="U", doc="Ignored."),
            ArgDef("offset", dtype=dtypes.float32, doc="The forward op's offset (unread)."),
            ArgDef("y", type_attr="T", doc="The forward op's y: the Relu mask is y > 0.")],
    outputs=[ArgDef("x_backprop", type_attr="T", doc="The gradient with respect to x."),
             ArgDef("scale_backprop", type_attr="U", doc="The gradient w.r.t. scale."),
             ArgDef("offset_backprop", type_attr="U", doc="The gradient w.r.t. offset."),
             ArgDef("reserve_space_4", type_attr="U", doc="Empty, never read."),
             ArgDef("reserve_space_5", type_attr="U", doc="Empty, never read."),
             ArgDef("side_input_backprop", type_attr="T", number_attr="num_side_inputs",
                    doc="The gradient with respect to the side input (the masked y_backprop).")],
    attrs=[required("T", "type", allowed=HALF_TYPES),
           required("U", "type", allowed=(dtypes.float32,)),
           AttrDef("epsilon", "float", default=0.0001, doc="The forward op's epsilon."),
           *_ex_attrs(),
           AttrDef("data_format", "string", default="NHWC", allowed=FORMATS_2D,
                   doc="The layout of x."),
           AttrDef("is_training", "bool", default=True, doc="The forward op's is_training.")],
    shape_fn=_fused_batch_norm_grad_ex_shape,
    validate=_validate_grad_ex,
))



def _add_grad_ex_shape(ctx: InferenceContext) -> list[TensorShape]:
    """_FusedBatchNormGradEx's shapes, the addend of x's shape."""
    shapes = _fused_batch_norm_grad_ex_shape(ctx)
    addend = ctx.op_def.input_index("y_backprop_addend", ctx.attrs)
    dx = _same_shapes(ctx, shapes[0], addend, 1, "y_backprop_addend")
    return [dx, *shapes[1:5]] + [dx] * ctx.attrs["num_side_inputs"]


def _validate_add_grad_ex(ctx: RunContext, values: list[np.ndarray]) -> None:
    _validate_grad_ex(ctx, values[:8])
    _check_like_x(ctx, "y_backprop_addend", values[8:], values[1])


FUSED_ADD_BATCH_NORM_GRAD_EX = register_op(OpDef(
    name="_FusedAddBatchNormGradEx",
    inputs=[*FUSED_BATCH_NORM_GRAD_EX.inputs,
            ArgDef("y_backprop_addend", type_attr="T",
                   doc="Added to y_backprop first (AddN's sum, in that order).")],
    outputs=list(FUSED_BATCH_NORM_GRAD_EX.outputs),
    attrs=list(FUSED_BATCH_NORM_GRAD_EX.attrs),
    shape_fn=_add_grad_ex_shape,
    validate=_validate_add_grad_ex,
))

FusedBatchNormEx = make_wrapper(FUSED_BATCH_NORM_EX)
FusedBatchNormGradEx = make_wrapper(FUSED_BATCH_NORM_GRAD_EX)
FusedAddBatchNormGradEx = make_wrapper(FUSED_ADD_BATCH_NORM_GRAD_EX)


# ----------------------------------------------------------------------------- update lists


def _at_least_one(value: int) -> str | None:
    return None if value >= 1 else f"must be at least 1, got {value}"


def _update_list_shape(single: OpDef):
    """The single op's shape function run for each variable k on the k-th inputs."""
    def shape_fn(ctx: InferenceContext) -> list[TensorShape]:
        count = ctx.attrs["N"]
        attrs = {name: value for name, value in ctx.attrs.items() if name != "N"}
        shapes = []
        for k in range(count):
            sub = copy.copy(ctx)
            picked = [k + i * count for i in range(len(single.inputs))]
            sub.op_def, sub.attrs = single, attrs
            sub.inputs = [ctx.inputs[i] for i in picked]
            sub.input_shapes = [ctx.input_shapes[i] for i in picked]
            shapes += single.shape_fn(sub)
        return shapes

    return shape_fn


def _update_list_op(single: OpDef) -> OpDef:
    """``_Fused<single>``: ``single`` over lists of N variables (every input a list)."""
    name = single.name
    return register_op(OpDef(
        name=f"_Fused{name}",
        inputs=[ArgDef(arg.name, type_attr="T", is_ref=arg.is_ref, number_attr="N",
                       doc=f"{name}'s {arg.name}, one per variable.") for arg in single.inputs],
        outputs=[ArgDef("out", type_attr="T", number_attr="N",
                        doc="The updated variables.")],
        attrs=[*single.attrs, AttrDef("N", "int", default=1, check=_at_least_one,
                                      doc="How many variables are updated.")],
        shape_fn=_update_list_shape(single),
        is_stateful=True,
    ))


FUSED_UPDATES = {op_def.name: _update_list_op(op_def) for op_def in (
    training_ops.ApplyGradientDescent.op_def, training_ops.ApplyMomentum.op_def,
    training_ops.ApplyAdam.op_def, state_ops.Assign.op_def)}


# ----------------------------------------------------------------------------- Relu and max pool


def _relu_max_pool_shape(ctx: InferenceContext) -> list[TensorShape]:
    """(the pool's shape, the input's shape): MaxPool's shape function, and the Relu's."""
    return [*pool_shape(ctx), ctx.input_shape("input")]


FUSED_RELU_MAX_POOL = register_op(OpDef(
    name="_FusedReluMaxPool",
    inputs=[ArgDef("input", type_attr="T", doc="The Relu's input.")],
    outputs=[ArgDef("output", type_attr="T", doc="MaxPool(Relu(input))."),
             ArgDef("activation", type_attr="T",
                    doc="Relu(input), which the backward and other readers see.")],
    attrs=list(MaxPool.op_def.attrs),
    shape_fn=_relu_max_pool_shape,
))

FUSED_MAX_POOL_GRAD_RELU_GRAD = register_op(OpDef(
    name="_FusedMaxPoolGradReluGrad",
    inputs=[ArgDef("orig_input", type_attr="T", doc="The pool's input: a Relu's output, "
                                                    "whose mask (> 0) ReluGrad applies."),
            ArgDef("orig_output", type_attr="T", doc="The pool's output."),
            ArgDef("grad", type_attr="T", doc="The gradient with respect to the pool's "
                                             "output.")],
    outputs=[ArgDef("output", type_attr="T",
                    doc="ReluGrad(MaxPoolGrad(orig_input, orig_output, grad), orig_input).")],
    attrs=list(MaxPoolGrad.op_def.attrs),
    shape_fn=max_pool_grad_shape,
))
