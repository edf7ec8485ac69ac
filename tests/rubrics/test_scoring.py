"""Vectorised scoring: hand-computed rows of the seed's rubric, and a property test
against the per-row reference on generated rubrics and rows."""

from __future__ import annotations

import math
import random
from fractions import Fraction
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.rubrics.decision_policy import decide_frame, load_policy
from pipeline.rubrics.model import RUBRIC_DIR, Criterion, Gate, GateKind, Rubric, RubricRegistry
from pipeline.rubrics.scoring import score_frame
from tests.rubrics.reference import reference_score

RUBRIC = RubricRegistry().get("code-review-v1")
POLICY = load_policy(RUBRIC_DIR / "code-review-v1.policy.toml")

PERFECT = {"correctness": 5, "instruction_adherence": 5, "reasoning_evidence": 5, "readability": 5}
ALL_GATES_PASS = {
    "required_tests_pass": True,
    "syntax_valid": True,
    "max_cyclomatic_complexity_per_function": 4.0,
    "unapproved_dependencies": False,
}


def _row(ratings: dict[str, float], gates: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {f"criterion:{k}": float(v) for k, v in ratings.items()}
    row.update({f"gate:{k}": v for k, v in gates.items()})
    return row


def _scored(*rows: dict[str, Any]) -> pl.DataFrame:
    observed = pl.DataFrame(
        [{"n": n, **row} for n, row in enumerate(rows)],
        schema={
            "n": pl.Int64,
            **{f"criterion:{c.id}": pl.Float64 for c in RUBRIC.criteria},
            "gate:required_tests_pass": pl.Boolean,
            "gate:syntax_valid": pl.Boolean,
            "gate:max_cyclomatic_complexity_per_function": pl.Float64,
            "gate:unapproved_dependencies": pl.Boolean,
        },
    )
    scored = score_frame(RUBRIC, observed)
    codes = pl.col("_reasons_add").list.eval(pl.element().struct.field("code"))
    return decide_frame(POLICY, RUBRIC, scored.with_columns(_reason_codes=codes))


def test_a_row_that_passes() -> None:
    # 0.45·5 + 0.25·4 + 0.20·4 + 0.10·3 = 2.25 + 1.00 + 0.80 + 0.30 = 4.35 ≥ 4.0
    ratings = {
        "correctness": 5,
        "instruction_adherence": 4,
        "reasoning_evidence": 4,
        "readability": 3,
    }
    row = _scored(_row(ratings, ALL_GATES_PASS)).row(0, named=True)
    assert row["_weighted_score"] == pytest.approx(4.35, abs=1e-12)
    assert row["_weighted_state"] == "met"
    assert {row[f"_criterion_{c}_state"] for c in ratings} == {"met"}
    assert {row[f"_gate_{g}"] for g in ALL_GATES_PASS} == {"met"}
    assert row["_reasons_add"] == []
    assert (row["_decision"], row["_policy_trace"]) == ("accept", ["accept"])


def test_a_row_failing_a_minimum_with_a_high_weighted_score() -> None:
    # 0.45·5 + 0.25·5 + 0.20·5 + 0.10·2 = 4.7 ≥ 4.0, but readability 2 < its minimum 3:
    # each minimum is enforced on its own, the weighted score cannot lift it.
    ratings = {
        "correctness": 5,
        "instruction_adherence": 5,
        "reasoning_evidence": 5,
        "readability": 2,
    }
    row = _scored(_row(ratings, ALL_GATES_PASS)).row(0, named=True)
    assert row["_weighted_score"] == pytest.approx(4.7, abs=1e-12)
    assert row["_weighted_state"] == "met"
    assert row["_criterion_readability_state"] == "not_met"
    assert row["_criterion_correctness_state"] == "met"
    assert [r["code"] for r in row["_reasons_add"]] == ["rubric.below_minimum"]
    assert row["_reasons_add"][0]["detail"] == "readability: below the minimum 3"
    assert (row["_decision"], row["_policy_trace"]) == ("rework", ["criterion-below-minimum"])


def test_a_row_failing_a_gate_with_perfect_ratings() -> None:
    # Perfect ratings would score 5.0, but the gate fails first: no weighted score at all.
    row = _scored(_row(PERFECT, {**ALL_GATES_PASS, "syntax_valid": False})).row(0, named=True)
    assert row["_gate_syntax_valid"] == "not_met"
    assert {row[f"_criterion_{c}_state"] for c in PERFECT} == {"met"}
    assert row["_weighted_score"] is None
    assert row["_weighted_state"] == "unknown"
    assert [r["code"] for r in row["_reasons_add"]] == ["rubric.gate_not_met"]
    assert (row["_decision"], row["_policy_trace"]) == ("reject", ["hard-gate-failed"])

    too_complex = {**ALL_GATES_PASS, "max_cyclomatic_complexity_per_function": 11.0}
    row = _scored(_row(PERFECT, too_complex)).row(0, named=True)
    assert row["_gate_max_cyclomatic_complexity_per_function"] == "not_met"
    assert row["_reasons_add"][0]["detail"] == (
        "max_cyclomatic_complexity_per_function: not met; "
        "max_cyclomatic_complexity_per_function must be at most 10"
    )
    assert row["_decision"] == "reject"


def test_reason_details_never_quote_a_rows_scores_or_evidence() -> None:
    # Issue 15 item 17: details reach report.html; a row's numbers (possibly record values)
    # stay in the score columns. 0.45·1.37 + … is below the minimum, the gate evidence
    # 12.75 fails, and a second row's weighted score 3.8125 is below the acceptance score.
    failing = _row({**PERFECT, "correctness": 1.37}, ALL_GATES_PASS)
    complex_ = _row(PERFECT, {**ALL_GATES_PASS, "max_cyclomatic_complexity_per_function": 12.75})
    weak = _row({"correctness": 4, "instruction_adherence": 4, "reasoning_evidence": 3,
                 "readability": 3.125}, ALL_GATES_PASS)  # fmt: skip
    frame = _scored(failing, complex_, weak)
    details = [r["detail"] for reasons in frame["_reasons_add"] for r in reasons]
    codes = [r["code"] for reasons in frame["_reasons_add"] for r in reasons]
    assert "rubric.below_minimum" in codes
    assert "rubric.gate_not_met" in codes
    assert "rubric.below_acceptance" in codes
    assert frame["_weighted_score"][2] < 4.0
    quoted = ("1.37", "12.75", "3.125", str(round(frame["_weighted_score"][2], 4))[:4])
    assert not [d for d in details for q in quoted if q in d], details
    assert "correctness: below the minimum 4" in details


def test_a_row_with_an_unknown_gate() -> None:
    # No test evidence: the gate is unknown, never a pass, so no weighted score either.
    row = _scored(_row(PERFECT, {**ALL_GATES_PASS, "required_tests_pass": None})).row(0, named=True)
    assert row["_gate_required_tests_pass"] == "unknown"
    assert row["_weighted_score"] is None
    assert [r["code"] for r in row["_reasons_add"]] == ["rubric.gate_unknown"]
    assert (row["_decision"], row["_policy_trace"]) == ("escalate", ["evidence-missing"])


def test_unknown_gate_does_not_hide_a_known_failure() -> None:
    # A definite failure decides before an unknown gate: the row cannot pass either way.
    gates = {**ALL_GATES_PASS, "required_tests_pass": None, "unapproved_dependencies": True}
    row = _scored(_row(PERFECT, gates)).row(0, named=True)
    assert row["_decision"] == "reject"


def test_criteria_unknown_out_of_scale_and_not_applicable() -> None:
    observed = pl.DataFrame(
        {
            "criterion:correctness": [5.0, None, 7.0, 5.0],
            "criterion:instruction_adherence": [5.0, 5.0, 5.0, None],
            "applies:instruction_adherence": [True, True, True, False],
            "criterion:reasoning_evidence": [5.0, 5.0, 5.0, 4.0],
            "applies:reasoning_evidence": [None, True, True, True],
            "criterion:readability": [5.0, 5.0, 5.0, 3.0],
        },
        schema_overrides={"applies:reasoning_evidence": pl.Boolean},
    )
    scored = score_frame(
        RUBRIC,
        observed,
        not_applicable_gates=frozenset(g.name for g in RUBRIC.gates),
        paths={"correctness": "$.ratings.factuality"},
    )
    states = scored.select(pl.col("^_criterion_.*_state$")).rows()
    assert states == [
        ("met", "met", "unknown", "met"),
        ("unknown", "met", "met", "met"),
        ("unknown", "met", "met", "met"),
        ("met", "not_applicable", "met", "met"),
    ]
    reasons = scored["_reasons_add"].to_list()
    assert reasons[0] == [
        {
            "code": "rubric.criterion_unknown",
            "path": "",
            "detail": "reasoning_evidence: applicability unknown",
        }
    ]
    assert reasons[1] == [
        {
            "code": "rubric.criterion_unknown",
            "path": "$.ratings.factuality",
            "detail": "correctness: no score",
        }
    ]
    assert reasons[2][0]["code"] == "rubric.score_out_of_scale"
    assert scored["_weighted_score"].to_list()[:3] == [None, None, None]
    # Weights renormalise over applicable criteria: (0.45·5 + 0.20·4 + 0.10·3) / 0.75.
    assert scored["_weighted_score"][3] == pytest.approx((2.25 + 0.8 + 0.3) / 0.75, abs=1e-12)


# -- property: vectorised == per-row reference ------------------------------------------


@st.composite
def rubrics(draw: st.DrawFn) -> tuple[Rubric, frozenset[str]]:
    low = draw(st.integers(-5, 5))
    high = low + draw(st.integers(1, 10))
    size = draw(st.integers(1, 6))
    raw = draw(st.lists(st.integers(1, 20), min_size=size, max_size=size))
    weights = [k / sum(raw) for k in raw]
    within = st.floats(low, high, allow_nan=False)
    criteria = tuple(
        Criterion(f"c{i}", w, draw(st.one_of(within, st.integers(low, high).map(float))))
        for i, w in enumerate(weights)
    )
    gates = []
    for i in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(list(GateKind)))
        if kind is GateKind.EQUALS:
            gates.append(Gate(f"g{i}", kind, draw(st.booleans())))
        else:
            prefix = "max" if kind is GateKind.AT_MOST else "min"
            gates.append(Gate(f"{prefix}_g{i}", kind, float(draw(st.integers(-3, 3)))))
    rubric = Rubric(
        id="generated",
        path=Path("generated.json"),
        sha256="0" * 64,
        scale_minimum=float(low),
        scale_maximum=float(high),
        criteria=criteria,
        weighted_acceptance_score=draw(within),
        gates=tuple(gates),
        review_policy=None,
    )
    waived = draw(st.sets(st.sampled_from([g.name for g in gates]))) if gates else set()
    return rubric, frozenset(waived)


@st.composite
def observations(draw: st.DrawFn, rubric: Rubric) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    low, high = rubric.scale_minimum, rubric.scale_maximum
    score = st.one_of(
        st.none(),
        st.integers(int(low), int(high)).map(float),
        st.floats(low - 2, high + 2, allow_nan=False),
    )
    schema: dict[str, Any] = {}
    for c in rubric.criteria:
        schema[f"criterion:{c.id}"] = pl.Float64
        if draw(st.booleans()):
            schema[f"applies:{c.id}"] = pl.Boolean
    strategies: dict[str, Any] = {}
    for g in rubric.gates:
        if draw(st.integers(0, 4)) == 0:
            continue  # no evidence column at all
        if g.kind is GateKind.EQUALS:
            schema[f"gate:{g.name}"] = pl.Boolean
            strategies[g.name] = st.one_of(st.none(), st.booleans())
        else:
            schema[f"gate:{g.name}"] = pl.Float64
            strategies[g.name] = st.one_of(st.none(), st.integers(-5, 5).map(float))
    rows = []
    for _ in range(draw(st.integers(0, 12))):
        row: dict[str, Any] = {}
        for name in schema:
            kind, _, ident = name.partition(":")
            if kind == "criterion":
                row[name] = draw(score)
            elif kind == "applies":
                row[name] = draw(st.sampled_from([True, True, True, False, None]))
            else:
                row[name] = draw(strategies[ident])
        rows.append(row)
    return rows, schema


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_vectorised_score_equals_the_reference(data: st.DataObject) -> None:
    rubric, waived = data.draw(rubrics())
    rows, schema = data.draw(observations(rubric))
    frame = pl.DataFrame(rows, schema=schema, orient="row")
    scored = score_frame(rubric, frame, not_applicable_gates=waived)
    assert scored.height == len(rows)
    acceptance = rubric.weighted_acceptance_score
    for row, got in zip(rows, scored.iter_rows(named=True), strict=True):
        expected = reference_score(rubric, row, waived)
        exact = expected.pop("weighted_exact")
        for column, value in expected.items():
            if column == "codes":
                assert [r["code"] for r in got["_reasons_add"]] == value
            elif column == "_weighted_score" and exact is not None:
                # the mean, to a few units in the last place, on its side of acceptance
                assert got[column] == pytest.approx(float(exact), rel=1e-12, abs=1e-12)
                assert (got[column] >= acceptance) == (exact >= Fraction(repr(acceptance)))
            else:
                assert got[column] == value, column


def test_a_mean_that_is_the_acceptance_score_reaches_it() -> None:
    """Weights 0.35, 0.58, 0.07 and every score 3 gave 2.9999999999999996 (a float sum
    of rounded products), below an acceptance score of 3: the rows were reworked. Of 500
    random weightings summing to 1, with every score at the acceptance score, each is
    met with exactly that score; and a mean just below it is not met."""
    rng = random.Random(6)
    for _ in range(500):
        raw = [rng.randint(1, 99) for _ in range(rng.randint(2, 6))]
        weights = [k / sum(raw) for k in raw]
        at = float(rng.randint(1, 5))
        rubric = _rubric(weights, at)
        frame = pl.DataFrame({f"criterion:c{i}": [at] for i in range(len(weights))})
        scored = score_frame(rubric, frame).row(0, named=True)
        assert (scored["_weighted_score"], scored["_weighted_state"]) == (at, "met"), weights
    # the mean in the decimals the rubric is written in: (0.11·4 + 0.33·2) / 0.44 = 2.5
    for weights, scores, at in (
        ([0.11, 0.33], [4.0, 2.0], 2.5),
        ([0.62, 0.6, 0.92], [5.0, 4.0, 1.0], 3.0),
    ):
        frame = pl.DataFrame({f"criterion:c{i}": [v] for i, v in enumerate(scores)})
        scored = score_frame(_rubric(weights, at), frame).row(0, named=True)
        assert (scored["_weighted_score"], scored["_weighted_state"]) == (at, "met")
    rubric = _rubric([0.5, 0.5], 3.0)
    below = pl.DataFrame({"criterion:c0": [3.0], "criterion:c1": [math.nextafter(3.0, 0)]})
    scored = score_frame(rubric, below).row(0, named=True)
    assert scored["_weighted_state"] == "not_met"
    assert scored["_weighted_score"] < 3.0


def _rubric(weights: list[float], acceptance: float) -> Rubric:
    return Rubric(
        id="generated",
        path=Path("generated.json"),
        sha256="0" * 64,
        scale_minimum=1.0,
        scale_maximum=5.0,
        criteria=tuple(Criterion(f"c{i}", w, 1.0) for i, w in enumerate(weights)),
        weighted_acceptance_score=acceptance,
        gates=(),
        review_policy=None,
    )


def test_a_score_is_the_quotient_whatever_rows_are_scored_beside_it() -> None:
    """Scoring runs a shard at a time: a row's weighted score may not depend on its
    shard's other rows. polars divides a column by a scalar denominator (every criterion
    applies) by multiplying with its reciprocal, except in a frame of one row; the score
    is now the IEEE quotient, ``Σ wᵢ·sᵢ / Σ wᵢ`` as the reference computes it, in both."""
    ratings = {"correctness": 3, "instruction_adherence": 3, "reasoning_evidence": 4}
    row = _row({**ratings, "readability": 3}, ALL_GATES_PASS)
    expected = reference_score(RUBRIC, row, frozenset())["_weighted_score"]
    numerator = sum(c.weight * row[f"criterion:{c.id}"] for c in RUBRIC.criteria)
    denominator = sum(c.weight for c in RUBRIC.criteria)
    # a row whose quotient the reciprocal's product misses (the reason for this test)
    assert expected == numerator / denominator != numerator * (1 / denominator)
    alone = _scored(row)["_weighted_score"].to_list()
    beside = _scored(row, _row(PERFECT, ALL_GATES_PASS), row)["_weighted_score"].to_list()
    assert alone == [expected]
    assert beside[0] == beside[2] == expected
