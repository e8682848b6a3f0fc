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
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# The one list of the build, family by family: (sources, headers); a family's first header
# is its public one, whose CDEF region cffi reads. setup.py, the sanitized build below and
# kernels_c/Makefile (``python build_native.py --list sources|headers|cdef-headers``) all
# use it. The CDEF regions are read in this order: a family's declarations may use the
# types of the families before it (mg_conv2d_forward takes the activations' mg_epilogue).
FAMILIES = {
    "runtime": (["mg_runtime.c"], ["mg_runtime.h"]),
    "batch norm": (["batch_norm.c", "bn_isa_scalar.c", "bn_isa_avx2.c", "bn_isa_avx512.c",
                    "bn_isa_avx512_bf16.c"],
                   ["batch_norm.h", "bn_internal.h", "bn_convert.h", "bn_runs_template.h",
                    "bn_instantiate_dtypes.h", "bn_avx512_ops.h"]),
    "activations": (["activations.c", "activations_isa_scalar.c", "activations_isa_avx2.c",
                     "activations_isa_avx512.c"],
                    ["activations.h", "activations_internal.h", "activations_template.h",
                     "mg_mathf.h"]),
    "convolution": (["convolution.c", "convolution_isa_scalar.c", "convolution_isa_avx2.c",
                     "convolution_isa_avx512.c"],
                    ["convolution.h", "convolution_internal.h", "convolution_template.h"]),
    "gemm": (["gemm.c", "gemm_isa_scalar.c", "gemm_isa_avx2.c", "gemm_isa_avx512.c"],
             ["gemm.h", "gemm_internal.h", "gemm_tail.h"]),
    "convolution on the GEMM": (["conv_gemm.c"], ["conv_gemm.h"]),
    "convolution gradients on the GEMM": (["conv_gemm_grad.c"], ["conv_gemm_grad.h"]),
    "3-D convolutions on the GEMM": (["conv3d_gemm.c"], ["conv3d_gemm.h"]),
    "window sums along one axis": (["window_pass.c", "window_pass_isa_scalar.c",
                                    "window_pass_isa_avx2.c", "window_pass_isa_avx512.c"],
                                   ["window_pass.h", "window_pass_internal.h",
                                    "window_pass_template.h"]),
    "MaxPool3DGrad": (["pool3d_grad.c"], ["pool3d_grad.h"]),
    "depthwise": (["depthwise.c", "depthwise_isa_scalar.c", "depthwise_isa_avx2.c",
                   "depthwise_isa_avx512.c"],
                  ["depthwise.h", "depthwise_internal.h", "depthwise_template.h"]),
    "pooling": (["pooling.c", "pooling_isa_scalar.c", "pooling_isa_avx2.c",
                 "pooling_isa_avx512.c"],
                ["pooling.h", "pooling_internal.h", "pooling_template.h"]),
    "layout": (["layout.c"], ["layout.h"]),
    "broadcast": (["broadcast.c", "broadcast_isa_scalar.c", "broadcast_isa_avx2.c",
                   "broadcast_isa_avx512.c"],
                  ["broadcast.h", "broadcast_internal.h", "broadcast_template.h"]),
    "elementwise programs": (["elementwise_program.c"], ["elementwise_program.h"]),
    "image": (["image.c", "image_isa_scalar.c", "image_isa_avx2.c", "image_isa_avx512.c"],
              ["image.h", "image_internal.h", "image_template.h"]),
    "optimizers": (["optimizers.c", "optimizers_isa_scalar.c", "optimizers_isa_avx2.c",
                    "optimizers_isa_avx512.c"],
                   ["optimizers.h", "optimizers_internal.h", "optimizers_template.h"]),
}
SOURCES = [name for sources, _ in FAMILIES.values() for name in sources]
HEADERS = [name for _, headers in FAMILIES.values() for name in headers]
CDEF_HEADERS = [headers[0] for _, headers in FAMILIES.values()]  # the public ones
COMPILE_ARGS = ["-O3", "-g0", "-pthread", "-fno-math-errno", "-std=gnu11"]
LINK_ARGS = ["-pthread", "-lm"]  # the worker pool (mg_runtime.c) is pthreads; erf, erfc
# The sanitized variant (``--sanitized DIR``, tests/test_fuzz_sanitized.py, ``make fuzz-asan``):
# the same sources and module name under AddressSanitizer + UBSan, built into DIR, never into
# minigraph/. Python is not instrumented, so the process that loads it needs libasan first in
# LD_PRELOAD (see tests/fuzz/sanitized.py).
SANITIZE_ARGS = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined",
                 "-fno-omit-frame-pointer"]
# -g1: line tables only, all a sanitizer's stack trace prints (file:line); full -g took
# 1.5x as long to compile (bn_isa_avx512.c: 110 s against 75 s), on every CI run.
SANITIZED_COMPILE_ARGS = ["-O1", "-g1", "-pthread", "-fno-math-errno", "-std=gnu11",
                          *SANITIZE_ARGS]
SANITIZED_LINK_ARGS = ["-pthread", *SANITIZE_ARGS]


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


def make_builder(absolute: bool = False):
    from cffi import FFI  # here: ``--list`` runs without cffi (plain python3 in the Makefile)

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


def build_sanitized(out_dir: str, verbose: bool = False, jobs: int | None = None) -> str:
    """Build the ASan + UBSan variant of ``minigraph._native`` into ``out_dir`` and return
    the path of the .so. The sources compile in parallel (``jobs``, default: the CPU count;
    the sanitized SIMD instantiations take most of a minute on one core), objects in
    ``out_dir/obj`` are reused while newer than their source and every header, and the .so
    is renamed into place, so a concurrent reader never loads half a file."""
    import subprocess
    import sysconfig
    from concurrent.futures import ThreadPoolExecutor

    out_dir = os.path.abspath(out_dir)
    obj_dir = os.path.join(out_dir, "obj")
    os.makedirs(obj_dir, exist_ok=True)
    wrapper = os.path.join(obj_dir, "_native.c")
    make_builder(absolute=True).emit_c_code(wrapper)  # the cffi wrapper (rewritten if changed)
    cc = os.environ.get("CC", "gcc").split()
    includes = ["-I" + HERE, "-I" + sysconfig.get_paths()["include"]]
    headers = max(os.path.getmtime(os.path.join(HERE, h)) for h in HEADERS + [__file__])

    def compile_one(source: str) -> str:
        obj = os.path.join(obj_dir, os.path.basename(source)[:-2] + ".o")
        if os.path.exists(obj) and os.path.getmtime(obj) >= max(headers,
                                                                os.path.getmtime(source)):
            return obj
        partial = f"{obj}.{os.getpid()}.part"
        command = [*cc, *SANITIZED_COMPILE_ARGS, "-fPIC", *includes, "-c", source, "-o",
                   partial]
        if verbose:
            print(" ".join(command), flush=True)
        subprocess.run(command, check=True)
        os.replace(partial, obj)
        return obj

    sources = [os.path.join(HERE, name) for name in SOURCES] + [wrapper]
    sources.sort(key=lambda s: "_isa_" not in s)  # the slow ones (SIMD instantiations) first
    with ThreadPoolExecutor(jobs or os.cpu_count() or 1) as pool:
        objects = list(pool.map(compile_one, sources))
    target = os.path.join(out_dir, "_native" + sysconfig.get_config_var("EXT_SUFFIX"))
    partial = f"{target}.{os.getpid()}.part"
    subprocess.run([*cc, "-shared", *objects, *SANITIZED_LINK_ARGS, "-lm", "-o", partial],
                   check=True)
    os.replace(partial, target)
    return target


LISTS = {"sources": SOURCES, "headers": HEADERS, "cdef-headers": CDEF_HEADERS}

if __name__ == "__main__" and sys.argv[1:2] == ["--list"]:  # the Makefile's file lists
    if len(sys.argv) != 3 or sys.argv[2] not in LISTS:
        sys.exit(f"usage: build_native.py --list {'|'.join(LISTS)}")
    print(" ".join(LISTS[sys.argv[2]]))
    sys.exit(0)

ffibuilder = make_builder()

if __name__ == "__main__":
    import glob
    import shutil
    import tempfile

    if sys.argv[1:2] == ["--sanitized"]:  # python kernels_c/build_native.py --sanitized DIR
        print(build_sanitized(sys.argv[2] if len(sys.argv) > 2 else "build/asan", verbose=True))
        sys.exit(0)

    package = os.path.join(os.path.dirname(HERE), "minigraph")
    with tempfile.TemporaryDirectory() as tmp:
        built = make_builder(absolute=True).compile(tmpdir=tmp, verbose=True)
        for stale in glob.glob(os.path.join(package, "_native*.so")):
            os.remove(stale)  # another name (e.g. abi3) would shadow or be shadowed
        shutil.copy(built, package)
