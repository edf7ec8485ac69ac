"""Strict JSON: one line of bytes to one JSON object, or a reason code (DESIGN §3.2).

The decoder is the standard library's C scanner with hooks, which profiling showed to be
faster than orjson followed by the Python walk that duplicate-key detection would need
(~16 µs against ~37 µs for a 3 KB row): the pairs hook sees every object, so duplicate
keys at any depth cost one ``dict`` construction. Everything the scanner accepts that
strict JSON must not is closed off explicitly:

* bytes are decoded as strict UTF-8 first (overlong forms, encoded surrogates, a UTF-16
  file: ``json.invalid_utf8``); a BOM is then a syntax error;
* NaN/Infinity literals, and numbers that overflow to infinity: ``json.non_finite``;
* integers outside int64, and non-zero literals that underflow to 0: ``json.number_range``;
* lone or unpaired ``\\uD800``-style escapes, which the scanner turns into unencodable
  strings: ``json.invalid_surrogate``;
* depth and per-container item counts beyond the limits: ``json.too_deep`` /
  ``json.too_many_items`` (:func:`check_limits`, separate so a caller can skip it when the
  schema already bounds them); a line nested deeper than :data:`PARSER_DEPTH` is
  ``json.too_deep`` before it is parsed.

A line holding several of these gets the first in the order the reason codes are
checked (``json.syntax`` before them all): the hooks note what they find and the scanner
reads on to the end of the line.

A repeated key or a non-finite number is located by a second scan of the rejected line
(:func:`locate`): :class:`LocatedReject` carries the raw path for the gate to render
safely with the schema (the parser cannot tell a declared name from a map key).

JSONTestSuite ``i_`` decisions, pinned by tests: numbers that overflow are rejected
(non_finite), huge integers are rejected (number_range), underflow to zero is rejected
(number_range), every invalid-UTF-8 or surrogate case is rejected, the 500-deep array is
rejected by the default depth limit, a BOM is a syntax error.
"""

from __future__ import annotations

import functools
import json
import math
import re
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import orjson

from pipeline.core.limits import MAX_NESTING
from pipeline.core.reasons import (
    JSON_DUPLICATE_KEY,
    JSON_INVALID_SURROGATE,
    JSON_INVALID_UTF8,
    JSON_NON_FINITE,
    JSON_NOT_OBJECT,
    JSON_NUMBER_RANGE,
    JSON_SYNTAX,
    JSON_TOO_DEEP,
    JSON_TOO_MANY_ITEMS,
    LINE_BLANK,
    RejectLine,
)

__all__ = [
    "MAX_NESTING",
    "LocatedReject",
    "Location",
    "StrictParser",
    "check_limits",
    "has_float",
    "measure",
    "parse_fast",
    "parse_object",
    "parse_value",
]

INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
_SURROGATE_ESCAPE: Final = re.compile(r"\\u[dD][89a-fA-F]")
_NONZERO_DIGIT: Final = re.compile(r"[1-9]")
_BLANK: Final = frozenset(b" \t\r")


#: The deepest nesting the parser reads. The standard library's scanner recurses once a
#: level, and how much of Python's recursion budget is left depends on the caller's stack
#: (a worker's is shallower than the command line's): lines nested ~950 levels got
#: ``json.too_deep`` gated in the parent and ``json.not_object`` in a worker. A line
#: deeper than this is ``json.too_deep`` before it is parsed, wherever it is gated. Far
#: above any ``limits.max_depth`` (at most :data:`MAX_NESTING`), far below the budget.
PARSER_DEPTH: Final = 512


def nesting_depth(line: bytes) -> int:
    """How deep ``line``'s brackets nest outside its strings, without parsing it (a line
    that is not JSON gets a depth too: its brackets', counted the same way), in time
    linear in the line: a quote is a string's edge unless an odd run of backslashes
    precedes it, and a bracket is outside every string when an even number of edges
    precede it. (A regex matching strings took time quadratic in a line holding an
    unclosed string of escaped quotes: ~8 s for 32 KB, hours for a megabyte.)"""
    text = np.frombuffer(line, np.uint8)
    quotes = np.flatnonzero(text == _QUOTE)
    slashes = text == _BACKSLASH
    if slashes.any():  # the run of backslashes before each quote: odd escapes it
        places = np.arange(len(text), dtype=np.int64)
        last_other = np.maximum.accumulate(np.where(slashes, -1, places))
        before = np.maximum(quotes - 1, 0)
        escapes = np.where(quotes > 0, quotes - 1 - last_other[before], 0)
        quotes = quotes[escapes % 2 == 0]
    step = np.zeros(len(text) + 1, np.int64)
    step[quotes + 1] = 1  # inside a string from just after an opening quote
    inside = np.cumsum(step[:-1]) % 2 == 1
    depth = (text == _OPEN_ARRAY) | (text == _OPEN_OBJECT)
    depth = depth.astype(np.int64) - ((text == _CLOSE_ARRAY) | (text == _CLOSE_OBJECT))
    depth[inside] = 0
    return int(np.cumsum(depth).max(initial=0))


_QUOTE: Final = ord('"')
_BACKSLASH: Final = ord("\\")
_OPEN_ARRAY, _OPEN_OBJECT, _CLOSE_ARRAY, _CLOSE_OBJECT = b"[{]}"
#: The parser's findings that are not syntax errors, in the order the reason codes are
#: checked: a line holding several gets the first of these (and a line that is not JSON
#: gets ``json.syntax``, whatever the hooks saw before the scanner stopped).
_FINDINGS: Final = (JSON_DUPLICATE_KEY, JSON_NON_FINITE, JSON_NUMBER_RANGE)


#: The most digits an int64 literal has (JSON forbids leading zeros): a longer one is out
#: of range without converting it, which for 4301 digits or more Python refuses to do
#: (``sys.get_int_max_str_digits``) and which costs time quadratic in the length below.
_INT64_DIGITS: Final = len(str(INT64_MAX))


def _has_lone_surrogate(value: Any) -> bool:
    """Whether a key or string anywhere in ``value`` holds an unpaired surrogate.
    Iterative: the value may be nested as deep as the parser allows."""
    stack = [value]
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind is str:
            try:
                node.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif kind is dict:
            stack.extend(node)
            stack.extend(node.values())
        elif kind is list:
            stack.extend(node)
    return False


class StrictParser:
    """A reusable strict decoder. After :meth:`parse`, ``saw_float`` tells whether the
    line held any non-integer number literal (the gate's canonical-JSON fast path needs
    to know, and the float hook sees it for free).

    The hooks note what they find and let the scanner go on: a line is first checked to
    be JSON at all (``json.syntax``), and only then given the first finding in the order
    of :data:`_FINDINGS`. Raising from a hook stopped the scan there, so a truncated
    line holding a repeated key or ``NaN`` before the cut was not ``json.syntax``."""

    def __init__(self) -> None:
        self.saw_float = False
        self._found: dict[str, str] = {}
        self._decoder = json.JSONDecoder(
            object_pairs_hook=self._pairs,
            parse_constant=self._constant,
            parse_int=self._int,
            parse_float=self._float,
            strict=True,  # control characters inside strings are errors
        )

    def _note(self, code: str, detail: str) -> None:
        self._found.setdefault(code, detail)

    def _pairs(self, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        result = dict(pairs)
        if len(result) != len(pairs):
            self._note(JSON_DUPLICATE_KEY, "an object repeats a key")
        return result

    def _constant(self, name: str) -> Any:
        self._note(JSON_NON_FINITE, "NaN or Infinity literal")
        return None

    def _int(self, text: str) -> int:
        if len(text) - text.startswith("-") > _INT64_DIGITS:
            self._note(JSON_NUMBER_RANGE, "integer outside the int64 range")
            return 0
        value = int(text)
        if not INT64_MIN <= value <= INT64_MAX:
            self._note(JSON_NUMBER_RANGE, "integer outside the int64 range")
        return value

    def _float(self, text: str) -> float:
        self.saw_float = True
        value = float(text)
        if math.isinf(value):
            self._note(JSON_NON_FINITE, "number overflows a double")
        elif value == 0.0:
            mantissa = text.partition("e")[0].partition("E")[0]
            if _NONZERO_DIGIT.search(mantissa):
                self._note(JSON_NUMBER_RANGE, "non-zero number underflows to zero")
        return value

    def parse(self, line: bytes) -> Any:
        """Parse one line as exactly one strict JSON value, or raise :class:`RejectLine`.

        Limits (depth, items) are not checked here; see :func:`check_limits`.
        """
        self.saw_float = False
        if not line or all(byte in _BLANK for byte in line):
            raise RejectLine(LINE_BLANK, "empty or whitespace-only line")
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RejectLine(JSON_INVALID_UTF8, f"invalid UTF-8 at byte {exc.start}") from None
        # a line nests no deeper than its length: most lines are never counted at all
        if (
            len(line) > PARSER_DEPTH
            and line.count(b"[") + line.count(b"{") > PARSER_DEPTH
            and nesting_depth(line) > PARSER_DEPTH
        ):
            raise RejectLine(JSON_TOO_DEEP, f"nesting deeper than {PARSER_DEPTH} levels")
        self._found.clear()
        try:
            value = self._decoder.decode(text)
        except RecursionError:  # only under a caller's own deep stack: see PARSER_DEPTH
            raise RejectLine(
                JSON_TOO_DEEP, "nesting exceeds the parser's recursion bound"
            ) from None
        except json.JSONDecodeError as exc:
            # exc.msg names the grammar rule ("Expecting ',' delimiter"), never the input;
            # Python's message for a control character already ends in "at"
            message = exc.msg.removesuffix(" at")
            raise RejectLine(JSON_SYNTAX, f"{message} at column {exc.colno}") from None
        if self._found:
            code = next(c for c in _FINDINGS if c in self._found)
            if code == JSON_NUMBER_RANGE:
                raise RejectLine(code, self._found[code])
            raise LocatedReject(code, self._found[code], text)
        if _SURROGATE_ESCAPE.search(text) and _has_lone_surrogate(value):
            raise RejectLine(JSON_INVALID_SURROGATE, "lone or unpaired surrogate escape")
        return value


class LocatedReject(RejectLine):
    """A rejection the parser can place in the value (a repeated key, a non-finite
    number) though it has no record to give: ``location`` holds the raw path (keys and
    indices, which may be record values) and the top-level members, so that the caller,
    which knows the schema, renders the path safely (:func:`pipeline.records.schemas.safe_path`)."""

    def __init__(self, code: str, detail: str, text: str) -> None:
        super().__init__(code, detail)
        self.text = text

    @functools.cached_property
    def location(self) -> Location | None:
        # a second, slower scan of the line: only for the caller that renders the path
        # (the gate's fast path catches such a line and hands it to the reference path)
        return locate(self.text, self.reason.code)


@dataclass(frozen=True)
class Location:
    #: the member names and indices from the top-level value to the offending one
    parts: tuple[str | int, ...]
    #: the top-level object's members (the last of a repeated key), for routing
    top: dict[str, Any]


class _Members(list):  # type: ignore[type-arg]
    """An object as its (key, value) pairs, repeats kept: the locator's object type."""

    repeat: str | None = None
    seq: int | None = None


class _Event:
    """Where a non-finite number was, in the locator's value."""

    def __init__(self, seq: int) -> None:
        self.seq = seq


def locate(text: str, code: str) -> Location | None:
    """Where ``text`` holds the first repeated key (``code`` is ``json.duplicate_key``) or
    non-finite number (``json.non_finite``) in the order the strict parser's hooks see
    them (objects when they close, numbers when read). ``None`` if it cannot tell.

    Only rejected lines get here: a second scan that keeps what it finds in the value."""
    counter = iter(range(1 << 62))
    keys, numbers = code == JSON_DUPLICATE_KEY, code == JSON_NON_FINITE

    def pairs(found: list[tuple[str, Any]]) -> _Members:
        members = _Members(found)
        seen: set[str] = set()
        for key, _ in found if keys else ():
            if key in seen:
                members.repeat, members.seq = key, next(counter)
                break
            seen.add(key)
        return members

    def number(text: str) -> Any:
        value = float(text)
        return _Event(next(counter)) if numbers and math.isinf(value) else value

    decoder = json.JSONDecoder(
        object_pairs_hook=pairs,
        parse_constant=lambda name: _Event(next(counter)) if numbers else None,
        parse_float=number,
        strict=True,
    )
    try:
        value = decoder.decode(text)
    except (ValueError, RecursionError):
        return None
    best: tuple[int, tuple[str | int, ...]] | None = None
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(value, ())]
    while stack:
        node, parts = stack.pop()
        if isinstance(node, _Event):
            found = (node.seq, parts)
        elif isinstance(node, _Members):
            stack.extend((v, (*parts, k)) for k, v in node)
            if node.seq is None or node.repeat is None:
                continue
            found = (node.seq, (*parts, node.repeat))
        elif isinstance(node, list):
            stack.extend((v, (*parts, i)) for i, v in enumerate(node))
            continue
        else:
            continue
        if best is None or found[0] < best[0]:
            best = found
    if best is None:
        return None
    top = dict(value) if isinstance(value, _Members) else {}
    return Location(best[1], top)


#: A run of 19+ digits: a number that may lie outside int64 (or text that looks like one).
LONG_DIGITS: Final = re.compile(rb"[0-9]{19}")
#: A colon written as an escape (or text that looks like one), which the member count
#: below cannot see in the line.
_ESCAPED_COLON: Final = re.compile(rb"\\u003[aA]")


def parse_fast(line: bytes) -> Any | None:
    """The hot path's parser: orjson's value for ``line`` when that is provably what
    :class:`StrictParser` reads, else ``None`` (use the strict parser, which decides).

    orjson parses a 3 KB row in ~10 µs against ~25 µs for UTF-8 decoding plus the standard
    library scanner with its hooks. It rejects invalid UTF-8, lone surrogates, a BOM,
    NaN/Infinity, overflow to infinity, control characters in strings, trailing data and
    comments, but it keeps the last of duplicate keys, reads integers up to 2**64 (and
    beyond as floats), and reads a non-zero number that underflows as 0.0. One of two
    proofs closes those gaps, else the line goes to the strict parser:

    * **orjson's own compact form**: the line is byte for byte ``orjson.dumps`` of the
      value (~3 µs). A repeated key re-serialises with fewer members and an underflow as
      ``0.0``; integers beyond int64 are the caller's to check (:data:`LONG_DIGITS`), unless
      the schema bounds every integer.
    * **a member count**, for any other layout (``json.dumps``' default ``", "`` and
      ``": "`` separators and ``\\u`` escapes, which most exports use: without it they
      took ~33 µs more per 3.3 KB row than the same rows written by orjson). Each object
      member has exactly one colon outside strings, so a line holds as many members as
      ``line.count(b":")`` minus the colons inside its keys and strings. A repeated key
      loses at least one member from the value, and the colons in the strings it loses
      are still in the line, so the counts are equal only when no key repeats. The walk
      that counts (~6 µs) sends a line to the strict parser when a colon is escaped
      (``\\u003a``: the line's count cannot see it), when a float is present (underflow;
      the standard library's float reading is the reference), when an integer lies
      outside int64, or when the value nests deeper than :data:`MAX_NESTING`.

    A test proves both paths give identical dispositions, reasons and hashes.
    """
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    # Which proof to try first: a space after the first key says the line is not in
    # orjson's compact form, which then need not be built (~3 µs). A wrong guess costs
    # time, never correctness: either proof alone is sound.
    colon = line.find(b'":', 1, 256)
    if colon < 0 or not line.startswith(b" ", colon + 2):
        try:
            if orjson.dumps(value) == line:
                return value
        except orjson.JSONEncodeError:  # nesting beyond what orjson writes (254 levels)
            return None
    if _ESCAPED_COLON.search(line):
        return None
    counted = _members_and_colons(value)
    if counted is None:
        return None
    members, colons = counted
    return value if line.count(b":") - colons == members else None


def _members_and_colons(value: Any) -> tuple[int, int] | None:
    """(object members, colons inside keys and strings) of a parsed value; ``None`` when
    it holds a float, an integer outside int64, or nests deeper than :data:`MAX_NESTING`
    (the strict parser decides those)."""
    members = colons = 0
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if type(node) is dict:
            members += len(node)
            colons += "".join(node).count(":")
            items: Any = node.values()
        elif type(node) is list:
            items = node
        else:  # a scalar at the top level
            items = (node,)
        for item in items:
            kind = type(item)
            if kind is str:
                if ":" in item:
                    colons += item.count(":")
            elif kind is dict or kind is list:
                if depth == MAX_NESTING:
                    return None
                stack.append((item, depth + 1))
            elif kind is int:
                if not INT64_MIN <= item <= INT64_MAX:
                    return None
            elif kind is float:
                return None
    return members, colons


def has_float(value: Any) -> bool:
    """Whether a parsed value holds a float anywhere (iterative; cheaper than a regex)."""
    stack = [value]
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind is dict:
            node = node.values()
        elif kind is not list:
            if kind is float:
                return True
            continue
        for item in node:
            kind = type(item)
            if kind is float:
                return True
            if kind is dict or kind is list:
                stack.append(item)
    return False


_DEFAULT_PARSER: Final = StrictParser()


def parse_value(line: bytes) -> Any:
    """Parse one line as exactly one strict JSON value (see :meth:`StrictParser.parse`)."""
    return _DEFAULT_PARSER.parse(line)


def measure(value: Any) -> tuple[int, int]:
    """Return (nesting depth, largest container size); a scalar has depth 0.

    ``{}`` and ``[]`` have depth 1, ``{"a": [1]}`` depth 2. Iterative: a value nested as
    deep as a parser allows must not exhaust Python's recursion limit here.
    """
    max_depth = max_items = 0
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        kind = type(node)
        if kind is dict:
            children: Any = node.values()
        elif kind is list:
            children = node
        else:
            continue
        max_depth = max(max_depth, depth)
        max_items = max(max_items, len(node))
        stack.extend((c, depth + 1) for c in children if type(c) is dict or type(c) is list)
    return max_depth, max_items


def check_limits(value: Any, max_depth: int, max_items: int) -> None:
    """Raise :class:`RejectLine` when ``value`` nests or fans out beyond the limits."""
    depth, items = measure(value)
    if depth > max_depth:
        raise RejectLine(JSON_TOO_DEEP, f"nesting depth {depth} exceeds the limit {max_depth}")
    if items > max_items:
        raise RejectLine(
            JSON_TOO_MANY_ITEMS, f"a container holds {items} items, the limit is {max_items}"
        )


def require_object(value: Any) -> dict[str, Any]:
    if type(value) is not dict:
        raise RejectLine(JSON_NOT_OBJECT, f"top-level value is {_json_type(value)}, not an object")
    return value


def parse_object(line: bytes, max_depth: int, max_items: int) -> dict[str, Any]:
    """Parse one line as a strict JSON object within the limits (the reference order)."""
    value = require_object(parse_value(line))
    check_limits(value, max_depth, max_items)
    return value


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array"
