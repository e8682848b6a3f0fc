"""How far minigraph runs the Keras zoo (minigraph/testing/keras_zoo.py): a markdown table
per entry (its size, its op types, the ones minigraph lacks, and the largest |difference|
from TensorFlow's outputs on each backend), then every op type the zoo uses that minigraph
does not register. Calls of a graph's function library count as imported (the importer
inlines them), and so do the ops of lowered loops and conditionals (lifted into WhileLoop
and Conditional nodes).

    python tools/keras_zoo_report.py [--full] [--vocabulary] [NAME ...]

``--full`` adds the entries outside the CI set, ``--vocabulary`` the rest of Keras's layers
(preprocessing, ...), which the tests do not run. Frozen graphs come from
the zoo's disk cache; on a cold cache TensorFlow (the ``oracle`` extra) builds them.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import minigraph as mg  # noqa: E402
from minigraph.framework.op_def import registered_ops  # noqa: E402
from minigraph.interop import protos  # noqa: E402
from minigraph.interop.functions import CALL_OPS  # noqa: E402
from minigraph.interop.supported import LIFTED  # noqa: E402
from minigraph.testing import keras_zoo  # noqa: E402

BACKENDS = ("native", "reference")
ULPS = 64  # tests/test_keras_zoo.py's tolerance


@dataclass
class Row:
    name: str
    nodes: int
    function_nodes: int
    op_types: Counter
    missing: list[str]
    diffs: dict[str, str] = field(default_factory=dict)


@dataclass
class GraphOps:
    nodes: int
    function_nodes: int
    op_types: Counter  # of the graph's nodes and its library functions' nodes
    functions: set[str]  # the library's function names (a node of that op calls it)


def graph_ops(graph_def: bytes) -> GraphOps:
    parsed = protos.GraphDef().FromString(graph_def)
    types = Counter(node.op for node in parsed.node)
    function_nodes = 0
    for function in parsed.library.function:
        types.update(node.op for node in function.node_def)
        function_nodes += len(function.node_def)
    functions = {function.signature.name for function in parsed.library.function}
    return GraphOps(len(parsed.node), function_nodes, types, functions)


def _failure(error: Exception) -> str:
    first_line = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}: {first_line[:80]}"


def measure(name: str, registered: set[str]) -> Row:
    """Import and run the entry on every backend; each diff cell says what happened."""
    graph = keras_zoo.load(name)
    found = graph_ops(graph.graph_def)
    # calls are inlined at import, lowered control flow lifted into WhileLoop/Conditional
    imported = registered | set(CALL_OPS) | set(LIFTED) | found.functions
    row = Row(name, found.nodes, found.function_nodes, found.op_types,
              sorted(set(found.op_types) - imported))
    try:
        root = mg.import_graph_def(graph.graph_def)
    except Exception as error:  # a report: say what failed and go on
        cell = "missing ops" if row.missing else _failure(error)
        row.diffs = dict.fromkeys(BACKENDS, cell)
        return row
    for backend in BACKENDS:
        try:
            outputs = mg.ClientSession(root, backend=backend).Run(graph.feeds, graph.fetches)
        except Exception as error:
            row.diffs[backend] = _failure(error)
            continue
        over = any(keras_zoo.max_abs_diff([a], [e]) > keras_zoo.tolerance(e, ULPS)
                   for a, e in zip(outputs, graph.expected))
        diff = keras_zoo.max_abs_diff(outputs, graph.expected)
        row.diffs[backend] = f"{diff:.2g}" + (" (over tolerance)" if over else "")
    return row


def table(rows: list[Row]) -> str:
    lines = ["| name | nodes | op types | ops minigraph lacks | max \\|diff\\| native "
             "| max \\|diff\\| reference |", "| --- | ---: | ---: | --- | --- | --- |"]
    for row in rows:
        nodes = f"{row.nodes}" + (f" (+{row.function_nodes} in functions)"
                                  if row.function_nodes else "")
        lines.append(f"| {row.name} | {nodes} | {len(row.op_types)} | "
                     f"{', '.join(row.missing) or '-'} | {row.diffs['native']} | "
                     f"{row.diffs['reference']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="also the non-CI entries")
    parser.add_argument("--vocabulary", action="store_true",
                        help="also the rest of Keras's layers (not tested)")
    parser.add_argument("names", nargs="*", help="only these entries")
    args = parser.parse_args(argv)
    registered = set(registered_ops())
    kinds = ["application", "layers"] + (["vocabulary"] if args.vocabulary else [])
    unknown = set(args.names) - set(keras_zoo.ZOO)
    if unknown:
        parser.error(f"no zoo entries {sorted(unknown)}; entries: {sorted(keras_zoo.ZOO)}")
    lacking: dict[str, list[str]] = {}
    for kind in kinds:
        rows = [measure(entry.name, registered)
                for entry in keras_zoo.entries(kind, full=args.full)
                if not args.names or entry.name in args.names]
        if not rows:
            continue
        print(f"\n### {kind}\n\n{table(rows)}")
        for row in rows:
            for op in row.missing:
                lacking.setdefault(op, []).append(row.name)
    print("\n### op types the zoo uses that minigraph does not register\n")
    for op in sorted(lacking):
        print(f"- {op}: {', '.join(lacking[op])}")
    if not lacking:
        print("none")


if __name__ == "__main__":
    main()
