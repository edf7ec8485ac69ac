"""Named report presets: the rows, confidence or selection, and correctness of a record
kind, defined once.

``pw-decide-row`` (seed 004, issue 7): coverage is the share of turns the engine
answered (``engine.state == "answered"``); risk is the share of answered turns whose
preloaded tools (``engine.preloaded``) missed a tool the turn then called
(``labels.tools``), i.e. ``labels.tools ⊄ engine.preloaded``.

``autoqa-criteria`` (the AutoQA evaluation contract §13.2: calibrated confidence is
"empirically mapped to observed correctness for a defined event, criterion family, ...
and slice"): one row per criterion assessment of an autoqa-eval-1 document; the event
is "the verdict equals the reference verdict", its confidence the assessment's
``calibratedConfidence``. Assessments without a reference verdict or without a
calibrated confidence are left out (counted as dropped).

A preset's expressions are built when a report is evaluated, not when this module is
imported: the command line lists the presets in its help without loading polars.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    import polars as pl

__all__ = ["PRESETS", "Preset"]


@dataclass(frozen=True, kw_only=True)
class Preset:
    """Expressions that turn a kind's rows into (confidence or selected, correct) pairs,
    each given as the function that builds it.

    A preset with a ``confidence`` is scored (calibration and a risk-coverage curve);
    one with ``selected`` measures the system's own abstention (an operating point).
    """

    name: str
    #: the record kind whose accepted rows the preset reads from a run directory
    kind: str
    description: str
    correct: Callable[[], pl.Expr]
    correct_definition: str
    selected: Callable[[], pl.Expr] | None = None
    selected_definition: str | None = None
    confidence: Callable[[], pl.Expr] | None = None
    confidence_definition: str | None = None
    #: reshapes the kind's rows into the rows evaluated (e.g. one per criterion), before
    #: any expression, ``--where`` or ``--by`` is applied; ``None``: one row per record
    rows: Callable[[pl.LazyFrame], pl.LazyFrame] | None = None
    rows_definition: str | None = None
    #: caveats printed in every report that uses the preset
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if (self.selected is None) == (self.confidence is None):
            raise ValueError(f"preset {self.name}: give exactly one of selected or confidence")

    @property
    def measured(self) -> tuple[str, str]:
        """What the preset measures: ``("confidence", definition)`` or ``("selected", ...)``."""
        if self.confidence_definition is not None:
            return "confidence", self.confidence_definition
        return "selected", self.selected_definition or ""


def _answered() -> pl.Expr:
    import polars as pl  # lazy: see the module's docstring

    return pl.col("engine").struct.field("state") == "answered"


def _preloaded_every_called_tool() -> pl.Expr:
    import polars as pl  # lazy: see the module's docstring

    called = pl.col("labels").struct.field("tools")
    preloaded = pl.col("engine").struct.field("preloaded")
    # set_difference is empty exactly when every called tool was preloaded
    return called.list.set_difference(preloaded).list.len() == 0


def _calibrated_confidence() -> pl.Expr:
    import polars as pl  # lazy: see the module's docstring

    return pl.col("calibratedConfidence")


def _verdict_is_reference() -> pl.Expr:
    import polars as pl  # lazy: see the module's docstring

    # null when there is no reference: such rows are dropped, never counted wrong
    return pl.col("verdict") == pl.col("referenceVerdict")


def _criterion_assessments(frame: pl.LazyFrame) -> pl.LazyFrame:
    """One row per criterion assessment, with the document's id, status, contract version
    and evaluator model beside the assessment's fields (``--by criterionId``, ``--by
    model``, ``--where "status = 'final'"``)."""
    import polars as pl  # lazy: see the module's docstring

    return (
        frame.select(
            "evaluationId",
            "status",
            pl.col("contractRef").struct.field("contractVersion"),
            pl.col("evaluator").struct.field("model"),
            "criterionAssessments",
        )
        .explode("criterionAssessments")
        .unnest("criterionAssessments")
    )


PRESETS: Final[dict[str, Preset]] = {
    "pw-decide-row": Preset(
        name="pw-decide-row",
        kind="pw-decide-row-1",
        description=(
            "Turn-load decisions: coverage = answered turns, risk = answered turns whose "
            "preloaded tools missed a tool the turn called."
        ),
        selected=_answered,
        selected_definition='engine.state == "answered"',
        correct=_preloaded_every_called_tool,
        correct_definition="every tool in labels.tools is in engine.preloaded",
        notes=(
            "Seed 004, engine.state: an answered turn carried what the engine chose, so its "
            "tool labels are not independent of the engine; the miss rate of answered turns "
            "is measured against labels the engine influenced.",
            "Partial turns (partial = true) label only their request_tools needs; pass "
            "--where 'NOT partial' to measure completed turns only.",
        ),
    ),
    "autoqa-criteria": Preset(
        name="autoqa-criteria",
        kind="autoqa-eval-1",
        description=(
            "AutoQA criterion assessments: calibrated confidence against whether the verdict "
            "equals the reference verdict, one row per criterion assessment."
        ),
        rows=_criterion_assessments,
        rows_definition="one row per element of criterionAssessments",
        confidence=_calibrated_confidence,
        confidence_definition="calibratedConfidence",
        correct=_verdict_is_reference,
        correct_definition="verdict == referenceVerdict (assessments with a reference only)",
        notes=(
            "AutoQA contract §13.2: calibrated confidence is mapped to observed correctness "
            "for a defined event and slice; here the event is the criterion verdict agreeing "
            "with the benchmark's reference verdict. Slice with --by criterionId (criterion "
            "families) or --by model.",
            "Assessments without a reference verdict or with an uncalibrated (null) "
            "confidence are dropped and counted in the report's data section; pass --where "
            "\"status = 'final'\" to leave out provisional and failed evaluations.",
        ),
    ),
}
