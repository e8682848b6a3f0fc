"""A group of float32 elementwise ops as one native pass (kernels_c/elementwise_program.h).

A bound plan (``client/elementwise_groups.py``) hands a group of elementwise steps to a
:class:`Program`: each op becomes one instruction running the very C loop the op's own native
kernel runs (``mg_sigmoid``, ``mg_broadcast``'s ``mul``, ...), so every value is bit for bit
the op's, while the group reads its inputs and writes its outputs once, its intermediates
staying in a block on the stack, and pays one Python call instead of one per op (an LSTM
cell's gates: nine ops on 2 x 128 floats, each ~2 us of call overhead).

The ops a program takes (:func:`instruction`): the activations with a native loop (Relu,
Relu6, Sigmoid, Tanh, Elu, Selu, Softplus, Softsign, LeakyRelu), ReluGrad/Relu6Grad, the
native binary ops (Add, AddV2, Sub, Mul, Div, RealDiv, Maximum, Minimum, SquaredDifference)
and a channels-last BiasAdd (numpy's float32 add: the same single rounding as ``add``).

Operands are tensors of the group's shape, scalars, or one row repeated for every row (a
bias); a view (``Split``'s columns) is copied first (the same values).
:meth:`Program.run` returns None when an input does not fit the program (the caller then
runs the ops one by one).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from minigraph.backends import nn_kernels
from minigraph.backends.native import fbuf, ffi, lib, num_threads
from minigraph.backends.registry import KernelDef
from minigraph.framework.graph import Operation

F32 = np.dtype(np.float32)

UNARY, GRAD, ARITH = 0, 1, 2  # kernels_c/elementwise_program.h's MG_EW_* kinds
_UNARY_OPS = {"Relu": "relu", "Relu6": "relu6", "Sigmoid": "sigmoid", "Tanh": "tanh",
              "Elu": "elu", "Selu": "selu", "Softplus": "softplus", "Softsign": "softsign",
              "LeakyRelu": "leaky_relu"}
_GRAD_OPS = {"ReluGrad": "relu_grad", "Relu6Grad": "relu6_grad"}
_ARITH_OPS = {"Add": "add", "AddV2": "add", "Sub": "sub", "Mul": "mul", "Div": "div",
              "RealDiv": "div", "Maximum": "maximum", "Minimum": "minimum",
              "SquaredDifference": "squared_difference"}
MAX_REGISTERS = 64  # MG_EW_MAX_REGS: inputs + instructions

# how each input of a program comes (Program.run): a tensor of the program's shape, one
# value for every element, one row (of the last axis) for every row
_WHOLE, _SCALAR, _ROW = 0, 1, 2


@functools.cache
def _functions(kind: int) -> dict[str, int]:
    """The C functions of ``kind``: name -> index (by name: the C lists may grow anywhere)."""
    return {ffi.string(lib.mg_elementwise_fn_name(kind, i)).decode(): i
            for i in range(lib.mg_elementwise_fn_count(kind))}


def instruction(op: Operation, kernel: KernelDef) -> tuple[int, int, float] | None:
    """``(kind, function, alpha)`` of the instruction standing for ``op`` run by ``kernel``,
    or None when no instruction computes what that kernel computes (another backend's
    kernel, a BiasAdd on another axis than the last)."""
    if kernel.backend == "native":
        for kind, table in ((UNARY, _UNARY_OPS), (GRAD, _GRAD_OPS), (ARITH, _ARITH_OPS)):
            name = table.get(op.type)
            if name is not None:
                alpha = float(op.attrs["alpha"]) if op.type == "LeakyRelu" else 0.0
                return kind, _functions(kind)[name], alpha
        return None
    if (op.type == "BiasAdd" and kernel.kernel is nn_kernels.bias_add
            and op.attrs["data_format"] in ("NHWC", "NDHWC")):
        return ARITH, _functions(ARITH)["add"], 0.0
    return None


class Program:
    """Instructions over ``inputs`` registers and the results before them (see the C
    header): ``code`` holds ``(kind, function, a, b, alpha)`` per instruction; the outputs are
    registers ``outputs``, each of ``shape`` (float32). ``broadcastable[i]``: input i feeds
    only binary arithmetic, so it may be a scalar or one row for every row."""

    __slots__ = ("shape", "size", "inputs", "broadcastable", "_code", "_ncode", "_out_regs",
                 "_noutputs")

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

    def _layout(self, values: Sequence) -> list[int] | None:
        """How each input comes (``_WHOLE``, ``_SCALAR``, ``_ROW``), or None when one does
        not fit."""
        shape = self.shape
        kinds = []
        for value, broadcastable in zip(values, self.broadcastable):
            if type(value) is not np.ndarray or value.dtype != F32:
                return None
            if value.shape == shape:
                kinds.append(_WHOLE)
            elif broadcastable and value.size == 1:
                kinds.append(_SCALAR)
            elif (broadcastable and shape and value.size == shape[-1]
                  and value.ndim <= len(shape) and value.shape[-1] == shape[-1]):
                kinds.append(_ROW)
            else:
                return None
        return kinds

    def run(self, values: Sequence) -> list[np.ndarray] | None:
        """The outputs for input arrays ``values`` (fresh C-contiguous arrays), or None when
        an input is not a float32 array of a shape the program takes."""
        kinds = self._layout(values)
        if kinds is None:
            return None
        cols = self.shape[-1] if _ROW in kinds else self.size
        rows = self.size // cols if cols else 0
        operands = ffi.new("mg_ew_operand[]", len(kinds))
        kept = []  # what C reads: alive through the call
        for operand, value, kind in zip(operands, values, kinds):
            flags = value.flags
            if not (flags.c_contiguous and flags.aligned):  # a view: Split's columns
                value = np.ascontiguousarray(value)
            data = fbuf(value)
            kept.append(data)
            operand.data = data
            operand.pitch = cols if kind == _WHOLE else 0
            operand.scalar = kind == _SCALAR
        outputs = [np.empty(self.shape, F32) for _ in range(self._noutputs)]
        pointers = ffi.new("float *[]", [fbuf(o) for o in outputs])
        code = lib.mg_elementwise_program(rows, cols, len(kinds), operands, self._ncode,
                                          self._code, self._noutputs, self._out_regs,
                                          pointers, num_threads())
        return outputs if code == lib.MG_OK else None
