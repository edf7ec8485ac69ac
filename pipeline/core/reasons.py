"""Dispositions and reason codes: the public vocabulary every output row speaks.

Reason codes are a contract (DESIGN §3.2, §3.6). They are stable strings grouped by
family (the prefix before the first dot); a row's ``_reasons`` column holds every
:class:`Reason` that fired for it.

Every code rowgate can emit is declared once, in :data:`CATALOGUE`, with what it does to
its row, the module that emits it, a one-line meaning and the source specification it
comes from (``rowgate reasons list`` prints it; ``docs/reason-codes.md`` is generated from
it). The codes of the gate, sanitization, the review policy, dedupe, scoring and the
decision policy are declared below; plug-ins declare theirs when they register (a record
rule ``semantic.<kind>.<rule>`` through :func:`pipeline.kinds.rules.record_rule`, a
cross-record rule through :func:`pipeline.decide.stages.cross_rules.cross_rule`). Code that
emits a reason uses a constant returned by :meth:`ReasonCatalogue.declare` or looks the
code up (:meth:`ReasonCatalogue.require`), so a code the catalogue lacks cannot be emitted.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
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


# -- the catalogue ----------------------------------------------------------------------


class ReasonDisposition(StrEnum):
    """What a reason code does to its row: the disposition it sends the row to, or
    ``informational`` (the row keeps the disposition its other reasons give it)."""

    REJECTED = "rejected"
    QUARANTINED = "quarantined"
    DUPLICATE = "duplicate"
    INFORMATIONAL = "informational"

    @classmethod
    def of(cls, disposition: Disposition) -> ReasonDisposition:
        """The effect of a reason that gives its row ``disposition`` (accepted: none)."""
        if disposition is Disposition.ACCEPTED:
            return cls.INFORMATIONAL
        return cls(disposition.value)


class Spec(StrEnum):
    """The sources reason codes come from, named as ``docs/specs.md`` names them."""

    ARCV_SCHEMAS = "the ARCV custom schemas and rubrics spec"
    ARCV_GATEWAY = "the ARCV structural gateway spec"
    ARI_RUBRIC_3 = "the ARI replication rubric schema reference (version 3)"
    ARI_RUBRIC_V2 = "the upstream ARI replication rubric v2 schema"
    AUTOQA = "the AutoQA evaluation contract (0.1.0)"
    PW_DECIDE_ROW = "the pw-decide-row/1 schema"
    #: a decision of rowgate's own, where no source spec asks for the code
    ROWGATE = "rowgate's design"


#: Code families (the prefix before the first dot), in the order a line meets them, with
#: what emits each.
FAMILIES: Final = {
    "line": "the gate: line bounds, before parsing",
    "json": "the gate: the strict JSON parser",
    "schema": "the gate: routing and the pinned schema",
    "semantic": "the record kinds' per-record rules",
    "pii": "sanitization",
    "cross": "cross-record rules and replay (global stage 100)",
    "review": "the rubric's review policy across reviews of one item (global stage 150)",
    "dedupe": "deduplication (global stage 200)",
    "rubric": "rubric scoring (global stage 300)",
    "policy": "the decision policy (global stage 400)",
}

# A code: its family, then dot-separated names; ``<name>`` stands for any one name.
_CODE: Final = re.compile(r"^[a-z]+(?:\.(?:[A-Za-z0-9_-]+|<[a-z_]+>))+$")
_PLACEHOLDER: Final = re.compile(r"<[a-z_]+>")
#: what a placeholder of a code pattern may stand for (a JSON Schema keyword, a name)
_NAME: Final = "[A-Za-z][A-Za-z0-9_-]*"


class ReasonCodeError(ValueError):
    """A reason code that is not catalogued, declared twice, or not well-formed."""


@dataclass(frozen=True, slots=True)
class ReasonCode:
    """One catalogue entry.

    ``code`` is a code, or a pattern whose ``<name>`` parts each stand for one name
    (``schema.<keyword>``). ``owner`` is the module that emits it; ``meaning`` one line.
    A record rule's disposition is its usual one: a rule that cannot decide (a reference
    table is missing) quarantines instead, and says so in the row's detail.
    """

    code: str
    disposition: ReasonDisposition
    owner: str
    meaning: str
    spec: Spec

    @property
    def family(self) -> str:
        return self.code.split(".", 1)[0]

    @property
    def is_pattern(self) -> bool:
        return "<" in self.code

    def as_dict(self) -> dict[str, str]:
        return {
            "code": self.code,
            "disposition": self.disposition.value,
            "owner": self.owner,
            "meaning": self.meaning,
            "spec": self.spec.value,
        }


class ReasonCatalogue:
    """Every reason code rowgate can emit, each declared once (:data:`CATALOGUE`)."""

    def __init__(self) -> None:
        self._entries: dict[str, ReasonCode] = {}
        self._patterns: list[tuple[re.Pattern[str], ReasonCode]] = []

    def declare(
        self,
        code: str,
        disposition: ReasonDisposition,
        *,
        owner: str,
        meaning: str,
        spec: Spec,
    ) -> str:
        """Add ``code`` and return it (the constant emitting code uses); refuse a code
        declared before, one outside :data:`FAMILIES`, or a meaning that is not one line."""
        if not _CODE.match(code) or code.split(".", 1)[0] not in FAMILIES:
            raise ReasonCodeError(
                f"{code!r} is no reason code: family.name, the family one of " + ", ".join(FAMILIES)
            )
        if code in self._entries:
            raise ReasonCodeError(
                f"reason code {code!r} declared twice ({self._entries[code].owner}, {owner})"
            )
        if not meaning.strip() or "\n" in meaning:
            raise ReasonCodeError(f"reason code {code!r} needs a one-line meaning")
        entry = ReasonCode(code, ReasonDisposition(disposition), owner, meaning, spec)
        self._entries[code] = entry
        if entry.is_pattern:
            parts = _PLACEHOLDER.split(code)
            regex = _NAME.join(re.escape(part) for part in parts)
            self._patterns.append((re.compile(f"^{regex}$"), entry))
        return code

    def entry(self, code: str) -> ReasonCode:
        """The entry declaring ``code`` (itself, or the pattern it is an instance of)."""
        found = self._entries.get(code)
        if found is not None:
            return found
        for pattern, entry in self._patterns:
            if pattern.match(code):
                return entry
        raise ReasonCodeError(
            f"reason code {code!r} is not in the catalogue (pipeline/core/reasons.py)"
        )

    def require(self, code: str) -> str:
        """``code`` itself, if the catalogue declares it; else :class:`ReasonCodeError`."""
        self.entry(code)
        return code

    def __contains__(self, code: object) -> bool:
        if not isinstance(code, str):
            return False
        try:
            self.entry(code)
        except ReasonCodeError:
            return False
        return True

    def __iter__(self) -> Iterator[ReasonCode]:
        """Every entry, sorted by code."""
        return iter(sorted(self._entries.values(), key=lambda e: e.code))

    def __len__(self) -> int:
        return len(self._entries)


#: The one catalogue. ``rowgate reasons list`` shows it with every plug-in registered.
CATALOGUE: Final = ReasonCatalogue()
declare: Final = CATALOGUE.declare
#: the codes declared as themselves (not through a pattern), for :class:`RejectLine`
_DECLARED: Final = CATALOGUE._entries

_REJECTED: Final = ReasonDisposition.REJECTED
_QUARANTINED: Final = ReasonDisposition.QUARANTINED
_DUPLICATE: Final = ReasonDisposition.DUPLICATE
_INFORMATIONAL: Final = ReasonDisposition.INFORMATIONAL

# -- the gate: line bounds, strict JSON (DESIGN §3.2), routing and schemas ---------------

_GATE: Final = "pipeline.gate.gate"
_PARSER: Final = "pipeline.records.strict_json"

LINE_TOO_LARGE: Final = declare(
    "line.too_large",
    _REJECTED,
    owner=_GATE,
    meaning="the line exceeds limits.max_line_bytes; it is hashed while streamed, never "
    "held (_raw is null)",
    spec=Spec.ARCV_GATEWAY,
)
LINE_BLANK: Final = declare(
    "line.blank",
    _REJECTED,
    owner=_PARSER,
    meaning="an empty or whitespace-only line (rejected, never skipped)",
    spec=Spec.ARCV_SCHEMAS,
)
JSON_INVALID_UTF8: Final = declare(
    "json.invalid_utf8",
    _REJECTED,
    owner=_PARSER,
    meaning="invalid UTF-8: bad sequences, overlong forms, encoded surrogates, UTF-16 files",
    spec=Spec.ARCV_GATEWAY,
)
JSON_SYNTAX: Final = declare(
    "json.syntax",
    _REJECTED,
    owner=_PARSER,
    meaning="not exactly one JSON value: a BOM, trailing data, trailing commas, comments, "
    "raw control characters",
    spec=Spec.ARCV_SCHEMAS,
)
JSON_DUPLICATE_KEY: Final = declare(
    "json.duplicate_key",
    _REJECTED,
    owner=_PARSER,
    meaning="an object repeats a key, at any depth; path is the repeated key's (the first "
    "the parser meets: inner objects close first)",
    spec=Spec.ARCV_SCHEMAS,
)
JSON_NON_FINITE: Final = declare(
    "json.non_finite",
    _REJECTED,
    owner=_PARSER,
    meaning="NaN, Infinity, or a number that overflows a double (1e400); path is the number's",
    spec=Spec.ARCV_SCHEMAS,
)
JSON_NUMBER_RANGE: Final = declare(
    "json.number_range",
    _REJECTED,
    owner=_PARSER,
    meaning="an integer outside int64, a non-zero literal that underflows to 0, or an "
    "integer beyond 2**53 in a number field",
    spec=Spec.ARCV_GATEWAY,
)
JSON_INVALID_SURROGATE: Final = declare(
    "json.invalid_surrogate",
    _REJECTED,
    owner=_PARSER,
    meaning="a lone or unpaired \\uD800-style surrogate escape",
    spec=Spec.ARCV_GATEWAY,
)
JSON_NOT_OBJECT: Final = declare(
    "json.not_object",
    _REJECTED,
    owner=_PARSER,
    meaning="the top-level value is not an object",
    spec=Spec.ARCV_SCHEMAS,
)
JSON_TOO_DEEP: Final = declare(
    "json.too_deep",
    _REJECTED,
    owner=_PARSER,
    meaning=(
        "nesting deeper than limits.max_depth; a line whose brackets nest deeper than 512 "
        "levels gets it before it is parsed, syntax errors included (the parser's bound)"
    ),
    spec=Spec.ARCV_GATEWAY,
)
JSON_TOO_MANY_ITEMS: Final = declare(
    "json.too_many_items",
    _REJECTED,
    owner=_PARSER,
    meaning="a container larger than limits.max_items",
    spec=Spec.ARCV_GATEWAY,
)
SCHEMA_UNSUPPORTED_VERSION: Final = declare(
    "schema.unsupported_version",
    _REJECTED,
    owner="pipeline.kinds.base",
    meaning="an unknown version value, a version other than the declared kind's, or no "
    "version and no declared kind",
    spec=Spec.ARCV_SCHEMAS,
)
SCHEMA_PREFIX: Final = "schema."
#: Validation failures: the keyword spelled as in JSON Schema (``schema.required``).
SCHEMA_KEYWORD: Final = declare(
    "schema.<keyword>",
    _REJECTED,
    owner="pipeline.records.schemas",
    meaning="a schema violation, named by its keyword (schema.required, schema.maximum, "
    "...); path and keyword only, for required the missing names",
    spec=Spec.ARCV_SCHEMAS,
)


@lru_cache(maxsize=256)
def schema_code(keyword: str) -> str:
    """``schema.<keyword>`` for a failing JSON Schema keyword, checked against the catalogue."""
    return CATALOGUE.require(SCHEMA_PREFIX + keyword)


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

# -- sanitization (pipeline/sanitize). Paths are safe field paths; details hold category
#    names and counts only, never a matched value. ----------------------------------------

_SANITIZE: Final = "pipeline.sanitize.records"

PII_REDACTED: Final = declare(
    "pii.redacted",
    _INFORMATIONAL,
    owner=_SANITIZE,
    meaning="PII or credentials in a field were replaced by tags: categories and counts per "
    "field path (accepted rows too)",
    spec=Spec.ARCV_GATEWAY,
)
PII_UNCERTAIN: Final = declare(
    "pii.uncertain",
    _QUARANTINED,
    owner=_SANITIZE,
    meaning='PII-shaped text in a PII context ("SSN:", "phone") that fails validation: '
    "redacted, and a person looks",
    spec=Spec.ARCV_GATEWAY,
)
PII_CODE_BROKEN: Final = declare(
    "pii.code_broken",
    _QUARANTINED,
    owner=_SANITIZE,
    meaning="code that parsed before redaction no longer does",
    spec=Spec.ARCV_GATEWAY,
)
PII_EVIDENCE_CHANGED: Final = declare(
    "pii.evidence_changed",
    _QUARANTINED,
    owner=_SANITIZE,
    meaning="redaction changed a verbatim quote (an evidence field)",
    spec=Spec.ARCV_GATEWAY,
)
PII_SCHEMA_INVALID: Final = declare(
    "pii.schema_invalid",
    _QUARANTINED,
    owner=_SANITIZE,
    meaning="the redacted record fails its schema",
    spec=Spec.ARCV_GATEWAY,
)
PII_KEY_COLLISION: Final = declare(
    "pii.key_collision",
    _QUARANTINED,
    owner=_SANITIZE,
    meaning="two redacted member names collide",
    spec=Spec.ARCV_GATEWAY,
)
PII_UNSTABLE: Final = declare(
    "pii.unstable",
    _QUARANTINED,
    owner=_SANITIZE,
    meaning="redaction did not reach a fixpoint",
    spec=Spec.ARCV_GATEWAY,
)
PII_RAW_WITHHELD: Final = declare(
    "pii.raw_withheld",
    _INFORMATIONAL,
    owner="pipeline.sanitize.raw",
    meaning="a rejected line's _raw is null because its bytes hold PII (policy rejected_raw)",
    spec=Spec.ARCV_GATEWAY,
)
PII_RULES_BROKEN: Final = declare(
    "pii.rules_broken",
    _QUARANTINED,
    owner=_GATE,
    meaning="a semantic rule fails only after redaction",
    spec=Spec.ARCV_GATEWAY,
)
PII_UNREDACTABLE: Final = declare(
    "pii.unredactable",
    _REJECTED,
    owner=_SANITIZE,
    meaning="a number under a secret-named member where the schema allows no redaction tag: "
    "the record cannot be stored without the secret (_raw withheld)",
    spec=Spec.ARCV_GATEWAY,
)
#: Codes that send a record to quarantine (a person looks at it).
PII_QUARANTINE_CODES: Final = frozenset(
    e.code for e in CATALOGUE if e.family == "pii" and e.disposition is _QUARANTINED
)

# -- the rubric's review policy across records (global stage 150). The item's reviews that
#    are not enough, not accepting enough or not agreeing get review.<disagreement_action>;
#    when they agree, the first accepting review is kept and the others are its duplicates.

_REVIEW: Final = "pipeline.decide.stages.review"

REVIEW_PREFIX: Final = "review."
REVIEW_AGREEING: Final = declare(
    "review.agreeing",
    _DUPLICATE,
    owner=_REVIEW,
    meaning="another accept vote of an item whose reviews agree: a duplicate of the first",
    spec=Spec.ARCV_SCHEMAS,
)
REVIEW_OUTVOTED: Final = declare(
    "review.outvoted",
    _DUPLICATE,
    owner=_REVIEW,
    meaning="a review that did not vote accept, of an item whose accept votes carry it",
    spec=Spec.ARCV_SCHEMAS,
)
_DISAGREEMENT: Final = (
    "too few reviews, too few accept votes or accept votes that disagree, and the rubric's "
    "disagreement_action is"
)
#: ``disagreement_action`` -> (reason code, disposition)
REVIEW_ACTIONS: Final = {
    action: (code, CATALOGUE.entry(code).disposition.value)
    for action, code in {
        "adjudicate": declare(
            "review.adjudicate",
            _QUARANTINED,
            owner=_REVIEW,
            meaning=f"{_DISAGREEMENT} adjudicate: a person decides",
            spec=Spec.ARCV_SCHEMAS,
        ),
        "escalate": declare(
            "review.escalate",
            _QUARANTINED,
            owner=_REVIEW,
            meaning=f"{_DISAGREEMENT} escalate: a person decides",
            spec=Spec.ARCV_SCHEMAS,
        ),
        "reject": declare(
            "review.reject",
            _REJECTED,
            owner=_REVIEW,
            meaning=f"{_DISAGREEMENT} reject",
            spec=Spec.ARCV_SCHEMAS,
        ),
    }.items()
}

# -- deduplication (global stage 200, and ``rowgate dedupe``): ``dedupe.<rule>`` ----------

_DEDUPE: Final = "pipeline.dedupe.table"

#: removal rule -> reason code
DEDUPE_CODES: Final = {
    "exact": declare(
        "dedupe.exact",
        _DUPLICATE,
        owner=_DEDUPE,
        meaning="the same _content_sha256 (the kind's content fingerprint) as a kept row",
        spec=Spec.ARCV_GATEWAY,
    ),
    "normalised": declare(
        "dedupe.normalised",
        _DUPLICATE,
        owner=_DEDUPE,
        meaning="the same kind key as a kept row after NFC, whitespace and case folding",
        spec=Spec.ARCV_GATEWAY,
    ),
    "near": declare(
        "dedupe.near",
        _DUPLICATE,
        owner=_DEDUPE,
        meaning="word 5-gram Jaccard similarity to a kept row at or above dedupe.threshold "
        "(MinHash LSH candidates, verified exactly)",
        spec=Spec.ARCV_GATEWAY,
    ),
    "contamination": declare(
        "dedupe.contamination",
        _DUPLICATE,
        owner=_DEDUPE,
        meaning="a row of an unprotected split matching a kept row of a protected split",
        spec=Spec.ROWGATE,
    ),
}
DEDUPE_SPLIT_GROUP: Final = declare(
    "dedupe.split_group",
    _INFORMATIONAL,
    owner=_DEDUPE,
    meaning="the row's task or meta group has rows in more than one split",
    spec=Spec.PW_DECIDE_ROW,
)

# -- rubric scoring (global stage 300): never changes a disposition, the policy decides --

_SCORING: Final = "pipeline.rubrics.scoring"

RUBRIC_GATE_NOT_MET: Final = declare(
    "rubric.gate_not_met",
    _INFORMATIONAL,
    owner=_SCORING,
    meaning="a hard gate's evidence fails the rubric's value",
    spec=Spec.ARCV_SCHEMAS,
)
RUBRIC_GATE_UNKNOWN: Final = declare(
    "rubric.gate_unknown",
    _INFORMATIONAL,
    owner=_SCORING,
    meaning="a hard gate has no evidence: unknown, never passed",
    spec=Spec.AUTOQA,
)
RUBRIC_BELOW_MINIMUM: Final = declare(
    "rubric.below_minimum",
    _INFORMATIONAL,
    owner=_SCORING,
    meaning="a criterion scored below its own minimum",
    spec=Spec.ARCV_SCHEMAS,
)
RUBRIC_CRITERION_UNKNOWN: Final = declare(
    "rubric.criterion_unknown",
    _INFORMATIONAL,
    owner=_SCORING,
    meaning="a criterion has no score, or its applicability is unknown",
    spec=Spec.AUTOQA,
)
RUBRIC_OUT_OF_SCALE: Final = declare(
    "rubric.score_out_of_scale",
    _INFORMATIONAL,
    owner=_SCORING,
    meaning="a criterion's score is outside the rubric's scale",
    spec=Spec.ARCV_SCHEMAS,
)
RUBRIC_BELOW_ACCEPTANCE: Final = declare(
    "rubric.below_acceptance",
    _INFORMATIONAL,
    owner=_SCORING,
    meaning="the weighted score is below the rubric's acceptance score",
    spec=Spec.ARCV_SCHEMAS,
)

# -- the decision policy (global stage 400): ``policy.<action>``, none for a plain accept -

_POLICY: Final = "pipeline.decide.stages.decision"

#: decision (a policy action) -> reason code
POLICY_CODES: Final = {
    "accept_with_note": declare(
        "policy.accept_with_note",
        _INFORMATIONAL,
        owner=_POLICY,
        meaning="the decision policy accepts the row with a note; the detail names the rule",
        spec=Spec.AUTOQA,
    ),
    "escalate": declare(
        "policy.escalate",
        _QUARANTINED,
        owner=_POLICY,
        meaning="the decision policy escalates the row to a person (also its default when no "
        "terminal rule matched)",
        spec=Spec.AUTOQA,
    ),
    "rework": declare(
        "policy.rework",
        _REJECTED,
        owner=_POLICY,
        meaning="the decision policy sends the row back for rework; the detail names the rule",
        spec=Spec.AUTOQA,
    ),
    "reject": declare(
        "policy.reject",
        _REJECTED,
        owner=_POLICY,
        meaning="the decision policy rejects the row; the detail names the rule",
        spec=Spec.AUTOQA,
    ),
}
#: beside ``policy.<action>`` when the contract's calibration replaced the deciding rule's
#: action (the AutoQA evaluation contract's autonomy invariant)
POLICY_CALIBRATION_UNAVAILABLE: Final = declare(
    "policy.calibration_unavailable",
    _INFORMATIONAL,
    owner=_POLICY,
    meaning="the deciding rule's action needs a calibration the contract does not declare; "
    "its uncalibrated action was taken (the detail names the rule)",
    spec=Spec.AUTOQA,
)


class RejectLine(Exception):
    """Raised inside the gate when a line is rejected; carries the one reason."""

    def __init__(self, code: str, detail: str = "", path: str = "") -> None:
        super().__init__(code)
        # a plain dict lookup first: lines are rejected on the gate's hot path
        self.reason = Reason(code if code in _DECLARED else CATALOGUE.require(code), path, detail)
