"""The CLI, through typer's runner: commands, summaries, documented exit codes."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.records.schemas import SCHEMA_DIR, SchemaRegistry
from tests.conftest import DATA

runner = CliRunner()


def test_schemas_list_prints_ids_digests_titles() -> None:
    result = runner.invoke(app, ["schemas", "list"])
    assert result.exit_code == 0
    registry = SchemaRegistry()
    for schema_id in registry.ids():
        entry = registry.get(schema_id)
        assert f"{entry.id}" in result.stdout
        assert entry.sha256 in result.stdout
        assert entry.title in result.stdout


@pytest.mark.slow
def test_run_and_verify_the_samples(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = runner.invoke(
        app, ["run", "--config", str(DATA / "campaign.toml"), "--out", str(out), "--workers", "1"]
    )
    assert result.exit_code == 0, result.output
    assert "accepted" in result.stdout
    assert "conservation ok" in result.stdout
    assert "json.duplicate_key" in result.stdout
    assert (out / "manifest.json").is_file()
    verified = runner.invoke(app, ["verify", str(out)])
    assert verified.exit_code == 0, verified.output
    assert "verified" in verified.stdout


def test_verify_mismatch_exits_1(tmp_path: Path) -> None:
    out = tmp_path / "out"
    runner.invoke(
        app,
        [
            "run",
            str(DATA / "math-reasoning-v1.jsonl"),
            "--kind",
            "math-reasoning-v1",
            "--out",
            str(out),
            "-q",
        ],
    )
    part = next(out.rglob("accepted/*/*.parquet"))
    part.write_bytes(part.read_bytes()[:-1] + b"X")
    result = runner.invoke(app, ["verify", str(out)])
    assert result.exit_code == 1
    assert "mismatch" in result.output


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["run", "nope.jsonl", "--out", "{tmp}/o"], 3, "no such file"),
        (
            ["run", str(DATA / "math-reasoning-v1.jsonl"), "--kind", "nope", "--out", "{tmp}/o"],
            3,
            "unknown record kind",
        ),
        (["run", "--out", "{tmp}/o"], 2, "no inputs"),
        (["run", "--config", "{tmp}/missing.toml", "--out", "{tmp}/o"], 2, "cannot read config"),
        (
            ["run", str(DATA / "math-reasoning-v1.jsonl"), "--workers", "0", "--out", "{tmp}/o"],
            2,
            "engine.workers: must be in [1, 256] (got 0)",
        ),
        (["verify", "{tmp}/nothing"], 3, "cannot read"),
    ],
)
def test_errors_have_documented_exit_codes(
    tmp_path: Path, args: list[str], code: int, message: str
) -> None:
    result = runner.invoke(app, [a.replace("{tmp}", str(tmp_path)) for a in args])
    assert result.exit_code == code, result.output
    assert message in result.output


def test_config_paths_stay_with_the_config_when_inputs_come_from_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inputs on the command line are the caller's (working directory); the reference
    tables, schemas and rubrics the config names stay relative to the config file."""
    config = tmp_path / "campaign" / "c.toml"
    config.parent.mkdir()
    for name in ("documents.jsonl", "grounded-qa-v1.jsonl"):
        (config.parent / name).write_bytes((DATA / name).read_bytes())
    shutil.copytree(SCHEMA_DIR, config.parent / "my-schemas")
    config.write_text(
        '[schemas]\ndirectory = "my-schemas"\n[references.documents]\npath = "documents.jsonl"\n'
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "in.jsonl").write_bytes((DATA / "grounded-qa-v1.jsonl").read_bytes())
    monkeypatch.chdir(elsewhere)
    result = runner.invoke(
        app,
        [
            "run",
            "in.jsonl",
            "--kind",
            "grounded-qa-v1",
            "--config",
            str(config),
            "--out",
            "out",
            "-q",
        ],
    )
    assert result.exit_code == 0, result.output
    manifest = json.loads((elsewhere / "out" / "manifest.json").read_text())
    assert manifest["inputs"][0]["resolved"] == str(elsewhere / "in.jsonl")
    assert manifest["schemas"]["grounded-qa-v1"]["path"].startswith(
        str(config.parent / "my-schemas")
    )


def test_existing_output_is_exit_4(tmp_path: Path) -> None:
    (tmp_path / "o").mkdir()
    result = runner.invoke(
        app, ["run", str(DATA / "math-reasoning-v1.jsonl"), "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 4
    assert "--force" in result.output


def test_rubrics_check_verdicts(tmp_path: Path) -> None:
    import json
    import random

    from pipeline.testing.synthetic import ari_rubric_3, ari_rubric_v2

    for name, envelope in (
        ("seed", ari_rubric_3(random.Random(1), 1)),
        ("v2", ari_rubric_v2(random.Random(2), 2)),
    ):
        good = tmp_path / f"{name}.json"
        good.write_text(json.dumps(envelope, indent=2, ensure_ascii=False))
        result = runner.invoke(app, ["rubrics", "check", str(good)])
        assert result.exit_code == 0, result.output
        assert "valid" in result.stdout
        envelope["rubric"]["weight"] += 1  # digest no longer matches
        bad = tmp_path / f"{name}-bad.json"
        bad.write_text(json.dumps(envelope, indent=2))
        result = runner.invoke(app, ["rubrics", "check", str(bad)])
        assert result.exit_code == 1
        assert "rubric_sha256" in result.output
    other = runner.invoke(app, ["rubrics", "check", str(DATA / "math-reasoning-v1.jsonl")])
    assert other.exit_code != 0


def test_console_script_module_imports_nothing_heavy() -> None:
    """`spawn` re-imports the console script's module in every worker process: it must
    not pull in the command line (typer, polars, the commands) there."""
    from importlib.metadata import entry_points

    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "rowgate"]
    assert script.value == "pipeline.entry:main"
    assert _heavy_modules_after("import pipeline.entry") == []


def test_import_pipeline_imports_nothing_heavy() -> None:
    """Worker processes import ``pipeline`` itself: its public names (``pipeline.__all__``)
    load on first use, never at import."""
    assert _heavy_modules_after("import pipeline") == []


#: What a command loads only when it runs (~1 s of imports that `rowgate --help` paid)
_COMMAND_LIBRARIES = (
    "polars",
    "pyarrow",
    "numpy",
    "fastjsonschema",
    "pipeline.jobs.run",
    "pipeline.jobs.dedupe",
    "pipeline.output.verify",
    "pipeline.records.schemas",
    "pipeline.reports.run_report",
)


def test_the_command_line_loads_no_command_library_before_a_command_runs() -> None:
    """Every command module imported its library at the top: `import pipeline.cli` took
    ~1.2 s (polars, pyarrow, numpy and every job) before typer parsed an argument, and a
    command's --help paid it too. The report presets name their expressions without
    building them, so listing them in the help needs no polars."""
    help_of_report = (
        "import contextlib, io, pipeline.cli\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    pipeline.cli.app(['report', 'calibration', '--help'])"
    )
    assert _heavy_modules_after("import pipeline.cli", _COMMAND_LIBRARIES) == []
    assert _heavy_modules_after(help_of_report, _COMMAND_LIBRARIES) == []


def _heavy_modules_after(
    statement: str,
    heavy: tuple[str, ...] = (
        "typer",
        "polars",
        "pyarrow",
        "matplotlib",
        "numba",
        "pipeline.cli",
        "pipeline._api",
    ),
) -> list[str]:
    """The ``heavy`` modules a fresh interpreter holds after running ``statement``."""
    code = f"import sys\n{statement}\nprint([m for m in {heavy!r} if m in sys.modules])"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return list(ast.literal_eval(done.stdout.strip()))


def _commands(group: typer.Typer, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [(*prefix, c.name or c.callback.__name__) for c in group.registered_commands]  # type: ignore[union-attr]
    for sub in group.registered_groups:
        assert sub.typer_instance is not None
        assert sub.name is not None
        found += _commands(sub.typer_instance, (*prefix, sub.name))
    return found


def test_help_of_every_command_shows_no_type_on_flags() -> None:
    """A flag takes no value: help never shows one (typer 0.29 printed ``--force <bool>``),
    and no help text loses words to markup (``max:<column>`` printed as ``max:``)."""
    commands = _commands(app)
    assert ("run",) in commands
    assert ("report", "calibration") in commands
    for command in commands:
        shown = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
        assert shown.exit_code == 0, command
        assert "<bool>" not in shown.output, command
    dedupe = runner.invoke(app, ["dedupe", "--help"], env={"COLUMNS": "200"}).output
    assert "max:COLUMN" in dedupe
    assert "default: 0.8" in dedupe


def test_a_huge_integer_is_rejected_by_run_scan_and_report(tmp_path: Path) -> None:
    """An integer of 4301+ digits crashed run, scan and report with a traceback (exit 1):
    Python's int-conversion limit. Now it is json.number_range like any out-of-range
    integer: a rejected row in run and scan, a named input error in report."""
    rows = (DATA / "math-reasoning-v1.jsonl").read_bytes().splitlines()[:3]
    huge = b'{"problem_id": ' + b"7" * 5000 + b"}"
    source = tmp_path / "m.jsonl"
    source.write_bytes(b"\n".join([*rows, huge]) + b"\n")
    out = tmp_path / "out"
    ran = runner.invoke(
        app, ["run", str(source), "--kind", "math-reasoning-v1", "--out", str(out), "-q"]
    )
    assert ran.exit_code == 0, ran.output
    counts = json.loads((out / "manifest.json").read_text())["counts"]
    assert counts["by_reason"]["rejected"]["json.number_range"] == 1
    scanned = runner.invoke(app, ["scan", str(source), "--kind", "math-reasoning-v1", "--json"])
    assert scanned.exit_code == 0, scanned.output
    scores = tmp_path / "scores.jsonl"
    scores.write_bytes(b'{"p": 0.5, "y": 1}\n{"p": ' + b"1" * 5000 + b', "y": 0}\n')
    reported = runner.invoke(
        app,
        ["report", "calibration", str(scores), "--confidence", "p", "--correct", "y = 1",
         "--out", str(tmp_path / "r")],
    )  # fmt: skip
    assert reported.exit_code == 3, reported.output
    assert f"{scores}:2: json.number_range" in reported.output
