"""Shared test helpers: the backends to test, independent float64 formulas, comparisons.

Every expected value in this suite comes from the float64 formulas below (written from
docs/tf-semantics.md, independently of minigraph's kernels) or from TensorFlow itself.

Tolerances (``assert_close``):

* float32: ``|actual - expected| <= rtol * (|expected| + mag)`` with ``rtol = 1e-5`` and
  ``mag`` the size of the terms the result was computed from (norm-wise; defaults to the
  largest finite ``|expected|``).
* float16 / bfloat16: the contract is "compute in float32, round once to T". The expected
  value is ``float64 formula -> float32 -> T`` and the actual value must lie within one ulp of
  T of it, plus the float32 allowance ``rtol * mag`` (which is below one ulp of T for every
  element larger than ~1% of ``mag``, so math done in half precision is still caught).
* float64: ``rtol = 1e-12``.
* NaN and ±inf must sit at the same places (same sign for inf).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable

import ml_dtypes
import numpy as np
import pytest

# Every session in the suite checks each kernel result against its op's outputs (dtype and
# the shape inferred for its inputs), on every backend: set before minigraph is imported.
os.environ.setdefault("MINIGRAPH_CHECK_OUTPUTS", "1")

import minigraph as mg  # noqa: E402

F64 = np.float64
BF16 = np.dtype(ml_dtypes.bfloat16)
HALF_DTYPES = (np.dtype(np.float16), BF16)

# ----------------------------------------------------------------------------- backends


def native_available() -> bool:
    """Whether ``minigraph.backends.native`` imports and says it is available."""
    try:
        from minigraph.backends import native
    except ImportError:
        return False
    return bool(native.available())


NATIVE_AVAILABLE = native_available()


def available_backends() -> list[str]:
    """``reference`` always; ``native`` when it is available.

    ``MINIGRAPH_TEST_BACKENDS=reference`` (a comma-separated list) narrows the choice.
    """
    wanted = os.environ.get("MINIGRAPH_TEST_BACKENDS")
    if wanted:
        return [name.strip() for name in wanted.split(",") if name.strip()]
    return ["reference"] + (["native"] if NATIVE_AVAILABLE else [])


BACKENDS = available_backends()


@contextlib.contextmanager
def counting_replays():
    """A list that grows by one entry per replayed step of a bound program (a loop's
    iteration, a session's run: ``client/replay.py``) while the block runs."""
    from minigraph.client import replay

    steps: list[int] = []
    step = replay.LoopReplay.step
    replay.LoopReplay.step = lambda self: steps.append(1) or step(self)
    try:
        yield steps
    finally:
        replay.LoopReplay.step = step


@pytest.fixture
def replayed_steps():
    """:func:`counting_replays` over one test."""
    with counting_replays() as steps:
        yield steps


def wrong_from_threads(right: Callable[[int], bool], cases: int, threads: int = 4,
                       steps: int = 20) -> list[tuple[int, int]]:
    """Call ``right(k)`` (whether case k's run gave the expected results) from ``threads``
    threads at once, each going through the ``cases`` in turn from its own start, ``steps``
    times; the (thread, step) pairs that went wrong."""
    wrong: list[tuple[int, int]] = []

    def work(thread: int) -> None:
        for step in range(steps):
            if not right((thread + step) % cases):
                wrong.append((thread, step))

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return wrong


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    return request.param


def run(scope: mg.Scope, fetches, feeds=None, backend: str = "reference"):
    """Run ``fetches`` in a fresh session on ``backend``."""
    return mg.ClientSession(scope, backend=backend).Run(feeds or {}, fetches)


# ----------------------------------------------------------------------------- layouts


def channel_axis(data_format: str) -> int:
    return len(data_format) - 1 if data_format.endswith("C") else 1


def x_shape(data_format: str, n: int, spatial: tuple[int, ...], c: int) -> tuple[int, ...]:
    """An x shape for ``data_format``: ``spatial`` has 2 entries for 4-D formats, 3 for 5-D."""
    assert len(spatial) == len(data_format) - 2
    return (n, *spatial, c) if data_format.endswith("C") else (n, c, *spatial)


def _layout(x: np.ndarray, data_format: str):
    axis = channel_axis(data_format)
    axes = tuple(a for a in range(x.ndim) if a != axis)
    shape = [1] * x.ndim
    shape[axis] = x.shape[axis]
    return axes, shape


def as_attr_float(value: float) -> float:
    """Float attrs are stored as float32 (as in TF's AttrValue)."""
    return float(np.float32(value))


# ----------------------------------------------------------------------------- float64 formulas


def _max_finite(values) -> float:
    values = np.asarray(values, F64)
    finite = values[np.isfinite(values)]
    return float(finite.max()) if finite.size else 0.0


def fused_bn_forward_f64(x, scale, offset, mean, variance, *, epsilon=1e-4,
                         exponential_avg_factor=1.0, data_format="NHWC", is_training=True):
    """docs/tf-semantics.md#fusedbatchnormv3-forward in float64.

    Returns a dict with y, batch_mean, batch_variance, reserve_space_1, reserve_space_2 and
    ``mag``: for each output, the size of the terms it is computed from (for tolerances).
    """
    x = np.asarray(x).astype(F64)
    axes, bshape = _layout(x, data_format)
    c = x.shape[channel_axis(data_format)]
    eps = as_attr_float(epsilon)
    f = as_attr_float(exponential_avg_factor)
    scale, offset = np.asarray(scale, F64), np.asarray(offset, F64)
    mean, variance = np.asarray(mean, F64), np.asarray(variance, F64)
    if x.size == 0:
        nan = np.full(c, np.nan)
        return {"y": np.zeros(x.shape), "batch_mean": nan, "batch_variance": nan,
                "reserve_space_1": np.zeros(c), "reserve_space_2": np.zeros(c), "mag": {}}
    n = x.size // c
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if is_training:
            mu = x.mean(axis=axes)
            var_b = ((x - mu.reshape(bshape)) ** 2).mean(axis=axes)
            k = n / max(n - 1, 1)
            if f == 1.0:
                batch_mean, batch_variance = mu, k * var_b
                stat_mag = (_max_finite(np.abs(x)), _max_finite(k * var_b))
            else:
                batch_mean = (1 - f) * mean + f * mu
                batch_variance = (1 - f) * variance + f * k * var_b
                stat_mag = (max(_max_finite(np.abs(x)), _max_finite(np.abs((1 - f) * mean))),
                            _max_finite(np.abs((1 - f) * variance) + np.abs(f * k * var_b)))
            used_mean, used_var = mu, var_b
            rs1, rs2 = mu, var_b
        else:
            used_mean, used_var = mean, variance
            batch_mean, batch_variance, rs1, rs2 = mean, variance, mean, variance
            stat_mag = (_max_finite(np.abs(mean)), _max_finite(np.abs(variance)))
        factor = scale / np.sqrt(used_var + eps)
        y = (x - used_mean.reshape(bshape)) * factor.reshape(bshape) + offset.reshape(bshape)
        y_mag = ((np.abs(x) + np.abs(used_mean).reshape(bshape))
                 * np.abs(factor).reshape(bshape) + np.abs(offset).reshape(bshape))
    mag = {"y": _max_finite(y_mag), "batch_mean": stat_mag[0], "batch_variance": stat_mag[1],
           "reserve_space_1": stat_mag[0] if is_training else None,
           "reserve_space_2": _max_finite(rs2)}
    return {"y": y, "batch_mean": batch_mean, "batch_variance": batch_variance,
            "reserve_space_1": rs1, "reserve_space_2": rs2, "mag": mag}


def fused_bn_grad_f64(dy, x, scale, reserve_space_1, reserve_space_2, *, epsilon=1e-4,
                      data_format="NHWC", is_training=True):
    """docs/tf-semantics.md#gradient-formulas in float64: x_backprop, scale_backprop,
    offset_backprop and ``mag``."""
    dy, x = np.asarray(dy).astype(F64), np.asarray(x).astype(F64)
    axes, bshape = _layout(x, data_format)
    c = x.shape[channel_axis(data_format)]
    if x.size == 0:
        return {"x_backprop": np.zeros(x.shape), "scale_backprop": np.zeros(c),
                "offset_backprop": np.zeros(c), "mag": {}}
    n = x.size // c
    scale = np.asarray(scale, F64)
    mean, var = np.asarray(reserve_space_1, F64), np.asarray(reserve_space_2, F64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r = 1 / np.sqrt(var + as_attr_float(epsilon))
        xc = x - mean.reshape(bshape)
        sum_dy = dy.sum(axis=axes)
        sum_dy_xc = (dy * xc).sum(axis=axes)
        sr = (scale * r).reshape(bshape)
        if is_training:
            third = xc * (sum_dy_xc / n * r * r).reshape(bshape)
            dx = sr * (dy - (sum_dy / n).reshape(bshape) - third)
            dx_mag = np.abs(sr) * (np.abs(dy) + np.abs(sum_dy / n).reshape(bshape)
                                   + np.abs(third))
        else:
            dx = dy * sr
            dx_mag = np.abs(dx)
        scale_backprop = sum_dy_xc * r
        mag = {"x_backprop": _max_finite(dx_mag),
               "scale_backprop": _max_finite(
                   (np.abs(dy) * (np.abs(x) + np.abs(mean).reshape(bshape))).sum(axis=axes)
                   * r),
               "offset_backprop": _max_finite(np.abs(dy).sum(axis=axes))}
    return {"x_backprop": dx, "scale_backprop": scale_backprop, "offset_backprop": sum_dy,
            "mag": mag}


def global_norm_f64(t, m, v, beta, gamma, *, variance_epsilon, scale_after_normalization):
    """docs/tf-semantics.md#global-normalization-forward in float64 (channel last): (result,
    its term size)."""
    t = np.asarray(t).astype(F64)
    m, v, beta, gamma = (np.asarray(a).astype(F64) for a in (m, v, beta, gamma))
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = 1 / np.sqrt(v + as_attr_float(variance_epsilon))
        if scale_after_normalization:
            factor = factor * gamma
        result = (t - m) * factor + beta
        mag = (np.abs(t) + np.abs(m)) * np.abs(factor) + np.abs(beta)
    return result, _max_finite(mag)


def global_norm_grad_f64(t, m, v, gamma, backprop, *, variance_epsilon,
                         scale_after_normalization):
    """docs/tf-semantics.md#global-normalization-gradient in float64 (the code's formula for
    dm, not the doc comment's):
    dict dx, dm, dv, db, dg and ``mag``."""
    t, backprop = np.asarray(t).astype(F64), np.asarray(backprop).astype(F64)
    m, v, gamma = (np.asarray(a).astype(F64) for a in (m, v, gamma))
    axes = (0, 1, 2)
    eps = as_attr_float(variance_epsilon)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r = 1 / np.sqrt(v + eps)
        db = backprop.sum(axis=axes)
        s2 = (backprop * (t - m)).sum(axis=axes)
        g = gamma if scale_after_normalization else np.ones_like(gamma)
        dx = backprop * (r * g)
        dm = -db * (r * g)
        dv = s2 * (-0.5 * r / (v + eps)) * g
        dg = s2 * r if scale_after_normalization else np.zeros_like(s2)
        abs_db = np.abs(backprop).sum(axis=axes)
        abs_s2 = (np.abs(backprop) * (np.abs(t) + np.abs(m))).sum(axis=axes)
        mag = {"dx": _max_finite(np.abs(dx)), "dm": _max_finite(abs_db * np.abs(r * g)),
               "dv": _max_finite(abs_s2 * np.abs(0.5 * r / (v + eps) * g)),
               "db": _max_finite(abs_db), "dg": _max_finite(abs_s2 * r)}
    return {"dx": dx, "dm": dm, "dv": dv, "db": db, "dg": dg, "mag": mag}


# ----------------------------------------------------------------------------- comparisons


def ulp(values: np.ndarray, dtype) -> np.ndarray:
    """One unit in the last place of ``dtype`` at each of ``values`` (float64 result)."""
    info = ml_dtypes.finfo(dtype)
    a = np.abs(np.asarray(values, F64))
    with np.errstate(divide="ignore"):
        exponent = np.floor(np.log2(np.where(a > 0, a, 1.0)))
    exponent = np.where(a > 0, np.maximum(exponent, info.minexp), info.minexp)
    return np.exp2(exponent - info.nmant)


def to_storage(expected64: np.ndarray, dtype) -> np.ndarray:
    """float64 -> float32 -> dtype: what "compute in float32, round once" should give."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(expected64, F64).astype(np.float32).astype(dtype)


def assert_close(actual, expected, *, dtype=None, rtol=None, mag=None, what=""):
    """Compare ``actual`` (a minigraph result) with ``expected`` (float64 formula or TF).

    ``dtype`` is the storage type ``actual`` must have (defaults to ``expected``'s when that
    is a numpy float array other than float64 formula output). See the module docstring.
    """
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    dtype = np.dtype(dtype) if dtype is not None else actual.dtype
    assert actual.dtype == dtype, f"{what}: dtype {actual.dtype}, expected {dtype}"
    assert actual.shape == expected.shape, (
        f"{what}: shape {actual.shape}, expected {expected.shape}")
    if rtol is None:
        rtol = 1e-12 if dtype == F64 else 1e-5
    a = actual.astype(F64)
    e = to_storage(expected, dtype).astype(F64) if dtype in HALF_DTYPES else expected.astype(F64)
    nan_a, nan_e = np.isnan(a), np.isnan(e)
    assert np.array_equal(nan_a, nan_e), (
        f"{what}: NaN at {np.argwhere(nan_a != nan_e)[:5].tolist()} differ "
        f"(actual {a[nan_a != nan_e][:5]}, expected {e[nan_a != nan_e][:5]})")
    inf_a, inf_e = np.isinf(a), np.isinf(e)
    assert np.array_equal(inf_a, inf_e) and np.array_equal(a[inf_a], e[inf_e]), (
        f"{what}: infinities differ: actual {a[inf_a | inf_e][:5]}, expected "
        f"{e[inf_a | inf_e][:5]}")
    finite = ~(nan_e | inf_e)
    if not finite.any():
        return
    a, e = a[finite], e[finite]
    if mag is None:
        mag = float(np.abs(e).max())
    tolerance = rtol * mag + (ulp(e, dtype) if dtype in HALF_DTYPES else rtol * np.abs(e))
    error = np.abs(a - e)
    bad = error > tolerance
    assert not bad.any(), (
        f"{what}: {int(bad.sum())}/{bad.size} elements off; worst |err| "
        f"{error.max():.3g} (tolerance there {tolerance[np.argmax(error - tolerance)]:.3g}); "
        f"actual {a[bad][:4]}, expected {e[bad][:4]}")


def assert_identical(actual, expected, what=""):
    """Bitwise equality (same dtype, shape, values; NaN == NaN)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} vs {expected.dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} vs {expected.shape}"
    assert np.array_equal(np.ascontiguousarray(actual).view(np.uint8),
                          np.ascontiguousarray(expected).view(np.uint8)), (
        f"{what}: values differ: {actual.ravel()[:6]} vs {expected.ravel()[:6]}")


# ----------------------------------------------------------------------------- data


def random_case(rng: np.random.Generator, shape, data_format: str, dtype, *,
                centre=1.5, spread=2.0):
    """x (dtype), and float32 scale/offset/mean/variance for its channel count."""
    c = shape[channel_axis(data_format)]
    x = (rng.normal(centre, spread, shape)).astype(np.float32).astype(dtype)
    scale = (rng.uniform(0.5, 2.0, c) * rng.choice([-1, 1], c)).astype(np.float32)
    offset = rng.normal(0, 1, c).astype(np.float32)
    mean = rng.normal(centre, 1, c).astype(np.float32)
    variance = rng.uniform(0.5, 4.0, c).astype(np.float32)
    return x, scale, offset, mean, variance


# ----------------------------------------------------------------------------- OpenCL isolation

OPENCL_TESTS = "test_opencl.py"


def pytest_addoption(parser):
    parser.addoption("--zoo-full", action="store_true",
                     help="tests/test_keras_zoo.py: every Keras zoo entry, not only the CI set "
                          "(also MINIGRAPH_ZOO_FULL=1)")


def pytest_collection_modifyitems(config, items):
    """Keep the OpenCL suite out of a run that also executes TensorFlow.

    TensorFlow's bundled LLVM, once TF has run ops in the process, breaks PoCL's kernel
    compiler (``unknown target CPU``, or a segfault). ``make test`` therefore runs
    ``tests/test_opencl.py`` in its own pytest process; a mixed run deselects it and says so.
    """
    opencl = [item for item in items if item.path.name == OPENCL_TESTS]
    if opencl and len(opencl) != len(items):
        items[:] = [item for item in items if item.path.name != OPENCL_TESTS]
        config.hook.pytest_deselected(items=opencl)
        config.issue_config_time_warning(pytest.PytestConfigWarning(
            f"{len(opencl)} OpenCL tests deselected: they must run in their own process "
            f"(python -m pytest tests/{OPENCL_TESTS}; `make test` does it)"), stacklevel=2)
