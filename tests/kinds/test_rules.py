"""Per-record semantic rules: each one alone, its boundary, reference tables, docstrings."""

from __future__ import annotations

import copy
import hashlib
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from pipeline.core.config import (
    CampaignConfig,
    ConfigError,
    References,
    ReferenceTable,
    load_campaign,
)
from pipeline.core.reasons import Disposition
from pipeline.gate.gate import Gate
from pipeline.kinds.rules import RULES, ReferenceTableError, Severity, load_rule_context
from pipeline.testing.synthetic import DOCUMENTS, RULE_VIOLATIONS, make_record
from tests.conftest import DATA
from tests.kinds.test_autoqa_eval import BOUNDARIES as AUTOQA_BOUNDARIES

CONFIG = load_campaign(DATA / "campaign.toml")
GATE = Gate(CONFIG)
#: kinds whose reference tables the bundled campaign does not hold: their own campaign
GATES = {"autoqa-eval-1": Gate(load_campaign(DATA / "campaign-autoqa.toml"))}
ALL_RULES = {r.code: r for rules in RULES.values() for r in rules}


def _gate(
    record: dict[str, Any], kind: str, gate: Gate | None = None
) -> tuple[Disposition, list[str]]:
    gate = gate or GATES.get(kind, GATE)
    outcome = gate.gate_line(orjson.dumps(record), kind)
    return outcome.disposition, [r.code for r in outcome.reasons]


def test_every_rule_has_a_violation_sample_and_cites_its_source() -> None:
    assert set(RULE_VIOLATIONS) == set(ALL_RULES)
    for rule in ALL_RULES.values():
        sources = ("Seed", "seed", "DESIGN", "Reference", "AutoQA contract §")
        assert any(source in rule.doc for source in sources), rule.code


@pytest.mark.parametrize("code", sorted(RULE_VIOLATIONS))
def test_a_record_breaking_only_this_rule(code: str) -> None:
    rule = ALL_RULES[code]
    expected = {
        Severity.REJECT: Disposition.REJECTED,
        Severity.QUARANTINE: Disposition.QUARANTINED,
        Severity.WARN: Disposition.ACCEPTED,
    }[rule.severity]
    for i in range(3):
        disposition, codes = _gate(RULE_VIOLATIONS[code](i), rule.kind)
        assert set(codes) == {code}
        assert disposition is expected


def _valid(kind: str, i: int = 1) -> dict[str, Any]:
    return make_record(kind, random.Random(i), i)


def _pairwise(**changes: Any) -> dict[str, Any]:
    record = _valid("pairwise-v2")
    record.update(
        preference="A", golden_patch=None, rationale="Response A is better because it keeps order."
    )
    record.update(changes)
    return record


def _trace(steps: list[tuple[str, list[str], bool]], answer: str = "Done.") -> dict[str, Any]:
    record = _valid("agent-trace-v1")
    template = record["steps"][0]
    record["steps"] = [
        {**template, "call_id": cid, "result": {"document_ids": ids, "success": ok}}
        for cid, ids, ok in steps
    ]
    record["final_answer"] = answer
    return record


def _at_size_bound() -> dict[str, Any]:
    """Prompt + queries + answer exactly at the default bound of 65,536 characters."""
    record = _trace([("call-1", [], True)], "f" * 31_536)
    record["prompt"] = "p" * 32_000
    record["steps"][0]["arguments"]["query"] = "q" * 2_000
    return record


def _conversation_at_bound() -> dict[str, Any]:
    """Messages + responses + rationale exactly at the default bound of 262,144 characters."""
    record = _pairwise(
        messages=[
            {"role": "user" if n % 2 == 0 else "assistant", "content": "m" * 32_000}
            for n in range(7)
        ],
        response_b="b" * 18_000,
    )
    rest = 7 * 32_000 + 18_000 + len(record["rationale"])
    record["response_a"] = "a" * (262_144 - rest)
    return record


def _cited(**changes: Any) -> dict[str, Any]:
    text = DOCUMENTS["doc-002"]
    citation = {
        "document_id": "doc-002",
        "document_sha256": hashlib.sha256(text.encode()).hexdigest(),
        "start": 0,
        "end": len(text),
        "quote": text,
    }
    citation.update(changes)
    record = _valid("grounded-qa-v1")
    record.update(citations=[citation], abstain=False)
    return record


def _decide(mutate: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    record = copy.deepcopy(_valid("pw-decide-row-1", 8))
    mutate(record)
    return record


#: For each rule, records at its edge that must pass (nothing fires).
BOUNDARIES: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "semantic.pairwise-v2.distinct_candidates": [
        ("pairwise-v2", _pairwise(response_a="def f(): return 1", response_b="def f(): return 2")),
    ],
    "semantic.pairwise-v2.substantive_rationale": [
        ("pairwise-v2", _pairwise(rationale="Response A keeps insertion order.")),  # 4 words + "A"
    ],
    "semantic.pairwise-v2.system_message_first": [
        (
            "pairwise-v2",
            _pairwise(
                messages=[
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Sort it."},
                ]
            ),
        ),
    ],
    "semantic.pairwise-v2.alternating_turns": [
        (
            "pairwise-v2",
            _pairwise(
                messages=[
                    {"role": "user", "content": "a"},
                    {"role": "assistant", "content": "b"},
                    {"role": "user", "content": "c"},
                ]
            ),
        ),
    ],
    "semantic.pairwise-v2.ends_with_user_turn": [
        ("pairwise-v2", _pairwise(messages=[{"role": "user", "content": "only turn"}])),
    ],
    "semantic.pairwise-v2.neither_needs_patch": [
        (
            "pairwise-v2",
            _pairwise(
                preference="neither",
                golden_patch="  x = sorted(values)  ",
                rationale="Neither response keeps the order.",
            ),
        ),
        (
            "pairwise-v2",
            _pairwise(
                preference="tie", golden_patch=None, rationale="Both responses keep the order."
            ),
        ),
    ],
    "semantic.pairwise-v2.rubric_version": [
        ("pairwise-v2", _pairwise(rubric_version="code-review-v1"))
    ],
    "semantic.pairwise-v2.aggregate_size": [("pairwise-v2", _conversation_at_bound())],
    "semantic.pairwise-v2.rationale_consistency": [
        (
            "pairwise-v2",
            _pairwise(rationale="Response B is shorter, but response A is better: it keeps order."),
        ),
        (
            "pairwise-v2",
            _pairwise(preference="tie", rationale="Response A is better in style, B in speed."),
        ),
    ],
    "semantic.agent-trace-v1.unique_call_ids": [
        ("agent-trace-v1", _trace([("call-1", [], True), ("call-10", [], True)]))
    ],
    "semantic.agent-trace-v1.call_order": [
        ("agent-trace-v1", _trace([("call-2", [], True), ("call-10", [], True)]))
    ],
    "semantic.agent-trace-v1.failed_call_without_results": [
        ("agent-trace-v1", _trace([("call-1", [], False)]))
    ],
    "semantic.agent-trace-v1.evidence_from_successful_calls": [
        (
            "agent-trace-v1",
            _trace([("call-1", ["doc-003"], True), ("call-2", [], False)], "See doc-003."),
        ),
        ("agent-trace-v1", _trace([("call-1", ["doc-003"], True)], "See doc-0033 and doc-00.")),
    ],
    "semantic.agent-trace-v1.authorised_documents": [
        ("agent-trace-v1", _trace([("call-1", ["doc-050"], True)]))
    ],
    "semantic.agent-trace-v1.aggregate_size": [("agent-trace-v1", _at_size_bound())],
    "semantic.grounded-qa-v1.span_order": [
        ("grounded-qa-v1", _cited(start=0, end=1, quote=DOCUMENTS["doc-002"][0]))
    ],
    "semantic.grounded-qa-v1.document_digest": [("grounded-qa-v1", _cited())],
    "semantic.grounded-qa-v1.span_in_document": [("grounded-qa-v1", _cited())],  # end == len(text)
    "semantic.grounded-qa-v1.quote_matches_span": [
        ("grounded-qa-v1", _cited(start=3, end=9, quote=DOCUMENTS["doc-002"][3:9]))
    ],
    "semantic.math-reasoning-v1.non_blank_steps": [
        ("math-reasoning-v1", {**_valid("math-reasoning-v1"), "derivation": ["0"]})
    ],
    "semantic.math-reasoning-v1.non_blank_answer": [
        ("math-reasoning-v1", {**_valid("math-reasoning-v1"), "final_answer": "0"})
    ],
    "semantic.math-reasoning-v1.unique_assumptions": [
        ("math-reasoning-v1", {**_valid("math-reasoning-v1"), "assumptions": ["x > 0", "x >= 0"]}),
    ],
    "semantic.pw-decide-row-1.coordinator_is_its_own_root": [
        (
            "pw-decide-row-1",
            _decide(lambda r: r.update(host="coordinator", root_session=r["session"])),
        ),
    ],
    "semantic.pw-decide-row-1.worker_has_a_coordinator": [
        ("pw-decide-row-1", _decide(lambda r: r.update(host="worker", root_session="s-00000"))),
    ],
    "semantic.pw-decide-row-1.partial_iff_no_kind": [
        (
            "pw-decide-row-1",
            _decide(
                lambda r: (
                    r.update(partial=True),
                    r["labels"].update(kind=None, tools=[], skills=[]),
                )
            ),
        ),
    ],
    "semantic.pw-decide-row-1.partial_labels_only_requests": [
        (
            "pw-decide-row-1",
            _decide(
                lambda r: (
                    r.update(partial=True),
                    r["labels"].update(kind=None, tools=[], skills=[], requested_names=["grep"]),
                )
            ),
        ),
    ],
    "semantic.pw-decide-row-1.tools_offered": [
        (
            "pw-decide-row-1",
            _decide(lambda r: r["labels"].update(tools=list(r["offered"]["loadable"]), kind="run")),
        ),
    ],
    "semantic.pw-decide-row-1.guides_offered": [
        ("pw-decide-row-1", _decide(lambda r: r["labels"].update(guides={})))
    ],
    "semantic.pw-decide-row-1.engine_choices_offered": [
        (
            "pw-decide-row-1",
            _decide(
                lambda r: r["engine"].update(
                    state="answered",
                    preloaded=r["offered"]["loadable"][:1],
                    omitted=r["offered"]["loadable"][1:],
                )
            ),
        ),
    ],
    "semantic.pw-decide-row-1.abstained_carries_nothing": [
        (
            "pw-decide-row-1",
            _decide(
                lambda r: r["engine"].update(
                    state="abstained", preloaded=[], omitted=r["offered"]["loadable"]
                )
            ),
        ),
    ],
    "semantic.pw-decide-row-1.answer_only_calls_no_tools": [
        ("pw-decide-row-1", _decide(lambda r: r["labels"].update(kind="answer_only", tools=[]))),
    ],
    "semantic.pw-decide-row-1.judged_scores_name_their_judge": [
        (
            "pw-decide-row-1",
            _decide(
                lambda r: (r.pop("judge"), [q.update(scores={}) for q in r["labels"]["requests"]])
            ),
        ),
    ],
}


def _ari_boundaries() -> None:
    from pipeline.testing.synthetic import _ari, _flag_leaves

    for kind in ("ari-replication-rubric-3", "ari-replication-rubric-v2"):
        plain = _ari(kind, lambda r: None)(3)
        for name in ("rubric_sha256", "unique_node_ids", "node_ids_are_uuids", "leaf_only_fields"):
            BOUNDARIES[f"semantic.{kind}.{name}"] = [(kind, plain)]
        one_zero = _ari(kind, lambda r: r["rubric"]["sub_tasks"][0].update(weight=0))(3)
        BOUNDARIES[f"semantic.{kind}.weighted_children"] = [(kind, one_zero)]
    # exactly 20 % flagged is not "more than 20 %"
    five_leaves = _ari("ari-replication-rubric-3", lambda r: None)(0)
    BOUNDARIES["semantic.ari-replication-rubric-3.flagged_leaves_share"] = [
        ("ari-replication-rubric-3", _ari("ari-replication-rubric-3", _flag_leaves(0.2))(i))
        for i in range(20)
    ] + [("ari-replication-rubric-3", five_leaves)]
    one_char = _ari(
        "ari-replication-rubric-v2", lambda r: _first_leaf_span(r).update(start_char=5, end_char=6)
    )(1)
    BOUNDARIES["semantic.ari-replication-rubric-v2.evidence_span_range"] = [
        ("ari-replication-rubric-v2", one_char)
    ]


def _first_leaf_span(record: dict[str, Any]) -> dict[str, Any]:
    node = record["rubric"]
    while node.get("sub_tasks"):
        node = node["sub_tasks"][0]
    return node["evidence_span"]  # type: ignore[no-any-return]


_ari_boundaries()
BOUNDARIES.update(AUTOQA_BOUNDARIES)


def test_pairwise_conversation_size_is_bounded() -> None:
    """Seed 000: "Bound aggregate conversation size as well as individual fields". Before,
    63 messages of 32,000 characters (2 MB, each field valid) were accepted."""
    long = _pairwise(
        messages=[
            {"role": "user" if n % 2 == 0 else "assistant", "content": "m" * 32_000}
            for n in range(63)
        ]
    )
    roomy = Gate(CONFIG.override(**{"limits.max_line_bytes": 4 << 20}))
    assert _gate(long, "pairwise-v2", roomy) == (
        Disposition.REJECTED,
        ["semantic.pairwise-v2.aggregate_size"],
    )
    at_bound = _conversation_at_bound()
    assert _gate(at_bound, "pairwise-v2") == (Disposition.ACCEPTED, [])
    at_bound["response_a"] += "a"
    assert _gate(at_bound, "pairwise-v2") == (
        Disposition.REJECTED,
        ["semantic.pairwise-v2.aggregate_size"],
    )
    # the campaign sets the bound, within its own bounds
    wider = Gate(CONFIG.override(**{"rules.max_conversation_chars": 262_145}))
    assert _gate(at_bound, "pairwise-v2", wider) == (Disposition.ACCEPTED, [])
    for bad in (0, 10**9):
        with pytest.raises(ConfigError, match="max_conversation_chars"):
            CONFIG.override(**{"rules.max_conversation_chars": bad})


def test_rubric_version_must_name_the_rubric_the_row_is_scored_with() -> None:
    """Seed 000: versions are preserved "with every accepted artifact". Before, a row
    naming ``other-v9`` was scored under ``code-review-v1`` and accepted unless the
    campaign also listed ``rules.rubric_versions``."""
    scored = load_campaign(DATA / "campaign-pairwise-rubric.toml")
    assert not scored.rules.rubric_versions
    gate = Gate(scored)
    assert _gate(_pairwise(rubric_version="code-review-v1"), "pairwise-v2", gate) == (
        Disposition.ACCEPTED,
        [],
    )
    outcome = gate.gate_line(orjson.dumps(_pairwise(rubric_version="other-v9")), "pairwise-v2")
    assert outcome.disposition is Disposition.REJECTED
    assert [(r.code, r.path) for r in outcome.reasons] == [
        ("semantic.pairwise-v2.rubric_version", "$.rubric_version")
    ]
    assert "other-v9" not in outcome.reasons[0].detail  # never the row's value
    # the check is on by default and off only when the campaign disables the rule
    off = scored.override(**{"rules.disabled": ("semantic.pairwise-v2.rubric_version",)})
    assert _gate(_pairwise(rubric_version="other-v9"), "pairwise-v2", Gate(off)) == (
        Disposition.ACCEPTED,
        [],
    )


@pytest.mark.parametrize("code", sorted(ALL_RULES))
def test_boundary_records_pass(code: str) -> None:
    assert code in BOUNDARIES, f"no boundary case for {code}"
    for kind, record in BOUNDARIES[code]:
        disposition, codes = _gate(record, kind)
        if code.endswith("flagged_leaves_share"):
            assert code not in codes or _share(record) > 0.2
            continue
        assert codes == [], (code, codes)
        assert disposition is Disposition.ACCEPTED


def _share(record: dict[str, Any]) -> float:
    from pipeline.kinds.ari import leaves

    found = [n for _, n in leaves(record["rubric"])]
    return sum(1 for n in found if n.get("flags")) / len(found)


def test_missing_reference_tables_make_rules_unknown() -> None:
    gate = Gate(CampaignConfig())
    disposition, codes = _gate(_cited(), "grounded-qa-v1", gate)
    assert disposition is Disposition.QUARANTINED
    assert set(codes) == {
        "semantic.grounded-qa-v1.document_digest",
        "semantic.grounded-qa-v1.span_in_document",
        "semantic.grounded-qa-v1.quote_matches_span",
    }
    outcome = gate.gate_line(
        orjson.dumps(_trace([("call-1", ["doc-001"], True)])), "agent-trace-v1"
    )
    assert outcome.disposition is Disposition.QUARANTINED
    assert all(r.detail.startswith("unknown:") for r in outcome.reasons)
    # nothing to check, nothing unknown
    assert _gate(
        {**_valid("grounded-qa-v1"), "citations": [], "abstain": True}, "grounded-qa-v1", gate
    ) == (
        Disposition.ACCEPTED,
        [],
    )


def test_reference_table_digests_are_enforced(tmp_path: Path) -> None:
    docs = tmp_path / "docs.jsonl"
    docs.write_bytes((DATA / "documents.jsonl").read_bytes())
    good = hashlib.sha256(docs.read_bytes()).hexdigest()
    load_rule_context(
        CampaignConfig(references=References(documents=ReferenceTable(str(docs), good)))
    )
    with pytest.raises(ReferenceTableError, match="does not match the pinned"):
        load_rule_context(
            CampaignConfig(references=References(documents=ReferenceTable(str(docs), "0" * 64)))
        )
    rows = [json.loads(line) for line in docs.read_text().splitlines()]
    rows[0]["text"] += " tampered"
    docs.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with pytest.raises(ReferenceTableError, match="does not match its sha256"):
        load_rule_context(
            CampaignConfig(references=References(documents=ReferenceTable(str(docs))))
        )
    with pytest.raises(ReferenceTableError, match="no such file"):
        load_rule_context(
            CampaignConfig(
                references=References(documents=ReferenceTable(str(tmp_path / "x.jsonl")))
            )
        )


def test_documents_table_may_be_parquet(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [json.loads(line) for line in (DATA / "documents.jsonl").read_text().splitlines()]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "docs.parquet")
    ctx = load_rule_context(
        CampaignConfig(
            references=References(documents=ReferenceTable(str(tmp_path / "docs.parquet")))
        )
    )
    assert ctx.documents is not None
    assert len(ctx.documents) == len(DOCUMENTS)


def test_disabled_rules_do_not_run() -> None:
    gate = Gate(
        CONFIG.override(**{"rules.disabled": ("semantic.pairwise-v2.distinct_candidates",)})
    )
    code = "semantic.pairwise-v2.distinct_candidates"
    assert _gate(RULE_VIOLATIONS[code](0), "pairwise-v2", gate) == (Disposition.ACCEPTED, [])


def test_every_finding_is_reported_not_just_the_first() -> None:
    record = RULE_VIOLATIONS["semantic.pairwise-v2.distinct_candidates"](0)
    record["rationale"] = "asdf asdf asdf asdf asdf"
    _, codes = _gate(record, "pairwise-v2")
    assert set(codes) == {
        "semantic.pairwise-v2.distinct_candidates",
        "semantic.pairwise-v2.substantive_rationale",
    }


def test_call_order_compares_call_numbers_of_any_length() -> None:
    """A schema without the shipped bound on call ids must not crash the rule: numbers past
    Python's int-conversion limit are compared by length and digits, never int()."""
    (rule,) = [r for r in RULES["agent-trace-v1"] if r.code.endswith(".call_order")]
    huge = "9" * 5000

    def steps(*numbers: str) -> dict[str, Any]:
        return {"steps": [{"call_id": f"call-{n}"} for n in numbers]}

    assert list(rule.check(steps("1", "02", huge), None)) == []  # type: ignore[arg-type]
    found = list(rule.check(steps("1", huge, "3"), None))  # type: ignore[arg-type]
    assert [f.path for f in found] == ["$.steps[2].call_id"]
