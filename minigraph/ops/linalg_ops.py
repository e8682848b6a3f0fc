"""Batched matrix products: ``BatchMatMul``, ``BatchMatMulV2`` (batch dims broadcast),
``BatchMatMulV3`` and ``Einsum`` (TF's names, inputs, outputs and attrs,
``core/ops/math_ops.cc``, ``linalg_ops.cc``). What Keras' ``MultiHeadAttention`` and
``EinsumDense`` freeze to. Also ``MatrixBandPart`` (``tf.linalg.band_part``: the causal
masks of attention layers), which keeps a band of diagonals of each inner matrix and zeroes
the rest, and the diagonal ops of ``tf.linalg.diag`` / ``diag_part`` / ``set_diag``:
``MatrixDiagV3``, ``MatrixDiagPartV3``, ``MatrixSetDiagV3``. Diagonal d holds the entries
(m, m + d); ``k`` picks one diagonal or a band ``[k0, k1]``, stored top row first (d = k1
down to k0), each row as long as the longest, a shorter one aligned left or right by
``align`` (``RIGHT_LEFT``: superdiagonals to the right, subdiagonals to the left) and
padded with ``padding_value``.

``Einsum`` takes the equations Keras emits and more: one or two operands, letters as labels,
each label at most once per operand and in the output. It is lowered, at run time, to
transposes and reshapes around one batched matmul (``backends/linalg_kernels.py``): labels in
both operands and the output are batch dims, in both operands only are contracted, in one
operand and the output are that operand's free dims, in one operand only are summed first.
Diagonals (a label twice in one operand), ellipses and more than two operands are refused
with an ``InvalidArgumentError`` naming the op and the equation. The gradients are at the
bottom.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from minigraph.framework import dtypes
from minigraph.framework.gradient_registry import RegisterGradient
from minigraph.framework.graph import Output
from minigraph.framework.op_def import (
    ArgDef,
    AttrDef,
    InferenceContext,
    OpDef,
    build_variadic_operation,
    make_wrapper,
    register_op,
    required,
)
from minigraph.framework.scope import Scope
from minigraph.framework.tensor_shape import ShapeMismatch, TensorShape, dims_text
from minigraph.ops import math_ops as m
from minigraph.ops.layout_ops import ExpandDims
from minigraph.ops.window import mismatch

# The wrappers minigraph.ops exports.
__all__ = ["BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "Einsum", "MatrixBandPart",
           "MatrixDiagPartV3", "MatrixDiagV3", "MatrixSetDiagV3"]

# TF's allowed T restricted to minigraph's dtypes
MATMUL_TYPES = dtypes.NUMBERS

# ----------------------------------------------------------------------------- BatchMatMul


def _matrix_attrs() -> list[AttrDef]:
    return [AttrDef("adj_x", "bool", default=False, doc="Use the adjoint (transpose) of x."),
            AttrDef("adj_y", "bool", default=False, doc="Use the adjoint (transpose) of y."),
            AttrDef("grad_x", "bool", default=False, doc="A hint TF's gradient sets; unused."),
            AttrDef("grad_y", "bool", default=False, doc="A hint TF's gradient sets; unused.")]


def batch_matmul_shapes(ctx: InferenceContext, broadcast: bool) -> list[TensorShape]:
    """[..., m, k] x [..., k, n] -> [..., m, n] (each operand's last two dims swapped first
    if its adj attr says so); the batch dims broadcast (V2, V3) or must be equal (V1)."""
    x, y = ctx.input_shape("x"), ctx.input_shape("y")
    for index, (name, shape) in enumerate((("x", x), ("y", y))):
        if shape.rank is not None and shape.rank < 2:
            raise ctx.error(f"In[{index}] ndims must be >= 2: {shape.rank} (input '{name}' has "
                            f"shape {shape})")
    if x.rank is None or y.rank is None:
        return [TensorShape(None)]
    adj_x, adj_y = ctx.attrs["adj_x"], ctx.attrs["adj_y"]
    m_, kx = (x[-1], x[-2]) if adj_x else (x[-2], x[-1])
    ky, n = (y[-1], y[-2]) if adj_y else (y[-2], y[-1])
    if mismatch(kx, ky):
        raise ctx.error(f"Matrix size-incompatible: In[0]: {dims_text(x)}, In[1]: "
                        f"{dims_text(y)}: the inner dimensions must be equal, but 'x' gives "
                        f"{kx}{' (adj_x)' if adj_x else ''} and 'y' gives {ky}"
                        f"{' (adj_y)' if adj_y else ''}")
    x_batch, y_batch = TensorShape(x.dims[:-2]), TensorShape(y.dims[:-2])
    if broadcast:
        try:
            batch = m.broadcast_shapes(x_batch, y_batch)
        except ShapeMismatch:
            raise ctx.error(f"In[0] and In[1] must have compatible batch dimensions: "
                            f"{dims_text(x)} vs. {dims_text(y)} (inputs 'x' and 'y')") from None
    else:
        if x.rank != y.rank:
            raise ctx.error(f"In[0] and In[1] has different ndims: {dims_text(x)} vs. "
                            f"{dims_text(y)} (inputs 'x' and 'y')")
        dims = []
        for i, (a, b) in enumerate(zip(x_batch.dims, y_batch.dims)):
            if mismatch(a, b):
                raise ctx.error(f"In[0].dim({i}) and In[1].dim({i}) must be the same: "
                                f"{dims_text(x)} vs {dims_text(y)} (inputs 'x' and 'y')")
            dims.append(a if a is not None else b)
        batch = TensorShape(dims)
    return [TensorShape([*batch.dims, m_, n])]


def _v3_shape(ctx: InferenceContext) -> list[TensorShape]:
    types = [ctx.attrs[name] for name in ("Ta", "Tb", "Tout")]
    if len(set(types)) != 1:
        raise ctx.error(f"attrs 'Ta', 'Tb' and 'Tout' must be one type (TF's CPU kernels "
                        f"have no mixed ones), got {', '.join(t.name for t in types)}")
    return batch_matmul_shapes(ctx, broadcast=True)


def _batch_matmul_def(name: str, broadcast: bool) -> OpDef:
    return register_op(OpDef(
        name=name,
        inputs=[ArgDef("x", type_attr="T", doc="[..., m, k] (or [..., k, m] with adj_x)."),
                ArgDef("y", type_attr="T", doc="[..., k, n] (or [..., n, k] with adj_y).")],
        outputs=[ArgDef("output", type_attr="T")],
        attrs=[required("T", "type", allowed=MATMUL_TYPES), *_matrix_attrs()],
        shape_fn=lambda ctx: batch_matmul_shapes(ctx, broadcast),
    ))


BatchMatMul = make_wrapper(_batch_matmul_def("BatchMatMul", broadcast=False))
BatchMatMulV2 = make_wrapper(_batch_matmul_def("BatchMatMulV2", broadcast=True))
BatchMatMulV3 = make_wrapper(register_op(OpDef(
    name="BatchMatMulV3",
    inputs=[ArgDef("x", type_attr="Ta", doc="[..., m, k] (or [..., k, m] with adj_x)."),
            ArgDef("y", type_attr="Tb", doc="[..., k, n] (or [..., n, k] with adj_y).")],
    outputs=[ArgDef("output", type_attr="Tout")],
    attrs=[required("Ta", "type", allowed=MATMUL_TYPES),
           required("Tb", "type", allowed=MATMUL_TYPES),
           required("Tout", "type", allowed=MATMUL_TYPES, doc="The output type (= Ta = Tb)."),
           *_matrix_attrs()],
    shape_fn=_v3_shape,
)))

# ----------------------------------------------------------------------------- Einsum


@dataclass(frozen=True)
class EinsumPlan:
    """A parsed equation and its lowering: the subscripts of each operand and the output,
    and each label's role (see the module docstring)."""

    inputs: tuple[str, ...]
    output: str
    batch: str      # in every operand and the output, in output order
    contract: str   # in both operands, not the output, in the first operand's order
    free: tuple[str, ...]    # per operand: in it and the output only, in its order
    summed: tuple[str, ...]  # per operand: only in it, summed first

    def kept(self, index: int) -> str:
        """Operand ``index``'s subscripts without the labels summed away first."""
        return "".join(c for c in self.inputs[index] if c not in self.summed[index])


def parse_einsum(equation: str, count: int) -> EinsumPlan:
    """The plan of ``equation`` for ``count`` operands; raises ValueError saying what is
    wrong (the caller adds the op and node)."""
    if not isinstance(equation, str) or equation.count("->") != 1:
        raise ValueError(f"Expecting exactly one '->' in einsum equation: {equation}")
    left, output = equation.replace(" ", "").split("->")
    inputs = tuple(left.split(","))
    if len(inputs) not in (1, 2):
        raise ValueError(f"Expecting 1 or 2 input subscripts in equation '{equation}' but "
                         f"got: {len(inputs)}")
    if len(inputs) != count:
        raise ValueError(f"equation '{equation}' has {len(inputs)} input subscripts, but the "
                         f"op has {count} inputs (attr 'N')")
    places = [f"input {i}" for i in range(len(inputs))] + ["the output"]
    for where, subscripts in zip(places, [*inputs, output]):
        if "." in subscripts:
            raise ValueError(f"ellipsis ('...') in {where} of equation '{equation}' is not "
                             f"supported: name each dimension with a letter")
        bad = sorted({c for c in subscripts if not (c.isascii() and c.isalpha())})
        if bad:
            raise ValueError(f"invalid label(s) {bad} in {where} of equation '{equation}': "
                             f"labels are letters a-z, A-Z")
        repeated = sorted({c for c in subscripts if subscripts.count(c) > 1})
        if repeated:
            raise ValueError(f"label(s) {repeated} repeated in {where} of equation "
                             f"'{equation}': diagonals and repeated output labels are not "
                             f"supported")
    unknown = sorted(set(output) - set("".join(inputs)))
    if unknown:
        raise ValueError(f"output label(s) {unknown} of equation '{equation}' appear in no "
                         f"input")
    both = set(inputs[0]) & set(inputs[-1]) if len(inputs) == 2 else set()
    others = [set(inputs[1]), set(inputs[0])] if len(inputs) == 2 else [set()]
    return EinsumPlan(
        inputs=inputs, output=output,
        batch="".join(c for c in output if c in both),
        contract="".join(c for c in inputs[0] if c in both and c not in output),
        free=tuple("".join(c for c in s if c in output and c not in o)
                   for s, o in zip(inputs, others)),
        summed=tuple("".join(c for c in s if c not in output and c not in o)
                      for s, o in zip(inputs, others)))


def label_sizes(plan: EinsumPlan, shapes, fail) -> dict[str, int | None]:
    """Each label's size from the operands' shapes (None while unknown); ``fail(message)``
    makes the error for a rank or size that disagrees (TF's words)."""
    sizes: dict[str, int | None] = {}
    where: dict[str, tuple] = {}
    for index, (subscripts, shape) in enumerate(zip(plan.inputs, shapes)):
        if shape.rank is None:
            continue
        if shape.rank != len(subscripts):
            raise fail(f"Expected input {index} to have rank {len(subscripts)} but got: "
                       f"{shape.rank} (inputs[{index}] has shape {shape}, subscripts "
                       f"'{subscripts}')")
        for axis, (label, dim) in enumerate(zip(subscripts, shape.dims)):
            known = sizes.get(label)
            if mismatch(known, dim):
                first_index, first_shape = where[label]
                raise fail(f"Expected dimension {known} at axis {axis} of the input shaped "
                           f"{dims_text(shape)} but got dimension {dim} (label '{label}' is "
                           f"{known} in inputs[{first_index}] {dims_text(first_shape)} and "
                           f"{dim} in inputs[{index}])")
            if known is None:
                sizes[label] = dim
                where[label] = (index, shape)
    return sizes


def einsum_plan(equation: str, count: int, fail) -> EinsumPlan:
    """:func:`parse_einsum`, its complaint raised as ``fail(message)`` (naming the node)."""
    try:
        return parse_einsum(equation, count)
    except ValueError as error:
        raise fail(str(error)) from None


def _einsum_shape(ctx: InferenceContext) -> list[TensorShape]:
    plan = einsum_plan(ctx.attrs["equation"], len(ctx.input_shapes), ctx.error)
    sizes = label_sizes(plan, ctx.input_shapes, ctx.error)
    return [TensorShape([sizes.get(c) for c in plan.output])]


EINSUM = register_op(OpDef(
    name="Einsum",
    inputs=[ArgDef("inputs", type_attr="T", number_attr="N",
                   doc="One or two tensors, one per input subscript of the equation.")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=[required("equation", "string",
                    doc="'<subscripts>,<subscripts>-><subscripts>': one letter per dimension."),
           required("N", "int", check=lambda n: None if n >= 1 else f"must be >= 1, got {n}"),
           required("T", "type", allowed=MATMUL_TYPES)],
    shape_fn=_einsum_shape,
))


def Einsum(scope: Scope, inputs: list, equation: str, **attrs: Any) -> Output:
    """The tensor contraction ``equation`` names (tf.einsum), e.g. ``"abc,cd->abd"``."""
    return build_variadic_operation(scope, EINSUM, list(inputs),
                                    {"equation": equation, **attrs}).outputs[0]


# ----------------------------------------------------------------------------- MatrixBandPart


def _band_part_shape(ctx: InferenceContext) -> list[TensorShape]:
    """At least a matrix; each bound a scalar, negative (the whole triangle) or at most the
    rows (num_lower) or columns (num_upper) of the inner matrices, as TF's kernel checks."""
    x = ctx.input_shape("input")
    if x.rank is not None and x.rank < 2:
        raise ctx.error(f"input must be at least 2-dim, received shape: {dims_text(x)} "
                        f"(input 'input')")
    for name, axis, what in (("num_lower", -2, "rows (M)"), ("num_upper", -1, "columns (N)")):
        shape = ctx.input_shape(name)
        if shape.rank not in (None, 0):
            raise ctx.error(f"{name} must be scalar, got shape {dims_text(shape)}")
        bound = ctx.constant_value(name)
        if bound is not None and x.rank is not None and x[axis] is not None and \
                int(bound) > x[axis]:
            raise ctx.error(f"{name} must be negative or less or equal to number of {what} "
                            f"({x[axis]}) got: {int(bound)}")
    return [x]


MatrixBandPart = make_wrapper(register_op(OpDef(
    name="MatrixBandPart",
    inputs=[ArgDef("input", type_attr="T", doc="At least a matrix: [..., M, N]."),
            ArgDef("num_lower", type_attr="Tindex",
                   doc="Subdiagonals kept (a scalar; negative: all of them)."),
            ArgDef("num_upper", type_attr="Tindex",
                   doc="Superdiagonals kept (a scalar; negative: all of them).")],
    outputs=[ArgDef("band", type_attr="T")],
    attrs=[required("T", "type"),
           AttrDef("Tindex", "type", default=dtypes.int64, allowed=dtypes.INTEGERS)],
    shape_fn=_band_part_shape,
)))


# ----------------------------------------------------------------------------- diagonals

ALIGNS = ("LEFT_RIGHT", "RIGHT_LEFT", "LEFT_LEFT", "RIGHT_RIGHT")


def diag_len(rows: int, cols: int, d: int) -> int:
    """The length of diagonal d of a rows x cols matrix."""
    return max(0, min(cols - max(d, 0), rows + min(d, 0)))


def diag_offset(align: str, d: int, longest: int, length: int) -> int:
    """Where diagonal d's entries start in its padded row: right-aligned ones after the
    padding (superdiagonals with RIGHT_*, subdiagonals with *_RIGHT; the main one either)."""
    right = (d >= 0 and align.startswith("RIGHT")) or (d <= 0 and align.endswith("RIGHT"))
    return longest - length if right else 0


def diag_band(ctx: InferenceContext, rows: int | None, cols: int | None
              ) -> tuple[int, int] | None:
    """The known (k0, k1) of input 'k', checked as TF's kernels do; None while unknown."""
    shape = ctx.input_shape("k")
    if shape.rank not in (None, 0, 1) or (shape.rank == 1 and shape[0] not in (None, 1, 2)):
        raise ctx.error(f"diag_index must be a scalar or vector with 1 or 2 elements, got "
                        f"shape {dims_text(shape)} (input 'k')")
    value = ctx.constant_value("k")
    if value is None:
        return None
    flat = np.ravel(value).tolist()
    low, high = (flat[0], flat[0]) if len(flat) == 1 else flat
    if low > high:
        raise ctx.error(f"lower_diag_index must not be larger than upper_diag_index: {low} > "
                        f"{high}")
    if rows is not None and cols is not None and rows * cols:
        if not -rows < low < cols:
            raise ctx.error(f"lower_diag_index is out of bound: {low}. It must be between "
                            f"{-rows} and {cols}")
        if not -rows < high < cols:
            raise ctx.error(f"upper_diag_index is out of bound: {high} It must be between "
                            f"{-rows} and {cols}")
    return low, high


def _diag_part_shape(ctx: InferenceContext) -> list[TensorShape]:
    x = ctx.input_shape("input")
    if x.rank is not None and x.rank < 2:
        raise ctx.error(f"input must be at least 2-dim, received shape: {dims_text(x)} "
                        f"(input 'input')")
    if ctx.input_shape("padding_value").rank not in (None, 0):
        raise ctx.error("padding_value must be a scalar (input 'padding_value')")
    rows, cols = (x[-2], x[-1]) if x.rank is not None else (None, None)
    band = diag_band(ctx, rows, cols)
    if x.rank is None or band is None:
        return [TensorShape(None)]
    low, high = band
    longest = None if None in (rows, cols) else min(rows + min(high, 0), cols - max(low, 0))
    tail = [longest] if low == high else [high - low + 1, longest]
    return [TensorShape([*x.dims[:-2], *tail])]


def _diag_inputs(ctx: InferenceContext, diagonal: TensorShape) -> tuple | None:
    """(batch dims, k0, k1, longest) of a diagonal input; None while k is unknown."""
    band = diag_band(ctx, None, None)
    if band is None or diagonal.rank is None:
        return None
    low, high = band
    need = 1 if low == high else 2
    if diagonal.rank < need:
        raise ctx.error(f"diagonal must be at least {need}-dim, got shape "
                        f"{dims_text(diagonal)} (input 'diagonal')")
    if need == 2 and diagonal[-2] is not None and diagonal[-2] != high - low + 1:
        raise ctx.error("The number of diagonals provided in the input does not match the "
                        "lower_diag_index and upper_diag_index range.")
    return list(diagonal.dims[:-need]), low, high, diagonal[-1]


def _diag_shape(ctx: InferenceContext) -> list[TensorShape]:
    for name in ("num_rows", "num_cols", "padding_value"):
        if ctx.input_shape(name).rank not in (None, 0):
            raise ctx.error(f"{name} must be a scalar (input '{name}')")
    parts = _diag_inputs(ctx, ctx.input_shape("diagonal"))
    if parts is None:
        return [TensorShape(None)]
    batch, low, high, longest = parts
    rows, cols = ctx.constant_value("num_rows"), ctx.constant_value("num_cols")
    if longest is None or rows is None or cols is None:
        return [TensorShape([*batch, None, None])]
    return [TensorShape([*batch, *diag_matrix_size(int(rows), int(cols), low, high, longest,
                                                   ctx.error)])]


def diag_matrix_size(rows: int, cols: int, low: int, high: int, longest: int, fail
                     ) -> tuple[int, int]:
    """MatrixDiagV3's output rows and columns: -1 infers the smallest that holds the
    diagonals (both -1: a square one), as TF does."""
    least_rows, least_cols = longest - min(high, 0), longest + max(low, 0)
    if rows == -1 and cols == -1:
        rows = cols = max(least_rows, least_cols)
    elif rows == -1:
        rows = least_rows
    elif cols == -1:
        cols = least_cols
    if rows < least_rows:
        raise fail("The number of rows is too small.")
    if cols < least_cols:
        raise fail("The number of columns is too small.")
    if rows != least_rows and cols != least_cols:
        raise fail("The number of rows or columns is not consistent with the specified "
                   "d_lower, d_upper, and diagonal.")
    return rows, cols


def _set_diag_shape(ctx: InferenceContext) -> list[TensorShape]:
    x = ctx.input_shape("input")
    if x.rank is not None and x.rank < 2:
        raise ctx.error(f"input must be at least 2-dim, received shape: {dims_text(x)} "
                        f"(input 'input')")
    rows, cols = (x[-2], x[-1]) if x.rank is not None else (None, None)
    diag_band(ctx, rows, cols)
    parts = _diag_inputs(ctx, ctx.input_shape("diagonal"))
    if parts is not None and x.rank is not None and None not in (rows, cols):
        _, low, high, _ = parts
        expected = [*x.dims[:-2]] + ([] if low == high else [high - low + 1]) + \
            [min(rows + min(high, 0), cols - max(low, 0))]
        got = ctx.input_shape("diagonal")
        if got.rank != len(expected) or any(mismatch(g, e) for g, e in zip(got.dims, expected)):
            raise ctx.error(f"Either first dimensions of diagonal don't match "
                            f"input.shape[:-2], or diagonal.shape[:-1] is not equal to the "
                            f"longests diagonal in range [lower_diag_index:upper_diag_index]."
                            f" Input shape: {dims_text(x)} Diagonal shape: {dims_text(got)}")
    return [x]


def _align_attr() -> AttrDef:
    return AttrDef("align", "string", default="RIGHT_LEFT", allowed=ALIGNS,
                   doc="How diagonals shorter than the longest sit in their padded rows.")


MatrixDiagPartV3 = make_wrapper(register_op(OpDef(
    name="MatrixDiagPartV3",
    inputs=[ArgDef("input", type_attr="T", doc="At least a matrix: [..., M, N]."),
            ArgDef("k", dtype=dtypes.int32, doc="A diagonal d, or a band [k0, k1]."),
            ArgDef("padding_value", type_attr="T", doc="Fills the short diagonals' rows.")],
    outputs=[ArgDef("diagonal", type_attr="T")],
    attrs=[required("T", "type"), _align_attr()],
    shape_fn=_diag_part_shape,
)))
MatrixDiagV3 = make_wrapper(register_op(OpDef(
    name="MatrixDiagV3",
    inputs=[ArgDef("diagonal", type_attr="T", doc="[..., max_len] or [..., bands, max_len]."),
            ArgDef("k", dtype=dtypes.int32, doc="A diagonal d, or a band [k0, k1]."),
            ArgDef("num_rows", dtype=dtypes.int32, doc="-1: the smallest that fits."),
            ArgDef("num_cols", dtype=dtypes.int32, doc="-1: the smallest that fits."),
            ArgDef("padding_value", type_attr="T", doc="Every entry off the diagonals.")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=[required("T", "type"), _align_attr()],
    shape_fn=_diag_shape,
)))
MatrixSetDiagV3 = make_wrapper(register_op(OpDef(
    name="MatrixSetDiagV3",
    inputs=[ArgDef("input", type_attr="T", doc="At least a matrix: [..., M, N]."),
            ArgDef("diagonal", type_attr="T", doc="As MatrixDiagPartV3 returns it."),
            ArgDef("k", dtype=dtypes.int32, doc="A diagonal d, or a band [k0, k1].")],
    outputs=[ArgDef("output", type_attr="T")],
    attrs=[required("T", "type"), _align_attr()],
    shape_fn=_set_diag_shape,
)))


# ----------------------------------------------------------------------------- gradients


def _adjoint_products(scope, x, y, g, adj_x, adj_y, product):
    """(dx, dy) of ``product(x, y, adj_x, adj_y)`` given its cotangent g (TF's four cases
    of _BatchMatMul grad), before any sum over broadcast batch dims."""
    if not adj_x and not adj_y:
        return product(g, y, False, True), product(x, g, True, False)
    if not adj_x and adj_y:
        return product(g, y, False, False), product(g, x, True, False)
    if adj_x and not adj_y:
        return product(y, g, False, True), product(x, g, False, False)
    return product(y, g, True, True), product(g, x, True, True)


def _batch_matmul_grad_for(op_type: str):
    def grad(scope, op, grads):
        x, y = op.inputs
        wrapper = {"BatchMatMul": BatchMatMul, "BatchMatMulV2": BatchMatMulV2}.get(op_type)

        def product(a, b, adj_a, adj_b):
            if wrapper is None:  # V3: same types (checked), one attr set
                t = op.attrs["Tout"]
                return BatchMatMulV3(scope, a, b, Ta=t, Tb=t, Tout=t, adj_x=adj_a, adj_y=adj_b)
            return wrapper(scope, a, b, adj_x=adj_a, adj_y=adj_b)

        dx, dy = _adjoint_products(scope, x, y, grads[0], op.attrs["adj_x"],
                                   op.attrs["adj_y"], product)
        if op_type == "BatchMatMul":  # equal batch dims: nothing was broadcast
            return [dx, dy]
        return [m.reduce_to_shape_of(scope, dx, x), m.reduce_to_shape_of(scope, dy, y)]

    grad.__name__ = f"_{op_type.lower()}_grad"
    grad.__doc__ = (f"{op_type}: products with the cotangent, summed over the batch dims "
                    f"each operand was broadcast along.")
    return grad


for _name in ("BatchMatMul", "BatchMatMulV2", "BatchMatMulV3"):
    RegisterGradient(_name)(_batch_matmul_grad_for(_name))


@RegisterGradient("Einsum")
def _einsum_grad(scope, op, grads):
    """Operand i's gradient is the Einsum of the output's cotangent with the other operand,
    onto operand i's kept labels (TF's _EinsumGrad); labels summed away first are restored
    by broadcasting."""
    plan = parse_einsum(op.attrs["equation"], len(op.inputs))
    g = grads[0]
    result = []
    for index, x in enumerate(op.inputs):
        kept = plan.kept(index)
        if len(plan.inputs) == 2:
            other = plan.inputs[1 - index]
            d = Einsum(scope, [g, op.inputs[1 - index]], f"{plan.output},{other}->{kept}")
        else:
            d = Einsum(scope, [g], f"{plan.output}->{kept}")
        if plan.summed[index]:
            for axis, label in enumerate(plan.inputs[index]):
                if label in plan.summed[index]:
                    d = ExpandDims(scope, d, axis)
            d = m.BroadcastTo(scope, d, m.Shape(scope, x))
        result.append(d)
    return result


@RegisterGradient("MatrixBandPart")
def _matrix_band_part_grad(scope, op, grads):
    """The band passes the cotangent through, the zeroed entries stop it (TF's rule)."""
    _, num_lower, num_upper = op.inputs
    return [MatrixBandPart(scope, grads[0], num_lower, num_upper), None, None]


@RegisterGradient("MatrixDiagPartV3")
def _matrix_diag_part_grad(scope, op, grads):
    """The cotangent set onto the diagonals of zeros shaped like the input."""
    x, k, _ = op.inputs
    return [MatrixSetDiagV3(scope, m.ZerosLike(scope, x), grads[0], k,
                            align=op.attrs["align"]), None, None]


@RegisterGradient("MatrixDiagV3")
def _matrix_diag_grad(scope, op, grads):
    """The cotangent's diagonals (padding 0)."""
    k = op.inputs[1]
    zero = np.zeros((), op.inputs[0].dtype.np_dtype)
    return [MatrixDiagPartV3(scope, grads[0], k, zero, align=op.attrs["align"]), None, None,
            None, None]


@RegisterGradient("MatrixSetDiagV3")
def _matrix_set_diag_grad(scope, op, grads):
    """The input gets the cotangent with the set diagonals zeroed; the diagonal gets the
    cotangent's diagonals."""
    _, diagonal, k = op.inputs
    align = op.attrs["align"]
    zero = np.zeros((), diagonal.dtype.np_dtype)
    return [MatrixSetDiagV3(scope, grads[0], m.ZerosLike(scope, diagonal), k, align=align),
            MatrixDiagPartV3(scope, grads[0], k, zero, align=align), None]
