"""ClientSession: feeds, fetches, targets, pruning, the plan cache, backends, threads."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from conftest import BACKENDS, NATIVE_AVAILABLE, assert_close, fused_bn_forward_f64

import minigraph as mg
from minigraph import ops
from minigraph.client import session as session_module

InvalidArgumentError = mg.errors.InvalidArgumentError
F32 = np.float32


def bn_graph(shape=(None, 3, 3, 4)):
    """x placeholder -> FusedBatchNormV3 (training, NHWC) -> Identity(y)."""
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=shape)
    scale = ops.Const(root.WithOpName("scale"), np.array([1.0, 2.0, 0.5, -1.0], F32))
    offset = ops.Const(root.WithOpName("offset"), np.array([0.0, 1.0, -1.0, 0.5], F32))
    bn = ops.FusedBatchNormV3(root.WithOpName("bn"), x, scale, offset, [], [], epsilon=1e-3)
    out = ops.Identity(root.WithOpName("out"), bn.y)
    return root, x, bn, out


def expected_y(x):
    scale = np.array([1.0, 2.0, 0.5, -1.0], F32)
    offset = np.array([0.0, 1.0, -1.0, 0.5], F32)
    return fused_bn_forward_f64(x, scale, offset, [], [], epsilon=1e-3)


def data(seed, n=2):
    return np.random.default_rng(seed).normal(1, 2, (n, 3, 3, 4)).astype(F32)


# ----------------------------------------------------------------------------- fetches and feeds


class TestFetchesAndFeeds:
    def test_single_fetch_returns_an_array_and_a_list_returns_a_list(self):
        root, x, bn, out = bn_graph()
        session = mg.ClientSession(root, backend="reference")
        value = data(0)
        single = session.Run({x: value}, out)
        assert isinstance(single, np.ndarray)
        ref = expected_y(value)
        assert_close(single, ref["y"], dtype=F32, mag=ref["mag"]["y"])
        listed = session.Run({x: value}, [out, bn.batch_mean])
        assert isinstance(listed, list) and len(listed) == 2
        assert_close(listed[1], ref["batch_mean"], dtype=F32, mag=ref["mag"]["batch_mean"])
        as_tuple = session.Run({x: value}, (bn.y, bn.y))
        assert isinstance(as_tuple, list) and np.array_equal(as_tuple[0], as_tuple[1])
        assert session.Run({x: value}, []) == []

    def test_fetch_op_result_object(self):
        root, x, bn, _ = bn_graph()
        session = mg.ClientSession(root, backend="reference")
        results = session.Run({x: data(1)}, list(bn))
        assert len(results) == 6

    def test_feeds_by_output_and_lists(self):
        root, x, _, out = bn_graph(shape=(1, 1, 2, 4))
        session = mg.ClientSession(root, backend="reference")
        value = [[[[1.0, 2.0, 3.0, 4.0], [3.0, 2.0, 1.0, 0.0]]]]  # a Python list is converted
        result = session.Run({x: value}, out)
        ref = expected_y(np.array(value, F32))
        assert_close(result, ref["y"], dtype=F32, mag=ref["mag"]["y"])

    def test_feed_dtype_mismatch(self):
        root, x, _, out = bn_graph()
        session = mg.ClientSession(root, backend="reference")
        for dtype in (np.float64, np.float16, np.int32):
            with pytest.raises(InvalidArgumentError) as info:
                session.Run({x: data(2).astype(dtype)}, out)
            message = str(info.value)
            assert "'x:0'" in message and np.dtype(dtype).name in message
            assert "expected float32" in message

    @pytest.mark.parametrize("shape", [(2, 3, 3, 5), (2, 3, 4), (2, 3, 3, 4, 1), ()])
    def test_feed_shape_incompatible_with_placeholder(self, shape):
        root, x, _, out = bn_graph(shape=(None, 3, 3, 4))
        session = mg.ClientSession(root, backend="reference")
        with pytest.raises(InvalidArgumentError) as info:
            session.Run({x: np.zeros(shape, F32)}, out)
        message = str(info.value)
        assert "'x:0'" in message and str(list(shape)) in message
        assert "(None, 3, 3, 4)" in message

    def test_feed_compatible_shapes(self):
        root, x, _, out = bn_graph(shape=(None, 3, 3, 4))
        session = mg.ClientSession(root, backend="reference")
        for n in (1, 5):
            assert session.Run({x: data(3, n)}, out).shape == (n, 3, 3, 4)

    def test_unconvertible_feed(self):
        root, x, _, out = bn_graph()
        session = mg.ClientSession(root, backend="reference")
        with pytest.raises(InvalidArgumentError, match="feed for 'x:0' cannot be converted"):
            session.Run({x: [["a"]]}, out)

    def test_unfed_placeholder_is_reported_by_name(self):
        root, x, _, out = bn_graph()
        session = mg.ClientSession(root, backend="reference")
        with pytest.raises(InvalidArgumentError) as info:
            session.Run({}, out)
        message = str(info.value)
        assert "You must feed a value for placeholder tensor 'x'" in message
        assert "float32" in message and "(None, 3, 3, 4)" in message

    def test_all_unfed_placeholders_are_listed(self):
        root = mg.Scope.NewRootScope()
        a = ops.Placeholder(root.WithOpName("a"), mg.float32)
        b = ops.Placeholder(root.WithOpName("b"), mg.float32)
        bn = ops.FusedBatchNormV3(root, a, b, b, b, b)
        with pytest.raises(InvalidArgumentError, match="'a'.*unfed placeholders: a, b"):
            mg.ClientSession(root, backend="reference").Run({}, bn.y)

    def test_bad_arguments(self):
        root, x, bn, out = bn_graph()
        session = mg.ClientSession(root, backend="reference")
        with pytest.raises(InvalidArgumentError, match=r"fetch 'out': .*looks like an "
                                                       r"Operation name.*'out:0'"):
            session.Run({x: data(0)}, "out")
        with pytest.raises(InvalidArgumentError, match=r"feed key 'nope:0': .*not in the graph"):
            session.Run({"nope:0": data(0)}, out)
        with pytest.raises(InvalidArgumentError, match=r"each fetch must be an Output, got the "
                                                       r"Operation '.*'; .*targets="):
            session.Run({x: data(0)}, out.op)
        with pytest.raises(InvalidArgumentError, match="each target must be an Operation"):
            session.Run({x: data(0)}, [], targets=[3])
        with pytest.raises(InvalidArgumentError, match="feeds but no fetches"):
            session.Run({x: data(0)})
        other_root, *_, other_out = bn_graph()
        with pytest.raises(InvalidArgumentError, match="another graph"):
            session.Run({x: data(0)}, other_out)

    def test_tensor_names_and_fetch_only_runs(self):
        root, x, bn, out = bn_graph()
        session = mg.ClientSession(root, backend="reference")
        by_output = session.Run({x: data(0)}, out)
        np.testing.assert_array_equal(session.Run({"x:0": data(0)}, out.name), by_output)
        constant = ops.Const(root.WithOpName("c"), np.arange(3, dtype=np.float32))
        np.testing.assert_array_equal(session.Run([constant])[0], np.arange(3))
        np.testing.assert_array_equal(session.Run(constant), np.arange(3))

    def test_session_from_a_graph(self):
        root, x, _, out = bn_graph()
        session = mg.ClientSession(root.graph(), backend="reference")
        assert session.Run({x: data(0)}, out).shape == (2, 3, 3, 4)


# ----------------------------------------------------------------------------- pruning, targets


class TestPruningAndTargets:
    def broken_branch(self, root, x):
        """An op that fails validation at run time (4 channels vs a 3-element scale)."""
        return ops.FusedBatchNormV3(root.WithOpName("broken"), x, np.ones(3, F32),
                                    np.ones(3, F32), [], []).y

    def test_unneeded_broken_op_does_not_run(self):
        root, x, _, out = bn_graph(shape=None)
        broken = self.broken_branch(root, x)
        session = mg.ClientSession(root, backend="reference")
        assert session.Run({x: data(4)}, out).shape == (2, 3, 3, 4)
        with pytest.raises(InvalidArgumentError, match="FusedBatchNormV3 'broken'"):
            session.Run({x: data(4)}, broken)

    def test_unneeded_unfed_placeholder_is_fine(self):
        root, x, _, out = bn_graph()
        ops.Identity(root, ops.Placeholder(root.WithOpName("unused"), mg.float32))
        session = mg.ClientSession(root, backend="reference")
        assert session.Run({x: data(5)}, out).shape == (2, 3, 3, 4)

    def test_feeding_an_intermediate_cuts_the_graph(self):
        root, x, bn, out = bn_graph()
        session = mg.ClientSession(root, backend="reference")
        fed = np.arange(2 * 3 * 3 * 4, dtype=F32).reshape(2, 3, 3, 4)
        # x is not fed and not needed: bn.y's value comes from the feed
        np.testing.assert_array_equal(session.Run({bn.y: fed}, out), fed)

    def test_feeding_a_fetched_tensor_returns_the_feed(self):
        root, x, bn, _ = bn_graph()
        session = mg.ClientSession(root, backend="reference")
        fed = np.full(4, 7.0, F32)
        result = session.Run({x: data(6), bn.batch_mean: fed}, [bn.batch_mean, bn.y])
        np.testing.assert_array_equal(result[0], fed)

    def test_targets_run_and_are_not_returned(self):
        root, x, bn, out = bn_graph(shape=None)
        broken = self.broken_branch(root, x)
        session = mg.ClientSession(root, backend="reference")
        assert session.Run({x: data(7)}, [], targets=[bn.operation]) == []
        assert session.Run({x: data(7)}, out, targets=[bn.operation]).shape == (2, 3, 3, 4)
        with pytest.raises(InvalidArgumentError, match="'broken'"):  # the target does run
            session.Run({x: data(7)}, out, targets=[broken.op])

    def test_control_dependencies_run(self):
        root, x, _, _ = bn_graph(shape=None)
        broken = self.broken_branch(root, x)
        after = ops.Identity(root.WithControlDependencies(broken), np.ones(2, F32))
        free = ops.Identity(root, np.ones(2, F32))
        session = mg.ClientSession(root, backend="reference")
        np.testing.assert_array_equal(session.Run({}, free), [1, 1])
        with pytest.raises(InvalidArgumentError, match="'broken'"):
            session.Run({x: data(8)}, after)


# ----------------------------------------------------------------------------- plan cache, backends


class TestPlanCacheAndBackends:
    def test_plan_cache_reuse(self, monkeypatch):
        calls = []
        original = session_module._plan

        def counting_plan(*args):
            calls.append(args)
            return original(*args)

        monkeypatch.setattr(session_module, "_plan", counting_plan)
        root, x, bn, out = bn_graph()
        session = mg.ClientSession(root, backend="reference")
        for seed in range(3):  # new feed values, same plan: results still follow the feeds
            value = data(seed)
            ref = expected_y(value)
            assert_close(session.Run({x: value}, out), ref["y"], dtype=F32, mag=ref["mag"]["y"])
        assert len(calls) == 1
        session.Run({x: data(0)}, [out, bn.batch_mean])  # another fetch list: a new plan
        session.Run({x: data(0)}, out, targets=[bn.operation])  # another target list
        assert len(calls) == 3
        session.Run({x: data(0)}, [out, bn.batch_mean])
        assert len(calls) == 3
        # plans belong to a session
        mg.ClientSession(root, backend="reference").Run({x: data(0)}, out)
        assert len(calls) == 4

    def test_explicit_backend(self):
        root, *_ = bn_graph()
        for name in BACKENDS:
            assert mg.ClientSession(root, backend=name).backend == name

    def test_backend_from_environment(self, monkeypatch):
        root, *_ = bn_graph()
        monkeypatch.setenv("MINIGRAPH_BACKEND", "reference")
        assert mg.ClientSession(root).backend == "reference"
        monkeypatch.setenv("MINIGRAPH_BACKEND", "tpu")
        with pytest.raises(InvalidArgumentError, match="unknown backend 'tpu'"):
            mg.ClientSession(root)

    def test_unknown_backend(self):
        root, *_ = bn_graph()
        with pytest.raises(InvalidArgumentError, match="unknown backend 'cuda'"):
            mg.ClientSession(root, backend="cuda")

    @pytest.mark.skipif(NATIVE_AVAILABLE, reason="the native backend is built here")
    def test_native_unavailable(self, monkeypatch):
        root, *_ = bn_graph()
        with pytest.raises(mg.errors.UnavailableError, match="native"):
            mg.ClientSession(root, backend="native")
        monkeypatch.delenv("MINIGRAPH_BACKEND", raising=False)
        from minigraph import backends
        monkeypatch.setattr(backends, "_warned_fallback", False)
        with pytest.warns(RuntimeWarning, match="reference"):
            assert mg.ClientSession(root).backend == "reference"

    @pytest.mark.skipif(not NATIVE_AVAILABLE, reason="the native backend is not built")
    def test_native_is_the_default_when_built(self, monkeypatch):
        root, *_ = bn_graph()
        monkeypatch.delenv("MINIGRAPH_BACKEND", raising=False)
        assert mg.ClientSession(root).backend == "native"


# ----------------------------------------------------------------------------- threads


@pytest.mark.parametrize("backend", BACKENDS)
def test_concurrent_runs_from_8_threads(backend):
    root, x, bn, out = bn_graph(shape=None)
    grad = ops.FusedBatchNormGradV3(root, out, x, np.array([1.0, 2.0, 0.5, -1.0], F32),
                                    bn.reserve_space_1, bn.reserve_space_2, bn.reserve_space_3,
                                    epsilon=1e-3)
    session = mg.ClientSession(root, backend=backend)
    barrier = threading.Barrier(8)

    def work(thread):
        barrier.wait()
        for i in range(10):
            value = data(100 * thread + i, n=1 + (thread + i) % 4)
            y, mean, dx = session.Run({x: value}, [out, bn.batch_mean, grad.x_backprop])
            ref = expected_y(value)
            assert_close(y, ref["y"], dtype=F32, mag=ref["mag"]["y"])
            assert_close(mean, ref["batch_mean"], dtype=F32, mag=ref["mag"]["batch_mean"])
            assert dx.shape == value.shape
        return thread

    with ThreadPoolExecutor(max_workers=8) as pool:
        assert sorted(pool.map(work, range(8))) == list(range(8))


def test_control_edge_from_a_fed_placeholder_is_satisfied_by_the_feed():
    """TF moves a fed node's control edges onto the feed: the placeholder never runs."""
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[2])
    y = ops.Identity(root.WithControlDependencies([x.op]), ops.Mul(root, x, x))
    np.testing.assert_array_equal(mg.ClientSession(root).Run({x: np.array([1, 3], np.float32)},
                                                             y), [1, 9])
    with pytest.raises(mg.errors.InvalidArgumentError, match="must feed a value for "
                                                             "placeholder tensor 'x'"):
        mg.ClientSession(root).Run(y)
