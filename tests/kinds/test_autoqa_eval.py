"""autoqa-eval-1: the AutoQA evaluation contract's §21 checks, the contracts table, the
bundled sample campaign with one planted violation per check, and routing."""

from __future__ import annotations

import copy
import dataclasses
import json
import random
from pathlib import Path
from typing import Any

import orjson
import pyarrow.parquet as pq
import pytest

from pipeline.core.config import (
    CampaignConfig,
    InputSpec,
    References,
    ReferenceTable,
    load_campaign,
)
from pipeline.core.reasons import Disposition
from pipeline.decide.stages.cross_rules import CROSS_RULES
from pipeline.gate.gate import Gate
from pipeline.jobs.run import run
from pipeline.kinds.autoqa_eval import NEEDS_CONTRACTS, find_cycle
from pipeline.kinds.rules import RULES, ReferenceTableError, Severity, load_rule_context
from pipeline.testing.synthetic import (
    AUTOQA_CONTRACTS,
    _assessed,
    _decided,
    autoqa_human,
    make_record,
)
from tests.conftest import DATA

KIND = "autoqa-eval-1"
CAMPAIGN = DATA / "campaign-autoqa.toml"
GATE = Gate(load_campaign(CAMPAIGN))
CODES = {r.code: r for r in RULES[KIND]}


def _valid(i: int = 3) -> dict[str, Any]:
    return make_record(KIND, random.Random(i), i)


def _codes(record: dict[str, Any], gate: Gate = GATE) -> tuple[Disposition, list[str]]:
    outcome = gate.gate_line(orjson.dumps(record), None)
    assert outcome.kind == KIND
    return outcome.disposition, [r.code for r in outcome.reasons]


def _changed(change: Any, i: int = 3) -> dict[str, Any]:
    record = copy.deepcopy(_valid(i))
    change(record)
    return record


def _two_stages(r: dict[str, Any]) -> None:
    r["decisions"].append({**_decided(r, "attempt"), "stage": "provisional"})


def _whole_artifact_span(r: dict[str, Any]) -> None:
    content = r["evidence"][0]["content"]
    r["relationships"][0]["evidenceSpans"] = [
        {"artifactId": "ev-spec", "start": 0, "end": len(content), "quote": content},
        {"artifactId": "ev-spec", "start": None, "end": None, "quote": content},
    ]


def _answer_at_decision(r: dict[str, Any]) -> None:
    r["humanResolution"] = autoqa_human("2026-05-13T12:00:00+01:00")  # the decisions' 11:00Z


def _uncalibrated(r: dict[str, Any]) -> None:
    r["calibrationProfile"] = None
    for a in r["criterionAssessments"]:
        a.update(calibratedConfidence=None, confidenceBand="uncalibrated")


def _failed(r: dict[str, Any]) -> None:
    r.update(status="failed", failure={"class": "context_truncation", "detail": "cut at 8k"})
    for d in r["decisions"]:
        d["stage"] = "provisional"


def _provisional_draft(r: dict[str, Any]) -> None:
    draft = AUTOQA_CONTRACTS[1]
    r["status"] = "provisional"
    r["contractRef"].update(
        contractVersion=draft["contractVersion"], contractSha256=draft["contractSha256"]
    )
    r["calibrationProfile"] = None
    for a in r["criterionAssessments"]:
        a["calibratedConfidence"] = None


def _deterministic_failure(r: dict[str, Any]) -> None:
    """not_met backed only by a deterministic validator's finding, and a partially_met
    naming both components."""
    _assessed(r, "label_support").update(verdict="not_met", findingIds=["f-3"])
    _assessed(r, "warrant").update(
        verdict="partially_met", satisfiedComponent="order", missingComponent="speed claim"
    )
    _decided(r, "annotation")["action"] = "rework"
    _decided(r, "attempt")["action"] = "rework"
    _decided(r, "composite_case")["action"] = "rework"


def _escalated_composite(r: dict[str, Any]) -> None:
    _decided(r, "attempt")["action"] = "escalate"
    _decided(r, "annotation")["action"] = "reject"
    _decided(r, "composite_case")["action"] = "escalate"


#: For each rule, documents at its edge that pass every rule.
BOUNDARIES: dict[str, list[tuple[str, dict[str, Any]]]] = {
    f"semantic.{KIND}.{name}": [(KIND, record)]
    for name, record in {
        # one target may be decided provisionally and finally
        "unique_ids": _changed(_two_stages),
        # an unknown verdict needs no finding
        "finding_refs_exist": _changed(
            lambda r: _assessed(r, "warrant").update(verdict="unknown", findingIds=[])
        ),
        "claim_element_refs_exist": _changed(
            lambda r: r["findings"][1].update(claimIds=["claim-1"], elementIds=["el-1"])
        ),
        # a relationship may link a finding to evidence
        "relationship_refs_exist": _changed(
            lambda r: r["relationships"][0].update(subjectId="f-1")
        ),
        "evidence_refs_exist": _valid(),
        # a criterion whose evidence the contract does not restrict
        "evidence_permitted": _changed(lambda r: r["findings"][3].update(evidenceIds=["ev-log"])),
        "span_in_artifact": _changed(_whole_artifact_span),
        "span_offsets_match": _changed(_whole_artifact_span),  # end == len(content)
        "content_hashes": _valid(),
        # a diamond is no cycle
        "acyclic_dependencies": _changed(
            lambda r: _assessed(r, "completeness").update(dependsOn=["grounding", "correctness"])
        ),
        # the same instant written with another offset is not before it
        "human_response_before_final": _changed(_answer_at_decision),
        "calibration_profile_compatible": _changed(_uncalibrated),
        "failure_status": _changed(_failed),
        "applicability_first": _changed(
            lambda r: _assessed(r, "completeness").update(
                applicability="does_not_apply", verdict="not_applicable", findingIds=[]
            )
        ),
        "proof_invariants": _changed(_deterministic_failure),
        "contract_resolves": _valid(),
        # a provisional evaluation may use a draft contract
        "contract_approved": _changed(_provisional_draft),
        "criterion_in_contract": _valid(),
        # a project may omit a target it does not use
        "decision_target_declared": _changed(
            lambda r: r.update(decisions=[d for d in r["decisions"] if d["target"] == "attempt"])
        ),
        # only matched rules are triggered
        "triggered_rule_declared": _changed(
            lambda r: _decided(r, "attempt")["trace"].insert(
                0, {"ruleId": "no-such-rule", "priority": 1, "matched": False, "terminal": True}
            )
        ),
        "composite_policy": _changed(_escalated_composite),
    }.items()
}


def test_every_rule_has_a_boundary_and_a_meaning() -> None:
    assert set(BOUNDARIES) == set(CODES)
    for rule in CODES.values():
        assert rule.doc.startswith("AutoQA contract §"), rule.code


@pytest.mark.parametrize("code", sorted(BOUNDARIES))
def test_boundary_documents_pass(code: str) -> None:
    for _, record in BOUNDARIES[code]:
        assert _codes(record) == (Disposition.ACCEPTED, [])


@pytest.mark.parametrize("seed", range(25))
def test_generated_documents_are_valid(seed: int) -> None:
    assert _codes(_valid(seed)) == (Disposition.ACCEPTED, [])


def _sample_expectations() -> dict[int, tuple[str, str]]:
    """Line -> (evaluationId, expected code) of the bundled sample: a planted line's id
    names its code (``planted.<code>`` or ``planted.<code>.<n>``); others are valid."""
    found = {}
    lines = (DATA / f"{KIND}.jsonl").read_bytes().splitlines()
    for number, line in enumerate(lines, 1):
        evaluation = json.loads(line)["evaluationId"]
        code = ""
        if evaluation.startswith("planted."):
            code = evaluation.removeprefix("planted.")
            if code.startswith("cross."):
                code = code.rsplit(".", 1)[0]
        found[number] = (evaluation, code)
    return found


def test_sample_campaign_catches_each_planted_violation_with_its_code(tmp_path: Path) -> None:
    """Issue 18 acceptance: one planted violation per §21 check in data/, each caught with
    its own reason code; the valid documents are accepted."""
    expected = _sample_expectations()
    planted = {code for _, code in expected.values() if code}
    cross = {r.code for r in CROSS_RULES if r.kinds is not None and KIND in r.kinds}
    assert planted == set(CODES) | cross
    result = run(load_campaign(CAMPAIGN), tmp_path / "out")
    got: dict[int, tuple[str, set[str]]] = {}
    for disposition in ("accepted", "rejected", "quarantined", "duplicates"):
        for path in sorted((tmp_path / "out" / disposition).rglob("*.parquet")):
            for row in pq.read_table(path).to_pylist():
                codes = {r["code"] for r in row.get("_reasons") or []}
                got[row["_line"]] = (disposition, codes)
    assert sorted(got) == sorted(expected)
    severities = {code: rule.severity for code, rule in CODES.items()}
    for line, (evaluation, code) in expected.items():
        disposition, codes = got[line]
        if not code:
            assert (disposition, codes) == ("accepted", set()), evaluation
            continue
        assert codes == {code}, evaluation
        if code.startswith("cross."):
            assert disposition == "quarantined", evaluation
        else:
            wanted = "rejected" if severities[code] is Severity.REJECT else "quarantined"
            assert disposition == wanted, evaluation
    assert result.manifest["conservation"]["ok"]


def test_without_the_contracts_table_contract_checks_are_unknown() -> None:
    """A rule that needs the contract never passes silently: quarantine, ``unknown:``."""
    outcome = Gate(CampaignConfig()).gate_line(orjson.dumps(_valid()), None)
    assert outcome.disposition is Disposition.QUARANTINED
    assert {r.code for r in outcome.reasons} == {
        f"semantic.{KIND}.{name}"
        for name in (
            "contract_resolves",
            "contract_approved",
            "criterion_in_contract",
            "evidence_permitted",
            "decision_target_declared",
            "triggered_rule_declared",
            "composite_policy",
            "proof_invariants",
        )
    }
    assert all(r.detail.startswith("unknown:") for r in outcome.reasons)
    # the list `rowgate run` hints "set references.contracts" for
    assert {r.code for r in outcome.reasons} == set(NEEDS_CONTRACTS)


def _table(tmp_path: Path, contracts: list[dict[str, Any]]) -> CampaignConfig:
    path = tmp_path / "contracts.jsonl"
    path.write_text("".join(json.dumps(c) + "\n" for c in contracts))
    return CampaignConfig(references=References(contracts=ReferenceTable(str(path))))


def test_a_contract_without_composite_policy_leaves_composites_unknown(tmp_path: Path) -> None:
    contract = {**AUTOQA_CONTRACTS[0], "compositePolicy": None}
    disposition, codes = _codes(_valid(), Gate(_table(tmp_path, [contract])))
    assert (disposition, codes) == (Disposition.QUARANTINED, [f"semantic.{KIND}.composite_policy"])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda c: c["precedence"].append({"higher": "warrant", "lower": "grounding"}),
            "circular precedence: grounding -> warrant -> grounding",
        ),
        (lambda c: c["criteria"][1]["dependsOn"].append("warrant"), "circular dependency"),
        (lambda c: c["rules"][0].update(target="feedback"), "undeclared decision target"),
        (lambda c: c["criteria"][0]["dependsOn"].append("style"), "unknown criterion"),
        (lambda c: c.update(compositePolicy="vote"), "compositePolicy"),
        (lambda c: c.pop("decisionTargets"), "needs contractSha256"),
    ],
)
def test_contract_defects_fail_the_run(tmp_path: Path, change: Any, message: str) -> None:
    """AutoQA contract §8.11: "Circular precedence MUST be rejected during contract
    validation": a defective contracts table is an operational error, never a row verdict."""
    contract = copy.deepcopy(AUTOQA_CONTRACTS[0])
    change(contract)
    with pytest.raises(ReferenceTableError, match=message):
        load_rule_context(_table(tmp_path, [contract]))
    with pytest.raises(ReferenceTableError, match="listed twice"):
        load_rule_context(_table(tmp_path, [AUTOQA_CONTRACTS[0]] * 2))


def test_find_cycle() -> None:
    assert find_cycle([("a", "b"), ("b", "c"), ("a", "c")]) is None
    assert find_cycle([("a", "b"), ("b", "c"), ("c", "b")]) == ["b", "c", "b"]
    assert find_cycle([("a", "a")]) == ["a", "a"]


def test_routed_by_schema_version_and_refused_for_another_version() -> None:
    record = _valid()
    assert GATE.gate_line(orjson.dumps(record), None).kind == KIND
    other = {**record, "schemaVersion": "autoqa-evaluation/9.0.0"}
    assert _codes_of(other) == ["schema.unsupported_version"]
    assert _codes_of(other, KIND) == ["schema.unsupported_version"]


def _codes_of(record: dict[str, Any], declared: str | None = None) -> list[str]:
    return [r.code for r in GATE.gate_line(orjson.dumps(record), declared).reasons]


def test_findings_never_quote_record_values() -> None:
    """Reasons carry paths and fixed texts only: a secret in a quote never reaches them."""
    secret = "sk-live-0123456789abcdef"
    record = _changed(lambda r: r["claims"][1]["spans"][0].update(quote=secret))
    outcome = GATE.gate_line(orjson.dumps(record), None)
    assert [r.code for r in outcome.reasons] == [f"semantic.{KIND}.span_in_artifact"]
    assert all(secret not in r.detail and secret not in r.path for r in outcome.reasons)


def test_main_campaign_manifest_does_not_list_the_unused_table() -> None:
    """The contracts table is listed in the manifest's config only when configured, so
    the bundled campaign's manifest is unchanged by the new table."""
    assert "contracts" not in load_campaign(DATA / "campaign.toml").as_dict()["references"]
    assert (
        load_campaign(CAMPAIGN)
        .as_dict()["references"]["contracts"]["path"]
        .endswith("autoqa-contracts.jsonl")
    )


def test_content_fingerprint() -> None:
    """The fingerprint commits to what was evaluated and concluded, confidences included
    (as numbers: 1 and 1.0 are one value), not to the evaluation's id or status."""
    from pipeline.kinds import get_kind

    kind = get_kind(KIND)
    record = _valid()
    same = {**copy.deepcopy(record), "evaluationId": "another-id", "status": "provisional"}
    assert kind.fingerprint(same) == kind.fingerprint(record)
    one = _changed(lambda r: r["findings"][0].update(confidence=1))
    assert kind.fingerprint(one) == kind.fingerprint(
        _changed(lambda r: r["findings"][0].update(confidence=1.0))
    )
    assert kind.fingerprint(one) != kind.fingerprint(record)
    other = _changed(lambda r: _assessed(r, "warrant").update(calibratedConfidence=0.123))
    assert kind.fingerprint(other) != kind.fingerprint(record)


def test_times_that_are_no_instant_are_refused() -> None:
    """The schema's pattern admits month 13; the rule reads instants, so such a time is
    its finding, never an exception or a silent pass."""
    code = f"semantic.{KIND}.human_response_before_final"
    record = _changed(_answer_at_decision)
    _decided(record, "attempt")["decidedAt"] = "2026-13-13T11:00:00Z"
    outcome = GATE.gate_line(orjson.dumps(record), None)
    assert [(r.code, r.path, r.detail) for r in outcome.reasons] == [
        (code, "$.decisions[0].decidedAt", "a time that is no calendar instant")
    ]
    record["humanResolution"]["respondedAt"] = "2026-05-13T25:00:00Z"
    assert _codes(record) == (Disposition.REJECTED, [code])
    pending = _changed(lambda r: r.update(humanResolution=autoqa_human(None)))
    assert _codes(pending) == (Disposition.REJECTED, [code] * 3)  # three final decisions


@pytest.mark.parametrize(
    ("responded", "decided", "refused"),
    [
        # nine fractional digits compare as nine (datetime kept six: these were equal)
        ("2026-05-13T11:00:00.0000009Z", "2026-05-13T11:00:00.0000001Z", True),
        ("2026-05-13T11:00:00.0000001Z", "2026-05-13T11:00:00.0000009Z", False),
        # a leap second is an instant: after :59, before the next minute
        ("2016-12-31T23:59:60Z", "2017-01-01T00:00:00Z", False),
        ("2016-12-31T23:59:60.5Z", "2016-12-31T23:59:59.999999999Z", True),
        ("2017-01-01T00:00:00.5Z", "2016-12-31T23:59:60.5Z", True),
        # the same instant in two offsets is not before itself
        ("2026-05-13T12:00:00+01:00", "2026-05-13T11:00:00-00:00", False),
    ],
)
def test_times_compare_to_the_nanosecond_and_a_leap_second_is_an_instant(
    responded: str, decided: str, *, refused: bool
) -> None:
    code = f"semantic.{KIND}.human_response_before_final"
    record = _changed(lambda r: r.update(humanResolution=autoqa_human(responded)))
    for d in record["decisions"]:
        d["decidedAt"] = decided
    disposition, codes = _codes(record)
    assert (code in codes) is refused, codes
    if not refused:
        assert disposition is Disposition.ACCEPTED, codes


def test_without_the_table_proof_invariants_still_check_what_needs_no_contract() -> None:
    """A not_met verdict with no negative finding is refused even when the met verdicts
    are unknown for want of the contracts table (they need positiveProofRequired)."""
    code = f"semantic.{KIND}.proof_invariants"
    record = _changed(
        lambda r: _assessed(r, "label_support").update(verdict="not_met", findingIds=[])
    )
    outcome = Gate(CampaignConfig()).gate_line(orjson.dumps(record), None)
    mine = [r for r in outcome.reasons if r.code == code]
    assert [r.detail.startswith("unknown:") for r in mine] == [True, False]
    assert outcome.disposition is Disposition.REJECTED


def test_a_profiles_criterion_slice_is_a_set(tmp_path: Path) -> None:
    """§13.2's "criterion slice the profile was fitted on" is a set: two documents listing
    one profile's criteria in another order describe it alike (every document of the
    profile was quarantined, found by the rules red team)."""
    first = _valid(3)
    reordered = _valid(4)
    reordered["calibrationProfile"] = {
        **first["calibrationProfile"],
        "criterionIds": first["calibrationProfile"]["criterionIds"][::-1],
    }
    path = tmp_path / "a.jsonl"
    path.write_bytes(orjson.dumps(first) + b"\n" + orjson.dumps(reordered) + b"\n")
    config = dataclasses.replace(load_campaign(CAMPAIGN), inputs=(InputSpec(str(path), KIND),))
    run(config, tmp_path / "same")
    assert not (tmp_path / "same" / "quarantined").exists()
    # what else the profile says is still compared
    resized = copy.deepcopy(reordered)
    resized["calibrationProfile"]["sampleSize"] += 1
    path.write_bytes(orjson.dumps(first) + b"\n" + orjson.dumps(resized) + b"\n")
    run(config, tmp_path / "other")
    quarantined = pq.read_table(tmp_path / "other" / "quarantined").to_pylist()
    assert [[r["code"] for r in row["_reasons"]] for row in quarantined] == [
        ["cross.autoqa_profile_conflict"]
    ] * 2
