"""The remapper: rewrites op patterns into fused ops (grappler's ``Remapper``).

Each fusion is a function ``fuse(item: GraphItem) -> GraphItem`` registered with
:func:`register_fusion`; the remapper pass runs them in ``order``, and the ``remapper``
switch of ``OptimizerOptions`` turns them all off. A fusion keeps the contract of
``passes.py``; in particular the fused node takes the name of the pattern's last node, and
a pattern is fused only where nothing else reads its intermediates (no other consumer, not
fetched, not fed, not a control input of anything) and every node of it is on one device.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from minigraph.backends.registry import find_kernel
from minigraph.framework import dtypes
from minigraph.framework.op_def import get_op_def, output_args
from minigraph.ops.fused_ops import members
from minigraph.optimizer.item import GraphItem, Node, is_control, parse_input, tensor_name
from minigraph.optimizer.passes import GraphPass, Rewrite, RewriteRegistry, register_pass

_FUSIONS = RewriteRegistry("remapper fusion")


def register_fusion(name: str, order: int) -> Callable[[Rewrite], Rewrite]:
    """Register ``rewrite`` as the remapper's fusion ``name``, run at ``order``."""
    return _FUSIONS.register(name, order)


def registered_fusions() -> list[GraphPass]:
    return _FUSIONS.ordered()


@register_pass("remapper", order=50)
def remap(item: GraphItem) -> GraphItem:
    for fusion in registered_fusions():
        item = fusion.rewrite(item)
    return item


# ----------------------------------------------------------------------------- epilogues

# head op -> its fused op (ops/fused_ops.py)
FUSED_HEADS = {"Conv2D": "_FusedConv2D", "DepthwiseConv2dNative": "_FusedDepthwiseConv2dNative",
               "MatMul": "_FusedMatMul"}
_STAGE_RANK = {"BiasAdd": 0, "FusedBatchNorm": 1, "Add": 2, "Relu": 3, "Relu6": 3}


_CPU = re.compile(r"(?:/job:[^/]+)?(?:/replica:\d+)?(?:/task:\d+)?/?(?:device:)?cpu:0", re.I)


def _on_host(device: str) -> bool:
    """Whether ``device`` is the host CPU (the fused ops have host kernels only)."""
    return not device or _CPU.fullmatch(device.strip()) is not None


def _stage(node: Node) -> str | None:
    """The fused-op stage ``node`` can be, or None."""
    attrs = node.attrs
    if node.op in ("Relu", "Relu6"):
        return node.op
    if node.op == "BiasAdd":
        return "BiasAdd" if attrs["data_format"] == "NHWC" else None
    if node.op == "FusedBatchNormV3":
        fits = (not attrs["is_training"] and attrs["data_format"] == "NHWC"
                and attrs["T"] is dtypes.float32 and attrs["U"] is dtypes.float32)
        return "FusedBatchNorm" if fits else None
    if node.op == "AddV2":
        return "Add"
    return None


def _head_fits(node: Node) -> bool:
    if node.op not in FUSED_HEADS or node.attrs["T"] is not dtypes.float32:
        return False
    return node.op != "DepthwiseConv2dNative" or node.attrs["padding"] != "EXPLICIT"


@register_fusion("conv_epilogue", order=50)
def fuse_epilogues(item: GraphItem) -> GraphItem:
    """A float32 ``Conv2D``/``DepthwiseConv2dNative``/``MatMul`` and the chain ``[BiasAdd]
    -> [FusedBatchNormV3 (inference)] -> [AddV2] -> [Relu|Relu6]`` after it become one fused
    op (``ops/fused_ops.py``) named as the chain's last node.

    A chain grows from its head along the only use of the running value while the next
    node is a later stage, on the head's (host) device, unclaimed, reading the running value
    as its input 0 (either input of the ``AddV2``), its other outputs unused. An ``AddV2``
    whose two inputs both end fusable chains (a projection shortcut) joins the first head's
    chain in topological order; the other chain ends before it. Heads and middle nodes must
    not be preserved, fed or control inputs of anything; the last node may be (it keeps its
    name)."""
    preserved = item.preserved
    uses = item.uses()
    readers: dict[str, list[tuple[Node, int]]] = {}
    controlling: set[str] = set()
    for node in item:
        for index, text in enumerate(node.inputs):
            if is_control(text):
                controlling.add(text[1:])
            else:
                readers.setdefault(tensor_name(*parse_input(text)), []).append((node, index))
    claimed: set[str] = set()
    for head in item._ordered():
        if (not _head_fits(head) or head.name in claimed or head.name in preserved
                or head.name in controlling or item.is_fed(head.name)
                or not _on_host(head.device)):
            continue
        chain = _grow(head, item, uses, readers, controlling, preserved, claimed)
        if chain:
            claimed.update([head.name, *(node.name for node, _ in chain)])
            _replace(item, head, chain)
    return item


def _grow(head: Node, item: GraphItem, uses: dict[str, int],
          readers: dict[str, list[tuple[Node, int]]], controlling: set[str],
          preserved: set[str], claimed: set[str]) -> list[tuple[Node, str]]:
    """The chain after ``head``: (node, stage) pairs."""
    chain: list[tuple[Node, str]] = []
    key, rank, last = head.name, -1, head
    while uses.get(key, 0) == 1 and len(readers.get(key, ())) == 1:
        node, index = readers[key][0]
        stage = _stage(node)
        if (stage is None or _STAGE_RANK[stage] <= rank or node.name in claimed
                or node.device != head.device or item.is_fed(node.name)
                or (index != 0 and stage != "Add")
                or any(uses.get(tensor_name(node.name, i), 0)
                       for i in range(1, len(output_args(node.op_def, node.attrs))))):
            break
        if last is not head and (last.name in preserved or last.name in controlling):
            break  # a middle node must vanish
        chain.append((node, stage))
        key, rank, last = node.name, _STAGE_RANK[stage], node
    return chain


def _replace(item: GraphItem, head: Node, chain: list[tuple[Node, str]]) -> None:
    """Put the fused node in the place (and under the name) of the chain's last node."""
    args: list[str] = []
    running = head.name
    for node, stage in chain:
        data = node.data_inputs
        if stage == "Add":
            args.append(data[1] if tensor_name(*parse_input(data[0])) == running else data[0])
        else:
            args.extend(data[1:])
        running = node.name
    members = {head.name, *(node.name for node, _ in chain)}
    controls: list[str] = []
    for node in (head, *(node for node, _ in chain)):
        controls += [f"^{c}" for c in node.control_inputs
                     if c not in members and f"^{c}" not in controls]
    fused_type = FUSED_HEADS[head.op]
    op_def = get_op_def(fused_type)
    attrs = {name: value for name, value in head.attrs.items()
             if any(a.name == name for a in op_def.attrs)}
    stages = [stage for _, stage in chain]
    bn = [node for node, stage in chain if stage == "FusedBatchNorm"]
    attrs.update(fused_ops=stages, num_args=len(args),
                 epsilon=bn[0].attrs["epsilon"] if bn else 0.0001)
    if fused_type == "_FusedConv2D":
        attrs.update(TArgs=[dtypes.float32] * len(args), num_host_args=0)
    last = chain[-1][0]
    fused = Node(last.name, fused_type, [*head.data_inputs, *args, *controls], attrs,
                 head.device)
    for name in members - {last.name}:
        item.remove(name)
    item.nodes[last.name] = fused  # in the last node's place: the plan's order is kept


# ----------------------------------------------------------------------------- Pad into conv

# convolutions that take explicit pads, and the input they pad
_PADDABLE = ("Conv2D", "_FusedConv2D", "DepthwiseConv2dNative")


def _spatial_pads(paddings: np.ndarray, data_format: str) -> list[int] | None:
    """``explicit_paddings`` for a Pad's ``[4, 2]`` paddings when only the spatial dims are
    padded, by non-negative amounts; else None."""
    if paddings.shape != (4, 2) or np.any(paddings < 0) or np.any(paddings > 2**31 - 1):
        return None
    channel = 3 if data_format == "NHWC" else 1
    if np.any(paddings[0]) or np.any(paddings[channel]):
        return None
    return [int(v) for v in paddings.reshape(-1)]


def _native_takes(node: Node, attrs: dict, inputs: list[str], item: GraphItem) -> bool:
    """Whether the native backend runs the convolution of ``node`` with ``attrs`` (explicit
    pads) on a native kernel, as it ran the padded one: otherwise a native convolution would
    become a numpy one, another summation and slower."""
    specs = [(item.output(text).dtype, item.output(text).shape) for text in inputs]
    probe_attrs = {**attrs, "fused_ops": [], "num_args": 0, "TArgs": [], "num_host_args": 0}
    [conv] = members("_FusedConv2D", node.name, probe_attrs, specs)
    kernel = find_kernel(conv, "native")
    return kernel is not None and kernel.backend == "native"


@register_fusion("pad_into_convolution", order=60)
def fold_pads(item: GraphItem) -> GraphItem:
    """``Pad`` (zeros, constant non-negative spatial pads) feeding a VALID convolution's
    input becomes that convolution's explicit padding (TF's remapper does the same), where
    that is bit for bit the padded result: a ``Conv2D``/``_FusedConv2D`` whose native kernel
    takes explicit pads (the padded zeros then enter the same sums), a
    ``DepthwiseConv2dNative`` whose filter is a finite constant (its kernels skip the taps
    outside the input; a padded tap adds ``0 * w``, which changes no sum unless ``w`` is
    infinite or NaN). The Pad stays where anything else reads it."""
    preserved = item.preserved
    uses = item.uses()
    controlling = {name for node in item for name in node.control_inputs}
    for node in list(item):
        if (node.op not in _PADDABLE or node.attrs["padding"] != "VALID"
                or node.name not in item.nodes):
            continue
        pad = item.nodes.get(parse_input(node.data_inputs[0])[0])
        if (pad is None or pad.op != "Pad" or parse_input(node.data_inputs[0])[1] != 0
                or pad.name in preserved or pad.name in controlling or pad.control_inputs
                or uses.get(pad.name, 0) != 1 or pad.device != node.device):
            continue
        paddings = item.nodes.get(parse_input(pad.data_inputs[1])[0])
        if (paddings is None or paddings.op != "Const" or item.is_fed(paddings.name)
                or parse_input(pad.data_inputs[1])[1] != 0):
            continue
        pads = _spatial_pads(np.asarray(paddings.attrs["value"]), node.attrs["data_format"])
        if pads is None:
            continue
        attrs = {**node.attrs, "padding": "EXPLICIT", "explicit_paddings": pads}
        if node.op == "DepthwiseConv2dNative":
            source = item.nodes.get(parse_input(node.data_inputs[1])[0])
            if (source is None or source.op != "Const" or item.is_fed(source.name)
                    or not np.all(np.isfinite(source.attrs["value"]))):
                continue
        elif not _native_takes(node, attrs, [pad.data_inputs[0], node.data_inputs[1]], item):
            continue
        node.attrs, node.origin = attrs, None
        node.inputs[0] = pad.data_inputs[0]
        item.remove(pad.name)
    return item
