"""Command line: ``python -m minigraph demo`` runs the main job; ``viz`` draws a graph."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m minigraph")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="the main job: train the digits CNN (see demo --help)")
    commands.add_parser("tour", help="FusedBatchNormV3, its first and second order gradients, "
                                     "checked against finite differences")
    commands.add_parser("viz", add_help=False,
                        help="run a script and draw a graph it builds: viz script.py -o "
                             "graph.svg (see viz --help)")
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["viz"]:
        from minigraph.viz import cli

        return cli.main(argv[1:])
    args, rest = parser.parse_known_args(argv)
    if args.command == "demo":
        from minigraph.examples import train_digits_cnn

        return train_digits_cnn.main(rest)
    if args.command == "tour":
        from minigraph.examples import bn_gradients_tour

        return bn_gradients_tour.main(rest)
    return 1


if __name__ == "__main__":
    sys.exit(main())
