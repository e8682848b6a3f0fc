"""Command line: ``python -m minigraph demo`` runs the main job; ``viz`` draws a graph."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m minigraph")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="build and run a FusedBatchNormV3 -> FusedBatchNormGradV3 "
                                     "graph and print what it computed")
    commands.add_parser("viz", add_help=False,
                        help="run a script and draw a graph it builds: viz script.py -o "
                             "graph.svg (see viz --help)")
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["viz"]:
        from minigraph.viz import cli

        return cli.main(argv[1:])
    args, rest = parser.parse_known_args(argv)
    if args.command == "demo":
        from minigraph.examples import batch_norm_demo

        return batch_norm_demo.main(rest)
    return 1


if __name__ == "__main__":
    sys.exit(main())
