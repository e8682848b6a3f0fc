"""Activation ops and their gradients (TF's names, inputs, outputs, attrs and dtypes):

* ``Relu``: ``max(features, 0)``; ``ReluGrad``: ``gradients * (features > 0)``;
* ``Relu6``: ``min(max(features, 0), 6)``; ``Relu6Grad``:
  ``gradients * (0 < features < 6)``;
* ``Sigmoid``: ``1 / (1 + exp(-x))``; ``SigmoidGrad(y, dy)``: ``dy * y * (1 - y)``;
* ``Tanh``; ``TanhGrad(y, dy)``: ``dy * (1 - y * y)``;
* ``Elu``: ``x < 0 ? exp(x) - 1 : x``; ``EluGrad(gradients, outputs)``:
  ``outputs < 0 ? gradients * (outputs + 1) : gradients``;
* ``Selu``: ``scale * (x < 0 ? alpha * (exp(x) - 1) : x)`` (Klambauer et al., 2017);
  ``SeluGrad(gradients, outputs)``: ``outputs < 0 ? gradients * (outputs + scale * alpha) :
  gradients * scale``;
* ``LeakyRelu`` (attr ``alpha``, default 0.2): ``features > 0 ? features : features * alpha``;
  ``LeakyReluGrad``: ``features > 0 ? gradients : gradients * alpha``;
* ``Softplus``: ``log(1 + exp(features))``; ``SoftplusGrad``:
  ``gradients / (1 + exp(-features))``;
* ``Softsign``: ``features / (1 + |features|)``; ``SoftsignGrad``:
  ``gradients / (1 + |features|)^2``.

Relu and Relu6 (and their gradients) take integers too; the others only the float types,
as TF. NaN features propagate; gradients are multiplied by their masks or factors as in TensorFlow,
so an infinite or NaN gradient where the factor is 0 gives NaN. The gradients (TF's
``nn_grad.py`` and ``math_grad.py`` formulas, each differentiable again) are at the bottom.
"""

from __future__ import annotations

from collections.abc import Callable

from minigraph.framework import dtypes
from minigraph.framework.gradient_registry import RegisterGradient
from minigraph.framework.op_def import (
    ArgDef,
    AttrDef,
    InferenceContext,
    OpDef,
    make_wrapper,
    register_op,
    required,
)
from minigraph.framework.tensor_shape import TensorShape
from minigraph.ops.array_ops import Const
from minigraph.ops.elementwise_ops import Less, SelectV2
from minigraph.ops.math_ops import NUMBERS, Mul, Neg, OnesLike, Sub, ZerosLike

FLOATS = dtypes.FLOATING

# The wrappers minigraph.ops exports.
__all__ = [
    "Elu", "EluGrad", "LeakyRelu", "LeakyReluGrad", "Relu", "Relu6", "Relu6Grad", "ReluGrad",
    "Selu", "SeluGrad", "Sigmoid", "SigmoidGrad", "Softplus", "SoftplusGrad", "Softsign",
    "SoftsignGrad", "Tanh", "TanhGrad",
]

# SELU's constants (Klambauer et al., 2017), to the digits TensorFlow writes them: the
# kernels round them to the tensor's type, as TF's do.
SELU_SCALE = 1.0507009873554804934193349852946
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE_ALPHA = 1.7580993408473768599402175208123

# ----------------------------------------------------------------------------- definitions


def _same_shapes(first: str, second: str) -> Callable[[InferenceContext], list[TensorShape]]:
    """The shape function of a gradient whose two inputs must have one shape (TF's
    ``MergeBothInputsShapeFn``)."""
    def shape_fn(ctx: InferenceContext) -> list[TensorShape]:
        a, b = ctx.input_shape(first), ctx.input_shape(second)
        return [ctx.merge_shapes(a, b, f"inputs '{first}' and '{second}' must have the same "
                                       f"shape, got {a} and {b}")]
    return shape_fn


def _same_size(ctx: InferenceContext) -> list[TensorShape]:
    """SigmoidGrad's and TanhGrad's: y's shape; dy may be shaped otherwise but must hold as
    many elements (TF's cwise check, made here as soon as both sizes are known)."""
    y, dy = ctx.input_shapes
    size_y, size_dy = y.num_elements(), dy.num_elements()
    if size_y is not None and size_dy is not None and size_y != size_dy:
        raise ctx.error(f"The two arguments to a cwise op must have same number of elements, "
                        f"got {size_y} and {size_dy}: inputs 'y' {y} and 'dy' {dy}")
    return [y]


def _type_attr(allowed: tuple, default_float32: bool) -> AttrDef:
    """The ``T`` attr; LeakyRelu(Grad)'s has a default in TF (float32), the others none."""
    if default_float32:
        return AttrDef("T", "type", default=dtypes.float32, allowed=allowed)
    return required("T", "type", allowed=allowed)


def _activation(name: str, allowed: tuple = FLOATS, names: tuple[str, str] = (
        "features", "activations"), attrs: tuple[AttrDef, ...] = (),
        default_float32: bool = False) -> OpDef:
    """An elementwise activation: input -> output of the same shape, named ``names``
    (``features`` -> ``activations``, or Sigmoid's and Tanh's ``x`` -> ``y``)."""
    return register_op(OpDef(
        name=name,
        inputs=[ArgDef(names[0], type_attr="T")],
        outputs=[ArgDef(names[1], type_attr="T")],
        attrs=[*attrs, _type_attr(allowed, default_float32)],
        shape_fn=lambda ctx: [ctx.input_shapes[0]],
    ))


def _activation_grad(name: str, allowed: tuple = FLOATS, second: str = "features",
                     attrs: tuple[AttrDef, ...] = (), default_float32: bool = False) -> OpDef:
    """Its gradient: (``gradients``, ``second``) of one shape -> ``backprops``."""
    return register_op(OpDef(
        name=name,
        inputs=[ArgDef("gradients", type_attr="T"), ArgDef(second, type_attr="T")],
        outputs=[ArgDef("backprops", type_attr="T")],
        attrs=[*attrs, _type_attr(allowed, default_float32)],
        shape_fn=_same_shapes("gradients", second),
    ))


def _output_grad(name: str) -> OpDef:
    """SigmoidGrad, TanhGrad: (``y``, ``dy``) -> ``z``, the gradient from the output y."""
    return register_op(OpDef(
        name=name,
        inputs=[ArgDef("y", type_attr="T"), ArgDef("dy", type_attr="T")],
        outputs=[ArgDef("z", type_attr="T")],
        attrs=[required("T", "type", allowed=FLOATS)],
        shape_fn=_same_size,
    ))


ALPHA = AttrDef("alpha", "float", default=0.2,
                doc="The slope for negative features (stored as float32, as TF's attr).")

Relu = make_wrapper(_activation("Relu", NUMBERS))
ReluGrad = make_wrapper(_activation_grad("ReluGrad", NUMBERS))
Relu6 = make_wrapper(_activation("Relu6", NUMBERS))
Relu6Grad = make_wrapper(_activation_grad("Relu6Grad", NUMBERS))
Sigmoid = make_wrapper(_activation("Sigmoid", names=("x", "y")))
SigmoidGrad = make_wrapper(_output_grad("SigmoidGrad"))
Tanh = make_wrapper(_activation("Tanh", names=("x", "y")))
TanhGrad = make_wrapper(_output_grad("TanhGrad"))
Elu = make_wrapper(_activation("Elu"))
EluGrad = make_wrapper(_activation_grad("EluGrad", second="outputs"))
Selu = make_wrapper(_activation("Selu"))
SeluGrad = make_wrapper(_activation_grad("SeluGrad", second="outputs"))
LeakyRelu = make_wrapper(_activation("LeakyRelu", attrs=(ALPHA,), default_float32=True))
LeakyReluGrad = make_wrapper(_activation_grad("LeakyReluGrad", attrs=(ALPHA,),
                                              default_float32=True))
Softplus = make_wrapper(_activation("Softplus"))
SoftplusGrad = make_wrapper(_activation_grad("SoftplusGrad"))
Softsign = make_wrapper(_activation("Softsign"))
SoftsignGrad = make_wrapper(_activation_grad("SoftsignGrad"))


# ----------------------------------------------------------------------------- gradients


@RegisterGradient("Relu")
def _relu_grad(scope, op, grads):
    return [ReluGrad(scope, grads[0], op.outputs[0])]


@RegisterGradient("ReluGrad")
def _relu_grad_grad(scope, op, grads):
    """Linear in 'gradients' with the same mask; zero (None) almost everywhere in features."""
    return [ReluGrad(scope, grads[0], op.inputs[1]), None]


@RegisterGradient("Relu6")
def _relu6_grad(scope, op, grads):
    """The mask from the output, as TF: 0 < min(max(x, 0), 6) < 6 iff 0 < x < 6."""
    return [Relu6Grad(scope, grads[0], op.outputs[0])]


@RegisterGradient("Relu6Grad")
def _relu6_grad_grad(scope, op, grads):
    return [Relu6Grad(scope, grads[0], op.inputs[1]), None]




@RegisterGradient("Sigmoid")
def _sigmoid_grad(scope, op, grads):
    """From the output, as TF: dy * y * (1 - y)."""
    return [SigmoidGrad(scope, op.outputs[0], grads[0])]


@RegisterGradient("SigmoidGrad")
def _sigmoid_grad_grad(scope, op, grads):
    """z = dy * y * (1 - y): dz/dy = dy * (1 - 2y), dz/d(dy) = y * (1 - y) (TF's
    ``gb - 2 gb y`` with gb = g * dy, and SigmoidGrad(y, g))."""
    y, dy = op.inputs
    gb = Mul(scope, grads[0], dy)
    two = Const(scope, 2.0, y.dtype)
    return [Sub(scope, gb, Mul(scope, Mul(scope, two, gb), y)), SigmoidGrad(scope, y, grads[0])]


@RegisterGradient("Tanh")
def _tanh_grad(scope, op, grads):
    """From the output, as TF: dy * (1 - y^2)."""
    return [TanhGrad(scope, op.outputs[0], grads[0])]


@RegisterGradient("TanhGrad")
def _tanh_grad_grad(scope, op, grads):
    """z = dy * (1 - y^2): dz/dy = -2 dy y, dz/d(dy) = 1 - y^2 (TF's formulas)."""
    y, dy = op.inputs
    minus_two = Const(scope, -2.0, y.dtype)
    return [Mul(scope, Mul(scope, Mul(scope, grads[0], minus_two), dy), y),
            TanhGrad(scope, y, grads[0])]


def _where_negative(scope, value, outputs):
    """``value`` where ``outputs < 0``, else a zero (TF's ``where``: a selection, so an
    infinite ``value`` elsewhere still gives 0)."""
    negative = Less(scope, outputs, Const(scope, 0, outputs.dtype))
    return SelectV2(scope, negative, value, ZerosLike(scope, value))


@RegisterGradient("Elu")
def _elu_grad(scope, op, grads):
    """From the output, as TF: g * (y + 1) where y < 0, else g."""
    return [EluGrad(scope, grads[0], op.outputs[0])]


@RegisterGradient("EluGrad")
def _elu_grad_grad(scope, op, grads):
    """backprops = gradients * (outputs + 1) where outputs < 0, else gradients: linear in
    gradients; d/d(outputs) = gradients where outputs < 0."""
    gradients, outputs = op.inputs
    return [EluGrad(scope, grads[0], outputs),
            _where_negative(scope, Mul(scope, grads[0], gradients), outputs)]


@RegisterGradient("Selu")
def _selu_grad(scope, op, grads):
    return [SeluGrad(scope, grads[0], op.outputs[0])]


@RegisterGradient("SeluGrad")
def _selu_grad_grad(scope, op, grads):
    """As EluGrad's: linear in gradients; d/d(outputs) = gradients where outputs < 0."""
    gradients, outputs = op.inputs
    return [SeluGrad(scope, grads[0], outputs),
            _where_negative(scope, Mul(scope, grads[0], gradients), outputs)]


@RegisterGradient("LeakyRelu")
def _leaky_relu_grad(scope, op, grads):
    return [LeakyReluGrad(scope, grads[0], op.inputs[0], alpha=op.attrs["alpha"])]


@RegisterGradient("LeakyReluGrad")
def _leaky_relu_grad_grad(scope, op, grads):
    """Linear in gradients with the same factors; zero (None) almost everywhere in
    features."""
    return [LeakyReluGrad(scope, grads[0], op.inputs[1], alpha=op.attrs["alpha"]), None]


@RegisterGradient("Softplus")
def _softplus_grad(scope, op, grads):
    """g * sigmoid(features), as TF."""
    return [Mul(scope, grads[0], Sigmoid(scope, op.inputs[0]))]


@RegisterGradient("SoftplusGrad")
def _softplus_grad_grad(scope, op, grads):
    """backprops = gradients * sigmoid(x): d/d(gradients) = SoftplusGrad(g, x); d/dx =
    g * gradients * sigmoid'(x), TF's ``g * dy / (exp(-x) + 2 + exp(x))`` written as
    SigmoidGrad(sigmoid(x), g * dy), which no exp overflows."""
    gradients, x = op.inputs
    return [SoftplusGrad(scope, grads[0], x),
            SigmoidGrad(scope, Sigmoid(scope, x), Mul(scope, grads[0], gradients))]


@RegisterGradient("Softsign")
def _softsign_grad(scope, op, grads):
    return [SoftsignGrad(scope, grads[0], op.inputs[0])]


@RegisterGradient("SoftsignGrad")
def _softsign_grad_grad(scope, op, grads):
    """backprops = gradients / (1 + |x|)^2 (TF registers no gradient for it; minigraph
    does): d/d(gradients) = SoftsignGrad(g, x); d/dx = -2 g gradients sign(x) / (1 + |x|)^3,
    with sign(x) / (1 + |x|) = sign(x) - softsign(x), so
    SoftsignGrad(sign(x) - softsign(x), x) * (-2 g gradients); sign(x) = (x > 0) - (x < 0)
    from ReluGrad masks (0 at 0, the mean of the two one-sided derivatives)."""
    gradients, x = op.inputs
    ones = OnesLike(scope, x)
    sign = Sub(scope, ReluGrad(scope, ones, x), ReluGrad(scope, ones, Neg(scope, x)))
    cubed = SoftsignGrad(scope, Sub(scope, sign, Softsign(scope, x)), x)
    scale = Mul(scope, Const(scope, -2.0, x.dtype), Mul(scope, grads[0], gradients))
    return [SoftsignGrad(scope, grads[0], x), Mul(scope, scale, cubed)]
