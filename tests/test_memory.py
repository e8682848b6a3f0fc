"""The first session asks glibc to keep freed tensor memory (minigraph/client/memory.py):
after it, a step's large intermediates reuse the previous step's pages instead of faulting
fresh ones in, unless the user tuned malloc. Each case runs in a fresh interpreter (malloc
settings are per process) and counts minor page faults."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")

PROBE = r"""
import json, resource
import numpy as np
import minigraph as mg
from minigraph import ops
from minigraph.client import memory
root = mg.Scope.NewRootScope()
x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[64, 32, 32, 16])  # 4 MiB
y = ops.Relu(root, ops.Neg(root, x))
session = mg.ClientSession(root, backend="reference")
feed = {x: np.ones((64, 32, 32, 16), np.float32)}
session.Run(feed, y)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    session.Run(feed, y)
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
print(json.dumps({"applied": memory.keep_freed_memory(), "faults": faults}))
"""


def probe(**env: str) -> dict:
    environment = {k: v for k, v in os.environ.items() if k not in ("MALLOC_TRIM_THRESHOLD_",
                                                                    "MALLOC_MMAP_THRESHOLD_",
                                                                    "MALLOC_TOP_PAD_",
                                                                    "GLIBC_TUNABLES")}
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                            env={**environment, **env}, check=True)
    return json.loads(result.stdout.splitlines()[-1])


def test_steps_reuse_their_pages():
    result = probe()
    assert result["applied"] is True
    # 20 steps x two 4 MiB intermediates = 40960 pages if each step faulted them in again
    assert result["faults"] < 2000, result


def test_a_user_setting_stands_and_then_steps_fault_again():
    result = probe(MALLOC_MMAP_THRESHOLD_="131072")
    assert result["applied"] is False
    assert result["faults"] > 20 * 1024, result
