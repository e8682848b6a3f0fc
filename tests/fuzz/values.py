"""Deterministic test arrays: ``make_array(shape, dtype, kind, seed)`` and memory layouts.

Arrays are described, not stored, so a case pickles small and its repro snippet is short.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

DTYPES = ("float16", "bfloat16", "float32", "float64", "int32", "int64", "bool")
FLOATS = ("float16", "bfloat16", "float32", "float64")
INTS = ("int32", "int64")
KINDS = ("normal", "small_int", "positive", "zeros", "special", "huge", "negative")
LAYOUTS = ("C", "F", "strided", "reversed", "broadcast", "misaligned")


def np_dtype(name: str) -> np.dtype:
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def _specials(dtype: np.dtype) -> np.ndarray:
    if dtype.kind == "f" or dtype == np.dtype(ml_dtypes.bfloat16):
        info = ml_dtypes.finfo(dtype)
        return np.array([np.nan, np.inf, -np.inf, float(info.max), -float(info.max),
                         float(info.smallest_subnormal), -0.0, 0.0, 1.0, -1.0], np.float64)
    if dtype.kind == "i":
        info = np.iinfo(dtype)
        return np.array([info.max, info.min, -1, 0, 1, 2 ** 20], np.float64)
    return np.array([0, 1], np.float64)


def make_array(shape, dtype: str, kind: str = "normal", seed: int = 0) -> np.ndarray:
    """A C-contiguous array of ``shape`` and ``dtype`` whose values follow ``kind``."""
    shape = tuple(int(d) for d in shape)
    dt = np_dtype(dtype)
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape, dtype=np.int64))
    if dtype == "bool":
        return (rng.random(n) < 0.5).reshape(shape)
    if kind == "zeros":
        base = np.zeros(n)
    elif kind == "small_int":
        base = rng.integers(-3, 4, n).astype(np.float64)
    elif kind == "positive":
        base = rng.uniform(0.25, 3.0, n)
    elif kind == "negative":
        base = -rng.uniform(0.0, 5.0, n) if dt.kind != "i" else -rng.integers(1, 10, n)
    elif kind == "special":
        specials = _specials(dt)
        base = np.where(rng.random(n) < 0.5, rng.choice(specials, n), rng.normal(0, 2, n))
    elif kind == "huge":
        if dt.kind == "i":
            info = np.iinfo(dt)
            base = rng.choice([info.max, info.min, info.max // 2], n).astype(np.float64)
        else:
            base = rng.choice([-1.0, 1.0], n) * float(ml_dtypes.finfo(dt).max) * \
                rng.uniform(0.25, 1.0, n)
    else:
        base = rng.normal(0, 2, n)
    if dt.kind == "i":
        info = np.iinfo(dt)
        with np.errstate(invalid="ignore"):
            base = np.nan_to_num(np.round(base), nan=0, posinf=info.max, neginf=info.min)
        with np.errstate(invalid="ignore", over="ignore"):
            return np.clip(base, info.min, info.max).astype(dt).reshape(shape)
    with np.errstate(over="ignore", invalid="ignore"):
        return base.astype(np.float32 if dt.itemsize <= 4 else np.float64).astype(dt) \
            .reshape(shape)


def apply_layout(array: np.ndarray, layout: str) -> np.ndarray:
    """The same values (``broadcast``: the first row repeated) in another memory layout."""
    if array.ndim == 0:
        return array.copy()
    if layout == "F":
        return np.asfortranarray(array)
    if layout == "strided" and array.ndim:
        wide = np.zeros(array.shape[:-1] + (2 * array.shape[-1],), array.dtype)
        wide[..., ::2] = array
        return wide[..., ::2]
    if layout == "reversed" and array.ndim:
        return np.ascontiguousarray(array[::-1])[::-1]
    if layout == "broadcast" and array.ndim and array.shape[0]:
        return np.broadcast_to(array[:1], array.shape)
    if layout == "misaligned" and array.dtype.itemsize > 1:
        buffer = bytearray(array.nbytes + 1)
        view = np.frombuffer(buffer, array.dtype, count=array.size, offset=1).reshape(
            array.shape)
        view[...] = array
        return view
    return array.copy(order="C")


def layout_expr(name: str, layout: str) -> str:
    """The Python expression applying ``layout`` to array ``name`` (for repro snippets)."""
    return {
        "F": f"np.asfortranarray({name})",
        "strided": f"strided({name})",
        "reversed": f"np.ascontiguousarray({name}[::-1])[::-1]",
        "broadcast": f"np.broadcast_to({name}[:1], {name}.shape)",
        "misaligned": f"misaligned({name})",
    }.get(layout, name)


@dataclass(frozen=True)
class ArraySpec:
    """An array: explicit ``literal`` values, or ``make_array(shape, dtype, kind, seed)``."""

    shape: tuple
    dtype: str
    kind: str = "normal"
    seed: int = 0
    literal: tuple | None = None
    layout: str = "C"

    def base(self) -> np.ndarray:
        if self.literal is not None:
            with np.errstate(over="ignore", invalid="ignore"):
                return np.array(self.literal, dtype=np.float64 if self.dtype in FLOATS
                                else np.int64).astype(np_dtype(self.dtype)).reshape(self.shape)
        return make_array(self.shape, self.dtype, self.kind, self.seed)

    def materialize(self) -> np.ndarray:
        return apply_layout(self.base(), self.layout)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def source(self) -> str:
        """A Python expression for the base (C-order) array."""
        if self.literal is not None or self.size <= 12:
            values = self.base().astype(np.float64 if self.dtype != "bool" else bool)
            items = [_literal(v) for v in values.ravel().tolist()]
            dt = "ml_dtypes.bfloat16" if self.dtype == "bfloat16" else f"np.{self.dtype}" \
                if self.dtype != "bool" else "np.bool_"
            return f"np.array([{', '.join(items)}], {dt}).reshape({tuple(self.shape)})"
        return (f"make_array({tuple(self.shape)}, {self.dtype!r}, {self.kind!r}, "
                f"{self.seed})")


def _literal(value) -> str:
    if isinstance(value, bool):
        return repr(value)
    if isinstance(value, float):
        if value != value:
            return "np.nan"
        if value in (float("inf"), float("-inf")):
            return "np.inf" if value > 0 else "-np.inf"
        if value.is_integer() and abs(value) < 2 ** 63:
            return repr(int(value)) if value or str(value)[0] != "-" else "-0.0"
    return repr(value)
