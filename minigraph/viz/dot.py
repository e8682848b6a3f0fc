"""Deterministic DOT text for a graph: :func:`to_dot`.

The same graph always gives the same text, byte for byte: nodes are written in creation order,
clusters in order of their first node, edges in order of their consumer and input index, and
nothing depends on ids, hashes or the clock. So the text can be checked against a golden file.

Drawing conventions (after TensorFlow's ``graph/dot.cc``, TensorBoard, Netron and torchviz):

* a node is a rounded box with an HTML-like label: the op type in bold, then the node's name
  (relative to its name-scope cluster) and its key attrs in small text; the fill colour tells
  the op's category (:func:`op_category`); deprecated ops get a dashed border; ``Const`` nodes
  are drawn small;
* an edge is labelled with its dtype and static shape (``f32[?,8,8,32]``, ``f32[*]`` for an
  unknown rank, ``f32[]`` for a scalar), preceded by the output name when its producer has
  several outputs; edges that carry saved statistics (``reserve_space_*``) are dotted grey and
  control dependencies are dashed with a hollow-circle head;
* each name scope is a cluster, nested like the scopes; everything under ``gradients/`` sits in
  a pink, dashed cluster so the backward pass stands apart from the forward one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from minigraph.framework.errors import InvalidArgumentError
from minigraph.framework.graph import Graph, Operation, Output
from minigraph.framework.op_def import input_args, output_args
from minigraph.framework.scope import Scope
from minigraph.framework.tensor_shape import dims_text

GRADIENT_SCOPE = "gradients"

# ----------------------------------------------------------------------------- op categories


@dataclass(frozen=True)
class Category:
    """How the ops of one category are drawn: fill and border colour, and a legend title."""

    fill: str
    border: str
    title: str


CATEGORIES: dict[str, Category] = {
    "normalization": Category("#c8e6c9", "#2e7d32", "normalization"),
    "convolution": Category("#bbdefb", "#1565c0", "convolution / matmul"),
    "activation": Category("#ffccbc", "#bf360c", "activation"),
    "pooling": Category("#dcedc8", "#558b2f", "pooling"),
    "math": Category("#fff9c4", "#9e8600", "math"),
    "array": Category("#d7ccc8", "#5d4037", "array / shape"),
    "state": Category("#d1c4e9", "#4527a0", "state (variables)"),
    "training": Category("#f8bbd0", "#ad1457", "training (optimizers)"),
    "io": Category("#eceff1", "#546e7a", "input / constant / io"),
    "gradient": Category("#e0e0e0", "#616161", "gradient helper"),
    "control": Category("#b2dfdb", "#00695c", "control flow"),
    "other": Category("#ffffff", "#555555", "other"),
}


def _types(*names: str) -> tuple[str, ...]:
    return names


_CATEGORY_TYPES: dict[str, tuple[str, ...]] = {
    "normalization": _types(
        "FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3", "FusedBatchNormGrad",
        "FusedBatchNormGradV2", "FusedBatchNormGradV3", "FusedBatchNormGradGrad",
        "BatchNormWithGlobalNormalization", "BatchNormWithGlobalNormalizationGrad", "LRN",
        "LRNGrad"),
    "convolution": _types(
        "Conv2D", "Conv3D", "DepthwiseConv2dNative", "Conv2DBackpropInput",
        "Conv2DBackpropFilter", "Conv3DBackpropInputV2", "Conv3DBackpropFilterV2",
        "DepthwiseConv2dNativeBackpropInput", "DepthwiseConv2dNativeBackpropFilter", "MatMul",
        "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3"),
    "activation": _types(
        "Relu", "Relu6", "Elu", "Selu", "LeakyRelu", "Sigmoid", "Tanh", "Softplus", "Softsign",
        "Softmax", "LogSoftmax", "ReluGrad", "Relu6Grad", "EluGrad", "SeluGrad",
        "LeakyReluGrad", "SigmoidGrad", "TanhGrad", "SoftplusGrad"),
    "pooling": _types(
        "MaxPool", "MaxPoolV2", "AvgPool", "MaxPool3D", "AvgPool3D", "MaxPoolGrad",
        "MaxPoolGradV2", "AvgPoolGrad", "MaxPool3DGrad", "AvgPool3DGrad", "MaxPoolGradGrad"),
    "math": _types(
        "Add", "AddV2", "Sub", "Mul", "Div", "RealDiv", "DivNoNan", "FloorDiv", "Neg", "Abs",
        "Sign", "Square", "Sqrt", "Rsqrt", "Reciprocal", "Exp", "Log", "Log1p", "Pow",
        "Maximum", "Minimum", "SquaredDifference", "Sum", "Mean", "Prod", "Max", "Min",
        "ArgMax", "ArgMin", "Equal", "NotEqual", "Less", "LessEqual", "Greater",
        "GreaterEqual", "Select", "SelectV2", "Cast", "BiasAdd", "BiasAddGrad", "RsqrtGrad",
        "SqrtGrad", "L2Loss", "SoftmaxCrossEntropyWithLogits",
        "SparseSoftmaxCrossEntropyWithLogits"),
    "array": _types(
        "Identity", "IdentityN", "Reshape", "Transpose", "InvertPermutation", "Shape", "ShapeN",
        "Size", "Rank",
        "Concat", "ConcatV2", "Split", "SplitV", "Slice", "StridedSlice", "StridedSliceGrad",
        "Pad", "PadV2", "Squeeze", "ExpandDims", "Tile", "Fill", "Gather", "GatherV2", "Pack",
        "Unpack", "OneHot", "Range", "Zeros", "Ones", "BroadcastTo", "ReducedShape"),
    "gradient": _types(
        "OnesLike", "ZerosLike", "AddN", "BroadcastGradientArgs", "StopGradient",
        "PreventGradient", "SymbolicGradient"),
    "state": _types(
        "Variable", "VariableV2", "VarHandleOp", "ReadVariableOp", "Assign", "AssignAdd",
        "AssignSub", "AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp",
        "VarIsInitializedOp", "IsVariableInitialized", "TemporaryVariable"),
    "training": _types(
        "ApplyAdam", "ApplyGradientDescent", "ApplyMomentum", "ApplyRMSProp", "ApplyAdagrad",
        "ResourceApplyAdam", "ResourceApplyGradientDescent", "ResourceApplyMomentum"),
    "io": _types(
        "Placeholder", "PlaceholderWithDefault", "Const", "HostConst", "RandomUniform",
        "RandomStandardNormal", "TruncatedNormal", "Save", "SaveV2",
        "Restore", "RestoreV2", "Print", "PrintV2", "ReadFile", "WriteFile"),
    "control": _types(
        "NoOp", "Switch", "Merge", "Enter", "Exit", "NextIteration", "LoopCond",
        "ControlTrigger"),
}

#: op type -> category name; extend it to place new op types (unknown types use name rules).
OP_CATEGORIES: dict[str, str] = {
    op_type: category for category, types in _CATEGORY_TYPES.items() for op_type in types}

_GRAD_SUFFIXES = ("GradGrad", "GradV3", "GradV2", "Grad")


def op_category(op_type: str) -> str:
    """The category an op type is drawn in: a key of :data:`CATEGORIES`.

    Known types come from :data:`OP_CATEGORIES`; unknown ones are placed by their name
    (``Apply*`` is training, ``*Conv*``/``*MatMul*`` convolution, ``*Pool*`` pooling,
    ``*Norm*`` normalization, ``*Variable*``/``Assign*`` state, ``XGrad`` like ``X``), and
    anything else is ``"other"``.
    """
    if op_type in OP_CATEGORIES:
        return OP_CATEGORIES[op_type]
    for suffix in _GRAD_SUFFIXES:
        if op_type.endswith(suffix) and op_type[:-len(suffix)] in OP_CATEGORIES:
            return OP_CATEGORIES[op_type[:-len(suffix)]]
    if op_type.startswith(("Apply", "ResourceApply", "SparseApply", "ResourceSparseApply")):
        return "training"
    if "Conv" in op_type or "MatMul" in op_type:
        return "convolution"
    if "Pool" in op_type:
        return "pooling"
    if "Norm" in op_type:
        return "normalization"
    if "Variable" in op_type or op_type.startswith("Assign"):
        return "state"
    return "other"


# ----------------------------------------------------------------------------- text helpers

_DTYPE_SHORT = {"float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64",
                "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8",
                "bool": "bool"}

# attrs worth a place in the label, in this order, with how to write them
_KEY_ATTRS = ("data_format", "is_training", "epsilon", "variance_epsilon",
              "exponential_avg_factor", "scale_after_normalization", "strides", "padding",
              "ksize", "transpose_a", "transpose_b", "keep_dims", "use_locking")


def quote(text: str) -> str:
    """A DOT double-quoted string (ids, plain labels, tooltips)."""
    text = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + text.replace("\r", "").replace("\n", "\\n") + '"'


def html(text: str) -> str:
    """Text escaped for a DOT HTML-like label."""
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;").replace("\n", " "))


def _number(value: float) -> str:
    return format(float(value), ".4g")


def dtype_text(dtype: Any) -> str:
    name = getattr(dtype, "name", str(dtype))
    return _DTYPE_SHORT.get(name, name)


def tensor_text(output: Output) -> str:
    """``f32[?,8,8,32]``: the dtype and static shape of an edge."""
    return dtype_text(output.dtype) + dims_text(output.shape)


def _attr_text(name: str, value: Any) -> str | None:
    if name == "data_format" or name == "padding":
        return str(value)
    if name == "is_training":
        return "training" if value else "inference"
    if name in ("epsilon", "variance_epsilon"):
        return f"eps={_number(value)}"
    if name == "exponential_avg_factor":
        return None if value == 1.0 else f"avg_factor={_number(value)}"
    if isinstance(value, bool):
        return name if value else None
    if isinstance(value, (list, tuple)):
        return f"{name}=[{','.join(str(v) for v in value)}]"
    return f"{name}={value}"


def attr_summary(op: Operation) -> str:
    """The key attrs of a node, e.g. ``NHWC · training · eps=0.001``."""
    parts = [_attr_text(name, op.attrs[name]) for name in _KEY_ATTRS if name in op.attrs]
    return " · ".join(p for p in parts if p)


def _const_summary(op: Operation) -> str:
    value = op.attrs.get("value")
    if not isinstance(value, np.ndarray) or value.size > 4:
        return ""
    if value.ndim == 0:
        return _number(value) if value.dtype.kind == "f" else str(value.item())
    flat = [(_number(v) if value.dtype.kind == "f" else str(v.item())) for v in value.ravel()]
    return "[" + ", ".join(flat) + "]"


# ----------------------------------------------------------------------------- the drawing


def _as_graph(graph_or_scope: Graph | Scope) -> Graph:
    if isinstance(graph_or_scope, Scope):
        return graph_or_scope.graph()
    if isinstance(graph_or_scope, Graph):
        return graph_or_scope
    raise InvalidArgumentError(f"viz: expected a Graph or a Scope, got "
                               f"{type(graph_or_scope).__name__}")


def _fetch_ops(graph: Graph, fetches: Any) -> list[Operation]:
    if isinstance(fetches, (Output, Operation, str)) or hasattr(fetches, "operation"):
        fetches = [fetches]
    ops = []
    for fetch in fetches:
        if isinstance(fetch, str):
            try:
                op = graph.get_operation(fetch.split(":")[0])
            except KeyError as exc:
                raise InvalidArgumentError(f"viz: fetch '{fetch}': {exc.args[0]}") from None
        elif isinstance(fetch, Output):
            op = fetch.op
        elif isinstance(fetch, Operation):
            op = fetch
        elif isinstance(getattr(fetch, "operation", None), Operation):
            op = fetch.operation
        else:
            raise InvalidArgumentError(f"viz: each fetch must be an Output, an Operation or an "
                                       f"op name, got {type(fetch).__name__}")
        if op.graph is not graph:
            raise InvalidArgumentError(f"viz: fetch '{op.name}' belongs to another graph")
        ops.append(op)
    return ops


def needed_operations(graph: Graph, fetches: Any) -> list[Operation]:
    """The ops ``fetches`` need (walking inputs and control inputs back), in creation order."""
    seen: dict[str, Operation] = {}
    stack = _fetch_ops(graph, fetches)
    while stack:
        op = stack.pop()
        if op.name in seen:
            continue
        seen[op.name] = op
        stack.extend(i.op for i in op.inputs)
        stack.extend(op.control_inputs)
    return [op for op in graph.operations() if op.name in seen]


def _prefixes(name: str) -> list[str]:
    parts = name.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


class _Layout:
    """Which cluster each drawn item sits in, and what the collapsed groups are."""

    def __init__(self, graph: Graph, ops: list[Operation], collapse: Sequence[str]) -> None:
        self.op_names = {op.name for op in graph.operations()}
        self.groups = self._groups(graph, collapse)
        # what gets a node, in drawing order: op names, and the prefixes of collapsed groups
        self.items: list[str] = []
        self.group_of: dict[str, str] = {}
        self.group_ops: dict[str, list[Operation]] = {}
        for op in ops:
            group = self._group_for(op.name)
            if group is None:
                self.items.append(op.name)
            else:
                self.group_of[op.name] = group
                if group not in self.group_ops:
                    self.group_ops[group] = []
                    self.items.append(group)
                self.group_ops[group].append(op)

    def _groups(self, graph: Graph, collapse: Sequence[str]) -> list[str]:
        groups = []
        names = [op.name for op in graph.operations()]
        for prefix in collapse:
            prefix = prefix.strip("/")
            if not prefix:
                continue
            if not any(n == prefix or n.startswith(prefix + "/") for n in names):
                tops = sorted({n.split("/")[0] for n in names if "/" in n})
                raise InvalidArgumentError(
                    f"viz: collapse prefix '{prefix}' matches no operation; the top-level name "
                    f"scopes are: {', '.join(tops) or '(none)'}")
            groups.append(prefix)
        return groups

    def _group_for(self, name: str) -> str | None:
        """The outermost collapse group holding ``name``, if any."""
        best = None
        for group in self.groups:
            if (name == group or name.startswith(group + "/")) and (
                    best is None or len(group) < len(best)):
                best = group
        return best

    def clusters_of(self, item: str) -> list[str]:
        """The nested clusters an item sits in, outermost first.

        Every proper name prefix is a cluster, except a prefix that is itself an op's name:
        the constants made from an op's non-tensor inputs (``bn/mean`` for op ``bn``) are drawn
        beside their op, not in a cluster of their own.
        """
        return [p for p in _prefixes(item) if p not in self.op_names]


class _Cluster:
    """A name-scope cluster: its path and its entries, ``(item, None)`` for a node or
    ``(None, child)`` for a nested cluster, in order of first appearance."""

    __slots__ = ("path", "children", "entries")

    def __init__(self, path: str) -> None:
        self.path = path
        self.children: dict[str, _Cluster] = {}
        self.entries: list[tuple[str | None, _Cluster | None]] = []


def _is_gradient(path: str) -> bool:
    return path == GRADIENT_SCOPE or path.startswith(GRADIENT_SCOPE + "/")


class _Writer:
    def __init__(self, graph: Graph, ops: list[Operation], fetched: set[str],
                 show_shapes: bool, collapse: Sequence[str], legend: bool) -> None:
        self.graph = graph
        self.ops = ops
        self.fetched = fetched
        self.show_shapes = show_shapes
        self.layout = _Layout(graph, ops, collapse)
        self.legend = legend
        self.has_gradients = any(_is_gradient(op.name) for op in ops)

    # --- nodes

    def node_line(self, item: str, cluster: str) -> str:
        if item in self.layout.group_ops:
            return self.group_line(item, cluster)
        op = self.graph.get_operation(item)
        category = op_category(op.type)
        colours = CATEGORIES[category]
        shown_name = op.name[len(cluster) + 1:] if cluster else op.name
        attrs = [f"fillcolor={quote(colours.fill)}", f"color={quote(colours.border)}"]
        if op.type == "Const":
            value = _const_summary(op)
            label = "<b>Const</b>" + (f" {html(shown_name)}" if shown_name != "Const" else "")
            if value:
                label += f"<br/>{html(value)}"
            attrs[:0] = [f"label=<<font point-size=\"8\">{label}</font>>"]
            attrs += ["fontsize=8", 'margin="0.05,0.02"', "height=0.2"]
        else:
            lines = [f"<b>{html(op.type)}</b>"]
            if shown_name != op.type:
                lines.append(f'<font point-size="8">{html(shown_name)}</font>')
            summary = attr_summary(op)
            if summary:
                lines.append(f'<font point-size="8">{html(summary)}</font>')
            if op.device:
                lines.append(f'<font point-size="7">@{html(op.device)}</font>')
            attrs[:0] = ["label=<" + "<br/>".join(lines) + ">"]
        style = "rounded,filled"
        if op.op_def.deprecation:
            style += ",dashed"
            attrs.append("penwidth=1.5")
        if op.name in self.fetched:
            style += ",bold"
        if style != "rounded,filled":
            attrs.append(f"style={quote(style)}")
        attrs.append(f"tooltip={quote(self.tooltip(op))}")
        return f"{quote(op.name)} [{', '.join(attrs)}];"

    def tooltip(self, op: Operation) -> str:
        lines = [f"{op.name} ({op.type})"]
        if op.device:
            lines.append(f"device: {op.device}")
        for name in sorted(op.attrs):
            value = op.attrs[name]
            if isinstance(value, np.ndarray):
                value = f"<{value.dtype} array of shape {list(value.shape)}>"
            elif isinstance(value, float):
                value = format(value, ".7g")
            elif hasattr(value, "dims"):
                value = dims_text(value)
            lines.append(f"{name} = {value}")
        for arg, out in zip(output_args(op.op_def, op.attrs), op.outputs, strict=True):
            lines.append(f"-> {arg.name}: {tensor_text(out)}")
        if op.op_def.deprecation:
            lines.append(f"deprecated: {op.op_def.deprecation}")
        return "\n".join(lines)

    def group_line(self, group: str, cluster: str) -> str:
        members = self.layout.group_ops[group]
        counts: dict[str, int] = {}
        for op in members:
            counts[op.type] = counts.get(op.type, 0) + 1
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        kinds = ", ".join(f"{n}×{t}" if n > 1 else t for t, n in ranked[:3])
        if len(ranked) > 3:
            kinds += ", …"
        shown = group[len(cluster) + 1:] if cluster else group
        count = f"{len(members)} op" + ("s" if len(members) != 1 else "")
        label = (f'<<b>{html(shown)}/</b><br/><font point-size="8">{count}</font><br/>'
                 f'<font point-size="8">{html(kinds)}</font>>')
        fill, border = ("#fde0dc", "#c0504d") if _is_gradient(group) else ("#eeeeee", "#666666")
        return (f"{quote(group)} [label={label}, shape=box3d, style=filled, "
                f"fillcolor={quote(fill)}, color={quote(border)}, "
                f"tooltip={quote(group + '/ (collapsed, ' + count + ')')}];")

    # --- clusters

    def cluster_tree(self) -> _Cluster:
        root = _Cluster("")
        for item in self.layout.items:
            cluster = root
            for path in self.layout.clusters_of(item):
                if path not in cluster.children:
                    cluster.children[path] = _Cluster(path)
                    cluster.entries.append((None, cluster.children[path]))
                cluster = cluster.children[path]
            cluster.entries.append((item, None))
        return root

    def emit_cluster(self, cluster: _Cluster, indent: str, out: list[str]) -> None:
        for item, child in cluster.entries:
            if child is None:
                out.append(indent + self.node_line(item, cluster.path))
                continue
            label = child.path[len(cluster.path) + 1:] if cluster.path else child.path
            out.append(f"{indent}subgraph {quote('cluster_' + child.path)} {{")
            inner = indent + "  "
            if _is_gradient(child.path):
                top = child.path == GRADIENT_SCOPE
                out.append(f'{inner}label=<<b>{html(label)}</b>>; labeljust=l; '
                           f'style="dashed,rounded,filled"; '
                           f'fillcolor="{"#fff4f2" if top else "#fde6e1"}"; '
                           f'color="{"#d06a5f" if top else "#e0a098"}";')
            else:
                out.append(f'{inner}label=<<b>{html(label)}</b>>; labeljust=l; '
                           f'style="rounded,filled"; '
                           f'fillcolor="#f4f6f8"; color="#b8c0c8";')
            self.emit_cluster(child, inner, out)
            out.append(f"{indent}}}")

    # --- edges

    def node_id(self, op: Operation) -> str:
        return self.layout.group_of.get(op.name, op.name)

    def edges(self) -> list[str]:
        drawn = {op.name for op in self.ops}
        lines: list[str] = []
        seen: set[str] = set()

        def add(line: str) -> None:
            if line not in seen:
                seen.add(line)
                lines.append(line)

        for op in self.ops:
            dst = self.node_id(op)
            for index, source in enumerate(op.inputs):
                if source.op.name not in drawn:
                    continue
                src = self.node_id(source.op)
                if src == dst and src in self.layout.group_ops:
                    continue  # an edge inside a collapsed group
                out_name = output_args(source.op.op_def, source.op.attrs)[source.index].name
                in_args = input_args(op.op_def, op.attrs)
                in_name = in_args[index].name if index < len(in_args) else ""
                parts = []
                if len(source.op.outputs) > 1:
                    parts.append(out_name)
                if self.show_shapes:
                    parts.append(tensor_text(source))
                # xlabel, not label: dot lays plain edge labels out as extra nodes, which can
                # push unrelated nodes into a cluster's box (seen with graphviz 2.43); xlabels
                # are placed after the layout (forcelabels=true keeps them all)
                attrs = [f"xlabel={quote(chr(10).join(parts))}"] if parts else []
                if out_name.startswith("reserve_space") or in_name.startswith("reserve_space"):
                    attrs += ["style=dotted", 'color="#9e9e9e"', 'fontcolor="#9e9e9e"']
                if self.has_gradients and not _is_gradient(src) and not _is_gradient(dst):
                    # a strong pull between forward ops keeps the forward graph compact and
                    # on top instead of being dragged down by its many backward consumers
                    attrs.append("weight=4")
                suffix = f" [{', '.join(attrs)}]" if attrs else ""
                add(f"{quote(src)} -> {quote(dst)}{suffix};")
            for control in op.control_inputs:
                if control.name not in drawn:
                    continue
                src = self.node_id(control)
                if src == dst and src in self.layout.group_ops:
                    continue
                add(f'{quote(src)} -> {quote(dst)} [style=dashed, color="#888888", '
                    f'arrowhead=odot];')
        return lines

    def legend_line(self) -> str:
        """A one-row legend, as the graph's label under the drawing (so it takes no rank)."""
        used = {op_category(op.type) for op in self.ops if op.name not in self.layout.group_of}
        cells = [f'<td bgcolor="{c.fill}" color="{c.border}" style="rounded">{html(c.title)}</td>'
                 for category, c in CATEGORIES.items() if category in used]
        if any(_is_gradient(op.name) for op in self.ops):
            cells.append('<td bgcolor="#fff4f2" color="#d06a5f" style="dashed">gradients/ '
                         "(backward pass)</td>")
        cells += ['<td border="0">⋯ saved statistics (reserve_space)</td>',
                  '<td border="0">- - control dependency</td>']
        table = ('<table border="0" cellborder="1" cellspacing="3" cellpadding="2"><tr>'
                 + "".join(cells) + "</tr></table>")
        return f"label=<{table}>; labelloc=b; labeljust=c; fontsize=8;"

    def write(self) -> str:
        out = [
            "digraph minigraph {",
            '  graph [rankdir=TB, nodesep=0.35, ranksep=0.45, '
            'fontname="Helvetica", fontsize=10, pad=0.2, forcelabels=true];',
            '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10, '
            'margin="0.1,0.04", height=0.3, penwidth=1, color="#555555", fillcolor="#ffffff"];',
            '  edge [fontname="Helvetica", fontsize=8, color="#666666", fontcolor="#555555", '
            "arrowsize=0.6, penwidth=0.9];",
        ]
        self.emit_cluster(self.cluster_tree(), "  ", out)
        out += ["  " + line for line in self.edges()]
        if self.legend:
            out.append("  " + self.legend_line())
        out.append("}")
        return "\n".join(out) + "\n"


def to_dot(graph_or_scope: Graph | Scope, *, fetches: Any = None, show_shapes: bool = True,
           collapse: Iterable[str] | str | None = None, legend: bool = False) -> str:
    """The graph as DOT text, identical for identical graphs.

    Args:
      graph_or_scope: the :class:`~minigraph.Graph`, or a :class:`~minigraph.Scope` on it.
      fetches: an Output, Operation, op name or a list of them: draw only what they need
        (walking inputs and control inputs back from their ops); fetched ops get a bold border.
      show_shapes: label edges with dtype and static shape (``f32[?,8,8,32]``).
      collapse: name-scope prefixes (``"gradients"``, ``"layer1"``) each drawn as one box;
        edges to and from the scope's ops are redrawn to the box.
      legend: add a legend of the op categories used.
    """
    graph = _as_graph(graph_or_scope)
    if fetches is None:
        ops, fetched = graph.operations(), set()
    else:
        fetched = {op.name for op in _fetch_ops(graph, fetches)}
        ops = needed_operations(graph, fetches)
    if isinstance(collapse, str):
        collapse = [collapse]
    return _Writer(graph, ops, fetched, show_shapes, list(collapse or ()), legend).write()
