"""Rubric files: the seed's rubric byte-for-byte in meaning, the format's checks, pins."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from pipeline.records.schemas import lint_schema
from pipeline.rubrics.model import (
    RUBRIC_DIR,
    GateKind,
    RubricError,
    RubricRegistry,
    load_rubric,
    plain_number,
)
from tests.conftest import SHARED

SEED_000_FILE = "seeds/000_63cee1e704e6a807.txt"
SEED_000 = SHARED / SEED_000_FILE


def _seed_rubric() -> Any:
    text = SEED_000.read_text("utf-8")
    block = re.search(r"enforced by the UI: ```json(.*?)```", text, re.S)
    assert block is not None
    return json.loads(block.group(1))


@pytest.mark.needs_shared(SEED_000_FILE)
def test_code_review_v1_is_the_seed_rubric() -> None:
    shipped = json.loads((RUBRIC_DIR / "code-review-v1.json").read_text("utf-8"))
    # Compare with types: 4.0 must stay a float and 4 an integer, as the seed writes them.
    assert json.dumps(shipped, sort_keys=True) == json.dumps(_seed_rubric(), sort_keys=True)


def test_code_review_v1_loads_with_its_digest() -> None:
    rubric = RubricRegistry().get("code-review-v1")
    assert rubric.id == "code-review-v1"
    assert [(c.id, c.weight, c.minimum_score) for c in rubric.criteria] == [
        ("correctness", 0.45, 4.0),
        ("instruction_adherence", 0.25, 4.0),
        ("reasoning_evidence", 0.20, 3.0),
        ("readability", 0.10, 3.0),
    ]
    assert (rubric.scale_minimum, rubric.scale_maximum) == (1.0, 5.0)
    assert rubric.weighted_acceptance_score == 4.0
    assert {g.name: (g.kind, g.value) for g in rubric.gates} == {
        "required_tests_pass": (GateKind.EQUALS, True),
        "syntax_valid": (GateKind.EQUALS, True),
        "max_cyclomatic_complexity_per_function": (GateKind.AT_MOST, 10.0),
        "unapproved_dependencies": (GateKind.EQUALS, False),
    }
    import hashlib

    assert rubric.sha256 == hashlib.sha256(rubric.path.read_bytes()).hexdigest()


def test_format_schema_passes_the_registry_lint() -> None:
    schema = json.loads((RUBRIC_DIR / "rubric.schema.json").read_text("utf-8"))
    assert lint_schema(schema) == []


def _write(tmp_path: Path, document: dict[str, Any], name: str = "r-1") -> Path:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(document))
    return path


def _valid() -> dict[str, Any]:
    """The shipped rubric (the seed's, as the test above checks where ../shared is)."""
    rubric = json.loads((RUBRIC_DIR / "code-review-v1.json").read_text("utf-8"))
    rubric["rubric_version"] = "r-1"
    return rubric


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r["criteria"].append(dict(r["criteria"][0], weight=0.0)), "exclusiveMinimum"),
        (lambda r: r["criteria"][0].update(weight=0.5), "weights sum to"),
        (
            lambda r: r["criteria"][1].update(id="correctness"),
            "'correctness' is used more than once",
        ),
        (
            lambda r: r["criteria"][0].update(minimum_score=6),
            r"criteria\[0\].minimum_score: 6 is outside the scale 1..5",
        ),
        (lambda r: r["criteria"][3].update(minimum_score=0.5), r"criteria\[3\].minimum_score"),
        (
            lambda r: r.update(weighted_acceptance_score=5.5),
            "weighted_acceptance_score: 5.5 is outside",
        ),
        (lambda r: r.update(scale={"minimum": 5, "maximum": 1}), "minimum must be below maximum"),
        (lambda r: r["hard_gates"].update(max_lines=True), "hard_gates"),
        (lambda r: r["hard_gates"].update(syntax_valid=1), "hard_gates"),
        (lambda r: r.update(extra=1), "undeclared property"),
        (lambda r: r.update(rubric_version="other"), "does not match the file name"),
        (lambda r: r.pop("criteria"), r"\$: missing criteria"),
    ],
)
def test_invalid_rubrics_are_refused(tmp_path: Path, change: Any, message: str) -> None:
    rubric = _valid()
    change(rubric)
    with pytest.raises(RubricError, match=message):
        load_rubric(_write(tmp_path, rubric))


def test_weights_within_tolerance_are_accepted(tmp_path: Path) -> None:
    rubric = _valid()
    rubric["criteria"] = [
        {"id": f"c{i}", "weight": 0.1, "minimum_score": 1} for i in range(10)
    ]  # 0.1 * 10 is 0.9999999999999999 in binary floating point
    assert len(load_rubric(_write(tmp_path, rubric)).criteria) == 10


def test_duplicate_keys_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "r-1.json"
    path.write_text('{"rubric_version": "r-1", "rubric_version": "r-1"}')
    with pytest.raises(RubricError, match=r"json\.duplicate_key"):
        load_rubric(path)


def test_pins(tmp_path: Path) -> None:
    shutil.copy(RUBRIC_DIR / "code-review-v1.json", tmp_path)
    shutil.copy(RUBRIC_DIR / "rubric.schema.json", tmp_path)
    good = RubricRegistry(tmp_path).get("code-review-v1").sha256
    assert RubricRegistry(tmp_path, {"code-review-v1": good}).get("code-review-v1").sha256 == good
    with pytest.raises(RubricError, match="does not match the pinned"):
        RubricRegistry(tmp_path, {"code-review-v1": "0" * 64}).get("code-review-v1")
    with pytest.raises(RubricError, match="no rubric 'absent'"):
        RubricRegistry(tmp_path).get("absent")
    with pytest.raises(RubricError, match="no rubric"):
        RubricRegistry(tmp_path).get("rubric.schema")


@pytest.mark.parametrize(
    ("value", "text"),
    [(3.0, "3"), (-0.0, "0"), (0.75, "0.75"), (1e-07, "1e-07"), (1e16, "10000000000000000")],
)
def test_plain_number_is_how_rubric_messages_write_numbers(value: float, text: str) -> None:
    """One function for the rubric loader's messages and the scoring reasons' details."""
    assert plain_number(value) == text
