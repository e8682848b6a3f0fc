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
