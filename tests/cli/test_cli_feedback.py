"""What a run tells its user to do: where report.html is, a hint per fixable cause, an
exit code of its own when too many lines fail (``--max-rejected-share``), the line
limit as a flag, and the closest known key for a mistyped config key."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from pipeline.cli import app, run_cmd
from pipeline.cli._common import EXIT_REJECTED_SHARE, EXIT_USAGE
from pipeline.core.config import ConfigError, load_campaign
from tests.conftest import DATA

runner = CliRunner()
MATH = str(DATA / "math-reasoning-v1.jsonl")


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_an_undeclared_kind_run_names_the_report_and_hints_at_kind(tmp_path: Path) -> None:
    out = tmp_path / "o2"
    result = runner.invoke(app, ["run", MATH, "--out", str(out), "--workers", "1"])
    assert result.exit_code == 0, result.output
    text = _flat(result.stdout)
    assert f"report: {out / 'report.html'}" in text
    hints = [line for line in result.stdout.splitlines() if line.startswith("hint:")]
    assert len(hints) == 1
    assert "schema.unsupported_version (126 lines)" in hints[0]
    assert "--kind KIND (one of" in hints[0]
    assert "math-reasoning-v1" in hints[0]


def test_max_rejected_share_exits_5_after_writing_out(tmp_path: Path) -> None:
    out = tmp_path / "o"
    result = runner.invoke(
        app, ["run", MATH, "--out", str(out), "--workers", "1", "--max-rejected-share", "0.5"]
    )
    assert result.exit_code == EXIT_REJECTED_SHARE == 5, result.output
    assert (out / "manifest.json").is_file()  # OUT is written all the same
    assert "100.0% of the lines were rejected or quarantined" in _flat(result.stderr)
    assert "run.max_rejected_share 0.5" in _flat(result.stderr)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["run"]["max_rejected_share"] == 0.5


def test_a_share_under_the_threshold_exits_0(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text("[run]\nmax_rejected_share = 1.0\n")
    result = runner.invoke(
        app,
        ["run", MATH, "--out", str(tmp_path / "o"), "-c", str(config), "-q", "--workers", "1"],
    )
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("share", ["1.5", "-0.1", "nan"])
def test_max_rejected_share_is_bounded(tmp_path: Path, share: str) -> None:
    result = runner.invoke(
        app, ["run", MATH, "--out", str(tmp_path / "o"), "--max-rejected-share", share]
    )
    assert result.exit_code == EXIT_USAGE, result.output
    assert "run.max_rejected_share: must be" in result.stderr


def test_max_line_bytes_flag_sets_the_line_limit(tmp_path: Path) -> None:
    out = tmp_path / "o"
    result = runner.invoke(
        app,
        [
            "run",
            MATH,
            "--kind",
            "math-reasoning-v1",
            "--out",
            str(out),
            "--workers",
            "1",
            "--max-line-bytes",
            "64",
        ],
    )
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["limits"]["max_line_bytes"] == 64
    assert manifest["counts"]["by_reason"]["rejected"]["line.too_large"] > 100
    assert "hint: line.too_large" in result.stdout
    assert "--max-line-bytes" in result.stdout


def test_scan_takes_max_line_bytes(tmp_path: Path) -> None:
    wide = runner.invoke(app, ["scan", MATH, "--kind", "math-reasoning-v1", "--json"])
    narrow = runner.invoke(
        app, ["scan", MATH, "--kind", "math-reasoning-v1", "--json", "--max-line-bytes", "64"]
    )
    assert wide.exit_code == narrow.exit_code == 0, narrow.output
    assert json.loads(narrow.stdout) != json.loads(wide.stdout)


def test_an_unknown_config_key_suggests_the_closest(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text("[limits]\nmax_line_byte = 10\n")
    with pytest.raises(ConfigError, match="did you mean 'max_line_bytes'"):
        load_campaign(config)
    config.write_text("[limits]\nzzz = 10\n")
    with pytest.raises(ConfigError) as caught:
        load_campaign(config)
    assert str(caught.value) == "limits.zzz: unknown key"


def test_each_phase_shows_its_own_progress() -> None:
    """The global phase shows the step it is in (not the gate's bar frozen at 100 %), the
    write phase its shards and rows (not the gate's numbers again)."""
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=120, color_system=None)
    with run_cmd._progress(quiet=False, console=console) as observer:
        observer.on_start(1000)
        observer.on_phase("gate")
        observer.on_progress(1000, 10)
        observer.on_phase("global")
        observer.on_stage("pairwise-v2: read")
        observer.on_stage("pairwise-v2: dedupe")
        observer.on_phase("write")
        observer.on_write_start(3)
        for rows in (4, 3, 3):
            observer.on_written(rows)
    shown = screen.getvalue()
    assert "pairwise-v2: dedupe" in shown
    assert "3/3" in shown
    assert "10 rows" in shown
