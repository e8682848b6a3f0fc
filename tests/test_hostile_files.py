"""Hostile graph files, exports and event writers: one regression test per defect found by the
hostile-file campaign (issue 21), each a class of input rather than one example.

Every surface (GraphDef import and export, ``.pbtxt`` parsing, ``summary.FileWriter``,
``io.read_graph``) must answer bad input with an ``mg.errors`` exception naming the file,
node and attr, in a short message; never a raw exception, a silent change of meaning, or
memory beyond what the file holds. Where TensorFlow 2.21 accepts an input, it imports
faithfully: the ``oracle`` tests compare with TensorFlow itself. Memory is measured in a
fresh interpreter (peak RSS growth). The fuzz families of the same surfaces are in
tests/fuzz/hostile_cases.py (run by tests/test_fuzz.py).
"""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import BACKENDS

import minigraph as mg
from minigraph import ops
from minigraph.interop import protos, records
from minigraph.interop.pbtxt import MAX_DEPTH

ROOT = Path(__file__).resolve().parent.parent
PLACEHOLDER = 'node { name: "p" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } }'
MESSAGE_CHARS = 2000  # the longest message any refusal here may have


def text_graph(text: str):
    return mg.import_graph_def(protos.parse_text(text))


def identity(input_text: str) -> str:
    return PLACEHOLDER + (f' node {{ name: "a" op: "Identity" input: "{input_text}" attr {{ '
                          f'key: "T" value {{ type: DT_FLOAT }} }} }}')


def const(dims, values: str = "float_val: 1", dtype: str = "DT_FLOAT", shape: str = "") -> str:
    shape = shape or " ".join(f"dim {{ size: {d} }}" for d in dims)
    return (f'node {{ name: "c" op: "Const" attr {{ key: "dtype" value {{ type: {dtype} }} }} '
            f'attr {{ key: "value" value {{ tensor {{ dtype: {dtype} tensor_shape {{ {shape} }} '
            f'{values} }} }} }} }}')


def refused(error, match: str, call, *args, **kwargs) -> str:
    """The message of the ``error`` ``call`` must raise, checked short and naming ``match``."""
    with pytest.raises(error, match=match) as caught:
        call(*args, **kwargs)
    message = str(caught.value)
    assert len(message) <= MESSAGE_CHARS, f"a message of {len(message)} characters"
    return message


def peak_growth(code: str) -> int:
    """Peak resident memory (bytes) the snippet adds, run in a fresh interpreter after
    ``import minigraph as mg``."""
    script = textwrap.dedent("""
        import resource, sys
        import numpy as np
        import minigraph as mg
        from minigraph.interop import protos
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    """) + textwrap.dedent(code) + textwrap.dedent("""
        print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024)
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    return int(done.stdout.split()[-1])


@pytest.fixture(scope="module")
def tf():
    return pytest.importorskip("minigraph.testing.tf_graphs").tensorflow()


def tf_import_error(tf, graph_def_bytes: bytes) -> str | None:
    """TensorFlow's import error for a GraphDef (None: it imports)."""
    graph_def = tf.compat.v1.GraphDef.FromString(graph_def_bytes)
    try:
        with tf.Graph().as_default():
            tf.graph_util.import_graph_def(graph_def, name="")
    except (ValueError, tf.errors.OpError) as exc:
        return str(exc)
    return None


def ours_import_error(graph_def_bytes: bytes) -> str | None:
    try:
        mg.import_graph_def(graph_def_bytes)
    except (mg.errors.InvalidArgumentError, mg.errors.NotFoundError) as exc:
        return str(exc)
    return None


def placeholder_bytes(name: str = "p", device: str = "") -> bytes:
    graph_def = protos.GraphDef()
    node = graph_def.node.add()
    node.name, node.op, node.device = name, "Placeholder", device
    node.attr["dtype"].type = 1
    return graph_def.SerializeToString()


# ----------------------------------------------------------------------------- input indices


@pytest.mark.parametrize("index", ["٣", "²", "３", "-0", "+0", "", " 0", "0x0", "0:0"])
def test_input_index_is_ascii_digits_or_the_whole_text_is_a_node_name(index):
    """'x:٣' was read as x:3 and 'x:²' raised int()'s ValueError; TF's ParseTensorName takes
    ASCII digits only, so the whole text names a node no graph has."""
    refused(mg.errors.InvalidArgumentError,
            re.escape(f"Node 'a': Unknown input node 'p:{index}'"), text_graph,
            identity(f"p:{index}"))


def test_input_index_of_any_length_is_a_clean_refusal():
    for digits in ("2147483648", "99999999999999999999", "9" * 5000):
        refused(mg.errors.InvalidArgumentError, "Connecting to invalid output",
                text_graph, identity(f"p:{digits}"))
    root = text_graph(identity("p:000"))  # leading zeros: output 0
    assert [t.name for t in root.graph().get_operation("a").inputs] == ["p:0"]


@pytest.mark.oracle
@pytest.mark.parametrize("text", ["p:٣", "p:²", "p:00", "p:-1", "^p:0", "p:0:0", ":0", "p:"])
def test_input_texts_are_read_as_tensorflow_reads_them(tf, text):
    graph_def = protos.parse_text(identity(text)).SerializeToString()
    ours, theirs = ours_import_error(graph_def), tf_import_error(tf, graph_def)
    assert (ours is None) == (theirs is None), (ours, theirs)


# ----------------------------------------------------------------------------- node names


@pytest.mark.parametrize("name", ["a:1", "^a", "é", "-a", "_a", "a b", "", "a>", "a>_b",
                                  "a\x00b", "a\tb", "a>>b", "\u200b"])
def test_node_names_tensorflow_refuses_are_refused(name):
    message = refused(mg.errors.InvalidArgumentError, "Node name contains invalid characters",
                      mg.import_graph_def, placeholder_bytes(name))
    assert "\x00" not in message  # control characters are escaped


@pytest.mark.oracle
@pytest.mark.parametrize("name", ["../../x", "a/../b", ".x", "x>y", "a-b", "a//b", "a/", "9",
                                  "a>.b", "a:1", "^a", "é", "-a", "_a", "a b", "a>_b"])
def test_node_names_follow_tensorflows_rule(tf, name):
    graph_def = placeholder_bytes(name)
    ours, theirs = ours_import_error(graph_def), tf_import_error(tf, graph_def)
    assert (ours is None) == (theirs is None), (ours, theirs)
    if ours is None:
        assert mg.import_graph_def(graph_def).graph().get_operation(name).type == "Placeholder"


def test_huge_names_are_clipped_in_messages():
    name = "q" * 100_000
    message = refused(mg.errors.InvalidArgumentError, "Unknown input node 'qqq",
                      text_graph, identity(name))
    assert "100,000 characters" in message
    message = refused(mg.errors.NotFoundError, "Op type not registered", mg.import_graph_def,
                      placeholder_bytes().replace(b"Placeholder", b"P" * 11))
    assert len(message) < 400


def test_cycle_errors_name_the_nodes_of_a_cycle():
    text = PLACEHOLDER + "".join(
        f' node {{ name: "{n}" op: "Identity" input: "{i}" attr {{ key: "T" value {{ type: '
        f'DT_FLOAT }} }} }}' for n, i in (("a", "b"), ("b", "a"), ("c", "a"), ("d", "c")))
    message = refused(mg.errors.InvalidArgumentError, "4 nodes in a cycle", text_graph, text)
    assert "'a' -> 'b' -> 'a'" in message or "'b' -> 'a' -> 'b'" in message


@pytest.mark.oracle
@pytest.mark.parametrize("device", ["/bogus:x", "/task:x", "/cpu:0/gpu:0", "/device:GPU",
                                    "a b", "/cpu:1:2", "/device:CPU:0", "/cpu:0", "//",
                                    "/task:٣", "/device:OPENCL:0", "cpu"])
def test_devices_follow_tensorflows_device_spec(tf, device):
    graph_def = placeholder_bytes(device=device)
    ours, theirs = ours_import_error(graph_def), tf_import_error(tf, graph_def)
    assert (ours is None) == (theirs is None), (ours, theirs)
    if theirs is not None and "Unknown attribute" in theirs:
        assert theirs.split(" is encountered")[0] in ours


# ----------------------------------------------------------------------------- .pbtxt


def nested(levels: int) -> str:
    inner = "i: 1"
    for _ in range(levels):
        inner = f'func {{ name: "f" attr {{ key: "k" value {{ {inner} }} }} }}'
    return (PLACEHOLDER[:-2] + f' attr {{ key: "_nest" value {{ {inner} }} }} }}')


def test_deep_pbtxt_nesting_is_refused_before_parsing(tmp_path):
    """A few thousand '{' raised RecursionError from protobuf's text parser."""
    path = tmp_path / "deep.pbtxt"
    for levels in (40, 3000):
        path.write_text(nested(levels))
        message = refused(mg.errors.InvalidArgumentError, f"nested more than {MAX_DEPTH}",
                          mg.import_graph_def, path)
        assert "deep.pbtxt" in message and "line 1" in message
    path.write_text(nested(29).replace("{ ", "<\n").replace(" }", "\n>"))  # 90, over lines
    assert mg.import_graph_def(path).graph().get_operation("p").type == "Placeholder"


def test_pbtxt_braces_inside_strings_and_comments_do_not_count(tmp_path):
    path = tmp_path / "g.pbtxt"
    braces = "{" * 500
    path.write_text(f'node {{ name: "p" # {braces}\n op: "Placeholder" attr {{ key: "dtype" '
                    f'value {{ type: DT_FLOAT }} }} attr {{ key: "_s" value {{ s: "{braces}\\"'
                    f'}}" }} }} }}\n' + PLACEHOLDER.replace('"p"', '"q"'))
    graph = mg.import_graph_def(path).graph()
    assert {op.name for op in graph.operations()} == {"p", "q"}


def test_pbtxt_whitespace_and_escaped_strings_take_memory_like_the_file(tmp_path):
    """10 MiB of whitespace after a valid .pbtxt took 1.5 GiB (the parser's regex kept a
    record per character); a tensor_content of a million escapes took as much."""
    values = np.random.default_rng(0).standard_normal(1 << 18).astype(np.float32)
    escaped = "".join(f"\\{b:03o}" for b in values.tobytes())
    text = (const([len(values)], f'tensor_content: "{escaped}"') + " " * (10 << 20) + "\n"
            + "\t" * (1 << 20))
    path = tmp_path / "big.pbtxt"
    path.write_text(text)
    growth = peak_growth(f"""
        root = mg.import_graph_def({str(path)!r})
        np.save({str(tmp_path / "value.npy")!r}, mg.ClientSession(root).Run("c:0"))
    """)
    assert growth < 8 * len(text), f"{growth >> 20} MiB for a file of {len(text) >> 20} MiB"
    assert np.load(tmp_path / "value.npy").tobytes() == values.tobytes()


def test_pbtxt_strings_are_decoded_exactly_when_rewritten():
    data = bytes(range(256)) * 40  # every byte, long enough to be re-written in chunks
    escaped = "".join(f"\\x{b:02x}" if b % 2 else f"\\{b:03o}" for b in data)
    text = PLACEHOLDER[:-2] + f' attr {{ key: "_s" value {{ s: "{escaped}" }} }} }}'
    assert protos.parse_text(text).node[0].attr["_s"].s == data
    text = PLACEHOLDER[:-2] + ' attr { key: "_s" value { s: "' + "a\\\"" * 3000 + '" } } }'
    assert protos.parse_text(text).node[0].attr["_s"].s == b'a"' * 3000
    refused(mg.errors.InvalidArgumentError, "line 1: a string literal has no closing quote",
            protos.parse_text, PLACEHOLDER[:-2] + ' attr { key: "_s" value { s: "' + "x" * 9000)


def test_text_files_that_are_not_utf8_are_refused(tmp_path):
    path = tmp_path / "g.pbtxt"
    path.write_bytes(PLACEHOLDER.encode() + b"\xff\xfe")
    refused(mg.errors.InvalidArgumentError, "g.pbtxt is not a text GraphDef: not UTF-8",
            mg.import_graph_def, path)


# ----------------------------------------------------------------------------- Const values


def test_const_ranks_numpy_cannot_hold_are_a_stated_limit():
    """Rank 65 raised numpy's ValueError; TF holds up to 254 dims."""
    message = refused(mg.errors.UnimplementedError, "has 65 dimensions; minigraph's arrays",
                      text_graph, const([1] * 65))
    assert "(rank 65)" in message and "node c" in message
    refused(mg.errors.InvalidArgumentError, "has too many dimensions \\(255; at most 254\\)",
            text_graph, const([1] * 255))


def test_const_shapes_beyond_int64_or_numpy_are_refused_in_few_words():
    """[0, 2**62] raised numpy's 'array is too big'; 250 dims of 2**62 tried to print a
    4,600-digit element count."""
    refused(mg.errors.UnimplementedError, "cannot be represented by numpy", text_graph,
            const([0, 2**62]))
    message = refused(mg.errors.InvalidArgumentError, "is too large \\(more than 2\\*\\*63 - 1 "
                      "entries\\)", text_graph, const([2**62] * 250))
    assert "(rank 250)" in message
    refused(mg.errors.ResourceExhaustedError, "needs about 2\\*\\*61 bytes", text_graph,
            const([2**31, 2**28]))


def test_one_repeated_value_is_held_as_a_broadcast_not_expanded():
    """An 80-byte Const claiming 2**26 elements was expanded to 256 MiB at import."""
    text = const([4, 1 << 24], "float_val: -1.5")
    assert len(protos.parse_text(text).SerializeToString()) < 80
    growth = peak_growth(f"""
        root = mg.import_graph_def(protos.parse_text({text!r}))
        value = root.graph().get_operation("c").attrs["value"]
        assert value.shape == (4, 1 << 24) and value.strides == (0, 0)
        assert not value.flags.writeable and float(value[3, -1]) == -1.5
        exported = mg.export_graph_def(root).SerializeToString()
        assert len(exported) < 200, len(exported)
    """)
    assert growth < 32 << 20, f"{growth >> 20} MiB"


@pytest.mark.parametrize("backend", BACKENDS)
def test_broadcast_constants_compute_like_expanded_ones(backend):
    root = text_graph(const([3, 1000], "float_val: -1.5"))
    c = root.graph().get_operation("c").outputs[0]
    relu, total = ops.Relu(root, c), ops.Sum(root, ops.Square(root, c), [0, 1])
    value, relu_value, total_value = mg.ClientSession(root, backend=backend).Run(
        [c, relu, total])
    np.testing.assert_array_equal(value, np.full((3, 1000), -1.5, np.float32))
    assert relu_value.max() == 0 and total_value == np.float32(2.25 * 3000)


def test_partly_given_values_are_accounted_against_memory():
    refused(mg.errors.ResourceExhaustedError, "more than this machine's", text_graph,
            const([1 << 40], "float_val: 1 float_val: 2"))


# ----------------------------------------------------------------------------- attrs


@pytest.mark.parametrize("extra, kind", [('s: "x"', "string"), ("f: 1", "float"),
                                         ("b: true", "bool"), ("type: DT_FLOAT", "type")])
def test_list_attrs_holding_other_kinds_are_refused(extra, kind):
    text = PLACEHOLDER + (' node { name: "m" op: "MaxPool" input: "p" attr { key: "T" value { '
                          'type: DT_FLOAT } } attr { key: "ksize" value { list { i: 1 i: 2 i: 2 '
                          f'i: 1 {extra} }} }} }} attr {{ key: "strides" value {{ list {{ i: 1 '
                          'i: 1 i: 1 i: 1 } } } attr { key: "padding" value { s: "VALID" } } }')
    refused(mg.errors.InvalidArgumentError, f"AttrValue had value with type 'list\\({kind}\\)' "
            f"when 'list\\(int\\)' expected\n\t for attr 'ksize'", text_graph, text)


def attr_entry_with_stray_field(key: bytes, value: bytes) -> bytes:
    """A NodeDef attr map entry holding a field 3 its entry message does not declare."""
    def field(number: int, payload: bytes) -> bytes:
        return bytes([number << 3 | 2, len(payload)]) + payload
    return field(5, field(1, key) + field(2, value) + b"\x18\x07")


def graph_with_stray_entry(duplicate: bool) -> bytes:
    value = protos.message_class("tensorflow.AttrValue")(type=3).SerializeToString()  # int32
    node = protos.GraphDef().node.add()
    node.name, node.op = "p", "Placeholder"
    if duplicate:
        node.attr["dtype"].type = 1
    node_bytes = node.SerializeToString() + attr_entry_with_stray_field(b"dtype", value)
    return bytes([1 << 3 | 2, len(node_bytes)]) + node_bytes


def test_an_attr_entry_with_an_unknown_field_keeps_its_value():
    """upb set such an entry aside, so the attr silently took its default (or was missing);
    TF's parser keeps it: it imports faithfully, and twice-given keys are refused."""
    root = mg.import_graph_def(graph_with_stray_entry(duplicate=False))
    assert root.graph().get_operation("p").attrs["dtype"] is mg.int32
    refused(mg.errors.InvalidArgumentError, "NodeDef 'p' sets 'attr' entry 'dtype' twice",
            mg.import_graph_def, graph_with_stray_entry(duplicate=True))


@pytest.mark.oracle
def test_an_attr_entry_with_an_unknown_field_imports_as_in_tensorflow(tf):
    graph_def = graph_with_stray_entry(duplicate=False)
    with tf.Graph().as_default() as graph:
        tf.graph_util.import_graph_def(tf.compat.v1.GraphDef.FromString(graph_def), name="")
    assert graph.get_operation_by_name("p").get_attr("dtype") == tf.int32
    assert mg.import_graph_def(graph_def).graph().get_operation("p").attrs["dtype"] is mg.int32


def placeholder_shape(shape_text: str) -> str:
    return PLACEHOLDER[:-2] + f' attr {{ key: "shape" value {{ shape {{ {shape_text} }} }} }} }}'


@pytest.mark.parametrize("shape_text, match", [
    ("unknown_rank: true dim { size: 3 }", "An unknown shape must not have any dimensions set"),
    ("dim { size: -2 }", "has dimensions with values below -1 \\(where -1 means unknown\\)"),
    ("dim { size: 1 } " * 255, "has too many dimensions"),
    ("dim { size: 4611686018427387904 } " * 3, "is too large \\(more than 2\\*\\*63 - 1"),
])
def test_shape_attrs_tensorflow_refuses_are_refused(shape_text, match):
    message = refused(mg.errors.InvalidArgumentError, match, text_graph,
                      placeholder_shape(shape_text))
    assert "node p" in message and "attr 'shape'" in message


def test_shape_attrs_tensorflow_accepts_import_as_written():
    for shape_text, dims in (("", ()), ("dim { size: -1 } dim { size: 4611686018427387904 } "
                                        "dim { size: 4 }", (None, 2**62, 4)),
                             ("dim { size: 1 } " * 100, (1,) * 100)):
        root = text_graph(placeholder_shape(shape_text))
        assert root.graph().get_operation("p").outputs[0].shape.dims == dims


def test_list_lengths_claimed_by_attrs_are_checked_before_anything_is_built():
    """AddN/ShapeN with N=2**31 and Unpack with num=10**11 raised MemoryError."""
    for op in ("AddN", "ShapeN"):
        text = PLACEHOLDER + (f' node {{ name: "s" op: "{op}" input: "p" attr {{ key: "T" '
                              f'value {{ type: DT_FLOAT }} }} attr {{ key: "N" value {{ i: '
                              f'2147483648 }} }} }}')
        message = refused(mg.errors.InvalidArgumentError, "NodeDef expected inputs 'float, "
                          "float, .*\\(2,147,483,648 inputs\\)' do not match 1 inputs",
                          text_graph, text)
        assert "node s" in message
    unpack = PLACEHOLDER + (' node { name: "s" op: "Unpack" input: "p" attr { key: "T" value { '
                            'type: DT_FLOAT } } attr { key: "num" value { i: NUM } } }')
    refused(mg.errors.InvalidArgumentError, "Unpack 's': attr 'num': Number of outputs is too "
            "big", text_graph, unpack.replace("NUM", str(10**11)))
    refused(mg.errors.ResourceExhaustedError, "65,537 outputs; minigraph builds at most",
            text_graph, unpack.replace("NUM", str(2**16 + 1)))
    root = mg.Scope.NewRootScope()
    refused(mg.errors.InvalidArgumentError, "Number of outputs is too big", ops.Unpack, root,
            ops.Placeholder(root, mg.float32), num=2**40)


# ----------------------------------------------------------------------------- export


def scalar_placeholder_graph() -> mg.Scope:
    root = mg.Scope.NewRootScope()
    ops.Placeholder(root.WithOpName("p"), mg.float32, shape=[])
    return root


def test_scalar_shape_attrs_export_so_they_import_again(tmp_path):
    """A rank-0 shape attr was written as an unset AttrValue, so neither TF nor minigraph
    re-imported it."""
    for path in (tmp_path / "g.pb", tmp_path / "g.pbtxt"):
        mg.export_graph_def(scalar_placeholder_graph(), path)
        again = mg.import_graph_def(path)
        assert again.graph().get_operation("p").outputs[0].shape.dims == ()


@pytest.mark.oracle
def test_scalar_shape_attrs_export_so_tensorflow_imports_them(tf):
    graph_def = mg.export_graph_def(scalar_placeholder_graph()).SerializeToString()
    with tf.Graph().as_default() as graph:
        tf.graph_util.import_graph_def(tf.compat.v1.GraphDef.FromString(graph_def), name="")
    assert graph.get_tensor_by_name("p:0").shape.rank == 0


def test_export_refuses_names_tensorflow_refuses():
    root = mg.Scope.NewRootScope()
    ops.Placeholder(root.WithOpName("a b"), mg.float32)
    refused(mg.errors.InvalidArgumentError, "node 'a b' has a name TensorFlow refuses",
            mg.export_graph_def, root)


def deny_writes_under(monkeypatch, directory: Path) -> None:
    """os.open refuses files under ``directory`` as a read-only directory does (chmod alone
    cannot show it to root)."""
    real = os.open

    def fake(path, flags, *args, **kwargs):
        if str(path).startswith(str(directory)) and flags & (os.O_WRONLY | os.O_RDWR):
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", fake)


@pytest.mark.parametrize("kind, error, match", [
    ("directory", mg.errors.FailedPreconditionError, "Is a directory"),
    ("under_file", mg.errors.AlreadyExistsError, "File exists"),
    ("empty", mg.errors.InvalidArgumentError, "the path is empty"),
    ("nul", mg.errors.InvalidArgumentError, "holds a NUL character"),
    ("long", mg.errors.InvalidArgumentError, "is too long"),
    ("surrogate", mg.errors.InvalidArgumentError, "cannot be encoded for the file system"),
    ("object", mg.errors.InvalidArgumentError, "expected a path"),
    ("trailing_slash", mg.errors.FailedPreconditionError, "Is a directory"),
])
def test_export_to_paths_no_file_can_have_is_one_clear_error(tmp_path, kind, error, match):
    (tmp_path / "afile").write_text("x")
    path = {"directory": tmp_path, "under_file": tmp_path / "afile" / "g.pb", "empty": "",
            "nul": f"{tmp_path}/g\0.pb", "long": tmp_path / ("g" * 300), "object": 3.5,
            "surrogate": f"{tmp_path}/g\ud800.pb", "trailing_slash": f"{tmp_path}/g.pb/"}[kind]
    message = refused(error, match, mg.export_graph_def, scalar_placeholder_graph(), path)
    assert message.startswith("export_graph_def")
    assert sorted(os.listdir(tmp_path)) == ["afile"]  # no temporary left behind


def test_export_to_a_read_only_directory(tmp_path, monkeypatch):
    deny_writes_under(monkeypatch, tmp_path / "ro")
    (tmp_path / "ro").mkdir()
    refused(mg.errors.PermissionDeniedError, "export_graph_def: cannot write .*Permission "
            "denied", mg.export_graph_def, scalar_placeholder_graph(), tmp_path / "ro" / "g.pb")
    assert isinstance(mg.errors.PermissionDeniedError("x"), PermissionError)  # still an OSError


def test_loading_paths_that_cannot_be_read(tmp_path, monkeypatch):
    """load_graph_def on an unreadable or over-long path raised a raw OSError."""
    good = tmp_path / "g.pb"
    mg.export_graph_def(scalar_placeholder_graph(), good)
    refused(mg.errors.InvalidArgumentError, "is too long", mg.import_graph_def,
            tmp_path / ("g" * 300))
    refused(mg.errors.NotFoundError, "does not exist", mg.import_graph_def, tmp_path / "no.pb")
    refused(mg.errors.FailedPreconditionError, "is a directory", mg.import_graph_def, tmp_path)
    os.mkfifo(tmp_path / "fifo.pb")  # opening it would block until a writer came
    refused(mg.errors.FailedPreconditionError, "is not a regular file", mg.import_graph_def,
            tmp_path / "fifo.pb")
    real_open = open

    def unreadable(path, *args, **kwargs):
        if str(path) == str(good):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", unreadable)
    refused(mg.errors.PermissionDeniedError, "cannot read .*g.pb.*Permission denied",
            mg.import_graph_def, good)


def test_import_errors_name_the_file(tmp_path):
    path = tmp_path / "model.pbtxt"
    path.write_text(PLACEHOLDER + ' node { name: "r" op: "Relu" input: "p" }')
    message = refused(mg.errors.InvalidArgumentError, "NodeDef missing attr 'T'",
                      mg.import_graph_def, path)
    assert message.endswith(f"(in '{path}')")


# ----------------------------------------------------------------------------- FileWriter


@pytest.mark.parametrize("kind, error, match", [
    ("file", mg.errors.AlreadyExistsError, "File exists"),
    ("under_file", mg.errors.FailedPreconditionError, "Not a directory"),
    ("none", mg.errors.InvalidArgumentError, "expected a path .*got NoneType"),
    ("empty", mg.errors.InvalidArgumentError, "the path is empty"),
])
def test_file_writer_logdirs_that_cannot_be_directories(tmp_path, kind, error, match):
    (tmp_path / "afile").write_text("x")
    logdir = {"file": tmp_path / "afile", "under_file": tmp_path / "afile" / "logs",
              "none": None, "empty": ""}[kind]
    refused(error, f"FileWriter.*{match}", mg.summary.FileWriter, logdir)


def test_file_writer_in_a_read_only_directory(tmp_path, monkeypatch):
    (tmp_path / "ro").mkdir()
    real_open = open

    def read_only(path, mode="r", *args, **kwargs):
        if str(path).startswith(str(tmp_path / "ro")) and set(mode) & set("wxa"):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, mode, *args, **kwargs)

    monkeypatch.setattr("builtins.open", read_only)
    refused(mg.errors.PermissionDeniedError, "FileWriter: cannot create the event file",
            mg.summary.FileWriter, tmp_path / "ro")


@pytest.mark.parametrize("tag, value, step, match", [
    ("loss", 10**400, 1, "value must be a number, got about 2\\*\\*1328"),
    ("loss", "1.5", 1, "value must be a number"),
    ("loss", 1.0, 2**63, "step must be an int64, got about 2\\*\\*63"),
    ("loss", 1.0, -2**63 - 1, "step must be an int64"),
    ("\ud800", 1.0, 1, "the tag is not valid text"),
])
def test_scalars_an_event_cannot_hold_are_refused(tmp_path, tag, value, step, match):
    writer = mg.summary.FileWriter(tmp_path)
    refused(mg.errors.InvalidArgumentError, match, writer.add_scalar, tag, value, step)
    writer.add_scalar("loss", 1e300, np.int64(2**63 - 1))  # float32 inf; the largest step
    writer.close()
    with open(writer.path, "rb") as file:
        events = [protos.Event().FromString(r) for r in records.read_records(file)]
    assert len(events) == 2 and events[1].step == 2**63 - 1
    assert events[1].summary.value[0].simple_value == np.inf


def test_a_failed_flush_keeps_its_events_and_close_does_not_report_success(tmp_path):
    writer = mg.summary.FileWriter(tmp_path)
    for step in range(3):
        writer.add_scalar("loss", float(step), step)
    os.remove(writer.path)
    os.mkdir(writer.path)  # every write of the event file now fails
    refused(mg.errors.FailedPreconditionError, "cannot write the event file", writer.flush)
    refused(mg.errors.FailedPreconditionError, "cannot write the event file", writer.close)
    os.rmdir(writer.path)
    Path(writer.path).touch()
    writer.close()
    with open(writer.path, "rb") as file:
        events = [protos.Event().FromString(r) for r in records.read_records(file)]
    assert [e.step for e in events if e.summary.value] == [0, 1, 2]


def test_a_write_that_fails_half_way_leaves_only_whole_records(tmp_path, monkeypatch):
    writer = mg.summary.FileWriter(tmp_path)
    writer.add_scalar("loss", 1.0, 1)
    writer.flush()
    writer.add_scalar("loss", 2.0, 2)
    real_open = open

    class HalfWrite:
        def __init__(self, file):
            self.file = file

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.file.close()

        def seek(self, *args):
            return self.file.seek(*args)

        def truncate(self, size):
            return self.file.truncate(size)

        def write(self, data):
            self.file.write(data[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("builtins.open", lambda path, mode="r", *a, **k: HalfWrite(
        real_open(path, mode, *a, **k)) if mode == "ab" else real_open(path, mode, *a, **k))
    refused(mg.errors.ResourceExhaustedError, "No space left on device", writer.flush)
    monkeypatch.undo()
    writer.close()
    with open(writer.path, "rb") as file:
        steps = [protos.Event().FromString(r).step for r in records.read_records(file)]
    assert steps == [0, 1, 2]


# ----------------------------------------------------------------------------- read_graph


def graph_document(name: str) -> dict:
    return {"format": "minigraph-graph", "version": 1, "ops": [
        {"name": name, "type": "Placeholder", "device": "", "inputs": [], "control_inputs": [],
         "attrs": {"dtype": {"type": "float32"}}}]}


@pytest.mark.parametrize("name", ["../../x", "a/../b", "./a", "a//b", "a/", "..", "a:1", "é",
                                  "_a", "a b", "a\x00b"])
def test_read_graph_refuses_names_tensorflow_or_paths_would_misread(tmp_path, name):
    path = tmp_path / "g.json"
    path.write_text(json.dumps(graph_document(name)))
    message = refused(mg.errors.InvalidArgumentError, "has a name minigraph refuses",
                      mg.io.read_graph, path)
    assert str(path) in message


def test_read_graph_accepts_names_tensorflow_accepts(tmp_path):
    for name in ("a/b.c", ".x", "x>y", "a-b/c_d", "9"):
        path = tmp_path / "g.json"
        path.write_text(json.dumps(graph_document(name)))
        assert mg.io.read_graph(path).get_operation(name).type == "Placeholder"


def test_write_graph_refuses_what_read_graph_would(tmp_path):
    root = mg.Scope.NewRootScope()
    ops.Placeholder(root.WithOpName("../x"), mg.float32)
    refused(mg.errors.InvalidArgumentError, "write_graph: op '../x' cannot be written",
            mg.io.write_graph, root, tmp_path / "g.json")
    assert os.listdir(tmp_path) == []


def test_read_graph_paths_that_cannot_be_read(tmp_path):
    refused(mg.errors.InvalidArgumentError, "read_graph: the path is empty", mg.io.read_graph,
            "")
    refused(mg.errors.FailedPreconditionError, "is a directory", mg.io.read_graph, tmp_path)
    refused(mg.errors.FailedPreconditionError, "is not a regular file", mg.io.read_graph,
            "/dev/zero")


# ----------------------------------------------------------------------------- op level


@pytest.mark.parametrize("op", ["Conv2D", "DepthwiseConv2dNative"])
@pytest.mark.parametrize("stride", [2**31, 2**62])
def test_native_windows_with_huge_strides_match_the_reference(op, stride):
    """The native Conv2D raised a raw ValueError for strides of 2**62."""
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root, mg.float32, shape=[1, 5, 5, 2])
    kernel = np.ones((2, 2, 2, 3 if op == "Conv2D" else 1), np.float32)
    y = getattr(ops, op)(root, x, kernel, strides=[1, stride, stride, 1], padding="SAME")
    feed = {x: np.arange(50, dtype=np.float32).reshape(1, 5, 5, 2)}
    results = [mg.ClientSession(root, backend=b).Run(feed, y) for b in BACKENDS]
    for result in results:
        np.testing.assert_array_equal(result, results[0])
    assert results[0].shape[1:3] == (1, 1)


def test_huge_zero_stride_views_given_to_ops_are_refused_like_feeds():
    """A 0-stride view of 2**40 floats given to an op raised numpy's MemoryError from the
    Const path; the feed path already said ResourceExhaustedError."""
    root = mg.Scope.NewRootScope()
    view = np.broadcast_to(np.float32(1), (1 << 40,))
    refused(mg.errors.ResourceExhaustedError, "Relu: input 'features'", ops.Relu, root, view)
    refused(mg.errors.ResourceExhaustedError, "Const: value", ops.Const, root, view)


def test_zero_stride_views_that_fit_become_constants_without_expanding():
    base = np.arange(3, dtype=np.float32)
    view = np.broadcast_to(base, (1 << 20, 3))
    root = mg.Scope.NewRootScope()
    value = root.graph().get_operation(ops.Const(root, view).op.name).attrs["value"]
    assert value.strides == (0, 4) and not np.shares_memory(value, base)
    base[0] = 7  # the caller's array changes later: the constant does not
    assert value[5, 0] == 0 and value.shape == (1 << 20, 3)


def test_global_norm_grad_with_unknown_input_and_rank3_backprop_says_tfs_words():
    root = mg.Scope.NewRootScope()
    t = ops.Placeholder(root, mg.float32)
    v = ops.Placeholder(root, mg.float32, shape=[2])
    backprop = ops.Placeholder(root, mg.float32, shape=[2, 2, 2])
    with pytest.warns(DeprecationWarning):
        refused(mg.errors.InvalidArgumentError, "BatchNormWithGlobalNormalizationGrad .*Shapes "
                "must be equal rank, but are 4 and 3", ops.BatchNormWithGlobalNormalizationGrad,
                root, t, v, v, v, backprop, variance_epsilon=0.001,
                scale_after_normalization=True)
