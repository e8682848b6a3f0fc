"""cffi (API mode) build script for ``minigraph._native``, the native kernels (batch norm;
convolutions, pooling and elementwise ops).

Used by setup.py (``cffi_modules=["kernels_c/build_native.py:ffibuilder"]``) and runnable by
hand: ``python kernels_c/build_native.py`` builds the extension in a temporary folder and
copies it into minigraph/. The declarations come from the CDEF regions of the public
headers (CDEF_HEADERS), so the headers are the single source of truth. No -march flag: the
kernels pick AVX-512 / AVX2 / scalar at run time (batch_norm.c). Functions declared this way
release the GIL during the call.
"""

from __future__ import annotations

import os

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCES = ["batch_norm.c", "bn_isa_scalar.c", "bn_isa_avx2.c", "bn_isa_avx512.c",
           "bn_isa_avx512_bf16.c"]
HEADERS = ["batch_norm.h", "bn_internal.h", "bn_convert.h", "bn_runs_template.h",
           "bn_instantiate_dtypes.h", "bn_avx512_ops.h"]
# convolutions, pooling and elementwise ops (conv.h, pool.h)
SOURCES += ["conv.c", "conv_avx2.c", "conv_avx512.c", "pool.c"]
HEADERS += ["conv.h", "conv_internal.h", "conv_vec_template.h", "pool.h", "pool_loops.h"]
CDEF_HEADERS = ["batch_norm.h", "conv.h", "pool.h"]
COMPILE_ARGS = ["-O3", "-g0", "-fopenmp", "-fno-math-errno", "-std=gnu11"]
LINK_ARGS = ["-fopenmp"]


def _path(name: str, absolute: bool) -> str:
    """kernels_c/<name>: relative to the working directory when below it (setuptools builds
    from the project root and prefers relative source paths), else absolute."""
    full = os.path.join(HERE, name)
    rel = os.path.relpath(full)
    return full if absolute or rel.startswith("..") else rel


def _cdef() -> str:
    regions = []
    for name in CDEF_HEADERS:
        with open(os.path.join(HERE, name), encoding="utf-8") as header:
            text = header.read()
        regions.append(text.split("/* BEGIN CDEF */")[1].split("/* END CDEF */")[0])
    return "\n".join(regions)


def make_builder(absolute: bool = False) -> FFI:
    builder = FFI()
    builder.cdef(_cdef())
    builder.set_source(
        "minigraph._native",
        "".join(f'#include "{name}"\n' for name in CDEF_HEADERS),
        sources=[_path(name, absolute) for name in SOURCES],
        depends=[_path(name, absolute) for name in HEADERS],
        include_dirs=[_path(".", absolute)],
        extra_compile_args=COMPILE_ARGS,
        extra_link_args=LINK_ARGS,
    )
    return builder


ffibuilder = make_builder()

if __name__ == "__main__":
    import glob
    import shutil
    import tempfile

    package = os.path.join(os.path.dirname(HERE), "minigraph")
    with tempfile.TemporaryDirectory() as tmp:
        built = make_builder(absolute=True).compile(tmpdir=tmp, verbose=True)
        for stale in glob.glob(os.path.join(package, "_native*.so")):
            os.remove(stale)  # another name (e.g. abi3) would shadow or be shadowed
        shutil.copy(built, package)
