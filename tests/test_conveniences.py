"""TF conveniences a newcomer from TensorFlow expects: seeing a graph (listing, lookups by
name, iteration), TF C++'s named outputs of single-output ops, Output.get_shape,
DType.as_numpy_dtype, and AddSymbolicGradients with single tensors."""

from __future__ import annotations

import numpy as np
import pytest

import minigraph as mg
from minigraph import nn, ops

F32 = np.float32


def _small_model():
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[-1, 4])
    dense = nn.Dense(root, "dense", 4, 3)
    y = ops.Relu(root.WithOpName("relu"), dense(root, x))
    return root, x, dense, y


def test_a_graph_lists_its_ops_like_model_summary():
    root, x, dense, y = _small_model()
    graph = root.graph()
    text = str(graph)
    lines = text.splitlines()
    assert lines[0].split() == ["name", "type", "device", "outputs", "params"]
    assert any(line.split()[:2] == ["x", "Placeholder"] and "float32[?,4]" in line
               for line in lines)
    kernel_line = next(line for line in lines if line.startswith("dense/kernel "))
    assert kernel_line.split()[1] == "Variable" and kernel_line.split()[-1] == "12"
    assert lines[-1] == f"{len(graph)} operations, 15 parameters in 2 variables"
    assert [op.name for op in graph] == [op.name for op in graph.get_operations()]
    assert len(graph) == len(graph.get_operations()) > 5


def test_lookups_by_name():
    root, x, dense, y = _small_model()
    graph = root.graph()
    assert graph.get_operation_by_name("relu") is y.op
    assert graph.get_tensor_by_name("relu:0") is y
    with pytest.raises(KeyError, match="did you mean 'relu'"):
        graph.get_operation_by_name("rleu")
    with pytest.raises(ValueError, match="'relu:0'"):
        graph.get_tensor_by_name("relu")
    with pytest.raises(KeyError, match="has 1 output"):
        graph.get_tensor_by_name("relu:1")


def test_single_output_wrappers_have_tf_cpp_member_names():
    root = mg.Scope.NewRootScope()
    a = ops.Const(root, F32(1.5))
    assert ops.Identity(root, a).output.op.type == "Identity"
    total = ops.Add(root, a, a)
    assert total.z is total
    assert ops.Relu(root, a).activations.op.type == "Relu"
    with pytest.raises(AttributeError, match="no attribute 'y'"):
        total.y  # noqa: B018
    assert total.get_shape() == total.shape == mg.TensorShape([])
    assert mg.float32.as_numpy_dtype is np.float32
    assert mg.bfloat16.as_numpy_dtype(1.0).dtype == mg.bfloat16.np_dtype


def test_add_symbolic_gradients_takes_single_tensors():
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[3])
    loss = ops.Sum(root, ops.Square(root, x), [0])
    grads = mg.AddSymbolicGradients(root, loss, x)
    assert isinstance(grads, list) and len(grads) == 1
    value = mg.ClientSession(root, backend="reference").Run(
        {x: np.array([1, -2, 3], F32)}, grads[0])
    np.testing.assert_array_equal(value, [2, -4, 6])  # d(sum x^2)/dx = 2x
    with pytest.raises(mg.errors.InvalidArgumentError, match="each of 'inputs' must be an "
                                                              "Output, got str"):
        mg.AddSymbolicGradients(root, loss, "x:0")


def test_submodules_are_reachable_after_import_minigraph():
    """mg.nn, mg.distributed, mg.backends.opencl work without importing them first, and
    `import minigraph` itself loads neither MPI nor scikit-learn nor pyopencl."""
    import subprocess
    import sys

    code = ("import sys, minigraph as mg\n"
            "heavy = [m for m in ('mpi4py', 'sklearn', 'pyopencl') if m in sys.modules]\n"
            "assert not heavy, heavy\n"
            "print(mg.nn.Dense.__name__, mg.distributed.__name__, mg.backends.opencl.__name__)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.split() == ["Dense", "minigraph.distributed", "minigraph.backends.opencl"]


def test_layers_print_their_weights():
    root = mg.Scope.NewRootScope()
    assert repr(nn.Dense(root, "dense", 4, 3)) == (
        "<Dense 'dense': kernel[4,3], bias[3] (15 parameters)>")
    assert repr(nn.BatchNorm(root, "bn", 8)) == (
        "<BatchNorm 'bn': scale[8], offset[8] (16 parameters)>")


def test_static_attr_setters_as_in_tf_cpp():
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root, mg.float32, ops.Placeholder.Shape([-1, 4]))
    assert x.shape == mg.TensorShape([None, 4])
    c = np.ones(3, F32)
    bn = ops.FusedBatchNormV3(root, np.ones((1, 2, 2, 3), F32), c, c, c, c,
                              ops.FusedBatchNormV3.IsTraining(False).Epsilon(0.25))
    assert bn.operation.attrs["is_training"] is False
    assert bn.operation.attrs["epsilon"] == 0.25
