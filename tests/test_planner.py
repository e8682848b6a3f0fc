"""The memory planner (minigraph/client/planner.py) cannot change a result or a value the
caller can see: random graphs give the same bits with ``OptimizerOptions(memory_planner=
True)`` (values dropped after their last reader, kernels writing into dying inputs) as with
it off, and fed arrays, fetched arrays held across runs and variables are never overwritten.
Peak bytes of intermediates are checked against a hand count.
"""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from conftest import NATIVE_AVAILABLE
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import minigraph as mg
from minigraph import ops
from minigraph.client import planner
from minigraph.client.planner import reusable

F32 = np.float32
UNARY = ("Relu", "Relu6", "Sigmoid", "Tanh", "Elu", "Softsign", "LeakyRelu", "Neg")
BINARY = ("AddV2", "Mul", "Sub", "Maximum")
# aliases (identity, reshape) drawn often: they are what the run-time check must catch
ACTIONS = (*UNARY, *BINARY, "relu_grad", "bias", "vector", "conv", "concat", "concat0", "bn",
           "identity", "identity", "identity", "reshape", "reshape", "fetch", "control",
           "variable", "assign")
BACKENDS = ["native", "reference"] if NATIVE_AVAILABLE else ["reference"]


class _Graph:
    """One random graph over a fed NHWC tensor and a variable, from hypothesis draws."""

    def __init__(self, draw) -> None:
        self.draw = draw
        self.root = mg.Scope.NewRootScope()
        self.rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
        n, h, w = draw(st.integers(1, 2)), draw(st.integers(1, 4)), draw(st.integers(1, 4))
        c = draw(st.integers(1, 5))
        self.nhw = (n, h, w)
        x = ops.Placeholder(self.root.WithOpName("x"), mg.float32, shape=[n, h, w, c])
        self.feeds = {x: self.value((n, h, w, c))}
        var = ops.Variable(self.root.WithOpName("v"), shape=[n, h, w, c], dtype=mg.float32)
        self.init = ops.Assign(self.root, var, self.value((n, h, w, c))).operation
        self.tensors = [x, var]
        self.fetches: list[mg.Output] = []
        self.targets: list[mg.Operation] = []
        self.count = 0

    def value(self, shape) -> np.ndarray:
        return self.rng.standard_normal(shape).astype(F32)

    def scope(self) -> mg.Scope:
        self.count += 1
        return self.root.WithOpName(f"n{self.count}")

    def pick(self, tensors=None) -> mg.Output:
        return self.draw(st.sampled_from(tensors or self.tensors))

    def same_shape(self, t: mg.Output) -> mg.Output:
        return self.pick([u for u in self.tensors if u.shape == t.shape])

    def step(self, action: str) -> None:
        t = self.pick()
        channels = t.shape[-1]
        if action in UNARY:
            out = getattr(ops, action)(self.scope(), t)
        elif action in BINARY:
            u = self.same_shape(t)
            out = getattr(ops, action)(self.scope(), *self.draw(st.permutations([t, u])))
        elif action == "relu_grad":
            out = ops.ReluGrad(self.scope(), t, self.same_shape(t))
        elif action == "bias":
            out = ops.BiasAdd(self.scope(), t, self.value((channels,)))
        elif action == "vector":  # a broadcast operand: the tensor's buffer is the output's
            vector = ops.Const(self.root, self.value((channels,)))
            out = ops.Mul(self.scope(), *self.draw(st.permutations([t, vector])))
        elif action == "conv":
            size = self.draw(st.sampled_from([1, 3]))
            kernel = self.value((size, size, channels, self.draw(st.integers(1, 5))))
            out = ops.Conv2D(self.scope(), t, kernel, strides=[1, 1, 1, 1], padding="SAME")
        elif action == "concat0":  # parts contiguous in the output: written in place
            parts = self.draw(st.lists(st.sampled_from([u for u in self.tensors
                                                        if u.shape == t.shape]),
                                       min_size=1, max_size=2))
            # each part, most often, through an op only the concat reads
            parts = [getattr(ops, self.draw(st.sampled_from(UNARY)))(self.root, u)
                     if self.draw(st.integers(0, 3)) else u for u in (t, *parts)]
            out = ops.ConcatV2(self.scope(), parts, 0)
        elif action == "concat":
            joinable = [u for u in self.tensors if u.shape[:3] == t.shape[:3]]
            parts = self.draw(st.lists(st.sampled_from(joinable), min_size=1, max_size=3))
            out = ops.ConcatV2(self.scope(), [t, *parts], 3)
        elif action == "bn":
            training = self.draw(st.booleans())
            vectors = [self.value((channels,)) for _ in range(2)]
            stats = [] if training else [self.value((channels,)), np.abs(self.value(
                (channels,))) + F32(0.5)]
            out = ops.FusedBatchNormV3(self.scope(), t, *vectors, *(stats or [[], []]),
                                       is_training=training).y
        elif action == "identity":  # an alias of t's buffer
            out = ops.Identity(self.scope(), t)
        elif action == "reshape":  # a view of t's buffer
            out = ops.Reshape(self.scope(), ops.Reshape(self.root, t, [-1]), t.shape.as_list())
        elif action == "fetch":
            self.fetches.append(t)
            return
        elif action == "control":
            after = self.pick().op
            out = ops.Identity(self.scope().WithControlDependencies([after]), t)
        elif action == "variable":  # read the variable again
            out = ops.Identity(self.scope(), self.tensors[1])
        else:  # an intermediate stored into a variable of its shape (the state keeps it)
            var = ops.Variable(self.scope(), shape=t.shape.as_list(), dtype=mg.float32)
            out = ops.Assign(self.root, var, t)
        self.tensors.append(out)


@st.composite
def graphs(draw):
    graph = _Graph(draw)
    for action in draw(st.lists(st.sampled_from(ACTIONS), min_size=3, max_size=14)):
        graph.step(action)
    # every tensor nothing reads is fetched, so that the whole graph runs
    graph.fetches.extend(t for t in graph.tensors[2:] if not t.consumers())
    graph.fetches.append(graph.tensors[-1])
    return graph


# With the planner, run 2 binds the plan (``client/executor.py``), run 3 runs bound (checks
# skipped where they can only pass) and plans its arena, later runs use the arena: sessions
# checking every output never run bound.
RUNS = 6


def _runs(graph: _Graph, backend: str, planner: bool) -> list[list[np.ndarray]]:
    """``RUNS`` runs of the graph with the same fed arrays; checks that neither a fed array,
    nor a fetched one held from an earlier run, nor a variable changed."""
    # (identity_removal off: the graph keeps its Identity aliases)
    session = mg.ClientSession(graph.root, backend=backend, check_outputs=not planner,
                               optimizer=mg.OptimizerOptions(identity_removal=False,
                                                             memory_planner=planner))
    session.Run({}, [], targets=[graph.init])
    fed = {key: value.copy() for key, value in graph.feeds.items()}
    results, held = [], []
    for _ in range(RUNS):
        variables = {name: value.copy() for name, value in session.state.variables.items()}
        fetched = session.Run(graph.feeds, graph.fetches, targets=graph.targets)
        results.append([value.copy() for value in fetched])
        held.append(fetched)
        for name, value in variables.items():
            np.testing.assert_array_equal(session.state.variables[name], value, strict=True)
    for value, copy in zip((v for run in held for v in run),
                           (c for run in results for c in run)):
        np.testing.assert_array_equal(value, copy, strict=True)
    for key, value in graph.feeds.items():
        np.testing.assert_array_equal(value, fed[key], strict=True)
    return results


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph=graphs())
def test_planner_changes_no_bit_and_no_visible_array(backend, graph):
    with mock.patch.object(planner, "MIN_INPLACE_BYTES", 0):  # the graphs' tensors are tiny
        planned = _runs(graph, backend, planner=True)
    plain = _runs(graph, backend, planner=False)
    for first, second in zip(planned, plain):
        for a, b in zip(first, second):
            np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32), strict=True)
    event(f"inputs overwritten by a kernel: {min(_in_place_count(graph, backend), 3)}")


def _in_place_count(graph: _Graph, backend: str) -> int:
    """How many steps of a run wrote into a dying input (for the statistics only)."""
    hits = []

    def counting(*args):
        found = reusable(*args)
        hits.append(found is not None)
        return found

    with mock.patch.object(planner, "reusable", counting), \
            mock.patch.object(planner, "MIN_INPLACE_BYTES", 0):
        _runs(graph, backend, planner=True)
    return sum(hits) // RUNS


def _chain():
    """x (fed, UNIT bytes) -> a = Sigmoid(x) -> b = Relu(a) -> c = Mul(b, x) [fetched]
    -> e = Relu(c) -> f = AddV2(e, c) [fetched]."""
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[UNIT // 4])
    a = ops.Sigmoid(root.WithOpName("a"), x)
    b = ops.Relu(root.WithOpName("b"), a)
    c = ops.Mul(root.WithOpName("c"), b, x)
    e = ops.Relu(root.WithOpName("e"), c)
    f = ops.AddV2(root.WithOpName("f"), e, c)
    return root, x, [c, f]


UNIT = planner.MIN_INPLACE_BYTES  # bytes of each tensor below: enough to be overwritten
# Live bytes per step (a, b, c, e, f), in units of one tensor:
# - planner off: nothing is dropped: 1, 2, 3, 4, 5.
# - dropped after the last reader, no in-place (reference kernels): a; a+b (a dies after b);
#   b+c; c+e (c is fetched: it stays); c+e+f -> 3 tensors at the peak.
# - with in-place (native): b in a's buffer, c in b's, e new (c is fetched), f in e's.
CASES = [("reference", False, [1, 2, 3, 4, 5]), ("reference", True, [1, 2, 2, 2, 3])]
if NATIVE_AVAILABLE:
    CASES += [("native", False, [1, 2, 3, 4, 5]), ("native", True, [1, 1, 1, 2, 2])]


@pytest.mark.parametrize("backend, planner, kib", CASES)
def test_peak_bytes_of_a_chain(backend, planner, kib):
    root, x, fetches = _chain()
    session = mg.ClientSession(root, backend=backend,
                               optimizer=mg.OptimizerOptions(memory_planner=planner))
    feed = {x: np.linspace(-2, 2, UNIT // 4, dtype=F32)}
    first = session.Run(feed, fetches)
    for _ in range(2):  # the same on every run
        metadata = mg.RunMetadata()
        results = session.Run(feed, fetches, run_metadata=metadata)
        assert [s.node_name for s in metadata.step_stats] == ["a", "b", "c", "e", "f"]
        assert [s.live_bytes for s in metadata.step_stats] == [UNIT * k for k in kib]
        assert metadata.peak_bytes == UNIT * max(kib)
        for value, expected in zip(results, first):
            np.testing.assert_array_equal(value, expected, strict=True)
    xs = feed[x].astype(np.float64)
    c = np.maximum(1 / (1 + np.exp(-xs)), 0) * xs
    np.testing.assert_allclose(first[0], c, rtol=1e-6)
    np.testing.assert_allclose(first[1], np.maximum(c, 0) + c, rtol=1e-6)


def test_views_and_aliases_count_once_and_are_never_overwritten():
    """Identity passes t's array on and Reshape views it: t's buffer counts once, and the
    Relu reading t last may not write into it while the alias is still to be read."""
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[4, UNIT // 16])
    t = ops.Neg(root.WithOpName("t"), x)
    alias = ops.Identity(root.WithOpName("alias"), t)
    view = ops.Reshape(root.WithOpName("view"), alias, [UNIT // 4])
    relu = ops.Relu(root.WithOpName("relu"), t)
    later = ops.Tanh(root.WithOpName("later"), view)
    session = mg.ClientSession(root, optimizer=mg.OptimizerOptions(identity_removal=False))
    feed = {x: np.linspace(-1, 1, UNIT // 4, dtype=F32).reshape(4, UNIT // 16)}
    metadata = mg.RunMetadata()
    relu_value, later_value = session.Run(feed, [relu, later], run_metadata=metadata)
    live = {s.node_name: s.live_bytes for s in metadata.step_stats}
    assert live["t"] == live["alias"] == live["view"] == UNIT
    assert live["relu"] == 2 * UNIT  # a new buffer: t's is still read through the view
    np.testing.assert_array_equal(relu_value, np.maximum(-feed[x], 0))
    np.testing.assert_allclose(later_value, np.tanh(feed[x].ravel() * -1), rtol=1e-6)


@pytest.mark.skipif(not NATIVE_AVAILABLE, reason="in-place kernels are native")
def test_a_caller_reference_is_never_overwritten():
    """A fetched array, a fed array and an array a kernel produced and the caller holds
    through a previous fetch are all outside the run's ownership."""
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[UNIT // 4])
    a = ops.Sigmoid(root, x)
    b = ops.Relu(root, a)  # a dies here, unless fetched
    session = mg.ClientSession(root)
    feed = {x: np.linspace(-3, 3, UNIT // 4, dtype=F32)}
    fed = feed[x].copy()
    a_value, b_value = session.Run(feed, [a, b])
    assert not np.shares_memory(a_value, b_value)
    np.testing.assert_array_equal(feed[x], fed)
    relu_of_fed = session.Run({a: feed[x]}, b)  # a fed: Relu may not write into it
    np.testing.assert_array_equal(feed[x], fed)
    np.testing.assert_array_equal(relu_of_fed, np.maximum(fed, 0))


def test_a_bound_plan_still_checks_what_is_new():
    """After runs that bind the plan to a feed signature, a feed of another shape runs every
    check again: a shape that does not fit is refused with the op's message, and one that
    fits gives the right values."""
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[None, None])
    y = ops.Relu(root.WithOpName("y"), ops.Mul(root.WithOpName("scaled"), x,
                                                np.arange(8, dtype=F32)))
    session = mg.ClientSession(root, check_outputs=False)
    for _ in range(3):
        value = session.Run({x: np.ones((2, 8), F32)}, y)
        np.testing.assert_array_equal(value, np.tile(np.arange(8, dtype=F32), (2, 1)))
    with pytest.raises(mg.errors.InvalidArgumentError, match="scaled"):
        session.Run({x: np.ones((2, 9), F32)}, y)
    value = session.Run({x: np.full((3, 1), -1, F32)}, y)
    np.testing.assert_array_equal(value, np.zeros((3, 8), F32))
    value = session.Run({x: np.ones((2, 8), F32)}, y)
    np.testing.assert_array_equal(value, np.tile(np.arange(8, dtype=F32), (2, 1)))


# Live bytes per step (a, b, concat), each input 512 B: the concat's producers write into
# its output, allocated when the first runs; planner off (or a fetched input): a copy.
ZERO_COPY = [("on", [1024, 1024, 1024]), ("off", [512, 1024, 2048]),
             ("fetched", [512, 1024, 2048])]


@pytest.mark.skipif(not NATIVE_AVAILABLE, reason="zero-copy concat joins native kernels")
@pytest.mark.parametrize("axis_shapes", [(0, [2, 64], [2, 64]), (1, [1, 2, 8, 8], [1, 2, 8, 8]),
                                         (-3, [1, 1, 128], [1, 1, 128])])
@pytest.mark.parametrize("mode, live", ZERO_COPY)
def test_concat_producers_write_into_its_output(axis_shapes, mode, live):
    axis, a_shape, b_shape = axis_shapes
    root = mg.Scope.NewRootScope()
    xa = ops.Placeholder(root.WithOpName("xa"), mg.float32, shape=a_shape)
    xb = ops.Placeholder(root.WithOpName("xb"), mg.float32, shape=b_shape)
    a = ops.Relu(root.WithOpName("a"), xa)
    b = ops.Tanh(root.WithOpName("b"), xb)
    c = ops.ConcatV2(root.WithOpName("c"), [a, b], axis)
    session = mg.ClientSession(root, optimizer=mg.OptimizerOptions(
        memory_planner=mode != "off"))
    rng = np.random.default_rng(0)
    feeds = {xa: rng.standard_normal(a_shape).astype(F32),
             xb: rng.standard_normal(b_shape).astype(F32)}
    fetches = [c, a] if mode == "fetched" else [c]
    held = held_copy = None
    for _ in range(3):
        metadata = mg.RunMetadata()
        value = session.Run(feeds, fetches, run_metadata=metadata)[0]
        assert [s.live_bytes for s in metadata.step_stats if s.op_type != "Const"] == live
        expected = np.concatenate([np.maximum(feeds[xa], 0), np.tanh(feeds[xb])], axis)
        np.testing.assert_allclose(value, expected, rtol=1e-6, atol=1e-7)
        if held is not None:  # a later run never writes into an array it returned
            np.testing.assert_array_equal(held, held_copy, strict=True)
            assert not np.shares_memory(held, value)
        held, held_copy = value, value.copy()


def _isas() -> list[str]:
    if not NATIVE_AVAILABLE:
        return []
    from minigraph.backends import native

    return [isa for isa in native.ISAS
            if native.ISAS.index(isa) <= native.ISAS.index(native.best_isa())]


@pytest.mark.parametrize("isa", _isas())
def test_every_in_place_kernel_gives_its_out_of_place_bits(isa):
    """Each native kernel registered with ``inplace`` writes, into each of those inputs, the
    bits it returns in a fresh array: tails of every vector width, broadcast operands,
    non-finite values, on every instruction set."""
    from minigraph.backends import native
    from minigraph.backends.registry import KernelContext, registered_kernels

    before = native.isa()
    native.set_isa(isa)
    rng = np.random.default_rng(7)
    try:
        kernels = [k for k in registered_kernels() if k.backend == "native" and k.inplace]
        assert {"Relu", "ReluGrad", "AddV2", "Mul", "Tanh"} <= {k.op_type for k in kernels}
        for kernel_def in kernels:
            cases = ([((5, 19), (19,)), ((3, 1, 33), (33,)), ((2, 37), (37,))]
                     if kernel_def.op_type == "BiasAdd"  # rank >= 2, a channel vector
                     else [((37,), (37,)), ((5, 19), (19,)), ((3, 1, 33), (3, 1, 33))])
            for shape, other in cases:
                root = mg.Scope.NewRootScope()
                list_input = kernel_def.op_type == "AddN"  # one list: three summands
                count = 3 if list_input else len(
                    getattr(ops, kernel_def.op_type).op_def.inputs)
                if list_input or kernel_def.op_type.endswith("Grad"):  # one shape
                    other = shape
                shapes = [shape] + [other] * (count - 1)
                holders = [ops.Placeholder(root, mg.float32, shape=s) for s in shapes]
                op = (ops.AddN(root, holders) if list_input
                      else getattr(ops, kernel_def.op_type)(root, *holders)).op
                values = [rng.standard_normal(s).astype(F32) * 4 for s in shapes]
                values[0].ravel()[:3] = [np.nan, np.inf, -np.inf]
                ctx = KernelContext("native", None)
                [expected] = kernel_def.kernel(op, [v.copy() for v in values], ctx)
                for index in kernel_def.inplace:
                    if shapes[index] != expected.shape:
                        continue
                    inputs = [v.copy() for v in values]
                    [result] = kernel_def.kernel(op, inputs, ctx, out=inputs[index])
                    assert result is inputs[index], (kernel_def.op_type, index)
                    np.testing.assert_array_equal(result.view(np.uint32),
                                                  expected.view(np.uint32), strict=True)
    finally:
        native.set_isa(before)
