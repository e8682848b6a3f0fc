"""numpy kernels of the batched matrix products (``ops.linalg_ops``): BatchMatMul(V2, V3) and
Einsum, the same on every CPU backend.

Einsum runs as its plan says (``linalg_ops.parse_einsum``): each operand's own labels summed,
then transposed and reshaped to [batch, rows, contracted] and [batch, contracted, cols], one
``np.matmul``, reshaped and transposed to the output's order. No ``np.einsum`` (whose
``optimize`` may pick another contraction order): the same equation always runs the same
products.

float32 and float64 products go to numpy's BLAS, which starts its own threads: each call
limits them to minigraph's thread count (``native.num_threads()``) with threadpoolctl (a
core dependency; without it the BLAS keeps its own setting), so a matmul never
oversubscribes the machine. float16/bfloat16 are computed in float32 and rounded once;
integers stay in their type (wrapping on overflow, as TF).

native (float32 BatchMatMul, V2, V3): minigraph's GEMM (``backends.gemm``, kernels_c/gemm.c)
per batch element, each product one chain of fused multiply-adds over k in order
(bit-identical for any thread count, within ``k * 2**-24 * sum |x y|`` of the exact
product); a y without batch elements of its own (a shared weight) is packed once and every
x matrix runs as one GEMM of all their rows.
"""

from __future__ import annotations

import functools

import numpy as np

from minigraph.backends.compute import compute_dtype
from minigraph.backends.gemm import c_gemm, pack_b, packed_b
from minigraph.backends.native import as_f32, num_threads, output_array
from minigraph.backends.registry import register_kernel
from minigraph.framework import dtypes
from minigraph.ops.linalg_ops import (
    EinsumPlan,
    diag_len,
    diag_matrix_size,
    diag_offset,
    parse_einsum,
)


@functools.cache
def _blas_controller():
    """threadpoolctl's controller of the loaded BLAS libraries, or None without it."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return None
    return ThreadpoolController()


def blas_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.matmul(a, b)`` with the BLAS's threads limited to minigraph's thread count."""
    controller = _blas_controller() if a.dtype.kind == "f" else None
    if controller is None:
        return np.matmul(a, b)
    with controller.limit(limits=num_threads(), user_api="blas"):
        return np.matmul(a, b)


def _in(x: np.ndarray) -> np.ndarray:
    return x.astype(compute_dtype(x.dtype), copy=False)


@register_kernel("BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")
def batch_matmul(op, inputs, ctx):
    """x @ y over the (broadcast) batch dims, each operand's last two dims swapped first
    where its adj attr says (the adjoint of a real matrix is its transpose)."""
    x, y = inputs
    left = np.swapaxes(x, -1, -2) if op.attrs["adj_x"] else x
    right = np.swapaxes(y, -1, -2) if op.attrs["adj_y"] else y
    return [blas_matmul(_in(left), _in(right)).astype(x.dtype, copy=False)]


@register_kernel("BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", backend="native",
                 dtypes=(dtypes.float32,), out=True)
def batch_matmul_native(op, inputs, ctx, out=None):
    """x @ y (adjoints as the attrs say) over the broadcast batch dims on the native GEMM
    (see the module docstring), in ``out`` where it fits."""
    x, y = inputs
    adj_x, adj_y = op.attrs["adj_x"], op.attrs["adj_y"]
    if x.dtype != np.float32 or y.dtype != np.float32 or 0 in x.shape or 0 in y.shape:
        return batch_matmul(op, inputs, ctx)  # empty: numpy's zeros
    m, k = x.shape[-1:-3:-1] if adj_x else x.shape[-2:]
    n = y.shape[-2] if adj_y else y.shape[-1]
    batch = np.broadcast_shapes(x.shape[:-2], y.shape[:-2])
    out = output_array(out, (*batch, m, n), x, y)
    if int(np.prod(y.shape[:-2])) == 1 and not adj_x:  # one shared y: one GEMM
        right = y.reshape(y.shape[-2:])
        packing = packed_b(right, adj_y, owner=y)
        return [c_gemm(as_f32(x).reshape(-1, k), packing, out=out)]
    xs = np.broadcast_to(x, (*batch, *x.shape[-2:]))
    ys = np.broadcast_to(y, (*batch, *y.shape[-2:]))
    packs: dict[int, object] = {}  # per distinct y matrix (by address): packed once
    for index in np.ndindex(*batch):
        right = ys[index]
        key = right.__array_interface__["data"][0]
        if key not in packs:
            packs[key] = pack_b(right, adj_y)
        c_gemm(xs[index], packs[key], adj_x, out=out[index])
    return [out]


@functools.lru_cache(maxsize=256)
def _plan(equation: str, count: int) -> EinsumPlan:
    return parse_einsum(equation, count)


def _prepare(x: np.ndarray, subscripts: str, summed: str, order: str) -> np.ndarray:
    """x with the ``summed`` labels' axes summed away, its axes then in ``order``."""
    if summed:
        x = x.sum(axis=tuple(subscripts.index(c) for c in summed))
        subscripts = "".join(c for c in subscripts if c not in summed)
    return x.transpose([subscripts.index(c) for c in order])


def _size(sizes: dict[str, int], labels: str) -> int:
    return int(np.prod([sizes[c] for c in labels], dtype=np.int64))


@register_kernel("Einsum")
def einsum(op, inputs, ctx):
    """Lowered to transposes and one batched matmul (see the module docstring)."""
    plan = _plan(op.attrs["equation"], len(inputs))
    arrays = [_in(a) for a in inputs]
    sizes = {c: d for s, a in zip(plan.inputs, arrays) for c, d in zip(s, a.shape)}
    if len(arrays) == 1:
        out = _prepare(arrays[0], plan.inputs[0], plan.summed[0], plan.output)
    else:
        b, (fx, fy), k = plan.batch, plan.free, plan.contract
        x = _prepare(arrays[0], plan.inputs[0], plan.summed[0], b + fx + k)
        y = _prepare(arrays[1], plan.inputs[1], plan.summed[1], b + k + fy)
        product = blas_matmul(x.reshape(_size(sizes, b), _size(sizes, fx), _size(sizes, k)),
                              y.reshape(_size(sizes, b), _size(sizes, k), _size(sizes, fy)))
        labels = b + fx + fy
        out = product.reshape([sizes[c] for c in labels]).transpose(
            [labels.index(c) for c in plan.output])
    return [np.asarray(out, order="C").astype(inputs[0].dtype, copy=False)]


@register_kernel("MatrixBandPart")
def matrix_band_part(op, inputs, ctx):
    """Entry (m, n) of each inner matrix is kept where (num_lower < 0 or m - n <= num_lower)
    and (num_upper < 0 or n - m <= num_upper), else 0."""
    x, num_lower, num_upper = inputs
    rows, cols = x.shape[-2:]
    offset = np.arange(rows)[:, None] - np.arange(cols)[None, :]  # m - n
    keep = np.ones((rows, cols), bool)
    if num_lower >= 0:
        keep &= offset <= num_lower
    if num_upper >= 0:
        keep &= -offset <= num_upper
    return [np.where(keep, x, np.zeros((), x.dtype))]


def _diag_slots(rows: int, cols: int, k, align: str):
    """For each slot (row i = diagonal k1 - i, position n) of the diagonals' padded layout:
    its matrix row and column and whether it holds an entry (the rest is padding)."""
    flat = np.ravel(k).tolist()
    low, high = (flat[0], flat[0]) if len(flat) == 1 else flat
    longest = max(0, min(rows + min(high, 0), cols - max(low, 0)))
    diagonals = np.arange(high, low - 1, -1)
    lengths = np.array([diag_len(rows, cols, int(d)) for d in diagonals])
    offsets = np.array([diag_offset(align, int(d), longest, int(n))
                        for d, n in zip(diagonals, lengths)])
    j = np.arange(longest)[None, :] - offsets[:, None]  # index along each diagonal
    valid = (j >= 0) & (j < lengths[:, None])
    row = j + np.maximum(-diagonals, 0)[:, None]
    col = j + np.maximum(diagonals, 0)[:, None]
    return np.where(valid, row, 0), np.where(valid, col, 0), valid, low == high


@register_kernel("MatrixDiagPartV3")
def matrix_diag_part(op, inputs, ctx):
    x, k, padding = inputs
    row, col, valid, single = _diag_slots(*x.shape[-2:], k, op.attrs["align"])
    out = np.where(valid, x[..., row, col], padding)
    return [np.ascontiguousarray(out[..., 0, :] if single else out)]


def _set_diagonals(out: np.ndarray, diagonal: np.ndarray, k, align: str) -> np.ndarray:
    row, col, valid, single = _diag_slots(*out.shape[-2:], k, align)
    values = diagonal[..., None, :] if single else diagonal
    out[..., row[valid], col[valid]] = values[..., valid]
    return out


@register_kernel("MatrixSetDiagV3")
def matrix_set_diag(op, inputs, ctx):
    x, diagonal, k = inputs
    return [_set_diagonals(x.copy(), diagonal, k, op.attrs["align"])]


@register_kernel("MatrixDiagV3")
def matrix_diag(op, inputs, ctx):
    diagonal, k, rows, cols, padding = inputs
    flat = np.ravel(k).tolist()
    low, high = (flat[0], flat[0]) if len(flat) == 1 else flat
    batch = diagonal.shape[:-1] if low == high else diagonal.shape[:-2]
    size = diag_matrix_size(int(rows), int(cols), low, high, diagonal.shape[-1],
                            lambda message: ctx.error(op, message))
    out = np.full((*batch, *size), padding, diagonal.dtype)
    return [_set_diagonals(out, diagonal, k, op.attrs["align"])]
