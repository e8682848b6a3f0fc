"""The remapper's epilogue fusion (minigraph/optimizer/remapper.py, ops/fused_ops.py,
backends/fused_kernels.py): a convolution's (or matmul's) BiasAdd -> FusedBatchNormV3
(inference) -> AddV2 -> Relu/Relu6 become one ``_FusedConv2D``/``_FusedMatMul`` node, applied
in the native Conv2D's tiles, or as one C pass after other heads. The fused node must give
bit for bit what the ops give one by one (the plan that fetches the intermediates, where
nothing fuses), on every instruction set, and still check every op's inputs."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import NATIVE_AVAILABLE

import minigraph as mg
from minigraph import ops

pytestmark = pytest.mark.skipif(not NATIVE_AVAILABLE, reason="fusion needs the native kernels")
F32 = np.float32


def _isas():
    if not NATIVE_AVAILABLE:
        return []
    from minigraph.backends import native

    return [isa for isa in native.ISAS
            if native.ISAS.index(isa) <= native.ISAS.index(native.best_isa())]


@pytest.fixture
def restore_isa():
    from minigraph.backends import native

    before = native.isa()
    yield native
    native.set_isa(before)


def _network(rng, *, head="Conv2D", bias=True, bn=True, residual=True, activation="Relu",
             offset_scale=1.0):
    """x -> head -> [BiasAdd] -> [FusedBatchNormV3] -> [AddV2 residual] -> [activation]."""
    root = mg.Scope.NewRootScope()
    if head == "Conv2D":
        x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[4, 9, 7, 5])
        h = ops.Conv2D(root.WithOpName("head"), x, rng.standard_normal((3, 3, 5, 6), F32),
                       [1, 1, 1, 1], "SAME")
        shape = (4, 9, 7, 5)
    else:
        x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[10, 5])
        h = ops.MatMul(root.WithOpName("head"), x, rng.standard_normal((5, 6), F32))
        shape = (10, 5)
    chain = [h]
    if bias:
        chain.append(ops.BiasAdd(root.WithOpName("bias"), chain[-1],
                                 rng.standard_normal(6).astype(F32)))
    if bn:
        stats = [rng.uniform(0.5, 1.5, 6).astype(F32) for _ in range(4)]
        stats[1] = (stats[1] * offset_scale).astype(F32)
        chain.append(ops.FusedBatchNormV3(root.WithOpName("bn"), chain[-1], *stats,
                                          epsilon=1e-3, is_training=False).y)
    feed = {x: (rng.standard_normal(shape) * 3).astype(F32)}
    if residual:  # the skip connection's value, either side of the add
        skip = ops.Placeholder(root.WithOpName("skip"), mg.float32, shape=h.shape)
        feed[skip] = rng.standard_normal(h.shape.as_list()).astype(F32)
        pair = (skip, chain[-1]) if bias else (chain[-1], skip)
        chain.append(ops.AddV2(root.WithOpName("add"), *pair))
    if activation:
        chain.append(getattr(ops, activation)(root.WithOpName("act"), chain[-1]))
    return root, feed, chain


def _fused_and_unfused(root, feed, chain):
    session = mg.ClientSession(root, backend="native")
    metadata = mg.RunMetadata()
    fused = session.Run(feed, chain[-1], run_metadata=metadata)
    one_by_one = session.Run(feed, chain)[-1]  # intermediates fetched: nothing fuses
    return fused, one_by_one, metadata


@pytest.mark.parametrize("isa", _isas())
@pytest.mark.parametrize("case", [
    {}, {"bias": False}, {"bn": False}, {"residual": False}, {"activation": "Relu6"},
    {"activation": None}, {"bias": False, "bn": False, "residual": False},
    {"head": "MatMul", "bn": False}, {"head": "MatMul", "bn": False, "residual": False},
])
def test_fused_chain_is_bit_identical_to_the_ops_one_by_one(case, isa, restore_isa):
    restore_isa.set_isa(isa)
    root, feed, chain = _network(np.random.default_rng(len(str(case))), **case)
    fused, one_by_one, metadata = _fused_and_unfused(root, feed, chain)
    np.testing.assert_array_equal(fused.view(np.uint32), one_by_one.view(np.uint32))
    if len(chain) > 1:
        assert metadata.kernel_of(chain[-1].op.name) == "native:fused_kernels.fused_native"
        ran = {s.node_name for s in metadata.step_stats}
        assert ran.isdisjoint(t.op.name for t in chain[:-1])  # absorbed into the fused node


def test_exceptional_batch_norm_channels_run_the_ops_own_kernels():
    root, feed, chain = _network(np.random.default_rng(3), offset_scale=1e30)
    fused, one_by_one, _ = _fused_and_unfused(root, feed, chain)
    np.testing.assert_array_equal(fused.view(np.uint32), one_by_one.view(np.uint32))


def test_every_fused_op_is_still_checked():
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[2, 4, 4, 3])
    bias = ops.Placeholder(root.WithOpName("b"), mg.float32)  # its length known only at run
    conv = ops.Conv2D(root, x, np.ones((1, 1, 3, 2), F32), [1, 1, 1, 1], "VALID")
    y = ops.Relu(root, ops.BiasAdd(root.WithOpName("bias_add"), conv, bias))
    session = mg.ClientSession(root, backend="native")
    with pytest.raises(mg.errors.InvalidArgumentError, match="BiasAdd"):
        session.Run({x: np.ones((2, 4, 4, 3), F32), bias: np.ones(5, F32)}, y)
    out = session.Run({x: np.ones((2, 4, 4, 3), F32), bias: np.array([1, -9], F32)}, y)
    np.testing.assert_array_equal(out[..., 0], 4.0)
    np.testing.assert_array_equal(out[..., 1], 0.0)


def test_the_reference_runs_the_members_kernels_and_nothing_fuses_past_a_second_consumer():
    root, feed, chain = _network(np.random.default_rng(5))
    metadata = mg.RunMetadata()
    fused = mg.ClientSession(root, backend="reference").Run(feed, chain[-1],
                                                            run_metadata=metadata)
    plain = mg.ClientSession(root, backend="reference",
                             optimizer=mg.OptimizerOptions(remapper=False)).Run(feed, chain[-1])
    assert metadata.kernel_of(chain[-1].op.name) == "reference:fused_kernels.fused_members"
    assert fused.tobytes() == plain.tobytes()
    metadata = mg.RunMetadata()
    mg.ClientSession(root, backend="native").Run(feed, [chain[1], chain[-1]],
                                                 run_metadata=metadata)
    assert metadata.kernel_of("bias") == "native:fused_kernels.fused_native"  # head + bias
    # the rest (batch norm -> residual add -> Relu) is the inference batch-norm fusion's
    assert metadata.kernel_of(chain[-1].op.name) == \
        "native:fused_training_kernels.fused_batch_norm_ex_native"
    with pytest.raises(KeyError):
        metadata.kernel_of(chain[2].op.name)



def test_an_add_of_two_chains_joins_one_of_them():
    """conv -> BN and conv -> BN meeting in one AddV2 (NASNet's cells): both chains reach the
    add, only one may take it; the other stays a chain of its own, computed before it."""
    rng = np.random.default_rng(8)
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[2, 5, 5, 3])
    branches = []
    for name in ("left", "right"):
        conv = ops.Conv2D(root.WithOpName(name), x, rng.standard_normal((3, 3, 3, 4), F32),
                          [1, 1, 1, 1], "SAME")
        stats = [rng.uniform(0.5, 1.5, 4).astype(F32) for _ in range(4)]
        branches.append(ops.FusedBatchNormV3(root.WithOpName(f"{name}_bn"), conv, *stats,
                                             is_training=False).y)
    y = ops.Relu(root.WithOpName("act"), ops.AddV2(root.WithOpName("add"), *branches))
    feed = {x: rng.standard_normal((2, 5, 5, 3)).astype(F32)}
    fused, one_by_one, metadata = _fused_and_unfused(root, feed, [*branches, y])
    np.testing.assert_array_equal(fused.view(np.uint32), one_by_one.view(np.uint32))
    ran = {s.node_name: s.op_type for s in metadata.step_stats}
    assert ran["act"] == ran["right_bn"] == "_FusedConv2D"  # left -> add -> act, right
    assert {"left", "left_bn", "add", "right"}.isdisjoint(ran)


def _special_values(rng, shape, fraction=0.02):
    """Normal values with NaN, +-inf, +-0, 6 and values near 6 mixed in (what relu and relu6
    tell apart)."""
    values = (rng.standard_normal(shape) * 4).astype(F32)
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 6.0, 5.9999995, 6.0000005, 1e30],
                        F32)
    mask = rng.random(shape) < fraction
    values[mask] = rng.choice(specials, int(mask.sum()))
    return values


@pytest.mark.parametrize("isa", _isas())
@pytest.mark.parametrize("co", [6, 16, 40, 70, 130])
@pytest.mark.parametrize("stages", [
    dict(bias=True, bn=True, residual=True, activation=1),
    dict(bias=False, bn=True, residual=True, activation=2),
    dict(bias=True, bn=False, residual=False, activation=2),
    dict(bias=False, bn=False, residual=True, activation=0),
])
def test_epilogue_in_the_convolution_is_bit_identical_to_the_pass_after_it(isa, co, stages,
                                                                           restore_isa):
    """mg_conv2d_forward's in-register epilogue against the convolution followed by
    mg_channel_epilogue: every channel block and partial vector (co), pixel counts that end
    in a partial tile (5 * 7 * 3 = 105 pixels), special values in the residual and the
    stage vectors, on every instruction set."""
    from minigraph.backends.activation_kernels import Epilogue, c_channel_epilogue
    from minigraph.backends.convolution_kernels import c_conv2d

    restore_isa.set_isa(isa)
    rng = np.random.default_rng(co)
    x = rng.standard_normal((5, 7, 3, 4)).astype(F32)
    f = rng.standard_normal((3, 2, 4, co)).astype(F32)
    y_shape = (5, 7, 3, co)
    bias = _special_values(rng, co) if stages["bias"] else None
    bn = ([_special_values(rng, co), rng.uniform(0.1, 3, co).astype(F32),
           _special_values(rng, co)] if stages["bn"] else [None] * 3)
    residual = _special_values(rng, y_shape) if stages["residual"] else None
    epilogue = Epilogue(bias, *bn, residual, stages["activation"])
    pads = ((1, 1), (0, 1))
    fused = c_conv2d(x, f, pads, y_shape[1:3], True, epilogue)
    after = c_conv2d(x, f, pads, y_shape[1:3], True)
    c_channel_epilogue(after, epilogue)
    np.testing.assert_array_equal(fused.view(np.uint32), after.view(np.uint32))
    if stages["activation"]:  # the activation's own kernel agrees on what it was given
        assert not np.any(np.signbit(fused) & ~np.isnan(fused))


def test_the_convolution_refuses_an_epilogue_that_does_not_fit():
    from minigraph.backends.activation_kernels import Epilogue
    from minigraph.backends.convolution_kernels import c_conv2d

    x, f = np.ones((1, 3, 3, 2), F32), np.ones((1, 1, 2, 4), F32)
    for bad in (Epilogue(bias=np.ones(3, F32)), Epilogue(residual=np.ones((1, 3, 3, 3), F32)),
                Epilogue(mean=np.ones(4, F32)), Epilogue(bias=np.ones(4, np.float64)),
                Epilogue(activation=3)):
        with pytest.raises(ValueError, match="epilogue"):
            c_conv2d(x, f, ((0, 0), (0, 0)), (3, 3), True, bad)
    with pytest.raises(ValueError, match="invalid arguments"):  # C: NCHW results take none
        c_conv2d(np.ones((1, 2, 3, 3), F32), f, ((0, 0), (0, 0)), (3, 3), False,
                 Epilogue(bias=np.ones(3, F32)))


def test_a_side_input_the_epilogue_cannot_read_runs_the_members_kernels():
    """A strided residual (C reads contiguous arrays only) gives the same bits as the ops
    one by one, through the members' own kernels."""
    root, feed, chain = _network(np.random.default_rng(11))
    session = mg.ClientSession(root, backend="native", check_outputs=False)
    one_by_one = session.Run(feed, chain)[-1]
    for _ in range(2):
        first = session.Run(feed, chain[-1])
        np.testing.assert_array_equal(first.view(np.uint32), one_by_one.view(np.uint32))
    x, skip = list(feed)
    strided = np.zeros((*feed[skip].shape[:-1], 2 * feed[skip].shape[-1]), F32)[..., ::2]
    strided[...] = feed[skip]
    out = session.Run({x: feed[x], skip: strided}, chain[-1])
    np.testing.assert_array_equal(out.view(np.uint32), one_by_one.view(np.uint32))


def test_a_repeated_shape_still_refuses_a_new_bad_input():
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[2, 4, 4, 3])
    bias = ops.Placeholder(root.WithOpName("b"), mg.float32)
    conv = ops.Conv2D(root, x, np.ones((1, 1, 3, 2), F32), [1, 1, 1, 1], "VALID")
    y = ops.Relu(root, ops.BiasAdd(root.WithOpName("bias_add"), conv, bias))
    session = mg.ClientSession(root, backend="native", check_outputs=False)
    good = {x: np.ones((2, 4, 4, 3), F32), bias: np.array([1, -9], F32)}
    for _ in range(2):
        np.testing.assert_array_equal(session.Run(good, y)[..., 0], 4.0)
    with pytest.raises(mg.errors.InvalidArgumentError, match="BiasAdd"):
        session.Run({x: good[x], bias: np.ones(5, F32)}, y)
    with pytest.raises(mg.errors.InvalidArgumentError, match="BiasAdd"):
        session.Run({x: good[x], bias: np.ones((1, 2), F32)}, y)
