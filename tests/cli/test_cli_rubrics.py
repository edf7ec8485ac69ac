"""``rowgate rubrics score`` through typer's runner."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
from typer.testing import CliRunner

from pipeline.cli import app
from tests.conftest import DATA

runner = CliRunner()

ENVELOPE = {
    "version": "3",
    "rubric": {
        "id": "root",
        "weight": 1,
        "sub_tasks": [
            {
                "id": "a",
                "weight": 3,
                "sub_tasks": [{"id": "a1", "weight": 1}, {"id": "a2", "weight": 2}],
            },
            {"id": "w", "weight": 1, "sub_tasks": [{"id": "b", "weight": 4}]},
        ],
    },
}


def _files(tmp_path: Path, grades: str) -> tuple[Path, Path]:
    envelope, graded = tmp_path / "envelope.json", tmp_path / "grades.jsonl"
    envelope.write_text(json.dumps(ENVELOPE))
    graded.write_text(grades)
    return envelope, graded


def test_score_prints_roots_and_writes_every_node(tmp_path: Path) -> None:
    envelope, grades = _files(
        tmp_path,
        '{"submission": "s1", "leaf_id": "a1", "score": 1}\n'
        '{"submission": "s1", "leaf_id": "a2", "score": 0}\n'
        '{"submission": "s1", "leaf_id": "b", "score": 1}\n'
        '{"submission": "s2", "leaf_id": "a1", "score": 1}\n',
    )
    out = tmp_path / "nodes.parquet"
    result = runner.invoke(app, ["rubrics", "score", str(envelope), str(grades), "--out", str(out)])
    assert result.exit_code == 0, result.output
    # root = (3·(1/3) + 1·1) / 4 = 0.5
    assert "s1          0.5000" in result.stdout
    assert "2 leaf grade(s) missing" in result.stderr
    assert "s2  w = b" in result.stderr
    nodes = pl.read_parquet(out)
    assert nodes.height == 2 * 6
    assert nodes.filter((pl.col("submission") == "s2") & (pl.col("node_id") == "root"))[
        "score"
    ].to_list() == [None]


def test_score_errors_exit_3(tmp_path: Path) -> None:
    envelope, grades = _files(tmp_path, '{"submission": "s1", "leaf_id": "a", "score": 1}\n')
    result = runner.invoke(app, ["rubrics", "score", str(envelope), str(grades)])
    assert result.exit_code == 3
    assert "internal node" in result.stderr
    result = runner.invoke(app, ["rubrics", "score", str(tmp_path / "absent.json"), str(grades)])
    assert result.exit_code == 3
    assert "cannot read" in result.stderr
    grades.write_text('{"submission": "s1", "leaf_id": "b", "score": 1}\n')
    result = runner.invoke(
        app, ["rubrics", "score", str(envelope), str(grades), "--out", str(tmp_path / "x.csv")]
    )
    assert result.exit_code == 3
    assert "--out must end in .parquet or .jsonl" in result.stderr


def test_run_with_the_bundled_rubric_campaign(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = runner.invoke(
        app,
        [
            "run",
            "--config",
            str(DATA / "campaign-pairwise-rubric.toml"),
            "--out",
            str(out),
            "--workers",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "policy.rework" in result.stdout
    accepted = pl.read_parquet(out / "accepted" / "pairwise-v2")
    assert {"_weighted_score", "_decision", "_policy_trace"} <= set(accepted.columns)
    assert set(accepted["_decision"]) <= {"accept", "accept_with_note"}
