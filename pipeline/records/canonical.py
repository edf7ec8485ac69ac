"""Canonical JSON (RFC 8785, JCS): the one serialisation behind ``_record_sha256``.

Two implementations give the same bytes:

* :func:`canonical_json` is the definition: keys sorted by UTF-16 code units, strings
  with JCS's minimal escaping, numbers as ECMAScript ``Number.prototype.toString``.
* :func:`canonical_json_fast` hands records without keys at or above U+E000 to orjson
  (``OPT_SORT_KEYS``), whose output is byte-identical there: it escapes exactly JCS's
  set, and code-point order equals UTF-16 order below U+E000; floats are written by the
  definition's own number formatting and given to orjson pre-serialised. Profiling
  showed this path at ~1 µs per 3 KB record against ~25 µs for the definition.

One documented deviation: RFC 8785 serialises every number as an IEEE-754 double, so
two distinct integers above 2**53 would share a canonical form (and a record hash).
rowgate writes integers exactly instead; for |n| <= 2**53 the two agree.
"""

from __future__ import annotations

import json
import math
from typing import Any, ClassVar, Final

import orjson

from pipeline.core.errors import EXIT_FAILED, RowgateError

__all__ = [
    "CANONICALIZATION",
    "CanonicalJSONError",
    "canonical_json",
    "canonical_json_fast",
    "needs_slow_path",
]

#: The canonical hashing procedure and its version, as the manifest records it (the
#: AutoQA evaluation contract §7.1: "A deployment MUST choose and version a canonical
#: hashing procedure ... The canonicalization version must be retained with the audit
#: record"). A change to the bytes :func:`canonical_json` gives is a new version.
CANONICALIZATION: Final = {
    "procedure": "RFC 8785 (JSON Canonicalization Scheme)",
    "version": "rowgate-jcs/1",
    "deviation": "integers beyond 2**53 are written exactly, not as IEEE-754 doubles",
    "hashes": ["_record_sha256", "config_effective_sha256"],
    "exact_bytes": "_raw_sha256 and every file digest hash the exact bytes, not a canonical form",
}


class CanonicalJSONError(RowgateError, ValueError):
    """The value has no canonical JSON form (NaN, infinity, a non-JSON type)."""

    exit_code: ClassVar[int] = EXIT_FAILED


def _utf16_key(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def _jcs_number(value: float) -> str:
    """ECMAScript Number::toString of a finite double (RFC 8785 §3.2.2.3)."""
    if not math.isfinite(value):
        raise CanonicalJSONError("non-finite numbers have no JSON form")
    if value == 0:
        return "0"  # also -0.0
    text = repr(value)  # shortest round-trip digits, the same digits ECMAScript uses
    sign = ""
    if text[0] == "-":
        sign, text = "-", text[1:]
    mantissa, _, exp_text = text.partition("e")
    exponent = int(exp_text) if exp_text else 0
    int_part, _, frac_part = mantissa.partition(".")
    digits = int_part + frac_part
    point = len(int_part) + exponent  # decimal point position within `digits`
    stripped = digits.lstrip("0")
    point -= len(digits) - len(stripped)
    digits = stripped.rstrip("0")
    k, n = len(digits), point
    if k <= n <= 21:
        body = digits + "0" * (n - k)
    elif 0 < n <= 21:
        body = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        body = "0." + "0" * (-n) + digits
    else:
        exp = n - 1
        exp_sign = "+" if exp >= 0 else "-"
        head = digits[0] if k == 1 else digits[0] + "." + digits[1:]
        body = f"{head}e{exp_sign}{abs(exp)}"
    return sign + body


def _serialize(value: Any, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        # json.dumps with ensure_ascii=False escapes exactly ", \, and C0 controls
        # (short forms for \b \t \n \f \r, lowercase \u00xx otherwise): JCS's set.
        out.append(json.dumps(value, ensure_ascii=False))
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, float):
        out.append(_jcs_number(value))
    elif isinstance(value, dict):
        out.append("{")
        first = True
        for key in sorted(value, key=_utf16_key):
            if not isinstance(key, str):
                raise CanonicalJSONError("object keys must be strings")
            if not first:
                out.append(",")
            first = False
            out.append(json.dumps(key, ensure_ascii=False))
            out.append(":")
            _serialize(value[key], out)
        out.append("}")
    elif isinstance(value, list | tuple):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _serialize(item, out)
        out.append("]")
    else:
        raise CanonicalJSONError(f"{type(value).__name__} is not a JSON type")


def canonical_json(value: Any) -> bytes:
    """Return the RFC 8785 canonical UTF-8 bytes of a JSON value.

    >>> canonical_json({"b": [1.0, 2.5e-7], "a": "é"})
    b'{"a":"\\xc3\\xa9","b":[1,2.5e-7]}'
    """
    out: list[str] = []
    _serialize(value, out)
    return "".join(out).encode("utf-8")


def needs_slow_path(value: Any) -> bool:
    """True when orjson's sorted output may differ from JCS for ``value``.

    That happens only for floats (number formatting) and for keys containing a code
    point at or above U+E000 (UTF-8 and UTF-16 orders disagree there).
    """
    kind = type(value)
    if kind is dict:
        for key, item in value.items():
            if _high_key(key):
                return True
            if needs_slow_path(item):
                return True
        return False
    if kind is list:
        return any(needs_slow_path(item) for item in value)
    return kind is float


def _high_key(key: str) -> bool:
    return not key.isascii() and max(key) >= "\ue000"


class _HighKey(Exception):
    """A key at or above U+E000: orjson's key order is not JCS's there."""


def _with_numbers(value: Any) -> Any:
    """``value`` with every float replaced by its JCS text as pre-serialised JSON
    (``orjson.Fragment``), which orjson writes as is; :class:`_HighKey` if a key's
    order would differ."""
    kind = type(value)
    if kind is float:
        return orjson.Fragment(_jcs_number(value).encode("ascii"))
    if kind is dict:
        found = {}
        for key, item in value.items():
            if _high_key(key):
                raise _HighKey
            found[key] = _with_numbers(item)
        return found
    if kind is list:
        return [_with_numbers(item) for item in value]
    return value


def canonical_json_fast(value: Any, *, slow: bool | None = None) -> bytes:
    """:func:`canonical_json`, through orjson where that is provably the same bytes.

    Without floats and keys at or above U+E000, orjson's sorted output is JCS. With
    floats only, each float is written in its JCS form (:func:`_jcs_number`, the
    definition's own) and handed to orjson as pre-serialised JSON: the rest is orjson's,
    and JCS's, as before (measured: an AutoQA document with floats took half its gate
    time in the definition). ``slow`` lets a caller that already knows
    :func:`needs_slow_path` skip the check.
    """
    if slow is None:
        slow = needs_slow_path(value)
    try:
        if not slow:
            return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        return orjson.dumps(_with_numbers(value), option=orjson.OPT_SORT_KEYS)
    except (_HighKey, orjson.JSONEncodeError):
        # a key orjson would order otherwise, or what orjson cannot write (an integer
        # beyond 64 bits, which the definition writes exactly): the definition
        return canonical_json(value)
