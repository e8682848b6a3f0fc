"""Hostile-file cases: one generator per family, each drawing inputs and saying what
TensorFlow 2.21 does with them (tests/fuzz/hostile.py runs them).

TF's rules are written out here by hand, not imported from minigraph, since they are what
the cases test minigraph against: node names (``IsValidNodeName``), input indices
(``ParseTensorName``), device specs (``DeviceSpec.from_string``), shapes
(``TensorShape::IsValid``), Const values (``Tensor::FromProto``: extra values ignored, the
last repeated, half_val's low 16 bits), attr kinds (``AttrValueHasType``), list lengths.
Each was checked against TF 2.21 itself. ``generate(n, families, seed, scale)`` draws ``n``
cases per family; ``scale`` grows the inputs (1 in CI, 4 for a campaign's megabytes).
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from typing import Any


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


def tf_accepts_device(spec: str) -> bool:
    """TF 2.21's DeviceSpec.from_string, by hand: each '/' piece is empty, job:X,
    replica:INT, task:INT, TYPE[:INT|*] for a known TYPE, or device:TYPE:INT|*; at most one
    device type; INT as Python's int() reads it."""
    def integer(text: str) -> bool:
        try:
            int(text)
        except ValueError:
            return False
        return True

    types = 0
    for piece in spec.split("/"):
        parts = piece.split(":")
        head, n = parts[0], len(parts)
        if n == 2 and head == "job":
            continue
        if n == 2 and head in ("replica", "task"):
            if not integer(parts[1]):
                return False
            continue
        if (n in (1, 2) and head.upper() in ("CPU", "GPU", "TPU", "CUSTOM", "EPU")) or (
                n == 3 and head == "device"):
            types += 1
            if types > 1 or (n > 1 and parts[-1] != "*" and not integer(parts[-1])):
                return False
            continue
        if head:
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


_DEVICE_PIECES = ["/device:CPU:0", "/cpu:0", "CPU:0", "/gpu", "/device:GPU:*", "/job:w",
                  "/replica:1", "/task:x", "/task:٣", "/bogus:x", "//", "/device:GPU",
                  "/device:OPENCL:0", "/cpu:1:2", "a b", "/tpu:0", "/job:a:b", ":", "/cpu:-1",
                  "/device:x:y:z", "\x00", "/" + "j" * 5000]


def fam_device(rng: random.Random, scale: int) -> Case:
    spec = "".join(rng.choice(_DEVICE_PIECES) for _ in range(rng.randint(1, 3)))
    graph_def = _protos().GraphDef()
    placeholder(graph_def).device = spec
    accept = tf_accepts_device(spec)
    return Case("device", f"Placeholder on device {spec[:50]!r}", "import_bytes",
                graph_def.SerializeToString(), "accept" if accept else "refuse",
                names=("'p'",), check={"devices": {"p": spec}} if accept else None)


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


def _control_flow_graph_def():
    """A lowered while loop (``i, a = 0, p; while i < n: i, a = i + 1, a * 0.5``, writing
    ``a`` to a reserved TensorList stacked after the loop) and a lowered tf.cond on ``q``
    reading the loop's result, as TF writes them (``interop/loops.py``,
    ``interop/conds.py``)."""
    import numpy as np

    import minigraph as mg
    from minigraph.interop import tensors

    graph_def = _protos().GraphDef()

    def const(name: str, value, inputs=()):
        value = np.asarray(value)
        node = op_node(graph_def, name, "Const", inputs,
                       dtype=tensors.dtype_to_enum(mg.as_dtype(value.dtype)))
        tensors.array_to_proto(value, node.attr["value"].tensor)

    def frame_node(name: str, op: str, inputs, dtype: int, **extra):
        node = op_node(graph_def, name, op, inputs, T=dtype)
        for key, value in extra.items():
            if isinstance(value, bool):
                node.attr[key].b = value
            elif isinstance(value, int):
                node.attr[key].i = value
            else:
                node.attr[key].s = value.encode()
        return node

    placeholder(graph_def, "p")
    placeholder(graph_def, "n", dtype=3)
    placeholder(graph_def, "q", dtype=10)
    const("zero", np.int32(0))
    const("half", np.float32(0.5))
    const("shape", np.int32(-1))
    op_node(graph_def, "reserve", "TensorListReserve", ["shape", "n"], element_dtype=1,
            shape_type=3)
    for name, source, dtype in (("i", "zero", 3), ("a", "p", 1), ("l", "reserve", 21)):
        frame_node(f"w/{name}/enter", "Enter", [source], dtype, frame_name="w",
                   is_constant=False, parallel_iterations=10)
        frame_node(f"w/{name}/merge", "Merge", [f"w/{name}/enter", f"w/{name}/next"], dtype,
                   N=2)
        frame_node(f"w/{name}/switch", "Switch", [f"w/{name}/merge", "w/cond"], dtype)
        frame_node(f"w/{name}/exit", "Exit", [f"w/{name}/switch"], dtype)
        frame_node(f"w/{name}/body", "Identity", [f"w/{name}/switch:1"], dtype)
    for name, source, dtype in (("n", "n", 3), ("half", "half", 1)):
        frame_node(f"w/{name}", "Enter", [source], dtype, frame_name="w", is_constant=True)
    op_node(graph_def, "w/less", "Less", ["w/i/merge", "w/n"], T=3)
    op_node(graph_def, "w/cond", "LoopCond", ["w/less"])
    const("w/one", np.int32(1), ["^w/i/body"])
    op_node(graph_def, "w/add", "AddV2", ["w/i/body", "w/one"], T=3)
    op_node(graph_def, "w/mul", "Mul", ["w/a/body", "w/half"], T=1)
    op_node(graph_def, "w/set", "TensorListSetItem", ["w/l/body", "w/i/body", "w/a/body"],
            element_dtype=1)
    for name, source, dtype in (("i", "w/add", 3), ("a", "w/mul", 1), ("l", "w/set", 21)):
        frame_node(f"w/{name}/next", "NextIteration", [source], dtype)
    op_node(graph_def, "stacked", "TensorListStack", ["w/l/exit", "shape"], element_dtype=1)
    frame_node("c/switch", "Switch", ["w/a/exit", "q"], 1)
    op_node(graph_def, "c/then", "Relu", ["c/switch:1"], T=1)
    op_node(graph_def, "c/else", "Neg", ["c/switch"], T=1)
    frame_node("c/merge", "Merge", ["c/then", "c/else"], 1, N=2)
    op_node(graph_def, "y", "Identity", ["c/merge"], T=1)
    return graph_def


def rewire(graph_def, rng: random.Random, count: int) -> list[str]:
    """``count`` random edits of ``graph_def`` (in place): an input pointed at another
    node's output 0-2, an input dropped, a node's op swapped for a control-flow op, or a
    node removed; what each did, for the case's label."""
    edits = []
    for _ in range(count):
        nodes = list(graph_def.node)
        target = rng.choice(nodes)
        roll = rng.random()
        if roll < 0.5 and target.input:
            i = rng.randrange(len(target.input))
            marker = "^" if target.input[i].startswith("^") else ""
            target.input[i] = marker + rng.choice(nodes).name + rng.choice(["", ":1", ":2"])
            edits.append(f"{target.name} input {i}")
        elif roll < 0.65 and target.input:
            del target.input[rng.randrange(len(target.input))]
            edits.append(f"{target.name} lost an input")
        elif roll < 0.85:
            target.op = rng.choice(["Enter", "Exit", "Merge", "Switch", "_SwitchN",
                                    "NextIteration", "LoopCond", "Identity",
                                    "TensorListSetItem", "TensorListGetItem",
                                    "TensorArrayV3", "TensorArrayWriteV3"])
            edits.append(f"{target.name} as {target.op}")
        else:
            graph_def.node.remove(target)
            edits.append(f"{target.name} removed")
    return edits


def fam_control_flow(rng: random.Random, scale: int) -> Case:
    """A lowered loop and conditional, edited (inputs rewired or dropped, op types swapped
    among the control-flow ops, nodes removed) or byte-mutated: each imports or is refused
    naming the file, never a crash or a hang."""
    graph_def = _control_flow_graph_def()
    if rng.random() < 0.3:
        data = _mutate(graph_def.SerializeToString(), rng, bytes(range(256)))
        return Case("control_flow", f"mutated lowered loop of {len(data)} bytes",
                    "import_file", (".pb", data), "either", names=("g.pb",),
                    budget=8 * len(data))
    edits = rewire(graph_def, rng, rng.randint(1, 3 * scale))
    data = graph_def.SerializeToString()
    return Case("control_flow", "lowered loop: " + ", ".join(edits)[:120], "import_file",
                (".pb", data), "either", names=("g.pb",), budget=8 * len(data))


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


