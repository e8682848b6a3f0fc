"""Pruning: keep only the nodes the fetches and targets need (grappler's ``ModelPruner``).

A node is needed when a fetch or target reaches it through data or control inputs. A fed
tensor's node and its own inputs stay (the node must exist for the feed to name it), though
a session never runs them; everything else goes.
"""

from __future__ import annotations

from minigraph.optimizer.item import GraphItem, parse_input
from minigraph.optimizer.passes import register_pass


def needed_nodes(item: GraphItem) -> set[str]:
    """The names of the nodes reachable backwards from the fetches and targets (and the
    fed tensors' nodes); every node when the item has neither fetches nor targets."""
    if not item.fetches and not item.targets:
        return set(item.nodes)
    stack = [parse_input(text)[0] for text in (*item.fetches, *item.feeds)] + item.targets
    seen: set[str] = set()
    while stack:
        name = stack.pop()
        if name in seen or name not in item.nodes:
            continue
        seen.add(name)
        stack.extend(parse_input(text)[0] for text in item.nodes[name].inputs)
    return seen


@register_pass("pruning", order=10)
def prune(item: GraphItem) -> GraphItem:
    item.keep_only(needed_nodes(item))
    return item
