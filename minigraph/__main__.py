"""Command line: ``python -m minigraph demo`` runs the main job."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m minigraph")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="build and run a FusedBatchNormV3 -> FusedBatchNormGradV3 "
                                     "graph and print what it computed")
    args, rest = parser.parse_known_args(argv)
    if args.command == "demo":
        from minigraph.examples import batch_norm_demo

        return batch_norm_demo.main(rest)
    return 1


if __name__ == "__main__":
    sys.exit(main())
