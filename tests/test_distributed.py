"""minigraph.distributed: Chan's combination, the ops on one process, and real MPI jobs.

The MPI tests launch ``mpiexec -n N python tests/mpi/<script>.py`` (2 and 4 processes; 4
oversubscribes a 2-core machine, which is fine for these small jobs). They are skipped only
when mpi4py or mpiexec is not installed (the ``minigraph[mpi]`` extra provides both).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

import minigraph as mg
from minigraph import distributed as dist
from minigraph import ops

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SCRIPTS = os.path.join(HERE, "mpi")
FAILURE_TIMEOUT = 5  # seconds: $MINIGRAPH_COLLECTIVE_TIMEOUT in the failure tests


# ----------------------------------------------------------------------------- one process


def test_combine_moments_is_exact_for_unequal_parts():
    """Chan's formula on uneven parts (one empty) equals the moments of the concatenation;
    averaging the parts' variances does not."""
    rng = np.random.default_rng(0)
    parts = [rng.normal(shift, 1 + abs(shift), (n, 3)) for shift, n in ((0, 2), (3, 7), (1, 0),
                                                                     (-2, 5))]
    counts = [len(p) for p in parts]
    means = [p.mean(axis=0) if len(p) else np.zeros(3) for p in parts]
    m2s = [((p - p.mean(axis=0)) ** 2).sum(axis=0) if len(p) else np.zeros(3) for p in parts]
    n, mean, m2 = dist.combine_moments(counts, means, m2s)
    whole = np.concatenate(parts)
    assert n == len(whole)
    np.testing.assert_allclose(mean, whole.mean(axis=0), rtol=1e-13)
    np.testing.assert_allclose(m2 / n, whole.var(axis=0), rtol=1e-13)
    averaged = np.mean([m / c for m, c in zip(m2s, counts) if c], axis=0)
    assert not np.allclose(averaged, whole.var(axis=0), rtol=1e-2)


def test_combine_moments_of_nothing_is_nan():
    n, mean, m2 = dist.combine_moments([0, 0], np.zeros((2, 4)), np.zeros((2, 4)))
    assert n == 0 and np.isnan(mean).all() and np.isnan(m2).all()


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW", "NDHWC", "NCDHW"])
def test_sync_batch_norm_on_one_process_is_fused_batch_norm(data_format):
    """Without MPI (rank 0 of 1) the split ops reproduce FusedBatchNormV3 and its gradient."""
    channels = 4
    spatial = (3, 2) if len(data_format) == 4 else (2, 2, 3)
    shape = (5, *spatial, channels) if data_format.endswith("C") else (5, channels, *spatial)
    rng = np.random.default_rng(1)
    x = rng.normal(2.0, 3.0, shape).astype(np.float32)
    w = rng.normal(size=shape).astype(np.float32)
    vectors = [rng.normal(size=channels).astype(np.float32) for _ in range(3)]
    variance = rng.uniform(0.5, 2.0, channels).astype(np.float32)
    root = mg.Scope.NewRootScope()
    xs = ops.Placeholder(root, mg.float32)
    scale, offset = ops.Const(root, vectors[0]), ops.Const(root, vectors[1])
    attrs = {"epsilon": 1e-3, "exponential_avg_factor": 0.4, "data_format": data_format}
    synced = dist.sync_batch_norm(root, xs, scale, offset, vectors[2], variance, **attrs)
    fused = ops.FusedBatchNormV3(root, xs, scale, offset, vectors[2], variance, **attrs)
    fetches = []
    for bn in (synced, fused):
        loss = ops.Sum(root, ops.Mul(root, bn.y, w), list(range(len(shape))))
        fetches.append([bn.y, bn.batch_mean, bn.batch_variance, bn.reserve_space_1,
                        bn.reserve_space_2]
                       + mg.AddSymbolicGradients(root, [loss], [xs, scale, offset]))
    session = mg.ClientSession(root, backend="reference")
    got, want = session.Run({xs: x}, fetches[0]), session.Run({xs: x}, fetches[1])
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * np.abs(b).max())


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
def test_sync_batch_norm_gradient_matches_finite_differences(data_format):
    """BatchNormApply's registered gradient (the statistics' dependence on x included) is
    the derivative of y, checked in float64 against central differences."""
    shape = (3, 2, 2, 3) if data_format == "NHWC" else (3, 3, 2, 2)
    rng = np.random.default_rng(2)
    root = mg.Scope.NewRootScope()
    xs = ops.Placeholder(root, mg.float32, shape=shape)
    scale = ops.Placeholder(root, mg.float32, shape=[3])
    offset = ops.Placeholder(root, mg.float32, shape=[3])
    bn = dist.sync_batch_norm(root, xs, scale, offset, np.zeros(0, np.float32),
                              np.zeros(0, np.float32), epsilon=1e-3, data_format=data_format)
    values = [rng.normal(1.0, 2.0, shape), rng.normal(1.0, 0.3, 3), rng.normal(size=3)]
    theoretical, numerical = mg.gradient_checker.compute_gradient(
        [xs, scale, offset], values, bn.y)
    assert mg.gradient_checker.max_error(theoretical, numerical) < 1e-6


def test_flat_concat_and_slice_gradients():
    root = mg.Scope.NewRootScope()
    a = ops.Placeholder(root, mg.float32, shape=[2, 3])
    b = ops.Placeholder(root, mg.float32, shape=[4])
    packed = dist.FlatConcat(root, [a, b])
    assert packed.shape == (10,)
    weights = np.arange(10, dtype=np.float32)
    y = ops.Mul(root, packed, ops.Const(root, weights))
    rng = np.random.default_rng(3)
    theoretical, numerical = mg.gradient_checker.compute_gradient(
        [a, b], [rng.normal(size=(2, 3)), rng.normal(size=4)], y)
    assert mg.gradient_checker.max_error(theoretical, numerical) < 1e-8
    back = dist.FlatSlice(root, packed, 6, [2, 2])
    got = mg.ClientSession(root).Run({a: np.zeros((2, 3), np.float32),
                                      b: np.arange(4, dtype=np.float32)}, back)
    np.testing.assert_array_equal(got, [[0, 1], [2, 3]])
    with pytest.raises(mg.errors.InvalidArgumentError, match="out of range"):
        dist.FlatSlice(root, packed, 8, [3])


def test_sync_batch_norm_shapes_and_errors():
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root, mg.float32, shape=[None, 4, 4, 3])
    bn = dist.sync_batch_norm(root, x, np.ones(3, np.float32), np.zeros(3, np.float32),
                              np.zeros(0, np.float32), np.zeros(0, np.float32))
    assert bn.y.shape == (None, 4, 4, 3) and bn.batch_mean.shape == (3,)
    with pytest.raises(mg.errors.InvalidArgumentError, match="one element per channel"):
        dist.sync_batch_norm(root, x, np.ones(2, np.float32), np.zeros(3, np.float32),
                             np.zeros(0, np.float32), np.zeros(0, np.float32))
    with pytest.raises(mg.errors.InvalidArgumentError, match="rank 5"):
        dist.sync_batch_norm(root, x, np.ones(3, np.float32), np.zeros(3, np.float32),
                             np.zeros(0, np.float32), np.zeros(0, np.float32),
                             data_format="NDHWC")


def test_fused_all_reduce_round_trips_shapes_on_one_process():
    root = mg.Scope.NewRootScope()
    a = ops.Const(root, np.arange(6, dtype=np.float32).reshape(2, 3))
    b = ops.Const(root, np.float32(7.0))
    c = ops.Const(root, np.arange(4, dtype=np.float64))
    reduced = dist.fused_all_reduce(root, [a, b, c])
    got = mg.ClientSession(root).Run({}, reduced)
    assert [r.shape for r in reduced] == [(2, 3), (), (4,)]
    for value, want in zip(got, (np.arange(6).reshape(2, 3), 7.0, np.arange(4))):
        np.testing.assert_array_equal(value, want)
    collectives = [op for op in root.graph().operations() if op.type == "CollectiveAllReduce"]
    assert len(collectives) == 2  # one per dtype


def test_collective_timeout_setting(monkeypatch):
    monkeypatch.setenv(dist.ENV_TIMEOUT, "2.5")
    assert dist.timeout() == 2.5 and dist.timeout(7) == 7.0
    monkeypatch.setenv(dist.ENV_TIMEOUT, "soon")
    with pytest.raises(mg.errors.InvalidArgumentError, match=dist.ENV_TIMEOUT):
        dist.timeout()


# ----------------------------------------------------------------------------- MPI jobs


def _mpiexec() -> str | None:
    local = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return local if os.path.exists(local) else shutil.which("mpiexec")


MPIEXEC = _mpiexec()
HAVE_MPI4PY = importlib.util.find_spec("mpi4py") is not None
needs_mpi = pytest.mark.skipif(not (MPIEXEC and HAVE_MPI4PY),
                               reason="needs mpi4py and mpiexec (pip install 'minigraph[mpi]')")


def _launcher_flavor() -> str:
    if not MPIEXEC:
        return ""
    try:
        text = subprocess.run([MPIEXEC, "--version"], capture_output=True, text=True,
                              timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    return "hydra" if "HYDRA" in text else "openmpi" if "Open MPI" in text.replace(
        "OpenRTE", "Open MPI") else ""


FLAVOR = _launcher_flavor()


def run_mpi(processes: int, script: str, *args: str, timeout: float = 60.0,
            collective_timeout: float = 30.0, keep_going: bool = False
            ) -> tuple[subprocess.CompletedProcess, float]:
    """``mpiexec -n processes python tests/mpi/script args``; (result, seconds).

    ``keep_going`` asks the launcher not to kill the job when one process exits badly
    (Hydra's -disable-auto-cleanup), so that the survivors' own timeout is what stops them.
    """
    command = [MPIEXEC, "-n", str(processes)]
    if FLAVOR == "openmpi":
        command.append("--oversubscribe")
    if keep_going:
        if FLAVOR != "hydra":
            pytest.skip("needs MPICH's Hydra launcher (-disable-auto-cleanup)")
        command.append("-disable-auto-cleanup")
    command += [sys.executable, "-W", "ignore", os.path.join(SCRIPTS, script), *args]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MINIGRAPH_NUM_THREADS="1")
    env[dist.ENV_TIMEOUT] = str(collective_timeout)
    if FLAVOR == "openmpi":  # CI containers often run as root
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    start = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT)
    return done, time.monotonic() - start


def result_of(done: subprocess.CompletedProcess) -> dict:
    assert done.returncode == 0, f"MPI job failed:\n{done.stdout}\n{done.stderr}"
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"no RESULT line:\n{done.stdout}\n{done.stderr}"
    return json.loads(lines[-1][len("RESULT "):])


SYNC_BN_CONFIGS = {
    2: [["NHWC", [3, 5], 1.0], ["NCHW", [4, 4], 0.3], ["NDHWC", [0, 6], 1.0],
        ["NCDHW", [2, 1], 0.5], ["NCHW", [7, 2], 1.0]],
    4: [["NHWC", [1, 4, 2, 3], 1.0], ["NCHW", [3, 0, 2, 1], 0.3], ["NCHW", [2, 2, 2, 2], 1.0]],
}


@needs_mpi
@pytest.mark.parametrize("processes", [2, 4])
def test_sync_batch_norm_matches_one_process_on_the_global_batch(processes):
    """y, batch statistics, x/scale/offset gradients of sync BN on P shards (unequal and
    empty shards, channel-last and channel-first) = FusedBatchNormV3 on the whole batch."""
    done, _ = run_mpi(processes, "sync_bn_check.py", json.dumps(SYNC_BN_CONFIGS[processes]))
    result = result_of(done)
    assert result["size"] == processes
    for name, error in result["all_reduce"].items():
        assert error <= 1e-6, (name, error)
    assert len(result["batch_norm"]) == len(SYNC_BN_CONFIGS[processes])
    for case in result["batch_norm"]:
        for name, error in case["errors"].items():
            assert error <= 1e-5, (case["data_format"], case["sizes"], name, error)


@needs_mpi
@pytest.mark.parametrize("processes,config,tolerance", [
    (2, {"data_format": "NHWC", "sizes": [8, 8], "optimizer": "momentum", "steps": 3}, 2e-5),
    (4, {"data_format": "NCHW", "sizes": [3, 6, 2, 5], "optimizer": "momentum", "steps": 3},
     2e-5),
    # Adam divides by sqrt(v): where a gradient is ~0 its float rounding noise becomes a
    # visible step, so the agreement is looser (a real error would be O(1)).
    (2, {"data_format": "NHWC", "sizes": [5, 11], "optimizer": "adam", "steps": 3}, 2e-3),
])
def test_data_parallel_training_matches_one_process(processes, config, tolerance):
    done, _ = run_mpi(processes, "dp_train_check.py", json.dumps(config))
    result = result_of(done)
    assert result["initial_difference"] == 0.0
    assert result["identical_across_ranks"]
    assert result["max_relative_error"] <= tolerance, result


def _failure_module():
    spec = importlib.util.spec_from_file_location("failure_check",
                                                  os.path.join(SCRIPTS, "failure_check.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assert_checkpoint_intact(directory) -> None:
    """No temporary file left; the checkpoint (rank 0 saved steps 1 and 2) restores."""
    names = sorted(os.listdir(directory))
    assert not [n for n in names if n.endswith(".tmp")], names
    assert names == ["checkpoint.npz"], names
    root = mg.Scope.NewRootScope()
    _failure_module().build(root, distributed=False)
    mg.train.Saver(root).restore(mg.ClientSession(root), os.path.join(directory,
                                                                     "checkpoint.npz"))


def describe(done: subprocess.CompletedProcess, seconds: float) -> str:
    return (f"exit code {done.returncode} after {seconds:.1f} s\n--- stdout\n{done.stdout}\n"
            f"--- stderr\n{done.stderr}")


@needs_mpi
@pytest.mark.parametrize("mode", ["exit", "hang"])
def test_survivors_time_out_when_a_rank_dies_or_hangs(mode, tmp_path):
    """The last rank os._exit()s or hangs at step 3; the launcher is told not to clean up,
    so only minigraph's deadline stops the survivors: UnavailableError naming the
    collective, rank and timeout, then MPI_Abort, well before the test's own timeout."""
    done, seconds = run_mpi(3, "failure_check.py", mode, str(tmp_path), timeout=40,
                            collective_timeout=FAILURE_TIMEOUT, keep_going=True)
    report = describe(done, seconds)
    assert done.returncode != 0, report
    assert "SAVED 2" in done.stdout, report
    assert re.search(rf"UnavailableError: CollectiveBatchNormStats '[^']+' \(Iallgather [^)]+\) "
                     rf"timed out after {FAILURE_TIMEOUT} s on rank [01] of 3", done.stderr), \
        report
    assert "calling MPI_Abort" in done.stderr, report
    assert FAILURE_TIMEOUT <= seconds < FAILURE_TIMEOUT + 15, report
    assert_checkpoint_intact(tmp_path)


@needs_mpi
def test_a_rank_raising_aborts_the_job(tmp_path):
    """The excepthook prints the error and calls MPI_Abort: no waiting for the timeout."""
    done, seconds = run_mpi(2, "failure_check.py", "raise", str(tmp_path), timeout=40,
                            collective_timeout=30, keep_going=True)
    report = describe(done, seconds)
    assert done.returncode != 0, report
    assert "RuntimeError: injected failure on rank 1 at step 3" in done.stderr, report
    assert "rank 1 of 2 stopped on an uncaught RuntimeError; calling MPI_Abort" in \
        done.stderr, report
    assert seconds < 20, report
    assert_checkpoint_intact(tmp_path)


@needs_mpi
def test_a_rank_dying_under_the_default_launcher(tmp_path):
    """With the launcher's default clean-up, a dead rank ends the job at once."""
    done, seconds = run_mpi(2, "failure_check.py", "exit", str(tmp_path), timeout=40,
                            collective_timeout=30)
    report = describe(done, seconds)
    assert done.returncode != 0, report
    assert "SAVED 2" in done.stdout, report
    assert seconds < 20, report
    assert_checkpoint_intact(tmp_path)
