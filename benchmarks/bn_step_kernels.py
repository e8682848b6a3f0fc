"""The batch-norm training calls of a ResNet-8 step (NHWC float32, batch 32: 32x32x16,
16x16x32, 8x8x64), each against a copy-like native kernel moving the same compulsory bytes
on the same worker pool, measured interleaved in one process.

These tensors (0.5-2 MiB) live in L2/L3, so the roofline of a call is what a streaming kernel
reaches from the cache at that size, not the DRAM STREAM rate: "x copy" is the call's time over
that of Relu (1 read + 1 write), AddN of 2 (2 reads + 1 write) or AddN of 3 (3 + 1), the one
whose compulsory traffic matches the call's (each tensor read once, each output written once).
A two-pass batch norm reads its inputs twice (statistics, then outputs), so ~2x is what its
passes cost at the copy's speed; below that, a pass found its block still in cache.

    python benchmarks/bn_step_kernels.py                # 2 threads
    python benchmarks/bn_step_kernels.py --threads 1 --shapes 32x8x8x64
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import markdown_table, time_interleaved  # noqa: E402

from minigraph.backends import native  # noqa: E402

STEP_SHAPES = [(32, 32, 32, 16), (32, 16, 16, 32), (32, 8, 8, 64)]
EPSILON = 1e-3


class StepCase:
    """The tensors of one shape; the raw pointers below stay valid while this object lives."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        rng = np.random.default_rng(0)
        f32 = np.float32
        self.channels = shape[-1]
        self.count = int(np.prod(shape))
        self.outer = self.count // self.channels
        self.bytes = self.count * 4
        self.x, self.side, self.dy = (rng.normal(size=shape).astype(f32) for _ in range(3))
        self.y, self.dx, self.side_backprop = (np.empty(shape, f32) for _ in range(3))
        self.scale = rng.uniform(0.5, 1.5, self.channels).astype(f32)
        self.offset = rng.normal(size=self.channels).astype(f32)
        self.mean, self.variance, self.scale_backprop, self.offset_backprop = (
            np.empty(self.channels, f32) for _ in range(4))
        self.forward(True, True)()  # y, mean, variance for the backward calls

    @staticmethod
    def ptr(array: np.ndarray):
        return native.ffi.cast("float *", array.ctypes.data)

    def forward(self, side: bool, relu: bool):
        p, lib = self.ptr, native.lib
        args = (0, self.outer, self.channels, 1, p(self.x), p(self.scale), p(self.offset),
                EPSILON, p(self.side) if side else native.ffi.NULL, int(relu), p(self.y),
                p(self.mean), p(self.variance), native.num_threads())
        return lambda: lib.mg_bn_forward_training_ex(*args)

    def backward(self, relu: bool, side_backprop: bool):
        p, lib = self.ptr, native.lib
        common = (p(self.dy), p(self.x), p(self.scale), p(self.mean), p(self.variance))
        outs = (p(self.scale_backprop), p(self.offset_backprop), native.num_threads())
        if not relu:
            args = (0, self.outer, self.channels, 1, *common, EPSILON, p(self.dx), *outs)
            return lambda: lib.mg_bn_backward_training(*args)
        sb = p(self.side_backprop) if side_backprop else native.ffi.NULL
        args = (0, self.outer, self.channels, 1, *common, p(self.y), EPSILON, p(self.dx), sb,
                *outs)
        return lambda: lib.mg_bn_backward_training_ex(*args)

    def copy_like(self, reads: int):
        """Relu (reads == 1) or AddN of `reads` inputs into dx: the same pool, `reads` + 1
        tensors of traffic."""
        p, lib = self.ptr, native.lib
        if reads == 1:
            return lambda: lib.mg_relu(self.count, p(self.x), p(self.dx), native.num_threads())
        inputs = native.ffi.new("const float *[]", [p(a) for a in (self.x, self.side,
                                                                     self.dy)[:reads]])
        return lambda: lib.mg_add_n(self.count, reads, inputs, p(self.dx),
                                    native.num_threads())


# (name, call factory, tensors read, tensors written): compulsory traffic of each op
OPS = [
    ("FusedBatchNormV3", lambda c: c.forward(False, False), 1, 1),
    ("_FusedBatchNormEx relu", lambda c: c.forward(False, True), 1, 1),
    ("_FusedBatchNormEx side+relu", lambda c: c.forward(True, True), 2, 1),
    ("FusedBatchNormGradV3", lambda c: c.backward(False, False), 2, 1),
    ("_FusedBatchNormGradEx relu", lambda c: c.backward(True, False), 3, 1),
    ("_FusedBatchNormGradEx relu+side", lambda c: c.backward(True, True), 3, 2),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in STEP_SHAPES),
                        help="comma-separated NHWC shapes")
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    native.set_num_threads(args.threads)
    rows = []
    for text in args.shapes.split(","):
        case = StepCase(tuple(int(s) for s in text.split("x")))
        for name, make, reads, writes in OPS:
            copy_reads = min(reads, 3)
            t = time_interleaved({"op": make(case), "copy": case.copy_like(copy_reads)},
                                 repeats=args.repeats)
            op_bytes = (reads + writes) * case.bytes
            copy_bytes = (copy_reads + 1) * case.bytes
            rows.append([text, name, f"{t['op'] * 1e6:.0f}", f"{op_bytes / t['op'] / 1e9:.1f}",
                         f"{t['copy'] * 1e6:.0f}", f"{copy_bytes / t['copy'] / 1e9:.1f}",
                         f"{t['op'] / t['copy'] * copy_bytes / op_bytes:.2f}"])
    print(f"threads {args.threads}; GB/s on compulsory bytes (each tensor read / written once)")
    print(markdown_table(["shape", "op", "us", "GB/s", "copy-like us", "copy GB/s",
                          "x copy (per byte)"], rows))


if __name__ == "__main__":
    main()
