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

**Batch forms.** A rule may also declare a *fast pass* over a whole batch::

    @record_rule("pairwise-v2", "neither_needs_patch", ..., batch=patch_present)

``batch(columns, ctx)`` receives the kind's stored Arrow columns for every schema-valid
row of a gate batch and answers, per row, "this row certainly has no finding from this
rule" (``True``). ``False`` or null means "maybe": the row goes through the Python rule,
which stays the only place findings and their details are made. So a batch form never
changes a reason, its order or its detail; it only has to be *sound*: never clear a row
the Python rule would flag. It may be as incomplete as it likes. Equivalence with Python's
``unicodedata``/``casefold``/``str.split``/``re`` is not reimplemented: a batch form
clears only rows where the answer is proved from facts that hold for every Unicode
version (an ASCII character is a normalisation boundary and folds to its lowercase; see
:func:`folded_heads_differ`), and sends every other row to the reference. :func:`pending_rules`
runs the forms; :func:`unsound_clearances` checks a form against its rule (tests).
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

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
from pipeline.storage import parquet_batches

if TYPE_CHECKING:
    from pipeline.kinds.autoqa_eval import Contract

__all__ = [
    "RULES",
    "BatchCheck",
    "Check",
    "Finding",
    "RecordRule",
    "ReferenceTableError",
    "RuleContext",
    "Severity",
    "Spec",
    "check_record",
    "folded",
    "folded_heads_differ",
    "is_blank",
    "load_rule_context",
    "narrowed",
    "pending_rules",
    "record_rule",
    "same_text",
    "text_heads",
    "unsound_clearances",
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
#: A rule's batch form: the kind's stored columns -> per row, True where the row
#: certainly has no finding (False or null: ask the rule). See the module docstring.
BatchCheck = Callable[[pa.RecordBatch, "RuleContext"], "pa.Array | pa.ChunkedArray | np.ndarray"]


@dataclass(frozen=True)
class RecordRule:
    kind: str
    name: str
    severity: Severity
    check: Check
    #: the fast pass over a batch, if the rule has one (module docstring)
    batch: BatchCheck | None = None
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
    batch: BatchCheck | None = None,
) -> Callable[[Check], Check]:
    """Register ``check`` as rule ``name`` of ``kind`` and declare its reason code in the
    catalogue (``meaning``: one line; ``spec``: where the rule comes from); its docstring
    must cite the spec sentence it enforces. ``batch``: its sound fast pass over a batch
    (module docstring)."""

    def register(check: Check) -> Check:
        if not (check.__doc__ or "").strip():
            raise ValueError(
                f"rule {kind}.{name} needs a docstring citing the seed sentence it enforces"
            )
        rules = RULES.setdefault(kind, [])
        if any(r.name == name for r in rules):
            raise ValueError(f"rule {kind}.{name} registered twice")
        rule = RecordRule(kind, name, severity, check, batch)
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
    if path.suffix == ".parquet":  # a row group at a time, as the JSONL a line at a time
        for batch in parquet_batches(path):
            yield from batch.to_pylist()
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
    kind: str,
    record: dict[str, Any],
    ctx: RuleContext,
    rules: tuple[RecordRule, ...] | None = None,
) -> tuple[Disposition, list[Reason]]:
    """Run every rule of ``kind`` (or only ``rules``, the ones the batch forms left to
    decide, in registry order); the worst severity decides the disposition."""
    reasons: list[Reason] = []
    worst = Disposition.ACCEPTED
    for rule in ctx.active(kind) if rules is None else rules:
        for finding in rule.check(record, ctx):
            severity = finding.severity or rule.severity
            reasons.append(Reason(rule.code, finding.path, finding.detail))
            if severity is Severity.REJECT:
                worst = Disposition.REJECTED
            elif severity is Severity.QUARANTINE and worst is Disposition.ACCEPTED:
                worst = Disposition.QUARANTINED
    return worst, reasons


# -- batch forms (module docstring) ------------------------------------------------------

#: a kind with more active rules than bits here runs them all in Python (none has as many)
_MAX_BATCH_RULES: Final = 62


def _cleared(rule: RecordRule, columns: pa.RecordBatch, ctx: RuleContext) -> np.ndarray:
    """``rule``'s batch form as a numpy bool array: nulls (unknown) are not cleared."""
    assert rule.batch is not None
    answer = rule.batch(columns, ctx)
    if not isinstance(answer, np.ndarray):
        answer = pc.fill_null(answer, False).to_numpy(zero_copy_only=False)
    if answer.shape != (columns.num_rows,) or answer.dtype != np.bool_:
        raise TypeError(f"batch form of {rule.code} must give one bool per row")
    return answer


def pending_rules(
    kind: str, columns: pa.RecordBatch, ctx: RuleContext
) -> list[tuple[RecordRule, ...]] | None:
    """Per row of ``columns`` (the kind's stored columns), the active rules its batch forms
    did not clear, in registry order: what :func:`check_record` still has to run. ``None``
    when the kind has no batch form (every rule runs for every row)."""
    active = ctx.active(kind)
    if not any(rule.batch for rule in active) or len(active) > _MAX_BATCH_RULES:
        return None
    # one bit per rule still to run; rows sharing a pattern share one tuple
    pattern = np.zeros(columns.num_rows, np.int64)
    for bit, rule in enumerate(active):
        if rule.batch is None:
            pattern |= 1 << bit
        else:
            pattern |= (~_cleared(rule, columns, ctx)).astype(np.int64) << bit
    tuples = {
        int(p): tuple(rule for bit, rule in enumerate(active) if p >> bit & 1)
        for p in np.unique(pattern)
    }
    return [tuples[p] for p in pattern.tolist()]


def unsound_clearances(
    kind: str, columns: pa.RecordBatch, records: list[dict[str, Any]], ctx: RuleContext
) -> list[tuple[int, str]]:
    """(row, rule code) of every row a batch form cleared though its Python rule has a
    finding for it: a batch form must never appear here (tests check every form)."""
    return [
        (row, rule.code)
        for rule in ctx.active(kind)
        if rule.batch is not None
        for row in np.flatnonzero(_cleared(rule, columns, ctx)).tolist()
        if any(True for _ in rule.check(records[row], ctx))
    ]


#: the ASCII characters ``str.isspace`` (so ``str.split`` and ``re``'s ``\s``) accepts
ASCII_SPACE: Final = b"\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f "
#: byte -> its ASCII lowercase, 0 for a byte ``str.split`` drops (and for NUL, which ends
#: a proven head as a non-ASCII byte does)
_FOLD: Final = np.arange(256, dtype=np.uint8) + np.uint8(32) * (
    (np.arange(256) >= 65) & (np.arange(256) <= 90)
).astype(np.uint8)
_FOLD[np.frombuffer(ASCII_SPACE, np.uint8)] = 0


def text_heads(texts: pa.Array, width: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``width`` UTF-8 bytes of each text as the rows of a zero-padded uint8
    matrix, and each text's length in bytes (-1 for a null)."""
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    if texts.type == pa.string():
        offset_type: type[np.integer[Any]] = np.int32
    elif texts.type == pa.large_string():
        offset_type = np.int64
    else:
        raise TypeError(f"text_heads reads string columns, not {texts.type}")
    _, offsets_buffer, data_buffer = texts.buffers()
    n = len(texts)
    offsets = np.frombuffer(offsets_buffer, offset_type)[texts.offset : texts.offset + n + 1]
    lengths = np.diff(offsets).astype(np.int64)
    if data_buffer is None or not data_buffer.size:
        heads = np.zeros((n, width), np.uint8)
    else:
        data = np.frombuffer(data_buffer, np.uint8)
        heads = np.take(data, offsets[:-1, None] + np.arange(width), mode="clip")
        heads *= np.arange(width) < lengths[:, None]
    if texts.null_count:
        lengths[~texts.is_valid().to_numpy(zero_copy_only=False)] = -1
    return heads, lengths


def _squeezed_heads(texts: pa.Array, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A proven prefix of each text's ``"".join(folded(text).split())`` (left-aligned in a
    uint8 matrix, zero-padded), its length, and whether it is the whole squeezed text; see
    :func:`folded_heads_differ` for the proof."""
    heads, lengths = text_heads(texts, width)
    n = len(lengths)
    # the head ends at the first non-ASCII byte or NUL (the padding is NUL); the
    # character before it is dropped too (NFC may compose it with a non-ASCII one), and
    # the last of a cut head (the next character may be a combining mark)
    stop = (heads == 0) | (heads >= 0x80)
    first = np.where(stop.any(axis=1), stop.argmax(axis=1), width)
    whole = (first == lengths) & (lengths < width)
    proven = np.where(whole, lengths, np.maximum(first - 1, 0))
    folded = np.take(_FOLD, heads)
    keep = (np.arange(width) < proven[:, None]) & (folded != 0)
    # each kept byte moves to its rank among its row's kept bytes; the others to a spare
    # last column, dropped
    rank = np.cumsum(keep, axis=1, dtype=np.intp)
    target = np.where(keep, rank - 1, width) + (np.arange(n, dtype=np.intp) * (width + 1))[:, None]
    squeezed = np.zeros((n, width + 1), np.uint8)
    np.put(squeezed, target, folded)
    return squeezed[:, :width], rank[:, -1], whole


def folded_heads_differ(
    a: pa.Array, b: pa.Array, widths: tuple[int, ...] = (8, 64, 256)
) -> np.ndarray:
    """Where two text columns are provably different after NFC, casefold and whitespace
    folding (``not same_text(a, b)``), reading only each text's first bytes (``widths``:
    every row, then the rows still undecided) and no Unicode table; ``False`` where it is
    not proved. Most pairs of different texts differ in their first few characters: 8
    bytes of every row, then 64 and 256 of the rest, took 1.0 µs a row where 32 and 256
    took 2.1 (pairwise responses, 7,938 rows).

    Proof: an ASCII character is a normalisation boundary (a starter that composes with
    no character before it), so ``NFC(p + r) == p + NFC(r)`` when ``p`` is ASCII and
    ``r`` is empty or starts with an ASCII character; ``casefold`` maps each character
    alone, an ASCII one to its lowercase; ``str.split`` drops exactly the characters
    ``str.isspace`` accepts (:data:`ASCII_SPACE` among ASCII ones). So the ASCII head of
    a text up to a character followed by ASCII, lowercased and without
    :data:`ASCII_SPACE`, starts ``"".join(folded(text).split())``, which equal folded
    texts share. Heads that disagree within their common length, or a whole text's head
    shorter than the other's, prove the folded texts differ.
    """
    return narrowed(_heads_differ, (a, b), widths)


def _heads_differ(a: pa.Array, b: pa.Array, width: int) -> np.ndarray:
    sa, na, whole_a = _squeezed_heads(a, width)
    sb, nb, whole_b = _squeezed_heads(b, width)
    common = np.minimum(na, nb)
    disagree: np.ndarray = ((sa != sb) & (np.arange(width) < common[:, None])).any(axis=1)
    return disagree | (whole_a & (nb > na)) | (whole_b & (na > nb))


def narrowed(
    clears: Callable[..., np.ndarray],
    columns: tuple[pa.Array | pa.RecordBatch, ...],
    widths: Sequence[object],
) -> np.ndarray:
    """``clears(*columns, width)`` for every row at the first width, then again at each
    next width for the rows still not cleared: a cheap look at every row, a longer one at
    the few that need it. A "width" is whatever makes a look longer: bytes of a head, or
    a measure (bytes before characters)."""
    cleared = np.zeros(len(columns[0]), np.bool_)
    undecided = None
    for width in widths:
        if undecided is not None:
            if not len(undecided):
                break
            picked = pa.array(undecided)
            cleared[undecided] = clears(*(c.take(picked) for c in columns), width)
        else:
            cleared = clears(*columns, width)
        undecided = np.flatnonzero(~cleared)
    return cleared
