"""The raw bytes of rejected lines, when sanitization is on.

``rejected/`` keeps a rejected line's exact bytes in ``_raw`` so it can be repaired.
Those bytes never went through field-aware redaction (the line may not even be JSON),
so with sanitization on they would carry every secret straight into the output. The
policy's ``rejected_raw`` rule decides:

* ``withhold_if_found`` (default): the line's text is scanned as text, once as written
  and once with JSON escapes decoded (``\\u0040`` is '@'), plus, when it parses as
  JSON at all, the values of secret-named members. If anything is found (authorised
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

from pipeline.reasons import PII_RAW_WITHHELD, Reason
from pipeline.sanitize.categories import Category, count_detail
from pipeline.sanitize.detectors import SecretNames, TextScanner, is_placeholder
from pipeline.sanitize.policy import AuthorisedException, SanitizePolicy

__all__ = ["RawScreen"]

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
    """The strings held under a secret-named key, at any depth (iterative: a rejected
    line may nest as deep as orjson reads, 1024 levels)."""
    stack: list[tuple[Any, bool]] = [(value, False)]
    while stack:
        node, secret = stack.pop()
        if isinstance(node, str):
            if secret:
                yield node
        elif isinstance(node, dict):
            stack.extend(
                (member, secret or names.is_secret(str(key))) for key, member in node.items()
            )
        elif isinstance(node, list):
            stack.extend((member, secret) for member in node)


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
        """Categories found anywhere in the line (the larger count of the two views)."""
        text = line.decode("utf-8", "replace")
        views = [text, _unescape(text)] if "\\" in text else [text]
        found: Counter[Category] = Counter()
        for view in views:
            counts = Counter(
                d.category
                for d in self.scanner.scan(view)
                if not any(e.allows(d.category, view[d.start : d.end]) for e in self.exceptions)
            )
            found |= counts
        if Category.API_KEY in self.scanner.categories:
            try:
                parsed = orjson.loads(line)
            except orjson.JSONDecodeError:
                parsed = None
            secrets = sum(
                1 for v in _secret_values(parsed, self.names) if v and not is_placeholder(v)
            )
            if secrets:
                found[Category.API_KEY] = max(found[Category.API_KEY], secrets)
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
