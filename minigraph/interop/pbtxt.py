"""Protobuf text format (``.pbtxt``) read with bounded memory and nesting.

protobuf's Python text parser (``text_format``) is not built for hostile input: its
tokenizer matches whitespace and string literals with regexes that keep a backtracking
record per repetition, so 10 MiB of spaces on one line, or a string literal of a million
escapes (``tensor_content: "\\000\\001..."``, as TensorFlow writes constants), take gigabytes;
and it recurses once per nesting level, so a few thousand ``{`` raise RecursionError.

:func:`parse` therefore feeds ``text_format`` the file one line at a time through
:func:`_bounded_lines`, which changes nothing the parser would read and keeps every token
small:

* nesting deeper than :data:`MAX_DEPTH` (protobuf's own limit for binary messages, which
  TensorFlow's GraphDefs therefore never exceed) is refused before the parser sees it;
* a line longer than a few KiB is re-tokenized: each run of whitespace becomes one space,
  comments are dropped, and a long string literal is decoded (as the parser would) and
  written back as adjacent literals of :data:`CHUNK_BYTES` bytes each in ``\\xHH`` escapes,
  which the parser joins into the same bytes.

Line numbers stay those of the file, so the parser's errors still point at the right line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from minigraph.framework.errors import InvalidArgumentError

MAX_DEPTH = 100  # protobuf's default recursion limit (upb and C++ decoders)
SHORT_LINE = 4096  # a line this short is handed over as it is (if it nests shallowly)
CHUNK_BYTES = 1024  # bytes per re-written string literal

# Where a string literal or a comment starts, runs of whitespace, and braces: every pattern
# is a single character class (repeated), which the regex engine matches without a
# per-character backtracking record.
_SPECIAL = re.compile(r"[\"'#]")
_SPACES = re.compile(r"[^\S\n]{2,}")
_BRACES = re.compile(r"[{}<>]")
_OPEN, _CLOSE = "{<", "}>"


class _Nesting:
    """The running brace depth of the text (outside strings and comments)."""

    def __init__(self, where: str) -> None:
        self.depth = 0
        self.where = where

    def open(self, line_number: int) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise InvalidArgumentError(
                f"{self.where}: line {line_number}: messages are nested more than {MAX_DEPTH} "
                f"deep (protobuf's limit: TensorFlow reads no deeper GraphDef)")

    def close(self) -> None:
        self.depth -= 1


def _string_end(line: str, quote_at: int) -> int:
    """The index of the quote closing the literal opened at ``quote_at`` (one preceded by an
    even run of backslashes), or -1 when the line ends first."""
    quote = line[quote_at]
    previous = quote_at
    while True:
        end = line.find(quote, previous + 1)
        if end < 0:
            return -1
        # the run of backslashes before it cannot reach past the previous quote found
        segment = line[previous + 1:end]
        if (len(segment) - len(segment.rstrip("\\"))) % 2 == 0:
            return end
        previous = end


def _rewritten_string(literal: str, where: str, line_number: int) -> str:
    """A long string literal as adjacent literals of the same bytes, each short."""
    from google.protobuf import text_encoding

    try:
        data = text_encoding.CUnescape(literal[1:-1])
    except ValueError as exc:  # what the parser itself would refuse
        raise InvalidArgumentError(f"{where}: line {line_number}: a string literal is not "
                                   f"valid text format: {str(exc)[:200]}") from None
    pieces = []
    for start in range(0, len(data), CHUNK_BYTES):
        chunk = data[start:start + CHUNK_BYTES]
        pieces.append('"\\x' + chunk.hex(":").replace(":", "\\x") + '"')
    return " ".join(pieces) or '""'


def _plain(segment: str, line_number: int, nesting: _Nesting) -> str:
    """Text outside strings and comments: its nesting tracked, whitespace runs collapsed."""
    opens = segment.count("{") + segment.count("<")
    if nesting.depth + opens <= MAX_DEPTH:
        nesting.depth += opens - segment.count("}") - segment.count(">")
    else:  # it may go too deep: brace by brace
        for brace in _BRACES.finditer(segment):
            if brace.group(0) in _OPEN:
                nesting.open(line_number)
            else:
                nesting.close()
    return _SPACES.sub(" ", segment)


def _retokenized(line: str, line_number: int, nesting: _Nesting, where: str) -> str:
    """``line`` with whitespace runs collapsed, its comment dropped and long strings split;
    tracks the nesting."""
    out: list[str] = []
    position = 0
    while True:
        special = _SPECIAL.search(line, position)
        end = len(line) if special is None else special.start()
        out.append(_plain(line[position:end], line_number, nesting))
        if special is None or line[end] == "#":  # a comment runs to the end of the line
            return "".join(out)
        close = _string_end(line, end)
        if close < 0:
            raise InvalidArgumentError(f"{where}: line {line_number}: a string literal has "
                                       f"no closing quote")
        literal = line[end:close + 1]
        out.append(literal if len(literal) <= SHORT_LINE
                   else _rewritten_string(literal, where, line_number))
        position = close + 1


def _bounded_lines(text: str, where: str) -> Iterator[str]:
    """The lines of ``text`` as the parser should see them (see the module docstring)."""
    nesting = _Nesting(where)
    start, line_number = 0, 0
    while start <= len(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        line = text[start:end]
        line_number += 1
        start = end + 1
        if len(line) <= SHORT_LINE and "\"" not in line and "'" not in line \
                and "#" not in line:
            opens = line.count("{") + line.count("<")
            if nesting.depth + opens <= MAX_DEPTH:
                nesting.depth += opens - line.count("}") - line.count(">")
                yield line
                continue
        yield _retokenized(line, line_number, nesting, where)


def parse(text: str, message: Any, where: str) -> Any:
    """Parse protobuf text into ``message`` (returned); any problem is an
    InvalidArgumentError naming ``where``."""
    from google.protobuf import text_format

    try:
        return text_format.ParseLines(_bounded_lines(text, where), message)
    except text_format.ParseError as exc:
        raise InvalidArgumentError(f"{where} is not a text GraphDef: {str(exc)[:500]}"
                                   ) from None
    except InvalidArgumentError:  # ours, from _bounded_lines: already says where
        raise
    except RecursionError:  # called from deep in a stack already
        raise InvalidArgumentError(f"{where}: nested too deeply to parse here") from None
    except (ValueError, TypeError, OverflowError) as exc:  # a value the parser mishandles
        raise InvalidArgumentError(f"{where} is not a text GraphDef: "
                                   f"{type(exc).__name__}: {str(exc)[:300]}") from None
