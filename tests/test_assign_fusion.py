"""The remapper's ``_FusedAssign`` (optimizer/training_fusions.py ``fuse_variable_updates``):
the float32 Assigns of a step whose results nothing reads (a batch norm's moving averages)
become one op, with the unfused graph's results and variables bit for bit, on drawn graphs
where some Assigns read variables others write, are ordered by control edges, write one
variable twice or have readers of their variable that they do not follow.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import minigraph as mg
from minigraph import nn, ops

F32 = np.float32
UNFUSED = mg.OptimizerOptions(remapper=False)
BACKENDS = ["reference", "native"]


def _fused(root, fetches, targets) -> list[str]:
    return [op.type for op in mg.optimize(root, fetches, targets=targets).operations()
            if op.type.startswith("_Fused")]


def _run_both(root, inits, feeds, fetches, targets, steps=2):
    """Per backend: (fetched values of each step, the variables after) with the remapper
    on and off, compared bit for bit."""
    for backend in BACKENDS:
        results = []
        for options in (mg.OptimizerOptions(), UNFUSED):
            session = mg.ClientSession(root, backend=backend, optimizer=options)
            session.Run({}, [], targets=inits)
            got = [session.Run(feeds, fetches, targets=targets) for _ in range(steps)]
            results.append((got, {name: value.copy() for name, value
                                  in sorted(session.state.variables.items())}))
        (got_on, state_on), (got_off, state_off) = results
        for on, off in zip(got_on, got_off, strict=True):
            for a, b in zip(on, off, strict=True):
                np.testing.assert_array_equal(a, b, strict=True)
        assert state_on.keys() == state_off.keys()
        for name in state_on:
            np.testing.assert_array_equal(state_on[name], state_off[name], strict=True)


@st.composite
def _assign_graphs(draw):
    """Variables v0..; Assigns of values computed from a fed x and variable reads, each
    with a kind: ``free`` (its value reads its own variable: every reader runs first),
    ``other`` (reads another variable, which another Assign may write: unordered),
    ``twice`` (a second Assign of the same variable), ``updated`` (an update of the
    variable not ordered with it, which the plan runs after it), ``ordered`` (after the
    previous Assign by a control edge) or ``read`` (its output is fetched)."""
    count = draw(st.integers(2, 5))
    sizes = draw(st.lists(st.integers(1, 6), min_size=count, max_size=count))
    kinds = draw(st.lists(st.sampled_from(["free", "free", "other", "twice", "updated",
                                           "ordered", "read"]), min_size=count, max_size=count))
    return sizes, kinds, draw(st.integers(0, 999))


@settings(max_examples=20, deadline=None)
@given(case=_assign_graphs())
def test_fused_assigns_give_the_unfused_results_and_variables(case):
    sizes, kinds, seed = case
    rng = np.random.default_rng(seed)
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[])
    variables = [ops.Variable(root.WithOpName(f"v{k}"), [n], mg.float32)
                 for k, n in enumerate(sizes)]
    inits = [ops.Assign(root, v, rng.standard_normal(n).astype(F32)).op
             for v, n in zip(variables, sizes)]
    targets, fetches = [], []
    for k, (v, kind) in enumerate(zip(variables, kinds)):
        n = sizes[k]
        if kind == "other":  # another variable's value, reduced and broadcast to n
            source = variables[(k + 1) % len(variables)]
            value = ops.Add(root, ops.Mul(root, ops.Sum(root, source, [0]), x),
                            np.zeros(n, F32))
        else:
            value = ops.Add(root, ops.Mul(root, v, x), F32(0.5))
        scope = (root.WithControlDependencies([targets[-1]])
                 if kind == "ordered" and targets else root)
        assign = ops.Assign(scope, v, value)
        (fetches if kind == "read" else targets).append(assign if kind == "read"
                                                        else assign.op)
        if kind == "twice":
            targets.append(ops.Assign(root, v, ops.Mul(root, v, F32(-2))).op)
        if kind == "updated":
            targets.append(ops.ApplyGradientDescent(root, v, F32(0.5), np.ones(n, F32)).op)
    fetches.append(ops.Sum(root, variables[0], [0]))
    fused = _fused(root, fetches, targets)
    # v0 has a reader the Assign does not follow (the fetched sum): it stays apart
    if kinds[1:].count("free") >= 2 and "other" not in kinds and "ordered" not in kinds:
        assert fused.count("_FusedAssign") == 1
    _run_both(root, inits, {x: F32(rng.uniform(0.5, 2))}, fetches, targets)


def test_batch_norm_moving_averages_fuse_into_one_assign():
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[4, 3, 3, 2])
    h = x
    for k in range(3):
        h = ops.Relu(root, nn.BatchNorm(root, f"bn{k}", 2, momentum=0.75)(root, h,
                                                                          training=True))
    loss = ops.Sum(root, ops.Mul(root, h, h), [0, 1, 2, 3])
    targets = root.graph().get_collection(nn.UPDATE_OPS)
    assert len(targets) == 6
    assert _fused(root, [loss], targets).count("_FusedAssign") == 1
    value = np.random.default_rng(0).standard_normal((4, 3, 3, 2)).astype(F32)
    _run_both(root, mg.train.global_variables_initializer(root), {x: value}, [loss],
              targets, steps=3)


def test_two_updates_of_one_variable_stay_apart():
    """Their order decides the variable's value: a fused op would read it once."""
    root = mg.Scope.NewRootScope()
    v = ops.Variable(root.WithOpName("v"), [3], mg.float32)
    w = ops.Variable(root.WithOpName("w"), [3], mg.float32)
    inits = [ops.Assign(root, v, np.arange(3, dtype=F32)).op,
             ops.Assign(root, w, np.ones(3, F32)).op]
    targets = [ops.ApplyGradientDescent(root, v, F32(0.5), np.ones(3, F32)).op,
               ops.ApplyGradientDescent(root, v, F32(0.25), np.full(3, 2, F32)).op,
               ops.ApplyGradientDescent(root, w, F32(0.5), np.ones(3, F32)).op]
    assert _fused(root, [], targets) == []
    _run_both(root, inits, {}, [v], targets)
