"""Hostile files: case generators for every file surface, run one forked child per case.

``python -m tests.fuzz.hostile --cases 40`` draws ``--cases`` cases per family (seeded:
the same every run), runs each in its own child under a memory limit
(:mod:`tests.fuzz.forked`) and prints the campaign table. A case says what TensorFlow 2.21
does with its input (the generators hold TF's rules, written here independently of
minigraph's code: node names, input indices, shapes, Const values, attr kinds) and what a
refusal must name (the file, the node, the attr). Each outcome lands in one column:

=========  ====================================================================
ok         accepted, and what it built means what the file says (values, names,
           shapes, events read back)
clean      refused with an ``mg.errors`` exception naming what the case says, in at
           most 2,000 characters (a stated limit of minigraph, UnimplementedError or
           ResourceExhaustedError, counts here too when TF would accept)
unclear    refused cleanly, but the message misses a name or is over-long, or it
           refuses what TF accepts without saying it is a limit
raw        any other exception (ValueError, RecursionError, OSError...)
crash      the child died (a signal)
hang       no answer within the timeout
memory     MemoryError, or peak memory beyond the case's budget (a base plus a
           multiple of the input's size: memory must follow what the file holds)
wrong      accepted what TF refuses, or built something else than the file says
=========  ====================================================================

Families: ``input_index``, ``node_name``, ``pbtxt_depth``, ``pbtxt_bulk``,
``const_values``, ``attr_kinds``, ``shape_attr``, ``number_attr``, ``export_paths``,
``filewriter``, ``read_graph_names``, ``op_level``, ``binary_mutation``,
``pbtxt_mutation``. tests/test_fuzz.py runs a short campaign of every family in CI.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

COLUMNS = ("cases", "ok", "clean", "unclear", "raw", "crash", "hang", "memory", "wrong")
FAILING = ("unclear", "raw", "crash", "hang", "memory", "wrong")
MESSAGE_LIMIT = 2000
BASE_BUDGET = 64 << 20  # peak memory any case may add: imports, a session, numpy temporaries
LIMIT_CLASSES = ("UnimplementedError", "ResourceExhaustedError")


@dataclass
class Case:
    """One hostile input. ``surface`` picks how it runs; ``expect`` is what TF does with it
    (``accept``, ``refuse``, or ``either``: TF's verdict is not the point, only a clean
    outcome is); ``names``: what a refusal must name; ``check``: what an accepted case must
    give; ``limit_ok``: a clean refusal of an accepted input is a stated limit (an
    unsupported dtype); ``budget``: peak memory allowed beyond BASE_BUDGET."""

    family: str
    label: str
    surface: str
    payload: Any
    expect: str
    names: tuple = ()
    check: Any = None
    limit_ok: bool = False
    budget: int = 0
    index: int = -1

    def describe(self) -> str:
        return f"{self.family}#{self.index}: {self.label}"[:300]


# ----------------------------------------------------------------------------- TF's rules
# Written out here, not imported from minigraph: they are what the cases test against.

_NAME_FIRST = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.")
_NAME_REST = _NAME_FIRST | set("-/_")


def tf_accepts_name(name: str) -> bool:
    """TF 2.21's IsValidNodeName, by hand: pieces split at '>', each a first character of
    [A-Za-z0-9.] then any of [A-Za-z0-9._/-]."""
    for piece in name.split(">"):
        if not piece or piece[0] not in _NAME_FIRST:
            return False
        if any(c not in _NAME_REST for c in piece[1:]):
            return False
    return True


def graph_file_accepts_name(name: str) -> bool:
    """minigraph's graph files: TF's rule, no empty, '.' or '..' piece between '/', and at
    most 65,536 characters (the format's limit on any string)."""
    return tf_accepts_name(name) and all(p not in ("", ".", "..") for p in name.split("/")) \
        and len(name) <= 1 << 16


def tf_shape_problem(dims: list[int], unknown_rank: bool, partial: bool) -> str | None:
    """Why TF refuses a TensorShapeProto (None: it accepts). ``partial``: -1 allowed (a
    shape attr); else every dim must be known (a tensor's shape)."""
    if unknown_rank:
        return "unknown rank with dims" if dims else None
    if len(dims) > 254:
        return "too many dims"
    if any(d < (-1 if partial else 0) for d in dims):
        return "dim below the minimum"
    count = 1
    for d in dims:
        if d == -1:
            break
        count *= d
        if count > 2**63 - 1:
            return "too many elements"
    return None


def numpy_holds(dims: list[int], itemsize: int) -> bool:
    """Whether a numpy array of these dims can exist (rank, byte count of non-zero dims)."""
    nonzero = 1
    for d in dims:
        nonzero *= d or 1
    return len(dims) <= 64 and nonzero * itemsize <= 2**63 - 1


# ----------------------------------------------------------------------------- GraphDef helpers

DTYPES = {  # name: (DataType number, TensorProto field, numpy dtype name, itemsize)
    "float32": (1, "float_val", "float32", 4), "float64": (2, "double_val", "float64", 8),
    "int32": (3, "int_val", "int32", 4), "int64": (9, "int64_val", "int64", 8),
    "bool": (10, "bool_val", "bool", 1), "float16": (19, "half_val", "float16", 2),
    "bfloat16": (14, "half_val", "bfloat16", 2),
}
UNSUPPORTED = {"string": 7, "uint8": 4, "complex64": 8, "int8": 6}


def _protos():
    from minigraph.interop import protos

    return protos


def placeholder(graph_def, name: str = "p", dtype: int = 1, shape=None):
    node = graph_def.node.add()
    node.name, node.op = name, "Placeholder"
    node.attr["dtype"].type = dtype
    if shape is not None:
        node.attr["shape"].shape.SetInParent()
        for d in shape:
            node.attr["shape"].shape.dim.add().size = d
    return node


def op_node(graph_def, name: str, op: str, inputs=(), **type_attrs):
    node = graph_def.node.add()
    node.name, node.op = name, op
    node.input.extend(inputs)
    for key, value in type_attrs.items():
        node.attr[key].type = value
    return node


# ----------------------------------------------------------------------------- families
# Each family(rng, scale) returns a Case; scale is 1 in CI, larger in a campaign.


def fam_input_index(rng: random.Random, scale: int) -> Case:
    digits = rng.choice(["0", "00", "1", "2", "7", "10", "99999999999999999999",
                         "4294967296", "2147483648", "٠", "٣", "²", "３", "۳", "১", "0٣",
                         "", "-0", "+0", " 0", "0 ", "0x0", "1e0", "0:0", "9" * 5000])
    text = rng.choice([f"p:{digits}", f"^p:{digits}", f"p{digits}", "^^p", ":0",
                       f"p:{digits}", f"p:{digits}"])
    graph_def = _protos().GraphDef()
    placeholder(graph_def)
    op_node(graph_def, "a", "Identity", [text], T=1)
    index = text[2:]  # output 0 (any number of ASCII zeros) is the only one a Placeholder has
    accept = text == "p" or (text.startswith("p:") and index.isascii() and index.isdigit()
                             and set(index) == {"0"})
    return Case("input_index", f"Identity input {text[:40]!r}", "import_bytes",
                graph_def.SerializeToString(), "accept" if accept else "refuse",
                names=("'a'",), check={"inputs": {"a": ["p:0"]}} if accept else None)


_NAME_PIECES = ["a", "B", "7", ".", "-", "/", "_", ">", ":", "^", " ", "é", "\x00", "\t",
                "..", "../", "//", "\u200b", "ß", "x>y", "a/b", "\ud800", "\n", "'", "{"]


def _random_name(rng: random.Random) -> str:
    if rng.random() < 0.05:
        return "n" * rng.choice([300, 5000, 70000])
    return "".join(rng.choice(_NAME_PIECES) for _ in range(rng.randint(0, 6)))


def _named_for_message(name: str) -> tuple:
    """What a refusal naming this node must show: its text when plain and short."""
    if name and name.isprintable() and len(name) <= 150 and name.isascii():
        return (name,)
    return ("Node",)


def fam_node_name(rng: random.Random, scale: int) -> Case:
    name = _random_name(rng)
    graph_def = _protos().GraphDef()
    try:
        placeholder(graph_def, name)
        data = graph_def.SerializeToString()
    except ValueError:  # protobuf cannot hold it (a lone surrogate): use the bytes
        name = "a" + name.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
        graph_def = _protos().GraphDef()
        placeholder(graph_def, name)
        data = graph_def.SerializeToString()
    accept = tf_accepts_name(name)
    return Case("node_name", f"Placeholder named {name[:40]!r} ({len(name)} chars)",
                "import_bytes", data, "accept" if accept else "refuse",
                names=_named_for_message(name),
                check={"nodes": [name]} if accept else None, budget=8 * len(name))


def _nested_attr_text(levels: int) -> str:
    """A Placeholder whose private attr nests ``levels`` AttrValue->func->attr levels (three
    braces each)."""
    inner = "i: 1"
    for _ in range(levels):
        inner = f'func {{ name: "f" attr {{ key: "k" value {{ {inner} }} }} }}'
    return ('node { name: "p" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } }'
            f' attr {{ key: "_nest" value {{ {inner} }} }} }}')


def fam_pbtxt_depth(rng: random.Random, scale: int) -> Case:
    levels = rng.choice([1, 10, 30, 31, 32, 33, 40, 100, 1000, 5000 * scale])
    braces = 3 + 3 * levels  # node, attr, value, then three per level
    text = _nested_attr_text(levels)
    if rng.random() < 0.3:  # the same nesting spread over lines, '<' '>' for some braces
        text = text.replace("{ ", "<\n").replace(" }", "\n>")
    expect = "accept" if braces <= 90 else "either"
    return Case("pbtxt_depth", f"{braces} braces deep", "import_file", (".pbtxt", text.encode()),
                expect, names=("g.pbtxt",), check={"nodes": ["p"]} if expect == "accept" else None,
                budget=8 * len(text))


def _escaped(data: bytes, rng: random.Random) -> str:
    """``data`` as a text-format string body, escaped the ways writers do."""
    style = rng.choice(["octal", "hex", "mixed"])
    out = []
    for byte in data:
        if style == "mixed" and 32 <= byte < 127 and chr(byte) not in "\"'\\":
            out.append(chr(byte))
        elif style == "hex" or (style == "mixed" and byte % 3 == 0):
            out.append(f"\\x{byte:02x}")
        else:
            out.append(f"\\{byte:03o}")
    return "".join(out)


def fam_pbtxt_bulk(rng: random.Random, scale: int) -> Case:
    import numpy as np

    count = rng.choice([1, 2, 1000, 60_000 * scale])
    values = np.random.default_rng(rng.randrange(2**32)).standard_normal(count).astype("<f4")
    body = _escaped(values.tobytes(), rng)
    space = rng.choice(["", " " * (1 << 16), " " * ((2 << 20) * scale), "\t \r" * 50_000,
                        "\n" * 100_000, " # a comment\n" * 1000])
    text = (f'node {{ name: "c" op: "Const"{space} attr {{ key: "dtype" value {{ type: DT_FLOAT }}'
            f' }} attr {{ key: "value" value {{ tensor {{ dtype: DT_FLOAT tensor_shape {{ '
            f'dim {{ size: {count} }} }} tensor_content: "{body}" }} }} }} }}{space}\n{space}')
    digest = hashlib.sha256(values.tobytes()).hexdigest()
    return Case("pbtxt_bulk", f"{count} floats escaped, {len(space)} whitespace", "import_file",
                (".pbtxt", text.encode()), "accept", names=("g.pbtxt",),
                check={"digest": {"c": digest}}, budget=8 * len(text))


def _expected_values(dtype: str, dims: list[int], values: list, content: bytes | None):
    """The array TF makes of a TensorProto (its rules: extra values ignored, the last one
    repeated, none: zeros; half_val's low 16 bits; tensor_content little-endian)."""
    import ml_dtypes  # noqa: F401 - registers bfloat16
    import numpy as np

    np_dtype = np.dtype(DTYPES[dtype][2])
    count = 1
    for d in dims:
        count *= d
    if content is not None:
        return np.frombuffer(content, np_dtype.newbyteorder("<")).astype(np_dtype).reshape(dims)
    taken = values[:count]
    if DTYPES[dtype][1] == "half_val":
        flat = np.array([v & 0xFFFF for v in taken], np.uint16).view(np_dtype)
    else:
        flat = np.array(taken, np_dtype)
    if len(flat) < count:
        fill = flat[-1] if len(flat) else np.zeros((), np_dtype)
        flat = np.concatenate([flat, np.full(count - len(flat), fill, np_dtype)])
    return flat.reshape(dims)


_DIMS = [0, 1, 2, 3, 5, -1, -2, 2**31, 2**40, 2**62, 2**63 - 1]


def fam_const_values(rng: random.Random, scale: int) -> Case:

    protos = _protos()
    dtype = rng.choice(list(DTYPES) + ["string"])
    rank = rng.choice([0, 1, 1, 2, 2, 3, 65, 100, 254, 255, 300])
    small = rng.random() < 0.6
    dims = [rng.choice([1, 2, 3] if small else _DIMS) for _ in range(rank)]
    unknown_rank = rng.random() < 0.08
    if unknown_rank and rng.random() < 0.5:
        dims = []
    graph_def = protos.GraphDef()
    node = graph_def.node.add()
    node.name, node.op = "c", "Const"
    number = DTYPES[dtype][0] if dtype in DTYPES else UNSUPPORTED[dtype]
    node.attr["dtype"].type = number
    tensor = node.attr["value"].tensor
    tensor.dtype = number
    tensor.tensor_shape.unknown_rank = unknown_rank
    for d in dims:
        tensor.tensor_shape.dim.add().size = d
    elements = 1
    for d in dims:
        elements *= max(d, 0)
    content, values = None, []
    if dtype in DTYPES:
        itemsize = DTYPES[dtype][3]
        if rng.random() < 0.25 and elements <= 4096:
            size = elements * itemsize + rng.choice([0, 0, 0, -1, 1, 4])
            content = bytes(rng.randrange(256) for _ in range(max(size, 0))) or None
            if content is not None:  # (empty tensor_content is no content: proto3 bytes)
                if dtype == "bool":
                    content = bytes(b & 1 for b in content)
                tensor.tensor_content = content
        else:
            n = rng.choice([0, 1, 1, 2, 3, min(elements, 50), min(elements, 50) + 2])
            if DTYPES[dtype][1] == "half_val":
                values = [rng.choice([0, 15360, 48640, 70000, -1, 65535]) for _ in range(n)]
            elif dtype == "bool":
                values = [rng.random() < 0.5 for _ in range(n)]
            elif dtype.startswith("int"):
                values = [rng.randint(-100, 100) for _ in range(n)]
            else:
                values = [rng.uniform(-1e3, 1e3) for _ in range(n)]
            getattr(tensor, DTYPES[dtype][1]).extend(values)
    else:
        tensor.string_val.append(b"x")
    shape_dims = [] if unknown_rank and not dims else dims
    problem = tf_shape_problem(dims, unknown_rank, partial=False)
    label = f"{dtype} Const rank {len(dims)}{' unknown_rank' if unknown_rank else ''} " \
            f"dims {dims[:6]} {len(values)} values{' + content' if content is not None else ''}"
    data = graph_def.SerializeToString()
    if problem or (content is not None and len(content) != elements * DTYPES[dtype][3]):
        return Case("const_values", label, "import_bytes", data, "refuse", names=("c",))
    if dtype not in DTYPES:
        return Case("const_values", label, "import_bytes", data, "accept", names=("c",),
                    limit_ok=True)
    if not numpy_holds(shape_dims, DTYPES[dtype][3]):
        return Case("const_values", label, "import_bytes", data, "accept", names=("c",),
                    limit_ok=True)
    check: dict[str, Any] = {"shape": {"c": shape_dims}}
    if elements <= 1 << 16:
        expected = _expected_values(dtype, shape_dims, values, content)
        check["values"] = {"c": (str(expected.dtype), expected.tobytes(), list(expected.shape))}
    # an import must not expand what the file does not hold: memory follows the file
    return Case("const_values", label, "import_bytes", data, "accept", names=("c",),
                check=check, limit_ok=elements * DTYPES[dtype][3] > 1 << 30,
                budget=64 * len(data) + (elements * 16 if elements <= 1 << 16 else 0))


_LIST_FIELDS = {"s": [b"x"], "f": [1.5], "b": [True], "type": [1], "i": [1]}


def fam_attr_kinds(rng: random.Random, scale: int) -> Case:
    protos = _protos()
    graph_def = protos.GraphDef()
    placeholder(graph_def, shape=[1, 4, 4, 1])
    node = op_node(graph_def, "m", "MaxPool", ["p"], T=1)
    node.attr["strides"].list.i.extend([1, 1, 1, 1])
    node.attr["padding"].s = b"VALID"
    node.attr["ksize"].list.i.extend([1, 2, 2, 1])
    mutation = rng.choice(["extra", "extra", "scalar", "padding_list", "type_list", "none",
                           "entry_field", "entry_field_dup"])
    accept, check = False, None
    attr = "ksize"
    if mutation == "extra":
        extra = rng.choice(["s", "f", "b", "type"])
        getattr(node.attr["ksize"].list, extra).extend(_LIST_FIELDS[extra])
    elif mutation == "scalar":
        node.attr["ksize"].i = 2
    elif mutation == "padding_list":
        attr = "padding"
        node.attr["padding"].list.s.append(b"VALID")
    elif mutation == "type_list":
        attr = "T"
        node.attr["T"].list.type.append(1)
    elif mutation == "none":
        accept, check = True, {"attrs": {("m", "ksize"): [1, 2, 2, 1]}}
    data = graph_def.SerializeToString()
    if mutation.startswith("entry_field"):
        # the 'padding' entry again, with a field 3 its entry message does not declare:
        # TF's parser keeps the entry (ignoring the field); upb sets it aside
        value = protos.message_class("tensorflow.AttrValue")()
        value.s = b"SAME"
        entry = (_field(1, b"padding") + _field(2, value.SerializeToString()) + b"\x18\x07")
        if mutation == "entry_field":
            del node.attr["padding"]
            accept, check = True, {"attrs": {("m", "padding"): "SAME"}}
        node_bytes = node.SerializeToString() + _field(5, entry)
        rest = protos.GraphDef()
        rest.node.extend(graph_def.node[:1])
        data = rest.SerializeToString() + _field(1, node_bytes)
        attr = "padding"
    expect = "accept" if accept else ("either" if mutation == "entry_field_dup" else "refuse")
    return Case("attr_kinds", f"MaxPool attr mutation {mutation}", "import_bytes", data, expect,
                names=("m", attr) if expect == "refuse" else ("m",), check=check)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def fam_shape_attr(rng: random.Random, scale: int) -> Case:
    protos = _protos()
    graph_def = protos.GraphDef()
    node = placeholder(graph_def)
    shape = node.attr["shape"].shape
    shape.SetInParent()
    unknown_rank = rng.random() < 0.2
    rank = rng.choice([0, 0, 1, 2, 4, 64, 65, 254, 255, 400])
    dims = [rng.choice([1, 2, -1, 0, 3, -2, 2**62, 2**63 - 1]) for _ in range(rank)]
    if unknown_rank and rng.random() < 0.5:
        dims = []
    shape.unknown_rank = unknown_rank
    for d in dims:
        shape.dim.add().size = d
    problem = tf_shape_problem(dims, unknown_rank, partial=True)
    expected = None if unknown_rank else [None if d == -1 else d for d in dims]
    return Case("shape_attr", f"Placeholder shape {'?' if unknown_rank else ''}{dims[:6]} "
                f"rank {len(dims)}", "import_bytes", graph_def.SerializeToString(),
                "refuse" if problem else "accept", names=("p", "shape"),
                check=None if problem else {"placeholder_shape": {"p": expected},
                                            "round_trip": True})


def fam_number_attr(rng: random.Random, scale: int) -> Case:
    protos = _protos()
    graph_def = protos.GraphDef()
    placeholder(graph_def)
    op = rng.choice(["AddN", "ShapeN", "Unpack", "Unpack"])
    if op == "Unpack":
        num = rng.choice([0, 1, 3, 1 << 16, (1 << 16) + 1, 2**31 - 1, 2**31, 10**11, 2**62, -1])
        node = op_node(graph_def, "s", "Unpack", ["p"], T=1)
        node.attr["num"].i = num
        node.attr["axis"].i = 0
        if num < 0 or num > 2**31 - 1:
            expect, limit_ok = "refuse", False
        else:
            expect, limit_ok = "accept", num > 1 << 16
        check = {"outputs": {"s": num}} if expect == "accept" and not limit_ok else None
        return Case("number_attr", f"Unpack num={num}", "import_bytes",
                    graph_def.SerializeToString(), expect, names=("s",), check=check,
                    limit_ok=limit_ok)
    given = rng.choice([1, 2, 3])
    n = rng.choice([given, given, -1, 0, 2, 3, 2**31, 2**62, 10**11])
    node = op_node(graph_def, "s", op, ["p"] * given, T=1)
    node.attr["N"].i = n
    if op == "ShapeN":
        node.attr["out_type"].type = 3
    accept = n == given
    return Case("number_attr", f"{op} N={n} with {given} inputs", "import_bytes",
                graph_def.SerializeToString(), "accept" if accept else "refuse", names=("s",),
                check={"nodes": ["s"]} if accept else None)


# (path=None is export_graph_def's "return the message, write no file")
_PATHS = ["dir", "under_file", "file_as_dir", "empty", "nul", "long_component", "long_path",
          "surrogate", "int", "list", "bytes", "nested_new", "plain", "trailing_slash",
          "dot_segments"]


def fam_export_paths(rng: random.Random, scale: int) -> Case:
    spec = {"path": rng.choice(_PATHS), "suffix": rng.choice([".pb", ".pbtxt"]),
            "shape": rng.choice([[], None, [2, -1], [0], [3, 1]]),
            "broadcast": rng.choice([0, 1, 1 << 20])}
    refuse = spec["path"] in ("dir", "under_file", "file_as_dir", "empty", "nul",
                              "long_component", "long_path", "surrogate", "int", "list",
                              "trailing_slash")
    return Case("export_paths", f"export_graph_def to {spec}", "export", spec,
                "refuse" if refuse else "accept",
                names=("export_graph_def",), check={"round_trip": True})


def fam_filewriter(rng: random.Random, scale: int) -> Case:
    kind = rng.choice(["logdir", "scalar", "scalar", "scalar", "flush_failure"])
    if kind == "logdir":
        logdir = rng.choice(["file", "under_file", "none", "empty", "nul", "nested_new",
                             "existing", "long_component", "int"])
        accept = logdir in ("nested_new", "existing")
        return Case("filewriter", f"FileWriter(logdir={logdir})", "filewriter",
                    {"kind": kind, "logdir": logdir}, "accept" if accept else "refuse",
                    names=("FileWriter",), check={"events": 1})
    if kind == "flush_failure":
        count = rng.randint(1, 5)
        return Case("filewriter", f"flush fails with {count} scalars buffered", "filewriter",
                    {"kind": kind, "count": count}, "accept", names=("events.out",),
                    check={"events": 1 + count})
    tag = rng.choice(["loss", "", "a/b", "\ud800", "é", "x" * 10000, 3, None, b"loss"])
    value = rng.choice([1.5, 10**400, -10**400, float("nan"), float("inf"), 1e300, "x", None,
                        2**63, True, "1.5"])
    step = rng.choice([0, 7, -1, 2**63 - 1, 2**63, -2**63, -2**63 - 1, 10**30, 1.5, True,
                       "3", None])
    ok_tag = isinstance(tag, str) and tag != "" and "\ud800" not in tag
    ok_value, number = False, 0.0
    if value is not None and not isinstance(value, str):
        try:
            number, ok_value = float(value), True
        except OverflowError:
            pass
    ok_step = isinstance(step, int) and not isinstance(step, bool) and -2**63 <= step < 2**63
    accept = bool(ok_tag and ok_value and ok_step)
    check = {"events": 2 if accept else 1}
    if accept:
        check["scalar"] = (tag, number, step)
    return Case("filewriter", f"add_scalar({str(tag)[:20]!r}, {str(value)[:20]}, "
                f"{str(step)[:24]})", "filewriter",
                {"kind": kind, "tag": tag, "value": value, "step": step},
                "accept" if accept else "refuse", names=("add_scalar",), check=check)


def fam_read_graph_names(rng: random.Random, scale: int) -> Case:
    name = _random_name(rng)
    if rng.random() < 0.3:
        name = rng.choice(["../../x", "a/../b", "./a", "a/./b", "a//b", "a/", "/a", "..",
                           "x>..", "a/b.c", "a-b/c_d", "...", ".a/b"])
    document = {"format": "minigraph-graph", "version": 1, "ops": [
        {"name": name, "type": "Placeholder", "device": "", "inputs": [], "control_inputs": [],
         "attrs": {"dtype": {"type": "float32"}}}]}
    accept = graph_file_accepts_name(name)
    return Case("read_graph_names", f"graph file op named {name[:40]!r}", "read_graph",
                json.dumps(document).encode("utf-8", "surrogatepass"),
                "accept" if accept else "refuse", names=("g.json",),
                check={"nodes": [name]} if accept else None, budget=8 * len(name))


def fam_op_level(rng: random.Random, scale: int) -> Case:
    kind = rng.choice(["conv_strides", "conv_strides", "zero_stride", "bn_grad",
                       "unpack_wrapper", "pool_window"])
    if kind == "conv_strides":
        stride = rng.choice([1, 2, 5, 2**31 - 1, 2**31, 2**40, 2**62, 2**63 - 1])
        spec = {"kind": kind, "stride": stride, "padding": rng.choice(["SAME", "VALID"]),
                "op": rng.choice(["Conv2D", "DepthwiseConv2dNative"])}
        return Case("op_level", f"{spec['op']} strides {stride} {spec['padding']}", "op", spec,
                    "accept", names=(spec["op"],), check={"native_equals_reference": True})
    if kind == "pool_window":
        size = rng.choice([1, 2, 2**31, 2**40, 2**62])
        spec = {"kind": kind, "size": size, "op": rng.choice(["MaxPool", "AvgPool"]),
                "padding": rng.choice(["SAME", "VALID"])}
        return Case("op_level", f"{spec['op']} window/stride {size}", "op", spec, "either",
                    names=(spec["op"],), check={"native_equals_reference": True})
    if kind == "zero_stride":
        length = rng.choice([1 << 10, 1 << 28, 1 << 40, 1 << 60])  # numpy's most: 2**63 bytes
        spec = {"kind": kind, "length": length, "via": rng.choice(["Const", "Relu"])}
        fits = length * 4 <= _memory_bytes()
        return Case("op_level", f"{spec['via']} of a 0-stride view of {length} floats", "op",
                    spec, "accept" if fits else "refuse", names=(spec["via"],),
                    check={"op_built": True}, limit_ok=True)
    if kind == "bn_grad":
        spec = {"kind": kind, "t_rank": rng.choice([None, 4, 3]),
                "backprop_rank": rng.choice([None, 4, 3, 5])}
        t, b = spec["t_rank"], spec["backprop_rank"]
        refuse = (t is not None and t != 4) or (b is not None and b != 4)
        return Case("op_level", f"BatchNormWithGlobalNormalizationGrad t rank {t} backprop "
                    f"rank {b}", "op", spec, "refuse" if refuse else "accept",
                    names=("BatchNormWithGlobalNormalizationGrad",),
                    check={"op_built": True})
    num = rng.choice([2, 1 << 16, (1 << 16) + 1, 2**31, 10**11])
    return Case("op_level", f"Unpack wrapper num={num}", "op", {"kind": kind, "num": num},
                "accept" if num <= 2**31 - 1 else "refuse", names=("Unpack",),
                check={"op_built": True}, limit_ok=num > 1 << 16)


def _base_graph_def_bytes() -> bytes:
    import numpy as np

    from minigraph.interop import tensors

    protos = _protos()
    graph_def = protos.GraphDef()
    placeholder(graph_def, shape=[2, -1])
    const = graph_def.node.add()
    const.name, const.op = "c", "Const"
    const.attr["dtype"].type = 1
    tensors.array_to_proto(np.arange(6, dtype=np.float32).reshape(2, 3), const.attr["value"].tensor)
    op_node(graph_def, "s", "AddN", ["p", "c"], T=1).attr["N"].i = 2
    op_node(graph_def, "r", "Relu", ["s", "^c"], T=1)
    graph_def.versions.producer = 2474
    return graph_def.SerializeToString()


def _mutate(data: bytes, rng: random.Random, alphabet: bytes) -> bytes:
    data = bytearray(data)
    for _ in range(rng.randint(1, 6)):
        choice = rng.random()
        at = rng.randrange(len(data) + 1)
        if choice < 0.3 and data:
            data[min(at, len(data) - 1)] = rng.choice(alphabet)
        elif choice < 0.5:
            data[at:at] = bytes(rng.choice(alphabet) for _ in range(rng.randint(1, 8)))
        elif choice < 0.7 and data:
            del data[at:at + rng.randint(1, 16)]
        elif choice < 0.85 and data:
            start = rng.randrange(len(data))
            data[at:at] = data[start:start + rng.randint(1, 64)] * rng.randint(1, 200)
        else:
            data = data[:at]
    return bytes(data)


def fam_binary_mutation(rng: random.Random, scale: int) -> Case:
    data = _mutate(_base_graph_def_bytes(), rng, bytes(range(256)))
    return Case("binary_mutation", f"mutated GraphDef of {len(data)} bytes", "import_file",
                (".pb", data), "either", names=("g.pb",), budget=8 * len(data))


def fam_pbtxt_mutation(rng: random.Random, scale: int) -> Case:
    from google.protobuf import text_format

    text = text_format.MessageToString(_protos().GraphDef().FromString(_base_graph_def_bytes()))
    data = _mutate(text.encode(), rng, b'{}<>"\'\\:#\n \t0123456789.-_abcxyzDT_FLOAT\x00\xff')
    return Case("pbtxt_mutation", f"mutated text GraphDef of {len(data)} bytes", "import_file",
                (".pbtxt", data), "either", names=("g.pbtxt",), budget=8 * len(data))


FAMILIES = {name[4:]: fn for name, fn in globals().items() if name.startswith("fam_")}


def _memory_bytes() -> int:
    from minigraph.framework import limits

    return limits.memory_bytes()


def generate(cases_per_family: int, families: list[str] | None = None, seed: int = 0,
             scale: int = 1) -> list[Case]:
    """``cases_per_family`` cases of each family, drawn from ``seed``."""
    cases = []
    for name in families or list(FAMILIES):
        rng = random.Random(f"{seed}:{name}")
        for _ in range(cases_per_family):
            case = FAMILIES[name](rng, scale)
            case.index = len(cases)
            cases.append(case)
    return cases


# ----------------------------------------------------------------------------- running one case


def _import_checks(root, check: dict) -> str | None:
    """What an imported graph gets wrong against ``check`` (None: nothing)."""
    import numpy as np

    import minigraph as mg

    graph = root.graph()
    for name in check.get("nodes", []):
        try:
            graph.get_operation(name)
        except (KeyError, LookupError, ValueError):
            return f"node {name[:60]!r} is missing"
    for name, inputs in check.get("inputs", {}).items():
        got = [t.name for t in graph.get_operation(name).inputs]
        if got != inputs:
            return f"node {name!r} reads {got}, the file says {inputs}"
    for (name, attr), value in check.get("attrs", {}).items():
        got = graph.get_operation(name).attrs[attr]
        if got != value:
            return f"attr {attr!r} of {name!r} is {got!r}, the file says {value!r}"
    for name, dims in check.get("placeholder_shape", {}).items():
        got = graph.get_operation(name).outputs[0].shape.dims
        if (None if got is None else list(got)) != dims:
            return f"{name!r} has shape {got}, the file says {dims}"
    for name, dims in check.get("shape", {}).items():
        got = graph.get_operation(name).outputs[0].shape.dims
        if list(got) != list(dims):
            return f"{name!r} has shape {got}, the file says {dims}"
    for name, count in check.get("outputs", {}).items():
        if len(graph.get_operation(name).outputs) != count:
            return f"{name!r} has {len(graph.get_operation(name).outputs)} outputs, not {count}"
    fetches = list(check.get("values", {})) + list(check.get("digest", {}))
    if fetches:
        results = mg.ClientSession(root).Run([f"{n}:0" for n in fetches])
        for name, got in zip(fetches, results):
            if name in check.get("values", {}):
                dtype, data, dims = check["values"][name]
                if str(got.dtype) != dtype or list(got.shape) != dims or \
                        np.ascontiguousarray(got).tobytes() != data:
                    return f"Const {name!r} holds other values than the file says"
            elif hashlib.sha256(np.ascontiguousarray(got).tobytes()).hexdigest() != \
                    check["digest"][name]:
                return f"Const {name!r} holds other values than the file says"
    if check.get("round_trip"):
        again = mg.import_graph_def(mg.export_graph_def(root).SerializeToString())
        for op in graph.operations():
            other = again.graph().get_operation(op.name)
            if other.outputs and other.outputs[0].shape.dims != op.outputs[0].shape.dims:
                return f"{op.name!r} exports as shape {other.outputs[0].shape}, was " \
                       f"{op.outputs[0].shape}"
    return None


def _resolve_path(kind: str, directory: str, suffix: str) -> Any:
    plain = os.path.join(directory, "g" + suffix)
    a_file = os.path.join(directory, "afile")
    with open(a_file, "w") as file:
        file.write("x")
    return {
        "dir": directory, "under_file": os.path.join(a_file, "g" + suffix),
        "file_as_dir": os.path.join(a_file, "sub", "g" + suffix), "empty": "",
        "nul": plain + "\0x", "long_component": os.path.join(directory, "g" * 300 + suffix),
        "long_path": os.path.join(directory, *(["g" * 200] * 25)) + suffix,
        "surrogate": os.path.join(directory, "g\ud800" + suffix), "int": 3,
        "list": [plain], "bytes": os.fsencode(plain),
        "nested_new": os.path.join(directory, "new", "deeper", "g" + suffix),
        "plain": plain, "trailing_slash": plain + "/",
        "dot_segments": os.path.join(directory, "x", "..", "g" + suffix),
    }[kind]


def _run_export(spec: dict, directory: str) -> str | None:
    import numpy as np

    import minigraph as mg
    from minigraph import ops

    root = mg.Scope.NewRootScope()
    ops.Placeholder(root.WithOpName("p"), mg.float32, shape=spec["shape"])
    if spec["broadcast"]:
        ops.Const(root.WithOpName("c"), np.broadcast_to(np.float32(2.5), (spec["broadcast"],)))
    path = _resolve_path(spec["path"], directory, spec["suffix"])
    mg.export_graph_def(root, path)
    size = os.path.getsize(os.fsdecode(path))
    if size > 4096:
        return f"the file holds {size} bytes for a graph of two nodes (a constant expanded?)"
    again = mg.import_graph_def(os.fsdecode(path))  # (bytes would be a GraphDef's bytes)
    for name in ("p", "c") if spec["broadcast"] else ("p",):
        before = root.graph().get_operation(name).outputs[0]
        after = again.graph().get_operation(name).outputs[0]
        if before.shape.dims != after.shape.dims:
            return f"{name!r} re-imports with shape {after.shape}, was {before.shape}"
    if spec["broadcast"]:
        value = mg.ClientSession(again).Run("c:0")
        if value.shape != (spec["broadcast"],) or not bool((value == 2.5).all()):
            return "the broadcast constant re-imports with other values"
    return None


def _logdir(kind: str, directory: str) -> Any:
    a_file = os.path.join(directory, "afile")
    with open(a_file, "w") as file:
        file.write("x")
    return {"file": a_file, "under_file": os.path.join(a_file, "logs"), "none": None,
            "empty": "", "nul": directory + "\0", "int": 7,
            "nested_new": os.path.join(directory, "a", "b"), "existing": directory,
            "long_component": os.path.join(directory, "l" * 300)}[kind]


def _events(path: str) -> list:
    from minigraph.interop import protos, records

    with open(path, "rb") as file:
        return [protos.Event().FromString(r) for r in records.read_records(file)]


def _run_filewriter(spec: dict, check: dict, directory: str) -> str | None:
    import numpy as np

    import minigraph as mg

    if spec["kind"] == "logdir":
        writer = mg.summary.FileWriter(_logdir(spec["logdir"], directory))
        writer.close()
        return None if len(_events(writer.path)) == check["events"] else "events lost"
    writer = mg.summary.FileWriter(directory)
    if spec["kind"] == "scalar":
        error = None
        try:
            writer.add_scalar(spec["tag"], spec["value"], spec["step"])
        except Exception as exc:  # noqa: BLE001 - raised below, once the file is checked
            error = exc
        writer.close()
        events = _events(writer.path)
        if len(events) != check["events"]:
            return f"{len(events)} events in the file, expected {check['events']}"
        if error is not None:
            raise error
        tag, value, step = check["scalar"]
        got = events[-1]
        stored = got.summary.value[0]
        same = (stored.tag == tag and got.step == step and (
            np.float32(value) == np.float32(stored.simple_value)
            or (np.isnan(value) and np.isnan(stored.simple_value))))
        return None if same else f"the event holds {stored.tag!r} {stored.simple_value} " \
                                 f"{got.step}, not {tag!r} {value} {step}"
    for step in range(spec["count"]):
        writer.add_scalar("loss", float(step), step)
    os.remove(writer.path)
    os.mkdir(writer.path)  # the event file is now a directory: every write fails
    for action in (writer.flush, writer.close):
        try:
            action()
        except mg.errors.FailedPreconditionError:
            pass
        else:
            return f"{action.__name__}() reported success while the file could not be written"
    os.rmdir(writer.path)
    with open(writer.path, "wb"):
        pass
    writer.close()
    events = _events(writer.path)
    steps = [e.step for e in events if e.summary.value]
    if steps != list(range(spec["count"])):
        return f"after the failed flushes the file holds steps {steps}, not " \
               f"{list(range(spec['count']))}"
    return None


def _run_op(spec: dict, check: dict) -> str | None:
    import numpy as np

    import minigraph as mg
    from minigraph import ops

    root = mg.Scope.NewRootScope()
    kind = spec["kind"]
    if kind in ("conv_strides", "pool_window"):
        x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[1, 5, 5, 2])
        if kind == "conv_strides":
            s = spec["stride"]
            if spec["op"] == "Conv2D":
                y = ops.Conv2D(root, x, np.ones((2, 2, 2, 3), np.float32), strides=[1, s, s, 1],
                               padding=spec["padding"])
            else:
                y = ops.DepthwiseConv2dNative(root, x, np.ones((2, 2, 2, 1), np.float32),
                                              strides=[1, s, s, 1], padding=spec["padding"])
        else:
            k = spec["size"]
            y = getattr(ops, spec["op"])(root, x, ksize=[1, min(k, 3), min(k, 3), 1],
                                         strides=[1, k, k, 1], padding=spec["padding"])
        feed = {x: np.arange(50, dtype=np.float32).reshape(1, 5, 5, 2)}
        ref = mg.ClientSession(root, backend="reference").Run(feed, y)
        native = mg.ClientSession(root, backend="native").Run(feed, y)
        if ref.shape != native.shape or not np.allclose(ref, native, rtol=1e-5):
            return f"native {native.shape} differs from reference {ref.shape}"
        return None
    if kind == "zero_stride":
        view = np.broadcast_to(np.float32(1.5), (spec["length"],))
        out = ops.Const(root, view) if spec["via"] == "Const" else ops.Relu(root, view)
        if out.shape.dims != (spec["length"],):
            return f"the op has shape {out.shape}"
        return None
    if kind == "bn_grad":
        def shaped(rank):
            return ops.Placeholder(root, mg.float32, shape=None if rank is None else [2] * rank)
        v = ops.Placeholder(root, mg.float32, shape=[2])
        ops.BatchNormWithGlobalNormalizationGrad(
            root, shaped(spec["t_rank"]), v, v, v, shaped(spec["backprop_rank"]),
            variance_epsilon=0.001, scale_after_normalization=True)
        return None
    value = ops.Placeholder(root, mg.float32)
    result = ops.Unpack(root, value, num=spec["num"])
    return None if len(result.outputs) == spec["num"] else "wrong output count"


def execute(case: Case) -> tuple:
    """Run ``case`` here (in a forked child); returns ``("ok", problem or None)`` or
    ``("error", class name, module, message)``."""
    import warnings

    import minigraph as mg

    directory = tempfile.mkdtemp(prefix="hostile-")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            surface, payload, check = case.surface, case.payload, case.check or {}
            if surface == "import_bytes":
                problem = _import_checks(mg.import_graph_def(payload), check)
            elif surface == "import_file":
                suffix, data = payload
                path = os.path.join(directory, "g" + suffix)
                with open(path, "wb") as file:
                    file.write(data)
                problem = _import_checks(mg.import_graph_def(path), check)
            elif surface == "read_graph":
                path = os.path.join(directory, "g.json")
                with open(path, "wb") as file:
                    file.write(payload)
                graph = mg.io.read_graph(path)
                problem = _import_checks(mg.Scope(graph), check)
            elif surface == "export":
                problem = _run_export(payload, directory)
            elif surface == "filewriter":
                problem = _run_filewriter(payload, check, directory)
            else:
                problem = _run_op(payload, check)
        return ("ok", problem)
    except Exception as exc:  # noqa: BLE001 - classified by the parent
        return ("error", type(exc).__name__, type(exc).__module__, str(exc)[:4000],
                len(str(exc)))
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def classify(case: Case, record: tuple) -> tuple[str, str]:
    """(column, why) for one case's record from :func:`tests.fuzz.forked.run_each`."""
    if record[0] in ("crash", "hang"):
        return record[0], record[1]
    _, result, growth = record
    budget = BASE_BUDGET + case.budget
    if growth > budget:
        return "memory", f"peak memory grew by {growth >> 20} MiB (budget {budget >> 20} MiB)"
    if result[0] == "harness":
        return "raw", f"the harness failed: {result[1]}: {result[2]}"
    if result[0] == "ok":
        problem = result[1]
        if case.expect == "refuse":
            return "wrong", "accepted what TensorFlow refuses"
        if problem:
            return "wrong", problem
        return "ok", ""
    _, name, module, message, length = result
    if name == "MemoryError" or (name == "ResourceExhaustedError" and "MemoryError" in message):
        return "memory", f"{name}: {message[:300]}"
    if not module.startswith("minigraph"):
        return "raw", f"{module}.{name}: {message[:300]}"
    if length > MESSAGE_LIMIT:
        return "unclear", f"a message of {length} characters"
    missing = [n for n in case.names if n not in message]
    if missing:
        return "unclear", f"the message does not name {missing}: {message[:300]}"
    if case.expect == "accept" and not case.limit_ok and name not in LIMIT_CLASSES:
        return "unclear", f"refuses what TensorFlow accepts: {name}: {message[:300]}"
    return "clean", ""


def campaign(cases_per_family: int, families: list[str] | None = None, seed: int = 0,
             scale: int = 1, workers: int = 2, timeout: float = 30.0) -> dict:
    import minigraph  # noqa: F401 - imported once, before the children fork
    from minigraph.backends import native  # noqa: F401
    from tests.fuzz import forked

    start = time.perf_counter()
    cases = generate(cases_per_family, families, seed, scale)
    records = forked.run_each(cases, execute, workers=workers, timeout=timeout)
    table: dict[str, Counter] = {}
    findings = []
    for case, record in zip(cases, records):
        column, why = classify(case, record)
        for row in (case.family, "total"):
            table.setdefault(row, Counter())["cases"] += 1
            table[row][column] += 1
        if column in FAILING:
            findings.append({"family": case.family, "column": column, "why": why,
                             "case": case.describe()})
    table["total"] = table.pop("total", Counter())
    return {"table": table, "findings": findings, "seconds": time.perf_counter() - start}


def format_table(table: dict[str, Counter]) -> str:
    lines = [f"{'family':<18}" + "".join(f"{c:>8}" for c in COLUMNS)]
    for row, counts in table.items():
        lines.append(f"{row:<18}" + "".join(f"{counts.get(c, 0):>8}" for c in COLUMNS))
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=20, help="cases per family")
    parser.add_argument("--families", default="", help="comma-separated (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scale", type=int, default=1,
                        help="input sizes (1: CI; 4: a campaign's megabytes)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=30.0, help="per case: a hang")
    parser.add_argument("--json", help="write the table and findings to this file")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every finding")
    args = parser.parse_args(argv)
    families = [f for f in args.families.split(",") if f] or None
    result = campaign(args.cases, families, args.seed, args.scale, args.workers, args.timeout)
    print(f"minigraph hostile-file campaign: {result['seconds']:.1f} s")
    print(format_table(result["table"]))
    for finding in result["findings"][:None if args.verbose else 20]:
        print(f"  {finding['column']}: {finding['case']}\n      {finding['why'][:400]}")
    if args.json:
        with open(args.json, "w") as file:
            json.dump({"table": {k: dict(v) for k, v in result["table"].items()},
                       "findings": result["findings"], "seconds": result["seconds"]}, file,
                      indent=1)
    return 1 if result["findings"] else 0


if __name__ == "__main__":
    sys.exit(main())
