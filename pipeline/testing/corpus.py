"""A labelled duplicate corpus: pairwise rows with planted duplicates of every class.

For tests and ``benchmarks/dedupe_near.py``. Originals are the synthetic export's rows
(:func:`pipeline.testing.synthetic.export_lines`); after some originals the generator plants a
variant of an earlier original, always under a new task id:

=============  ==========================================================  ==============
class          how it is made                                              expected rule
=============  ==========================================================  ==============
exact          same content, new rationale                                 exact
reordered      A and B swapped, preference flipped (the same judgment)     exact
normalised     whitespace runs, case, NFD accents changed                  normalised
near           words replaced: planted Jaccard in [0.82, 0.98]             near
far            words replaced: planted Jaccard in [0.30, 0.65]             (kept)
=============  ==========================================================  ==============

A and B swapped with the preference *kept* is not planted: the same comparison preferred
both ways is a contradiction, which the cross-record rules quarantine
(``cross.contradictory_preference``) before dedupe sees the rows.

The planted similarity is measured by the generator itself, independently of
:mod:`pipeline.dedupe.minhash`: Jaccard of the sets of word ``shingle_size``-grams of the
normalised key text (NFC, lowercase, ``\\w+`` tokens), the definition the dedupe stage
verifies against. A near variant whose measured similarity falls below the threshold is
labelled as a negative, so labels never depend on the detector.
"""

from __future__ import annotations

import copy
import random
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

import orjson

from pipeline.testing.synthetic import export_lines

__all__ = ["CLASSES", "LabelledRow", "duplicate_corpus", "pairwise_text", "shingle_jaccard"]

CLASSES: Final = ("exact", "reordered", "normalised", "near", "far")
_WORD: Final = re.compile(r"\w+")
#: Replacement words: never in the synthetic vocabulary, so every edit is a real change.
_FILLER: Final = [
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
    "juliet", "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo",
    "sierra", "tango", "uniform", "victor", "whiskey", "xray", "yankee", "zulu",
]  # fmt: skip


@dataclass(frozen=True)
class LabelledRow:
    """One line of the corpus: its class (``original`` or one of :data:`CLASSES`), the
    0-based line of the original it copies (-1 for originals), for near/far the planted
    Jaccard similarity to that original, and the rule that must remove it (``None``:
    it must be kept)."""

    line: bytes
    label: str
    source: int = -1
    similarity: float | None = None
    expected: str | None = None


def pairwise_text(record: dict[str, Any]) -> str:
    """The pairwise key text as the dedupe stage builds it: conversation, then the two
    responses in sorted order (after normalisation)."""
    conversation = "\n".join(f"{m['role']}: {m['content']}" for m in record["messages"])
    responses = sorted(_normalise(r) for r in (record["response_a"], record["response_b"]))
    return "\n".join([_normalise(conversation), *responses])


def _normalise(text: str) -> str:
    return " ".join(
        unicodedata.normalize("NFC", unicodedata.normalize("NFC", text).casefold()).split()
    )


def _shingles(text: str, size: int) -> set[tuple[str, ...]]:
    tokens = _WORD.findall(text)
    if not tokens:
        return set()
    return {tuple(tokens[i : i + size]) for i in range(max(1, len(tokens) - size + 1))}


def shingle_jaccard(a: str, b: str, size: int = 5) -> float:
    """Jaccard similarity of two texts' word-shingle sets (the corpus's ground truth)."""
    sa, sb = _shingles(a, size), _shingles(b, size)
    union = len(sa | sb)
    return len(sa & sb) / union if union else 0.0


def _replace_words(text: str, count: int, rng: random.Random) -> str:
    """Replace ``count`` distinct words (whitespace-separated, line breaks kept)."""
    lines = [line.split(" ") for line in text.split("\n")]
    slots = [(i, j) for i, words in enumerate(lines) for j in range(len(words)) if words[j]]
    for i, j in rng.sample(slots, min(count, len(slots))):
        lines[i][j] = rng.choice(_FILLER) + str(rng.randint(0, 999))
    return "\n".join(" ".join(words) for words in lines)


def _mutate(record: dict[str, Any], target: float, size: int, rng: random.Random) -> dict[str, Any]:
    """A copy whose key text has about ``target`` Jaccard similarity to the record's."""
    out = copy.deepcopy(record)
    total = len(_WORD.findall(pairwise_text(record)))
    # each isolated edit changes about ``size`` shingles: J ≈ (N - s·m) / (N + s·m)
    edits = max(1, round(total * (1 - target) / (size * (1 + target))))
    fields = ["response_a", "response_b"]
    weights = [len(out[f]) for f in fields]
    first = round(edits * weights[0] / sum(weights))
    share = [first, edits - first]
    for name, count in zip(fields, share, strict=True):
        out[name] = _replace_words(out[name], count, rng)
    return out


def _normalised_variant(record: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    out = copy.deepcopy(record)
    for message in out["messages"]:
        message["content"] = "  " + message["content"].upper().replace(" ", "   ", 3) + "\n"
    for name in ("response_a", "response_b"):
        out[name] = unicodedata.normalize("NFD", out[name]).replace(" ", "\t ", 2) + " "
    return out


def _swap(record: dict[str, Any], flip: bool) -> dict[str, Any]:
    out = dict(record)
    out["response_a"], out["response_b"] = record["response_b"], record["response_a"]
    if flip and record["preference"] in ("A", "B"):
        new = "B" if record["preference"] == "A" else "A"
        out["preference"] = new
        # the rationale names the preferred response: keep it consistent with the swap
        out["rationale"] = record["rationale"].replace(
            f"Response {record['preference']} ", f"Response {new} "
        )
    return out


def duplicate_corpus(
    count: int,
    *,
    seed: int = 0,
    size: int = 1,
    duplicate_rate: float = 0.3,
    shingle_size: int = 5,
    threshold: float = 0.8,
) -> Iterator[LabelledRow]:
    """``count`` lines: originals and, with probability ``duplicate_rate`` per line, a
    variant of an earlier original, of a class drawn uniformly from :data:`CLASSES`."""
    rng = random.Random(seed)
    originals: list[tuple[int, dict[str, Any]]] = []
    base = export_lines("pairwise-v2", count, seed=seed, size=size)
    for i in range(count):
        if originals and rng.random() < duplicate_rate:
            source, record = rng.choice(originals)
            label = rng.choice(CLASSES)
            similarity: float | None = None
            expected: str | None = "exact"
            if label == "exact":
                variant = dict(record, rationale=record["rationale"] + " Agreed.")
            elif label == "reordered":
                variant = _swap(record, flip=True)
            elif label == "normalised":
                variant = _normalised_variant(record, rng)
                expected = "normalised"
            else:
                low, high = (threshold + 0.02, 0.98) if label == "near" else (0.30, 0.65)
                variant = _mutate(record, rng.uniform(low, high), shingle_size, rng)
                similarity = shingle_jaccard(
                    pairwise_text(record), pairwise_text(variant), shingle_size
                )
                expected = "near" if similarity >= threshold else None
            # A duplicate is another submission: its own task id (the same id with another
            # body would be a cross.idempotency_conflict, not a duplicate).
            variant["task_id"] = f"dup-{i:07d}"
            yield LabelledRow(orjson.dumps(variant), label, source, similarity, expected)
            continue
        line = next(base)
        originals.append((i, orjson.loads(line)))
        yield LabelledRow(line, "original")
