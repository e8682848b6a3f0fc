"""Kernels of the optimizer update ops (``ops.training_ops``), with TF's formulas.

Each reads the current variable values and writes new arrays under the session state's
lock (``ctx.state``). On the native backend, float32 ApplyAdam runs in C
(``apply_adam_native``, kernels_c/) with the same float32 operations in the same order
(identical results).
"""

from __future__ import annotations

import numpy as np

from minigraph.backends.native import as_f32, check_code, check_same_shape, fbuf, lib
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


@register_kernel("ApplyAdam", backend="native", dtypes=(dtypes.float32,))
def apply_adam_native(op, inputs, ctx):
    """The same float32 operations in C, straight from the variables (no temporaries)."""
    beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad = _scalars(op, inputs,
                                                                         _ADAM_INPUTS)
    refs = [op.inputs[i].op.name for i in _input_indices(op, ("var", "m", "v"))]
    state = ctx.state
    with state.lock:
        current = [state.read(r) for r in refs]
        with np.errstate(all="ignore"):
            lr_t = lr * np.sqrt(1 - beta2_power) / (1 - beta1_power)
        for ref, value in zip(refs, c_apply_adam(*current, grad, lr_t, beta1, beta2,
                                                      epsilon, op.attrs["use_nesterov"])):
            state.write(ref, value)
        return [state.read(refs[0])]


# ----------------------------------------------------------------------------- C wrappers


def c_apply_adam(var, m, v, grad, lr_t, beta1, beta2, epsilon, use_nesterov):
    """(var', m', v') of one Adam step (kernels_c/optimizers.h has the formulas); new
    float32 arrays of var's shape (0-d included). m, v and grad must have var's shape: C
    reads var.size elements of each."""
    var, m, v, grad = as_f32(var), as_f32(m), as_f32(v), as_f32(grad)
    check_same_shape("ApplyAdam", var, m=m, v=v, grad=grad)
    size = var.size
    out = np.empty(3 * size, F32)  # one block: var', m', v' (views)
    buf = fbuf(out)
    check_code(lib.mg_apply_adam(
        size, fbuf(var), fbuf(m), fbuf(v), fbuf(grad), float(lr_t), float(beta1),
        float(beta2), float(epsilon), int(use_nesterov), buf, buf + size, buf + 2 * size),
        "ApplyAdam")
    return [out[i * size:(i + 1) * size].reshape(var.shape) for i in range(3)]
