"""The remapper's training fusions: batch norm with its side input and Relu, and its gradient
(grappler's ``FusedBatchNormEx`` / ``FusedBatchNormGradEx`` remappings, which stock
TensorFlow forms on GPU and oneDNN only).

* ``FusedBatchNormV3 (training) -> [AddV2 side input] -> Relu`` becomes one
  ``_FusedBatchNormEx`` named as the ``Relu``; the batch norm's other outputs (statistics,
  reserve spaces) are read from the fused op's.
* ``ReluGrad(dy, y) -> FusedBatchNormGradV3`` whose ``y`` is a fused op's output and whose
  ``x``, ``scale`` and reserve spaces are that op's becomes one ``_FusedBatchNormGradEx``
  named as the gradient; other readers of the masked gradient (the side input's gradient)
  read its ``side_input_backprop``.
* ``AddN(a, b) -> _FusedBatchNormGradEx`` (the sum read by the gradient alone) becomes one
  ``_FusedAddBatchNormGradEx`` named as the gradient.

Gates, as grappler's: every node of a pattern is float32 (the native kernels' type; other
types would mix backends), on one device, not preserved (fetched, fed, a target), and no
intermediate (the batch norm's ``y``, the sum, the masked gradient beyond the side input's
readers) is read by anything else or is the source of a control edge. The side input must
have ``y``'s static shape (no broadcasting). Inference batch norms are left to the
convolution epilogue fusion (``client/fusion.py``), which folds them into the convolution.
"""

from __future__ import annotations

from minigraph.framework import dtypes
from minigraph.framework.op_def import get_op_def
from minigraph.optimizer.item import GraphItem, Node, parse_input, tensor_name
from minigraph.optimizer.remapper import register_fusion


class Edges:
    """Who reads what in the item: data readers per tensor, control dependents per node."""

    def __init__(self, item: GraphItem) -> None:
        self.item = item
        self.uses = item.uses()
        self.controlled = {name for node in item for name in node.control_inputs}
        self.preserved = item.preserved
        self.readers: dict[str, list[Node]] = {}
        for node in item:
            for text in node.data_inputs:
                self.readers.setdefault(tensor_name(*parse_input(text)), []).append(node)

    def only_reader(self, text: str) -> Node | None:
        """The node reading tensor ``text`` when it is its single use (no fetch)."""
        readers = self.readers.get(text, [])
        if self.uses.get(text, 0) != 1 or len(readers) != 1:
            return None
        return readers[0]

    def free(self, node: Node) -> bool:
        """Whether ``node`` may disappear into a fused op: not preserved or fed, and no
        node runs after it by a control edge."""
        return (node.name not in self.preserved and node.name not in self.controlled
                and not self.item.is_fed(node.name))


def _float32(node: Node) -> bool:
    return node.attrs.get("T") is dtypes.float32


def _side_input(item: GraphItem, add: Node, y: str) -> str | None:
    """The AddV2's other input when it has ``y``'s static shape and dtype, else None."""
    inputs = [tensor_name(*parse_input(text)) for text in add.data_inputs]
    if inputs.count(y) != 1:
        return None
    side = inputs[1 - inputs.index(y)]
    ours, theirs = item.output(y), item.output(side)
    if not (ours.shape.is_fully_defined() and ours.shape == theirs.shape
            and ours.dtype == theirs.dtype):
        return None
    return side


def _controls(*nodes: Node) -> list[str]:
    """The union of the nodes' control inputs, each once, as input texts."""
    seen: list[str] = []
    for node in nodes:
        for name in node.control_inputs:
            if f"^{name}" not in seen:
                seen.append(f"^{name}")
    return seen


def _replace(item: GraphItem, old: list[Node], fused: Node) -> None:
    """Drop ``old`` (the pattern) and add ``fused``, which takes the last one's name."""
    for node in old:
        item.remove(node.name)
    item.add(fused)


@register_fusion("batch_norm_relu", order=10)
def fuse_batch_norm_relu(item: GraphItem) -> GraphItem:
    """``FusedBatchNormV3 (training) -> [AddV2] -> Relu`` -> ``_FusedBatchNormEx``."""
    return _fuse_batch_norm_relu(item, training=True)


@register_fusion("inference_batch_norm_relu", order=55)
def fuse_inference_batch_norm_relu(item: GraphItem) -> GraphItem:
    """``FusedBatchNormV3 (inference) -> [AddV2] -> Relu`` chains the convolution epilogue
    fusion (order 50) left, such as a pre-activation ResNet's batch norm of a residual sum,
    -> ``_FusedBatchNormEx``: one pass over x instead of two or three."""
    return _fuse_batch_norm_relu(item, training=False)


def _fuse_batch_norm_relu(item: GraphItem, training: bool) -> GraphItem:
    """Fuse the ``FusedBatchNormV3 -> [AddV2] -> Relu`` chains whose ``is_training`` is
    ``training``."""
    edges = Edges(item)
    for bn in item:
        if not (bn.op == "FusedBatchNormV3" and item.nodes.get(bn.name) is bn
                and bool(bn.attrs["is_training"]) == training
                and _float32(bn) and bn.attrs["data_format"] in ("NHWC", "NCHW")
                and edges.free(bn) and not any(item.is_fed(bn.name, i) for i in range(6))):
            continue
        y = tensor_name(bn.name, 0)
        nxt = edges.only_reader(y)
        side = None
        chain = [bn]
        if nxt is not None and nxt.op == "AddV2" and edges.free(nxt) \
                and nxt.device == bn.device:
            side = _side_input(item, nxt, y)
            side_node = None if side is None else parse_input(side)[0]
            if side is None or bn.name in _ancestors(item, [side_node]) | {side_node}:
                continue  # (a side input computed from the statistics: a cycle)
            chain.append(nxt)
            nxt = edges.only_reader(tensor_name(nxt.name, 0))
        if nxt is None or nxt.op != "Relu" or nxt.device != bn.device or item.is_fed(nxt.name):
            continue
        chain.append(nxt)
        attrs = {key: bn.attrs[key] for key in ("T", "U", "epsilon", "exponential_avg_factor",
                                                 "data_format", "is_training")}
        attrs.update(num_side_inputs=int(side is not None), activation_mode="Relu")
        fused = Node(nxt.name, "_FusedBatchNormEx",
                     bn.data_inputs + ([side] if side else []) + _controls(*chain),
                     attrs, bn.device)
        _replace(item, chain, fused)
        for index in range(1, 6):
            item.forward(tensor_name(bn.name, index), tensor_name(fused.name, index))
        edges = Edges(item)
    return item


@register_fusion("batch_norm_relu_grad", order=20)
def fuse_batch_norm_relu_grad(item: GraphItem) -> GraphItem:
    """``ReluGrad(dy, y) -> FusedBatchNormGradV3`` -> ``_FusedBatchNormGradEx`` where ``y``
    is a ``_FusedBatchNormEx``'s Relu output and the gradient reads that op's inputs and
    reserve spaces."""
    edges = Edges(item)
    for grad in item:
        if not (grad.op == "FusedBatchNormGradV3" and item.nodes.get(grad.name) is grad
                and grad.attrs["is_training"] and _float32(grad)
                and not item.is_fed(grad.name)):
            continue
        dy_text, x, scale, *reserves = [tensor_name(*parse_input(t)) for t in grad.data_inputs]
        relu_grad = item.nodes.get(parse_input(dy_text)[0])
        if relu_grad is None or relu_grad.op != "ReluGrad" or parse_input(dy_text)[1] != 0 \
                or not edges.free(relu_grad) or relu_grad.device != grad.device:
            continue
        y = tensor_name(*parse_input(relu_grad.data_inputs[1]))
        forward = item.nodes.get(parse_input(y)[0])
        if not (forward is not None and forward.op == "_FusedBatchNormEx"
                and parse_input(y)[1] == 0 and forward.attrs["activation_mode"] == "Relu"
                and forward.attrs["epsilon"] == grad.attrs["epsilon"]
                and forward.attrs["data_format"] == grad.attrs["data_format"]):
            continue
        forward_inputs = [tensor_name(*parse_input(t)) for t in forward.data_inputs]
        if [x, scale] != forward_inputs[:2] or reserves != [
                tensor_name(forward.name, i) for i in (3, 4, 5)]:
            continue
        masked = tensor_name(relu_grad.name, 0)
        others = [node for node in edges.readers.get(masked, []) if node is not grad]
        sides = forward.attrs["num_side_inputs"]
        if masked in item.fetches or (others and not sides):
            continue
        attrs = {key: grad.attrs[key] for key in ("T", "U", "epsilon", "data_format",
                                                   "is_training")}
        attrs.update(num_side_inputs=sides, activation_mode="Relu")
        inputs = ([tensor_name(*parse_input(relu_grad.data_inputs[0])), x, scale, *reserves,
                   forward_inputs[2], y] + _controls(relu_grad, grad))
        fused = Node(grad.name, "_FusedBatchNormGradEx", inputs, attrs, grad.device)
        _replace(item, [relu_grad, grad], fused)
        if sides:
            item.forward(masked, tensor_name(fused.name, 5))
        edges = Edges(item)
    return item


@register_fusion("add_batch_norm_grad", order=22)
def fuse_add_batch_norm_grad(item: GraphItem) -> GraphItem:
    """``AddN(a, b) -> _FusedBatchNormGradEx`` (training, Relu) -> ``_FusedAddBatchNormGradEx``
    named as the gradient, where the float32 sum of two is read by the gradient alone: a
    residual block's output gradient, the sum of its readers' (the next block's branch and
    shortcut), goes into the batch norm's backward without a pass of its own."""
    edges = Edges(item)
    for grad in item:
        if not (grad.op == "_FusedBatchNormGradEx" and item.nodes.get(grad.name) is grad
                and grad.attrs["is_training"] and grad.attrs["activation_mode"] == "Relu"
                and _float32(grad) and not item.is_fed(grad.name)):
            continue
        dy_text = tensor_name(*parse_input(grad.data_inputs[0]))
        add = item.nodes.get(parse_input(dy_text)[0])
        if not (add is not None and add.op == "AddN" and parse_input(dy_text)[1] == 0
                and add.attrs.get("N") == 2 and _float32(add) and edges.free(add)
                and add.device == grad.device and edges.only_reader(dy_text) is grad):
            continue
        first, second = add.data_inputs
        fused = Node(grad.name, "_FusedAddBatchNormGradEx",
                     [first, *grad.data_inputs[1:], second] + _controls(add, grad),
                     dict(grad.attrs), grad.device)
        _replace(item, [add, grad], fused)
        edges = Edges(item)
    return item


def _ancestors(item: GraphItem, names: list[str]) -> set[str]:
    """Every node the nodes ``names`` depend on (data and control edges), transitively."""
    seen: set[str] = set()
    stack = [parse_input(text)[0] for name in names for text in item.node(name).inputs]
    while stack:
        name = stack.pop()
        if name in seen or name not in item:
            continue
        seen.add(name)
        stack.extend(parse_input(text)[0] for text in item.node(name).inputs)
    return seen


UPDATE_OPS = ("ApplyGradientDescent", "ApplyMomentum", "ApplyAdam", "Assign")


def _variable(node: Node) -> str:
    """The name of the variable an update or Assign writes (its input 0, a ref)."""
    return parse_input(node.data_inputs[0])[0]


def _reads_before(item: GraphItem, edges: Edges, node: Node) -> bool:
    """Whether every other stateful node taking the variable ``node`` assigns (an update,
    which reads its state when it runs) is one of its ancestors, so runs before the write
    in any plan: the fused op may run later than the Assign did, after an unordered update
    that ran before it. (A stateless reader reads the ``Variable`` step's value, which
    every plan computes before any write of it.)"""
    readers = {r.name for r in edges.readers.get(tensor_name(_variable(node), 0), ())
               if r is not node and get_op_def(r.op).is_stateful}
    return not readers or readers <= _ancestors(item, [node.name])


@register_fusion("variable_updates", order=30)
def fuse_variable_updates(item: GraphItem) -> GraphItem:
    """The float32 ``ApplyGradientDescent`` / ``ApplyMomentum`` / ``ApplyAdam`` / ``Assign``
    nodes of one kind, attrs and device whose results nothing reads (a training step's
    updates and a batch norm's moving averages, run for their effect) -> one
    ``_FusedApply*`` / ``_FusedAssign`` over the list, named as the last of them; nodes
    that ran after one of them run after the fused op. An update that is a run's target
    (``mg.train``'s ``minimize`` returns them) leaves a ``NoOp`` of its name that runs after
    the fused op. None is formed where one member depends on another (a control edge
    between them), nor for fewer than two; a variable written by two candidates is left to
    them (their order decides its value), and an ``Assign`` joins only where every update
    of its variable runs before it (:func:`_reads_before`)."""
    edges = Edges(item)
    groups: dict[tuple, list[Node]] = {}
    for node in item:
        if (node.op in UPDATE_OPS and _float32(node) and not item.is_fed(node.name)
                and not edges.uses.get(tensor_name(node.name, 0))
                and (node.op != "Assign" or _reads_before(item, edges, node))):
            key = (node.op, node.device, tuple(sorted(
                (k, v) for k, v in node.attrs.items() if k != "T")))
            groups.setdefault(key, []).append(node)
    for key, members in groups.items():
        written = [_variable(node) for node in members]
        groups[key] = [node for node, name in zip(members, written) if written.count(name) == 1]
    for (op_type, device, _), members in groups.items():
        names = [node.name for node in members]
        if len(members) < 2 or _ancestors(item, names) & set(names):
            continue
        width = len(members[0].data_inputs)
        inputs = [members[k].data_inputs[j] for j in range(width) for k in range(len(members))]
        last = members[-1]
        fused = Node(last.name, f"_Fused{op_type}", inputs + _controls(*members),
                     dict(last.attrs, N=len(members)), device)
        _replace(item, members, fused)
        for node in members[:-1]:  # a run's target keeps its name: a NoOp after the fused op
            if node.name in edges.preserved:
                item.add(Node(node.name, "NoOp", [f"^{fused.name}"], {}, device))
        for node in item:
            if node is fused or node.op == "NoOp" and node.inputs == [f"^{fused.name}"]:
                continue
            controls = [name for name in node.control_inputs if name in names]
            if controls:
                node.inputs = [text for text in node.inputs
                               if not (text.startswith("^") and text[1:] in names)]
                node.inputs.append(f"^{fused.name}")
        item.touch()
    return item


@register_fusion("relu_max_pool", order=25)
def fuse_relu_max_pool(item: GraphItem) -> GraphItem:
    """``Relu -> MaxPool`` -> ``_FusedReluMaxPool`` named as the pool (the Relu's readers
    read its output 1) where the Relu's output is read beyond the pool (training: by the
    gradients), and ``MaxPoolGrad(r, pool, g) -> ReluGrad(., r)`` ->
    ``_FusedMaxPoolGradReluGrad`` named as the ReluGrad, where ``r`` is the pool's input."""
    edges = Edges(item)
    for pool in item:
        if not (pool.op == "MaxPool" and item.nodes.get(pool.name) is pool and _float32(pool)
                and not item.is_fed(pool.name)):
            continue
        source = parse_input(pool.data_inputs[0])
        relu = item.nodes.get(source[0])
        if not (relu is not None and relu.op == "Relu" and source[1] == 0
                and edges.free(relu) and relu.device == pool.device and _float32(relu)):
            continue
        if edges.only_reader(tensor_name(relu.name, 0)) is pool:
            continue  # inference: the Relu stays free to join its producer's epilogue
        fused = Node(pool.name, "_FusedReluMaxPool", relu.data_inputs + _controls(relu, pool),
                     dict(pool.attrs), pool.device)
        _replace(item, [relu, pool], fused)
        item.forward(relu.name, tensor_name(fused.name, 1))
        edges = Edges(item)
    for relu_grad in item:
        if not (relu_grad.op == "ReluGrad" and item.nodes.get(relu_grad.name) is relu_grad
                and _float32(relu_grad) and not item.is_fed(relu_grad.name)):
            continue
        routed, features = (tensor_name(*parse_input(t)) for t in relu_grad.data_inputs)
        grad = item.nodes.get(parse_input(routed)[0])
        if not (grad is not None and grad.op == "MaxPoolGrad" and parse_input(routed)[1] == 0
                and edges.only_reader(routed) is relu_grad and edges.free(grad)
                and grad.device == relu_grad.device and _float32(grad)
                and tensor_name(*parse_input(grad.data_inputs[0])) == features):
            continue
        fused = Node(relu_grad.name, "_FusedMaxPoolGradReluGrad",
                     grad.data_inputs + _controls(grad, relu_grad), dict(grad.attrs),
                     relu_grad.device)
        _replace(item, [grad, relu_grad], fused)
        edges = Edges(item)
    return item
