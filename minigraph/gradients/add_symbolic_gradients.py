"""AddSymbolicGradients: reverse-mode autodiff that adds gradient nodes to the graph.

Mirrors ``tensorflow/cc/framework/gradients.h``. The ops that lie on a path from an input to
an output are visited in reverse creation order (creation order is topological, so every
consumer is visited before its producer). Each visited op's gradient function receives the
summed cotangents of its outputs (``AddN`` when several consumers contribute) and returns
the cotangents of its inputs. New nodes go under ``gradients/<op name>_grad/``.
"""

from __future__ import annotations

from collections.abc import Sequence

from minigraph.framework.errors import InvalidArgumentError
from minigraph.framework.gradient_registry import get_gradient_function
from minigraph.framework.graph import Operation, Output
from minigraph.framework.scope import Scope
from minigraph.ops.math_ops import AddN, OnesLike


def _ops_between(outputs: Sequence[Output], inputs: Sequence[Output], stop_at_inputs: bool
                 ) -> list[Operation]:
    """Ops reachable forward from ``inputs`` and backward from ``outputs``, newest first.

    With ``stop_at_inputs`` the backward walk does not pass through an input tensor, so the
    inputs act as independent leaves (partial instead of total derivatives).
    """
    graph = outputs[0].graph
    input_set = set(inputs)
    downstream: set[Operation] = set()
    for op in graph.operations():
        if any(i in input_set or i.op in downstream for i in op.inputs):
            downstream.add(op)
    upstream: set[Operation] = set()
    stack = [o.op for o in outputs]
    while stack:
        op = stack.pop()
        if op in upstream:
            continue
        upstream.add(op)
        stack.extend(i.op for i in op.inputs if not (stop_at_inputs and i in input_set))
    return sorted(downstream & upstream, key=lambda op: op._id, reverse=True)


def _aggregate(scope: Scope, grads: list[Output]) -> Output:
    return grads[0] if len(grads) == 1 else AddN(scope, grads)


def _outputs(values: Output | Sequence[Output], what: str) -> list[Output]:
    """One Output or a sequence of them, as a list (each checked)."""
    values = [values] if isinstance(values, Output) else list(values)
    for value in values:
        if not isinstance(value, Output):
            raise InvalidArgumentError(f"AddSymbolicGradients: each of '{what}' must be an "
                                       f"Output, got {type(value).__name__}")
    return values


def AddSymbolicGradients(scope: Scope, outputs: Output | Sequence[Output],
                         inputs: Output | Sequence[Output],
                         grad_inputs: Output | Sequence[Output] | None = None, *,
                         stop_at_inputs: bool = False) -> list[Output | None]:
    """d(sum of outputs · grad_inputs) / d(inputs); ``None`` where an input gets no gradient.

    ``grad_inputs`` are the upstream cotangents of ``outputs`` (default: ones). Like
    ``tf.gradients``, an input that depends on another input passes its gradient on (total
    derivatives); ``stop_at_inputs=True`` treats the inputs as independent (partial
    derivatives), which gradient functions need when they differentiate a subgraph.
    Each argument may be one Output or a list; the result is always a list (one entry per
    input), as in TF C++.
    """
    outputs, inputs = _outputs(outputs, "outputs"), _outputs(inputs, "inputs")
    if grad_inputs is not None:
        grad_inputs = _outputs(grad_inputs, "grad_inputs")
    if not outputs:
        raise InvalidArgumentError("AddSymbolicGradients: 'outputs' must not be empty")
    if grad_inputs is not None and len(grad_inputs) != len(outputs):
        raise InvalidArgumentError(f"AddSymbolicGradients: got {len(grad_inputs)} grad_inputs "
                                   f"for {len(outputs)} outputs")
    grad_scope = scope.NewSubScope("gradients")
    pending: dict[Output, list[Output]] = {}
    for i, output in enumerate(outputs):
        seed = grad_inputs[i] if grad_inputs is not None else OnesLike(
            grad_scope.WithOpName(f"{output.op.name}_ones"), output)
        if seed.dtype is not output.dtype:
            raise InvalidArgumentError(
                f"AddSymbolicGradients: grad_inputs[{i}] has dtype {seed.dtype.name}, expected "
                f"{output.dtype.name} like output '{output.name}'")
        pending.setdefault(output, []).append(seed)
    backprop(grad_scope, _ops_between(outputs, inputs, stop_at_inputs), pending)
    return [_aggregate(grad_scope, pending[i]) if pending.get(i) else None for i in inputs]


def backprop(scope: Scope, ops: Sequence[Operation], pending: dict[Output, list[Output]]
             ) -> None:
    """Run the gradient functions of ``ops`` (newest first), accumulating into ``pending``."""
    for op in ops:
        grad_outputs = []
        for output in op.outputs:
            if pending.get(output):
                pending[output] = [_aggregate(scope, pending[output])]
                grad_outputs.append(pending[output][0])
            else:
                grad_outputs.append(None)
        if all(g is None for g in grad_outputs):
            continue
        grad_fn = get_gradient_function(op)
        if grad_fn is None:
            continue
        op_scope = scope.NewSubScope(f"{op.name}_grad")
        input_grads = grad_fn(op_scope, op, grad_outputs)
        if len(input_grads) != len(op.inputs):
            raise InvalidArgumentError(
                f"gradient function of {op.type} returned {len(input_grads)} gradients for "
                f"{len(op.inputs)} inputs")
        for tensor, grad in zip(op.inputs, input_grads):
            if grad is not None and tensor.dtype.is_floating:
                pending.setdefault(tensor, []).append(grad)
