"""Outcomes -> findings, deduplicated, and the per-target summary.

Finding kinds:

* ``crash``, ``hang``: the worker died (signal) or stopped answering;
* ``other-exception``: an exception outside ``minigraph.framework.errors`` (build or Run);
* ``message-no-op``: a clean error whose message does not name the op type;
* ``message-no-input``: a clean error about shapes/dtypes/ranks that names no input (quoted
  ``'x'``, or the bare name when it is 2+ characters) nor attr of the op;
* ``disagree``: one target accepts the case, the other rejects it (clean error or worse);
* ``mismatch``: both accept, different results (ints/bools bitwise; floats: same NaN and
  infinity positions, finite values within ``rtol * (|ref| + max|ref|)``, rtol 1e-12 float64,
  1e-5 float32, 2e-3 float16, 1.6e-2 bfloat16; for ops that sum many terms, a value that
  overflowed in both backends' summation orders agrees whatever each order gave);
* ``static-shape`` / ``static-dtype``: a result disagrees with the fetched Output's static
  shape (every known dimension) or dtype;
* ``feed-mutated``: the Run wrote into an array it was fed;
* ``lost-data``: a Variable changed although the Run that updates it failed.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from minigraph.framework.op_def import get_op_def
from tests.fuzz.cases import Case, Outcome
from tests.fuzz.values import np_dtype

RTOL = {"float64": 1e-12, "float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}
INPUT_ERROR = re.compile(r"shape|rank|dimension|dtype|element|broadcast|size", re.I)


@dataclass
class Finding:
    op: str
    kind: str
    target: str
    message: str
    case: Case
    signature: tuple = ()
    count: int = 1
    cases: list = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"op": self.op, "kind": self.kind, "target": self.target,
                "message": self.message, "count": self.count, "case": self.case.describe(),
                "repro": self.case.repro(self.repro_target)}

    @property
    def repro_target(self) -> str:
        return self.target if self.target in ("native", "opencl") else "reference"


def _normalize(message: str) -> str:
    text = message.split("(input shapes:")[0].replace("<unknown>", "?")
    text = re.sub(r"'[^']*'", "'?'", text)
    text = re.sub(r"\[[^\]]*\]|\([^)]*\)", "[..]", text)
    return re.sub(r"-?\d+(\.\d+)?(e[-+]?\d+)?", "N", text)[:160]


def _names(text: str, names) -> bool:
    for name in names:
        if f"'{name}'" in text or (len(name) > 1 and re.search(rf"\b{re.escape(name)}\b",
                                                                text)):
            return True
    return False


def message_problems(case: Case, outcome: Outcome) -> list[tuple[str, str]]:
    op_def = get_op_def(case.op_type)
    text = outcome.message
    problems = []
    if case.op_type not in text:
        problems.append(("message-no-op", "the message does not name the op type"))
    about = text.replace(case.op_type, "").split("(input shapes:")[0]
    if INPUT_ERROR.search(about) and "attr" not in about and not re.search(
            r"output \d", about) and outcome.exc_type != "ResourceExhaustedError":
        inputs = [a.name for a in op_def.inputs]
        if op_def.inputs and op_def.inputs[0].number_attr and re.search(r"input \d", text):
            inputs = inputs + ["input"]
        attrs = [a.name for a in op_def.attrs]
        if not _names(text, inputs) and not _names(text, attrs):
            problems.append(("message-no-input", "a shape/dtype error naming no input"))
    return problems


# Ops whose kernels add many terms in an order that differs between backends (blocked
# convolutions and matmuls, tree reductions): where a partial sum overflows, one order gives
# +-inf, another NaN (inf - inf) or a finite value near the largest float, all correct.
_SUMMING = re.compile(r"Conv|MatMul|Einsum|Pool|BatchNorm|^(Sum|Mean|Prod|L2Loss|BiasAddGrad|"
                      r"AddN|Cumsum|Cumprod|SoftmaxCrossEntropyWithLogits|"
                      r"SparseSoftmaxCrossEntropyWithLogits|Softmax|LogSoftmax)$")


def sums_in_backend_order(op_type: str) -> bool:
    """Whether ``op_type``'s result may overflow differently in another summation order."""
    return bool(_SUMMING.search(op_type))


def _overflow_agrees(a: np.ndarray, e: np.ndarray, dtype_name: str) -> np.ndarray:
    """Positions where a and e both overflowed, each in its own summation order: both
    non-finite, or one infinite and the other within a factor 16 of the largest float."""
    largest = {"float16": 65504.0, "bfloat16": 3.3895e38,
               "float32": float(np.finfo(np.float32).max)}.get(dtype_name,
                                                               float(np.finfo(np.float64).max))
    finite_a, finite_e = np.isfinite(a), np.isfinite(e)
    near_a, near_e = np.abs(a) >= largest / 16, np.abs(e) >= largest / 16
    return ((~finite_a & ~finite_e) | (np.isinf(a) & finite_e & near_e)
            | (np.isinf(e) & finite_a & near_a))


def compare(actual, expected, order_dependent: bool = False) -> str | None:
    """None when ``actual`` matches the reference ``expected``, else what differs. With
    ``order_dependent`` (:func:`sums_in_backend_order`), values that overflowed in both
    summation orders agree whatever non-finite or near-overflow value each order gave."""
    from tests.fuzz.runner import BigResult

    if isinstance(actual, BigResult) or isinstance(expected, BigResult):
        same = (actual.shape, actual.dtype) == (expected.shape, expected.dtype)
        return None if same else f"large results: {actual.shape} {actual.dtype} vs " \
            f"{expected.shape} {expected.dtype}"
    if isinstance(actual, np.generic):  # reported by static_problems; compare the value
        actual = np.asarray(actual)
    if isinstance(expected, np.generic):
        expected = np.asarray(expected)
    if not isinstance(actual, np.ndarray) or not isinstance(expected, np.ndarray):
        return f"types {type(actual).__name__} vs {type(expected).__name__}"
    if actual.dtype != expected.dtype:
        return f"dtype {actual.dtype} vs {expected.dtype}"
    if actual.shape != expected.shape:
        return f"shape {actual.shape} vs {expected.shape}"
    name = "bfloat16" if expected.dtype == np_dtype("bfloat16") else str(expected.dtype)
    if name not in RTOL:
        if not np.array_equal(actual, expected):
            bad = np.argwhere(actual != expected)[:3].tolist()
            return f"values differ at {bad}: {actual[tuple(np.array(bad).T)]} vs " \
                   f"{expected[tuple(np.array(bad).T)]}"
        return None
    a, e = actual.astype(np.float64), expected.astype(np.float64)
    if order_dependent:
        overflowed = _overflow_agrees(a, e, name)
        a, e = a[~overflowed], e[~overflowed]
    nan_a, nan_e = np.isnan(a), np.isnan(e)
    if not np.array_equal(nan_a, nan_e):
        where = np.argwhere(nan_a != nan_e)[:3].tolist()
        return f"NaN positions differ at {where}: {a[nan_a != nan_e][:3]} vs " \
               f"{e[nan_a != nan_e][:3]}"
    inf_a, inf_e = np.isinf(a), np.isinf(e)
    if not np.array_equal(inf_a, inf_e) or not np.array_equal(a[inf_a], e[inf_e]):
        diff = (inf_a | inf_e) & ~((a == e) & inf_a)
        where = np.argwhere(diff)[:3].tolist()
        return f"infinities differ at {where}: {a[diff][:3]} vs {e[diff][:3]}"
    finite = ~(nan_e | inf_e)
    if not finite.any():
        return None
    a, e = a[finite], e[finite]
    with np.errstate(over="ignore"):
        tolerance = RTOL[name] * (np.abs(e) + np.abs(e).max())
    error = np.abs(a - e)
    if (error > tolerance).any():
        worst = int(np.argmax(error - tolerance))
        return (f"{int((error > tolerance).sum())}/{error.size} values off, worst "
                f"{a[worst]!r} vs {e[worst]!r}")
    return None


def static_problems(outcome: Outcome) -> list[tuple[str, str]]:
    problems = []
    for i, (dims, dtype) in enumerate(outcome.static):
        if i >= len(outcome.results):
            break
        value = outcome.results[i]
        if type(value).__name__ == "BigResult":
            continue
        if not isinstance(value, np.ndarray):
            problems.append(("static-dtype", f"output {i} is a {type(value).__name__}, not an "
                             f"ndarray"))
            continue
        if value.dtype != np_dtype(dtype):
            problems.append(("static-dtype", f"output {i} has dtype {value.dtype}, the Output "
                             f"says {dtype}"))
        if dims is not None and (len(dims) != value.ndim or any(
                d is not None and d != v for d, v in zip(dims, value.shape))):
            problems.append(("static-shape", f"output {i} has shape {list(value.shape)}, the "
                             f"Output says {dims}"))
    return problems


def analyze(cases: list[Case], outcomes: dict, targets: list[str],
            reference: str = "reference") -> tuple[list[Finding], dict]:
    """Findings (deduplicated by op, kind, target and normalized message; each keeps its
    smallest case) and the summary {target: Counter}."""
    found: dict[tuple, Finding] = {}
    summary = {t: Counter() for t in targets}

    def add(case: Case, kind: str, target: str, message: str, key: str = "") -> None:
        signature = (case.op_type, kind, target, key or _normalize(message))
        old = found.get(signature)
        if old is None:
            found[signature] = Finding(case.op_type, kind, target, message, case, signature,
                                       cases=[case.index])
            return
        old.count += 1
        old.cases.append(case.index)
        if case.size < old.case.size:
            old.case, old.message = case, message

    for case in cases:
        got = {t: outcomes.get((case.index, t)) for t in targets}
        for target, outcome in got.items():
            counts = summary[target]
            counts["cases"] += 1
            if outcome is None:
                counts["missing"] += 1
                continue
            counts[outcome.kind] += 1
            if outcome.kind in ("crash", "hang"):
                add(case, outcome.kind, target, outcome.message,
                    outcome.message.split("\n")[0].split(" after cases")[0])
            elif outcome.kind == "other":
                add(case, "other-exception", target,
                    f"{outcome.phase}: {outcome.exc_type}: {outcome.message}")
            elif outcome.kind == "error":
                for kind, why in message_problems(case, outcome):
                    add(case, kind, target, f"{why}: {outcome.exc_type}: {outcome.message}")
            elif outcome.kind == "ok":
                for kind, why in static_problems(outcome):
                    add(case, kind, target, why, re.sub(r"(b?float|int)\d+|bool", "T", why)
                        if "ndarray" in why else _normalize(why))
            for kind, why in outcome.problems:
                add(case, kind, target, why, _normalize(why))
        ref = got.get(reference)
        for target, outcome in got.items():
            if target == reference or outcome is None or ref is None:
                continue
            if {outcome.kind, ref.kind} <= {"ok", "error"} and outcome.kind != ref.kind:
                counts = summary[target]
                counts["disagree"] += 1
                err = ref if ref.kind == "error" else outcome
                who = reference if ref.kind == "error" else target
                add(case, "disagree", target,
                    f"{who} raises {err.exc_type} ({err.phase}): {err.message[:200]}; the "
                    f"other returns results", f"{who}:{_normalize(err.message)}")
            elif outcome.kind == ref.kind == "ok":
                for i, (a, e) in enumerate(zip(outcome.results, ref.results)):
                    diff = compare(a, e, sums_in_backend_order(case.op_type))
                    if diff:
                        summary[target]["mismatch"] += 1
                        name = outcome.fetch_names[i] if i < len(outcome.fetch_names) else i
                        dtype = getattr(e, "dtype", "?")
                        add(case, "mismatch", target, f"output {name} ({dtype}): {diff}",
                            f"{i}:{dtype}:{diff.split(' ')[0]}")
                        break
    return _merge_targets(found.values()), summary


def _merge_targets(findings) -> list[Finding]:
    """One finding per (op, kind, message) seen on several targets: target ``a+b``."""
    groups: dict[tuple, list[Finding]] = {}
    for f in findings:
        op, kind, _, key = f.signature
        groups.setdefault((op, kind, key), []).append(f)
    merged = []
    for group in groups.values():
        first = min(group, key=lambda f: f.case.size)
        if len(group) > 1:
            first = Finding(first.op, first.kind, "+".join(f.target for f in group),
                            first.message, first.case, first.signature,
                            max(f.count for f in group), sorted({c for f in group
                                                                 for c in f.cases}))
        merged.append(first)
    return sorted(merged, key=lambda f: (f.kind not in ("crash", "hang"), f.op, f.kind,
                                         f.target))


COLUMNS = ("cases", "ok", "error", "other", "crash", "hang", "skipped", "disagree",
           "mismatch")


def format_summary(summary: dict, findings: list[Finding], seconds: float) -> str:
    lines = [f"minigraph fuzz: {seconds:.1f} s",
             f"{'target':<10}" + "".join(f"{c:>10}" for c in COLUMNS)]
    for target, counts in summary.items():
        lines.append(f"{target:<10}" + "".join(f"{counts.get(c, 0):>10}" for c in COLUMNS))
    kinds = Counter(f.kind for f in findings)
    lines.append(f"distinct findings: {len(findings)} "
                 f"({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))})")
    return "\n".join(lines)


def format_findings(findings: list[Finding]) -> str:
    out = []
    for f in findings:
        out.append(f"### {f.op}: {f.kind} [{f.target}] (x{f.count})\n\n{f.message}\n\n"
                   f"case: `{f.case.describe()}`\n\n```python\n"
                   f"{f.case.repro(f.repro_target)}"
                   f"\n```\n")
    return "\n".join(out)
