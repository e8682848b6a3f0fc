"""Run a fuzz campaign by hand: ``python -m tests.fuzz.run --cases 200``.

``--cases`` is per op. Prints the summary per target (and the findings with ``-v``); writes
``fuzz_summary.txt``, ``fuzz_findings.md`` and ``fuzz_report.json`` under ``$FUZZ_REPORT``
(or ``--report DIR``). Exit status 1 when there are findings. Never imports TensorFlow, so
``--targets opencl,reference`` is safe here. ``$MINIGRAPH_NATIVE_SO`` swaps in another build of
``minigraph._native`` (the sanitized one: tests/fuzz/sanitized.py, ``make fuzz-asan``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def campaign(cases_per_op: int, targets: list[str], ops: list[str] | None = None,
             seed: int | None = None, workers: int = 2, timeout: float = 10.0,
             batch: int = 40):
    import minigraph  # noqa: F401 - imported once, before the workers fork
    from minigraph.backends import native  # noqa: F401
    from tests.fuzz import checks, runner, strategies

    start = time.perf_counter()
    opencl = "opencl" in targets
    names = ops or (list(strategies.OPENCL_OPS) if opencl else strategies.fuzzed_ops())
    cases = []
    for name in names:
        for case in strategies.generate(name, cases_per_op, seed, opencl):
            case.index = len(cases)
            cases.append(case)
    generated = time.perf_counter() - start
    outcomes = runner.run_cases(cases, targets, workers=workers, timeout=timeout, batch=batch)
    findings, summary = checks.analyze(cases, outcomes, targets)
    seconds = time.perf_counter() - start
    return {"cases": cases, "outcomes": outcomes, "findings": findings, "summary": summary,
            "seconds": seconds, "generate_seconds": generated}


def write_report(result: dict, directory: str) -> None:
    from tests.fuzz import checks

    os.makedirs(directory, exist_ok=True)
    text = checks.format_summary(result["summary"], result["findings"], result["seconds"])
    with open(os.path.join(directory, "fuzz_summary.txt"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(directory, "fuzz_findings.md"), "w") as f:
        f.write(checks.format_findings(result["findings"]))
    with open(os.path.join(directory, "fuzz_report.json"), "w") as f:
        json.dump(report_json(result), f, indent=1)


def native_module() -> str | None:
    """The file minigraph._native was loaded from (None when it is not loaded)."""
    return getattr(sys.modules.get("minigraph._native"), "__file__", None)


def report_json(result: dict) -> dict:
    return {"seconds": result["seconds"], "native_module": native_module(),
            "summary": {t: dict(c) for t, c in result["summary"].items()},
            "findings": [f.as_dict() for f in result["findings"]]}


def main(argv=None) -> int:
    from tests.fuzz.sanitized import install_from_env

    install_from_env()  # before anything imports minigraph
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=50, help="cases per op (default 50)")
    parser.add_argument("--ops", default="", help="comma-separated op types (default: all)")
    parser.add_argument("--targets", default="reference,native",
                        help="reference, native, opencl (opencl: its ops, vs reference)")
    parser.add_argument("--seed", type=int, default=None,
                        help="hypothesis seed (default: derandomized, the same every run)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=10.0, help="per case: a hang")
    parser.add_argument("--batch", type=int, default=40, help="cases per worker process")
    parser.add_argument("--report", default=os.environ.get("FUZZ_REPORT"),
                        help="directory for the report files (default $FUZZ_REPORT)")
    parser.add_argument("--json", help="write the JSON report to this file")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every finding")
    args = parser.parse_args(argv)
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    if "reference" in targets:  # compare against it: it runs first
        targets = ["reference"] + [t for t in targets if t != "reference"]
    from tests.fuzz import checks

    result = campaign(args.cases, targets, [o for o in args.ops.split(",") if o] or None,
                      args.seed, args.workers, args.timeout, args.batch)
    print(checks.format_summary(result["summary"], result["findings"], result["seconds"]))
    if os.environ.get("MINIGRAPH_NATIVE_SO"):
        print(f"native kernels: {native_module()}")
    if args.verbose:
        print(checks.format_findings(result["findings"]))
    else:
        for f in result["findings"]:
            print(f"  {f.op}: {f.kind} [{f.target}] x{f.count}: {f.message[:150]}")
    if args.report:
        write_report(result, args.report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report_json(result), f, indent=1)
    return 1 if result["findings"] else 0


if __name__ == "__main__":
    sys.exit(main())
