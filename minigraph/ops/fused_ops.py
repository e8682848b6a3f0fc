"""The remapper's fused ops (``minigraph/optimizer/remapper.py``), with TensorFlow's internal
names and signatures: ``_FusedConv2D``, ``_FusedDepthwiseConv2dNative``, ``_FusedMatMul``.

Each is a head (the convolution or matmul, with that op's attrs) followed by the elementwise
stages ``fused_ops`` lists, in this order, each at most once:

====================  ======================================  =========================
stage                 what it computes (as the op it replaces)  its ``args``
====================  ======================================  =========================
``BiasAdd``           ``BiasAdd(y, bias)`` (NHWC: last axis)  bias
``FusedBatchNorm``    ``FusedBatchNormV3(y, ..., epsilon,      scale, offset, mean,
                      is_training=False).y`` (NHWC)           variance
``Add``               ``AddV2(y, side_input)``                side_input
``Relu``/``Relu6``    ``Relu(y)`` / ``Relu6(y)``              (none)
====================  ======================================  =========================

The ops have no semantics of their own: the shape function, the run-time checks and the
reference kernels are those of the ops replaced, applied to *member* ops rebuilt from the
fused node's attrs (:func:`members`), so a fused node raises what its chain would and
computes its bits. Nothing builds them but the remapper (no wrapper in ``minigraph.ops``);
they have no gradient (the remapper runs after the gradients exist).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from minigraph.framework import dtypes
from minigraph.framework.errors import InvalidArgumentError
from minigraph.framework.graph import Graph, Operation
from minigraph.framework.op_def import (
    ArgDef,
    AttrDef,
    InferenceContext,
    OpDef,
    RunContext,
    build_operation,
    get_op_def,
    register_op,
    required,
)
from minigraph.framework.scope import Scope
from minigraph.framework.tensor_shape import TensorShape

__all__: list[str] = []

# fused op -> the op of its head
HEADS = {"_FusedConv2D": "Conv2D", "_FusedDepthwiseConv2dNative": "DepthwiseConv2dNative",
         "_FusedMatMul": "MatMul"}
# stage -> (rank in a chain, the op it stands for, how many args it takes)
STAGES = {"BiasAdd": (0, "BiasAdd", 1), "FusedBatchNorm": (1, "FusedBatchNormV3", 4),
          "Add": (2, "AddV2", 1), "Relu": (3, "Relu", 0), "Relu6": (3, "Relu6", 0)}
FLOATS = (dtypes.float16, dtypes.float32, dtypes.float64)
MAX_CACHED = 4096  # member graphs kept per process (one per fused node and input shapes:
# more than the fused nodes of the largest model, which would rebuild them at every step)


def check_fused_ops(value: Sequence[str]) -> str | None:
    """Attr check: known stages, strictly in chain order."""
    ranks = []
    for stage in value:
        if stage not in STAGES:
            return (f"has the unsupported stage {stage!r}; minigraph fuses "
                    f"{', '.join(STAGES)} (in that order)")
        ranks.append(STAGES[stage][0])
    if any(b <= a for a, b in zip(ranks, ranks[1:])):
        return f"must list its stages in the order {', '.join(STAGES)}, each once: {value!r}"
    return None


def _fused_attrs() -> list[AttrDef]:
    return [required("num_args", "int"),
            AttrDef("fused_ops", "list(string)", default=(), check=check_fused_ops,
                    doc="The stages after the head, in order."),
            AttrDef("epsilon", "float", default=0.0001,
                    doc="The FusedBatchNorm stage's epsilon."),
            AttrDef("leakyrelu_alpha", "float", default=0.2,
                    doc="TensorFlow's LeakyRelu stage (not fused by minigraph).")]


def _head_attr(head: str, name: str) -> AttrDef:
    return get_op_def(head).attr_def(name)


def _conv_def() -> OpDef:
    conv = lambda name: _head_attr("Conv2D", name)  # noqa: E731
    return OpDef(
        name="_FusedConv2D",
        inputs=[ArgDef("input", type_attr="T"), ArgDef("filter", type_attr="T"),
                ArgDef("args", type_list_attr="TArgs"),
                ArgDef("host_args", dtype=dtypes.float32, number_attr="num_host_args")],
        outputs=[ArgDef("output", type_attr="T")],
        attrs=[required("T", "type", allowed=FLOATS), required("TArgs", "list(type)"),
               AttrDef("num_host_args", "int", default=0), conv("strides"),
               conv("padding"), conv("explicit_paddings"), conv("data_format"),
               AttrDef("filter_format", "string", default="HWIO", allowed=("HWIO",)),
               conv("dilations"), conv("use_cudnn_on_gpu"), *_fused_attrs()],
        shape_fn=lambda ctx: [_shape(ctx)], validate=lambda ctx, values: _validate(ctx, values))


def _depthwise_def() -> OpDef:
    conv = lambda name: _head_attr("DepthwiseConv2dNative", name)  # noqa: E731
    return OpDef(
        name="_FusedDepthwiseConv2dNative",
        inputs=[ArgDef("input", type_attr="T"), ArgDef("filter", type_attr="T"),
                ArgDef("args", type_attr="T", number_attr="num_args")],
        outputs=[ArgDef("output", type_attr="T")],
        attrs=[required("T", "type", allowed=FLOATS), *_fused_attrs()[:1], conv("strides"),
               required("padding", "string", allowed=("SAME", "VALID")),
               conv("data_format"), conv("dilations"), *_fused_attrs()[1:]],
        shape_fn=lambda ctx: [_shape(ctx)], validate=lambda ctx, values: _validate(ctx, values))


def _matmul_def() -> OpDef:
    return OpDef(
        name="_FusedMatMul",
        inputs=[ArgDef("a", type_attr="T"), ArgDef("b", type_attr="T"),
                ArgDef("args", type_attr="T", number_attr="num_args")],
        outputs=[ArgDef("product", type_attr="T")],
        attrs=[_head_attr("MatMul", "transpose_a"), _head_attr("MatMul", "transpose_b"),
               required("T", "type", allowed=FLOATS), *_fused_attrs()],
        shape_fn=lambda ctx: [_shape(ctx)], validate=lambda ctx, values: _validate(ctx, values))


FUSED_CONV2D = register_op(_conv_def())
FUSED_DEPTHWISE = register_op(_depthwise_def())
FUSED_MATMUL = register_op(_matmul_def())


# ----------------------------------------------------------------------------- members


def _arg_slices(attrs: dict[str, Any]) -> list[slice]:
    """Where the head's two inputs and then each stage's args (the running value not
    included) lie among a fused node's inputs."""
    slices, start = [slice(0, 2)], 2
    for stage in attrs["fused_ops"]:
        count = STAGES[stage][2]
        slices.append(slice(start, start + count))
        start += count
    return slices


def split_inputs(attrs: dict[str, Any], inputs: Sequence[Any]) -> tuple[list, list[list]]:
    """The head's two inputs and each stage's args (the running value not included)."""
    head, *stages = (list(inputs[part]) for part in _arg_slices(attrs))
    return head, stages


def _check_counts(op_type: str, name: str, attrs: dict[str, Any], arg_count: int) -> None:
    needed = sum(STAGES[stage][2] for stage in attrs["fused_ops"])
    if attrs["num_args"] != arg_count or needed != arg_count:
        raise InvalidArgumentError(
            f"{op_type} '{name}': fused_ops {list(attrs['fused_ops'])} take {needed} args; "
            f"got {arg_count} (num_args={attrs['num_args']})")
    if attrs.get("num_host_args", 0):
        raise InvalidArgumentError(f"{op_type} '{name}': minigraph takes no host_args")


_lock = threading.Lock()  # sessions run steps from several threads at once
_members: OrderedDict[tuple, tuple[dict, list[Operation]]] = OrderedDict()


def members(op_type: str, name: str, attrs: dict[str, Any],
            specs: Sequence[tuple[dtypes.DType, TensorShape]]) -> list[Operation]:
    """The head and stage ops a fused node of these attrs stands for, built on placeholders
    of the inputs' (dtype, shape) ``specs`` in a graph of their own (cached): their shape
    functions check the shapes as the chain's own ops would, and their kernels run them."""
    # keyed by the attrs dict itself (a node's never changes; kept in the entry, so its id
    # is not reused while the entry lives)
    key = (op_type, name, id(attrs),
           tuple((d, tuple(s.dims) if s.rank is not None else None) for d, s in specs))
    with _lock:
        found = _members.get(key)
        if found is not None and found[0] is attrs:
            _members.move_to_end(key)
            return found[1]
    _check_counts(op_type, name, attrs, len(specs) - 2)
    root = Scope(Graph(notify=False))
    placeholder = get_op_def("Placeholder")
    values = [build_operation(root.WithOpName(f"input_{i}"), placeholder, [],
                              {"dtype": dtype, "shape": shape}).outputs[0]
              for i, (dtype, shape) in enumerate(specs)]
    head_inputs, stage_args = split_inputs(attrs, values)
    head_def = get_op_def(HEADS[op_type])
    head_attrs = {a.name: attrs[a.name] for a in head_def.attrs if a.name in attrs}
    built = [build_operation(root.WithOpName(f"{name}/{head_def.name}"), head_def,
                             head_inputs, head_attrs)]
    y = built[0].outputs[0]
    for stage, args in zip(attrs["fused_ops"], stage_args):
        stage_def = get_op_def(STAGES[stage][1])
        stage_attrs: dict[str, Any] = {}
        if stage == "BiasAdd":
            stage_attrs = {"data_format": "NHWC"}
        elif stage == "FusedBatchNorm":
            stage_attrs = {"epsilon": attrs["epsilon"], "is_training": False,
                           "data_format": "NHWC"}
        arguments = [y, *args]
        built.append(build_operation(root.WithOpName(f"{name}/{stage_def.name}"), stage_def,
                                     arguments, stage_attrs))
        y = built[-1].outputs[0]
    with _lock:
        _members[key] = (attrs, built)
        if len(_members) > MAX_CACHED:
            _members.popitem(last=False)
    return built


def _shape(ctx: InferenceContext) -> TensorShape:
    specs = list(zip(ctx.input_dtypes, ctx.input_shapes))
    return members(ctx.op_def.name, ctx.name, ctx.attrs, specs)[-1].outputs[0].shape


class Prepared:
    """One fused node at one input signature (the values' types, dtypes and shapes): its
    member ops, whether their checks passed (they read shapes only: they pass for every
    input of the signature) and what its kernels keep (``cache``)."""

    __slots__ = ("attrs", "members", "slices", "checked", "cache")

    def __init__(self, attrs: dict[str, Any], built: list[Operation]) -> None:
        self.attrs, self.members = attrs, built
        self.slices = _arg_slices(attrs)  # each member's inputs among the node's
        self.checked = False
        self.cache: dict[str, Any] = {}


_prepared: OrderedDict[tuple, Prepared] = OrderedDict()


def prepare(op: Operation, values: Sequence[Any]) -> Prepared:
    """The :class:`Prepared` of ``op`` for ``values`` (cached per node and signature; read
    without the lock, at every step of every fused node: a dict lookup is atomic, and
    entries leave in the order they came, so a steady model's stay)."""
    key = (id(op.attrs), *[(type(v), v.dtype, v.shape) for v in values])
    found = _prepared.get(key)
    if found is not None and found.attrs is op.attrs:
        return found
    specs = [(inp.dtype, TensorShape(v.shape)) for inp, v in zip(op.inputs, values)]
    found = Prepared(op.attrs, members(op.type, op.name, op.attrs, specs))
    with _lock:
        _prepared[key] = found
        if len(_prepared) > MAX_CACHED:
            _prepared.popitem(last=False)
    return found


def member_values(op: Operation, values: Sequence[Any], prepared: Prepared | None = None
                  ) -> list[tuple[Operation, list]]:
    """Each member op of ``op`` for these values, with its inputs other than the running
    value (the head's: both)."""
    prepared = prepared or prepare(op, values)
    values = values if type(values) is list else list(values)
    return [(member, values[part]) for member, part in zip(prepared.members, prepared.slices)]


def _validate(ctx: RunContext, values: list) -> None:
    """Each member's run-time check, on its inputs' values (the running value's only
    through its shape: members' checks do not read it), once per signature."""
    prepared = prepare(ctx.op, values)
    if prepared.checked:
        return
    for index, (member, inputs) in enumerate(member_values(ctx.op, values, prepared)):
        validate = member.op_def.validate
        if validate is not None:
            running = [] if index == 0 else [_Running(member.inputs[0].shape)]
            validate(RunContext(member), [*running, *inputs])
    prepared.checked = True


class _Running:
    """The running value's stand-in for a stage's check: its shape, dtype-free."""

    __slots__ = ("shape", "ndim")

    def __init__(self, shape: TensorShape) -> None:
        self.shape = tuple(shape.as_list())
        self.ndim = len(self.shape)
