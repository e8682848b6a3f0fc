"""``MatMul`` and ``_FusedMatMul`` (float32, native) for one entry of a bound program.

A bound program (``client/executor.py``) calls the same kernel with inputs of the same
shapes on every run, its weights the same read-only constant arrays. For these two kernels the
per-call Python around the GEMM (packing lookup, checks, the fused node's member ops and
epilogue) cost 3-5x the GEMM itself on a recurrent cell's small matrices (2 x 128 by 128 x
512: 2.4 us of C, 17 us a call). The objects here, made once per entry (``KernelDef.bound``),
keep what the first call found and make the same C call (``mg_gemm``, the same packing and
epilogue, so the same bits) while the inputs are as they were: the packed weight the same
read-only array, the epilogue's inputs (bias, batch-norm vectors) the same bytes, ``a`` (and a
residual) C-contiguous float32 of the same shapes. Anything else runs the generic kernel,
which the first call also runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from minigraph.backends import fused_kernels
from minigraph.backends.gemm import _frozen, packed_b
from minigraph.backends.native import check_code, fbuf, ffi, lib, num_threads, plain_f32
from minigraph.backends.nn_kernels import matmul_native, matmul_native_epilogue
from minigraph.backends.registry import replay_maker, set_bound
from minigraph.framework.graph import Operation
from minigraph.ops.fused_ops import member_values, prepare

F32 = np.dtype(np.float32)
FIXED_BYTES = 1 << 16  # the largest stage input (a bias, batch-norm vectors) a fast call
# compares byte for byte at every call (64 KiB: 16384 channels, a few microseconds)


class _Call:
    """What a fast call needs: the shapes, the weight and its packing, the read-only inputs
    that must stay the same objects, and the epilogue (its C struct) with the input that is
    its residual, if any."""

    __slots__ = ("a_shape", "m", "n", "k", "trans_a", "b", "packed", "fixed", "struct",
                 "residual", "keep")

    def __init__(self, a: np.ndarray, b: np.ndarray, trans_a: bool, trans_b: bool) -> None:
        packing = packed_b(b, trans_b)
        self.a_shape, self.trans_a, self.b = a.shape, int(trans_a), b
        self.m = a.shape[1] if trans_a else a.shape[0]
        self.k, self.n = packing.k, packing.n
        self.packed = fbuf(packing.data)
        # the stage inputs other than the residual: (index, dtype, shape, bytes) of each
        self.fixed: tuple[tuple[int, np.dtype, tuple, bytes], ...] = ()
        self.struct, self.residual, self.keep = ffi.NULL, -1, packing

    def matches(self, values: list) -> bool:
        a, b = values[0], values[1]
        if (b is not self.b or not _frozen(b) or type(a) is not np.ndarray
                or a.shape != self.a_shape or not plain_f32(a)):
            return False
        for index, dtype, shape, data in self.fixed:
            value = values[index]
            if (type(value) is not np.ndarray or value.dtype != dtype or value.shape != shape
                    or value.tobytes() != data):
                return False
        if self.residual >= 0:
            r = values[self.residual]
            return type(r) is np.ndarray and r.shape == (self.m, self.n) and plain_f32(r)
        return True

    def run(self, values: list, out: np.ndarray | None) -> list:
        shape = (self.m, self.n)
        if (out is None or type(out) is not np.ndarray or out.shape != shape
                or not plain_f32(out) or not out.flags.writeable
                or any(np.may_share_memory(out, v) for v in values)):
            out = np.empty(shape, F32)
        struct = self.struct
        if self.residual >= 0:
            struct = ffi.new("mg_epilogue *", self.struct[0])
            struct.residual = fbuf(values[self.residual])
        check_code(lib.mg_gemm(self.m, self.n, self.k, self.trans_a, fbuf(values[0]),
                               self.packed, fbuf(out), struct, num_threads()), "GEMM")
        return [out]


def _plain_call(op: Operation, values: list) -> _Call | None:
    """The fast call of a MatMul with these inputs, or None where the generic kernel's path
    would differ (a weight that is not read-only, ``a`` not C-contiguous float32)."""
    a, b = values
    if (type(a) is not np.ndarray or not plain_f32(a) or a.ndim != 2
            or type(b) is not np.ndarray or b.dtype != F32 or b.ndim != 2 or not _frozen(b)):
        return None
    return _Call(a, b, op.attrs["transpose_a"], op.attrs["transpose_b"])


class _Bound:
    """A kernel for one bound entry: its first call runs the generic kernel and keeps the
    fast call its inputs allow (``_make``); later calls with matching inputs make it. A call
    whose inputs do not match (a training step's new weights) runs the generic kernel and
    drops the fast call for good, with the arrays it held."""

    __slots__ = ("call", "fresh")

    def __init__(self, op: Operation) -> None:
        self.call: _Call | None = None
        self.fresh = True

    def __call__(self, op: Operation, values: list, ctx: Any, out=None) -> list:
        call = self.call
        if call is not None and call.matches(values):
            return call.run(values, out)
        result = self._generic(op, values, ctx, out=out)
        self.call = self._make(op, values) if self.fresh else None
        self.fresh = False
        return result

    def replay(self, op: Operation, values: list, outputs: list, ctx: Any
               ) -> Callable[[], None] | None:
        """The fast call on fixed arrays (``registry.ReplayMaker``): the GEMM's arguments
        made once; each call checks the stage inputs' bytes as :meth:`_Call.matches` does
        and runs the generic kernel where they changed. The entry's fast call where these
        arrays match it, else one made for them (a weight a replay froze); where neither
        can be made, the generic kernel's own replay (a fused convolution's), if any."""
        call, out = self.call, outputs[0]
        if call is None or not call.matches(values):
            call = self._make(op, values)
        if (call is None or not call.matches(values) or out.shape != (call.m, call.n)
                or not plain_f32(out) or not out.flags.writeable):
            maker = replay_maker(self._generic)
            return None if maker is None else maker(op, values, outputs, ctx)
        struct = call.struct
        if call.residual >= 0:
            struct = ffi.new("mg_epilogue *", call.struct[0])
            struct.residual = fbuf(values[call.residual])
        args = (call.m, call.n, call.k, call.trans_a, fbuf(values[0]), call.packed, fbuf(out),
                struct, num_threads())
        fixed = [(values[index], data) for index, _, _, data in call.fixed]
        gemm = lib.mg_gemm

        def replayed() -> None:
            for value, data in fixed:
                if value.tobytes() != data:
                    np.copyto(out, self(op, values, ctx)[0])
                    return
            check_code(gemm(*args), "GEMM")

        replayed.keep = (call, struct, values, outputs)
        return replayed


class BoundMatMul(_Bound):
    """``matmul_native`` for one bound entry (see the module docstring)."""

    __slots__ = ()
    _generic = staticmethod(matmul_native)
    _make = staticmethod(_plain_call)


class BoundFusedMatMul(_Bound):
    """``fused_native`` of a ``_FusedMatMul`` for one bound entry: where its first call took
    the GEMM-with-epilogue route, later calls make that C call directly."""

    __slots__ = ()
    _generic = staticmethod(fused_kernels.fused_native)

    @staticmethod
    def _make(op: Operation, values: list) -> _Call | None:
        return _fused_call(op, values)


def _fused_call(op: Operation, values: list) -> _Call | None:
    """The fast call of a ``_FusedMatMul`` with these inputs, or None where the generic
    kernel would not apply its whole chain as one GEMM epilogue (a stage without a native
    kernel, vectors that do not fit) or a stage input is larger than ``FIXED_BYTES``. The
    epilogue is built from private copies of the stage inputs (a bias a loop passes along
    may be a writeable array), and a later call matches while its stage inputs hold the
    same bytes: the generic kernel would form the same vectors from them."""
    prepared = prepare(op, values)
    plan = prepared.cache.get("native")
    if plan is None or plan.variant is not matmul_native_epilogue or not plan.epilogue:
        return None
    call = _plain_call(op, values[:2])
    epilogue = fused_kernels.epilogue_of(member_values(op, values, prepared), prepared)
    if call is None or epilogue is None:
        return None
    residual = -1
    fixed, copies = [], list(values)
    for member, part in zip(prepared.members[1:], prepared.slices[1:]):
        for index in range(part.start, part.stop):
            value = values[index]
            if member.type == "AddV2" and epilogue.residual is not None:
                residual = index
            elif type(value) is not np.ndarray or value.nbytes > FIXED_BYTES:
                return None
            else:
                copies[index] = np.array(value)
                copies[index].setflags(write=False)
                fixed.append((index, value.dtype, value.shape, value.tobytes()))
    epilogue = fused_kernels.epilogue_of(member_values(op, copies, prepared), prepared)
    if epilogue is None or not epilogue.fits((call.m, call.n)):
        return None
    call.fixed, call.residual = tuple(fixed), residual
    call.struct = epilogue.c_struct((call.m, call.n))
    call.keep = (call.keep, epilogue, copies)
    return call


set_bound(matmul_native, BoundMatMul)
set_bound(fused_kernels.fused_native, BoundFusedMatMul)
