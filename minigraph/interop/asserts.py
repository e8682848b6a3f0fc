"""TF's ``Assert`` nodes at import: their string messages folded into the node.

TF's ``Assert(condition, data...)`` carries its message as string tensors among ``data``
(``Const`` nodes of dtype ``string``: Keras' ``CategoryEncoding`` range check, ``tf.debugging``
asserts). minigraph has no string tensors, so before a node list is imported the ``Const``
nodes of dtype string that only feed ``Assert`` data are removed, and each ``Assert`` keeps
its condition and its other data, its messages joined into the ``message`` attr of
minigraph's ``Assert`` (``ops.array_ops``). A string ``Const`` read by anything else is left
in place, and its import is refused as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

DT_STRING = 7  # TF's DataType enum
MAX_MESSAGE = 4096  # characters kept of an assert's message (a hostile file may hold more)


def _string_consts(nodes: Sequence[Any]) -> dict[str, str]:
    """name -> text of every Const node holding strings (its values joined by spaces)."""
    found = {}
    for node in nodes:
        if node.op == "Const" and node.attr["dtype"].type == DT_STRING:
            values = node.attr["value"].tensor.string_val
            found[node.name] = " ".join(v.decode("utf-8", "replace") for v in values)
    return found


def _data_inputs(node: Any, entries: list[tuple[str, int]]) -> list[tuple[str, tuple]] | None:
    """An Assert's data inputs (text, parsed entry), or None where they do not match its T
    attr (a malformed node: imported unchanged, so its own error is reported)."""
    data = [(text, entry) for text, entry in zip(node.input[1:], entries[1:]) if entry[1] >= 0]
    return data if len(data) == len(node.attr["T"].list.type) else None


def fold_string_messages(nodes: Sequence[Any], inputs: dict[str, list[tuple[str, int]]]
                         ) -> tuple[list[Any], dict[str, list[tuple[str, int]]]]:
    """``nodes`` (and their parsed ``inputs``) with the string constants that only feed
    Assert data folded into those Asserts' ``message`` attr (module docstring)."""
    texts = _string_consts(nodes)
    if not texts:
        return list(nodes), inputs
    foldable = set(texts)
    read_by_an_assert = set()
    for node in nodes:
        entries = inputs[node.name]
        data = _data_inputs(node, entries) if node.op == "Assert" and entries else None
        allowed = {entry[0] for _, entry in data} if data is not None else set()
        for position, (source, index) in enumerate(entries):
            if source in foldable and (source not in allowed or position == 0 or index < 0):
                foldable.discard(source)  # read by another op, as a condition, or waited on
            elif source in allowed:
                read_by_an_assert.add(source)
    foldable &= read_by_an_assert  # one nothing reads is imported (and refused) as it is
    if not foldable:
        return list(nodes), inputs
    kept, new_inputs = [], dict(inputs)
    for node in nodes:
        if node.name in foldable:
            del new_inputs[node.name]
            continue
        if node.op == "Assert" and any(s in foldable for s, _ in inputs[node.name]):
            node, new_inputs[node.name] = _folded_assert(node, inputs[node.name], texts,
                                                         foldable)
        kept.append(node)
    return kept, new_inputs


def _folded_assert(node: Any, entries: list[tuple[str, int]], texts: dict[str, str],
                   foldable: set[str]) -> tuple[Any, list[tuple[str, int]]]:
    """A copy of the Assert NodeDef without its folded string inputs: their texts joined
    into ``message``, their types dropped from ``T`` (the condition and control inputs
    kept)."""
    data = _data_inputs(node, entries)
    kept, messages = [], []
    for (text, entry), dtype in zip(data, node.attr["T"].list.type):
        if entry[0] in foldable:
            messages.append(texts[entry[0]])
        else:
            kept.append((text, entry, dtype))
    controls = [(text, entry) for text, entry in zip(node.input[1:], entries[1:])
                if entry[1] < 0]
    folded = type(node)()
    folded.CopyFrom(node)
    del folded.input[:]
    folded.input.extend([node.input[0], *(k[0] for k in kept), *(c[0] for c in controls)])
    folded.attr["T"].list.ClearField("type")
    folded.attr["T"].list.type.extend(k[2] for k in kept)
    folded.attr["message"].s = " ".join(messages)[:MAX_MESSAGE].encode("utf-8")
    return folded, [entries[0], *(k[1] for k in kept), *(c[1] for c in controls)]
