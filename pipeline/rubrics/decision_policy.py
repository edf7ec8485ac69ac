"""Decision policies: the AutoQA evaluation contract's decision model (seed 003 §§8, 13, 14).

A policy file (TOML) is a versioned contract object: an id, a semantic ``version``, a
``status`` (``draft``, ``approved``, ``deprecated``; a ``retired`` contract is refused),
the decision ``target`` that sets a row's disposition and, optionally, every
``targets`` it decides side by side (``attempt``, ``annotation``, ``composite_case``,
§5.2: never collapsed), an optional ``[calibration]`` table and its rules. Each rule has
a ``target``, an ``id``, a ``priority``, a ``description``, structured ``match``
conditions, an ``action`` (``accept``, ``accept_with_note``, ``rework``, ``reject``,
``escalate``), a ``terminal`` flag and optionally a ``severity`` (``none`` …
``critical``, §8.12), a required calibrated ``confidence`` band (§14.3), a
``compensation`` flag and an ``explanation`` template. A rule with ``hard_gate = true``
is §14.3's hard gate and must say all of that. Evaluation is deterministic and
vectorised, per target:

* rules are read in descending ``priority`` (priorities are unique within a target);
* a rule whose conditions all hold *matches* and joins the row's ``_policy_trace``;
* the first matching ``terminal`` rule stops evaluation;
* the decision is the most severe action among the matched rules, by
  ``reject > rework > escalate > accept_with_note > accept``; when no terminal rule
  matched, the default ``escalate`` (seed 003 §14.4, DESIGN §3.10) joins that set and the
  trace ends with ``default:escalate``. So only a terminal rule can accept a row, and a
  non-terminal rule can only add a note or make the decision stricter;
* autonomy (§13.4): a rule whose action needs calibrated confidence (its own
  ``confidence`` band, or an action listed in ``requires_calibration_for_actions``) takes
  ``uncalibrated_action`` instead when a criterion or gate it decides on is calibrated
  below that band (``uncalibrated`` when the contract declares no calibration for it).

Match conditions (all must hold; a missing condition always holds):

=====================  ==================================================================
``criteria``           ``{id = [states]}``: that criterion's state is one of these
``any_criterion``      ``[states]``: some criterion's state is one of these
``all_criteria``       ``[states]``: every criterion's state is one of these
``gates``              ``{name = [states]}``, ``any_gate``, ``all_gates``: the same for gates
``weighted``           ``[states]``: the weighted score against the acceptance score
                       (``met``, ``not_met``, ``unknown`` when not computed)
``reasons_any``        ``[codes]``: the row carries a reason with one of these codes
                       (``cross.*`` matches every code under ``cross.``)
``reasons_none``       ``[codes]``: the row carries none of these
=====================  ==================================================================

Validation (:func:`load_policy`, :func:`validate_policy`) rejects unknown keys,
criteria, gates, states and actions; a version that is not semantic; duplicate rule ids
or priorities; a rule whose own conditions contradict each other (it can never match);
unreachable rules: those whose conditions imply the conditions of a terminal rule of
higher priority (for example anything after a terminal rule with no conditions), since
such a rule can never be evaluated; and what the contract forbids: a ``rework`` or
``reject`` triggered by ``not_applicable`` (§8.7), any action but ``escalate`` triggered
by ``unknown`` or ``ambiguous``, and a terminal ``accept`` that could match a row with
an uncertain criterion or gate (§6.9: uncertainty is never silently turned into success
or failure).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import string
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Final

import polars as pl

from pipeline.core.config import ConfigError, build_section, parse_toml
from pipeline.core.files import read_regular
from pipeline.core.reasons import POLICY_CALIBRATION_UNAVAILABLE, Disposition
from pipeline.records.lineage import check_pin
from pipeline.rubrics.model import MissingSourceError, Rubric, RubricError, Severity, State
from pipeline.rubrics.scoring import WEIGHTED_STATE, criterion_state_column, gate_state_column

__all__ = [
    "CALIBRATION_UNAVAILABLE",
    "DEFAULT_ACTION",
    "DEFAULT_TRACE",
    "EXPLANATION_FIELDS",
    "TARGETS",
    "Action",
    "Band",
    "Calibration",
    "CalibrationProfile",
    "Policy",
    "Rule",
    "RuleMatch",
    "Status",
    "decide_frame",
    "decide_targets",
    "effective_action",
    "explanation",
    "load_policy",
    "target_columns",
    "validate_policy",
]


class Action(StrEnum):
    ACCEPT = "accept"
    ACCEPT_WITH_NOTE = "accept_with_note"
    ESCALATE = "escalate"
    REWORK = "rework"
    REJECT = "reject"

    @property
    def severity(self) -> int:
        return _SEVERITY.index(self)

    @property
    def disposition(self) -> Disposition:
        """accept → accepted, escalate → quarantined (a person decides), else rejected."""
        if self in (Action.ACCEPT, Action.ACCEPT_WITH_NOTE):
            return Disposition.ACCEPTED
        if self is Action.ESCALATE:
            return Disposition.QUARANTINED
        return Disposition.REJECTED


_SEVERITY: Final = (
    Action.ACCEPT,
    Action.ACCEPT_WITH_NOTE,
    Action.ESCALATE,
    Action.REWORK,
    Action.REJECT,
)
DEFAULT_ACTION: Final = Action.ESCALATE
#: Reason code beside ``policy.<action>`` when the contract's calibration replaced the
#: deciding rule's action (§13.4; §19's "calibration unavailable").
CALIBRATION_UNAVAILABLE: Final = POLICY_CALIBRATION_UNAVAILABLE
#: The last entry of ``_policy_trace`` when no terminal rule matched (no rule id can
#: take this form: ids starting with ``default:`` are refused).
DEFAULT_TRACE: Final = f"default:{DEFAULT_ACTION.value}"
#: Seed 003 §5.2's decision targets.
TARGETS: Final = ("attempt", "annotation", "composite_case")
_STATES: Final = frozenset(s.value for s in State)
_UNCERTAIN: Final = frozenset(s.value for s in State if s.uncertain)
_NEGATIVE: Final = frozenset({Action.REWORK.value, Action.REJECT.value})
_POSITIVE: Final = frozenset({Action.ACCEPT.value, Action.ACCEPT_WITH_NOTE.value})
#: Seed 003 §7: "contractVersion - semantic version" (SemVer 2.0.0).
_SEMVER: Final = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*)(?:\.(?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*))*))?"
    r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
)
#: Placeholders an ``explanation`` template may use: constants of the contract, never a
#: record's value (explanations reach reasons' details and report.html).
EXPLANATION_FIELDS: Final = (
    "rule",
    "description",
    "action",
    "target",
    "policy",
    "version",
    "severity",
)


class Status(StrEnum):
    """A contract's lifecycle status (seed 003 §8.1)."""

    DRAFT = "draft"
    APPROVED = "approved"
    DEPRECATED = "deprecated"
    RETIRED = "retired"


class Band(StrEnum):
    """A calibrated confidence band (seed 003 §13.3), weakest first. The words have no
    numeric meaning of their own: the contract's ``[calibration] bands`` assign it."""

    UNCALIBRATED = "uncalibrated"
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"

    @property
    def rank(self) -> int:
        return list(Band).index(self)


@dataclass(frozen=True)
class CalibrationProfile:
    """The calibration a contract declares for one criterion or gate (seed 003 §13.2)."""

    #: Calibrated confidence of the verdicts for this criterion or gate, in [0, 1].
    confidence: float
    #: The calibration profile it comes from (event, model, benchmark, method, date...).
    profile: str = ""


@dataclass(frozen=True)
class Calibration:
    """``[calibration]``: confidence bands and the autonomy invariant (seed 003 §13.3-4)."""

    #: Lower bounds of the bands: ``{ high = 0.95, medium = 0.8 }``; below medium is low.
    bands: dict[str, float] = field(default_factory=dict)
    #: Actions never taken automatically on an uncalibrated criterion or gate.
    requires_calibration_for_actions: tuple[str, ...] = ()
    #: What such a rule does instead (seed 003 §13.4: "normally escalation").
    uncalibrated_action: str = DEFAULT_ACTION.value
    #: Criterion id or gate name → its calibration; anything absent is uncalibrated.
    subjects: dict[str, CalibrationProfile] = field(default_factory=dict)

    def band(self, subject: str) -> Band:
        profile = self.subjects.get(subject)
        if profile is None:
            return Band.UNCALIBRATED
        for band in (Band.HIGH, Band.MEDIUM):
            bound = self.bands.get(band.value)
            if bound is not None and profile.confidence >= bound:
                return band
        return Band.LOW

    def describe(self) -> dict[str, Any]:
        return {
            "bands": dict(self.bands),
            "requires_calibration_for_actions": list(self.requires_calibration_for_actions),
            "uncalibrated_action": self.uncalibrated_action,
            "subjects": {
                name: {"confidence": p.confidence, "profile": p.profile, "band": self.band(name)}
                for name, p in sorted(self.subjects.items())
            },
        }


#: Rules per policy are capped so (severity, position) packs into one integer rank.
_RANK: Final = 1000
_RULE_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
_SEPARATOR: Final = "\x1f"
_WEIGHTED_STATES: Final = frozenset({State.MET.value, State.NOT_MET.value, State.UNKNOWN.value})


@dataclass(frozen=True)
class RuleMatch:
    criteria: dict[str, tuple[str, ...]] = field(default_factory=dict)
    any_criterion: tuple[str, ...] = ()
    all_criteria: tuple[str, ...] = ()
    gates: dict[str, tuple[str, ...]] = field(default_factory=dict)
    any_gate: tuple[str, ...] = ()
    all_gates: tuple[str, ...] = ()
    weighted: tuple[str, ...] = ()
    reasons_any: tuple[str, ...] = ()
    reasons_none: tuple[str, ...] = ()


@dataclass(frozen=True)
class Rule:
    id: str
    priority: int
    target: str
    description: str
    action: str
    terminal: bool
    match: RuleMatch = RuleMatch()
    #: The severity of what the rule detects (§8.12), apart from its action.
    severity: str | None = None
    #: The calibrated confidence band its criteria and gates need for the action to be
    #: taken automatically (§14.3); below it the contract's ``uncalibrated_action``.
    confidence: str | None = None
    #: ``forbidden``: nothing may compensate for what it detects (§14.3); a hard gate
    #: saying so is terminal. ``allowed``: later rules still run (their actions can
    #: still only make the decision stricter).
    compensation: str | None = None
    #: §14.3's hard gate: one criterion or gate, its triggering verdicts, a severity, a
    #: required confidence, an action other than acceptance and the compensation flag,
    #: all stated.
    hard_gate: bool = False
    #: Template of the reason detail, over :data:`EXPLANATION_FIELDS` (§14.1).
    explanation: str | None = None


@dataclass(frozen=True)
class PolicyFile:
    """The policy file's layout, as read (see :class:`Policy` for the checked form)."""

    policy: str
    version: str
    target: str
    rules: tuple[Rule, ...]
    rubric: str | None = None
    description: str = ""
    status: str = Status.DRAFT.value
    targets: tuple[str, ...] = ()
    calibration: Calibration = Calibration()


@dataclass(frozen=True)
class Policy:
    id: str
    version: str
    #: the target whose decision sets the row's disposition
    target: str
    rubric: str | None
    #: in evaluation order (descending priority)
    rules: tuple[Rule, ...]
    path: Path
    sha256: str
    status: str = Status.DRAFT.value
    #: every target decided, side by side (``target`` among them); empty: ``target`` only
    targets: tuple[str, ...] = ()
    calibration: Calibration = Calibration()

    @property
    def decision_targets(self) -> tuple[str, ...]:
        """Every target the policy decides, the disposing one first."""
        return (self.target, *(t for t in self.targets if t != self.target))

    def for_target(self, target: str) -> Policy:
        """The policy restricted to the rules of one target."""
        rules = tuple(r for r in self.rules if r.target == target)
        return dataclasses.replace(self, target=target, targets=(), rules=rules)

    def describe(self) -> dict[str, Any]:
        described: dict[str, Any] = {
            "id": self.id,
            "version": self.version,
            "status": self.status,
            "target": self.target,
        }
        if self.targets:
            described["targets"] = list(self.decision_targets)
        described |= {
            "rubric": self.rubric,
            "file": str(self.path),
            "sha256": self.sha256,
            "default_action": DEFAULT_ACTION.value,
            "rules": [r.id for r in self.rules],
        }
        hard_gates = {
            r.id: {
                "target": r.target,
                "match": {k: list(v) for k, v in {**r.match.criteria, **r.match.gates}.items()},
                "severity": r.severity,
                "confidence": r.confidence,
                "action": r.action,
                "compensation": r.compensation,
            }
            for r in self.rules
            if r.hard_gate
        }
        if hard_gates:
            described["hard_gates"] = hard_gates
        if self.calibration != Calibration():
            described["calibration"] = self.calibration.describe()
        return described


def _subjects(rule: Rule, rubric: Rubric | None) -> list[str]:
    """The criteria and gates whose verdicts a rule decides on."""
    criteria = [c.id for c in rubric.criteria] if rubric else []
    gates = [g.name for g in rubric.gates] if rubric else []
    m = rule.match
    every_criterion = bool(m.any_criterion or m.all_criteria or m.weighted)
    every_gate = bool(m.any_gate or m.all_gates or m.weighted)
    named = [*m.criteria, *m.gates]
    named += [c for c in criteria if every_criterion and c not in named]
    named += [g for g in gates if every_gate and g not in named]
    return named


def effective_action(policy: Policy, rule: Rule, rubric: Rubric | None) -> tuple[str, str | None]:
    """The action the rule takes and, when calibration changed it, why (§13.4).

    A rule needs its own ``confidence`` band, or ``low`` (any calibration) when its action
    is in ``requires_calibration_for_actions``. A rule that decides on no criterion or
    gate (reason codes only) needs none.
    """
    calibration = policy.calibration
    needed = rule.confidence
    if needed is None and rule.action in calibration.requires_calibration_for_actions:
        needed = Band.LOW.value
    if needed is None:
        return rule.action, None
    short = [
        (name, calibration.band(name))
        for name in _subjects(rule, rubric)
        if calibration.band(name).rank < Band(needed).rank
    ]
    if not short:
        return rule.action, None
    names = ", ".join(f"{name} is {band.value}" for name, band in short)
    return calibration.uncalibrated_action, (
        f"{rule.action} needs calibrated confidence {needed}: {names}; "
        f"{calibration.uncalibrated_action} instead"
    )


def explanation(policy: Policy, rule: Rule, action: str) -> str:
    """The rule's explanation (its template filled with constants), else
    ``rule <id>: <description>``."""
    if rule.explanation is None:
        return f"rule {rule.id}: {rule.description}"
    return rule.explanation.format(
        rule=rule.id,
        description=rule.description,
        action=action,
        target=rule.target,
        policy=policy.id,
        version=policy.version,
        severity=rule.severity or Severity.NONE.value,
    )


# -- static analysis: each rule's conditions as sets of allowed states -----------------


@dataclass(frozen=True)
class _Normalised:
    """A rule's match as per-subject allowed sets plus existential conditions."""

    criteria: dict[str, frozenset[str]]
    gates: dict[str, frozenset[str]]
    weighted: frozenset[str]
    any_criterion: tuple[frozenset[str], ...]
    any_gate: tuple[frozenset[str], ...]
    reasons_any: tuple[frozenset[str], ...]
    reasons_none: frozenset[str]


def _pattern_covers(general: str, specific: str) -> bool:
    """Whether every code matched by ``specific`` is matched by ``general``."""
    if general.endswith(".*"):
        return specific.startswith(general[:-1])
    return general == specific


def _normalise(match: RuleMatch, criteria: Sequence[str], gates: Sequence[str]) -> _Normalised:
    full = frozenset(_STATES)

    def subjects(
        names: Sequence[str], explicit: Mapping[str, tuple[str, ...]], every: tuple[str, ...]
    ) -> dict[str, frozenset[str]]:
        allowed = {}
        for name in names:
            states = full
            if name in explicit:
                states &= frozenset(explicit[name])
            if every:
                states &= frozenset(every)
            allowed[name] = states
        return allowed

    return _Normalised(
        criteria=subjects(criteria, match.criteria, match.all_criteria),
        gates=subjects(gates, match.gates, match.all_gates),
        weighted=frozenset(match.weighted) if match.weighted else _WEIGHTED_STATES,
        any_criterion=(frozenset(match.any_criterion),) if match.any_criterion else (),
        any_gate=(frozenset(match.any_gate),) if match.any_gate else (),
        reasons_any=(frozenset(match.reasons_any),) if match.reasons_any else (),
        reasons_none=frozenset(match.reasons_none),
    )


#: the verdicts a weighted state needs of every gate, and of every criterion (one of
#: which must be scored), as scoring computes it (:mod:`pipeline.rubrics.scoring`)
_PASSING_GATE: Final = frozenset({State.MET.value, State.NOT_APPLICABLE.value})
_KNOWN_CRITERION: Final = frozenset(
    {State.MET.value, State.NOT_MET.value, State.NOT_APPLICABLE.value}
)
_SCORED: Final = frozenset({State.MET.value, State.NOT_MET.value})


def _with_scoring(rule: _Normalised) -> _Normalised:
    """``rule`` with what scoring implies between the weighted state and the verdicts: a
    weighted ``met``/``not_met`` exists only when every gate is met or not applicable and
    every criterion is known, one of them scored; a gate or criterion that cannot be so
    leaves it ``unknown``. The static checks then see that ``weighted = ["met"]`` with
    ``any_gate = ["not_met"]`` never matches, and that a rule on a failed gate after a
    terminal ``weighted = ["unknown"]`` is never reached (both passed before)."""
    unknown = frozenset({State.UNKNOWN.value})
    blocked = (
        any(not states & _PASSING_GATE for states in rule.gates.values())
        or any(not wanted & _PASSING_GATE for wanted in rule.any_gate)
        or any(not states & _KNOWN_CRITERION for states in rule.criteria.values())
        or any(not wanted & _KNOWN_CRITERION for wanted in rule.any_criterion)
        or (bool(rule.criteria) and all(not states & _SCORED for states in rule.criteria.values()))
    )
    weighted = rule.weighted & unknown if blocked else rule.weighted
    if State.UNKNOWN.value in weighted:
        return dataclasses.replace(rule, weighted=weighted)
    return dataclasses.replace(
        rule,
        weighted=weighted,
        gates={name: states & _PASSING_GATE for name, states in rule.gates.items()},
        criteria={name: states & _KNOWN_CRITERION for name, states in rule.criteria.items()},
        any_criterion=(*rule.any_criterion, _SCORED),
    )


def _never_matches(rule: _Normalised) -> str | None:
    for kind, allowed in (("criterion", rule.criteria), ("gate", rule.gates)):
        for name, states in allowed.items():
            if not states:
                return f"no state of {kind} {name!r} satisfies its conditions"
    for kind, allowed, existentials in (
        ("criterion", rule.criteria, rule.any_criterion),
        ("gate", rule.gates, rule.any_gate),
    ):
        for wanted in existentials:
            if not any(states & wanted for states in allowed.values()):
                return f"no {kind} can be in {sorted(wanted)}"
    if not rule.weighted:
        return "no weighted state satisfies its conditions"
    for patterns in rule.reasons_any:
        if all(any(_pattern_covers(n, p) for n in rule.reasons_none) for p in patterns):
            return "reasons_any only names codes that reasons_none excludes"
    return None


def _implies(lower: _Normalised, higher: _Normalised) -> bool:
    """Sound (not complete) check that every row matching ``lower`` matches ``higher``."""
    for mine, theirs in ((lower.criteria, higher.criteria), (lower.gates, higher.gates)):
        if any(not mine[name] <= theirs[name] for name in theirs):
            return False
    if not lower.weighted <= higher.weighted:
        return False
    for mine_sets, their_sets, mine in (
        (lower.any_criterion, higher.any_criterion, lower.criteria),
        (lower.any_gate, higher.any_gate, lower.gates),
    ):
        for wanted in their_sets:
            guaranteed = any(states <= wanted for states in mine.values()) or any(
                s <= wanted for s in mine_sets
            )
            if not guaranteed:
                return False
    for wanted in higher.reasons_any:
        if not any(
            all(any(_pattern_covers(w, p) for w in wanted) for p in patterns)
            for patterns in lower.reasons_any
        ):
            return False
    return all(
        any(_pattern_covers(mine, theirs) for mine in lower.reasons_none)
        for theirs in higher.reasons_none
    )


def validate_policy(policy: Policy, rubric: Rubric | None) -> None:
    """Check a policy against the rubric it decides on; raise :class:`RubricError`."""
    problems: list[str] = []
    criteria = [c.id for c in rubric.criteria] if rubric else []
    gates = [g.name for g in rubric.gates] if rubric else []
    problems += _check_contract(policy, criteria, gates)
    if rubric is not None and policy.rubric is not None and policy.rubric != rubric.id:
        problems.append(f"rubric: the policy is for {policy.rubric!r}, the kind uses {rubric.id!r}")
    if len(policy.rules) >= _RANK:
        problems.append(f"rules: at most {_RANK - 1} rules")
    ids = [r.id for r in policy.rules]
    problems += [
        f"rules: id {i!r} is used more than once"
        for i in sorted({i for i in ids if ids.count(i) > 1})
    ]
    targets = policy.decision_targets
    for target in targets:
        priorities = [r.priority for r in policy.rules if r.target == target]
        problems += [
            f"rules: priority {p} is used more than once"
            + (f" for target {target!r}" if len(targets) > 1 else "")
            + " (evaluation order must be explicit)"
            for p in sorted({p for p in priorities if priorities.count(p) > 1})
        ]
    for rule in policy.rules:
        where = f"rules.{rule.id}"
        if not _RULE_ID.fullmatch(rule.id):
            problems.append(
                f"{where}.id: ids are 1-128 of A-Z a-z 0-9 _ . : - (not starting with a symbol)"
            )
        if rule.id.startswith("default:"):
            problems.append(f"{where}.id: 'default:' is reserved for the default action's trace")
        if rule.target not in targets:
            decides = (
                f"the policy decides {policy.target!r}"
                if len(targets) == 1
                else f"the policy decides {', '.join(map(repr, targets))}"
            )
            problems.append(f"{where}.target: {rule.target!r}, but {decides}")
        if rule.action not in {a.value for a in Action}:
            problems.append(
                f"{where}.action: {rule.action!r} is not one of {', '.join(a.value for a in Action)}"
            )
        if not rule.description.strip():
            problems.append(f"{where}.description: empty")
        problems += _check_match(rule.match, where, criteria, gates, rubric is not None)
        problems += _check_rule_contract(rule, where)
    if problems:
        raise RubricError.listing(f"{policy.path}: not a valid policy:", *problems)

    normalised = [_with_scoring(_normalise(r.match, criteria, gates)) for r in policy.rules]
    for n, (rule, mine) in enumerate(zip(policy.rules, normalised, strict=True)):
        why = _never_matches(mine)
        if why:
            problems.append(f"rules.{rule.id}: can never match: {why}")
            continue
        forbidden = _forbidden(rule, mine) or _forbidden_below_confidence(policy, rule, mine)
        if forbidden:
            problems.append(f"rules.{rule.id}: {forbidden}")
            continue
        for earlier, theirs in zip(policy.rules[:n], normalised[:n], strict=True):
            if earlier.target == rule.target and earlier.terminal and _implies(mine, theirs):
                problems.append(
                    f"rules.{rule.id}: unreachable: every row it matches is decided first by "
                    f"the terminal rule {earlier.id!r} (priority {earlier.priority})"
                )
                break
    if problems:
        raise RubricError.listing(f"{policy.path}: not a valid policy:", *problems)


def _check_contract(policy: Policy, criteria: Sequence[str], gates: Sequence[str]) -> list[str]:
    """The contract's identity, targets and calibration (seed 003 §§5.2, 8.1, 13)."""
    problems = []
    if not _SEMVER.fullmatch(policy.version):
        problems.append(
            f"version: {policy.version!r} is not a semantic version (MAJOR.MINOR.PATCH, "
            "AutoQA contract §8.1)"
        )
    if policy.status not in {s.value for s in Status}:
        problems.append(
            f"status: {policy.status!r} is not one of {', '.join(s.value for s in Status)}"
        )
    elif policy.status == Status.RETIRED.value:
        problems.append("status: the contract is retired; it may not decide rows")
    targets = policy.targets or (policy.target,)
    problems += [
        f"targets: {name!r} is listed more than once"
        for name in sorted({t for t in targets if targets.count(t) > 1})
    ]
    for name in dict.fromkeys((policy.target, *targets)):
        if name not in TARGETS:
            at = "target" if name == policy.target else "targets"
            problems.append(f"{at}: {name!r} is not one of {', '.join(TARGETS)}")
    if policy.targets and policy.target not in policy.targets:
        problems.append(f"targets: does not list the target {policy.target!r}")
    calibration = policy.calibration
    where = "calibration"
    actions = {a.value for a in Action}
    for name, bound in calibration.bands.items():
        if name not in (Band.HIGH.value, Band.MEDIUM.value):
            problems.append(f"{where}.bands.{name}: only 'high' and 'medium' have a lower bound")
        elif not 0.0 <= bound <= 1.0:
            problems.append(f"{where}.bands.{name}: {bound!r} is not in [0, 1]")
    high, medium = calibration.bands.get("high"), calibration.bands.get("medium")
    if high is not None and medium is not None and not medium < high:
        problems.append(f"{where}.bands: medium ({medium!r}) must be below high ({high!r})")
    problems += [
        f"{where}.requires_calibration_for_actions: {a!r} is not one of {', '.join(actions)}"
        for a in calibration.requires_calibration_for_actions
        if a not in actions
    ]
    if calibration.uncalibrated_action not in actions:
        problems.append(
            f"{where}.uncalibrated_action: {calibration.uncalibrated_action!r} is not one of "
            + ", ".join(actions)
        )
    elif calibration.uncalibrated_action in calibration.requires_calibration_for_actions:
        problems.append(
            f"{where}.uncalibrated_action: {calibration.uncalibrated_action!r} itself requires "
            "calibration (AutoQA contract §13.4)"
        )
    for name, profile in calibration.subjects.items():
        if name not in criteria and name not in gates:
            problems.append(
                f"{where}.subjects.{name}: the rubric has no criterion or gate {name!r}"
            )
        if not 0.0 <= profile.confidence <= 1.0:
            problems.append(f"{where}.subjects.{name}.confidence: not in [0, 1]")
    return problems


def _check_rule_contract(rule: Rule, where: str) -> list[str]:
    """Severity, confidence, compensation, hard gates and explanations (§§8.12, 14.1, 14.3)."""
    problems = []
    if rule.severity is not None and rule.severity not in {s.value for s in Severity}:
        problems.append(
            f"{where}.severity: {rule.severity!r} is not one of "
            + ", ".join(s.value for s in Severity)
        )
    bands = [b.value for b in Band if b is not Band.UNCALIBRATED]
    if rule.confidence is not None and rule.confidence not in bands:
        problems.append(f"{where}.confidence: {rule.confidence!r} is not one of {', '.join(bands)}")
    if rule.compensation is not None and rule.compensation not in ("forbidden", "allowed"):
        problems.append(f"{where}.compensation: {rule.compensation!r} is not forbidden or allowed")
    if rule.hard_gate:
        missing = [
            key for key in ("severity", "confidence", "compensation") if getattr(rule, key) is None
        ]
        if missing:
            problems.append(
                f"{where}: a hard gate must state {', '.join(missing)} (AutoQA contract §14.3)"
            )
        m = rule.match
        subjects = len(m.criteria) + len(m.gates)
        if subjects != 1 or m.any_criterion or m.all_criteria or m.any_gate or m.all_gates:
            problems.append(
                f"{where}.match: a hard gate names exactly one criterion or gate and its "
                "triggering verdicts (AutoQA contract §14.3)"
            )
        if rule.compensation == "forbidden" and not rule.terminal:
            problems.append(
                f"{where}.terminal: a hard gate whose compensation is forbidden is terminal "
                "(no later rule may run)"
            )
        if rule.action in _POSITIVE:
            problems.append(f"{where}.action: a hard gate cannot {rule.action}")
    if rule.explanation is not None:
        try:
            parts = list(string.Formatter().parse(rule.explanation))
        except ValueError as exc:
            problems.append(f"{where}.explanation: not a template: {exc}")
            parts = []
        for _, name, spec, conversion in parts:
            if name is None:
                continue
            if name not in EXPLANATION_FIELDS or spec or conversion:
                problems.append(
                    f"{where}.explanation: {{{name}}} is not one of "
                    + ", ".join(f"{{{f}}}" for f in EXPLANATION_FIELDS)
                )
    return problems


def _forbidden_below_confidence(policy: Policy, rule: Rule, mine: _Normalised) -> str | None:
    """What the contract forbids the rule to do when its subjects' calibration falls short
    of its confidence, and it takes the contract's ``uncalibrated_action`` instead
    (:func:`effective_action`): that action was never checked, so ``accept`` could follow
    ``unknown``, ``reject`` follow ``not_applicable``, and a hard gate accept."""
    calibration = policy.calibration
    fallback = calibration.uncalibrated_action
    may_fall_back = (
        rule.confidence is not None or rule.action in calibration.requires_calibration_for_actions
    )
    if not may_fall_back or fallback == rule.action:
        return None
    if rule.hard_gate and fallback in _POSITIVE:
        why: str | None = f"a hard gate cannot {fallback}"
    else:
        why = _forbidden(dataclasses.replace(rule, action=fallback), mine)
    if why is None:
        return None
    return f"below its confidence it takes calibration.uncalibrated_action {fallback!r}: {why}"


def _forbidden(rule: Rule, mine: _Normalised) -> str | None:
    """What the contract forbids a rule to do, or None.

    §8.7: a criterion that does not apply "MUST NOT trigger a negative operational
    action". §6.9: uncertainty "MUST NOT be silently converted into failure or success":
    only ``escalate`` may be triggered by ``unknown``/``ambiguous``, and a terminal
    acceptance must exclude them for every criterion and gate. A weighted state of
    ``met``/``not_met`` exists only when every gate is met or not applicable and every
    applicable criterion has a known score (:mod:`pipeline.rubrics.scoring`).
    """
    m = rule.match
    named = [
        *m.criteria.values(),
        *m.gates.values(),
        m.any_criterion,
        m.any_gate,
        m.all_criteria,
        m.all_gates,
        m.weighted,
    ]
    listed = {state for states in named for state in states}
    if rule.action in _NEGATIVE and State.NOT_APPLICABLE.value in listed:
        return (
            f"{rule.action} triggered by not_applicable: a criterion or gate that does not "
            "apply must not trigger a negative action (AutoQA contract §8.7)"
        )
    uncertain = sorted(listed & _UNCERTAIN)
    if rule.action != Action.ESCALATE.value and uncertain:
        return (
            f"{rule.action} triggered by {' / '.join(uncertain)}: uncertainty is never turned "
            "into success or failure; only escalate may follow it (AutoQA contract §6.9)"
        )
    if rule.terminal and rule.action in _POSITIVE and State.UNKNOWN.value in mine.weighted:
        open_ = [
            name
            for allowed in (mine.criteria, mine.gates)
            for name, states in allowed.items()
            if states & _UNCERTAIN
        ]
        if open_:
            return (
                f"{rule.action} could match a row whose {', '.join(open_)} is unknown or "
                "ambiguous: an acceptance must exclude uncertain verdicts (with all_criteria "
                "and all_gates, or weighted; AutoQA contract §6.9)"
            )
    return None


def _check_match(
    match: RuleMatch, where: str, criteria: Sequence[str], gates: Sequence[str], scored: bool
) -> list[str]:
    problems = []

    def states(values: Iterable[str], at: str, allowed: frozenset[str] = _STATES) -> None:
        values = list(values)
        if not values:
            problems.append(f"{at}: an empty list can never match")
        problems.extend(f"{at}: unknown state {v!r}" for v in values if v not in allowed)

    for name, values in match.criteria.items():
        if name not in criteria:
            problems.append(f"{where}.match.criteria.{name}: the rubric has no criterion {name!r}")
        states(values, f"{where}.match.criteria.{name}")
    for name, values in match.gates.items():
        if name not in gates:
            problems.append(f"{where}.match.gates.{name}: the rubric has no gate {name!r}")
        states(values, f"{where}.match.gates.{name}")
    for key in ("any_criterion", "all_criteria", "any_gate", "all_gates"):
        values = getattr(match, key)
        if values:
            states(values, f"{where}.match.{key}")
    if match.weighted:
        states(match.weighted, f"{where}.match.weighted", _WEIGHTED_STATES)
    uses_rubric = any(
        getattr(match, k)
        for k in (
            "criteria",
            "any_criterion",
            "all_criteria",
            "gates",
            "any_gate",
            "all_gates",
            "weighted",
        )
    )
    if uses_rubric and not scored:
        problems.append(
            f"{where}.match: conditions on criteria or gates need a rubric for the kind"
        )
    for key in ("reasons_any", "reasons_none"):
        for code in getattr(match, key):
            stem = code[:-2] if code.endswith(".*") else code
            if not stem or "*" in stem or not all(part for part in stem.split(".")):
                problems.append(
                    f"{where}.match.{key}: {code!r} is not a code or a 'prefix.*' pattern"
                )
    return problems


def _empty_conditions(table: dict[str, Any]) -> list[str]:
    """A condition given as an empty list: read as absent, it matched every row
    (``reasons_any = []`` rejected all 115 decided rows of the bundled campaign); read
    literally ("some gate is in []") it never holds. Either way it is a mistake."""
    return [
        f"rules.{rule.get('id', n)}.match.{key}: an empty list can never match"
        for n, rule in enumerate(table.get("rules") or [])
        if isinstance(rule, dict) and isinstance(rule.get("match"), dict)
        for key in _LISTED_CONDITIONS
        if rule["match"].get(key) == []
    ]


#: the conditions a rule lists states or codes for (``reasons_none = []`` excludes
#: nothing, as absent: it is not among them)
_LISTED_CONDITIONS: Final = (
    "any_criterion",
    "all_criteria",
    "any_gate",
    "all_gates",
    "weighted",
    "reasons_any",
)


def load_policy(path: Path, pinned: str | None = None) -> Policy:
    """Read a policy file (TOML, strict keys), check its digest against ``pinned``."""
    data = read_regular(path, f"cannot read policy {path}", error=MissingSourceError)
    sha256 = hashlib.sha256(data).hexdigest()
    check_pin(f"policy {path}", sha256, pinned, RubricError)
    try:
        table = parse_toml(data, str(path))
        document = build_section(PolicyFile, table, "")
    except ConfigError as exc:
        raise RubricError(
            str(exc) if str(exc).startswith(str(path)) else f"{path}: {exc}"
        ) from None
    empty = _empty_conditions(table)
    if empty:
        raise RubricError.listing(f"{path}: not a valid policy:", *empty)
    return Policy(
        id=document.policy,
        version=document.version,
        target=document.target,
        rubric=document.rubric,
        rules=tuple(sorted(document.rules, key=lambda r: -r.priority)),
        path=path.resolve(),
        sha256=sha256,
        status=document.status,
        targets=document.targets,
        calibration=document.calibration,
    )


# -- evaluation ------------------------------------------------------------------------


def _in(column: str, values: Iterable[str]) -> pl.Expr:
    # A row the scoring stage did not reach has no state: that is unknown, never a pass.
    return pl.col(column).fill_null(State.UNKNOWN.value).is_in(list(values))


def _code_matches(patterns: Iterable[str]) -> pl.Expr:
    tests = []
    for pattern in patterns:
        if pattern.endswith(".*"):
            tests.append(pl.element().str.starts_with(pattern[:-1]))
        else:
            tests.append(pl.element() == pl.lit(pattern))
    return (
        pl.col("_reason_codes")
        .fill_null([])
        .list.eval(pl.any_horizontal(tests))
        .list.any()
        .fill_null(False)
    )


def _match_expr(match: RuleMatch, rubric: Rubric | None) -> pl.Expr:
    criteria = [c.id for c in rubric.criteria] if rubric else []
    gates = [g.name for g in rubric.gates] if rubric else []
    conditions = [pl.lit(True)]
    conditions += [_in(criterion_state_column(c), s) for c, s in match.criteria.items()]
    conditions += [_in(gate_state_column(g), s) for g, s in match.gates.items()]
    if match.any_criterion:
        conditions.append(
            pl.any_horizontal(
                [_in(criterion_state_column(c), match.any_criterion) for c in criteria]
                or [pl.lit(False)]
            )
        )
    if match.all_criteria:
        conditions.append(
            pl.all_horizontal(
                [_in(criterion_state_column(c), match.all_criteria) for c in criteria]
                or [pl.lit(True)]
            )
        )
    if match.any_gate:
        conditions.append(
            pl.any_horizontal(
                [_in(gate_state_column(g), match.any_gate) for g in gates] or [pl.lit(False)]
            )
        )
    if match.all_gates:
        conditions.append(
            pl.all_horizontal(
                [_in(gate_state_column(g), match.all_gates) for g in gates] or [pl.lit(True)]
            )
        )
    if match.weighted:
        conditions.append(_in(WEIGHTED_STATE, match.weighted))
    if match.reasons_any:
        conditions.append(_code_matches(match.reasons_any))
    if match.reasons_none:
        conditions.append(_code_matches(match.reasons_none).not_())
    return pl.all_horizontal(conditions)


def target_columns(policy: Policy, target: str) -> tuple[str, str]:
    """The decision and trace columns of one target: ``_decision`` and ``_policy_trace``
    for the disposing target, ``_decision_<target>`` and ``_policy_trace_<target>`` for
    every other target decided beside it."""
    if target == policy.target:
        return "_decision", "_policy_trace"
    return f"_decision_{target}", f"_policy_trace_{target}"


def decide_targets(policy: Policy, rubric: Rubric | None, rows: pl.DataFrame) -> pl.DataFrame:
    """:func:`decide_frame` for every target of ``policy``, side by side (§5.2).

    The disposing target's columns are ``_decision``, ``_policy_trace`` and
    ``_policy_rule``; each other target adds its own (:func:`target_columns`).
    """
    decided = decide_frame(policy.for_target(policy.target), rubric, rows)
    for target in policy.decision_targets[1:]:
        decision, trace = target_columns(policy, target)
        other = decide_frame(policy.for_target(target), rubric, rows)
        decided = decided.with_columns(
            other["_decision"].alias(decision), other["_policy_trace"].alias(trace)
        )
    return decided


def decide_frame(policy: Policy, rubric: Rubric | None, rows: pl.DataFrame) -> pl.DataFrame:
    """Add ``_decision``, ``_policy_trace`` and ``_policy_rule`` (the rule whose action
    won, null for the default) to every row, vectorised over the rules. The trace lists
    the matched rules and ends with :data:`DEFAULT_TRACE` when no terminal rule matched.
    Every rule of ``policy`` is evaluated: :meth:`Policy.for_target` selects a target's.

    ``rows`` carries the scoring stage's state columns and ``_reason_codes``.
    """
    rules = policy.rules
    matched = [f"_match{n}" for n in range(len(rules))]
    terminal = [n for n, r in enumerate(rules) if r.terminal]
    # The first matching terminal rule stops evaluation; rules after it do not count.
    stop = pl.min_horizontal(
        [pl.when(pl.col(matched[n])).then(pl.lit(n, pl.Int32)) for n in terminal]
        or [pl.lit(None, pl.Int32)]
    )
    counted = [
        pl.col(matched[n]) & (pl.col("_stop").is_null() | (pl.lit(n) <= pl.col("_stop")))
        for n in range(len(rules))
    ]
    # Each candidate gets a rank: severity first, then rule order, so the winning action
    # is attributed to the earliest rule that asked for it. The default ranks below every
    # rule of its own severity and joins only when no terminal rule matched.
    ranks: dict[int, tuple[str, str | None]] = {
        DEFAULT_ACTION.severity * _RANK: (DEFAULT_ACTION.value, None)
    }
    candidates = [pl.when(pl.col("_stop").is_null()).then(pl.lit(DEFAULT_ACTION.severity * _RANK))]
    for n, rule in enumerate(rules):
        action, _ = effective_action(policy, rule, rubric)
        rank = Action(action).severity * _RANK + (_RANK - 1 - n)
        ranks[rank] = (action, rule.id)
        candidates.append(pl.when(counted[n]).then(pl.lit(rank)))
    best = pl.max_horizontal(candidates)
    keys = list(ranks)
    # The trace is joined into one string and split: concat_list over nullable columns
    # is two orders of magnitude slower. Rule ids never contain the separator.
    joined = pl.concat_str(
        [
            *(
                pl.when(c).then(pl.lit(rule.id + _SEPARATOR))
                for c, rule in zip(counted, rules, strict=True)
            ),
            pl.when(pl.col("_stop").is_null()).then(pl.lit(DEFAULT_TRACE + _SEPARATOR)),
        ],
        ignore_nulls=True,
    )
    trace = joined.str.strip_suffix(_SEPARATOR).str.split(_SEPARATOR)
    return (
        rows.lazy()
        .with_columns(
            _match_expr(r.match, rubric).alias(m) for r, m in zip(rules, matched, strict=True)
        )
        .with_columns(stop.alias("_stop"))
        .with_columns(
            best.replace_strict(keys, [ranks[k][0] for k in keys], return_dtype=pl.String).alias(
                "_decision"
            ),
            trace.alias("_policy_trace"),
            best.replace_strict(keys, [ranks[k][1] for k in keys], return_dtype=pl.String).alias(
                "_policy_rule"
            ),
        )
        .drop(*matched, "_stop")
        .collect()
    )
