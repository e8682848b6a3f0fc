"""Graph files: a documented, versioned JSON format that round-trips exactly.

``write_graph(graph, "model.json")`` writes::

    {"format": "minigraph-graph", "version": 1,
     "ops": [{"name": "bn", "type": "FusedBatchNormV3", "device": "",
              "inputs": ["x:0", "scale:0", ...], "control_inputs": ["init"],
              "attrs": {"epsilon": {"float": 0.001}, "T": {"type": "float32"},
                        "shape": {"shape": [null, 8]}, "value": {"tensor": "Const"}}}]}

in creation (topological) order, and the values of tensor attrs (Const values) in the
*constants file* ``model.json.npz`` beside it (bfloat16 as uint16 bits); see
:func:`constants_path`. The constants file has its own name so that writing ``model.json``
never touches ``model.npz`` (a checkpoint, say), and :func:`write_graph` refuses to replace
a file of that name that is not a constants file. Files written by minigraph before it used
this name (constants in ``model.npz``) still read.

``read_graph`` checks the whole document against the format before building anything: the
type of every field, known op types, inputs that name an output of an op defined earlier in
the file (so no dangling reference and no cycle), attr encodings that fit each attr's kind,
constants whose stored dtype is the Const's ``dtype`` attr, and sizes (file, op count, rank,
list lengths, constant bytes) within the limits below. It then rebuilds the graph through
the normal op constructors, so every shape function and check runs again, and gives the same
names, attrs, edges and devices. Anything wrong is one :class:`InvalidArgumentError` that
names the file, the op and the problem.

Both files are written atomically (:func:`atomic_write`): a temporary file in the same
directory, renamed over the target, so a crash leaves the previous file or the new one.
Both are created with mode ``0o666 & ~umask``, like any file a program writes.

The ``.npz`` reader (:class:`NpzReader`, shared with checkpoints) opens one member at a time
and checks its ``.npy`` header (dtype, shape, and that the byte count agrees with the zip
directory) before reading its data, so a member claiming terabytes is refused, not allocated.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import re
import secrets
import socket
import zipfile
import zlib
from collections.abc import Callable
from typing import IO, Any

import numpy as np

from minigraph.framework import dtypes, files
from minigraph.framework.errors import InvalidArgumentError, NotFoundError
from minigraph.framework.graph import Graph
from minigraph.framework.names import path_problem, shown
from minigraph.framework.op_def import build_operation, get_op_def
from minigraph.framework.scope import Scope
from minigraph.framework.tensor_shape import TensorShape

FORMAT = "minigraph-graph"
VERSION = 1
BFLOAT16_SUFFIX = "::bfloat16"
CONSTANTS_SUFFIX = ".npz"
# A member every constants file holds, so write_graph can tell its own file from any other
# .npz; its name has no "/", unlike every constant's ("<op>/<attr>").
CONSTANTS_MARKER = "__minigraph_graph_constants__"

# Limits: a graph file is data from anywhere, and none of these is near a real graph's size.
MAX_GRAPH_FILE_BYTES = 1 << 30   # the JSON document
MAX_OPS = 1 << 20
MAX_STRING_CHARS = 1 << 16       # an op name, device, input name or string attr
MAX_RANK = 64                    # numpy's own limit on dimensions
MAX_DIM = 1 << 62                # one dimension of a shape attr (no overflow in products)
MAX_LIST_ITEMS = 1 << 16         # a list(int) attr
MAX_INFLATED_BYTES = 1 << 31     # a compressed .npz member, once decompressed

# The JSON encoding keys each attr kind accepts ("float" attrs also take a JSON integer).
_ENCODINGS = {"float": ("float", "int"), "int": ("int",), "bool": ("bool",),
              "string": ("string",), "type": ("type",), "shape": ("shape",),
              "tensor": ("tensor",), "list(int)": ("list",),
              "list(type)": ("types",)}
_OP_FIELDS = {"name": str, "type": str, "device": str, "inputs": list,
              "control_inputs": list, "attrs": dict}
_JSON_TYPE_NAMES = {str: "a string", list: "a list", dict: "an object", int: "an integer"}


def constants_path(path: str | os.PathLike) -> str:
    """The constants file of graph file ``path``: ``path`` + ``.npz`` (``model.json.npz``)."""
    return os.fspath(path) + CONSTANTS_SUFFIX


def _legacy_constants_path(path: str) -> str:
    """Where minigraph wrote the constants before :func:`constants_path` (``model.npz``)."""
    return os.path.splitext(path)[0] + ".npz"


# ----------------------------------------------------------------------------- atomic writes


def _host_tag() -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname())[:64] or "host"


_TEMPORARY = re.compile(r"\.(?P<host>[A-Za-z0-9_-]+)\.(?P<pid>\d+)\.[0-9a-f]{16}\.tmp")


def _remove_stale_temporaries(directory: str, base: str) -> None:
    """Delete temporaries of ``base`` left by a writer on this host that was killed mid-write
    (its process is gone): a SIGKILL skips every ``finally``, so the next write cleans up."""
    host = _host_tag()
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        if not name.startswith(base):
            continue
        match = _TEMPORARY.fullmatch(name[len(base):])
        if match is None or match["host"] != host or int(match["pid"]) == os.getpid():
            continue
        try:
            os.kill(int(match["pid"]), 0)
        except ProcessLookupError:  # the writer is dead: its temporary can never be finished
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(directory, name))
        except (OSError, OverflowError):  # alive (another user's) or not a pid: leave it
            pass


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], None],
                 what: str = "write") -> str:
    """Write ``path`` atomically: ``write(file)`` fills a new temporary file in the same
    directory, which is flushed to disk and renamed over ``path`` (``os.replace``).

    The temporary is ``<name>.<host>.<pid>.<random>.tmp``, created exclusively with mode
    ``0o666`` less the umask (like ``open(path, "w")``); it is removed if anything fails, and
    one left by a killed writer (a process of this host that no longer exists) is removed by
    the next write of the same file. Returns ``path``. A path no file can have and every
    OS error are ``mg.errors`` exceptions naming the file (:mod:`minigraph.framework.files`).
    """
    path = files.check_path(path, what)
    with files.os_errors(f"{what}: cannot write '{shown(path)}'"):
        return _atomic_write(path, write)


def _atomic_write(path: str, write: Callable[[IO[bytes]], None]) -> str:
    # the path as given, not normalized: "d/x/../f" resolves through x as open() would,
    # and "f/" names a directory, never the file "f"
    directory, base = os.path.split(path)
    if not base or os.path.isdir(path):  # os.replace would only say so about the rename
        raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
    directory = directory or os.curdir
    os.makedirs(directory, exist_ok=True)
    _remove_stale_temporaries(directory, base)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(
        os, "O_BINARY", 0)
    while True:
        temporary: str | None = os.path.join(
            directory, f"{base}.{_host_tag()}.{os.getpid()}.{secrets.token_hex(8)}.tmp")
        try:
            handle = os.open(temporary, flags, 0o666)  # the umask applies, as for open()
            break
        except FileExistsError:  # pragma: no cover - 64 random bits collided
            continue
    try:
        with os.fdopen(handle, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
        temporary = None
        with contextlib.suppress(OSError, AttributeError):  # make the rename durable (POSIX)
            directory_handle = os.open(directory, os.O_RDONLY)
            try:
                os.fsync(directory_handle)
            finally:
                os.close(directory_handle)
    finally:
        if temporary is not None:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
    return path


def write_npz(file: IO[bytes], arrays: dict[str, np.ndarray]) -> None:
    """What ``np.savez(file, **arrays)`` writes (stored ``<key>.npy`` members), for any key
    (``np.savez`` cannot take a key named ``file``)."""
    with zipfile.ZipFile(file, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        for key, value in arrays.items():
            with archive.open(key + ".npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(value), allow_pickle=False)


# ----------------------------------------------------------------------------- reading .npz


class NpzReader:
    """One ``.npz`` archive, read a member at a time, each only after its header checks out.

    ``what`` names the file in messages ("checkpoint", "graph constants file"). Every problem
    (not a zip, a ``.npy`` instead of a ``.npz``, an unknown compression, a bad header, a byte
    count that disagrees with the zip directory, a truncated or corrupt member) is an
    :class:`InvalidArgumentError` naming the file and the member.
    """

    def __init__(self, path: str | os.PathLike, what: str) -> None:
        self.path = files.check_path(path, what)
        self.what = what
        files.require_regular_file(self.path, f"{what} '{shown(self.path)}'")
        try:
            with open(self.path, "rb") as file:
                magic = file.read(6)
                file.seek(0, os.SEEK_END)
                self.file_bytes = file.tell()
            if magic == b"\x93NUMPY":
                raise InvalidArgumentError(
                    f"cannot read {what} '{self.path}': it is a single .npy array, not a .npz "
                    "archive of named arrays")
            self._zip = zipfile.ZipFile(self.path)
        except InvalidArgumentError:
            raise
        except FileNotFoundError:
            raise NotFoundError(f"{what} '{self.path}' does not exist") from None
        except (OSError, ValueError, EOFError, zipfile.BadZipFile, zipfile.LargeZipFile,
                NotImplementedError, RuntimeError) as exc:
            raise InvalidArgumentError(f"cannot read {what} '{self.path}': {exc}") from None
        self._members = {info.filename[:-4]: info for info in self._zip.infolist()
                         if info.filename.endswith(".npy")}

    def __enter__(self) -> NpzReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._zip.close()

    def names(self) -> list[str]:
        """The member names (without ``.npy``)."""
        return list(self._members)

    def __contains__(self, name: str) -> bool:
        return name in self._members

    def _error(self, name: str, problem: str) -> InvalidArgumentError:
        return InvalidArgumentError(f"{self.what} '{self.path}': member '{name}' {problem}")

    def read(self, name: str, check: Callable[[np.dtype, tuple[int, ...]], str | None] | None
             = None, max_bytes: int | None = None) -> np.ndarray:
        """Member ``name`` as a C-contiguous native-byte-order array.

        ``check(dtype, shape)`` sees the header first and returns a problem text (raised) or
        None. The data is read only once the header agrees with the zip directory's size
        for the member and the data fits ``max_bytes`` (for a compressed member, also
        :data:`MAX_INFLATED_BYTES`); a stored member must lie within the file.
        """
        info = self._members[name]
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise self._error(name, f"uses zip compression method {info.compress_type}; only "
                              "stored or deflated members (np.savez, np.savez_compressed) "
                              "can be read")
        if info.flag_bits & 0x1:
            raise self._error(name, "is encrypted")
        if info.compress_type == zipfile.ZIP_STORED and (
                info.file_size != info.compress_size or info.compress_size > self.file_bytes):
            raise self._error(name, f"claims {info.file_size} bytes ({info.compress_size} "
                              f"stored) in a file of {self.file_bytes} bytes: the zip "
                              "directory is corrupt or the file truncated")
        try:
            with self._zip.open(info) as member:
                dtype, shape, fortran = self._header(name, member)
                header_bytes = member.tell()
                problem = check(dtype, shape) if check is not None else None
                if problem:
                    raise self._error(name, problem)
                count = math.prod(shape)
                data_bytes = count * dtype.itemsize
                if header_bytes + data_bytes != info.file_size:
                    raise self._error(
                        name, f"has a header claiming shape {list(shape)} of {dtype} "
                        f"({data_bytes} bytes) but holds {info.file_size - header_bytes} bytes "
                        "of data")
                limit = max_bytes if max_bytes is not None else math.inf
                if info.compress_type != zipfile.ZIP_STORED:
                    limit = min(limit, MAX_INFLATED_BYTES)
                if data_bytes > limit:
                    raise self._error(name, f"holds {data_bytes} bytes, more than the "
                                      f"{limit} bytes allowed for it")
                array = np.empty(count, dtype)
                self._read_into(name, member, array.view(np.uint8))
                if member.read(1):  # also makes zipfile check the CRC at the member's end
                    raise self._error(name, "has data past its declared size")
        except InvalidArgumentError:
            raise
        except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error,
                NotImplementedError, RuntimeError) as exc:
            raise self._error(name, f"cannot be read: {exc}") from None
        if dtype.kind == "b" and bool((array.view(np.uint8) > 1).any()):
            raise self._error(name, "is a bool array holding bytes other than 0 and 1")
        array = array.reshape(shape, order="F" if fortran else "C")
        if not dtype.isnative:
            array = array.astype(dtype.newbyteorder("="))
        return np.require(array, requirements="C")  # (ascontiguousarray makes 0-d 1-d)

    def _header(self, name: str, member: IO[bytes]) -> tuple[np.dtype, tuple[int, ...], bool]:
        version = np.lib.format.read_magic(member)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(member)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(member)
        else:
            raise self._error(name, f"has .npy format version {version}; minigraph reads "
                              "1.0 and 2.0")
        if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None or (
                dtype.itemsize == 0) or dtype.kind not in "biufc":
            raise self._error(name, f"has dtype {dtype}, not a plain numeric dtype")
        if len(shape) > MAX_RANK:
            raise self._error(name, f"has rank {len(shape)} (at most {MAX_RANK})")
        return dtype, tuple(shape), bool(fortran)

    @staticmethod
    def _read_into(name: str, member: IO[bytes], buffer: np.ndarray) -> None:
        view, done, chunk = memoryview(buffer), 0, 1 << 24
        while done < len(view):
            got = member.readinto(view[done:done + chunk])
            if not got:
                raise EOFError(f"the data ends after {done} of {len(view)} bytes")
            done += got


# ----------------------------------------------------------------------------- writing graphs


def _encode(name: str, value: Any, arrays: dict[str, np.ndarray], op_name: str) -> dict:
    if isinstance(value, dtypes.DType):
        return {"type": value.name}
    if isinstance(value, TensorShape):
        return {"shape": None if value.rank is None else list(value.dims)}
    if isinstance(value, np.ndarray):
        key = f"{op_name}/{name}"
        if value.dtype == dtypes.bfloat16.np_dtype:
            arrays[key + BFLOAT16_SUFFIX] = value.view(np.uint16)
        else:
            arrays[key] = value
        return {"tensor": key}
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, float):
        return {"float": value}
    if isinstance(value, str):
        return {"string": value}
    if isinstance(value, list) and value and all(isinstance(v, dtypes.DType) for v in value):
        return {"types": [v.name for v in value]}
    if isinstance(value, list):
        return {"list": value}
    raise InvalidArgumentError(f"write_graph: op '{op_name}' attr '{name}' has a value of "
                               f"type {type(value).__name__} that the format cannot store")


def _is_constants_file(path: str) -> bool:
    try:
        with zipfile.ZipFile(path) as archive:
            return CONSTANTS_MARKER + ".npy" in archive.namelist()
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, NotImplementedError,
            RuntimeError):
        return False


def write_graph(graph: Graph | Scope, path: str | os.PathLike) -> str:
    """Write ``graph`` to ``path`` (JSON) and its constants to :func:`constants_path` (``path``
    + ``.npz``), each atomically; return ``path``.

    Refuses (:class:`InvalidArgumentError`, before writing anything) when the constants file
    already exists and is not a minigraph constants file: it is someone else's.
    """
    graph = graph.graph() if isinstance(graph, Scope) else graph
    path = files.check_path(path, "write_graph")
    for op in graph.operations():
        problem = path_problem(op.name)
        if problem:
            raise InvalidArgumentError(f"write_graph: op '{shown(op.name)}' cannot be written: "
                                       f"{problem}, so read_graph would refuse it")
    sidecar = constants_path(path)
    if os.path.lexists(sidecar) and not _is_constants_file(sidecar):
        raise InvalidArgumentError(
            f"write_graph: '{sidecar}' (where the constants of '{path}' go) exists and is not "
            "a minigraph graph constants file; refusing to overwrite it: move it or write the "
            "graph under another name")
    arrays: dict[str, np.ndarray] = {CONSTANTS_MARKER: np.array(VERSION, np.int32)}
    ops = [{
        "name": op.name, "type": op.type, "device": op.device,
        "inputs": [i.name for i in op.inputs],
        "control_inputs": [c.name for c in op.control_inputs],
        "attrs": {k: _encode(k, v, arrays, op.name) for k, v in sorted(op.attrs.items())},
    } for op in graph.operations()]
    text = json.dumps({"format": FORMAT, "version": VERSION, "ops": ops}, indent=1)
    atomic_write(sidecar, lambda file: write_npz(file, arrays), "write_graph")
    atomic_write(path, lambda file: file.write(text.encode("utf-8")), "write_graph")
    return path


# ----------------------------------------------------------------------------- reading graphs


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict:
    result = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"the key {key!r} appears twice in one object")
        result[key] = value
    return result


def _load_document(path: str) -> Any:
    what = f"read_graph: graph file '{shown(path)}'"
    files.require_regular_file(path, what)
    with files.os_errors(what), open(path, "rb") as file:
        chunks, size = [], 0  # in chunks: read(n) would allocate n bytes first
        while size <= MAX_GRAPH_FILE_BYTES and (chunk := file.read(1 << 20)):
            chunks.append(chunk)
            size += len(chunk)
    data = b"".join(chunks)
    if len(data) > MAX_GRAPH_FILE_BYTES:
        raise InvalidArgumentError(f"'{path}' is larger than {MAX_GRAPH_FILE_BYTES} bytes, the "
                                   "most a graph file may have")
    try:
        return json.loads(data.decode("utf-8"), object_pairs_hook=_no_duplicate_keys)
    except RecursionError:
        raise InvalidArgumentError(f"'{path}' is not a minigraph graph file: its JSON is nested "
                                   "too deeply") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an int of 5000 digits...
        raise InvalidArgumentError(f"'{path}' is not a minigraph graph file: invalid JSON "
                                   f"({exc})") from None


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    return {str: "a string", list: "a list", dict: "an object", int: "an integer",
            float: "a number"}.get(type(value), type(value).__name__)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class _Checker:
    """The schema walk of :func:`read_graph`: every problem is one InvalidArgumentError."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.where = f"'{path}'"

    def fail(self, problem: str) -> InvalidArgumentError:
        return InvalidArgumentError(f"{self.where}: {problem}")

    def string(self, value: Any, what: str, allow_empty: bool = True) -> str:
        if not isinstance(value, str):
            raise self.fail(f"{what} must be a string, got {_json_type(value)}")
        if len(value) > MAX_STRING_CHARS:
            raise self.fail(f"{what} has {len(value)} characters (at most {MAX_STRING_CHARS})")
        if not allow_empty and not value:
            raise self.fail(f"{what} is empty")
        return value

    def document(self, document: Any) -> list[dict]:
        if not isinstance(document, dict) or document.get("format") != FORMAT:
            raise InvalidArgumentError(f"'{self.path}' is not a minigraph graph file (no "
                                       f"\"format\": \"{FORMAT}\")")
        version = document.get("version")
        if not _is_int(version) or version < 1:
            raise self.fail(f"\"version\" must be a positive integer, got {version!r:.40}")
        if version > VERSION:
            raise InvalidArgumentError(
                f"'{self.path}' has graph format version {version}; this minigraph reads "
                f"versions up to {VERSION}: upgrade minigraph")
        unknown = sorted(set(document) - {"format", "version", "ops"})
        if unknown:
            raise self.fail(f"unknown top-level field(s) {unknown}")
        ops = document.get("ops")
        if not isinstance(ops, list):
            raise self.fail(f"\"ops\" must be a list, got {_json_type(ops)}")
        if len(ops) > MAX_OPS:
            raise self.fail(f"{len(ops)} ops (at most {MAX_OPS})")
        return ops

    def op(self, index: int, entry: Any, outputs_of: dict[str, int]) -> tuple[Any, list]:
        """Check one op entry against the format and the ops before it; return its OpDef and
        its inputs as (op name, output index) pairs. ``outputs_of``: name -> output count of
        the ops defined so far."""
        self.where = f"'{self.path}': op #{index}"
        if not isinstance(entry, dict):
            raise self.fail(f"must be an object, got {_json_type(entry)}")
        name = entry.get("name")
        name = self.string(name, "\"name\"", allow_empty=False)
        self.where = f"'{self.path}': op '{shown(name)}'"
        problem = path_problem(name)
        if problem:
            raise self.fail(f"has a name minigraph refuses: {problem}")
        missing = [k for k in _OP_FIELDS if k not in entry]
        if missing:
            raise self.fail(f"is missing field(s) {missing}")
        unknown = sorted(set(entry) - set(_OP_FIELDS))
        if unknown:
            raise self.fail(f"has unknown field(s) {unknown}")
        for key, kind in _OP_FIELDS.items():
            if not isinstance(entry[key], kind):
                raise self.fail(f"field \"{key}\" must be {_JSON_TYPE_NAMES[kind]}, got "
                                f"{_json_type(entry[key])}")
        if name in outputs_of:
            raise self.fail("is defined twice (op names must be unique)")
        op_type = self.string(entry["type"], "\"type\"", allow_empty=False)
        self.string(entry["device"], "\"device\"")
        try:
            op_def = get_op_def(op_type)
        except LookupError:
            raise self.fail(f"has type '{op_type:.200}', which this minigraph does not know "
                            "(an op of a module that was not imported?)") from None
        inputs = [self.reference(value, f"input {i}", outputs_of)
                  for i, value in enumerate(entry["inputs"])]
        fixed = sum(not arg.is_list for arg in op_def.inputs)
        if fixed < len(op_def.inputs):  # a list argument takes the inputs the others leave
            if len(inputs) <= fixed:
                raise self.fail(f"{op_type} needs at least "
                                f"{'one input' if not fixed else f'{fixed + 1} inputs'}")
        elif len(inputs) != len(op_def.inputs):
            raise self.fail(f"{op_type} takes {len(op_def.inputs)} input(s) "
                            f"({', '.join(a.name for a in op_def.inputs) or 'none'}), the file "
                            f"gives {len(inputs)}")
        for i, value in enumerate(entry["control_inputs"]):
            value = self.string(value, f"control input {i}", allow_empty=False)
            if value not in outputs_of:
                raise self.fail(f"control input '{value:.200}' names no op defined before it "
                                "(ops must come in topological order: a missing op or a "
                                "cycle)")
        kinds = {a.name: a.kind for a in op_def.attrs}
        for attr, encoded in entry["attrs"].items():
            self.attr(attr, encoded, kinds)
        outputs_of[name] = _output_count(op_def, entry["attrs"])
        return op_def, inputs

    def reference(self, value: Any, what: str, outputs_of: dict[str, int]) -> tuple[str, int]:
        value = self.string(value, what)
        op_name, colon, index = value.rpartition(":")
        if not colon or not index.isdecimal() or not index.isascii() or len(index) > 9:
            raise self.fail(f"{what} '{value:.200}' is not '<op name>:<output index>'")
        if op_name not in outputs_of:
            raise self.fail(f"{what} '{value:.200}' names no op defined before it (ops must "
                            "come in topological order: a dangling input or a cycle)")
        if int(index) >= outputs_of[op_name]:
            raise self.fail(f"{what} '{value:.200}': op '{op_name:.200}' has "
                            f"{outputs_of[op_name]} output(s)")
        return op_name, int(index)

    def attr(self, attr: str, encoded: Any, kinds: dict[str, str]) -> None:
        what = f"attr '{attr:.200}'"
        if attr not in kinds:
            raise self.fail(f"has unknown {what}; known: {sorted(kinds)}")
        kind = kinds[attr]
        if not isinstance(encoded, dict) or len(encoded) != 1:
            raise self.fail(f"{what} must be an object with one key (its kind, e.g. "
                            f"{{\"{_ENCODINGS[kind][0]}\": ...}}), got {str(encoded):.80}")
        (key, value), = encoded.items()
        if key not in _ENCODINGS[kind]:
            raise self.fail(f"{what} is a {kind} attr, stored as \"{key:.40}\" (expected "
                            f"\"{_ENCODINGS[kind][0]}\")")
        if key == "float" and not (isinstance(value, (int, float)) and not isinstance(
                value, bool)):
            raise self.fail(f"{what} must be a number, got {_json_type(value)}")
        elif key == "int" and not _is_int(value):
            raise self.fail(f"{what} must be an integer, got {_json_type(value)}")
        elif key == "bool" and not isinstance(value, bool):
            raise self.fail(f"{what} must be true or false, got {_json_type(value)}")
        elif key in ("string", "tensor"):
            self.string(value, what)
        elif key == "type":
            self.string(value, what)
            if value not in {d.name for d in dtypes.ALL_DTYPES}:
                raise self.fail(f"{what} is '{value:.40}', not one of "
                                f"{[d.name for d in dtypes.ALL_DTYPES]}")
        elif key == "shape" and value is not None:
            if not isinstance(value, list) or len(value) > MAX_RANK or not all(
                    d is None or _is_int(d) and 0 <= d <= MAX_DIM for d in value):
                raise self.fail(f"{what} must be null or a list of at most {MAX_RANK} "
                                f"dimensions, each null or an integer in [0, {MAX_DIM}], got "
                                f"{str(value):.80}")
        elif key == "types":
            if not isinstance(value, list) or not value or len(value) > MAX_LIST_ITEMS or any(
                    not isinstance(v, str) or v not in {d.name for d in dtypes.ALL_DTYPES}
                    for v in value):
                raise self.fail(f"{what} must be a list of 1 to {MAX_LIST_ITEMS} dtype names, "
                                f"got {str(value):.80}")
        elif key == "list":
            if not isinstance(value, list) or len(value) > MAX_LIST_ITEMS or not all(
                    _is_int(v) and abs(v) <= MAX_DIM for v in value):
                raise self.fail(f"{what} must be a list of at most {MAX_LIST_ITEMS} integers, "
                                f"got {str(value):.80}")


def _constant(checker: _Checker, archive: NpzReader | None, key: str,
              dtype_attr: dtypes.DType | None) -> np.ndarray:
    """The array of tensor attr ``key``, checked against the op's ``dtype`` attr (if any)
    before its data is read."""
    stored = key + BFLOAT16_SUFFIX if archive is not None and (
        key + BFLOAT16_SUFFIX) in archive else key
    if archive is None or stored not in archive:
        where = "no constants file" if archive is None else f"'{archive.path}'"
        raise checker.fail(f"its constant '{key:.200}' is missing ({where} has no such member)")
    bfloat16 = stored != key
    allowed = {d.np_dtype: d for d in dtypes.ALL_DTYPES}

    def check(dtype: np.dtype, shape: tuple[int, ...]) -> str | None:
        native = dtype.newbyteorder("=")
        if bfloat16:
            if native != np.uint16:
                return f"holds {dtype}, but a bfloat16 constant is stored as uint16 bits"
            found = dtypes.bfloat16
        elif native not in allowed:
            return f"has dtype {dtype}, not a minigraph dtype"
        else:
            found = allowed[native]
        if dtype_attr is not None and found is not dtype_attr:
            return (f"holds {found.name} values, but the op's dtype attr says "
                    f"{dtype_attr.name}")
        return None

    try:
        array = archive.read(stored, check)
    except InvalidArgumentError as exc:
        raise checker.fail(str(exc)) from None
    return array.view(dtypes.bfloat16.np_dtype) if bfloat16 else array


def _decode(checker: _Checker, encoded: dict, archive: NpzReader | None,
            dtype_attr: dtypes.DType | None) -> Any:
    (kind, value), = encoded.items()
    if kind == "type":
        return dtypes.as_dtype(value)
    if kind == "types":
        return [dtypes.as_dtype(name) for name in value]
    if kind == "shape":
        return TensorShape(value)
    if kind == "tensor":
        return _constant(checker, archive, value, dtype_attr)
    return value


def _open_constants(path: str, needed: bool) -> NpzReader | None:
    """The constants file of graph file ``path`` (or the legacy ``model.npz`` name), or None
    when the graph has no constants or there is no such file."""
    if not needed:
        return None
    for candidate in (constants_path(path), _legacy_constants_path(path)):
        if os.path.exists(candidate):
            try:
                return NpzReader(candidate, "graph constants file")
            except InvalidArgumentError as exc:
                raise InvalidArgumentError(f"'{path}': {exc}") from None
    return None


def read_graph(path: str | os.PathLike) -> Graph:
    """Rebuild the graph written by :func:`write_graph`.

    The document is checked against the format before anything is built; a malformed file
    is one :class:`InvalidArgumentError` naming the file, the op and the problem (a missing
    file is :class:`NotFoundError`).
    """
    path = files.check_path(path, "read_graph")
    checker = _Checker(path)
    entries = checker.document(_load_document(path))
    outputs_of: dict[str, int] = {}
    checked = [(entry, *checker.op(index, entry, outputs_of))
               for index, entry in enumerate(entries)]
    needs_constants = any("tensor" in encoded for entry in entries
                          for encoded in entry["attrs"].values())
    graph = Graph()
    root = Scope(graph)
    archive = _open_constants(path, needs_constants)
    try:
        for entry, op_def, inputs in checked:
            _rebuild(checker, graph, root, entry, op_def, inputs, archive)
    finally:
        if archive is not None:
            archive.close()
    return graph


def _output_count(op_def: Any, encoded_attrs: dict) -> int:
    """How many outputs the op has, from its checked attrs (a list output's ``N`` or ``T``;
    0 for one whose attr is missing: the rebuild then reports it)."""
    count = 0
    for arg in op_def.outputs:
        if arg.number_attr:
            count += encoded_attrs.get(arg.number_attr, {}).get("int", 0)
        elif arg.type_list_attr:
            count += len(encoded_attrs.get(arg.type_list_attr, {}).get("types", []))
        else:
            count += 1
    return count


def _arguments(op_def: Any, tensors: list) -> list:
    """The op's input arguments from its flat inputs: a list argument (an op has at most
    one) takes the tensors the other arguments leave."""
    rest = len(tensors) - sum(not arg.is_list for arg in op_def.inputs)
    arguments, start = [], 0
    for arg in op_def.inputs:
        length = rest if arg.is_list else 1
        arguments.append(tensors[start:start + length] if arg.is_list else tensors[start])
        start += length
    return arguments


def _rebuild(checker: _Checker, graph: Graph, root: Scope, entry: dict, op_def: Any,
             inputs: list[tuple[str, int]], archive: NpzReader | None) -> None:
    name = entry["name"]
    checker.where = f"'{checker.path}': op '{shown(name)}'"
    tensors = [graph.get_operation(op_name).outputs[index] for op_name, index in inputs]
    scope = root.WithOpName(name).WithDevice(entry["device"])
    if entry["control_inputs"]:
        scope = scope.WithControlDependencies(
            [graph.get_operation(n) for n in entry["control_inputs"]])
    raw_attrs = entry["attrs"]
    dtype_attr = None
    if "type" in raw_attrs.get("dtype", {}):
        dtype_attr = dtypes.as_dtype(raw_attrs["dtype"]["type"])
    attrs = {k: _decode(checker, v, archive, dtype_attr) for k, v in raw_attrs.items()}
    try:
        op = build_operation(scope, op_def, _arguments(op_def, tensors), attrs)
    except (InvalidArgumentError, NotFoundError) as exc:
        raise checker.fail(f"cannot be rebuilt: {exc}") from None
    except MemoryError as exc:
        if type(exc).__module__ == InvalidArgumentError.__module__:  # a tensor too large
            raise type(exc)(f"{checker.where}: {exc}") from None  # for memory: keep the class
        raise checker.fail(f"cannot be rebuilt: MemoryError: {exc}") from exc
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, ArithmeticError,
            RecursionError) as exc:
        # An op's shape function meeting attrs no constructor call would give it.
        raise checker.fail(f"cannot be rebuilt: {type(exc).__name__}: {exc}") from exc
    if op.name != name:  # pragma: no cover - names are checked unique above
        raise checker.fail(f"was rebuilt as '{op.name}'")
