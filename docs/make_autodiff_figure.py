"""Draw ``docs/images/bn_autodiff.png``: one batch-norm layer, its first-order gradient graph
and its second-order (Hessian-vector product) graph, as ``docs/autodiff.md`` describes them.

    python docs/make_autodiff_figure.py                  # writes docs/images/bn_autodiff.png
    python docs/make_autodiff_figure.py --format dot     # the DOT text instead (no Graphviz)

Needs Graphviz's ``dot`` and the ``graphviz`` Python package for png/svg/pdf
(``pip install 'minigraph[viz]'``, ``apt-get install graphviz``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

import minigraph as mg
from minigraph import ops, viz

IMAGES = Path(__file__).resolve().parent / "images"


def build() -> tuple[mg.Scope, list[mg.Output]]:
    """FusedBatchNormV3 (training, NHWC), loss = sum(y * w), g = d loss/d(x, scale, offset),
    then h = d<g_x, v>/d(x, scale). Returns the scope and the tensors to draw back from."""
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[None, 8, 8, 16])
    scale = ops.Placeholder(root.WithOpName("scale"), mg.float32, shape=[16])
    offset = ops.Placeholder(root.WithOpName("offset"), mg.float32, shape=[16])
    w = ops.Placeholder(root.WithOpName("w"), mg.float32, shape=[None, 8, 8, 16])
    v = ops.Placeholder(root.WithOpName("v"), mg.float32, shape=[None, 8, 8, 16])
    empty = np.zeros(0, np.float32)
    bn = ops.FusedBatchNormV3(root.WithOpName("bn"), x, scale, offset, empty, empty,
                              epsilon=1e-3, is_training=True)
    axes = [0, 1, 2, 3]
    loss = ops.Sum(root.WithOpName("loss"), ops.Mul(root, bn.y, w), axes)
    g_x, g_scale, g_offset = mg.AddSymbolicGradients(root, [loss], [x, scale, offset])
    hvp = ops.Sum(root.WithOpName("hvp"), ops.Mul(root, g_x, v), axes)
    h_x, h_scale = mg.AddSymbolicGradients(root, [hvp], [x, scale])
    return root, [g_x, g_scale, g_offset, h_x, h_scale]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=IMAGES, help="output folder")
    parser.add_argument("--format", default="png", choices=["png", "svg", "pdf", "dot"])
    args = parser.parse_args(argv)
    root, fetches = build()
    try:
        path = viz.render(root, args.out / f"bn_autodiff.{args.format}", fetches=fetches,
                          legend=True)
    except mg.errors.UnavailableError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {path} ({len(root.graph())} ops in the graph)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
