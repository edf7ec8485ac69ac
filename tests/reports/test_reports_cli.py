"""``rowgate report``: commands, outputs, and the documented exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from tests.conftest import DATA

runner = CliRunner()


@pytest.fixture(scope="module")
def scores(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(11)
    n = 1500
    p = rng.beta(4, 2, n).round(3)
    path = tmp_path_factory.mktemp("data") / "eval.parquet"
    pl.DataFrame(
        {
            "prob": p,
            "label": (rng.random(n) < p).astype(np.int64),
            "split": rng.choice(["x", "y"], n),
        }
    ).write_parquet(path)
    return path


@pytest.mark.slow
def test_report_calibration_writes_every_output(scores: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    result = runner.invoke(
        app,
        [
            "report", "calibration", str(scores), "--confidence", "prob", "--correct", "label = 1",
            "--by", "split", "--out", str(out), "--bins", "10", "--bootstrap", "100", "--seed", "7",
            "--target-risk", "0.05",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "split=x" in result.stdout
    assert "wrote" in result.stdout
    names = sorted(p.name for p in out.iterdir())
    assert names == [
        "bins.parquet",
        "rc_curve.parquet",
        "report.html",
        "report.json",
        "summary.parquet",
        "targets.parquet",
    ]
    document = json.loads((out / "report.json").read_text())
    assert document["settings"]["bins"] == 10
    assert document["settings"]["seed"] == 7
    assert document["settings"]["target_risks"] == [0.05]
    assert document["expressions"]["correct"] == "label = 1"
    page = (out / "report.html").read_text()
    assert page.count('src="data:image/png;base64,') >= 4  # forest, rc, 3 reliability diagrams
    assert "http://" not in page
    assert "https://" not in page
    assert "<script" not in page


@pytest.mark.slow
def test_report_selective_with_the_preset_on_a_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    done = runner.invoke(
        app,
        [
            "run",
            "--config",
            str(DATA / "campaign.toml"),
            "--out",
            str(run_dir),
            "-q",
            "--workers",
            "1",
        ],
    )
    assert done.exit_code == 0, done.output
    out = tmp_path / "report"
    result = runner.invoke(
        app,
        [
            "report",
            "selective",
            str(run_dir),
            "--preset",
            "pw-decide-row",
            "--by",
            "host",
            "--out",
            str(out),
            "--bootstrap",
            "50",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "small_slice" in result.output  # warnings go to stderr; the runner mixes streams
    document = json.loads((out / "report.json").read_text())
    assert document["mode"] == "operating_point"
    assert document["preset"]["name"] == "pw-decide-row"
    assert document["expressions"]["selected"] == 'engine.state == "answered"'
    assert sorted(p.name for p in out.iterdir()) == [
        "report.html",
        "report.json",
        "summary.parquet",
    ]


def test_report_selective_ranks_any_score_from_jsonl(tmp_path: Path) -> None:
    data = tmp_path / "eval.jsonl"
    data.write_text(
        "".join(f'{{"score": {s}, "ok": {str(s > 2).lower()}}}\n' for s in range(-3, 9))
    )
    out = tmp_path / "report"
    selective = ["report", "selective", str(data), "--confidence", "score", "--correct", "ok"]
    result = runner.invoke(app, [*selective, "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    summary = pl.read_parquet(out / "summary.parquet")
    assert summary["aurc"][0] == pytest.approx(float(summary["aurc_optimal"][0]))
    # the terminal summary shows the metrics a raw score has, and no column of dashes
    shown = runner.invoke(
        app, [*selective, "--out", str(tmp_path / "again")], env={"COLUMNS": "200"}
    )
    assert shown.exit_code == 0, shown.output
    assert "aurc" in shown.output
    assert "ece_equal_width" not in shown.output
    assert "brier" not in shown.output
    assert "–" not in shown.output


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--confidence", "nope", "--correct", "label"], 2, "nope"),
        (["--confidence", "prob", "--correct", "label", "--bins", "0"], 2, "bins"),
        (["--confidence", "prob * 2", "--correct", "label"], 3, "outside [0, 1]"),
        (["--confidence", "prob", "--correct", "split"], 2, "boolean or 0/1"),
    ],
)
def test_report_exit_codes(
    scores: Path, tmp_path: Path, args: list[str], code: int, message: str
) -> None:
    result = runner.invoke(
        app, ["report", "calibration", str(scores), *args, "--out", str(tmp_path / "r")]
    )
    assert result.exit_code == code, result.output
    assert message in result.output
    assert not (tmp_path / "r").exists()


def test_an_unreadable_parquet_file_exits_3(tmp_path: Path) -> None:
    """It was an internal error (exit 4)."""
    (tmp_path / "empty.parquet").write_bytes(b"")
    args = ["--confidence", "p", "--correct", "y", "--out", str(tmp_path / "r")]
    result = runner.invoke(app, ["report", "calibration", str(tmp_path / "empty.parquet"), *args])
    assert result.exit_code == 3, result.output
    assert "empty.parquet: not a readable Parquet file" in result.output
    assert not (tmp_path / "r").exists()


def test_a_file_named_like_a_glob_is_the_file_reported(tmp_path: Path) -> None:
    """``report calibration '[a].parquet'`` reported a.parquet's 7 rows."""
    pl.DataFrame({"c": [0.9] * 100, "k": [True] * 100}).write_parquet(tmp_path / "[a].parquet")
    pl.DataFrame({"c": [0.9] * 7, "k": [False] * 7}).write_parquet(tmp_path / "a.parquet")
    out = tmp_path / "r1"
    args = ["--confidence", "c", "--correct", "k", "--out", str(out), "-q"]
    result = runner.invoke(app, ["report", "calibration", str(tmp_path / "[a].parquet"), *args])
    assert result.exit_code == 0, result.output
    document = json.loads((out / "report.json").read_text())
    assert document["data"]["rows_evaluated"] == 100
    assert document["data"]["files"] == [str(tmp_path / "[a].parquet")]


@pytest.mark.slow
def test_report_missing_data_and_existing_output(scores: Path, tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        [
            "report",
            "calibration",
            str(tmp_path / "nope.parquet"),
            "--confidence",
            "p",
            "--correct",
            "y",
            "--out",
            str(tmp_path / "r"),
        ],
    )
    assert result.exit_code == 3
    assert "no such file" in result.output
    (tmp_path / "r").mkdir()
    args = ["report", "calibration", str(scores), "--confidence", "prob", "--correct", "label"]
    result = runner.invoke(app, [*args, "--out", str(tmp_path / "r"), "--bootstrap", "0"])
    assert result.exit_code == 4
    assert "--force" in result.output
    result = runner.invoke(
        app, [*args, "--out", str(tmp_path / "r"), "--bootstrap", "0", "--force"]
    )
    assert result.exit_code == 0, result.output
