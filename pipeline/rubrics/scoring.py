"""Vectorised rubric scoring: observed scores and gate evidence → states and one score.

Seed 000: "Compute the weighted score only after hard gates pass, validate that weights
sum to one, and enforce each criterion's minimum independently." Seed 003 §5.4: a scalar
"MUST NOT allow an unrelated strength to compensate for a noncompensable critical
failure". Per row, all in polars expressions:

* criterion state: ``not_applicable`` when its applicability is false; ``unknown`` when
  applicability is null, the score is null or NaN, or the score lies outside the rubric's
  scale (an uninterpretable value is never clamped); ``met`` when score ≥ its minimum;
  else ``not_met``. Each minimum is checked on its own: a high weighted score never
  lifts a criterion over its minimum.
* gate state: ``not_applicable`` when the campaign declares so; ``unknown`` when the
  evidence is null (unbound, absent, undecidable); else ``met``/``not_met`` by comparing
  the evidence with the rubric's value (equal / at most / at least).
* weighted score: ``Σ wᵢ·sᵢ / Σ wᵢ`` over applicable criteria (a left fold in rubric
  order), only when every gate is ``met`` or ``not_applicable`` and no applicable
  criterion is ``unknown``; null otherwise. A failing or unknown gate leaves nothing to
  compensate with.
* weighted state: ``met`` when the score reaches ``weighted_acceptance_score``,
  ``not_met`` below it, ``unknown`` when there is no score.

Each failing or unknown verdict adds a ``rubric.*`` reason; whether that keeps the row out
is the decision policy's call (:mod:`pipeline.rubrics.decision_policy`). A reason's detail names the
criterion or gate and the rubric's bound, never the row's score or evidence (a record's
values may be secrets, and details reach ``report.html``): the numbers are in the
``_criterion_*_score``, ``_gate_*_value`` and ``_weighted_score`` columns.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Final

import numpy as np
import polars as pl

from pipeline.core.reasons import (
    RUBRIC_BELOW_ACCEPTANCE,
    RUBRIC_BELOW_MINIMUM,
    RUBRIC_CRITERION_UNKNOWN,
    RUBRIC_GATE_NOT_MET,
    RUBRIC_GATE_UNKNOWN,
    RUBRIC_OUT_OF_SCALE,
)
from pipeline.rubrics.model import Criterion, Gate, GateKind, Rubric, State, plain_number

__all__ = [
    "APPLIES",
    "CRITERION",
    "GATE",
    "REASON_CODES",
    "criterion_score_column",
    "criterion_state_column",
    "gate_state_column",
    "gate_value_column",
    "output_names",
    "score_frame",
]

#: Input column prefixes of :func:`score_frame`.
CRITERION: Final = "criterion:"
APPLIES: Final = "applies:"
GATE: Final = "gate:"

#: every reason code :func:`score_frame` may add
REASON_CODES: Final = (
    RUBRIC_GATE_NOT_MET,
    RUBRIC_GATE_UNKNOWN,
    RUBRIC_BELOW_MINIMUM,
    RUBRIC_CRITERION_UNKNOWN,
    RUBRIC_OUT_OF_SCALE,
    RUBRIC_BELOW_ACCEPTANCE,
)

WEIGHTED_SCORE: Final = "_weighted_score"
WEIGHTED_STATE: Final = "_weighted_state"


def criterion_score_column(criterion_id: str) -> str:
    return f"_criterion_{criterion_id}_score"


def criterion_state_column(criterion_id: str) -> str:
    return f"_criterion_{criterion_id}_state"


def gate_state_column(name: str) -> str:
    return f"_gate_{name}"


def gate_value_column(name: str) -> str:
    return f"_gate_{name}_value"


def output_names(rubric: Rubric) -> dict[str, pl.DataType]:
    """Every column :func:`score_frame` adds (besides ``_reasons_add``), with its type."""
    columns: dict[str, pl.DataType] = {}
    for gate in rubric.gates:
        columns[gate_state_column(gate.name)] = pl.String()
        columns[gate_value_column(gate.name)] = (
            pl.Boolean() if gate.kind is GateKind.EQUALS else pl.Float64()
        )
    for criterion in rubric.criteria:
        columns[criterion_score_column(criterion.id)] = pl.Float64()
        columns[criterion_state_column(criterion.id)] = pl.String()
    columns[WEIGHTED_SCORE] = pl.Float64()
    columns[WEIGHTED_STATE] = pl.String()
    return columns


def _lit(state: State) -> pl.Expr:
    return pl.lit(state.value, pl.String)


def _gate_passes(gate: Gate, value: pl.Expr) -> pl.Expr:
    if gate.kind is GateKind.EQUALS:
        return value == pl.lit(bool(gate.value))
    bound = pl.lit(float(gate.value))
    return value <= bound if gate.kind is GateKind.AT_MOST else value >= bound


@dataclass(frozen=True, eq=False)
class _Reason:
    """A reason that may fire: ``detail`` is null on rows where it does not."""

    code: str
    path: str
    detail: pl.Expr


def _reason(when: pl.Expr, code: str, path: str, detail: str) -> _Reason:
    """A reason firing where ``when`` holds. The detail is a constant of the rubric, never
    an expression over the row: no record value can reach it."""
    return _Reason(
        code, path, pl.when(when).then(pl.lit(detail, pl.String)).otherwise(pl.lit(None, pl.String))
    )


def _reason_lists(frame: pl.DataFrame, reasons: list[_Reason]) -> pl.Series:
    """One list of ``{code, path, detail}`` per row, in ``reasons`` order.

    Built long (one row per fired reason, then one group-by) rather than with
    ``concat_list`` over nullable structs, which is two orders of magnitude slower.
    """
    dtype = pl.List(pl.Struct({"code": pl.String, "path": pl.String, "detail": pl.String}))
    if not reasons or frame.height == 0:
        return pl.Series("_reasons_add", [[]] * frame.height, dtype=dtype)
    slots = [f"_r{n}" for n in range(len(reasons))]
    fired = (
        frame.select(slots)
        .with_row_index("_row")
        .unpivot(index="_row", variable_name="_slot", value_name="detail")
        .drop_nulls("detail")
        .with_columns(_order=pl.col("_slot").str.slice(2).cast(pl.Int32))
        .sort("_row", "_order")
        .with_columns(
            code=pl.col("_order").replace_strict(
                list(range(len(reasons))), [r.code for r in reasons], return_dtype=pl.String
            ),
            path=pl.col("_order").replace_strict(
                list(range(len(reasons))), [r.path for r in reasons], return_dtype=pl.String
            ),
        )
        .group_by("_row", maintain_order=True)
        .agg(pl.struct("code", "path", "detail").alias("_reasons_add"))
    )
    rows = pl.DataFrame({"_row": pl.arange(0, frame.height, eager=True, dtype=pl.UInt32)})
    joined = rows.join(fired, on="_row", how="left", maintain_order="left")
    return joined["_reasons_add"].fill_null(pl.lit([], dtype)).cast(dtype)


@dataclass(frozen=True, eq=False)
class _Verdict:
    """One gate's or criterion's verdict: its state, the output columns it adds (in
    :func:`output_names` order) and the reasons it may fire."""

    state: pl.Expr
    columns: list[pl.Expr]
    reasons: list[_Reason]
    #: a criterion's score (its terms in the weighted mean); ``None`` for a gate
    score: pl.Expr | None = None
    #: a working column the verdict's columns read, computed once before them
    prepared: pl.Expr | None = None


def score_frame(
    rubric: Rubric,
    observed: pl.DataFrame,
    *,
    not_applicable_gates: frozenset[str] = frozenset(),
    paths: Mapping[str, str] | None = None,
) -> pl.DataFrame:
    """Score ``observed`` against ``rubric``.

    ``observed`` holds, per criterion ``c``, ``criterion:c`` (Float64 score, null when
    there is none) and optionally ``applies:c`` (Boolean; absent means it applies), and
    per gate ``g``, ``gate:g`` (its evidence: Boolean, or Float64 for ``max_``/``min_``
    gates; absent means no evidence). Other columns (keys) are passed through. Returns
    them plus :func:`output_names` and ``_reasons_add`` (a list of reason structs).
    """
    paths = paths or {}
    names = set(observed.columns)
    gates = [
        _gate_verdict(gate, names, gate.name in not_applicable_gates, paths.get(gate.name, ""))
        for gate in rubric.gates
    ]
    criteria = [_criterion_verdict(rubric, c, names, paths.get(c.id, "")) for c in rubric.criteria]
    weighted = _weighted_verdict(rubric, gates, criteria)
    verdicts = [*gates, *criteria, weighted]
    columns = [column for verdict in verdicts for column in verdict.columns]
    reasons = [reason for verdict in verdicts for reason in verdict.reasons]
    keys = [c for c in observed.columns if not c.startswith((CRITERION, APPLIES, GATE))]
    # Lazy, so polars computes each state once however often the expressions repeat it.
    scored = (
        observed.lazy()
        .with_columns(v.prepared for v in verdicts if v.prepared is not None)
        .select(*keys, *columns, *(r.detail.alias(f"_r{n}") for n, r in enumerate(reasons)))
        .collect()
    )
    return scored.select(*keys, *(c.meta.output_name() for c in columns)).with_columns(
        _reason_lists(scored, reasons)
    )


def _gate_verdict(gate: Gate, names: set[str], not_applicable: bool, path: str) -> _Verdict:
    """A gate's state from its evidence column ``gate:<name>`` (absent: no evidence)."""
    wanted = pl.Boolean if gate.kind is GateKind.EQUALS else pl.Float64
    column = f"{GATE}{gate.name}"
    value = pl.col(column).cast(wanted) if column in names else pl.lit(None, wanted)
    missing = value.is_null() if wanted == pl.Boolean else value.is_null() | value.is_nan()
    if not_applicable:
        state = _lit(State.NOT_APPLICABLE)
    else:
        state = (
            pl.when(missing)
            .then(_lit(State.UNKNOWN))
            .when(_gate_passes(gate, value))
            .then(_lit(State.MET))
            .otherwise(_lit(State.NOT_MET))
        )
    columns = [state.alias(gate_state_column(gate.name)), value.alias(gate_value_column(gate.name))]
    reasons = [
        _reason(
            state == State.NOT_MET.value,
            RUBRIC_GATE_NOT_MET,
            path,
            f"{gate.name}: not met; {gate.describe()}",
        ),
        _reason(
            state == State.UNKNOWN.value,
            RUBRIC_GATE_UNKNOWN,
            path,
            f"{gate.name}: no evidence; {gate.describe()}",
        ),
    ]
    return _Verdict(state, columns, reasons)


def _criterion_verdict(
    rubric: Rubric, criterion: Criterion, names: set[str], path: str
) -> _Verdict:
    """A criterion's state from ``criterion:<id>`` and ``applies:<id>``; its minimum is
    checked on its own, and a score outside the scale is unknown, never clamped."""
    score_column, applies_column = f"{CRITERION}{criterion.id}", f"{APPLIES}{criterion.id}"
    score = (
        pl.col(score_column).cast(pl.Float64) if score_column in names else pl.lit(None, pl.Float64)
    )
    applies = pl.col(applies_column).cast(pl.Boolean) if applies_column in names else pl.lit(True)
    in_scale = (score >= pl.lit(rubric.scale_minimum)) & (score <= pl.lit(rubric.scale_maximum))
    state = (
        pl.when(applies.is_null())
        .then(_lit(State.UNKNOWN))
        .when(applies.not_())
        .then(_lit(State.NOT_APPLICABLE))
        .when(score.is_null() | score.is_nan() | in_scale.not_())
        .then(_lit(State.UNKNOWN))
        .when(score >= pl.lit(criterion.minimum_score))
        .then(_lit(State.MET))
        .otherwise(_lit(State.NOT_MET))
    )
    columns = [
        score.alias(criterion_score_column(criterion.id)),
        state.alias(criterion_state_column(criterion.id)),
    ]
    scale = f"{plain_number(rubric.scale_minimum)}..{plain_number(rubric.scale_maximum)}"
    reasons = [
        _reason(
            state == State.NOT_MET.value,
            RUBRIC_BELOW_MINIMUM,
            path,
            f"{criterion.id}: below the minimum {plain_number(criterion.minimum_score)}",
        ),
        _reason(
            applies.is_null(),
            RUBRIC_CRITERION_UNKNOWN,
            path,
            f"{criterion.id}: applicability unknown",
        ),
        _reason(
            applies & score.is_null(), RUBRIC_CRITERION_UNKNOWN, path, f"{criterion.id}: no score"
        ),
        _reason(
            applies & (score.is_nan() | in_scale.not_()),
            RUBRIC_OUT_OF_SCALE,
            path,
            f"{criterion.id}: score outside the scale {scale}",
        ),
    ]
    return _Verdict(state, columns, reasons, score)


def _quotient(numerator: pl.Expr, denominator: pl.Expr) -> pl.Expr:
    """``numerator / denominator`` row by row, the IEEE quotient whatever the frame.

    polars divides a column by a scalar (a denominator every row shares: a rubric whose
    criteria all apply) as a multiplication by its reciprocal, except in a frame of one
    row, so the last bit of a score depended on how many rows were scored together:
    3.25 / 0.9999999999999999 gave 3.250000000000001 beside other rows, 3.2500000000000004
    alone (the quotient). Scored a shard at a time (:mod:`pipeline.decide.by_shard`), a
    row's score must not depend on its shard's other rows."""
    return pl.struct(_n=numerator, _d=denominator).map_batches(
        _divided, return_dtype=pl.Float64, is_elementwise=True
    )


def _divided(pair: pl.Series) -> pl.Series:
    with np.errstate(divide="ignore", invalid="ignore"):  # rows the caller leaves out
        quotient = np.divide(pair.struct.field("_n").to_numpy(), pair.struct.field("_d").to_numpy())
    return pl.Series(pair.name, quotient, pl.Float64)


def _exact_near_acceptance(rubric: Rubric, folded: pl.Expr, criteria: list[_Verdict]) -> pl.Expr:
    """The weighted score, exact where its state depends on it.

    The vectorised mean is a float sum of rounded products: weights 0.35, 0.58 and 0.07
    with every score 3 gave 2.9999999999999996, below an acceptance score of 3 that the
    mean Σ wᵢ·sᵢ / Σ wᵢ = 3 reaches. A row whose score lies within :data:`_NEAR` of the
    acceptance score (relative to the scale) is scored again in exact rational
    arithmetic: its score is the exact mean rounded to the nearest float, or the float
    just below the acceptance score when the mean lies below it by less than half a
    unit in the last place. So ``score >= acceptance`` holds exactly when the mean
    reaches it, and a mean that is the acceptance score is that score. Elsewhere the
    float's error (a few units in the last place) cannot change a state."""
    fields = {"_w": folded}
    for i, verdict in enumerate(criteria):
        assert verdict.score is not None  # a criterion's verdict
        fields[f"_s{i}"] = verdict.score
        fields[f"_a{i}"] = verdict.state != State.NOT_APPLICABLE.value
    weights = [criterion.weight for criterion in rubric.criteria]
    n = range(len(weights))
    acceptance = rubric.weighted_acceptance_score
    band = _NEAR * max(1.0, abs(rubric.scale_minimum), abs(rubric.scale_maximum))

    def exact_where_close(rows: pl.Series) -> pl.Series:
        score = rows.struct.field("_w")
        close = np.flatnonzero(np.abs(score.to_numpy() - acceptance) <= band)  # nulls: NaN
        if not len(close):
            return score
        # rubric scores are mostly a few values (ratings 1 to 5): each combination once
        combinations = (
            rows.gather(close)
            .struct.unnest()
            .drop("_w")
            .with_row_index("_at")
            .group_by(pl.exclude("_at"))
            .agg("_at")
        )
        exact = np.empty(len(close))
        for found in combinations.iter_rows(named=True):
            scores = [found[f"_s{i}"] for i in n]
            applies = [bool(found[f"_a{i}"]) for i in n]
            exact[found["_at"]] = _exact_mean(weights, scores, applies, acceptance)
        return score.scatter(close, exact)

    struct = pl.struct([expr.alias(name) for name, expr in fields.items()])
    return struct.map_batches(exact_where_close, return_dtype=pl.Float64, is_elementwise=True)


#: How near the acceptance score (times the scale's magnitude) a vectorised weighted
#: score is scored again exactly: far wider than its error, a few units in the last place.
_NEAR: Final = 1e-6


def _exact_mean(
    weights: Sequence[float],
    scores: Sequence[float | None],
    applicable: Sequence[bool],
    acceptance: float,
) -> float:
    """Σ wᵢ·sᵢ / Σ wᵢ over the applicable criteria, exactly in the decimals the numbers
    are written in, as a float on the same side of ``acceptance`` as that mean (see
    :func:`_exact_near_acceptance`)."""
    numerator = denominator = Fraction(0)
    for weight, score, applies in zip(weights, scores, applicable, strict=True):
        if applies and score is not None:
            numerator += _decimal(weight) * _decimal(score)
            denominator += _decimal(weight)
    mean = numerator / denominator
    rounded = float(mean)
    if mean < _decimal(acceptance) and rounded >= acceptance:
        return math.nextafter(acceptance, -math.inf)
    return rounded


def _decimal(value: float) -> Fraction:
    """A number as it is written (its shortest decimal: ``0.11`` is 11/100), not as the
    nearest binary fraction: weights 0.11 and 0.33 with scores 4 and 2 have the mean 2.5
    the rubric's author reads, which the binary values miss by a unit in the last place."""
    return Fraction(repr(value))


def _weighted_verdict(rubric: Rubric, gates: list[_Verdict], criteria: list[_Verdict]) -> _Verdict:
    """The weighted score and its state: a score only when every gate passes (or does not
    apply) and every applicable criterion is known, so nothing compensates for a failing
    or unknown gate."""
    numerator: pl.Expr = pl.lit(0.0)
    denominator: pl.Expr = pl.lit(0.0)
    for criterion, verdict in zip(rubric.criteria, criteria, strict=True):
        applicable = verdict.state != State.NOT_APPLICABLE.value
        score = verdict.score
        assert score is not None  # a criterion's verdict
        # A left fold in rubric order: the reference implementation adds in the same
        # order, so both give the same float, bit for bit.
        numerator = numerator + pl.when(applicable).then(
            pl.lit(criterion.weight) * score
        ).otherwise(pl.lit(0.0))
        denominator = denominator + pl.when(applicable).then(pl.lit(criterion.weight)).otherwise(
            pl.lit(0.0)
        )
    gates_pass = pl.all_horizontal(
        [g.state.is_in([State.MET.value, State.NOT_APPLICABLE.value]) for g in gates]
        or [pl.lit(True)]
    )
    all_known = pl.all_horizontal(
        [c.state != State.UNKNOWN.value for c in criteria] or [pl.lit(True)]
    )
    folded = (
        pl.when(gates_pass & all_known & (denominator > 0))
        .then(_quotient(numerator, denominator))
        .otherwise(pl.lit(None, pl.Float64))
    )
    # computed once, before the columns that read it (polars would run the exact pass
    # for each of them: the score, the state, its null check and the reason)
    weighted = pl.col(_WEIGHTED)
    acceptance = rubric.weighted_acceptance_score
    state = (
        pl.when(weighted.is_null())
        .then(_lit(State.UNKNOWN))
        .when(weighted >= pl.lit(acceptance))
        .then(_lit(State.MET))
        .otherwise(_lit(State.NOT_MET))
    )
    reason = _reason(
        state == State.NOT_MET.value,
        RUBRIC_BELOW_ACCEPTANCE,
        "",
        f"weighted score below the acceptance score {plain_number(acceptance)}",
    )
    return _Verdict(
        state,
        [weighted.alias(WEIGHTED_SCORE), state.alias(WEIGHTED_STATE)],
        [reason],
        prepared=_exact_near_acceptance(rubric, folded, criteria).alias(_WEIGHTED),
    )


#: the weighted score's working column (:func:`_weighted_verdict`)
_WEIGHTED: Final = "__rowgate_weighted"
