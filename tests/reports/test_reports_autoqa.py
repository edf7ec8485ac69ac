"""The autoqa-criteria report preset: criterion-level calibrated confidence against verdict
correctness where a reference verdict exists, on the bundled AutoQA sample run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.core.config import ConfigError, load_campaign
from pipeline.jobs.run import run
from pipeline.reports.evaluation import evaluate
from pipeline.reports.settings import ReportSettings
from pipeline.reports.sources import load_table
from tests.conftest import DATA

runner = CliRunner()


@pytest.fixture(scope="module")
def autoqa_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("run") / "out"
    run(load_campaign(DATA / "campaign-autoqa.toml").override(**{"engine.workers": 1}), out)
    return out


def _reference(run_dir: Path) -> list[dict[str, Any]]:
    """(criterion, confidence, correct) of every assessment with a reference verdict and a
    calibrated confidence, straight from the accepted documents."""
    found = []
    for document in pl.read_parquet(run_dir / "accepted" / "autoqa-eval-1").to_dicts():
        for a in document["criterionAssessments"]:
            if a["referenceVerdict"] is None or a["calibratedConfidence"] is None:
                continue
            found.append(
                {
                    "criterion": a["criterionId"],
                    "confidence": a["calibratedConfidence"],
                    "correct": a["verdict"] == a["referenceVerdict"],
                }
            )
    return found


def test_autoqa_criteria_preset_against_a_per_assessment_reference(autoqa_run: Path) -> None:
    settings = ReportSettings(preset="autoqa-criteria", by=("criterionId",), bootstrap=50)
    report = evaluate(load_table(str(autoqa_run), kind=settings.source_kind), settings.validate())
    assert settings.mode == "scored"
    rows = _reference(autoqa_run)
    assessments = pl.read_parquet(autoqa_run / "accepted" / "autoqa-eval-1")[
        "criterionAssessments"
    ].list.len()
    assert report.data["rows_read"] == assessments.sum()
    assert report.data["rows_evaluated"] == len(rows)
    assert report.data["rows_dropped_null"] == assessments.sum() - len(rows) > 0
    assert {s.label for s in report.slices} == {"all"} | {
        f"criterionId={r['criterion']}" for r in rows
    }
    for s in report.slices:
        mine = [r for r in rows if s.label == "all" or s.keys["criterionId"] == r["criterion"]]
        n = len(mine)
        assert s.summary["n"] == n
        assert s.summary["accuracy"] == pytest.approx(sum(r["correct"] for r in mine) / n)
        assert s.summary["mean_confidence"] == pytest.approx(sum(r["confidence"] for r in mine) / n)
        assert s.summary["brier"] == pytest.approx(
            sum((r["confidence"] - r["correct"]) ** 2 for r in mine) / n
        )
    assert report.data["run_kind"] == "autoqa-eval-1"


def test_autoqa_criteria_preset_through_the_cli(autoqa_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    result = runner.invoke(
        app,
        [
            "report",
            "calibration",
            str(autoqa_run),
            "--preset",
            "autoqa-criteria",
            "--where",
            "status = 'final'",
            "--out",
            str(out),
            "--bootstrap",
            "20",
        ],
    )
    assert result.exit_code == 0, result.output
    document = json.loads((out / "report.json").read_text())
    assert document["mode"] == "scored"
    assert document["expressions"]["confidence"] == "calibratedConfidence"
    assert document["preset"]["rows"] == "one row per element of criterionAssessments"
    assert document["slices"][0]["ece_equal_width"] is not None
    assert "calibratedConfidence" in (out / "report.html").read_text()


def test_presets_without_a_confidence_still_refuse_calibration(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no confidence"):
        ReportSettings(preset="pw-decide-row").validate()
    with pytest.raises(ConfigError, match="drop confidence"):
        ReportSettings(preset="autoqa-criteria", confidence="p").validate()
    result = runner.invoke(
        app,
        [
            "report",
            "calibration",
            "x.parquet",
            "--preset",
            "pw-decide-row",
            "--out",
            str(tmp_path / "r"),
        ],
    )
    assert result.exit_code == 2, result.output
    assert "no confidence" in result.output
