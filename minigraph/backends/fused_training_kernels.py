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

import itertools
import math
import operator
import sys
from functools import lru_cache, partial
from typing import Any, NamedTuple

import numpy as np

from minigraph.backends import native, pooling_kernels, training_kernels
from minigraph.backends.activation_kernels import c_relu, c_relu_grad, relu, relu_grad
from minigraph.backends.batch_norm_kernels import (
    batch_norm_forward,
    bn_inference_replay,
    fused_batch_norm_grad,
)
from minigraph.backends.math_kernels import add_n, c_add_n, c_broadcast
from minigraph.backends.registry import KernelContext, find_kernel, register_kernel, set_replay
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


def _add_n(a: np.ndarray, b: np.ndarray, on_native: bool) -> np.ndarray:
    """AddN's kernel of (a, b) on this backend."""
    return c_add_n([a, b]) if on_native else add_n(None, [a, b], None)[0]


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


def _ex_replay(op: Operation, values: list, outputs: list, ctx: KernelContext):
    """``fused_batch_norm_ex_native`` in inference on fixed arrays (``bn_inference_replay``
    with the side input and the activation)."""
    side, relu_on = _ex_attrs(op, values, 5)
    if side is not None and not native.plain_f32(side):
        return None
    return bn_inference_replay(op, values, outputs, ctx, (side, relu_on))


set_replay(fused_batch_norm_ex_native, _ex_replay)


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
    return _grad_ex_outputs(*native.bn_backward_training_ex(
        f32(dy), f32(x), f32(scale), f32(mean), f32(variance), f32(y), attrs["epsilon"],
        channels_last(attrs["data_format"]), side_backprop=bool(attrs["num_side_inputs"]),
        out=out))


def _grad_ex_outputs(dx: np.ndarray, scale_backprop: np.ndarray,
                     offset_backprop: np.ndarray, side: np.ndarray | None) -> list[np.ndarray]:
    """The gradient ops' outputs: the C results, two empty reserves, the side gradient."""
    empty = np.zeros(0, np.float32)
    outputs = [dx, scale_backprop, offset_backprop, empty, empty.copy()]
    return outputs + ([side] if side is not None else [])


# --------------------------------------------------------------- _FusedAddBatchNormGradEx


@register_kernel("_FusedAddBatchNormGradEx")
def fused_add_batch_norm_grad_ex(op: Operation, inputs: list[np.ndarray], ctx: KernelContext
                                 ) -> list[np.ndarray]:
    """AddN(y_backprop, y_backprop_addend)'s kernel, then _FusedBatchNormGradEx's."""
    on_native = _on_native(ctx, inputs[1])
    total = _add_n(inputs[0], inputs[8], on_native)
    return _grad_ex_chain(op, [total, *inputs[1:8]], ctx, on_native)


@register_kernel("_FusedAddBatchNormGradEx", **NATIVE, out=True)
def fused_add_batch_norm_grad_ex_native(op: Operation, inputs: list[np.ndarray],
                                        ctx: KernelContext, out: np.ndarray | None = None
                                        ) -> list[np.ndarray]:
    """Training with Relu: one C call whose sums pass reads both gradients, adds them as
    AddN does and stores the masked sum for the apply pass (``mg_bn_backward_training_ex_add``:
    AddN's pass over memory saved; x_backprop in ``out`` where it fits). Otherwise, or where a
    channel needs the exceptional recomputation (C then writes nothing: ``None`` below), the
    native AddN and then _FusedBatchNormGradEx's kernel."""
    attrs = op.attrs
    dy, x, scale, mean, variance, _reserve_3, _offset, y, addend = inputs
    if attrs["is_training"] and attrs["activation_mode"] == "Relu" and x.size:
        f32 = native.as_f32
        result = native.bn_backward_training_ex(
            f32(dy), f32(x), f32(scale), f32(mean), f32(variance), f32(y), attrs["epsilon"],
            channels_last(attrs["data_format"]), side_backprop=bool(attrs["num_side_inputs"]),
            out=out, addend=f32(addend))
        if result is not None:
            return _grad_ex_outputs(*result)
    total = _add_n(dy, addend, True)
    return fused_batch_norm_grad_ex_native(op, [total, *inputs[1:8]], ctx, out=out)


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


@register_kernel("_FusedAssign")
def fused_assign(op: Operation, inputs: list, ctx: KernelContext) -> list[np.ndarray]:
    """Each ``Assign``'s kernel in order (its value, in the variable's dtype, copied into
    the state), under one hold of the state's lock."""
    count = op.attrs["N"]
    dtype = op.attrs["T"].np_dtype
    state = ctx.state
    with state.lock:
        return [state.write(ref.op.name, value.astype(dtype, copy=False))
                for ref, value in zip(op.inputs[:count], inputs[count:])]


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


class _Layout(NamedTuple):
    """What a fused update's native kernel reads of its op, the same at every step: the C
    kind, the variables' names per state row (var, then accum or m, v), the positions of
    its per-variable inputs and the Nesterov flag."""

    kind: int
    rows: tuple[tuple[str, ...], ...]
    columns: dict[str, int]
    count: int
    nesterov: bool


@lru_cache(maxsize=1024)
def _layout(op: Operation) -> _Layout:
    name = op.type[len("_Fused"):]
    _, kind, state_names = _UPDATES[name]
    count = op.attrs["N"]
    columns = {arg.name: i * count
               for i, arg in enumerate(FUSED_UPDATE_SINGLE[op.type].inputs)}
    rows = tuple(tuple(op.inputs[columns[state] + k].op.name for k in range(count))
                 for state in state_names)
    return _Layout(getattr(native.lib, kind), rows, columns, count,
                   bool(op.attrs.get("use_nesterov", False)))


class _Slab:
    """Memory a fused update writes the variables' new values into, one float32 block per
    state row, and the read-only views of it the session state stores as their values.

    A step writes into a slab only while nothing but the slab holds it or any of its views
    (:meth:`free`: reference counts back at what they were when it was made): a value a
    Run returned, a view of one, a reader's register or the state itself (the values of
    the step before) all veto it, and the update then makes a new slab. The values stored
    are therefore never written again while anyone can see them: the state's values stay
    snapshots. Views are plain read-only arrays of a writeable base, so the packed-filter
    cache (``gemm.frozen_cached``), which keeps only arrays that can never change, passes
    them by."""

    def __init__(self, shapes: tuple[tuple[int, ...], ...], rows: int) -> None:
        sizes = [math.prod(shape) for shape in shapes]
        starts = [0, *itertools.accumulate(sizes)]
        self.shapes = shapes
        self.blocks = [np.empty(starts[-1], np.float32) for _ in range(rows)]
        self.views = [_read_only_parts(block, starts, shapes) for block in self.blocks]
        ffi = native.ffi
        self.pointers = [ffi.new("float *[]", [ffi.cast("float *", native.fbuf(block)) + a
                                               for a in starts[:-1]])
                         for block in self.blocks]
        self.counts = ffi.new("int64_t[]", sizes)
        self._all = [*self.blocks, *(view for row in self.views for view in row)]
        self._unheld = self._counts()

    def _counts(self) -> list[int]:
        return list(map(sys.getrefcount, self._all))

    def free(self) -> bool:
        """Whether nothing but this slab holds its memory (see the class docstring)."""
        return self._counts() == self._unheld

    def holds(self, row: int, values: list) -> bool:
        """Whether ``values`` are this slab's views of state row ``row``."""
        return all(map(operator.is_, values, self.views[row]))


def _read_only_parts(block: np.ndarray, starts: list[int], shapes: tuple) -> list[np.ndarray]:
    """Read-only views of ``block``'s parts [starts[k], starts[k + 1]) in ``shapes``."""
    views = [block[a:b].reshape(shape) for a, b, shape in zip(starts, starts[1:], shapes)]
    for view in views:
        view.flags.writeable = False
    return views


def _slab_for(state: Any, key: tuple, shapes: tuple, rows: int) -> _Slab:
    """A free slab for the next values of the variables ``key`` (their names per state row)
    kept in ``state.buffers``: one of the two kept there (the other one usually holds the
    current values) when free, else a new one."""
    kept = state.buffers.get(key)
    if kept is not None and kept[0].shapes == shapes:
        for slab in kept:
            if slab.free():
                state.buffers[key] = (slab, kept[0]) if slab is not kept[0] else kept
                return slab
        older = kept[0]
    else:
        older = None
    slab = _Slab(shapes, rows)
    state.buffers[key] = (slab,) if older is None else (slab, older)
    return slab


def _sources(state: Any, op: Operation, layout: _Layout, shapes: tuple, kept: tuple) -> list:
    """The C pointer arrays of the variables' current values, one per state row: a kept
    slab's where the values are its views (the usual step: nothing to check again), else
    made from the values, checked to be float32 of the gradients' ``shapes``."""
    variables = state.variables
    sources = []
    for index, names in enumerate(layout.rows):
        row = [variables.get(name) for name in names]
        for slab in kept:
            if slab.shapes == shapes and slab.holds(index, row):
                sources.append(slab.pointers[index])
                break
        else:
            row = [native.as_f32(state.read(name)) for name in names]  # names a missing one
            for k, value in enumerate(row):
                if value.shape != shapes[k]:
                    _check_shapes(op, state, layout, shapes)
            sources.append(native.ffi.new("float *[]", [native.fbuf(a) for a in row]))
    return sources


def _adam_rates(lrs: list, beta1_powers: list, beta2_powers: list) -> list:
    """Each variable's lr_t = lr * sqrt(1 - beta2_power) / (1 - beta1_power), the single
    kernel's expression, computed once per distinct triple of input arrays (an optimizer's
    variables share one learning rate and one pair of powers)."""
    rates: dict = {}
    with np.errstate(all="ignore"):
        for triple in zip(lrs, beta1_powers, beta2_powers):
            key = tuple(map(id, triple))  # the arrays live through this call: ids are theirs
            if key not in rates:
                lr, b1, b2 = triple
                rates[key] = lr * np.sqrt(1 - b2) / (1 - b1)
    return [rates[tuple(map(id, triple))]
            for triple in zip(lrs, beta1_powers, beta2_powers)]


def _check_shapes(op: Operation, state: Any, layout: _Layout, shapes: tuple) -> None:
    """The shape error of the first variable whose value, state or gradient differs from
    its value's shape."""
    state_names = _UPDATES[op.type[len("_Fused"):]][2]
    for k, shape in enumerate(shapes):
        values = [state.read(row[k]) for row in layout.rows]
        native.check_same_shape(op.type, values[0], grad=np.empty(shape),
                                **dict(zip(state_names, values)))


@register_kernel("_FusedApplyGradientDescent", "_FusedApplyMomentum", "_FusedApplyAdam",
                 **NATIVE)
def fused_apply_native(op: Operation, inputs: list, ctx: KernelContext) -> list[np.ndarray]:
    """Every variable in one C call (``mg_apply_update_list``), each by the single op's
    float32 formula with its own scalars: the single kernels' bits. The new values are
    written into a :class:`_Slab` the session state keeps (two of them take turns: no
    allocation per step) and stored as the variables' values without a copy."""
    layout = _layout(op)
    count, columns = layout.count, layout.columns

    def arg(arg_name: str) -> list:
        start = columns[arg_name]
        return inputs[start:start + count]

    if op.type == "_FusedApplyGradientDescent":
        lr, grad, c1 = arg("alpha"), arg("delta"), None
        c2 = epsilon = None
    elif op.type == "_FusedApplyMomentum":
        lr, grad, c1 = arg("lr"), arg("grad"), arg("momentum")
        c2 = epsilon = None
    else:
        lr = _adam_rates(arg("lr"), arg("beta1_power"), arg("beta2_power"))
        grad, c1, c2, epsilon = arg("grad"), arg("beta1"), arg("beta2"), arg("epsilon")
    grad = [g if native.plain_f32(g) else native.as_f32(g) for g in grad]
    shapes = tuple([g.shape for g in grad])
    state = ctx.state
    with state.lock:
        kept = state.buffers.get(layout.rows, ())
        sources = _sources(state, op, layout, shapes, kept)
        slab = _slab_for(state, layout.rows, shapes, len(sources))
        c_update_list(layout.kind, sources, grad, slab, lr, c1, c2, epsilon, layout.nesterov)
        variables = state.variables
        for names, views in zip(layout.rows, slab.views):
            variables.update(zip(names, views))
        return list(slab.views[0])


def c_update_list(kind: int, sources: list, grad: list[np.ndarray], slab: _Slab,
                  lr, c1, c2, epsilon, nesterov: bool) -> None:
    """``mg_apply_update_list`` from ``sources[i]``, the pointer array of state i (var,
    then accum or m, v) of each variable k, and C-contiguous float32 ``grad[k]`` into the
    ``slab`` of their shapes (the caller checks them and holds the arrays); scalars one
    per variable, as float32."""
    ffi, lib = native.ffi, native.lib

    def scalars(values):
        return ffi.NULL if values is None else ffi.new("float[]", values)

    rows = [*sources, *[ffi.NULL] * (3 - len(sources))]
    outs = [*slab.pointers, *[ffi.NULL] * (3 - len(sources))]
    grads = ffi.new("float *[]", [native.fbuf(g) for g in grad])
    native.check_code(lib.mg_apply_update_list(
        kind, len(grad), slab.counts, rows[0], rows[1], rows[2], grads, outs[0], outs[1],
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
