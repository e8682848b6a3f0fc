"""The bad-input fuzz campaign on the native kernels built with AddressSanitizer + UBSan.

The sanitized extension (kernels_c/build_native.py ``--sanitized``: ``-fsanitize=address,
undefined -fno-sanitize-recover=undefined -O1 -g``) is built once into build/asan/ and rebuilt
when a kernel source is newer; the first build takes about a minute on two cores. The campaign
(``FUZZ_ASAN_CASES`` per op, default 100, reference and native) then runs in a fresh interpreter
with libasan preloaded (tests/fuzz/sanitized.py): an out-of-bounds access, use after free or
undefined behaviour aborts its worker, which is a ``crash`` finding with the sanitizer's report.

Skipped (loudly) only without a C compiler, cffi or libasan; with ``CI=true`` that fails.
A long campaign by hand: ``make fuzz-asan``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fuzz import sanitized
from tests.fuzz.strategies import fuzzed_ops

ROOT = Path(__file__).resolve().parent.parent
CASES = int(os.environ.get("FUZZ_ASAN_CASES", "100"))
# kinds that can mean memory corruption; message quality is tests/test_fuzz.py's business
FATAL = ("crash", "hang", "other-exception", "mismatch", "disagree", "feed-mutated",
         "lost-data")


def _unavailable() -> str | None:
    cc = os.environ.get("CC", "gcc").split()[0]
    try:
        import cffi  # noqa: F401
    except ImportError:
        return "cffi is not installed"
    if sanitized.runtime_library() is None:
        return f"no C compiler ({cc}) or no AddressSanitizer runtime (libasan.so) for it"
    return None


@pytest.fixture(scope="module")
def sanitized_so() -> str:
    reason = _unavailable()
    if reason:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"sanitized native fuzzing cannot run on CI: {reason} (install gcc "
                        f"with libasan)")
        pytest.skip(f"sanitized native fuzzing SKIPPED: {reason}")
    start = time.perf_counter()
    try:
        path = sanitized.ensure_built()
    except subprocess.CalledProcessError as error:
        pytest.fail(f"the sanitized build failed: {error}")
    print(f"sanitized extension: {path} ({time.perf_counter() - start:.1f} s)")
    return path


def _text(findings: list[dict]) -> str:
    return "\n\n".join(f"{f['op']}: {f['kind']} [{f['target']}] x{f['count']}: {f['message']}"
                       f"\n  case: {f['case']}\n  repro:\n    "
                       + f["repro"].replace("\n", "\n    ") for f in findings)


def test_native_kernels_under_asan_ubsan(sanitized_so, tmp_path):
    report = tmp_path / "fuzz.json"
    command = [sys.executable, "-m", "tests.fuzz.run", "--cases", str(CASES), "--targets",
               "reference,native", "--json", str(report)]
    env = sanitized.environment(sanitized_so)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=900)
    print(f"{done.stdout.strip()}\n({time.perf_counter() - start:.1f} s)")
    if not report.exists():
        pytest.fail(f"the sanitized fuzz campaign died (status {done.returncode}):\n"
                    f"{done.stdout}\n{done.stderr[-6000:]}")
    result = json.loads(report.read_text())
    assert result["native_module"] == sanitized_so, "the campaign did not load the sanitized build"
    native = result["summary"]["native"]
    assert native["cases"] == CASES * len(fuzzed_ops())
    assert native.get("missing", 0) == 0
    fatal = [f for f in result["findings"] if f["kind"] in FATAL]
    assert not fatal, f"{len(fatal)} findings under ASan/UBSan\n\n" + _text(fatal)
