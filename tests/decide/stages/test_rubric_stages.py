"""Scoring (300) and policy (400) stages end to end: crafted rows through ``run``, the
bundled campaign, earlier stages' reasons, and failures before any work."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pytest

from pipeline.core.config import CampaignConfig, ConfigError, load_campaign
from pipeline.core.reasons import Disposition
from pipeline.decide import context as global_phase
from pipeline.decide.context import GlobalContext, OutputColumn
from pipeline.decide.stages.decision import DecisionPolicy
from pipeline.decide.stages.scoring import RubricScoring
from pipeline.jobs.run import InputError, run
from pipeline.output.verify import verify_run
from pipeline.rubrics.model import RUBRIC_DIR
from tests.conftest import DATA
from tests.parity import output_digests

GOOD = "def unique_values(values):\n    return list(dict.fromkeys(values))\n"
COMPLEX = (
    "def f(x):\n"
    + "".join(f"    if x == {n}:\n        return {n}\n" for n in range(10))
    + "    return -1\n"
)
PERFECT = {"factuality": 5, "reasoning": 5, "instruction_adherence": 5, "style": 5}


def record(task: str, ratings: dict[str, int] | None = None, **changes: Any) -> dict[str, Any]:
    found = {
        "task_id": task,
        "messages": [{"role": "user", "content": "Remove duplicates, keep order."}],
        "response_a": GOOD,
        "response_b": "def unique_values(values):\n    return list(set(values))\n",
        "preference": "A",
        "rationale": "Response A preserves insertion order; B does not.",
        "golden_patch": None,
        "schema_version": "pairwise-v2",
        "rubric_version": "code-review-v1",
        "ratings": ratings or PERFECT,
    }
    found.update(changes)
    return found


# task id → (record, expected decision, expected trace)
CASES: dict[str, tuple[dict[str, Any], str, list[str]]] = {
    "passes": (
        record("passes", {"factuality": 5, "reasoning": 4, "instruction_adherence": 4, "style": 3}),
        "accept_with_note",
        ["gate-waived", "accept"],
    ),
    "below-minimum": (
        record(
            "below-minimum",
            {"factuality": 5, "reasoning": 5, "instruction_adherence": 5, "style": 2},
        ),
        "rework",
        ["criterion-below-minimum"],
    ),
    "syntax-error": (
        record("syntax-error", response_a="def f(:\n    pass\n"),
        "reject",
        ["hard-gate-failed"],
    ),
    "too-complex": (record("too-complex", response_a=COMPLEX), "reject", ["hard-gate-failed"]),
    "unapproved-import": (
        record(
            "unapproved-import",
            response_a="import requests\n\ndef get(url):\n    return requests.get(url)\n",
        ),
        "reject",
        ["hard-gate-failed"],
    ),
    "tie-no-code": (record("tie-no-code", preference="tie"), "escalate", ["evidence-missing"]),
    "golden-patch": (
        record("golden-patch", preference="neither", response_a="def f(:", golden_patch=GOOD),
        "accept_with_note",
        ["gate-waived", "accept"],
    ),
    "below-acceptance": (
        record(
            "below-acceptance",
            {"factuality": 4, "reasoning": 3, "instruction_adherence": 4, "style": 3},
        ),
        "rework",
        ["weighted-below-acceptance"],
    ),
}
DISPOSITION = {
    "accept_with_note": "accepted",
    "rework": "rejected",
    "reject": "rejected",
    "escalate": "quarantined",
}

CAMPAIGN = """
name = "crafted"

[[inputs]]
path = "crafted.jsonl"
kind = "pairwise-v2"

[scoring."pairwise-v2"]
rubric = "code-review-v1"
code = "COALESCE(golden_patch, CASE preference WHEN 'A' THEN response_a WHEN 'B' THEN response_b END)"
allowed_imports = ["numpy"]
# The crafted rows review one item on purpose (only ratings differ): score each alone.
review_policy = "record"

[scoring."pairwise-v2".criteria]
correctness = "ratings.factuality"
instruction_adherence = "ratings.instruction_adherence"
reasoning_evidence = "ratings.reasoning"
readability = "ratings.style"

[scoring."pairwise-v2".gates]
syntax_valid = "builtin"
max_cyclomatic_complexity_per_function = "builtin"
unapproved_dependencies = "builtin"
{tests_gate}

[policy."pairwise-v2"]
file = "{policy}"

# The crafted rows share their content on purpose (only ratings differ): keep them all.
[dedupe]
enabled = false
"""


def campaign(
    tmp_path: Path, tests_gate: str = 'required_tests_pass = "not_applicable"', extra: str = ""
) -> Path:
    lines = [orjson.dumps(r) for r, _, _ in CASES.values()] + [b'{"broken": ']
    (tmp_path / "crafted.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    path = tmp_path / "campaign.toml"
    text = CAMPAIGN.replace("{tests_gate}", tests_gate).replace(
        "{policy}", str(RUBRIC_DIR / "code-review-v1.policy.toml")
    )
    path.write_text(text + extra)
    return path


def outputs(out: Path) -> pl.DataFrame:
    frames = []
    for directory in ("accepted/pairwise-v2", "quarantined/pairwise-v2", "rejected"):
        if (out / directory).exists():
            frame = pl.read_parquet(out / directory)
            frames.append(
                frame.select(
                    pl.lit(directory.split("/")[0]).alias("dir"),
                    "_line",
                    "_reasons",
                    pl.col(
                        "^_(decision.*|policy_trace.*|policy|weighted_score|weighted_state|gate_.*|criterion_.*|rubric.*)$"
                    ),
                )
            )
    return pl.concat(frames, how="diagonal_relaxed").sort("_line")


def test_crafted_rows(tmp_path: Path) -> None:
    config = load_campaign(campaign(tmp_path))
    result = run(config, tmp_path / "out")
    rows = outputs(tmp_path / "out").to_dicts()
    assert len(rows) == len(CASES) + 1
    for row, (task, (_, decision, trace)) in zip(rows, CASES.items(), strict=False):
        assert (row["_decision"], row["_policy_trace"]) == (decision, trace), task
        assert row["dir"] == DISPOSITION[decision], task
        codes = [r["code"] for r in row["_reasons"]]
        if decision != "accept":
            assert codes[-1] == f"policy.{decision}", task
        assert row["_rubric"] == "code-review-v1"
        assert row["_gate_required_tests_pass"] == "not_applicable"
    by_task = dict(zip(CASES, rows, strict=False))
    assert by_task["passes"]["_weighted_score"] == pytest.approx(4.35)
    assert by_task["below-minimum"]["_weighted_score"] == pytest.approx(4.7)
    assert by_task["below-acceptance"]["_weighted_score"] == pytest.approx(
        0.45 * 4 + 0.25 * 4 + 0.2 * 3 + 0.1 * 3
    )
    assert by_task["syntax-error"]["_gate_syntax_valid"] == "not_met"
    assert by_task["syntax-error"]["_weighted_score"] is None
    assert by_task["too-complex"]["_gate_max_cyclomatic_complexity_per_function_value"] == 11.0
    assert by_task["unapproved-import"]["_gate_unapproved_dependencies_value"] is True
    assert by_task["tie-no-code"]["_gate_syntax_valid"] == "unknown"
    assert "rubric.below_minimum" in [r["code"] for r in by_task["below-minimum"]["_reasons"]]
    # The gate-rejected line never reached the policy: no decision, but the same columns.
    broken = rows[-1]
    assert broken["dir"] == "rejected"
    assert broken["_decision"] is None
    assert [r["code"] for r in broken["_reasons"]] == ["json.syntax"]

    manifest = result.manifest
    notes = manifest["global"]
    assert notes["scoring"]["pairwise-v2"]["rubric"]["sha256"] == (
        hashlib.sha256((RUBRIC_DIR / "code-review-v1.json").read_bytes()).hexdigest()
    )
    assert (
        notes["scoring"]["pairwise-v2"]["analyzer"]["complexity_convention"] == "rowgate-mccabe/1"
    )
    assert notes["policy"]["pairwise-v2"]["decisions"] == {
        "accept_with_note": 2, "escalate": 1, "reject": 3, "rework": 2,
    }  # fmt: skip
    assert manifest["counts"]["by_reason"]["quarantined"]["policy.escalate"] == 1
    report = verify_run(tmp_path / "out")
    assert report.ok, report.problems


def test_unbound_gate_is_unknown_and_escalates(tmp_path: Path) -> None:
    config = load_campaign(campaign(tmp_path, tests_gate=""))
    run(config, tmp_path / "out")
    rows = dict(zip(CASES, outputs(tmp_path / "out").to_dicts(), strict=False))
    passes = rows["passes"]
    assert passes["_gate_required_tests_pass"] == "unknown"
    assert passes["_weighted_score"] is None
    assert (passes["_decision"], passes["dir"]) == ("escalate", "quarantined")
    assert "rubric.gate_unknown" in [r["code"] for r in passes["_reasons"]]
    # Definite failures still decide: the row cannot pass whatever the tests say.
    assert rows["syntax-error"]["_decision"] == "reject"
    assert rows["below-minimum"]["_decision"] == "rework"


def test_evidence_expression_for_a_gate(tmp_path: Path) -> None:
    gate = "required_tests_pass = \"CASE WHEN task_id = 'passes' THEN TRUE WHEN task_id = 'golden-patch' THEN FALSE END\""
    run(load_campaign(campaign(tmp_path, tests_gate=gate)), tmp_path / "out")
    rows = dict(zip(CASES, outputs(tmp_path / "out").to_dicts(), strict=False))
    assert (rows["passes"]["_gate_required_tests_pass"], rows["passes"]["_decision"]) == (
        "met",
        "accept",
    )
    assert rows["golden-patch"]["_decision"] == "reject"
    assert rows["below-acceptance"]["_gate_required_tests_pass"] == "unknown"


class FakeCrossRules:
    """Stands in for the cross-record rules stage (order 100): flags one row, rejects one."""

    name = "cross"
    order = 100

    def enabled(self, config: CampaignConfig) -> bool:
        return True

    def output_columns(self, ctx: GlobalContext, kind: str) -> Sequence[OutputColumn]:
        return []

    def decide(self, ctx: GlobalContext, kind: str, rows: pl.DataFrame) -> pl.DataFrame | None:
        first_two = ctx.with_lineage(rows).sort("_line").head(2).with_row_index("n")
        return first_two.select(
            "_shard",
            "_shard_line",
            _disposition=pl.when(pl.col("n") == 1).then(pl.lit(Disposition.REJECTED.value)),
            _reasons_add=pl.concat_list(
                pl.struct(
                    code=pl.lit("cross.contradictory_preference"),
                    path=pl.lit(""),
                    detail=pl.lit(""),
                )
            ),
        )


def test_policy_reads_earlier_reasons_and_never_rescues(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        global_phase, "GLOBAL_STAGES", [FakeCrossRules, RubricScoring, DecisionPolicy]
    )
    run(load_campaign(campaign(tmp_path)), tmp_path / "out")
    rows = outputs(tmp_path / "out").to_dicts()
    flagged, rejected = rows[0], rows[1]
    assert (flagged["_decision"], flagged["_policy_trace"], flagged["dir"]) == (
        "escalate", ["earlier-stage-conflict"], "quarantined",
    )  # fmt: skip
    assert [r["code"] for r in flagged["_reasons"]] == [
        "cross.contradictory_preference",
        "policy.escalate",
    ]
    # The earlier rejection stands; the row still carries its decision and trace.
    assert (rejected["_decision"], rejected["dir"]) == ("escalate", "rejected")


@pytest.mark.slow
def test_bundled_campaign(tmp_path: Path) -> None:
    config = load_campaign(DATA / "campaign-pairwise-rubric.toml").override(
        **{"engine.shard_bytes": 8192}
    )
    files = {}
    for workers in (1, 2):
        out = tmp_path / f"out{workers}"
        run(config.override(**{"engine.workers": workers}), out)
        files[workers] = {
            p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*.parquet")
        }
    assert files[1] == files[2]
    out = tmp_path / "out1"
    decided = pl.concat(
        [
            pl.read_parquet(out / "accepted" / "pairwise-v2").select(
                "_decision", "_policy_trace", "_weighted_score"
            ),
            pl.read_parquet(out / "rejected").select(
                "_decision", "_policy_trace", "_weighted_score"
            ),
        ]
        + (
            [
                pl.read_parquet(out / "quarantined" / "pairwise-v2").select(
                    "_decision", "_policy_trace", "_weighted_score"
                )
            ]
            if (out / "quarantined").exists()
            else []
        )
    ).filter(pl.col("_decision").is_not_null())
    manifest = json.loads((out / "manifest.json").read_text())
    gated = manifest["counts"]["lines"] - manifest["counts"]["by_reason"]["rejected"].get(
        "json.syntax", 0
    )
    assert decided.height > 100
    assert decided.height <= gated
    assert decided.filter(pl.col("_policy_trace").list.len() == 0).height == 0
    assert decided["_weighted_score"].drop_nulls().len() > 0
    assert set(decided["_decision"]) <= {
        "accept",
        "accept_with_note",
        "rework",
        "reject",
        "escalate",
    }
    assert manifest["global"]["policy"]["pairwise-v2"]["sha256"]
    # The README's excerpt.
    shown = pl.concat(
        pl.read_parquet(out / d).select("_line", "_decision", "_policy_trace", "_weighted_score")
        for d in ("accepted/pairwise-v2", "quarantined/pairwise-v2", "rejected")
    ).filter(pl.col("_line").is_in([1, 7, 46]))
    assert sorted(shown.rows()) == [
        (1, "rework", ["criterion-below-minimum"], pytest.approx(4.3)),
        (7, "accept_with_note", ["gate-waived", "accept"], pytest.approx(4.25)),
        (46, "escalate", ["evidence-missing"], None),
    ]


def test_pin_mismatch_fails_before_any_work(tmp_path: Path) -> None:
    extra = '\n[rubrics.pins]\n"code-review-v1" = "' + "0" * 64 + '"\n'
    config = load_campaign(campaign(tmp_path, extra=extra))
    with pytest.raises(InputError, match="does not match the pinned"):
        run(config, tmp_path / "out")
    assert not any(p.name.startswith(".out") or p.name == "out" for p in tmp_path.iterdir())


@pytest.mark.slow
@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('readability = "ratings.style"', 'readability = "ratings.styel"', "criteria.readability"),
        (
            'readability = "ratings.style"',
            'readibility = "ratings.style"',
            "criteria.readibility: the rubric has no criterion",
        ),
        (
            'readability = "ratings.style"',
            'readability = "preference"',
            "gives String, expected a numeric",
        ),
        ('syntax_valid = "builtin"', 'syntax_valid = "ratings.style"', "expected a boolean"),
        (
            'scoring."pairwise-v2"',
            'scoring."pairwise-v3"',
            "scoring.pairwise-v3: unknown record kind",
        ),
    ],
)
def test_bad_bindings_fail_before_any_work(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    path = campaign(tmp_path)
    path.write_text(path.read_text().replace(old, new))
    with pytest.raises(ConfigError, match=message):
        run(load_campaign(path), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_output_columns_are_typed_for_rejected(tmp_path: Path) -> None:
    run(load_campaign(campaign(tmp_path)), tmp_path / "out")
    schema = pl.read_parquet_schema(next((tmp_path / "out" / "rejected").glob("*.parquet")))
    assert schema["_policy_trace"] == pl.List(pl.String)
    assert schema["_weighted_score"] == pl.Float64
    assert schema["_gate_syntax_valid_value"] == pl.Boolean
    assert schema["_gate_max_cyclomatic_complexity_per_function_value"] == pl.Float64


@pytest.mark.slow
def test_two_scored_kinds_give_the_same_output_for_any_worker_count(tmp_path: Path) -> None:
    """Each kind's built-in gates run as their own step in the run's one pool: a worker
    that served one kind must not reuse its settings for the next."""
    for name in ("pairwise-v2.jsonl", "math-reasoning-v1.jsonl"):
        (tmp_path / name).write_bytes((DATA / name).read_bytes())
    campaign = tmp_path / "campaign.toml"
    campaign.write_text(
        '[[inputs]]\npath = "pairwise-v2.jsonl"\nkind = "pairwise-v2"\n'
        '[[inputs]]\npath = "math-reasoning-v1.jsonl"\nkind = "math-reasoning-v1"\n'
        "[engine]\nshard_bytes = 20000\n"
        '[scoring."pairwise-v2"]\nrubric = "code-review-v1"\nreview_policy = "record"\n'
        "code = \"COALESCE(golden_patch, CASE preference WHEN 'A' THEN response_a "
        "WHEN 'B' THEN response_b END)\"\n"
        '[scoring."pairwise-v2".gates]\nsyntax_valid = "builtin"\n'
        '[scoring."math-reasoning-v1"]\nrubric = "code-review-v1"\ncode = "final_answer"\n'
        'review_policy = "record"\n'
        '[scoring."math-reasoning-v1".gates]\nsyntax_valid = "builtin"\n'
    )
    config = load_campaign(campaign)
    outputs = [
        run(config.override(**{"engine.workers": workers}), tmp_path / f"out{workers}").manifest[
            "outputs"
        ]
        for workers in (1, 2)
    ]
    assert outputs[0] == outputs[1]
    assert any(o["kind"] == "math-reasoning-v1" for o in outputs[0])


CONTRACT_HEAD = """status = "approved"
targets = ["attempt", "composite_case"]
"""
CONTRACT_RULES = """
[calibration]
bands = { high = 0.95, medium = 0.8 }
requires_calibration_for_actions = ["reject"]
[calibration.subjects.syntax_valid]
confidence = 1.0
profile = "deterministic: ast.parse"
[calibration.subjects.unapproved_dependencies]
confidence = 1.0
profile = "deterministic: static imports"

[[rules]]
id = "syntax-gate"
priority = 950
target = "composite_case"
description = "Python that does not parse."
match = { gates = { syntax_valid = ["not_met"] } }
action = "reject"
terminal = true
hard_gate = true
severity = "critical"
confidence = "high"
compensation = "forbidden"
explanation = "{severity}: {description}"

[[rules]]
id = "attempt-accept"
priority = 100
target = "attempt"
description = "The attempt meets the rubric."
match = { weighted = ["met"] }
action = "accept"
terminal = true
"""


def _contract_campaign(tmp_path: Path) -> Path:
    """The crafted rows under a policy of two targets (``decisions_by_target``)."""
    bundled = (RUBRIC_DIR / "code-review-v1.policy.toml").read_text()
    head, rules = bundled.split("\n[[rules]]", 1)
    policy = tmp_path / "contract.policy.toml"
    policy.write_text(head + CONTRACT_HEAD + "\n[[rules]]" + rules + CONTRACT_RULES)
    path = campaign(tmp_path)
    path.write_text(
        path.read_text().replace(str(RUBRIC_DIR / "code-review-v1.policy.toml"), str(policy))
    )
    return path


def test_contract_targets_calibration_and_explanations(tmp_path: Path) -> None:
    """AutoQA contract §5.2 (targets side by side, each with its trace), §13.4 (an
    uncalibrated gate cannot reject automatically), §14.1 (explanation templates)."""
    result = run(load_campaign(_contract_campaign(tmp_path)), tmp_path / "out")
    rows = dict(zip(CASES, outputs(tmp_path / "out").to_dicts(), strict=False))
    accepted = pl.read_parquet(tmp_path / "out/accepted/pairwise-v2")
    assert {"_decision_attempt", "_policy_trace_attempt"} <= set(accepted.columns)
    decided = {
        task: (row["_decision"], row["_policy_trace"], row["_decision_attempt"],
               row["_policy_trace_attempt"])
        for task, row in rows.items()
    }  # fmt: skip
    # A hard gate on a calibrated deterministic gate rejects; a rule deciding on every
    # gate, the complexity gate among them (uncalibrated), escalates instead.
    assert decided["syntax-error"] == ("reject", ["syntax-gate"], "escalate",
                                       ["default:escalate"])  # fmt: skip
    assert decided["too-complex"][:2] == ("escalate", ["hard-gate-failed"])
    assert decided["passes"] == ("accept_with_note", ["gate-waived", "accept"], "accept",
                                 ["attempt-accept"])  # fmt: skip
    complex_reasons = {r["code"]: r["detail"] for r in rows["too-complex"]["_reasons"]}
    assert (
        "max_cyclomatic_complexity_per_function is uncalibrated"
        in (complex_reasons["policy.calibration_unavailable"])
    )
    assert rows["too-complex"]["dir"] == "quarantined"
    syntax = {r["code"]: r["detail"] for r in rows["syntax-error"]["_reasons"]}
    assert syntax["policy.reject"].startswith("critical: Python that does not parse.")
    notes = result.manifest["global"]["policy"]["pairwise-v2"]
    assert (notes["status"], notes["targets"]) == ("approved", ["composite_case", "attempt"])
    assert notes["calibration"]["subjects"]["syntax_valid"]["band"] == "high"
    assert notes["hard_gates"]["syntax-gate"] == {
        "target": "composite_case",
        "match": {"syntax_valid": ["not_met"]},
        "severity": "critical",
        "confidence": "high",
        "action": "reject",
        "compensation": "forbidden",
    }
    assert (
        notes["rules_matched"]["attempt-accept"] == 3
    )  # passes, golden-patch, below-minimum (4.7)
    assert notes["decisions_by_target"]["attempt"]["accept"] == 3
    report = verify_run(tmp_path / "out")
    assert report.ok, report.problems


@pytest.mark.parametrize(("name", "workers"), [("bundled", 1), ("bundled", 2), ("contract", 2)])
def test_row_local_stages_by_shard_give_the_whole_run_outputs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, workers: int
) -> None:
    """Scoring and the policy run a shard at a time on the engine, and the run's notes
    are combined from the shards' (pipeline.decide.by_shard): every output byte, the
    manifest's notes included, is what the two stages give run over the whole run in
    the driver."""
    if name == "bundled":
        config = load_campaign(DATA / "campaign-pairwise-rubric.toml").override(
            **{"engine.shard_bytes": 8192, "dedupe.normalised": True, "dedupe.near": True}
        )
    else:
        config = load_campaign(_contract_campaign(tmp_path)).override(
            **{"engine.shard_bytes": 4096}
        )
    config = config.override(**{"engine.workers": workers})
    by_shard = run(config, tmp_path / "by-shard")
    for stage in (RubricScoring, DecisionPolicy):
        monkeypatch.setattr(stage, "row_local", False)
    whole = run(config, tmp_path / "whole")
    assert output_digests(tmp_path / "by-shard") == output_digests(tmp_path / "whole")
    assert by_shard.manifest["global"] == whole.manifest["global"]
    assert len(by_shard.summaries) >= 2  # several shards' notes were combined
    notes = by_shard.manifest["global"]["policy"]["pairwise-v2"]
    assert sum(notes["decisions"].values()) > 0
    assert verify_run(tmp_path / "by-shard").ok


def test_a_binding_scores_a_row_alike_whatever_rows_are_staged_beside_it(
    tmp_path: Path,
) -> None:
    """A binding that divides by a constant gives a row the same score (and so the same
    state and decision) whether the gate staged it beside other rows or in a batch of its
    own: polars divides a column of one value otherwise than a longer one
    (pipeline.core.row_local.row_values)."""
    text = (DATA / "campaign-pairwise-rubric.toml").read_text()
    bound = 'correctness = "ratings.factuality"'
    assert bound in text
    text = (
        text.replace(bound, 'correctness = "(ratings.factuality + ratings.reasoning) / 3"')
        .replace('"pairwise-v2.jsonl"', json.dumps(str(DATA / "pairwise-v2.jsonl")))
        .replace('"../rubrics/', json.dumps(str(RUBRIC_DIR))[:-1] + "/")
    )
    (tmp_path / "campaign.toml").write_text(text)
    config = load_campaign(tmp_path / "campaign.toml")
    run(config, tmp_path / "together")  # one shard, in batches of many rows
    run(config.override(**{"engine.batch_lines": 1}), tmp_path / "alone")
    together, alone = outputs(tmp_path / "together"), outputs(tmp_path / "alone")
    assert together.height > 100
    assert alone.equals(together)
    # not vacuous: polars gives some of these rows' quotients another last bit alone
    sums = [
        r["factuality"] + r["reasoning"]
        for r in _ratings(DATA / "pairwise-v2.jsonl")
        if isinstance(r.get("factuality"), int) and isinstance(r.get("reasoning"), int)
    ]
    alone_values = [pl.DataFrame({"s": [s]}).select(pl.col("s") / 3).item() for s in sums]
    beside = pl.DataFrame({"s": sums}).select(pl.col("s") / 3)["s"].to_list()
    assert alone_values != beside


def _ratings(path: Path) -> list[dict[str, Any]]:
    """The ``ratings`` of each line of ``path`` that parses to an object holding them."""
    found = []
    for line in path.read_bytes().splitlines():
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue  # the sample's malformed lines
        if isinstance(record, dict) and isinstance(record.get("ratings"), dict):
            found.append(record["ratings"])
    return found
