"""Run the fuzz campaign on the ASan + UBSan build of the native kernels.

``python kernels_c/build_native.py --sanitized build/asan`` (or :func:`ensure_built`) builds
``minigraph._native`` with ``-fsanitize=address,undefined`` into ``build/asan/``, beside the
normal one (never over it). A campaign uses it when ``MINIGRAPH_NATIVE_SO`` names that file:
:func:`install_from_env` (called by ``tests.fuzz.run`` before minigraph is imported) loads it as
``sys.modules["minigraph._native"]``, so the library itself needs no switch. Python is not
instrumented: the interpreter must start with libasan in ``LD_PRELOAD``; :func:`environment`
gives that environment (no leak checks, since Python leaks by design; a sanitizer error aborts
the worker, which the runner reports as a crash with the sanitizer's report from the worker's
stderr, see ``runner._sanitizer_report``).

A long campaign by hand: ``make fuzz-asan`` (``FUZZ_ASAN_CASES`` per op).
"""

from __future__ import annotations

import glob
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
KERNELS = ROOT / "kernels_c"
BUILD_DIR = ROOT / "build" / "asan"
VARIABLE = "MINIGRAPH_NATIVE_SO"


def install_from_env() -> str | None:
    """Load the extension named by ``$MINIGRAPH_NATIVE_SO`` as ``minigraph._native`` (before
    minigraph imports it); returns its path, or None when the variable is unset."""
    path = os.environ.get(VARIABLE)
    if not path:
        return None
    if "minigraph._native" in sys.modules:
        raise RuntimeError(f"{VARIABLE}: minigraph._native was imported before the shim")
    spec = importlib.util.spec_from_file_location("minigraph._native", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{VARIABLE}={path!r} is not a loadable extension module")
    module = importlib.util.module_from_spec(spec)
    sys.modules["minigraph._native"] = module
    spec.loader.exec_module(module)
    return path


def runtime_library(name: str = "libasan.so") -> str | None:
    """The compiler's sanitizer runtime (``gcc -print-file-name``), or None."""
    cc = os.environ.get("CC", "gcc").split()[0]
    if not shutil.which(cc):
        return None
    try:
        out = subprocess.run([cc, "-print-file-name=" + name], capture_output=True,
                             text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return os.path.realpath(out) if out and os.path.isabs(out) and os.path.exists(out) else None


def environment(so_path: str) -> dict:
    """os.environ plus what a campaign on the sanitized extension needs."""
    env = dict(os.environ)
    asan = runtime_library()
    if asan is None:
        raise RuntimeError("no libasan.so for the C compiler")
    env["LD_PRELOAD"] = ":".join(p for p in (asan, env.get("LD_PRELOAD")) if p)
    # allocator_may_return_null: a huge allocation is a MemoryError as without ASan (the
    # worker's RLIMIT_AS cannot apply: ASan's shadow memory alone reserves terabytes); one
    # allocation at most 2 GiB, as the unsanitized workers' address-space limit allows
    env["ASAN_OPTIONS"] = ("detect_leaks=0:abort_on_error=1:allocator_may_return_null=1:"
                           "max_allocation_size_mb=2048")
    env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1:abort_on_error=1"
    env[VARIABLE] = so_path
    env["MINIGRAPH_FUZZ_SANITIZED"] = "1"
    return env


def _sources() -> list[Path]:
    return [p for p in KERNELS.iterdir() if p.suffix in (".c", ".h")
            and "driver" not in p.name] + [KERNELS / "build_native.py"]


def built_path() -> str | None:
    """The sanitized extension in build/asan/ when it is newer than every kernel source."""
    found = glob.glob(str(BUILD_DIR / "_native*.so"))
    if not found:
        return None
    newest_source = max(p.stat().st_mtime for p in _sources())
    path = max(found, key=os.path.getmtime)
    return path if os.path.getmtime(path) >= newest_source else None


def ensure_built(verbose: bool = False) -> str:
    """The sanitized extension, (re)built when missing or older than the C sources."""
    import fcntl

    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    with open(BUILD_DIR / ".lock", "w") as lock:  # one build at a time (concurrent runs)
        fcntl.flock(lock, fcntl.LOCK_EX)
        path = built_path()
        if path is None:
            sys.path.insert(0, str(KERNELS))
            try:
                import build_native
            finally:
                sys.path.remove(str(KERNELS))
            path = build_native.build_sanitized(str(BUILD_DIR), verbose=verbose)
    return path


def main(argv: list[str] | None = None) -> None:
    """``python -m tests.fuzz.sanitized [tests.fuzz.run options]``: build if needed, then run
    the campaign (reference and native targets unless ``--targets`` says otherwise) on it."""
    import time

    args = sys.argv[1:] if argv is None else argv
    start = time.perf_counter()
    path = ensure_built(verbose=True)
    print(f"sanitized extension: {path} ({time.perf_counter() - start:.1f} s)", flush=True)
    if not any(a == "--targets" or a.startswith("--targets=") for a in args):
        args = ["--targets", "reference,native", *args]
    command = [sys.executable, "-m", "tests.fuzz.run", *args]
    os.chdir(ROOT)
    os.execve(sys.executable, command, environment(path))


if __name__ == "__main__":
    main()
