"""A group of float32 elementwise ops as one native pass (kernels_c/elementwise_program.h).

A bound plan (``client/elementwise_groups.py``) hands a group of elementwise steps to a
:class:`Program`: each op becomes one instruction running the very C loop the op's own native
kernel runs (``mg_sigmoid``, ``mg_broadcast``'s ``mul``, ...), so every value is bit for bit
the op's, while the group reads its inputs and writes its outputs once, its intermediates
staying in a block on the stack, and pays one Python call instead of one per op (an LSTM
cell's gates: nine ops on 2 x 128 floats, each ~2 us of call overhead).

The ops a program takes (:func:`instruction`): the activations with a native loop (Relu,
Relu6, Sigmoid, Tanh, Elu, Selu, Softplus, Softsign, LeakyRelu), ReluGrad/Relu6Grad, the
native binary ops (Add, AddV2, Sub, Mul, Div, RealDiv, Maximum, Minimum, SquaredDifference),
a channels-last BiasAdd (its native kernel is ``add``), Erf and Erfc (exact GELU's), and the
float32 kernels of Neg, Abs, Square, Sqrt, Rsqrt and Reciprocal, which round each element's
exact value once.

Operands are tensors of the group's shape, single values, and broadcasts that repeat a row of
the last axis (or one value) along the axes before it: a bias, a squeeze-and-excitation
scale ``[N, 1, 1, C]``, a layer norm's ``[N, H, W, 1]`` statistics; a view (``Split``'s
columns) is copied first (the same values).
:meth:`Program.run` returns None when an input does not fit the program (the caller then
runs the ops one by one).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from minigraph.backends.native import fbuf, ffi, lib, num_threads
from minigraph.backends.registry import KernelDef
from minigraph.framework.graph import Operation

F32 = np.dtype(np.float32)

UNARY, GRAD, ARITH, MATH = 0, 1, 2, 3  # kernels_c/elementwise_program.h's MG_EW_* kinds
_UNARY_OPS = {"Relu": "relu", "Relu6": "relu6", "Sigmoid": "sigmoid", "Tanh": "tanh",
              "Elu": "elu", "Selu": "selu", "Softplus": "softplus", "Softsign": "softsign",
              "LeakyRelu": "leaky_relu"}
_GRAD_OPS = {"ReluGrad": "relu_grad", "Relu6Grad": "relu6_grad"}
_ARITH_OPS = {"Add": "add", "AddV2": "add", "Sub": "sub", "Mul": "mul", "Div": "div",
              "RealDiv": "div", "Maximum": "maximum", "Minimum": "minimum",
              "SquaredDifference": "squared_difference"}
# the native kernels of Erf and Erfc (mg_erf, mg_erfc) and the reference (numpy) kernels of
# these ops compute, in float32, each element's exact value rounded once (Sqrt through
# float64: rounding its double result again is exact, 53 >= 2 * 24 + 2; Rsqrt as 1 / sqrt in
# two float32 roundings), which the MG_EW_MATH loops compute alike
_NATIVE_MATH_OPS = {"Erf": "erf", "Erfc": "erfc"}
_REFERENCE_MATH_OPS = {"Neg": "neg", "Abs": "abs", "Square": "square", "Sqrt": "sqrt",
                       "Rsqrt": "rsqrt", "Reciprocal": "reciprocal"}
MAX_REGISTERS = 64  # MG_EW_MAX_REGS: inputs + instructions

MIN_ROW = 64  # the shortest last axis a program walks by rows (Program._layout)


@functools.cache
def _functions(kind: int) -> dict[str, int]:
    """The C functions of ``kind``: name -> index (by name: the C lists may grow anywhere)."""
    return {ffi.string(lib.mg_elementwise_fn_name(kind, i)).decode(): i
            for i in range(lib.mg_elementwise_fn_count(kind))}


def instruction(op: Operation, kernel: KernelDef) -> tuple[int, int, float] | None:
    """``(kind, function, alpha)`` of the instruction standing for ``op`` run by ``kernel``,
    or None when no instruction computes what that kernel computes (another backend's
    kernel, a BiasAdd on another axis than the last: TF's only other format is NCHW)."""
    if kernel.backend == "reference":  # (a native backend's fallback for these ops)
        name = _REFERENCE_MATH_OPS.get(op.type)
        return None if name is None else (MATH, _functions(MATH)[name], 0.0)
    if kernel.backend != "native":
        return None
    if op.type == "BiasAdd":  # channels-last: numpy's broadcasting of the bias row
        return (ARITH, _functions(ARITH)["add"], 0.0) if op.attrs["data_format"] == "NHWC" \
            else None
    if op.type in _NATIVE_MATH_OPS:
        return MATH, _functions(MATH)[_NATIVE_MATH_OPS[op.type]], 0.0
    for kind, table in ((UNARY, _UNARY_OPS), (GRAD, _GRAD_OPS), (ARITH, _ARITH_OPS)):
        name = table.get(op.type)
        if name is not None:
            alpha = float(op.attrs["alpha"]) if op.type == "LeakyRelu" else 0.0
            return kind, _functions(kind)[name], alpha
    return None


class Program:
    """Instructions over ``inputs`` registers and the results before them (see the C
    header): ``code`` holds ``(kind, function, a, b, alpha)`` per instruction; the outputs are
    registers ``outputs``, each of ``shape`` (float32). ``broadcastable[i]``: input i feeds
    only binary arithmetic, so it may be a scalar or one row for every row."""

    __slots__ = ("shape", "size", "inputs", "broadcastable", "_code", "_ncode", "_out_regs",
                 "_noutputs", "_plan")

    def __init__(self, inputs: int, code: Sequence[tuple[int, int, int, int, float]],
                 outputs: Sequence[int], shape: tuple[int, ...],
                 broadcastable: Sequence[bool]) -> None:
        if inputs + len(code) > MAX_REGISTERS:
            raise ValueError(f"elementwise program: {inputs} inputs and {len(code)} "
                             f"instructions exceed {MAX_REGISTERS} registers")
        self.shape, self.size, self.inputs = tuple(shape), math.prod(shape), inputs
        self.broadcastable = tuple(broadcastable)
        self._code = ffi.new("mg_ew_instruction[]", [
            {"kind": kind, "fn": fn, "a": a, "b": b, "alpha": alpha}
            for kind, fn, a, b, alpha in code])
        self._ncode = len(code)
        self._out_regs = ffi.new("int32_t[]", list(outputs))
        self._noutputs = len(outputs)
        self._plan: tuple | None = None  # (input shapes, their _layout)

    def _layout(self, values: Sequence) -> tuple[int, int, Any] | None:
        """``(rows, cols, mg_ew_operand[])`` (kernels_c/elementwise_program.h) for float32
        ``values`` of these shapes, or None when one does not fit: every input must broadcast
        to the program's shape as a row of the last axis (or one value) repeated along
        trailing axes before it. Inputs of the program's shape and single values run as one
        row of every element; others by rows of the last axis, at least ``MIN_ROW`` long
        (shorter rows would cost a C call per instruction per few elements)."""
        shape, size = self.shape, self.size
        layouts: list[tuple[int, int, bool]] = []
        flat = True
        for value, broadcastable in zip(values, self.broadcastable):
            if type(value) is not np.ndarray or value.dtype != F32:
                return None
            if value.shape == shape:
                layouts.append((1, size, False))
            elif not broadcastable:
                return None
            elif value.size == 1:
                layouts.append((1, 0, True))
            else:
                layout = _broadcast_rows(value.shape, shape)
                if layout is None:
                    return None
                layouts.append(layout)
                flat = False
        cols = size if flat else shape[-1]
        if not flat:
            if cols < MIN_ROW:
                return None
            layouts = [(1, cols, False) if pitch == size and not scalar
                       else (div, pitch, scalar) for div, pitch, scalar in layouts]
        operands = ffi.new("mg_ew_operand[]", [
            {"div": div, "pitch": pitch, "scalar": scalar} for div, pitch, scalar in layouts])
        return size // cols, cols, operands

    def run(self, values: Sequence) -> list[np.ndarray] | None:
        """The outputs for input arrays ``values`` (fresh C-contiguous arrays), or None when
        an input is not a float32 array of a shape the program takes. The layout of the
        last shapes is kept (a bound plan's signature fixes them: one tuple compare a run)."""
        shapes = tuple([value.shape if type(value) is np.ndarray else None
                        for value in values])
        plan = self._plan
        if plan is None or plan[0] != shapes:
            plan = self._plan = (shapes, self._layout(values))
        if plan[1] is None:
            return None
        rows, cols, layout = plan[1]
        for value in values:
            if value.dtype != F32:
                return None
        try:
            data = ffi.new("float *[]", [fbuf(value) for value in values])
        except (TypeError, ValueError, BufferError):  # a strided view: Split's columns
            data = None
        kept = values
        if data is None or not all(value.flags.aligned for value in values):
            kept = [np.ascontiguousarray(value) for value in values]
            data = ffi.new("float *[]", [fbuf(value) for value in kept])
        outputs = [np.empty(self.shape, F32) for _ in range(self._noutputs)]
        pointers = ffi.new("float *[]", [fbuf(o) for o in outputs])
        code = lib.mg_elementwise_program(rows, cols, self.inputs, layout, data, self._ncode,
                                          self._code, self._noutputs, self._out_regs,
                                          pointers, num_threads())
        del kept
        return outputs if code == lib.MG_OK else None

    def replay(self, values: Sequence[np.ndarray], outputs: Sequence[np.ndarray]
               ) -> Callable[[], bool] | None:
        """A function of no arguments running the program on the arrays ``values`` into
        ``outputs`` (fixed arrays: a replayed loop body's, ``client/replay.py``) that returns
        whether C ran it; None when they do not fit (as :meth:`run`, and every array must be
        C-contiguous and aligned, every output of the program's shape)."""
        if not all(type(v) is np.ndarray and v.flags.c_contiguous and v.flags.aligned
                   for v in (*values, *outputs)):
            return None
        layout = self._layout(values)
        if (layout is None or len(outputs) != self._noutputs
                or any(o.shape != self.shape or o.dtype != F32 or not o.flags.writeable
                       for o in outputs)):
            return None
        rows, cols, operands = layout
        data = ffi.new("float *[]", [fbuf(value) for value in values])
        pointers = ffi.new("float *[]", [fbuf(o) for o in outputs])
        args = (rows, cols, self.inputs, operands, data, self._ncode, self._code,
                self._noutputs, self._out_regs, pointers, num_threads())
        run, ok = lib.mg_elementwise_program, lib.MG_OK

        def replayed() -> bool:
            return run(*args) == ok

        replayed.keep = (values, outputs, data, pointers)  # what the pointers point into
        return replayed


def _broadcast_rows(value_shape: tuple[int, ...], shape: tuple[int, ...]
                    ) -> tuple[int, int, bool] | None:
    """``(div, pitch, scalar)`` of an input of ``value_shape`` broadcast to ``shape`` walked
    by rows of its last axis: it must match ``shape`` on some leading axes, be 1 on the axes
    after them (but the last), and be ``shape[-1]`` long or 1 (one value a row) on the last.
    None otherwise (a broadcast along a middle axis only)."""
    rank = len(shape)
    if len(value_shape) > rank or not rank:
        return None
    padded = (1,) * (rank - len(value_shape)) + tuple(value_shape)
    last = padded[-1]
    if last not in (1, shape[-1]):
        return None
    k = 0
    while k < rank - 1 and padded[k] == shape[k]:
        k += 1
    if any(padded[d] != 1 for d in range(k, rank - 1)):
        return None
    scalar = last != shape[-1]
    return math.prod(shape[k:rank - 1]), 0 if k == 0 else last, scalar
