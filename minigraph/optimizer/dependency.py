"""Identity, IdentityN and NoOp removal (grappler's ``DependencyOptimizer``).

A pass-through node (``Identity``, ``IdentityN``, ``Snapshot``, ``StopGradient``,
``PreventGradient``: each output is its input's array) is dropped and its readers read its
source instead; a reader that ran after it (``^identity``) runs after the source's node.
A ``NoOp`` that only gathers control edges is dropped and its dependents depend on its
control inputs, where that adds no more edges than it removes (a NoOp joining n inputs to
m dependents stays when n*m > n+m). Nodes are kept when preserved (fetched, fed, a
target), when they have control inputs of their own (dropping them would drop that
ordering), or when the node and its source sit on different devices (the node is a copy).
"""

from __future__ import annotations

from minigraph.optimizer.item import GraphItem, Node, is_control, parse_input, tensor_name
from minigraph.optimizer.passes import register_pass

PASS_THROUGHS = frozenset({"Identity", "IdentityN", "Snapshot", "StopGradient",
                           "PreventGradient"})


def _removable(node: Node, devices: dict[str, str], preserved: set[str]) -> bool:
    if node.name in preserved or node.control_inputs:
        return False
    return all(devices[parse_input(text)[0]] == node.device for text in node.inputs)


@register_pass("identity_removal", order=20)
def remove_identities(item: GraphItem) -> GraphItem:
    preserved = item.preserved
    devices = {node.name: node.device for node in item}
    alias: dict[str, str] = {}  # tensor text -> the text readers use instead
    after: dict[str, list[str]] = {}  # removed node -> the nodes ``^node`` stands for
    for node in item:
        if node.op in PASS_THROUGHS and _removable(node, devices, preserved):
            for index, text in enumerate(node.inputs):
                source = tensor_name(*parse_input(text))
                alias[tensor_name(node.name, index)] = alias.get(source, source)
            after[node.name] = [parse_input(alias[tensor_name(node.name, i)])[0]
                                for i in range(len(node.inputs))]
            item.remove(node.name)
    consumers = item.consumers()
    for node in item:
        if node.op != "NoOp" or node.name in preserved:
            continue
        dependents = consumers.get(node.name, [])
        controls = node.control_inputs
        if len(controls) * len(dependents) > len(controls) + len(dependents):
            continue
        after[node.name] = list(controls)
        item.remove(node.name)
    if not alias and not after:
        return item
    for node in item:
        inputs = []
        for text in node.inputs:
            if is_control(text):
                inputs.extend(f"^{name}" for name in _resolve(text[1:], after))
            else:
                inputs.append(alias.get(tensor_name(*parse_input(text)), text))
        node.inputs = _dedupe_controls(inputs)
    item.touch()
    return item


def _resolve(name: str, after: dict[str, list[str]]) -> list[str]:
    """The kept nodes a control edge to ``name`` stands for (through removed nodes)."""
    if name not in after:
        return [name]
    found: list[str] = []
    for source in after[name]:
        found.extend(_resolve(source, after))
    return found


def _dedupe_controls(inputs: list[str]) -> list[str]:
    """Data inputs, then each control input once (none duplicating a data source)."""
    data = [text for text in inputs if not is_control(text)]
    sources = {parse_input(text)[0] for text in data}
    controls: list[str] = []
    for text in inputs:
        if is_control(text) and text[1:] not in sources and text not in controls:
            controls.append(text)
    return data + controls
