"""Ops TF 2 graphs write: AddV2 and RealDiv (what tf.add and x / y produce) and NoOp (the
target frozen graphs hang their outputs on). Values against float64 numpy formulas and
tf.raw_ops bit for bit; their gradients are checked in test_gradient_checker.py."""

from __future__ import annotations

import os

import numpy as np
import pytest
from conftest import BACKENDS

import minigraph as mg
from minigraph import ops

F32 = np.float32
X = np.array([[1.5, -2.0, 0.0, np.inf, np.nan, -0.0]], F32)
Y = np.array([[2.0], [-0.0], [np.inf], [3.0]], F32)  # broadcasts to (4, 6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_add_v2_and_real_div_broadcast_like_numpy(backend):
    root = mg.Scope.NewRootScope()
    total, ratio = ops.AddV2(root, X, Y), ops.RealDiv(root, X, Y)
    assert total.shape == ratio.shape == mg.TensorShape([4, 6])
    got = mg.ClientSession(root, backend=backend).Run([total, ratio])
    with np.errstate(all="ignore"):
        expected = [X.astype(np.float64) + Y, X.astype(np.float64) / Y]
    for a, e in zip(got, expected):
        np.testing.assert_array_equal(a, e.astype(F32))
    with pytest.raises(mg.errors.InvalidArgumentError, match=r"RealDiv .*Incompatible shapes"):
        ops.RealDiv(root, np.ones(3, F32), np.ones(4, F32))
    with pytest.raises(mg.errors.InvalidArgumentError, match=r"RealDiv .*input 'x' has dtype "
                                                             r"int32"):
        ops.RealDiv(root, np.ones(3, np.int32), np.ones(3, np.int32))


def test_no_op_runs_its_control_inputs():
    root = mg.Scope.NewRootScope()
    var = mg.train.variable(root, "w", [2], lambda s, shape, dtype: ops.Const(s, np.ones(2, F32)))
    first = ops.Assign(root, var, ops.Const(root, np.full(2, 3.0, F32)))
    group = ops.NoOp(root.WithOpName("group").WithControlDependencies([first.op]))
    assert isinstance(group, mg.Operation) and group.outputs == ()
    session = mg.ClientSession(root)
    session.Run({}, [], targets=mg.train.global_variables_initializer(root))
    session.Run({}, [], targets=["group"])
    np.testing.assert_array_equal(session.Run(var), [3.0, 3.0])


@pytest.mark.oracle
@pytest.mark.parametrize("backend", BACKENDS)
def test_against_tensorflow(backend):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    tf = pytest.importorskip("tensorflow")
    root = mg.Scope.NewRootScope()
    ours = mg.ClientSession(root, backend=backend).Run([ops.AddV2(root, X, Y),
                                                       ops.RealDiv(root, X, Y)])
    theirs = [tf.raw_ops.AddV2(x=X, y=Y).numpy(), tf.raw_ops.RealDiv(x=X, y=Y).numpy()]
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
        finite = ~np.isnan(b)
        np.testing.assert_array_equal(a[finite].view(np.uint32), b[finite].view(np.uint32))
