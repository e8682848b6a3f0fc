"""TensorFlow's lowered ``while`` loops at import: each frame lifted into one ``WhileLoop``.

A frozen ``tf.while_loop`` (Keras' recurrent layers) is a *frame*: per loop variable ``i``

    Enter_i(initial) -> Merge_i(Enter_i, NextIteration_i) -> Switch_i(Merge_i, LoopCond)
    Switch_i:0 -> Exit_i (the final value)      Switch_i:1 -> body -> NextIteration_i

where the condition reads the ``Merge`` outputs and feeds ``LoopCond``; ``Enter`` nodes with
``is_constant`` bring loop invariants in. :func:`lift` finds each outermost frame (the
``Enter`` nodes of one ``frame_name``), takes the nodes the condition and the body need
(walking inputs back from ``LoopCond`` and from the ``NextIteration`` nodes, to the
``Merge``/``Switch``/invariant ``Enter`` nodes, which become the subgraphs' Placeholders),
and replaces the frame by a :class:`Loop`, which the importer builds as a ``WhileLoop``
(``ops/control_flow_ops.py``); what read an ``Exit`` reads the loop's output. Nested frames
lie inside a body and are lifted when the body is imported.

Tensor arrays are ``TensorList`` ops on ``variant`` tensors, which minigraph lacks; the two
uses TensorFlow's loops make of them are rewritten:

* a list made by ``TensorListFromTensor(t)`` and only read in the loop
  (``TensorListGetItem(list, i)``) is the loop variable ``t``, read by ``GatherV2(t, i, 0)``
  (an item read before the loop, ``tf.foldl``'s first, is ``GatherV2`` too);
* a list made by ``TensorListReserve(shape, n)``, written once an iteration by
  ``TensorListSetItem(list, i, item)`` and stacked after the loop (``TensorListStack``) is
  one of the loop's written lists: the body returns ``(i, item)``, the loop the stack (the
  items written before the loop, ``tf.scan``'s first, are inputs of the loop).

TF 1's ``TensorArrayV3`` ops are first rewritten to these forms (``tensor_arrays.py``).
Anything else (another ``TensorList`` op, a frame without one ``LoopCond``, a node reading
into a frame without an ``Enter``) is refused with an error naming the node.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from minigraph.framework.errors import InvalidArgumentError, UnimplementedError
from minigraph.framework.names import shown
from minigraph.interop import tensor_arrays
from minigraph.interop.node_lists import (
    Entry,
    check_arity,
    consumers,
    copied,
    data,
    node_def,
    relay,
    relay_entry,
    without_inert_controls,
)

FRAME_OPS = ("Enter", "Merge", "Switch", "NextIteration", "LoopCond", "Exit")
LIST_OPS = ("TensorListFromTensor", "TensorListReserve", "TensorListGetItem",
            "TensorListSetItem", "TensorListStack")
# TF's ops whose output (0) is a list: a loop variable made by one is a list
LIST_MAKERS = ("TensorListFromTensor", "TensorListReserve", "EmptyTensorList",
               "TensorListPushBack", "TensorListPushBackBatch", "TensorListPopBack",
               "TensorListSetItem", "TensorListScatter", "TensorListScatterV2",
               "TensorListScatterIntoExistingList", "TensorListSplit", "TensorListResize",
               "TensorListConcatLists")
_DT_INT32, _DT_VARIANT = 3, 21
# how many data inputs TF's OpDef gives each (Merge: its attr N, ``node_lists.check_arity``)
_ARITY = {"Enter": 1, "Exit": 1, "NextIteration": 1, "LoopCond": 1, "Switch": 2, "_SwitchN": 2,
          "TensorListFromTensor": 2, "TensorListReserve": 2, "TensorListGetItem": 3,
          "TensorListSetItem": 3, "TensorListStack": 2}
_OUTSIDE = node_def()
# loops and conditionals nested deeper than this are refused (the importer's own bound on
# nested subgraphs is the same)
MAX_NESTING = 64


@dataclass
class Loop:
    """A lifted frame, standing in the node list for its nodes (the importer builds it).

    ``initial``: the outer tensors the loop variables start from, then the written lists'
    reserved lengths and element shapes, the indices and items written before the loop
    (``prewritten``: into which list each), then control inputs; ``placeholders``: the
    subgraphs' input node names, one per loop variable; ``cond``/``body``: each subgraph's
    nodes, parsed inputs and outputs (``body_targets``: nodes the body runs for their
    effects); ``list_types``: the written lists' item dtype enums; ``growable``: the lists a
    write past the end grows."""

    name: str
    frame: str
    device: str
    variables: int
    initial: list[Entry]
    placeholders: list[str]
    cond: tuple[list[Any], dict[str, list[Entry]], Entry]
    body: tuple[list[Any], dict[str, list[Entry]], list[Entry]]
    body_targets: list[str]
    list_types: list[int] = field(default_factory=list)
    growable: list[int] = field(default_factory=list)
    prewritten: list[int] = field(default_factory=list)
    op: str = "WhileLoop"  # what the importer builds (a node list holds Loops and NodeDefs)


def _frame_error(frame: str, message: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"while loop '{shown(frame)}': {message}")


class _Frame:
    """One frame's nodes, found from its ``Enter`` nodes (see the module docstring)."""

    def __init__(self, name: str, enters: list[Any], by_name: dict[str, Any],
                 inputs: dict[str, list[Entry]], consumers: dict[str, list[tuple[str, int]]]
                 ) -> None:
        self.name, self.enters, self.by_name = name, enters, by_name
        self.inputs, self.consumers = inputs, consumers
        self.members: set[str] = set()

    def find_members(self, budget: list[int]) -> None:
        """Every node reached from the frame's ``Enter`` nodes, stopping after its
        ``Exit`` nodes (whose readers are outside); each node reached spends one unit of
        ``budget[0]``, shared by the frames of one node list."""
        seen = {enter.name for enter in self.enters}
        stack = list(seen)
        while stack:
            name = stack.pop()
            budget[0] -= 1
            if budget[0] < 0:
                raise _frame_error(self.name, f"while loops nested more than "
                                              f"{MAX_NESTING} deep, or frames that overlap")
            if self.by_name[name].op == "Exit" and self.is_own(name):
                continue
            for consumer, _ in self.consumers.get(name, ()):
                if consumer not in seen:
                    seen.add(consumer)
                    stack.append(consumer)
        self.members = seen

    def is_own(self, name: str) -> bool:
        """Whether the frame node ``name`` (a Merge, Switch or Exit) is this frame's own,
        not a nested frame's: its chain leads back to one of this frame's Enters."""
        node = self.by_name[name]
        for _ in range(3):  # Exit -> Switch -> Merge -> Enter, at most
            if node.op not in ("Exit", "Switch", "Merge"):
                break
            sources = data(self.inputs, node.name)
            if not sources or sources[0][0] not in self.by_name:
                return False
            node = self.by_name[sources[0][0]]
        return node.op == "Enter" and node.attr["frame_name"].s.decode("utf-8",
                                                                       "replace") == self.name


def lift(nodes: Sequence[Any], inputs: dict[str, list[Entry]],
         taken: Callable[[str], bool]) -> tuple[list[Any], dict[str, list[Entry]]]:
    """``nodes`` with each outermost frame replaced by a :class:`Loop`; ``inputs`` (parsed,
    per node) rewritten to match; ``taken(name)``: whether a node name is in use.

    Placeholders of dtype ``variant`` that nothing reads are dropped: TF's freezing leaves
    them (``unused_control_flow_input_N``) where a lowered loop's inputs were."""
    readers = consumers(nodes, inputs)
    nodes = [node for node in nodes
             if not (node.op == "Placeholder" and node.name not in readers
                     and node.attr["dtype"].type == _DT_VARIANT)]
    nodes, inputs = tensor_arrays.as_tensor_lists(nodes, inputs)
    check_arity(nodes, inputs, _ARITY)
    nodes, inputs = _items_read_outside_loops(nodes, inputs)
    readers = consumers(nodes, inputs)
    enters: dict[str, list[Any]] = {}
    for node in nodes:
        if node.op == "Enter":
            frame = node.attr["frame_name"].s.decode("utf-8", "replace")
            enters.setdefault(frame, []).append(node)
    if not enters:  # Switch and Merge nodes outside loops are tf.cond's (``conds.py``)
        odd = next((node for node in nodes if node.op in ("Exit", "NextIteration",
                                                           "LoopCond")), None)
        if odd is not None:
            raise InvalidArgumentError(f"Node '{shown(odd.name)}' is a {odd.op} outside any "
                                       f"while loop (no Enter node)")
        return nodes, inputs
    by_name = {node.name: node for node in nodes}
    outermost = _outermost([_Frame(name, group, by_name, inputs, readers)
                            for name, group in enters.items()], len(nodes))
    owner: dict[str, str] = {}  # removed node -> its frame
    renamed: dict[str, str] = {}  # removed node -> what a control edge on it waits for
    loops, relays = [], []
    for frame in outermost:
        loop, gone, outputs, relayed = _Lifter(frame, taken).lift()
        loops.append(loop)
        owner.update(dict.fromkeys(gone, frame.name))
        renamed.update(outputs)
        relays += relayed
    kept = [node for node in nodes if node.name not in owner]
    for identity in relays:  # an Exit, a TensorListStack: still there, reading the loop
        del owner[identity.name]
    new_inputs = {}
    for node in kept:
        entries = []
        for source, index in inputs[node.name]:
            if source in owner:
                if index >= 0 or source not in renamed:
                    raise _frame_error(owner[source], f"node '{shown(node.name)}' reads "
                                                      f"'{shown(source)}' of the loop without "
                                                      f"an Exit")
                source = renamed[source]
            entries.append((source, index))
        new_inputs[node.name] = entries
    for loop in loops:
        inside = next((source for source, _ in loop.initial if source in owner), None)
        if inside is not None:
            raise _frame_error(loop.frame, f"it starts from '{shown(inside)}', a node of a "
                                           f"loop (an Enter must read from outside its "
                                           f"frame)")
        new_inputs[loop.name] = list(loop.initial)
    for identity in relays:
        new_inputs[identity.name] = [relay_entry(identity)]
    return kept + loops + relays, new_inputs


def _outermost(frames: list[_Frame], size: int) -> list[_Frame]:
    """The frames no other frame holds, their members found. A frame whose first Enter
    lies in a frame found before it is nested (its members are found when the body that
    holds it is imported); one found before the frame that holds it is dropped then. The
    work is bounded: every node may be reached once per level of nesting."""
    budget = [(MAX_NESTING + 1) * (size + 1)]
    found: list[_Frame] = []
    covered: dict[str, int] = {}  # node -> how many found frames hold it
    for frame in frames:
        if frame.enters[0].name in covered:
            continue
        frame.find_members(budget)
        found.append(frame)
        for name in frame.members:
            covered[name] = covered.get(name, 0) + 1
    return [f for f in found if covered[f.enters[0].name] == 1]


class _Lifter:
    """Lifts one frame: its loop variables, condition and body (:meth:`lift`)."""

    def __init__(self, frame: _Frame, taken: Callable[[str], bool]) -> None:
        self.frame, self.taken = frame, taken
        self.by_name, self.inputs, self.consumers = frame.by_name, frame.inputs, frame.consumers
        self.written_switches: set[str] = set()  # the Switch nodes of written lists

    def error(self, message: str) -> InvalidArgumentError:
        return _frame_error(self.frame.name, message)

    def unsupported(self, message: str) -> UnimplementedError:
        return UnimplementedError(f"while loop '{shown(self.frame.name)}': {message}")

    def node(self, name: str) -> Any:
        """The NodeDef ``name``; a node outside the list (a Placeholder of the subgraph
        being imported) reads as one of op type ``""``."""
        return self.by_name.get(name) or _OUTSIDE

    def only_reader(self, name: str, op: str) -> str:
        """The one node reading data from ``name``, which must be a ``op``."""
        readers = [r for r in self.consumers.get(name, []) if r[1] >= 0]
        if len(readers) != 1 or self.node(readers[0][0]).op != op:
            raise self.error(f"{self.node(name).op} '{shown(name)}' must be read by exactly "
                             f"one {op}, got {[shown(r) for r, _ in readers][:4]}")
        return readers[0][0]

    def data_readers(self, name: str | None) -> list[str]:
        """The nodes reading data from ``name`` (none for None)."""
        return [r for r, i in self.consumers.get(name or "", ()) if i >= 0]

    def resolve(self, entry: Entry) -> Entry:
        """The tensor an Identity chain ending at ``entry`` passes on."""
        for _ in range(len(self.by_name)):
            if self.node(entry[0]).op != "Identity" or not data(self.inputs, entry[0]):
                break
            entry = data(self.inputs, entry[0])[0]
        return entry

    def is_own(self, name: str) -> bool:
        """Whether the frame node ``name`` is this frame's (not a nested frame's)."""
        node = self.node(name)
        if node.op in ("Merge", "Switch", "Exit"):
            return self.frame.is_own(name)
        if node.op == "Enter":
            return node.attr["frame_name"].s.decode("utf-8", "replace") == self.frame.name
        follower = "Merge" if node.op == "NextIteration" else "Switch"
        return any(self.node(c).op == follower and self.frame.is_own(c)
                   for c, _ in self.consumers.get(name, ()))

    # ------------------------------------------------------------------ the structure

    def variables(self) -> list[dict[str, Any]]:
        """One record per loop variable (non-constant Enter): its Enter, Merge, Switch,
        NextIteration, Exit (or None) and kind (``tensor``, ``read`` or ``written``)."""
        found = []
        for enter in self.frame.enters:
            if enter.attr["is_constant"].b:
                continue
            merge = self.only_reader(enter.name, "Merge")
            merge_inputs = data(self.inputs, merge)
            if len(merge_inputs) != 2 or merge_inputs[0][0] != enter.name or \
                    self.node(merge_inputs[1][0]).op != "NextIteration":
                raise self.error(f"Merge '{shown(merge)}' must read its Enter, then a "
                                 f"NextIteration")
            readers = self.consumers.get(merge, ())
            switches = [c for c, i in readers if i >= 0 and self.node(c).op == "Switch"]
            if len(switches) != 1:
                raise self.error(f"Merge '{shown(merge)}' must feed exactly one Switch")
            switch = switches[0]
            out0 = [c for c, i in self.consumers.get(switch, ()) if i == 0]
            if len(out0) > 1 or any(self.node(c).op != "Exit" for c in out0):
                raise self.error(f"Switch '{shown(switch)}': its output 0 may only feed one "
                                 f"Exit")
            found.append({"enter": enter, "merge": merge, "switch": switch,
                          "next": merge_inputs[1][0], "exit": out0[0] if out0 else None,
                          "kind": self.kind(enter)})
        if not found:
            raise self.error("it has no loop variable (every Enter is constant)")
        return found

    def kind(self, enter: Any) -> str:
        """``tensor``, ``read`` (a TensorListFromTensor list) or ``written`` (Reserve, maybe
        written before the loop: :meth:`reserved`)."""
        source = data(self.inputs, enter.name)[0][0]
        op = self.node(source).op
        if op == "TensorListFromTensor":
            return "read"
        if op == "TensorListReserve" or op == "TensorListSetItem" and \
                self.node(self.reserved(source)[0]).op == "TensorListReserve":
            return "written"
        if op in LIST_MAKERS:
            raise self.unsupported(f"a loop variable comes from '{shown(source)}', a {op}: "
                                   f"minigraph imports lists made by TensorListFromTensor "
                                   f"(read in the loop) or TensorListReserve (written)")
        return "tensor"

    def reserved(self, source: str) -> tuple[str, list[str]]:
        """Where the list ``source`` comes from through the ``TensorListSetItem`` nodes
        that write it before the loop (``tf.scan`` writes its first item so), and those
        nodes, first write first; each has one reader, the next write or the Enter."""
        writes: list[str] = []
        for _ in range(len(self.by_name)):
            if self.node(source).op != "TensorListSetItem":
                break
            writes.append(source)
            readers = self.data_readers(source)
            if len(readers) != 1:
                raise self.unsupported(f"'{shown(source)}', a TensorListSetItem before the "
                                       f"loop, has {len(readers)} readers; one (the loop or "
                                       f"the next write) is imported")
            source = data(self.inputs, source)[0][0]
        return source, writes[::-1]

    def loop_cond(self, variables: list[dict[str, Any]]) -> str:
        """The frame's one LoopCond, which every Switch reads."""
        preds = set()
        for variable in variables:
            switch_inputs = data(self.inputs, variable["switch"])
            preds.add(switch_inputs[1][0] if len(switch_inputs) == 2 else "")
        pred = preds.pop() if len(preds) == 1 else ""
        if not pred or self.node(pred).op != "LoopCond" or not data(self.inputs, pred):
            raise self.error("its Switch nodes must all be controlled by one LoopCond")
        return pred

    # ------------------------------------------------------------------ lifting

    def lift(self) -> tuple[Loop, set[str], dict[str, str], list[Any]]:
        """The Loop, the nodes it replaces, what a control edge on one of them waits for
        instead (a list maker: what it was made from; a list's Exit: the loop), and the
        relays: an Identity of the loop's output named like each Exit of a tensor and each
        TensorListStack, so that their readers, and fetches by name, read the loop."""
        frame = self.frame
        variables = self.variables()
        pred = self.loop_cond(variables)
        name = frame.name
        while self.taken(name) or name in self.by_name:
            name += "_lifted"
        kept = [v for v in variables if v["kind"] != "written"]
        written = [v for v in variables if v["kind"] == "written"]
        self.written_switches = {v["switch"] for v in written}
        invariants = [e for e in frame.enters if e.attr["is_constant"].b]
        count = len(kept) + len(invariants)
        placeholders = []
        for i in range(count):
            text = f"{frame.name}/loop_var_{i}"
            while text in self.by_name:
                text += "_"
            placeholders.append(text)
        removed = set(frame.members)
        renamed: dict[str, str] = {}
        relays: list[Any] = []
        cond_map: dict[Entry, str] = {}  # what the subgraphs read instead of frame nodes
        body_map: dict[Entry, str] = {}
        initial: list[Entry] = []
        read_lists: dict[str, int] = {}  # placeholder -> item dtype enum
        for position, variable in enumerate(kept):
            cond_map[(variable["merge"], 0)] = placeholders[position]
            body_map[(variable["switch"], 1)] = placeholders[position]
            source = data(self.inputs, variable["enter"].name)[0]
            if variable["kind"] == "read":
                self.only_reader(source[0], "Enter")
                removed.add(source[0])
                renamed[source[0]] = data(self.inputs, source[0])[0][0]
                read_lists[placeholders[position]] = self.node(source[0]).attr["element_dtype"].type
                readers = self.data_readers(variable["exit"])
                if readers:
                    raise self.unsupported(f"the list read in the loop is used after it, by "
                                           f"'{shown(readers[0])}'")
                source = data(self.inputs, source[0])[0]
            initial.append(source)
            if variable["exit"] and variable["kind"] == "tensor":
                relays.append(relay(self.node(variable["exit"]), name, position,
                                        self.node(variable["exit"]).attr["T"].type))
        for offset, enter in enumerate(invariants):
            cond_map[(enter.name, 0)] = body_map[(enter.name, 0)] = placeholders[len(kept)
                                                                                + offset]
            initial.append(data(self.inputs, enter.name)[0])
        body_outputs = [data(self.inputs, v["next"])[0] for v in kept]
        body_outputs += [(p, 0) for p in placeholders[len(kept):]]
        list_types, growable, lengths, shapes = [], [], [], []
        prewrites: list[tuple[int, Entry, Entry]] = []  # (list, index, item) before the loop
        for k, variable in enumerate(written):
            reserve, before = self.reserved(data(self.inputs, variable["enter"].name)[0][0])
            self.only_reader(reserve, "TensorListSetItem" if before else "Enter")
            removed.add(reserve)
            removed.update(before)
            renamed.update((write, data(self.inputs, write)[2][0]) for write in before)
            prewrites += [(k, *data(self.inputs, write)[1:3]) for write in before]
            renamed[reserve] = data(self.inputs, reserve)[1][0]
            lengths.append(data(self.inputs, reserve)[1])
            stacks = [r for r in self.data_readers(variable["exit"])
                      if self.node(r).op == "TensorListStack"]
            # the shape a list nobody wrote stacks to: TensorListStack's, else the reserved
            shapes.append(data(self.inputs, stacks[0] if stacks else reserve)[1 if stacks
                                                                               else 0])
            list_types.append(self.node(reserve).attr["element_dtype"].type)
            body_outputs += self.write(variable, reserve)
            set_item = self.node(self.resolve(data(self.inputs, variable["next"])[0])[0])
            if set_item.attr["resize_if_index_out_of_bounds"].b:
                growable.append(k)
            for reader in self.data_readers(variable["exit"]):
                if self.node(reader).op != "TensorListStack":
                    raise self.unsupported(f"the list written in the loop is read after it by "
                                           f"'{shown(reader)}', a {self.node(reader).op}; "
                                           f"minigraph reads it with TensorListStack only")
                removed.add(reader)
                relays.append(relay(self.node(reader), name, count + k, list_types[-1]))
        initial += lengths + shapes + [w[1] for w in prewrites] + [w[2] for w in prewrites]
        for variable in variables:  # what waited for a list's Exit waits for the loop
            if variable["exit"] and variable["kind"] != "tensor":
                renamed[variable["exit"]] = name
        initial += [e for enter in frame.enters for e in self.inputs[enter.name] if e[1] < 0]
        controls = [e[0] for v in variables for e in self.inputs[v["next"]] if e[1] < 0]
        cond_output = data(self.inputs, pred)[0]
        cond = self.subgraph([cond_output], cond_map, read_lists, "condition")
        body = self.subgraph(body_outputs + [(c, -1) for c in controls], body_map,
                             read_lists, "body")
        in_body = {node.name for node in body[0]}
        controls = [c for c in controls if c in in_body]  # not the frame's own nodes
        loop = Loop(name, frame.name, frame.enters[0].device, count, initial, placeholders,
                    (*cond, _mapped(cond_output, cond_map)),
                    (*body, [_mapped(e, body_map) for e in body_outputs]),
                    controls, list_types, growable, [w[0] for w in prewrites])
        return loop, removed, renamed, relays

    def write(self, variable: dict[str, Any], reserve: str) -> list[Entry]:
        """The (index, item) a written list's one ``TensorListSetItem`` an iteration
        writes (a dynamic-size TensorArray's grows the list: ``growable``)."""
        set_item = self.resolve(data(self.inputs, variable["next"])[0])[0]
        written = data(self.inputs, set_item)
        if self.node(set_item).op != "TensorListSetItem" or len(written) != 3 or \
                self.resolve(written[0]) != (variable["switch"], 1):
            raise self.unsupported(f"the list reserved by '{shown(reserve)}' must be written by "
                                   f"one TensorListSetItem an iteration; its next value comes "
                                   f"from '{shown(set_item)}', a {self.node(set_item).op}")
        return written[1:3]

    def subgraph(self, roots: list[Entry], replaced: dict[Entry, str], read_lists: dict[str, int],
                 what: str) -> tuple[list[Any], dict[str, list[Entry]]]:
        """The nodes ``roots`` need (inputs walked back to the frame nodes ``replaced`` maps
        to placeholders), with their inputs rewritten; ``TensorListGetItem`` of a read list
        becomes ``GatherV2``."""
        def rewritten(source: str, index: int) -> Entry | None:
            """What the subgraph reads for an input: a placeholder, nothing (a control edge
            on the frame's own nodes orders nothing inside one iteration), or the input."""
            if (source, max(index, 0)) in replaced:
                return None if index < 0 else (replaced[(source, index)], 0)
            if index < 0 and self.node(source).op in FRAME_OPS and self.is_own(source):
                return None
            return source, index

        placeholders = set(replaced.values())

        def walked(entries: list[Entry], reader: str) -> list[tuple[str, str]]:
            return [(s, reader) for s, i in entries
                    if s not in placeholders and rewritten(s, i) == (s, i)]

        order: list[str] = []
        seen: set[str] = set()
        stack = walked(roots, "")
        while stack:
            name, reader = stack.pop()
            if name in seen:
                continue
            node = self.node(name)
            if name not in self.frame.members:
                raise self.error(f"its {what} reads '{shown(name)}' from outside the loop "
                                 f"without an Enter")
            if name in self.written_switches:
                raise self.unsupported(f"its {what} reads a list it writes (in "
                                       f"'{shown(reader)}', a {self.node(reader).op}); "
                                       f"minigraph imports one TensorListSetItem an iteration "
                                       f"on such a list")
            if node.op in FRAME_OPS and self.is_own(name):
                raise self.error(f"its {what} reads the loop's {node.op} '{shown(name)}'")
            seen.add(name)
            order.append(name)
            # an error names the node that uses a value, not the Identity passing it on
            stack += walked(self.inputs[name], reader if node.op == "Identity" and reader
                            else name)
        nodes, inputs = [], {}
        for name in order:
            node = self.node(name)
            entries = [e for e in (rewritten(s, i) for s, i in self.inputs[name]) if e]
            lists = [i for i, entry in enumerate(data(self.inputs, name))
                     if _mapped(self.resolve(entry), replaced)[0] in read_lists]
            if node.op == "TensorListGetItem" and lists == [0]:
                node, entries, axis = _gather(node, entries)
                nodes.append(axis)
                inputs[axis.name] = []
            elif node.op == "Identity" and lists == [0]:  # passes the tensor on
                node = copied(node)
                node.attr["T"].type = read_lists[self.resolved_list(name, replaced)]
            elif node.op in LIST_OPS or lists:
                raise self.unsupported(
                    f"node '{shown(name)}' ({node.op}) uses a list; in a loop minigraph "
                    f"imports TensorListGetItem of a list made by TensorListFromTensor, and "
                    f"one TensorListSetItem an iteration of a reserved list")
            nodes.append(node)
            inputs[node.name] = entries
        return nodes, without_inert_controls(nodes, inputs, placeholders)

    def resolved_list(self, name: str, replaced: dict[Entry, str]) -> str:
        """The placeholder of the read list the Identity ``name`` passes on."""
        return _mapped(self.resolve((name, 0)), replaced)[0]


def _gather(node: Any, entries: list[Entry]) -> tuple[Any, list[Entry], Any]:
    """``TensorListGetItem(list, i, shape)`` as ``GatherV2(t, i, axis)`` (``entries``: its
    inputs, the list's read as the tensor ``t``), and the axis, a Const 0."""
    gather = node_def(name=node.name, op="GatherV2", device=node.device)
    gather.attr["Tparams"].type = node.attr["element_dtype"].type
    gather.attr["Tindices"].type = _DT_INT32
    gather.attr["Taxis"].type = _DT_INT32
    axis = node_def(name=f"{node.name}/lifted_axis", op="Const", device=node.device)
    axis.attr["dtype"].type = _DT_INT32
    axis.attr["value"].tensor.dtype = _DT_INT32
    axis.attr["value"].tensor.tensor_shape.SetInParent()
    axis.attr["value"].tensor.int_val.append(0)
    list_and_index = [e for e in entries if e[1] >= 0][:2]
    return gather, [*list_and_index, (axis.name, 0)] + [e for e in entries if e[1] < 0], axis


def _items_read_outside_loops(nodes: list[Any], inputs: dict[str, list[Entry]]
                              ) -> tuple[list[Any], dict[str, list[Entry]]]:
    """``TensorListGetItem`` of a ``TensorListFromTensor(t)`` outside any loop (``tf.scan``
    and ``tf.foldl`` start from the first item) as ``GatherV2(t, i, 0)``; a list maker left
    with no reader is dropped (a control edge on it waits for ``t``'s node)."""
    by_name = {node.name: node for node in nodes}

    def maker(name: str) -> str | None:
        sources = data(inputs, name)
        source = sources[0][0] if sources else ""
        return source if source in by_name and by_name[source].op == \
            "TensorListFromTensor" else None

    rewritten, axes = {}, []
    new_inputs = dict(inputs)
    for node in nodes:
        made_by = maker(node.name) if node.op == "TensorListGetItem" else None
        if made_by is not None:
            entries = [data(inputs, made_by)[0], *inputs[node.name][1:]]
            gather, new_inputs[node.name], axis = _gather(node, entries)
            rewritten[node.name] = gather
            axes.append(axis)
            new_inputs[axis.name] = []
    if not rewritten:
        return nodes, inputs
    readers = consumers(nodes, new_inputs)
    unread = {node.name for node in nodes if node.op == "TensorListFromTensor"
              and not any(i >= 0 for _, i in readers.get(node.name, ()))}
    for name, entries in new_inputs.items():
        new_inputs[name] = [(data(inputs, s)[0][0], i) if s in unread else (s, i)
                            for s, i in entries]
    kept = [rewritten.get(node.name, node) for node in nodes if node.name not in unread]
    return kept + axes, {name: e for name, e in new_inputs.items() if name not in unread}


def _mapped(entry: Entry, replaced: dict[Entry, str]) -> Entry:
    """``entry``, or the placeholder that stands for it."""
    return (replaced[entry], 0) if entry in replaced else entry
