"""GraphDef versions: which graphs minigraph reads, and what it writes.

minigraph follows the op semantics of TensorFlow 2.21, whose GraphDef version is 2474, so it
reads and writes graphs as that TensorFlow does: a graph must not need a newer consumer
(``min_consumer``), must not exclude ours (``bad_consumers``), and ops deprecated at version
V (the global-normalization batch norm, V = 9) are refused in graphs produced at V or later.
"""

from __future__ import annotations

from typing import Any

from minigraph.framework.errors import InvalidArgumentError, UnimplementedError
from minigraph.framework.op_def import OpDef

GRAPH_DEF_VERSION = 2474  # TF_GRAPH_DEF_VERSION of TensorFlow 2.21
MIN_PRODUCER = 0  # TF_GRAPH_DEF_VERSION_MIN_PRODUCER
TF_VERSION = "2.21.0"  # whose semantics and messages these are


def check_versions(versions: Any) -> None:
    """Refuse a GraphDef this consumer may not read, with TensorFlow's messages."""
    if versions.producer < MIN_PRODUCER:
        raise InvalidArgumentError(
            f"GraphDef producer version {versions.producer} below min producer {MIN_PRODUCER} "
            f"supported by TensorFlow {TF_VERSION}.  Please regenerate your graph.")
    if versions.min_consumer > GRAPH_DEF_VERSION:
        raise InvalidArgumentError(
            f"GraphDef min consumer version {versions.min_consumer} above current version "
            f"{GRAPH_DEF_VERSION} for TensorFlow {TF_VERSION}.  Please upgrade TensorFlow.")
    if GRAPH_DEF_VERSION in versions.bad_consumers:
        raise InvalidArgumentError(
            f"GraphDef disallows consumer version {GRAPH_DEF_VERSION}.  Please upgrade "
            f"TensorFlow: this version is likely buggy.")


def check_op_available(op_def: OpDef, producer: int) -> None:
    """Refuse an op deprecated at or before the graph's producer version, as TF does."""
    deprecation = op_def.deprecation
    if deprecation is not None and producer >= deprecation.version:
        raise UnimplementedError(
            f"Op {op_def.name} is not available in GraphDef version {producer}. It has been "
            f"removed in version {deprecation.version}. {deprecation.explanation}")


def producer_for(op_defs: list[OpDef]) -> int:
    """The producer version to write a graph holding these ops with: ours, or the last one
    before the earliest deprecation among them (8 for the global-normalization ops), so
    TensorFlow still runs the graph."""
    limits = [d.deprecation.version - 1 for d in op_defs if d.deprecation is not None]
    return min([GRAPH_DEF_VERSION, *limits])
