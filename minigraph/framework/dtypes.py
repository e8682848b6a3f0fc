"""Data types: a small, closed set mirroring TensorFlow's DType names.

Each :class:`DType` wraps the numpy dtype that stores it; bfloat16 is stored as
``ml_dtypes.bfloat16``. ``as_dtype`` converts anything a user may pass (a DType, a numpy
dtype or type, a TF-style name) and rejects everything else with a clear error.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from minigraph.framework.errors import InvalidArgumentError


class DType:
    """One tensor element type: its TF name (``float32``) and numpy storage dtype."""

    __slots__ = ("name", "np_dtype")

    def __init__(self, name: str, np_dtype: np.dtype) -> None:
        self.name = name
        self.np_dtype = np.dtype(np_dtype)

    @property
    def is_floating(self) -> bool:
        return self in (float16, bfloat16, float32, float64)

    @property
    def as_numpy_dtype(self) -> type:
        """The numpy scalar type that stores it (TF's ``DType.as_numpy_dtype``)."""
        return self.np_dtype.type

    @property
    def is_integer(self) -> bool:
        return self in (int32, int64)

    @property
    def itemsize(self) -> int:
        return self.np_dtype.itemsize

    def __repr__(self) -> str:
        return f"mg.{self.name}"

    def __str__(self) -> str:
        return self.name

    def __reduce__(self):
        return (as_dtype, (self.name,))


float16 = DType("float16", np.float16)
half = float16
bfloat16 = DType("bfloat16", ml_dtypes.bfloat16)
float32 = DType("float32", np.float32)
float64 = DType("float64", np.float64)
int32 = DType("int32", np.int32)
int64 = DType("int64", np.int64)
bool_ = DType("bool", np.bool_)

ALL_DTYPES = (float16, bfloat16, float32, float64, int32, int64, bool_)
# The groups op definitions constrain their type attrs with (one place for all of them).
FLOATING = (float16, bfloat16, float32, float64)
HALF_AND_FLOAT32 = (float16, bfloat16, float32)  # batch norm's T: statistics in float32
INTEGERS = (int32, int64)  # also TF's index types (axes, shapes, labels)
NUMBERS = FLOATING + INTEGERS
_BY_NAME = {d.name: d for d in ALL_DTYPES}
_BY_NAME.update({"half": float16, "float": float32, "double": float64})
_BY_NUMPY = {d.np_dtype: d for d in ALL_DTYPES}


def as_dtype(value: object) -> DType:
    """Return the :class:`DType` for a DType, numpy dtype/type or name; raise otherwise."""
    if isinstance(value, DType):
        return value
    if isinstance(value, str) and value in _BY_NAME:
        return _BY_NAME[value]
    try:
        found = _BY_NUMPY.get(np.dtype(value))
    except TypeError:
        found = None
    if found is None:
        names = ", ".join(d.name for d in ALL_DTYPES)
        raise InvalidArgumentError(f"unsupported dtype {value!r}; expected one of: {names}")
    return found


def _python_kind(array: np.ndarray) -> str:
    """"bool", "int" or "float" for an array numpy made from Python values, else ""."""
    if array.dtype == np.bool_:
        return "bool"
    if array.dtype.kind in "iu":
        return "int"
    if array.dtype.kind == "f":
        return "float"
    return ""


def python_to_array(value: object, dtype: DType | None, what: str) -> np.ndarray:
    """A Python scalar or (nested) list as an array of ``dtype``, only when that loses nothing
    but float rounding; ``what`` names the input in errors ("feed for 'x:0'").

    One rule for feeds and for values given to ops: bools become only bool; ints become an
    integer type they fit in, or a float type; floats become only a float type, and never
    overflow to infinity. Without ``dtype``, floats become float32 and ints int32 (int64
    when they do not fit), TensorFlow's conversion rule.
    """
    if value is None:
        raise InvalidArgumentError(f"{what} is None, expected a tensor value")
    try:
        array = np.asarray(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidArgumentError(f"{what} cannot be converted to a tensor: {exc}") from None
    kind = _python_kind(array)
    if not kind:
        if array.dtype == object and any(isinstance(v, int) for v in array.flat):
            detail = "an integer is out of the int64 range"
        else:
            detail = f"got {type(value).__name__} of unsupported dtype {array.dtype}"
        raise InvalidArgumentError(f"{what} cannot be converted to a tensor: {detail}; "
                                   f"expected numbers or bools")
    if dtype is None:
        if kind == "float":
            dtype = float32
        elif kind == "int":
            small = array.size == 0 or (array.min() >= -2 ** 31 and array.max() < 2 ** 31)
            dtype = int32 if small else int64
        else:
            dtype = bool_
    target = dtype.np_dtype
    allowed = {"bool": dtype is bool_, "int": dtype is not bool_,
               "float": dtype.is_floating}[kind]
    if not allowed:
        raise InvalidArgumentError(f"{what} cannot be converted to {dtype.name} without loss: "
                                   f"it holds Python {kind} values")
    if kind == "int" and not dtype.is_floating and array.size:
        info = np.iinfo(target)
        if array.min() < info.min or array.max() > info.max:
            raise InvalidArgumentError(f"{what} cannot be converted to {dtype.name}: a value "
                                       f"is out of its range [{info.min}, {info.max}]")
    with np.errstate(over="ignore"):
        converted = array.astype(target)
    if dtype.is_floating and kind != "bool":
        overflow = np.isinf(converted.astype(np.float64)) & np.isfinite(array)
        if overflow.any():
            raise InvalidArgumentError(f"{what} cannot be converted to {dtype.name}: a value "
                                       f"overflows it")
    return converted
