"""What a campaign asks of rubrics and policies, loaded and checked before any work.

``[rubrics]``, ``[scoring.<kind>]`` and ``[policy.<kind>]`` in the campaign config name
rubric files, bind them to a kind's columns and attach a decision policy. Everything is
resolved here, once before the gate reads a line (so a bad pin, binding or policy fails
the run like a bad schema pin) and again by the stages that use it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipeline.config import CampaignConfig, ConfigError
from pipeline.gate import Gate
from pipeline.kinds import KINDS
from pipeline.policy import Policy, load_policy, validate_policy
from pipeline.rubrics.bindings import ScoringPlan, compile_scoring
from pipeline.rubrics.model import RUBRIC_DIR, RubricRegistry

__all__ = ["CampaignRubrics", "load_campaign_rubrics", "rubric_registry"]


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


def load_campaign_rubrics(config: CampaignConfig, gate: Gate | None = None) -> CampaignRubrics:
    """Load every rubric, binding and policy the campaign names.

    Raises :class:`ConfigError` for a binding or section that does not fit (an unknown
    kind, criterion or column) and :class:`~pipeline.rubrics.model.RubricError` for a
    file rowgate refuses (invalid, or not matching its pin).
    """
    for section, kinds in (("scoring", config.scoring), ("policy", config.policy)):
        for kind in kinds:
            if kind not in KINDS:
                raise ConfigError(
                    f"{section}.{kind}: unknown record kind (known: {', '.join(sorted(KINDS))})"
                )
    registry = rubric_registry(config)
    for rubric_id in config.rubrics.pins:
        registry.get(rubric_id)
    gate = gate or Gate(config)
    plans = {
        kind: compile_scoring(
            kind,
            settings,
            registry.get(settings.rubric),
            gate.kind_gate(KINDS[kind]).layout.fields,
        )
        for kind, settings in sorted(config.scoring.items())
    }
    policies = {}
    for kind, settings in sorted(config.policy.items()):
        policy = load_policy(Path(config.resolve_path(settings.file)), settings.sha256)
        plan = plans.get(kind)
        validate_policy(policy, plan.rubric if plan else None)
        policies[kind] = policy
    return CampaignRubrics(plans, policies)
