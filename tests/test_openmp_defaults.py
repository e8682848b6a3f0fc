"""minigraph's OpenMP wait-policy default (minigraph/backends/native.py, top section).

A short spin (GOMP_SPINCOUNT=1000) unless the user chose a policy; the variable is set only
while the extension loads the OpenMP runtime, so the user's environment is unchanged
afterwards. Each case runs in a fresh interpreter: the runtime reads its environment once,
when it is loaded.
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
import ctypes, json, os, sys
import numpy as np
import minigraph as mg
from minigraph import ops
from minigraph.backends import native
root = mg.Scope.NewRootScope()
x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[64, 32, 32, 16])
y = ops.Relu(root, x)
out = mg.ClientSession(root, backend="native").Run({x: -np.ones((64, 32, 32, 16), np.float32)},
                                                   [y])
gomp = [line.split()[-1] for line in open("/proc/self/maps") if "libgomp" in line]
shown = False
if gomp:
    try:
        display = ctypes.CDLL(gomp[0]).omp_display_env
    except AttributeError:  # an old libgomp
        pass
    else:
        sys.stderr.flush()
        display(1)  # the runtime's settings, GOMP_* included, on stderr
        shown = True
print(json.dumps({"applied": native.WAIT_POLICY_APPLIED, "ok": float(np.sum(out)) == 0.0,
                  "shown": shown,
                  "env": {k: os.environ.get(k) for k in native.WAIT_POLICY_VARS}}))
"""


def probe(**environment: str) -> tuple[dict, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in native.WAIT_POLICY_VARS and not k.startswith("MINIGRAPH_")}
    env.update(environment, MINIGRAPH_NUM_THREADS="2")
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def runtime_setting(stderr: str, name: str) -> str | None:
    """``name``'s value in omp_display_env's output (``  NAME = 'VALUE'``), or None."""
    for line in stderr.splitlines():
        key, _, value = line.strip().partition(" = ")
        if key == name:
            return value.strip("'")
    return None


def test_short_spin_by_default_and_the_environment_is_left_as_it_was():
    result, stderr = probe()
    assert result["ok"] and result["applied"]
    assert result["env"] == {name: None for name in native.WAIT_POLICY_VARS}
    if result["shown"]:
        assert runtime_setting(stderr, "GOMP_SPINCOUNT") == native.DEFAULT_SPINCOUNT


@pytest.mark.parametrize("name, value", [("OMP_WAIT_POLICY", "active"),
                                         ("OMP_WAIT_POLICY", ""),
                                         ("GOMP_SPINCOUNT", "10000"),
                                         ("KMP_BLOCKTIME", "5")])
def test_a_policy_the_user_chose_stands(name, value):
    result, stderr = probe(**{name: value})
    assert result["ok"] and not result["applied"]
    assert result["env"] == {**{n: None for n in native.WAIT_POLICY_VARS}, name: value}
    if result["shown"] and name == "OMP_WAIT_POLICY" and value:
        assert runtime_setting(stderr, "OMP_WAIT_POLICY") == "ACTIVE"
    if result["shown"] and name == "GOMP_SPINCOUNT":
        assert runtime_setting(stderr, "GOMP_SPINCOUNT") == "10000"
    if result["shown"] and name == "OMP_WAIT_POLICY" and not value:  # libgomp's own default
        assert runtime_setting(stderr, "GOMP_SPINCOUNT") == "300000"
