"""The OpenCL device (``backends.opencl``) against the numpy reference backend.

Skipped only when pyopencl cannot be imported or no OpenCL platform has a device; CI installs
pyopencl[pocl] (and PoCL), so these run there on the CPU. Every graph is built twice, on
``/device:OPENCL:0`` and on the CPU, and run with the reference math; the device's results
must match:

* float32 outputs: ``|actual - expected| <= 1e-5 * (|expected| + mag)``, ``mag`` the largest
  ``|expected|`` of that output (norm-wise, as the float32 sums are ordered differently);
* float16 / bfloat16 outputs: within one ulp of the storage type, plus the same float32
  allowance ``1e-5 * mag`` (both compute in float32 and round once).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings

import ml_dtypes
import numpy as np
import pytest

pytest.importorskip("pyopencl")

import minigraph as mg  # noqa: E402
from minigraph import ops  # noqa: E402
from minigraph.backends import opencl  # noqa: E402
from minigraph.client import session as session_module  # noqa: E402

if not any(info.name for info in opencl.devices()):
    pytest.skip("no OpenCL platform with a device", allow_module_level=True)

pytestmark = pytest.mark.filterwarnings("ignore:minigraph.*soft placement:UserWarning")
DEVICE = "/device:OPENCL:0"
F32, F16, BF16 = np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)
FORMATS = ("NHWC", "NCHW", "NDHWC", "NCDHW")


@pytest.fixture(scope="module")
def device() -> opencl.OpenCLDevice:
    return opencl.get_device("OPENCL", 0)


# ----------------------------------------------------------------------------- helpers


def ulp(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    info = ml_dtypes.finfo(dtype)
    a = np.abs(values.astype(np.float64))
    with np.errstate(divide="ignore"):
        exponent = np.floor(np.log2(np.where(a > 0, a, 1.0)))
    return np.exp2(np.maximum(np.where(a > 0, exponent, info.minexp), info.minexp)
                   - info.nmant)


def assert_matches(actual: np.ndarray, expected: np.ndarray, what: str) -> None:
    assert isinstance(actual, np.ndarray), f"{what}: got {type(actual).__name__}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} vs {expected.dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} vs {expected.shape}"
    a, e = actual.astype(np.float64), expected.astype(np.float64)
    assert np.array_equal(np.isnan(a), np.isnan(e)), f"{what}: NaNs differ"
    finite = np.isfinite(e)
    assert np.array_equal(a[~finite & ~np.isnan(e)], e[~finite & ~np.isnan(e)]), \
        f"{what}: infinities differ"
    if not finite.any():
        return
    a, e = a[finite], e[finite]
    mag = np.abs(e).max()
    allowance = 1e-5 * mag + (ulp(e, expected.dtype) if expected.dtype != F32
                              else 1e-5 * np.abs(e))
    error = np.abs(a - e)
    assert (error <= allowance).all(), (
        f"{what}: {(error > allowance).sum()}/{error.size} off, worst {error.max():.3g} "
        f"(allowance there {allowance[np.argmax(error - allowance)]:.3g})")


def run_both(build, feeds: dict, backend: str = "reference"):
    """Build with ``build(scope) -> (fetches, placeholders)`` on the device and on the CPU,
    run both with the same feeds; return (device results, CPU results)."""
    results = []
    for device in (DEVICE, ""):
        root = mg.Scope.NewRootScope()
        fetches, placeholders = build(root.WithDevice(device), root)
        fed = {placeholders[name]: value for name, value in feeds.items()}
        results.append(mg.ClientSession(root, backend=backend).Run(fed, fetches))
    return results


def channel_axis(data_format: str) -> int:
    return len(data_format) - 1 if data_format.endswith("C") else 1


def shape_for(data_format: str, channels: int, inner: int) -> tuple[int, ...]:
    """N=3 and spatial dims whose product is ``inner`` (1 or 7)."""
    spatial = (inner, 1) if len(data_format) == 4 else (1, inner, 1)
    return (3, *spatial, channels) if data_format.endswith("C") else (3, channels, *spatial)


# ----------------------------------------------------------------------------- the table


CASES = [(fmt, training, dtype, channels, inner)
         for fmt in FORMATS for training in (True, False) for dtype in (F32, F16, BF16)
         for channels in (1, 3, 17) for inner in (1, 7)]


@pytest.mark.parametrize("data_format, is_training, dtype, channels, inner", [
    pytest.param(*case, id=f"{case[0]}-{'train' if case[1] else 'infer'}-{case[2].name}"
                 f"-C{case[3]}-in{case[4]}") for case in CASES])
def test_fused_batch_norm_family_matches_reference(data_format, is_training, dtype, channels,
                                                   inner):
    """FusedBatchNormV3 -> FusedBatchNormGradV3 -> FusedBatchNormGradGrad, all on the device."""
    rng = np.random.default_rng([channels, inner, len(data_format), int(is_training)])
    shape = shape_for(data_format, channels, inner)
    eaf = 0.3 if channels == 17 else 1.0  # exercises the blending on device vectors
    epsilon = 1e-3
    vec = {name: rng.normal(0, 1, channels).astype(np.float32)
           for name in ("scale", "offset", "mean", "gscale", "goffset")}
    vec["variance"] = rng.uniform(0.5, 2, channels).astype(np.float32)
    feeds = {name: rng.normal(1.5, 2, shape).astype(np.float32).astype(dtype)
             for name in ("x", "dy", "gx")}
    attrs = dict(data_format=data_format, is_training=is_training, epsilon=epsilon)

    def build(scope, root):
        t = mg.as_dtype(dtype)
        holders = {name: ops.Placeholder(root, t) for name in ("x", "dy", "gx")}
        x, dy, gx = holders["x"], holders["dy"], holders["gx"]
        fwd = ops.FusedBatchNormV3(scope, x, vec["scale"], vec["offset"], vec["mean"],
                                   vec["variance"], exponential_avg_factor=eaf, **attrs)
        saved = ((fwd.reserve_space_1, fwd.reserve_space_2) if is_training
                 else (vec["mean"], vec["variance"]))
        grad = ops.FusedBatchNormGradV3(scope, dy, x, vec["scale"], *saved,
                                        fwd.reserve_space_3, **attrs)
        second = ops.FusedBatchNormGradGrad(scope, dy, x, vec["scale"], *saved, gx,
                                            vec["gscale"], vec["goffset"], **attrs)
        return list(fwd)[:5] + list(grad)[:3] + list(second), holders

    actual, expected = run_both(build, feeds)
    names = ["y", "batch_mean", "batch_variance", "reserve_space_1", "reserve_space_2",
             "x_backprop", "scale_backprop", "offset_backprop", "grad_y_backprop", "grad_x",
             "grad_scale"]
    for name, a, e in zip(names, actual, expected):
        assert_matches(a, e, name)


@pytest.mark.parametrize("dtype", [F32, F16, BF16])
@pytest.mark.parametrize("data_format", ["NHWC", "NCDHW"])
def test_elementwise_paths_round_exactly_like_the_reference(device, dtype, data_format):
    """Inference y and x_backprop use no sums: with correctly rounded float32 divide/sqrt
    they are the reference's float32 values rounded once, bit for bit (rounding to nearest
    even, overflow to inf, NaN kept) - stricter than the 1-ulp contract above."""
    if "-cl-fp32-correctly-rounded-divide-sqrt" not in device.options:
        pytest.skip("this device's float32 divide/sqrt are not correctly rounded")
    rng = np.random.default_rng(4)
    shape = shape_for(data_format, 5, 7)
    values = rng.normal(0, 3, shape).astype(np.float32)
    values.flat[:6] = [6.0e4, -6.0e4, np.inf, -np.inf, np.nan, 1e-7]
    scale = np.array([4.0, -1.5, 0.3, 1.0, 2.0], np.float32)
    offset, mean = rng.normal(0, 1, 5).astype(np.float32), rng.normal(0, 1, 5).astype(np.float32)
    variance = rng.uniform(0.1, 3, 5).astype(np.float32)
    feeds = {"x": values.astype(dtype), "dy": values[::-1].copy().astype(dtype)}
    attrs = dict(data_format=data_format, is_training=False, epsilon=1e-3)

    def build(scope, root):
        holders = {name: ops.Placeholder(root, mg.as_dtype(dtype)) for name in feeds}
        fwd = ops.FusedBatchNormV3(scope, holders["x"], scale, offset, mean, variance, **attrs)
        grad = ops.FusedBatchNormGradV3(scope, holders["dy"], holders["x"], scale, mean,
                                        variance, fwd.reserve_space_3, **attrs)
        return [fwd.y, grad.x_backprop], holders

    with np.errstate(invalid="ignore", over="ignore"):
        actual, expected = run_both(build, feeds)
    for a, e in zip(actual, expected):
        nan = np.isnan(e.astype(np.float64))
        assert np.array_equal(np.isnan(a.astype(np.float64)), nan)
        assert a[~nan].tobytes() == e[~nan].tobytes()


@pytest.mark.parametrize("dtype", [F16, BF16])
def test_storage_conversions_round_to_nearest_even(device, dtype):
    """The device's float32 -> half/bfloat16 stores (used by every kernel) on ties, extremes,
    subnormals, inf and NaN, against numpy/ml_dtypes; and back to float32 exactly."""
    rng = np.random.default_rng(5)
    bits = np.concatenate([
        rng.integers(0, 2 ** 32, 4000, dtype=np.uint64).astype(np.uint32),
        np.array([0x3F808000, 0x3F818000, 0xBF808000, 0x3F800001, 0x7F7FFFFF, 0x7F800000,
                  0xFF800000, 0x00000001, 0x80000000, 0x477FF000, 0x477FEFFF, 0x33000000,
                  0x33000001, 0x38800000, 0x387FC000], np.uint32)])
    values = bits.view(np.float32)
    xp = device.math.xp
    stored = device.download(xp.asarray(device.upload(values), dtype))
    expected = values.astype(dtype)
    nan = np.isnan(values)
    assert np.isnan(stored[nan].astype(np.float32)).all()
    assert stored[~nan].tobytes() == expected[~nan].tobytes()
    widened = device.download(xp.asarray(device.upload(expected), F32))
    assert np.isnan(widened[nan]).all()
    assert widened[~nan].tobytes() == expected[~nan].astype(np.float32).tobytes()


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("scale_after_normalization", [True, False])
@pytest.mark.parametrize("channels", [1, 17])
def test_global_normalization_matches_reference(dtype, scale_after_normalization, channels):
    rng = np.random.default_rng(channels)
    shape = (2, 3, 7, channels)
    m, beta, gamma = (rng.normal(0, 1, channels).astype(dtype) for _ in range(3))
    v = rng.uniform(0.5, 2, channels).astype(dtype)
    feeds = {"t": rng.normal(1, 2, shape).astype(dtype),
             "backprop": rng.normal(0, 1, shape).astype(dtype)}

    def build(scope, root):
        holders = {name: ops.Placeholder(root, mg.as_dtype(dtype)) for name in feeds}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            y = ops.BatchNormWithGlobalNormalization(scope, holders["t"], m, v, beta, gamma,
                                                     1e-3, scale_after_normalization)
            grad = ops.BatchNormWithGlobalNormalizationGrad(
                scope, holders["t"], m, v, gamma, holders["backprop"], 1e-3,
                scale_after_normalization)
        return [y] + list(grad), holders

    actual, expected = run_both(build, feeds)
    for name, a, e in zip(["result", "dx", "dm", "dv", "db", "dg"], actual, expected):
        assert_matches(a, e, name)


@pytest.mark.parametrize("shape, data_format", [((0, 3, 4, 5), "NHWC"), ((2, 5, 0, 2), "NCHW"),
                                                ((0, 1, 2, 2, 3), "NDHWC")])
@pytest.mark.parametrize("is_training", [True, False])
def test_empty_x_on_device(shape, data_format, is_training):
    channels = shape[channel_axis(data_format)]
    vector = np.linspace(0.5, 1.5, channels).astype(np.float32)
    attrs = dict(data_format=data_format, is_training=is_training)

    def build(scope, root):
        x = ops.Placeholder(root, mg.float32)
        fwd = ops.FusedBatchNormV3(scope, x, vector, vector, vector, vector,
                                   exponential_avg_factor=0.5, **attrs)
        grad = ops.FusedBatchNormGradV3(scope, x, x, vector, vector, vector,
                                        fwd.reserve_space_3, **attrs)
        return list(fwd)[:5] + list(grad)[:3], {"x": x}

    actual, expected = run_both(build, {"x": np.zeros(shape, np.float32)})
    for a, e in zip(actual, expected):
        assert_matches(a, e, "empty")


def test_elementwise_loop_over_rows(monkeypatch):
    """With fewer work-groups allowed than rows, each work-item loops over rows."""
    monkeypatch.setattr(opencl, "_MAX_GROUPS", 1)
    test_fused_batch_norm_family_matches_reference("NHWC", True, F16, 17, 7)
    test_fused_batch_norm_family_matches_reference("NCHW", False, F32, 3, 7)


def test_repeated_runs_without_output_checks(device):
    """Sessions outside the test suite skip the output checks, and from their third Run on a
    host-only plan runs bound (``executor.BoundProgram``, numpy arrays only). A plan with
    device steps must keep running every Run, on the device, with new feeds each time: the
    benchmark's loop (it broke on its third Run before device plans were kept unbound)."""
    rng = np.random.default_rng(6)
    channels = 5
    scale, offset = np.linspace(0.5, 2, channels, dtype=np.float32), np.ones(channels, F32)
    empty = np.zeros(0, np.float32)
    sessions = []
    for where in (DEVICE, ""):
        root = mg.Scope.NewRootScope()
        x, dy = ops.Placeholder(root, mg.float32), ops.Placeholder(root, mg.float32)
        scope = root.WithDevice(where)
        fwd = ops.FusedBatchNormV3(scope, x, scale, offset, empty, empty)
        grad = ops.FusedBatchNormGradV3(scope, dy, x, scale, fwd.reserve_space_1,
                                        fwd.reserve_space_2, fwd.reserve_space_3)
        session = mg.ClientSession(root, backend="reference", check_outputs=False)
        sessions.append((session, x, dy, [fwd.y, fwd.batch_mean] + list(grad)[:3]))
    uploads = set()
    for _ in range(5):
        feeds = [rng.normal(1, 2, (3, 4, 2, channels)).astype(np.float32) for _ in range(2)]
        before = device.transfers["to_device"]
        actual, expected = (session.Run({x: feeds[0], dy: feeds[1]}, fetches)
                            for session, x, dy, fetches in sessions)
        uploads.add(device.transfers["to_device"] - before)
        for a, e in zip(actual, expected):
            assert_matches(a, e, "repeated run")
    assert len(uploads) == 1 and uploads.pop() > 0  # every Run moves the same tensors


def test_profiling_device_records_each_launch(device):
    """A profiling device keeps (name, completed event) per kernel launch (forward training:
    partial_sum, finish_mean, partial_centered_squares, finish_mean, apply_normalize), with
    timestamps in order, and computes the same bits as the plain device."""
    profiled = opencl.OpenCLDevice(device.cl, device.device, 0, profiling=True)
    assert device.events is None
    rng = np.random.default_rng(7)
    x = rng.normal(1, 2, (6, 5, 4, 9)).astype(np.float32)
    scale, offset = np.ones(9, np.float32), np.zeros(9, np.float32)
    results = []
    for where in (profiled, device):
        values = [where.upload(v) for v in (x, scale, offset)]
        results.append([where.download(r) for r in
                        where.math.bn_forward_training(*values, 1e-3, True)])
    names = [name for name, _ in profiled.events]
    assert names == ["partial_sum", "finish_mean", "partial_centered_squares",
                     "finish_mean", "apply_normalize"]
    for _, event in profiled.events:
        assert event.command_execution_status == device.cl.command_execution_status.COMPLETE
        assert 0 < event.profile.queued <= event.profile.start <= event.profile.end
    for a, b in zip(*results):
        assert a.tobytes() == b.tobytes()


def test_results_are_deterministic():
    shape = (8, 16, 16, 17)
    rng = np.random.default_rng(1)
    x_value = rng.normal(3, 2, shape).astype(np.float32)
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root, mg.float32)
    fwd = ops.FusedBatchNormV3(root.WithDevice(DEVICE), x, np.ones(17, np.float32),
                               np.zeros(17, np.float32), np.zeros(0, np.float32),
                               np.zeros(0, np.float32))
    session = mg.ClientSession(root, backend="reference")
    first = session.Run({x: x_value}, list(fwd)[:3])
    second = session.Run({x: x_value}, list(fwd)[:3])
    for a, b in zip(first, second):
        assert a.tobytes() == b.tobytes()


# ----------------------------------------------------------------------------- placement


def test_forward_then_grad_stays_on_the_device(device):
    """Only the feeds go up and only the fetches come down: the forward's y and reserve
    spaces reach the gradient without a host round trip."""
    rng = np.random.default_rng(2)
    root = mg.Scope.NewRootScope()
    gpu = root.WithDevice(DEVICE)
    x, dy = ops.Placeholder(root, mg.float32), ops.Placeholder(root, mg.float32)
    scale, offset = ops.Placeholder(root, mg.float32), ops.Placeholder(root, mg.float32)
    empty = np.zeros(0, np.float32)
    fwd = ops.FusedBatchNormV3(gpu, x, scale, offset, empty, empty, data_format="NCHW")
    grad = ops.FusedBatchNormGradV3(gpu, ops.Identity(gpu, dy), x, scale, fwd.reserve_space_1,
                                    fwd.reserve_space_2, fwd.reserve_space_3,
                                    data_format="NCHW")
    feeds = {x: rng.normal(size=(4, 3, 5, 5)).astype(np.float32),
             dy: rng.normal(size=(4, 3, 5, 5)).astype(np.float32),
             scale: np.ones(3, np.float32), offset: np.zeros(3, np.float32)}
    fetches = list(grad)[:3]
    session = mg.ClientSession(root, backend="reference")
    for _ in range(2):  # transfers are per Run
        before = dict(device.transfers)
        session.Run(feeds, fetches)
        moved = {k: device.transfers[k] - before[k] for k in before}
        # up: x (read by both ops, moved once), dy, scale (read by both), offset;
        # down: the three fetched outputs, nothing else.
        assert moved == {"to_device": 4, "to_host": 3}


def test_graph_mixing_cpu_and_opencl_ops(monkeypatch):
    """Device BN -> CPU math (soft placed, with a notice) -> explicit CPU op -> device BN."""
    monkeypatch.setattr(session_module, "_soft_placed", set())
    rng = np.random.default_rng(3)
    ones, zeros = np.ones(5, np.float32), np.zeros(5, np.float32)
    feeds = {"x": rng.normal(size=(2, 3, 4, 5)).astype(np.float32)}

    def build(scope, root):
        x = ops.Placeholder(root, mg.float32)
        first = ops.FusedBatchNormV3(scope, x, ones, zeros, zeros, ones, is_training=False)
        squared = ops.Square(scope, first.y)                      # no kernel: soft placed
        on_cpu = ops.Identity(scope.WithDevice("/device:CPU:0"), squared)
        second = ops.FusedBatchNormV3(scope, on_cpu, ones, zeros, zeros, ones)
        return [second.y, second.batch_mean, first.y], {"x": x}

    with pytest.warns(UserWarning, match=r"no OpenCL kernel for Square.*soft placement"):
        actual, expected = run_both(build, feeds)
    for a, e in zip(actual, expected):
        assert_matches(a, e, "mixed")


def test_float64_global_normalization_is_soft_placed(monkeypatch):
    monkeypatch.setattr(session_module, "_soft_placed", set())
    root = mg.Scope.NewRootScope()
    v = np.ones(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        y = ops.BatchNormWithGlobalNormalization(root.WithDevice(DEVICE), np.ones((1, 1, 1, 2)),
                                                 v, v, v, v, 0.0, True)
    with pytest.warns(UserWarning, match="T=float64"):
        result = mg.ClientSession(root, backend="reference").Run({}, y)
    assert result.dtype == np.float64


def test_gpu_placement_names(monkeypatch, device):
    listed = [info for info in opencl.devices() if info.name == DEVICE]
    assert listed and listed[0].device in device.description
    monkeypatch.setenv("MINIGRAPH_OPENCL_DEVICE", "0")
    assert opencl.get_device("GPU", 0) is device
    monkeypatch.delenv("MINIGRAPH_OPENCL_DEVICE")
    if not any("/device:GPU:0" in info.aliases for info in opencl.devices()):
        with pytest.raises(mg.errors.UnavailableError, match=r"/device:GPU:0.*OPENCL"):
            opencl.get_device("GPU", 0)


def test_bad_device_names():
    root = mg.Scope.NewRootScope()
    for name, error in (("/device:TPU:0", mg.errors.InvalidArgumentError),
                        ("/device:CPU:1", mg.errors.UnavailableError),
                        ("/device:OPENCL:99", mg.errors.UnavailableError)):
        x = ops.Identity(root.WithDevice(name), np.ones(2, np.float32))
        with pytest.raises(error, match=name):
            mg.ClientSession(root, backend="reference").Run({}, x)


# ----------------------------------------------------------------------------- no platform


def _run_in_subprocess(prelude: str, env: dict) -> str:
    code = prelude + textwrap.dedent("""
        import numpy as np
        import minigraph as mg
        from minigraph import ops
        root = mg.Scope.NewRootScope()
        v = np.ones(3, np.float32)
        fwd = ops.FusedBatchNormV3(root.WithDevice("/device:OPENCL:0"),
                                   np.ones((2, 2, 2, 3), np.float32), v, v, v, v)
        session = mg.ClientSession(root, backend="reference")
        try:
            session.Run({}, fwd.y)
        except mg.errors.UnavailableError as exc:
            print("UnavailableError:", exc)
        else:
            print("ran")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_no_platform_is_a_clear_unavailable_error(tmp_path):
    """No driver: OCL_ICD_VENDORS at an empty folder hides the system's ICDs, and
    POCL_DEVICES=none empties the PoCL that pyopencl's wheel loads from its own folder."""
    out = _run_in_subprocess("", {"OCL_ICD_VENDORS": str(tmp_path), "POCL_DEVICES": "none"})
    assert out.startswith("UnavailableError: /device:OPENCL:0 is unavailable: no OpenCL"), out


def test_missing_pyopencl_is_a_clear_unavailable_error():
    out = _run_in_subprocess("import sys; sys.modules['pyopencl'] = None\n", {})
    assert out.startswith("UnavailableError: /device:OPENCL:0 is unavailable: pyopencl is "
                          "not installed"), out


# ----------------------------------------------------------------------------- non-finite


SPECIALS = {"+inf": np.inf, "-inf": -np.inf, "nan": np.nan, "1e38": 1e38, "3.4e38": 3.4e38,
            "-3.4e38": -3.4e38}
SPECIAL_MODES = ("one", "all", "alternating")  # the value in one / every element of channel 1
NONFINITE_TOLERANCE = {F32: 1e-4, F16: 2e-3, BF16: 1.6e-2}
_FUSED = {"epsilon": 1e-3}
_GLOBAL = {"variance_epsilon": 1e-3, "scale_after_normalization": True}
# key -> (op, inputs in the op's order: tensors "t:", float32 vectors "v:", vectors of T
#         "V:", empty "e:"; the inputs that get the special values; attrs; dtypes)
NONFINITE_OPS = {
    "FusedBatchNormV3-training": (
        "FusedBatchNormV3", ["t:x", "v:scale", "v:offset", "e:mean", "e:variance"],
        ["x"], dict(_FUSED, is_training=True), (F32, F16, BF16)),
    "FusedBatchNormV3-inference": (
        "FusedBatchNormV3", ["t:x", "v:scale", "v:offset", "v:mean", "v:variance"],
        ["x", "mean", "variance"], dict(_FUSED, is_training=False), (F32, F16, BF16)),
    "FusedBatchNormGradV3-training": (
        "FusedBatchNormGradV3",
        ["t:dy", "t:x", "v:scale", "v:mean", "v:variance", "e:reserve_space_3"],
        ["dy", "x", "mean", "variance"], dict(_FUSED, is_training=True), (F32, F16, BF16)),
    "FusedBatchNormGradV3-inference": (
        "FusedBatchNormGradV3",
        ["t:dy", "t:x", "v:scale", "v:mean", "v:variance", "e:reserve_space_3"],
        ["dy", "x", "mean", "variance"], dict(_FUSED, is_training=False), (F32, F16, BF16)),
    "FusedBatchNormGradGrad-training": (
        "FusedBatchNormGradGrad",
        ["t:dy", "t:x", "v:scale", "v:mean", "v:variance", "t:gx", "v:gscale", "v:goffset"],
        ["dy", "x", "gx"], dict(_FUSED, is_training=True), (F32, F16, BF16)),
    "FusedBatchNormGradGrad-inference": (
        "FusedBatchNormGradGrad",
        ["t:dy", "t:x", "v:scale", "v:mean", "v:variance", "t:gx", "v:gscale", "v:goffset"],
        ["dy", "x", "gx", "mean", "variance"], dict(_FUSED, is_training=False),
        (F32, F16, BF16)),
    "BatchNormWithGlobalNormalization": (
        "BatchNormWithGlobalNormalization",
        ["t:x", "V:mean", "V:variance", "V:offset", "V:scale"], ["x", "mean", "variance"],
        _GLOBAL, (F32, F16)),
    "BatchNormWithGlobalNormalizationGrad": (
        "BatchNormWithGlobalNormalizationGrad",
        ["t:x", "V:mean", "V:variance", "V:scale", "t:dy"], ["x", "dy", "mean", "variance"],
        _GLOBAL, (F32, F16)),
}


def nonfinite_base(channels_last: bool) -> dict[str, np.ndarray]:
    """Finite float32 inputs: tensors of 3 x 3 channels x 6 x 6, vectors of 3."""
    rng = np.random.default_rng(7)
    shape = (3, 6, 6, 3) if channels_last else (3, 3, 6, 6)

    def tensor(loc):
        return (rng.standard_normal(shape) + loc).astype(np.float32)

    def vector(lo, hi):
        return rng.uniform(lo, hi, 3).astype(np.float32)

    return {"x": tensor(1.0), "dy": tensor(0.3), "gx": tensor(-0.2),
            "scale": vector(0.5, 1.0), "offset": vector(-1, 1), "mean": vector(0.5, 1.5),
            "variance": vector(1, 3), "gscale": vector(-1, 1), "goffset": vector(-1, 1)}


def with_special(values: dict, name: str, value: float, mode: str, channels_last: bool
                 ) -> dict:
    """A copy of ``values`` whose channel 1 of input ``name`` holds ``value`` in one element,
    in all, or as +value, -value alternating; a vector gets it at index 1."""
    values = {k: v.copy() for k, v in values.items()}
    target = values[name]
    if target.ndim == 1:
        target[1] = value
        return values
    channel = np.moveaxis(target, -1 if channels_last else 1, 0)[1]   # a view
    flat = channel.reshape(-1).copy()
    if mode == "one":
        flat[flat.size // 2 + 1] = value
    elif mode == "all":
        flat[:] = value
    else:
        flat[0::2], flat[1::2] = value, -value
    channel[...] = flat.reshape(channel.shape)
    return values


def assert_agree(actual: np.ndarray, expected: np.ndarray, what: str) -> None:
    """Same dtype and shape, NaN/+inf/-inf at the same places, finite values close."""
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, what
    a, e = actual.astype(np.float64), expected.astype(np.float64)
    for test in (np.isnan, np.isposinf, np.isneginf):
        np.testing.assert_array_equal(test(a), test(e), err_msg=f"{what}: {test.__name__}")
    tol = NONFINITE_TOLERANCE[np.dtype(expected.dtype)]
    finite = np.isfinite(e)
    np.testing.assert_allclose(a[finite], e[finite], rtol=tol,
                               atol=tol * max(1.0, float(np.abs(e[finite]).max(initial=0))),
                               err_msg=what)


@pytest.fixture(scope="module")
def float_sums_device(device) -> opencl.OpenCLDevice:
    """The same OpenCL device with float sums, as on devices without cl_khr_fp64."""
    return opencl.OpenCLDevice(device.cl, device.device, 0, fp64=False)


@pytest.mark.parametrize("sums", ["default", "float"])
@pytest.mark.parametrize("channels_last", [True, False], ids=["NHWC", "NCHW"])
@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=lambda d: d.name)
@pytest.mark.parametrize("op_key", list(NONFINITE_OPS))
def test_non_finite_and_huge_inputs_match_reference(request, monkeypatch, op_key, dtype,
                                                    channels_last, sums):
    """Every batch-norm op on the device against the reference with +-inf, NaN, 1e38 or
    +-3.4e38 in channel 1 of one input: the same NaN / inf positions, close finite values.
    Sums of huge or infinite float32 terms are where float accumulation parts ways with the
    reference's float64 sums: the device sums in double where it can ("default"), and with
    float sums ("float", devices without double) recomputes such ops with the reference."""
    if sums == "float":
        float_device = request.getfixturevalue("float_sums_device")
        monkeypatch.setattr(opencl, "get_device", lambda kind, index: float_device)
    op_name, inputs, special_inputs, attrs, dtypes = NONFINITE_OPS[op_key]
    if dtype not in dtypes:
        pytest.skip(f"{op_name} has no OpenCL kernel for {dtype.name}")
    if op_name.startswith("Fused"):
        attrs = dict(attrs, data_format="NHWC" if channels_last else "NCHW")
    elif not channels_last:
        pytest.skip("channels-last only")
    base = nonfinite_base(channels_last)
    t = mg.as_dtype(dtype)

    def build(scope, root):
        holders, args = {}, []
        for spec in inputs:
            kind, name = spec.split(":")
            if kind == "e":
                args.append(ops.Const(root, np.zeros(0, np.float32)))
                continue
            holders[name] = ops.Placeholder(root, mg.float32 if kind == "v" else t)
            args.append(holders[name])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            node = getattr(ops, op_name)(scope, *args, **attrs)
        return list(node.operation.outputs), holders

    built = {}
    for device in (DEVICE, ""):
        root = mg.Scope.NewRootScope()
        fetches, holders = build(root.WithDevice(device), root)
        built[device] = (mg.ClientSession(root, backend="reference"), fetches, holders)
    vectors_of_t = {spec.split(":")[1] for spec in inputs if spec.startswith("V:")}
    for name in special_inputs:
        for (label, value), mode in ((s, m) for s in SPECIALS.items() for m in SPECIAL_MODES):
            if base[name].ndim == 1 and mode != "one":
                continue
            values = with_special(base, name, value, mode, channels_last)
            with np.errstate(over="ignore"):
                cast = {k: v.astype(dtype) if v.ndim > 1 or k in vectors_of_t else v
                        for k, v in values.items()}
            results = []
            for session, fetches, holders in built.values():
                with np.errstate(all="ignore"):
                    results.append(session.Run({h: cast[k] for k, h in holders.items()},
                                               fetches))
            for i, (got, expected) in enumerate(zip(*results)):
                assert_agree(got, expected, f"{op_key} output {i}: {name} = {label} ({mode})")


@pytest.mark.parametrize("value", [np.float32(-0.75), np.float16(2.5), np.zeros(0, np.float32),
                                   np.zeros((2, 0, 3), ml_dtypes.bfloat16),
                                   np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]],
                         ids=["0-d", "0-d-half", "empty", "empty-3d", "strided"])
def test_transfers_and_identity_keep_shapes(device, value):
    """Uploads, downloads, dtype conversions and Identity keep a tensor's exact shape:
    0-d stays 0-d (np.ascontiguousarray would make it 1-d), empty keeps its dims."""
    host = np.asarray(value)
    on_device = device.upload(value)
    assert on_device.shape == host.shape
    back = device.download(on_device)
    assert back.shape == host.shape and back.dtype == host.dtype
    assert back.tobytes() == np.ascontiguousarray(host).tobytes()
    converted = device.math.xp.ascontiguousarray(value, np.float32)
    assert converted.shape == host.shape
    assert device.download(converted).tobytes() == host.astype(np.float32).tobytes()
    root = mg.Scope.NewRootScope()
    holder = ops.Placeholder(root, mg.as_dtype(host.dtype))
    out = ops.Identity(root.WithDevice(DEVICE), holder)
    const = ops.Identity(root.WithDevice(DEVICE), ops.Const(root, host))
    got, got_const = mg.ClientSession(root, backend="reference").Run({holder: host},
                                                                     [out, const])
    for result in (got, got_const):
        assert result.shape == host.shape and result.dtype == host.dtype
        assert result.tobytes() == np.ascontiguousarray(host).tobytes()


def test_float_sums_on_finite_inputs(monkeypatch, float_sums_device):
    """Devices without double: the float-sum kernels match the reference on finite inputs
    (no host recomputation: the device's own results, its transfers only the feeds and
    fetches)."""
    monkeypatch.setattr(opencl, "get_device", lambda kind, index: float_sums_device)
    test_fused_batch_norm_family_matches_reference("NHWC", True, BF16, 17, 7)
    test_fused_batch_norm_family_matches_reference("NCDHW", False, F32, 3, 7)
    test_global_normalization_matches_reference(F16, True, 17)
    test_forward_then_grad_stays_on_the_device(float_sums_device)
