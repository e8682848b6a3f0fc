"""CPU backends (numpy reference, native C, float64 checking) and the kernel registry.

``select(name)`` resolves the backend a session runs on: ``"reference"``, ``"native"``,
``"float64"`` (the reference kernels with every floating tensor promoted to float64, for
gradient checking: a session mode), or ``None`` for the default (``$MINIGRAPH_BACKEND``,
else native when it was built, else reference). An unknown name, given or from the
variable, is an :class:`InvalidArgumentError` when the session is created (the message
names the variable when the name came from it). ``math_for(backend)`` is the
:class:`~minigraph.backends.registry.BatchNormMath` a kernel registered for that backend
computes with. Importing this package registers every CPU kernel.
"""

from __future__ import annotations

import os
import warnings
from types import ModuleType

from minigraph.backends import (  # noqa: F401  (importing registers the kernels)
    activation_kernels,
    array_kernels,
    batch_norm_kernels,
    bound_matmul,
    concat_kernels,
    convolution_kernels,
    detection_kernels,
    elementwise_kernels,
    fused_kernels,
    fused_training_kernels,
    image_kernels,
    index_kernels,
    layout_kernels,
    linalg_kernels,
    math_kernels,
    native,
    nn_kernels,
    pooling_kernels,
    reduction_kernels,
    reference,
    selection_kernels,
    spatial_kernels,
    state_kernels,
    training_kernels,
    volumetric_kernels,
)
from minigraph.framework.errors import InvalidArgumentError, UnavailableError

BACKENDS = ("native", "reference", "float64")
BACKEND_VAR = "MINIGRAPH_BACKEND"

_warned_fallback = False


def _native() -> ModuleType | None:
    return native if native.available() else None


def math_for(backend: str) -> ModuleType:
    """The batch-norm math of a CPU backend's kernels (float64 checking uses the
    reference's, on promoted tensors)."""
    return _native() if backend == "native" else reference


def select(name: str | None = None) -> str:
    """The backend a session asked for as ``name`` runs on (see the module docstring)."""
    global _warned_fallback
    explicit = name is not None
    from_environment = not name and bool(os.environ.get(BACKEND_VAR, "").strip())
    if from_environment:
        name = os.environ[BACKEND_VAR].strip()
    name = name or "native"
    if not isinstance(name, str) or name not in BACKENDS:
        source = f" (from ${BACKEND_VAR})" if from_environment else ""
        hint = f"; fix or unset {BACKEND_VAR}" if from_environment else ""
        raise InvalidArgumentError(f"unknown backend {name!r}{source}; expected one of "
                                   f"{BACKENDS}{hint}")
    if name != "native" or _native() is not None:
        return name
    if explicit:
        raise UnavailableError("the native backend is not available (the C kernels were not "
                               "built); reinstall with a C compiler or use backend='reference'")
    if not _warned_fallback:
        _warned_fallback = True
        warnings.warn("minigraph: native C kernels are not built; using the numpy reference "
                      "backend", RuntimeWarning, stacklevel=3)
    return "reference"
