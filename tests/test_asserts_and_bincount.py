"""Assert (ops/array_ops.py) and the folding of TF's string messages into it at import
(interop/asserts.py), and DenseBincount (ops/index_ops.py): values against references
written here, TF's words, hand-written GraphDefs (string constants read by an Assert, by
something else, a malformed Assert), and Keras' ``CategoryEncoding`` frozen by TF."""

from __future__ import annotations

import os

import numpy as np
import pytest
from conftest import BACKENDS

import minigraph as mg
from minigraph import ops

F32 = np.float32


def _tf():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return pytest.importorskip("tensorflow")


def _bincount_reference(x, size, weights, binary):
    rows = np.atleast_2d(x)
    w = np.ones(rows.shape) if weights.size == 0 else np.atleast_2d(weights)
    out = np.zeros((rows.shape[0], size), weights.dtype if weights.size else F32)
    for r in range(rows.shape[0]):
        for v, weight in zip(rows[r], w[r]):
            if v < size:
                out[r, v] = 1 if binary else out[r, v] + weight
    return out[0] if x.ndim == 1 else out


@pytest.mark.parametrize("backend", BACKENDS)
def test_dense_bincount_counts_weights_and_drops_large_values(backend):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 9, (3, 7)).astype(np.int32)
    w = rng.standard_normal((3, 7)).astype(F32)
    root = mg.Scope.NewRootScope()
    cases = [(x, 6, np.zeros(0, F32), False), (x, 6, w, False), (x, 12, np.zeros(0, F32), True),
             (x[0].astype(np.int64), 5, w[0].astype(np.float64), False)]
    outs = [ops.DenseBincount(root, v, np.asarray(size, v.dtype), weights, binary_output=b)
            for v, size, weights, b in cases]
    for (v, size, weights, b), out, value in zip(
            cases, outs, mg.ClientSession(root, backend=backend).Run({}, outs)):
        expected = _bincount_reference(v, size, weights, b)
        assert out.shape == mg.TensorShape(expected.shape)
        np.testing.assert_allclose(value, expected, rtol=1e-6)
    for build, words in (
            (lambda: ops.DenseBincount(root, np.array([[-1, 2]], np.int32), np.int32(4),
                                       np.zeros(0, F32)), "must be non-negative! Negative"),
            (lambda: ops.DenseBincount(root, x, np.int32(-4), np.zeros(0, F32)),
             r"size \(-4\) must be non-negative"),
            (lambda: ops.DenseBincount(root, x, np.int32(4), np.ones((3, 2), F32)),
             "weights must be empty or of input's shape")):
        with pytest.raises(mg.errors.InvalidArgumentError, match=words):
            build()


@pytest.mark.parametrize("backend", BACKENDS)
def test_assert_fails_the_run_with_its_message_and_data(backend):
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root, mg.int64, shape=[4])
    positive = ops.Greater(root, ops.Min(root, x, np.int32(0)), np.int64(0))
    check = ops.Assert(root, positive, [x], message="x must be positive", summarize=2)
    y = ops.Identity(root.WithControlDependencies([check]), x)
    session = mg.ClientSession(root, backend=backend)
    np.testing.assert_array_equal(session.Run({x: np.array([1, 2, 3, 4])}, y), [1, 2, 3, 4])
    with pytest.raises(mg.errors.InvalidArgumentError,
                       match=r"assertion failed: \[x must be positive\] \[1 -2\.\.\.\]"):
        session.Run({x: np.array([1, -2, 3, 4])}, y)
    with pytest.raises(mg.errors.InvalidArgumentError, match="In.0. is not a scalar"):
        ops.Assert(root, np.array([True, False]), [x])


def _graph(text: str):
    from minigraph.interop import protos

    return protos.parse_text(text)


STRING = 'attr { key: "dtype" value { type: DT_STRING } }'


def _string_const(name: str, text: str) -> str:
    return (f'node {{ name: "{name}" op: "Const" {STRING} attr {{ key: "value" value {{ '
            f'tensor {{ dtype: DT_STRING tensor_shape {{ }} string_val: "{text}" }} }} }} }}')


BOOL_INPUT = ('node { name: "flag" op: "Placeholder" attr { key: "dtype" value { type: DT_BOOL '
              '} } attr { key: "shape" value { shape { } } } }')
FLOAT_INPUT = ('node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } '
               '} attr { key: "shape" value { shape { dim { size: 2 } } } } }')


def test_string_messages_fold_into_the_assert():
    graph = _graph(BOOL_INPUT + FLOAT_INPUT + _string_const("msg", "x went wrong")
                   + _string_const("msg2", "really")
                   + 'node { name: "check" op: "Assert" input: "flag" input: "msg" input: "x" '
                     'input: "msg2" attr { key: "T" value { list { type: DT_STRING type: '
                     'DT_FLOAT type: DT_STRING } } } }'
                   + 'node { name: "out" op: "Identity" input: "x" input: "^check" attr { key: '
                     '"T" value { type: DT_FLOAT } } }')
    root = mg.import_graph_def(graph)
    check = root.graph().get_operation("check")
    assert check.attrs["message"] == "x went wrong really"
    assert [t.dtype for t in check.inputs] == [mg.as_dtype("bool"), mg.float32]
    session = mg.ClientSession(root)
    feeds = {"x:0": np.array([1.5, 2.5], F32)}
    np.testing.assert_array_equal(session.Run({**feeds, "flag:0": np.array(True)}, "out:0"),
                                  [1.5, 2.5])
    with pytest.raises(mg.errors.InvalidArgumentError,
                       match=r"assertion failed: \[x went wrong really\] \[1.5 2.5\]"):
        session.Run({**feeds, "flag:0": np.array(False)}, "out:0")


@pytest.mark.parametrize("use", [
    'node { name: "other" op: "Identity" input: "msg" attr { key: "T" value { type: DT_STRING '
    '} } }',
    'node { name: "check" op: "Assert" input: "flag" input: "msg" input: "msg" attr { key: "T" '
    'value { list { type: DT_STRING } } } }'])
def test_string_constants_read_otherwise_are_still_refused(use):
    """A string Const another op reads, or an Assert whose data do not match its T, is
    imported as it stands and refused with a clear error (no string tensors here)."""
    graph = _graph(BOOL_INPUT + _string_const("msg", "text") + use)
    with pytest.raises((mg.errors.InvalidArgumentError, mg.errors.NotFoundError,
                        mg.errors.UnimplementedError)):
        mg.import_graph_def(graph)


def test_assert_survives_export_and_import():
    root = mg.Scope.NewRootScope()
    flag = ops.Placeholder(root.WithOpName("flag"), mg.as_dtype("bool"), shape=[])
    ops.Assert(root.WithOpName("check"), flag, [], message="kept")
    again = mg.import_graph_def(mg.export_graph_def(root))
    assert again.graph().get_operation("check").attrs["message"] == "kept"


@pytest.mark.oracle
@pytest.mark.parametrize("mode", ["multi_hot", "count", "one_hot"])
def test_category_encoding_imports_and_checks_its_range(mode):
    """Keras' CategoryEncoding: its range Assert (a string message) and DenseBincount."""
    _tf()
    from minigraph.testing import tf_graphs

    keras = tf_graphs.keras()
    width = 1 if mode == "one_hot" else 3
    model = keras.Sequential([keras.Input((width,), dtype="int64"),
                              keras.layers.CategoryEncoding(num_tokens=6, output_mode=mode)])
    x = np.array([[1, 2, 5], [0, 0, 3]], np.int64)[:, :width]
    graph = tf_graphs.freeze(mode, model, [x])
    (feed,) = graph.feeds
    for backend in BACKENDS:
        session = mg.ClientSession(mg.import_graph_def(graph.graph_def), backend=backend)
        np.testing.assert_array_equal(session.Run(graph.feeds, graph.fetches)[0],
                                      graph.expected[0])
        bad = x.copy()
        bad[0, 0] = 6
        with pytest.raises(mg.errors.InvalidArgumentError,
                           match="Input values must be in the range 0 <= values < num_tokens"):
            session.Run({feed: bad}, graph.fetches)


@pytest.mark.oracle
def test_dense_bincount_against_tensorflow():
    tf = _tf()
    x = np.random.default_rng(1).integers(0, 9, (4, 10)).astype(np.int32)
    w = np.random.default_rng(2).standard_normal((4, 10)).astype(F32)
    root = mg.Scope.NewRootScope()
    ours = mg.ClientSession(root).Run({}, [
        ops.DenseBincount(root, x, np.int32(7), w),
        ops.DenseBincount(root, x, np.int32(7), np.zeros(0, F32), binary_output=True)])
    theirs = [tf.raw_ops.DenseBincount(input=x, size=7, weights=w),
              tf.raw_ops.DenseBincount(input=x, size=7, weights=np.zeros(0, F32),
                                       binary_output=True)]
    for value, expected in zip(ours, theirs):
        np.testing.assert_allclose(value, expected.numpy(), rtol=1e-6)


@pytest.mark.oracle
def test_exported_assert_runs_in_tensorflow_with_its_message():
    """The exporter writes the message back as TF's string data tensor."""
    tf = _tf()
    root = mg.Scope.NewRootScope()
    flag = ops.Placeholder(root.WithOpName("flag"), mg.as_dtype("bool"), shape=[])
    check = ops.Assert(root.WithOpName("check"), flag, [], message="exported message")
    ops.Identity(root.WithOpName("out").WithControlDependencies([check]), flag)
    graph_def = tf.compat.v1.GraphDef.FromString(mg.export_graph_def(root).SerializeToString())
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    with tf.compat.v1.Session(graph=graph) as session:
        assert session.run("out:0", {"flag:0": True})
        with pytest.raises(tf.errors.InvalidArgumentError, match="exported message"):
            session.run("out:0", {"flag:0": False})
