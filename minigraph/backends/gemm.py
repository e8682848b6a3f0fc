"""The native float32 GEMM (kernels_c/gemm*.c): ``C = op(A) @ B`` with B packed into panels,
the core of the native MatMul (``nn_kernels``) and of the 1x1 convolutions
(``convolution_kernels``).

B's packing depends only on B (and whether it is transposed), so a constant weight matrix is
packed once: :func:`packed_b` caches the packing of a *frozen* array (read-only, and every
array it views read-only too, down to immutable bytes or its own data: a graph's Consts)
keyed by the array's identity, dropped when the array dies. Each element of C is one chain
of fused multiply-adds over k in order (kernels_c/gemm.h): bit-identical for any thread
count and ISA, within ``K * 2**-24 * sum_k |a_ik b_kj|`` (to first order) of the exact
product.
"""

from __future__ import annotations

import math
import weakref

import numpy as np

from minigraph.backends.activation_kernels import Epilogue
from minigraph.backends.native import (
    F32,
    as_f32,
    check_code,
    fbuf,
    ffi,
    lib,
    line_aligned_bytes,
    num_threads,
)


class PackedB:
    """B ([k, groups * n]) packed into panels of 32 columns (``mg_gemm_pack_b``), each of its
    ``groups`` column blocks of n on its own (one after the other: a grouped convolution's
    filter, kernels_c/conv_gemm.h)."""

    __slots__ = ("k", "n", "groups", "data")

    def __init__(self, k: int, n: int, data: np.ndarray, groups: int = 1) -> None:
        self.k, self.n, self.groups, self.data = k, n, groups, data


def _matrix(what: str, array) -> np.ndarray:
    array = as_f32(array)
    if array.ndim != 2:
        raise ValueError(f"native {what}: expected a matrix, got shape {array.shape}")
    return array


def pack_b(b, trans_b: bool = False, groups: int = 1) -> PackedB:
    """The packing of the matrix ``b`` (``b.T`` when ``trans_b``) for :func:`c_gemm`; with
    ``groups`` > 1 (no transpose), of each of its ``groups`` equal column blocks in turn."""
    b = _matrix("GEMM pack", b)
    k, n = b.shape[::-1] if trans_b else b.shape
    if groups < 1 or n % groups or (trans_b and groups > 1):
        raise ValueError(f"native GEMM pack: {n} columns in {groups} groups")
    n //= groups
    floats = lib.mg_gemm_packed_floats(k, n)
    if floats < 0 or floats * groups * 4 >= 2**63:
        raise ValueError(f"native GEMM pack: a {k}x{n * groups} matrix is too large")
    data = line_aligned_bytes(floats * groups * 4).view(F32)
    blocks = [b] if groups == 1 else [np.ascontiguousarray(block)
                                      for block in np.split(b, groups, axis=1)]
    for g, block in enumerate(blocks):
        check_code(lib.mg_gemm_pack_b(k, n, int(trans_b), fbuf(block),
                                      fbuf(data[g * floats:(g + 1) * floats]), num_threads()),
                   "GEMM pack")
    return PackedB(k, n, data, groups)


def _frozen(array: np.ndarray) -> bool:
    """Whether the values of ``array`` can never change: it and every array it views are
    read-only, ending in its own data or immutable bytes."""
    node = array
    while type(node) is np.ndarray:
        if node.flags.writeable:
            return False
        node = node.base
    return node is None or type(node) is bytes


# (id(owner), purpose) -> (weak reference to owner, how it was computed, value)
_CACHE: dict[tuple[int, str], tuple[weakref.ref, object, object]] = {}


def frozen_cached(owner: np.ndarray, purpose: str, how: object, compute):
    """``compute()``, cached while ``owner`` lives when it is frozen (its values can never
    change: a graph's Consts), keyed by the owner's identity and ``purpose``, and computed
    again when ``how`` differs from the cached one's; computed at every call otherwise."""
    if type(owner) is not np.ndarray or not _frozen(owner):
        return compute()
    key = (id(owner), purpose)
    entry = _CACHE.get(key)
    if entry is not None and entry[0]() is owner and entry[1] == how:
        return entry[2]
    value = compute()
    ref = weakref.ref(owner, lambda _ref, key=key: _drop(key, _ref))
    _CACHE[key] = (ref, how, value)
    return value


def packed_b(b: np.ndarray, trans_b: bool = False, owner: np.ndarray | None = None,
             groups: int = 1) -> PackedB:
    """:func:`pack_b` of ``b``, cached while ``owner`` (the array ``b`` was reshaped from;
    default ``b``) lives when it is frozen (see the module docstring)."""
    return frozen_cached(b if owner is None else owner, "packed_b", (trans_b, groups, b.shape),
                         lambda: pack_b(b, trans_b, groups))


def _drop(key: tuple[int, str], ref: weakref.ref) -> None:
    entry = _CACHE.get(key)
    if entry is not None and entry[0] is ref:
        del _CACHE[key]


def c_gemm(a, b: PackedB, trans_a: bool = False, epilogue: Epilogue | None = None,
           out_shape: tuple[int, ...] | None = None, out: np.ndarray | None = None
           ) -> np.ndarray:
    """``op(a) @ B`` (op: transpose when ``trans_a``) as a new float32 array of
    ``out_shape`` (default ``[m, n]``; its size must be ``m * n``, its last axis n), then
    ``epilogue`` (which must fit it) as ``mg_channel_epilogue`` applies it (on each tile as
    it is finished). With ``out`` (a C-contiguous, aligned float32 array of ``m * n``
    elements whose last axis is n), the product is written there and ``out`` returned."""
    a = _matrix("GEMM", a)
    m, k = a.shape[::-1] if trans_a else a.shape
    if k != b.k or b.groups != 1 or b.data.size != lib.mg_gemm_packed_floats(b.k, b.n):
        raise ValueError(f"native GEMM: A is {m}x{k} but the packed B is {b.k}x{b.n} in "
                         f"{b.groups} groups")
    shape = (m, b.n) if out_shape is None else tuple(out_shape)
    if out is not None:
        shape = out.shape
        if (out.dtype != F32 or not out.flags.c_contiguous or not out.flags.aligned
                or not out.flags.writeable):
            raise ValueError("native GEMM: out must be a writable C-contiguous float32 array")
    if math.prod(shape) != m * b.n or (shape and shape[-1] != b.n) or not shape:
        raise ValueError(f"native GEMM: output shape {shape} does not hold {m}x{b.n}")
    c = np.empty(shape, F32) if out is None else out
    c_epilogue = ffi.NULL if epilogue is None else epilogue.c_struct(c.shape)
    check_code(lib.mg_gemm(m, b.n, k, int(trans_a), fbuf(a), fbuf(b.data), fbuf(c),
                           c_epilogue, num_threads()), "GEMM")
    return c
