"""Malformed graph files and checkpoints: each is one clear minigraph error, never a raw one.

``read_graph`` must answer every malformed document (broken JSON, a field of the wrong type,
an unknown op, a dangling or cyclic input, deep nesting, huge claimed sizes, a constant
whose stored dtype contradicts its Const's dtype attr...) with an InvalidArgumentError that
names the file and the problem. ``write_graph`` must never overwrite a file that is not its
own. ``Saver.restore`` must read only the members it needs, check each member's header
before reading its data, and turn every unreadable file into a clear error; ``save`` must
leave no temporary behind and respect the umask.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import tracemalloc
import zipfile

import numpy as np
import pytest

import minigraph as mg
from minigraph import io as mgio
from minigraph import ops
from minigraph.errors import InvalidArgumentError, NotFoundError

# ----------------------------------------------------------------------------- helpers


def small_graph() -> mg.Scope:
    """Every attr kind, a bfloat16 and an int constant, a variadic op, a control input."""
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[2, 3])
    c = ops.Const(root.WithOpName("c"), np.ones((2, 3), np.float32))
    ops.Const(root.WithOpName("h"), np.array([1.5, 2], mg.bfloat16.np_dtype))
    s = ops.AddN(root.WithOpName("s"), [x, c])
    r = ops.Relu(root.WithOpName("r"), s)
    mg.train.variable(root, "w", [3], lambda sc, sh, dt: ops.Const(sc, np.zeros(3, np.float32)))
    image = ops.Reshape(root.WithOpName("image"), r, [1, 2, 3, 1])
    ops.MaxPool(root.WithOpName("pool"), image, [1, 1, 1, 1], [1, 1, 1, 1], "VALID")
    one = np.ones(1, np.float32)
    ops.FusedBatchNormV3(root.WithOpName("bn"), image, one, one * 0, np.zeros(0, np.float32),
                         np.zeros(0, np.float32), epsilon=1e-3, data_format="NHWC",
                         is_training=True)
    init = root.graph().get_operation("w_init/Assign")
    ops.Relu(root.WithOpName("after").WithControlDependencies([init]), r)
    return root


@pytest.fixture
def written(tmp_path):
    """(path of a valid graph file, its document) for the cases to corrupt."""
    path = mgio.write_graph(small_graph(), tmp_path / "g.json")
    return path, json.loads(open(path).read())


def op_entry(document: dict, name: str) -> dict:
    return next(e for e in document["ops"] if e["name"] == name)


def write_document(tmp_path, document, name="bad.json", constants_from=None) -> str:
    """Write ``document`` (an object, or raw text/bytes) as ``name``, with a copy of
    ``constants_from``'s constants file beside it."""
    path = tmp_path / name
    if isinstance(document, bytes):
        path.write_bytes(document)
    elif isinstance(document, str):
        path.write_text(document)
    else:
        path.write_text(json.dumps(document))
    if constants_from is not None:
        (tmp_path / (name + ".npz")).write_bytes(open(constants_from + ".npz", "rb").read())
    return str(path)


def npy_member(archive: zipfile.ZipFile, name: str, header: str, data: bytes,
               compress_type: int = zipfile.ZIP_STORED) -> None:
    """A ``.npy`` member with a hand-written header (which may lie about the data)."""
    header_bytes = header.encode("latin1")
    padding = 64 - (10 + len(header_bytes) + 1) % 64
    header_bytes += b" " * padding + b"\n"
    blob = b"\x93NUMPY\x01\x00" + len(header_bytes).to_bytes(2, "little") + header_bytes + data
    archive.writestr(zipfile.ZipInfo(name + ".npy"), blob, compress_type=compress_type)


def replace_constants(path: str, members: dict[str, tuple[str, bytes]],
                      keep: bool = True) -> None:
    """Rewrite ``path``'s constants file: ``members`` (name -> (npy header, data)) replace
    or join the existing members (all of them are dropped when ``keep`` is False)."""
    sidecar = mgio.constants_path(path)
    old = {}
    if keep:
        with zipfile.ZipFile(sidecar) as archive:
            old = {n: archive.read(n) for n in archive.namelist()}
    with zipfile.ZipFile(sidecar, "w") as archive:
        for name, blob in old.items():
            if name[:-4] not in members:
                archive.writestr(name, blob)
        for name, (header, data) in members.items():
            npy_member(archive, name, header, data)


# ----------------------------------------------------------------------------- malformed documents

# (id, mutation of the valid document (in place; may return a replacement), message regex)
DEEP = 100_000


class Replace:
    """A mutation's result: the whole document becomes ``value``."""

    def __init__(self, value):
        self.value = value


def _set(key, value):
    def mutate(doc):
        doc[key] = value
    return mutate


def _op(name, field, value):
    def mutate(doc):
        op_entry(doc, name)[field] = value
    return mutate


def _attr(name, attr, encoded):
    def mutate(doc):
        op_entry(doc, name)["attrs"][attr] = encoded
    return mutate


def _drop(name, field):
    def mutate(doc):
        del op_entry(doc, name)[field]
    return mutate


def _duplicate_op(doc):
    doc["ops"].append(copy.deepcopy(op_entry(doc, "r")))


def _move_to_end(name):
    def mutate(doc):
        entry = op_entry(doc, name)
        doc["ops"].remove(entry)
        doc["ops"].append(entry)
    return mutate


DOCUMENT_CASES = [
    ("not-an-object", lambda d: Replace([1, 2]), "not a minigraph graph file"),
    ("null", lambda d: Replace(None), "not a minigraph graph file"),
    ("wrong-format", _set("format", "tf-graph"), "not a minigraph graph file"),
    ("version-string", _set("version", "1"), "version"),
    ("version-bool", _set("version", True), "version"),
    ("version-zero", _set("version", 0), "version"),
    ("version-float", _set("version", 1.5), "version"),
    ("version-newer", _set("version", 99), "version 99.*upgrade"),
    ("unknown-top-field", _set("extra", 1), "unknown top-level field"),
    ("ops-missing", lambda d: d.pop("ops") and None, '"ops" must be a list'),
    ("ops-object", _set("ops", {"a": 1}), '"ops" must be a list'),
    ("op-not-object", lambda d: d["ops"].insert(0, ["x"]), "op #0: must be an object"),
    ("name-missing", _drop("x", "name"), r'op #0: "name" must be a string, got null'),
    ("name-int", _op("x", "name", 7), '"name" must be a string, got an integer'),
    ("name-empty", _op("x", "name", ""), '"name" is empty'),
    ("name-huge", _op("x", "name", "n" * 100_000), "characters"),
    ("type-missing", _drop("x", "type"), r"op 'x': is missing field\(s\) \['type'\]"),
    ("type-null", _op("x", "type", None), 'field "type" must be a string'),
    ("inputs-missing", _drop("r", "inputs"), r"op 'r': is missing field\(s\) \['inputs'\]"),
    ("inputs-string", _op("r", "inputs", "s:0"), 'op \'r\': field "inputs" must be a list'),
    ("control-object", _op("r", "control_inputs", {}), '"control_inputs" must be a list'),
    ("device-int", _op("r", "device", 0), 'field "device" must be a string'),
    ("attrs-list", _op("r", "attrs", []), 'field "attrs" must be an object'),
    ("unknown-field", _op("r", "colour", "red"), r"unknown field\(s\) \['colour'\]"),
    ("unknown-op", _op("r", "type", "NoSuchOp"), "'NoSuchOp', which this minigraph does not"),
    ("dangling-input", _op("r", "inputs", ["nowhere:0"]), "'nowhere:0' names no op defined"),
    ("self-cycle", _op("r", "inputs", ["r:0"]), "input 0 'r:0' names no op defined before"),
    ("cycle", _op("s", "inputs", ["x:0", "r:0"]), "op 's': input 1 'r:0' names no op defined"),
    ("out-of-order", _move_to_end("x"), "op 's': input 0 'x:0' names no op defined before"),
    ("input-no-index", _op("r", "inputs", ["s"]), "'s' is not '<op name>:<output index>'"),
    ("input-negative", _op("r", "inputs", ["s:-1"]), "is not '<op name>:<output index>'"),
    ("input-huge-index", _op("r", "inputs", ["s:99999999999999999999"]), "is not '<op name>"),
    ("input-out-of-range", _op("r", "inputs", ["s:3"]), r"op 's' has 1 output\(s\)"),
    ("input-int", _op("r", "inputs", [0]), "input 0 must be a string, got an integer"),
    ("too-many-inputs", _op("r", "inputs", ["s:0", "s:0"]), r"Relu takes 1 input\(s\)"),
    ("too-few-inputs", _op("image", "inputs", ["r:0"]), r"Reshape takes 2 input\(s\)"),
    ("variadic-empty", _op("s", "inputs", []), "AddN needs at least one input"),
    ("control-dangling", _op("after", "control_inputs", ["ghost"]), "control input 'ghost'"),
    ("control-int", _op("after", "control_inputs", [3]), "control input 0 must be a string"),
    ("duplicate-name", _duplicate_op, "op 'r': is defined twice"),
    ("unknown-attr", _attr("r", "alpha", {"float": 0.1}), "unknown attr 'alpha'"),
    ("attr-not-object", _attr("r", "T", "float32"), "attr 'T' must be an object with one key"),
    ("attr-two-keys", _attr("r", "T", {"type": "float32", "int": 1}), "one key"),
    ("attr-empty", _attr("r", "T", {}), "attr 'T' must be an object with one key"),
    ("attr-wrong-kind", _attr("bn", "epsilon", {"string": "0.1"}), "is a float attr, stored"),
    ("float-as-string", _attr("bn", "epsilon", {"float": "0.1"}), "must be a number"),
    ("float-as-bool", _attr("bn", "epsilon", {"float": True}), "must be a number"),
    ("float-nan", _attr("bn", "epsilon", {"float": float("nan")}), "finite number"),
    ("bool-as-int", _attr("bn", "is_training", {"bool": 1}), "must be true or false"),
    ("string-as-list", _attr("pool", "padding", {"string": ["VALID"]}), "must be a string"),
    ("string-not-allowed", _attr("pool", "padding", {"string": "WIDE"}), "allowed values"),
    ("type-unknown", _attr("x", "dtype", {"type": "float128"}), "'float128', not one of"),
    ("type-as-list", _attr("x", "dtype", {"type": ["float32"]}), "must be a string"),
    ("shape-string", _attr("x", "shape", {"shape": "2x3"}), "must be null or a list"),
    ("shape-negative", _attr("x", "shape", {"shape": [-2, 3]}), "must be null or a list"),
    ("shape-float-dim", _attr("x", "shape", {"shape": [2.5, 3]}), "must be null or a list"),
    ("shape-huge-dim", _attr("x", "shape", {"shape": [2**70, 3]}), "must be null or a list"),
    ("shape-huge-rank", _attr("x", "shape", {"shape": [1] * 65}), "at most 64 dimensions"),
    ("shape-nested", _attr("x", "shape", {"shape": [[2], [3]]}), "must be null or a list"),
    ("list-strings", _attr("pool", "ksize", {"list": ["1"]}), "list of at most"),
    ("list-nested", _attr("pool", "ksize", {"list": [[[[1]]]]}), "list of at most"),
    ("list-long", _attr("pool", "ksize", {"list": [1] * 70_000}), "list of at most"),
    ("list-short", _attr("pool", "ksize", {"list": [1, 1]}), "op 'pool': cannot be rebuilt"),
    ("missing-required-attr", lambda d: op_entry(d, "c")["attrs"].pop("dtype"),
     r"op 'c': cannot be rebuilt.*missing required attr"),
    ("type-attr-contradicts-input", _attr("r", "T", {"type": "float64"}),
     "op 'r': cannot be rebuilt"),
    ("variadic-type-contradicts", _attr("s", "T", {"type": "int32"}),
     "op 's'.*does not match dtype int32 of the explicit attr"),
    ("shapes-contradict", _attr("x", "shape", {"shape": [2, 4]}), "op 's': cannot be rebuilt"),
    ("const-dtype-mismatch", _attr("c", "dtype", {"type": "int32"}),
     "op 'c'.*holds float32 values, but the op's dtype attr says int32"),
    ("bfloat16-dtype-mismatch", _attr("h", "dtype", {"type": "float16"}),
     "op 'h'.*holds bfloat16 values, but the op's dtype attr says float16"),
    ("missing-constant", _attr("c", "value", {"tensor": "c/nothing"}),
     "op 'c': its constant 'c/nothing' is missing"),
    ("tensor-not-string", _attr("c", "value", {"tensor": 5}), "attr 'value' must be a string"),
]


@pytest.mark.parametrize("mutate, message", [c[1:] for c in DOCUMENT_CASES],
                         ids=[c[0] for c in DOCUMENT_CASES])
def test_malformed_document_is_one_clear_error(written, tmp_path, mutate, message):
    path, document = written
    result = mutate(document)
    if isinstance(result, Replace):
        document = result.value
    bad = write_document(tmp_path, json.dumps(document), constants_from=path)
    with pytest.raises(InvalidArgumentError, match=message) as caught:
        mg.io.read_graph(bad)
    assert bad in str(caught.value)  # the message names the file


RAW_CASES = [
    ("empty", b"", "invalid JSON"),
    ("truncated", None, "invalid JSON"),
    ("not-utf8", b"\xff\xfe{", "invalid JSON"),
    ("deep-array", ("[" * DEEP + "]" * DEEP).encode(), "nested too deeply"),
    ("deep-attr", None, "nested too deeply"),
    ("duplicate-key", b'{"format": "minigraph-graph", "format": "x"}', "appears twice"),
    ("giant-integer", b'{"format": "minigraph-graph", "version": 1' + b"0" * 5000 + b"}",
     "invalid JSON"),
    ("trailing-garbage", None, "invalid JSON"),
]


@pytest.mark.parametrize("text, message", [c[1:] for c in RAW_CASES], ids=[c[0] for c in RAW_CASES])
def test_broken_json_is_one_clear_error(written, tmp_path, request, text, message):
    path, document = written
    valid = open(path, "rb").read()
    case = request.node.callspec.id
    if case == "truncated":
        text = valid[:len(valid) // 2]
    elif case == "trailing-garbage":
        text = valid + b"}"
    elif case == "deep-attr":
        text = valid.replace(b'"list": []', b'"list": ' + b"[" * DEEP + b"]" * DEEP)
    bad = write_document(tmp_path, text, constants_from=path)
    with pytest.raises(InvalidArgumentError, match=message) as caught:
        mg.io.read_graph(bad)
    assert bad in str(caught.value)


def test_every_field_with_every_wrong_type(written, tmp_path):
    """Each field of each op, and each attr value, replaced by a value of every JSON type:
    always an InvalidArgumentError (or the file still reads, where the value is valid)."""
    path, document = written
    values = [None, True, 0, -1, 2.5, "", "zz", [], [None], {}, {"a": 1}]
    tried = 0
    for entry in document["ops"]:
        targets = [(entry, key) for key in entry] + [
            (encoded, key) for encoded in entry["attrs"].values() for key in encoded]
        for container, key in targets:
            for value in values:
                original = container[key]
                container[key] = value
                bad = write_document(tmp_path, document, constants_from=path)
                container[key] = original
                try:
                    mg.io.read_graph(bad)
                except InvalidArgumentError as exc:
                    assert bad in str(exc)
                tried += 1
    assert tried > 500


def test_every_truncation_point(written, tmp_path):
    path, _ = written
    valid = open(path, "rb").read()
    for end in range(0, len(valid), max(1, len(valid) // 200)):
        bad = write_document(tmp_path, valid[:end], constants_from=path)
        with pytest.raises(InvalidArgumentError, match="invalid JSON"):
            mg.io.read_graph(bad)


def test_size_limits(written, tmp_path, monkeypatch):
    path, document = written
    monkeypatch.setattr(mgio, "MAX_OPS", 3)
    with pytest.raises(InvalidArgumentError, match=r"ops \(at most 3\)"):
        mg.io.read_graph(path)
    monkeypatch.setattr(mgio, "MAX_GRAPH_FILE_BYTES", 100)
    with pytest.raises(InvalidArgumentError, match="larger than 100 bytes"):
        mg.io.read_graph(path)


def test_missing_files(written, tmp_path):
    path, _ = written
    with pytest.raises(NotFoundError, match="does not exist"):
        mg.io.read_graph(tmp_path / "nothing.json")
    os.remove(mgio.constants_path(path))
    with pytest.raises(InvalidArgumentError, match="op 'c': its constant 'c/value' is missing "
                                                   r"\(no constants file"):
        mg.io.read_graph(path)


# ----------------------------------------------------------------------------- bad constants files


def test_constants_file_not_an_archive(written):
    path, _ = written
    open(mgio.constants_path(path), "wb").write(b"not a zip at all")
    with pytest.raises(InvalidArgumentError, match="cannot read graph constants file"):
        mg.io.read_graph(path)
    np.save(open(mgio.constants_path(path), "wb"), np.ones(3, np.float32))
    with pytest.raises(InvalidArgumentError, match="single .npy array, not a .npz"):
        mg.io.read_graph(path)


@pytest.mark.parametrize("member, header, data, message", [
    ("c/value",
     "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 1099511627776), }",
     b"\0" * 24, r"header claiming shape \[1099511627776, 1099511627776\]"),
    ("c/value", "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", b"\0" * 8,
     "holds 8 bytes of data"),
    ("c/value", "{'descr': '|O', 'fortran_order': False, 'shape': (2, 3), }", b"\0" * 48,
     "not a plain numeric dtype"),
    ("c/value", "{'descr': '<U3', 'fortran_order': False, 'shape': (2,), }", b"\0" * 24,
     "not a plain numeric dtype"),
    ("c/value", "{'descr': '<u4', 'fortran_order': False, 'shape': (2, 3), }", b"\0" * 24,
     "has dtype uint32, not a minigraph dtype"),
    ("c/value", "not a dict at all", b"", "cannot be read"),
    ("h/value::bfloat16", "{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }",
     b"\0" * 3, "a bfloat16 constant is stored as uint16 bits"),
], ids=["huge-shape", "short-data", "object", "unicode", "uint32", "bad-header", "odd-bf16"])
def test_bad_constant_members(written, member, header, data, message):
    path, _ = written
    replace_constants(path, {member: (header, data)})
    with pytest.raises(InvalidArgumentError, match=message):
        mg.io.read_graph(path)


def test_zip_directory_claiming_a_huge_stored_member(written):
    """The header and the zip directory both claim 4 GB; the member holds 12 bytes: refused
    before anything is allocated."""
    path, _ = written
    replace_constants(path, {"c/value": ("{'descr': '<f4', 'fortran_order': False, "
                                         "'shape': (1006632928,), }", b"\0" * 12)}, keep=False)
    sidecar = mgio.constants_path(path)
    data = bytearray(open(sidecar, "rb").read())
    central = data.find(b"PK\x01\x02")
    data[central + 24:central + 28] = (0xF0000000).to_bytes(4, "little")  # uncompressed size
    open(sidecar, "wb").write(bytes(data))
    tracemalloc.start()
    try:
        with pytest.raises(InvalidArgumentError, match="member 'c/value' claims 4026531840 "
                                                       r"bytes \(140 stored\)"):
            mg.io.read_graph(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, peak


def test_bool_constant_with_other_bytes(tmp_path):
    root = mg.Scope.NewRootScope()
    ops.Const(root.WithOpName("b"), np.array([True, False]))
    path = mgio.write_graph(root, tmp_path / "b.json")
    replace_constants(path, {"b/value": ("{'descr': '|b1', 'fortran_order': False, "
                                         "'shape': (2,), }", b"\x01\x07")})
    with pytest.raises(InvalidArgumentError, match="bytes other than 0 and 1"):
        mg.io.read_graph(path)


def test_big_endian_and_fortran_constants_read_correctly(written):
    path, _ = written
    value = np.arange(6, dtype=np.float32).reshape(2, 3)
    replace_constants(path, {"c/value": ("{'descr': '>f4', 'fortran_order': True, "
                                         "'shape': (2, 3), }",
                                         value.astype(">f4").tobytes(order="F"))})
    graph = mg.io.read_graph(path)
    read = graph.get_operation("c").attrs["value"]
    assert read.dtype == np.float32 and read.flags.c_contiguous
    np.testing.assert_array_equal(read, value)


# ----------------------------------------------------------------------------- write_graph's files


def test_write_graph_never_clobbers_a_checkpoint(tmp_path):
    """``model.json`` and the checkpoint ``model.npz`` live side by side."""
    root, session = variable_graph()
    checkpoint = mg.train.Saver(root).save(session, tmp_path / "model.npz")
    before = open(checkpoint, "rb").read()
    mgio.write_graph(root, tmp_path / "model.json")
    assert open(checkpoint, "rb").read() == before
    assert sorted(os.listdir(tmp_path)) == ["model.json", "model.json.npz", "model.npz"]
    mg.train.Saver(root).restore(mg.ClientSession(root), checkpoint)
    mg.io.read_graph(tmp_path / "model.json")
    mgio.write_graph(root, tmp_path / "model.json")  # its own constants file: replaced


def test_write_graph_refuses_to_overwrite_a_foreign_file(tmp_path):
    root, session = variable_graph()
    foreign = mg.train.Saver(root).save(session, tmp_path / "model.json.npz")
    before = open(foreign, "rb").read()
    with pytest.raises(InvalidArgumentError, match="is not a minigraph graph constants file; "
                                                   "refusing to overwrite it"):
        mgio.write_graph(root, tmp_path / "model.json")
    assert open(foreign, "rb").read() == before
    assert not (tmp_path / "model.json").exists()


def test_graph_files_from_before_the_constants_name_still_read(tmp_path):
    path = mgio.write_graph(small_graph(), tmp_path / "old.json")
    os.rename(mgio.constants_path(path), tmp_path / "old.npz")
    assert len(mg.io.read_graph(path).operations()) == len(small_graph().graph().operations())


def test_graph_files_respect_the_umask(tmp_path):
    previous = os.umask(0o027)
    try:
        path = mgio.write_graph(small_graph(), tmp_path / "g.json")
    finally:
        os.umask(previous)
    assert os.stat(path).st_mode & 0o777 == 0o640
    assert os.stat(mgio.constants_path(path)).st_mode & 0o777 == 0o640
    assert sorted(os.listdir(tmp_path)) == ["g.json", "g.json.npz"]


# ----------------------------------------------------------------------------- checkpoints


def variable_graph(name="w", shape=(3,), dtype=mg.float32):
    root = mg.Scope.NewRootScope()
    mg.train.variable(root, name, list(shape), lambda s, sh, dt: ops.Const(
        s, np.arange(np.prod(sh)).reshape(sh).astype(dt.np_dtype)), dtype)
    session = mg.ClientSession(root)
    session.Run({}, [], targets=mg.train.global_variables_initializer(root))
    return root, session


def restore(root, path):
    session = mg.ClientSession(root)
    mg.train.Saver(root).restore(session, path)
    return session


def test_restore_reads_only_the_members_it_needs(tmp_path):
    """A checkpoint with a 64 MB (deflated to ~64 KB) member the graph does not use: restoring
    the 3-element variable must not inflate it."""
    root, session = variable_graph()
    path = mg.train.Saver(root).save(session, tmp_path / "ckpt.npz")
    with zipfile.ZipFile(path, "a", zipfile.ZIP_DEFLATED) as archive:
        with archive.open("unused.npy", "w", force_zip64=True) as member:
            np.lib.format.write_array_header_1_0(
                member, {"descr": "<f4", "fortran_order": False, "shape": (16 << 20,)})
            zeros = bytes(1 << 20)
            for _ in range(64):
                member.write(zeros)
    assert os.path.getsize(path) < 1 << 20
    tracemalloc.start()
    try:
        restored = restore(root, path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, peak
    np.testing.assert_array_equal(restored.Run({}, root.graph().get_operation("w").outputs[0]),
                                  [0, 1, 2])


def test_member_claiming_a_huge_shape_is_refused_before_reading(tmp_path):
    root, _ = variable_graph()
    path = tmp_path / "ckpt.npz"
    with zipfile.ZipFile(path, "w") as archive:  # the header claims 4 TB; the data is 12 bytes
        npy_member(archive, "w", "{'descr': '<f4', 'fortran_order': False, "
                   "'shape': (1099511627776,), }", b"\0" * 12)
    tracemalloc.start()
    try:
        with pytest.raises(InvalidArgumentError, match=r"'w' has shape \[1099511627776\], the "
                                                       "graph expects"):
            restore(root, path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak
    with zipfile.ZipFile(path, "w") as archive:  # the right shape, too little data
        npy_member(archive, "w", "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }",
                   b"\0" * 4)
    with pytest.raises(InvalidArgumentError, match="member 'w' has a header claiming shape "
                                                   r"\[3\] of float32 \(12 bytes\) but holds 4"):
        restore(root, path)


def test_unreadable_checkpoints_are_clear(tmp_path):
    root, session = variable_graph()
    good = mg.train.Saver(root).save(session, tmp_path / "ckpt.npz")
    npy = tmp_path / "ckpt.npy"
    np.save(npy, np.arange(3, dtype=np.float32))
    with pytest.raises(InvalidArgumentError, match="single .npy array, not a .npz"):
        restore(root, npy)
    with pytest.raises(NotFoundError, match="checkpoint .* does not exist"):
        restore(root, tmp_path / "missing.npz")
    (tmp_path / "text.npz").write_text("hello")
    with pytest.raises(InvalidArgumentError, match="cannot read checkpoint"):
        restore(root, tmp_path / "text.npz")
    # an unknown compression method (99): zipfile itself would raise NotImplementedError
    data = bytearray(open(good, "rb").read())
    for signature, offset in ((b"PK\x03\x04", 8), (b"PK\x01\x02", 10)):
        start = data.find(signature)
        data[start + offset:start + offset + 2] = (99).to_bytes(2, "little")
    (tmp_path / "odd.npz").write_bytes(bytes(data))
    with pytest.raises(InvalidArgumentError, match="compression method 99"):
        restore(root, tmp_path / "odd.npz")
    # a corrupt member (a flipped data byte): the CRC check
    data = bytearray(open(good, "rb").read())
    data[data.find(b"PK\x01\x02") - 1] ^= 0xFF
    (tmp_path / "crc.npz").write_bytes(bytes(data))
    with pytest.raises(InvalidArgumentError, match="cannot be read.*CRC"):
        restore(root, tmp_path / "crc.npz")


def test_odd_length_bfloat16_member(tmp_path):
    root, session = variable_graph(shape=(2,), dtype=mg.bfloat16)
    path = tmp_path / "ckpt.npz"
    with zipfile.ZipFile(path, "w") as archive:
        npy_member(archive, "w::bfloat16", "{'descr': '|u1', 'fortran_order': False, "
                   "'shape': (3,), }", b"\0\0\0")
    with pytest.raises(InvalidArgumentError, match=r"variable 'w' has dtype uint8 \(bfloat16 is "
                                                   r"stored as uint16 bits\), the graph expects "
                                                   "bfloat16"):
        restore(root, path)
    good = mg.train.Saver(root).save(session, tmp_path / "good.npz")
    assert restore(root, good).Run({}, root.graph().get_operation("w").outputs[0]).dtype == \
        mg.bfloat16.np_dtype


@pytest.mark.parametrize("name", ["file", "allow_pickle", "a/b::c"])
def test_any_variable_name_saves(tmp_path, name):
    """np.savez(file, **arrays) cannot take a key named 'file'; the checkpoint writer can."""
    root, session = variable_graph(name)
    path = mg.train.Saver(root).save(session, tmp_path / "ckpt.npz")
    restored = restore(root, path)
    np.testing.assert_array_equal(
        restored.Run({}, root.graph().get_operation(name).outputs[0]), [0, 1, 2])


def test_checkpoints_respect_the_umask(tmp_path):
    root, session = variable_graph()
    for umask, mode in ((0o022, 0o644), (0o077, 0o600), (0o002, 0o664)):
        previous = os.umask(umask)
        try:
            path = mg.train.Saver(root).save(session, tmp_path / f"ckpt{umask}.npz")
        finally:
            os.umask(previous)
        assert os.stat(path).st_mode & 0o777 == mode


def test_a_killed_save_leaves_no_temporary_for_good(tmp_path):
    """A save killed mid-write (SIGKILL: no ``finally`` runs) leaves its temporary; the next
    save of the same checkpoint removes it, and the checkpoint is the old one until then."""
    path = tmp_path / "ckpt.npz"
    script = f"""
import os, signal, numpy as np, minigraph as mg
from minigraph import ops
root = mg.Scope.NewRootScope()
mg.train.variable(root, "w", [3], lambda s, sh, dt: ops.Const(s, np.zeros(3, np.float32)))
session = mg.ClientSession(root)
session.Run({{}}, [], targets=mg.train.global_variables_initializer(root))
saver = mg.train.Saver(root)
saver.save(session, {str(path)!r})
def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)
np.lib.format.write_array = die
saver.save(session, {str(path)!r})
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert done.returncode == -9, done.stderr
    left = sorted(os.listdir(tmp_path))
    assert len(left) == 2 and left[0] == "ckpt.npz" and left[1].endswith(".tmp"), left
    root, session = variable_graph()
    restore(root, path)  # the old checkpoint is intact
    mg.train.Saver(root).save(session, path)
    assert os.listdir(tmp_path) == ["ckpt.npz"]


def test_a_live_writers_temporary_is_left_alone(tmp_path):
    root, session = variable_graph()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        busy = tmp_path / f"ckpt.npz.{mgio._host_tag()}.{sleeper.pid}.{'0' * 16}.tmp"
        busy.write_bytes(b"in progress")
        mg.train.Saver(root).save(session, tmp_path / "ckpt.npz")
        assert busy.exists()
    finally:
        sleeper.kill()
        sleeper.wait()
