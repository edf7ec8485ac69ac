"""The raw bytes of rejected lines, when sanitization is on.

``rejected/`` keeps a rejected line's exact bytes in ``_raw`` so it can be repaired.
Those bytes never went through field-aware redaction (the line may not even be JSON),
so with sanitization on they would carry every secret straight into the output. The
policy's ``rejected_raw`` rule decides:

* ``withhold_if_found`` (default): the line is screened as text in every reading a
  person or a tool could recover a secret from, since a rejected line is often not
  valid UTF-8, or not JSON at all:

  - the bytes decoded as UTF-8 with invalid bytes replaced (U+FFFD);
  - when the line holds an invalid byte or a NUL: the bytes with every NUL and every
    invalid byte removed (an address split by ``\\xff`` or ``\\x00`` is whole again; so
    is ASCII text in UTF-16 or UTF-32, whose other bytes are NULs);
  - when the line holds a NUL or starts with a UTF-16 byte-order mark: the bytes
    decoded as UTF-16, and when it holds two NULs in a row as UTF-32, each in the byte
    order and alignment that reads the most ASCII (splitting on ``\\n`` starts every
    UTF-16 line after the first one byte off; JSON punctuation is ASCII whatever the
    text holds, so the right reading is the one with the most), NULs dropped;
  - each reading once more with JSON escapes decoded (``\\u0040`` is '@');
  - each reading folded where that changes it (fullwidth forms, other scripts' digits,
    invisible characters: :mod:`~pipeline.sanitize.folding`), so a member name
    spelled ``ｐａｓｓｗｏｒｄ`` or ``pass\u200bword`` is read as the name it shows.

  In each reading the text detectors run, and so does a member rule: every scalar
  (string or number, quoted or not) written after a secret-named member name
  (``"password": 84736251``), or inside the object or array written there
  (``"credentials": {"user": "bob"}``, to its closing bracket or the end of a line cut
  short), is a secret, whether or not the line parses, however long the value and
  whatever blanks pad the name (``"password "``) or surround the colon. A reading
  that parses as JSON also gives every string and number at any depth under a
  secret-named member. Booleans and nulls hold no secret; placeholders (``***``,
  ``${TOKEN}``, a redaction tag) are none either. If anything is found (authorised
  exceptions that hold everywhere still apply), ``_raw`` is null and the row gets
  ``pii.raw_withheld`` with category counts; otherwise ``_raw`` is kept.
* ``withhold``: ``_raw`` is null for every rejected line.
* ``keep``: ``_raw`` is kept (for campaigns whose exports are known to be clean).

``_raw_sha256`` always stays: it commits to the input bytes, and ``rowgate verify``
accepts a null ``_raw`` (it re-reads the source to check the commitment).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from typing import Any, Final

import orjson

from pipeline.core.reasons import PII_RAW_WITHHELD, Reason
from pipeline.sanitize.categories import Category, count_detail
from pipeline.sanitize.detectors import SecretNames, TextScanner, is_placeholder
from pipeline.sanitize.folding import fold
from pipeline.sanitize.policy import AuthorisedException, SanitizePolicy

__all__ = ["RawScreen", "readings"]

_ESCAPE: Final = re.compile(r"\\(?:u([0-9a-fA-F]{4})|([\"\\/bfnrt]))")
_SIMPLE: Final = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def _unescape(text: str) -> str:
    def one(match: re.Match[str]) -> str:
        if match.group(1) is not None:
            return chr(int(match.group(1), 16))
        return _SIMPLE.get(match.group(2), match.group(2))

    decoded = _ESCAPE.sub(one, text)
    # Pairs of \\uD83D\\uDE00 escapes become one character; lone halves become U+FFFD.
    return decoded.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _secret_values(value: Any, names: SecretNames) -> Iterator[str]:
    """The strings and numbers held under a secret-named key, at any depth (iterative: a
    rejected line may nest as deep as orjson reads, 1024 levels)."""
    stack: list[tuple[Any, bool]] = [(value, False)]
    while stack:
        node, secret = stack.pop()
        kind = type(node)
        if kind is str:
            if secret:
                yield node
        elif kind is int or kind is float:
            if secret:
                yield repr(node)
        elif kind is dict:
            stack.extend(
                (member, secret or names.is_secret(str(key))) for key, member in node.items()
            )
        elif kind is list:
            stack.extend((member, secret) for member in node)


# After the last word of a member name: the rest of the name (blanks: "password "), its
# closing quote, a colon and the value: a JSON string (escapes allowed; the end of a line
# cut short ends it too), the opening bracket of a container, or a bare run (a number, or
# an unquoted token in a line that is not JSON). No length bounds (a key padded with
# blanks, a 10 kB secret): every repetition is possessive over a class the next part of
# the pattern cannot start with, so a match is linear in what it reads.
_VALUE: Final = re.compile(
    rb'[ \t\r\n]*+"[ \t\r\n]*+:[ \t\r\n]*+'
    rb'(?:"(?P<string>(?:[^"\\\n]|\\.)*+)|(?P<open>[\[{])|(?P<bare>[^\s,:{}\[\]"]++))'
)
# Inside a container: a string (a member name when a colon follows it), a bracket, or a
# bare run; commas and blanks between them are skipped.
_TOKEN: Final = re.compile(
    rb'"(?P<string>(?:[^"\\\n]|\\.)*+)"?[ \t\r\n]*+(?P<colon>:)?'
    rb'|(?P<open>[\[{])|(?P<close>[\]}])|(?P<bare>[^\s,:{}\[\]"]++)'
)
#: A member name is judged by its last bytes (a secret name is short; a name is secret
#: when it ends with one), so a name padded to megabytes costs no more than a short one.
_NAME_TAIL: Final = 256
_NOT_SECRET: Final = frozenset({"true", "false", "null"})
_UTF16: Final = ("utf-16-le", "utf-16-be")
_UTF32: Final = ("utf-32-le", "utf-32-be")


def _widest(line: bytes, codecs: tuple[str, str], unit: int) -> str:
    """``line`` decoded with the byte order and alignment (a UTF-16 line split on b"\\n"
    starts one byte off) that reads the most ASCII: the JSON punctuation of a wide line
    is ASCII whatever its text holds, the other readings are noise."""
    best = ""
    for codec in codecs:
        for shift in range(unit):
            text = line[shift:].decode(codec, "ignore").replace("\x00", "")
            if len(text.encode("ascii", "ignore")) > len(best.encode("ascii", "ignore")):
                best = text
    return best.removeprefix("\ufeff")


def readings(line: bytes) -> list[str]:
    """Every text a secret in ``line`` could be read from (see the module docstring)."""
    found = [line.decode("utf-8", "replace")]
    nul = b"\x00" in line
    if nul or "\ufffd" in found[0]:
        found.append(line.replace(b"\x00", b"").decode("utf-8", "ignore"))
    if nul or line.startswith((b"\xff\xfe", b"\xfe\xff")):
        found.append(_widest(line, _UTF16, 2))
    if b"\x00\x00" in line:  # UTF-32 (a BOM of its own holds two NULs)
        found.append(_widest(line, _UTF32, 4))
    views = dict.fromkeys(found)
    for text in list(views):
        if "\\" in text:
            views.setdefault(_unescape(text))
    for text in list(views):
        view = fold(text)
        if view is not None:
            views.setdefault(view.text)
    return list(views)


def _is_value(raw: bytes) -> bool:
    value = raw.decode("utf-8", "replace")
    return bool(value) and value not in _NOT_SECRET and not is_placeholder(value)


def _container_secrets(data: bytes, start: int) -> tuple[int, int]:
    """Values in the container opened at ``start`` (to its closing bracket, or the end of
    the line): every string and bare scalar that is not a member name. Returns (count,
    where the container ends)."""
    depth, count = 0, 0
    for token in _TOKEN.finditer(data, start):
        if token.group("open") is not None:
            depth += 1
        elif token.group("close") is not None:
            depth -= 1
            if depth == 0:
                return count, token.end()
        elif token.group("colon") is None:
            raw = token.group("string")
            if _is_value(token.group("bare") if raw is None else raw):
                count += 1
    return count, len(data)


def _trigger_hits(lower: bytes, triggers: tuple[bytes, ...]) -> list[tuple[int, int]]:
    """Where each trigger word occurs in ``lower``, in order."""
    hits = []
    for trigger in triggers:
        at = lower.find(trigger)
        while at >= 0:
            hits.append((at, at + len(trigger)))
            at = lower.find(trigger, at + len(trigger))
    hits.sort()
    return hits


def _member_secrets(text: str, names: SecretNames) -> int:
    """Scalars written after a secret-named member name, parsed or not: the value itself,
    or every value in the object or array it opens. A member name can only be secret if
    it ends with the last word of a secret name (as in
    :class:`~pipeline.sanitize.detectors.SecretNames`), so those words are found first,
    in the UTF-8 bytes lower-cased (``bytes.lower`` keeps offsets), and the rest is
    checked only there.

    Bounded work: a value match reads only blanks and the value after its word; a name
    is looked for back to the quote before it, and only for a word a value follows (so
    two such looks never cross: the later word lies past the earlier one's closing
    quote); a container is walked once, and words inside one already walked are skipped.
    """
    data = text.encode("utf-8", "replace")
    count, walked = 0, 0
    for hit, end in _trigger_hits(data.lower(), names.triggers):
        if hit < walked:
            continue
        match = _VALUE.match(data, end)
        if match is None:
            continue
        opening = data.rfind(b'"', 0, hit)
        name = data[max(opening + 1, end - _NAME_TAIL) : end].decode("utf-8", "replace")
        if opening < 0 or not names.is_secret(name):
            continue
        if match.group("open") is not None:
            found, walked = _container_secrets(data, match.start("open"))
            count += found
        else:
            raw = match.group("string")
            count += _is_value(match.group("bare") if raw is None else raw)
    return count


class RawScreen:
    """Decides whether a rejected line's raw bytes may be kept."""

    def __init__(self, policy: SanitizePolicy) -> None:
        self.rule = policy.rejected_raw
        categories = set(policy.categories)
        for kind in policy.kinds.values():
            categories |= kind.categories
        self.names = SecretNames(policy.secret_fields)
        self.scanner = TextScanner(frozenset(categories), policy.phone_regions, self.names)
        self.exceptions: tuple[AuthorisedException, ...] = tuple(
            e for e in policy.exceptions if e.unconditional
        )

    def findings(self, line: bytes) -> Counter[Category]:
        """Categories found anywhere in the line (per category, the largest count any
        one reading gives)."""
        found: Counter[Category] = Counter()
        secrets = Category.API_KEY in self.scanner.categories
        for view in readings(line):
            counts = Counter(
                d.category
                for d in self.scanner.scan_written(view)  # folded views are readings
                if not any(e.allows(d.category, view[d.start : d.end]) for e in self.exceptions)
            )
            if secrets:
                members = _member_secrets(view, self.names)
                try:
                    parsed = orjson.loads(view)
                except orjson.JSONDecodeError:
                    parsed = None
                nested = sum(
                    1 for v in _secret_values(parsed, self.names) if v and not is_placeholder(v)
                )
                if members or nested:
                    counts[Category.API_KEY] = max(counts[Category.API_KEY], members, nested)
            found |= counts
        return found

    def reason(self, line: bytes) -> Reason | None:
        """``pii.raw_withheld`` when ``_raw`` must be null, else None."""
        if self.rule == "keep":
            return None
        if self.rule == "withhold":
            return Reason(PII_RAW_WITHHELD, "", "the policy withholds raw bytes of rejected lines")
        found = self.findings(line)
        if not found:
            return None
        return Reason(PII_RAW_WITHHELD, "", f"raw line holds {count_detail(found)}; _raw withheld")
