"""Redacting one string: deterministic overlap merge, full-span replacement, fixpoint.

Seed 002: "Merge overlapping spans deterministically, prioritize credential matches over
generic strings, and replace full spans. The sanitizer should be idempotent:
sanitize(sanitize(x)) = sanitize(x)."

* **Merge.** Detections whose spans overlap (share at least one character) become one
  span, their union, so no fragment of any of them survives. Its category is the one
  with the highest :data:`~pipeline.sanitize.categories.PRIORITY` (credentials first).
  Touching spans stay separate. The result depends only on the set of detections.
* **Whole characters.** A span takes the combining marks that follow it (an accent, a
  variation selector): they belong to its last character, and left behind they would
  sit on the tag's closing bracket.
* **Tags.** Canonical tags already in the text are never redacted again: a detection
  inside a tag is dropped; one overlapping a tag grows to cover it whole, so no broken
  tag is ever written. Tags are not receipts: the text around them is scanned as usual.
* **Fixpoint.** Replacing a span can join text that was apart, and a new candidate may
  appear; so the string is scanned again after each replacement until a pass finds
  nothing. That is idempotence by construction: the output is a text in which a scan
  finds nothing, and a text in which a scan finds nothing is returned unchanged. Every
  pass that changes the text replaces at least one character outside a tag by a tag,
  so the loop ends; ``max_passes`` bounds it, and a string still changing then is
  reported unstable (the record is quarantined). What the last scan found is redacted
  even then: a quarantined record is stored, and it must not hold what was found (a chain
  of numbers, each found only once the one before it became a tag, can outlast the
  passes).
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from pipeline.sanitize.categories import PRIORITY, TAG_PATTERN, Category, tag
from pipeline.sanitize.detectors import Detection

__all__ = ["Redacted", "merge", "redact", "replace"]


@dataclass
class Redacted:
    """The outcome for one string: the new text and what was done (counts only)."""

    text: str
    redacted: Counter[Category] = field(default_factory=Counter)
    allowed: Counter[Category] = field(default_factory=Counter)
    uncertain: set[Category] = field(default_factory=set)
    stable: bool = True


def _protect_tags(text: str, detections: list[Detection]) -> list[Detection]:
    if "[REDACTED_PII:" not in text:
        return detections
    tags = [m.span() for m in TAG_PATTERN.finditer(text)]
    if not tags:
        return detections
    kept = []
    for d in detections:
        start, end = d.start, d.end
        for tag_start, tag_end in tags:
            if tag_start < end and start < tag_end:  # overlaps this tag
                start, end = min(start, tag_start), max(end, tag_end)
        # Only tags (and blanks) inside: nothing left to redact.
        remainder = TAG_PATTERN.sub("", text[start:end])
        if remainder.strip():
            kept.append(Detection(start, end, d.category, d.certain))
    return kept


def merge(detections: Iterable[Detection]) -> list[Detection]:
    """Overlapping detections → one span each (their union), winner by priority."""
    ordered = sorted(detections, key=lambda d: (d.start, -d.end, PRIORITY[d.category]))
    merged: list[Detection] = []
    group: list[Detection] = []
    end = -1
    for d in ordered:
        if group and d.start >= end:
            merged.append(_union(group))
            group = []
        if not group:
            end = d.end
        group.append(d)
        end = max(end, d.end)
    if group:
        merged.append(_union(group))
    return merged


def _union(group: list[Detection]) -> Detection:
    winner = min(PRIORITY[d.category] for d in group)
    category = next(d.category for d in group if PRIORITY[d.category] == winner)
    certain = any(d.certain for d in group if d.category is category)
    return Detection(min(d.start for d in group), max(d.end for d in group), category, certain)


def replace(text: str, merged: list[Detection]) -> str:
    """``text`` with each merged span replaced by its category's tag."""
    parts = []
    position = 0
    for d in merged:
        parts.append(text[position : d.start])
        parts.append(tag(d.category))
        position = d.end
    parts.append(text[position:])
    return "".join(parts)


#: Splits a pass's detections into (to redact, allowed by an authorised exception).
Filter = Callable[[str, list[Detection]], tuple[list[Detection], list[Detection]]]


def _with_marks(text: str, detections: list[Detection]) -> list[Detection]:
    """Each detection's span grown over the combining marks (categories Mn, Mc, Me)
    that follow it: "a@b.com\u0301" is redacted whole, leaving no accent on the tag."""
    grown = []
    for d in detections:
        end = d.end
        while end < len(text) and unicodedata.category(text[end])[0] == "M":
            end += 1
        grown.append(d if end == d.end else Detection(d.start, end, d.category, d.certain))
    return grown


def _replace(result: Redacted, detections: list[Detection]) -> None:
    """One pass's replacement: ``detections`` merged and replaced by their tags."""
    merged = merge(_with_marks(result.text, detections))
    result.redacted.update(d.category for d in merged)
    result.uncertain.update(d.category for d in merged if not d.certain)
    result.text = replace(result.text, merged)


def redact(
    text: str,
    first: list[Detection],
    rescan: Callable[[str], list[Detection]],
    allow: Filter,
    max_passes: int,
) -> Redacted | None:
    """Redact ``text`` given its first pass's detections; ``None`` when nothing is to
    be redacted (the common case: no copy is made)."""
    result = Redacted(text)
    detections = first
    for _ in range(max_passes):
        detections, allowed = allow(result.text, detections)
        if not result.redacted:  # count what stays only once, on the original text
            result.allowed.update(d.category for d in allowed)
        detections = _protect_tags(result.text, detections)
        if not detections:
            break
        _replace(result, detections)
        detections = rescan(result.text)
    else:
        detections, _ = allow(result.text, detections)
        detections = _protect_tags(result.text, detections)
        result.stable = not detections
        if detections:  # no fixpoint: unstable, but nothing found stays in the text
            _replace(result, detections)
    if not result.redacted:
        return None if not result.allowed else result
    return result
