"""What every command prints is what happened: paths are never read as rich markup
(``[/x]``) or emoji codes (``file.zst:100:`` is a line number, not 💯), and an
operating-system error that names no file says what was being written."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

import pipeline.jobs.run
from pipeline.cli import app
from pipeline.cli._common import os_error_message
from pipeline.jobs.run import RunResult
from pipeline.records.schemas import SCHEMA_DIR
from tests.conftest import DATA

runner = CliRunner()

#: a directory name and its child that together read ``[/x]`` and ``:100:``
HOSTILE = ("in[", "x]:100:")


def _hostile(tmp_path: Path, stem: str) -> Path:
    path = tmp_path / f"{stem}{HOSTILE[0]}" / HOSTILE[1]
    path.mkdir(parents=True)
    return path


def _flat(text: str) -> str:
    """The output without the whitespace a table may wrap a long title at."""
    return "".join(text.split())


def _assert_printed(output: str, *texts: str) -> None:
    assert "💯" not in output
    for text in texts:
        assert _flat(text) in _flat(output), output


def _math_input(tmp_path: Path) -> Path:
    source = _hostile(tmp_path, "data") / "m.jsonl"
    shutil.copy(DATA / "math-reasoning-v1.jsonl", source)
    return source


def test_run_and_verify_print_hostile_paths_as_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = _math_input(tmp_path)
    ran = tmp_path / "ran:100:"
    result = runner.invoke(
        app,
        ["run", str(source), "--kind", "math-reasoning-v1", "--out", str(ran), "--workers", "1"],
    )
    assert result.exit_code == 0, result.output
    _assert_printed(result.stdout, f"rowgate run → {ran}", "conservation ok")
    # An OUT named with a bracket: the run's summary (the run itself is another matter:
    # polars reads its staging paths as globs) and verify, which reads it with pyarrow.
    out = _hostile(tmp_path, "out") / "run"
    ran.rename(out)
    manifest = json.loads((out / "manifest.json").read_text())
    monkeypatch.setattr(
        pipeline.jobs.run, "run", lambda config, out_dir, **_: RunResult(out_dir, manifest)
    )
    summary = runner.invoke(
        app, ["run", str(source), "--kind", "math-reasoning-v1", "--out", str(out), "--force"]
    )
    assert summary.exit_code == 0, summary.output
    _assert_printed(summary.stdout, f"rowgate run → {out}", "conservation ok")

    verified = runner.invoke(app, ["verify", str(out)])
    assert verified.exit_code == 0, verified.output
    _assert_printed(verified.stdout, f"verified {out}:")

    # line 100 changed in place: verify names it as file:100:
    lines = source.read_bytes().split(b"\n")
    lines[99] = lines[99].replace(b"a", b"b", 1)
    source.write_bytes(b"\n".join(lines))
    mismatch = runner.invoke(app, ["verify", str(out)])
    assert mismatch.exit_code == 1, mismatch.output
    _assert_printed(
        mismatch.stderr, f"mismatch: {source}:100: offset or raw SHA-256", "verification failed"
    )


# polars reads a path with a bracket as a glob: the Parquet inputs are named plainly here


def _dedupe_input(tmp_path: Path) -> Path:
    path = tmp_path / "f:100:.parquet"
    pl.DataFrame({"question": ["a", "a", "b"]}).write_parquet(path)
    return path


def _scores(tmp_path: Path) -> Path:
    rng = np.random.default_rng(3)
    path = tmp_path / "s:100:.parquet"
    p = rng.random(200).round(3)
    pl.DataFrame({"prob": p, "label": (rng.random(200) < p).astype(np.int64)}).write_parquet(path)
    return path


def _envelope(tmp_path: Path) -> Path:
    path = _hostile(tmp_path, "data") / "e.jsonl"
    path.write_bytes((DATA / "ari-replication-rubric-3.jsonl").read_bytes().split(b"\n")[0])
    return path


@pytest.mark.parametrize(
    ("command", "make", "expected"),
    [
        (["dedupe", "{in}", "--text", "question", "--out", "{out}"], _dedupe_input,
         "rowgate dedupe → {out}"),
        (["report", "calibration", "{in}", "--confidence", "prob", "--correct", "label",
          "--out", "{out}"], _scores, "wrote {out}/report.html"),
        (["rubrics", "check", "{in}"], _envelope, "{in}: "),
        (["scan", "{in}", "--kind", "math-reasoning-v1"], _math_input, "lines;"),
    ],
    ids=["dedupe", "report", "rubrics-check", "scan"],
)  # fmt: skip
def test_summaries_print_hostile_paths_as_text(
    tmp_path: Path, command: list[str], make: object, expected: str
) -> None:
    given = make(tmp_path)  # type: ignore[operator]
    out = _hostile(tmp_path, "out") / "o"
    args = [a.replace("{in}", str(given)).replace("{out}", str(out)) for a in command]
    result = runner.invoke(app, args)
    assert result.exit_code in (0, 1), result.output  # rubrics check: 1 for an invalid file
    _assert_printed(result.stdout, expected.replace("{in}", str(given)).replace("{out}", str(out)))


#: a name that, printed raw, clears the screen, sets the window title and forges a line
_FORGING = "o\x1b]0;owned\x07\x1bc\nerror: forged"


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (["rubrics", "check", "{forging}"], "{forging}: invalid"),
        (["dedupe", "{in}", "--text", "question", "--out", "{forging}"], "rowgate dedupe → {forging}"),
        (["run", "{math}", "--kind", "math-reasoning-v1", "--out", "{forging}", "--workers", "1",
          "--max-rejected-share", "0"], "({forging} was written)"),
    ],
    ids=["rubrics-check", "dedupe", "run"],
)  # fmt: skip
def test_summaries_print_control_characters_of_paths_escaped(
    tmp_path: Path, command: list[str], expected: str
) -> None:
    """`rubrics check` printed its file's path raw, `dedupe` and `run` their OUT in the
    summary's title (and `run` in its rejected-share error): a path holding an escape
    sequence or a newline acted on the terminal, or forged an output line."""
    forging = tmp_path / _FORGING
    if command[0] == "rubrics":
        forging.write_text('{"schema_version": "x"}')
    values = {
        "{forging}": str(forging),
        "{in}": str(_dedupe_input(tmp_path)),
        "{math}": str(DATA / "math-reasoning-v1.jsonl"),
    }
    args = [values.get(a, a) for a in command]
    result = runner.invoke(app, args)
    assert result.exit_code in (0, 1, 5), result.output
    assert "\x1b" not in result.output
    assert "\x07" not in result.output
    assert "\nerror: forged" not in result.output
    shown = str(tmp_path / "o\\u001b]0;owned\\u0007\\u001bc\\nerror: forged")
    assert _flat(expected.replace("{forging}", shown)) in _flat(result.output), result.output


@pytest.mark.parametrize(
    "command",
    [
        ["run", "{missing}", "--out", "{out}"],
        ["verify", "{missing}"],
        ["dedupe", "{missing}", "--text", "q", "--out", "{out}"],
        ["scan", "{missing}"],
        [
            "report",
            "calibration",
            "{missing}",
            "--confidence",
            "p",
            "--correct",
            "y",
            "--out",
            "{out}",
        ],
        ["rubrics", "check", "{missing}"],
        ["rubrics", "score", "{missing}", "{missing}"],
        ["run", "--config", "{missing}", "--out", "{out}"],
    ],
    ids=["run", "verify", "dedupe", "scan", "report", "rubrics-check", "rubrics-score", "config"],
)
def test_errors_print_hostile_paths_as_text(tmp_path: Path, command: list[str]) -> None:
    missing = _hostile(tmp_path, "data") / "absent:100:.jsonl"
    out = _hostile(tmp_path, "out") / "o"
    args = [a.replace("{missing}", str(missing)).replace("{out}", str(out)) for a in command]
    result = runner.invoke(app, args)
    assert result.exit_code in (2, 3, 4), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    _assert_printed(result.stderr, "error:", str(missing))


def test_a_full_disk_says_what_was_being_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOSPC raised by a write that names no file (a Parquet part, the manifest)."""

    def full(*args: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(pipeline.jobs.run, "write_manifest", full)
    out = tmp_path / "out:100:"
    source = _math_input(tmp_path)
    result = runner.invoke(
        app, ["run", str(source), "--kind", "math-reasoning-v1", "--out", str(out), "-q"]
    )
    assert result.exit_code == 4, result.output
    assert not result.stderr.startswith("error: :")
    _assert_printed(
        result.stderr,
        f"error: No space left on device while writing {out}'s temporary directory "
        f"(beside it, in {out.parent})",
    )
    assert not out.exists()


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (OSError(errno.ENOSPC, "No space left on device"), "No space left on device while writing X"),
        (OSError(errno.ENOENT, "No such file or directory", "/a[/x]"), "/a[/x]: No such file or directory"),
        (OSError("Error writing bytes to file"), "Error writing bytes to file while writing X"),
    ],
    ids=["errno", "filename", "arrow"],
)  # fmt: skip
def test_os_error_messages_never_start_with_an_empty_name(error: OSError, message: str) -> None:
    assert os_error_message(error, "X") == message


def test_scan_json_is_untouched(tmp_path: Path) -> None:
    """scan --json prints JSON as JSON: no markup or emoji applied to record-free data."""
    source = _math_input(tmp_path)
    result = runner.invoke(app, ["scan", str(source), "--kind", "math-reasoning-v1", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["lines"] > 0


def test_a_report_prints_a_few_slices_of_a_warning_and_counts_the_rest(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    data = tmp_path / "scores.parquet"
    p = rng.random(120).round(3)
    pl.DataFrame(
        {"prob": p, "label": (rng.random(120) < p).astype(np.int64), "task": np.arange(120) % 12}
    ).write_parquet(data)
    args = ["report", "calibration", str(data), "--confidence", "prob", "--correct", "label"]
    result = runner.invoke(app, [*args, "--by", "task", "--out", str(tmp_path / "r"), "-q"])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if "small_slice" in line]
    # 13 small slices: `all` and 12 tasks of 10 rows
    assert len(json.loads((tmp_path / "r" / "report.json").read_text())["warnings"]) == 13
    assert lines[:2] == [
        "warning: all: small_slice (n = 120 < 300: intervals are wide)",
        "warning: task=0: small_slice (n = 10 < 300: intervals are wide)",
    ]
    assert len(lines) == 6
    assert lines[-1] == "warning: small_slice in 8 more slices (report.json lists every warning)"


@pytest.mark.parametrize("command", [["run", "{in}", "--out", "{out}"], ["scan", "{in}"]])
def test_an_input_named_with_control_characters_is_shown_escaped(
    tmp_path: Path, command: list[str]
) -> None:
    """An input whose name held an escape sequence cleared the terminal and coloured what
    followed when an error named it, and a newline in it forged a message line."""
    given = tmp_path / "a\x1b[2J\x1b[31mX\nerror: forged.jsonl"
    given.write_bytes('{"task_id": "t1"}\n'.encode("utf-16"))  # refused, naming the file
    args = [a.replace("{in}", str(given)).replace("{out}", str(tmp_path / "o")) for a in command]
    result = runner.invoke(app, [*args, "--kind", "math-reasoning-v1"])
    assert result.exit_code == 3, result.output
    assert "\x1b" not in result.stderr
    assert result.stderr.count("\n") == 1
    assert "a\\u001b[2J\\u001b[31mX\\nerror: forged.jsonl: UTF-16 text" in result.stderr


def test_verify_prints_what_it_names_as_text() -> None:
    """verify prints input names the manifest, which it is checking, gives: a name holding
    an escape sequence and a newline forged a ``mismatch:`` line (found by the review)."""
    from pipeline.cli._common import terminal_text

    name = "evil\x1b[31mRED\nmismatch: forged.jsonl\n  indented"
    assert terminal_text(name) == "evil\\u001b[31mRED\\nmismatch: forged.jsonl\\n  indented"


@pytest.mark.parametrize("command", [["run", "{in}", "--out", "{out}"], ["scan", "{in}"]])
def test_a_path_cannot_forge_a_messages_indented_line(tmp_path: Path, command: list[str]) -> None:
    """An error kept every newline followed by two spaces (the indent of the problems a
    message lists), so a path holding one still forged such a line."""
    given = tmp_path / "a\n  error: forged.jsonl"
    given.write_bytes('{"task_id": "t1"}\n'.encode("utf-16"))  # refused, naming the file
    args = [a.replace("{in}", str(given)).replace("{out}", str(tmp_path / "o")) for a in command]
    result = runner.invoke(app, [*args, "--kind", "math-reasoning-v1"])
    assert result.exit_code == 3, result.output
    assert result.stderr.count("\n") == 1
    assert "a\\n  error: forged.jsonl: UTF-16 text" in result.stderr


def test_the_problems_an_error_lists_are_its_only_indented_lines(tmp_path: Path) -> None:
    """A refused schema lists its problems, each an indented line; the newline and two
    spaces in the schema directory's name are printed as an escape."""
    schemas = tmp_path / "s\n  forged: x"
    shutil.copytree(SCHEMA_DIR, schemas)
    path = schemas / "math-reasoning-v1.schema.json"
    schema = json.loads(path.read_text())
    path.write_text(json.dumps({**schema, "prefixItems": [{}], "minContains": 1}))
    config = tmp_path / "c.toml"
    config.write_text(f"[schemas]\ndirectory = {json.dumps(schemas.name)}\n")
    math = DATA / "math-reasoning-v1.jsonl"
    args = [str(math), "--kind", "math-reasoning-v1", "--config", str(config)]
    result = runner.invoke(app, ["run", *args, "--out", str(tmp_path / "o")])
    assert result.exit_code == 3, result.output
    head, *problems = result.stderr.splitlines()
    assert head == f"error: {tmp_path}/s\\n  forged: x/math-reasoning-v1.schema.json: refused:"
    assert [p.split("'")[1] for p in problems] == ["prefixItems", "minContains"]
    assert all(p.startswith("  /: keyword '") for p in problems)


def test_a_path_that_is_not_utf8_is_named_as_lineage_names_it(tmp_path: Path) -> None:
    """A byte of a path that is not UTF-8 was printed as Python holds it (``\\udce9``);
    messages now write it ``\\xe9``, as the manifest and ``_source`` name the file."""
    directory = os.fsdecode(bytes(tmp_path) + b"/caf\xe9")
    os.mkdir(directory)
    missing = os.path.join(directory, "nope.jsonl")
    result = runner.invoke(app, ["run", missing, "--kind", "math-reasoning-v1", "--out", "o"])
    assert result.exit_code == 3, result.output
    assert "caf\\xe9/nope.jsonl: no such file or directory" in result.stderr
    assert "\\udc" not in result.stderr
