"""Does redacted code still parse? (seed 002: "If a transformation changes an executable
answer ... quarantine it for correction".)

A field holds either code or Markdown with fenced blocks. Each Python block (fence
language ``python``/``py``/none) and JSON block that parsed before redaction must
parse after it; code that never parsed (a diff, pseudo-code) is not held to that. Only
fields that actually changed are checked, so clean rows pay nothing.
"""

from __future__ import annotations

import ast
import json
import warnings
from typing import Final

__all__ = ["redaction_breaks_code"]

_PYTHON: Final = frozenset({"", "python", "py", "python3", "py3"})
_JSON: Final = frozenset({"json"})
_FENCE: Final = "```"


def _blocks(text: str) -> list[tuple[str, str]]:
    """(language, code) of each fenced block, or the whole text as one unlabelled block."""
    if _FENCE not in text:
        return [("", text)]
    pieces = text.split(_FENCE)
    blocks = []
    for inside in pieces[1::2]:
        language, _, code = inside.partition("\n")
        blocks.append((language.strip().lower(), code))
    return blocks


def _parses(language: str, code: str) -> bool | None:
    """Whether ``code`` parses; None for languages this check does not know."""
    if language in _PYTHON:
        with warnings.catch_warnings():
            # SyntaxWarnings (invalid escapes) would print source lines to stderr.
            warnings.simplefilter("ignore")
            try:
                ast.parse(code)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                return False
        return True
    if language in _JSON:
        try:
            json.loads(code)
        except (ValueError, RecursionError):
            return False
        return True
    return None


def redaction_breaks_code(before: str, after: str) -> bool:
    """True when a block of ``after`` fails to parse although it parsed in ``before``."""
    old, new = _blocks(before), _blocks(after)
    if len(old) != len(new):
        return True  # redaction never touches fences; a different shape is not trusted
    for (language, code_before), (_, code_after) in zip(old, new, strict=True):
        if code_before == code_after:
            continue
        # After first: redactions mostly land inside string literals and comments, where
        # the code still parses and the original need not be parsed at all.
        if _parses(language, code_after) is False and _parses(language, code_before):
            return True
    return False
