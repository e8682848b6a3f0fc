"""The fused optimizer updates write the variables' new values into memory the session state
keeps (``fused_training_kernels._Slab``, two blocks taking turns): the bits of the unfused
updates step after step, no value a Run returned (or a view of one) ever changes afterwards,
the memory is reused when nothing holds the old values, and reshaped or restored variables,
concurrent readers and uninitialized variables behave as before.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minigraph as mg
from minigraph import ops
from minigraph.backends import native
from minigraph.errors import FailedPreconditionError

pytestmark = pytest.mark.skipif(native.lib is None, reason="the native extension is not built")

F32 = np.float32
UNFUSED = mg.OptimizerOptions(remapper=False)
METHODS = {"sgd": lambda: mg.train.GradientDescent(0.1),
           "momentum": lambda: mg.train.Momentum(0.05, 0.9),
           "nesterov": lambda: mg.train.Momentum(0.05, 0.9, use_nesterov=True),
           "adam": lambda: mg.train.Adam(0.01)}


def _model(shapes: list[tuple[int, ...]], method: str, seed: int):
    """Variables of ``shapes`` and the loss sum_k sum((s * v_k - 1)^2) of a fed scalar s;
    (root, s, loss, variables, updates)."""
    rng = np.random.default_rng(seed)
    root = mg.Scope.NewRootScope()
    s = ops.Placeholder(root.WithOpName("s"), mg.float32, shape=[])
    variables, terms = [], []
    for k, shape in enumerate(shapes):
        value = rng.standard_normal(shape).astype(F32)
        v = mg.train.variable(root, f"v{k}", list(shape),
                              lambda scope, _s, _d, value=value: ops.Const(scope, value))
        residual = ops.Sub(root, ops.Mul(root, s, v), F32(1))
        terms.append(ops.Sum(root, ops.Mul(root, residual, residual), list(range(len(shape)))))
        variables.append(v)
    loss = ops.AddN(root.WithOpName("loss"), terms)
    updates = METHODS[method]().minimize(root, loss, variables)
    return root, s, loss, variables, updates


def _sessions(root, **options):
    fused = mg.ClientSession(root, backend="native", **options)
    unfused = mg.ClientSession(root, backend="native", optimizer=UNFUSED)
    for session in (fused, unfused):
        session.Run({}, [], targets=mg.train.global_variables_initializer(root))
    return fused, unfused


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


_SHAPES = st.lists(st.lists(st.integers(0, 9), min_size=1, max_size=3).map(tuple),
                   min_size=2, max_size=5)  # empty variables included


@settings(max_examples=25, deadline=None)
@given(shapes=_SHAPES, method=st.sampled_from(sorted(METHODS)),
       holds=st.lists(st.sampled_from(["nothing", "values", "view", "update"]), min_size=4,
                      max_size=8),
       seed=st.integers(0, 999))
def test_fused_updates_give_the_unfused_bits_and_returned_values_never_change(
        shapes, method, holds, seed):
    root, x, loss, variables, updates = _model(shapes, method, seed)
    assert any(op.type.startswith("_FusedApply")
               for op in mg.optimize(root, [loss], targets=updates).operations())
    fused, unfused = _sessions(root)
    rng = np.random.default_rng(seed)
    kept = []
    for hold in holds:
        feed = {x: F32(rng.uniform(0.5, 1.5))}
        fetches = [loss] + {"values": variables, "view": variables,
                            "update": [updates[0].outputs[0]]}.get(hold, [])
        got = fused.Run(feed, fetches, targets=updates)
        want = unfused.Run(feed, fetches, targets=updates)
        for value, reference in zip(got, want):
            np.testing.assert_array_equal(value, reference, strict=True)
        held = got[1:] if hold != "view" else [v[..., :1] for v in got[1:]]
        kept.extend((value, value.copy()) for value in held)
    for value, reference in zip(fused.Run(variables), unfused.Run(variables)):
        np.testing.assert_array_equal(value, reference, strict=True)
    for value, copy in kept:  # what the Runs returned kept its values through later steps
        np.testing.assert_array_equal(value, copy, strict=True)
        assert not value.flags.writeable


def test_the_memory_of_values_no_one_holds_is_reused_every_other_step():
    root, x, loss, variables, updates = _model([(3, 4), (4,), (5, 2)], "momentum", 0)
    fused, _ = _sessions(root)
    feed = {x: F32(0.75)}
    addresses = []
    for _ in range(6):
        fused.Run(feed, [], targets=updates)
        addresses.append(_address(fused.state.read(variables[0].op.name)))
    assert addresses[2:] == addresses[:2] * 2 and addresses[0] != addresses[1]
    # a value held: its memory is left alone; the step after writes into a new block
    held = fused.Run(variables[0])
    copy = held.copy()
    for _ in range(3):
        fused.Run(feed, [], targets=updates)
        assert not np.shares_memory(fused.state.read(variables[0].op.name), held)
    np.testing.assert_array_equal(held, copy, strict=True)


def test_assigned_and_restored_variables_are_read_as_they_are():
    """An Assign between steps, and a value written straight into the state (a checkpoint
    restore), replace a kept block's view: the next step reads them, with the unfused bits."""
    root, x, loss, variables, updates = _model([(2, 3), (3,)], "adam", 1)
    reset = ops.Assign(root, variables[0], np.full((2, 3), 0.5, F32))
    fused, unfused = _sessions(root)
    for session in (fused, unfused):
        for _ in range(3):
            session.Run({x: F32(1.25)}, [], targets=updates)
        session.Run({}, [], targets=[reset.op])
        for _ in range(3):
            session.Run({x: F32(1.25)}, [], targets=updates)
        session.state.write(variables[1].op.name, np.full(3, 2.0, F32))
        for _ in range(3):
            session.Run({x: F32(0.5)}, [], targets=updates)
    for value, reference in zip(fused.Run(variables), unfused.Run(variables)):
        np.testing.assert_array_equal(value, reference, strict=True)


def test_a_slot_of_another_shape_is_the_unfused_error_naming_it():
    root, x, loss, variables, updates = _model([(2, 3), (3,)], "momentum", 2)
    errors = []
    for session in _sessions(root):
        for _ in range(3):
            session.Run({x: F32(1)}, [], targets=updates)
        session.state.write("Momentum/v1/Momentum", np.ones(4, F32))
        with pytest.raises(mg.errors.InvalidArgumentError,
                           match=r"'accum' must have the shape of 'var' \(3,\), got \(4,\)"
                           ) as caught:
            session.Run({x: F32(1)}, [], targets=updates)
        errors.append(str(caught.value))
    assert errors[0] == errors[1]


def test_an_uninitialized_variable_is_named():
    root, x, loss, variables, updates = _model([(2, 2)], "sgd", 3)
    session = mg.ClientSession(root, backend="native")
    with pytest.raises(FailedPreconditionError, match="v0"):
        session.Run({x: F32(1)}, [], targets=updates)


def test_values_read_by_another_thread_during_training_never_change():
    root, x, loss, variables, updates = _model([(16, 64), (64,)], "momentum", 4)
    fused, _ = _sessions(root)
    feed = {x: F32(0.75)}
    seen, stop = [], threading.Event()

    def read():
        while not stop.is_set():
            value = fused.Run(variables[0])
            seen.append((value, value.copy()))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for _ in range(40):
            fused.Run(feed, [], targets=updates)
    finally:
        stop.set()
        reader.join()
    assert seen
    for value, copy in seen:
        np.testing.assert_array_equal(value, copy, strict=True)


@settings(max_examples=8, deadline=None)
@given(rates=st.lists(st.sampled_from([1e-3, 3e-3, 1e-2]), min_size=2, max_size=4),
       shared_powers=st.booleans(), seed=st.integers(0, 99))
def test_adam_rates_per_variable_or_shared_give_the_unfused_bits(rates, shared_powers, seed):
    """lr_t is computed once per distinct (lr, beta1_power, beta2_power) of the fused list:
    variables with their own learning rates or powers keep theirs."""
    rng = np.random.default_rng(seed)
    root = mg.Scope.NewRootScope()
    s = ops.Placeholder(root.WithOpName("s"), mg.float32, shape=[])
    inits, updates = [], []

    def variable(name, value):
        v = ops.Variable(root.WithOpName(name), list(value.shape), mg.float32)
        inits.append(ops.Assign(root, v, value).op)
        return v

    powers = [(F32(0.9), F32(0.999))] * len(rates) if shared_powers else [
        (F32(0.9 ** (k + 1)), F32(0.999 ** (k + 1))) for k in range(len(rates))]
    for k, (rate, (b1, b2)) in enumerate(zip(rates, powers)):
        shape = (k + 1, 3)
        v = variable(f"v{k}", rng.standard_normal(shape).astype(F32))
        m = variable(f"m{k}", np.zeros(shape, F32))
        w = variable(f"w{k}", np.zeros(shape, F32))
        grad = ops.Mul(root, ops.Mul(root, v, s), F32(2))
        updates.append(ops.ApplyAdam(root, v, m, w, b1, b2, F32(rate), F32(0.9), F32(0.999),
                                     F32(1e-7), grad).op)
    assert "_FusedApplyAdam" in [op.type for op in mg.optimize(root, [], targets=updates)
                                 .operations()]
    fused, unfused = (mg.ClientSession(root, backend="native", optimizer=options)
                      for options in (mg.OptimizerOptions(), UNFUSED))
    for session in (fused, unfused):
        session.Run({}, [], targets=inits)
        for step in range(3):
            session.Run({s: F32(1 + step)}, [], targets=updates)
    names = sorted(fused.state.variables)
    for name in names:
        np.testing.assert_array_equal(fused.state.read(name), unfused.state.read(name),
                                      strict=True)


@settings(max_examples=10, deadline=None)
@given(sizes=st.lists(st.integers(0, 300), min_size=1, max_size=4),
       kind=st.sampled_from(["MG_UPDATE_MOMENTUM", "MG_UPDATE_ADAM"]), nesterov=st.booleans(),
       seed=st.integers(0, 99))
def test_update_list_into_its_own_inputs_gives_the_bits_of_new_buffers(sizes, kind, nesterov,
                                                                       seed):
    """optimizers.h lets each output be the very input it replaces (the vectorized loops
    rely on nothing else): the same bits as into new buffers, on every ISA."""
    ffi, lib = native.ffi, native.lib
    rng = np.random.default_rng(seed)
    rows = 2 if kind == "MG_UPDATE_MOMENTUM" else 3
    state = [[rng.standard_normal(n).astype(F32) for n in sizes] for _ in range(rows)]
    state[-1] = [np.abs(a) for a in state[-1]]  # Adam's v (and momentum's accum) >= 0
    grad = [rng.standard_normal(n).astype(F32) for n in sizes]
    count = len(sizes)

    def pointers(arrays):
        return ffi.new("float *[]", [native.fbuf(a) for a in arrays])

    def scalars(value):
        return ffi.new("float[]", [value] * count)

    def run(outputs):
        ins = [pointers(row) for row in state] + [ffi.NULL] * (3 - rows)
        outs = [pointers(row) for row in outputs] + [ffi.NULL] * (3 - rows)
        native.check_code(lib.mg_apply_update_list(
            getattr(lib, kind), count, ffi.new("int64_t[]", sizes), ins[0], ins[1], ins[2],
            pointers(grad), outs[0], outs[1], outs[2], scalars(0.01), scalars(0.9),
            scalars(0.999), scalars(1e-7), int(nesterov), native.num_threads()), "test")

    original = [[a.copy() for a in row] for row in state]
    try:
        for isa in native.ISAS[:native.ISAS.index(native.best_isa()) + 1]:
            native.set_isa(isa)
            state = [[a.copy() for a in row] for row in original]
            fresh = [[np.empty_like(a) for a in row] for row in state]
            run(fresh)
            run(state)  # in place
            for got_row, want_row in zip(state, fresh):
                for got, want in zip(got_row, want_row):
                    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    finally:
        native.set_isa(native.best_isa())
