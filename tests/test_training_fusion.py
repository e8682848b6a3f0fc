"""The remapper's training fusions (``optimizer/training_fusions.py``) and their fused ops
(``ops/fused_training_ops.py``, ``backends/fused_training_kernels.py``, ``mg_bn_*_ex`` and
``mg_apply_update_list`` in kernels_c/): results bit for bit those of the unfused graph on
the reference and native backends (every ISA), the fused ops formed where the gates allow
and nowhere else.

Hypothesis draws training graphs of convolution -> training batch norm -> [side AddV2] ->
Relu blocks, max pools, fan-out (a tensor read by several ops), fetched intermediates and
control edges, differentiates a loss with respect to the input and every batch-norm
scale and offset, and runs each graph with the remapper on and off.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import NATIVE_AVAILABLE
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import minigraph as mg
from minigraph import ops
from minigraph.backends import native
from minigraph.ops import fused_training_ops as fused_ops

F32 = np.float32
BACKENDS = ["reference"] + (["native"] if NATIVE_AVAILABLE else [])


def _isas() -> list[str]:
    """The instruction sets this CPU runs, best first."""
    if not NATIVE_AVAILABLE:
        return []
    best = native.ISAS.index(native.best_isa())
    return list(reversed(native.ISAS[:best + 1]))


REMAPPER_OFF = mg.OptimizerOptions(remapper=False)


def _bits(value: np.ndarray) -> np.ndarray:
    value = np.ascontiguousarray(value)
    return value.view(np.uint32) if value.dtype == F32 else value


def _assert_same_bits(first: list, second: list) -> None:
    for a, b in zip(first, second, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(_bits(a), _bits(b))

def _same_bits_on_every_isa_and_backend(root, feeds, unfused, fused, optimizer=None):
    """The fetches ``fused`` give the bits of ``unfused`` in one Run, on every instruction
    set this CPU runs and every backend."""
    try:
        for isa in _isas():
            native.set_isa(isa)
            for backend in BACKENDS:
                values = mg.ClientSession(root, backend=backend, optimizer=optimizer).Run(
                    feeds, unfused + fused)
                _assert_same_bits(values[:len(unfused)], values[len(unfused):])
    finally:
        native.set_isa(native.best_isa())



# ----------------------------------------------------------------------------- the ops alone


@st.composite
def _bn_case(draw):
    layout = draw(st.sampled_from(["NHWC", "NCHW"]))
    n, h, w = draw(st.integers(1, 3)), draw(st.integers(1, 9)), draw(st.integers(1, 9))
    c = draw(st.integers(1, 19))
    shape = (n, h, w, c) if layout == "NHWC" else (n, c, h, w)
    seed = draw(st.integers(0, 2 ** 16))
    return (layout, shape, c, seed, draw(st.booleans()), draw(st.booleans()),
            draw(st.sampled_from([1.0, 0.25])), draw(st.booleans()),
            draw(st.sampled_from([None, np.inf, -np.inf, np.nan, 3e38, 1e20])))


@pytest.mark.skipif(not NATIVE_AVAILABLE, reason="compares the native ISAs")
@settings(max_examples=30, deadline=None)
@given(_bn_case())
def test_fused_batch_norm_ops_match_the_chain(case):
    """_FusedBatchNormEx and _FusedBatchNormGradEx give the chain's bits on every backend
    and ISA: shapes that take row and plane blocks, odd channel counts, with and without
    the side input, Relu or Identity, training and inference, exponential averaging, and
    an infinite, NaN or huge element (the C kernels' exceptional-channel path)."""
    layout, shape, c, seed, with_side, relu_on, factor, training, special = case
    rng = np.random.default_rng(seed)
    x, side, dy = (rng.standard_normal(shape).astype(F32) for _ in range(3))
    if special is not None:  # a channel the C kernels recompute in the reference's order
        x.flat[rng.integers(0, x.size)] = special
    scale, offset = rng.standard_normal(c).astype(F32), rng.standard_normal(c).astype(F32)
    mean, variance = rng.standard_normal(c).astype(F32), rng.uniform(0.5, 2, c).astype(F32)
    root = mg.Scope.NewRootScope()
    X, S, DY = (ops.Placeholder(root, mg.float32) for _ in range(3))
    attrs = {"data_format": layout, "is_training": training, "exponential_avg_factor": factor}
    bn = ops.FusedBatchNormV3(root, X, scale, offset, mean, variance, **attrs)
    y = ops.AddV2(root, bn.y, S) if with_side else bn.y
    y = ops.Relu(root, y) if relu_on else y
    g = ops.ReluGrad(root, DY, y) if relu_on else DY
    grad = ops.FusedBatchNormGradV3(root, g, X, scale, bn.reserve_space_1, bn.reserve_space_2,
                                    bn.reserve_space_3, data_format=layout,
                                    is_training=training)
    mode = "Relu" if relu_on else "Identity"
    ex = fused_ops.FusedBatchNormEx(root, X, scale, offset, mean, variance,
                                    [S] if with_side else [], num_side_inputs=int(with_side),
                                    activation_mode=mode, **attrs)
    grad_ex = fused_ops.FusedBatchNormGradEx(
        root, DY, X, scale, ex.reserve_space_1, ex.reserve_space_2, ex.reserve_space_3,
        offset, ex.y, num_side_inputs=int(with_side), activation_mode=mode,
        data_format=layout, is_training=training)
    unfused = [y, *bn[1:5], *grad[:3]] + ([g] if with_side else [])
    fused = [ex.y, *ex[1:5], *grad_ex[:3]] + ([grad_ex[5]] if with_side else [])
    _same_bits_on_every_isa_and_backend(root, {X: x, S: side, DY: dy}, unfused, fused)


def test_fused_batch_norm_ex_rejects_bad_side_input():
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root, mg.float32, shape=[1, 2, 2, 3])
    side = ops.Placeholder(root, mg.float32, shape=[1, 2, 2, 4])
    one = np.ones(3, F32)
    with pytest.raises(mg.errors.InvalidArgumentError, match="_FusedBatchNormEx.*side_input"):
        fused_ops.FusedBatchNormEx(root, x, one, one, one, one, [side], num_side_inputs=1,
                                   activation_mode="Relu")
    with pytest.raises(mg.errors.InvalidArgumentError, match="activation_mode"):
        fused_ops.FusedBatchNormEx(root, x, one, one, one, one, [], activation_mode="Elu")


def test_fused_batch_norm_ex_checks_values_at_run_time():
    """A side input whose shape only the fed value shows is refused before any kernel."""
    root = mg.Scope.NewRootScope()
    x, side = ops.Placeholder(root, mg.float32), ops.Placeholder(root, mg.float32)
    one = np.ones(3, F32)
    ex = fused_ops.FusedBatchNormEx(root, x, one, one, one, one, [side], num_side_inputs=1,
                                    activation_mode="Relu")
    for backend in BACKENDS:
        with pytest.raises(mg.errors.InvalidArgumentError,
                           match="_FusedBatchNormEx.*'side_input'"):
            mg.ClientSession(root, backend=backend).Run(
                {x: np.zeros((1, 2, 2, 3), F32), side: np.zeros((1, 2, 2, 1), F32)}, [ex.y])



@pytest.mark.skipif(not NATIVE_AVAILABLE, reason="compares the native ISAs")
@settings(max_examples=30, deadline=None)
@given(_bn_case(), st.sampled_from(["dy", "addend", "x"]))
def test_fused_add_batch_norm_grad_matches_the_chain(case, special_in):
    """_FusedAddBatchNormGradEx gives AddN -> ReluGrad -> FusedBatchNormGradV3's bits on
    every backend and ISA, row and plane blocks, with and without the side gradient, Relu
    or Identity, training or inference, and with an infinite, NaN or huge element in a
    gradient or in x (the C kernel then hands the call back: AddN, then the unfused
    kernel)."""
    layout, shape, c, seed, with_side, relu_on, _factor, training, special = case
    rng = np.random.default_rng(seed)
    x, dy, addend = (rng.standard_normal(shape).astype(F32) for _ in range(3))
    if special is not None:
        chosen = {"dy": dy, "addend": addend, "x": x}[special_in]
        chosen.flat[rng.integers(0, chosen.size)] = special
    scale, offset = rng.standard_normal(c).astype(F32), rng.standard_normal(c).astype(F32)
    mean, variance = rng.standard_normal(c).astype(F32), rng.uniform(0.5, 2, c).astype(F32)
    root = mg.Scope.NewRootScope()
    X, DY, A = (ops.Placeholder(root, mg.float32) for _ in range(3))
    attrs = {"data_format": layout, "is_training": training}
    mode = "Relu" if relu_on else "Identity"
    ex = fused_ops.FusedBatchNormEx(root, X, scale, offset, mean, variance, [],
                                    activation_mode=mode, **attrs)
    total = ops.AddN(root, [DY, A])
    g = ops.ReluGrad(root, total, ex.y) if relu_on else total
    grad = ops.FusedBatchNormGradV3(root, g, X, scale, ex.reserve_space_1,
                                    ex.reserve_space_2, ex.reserve_space_3, **attrs)
    fused = fused_ops.FusedAddBatchNormGradEx(
        root, DY, X, scale, ex.reserve_space_1, ex.reserve_space_2, ex.reserve_space_3,
        offset, ex.y, A, num_side_inputs=int(with_side), activation_mode=mode, **attrs)
    unfused = [*grad[:3]] + ([g] if with_side else [])
    together = [*fused[:3]] + ([fused[5]] if with_side else [])
    _same_bits_on_every_isa_and_backend(root, {X: x, DY: dy, A: addend}, unfused, together,
                                         REMAPPER_OFF)


def test_fused_add_batch_norm_grad_checks_the_addend():
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root, mg.float32, shape=[2, 3, 3, 4])
    ex = fused_ops.FusedBatchNormEx(root, x, np.ones(4, F32), np.zeros(4, F32),
                                    np.zeros(0, F32), np.zeros(0, F32), [],
                                    activation_mode="Relu")
    with pytest.raises(mg.errors.InvalidArgumentError, match="y_backprop_addend"):
        fused_ops.FusedAddBatchNormGradEx(
            root, x, x, np.ones(4, F32), ex.reserve_space_1, ex.reserve_space_2,
            ex.reserve_space_3, np.zeros(4, F32), ex.y, np.ones((2, 3, 3, 5), F32),
            activation_mode="Relu")


# ----------------------------------------------------------------------------- the rewrites


def _block_graph(fetch_bn_y=False, fetch_sum=False, control_on_bn=False, side=True):
    """conv -> BN (training) -> [+ x] -> Relu, a loss and its gradients; the fetches."""
    rng = np.random.default_rng(7)
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root, mg.float32, shape=[2, 5, 5, 4])
    conv = ops.Conv2D(root, x, rng.standard_normal((3, 3, 4, 4)).astype(F32), [1, 1, 1, 1],
                      "SAME")
    scale, offset = ops.Const(root, np.ones(4, F32)), ops.Const(root, np.zeros(4, F32))
    bn = ops.FusedBatchNormV3(root, conv, scale, offset, np.zeros(0, F32), np.zeros(0, F32))
    total = ops.AddV2(root, bn.y, x) if side else bn.y
    relu = ops.Relu(root, total)
    # a loss linear in relu: one gradient term reaches it (a sum of two would fuse into
    # _FusedAddBatchNormGradEx: test_gradient_sums_fuse_unless_read_elsewhere)
    weights = rng.standard_normal((2, 5, 5, 4)).astype(F32)
    loss = ops.Sum(root, ops.Mul(root, relu, weights), [0, 1, 2, 3])
    fetches = [loss, *mg.AddSymbolicGradients(root, [loss], [x, scale, offset])]
    if fetch_bn_y:
        fetches.append(bn.y)
    if fetch_sum:
        fetches.append(total)
    if control_on_bn:
        fetches.append(ops.Identity(root.WithControlDependencies([bn.operation]), loss))
    return root, x, fetches


TRAINING_FUSIONS = ("_FusedBatchNormEx", "_FusedBatchNormGradEx", "_FusedReluMaxPool",
                    "_FusedMaxPoolGradReluGrad", "_FusedAddBatchNormGradEx")


def _fused_types(root, fetches) -> list[str]:
    """The batch-norm training fusions the optimizer forms for these fetches."""
    return [op.type for op in mg.optimize(root, fetches).operations()
            if op.type in ("_FusedBatchNormEx", "_FusedBatchNormGradEx")]


@pytest.mark.parametrize("side", [True, False])
def test_fused_ops_form_where_nothing_else_reads_the_intermediates(side):
    root, x, fetches = _block_graph(side=side)
    assert sorted(_fused_types(root, fetches)) == ["_FusedBatchNormEx", "_FusedBatchNormGradEx"]
    metadata = mg.RunMetadata()
    backend = BACKENDS[-1]
    mg.ClientSession(root, backend=backend).Run(
        {x: np.ones((2, 5, 5, 4), F32)}, fetches, run_metadata=metadata)
    ran = {stats.op_type: stats.backend for stats in metadata.step_stats}
    assert ran["_FusedBatchNormEx"] == ran["_FusedBatchNormGradEx"] == backend
    assert "FusedBatchNormV3" not in ran and "ReluGrad" not in ran


def _residual_pair(fetch_sum=False):
    """Two conv -> BN -> Relu blocks, the first one's output read by the second and by
    the loss (its gradient: an AddN of the two); the fetches, with the first block's
    gradient sum where ``fetch_sum``."""
    rng = np.random.default_rng(3)
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root, mg.float32, shape=[2, 5, 5, 4])
    outputs = [x]
    for _ in range(2):
        conv = ops.Conv2D(root, outputs[-1], rng.standard_normal((3, 3, 4, 4)).astype(F32),
                          [1, 1, 1, 1], "SAME")
        bn = ops.FusedBatchNormV3(root, conv, rng.uniform(0.5, 1.5, 4).astype(F32),
                                  np.zeros(4, F32), np.zeros(0, F32), np.zeros(0, F32))
        outputs.append(ops.Relu(root, bn.y))
    first, second = outputs[1:]
    loss = ops.AddN(root, [ops.Sum(root, ops.Mul(root, t, rng.standard_normal(
        (2, 5, 5, 4)).astype(F32)), [0, 1, 2, 3]) for t in (first, second)])
    fetches = [loss, *mg.AddSymbolicGradients(root, [loss], [x])]
    if fetch_sum:  # the gradient reaching the first block's output, fetched by name
        summed = [op for op in root.graph().operations() if op.type == "AddN"
                  and "gradients" in op.name]
        fetches.append(summed[-1].outputs[0])
    return root, x, fetches


@pytest.mark.parametrize("fetch_sum", [False, True])
def test_gradient_sums_fuse_unless_read_elsewhere(fetch_sum):
    root, x, fetches = _residual_pair(fetch_sum)
    types = [op.type for op in mg.optimize(root, fetches).operations()]
    assert types.count("_FusedAddBatchNormGradEx") == (0 if fetch_sum else 1)
    feeds = {x: np.random.default_rng(1).standard_normal((2, 5, 5, 4)).astype(F32)}
    for backend in BACKENDS:
        fused = mg.ClientSession(root, backend=backend).Run(feeds, fetches)
        plain = mg.ClientSession(root, backend=backend, optimizer=REMAPPER_OFF).Run(feeds,
                                                                                    fetches)
        _assert_same_bits(fused, plain)


@pytest.mark.parametrize("gate", ["fetch_bn_y", "fetch_sum", "control_on_bn"])
def test_no_fusion_where_an_intermediate_is_read(gate):
    root, _, fetches = _block_graph(**{gate: True})
    assert _fused_types(root, fetches) == []


# ----------------------------------------------------------------------------- random graphs


class _TrainingGraph:
    """One random training graph drawn by hypothesis."""

    def __init__(self, draw) -> None:
        self.draw = draw
        self.layout = draw(st.sampled_from(["NHWC", "NCHW"]))
        n, h, w, c = (draw(st.integers(1, 2)), draw(st.integers(2, 5)), draw(st.integers(2, 5)),
                      draw(st.integers(1, 5)))
        self.shape = (n, h, w, c) if self.layout == "NHWC" else (n, c, h, w)
        self.c = c
        self.rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
        self.root = mg.Scope.NewRootScope()
        self.x = ops.Placeholder(self.root, mg.float32, shape=list(self.shape))
        self.tensors = [self.x]
        self.variables: list[mg.Output] = [self.x]
        self.fetches: list[mg.Output] = []
        self.controls: list = []
        self.pooled: list[mg.Output] = []

    def pick(self) -> mg.Output:
        return self.draw(st.sampled_from(self.tensors))

    def const(self, shape, low=None) -> mg.Output:
        value = (self.rng.uniform(low, 1.5, shape) if low is not None
                 else self.rng.standard_normal(shape) * 0.5)
        return ops.Const(self.root, value.astype(F32))

    def block(self) -> None:
        """conv -> BN (training) -> [+ an earlier tensor] -> Relu"""
        conv = ops.Conv2D(self.root, self.pick(), self.const((3, 3, self.c, self.c)),
                          [1, 1, 1, 1], "SAME", data_format=self.layout)
        scale, offset = self.const((self.c,), 0.5), self.const((self.c,))
        self.variables += [scale, offset]
        bn = ops.FusedBatchNormV3(self.root, conv, scale, offset, np.zeros(0, F32),
                                  np.zeros(0, F32), data_format=self.layout,
                                  epsilon=self.draw(st.sampled_from([1e-3, 1e-5])))
        y = bn.y
        if self.draw(st.booleans()):
            side = self.pick()
            y = ops.AddV2(self.root, *((y, side) if self.draw(st.booleans()) else (side, y)))
            self.maybe_read(y)
        self.maybe_read(bn.y)
        if self.draw(st.integers(0, 4)) == 0:
            self.controls.append(bn.operation)
        self.tensors.append(ops.Relu(self.root, y))

    def maybe_read(self, t: mg.Output) -> None:
        """Sometimes fetch an intermediate, or read it from another op (fan-out)."""
        choice = self.draw(st.integers(0, 5))
        if choice == 0:
            self.fetches.append(t)
        elif choice == 1:
            self.tensors.append(ops.Mul(self.root, t, t))

    def pool(self) -> None:
        """A 2x2 stride-1 SAME max pool (the shape stays, so any tensor can be a side input)"""
        window = [1, 1, 2, 2] if self.layout == "NCHW" else [1, 2, 2, 1]
        self.tensors.append(ops.MaxPool(self.root, self.pick(), window, [1, 1, 1, 1], "SAME",
                                        data_format=self.layout))

    def relu_pool(self) -> None:
        """Relu(t * c) -> a 2x2 or 3x3 max pool, stride 1 or 2 (VALID or SAME); the pooled
        tensor is added to the loss only (its shape may differ)"""
        relu = ops.Relu(self.root, ops.Mul(self.root, self.pick(), self.const(self.shape)))
        k, stride = self.draw(st.sampled_from([(2, 2), (3, 2), (3, 1)]))
        window, strides = (([1, 1, k, k], [1, 1, stride, stride]) if self.layout == "NCHW"
                           else ([1, k, k, 1], [1, stride, stride, 1]))
        pool = ops.MaxPool(self.root, relu, window, strides, "SAME", data_format=self.layout)
        self.maybe_read(relu)
        self.tensors.append(relu)
        self.pooled.append(pool)

    def finish(self) -> list[mg.Output]:
        terms = [ops.Sum(self.root, ops.Mul(self.root, t, self.const(self.shape)),
                         [0, 1, 2, 3]) for t in self.tensors[1:]]
        terms += [ops.Sum(self.root, ops.Mul(self.root, p, p), [0, 1, 2, 3])
                  for p in self.pooled]
        loss = terms[0] if len(terms) == 1 else ops.AddN(self.root, terms)
        if self.controls:
            loss = ops.Identity(self.root.WithControlDependencies(self.controls), loss)
        grads = mg.AddSymbolicGradients(self.root, [loss], self.variables)
        return [loss, *grads, *self.fetches]


@st.composite
def _training_graphs(draw):
    graph = _TrainingGraph(draw)
    for _ in range(draw(st.integers(1, 4))):
        action = draw(st.sampled_from(["block", "block", "block", "pool", "relu_pool"]))
        getattr(graph, action)()
    if len(graph.tensors) == 1:
        graph.block()
    return graph, graph.finish()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_training_graphs())
def test_random_training_graphs_give_the_same_bits_fused_and_unfused(drawn):
    graph, fetches = drawn
    types = [op.type for op in mg.optimize(graph.root, fetches).operations()
             if op.type in TRAINING_FUSIONS]
    event(f"batch-norm fusions formed: {sum(t.startswith('_FusedBatchNorm') for t in types)}")
    event(f"pool fusions formed: {sum('Pool' in t for t in types)}")
    event(f"gradient sums fused: {types.count('_FusedAddBatchNormGradEx')}")
    feeds = {graph.x: graph.rng.standard_normal(graph.shape).astype(F32)}
    for backend in BACKENDS:
        fused = mg.ClientSession(graph.root, backend=backend).Run(feeds, fetches)
        plain = mg.ClientSession(graph.root, backend=backend,
                                 optimizer=REMAPPER_OFF).Run(feeds, fetches)
        _assert_same_bits(fused, plain)


# ----------------------------------------------------------------------------- opt-in folding


@settings(max_examples=20, deadline=None)
@given(layout=st.sampled_from(["NHWC", "NCHW"]), n=st.integers(1, 2), hw=st.integers(3, 7),
       cin=st.integers(1, 6), cout=st.integers(1, 6), stride=st.sampled_from([1, 2]),
       padding=st.sampled_from(["SAME", "VALID"]), seed=st.integers(0, 2 ** 16))
def test_batch_norm_folding_is_opt_in_and_within_its_bound(layout, n, hw, cin, cout, stride,
                                                           padding, seed):
    """fold_batch_norm replaces Conv2D -> FusedBatchNormV3 (inference, constants) by
    Conv2D -> BiasAdd, within (K + 3) 2^-24 (sum|x W||k| + |mean k| + |offset|) of the
    unfused result on each side (K = multiply-adds per output); off by default."""
    rng = np.random.default_rng(seed)
    shape = (n, hw, hw, cin) if layout == "NHWC" else (n, cin, hw, hw)
    x = rng.standard_normal(shape).astype(F32)
    w = rng.standard_normal((3, 3, cin, cout)).astype(F32)
    scale, offset, mean = (rng.standard_normal(cout).astype(F32) for _ in range(3))
    variance = rng.uniform(0.1, 2, cout).astype(F32)
    root = mg.Scope.NewRootScope()
    X = ops.Placeholder(root, mg.float32, shape=list(shape))
    strides = [1, 1, stride, stride] if layout == "NCHW" else [1, stride, stride, 1]
    conv = ops.Conv2D(root, X, w, strides, padding, data_format=layout)
    bn = ops.FusedBatchNormV3(root, conv, scale, offset, mean, variance, is_training=False,
                              data_format=layout, epsilon=1e-3)
    on = mg.OptimizerOptions(fold_batch_norm=True)
    folded_only = mg.OptimizerOptions(fold_batch_norm=True, remapper=False)
    assert [op.type for op in mg.optimize(root, [bn.y], options=folded_only).operations()
            if op.type in ("FusedBatchNormV3", "BiasAdd")] == ["BiasAdd"]
    assert not any("folded" in op.name for op in mg.optimize(root, [bn.y]).operations())
    k = scale.astype(np.float64) / np.sqrt(variance.astype(np.float64) + np.float32(1e-3))
    channel = [1, -1, 1, 1] if layout == "NCHW" else [1, 1, 1, -1]
    abs_root = mg.Scope.NewRootScope()
    abs_conv = ops.Conv2D(abs_root, np.abs(x).astype(np.float64), np.abs(w).astype(np.float64),
                          strides, padding, data_format=layout)
    magnitude = mg.ClientSession(abs_root, backend="reference").Run([abs_conv])[0]
    bound = (9 * cin + 3) * 2.0 ** -24 * (magnitude * np.abs(k).reshape(channel)
                                         + np.abs(mean * k).reshape(channel)
                                         + np.abs(offset).reshape(channel))
    for backend in BACKENDS:
        folded = mg.ClientSession(root, backend=backend, optimizer=on).Run({X: x}, [bn.y])[0]
        plain = mg.ClientSession(root, backend=backend).Run({X: x}, [bn.y])[0]
        assert np.all(np.abs(folded.astype(np.float64) - plain) <= 2 * bound)


# ----------------------------------------------------------------------------- variable updates


def _updates_graph(kind: str, shapes: list, nesterov: bool, control_between: bool):
    """A two-layer model's variables of ``shapes`` updated by ``kind``; (root, x, loss,
    variables, inits, train)."""
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root, mg.float32, shape=[3, shapes[0][0]])
    variables = [ops.Variable(root, list(s), mg.float32) for s in shapes]
    inits = [ops.Assign(root, v, np.random.default_rng(i).standard_normal(s).astype(F32))
             for i, (v, s) in enumerate(zip(variables, shapes))]
    h = ops.Relu(root, ops.AddV2(root, ops.MatMul(root, x, variables[0]), variables[1]))
    y = ops.MatMul(root, h, variables[2])
    loss = ops.Sum(root, ops.Mul(root, y, y), [0, 1])
    grads = mg.AddSymbolicGradients(root, [loss], variables)

    def slot(shape):
        v = ops.Variable(root, list(shape), mg.float32)
        inits.append(ops.Assign(root, v, np.full(shape, 0.25, F32)))
        return v

    updates = []
    for v, g, s in zip(variables, grads, shapes):
        scope = root.WithControlDependencies([updates[-1].op]) if (
            control_between and updates) else root
        if kind == "ApplyGradientDescent":
            updates.append(ops.ApplyGradientDescent(scope, v, F32(0.05), g))
        elif kind == "ApplyMomentum":
            updates.append(ops.ApplyMomentum(scope, v, slot(s), F32(0.05), g, F32(0.9),
                                             use_nesterov=nesterov))
        else:
            updates.append(ops.ApplyAdam(scope, v, slot(s), slot(s), F32(0.9), F32(0.99),
                                         F32(0.01), F32(0.9), F32(0.999), F32(1e-7), g,
                                         use_nesterov=nesterov))
    train = ops.NoOp(root.WithControlDependencies([u.op for u in updates]))
    return root, x, loss, variables, inits, train, [u.op for u in updates]


@settings(max_examples=12, deadline=None)
@given(kind=st.sampled_from(["ApplyGradientDescent", "ApplyMomentum", "ApplyAdam"]),
       n_in=st.integers(1, 5), hidden=st.integers(1, 40), n_out=st.integers(1, 3),
       nesterov=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_variable_updates_fuse_into_one_op_with_the_same_bits(kind, n_in, hidden, n_out,
                                                              nesterov, seed):
    shapes = [(n_in, hidden), (hidden,), (hidden, n_out)]
    root, x, loss, variables, inits, train, _ = _updates_graph(kind, shapes, nesterov, False)
    assert [op.type for op in mg.optimize(root, [], targets=[train]).operations()
            if op.type.startswith("_FusedApply")] == [f"_Fused{kind}"]
    x_value = np.random.default_rng(seed).standard_normal((3, n_in)).astype(F32)
    for backend in BACKENDS:
        results = []
        for options in (mg.OptimizerOptions(), REMAPPER_OFF):
            session = mg.ClientSession(root, backend=backend, optimizer=options)
            session.Run([], [], [i.op for i in inits])
            for _ in range(3):
                session.Run({x: x_value}, [], [train])
            results.append(session.Run({x: x_value}, [loss, *variables]))
        _assert_same_bits(*results)


def test_variable_updates_ordered_by_control_edges_stay_apart():
    root, _, _, _, _, train, _ = _updates_graph("ApplyMomentum", [(2, 3), (3,), (3, 1)],
                                                False, True)
    assert not any(op.type.startswith("_FusedApply")
                   for op in mg.optimize(root, [], targets=[train]).operations())


@pytest.mark.parametrize("fetch_relu", [False, True])
def test_relu_max_pool_fuses_unless_the_relu_is_fetched(fetch_relu):
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root, mg.float32, shape=[2, 6, 6, 3])
    relu = ops.Relu(root, ops.Mul(root, x, x))
    pool = ops.MaxPool(root, relu, [1, 3, 3, 1], [1, 2, 2, 1], "SAME")
    loss = ops.Sum(root, ops.Mul(root, pool, pool), [0, 1, 2, 3])
    fetches = [loss, *mg.AddSymbolicGradients(root, [loss], [x])] + ([relu] if fetch_relu
                                                                      else [])
    types = [op.type for op in mg.optimize(root, fetches).operations()
             if op.type in TRAINING_FUSIONS]
    # the backward's intermediate (the routed gradient) is still read by the ReluGrad alone
    assert types == (["_FusedMaxPoolGradReluGrad"] if fetch_relu
                     else ["_FusedReluMaxPool", "_FusedMaxPoolGradReluGrad"])


def test_updates_that_are_run_targets_fuse_and_keep_their_names():
    """mg.train's minimize returns the update ops themselves as the step's targets: they
    fuse, each name left as a NoOp that runs after the fused op, with the same results."""
    root, x, loss, variables, inits, _, updates = _updates_graph(
        "ApplyMomentum", [(2, 4), (4,), (4, 2)], False, False)
    graph = mg.optimize(root, [], targets=updates)
    assert sorted(op.type for op in graph.operations()
                  if op.name in {u.name for u in updates}) == ["NoOp", "NoOp",
                                                               "_FusedApplyMomentum"]
    x_value = np.random.default_rng(3).standard_normal((3, 2)).astype(F32)
    for backend in BACKENDS:
        results = []
        for options in (mg.OptimizerOptions(), REMAPPER_OFF):
            session = mg.ClientSession(root, backend=backend, optimizer=options)
            session.Run([], [], [i.op for i in inits])
            for _ in range(2):
                session.Run({x: x_value}, [], updates)
            results.append(session.Run({x: x_value}, [loss, *variables]))
        _assert_same_bits(*results)


def test_a_side_input_computed_from_the_statistics_is_not_fused_into_a_cycle():
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root, mg.float32, shape=[2, 3, 3, 4])
    one = np.ones(4, F32)
    bn = ops.FusedBatchNormV3(root, x, one, one, np.zeros(0, F32), np.zeros(0, F32))
    side = ops.AddV2(root, x, bn.batch_mean)  # x's shape, read from the batch norm
    relu = ops.Relu(root, ops.AddV2(root, bn.y, side))
    assert _fused_types(root, [relu]) == []
    value = np.random.default_rng(0).standard_normal((2, 3, 3, 4)).astype(F32)
    for backend in BACKENDS:
        _assert_same_bits(mg.ClientSession(root, backend=backend).Run({x: value}, [relu]),
                          mg.ClientSession(root, backend=backend, optimizer=REMAPPER_OFF)
                          .Run({x: value}, [relu]))
