"""``python -m minigraph viz FILE -o graph.svg``: draw a saved graph file or a script's graph.

``FILE`` is either a graph file - a TensorFlow GraphDef (``model.pb`` binary, ``model.pbtxt``
text; :func:`minigraph.import_graph_def`) or one written by :func:`minigraph.io.write_graph`
(``model.json``, as the demo writes; :func:`minigraph.io.read_graph`), never executed - or a
Python script. A script runs as ``__main__`` (``runpy``) while every
:class:`~minigraph.Graph` created is recorded (:func:`record_graphs`); then the largest one,
or ``--graph-index N`` in creation order, is drawn.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import runpy
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path

from minigraph import io
from minigraph.framework.errors import (
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    UnavailableError,
    UnimplementedError,
    UnknownError,
)
from minigraph.framework.graph import Graph, on_graph_created
from minigraph.interop import import_graph_def
from minigraph.viz.rendering import FORMATS, render


@contextlib.contextmanager
def record_graphs() -> Iterator[list[Graph]]:
    """Record every Graph created inside the ``with`` block, in creation order.

    ``with mg.viz.record_graphs() as graphs: run_something()`` - the list holds the graphs
    (strongly, so graphs built inside functions that have returned are kept) until it is
    dropped.
    """
    graphs: list[Graph] = []
    remove = on_graph_created(graphs.append)
    try:
        yield graphs
    finally:
        remove()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m minigraph viz",
        description="Draw a minigraph graph with Graphviz: a TensorFlow GraphDef (model.pb, "
                    "model.pbtxt), a graph file written by minigraph.io.write_graph (e.g. the "
                    "demo's runs/digits/model.json), or the largest graph (or --graph-index N) "
                    "a Python script creates when run.",
        epilog="A FILE ending in .pb/.pbtxt is read as a GraphDef, one ending in .json (or "
               "starting with '{') as a minigraph graph file; anything else is run as a Python "
               "script. Arguments after '--' are passed to the script as sys.argv[1:].")
    parser.add_argument("script", metavar="FILE",
                        help="a graph file (model.pb, model.pbtxt, model.json) or a Python "
                             "script to run")
    parser.add_argument("-o", "--output", help="the file to write (default: <FILE stem>.svg); "
                        "its extension picks the format unless --format is given")
    parser.add_argument("--format", choices=FORMATS + ("dot",), default=None,
                        help="output format (default: from --output, else svg)")
    parser.add_argument("--graph-index", type=int, default=None, metavar="N",
                        help="draw the N-th graph created (0-based, negative counts from the "
                             "end) instead of the largest")
    parser.add_argument("--fetch", action="append", default=[], metavar="OP",
                        help="draw only what this op needs (repeatable)")
    parser.add_argument("--collapse", action="append", default=[], metavar="SCOPE",
                        help="draw this name scope as one box (repeatable)")
    parser.add_argument("--no-shapes", action="store_true", help="leave shapes off the edges")
    parser.add_argument("--legend", action="store_true", help="add a legend of op categories")
    parser.add_argument("--list", action="store_true",
                        help="only list the graphs the script created")
    return parser


GRAPH_DEF_SUFFIXES = (".pb", ".pbtxt", ".prototxt")


def is_graph_file(path: Path) -> bool:
    """A graph file (a GraphDef, or JSON from minigraph.io) rather than a Python script."""
    if path.suffix.lower() in (".json", *GRAPH_DEF_SUFFIXES):
        return True
    if path.suffix.lower() == ".py":
        return False
    with open(path, "rb") as file:
        return file.read(256).lstrip().startswith(b"{")


def _read_graph_file(path: Path) -> tuple[list[Graph], int]:
    try:
        if path.suffix.lower() in GRAPH_DEF_SUFFIXES:
            return [import_graph_def(path).graph()], 0
        return [io.read_graph(path)], 0
    except (InvalidArgumentError, NotFoundError, UnimplementedError, PermissionDeniedError,
            ResourceExhaustedError, UnknownError) as exc:
        print(f"minigraph viz: {exc}", file=sys.stderr)
        return [], 1


def _run_script(script: Path, script_args: list[str]) -> tuple[list[Graph], int]:
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [str(script), *script_args]
    sys.path.insert(0, str(script.parent.resolve()))
    status = 0
    try:
        with record_graphs() as graphs:
            try:
                runpy.run_path(str(script), run_name="__main__")
            except SystemExit as exc:
                if exc.code not in (None, 0):
                    status = exc.code if isinstance(exc.code, int) else 1
            except Exception:  # the script's own error: show it, then draw what it built
                traceback.print_exc()
                status = 1
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    return graphs, status


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    script_args: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, script_args = argv[:cut], argv[cut + 1:]
    args = _parser().parse_args(argv)
    script = Path(args.script)
    if not script.is_file():
        print(f"minigraph viz: no such file: {script}", file=sys.stderr)
        return 2

    graph_file = is_graph_file(script)
    made = "holds" if graph_file else "created"
    if graph_file:
        graphs, status = _read_graph_file(script)
        if status:
            return status
    else:
        graphs, status = _run_script(script, script_args)
    if status:
        print(f"minigraph viz: {script} failed (status {status}); drawing the graphs it built "
              f"before that", file=sys.stderr)
    sizes = ", ".join(f"#{i}: {len(g)} ops" for i, g in enumerate(graphs))
    if args.list:
        print(f"{script} {made} {len(graphs)} graph(s){': ' + sizes if graphs else ''}")
        return 0
    if not graphs or not any(len(g) for g in graphs):
        print(f"minigraph viz: {script} {made} no graph with operations", file=sys.stderr)
        return 1
    if args.graph_index is None:
        index = max(range(len(graphs)), key=lambda i: (len(graphs[i]), -i))
    else:
        index = args.graph_index
        if not -len(graphs) <= index < len(graphs):
            print(f"minigraph viz: --graph-index {index} is out of range; {script} {made} "
                  f"{len(graphs)} graph(s): {sizes}", file=sys.stderr)
            return 2
        index %= len(graphs)
    graph = graphs[index]

    output = args.output or (script.stem + "." + (args.format or "svg"))
    try:
        written = render(graph, output, args.format, fetches=args.fetch or None,
                         show_shapes=not args.no_shapes, collapse=args.collapse,
                         legend=args.legend)
    except (UnavailableError, InvalidArgumentError) as exc:
        print(f"minigraph viz: {exc}", file=sys.stderr)
        return 1
    if graph_file:
        print(f"drew the graph of {script} ({len(graph)} ops) to {os.fspath(written)}")
    else:
        print(f"drew graph #{index} ({len(graph)} ops) of the {len(graphs)} that {script} "
              f"created to {os.fspath(written)}")
    return status
