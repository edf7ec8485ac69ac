"""Decision policies: priority-ordered rules from criterion states to actions (seed 003 §14).

A policy file (TOML) declares one decision target and its rules. Each rule has a
``target``, an ``id``, a ``priority``, a ``description``, structured ``match``
conditions, an ``action`` (``accept``, ``accept_with_note``, ``rework``, ``reject``,
``escalate``) and a ``terminal`` flag. Evaluation is deterministic and vectorised:

* rules are read in descending ``priority`` (priorities are unique);
* a rule whose conditions all hold *matches* and joins the row's ``_policy_trace``;
* the first matching ``terminal`` rule stops evaluation;
* the decision is the most severe action among the matched rules, by
  ``reject > rework > escalate > accept_with_note > accept``; when no terminal rule
  matched, the default ``escalate`` (seed 003 §14.4, DESIGN §3.10) joins that set. So only
  a terminal rule can accept a row, and a non-terminal rule can only add a note or make
  the decision stricter.

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

Validation (:func:`load_policy`) rejects unknown keys, criteria, gates, states and
actions; duplicate rule ids or priorities; a rule whose own conditions contradict each
other (it can never match); and unreachable rules: those whose conditions imply the
conditions of a terminal rule of higher priority (for example anything after a terminal
rule with no conditions), since such a rule can never be evaluated.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Final

import polars as pl

from pipeline.core.config import ConfigError, build_section, parse_toml
from pipeline.core.reasons import Disposition
from pipeline.records.lineage import check_pin
from pipeline.rubrics.model import Rubric, RubricError, State
from pipeline.rubrics.scoring import WEIGHTED_STATE, criterion_state_column, gate_state_column

__all__ = [
    "DEFAULT_ACTION",
    "TARGETS",
    "Action",
    "Policy",
    "Rule",
    "RuleMatch",
    "decide_frame",
    "load_policy",
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
#: Seed 003 §5.2's decision targets.
TARGETS: Final = ("attempt", "annotation", "composite_case")
_STATES: Final = frozenset(s.value for s in State)
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


@dataclass(frozen=True)
class PolicyFile:
    """The policy file's layout, as read (see :class:`Policy` for the checked form)."""

    policy: str
    version: str
    target: str
    rules: tuple[Rule, ...]
    rubric: str | None = None
    description: str = ""


@dataclass(frozen=True)
class Policy:
    id: str
    version: str
    target: str
    rubric: str | None
    #: in evaluation order (descending priority)
    rules: tuple[Rule, ...]
    path: Path
    sha256: str

    def describe(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "version": self.version,
            "target": self.target,
            "rubric": self.rubric,
            "file": str(self.path),
            "sha256": self.sha256,
            "default_action": DEFAULT_ACTION.value,
            "rules": [r.id for r in self.rules],
        }


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
    if policy.target not in TARGETS:
        problems.append(f"target: {policy.target!r} is not one of {', '.join(TARGETS)}")
    if rubric is not None and policy.rubric is not None and policy.rubric != rubric.id:
        problems.append(f"rubric: the policy is for {policy.rubric!r}, the kind uses {rubric.id!r}")
    if len(policy.rules) >= _RANK:
        problems.append(f"rules: at most {_RANK - 1} rules")
    ids = [r.id for r in policy.rules]
    priorities = [r.priority for r in policy.rules]
    problems += [
        f"rules: id {i!r} is used more than once"
        for i in sorted({i for i in ids if ids.count(i) > 1})
    ]
    problems += [
        f"rules: priority {p} is used more than once (evaluation order must be explicit)"
        for p in sorted({p for p in priorities if priorities.count(p) > 1})
    ]
    for rule in policy.rules:
        where = f"rules.{rule.id}"
        if not _RULE_ID.fullmatch(rule.id):
            problems.append(
                f"{where}.id: ids are 1-128 of A-Z a-z 0-9 _ . : - (not starting with a symbol)"
            )
        if rule.target != policy.target:
            problems.append(
                f"{where}.target: {rule.target!r}, but the policy decides {policy.target!r}"
            )
        if rule.action not in {a.value for a in Action}:
            problems.append(
                f"{where}.action: {rule.action!r} is not one of {', '.join(a.value for a in Action)}"
            )
        if not rule.description.strip():
            problems.append(f"{where}.description: empty")
        problems += _check_match(rule.match, where, criteria, gates, rubric is not None)
    if problems:
        raise RubricError(f"{policy.path}: not a valid policy:\n  " + "\n  ".join(problems))

    normalised = [_normalise(r.match, criteria, gates) for r in policy.rules]
    for n, (rule, mine) in enumerate(zip(policy.rules, normalised, strict=True)):
        why = _never_matches(mine)
        if why:
            problems.append(f"rules.{rule.id}: can never match: {why}")
            continue
        for earlier, theirs in zip(policy.rules[:n], normalised[:n], strict=True):
            if earlier.terminal and _implies(mine, theirs):
                problems.append(
                    f"rules.{rule.id}: unreachable: every row it matches is decided first by "
                    f"the terminal rule {earlier.id!r} (priority {earlier.priority})"
                )
                break
    if problems:
        raise RubricError(f"{policy.path}: not a valid policy:\n  " + "\n  ".join(problems))


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


def load_policy(path: Path, pinned: str | None = None) -> Policy:
    """Read a policy file (TOML, strict keys), check its digest against ``pinned``."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise RubricError(f"cannot read policy {path}: {exc.strerror}") from None
    sha256 = hashlib.sha256(data).hexdigest()
    check_pin(f"policy {path}", sha256, pinned, RubricError)
    try:
        document = build_section(PolicyFile, parse_toml(data, str(path)), "")
    except ConfigError as exc:
        raise RubricError(
            str(exc) if str(exc).startswith(str(path)) else f"{path}: {exc}"
        ) from None
    return Policy(
        id=document.policy,
        version=document.version,
        target=document.target,
        rubric=document.rubric,
        rules=tuple(sorted(document.rules, key=lambda r: -r.priority)),
        path=path.resolve(),
        sha256=sha256,
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


def decide_frame(policy: Policy, rubric: Rubric | None, rows: pl.DataFrame) -> pl.DataFrame:
    """Add ``_decision``, ``_policy_trace`` and ``_policy_rule`` (the rule whose action
    won, null for the default) to every row, vectorised over the rules.

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
        rank = Action(rule.action).severity * _RANK + (_RANK - 1 - n)
        ranks[rank] = (rule.action, rule.id)
        candidates.append(pl.when(counted[n]).then(pl.lit(rank)))
    best = pl.max_horizontal(candidates)
    keys = list(ranks)
    # The trace is joined into one string and split: concat_list over nullable columns
    # is two orders of magnitude slower. Rule ids never contain the separator.
    joined = pl.concat_str(
        [
            pl.when(c).then(pl.lit(rule.id + _SEPARATOR))
            for c, rule in zip(counted, rules, strict=True)
        ]
        or [pl.lit("")],
        ignore_nulls=True,
    )
    trace = (
        pl.when(joined == "")
        .then(pl.lit([], pl.List(pl.String)))
        .otherwise(joined.str.strip_suffix(_SEPARATOR).str.split(_SEPARATOR))
    )
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
