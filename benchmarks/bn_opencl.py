"""Batch norm on the OpenCL device vs the CPU session: training forward + its gradient.

For each shape (NHWC, or NDHWC for 5-D) one graph runs FusedBatchNormV3 (is_training) and
FusedBatchNormGradV3 on its reserve spaces, fetching y, x_backprop, scale_backprop and
offset_backprop. Timed per Run (median of ``--reps`` after a warm-up):

* ``cpu <backend>``: the whole graph on the CPU session, for each CPU backend that works here;
* ``opencl run``: the same graph placed on the OpenCL device, fed and fetched from the host,
  so the time includes the transfers (x and dy up; y and x_backprop down);
* ``opencl kernels``: the device math alone on device-resident tensors (queue drained), i.e.
  the Run time without transfers and session overhead;
* ``device``: the sum of the batch_norm.cl kernels' own execution times (profiling events,
  end - start) in that step, i.e. without the host's launch overhead, and the bandwidth it
  means: the step reads or writes a tensor of x's size 9 times (x in partial_sum,
  partial_centered_squares and apply_normalize, which writes y; dy and x in partial_backward
  and in apply_backward_training, which writes dx).

    python benchmarks/bn_opencl.py [--quick] [--dtype float32|float16|bfloat16]
                                   [--device /device:OPENCL:0] [--reps 5]

Prints the device's name, then a markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import ml_dtypes
import numpy as np

import minigraph as mg
from minigraph import ops
from minigraph.backends import opencl
from minigraph.client.session import parse_device

SHAPES = [(32, 56, 56, 64), (64, 28, 28, 128), (128, 14, 14, 256), (8, 112, 112, 32),
          (256, 7, 7, 512), (16, 8, 8, 16), (8, 16, 16, 16, 32)]
QUICK = [(16, 8, 8, 16), (8, 16, 16, 16, 32), (256, 7, 7, 512)]
DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def median_ms(fn, reps: int) -> float:
    fn()  # warm-up (kernel builds, plan)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def build(shape, dtype, device: str):
    data_format = "NHWC" if len(shape) == 4 else "NDHWC"
    root = mg.Scope.NewRootScope()
    scope = root.WithDevice(device)
    x, dy = ops.Placeholder(root, mg.as_dtype(dtype)), ops.Placeholder(root, mg.as_dtype(dtype))
    scale, offset = ops.Placeholder(root, mg.float32), ops.Placeholder(root, mg.float32)
    empty = np.zeros(0, np.float32)
    fwd = ops.FusedBatchNormV3(scope, x, scale, offset, empty, empty, epsilon=1e-3,
                               data_format=data_format)
    grad = ops.FusedBatchNormGradV3(scope, dy, x, scale, fwd.reserve_space_1,
                                    fwd.reserve_space_2, fwd.reserve_space_3, epsilon=1e-3,
                                    data_format=data_format)
    fetches = [fwd.y, grad.x_backprop, grad.scale_backprop, grad.offset_backprop]
    return root, (x, dy, scale, offset), fetches


def cpu_sessions(shape, dtype) -> dict[str, tuple]:
    sessions = {}
    for backend in ("native", "reference"):
        root, holders, fetches = build(shape, dtype, "")
        try:
            sessions[backend] = (mg.ClientSession(root, backend=backend), holders, fetches)
        except Exception as exc:  # a backend that is not built or not usable here
            print(f"(cpu backend {backend!r} skipped: {type(exc).__name__}: {exc})",
                  file=sys.stderr)
    return sessions


TENSOR_PASSES = 9  # tensors of x's size read or written by one step (see the docstring)


def kernels_only(device: opencl.OpenCLDevice, values, reps: int) -> tuple[float, float]:
    """The device math of the graph on device-resident tensors, queue drained: (wall ms on
    ``device``, kernel execution ms on a profiling twin of it), medians."""
    index = int(device.name.rsplit(":", 1)[1])
    profiled = opencl.OpenCLDevice(device.cl, device.device, index, profiling=True)
    times: dict[opencl.OpenCLDevice, list[float]] = {device: [], profiled: []}
    for where in times:
        x, dy, scale, offset = (where.upload(v) for v in values)

        def step(where=where, x=x, dy=dy, scale=scale, offset=offset):
            with where.lock:
                _, mean, variance = where.math.bn_forward_training(x, scale, offset, 1e-3,
                                                                   True)
                where.math.bn_backward_training(dy, x, scale, mean, variance, 1e-3, True)
                where.queue.finish()

        if where is device:
            times[where].append(median_ms(step, reps))
            continue
        for _ in range(reps + 1):
            profiled.events.clear()
            step()
            times[where].append(sum(event.profile.end - event.profile.start
                                    for _, event in profiled.events) * 1e-6)
    return times[device][0], statistics.median(times[profiled][1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="three shapes only")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    parser.add_argument("--device", default="/device:OPENCL:0")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    dtype = np.dtype(DTYPES[args.dtype])
    device = opencl.get_device(*parse_device(args.device))
    print(f"OpenCL device: {args.device} = {device.description}")
    print(f"dtype {args.dtype}; training forward + gradient per Run; median of {args.reps}\n")
    rng = np.random.default_rng(0)
    rows = []
    backends_seen: list[str] = []
    for shape in QUICK if args.quick else SHAPES:
        channels = shape[-1]
        values = (rng.normal(1, 2, shape).astype(np.float32).astype(dtype),
                  rng.normal(0, 1, shape).astype(np.float32).astype(dtype),
                  rng.uniform(0.5, 1.5, channels).astype(np.float32),
                  rng.normal(0, 1, channels).astype(np.float32))
        cpu = {}
        for backend, (session, holders, fetches) in cpu_sessions(shape, dtype).items():
            feeds = dict(zip(holders, values))
            cpu[backend] = median_ms(lambda s=session, f=feeds, t=fetches: s.Run(f, t),
                                     args.reps)
            if backend not in backends_seen:
                backends_seen.append(backend)
        root, holders, fetches = build(shape, dtype, args.device)
        session = mg.ClientSession(root, backend="reference")
        feeds = dict(zip(holders, values))
        run = median_ms(lambda s=session, f=feeds, t=fetches: s.Run(f, t), args.reps)
        kernels, device_ms = kernels_only(device, values, args.reps)
        rows.append((shape, dtype.itemsize * int(np.prod(shape)) / 2 ** 20, cpu, run, kernels,
                     device_ms))
    header = (["shape", "x MiB"] + [f"cpu {b} ms" for b in backends_seen]
              + ["opencl run ms (incl. transfers)", "opencl kernels ms", "device ms",
                 "device GB/s", "best cpu / opencl run"])
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for shape, mib, cpu, run, kernels, device_ms in rows:
        best = min(cpu.values()) if cpu else float("nan")
        cells = ([str(shape), f"{mib:.1f}"] + [f"{cpu.get(b, float('nan')):.2f}"
                                               for b in backends_seen]
                 + [f"{run:.2f}", f"{kernels:.2f}", f"{device_ms:.3f}",
                    f"{TENSOR_PASSES * mib * 2 ** 20 / device_ms / 1e6:.0f}",
                    f"{best / run:.2f}x"])
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
