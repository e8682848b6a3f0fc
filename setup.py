"""Build hook for the optional C extension ``minigraph._native``; metadata is in pyproject.toml.

``pip install .`` and ``pip install -e .`` compile kernels_c/ with cffi (API mode, see
kernels_c/build_native.py). When that is impossible (no C compiler, no cffi) the
install still succeeds without the extension, after one warning, and minigraph uses its numpy
backend (``minigraph.backends.native.available()`` is then False).
"""

from __future__ import annotations

import importlib.util
import os
import runpy
import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import BaseError, CCompilerError

BUILD_ERRORS = (BaseError, CCompilerError, OSError)  # DistutilsError, compile/link errors


def _warn(error: object) -> None:
    print(f"WARNING: minigraph's C kernels (minigraph._native) were not built: {error}. "
          "minigraph is installed without them and will use its numpy backend.",
          file=sys.stderr)


class OptionalBuildExt(build_ext):
    """build_ext that skips extensions which fail to compile instead of failing the install."""

    warned = False

    def run(self) -> None:
        try:
            super().run()
        except BUILD_ERRORS as error:
            self._skip(None, error)

    def build_extension(self, ext) -> None:
        try:
            super().build_extension(ext)
        except BUILD_ERRORS as error:
            self._skip(ext, error)

    def _skip(self, ext, error: BaseException) -> None:
        if ext is not None:  # keep the missing file out of get_outputs() / in-place copies
            self.extensions = [e for e in self.extensions if e is not ext]
        if not OptionalBuildExt.warned:
            OptionalBuildExt.warned = True
            _warn(error)


BUILD_SCRIPT = "kernels_c/build_native.py"


def _build_script_works() -> bool:
    """cffi runs the build script while setup() is configured, where an exception (a missing
    source, a cdef cffi cannot parse) would abort the install: try it first."""
    if importlib.util.find_spec("cffi") is None:
        _warn("cffi is not installed")
        return False
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), BUILD_SCRIPT)
    if not os.path.exists(path):
        _warn(f"{BUILD_SCRIPT} is missing from this source tree")
        return False
    try:
        runpy.run_path(path, run_name="__cffi_check__")
    except Exception as error:  # noqa: BLE001 - any failure means: install without the kernels
        _warn(f"{BUILD_SCRIPT} failed: {error!r}")
        return False
    return True


options: dict = {"cmdclass": {"build_ext": OptionalBuildExt}}
if _build_script_works():
    options["cffi_modules"] = [f"{BUILD_SCRIPT}:ffibuilder"]

setup(**options)
