"""Weighted rubrics: the file format, its checks, and the registry (DESIGN §3.10, seed 000).

A rubric is a versioned, digested policy object (seed 000: "A rubric is a separate,
versioned policy object"): criteria with weights and per-criterion minimums on one
scale, a weighted acceptance score, and hard gates. Files live in ``rubrics/`` as
``<rubric_version>.json``; they are strictly parsed, validated against the format's own
schema (``rubrics/rubric.schema.json``, loaded through the schema registry's lint and
compiler), and then checked for what a schema cannot say: unique ids, weights summing to
one, minimums and the acceptance score inside the scale. The SHA-256 of the exact file
bytes identifies the rubric in the manifest and on every scored row; a campaign may pin it.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar, Final

from pipeline.core.bundled import bundled_dir
from pipeline.core.errors import EXIT_INPUT, RowgateError
from pipeline.core.files import read_regular
from pipeline.core.reasons import RejectLine
from pipeline.records.lineage import check_pin
from pipeline.records.schemas import SchemaEntry, SchemaError, load_schema
from pipeline.records.strict_json import parse_object

__all__ = [
    "FORMAT_SCHEMA",
    "RUBRIC_DIR",
    "WEIGHT_TOLERANCE",
    "Criterion",
    "Gate",
    "GateKind",
    "MissingSourceError",
    "ReviewPolicy",
    "Rubric",
    "RubricError",
    "RubricRegistry",
    "Severity",
    "State",
    "load_rubric",
    "plain_number",
]

RUBRIC_DIR: Final = bundled_dir("rubrics")
FORMAT_SCHEMA: Final = "rubric.schema.json"
#: Seed 000: "validate that weights sum to one"; within this absolute tolerance.
WEIGHT_TOLERANCE: Final = 1e-9


class RubricError(RowgateError, ValueError):
    """A rubric or policy file that rowgate refuses to use, or a digest mismatch."""

    exit_code: ClassVar[int] = EXIT_INPUT
    #: The AutoQA evaluation contract §19 class (:mod:`pipeline.rubrics.failures`).
    failure_class: str = "contract_inconsistency"


class MissingSourceError(RubricError):
    """A rubric or policy file that is not there or cannot be read."""

    failure_class = "missing_required_source"


class State(StrEnum):
    """A criterion's or gate's verdict for one row: the AutoQA evaluation contract's six
    (§11.3). Scoring decides four of them from recorded evidence and never guesses
    ``partially_met`` or ``ambiguous``; a decision policy may name all six."""

    MET = "met"
    PARTIALLY_MET = "partially_met"
    NOT_MET = "not_met"
    NOT_APPLICABLE = "not_applicable"
    UNKNOWN = "unknown"
    AMBIGUOUS = "ambiguous"

    @property
    def uncertain(self) -> bool:
        """Uncertainty (§6.9): never silently converted into success or failure."""
        return self in (State.UNKNOWN, State.AMBIGUOUS)


class Severity(StrEnum):
    """The impact of a finding (AutoQA evaluation contract §8.12), kept apart from the
    action it leads to: a major defect may be repairable (rework, not reject)."""

    NONE = "none"
    ADVISORY = "advisory"
    MINOR = "minor"
    MAJOR = "major"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        return list(Severity).index(self)


class GateKind(StrEnum):
    """How a gate's evidence is compared with the rubric's value."""

    #: evidence must equal the boolean value (``syntax_valid: true``)
    EQUALS = "equals"
    #: evidence must be at most the value (``max_*``)
    AT_MOST = "at_most"
    #: evidence must be at least the value (``min_*``)
    AT_LEAST = "at_least"


@dataclass(frozen=True)
class Criterion:
    id: str
    weight: float
    minimum_score: float


@dataclass(frozen=True)
class Gate:
    name: str
    kind: GateKind
    #: the required boolean (EQUALS) or the bound (AT_MOST / AT_LEAST)
    value: bool | float

    def describe(self) -> str:
        if self.kind is GateKind.EQUALS:
            return f"{self.name} must be {str(self.value).lower()}"
        word = "at most" if self.kind is GateKind.AT_MOST else "at least"
        return f"{self.name} must be {word} {plain_number(float(self.value))}"


def plain_number(value: float) -> str:
    """A rubric's number as its messages and reason details write it: ``3`` for ``3.0``,
    otherwise Python's shortest round-trip digits (``0.75``, ``1e-07``).

    >>> plain_number(3.0), plain_number(0.75)
    ('3', '0.75')
    """
    return str(int(value)) if value.is_integer() else repr(value)


@dataclass(frozen=True)
class ReviewPolicy:
    """Seed 000's ``review_policy``: how many independent reviews an item needs, how many
    of them must vote to accept, and what happens otherwise. Applied across the rows of
    a kind by the review stage (:mod:`pipeline.decide.stages.review`)."""

    independent_reviews: int
    minimum_accept_votes: int
    #: ``adjudicate`` / ``escalate`` (quarantined: a person decides) or ``reject``
    disagreement_action: str

    def describe(self) -> dict[str, Any]:
        return {
            "independent_reviews": self.independent_reviews,
            "minimum_accept_votes": self.minimum_accept_votes,
            "disagreement_action": self.disagreement_action,
        }


@dataclass(frozen=True)
class Rubric:
    id: str
    path: Path
    sha256: str
    scale_minimum: float
    scale_maximum: float
    criteria: tuple[Criterion, ...]
    weighted_acceptance_score: float
    gates: tuple[Gate, ...]
    #: applied across rows by the review stage unless the campaign only records it
    review_policy: ReviewPolicy | None

    def criterion(self, criterion_id: str) -> Criterion:
        for c in self.criteria:
            if c.id == criterion_id:
                return c
        raise KeyError(criterion_id)

    def gate(self, name: str) -> Gate:
        for g in self.gates:
            if g.name == name:
                return g
        raise KeyError(name)

    def describe(self) -> dict[str, Any]:
        """The manifest's record of this rubric."""
        return {
            "id": self.id,
            "file": self.path.name,
            "sha256": self.sha256,
            "scale": [self.scale_minimum, self.scale_maximum],
            "criteria": {c.id: [c.weight, c.minimum_score] for c in self.criteria},
            "weighted_acceptance_score": self.weighted_acceptance_score,
            "hard_gates": {g.name: g.value for g in self.gates},
            "review_policy": self.review_policy.describe() if self.review_policy else None,
        }


def _format_schema(directory: Path) -> SchemaEntry:
    """The rubric format's schema: beside the rubrics, else the shipped one."""
    path = directory / FORMAT_SCHEMA
    if not path.is_file():
        path = RUBRIC_DIR / FORMAT_SCHEMA
    try:
        return load_schema(path, "rubric")
    except SchemaError as exc:
        raise RubricError.listing(*exc.lines) from None


def _gate(name: str, value: bool | float) -> Gate:
    if isinstance(value, bool):
        return Gate(name, GateKind.EQUALS, value)
    kind = GateKind.AT_MOST if name.startswith("max_") else GateKind.AT_LEAST
    return Gate(name, kind, float(value))


def load_rubric(path: Path, format_schema: SchemaEntry | None = None) -> Rubric:
    """Read, strictly parse and validate one rubric file; every problem is listed."""
    data = read_regular(path, f"cannot read rubric {path}", error=MissingSourceError)
    try:
        document = parse_object(data, max_depth=16, max_items=1000)
    except RejectLine as exc:
        raise RubricError(
            f"{path}: not strict JSON ({exc.reason.code}: {exc.reason.detail})"
        ) from None
    schema = format_schema or _format_schema(path.parent)
    problems = [f"{r.path}: {r.detail}" for r in schema.errors(document)]
    if problems:
        raise RubricError.listing(f"{path}: not a valid rubric:", *problems)

    low, high = float(document["scale"]["minimum"]), float(document["scale"]["maximum"])
    criteria = tuple(
        Criterion(c["id"], float(c["weight"]), float(c["minimum_score"]))
        for c in document["criteria"]
    )
    acceptance = float(document["weighted_acceptance_score"])
    if not low < high:
        problems.append("$.scale: minimum must be below maximum")
    ids = [c.id for c in criteria]
    problems += [
        f"$.criteria: id {i!r} is used more than once"
        for i in sorted({i for i in ids if ids.count(i) > 1})
    ]
    total = math.fsum(c.weight for c in criteria)
    if abs(total - 1.0) > WEIGHT_TOLERANCE:
        problems.append(f"$.criteria: weights sum to {total!r}, not 1 (within 1e-9)")
    problems += [
        f"$.criteria[{n}].minimum_score: {plain_number(c.minimum_score)} is outside the scale "
        f"{plain_number(low)}..{plain_number(high)}"
        for n, c in enumerate(criteria)
        if not low <= c.minimum_score <= high
    ]
    if not low <= acceptance <= high:
        problems.append(
            f"$.weighted_acceptance_score: {plain_number(acceptance)} is outside the scale "
            f"{plain_number(low)}..{plain_number(high)}"
        )
    if document["rubric_version"] != path.stem:
        problems.append(
            f"$.rubric_version: {document['rubric_version']!r} does not match the file name "
            f"{path.name!r} (expected {path.stem!r})"
        )
    review = document.get("review_policy")
    if review is not None and review["minimum_accept_votes"] > review["independent_reviews"]:
        problems.append(
            f"$.review_policy.minimum_accept_votes: {review['minimum_accept_votes']} is more "
            f"than the {review['independent_reviews']} independent reviews"
        )
    if problems:
        raise RubricError.listing(f"{path}: not a valid rubric:", *problems)
    return Rubric(
        id=document["rubric_version"],
        path=path,
        sha256=hashlib.sha256(data).hexdigest(),
        scale_minimum=low,
        scale_maximum=high,
        criteria=criteria,
        weighted_acceptance_score=acceptance,
        gates=tuple(_gate(name, value) for name, value in document["hard_gates"].items()),
        review_policy=ReviewPolicy(**review) if review is not None else None,
    )


class RubricRegistry:
    """Rubrics by id (``<directory>/<id>.json``), checked against the campaign's pins."""

    def __init__(self, directory: Path = RUBRIC_DIR, pins: dict[str, str] | None = None) -> None:
        self.directory = directory
        self._pins = dict(pins or {})
        self._rubrics: dict[str, Rubric] = {}
        self._schema: SchemaEntry | None = None

    def get(self, rubric_id: str) -> Rubric:
        found = self._rubrics.get(rubric_id)
        if found is not None:
            return found
        path = self.directory / f"{rubric_id}.json"
        if rubric_id.endswith(".schema") or not path.is_file():
            raise MissingSourceError(f"no rubric {rubric_id!r} in {self.directory}")
        if self._schema is None:
            self._schema = _format_schema(self.directory)
        rubric = load_rubric(path, self._schema)
        check_pin(f"rubric {rubric_id!r}", rubric.sha256, self._pins.get(rubric_id), RubricError)
        self._rubrics[rubric_id] = rubric
        return rubric
