"""Decision policy stage (order 400): criterion and gate states → an action per row.

For each kind with a ``[policy.<kind>]`` file it evaluates the rules
(:func:`pipeline.rubrics.decision_policy.decide_targets`) over every row that is not a
duplicate, after the scoring stage and whatever cross-record and dedupe stages ran before
it (their reason codes are in ``_reason_codes``). ``_decision`` and ``_policy_trace`` (the
policy's disposing ``target``) go on every such row, in accepted/, quarantined/ and
rejected/ alike, and ``_decision_<target>`` / ``_policy_trace_<target>`` for every other
target the policy decides beside it. Dispositions follow the disposing decision:
accept / accept_with_note → accepted, escalate → quarantined, rework / reject →
rejected, with a ``policy.<action>`` reason naming the deciding rule (its explanation when
it has one; none for a plain accept), and ``policy.calibration_unavailable`` when the
contract's calibration turned the rule's action into its ``uncalibrated_action``. A policy
never rescues a row: an earlier quarantine or rejection stands.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import polars as pl
import pyarrow as pa

from pipeline.core.config import CampaignConfig
from pipeline.core.reasons import POLICY_CODES, Disposition
from pipeline.decide.by_shard import summed_counts
from pipeline.decide.context import GlobalContext, OutputColumn, register_stage
from pipeline.decide.stages.scoring import SCORED_DISPOSITIONS
from pipeline.rubrics.campaign import kind_policy, scoring_plan
from pipeline.rubrics.decision_policy import (
    CALIBRATION_UNAVAILABLE,
    DEFAULT_ACTION,
    Action,
    Policy,
    decide_targets,
    effective_action,
    explanation,
    target_columns,
)
from pipeline.rubrics.model import Rubric

__all__ = ["DecisionPolicy"]

#: decision -> its reason code, ``policy.<action>``; a plain accept has none (an action the
#: catalogue lacks fails here)
_CODES: Final = {a.value: POLICY_CODES[a.value] for a in Action if a is not Action.ACCEPT}

_SEVERITY: Final = {
    Disposition.ACCEPTED.value: 0,
    Disposition.QUARANTINED.value: 1,
    Disposition.REJECTED.value: 2,
}


@register_stage
class DecisionPolicy:
    name = "policy"
    order = 400
    reads_reason_codes = True  # rules may match the reasons rows got before
    #: a row's decision reads its own scores and reasons: run a shard at a time
    row_local = True
    reason_codes = (*_CODES.values(), CALIBRATION_UNAVAILABLE)

    def __init__(self) -> None:
        self._policies: dict[str, tuple[Policy, Rubric | None] | None] = {}

    def enabled(self, config: CampaignConfig) -> bool:
        return bool(config.policy)

    def policy(self, ctx: GlobalContext, kind: str) -> tuple[Policy, Rubric | None] | None:
        if kind not in self._policies:
            plan = scoring_plan(ctx.config, kind)
            policy = kind_policy(ctx.config, kind, plan)
            self._policies[kind] = (policy, plan.rubric if plan else None) if policy else None
        return self._policies[kind]

    def output_columns(self, ctx: GlobalContext, kind: str) -> Sequence[OutputColumn]:
        found = self.policy(ctx, kind)
        if found is None:
            return []
        policy = found[0]
        columns = []
        for target in policy.decision_targets:
            decision, trace = target_columns(policy, target)
            columns += [
                OutputColumn(decision, pa.string(), SCORED_DISPOSITIONS),
                OutputColumn(trace, pa.list_(pa.string()), SCORED_DISPOSITIONS),
            ]
        return [
            *columns[:2],
            OutputColumn("_policy", pa.string(), SCORED_DISPOSITIONS),
            OutputColumn("_policy_sha256", pa.string(), SCORED_DISPOSITIONS),
            *columns[2:],
        ]

    def combine_notes(self, parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """The run's note from its shards' (:func:`_notes`): every count summed."""
        first = parts[0]
        combined = {
            **first,
            "decisions": summed_counts([p["decisions"] for p in parts]),
            "rules_matched": {
                rule: sum(p["rules_matched"][rule] for p in parts)
                for rule in first["rules_matched"]
            },
        }
        if "decisions_by_target" in first:
            combined["decisions_by_target"] = {
                target: summed_counts([p["decisions_by_target"][target] for p in parts])
                for target in first["decisions_by_target"]
            }
        return combined

    def decide(self, ctx: GlobalContext, kind: str, rows: pl.DataFrame) -> pl.DataFrame | None:
        found = self.policy(ctx, kind)
        if found is None:
            return None
        policy, rubric = found
        seen = rows.filter(pl.col("_disposition") != Disposition.DUPLICATE.value)
        if seen.is_empty():
            return None
        decided = _decide(policy, rubric, seen)
        ctx.notes.setdefault("policy", {})[kind] = _notes(policy, decided)
        others = [c for t in policy.decision_targets[1:] for c in target_columns(policy, t)]
        return decided.select(
            "_shard",
            "_shard_line",
            "_disposition",
            "_reasons_add",
            "_decision",
            "_policy_trace",
            *others,
            _policy=pl.lit(f"{policy.id}@{policy.version}"),
            _policy_sha256=pl.lit(policy.sha256),
        )


def _decide(policy: Policy, rubric: Rubric | None, rows: pl.DataFrame) -> pl.DataFrame:
    decided = decide_targets(policy, rubric, rows)
    actions = [a.value for a in Action]
    mapped = pl.col("_decision").replace_strict(
        actions, [Action(a).disposition.value for a in actions], return_dtype=pl.String
    )
    severity = pl.max_horizontal(
        pl.col("_disposition").replace_strict(_SEVERITY, return_dtype=pl.Int8),
        mapped.replace_strict(_SEVERITY, return_dtype=pl.Int8),
    )
    by_severity = {v: k for k, v in _SEVERITY.items()}
    descriptions: dict[str, str] = {}
    uncalibrated: dict[str, str] = {}
    for rule in policy.rules:
        if rule.target != policy.target:
            continue
        action, why = effective_action(policy, rule, rubric)
        descriptions[rule.id] = explanation(policy, rule, action)
        if why is not None:
            uncalibrated[rule.id] = f"rule {rule.id}: {why}"
    detail = pl.col("_policy_rule").replace_strict(
        descriptions,
        default=f"no terminal rule matched: default {DEFAULT_ACTION.value}",
        return_dtype=pl.String,
    )
    reason = pl.struct(
        code=pl.col("_decision").replace_strict(_CODES, default=None, return_dtype=pl.String),
        path=pl.lit(""),
        detail=pl.concat_str(detail, pl.lit(f" ({policy.id}@{policy.version})")),
    )
    if uncalibrated:
        gated = pl.struct(
            code=pl.lit(CALIBRATION_UNAVAILABLE),
            path=pl.lit(""),
            detail=pl.col("_policy_rule").replace_strict(
                uncalibrated, default=None, return_dtype=pl.String
            ),
        )
        reasons = (
            pl.when(pl.col("_policy_rule").is_in(list(uncalibrated)))
            .then(pl.concat_list(reason, gated))
            .otherwise(pl.concat_list(reason))
        )
    else:
        reasons = pl.concat_list(reason)
    return decided.with_columns(
        _disposition=severity.replace_strict(by_severity, return_dtype=pl.String),
        _reasons_add=pl.when(pl.col("_decision") != Action.ACCEPT.value).then(reasons),
    )


def _notes(policy: Policy, decided: pl.DataFrame) -> dict[str, Any]:
    def counts(column: str) -> dict[str, int]:
        values = decided.select(pl.col(column).explode().drop_nulls()).to_series()
        return {str(k): int(n) for k, n in sorted(values.value_counts().iter_rows())}

    columns = {t: target_columns(policy, t) for t in policy.decision_targets}
    matched = {t: counts(trace) for t, (_, trace) in columns.items()}
    notes = {
        **policy.describe(),
        "decisions": counts("_decision"),
        "rules_matched": {r.id: matched[r.target].get(r.id, 0) for r in policy.rules},
    }
    if len(columns) > 1:
        notes["decisions_by_target"] = {t: counts(d) for t, (d, _) in columns.items()}
    return notes
