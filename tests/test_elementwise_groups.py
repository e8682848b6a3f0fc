"""Elementwise groups (minigraph/client/elementwise_groups.py, kernels_c/elementwise_program.*):
a bound plan runs each group of native float32 elementwise steps as one pass. Every value
must be bit for bit what the steps give one by one (their own native kernels), on generated
programs and graphs, with scalars, bias rows, views and fetched intermediates, and the plan
must fall back to the steps where the program does not take an input."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import NATIVE_AVAILABLE
from hypothesis import given, settings
from hypothesis import strategies as st

import minigraph as mg
from minigraph import ops

pytestmark = pytest.mark.skipif(not NATIVE_AVAILABLE, reason="native elementwise programs")

F32 = np.float32
GROUPED = mg.OptimizerOptions()
UNGROUPED = mg.OptimizerOptions(elementwise_groups=False)
UNARY = ["Relu", "Relu6", "Sigmoid", "Tanh", "Elu", "Selu", "Softplus", "Softsign", "LeakyRelu",
         "Erf", "Erfc", "Neg", "Abs", "Square", "Sqrt", "Rsqrt", "Reciprocal"]
BINARY = ["AddV2", "Sub", "Mul", "RealDiv", "Maximum", "Minimum", "SquaredDifference"]
GRADS = ["ReluGrad", "Relu6Grad"]
SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 3e38, -3e38, 6.0,
                     -6.0, 88.0, -88.0, 1e-8], F32)


def _values(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Normal values at several scales, some of them the specials."""
    x = np.asarray(rng.standard_normal(shape) * rng.choice([0.5, 4.0, 40.0], size=shape), F32)
    mask = rng.random(shape) < 0.1
    x[mask] = rng.choice(SPECIALS, size=int(mask.sum()))
    return x


def _apply(scope, op_type: str, args: list):
    if op_type == "LeakyRelu":
        return ops.LeakyRelu(scope, args[0], alpha=0.3)
    return getattr(ops, op_type)(scope, *args)


def _groups(session) -> list:
    """The group entries of the session's bound programs."""
    found = []
    for plan, _ in session._plans.values():
        bound = plan.bound
        if bound is not None and bound.arena is not None:
            found += [entry[1] for entry in bound.program if entry[1].__class__.__name__ == "Group"]
    return found


def _run_both(root, fetches, feeds, runs: int = 3):
    """The fetches' values from a grouping and a non-grouping native session, bound (the
    last of ``runs`` runs), and the grouping session."""
    results = []
    sessions = []
    for options in (GROUPED, UNGROUPED):
        session = mg.ClientSession(root, backend="native", check_outputs=False,
                                   optimizer=options)
        for _ in range(runs):
            values = session.Run(feeds, fetches)
        results.append(values)
        sessions.append(session)
    return results[0], results[1], sessions[0]


def _assert_same_bits(got, want):
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_array_equal(g.view(np.uint32), w.view(np.uint32))


@st.composite
def graphs(draw):
    """A random DAG of elementwise ops over 1-3 placeholders of one shape (0-d and empty
    ones too), a scalar constant, a bias row, one value per row and one row per sample, some
    intermediates fetched."""
    rank = draw(st.integers(0, 4))
    shape = tuple(draw(st.lists(st.integers(0 if draw(st.booleans()) else 1, 7),
                                min_size=rank, max_size=rank)))
    if rank and draw(st.booleans()):
        shape = (*shape[:-1], draw(st.sampled_from([16, 33, 130, 300])))
    n_inputs = draw(st.integers(1, 3))
    ops_list = []
    for i in range(draw(st.integers(2, 12))):
        kind = draw(st.sampled_from(["unary", "binary", "grad", "scalar", "bias", "column",
                                     "sample"]))
        a = draw(st.integers(0, n_inputs + i - 1))
        b = draw(st.integers(0, n_inputs + i - 1))
        if kind == "unary":
            ops_list.append((kind, draw(st.sampled_from(UNARY)), a, None))
        elif kind == "grad":
            ops_list.append((kind, draw(st.sampled_from(GRADS)), a, b))
        else:
            ops_list.append((kind, draw(st.sampled_from(BINARY)), a, b))
    fetched = draw(st.lists(st.integers(0, len(ops_list) - 1), min_size=1, max_size=3))
    return shape, n_inputs, ops_list, sorted(set(fetched) | {len(ops_list) - 1})


def _build(shape, n_inputs, ops_list, fetched, seed):
    rng = np.random.default_rng(seed)
    root = mg.Scope.NewRootScope()
    values = [ops.Placeholder(root.WithOpName(f"x{i}"), mg.float32, shape=list(shape))
              for i in range(n_inputs)]
    feeds = {v: _values(rng, shape) for v in values}
    scalar = ops.Const(root, np.float32(rng.choice([0.5, 3.0, -2.0])))
    bias = ops.Const(root, _values(rng, shape[-1:] if shape else ()))
    broadcasts = {"column": ops.Const(root, _values(rng, shape[:-1] + (1,) if shape else ())),
                  "sample": ops.Const(root, _values(rng, shape[:1] + (1,) * (len(shape) - 2)
                                                    + shape[-1:] if len(shape) > 1
                                                    else shape and (1,)))}
    for k, (kind, op_type, a, b) in enumerate(ops_list):
        scope = root.WithOpName(f"op{k}")
        if kind == "scalar":
            values.append(_apply(scope, op_type, [values[a], scalar]))
        elif kind == "bias":
            values.append(ops.BiasAdd(scope, values[a], bias)
                          if op_type == "AddV2" and len(shape) > 1 and shape[-1]
                          else _apply(scope, op_type, [bias, values[a]]))
        elif kind in broadcasts:
            args = [values[a], broadcasts[kind]]
            values.append(_apply(scope, op_type, args if b % 2 else args[::-1]))
        elif kind == "unary":
            values.append(_apply(scope, op_type, [values[a]]))
        else:
            values.append(_apply(scope, op_type, [values[a], values[b]]))
    return root, [values[n_inputs + k] for k in fetched], feeds


@settings(max_examples=150, deadline=None)
@given(graph=graphs(), seed=st.integers(0, 2**16))
def test_generated_graphs_give_the_ungrouped_bits(graph, seed):
    root, fetches, feeds = _build(*graph, seed)
    grouped, ungrouped, session = _run_both(root, fetches, feeds)
    _assert_same_bits(grouped, ungrouped)
    GENERATED_GROUPS.append(len(_groups(session)))


GENERATED_GROUPS: list[int] = []


def test_generated_graphs_were_grouped():
    """The generated graphs above did form groups (not all can: a group must save an
    intermediate, and results that other ops read in between keep members apart)."""
    assert GENERATED_GROUPS and sum(n > 0 for n in GENERATED_GROUPS) > len(GENERATED_GROUPS) / 4


def _lstm_cell(rows: int, units: int):
    """Keras's LSTM gates after the matmuls: z [rows, 4 units] split into i, f, c, o."""
    root = mg.Scope.NewRootScope()
    z = ops.Placeholder(root.WithOpName("z"), mg.float32, shape=[None, 4 * units])
    c_prev = ops.Placeholder(root.WithOpName("c_prev"), mg.float32, shape=[None, units])
    i, f, g, o = ops.Split(root, 1, z, num_split=4).output
    c = ops.AddV2(root, ops.Mul(root, ops.Sigmoid(root, f), c_prev),
                  ops.Mul(root, ops.Sigmoid(root, i), ops.Tanh(root, g)))
    h = ops.Mul(root.WithOpName("h"), ops.Sigmoid(root, o), ops.Tanh(root, c))
    return root, z, c_prev, [h, c]


@pytest.mark.parametrize("rows,units", [(1, 8), (2, 128), (5, 33), (64, 256)])
def test_lstm_gates_are_one_group_with_the_formula_values(rows, units):
    root, z, c_prev, fetches = _lstm_cell(rows, units)
    rng = np.random.default_rng(rows * units)
    feeds = {z: rng.standard_normal((rows, 4 * units)).astype(F32),
             c_prev: rng.standard_normal((rows, units)).astype(F32)}
    grouped, ungrouped, session = _run_both(root, fetches, feeds)
    _assert_same_bits(grouped, ungrouped)
    [group] = _groups(session)
    assert len(group.members) == 9 and len(group.outputs) == 2
    zz = feeds[z].astype(np.float64)
    i, f, g, o = np.split(zz, 4, axis=1)
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    c = sig(f) * feeds[c_prev] + sig(i) * np.tanh(g)
    h = sig(o) * np.tanh(c)
    np.testing.assert_allclose(grouped[0], h, rtol=2e-6, atol=2e-7)
    np.testing.assert_allclose(grouped[1], c, rtol=2e-6, atol=2e-7)


def test_a_broadcast_the_program_does_not_do_runs_the_steps():
    """y [4, 1] broadcast along columns of 3 (rows shorter than MIN_ROW): the group's
    program refuses it at run time, the members' own kernels run (numpy's broadcasting),
    and the values are the formula's."""
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[4, 3])
    y = ops.Placeholder(root.WithOpName("y"), mg.float32, shape=[4, 1])
    out = ops.Tanh(root, ops.Mul(root, ops.Sigmoid(root, x), y))
    rng = np.random.default_rng(1)
    feeds = {x: rng.standard_normal((4, 3)).astype(F32), y: rng.standard_normal((4, 1)).astype(F32)}
    grouped, ungrouped, session = _run_both(root, [out], feeds)
    [group] = _groups(session)
    assert group.program.run([feeds[x], feeds[y]]) is None
    _assert_same_bits(grouped, ungrouped)
    expected = np.tanh(1 / (1 + np.exp(-feeds[x].astype(np.float64))) * feeds[y])
    np.testing.assert_allclose(grouped[0], expected, rtol=2e-6)


def test_a_result_read_between_members_keeps_the_group_apart():
    """b = Sigmoid(a) is read by a Sum placed before c = Mul(b, x): grouping b with c would
    move b after its reader, so b stays out (its value is still right)."""
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[3, 5])
    a = ops.Tanh(root, x)
    b = ops.Sigmoid(root, a)
    total = ops.Sum(root, b, [0, 1])
    c = ops.Mul(root, ops.AddV2(root, b, total), x)
    feeds = {x: np.random.default_rng(2).standard_normal((3, 5)).astype(F32)}
    grouped, ungrouped, session = _run_both(root, [c, total], feeds)
    _assert_same_bits(grouped, ungrouped)
    for group in _groups(session):
        assert len(group.members) >= 2


def test_views_and_bias_rows_are_taken_as_they_come():
    """Split's column views, a BiasAdd's row and a scalar into one group, several times."""
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[None, 64])
    left, right = ops.Split(root, 1, x, num_split=2).output
    bias = ops.Const(root, np.linspace(-1, 1, 32).astype(F32))
    y = ops.Mul(root, ops.Relu6(root, ops.AddV2(root, ops.BiasAdd(root, left, bias), 3.0)),
                ops.Sigmoid(root, right))
    for rows in (1, 3, 40):
        feeds = {x: np.random.default_rng(rows).standard_normal((rows, 64)).astype(F32) * 4}
        grouped, ungrouped, session = _run_both(root, [y], feeds)
        _assert_same_bits(grouped, ungrouped)
        [group] = _groups(session)
        assert len(group.members) == 5
        l64, r64 = np.split(feeds[x].astype(np.float64), 2, axis=1)
        want = np.clip(l64 + np.linspace(-1, 1, 32).astype(F32) + 3, 0, 6) / (1 + np.exp(-r64))
        np.testing.assert_allclose(grouped[0], want, rtol=2e-6, atol=1e-6)


def test_groups_are_off_with_the_option_or_the_memory_planner():
    root, z, c_prev, fetches = _lstm_cell(2, 8)
    feeds = {z: np.ones((2, 32), F32), c_prev: np.ones((2, 8), F32)}
    for options in (UNGROUPED, mg.OptimizerOptions(memory_planner=False)):
        session = mg.ClientSession(root, backend="native", check_outputs=False,
                                   optimizer=options)
        for _ in range(3):
            session.Run(feeds, fetches)
        assert not _groups(session)


def test_a_guard_between_members_splits_the_group():
    """Where's data-dependent shape is checked (a guard) between two elementwise steps: they
    are grouped on its sides only, and a changed shape still runs right."""
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[None])
    a = ops.Sigmoid(root, x)
    keep = ops.Where(root, ops.Greater(root, a, 0.5))
    b = ops.Reshape(root, ops.GatherV2(root, a, keep, 0), [-1])
    c = ops.Tanh(root, ops.Mul(root, b, b))
    rng = np.random.default_rng(3)
    session = mg.ClientSession(root, backend="native", check_outputs=False)
    for n in (8, 8, 8, 8, 13, 13, 13):
        value = rng.standard_normal(n).astype(F32)
        [got] = session.Run({x: value}, [c])
        s = 1 / (1 + np.exp(-value.astype(np.float64)))
        kept = s[s > 0.5]
        np.testing.assert_allclose(got, np.tanh(kept * kept), rtol=2e-6)



@pytest.mark.parametrize("shape", [(100_003,), (300, 517), (2, 3, 40_000)])
@pytest.mark.parametrize("threads", [1, 2])
def test_large_tensors_on_the_pool_give_the_ungrouped_bits(shape, threads):
    """Past the pool's threshold the program splits rows or column blocks among threads:
    the same bits as the ops' own kernels (split their own way), on 1 and 2 threads."""
    from minigraph.backends import native

    graph = (shape, 2, [("unary", "Sigmoid", 0, None), ("binary", "Mul", 2, 1),
                        ("scalar", "AddV2", 3, None), ("unary", "Softplus", 4, None),
                        ("bias", "Maximum", 5, None), ("unary", "Tanh", 6, None),
                        ("grad", "ReluGrad", 7, 0)], [1, 6])
    graph = (shape, 2, [(k, t, a, 0 if b is None else b) for k, t, a, b in graph[2]], graph[3])
    native.set_num_threads(threads)
    try:
        root, fetches, feeds = _build(*graph, seed=7)
        grouped, ungrouped, session = _run_both(root, fetches, feeds)
    finally:
        native.set_num_threads(None)
    _assert_same_bits(grouped, ungrouped)
    [group] = _groups(session)
    assert len(group.members) == 7


@pytest.mark.parametrize("shape", [(2, 3, 3, 64), (1, 5, 130), (3, 70)])
def test_broadcasts_along_leading_axes_give_the_ungrouped_bits(shape):
    """A squeeze-and-excitation scale [N, 1, .., C], a layer norm's [N, .., 1] statistics, a
    bias row and a [N, 1, .., 1] value per sample, all into one group, by rows of the last
    axis: the bits of the ops one by one, and the formula's values."""
    rng = np.random.default_rng(len(shape))
    n, c = shape[0], shape[-1]
    middle = (1,) * (len(shape) - 2)
    x_value = _values(rng, shape)
    parts = {"scale": rng.random((n, *middle, c)).astype(F32),
             "mean": rng.standard_normal(shape[:-1] + (1,)).astype(F32),
             "gamma": rng.standard_normal(c).astype(F32),
             "sample": rng.standard_normal((n, *middle, 1)).astype(F32)}
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=list(shape))
    p = {k: ops.Placeholder(root.WithOpName(k), mg.float32, shape=list(v.shape))
         for k, v in parts.items()}
    y = ops.Tanh(root, ops.AddV2(root, ops.Mul(root, ops.Sub(root, ops.Mul(
        root, ops.Sigmoid(root, x), p["scale"]), p["mean"]), p["gamma"]), p["sample"]))
    feeds = {x: x_value, **{p[k]: v for k, v in parts.items()}}
    grouped, ungrouped, session = _run_both(root, [y], feeds)
    _assert_same_bits(grouped, ungrouped)
    [group] = _groups(session)
    assert group.program.run(list(feeds.values())) is not None  # no fallback
    x64 = x_value.astype(np.float64)
    want = np.tanh((1 / (1 + np.exp(-x64)) * parts["scale"] - parts["mean"]) * parts["gamma"]
                   + parts["sample"])
    np.testing.assert_allclose(grouped[0], want, rtol=1e-5, atol=1e-5)


def test_short_rows_and_middle_axis_broadcasts_run_the_steps():
    """By-rows layouts need rows of at least MIN_ROW floats, and a broadcast along a middle
    axis only ([N, 1, W, C]) is not one of them: the members run, with their bits."""
    from minigraph.backends.elementwise_program import MIN_ROW

    rng = np.random.default_rng(5)
    for shape, other in [((4, 6, MIN_ROW - 1), (MIN_ROW - 1,)), ((2, 3, 4, 64), (2, 1, 4, 64))]:
        root = mg.Scope.NewRootScope()
        x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=list(shape))
        b = ops.Placeholder(root.WithOpName("b"), mg.float32, shape=list(other))
        y = ops.Relu(root, ops.Mul(root, ops.Tanh(root, x), b))
        feeds = {x: _values(rng, shape), b: _values(rng, other)}
        grouped, ungrouped, session = _run_both(root, [y], feeds)
        _assert_same_bits(grouped, ungrouped)
        [group] = _groups(session)
        assert group.program.run([feeds[x], feeds[b]]) is None


def test_exact_gelu_is_one_group():
    """GELU as Keras writes it, x * 0.5 * (1 + erf(x / sqrt 2)), and a layer norm's
    (x - mean) * rsqrt(var + eps): one group each, the ungrouped bits, the formula's values."""
    import math

    rng = np.random.default_rng(9)
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[3, 5, 96])
    var = ops.Placeholder(root.WithOpName("var"), mg.float32, shape=[3, 5, 1])
    gelu = ops.Mul(root, ops.Mul(root, x, 0.5), ops.AddV2(root, 1.0, ops.Erf(
        root, ops.RealDiv(root, x, np.float32(math.sqrt(2))))))
    normed = ops.Mul(root, ops.Neg(root, gelu), ops.Rsqrt(root, ops.AddV2(root, var, 1e-3)))
    feeds = {x: _values(rng, (3, 5, 96)), var: np.abs(rng.standard_normal((3, 5, 1))).astype(F32)}
    grouped, ungrouped, session = _run_both(root, [normed], feeds)
    _assert_same_bits(grouped, ungrouped)
    sizes = sorted(len(g.members) for g in _groups(session))
    assert sizes and sizes[-1] >= 6
    x64 = feeds[x].astype(np.float64)
    erf = np.vectorize(math.erf)(x64 / math.sqrt(2))
    want = -(x64 * 0.5 * (1 + erf)) / np.sqrt(feeds[var].astype(np.float64) + 1e-3)
    # float32's 1 + erf(x) cancels for negative x: an absolute error of an ulp of 1 there
    scale = np.abs(x64) / np.sqrt(feeds[var].astype(np.float64) + 1e-3)
    # (the specials aside: results beyond float32's range, subnormal inputs)
    finite = (np.abs(want) < 1e38) & ((np.abs(x64) > 1e-30) | (x64 == 0))
    error = np.abs(grouped[0][finite] - want[finite])
    assert (error <= 1e-5 * np.abs(want[finite]) + 2.0**-22 * scale[finite]).all()
