"""Graph inputs and plumbing: Placeholder, Const, Identity, and the pass-throughs frozen
graphs carry (IdentityN, StopGradient, Snapshot, PreventGradient): each hands its input on
without copying it and differs from Identity only in its gradient."""

from __future__ import annotations

from typing import Any

import numpy as np

from minigraph.framework import dtypes, limits
from minigraph.framework.dtypes import DType
from minigraph.framework.errors import InvalidArgumentError
from minigraph.framework.gradient_registry import NotDifferentiable, RegisterGradient
from minigraph.framework.graph import Output
from minigraph.framework.op_def import (
    ArgDef,
    AttrDef,
    InferenceContext,
    OpDef,
    RunContext,
    build_operation,
    make_wrapper,
    register_constant_op,
    register_op,
    required,
)
from minigraph.framework.scope import Scope
from minigraph.framework.tensor_shape import TensorShape

# The wrappers minigraph.ops exports.
__all__ = ["Assert", "CheckNumerics", "Const", "Identity", "IdentityN", "NoOp", "Placeholder",
           "PreventGradient", "Snapshot", "StopGradient"]

PLACEHOLDER = register_op(OpDef(
    name="Placeholder",
    inputs=[],
    outputs=[ArgDef("output", type_attr="dtype")],
    attrs=[required("dtype", "type"), AttrDef("shape", "shape", default=TensorShape(None))],
    shape_fn=lambda ctx: [ctx.attrs["shape"]],
))
Placeholder = make_wrapper(PLACEHOLDER)

CONST = register_op(OpDef(
    name="Const",
    inputs=[],
    outputs=[ArgDef("output", type_attr="dtype")],
    attrs=[required("value", "tensor"), required("dtype", "type")],
    shape_fn=lambda ctx: [TensorShape(ctx.attrs["value"].shape)],
))


def Const(scope: Scope, value: Any, dtype: DType | None = None) -> Output:
    """A constant tensor from a numpy array, scalar or (nested) list.

    Without ``dtype``, numpy arrays keep their dtype and Python floats/ints become float32/int32
    (TensorFlow's conversion rule).
    """
    if dtype is not None:
        dtype = dtypes.as_dtype(dtype)
    if isinstance(value, (np.ndarray, np.generic)):
        try:
            dtypes.as_dtype(value.dtype)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"Const: cannot make a constant of dtype {value.dtype}: "
                                       f"{exc}") from None
        # a copy (the caller may change its array later) that keeps a broadcast view's
        # repeated axes unexpanded; dtype: an explicit cast the caller asked for
        array = limits.compact_copy(np.asarray(value), "Const: value",
                                    None if dtype is None else dtype.np_dtype)
    else:
        array = dtypes.python_to_array(value, dtype, "Const: value")
    inferred = dtypes.as_dtype(array.dtype)
    array.setflags(write=False)
    return build_operation(scope, CONST, [], {"value": array, "dtype": inferred}).outputs[0]


register_constant_op(Const)  # values given to any op's inputs become Const nodes


def _pass_through(name: str, *extra: AttrDef, allowed: tuple | None = None,
                  validate=None, input_name: str = "input") -> OpDef:
    """An op whose output is its input (Identity and the ops that differ from it only in
    their gradient or a run-time check)."""
    return register_op(OpDef(
        name=name,
        inputs=[ArgDef(input_name, type_attr="T")],
        outputs=[ArgDef("output", type_attr="T")],
        attrs=[required("T", "type", allowed=allowed), *extra],
        shape_fn=lambda ctx: [ctx.input_shapes[0]],
        validate=validate,
    ))


IDENTITY = _pass_through("Identity")
Identity = make_wrapper(IDENTITY)
# Gradient None: what Keras' tf.stop_gradient (ConvNeXt's layer scale...) freezes to.
StopGradient = make_wrapper(_pass_through("StopGradient"))
# A copy in TF (so a later in-place update cannot reach the value); values are never
# updated in place here, so it is Identity, gradient included.
Snapshot = make_wrapper(_pass_through("Snapshot"))
PreventGradient = make_wrapper(_pass_through(
    "PreventGradient", AttrDef("message", "string", default="",
                               doc="Why the gradient is disabled (quoted by the error).")))


def _all_finite(ctx: RunContext, values: list) -> None:
    """TF's tf.debugging.check_numerics: ``<message> : Tensor had Inf and NaN values``."""
    x = values[0] if isinstance(values[0], np.ndarray) else values[0].get()
    wide = x.astype(np.float32) if x.dtype.itemsize < 4 else x
    found = [what for what, test in (("Inf", np.isinf), ("NaN", np.isnan)) if test(wide).any()]
    if found:
        raise ctx.error(f"{ctx.op.attrs['message']} : Tensor had {' and '.join(found)} values")


# Passes a float tensor on, refusing it at run time if it holds Inf or NaN.
CheckNumerics = make_wrapper(_pass_through(
    "CheckNumerics", required("message", "string",
                              doc="Leads the error when the tensor holds Inf or NaN."),
    allowed=dtypes.FLOATING, validate=_all_finite, input_name="tensor"))

# Several tensors of any types passed on together (tf.identity_n; Keras' custom gradients
# freeze to it).
IdentityN = make_wrapper(register_op(OpDef(
    name="IdentityN",
    inputs=[ArgDef("input", type_list_attr="T", doc="The tensors to pass on.")],
    outputs=[ArgDef("output", type_list_attr="T")],
    attrs=[required("T", "list(type)",
                    check=lambda types: None if types else "must have at least 1 type",
                    doc="The inputs' dtypes, one each.")],
    shape_fn=lambda ctx: list(ctx.input_shapes),
)))


NotDifferentiable("StopGradient", "Assert")


@RegisterGradient("Snapshot")
def _snapshot_grad(scope, op, grads):
    return [grads[0]]


@RegisterGradient("IdentityN")
def _identity_n_grad(scope, op, grads):
    """Each input's gradient is its output's (None where no loss reads it)."""
    return list(grads)


@RegisterGradient("CheckNumerics")
def _check_numerics_grad(scope, op, grads):
    """The gradient checked in turn (TF's message)."""
    return [CheckNumerics(scope, grads[0], message="Not a number (NaN) or infinity (Inf) "
                          f"values detected in gradient. {op.attrs['message']}")]


@RegisterGradient("PreventGradient")
def _prevent_gradient_grad(scope, op, grads):
    raise InvalidArgumentError(f"PreventGradient '{op.name}': Gradient explicitly disabled. "
                               f"Reason: {op.attrs['message']}")

def _assert_shape(ctx: InferenceContext) -> list[TensorShape]:
    condition = ctx.input_shape("condition")
    if condition.rank not in (None, 0):
        raise ctx.error(f"In[0] is not a scalar: {condition} (input 'condition')")
    return []


def _assert_holds(ctx: RunContext, values: list) -> None:
    """TF's ``assertion failed: [<message>] [<data>...]`` when the condition is False (the
    data summarized: at most ``summarize`` entries of each tensor)."""
    condition = values[0] if isinstance(values[0], np.ndarray) else values[0].get()
    if np.ndim(condition):
        raise ctx.error(f"In[0] is not a scalar: {list(np.shape(condition))} (input "
                        f"'condition')")
    if bool(condition):
        return
    limit = ctx.op.attrs["summarize"]
    parts = [ctx.op.attrs["message"]] if ctx.op.attrs["message"] else []
    for value in values[1:]:
        flat = np.ravel(value if isinstance(value, np.ndarray) else value.get())
        shown_values = " ".join(str(v) for v in flat[:limit].tolist())
        parts.append(shown_values + ("..." if flat.size > limit else ""))
    raise ctx.error("assertion failed: " + " ".join(f"[{p}]" for p in parts))


# Fails the run when ``condition`` is False, naming ``message`` and showing ``data``. TF's
# Assert carries its message as string tensors among the data; minigraph has no string
# tensors, so the importer folds those constants into ``message``.
Assert = make_wrapper(register_op(OpDef(
    name="Assert",
    inputs=[ArgDef("condition", dtype=dtypes.bool_, doc="A scalar: the run fails when False."),
            ArgDef("data", type_list_attr="T", doc="Tensors shown in the error.")],
    outputs=[],
    attrs=[required("T", "list(type)"),
           AttrDef("summarize", "int", default=3, doc="Entries of each data tensor shown."),
           AttrDef("message", "string", default="",
                   doc="The text TF's Assert carried as string tensors.")],
    shape_fn=_assert_shape,
    validate=_assert_holds,
    is_stateful=True,
)))


# Does nothing: a target that groups control inputs (frozen TF 2 graphs hang every output
# on one), so ``Run(targets=[no_op])`` runs them all.
NoOp = make_wrapper(register_op(OpDef(name="NoOp", inputs=[], outputs=[])))
