"""CPU math backends (numpy reference, native C) and the kernel registry.

``select(name)`` returns the math module a session uses for the batch-norm loops:
``"reference"``, ``"native"``, ``"float64"`` (reference math with every floating tensor
promoted to float64, for gradient checking), or ``None`` for the default
(``$MINIGRAPH_BACKEND``, else native when it was built, else reference). An unknown name,
given or from the variable, is an :class:`InvalidArgumentError` when the session is created
(the message names the variable when the name came from it).
"""

from __future__ import annotations

import os
import warnings
from types import ModuleType, SimpleNamespace

from minigraph.backends import (  # noqa: F401  (importing registers the kernels)
    array_kernels,
    batch_norm_kernels,
    conv_kernels,
    math_kernels,
    nn_kernels,
    reference,
    state_kernels,
)
from minigraph.framework.errors import InvalidArgumentError, UnavailableError

BACKENDS = ("native", "reference", "float64")
BACKEND_VAR = "MINIGRAPH_BACKEND"

# The reference math evaluated with every floating tensor promoted to float64: the gradient
# checker's backend, so finite differences are not drowned in float32 rounding.
float64 = SimpleNamespace(**{k: v for k, v in vars(reference).items()
                             if k.startswith("bn_")}, NAME="float64", FLOAT64=True)
_warned_fallback = False


def _native() -> ModuleType | None:
    try:
        from minigraph.backends import native
    except ImportError:
        return None
    return native if native.available() else None


def select(name: str | None = None) -> ModuleType:
    """The math module for backend ``name`` (see the module docstring for the default)."""
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
    if name == "reference":
        return reference
    if name == "float64":
        return float64
    native = _native()
    if native is not None:
        return native
    if explicit:
        raise UnavailableError("the native backend is not available (the C kernels were not "
                               "built); reinstall with a C compiler or use backend='reference'")
    if not _warned_fallback:
        _warned_fallback = True
        warnings.warn("minigraph: native C kernels are not built; using the numpy reference "
                      "backend", RuntimeWarning, stacklevel=3)
    return reference
