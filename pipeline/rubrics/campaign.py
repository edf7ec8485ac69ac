"""What a campaign asks of rubrics and policies, loaded and checked before any work.

``[rubrics]``, ``[scoring.<kind>]`` and ``[policy.<kind>]`` in the campaign config name
rubric files, bind them to a kind's columns and attach a decision policy. Everything is
resolved here, once before the gate reads a line (so a bad pin, binding or policy fails
the run like a bad schema pin) and again by the stages that use it.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from pipeline.core.config import CampaignConfig, ConfigError
from pipeline.gate.gate import Gate
from pipeline.kinds import KINDS, check_kind_names, get_kind
from pipeline.rubrics.bindings import ScoringPlan, compile_scoring
from pipeline.rubrics.decision_policy import Policy, load_policy, validate_policy
from pipeline.rubrics.model import RUBRIC_DIR, ReviewPolicy, RubricRegistry
from pipeline.rubrics.scoring import APPLIES, CRITERION

__all__ = [
    "CampaignRubrics",
    "criteria_inputs",
    "kind_policy",
    "load_campaign_rubrics",
    "review_policy_of",
    "rubric_registry",
    "scoring_plan",
]


@dataclass(frozen=True)
class CampaignRubrics:
    """Compiled scoring plans and checked policies, by kind."""

    plans: dict[str, ScoringPlan]
    policies: dict[str, Policy]


def rubric_registry(config: CampaignConfig) -> RubricRegistry:
    """The campaign's rubrics, checked against its pins."""
    settings = config.rubrics
    directory = config.resolve_path(settings.directory) if settings.directory else RUBRIC_DIR
    return RubricRegistry(directory, settings.pins)


def scoring_plan(config: CampaignConfig, kind: str, gate: Gate | None = None) -> ScoringPlan | None:
    """The kind's compiled bindings, or None when the campaign does not score it."""
    settings = config.scoring.get(kind)
    if settings is None:
        return None
    check_kind_names([kind], "scoring")
    rubric = rubric_registry(config).get(settings.rubric)
    fields = (gate or Gate(config)).kind_gate(KINDS[kind]).layout.fields
    return compile_scoring(kind, settings, rubric, fields)


def criteria_inputs(plan: ScoringPlan) -> dict[str, pl.Expr]:
    """The criteria inputs of :func:`~pipeline.rubrics.scoring.score_frame` from a plan's
    bindings: each criterion's score (null when unbound) and its applicability."""
    exprs: dict[str, pl.Expr] = {}
    for binding in plan.criteria:
        exprs[CRITERION + binding.criterion.id] = (
            binding.score if binding.score is not None else pl.lit(None, pl.Float64)
        )
        if binding.not_applicable:
            exprs[APPLIES + binding.criterion.id] = pl.lit(False)
        elif binding.applies is not None:
            exprs[APPLIES + binding.criterion.id] = binding.applies
    return exprs


def review_policy_of(
    config: CampaignConfig, kind: str, plan: ScoringPlan | None
) -> ReviewPolicy | None:
    """The rubric's review policy when the campaign applies it to ``kind``
    (``[scoring.<kind>] review_policy = "apply"``, the default), else None. A kind whose
    rows review no shared item cannot have one applied: a ConfigError says so."""
    if plan is None or plan.rubric.review_policy is None:
        return None
    if config.scoring[kind].review_policy != "apply":
        return None
    if get_kind(kind).review_subject() is None:
        raise ConfigError(
            f"scoring.{kind}: rubric {plan.rubric.id!r} has a review_policy, but {kind} "
            f'rows review no shared item; set review_policy = "record" to only record it'
        )
    return plan.rubric.review_policy


def kind_policy(config: CampaignConfig, kind: str, plan: ScoringPlan | None) -> Policy | None:
    """The kind's checked decision policy, or None when the campaign has none for it."""
    settings = config.policy.get(kind)
    if settings is None:
        return None
    check_kind_names([kind], "policy")
    policy = load_policy(config.resolve_path(settings.file), settings.sha256)
    validate_policy(policy, plan.rubric if plan else None)
    return policy


def load_campaign_rubrics(config: CampaignConfig, gate: Gate | None = None) -> CampaignRubrics:
    """Load every rubric, binding and policy the campaign names.

    Raises :class:`ConfigError` for a binding or section that does not fit (an unknown
    kind, criterion or column) and :class:`~pipeline.rubrics.model.RubricError` for a
    file rowgate refuses (invalid, or not matching its pin).
    """
    gate = gate or Gate(config)
    registry = rubric_registry(config)
    for rubric_id in config.rubrics.pins:
        registry.get(rubric_id)
    plans: dict[str, ScoringPlan] = {}
    for kind in sorted(config.scoring):
        plan = scoring_plan(config, kind, gate)
        assert plan is not None
        review_policy_of(config, kind, plan)
        plans[kind] = plan
    policies: dict[str, Policy] = {}
    for kind in sorted(config.policy):
        policy = kind_policy(config, kind, plans.get(kind))
        assert policy is not None
        policies[kind] = policy
    return CampaignRubrics(plans, policies)
