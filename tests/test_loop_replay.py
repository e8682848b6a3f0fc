"""A loop body replayed over buffers of its own (``client/replay.py``), as ``WhileLoop``
(``client/loops.py``) runs it once the body's plan is bound.

Every case runs a session that binds (``check_outputs=False``: the suite's default sessions
check every kernel's output and never bind, so they never replay) and checks, with a spy on
:meth:`LoopReplay.step`, that iterations were replayed, then compares each output bit for bit
with a session that runs every step unbound (``OptimizerOptions.all_off()``) and, where a
formula is at hand, with numpy:

* generated loops (hypothesis): 1-3 carried variables of shape [B, C] and a counter, bodies of
  every op the replay makes its own call for (matmuls with a frozen weight or one sliced from
  it in the body, which runs once, fused with a bias that changes at every step, BiasAdd,
  the activations and arithmetic of elementwise groups, Split and ConcatV2, SelectV2 on a
  comparison, Tile, a GatherV2 of the step's row of a fed sequence) and of ops it runs as
  kernels; variables passed on unchanged, swapped or written to a list; many runs with other
  values and trip counts;
* an LSTM cell against float64 formulas, its written list's items from the replay's buffers
  (each row its own); convolutions with a fused bias and residual on both of their routes;
* an index out of range in the middle of a replayed loop (the op's own error, and the next run
  is right);
* a fed invariant that changes from run to run, other thread counts, several threads at once;
* bodies the replay refuses (a variable that grows, a random op, values beyond its memory
  cap): the same values as without it, the random stream included;
* the Keras zoo's recurrent layers (TensorFlow's frozen graphs, ``oracle``).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from conftest import NATIVE_AVAILABLE, counting_replays, wrong_from_threads
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_while_loops import FLOAT, INT32, VARIANT, add, const, enter, next_value, variable

import minigraph as mg
from minigraph.backends import native
from minigraph.client import replay as replay_module
from minigraph.framework.errors import InvalidArgumentError
from minigraph.interop import protos

pytestmark = pytest.mark.skipif(not NATIVE_AVAILABLE, reason="the native kernels' replays")


def sessions(graph: Any) -> tuple[mg.ClientSession, mg.ClientSession]:
    """A binding session (it replays) and one running every step unbound, same graph."""
    root = mg.import_graph_def(graph)
    return (mg.ClientSession(root, backend="native", check_outputs=False),
            mg.ClientSession(root, backend="native", check_outputs=False,
                             optimizer=mg.OptimizerOptions.all_off()))


def assert_same_bits(got: list, expected: list, what: str = "") -> None:
    for index, (a, b) in enumerate(zip(got, expected)):
        assert (a.dtype, a.shape) == (b.dtype, b.shape), f"{what} output {index}"
        assert a.tobytes() == b.tobytes(), f"{what} output {index}"


# ----------------------------------------------------------------------------- generated loops


class Body:
    """A loop frame under construction: the counter ``i < n``, carried [B, C] float32
    variables, invariants (a fed sequence ``seq`` [T, B, C], frozen weights) and the body's
    nodes, named uniquely."""

    def __init__(self, count: int, channels: int, rng: np.random.Generator) -> None:
        self.graph, self.channels, self.rng = protos.GraphDef(), channels, rng
        self.weights: dict[str, np.ndarray] = {}  # entered name -> value
        self.names = itertools.count()
        graph = self.graph
        add(graph, "n", "Placeholder", dtype=("type", INT32))
        add(graph, "seq", "Placeholder", dtype=("type", FLOAT))
        const(graph, "zero", np.int32(0))
        enter(graph, "loop/n", "n", INT32, constant=True)
        enter(graph, "loop/seq", "seq", FLOAT, constant=True)
        variable(graph, "i", "zero", INT32)
        for k in range(count):
            add(graph, f"x{k}", "Placeholder", dtype=("type", FLOAT))
            variable(graph, f"v{k}", f"x{k}", FLOAT)
        add(graph, "loop/less", "Less", ["loop/i/merge", "loop/n"], T=("type", INT32))
        add(graph, "loop/cond", "LoopCond", ["loop/less"])
        self.inner_const("one", np.int32(1))
        add(graph, "loop/i_next", "AddV2", ["loop/i/body", "loop/one"], T=("type", INT32))
        next_value(graph, "i", "loop/i_next", INT32)

    def name(self, kind: str) -> str:
        return f"loop/{kind}{next(self.names)}"

    def inner_const(self, name: str, value: np.ndarray) -> str:
        const(self.graph, f"loop/{name}", value, ["^loop/i/body"])
        return f"loop/{name}"

    def weight(self, shape: tuple[int, ...]) -> str:
        """A frozen constant entering the frame as an invariant."""
        outer = f"w{next(self.names)}"
        value = self.rng.uniform(-1, 1, shape).astype(np.float32)
        const(self.graph, outer, value)
        enter(self.graph, f"loop/{outer}", outer, FLOAT, constant=True)
        self.weights[f"loop/{outer}"] = value
        return f"loop/{outer}"

    def op(self, op: str, inputs: list[str], **attrs: Any) -> str:
        name = self.name(op.lower())
        add(self.graph, name, op, inputs, **attrs)
        return name


def expression(draw: Any, body: Body, count: int, depth: int) -> str:
    """A [B, C] float32 node of the body drawn from its variables and the step's row."""
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        k = draw(st.integers(-1, count - 1))
        if k >= 0:
            return f"loop/v{k}/body"
        axis = body.inner_const(f"axis{next(body.names)}", np.int32(0))
        return body.op("GatherV2", ["loop/seq", "loop/i/body", axis],
                       Tparams=("type", FLOAT), Tindices=("type", INT32),
                       Taxis=("type", INT32), batch_dims=0)
    kind = draw(st.sampled_from(["unary", "binary", "matmul", "sliced", "bias", "moving_bias",
                                 "split", "select", "tile", "copy"]))
    a = expression(draw, body, count, depth - 1)
    f32 = {"T": ("type", FLOAT)}
    if kind == "unary":
        return body.op(draw(st.sampled_from(["Tanh", "Sigmoid", "Relu", "Neg"])), [a], **f32)
    if kind == "binary":
        b = expression(draw, body, count, depth - 1)
        return body.op(draw(st.sampled_from(["AddV2", "Sub", "Mul", "Maximum"])), [a, b],
                       **f32)
    if kind == "matmul":
        c = body.channels
        return body.op("MatMul", [a, body.weight((c, c))], transpose_a=False,
                       transpose_b=draw(st.booleans()), **f32)
    if kind == "sliced":  # a weight sliced in the body from a frozen one: run once, kept
        c = body.channels
        begin = body.inner_const(f"begin{next(body.names)}",
                                 np.int32([0, draw(st.integers(0, c))]))
        size = body.inner_const(f"size{next(body.names)}", np.int32([c, c]))
        weight = body.op("Slice", [body.weight((c, 2 * c)), begin, size], T=("type", FLOAT),
                         Index=("type", INT32))
        return body.op("MatMul", [a, weight], transpose_a=False, transpose_b=False, **f32)
    if kind == "moving_bias":  # a fused matmul's bias that changes from step to step
        c = body.channels
        mean = body.op("Mean", [expression(draw, body, count, depth - 1),
                                body.inner_const(f"axes{next(body.names)}", np.int32([0]))],
                       keep_dims=False, Tidx=("type", INT32), **f32)
        product = body.op("MatMul", [a, body.weight((c, c))], transpose_a=False,
                          transpose_b=False, **f32)
        return body.op("BiasAdd", [product, mean], data_format="NHWC", **f32)
    if kind == "bias":
        return body.op("BiasAdd", [a, body.weight((body.channels,))], data_format="NHWC",
                       **f32)
    if kind == "split":  # the halves swapped: Split, then ConcatV2
        axis = body.inner_const(f"axis{next(body.names)}", np.int32(1))
        split = body.op("Split", [axis, a], num_split=2, **f32)
        return body.op("ConcatV2", [f"{split}:1", split, axis], N=2, Tidx=("type", INT32),
                       **f32)
    if kind == "select":  # SelectV2 on Greater, the condition one column or whole
        b = expression(draw, body, count, depth - 1)
        left = a
        if draw(st.booleans()):
            begin = body.inner_const(f"begin{next(body.names)}", np.int32([0, 0]))
            size = body.inner_const(f"size{next(body.names)}", np.int32([-1, 1]))
            left = body.op("Slice", [a, begin, size], T=("type", FLOAT), Index=("type", INT32))
        condition = body.op("Greater", [left, body.op("Neg", [left], **f32)], **f32)
        return body.op("SelectV2", [condition, a, b], **f32)
    if kind == "tile":  # the first half of the columns twice
        begin = body.inner_const(f"begin{next(body.names)}", np.int32([0, 0]))
        size = body.inner_const(f"size{next(body.names)}", np.int32([-1, body.channels // 2]))
        half = body.op("Slice", [a, begin, size], T=("type", FLOAT), Index=("type", INT32))
        multiples = body.inner_const(f"multiples{next(body.names)}", np.int32([1, 2]))
        return body.op("Tile", [half, multiples], T=("type", FLOAT), Tmultiples=("type", INT32))
    return body.op("Identity", [a], **f32)  # a kernel the replay runs as it is


@st.composite
def generated_loops(draw: Any) -> tuple[Any, int, int, int]:
    """``(graph, count, batch, channels)``: a loop over the counter with ``count`` carried
    variables ``x0..`` -> ``out0..``, each next value a drawn expression, a variable passed
    on unchanged or another's value (a swap); and a list of one expression per step."""
    count = draw(st.integers(1, 3))
    batch, channels = draw(st.integers(1, 3)), 2 * draw(st.integers(1, 40))
    body = Body(count, channels, np.random.default_rng(draw(st.integers(0, 2**16))))
    for k in range(count):
        how = draw(st.sampled_from(["expression", "expression", "unchanged", "other"]))
        if how == "unchanged":
            source = f"loop/v{k}/body"
        elif how == "other":
            source = f"loop/v{draw(st.integers(0, count - 1))}/body"
        else:
            source = expression(draw, body, count, 3)
        next_value(body.graph, f"v{k}", source, FLOAT)
        add(body.graph, f"out{k}", "Identity", [f"loop/v{k}/exit"], T=("type", FLOAT))
    const(body.graph, "item_shape", np.int32(-1))
    add(body.graph, "reserve", "TensorListReserve", ["item_shape", "n"],
        element_dtype=("type", FLOAT), shape_type=("type", INT32))
    variable(body.graph, "list", "reserve", VARIANT)
    item = expression(draw, body, count, 2)
    add(body.graph, "loop/set", "TensorListSetItem", ["loop/list/body", "loop/i/body", item],
        element_dtype=("type", FLOAT))
    next_value(body.graph, "list", "loop/set", VARIANT)
    const(body.graph, "stack_shape", np.int32(-1))
    add(body.graph, "stacked", "TensorListStack", ["loop/list/exit", "stack_shape"],
        element_dtype=("type", FLOAT))
    add(body.graph, "count", "Identity", ["loop/i/exit"], T=("type", INT32))
    return body.graph, count, batch, channels


def loop_feeds(rng: np.random.Generator, count: int, batch: int, channels: int,
               steps: int) -> dict[str, np.ndarray]:
    feeds = {f"x{k}:0": rng.uniform(-1, 1, (batch, channels)).astype(np.float32)
             for k in range(count)}
    feeds["seq:0"] = rng.uniform(-1, 1, (max(steps, 1), batch, channels)).astype(np.float32)
    feeds["n:0"] = np.int32(steps)
    return feeds


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(generated_loops(), st.integers(0, 2**16))
def test_generated_loops_replay_the_unbound_bits(loop, seed):
    graph, count, batch, channels = loop
    fetches = [f"out{k}:0" for k in range(count)] + ["stacked:0", "count:0"]
    replaying, unbound = sessions(graph)
    rng = np.random.default_rng(seed)
    with counting_replays() as replayed:
        for run, steps in enumerate([5, 5, 6, 1, 9, 2]):
            feeds = loop_feeds(rng, count, batch, channels, steps)
            got = replaying.Run(feeds, fetches)
            assert int(got[-1]) == steps
            assert_same_bits(got, unbound.Run(feeds, fetches), f"run {run}")
    assert replayed  # the first run binds the body (two iterations), the others replay it


# ----------------------------------------------------------------------------- fixed cases


def lstm_like_loop() -> Any:
    """``h, c`` over the rows of ``seq`` [T, B, 8] with an LSTM cell (gates i, f, g, o of
    MatMul(x_t, W) + MatMul(h, U) + b), writing h to a list each step."""
    body = Body(2, 8, np.random.default_rng(7))
    f32 = {"T": ("type", FLOAT)}
    axis0 = body.inner_const("axis0", np.int32(0))
    x_t = body.op("GatherV2", ["loop/seq", "loop/i/body", axis0], Tparams=("type", FLOAT),
                  Tindices=("type", INT32), Taxis=("type", INT32), batch_dims=0)
    w, u, b = body.weight((8, 32)), body.weight((8, 32)), body.weight((32,))
    z = body.op("AddV2", [body.op("MatMul", [x_t, w], transpose_a=False, transpose_b=False,
                                  **f32),
                          body.op("MatMul", ["loop/v0/body", u], transpose_a=False,
                                  transpose_b=False, **f32)], **f32)
    z = body.op("BiasAdd", [z, b], data_format="NHWC", **f32)
    axis1 = body.inner_const("axis1", np.int32(1))
    gates = body.op("Split", [axis1, z], num_split=4, **f32)
    i, f, g, o = (f"{gates}:{k}" if k else gates for k in range(4))
    c = body.op("AddV2", [body.op("Mul", [body.op("Sigmoid", [f], **f32), "loop/v1/body"],
                                  **f32),
                          body.op("Mul", [body.op("Sigmoid", [i], **f32),
                                          body.op("Tanh", [g], **f32)], **f32)], **f32)
    h = body.op("Mul", [body.op("Sigmoid", [o], **f32), body.op("Tanh", [c], **f32)], **f32)
    graph = body.graph
    next_value(graph, "v0", h, FLOAT)
    next_value(graph, "v1", c, FLOAT)
    for k in range(2):
        add(graph, f"out{k}", "Identity", [f"loop/v{k}/exit"], T=("type", FLOAT))
    const(graph, "item_shape", np.int32(-1))
    add(graph, "reserve", "TensorListReserve", ["item_shape", "n"],
        element_dtype=("type", FLOAT), shape_type=("type", INT32))
    variable(graph, "list", "reserve", VARIANT)
    add(graph, "loop/set", "TensorListSetItem", ["loop/list/body", "loop/i/body", h],
        element_dtype=("type", FLOAT))
    next_value(graph, "list", "loop/set", VARIANT)
    const(graph, "stack_shape", np.int32(-1))
    add(graph, "stacked", "TensorListStack", ["loop/list/exit", "stack_shape"],
        element_dtype=("type", FLOAT))
    return graph, [body.weights[name] for name in (w, u, b)]


def lstm_reference(seq: np.ndarray, h: np.ndarray, c: np.ndarray, w: np.ndarray,
                   u: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The LSTM loop in float64."""
    sigmoid = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    h, c = h.astype(np.float64), c.astype(np.float64)
    rows = []
    for x_t in seq.astype(np.float64):
        i, f, g, o = np.split(x_t @ w + h @ u + b, 4, axis=1)
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        h = sigmoid(o) * np.tanh(c)
        rows.append(h)
    return h, c, np.stack(rows)


@pytest.mark.parametrize("batch, steps", [(1, 7), (3, 12), (2, 1)])
def test_lstm_cell_loop_against_float64(replayed_steps, batch, steps):
    graph, weights = lstm_like_loop()
    replaying, unbound = sessions(graph)
    rng = np.random.default_rng(batch * 100 + steps)
    fetches = ["out0:0", "out1:0", "stacked:0"]
    for _ in range(4):
        feeds = loop_feeds(rng, 2, batch, 8, steps)
        got = replaying.Run(feeds, fetches)
        assert_same_bits(got, unbound.Run(feeds, fetches))
        expected = lstm_reference(feeds["seq:0"][:steps], feeds["x0:0"], feeds["x1:0"],
                                  *weights)
        for a, b in zip(got, expected):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        assert len({row.tobytes() for row in got[2]}) == steps  # each row its own
    assert replayed_steps


def test_index_out_of_range_in_a_replayed_loop_raises_the_ops_error(replayed_steps):
    graph, _ = lstm_like_loop()
    replaying, unbound = sessions(graph)
    rng = np.random.default_rng(3)
    fetches = ["out0:0", "stacked:0"]
    good = loop_feeds(rng, 2, 2, 8, 9)
    replaying.Run(good, fetches)
    replaying.Run(good, fetches)
    bad = dict(good, **{"n:0": np.int32(14)})  # rows 9..13 do not exist
    errors = []
    for session in (replaying, unbound):
        with pytest.raises(InvalidArgumentError) as raised:
            session.Run(bad, fetches)
        errors.append(str(raised.value))
    assert "indices = 9 is not in [0, 9)" in errors[0]
    assert errors[0] == errors[1]
    assert replayed_steps
    assert_same_bits(replaying.Run(good, fetches), unbound.Run(good, fetches))


def test_fed_invariant_changes_from_run_to_run_and_threads_change(replayed_steps):
    graph, _ = lstm_like_loop()
    replaying, unbound = sessions(graph)
    rng = np.random.default_rng(11)
    threads = native.num_threads()
    try:
        for run in range(6):
            native.set_num_threads(1 + run % 2)
            feeds = loop_feeds(rng, 2, 2, 8, 6)
            assert_same_bits(replaying.Run(feeds, ["out0:0", "stacked:0"]),
                             unbound.Run(feeds, ["out0:0", "stacked:0"]), f"run {run}")
    finally:
        native.set_num_threads(threads)
    assert replayed_steps


def test_loops_replay_from_several_threads_at_once(replayed_steps):
    graph, _ = lstm_like_loop()
    replaying, unbound = sessions(graph)
    rng = np.random.default_rng(5)
    feeds = [loop_feeds(rng, 2, 1 + k % 3, 8, 3 + k) for k in range(6)]
    fetches = ["out0:0", "out1:0", "stacked:0"]
    expected = [unbound.Run(f, fetches) for f in feeds]

    def right(k: int) -> bool:
        got = replaying.Run(feeds[k], fetches)
        return all(a.tobytes() == b.tobytes() for a, b in zip(got, expected[k]))

    assert wrong_from_threads(right, len(feeds)) == []
    assert replayed_steps


def conv_loop(channels: int, size: int, rng: np.random.Generator) -> tuple[Any, dict]:
    """``a, b`` [N, 5, 6, C] over the counter: ``a = tanh(conv(a, W) + bias + b)``,
    ``b = relu(conv(a_old, V))``, SAME, stride 1 (the remapper fuses the bias and the
    residual into the convolutions, which the replay runs on the GEMM or the direct route
    by their channels)."""
    body = Body(2, channels, rng)
    f32 = {"T": ("type", FLOAT)}
    conv = {"strides": [1, 1, 1, 1], "padding": "SAME", "data_format": "NHWC",
            "dilations": [1, 1, 1, 1], **f32}
    w, v = (body.weight((size, size, channels, channels)) for _ in range(2))
    bias = body.weight((channels,))
    z = body.op("BiasAdd", [body.op("Conv2D", ["loop/v0/body", w], **conv), bias],
                data_format="NHWC", **f32)
    a = body.op("Tanh", [body.op("AddV2", [z, "loop/v1/body"], **f32)], **f32)
    b = body.op("Relu", [body.op("Conv2D", ["loop/v0/body", v], **conv)], **f32)
    next_value(body.graph, "v0", a, FLOAT)
    next_value(body.graph, "v1", b, FLOAT)
    for k in range(2):
        add(body.graph, f"out{k}", "Identity", [f"loop/v{k}/exit"], T=("type", FLOAT))
    return body.graph, {"w": body.weights[w], "v": body.weights[v], "bias": body.weights[bias]}


def conv_same(x: np.ndarray, f: np.ndarray) -> np.ndarray:
    """SAME, stride 1 cross-correlation in float64."""
    kh, kw = f.shape[:2]
    top, left = (kh - 1) // 2, (kw - 1) // 2
    padded = np.pad(x, ((0, 0), (top, kh - 1 - top), (left, kw - 1 - left), (0, 0)))
    out = np.zeros(x.shape[:3] + (f.shape[3],))
    for i in range(kh):
        for j in range(kw):
            out += padded[:, i:i + x.shape[1], j:j + x.shape[2]] @ f[i, j]
    return out


@pytest.mark.parametrize("channels, size", [(3, 3), (16, 1), (64, 1), (24, 3)])
def test_convolution_loop_against_float64(replayed_steps, channels, size):
    rng = np.random.default_rng(channels)
    graph, weights = conv_loop(channels, size, rng)
    replaying, unbound = sessions(graph)
    for run in range(4):
        steps = 3 + run % 2
        a, b = (rng.uniform(-1, 1, (2, 5, 6, channels)).astype(np.float32) for _ in range(2))
        feeds = {"x0:0": a, "x1:0": b, "seq:0": np.zeros((1, 1), np.float32),
                 "n:0": np.int32(steps)}
        got = replaying.Run(feeds, ["out0:0", "out1:0"])
        assert_same_bits(got, unbound.Run(feeds, ["out0:0", "out1:0"]), f"run {run}")
        a, b = a.astype(np.float64), b.astype(np.float64)
        for _ in range(steps):
            a, b = (np.tanh(conv_same(a, weights["w"]) + weights["bias"] + b),
                    np.maximum(conv_same(a, weights["v"]), 0))
        # float32 sums of channels * size**2 terms of magnitude <= 1, steps deep
        atol = steps * channels * size * size * 2.0**-24 * 4
        np.testing.assert_allclose(got[0], a, rtol=1e-5, atol=atol)
        np.testing.assert_allclose(got[1], b, rtol=1e-5, atol=atol)
    assert replayed_steps


def test_a_variable_that_grows_is_not_replayed_and_runs_right(replayed_steps):
    """``a = concat(a, a[:, :1])`` each step: its shape changes, so the body is not
    replayed (nor bound past its first shapes) and the loop gives numpy's values."""
    body = Body(1, 2, np.random.default_rng(0))
    axis = body.inner_const("axis", np.int32(1))
    begin, size = body.inner_const("begin", np.int32([0, 0])), body.inner_const(
        "size", np.int32([-1, 1]))
    first = body.op("Slice", ["loop/v0/body", begin, size], T=("type", FLOAT),
                    Index=("type", INT32))
    grown = body.op("ConcatV2", ["loop/v0/body", first, axis], N=2, T=("type", FLOAT),
                    Tidx=("type", INT32))
    next_value(body.graph, "v0", grown, FLOAT)
    add(body.graph, "out0", "Identity", ["loop/v0/exit"], T=("type", FLOAT))
    # the shape invariant is relaxed as TF's shape_invariants would: unknown channels
    replaying, unbound = sessions(body.graph)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for steps in (4, 5, 4):
        feeds = {"x0:0": x, "seq:0": np.zeros((1, 2, 3), np.float32), "n:0": np.int32(steps)}
        got = replaying.Run(feeds, "out0:0")
        np.testing.assert_array_equal(got, np.concatenate([x] + [x[:, :1]] * steps, axis=1))
        assert got.tobytes() == unbound.Run(feeds, "out0:0").tobytes()
    assert not replayed_steps


def test_a_body_whose_values_exceed_the_memory_cap_is_not_replayed(replayed_steps,
                                                                   monkeypatch):
    graph, _ = lstm_like_loop()
    replaying, unbound = sessions(graph)
    feeds = loop_feeds(np.random.default_rng(2), 2, 2, 8, 6)
    monkeypatch.setattr(replay_module, "MAX_BYTES", 1000)  # the LSTM's values take more
    for _ in range(3):
        assert_same_bits(replaying.Run(feeds, ["out0:0", "stacked:0"]),
                         unbound.Run(feeds, ["out0:0", "stacked:0"]))
    assert not replayed_steps
    monkeypatch.setattr(replay_module, "MAX_BYTES", 1 << 24)
    replaying, _ = sessions(graph)
    for _ in range(3):
        replaying.Run(feeds, ["out0:0", "stacked:0"])
    assert replayed_steps


def test_a_random_op_in_the_body_is_not_replayed_and_keeps_its_stream(replayed_steps):
    body = Body(1, 4, np.random.default_rng(0))
    shape = body.inner_const("shape", np.int32([2, 4]))
    noise = body.op("RandomUniform", [shape], dtype=("type", FLOAT), T=("type", INT32),
                    seed=1, seed2=2)
    next_value(body.graph, "v0", body.op("AddV2", ["loop/v0/body", noise],
                                         T=("type", FLOAT)), FLOAT)
    add(body.graph, "out0", "Identity", ["loop/v0/exit"], T=("type", FLOAT))
    replaying, unbound = sessions(body.graph)
    feeds = {"x0:0": np.zeros((2, 4), np.float32), "seq:0": np.zeros((1, 2, 4), np.float32),
             "n:0": np.int32(5)}
    for _ in range(4):
        assert replaying.Run(feeds, "out0:0").tobytes() == unbound.Run(feeds,
                                                                       "out0:0").tobytes()
    assert not replayed_steps


# ----------------------------------------------------------------------------- Keras layers


@pytest.mark.oracle
@pytest.mark.parametrize("name", ["lstm", "gru", "simple_rnn", "bidirectional", "conv_lstm2d",
                                  "stacked_recurrent", "masked_lstm"])
def test_keras_recurrent_layers_replay_the_unbound_bits(replayed_steps, name):
    from minigraph.testing import keras_zoo

    try:
        graph = keras_zoo.load(name)
    except ImportError as error:
        pytest.skip(f"{name} is not cached and TensorFlow is needed to freeze it: {error}")
    replaying, unbound = sessions(graph.graph_def)
    rng = np.random.default_rng(1)
    for run in range(4):
        feeds = {key: (value if value.dtype.kind in "iu"
                       else rng.uniform(-2, 2, value.shape).astype(value.dtype))
                 for key, value in graph.feeds.items()}
        assert_same_bits(replaying.Run(feeds, graph.fetches),
                         unbound.Run(feeds, graph.fetches), f"{name} run {run}")
    assert replayed_steps


# ----------------------------------------------------------------------------- the slab


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.lists(st.integers(0, 30), max_size=3),
                          st.lists(st.integers(0, 5000), min_size=1, max_size=3)),
                min_size=1, max_size=25),
       st.sets(st.integers(0, 80), max_size=10))
def test_slab_places_never_overlap_while_both_values_live(entries, kept):
    """``replay._slab_layout`` over generated programs: entry i reads earlier results
    (indices into them) and writes new ones of drawn sizes. Two values whose lifetimes (from
    the entry writing one to the last reading it) overlap never share a byte, an entry's
    results never share its inputs' bytes (its last read included), kept values and empty
    ones get no place, every place is aligned and inside the slab."""
    program, registers, written_at = [], [], {}
    for i, (reads, sizes) in enumerate(entries):
        ins = tuple(sorted({r % len(registers) for r in reads})) if registers else ()
        outs = []
        for nbytes in sizes:
            written_at[len(registers)] = i
            outs.append(len(registers))
            registers.append(np.empty(nbytes, np.uint8))
        program.append((0, None, None, None, ins, tuple(outs), (), None))
    offsets, size = replay_module._slab_layout(program, registers, kept)
    last = {r: i for i, entry in enumerate(program) for r in entry[4]}
    assert all(r not in offsets for r in kept) and all(
        registers[r].nbytes for r in offsets)
    assert all(r in offsets for r in range(len(registers))
               if r not in kept and registers[r].nbytes)
    span = {r: (written_at[r], last.get(r, written_at[r])) for r in offsets}
    for r, offset in offsets.items():
        assert offset % replay_module.SLAB_ALIGN == 0 and offset + registers[r].nbytes <= size
    for a in offsets:
        for b in offsets:
            if a < b and span[a][0] <= span[b][1] and span[b][0] <= span[a][1]:
                assert (offsets[a] + registers[a].nbytes <= offsets[b]
                        or offsets[b] + registers[b].nbytes <= offsets[a]), (a, b)
