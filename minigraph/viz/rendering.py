"""Rendering DOT text to SVG/PNG/PDF through the ``graphviz`` package and the ``dot`` program.

Both are optional: ``import minigraph`` never imports ``graphviz``. When either is missing,
:func:`render` writes the ``.dot`` file and raises one :class:`UnavailableError` that says how
to install what is missing; no traceback from inside the graphviz package reaches the user.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

from minigraph.framework.errors import InvalidArgumentError, UnavailableError
from minigraph.framework.graph import Graph
from minigraph.framework.scope import Scope
from minigraph.viz.dot import to_dot

FORMATS = ("svg", "png", "pdf")
_NODE_LINE = re.compile(r'\s*"(?:[^"\\]|\\.)*" \[')

INSTALL_DOT = ("install Graphviz, which provides it: 'apt-get install graphviz' "
               "(Debian/Ubuntu), 'brew install graphviz' (macOS), 'conda install graphviz', "
               "or see https://graphviz.org/download/")
INSTALL_PACKAGE = ("install it with: pip install graphviz (or pip install 'minigraph[viz]'); "
                   "it also needs Graphviz's 'dot' program: 'apt-get install graphviz' "
                   "(Debian/Ubuntu) or 'brew install graphviz' (macOS)")


def _graphviz_module():
    """The graphviz package, or UnavailableError saying how to install it."""
    try:
        import graphviz
    except ImportError:
        raise UnavailableError(f"the 'graphviz' Python package is not installed; "
                               f"{INSTALL_PACKAGE}") from None
    return graphviz


def _check_dot() -> None:
    if shutil.which("dot") is None:
        raise UnavailableError(f"Graphviz's 'dot' program is not on PATH; {INSTALL_DOT}")


def dot_to_bytes(source: str, format: str = "svg") -> bytes:
    """Run ``dot -T<format>`` on DOT text; UnavailableError if graphviz cannot be used."""
    if format not in FORMATS:
        raise InvalidArgumentError(f"viz: format must be one of {', '.join(FORMATS)}, got "
                                   f"{format!r}")
    graphviz = _graphviz_module()
    _check_dot()
    try:
        return graphviz.Source(source).pipe(format=format)
    except graphviz.ExecutableNotFound:
        raise UnavailableError(f"Graphviz's 'dot' program could not be run; {INSTALL_DOT}"
                               ) from None
    except graphviz.CalledProcessError as exc:
        stderr = exc.stderr.decode(errors="replace").strip() if exc.stderr else ""
        raise UnavailableError(f"Graphviz's 'dot' program failed (exit status "
                               f"{exc.returncode}): {stderr or 'no message'}") from None
    except OSError as exc:
        raise UnavailableError(f"Graphviz's 'dot' program could not be run: {exc}; "
                               f"{INSTALL_DOT}") from None


def _output_path(path: str | os.PathLike, format: str | None) -> tuple[Path, str]:
    out = Path(path)
    suffix = out.suffix.lower().lstrip(".")
    if format is None:
        format = suffix if suffix in FORMATS + ("dot",) else "svg"
    format = format.lower()
    if format not in FORMATS + ("dot",):
        raise InvalidArgumentError(f"viz: format must be one of {', '.join(FORMATS)} or dot, "
                                   f"got {format!r}")
    if suffix in FORMATS + ("dot",) and suffix != format:
        raise InvalidArgumentError(f"viz: path '{out}' ends in .{suffix} but format is "
                                   f"{format!r}")
    if suffix != format:
        out = out.with_name(out.name + "." + format)
    return out, format


def render_source(source: str, path: str | os.PathLike, format: str | None = None) -> Path:
    """Write DOT text rendered to ``path``; see :func:`render`."""
    out, format = _output_path(path, format)
    out.parent.mkdir(parents=True, exist_ok=True)
    if format == "dot":
        out.write_text(source, encoding="utf-8")
        return out
    try:
        data = dot_to_bytes(source, format)
    except UnavailableError as exc:
        dot_path = out.with_suffix(".dot")
        dot_path.write_text(source, encoding="utf-8")
        raise UnavailableError(
            f"cannot render {out}: {exc}. The DOT text was written to {dot_path}; once "
            f"Graphviz is installed, run: dot -T{format} {dot_path} -o {out}") from None
    out.write_bytes(data)
    return out


def render(graph_or_scope: Graph | Scope, path: str | os.PathLike, format: str | None = None,
           **options: Any) -> Path:
    """Draw the graph to an SVG, PNG or PDF file and return its path.

    ``format`` defaults to the path's extension (``graph.png``), else ``svg`` (the extension
    is then added). ``options`` are :func:`~minigraph.viz.to_dot`'s (``fetches``,
    ``show_shapes``, ``collapse``, ``legend``). Format ``"dot"`` writes the DOT text only.

    Raises :class:`~minigraph.errors.UnavailableError` when the ``graphviz`` Python package or
    Graphviz's ``dot`` program is missing, after writing the DOT text next to ``path``
    (``graph.dot``); its message says how to install them.
    """
    return render_source(to_dot(graph_or_scope, **options), path, format)


class Drawing:
    """A drawn graph: its DOT text, shown inline in Jupyter (``_repr_svg_``).

    ``.source`` is the DOT text, ``.svg()`` the rendered SVG, ``.save(path)`` writes a file.
    """

    def __init__(self, source: str) -> None:
        self.source = source
        self._svg: str | None = None
        self._problem: str | None = None

    def svg(self) -> str:
        """The SVG text (rendered once); UnavailableError if graphviz cannot be used."""
        if self._svg is None:
            self._svg = dot_to_bytes(self.source, "svg").decode("utf-8")
        return self._svg

    def _repr_svg_(self) -> str | None:
        try:
            return self.svg()
        except UnavailableError as exc:
            self._problem = str(exc)
            return None  # Jupyter then shows __repr__, which says what is missing

    def save(self, path: str | os.PathLike, format: str | None = None) -> Path:
        return render_source(self.source, path, format)

    def __str__(self) -> str:
        return self.source

    def __repr__(self) -> str:
        nodes = sum(1 for line in self.source.splitlines() if _NODE_LINE.match(line))
        text = f"<mg.viz.Drawing: {nodes} nodes; .source is the DOT text"
        problem = self._problem
        if problem is None and self._svg is None:
            try:
                _graphviz_module()
                _check_dot()
            except UnavailableError as exc:
                problem = str(exc)
        if problem:
            text += f"; cannot show it inline: {problem}"
        return text + ">"


def draw(graph_or_scope: Graph | Scope, **options: Any) -> Drawing:
    """A :class:`Drawing` of the graph, which Jupyter displays inline as SVG.

    ``options`` are :func:`~minigraph.viz.to_dot`'s.
    """
    return Drawing(to_dot(graph_or_scope, **options))
