"""See the graph: DOT text, rendered files and inline notebook drawings.

* :func:`to_dot` - deterministic DOT text (no dependency beyond minigraph);
* :func:`render` - an SVG/PNG/PDF file through the optional ``graphviz`` package and
  Graphviz's ``dot`` program (``pip install 'minigraph[viz]'``, ``apt-get install graphviz``);
* :func:`draw` - a :class:`Drawing` that Jupyter shows inline;
* :func:`record_graphs` - collect the graphs some code builds (what
  ``python -m minigraph viz script.py`` uses).

See ``docs/visualization.md``.
"""

from minigraph.viz.cli import record_graphs
from minigraph.viz.dot import CATEGORIES, OP_CATEGORIES, needed_operations, op_category, to_dot
from minigraph.viz.rendering import Drawing, draw, render

__all__ = ["CATEGORIES", "Drawing", "OP_CATEGORIES", "draw", "needed_operations",
           "op_category", "record_graphs", "render", "to_dot"]
