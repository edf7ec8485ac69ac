"""Rubric scoring stage (order 300): bound criteria and gates → states and a weighted score.

For each kind the campaign binds to a rubric (``[scoring.<kind>]``), it evaluates the
bindings shard by shard (:meth:`GlobalContext.evaluate`), runs the built-in code gates
(the only per-row Python: one :func:`ast.parse` per distinct proposed source of a shard)
in the engine's worker processes, one task per shard, each reading only the code column
from staging, and scores every row that is not a duplicate with
:func:`pipeline.rubrics.scoring.score_frame`.
It never changes a disposition: it adds score/state columns and ``rubric.*`` reasons, and
the decision policy (order 400) decides. A binding that fails on a row's value stops the
run with a :class:`~pipeline.rubrics.bindings.BindingError` naming it, never the value. The rubric and its digest go on every scored row
and into the manifest.
"""

from __future__ import annotations

import platform
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import polars as pl
import pyarrow as pa

from pipeline.core.config import CampaignConfig
from pipeline.core.expression_errors import EVALUATION_ERRORS
from pipeline.core.reasons import Disposition
from pipeline.decide.by_shard import summed_counts
from pipeline.decide.context import GlobalContext, OutputColumn, register_stage
from pipeline.engines import Progress, Step
from pipeline.rubrics.bindings import BindingError, GateMode, ScoringPlan
from pipeline.rubrics.builtin_gates import (
    COMPLEXITY_CONVENTION,
    MAX_COMPLEXITY,
    SYNTAX_VALID,
    UNAPPROVED_DEPENDENCIES,
    CodeFacts,
    analyse_source,
)
from pipeline.rubrics.campaign import scoring_plan
from pipeline.rubrics.scoring import (
    APPLIES,
    CRITERION,
    GATE,
    REASON_CODES,
    output_names,
    score_frame,
)
from pipeline.storage import RunStorage

__all__ = ["SCORED_DISPOSITIONS", "RubricScoring"]

#: Files that carry the scores: rows the policy may send anywhere but duplicates/.
SCORED_DISPOSITIONS: Final = frozenset(
    {Disposition.ACCEPTED, Disposition.QUARANTINED, Disposition.REJECTED}
)


_ARROW: Final = {pl.Float64: pa.float64(), pl.Boolean: pa.bool_(), pl.String: pa.string()}


@register_stage
class RubricScoring:
    name = "scoring"
    order = 300
    reason_codes = REASON_CODES
    #: a row's scores read its own values: run a shard at a time on the engine
    row_local = True

    def __init__(self) -> None:
        self._plans: dict[str, ScoringPlan | None] = {}

    def enabled(self, config: CampaignConfig) -> bool:
        return bool(config.scoring)

    def plan(self, ctx: GlobalContext, kind: str) -> ScoringPlan | None:
        if kind not in self._plans:
            self._plans[kind] = scoring_plan(ctx.config, kind)
        return self._plans[kind]

    def output_columns(self, ctx: GlobalContext, kind: str) -> Sequence[OutputColumn]:
        plan = self.plan(ctx, kind)
        if plan is None:
            return []
        names: dict[str, pl.DataType] = {"_rubric": pl.String(), "_rubric_sha256": pl.String()}
        names.update(output_names(plan.rubric))
        # the policy (a later stage) reads the scores from the state
        return [
            OutputColumn(n, _ARROW[type(t)], SCORED_DISPOSITIONS, carried=True)
            for n, t in names.items()
        ]

    def combine_notes(self, parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """The run's note from its shards' (:func:`_notes`): rows, sources parsed and
        state counts summed (a source several shards hold was parsed in each: the sum
        is the parses, which follow the shards, not the run's distinct sources)."""
        first = parts[0]
        analyzer = {
            **first["analyzer"],
            "sources_parsed": sum(p["analyzer"]["sources_parsed"] for p in parts),
        }
        states = {
            column: summed_counts([p["states"][column] for p in parts])
            for column in first["states"]
        }
        return {
            **first,
            "analyzer": analyzer,
            "rows": sum(p["rows"] for p in parts),
            "states": states,
        }

    def decide(self, ctx: GlobalContext, kind: str, rows: pl.DataFrame) -> pl.DataFrame | None:
        plan = self.plan(ctx, kind)
        if plan is None:
            return None
        exprs: dict[str, pl.Expr] = {}
        #: output column -> (campaign key, expression as written), for failures
        sources: dict[str, tuple[str, str]] = {}
        for binding in plan.criteria:
            criterion = binding.criterion.id
            exprs[CRITERION + criterion] = (
                binding.score if binding.score is not None else pl.lit(None, pl.Float64)
            )
            if binding.source is not None:
                sources[CRITERION + criterion] = (f"criteria.{criterion}", binding.source)
            if binding.not_applicable:
                exprs[APPLIES + criterion] = pl.lit(False)
            elif binding.applies is not None and binding.applies_source is not None:
                exprs[APPLIES + criterion] = binding.applies
                sources[APPLIES + criterion] = (f"applies.{criterion}", binding.applies_source)
        for gate in plan.gates:
            if gate.mode is GateMode.EVIDENCE and gate.evidence is not None:
                exprs[GATE + gate.gate.name] = gate.evidence
                sources[GATE + gate.gate.name] = (f"gates.{gate.gate.name}", gate.source or "")
        frames = _evaluate(ctx, kind, plan, exprs, sources)
        observed = pl.concat(frames, how="vertical") if frames else pl.DataFrame()
        if observed.is_empty():
            return None
        builtins = [g.gate.name for g in plan.gates if g.mode is GateMode.BUILTIN]
        parsed = 0
        if builtins:
            evidence = _code_evidence(ctx, kind, plan, builtins)
            parsed = sum(distinct for _, distinct in evidence)
            observed = observed.join(
                pl.concat([frame for frame, _ in evidence], how="vertical"),
                on=["_shard", "_shard_line"],
                how="left",
                maintain_order="left",
            )
        # Duplicates are removed rows: nothing to score. Everything else is scored,
        # including rows an earlier stage rejected (the reasons then say why in full).
        current = rows.filter(pl.col("_disposition") != Disposition.DUPLICATE.value).select(
            "_shard", "_shard_line"
        )
        observed = current.join(
            observed, on=["_shard", "_shard_line"], how="inner", maintain_order="left"
        )
        scored = score_frame(
            plan.rubric,
            observed,
            not_applicable_gates=plan.not_applicable_gates,
            paths=plan.paths(),
        ).with_columns(
            _rubric=pl.lit(plan.rubric.id),
            _rubric_sha256=pl.lit(plan.rubric.sha256),
        )
        ctx.notes.setdefault("scoring", {})[kind] = _notes(plan, scored, parsed)
        return scored


def _evaluate(
    ctx: GlobalContext,
    kind: str,
    plan: ScoringPlan,
    exprs: dict[str, pl.Expr],
    sources: dict[str, tuple[str, str]],
) -> list[pl.DataFrame]:
    """The bindings' values, shard by shard. When one fails on a row's value, each is
    evaluated alone to name it (only then: it reads the shards again)."""
    try:
        return list(ctx.evaluate(kind, exprs))
    except EVALUATION_ERRORS as error:
        failure = error
    for name, expr in exprs.items():
        key, source = sources.get(name, ("", ""))
        try:
            for _ in ctx.evaluate(kind, {name: expr}):
                pass
        except EVALUATION_ERRORS as alone:
            raise BindingError.evaluating(
                f"scoring.{kind}.{key}", plan.rubric.id, source, alone
            ) from None
    # each binding evaluates alone: only their combination fails
    bindings = "; ".join(source for _, source in sources.values())
    raise BindingError.evaluating(f"scoring.{kind}", plan.rubric.id, bindings, failure) from None


@dataclass(frozen=True)
class _CodeSettings:
    kind: str
    rubric: str
    #: the run's storage: the worker reads the code column through it
    storage: RunStorage
    code: str
    gates: tuple[str, ...]
    allowed_imports: frozenset[str]
    allow_stdlib: bool


def _init_code_gates(settings: _CodeSettings) -> tuple[_CodeSettings, pl.Expr]:
    # The expression was checked before the run; compiling it here needs no layout.
    return settings, pl.sql_expr(settings.code).cast(pl.String)


def _shard_code_evidence(
    state: tuple[_CodeSettings, pl.Expr], shard: int, progress: Progress
) -> tuple[pl.DataFrame, int]:
    """The built-in gates' evidence for one shard's rows, and how many distinct sources
    were parsed: each distinct text once, whatever the number of rows proposing it."""
    settings, code = state
    try:
        frame = (
            settings.storage.scan_staged(shard, settings.kind)
            .select(pl.col("_shard_line"), code.alias("code"))
            .collect()
        )
    except EVALUATION_ERRORS as error:
        raise BindingError.evaluating(
            f"scoring.{settings.kind}.code", settings.rubric, settings.code, error
        ) from None
    facts: dict[str | None, CodeFacts] = {}
    sources = frame["code"].to_list()
    for source in sources:
        if source not in facts:
            facts[source] = analyse_source(source)
    rows = [facts[s] for s in sources]
    evidence: dict[str, pl.Series] = {
        SYNTAX_VALID: pl.Series([f.syntax_valid for f in rows], dtype=pl.Boolean),
        MAX_COMPLEXITY: pl.Series(
            [None if f.max_complexity is None else float(f.max_complexity) for f in rows],
            dtype=pl.Float64,
        ),
        UNAPPROVED_DEPENDENCIES: pl.Series(
            [f.unapproved(settings.allowed_imports, settings.allow_stdlib) for f in rows],
            dtype=pl.Boolean,
        ),
    }
    result = frame.select(
        pl.lit(shard, pl.Int32).alias("_shard"),
        "_shard_line",
        *(evidence[name].alias(GATE + name) for name in settings.gates),
    )
    return result, len(facts)


def _code_evidence(
    ctx: GlobalContext, kind: str, plan: ScoringPlan, gates: list[str]
) -> list[tuple[pl.DataFrame, int]]:
    """Run the built-in gates over every shard of ``kind`` in the engine's workers."""
    assert plan.code_source is not None  # compile_scoring requires it for built-ins
    settings = _CodeSettings(
        kind,
        plan.rubric.id,
        ctx.storage,
        plan.code_source,
        tuple(gates),
        plan.allowed_imports,
        plan.allow_stdlib,
    )
    shards = list(ctx.shards_of(kind))
    return ctx.engine.map(Step(_init_code_gates, (settings,), _shard_code_evidence), shards)


def _notes(plan: ScoringPlan, scored: pl.DataFrame, analysed: int) -> dict[str, Any]:
    """The manifest's record: bindings, analyzer, and state counts per criterion/gate."""
    states: dict[str, dict[str, int]] = {}
    for column in scored.columns:
        if (
            column.startswith(("_criterion_", "_gate_", "_weighted_"))
            and scored[column].dtype == pl.String
        ):
            counts = scored[column].value_counts(sort=True)
            states[column] = {
                str(value): int(n)
                for value, n in sorted(counts.iter_rows(), key=lambda r: str(r[0]))
            }
    return {
        **plan.describe(),
        "analyzer": {
            "python": platform.python_version(),
            "implementation": platform.python_implementation(),
            "complexity_convention": COMPLEXITY_CONVENTION,
            "sources_parsed": analysed,
        },
        "rows": scored.height,
        "states": states,
    }
