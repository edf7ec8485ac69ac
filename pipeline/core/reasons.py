"""Dispositions and reason codes: the public vocabulary every output row speaks.

Reason codes are a contract (DESIGN §3.2, §3.6). They are stable strings grouped by
prefix; a row's ``_reasons`` column holds every :class:`Reason` that fired for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

import pyarrow as pa


class Disposition(StrEnum):
    """Where a line ends: exactly one of these for every input line."""

    ACCEPTED = "accepted"
    REJECTED = "rejected"
    QUARANTINED = "quarantined"
    DUPLICATE = "duplicate"


@dataclass(frozen=True, slots=True)
class Reason:
    """Why a row got its disposition.

    ``path`` is a safe field path (``$.ratings.style``; map keys are written ``*``) and
    ``detail`` a short explanation built from the schema or the rule, never from the
    offending value: values may be secrets.
    """

    code: str
    path: str = ""
    detail: str = ""

    def as_row(self) -> dict[str, str]:
        return {"code": self.code, "path": self.path, "detail": self.detail}


REASON_TYPE: Final = pa.struct(
    [
        pa.field("code", pa.string(), nullable=False),
        pa.field("path", pa.string(), nullable=False),
        pa.field("detail", pa.string(), nullable=False),
    ]
)
REASONS_TYPE: Final = pa.list_(pa.field("item", REASON_TYPE, nullable=False))

# Line-level bounds, checked before any parsing.
LINE_TOO_LARGE: Final = "line.too_large"
LINE_BLANK: Final = "line.blank"

# Strict JSON (DESIGN §3.2).
JSON_INVALID_UTF8: Final = "json.invalid_utf8"
JSON_INVALID_SURROGATE: Final = "json.invalid_surrogate"
JSON_SYNTAX: Final = "json.syntax"
JSON_DUPLICATE_KEY: Final = "json.duplicate_key"
JSON_NON_FINITE: Final = "json.non_finite"
JSON_NUMBER_RANGE: Final = "json.number_range"
JSON_TOO_DEEP: Final = "json.too_deep"
JSON_TOO_MANY_ITEMS: Final = "json.too_many_items"
JSON_NOT_OBJECT: Final = "json.not_object"

# Routing and schema validation. Validation failures are ``schema.<keyword>``, e.g.
# ``schema.required`` or ``schema.maximum``, keyword spelled as in JSON Schema.
SCHEMA_UNSUPPORTED_VERSION: Final = "schema.unsupported_version"
SCHEMA_PREFIX: Final = "schema."

# Sanitization (seed 002, pipeline/sanitize). Paths are safe field paths; details hold
# category names and counts only, never a matched value.
PII_REDACTED: Final = "pii.redacted"  # informational: what was replaced, per field
PII_UNCERTAIN: Final = "pii.uncertain"  # PII-shaped and in PII context, failed validation
PII_CODE_BROKEN: Final = "pii.code_broken"  # code that parsed before redaction no longer does
PII_EVIDENCE_CHANGED: Final = "pii.evidence_changed"  # a verbatim quote was redacted
PII_SCHEMA_INVALID: Final = "pii.schema_invalid"  # the redacted record fails its schema
PII_KEY_COLLISION: Final = "pii.key_collision"  # two redacted member names collide
PII_UNSTABLE: Final = "pii.unstable"  # redaction did not reach a fixpoint
PII_RAW_WITHHELD: Final = "pii.raw_withheld"  # a rejected line's raw bytes were not kept
PII_RULES_BROKEN: Final = "pii.rules_broken"  # a semantic rule fails only after redaction
#: a secret-named member holds a number and the schema refuses the redaction tag in its
#: place: the record cannot be stored without the secret, so it is rejected (raw withheld)
PII_UNREDACTABLE: Final = "pii.unredactable"
#: Codes that send a record to quarantine (a person looks at it).
PII_QUARANTINE_CODES: Final = frozenset(
    {
        PII_UNCERTAIN,
        PII_CODE_BROKEN,
        PII_EVIDENCE_CHANGED,
        PII_SCHEMA_INVALID,
        PII_KEY_COLLISION,
        PII_UNSTABLE,
        PII_RULES_BROKEN,
    }
)


# The rubric's review policy across records (seed 000 "review_policy", global stage 150,
# pipeline/decide/stages/review.py). The item's reviews that are not enough, not accepting enough
# or not agreeing get ``review.<disagreement_action>``; when they agree, the first
# accepting review is kept and the others are its duplicates.
REVIEW_PREFIX: Final = "review."
REVIEW_AGREEING: Final = "review.agreeing"  # duplicate: an accepting review that agrees
REVIEW_OUTVOTED: Final = "review.outvoted"  # duplicate: a review that did not vote accept
#: ``disagreement_action`` -> (reason code, disposition)
REVIEW_ACTIONS: Final = {
    "adjudicate": ("review.adjudicate", "quarantined"),
    "escalate": ("review.escalate", "quarantined"),
    "reject": ("review.reject", "rejected"),
}


# Gate-level codes in the order the gate checks them; a rejected line gets the first that
# applies (the scanner reports syntax, duplicate-key and number errors in text order).
GATE_CODES: Final = (
    LINE_TOO_LARGE,
    LINE_BLANK,
    JSON_INVALID_UTF8,
    JSON_SYNTAX,
    JSON_DUPLICATE_KEY,
    JSON_NON_FINITE,
    JSON_NUMBER_RANGE,
    JSON_INVALID_SURROGATE,
    JSON_NOT_OBJECT,
    JSON_TOO_DEEP,
    JSON_TOO_MANY_ITEMS,
    SCHEMA_UNSUPPORTED_VERSION,
)


class RejectLine(Exception):
    """Raised inside the gate when a line is rejected; carries the one reason."""

    def __init__(self, code: str, detail: str = "", path: str = "") -> None:
        super().__init__(code)
        self.reason = Reason(code, path, detail)
