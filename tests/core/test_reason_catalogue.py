"""The reason catalogue: every code rowgate can emit is declared once, with its
disposition, owner, meaning and spec; an uncatalogued code is refused; the generated part
of docs/reason-codes.md is current."""

from __future__ import annotations

import importlib
import re
from collections.abc import Sequence
from pathlib import Path

import polars as pl
import pytest

from pipeline.core.config import CampaignConfig
from pipeline.core.reasons import (
    CATALOGUE,
    DEDUPE_CODES,
    FAMILIES,
    GATE_CODES,
    PII_QUARANTINE_CODES,
    POLICY_CODES,
    REVIEW_ACTIONS,
    ReasonCatalogue,
    ReasonCodeError,
    ReasonDisposition,
    RejectLine,
    Spec,
    schema_code,
)
from pipeline.decide.context import GLOBAL_STAGES, GlobalContext, register_stage
from pipeline.decide.stages.cross_rules import CROSS_RULES, cross_rule
from pipeline.dedupe.clusters import RULES as DEDUPE_RULES
from pipeline.jobs.reasons import catalogue_markdown, reason_codes, with_catalogue
from pipeline.kinds.rules import RULES, Severity, record_rule
from pipeline.records.schemas import ASSERTIONS
from pipeline.rubrics.decision_policy import Action
from pipeline.rubrics.scoring import REASON_CODES as SCORING_CODES

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "reason-codes.md"
REGENERATE = "python docs/generate_reason_codes.py"


@pytest.fixture(scope="module", autouse=True)
def _plugins() -> None:
    reason_codes()  # imports every kind, cross rule and stage


def test_every_registered_record_rule_is_catalogued_with_its_severity() -> None:
    rules = [rule for kind_rules in RULES.values() for rule in kind_rules]
    assert len(rules) >= 35
    for rule in rules:
        entry = CATALOGUE.entry(rule.code)
        assert entry.code == rule.code  # declared itself, not through some pattern
        assert entry.disposition is rule.severity.disposition, rule.code
        assert entry.owner == rule.check.__module__


def test_every_cross_rule_and_stage_code_is_catalogued() -> None:
    assert CROSS_RULES
    for rule in CROSS_RULES:
        entry = CATALOGUE.entry(rule.code)
        assert entry.disposition is ReasonDisposition.of(rule.disposition), rule.code
        for own in rule.own:
            assert own in CATALOGUE
    names = set()
    for factory in GLOBAL_STAGES:
        stage = factory()
        names.add(stage.name)
        assert stage.reason_codes, stage.name
        for code in stage.reason_codes:
            assert CATALOGUE.entry(code).code == code, (stage.name, code)
    assert {"cross_rules", "review", "dedupe", "scoring", "policy"} <= names


def test_the_gates_and_every_stages_code_lists_are_catalogued() -> None:
    fixed: list[str] = [
        *GATE_CODES,
        *PII_QUARANTINE_CODES,
        *(code for code, _ in REVIEW_ACTIONS.values()),
        *SCORING_CODES,
        *(DEDUPE_CODES[rule] for rule in DEDUPE_RULES[1:]),
        *(POLICY_CODES[a.value] for a in Action if a is not Action.ACCEPT),
    ]
    for code in fixed:
        assert CATALOGUE.entry(code).code == code
    for code, disposition in REVIEW_ACTIONS.values():
        assert CATALOGUE.entry(code).disposition.value == disposition
    for action in Action:
        if action is not Action.ACCEPT:
            expected = ReasonDisposition.of(action.disposition)
            assert CATALOGUE.entry(POLICY_CODES[action.value]).disposition is expected
    assert {
        e.code for e in CATALOGUE if e.family == "pii" and e.disposition.value == "quarantined"
    } == PII_QUARANTINE_CODES


def test_a_schema_keyword_is_an_instance_of_the_schema_pattern() -> None:
    for keyword in ASSERTIONS - {"$ref", "$defs"}:
        assert CATALOGUE.entry(schema_code(keyword)).code == "schema.<keyword>"
    assert CATALOGUE.entry("schema.unsupported_version").code == "schema.unsupported_version"
    with pytest.raises(ReasonCodeError):
        schema_code("not a keyword")


def test_the_cli_hints_name_catalogued_codes() -> None:
    from pipeline.cli.hints import HINTS

    for code in HINTS:
        assert code in CATALOGUE


def test_each_entry_is_complete() -> None:
    entries = list(CATALOGUE)
    assert [e.code for e in entries] == sorted(e.code for e in entries)
    for entry in entries:
        assert entry.family in FAMILIES
        assert entry.meaning.strip()
        assert "\n" not in entry.meaning
        importlib.import_module(entry.owner)  # the owner is a module that exists
    specs = PAGE.with_name("specs.md").read_text("utf-8")
    for spec in Spec:
        if spec is not Spec.ROWGATE:
            assert f"## {spec.value[0].upper()}{spec.value[1:]}\n" in specs


def test_an_uncatalogued_code_is_refused() -> None:
    with pytest.raises(ReasonCodeError, match="not in the catalogue"):
        CATALOGUE.require("json.planted")
    with pytest.raises(ReasonCodeError, match="not in the catalogue"):
        RejectLine("json.planted", "a code the gate never declared")
    assert "json.planted" not in CATALOGUE


class _PlantedStage:
    """A stage plug-in naming a code nobody declared."""

    name = "planted"
    order = 999
    reason_codes = ("cross.planted",)

    def enabled(self, config: CampaignConfig) -> bool:
        return True

    def output_columns(self, ctx: GlobalContext, kind: str) -> Sequence[object]:
        return []

    def decide(self, ctx: GlobalContext, kind: str, rows: pl.DataFrame) -> None:
        return None


def test_a_stage_naming_an_uncatalogued_code_is_refused_at_registration() -> None:
    before = list(GLOBAL_STAGES)
    with pytest.raises(ReasonCodeError, match=r"cross\.planted"):
        register_stage(_PlantedStage)  # type: ignore[arg-type]
    assert before == GLOBAL_STAGES


def _finder(*args: object) -> None:
    """A cross rule for the test (cites nothing)."""


def test_a_cross_rule_cannot_redeclare_or_leave_its_family() -> None:
    before = list(CROSS_RULES)
    from pipeline.core.reasons import Disposition

    with pytest.raises(ReasonCodeError, match="declared twice"):
        cross_rule("cross.retry", Disposition.REJECTED, meaning="again", spec=Spec.ROWGATE)(
            _finder  # type: ignore[arg-type]
        )
    with pytest.raises(ReasonCodeError, match="not a cross"):
        cross_rule("dedupe.mine", Disposition.REJECTED, meaning="elsewhere", spec=Spec.ROWGATE)(
            _finder  # type: ignore[arg-type]
        )
    assert before == CROSS_RULES


def test_a_record_rule_declares_its_code_or_is_not_registered() -> None:
    before = list(RULES["math-reasoning-v1"])

    def check(record: dict[str, object], ctx: object) -> list[object]:
        """A rule for the test."""
        return []

    with pytest.raises(ReasonCodeError, match="one-line meaning"):
        record_rule(
            "math-reasoning-v1", "planted", Severity.WARN, meaning="two\nlines", spec=Spec.ROWGATE
        )(check)  # type: ignore[arg-type]
    assert RULES["math-reasoning-v1"] == before
    assert "semantic.math-reasoning-v1.planted" not in CATALOGUE


def test_declarations_are_checked() -> None:
    catalogue = ReasonCatalogue()
    declare = catalogue.declare
    code = declare(
        "json.x", ReasonDisposition.REJECTED, owner="m", meaning="one line", spec=Spec.ROWGATE
    )
    assert code == "json.x"
    assert catalogue.entry(code).owner == "m"
    for bad in ("nofamily.x", "json", "json.", "json.a b", "JSON.x"):
        with pytest.raises(ReasonCodeError, match="no reason code"):
            declare(bad, ReasonDisposition.REJECTED, owner="m", meaning="m", spec=Spec.ROWGATE)
    with pytest.raises(ReasonCodeError, match="declared twice"):
        declare("json.x", ReasonDisposition.REJECTED, owner="n", meaning="m", spec=Spec.ROWGATE)
    declare(
        "pii.<name>.x", ReasonDisposition.QUARANTINED, owner="m", meaning="m", spec=Spec.ROWGATE
    )
    assert catalogue.entry("pii.anything.x").code == "pii.<name>.x"
    assert "pii.any.thing.x" not in catalogue  # a placeholder stands for one name


def test_docs_reason_codes_page_is_generated_from_the_catalogue() -> None:
    page = PAGE.read_text("utf-8")
    assert page == with_catalogue(page), (
        f"docs/reason-codes.md is stale: run `{REGENERATE}` from the repository root"
    )
    tables = catalogue_markdown()
    for entry in CATALOGUE:
        assert f"| `{entry.code}` | {entry.disposition.value} |" in tables
    # the gate's codes in the order it checks them
    gate = re.findall(r"^\| `((?:line|json|schema)\.[^`]+)`", tables, re.M)
    assert gate[: len(GATE_CODES)] == list(GATE_CODES)


def test_a_stale_page_is_detected() -> None:
    page = PAGE.read_text("utf-8")
    stale = page.replace("| `json.syntax` | rejected |", "| `json.syntax` | quarantined |")
    assert stale != page
    assert with_catalogue(stale) == page
    with pytest.raises(ValueError, match="lacks the lines"):
        with_catalogue("# a page without the markers\n")
