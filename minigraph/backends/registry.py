"""Kernel registry: which function runs an op, keyed like TF's ``REGISTER_KERNEL_BUILDER``.

A registration is ``(op types, backend, dtype constraint, predicate on attrs) -> kernel``::

    @register_kernel("Relu")                                        # the numpy reference
    def relu(op, inputs, ctx): ...

    @register_kernel("Relu", backend="native", dtypes=(float32,))  # C, float32 only
    def relu_native(op, inputs, ctx): ...

Backends: ``reference`` (numpy, the ground truth and every other backend's fallback),
``native`` (the C kernels), ``float64`` (the reference evaluated with floating tensors
promoted to float64, for gradient checking) and ``opencl`` (a device: no fallback, an op
it has no kernel for runs on the host). The session picks one :class:`KernelDef` per step
at plan time (:func:`find_kernel`), so what runs is decided once and can be reported
(``RunMetadata``).

A kernel is ``kernel(op, inputs, ctx) -> list of arrays``: ``op`` the node (for its attrs),
``inputs`` the values, already validated by the session (kernels never re-check), and
``ctx`` the :class:`KernelContext`: the backend's name, its :class:`BatchNormMath` and the
session state (variables) for stateful ops.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from minigraph.framework.dtypes import DType
from minigraph.framework.errors import InvalidArgumentError, NotFoundError
from minigraph.framework.graph import Operation

BACKENDS = ("reference", "native", "float64", "opencl")
# Where a backend looks when it has no kernel of its own for an op (None: nowhere).
FALLBACK = {"reference": None, "native": "reference", "float64": "reference", "opencl": None}


class BatchNormMath(Protocol):
    """The per-element batch-norm loops a backend provides (``backends.reference`` in numpy,
    ``backends.native`` in C, ``OpenCLMath`` on a device), plus ``xp``: the array functions
    for its tensors (numpy on the CPU). Formulas: ``backends/reference.py``."""

    xp: Any

    def bn_forward_training(self, x, scale, offset, epsilon, channels_last): ...

    def bn_forward_inference(self, x, scale, offset, mean, variance, epsilon,
                             channels_last): ...

    def bn_backward_training(self, dy, x, scale, mean, variance, epsilon,
                             channels_last): ...

    def bn_backward_inference(self, dy, x, scale, mean, variance, epsilon,
                              channels_last): ...

    def bn_grad_grad_training(self, dy, x, scale, gx, gscale, goffset, epsilon,
                              channels_last): ...

    def bn_grad_grad_inference(self, dy, x, scale, mean, variance, gx, gscale, goffset,
                               epsilon, channels_last): ...


@dataclass(frozen=True)
class KernelContext:
    """What a kernel gets besides its op and inputs: the backend it runs on, that
    backend's batch-norm math, and the session state (variables, random streams)."""

    backend: str
    math: BatchNormMath
    state: Any = None

    def error(self, op: Operation, message: str) -> InvalidArgumentError:
        """An error naming the node, for the data checks only a kernel can make."""
        return InvalidArgumentError(f"{op.type} '{op.name}': {message}")


Kernel = Callable[[Operation, list, KernelContext], list]


@dataclass(frozen=True)
class KernelDef:
    """One registration: the kernel for ``op_type`` on ``backend`` when the op's dtype is
    in ``dtypes`` (None: any) and ``when(op)`` holds (None: always). ``inplace``: the inputs
    the kernel may write its output 0 into: it then takes ``out=`` (one of those inputs,
    which the session's memory planner offers only where nothing else holds it) and returns
    it as the result when the array fits, or a fresh array when not. ``takes_out``: the
    kernel takes ``out=`` (any kernel with ``inplace`` does): a buffer of its output 0's
    shape and dtype sharing no memory with its inputs (a bound plan's arena, ``client/
    planner.py``), which it fills entirely and returns when it fits (C-contiguous, aligned,
    writeable, of that shape and dtype) and ignores when not. ``bound``: where set, a
    bound program (``client/executor.py``) calls ``bound(op)`` once per entry and then that
    object (the kernel's signature, ``out=`` included) instead of the kernel: a variant that
    keeps what one entry's calls share (``backends/bound_matmul.py``), the kernel's bits."""

    op_type: str
    backend: str
    kernel: Kernel
    dtypes: frozenset[DType] | None = None
    when: Callable[[Operation], bool] | None = field(default=None, compare=False)
    inplace: tuple[int, ...] = ()
    takes_out: bool = False
    bound: Callable[[Operation], Kernel] | None = field(default=None, compare=False)

    @property
    def name(self) -> str:
        """``module.function`` of the kernel, as run metadata reports it."""
        return f"{self.kernel.__module__.rsplit('.', 1)[-1]}.{self.kernel.__name__}"

    def matches(self, op: Operation) -> bool:
        if self.dtypes is not None and op_dtype(op) not in self.dtypes:
            return False
        return self.when is None or self.when(op)


_KERNELS: dict[tuple[str, str], list[KernelDef]] = {}


def op_dtype(op: Operation) -> DType | None:
    """The dtype a kernel's constraint is about: the op's ``T`` attr, else its first
    output's (Const, Placeholder, Cast's result) or input's dtype."""
    dtype = op.attrs.get("T")
    if isinstance(dtype, DType):
        return dtype
    if op.outputs:
        return op.outputs[0].dtype
    return op.inputs[0].dtype if op.inputs else None


def register_kernel(*op_types: str, backend: str | Sequence[str] = "reference",
                    dtypes: Sequence[DType] | None = None,
                    when: Callable[[Operation], bool] | None = None,
                    inplace: Sequence[int] = (), out: bool = False
                    ) -> Callable[[Kernel], Kernel]:
    """Decorator: register the kernel for ``op_types`` on ``backend`` (one name or several),
    for the ``dtypes`` and attrs (``when``) it handles; ``inplace``: the inputs it may write
    its output into, ``out``: it takes ``out=`` without writing in place (see
    :class:`KernelDef`). Registrations of one op and backend are tried
    in order; the first that matches runs."""
    backends = (backend,) if isinstance(backend, str) else tuple(backend)
    unknown = set(backends) - set(BACKENDS)
    if unknown:
        raise ValueError(f"unknown backend(s) {sorted(unknown)}; expected {BACKENDS}")
    allowed = None if dtypes is None else frozenset(dtypes)

    def decorate(kernel: Kernel) -> Kernel:
        for op_type in op_types:
            for name in backends:
                entries = _KERNELS.setdefault((op_type, name), [])
                if any(e.dtypes == allowed and e.when is None and when is None for e in entries):
                    raise ValueError(f"a {name} kernel for '{op_type}' with these dtypes is "
                                     f"already registered")
                entries.append(KernelDef(op_type, name, kernel, allowed, when, tuple(inplace),
                                         bool(out or inplace)))
        return kernel

    return decorate


def set_bound(kernel: Kernel, factory: Callable[[Operation], Kernel]) -> None:
    """Give every registration of ``kernel`` the bound variant ``factory`` (``KernelDef.
    bound``)."""
    for key, entries in _KERNELS.items():
        _KERNELS[key] = [replace(entry, bound=factory) if entry.kernel is kernel else entry
                         for entry in entries]


# A replay maker: ``maker(op, inputs, outputs, ctx)`` for fixed arrays (a bound program
# replayed over buffers of its own, ``client/replay.py``; ``ctx`` the kernel's context)
# returns a function of no arguments that computes the kernel's results for the values
# ``inputs`` hold at each call into ``outputs`` (the kernel's bits), or None where it does
# not take these arrays.
ReplayMaker = Callable[[Operation, list, list, Any], Callable[[], None] | None]
_REPLAYS: dict[Any, tuple[ReplayMaker, bool]] = {}


def set_replay(kernel: Kernel, maker: ReplayMaker, validates: bool = False) -> None:
    """Give ``kernel`` the replay maker ``maker`` (see :data:`ReplayMaker`). ``validates``:
    its functions take only values the op's ``validate`` passes (GatherV2's indices in
    range) and otherwise run what raises the op's error, so they may stand in for a step
    that checks its inputs at every run."""
    _REPLAYS[kernel] = (maker, validates)


def store_results(op: Operation, outputs: Sequence, results: Sequence) -> None:
    """Copy a kernel's ``results`` into a replay's fixed ``outputs`` (see
    :data:`ReplayMaker`); a result of another shape or dtype than its buffer (which the
    bound program's signature fixed) is a bug in minigraph (an AssertionError, as a
    kernel's result that does not match its op's outputs)."""
    for out, result in zip(outputs, results):
        if result is out:
            continue
        result = np.asarray(result)
        if result.shape != out.shape or result.dtype != out.dtype:
            raise AssertionError(f"{op.type} '{op.name}': a replayed result is "
                                 f"{result.dtype} {result.shape}, its buffer {out.dtype} "
                                 f"{out.shape}")
        np.copyto(out, result)


def while_unchanged(watched: Sequence[np.ndarray], fast: Callable[[], None], op: Operation,
                    outputs: Sequence, kernel: Kernel, values: list, ctx: Any
                    ) -> Callable[[], None]:
    """A replayed step: ``fast`` while the ``watched`` inputs (an axis, paddings: what its
    call was made for) hold the bytes they held when it was made; otherwise ``kernel``'s
    results for ``values``, copied into ``outputs`` (:func:`store_results`)."""
    made = [value.tobytes() for value in watched]

    def replayed() -> None:
        if [value.tobytes() for value in watched] == made:
            fast()
        else:
            store_results(op, outputs, kernel(op, values, ctx))

    return replayed


def replay_maker(kernel: Any, validating: bool = False) -> ReplayMaker | None:
    """The replay maker of ``kernel``: its own ``replay`` method (a bound variant, an
    elementwise group) or the one :func:`set_replay` gave it; None when it has none, or
    when ``validating`` (a step that checks its inputs) and the maker does not validate."""
    method = getattr(kernel, "replay", None)
    if method is not None:
        return None if validating else method
    maker, validates = _REPLAYS.get(kernel, (None, False))
    return maker if validates or not validating else None


def find_kernel(op: Operation, backend: str, fallback: bool = True) -> KernelDef | None:
    """The kernel ``op`` runs with on ``backend``: the first matching registration, else
    (with ``fallback``) the fallback backend's; None when there is none."""
    while backend is not None:
        for entry in _KERNELS.get((op.type, backend), ()):
            if entry.matches(op):
                return entry
        if not fallback:
            return None
        backend = FALLBACK[backend]
    return None


def get_kernel(op: Operation, backend: str) -> KernelDef:
    """:func:`find_kernel`, raising NotFoundError when no backend has a kernel."""
    entry = find_kernel(op, backend)
    if entry is None:
        raise NotFoundError(f"no kernel registered for op type '{op.type}' on backend "
                            f"'{backend}' (or its fallback)")
    return entry


def registered_kernels() -> list[KernelDef]:
    """Every registration (for coverage checks and docs)."""
    return [entry for entries in _KERNELS.values() for entry in entries]
