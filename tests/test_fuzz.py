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

Hostile files (GraphDef import/export, ``.pbtxt``, ``summary.FileWriter``, ``io.read_graph``,
the op-level cases of the same issue) are fuzzed by family (tests/fuzz/hostile.py, one forked
child per case under a memory limit): ``FUZZ_HOSTILE_CASES`` per family (default 20); each
finding (unclear, raw, crash, hang, memory, wrong) fails its family's test below. A long one:
``python -m tests.fuzz.hostile --cases 200 --scale 4``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import NATIVE_AVAILABLE
from tests.fuzz.hostile_cases import FAMILIES
from tests.fuzz.strategies import OPENCL_OPS, fuzzed_ops

ROOT = Path(__file__).resolve().parent.parent
CASES = int(os.environ.get("FUZZ_CASES", "25"))
OPENCL_CASES = int(os.environ.get("FUZZ_OPENCL_CASES", "15"))
HOSTILE_CASES = int(os.environ.get("FUZZ_HOSTILE_CASES", "20"))


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


# ----------------------------------------------------------------------------- hostile files


@pytest.fixture(scope="module")
def hostile_campaign(tmp_path_factory, summary_printer) -> dict:
    report = tmp_path_factory.mktemp("hostile") / "hostile.json"
    done = subprocess.run([sys.executable, "-m", "tests.fuzz.hostile", "--cases",
                           str(HOSTILE_CASES), "--json", str(report)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    if not report.exists():
        pytest.fail(f"the hostile-file campaign died (status {done.returncode}):\n"
                    f"{done.stdout}\n{done.stderr[-4000:]}")
    summary_printer.texts.append(done.stdout.split("\n  ")[0].rstrip())
    return json.loads(report.read_text())


@pytest.mark.parametrize("family", list(FAMILIES))
def test_hostile_files(hostile_campaign, family):
    counts = hostile_campaign["table"][family]
    assert counts["cases"] == HOSTILE_CASES
    findings = [f for f in hostile_campaign["findings"] if f["family"] == family]
    assert not findings, "\n".join(f"{f['column']}: {f['case']}\n    {f['why']}"
                                    for f in findings)


def _hostile_work(item):
    """Item 1 segfaults, item 2 hangs, item 3 allocates past the child's memory limit,
    item 4 grows its memory by 64 MiB and answers; the rest answer at once."""
    import signal
    import time

    if item == 1:
        os.kill(os.getpid(), signal.SIGSEGV)
    if item == 2:
        time.sleep(60)
    if item == 3:
        try:
            bytearray(1 << 31)
        except MemoryError:
            return "MemoryError"
    if item == 4:  # a fresh mapping, each page written: malloc might hand back pages the
        import mmap  # parent left resident, and untouched pages are not resident at all

        block = mmap.mmap(-1, 64 << 20)
        for offset in range(0, len(block), mmap.PAGESIZE):
            block[offset] = 1
        return len(block)
    return item


def test_forked_runner_attributes_crash_hang_and_memory():
    from tests.fuzz import forked

    records = forked.run_each(list(range(6)), _hostile_work, workers=2, timeout=3,
                              memory_limit=1 << 30)
    assert records[0] == ("done", 0, records[0][2]) and records[5][:2] == ("done", 5)
    assert records[1][0] == "crash" and "SIGSEGV" in records[1][1]
    assert records[2][0] == "hang"
    assert records[3][:2] == ("done", "MemoryError")
    assert records[4][1] == 64 << 20 and records[4][2] >= 60 << 20 > records[0][2]


def test_hostile_outcomes_land_in_their_columns():
    from tests.fuzz.hostile import classify
    from tests.fuzz.hostile_cases import Case

    refuse = Case("f", "x", "import_bytes", b"", "refuse", names=("'a'",))
    accept = Case("f", "x", "import_bytes", b"", "accept", names=("'a'",))

    def error(name, message, module="minigraph.framework.errors"):
        return ("done", ("error", name, module, message, len(message)), 0)

    assert classify(refuse, error("InvalidArgumentError", "Node 'a': bad"))[0] == "clean"
    assert classify(refuse, error("InvalidArgumentError", "a bad node"))[0] == "unclear"
    assert classify(refuse, error("InvalidArgumentError", "'a'" * 1000))[0] == "unclear"
    assert classify(refuse, error("ValueError", "Node 'a'", "builtins"))[0] == "raw"
    assert classify(refuse, error("MemoryError", "", "builtins"))[0] == "memory"
    assert classify(refuse, ("done", ("ok", None), 0))[0] == "wrong"
    assert classify(accept, ("done", ("ok", "other values"), 0))[0] == "wrong"
    assert classify(accept, ("done", ("ok", None), 0))[0] == "ok"
    assert classify(accept, ("done", ("ok", None), 1 << 30))[0] == "memory"
    assert classify(accept, error("InvalidArgumentError", "Node 'a': no"))[0] == "unclear"
    assert classify(accept, error("UnimplementedError", "Node 'a': numpy"))[0] == "clean"
    assert classify(accept, ("crash", "killed by signal SIGSEGV"))[0] == "crash"
    assert classify(accept, ("hang", "no answer"))[0] == "hang"
