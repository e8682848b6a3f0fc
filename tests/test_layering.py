"""The import graph runs one way: framework <- ops <- gradients <- backends <- optimizer (the
graph passes, which fold constants with the backends' kernels) <- client <- testing,
interop (GraphDef exchange, which reads and builds graphs of any op and runs sessions to fold
constants) and summary (event files, which export graphs) above them all.

Each package may import only the layers below it (checked on every ``import`` statement of
its modules, function bodies included), so no circle can form and no module needs a
function-local import or a bottom-of-file import to dodge one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import minigraph

ROOT = Path(minigraph.__file__).parent
# package -> the minigraph packages it must not import
FORBIDDEN = {
    "framework": ("ops", "gradients", "client", "backends", "optimizer", "testing", "train",
                  "nn", "viz", "distributed", "io", "examples", "interop", "summary"),
    "ops": ("gradients", "client", "backends", "optimizer", "testing", "train", "nn", "viz",
            "distributed", "examples", "interop", "summary"),
    "gradients": ("client", "backends", "optimizer", "testing", "train", "nn", "viz",
                  "distributed", "examples", "interop", "summary"),
    "backends": ("client", "gradients", "optimizer", "testing", "train", "nn", "viz",
                 "examples", "interop", "summary"),
    "optimizer": ("client", "gradients", "testing", "train", "nn", "viz", "distributed",
                  "examples", "interop", "summary"),
    "client": ("testing", "train", "nn", "viz", "distributed", "examples", "interop",
               "summary"),
    "interop": ("testing", "train", "nn", "viz", "distributed", "examples", "summary"),
}


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            found += [(node.lineno, name) for name in names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
    return [(line, name) for line, name in found if name.startswith("minigraph.")]


def test_layers_import_only_downwards():
    problems = []
    for package, forbidden in FORBIDDEN.items():
        for path in sorted((ROOT / package).glob("*.py")):
            for line, name in _imports(path):
                layer = name.split(".")[1]
                if layer in forbidden:
                    problems.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert problems == []


def test_no_bottom_of_file_imports():
    for path in sorted(ROOT.rglob("*.py")):
        assert "noqa: E402" not in path.read_text(), path
