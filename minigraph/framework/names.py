"""Node names: TensorFlow's rule for which names a graph may hold, and how names (or any
value from a file) are shown in error messages.

TensorFlow 2.21 imports a node only when its name is one or more pieces joined by ``>``,
each piece an ASCII letter, digit or ``.`` followed by any ASCII letters, digits and
``- . / _`` (``IsValidNodeName`` in ``graph_constructor.cc``). So ``a/b``, ``a/``, ``.x``,
``../../x`` and ``x>y`` are names; ``a:1``, ``^a``, ``_a``, ``-a``, ``a b``, ``é``, ``a>``
and names with NUL are not (``:`` and ``^`` would make inputs ambiguous). minigraph's own
graph files (:mod:`minigraph.io`) also refuse empty, ``.`` and ``..`` pieces between
slashes, so a name never reads as a path that climbs out of a directory.

A NodeDef's device must also parse as TensorFlow's ``DeviceSpec`` does
(:func:`device_problem`).

A name or value read from a file can be megabytes long and hold control characters: every
message shows it through :func:`shown`, which clips it to a few hundred characters.
"""

from __future__ import annotations

import re

# One piece between '>': what TF's Scanner accepts (ASCII only, unlike str.isalnum)
_PIECE = re.compile(r"[A-Za-z0-9.][A-Za-z0-9_./-]*")
SHOWN_CHARS = 200  # the most characters of one name or value a message shows


def is_valid_node_name(name: str) -> bool:
    """Whether TensorFlow would import a node of this name."""
    # split first: a regex repeating a '>'-group over a huge name keeps a backtracking
    # record per piece, while each piece alone is a plain character-class run
    return all(_PIECE.fullmatch(piece) for piece in name.split(">"))


def path_problem(name: str) -> str | None:
    """Why ``name`` may not name an op in a minigraph graph file, or None: TF's rule, and
    no empty, ``.`` or ``..`` piece between slashes (``a//b``, ``a/``, ``../x``)."""
    if not is_valid_node_name(name):
        return ("it is not a valid node name (TensorFlow's rule: ASCII letters, digits and "
                "'.' first, then also '-', '/', '_'; pieces joined by '>')")
    if any(part in ("", ".", "..") for part in name.split("/")):
        return "it has an empty, '.' or '..' component between slashes"
    return None


# The device types TF's DeviceSpec knows in a legacy "/cpu:0" piece
_DEVICE_TYPES = ("CPU", "GPU", "TPU", "CUSTOM", "EPU")


def _index_problem(text: str, spec: str) -> str | None:
    try:
        int(text)  # TF parses these with Python's int()
    except ValueError as exc:
        return f"{shown(str(exc))} (in the device spec '{shown(spec)}')"
    return None


def device_problem(spec: str) -> str | None:
    """Why TensorFlow's ``DeviceSpec.from_string`` refuses a NodeDef's device (TF's words),
    or None: ``/``-separated pieces ``job:NAME``, ``replica:N``, ``task:N``,
    ``device:TYPE:N`` (or ``*``), or a legacy ``cpu:N``/``GPU`` piece; one device type."""
    device_type = None
    for piece in spec.split("/"):
        parts = piece.split(":")
        if parts[0] in ("job", "replica", "task") and len(parts) == 2:
            problem = _index_problem(parts[1], spec) if parts[0] != "job" else None
        elif len(parts) in (1, 2) and parts[0].upper() in _DEVICE_TYPES or (
                len(parts) == 3 and parts[0] == "device"):
            if device_type is not None:
                return (f"Multiple device types are not allowed while parsing the device "
                        f"spec: {shown(spec)}.")
            device_type = parts[0] if len(parts) != 3 else parts[1]
            index = parts[-1] if len(parts) > 1 else "*"
            problem = _index_problem(index, spec) if index != "*" else None
        elif parts[0]:
            return (f"Unknown attribute '{shown(parts[0])}' is encountered while parsing the "
                    f"device spec: '{shown(spec)}'.")
        else:
            problem = None
        if problem:
            return problem
    return None


def _escape(match: re.Match) -> str:
    return match.group(0).encode("unicode_escape", "backslashreplace").decode("ascii")


_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f\ud800-\udfff]")


def shown(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` as a message shows it: control characters and lone surrogates escaped
    (``\\x00``; a surrogate would make the message itself unprintable), and clipped to
    ``limit`` characters with the full length said."""
    if not isinstance(text, str):
        text = repr(text)
    clipped = text if len(text) <= limit else text[:limit]
    clipped = _UNPRINTABLE.sub(_escape, clipped)
    if len(text) > limit:
        clipped += f"...[{len(text):,} characters]"
    return clipped
