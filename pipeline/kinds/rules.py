"""Per-record semantic rules: the registry, their context, and how findings become reasons.

A rule belongs to one record kind and lives in that kind's module::

    @record_rule(
        "pairwise-v2",
        "distinct_candidates",
        meaning="the two responses are the same text after NFC, case and whitespace folding",
        spec=Spec.ARCV_SCHEMAS,
    )
    def distinct_candidates(record, ctx):
        '''Seed 000: "Validate candidate distinctness ..."'''
        if same(record["response_a"], record["response_b"]):
            yield Finding("$.response_b", "identical to response_a after normalisation")

Its reason code is ``semantic.<kind>.<name>``, declared in the reason catalogue
(:data:`pipeline.core.reasons.CATALOGUE`) when the rule registers, with its one-line
meaning and the spec it comes from. A finding's severity is the rule's unless
the finding says otherwise: ``reject`` sends the line to ``rejected/``, ``quarantine``
to ``quarantined/`` (a person must look: e.g. a reference table is missing, so the rule
cannot decide — it never silently passes), ``warn`` keeps the row accepted with the
reason attached. Every rule runs on every schema-valid record; all findings are kept.
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Final

import orjson

from pipeline.core.config import CampaignConfig, ReferenceTable, RuleSettings
from pipeline.core.errors import InputError
from pipeline.core.reasons import (
    CATALOGUE,
    Disposition,
    Reason,
    ReasonDisposition,
    Spec,
)
from pipeline.records.lineage import check_pin, file_sha256

if TYPE_CHECKING:
    from pipeline.kinds.autoqa_eval import Contract

__all__ = [
    "RULES",
    "Check",
    "Finding",
    "RecordRule",
    "ReferenceTableError",
    "RuleContext",
    "Severity",
    "Spec",
    "check_record",
    "folded",
    "is_blank",
    "load_rule_context",
    "record_rule",
    "same_text",
]

SEMANTIC_PREFIX: Final = "semantic."


class Severity(StrEnum):
    REJECT = "reject"
    QUARANTINE = "quarantine"
    WARN = "warn"

    @property
    def disposition(self) -> ReasonDisposition:
        """What a finding of this severity does to its row."""
        return _DISPOSITIONS[self]


_DISPOSITIONS: Final = {
    Severity.REJECT: ReasonDisposition.REJECTED,
    Severity.QUARANTINE: ReasonDisposition.QUARANTINED,
    Severity.WARN: ReasonDisposition.INFORMATIONAL,
}


@dataclass(frozen=True, slots=True)
class Finding:
    """One violation found by a rule: a safe path and a detail that never quotes values."""

    path: str = ""
    detail: str = ""
    severity: Severity | None = None


def folded(text: str) -> str:
    """NFC, case-folded, whitespace runs collapsed and trimmed: for 'the same text' tests."""
    return " ".join(unicodedata.normalize("NFC", text).casefold().split())


def same_text(a: str, b: str) -> bool:
    """``folded(a) == folded(b)``, deciding most unequal pairs from a short prefix.

    Folding two 3 KB responses costs ~35 µs per row; folded prefixes that already disagree
    before their last (possibly cut) word prove the texts differ.
    """
    if a == b:
        return True
    # Equal folded texts are equal with all whitespace removed too; compare that on short
    # prefixes (minus their last character, which NFC might merge with the cut-off tail).
    head_a, head_b = _squeezed(a[:96])[:-1], _squeezed(b[:96])[:-1]
    common = min(len(head_a), len(head_b))
    if head_a[:common] != head_b[:common]:
        return False
    return folded(a) == folded(b)


def _squeezed(text: str) -> str:
    return "".join(unicodedata.normalize("NFC", text).casefold().split())


def is_blank(text: str) -> bool:
    """Only whitespace or invisible format characters (NBSP, ideographic space, U+200B...)."""
    return all(ch.isspace() or unicodedata.category(ch) == "Cf" for ch in text)


def unknown(detail: str, path: str = "") -> Finding:
    """The rule cannot decide (missing evidence): the row goes to a person."""
    return Finding(path, f"unknown: {detail}", Severity.QUARANTINE)


Check = Callable[[dict[str, Any], "RuleContext"], Iterable[Finding]]


@dataclass(frozen=True)
class RecordRule:
    kind: str
    name: str
    severity: Severity
    check: Check
    #: the reason code, ``semantic.<kind>.<name>`` (a field: read for every row)
    code: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "code", f"{SEMANTIC_PREFIX}{self.kind}.{self.name}")

    @property
    def doc(self) -> str:
        return (self.check.__doc__ or "").strip()


RULES: dict[str, list[RecordRule]] = {}


def record_rule(
    kind: str,
    name: str,
    severity: Severity = Severity.REJECT,
    *,
    meaning: str,
    spec: Spec,
) -> Callable[[Check], Check]:
    """Register ``check`` as rule ``name`` of ``kind`` and declare its reason code in the
    catalogue (``meaning``: one line; ``spec``: where the rule comes from); its docstring
    must cite the spec sentence it enforces."""

    def register(check: Check) -> Check:
        if not (check.__doc__ or "").strip():
            raise ValueError(
                f"rule {kind}.{name} needs a docstring citing the seed sentence it enforces"
            )
        rules = RULES.setdefault(kind, [])
        if any(r.name == name for r in rules):
            raise ValueError(f"rule {kind}.{name} registered twice")
        rule = RecordRule(kind, name, severity, check)
        CATALOGUE.declare(
            rule.code, severity.disposition, owner=check.__module__, meaning=meaning, spec=spec
        )
        rules.append(rule)
        return check

    return register


class ReferenceTableError(InputError):
    """A reference table that cannot be used (unreadable, or not matching its digest)."""


@dataclass(frozen=True)
class Document:
    sha256: str
    text: str


@dataclass(frozen=True)
class RuleContext:
    """What rules may consult besides the record: reference tables and campaign settings.

    A table that is ``None`` was not configured: rules needing it report ``unknown``.
    """

    documents: dict[str, Document] | None = None
    authorised_documents: frozenset[str] | None = None
    settings: RuleSettings = field(default_factory=RuleSettings)
    disabled: frozenset[str] = field(default_factory=frozenset)
    #: kind -> id of the rubric the campaign scores it with (``[scoring.<kind>]``)
    scored_with: dict[str, str] = field(default_factory=dict)
    #: (contractId, contractVersion) -> the AutoQA evaluation contract (autoqa-eval-1)
    contracts: dict[tuple[str, str], Contract] | None = None
    _active: dict[str, tuple[RecordRule, ...]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def active(self, kind: str) -> tuple[RecordRule, ...]:
        """The rules of ``kind`` this campaign runs (the registry minus ``disabled``)."""
        found = self._active.get(kind)
        if found is None:
            registered = RULES.get(kind, ())
            found = self._active[kind] = tuple(r for r in registered if r.code not in self.disabled)
        return found


def _rows(table: ReferenceTable, config: CampaignConfig, name: str) -> Iterator[dict[str, Any]]:
    """Rows of a JSONL or Parquet reference table, after checking its pinned digest."""
    path = config.resolve_path(table.path)
    if not path.is_file():
        raise ReferenceTableError(f"references.{name}: no such file {path}")
    check_pin(f"references.{name}: {path}", file_sha256(path), table.sha256, ReferenceTableError)
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        yield from pq.read_table(path).to_pylist()
        return
    with open(path, "rb") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = orjson.loads(line)
            except orjson.JSONDecodeError:
                raise ReferenceTableError(
                    f"references.{name}: {path}:{number} is not JSON"
                ) from None
            if not isinstance(row, dict):
                raise ReferenceTableError(f"references.{name}: {path}:{number} is not an object")
            yield row


def load_rule_context(config: CampaignConfig) -> RuleContext:
    """Load and check the reference tables the campaign names (each worker does this once)."""
    refs = config.references
    documents = None
    if refs.documents is not None:
        documents = {}
        for row in _rows(refs.documents, config, "documents"):
            doc_id, digest, text = row.get("id"), row.get("sha256"), row.get("text")
            if not (isinstance(doc_id, str) and isinstance(digest, str) and isinstance(text, str)):
                raise ReferenceTableError(
                    "references.documents: every row needs string id, sha256, text"
                )
            if hashlib.sha256(text.encode("utf-8")).hexdigest() != digest:
                raise ReferenceTableError(
                    f"references.documents: document {doc_id!r} text does not match its sha256"
                )
            if doc_id in documents:
                raise ReferenceTableError(f"references.documents: document {doc_id!r} listed twice")
            documents[doc_id] = Document(digest, text)
    authorised = None
    if refs.authorised_documents is not None:
        ids = []
        for row in _rows(refs.authorised_documents, config, "authorised_documents"):
            if not isinstance(row.get("id"), str):
                raise ReferenceTableError(
                    "references.authorised_documents: every row needs a string id"
                )
            ids.append(row["id"])
        authorised = frozenset(ids)
    contracts = None
    if refs.contracts is not None:
        from pipeline.kinds.autoqa_eval import parse_contracts

        try:
            contracts = parse_contracts(_rows(refs.contracts, config, "contracts"))
        except ReferenceTableError:
            raise
        except ValueError as exc:  # a contract defect (§8.11, §21): the run cannot decide
            raise ReferenceTableError(f"references.contracts: {exc}") from None
    scored_with = {kind: scoring.rubric for kind, scoring in config.scoring.items()}
    return RuleContext(
        documents,
        authorised,
        config.rules,
        frozenset(config.rules.disabled),
        scored_with,
        contracts,
    )


def check_record(
    kind: str, record: dict[str, Any], ctx: RuleContext
) -> tuple[Disposition, list[Reason]]:
    """Run every rule of ``kind``; the worst severity decides the disposition."""
    reasons: list[Reason] = []
    worst = Disposition.ACCEPTED
    for rule in ctx.active(kind):
        for finding in rule.check(record, ctx):
            severity = finding.severity or rule.severity
            reasons.append(Reason(rule.code, finding.path, finding.detail))
            if severity is Severity.REJECT:
                worst = Disposition.REJECTED
            elif severity is Severity.QUARANTINE and worst is Disposition.ACCEPTED:
                worst = Disposition.QUARANTINED
    return worst, reasons
