"""GraphDefs exchanged with TensorFlow 2.21: graphs TensorFlow makes in this test (frozen Keras
models, raw batch-norm training and inference graphs, a producer-8 global-normalization
graph) imported and run here against TensorFlow's own outputs, in every form TF writes them
(binary, text, default attrs stripped, ``_output_shapes``, any node order); minigraph graphs
exported and run by TensorFlow; and every import error checked against TensorFlow's."""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from conftest import BACKENDS

import minigraph as mg
from minigraph import ops
from minigraph.interop import protos, tensors

pytestmark = pytest.mark.oracle
tf = pytest.importorskip("tensorflow")
tf_graphs = pytest.importorskip("minigraph.testing.tf_graphs")

ROOT = Path(__file__).resolve().parent.parent

# builder name and arguments -> the graph (built once per test run)
GRAPH_SPECS = {
    "keras_cnn": ("keras_cnn",),
    "residual_stack": ("residual_stack",),
    "mobilenet_v2": ("mobilenet_v2",),
    "projection_shortcut": ("projection_shortcut",),
    "conv3d_net": ("conv3d_net",),
    "keras_grouped_convs": ("keras_grouped_convs",),
    "keras_transposed_convs": ("keras_transposed_convs",),
    "bn_training_nhwc_f32": ("batch_norm_training", "NHWC", "float32"),
    "bn_training_nchw_f16": ("batch_norm_training", "NCHW", "float16"),
    "bn_training_nchw_bf16": ("batch_norm_training", "NCHW", "bfloat16"),
    "bn_inference_nchw_f16": ("batch_norm_inference", "NCHW", "float16"),
    "bn_inference_nchw_bf16": ("batch_norm_inference", "NCHW", "bfloat16"),
    "bn_inference_nhwc_f16": ("batch_norm_inference", "NHWC", "float16"),
    "bn_v1_v2": ("batch_norm_v1_v2",),
    "index_and_list_ops": ("index_and_list_ops",),
    "keras_layout_layers": ("keras_layout_layers",),
    "layout_raw_ops": ("layout_raw_ops",),
    "global_norm_producer_8": ("global_normalization_producer_8",),
    "nchw_conv_net": ("nchw_conv_net",),
}
# traced only (TF's CPU kernels refuse NCHW convolutions): checked against minigraph itself
UNRUN = {"nchw_conv_net"}
_BUILT: dict[str, tf_graphs.TFGraph] = {}


def tf_graph(key: str) -> tf_graphs.TFGraph:
    if key not in _BUILT:
        builder, *args = GRAPH_SPECS[key]
        _BUILT[key] = getattr(tf_graphs, builder)(*args)
    return _BUILT[key]


def assert_matches(actual: list[np.ndarray], expected: list[np.ndarray], what: str) -> None:
    """Same dtype and shape; values within a few ulps of the output's dtype, relative to the
    output's largest magnitude (TF's oneDNN convolutions sum in another order)."""
    assert len(actual) == len(expected), what
    for index, (a, e) in enumerate(zip(actual, expected)):
        assert a.dtype == e.dtype and a.shape == e.shape, (what, index, a.dtype, e.dtype,
                                                           a.shape, e.shape)
        eps = {np.dtype(np.float16): 2.0 ** -10, np.dtype(ml_dtypes.bfloat16): 2.0 ** -7
               }.get(a.dtype, 2.0 ** -23)
        e64, a64 = e.astype(np.float64), a.astype(np.float64)
        scale = max(1.0, float(np.max(np.abs(e64)))) if e.size else 1.0
        np.testing.assert_allclose(a64, e64, rtol=0, atol=64 * eps * scale,
                                   err_msg=f"{what}: output {index}")


def run_imported(root: mg.Scope, graph: tf_graphs.TFGraph, backend: str, prefix: str = ""
                 ) -> list[np.ndarray]:
    feeds = {prefix + name: value for name, value in graph.feeds.items()}
    return mg.ClientSession(root, backend=backend).Run(feeds, [prefix + f
                                                              for f in graph.fetches])


# ----------------------------------------------------------------------------- import


def _variant(graph: tf_graphs.TFGraph, variant: str, tmp_path: Path):
    """The graph in one of the forms TF writes it."""
    if variant == "pb_file":
        path = tmp_path / "model.pb"
        path.write_bytes(graph.graph_def)
        return path
    if variant == "pbtxt_file":
        path = tmp_path / "model.pbtxt"
        path.write_text(tf_graphs.as_text(graph.graph_def))
        return str(path)
    if variant == "tf_message":
        return tf.compat.v1.GraphDef.FromString(graph.graph_def)
    return {"stripped_defaults": tf_graphs.stripped_default_attrs,
            "output_shapes": tf_graphs.with_output_shapes,
            "reversed_nodes": tf_graphs.reversed_nodes}[variant](graph.graph_def)


@pytest.mark.parametrize("key", sorted(GRAPH_SPECS.keys() - UNRUN))
def test_imported_graph_computes_what_tensorflow_computed(key):
    graph = tf_graph(key)
    root = mg.import_graph_def(graph.graph_def)
    for backend in BACKENDS:
        assert_matches(run_imported(root, graph, backend), graph.expected, f"{key} {backend}")


def test_keras_layers_freeze_to_the_layout_ops():
    """The Keras graph really holds the ops it is there for (so its import tests cover them)."""
    used = {node.op for node in protos.GraphDef().FromString(
        tf_graph("keras_layout_layers").graph_def).node}
    assert {"GatherV2", "ConcatV2", "Split", "SplitV", "SpaceToBatchND", "BatchToSpaceND",
            "MirrorPad", "ReverseV2", "DepthToSpace", "SpaceToDepth", "StopGradient", "OneHot",
            "Range", "Pad", "StridedSlice"} <= used


@pytest.mark.skipif("native" not in BACKENDS, reason="fusion runs on the native backend")
@pytest.mark.parametrize("key", sorted(GRAPH_SPECS))
def test_fused_plan_is_bit_for_bit_the_plain_one(key):
    """Every TF-made graph gives the same bits with the plan-time fusion on and off."""
    graph = tf_graph(key)
    root = mg.import_graph_def(graph.graph_def)
    results = [mg.ClientSession(root, backend="native",
                                optimizer=mg.OptimizerOptions(remapper=remapper))
               .Run(graph.feeds, graph.fetches) for remapper in (True, False)]
    for fused, plain in zip(*results):
        assert fused.dtype == plain.dtype and fused.shape == plain.shape
        assert fused.tobytes() == plain.tobytes(), key


@pytest.mark.parametrize("key", sorted(k for k in GRAPH_SPECS if "nchw" in k))
def test_layout_pass_runs_tensorflow_nchw_graphs_bit_for_bit(key):
    """TF's channels-first graphs (convolutions, pools, bias adds, batch norms and their
    gradients) give the same bits with the layout pass (alone, and with every pass) as with
    none, on every backend; in ``nchw_conv_net`` no transpose reads another."""
    graph = tf_graph(key)
    root = mg.import_graph_def(graph.graph_def)
    off = mg.OptimizerOptions.all_off()
    for backend in BACKENDS:
        plain = mg.ClientSession(root, backend=backend, optimizer=off).Run(graph.feeds,
                                                                          graph.fetches)
        for options in (mg.OptimizerOptions(), replace(off, layout=True)):
            rewritten = mg.ClientSession(root, backend=backend, optimizer=options).Run(
                graph.feeds, graph.fetches)
            for a, b in zip(rewritten, plain):
                assert a.dtype == b.dtype and a.shape == b.shape
                assert a.tobytes() == b.tobytes(), (key, backend, options)
    optimized = mg.optimize(root, graph.fetches, list(graph.feeds))
    transposes = [op for op in optimized if op.type == "Transpose"]
    assert all(t.inputs[0].op.type != "Transpose" for t in transposes)
    if key == "nchw_conv_net":
        assert any(op.attrs.get("data_format") == "NHWC" for op in optimized)


@pytest.mark.parametrize("variant", ["pb_file", "pbtxt_file", "tf_message", "stripped_defaults",
                                     "output_shapes", "reversed_nodes"])
@pytest.mark.parametrize("key", sorted(GRAPH_SPECS.keys() - UNRUN))
def test_every_form_tensorflow_writes_imports(key, variant, tmp_path):
    graph = tf_graph(key)
    root = mg.import_graph_def(_variant(graph, variant, tmp_path), name="imported")
    assert all(op.name.startswith("imported/") for op in root.graph().get_operations())
    assert_matches(run_imported(root, graph, BACKENDS[-1], "imported/"), graph.expected,
                   f"{key} as {variant}")


def test_stripped_graph_really_lacks_the_defaults():
    stripped = protos.GraphDef().FromString(
        tf_graphs.stripped_default_attrs(tf_graph("keras_cnn").graph_def))
    attrs_of = {node.op: set(node.attr) for node in stripped.node}
    assert "data_format" not in attrs_of["Conv2D"] and "dilations" not in attrs_of["Conv2D"]
    assert "exponential_avg_factor" not in attrs_of["FusedBatchNormV3"]
    assert "data_format" not in attrs_of["FusedBatchNormV3"]  # is_training=False stays: True
    assert "Tidx" not in attrs_of["Mean"] and "keep_dims" not in attrs_of["Mean"]


def test_imported_nodes_keep_names_devices_and_control_edges():
    graph = tf_graph("keras_cnn")
    root = mg.import_graph_def(graph.graph_def)
    g = root.graph()
    parsed = protos.GraphDef().FromString(graph.graph_def)
    assert sorted(op.name for op in g.get_operations()) == sorted(n.name for n in parsed.node)
    no_op = next(op for op in g.get_operations() if op.type == "NoOp")
    assert no_op.control_inputs, "frozen TF 2 graphs hang their outputs on a NoOp"
    x = g.get_tensor_by_name(next(iter(graph.feeds)))
    assert x.op.type == "Placeholder" and x.shape.as_list() == [None, 28, 28, 1]
    mg.ClientSession(root).Run(graph.feeds, [], targets=[no_op.name])


# ----------------------------------------------------------------------------- export


@pytest.mark.parametrize("key", sorted(GRAPH_SPECS.keys() - UNRUN))
def test_exported_graph_runs_in_tensorflow(key):
    graph = tf_graph(key)
    exported = mg.export_graph_def(mg.import_graph_def(graph.graph_def))
    if graph.producer is not None:
        assert exported.versions.producer == graph.producer == 8
    theirs = tf_graphs.run_graph_def(exported.SerializeToString(), graph.feeds, graph.fetches)
    assert_matches(theirs, graph.expected, f"{key} exported, run by TensorFlow")


@pytest.mark.parametrize("key", sorted(GRAPH_SPECS))
def test_reimported_graph_is_the_same_graph(key, tmp_path):
    graph = tf_graph(key)
    first = mg.import_graph_def(graph.graph_def)
    path = tmp_path / "again.pbtxt"
    mg.export_graph_def(first, path)
    again = mg.import_graph_def(path)
    assert [(op.name, op.type, op.attrs.keys()) for op in first.graph().get_operations()] == \
        [(op.name, op.type, op.attrs.keys()) for op in again.graph().get_operations()]
    for a, b in zip(run_imported(first, graph, BACKENDS[-1]),
                    run_imported(again, graph, BACKENDS[-1])):
        np.testing.assert_array_equal(a, b)


def _minigraph_training_graph():
    """A small CNN training step built in minigraph: convolution, batch norm in training
    mode, pooling, softmax cross entropy, and the gradients autodiff adds."""
    rng = np.random.default_rng(7)
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[4, 8, 8, 2])
    labels = ops.Placeholder(root.WithOpName("labels"), mg.int32, shape=[4])
    filters = ops.Const(root.WithOpName("filters"), rng.standard_normal((3, 3, 2, 4), np.float32))
    conv = ops.Conv2D(root, x, filters, [1, 1, 1, 1], "SAME")
    bn = ops.FusedBatchNormV3(root, conv, np.ones(4, np.float32), np.zeros(4, np.float32),
                              np.zeros(0, np.float32), np.zeros(0, np.float32),
                              is_training=True)
    pooled = ops.MaxPool(root, ops.Relu(root, bn.y), [1, 2, 2, 1], [1, 2, 2, 1], "VALID")
    weights = ops.Const(root.WithOpName("weights"), rng.standard_normal((64, 3), np.float32))
    logits = ops.MatMul(root, ops.Reshape(root, pooled, [4, 64]), weights)
    loss = ops.Mean(root.WithOpName("loss"), ops.SparseSoftmaxCrossEntropyWithLogits(
        root, logits, labels).loss, [0])
    grads = mg.AddSymbolicGradients(root, [loss], [filters, weights, x])
    feeds = {"x:0": rng.standard_normal((4, 8, 8, 2)).astype(np.float32),
             "labels:0": np.array([0, 2, 1, 2], np.int32)}
    return root, feeds, [loss, *grads]


def test_minigraph_training_graph_runs_in_tensorflow():
    root, feeds, fetches = _minigraph_training_graph()
    ours = mg.ClientSession(root).Run(feeds, fetches)
    exported = mg.export_graph_def(root)
    types = {node.op for node in exported.node}
    assert {"FusedBatchNormGradV3", "Conv2DBackpropFilter", "MaxPoolGrad"} <= types
    theirs = tf_graphs.run_graph_def(exported.SerializeToString(), feeds,
                                     [f.name for f in fetches])
    assert_matches(theirs, ours, "minigraph training graph run by TensorFlow")


def test_minigraph_variables_and_optimizer_run_in_tensorflow():
    root = mg.Scope.NewRootScope()
    var = ops.Variable(root.WithOpName("w"), [3], mg.float32)
    init = ops.Assign(root.WithOpName("init"), var, np.array([1.0, 2.0, 3.0], np.float32))
    step = ops.ApplyGradientDescent(root.WithOpName("step"), var, np.float32(0.5),
                                    np.array([1.0, -1.0, 4.0], np.float32))
    session = mg.ClientSession(root)
    session.Run({}, [init])
    ours = session.Run({}, [step])[0]
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(tf.compat.v1.GraphDef.FromString(
            mg.export_graph_def(root).SerializeToString()), name="")
    with tf.compat.v1.Session(graph=graph) as tf_session:
        tf_session.run("init:0")
        np.testing.assert_array_equal(tf_session.run("step:0"), ours)


def test_minigraph_only_ops_are_folded_or_refused():
    root = mg.Scope.NewRootScope()
    shape = ops.ReducedShape(root.WithOpName("reduced"), np.array([2, 3, 4], np.int32),
                             np.array([1], np.int32))
    ops.Identity(root.WithOpName("out"), shape)
    exported = mg.export_graph_def(root)
    node = next(n for n in exported.node if n.name == "reduced")
    assert node.op == "Const"
    np.testing.assert_array_equal(tf_graphs.run_graph_def(exported.SerializeToString(), {},
                                                          ["out:0"])[0], [2, 1, 4])
    x = ops.Placeholder(root.WithOpName("x"), mg.int32, shape=[3])
    ops.ReducedShape(root.WithOpName("dynamic"), x, np.array([1], np.int32))
    with pytest.raises(mg.errors.InvalidArgumentError,
                       match=r"node 'dynamic' is a ReducedShape.*depends on 'x' \(a Placeholder"):
        mg.export_graph_def(root)


def test_export_writes_binary_or_text_by_suffix(tmp_path):
    root, _, _ = _minigraph_training_graph()
    message = mg.export_graph_def(root, tmp_path / "g.pb")
    assert (tmp_path / "g.pb").read_bytes() == message.SerializeToString()
    mg.export_graph_def(root, tmp_path / "g.pbtxt")
    assert (tmp_path / "g.pbtxt").read_text().startswith("node {")
    mg.export_graph_def(root, tmp_path / "g.bin", as_text=True)
    parsed = tf.compat.v1.GraphDef()
    from google.protobuf import text_format

    text_format.Parse((tmp_path / "g.bin").read_text(), parsed)
    assert len(parsed.node) == len(root.graph())
    assert message.versions.producer == tf.version.GRAPH_DEF_VERSION


# ----------------------------------------------------------------------------- errors

PLACEHOLDER = 'node { name: "p" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } }'
IDENTITY_OF_P = ('node { name: "a" op: "Identity" input: "p" attr { key: "T" value { type: '
                 'DT_FLOAT } } }')
# (graph in text form, the error minigraph raises, a phrase both messages must hold)
BAD_GRAPHS = [
    ('node { name: "a" op: "Foo" }', mg.errors.NotFoundError, "Op type not registered 'Foo'"),
    ('node { name: "a" op: "Identity" input: "p" } ' + PLACEHOLDER,
     mg.errors.InvalidArgumentError,
     "NodeDef missing attr 'T' from Op<name=Identity; signature=input:T -> output:T; attr=T:type>"
     "; NodeDef: {{node a}}"),
    ('node { name: "p" op: "Placeholder" attr { key: "dtype" value { i: 3 } } }',
     mg.errors.InvalidArgumentError,
     "AttrValue had value with type 'int' when 'type' expected\n\t for attr 'dtype'"),
    (PLACEHOLDER + ' versions { producer: 10 min_consumer: 5000 }',
     mg.errors.InvalidArgumentError,
     "GraphDef min consumer version 5000 above current version 2474"),
    (PLACEHOLDER + ' versions { producer: 10 bad_consumers: 2474 }',
     mg.errors.InvalidArgumentError, "GraphDef disallows consumer version 2474."),
    (PLACEHOLDER + ' versions { producer: -1 }', mg.errors.InvalidArgumentError,
     "GraphDef producer version -1 below min producer 0"),
    ('node { name: "a" op: "Identity" input: "zz" attr { key: "T" value { type: DT_FLOAT } } }',
     mg.errors.InvalidArgumentError, "Node 'a': Unknown input node 'zz'"),
    ('node { name: "a" op: "Identity" input: "a" attr { key: "T" value { type: DT_FLOAT } } }',
     mg.errors.InvalidArgumentError, "1 nodes in a cycle"),
    (PLACEHOLDER + PLACEHOLDER, mg.errors.InvalidArgumentError, "Node 'p' is not unique"),
    (PLACEHOLDER + ' node { name: "a" op: "Identity" input: "p" input: "p" attr { key: "T" '
                   'value { type: DT_FLOAT } } }', mg.errors.InvalidArgumentError,
     "NodeDef expected inputs 'float' do not match 2 inputs specified"),
    ('node { name: "p" op: "Placeholder" attr { key: "dtype" value { type: DT_INT32 } } }'
     ' node { name: "a" op: "Relu" input: "p" attr { key: "T" value { type: DT_FLOAT } } }',
     mg.errors.InvalidArgumentError,
     "Input 0 of node a was passed int32 from p:0 incompatible with expected float."),
    (PLACEHOLDER + ' node { name: "a" op: "Identity" input: "p:1" attr { key: "T" value { '
                   'type: DT_FLOAT } } }', mg.errors.InvalidArgumentError,
     "Node 'a': Connecting to invalid output 1 of source node p which has 1 outputs."),
    (PLACEHOLDER + ' node { name: "c" op: "Conv2D" input: "p" input: "p" attr { key: "T" value '
                   '{ type: DT_FLOAT } } attr { key: "strides" value { list { i: 1 i: 1 i: 1 '
                   'i: 1 } } } attr { key: "padding" value { s: "FOO" } } }',
     mg.errors.InvalidArgumentError, "padding"),
    (PLACEHOLDER + ' node { name: "g" op: "BatchNormWithGlobalNormalization" input: "p" input: '
                   '"p" input: "p" input: "p" input: "p" attr { key: "T" value { type: '
                   'DT_FLOAT } } attr { key: "variance_epsilon" value { f: 0.001 } } attr { '
                   'key: "scale_after_normalization" value { b: true } } } versions { '
                   'producer: 9 }', mg.errors.UnimplementedError,
     "Op BatchNormWithGlobalNormalization is not available in GraphDef version 9. It has been "
     "removed in version 9. Use tf.nn.batch_normalization()."),
]


@pytest.mark.parametrize("text, error, phrase", BAD_GRAPHS,
                         ids=[phrase[:40] for _, _, phrase in BAD_GRAPHS])
def test_bad_graphs_are_refused_as_tensorflow_refuses_them(text, error, phrase):
    with pytest.raises(error) as ours:
        mg.import_graph_def(protos.parse_text(text))
    assert phrase in str(ours.value)
    from google.protobuf import text_format

    with pytest.raises(Exception) as theirs:  # noqa: B017 - TF raises several types
        graph_def = text_format.Parse(text, tf.compat.v1.GraphDef())
        with tf.Graph().as_default() as graph:
            tf.graph_util.import_graph_def(graph_def, name="")
            for op in graph.get_operations():  # the removed op fails when it runs
                if op.type.startswith("BatchNormWithGlobal"):
                    with tf.compat.v1.Session(graph=graph) as session:
                        session.run(op.outputs[0], {"p:0": np.ones((1, 1, 1, 1), np.float32)})
    tf_message = str(theirs.value)
    assert phrase.split(".")[0].split(" from Op<")[0] in tf_message, tf_message


def test_unknown_attrs_are_ignored_with_a_warning_and_internal_ones_silently():
    text = ('node { name: "p" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } '
            'attr { key: "_class" value { list { s: "loc:@q" } } } attr { key: "newer_attr" '
            'value { i: 3 } } }')
    with pytest.warns(UserWarning, match="NodeDef mentions attribute newer_attr"):
        root = mg.import_graph_def(protos.parse_text(text))
    assert root.graph().get_operation("p").attrs["dtype"] is mg.float32


def test_files_that_are_not_graph_defs_are_refused(tmp_path):
    (tmp_path / "bad.pb").write_bytes(b"\xff\xff\xff\xff")
    (tmp_path / "bad.pbtxt").write_text("node { name: ")
    for path in ("bad.pb", "bad.pbtxt"):
        with pytest.raises(mg.errors.InvalidArgumentError, match=f"{path} is not a"):
            mg.import_graph_def(tmp_path / path)
    with pytest.raises(mg.errors.NotFoundError, match="no such file"):
        mg.import_graph_def(tmp_path / "missing.pb")
    with pytest.raises(mg.errors.InvalidArgumentError, match="expected a path, bytes"):
        mg.import_graph_def(42)


# ----------------------------------------------------------------------------- Const values


def _const_graph(tensor_text: str, dtype: str) -> str:
    return (f'node {{ name: "c" op: "Const" attr {{ key: "dtype" value {{ type: {dtype} }} }} '
            f'attr {{ key: "value" value {{ tensor {{ dtype: {dtype} {tensor_text} }} }} }} }}')


SHAPE_2x3 = "tensor_shape { dim { size: 2 } dim { size: 3 } }"
CONSTS = [
    (SHAPE_2x3 + " float_val: 1.5 float_val: -2", "DT_FLOAT"),  # the last value fills the rest
    (SHAPE_2x3, "DT_DOUBLE"),  # no values: zeros
    (SHAPE_2x3 + " int64_val: 7", "DT_INT64"),
    (SHAPE_2x3 + " bool_val: true bool_val: false", "DT_BOOL"),
    (SHAPE_2x3 + " half_val: 15360 half_val: 48640", "DT_HALF"),  # 1.0, -2.0 as bits
    (SHAPE_2x3 + " half_val: 16256 half_val: 49152", "DT_BFLOAT16"),  # 1.0, -2.0
    (SHAPE_2x3 + r' tensor_content: "\001\000\000\000\002\000\000\000\003\000\000\000\004\000'
                 r'\000\000\005\000\000\000\006\000\000\000"', "DT_INT32"),
    ("int_val: -4", "DT_INT32"),
    # TF ignores values beyond the shape's elements, keeps half_val's low 16 bits, and reads
    # an unknown-rank shape without dims as a scalar
    (SHAPE_2x3 + " " + " ".join(f"float_val: {i}" for i in range(7)), "DT_FLOAT"),
    (SHAPE_2x3 + " half_val: 70000 half_val: -1", "DT_HALF"),
    ("tensor_shape { unknown_rank: true } float_val: 2", "DT_FLOAT"),
]


@pytest.mark.parametrize("tensor_text, dtype", CONSTS, ids=[f"{d}-{i}" for i, (_, d) in
                                                             enumerate(CONSTS)])
def test_const_values_decode_as_tensorflow_decodes_them(tensor_text, dtype):
    text = _const_graph(tensor_text, dtype)
    ours = mg.ClientSession(mg.import_graph_def(protos.parse_text(text))).Run("c:0")
    theirs = tf_graphs.run_graph_def(protos.parse_text(text).SerializeToString(), {}, ["c:0"])[0]
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    np.testing.assert_array_equal(ours, theirs)


def bits(array: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8)


def test_const_values_round_trip_through_tensor_protos():
    from tensorflow.core.framework.tensor_pb2 import TensorProto

    rng = np.random.default_rng(0)
    for dtype in (np.float16, ml_dtypes.bfloat16, np.float32, np.float64, np.int32, np.int64,
                  np.bool_):
        for shape in ((), (1,), (3, 4), (0, 2)):
            value = (rng.standard_normal(shape) * 100).astype(dtype)
            proto = protos.message_class("tensorflow.TensorProto")()
            tensors.array_to_proto(value, proto)
            back = tensors.array_from_proto(proto, "test")
            assert back.dtype == value.dtype and back.shape == value.shape
            np.testing.assert_array_equal(bits(back), bits(value))
            theirs = tf.make_ndarray(TensorProto.FromString(proto.SerializeToString()))
            np.testing.assert_array_equal(bits(np.asarray(theirs, value.dtype)), bits(value))


@pytest.mark.parametrize("tensor_text, dtype, error, match", [
    (SHAPE_2x3 + ' tensor_content: "abc"', "DT_FLOAT", mg.errors.InvalidArgumentError,
     "tensor_content holds 3 bytes, but a float tensor of shape"),
    ("tensor_shape { dim { size: 1099511627776 } dim { size: 1024 } } float_val: 1", "DT_FLOAT",
     mg.errors.ResourceExhaustedError, "more than this machine's"),
    ("string_val: 'a'", "DT_STRING", mg.errors.InvalidArgumentError,
     "dtype DT_STRING is not supported by minigraph"),
    ("tensor_shape { dim { size: -1 } }", "DT_FLOAT", mg.errors.InvalidArgumentError,
     "needs a fully known shape"),
])
def test_bad_const_values_are_refused(tensor_text, dtype, error, match):
    with pytest.raises(error, match=match):
        mg.import_graph_def(protos.parse_text(_const_graph(tensor_text, dtype)))


def test_const_dtype_must_match_its_value():
    text = ('node { name: "c" op: "Const" attr { key: "dtype" value { type: DT_INT32 } } attr '
            '{ key: "value" value { tensor { dtype: DT_FLOAT float_val: 1 } } } }')
    with pytest.raises(mg.errors.InvalidArgumentError,
                       match="Const 'c': its value is a float tensor, but attr dtype is int32"):
        mg.import_graph_def(protos.parse_text(text))


# ----------------------------------------------------------------------------- protobuf


def test_shipped_descriptor_set_is_tensorflows():
    spec = importlib.util.spec_from_file_location(
        "build_tf_descriptor_set", ROOT / "tools" / "build_tf_descriptor_set.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.descriptor_set_bytes() == protos.DESCRIPTOR_SET.read_bytes()


def test_our_messages_live_beside_tensorflows():
    ours = protos.GraphDef()
    assert type(ours) is not tf.compat.v1.GraphDef
    ours.node.add(name="a", op="NoOp")
    theirs = tf.compat.v1.GraphDef.FromString(ours.SerializeToString())
    assert theirs.node[0].name == "a"
    assert len(mg.import_graph_def(theirs).graph()) == 1


# ----------------------------------------------------------------------------- our op defs


def test_op_definitions_match_tensorflows():
    """Every op minigraph shares with TF has TF's input, output and attr names, attr kinds
    and which attrs have defaults, so graphs cross in both directions unchanged."""
    from tensorflow.python.framework import op_def_registry

    from minigraph.framework.op_def import get_op_def, registered_ops
    from minigraph.interop.exporter import MINIGRAPH_ONLY_ATTRS, MINIGRAPH_ONLY_OPS

    problems = []
    for name in registered_ops():
        theirs = op_def_registry.get(name)
        if theirs is None:  # minigraph's own (tests register ops of their own too)
            assert name in MINIGRAPH_ONLY_OPS or not hasattr(ops, name), \
                f"{name} is neither TF's nor listed as minigraph's own"
            continue
        ours = get_op_def(name)
        pairs = [("inputs", [a.name for a in ours.inputs], [a.name for a in theirs.input_arg]),
                 ("outputs", [a.name for a in ours.outputs],
                  [a.name for a in theirs.output_arg]),
                 ("attrs", sorted((a.name, a.kind, a.has_default) for a in ours.attrs
                                  if a.name not in MINIGRAPH_ONLY_ATTRS.get(name, ())),
                  sorted((a.name, a.type, a.HasField("default_value")) for a in theirs.attr))]
        problems += [f"{name} {what}: ours {a}, TF {b}" for what, a, b in pairs if a != b]
    assert problems == []
