"""The gate: one line of bytes → a disposition, reasons, lineage hashes and a typed row.

Order of checks (the first failure decides a rejected line's reason):
line bound → blank → strict UTF-8 / JSON (DESIGN §3.2) → object → depth and item
limits → routing (§3.1) → pinned schema → exact Arrow storability → the kind's semantic
rules → (optional) sanitization → hashes. Sanitization (:mod:`pipeline.sanitize`, off by
default) may quarantine a record and replaces its PII; the kind's rules then run again on
the redacted record, and the hashes commit to what is stored. For a rejected line it may
withhold the raw bytes.

Two implementations share every building block:

* :meth:`Gate.gate_line` is the per-line reference path, written for clarity.
* :meth:`Gate.gate_batch` is the hot path used by runs. It differs only where profiling
  showed a cost that can be skipped *provably*: orjson parses a line when it provably
  reads what the strict parser reads (:func:`~pipeline.records.strict_json.parse_fast`); when a
  kind's schema bounds depth and fan-out within the limits, the limits walk runs only
  for lines that fail later (a failing line re-runs the reference order, so reasons are
  identical); and canonical JSON goes through orjson when the parser saw no float and
  the schema admits no key where orjson's and JCS's key orders differ. Tests prove both
  paths give identical dispositions, reasons and hashes on a corpus holding every defect
  class in two layouts, and on a seeded fuzz of mutated records.

The gate is a pure function of (line bytes, declared kind, config): no global state.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import fastjsonschema
import numpy as np
import orjson
import pyarrow as pa

from pipeline.core.config import CampaignConfig
from pipeline.core.reasons import (
    JSON_NUMBER_RANGE,
    LINE_TOO_LARGE,
    PII_RULES_BROKEN,
    REASONS_TYPE,
    Disposition,
    Reason,
    RejectLine,
)
from pipeline.gate.arrow_mapping import MappingError, RecordLayout, derive_layout
from pipeline.gate.reader import LineBatch
from pipeline.kinds import RecordKind, route
from pipeline.kinds.rules import RecordRule, check_record, load_rule_context, pending_rules
from pipeline.records.canonical import canonical_json, canonical_json_fast
from pipeline.records.lineage import LineageDigest
from pipeline.records.schemas import (
    SchemaEntry,
    SchemaRegistry,
    integers_bounded,
    number_paths,
    safe_path,
    static_bounds,
)
from pipeline.records.strict_json import (
    LONG_DIGITS,
    LocatedReject,
    StrictParser,
    check_limits,
    has_float,
    parse_fast,
    require_object,
)

if TYPE_CHECKING:
    from pipeline.sanitize import Sanitizer

__all__ = [
    "GATE_FIELDS",
    "REJECTED_FIELDS",
    "SUBMISSION_SCHEMA",
    "Gate",
    "GateOutcome",
    "GatedBatch",
]

#: Lineage columns a kind's staged rows carry after the payload (``_source``, ``_line``
#: and ``_kind`` are added by the writer: they are constant per shard or per file).
GATE_FIELDS: Final = (
    pa.field("_shard_line", pa.int64(), nullable=False),
    pa.field("_offset", pa.int64(), nullable=False),
    pa.field("_raw_sha256", pa.string(), nullable=False),
    pa.field("_record_sha256", pa.string()),
    pa.field("_content_sha256", pa.string()),
    pa.field("_content_profile", pa.string()),
    pa.field("_schema_sha256", pa.string()),
    pa.field("_reasons", REASONS_TYPE, nullable=False),
    pa.field("_disposition", pa.string(), nullable=False),
)
#: Columns of a rejected line (no typed payload: it may not even be JSON).
REJECTED_FIELDS: Final = (
    pa.field("_shard_line", pa.int64(), nullable=False),
    pa.field("_offset", pa.int64(), nullable=False),
    pa.field("_raw_sha256", pa.string(), nullable=False),
    pa.field("_record_sha256", pa.string()),
    pa.field("_content_sha256", pa.string()),
    pa.field("_content_profile", pa.string()),
    pa.field("_kind", pa.string()),
    pa.field("_schema_sha256", pa.string()),
    pa.field("_reasons", REASONS_TYPE, nullable=False),
    pa.field("_raw", pa.binary()),
)
REJECTED_SCHEMA: Final = pa.schema(REJECTED_FIELDS)
#: With sanitization on, what the replay rule compares for each staged row: its
#: submission key and its body as sent, before redaction (:meth:`Gate._submission`).
SUBMISSION_SCHEMA: Final = pa.schema(
    [
        pa.field("_shard_line", pa.int64(), nullable=False),
        pa.field("_submission_key", pa.binary(32), nullable=False),
        pa.field("_submission_body", pa.binary(32), nullable=False),
    ]
)
#: the detail of a line holding an integral float beyond int64 in an integer field
_WIDE_INTEGER: Final = (
    "an integral number outside int64 in an integer field (such as 1e19) cannot be stored exactly"
)


#: a valid record's disposition, reasons, the record as stored, its record and content
#: digests and content profile (:meth:`Gate._verdict`)
_Verdict = tuple[Disposition, tuple[Reason, ...], dict[str, Any], str, str, str]


@dataclass(slots=True)
class GateOutcome:
    """What the gate decided for one line (the reference path's result). Built for every
    line, so not frozen: a frozen dataclass's ``__init__`` sets each of the ten fields
    through ``object.__setattr__``, ~4× the cost (measured 3.6 against 0.75 µs a line);
    nothing changes an outcome after it is built (``dataclasses.replace`` copies)."""

    disposition: Disposition
    reasons: tuple[Reason, ...]
    raw_sha256: str
    kind: str | None = None
    schema_sha256: str | None = None
    record: dict[str, Any] | None = None
    record_sha256: str | None = None
    content_sha256: str | None = None
    #: the content-hash profile that produced ``content_sha256`` (its domain's name)
    content_profile: str | None = None
    #: the line's raw bytes must not be stored (sanitization found PII in them)
    raw_withheld: bool = False


class KindGate:
    """Per-process state for one record kind: compiled schema, layout, static facts."""

    def __init__(self, kind: RecordKind, entry: SchemaEntry, config: CampaignConfig) -> None:
        self.kind = kind
        self.entry = entry
        self.layout: RecordLayout = derive_layout(entry.schema, kind.apart)
        depth, items = static_bounds(entry.schema)
        limits = config.limits
        #: every schema-valid record is within the depth and item limits
        self.bounds_implied = depth <= limits.max_depth and items <= limits.max_items
        schema_text = json.dumps(entry.schema, ensure_ascii=False)
        #: schema-valid records only have declared keys, all below U+E000
        self.keys_safe = depth < float("inf") and all(ch < "\ue000" for ch in schema_text)
        #: every integer a valid record holds is within int64 (the fast parser's premise)
        self.integers_bounded = integers_bounded(entry.schema)
        #: a valid record may hold an integral float beyond int64 where the layout holds
        #: int64 (the schema bounds no such position): looked for where it holds a float
        self.wide_integers = self.layout.root.integers and not self.integers_bounded
        paths = number_paths(entry.schema)
        #: where a valid record can hold a number (``None``: anywhere)
        self.number_paths = None if paths is None else tuple(sorted(paths))
        self.schema_type = pa.schema([*self.layout.fields, *GATE_FIELDS])

    def holds_float(self, record: dict[str, Any]) -> bool:
        """Whether a schema-valid ``record`` holds a float: a look at the few paths where
        the schema admits numbers (~0.3 µs) instead of a walk of the record (~3 µs)."""
        if self.number_paths is None:
            return has_float(record)
        for path in self.number_paths:
            node: Any = record
            for key in path:
                node = node.get(key) if type(node) is dict else None
            if type(node) is float:
                return True
        return False


@dataclass
class _ValidRows:
    """A kind's schema-valid rows of one batch, before its rules (gate_batch's first pass)."""

    kind_gate: KindGate
    #: the records as stored (encoded for Arrow)
    stored: list[Any] = field(default_factory=list)
    #: the stored rows as the kind's payload columns (filled between the passes)
    columns: list[pa.Array] = field(default_factory=list)
    #: per row, the rules its batch forms left to Python (None: every rule)
    pending: list[tuple[RecordRule, ...]] | None = None
    #: rows the rules or the sanitizer rejected: they leave the columns
    dropped: list[int] = field(default_factory=list)
    #: rows the sanitizer redacted: what is stored instead
    redacted: dict[int, Any] = field(default_factory=dict)


@dataclass
class _KindRows:
    shard_lines: list[int] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    raw: list[str] = field(default_factory=list)
    record: list[str | None] = field(default_factory=list)
    content: list[str | None] = field(default_factory=list)
    profile: list[str | None] = field(default_factory=list)
    reasons: list[list[dict[str, str]]] = field(default_factory=list)
    disposition: list[str] = field(default_factory=list)
    #: with sanitization on, each row's submission as sent (:meth:`Gate._submission`)
    submitted_key: list[bytes] = field(default_factory=list)
    submitted_body: list[bytes] = field(default_factory=list)


@dataclass
class _RejectedRows:
    shard_lines: list[int] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    raw_sha: list[str] = field(default_factory=list)
    record: list[str | None] = field(default_factory=list)
    content: list[str | None] = field(default_factory=list)
    profile: list[str | None] = field(default_factory=list)
    kinds: list[str | None] = field(default_factory=list)
    schema: list[str | None] = field(default_factory=list)
    reasons: list[list[dict[str, str]]] = field(default_factory=list)
    raw: list[bytes | None] = field(default_factory=list)


@dataclass
class GatedBatch:
    """The gate's output for one :class:`LineBatch`: typed rows per kind, rejected rows,
    and counts of (disposition, first reason code)."""

    kinds: dict[str, pa.RecordBatch]
    rejected: pa.RecordBatch | None
    counts: Counter[tuple[str, str]]
    #: with sanitization on, each kind's submissions as sent (:data:`SUBMISSION_SCHEMA`),
    #: a row per row of ``kinds``, in their order; staged beside them, never published
    submitted: dict[str, pa.RecordBatch] = field(default_factory=dict)


class Gate:
    """Gates lines for one campaign. Build one per process; it caches compiled schemas."""

    def __init__(self, config: CampaignConfig, *, batch_rules: bool = True) -> None:
        self.config = config
        #: run the rules' batch forms (off only in tests: the per-row rules alone)
        self.batch_rules = batch_rules
        given = config.schemas.directory
        directory = config.resolve_path(given) if given else None
        self.registry = (
            SchemaRegistry(directory, config.schemas.pins)
            if directory
            else SchemaRegistry(pins=config.schemas.pins)
        )
        self.rule_context = load_rule_context(config)
        self._kinds: dict[str, KindGate] = {}
        self._parser = StrictParser()
        self.sanitizer = _sanitizer(config)
        #: ``_raw_sha256`` and ``_content_sha256``: SHA-256, or HMAC under the campaign key
        self.lineage = LineageDigest.of(config)

    def kind_gate(self, kind: RecordKind) -> KindGate:
        found = self._kinds.get(kind.id)
        if found is None:
            found = KindGate(kind, self.registry.get(kind.schema_id), self.config)
            self._kinds[kind.id] = found
        return found

    # -- the per-line reference path -------------------------------------------------

    def gate_line(
        self, line: bytes, declared: str | None = None, oversized: tuple[int, str] | None = None
    ) -> GateOutcome:
        """Gate one line, in the reference order, with the defining implementations."""
        outcome = self._gate_line(line, declared, oversized)
        if outcome.disposition is Disposition.REJECTED:
            outcome = self._screen_raw(outcome, line)
        return outcome

    def _gate_line(
        self, line: bytes, declared: str | None, oversized: tuple[int, str] | None
    ) -> GateOutcome:
        limits = self.config.limits
        if oversized is not None or len(line) > limits.max_line_bytes:
            length, raw_sha = oversized or (len(line), self.lineage.hexdigest(line))
            detail = f"line of {length} bytes exceeds the limit of {limits.max_line_bytes}"
            return GateOutcome(Disposition.REJECTED, (Reason(LINE_TOO_LARGE, "", detail),), raw_sha)
        raw_sha = self.lineage.hexdigest(line)
        kind_gate: KindGate | None = None
        record = None
        try:
            record = require_object(self._parser.parse(line))
            check_limits(record, limits.max_depth, limits.max_items)
            kind_gate = self.kind_gate(route(record, declared))
            errors = kind_gate.entry.errors(record)
            if errors:
                return self._rejected(errors, raw_sha, kind_gate, record)
            kind_gate.layout.root.encode(record)
            if kind_gate.layout.root.wide_integer(record):
                raise MappingError(_WIDE_INTEGER)
        except LocatedReject as exc:
            reason = dataclasses.replace(exc.reason, path=self._located_path(exc, declared))
            return self._rejected([reason], raw_sha, kind_gate, record)
        except RejectLine as exc:
            return self._rejected([exc.reason], raw_sha, kind_gate, record)
        except MappingError as exc:
            return self._rejected(
                [Reason(JSON_NUMBER_RANGE, "", str(exc))], raw_sha, kind_gate, record
            )
        return self._judged(kind_gate, record, raw_sha, reference=True)

    def _located_path(self, exc: LocatedReject, declared: str | None) -> str:
        """The safe path of a repeated key or non-finite number: rendered with the schema
        of the kind the line routes to (declared names and indices as they are), every
        key ``*`` when it routes to none."""
        if exc.location is None:
            return ""
        parts = list(exc.location.parts)
        try:
            schema = self.kind_gate(route(exc.location.top, declared)).entry.schema
        except RejectLine:
            return "$" + "".join(f"[{p}]" if isinstance(p, int) else ".*" for p in parts)
        return safe_path(schema, parts)

    def _rejected(
        self,
        reasons: list[Reason],
        raw_sha: str,
        kind_gate: KindGate | None,
        record: dict[str, Any] | None,
    ) -> GateOutcome:
        if kind_gate is None or record is None:
            return GateOutcome(Disposition.REJECTED, tuple(reasons), raw_sha)
        record_sha = hashlib.sha256(canonical_json(record)).hexdigest()
        return GateOutcome(
            Disposition.REJECTED,
            tuple(reasons),
            raw_sha,
            kind_gate.kind.id,
            kind_gate.entry.sha256,
            None,
            record_sha,
        )

    def _judged(
        self,
        kind_gate: KindGate,
        record: dict[str, Any],
        raw_sha: str,
        *,
        reference: bool,
        saw_float: bool = True,
        rules: tuple[RecordRule, ...] | None = None,
    ) -> GateOutcome:
        """A schema-valid record after its kind's rules (``rules``: those its batch forms
        did not clear) and the sanitizer, as an outcome (:meth:`_verdict`)."""
        return self._outcome(
            kind_gate, raw_sha, self._verdict(kind_gate, record, reference, saw_float, rules)
        )

    @staticmethod
    def _outcome(kind_gate: KindGate, raw_sha: str, verdict: _Verdict) -> GateOutcome:
        disposition, reasons, record, record_sha, content, profile = verdict
        return GateOutcome(
            disposition,
            reasons,
            raw_sha,
            kind_gate.kind.id,
            kind_gate.entry.sha256,
            record,
            record_sha,
            content,
            content_profile=profile,
        )

    def _verdict(
        self,
        kind_gate: KindGate,
        record: dict[str, Any],
        reference: bool,
        saw_float: bool,
        rules: tuple[RecordRule, ...] | None,
    ) -> _Verdict:
        """A schema-valid record's disposition and reasons after its kind's rules and the
        sanitizer, the record as stored, and its record and content digests and content
        profile (both paths end here; the batch path reads this tuple, not an outcome: 0.5
        µs a row); the record digest is of its canonical JSON (:func:`_canonical`)."""
        reasons: tuple[Reason, ...] = ()
        if rules == ():  # the batch forms cleared every rule (most rows)
            disposition = Disposition.ACCEPTED
        else:
            disposition, found = check_record(kind_gate.kind.id, record, self.rule_context, rules)
            reasons = tuple(found)
        if self.sanitizer is not None and disposition is not Disposition.REJECTED:
            record, disposition, reasons = self._sanitize(kind_gate, record, disposition, reasons)
        canonical = _canonical(kind_gate, record, reference, saw_float)
        content, profile = kind_gate.kind.fingerprint_and_profile(record, self.lineage.key)
        return disposition, reasons, record, hashlib.sha256(canonical).hexdigest(), content, profile

    def _submission(
        self,
        kind_gate: KindGate,
        record: dict[str, Any],
        stored: dict[str, Any],
        record_sha: str,
        saw_float: bool,
    ) -> tuple[bytes, bytes]:
        """With sanitization on, what the replay rule compares for a row: its submission
        key and its body *as sent*, not as stored. Redaction makes different values one
        placeholder: two task ids that are e-mail addresses were one key, so a different
        submission was removed as the first one's retry, and two bodies that differ only
        in a redacted value one body, so a conflict passed as a retry. The key's digest is
        the lineage's (HMAC under the campaign key where one is set, as ``_raw_sha256``:
        it may be a short PII value); the body's is ``_record_sha256``'s of the record
        before redaction (the same for a row nothing was redacted in)."""
        names = kind_gate.kind.idempotency_key
        key = canonical_json([record.get(name) for name in names])
        if stored is record:
            body = bytes.fromhex(record_sha)
        else:
            body = hashlib.sha256(_canonical(kind_gate, record, False, saw_float)).digest()
        return bytes.fromhex(self.lineage.hexdigest(key)), body

    # -- sanitization (pipeline.sanitize); only reached when it is enabled --------------

    def _sanitize(
        self,
        kind_gate: KindGate,
        record: dict[str, Any],
        disposition: Disposition,
        reasons: tuple[Reason, ...],
    ) -> tuple[dict[str, Any], Disposition, tuple[Reason, ...]]:
        """The record as stored, its disposition and reasons with the ``pii.*`` ones.

        Issue 8: "After redaction: schema and rules run again". The sanitizer re-checks the
        schema, code and evidence; the kind's rules run again here, and a rule the original
        passed but the redacted record fails is a redaction that broke the record:
        quarantine (``pii.rules_broken``), never a silent pass.
        """
        assert self.sanitizer is not None
        cleaned = self.sanitizer.sanitize(kind_gate.kind.id, kind_gate.entry, record)
        if cleaned is None:
            return record, disposition, reasons
        reasons = (*reasons, *cleaned.reasons())
        if cleaned.rejected:
            # a secret the record cannot be stored without: rejected, raw bytes screened
            return cleaned.record, Disposition.REJECTED, reasons
        if cleaned.quarantined and disposition is Disposition.ACCEPTED:
            disposition = Disposition.QUARANTINED
        if cleaned.record is not record:
            before = {r.code for r in reasons}
            _, again = check_record(kind_gate.kind.id, cleaned.record, self.rule_context)
            broken = sorted({r.code for r in again} - before)
            if broken:
                detail = "redaction breaks " + ", ".join(broken)
                reasons = (*reasons, Reason(PII_RULES_BROKEN, "", detail))
                disposition = Disposition.QUARANTINED
        return cleaned.record, disposition, reasons

    def _screen_raw(self, outcome: GateOutcome, line: bytes) -> GateOutcome:
        """Withhold a rejected line's raw bytes when they hold PII (pipeline.sanitize.raw)."""
        if self.sanitizer is None or outcome.reasons[0].code == LINE_TOO_LARGE:
            return outcome  # an over-long line is never held, never stored
        withheld = self.sanitizer.raw_reason(line)
        if withheld is None:
            return outcome
        reasons = (*outcome.reasons, withheld)
        return dataclasses.replace(outcome, reasons=reasons, raw_withheld=True)

    # -- the batch hot path ----------------------------------------------------------

    def gate_batch(self, batch: LineBatch, declared: str | None = None) -> GatedBatch:
        """Gate a batch of lines into Arrow record batches (see the module docstring)."""
        verdict, add_rejected = self._verdict, self._add_rejected
        submissions = self.sanitizer is not None  # only redaction makes them differ
        rows: dict[str, _KindRows] = {}
        rejected = _RejectedRows()
        counts: Counter[tuple[str, str]] = Counter()
        clean: Counter[str] = Counter()  # rows with no reason, by disposition
        offsets, first_line = batch.offsets, batch.first_line
        valid, lines = self._parsed(batch, declared)
        self._batch_rules(valid)

        # Second pass, in line order: each valid row judged by the rules left to Python.
        for i, entry in enumerate(lines):
            shard_line, offset = first_line + i, offsets[i]
            kind_valid = entry[0]
            if kind_valid is None:
                add_rejected(rejected, counts, shard_line, offset, entry[1], entry[2])
                continue
            _, j, record, raw_sha, saw_float = entry
            kind_gate, pending = kind_valid.kind_gate, kind_valid.pending
            rules = None if pending is None else pending[j]
            found = verdict(kind_gate, record, False, saw_float, rules)
            disposition, reasons, stored, record_sha, content, profile = found
            if disposition is Disposition.REJECTED:
                outcome = self._screen_raw(self._outcome(kind_gate, raw_sha, found), batch.lines[i])
                add_rejected(rejected, counts, shard_line, offset, outcome, batch.lines[i])
                kind_valid.dropped.append(j)
                continue
            if stored is not record:  # redacted: store what the hashes commit to
                root = kind_gate.layout.root
                kind_valid.redacted[j] = stored if root.identity else root.encode(stored)
            kind_rows = rows.get(kind_gate.kind.id)
            if kind_rows is None:
                kind_rows = rows[kind_gate.kind.id] = _KindRows()
            kind_rows.shard_lines.append(shard_line)
            kind_rows.offsets.append(offset)
            kind_rows.raw.append(raw_sha)
            kind_rows.record.append(record_sha)
            kind_rows.content.append(content)
            kind_rows.profile.append(profile)
            kind_rows.disposition.append(disposition.value)
            if submissions and kind_gate.kind.idempotency_key:
                key, body = self._submission(kind_gate, record, stored, record_sha, saw_float)
                kind_rows.submitted_key.append(key)
                kind_rows.submitted_body.append(body)
            if reasons:
                kind_rows.reasons.append([r.as_row() for r in reasons])
                counts[(disposition.value, reasons[0].code)] += 1
            else:  # most rows: no comprehension, counted once at the end
                kind_rows.reasons.append([])
                clean[disposition.value] += 1

        for value, count in clean.items():
            counts[(value, "")] += count
        return GatedBatch(
            {
                kind_id: self._kind_batch(valid[kind_id], kind_rows)
                for kind_id, kind_rows in rows.items()
            },
            self._rejected_batch(rejected) if rejected.shard_lines else None,
            counts,
            {
                kind_id: _submission_batch(kind_rows)
                for kind_id, kind_rows in rows.items()
                if kind_rows.submitted_key
            },
        )

    def _parsed(
        self, batch: LineBatch, declared: str | None
    ) -> tuple[dict[str, _ValidRows], list[tuple[Any, ...]]]:
        """The first pass: every line parsed, validated and encoded (its kind's
        :class:`_ValidRows`), or rejected; per line, in order, ``(kind rows, index,
        record, raw sha, float)`` or ``(None, rejected outcome, raw bytes)``."""
        max_line = self.config.limits.max_line_bytes
        raw_digest, fast_record = self.lineage.hexdigest, self._fast_record
        oversized = batch.oversized
        valid: dict[str, _ValidRows] = {}
        lines: list[tuple[Any, ...]] = []
        for i, line in enumerate(batch.lines):
            if (oversized and i in oversized) or len(line) > max_line:
                lines.append((None, self.gate_line(line, declared, oversized.get(i)), None))
                continue
            raw_sha = raw_digest(line)
            try:
                kind_gate, record, stored, saw_float = fast_record(line, declared)
            except (RejectLine, fastjsonschema.JsonSchemaValueException, MappingError):
                # Failure paths re-run the reference order so reasons never depend on
                # which shortcut was taken.
                lines.append((None, self.gate_line(line, declared), line))
                continue
            kind_valid = valid.get(kind_gate.kind.id)
            if kind_valid is None:
                kind_valid = valid[kind_gate.kind.id] = _ValidRows(kind_gate)
            lines.append((kind_valid, len(kind_valid.stored), record, raw_sha, saw_float))
            kind_valid.stored.append(stored)
        return valid, lines

    def _batch_rules(self, valid: dict[str, _ValidRows]) -> None:
        """Between the passes: each kind's rows as Arrow columns, and which rules its
        rules' batch forms leave to Python for each row."""
        for kind_id, kind_valid in valid.items():
            layout = kind_valid.kind_gate.layout
            kind_valid.columns = [
                pa.array([r.get(name) for r in kind_valid.stored], type=f.type)
                for name, f in layout.sources
            ]
            if self.batch_rules:
                payload = pa.RecordBatch.from_arrays(
                    kind_valid.columns, names=[name for name, _ in layout.sources]
                )
                kind_valid.pending = pending_rules(kind_id, payload, self.rule_context)

    def _fast_record(
        self, line: bytes, declared: str | None
    ) -> tuple[KindGate, dict[str, Any], Any, bool]:
        """Parse, route, bound, validate and encode one line by the fastest route that
        provably reads what the reference path reads: its kind gate, the record, the
        record as stored, and whether it holds a float (which decides how canonical JSON
        is written). Raises what the reference path would reject the line for."""
        record = parse_fast(line)
        saw_float: bool | None = None  # None: ask the record once it is valid
        if record is None:
            parser = self._parser
            record = require_object(parser.parse(line))
            kind_gate = self.kind_gate(route(record, declared))
            saw_float = parser.saw_float
        else:
            record = require_object(record)
            kind_gate = self.kind_gate(route(record, declared))
            if not kind_gate.integers_bounded and LONG_DIGITS.search(line):
                parser = self._parser
                record = require_object(parser.parse(line))  # the strict parser decides
                saw_float = parser.saw_float
        if not kind_gate.bounds_implied:
            limits = self.config.limits
            check_limits(record, limits.max_depth, limits.max_items)
        kind_gate.entry.validate(record)
        if saw_float is None:
            saw_float = kind_gate.holds_float(record) if kind_gate.keys_safe else True
        root = kind_gate.layout.root
        if saw_float and kind_gate.wide_integers and root.wide_integer(record):
            raise MappingError(_WIDE_INTEGER)
        return kind_gate, record, record if root.identity else root.encode(record), saw_float

    @staticmethod
    def _add_rejected(
        rows: _RejectedRows,
        counts: Counter[tuple[str, str]],
        shard_line: int,
        offset: int,
        outcome: GateOutcome,
        raw: bytes | None,
    ) -> None:
        rows.shard_lines.append(shard_line)
        rows.offsets.append(offset)
        rows.raw_sha.append(outcome.raw_sha256)
        rows.record.append(outcome.record_sha256)
        rows.content.append(outcome.content_sha256)
        rows.profile.append(outcome.content_profile)
        rows.kinds.append(outcome.kind)
        rows.schema.append(outcome.schema_sha256)
        rows.reasons.append([r.as_row() for r in outcome.reasons])
        rows.raw.append(None if outcome.raw_withheld else raw)
        counts[(outcome.disposition.value, outcome.reasons[0].code)] += 1

    def _kind_batch(self, valid: _ValidRows, rows: _KindRows) -> pa.RecordBatch:
        kind_gate = valid.kind_gate
        layout = kind_gate.layout
        payload = valid.columns
        if valid.redacted:  # the columns again, from the records as stored
            dropped = set(valid.dropped)
            stored = [
                valid.redacted.get(j, record)
                for j, record in enumerate(valid.stored)
                if j not in dropped
            ]
            payload = [
                pa.array([r.get(name) for r in stored], type=f.type) for name, f in layout.sources
            ]
        elif valid.dropped:  # the rows the rules rejected leave the columns
            kept = np.ones(len(valid.stored), np.bool_)
            kept[valid.dropped] = False
            mask = pa.array(kept)
            payload = [column.filter(mask) for column in payload]
        schema_sha = kind_gate.entry.sha256
        lineage = [
            pa.array(rows.shard_lines, pa.int64()),
            pa.array(rows.offsets, pa.int64()),
            pa.array(rows.raw, pa.string()),
            pa.array(rows.record, pa.string()),
            pa.array(rows.content, pa.string()),
            pa.array(rows.profile, pa.string()),
            pa.array([schema_sha] * len(rows.raw), pa.string()),
            pa.array(rows.reasons, REASONS_TYPE),
            pa.array(rows.disposition, pa.string()),
        ]
        return pa.RecordBatch.from_arrays(payload + lineage, schema=kind_gate.schema_type)

    @staticmethod
    def _rejected_batch(rows: _RejectedRows) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays(
            [
                pa.array(rows.shard_lines, pa.int64()),
                pa.array(rows.offsets, pa.int64()),
                pa.array(rows.raw_sha, pa.string()),
                pa.array(rows.record, pa.string()),
                pa.array(rows.content, pa.string()),
                pa.array(rows.profile, pa.string()),
                pa.array(rows.kinds, pa.string()),
                pa.array(rows.schema, pa.string()),
                pa.array(rows.reasons, REASONS_TYPE),
                pa.array(rows.raw, pa.binary()),
            ],
            schema=REJECTED_SCHEMA,
        )


def _canonical(
    kind_gate: KindGate, record: dict[str, Any], reference: bool, saw_float: bool
) -> bytes:
    """A schema-valid record's RFC 8785 canonical JSON: through orjson only where that is
    provably the same bytes (no float in the line, no key the schema cannot vouch for)."""
    if reference:
        return canonical_json(record)
    if kind_gate.keys_safe and not saw_float:
        return orjson.dumps(record, option=orjson.OPT_SORT_KEYS)
    return canonical_json_fast(record)


def _submission_batch(rows: _KindRows) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [
            pa.array(rows.shard_lines, pa.int64()),
            pa.array(rows.submitted_key, pa.binary(32)),
            pa.array(rows.submitted_body, pa.binary(32)),
        ],
        schema=SUBMISSION_SCHEMA,
    )


def _sanitizer(config: CampaignConfig) -> Sanitizer | None:
    """The campaign's sanitizer; imported only when enabled (off costs nothing)."""
    if not config.sanitize.enabled:
        return None
    from pipeline.sanitize import Sanitizer

    return Sanitizer.from_config(config)
