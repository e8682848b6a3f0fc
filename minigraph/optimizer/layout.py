"""The layout pass: an NCHW graph runs NHWC inside (grappler's ``GenericLayoutOptimizer``).

minigraph's native kernels are NHWC kernels; their NCHW forms transpose the input to NHWC,
run the NHWC kernel and transpose the result back, once per op. This pass moves those
transposes into the graph, where consecutive ones cancel:

1. **Convert.** Each data-format-aware op in :data:`LAYOUT_OPS` with ``data_format="NCHW"``
   on the host becomes an ``NHWC`` op (a new node ``<name>/nhwc``) whose 4-D data inputs are
   ``Transpose(x, [0, 2, 3, 1])`` and whose 4-D data outputs are read back through
   ``Transpose(y, [0, 3, 1, 2])``; its 4-element attrs (``strides``, ``dilations``,
   ``ksize``) and ``explicit_paddings`` are permuted, and a constant shape input
   (``Conv2DBackpropInput``'s ``input_sizes``, ``AvgPoolGrad``'s ``orig_input_shape``) is
   permuted too (a shape computed at run time leaves the op alone). Filters (HWIO) and
   per-channel vectors are layout-free and pass as they are.
2. **Move elementwise ops.** An op of :data:`ELEMENTWISE_OPS` (Relu, AddV2/Mul/... of
   same-shape 4-D operands or rank-0 scalars, ReluGrad, AddN...) reading a transposed-back
   tensor is converted the same way: it computes each element from the same elements, so
   it gives the same bits in either layout.
3. **Cancel.** ``Transpose(Transpose(x, p), q)`` with constant permutations composing to
   the identity reads ``x`` instead; transposes nothing reads are dropped. What remains
   are the transposes at the graph's boundaries (placeholders, variables, fetches).

Bit for bit: each converted op's NHWC kernel is the one its NCHW kernel runs between its
own transposes, so the result is the same array. Ops whose NCHW kernels sum in another
order than their NHWC kernels are left out (measured: they differ in the last bits):
``BiasAddGrad`` (native NCHW sums each image's plane pairwise), training batch norms and
every batch-norm gradient (the native kernels' per-channel sums over an (outer, C, inner)
view run in another order for each layout; inference batch norms have no sums and are
converted), grouped ``Conv2D`` gradients of one input channel per group (their NHWC form
runs on the depthwise kernels, the NCHW form on the dense ones) and the reductions
(``Mean``/``Sum`` over [2, 3]: numpy's pairwise sum follows memory order).

Contract (``passes.py``): a fetched node keeps its name and NCHW meaning (the transpose
back takes its name; a fetched node with several outputs is left alone); a fed node is
left alone (its readers read the fed value); control edges to a converted node point at
its NHWC node, which keeps its control inputs; stateful ops and ops off the host are never
converted.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from minigraph.framework import dtypes
from minigraph.optimizer.item import GraphItem, Node, parse_input, tensor_name
from minigraph.optimizer.passes import register_pass
from minigraph.optimizer.remapper import _on_host

TO_NHWC = (0, 2, 3, 1)  # NCHW -> NHWC: Transpose(x, TO_NHWC)
TO_NCHW = (0, 3, 1, 2)  # NHWC -> NCHW


@dataclass(frozen=True)
class LayoutSpec:
    """Which data inputs of an op are not layout tensors (``keep``: filters), which is a
    4-element shape vector in the op's layout (``shape``), and which 4-D outputs are not
    layout tensors (``keep_outputs``: a filter gradient)."""

    keep: frozenset[int] = frozenset()
    shape: int | None = None
    keep_outputs: frozenset[int] = frozenset()
    inference_only: bool = False  # converted only with is_training=False


_FILTER = LayoutSpec(keep=frozenset({1}))
_INPUT_GRAD = LayoutSpec(keep=frozenset({1}), shape=0)
_FILTER_GRAD = LayoutSpec(keep=frozenset({1}), keep_outputs=frozenset({0}))
_PLAIN = LayoutSpec()
_INFERENCE = LayoutSpec(inference_only=True)

# data-format-aware ops whose NHWC kernel gives the NCHW kernel's bits (see the docstring)
LAYOUT_OPS: dict[str, LayoutSpec] = {
    "Conv2D": _FILTER, "_FusedConv2D": _FILTER,
    "DepthwiseConv2dNative": _FILTER, "_FusedDepthwiseConv2dNative": _FILTER,
    "Conv2DBackpropInput": _INPUT_GRAD, "DepthwiseConv2dNativeBackpropInput": _INPUT_GRAD,
    "Conv2DBackpropFilter": _FILTER_GRAD, "DepthwiseConv2dNativeBackpropFilter": _FILTER_GRAD,
    "BiasAdd": _PLAIN,
    "MaxPool": _PLAIN, "AvgPool": _PLAIN, "MaxPoolGrad": _PLAIN, "MaxPoolGradGrad": _PLAIN,
    "AvgPoolGrad": LayoutSpec(shape=0),
    "FusedBatchNorm": _INFERENCE, "FusedBatchNormV2": _INFERENCE,
    "FusedBatchNormV3": _INFERENCE, "_FusedBatchNormEx": _INFERENCE,
}
_CONV_GRADS = frozenset({"Conv2DBackpropInput", "Conv2DBackpropFilter"})
# ops computing each output element from the same-index elements of their inputs
ELEMENTWISE_OPS = frozenset({
    "Relu", "Relu6", "Neg", "Abs", "Square", "Identity", "Snapshot", "StopGradient",
    "AddV2", "Add", "Sub", "Mul", "Maximum", "Minimum", "ReluGrad", "Relu6Grad", "AddN",
})
_PERMUTED_ATTRS = ("strides", "dilations", "ksize")
# undo a rewrite that saves no transposes (the tests switch this off to convert every op)
REQUIRE_SAVING = True


def _permuted(values, perm=TO_NHWC) -> list[int]:
    return [values[i] for i in perm]


class _Rewriter:
    """One run of the pass over an item: the static shapes of the tensors at its start and
    of the transposes it adds, and its two permutation constants."""

    def __init__(self, item: GraphItem) -> None:
        self.item = item
        self.base = item.graph()  # the nodes as this pass found them
        self.preserved = item.preserved
        self.added: dict[str, tuple] = {}  # new tensor -> (dtype, shape)
        self.perms: dict[tuple, str] = {}
        self.transposes: set[str] = set()  # the Transpose nodes this pass added
        self.saved = 0  # the transposes the converted ops' NCHW kernels would have run

    # -- queries -------------------------------------------------------------------------
    def spec(self, text: str) -> tuple:
        """(dtype, static shape) of a tensor."""
        if text in self.added:
            return self.added[text]
        name, index = parse_input(text)
        out = self.base.get_operation(name).outputs[index]
        return out.dtype, out.shape

    def rank(self, text: str) -> int | None:
        return self.spec(tensor_name(*parse_input(text)))[1].rank

    def outputs(self, node: Node) -> list[str]:
        return [tensor_name(node.name, i)
                for i in range(len(self.base.get_operation(node.name).outputs))]

    def _in_base(self, name: str) -> bool:
        try:
            self.base.get_operation(name)
        except KeyError:
            return False
        return True

    def perm_of(self, node: Node) -> tuple | None:
        """A Transpose node's constant permutation, or None."""
        if node.op != "Transpose":
            return None
        source = self.item.nodes.get(parse_input(node.data_inputs[1])[0])
        if source is None or source.op != "Const":
            return None
        return tuple(int(v) for v in np.asarray(source.attrs["value"]).reshape(-1))

    def transposed_back(self, text: str) -> bool:
        """Whether ``text`` is an NHWC tensor transposed to NCHW."""
        node = self.item.nodes.get(parse_input(text)[0])
        return node is not None and self.perm_of(node) == TO_NCHW

    def convertible(self, node: Node) -> bool:
        if (node.op_def.is_stateful or not _on_host(node.device)
                or self.item.is_fed(node.name) or not self._in_base(node.name)):
            return False
        outputs = self.outputs(node)
        if node.name in self.preserved and not (
                len(outputs) == 1 and self.rank(outputs[0]) == 4
                and 0 not in LAYOUT_OPS.get(node.op, _PLAIN).keep_outputs):
            return False
        if node.op in LAYOUT_OPS:
            return self._layout_op_fits(node, LAYOUT_OPS[node.op])
        if node.op in ELEMENTWISE_OPS:
            return self._elementwise_fits(node, outputs)
        return False

    def _layout_op_fits(self, node: Node, spec: LayoutSpec) -> bool:
        if node.attrs.get("data_format") != "NCHW" or (
                spec.inference_only and node.attrs.get("is_training", True)):
            return False
        data = node.data_inputs
        if spec.shape is not None and self._constant_shape(data[spec.shape]) is None:
            return False
        if node.op in _CONV_GRADS and not self._ungrouped_or_dense(node):
            return False
        layout = [text for i, text in enumerate(data)
                  if i not in spec.keep and i != spec.shape]
        return bool(layout) and self.rank(layout[0]) == 4 and all(
            self.rank(text) in (0, 1, 4) for text in layout)

    def _ungrouped_or_dense(self, node: Node) -> bool:
        """A Conv2D gradient whose NHWC kernel is its NCHW kernel's: not a grouped one of
        one input channel per group (NHWC runs those on the depthwise kernels, NCHW not)."""
        if node.op == "Conv2DBackpropInput":
            f_shape, x_shape = self.spec(node.data_inputs[1])[1], self.spec(node.name)[1]
        else:
            f_shape, x_shape = self.spec(node.name)[1], self.spec(node.data_inputs[0])[1]
        if f_shape.rank != 4 or x_shape.rank != 4:
            return False
        in_per_group, channels = f_shape.as_list()[2], x_shape.as_list()[1]
        return in_per_group is not None and channels is not None and (
            in_per_group != 1 or channels == 1)

    def _elementwise_fits(self, node: Node, outputs: list[str]) -> bool:
        if len(outputs) != 1:
            return False
        shape = self.spec(outputs[0])[1]
        if shape.rank != 4 or not shape.is_fully_defined():
            return False
        data = node.data_inputs
        if not any(self.transposed_back(text) for text in data):
            return False
        return all(self.spec(tensor_name(*parse_input(text)))[1] == shape
                   or self.rank(text) == 0 for text in data)

    def _constant_shape(self, text: str) -> np.ndarray | None:
        node = self.item.nodes.get(parse_input(text)[0])
        if node is None or node.op != "Const" or self.item.is_fed(node.name):
            return None
        value = np.asarray(node.attrs["value"])
        return value if value.shape == (4,) else None

    # -- edits ---------------------------------------------------------------------------
    def perm(self, perm: tuple) -> str:
        if perm not in self.perms:
            name = self.item.unique_name("layout/perm_" + "".join(map(str, perm)))
            self.item.add(Node(name, "Const", [], {
                "value": np.asarray(perm, np.int32), "dtype": dtypes.int32}))
            self.perms[perm] = name
        return self.perms[perm]

    def transpose(self, text: str, perm: tuple, name: str, device: str) -> str:
        dtype, shape = self.spec(tensor_name(*parse_input(text)))
        self.item.add(Node(name, "Transpose", [text, self.perm(perm)],
                           {"T": dtype, "Tperm": dtypes.int32}, device))
        self.transposes.add(name)
        self.added[name] = (dtype, shape.__class__(_permuted(shape.as_list(), perm)))
        return name

    def convert(self, node: Node) -> None:
        item, spec = self.item, LAYOUT_OPS.get(node.op, _PLAIN)
        attrs = dict(node.attrs)
        if "data_format" in attrs:
            attrs["data_format"] = "NHWC"
        for key in _PERMUTED_ATTRS:
            if len(attrs.get(key) or ()) == 4:
                attrs[key] = _permuted(attrs[key])
        if len(attrs.get("explicit_paddings") or ()) == 8:
            pads = attrs["explicit_paddings"]
            attrs["explicit_paddings"] = [p for i in TO_NHWC for p in pads[2 * i:2 * i + 2]]
        new_name = item.unique_name(f"{node.name}/nhwc")
        inputs = []
        for i, text in enumerate(node.data_inputs):
            if i == spec.shape:
                const = item.unique_name(f"{new_name}/shape")
                value = self._constant_shape(text)
                item.add(Node(const, "Const", [], {
                    "value": np.asarray(_permuted(value), value.dtype),
                    "dtype": dtypes.as_dtype(value.dtype)}))
                inputs.append(const)
            elif i not in spec.keep and self.rank(text) == 4:
                self.saved += node.op in LAYOUT_OPS
                inputs.append(self.transpose(text, TO_NHWC,
                                             item.unique_name(f"{new_name}/in{i}"), node.device))
            else:
                inputs.append(text)
        outputs = self.outputs(node)
        item.add(Node(new_name, node.op, inputs + [f"^{c}" for c in node.control_inputs],
                      attrs, node.device))
        for index, out in enumerate(outputs):
            dtype, shape = self.spec(out)
            self.added[tensor_name(new_name, index)] = (
                dtype, shape.__class__(_permuted(shape.as_list())) if shape.rank == 4
                and index not in spec.keep_outputs else shape)
        item.remove(node.name)
        preserved = node.name in self.preserved
        for index, out in enumerate(outputs):
            source = tensor_name(new_name, index)
            if index not in spec.keep_outputs and self.rank(out) == 4:
                self.saved += node.op in LAYOUT_OPS
                name = node.name if preserved else item.unique_name(f"{new_name}/out{index}")
                source = self.transpose(source, TO_NCHW, name, node.device)
            if not preserved:
                item.forward(out, source)
        if not preserved:
            for other in item:
                if f"^{node.name}" in other.inputs:
                    other.inputs = [f"^{new_name}" if text == f"^{node.name}" else text
                                    for text in other.inputs]

    def cancel(self) -> None:
        """Readers of ``Transpose(Transpose(x, p), q)`` with ``p`` then ``q`` the identity
        read ``x``; then unread transposes are dropped."""
        item = self.item
        for node in item._ordered():
            second = self.perm_of(node)
            if second is None or item.is_fed(node.name):
                continue
            source = item.nodes.get(parse_input(node.data_inputs[0])[0])
            first = self.perm_of(source) if source is not None else None
            if (first is None or item.is_fed(source.name) or len(first) != len(second)
                    or [first[i] for i in second] != list(range(len(first)))):
                continue
            item.forward(node.name, source.data_inputs[0])
        self._drop_unread()

    def _drop_unread(self) -> None:
        """Drop the transposes and permutation constants this pass added that nothing reads."""
        item, ours = self.item, self.transposes | set(self.perms.values())
        while True:
            read = {parse_input(text)[0] for node in item for text in node.inputs}
            unread = [name for name in item.nodes
                      if name in ours and name not in read and name not in self.preserved]
            if not unread:
                return
            for name in unread:
                item.remove(name)


    def remaining(self) -> int:
        """How many of the added transposes are left."""
        return len(self.transposes & self.item.nodes.keys())


@register_pass("layout", order=42)
def convert_layout(item: GraphItem) -> GraphItem:
    """Convert, move and cancel (see the module docstring); undone when the transposes left
    are as many as the converted ops' NCHW kernels would run themselves (an NCHW training
    graph whose batch norms stay NCHW gains nothing)."""
    before = {name: replace(node, inputs=list(node.inputs), attrs=dict(node.attrs))
              for name, node in item.nodes.items()}
    state = (item.changed, item.stale)
    rewriter = _Rewriter(item)
    for node in item._ordered():
        if node.name in item.nodes and rewriter.convertible(node):
            rewriter.convert(node)
    if not rewriter.saved:
        return item
    rewriter.cancel()
    if REQUIRE_SAVING and rewriter.remaining() >= rewriter.saved:
        item.nodes = before
        item.changed, item.stale = state
    return item

