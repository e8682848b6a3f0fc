"""The remapper: rewrites op patterns into fused ops (grappler's ``Remapper``).

Each fusion is a function ``fuse(item: GraphItem) -> GraphItem`` registered with
:func:`register_fusion`; the remapper pass runs them in ``order``, and the ``remapper``
switch of ``OptimizerOptions`` turns them all off. A fusion keeps the contract of
``passes.py``; in particular the fused node takes the name of the pattern's last node, and
a pattern is fused only where nothing else reads its intermediates (no other consumer, not
fetched, not fed, not a control input of anything) and every node of it is on one device.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from minigraph.optimizer.item import GraphItem
from minigraph.optimizer.passes import Rewrite, register_pass


@dataclass(frozen=True)
class Fusion:
    name: str
    order: int
    rewrite: Rewrite


_FUSIONS: dict[str, Fusion] = {}


def register_fusion(name: str, order: int) -> Callable[[Rewrite], Rewrite]:
    """Register ``rewrite`` as the remapper's fusion ``name``, run at ``order``."""

    def register(rewrite: Rewrite) -> Rewrite:
        if name in _FUSIONS:
            raise ValueError(f"remapper fusion '{name}' is already registered")
        _FUSIONS[name] = Fusion(name, order, rewrite)
        return rewrite

    return register


def registered_fusions() -> list[Fusion]:
    return sorted(_FUSIONS.values(), key=lambda f: f.order)


@register_pass("remapper", order=50)
def remap(item: GraphItem) -> GraphItem:
    for fusion in registered_fusions():
        item = fusion.rewrite(item)
    return item
