"""Regenerate the graph pictures in ``docs/images/`` (used by ``docs/visualization.md``).

    python docs/make_figures.py              # all figures
    python docs/make_figures.py bn_forward_grad --out /tmp/figures

Needs Graphviz's ``dot`` (``apt-get install graphviz`` / ``brew install graphviz``) and the
``graphviz`` Python package (``pip install 'minigraph[viz]'``).

To add a figure, write a function that builds a graph and returns its Scope or Graph, and add
a :class:`Figure` for it to ``FIGURES``.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import minigraph as mg
from minigraph import ops, viz

IMAGES = Path(__file__).resolve().parent / "images"


# ----------------------------------------------------------------------------- graphs


def bn_forward_grad() -> mg.Scope:
    """One FusedBatchNormV3 in training mode, a loss, and the gradient graph autodiff adds."""
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[None, 8, 8, 16])
    scale = ops.Const(root.WithOpName("scale"), np.ones(16, np.float32))
    offset = ops.Const(root.WithOpName("offset"), np.zeros(16, np.float32))
    empty = np.zeros(0, np.float32)
    bn = ops.FusedBatchNormV3(root.WithOpName("bn"), x, scale, offset, empty, empty,
                              epsilon=1e-3, is_training=True)
    loss = ops.Mean(root.WithOpName("loss"), ops.Square(root, bn.y), [0, 1, 2, 3])
    mg.AddSymbolicGradients(root, [loss], [x, scale, offset])
    return root


def bn_network_training(blocks: int = 2) -> mg.Scope:
    """A ~100-node training graph: residual batch-norm blocks, a squared-error loss, its
    gradients and plain SGD updates, built from the ops minigraph has today.

    (The digits example's graph is the real-world counterpart: ``digits_training``.)
    """
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("images"), mg.float32, shape=[None, 8, 8, 16])
    target = ops.Placeholder(root.WithOpName("target"), mg.float32, shape=[None, 8, 8, 16])
    h = x
    params: list[mg.Output] = []
    for i in range(blocks):
        block = root.NewSubScope(f"block{i + 1}")
        gamma = ops.Const(block.WithOpName("gamma"), np.ones(16, np.float32))
        beta = ops.Const(block.WithOpName("beta"), np.zeros(16, np.float32))
        empty = np.zeros(0, np.float32)
        bn = ops.FusedBatchNormV3(block.WithOpName("bn"), h, gamma, beta, empty, empty,
                                  epsilon=1e-3, is_training=True)
        scaled = ops.Mul(block.WithOpName("gain"), bn.y, np.float32(0.5))
        h = ops.Add(block.WithOpName("residual"), h, scaled)
        params += [gamma, beta]
    with_loss = root.NewSubScope("loss")
    diff = ops.Sub(with_loss, h, target)
    loss = ops.Mean(with_loss.WithOpName("mse"), ops.Square(with_loss, diff), [0, 1, 2, 3])
    grads = mg.AddSymbolicGradients(root, [loss], params)
    sgd = root.NewSubScope("sgd")
    for param, grad in zip(params, grads, strict=True):
        name = param.op.name.replace("/", "_")
        step = ops.Mul(sgd.WithOpName(f"{name}_step"), grad, np.float32(0.1))
        ops.Sub(sgd.WithOpName(f"{name}_new"), param, step)
    return root


def digits_training() -> mg.Scope | None:
    """The digits CNN training example's graph (training step, BN updates, eval path).

    Returns None (the figure is skipped) where the example is not there.
    """
    name = "minigraph.examples.train_digits_cnn"
    if importlib.util.find_spec(name) is None:
        return None
    example = importlib.import_module(name)
    return example.build(example.parse([]))["root"]


# ----------------------------------------------------------------------------- figures


@dataclass
class Figure:
    name: str  # docs/images/<name>.png
    build: Callable[[], Any]
    options: dict[str, Any] = field(default_factory=dict)  # mg.viz.to_dot options


FIGURES = [
    Figure("bn_forward_grad", bn_forward_grad, {"legend": True}),
    Figure("bn_network_training", bn_network_training, {"legend": True}),
    Figure("bn_network_training_collapsed", bn_network_training,
           {"collapse": ["gradients", "sgd"], "legend": True}),
    Figure("digits_training", digits_training, {"legend": True}),
    Figure("digits_training_collapsed", digits_training,
           {"collapse": ["train/gradients", "train/Adam"]}),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="figures to make (default: all): "
                        + ", ".join(f.name for f in FIGURES))
    parser.add_argument("--out", type=Path, default=IMAGES, help="output folder")
    parser.add_argument("--format", default="png", choices=["png", "svg", "pdf", "dot"])
    args = parser.parse_args(argv)
    unknown = set(args.names) - {f.name for f in FIGURES}
    if unknown:
        parser.error(f"unknown figure(s): {', '.join(sorted(unknown))}")
    status = 0
    for figure in FIGURES:
        if args.names and figure.name not in args.names:
            continue
        try:
            graph = figure.build()
        except Exception as exc:  # noqa: BLE001 - report it, make the other figures
            print(f"error: building {figure.name} failed: {type(exc).__name__}: {exc}",
                  file=sys.stderr)
            status = 1
            continue
        if graph is None:
            print(f"skipped {figure.name}: {figure.build.__doc__.splitlines()[0]}")
            continue
        size = len(graph.graph() if isinstance(graph, mg.Scope) else graph)
        try:
            path = viz.render(graph, args.out / f"{figure.name}.{args.format}",
                              **figure.options)
        except mg.errors.UnavailableError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"wrote {path} ({size} ops)")
    return status


if __name__ == "__main__":
    sys.exit(main())
