"""The activation family beyond Relu and Relu6 (``minigraph.ops.activation_ops``): Sigmoid,
Tanh, Elu, Selu, LeakyRelu, Softplus, Softsign and their gradient ops.

* Values against float64 formulas written here, on every backend, in float16, bfloat16,
  float32 and float64, special values (+-0, +-inf, NaN, huge and tiny) included.
* The native float32 kernels' accuracy: within the ulp bounds kernels_c/activations.h
  states of the exact value, over float32 inputs sampled across the whole line (random bit
  patterns, dense ranges, subnormals), on every instruction set this CPU has, with the same
  bits on every ISA and thread count; the numpy kernels within half an ulp (correctly
  rounded from float64). LeakyRelu and Softsign native are bit for bit the numpy kernels.
* Shape and dtype errors with TF's words, at construction and at run time.
* ``oracle``: ``tf.raw_ops`` for every op (special values included) and a frozen tf_keras
  model using every Keras activation built on these ops.

Gradients are checked by finite differences in tests/test_gradient_checker.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import BACKENDS, BF16, NATIVE_AVAILABLE, assert_close

import minigraph as mg
from minigraph import ops

F32, F64 = np.float32, np.float64
InvalidArgumentError = mg.errors.InvalidArgumentError

# SELU (Klambauer et al., 2017): scale and scale * alpha, the digits TensorFlow writes
SCALE, SCALE_ALPHA = 1.0507009873554804934193349852946, 1.7580993408473768599402175208123

# ----------------------------------------------------------------------------- float64 formulas


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


FORWARD = {  # op -> (wrapper, float64 formula of x)
    "Sigmoid": (ops.Sigmoid, _sigmoid),
    "Tanh": (ops.Tanh, np.tanh),
    "Elu": (ops.Elu, lambda x: np.where(x < 0, np.expm1(x), x)),
    "Selu": (ops.Selu, lambda x: np.where(x < 0, SCALE_ALPHA * np.expm1(x), SCALE * x)),
    "Softplus": (ops.Softplus, lambda x: np.where(x > 30, x, np.log1p(np.exp(np.minimum(x, 30))))),
    "Softsign": (ops.Softsign, lambda x: x / (1 + np.abs(x))),
}


def _leaky(alpha: float):
    a = float(F32(alpha))  # the attr is a float32
    return lambda x: np.where(x > 0, x, x * a)


# op -> (wrapper, formula of its two inputs in TF's order). TF evaluates these in the
# tensor's type (float32 for float32), where huge inputs overflow (1e30 * 1e30, e^100): the
# formulas are evaluated in float32 for float32 and the half types, in float64 for float64.
GRADIENT = {
    "SigmoidGrad": (ops.SigmoidGrad, lambda y, dy: dy * (y * (1 - y))),
    "TanhGrad": (ops.TanhGrad, lambda y, dy: dy * (1 - y * y)),
    "EluGrad": (ops.EluGrad, lambda g, y: np.where(y < 0, g * (y + 1), g)),
    "SeluGrad": (ops.SeluGrad, lambda g, y: np.where(y < 0, g * (y + SCALE_ALPHA),
                                                     g * SCALE)),
    "LeakyReluGrad": (ops.LeakyReluGrad, lambda g, x: np.where(x > 0, g, g * float(F32(0.2)))),
    "SoftplusGrad": (ops.SoftplusGrad,  # g * sigmoid(x), 1 + e^-x rounded to the type
                     lambda g, x: g / (np.exp(-x.astype(F64)) + 1).astype(x.dtype)),
    "SoftsignGrad": (ops.SoftsignGrad, lambda g, x: g / (1 + np.abs(x)) ** 2),
}

SPECIAL = np.array([-np.inf, -1e30, -100.0, -20.0, -1.0, -1e-3, -1e-30, -0.0, 0.0, 1e-30, 1e-3,
                    1.0, 20.0, 100.0, 1e30, np.inf, np.nan])


def _inputs(rng, dtype) -> np.ndarray:
    """Special values and a spread of ordinary ones, in ``dtype`` (halves overflow 1e30 to
    inf and flush 1e-30 to 0, as their casts do)."""
    with np.errstate(over="ignore"):
        return np.concatenate([SPECIAL, rng.standard_normal(40) * 4]).astype(dtype)


def _f64(*arrays):
    return [a.astype(F64) for a in arrays]


def _run(backend, fetches):
    return mg.ClientSession(fetches[0].graph, backend=backend).Run({}, fetches)


# ----------------------------------------------------------------------------- values


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [F32, np.float16, BF16, F64], ids=str)
def test_activations_match_float64_formulas(backend, dtype):
    rng = np.random.default_rng(1)
    x = _inputs(rng, dtype)
    (x64,) = _f64(x)
    root = mg.Scope.NewRootScope()
    with np.errstate(all="ignore"):
        cases = {name: (op(root, x), f(x64)) for name, (op, f) in FORWARD.items()}
        for alpha in (0.2, 0.01, 1.5, -1.0):
            cases[f"LeakyRelu({alpha})"] = (ops.LeakyRelu(root, x, alpha=alpha),
                                            _leaky(alpha)(x64))
    results = _run(backend, [fetch for fetch, _ in cases.values()])
    for (name, (_, expected)), actual in zip(cases.items(), results):
        assert_close(actual, expected, dtype=dtype, what=f"{name} {backend}")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [F32, np.float16, BF16, F64], ids=str)
def test_gradient_ops_match_their_formulas(backend, dtype):
    """The gradient ops over every pair of special and ordinary values (an infinite or NaN
    gradient times a zero factor gives NaN, as TF's product), against GRADIENT's formulas
    evaluated in float32 (float64 for float64)."""
    rng = np.random.default_rng(2)
    values = _inputs(rng, dtype)
    first, second = (a.reshape(-1) for a in np.meshgrid(values, values))
    outputs = {  # the second input as the forward op would give it (y of the activation)
        "SigmoidGrad": _sigmoid, "TanhGrad": np.tanh,
        "EluGrad": FORWARD["Elu"][1], "SeluGrad": FORWARD["Selu"][1]}
    root = mg.Scope.NewRootScope()
    fetches, expected = [], []
    for name, (op, formula) in GRADIENT.items():
        other = second
        if name in outputs:  # realistic outputs, plus the raw special values
            with np.errstate(all="ignore"):
                other = np.concatenate([outputs[name](second.astype(F64)).astype(dtype),
                                        second])
        grads = np.resize(first, other.shape)
        args = (other, grads) if name in ("SigmoidGrad", "TanhGrad") else (grads, other)
        fetches.append(op(root, *args))
        compute = F64 if dtype == F64 else F32
        with np.errstate(all="ignore"):
            expected.append(formula(*(a.astype(compute) for a in args)))
    for name, actual, want in zip(GRADIENT, _run(backend, fetches), expected):
        assert_close(actual, want, dtype=dtype, what=f"{name} {backend}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_sigmoid_and_tanh_grad_take_dy_of_another_shape_with_as_many_elements(backend):
    """TF's cwise check is on element counts: z has y's shape, dy is read in order."""
    y = np.linspace(-0.9, 0.9, 6).reshape(2, 3).astype(F32)
    dy = np.arange(1, 7, dtype=F32).reshape(3, 2)
    root = mg.Scope.NewRootScope()
    z_sigmoid, z_tanh = _run(backend, [ops.SigmoidGrad(root, y, dy), ops.TanhGrad(root, y, dy)])
    y64, dy64 = y.astype(F64), dy.reshape(2, 3).astype(F64)
    assert_close(z_sigmoid, dy64 * y64 * (1 - y64), dtype=F32)
    assert_close(z_tanh, dy64 * (1 - y64 * y64), dtype=F32)


# ----------------------------------------------------------------------------- native accuracy

ULP_BOUNDS = {"Sigmoid": 3, "Tanh": 3, "Elu": 1, "Selu": 2, "Softplus": 3}  # activations.h


def _float32_sample(rng) -> np.ndarray:
    """Float32 inputs across the whole line: random bit patterns (every exponent, the
    subnormals included), dense ranges where the functions bend, tiny values, specials."""
    bits = rng.integers(0, 2**32, 600_000, dtype=np.uint64).astype(np.uint32).view(F32)
    return np.concatenate([
        bits[~np.isnan(bits)], rng.uniform(-20, 20, 300_000).astype(F32),
        rng.uniform(-1, 1, 100_000).astype(F32), (rng.uniform(-1, 1, 50_000) * 1e-6).astype(F32),
        np.float32([-88.7, -87.4, -103.9, -104.1, 88.7, 89.0, 15.0, -15.0, 0.55, -0.55]),
        SPECIAL.astype(F32)])


def _ulp_errors(actual: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """|actual - exact| in ulps of the float32 result (2^(e - 23) for exact in [2^e,
    2^(e+1)), 2^-149 in the subnormals), on the float32 line extended by one step: inf
    counts as 2^128 (one ulp past the largest float) and so does an exact value beyond it; a
    NaN result is infinitely far. Where exact is inf or NaN, actual must be the same."""
    nonfinite = ~np.isfinite(exact)
    same = (actual[nonfinite] == exact[nonfinite]) | (np.isnan(actual[nonfinite])
                                                     & np.isnan(exact[nonfinite]))
    assert same.all(), f"non-finite results differ at {np.flatnonzero(nonfinite)[~same][:5]}"
    value = actual.astype(F64)
    value = np.where(np.isinf(value), np.copysign(2.0**128, value), value)
    value = np.where(np.isnan(value), np.inf, value)
    exact = np.clip(np.where(nonfinite, 1.0, exact), -(2.0**128), 2.0**128)
    _, exponent = np.frexp(exact)
    ulp = np.ldexp(1.0, np.maximum(exponent - 24, -149))
    return np.where(nonfinite, 0.0, np.abs(value - exact) / ulp)


@pytest.fixture(scope="module")
def sample():
    x = _float32_sample(np.random.default_rng(3))
    with np.errstate(all="ignore"):
        return x, {name: f(x.astype(F64)) for name, (_, f) in FORWARD.items()}


def _native_results(x: np.ndarray, names) -> list[np.ndarray]:
    root = mg.Scope.NewRootScope()
    xp = ops.Placeholder(root, mg.float32, shape=x.shape)
    fetches = [FORWARD[name][0](root, xp) for name in names]
    metadata = mg.RunMetadata()
    results = mg.ClientSession(root, backend="native").Run({xp: x}, fetches,
                                                           run_metadata=metadata)
    kernels = {s.op_type: s.kernel for s in metadata.step_stats}
    assert all(kernels[name].endswith("_native") for name in names), kernels
    return results


@pytest.mark.skipif(not NATIVE_AVAILABLE, reason="the native kernels are not built")
def test_native_exponentials_are_within_their_ulp_bounds_on_every_isa(sample):
    from minigraph.backends import native

    x, exact = sample
    names = list(ULP_BOUNDS)
    isas = [isa for isa in native.ISAS[::-1] if native.ISAS.index(isa)
            <= native.ISAS.index(native.best_isa())]
    first = None
    try:
        for isa in isas:
            assert native.set_isa(isa) == isa
            for threads in (1, 2):
                native.set_num_threads(threads)
                results = _native_results(x, names)
                if first is None:
                    first = results
                    for name, result in zip(names, results):
                        worst = _ulp_errors(result, exact[name]).max()
                        assert worst <= ULP_BOUNDS[name], (
                            f"{name}: {worst:.2f} ulp > {ULP_BOUNDS[name]}")
                for name, a, b in zip(names, results, first):  # the same bits everywhere
                    np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32),
                                                  err_msg=f"{name} {isa} x{threads}")
    finally:
        native.set_isa(native.best_isa())
        native.set_num_threads(None)


def test_numpy_exponentials_are_correctly_rounded(sample):
    """The reference kernels round the float64 value once: within half an ulp (plus
    float64's own error) of the exact value."""
    x, exact = sample
    root = mg.Scope.NewRootScope()
    names = list(ULP_BOUNDS)
    results = _run("reference", [FORWARD[name][0](root, x) for name in names])
    for name, result in zip(names, results):
        assert _ulp_errors(result, exact[name]).max() <= 0.5 + 1e-6, name


@pytest.mark.skipif(not NATIVE_AVAILABLE, reason="the native kernels are not built")
@pytest.mark.parametrize("alpha", [0.2, 0.3, 1.5, -1.0, 0.0])
def test_native_leaky_relu_and_softsign_are_the_numpy_kernels_bit_for_bit(alpha):
    x = np.concatenate([_float32_sample(np.random.default_rng(4))[:100_000],
                        SPECIAL.astype(F32)])
    results = []
    for backend in ("native", "reference"):
        root = mg.Scope.NewRootScope()
        metadata = mg.RunMetadata()
        results.append(mg.ClientSession(root, backend=backend).Run(
            {}, [ops.LeakyRelu(root, x, alpha=alpha), ops.Softsign(root, x)],
            run_metadata=metadata))
        kernels = {s.op_type: s.kernel for s in metadata.step_stats}
        assert kernels["LeakyRelu"].endswith("_native") == (backend == "native")
    for a, b in zip(*results):
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


# ----------------------------------------------------------------------------- errors


def test_float_only_activations_refuse_integers():
    root = mg.Scope.NewRootScope()
    for name, (op, _) in FORWARD.items():
        with pytest.raises(InvalidArgumentError, match=rf"{name} '{name}': input '\w+' has "
                                                       r"dtype int32, not in the allowed"):
            op(root, np.array([1, 2], np.int32))
    with pytest.raises(InvalidArgumentError, match="attr 'alpha' must be a float"):
        ops.LeakyRelu(root, np.ones(2, F32), alpha="0.1")


@pytest.mark.parametrize("name", ["EluGrad", "SeluGrad", "LeakyReluGrad", "SoftplusGrad",
                                  "SoftsignGrad"])
def test_gradient_ops_refuse_two_shapes(name):
    """At construction when the static shapes show it, at run time otherwise (TF merges
    both inputs' shapes)."""
    op = GRADIENT[name][0]
    second = "outputs" if name in ("EluGrad", "SeluGrad") else "features"
    message = (rf"{name} '\w+': inputs 'gradients' and '{second}' must have the same "
               r"shape, got \(2, 3\) and \(3, 2\)")
    root = mg.Scope.NewRootScope()
    with pytest.raises(InvalidArgumentError, match=message):
        op(root, np.ones((2, 3), F32), np.ones((3, 2), F32))
    a = ops.Placeholder(root.WithOpName("a"), mg.float32)
    b = ops.Placeholder(root.WithOpName("b"), mg.float32)
    z = op(root, a, b)
    for backend in BACKENDS:
        with pytest.raises(InvalidArgumentError, match=message):
            mg.ClientSession(root, backend=backend).Run(
                {a: np.ones((2, 3), F32), b: np.ones((3, 2), F32)}, [z])


def test_sigmoid_grad_refuses_another_element_count():
    message = (r"SigmoidGrad '\w+': The two arguments to a cwise op must have same "
               r"number of elements, got 6 and 4")
    root = mg.Scope.NewRootScope()
    with pytest.raises(InvalidArgumentError, match=message):
        ops.SigmoidGrad(root, np.ones((2, 3), F32), np.ones(4, F32))
    y = ops.Placeholder(root.WithOpName("y"), mg.float32, shape=[None, 3])
    z = ops.SigmoidGrad(root, y, np.ones(4, F32))
    with pytest.raises(InvalidArgumentError, match=message):
        mg.ClientSession(root, backend="reference").Run({y: np.ones((2, 3), F32)}, [z])


# ----------------------------------------------------------------------------- TensorFlow


@pytest.fixture(scope="module")
def tf():
    from minigraph.testing import tf_graphs

    pytest.importorskip("tensorflow")
    return tf_graphs.tensorflow()


# TF's kernels are accurate to ~7 ulp (Eigen's float approximations), read subnormal inputs
# as zero and flush subnormal results to zero (LeakyRelu(1.5) of -2^-127 gives -0, not
# -1.5 * 2^-127: hence 2^-125), and compute Elu and Selu with exp(x) - 1 (absolute error
# ~2^-24 near 0)
TF_ULPS = 8
TF_ABSOLUTE = {"Elu": 2.0**-22, "Selu": 2.0**-22}


def _assert_tf_close(ours: np.ndarray, theirs: np.ndarray, name: str) -> None:
    ours, theirs = ours.astype(F64), np.asarray(theirs).astype(F64)
    assert ours.shape == theirs.shape, name
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(theirs), err_msg=name)
    finite = np.isfinite(theirs)
    np.testing.assert_array_equal(ours[~finite & ~np.isnan(theirs)],
                                  theirs[~finite & ~np.isnan(theirs)], err_msg=name)
    a, b = ours[finite], theirs[finite]
    tolerance = TF_ULPS * np.spacing(np.abs(b).astype(F32)).astype(F64) + TF_ABSOLUTE.get(
        name, 2.0**-125)
    bad = np.abs(a - b) > tolerance
    assert not bad.any(), f"{name}: ours {a[bad][:5]}, TF {b[bad][:5]}"


@pytest.mark.oracle
@pytest.mark.parametrize("backend", BACKENDS)
def test_activations_against_tensorflow(tf, backend):
    rng = np.random.default_rng(5)
    x = np.concatenate([SPECIAL, rng.standard_normal(20_000) * 6,
                        _float32_sample(rng)[:50_000]]).astype(F32)
    root = mg.Scope.NewRootScope()
    cases = {name: op(root, x) for name, (op, _) in FORWARD.items()}
    cases["LeakyRelu"] = ops.LeakyRelu(root, x)
    cases["LeakyRelu(1.5)"] = ops.LeakyRelu(root, x, alpha=1.5)
    ours = dict(zip(cases, _run(backend, list(cases.values()))))
    raw = tf.raw_ops
    theirs = {name: (getattr(raw, name)(x=x) if name in ("Sigmoid", "Tanh")
                     else getattr(raw, name)(features=x)) for name in FORWARD}
    theirs["LeakyRelu"] = raw.LeakyRelu(features=x)
    theirs["LeakyRelu(1.5)"] = raw.LeakyRelu(features=x, alpha=1.5)
    for name in cases:
        _assert_tf_close(ours[name], theirs[name].numpy(), name.split("(")[0])


@pytest.mark.oracle
@pytest.mark.parametrize("backend", BACKENDS)
def test_gradient_ops_against_tensorflow(tf, backend):
    values = np.concatenate([SPECIAL, np.random.default_rng(6).standard_normal(30) * 3])
    first, second = (a.reshape(-1).astype(F32) for a in np.meshgrid(values, values))
    root = mg.Scope.NewRootScope()
    fetches, theirs = [], []
    for name, (op, _) in GRADIENT.items():
        if name in ("SigmoidGrad", "TanhGrad"):
            fetches.append(op(root, second, first))
            theirs.append(getattr(tf.raw_ops, name)(y=second, dy=first))
        else:
            fetches.append(op(root, first, second))
            key = "outputs" if name in ("EluGrad", "SeluGrad") else "features"
            theirs.append(getattr(tf.raw_ops, name)(gradients=first, **{key: second}))
    for name, a, b in zip(GRADIENT, _run(backend, fetches), theirs):
        _assert_tf_close(a, b.numpy(), name)


def _frozen_activations_model(tf, swish):
    """Dense layers with Keras' activations and LeakyReLU layers, frozen by TF; ``swish``: the
    last Dense layer's activation (the string "swish" freezes with an IdentityN, the custom
    gradient's; a Lambda x * sigmoid(x) without)."""
    from minigraph.testing import tf_graphs

    k = tf_graphs.keras()
    inputs = k.Input((8,))
    h = inputs
    for activation in ("sigmoid", "tanh", "elu", "selu", "softplus", "softsign", swish):
        h = k.layers.Dense(8, activation=activation)(h)
    h = k.layers.LeakyReLU()(h)  # Keras' alpha 0.3
    h = k.layers.LeakyReLU(alpha=0.1)(k.layers.Dense(8)(h))
    graph = tf_graphs.frozen_keras("activations", k.Model(inputs, h), (8,), batch=16)
    types = {node.op for node in tf.compat.v1.GraphDef.FromString(graph.graph_def).node}
    assert {"Sigmoid", "Tanh", "Elu", "Selu", "Softplus", "Softsign", "LeakyRelu"} <= types
    return graph, types


def _assert_imported_graph_matches(graph) -> None:
    root = mg.import_graph_def(graph.graph_def)
    for backend in BACKENDS:
        ours = mg.ClientSession(root, backend=backend).Run(graph.feeds, graph.fetches)
        for a, b in zip(ours, graph.expected):
            assert_close(a, b, dtype=F32, what=backend)


@pytest.mark.oracle
def test_frozen_keras_model_with_every_activation_matches_tensorflow(tf):
    """sigmoid, tanh, elu, selu, softplus, softsign, swish written x * sigmoid(x) (Mul and
    Sigmoid) and LeakyReLU layers: the frozen graph imports and every backend computes what
    TF computed."""
    from minigraph.testing import tf_graphs

    graph, _ = _frozen_activations_model(
        tf, tf_graphs.keras().layers.Lambda(lambda t: t * tf.sigmoid(t)))
    _assert_imported_graph_matches(graph)


@pytest.mark.oracle
def test_frozen_keras_swish_matches_tensorflow(tf):
    """Keras' "swish" string (tf.nn.silu: x * sigmoid(x) under a custom gradient, frozen with
    an IdentityN)."""
    graph, _ = _frozen_activations_model(tf, "swish")
    _assert_imported_graph_matches(graph)


@pytest.mark.parametrize("op_name", ["EluGrad", "SeluGrad"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_second_order_selects_like_tensorflow_under_infinities(op_name, backend):
    """d(EluGrad)/d(outputs) is ``upstream * gradients`` where outputs < 0 and 0 elsewhere,
    by selection as TF's ``where``: an infinite ``gradients`` where outputs >= 0 gives 0,
    not NaN."""
    root = mg.Scope.NewRootScope()
    gradients = np.array([np.inf, -np.inf, 2.0, 3.0, np.nan], np.float32)
    outputs = np.array([0.5, 0.0, -0.25, -0.5, 1.0], np.float32)
    out = ops.Placeholder(root.WithOpName("outputs"), mg.float32, shape=[5])
    upstream = np.array([1.0, 2.0, 3.0, -1.0, 1.0], np.float32)
    backprops = getattr(ops, op_name)(root, gradients, out)
    loss = ops.Sum(root, ops.Mul(root, backprops, upstream), [0])
    [d_outputs] = mg.AddSymbolicGradients(root, [loss], [out])
    got = mg.ClientSession(root, backend=backend).Run({out: outputs}, d_outputs)
    expected = np.where(outputs < 0, upstream.astype(np.float64) * gradients, 0.0)
    np.testing.assert_array_equal(got, expected.astype(np.float32))
