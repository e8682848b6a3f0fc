"""A stable topological order of named nodes (Kahn's algorithm with a min-heap on position).

Shared by ``optimizer.item`` (a rewritten graph's nodes) and ``interop.importer`` (a
GraphDef's nodes): among the nodes that are ready, the one first in the given order goes
first, so an order that is already topological is kept as it is.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Mapping, Sequence


def stable_topological_order(names: Sequence[str], sources: Mapping[str, Collection[str]]
                             ) -> tuple[list[int], list[str]]:
    """Positions in ``names`` with every node after its ``sources[name]`` (distinct names),
    and the names never ready (on a cycle, behind one, or waiting for a source that is not in
    ``names``), in ``names`` order; the order is complete when that list is empty."""
    position = {name: i for i, name in enumerate(names)}
    waiting = {name: len(sources[name]) for name in names}
    consumers: dict[str, list[str]] = {}
    for name in names:
        for source in sources[name]:
            consumers.setdefault(source, []).append(name)
    ready = [position[name] for name, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for consumer in consumers.get(names[i], ()):
            waiting[consumer] -= 1
            if waiting[consumer] == 0:
                heapq.heappush(ready, position[consumer])
    return order, [name for name, count in waiting.items() if count > 0]
