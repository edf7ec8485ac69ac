"""``rowgate rubrics score`` through typer's runner."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner, Result

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


_GRADES = '{"submission": "s1", "leaf_id": "a1", "score": 1}\n'


def _score(envelope: Path, grades: Path, out: Path, *flags: str) -> Result:
    return runner.invoke(
        app, ["rubrics", "score", str(envelope), str(grades), "--out", str(out), *flags]
    )


def test_score_never_writes_over_its_inputs(tmp_path: Path) -> None:
    """``--out`` equal to the envelope or the grades file wrote the node scores over it
    (exit 0: the user's grades were gone). It is refused, exit 2, even with --force, and
    so is the same file under another name (a hard or symbolic link)."""
    envelope, grades = _files(tmp_path, _GRADES)
    envelope = envelope.rename(tmp_path / "envelope.jsonl")  # one JSON document: a JSONL name
    again = tmp_path / "again.jsonl"
    os.link(grades, again)
    (tmp_path / "link.parquet").symlink_to(envelope)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    for out in (grades, envelope, again, tmp_path / "link.parquet"):
        for flags in ((), ("--force",)):
            result = _score(envelope, grades, out, *flags)
            assert result.exit_code == 2, result.output
            assert "which this command reads" in result.stderr
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_score_replaces_an_existing_file_only_with_force(tmp_path: Path) -> None:
    """An existing --out was overwritten without a word; now it takes --force (exit 4
    without it), and --force never replaces a directory or a symbolic link (exit 2).
    The file is written beside --out and renamed over it: nothing else is left."""
    envelope, grades = _files(tmp_path, _GRADES)
    out = tmp_path / "nodes.jsonl"
    out.write_text("mine\n")
    result = _score(envelope, grades, out)
    assert result.exit_code == 4, result.output
    assert "pass --force" in result.stderr
    assert out.read_text() == "mine\n"
    assert _score(envelope, grades, out, "--force").exit_code == 0
    assert pl.read_ndjson(out).height == 6
    (tmp_path / "d.parquet").mkdir()
    (tmp_path / "l.parquet").symlink_to(out)
    for name, message in (("d.parquet", "not a regular file"), ("l.parquet", "symbolic link")):
        result = _score(envelope, grades, tmp_path / name, "--force")
        assert result.exit_code == 2, result.output
        assert message in result.stderr
    assert (tmp_path / "l.parquet").is_symlink()
    names = ["d.parquet", "envelope.json", "grades.jsonl", "l.parquet", "nodes.jsonl"]
    assert sorted(p.name for p in tmp_path.iterdir()) == names


def test_a_failed_score_leaves_the_old_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write that fails halfway (a full disk) leaves the previous --out whole and no
    temporary file; so does an envelope that cannot be read."""
    envelope, grades = _files(tmp_path, _GRADES)
    out = tmp_path / "nodes.parquet"
    out.write_bytes(b"previous")

    def half(self: pl.DataFrame, file: Path) -> None:
        Path(file).write_bytes(b"PAR1 half")
        raise OSError(errno.ENOSPC, "No space left on device", str(file))

    monkeypatch.setattr(pl.DataFrame, "write_parquet", half)
    result = _score(envelope, grades, out, "--force")
    assert result.exit_code == 4, result.output
    assert "No space left on device" in result.stderr
    result = _score(tmp_path / "absent.json", grades, out, "--force")
    assert result.exit_code == 3, result.output
    assert out.read_bytes() == b"previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "envelope.json",
        "grades.jsonl",
        "nodes.parquet",
    ]


def test_score_shows_ids_with_control_characters_escaped(tmp_path: Path) -> None:
    """Submission ids were printed raw: an escape sequence cleared the screen or set the
    window title, a newline added rows to the table."""
    envelope, grades = _files(
        tmp_path,
        '{"submission": "s\\u001b]0;pwned\\u0007", "leaf_id": "a1", "score": 1}\n'
        '{"submission": "x\\nfake  1.0000", "leaf_id": "b", "score": 1}\n',
    )
    result = runner.invoke(app, ["rubrics", "score", str(envelope), str(grades)])
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output
    assert "\x07" not in result.output
    assert '"s\\u001b]0;pwned\\u0007"' in result.stdout
    assert '"x\\nfake  1.0000"' in result.stdout
