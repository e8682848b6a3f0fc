"""AddSymbolicGradients: graph structure, TF's autodiff semantics (docs/tf-semantics.md#autodiff),
the second-order op, half types.

Expected values come from the float64 formulas in ``conftest``
(docs/tf-semantics.md#gradient-formulas), from
float64 central finite differences of those formulas, or from the ``"float64"`` backend.
Whole-gradient checks of every op against finite differences live in
``test_gradient_checker.py``; TensorFlow comparisons in ``test_tf_oracle_gradients.py``.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from conftest import (
    BF16,
    F64,
    assert_close,
    fused_bn_forward_f64,
    fused_bn_grad_f64,
    random_case,
    run,
    x_shape,
)

import minigraph as mg
from minigraph import ops
from minigraph.backends.registry import register_kernel
from minigraph.framework.op_def import ArgDef, OpDef, make_wrapper, register_op, required
from minigraph.framework.tensor_shape import TensorShape

InvalidArgumentError = mg.errors.InvalidArgumentError
NotFoundError = mg.errors.NotFoundError

FORMATS = ("NHWC", "NCHW", "NDHWC", "NCDHW")
EPSILON = 0.003
MODES = [True, False]
MODE_IDS = ["train", "infer"]


def shape_of(data_format: str) -> tuple[int, ...]:
    spatial = (2, 3) if len(data_format) == 4 else (2, 1, 3)
    return x_shape(data_format, 2, spatial, 3)


def axes_of(tensor: mg.Output) -> list[int]:
    return list(range(tensor.shape.rank))


def total(scope, tensor, weights=None):
    """sum(tensor) or sum(tensor * weights)."""
    if weights is not None:
        tensor = ops.Mul(scope, tensor, weights)
    return ops.Sum(scope, tensor, axes_of(tensor))


class Net:
    """One FusedBatchNorm* layer on placeholders x, scale, offset with Const mean/variance."""

    def __init__(self, data_format="NHWC", is_training=True, dtype=mg.float32,
                 op=ops.FusedBatchNormV3, seed=0, **attrs):
        self.scope = mg.Scope.NewRootScope()
        self.graph = self.scope.graph()
        self.rng = np.random.default_rng(seed)
        self.shape = shape_of(data_format)
        s = self.scope
        x_value, scale, offset, mean, variance = random_case(
            self.rng, self.shape, data_format, dtype.np_dtype)
        self.x = ops.Placeholder(s.WithOpName("x"), dtype, shape=self.shape)
        self.scale = ops.Placeholder(s.WithOpName("scale"), mg.float32, shape=[3])
        self.offset = ops.Placeholder(s.WithOpName("offset"), mg.float32, shape=[3])
        self.mean, self.variance = ops.Const(s, mean), ops.Const(s, variance)
        self.mean_value, self.variance_value = mean, variance
        self.bn = op(s, self.x, self.scale, self.offset, self.mean, self.variance,
                     epsilon=EPSILON, data_format=data_format, is_training=is_training, **attrs)
        self.feeds = {self.x: x_value, self.scale: scale, self.offset: offset}
        self.data_format, self.is_training = data_format, is_training

    def const(self, shape=None, dtype=np.float32):
        return ops.Const(self.scope, self.rng.normal(size=shape or self.shape).astype(dtype))

    def run(self, fetches, backend="reference", feeds=None):
        return run(self.scope, fetches, {**self.feeds, **(feeds or {})}, backend)

    def new_ops(self, since: int) -> list[mg.Operation]:
        return self.graph.operations()[since:]

    def ops_of_type(self, op_type: str) -> list[mg.Operation]:
        return [op for op in self.graph.operations() if op.type == op_type]


# ============================================================================ first order: graph


@pytest.mark.parametrize("is_training", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("data_format", FORMATS)
def test_first_order_is_one_grad_node_wired_like_tf(data_format, is_training):
    net = Net(data_format, is_training)
    before = len(net.graph)
    grads = mg.AddSymbolicGradients(net.scope, [net.bn.y],
                                    [net.x, net.scale, net.offset, net.mean, net.variance])
    new = net.new_ops(before)
    assert all(op.name.startswith("gradients/") for op in new), [op.name for op in new]
    (grad,) = net.ops_of_type("FusedBatchNormGradV3")
    forward = net.bn.operation
    seed = grad.inputs[0]
    assert seed.op.type == "OnesLike" and seed.op.inputs[0] is net.bn.y
    assert grad.inputs[1] is net.x and grad.inputs[2] is net.scale
    if is_training:  # the forward's saved batch statistics
        assert grad.inputs[3] is net.bn.reserve_space_1
        assert grad.inputs[4] is net.bn.reserve_space_2
    else:  # the population statistics the forward normalized with
        assert grad.inputs[3] is net.mean and grad.inputs[4] is net.variance
    assert grad.inputs[5] is net.bn.reserve_space_3
    for attr in ("epsilon", "data_format", "is_training"):
        assert grad.attrs[attr] == forward.attrs[attr], attr
    assert grad.attrs["T"] is mg.float32
    assert grads[:3] == list(grad.outputs[:3])
    # docs/tf-semantics.md#autodiff-first-order: no gradient for mean and variance, even in
    # inference where y depends on them
    assert grads[3] is None and grads[4] is None
    # only the seed and the grad op: no decomposed math
    assert sorted(op.type for op in new) == ["FusedBatchNormGradV3", "OnesLike"]


@pytest.mark.parametrize("op", [ops.FusedBatchNorm, ops.FusedBatchNormV2], ids=["V1", "V2"])
@pytest.mark.parametrize("is_training", MODES, ids=MODE_IDS)
def test_first_order_of_v1_v2_uses_grad_v3_with_empty_reserve_space_3(op, is_training):
    net = Net("NCHW", is_training, op=op)
    grads = mg.AddSymbolicGradients(net.scope, [net.bn.y], [net.x, net.scale, net.offset])
    (grad,) = net.ops_of_type("FusedBatchNormGradV3")
    reserve_space_3 = grad.inputs[5]
    assert reserve_space_3.op.type == "Const" and reserve_space_3.op.name.startswith("gradients/")
    assert reserve_space_3.dtype is mg.float32 and reserve_space_3.shape == (0,)
    assert grad.inputs[3] is (net.bn.reserve_space_1 if is_training else net.mean)
    assert grad.attrs["data_format"] == "NCHW" and grad.attrs["is_training"] is is_training
    assert grads == list(grad.outputs[:3])


def test_second_call_gets_a_fresh_gradients_scope():
    net = Net()
    mg.AddSymbolicGradients(net.scope, [net.bn.y], [net.x])
    before = len(net.graph)
    mg.AddSymbolicGradients(net.scope, [net.bn.y], [net.x])
    assert {op.name.split("/")[0] for op in net.new_ops(before)} == {"gradients_1"}
    sub = net.scope.NewSubScope("layer")
    before = len(net.graph)
    mg.AddSymbolicGradients(sub, [net.bn.y], [net.x])
    assert all(op.name.startswith("layer/gradients/") for op in net.new_ops(before))


# ============================================================================ first order: values


@pytest.mark.parametrize("is_training", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("data_format", FORMATS)
def test_explicit_grad_inputs_give_tf_first_order(data_format, is_training, backend):
    """grad_inputs is y's cotangent: the result is FusedBatchNormGradV3's formula
    (docs/tf-semantics.md#gradient-formulas) fed
    with the batch statistics (training) or the population statistics (inference)."""
    net = Net(data_format, is_training, seed=1)
    dy_value = net.rng.normal(size=net.shape).astype(np.float32)
    dy = ops.Placeholder(net.scope.WithOpName("dy"), mg.float32, shape=net.shape)
    grads = mg.AddSymbolicGradients(net.scope, [net.bn.y], [net.x, net.scale, net.offset], [dy])
    assert grads[0].op.inputs[0] is dy
    actual = net.run(grads, backend, {dy: dy_value})
    x, scale = net.feeds[net.x], net.feeds[net.scale]
    forward = fused_bn_forward_f64(x, scale, net.feeds[net.offset], net.mean_value,
                                   net.variance_value, epsilon=EPSILON, data_format=data_format,
                                   is_training=is_training)
    expected = fused_bn_grad_f64(dy_value, x, scale, forward["reserve_space_1"],
                                 forward["reserve_space_2"], epsilon=EPSILON,
                                 data_format=data_format, is_training=is_training)
    for value, name in zip(actual, ("x_backprop", "scale_backprop", "offset_backprop")):
        assert_close(value, expected[name], mag=expected["mag"][name], what=name)


def test_grad_inputs_for_several_outputs_are_summed():
    net = Net(seed=2)
    other = ops.Square(net.scope, net.x)
    g1, g2 = net.const(), net.const()
    combined = mg.AddSymbolicGradients(net.scope, [net.bn.y, other], [net.x], [g1, g2])[0]
    separate = [mg.AddSymbolicGradients(net.scope, [t], [net.x], [g])[0]
                for t, g in ((net.bn.y, g1), (other, g2))]
    a, b, c = net.run([combined, *separate])
    np.testing.assert_allclose(a, b + c, rtol=1e-6, atol=1e-6)


def test_grad_inputs_are_checked():
    net = Net()
    with pytest.raises(InvalidArgumentError, match="got 2 grad_inputs for 1 outputs"):
        mg.AddSymbolicGradients(net.scope, [net.bn.y], [net.x], [net.const(), net.const()])
    with pytest.raises(InvalidArgumentError, match=r"grad_inputs\[0\] has dtype float64, "
                                                   r"expected float32"):
        mg.AddSymbolicGradients(net.scope, [net.bn.y], [net.x], [net.const(dtype=np.float64)])
    with pytest.raises(InvalidArgumentError, match="'outputs' must not be empty"):
        mg.AddSymbolicGradients(net.scope, [], [net.x])


# ====================== first-order semantics (docs/tf-semantics.md#autodiff-first-order)


@pytest.mark.parametrize("is_training", MODES, ids=MODE_IDS)
def test_cotangents_of_statistics_and_reserve_spaces_are_ignored(is_training):
    """d sum(batch_mean)/dx = d sum(batch_variance)/dx = 0, in training too
    (docs/tf-semantics.md#autodiff-first-order)."""
    net = Net("NCHW", is_training, seed=3)
    bn = net.bn
    inputs = [net.x, net.scale, net.offset]
    stats = [bn.batch_mean, bn.batch_variance, bn.reserve_space_1, bn.reserve_space_2]
    for value in net.run(mg.AddSymbolicGradients(net.scope, stats, inputs)):
        np.testing.assert_array_equal(value, 0)
    w, u = net.const(), net.const([3])
    y_only = mg.AddSymbolicGradients(net.scope, [total(net.scope, bn.y, w)], inputs)
    with_stats = mg.AddSymbolicGradients(
        net.scope, [ops.Add(net.scope, total(net.scope, bn.y, w),
                            total(net.scope, ops.Mul(net.scope, bn.batch_mean, u)))], inputs)
    for a, b in zip(net.run(y_only), net.run(with_stats)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("is_training", MODES, ids=MODE_IDS)
def test_mean_and_variance_get_none_at_every_order(is_training):
    net = Net(is_training=is_training)
    stats = [net.mean, net.variance]
    loss = total(net.scope, ops.Square(net.scope, net.bn.y))
    g = mg.AddSymbolicGradients(net.scope, [loss], [net.x, net.scale, *stats])
    assert g[2:] == [None, None]
    h = mg.AddSymbolicGradients(net.scope, [total(net.scope, g[0])], [net.x, *stats])
    assert h[0] is not None and h[1:] == [None, None]


# ============================================================================ AddSymbolicGradients


def test_tensor_used_twice_is_aggregated_with_add_n():
    scope = mg.Scope.NewRootScope()
    x = ops.Placeholder(scope.WithOpName("x"), mg.float32, shape=[4])
    (grad,) = mg.AddSymbolicGradients(scope, [ops.Mul(scope, x, x)], [x])
    assert grad.op.type == "AddN" and grad.op.name.startswith("gradients/")
    assert len(grad.op.inputs) == 2
    value = np.array([1.0, -2.0, 0.5, 3.0], np.float32)
    np.testing.assert_array_equal(run(scope, grad, {x: value}), 2 * value)


def test_batch_norm_output_used_twice_feeds_one_grad_node_with_the_sum():
    net = Net(seed=4)
    w1, w2 = net.const(), net.const()
    loss = ops.Add(net.scope, total(net.scope, net.bn.y, w1), total(net.scope, net.bn.y, w2))
    twice = mg.AddSymbolicGradients(net.scope, [loss], [net.x, net.scale, net.offset])
    (grad,) = net.ops_of_type("FusedBatchNormGradV3")
    assert grad.inputs[0].op.type == "AddN"
    once = mg.AddSymbolicGradients(net.scope, [net.bn.y], [net.x, net.scale, net.offset],
                                   [ops.Add(net.scope, w1, w2)])
    for a, b in zip(net.run(twice), net.run(once)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_inputs_that_do_not_reach_the_outputs_get_none():
    net = Net()
    s = net.scope
    unrelated = ops.Placeholder(s.WithOpName("unrelated"), mg.float32, shape=[3])
    downstream = ops.Square(s, net.bn.y)  # computed from the output, not feeding it
    as_int = ops.Cast(s, net.x, DstT=mg.int32)
    through_int = ops.Cast(s, as_int, DstT=mg.float32)
    grads = mg.AddSymbolicGradients(s, [net.bn.y, through_int],
                                    [net.x, unrelated, downstream, as_int])
    assert grads[0] is not None
    assert grads[1:] == [None, None, None]


def test_unused_outputs_and_constant_outputs_change_nothing():
    net = Net(seed=5)
    w = net.const()
    loss = total(net.scope, net.bn.y, w)
    constant = ops.Square(net.scope, net.const())  # depends on no input
    inputs = [net.x, net.scale, net.offset]
    alone = mg.AddSymbolicGradients(net.scope, [loss], inputs)
    with_constant = mg.AddSymbolicGradients(net.scope, [loss, constant], inputs)
    for a, b in zip(net.run(alone), net.run(with_constant)):
        np.testing.assert_array_equal(a, b)
    # the forward op's five other outputs get no cotangent: no zeros are built for them
    assert not net.ops_of_type("ZerosLike")


def test_output_that_is_an_input_gets_its_seed():
    scope = mg.Scope.NewRootScope()
    x = ops.Placeholder(scope.WithOpName("x"), mg.float32, shape=[2])
    (grad,) = mg.AddSymbolicGradients(scope, [x], [x])
    np.testing.assert_array_equal(run(scope, grad, {x: np.array([3.0, 4.0], np.float32)}), 1)


# A throwaway op with no registered gradient, and one with a custom gradient.
_NO_GRADIENT = register_op(OpDef(
    name="AutodiffTestNoGradient", inputs=[ArgDef("x", type_attr="T")],
    outputs=[ArgDef("y", type_attr="T")], attrs=[required("T", "type")],
    shape_fn=lambda ctx: [ctx.input_shapes[0]]))
NoGradient = make_wrapper(_NO_GRADIENT)
CustomGradient = make_wrapper(register_op(OpDef(
    name="AutodiffTestCustomGradient", inputs=[ArgDef("x", type_attr="T")],
    outputs=[ArgDef("y", type_attr="T")], attrs=[required("T", "type")],
    shape_fn=lambda ctx: [TensorShape(ctx.input_shapes[0])])))




@register_kernel("AutodiffTestNoGradient", "AutodiffTestCustomGradient", "AutodiffTestWrongCount")
def _identity_kernel(op, inputs, math):
    return [inputs[0]]


@mg.RegisterGradient("AutodiffTestCustomGradient")
def _custom_gradient(scope, op, grads):
    return [ops.Mul(scope, grads[0], ops.Const(scope, 7.0))]


def test_op_without_gradient_on_the_path_raises_not_found():
    scope = mg.Scope.NewRootScope()
    x = ops.Placeholder(scope.WithOpName("x"), mg.float32, shape=[2])
    hidden = NoGradient(scope.WithOpName("mystery"), x)
    with pytest.raises(NotFoundError, match=r"No gradient defined for operation 'mystery' "
                                            r"\(op type: AutodiffTestNoGradient\).*"
                                            r"RegisterGradient\('AutodiffTestNoGradient'\)"):
        mg.AddSymbolicGradients(scope, [ops.Square(scope, hidden)], [x])


def test_op_without_gradient_off_the_path_is_fine():
    scope = mg.Scope.NewRootScope()
    x = ops.Placeholder(scope.WithOpName("x"), mg.float32, shape=[2])
    z = ops.Placeholder(scope.WithOpName("z"), mg.float32, shape=[2])
    off_path = NoGradient(scope, z)  # feeds the output but does not depend on x
    dead_end = NoGradient(scope, x)  # depends on x but does not feed the output
    y = ops.Add(scope, ops.Square(scope, x), off_path)
    (grad,) = mg.AddSymbolicGradients(scope, [y], [x])
    assert dead_end.consumers() == []
    value = np.array([1.5, -1.0], np.float32)
    np.testing.assert_array_equal(run(scope, grad, {x: value, z: value}), 2 * value)


def test_second_order_through_global_normalization_grad_raises_not_found():
    """BatchNormWithGlobalNormalizationGrad has no gradient (TF registers none either)."""
    scope = mg.Scope.NewRootScope()
    t = ops.Placeholder(scope.WithOpName("t"), mg.float32, shape=[1, 2, 2, 3])
    c = np.ones(3, np.float32)
    with pytest.warns(DeprecationWarning):
        y = ops.BatchNormWithGlobalNormalization(scope, t, c, c, c, c, 0.001, True)
        (g,) = mg.AddSymbolicGradients(scope, [ops.Square(scope, y)], [t])
    with pytest.raises(NotFoundError, match="BatchNormWithGlobalNormalizationGrad"):
        mg.AddSymbolicGradients(scope, [g], [t])


def test_custom_gradient_registration():
    scope = mg.Scope.NewRootScope()
    x = ops.Placeholder(scope.WithOpName("x"), mg.float32, shape=[2])
    (grad,) = mg.AddSymbolicGradients(scope, [CustomGradient(scope, x)], [x])
    np.testing.assert_array_equal(run(scope, grad, {x: np.zeros(2, np.float32)}), 7)
    with pytest.raises(ValueError, match="already registered"):
        mg.RegisterGradient("AutodiffTestCustomGradient")(_custom_gradient)


WrongCount = make_wrapper(register_op(OpDef(
    name="AutodiffTestWrongCount", inputs=[ArgDef("x", type_attr="T")],
    outputs=[ArgDef("y", type_attr="T")], attrs=[required("T", "type")],
    shape_fn=lambda ctx: [ctx.input_shapes[0]])))
mg.RegisterGradient("AutodiffTestWrongCount")(lambda scope, op, grads: [grads[0], grads[0]])


def test_gradient_function_returning_wrong_count_is_reported():
    scope = mg.Scope.NewRootScope()
    x = ops.Placeholder(scope.WithOpName("x"), mg.float32, shape=[2])
    y = WrongCount(scope, x)
    with pytest.raises(InvalidArgumentError, match="returned 2 gradients for 1 inputs"):
        mg.AddSymbolicGradients(scope, [y], [x])


# ============================================================================ stop_at_inputs


def test_stop_at_inputs_partial_versus_total_derivatives():
    """y = z * x with z = x^2: total dy/dx = 3x^2, partial (z held fixed) = z = x^2."""
    scope = mg.Scope.NewRootScope()
    x = ops.Placeholder(scope.WithOpName("x"), mg.float32, shape=[3])
    z = ops.Square(scope, x)
    y = ops.Mul(scope, z, x)
    value = np.array([1.0, -2.0, 0.5], np.float32)
    total_x, total_z = run(scope, mg.AddSymbolicGradients(scope, [y], [x, z]), {x: value})
    part_x, part_z = run(scope, mg.AddSymbolicGradients(scope, [y], [x, z], stop_at_inputs=True),
                         {x: value})
    np.testing.assert_allclose(total_x, 3 * value**2, rtol=1e-6)
    np.testing.assert_allclose(part_x, value**2, rtol=1e-6)
    np.testing.assert_array_equal(total_z, value)
    np.testing.assert_array_equal(part_z, value)


def test_stop_at_inputs_through_batch_norm():
    """With y among the inputs, x only reaches the loss through y: total gives x the full
    gradient, partial gives it None."""
    net = Net(seed=6)
    loss = total(net.scope, net.bn.y, net.const())
    total_grads = mg.AddSymbolicGradients(net.scope, [loss], [net.x, net.bn.y])
    partial = mg.AddSymbolicGradients(net.scope, [loss], [net.x, net.bn.y], stop_at_inputs=True)
    assert total_grads[0] is not None and partial[0] is None
    direct = mg.AddSymbolicGradients(net.scope, [loss], [net.x])[0]
    a, b, c, d = net.run([total_grads[0], direct, total_grads[1], partial[1]])
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(c, d)


# ============================================================================ second order


def second_order(net, inputs=None, dtype=mg.float32, square=True):
    """g = d sum(w y^2)/d(x, scale, offset) (sum(w y) if not square); h = d<g_x, v>/d(inputs).
    Returns g, h and the op count before h was built."""
    s = net.scope
    y = net.bn.y if dtype is mg.float32 else ops.Cast(s, net.bn.y, DstT=mg.float32)
    loss = total(s, ops.Square(s, y) if square else y, net.const())
    g = mg.AddSymbolicGradients(s, [loss], [net.x, net.scale, net.offset])
    g_x = g[0] if dtype is mg.float32 else ops.Cast(s, g[0], DstT=mg.float32)
    inner = total(s, g_x, net.const())
    before = len(net.graph)
    h = mg.AddSymbolicGradients(s, [inner], inputs or [net.x, net.scale])
    return g, h, before


PLUMBING = {"OnesLike", "ZerosLike", "Shape", "ReducedShape", "BroadcastGradientArgs",
            "Reshape", "BroadcastTo", "Sum", "Mul", "AddN"}


@pytest.mark.parametrize("is_training", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("data_format", FORMATS)
def test_second_order_is_one_fused_node(data_format, is_training):
    """With a loss linear in y, y_backprop is a constant and the second order is the fused
    node plus plumbing; nothing of the decomposed formula."""
    net = Net(data_format, is_training)
    g, h, before = second_order(net, square=False)
    new = net.new_ops(before)
    (grad,) = net.ops_of_type("FusedBatchNormGradV3")
    (grad_grad,) = [op for op in new if op.type == "FusedBatchNormGradGrad"]
    assert grad_grad.inputs[:5] == grad.inputs[:5]  # dy, x, scale, reserve_space_1/2
    for attr in ("epsilon", "data_format", "is_training"):
        assert grad_grad.attrs[attr] == grad.attrs[attr]
    # everything the grad op's gradient built: the fused node and zeros for the unused
    # second-level cotangents (of scale_backprop and offset_backprop)
    prefix = grad_grad.name.rsplit("/", 1)[0] + "/"
    assert sorted(op.type for op in new if op.name.startswith(prefix)) == [
        "FusedBatchNormGradGrad", "ZerosLike", "ZerosLike"]
    assert [i.op.type for i in grad_grad.inputs[5:]] == ["Mul", "ZerosLike", "ZerosLike"]
    # the rest is the loss's own plumbing: nothing of the decomposed batch-norm formula
    assert {op.type for op in new} <= PLUMBING | {"FusedBatchNormGradGrad"}, new
    assert all(op.name.startswith("gradients_1/") for op in new)
    assert h[1] is grad_grad.outputs[2]


@pytest.mark.parametrize("is_training", MODES, ids=MODE_IDS)
def test_second_order_with_y_dependent_cotangent(is_training):
    """loss = sum(w y^2): y_backprop = 2 w y depends on y, so grad_y_backprop flows back into
    the forward op once more: one FusedBatchNormGradGrad plus one first-order node."""
    net = Net("NCDHW", is_training)
    _, _, before = second_order(net)
    types = [op.type for op in net.new_ops(before)]
    assert types.count("FusedBatchNormGradGrad") == 1
    assert types.count("FusedBatchNormGradV3") == 1
    assert set(types) <= PLUMBING | {"FusedBatchNormGradGrad", "FusedBatchNormGradV3"}, types


@pytest.mark.parametrize("op", [ops.FusedBatchNorm, ops.FusedBatchNormV2], ids=["V1", "V2"])
def test_second_order_of_v1_v2_is_one_fused_node(op):
    net = Net("NCHW", op=op)
    _, _, before = second_order(net)
    assert [o.type for o in net.new_ops(before)].count("FusedBatchNormGradGrad") == 1


def finite_difference_grad_grad(dy, x, scale, mean, variance, gx, gscale, goffset, *,
                                data_format, is_training, delta=1e-6):
    """d/d(dy, x, scale) of <gx, x_backprop> + <gscale, scale_backprop> +
    <goffset, offset_backprop>, by float64 central differences of the formula in
    docs/tf-semantics.md#gradient-formulas. In training the statistics are recomputed from x
    (docs/tf-semantics.md#autodiff-second-order)."""
    def pairing(dy_, x_, scale_):
        if is_training:
            stats = fused_bn_forward_f64(x_, scale_, np.zeros(3), mean, variance,
                                         data_format=data_format, is_training=True)
            m, v = stats["reserve_space_1"], stats["reserve_space_2"]
        else:
            m, v = mean, variance
        grad = fused_bn_grad_f64(dy_, x_, scale_, m, v, epsilon=EPSILON,
                                 data_format=data_format, is_training=is_training)
        return (np.sum(gx * grad["x_backprop"]) + np.sum(gscale * grad["scale_backprop"])
                + np.sum(goffset * grad["offset_backprop"]))

    args = [np.asarray(a, F64) for a in (dy, x, scale)]
    result = []
    for i, arg in enumerate(args):
        derivative = np.zeros_like(arg)
        for k in np.ndindex(arg.shape):
            shifted = []
            for sign in (1, -1):
                moved = [a.copy() for a in args]
                moved[i][k] += sign * delta
                shifted.append(pairing(*moved))
            derivative[k] = (shifted[0] - shifted[1]) / (2 * delta)
        result.append(derivative)
    return result


def grad_grad_inputs(rng, data_format, dtype):
    shape = shape_of(data_format)
    x, scale, _, mean, variance = random_case(rng, shape, data_format, dtype)
    dy = rng.normal(size=shape).astype(np.float32).astype(dtype)
    gx = rng.normal(size=shape).astype(np.float32).astype(dtype)
    gscale, goffset = (rng.normal(size=3).astype(np.float32) for _ in range(2))
    return dy, x, scale, mean, variance, gx, gscale, goffset


def run_grad_grad(values, *, data_format, is_training, backend):
    scope = mg.Scope.NewRootScope()
    result = ops.FusedBatchNormGradGrad(scope, *values, epsilon=EPSILON,
                                        data_format=data_format, is_training=is_training)
    return run(scope, list(result), backend=backend)


@pytest.mark.parametrize("is_training", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("data_format", FORMATS)
def test_grad_grad_kernel_matches_finite_differences(data_format, is_training, backend):
    rng = np.random.default_rng(FORMATS.index(data_format) + 10 * is_training)
    values = grad_grad_inputs(rng, data_format, np.float32)
    expected = finite_difference_grad_grad(*values, data_format=data_format,
                                           is_training=is_training)
    actual = run_grad_grad(values, data_format=data_format, is_training=is_training,
                           backend=backend)
    for a, e, name in zip(actual, expected, ("grad_y_backprop", "grad_x", "grad_scale")):
        # norm-wise: 1e-5 of the largest entry (float32 math with cancellation in the means)
        assert_close(a, e, dtype=np.float32, rtol=1e-5, what=name)
    # the float64 backend evaluates the same kernel in float64
    actual64 = run_grad_grad(values, data_format=data_format, is_training=is_training,
                             backend="float64")
    for a, e, name in zip(actual64, expected, ("grad_y_backprop", "grad_x", "grad_scale")):
        assert_close(a, e, dtype=F64, rtol=1e-7, mag=float(np.abs(e).max()), what=name)


@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("is_training", MODES, ids=MODE_IDS)
def test_grad_grad_kernel_half_computes_in_float32_and_rounds_once(dtype, is_training, backend):
    rng = np.random.default_rng(20 + is_training)
    values = grad_grad_inputs(rng, "NCHW", dtype)
    expected = finite_difference_grad_grad(*values, data_format="NCHW", is_training=is_training)
    actual = run_grad_grad(values, data_format="NCHW", is_training=is_training, backend=backend)
    for a, e, name, out in zip(actual, expected, ("grad_y_backprop", "grad_x", "grad_scale"),
                               (dtype, dtype, np.float32)):
        assert_close(a, e, dtype=out, rtol=1e-5, what=name)


# ============================================================================ half types


@pytest.mark.parametrize("is_training", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("dtype", [mg.float16, mg.bfloat16], ids=["float16", "bfloat16"])
def test_half_types_build_and_run_at_orders_1_2_3(dtype, is_training):
    """Gradients keep x's dtype T (scale's stay float32); the third order's decomposed graph
    casts T to float32 and back. Values agree with the same graph evaluated in float64 to a
    few units of T's epsilon (each half tensor on the way is rounded once)."""
    net = Net("NHWC", is_training, dtype=dtype, seed=7)
    s = net.scope
    g, h, _ = second_order(net, dtype=dtype)
    assert [t.dtype for t in g] == [dtype, mg.float32, mg.float32]
    assert [t.dtype for t in h] == [dtype, mg.float32]
    grads = net.ops_of_type("FusedBatchNormGradV3") + net.ops_of_type("FusedBatchNormGradGrad")
    assert len(grads) == 3 and all(op.attrs["T"] is dtype for op in grads)
    before = len(net.graph)
    third = mg.AddSymbolicGradients(
        s, [total(s, ops.Cast(s, h[0], DstT=mg.float32), net.const())], [net.x, net.scale])
    assert [t.dtype for t in third] == [dtype, mg.float32]
    casts = {(op.attrs["SrcT"], op.attrs["DstT"]) for op in net.new_ops(before)
             if op.type == "Cast"}
    assert {(dtype, mg.float32), (mg.float32, dtype)} <= casts
    fetches = [*g, *h, *third]
    actual = net.run(fetches)
    reference = net.run(fetches, backend="float64")
    eps = float(ml_dtypes.finfo(dtype.np_dtype).eps)
    for a, r, fetch in zip(actual, reference, fetches):
        assert a.dtype == fetch.dtype.np_dtype and np.isfinite(a.astype(F64)).all()
        error = np.abs(a.astype(F64) - r).max()
        assert error <= 4 * eps * max(np.abs(r).max(), 1e-30), (fetch.name, error)
