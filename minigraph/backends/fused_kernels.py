"""Kernels of the internal fused training ops (``ops/fused_ops.py``), bit for bit the chain of
ops each one replaces, on the backend that runs it.

The reference kernels are the chain itself: the batch-norm kernel with the backend's math,
then the same numpy expressions as the ``AddV2``, ``Relu`` and ``ReluGrad`` kernels. The
native float32 kernels run the chain in the batch-norm C passes (kernels_c/batch_norm.c,
``mg_bn_*_ex``): the side input is added and the Relu applied in the pass that writes ``y``,
and the backward's two passes read ``dy`` masked by ``y > 0`` in registers, so neither the
pre-activation nor the masked gradient is written and read back. Each stage rounds as the
unfused kernel does (``tests/test_training_fusion.py`` compares every ISA); inputs C does not
take (empty tensors, inference-mode gradients) run the chain of native kernels instead.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from minigraph.backends import native
from minigraph.backends.activation_kernels import c_relu, c_relu_grad, relu, relu_grad
from minigraph.backends.batch_norm_kernels import batch_norm_forward, fused_batch_norm_grad
from minigraph.backends.math_kernels import c_broadcast
from minigraph.backends.registry import KernelContext, register_kernel
from minigraph.framework import dtypes
from minigraph.framework.graph import Operation
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


@register_kernel("_FusedBatchNormEx", **NATIVE)
def fused_batch_norm_ex_native(op: Operation, inputs: list[np.ndarray], ctx: KernelContext
                               ) -> list[np.ndarray]:
    """One C call: the statistics pass, then y = relu?(bn(x) + side) in one pass
    (``mg_bn_forward_training_ex`` / ``mg_bn_forward_inference_ex``)."""
    side, relu_on = _ex_attrs(op, inputs, 5)
    if side is not None:
        side = native.as_f32(side)
    return batch_norm_forward(
        op, inputs[:5], ctx, partial(native.bn_forward_training_ex, side=side, relu=relu_on),
        partial(native.bn_forward_inference_ex, side=side, relu=relu_on))


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


@register_kernel("_FusedBatchNormGradEx", **NATIVE)
def fused_batch_norm_grad_ex_native(op: Operation, inputs: list[np.ndarray],
                                    ctx: KernelContext) -> list[np.ndarray]:
    """Training with Relu: one C call, both backward passes reading dy masked by y > 0 in
    registers and the apply pass storing the masked dy as the side gradient
    (``mg_bn_backward_training_ex``); otherwise the native kernels of the chain."""
    attrs = op.attrs
    dy, x, scale, mean, variance, _reserve_3, _offset, y = inputs
    if not (attrs["is_training"] and attrs["activation_mode"] == "Relu" and x.size):
        return _grad_ex_chain(op, inputs, ctx, True)
    f32 = native.as_f32
    dx, scale_backprop, offset_backprop, side = native.bn_backward_training_ex(
        f32(dy), f32(x), f32(scale), f32(mean), f32(variance), f32(y), attrs["epsilon"],
        channels_last(attrs["data_format"]), side_backprop=bool(attrs["num_side_inputs"]))
    empty = np.zeros(0, np.float32)
    outputs = [dx, scale_backprop, offset_backprop, empty, empty.copy()]
    return outputs + ([side] if side is not None else [])
