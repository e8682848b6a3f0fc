"""A fuzz case (picklable), how to build and run it, and its repro snippet.

A case is one op node: each input is a Const, a Placeholder (unknown, partial or full static
shape) fed an array, or a Variable initialized by an Assign (ref inputs); attrs are passed as
keywords. ``execute(case, target)`` builds the graph for one target (backend, device), runs it
and returns an :class:`Outcome`.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from minigraph.framework.op_def import get_op_def
from tests.fuzz.values import ArraySpec, layout_expr

OPENCL_DEVICE = "/device:OPENCL:0"

# target label -> (ClientSession backend, device of the fuzzed op)
TARGETS = {
    "reference": ("reference", None),
    "native": ("native", None),
    "opencl": ("reference", OPENCL_DEVICE),
}


@dataclass(frozen=True)
class InputSpec:
    """One input: ``mode`` is const, ph (Placeholder fed ``array``) or var (Variable)."""

    name: str
    array: ArraySpec
    mode: str = "ph"
    ph_shape: tuple | None = None  # None: unknown rank; a None entry: unknown dimension
    role: str = "data"


@dataclass
class Case:
    op_type: str
    inputs: list[InputSpec]
    attrs: dict[str, Any]
    tags: tuple = ()
    index: int = -1

    @property
    def size(self) -> int:
        return sum(i.array.size for i in self.inputs) + len(repr(self.attrs))

    def describe(self) -> str:
        parts = []
        for i in self.inputs:
            a = i.array
            where = {"const": "const", "var": "var"}.get(i.mode, f"ph{_ph_text(i.ph_shape)}")
            parts.append(f"{i.name}={a.dtype}{list(a.shape)}[{a.kind},{a.layout},{where}]")
        return f"{self.op_type}({', '.join(parts)}; {self.attrs!r}) tags={list(self.tags)}"

    def repro(self, target: str = "reference") -> str:
        backend, device = TARGETS[target]
        lines = ["import ml_dtypes, numpy as np", "import minigraph as mg",
                 "from minigraph import ops"]
        if any(i.array.literal is None and i.array.size > 12 for i in self.inputs):
            lines.append("from tests.fuzz.values import make_array")
        layouts = {i.array.layout for i in self.inputs}
        if "strided" in layouts:
            lines.append("def strided(a):\n    w = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), "
                         "a.dtype)\n    w[..., ::2] = a\n    return w[..., ::2]")
        if "misaligned" in layouts:
            lines.append("def misaligned(a):\n    v = np.frombuffer(bytearray(a.nbytes + 1), "
                         "a.dtype, count=a.size, offset=1).reshape(a.shape)\n"
                         "    v[...] = a\n    return v")
        lines.append("root = mg.Scope.NewRootScope()")
        feeds, inits, args = [], [], []
        for n, i in enumerate(self.inputs):
            var = f"v{n}"
            value = layout_expr(f"a{n}", i.array.layout) if i.array.layout != "C" else f"a{n}"
            lines.append(f"a{n} = {i.array.source()}")
            dt = f"mg.{'bool_' if i.array.dtype == 'bool' else i.array.dtype}"
            if i.mode == "const":
                lines.append(f"{var} = ops.Const(root.WithOpName({i.name!r}), {value})")
            elif i.mode == "var":
                lines.append(f"{var} = ops.Variable(root.WithOpName({i.name!r}), "
                             f"{list(i.array.shape)}, {dt})")
                lines.append(f"init{n} = ops.Assign(root, {var}, ops.Const(root, {value}))")
                inits.append(f"init{n}.op")
            else:
                shape = None if i.ph_shape is None else [-1 if d is None else d
                                                         for d in i.ph_shape]
                lines.append(f"{var} = ops.Placeholder(root.WithOpName({i.name!r}), {dt}, "
                             f"shape={shape})")
                feeds.append(f"{var}: {value}")
            args.append(var)
        node = "root" if device is None else f"root.WithDevice({device!r})"
        kw = "".join(f", {k}={_attr_source(v)}"
                     for k, v in call_attrs(self.op_type, self.attrs).items())
        grouped = [f"[{', '.join(a)}]" if isinstance(a, list) else a
                   for a in group_arguments(self.op_type, args)]
        lines.append(f"node = {_wrapper_path(self.op_type)}({node}, {', '.join(grouped)}{kw})")
        lines.append(f"sess = mg.ClientSession(root, backend={backend!r})")
        if inits:
            lines.append(f"sess.Run({{}}, [], targets=[{', '.join(inits)}])")
        lines.append("fetch = list(node) if hasattr(node, 'outputs') else node")
        lines.append(f"print(sess.Run({{{', '.join(feeds)}}}, fetch))")
        return "\n".join(lines)


def _ph_text(shape) -> str:
    if shape is None:
        return "(?)"
    return "(" + ",".join("?" if d is None else str(d) for d in shape) + ")"


def _attr_source(value: Any) -> str:
    from minigraph.framework.dtypes import DType

    if isinstance(value, DType):
        return f"mg.{'bool_' if value.name == 'bool' else value.name}"
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return f"float({str(value)!r})"
    if isinstance(value, type):
        return f"np.{value.__name__}"
    return repr(value)


def _wrapper_path(op_type: str) -> str:
    from minigraph import ops

    return f"ops.{op_type}" if hasattr(ops, op_type) else \
        f"__import__('minigraph.ops.math_ops').ops.math_ops.{op_type}"


def wrapper(op_type: str):
    from minigraph import ops
    from minigraph.ops import math_ops

    return getattr(ops, op_type, None) or getattr(math_ops, op_type)


# ----------------------------------------------------------------------------- running


@dataclass
class Outcome:
    """What one target did with one case.

    kind: ok, error (a minigraph.errors class), other (any other exception), crash, hang,
    skipped. ``phase``: build, init or run.
    """

    kind: str
    phase: str = ""
    exc_type: str = ""
    message: str = ""
    results: list = field(default_factory=list)      # fetched arrays (then variable values)
    static: list = field(default_factory=list)       # (shape dims or None, dtype name) each
    fetch_names: list = field(default_factory=list)
    problems: list = field(default_factory=list)     # (kind, text): feeds mutated, lost data
    seconds: float = 0.0


def _error_classes():
    from minigraph.framework import errors

    return tuple(v for v in vars(errors).values()
                 if isinstance(v, type) and issubclass(v, Exception))


def _fail(phase: str, exc: BaseException) -> Outcome:
    kind = "error" if isinstance(exc, _error_classes()) else "other"
    return Outcome(kind, phase, type(exc).__name__, str(exc)[:600])


def build(case: Case, device: str | None):
    """Build the graph; returns (root, node outputs, feeds, initializers, variables)."""
    import minigraph as mg
    from minigraph import ops
    from minigraph.framework.dtypes import as_dtype

    root = mg.Scope.NewRootScope()
    feeds, inits, variables, args = {}, [], [], []
    for i in case.inputs:
        array = i.array.materialize()
        dtype = as_dtype(i.array.dtype)
        if i.mode == "const":
            out = ops.Const(root.WithOpName(i.name), array)
        elif i.mode == "var":
            out = ops.Variable(root.WithOpName(i.name), list(array.shape), dtype)
            inits.append(ops.Assign(root, out, ops.Const(root, array)).op)
            variables.append((out, array))
        else:
            shape = None if i.ph_shape is None else [-1 if d is None else d for d in i.ph_shape]
            out = ops.Placeholder(root.WithOpName(i.name), dtype, shape=shape)
            feeds[out] = array
        args.append(out)
    scope = root.WithDevice(device) if device else root
    node = wrapper(case.op_type)(scope, *group_arguments(case.op_type, args),
                                 **call_attrs(case.op_type, case.attrs))
    if isinstance(node, mg.Output):
        outputs = [node]
    elif hasattr(node, "outputs"):
        outputs = list(node.outputs)
    else:
        outputs = []
    return root, node, outputs, feeds, inits, variables


def _same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.ascontiguousarray(a).tobytes() == \
        np.ascontiguousarray(b).tobytes()


def execute(case: Case, target: str) -> Outcome:
    """Build and run ``case`` for ``target`` (a key of TARGETS) in this process."""
    import time

    import minigraph as mg

    backend, device = TARGETS[target]
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            root, node, outputs, feeds, inits, variables = build(case, device)
        except Exception as exc:  # noqa: BLE001 - classified by the checks
            return _fail("build", exc)
        static = [(None if o.shape.rank is None else list(o.shape.dims), o.dtype.name)
                  for o in outputs]
        pristine = {k: v.copy() for k, v in feeds.items()}
        try:
            session = mg.ClientSession(root, backend=backend)
            if inits:
                session.Run({}, [], targets=inits)
        except Exception as exc:  # noqa: BLE001
            outcome = _fail("init", exc)
            outcome.static = static
            return outcome
        try:
            targets = [] if outputs else [node]
            results = session.Run(feeds, outputs, targets=targets)
            outcome = Outcome("ok", "run", results=list(results), static=static,
                              fetch_names=[o.name for o in outputs])
        except Exception as exc:  # noqa: BLE001
            outcome = _fail("run", exc)
            outcome.static = static
        for placeholder, value in feeds.items():
            if not _same_bytes(value, pristine[placeholder]):
                outcome.problems.append(("feed-mutated", f"the Run changed the array fed to "
                                         f"'{placeholder.name}'"))
        if variables:
            try:
                values = session.Run({}, [v for v, _ in variables])
            except Exception as exc:  # noqa: BLE001
                outcome.problems.append(("lost-data", f"reading the variables after the Run "
                                         f"raised {type(exc).__name__}: {exc}"[:400]))
            else:
                if outcome.kind != "ok":
                    for (var, before), after in zip(variables, values):
                        if not _same_bytes(np.asarray(after), before):
                            outcome.problems.append((
                                "lost-data", f"variable '{var.name}' changed although the "
                                f"Run failed ({outcome.exc_type})"))
                else:
                    outcome.results += list(values)
                    outcome.fetch_names += [f"{v.name} (after)" for v, _ in variables]
    outcome.seconds = time.perf_counter() - start
    return outcome


def group_arguments(op_type: str, items: list) -> list:
    """The wrapper's input arguments from a case's flat inputs (in the recipe's order): a
    list argument (AddN's ``inputs``, ConcatV2's ``values``; an op has at most one) takes, as
    one list, the items the other arguments leave."""
    op_def = get_op_def(op_type)
    rest = len(items) - sum(not arg.is_list for arg in op_def.inputs)
    grouped, start = [], 0
    for arg in op_def.inputs:
        if arg.is_list:
            grouped.append(list(items[start:start + rest]))
            start += rest
        else:
            grouped.append(items[start])
            start += 1
    return grouped


def call_attrs(op_type: str, attrs: dict[str, Any]) -> dict[str, Any]:
    """The attrs to pass: without the length (and, for an op whose only input is the list,
    the type) attrs the list sets."""
    inputs = get_op_def(op_type).inputs
    drop = {a for arg in inputs if arg.is_list
            for a in (arg.number_attr, arg.type_list_attr,
                      arg.type_attr if len(inputs) == 1 else None)}
    return {k: v for k, v in attrs.items() if k not in drop}
