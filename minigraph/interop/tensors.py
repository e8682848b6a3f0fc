"""Conversions between TensorFlow's protobuf values and minigraph's: ``DataType`` enums,
``TensorShapeProto`` and ``TensorProto`` (the values of Const nodes).

A TensorProto holds its elements either as raw little-endian bytes (``tensor_content``) or in
the typed list of its dtype (``float_val``, ``int_val``...). In a typed list, fewer values
than the shape holds means the last value repeats to fill the rest (TF's compact form for
splats: ``tf.zeros`` writes one value), none at all means zeros, and values beyond the
shape's elements are ignored (as TF's ``Tensor::FromProto``). float16 and bfloat16 elements
sit in ``half_val`` as their 16-bit patterns widened to int32 (TF keeps the low 16 bits).
A file is hostile by default: shapes are checked as TF checks them (and against numpy's
limits and this machine's memory) before anything is allocated, and one repeated value is
held as a read-only broadcast rather than expanded.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from minigraph.framework import dtypes, limits
from minigraph.framework.dtypes import DType
from minigraph.framework.errors import InvalidArgumentError, ResourceExhaustedError
from minigraph.framework.tensor_shape import TensorShape, dims_text
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
    """A TensorShapeProto as a TensorShape (``unknown_rank`` -> unknown, size -1 -> None),
    checked as TF checks one (``PartialTensorShape::IsValidShape``, TF's words): no dims
    with unknown rank, at most 254 dims, none below -1, and the known dims before the first
    unknown one multiplying to at most 2**63 - 1."""
    if proto.unknown_rank:
        if len(proto.dim):
            raise InvalidArgumentError(f"{where}: An unknown shape must not have any "
                                       f"dimensions set.")
        return TensorShape(None)
    sizes = [dim.size for dim in proto.dim]
    if len(sizes) > limits.TF_MAX_RANK:
        raise InvalidArgumentError(f"{where}: Shape {dims_text(sizes)} has too many dimensions "
                                   f"({len(sizes)}; at most {limits.TF_MAX_RANK})")
    if any(size < -1 for size in sizes):
        raise InvalidArgumentError(f"{where}: Shape {dims_text(sizes)} has dimensions with "
                                   f"values below -1 (where -1 means unknown)")
    known = sizes[:sizes.index(-1)] if -1 in sizes else sizes
    limits.check_dims(known, where)  # only TF's overflow rule applies to a prefix
    return TensorShape([None if size == -1 else size for size in sizes])


def shape_to_proto(shape: TensorShape, proto: Any) -> None:
    """Fill a TensorShapeProto from a TensorShape."""
    if shape.rank is None:
        proto.unknown_rank = True
        return
    for d in shape.dims:
        proto.dim.add().size = -1 if d is None else d


def array_from_proto(proto: Any, where: str) -> np.ndarray:
    """A TensorProto's value as a read-only numpy array of its dtype and shape.

    Decoded as TF's ``Tensor::FromProto`` decodes it: a shape with ``unknown_rank`` and no
    dims is a scalar; typed values beyond the shape's element count are ignored, and fewer
    repeat the last one (none: zeros). One repeated value is held as a read-only broadcast,
    so a file of 80 bytes claiming 2**30 elements costs one element; a longer list is
    expanded only after its size is checked against this machine's memory. numpy's limits
    (64 dims) are refused with UnimplementedError.
    """
    dtype = enum_to_dtype(proto.dtype, where)
    shape_proto = proto.tensor_shape
    if shape_proto.unknown_rank and not len(shape_proto.dim):
        shape = TensorShape([])
    else:
        shape = shape_from_proto(shape_proto, where)
    if not shape.is_fully_defined():
        raise InvalidArgumentError(f"{where}: a tensor value needs a fully known shape, got "
                                   f"{shape}")
    limits.check_allocation(shape, dtype.itemsize, where)
    count = shape.num_elements()
    if proto.tensor_content:
        expected = count * dtype.itemsize
        if len(proto.tensor_content) != expected:
            raise InvalidArgumentError(
                f"{where}: tensor_content holds {len(proto.tensor_content):,} bytes, but a "
                f"{tf_type_name(dtype)} tensor of shape {shape} needs {expected:,}")
        storage = dtype.np_dtype.newbyteorder("<")
        array = np.frombuffer(proto.tensor_content, storage).astype(dtype.np_dtype)
        array = array.reshape(shape.dims)
    else:
        array = _typed_values(proto, dtype, shape, where)
    array.setflags(write=False)
    return array


def _typed_values(proto: Any, dtype: DType, shape: TensorShape, where: str) -> np.ndarray:
    """The typed value list of a TensorProto, TF's way: at most the shape's element count
    of them, the last repeated to fill the rest (a broadcast when it is the only one)."""
    field = _TF_TYPES[dtype][2]
    values = getattr(proto, field)
    count = shape.num_elements()
    given = min(len(values), count)
    if field == "half_val":  # 16-bit patterns widened to int32: TF keeps the low 16 bits
        bits = np.fromiter(values, np.int64, count=given) & 0xFFFF
        raw = bits.astype(np.uint16).view(dtype.np_dtype)
    else:  # one element at a time: no Python list of every value first
        raw = np.fromiter(values, dtype.np_dtype, count=given)
    if given == count:
        return raw.reshape(shape.dims)
    fill = raw[-1] if given else np.zeros((), dtype.np_dtype)
    if given <= 1:
        return np.broadcast_to(fill, shape.dims)
    try:
        return np.concatenate([raw, np.full(count - given, fill, dtype.np_dtype)]
                              ).reshape(shape.dims)
    except MemoryError:
        raise ResourceExhaustedError(f"{where}: {given} values repeated to the "
                                     f"{count:,} elements of shape {shape} do not fit in "
                                     f"memory") from None


def array_to_proto(array: np.ndarray, proto: Any) -> None:
    """Fill a TensorProto with ``array``: one element in its typed list, more as raw
    little-endian ``tensor_content`` (what TF's ``make_tensor_proto`` writes); a broadcast
    of one value (every stride 0) as that one value, which TF repeats."""
    dtype = dtypes.as_dtype(array.dtype)
    proto.dtype = dtype_to_enum(dtype)
    shape_to_proto(TensorShape(array.shape), proto.tensor_shape)
    if array.size > 1 and any(array.strides):
        proto.tensor_content = np.ascontiguousarray(
            array, dtype.np_dtype.newbyteorder("<")).tobytes()
    elif array.size >= 1:  # one value, or one repeated (a broadcast): TF's compact form
        field = _TF_TYPES[dtype][2]
        flat = np.array(np.asarray(array)[(0,) * array.ndim]).reshape(1)  # never expands
        value = flat.view(np.uint16)[0].item() if field == "half_val" else flat[0].item()
        getattr(proto, field).append(value)
