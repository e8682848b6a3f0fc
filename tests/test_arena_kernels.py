"""The big native float32 kernels write into a bound plan's arena (``KernelDef.takes_out``).

Each kernel given ``out=`` (a buffer of its output's shape sharing no memory with its inputs)
must return that buffer holding, bit for bit, what it returns without one, write every
element of it (the buffer starts as NaN), and ignore an ``out`` it cannot use: one of its
inputs, another shape, a read-only or strided array. The ResNet-8 and digits training steps
then run bound with their convolution, batch-norm, matmul and gradient outputs in the arena,
bit for bit as an unbound session without the memory planner, without touching arrays
earlier runs returned.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import NATIVE_AVAILABLE
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import minigraph as mg
from minigraph import backends, ops
from minigraph.backends.registry import KernelContext, find_kernel
from minigraph.client import planner

pytestmark = pytest.mark.skipif(not NATIVE_AVAILABLE, reason="kernels taking out= are native")
F32 = np.float32


def _conv_attrs(fmt: str, stride: int, dilation: int, padding: str) -> dict:
    spread = [1, 1, stride, stride] if fmt == "NCHW" else [1, stride, stride, 1]
    dilations = [1, 1, dilation, dilation] if fmt == "NCHW" else [1, dilation, dilation, 1]
    return {"strides": spread, "padding": padding, "data_format": fmt, "dilations": dilations}


def _layout(shape_nhwc: tuple, fmt: str) -> tuple:
    n, h, w, c = shape_nhwc
    return (n, c, h, w) if fmt == "NCHW" else shape_nhwc


def _out_hw(size: int, k: int, stride: int, dilation: int, padding: str) -> int:
    span = (k - 1) * dilation + 1
    return -(-size // stride) if padding == "SAME" else (size - span) // stride + 1


@st.composite
def conv_cases(draw):
    """(op builder name, its input arrays, attrs) over convolution families: batch 1-3,
    spatial 1-9, channels 1-8, kernels 1-3, strides 1-2, dilation 1-2 (stride 1), SAME and
    VALID, both layouts, plain and depthwise convolutions with both gradients."""
    fmt = draw(st.sampled_from(["NHWC", "NCHW"]))
    kind = draw(st.sampled_from(["Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter",
                                 "DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropInput",
                                 "DepthwiseConv2dNativeBackpropFilter"]))
    n, h, w = draw(st.integers(1, 3)), draw(st.integers(1, 9)), draw(st.integers(1, 9))
    ci, k = draw(st.integers(1, 8)), draw(st.integers(1, 3))
    stride = draw(st.integers(1, 2))
    dilation = 1 if stride > 1 else draw(st.integers(1, 2))
    padding = draw(st.sampled_from(["SAME", "VALID"]))
    oh, ow = (_out_hw(s, k, stride, dilation, padding) for s in (h, w))
    assume(oh > 0 and ow > 0)
    depthwise = kind.startswith("Depthwise")
    co = ci * draw(st.integers(1, 2)) if depthwise else draw(st.integers(1, 8))
    f_shape = (k, k, ci, co // ci) if depthwise else (k, k, ci, co)
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    x = rng.standard_normal(_layout((n, h, w, ci), fmt)).astype(F32)
    f = rng.standard_normal(f_shape).astype(F32)
    dy = rng.standard_normal(_layout((n, oh, ow, co), fmt)).astype(F32)
    if kind.endswith("BackpropInput"):
        inputs = [np.array(x.shape, np.int32), f, dy]
    elif kind.endswith("BackpropFilter"):
        inputs = [x, np.array(f_shape, np.int32), dy]
    else:
        inputs = [x, f]
    return kind, inputs, _conv_attrs(fmt, stride, dilation, padding)


@st.composite
def matmul_cases(draw):
    """MatMul (either transpose) and BatchMatMulV2 (adjoints, a broadcast batch)."""
    m, k, n = (draw(st.integers(1, 40)) for _ in range(3))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    if draw(st.booleans()):
        ta, tb = draw(st.booleans()), draw(st.booleans())
        a = rng.standard_normal((k, m) if ta else (m, k)).astype(F32)
        b = rng.standard_normal((n, k) if tb else (k, n)).astype(F32)
        return "MatMul", [a, b], {"transpose_a": ta, "transpose_b": tb}
    adj_x, adj_y = draw(st.booleans()), draw(st.booleans())
    batch = draw(st.sampled_from([(), (2,), (3, 2)]))
    y_batch = draw(st.sampled_from([batch, batch[-1:], ()]))
    x = rng.standard_normal((*batch, *((k, m) if adj_x else (m, k)))).astype(F32)
    y = rng.standard_normal((*y_batch, *((n, k) if adj_y else (k, n)))).astype(F32)
    return "BatchMatMulV2", [x, y], {"adj_x": adj_x, "adj_y": adj_y}


def _kernel_and_op(kind: str, inputs: list, attrs: dict):
    root = mg.Scope.NewRootScope()
    holders = [ops.Const(root, value) for value in inputs]
    result = getattr(ops, kind)(root, *holders, **attrs)
    op = (result if isinstance(result, mg.Output) else result[0]).op
    kernel_def = find_kernel(op, "native", fallback=False)
    assert kernel_def is not None and kernel_def.takes_out, kind
    return kernel_def, op


def _same_bits(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    np.testing.assert_array_equal(actual.view(np.uint32), expected.view(np.uint32))


def _check_out(kind: str, inputs: list, attrs: dict) -> None:
    kernel_def, op = _kernel_and_op(kind, inputs, attrs)
    ctx = KernelContext("native", backends.math_for("native"))
    kept = [value.copy() for value in inputs]

    def run(**out):
        return [np.asarray(r) for r in kernel_def.kernel(op, inputs, ctx, **out)]

    expected = run()
    shape = expected[0].shape
    out = np.full(shape, np.nan, F32)
    results = run(out=out)
    assert results[0] is out, kind
    for result, reference in zip(results, expected, strict=True):
        _same_bits(result, reference)
    # outs it must not use: an input (aliasing), another shape, a read-only or strided array
    refused = [value for value in inputs if value.shape == shape]
    read_only = np.full(shape, np.nan, F32)
    read_only.setflags(write=False)
    refused += [np.full((expected[0].size + 1,), np.nan, F32), read_only]
    if expected[0].size > 1:  # (an array of one element is contiguous whatever its strides)
        refused.append(np.full((*shape, 2), np.nan, F32)[..., 0])
    for bad in refused:
        results = run(out=bad)
        assert not np.may_share_memory(results[0], bad), kind
        for result, reference in zip(results, expected, strict=True):
            _same_bits(result, reference)
    for value, before in zip(inputs, kept):
        np.testing.assert_array_equal(value.view(np.uint8), before.view(np.uint8))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conv_cases())
def test_convolution_kernels_write_their_bits_into_out(case):
    _check_out(*case)


@pytest.mark.parametrize("kind", ["Conv2DBackpropFilter", "DepthwiseConv2dNativeBackpropFilter"])
def test_nchw_filter_gradients_never_write_into_an_input_of_the_filter_shape(kind):
    """NCHW filter gradients convert x and dy to channels-last copies before the C call; an
    out that is the op's own x (an NCHW x whose shape is also the HWIO filter's) must still be
    refused: _check_out passes every input of the output's shape as out."""
    f_shape = (2, 2, 2, 1) if kind.startswith("Depthwise") else (2, 2, 2, 2)
    out_channels = 2  # depthwise: 2 channels x multiplier 1
    rng = np.random.default_rng(7)
    x = rng.standard_normal(f_shape).astype(F32)  # NCHW [n=2, c=2, h=2, w]
    dy = rng.standard_normal((2, out_channels, 1, 1)).astype(F32)  # stride 2 SAME: 1x1
    _check_out(kind, [x, np.array(f_shape, np.int32), dy], _conv_attrs("NCHW", 2, 1, "SAME"))


@settings(max_examples=40, deadline=None)
@given(matmul_cases())
def test_matmul_kernels_write_their_bits_into_out(case):
    _check_out(*case)


@st.composite
def pool_cases(draw):
    """MaxPool, AvgPool and their gradients: windows 1-3, strides 1-3, SAME and VALID,
    both layouts."""
    fmt = draw(st.sampled_from(["NHWC", "NCHW"]))
    kind = draw(st.sampled_from(["MaxPool", "AvgPool", "MaxPoolGrad", "AvgPoolGrad"]))
    n, h, w, c = (draw(st.integers(1, 7)) for _ in range(4))
    k, stride = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    padding = draw(st.sampled_from(["SAME", "VALID"]))
    oh, ow = (_out_hw(s, k, stride, 1, padding) for s in (h, w))
    assume(oh > 0 and ow > 0)
    window = [1, 1, k, k] if fmt == "NCHW" else [1, k, k, 1]
    spread = [1, 1, stride, stride] if fmt == "NCHW" else [1, stride, stride, 1]
    attrs = {"ksize": window, "strides": spread, "padding": padding, "data_format": fmt}
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    x = rng.standard_normal(_layout((n, h, w, c), fmt)).astype(F32)
    g = rng.standard_normal(_layout((n, oh, ow, c), fmt)).astype(F32)
    if kind == "MaxPoolGrad":
        return kind, [x, np.zeros_like(g), g], attrs
    if kind == "AvgPoolGrad":
        return kind, [np.array(x.shape, np.int32), g], attrs
    return kind, [x], attrs


@settings(max_examples=40, deadline=None)
@given(pool_cases())
def test_pool_kernels_write_their_bits_into_out(case):
    _check_out(*case)


@st.composite
def batch_norm_cases(draw):
    """FusedBatchNormV3 (training and inference) and FusedBatchNormGradV3, both layouts."""
    fmt = draw(st.sampled_from(["NHWC", "NCHW"]))
    n, h, w = (draw(st.integers(1, 6)) for _ in range(3))
    c = draw(st.integers(1, 20))
    training = draw(st.booleans())
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    x = rng.standard_normal(_layout((n, h, w, c), fmt)).astype(F32)
    scale, offset = rng.uniform(0.5, 1.5, c).astype(F32), rng.standard_normal(c).astype(F32)
    mean, variance = rng.standard_normal(c).astype(F32), rng.uniform(0.5, 2, c).astype(F32)
    attrs = {"data_format": fmt, "is_training": training, "epsilon": 1e-3}
    if draw(st.booleans()):
        return "FusedBatchNormV3", [x, scale, offset, mean, variance], attrs
    dy = rng.standard_normal(x.shape).astype(F32)
    return "FusedBatchNormGradV3", [dy, x, scale, mean, variance, np.zeros(0, F32)], attrs


@settings(max_examples=40, deadline=None)
@given(batch_norm_cases())
def test_batch_norm_kernels_write_their_bits_into_out(case):
    _check_out(*case)


# ----------------------------------------------------------------------------- training steps


def _resnet8(fmt: str, batch: int):
    from minigraph.examples.resnet8 import build_resnet8_training

    root = mg.Scope.NewRootScope()
    t = build_resnet8_training(root, batch, data_format=fmt)
    rng = np.random.default_rng(1)
    feeds = {t.images: rng.standard_normal((batch, 32, 32, 3)).astype(F32),
             t.labels: rng.integers(0, 10, batch).astype(np.int32)}
    return root, feeds, t.loss, t.train_op


def _digits(fmt: str, batch: int):
    from minigraph.examples.train_digits_cnn import build, parse

    g = build(parse(["--data-format", fmt]))
    rng = np.random.default_rng(2)
    feeds = {g["images"]: rng.standard_normal((batch, 8, 8, 1)).astype(F32),
             g["labels"]: rng.integers(0, 10, batch).astype(np.int32)}
    return g["root"], feeds, g["loss"], g["step"]


def _first_output(root, types: tuple[str, ...]):
    """Output 0 of the first op of one of ``types`` (a big activation to fetch)."""
    return next(op.outputs[0] for op in root.graph().operations() if op.type in types)


def _arena_op_types(session) -> set[str]:
    """The op types of the entries holding an arena buffer in the session's bound plans."""
    types = set()
    for plan, _ in session._plans.values():
        bound = getattr(plan, "bound", None)
        if bound is not None and bound.arena is not None:
            types.update(bound.entries[entry][2].type for entry in bound.arena.slots)
    return types


@pytest.mark.parametrize("model,batch", [(_resnet8, 2), (_digits, 16)])
@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
def test_training_steps_run_bound_from_the_arena_bit_for_bit(model, batch, fmt, monkeypatch):
    """Six steps bound (the arena planned on the third) against six unbound without the
    memory planner: the same losses, fetched activations and variables, bit for bit; the
    arrays earlier runs returned are untouched by later runs; the arena holds the outputs
    of the convolution forward and both gradients, the batch norms both ways and the dense
    layer's matmuls."""
    monkeypatch.setattr(planner, "MIN_INPLACE_BYTES", 1024)  # small batches' tensors
    root, feeds, loss, train = model(fmt, batch)
    conv = _first_output(root, ("Conv2D",))
    bound = mg.ClientSession(root, check_outputs=False)
    plain = mg.ClientSession(root, check_outputs=True,
                             optimizer=mg.OptimizerOptions(memory_planner=False))
    for session in (bound, plain):
        session.Run({}, [], targets=mg.train.global_variables_initializer(root))
    got, want, kept = [], [], []
    for _ in range(6):
        got.append(bound.Run(feeds, [loss, conv], targets=train))
        kept.append([value.copy() for value in got[-1]])  # as returned
        want.append(plain.Run(feeds, [loss, conv], targets=train))
    for values, expected, copies in zip(got, want, kept):
        for value, reference, copy in zip(values, expected, copies):
            _same_bits(value, reference)
            _same_bits(value, copy)
    assert bound.state.variables.keys() == plain.state.variables.keys()
    for name, value in bound.state.variables.items():
        _same_bits(value, plain.state.variables[name])
    metadata = mg.RunMetadata()
    bound.Run(feeds, [loss, conv], targets=train, run_metadata=metadata)
    assert metadata.arena_bytes > 0
    held = _arena_op_types(bound)
    assert {"Conv2DBackpropInput", "Conv2DBackpropFilter"} <= held, held
    assert held & {"Conv2D", "_FusedConv2D"}, held
    assert held & {"MatMul", "_FusedMatMul"}, held
    assert held & {"FusedBatchNormV3", "_FusedBatchNormEx"}, held
    assert held & {"FusedBatchNormGradV3", "_FusedBatchNormGradEx"}, held


@pytest.mark.parametrize("planner_on", [True, False])
def test_convolutions_write_their_parts_of_a_concat(planner_on):
    """A batch-1 NCHW channel concat of two convolutions: with the memory planner, each
    convolution writes its part of the concat's output (the first allocates all of it: its
    step's live bytes are the concat's), bit for bit the copying concat's result."""
    root = mg.Scope.NewRootScope()
    rng = np.random.default_rng(3)
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[1, 3, 9, 9])
    attrs = _conv_attrs("NCHW", 1, 1, "SAME")
    filters = [rng.standard_normal((3, 3, 3, co)).astype(F32) for co in (4, 6)]
    a = ops.Conv2D(root.WithOpName("a"), x, filters[0], **attrs)
    b = ops.Conv2D(root.WithOpName("b"), x, filters[1], **attrs)
    c = ops.ConcatV2(root.WithOpName("c"), [a, b], 1)
    session = mg.ClientSession(root, optimizer=mg.OptimizerOptions(memory_planner=planner_on))
    plain = mg.ClientSession(root, optimizer=mg.OptimizerOptions(memory_planner=False))
    feeds = {x: rng.standard_normal((1, 3, 9, 9)).astype(F32)}
    parts = plain.Run(feeds, [a, b])
    for _ in range(2):
        metadata = mg.RunMetadata()
        [value] = session.Run(feeds, [c], run_metadata=metadata)
        _same_bits(value, np.concatenate(parts, 1))
    live = {s.node_name: s.live_bytes for s in metadata.step_stats}
    assert live["a"] == (value.nbytes if planner_on else parts[0].nbytes)
