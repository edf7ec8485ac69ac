"""Sanitizing one parsed record of one kind, field-aware (seed 002: "Inspect parsed
fields, not raw JSON syntax").

The walk visits only the subtrees the policy selects. Every string there is scanned;
member names in those subtrees too (a map keyed by e-mail address), and every name a
selector matches (``$.meta.*`` and ``$.meta.*.x`` match each member name of ``meta``). A string under a
secret-named member (``api_key``, ``password``, ``githubToken``) is a secret whole. All
scanned strings of a record are joined and scanned in one pass (see
:mod:`pipeline.sanitize.detectors`), and only strings with a detection are redacted,
each to its fixpoint (:mod:`pipeline.sanitize.redaction`).

A number under a secret-named member (``"password": 84736251``) is a secret too: it
becomes the category tag, a string. Every other redaction preserves the record's shape
and JSON types: only string values and member names change, so the record still maps
onto the kind's Arrow layout. Afterwards: code fields must still parse, evidence fields
must be untouched, and the schema is re-run on the redacted record; any failure, an
uncertain detection, a member-name collision or an unstable string sends the record to
quarantine with ``pii.*`` reasons. A redacted number the schema refuses as a tag cannot
be stored without the secret (a quarantined record is stored whole): the record is
rejected with ``pii.unredactable`` instead, and its raw bytes are withheld like any
rejected line's holding a secret. Booleans and nulls hold no secret and stay. Outputs
carry safe paths and category counts only.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from pipeline.core.reasons import (
    PII_CODE_BROKEN,
    PII_EVIDENCE_CHANGED,
    PII_KEY_COLLISION,
    PII_QUARANTINE_CODES,
    PII_REDACTED,
    PII_SCHEMA_INVALID,
    PII_UNCERTAIN,
    PII_UNREDACTABLE,
    PII_UNSTABLE,
    Reason,
)
from pipeline.records.schemas import SchemaEntry, safe_path
from pipeline.sanitize.categories import PRIORITY, Category, count_detail
from pipeline.sanitize.code import redaction_breaks_code
from pipeline.sanitize.detectors import (
    MIN_TEXT,
    SEPARATOR,
    Detection,
    SecretNames,
    TextScanner,
    emails,
    in_original,
    is_placeholder,
    normalise_name,
    to_str_offsets,
)
from pipeline.sanitize.folding import fold
from pipeline.sanitize.paths import ANY_MEMBER, FieldSelector, SelectorError, SelectorTrie
from pipeline.sanitize.policy import AuthorisedException, KindPolicy, SanitizePolicy
from pipeline.sanitize.redaction import Redacted, redact

__all__ = ["RecordSanitizer", "SanitizedRecord"]

Path = tuple[str | int, ...]


@dataclass
class SanitizedRecord:
    """What sanitizing a record did: the new record and counts by safe path."""

    record: dict[str, Any]
    #: (safe path, category) → spans replaced
    redacted: Counter[tuple[str, Category]] = field(default_factory=Counter)
    #: (safe path, category) → detections an authorised exception let stay
    allowed: Counter[tuple[str, Category]] = field(default_factory=Counter)
    #: quarantine reasons (``pii.*``), in a deterministic order
    problems: list[Reason] = field(default_factory=list)

    @property
    def quarantined(self) -> bool:
        return any(p.code in PII_QUARANTINE_CODES for p in self.problems)

    @property
    def rejected(self) -> bool:
        """The record cannot be stored without a secret (``pii.unredactable``)."""
        return any(p.code == PII_UNREDACTABLE for p in self.problems)

    def reasons(self) -> tuple[Reason, ...]:
        """Quarantine reasons first, then one ``pii.redacted`` per field path."""
        by_path: dict[str, Counter[Category]] = {}
        for (path, category), n in self.redacted.items():
            by_path.setdefault(path, Counter())[category] += n
        redacted = [Reason(PII_REDACTED, path, count_detail(c)) for path, c in by_path.items()]
        return (*self.problems, *sorted(redacted, key=lambda r: r.path))


@dataclass(slots=True)
class _Segment:
    parts: Path  # where the string is; for a member name, the member's path
    text: str
    is_key: bool
    secret: Category | None  # the whole value is a secret of this category
    is_number: bool = False  # a number under a secret-named member (text: its JSON form)


_AUTHORIZATION: Final = ("authorization", "_authorization")


class RecordSanitizer:
    """Sanitizes records of one kind under one policy (built once per process)."""

    def __init__(self, policy: SanitizePolicy, kind: str, entry: SchemaEntry) -> None:
        self.policy = policy
        self.kind = kind
        self.entry = entry
        rules: KindPolicy = policy.for_kind(kind)
        for where, selector, selects in _selectors(policy, kind):
            try:
                selector.check(entry.schema, selects=selects)
            except SelectorError as exc:
                raise SelectorError(f"policy.{where}: {exc}") from None
        self.rules = rules
        self.trie = SelectorTrie(rules.fields)
        self.names = SecretNames(policy.secret_fields)
        self.scanner = TextScanner(rules.categories, policy.phone_regions, self.names)
        self.exceptions = tuple(e for e in policy.exceptions if e.applies_to(kind))
        self.api_key_enabled = Category.API_KEY in rules.categories
        self.bearer_enabled = Category.BEARER_TOKEN in rules.categories
        # Member names the schema declares are fixed vocabulary, never personal data:
        # only other names (map keys, extra members) are scanned.
        self.declared = frozenset(_declared_names(entry.schema))

    # -- collecting what to scan ---------------------------------------------------------

    def _segments(self, record: dict[str, Any]) -> list[_Segment]:
        out: list[_Segment] = []
        self._collect(record, (), [self.trie], self.trie.whole, None, out)
        return out

    def _collect_whole(
        self, node: Any, parts: Path, secret: Category | None, out: list[_Segment]
    ) -> None:
        """Everything below ``node`` is in scope (the common case: policies select "$").
        Parsed JSON holds exact built-in types, so ``type(...) is`` tests suffice. ASCII
        strings shorter than any detection are left out; others may fold into longer
        text ("⒏⒏⒏8" reads 8.8.8.8)."""
        kind = type(node)
        if kind is str:
            if secret is not None or len(node) >= MIN_TEXT or not node.isascii():
                out.append(_Segment(parts, node, False, secret))
        elif kind is dict:
            declared, is_secret = self.declared, self.names.is_secret
            for key, value in node.items():
                path = (*parts, key)
                if key not in declared and (len(key) >= MIN_TEXT or not key.isascii()):
                    out.append(_Segment(path, key, True, None))
                inner = secret
                if inner is None and is_secret(key):
                    inner = self._secret_category(key)
                value_kind = type(value)
                if value_kind is str:
                    if inner is not None or len(value) >= MIN_TEXT or not value.isascii():
                        out.append(_Segment(path, value, False, inner))
                elif value_kind is dict or value_kind is list:
                    self._collect_whole(value, path, inner, out)
                elif inner is not None and (value_kind is int or value_kind is float):
                    out.append(_Segment(path, repr(value), False, inner, True))
        elif kind is list:
            for i, value in enumerate(node):
                value_kind = type(value)
                if value_kind is str:
                    if secret is not None or len(value) >= MIN_TEXT or not value.isascii():
                        out.append(_Segment((*parts, i), value, False, secret))
                elif value_kind is dict or value_kind is list:
                    self._collect_whole(value, (*parts, i), secret, out)
                elif secret is not None and (value_kind is int or value_kind is float):
                    out.append(_Segment((*parts, i), repr(value), False, secret, True))
        elif secret is not None and (kind is int or kind is float):
            out.append(_Segment(parts, repr(node), False, secret, True))

    def _collect(
        self,
        node: Any,
        parts: Path,
        tries: list[SelectorTrie],
        whole: bool,
        secret: Category | None,
        out: list[_Segment],
    ) -> None:
        if whole:
            self._collect_whole(node, parts, secret, out)
        elif isinstance(node, dict):
            # A name a selector matches (".*") or whose member it selects whole is in scope.
            any_name = any(ANY_MEMBER in t.children for t in tries)
            for key, value in node.items():
                child_tries = [c for t in tries for c in t.member(key)]
                if not child_tries:
                    continue
                child_whole = any(c.whole for c in child_tries)
                if (
                    (any_name or child_whole)
                    and key not in self.declared
                    and (len(key) >= MIN_TEXT or not key.isascii())
                ):
                    out.append(_Segment((*parts, key), key, True, None))
                child_secret = secret
                if child_secret is None and self.names.is_secret(key):
                    child_secret = self._secret_category(key)
                self._collect(value, (*parts, key), child_tries, child_whole, child_secret, out)
        elif isinstance(node, list):
            child_tries = [e for t in tries if (e := t.element()) is not None]
            if not child_tries:
                return
            child_whole = any(c.whole for c in child_tries)
            for i, value in enumerate(node):
                self._collect(value, (*parts, i), child_tries, child_whole, secret, out)

    def _secret_category(self, key: str) -> Category | None:
        if normalise_name(key).endswith(_AUTHORIZATION) and self.bearer_enabled:
            return Category.BEARER_TOKEN
        return Category.API_KEY if self.api_key_enabled else None

    # -- detection -----------------------------------------------------------------------

    def _detect(self, segments: list[_Segment]) -> Iterator[tuple[_Segment, list[Detection]]]:
        scanned = [s for s in segments if s.secret is None]
        for s in segments:
            if s.secret is not None and not is_placeholder(s.text):
                yield s, [Detection(0, len(s.text), s.secret)]
        if not scanned:
            return
        texts = [s.text for s in scanned]
        found = self._scan_joined(texts)
        # Strings spelled with fullwidth forms, other digits or invisible characters are
        # read folded too, joined likewise (ASCII strings never are: isascii reads a flag).
        views = {i: v for i, t in enumerate(texts) if not t.isascii() and (v := fold(t))}
        if views:
            indices = list(views)
            folded = self._scan_joined([v.text for v in views.values()])
            for j, detections in folded.items():
                i = indices[j]
                found.setdefault(i, []).extend(in_original(views[i], detections))
        for i in sorted(found):
            if found[i]:
                yield scanned[i], found[i]

    def _scan_joined(self, texts: list[str]) -> dict[int, list[Detection]]:
        """The strings joined and scanned in one pass; detections by string, in ``str``
        offsets."""
        encoded = [text.encode() for text in texts]
        starts = []
        position = 0
        for data in encoded:
            starts.append(position)
            position += len(data) + len(SEPARATOR)
        joined = SEPARATOR.join(encoded)
        by_segment: dict[int, list[Detection]] = {}
        for d in self.scanner.scan_bytes(joined):
            by_segment.setdefault(bisect_right(starts, d.start) - 1, []).append(d)
        found = {i: to_str_offsets(joined, ds, starts[i]) for i, ds in by_segment.items()}
        # Addresses are found on str (Unicode local parts and domains), only where '@' is.
        if Category.EMAIL in self.scanner.categories and b"@" in joined:
            for i, text in enumerate(texts):
                if "@" in text and (addresses := list(emails(text))):
                    found.setdefault(i, []).extend(addresses)
        return found

    def _rescan(self, segment: _Segment) -> Any:
        if segment.secret is not None:
            category = segment.secret

            def whole(text: str) -> list[Detection]:
                return [] if is_placeholder(text) else [Detection(0, len(text), category)]

            return whole
        return self.scanner.scan

    def _filter(self, segment: _Segment, active: list[AuthorisedException]) -> Any:
        applicable = [
            e for e in active if not e.fields or any(f.covers(segment.parts) for f in e.fields)
        ]

        def allow(text: str, found: list[Detection]) -> tuple[list[Detection], list[Detection]]:
            if not applicable:
                return found, []
            kept, allowed = [], []
            for d in found:
                value = text[d.start : d.end]
                if any(e.allows(d.category, value) for e in applicable):
                    allowed.append(d)
                else:
                    kept.append(d)
            return kept, allowed

        return allow

    # -- the record ----------------------------------------------------------------------

    def inspect(self, record: dict[str, Any]) -> SanitizedRecord:
        """Sanitize ``record``; the result says what was done (possibly nothing)."""
        result = SanitizedRecord(record)
        segments = self._segments(record)
        if not segments:
            return result
        active: list[AuthorisedException] | None = None
        values: dict[Path, str] = {}
        keys: dict[Path, str] = {}
        outcomes: list[tuple[_Segment, Redacted]] = []
        for segment, detections in self._detect(segments):
            if active is None:
                active = [e for e in self.exceptions if e.when is None or e.when.holds(record)]
            outcome = redact(
                segment.text,
                detections,
                self._rescan(segment),
                self._filter(segment, active),
                self.policy.max_passes,
            )
            if outcome is None:
                continue
            path = safe_path(self.entry.schema, list(segment.parts))
            for category, n in outcome.allowed.items():
                result.allowed[(path, category)] += n
            if not outcome.redacted:
                continue
            for category, n in outcome.redacted.items():
                result.redacted[(path, category)] += n
            outcomes.append((segment, outcome))
            (keys if segment.is_key else values)[segment.parts] = outcome.text
        if not outcomes:
            return result
        result.record, collisions = _rebuild(record, values, keys)
        result.problems = self._problems(outcomes, collisions, result.record)
        return result

    def _problems(
        self,
        outcomes: list[tuple[_Segment, Redacted]],
        collisions: list[Path],
        record: dict[str, Any],
    ) -> list[Reason]:
        schema = self.entry.schema
        problems: set[Reason] = set()
        for segment, outcome in outcomes:
            path = safe_path(schema, list(segment.parts))
            if outcome.uncertain:
                ordered = sorted(outcome.uncertain, key=PRIORITY.__getitem__)
                detail = "failed validation in context: " + " ".join(c.value for c in ordered)
                problems.add(Reason(PII_UNCERTAIN, path, detail))
            if not outcome.stable:
                problems.add(Reason(PII_UNSTABLE, path, "redaction did not reach a fixpoint"))
            if segment.is_key:
                continue
            if _covered(self.rules.evidence_fields, segment.parts):
                problems.add(
                    Reason(
                        PII_EVIDENCE_CHANGED, path, "a verbatim quote no longer matches its source"
                    )
                )
            if _covered(self.rules.code_fields, segment.parts) and redaction_breaks_code(
                segment.text, outcome.text
            ):
                problems.add(
                    Reason(PII_CODE_BROKEN, path, "code parsed before redaction, not after")
                )
        for parts in collisions:
            problems.add(
                Reason(
                    PII_KEY_COLLISION,
                    safe_path(schema, list(parts)),
                    "redacted member names collide; later members dropped",
                )
            )
        numbers = [safe_path(schema, list(s.parts)) for s, _ in outcomes if s.is_number]
        for error in self.entry.errors(record):
            if any(_within(number, error.path) for number in numbers):
                detail = "a secret-named member holds a number; the schema refuses the tag"
                problems.add(Reason(PII_UNREDACTABLE, error.path, detail))
            else:
                problems.add(Reason(PII_SCHEMA_INVALID, error.path, error.detail or error.code))
        return sorted(problems, key=lambda r: (r.code, r.path, r.detail))


def _selectors(
    policy: SanitizePolicy, kind: str
) -> Iterator[tuple[str, FieldSelector, str | None]]:
    """The policy's selectors that apply to ``kind``, each with where it is written and
    the JSON type it must select, if any (a record condition compares strings)."""
    if kind in policy.kinds:
        rules = policy.kinds[kind]
        for key in ("fields", "code_fields", "evidence_fields"):
            for i, selector in enumerate(getattr(rules, key)):
                yield f"kinds.{kind}.{key}[{i}]", selector, None
    for n, exception in enumerate(policy.exceptions):
        if exception.applies_to(kind):
            scope = f"kind {kind}" + ("" if exception.kinds else ": the exception names no kinds")
            for i, selector in enumerate(exception.fields):
                yield f"exceptions[{n}].fields[{i}] ({scope})", selector, None
            if exception.when is not None:
                yield f"exceptions[{n}].when.path ({scope})", exception.when.path, "string"


def _declared_names(schema: Any) -> Iterator[str]:
    if isinstance(schema, dict):
        properties = schema.get("properties")
        if isinstance(properties, dict):
            yield from properties
        for value in schema.values():
            yield from _declared_names(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _declared_names(value)


def _within(path: str, container: str) -> bool:
    """Whether safe path ``path`` is ``container`` or lies inside it."""
    return path == container or path.startswith((container + ".", container + "["))


def _covered(selectors: tuple[FieldSelector, ...], parts: Path) -> bool:
    return any(s.covers(parts) for s in selectors)


def _rebuild(
    record: dict[str, Any], values: dict[Path, str], keys: dict[Path, str]
) -> tuple[dict[str, Any], list[Path]]:
    """A copy of ``record`` with the new string values and member names; containers are
    copied once each, only along changed paths (the input is never mutated)."""
    root: dict[str, Any] = dict(record)
    copies: dict[Path, Any] = {(): root}

    def container(parts: Path) -> Any:
        found = copies.get(parts)
        if found is None:
            parent = container(parts[:-1])
            original = parent[parts[-1]]
            found = dict(original) if isinstance(original, dict) else list(original)
            parent[parts[-1]] = found
            copies[parts] = found
        return found

    for parts, value in values.items():
        container(parts[:-1])[parts[-1]] = value
    collisions: list[Path] = []
    renamed: dict[Path, dict[str, str]] = {}
    for parts, name in keys.items():
        renamed.setdefault(parts[:-1], {})[str(parts[-1])] = name
    # Deepest first, so a parent's rename (by its old name) happens after its children's.
    for parts in sorted(renamed, key=len, reverse=True):
        old = container(parts)
        new: dict[str, Any] = {}
        for key, value in old.items():
            name = renamed[parts].get(key, key)
            if name in new:
                collisions.append((*parts, key))
                continue
            new[name] = value
        if parts:
            container(parts[:-1])[parts[-1]] = new
        else:
            root = new
        copies[parts] = new
    return root, collisions
