"""The failure classes of the AutoQA evaluation contract (§19), mapped onto rowgate.

"A failed pipeline MUST distinguish" ten classes, and "operational failures MUST NOT be
converted into criterion failures against the attempter or reviewer". rowgate reports a
failure either on a row (a reason code: the line is rejected, quarantined or escalated,
never scored as a failing criterion) or for the run (an error raised before or instead of
any output). :func:`reason_failure_class` and :func:`error_failure_class` say which class
each is; ``docs/rubrics-and-policy.md#failure-classes`` is the table.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from pipeline.core.config import ConfigError
from pipeline.core.errors import InputError
from pipeline.kinds.rules import ReferenceTableError
from pipeline.records.schemas import SchemaError
from pipeline.rubrics.decision_policy import CALIBRATION_UNAVAILABLE
from pipeline.rubrics.model import RubricError

__all__ = ["FailureClass", "error_failure_class", "reason_failure_class"]


class FailureClass(StrEnum):
    """AutoQA evaluation contract §19, in its order."""

    INVALID_INPUT = "invalid_input"
    MISSING_REQUIRED_SOURCE = "missing_required_source"
    DETERMINISTIC_VALIDATOR_FAILURE = "deterministic_validator_failure"
    #: never raised: rowgate calls no model
    MODEL_TIMEOUT_OR_PROVIDER_ERROR = "model_timeout_or_provider_error"
    MALFORMED_STRUCTURED_OUTPUT = "malformed_structured_output"
    CONTEXT_TRUNCATION = "context_truncation"
    EVIDENCE_RETRIEVAL_FAILURE = "evidence_retrieval_failure"
    CONTRACT_INCONSISTENCY = "contract_inconsistency"
    CALIBRATION_UNAVAILABLE = "calibration_unavailable"
    SECURITY_ANOMALY = "security_anomaly"


#: Reason codes (exact, or ``prefix.`` for a family) → class; first match wins.
_REASONS: Final = (
    ("line.too_large", FailureClass.CONTEXT_TRUNCATION),
    ("json.", FailureClass.INVALID_INPUT),
    ("line.", FailureClass.INVALID_INPUT),
    ("schema.", FailureClass.MALFORMED_STRUCTURED_OUTPUT),
    ("semantic.", FailureClass.INVALID_INPUT),
    ("rubric.gate_unknown", FailureClass.DETERMINISTIC_VALIDATOR_FAILURE),
    (CALIBRATION_UNAVAILABLE, FailureClass.CALIBRATION_UNAVAILABLE),
    ("pii.", FailureClass.SECURITY_ANOMALY),
)


def reason_failure_class(code: str) -> FailureClass | None:
    """The §19 class of a row's reason code, or None for a verdict or decision
    (``rubric.below_minimum``, ``policy.reject``, ``cross.*``, ``dedupe.*``...): those are
    findings about the row, not failures of the pipeline."""
    for pattern, failure in _REASONS:
        if code == pattern or (pattern.endswith(".") and code.startswith(pattern)):
            return failure
    return None


def error_failure_class(error: BaseException) -> FailureClass | None:
    """The §19 class of an error that fails a run or a command, or None for an
    operational failure outside §19's list (a crashed worker, a full disk)."""
    if isinstance(error, RubricError):
        return FailureClass(error.failure_class)
    if isinstance(error, ReferenceTableError):
        return FailureClass.EVIDENCE_RETRIEVAL_FAILURE
    if isinstance(error, InputError):
        return FailureClass.INVALID_INPUT
    if isinstance(error, SchemaError | ConfigError):
        return FailureClass.CONTRACT_INCONSISTENCY
    return None
