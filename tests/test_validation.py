"""Bad input never reaches a kernel: regression tests of the validation the session does
before every op (its shape function re-run on the values), the feed rule, attrs, graphs,
memory claims and atomic training steps.

Expected values come from numpy formulas written here (float64 where it matters); every
rejection must be an ``mg.errors`` class whose message names the op and the input.
"""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest
from conftest import BACKENDS

import minigraph as mg
from minigraph import ops
from minigraph.errors import InvalidArgumentError, ResourceExhaustedError
from minigraph.framework.op_def import get_op_def, registered_ops

F32 = np.float32


def _ph(root, name, dtype=mg.float32, shape=None):
    return ops.Placeholder(root.WithOpName(name), dtype, shape=shape)


def _init(root, name, value):
    """A variable ``name`` initialized to ``value`` (float32)."""
    value = np.asarray(value, F32)
    return mg.train.variable(root, name, list(value.shape),
                             lambda s, shape, dtype: ops.Const(s, value))


def _session(root, backend):
    session = mg.ClientSession(root, backend=backend)
    session.Run({}, [], targets=mg.train.global_variables_initializer(root))
    return session


# ----------------------------------------------------------------------------- the registry


def test_every_op_that_takes_tensors_checks_them():
    """Each op with inputs has a shape function (re-run on the values before its kernel)
    or a validate function: no op can hand unchecked tensors to a kernel."""
    unchecked = [name for name in registered_ops()
                 if get_op_def(name).inputs and get_op_def(name).shape_fn is None
                 and get_op_def(name).validate is None]
    assert unchecked == []


# ----------------------------------------------------------------------------- optimizers


def _adam(root, var_value, grad):
    var = _init(root, "w", var_value)
    m, v = _init(root, "m", np.zeros_like(var_value)), _init(root, "v", np.zeros_like(var_value))
    scalars = [ops.Const(root, F32(x)) for x in (0.9, 0.999, 0.01, 0.9, 0.999, 1e-7)]
    return var, m, v, ops.ApplyAdam(root, var, m, v, *scalars, grad)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("size", [3, 1 << 24])
def test_adam_refuses_a_smaller_gradient(backend, size):
    """A gradient placeholder of unknown shape fed fewer elements than the variable has
    (native Adam read past its buffer: garbage, or SIGSEGV for 64 MiB)."""
    root = mg.Scope.NewRootScope()
    grad = _ph(root, "grad")
    var, _, _, update = _adam(root, np.ones(size, F32), grad)
    session = _session(root, backend)
    with pytest.raises(InvalidArgumentError, match=r"ApplyAdam '.*': input 'grad' must have "
                                                   r"the shape of 'var'"):
        session.Run({grad: np.ones(2, F32)}, update)
    np.testing.assert_array_equal(session.Run({}, var)[:4], np.ones(min(size, 4), F32))


@pytest.mark.parametrize("backend", BACKENDS)
def test_adam_refuses_slots_that_no_longer_match(backend):
    root = mg.Scope.NewRootScope()
    var, m, _, update = _adam(root, np.ones(5, F32), ops.Const(root, np.ones(5, F32)))
    shrink = ops.Assign(root, m, ops.Const(root, np.ones(2, F32)), validate_shape=False)
    session = _session(root, backend)
    session.Run({}, [], targets=[shrink])
    with pytest.raises(InvalidArgumentError, match=r"ApplyAdam .*input 'm'"):
        session.Run({}, update)


@pytest.mark.parametrize("backend", BACKENDS)
def test_scalar_variable_keeps_its_shape_through_adam_and_checkpoints(backend, tmp_path):
    """Native Adam used to return a 0-d variable as shape (1,); its checkpoint then no
    longer restored into its own graph."""
    root = mg.Scope.NewRootScope()
    var, _, _, update = _adam(root, np.float32(2.0), ops.Const(root, F32(0.5)))
    session = _session(root, backend)
    for _ in range(3):
        out = session.Run({}, update)
    assert out.shape == () and session.Run({}, var).shape == ()
    # three Adam steps from m = v = 0, gradient 0.5, beta powers held at (0.9, 0.999)
    expected, m, v = 2.0, 0.0, 0.0
    lr_t = 0.01 * np.sqrt(1 - 0.999) / (1 - 0.9)
    for _ in range(3):
        m, v = m + (0.5 - m) * 0.1, v + (0.25 - v) * 0.001
        expected -= lr_t * m / (np.sqrt(v) + 1e-7)
    np.testing.assert_allclose(session.Run({}, var), expected, rtol=1e-5)
    saver = mg.train.Saver(root)
    path = saver.save(session, tmp_path / "scalar.npz")
    fresh = mg.ClientSession(root, backend=backend)
    saver.restore(fresh, path)
    restored = fresh.Run({}, var)
    assert restored.shape == ()
    np.testing.assert_array_equal(restored, session.Run({}, var))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("optimizer", ["ApplyGradientDescent", "ApplyMomentum", "ApplyAdam"])
@pytest.mark.parametrize("case", ["bigger grad", "size-1 grad", "vector lr"])
def test_optimizer_updates_never_reshape_or_broadcast(backend, optimizer, case):
    """A (2, 5) gradient turned a [5] variable into [2, 5]; size-1 gradients and vector
    learning rates broadcast silently. Each is an error, and the variable is unchanged."""
    root = mg.Scope.NewRootScope()
    var = _init(root, "w", np.arange(5, dtype=F32))
    grad, lr = _ph(root, "grad"), _ph(root, "lr")
    grad_value = {"bigger grad": np.ones((2, 5), F32), "size-1 grad": np.ones(1, F32),
                  "vector lr": np.ones(5, F32)}[case]
    lr_value = np.full(5, 0.1, F32) if case == "vector lr" else F32(0.1)
    if optimizer == "ApplyGradientDescent":
        update = ops.ApplyGradientDescent(root, var, lr, grad)
    elif optimizer == "ApplyMomentum":
        update = ops.ApplyMomentum(root, var, _init(root, "acc", np.zeros(5)), lr, grad,
                                   ops.Const(root, F32(0.9)))
    else:
        m, v = _init(root, "m", np.zeros(5)), _init(root, "v", np.zeros(5))
        update = ops.ApplyAdam(root, var, m, v, *[ops.Const(root, F32(x)) for x in
                                                  (0.9, 0.999)], lr,
                               *[ops.Const(root, F32(x)) for x in (0.9, 0.999, 1e-7)], grad)
    session = _session(root, backend)
    names = {"ApplyGradientDescent": ("alpha", "delta")}.get(optimizer, ("lr", "grad"))
    name = names[0] if case == "vector lr" else names[1]
    with pytest.raises(InvalidArgumentError, match=rf"{optimizer} .*input '{name}'"):
        session.Run({grad: grad_value, lr: lr_value}, update)
    np.testing.assert_array_equal(session.Run({}, var), np.arange(5, dtype=F32))


def test_concurrent_training_steps_lose_no_update():
    """Adam's step reads beta1_power in one op and writes it in another: steps Run from
    several threads are atomic per session, so after N steps the state is exactly that of
    N sequential steps."""
    def build():
        root = mg.Scope.NewRootScope()
        var = _init(root, "w", np.linspace(-1, 1, 64))
        loss = ops.Sum(root, ops.Square(root, var), [0])
        train = mg.train.Adam(0.01).minimize(root, loss, [var])
        return root, var, train

    root, var, train = build()
    session = _session(root, "native")
    threads, steps = 4, 25

    def work():
        for _ in range(steps):
            session.Run({}, [], targets=train)

    workers = [threading.Thread(target=work) for _ in range(threads)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often: interleavings a busy machine makes
    try:
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    finally:
        sys.setswitchinterval(interval)
    root2, var2, train2 = build()
    sequential = _session(root2, "native")
    for _ in range(threads * steps):
        sequential.Run({}, [], targets=train2)
    np.testing.assert_array_equal(session.Run({}, var), sequential.Run({}, var2))
    beta1_power = session.state.read("Adam/beta1_power")
    np.testing.assert_allclose(beta1_power, 0.9 ** (threads * steps + 1), rtol=1e-4)


# ----------------------------------------------------------------------------- graphs


def test_inputs_from_another_graph_are_refused_at_construction():
    a_root, b_root = mg.Scope.NewRootScope(), mg.Scope.NewRootScope()
    a, b = _ph(a_root, "a"), _ph(b_root, "b")
    with pytest.raises(InvalidArgumentError, match=r"Add 'Add': input 'y' \('b:0'\) is from a "
                                                   r"different graph"):
        ops.Add(a_root, a, b)
    with pytest.raises(InvalidArgumentError, match=r"AddN 'AddN': input 'inputs'\[1\] \('b:0'\)"):
        ops.AddN(a_root, [a, b])
    with pytest.raises(InvalidArgumentError, match="control input 'b' is from a different"):
        ops.Identity(a_root.WithControlDependencies([b.op]), a)


# ----------------------------------------------------------------------------- feeds


@pytest.mark.parametrize("dtype, value, message", [
    (mg.float32, None, "is None"),
    (mg.int32, 1.5, "cannot be converted to int32 without loss"),
    (mg.int32, [0, 1.0], "cannot be converted to int32 without loss"),
    (mg.int32, 2 ** 40, r"out of its range \[-2147483648, 2147483647\]"),
    (mg.int64, 2 ** 70, "out of the int64 range"),
    (mg.float32, 1e300, "overflows"),
    (mg.float32, True, "without loss"),
    (mg.float32, np.float64(0.5), "has dtype float64, expected float32"),
    (mg.float32, np.array(0.5), "has dtype float64, expected float32"),
    (mg.int32, np.int64(3), "has dtype int64, expected int32"),
    (mg.float32, "1.0", "cannot be converted to a tensor"),
    (mg.float32, 1 + 2j, "cannot be converted to a tensor"),
])
def test_feeds_follow_one_rule(dtype, value, message):
    root = mg.Scope.NewRootScope()
    x = _ph(root, "x", dtype)
    session = mg.ClientSession(root, backend="reference")
    with pytest.raises(InvalidArgumentError, match=rf"feed for 'x:0' .*{message}"):
        session.Run({x: value}, ops.Identity(root, x))


@pytest.mark.parametrize("dtype, value, expected", [
    (mg.float32, 0.1, np.float32(0.1)),
    (mg.float32, [1, 2], np.array([1, 2], F32)),
    (mg.int32, [3, -4], np.array([3, -4], np.int32)),
    (mg.float16, 1, np.float16(1)),
    (mg.bool, [True, False], np.array([True, False])),
    (mg.float32, np.float32(2.5), np.float32(2.5)),
])
def test_lossless_feeds_are_accepted(dtype, value, expected):
    root = mg.Scope.NewRootScope()
    x = _ph(root, "x", dtype)
    out = mg.ClientSession(root, backend="reference").Run({x: value}, ops.Identity(root, x))
    assert out.dtype == dtype.np_dtype and out.shape == np.shape(expected)
    np.testing.assert_array_equal(out, expected)


def _misaligned(values: np.ndarray) -> np.ndarray:
    raw = bytearray(values.nbytes + 1)
    view = np.frombuffer(raw, values.dtype, count=values.size, offset=1).reshape(values.shape)
    view[...] = values
    assert not view.flags.aligned
    return view


@pytest.mark.parametrize("backend", BACKENDS)
def test_misaligned_feeds_give_the_aligned_result(backend):
    rng = np.random.default_rng(0)
    x_value = rng.normal(size=(2, 4, 4, 3)).astype(F32)
    root = mg.Scope.NewRootScope()
    x = _ph(root, "x", shape=[2, 4, 4, 3])
    ones, zeros, empty = np.ones(3, F32), np.zeros(3, F32), np.zeros(0, F32)
    fetches = [ops.FusedBatchNormV3(root, x, ones, zeros, empty, empty, is_training=True).y,
               ops.MaxPool(root, x, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="VALID"),
               ops.Relu(root, x)]
    session = mg.ClientSession(root, backend=backend)
    aligned = session.Run({x: x_value}, fetches)
    shifted = session.Run({x: _misaligned(x_value)}, fetches)
    for a, b in zip(aligned, shifted):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(aligned[2], np.maximum(x_value, 0))


# ----------------------------------------------------------------------------- attrs


@pytest.mark.parametrize("strides, message", [
    ([1, 1.0, 1, 1], r"element 1 must be an int, got 1.0 of type float"),
    ([1, "2", 1, 1], r"element 1 must be an int, got '2'"),
    ("1111", r"must be a list of ints, got '1111'"),
    ([1, True, 1, 1], r"element 1 must be an int, got True"),
    ([1, 2 ** 70, 1, 1], r"element 1 must fit in int64"),
    (3, r"must be a list of ints, got 3"),
])
def test_list_int_attrs_are_checked_at_construction(strides, message):
    root = mg.Scope.NewRootScope()
    x = _ph(root, "x", shape=[1, 4, 4, 1])
    with pytest.raises(InvalidArgumentError, match=rf"MaxPool 'MaxPool': attr 'strides' "
                                                   rf"{message}"):
        ops.MaxPool(root, x, ksize=[1, 2, 2, 1], strides=strides, padding="VALID")


def test_int_and_shape_attrs_are_checked():
    root = mg.Scope.NewRootScope()
    with pytest.raises(InvalidArgumentError, match=r"attr 'seed' must fit in int64"):
        ops.RandomUniform(root, [2], dtype=mg.float32, seed=2 ** 64)
    with pytest.raises(InvalidArgumentError, match=r"attr 'shape' must be a shape"):
        ops.Placeholder(root, mg.float32, shape=[2.5])
    with pytest.raises(InvalidArgumentError, match=r"attr 'shape' must be a shape"):
        ops.Placeholder(root, mg.float32, shape=[-3])


# ----------------------------------------------------------------------------- memory


def test_huge_claims_are_refused_before_allocating():
    root = mg.Scope.NewRootScope()
    x = _ph(root, "x")
    view = np.broadcast_to(np.float32(1), (1 << 20, 1 << 20))  # 2**40 elements, 0-stride
    session = mg.ClientSession(root, backend="native")
    with pytest.raises(ResourceExhaustedError, match=r"feed for 'x:0'.*needs 4,398,046,511,104"
                                                     r" bytes"):
        session.Run({x: view}, ops.Relu(root, x))
    dims = _ph(root, "dims", mg.int32)
    fill = ops.Fill(root, dims, F32(0))
    with pytest.raises(ResourceExhaustedError, match=r"Fill 'Fill': output 0.*nothing was "
                                                     r"allocated"):
        session.Run({dims: [1 << 20, 1 << 20]}, fill)
    np.testing.assert_array_equal(session.Run({dims: [2, 3]}, fill), np.zeros((2, 3), F32))


def test_huge_window_attrs_cost_what_the_input_costs():
    root = mg.Scope.NewRootScope()
    x_value = np.arange(64, dtype=F32).reshape(1, 8, 8, 1)
    x = ops.Const(root, x_value)
    big = 2 ** 31 - 1
    pool = ops.AvgPool(root, x, ksize=[1, big, big, 1], strides=[1, 1, 1, 1], padding="SAME")
    out = mg.ClientSession(root, backend="native").Run({}, pool)
    # SAME: out (8, 8); every window covers the whole (clipped) 8x8 input
    np.testing.assert_allclose(out, np.full((1, 8, 8, 1), x_value.mean()), rtol=1e-6)


# ----------------------------------------------------------------------------- construction


@pytest.mark.parametrize("value, detail", [
    (np.array([1 + 2j, 3j]), "dtype complex128"),
    (np.array([object()], dtype=object), "dtype object"),
    (np.array(["a", "b"]), "dtype <U1"),
    (np.arange(1000, dtype=np.uint8), "dtype uint8"),
    (None, "is None"),
    ("abc", "cannot be converted to a tensor"),
])
def test_unconvertible_values_name_the_op_and_input(value, detail):
    root = mg.Scope.NewRootScope()
    with pytest.raises(InvalidArgumentError) as info:
        ops.Add(root, _ph(root, "x"), value)
    message = str(info.value)
    assert message.startswith("Add: input 'y'") and detail in message
    assert "Const" not in message and len(message) < 300


def test_negative_random_seeds_run_as_in_tensorflow():
    """Seeds are int64 attrs; TF takes negative ones (numpy's seeding does not)."""
    root = mg.Scope.NewRootScope()
    shape = np.array([3, 4], np.int32)
    low = ops.RandomUniform(root, shape, dtype=mg.float64, seed=-2 ** 63, seed2=-1)
    same = ops.RandomUniform(root.WithOpName("low"), shape, dtype=mg.float64, seed=-2 ** 63,
                             seed2=-1)
    first, again = mg.ClientSession(root).Run([low, same])
    assert first.shape == (3, 4) and ((first >= 0) & (first < 1)).all()
    assert not np.array_equal(first, again)  # another op name: another stream
