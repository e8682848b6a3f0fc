"""Configuration from the environment: a bad value warns once (or, for the backend, is one
clear error at session creation) instead of breaking every kernel call or every import.

Each case runs in a fresh interpreter, since the variables are read at import.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from minigraph.backends import native
from minigraph.errors import InvalidArgumentError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
needs_native = pytest.mark.skipif(not native.available(), reason="the native backend is not "
                                  "built")

PROBE = """
import json, warnings
import numpy as np
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import minigraph as mg
    from minigraph import ops
    from minigraph.backends import native
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[2, 3])
    y = ops.Relu(root, x)
    session = mg.ClientSession(root, backend="native")
    for _ in range(3):
        out = session.Run({x: -np.ones((2, 3), np.float32)}, [y])
    result = {"threads": native.num_threads(), "isa": native.isa(),
              "best_isa": native.best_isa(), "ok": float(np.asarray(out).sum()) == 0.0}
result["warnings"] = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
print(json.dumps(result))
"""


def probe(**environment: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINIGRAPH_")}
    env.update(environment)
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


DEFAULT = min(os.cpu_count() or 1, native.MAX_THREADS)


@needs_native
@pytest.mark.parametrize("value", ["99999999999", "0", "-3", "four", "2.5", "1025", "3e2",
                                   "\u0663"])
def test_invalid_thread_count_warns_once_and_uses_the_default(value):
    result = probe(MINIGRAPH_NUM_THREADS=value)
    assert result["ok"] and result["threads"] == DEFAULT
    assert len(result["warnings"]) == 1, result["warnings"]
    assert "MINIGRAPH_NUM_THREADS" in result["warnings"][0]
    assert repr(value) in result["warnings"][0]


@needs_native
@pytest.mark.parametrize("value, threads", [("3", 3), (" 2 ", 2), ("1024", 1024), ("", DEFAULT)])
def test_valid_thread_counts(value, threads):
    result = probe(MINIGRAPH_NUM_THREADS=value)
    assert result == {**result, "ok": True, "threads": threads, "warnings": []}


@needs_native
def test_unknown_isa_warns_once_and_keeps_the_best():
    result = probe(MINIGRAPH_NATIVE_ISA="bogus")
    assert result["ok"] and result["isa"] == result["best_isa"]
    assert len(result["warnings"]) == 1, result["warnings"]
    assert "MINIGRAPH_NATIVE_ISA='bogus'" in result["warnings"][0]


@needs_native
def test_known_isa_names():
    result = probe(MINIGRAPH_NATIVE_ISA="scalar")
    assert result["ok"] and result["isa"] == "scalar" and not result["warnings"]
    result = probe(MINIGRAPH_NATIVE_ISA=" AVX2 ")
    assert result["ok"] and result["isa"] == ("avx2" if result["best_isa"] != "scalar"
                                              else "scalar")


def test_unknown_backend_is_one_clear_error_at_session_creation():
    code = textwrap.dedent("""
        import minigraph as mg
        from minigraph import ops
        root = mg.Scope.NewRootScope()
        ops.Placeholder(root, mg.float32)
        try:
            mg.ClientSession(root)
        except mg.errors.InvalidArgumentError as exc:
            print("ERROR", exc)
        print(mg.ClientSession(root, backend="reference").backend)
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINIGRAPH_")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**env, "MINIGRAPH_BACKEND": "bogus"}, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    error, backend = done.stdout.strip().splitlines()
    assert "unknown backend 'bogus' (from $MINIGRAPH_BACKEND)" in error
    assert backend == "reference"  # an explicit backend still works


@needs_native
def test_set_num_threads_overrides_the_environment(monkeypatch):
    monkeypatch.setenv("MINIGRAPH_NUM_THREADS", "3")
    try:
        native.set_num_threads(2)
        assert native.num_threads() == 2
        monkeypatch.setenv("MINIGRAPH_NUM_THREADS", "5")
        assert native.num_threads() == 2
    finally:
        native.set_num_threads(None)
    assert native.num_threads() == 5


@pytest.mark.parametrize("bad", [0, -1, 1025, 10**12, 2.0, "4", True, object()])
def test_set_num_threads_validates(bad):
    with pytest.raises(InvalidArgumentError, match="integer from 1 to 1024"):
        native.set_num_threads(bad)
    assert native._threads_override is None
