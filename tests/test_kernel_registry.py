"""The op -> kernel seam: registrations keyed by (op type, backend, dtypes, attrs), one kernel
chosen per step at plan time, and RunMetadata saying which one ran.

The expected kernel for each case follows from the registrations' documented constraints
(the C convolutions take float32 with stride 1, dilation 1, SAME/VALID; the C max-pool
gradient non-overlapping windows; float64 sessions promote casts and constants).
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
from conftest import NATIVE_AVAILABLE

import minigraph as mg
from minigraph import ops
from minigraph.backends.registry import find_kernel, register_kernel, registered_kernels

F32 = np.float32
needs_native = pytest.mark.skipif(not NATIVE_AVAILABLE, reason="native kernels not built")


def _kernels(root, fetch, feeds, backend):
    metadata = mg.RunMetadata()
    mg.ClientSession(root, backend=backend).Run(feeds, fetch, run_metadata=metadata)
    assert all(stats.seconds >= 0 for stats in metadata.step_stats)
    return metadata


def _conv_graph(dtype, dilations, stride=1):
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), dtype)
    f = ops.Const(root.WithOpName("f"), np.ones((3, 3, 2, 4), dtype.np_dtype))
    y = ops.Conv2D(root.WithOpName("conv"), x, f, strides=[1, stride, stride, 1],
                   padding="SAME", dilations=dilations)
    r = ops.Relu(root.WithOpName("relu"), y)
    # the convolution's output fetched too, so the Relu keeps its own kernel (not fused
    # after the convolution: tests/test_fusion.py)
    return root, [y, r], {x: np.ones((1, 6, 6, 2), dtype.np_dtype)}


@needs_native
@pytest.mark.parametrize("dtype, dilations, stride, conv, relu", [
    (mg.float32, [1, 1, 1, 1], 1, "native:convolution_kernels.conv2d_native",
     "native:activation_kernels.relu_native"),
    (mg.float32, [1, 2, 2, 1], 1, "native:convolution_kernels.conv2d_native",
     "native:activation_kernels.relu_native"),
    # a stride past int32: the native kernel's `when` refuses it
    (mg.float32, [1, 1, 1, 1], 2**31, "reference:convolution_kernels.conv2d",
     "native:activation_kernels.relu_native"),
    (mg.float64, [1, 1, 1, 1], 1, "reference:convolution_kernels.conv2d",
     "reference:activation_kernels.relu"),
])
def test_the_plan_picks_one_kernel_per_step(dtype, dilations, stride, conv, relu):
    root, fetch, feeds = _conv_graph(dtype, dilations, stride)
    metadata = _kernels(root, fetch, feeds, "native")
    assert metadata.kernel_of("conv") == conv
    assert metadata.kernel_of("relu") == relu
    reference = _kernels(root, fetch, feeds, "reference")
    assert reference.kernel_of("conv") == "reference:convolution_kernels.conv2d"


@needs_native
def test_batch_norm_runs_with_its_backends_math():
    root = mg.Scope.NewRootScope()
    x32 = ops.Placeholder(root.WithOpName("x32"), mg.float32)
    x64 = ops.Placeholder(root.WithOpName("x64"), mg.float64)
    c = np.ones(2, F32)
    fused = ops.FusedBatchNormV3(root.WithOpName("fused"), x32, c, c, c, c, is_training=False)
    with pytest.warns(DeprecationWarning):
        global64 = ops.BatchNormWithGlobalNormalization(
            root.WithOpName("global64"), x64, *[np.ones(2, np.float64)] * 4, 1e-3, True)
    metadata = _kernels(root, [fused.y, global64],
                        {x32: np.ones((1, 2, 2, 2), F32), x64: np.ones((1, 2, 2, 2))},
                        "native")
    assert metadata.kernel_of("fused") == "native:batch_norm_kernels.fused_batch_norm"
    assert metadata.kernel_of("global64") == (
        "reference:batch_norm_kernels.batch_norm_with_global_normalization")


def test_float64_is_a_session_mode_with_its_own_kernels():
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.int32)
    y = ops.Cast(root.WithOpName("cast"), x, DstT=mg.float32)
    z = ops.Add(root.WithOpName("add"), y, ops.Const(root.WithOpName("c"), F32(0.5)))
    metadata = mg.RunMetadata()
    value = mg.ClientSession(root, backend="float64").Run({x: [1, 2]}, z, run_metadata=metadata)
    assert value.dtype == np.float64
    np.testing.assert_array_equal(value, [1.5, 2.5])
    assert metadata.kernel_of("cast") == "float64:math_kernels.cast_float64"
    assert metadata.kernel_of("c") == "float64:array_kernels.const_float64"
    assert metadata.kernel_of("add") == "reference:math_kernels.kernel"


def test_registrations_are_checked():
    with pytest.raises(ValueError, match="unknown backend"):
        register_kernel("Relu", backend="tpu")
    with pytest.raises(ValueError, match="already registered"):
        register_kernel("Relu")(lambda op, inputs, ctx: inputs)
    assert {k.backend for k in registered_kernels()} <= {"reference", "native", "float64",
                                                       "opencl"}


def test_every_op_has_a_reference_kernel():
    """The reference is every CPU backend's fallback: each op type must have one."""
    from minigraph.framework.op_def import registered_ops

    with_reference = {k.op_type for k in registered_kernels() if k.backend == "reference"}
    assert set(registered_ops()) - with_reference == set()


def test_unregistered_dtypes_fall_back_or_are_reported():
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root, mg.float64)
    op = ops.Relu(root, x).op
    assert find_kernel(op, "native").backend == "reference"
    assert find_kernel(op, "opencl") is None


def test_no_kernel_sniffs_its_backend():
    """Kernels get a typed context; none discovers what its backend can do by attribute
    sniffing (getattr on the math module or state)."""
    kernel_files = sorted(Path(mg.__file__).parent.glob("backends/*_kernels.py")) + [
        Path(mg.__file__).parent / "distributed" / "kernels.py"]
    for path in kernel_files:
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "getattr"
                    and any(word in ast.unparse(node.args[0])
                            for word in ("math", "ctx", "state"))):
                pytest.fail(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
