"""Kernels of the optimizer update ops (``ops.training_ops``), with TF's formulas.

Each reads the current variable values and writes new arrays under the session state's
lock (``ctx.state``). On the native backend every float32 update runs in C
(kernels_c/optimizers*, on the worker pool) with the same float32 operations in the same
order: identical results, and TF's (its CPU kernels round each operation the same way).
"""

from __future__ import annotations

import numpy as np

from minigraph.backends.native import (
    as_f32,
    check_code,
    check_same_shape,
    fbuf,
    lib,
    num_threads,
)
from minigraph.backends.registry import register_kernel
from minigraph.framework import dtypes

F32 = np.float32


_INDICES: dict[tuple[str, tuple[str, ...]], tuple[int, ...]] = {}


def _input_indices(op, names: tuple[str, ...]) -> tuple[int, ...]:
    """Positions of the inputs ``names`` of ``op`` (cached per op type)."""
    key = (op.type, names)
    indices = _INDICES.get(key)
    if indices is None:
        indices = _INDICES[key] = tuple(op.op_def.input_index(n) for n in names)
    return indices


def _update(op, state, names: tuple[str, ...], compute) -> list[np.ndarray]:
    """Read the variables ``names`` (op inputs), apply ``compute``, write the results back."""
    refs = [op.inputs[i].op.name for i in _input_indices(op, names)]
    with state.lock:
        current = [state.read(r) for r in refs]
        with np.errstate(all="ignore"):
            updated = compute(*current)
        for ref, value, old in zip(refs, updated, current):
            state.write(ref, np.asarray(value, old.dtype))
    return [state.read(refs[0])]


def _scalars(op, inputs, names: tuple[str, ...]) -> list:
    return [inputs[i] for i in _input_indices(op, names)]


@register_kernel("ApplyGradientDescent")
def apply_gradient_descent(op, inputs, ctx):
    alpha, delta = _scalars(op, inputs, ("alpha", "delta"))
    return _update(op, ctx.state, ("var",), lambda var: [var - alpha * delta])


@register_kernel("ApplyMomentum")
def apply_momentum(op, inputs, ctx):
    lr, grad, momentum = _scalars(op, inputs, ("lr", "grad", "momentum"))

    def compute(var, accum):
        accum = accum * momentum + grad
        if op.attrs["use_nesterov"]:
            return [var - (grad * lr + accum * momentum * lr), accum]
        return [var - lr * accum, accum]

    return _update(op, ctx.state, ("var", "accum"), compute)


_ADAM_INPUTS = ("beta1_power", "beta2_power", "lr", "beta1", "beta2", "epsilon", "grad")


@register_kernel("ApplyAdam")
def apply_adam(op, inputs, ctx):
    beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad = _scalars(op, inputs,
                                                                         _ADAM_INPUTS)
    nesterov = op.attrs["use_nesterov"]

    def compute(var, m, v):
        lr_t = lr * np.sqrt(1 - beta2_power) / (1 - beta1_power)
        m = m + (grad - m) * (1 - beta1)
        v = v + (grad * grad - v) * (1 - beta2)
        step = (m * beta1 + (1 - beta1) * grad) if nesterov else m
        return [var - lr_t * step / (np.sqrt(v) + epsilon), m, v]

    return _update(op, ctx.state, ("var", "m", "v"), compute)


def _update_native(op, state, names: tuple[str, ...], c_update) -> list[np.ndarray]:
    """Read the variables ``names`` (op inputs), compute their new values with ``c_update``
    (a ``c_apply_*`` wrapper taking the current values), write them back."""
    refs = [op.inputs[i].op.name for i in _input_indices(op, names)]
    with state.lock:
        for ref, value in zip(refs, c_update(*(state.read(r) for r in refs))):
            state.adopt(ref, value)  # new arrays only this kernel holds: no copy
        return [state.read(refs[0])]


@register_kernel("ApplyGradientDescent", backend="native", dtypes=(dtypes.float32,))
def apply_gradient_descent_native(op, inputs, ctx):
    """``var - alpha * delta`` in C (the numpy kernel's float32 operations)."""
    alpha, delta = _scalars(op, inputs, ("alpha", "delta"))
    return _update_native(op, ctx.state, ("var",),
                          lambda var: c_apply_gradient_descent(var, delta, alpha))


@register_kernel("ApplyMomentum", backend="native", dtypes=(dtypes.float32,))
def apply_momentum_native(op, inputs, ctx):
    """TF's momentum update in C (the numpy kernel's float32 operations, in its order)."""
    lr, grad, momentum = _scalars(op, inputs, ("lr", "grad", "momentum"))
    return _update_native(op, ctx.state, ("var", "accum"), lambda var, accum: c_apply_momentum(
        var, accum, grad, lr, momentum, op.attrs["use_nesterov"]))


@register_kernel("ApplyAdam", backend="native", dtypes=(dtypes.float32,))
def apply_adam_native(op, inputs, ctx):
    """The same float32 operations in C, straight from the variables (no temporaries)."""
    beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad = _scalars(op, inputs,
                                                                         _ADAM_INPUTS)
    with np.errstate(all="ignore"):
        lr_t = lr * np.sqrt(1 - beta2_power) / (1 - beta1_power)
    return _update_native(op, ctx.state, ("var", "m", "v"), lambda var, m, v: c_apply_adam(
        var, m, v, grad, lr_t, beta1, beta2, epsilon, op.attrs["use_nesterov"]))


# ----------------------------------------------------------------------------- C wrappers


def _f32_block(what: str, var: np.ndarray, count: int, **others) -> tuple[list, np.ndarray]:
    """``var`` and ``others`` as C-contiguous float32 arrays of var's shape (checked: C reads
    var.size elements of each), and one new block for ``count`` results of var's size."""
    var = as_f32(var)
    others = {name: as_f32(value) for name, value in others.items()}
    check_same_shape(what, var, **others)
    return [var, *others.values()], np.empty(count * var.size, F32)


def c_apply_gradient_descent(var, delta, alpha) -> list[np.ndarray]:
    """[var - alpha * delta]: a new float32 array of var's shape."""
    (var, delta), out = _f32_block("ApplyGradientDescent", var, 1, delta=delta)
    check_code(lib.mg_apply_gradient_descent(var.size, fbuf(var), fbuf(delta), float(alpha),
                                             fbuf(out), num_threads()), "ApplyGradientDescent")
    return [out.reshape(var.shape)]


def c_apply_momentum(var, accum, grad, lr, momentum, use_nesterov) -> list[np.ndarray]:
    """(var', accum') of one momentum step (kernels_c/optimizers.h has the formulas): new
    float32 arrays of var's shape."""
    (var, accum, grad), out = _f32_block("ApplyMomentum", var, 2, accum=accum, grad=grad)
    size = var.size
    buf = fbuf(out)
    check_code(lib.mg_apply_momentum(size, fbuf(var), fbuf(accum), fbuf(grad), float(lr),
                                     float(momentum), int(use_nesterov), buf, buf + size,
                                     num_threads()), "ApplyMomentum")
    return [out[i * size:(i + 1) * size].reshape(var.shape) for i in range(2)]


def c_apply_adam(var, m, v, grad, lr_t, beta1, beta2, epsilon, use_nesterov):
    """(var', m', v') of one Adam step (kernels_c/optimizers.h has the formulas); new
    float32 arrays of var's shape (0-d included)."""
    (var, m, v, grad), out = _f32_block("ApplyAdam", var, 3, m=m, v=v, grad=grad)
    size = var.size
    buf = fbuf(out)
    check_code(lib.mg_apply_adam(
        size, fbuf(var), fbuf(m), fbuf(v), fbuf(grad), float(lr_t), float(beta1),
        float(beta2), float(epsilon), int(use_nesterov), buf, buf + size, buf + 2 * size,
        num_threads()), "ApplyAdam")
    return [out[i * size:(i + 1) * size].reshape(var.shape) for i in range(3)]
