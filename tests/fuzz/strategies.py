"""Hypothesis strategies: ``case_strategy(op_type)`` draws one :class:`~tests.fuzz.cases.Case`.

Each op has a recipe that draws valid-ish inputs (consistent shapes, its allowed dtypes,
sensible attrs), so cases reach the kernels; then mutations break it: one input's shape,
dtype or values, one attr replaced by a bad value of the wrong kind or out of range, an
explicit type attr that contradicts the inputs. Finally each input gets a feed mode (Const, or
a Placeholder of unknown, partial or full static shape) and a memory layout.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np
from hypothesis import strategies as st

from minigraph.framework.op_def import OpDef, get_op_def, registered_ops
from tests.fuzz.cases import Case, InputSpec
from tests.fuzz.values import DTYPES, FLOATS, INTS, LAYOUTS, ArraySpec

OPENCL_OPS = ("FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3", "FusedBatchNormGrad",
              "FusedBatchNormGradV2", "FusedBatchNormGradV3", "FusedBatchNormGradGrad",
              "BatchNormWithGlobalNormalization", "BatchNormWithGlobalNormalizationGrad",
              "Identity")

BAD_ATTRS = {
    "list(int)": ([], [0, 0, 0, 0], [1, -1, -1, 1], [1, 2 ** 31, 2 ** 31, 1],
                  [1, 2 ** 70, 1, 1], [1.5, 1, 1, 1], ["1", 1, 1, 1], "1111", None, [1, 1, 1],
                  [2, 1, 1, 2], 7, [1, 0, 1, 1], [1, -2 ** 31, 1, 1], [1] * 9),
    "int": (2 ** 70, -1, -2 ** 63, 1.5, "3", None, True, 2 ** 31),
    "float": (float("nan"), float("inf"), float("-inf"), -1.0, 1e300, "0.1", None, True,
              2 ** 70, 1e-45),
    "string": ("", "nhwc", "NCDHW", "NDHWC", "same", 5, None, b"SAME", "VALID\x00", "NCHW",
               "EXPLICIT"),
    "bool": (1, 0, "True", None, 2, "false"),
    "type": ("float128", 5, np.complex64, "string", None, "bool", "int8", "int32",
             "bfloat16"),
    "shape": ([-2], [2 ** 70], "x", [1.5]),
}


class Draw:
    """Helpers around hypothesis' ``draw`` for one op."""

    def __init__(self, draw: Callable, op_def: OpDef) -> None:
        self.draw = draw
        self.op_def = op_def

    def int(self, lo: int, hi: int) -> int:
        return self.draw(st.integers(lo, hi))

    def pick(self, items):
        return self.draw(st.sampled_from(list(items)))

    def chance(self, percent: int) -> bool:
        # hypothesis favours boundary integers (0, the maximum): the "yes" band sits in the
        # middle, so ``percent`` is the real rate and the boundary draws mean "no mutation"
        raw = self.draw(st.integers(0, 999))
        return 500 - 5 * percent <= raw < 500 + 5 * percent

    def dtype(self, attr: str = "T") -> str:
        try:
            allowed = self.op_def.attr_def(attr).allowed
        except KeyError:
            allowed = None
        names = [d.name for d in allowed] if allowed else list(DTYPES)
        if self.chance(8):
            names = list(DTYPES)
        return self.pick(names)

    def arg_dtype(self, arg) -> str:
        """An input's dtype: its fixed one (bool for the logical ops; another one now and
        then), else one its type attr allows."""
        if arg.dtype is not None:
            return self.pick(list(DTYPES)) if self.chance(8) else arg.dtype.name
        return self.dtype(arg.type_attr)

    def dim(self, lo: int = 0, hi: int = 4) -> int:
        if lo == 0 and self.chance(10):
            return 0
        return self.int(max(lo, 1), hi)

    def shape(self, rank: int | None = None, lo: int = 0, hi: int = 4) -> tuple:
        rank = self.int(0, 5) if rank is None else rank
        return tuple(self.dim(lo, hi) for _ in range(rank))

    def array(self, shape, dtype: str, kinds=None) -> ArraySpec:
        kinds = kinds or ("normal",) * 5 + ("small_int", "positive", "special", "zeros",
                                             "huge", "negative")
        return ArraySpec(tuple(shape), dtype, self.pick(kinds), self.int(0, 2 ** 16))

    def lit(self, values, dtype: str = "int32") -> ArraySpec:
        values = tuple(int(v) if dtype != "float32" else float(v) for v in values)
        return ArraySpec((len(values),), dtype, literal=values)

    def scalar_lit(self, value, dtype: str) -> ArraySpec:
        return ArraySpec((), dtype, literal=(value,))

    def fmt(self, formats=("NHWC", "NCHW")) -> str:
        return self.pick(formats)


def _nchw(fmt: str, n: int, spatial, c: int) -> tuple:
    return (n, *spatial, c) if fmt.endswith("C") else (n, c, *spatial)


def _window(fmt: str, *sizes: int) -> list:
    """A ksize/strides/dilations attr: ``sizes`` on the spatial dims of ``fmt``."""
    return [1, *sizes, 1] if fmt.endswith("C") else [1, 1, *sizes]


def _out_size(size: int, k: int, s: int, d: int, padding: str, pads=(0, 0)) -> int:
    eff = (k - 1) * d + 1
    if padding == "SAME":
        return -(-size // s)
    if padding == "EXPLICIT":
        size += pads[0] + pads[1]
    return max(0, (size - eff) // s + 1)


# ----------------------------------------------------------------------------- recipes
# Each returns ({input name: (ArraySpec, role)}, attrs).


def r_unary(g: Draw):
    dtype = g.dtype("T") if "T" in [a.name for a in g.op_def.attrs] else g.dtype("SrcT")
    rank_lo = {"Softmax": 1, "LogSoftmax": 1, "BiasAddGrad": 2}.get(g.op_def.name, 0)
    shape = g.shape(g.int(rank_lo, 5))
    name = g.op_def.inputs[0].name
    attrs = {}
    if g.op_def.name == "Cast":
        attrs["DstT"] = g.pick(DTYPES)
        if g.chance(30):
            attrs["Truncate"] = True
    if g.op_def.name == "BiasAddGrad":
        attrs["data_format"] = g.fmt()
    return {name: (g.array(shape, dtype), "data")}, attrs


def _broadcast_partner(g: Draw, shape: tuple) -> tuple:
    choice = g.int(0, 3)
    if choice == 0:
        return shape
    if choice == 1:
        cut = g.int(0, len(shape))
        return tuple(1 if g.chance(40) else d for d in shape[cut:])
    if choice == 2:
        return tuple(g.dim(1, 3) for _ in range(g.int(0, 2))) + shape
    return g.shape()


def r_binary(g: Draw):
    dtype = g.arg_dtype(g.op_def.inputs[0])
    shape = g.shape()
    other = _broadcast_partner(g, shape)
    names = [a.name for a in g.op_def.inputs]
    if g.chance(50):
        shape, other = other, shape
    if g.op_def.name == "ReluGrad" and not g.chance(30):
        other = shape
    attrs = {}
    if g.op_def.name in ("Equal", "NotEqual") and g.chance(30):
        attrs["incompatible_shape_error"] = False
    return {names[0]: (g.array(shape, dtype), "data"),
            names[1]: (g.array(other, dtype), "data")}, attrs


def r_addn(g: Draw):
    dtype, shape = g.dtype(), g.shape()
    count = g.int(1, 4)
    return {f"inputs_{i}": (g.array(shape if i == 0 or not g.chance(15) else g.shape(), dtype),
                            "data") for i in range(count)}, {}


def r_reduce(g: Draw):
    dtype, shape = g.arg_dtype(g.op_def.inputs[0]), g.shape()
    rank = len(shape)
    tidx = g.pick(INTS)
    if g.chance(40):
        axis = g.scalar_lit(g.int(-rank - 1, rank) if rank else g.int(-1, 1), tidx)
    else:
        axes = [g.int(-rank - 1, rank) for _ in range(g.int(0, max(rank, 1) + 1))]
        axis = g.lit(axes, tidx)
    attrs = {"keep_dims": True} if g.chance(40) else {}
    return {"input": (g.array(shape, dtype), "data"), "reduction_indices": (axis, "shape")}, attrs


def r_argmax(g: Draw):
    dtype, shape = g.dtype(), g.shape(g.int(1, 4))
    rank = len(shape)
    attrs = {}
    if g.chance(40):
        attrs["output_type"] = g.pick(["int32", "int64"])
    return {"input": (g.array(shape, dtype), "data"),
            "dimension": (g.scalar_lit(g.int(-rank - 1, rank), g.pick(INTS)), "shape")}, attrs


def r_scan(g: Draw):
    """Cumsum/Cumprod: a scalar axis, now and then out of range or a vector."""
    dtype, shape = g.dtype(), g.shape(g.int(0, 4))
    rank = len(shape)
    tidx = g.pick(INTS)
    axis = g.scalar_lit(g.int(-rank - 1, rank), tidx)
    if g.chance(10):
        axis = g.lit([g.int(-rank, max(rank - 1, 0))], tidx)
    attrs = {name: True for name in ("exclusive", "reverse") if g.chance(40)}
    return {"x": (g.array(shape, dtype), "data"), "axis": (axis, "shape")}, attrs


def r_select(g: Draw):
    """Select: 't' and 'e' of one shape, the condition a scalar, of their shape, or a vector
    of their first dimension; SelectV2: three shapes that broadcast."""
    dtype, shape = g.dtype(), g.shape()
    if g.op_def.name == "SelectV2":
        condition, other = _broadcast_partner(g, shape), _broadcast_partner(g, shape)
    else:
        mode = g.int(0, 2)
        condition = () if mode == 0 else shape[:1] if mode == 1 and shape else shape
        other = shape if not g.chance(10) else g.shape()
    return {"condition": (g.array(condition, g.arg_dtype(g.op_def.inputs[0])), "data"),
            "t": (g.array(shape, dtype), "data"), "e": (g.array(other, dtype), "data")}, {}


def _factor_shape(g: Draw, total: int) -> list:
    dims, rest = [], total
    for _ in range(g.int(0, 3)):
        divisors = [d for d in range(1, 5) if rest % d == 0] if rest else [0, 1]
        d = g.pick(divisors)
        dims.append(d)
        rest = rest // d if d else 0
    dims.append(rest)
    if dims and g.chance(40):
        dims[g.int(0, len(dims) - 1)] = -1
    if g.chance(15):
        dims[g.int(0, len(dims) - 1)] = g.pick([-1, -2, 0, 7, 2 ** 31 - 1, 2 ** 33])
    return dims


def r_reshape(g: Draw):
    dtype, shape = g.dtype(), g.shape()
    target = _factor_shape(g, int(np.prod(shape)))
    tshape = g.pick(INTS)
    return {"tensor": (g.array(shape, dtype), "data"), "shape": (g.lit(target, tshape),
                                                                 "shape")}, {}


def r_pad(g: Draw):
    dtype, shape = g.dtype(), g.shape()
    pairs = [[g.int(0, 2), g.int(0, 2)] for _ in range(len(shape) + (1 if g.chance(10) else 0))]
    if g.chance(15) and pairs:
        pairs[0][g.int(0, 1)] = g.pick([-1, 2 ** 31 - 1])
    flat = [v for pair in pairs for v in pair]
    spec = ArraySpec((len(pairs), 2), g.pick(INTS), literal=tuple(flat))
    return {"input": (g.array(shape, dtype), "data"), "paddings": (spec, "shape")}, {}


def r_slice(g: Draw):
    dtype, shape = g.dtype(), g.shape()
    begin = [g.int(0, d) for d in shape]
    size = [g.pick([-1, g.int(0, max(d - b, 0))]) for d, b in zip(shape, begin)]
    if g.chance(15) and shape:
        begin[0] = g.pick([-1, shape[0] + 1])
    index = g.pick(INTS)
    return {"input": (g.array(shape, dtype), "data"), "begin": (g.lit(begin, index), "shape"),
            "size": (g.lit(size, index), "shape")}, {}


def r_pack(g: Draw):
    dtype, shape = g.dtype(), g.shape()
    count = g.int(1, 3)
    values = {f"values_{i}": (g.array(shape if i == 0 or not g.chance(15) else g.shape(),
                                      dtype), "data") for i in range(count)}
    return values, {"axis": g.int(-len(shape) - 2, len(shape) + 1)}


def r_strided_slice(g: Draw):
    dtype, shape = g.dtype(), g.shape()
    count, index = g.int(1, len(shape) + 1), g.pick(INTS)
    spec = {name: g.lit([g.int(-6, 6) for _ in range(count)], index)
            for name in ("begin", "end")}
    spec["strides"] = g.lit([g.pick([-2, -1, 1, 2, 0 if g.chance(5) else 1])
                             for _ in range(count)], index)
    masks = {m: g.int(0, 2 ** count - 1) for m in ("begin_mask", "end_mask", "new_axis_mask",
                                                  "shrink_axis_mask")}
    masks["ellipsis_mask"] = g.pick([0, 0, 1 << g.int(0, count - 1), 3])
    return {"input": (g.array(shape, dtype), "data"),
            **{name: (value, "shape") for name, value in spec.items()}}, masks


def r_unpack(g: Draw):
    dtype, shape = g.dtype(), g.shape()
    axis = g.int(-len(shape) - 1, len(shape)) if shape else 0
    num = shape[axis] if shape and -len(shape) <= axis < len(shape) else 1
    if g.chance(15):
        num = g.pick([0, num + 1, 2 ** 20])
    return {"value": (g.array(shape, dtype), "data")}, {"num": num, "axis": axis}


def r_shape_n(g: Draw):
    return {f"input_{i}": (g.array(g.shape(), g.dtype()), "data")
            for i in range(g.int(1, 3))}, {"out_type": g.pick(INTS)}


def r_expand_dims(g: Draw):
    dtype, shape = g.dtype(), g.shape()
    dim = g.scalar_lit(g.int(-len(shape) - 2, len(shape) + 1), g.pick(INTS))
    return {"input": (g.array(shape, dtype), "data"), "dim": (dim, "shape")}, {}


def r_squeeze(g: Draw):
    dtype, shape = g.dtype(), g.shape()
    dims = [g.int(-len(shape) - 1, len(shape)) for _ in range(g.int(0, 2))] if shape else []
    return {"input": (g.array(shape, dtype), "data")}, {"squeeze_dims": dims}


def r_tile(g: Draw):
    dtype, shape = g.dtype(), g.shape()
    multiples = [g.int(0, 3) for _ in range(len(shape) + (1 if g.chance(10) else 0))]
    if g.chance(15) and multiples:
        multiples[0] = g.pick([-1, 2 ** 31 - 1])
    return {"input": (g.array(shape, dtype), "data"),
            "multiples": (g.lit(multiples, g.pick(INTS)), "shape")}, {}


def _indices(g: Draw, shape: tuple, limit: int, dtype: str | None = None,
             lowest: int = 0) -> ArraySpec:
    """Integer indices of ``shape`` in [lowest, limit), now and then one out of range."""
    values = [g.int(lowest, max(limit - 1, lowest)) if limit > lowest else lowest
              for _ in range(int(np.prod(shape, dtype=np.int64)))]
    if values and g.chance(15):
        values[g.int(0, len(values) - 1)] = g.pick([-1, limit, 2 ** 31 - 1])
    return ArraySpec(tuple(shape), dtype or g.pick(INTS), literal=tuple(values))


def _joined(g: Draw) -> tuple[str, tuple, int, list]:
    """(dtype, shape, axis, the shapes of 1-4 tensors to join along axis): one rank, equal
    but along the axis (now and then not)."""
    dtype, shape = g.dtype(), g.shape(g.int(1, 4))
    axis = g.int(-len(shape) - 1, len(shape))
    shapes = []
    for i in range(g.int(1, 4)):
        dims = list(shape)
        if -len(shape) <= axis < len(shape):
            dims[axis] = g.dim()
        if i and g.chance(10):
            dims = list(g.shape())
        shapes.append(tuple(dims))
    return dtype, shape, axis, shapes


def r_concat(g: Draw):
    """ConcatV2 (values, axis) or Concat (concat_dim, values)."""
    dtype, _, axis, shapes = _joined(g)
    values = {f"values_{i}": (g.array(dims, dtype), "data") for i, dims in enumerate(shapes)}
    if g.op_def.name == "Concat":
        return {"concat_dim": (g.scalar_lit(axis, "int32"), "shape"), **values}, {}
    return {**values, "axis": (g.scalar_lit(axis, g.pick(INTS)), "shape")}, {}


def r_concat_offset(g: Draw):
    _, _, axis, shapes = _joined(g)
    index = g.pick(INTS)
    return {"concat_dim": (g.scalar_lit(axis, "int32"), "shape"),
            **{f"shape_{i}": (g.lit(dims, index), "shape") for i, dims in enumerate(shapes)}
            }, {}


def r_split(g: Draw):
    dtype, shape = g.dtype(), g.shape(g.int(0, 4))
    axis = g.int(-len(shape) - 1, len(shape)) if shape else 0
    size = shape[axis] if -len(shape) <= axis < len(shape) else 1
    count = g.pick([d for d in range(1, 5) if size % d == 0] or [1]) if not g.chance(15) \
        else g.pick([0, 3, 7])
    return {"split_dim": (g.scalar_lit(axis, "int32"), "shape"),
            "value": (g.array(shape, dtype), "data")}, {"num_split": count}


def r_split_v(g: Draw):
    dtype, shape = g.dtype(), g.shape(g.int(0, 4))
    axis = g.int(-len(shape) - 1, len(shape)) if shape else 0
    size = shape[axis] if -len(shape) <= axis < len(shape) else 1
    sizes = []
    while sum(sizes) < size or not sizes:
        sizes.append(g.int(0, max(size - sum(sizes), 0)))
        if len(sizes) > 4:
            break
    sizes[-1] += size - sum(sizes)
    if g.chance(40):
        sizes[g.int(0, len(sizes) - 1)] = -1
    if g.chance(15):
        sizes[0] = g.pick([-2, size + 1])
    count = len(sizes) if not g.chance(10) else len(sizes) + 1
    return {"value": (g.array(shape, dtype), "data"),
            "size_splits": (g.lit(sizes, g.pick(INTS)), "shape"),
            "split_dim": (g.scalar_lit(axis, "int32"), "shape")}, {"num_split": count}


def r_gather(g: Draw):
    dtype, shape = g.dtype(), g.shape(g.int(1, 4))
    batch_dims = g.int(0, len(shape) - 1) if g.chance(40) else 0
    axis = g.int(batch_dims, len(shape) - 1)
    index_shape = shape[:batch_dims] + g.shape(g.int(0, 2))
    indices = _indices(g, index_shape, shape[axis])
    if g.chance(20):
        axis = g.pick([axis - len(shape), len(shape), -len(shape) - 1])
    if g.chance(15):
        batch_dims = g.pick([-1, len(index_shape) + 1, batch_dims + 1])
    return {"params": (g.array(shape, dtype), "data"), "indices": (indices, "shape"),
            "axis": (g.scalar_lit(axis, g.pick(INTS)), "shape")}, {"batch_dims": batch_dims}


def r_unsorted_segment_sum(g: Draw):
    dtype, shape = g.dtype(), g.shape(g.int(1, 3))
    count = g.int(0, 4)
    ids = _indices(g, shape[:g.int(1, len(shape))], count, lowest=-1)
    if g.chance(10):
        count = -1
    return {"data": (g.array(shape, dtype), "data"), "segment_ids": (ids, "shape"),
            "num_segments": (g.scalar_lit(count, g.pick(INTS)), "shape")}, {}


def r_one_hot(g: Draw):
    dtype, shape = g.dtype(), g.shape(g.int(0, 3))
    depth = g.int(-1, 4) if g.chance(10) else g.int(0, 4)
    axis = g.int(-2, len(shape) + 1) if g.chance(30) else -1
    return {"indices": (_indices(g, shape, depth + 1, lowest=-1), "shape"),
            "depth": (g.scalar_lit(depth, "int32"), "shape"),
            "on_value": (g.array((), dtype), "data"),
            "off_value": (g.array((), dtype), "data")}, {"axis": axis}


def r_range(g: Draw):
    dtype = g.dtype("Tidx")
    start, limit = g.int(-5, 5), g.int(-5, 5)
    delta = g.pick([1, 2, -1, -3, 0]) if g.chance(80) else g.pick([10 ** 9, 3])
    if dtype in FLOATS and g.chance(50):
        start, limit, delta = start / 4, limit * 1.5, delta / 3 or 0.0
    return {name: (g.scalar_lit(value, dtype), "shape")
            for name, value in (("start", start), ("limit", limit), ("delta", delta))}, {}


def _pairs(g: Draw, rank: int, high: int) -> ArraySpec:
    """A [rank, 2] matrix of values in [0, high] (now and then a bad one or row)."""
    pairs = [[g.int(0, high), g.int(0, high)] for _ in range(rank + (1 if g.chance(10) else 0))]
    if g.chance(15) and pairs:
        pairs[0][g.int(0, 1)] = g.pick([-1, 2 ** 31 - 1])
    return ArraySpec((len(pairs), 2), g.pick(INTS),
                     literal=tuple(v for pair in pairs for v in pair))


def r_mirror_pad(g: Draw):
    dtype, shape = g.dtype(), g.shape(g.int(0, 4), lo=1)
    mode = g.pick(["REFLECT", "SYMMETRIC"])
    high = min(shape, default=1) + (1 if g.op_def.name == "MirrorPadGrad" else 0)
    return {"input": (g.array(shape, dtype), "data"),
            "paddings": (_pairs(g, len(shape), high), "shape")}, {"mode": mode}


def r_space_to_batch(g: Draw):
    """SpaceToBatchND (paddings) or BatchToSpaceND (crops)."""
    dtype, m = g.dtype(), g.int(0, 2)
    block = [g.int(1, 3) for _ in range(m)]
    if g.chance(10) and block:
        block[0] = g.pick([0, -2])
    to_batch = g.op_def.name == "SpaceToBatchND"
    batch = g.int(0, 2) * (1 if to_batch else max(1, int(np.prod(block))))
    spatial = [g.int(0, 3) * max(b, 1) for b in block]
    shape = (batch, *spatial, *g.shape(g.int(0, 1)))
    pairs = _pairs(g, m, 1 if to_batch else min([*spatial, 1]))
    name = "paddings" if to_batch else "crops"
    return {"input": (g.array(shape, dtype), "data"),
            "block_shape": (g.lit(block, g.pick(INTS)), "shape"), name: (pairs, "shape")}, {}


def r_depth_space(g: Draw):
    """DepthToSpace or SpaceToDepth, NHWC or NCHW."""
    dtype, bs = g.dtype(), g.int(2, 3) if not g.chance(5) else 1
    fmt = g.pick(["NHWC", "NCHW"]) if not g.chance(5) else "NCHW_VECT_C"
    if g.op_def.name == "DepthToSpace":
        n, h, w, c = g.int(0, 2), g.int(1, 2), g.int(1, 2), bs * bs * g.int(1, 2)
    else:
        n, h, w, c = g.int(0, 2), bs * g.int(1, 2), bs * g.int(1, 2), g.int(1, 2)
    shape = (n, h, w, c) if fmt == "NHWC" else (n, c, h, w)
    if g.chance(10):
        shape = g.shape()
    return {"input": (g.array(shape, dtype), "data")}, {"block_size": bs, "data_format": fmt}


def r_reverse(g: Draw):
    dtype, shape = g.dtype(), g.shape()
    axes = [g.int(-len(shape) - 1, len(shape)) for _ in range(g.int(0, len(shape) + 1))]
    return {"tensor": (g.array(shape, dtype), "data"),
            "axis": (g.lit(axes, g.pick(INTS)), "shape")}, {}


def r_identity_n(g: Draw):
    return {f"input_{i}": (g.array(g.shape(), g.pick(DTYPES)), "data")
            for i in range(g.int(1, 3))}, {}

def r_broadcast_to(g: Draw):
    dtype, shape = g.dtype(), g.shape(g.int(0, 3))
    target = [g.dim(1, 3) for _ in range(g.int(0, 2))] + \
        [(g.dim(0, 3) if d == 1 and not g.chance(40) else d) for d in shape]
    if g.chance(15):
        target[g.int(0, len(target) - 1) if target else 0:] = [g.pick([-1, 2 ** 31 - 1, 5])]
    return {"input": (g.array(shape, dtype), "data"),
            "shape": (g.lit(target, g.pick(INTS)), "shape")}, {}


def r_fill(g: Draw):
    dims = [g.dim(0, 4) for _ in range(g.int(0, 4))]
    if g.chance(15):
        dims.append(g.pick([-1, -5, 2 ** 31 - 1, -2 ** 31]))
    return {"dims": (g.lit(dims, g.pick(INTS)), "shape"),
            "value": (g.array((), g.dtype()), "data")}, {}


def r_transpose(g: Draw):
    dtype, shape = g.dtype(), g.shape()
    perm = list(g.draw(st.permutations(range(len(shape)))))
    if g.chance(20):
        perm = [g.int(-2, len(shape) + 1) for _ in range(g.pick([len(shape),
                                                                 len(shape) + 1]))]
    return {"x": (g.array(shape, dtype), "data"), "perm": (g.lit(perm, g.pick(INTS)),
                                                          "shape")}, {}


def r_invert_permutation(g: Draw):
    n = g.int(0, 6)
    perm = list(g.draw(st.permutations(range(n))))
    if g.chance(30) and n:
        perm[g.int(0, n - 1)] = g.pick([-1, n, n + 5, 0, 2 ** 31 - 1])
    return {"x": (g.lit(perm, g.pick(INTS)), "shape")}, {}


def r_broadcast_gradient_args(g: Draw):
    shape = g.shape()
    other = _broadcast_partner(g, shape)
    if g.chance(10):
        other = other + (-1,)
    index = g.pick(INTS)
    return {"s0": (g.lit(shape, index), "shape"), "s1": (g.lit(other, index), "shape")}, {}


def r_reduced_shape(g: Draw):
    shape = g.shape()
    rank = len(shape)
    axes = [g.int(-rank - 1, rank) for _ in range(g.int(0, rank + 1))]
    return {"input_shape": (g.lit(shape), "shape"), "axes": (g.lit(axes), "shape")}, {}


def r_random_uniform(g: Draw):
    dims = [g.dim(0, 4) for _ in range(g.int(0, 4))]
    if g.chance(15):
        dims.append(g.pick([-1, 2 ** 31 - 1, -2 ** 31]))
    attrs = {"dtype": g.pick(FLOATS)}
    if g.chance(50):
        attrs["seed"], attrs["seed2"] = g.int(0, 10), g.int(0, 10)
    return {"shape": (g.lit(dims, g.pick(INTS)), "shape")}, attrs


def r_matmul(g: Draw):
    dtype = g.dtype()
    m, k, n = g.dim(), g.dim(), g.dim()
    ta, tb = g.chance(30), g.chance(30)
    a = (k, m) if ta else (m, k)
    b = (n, k) if tb else (k, n)
    if g.chance(15):
        b = (b[0] + 1, b[1])
    attrs = {}
    if ta:
        attrs["transpose_a"] = True
    if tb:
        attrs["transpose_b"] = True
    return {"a": (g.array(a, dtype), "data"), "b": (g.array(b, dtype), "data")}, attrs


def r_bias_add(g: Draw):
    dtype, fmt = g.dtype(), g.fmt()
    shape = g.shape(g.int(2, 5))
    c = shape[-1] if fmt == "NHWC" else shape[1]
    return {"value": (g.array(shape, dtype), "data"),
            "bias": (g.array((c if not g.chance(15) else g.dim(),), dtype), "data")}, \
        {"data_format": fmt}


def _conv_geometry(g: Draw, grouped: bool = False):
    """(format, x, filter, y, attrs): x and y channels-last, 2 or 3 spatial dims as the op's
    data_format says; with ``grouped``, 2-D convolutions are sometimes grouped (x and y
    have 2 or 3 times the filter's in and out channels)."""
    fmt = g.fmt(g.op_def.attr_def("data_format").allowed)
    rank = len(fmt) - 2
    n, *sizes, ci = g.dim(), *(g.dim(1, 6) for _ in range(rank)), g.dim(1, 3)
    *ks, o = *(g.int(1, 3) for _ in range(rank)), g.dim(1, 3)
    groups = g.int(2, 3) if grouped and rank == 2 and g.chance(30) else 1
    c, o = ci * groups, o * groups
    s = g.int(1, 3)
    d = 1 if not g.chance(30) else g.int(1, 2)
    padding = g.pick(g.op_def.attr_def("padding").allowed)
    attrs = {"strides": _window(fmt, *[s] * rank), "padding": padding, "data_format": fmt}
    pads = (0, 0)
    if padding == "EXPLICIT":
        pads = (g.int(0, 2), g.int(0, 2))
        attrs["explicit_paddings"] = [0, 0, *pads, *pads, 0, 0] if fmt == "NHWC" else \
            [0, 0, 0, 0, *pads, *pads]
    if d != 1:
        attrs["dilations"] = _window(fmt, *[d] * rank)
    outs = [_out_size(x, k, s, d, padding, pads) for x, k in zip(sizes, ks)]
    return fmt, (n, *sizes, c), (*ks, ci, o), (n, *outs, o), attrs


def _grouped_geometry(g: Draw):
    return _conv_geometry(g, grouped=True)


def _jiggle(g: Draw, shape: tuple) -> tuple:
    if g.chance(12) and shape:
        i = g.int(0, len(shape) - 1)
        return shape[:i] + (max(0, shape[i] + g.pick([-1, 1, 2])),) + shape[i + 1:]
    return shape


def _depthwise_geometry(g: Draw):
    """:func:`_conv_geometry` with the filter's last dim a channel multiplier: the output
    has in_channels * multiplier channels."""
    fmt, x, f, y, attrs = _conv_geometry(g)
    return fmt, x, f, (*y[:-1], x[-1] * f[-1]), attrs


def r_conv2d(g: Draw, geometry: Callable = _conv_geometry):
    dtype = g.dtype()
    fmt, x, f, _, attrs = geometry(g)
    x = _nchw(fmt, x[0], x[1:-1], x[-1])
    return {"input": (g.array(x, dtype), "data"),
            "filter": (g.array(_jiggle(g, f), dtype), "data")}, attrs


def r_conv2d_backprop_input(g: Draw, geometry: Callable = _conv_geometry):
    dtype = g.dtype()
    fmt, x, f, y, attrs = geometry(g)
    x, y = _nchw(fmt, x[0], x[1:-1], x[-1]), _nchw(fmt, y[0], y[1:-1], y[-1])
    return {"input_sizes": (g.lit(_jiggle(g, x)), "shape"),
            "filter": (g.array(f, dtype), "data"),
            "out_backprop": (g.array(_jiggle(g, y), dtype), "data")}, attrs


def r_conv2d_backprop_filter(g: Draw, geometry: Callable = _conv_geometry):
    dtype = g.dtype()
    fmt, x, f, y, attrs = geometry(g)
    x, y = _nchw(fmt, x[0], x[1:-1], x[-1]), _nchw(fmt, y[0], y[1:-1], y[-1])
    return {"input": (g.array(x, dtype), "data"),
            "filter_sizes": (g.lit(_jiggle(g, f)), "shape"),
            "out_backprop": (g.array(_jiggle(g, y), dtype), "data")}, attrs


def _pool_geometry(g: Draw):
    fmt = g.fmt(g.op_def.attr_def("data_format").allowed)
    rank = len(fmt) - 2
    n, *sizes, c = g.dim(), *(g.dim(1, 6) for _ in range(rank)), g.dim(1, 3)
    k, s = g.int(1, 3), g.int(1, 3)
    allowed = g.op_def.attr_def("padding").allowed
    padding = g.pick(allowed)
    attrs = {"ksize": _window(fmt, *[k] * rank), "strides": _window(fmt, *[s] * rank),
             "padding": padding, "data_format": fmt}
    pads = (0, 0)
    if padding == "EXPLICIT":
        pads = (g.int(0, 2), g.int(0, 2))
        attrs["explicit_paddings"] = [0, 0, *pads, *pads, 0, 0] if fmt == "NHWC" else \
            [0, 0, 0, 0, *pads, *pads]
    outs = [_out_size(v, k, s, 1, padding, pads) for v in sizes]
    return fmt, _nchw(fmt, n, sizes, c), _nchw(fmt, n, outs, c), attrs


def r_pool(g: Draw):
    dtype = g.dtype()
    _, x, _, attrs = _pool_geometry(g)
    return {g.op_def.inputs[0].name: (g.array(x, dtype), "data")}, attrs


def r_avg_pool_grad(g: Draw):
    dtype = g.dtype()
    _, x, y, attrs = _pool_geometry(g)
    return {"orig_input_shape": (g.lit(_jiggle(g, x)), "shape"),
            "grad": (g.array(_jiggle(g, y), dtype), "data")}, attrs


def r_max_pool_grad(g: Draw):
    dtype = g.dtype()
    _, x, y, attrs = _pool_geometry(g)
    grad = x if g.op_def.name.endswith("GradGrad") else y
    return {"orig_input": (g.array(x, dtype), "data"),
            "orig_output": (g.array(_jiggle(g, y), dtype), "data"),
            "grad": (g.array(_jiggle(g, grad), dtype), "data")}, attrs


def r_sparse_xent(g: Draw):
    dtype = g.dtype()
    b, k = g.dim(), g.dim()
    labels = [g.int(0, max(k - 1, 0)) if not g.chance(15) else g.pick([-1, k, 2 ** 31 - 1])
              for _ in range(b)]
    ltype = g.pick(INTS)
    features = (b, k) if not g.chance(15) else g.shape()
    return {"features": (g.array(features, dtype), "data"),
            "labels": (g.lit(labels, ltype) if labels else ArraySpec((0,), ltype), "shape")}, {}


def r_xent(g: Draw):
    """SoftmaxCrossEntropyWithLogits: features [b, k]; labels the same, a [1, k] or [k] row
    (broadcast), or something that does not broadcast."""
    dtype = g.dtype()
    b, k = g.dim(), g.dim()
    labels = g.pick([(b, k), (b, k), (1, k), (k,), (b,), g.shape()])
    return {"features": (g.array((b, k) if not g.chance(10) else g.shape(), dtype), "data"),
            "labels": (g.array(labels, dtype, ("positive", "zeros", "normal")), "data")}, {}


def _resize_attrs(g: Draw) -> dict:
    align, half = g.pick([(False, False), (True, False), (False, True), (True, True)])
    return {"align_corners": align, "half_pixel_centers": half}


def _size_lit(g: Draw) -> ArraySpec:
    size = [g.int(1, 6), g.int(1, 6)]
    if g.chance(10):
        size = g.pick([[0, 3], [3, -1], [2, 2, 2], [4]])
    return g.lit(size, "int32")


def r_resize(g: Draw):
    """ResizeNearestNeighbor / ResizeBilinear: NHWC images and a [height, width] size."""
    shape = (g.dim(), g.dim(1), g.dim(1), g.dim(1)) if not g.chance(10) else g.shape()
    return {"images": (g.array(shape, g.dtype()), "data"), "size": (_size_lit(g), "shape")}, \
        _resize_attrs(g)


def r_resize_nearest_grad(g: Draw):
    shape = (g.dim(), g.dim(), g.dim(), g.dim()) if not g.chance(10) else g.shape()
    return {"grads": (g.array(shape, g.dtype()), "data"), "size": (_size_lit(g), "shape")}, \
        _resize_attrs(g)


def r_resize_bilinear_grad(g: Draw):
    n, c = g.dim(), g.dim(1)
    grads = (n, g.dim(1), g.dim(1), c) if not g.chance(10) else g.shape()
    original = (n, g.dim(1), g.dim(1), c) if not g.chance(10) else g.shape()
    return {"grads": (g.array(grads, "float32"), "data"),
            "original_image": (g.array(original, g.dtype()), "data")}, _resize_attrs(g)


def r_batch_matmul(g: Draw):
    """x [..., m, k] and y [..., k, n] (transposed where adj says), batch dims that are equal
    (V1) or broadcast (V2, V3), sometimes mismatched."""
    dtype = g.dtype("Ta" if g.op_def.name == "BatchMatMulV3" else "T")
    m, k, n = g.dim(), g.dim(), g.dim()
    batch = g.shape(g.int(0, 2))
    y_batch = batch if g.op_def.name == "BatchMatMul" or g.chance(50) else \
        tuple(1 if g.chance(30) else d for d in batch)[g.int(0, len(batch)):]
    adj_x, adj_y = g.chance(30), g.chance(30)
    x = (*batch, *((k, m) if adj_x else (m, k)))
    y = (*y_batch, *((n, k) if adj_y else (k, n)))
    if g.chance(10):
        y = (*y[:-2], y[-2] + 1, y[-1])
    attrs = {"adj_x": adj_x, "adj_y": adj_y}
    if g.op_def.name == "BatchMatMulV3":
        attrs.update(Ta=dtype, Tb=dtype, Tout=dtype if not g.chance(10) else g.pick(DTYPES))
    return {"x": (g.array(x, dtype), "data"), "y": (g.array(y, dtype), "data")}, attrs


EINSUM_EQUATIONS = ("abc,cd->abd", "abc,cde->abde", "aecd,abcd->acbe", "acbe,aecd->abcd",
                    "abcd,cde->abe", "ab,bc->ac", "ij->ji", "abc->b", "ab->", "ab,cd->abcd",
                    "aab,bc->ac", "...b,bc->...c", "ab,bc", "ab,bc->aa", "a,b,c->abc")


def r_einsum(g: Draw):
    """An equation (Keras', others, and refused ones) with operands shaped by its labels
    (one label's size sometimes changed in one operand)."""
    equation = g.pick(EINSUM_EQUATIONS)
    sizes = {c: g.dim() for c in "abcdeij"}
    subscripts = equation.split("->")[0].split(",")
    shapes = [tuple(sizes.get(c, 2) for c in s if c != ".") for s in subscripts]
    if g.chance(15):
        which = g.int(0, len(shapes) - 1)
        shapes[which] = g.shape()
    dtype = g.dtype()
    return {f"inputs_{i}": (g.array(shape, dtype), "data") for i, shape in enumerate(shapes)}, \
        {"equation": equation}


def _bn_geometry(g: Draw):
    try:
        formats = g.op_def.attr_def("data_format").allowed
    except KeyError:
        formats = ("NHWC",)
    fmt = g.pick(formats)
    spatial = tuple(g.dim(1, 4) for _ in range(len(fmt) - 2))
    n, c = g.dim(), g.dim(1, 4)
    return fmt, _nchw(fmt, n, spatial, c), c


def _bn_attrs(g: Draw, fmt: str, names) -> dict:
    attrs = {"data_format": fmt} if "data_format" in names else {}
    if "is_training" in names:
        attrs["is_training"] = not g.chance(40)
    if "epsilon" in names and g.chance(40):
        attrs["epsilon"] = g.pick([1e-3, 0.0, 1e-5, 10.0])
    if "exponential_avg_factor" in names and g.chance(30):
        attrs["exponential_avg_factor"] = g.pick([0.5, 0.0, 0.9])
    return attrs


def r_fused_bn(g: Draw):
    t = g.dtype("T")
    u = "float32"
    fmt, x, c = _bn_geometry(g)
    attrs = _bn_attrs(g, fmt, [a.name for a in g.op_def.attrs])
    stats = (c,) if not attrs.get("is_training") or g.chance(50) else (0,)
    return {"x": (g.array(x, t), "data"),
            "scale": (g.array(_jiggle(g, (c,)), u), "data"),
            "offset": (g.array((c,), u), "data"),
            "mean": (g.array(stats, u), "data"),
            "variance": (g.array(stats, u, ("positive",) * 4 + ("special", "negative")),
                         "data")}, attrs


def r_fused_bn_grad(g: Draw):
    t = g.dtype("T")
    fmt, x, c = _bn_geometry(g)
    attrs = _bn_attrs(g, fmt, [a.name for a in g.op_def.attrs])
    specs = {"y_backprop": (g.array(_jiggle(g, x), t), "data"),
             "x": (g.array(x, t), "data"),
             "scale": (g.array((c,), "float32"), "data"),
             "reserve_space_1": (g.array((c,), "float32"), "data"),
             "reserve_space_2": (g.array(_jiggle(g, (c,)), "float32",
                                         ("positive",) * 4 + ("special", "negative")), "data")}
    names = [a.name for a in g.op_def.inputs]
    if "reserve_space_3" in names:
        specs["reserve_space_3"] = (g.array((g.pick([0, c]),), "float32"), "data")
    if "grad_x_backprop" in names:
        specs["grad_x_backprop"] = (g.array(_jiggle(g, x), t), "data")
        specs["grad_scale_backprop"] = (g.array((c,), "float32"), "data")
        specs["grad_offset_backprop"] = (g.array((c,), "float32"), "data")
    return specs, attrs


def r_global_norm(g: Draw):
    t = g.dtype()
    x = g.shape(4, 0, 3)
    c = x[-1]
    names = [a.name for a in g.op_def.inputs]
    specs = {}
    for name in names:
        if name in ("t", "backprop"):
            specs[name] = (g.array(_jiggle(g, x), t), "data")
        elif name == "v":
            specs[name] = (g.array((c,), t, ("positive",) * 3 + ("special",)), "data")
        else:
            specs[name] = (g.array(_jiggle(g, (c,)), t), "data")
    attrs = {"variance_epsilon": g.pick([1e-3, 0.0, 1e-5]),
             "scale_after_normalization": g.chance(50)}
    return specs, attrs


def r_apply(g: Draw):
    t = g.dtype()
    shape = g.shape(g.int(0, 3))
    specs = {}
    for arg in g.op_def.inputs:
        if arg.is_ref:
            specs[arg.name] = (g.array(shape, t, ("normal", "positive", "zeros")), "ref")
        elif arg.name in ("grad", "delta"):
            grad = shape if not g.chance(25) else g.shape()
            specs[arg.name] = (g.array(grad, t), "data")
        else:
            scalar = () if not g.chance(20) else g.shape(g.int(1, 2), 1, 3)
            specs[arg.name] = (g.array(scalar, t, ("positive",) * 4 + ("special", "negative")),
                               "data")
    attrs = {}
    if "use_nesterov" in [a.name for a in g.op_def.attrs] and g.chance(40):
        attrs["use_nesterov"] = True
    if g.chance(20):
        attrs["use_locking"] = True
    return specs, attrs


def r_assign(g: Draw):
    t = g.pick(DTYPES)
    shape = g.shape(g.int(0, 3))
    value = shape if not g.chance(30) else g.shape()
    attrs = {"validate_shape": False} if g.chance(25) else {}
    return {"ref": (g.array(shape, t), "ref"), "value": (g.array(value, t), "data")}, attrs


RECIPES: dict[str, Callable] = {
    **dict.fromkeys(["Neg", "Square", "Rsqrt", "Reciprocal", "Relu", "Softmax", "Identity",
                     "OnesLike", "ZerosLike", "Shape", "Size", "Cast", "BiasAddGrad",
                     "LogSoftmax", "L2Loss"], r_unary),
    **dict.fromkeys(["Add", "AddV2", "Sub", "Mul", "Div", "RealDiv", "Equal", "ReluGrad",
                     "Maximum", "Minimum", "Pow", "SquaredDifference", "FloorDiv", "FloorMod",
                     "DivNoNan", "Less", "LessEqual", "Greater", "GreaterEqual", "NotEqual",
                     "LogicalAnd", "LogicalOr"], r_binary),
    "AddN": r_addn, "ArgMax": r_argmax, "ArgMin": r_argmax,
    **dict.fromkeys(["Sum", "Mean", "Max", "Min", "Prod", "All", "Any"], r_reduce),
    "Cumsum": r_scan, "Cumprod": r_scan, "Select": r_select, "SelectV2": r_select,
    "Reshape": r_reshape, "BroadcastTo": r_broadcast_to, "Fill": r_fill,
    "Pad": r_pad, "Slice": r_slice, "Pack": r_pack, "ExpandDims": r_expand_dims,
    "Squeeze": r_squeeze, "Tile": r_tile, "StridedSlice": r_strided_slice,
    "Unpack": r_unpack, "ShapeN": r_shape_n,
    "ConcatV2": r_concat, "Concat": r_concat, "ConcatOffset": r_concat_offset,
    "Split": r_split, "SplitV": r_split_v, "GatherV2": r_gather,
    "UnsortedSegmentSum": r_unsorted_segment_sum, "OneHot": r_one_hot, "Range": r_range,
    "MirrorPad": r_mirror_pad, "MirrorPadGrad": r_mirror_pad,
    "SpaceToBatchND": r_space_to_batch, "BatchToSpaceND": r_space_to_batch,
    "DepthToSpace": r_depth_space, "SpaceToDepth": r_depth_space, "ReverseV2": r_reverse,
    "IdentityN": r_identity_n,
    "Transpose": r_transpose, "InvertPermutation": r_invert_permutation,
    "BroadcastGradientArgs": r_broadcast_gradient_args, "ReducedShape": r_reduced_shape,
    "RandomUniform": r_random_uniform, "MatMul": r_matmul, "BiasAdd": r_bias_add,
    "Conv2D": partial(r_conv2d, geometry=_grouped_geometry),
    "Conv2DBackpropInput": partial(r_conv2d_backprop_input, geometry=_grouped_geometry),
    "Conv2DBackpropFilter": partial(r_conv2d_backprop_filter, geometry=_grouped_geometry),
    "DepthwiseConv2dNative": partial(r_conv2d, geometry=_depthwise_geometry),
    "DepthwiseConv2dNativeBackpropInput":
        partial(r_conv2d_backprop_input, geometry=_depthwise_geometry),
    "DepthwiseConv2dNativeBackpropFilter":
        partial(r_conv2d_backprop_filter, geometry=_depthwise_geometry),
    "AvgPool": r_pool, "MaxPool": r_pool, "AvgPoolGrad": r_avg_pool_grad,
    "MaxPoolGrad": r_max_pool_grad, "MaxPoolGradGrad": r_max_pool_grad,
    "Conv3D": r_conv2d, "Conv3DBackpropInputV2": r_conv2d_backprop_input,
    "Conv3DBackpropFilterV2": r_conv2d_backprop_filter, "MaxPool3D": r_pool,
    "MaxPool3DGrad": r_max_pool_grad, "MaxPool3DGradGrad": r_max_pool_grad,
    "AvgPool3D": r_pool, "AvgPool3DGrad": r_avg_pool_grad,
    "SparseSoftmaxCrossEntropyWithLogits": r_sparse_xent,
    "SoftmaxCrossEntropyWithLogits": r_xent,
    **dict.fromkeys(["ResizeNearestNeighbor", "ResizeBilinear"], r_resize),
    "ResizeNearestNeighborGrad": r_resize_nearest_grad,
    "ResizeBilinearGrad": r_resize_bilinear_grad,
    **dict.fromkeys(["BatchMatMul", "BatchMatMulV2", "BatchMatMulV3"], r_batch_matmul),
    "Einsum": r_einsum,
    **dict.fromkeys(["FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3"], r_fused_bn),
    **dict.fromkeys(["FusedBatchNormGrad", "FusedBatchNormGradV2", "FusedBatchNormGradV3",
                     "FusedBatchNormGradGrad"], r_fused_bn_grad),
    **dict.fromkeys(["BatchNormWithGlobalNormalization",
                     "BatchNormWithGlobalNormalizationGrad"], r_global_norm),
    **dict.fromkeys(["ApplyGradientDescent", "ApplyMomentum", "ApplyAdam"], r_apply),
    "Assign": r_assign,
}


def r_same_shape(g: Draw):
    """The default recipe (ops without one of their own, e.g. a new activation): every
    input an array of one shape and dtype, as elementwise ops take them."""
    dtype, shape = g.arg_dtype(g.op_def.inputs[0]), g.shape()
    return {a.name: (g.array(shape, dtype), "data") for a in g.op_def.inputs}, {}


def recipe_for(op_type: str) -> Callable:
    return RECIPES.get(op_type, r_same_shape)


def fuzzed_ops() -> list[str]:
    """Every op ``minigraph.ops`` exports that takes tensors (with its own recipe, or the
    same-shape default), plus the ops with a recipe; the same list in every process."""
    import minigraph.ops

    exported = {name for name in minigraph.ops.__all__ if name in registered_ops()
                and get_op_def(name).inputs}
    return sorted(exported | set(RECIPES))


def _random_array(g: Draw) -> ArraySpec:
    return g.array(g.shape(), g.pick(DTYPES))


@st.composite
def case_strategy(draw, op_type: str, opencl: bool = False) -> Case:
    op_def = get_op_def(op_type)
    g = Draw(draw, op_def)
    specs, attrs = recipe_for(op_type)(g)
    tags = []
    names = list(specs)
    # --- mutations: at most a few, so most cases stay close to valid
    if g.chance(15):
        name = g.pick(names)
        spec, role = specs[name]
        if role != "ref":
            specs[name] = (ArraySpec(g.shape(), spec.dtype, spec.kind, spec.seed), role)
            tags.append(f"shape:{name}")
    if g.chance(12):
        name = g.pick(names)
        spec, role = specs[name]
        specs[name] = (ArraySpec(spec.shape, g.pick(DTYPES), spec.kind, spec.seed,
                                 spec.literal), role)
        tags.append(f"dtype:{name}")
    if g.chance(20):
        name = g.pick(names)
        spec, role = specs[name]
        if spec.literal is None:
            kind = g.pick(["special", "huge", "negative", "zeros"])
            specs[name] = (ArraySpec(spec.shape, spec.dtype, kind, spec.seed), role)
            tags.append(f"values:{name}")
    if g.chance(4) and len(names) > 1:
        name = g.pick([n for n in names if specs[n][1] != "ref"] or names)
        if specs[name][1] != "ref":
            specs[name] = (_random_array(g), specs[name][1])
            tags.append(f"random:{name}")
    settable = [a for a in op_def.attrs if a.kind in BAD_ATTRS]
    if settable and g.chance(25):
        attr = g.pick(settable)
        attrs[attr.name] = g.pick(BAD_ATTRS[attr.kind])
        tags.append(f"attr:{attr.name}")
    if g.chance(3):
        attrs["no_such_attr"] = 1
        tags.append("attr:unknown")
    # --- feed modes and layouts
    inputs = []
    for name in names:
        spec, role = specs[name]
        layout = "C" if g.chance(50) else g.pick(LAYOUTS)
        if not spec.shape or (layout == "broadcast" and not spec.shape[0]) or (
                layout == "misaligned" and spec.dtype == "bool"):
            layout = "C"
        spec = ArraySpec(spec.shape, spec.dtype, spec.kind, spec.seed, spec.literal, layout)
        if role == "ref":
            inputs.append(InputSpec(name, spec, "var", role=role))
            continue
        mode = g.pick(["const", "ph", "ph_known", "ph_partial"] if role == "shape"
                      else ["const", "ph", "ph_known", "ph_known", "ph_partial"])
        if mode == "const":
            inputs.append(InputSpec(name, spec, "const", role=role))
        else:
            ph_shape = None if mode == "ph" else tuple(
                None if mode == "ph_partial" and g.chance(50) else d for d in spec.shape)
            inputs.append(InputSpec(name, spec, "ph", ph_shape, role))
    return Case(op_type, inputs, attrs, tuple(tags))


def generate(op_type: str, count: int, seed: int | None = None,
             opencl: bool = False) -> list[Case]:
    """``count`` cases for ``op_type``, drawn by hypothesis: derandomized (seeded from the
    op's name) unless ``seed`` is given; no example database, bounded generation time."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hypothesis_seed

    found: list[Case] = []

    @settings(max_examples=count, derandomize=seed is None, database=None, deadline=2000,
              suppress_health_check=list(HealthCheck), phases=["generate"])
    @given(case_strategy(op_type, opencl))
    def collect(case):
        found.append(case)

    if seed is not None:
        collect = hypothesis_seed(seed + sum(map(ord, op_type)))(collect)
    collect()
    return found[:count]
