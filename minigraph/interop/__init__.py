"""Graphs exchanged with TensorFlow: ``import_graph_def`` reads a GraphDef (``.pb``,
``.pbtxt``, bytes or a message) into a minigraph graph, ``export_graph_def`` writes one."""

from minigraph.interop.exporter import export_graph_def
from minigraph.interop.importer import import_graph_def

__all__ = ["export_graph_def", "import_graph_def"]
