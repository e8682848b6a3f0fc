"""Command line: ``python -m minigraph demo`` runs the main job; ``viz`` draws a graph.

Each command parses its own options (``python -m minigraph demo --help`` lists them);
``check`` reports which optional components (the C kernels, Graphviz's ``dot``, an OpenCL
device) this installation has, and is what ``make demo`` / ``make test`` run first.
"""

from __future__ import annotations

import argparse
import shutil
import sys

PROG = "python -m minigraph"
COMMANDS = {
    "demo": "the main job: train the digits CNN on scikit-learn's 8x8 digits "
            "(see demo --help)",
    "tour": "FusedBatchNormV3, its first and second order gradients, checked against finite "
            "differences (see tour --help)",
    "viz": "draw a saved graph file (model.json) or the graph a Python script builds: "
           "viz model.json -o graph.svg (see viz --help)",
    "check": "say which optional components work here: the C kernels, graphviz's dot, an "
             "OpenCL device (see check --help)",
}
COMPONENTS = ("native", "dot", "opencl")


def _parser() -> argparse.ArgumentParser:
    from minigraph import __version__

    parser = argparse.ArgumentParser(
        prog=PROG, description="minigraph, a small dataflow-graph deep-learning framework.")
    parser.add_argument("--version", action="version", version=f"minigraph {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, text in COMMANDS.items():
        commands.add_parser(name, help=text, add_help=False)
    return parser


# ------------------------------------------------------------------------------------- check


def native_status() -> tuple[bool, str]:
    """(built, one line): the C kernels' ISA and threads, or why they are missing."""
    from minigraph.backends import native

    if native.available():
        return True, (f"native C kernels: built (ISA {native.isa()}, "
                      f"{native.num_threads()} threads)")
    return False, (f"native C kernels: NOT BUILT: {native.unavailable_reason()}. Sessions "
                   f"fall back to the numpy reference backend (much slower); "
                   f"`pip install -v -e .` shows the compiler's error")


def dot_status() -> tuple[bool, str]:
    path = shutil.which("dot")
    if path:
        return True, f"graphviz dot: {path}"
    return False, ("graphviz dot: NOT FOUND; drawing (viz, graph.svg, the rendering tests) is "
                   "skipped. Install it: apt-get install graphviz")


def opencl_status() -> tuple[bool, str]:
    try:
        import pyopencl  # noqa: F401
    except ImportError as exc:
        return False, f"OpenCL: pyopencl not importable ({exc}); the OpenCL tests are skipped"
    from minigraph.backends import opencl

    found = [d for d in opencl.devices() if d.name]
    if found:
        return True, ("OpenCL: " + ", ".join(f"{d.name} = {d.device} ({d.platform})"
                                             for d in found))
    return False, ("OpenCL: NO DEVICE (no OpenCL platform with a device); the OpenCL tests are "
                   "skipped. Install Debian's PoCL: apt-get install pocl-opencl-icd")


def check(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} check",
        description="Report whether the optional components work in this installation. "
                    "Exit status 0 unless --strict and a named component is missing.")
    parser.add_argument("components", nargs="*", metavar="COMPONENT",
                        help=f"what to check, any of {', '.join(COMPONENTS)} (default: all)")
    parser.add_argument("--strict", action="store_true",
                        help="exit with status 1 when one is missing (CI: every component "
                             "it installed must be used)")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.components) - set(COMPONENTS))
    if unknown:
        parser.error(f"unknown component(s) {', '.join(unknown)}; choose from "
                     f"{', '.join(COMPONENTS)}")
    probes = {"native": native_status, "dot": dot_status, "opencl": opencl_status}
    missing = []
    for name in args.components or COMPONENTS:
        ok, line = probes[name]()
        if ok:
            print(f"minigraph check: {line}")
        else:
            missing.append(name)
            print(f"minigraph check: WARNING: {line}", file=sys.stderr)
    if missing and args.strict:
        print(f"minigraph check: missing with --strict: {', '.join(missing)}", file=sys.stderr)
        return 1
    return 0


# -------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command, rest = (argv[0], argv[1:]) if argv and argv[0] in COMMANDS else (None, argv)
    if command is None:
        _parser().parse_args(argv)  # help, --version, or a usage error: exits
        return 2
    prog = f"{PROG} {command}"
    if command == "viz":
        from minigraph.viz import cli

        return cli.main(rest)
    if command == "check":
        return check(rest)
    if command == "demo":
        from minigraph.examples import train_digits_cnn

        return train_digits_cnn.main(rest, prog=prog)
    from minigraph.examples import bn_gradients_tour

    return bn_gradients_tour.main(rest, prog=prog)


if __name__ == "__main__":
    sys.exit(main())
