"""Kernels of the remapper's fused ops (``ops/fused_ops.py``): a convolution's or matmul's
elementwise successors applied without another trip through memory, bit for bit as the
chain's own kernels compute them.

**Every backend** (``reference``, ``float64``, and the native one wherever its fast path does
not apply): the member ops' own kernels of that backend, one after the other
(:func:`run_members`), so a fused node's result is its chain's by construction.

**Native, float32**: the head's kernel with the chain as an
:class:`~minigraph.backends.activation_kernels.Epilogue`: a native NHWC ``Conv2D`` or a
``MatMul`` applies it to each output tile in registers before storing it
(``mg_conv2d_forward``'s epilogue); other heads (depthwise) in one C pass over cache-sized
blocks of their result (``mg_channel_epilogue``). Each stage rounds exactly as the op's own
native kernel does (the batch-norm coefficients ``k = scale * (1 / sqrt(variance +
epsilon))`` are formed as the native batch norm forms them). Inputs the epilogue does not
cover run the members' kernels instead: a batch-norm or activation stage whose native
kernel does not take the op, a batch-norm offset beyond ``2**60`` (a channel the native
batch norm treats as exceptional), vectors or a side input that do not match the result's
channels and shape (a broadcasting side input).
"""

from __future__ import annotations

import functools

import numpy as np

from minigraph import backends
from minigraph.backends.activation_kernels import Epilogue, c_channel_epilogue
from minigraph.backends.convolution_kernels import (
    conv2d_native,
    conv2d_native_epilogue,
    conv_replay,
    depthwise_conv2d_native,
    depthwise_replay,
)
from minigraph.backends.gemm import _frozen
from minigraph.backends.nn_kernels import matmul_native, matmul_native_epilogue
from minigraph.backends.registry import (
    KernelContext,
    KernelDef,
    get_kernel,
    register_kernel,
    set_replay,
)
from minigraph.framework import dtypes
from minigraph.framework.graph import Operation
from minigraph.ops.fused_ops import HEADS, Prepared, member_values, prepare

# heads whose native kernel has a variant taking the epilogue into its tiles
EPILOGUE_KERNELS = {conv2d_native: conv2d_native_epilogue,
                    matmul_native: matmul_native_epilogue}
ACTIVATIONS = {"Relu": 1, "Relu6": 2}
# stages whose epilogue form is the native kernel's rounding: only when that kernel runs
NATIVE_STAGES = ("FusedBatchNormV3", "Relu", "Relu6")
_BIG_OFFSET = 2.0 ** 60  # the native batch norm's exceptional-channel bound on |offset|


@functools.lru_cache(maxsize=4096)
def _member_kernel(member: Operation, backend: str) -> KernelDef:
    """The kernel ``member`` runs on ``backend`` (or its fallback), looked up once: a
    member op never changes (``ops.fused_ops.members`` keeps it)."""
    return get_kernel(member, backend)


def _context(kernel: KernelDef, ctx: KernelContext) -> KernelContext:
    """The context ``kernel`` runs in: the fused node's own where the backends agree (no
    new frozen dataclass per call)."""
    if kernel.backend == ctx.backend:
        return ctx
    return KernelContext(kernel.backend, backends.math_for(kernel.backend), ctx.state)


def _run(member: Operation, inputs: list, ctx: KernelContext) -> np.ndarray:
    """Output 0 of ``member``'s kernel on ``ctx``'s backend (or that backend's fallback),
    as the session runs it."""
    kernel = _member_kernel(member, ctx.backend)
    result = kernel.kernel(member, inputs, _context(kernel, ctx))[0]
    return result if type(result) is np.ndarray else np.asarray(result)


def run_members(pairs: list, ctx: KernelContext, y: np.ndarray | None = None) -> np.ndarray:
    """The chain's result: each member's own kernel on ``ctx``'s backend in turn (from the
    head's result ``y``, when it already ran)."""
    head, head_inputs = pairs[0]
    if y is None:
        y = _run(head, head_inputs, ctx)
    for member, args in pairs[1:]:
        y = _run(member, [y, *args], ctx)
    return y


@register_kernel(*HEADS, backend=("reference", "float64"))
def fused_members(op, inputs, ctx):
    return [run_members(member_values(op, inputs), ctx)]


@register_kernel(*HEADS, backend="native", dtypes=(dtypes.float32,), out=True)
def fused_native(op, inputs, ctx, out=None):
    """The head's native kernel (in ``out`` where it takes one and ``out`` fits) with the
    chain as its epilogue where that stands for the stages, else the members' kernels."""
    prepared = prepare(op, inputs)
    pairs = member_values(op, inputs, prepared)
    plan = prepared.cache.get("native")
    if plan is None:
        plan = prepared.cache["native"] = _NativePlan(prepared.members)
    head, head_inputs = pairs[0]
    head_ctx = _context(plan.head, ctx)
    epilogue = epilogue_of(pairs, prepared) if plan.epilogue else None
    given = {"out": out} if out is not None and plan.head.takes_out else {}
    if epilogue is not None and plan.variant is not None:
        [y] = plan.variant(head, head_inputs, head_ctx, epilogue, **given)
        if epilogue.fits(y.shape):  # applied in the head's tiles
            return [y]
    else:
        [y] = plan.head.kernel(head, head_inputs, head_ctx, **given)
        if (epilogue is not None and type(y) is np.ndarray and y.flags.writeable
                and y.dtype == np.float32 and epilogue.fits(y.shape)):
            c_channel_epilogue(y, epilogue)
            return [y]
    return [run_members(pairs, ctx, np.asarray(y))]


def fused_replay(op, values: list, outputs: list, ctx):
    """A fused convolution on fixed arrays (``registry.ReplayMaker``): where
    ``fused_native`` applies the whole chain as the convolution's epilogue (in its tiles, or
    in one pass after a depthwise one) and every stage input but a residual is frozen (its
    vectors then never change), the convolution's replay with that epilogue; None otherwise
    (``fused_native`` then runs at each call)."""
    prepared = prepare(op, values)
    plan = prepared.cache.get("native")
    if plan is None or not plan.epilogue:
        return None
    if plan.variant is conv2d_native_epilogue:
        head_replay = conv_replay
    elif plan.variant is None and plan.head.kernel is depthwise_conv2d_native:
        head_replay = depthwise_replay  # the epilogue in one pass after, as fused_native
    else:
        return None
    pairs = member_values(op, values, prepared)
    epilogue = epilogue_of(pairs, prepared)
    if epilogue is None:
        return None
    for member, args in pairs[1:]:
        for value in args:
            residual = member.type == "AddV2" and epilogue.residual is value
            if not residual and (type(value) is not np.ndarray or not _frozen(value)):
                return None
    head, head_inputs = pairs[0]
    return head_replay(head, head_inputs, outputs, ctx, epilogue)


set_replay(fused_native, fused_replay)


class _NativePlan:
    """What the native kernel looks up once per fused node and signature: the head's
    kernel, its epilogue variant, and whether the epilogue may stand for the stages (every
    batch-norm and activation stage runs a native kernel: the epilogue rounds as those)."""

    __slots__ = ("head", "variant", "epilogue")

    def __init__(self, members: list[Operation]) -> None:
        self.head = get_kernel(members[0], "native")
        self.variant = EPILOGUE_KERNELS.get(self.head.kernel)
        self.epilogue = self.head.backend == "native" and all(
            get_kernel(member, "native").backend == "native"
            for member in members[1:] if member.type in NATIVE_STAGES)


def epilogue_of(pairs: list, prepared: Prepared) -> Epilogue | None:
    """The stages as an :class:`Epilogue` of their input values, or None when one falls
    outside what it computes bit for bit. The per-channel vectors of read-only arrays (a
    graph's constants) are formed once: the same arrays as last time give the same ones."""
    fixed = [a for member, args in pairs[1:] for a in args
             if member.type != "AddV2" or getattr(a, "ndim", 2) <= 1]
    last = prepared.cache.get("vectors")
    if (last is not None and len(last[0]) == len(fixed)
            and all(a is b and not a.flags.writeable for a, b in zip(fixed, last[0]))):
        vectors, absorbed = last[1]
    else:
        found = _vectors(pairs)
        if found is None:
            return None
        vectors, absorbed = found
        prepared.cache["vectors"] = (fixed, found)
    residual, activation = None, 0
    for member, args in pairs[1:]:
        if member.type == "AddV2":
            [residual] = args
        elif member.type in ACTIVATIONS:
            activation = ACTIVATIONS[member.type]
    if absorbed:
        residual = None  # a constant addend: in the affine's offset (_vectors)
    if residual is not None:
        return Epilogue(*vectors, residual, activation)
    kept = prepared.cache.get("epilogue")  # the same vectors: the same Epilogue (and its
    if kept is not None and kept[0] is vectors and kept[1] == activation:  # C struct)
        return kept[2]
    epilogue = Epilogue(*vectors, None, activation)
    prepared.cache["epilogue"] = (vectors, activation, epilogue)
    return epilogue


def _constant_addend(value, bias, mean) -> bool:
    """Whether an AddV2 stage's ``value`` goes into the epilogue's affine (``_vectors``): a
    read-only (a graph constant's) finite float32 scalar or per-channel vector, after a
    float32 bias and without a batch-norm stage (whose affine slot it takes). Finite: a NaN
    addend would leave NaN payloads to the add's and the fma's operand order."""
    return (mean is None and type(value) is np.ndarray and value.dtype == np.float32
            and value.ndim <= 1 and not value.flags.writeable and type(bias) is np.ndarray
            and bias.dtype == np.float32 and bias.ndim == 1
            and value.size in (1, bias.size) and bool(np.isfinite(value).all()))


def _vectors(pairs: list) -> tuple[tuple, bool] | None:
    """((bias, mean, k, offset) of the stages (None where a stage is absent), whether the
    AddV2 stage's constant addend is in them), or None when the batch norm's falls outside
    what the epilogue computes bit for bit: ``k = scale * (1 / sqrt(variance + epsilon))``
    as the native batch norm forms it, and no offset beyond ``2**60``."""
    bias = mean = k = offset = None
    absorbed = False
    for member, args in pairs[1:]:
        if member.type == "BiasAdd":
            [bias] = args
        elif member.type == "AddV2" and _constant_addend(args[0], bias, mean):
            # y + r of a constant scalar or per-channel r, after the bias and no batch
            # norm (MobileNetV3's hard sigmoid: Relu6(conv + b + 3)) as the affine
            # fma(y - 0, 1, r), which is y + r: the same single rounding
            mean, k = np.zeros_like(bias), np.ones_like(bias)
            offset = np.ascontiguousarray(np.broadcast_to(args[0], bias.shape))
            absorbed = True
        elif member.type == "FusedBatchNormV3":
            scale, offset, mean, variance = args
            if not all(type(v) is np.ndarray and v.dtype == np.float32
                       and v.shape == scale.shape for v in args):
                return None
            if not np.all(np.abs(offset) <= _BIG_OFFSET):
                return None
            epsilon = np.float32(member.attrs["epsilon"])
            k = scale * (np.float32(1) / np.sqrt(variance + epsilon))
    return (bias, mean, k, offset), absorbed
