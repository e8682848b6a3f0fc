"""numpy CPU kernels of the elementwise, reduction and shape ops (``ops.math_ops``)."""

from __future__ import annotations

import functools
import math

import numpy as np

from minigraph.backends.activation_kernels import c_reduce_rows
from minigraph.backends.native import check_code, fbuf, ffi, lib, num_threads, out_array
from minigraph.backends.registry import find_kernel, register_kernel
from minigraph.framework import dtypes


def _elementwise(function):
    def kernel(op, inputs, ctx):
        with np.errstate(all="ignore"):
            result = function(*inputs)
        return [np.asarray(result, inputs[0].dtype)]

    return kernel


for _name, _function in {
    "Add": np.add, "AddV2": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
    "RealDiv": np.divide,
    "Neg": np.negative, "Square": lambda x: x * x, "Rsqrt": lambda x: 1 / np.sqrt(x),
    "Reciprocal": lambda x: 1 / x, "ZerosLike": np.zeros_like, "OnesLike": np.ones_like,
}.items():
    register_kernel(_name)(_elementwise(_function))


@register_kernel("AddN")
def add_n(op, inputs, ctx):
    total = inputs[0].copy()
    for value in inputs[1:]:
        total += value
    return [total]


@register_kernel("Cast")
def cast(op, inputs, ctx):
    return [inputs[0].astype(op.attrs["DstT"].np_dtype)]


@register_kernel("Cast", backend="float64", when=lambda op: op.attrs["DstT"].is_floating)
def cast_float64(op, inputs, ctx):
    """A cast to a floating type stays float64 in the float64 session."""
    return [inputs[0].astype(np.float64)]


def _axes(x: np.ndarray, axes: np.ndarray) -> tuple[int, ...]:
    """The reduction axes in [0, rank) (the shape function checked their range)."""
    return tuple(a % x.ndim for a in np.atleast_1d(axes).tolist())


@register_kernel("Sum")
def reduce_sum(op, inputs, ctx):
    x, axes = inputs
    return [np.asarray(x.sum(axis=_axes(x, axes), keepdims=op.attrs["keep_dims"]), x.dtype)]


@register_kernel("Mean")
def reduce_mean(op, inputs, ctx):
    x, axes = inputs
    with np.errstate(all="ignore"):
        value = x.mean(axis=_axes(x, axes), keepdims=op.attrs["keep_dims"])
    return [np.asarray(value, x.dtype)]


def _middle_block(x: np.ndarray, axes: tuple[int, ...]) -> tuple[int, int, int] | None:
    """(outer, rows, channels) when ``axes`` are consecutive axes of x before its last: x is
    then [outer][rows][channels] and the reduction sums its rows in numpy's order (one
    channel, the innermost, would sum pairwise instead)."""
    if not axes or sorted(axes) != list(range(min(axes), max(axes) + 1)):
        return None
    first, last = min(axes), max(axes)
    channels = math.prod(x.shape[last + 1:])
    if last == x.ndim - 1 or channels < 2:
        return None
    return math.prod(x.shape[:first]), math.prod(x.shape[first:last + 1]), channels


@register_kernel("Sum", "Mean", backend="native", dtypes=(dtypes.float32,))
def reduce_native(op, inputs, ctx):
    """Reductions over consecutive inner axes (the spatial axes of NHWC: global average
    pooling) in C, bit for bit the numpy kernels' sums; any other axes run those."""
    x, axes = inputs
    axes = _axes(x, axes)
    block = _middle_block(x, axes)
    numpy_kernel = reduce_mean if op.type == "Mean" else reduce_sum
    if block is None or x.size == 0:
        return numpy_kernel(op, inputs, ctx)
    y = c_reduce_rows(x, *block, mean=op.type == "Mean")
    keep = op.attrs["keep_dims"]
    shape = [1 if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes]
    return [y.reshape(shape)]


@register_kernel("Reshape")
def reshape(op, inputs, ctx):
    x, shape = inputs
    return [x.reshape(shape.tolist())]


@register_kernel("Transpose")
def transpose(op, inputs, ctx):
    x, perm = inputs
    return [np.array(x.transpose(perm.tolist()), order="C")]  # keeps a 0-d tensor 0-d


@register_kernel("InvertPermutation")
def invert_permutation(op, inputs, ctx):
    return [np.argsort(inputs[0]).astype(inputs[0].dtype)]


@register_kernel("Shape")
def shape(op, inputs, ctx):
    return [np.array(inputs[0].shape, op.attrs["out_type"].np_dtype)]


@register_kernel("Size")
def size(op, inputs, ctx):
    return [np.array(inputs[0].size, op.attrs["out_type"].np_dtype)]


@register_kernel("Fill")
def fill(op, inputs, ctx):
    dims, value = inputs
    return [np.full(dims.tolist(), value, value.dtype)]


@register_kernel("BroadcastTo")
def broadcast_to(op, inputs, ctx):
    """A read-only broadcast view: no copy (gradients of Sum/Mean broadcast a cotangent over
    the whole input, and the consumer reads it once)."""
    x, shape = inputs
    return [np.broadcast_to(x, shape.tolist())]


@register_kernel("ReducedShape")
def reduced_shape(op, inputs, ctx):
    """The input shape with every reduced axis set to 1 (the keep_dims shape)."""
    input_shape, axes = inputs
    result = input_shape.copy()
    result[np.atleast_1d(axes) % max(len(input_shape), 1)] = 1
    return [result]


@register_kernel("BroadcastGradientArgs")
def broadcast_gradient_args(op, inputs, ctx):
    """For z = f(x, y) broadcast, the axes of z to sum so each gradient gets x's / y's shape."""
    s0, s1 = (s.tolist() for s in inputs)
    rank = max(len(s0), len(s1))
    padded = [[1] * (rank - len(s)) + s for s in (s0, s1)]
    out = np.broadcast_shapes(tuple(padded[0]), tuple(padded[1]))
    return [np.array([i for i in range(rank) if p[i] == 1 and out[i] != 1],
                     op.attrs["T"].np_dtype) for p in padded]


# ----------------------------------------------------------------------------- native broadcasting
# Binary float32 ops in C (kernels_c/broadcast*): one IEEE single operation per element, so
# bit for bit the numpy kernels above, on the worker pool. Another binary op joins with one
# line in kernels_c/broadcast_internal.h's list and one register_native_binary call.


@functools.lru_cache(maxsize=1024)
def broadcast_plan(x_shape: tuple[int, ...], y_shape: tuple[int, ...]):
    """What ``mg_broadcast`` needs for x of ``x_shape`` OP y of ``y_shape`` (shapes that
    broadcast): ``(z_shape, rank, dims, x_dims, y_dims)``, the three as cffi ``int64_t``
    arrays, with size-1 dimensions of z dropped and neighbouring dimensions that x and y
    broadcast alike merged ([N,H,W,C] * [1,1,1,C] -> [NHW, C] * [1, C]; same shapes and
    scalars -> rank 1). Every size follows from the shapes, so C reads exactly x.size,
    y.size and writes z.size floats. None when more than ``MG_BROADCAST_MAX_RANK``
    dimensions remain or z is empty."""
    z_shape = np.broadcast_shapes(x_shape, y_shape)
    rank = len(z_shape)
    x_full = (1,) * (rank - len(x_shape)) + tuple(x_shape)
    y_full = (1,) * (rank - len(y_shape)) + tuple(y_shape)
    dims: list[int] = []
    x_dims: list[int] = []
    y_dims: list[int] = []
    previous = None
    for n, a, b in zip(z_shape, x_full, y_full):
        if n == 1:
            continue
        kind = (a == 1, b == 1)
        if kind == previous:
            dims[-1], x_dims[-1], y_dims[-1] = dims[-1] * n, x_dims[-1] * a, y_dims[-1] * b
        else:
            dims.append(n)
            x_dims.append(a)
            y_dims.append(b)
            previous = kind
    if 0 in dims or len(dims) > lib.MG_BROADCAST_MAX_RANK:
        return None
    dims, x_dims, y_dims = (dims, x_dims, y_dims) if dims else ([1], [1], [1])
    return (z_shape, len(dims), *(ffi.new("int64_t[]", d) for d in (dims, x_dims, y_dims)))


@functools.cache
def _broadcast_ops() -> dict[str, int]:
    """kernels_c/broadcast_internal.h's ops: name -> index."""
    return {ffi.string(lib.mg_broadcast_op_name(i)).decode(): i
            for i in range(lib.mg_broadcast_op_count())}


def _plain_f32(array) -> bool:
    flags = array.flags
    return array.dtype == np.float32 and flags.c_contiguous and flags.aligned


def c_broadcast(c_name: str, x: np.ndarray, y: np.ndarray, out: np.ndarray | None = None
                ) -> np.ndarray | None:
    """``x OP y`` with numpy broadcasting, OP the op ``c_name`` of kernels_c/broadcast's
    list, for C-contiguous aligned float32 arrays, written into ``out`` where it fits (x or
    y of the result's shape: each loop reads element i before writing it); None for
    anything else (other dtypes or layouts, empty results, more merged dimensions than C
    takes)."""
    if not (_plain_f32(x) and _plain_f32(y)):
        return None
    plan = broadcast_plan(x.shape, y.shape)
    if plan is None:
        return None
    z_shape, rank, dims, x_dims, y_dims = plan
    z = out_array(out, z_shape, x, y)
    check_code(lib.mg_broadcast(_broadcast_ops()[c_name], rank, dims, x_dims, y_dims,
                                fbuf(x), fbuf(y), fbuf(z), num_threads()), c_name)
    return z


def register_native_binary(op_type: str, c_name: str) -> None:
    """Register ``op_type``'s float32 kernel on the native backend: ``c_broadcast(c_name,
    x, y)``, and the op's reference kernel where C takes no such arrays (one line per op:
    ``register_native_binary("Maximum", "maximum")`` once the list has a maximum)."""
    def kernel(op, inputs, ctx, out=None):
        z = c_broadcast(c_name, *inputs, out=out)
        if z is None:
            return find_kernel(op, "reference").kernel(op, inputs, ctx)
        return [z]

    kernel.__name__ = f"{c_name}_native"
    register_kernel(op_type, backend="native", dtypes=(dtypes.float32,),
                    inplace=(0, 1))(kernel)


for _name, _c_name in {"Add": "add", "AddV2": "add", "Sub": "sub", "Mul": "mul",
                       "Div": "div", "RealDiv": "div", "Maximum": "maximum",
                       "Minimum": "minimum", "SquaredDifference": "squared_difference"}.items():
    register_native_binary(_name, _c_name)
