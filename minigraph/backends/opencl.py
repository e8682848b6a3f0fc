"""OpenCL device backend: the batch-norm ops on a GPU (or any OpenCL device) via pyopencl.

A session places an op here when its scope's device is ``/device:GPU:N`` (the N-th OpenCL
device of type GPU) or ``/device:OPENCL:N`` (the N-th device of any type) and this module
has a kernel for it; see :meth:`OpenCLDevice.unsupported` and ``docs/opencl.md``.

Tensors placed here are ``pyopencl.array.Array`` objects: float32, float16 or bfloat16
storage, float32 math. The op-level kernels are the CPU ones (``batch_norm_kernels``: empty
tensors, reserve spaces, exponential averaging, the global-normalization vectors), run with
:class:`OpenCLMath` as their ``math``: the functions of ``backends.reference`` with the same
signatures on device arrays, plus ``xp``, the few array functions those kernels need.

Environment: ``MINIGRAPH_OPENCL_PLATFORM`` (platform index, or part of its name) picks the
platform, by default the first one with a GPU, else the first with any device;
``MINIGRAPH_OPENCL_DEVICE`` (comma-separated device indices or parts of names) lists the
devices ``/device:GPU:0``, ``/device:GPU:1``... stand for, by default the platform's GPUs.

pyopencl is imported lazily, on first use: without it (or without a platform, or when the
kernels do not build) placing an op here raises :class:`UnavailableError` naming the
device and the cause.
"""

from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from minigraph.backends import reference
from minigraph.backends.registry import (
    Kernel,
    KernelContext,
    KernelDef,
    find_kernel,
    op_dtype,
    registered_kernels,
)
from minigraph.framework.errors import UnavailableError
from minigraph.framework.graph import Operation

NAME = "opencl"
KERNEL_SOURCE = Path(__file__).with_name("opencl_kernels") / "batch_norm.cl"
F32 = np.float32
_STORAGE = {np.dtype(np.float32): "STORAGE_F32", np.dtype(np.float16): "STORAGE_F16",
            np.dtype(ml_dtypes.bfloat16): "STORAGE_BF16"}

_REDUCE_WIDTH = 256   # work-items per reduction work-group (LC x LR), at most
_APPLY_WIDTH = 256    # work-items per elementwise work-group, at most
_ITEM_MIN, _ITEM_MAX = 16, 256   # elements one work-item sums in stage 1: at least, at most
_MAX_GROUPS = 65535   # work-groups along range dimension 1 (some GPUs allow no more)


def _pyopencl(device: str):
    """``pyopencl`` (with ``pyopencl.array``), or UnavailableError naming the device."""
    try:
        import pyopencl
        import pyopencl.array  # noqa: F401
        import pyopencl.clmath  # noqa: F401
    except ImportError as exc:
        raise UnavailableError(
            f"{device} is unavailable: pyopencl is not installed ({exc}); install "
            f"minigraph[opencl] and an OpenCL driver") from None
    return pyopencl


# ----------------------------------------------------------------------------- discovery


@dataclass(frozen=True)
class DeviceInfo:
    """One OpenCL device as :func:`devices` reports it."""

    name: str | None            # "/device:OPENCL:N" on the selected platform, else None
    aliases: tuple[str, ...]    # e.g. ("/device:GPU:0",)
    platform: str
    device: str
    type: str                   # "GPU", "CPU", "ACCELERATOR", ...
    version: str
    compute_units: int
    global_memory: int          # bytes

    def __str__(self) -> str:
        where = " = ".join((self.name,) + self.aliases) if self.name else "(not selected)"
        return f"{where}: {self.device} [{self.type}] on {self.platform} ({self.version})"


def _type_name(cl, device) -> str:
    for kind in ("GPU", "CPU", "ACCELERATOR", "CUSTOM"):
        if device.type & getattr(cl.device_type, kind):
            return kind
    return "OTHER"


def _platforms(cl, device: str) -> list:
    try:
        platforms = cl.get_platforms()
    except cl.Error as exc:
        platforms, cause = [], str(exc).strip()
    else:
        cause = ""
    if not platforms:
        raise UnavailableError(
            f"{device} is unavailable: no OpenCL platform found"
            + (f" ({cause})" if cause else "")
            + "; install an OpenCL driver (a GPU vendor's, or PoCL for the CPU: Debian's "
              "pocl-opencl-icd or pip's pyopencl[pocl])")
    return platforms


def _platform_devices(cl, platform) -> list:
    try:
        return list(platform.get_devices())
    except cl.Error:
        return []


def _matches(value: str, index: int, *names: str) -> bool:
    value = value.strip()
    if value.isdigit():
        return int(value) == index
    return any(value.lower() in name.lower() for name in names)


def _select_platform(cl, device: str) -> tuple[int, Any]:
    platforms = _platforms(cl, device)
    wanted = os.environ.get("MINIGRAPH_OPENCL_PLATFORM", "").strip()
    listing = "; ".join(f"{i}: {p.name}" for i, p in enumerate(platforms))
    if wanted:
        for i, platform in enumerate(platforms):
            if _matches(wanted, i, platform.name, platform.vendor):
                return i, platform
        raise UnavailableError(f"{device} is unavailable: MINIGRAPH_OPENCL_PLATFORM="
                               f"{wanted!r} matches no OpenCL platform ({listing})")
    with_devices = [(i, p) for i, p in enumerate(platforms) if _platform_devices(cl, p)]
    for i, platform in with_devices:
        if any(d.type & cl.device_type.GPU for d in _platform_devices(cl, platform)):
            return i, platform
    if with_devices:
        return with_devices[0]
    raise UnavailableError(f"{device} is unavailable: no OpenCL platform has a device "
                           f"({listing})")


def _gpu_indices(cl, devices: list) -> list[int]:
    """The device indices /device:GPU:0, 1, ... stand for (see MINIGRAPH_OPENCL_DEVICE)."""
    wanted = os.environ.get("MINIGRAPH_OPENCL_DEVICE", "").strip()
    if not wanted:
        return [i for i, d in enumerate(devices) if d.type & cl.device_type.GPU]
    indices = []
    for entry in wanted.split(","):
        found = [i for i, d in enumerate(devices) if _matches(entry, i, d.name)]
        indices.extend(found[:1])
    return indices


def devices() -> list[DeviceInfo]:
    """Every OpenCL device of every platform; [] without pyopencl or a platform."""
    try:
        cl = _pyopencl("OpenCL")
        selected, _ = _select_platform(cl, "OpenCL")
        platforms = cl.get_platforms()
    except UnavailableError:
        return []
    found = []
    for p_index, platform in enumerate(platforms):
        platform_devices = _platform_devices(cl, platform)
        gpus = _gpu_indices(cl, platform_devices) if p_index == selected else []
        for d_index, device in enumerate(platform_devices):
            on_selected = p_index == selected
            aliases = tuple(f"/device:GPU:{n}" for n, i in enumerate(gpus) if i == d_index)
            found.append(DeviceInfo(
                name=f"/device:OPENCL:{d_index}" if on_selected else None, aliases=aliases,
                platform=platform.name.strip(), device=device.name.strip(),
                type=_type_name(cl, device), version=device.version.strip(),
                compute_units=device.max_compute_units, global_memory=device.global_mem_size))
    return found


_DEVICES: dict[tuple[int, int], OpenCLDevice | UnavailableError] = {}
_DEVICES_LOCK = threading.Lock()


def get_device(kind: str, index: int) -> OpenCLDevice:
    """The device ``/device:<kind>:<index>`` (kind ``GPU`` or ``OPENCL``), created once.

    Raises UnavailableError (naming the device and the cause) when there is none or its
    kernels do not build.
    """
    spec = f"/device:{kind}:{index}"
    cl = _pyopencl(spec)
    p_index, platform = _select_platform(cl, spec)
    platform_devices = _platform_devices(cl, platform)
    if kind == "OPENCL":
        candidates = list(range(len(platform_devices)))
        what = "OpenCL devices"
    else:
        candidates = _gpu_indices(cl, platform_devices)
        what = "OpenCL GPUs" + (" (MINIGRAPH_OPENCL_DEVICE)"
                                if os.environ.get("MINIGRAPH_OPENCL_DEVICE") else "")
    if index >= len(candidates):
        listing = "; ".join(f"/device:OPENCL:{i}: {d.name.strip()} [{_type_name(cl, d)}]"
                            for i, d in enumerate(platform_devices)) or "none"
        hint = (" (use /device:OPENCL:N for any device, or set MINIGRAPH_OPENCL_DEVICE)"
                if kind == "GPU" else "")
        raise UnavailableError(
            f"{spec} is unavailable: platform '{platform.name.strip()}' has "
            f"{len(candidates)} {what}; its devices: {listing}{hint}")
    key = (p_index, candidates[index])
    with _DEVICES_LOCK:
        device = _DEVICES.get(key)
        if device is None:
            try:
                device = OpenCLDevice(cl, platform_devices[key[1]], key[1])
            except UnavailableError as exc:
                device = exc
            _DEVICES[key] = device
    if isinstance(device, UnavailableError):
        raise UnavailableError(f"{spec}: {device}")
    return device


# ----------------------------------------------------------------------------- the device


class OpenCLDevice:
    """One OpenCL device: its context, in-order queue, memory pool and compiled kernels.

    ``run`` executes an op-level kernel with :class:`OpenCLMath`; ``upload``/``download``
    move tensors and count the transfers (``transfers``: host->device, device->host).
    One lock serialises the use of the queue and kernel objects across threads.
    """

    def __init__(self, cl, device, index: int, fp64: bool | None = None,
                 profiling: bool = False) -> None:
        """``fp64``: accumulate sums in double (default: where the device has
        cl_khr_fp64); False forces float sums with the host check of
        :meth:`OpenCLMath._checked` (tests use it to cover devices without double).
        ``profiling``: the queue records timestamps and every launch of a batch_norm.cl
        kernel appends (its name, its event) to ``events`` (else None), so the device's own kernel
        time can be told apart from the host's launch overhead (benchmarks/bn_opencl.py)."""
        self.cl = cl
        self.name = f"/device:OPENCL:{index}"
        self.description = (f"{device.name.strip()} [{_type_name(cl, device)}] on "
                            f"{device.platform.name.strip()}")
        self.device = device
        self.lock = threading.RLock()
        self.transfers = {"to_device": 0, "to_host": 0}
        self.events: list | None = [] if profiling else None
        try:
            self.context = cl.Context([device])
            self.queue = cl.CommandQueue(
                self.context, properties=cl.command_queue_properties.PROFILING_ENABLE
                if profiling else 0)
        except cl.Error as exc:
            raise UnavailableError(f"{self.name} ({self.description}) is unavailable: "
                                   f"creating a context failed: {exc}") from None
        from pyopencl.tools import ImmediateAllocator, MemoryPool

        self.allocator = MemoryPool(ImmediateAllocator(self.queue))
        self.source = KERNEL_SOURCE.read_text()
        self.options = []
        # Sums accumulate in double where the device has it, as the reference's do (see
        # batch_norm.cl): then infinities, NaNs and values near the float32 range give the
        # reference's results. Without double, see OpenCLMath._checked.
        if fp64 is None:
            fp64 = "cl_khr_fp64" in device.extensions.split()
        self.accumulator = np.dtype(np.float64 if fp64 else F32)
        if self.accumulator == np.float64:
            self.options.append("-DACC_F64")
        if device.single_fp_config & cl.device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT:
            self.options.append("-cl-fp32-correctly-rounded-divide-sqrt")
        self.compute_units = device.max_compute_units
        self._programs: dict[tuple[str, str], dict[str, Any]] = {}
        self.reduce_width = min(_REDUCE_WIDTH, _pow2_floor(device.max_work_group_size))
        self.apply_width = self.reduce_width
        self.kernels(np.dtype(F32), wide=False)  # build now: a failure shows at placement
        self.math = OpenCLMath(self)

    def __repr__(self) -> str:
        return f"<OpenCLDevice {self.name}: {self.description}>"

    # ------------------------------------------------------------------ kernels

    def kernels(self, storage: np.dtype, wide: bool) -> dict[str, Any]:
        """The kernels for big tensors of dtype ``storage``, built once per context."""
        key = (_STORAGE[np.dtype(storage)], "ulong" if wide else "uint")
        kernels = self._programs.get(key)
        if kernels is None:
            cl = self.cl
            options = [f"-D{key[0]}", f"-DIDX={key[1]}", *self.options]
            try:
                program = cl.Program(self.context, self.source).build(options=options)
            except cl.Error as exc:
                raise UnavailableError(
                    f"{self.name} ({self.description}) is unavailable: building the OpenCL "
                    f"kernels ({KERNEL_SOURCE.name}, {' '.join(options)}) failed: "
                    f"{str(exc).strip()}") from None
            kernels = {k.function_name: k for k in program.all_kernels()}
            for name, kernel in kernels.items():
                limit = kernel.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE,
                                                   self.device)
                if name.startswith("partial_"):
                    self.reduce_width = min(self.reduce_width, _pow2_floor(limit))
                else:
                    self.apply_width = min(self.apply_width, _pow2_floor(limit))
            self._programs[key] = kernels
        return kernels

    # ------------------------------------------------------------------ placement & execution

    backend = "opencl"  # the kernels registered for this backend run here

    def unsupported(self, op: Operation) -> str | None:
        """Why ``op`` cannot run here (None if it can): no kernel registered for
        ``backend="opencl"`` matches it."""
        if find_kernel(op, self.backend, fallback=False) is not None:
            return None
        if any(k.op_type == op.type and k.backend == self.backend
               for k in registered_kernels()):
            return f"no OpenCL kernel for T={op_dtype(op).name}"
        return "no OpenCL kernel"

    def kernel_context(self, kernel: KernelDef, state: Any) -> KernelContext:
        return KernelContext(self.backend, self.math, state)

    def run(self, kernel: Kernel, op: Operation, values: list, ctx: KernelContext) -> list:
        """Run an op-level kernel on device arrays; host results are moved to the device."""
        with self.lock:
            return [self.adopt(result) for result in kernel(op, values, ctx)]

    def adopt(self, value):
        """``value`` as a device array (uploading a host array)."""
        return value if isinstance(value, self.cl.array.Array) else self.upload(value)

    def upload(self, value) -> Any:
        """``value`` (any array-like) as a device array of exactly its shape and dtype.

        ``np.asarray(order="C")``, not ``np.ascontiguousarray``: the latter makes a 0-d
        array 1-d, and a tensor must never change shape on its way through the device.
        """
        array = np.asarray(value, order="C")
        with self.lock:
            if array.size == 0:
                return self.cl.array.empty(self.queue, array.shape, array.dtype,
                                           allocator=self.allocator)
            self.transfers["to_device"] += 1
            return self.cl.array.to_device(self.queue, array, allocator=self.allocator)

    def download(self, value) -> np.ndarray:
        """A host copy of a device array, of exactly its shape (0-d and empty included)."""
        with self.lock:
            if value.size == 0:
                return np.empty(value.shape, value.dtype)
            self.transfers["to_host"] += 1
            return value.get()


def _pow2_floor(value: int) -> int:
    return 1 << (max(int(value), 1).bit_length() - 1)


def _pow2_ceil(value: int) -> int:
    return 1 << max(int(value) - 1, 0).bit_length()


# ----------------------------------------------------------------------------- arrays


class DeviceArrays:
    """The array functions the op-level kernels call through ``math.xp`` (numpy's names)."""

    def __init__(self, device: OpenCLDevice) -> None:
        self._device = device

    def empty(self, shape, dtype):
        device = self._device
        return device.cl.array.empty(device.queue, shape, np.dtype(dtype),
                                     allocator=device.allocator)

    def full(self, shape, value, dtype):
        array = self.empty(shape, dtype)
        if array.size:
            pattern = np.full(1, value, array.dtype).view(np.uint8)
            self._device.cl.enqueue_fill_buffer(self._device.queue, array.data, pattern, 0,
                                                array.nbytes)
        return array

    def zeros(self, shape, dtype):
        return self.full(shape, 0, dtype)

    def ones_like(self, array):
        return self.full(array.shape, 1, array.dtype)

    def zeros_like(self, array):
        return self.full(array.shape, 0, array.dtype)

    def sqrt(self, array):
        return self._device.cl.clmath.sqrt(array)

    def ascontiguousarray(self, value, dtype=None):
        """``value`` on the device (uploaded if on the host) as ``dtype``, shape unchanged
        (unlike numpy's, a 0-d value stays 0-d); device arrays here are always contiguous."""
        array = self._device.adopt(value)
        dtype = array.dtype if dtype is None else np.dtype(dtype)
        if array.dtype == dtype:
            return array
        if array.dtype != F32:   # half/bfloat16 -> float32 (-> another storage type)
            array = _launch_elementwise(self._device, "to_float", array, F32)
        if dtype != F32:
            array = _launch_elementwise(self._device, "from_float", array, dtype)
        return array

    asarray = ascontiguousarray


def _launch_elementwise(device: OpenCLDevice, name: str, source, dtype: np.dtype):
    """Convert ``source`` between float32 and a storage type with to_float/from_float."""
    storage = source.dtype if name == "to_float" else np.dtype(dtype)
    out = device.math.xp.empty(source.shape, dtype)
    if source.size:
        launch = _Launcher(device, storage, source.size)
        launch.flat(name, source.size, [source.data, launch.index(source.size)], [out.data])
    return out


# ----------------------------------------------------------------------------- math


class _Layout:
    """A tensor as [outer, C, inner] (channel last: inner = 1; first: outer = N)."""

    def __init__(self, shape: tuple[int, ...], channels_last: bool) -> None:
        axis = len(shape) - 1 if channels_last else 1
        self.channels = shape[axis]
        self.inner = math.prod(shape[axis + 1:])
        self.total = math.prod(shape)
        self.count = self.total // self.channels   # n: elements per channel


class _Launcher:
    """Launches the kernels of one storage type with the index type the size needs."""

    def __init__(self, device: OpenCLDevice, storage: np.dtype, total: int) -> None:
        self.device = device
        self.wide = total >= 2 ** 31
        self.kernels = device.kernels(storage, self.wide)
        self.queue = device.queue

    def launch(self, name: str, global_size: tuple, local_size: tuple | None, *args) -> None:
        """Enqueue kernel ``name`` (its event kept when the device is profiling)."""
        event = self.kernels[name](self.queue, global_size, local_size, *args)
        if self.device.events is not None:
            self.device.events.append((name, event))

    def index(self, value: int):
        return np.uint64(value) if self.wide else np.uint32(value)

    def geometry(self, layout: _Layout) -> list:
        return [self.index(layout.channels), self.index(layout.inner)]

    def flat(self, name: str, total: int, args: list, outputs: list) -> None:
        """A 1-D kernel over ``total`` elements (the dtype conversions)."""
        width = self.device.apply_width
        self.launch(name, (-(-total // width) * width,), (width,), *args, *outputs)

    def elementwise(self, name: str, layout: _Layout, args: list, outputs: list) -> None:
        """An apply_* kernel: a 2-D range of (columns of a row, rows), see batch_norm.cl;
        one element per work-item unless the rows exceed 65535 groups (then they loop)."""
        device = self.device
        width = device.apply_width
        row = layout.channels * layout.inner
        lanes = min(_pow2_ceil(row), width)
        lines = width // lanes
        column_groups = -(-row // lanes)
        row_groups = min(-(-(layout.total // row) // lines), _MAX_GROUPS)
        self.launch(name, (column_groups * lanes, row_groups * lines), (lanes, lines), *args,
                    *self.geometry(layout), self.index(layout.total), *outputs)

    def vector(self, name: str, channels: int, args: list) -> None:
        self.launch(name, (-(-channels // 64) * 64,), None, *args)

    def reduce(self, name: str, layout: _Layout, nterms: int, args: list):
        """Stage 1 of a reduction: (partials buffer [nterms, G, C], G)."""
        device = self.device
        width, channels, n = device.reduce_width, layout.channels, layout.count
        lanes = min(_pow2_ceil(channels), 32, width) if layout.inner == 1 else 1
        rows = width // lanes
        channel_groups = -(-channels // lanes)
        for_accuracy = -(-n // (rows * _ITEM_MAX))
        for_parallelism = min(-(-device.compute_units * 8 // channel_groups),
                              -(-n // (rows * _ITEM_MIN)))
        groups = min(max(1, for_accuracy, for_parallelism), _MAX_GROUPS)
        chunk = -(-n // groups)
        groups = -(-n // chunk)
        accumulator = device.accumulator
        partials = device.math.xp.empty((nterms * groups * channels,), accumulator)
        scratch = device.cl.LocalMemory(accumulator.itemsize * nterms * width)
        self.launch(name, (channel_groups * lanes, groups * rows), (lanes, rows), *args,
                    *self.geometry(layout), self.index(n), self.index(chunk), partials.data,
                    scratch)
        return partials, self.index(groups)


class OpenCLMath:
    """``backends.reference``'s batch-norm functions on device arrays (same signatures).

    Vectors are float32 device arrays; big tensors are float32/float16/bfloat16 device
    arrays, computed in float32 and rounded once. Statistics use two passes (mean, then the
    mean of centered squares) with the deterministic two-stage reductions of batch_norm.cl,
    whose sums accumulate in double where the device has it (as the reference's).
    """

    NAME = NAME

    def __init__(self, device: OpenCLDevice) -> None:
        self.device = device
        self.xp = DeviceArrays(device)

    def _start(self, x, channels_last: bool) -> tuple[_Launcher, _Layout]:
        layout = _Layout(x.shape, channels_last)
        return _Launcher(self.device, x.dtype, layout.total), layout

    def _count(self, layout: _Layout):
        """n, elements per channel, in the accumulator type (the finish_* divisor)."""
        return self.device.accumulator.type(layout.count)

    def _mean(self, run: _Launcher, layout: _Layout, name: str, args: list):
        partials, groups = run.reduce(name, layout, 1, args)
        mean = self.xp.empty((layout.channels,), F32)
        run.vector("finish_mean", layout.channels,
                   [partials.data, groups, run.index(layout.channels),
                    self._count(layout), mean.data])
        return mean

    def _statistics(self, run: _Launcher, layout: _Layout, x):
        mean = self._mean(run, layout, "partial_sum", [x.data])
        variance = self._mean(run, layout, "partial_centered_squares", [x.data, mean.data])
        return mean, variance

    def _checked(self, results: tuple, totals: list, function: str, args: tuple) -> tuple:
        """``results``, or the reference's ``function(*args)`` when the device sums in float
        and one of its per-channel ``totals`` (sums or means) is not finite.

        A double sum of finite float32 terms never overflows and treats infinities the same
        in any order; a float one overflows on values near the float32 range and, with +inf
        and -inf in different partial sums, gives NaN where the reference's sum is finite or
        infinite. Any such overflow leaves a total infinite or NaN, so finite totals mean the
        device's results are the reference's up to float32 rounding; otherwise (infinite,
        NaN or huge inputs: rare) the op is recomputed on the host by the reference and the
        results uploaded. Only devices without double pay the check (a small read).
        """
        device = self.device
        if device.accumulator != F32:
            return results
        with device.lock:
            if all(np.isfinite(total.get()).all() for total in totals):
                return results
            host = [value.get() if isinstance(value, device.cl.array.Array) else value
                    for value in args]
        with np.errstate(all="ignore"):
            exact = getattr(reference, function)(*host)
        return tuple(device.upload(value) for value in exact)

    def bn_forward_training(self, x, scale, offset, epsilon, channels_last):
        """(y, mean, biased variance) from the batch statistics."""
        run, layout = self._start(x, channels_last)
        mean, variance = self._statistics(run, layout, x)
        y = self._normalize(run, layout, x, scale, offset, mean, variance, epsilon)
        return self._checked((y, mean, variance), [mean, variance], "bn_forward_training",
                             (x, scale, offset, epsilon, channels_last))

    def bn_forward_inference(self, x, scale, offset, mean, variance, epsilon, channels_last):
        run, layout = self._start(x, channels_last)
        return self._normalize(run, layout, x, scale, offset, mean, variance, epsilon)

    def _normalize(self, run, layout, x, scale, offset, mean, variance, epsilon):
        y = self.xp.empty(x.shape, x.dtype)
        run.elementwise("apply_normalize", layout,
                        [x.data, mean.data, variance.data, scale.data, offset.data,
                         F32(epsilon)], [y.data])
        return y

    def _backward(self, dy, x, scale, mean, variance, epsilon, channels_last, training):
        run, layout = self._start(x, channels_last)
        channels = layout.channels
        partials, groups = run.reduce("partial_backward", layout, 2,
                                      [dy.data, x.data, mean.data])
        offset_backprop, sum_dy_xc, scale_backprop = (
            self.xp.empty((channels,), F32) for _ in range(3))
        run.vector("finish_backward", channels,
                   [partials.data, groups, run.index(channels), variance.data, F32(epsilon),
                    offset_backprop.data, sum_dy_xc.data, scale_backprop.data])
        dx = self.xp.empty(x.shape, x.dtype)
        if training:
            run.elementwise("apply_backward_training", layout,
                            [dy.data, x.data, scale.data, mean.data, variance.data,
                             F32(epsilon), offset_backprop.data, sum_dy_xc.data,
                             F32(layout.count)], [dx.data])
        else:
            run.elementwise("apply_backward_inference", layout,
                            [dy.data, scale.data, variance.data, F32(epsilon)], [dx.data])
        return self._checked(
            (dx, scale_backprop, offset_backprop), [offset_backprop, sum_dy_xc],
            "bn_backward_training" if training else "bn_backward_inference",
            (dy, x, scale, mean, variance, epsilon, channels_last))

    def bn_backward_training(self, dy, x, scale, mean, variance, epsilon, channels_last):
        """(dx, scale_backprop, offset_backprop) with the saved statistics."""
        return self._backward(dy, x, scale, mean, variance, epsilon, channels_last, True)

    def bn_backward_inference(self, dy, x, scale, mean, variance, epsilon, channels_last):
        return self._backward(dy, x, scale, mean, variance, epsilon, channels_last, False)

    def bn_grad_grad_training(self, dy, x, scale, gx, gscale, goffset, epsilon,
                              channels_last):
        """(d_dy, d_x, d_scale); the statistics are recomputed from x (two passes)."""
        run, layout = self._start(x, channels_last)
        channels = layout.channels
        mean, variance = self._statistics(run, layout, x)
        partials, groups = run.reduce("partial_grad_grad", layout, 5,
                                      [dy.data, x.data, gx.data, mean.data, variance.data,
                                       F32(epsilon)])
        means = self.xp.empty((5 * channels,), F32)
        d_scale = self.xp.empty((channels,), F32)
        run.vector("finish_grad_grad", channels,
                   [partials.data, groups, run.index(channels), self._count(layout),
                    variance.data, F32(epsilon), means.data, d_scale.data])
        d_dy, d_x = self.xp.empty(x.shape, x.dtype), self.xp.empty(x.shape, x.dtype)
        run.elementwise("apply_grad_grad_training", layout,
                        [dy.data, x.data, gx.data, scale.data, gscale.data, goffset.data,
                         mean.data, variance.data, F32(epsilon), means.data],
                        [d_dy.data, d_x.data])
        return self._checked((d_dy, d_x, d_scale), [mean, variance, means],
                             "bn_grad_grad_training",
                             (dy, x, scale, gx, gscale, goffset, epsilon, channels_last))

    def bn_grad_grad_inference(self, dy, x, scale, mean, variance, gx, gscale, goffset,
                               epsilon, channels_last):
        run, layout = self._start(x, channels_last)
        channels = layout.channels
        partials, groups = run.reduce("partial_product", layout, 1, [gx.data, dy.data])
        total, d_scale = self.xp.empty((channels,), F32), self.xp.empty((channels,), F32)
        run.vector("finish_scaled_sum", channels,
                   [partials.data, groups, run.index(channels), variance.data, F32(epsilon),
                    total.data, d_scale.data])
        d_dy, d_x = self.xp.empty(x.shape, x.dtype), self.xp.empty(x.shape, x.dtype)
        run.elementwise("apply_grad_grad_inference", layout,
                        [dy.data, x.data, gx.data, scale.data, gscale.data, goffset.data,
                         mean.data, variance.data, F32(epsilon)], [d_dy.data, d_x.data])
        return self._checked((d_dy, d_x, d_scale), [total], "bn_grad_grad_inference",
                             (dy, x, scale, mean, variance, gx, gscale, goffset, epsilon,
                              channels_last))
