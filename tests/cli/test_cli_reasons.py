"""``rowgate reasons list``: the reason catalogue as a table, as JSON, as Markdown."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.core.reasons import CATALOGUE, FAMILIES
from pipeline.jobs.reasons import catalogue_markdown, reason_codes

runner = CliRunner()


def test_json_lists_every_code_sorted_with_its_fields() -> None:
    result = runner.invoke(app, ["reasons", "list", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    codes = [row["code"] for row in rows]
    assert codes == sorted(codes)
    assert codes == [e.code for e in reason_codes()]
    # plug-ins are registered: record rules, cross rules, and the pattern families
    for code in (
        "semantic.pairwise-v2.distinct_candidates",
        "semantic.ari-replication-rubric-v2.evidence_span_range",
        "cross.retry",
        "schema.<keyword>",
        "policy.escalate",
        "dedupe.contamination",
    ):
        assert code in codes
    for row in rows:
        assert set(row) == {"code", "disposition", "owner", "meaning", "spec"}
        assert row["disposition"] in {"rejected", "quarantined", "duplicate", "informational"}
        assert row == CATALOGUE.entry(row["code"]).as_dict()


def test_plain_output_is_a_table_per_family_naming_every_code_whole() -> None:
    result = runner.invoke(app, ["reasons", "list"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    for family, emitted_by in FAMILIES.items():
        assert f"{family}.*: {emitted_by}" in lines
    for entry in reason_codes():
        # the code starts its row, whole, followed by its disposition
        assert any(
            line.split()[:2] == [entry.code, entry.disposition.value] for line in lines if line
        ), entry.code


def test_markdown_prints_the_tables_of_the_docs_page() -> None:
    result = runner.invoke(app, ["reasons", "list", "--markdown"])
    assert result.exit_code == 0, result.output
    assert result.stdout == catalogue_markdown()


def test_json_and_markdown_together_are_a_usage_error() -> None:
    result = runner.invoke(app, ["reasons", "list", "--json", "--markdown"])
    assert result.exit_code == 2
