"""Inference batch norms folded into their convolution's weights (grappler's and TFLite's
``FoldBatchNorms``), an opt-in pass: ``OptimizerOptions(fold_batch_norm=True)``.

``Conv2D(x, W) -> FusedBatchNormV3(is_training=False)`` with constant ``W``, scale, offset,
mean and variance becomes ``Conv2D(x, W * k) -> BiasAdd(offset - mean * k)`` named as the
batch norm, where ``k = scale * rsqrt(variance + epsilon)`` scales each output channel
(the filter's last axis; grouped convolutions too). The convolution then carries the whole
normalization, and the epilogue fusion (``client/fusion.py``) adds the bias in registers.

This changes rounding: the unfused graph rounds ``conv(x, W)`` and then
``(c - mean) * k + offset``; the folded one rounds ``W * k`` once and accumulates with it.
The difference is bounded like a convolution's own error,
``|folded - unfused| <= (K + 3) * 2^-24 * (sum |x * W| * |k| + |mean * k| + |offset|)``
for K multiply-adds per output, which ``tests/test_training_fusion.py`` checks. Hence off by
default. Folding happens only where nothing else reads the convolution's output or the
batch norm's statistics, both nodes are float32 on one device, and the convolution is not
preserved (the batch norm may be: the BiasAdd keeps its name and its output 0).
"""

from __future__ import annotations

import numpy as np

from minigraph.framework import dtypes
from minigraph.optimizer.item import GraphItem, Node, parse_input, tensor_name
from minigraph.optimizer.passes import register_pass
from minigraph.optimizer.training_fusions import Edges


def _const(item: GraphItem, text: str) -> np.ndarray | None:
    node = item.nodes.get(parse_input(text)[0])
    if node is None or node.op != "Const" or item.is_fed(node.name):
        return None
    return np.asarray(node.attrs["value"])


def _const_node(name: str, value: np.ndarray, device: str) -> Node:
    value = np.ascontiguousarray(value, np.float32)
    value.setflags(write=False)
    return Node(name, "Const", [], {"value": value, "dtype": dtypes.float32}, device)


@register_pass("fold_batch_norm", order=45)
def fold_batch_norms(item: GraphItem) -> GraphItem:
    edges = Edges(item)
    for bn in item:
        if not (bn.op == "FusedBatchNormV3" and item.nodes.get(bn.name) is bn
                and not bn.attrs["is_training"] and bn.attrs["T"] is dtypes.float32
                and bn.attrs["data_format"] in ("NHWC", "NCHW") and not item.is_fed(bn.name)
                and not any(edges.uses.get(tensor_name(bn.name, i)) for i in range(1, 6))):
            continue
        conv_text, *vector_texts = bn.data_inputs
        conv = item.nodes.get(parse_input(conv_text)[0])
        if not (conv is not None and conv.op == "Conv2D" and parse_input(conv_text)[1] == 0
                and edges.only_reader(tensor_name(conv.name, 0)) is bn and edges.free(conv)
                and conv.attrs["T"] is dtypes.float32 and conv.device == bn.device
                and conv.attrs["data_format"] == bn.attrs["data_format"]):
            continue
        weights = _const(item, conv.data_inputs[1])
        vectors = [_const(item, text) for text in vector_texts]
        if weights is None or any(v is None for v in vectors):
            continue
        scale, offset, mean, variance = (v.astype(np.float32) for v in vectors)
        if not scale.shape == offset.shape == mean.shape == variance.shape == weights.shape[-1:]:
            continue  # (the ops' own checks report it when the graph runs)
        epsilon = np.float32(bn.attrs["epsilon"])
        k = scale * (np.float32(1) / np.sqrt(variance + epsilon))
        filter_node = _const_node(item.unique_name(f"{conv.name}/folded_filter"),
                                  weights.astype(np.float32) * k, conv.device)
        bias_node = _const_node(item.unique_name(f"{bn.name}/folded_bias"),
                                offset - mean * k, bn.device)
        item.add(filter_node)
        item.add(bias_node)
        conv.inputs[1] = filter_node.name
        controls = [text for text in bn.inputs if text.startswith("^")]
        item.remove(bn.name)
        item.add(Node(bn.name, "BiasAdd", [tensor_name(conv.name, 0), bias_node.name]
                      + controls, {"T": dtypes.float32,
                                   "data_format": bn.attrs["data_format"]}, bn.device))
        edges = Edges(item)
    return item
