"""Kernels of the internal fused training ops (``ops/fused_training_ops.py``), bit for bit
the chain of ops each one replaces, on the backend that runs it.

The reference kernels are the chain itself: the batch-norm kernel with the backend's math,
then the same numpy expressions as the ``AddV2``, ``Relu`` and ``ReluGrad`` kernels. The
native float32 kernels run the chain in the batch-norm C passes (kernels_c/batch_norm.c,
``mg_bn_*_ex``): the side input is added and the Relu applied in the pass that writes ``y``,
and the backward's two passes read ``dy`` masked by ``y > 0`` in registers, so neither the
pre-activation nor the masked gradient is written and read back. Each stage rounds as the
unfused kernel does (``tests/test_training_fusion.py`` compares every ISA); inputs C does not
take (empty tensors, inference-mode gradients) run the chain of native kernels instead.

The Relu / max-pool pair runs in the pooling C kernels (kernels_c/pooling.h):
``mg_relu_max_pool`` writes the pool as Relu(MaxPool(x)) and the Relu of each block's input
rows while they are in cache, ``mg_max_pool_grad_relu`` applies ReluGrad's mask in the store
that routes each window's gradient (``tests/test_pool_fusion.py``: the unfused bits on every
ISA and thread count).
"""

from __future__ import annotations

from functools import partial

import numpy as np

from minigraph.backends import native, pooling_kernels, training_kernels
from minigraph.backends.activation_kernels import c_relu, c_relu_grad, relu, relu_grad
from minigraph.backends.batch_norm_kernels import batch_norm_forward, fused_batch_norm_grad
from minigraph.backends.math_kernels import c_broadcast
from minigraph.backends.registry import KernelContext, find_kernel, register_kernel
from minigraph.framework import dtypes
from minigraph.framework.graph import Operation
from minigraph.ops import training_ops
from minigraph.ops.batch_norm import channels_last

NATIVE = {"backend": "native", "dtypes": (dtypes.float32,)}


# ----------------------------------------------------------------------------- the chain's stages


def _add(a: np.ndarray, b: np.ndarray, on_native: bool) -> np.ndarray:
    """AddV2's kernel: C on native float32 arrays it takes, else numpy's a + b."""
    if on_native:
        result = c_broadcast("add", a, b)
        if result is not None:
            return result
    with np.errstate(all="ignore"):
        return np.asarray(np.add(a, b), a.dtype)


def _relu(y: np.ndarray, on_native: bool) -> np.ndarray:
    """Relu's kernel on this backend."""
    return c_relu(y) if on_native else relu(None, [y], None)[0]


def _relu_grad(g: np.ndarray, features: np.ndarray, on_native: bool) -> np.ndarray:
    """ReluGrad's kernel on this backend."""
    return c_relu_grad(g, features) if on_native else relu_grad(None, [g, features], None)[0]


def _on_native(ctx: KernelContext, x: np.ndarray) -> bool:
    return ctx.backend == "native" and x.dtype == np.float32


def _tail(y: np.ndarray, side: np.ndarray | None, relu_on: bool, on_native: bool
          ) -> np.ndarray:
    """The chain after the batch norm: + side input, then the activation."""
    if side is not None:
        y = _add(y, side, on_native)
    return _relu(y, on_native) if relu_on else y


# ---------------------------------------------------------------------- _FusedBatchNormEx


def _ex_attrs(op: Operation, inputs: list[np.ndarray], first_side: int
              ) -> tuple[np.ndarray | None, bool]:
    side = inputs[first_side] if op.attrs["num_side_inputs"] else None
    return side, op.attrs["activation_mode"] == "Relu"


@register_kernel("_FusedBatchNormEx")
def fused_batch_norm_ex(op: Operation, inputs: list[np.ndarray], ctx: KernelContext
                        ) -> list[np.ndarray]:
    """FusedBatchNormV3's outputs with y = activation(y + side_input), computed as the
    unfused kernels compute them, one after the other."""
    side, relu_on = _ex_attrs(op, inputs, 5)
    outputs = batch_norm_forward(op, inputs[:5], ctx, ctx.math.bn_forward_training,
                                 ctx.math.bn_forward_inference)
    outputs[0] = _tail(outputs[0], side, relu_on, _on_native(ctx, inputs[0]))
    return outputs


@register_kernel("_FusedBatchNormEx", **NATIVE, out=True)
def fused_batch_norm_ex_native(op: Operation, inputs: list[np.ndarray], ctx: KernelContext,
                               out: np.ndarray | None = None) -> list[np.ndarray]:
    """One C call: the statistics pass, then y = relu?(bn(x) + side) in one pass
    (``mg_bn_forward_training_ex`` / ``mg_bn_forward_inference_ex``); y in ``out`` where it
    fits."""
    side, relu_on = _ex_attrs(op, inputs, 5)
    if side is not None:
        side = native.as_f32(side)
    return batch_norm_forward(
        op, inputs[:5], ctx,
        partial(native.bn_forward_training_ex, side=side, relu=relu_on, out=out),
        partial(native.bn_forward_inference_ex, side=side, relu=relu_on, out=out))


# ------------------------------------------------------------------ _FusedBatchNormGradEx


def _grad_ex_chain(op: Operation, inputs: list[np.ndarray], ctx: KernelContext,
                   on_native: bool) -> list[np.ndarray]:
    """ReluGrad(y_backprop, y) (Identity: y_backprop itself), then FusedBatchNormGradV3's
    kernel; the masked gradient is also the side input's."""
    dy, x, scale, mean, variance, reserve_3, _offset, y = inputs
    g = _relu_grad(dy, y, on_native) if op.attrs["activation_mode"] == "Relu" else dy
    outputs = fused_batch_norm_grad(op, [g, x, scale, mean, variance, reserve_3], ctx)
    return outputs + [g] * op.attrs["num_side_inputs"]


@register_kernel("_FusedBatchNormGradEx")
def fused_batch_norm_grad_ex(op: Operation, inputs: list[np.ndarray], ctx: KernelContext
                             ) -> list[np.ndarray]:
    """(x_backprop, scale_backprop, offset_backprop, two empty reserves, side gradients) of
    the masked gradient, as ReluGrad then FusedBatchNormGradV3 compute them."""
    return _grad_ex_chain(op, inputs, ctx, False)


@register_kernel("_FusedBatchNormGradEx", **NATIVE, out=True)
def fused_batch_norm_grad_ex_native(op: Operation, inputs: list[np.ndarray],
                                    ctx: KernelContext, out: np.ndarray | None = None
                                    ) -> list[np.ndarray]:
    """Training with Relu: one C call, both backward passes reading dy masked by y > 0 in
    registers and the apply pass storing the masked dy as the side gradient
    (``mg_bn_backward_training_ex``; x_backprop in ``out`` where it fits); otherwise the
    native kernels of the chain."""
    attrs = op.attrs
    dy, x, scale, mean, variance, _reserve_3, _offset, y = inputs
    if not (attrs["is_training"] and attrs["activation_mode"] == "Relu" and x.size):
        return _grad_ex_chain(op, inputs, ctx, True)
    f32 = native.as_f32
    dx, scale_backprop, offset_backprop, side = native.bn_backward_training_ex(
        f32(dy), f32(x), f32(scale), f32(mean), f32(variance), f32(y), attrs["epsilon"],
        channels_last(attrs["data_format"]), side_backprop=bool(attrs["num_side_inputs"]),
        out=out)
    empty = np.zeros(0, np.float32)
    outputs = [dx, scale_backprop, offset_backprop, empty, empty.copy()]
    return outputs + ([side] if side is not None else [])


# ----------------------------------------------------------------------------- update lists

# per single op: its reference kernel, the C kind, its state inputs, and how its scalars
# become C's (lr, c1, c2, epsilon) and its gradient input
_UPDATES = {
    "ApplyGradientDescent": (training_kernels.apply_gradient_descent,
                             "MG_UPDATE_GRADIENT_DESCENT", ("var",)),
    "ApplyMomentum": (training_kernels.apply_momentum, "MG_UPDATE_MOMENTUM", ("var", "accum")),
    "ApplyAdam": (training_kernels.apply_adam, "MG_UPDATE_ADAM", ("var", "m", "v")),
}

FUSED_UPDATE_SINGLE = {f"_Fused{name}": getattr(training_ops, name).op_def
                       for name in _UPDATES}


class _OneVariable:
    """Variable ``k`` of a fused update as the single op's kernel sees an op: its type,
    inputs, attrs and op definition."""

    __slots__ = ("type", "inputs", "attrs", "op_def")

    def __init__(self, op: Operation, k: int) -> None:
        count = op.attrs["N"]
        self.type = op.type[len("_Fused"):]
        self.op_def = FUSED_UPDATE_SINGLE[op.type]
        self.inputs = op.inputs[k::count]
        self.attrs = {name: value for name, value in op.attrs.items() if name != "N"}



def _per_variable(op: Operation, inputs: list, k: int) -> list:
    count = op.attrs["N"]
    return inputs[k::count]


@register_kernel("_FusedApplyGradientDescent", "_FusedApplyMomentum", "_FusedApplyAdam")
def fused_apply(op: Operation, inputs: list, ctx: KernelContext) -> list[np.ndarray]:
    """Each variable updated by the single op's own kernel, in order."""
    kernel = _UPDATES[op.type[len("_Fused"):]][0]
    return [kernel(_OneVariable(op, k), _per_variable(op, inputs, k), ctx)[0]
            for k in range(op.attrs["N"])]


@register_kernel("_FusedApplyGradientDescent", "_FusedApplyMomentum", "_FusedApplyAdam",
                 **NATIVE)
def fused_apply_native(op: Operation, inputs: list, ctx: KernelContext) -> list[np.ndarray]:
    """Every variable in one C call (``mg_apply_update_list``), each by the single op's
    float32 formula with its own scalars: the single kernels' bits."""
    name = op.type[len("_Fused"):]
    _, kind, state_names = _UPDATES[name]
    count = op.attrs["N"]
    single = FUSED_UPDATE_SINGLE[op.type]
    column = {arg.name: i for i, arg in enumerate(single.inputs)}

    def arg(arg_name: str) -> list:
        start = column[arg_name] * count
        return inputs[start:start + count]

    if name == "ApplyGradientDescent":
        lr, grad, c1 = arg("alpha"), arg("delta"), None
        c2 = epsilon = None
    elif name == "ApplyMomentum":
        lr, grad, c1 = arg("lr"), arg("grad"), arg("momentum")
        c2 = epsilon = None
    else:
        with np.errstate(all="ignore"):
            lr = [lr_k * np.sqrt(1 - b2) / (1 - b1) for lr_k, b1, b2 in
                  zip(arg("lr"), arg("beta1_power"), arg("beta2_power"))]
        grad, c1, c2, epsilon = arg("grad"), arg("beta1"), arg("beta2"), arg("epsilon")
    refs = [[op.inputs[column[state] * count + k].op.name for k in range(count)]
            for state in state_names]
    state = ctx.state
    with state.lock:
        current = [[native.as_f32(state.read(r)) for r in row] for row in refs]
        grad = [native.as_f32(g) for g in grad]
        for k in range(count):
            native.check_same_shape(op.type, current[0][k], grad=grad[k],
                                    **{s: current[i][k] for i, s in enumerate(state_names)})
        outputs = [[np.empty(v.shape, np.float32) for v in row] for row in current]
        c_update_list(getattr(native.lib, kind), current, grad, outputs, lr, c1, c2, epsilon,
                      op.attrs.get("use_nesterov", False))
        for row_refs, row in zip(refs, outputs):
            for ref, value in zip(row_refs, row):
                state.adopt(ref, value)  # new arrays only this kernel holds: no copy
        return [state.read(r) for r in refs[0]]


def c_update_list(kind: int, current: list[list[np.ndarray]], grad: list[np.ndarray],
                  outputs: list[list[np.ndarray]], lr, c1, c2, epsilon, nesterov: bool) -> None:
    """``mg_apply_update_list`` over C-contiguous float32 arrays: ``current[i][k]`` state i
    (var, then accum or m, v) of variable k, each ``grad[k]`` and ``outputs[i][k]`` of
    ``current[0][k]``'s size (checked by the caller), scalars one per variable."""
    ffi, lib = native.ffi, native.lib
    count = len(grad)

    def pointers(arrays, kind_name="const float *[]"):
        return ffi.new(kind_name, [native.fbuf(a) for a in arrays])

    def scalars(values):
        return ffi.NULL if values is None else ffi.new("float[]", [float(v) for v in values])

    rows = [pointers(row) for row in current] + [ffi.NULL] * (3 - len(current))
    outs = [pointers(row, "float *[]") for row in outputs] + [ffi.NULL] * (3 - len(outputs))
    counts = ffi.new("int64_t[]", [g.size for g in grad])
    native.check_code(lib.mg_apply_update_list(
        kind, count, counts, rows[0], rows[1], rows[2], pointers(grad), outs[0], outs[1],
        outs[2], scalars(lr), scalars(c1), scalars(c2), scalars(epsilon), int(nesterov),
        native.num_threads()), "fused variable updates")


# ----------------------------------------------------------------------------- Relu and max pool


class _Member:
    """One op of a fused chain as the registry and that op's kernels see it: its type, the
    fused node's name and attrs (the pool's attrs are the member pool's)."""

    __slots__ = ("type", "name", "attrs", "inputs", "outputs")

    def __init__(self, op_type: str, op: Operation) -> None:
        self.type, self.name, self.attrs = op_type, op.name, op.attrs
        self.inputs, self.outputs = op.inputs, op.outputs


def _run_member(op_type: str, op: Operation, inputs: list, ctx: KernelContext) -> np.ndarray:
    """``op_type``'s kernel, the one the session would pick for it on ``ctx``'s backend
    (native where its registration takes these attrs, else the reference), on ``inputs``."""
    from minigraph.backends import math_for  # (the package imports this module)

    member = _Member(op_type, op)
    kernel_def = find_kernel(member, ctx.backend)
    member_ctx = ctx if kernel_def.backend == ctx.backend else KernelContext(
        kernel_def.backend, math_for(kernel_def.backend), ctx.state)
    return kernel_def.kernel(member, inputs, member_ctx)[0]


@register_kernel("_FusedReluMaxPool")
def fused_relu_max_pool(op: Operation, inputs: list, ctx: KernelContext) -> list[np.ndarray]:
    """Relu's kernel, then MaxPool's on its result: (the pool, the Relu's output)."""
    activation = _run_member("Relu", op, inputs, ctx)
    return [_run_member("MaxPool", op, [activation], ctx), activation]


@register_kernel("_FusedMaxPoolGradReluGrad")
def fused_max_pool_grad_relu_grad(op: Operation, inputs: list, ctx: KernelContext
                                  ) -> list[np.ndarray]:
    """MaxPoolGrad's kernel, then ReluGrad's with the pool's input as the features."""
    routed = _run_member("MaxPoolGrad", op, inputs, ctx)
    return [_run_member("ReluGrad", op, [routed, inputs[0]], ctx)]


def _c_pool_window(op: Operation, x: np.ndarray):
    """The pool's C geometry (ksize, strides, pads, out, channels_last) where the native
    kernels take it (a float32 input, a window that fits int32, something to pool), else
    None: the chain of single-op kernels runs instead."""
    if x.dtype != np.float32 or not pooling_kernels.c_pool_fits(op):
        return None
    out_shape, pool = pooling_kernels.pool_setup(op, x.shape, op.attrs["data_format"])
    if 0 in out_shape or x.size == 0:
        return None
    w = pool.window
    return w.ksize, w.strides, w.pads, w.out, op.attrs["data_format"] == "NHWC"


@register_kernel("_FusedReluMaxPool", **NATIVE, out=True)
def fused_relu_max_pool_native(op: Operation, inputs: list, ctx: KernelContext,
                               out: np.ndarray | None = None) -> list[np.ndarray]:
    """One pass over the input (``mg_relu_max_pool``): the pool written as Relu(MaxPool(x))
    block by block, each block's input rows Relu'd while in cache; the pool in ``out`` where
    it fits."""
    window = _c_pool_window(op, inputs[0])
    if window is None:
        return fused_relu_max_pool(op, inputs, ctx)
    return list(pooling_kernels.c_relu_max_pool(inputs[0], *window, out=out))


@register_kernel("_FusedMaxPoolGradReluGrad", **NATIVE, out=True)
def fused_max_pool_grad_relu_grad_native(op: Operation, inputs: list, ctx: KernelContext,
                                         out: np.ndarray | None = None) -> list[np.ndarray]:
    """One pass (``mg_max_pool_grad_relu``): each window's gradient routed to its first
    maximum with ReluGrad's mask (the pool's input > 0) applied in the same store; into
    ``out`` where it fits."""
    x, pooled, g = inputs
    window = _c_pool_window(op, x)
    if window is None:
        return fused_max_pool_grad_relu_grad(op, inputs, ctx)
    return [pooling_kernels.c_max_pool_grad(x, g, *window, relu=True,
                                            out=native.unshared(out, pooled))]
