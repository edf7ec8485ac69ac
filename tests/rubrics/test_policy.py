"""Decision policies: loading and validation, evaluation semantics, and the vectorised
evaluator against a per-row reference."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.rubrics.decision_policy import (
    Action,
    Band,
    Policy,
    Rule,
    RuleMatch,
    decide_frame,
    decide_targets,
    effective_action,
    explanation,
    load_policy,
    target_columns,
    validate_policy,
)
from pipeline.rubrics.model import RUBRIC_DIR, RubricError, RubricRegistry, Severity, State
from pipeline.rubrics.scoring import criterion_state_column, gate_state_column

RUBRIC = RubricRegistry().get("code-review-v1")
HEAD = """policy = "p"
version = "1.0.0"
target = "composite_case"
rubric = "code-review-v1"
"""


def rule(rule_id: str, priority: int, action: str, terminal: bool, match: str = "{}") -> str:
    return (
        f'[[rules]]\nid = "{rule_id}"\npriority = {priority}\ntarget = "composite_case"\n'
        f'description = "rule {rule_id}"\naction = "{action}"\nterminal = {str(terminal).lower()}\n'
        f"match = {match}\n"
    )


def policy_from(tmp_path: Path, *rules: str, head: str = HEAD) -> Policy:
    path = tmp_path / "policy.toml"
    path.write_text(head + "\n".join(rules))
    return load_policy(path)


def test_bundled_policy_is_valid() -> None:
    policy = load_policy(RUBRIC_DIR / "code-review-v1.policy.toml")
    validate_policy(policy, RUBRIC)
    assert policy.rules[0].id == "earlier-stage-conflict"
    assert [r.priority for r in policy.rules] == sorted(
        (r.priority for r in policy.rules), reverse=True
    )


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        (
            [rule("a", 1, "accept", True, '{ criteria = { correctnes = ["met"] } }')],
            "no criterion 'correctnes'",
        ),
        ([rule("a", 1, "accept", True, '{ gates = { tests = ["met"] } }')], "no gate 'tests'"),
        ([rule("a", 1, "accept", True, '{ any_gate = ["passed"] }')], "unknown state 'passed'"),
        ([rule("a", 1, "accept", True, '{ weighted = ["not_applicable"] }')], "unknown state"),
        ([rule("a", 1, "approve", True)], "action: 'approve'"),
        (
            [
                rule("a", 2, "reject", True, '{ any_gate = ["not_met"] }'),
                rule("a", 1, "accept", True, '{ weighted = ["met"] }'),
            ],
            "id 'a' is used more than once",
        ),
        (
            [
                rule("a", 1, "reject", True, '{ any_gate = ["not_met"] }'),
                rule("b", 1, "accept", True, '{ weighted = ["met"] }'),
            ],
            "priority 1 is used more than once",
        ),
        (
            [rule("a", 1, "accept", True, "{ criteria = { readability = [] } }")],
            "an empty list can never match",
        ),
        (
            [rule("a", 1, "accept", True, '{ reasons_any = ["cross.*.x"] }')],
            "not a code or a 'prefix.*' pattern",
        ),
        (
            [rule("a", 1, "accept", True, '{ unknown_condition = ["met"] }')],
            "unknown_condition: unknown key",
        ),
    ],
)
def test_invalid_policies(tmp_path: Path, rules: list[str], message: str) -> None:
    with pytest.raises(RubricError, match=message):
        validate_policy(policy_from(tmp_path, *rules), RUBRIC)


def test_targets_must_agree(tmp_path: Path) -> None:
    text = rule("a", 1, "accept", True).replace('target = "composite_case"', 'target = "attempt"')
    with pytest.raises(RubricError, match="but the policy decides 'composite_case'"):
        validate_policy(policy_from(tmp_path, text), RUBRIC)
    with pytest.raises(RubricError, match="target: 'everything'"):
        validate_policy(
            policy_from(
                tmp_path,
                rule("a", 1, "accept", True),
                head=HEAD.replace("composite_case", "everything"),
            ),
            RUBRIC,
        )


def test_unreachable_rules_are_refused(tmp_path: Path) -> None:
    # Anything after an always-true terminal rule can never be evaluated.
    with pytest.raises(RubricError, match=r"rules\.b: unreachable: .* terminal rule 'a'"):
        validate_policy(
            policy_from(
                tmp_path,
                rule("a", 9, "escalate", True),
                rule("b", 1, "reject", True, '{ any_gate = ["not_met"] }'),
            ),
            RUBRIC,
        )
    # A rule whose conditions imply a higher terminal rule's: syntax_valid not_met ⇒ any gate not_met.
    with pytest.raises(RubricError, match=r"rules\.b: unreachable"):
        validate_policy(
            policy_from(
                tmp_path,
                rule("a", 9, "reject", True, '{ any_gate = ["not_met"] }'),
                rule(
                    "b",
                    1,
                    "rework",
                    True,
                    '{ gates = { syntax_valid = ["not_met"] }, any_criterion = ["not_met"] }',
                ),
            ),
            RUBRIC,
        )
    # all_criteria ⊆ {not_met} ⇒ correctness not_met; reason prefixes cover exact codes.
    for earlier, later in [
        (
            '{ criteria = { correctness = ["not_met", "unknown"] } }',
            '{ all_criteria = ["not_met"] }',
        ),
        ('{ reasons_any = ["cross.*"] }', '{ reasons_any = ["cross.idempotency_conflict"] }'),
        ('{ reasons_none = ["cross.x"] }', '{ reasons_none = ["cross.*"] }'),
    ]:
        with pytest.raises(RubricError, match="unreachable"):
            validate_policy(
                policy_from(
                    tmp_path,
                    rule("a", 9, "escalate", True, earlier),
                    rule("b", 1, "reject", True, later),
                ),
                RUBRIC,
            )


def test_reachable_rules_after_terminal_ones(tmp_path: Path) -> None:
    policy = policy_from(
        tmp_path,
        rule("a", 9, "reject", True, '{ gates = { syntax_valid = ["not_met"] } }'),
        rule("b", 8, "reject", True, '{ any_gate = ["not_met"] }'),  # wider than a
        rule("c", 7, "escalate", False),  # non-terminal: later rules stay reachable
        rule("d", 6, "accept", True, '{ weighted = ["met"] }'),
    )
    validate_policy(policy, RUBRIC)


def test_contradictory_conditions_never_match(tmp_path: Path) -> None:
    for match in [
        '{ criteria = { correctness = ["met"] }, all_criteria = ["not_met"] }',
        '{ all_gates = ["met"], any_gate = ["not_met"] }',
        '{ reasons_any = ["cross.a"], reasons_none = ["cross.*"] }',
    ]:
        with pytest.raises(RubricError, match="can never match"):
            validate_policy(policy_from(tmp_path, rule("a", 1, "reject", True, match)), RUBRIC)


def test_conditions_on_criteria_need_a_rubric(tmp_path: Path) -> None:
    text = HEAD.replace('rubric = "code-review-v1"\n', "")
    with pytest.raises(RubricError, match="need a rubric for the kind"):
        validate_policy(
            policy_from(
                tmp_path, rule("a", 1, "accept", True, '{ weighted = ["met"] }'), head=text
            ),
            None,
        )
    reasons_only = policy_from(
        tmp_path, rule("a", 1, "reject", True, '{ reasons_any = ["cross.*"] }'), head=text
    )
    validate_policy(reasons_only, None)
    with pytest.raises(RubricError, match="the policy is for 'other'"):
        validate_policy(
            policy_from(
                tmp_path,
                rule("a", 1, "accept", True),
                head=HEAD.replace('rubric = "code-review-v1"', 'rubric = "other"'),
            ),
            RUBRIC,
        )


def test_pins_and_unreadable_files(tmp_path: Path) -> None:
    policy = policy_from(tmp_path, rule("a", 1, "accept", True))
    assert load_policy(policy.path, policy.sha256).sha256 == policy.sha256
    with pytest.raises(RubricError, match="does not match the pinned"):
        load_policy(policy.path, "0" * 64)
    with pytest.raises(RubricError, match="cannot read policy"):
        load_policy(tmp_path / "absent.toml")
    (tmp_path / "bad.toml").write_text("policy = ")
    with pytest.raises(RubricError, match="not valid TOML"):
        load_policy(tmp_path / "bad.toml")
    # tomllib's int() of 4301+ digits raised a ValueError: a traceback, not a TOML error
    (tmp_path / "huge.toml").write_text("version = " + "7" * 5000 + "\n")
    with pytest.raises(RubricError, match="more than 4300 digits"):
        load_policy(tmp_path / "huge.toml")


def _states(**columns: Any) -> pl.DataFrame:
    base: dict[str, Any] = {criterion_state_column(c.id): ["met"] for c in RUBRIC.criteria}
    base.update({gate_state_column(g.name): ["met"] for g in RUBRIC.gates})
    base["_weighted_state"] = ["met"]
    base["_reason_codes"] = [[]]
    base.update(columns)
    return pl.DataFrame(base, schema_overrides={"_reason_codes": pl.List(pl.String)})


def test_evaluation_semantics(tmp_path: Path) -> None:
    policy = policy_from(
        tmp_path,
        rule("cross", 9, "escalate", True, '{ reasons_any = ["cross.*"] }'),
        rule("note", 8, "accept_with_note", False, '{ criteria = { readability = ["met"] } }'),
        rule("strict", 7, "rework", False, '{ criteria = { correctness = ["not_met"] } }'),
        rule("accept", 1, "accept", True, '{ weighted = ["met"] }'),
    )
    validate_policy(policy, RUBRIC)

    def decide(**columns: Any) -> tuple[str, list[str], str | None]:
        row = decide_frame(policy, RUBRIC, _states(**columns)).row(0, named=True)
        return row["_decision"], row["_policy_trace"], row["_policy_rule"]

    # Non-terminal rules add to the trace; the most severe action wins.
    assert decide() == ("accept_with_note", ["note", "accept"], "note")
    assert decide(_criterion_correctness_state=["not_met"]) == (
        "rework",
        ["note", "strict", "accept"],
        "strict",
    )
    # A terminal rule stops evaluation: later rules are not in the trace.
    assert decide(_reason_codes=[["dedupe.x", "cross.contradictory_preference"]]) == (
        "escalate",
        ["cross"],
        "cross",
    )
    # No terminal rule matched: the default escalate joins what matched, and the trace
    # says so.
    assert decide(_weighted_state=["unknown"]) == ("escalate", ["note", "default:escalate"], None)
    assert decide(_weighted_state=["unknown"], _criterion_readability_state=["not_met"]) == (
        "escalate",
        ["default:escalate"],
        None,
    )
    # A state the scoring stage did not write is unknown, never a pass.
    assert decide(_weighted_state=[None])[0] == "escalate"


def test_actions_map_to_dispositions() -> None:
    assert {a.value: a.disposition.value for a in Action} == {
        "accept": "accepted",
        "accept_with_note": "accepted",
        "escalate": "quarantined",
        "rework": "rejected",
        "reject": "rejected",
    }


# -- property: vectorised == per-row evaluation ----------------------------------------

STATES = ["met", "not_met", "unknown", "not_applicable"]
CODES = ["cross.a", "cross.b", "dedupe.exact", "rubric.gate_unknown"]


def _reference(policy: Policy, row: dict[str, Any]) -> tuple[str, list[str]]:
    criteria = [row[criterion_state_column(c.id)] for c in RUBRIC.criteria]
    gates = [row[gate_state_column(g.name)] for g in RUBRIC.gates]

    def code_in(patterns: tuple[str, ...]) -> bool:
        return any(
            code.startswith(p[:-1]) if p.endswith(".*") else code == p
            for code in row["_reason_codes"]
            for p in patterns
        )

    def matches(m: RuleMatch) -> bool:
        return (
            all(row[criterion_state_column(c)] in s for c, s in m.criteria.items())
            and all(row[gate_state_column(g)] in s for g, s in m.gates.items())
            and (not m.any_criterion or any(s in m.any_criterion for s in criteria))
            and (not m.all_criteria or all(s in m.all_criteria for s in criteria))
            and (not m.any_gate or any(s in m.any_gate for s in gates))
            and (not m.all_gates or all(s in m.all_gates for s in gates))
            and (not m.weighted or row["_weighted_state"] in m.weighted)
            and (not m.reasons_any or code_in(m.reasons_any))
            and (not m.reasons_none or not code_in(m.reasons_none))
        )

    trace, actions, decided = [], [], False
    for r in policy.rules:
        if matches(r.match):
            trace.append(r.id)
            actions.append(Action(r.action))
            if r.terminal:
                decided = True
                break
    if not decided:
        actions.append(Action.ESCALATE)
        trace.append("default:escalate")
    return max(actions, key=lambda a: a.severity).value, trace


subsets = st.lists(st.sampled_from(STATES), min_size=1, max_size=3, unique=True).map(tuple)
matches = st.builds(
    RuleMatch,
    criteria=st.dictionaries(st.sampled_from([c.id for c in RUBRIC.criteria]), subsets, max_size=2),
    any_criterion=st.one_of(st.just(()), subsets),
    all_criteria=st.one_of(st.just(()), subsets),
    gates=st.dictionaries(st.sampled_from([g.name for g in RUBRIC.gates]), subsets, max_size=2),
    any_gate=st.one_of(st.just(()), subsets),
    weighted=st.one_of(
        st.just(()), st.lists(st.sampled_from(STATES[:3]), min_size=1, unique=True).map(tuple)
    ),
    reasons_any=st.one_of(
        st.just(()),
        st.lists(st.sampled_from([*CODES, "cross.*"]), min_size=1, max_size=2).map(tuple),
    ),
    reasons_none=st.one_of(
        st.just(()),
        st.lists(st.sampled_from([*CODES, "dedupe.*"]), min_size=1, max_size=2).map(tuple),
    ),
)


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(
    match_list=st.lists(matches, min_size=0, max_size=6),
    actions=st.lists(st.sampled_from([a.value for a in Action]), min_size=6, max_size=6),
    terminal=st.lists(st.booleans(), min_size=6, max_size=6),
    rows=st.lists(
        st.fixed_dictionaries(
            {
                **{criterion_state_column(c.id): st.sampled_from(STATES) for c in RUBRIC.criteria},
                **{gate_state_column(g.name): st.sampled_from(STATES) for g in RUBRIC.gates},
                "_weighted_state": st.sampled_from(STATES[:3]),
                "_reason_codes": st.lists(st.sampled_from(CODES), max_size=2),
            }
        ),
        min_size=1,
        max_size=10,
    ),
)
def test_vectorised_policy_equals_per_row_evaluation(
    match_list: list[RuleMatch],
    actions: list[str],
    terminal: list[bool],
    rows: list[dict[str, Any]],
) -> None:
    # Not validated on purpose: evaluation must be right for any rule list.
    policy = Policy(
        id="p",
        version="1",
        target="composite_case",
        rubric=RUBRIC.id,
        rules=tuple(
            Rule(f"r{n}", 100 - n, "composite_case", "d", actions[n], terminal[n], m)
            for n, m in enumerate(match_list)
        ),
        path=Path("p.toml"),
        sha256="0" * 64,
    )
    frame = pl.DataFrame(rows, schema_overrides={"_reason_codes": pl.List(pl.String)})
    decided = decide_frame(policy, RUBRIC, frame)
    for row, got in zip(rows, decided.iter_rows(named=True), strict=True):
        assert (got["_decision"], got["_policy_trace"]) == _reference(policy, row)


# -- the evaluation contract model (AutoQA evaluation contract §§5.2, 6.9, 8, 13, 14) -----


def test_all_six_verdicts_are_known(tmp_path: Path) -> None:
    # partially_met and ambiguous were unknown states: such a policy did not load.
    policy = policy_from(
        tmp_path,
        rule("ambiguous", 9, "escalate", True, '{ any_criterion = ["ambiguous", "unknown"] }'),
        rule("partial", 8, "rework", True, '{ criteria = { correctness = ["partially_met"] } }'),
        rule("accept", 1, "accept", True, '{ weighted = ["met"] }'),
    )
    validate_policy(policy, RUBRIC)
    decided = decide_frame(
        policy,
        RUBRIC,
        pl.concat(
            [
                _states(_criterion_readability_state=["ambiguous"]),
                _states(_criterion_correctness_state=["partially_met"]),
            ]
        ),
    )
    assert decided["_decision"].to_list() == ["escalate", "rework"]
    assert [s.value for s in State] == [
        "met", "partially_met", "not_met", "not_applicable", "unknown", "ambiguous",
    ]  # fmt: skip
    assert [s.value for s in Severity] == ["none", "advisory", "minor", "major", "critical"]


@pytest.mark.parametrize(
    ("match", "action", "message"),
    [
        # §8.7: a criterion that does not apply must not trigger a negative action.
        ('{ criteria = { readability = ["not_applicable"] } }', "reject", r"§8\.7"),
        ('{ any_gate = ["not_met", "not_applicable"] }', "rework", r"§8\.7"),
        # §6.9: unknown never passes, nor fails.
        ('{ any_gate = ["unknown"] }', "accept", r"accept triggered by unknown.*§6\.9"),
        ('{ criteria = { correctness = ["ambiguous"] } }', "reject", r"ambiguous.*§6\.9"),
        ('{ weighted = ["unknown"] }', "rework", r"§6\.9"),
        # A terminal acceptance that does not exclude uncertain verdicts.
        ('{ all_criteria = ["met"] }', "accept", r"could match a row whose .*syntax_valid"),
        ("{}", "accept_with_note", r"could match a row whose correctness"),
    ],
)
def test_forbidden_rules_do_not_load(tmp_path: Path, match: str, action: str, message: str) -> None:
    with pytest.raises(RubricError, match=message):
        validate_policy(policy_from(tmp_path, rule("a", 1, action, True, match)), RUBRIC)


def test_acceptance_that_excludes_uncertainty_loads(tmp_path: Path) -> None:
    for match in [
        '{ weighted = ["met"] }',  # a weighted state exists only when nothing is unknown
        '{ all_criteria = ["met", "not_applicable"], all_gates = ["met"] }',
    ]:
        validate_policy(policy_from(tmp_path, rule("a", 1, "accept", True, match)), RUBRIC)
    # Escalation may follow uncertainty; a non-negative action may follow not_applicable.
    validate_policy(
        policy_from(
            tmp_path,
            rule("u", 9, "escalate", True, '{ any_gate = ["unknown", "ambiguous"] }'),
            rule("n", 8, "accept_with_note", False, '{ any_gate = ["not_applicable"] }'),
        ),
        RUBRIC,
    )


@pytest.mark.parametrize(
    ("head", "message"),
    [
        (HEAD.replace('"1.0.0"', '"banana"'), "version: 'banana' is not a semantic version"),
        (HEAD.replace('"1.0.0"', '"1.0"'), "is not a semantic version"),
        (HEAD + 'status = "retired"\n', "the contract is retired"),
        (HEAD + 'status = "final"\n', "status: 'final' is not one of draft, approved"),
        (HEAD + 'targets = ["attempt"]\n', "targets: does not list the target 'composite_case'"),
    ],
)
def test_contract_identity(tmp_path: Path, head: str, message: str) -> None:
    with pytest.raises(RubricError, match=message):
        validate_policy(policy_from(tmp_path, rule("a", 1, "escalate", True), head=head), RUBRIC)


def test_contract_status_and_semantic_versions(tmp_path: Path) -> None:
    for version in ("1.0.0", "0.1.0-rc.1+build.5"):
        head = HEAD.replace('"1.0.0"', f'"{version}"') + 'status = "approved"\n'
        policy = policy_from(tmp_path, rule("a", 1, "escalate", True), head=head)
        validate_policy(policy, RUBRIC)
        assert (policy.describe()["status"], policy.describe()["version"]) == ("approved", version)
    # No status: a draft (never claimed approved).
    assert policy_from(tmp_path, rule("a", 1, "escalate", True)).status == "draft"


HARD_GATE = (
    '[[rules]]\nid = "syntax"\npriority = 50\ntarget = "composite_case"\n'
    'description = "Python that does not parse"\naction = "reject"\nterminal = true\n'
    'match = { gates = { syntax_valid = ["not_met"] } }\nhard_gate = true\n'
)


def test_hard_gates_state_severity_and_calibrated_confidence(tmp_path: Path) -> None:
    full = HARD_GATE + 'severity = "critical"\nconfidence = "high"\ncompensation = "forbidden"\n'
    policy = policy_from(tmp_path, full)
    validate_policy(policy, RUBRIC)
    gate = policy.rules[0]
    assert (gate.severity, gate.confidence, gate.compensation) == ("critical", "high", "forbidden")
    with pytest.raises(RubricError, match=r"must state severity, confidence, compensation.*§14\.3"):
        validate_policy(policy_from(tmp_path, HARD_GATE), RUBRIC)
    for old, new, message in [
        ('"critical"', '"fatal"', "severity: 'fatal' is not one of none, advisory"),
        ('"high"', '"certain"', "confidence: 'certain' is not one of low, medium, high"),
        ('"forbidden"', '"sometimes"', "compensation: 'sometimes' is not forbidden or allowed"),
        ("terminal = true", "terminal = false", "compensation is forbidden is terminal"),
        ('action = "reject"', 'action = "accept"', "a hard gate cannot accept"),
    ]:
        with pytest.raises(RubricError, match=message):
            validate_policy(policy_from(tmp_path, full.replace(old, new)), RUBRIC)
    with pytest.raises(RubricError, match="names exactly one criterion or gate"):
        validate_policy(
            policy_from(
                tmp_path,
                full.replace('gates = { syntax_valid = ["not_met"] }', 'any_gate = ["not_met"]'),
            ),
            RUBRIC,
        )


CALIBRATION = """
[calibration]
bands = { high = 0.95, medium = 0.8 }
requires_calibration_for_actions = ["reject"]
uncalibrated_action = "escalate"
[calibration.subjects.syntax_valid]
confidence = 1.0
profile = "deterministic: ast.parse"
[calibration.subjects.correctness]
confidence = 0.85
profile = "judge-v3 on bench-2026-10, n = 400"
"""


def test_calibration_gated_actions_and_confidence_bands(tmp_path: Path) -> None:
    policy = policy_from(
        tmp_path,
        rule("syntax", 9, "reject", True, '{ gates = { syntax_valid = ["not_met"] } }'),
        rule("wrong", 8, "reject", True, '{ criteria = { correctness = ["not_met"] } }'),
        rule("deps", 7, "reject", True, '{ gates = { unapproved_dependencies = ["not_met"] } }'),
        rule("minimum", 6, "rework", True, '{ any_criterion = ["not_met"] }'),
        rule("accept", 1, "accept", True, '{ weighted = ["met"] }'),
        head=HEAD + CALIBRATION,
    )
    validate_policy(policy, RUBRIC)
    calibration = policy.calibration
    assert [calibration.band(n) for n in ("syntax_valid", "correctness", "readability")] == [
        Band.HIGH, Band.MEDIUM, Band.UNCALIBRATED,
    ]  # fmt: skip
    rules = {r.id: r for r in policy.rules}
    # §13.4: reject needs calibration; an uncalibrated gate escalates instead.
    assert effective_action(policy, rules["syntax"], RUBRIC) == ("reject", None)
    assert effective_action(policy, rules["wrong"], RUBRIC) == ("reject", None)
    action, why = effective_action(policy, rules["deps"], RUBRIC)
    assert action == "escalate"
    assert "unapproved_dependencies is uncalibrated" in str(why)
    assert effective_action(policy, rules["minimum"], RUBRIC) == ("rework", None)
    decided = decide_frame(
        policy,
        RUBRIC,
        pl.concat(
            [
                _states(_gate_syntax_valid=["not_met"]),
                _states(_gate_unapproved_dependencies=["not_met"]),
            ]
        ),
    )
    assert decided.select("_decision", "_policy_trace").rows() == [
        ("reject", ["syntax"]),
        ("escalate", ["deps"]),
    ]
    # A rule's own confidence band: medium is not enough for high.
    strict = policy_from(
        tmp_path,
        rule("wrong", 8, "rework", True, '{ criteria = { correctness = ["not_met"] } }')
        + 'confidence = "high"\n',
        head=HEAD + CALIBRATION,
    )
    assert effective_action(strict, strict.rules[0], RUBRIC)[0] == "escalate"
    for old, new, message in [
        ("high = 0.95", "high = 0.5", "medium .* must be below high"),
        ('uncalibrated_action = "escalate"', 'uncalibrated_action = "reject"', "itself requires"),
        ("subjects.correctness]", "subjects.style]", "no criterion or gate 'style'"),
        ("confidence = 0.85", "confidence = 1.5", r"correctness\.confidence: not in \[0, 1\]"),
    ]:
        head = HEAD + CALIBRATION.replace(old, new)
        with pytest.raises(RubricError, match=message):
            validate_policy(
                policy_from(tmp_path, rule("a", 1, "escalate", True), head=head), RUBRIC
            )


def test_explanation_templates(tmp_path: Path) -> None:
    text = rule("a", 1, "escalate", True) + (
        'severity = "major"\nexplanation = "{severity} finding under {policy}@{version}: {action}"\n'
    )
    policy = policy_from(tmp_path, text)
    validate_policy(policy, RUBRIC)
    assert (
        explanation(policy, policy.rules[0], "escalate") == "major finding under p@1.0.0: escalate"
    )
    # Without a template: the rule and its description.
    plain = policy_from(tmp_path, rule("a", 1, "escalate", True))
    assert explanation(plain, plain.rules[0], "escalate") == "rule a: rule a"
    for template in ("{score}", "{rule.__class__}", "{action!r}", "{rule"):
        bad = rule("a", 1, "escalate", True) + f'explanation = "{template}"\n'
        with pytest.raises(RubricError, match=r"explanation: "):
            validate_policy(policy_from(tmp_path, bad), RUBRIC)


def test_several_targets_side_by_side(tmp_path: Path) -> None:
    # §5.2: attempt accept, annotation rework, composite rework — never collapsed.
    head = HEAD + 'targets = ["attempt", "annotation", "composite_case"]\n'
    rules = [
        rule("attempt-ok", 5, "accept", True, '{ weighted = ["met"] }').replace(
            '"composite_case"', '"attempt"'
        ),
        rule("label-wrong", 5, "rework", True, '{ reasons_any = ["review.x"] }').replace(
            '"composite_case"', '"annotation"'
        ),
        rule("composite", 5, "rework", True, '{ reasons_any = ["review.*"] }'),
    ]
    policy = policy_from(tmp_path, *rules, head=head)
    validate_policy(policy, RUBRIC)  # the same priority in different targets is fine
    assert policy.decision_targets == ("composite_case", "attempt", "annotation")
    assert target_columns(policy, "attempt") == ("_decision_attempt", "_policy_trace_attempt")
    decided = decide_targets(policy, RUBRIC, _states(_reason_codes=[["review.x"]]))
    assert decided.select(
        "_decision", "_policy_trace", "_decision_attempt", "_policy_trace_attempt",
        "_decision_annotation", "_policy_trace_annotation",
    ).row(0) == (
        "rework", ["composite"], "accept", ["attempt-ok"], "rework", ["label-wrong"],
    )  # fmt: skip
    with pytest.raises(RubricError, match=r"target: 'annotation', but the policy decides"):
        validate_policy(policy_from(tmp_path, *rules), RUBRIC)


@pytest.mark.parametrize(
    "key", ["any_criterion", "all_criteria", "any_gate", "all_gates", "weighted", "reasons_any"]
)
def test_an_empty_condition_list_is_refused(tmp_path: Path, key: str) -> None:
    """Read as absent, an empty list matched every row: ``reasons_any = []`` on a reject
    rule rejected all 115 decided rows of the bundled campaign."""
    with pytest.raises(RubricError, match=rf"rules\.a\.match\.{key}: an empty list can never"):
        policy_from(tmp_path, rule("a", 9, "reject", False, f"{{ {key} = [] }}"))


@pytest.mark.parametrize(
    ("fallback", "action", "match", "message"),
    [
        ("accept", "escalate", '{ any_gate = ["unknown"] }', "only escalate may follow"),
        ("reject", "escalate", '{ any_gate = ["not_applicable"] }', "triggered by not_applicable"),
    ],
)
def test_the_uncalibrated_action_is_held_to_the_contract(
    tmp_path: Path, fallback: str, action: str, match: str, message: str
) -> None:
    """A rule below its confidence takes the contract's uncalibrated_action, which was
    never checked: ``accept`` could follow an unknown gate, ``reject`` a gate that does
    not apply."""
    head = HEAD + f'[calibration]\nuncalibrated_action = "{fallback}"\n'
    body = rule("a", 9, action, True, match) + 'confidence = "high"\n'
    with pytest.raises(RubricError, match=rf"uncalibrated_action '{fallback}': .*{message}"):
        validate_policy(policy_from(tmp_path, body, head=head), RUBRIC)
    # without a confidence the rule never falls back: the same policy is valid
    validate_policy(policy_from(tmp_path, rule("a", 9, action, True, match), head=head), RUBRIC)


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        (
            [rule("a", 9, "escalate", False, '{ weighted = ["met"], any_gate = ["not_met"] }')],
            r"rules\.a: can never match",
        ),
        (
            [
                rule(
                    "a",
                    9,
                    "escalate",
                    False,
                    '{ weighted = ["met"], all_criteria = ["not_applicable"] }',
                )
            ],
            r"rules\.a: can never match",
        ),
        (
            [
                rule("a", 9, "escalate", True, '{ weighted = ["unknown"] }'),
                rule("b", 5, "reject", True, '{ any_gate = ["not_met"] }'),
            ],
            r"rules\.b: unreachable: .* terminal rule 'a'",
        ),
    ],
)
def test_the_static_checks_know_when_a_weighted_state_exists(
    tmp_path: Path, rules: list[str], message: str
) -> None:
    """A weighted met/not_met exists only when every gate is met or not applicable and
    every criterion is known, one scored: rules that contradict it, or that a terminal
    weighted unknown always decides first, passed the loader."""
    with pytest.raises(RubricError, match=message):
        validate_policy(policy_from(tmp_path, *rules), RUBRIC)
