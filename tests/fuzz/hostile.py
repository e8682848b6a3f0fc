"""Hostile files: case generators for every file surface, run one forked child per case.

``python -m tests.fuzz.hostile --cases 40`` draws ``--cases`` cases per family (seeded:
the same every run), runs each in its own child under a memory limit
(:mod:`tests.fuzz.forked`) and prints the campaign table. A case says what TensorFlow 2.21
does with its input (the generators hold TF's rules, written here independently of
minigraph's code: node names, input indices, shapes, Const values, attr kinds) and what a
refusal must name (the file, the node, the attr). Each outcome lands in one column:

=========  ====================================================================
ok         accepted, and what it built means what the file says (values, names,
           shapes, events read back)
clean      refused with an ``mg.errors`` exception naming what the case says, in at
           most 2,000 characters (a stated limit of minigraph, UnimplementedError or
           ResourceExhaustedError, counts here too when TF would accept)
unclear    refused cleanly, but the message misses a name or is over-long, or it
           refuses what TF accepts without saying it is a limit
raw        any other exception (ValueError, RecursionError, OSError...)
crash      the child died (a signal)
hang       no answer within the timeout
memory     MemoryError, or peak memory beyond the case's budget (a base plus a
           multiple of the input's size: memory must follow what the file holds)
wrong      accepted what TF refuses, or built something else than the file says
=========  ====================================================================

The families (tests/fuzz/hostile_cases.py): ``input_index``, ``node_name``, ``device``,
``pbtxt_depth``, ``pbtxt_bulk``, ``const_values``, ``attr_kinds``, ``shape_attr``,
``number_attr``, ``export_paths``, ``filewriter``, ``read_graph_names``, ``op_level``,
``binary_mutation``, ``pbtxt_mutation``. tests/test_fuzz.py runs a short campaign of every
family in CI.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from typing import Any

from tests.fuzz.hostile_cases import Case, generate

COLUMNS = ("cases", "ok", "clean", "unclear", "raw", "crash", "hang", "memory", "wrong")
FAILING = ("unclear", "raw", "crash", "hang", "memory", "wrong")
MESSAGE_LIMIT = 2000
BASE_BUDGET = 64 << 20  # peak memory any case may add: imports, a session, numpy temporaries
LIMIT_CLASSES = ("UnimplementedError", "ResourceExhaustedError")


# ----------------------------------------------------------------------------- running one case


def _import_checks(root, check: dict) -> str | None:
    """What an imported graph gets wrong against ``check`` (None: nothing)."""
    import numpy as np

    import minigraph as mg

    graph = root.graph()
    for name in check.get("nodes", []):
        try:
            graph.get_operation(name)
        except (KeyError, LookupError, ValueError):
            return f"node {name[:60]!r} is missing"
    for name, inputs in check.get("inputs", {}).items():
        got = [t.name for t in graph.get_operation(name).inputs]
        if got != inputs:
            return f"node {name!r} reads {got}, the file says {inputs}"
    for name, device in check.get("devices", {}).items():
        if graph.get_operation(name).device != device:
            return f"{name!r} is on {graph.get_operation(name).device!r}, the file says {device!r}"
    for (name, attr), value in check.get("attrs", {}).items():
        got = graph.get_operation(name).attrs[attr]
        if got != value:
            return f"attr {attr!r} of {name!r} is {got!r}, the file says {value!r}"
    for name, dims in check.get("placeholder_shape", {}).items():
        got = graph.get_operation(name).outputs[0].shape.dims
        if (None if got is None else list(got)) != dims:
            return f"{name!r} has shape {got}, the file says {dims}"
    for name, dims in check.get("shape", {}).items():
        got = graph.get_operation(name).outputs[0].shape.dims
        if list(got) != list(dims):
            return f"{name!r} has shape {got}, the file says {dims}"
    for name, count in check.get("outputs", {}).items():
        if len(graph.get_operation(name).outputs) != count:
            return f"{name!r} has {len(graph.get_operation(name).outputs)} outputs, not {count}"
    fetches = list(check.get("values", {})) + list(check.get("digest", {}))
    if fetches:
        results = mg.ClientSession(root).Run([f"{n}:0" for n in fetches])
        for name, got in zip(fetches, results):
            if name in check.get("values", {}):
                dtype, data, dims = check["values"][name]
                if str(got.dtype) != dtype or list(got.shape) != dims or \
                        np.ascontiguousarray(got).tobytes() != data:
                    return f"Const {name!r} holds other values than the file says"
            elif hashlib.sha256(np.ascontiguousarray(got).tobytes()).hexdigest() != \
                    check["digest"][name]:
                return f"Const {name!r} holds other values than the file says"
    if check.get("round_trip"):
        again = mg.import_graph_def(mg.export_graph_def(root).SerializeToString())
        for op in graph.operations():
            other = again.graph().get_operation(op.name)
            if other.outputs and other.outputs[0].shape.dims != op.outputs[0].shape.dims:
                return f"{op.name!r} exports as shape {other.outputs[0].shape}, was " \
                       f"{op.outputs[0].shape}"
    return None


def _resolve_path(kind: str, directory: str, suffix: str) -> Any:
    plain = os.path.join(directory, "g" + suffix)
    a_file = os.path.join(directory, "afile")
    with open(a_file, "w") as file:
        file.write("x")
    return {
        "dir": directory, "under_file": os.path.join(a_file, "g" + suffix),
        "file_as_dir": os.path.join(a_file, "sub", "g" + suffix), "empty": "",
        "nul": plain + "\0x", "long_component": os.path.join(directory, "g" * 300 + suffix),
        "long_path": os.path.join(directory, *(["g" * 200] * 25)) + suffix,
        "surrogate": os.path.join(directory, "g\ud800" + suffix), "int": 3,
        "list": [plain], "bytes": os.fsencode(plain),
        "nested_new": os.path.join(directory, "new", "deeper", "g" + suffix),
        "plain": plain, "trailing_slash": plain + "/",
        "dot_segments": os.path.join(directory, "x", "..", "g" + suffix),
    }[kind]


def _run_export(spec: dict, directory: str) -> str | None:
    import numpy as np

    import minigraph as mg
    from minigraph import ops

    root = mg.Scope.NewRootScope()
    ops.Placeholder(root.WithOpName("p"), mg.float32, shape=spec["shape"])
    if spec["broadcast"]:
        ops.Const(root.WithOpName("c"), np.broadcast_to(np.float32(2.5), (spec["broadcast"],)))
    path = _resolve_path(spec["path"], directory, spec["suffix"])
    mg.export_graph_def(root, path)
    size = os.path.getsize(os.fsdecode(path))
    if size > 4096:
        return f"the file holds {size} bytes for a graph of two nodes (a constant expanded?)"
    again = mg.import_graph_def(os.fsdecode(path))  # (bytes would be a GraphDef's bytes)
    for name in ("p", "c") if spec["broadcast"] else ("p",):
        before = root.graph().get_operation(name).outputs[0]
        after = again.graph().get_operation(name).outputs[0]
        if before.shape.dims != after.shape.dims:
            return f"{name!r} re-imports with shape {after.shape}, was {before.shape}"
    if spec["broadcast"]:
        value = mg.ClientSession(again).Run("c:0")
        if value.shape != (spec["broadcast"],) or not bool((value == 2.5).all()):
            return "the broadcast constant re-imports with other values"
    return None


def _logdir(kind: str, directory: str) -> Any:
    a_file = os.path.join(directory, "afile")
    with open(a_file, "w") as file:
        file.write("x")
    return {"file": a_file, "under_file": os.path.join(a_file, "logs"), "none": None,
            "empty": "", "nul": directory + "\0", "int": 7,
            "nested_new": os.path.join(directory, "a", "b"), "existing": directory,
            "long_component": os.path.join(directory, "l" * 300)}[kind]


def _events(path: str) -> list:
    from minigraph.interop import protos, records

    with open(path, "rb") as file:
        return [protos.Event().FromString(r) for r in records.read_records(file)]


def _run_filewriter(spec: dict, check: dict, directory: str) -> str | None:
    import numpy as np

    import minigraph as mg

    if spec["kind"] == "logdir":
        writer = mg.summary.FileWriter(_logdir(spec["logdir"], directory))
        writer.close()
        return None if len(_events(writer.path)) == check["events"] else "events lost"
    writer = mg.summary.FileWriter(directory)
    if spec["kind"] == "scalar":
        error = None
        try:
            writer.add_scalar(spec["tag"], spec["value"], spec["step"])
        except Exception as exc:  # noqa: BLE001 - raised below, once the file is checked
            error = exc
        writer.close()
        events = _events(writer.path)
        if len(events) != check["events"]:
            return f"{len(events)} events in the file, expected {check['events']}"
        if error is not None:
            raise error
        tag, value, step = check["scalar"]
        got = events[-1]
        stored = got.summary.value[0]
        same = (stored.tag == tag and got.step == step and (
            np.float32(value) == np.float32(stored.simple_value)
            or (np.isnan(value) and np.isnan(stored.simple_value))))
        return None if same else f"the event holds {stored.tag!r} {stored.simple_value} " \
                                 f"{got.step}, not {tag!r} {value} {step}"
    for step in range(spec["count"]):
        writer.add_scalar("loss", float(step), step)
    os.remove(writer.path)
    os.mkdir(writer.path)  # the event file is now a directory: every write fails
    for action in (writer.flush, writer.close):
        try:
            action()
        except mg.errors.FailedPreconditionError:
            pass
        else:
            return f"{action.__name__}() reported success while the file could not be written"
    os.rmdir(writer.path)
    with open(writer.path, "wb"):
        pass
    writer.close()
    events = _events(writer.path)
    steps = [e.step for e in events if e.summary.value]
    if steps != list(range(spec["count"])):
        return f"after the failed flushes the file holds steps {steps}, not " \
               f"{list(range(spec['count']))}"
    return None


def _run_op(spec: dict, check: dict) -> str | None:
    import numpy as np

    import minigraph as mg
    from minigraph import ops

    root = mg.Scope.NewRootScope()
    kind = spec["kind"]
    if kind in ("conv_strides", "pool_window"):
        x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[1, 5, 5, 2])
        if kind == "conv_strides":
            s = spec["stride"]
            if spec["op"] == "Conv2D":
                y = ops.Conv2D(root, x, np.ones((2, 2, 2, 3), np.float32), strides=[1, s, s, 1],
                               padding=spec["padding"])
            else:
                y = ops.DepthwiseConv2dNative(root, x, np.ones((2, 2, 2, 1), np.float32),
                                              strides=[1, s, s, 1], padding=spec["padding"])
        else:
            k = spec["size"]
            y = getattr(ops, spec["op"])(root, x, ksize=[1, min(k, 3), min(k, 3), 1],
                                         strides=[1, k, k, 1], padding=spec["padding"])
        feed = {x: np.arange(50, dtype=np.float32).reshape(1, 5, 5, 2)}
        ref = mg.ClientSession(root, backend="reference").Run(feed, y)
        native = mg.ClientSession(root, backend="native").Run(feed, y)
        if ref.shape != native.shape or not np.allclose(ref, native, rtol=1e-5):
            return f"native {native.shape} differs from reference {ref.shape}"
        return None
    if kind == "zero_stride":
        view = np.broadcast_to(np.float32(1.5), (spec["length"],))
        out = ops.Const(root, view) if spec["via"] == "Const" else ops.Relu(root, view)
        if out.shape.dims != (spec["length"],):
            return f"the op has shape {out.shape}"
        return None
    if kind == "bn_grad":
        def shaped(rank):
            return ops.Placeholder(root, mg.float32, shape=None if rank is None else [2] * rank)
        v = ops.Placeholder(root, mg.float32, shape=[2])
        ops.BatchNormWithGlobalNormalizationGrad(
            root, shaped(spec["t_rank"]), v, v, v, shaped(spec["backprop_rank"]),
            variance_epsilon=0.001, scale_after_normalization=True)
        return None
    value = ops.Placeholder(root, mg.float32)
    result = ops.Unpack(root, value, num=spec["num"])
    return None if len(result.outputs) == spec["num"] else "wrong output count"


def execute(case: Case) -> tuple:
    """Run ``case`` here (in a forked child); returns ``("ok", problem or None)`` or
    ``("error", class name, module, message)``."""
    import warnings

    import minigraph as mg

    directory = tempfile.mkdtemp(prefix="hostile-")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            surface, payload, check = case.surface, case.payload, case.check or {}
            if surface == "import_bytes":
                problem = _import_checks(mg.import_graph_def(payload), check)
            elif surface == "import_file":
                suffix, data = payload
                path = os.path.join(directory, "g" + suffix)
                with open(path, "wb") as file:
                    file.write(data)
                problem = _import_checks(mg.import_graph_def(path), check)
            elif surface == "read_graph":
                path = os.path.join(directory, "g.json")
                with open(path, "wb") as file:
                    file.write(payload)
                graph = mg.io.read_graph(path)
                problem = _import_checks(mg.Scope(graph), check)
            elif surface == "export":
                problem = _run_export(payload, directory)
            elif surface == "filewriter":
                problem = _run_filewriter(payload, check, directory)
            else:
                problem = _run_op(payload, check)
        return ("ok", problem)
    except Exception as exc:  # noqa: BLE001 - classified by the parent
        return ("error", type(exc).__name__, type(exc).__module__, str(exc)[:4000],
                len(str(exc)))
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def classify(case: Case, record: tuple) -> tuple[str, str]:
    """(column, why) for one case's record from :func:`tests.fuzz.forked.run_each`."""
    if record[0] in ("crash", "hang"):
        return record[0], record[1]
    _, result, growth = record
    budget = BASE_BUDGET + case.budget
    if growth > budget:
        return "memory", f"peak memory grew by {growth >> 20} MiB (budget {budget >> 20} MiB)"
    if result[0] == "harness":
        return "raw", f"the harness failed: {result[1]}: {result[2]}"
    if result[0] == "ok":
        problem = result[1]
        if case.expect == "refuse":
            return "wrong", "accepted what TensorFlow refuses"
        if problem:
            return "wrong", problem
        return "ok", ""
    _, name, module, message, length = result
    if name == "MemoryError" or (name == "ResourceExhaustedError" and "MemoryError" in message):
        return "memory", f"{name}: {message[:300]}"
    if not module.startswith("minigraph"):
        return "raw", f"{module}.{name}: {message[:300]}"
    if length > MESSAGE_LIMIT:
        return "unclear", f"a message of {length} characters"
    missing = [n for n in case.names if n not in message]
    if missing:
        return "unclear", f"the message does not name {missing}: {message[:300]}"
    if case.expect == "accept" and not case.limit_ok and name not in LIMIT_CLASSES:
        return "unclear", f"refuses what TensorFlow accepts: {name}: {message[:300]}"
    return "clean", ""


def campaign(cases_per_family: int, families: list[str] | None = None, seed: int = 0,
             scale: int = 1, workers: int = 2, timeout: float = 30.0) -> dict:
    import minigraph  # noqa: F401 - imported once, before the children fork
    from minigraph.backends import native  # noqa: F401
    from tests.fuzz import forked

    start = time.perf_counter()
    cases = generate(cases_per_family, families, seed, scale)
    records = forked.run_each(cases, execute, workers=workers, timeout=timeout)
    table: dict[str, Counter] = {}
    findings = []
    for case, record in zip(cases, records):
        column, why = classify(case, record)
        for row in (case.family, "total"):
            table.setdefault(row, Counter())["cases"] += 1
            table[row][column] += 1
        if column in FAILING:
            findings.append({"family": case.family, "column": column, "why": why,
                             "case": case.describe()})
    table["total"] = table.pop("total", Counter())
    return {"table": table, "findings": findings, "seconds": time.perf_counter() - start}


def format_table(table: dict[str, Counter]) -> str:
    lines = [f"{'family':<18}" + "".join(f"{c:>8}" for c in COLUMNS)]
    for row, counts in table.items():
        lines.append(f"{row:<18}" + "".join(f"{counts.get(c, 0):>8}" for c in COLUMNS))
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=20, help="cases per family")
    parser.add_argument("--families", default="", help="comma-separated (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scale", type=int, default=1,
                        help="input sizes (1: CI; 4: a campaign's megabytes)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=30.0, help="per case: a hang")
    parser.add_argument("--json", help="write the table and findings to this file")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every finding")
    args = parser.parse_args(argv)
    families = [f for f in args.families.split(",") if f] or None
    result = campaign(args.cases, families, args.seed, args.scale, args.workers, args.timeout)
    print(f"minigraph hostile-file campaign: {result['seconds']:.1f} s")
    print(format_table(result["table"]))
    for finding in result["findings"][:None if args.verbose else 20]:
        print(f"  {finding['column']}: {finding['case']}\n      {finding['why'][:400]}")
    if args.json:
        with open(args.json, "w") as file:
            json.dump({"table": {k: dict(v) for k, v in result["table"].items()},
                       "findings": result["findings"], "seconds": result["seconds"]}, file,
                      indent=1)
    return 1 if result["findings"] else 0


if __name__ == "__main__":
    sys.exit(main())
