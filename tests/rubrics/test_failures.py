"""The AutoQA evaluation contract's §19 failure classes: each rowgate failure maps to one."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.core.config import ConfigError
from pipeline.core.errors import InputError
from pipeline.kinds.rules import ReferenceTableError
from pipeline.rubrics.decision_policy import load_policy, validate_policy
from pipeline.rubrics.failures import FailureClass, error_failure_class, reason_failure_class
from pipeline.rubrics.model import MissingSourceError, RubricError, RubricRegistry


def test_policy_and_contract_failures_are_distinguished(tmp_path: Path) -> None:
    with pytest.raises(MissingSourceError) as missing:
        load_policy(tmp_path / "absent.toml")
    assert error_failure_class(missing.value) is FailureClass.MISSING_REQUIRED_SOURCE
    with pytest.raises(MissingSourceError):
        RubricRegistry(tmp_path).get("code-review-v9")
    path = tmp_path / "p.toml"
    path.write_text('policy = "p"\nversion = "banana"\ntarget = "attempt"\nrules = []\n')
    with pytest.raises(RubricError) as inconsistent:
        validate_policy(load_policy(path), None)
    assert error_failure_class(inconsistent.value) is FailureClass.CONTRACT_INCONSISTENCY
    assert error_failure_class(ConfigError("x")) is FailureClass.CONTRACT_INCONSISTENCY
    assert error_failure_class(ReferenceTableError("x")) is FailureClass.EVIDENCE_RETRIEVAL_FAILURE
    assert error_failure_class(InputError("x")) is FailureClass.INVALID_INPUT
    assert error_failure_class(RuntimeError("worker died")) is None


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("line.too_large", FailureClass.CONTEXT_TRUNCATION),
        ("json.duplicate_key", FailureClass.INVALID_INPUT),
        ("schema.required", FailureClass.MALFORMED_STRUCTURED_OUTPUT),
        ("semantic.pairwise-v2.candidates_distinct", FailureClass.INVALID_INPUT),
        ("rubric.gate_unknown", FailureClass.DETERMINISTIC_VALIDATOR_FAILURE),
        ("policy.calibration_unavailable", FailureClass.CALIBRATION_UNAVAILABLE),
        ("pii.uncertain", FailureClass.SECURITY_ANOMALY),
        # verdicts and decisions are findings about the row, not pipeline failures
        ("rubric.below_minimum", None),
        ("policy.reject", None),
        ("cross.idempotency_conflict", None),
    ],
)
def test_reason_codes_map_to_failure_classes(code: str, expected: FailureClass | None) -> None:
    assert reason_failure_class(code) is expected


def test_every_class_of_section_19_is_named() -> None:
    assert len(FailureClass) == 10
