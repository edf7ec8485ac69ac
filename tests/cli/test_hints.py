"""Hints: one line per dominant, fixable cause of a run, from its manifest alone."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.cli.hints import DOMINANT_SHARE, HINTS, run_hints
from pipeline.core.config import CampaignConfig
from pipeline.core.reasons import GATE_CODES
from pipeline.kinds import KINDS


def _manifest(
    by_reason: dict[str, dict[str, int]],
    lines: int = 100,
    kind: str | None = None,
    config: CampaignConfig | None = None,
) -> dict[str, Any]:
    return {
        "inputs": [{"path": "a.jsonl", "kind": kind}],
        "config": (config or CampaignConfig()).as_dict(),
        "counts": {"lines": lines, "by_disposition": {}, "by_reason": by_reason},
    }


def test_an_undeclared_kind_asks_for_kind_and_names_every_kind() -> None:
    hints = run_hints(_manifest({"rejected": {"schema.unsupported_version": 90}}))
    assert len(hints) == 1
    assert hints[0].startswith("schema.unsupported_version (90 lines):")
    assert "--kind" in hints[0]
    assert all(kind in hints[0] for kind in KINDS)


def test_a_declared_kind_gets_no_kind_hint() -> None:
    manifest = _manifest({"rejected": {"schema.unsupported_version": 90}}, kind="pairwise-v2")
    assert run_hints(manifest) == []


@pytest.mark.parametrize(
    ("code", "says"),
    [
        ("json.invalid_utf8", "UTF-16"),
        ("line.too_large", "--max-line-bytes"),
        ("line.too_large", "limits.max_line_bytes (8,388,608)"),
        ("json.too_deep", "limits.max_depth (64)"),
        ("semantic.grounded-qa-v1.document_digest", "references.documents"),
        ("semantic.agent-trace-v1.authorised_documents", "references.authorised_documents"),
        ("semantic.autoqa-eval-1.criterion_in_contract", "references.contracts"),
        ("semantic.autoqa-eval-1.contract_resolves", "references.contracts"),
    ],
)
def test_each_cause_names_its_fix(code: str, says: str) -> None:
    disposition = "quarantined" if code.startswith("semantic.") else "rejected"
    (hint,) = run_hints(_manifest({disposition: {code: 50}}))
    assert says in hint


def test_causes_below_the_dominant_share_or_unfixable_give_no_hint() -> None:
    few = int(DOMINANT_SHARE * 100) - 1
    assert run_hints(_manifest({"rejected": {"json.invalid_utf8": few}})) == []
    assert run_hints(_manifest({"rejected": {"json.syntax": 90}})) == []


def test_a_configured_table_is_not_asked_for() -> None:
    manifest = _manifest({"quarantined": {"semantic.grounded-qa-v1.document_digest": 50}})
    manifest["config"]["references"]["documents"] = {"path": "documents.jsonl", "sha256": None}
    assert run_hints(manifest) == []


def test_one_line_per_cause_most_lines_first() -> None:
    hints = run_hints(
        _manifest(
            {
                "quarantined": {
                    "semantic.grounded-qa-v1.document_digest": 20,
                    "semantic.grounded-qa-v1.span_in_document": 30,
                },
                "rejected": {"json.invalid_utf8": 40},
            }
        )
    )
    assert [h.split(" ")[0] for h in hints] == [
        "json.invalid_utf8",
        "semantic.grounded-qa-v1.span_in_document",
    ]


def test_hints_are_keyed_by_known_codes() -> None:
    semantic = {c for c in HINTS if c.startswith("semantic.")}
    from pipeline.kinds.rules import RULES

    codes = {r.code for rules in RULES.values() for r in rules}
    assert semantic <= codes
    assert set(HINTS) - semantic <= set(GATE_CODES)
