"""The plan-time fusion cannot change a result: random graphs over the fusable ops give the
same bits with ``OptimizerOptions(remapper=True)`` as with it off.

Hypothesis draws DAGs of Conv2D (grouped too), DepthwiseConv2dNative and MatMul heads,
BiasAdd, inference FusedBatchNormV3, AddV2 (of two chains' ends, of a chain and anything, of
a vector), Relu and Relu6, in NHWC or NCHW with odd channel counts, with fan-out, shared
weights, fetched intermediates and control edges; projection-shortcut blocks (both inputs of
an AddV2 end a convolution -> batch-norm chain) are drawn on purpose. Written against the
session's public behaviour only, so it holds whatever the fusion is made of.
"""

from __future__ import annotations

import dataclasses
from unittest import mock

import numpy as np
import pytest
from conftest import NATIVE_AVAILABLE
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import minigraph as mg
from minigraph import ops
from minigraph.optimizer import layout

pytestmark = pytest.mark.skipif(not NATIVE_AVAILABLE, reason="fusion runs on native kernels")
F32 = np.float32
# drawn uniformly: heads and chain stages come often, so chains form
ACTIONS = ("conv", "conv", "grouped", "depthwise", "matmul", "bias", "bias", "bn", "bn", "add",
           "add", "relu", "relu", "relu6", "control", "fetch", "block", "block")


class _Builder:
    """Builds one random graph from the draws of one hypothesis example."""

    def __init__(self, draw, layout: str) -> None:
        self.draw, self.layout = draw, layout
        self.root = mg.Scope.NewRootScope()
        self.rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
        self.tensors: list[mg.Output] = []
        self.fetches: list[mg.Output] = []
        self.weights: dict[tuple, np.ndarray] = {}  # shared between ops of one shape
        self.feeds: dict[mg.Output, np.ndarray] = {}

    # ------------------------------------------------------------------ helpers
    def pick(self, items):
        return self.draw(st.sampled_from(list(items)))

    def channels(self, t: mg.Output) -> int:
        return t.shape[1 if t.shape.rank == 4 and self.layout == "NCHW" else -1]

    def spatial(self, t: mg.Output) -> tuple[int, int]:
        dims = t.shape.as_list()
        return tuple(dims[2:]) if self.layout == "NCHW" else tuple(dims[1:3])

    def weight(self, shape: tuple, positive: bool = False) -> np.ndarray:
        """A constant of ``shape``; sometimes the one an earlier op of that shape used."""
        key = (shape, positive)
        if key in self.weights and self.draw(st.booleans()):
            return self.weights[key]
        value = (self.rng.uniform(0.5, 1.5, shape) if positive
                 else self.rng.standard_normal(shape) * 0.5).astype(F32)
        self.weights[key] = value
        return value

    def four_d(self) -> list[mg.Output]:
        return [t for t in self.tensors if t.shape.rank == 4]

    def add(self, t: mg.Output) -> mg.Output:
        self.tensors.append(t)
        return t

    def strides(self, stride: int) -> list[int]:
        return [1, 1, stride, stride] if self.layout == "NCHW" else [1, stride, stride, 1]

    # ------------------------------------------------------------------ ops
    def conv(self, t: mg.Output, out: int | None = None, size: int | None = None,
             stride: int | None = None, padding: str | None = None) -> mg.Output:
        size = size or self.pick([1, 3])
        stride = stride or self.pick([1, 2])
        if padding is None:
            padding = "SAME" if min(self.spatial(t)) < size else self.pick(["SAME", "VALID"])
        out = out or self.draw(st.integers(1, 9))
        w = self.weight((size, size, self.channels(t), out))
        return self.add(ops.Conv2D(self.root, t, w, self.strides(stride), padding,
                                   data_format=self.layout))

    def grouped(self, t: mg.Output) -> mg.Output:
        """A grouped Conv2D: the filter takes channels / groups inputs per group."""
        c = self.channels(t)
        groups = self.pick([g for g in range(1, c + 1) if c % g == 0])
        w = self.weight((self.pick([1, 3]), 3, c // groups, groups * self.draw(st.integers(1, 3))))
        return self.add(ops.Conv2D(self.root, t, w, self.strides(self.pick([1, 2])), "SAME",
                                   data_format=self.layout))

    def depthwise(self, t: mg.Output) -> mg.Output:
        w = self.weight((3, 3, self.channels(t), self.pick([1, 2])))
        return self.add(ops.DepthwiseConv2dNative(self.root, t, w, self.strides(self.pick([1, 2])),
                                                  "SAME", data_format=self.layout))

    def matmul(self, t: mg.Output) -> mg.Output:
        if t.shape.rank != 2:
            t = ops.Reshape(self.root, t, [t.shape[0], -1])
        w = self.weight((t.shape[1], self.draw(st.integers(1, 9))))
        return self.add(ops.MatMul(self.root, t, w, transpose_a=False, transpose_b=False))

    def bias(self, t: mg.Output) -> mg.Output:
        fmt = self.layout if t.shape.rank == 4 else "NHWC"
        channels = self.channels(t) if t.shape.rank == 4 else t.shape[-1]
        return self.add(ops.BiasAdd(self.root, t, self.weight((channels,)), data_format=fmt))

    def bn(self, t: mg.Output) -> mg.Output:
        c = self.channels(t)
        scale, offset, mean = (self.weight((c,)) for _ in range(3))
        variance = self.weight((c,), positive=True)
        return self.add(ops.FusedBatchNormV3(self.root, t, scale, offset, mean, variance,
                                             epsilon=1e-3, is_training=False,
                                             data_format=self.layout).y)

    def add_op(self, t: mg.Output) -> mg.Output:
        same = [u for u in self.tensors if u.shape == t.shape and u is not t]
        kind = self.pick(["pair", "vector", "fed"] if same else ["vector", "fed"])
        if kind == "pair":
            other = self.pick(same)
        elif kind == "vector":
            other = ops.Const(self.root, self.weight((t.shape[-1],)))
        else:  # a fed skip connection
            other = ops.Placeholder(self.root, mg.float32, shape=t.shape.as_list())
            self.feeds[other] = self.rng.standard_normal(t.shape.as_list()).astype(F32)
        pair = (t, other) if self.draw(st.booleans()) else (other, t)
        return self.add(ops.AddV2(self.root, *pair))

    def control(self, t: mg.Output) -> mg.Output:
        """An Identity of ``t`` that must run after some earlier op (maybe in a chain)."""
        after = self.pick(self.tensors).op
        return self.add(ops.Identity(self.root.WithControlDependencies([after]), t))

    def block(self, t: mg.Output) -> mg.Output:
        """A projection-shortcut block: conv->BN on both inputs of the AddV2, then Relu."""
        out, stride = self.draw(st.integers(1, 9)), self.pick([1, 2])
        branch = self.bn(self.conv(t, out, 3, stride, "SAME"))
        shortcut = self.bn(self.conv(t, out, 1, stride, "SAME"))
        pair = (shortcut, branch) if self.draw(st.booleans()) else (branch, shortcut)
        return self.add(ops.Relu(self.root, ops.AddV2(self.root, *pair)))

    def operand(self, candidates: list[mg.Output]) -> mg.Output:
        """Mostly the newest candidate (chains grow), else any (fan-out)."""
        return candidates[-1] if self.draw(st.integers(0, 2)) else self.pick(candidates)

    def step(self, action: str) -> None:
        four_d = self.four_d()
        t = self.operand(self.tensors)
        if action in ("conv", "grouped", "depthwise", "bn", "block"):
            if not four_d:
                return
            t = self.operand(four_d)
        if action == "fetch":
            self.fetches.append(t)
        elif action == "relu":
            self.add(ops.Relu(self.root, t))
        elif action == "relu6":
            self.add(ops.Relu6(self.root, t))
        elif action == "add":
            self.add_op(t)
        else:
            getattr(self, action)(t)


@st.composite
def random_graphs(draw):
    layout = draw(st.sampled_from(["NHWC", "NHWC", "NCHW"]))
    builder = _Builder(draw, layout)
    n, h, w, c = (draw(st.integers(1, 3)), draw(st.integers(1, 7)), draw(st.integers(1, 7)),
                  draw(st.integers(1, 9)))
    shape = [n, c, h, w] if layout == "NCHW" else [n, h, w, c]
    x = ops.Placeholder(builder.root.WithOpName("x"), mg.float32, shape=shape)
    builder.feeds[x] = (builder.rng.standard_normal(shape) * 2).astype(F32)
    builder.tensors.append(x)
    for action in draw(st.lists(st.sampled_from(ACTIONS), min_size=1, max_size=20)):
        builder.step(action)
    fetches = [builder.tensors[-1], *builder.fetches]
    return builder.root, builder.feeds, list(dict.fromkeys(fetches))


def _run(root, feeds, fetches, remapper: bool, check_outputs: bool, runs: int = 1):
    session = mg.ClientSession(root, backend="native", check_outputs=check_outputs,
                               optimizer=mg.OptimizerOptions(remapper=remapper))
    return [session.Run(feeds, fetches) for _ in range(runs)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_graphs())
def test_fused_and_unfused_plans_agree_bit_for_bit(graph):
    root, feeds, fetches = graph
    [plain] = _run(root, feeds, fetches, remapper=False, check_outputs=True)
    metadata = mg.RunMetadata()
    mg.ClientSession(root, backend="native").Run(feeds, fetches, run_metadata=metadata)
    fused_ops = sum(s.op_type.startswith("_Fused") for s in metadata.step_stats)
    event(f"ops fused: {min(fused_ops, 4)}{'+' if fused_ops >= 4 else ''}")
    # checked in full, then (same signature, outputs unchecked) the kernels called directly
    for check_outputs in (True, False):
        for fused in _run(root, feeds, fetches, True, check_outputs, runs=2):
            for a, b, fetch in zip(fused, plain, fetches):
                assert a.dtype == b.dtype and a.shape == b.shape, fetch.name
                assert a.tobytes() == b.tobytes(), fetch.name


def test_both_chains_of_a_projection_shortcut_fuse_and_each_op_runs_once():
    """conv->BN on both inputs of the AddV2: the AddV2 and Relu join one chain, the other
    chain ends at its batch norm; nothing is dropped or run twice."""
    rng = np.random.default_rng(0)
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[2, 6, 6, 3])

    def conv_bn(name, size):
        h = ops.Conv2D(root.WithOpName(f"{name}_conv"), x,
                       rng.standard_normal((size, size, 3, 5)).astype(F32), [1, 1, 1, 1], "SAME")
        stats = [rng.uniform(0.5, 1.5, 5).astype(F32) for _ in range(4)]
        return ops.FusedBatchNormV3(root.WithOpName(f"{name}_bn"), h, *stats,
                                    is_training=False).y

    y = ops.Relu(root.WithOpName("relu"), ops.AddV2(root.WithOpName("add"), conv_bn("a", 3),
                                                     conv_bn("b", 1)))
    feeds = {x: rng.standard_normal((2, 6, 6, 3)).astype(F32)}
    metadata = mg.RunMetadata()
    fused = mg.ClientSession(root, backend="native").Run(feeds, y, run_metadata=metadata)
    plain = mg.ClientSession(root, backend="native",
                             optimizer=mg.OptimizerOptions(remapper=False)).Run(feeds, y)
    assert fused.tobytes() == plain.tobytes()
    names = [s.node_name for s in metadata.step_stats if s.op_type != "Const"]
    assert sorted(names) == sorted(set(names))  # each op once
    kernels = {s.node_name: s.op_type for s in metadata.step_stats}
    assert kernels["relu"] == kernels["b_bn"] == "_FusedConv2D"  # a_conv -> ... -> relu
    assert {"a_conv", "a_bn", "add", "b_conv"}.isdisjoint(kernels)


def test_optimizer_options_are_checked(monkeypatch):
    root = mg.Scope.NewRootScope()
    with pytest.raises(mg.errors.InvalidArgumentError, match="OptimizerOptions"):
        mg.ClientSession(root, optimizer={"remapper": False})
    monkeypatch.setenv("MINIGRAPH_OPTIMIZER", "off")
    assert mg.ClientSession(root).optimizer == mg.OptimizerOptions.all_off()
    assert not mg.ClientSession(root).optimizer.any_on
    monkeypatch.setenv("MINIGRAPH_OPTIMIZER", "maybe")
    with pytest.raises(mg.errors.InvalidArgumentError, match="MINIGRAPH_OPTIMIZER"):
        mg.ClientSession(root)


# ----------------------------------------------------------------------------- every pass
# The graph passes (minigraph/optimizer/): each alone, and all together, against none, on the
# native and reference backends, bit for bit. The graphs add what the other passes rewrite
# to the fusion graphs above: Identity/IdentityN/StopGradient relays, NoOp control joins,
# duplicated subexpressions, shape subgraphs (Reshape to a Shape, a Sum over Range(Size(Shape)),
# BroadcastGradientArgs through a broadcasting add's gradient), max pools, fed
# intermediates, and sometimes the gradient graph of the whole thing.
PASSES = ("pruning", "identity_removal", "common_subexpression", "constant_folding", "layout",
          "remapper")
PASS_ONLY_ACTIONS = ("identity", "identity_n", "stop_gradient", "noop", "duplicate",
                     "duplicate", "reshape", "reduce", "pool", "pool", "feed", "unused",
                     "pad_conv", "pad_conv", "bn_train", "scale")
PASS_ACTIONS = ACTIONS + PASS_ONLY_ACTIONS


class _PassBuilder(_Builder):
    def identity(self, t: mg.Output) -> mg.Output:
        return self.add(ops.Identity(self.root, t))

    def identity_n(self, t: mg.Output) -> mg.Output:
        other = self.pick(self.tensors)
        outs = ops.IdentityN(self.root, [t, other])
        return self.add(outs.output[self.pick([0, 1])] if hasattr(outs, "output")
                        else outs[self.pick([0, 1])])

    def stop_gradient(self, t: mg.Output) -> mg.Output:
        return self.add(ops.StopGradient(self.root, t))

    def noop(self, t: mg.Output) -> mg.Output:
        """A NoOp joining two earlier ops, that an Identity of ``t`` runs after."""
        after = [self.pick(self.tensors).op, self.pick(self.tensors).op]
        join = ops.NoOp(self.root.WithControlDependencies(after))
        return self.add(ops.Identity(self.root.WithControlDependencies([join]), t))

    def duplicate(self, t: mg.Output) -> mg.Output:
        """The same op on the same input twice, added together (CSE merges the two)."""
        kind = self.pick(["Relu", "Neg", "Square"])
        a, b = getattr(ops, kind)(self.root, t), getattr(ops, kind)(self.root, t)
        return self.add(ops.AddV2(self.root, a, b))

    def reshape(self, t: mg.Output) -> mg.Output:
        """Flattened, then reshaped back to ``Shape(t)``."""
        flat = ops.Reshape(self.root, t, [-1])
        return self.add(ops.Reshape(self.root, flat, ops.Shape(self.root, t)))

    def reduce(self, t: mg.Output) -> mg.Output:
        """t + sum(t) over Range(0, Size(Shape(t))) (every axis), reshaped to Shape(t) (the
        axes are known only once folded: the reshape gives the static shape back)."""
        shape = ops.Shape(self.root, t)
        axes = ops.Range(self.root, ops.Const(self.root, 0), ops.Size(self.root, shape),
                         ops.Const(self.root, 1))
        total = ops.AddV2(self.root, t, ops.Sum(self.root, t, axes))
        return self.add(ops.Reshape(self.root, total, shape))

    def pool(self, t: mg.Output) -> mg.Output:
        """A max or average pool, 2x2 or 3x3, stride 1 or 2, in the graph's layout."""
        if t.shape.rank != 4:
            return t
        size, pool = self.pick([2, 3]), self.pick([ops.MaxPool, ops.AvgPool])
        window = [1, 1, size, size] if self.layout == "NCHW" else [1, size, size, 1]
        return self.add(pool(self.root, t, window, self.strides(self.pick([1, 2])), "SAME",
                             data_format=self.layout))

    def bn_train(self, t: mg.Output) -> mg.Output:
        """A training batch norm (its statistics from the batch)."""
        if t.shape.rank != 4:
            return t
        c = self.channels(t)
        scale, offset = self.weight((c,), positive=True), self.weight((c,))
        empty = np.zeros((0,), F32)
        return self.add(ops.FusedBatchNormV3(self.root, t, scale, offset, empty, empty,
                                             epsilon=1e-3, is_training=True,
                                             data_format=self.layout).y)

    def scale(self, t: mg.Output) -> mg.Output:
        """``t`` times a scalar constant."""
        return self.add(ops.Mul(self.root, t, ops.Const(self.root, F32(self.rng.uniform(-2, 2)))))

    def pad_conv(self, t: mg.Output) -> mg.Output:
        """A zero Pad of the spatial dims, then a VALID Conv2D or depthwise convolution."""
        if t.shape.rank != 4:
            return t
        pads = [[self.draw(st.integers(0, 2)) for _ in range(2)] for _ in range(2)]
        axes = (2, 3) if self.layout == "NCHW" else (1, 2)
        paddings = np.zeros((4, 2), np.int32)
        paddings[list(axes)] = pads
        padded = ops.Pad(self.root, t, paddings)
        size = min(3, *self.spatial(padded))
        strides = self.strides(self.pick([1, 2]))
        if self.draw(st.booleans()):
            w = self.weight((size, size, self.channels(t), self.pick([1, 2])))
            return self.add(ops.DepthwiseConv2dNative(self.root, padded, w, strides, "VALID",
                                                      data_format=self.layout))
        w = self.weight((size, size, self.channels(t), self.draw(st.integers(1, 6))))
        return self.add(ops.Conv2D(self.root, padded, w, strides, "VALID",
                                   data_format=self.layout))

    def feed(self, t: mg.Output) -> mg.Output:
        """Feed an intermediate: its value is the caller's from now on."""
        if t.op.type != "Placeholder" and t.dtype == mg.float32:
            self.feeds[t] = self.rng.standard_normal(t.shape.as_list()).astype(F32)
        return t

    def unused(self, t: mg.Output) -> mg.Output:
        ops.Neg(self.root, t)  # never fetched: pruning drops it
        return t

    def step(self, action: str) -> None:
        if action in PASS_ONLY_ACTIONS:
            getattr(self, action)(self.operand(self.tensors))
        else:
            super().step(action)


@st.composite
def random_pass_graphs(draw, layouts=("NHWC", "NHWC", "NCHW")):
    layout = draw(st.sampled_from(layouts))
    builder = _PassBuilder(draw, layout)
    n, h, w, c = (draw(st.integers(1, 3)), draw(st.integers(1, 6)), draw(st.integers(1, 6)),
                  draw(st.integers(1, 6)))
    shape = [n, c, h, w] if layout == "NCHW" else [n, h, w, c]
    x = ops.Placeholder(builder.root.WithOpName("x"), mg.float32, shape=shape)
    builder.feeds[x] = (builder.rng.standard_normal(shape) * 2).astype(F32)
    builder.tensors.append(x)
    for action in draw(st.lists(st.sampled_from(PASS_ACTIONS), min_size=1, max_size=16)):
        builder.step(action)
    fetches = [builder.tensors[-1], *builder.fetches]
    if draw(st.booleans()):  # the gradient graph too
        fetches += [g for g in mg.AddSymbolicGradients(builder.root, [builder.tensors[-1]], [x])
                    if g is not None]
    fetches = [f for f in dict.fromkeys(fetches)]
    return builder.root, builder.feeds, fetches


def _passes_run(root, feeds, fetches, backend, options):
    session = mg.ClientSession(root, backend=backend, check_outputs=True, optimizer=options)
    return session.Run(feeds, fetches)


@pytest.mark.parametrize("only", [*PASSES, "all"])
@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(graph=random_pass_graphs())
def test_each_pass_keeps_every_fetch_bit_for_bit(only, graph):
    _check_pass(only, graph)


@pytest.mark.parametrize("only", ["layout", "all"])
@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(graph=random_pass_graphs(layouts=("NCHW",)))
def test_layout_pass_keeps_every_fetch_of_nchw_graphs_bit_for_bit(only, graph):
    """NCHW graphs only (conv/BN/ReLU/pool/add stacks, their gradients, fan-out, fetched
    NCHW intermediates, control edges): the layout pass alone and with the others, made to
    convert every op it can (not only where that saves transposes)."""
    with mock.patch.object(layout, "REQUIRE_SAVING", False):
        _check_pass(only, graph)


def _check_pass(only, graph):
    root, feeds, fetches = graph
    off = mg.OptimizerOptions.all_off()
    on = mg.OptimizerOptions() if only == "all" else dataclasses.replace(off, **{only: True})
    rewritten = mg.optimize(root, fetches, feeds, options=on)
    kept = {op.name: op.type for op in rewritten}
    rewrites = sum(kept.get(op.name) != op.type for op in root.graph())
    event(f"nodes dropped or replaced: {'0' if not rewrites else '1-4' if rewrites < 5 else '5+'}")
    if on.layout:
        nhwc = sum(op.attrs.get("data_format") == "NHWC" for op in rewritten)
        event(f"ops run NHWC: {'0' if not nhwc else '1-4' if nhwc < 5 else '5+'}")
    for backend in ("native", "reference"):
        plain = _passes_run(root, feeds, fetches, backend, off)
        optimized = _passes_run(root, feeds, fetches, backend, on)
        for a, b, fetch in zip(optimized, plain, fetches):
            assert a.dtype == b.dtype and a.shape == b.shape, fetch.name
            assert a.tobytes() == b.tobytes(), (backend, fetch.name)


@settings(max_examples=8, deadline=None)
@given(depth=st.integers(1, 3), channels=st.lists(st.integers(1, 7), min_size=5, max_size=5),
       strides=st.lists(st.sampled_from([1, 2]), min_size=4, max_size=4),
       gradient=st.booleans())
def test_nchw_conv_chain_keeps_only_boundary_transposes(depth, channels, strides, gradient):
    """Conv2D -> BiasAdd -> Relu stacks (the last fetched in NCHW; maybe the gradient of a
    sum of squares w.r.t. the input) run NHWC inside: transposes only at the boundaries
    (the input, the fetches, the loss's reduction, which stays NCHW), none between two
    NHWC ops; the fetches keep their names and bits."""
    rng = np.random.default_rng(depth)
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[2, channels[0], 9, 8])
    h = x
    for i in range(depth):
        w = rng.standard_normal((3, 3, channels[i], channels[i + 1])).astype(F32)
        h = ops.Conv2D(root, h, w, [1, 1, strides[i], strides[i]], "SAME", data_format="NCHW")
        h = ops.BiasAdd(root, h, rng.standard_normal(channels[i + 1]).astype(F32),
                        data_format="NCHW")
        h = ops.Relu(root, h)
    fetches = [h]
    if gradient:
        fetches += mg.AddSymbolicGradients(root, [ops.Sum(root, ops.Square(root, h),
                                                          [0, 1, 2, 3])], [x])
    graph = mg.optimize(root, fetches)
    transposes = [op for op in graph if op.type == "Transpose"]
    if not gradient:  # x in, the fetch out
        assert len(transposes) == 2
    inside = {op.name for op in graph if op.attrs.get("data_format") == "NHWC"
              or op.type in ("Relu", "ReluGrad", "Square", "Mul")}
    for t in transposes:
        readers = {c.name for c in t.outputs[0].consumers()}
        assert not (t.inputs[0].op.name in inside and readers and readers <= inside), t.name
        assert t.inputs[0].op.type != "Transpose", t.name  # pairs cancel
    assert {op.name for op in graph} >= {f.op.name for f in fetches}
    feeds = {x: rng.standard_normal(x.shape.as_list()).astype(F32)}
    for backend in ("native", "reference"):
        plain = _passes_run(root, feeds, fetches, backend, mg.OptimizerOptions.all_off())
        optimized = _passes_run(root, feeds, fetches, backend, mg.OptimizerOptions())
        for a, b in zip(optimized, plain):
            assert a.shape == b.shape and a.tobytes() == b.tobytes(), backend
