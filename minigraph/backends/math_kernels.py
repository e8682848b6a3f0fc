"""numpy CPU kernels of the elementwise, reduction and shape ops (``ops.math_ops``)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from minigraph.backends.native import (
    as_f32,
    c_call,
    check_code,
    fbuf,
    ffi,
    lib,
    num_threads,
    out_array,
    plain_f32,
)
from minigraph.backends.registry import (
    find_kernel,
    register_kernel,
    set_replay,
    while_unchanged,
)
from minigraph.framework import dtypes

F32 = np.float32


def _elementwise(function, exact_on_integers: bool = False):
    """The reference kernel of ``function`` (IEEE results: no floating-point error raised).
    ``exact_on_integers``: on integer inputs it never signals one (add, multiply: they
    wrap), so numpy's error state need not be set (1.2 us a call, a loop counter's add)."""
    def kernel(op, inputs, ctx):
        if exact_on_integers and inputs[0].dtype.kind in "iu":
            return [np.asarray(function(*inputs), inputs[0].dtype)]
        with np.errstate(all="ignore"):
            result = function(*inputs)
        return [np.asarray(result, inputs[0].dtype)]

    return kernel


def same_dtype_replay(function: np.ufunc) -> Callable:
    """The replay maker (``registry.ReplayMaker``) of a kernel computing the ufunc
    ``function`` in its inputs' own dtype: the ufunc into the fixed output, where every input
    has the output's dtype and ``kinds`` (a loop counter's integer add, its comparison)."""
    def maker(op, values: list, outputs: list, ctx=None) -> Callable[[], None] | None:
        out = outputs[0]
        if (any(type(v) is not np.ndarray or v.dtype != values[0].dtype for v in values)
                or type(out) is not np.ndarray or not out.flags.writeable
                or np.broadcast_shapes(*(v.shape for v in values)) != out.shape):
            return None
        return functools.partial(function, *values, out=out)

    return maker


def _integer_replay(function: np.ufunc) -> Callable:
    """:func:`same_dtype_replay` for integer inputs of the output's dtype only (the kernel
    computes floats under its error state and rounding rules)."""
    maker = same_dtype_replay(function)

    def integer_maker(op, values: list, outputs: list, ctx=None) -> Callable[[], None] | None:
        if outputs[0].dtype.kind not in "iu" or values[0].dtype != outputs[0].dtype:
            return None
        return maker(op, values, outputs, ctx)

    return integer_maker


for _name, _function in {
    "Add": np.add, "AddV2": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
    "RealDiv": np.divide,
    "Neg": np.negative, "Square": lambda x: x * x, "Rsqrt": lambda x: 1 / np.sqrt(x),
    "Reciprocal": lambda x: 1 / x, "ZerosLike": np.zeros_like, "OnesLike": np.ones_like,
}.items():
    _exact = _name in ("Add", "AddV2", "Sub", "Mul", "Neg", "Square")
    _kernel = register_kernel(_name)(_elementwise(_function, _exact))
    if _exact and isinstance(_function, np.ufunc):
        set_replay(_kernel, _integer_replay(_function))


@register_kernel("AddN")
def add_n(op, inputs, ctx):
    total = inputs[0].copy()
    for value in inputs[1:]:
        total += value
    return [total]


@register_kernel("AddN", backend="native", dtypes=(dtypes.float32,), inplace=(0, 1))
def add_n_native(op, inputs, ctx, out=None):
    """``c_add_n``: the numpy kernel's sums (input order) bit for bit; into ``out`` (the
    memory planner's dying first or second input, or its arena buffer) where it fits."""
    return [c_add_n(inputs, out=out)]


def c_add_n(inputs: list[np.ndarray], out: np.ndarray | None = None) -> np.ndarray:
    """x[0] + x[1] + ... elementwise in input order (kernels_c/optimizers.h), float32 arrays
    of one shape (checked: C reads that many elements of each). The result is written into
    ``out`` where it fits (``native.out_array``) and is x[0], x[1] or shares no memory with
    any input (C's blocks store x[0] + x[1] before reading x[2], so a later input must not
    be the output), else into a new array."""
    arrays = [as_f32(x) for x in inputs]
    first = arrays[0]
    for index, x in enumerate(arrays[1:], 1):
        if x.shape != first.shape:
            raise ValueError(f"native AddN: inputs[{index}] must have shape {first.shape}, "
                             f"got {x.shape}")
    if out is not None and any(np.may_share_memory(out, x) for x in arrays[2:]):
        out = None
    y = out_array(out, first.shape, *arrays[:2])
    pointers = ffi.new("float *[]", [fbuf(x) for x in arrays])
    check_code(lib.mg_add_n(first.size, len(arrays), pointers, fbuf(y), num_threads()), "AddN")
    return y


@register_kernel("Cast")
def cast(op, inputs, ctx):
    return [inputs[0].astype(op.attrs["DstT"].np_dtype)]


@register_kernel("Cast", backend="native", dtypes=(dtypes.float32,),
                 when=lambda op: op.attrs["SrcT"] is dtypes.int32)
def cast_int32_native(op, inputs, ctx):
    """int32 -> float32 in C (round to nearest even: numpy's astype bit for bit)."""
    x = np.asarray(inputs[0], np.int32, order="C")  # (keeps a 0-d tensor 0-d)
    y = np.empty(x.shape, F32)
    check_code(lib.mg_int32_to_float(x.size, ffi.from_buffer("int32_t[]", x), fbuf(y),
                                     num_threads()), "Cast")
    return [y]


@register_kernel("OnesLike", "ZerosLike", backend="native", dtypes=(dtypes.float32,))
def fill_like_native(op, inputs, ctx):
    return [c_fill(inputs[0].shape, 1.0 if op.type == "OnesLike" else 0.0)]


def c_fill(shape: tuple[int, ...], value: float) -> np.ndarray:
    """A new float32 array of ``shape`` holding ``value`` everywhere, written in C."""
    y = np.empty(shape, F32)
    check_code(lib.mg_fill(y.size, float(value), fbuf(y), num_threads()), "Fill")
    return y


@register_kernel("Cast", backend="float64", when=lambda op: op.attrs["DstT"].is_floating)
def cast_float64(op, inputs, ctx):
    """A cast to a floating type stays float64 in the float64 session."""
    return [inputs[0].astype(np.float64)]


def _axes(x: np.ndarray, axes: np.ndarray) -> tuple[int, ...]:
    """The reduction axes in [0, rank) (the shape function checked their range)."""
    listed = np.asarray(axes).tolist()  # (np.atleast_1d's Python layer, at every step)
    return tuple(a % x.ndim for a in (listed if type(listed) is list else [listed]))


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


def _runs(shape: tuple[int, ...], axes: set[int]) -> list[list]:
    """``shape`` as runs ``[size, reduced]`` of neighbouring axes alike (reduced or kept),
    size-1 axes dropped (they add nothing to any sum)."""
    runs: list[list] = []
    for i, n in enumerate(shape):
        if n == 1:
            continue
        reduced = i in axes
        if runs and runs[-1][1] == reduced:
            runs[-1][0] *= n
        else:
            runs.append([n, reduced])
    return runs


def _offsets(runs: list[list], strides: list[int]) -> np.ndarray:
    """The element offsets of every multi-index over ``runs`` (row-major), as int64."""
    offsets = np.zeros(1, np.int64)
    for (size, _), stride in zip(runs, strides):
        offsets = (offsets[:, None] + np.arange(size, dtype=np.int64) * stride).ravel()
    return offsets


@functools.lru_cache(maxsize=1024)
def reduce_plan(shape: tuple[int, ...], axes: tuple[int, ...], mean: bool):
    """``c_reduce``'s C calls for x of ``shape`` reduced over ``axes`` (in [0, rank)), which
    follow from the shapes alone (cached: a model reduces a few shapes over and over):
    None when only size-1 axes are reduced; else ``(inner, outer)``: ``inner`` the
    ``(outer, rows, divisor)`` of ``mg_reduce_inner`` over a trailing run of reduced axes
    (or None), ``outer`` the ``(outer, rows, channels, divisor, offsets)`` of what remains
    (None when nothing does), ``offsets`` None for ``mg_reduce_rows`` or the two int64
    buffers of ``mg_reduce_gather`` (cffi keeps their arrays alive)."""
    runs = _runs(shape, set(axes))
    if not any(reduced for _, reduced in runs):  # only size-1 axes: each sum is +0 + x
        return None
    count = math.prod(shape[a] for a in axes)
    inner = None
    if runs[-1][1]:  # a trailing run: pairwise rows
        final = len(runs) == 1 or not any(reduced for _, reduced in runs[:-1])
        inner = (math.prod(n for n, _ in runs[:-1]), runs[-1][0],
                 count if mean and final else 0)
        if final:
            return inner, None
        runs = runs[:-1]
    channels = runs[-1][0]
    strides = [math.prod(n for n, _ in runs[i + 1:]) for i in range(len(runs))]
    kept = [(run, stride) for run, stride in zip(runs[:-1], strides) if not run[1]]
    reduced = [(run, stride) for run, stride in zip(runs, strides) if run[1]]
    offsets = None
    if not (len(reduced) == 1 and len(kept) <= 1):  # not [outer][rows][channels]: gather
        offsets = tuple(ffi.from_buffer("int64_t[]", _offsets([r for r, _ in part],
                                                              [s for _, s in part]))
                        for part in (kept, reduced))
    return inner, (math.prod(run[0] for run, _ in kept),
                   math.prod(run[0] for run, _ in reduced), channels,
                   count if mean else 0, offsets)


def c_reduce(x: np.ndarray, axes: tuple[int, ...], mean: bool) -> np.ndarray:
    """Sum (mean) of float32 x over ``axes`` in C, flat ([kept elements] in x's order), in
    numpy's order, so its float32 results bit for bit:

    - reduced axes at the end (one run of them): each row pairwise (``mg_reduce_inner``:
      +0, then numpy's blocks of 8), then what remains as below;
    - otherwise (kept axes at the end: channels): one running sum per output from +0 over
      the reduced indices in row-major order (``mg_reduce_rows`` for a single run of
      neighbouring reduced axes, ``mg_reduce_gather`` for several).

    Bound: |error| <= (reduced count) * 2^-24 * sum|x| (the pairwise rows do better). A
    mean divides the final sums by the count of reduced elements once, in double (numpy's
    true_divide by its integer count)."""
    x = as_f32(x)
    plan = reduce_plan(x.shape, tuple(axes), mean)
    if plan is None:
        return c_broadcast("add", x, np.zeros((), F32)).ravel()
    inner, outer_plan = plan
    what = "Mean" if mean else "Sum"
    if inner is not None:
        outer, rows, divisor = inner
        y = np.empty(outer, F32)
        code = lib.mg_reduce_inner(outer, rows, fbuf(x), fbuf(y), divisor, num_threads())
        if code:
            check_code(code, what)
        if outer_plan is None:
            return y
        x = y
    outer, rows, channels, divisor, offsets = outer_plan
    y = np.empty(outer * channels, F32)
    if offsets is None:
        code = lib.mg_reduce_rows(outer, rows, channels, fbuf(x), fbuf(y), divisor,
                                  num_threads())
    else:
        code = lib.mg_reduce_gather(outer, rows, channels, *offsets, fbuf(x), fbuf(y),
                                    divisor, num_threads())
    if code:
        check_code(code, what)
    return y


@register_kernel("Sum", "Mean", backend="native", dtypes=(dtypes.float32,))
def reduce_native(op, inputs, ctx):
    """Sum and Mean over any axes in C (``c_reduce``: numpy's float32 results bit for bit);
    an empty x runs the numpy kernel (no element to add: it only fills zeros or NaNs)."""
    x, axes = inputs
    axes = _axes(x, axes)
    if x.size == 0:
        numpy_kernel = reduce_mean if op.type == "Mean" else reduce_sum
        return numpy_kernel(op, inputs, ctx)
    y = c_reduce(x, axes, mean=op.type == "Mean")
    keep = op.attrs["keep_dims"]
    shape = [1 if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes]
    return [y.reshape(shape)]


def _reduce_replay(op, values: list, outputs: list, ctx):
    """``reduce_native`` on fixed arrays (``registry.ReplayMaker``): the one C call of
    :func:`c_reduce`'s plan (a global average pool's ``mg_reduce_rows``), its arguments made
    once; None for plans of two calls or none. A call whose axes hold other values than when
    made runs the kernel."""
    x, axes = values
    out = outputs[0]
    if not (plain_f32(x) and x.size and plain_f32(out) and out.flags.writeable):
        return None
    plan = reduce_plan(x.shape, _axes(x, axes), op.type == "Mean")
    if plan is None or plan[0] is not None and plan[1] is not None:
        return None
    inner, outer_plan = plan
    if inner is not None:
        outer, rows, divisor = inner
        function, args = lib.mg_reduce_inner, (outer, rows, fbuf(x), fbuf(out), divisor)
        size = outer
    else:
        outer, rows, channels, divisor, offsets = outer_plan
        size = outer * channels
        function, args = (
            (lib.mg_reduce_rows, (outer, rows, channels, fbuf(x), fbuf(out), divisor))
            if offsets is None else
            (lib.mg_reduce_gather, (outer, rows, channels, *offsets, fbuf(x), fbuf(out),
                                    divisor)))
    if out.size != size:
        return None
    reduced = c_call(function, (*args, num_threads()), op.type, (values, outputs, outer_plan))
    return while_unchanged([axes], reduced, op, outputs, reduce_native, values, ctx)


set_replay(reduce_native, _reduce_replay)


@register_kernel("Reshape")
def reshape(op, inputs, ctx):
    x, shape = inputs
    return [x.reshape(shape.tolist())]


@register_kernel("Transpose")
def transpose(op, inputs, ctx):
    x, perm = inputs
    return [np.array(x.transpose(perm.tolist()), order="C")]  # keeps a 0-d tensor 0-d


# Below this many elements numpy's copy is faster than c_transpose, whose setup costs about
# 5 us (2 threads: a recurrent layer's [B, T, F] -> [T, B, F] of 2 x 8 x 3 floats took 5.8 us
# against numpy's 0.5; at 16384 elements 6.6 against 2.0 moving a middle axis, about even
# moving the last; from 32768 on C is up to 2x faster).
SMALL_TRANSPOSE = 1 << 14


@register_kernel("Transpose", backend="native", dtypes=(dtypes.float32,))
def transpose_native(op, inputs, ctx):
    """``c_transpose``; the numpy kernel (the same copy) for small tensors and the rare
    permutation that keeps more than 8 axes apart after merging."""
    x, perm = inputs
    if x.size < SMALL_TRANSPOSE:
        return transpose(op, inputs, ctx)
    axes = [int(p) % max(x.ndim, 1) for p in perm.tolist()]
    if len(_merged_permutation(x.shape, axes)[0]) > 8:
        return transpose(op, inputs, ctx)
    return [c_transpose(x, axes)]


def _merged_permutation(shape: tuple[int, ...], perm: list[int]) -> tuple[list, list]:
    """(dims, perm) of the same transpose with size-1 axes dropped and axes that stay
    neighbours (in order) merged: NHWC -> NCHW is [N, HW, C] -> (0, 2, 1)."""
    kept = [a for a in perm if shape[a] != 1]
    groups: list[list[int]] = []
    for axis in kept:
        if groups and axis == groups[-1][-1] + 1:
            groups[-1].append(axis)
        else:
            groups.append([axis])
    order = sorted(range(len(groups)), key=lambda g: groups[g][0])  # groups in x's order
    dims = [math.prod(shape[a] for a in groups[g]) for g in order]
    rank_of = {g: i for i, g in enumerate(order)}
    return dims, [rank_of[g] for g in range(len(groups))]


def c_transpose(x: np.ndarray, perm: list[int]) -> np.ndarray:
    """x with its axes permuted (y's axis i is x's axis perm[i]; a permutation of x's
    axes, checked), copied in C; a new C-contiguous float32 array."""
    x = as_f32(x)
    if sorted(perm) != list(range(x.ndim)):
        raise ValueError(f"native Transpose: {perm} is not a permutation of {x.ndim} axes")
    y = np.empty(tuple(x.shape[a] for a in perm), F32)
    dims, merged = _merged_permutation(x.shape, perm)
    if len(dims) > 8:
        raise ValueError(f"native Transpose: {len(dims)} axes after merging (at most 8)")
    if not dims:  # a scalar, or only size-1 axes: one element
        dims, merged = [1], [0]
    if x.size:
        check_code(lib.mg_transpose(len(dims), ffi.new("int64_t[]", dims),
                                    ffi.new("int[]", merged), fbuf(x), fbuf(y),
                                    num_threads()), "Transpose")
    return y


@register_kernel("InvertPermutation")
def invert_permutation(op, inputs, ctx):
    return [np.argsort(inputs[0]).astype(inputs[0].dtype)]


@register_kernel("Shape")
def shape(op, inputs, ctx):
    return [np.array(inputs[0].shape, op.attrs["out_type"].np_dtype)]


@register_kernel("Size")
def size(op, inputs, ctx):
    return [np.array(inputs[0].size, op.attrs["out_type"].np_dtype)]


@register_kernel("Rank")
def rank(op, inputs, ctx):
    return [np.array(inputs[0].ndim, np.int32)]


@register_kernel("BroadcastArgs")
def broadcast_args(op, inputs, ctx):
    """The broadcast shape of two shape vectors (the shape function checked they
    broadcast)."""
    s0, s1 = inputs
    return [np.array(np.broadcast_shapes(tuple(s0.tolist()), tuple(s1.tolist())), s0.dtype)]


@register_kernel("Fill")
def fill(op, inputs, ctx):
    dims, value = inputs
    return [np.full(dims.tolist(), value, value.dtype)]


def broadcast_view(x: np.ndarray, shape: tuple[int, ...] | list[int]) -> np.ndarray:
    """``np.broadcast_to(x, shape)``: the same read-only view of ``x`` (stride 0 along the
    broadcast axes, ``x`` its base), built directly for a non-empty C-contiguous ndarray:
    np.broadcast_to's Python layer (an nditer) costs 3-4x as much at every step that
    broadcasts a gradient. Anything else (and shapes that do not broadcast, for its error)
    goes to np.broadcast_to."""
    shape = tuple(shape)
    lead = len(shape) - getattr(x, "ndim", 0)
    if type(x) is np.ndarray and x.size and x.flags.c_contiguous and lead >= 0:
        strides = [0] * lead
        for size, dim, stride in zip(shape[lead:], x.shape, x.strides):
            if dim == 1 and size >= 0:  # (numpy's stride for every size-1 dim of x)
                strides.append(0)
            elif dim == size:
                strides.append(stride)
            else:
                break
        else:
            if min(shape, default=0) >= 0:
                view = np.ndarray(shape, x.dtype, x, 0, tuple(strides))
                view.flags.writeable = False
                return view
    return np.broadcast_to(x, shape)


@register_kernel("BroadcastTo")
def broadcast_to(op, inputs, ctx):
    """A read-only broadcast view: no copy (gradients of Sum/Mean broadcast a cotangent over
    the whole input, and the consumer reads it once)."""
    x, shape = inputs
    return [broadcast_view(x, shape.tolist())]


@register_kernel("BroadcastTo", backend="native", dtypes=(dtypes.float32,))
def broadcast_to_native(op, inputs, ctx):
    """The same read-only view as the numpy kernel (moving no data is the fastest
    broadcast): the native binary ops read such a view in place (``c_broadcast``)."""
    return broadcast_to(op, inputs, ctx)


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


def _unbroadcast(array: np.ndarray) -> np.ndarray:
    """A broadcast view (stride 0 along some axes: BroadcastTo's output) as the array it
    repeats: size 1 along those axes, which broadcasting then stretches again. Any other
    array as it is."""
    if array.dtype != np.float32 or 0 not in array.strides or array.size == 0:
        return array
    return array[tuple(slice(0, 1) if stride == 0 else slice(None)
                       for stride in array.strides)]


# the broadcast shape of two shapes, made once per pair (np.broadcast_shapes' Python layer)
_broadcast_shape = functools.lru_cache(maxsize=1024)(np.broadcast_shapes)


def c_broadcast(c_name: str, x: np.ndarray, y: np.ndarray, out: np.ndarray | None = None
                ) -> np.ndarray | None:
    """``x OP y`` with numpy broadcasting, OP the op ``c_name`` of kernels_c/broadcast's
    list, for C-contiguous aligned float32 arrays and broadcast views of them (C reads what
    they repeat; where both repeat along an axis, so does z: a broadcast view), written into
    ``out`` where it fits (x or y of the result's shape: each loop reads element i before
    writing it); None for anything else (other dtypes or layouts, empty results, more
    merged dimensions than C takes)."""
    if plain_f32(x) and plain_f32(y):  # the usual case: z's shape is the plan's (cached)
        z_shape = None
    else:
        z_shape = _broadcast_shape(x.shape, y.shape)
        x, y = _unbroadcast(x), _unbroadcast(y)
        if not (plain_f32(x) and plain_f32(y)):
            return None
    plan = broadcast_plan(x.shape, y.shape)
    if plan is None:
        return None
    computed, rank, dims, x_dims, y_dims = plan
    z = out_array(out, computed, x, y)
    code = lib.mg_broadcast(_broadcast_ops()[c_name], rank, dims, x_dims, y_dims,
                            fbuf(x), fbuf(y), fbuf(z), num_threads())
    if code:
        check_code(code, c_name)
    return z if z_shape is None or computed == z_shape else broadcast_view(z, z_shape)


def broadcast_replay(c_name: str, x: np.ndarray, y: np.ndarray, z: np.ndarray
                     ) -> Callable[[], None] | None:
    """:func:`c_broadcast` on fixed arrays (a replayed loop body's: ``client/replay.py``):
    a function of no arguments writing ``x OP y`` into ``z`` with the C call's arguments made
    once; None for arrays ``c_broadcast`` would not take as they are."""
    if not (plain_f32(x) and plain_f32(y) and plain_f32(z) and z.flags.writeable):
        return None
    plan = broadcast_plan(x.shape, y.shape)
    if plan is None or tuple(plan[0]) != z.shape:
        return None
    args = (_broadcast_ops()[c_name], *plan[1:], fbuf(x), fbuf(y), fbuf(z), num_threads())
    return c_call(lib.mg_broadcast, args, c_name, (x, y, z))


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
    set_replay(kernel, lambda op, values, outputs, ctx: broadcast_replay(c_name, *values,
                                                                    outputs[0]))


for _name, _c_name in {"Add": "add", "AddV2": "add", "Sub": "sub", "Mul": "mul",
                       "Div": "div", "RealDiv": "div", "Maximum": "maximum",
                       "Minimum": "minimum", "SquaredDifference": "squared_difference"}.items():
    register_native_binary(_name, _c_name)
