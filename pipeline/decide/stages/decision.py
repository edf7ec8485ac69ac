"""Decision policy stage (order 400): criterion and gate states → an action per row.

For each kind with a ``[policy.<kind>]`` file it evaluates the rules
(:func:`pipeline.rubrics.decision_policy.decide_frame`) over every row that is not a duplicate, after the
scoring stage and whatever cross-record and dedupe stages ran before it (their reason
codes are in ``_reason_codes``). ``_decision`` and ``_policy_trace`` go on every such
row, in accepted/, quarantined/ and rejected/ alike. Dispositions follow the decision:
accept / accept_with_note → accepted, escalate → quarantined, rework / reject →
rejected, with a ``policy.<action>`` reason naming the deciding rule (none for a plain
accept). A policy never rescues a row: an earlier quarantine or rejection stands.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import polars as pl
import pyarrow as pa

from pipeline.core.config import CampaignConfig
from pipeline.core.reasons import POLICY_CODES, Disposition
from pipeline.decide.context import GlobalContext, OutputColumn, register_stage
from pipeline.decide.stages.scoring import SCORED_DISPOSITIONS
from pipeline.rubrics.campaign import kind_policy, scoring_plan
from pipeline.rubrics.decision_policy import Action, Policy, decide_frame
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
    reason_codes = tuple(_CODES.values())

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
        if self.policy(ctx, kind) is None:
            return []
        return [
            OutputColumn("_decision", pa.string(), SCORED_DISPOSITIONS),
            OutputColumn("_policy_trace", pa.list_(pa.string()), SCORED_DISPOSITIONS),
            OutputColumn("_policy", pa.string(), SCORED_DISPOSITIONS),
            OutputColumn("_policy_sha256", pa.string(), SCORED_DISPOSITIONS),
        ]

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
        return decided.select(
            "_shard",
            "_shard_line",
            "_disposition",
            "_reasons_add",
            "_decision",
            "_policy_trace",
            _policy=pl.lit(f"{policy.id}@{policy.version}"),
            _policy_sha256=pl.lit(policy.sha256),
        )


def _decide(policy: Policy, rubric: Rubric | None, rows: pl.DataFrame) -> pl.DataFrame:
    decided = decide_frame(policy, rubric, rows)
    actions = [a.value for a in Action]
    mapped = pl.col("_decision").replace_strict(
        actions, [Action(a).disposition.value for a in actions], return_dtype=pl.String
    )
    severity = pl.max_horizontal(
        pl.col("_disposition").replace_strict(_SEVERITY, return_dtype=pl.Int8),
        mapped.replace_strict(_SEVERITY, return_dtype=pl.Int8),
    )
    by_severity = {v: k for k, v in _SEVERITY.items()}
    descriptions = {r.id: f"rule {r.id}: {r.description}" for r in policy.rules}
    detail = pl.col("_policy_rule").replace_strict(
        descriptions, default="no terminal rule matched: default escalate", return_dtype=pl.String
    )
    reason = pl.when(pl.col("_decision") != Action.ACCEPT.value).then(
        pl.concat_list(
            pl.struct(
                code=pl.col("_decision").replace_strict(
                    _CODES, default=None, return_dtype=pl.String
                ),
                path=pl.lit(""),
                detail=pl.concat_str(detail, pl.lit(f" ({policy.id}@{policy.version})")),
            )
        )
    )
    return decided.with_columns(
        _disposition=severity.replace_strict(by_severity, return_dtype=pl.String),
        _reasons_add=reason,
    )


def _notes(policy: Policy, decided: pl.DataFrame) -> dict[str, Any]:
    decisions = {str(k): int(n) for k, n in sorted(decided["_decision"].value_counts().iter_rows())}
    rules = (
        decided.select(pl.col("_policy_trace").explode().drop_nulls()).to_series().value_counts()
    )
    matched = {str(k): int(n) for k, n in rules.iter_rows()}
    return {
        **policy.describe(),
        "decisions": decisions,
        "rules_matched": {r.id: matched.get(r.id, 0) for r in policy.rules},
    }
