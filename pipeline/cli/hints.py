"""What to do about a finished run: one hint per dominant cause a user can fix.

A cause is a reason code that ended at least :data:`DOMINANT_SHARE` of the run's lines
(rejected or quarantined). :data:`HINTS` maps such codes to what fixes them: a flag, a
config key, a re-encoding. Hints are built from the manifest only (its counts and
effective config), so they name reason codes, kinds and config keys, never a record value.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from pipeline.core.reasons import (
    JSON_INVALID_UTF8,
    JSON_TOO_DEEP,
    JSON_TOO_MANY_ITEMS,
    LINE_TOO_LARGE,
    SCHEMA_UNSUPPORTED_VERSION,
)
from pipeline.kinds import KINDS
from pipeline.kinds.autoqa_eval import NEEDS_CONTRACTS

__all__ = ["DOMINANT_SHARE", "HINTS", "Hint", "run_hints"]

#: A cause is dominant when it ended at least this share of the run's lines.
DOMINANT_SHARE: Final = 0.1


@dataclass(frozen=True)
class Hint:
    """What fixes a cause, when ``applies`` to the run (its manifest): ``text`` is formatted
    with the manifest's effective ``config`` and ``kinds`` (the known record kinds)."""

    text: str
    applies: Callable[[Mapping[str, Any]], bool] = lambda manifest: True


def _no_declared_kind(manifest: Mapping[str, Any]) -> bool:
    return any(entry.get("kind") is None for entry in manifest["inputs"])


def _no_table(name: str) -> Callable[[Mapping[str, Any]], bool]:
    return lambda manifest: manifest["config"]["references"].get(name) is None


_DOCUMENTS: Final = Hint(
    "rules need the documents table: set references.documents (a JSONL of id, sha256, text)",
    _no_table("documents"),
)

_CONTRACTS: Final = Hint(
    "AutoQA rules need the contracts table: set references.contracts (a JSONL of "
    "contracts, see docs/autoqa.md)",
    _no_table("contracts"),
)

#: reason code -> what fixes it. One line each; a code may need a condition to be fixable.
HINTS: Final[dict[str, Hint]] = {
    SCHEMA_UNSUPPORTED_VERSION: Hint(
        "the lines name no version rowgate routes: pass --kind KIND (one of {kinds}) "
        "or set inputs[].kind in the campaign config",
        _no_declared_kind,
    ),
    JSON_INVALID_UTF8: Hint(
        "the file may be Latin-1 (or UTF-16 inside a .gz or .zst): re-encode it as UTF-8 (e.g. iconv -f LATIN1 -t UTF-8)"
    ),
    LINE_TOO_LARGE: Hint(
        "lines are longer than limits.max_line_bytes ({config[limits][max_line_bytes]:,}): "
        "raise it, or pass --max-line-bytes N"
    ),
    JSON_TOO_DEEP: Hint(
        "records nest deeper than limits.max_depth ({config[limits][max_depth]}): raise it"
    ),
    JSON_TOO_MANY_ITEMS: Hint(
        "containers hold more than limits.max_items ({config[limits][max_items]:,}): raise it"
    ),
    "semantic.grounded-qa-v1.document_digest": _DOCUMENTS,
    "semantic.grounded-qa-v1.span_in_document": _DOCUMENTS,
    "semantic.grounded-qa-v1.quote_matches_span": _DOCUMENTS,
    "semantic.agent-trace-v1.authorised_documents": Hint(
        "the rule needs the authorised-documents table: set "
        "references.authorised_documents (a JSONL of id)",
        _no_table("authorised_documents"),
    ),
    **dict.fromkeys(NEEDS_CONTRACTS, _CONTRACTS),
}


def run_hints(manifest: Mapping[str, Any]) -> list[str]:
    """One line per dominant, fixable cause of a run, most lines first:
    ``schema.unsupported_version (126 lines): ...``."""
    counts = manifest["counts"]
    lines = counts["lines"]
    by_code: dict[str, int] = {}
    for disposition in ("rejected", "quarantined"):
        for code, n in counts["by_reason"].get(disposition, {}).items():
            by_code[code] = by_code.get(code, 0) + n
    hints = []
    seen: set[str] = set()
    for code, n in sorted(by_code.items(), key=lambda item: (-item[1], item[0])):
        hint = HINTS.get(code)
        if hint is None or not lines or n / lines < DOMINANT_SHARE or not hint.applies(manifest):
            continue
        text = hint.text.format(config=manifest["config"], kinds=", ".join(sorted(KINDS)))
        if text not in seen:  # several codes of one cause: one line
            seen.add(text)
            hints.append(f"{code} ({n:,} lines): {text}")
    return hints
