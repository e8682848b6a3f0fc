"""TensorFlow's lowered conditionals at import: each lifted into one ``Conditional``.

TF lowers ``tf.cond(p, then_fn, else_fn)`` into ``Switch`` and ``Merge`` nodes: each value
the branches read passes a ``Switch(value, p)``, whose output 1 is live when ``p`` holds
and output 0 when it does not; a node reading a dead value is dead, and each result is a
``Merge`` of the branches' values (the live one). ``tf.switch_case(i, fns)`` is the same
with ``_SwitchN(value, i)``, whose output ``k`` is live when ``i == k`` (the last one when
``i`` is out of range). minigraph has no dead values, so :func:`lift` finds each
conditional and replaces it by a :class:`Conditional` the importer builds as a
``Conditional`` node (``ops/control_flow_ops.py``): its branches are subgraphs fed by one
Placeholder per Switch, and a session runs the branch the selector picks.

Which branch a node belongs to follows TF's dead-value rule: a node's *guard* is the list
of (predicate, output) conditions under which it is live, walked in topological order (a
Switch's output ``k`` adds ``(p, k)`` to its input's guard; a node takes the longest guard
among its inputs, which must all lie on one path; a Merge of a conditional's two branches
drops their last condition). The nodes whose guard starts with ``(p, k)`` form branch
``k`` of a conditional on ``p`` (for a predicate: 1 then, 0 else); its Merge nodes are its
results, and stay in the graph as ``Identity`` nodes of the lifted node's outputs.
Conditionals on one predicate are told apart by the nodes they share; a conditional inside
a branch (or a loop's body) is lifted when that branch is imported.

Refused, naming the node: a node reading two branches of a conditional but a Merge, a
Merge of other than one conditional's branches, a reader of a Merge's ``value_index``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from minigraph.framework.errors import UnimplementedError
from minigraph.framework.names import shown
from minigraph.framework.toposort import stable_topological_order
from minigraph.interop.loops import MAX_NESTING
from minigraph.interop.node_lists import (
    Entry,
    consumers,
    data,
    relay,
    relay_entry,
    without_inert_controls,
)

Guard = tuple[tuple[Entry, int], ...]  # ((selector, output), ...), outermost first
SWITCHES = ("Switch", "_SwitchN")  # tf.cond's (on a predicate), tf.switch_case's (an index)


@dataclass
class Branch:
    """One branch: its nodes with parsed inputs (reading the placeholders for Switch
    outputs), its results, and the nodes it runs for their effects."""

    nodes: list[Any]
    inputs: dict[str, list[Entry]]
    outputs: list[Entry]
    targets: list[str]


@dataclass
class Conditional:
    """A lifted conditional, standing in the node list for its nodes (the importer builds
    it). ``initial``: the selector (a predicate, or a branch index), then each Switch's
    input and each value a branch reads from outside without a Switch, then control
    inputs; ``placeholders``: the branches' input node names, one per input after the
    selector; ``branches``: by the Switch output that selects them (a predicate's: false,
    then true)."""

    name: str
    device: str
    initial: list[Entry]
    placeholders: list[str]
    branches: list[Branch]
    op: str = "Conditional"  # what the importer builds (a node list holds these, NodeDefs)


def _unsupported(name: str, message: str) -> UnimplementedError:
    return UnimplementedError(f"tf.cond at node '{shown(name)}': {message}")


def _guards(nodes: Sequence[Any], inputs: dict[str, list[Entry]]
            ) -> dict[str, Guard] | None:
    """Each node's guard (see the module docstring); a Switch's entry is its own, its
    outputs add their condition. None when the nodes are not a DAG (the importer then
    reports the cycle)."""
    names = [node.name for node in nodes]
    by_name = {node.name: node for node in nodes}
    sources = {name: {s for s, _ in inputs[name] if s in by_name} for name in names}
    order, stuck = stable_topological_order(names, sources)
    if stuck:
        return None
    guards: dict[str, Guard] = {}

    def guard_of(source: str, index: int) -> Guard:
        guard = guards.get(source, ())
        if source in by_name and by_name[source].op in SWITCHES and index >= 0:
            return (*guard, (data(inputs, source)[1], index))
        return guard

    for position in order:
        node = nodes[position]
        found = [guard_of(s, i) for s, i in inputs[node.name]]
        if node.op == "Merge":
            guards[node.name] = _merged(node, [guard_of(*e) for e in data(inputs, node.name)])
            continue
        longest = max(found, key=len, default=())
        if len(longest) > MAX_NESTING:
            raise UnimplementedError(f"tf.cond at node '{shown(node.name)}': conditionals "
                                     f"nested more than {MAX_NESTING} deep")
        for guard in found:
            if guard != longest[:len(guard)]:
                raise _unsupported(node.name, f"the {node.op} reads values live under "
                                              f"different conditions (both branches of a "
                                              f"conditional, or two conditionals) and is "
                                              f"not a Merge")
        guards[node.name] = longest
    return guards


def _merged(node: Any, found: list[Guard]) -> Guard:
    """A Merge's guard: its inputs' common guard, when they are the branches of one
    conditional, one input each (possibly nested deeper in each)."""
    if len(found) < 2:
        raise _unsupported(node.name, f"the Merge has {len(found)} inputs; a conditional's "
                                      f"Merge has one per branch")
    common = 0
    while common < min(map(len, found)) and all(g[common] == found[0][common]
                                                  for g in found):
        common += 1
    heads = [guard[common] if len(guard) > common else None for guard in found]
    if None in heads or len({h[0] for h in heads}) != 1 or \
            len({h[1] for h in heads}) != len(heads):
        raise _unsupported(node.name, "the Merge does not join the branches of one "
                                      "conditional")
    return found[0][:common]


def lift(nodes: Sequence[Any], inputs: dict[str, list[Entry]],
         taken: Callable[[str], bool]) -> tuple[list[Any], dict[str, list[Entry]]]:
    """``nodes`` with each outermost conditional replaced by a :class:`Conditional`;
    ``inputs`` rewritten to match; ``taken(name)``: whether a node name is in use."""
    if not any(node.op in SWITCHES for node in nodes):
        return list(nodes), inputs
    guards = _guards(nodes, inputs)
    if guards is None:
        return list(nodes), inputs
    by_name = {node.name: node for node in nodes}
    readers = consumers(nodes, inputs)
    groups = _groups(nodes, inputs, guards, by_name)
    owner: dict[str, str] = {}  # removed node -> its lifted conditional
    lifted, relays = [], []
    for members in groups:
        cond, gone, made = _Lifter(members, by_name, inputs, guards, readers, taken).lift()
        lifted.append(cond)
        owner.update(dict.fromkeys(gone, cond.name))
        relays += made
    relayed = {identity.name for identity in relays}  # Merges: still there, as Identities
    kept = [node for node in nodes if node.name not in owner]
    new_inputs = {}
    for node in kept:
        entries = []
        for source, index in inputs[node.name]:
            if source in owner and source not in relayed:
                if index >= 0:
                    raise _unsupported(node.name, f"it reads '{shown(source)}' of a "
                                                  f"conditional, not through its Merge")
                source = owner[source]  # a control edge on a Switch: wait for the whole
            entries.append((source, index))
        new_inputs[node.name] = entries
    for cond in lifted:
        new_inputs[cond.name] = list(cond.initial)
    for identity in relays:
        new_inputs[identity.name] = [relay_entry(identity)]
    return kept + lifted + relays, new_inputs


def _groups(nodes: Sequence[Any], inputs: dict[str, list[Entry]], guards: dict[str, Guard],
            by_name: dict[str, Any]) -> list[list[str]]:
    """The outermost conditionals: the nodes under one predicate's two conditions (and
    their Switch and Merge nodes), split where they share no node."""
    parent: dict[str, str] = {}

    def root(name: str) -> str:
        while parent.setdefault(name, name) != name:
            parent[name] = parent[parent[name]]
            name = parent[name]
        return name

    def join(a: str, b: str) -> None:
        parent[root(a)] = root(b)

    for node in nodes:
        guard = guards[node.name]
        if guard:  # in a branch: with what it reads there and the Switches it reads
            for source, _ in inputs[node.name]:
                if guards.get(source) or by_name.get(source) is not None and \
                        by_name[source].op in SWITCHES and not guards.get(source):
                    join(node.name, source)
        elif node.op == "Merge":
            for source, _ in data(inputs, node.name):
                join(node.name, source)
    members: dict[str, list[str]] = {}
    for node in nodes:
        if node.name in parent and (guards[node.name] or node.op in (*SWITCHES, "Merge")):
            members.setdefault(root(node.name), []).append(node.name)
    return [group for group in members.values()
            if any(by_name[name].op == "Merge" or guards[name] for name in group)]


class _Lifter:
    """Lifts one conditional (:meth:`lift`)."""

    def __init__(self, members: list[str], by_name: dict[str, Any],
                 inputs: dict[str, list[Entry]], guards: dict[str, Guard],
                 readers: dict[str, list[tuple[str, int]]], taken: Callable[[str], bool]
                 ) -> None:
        self.members, self.by_name, self.inputs = members, by_name, inputs
        self.member_set = set(members)
        self.guards, self.readers, self.taken = guards, readers, taken
        self.outer_controls: list[Entry] = []  # control edges from a branch to outside

    def lift(self) -> tuple[Conditional, set[str], list[Any]]:
        by_name, guards = self.by_name, self.guards
        switches = [n for n in self.members if by_name[n].op in SWITCHES and not guards[n]]
        merges = [n for n in self.members if by_name[n].op == "Merge" and not guards[n]]
        branch_nodes = [n for n in self.members if guards[n]]
        selectors = {guards[n][0][0] for n in branch_nodes}
        kinds = {by_name[s].op for s in switches if data(self.inputs, s)[1] in selectors}
        counts = {by_name[s].attr["num_outs"].i if by_name[s].op == "_SwitchN" else 2
                  for s in switches}
        if len(selectors) != 1 or len(kinds) != 1 or len(counts) != 1:
            raise _unsupported(self.members[0], "its branches are not under one predicate "
                                                "or branch index")
        selector, count = selectors.pop(), counts.pop()
        if count < 1 or count > 1 << 10:
            raise _unsupported(switches[0], f"a _SwitchN of {count} outputs")
        name = _free_name(merges or switches, self.taken, by_name)
        within = set(branch_nodes)
        # what the branches read from outside: each Switch, and values read directly
        # (live in either branch, as TF's executor has them)
        captured = list(dict.fromkeys(
            (s, i) for n in branch_nodes for s, i in self.inputs[n]
            if i >= 0 and s not in within and s not in switches))
        sources = [data(self.inputs, s)[0] for s in switches] + captured
        placeholders = [f"{name}/input_{i}" for i in range(len(sources))]
        ports = {(switch, port): placeholder for switch, placeholder in zip(switches,
                                                                            placeholders)
                 for port in range(count)}
        ports.update(zip(captured, placeholders[len(switches):]))
        branches = []
        for taken_when in range(count):
            nodes = [n for n in branch_nodes if guards[n][0] == (selector, taken_when)]
            outputs = [self.branch_output(merge, selector, taken_when) for merge in merges]
            branches.append(self.branch(nodes, outputs, ports, set(placeholders)))
        relays = []
        for index, merge in enumerate(merges):
            if any(i == 1 for _, i in self.readers.get(merge, ())):
                raise _unsupported(merge, "a node reads the Merge's value_index")
            relays.append(relay(by_name[merge], name, index, by_name[merge].attr["T"].type))
        initial = [selector, *sources]
        initial += dict.fromkeys([e for s in switches for e in self.inputs[s] if e[1] < 0]
                                 + self.outer_controls)
        device = by_name[(merges or switches)[0]].device
        cond = Conditional(name, device, initial, placeholders, branches)
        return cond, self.member_set, relays

    def branch_output(self, merge: str, selector: Entry, taken_when: int) -> Entry:
        """The Merge's input from the branch taken when the selector picks output
        ``taken_when`` of the Switch nodes."""
        for source, index in data(self.inputs, merge):
            guard = self.guards.get(source, ())
            if source in self.by_name and self.by_name[source].op in SWITCHES and \
                    not guard:
                guard = ((data(self.inputs, source)[1], index),)
            if guard and guard[0] == (selector, taken_when):
                return source, index
        raise _unsupported(merge, "the Merge does not join the branches of one conditional")

    def branch(self, names: list[str], outputs: list[Entry], ports: dict[Entry, str],
               placeholders: set[str]) -> Branch:
        """The branch's nodes, reading placeholders for Switch outputs and outside values
        (a control edge on a Switch orders nothing inside the branch), its results, and
        the nodes nothing reads (run for their effects: an Assert)."""
        nodes, inputs = [], {}
        branch = set(names)
        for name in names:
            entries = []
            for source, index in self.inputs[name]:
                if source in self.member_set and source not in branch and \
                        self.by_name[source].op not in SWITCHES:
                    raise _unsupported(name, f"a node of one branch reads '{shown(source)}', "
                                             f"a result of the conditional or a node of the "
                                             f"other branch")
                if (source, max(index, 0)) in ports:
                    if index >= 0:
                        entries.append((ports[(source, index)], 0))
                elif index < 0 and source not in self.member_set:  # the Conditional waits for it
                    self.outer_controls.append((source, index))
                else:
                    entries.append((source, index))
            nodes.append(self.by_name[name])
            inputs[name] = entries
        targets = [n for n in names if not self.readers.get(n)]
        outputs = [(ports[e], 0) if e in ports else e for e in outputs]
        return Branch(nodes, without_inert_controls(nodes, inputs, placeholders), outputs,
                      targets)


def _free_name(anchors: list[str], taken: Callable[[str], bool], by_name: dict[str, Any]
               ) -> str:
    """A name for the lifted node: the name scope its Merges (or Switches) share."""
    scope = anchors[0].rpartition("/")[0] if "/" in anchors[0] else anchors[0]
    for anchor in anchors[1:]:
        while scope and not anchor.startswith(scope + "/"):
            scope = scope.rpartition("/")[0]
    name = scope or anchors[0]
    while taken(name) or name in by_name:
        name += "_lifted"
    return name
