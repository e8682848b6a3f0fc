"""Conversions between TensorFlow's protobuf values and minigraph's: ``DataType`` enums,
``TensorShapeProto`` and ``TensorProto`` (the values of Const nodes).

A TensorProto holds its elements either as raw little-endian bytes (``tensor_content``) or in
the typed list of its dtype (``float_val``, ``int_val``...). In a typed list, fewer values
than the shape holds means the last value repeats to fill the rest (TF's compact form for
splats: ``tf.zeros`` writes one value), and none at all means zeros. float16 and bfloat16
elements sit in ``half_val`` as their 16-bit patterns widened to int32.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from minigraph.framework import dtypes, limits
from minigraph.framework.dtypes import DType
from minigraph.framework.errors import InvalidArgumentError
from minigraph.framework.tensor_shape import TensorShape
from minigraph.interop import protos

# minigraph dtype -> (TF enum name, TF's short name, TensorProto typed field)
_TF_TYPES: dict[DType, tuple[str, str, str]] = {
    dtypes.float16: ("DT_HALF", "half", "half_val"),
    dtypes.bfloat16: ("DT_BFLOAT16", "bfloat16", "half_val"),
    dtypes.float32: ("DT_FLOAT", "float", "float_val"),
    dtypes.float64: ("DT_DOUBLE", "double", "double_val"),
    dtypes.int32: ("DT_INT32", "int32", "int_val"),
    dtypes.int64: ("DT_INT64", "int64", "int64_val"),
    dtypes.bool_: ("DT_BOOL", "bool", "bool_val"),
}
_REF_OFFSET = 100  # DT_FLOAT_REF = DT_FLOAT + 100: a reference-typed (Variable) edge


def dtype_to_enum(dtype: DType) -> int:
    """``mg.float32`` -> ``DT_FLOAT``'s number."""
    return protos.data_type_numbers()[_TF_TYPES[dtype][0]]


def tf_type_name(dtype: DType) -> str:
    """TF's short name for a dtype, as its messages print it (``float``, ``half``)."""
    return _TF_TYPES[dtype][1]


def enum_name(number: int) -> str:
    """TF's name for a DataType number (``DT_STRING``), or the number when unknown."""
    names = {v: k for k, v in protos.data_type_numbers().items()}
    return names.get(number, str(number))


def enum_to_dtype(number: int, where: str) -> DType:
    """The minigraph dtype of a DataType number; reference types (``DT_FLOAT_REF``) map to
    their value type. Types minigraph lacks (strings, complex, uint8...) are refused."""
    by_number = {dtype_to_enum(d): d for d in _TF_TYPES}
    found = by_number.get(number if number < _REF_OFFSET else number - _REF_OFFSET)
    if found is None:
        supported = ", ".join(name for name, _, _ in _TF_TYPES.values())
        raise InvalidArgumentError(f"{where}: dtype {enum_name(number)} is not supported by "
                                   f"minigraph (supported: {supported})")
    return found


def shape_from_proto(proto: Any, where: str) -> TensorShape:
    """A TensorShapeProto as a TensorShape: ``unknown_rank`` -> unknown, size -1 -> None."""
    if proto.unknown_rank:
        return TensorShape(None)
    dims = []
    for dim in proto.dim:
        if dim.size < -1:
            raise InvalidArgumentError(f"{where}: shape has dimension {dim.size}; dimensions "
                                       f"are >= 0, or -1 for unknown")
        dims.append(None if dim.size == -1 else dim.size)
    return TensorShape(dims)


def shape_to_proto(shape: TensorShape, proto: Any) -> None:
    """Fill a TensorShapeProto from a TensorShape."""
    if shape.rank is None:
        proto.unknown_rank = True
        return
    for d in shape.dims:
        proto.dim.add().size = -1 if d is None else d


def array_from_proto(proto: Any, where: str) -> np.ndarray:
    """A TensorProto's value as a read-only numpy array of its dtype and shape."""
    dtype = enum_to_dtype(proto.dtype, where)
    shape = shape_from_proto(proto.tensor_shape, where)
    if shape.rank is None or not shape.is_fully_defined():
        raise InvalidArgumentError(f"{where}: a tensor value needs a fully known shape, got "
                                   f"{shape}")
    limits.check_allocation(shape, dtype.itemsize, where)
    count = shape.num_elements()
    storage = dtype.np_dtype.newbyteorder("<")
    if proto.tensor_content:
        expected = count * dtype.itemsize
        if len(proto.tensor_content) != expected:
            raise InvalidArgumentError(
                f"{where}: tensor_content holds {len(proto.tensor_content)} bytes, but a "
                f"{tf_type_name(dtype)} tensor of shape {shape} needs {expected}")
        flat = np.frombuffer(proto.tensor_content, storage)
    else:
        flat = _typed_values(proto, dtype, count, where)
    array = flat.astype(dtype.np_dtype).reshape(shape.dims)
    array.setflags(write=False)
    return array


def _typed_values(proto: Any, dtype: DType, count: int, where: str) -> np.ndarray:
    """The typed value list of a TensorProto, the last value repeated to ``count``."""
    field = _TF_TYPES[dtype][2]
    values = getattr(proto, field)
    if len(values) > count:
        raise InvalidArgumentError(f"{where}: {field} holds {len(values)} values, more than "
                                   f"the {count} elements of its shape")
    if field == "half_val":  # 16-bit patterns widened to int32
        bits = np.array(values, np.int64)
        if ((bits < 0) | (bits > 0xFFFF)).any():
            raise InvalidArgumentError(f"{where}: half_val holds a value outside 16 bits")
        raw = bits.astype(np.uint16).view(dtype.np_dtype)
    else:
        raw = np.array(values, dtype.np_dtype)
    if len(raw) == count:
        return raw
    fill = raw[-1] if len(raw) else np.zeros((), dtype.np_dtype)
    return np.concatenate([raw, np.full(count - len(raw), fill, dtype.np_dtype)])


def array_to_proto(array: np.ndarray, proto: Any) -> None:
    """Fill a TensorProto with ``array``: one element in its typed list, more as raw
    little-endian ``tensor_content`` (what TF's ``make_tensor_proto`` writes)."""
    dtype = dtypes.as_dtype(array.dtype)
    proto.dtype = dtype_to_enum(dtype)
    shape_to_proto(TensorShape(array.shape), proto.tensor_shape)
    if array.size > 1:
        proto.tensor_content = np.ascontiguousarray(
            array, dtype.np_dtype.newbyteorder("<")).tobytes()
    elif array.size == 1:
        field = _TF_TYPES[dtype][2]
        flat = np.asarray(array).reshape(1)
        value = flat.view(np.uint16)[0].item() if field == "half_val" else flat[0].item()
        getattr(proto, field).append(value)
