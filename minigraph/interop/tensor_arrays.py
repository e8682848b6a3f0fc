"""TF 1's ``TensorArrayV3`` ops at import: rewritten to the forms ``loops.py`` lifts.

A TF 1 ``tf.while_loop`` (``tf.compat.v1``, ``dynamic_rnn``) keeps its tensor arrays as a
*handle* (a resource) and a *flow* (a float scalar that orders the writes):

* **unstacked** (read in the loop): ``TensorArrayV3(n)``, ``TensorArrayScatterV3(handle,
  range(0, n), t, flow)`` before the loop, ``TensorArrayReadV3(handle, i, flow)`` in it,
  the handle and the flow entering as loop invariants. The reads become ``GatherV2(t, i,
  0)``, ``t`` entering where the handle did;
* **written** (stacked after the loop): ``TensorArrayV3(n)``, its flow a loop variable,
  ``TensorArrayWriteV3(handle, i, value, flow)`` in the loop giving the next flow,
  ``TensorArrayGatherV3(handle, range(0, n), flow)`` after it. The array becomes
  ``TensorListReserve(-1, n)`` (its flow output the list), the write ``TensorListSetItem``
  (growing the list when the array has ``dynamic_size``) and the gather ``TensorListStack``:
  the pattern of TF 2's loops.

The handle's ``Enter`` nodes that nothing reads any more are dropped. Any other use of a
``TensorArrayV3`` (``TensorArraySizeV3``, ``TensorArrayConcatV3``, a scatter or gather at
other indices than ``range(0, n)``, an array both read and written) is refused, naming the
node.
"""

from __future__ import annotations

from typing import Any

from minigraph.framework.errors import UnimplementedError
from minigraph.framework.names import shown
from minigraph.interop.node_lists import (
    Entry,
    check_arity,
    consumers,
    copied,
    data,
    node_def,
)

_DT_INT32 = 3
# TF's OpDef: each op's data inputs (Range: read for its constants)
_ARITY = {"TensorArrayV3": 1, "TensorArrayScatterV3": 4, "TensorArrayReadV3": 3,
          "TensorArrayWriteV3": 4, "TensorArrayGatherV3": 3, "TensorArraySizeV3": 2,
          "Range": 3}
_OPS = tuple(op for op in _ARITY if op.startswith("TensorArray"))


def _unsupported(name: str, message: str) -> UnimplementedError:
    return UnimplementedError(f"TensorArrayV3 '{shown(name)}': {message}")


def _int32_const(name: str, values: list[int], device: str, scalar: bool = False) -> Any:
    const = node_def(name=name, op="Const", device=device)
    const.attr["dtype"].type = _DT_INT32
    tensor = const.attr["value"].tensor
    tensor.dtype = _DT_INT32
    tensor.tensor_shape.SetInParent()
    if not scalar:
        tensor.tensor_shape.dim.add().size = len(values)
    tensor.int_val.extend(values)
    return const


class _Rewrite:
    """The node list being rewritten: replaced nodes, new ones, dropped ones."""

    def __init__(self, nodes: list[Any], inputs: dict[str, list[Entry]]) -> None:
        self.nodes, self.inputs = nodes, dict(inputs)
        self.by_name = {node.name: node for node in nodes}
        self.readers = consumers(nodes, inputs)
        self.replaced: dict[str, Any] = {}
        self.added: list[Any] = []
        self.dropped: set[str] = set()

    def op(self, name: str) -> str:
        node = self.by_name.get(name)
        return node.op if node is not None else ""

    def users(self, source: str, index: int) -> list[str]:
        """The nodes reading ``source:index``, through constant ``Enter`` nodes (which are
        dropped once the rewrite leaves them unread); each is rewritten once."""
        found, stack, seen = [], [(source, index)], {source}
        while stack:
            name, wanted = stack.pop()
            for reader, read in self.readers.get(name, ()):
                if read != wanted or reader in seen:
                    continue
                seen.add(reader)
                node = self.by_name[reader]
                if node.op == "Enter" and node.attr["is_constant"].b:
                    self.dropped.add(reader)
                    stack.append((reader, 0))
                elif reader in self.replaced:
                    raise _unsupported(source, f"'{shown(reader)}' uses two tensor arrays")
                else:
                    found.append(reader)
        return found

    def is_full_range(self, entry: Entry) -> bool:
        """Whether ``entry`` is ``Range(0, n, 1)`` (of constants 0 and 1)."""
        node = self.by_name.get(entry[0])
        if node is None or node.op != "Range" or entry[1] != 0:
            return False
        start, _, delta = (self.by_name.get(s) for s, _ in data(self.inputs, node.name))
        return all(c is not None and c.op == "Const" and
                   list(c.attr["value"].tensor.int_val) == [v]
                   for c, v in ((start, 0), (delta, 1)))

    def replace(self, node: Any, op: str, entries: list[Entry], **types: int) -> Any:
        """``node`` as an ``op`` node of the same name reading ``entries`` (plus its
        control inputs), with the type attrs ``types``."""
        new = node_def(name=node.name, op=op, device=node.device)
        for key, value in types.items():
            new.attr[key].type = value
        self.replaced[node.name] = new
        self.inputs[node.name] = entries + [e for e in self.inputs[node.name] if e[1] < 0]
        return new


def as_tensor_lists(nodes: list[Any], inputs: dict[str, list[Entry]]
                    ) -> tuple[list[Any], dict[str, list[Entry]]]:
    """``nodes`` with TF 1's tensor arrays in TF 2's forms (see the module docstring)."""
    if not any(node.op == "TensorArrayV3" for node in nodes):
        stray = next((n for n in nodes if n.op in _OPS[1:]), None)
        if stray is not None:
            raise _unsupported(stray.name, f"{stray.op} of no TensorArrayV3")
        return nodes, inputs
    check_arity(nodes, inputs, _ARITY)
    rewrite = _Rewrite(nodes, inputs)
    for node in nodes:
        if node.op == "TensorArrayV3":
            _rewrite_array(rewrite, node)
    kept = [rewrite.replaced.get(node.name, node) for node in nodes
            if node.name not in rewrite.dropped]
    kept += rewrite.added
    new_inputs = {}
    for node in kept:
        entries = rewrite.inputs.get(node.name, [])
        lost = next((s for s, i in entries if i >= 0 and s in rewrite.dropped), None)
        if lost is not None:
            raise _unsupported(lost, f"node '{shown(node.name)}' reads it")
        # a control edge on a dropped node (an array's handle) orders nothing
        new_inputs[node.name] = [e for e in entries if e[0] not in rewrite.dropped]
    return kept, new_inputs


def _rewrite_array(rewrite: _Rewrite, array: Any) -> None:
    """One ``TensorArrayV3``: unstacked (a scatter before the loop) or written."""
    dtype = array.attr["dtype"].type
    handle_users = rewrite.users(array.name, 0)
    flow_users = [r for r, i in rewrite.readers.get(array.name, ()) if i == 1]
    scatters = [u for u in handle_users if rewrite.op(u) == "TensorArrayScatterV3"]
    if scatters:
        _unstacked(rewrite, array, dtype, handle_users, scatters, flow_users)
    else:
        _written(rewrite, array, dtype, handle_users)


def _unstacked(rewrite: _Rewrite, array: Any, dtype: int, handle_users: list[str],
               scatters: list[str], flow_users: list[str]) -> None:
    """Reads of an array a scatter of ``range(0, n)`` filled: ``GatherV2`` of the tensor."""
    if len(scatters) != 1 or flow_users != scatters:
        raise _unsupported(array.name, "an unstacked array is filled by one "
                                       "TensorArrayScatterV3, which reads its flow")
    scatter = scatters[0]
    _, indices, value, _ = data(rewrite.inputs, scatter)
    if not rewrite.is_full_range(indices):
        raise _unsupported(array.name, f"'{shown(scatter)}' scatters at other indices than "
                                       f"range(0, n)")
    flow_users = rewrite.users(scatter, 0)
    for user in handle_users:
        if user == scatter:
            continue
        if rewrite.op(user) != "TensorArrayReadV3" or user not in flow_users:
            raise _unsupported(array.name, f"'{shown(user)}', a {rewrite.op(user)}, uses the "
                                           f"unstacked array; minigraph imports its reads")
        handle, index, _ = data(rewrite.inputs, user)
        axis = _int32_const(f"{user}/lifted_axis", [0], array.device, scalar=True)
        rewrite.added.append(axis)
        # the axis waits for the index, which puts it in the read's loop frame
        rewrite.inputs[axis.name] = [(index[0], -1)]
        rewrite.replace(rewrite.by_name[user], "GatherV2",
                        [_value_through(rewrite, handle, value, dtype), index,
                         (axis.name, 0)], Tparams=dtype, Tindices=_DT_INT32,
                        Taxis=_DT_INT32)
    rewrite.dropped.update({array.name, scatter})


def _only_sizes_a_gather(rewrite: _Rewrite, size: str, gathers: set[str]) -> bool:
    """Whether ``size`` (a ``TensorArraySizeV3``) only bounds ``Range(0, size, 1)`` nodes
    that only give the indices of ``gathers`` (``TensorArray.stack()`` of a dynamic-size
    array); if so they are dropped."""
    ranges = [r for r, i in rewrite.readers.get(size, ()) if i >= 0]
    if not ranges or any(rewrite.op(r) != "Range" or not rewrite.is_full_range((r, 0))
                         or {g for g, _ in rewrite.readers.get(r, ())} - gathers
                         for r in ranges):
        return False
    rewrite.dropped.update([size, *ranges])
    return True


def _value_through(rewrite: _Rewrite, handle: Entry, value: Entry, dtype: int) -> Entry:
    """What a read reads in place of the handle ``handle``: ``value``, brought through
    the same constant Enter nodes (kept, now carrying the tensor)."""
    if rewrite.op(handle[0]) != "Enter":
        return value
    enter = copied(rewrite.by_name[handle[0]])
    enter.attr["T"].type = dtype
    outer = _value_through(rewrite, data(rewrite.inputs, enter.name)[0], value, dtype)
    rewrite.replaced[enter.name] = enter
    rewrite.inputs[enter.name] = [outer] + [e for e in rewrite.inputs[enter.name] if e[1] < 0]
    rewrite.dropped.discard(enter.name)
    return enter.name, 0


def _written(rewrite: _Rewrite, array: Any, dtype: int, handle_users: list[str]) -> None:
    """An array written in a loop and gathered after it: a reserved TensorList."""
    size = data(rewrite.inputs, array.name)[0]
    shape = _int32_const(f"{array.name}/lifted_element_shape", [-1], array.device,
                         scalar=True)
    rewrite.added.append(shape)
    rewrite.replace(array, "TensorListReserve", [(shape.name, 0), size],
                    element_dtype=dtype, shape_type=_DT_INT32)
    for name, entries in list(rewrite.inputs.items()):  # the flow is the list
        if any(s == array.name and i == 1 for s, i in entries):
            rewrite.inputs[name] = [(s, 0) if s == array.name and i == 1 else (s, i)
                                    for s, i in entries]
    gathers = {u for u in handle_users if rewrite.op(u) == "TensorArrayGatherV3"}
    for user in handle_users:
        op = rewrite.op(user)
        node = rewrite.by_name[user]
        if op == "TensorArraySizeV3" and _only_sizes_a_gather(rewrite, user, gathers):
            continue  # dropped with the gather's indices: the stack takes every item
        if op == "TensorArrayWriteV3":
            _, index, value, flow = data(rewrite.inputs, user)
            written = rewrite.replace(node, "TensorListSetItem", [flow, index, value],
                                      element_dtype=dtype)
            written.attr["resize_if_index_out_of_bounds"].b = array.attr["dynamic_size"].b
        elif op == "TensorArrayGatherV3":
            _, indices, flow = data(rewrite.inputs, user)
            if not rewrite.is_full_range(indices):
                raise _unsupported(array.name, f"'{shown(user)}' gathers other indices than "
                                               f"range(0, n)")
            dims = [d.size for d in node.attr["element_shape"].shape.dim]
            known = not node.attr["element_shape"].shape.unknown_rank
            element = _int32_const(f"{user}/lifted_element_shape", dims if known else [-1],
                                   node.device, scalar=not known)
            rewrite.added.append(element)
            stack = rewrite.replace(node, "TensorListStack", [flow, (element.name, 0)],
                                    element_dtype=dtype)
            stack.attr["num_elements"].i = -1
        else:
            raise _unsupported(array.name, f"'{shown(user)}', a {op}, uses the array; "
                                           f"minigraph imports TensorArrayWriteV3 in a loop "
                                           f"and TensorArrayGatherV3 after it")
