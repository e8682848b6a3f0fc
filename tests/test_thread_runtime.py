"""One thread runtime: every native kernel family, batch norm's included, runs on minigraph's
worker pool (kernels_c/mg_runtime.c), and the extension loads no OpenMP runtime.

Each case runs in a fresh interpreter (threads and loaded libraries are per process), with
OpenBLAS and OpenMP held to one thread so that only minigraph's workers are counted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from minigraph.backends import native

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.skipif(not native.available(), reason="the native backend is not built")

PROBE = r"""
import json, os
import numpy as np
from minigraph.backends import native
from minigraph.backends.convolution_kernels import c_conv2d

def threads():
    return len(os.listdir("/proc/self/task"))

rng = np.random.default_rng(0)
x = rng.standard_normal((8, 32, 32, 64)).astype(np.float32)
c = np.ones(64, np.float32)
before = threads()
native.bn_forward_training(x, c, c, 1e-3, True)
after_bn = threads()
xt = np.ascontiguousarray(x.transpose(0, 3, 1, 2))  # NCHW
native.bn_backward_training(xt, xt, c, c, c, 1e-3, False)
f = rng.standard_normal((3, 3, 64, 64)).astype(np.float32)
c_conv2d(x, f, ((1, 1), (1, 1)), (32, 32), True)
after_all = threads()
maps = open("/proc/self/maps").read()
print(json.dumps({"before": before, "after_bn": after_bn, "after_all": after_all,
                  "openmp": sorted({line.split()[-1] for line in maps.splitlines()
                                    if any(n in line for n in ("libgomp", "libomp", "libiomp"))})}))
"""


@pytest.mark.parametrize("threads", [2, 3])
def test_batch_norm_and_convolutions_share_one_pool_and_no_openmp_runtime(threads):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINIGRAPH_")}
    env.update(MINIGRAPH_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS="1",
               OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["openmp"] == []
    # the pool's workers start with batch norm's first parallel call (threads - 1 of them)...
    assert result["after_bn"] - result["before"] == threads - 1
    # ...and the convolution reuses them: no second team
    assert result["after_all"] == result["after_bn"]


AFFINITY_PROBE = r"""
import json, os, sys, time
import numpy as np
from minigraph.backends import native

cpus = sorted(os.sched_getaffinity(0))
if sys.argv[1] == "one":
    os.sched_setaffinity(0, cpus[:1])  # the pool's workers inherit it when they start
rng = np.random.default_rng(0)
x = rng.standard_normal((64, 16, 16, 32)).astype(np.float32)
c = rng.uniform(0.5, 1.5, 32).astype(np.float32)
results = []
for _ in range(20):
    results.append(native.bn_forward_training(x, c, c, 1e-3, True)[0])
    time.sleep(0.002)  # longer than the workers poll: each call wakes them from sleep
masks = {}
for tid in os.listdir("/proc/self/task"):
    with open(f"/proc/self/task/{tid}/status") as status:
        for line in status:
            if line.startswith("Cpus_allowed_list:"):
                masks[tid] = line.split()[1]
native.set_num_threads(1)
serial = native.bn_forward_training(x, c, c, 1e-3, True)[0]
print(json.dumps({"masks": sorted(set(masks.values())), "threads": len(masks),
                  "same": all(np.array_equal(r, serial) for r in results)}))
"""


def _cpu_list(cpus: list[int]) -> str:
    """The kernel's Cpus_allowed_list spelling of a sorted CPU set (ranges joined by ',')."""
    runs, start = [], cpus[0]
    for previous, cpu in zip(cpus, cpus[1:] + [None]):
        if cpu != previous + 1:
            runs.append(f"{start}-{previous}" if previous > start else str(start))
            start = cpu
    return ",".join(runs)


@pytest.mark.parametrize("allowed", ["all", "one"])
def test_woken_workers_keep_their_cpu_masks_and_the_results(allowed):
    """A woken worker that lands on its job's CPU narrows its own CPU mask to move off it and
    restores it at once (mg_runtime.c, leave_master_cpu): after calls that each wake the pool
    from sleep, every thread still has the process's mask (all CPUs, or the one CPU the
    process was restricted to: then there is nowhere to move), and every call gives the
    bits of a one-thread call."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINIGRAPH_")}
    env.update(MINIGRAPH_NUM_THREADS="2", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", AFFINITY_PROBE, allowed], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    cpus = sorted(os.sched_getaffinity(0))
    assert result["masks"] == [_cpu_list(cpus if allowed == "all" else cpus[:1])]
    assert result["threads"] >= 2 and result["same"]
