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

import weakref

import numpy as np

from minigraph.backends.activation_kernels import Epilogue
from minigraph.backends.native import F32, as_f32, check_code, fbuf, ffi, lib, num_threads


class PackedB:
    """B ([k, n]) packed into panels of 32 columns (``mg_gemm_pack_b``)."""

    __slots__ = ("k", "n", "data")

    def __init__(self, k: int, n: int, data: np.ndarray) -> None:
        self.k, self.n, self.data = k, n, data


def _matrix(what: str, array) -> np.ndarray:
    array = as_f32(array)
    if array.ndim != 2:
        raise ValueError(f"native {what}: expected a matrix, got shape {array.shape}")
    return array


def pack_b(b, trans_b: bool = False) -> PackedB:
    """The packing of the matrix ``b`` (``b.T`` when ``trans_b``) for :func:`c_gemm`."""
    b = _matrix("GEMM pack", b)
    k, n = b.shape[::-1] if trans_b else b.shape
    floats = lib.mg_gemm_packed_floats(k, n)
    if floats < 0:
        raise ValueError(f"native GEMM pack: a {k}x{n} matrix is too large")
    data = np.empty(floats, F32)
    check_code(lib.mg_gemm_pack_b(k, n, int(trans_b), fbuf(b), fbuf(data), num_threads()),
               "GEMM pack")
    return PackedB(k, n, data)


def _frozen(array: np.ndarray) -> bool:
    """Whether the values of ``array`` can never change: it and every array it views are
    read-only, ending in its own data or immutable bytes."""
    node = array
    while type(node) is np.ndarray:
        if node.flags.writeable:
            return False
        node = node.base
    return node is None or type(node) is bytes


# id(owner) -> (weak reference to owner, trans_b, b's shape, packing)
_CACHE: dict[int, tuple[weakref.ref, bool, tuple, PackedB]] = {}


def packed_b(b: np.ndarray, trans_b: bool = False, owner: np.ndarray | None = None) -> PackedB:
    """:func:`pack_b` of ``b``, cached while ``owner`` (the array ``b`` was reshaped from;
    default ``b``) lives when it is frozen (see the module docstring)."""
    owner = b if owner is None else owner
    if type(owner) is not np.ndarray or not _frozen(owner):
        return pack_b(b, trans_b)
    key = id(owner)
    entry = _CACHE.get(key)
    if entry is not None and entry[0]() is owner and entry[1] == trans_b \
            and entry[2] == b.shape:
        return entry[3]
    packing = pack_b(b, trans_b)
    ref = weakref.ref(owner, lambda _ref, key=key: _drop(key, _ref))
    _CACHE[key] = (ref, trans_b, b.shape, packing)
    return packing


def _drop(key: int, ref: weakref.ref) -> None:
    entry = _CACHE.get(key)
    if entry is not None and entry[0] is ref:
        del _CACHE[key]


def c_gemm(a, b: PackedB, trans_a: bool = False, epilogue: Epilogue | None = None,
           out_shape: tuple[int, ...] | None = None) -> np.ndarray:
    """``op(a) @ B`` (op: transpose when ``trans_a``) as a new float32 array of
    ``out_shape`` (default ``[m, n]``; its size must be ``m * n``, its last axis n), then
    ``epilogue`` (which must fit it) as ``mg_channel_epilogue`` applies it."""
    a = _matrix("GEMM", a)
    m, k = a.shape[::-1] if trans_a else a.shape
    if k != b.k or b.data.size != lib.mg_gemm_packed_floats(b.k, b.n):
        raise ValueError(f"native GEMM: A is {m}x{k} but the packed B is {b.k}x{b.n}")
    shape = (m, b.n) if out_shape is None else tuple(out_shape)
    if int(np.prod(shape)) != m * b.n or (shape and shape[-1] != b.n) or not shape:
        raise ValueError(f"native GEMM: output shape {shape} does not hold {m}x{b.n}")
    c = np.empty(shape, F32)
    c_epilogue = ffi.NULL if epilogue is None else epilogue.c_struct(c.shape)
    check_code(lib.mg_gemm(m, b.n, k, int(trans_a), fbuf(a), fbuf(b.data), fbuf(c),
                           c_epilogue, num_threads()), "GEMM")
    return c
