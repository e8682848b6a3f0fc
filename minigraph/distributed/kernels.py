"""CPU kernels of the distributed ops (importing this module registers them).

The collectives call the runtime's non-blocking MPI collectives on numpy buffers; the
batch-norm pieces accumulate their statistics and sums in float64 and hand
the per-element normalization to ``ctx.math`` (the reference's or, for the dtypes the C
loops take, the native backend's).
"""

from __future__ import annotations

import threading

import numpy as np

from minigraph.backends.batch_norm_kernels import _compute_type
from minigraph.backends.registry import KernelContext, register_kernel
from minigraph.distributed import runtime
from minigraph.framework import dtypes
from minigraph.framework.graph import Operation
from minigraph.ops.batch_norm import channel_axis, channels_last

F64 = np.float64


class _Layout:
    """Reduction axes and the broadcast shape of per-channel vectors for one data_format."""

    def __init__(self, x: np.ndarray, data_format: str) -> None:
        self.axis = channel_axis(data_format)
        self.axes = tuple(a for a in range(x.ndim) if a != self.axis)
        self.channels = x.shape[self.axis]
        self.count = x.size // self.channels if self.channels else 0
        self.shape = [1] * x.ndim
        self.shape[self.axis] = self.channels

    def channel(self, vector: np.ndarray, dtype: type) -> np.ndarray:
        return np.asarray(vector, dtype).reshape(self.shape)


# ----------------------------------------------------------------------------- moments


def _as_3d(x: np.ndarray, data_format: str) -> np.ndarray:
    """x viewed as [outer, C, inner]: [N*H*W, C, 1] for channels last, [N, C, H*W] first."""
    if channels_last(data_format):
        return x.reshape(-1, x.shape[-1], 1)
    return x.reshape(x.shape[0], x.shape[1], -1)


# float64 work happens block by block in one reused buffer of about this many elements:
# float64 temporaries of x's size would double its memory and cost more in page faults than
# the arithmetic.
_BLOCK_ELEMENTS = 1 << 15


_scratch = threading.local()


def _float64_buffer(slot: int, elements: int) -> np.ndarray:
    """Float64 scratch buffer number ``slot`` with at least ``elements``, kept per thread
    across calls (a fresh one each call would be paid for in page faults)."""
    buffers = getattr(_scratch, "buffers", None)
    if buffers is None:
        buffers = _scratch.buffers = {}
    buffer = buffers.get(slot)
    if buffer is None or buffer.size < elements:
        buffer = buffers[slot] = np.empty(max(elements, _BLOCK_ELEMENTS), F64)
    return buffer


def _float64_blocks(*arrays: np.ndarray):
    """(rows, arrays[0][rows] in float64, arrays[1][rows] in float64, ...) over the outer
    axis of [outer, C, inner] arrays, block by block, in reused buffers (each block is then
    worked on in place while in cache)."""
    shape = arrays[0].shape
    per_row = max(1, shape[1] * shape[2])
    step = max(1, _BLOCK_ELEMENTS // per_row)
    rows_per_block = min(step, shape[0])
    size = rows_per_block * per_row
    buffers = [_float64_buffer(slot, size)[:size].reshape((rows_per_block,) + shape[1:])
               for slot in range(len(arrays))]
    for begin in range(0, shape[0], step):
        rows = slice(begin, begin + step)
        blocks = []
        for array, buffer in zip(arrays, buffers):
            block = array[rows]
            out = buffer[:block.shape[0]]
            np.copyto(out, block)
            blocks.append(out)
        yield (rows, *blocks)


def _channel_sum(block: np.ndarray) -> np.ndarray:
    """Per-channel sum of a float64 [rows, C, inner] block (BLAS when channels are last)."""
    if block.shape[2] == 1:
        return np.ones(block.shape[0]) @ block[:, :, 0]
    return np.einsum("ocm->c", block)


def local_moments(x: np.ndarray, data_format: str) -> tuple[np.ndarray, ...]:
    """(count, mean, M2) per channel in float64, M2 = sum((x - mean)^2).

    One pass over x, block by block: each block's mean and M2 are computed two-pass in
    float64 (its deviations from its own mean), and the blocks are combined with Chan's
    formula (:func:`combine_moments`, exact). An empty batch gives count 0 and zero mean/M2.
    """
    layout = _Layout(x, data_format)
    count = np.asarray(float(layout.count), F64)
    n = F64(0)
    mean = np.zeros(layout.channels, F64)
    m2 = np.zeros(layout.channels, F64)
    if layout.count == 0:
        return count, mean, m2
    for _, block in _float64_blocks(_as_3d(x, data_format)):
        n_b = F64(block.shape[0] * block.shape[2])
        mean_b = _channel_sum(block) / n_b
        block -= mean_b[None, :, None]
        np.square(block, out=block)
        n, mean, m2 = _chan(n, mean, m2, n_b, mean_b, _channel_sum(block))
    return count, mean, m2


def _chan(n_a, mean_a, m2_a, n_b, mean_b, m2_b):
    """Chan et al.: the moments of parts a and b together (n_a + n_b > 0)."""
    n = n_a + n_b
    delta = mean_b - mean_a
    return n, mean_a + delta * (n_b / n), m2_a + m2_b + delta * delta * (n_a * n_b / n)


def combine_moments(counts: np.ndarray, means: np.ndarray, m2s: np.ndarray
                    ) -> tuple[np.ndarray, ...]:
    """Chan et al.'s parallel combination of per-part moments, in float64, part by part.

    For parts a and b: n = n_a + n_b, delta = mean_b - mean_a,
    mean = mean_a + delta n_b / n, M2 = M2_a + M2_b + delta^2 n_a n_b / n.
    Exact for unequal part sizes (averaging variances is not); empty parts are skipped.
    ``counts`` is [P], ``means`` and ``m2s`` are [P, C]. All parts empty: NaN mean and M2
    (FusedBatchNormV3's statistics of an empty batch).
    """
    counts = np.asarray(counts, F64)
    means, m2s = np.asarray(means, F64), np.asarray(m2s, F64)
    n = F64(0)
    mean = np.zeros(means.shape[1], F64)
    m2 = np.zeros(means.shape[1], F64)
    for n_b, mean_b, m2_b in zip(counts, means, m2s):
        if n_b > 0:
            n, mean, m2 = _chan(n, mean, m2, n_b, mean_b, m2_b)
    if n == 0:
        mean = np.full_like(mean, np.nan)
        m2 = np.full_like(m2, np.nan)
    return np.asarray(n, F64), mean, m2


@register_kernel("BatchNormLocalStats")
def batch_norm_local_stats(op: Operation, inputs: list[np.ndarray], ctx: KernelContext
                           ) -> list[np.ndarray]:
    return list(local_moments(inputs[0], op.attrs["data_format"]))


@register_kernel("CollectiveBatchNormStats")
def collective_batch_norm_stats(op: Operation, inputs: list[np.ndarray], ctx: KernelContext
                                ) -> list[np.ndarray]:
    """All-reduce with Chan's operator: every replica's (count, mean, M2) row is gathered
    (one Iallgather of 1 + 2C float64 per replica) and combined in rank order, so every
    replica gets bitwise the same global statistics whatever MPI's reduction order."""
    count, mean, m2 = (np.asarray(v, F64) for v in inputs)
    channels = mean.shape[0]
    packed = np.concatenate([count.reshape(1), mean, m2])
    table = runtime.all_gather(packed, what=f"CollectiveBatchNormStats '{op.name}'",
                               timeout_seconds=op.attrs["timeout_seconds"])
    return list(combine_moments(table[:, 0], table[:, 1:1 + channels],
                                table[:, 1 + channels:]))


# ----------------------------------------------------------------------------- all-reduce


@register_kernel("CollectiveAllReduce")
def collective_all_reduce(op: Operation, inputs: list[np.ndarray], ctx: KernelContext
                          ) -> list[np.ndarray]:
    return [runtime.all_reduce(inputs[0], op.attrs["merge_op"],
                               what=f"CollectiveAllReduce '{op.name}'",
                               timeout_seconds=op.attrs["timeout_seconds"])]


@register_kernel("FlatConcat")
def flat_concat(op: Operation, inputs: list[np.ndarray], ctx: KernelContext) -> list[np.ndarray]:
    if not inputs:
        return [np.zeros(0, op.attrs["T"].np_dtype)]
    return [np.concatenate([np.asarray(v).reshape(-1) for v in inputs])]


@register_kernel("FlatSlice")
def flat_slice(op: Operation, inputs: list[np.ndarray], ctx: KernelContext) -> list[np.ndarray]:
    begin, shape = op.attrs["begin"], op.attrs["shape"]
    end = begin + shape.num_elements()
    return [np.array(inputs[0][begin:end]).reshape(shape.dims)]


# ----------------------------------------------------------------------------- batch norm


def _variance(count: np.ndarray, m2: np.ndarray) -> np.ndarray:
    """Biased variance M2 / N (NaN for N = 0)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return m2 / F64(count)


@register_kernel("BatchNormApply")
@register_kernel("BatchNormApply", backend="native",
                 dtypes=(dtypes.float16, dtypes.bfloat16, dtypes.float32))
def batch_norm_apply(op: Operation, inputs: list[np.ndarray], ctx: KernelContext
                     ) -> list[np.ndarray]:
    """y = (x - mean) * (scale * rsqrt(M2/N + epsilon)) + offset with the global moments, and
    FusedBatchNormV3's training outputs (docs/tf-semantics.md#forward-is_trainingtrue) with
    the global N:
    batch_mean = mean, batch_variance = M2 / max(N - 1, 1) (blended with the incoming
    mean/variance when exponential_avg_factor != 1), reserve_space_1/2 = mean, M2 / N."""
    x, scale, offset, mean, variance, count, stat_mean, stat_m2 = inputs
    attrs = op.attrs
    ct = _compute_type(x)
    n = float(count)
    biased = _variance(count, stat_m2)
    with np.errstate(invalid="ignore", divide="ignore"):
        unbiased = stat_m2 / F64(max(n - 1.0, 1.0))
    mean_ct, biased_ct = stat_mean.astype(ct), biased.astype(ct)
    if x.size == 0:
        y = np.empty(x.shape, x.dtype)
    else:
        vector = [np.ascontiguousarray(v, dtype=ct) for v in (scale, offset)]
        y = ctx.math.bn_forward_inference(np.ascontiguousarray(x), vector[0], vector[1], mean_ct,
                                          biased_ct, attrs["epsilon"],
                                          channels_last(attrs["data_format"]))
    factor = attrs["exponential_avg_factor"]
    if factor == 1.0:
        batch_mean, batch_variance = mean_ct.copy(), unbiased.astype(ct)
    else:
        keep = ct(1) - ct(factor)
        batch_mean = np.asarray(mean, ct) * keep + mean_ct * ct(factor)
        batch_variance = np.asarray(variance, ct) * keep + unbiased.astype(ct) * ct(factor)
    return [y, batch_mean, batch_variance, mean_ct, biased_ct]


@register_kernel("BatchNormLocalGradSums")
def batch_norm_local_grad_sums(op: Operation, inputs: list[np.ndarray], ctx: KernelContext
                               ) -> list[np.ndarray]:
    """[[sum(dy)], [sum(dy * (x - mean))]] per channel over this replica's batch, float64."""
    dy, x, mean = inputs
    data_format = op.attrs["data_format"]
    layout = _Layout(x, data_format)
    if x.size == 0:
        return [np.zeros((2, layout.channels), F64)]
    mean = np.asarray(mean, F64)[None, :, None]
    sums = np.zeros((2, layout.channels), F64)
    for _, dy64, centered in _float64_blocks(_as_3d(dy, data_format),
                                             _as_3d(x, data_format)):
        centered -= mean
        sums[0] += _channel_sum(dy64)
        centered *= dy64
        sums[1] += _channel_sum(centered)
    return [sums]


@register_kernel("BatchNormGradApply")
def batch_norm_grad_apply(op: Operation, inputs: list[np.ndarray], ctx: KernelContext
                          ) -> list[np.ndarray]:
    """x_backprop = scale r (dy - sum_dy/N - (x - mean) sum_dy_xc/N r^2) with the global N,
    mean, variance and sums (r = rsqrt(M2/N + epsilon)); scale_backprop = local
    sum_dy_xc * r, offset_backprop = local sum_dy."""
    dy, x, scale, count, mean, m2, local_sums, global_sums = inputs
    attrs = op.attrs
    ct = _compute_type(x)
    layout = _Layout(x, attrs["data_format"])
    n = F64(count)
    with np.errstate(invalid="ignore", divide="ignore"):
        rstd = 1.0 / np.sqrt(_variance(count, m2) + F64(attrs["epsilon"]))
        scale_backprop = (local_sums[1] * rstd).astype(ct)
        offset_backprop = local_sums[0].astype(ct)
        if x.size == 0:
            return [np.empty(x.shape, x.dtype), scale_backprop, offset_backprop]
        gain = layout.channel(np.asarray(scale, F64) * rstd, ct)
        shift = layout.channel(global_sums[0] / n, ct)
        slope = layout.channel(global_sums[1] / n * rstd * rstd, ct)
        dx = np.subtract(x, layout.channel(mean, ct), dtype=ct)  # in place from here on
        dx *= -slope
        np.add(dx, dy, out=dx)
        dx -= shift
        dx *= gain
    return [dx.astype(x.dtype, copy=False), scale_backprop, offset_backprop]
