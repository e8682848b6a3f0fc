"""Bad-input fuzzing of every op: the promise is a clean ``minigraph.errors`` exception naming
the op (and the input), never a crash, a hang, an unrelated exception, silent garbage or lost
data (the harness is in tests/fuzz/, see its package docstring).

The campaign runs in a fresh interpreter (``python -m tests.fuzz.run``: no TensorFlow, which
this pytest process may hold, and workers forked from a process that imported only
minigraph). Hypothesis draws the cases derandomized, so every run sees the same cases:
``FUZZ_CASES`` per op (default 25), on the reference and native backends; each finding is a
failure of its op's test below. The OpenCL device is fuzzed the same way against the reference
backend, for the ops it has kernels for, in its own interpreter.

A long campaign: ``python -m tests.fuzz.run --cases 500 [--seed N] [-v]``; the summary goes to
``$FUZZ_REPORT`` too when it is set.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import NATIVE_AVAILABLE
from tests.fuzz.strategies import OPENCL_OPS, fuzzed_ops

ROOT = Path(__file__).resolve().parent.parent
CASES = int(os.environ.get("FUZZ_CASES", "25"))
OPENCL_CASES = int(os.environ.get("FUZZ_OPENCL_CASES", "15"))


def _campaign(tmp_path: Path, targets: str, cases: int, extra=()) -> tuple[dict, str]:
    report = tmp_path / "fuzz.json"
    command = [sys.executable, "-m", "tests.fuzz.run", "--cases", str(cases), "--targets",
               targets, "--json", str(report), *extra]
    if os.environ.get("FUZZ_REPORT"):
        command += ["--report", os.path.join(os.environ["FUZZ_REPORT"],
                                             targets.replace(",", "-"))]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    if not report.exists():
        pytest.fail(f"the fuzz campaign died (status {done.returncode}):\n{done.stdout}\n"
                    f"{done.stderr[-4000:]}")
    return json.loads(report.read_text()), done.stdout


class _Summary:
    """Prints the campaign summaries at the end of the pytest run."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def pytest_terminal_summary(self, terminalreporter):
        terminalreporter.section("fuzz summary")
        for text in self.texts:
            terminalreporter.write_line(text)


@pytest.fixture(scope="module")
def summary_printer(request):
    printer = _Summary()
    request.config.pluginmanager.register(printer, "fuzz-summary")
    return printer


@pytest.fixture(scope="module")
def cpu_campaign(tmp_path_factory, summary_printer) -> dict:
    targets = "reference,native" if NATIVE_AVAILABLE else "reference"
    report, stdout = _campaign(tmp_path_factory.mktemp("fuzz"), targets, CASES)
    summary_printer.texts.append(stdout.split("\n  ")[0].rstrip())
    return report


def _findings_text(findings: list[dict]) -> str:
    return "\n\n".join(f"{f['kind']} [{f['target']}] x{f['count']}: {f['message']}\n"
                       f"  case: {f['case']}\n  repro:\n    "
                       + f["repro"].replace("\n", "\n    ") for f in findings)


def test_campaign_covers_every_op(cpu_campaign):
    summary = cpu_campaign["summary"]
    assert {"Relu", "Conv2D", "FusedBatchNormV3", "ApplyAdam"} <= set(fuzzed_ops())
    assert summary["reference"]["cases"] == CASES * len(fuzzed_ops())
    for target, counts in summary.items():
        assert counts.get("missing", 0) == 0, f"{target}: cases without an outcome"


@pytest.mark.parametrize("op_type", fuzzed_ops())
def test_bad_input(cpu_campaign, op_type):
    findings = [f for f in cpu_campaign["findings"] if f["op"] == op_type]
    assert not findings, f"{op_type}: {len(findings)} distinct findings\n\n" + \
        _findings_text(findings)


def test_opencl_device(tmp_path, summary_printer):
    probe = subprocess.run(
        [sys.executable, "-c", "from minigraph.backends import opencl\n"
         "print(sum(1 for d in opencl.devices() if d.name))"],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    if probe.returncode != 0 or not probe.stdout.strip().isdigit() or \
            int(probe.stdout.strip()) == 0:
        reason = (probe.stderr.strip().splitlines() or ["no OpenCL device"])[-1]
        pytest.skip(f"OpenCL fuzzing SKIPPED: no usable OpenCL device ({reason}); CI installs "
                    f"PoCL")
    report, stdout = _campaign(tmp_path, "opencl,reference", OPENCL_CASES,
                               ["--timeout", "60"])
    summary_printer.texts.append(stdout.split("\n  ")[0].rstrip())
    counts = report["summary"]["opencl"]
    unavailable = [f for f in report["findings"] if "UnavailableError" in f["message"]]
    if unavailable and counts.get("ok", 0) == 0:
        pytest.skip(f"OpenCL fuzzing SKIPPED: the device cannot run kernels here: "
                    f"{unavailable[0]['message'][:300]}")
    assert counts["cases"] == OPENCL_CASES * len(OPENCL_OPS)
    assert not report["findings"], _findings_text(report["findings"])


def _fake_execute(case, target):
    """Case 3 segfaults on native, case 5 hangs on reference, case 7 segfaults only after
    case 6 ran in the same process; everything else is fine."""
    import signal
    import time

    from tests.fuzz import runner
    from tests.fuzz.cases import Outcome

    if case.index == 6:
        runner._fake_poisoned = True
    if (case.index == 3 and target == "native") or (
            case.index == 7 and getattr(runner, "_fake_poisoned", False)):
        os.kill(os.getpid(), signal.SIGSEGV)
    if case.index == 5 and target == "reference":
        time.sleep(60)
    return Outcome("ok", "run")


def test_runner_attributes_crashes_and_hangs(monkeypatch):
    from tests.fuzz import runner
    from tests.fuzz.cases import Case

    monkeypatch.setattr(runner, "execute", _fake_execute)
    cases = [Case("Identity", [], {}, index=i) for i in range(10)]
    got = runner.run_cases(cases, ["reference", "native"], workers=2, batch=10, timeout=2)
    kinds = {key: outcome.kind for key, outcome in got.items()}
    assert kinds[(3, "native")] == "crash" and "SIGSEGV" in got[(3, "native")].message
    assert kinds[(5, "reference")] == "hang" and kinds[(5, "native")] == "skipped"
    assert kinds[(7, "reference")] == "crash" and "after cases" in got[(7, "reference")].message
    others = {k: v for k, v in kinds.items() if k[0] not in (3, 5, 7)}
    assert set(others.values()) == {"ok"} and len(others) == 14
