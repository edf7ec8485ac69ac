"""A straightforward per-row reference for rubric scoring, written from the spec
(seed 000, DESIGN §3.10) in plain Python, to check the vectorised implementation."""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from pipeline.rubrics.model import Criterion, GateKind, Rubric


def reference_score(
    rubric: Rubric,
    row: Mapping[str, Any],
    not_applicable_gates: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """States, weighted score, weighted state and reason codes of one row.

    ``row`` maps ``criterion:<id>`` to a score or None, ``applies:<id>`` (optional) to a
    bool or None, ``gate:<name>`` (optional) to the evidence or None.
    """
    out: dict[str, Any] = {}
    codes: list[str] = []
    gates_pass = True
    for gate in rubric.gates:
        value = row.get(f"gate:{gate.name}")
        if isinstance(value, float) and math.isnan(value):
            value = None
        if gate.name in not_applicable_gates:
            state = "not_applicable"
        elif value is None:
            state = "unknown"
        elif gate.kind is GateKind.EQUALS:
            state = "met" if value == gate.value else "not_met"
        elif gate.kind is GateKind.AT_MOST:
            state = "met" if value <= gate.value else "not_met"
        else:
            state = "met" if value >= gate.value else "not_met"
        out[f"_gate_{gate.name}"] = state
        if state == "not_met":
            codes.append("rubric.gate_not_met")
        if state == "unknown":
            codes.append("rubric.gate_unknown")
        if state not in ("met", "not_applicable"):
            gates_pass = False

    numerator, denominator, all_known = 0.0, 0.0, True
    counted: list[Criterion] = []
    for criterion in rubric.criteria:
        score = row.get(f"criterion:{criterion.id}")
        applies = row.get(f"applies:{criterion.id}", True)
        nan = isinstance(score, float) and math.isnan(score)
        outside = (
            score is not None
            and not nan
            and not (rubric.scale_minimum <= score <= rubric.scale_maximum)
        )
        if applies is None:
            state = "unknown"
            codes.append("rubric.criterion_unknown")
        elif applies is False:
            state = "not_applicable"
        elif score is None:
            state = "unknown"
            codes.append("rubric.criterion_unknown")
        elif nan or outside:
            state = "unknown"
            codes.append("rubric.score_out_of_scale")
        elif score >= criterion.minimum_score:
            state = "met"
        else:
            state = "not_met"
            codes.append("rubric.below_minimum")
        out[f"_criterion_{criterion.id}_state"] = state
        if state == "unknown":
            all_known = False
        if state == "unknown":
            continue
        # Sum in rubric order, adding 0.0 for criteria that do not apply.
        applicable = state != "not_applicable"
        numerator += criterion.weight * score if applicable else 0.0
        denominator += criterion.weight if applicable else 0.0
        if applicable:
            counted.append(criterion)

    weighted = numerator / denominator if gates_pass and all_known and denominator > 0 else None
    out["_weighted_score"] = weighted
    # the state compares the mean itself, Σ wᵢ·sᵢ / Σ wᵢ in exact arithmetic, with the
    # acceptance score: the float above may fall a unit in the last place below it
    exact = (
        sum((_written(c.weight) * _written(row[f"criterion:{c.id}"]) for c in counted), Fraction(0))
        / sum((_written(c.weight) for c in counted), Fraction(0))
        if weighted is not None
        else None
    )
    out["weighted_exact"] = exact
    if exact is None:
        out["_weighted_state"] = "unknown"
    elif exact >= _written(rubric.weighted_acceptance_score):
        out["_weighted_state"] = "met"
    else:
        out["_weighted_state"] = "not_met"
        codes.append("rubric.below_acceptance")
    out["codes"] = codes
    return out


def _written(value: float) -> Fraction:
    """A number as the rubric or the binding writes it: its shortest decimal."""
    return Fraction(repr(value))
