"""Output safety (DESIGN §3.14): OUT never holds or lies inside what a command reads,
``--force`` replaces only rowgate's own output, one command at a time holds OUT, and a
kill at any step of a replace leaves the old or the new OUT, never neither."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.core.config import CampaignConfig, InputSpec, load_campaign
from pipeline.jobs.run import RunObserver, run
from pipeline.output import outdir
from pipeline.output.manifest import load_manifest
from pipeline.output.outdir import (
    OutputBusyError,
    OutputExistsError,
    UnsafeOutputError,
    atomic_directory,
    claim_output,
    written_by_rowgate,
)
from pipeline.output.verify import verify_run
from tests.conftest import DATA, ROOT

MATH = DATA / "math-reasoning-v1.jsonl"
runner = CliRunner()


def _config(*paths: Path) -> CampaignConfig:
    specs = tuple(InputSpec(str(p), "math-reasoning-v1") for p in paths)
    return CampaignConfig(inputs=specs).override(**{"engine.workers": 1})


def _snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _report(data: Path) -> list[str]:
    """A calibration report's arguments (a constant confidence: only OUT matters here)."""
    return [
        "report",
        "calibration",
        str(data),
        "--confidence",
        "0.5",
        "--correct",
        "true",
        "--bootstrap",
        "0",
    ]


#: a run's manifest in outline: its format and the file it lists
_MANIFEST = json.dumps({"format": "rowgate-run/1", "artifacts": [{"path": "data.txt"}]})


def _rowgate_out(path: Path, content: str) -> Path:
    """A directory as rowgate writes it (its proof of ownership) holding ``content``."""
    path.mkdir()
    (path / "manifest.json").write_text(_MANIFEST)
    (path / "data.txt").write_text(content)
    return path


# --- 1. OUT that is, contains or lies inside what the command reads -------------------


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """The issue's reproduction: an input and a user's note in one directory."""
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "m.jsonl").write_bytes(MATH.read_bytes())
    (folder / "notes.txt").write_text("x\n")
    return folder


def test_force_never_deletes_the_inputs_directory(folder: Path) -> None:
    """Issue 15 item 1: ``run d/m.jsonl --out d --force`` deleted d/m.jsonl and d/notes.txt
    and exited 0; it is refused before any work (exit 2) and d is untouched."""
    before = _snapshot(folder)
    result = runner.invoke(
        app,
        [
            "run",
            str(folder / "m.jsonl"),
            "--kind",
            "math-reasoning-v1",
            "--out",
            str(folder),
            "--force",
            "--quiet",
        ],
    )
    assert result.exit_code == 2, result.output
    assert "which this command reads" in result.output
    assert _snapshot(folder) == before
    assert sorted(p.name for p in folder.parent.iterdir()) == ["d"]  # no sibling, no lock


@pytest.mark.parametrize(
    ("out", "relation"),
    [
        ("PARENT", "contains"),  # the parent of the input's directory, by its name
        (".", "names a directory by"),  # the same, as ".": refused by how it is named
        ("d", "is"),  # the input directory itself
        ("d/out", "lies inside"),  # inside an input directory
        ("d/m.jsonl", "is"),  # the input file
    ],
)
def test_out_overlapping_an_input_is_refused(
    folder: Path, out: str, relation: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(folder.parent)
    config = CampaignConfig(inputs=(InputSpec("d", "math-reasoning-v1"),))
    before = _snapshot(folder.parent)
    with pytest.raises(UnsafeOutputError, match=relation):
        run(config, folder.parent if out == "PARENT" else Path(out), force=True)
    assert _snapshot(folder.parent) == before


def test_out_holding_the_config_or_what_it_names_is_refused(tmp_path: Path) -> None:
    """OUT may not be or contain the config file's directory, nor hold a file the config
    names (here a reference table outside the inputs); OUT may lie inside the config's
    directory when it holds none of them."""
    campaign = tmp_path / "campaign"
    (campaign / "tables").mkdir(parents=True)
    (campaign / "tables" / "documents.jsonl").write_text("")
    source = tmp_path / "inputs"
    source.mkdir()
    (source / "m.jsonl").write_bytes(MATH.read_bytes())
    config_file = campaign / "campaign.toml"
    config_file.write_text(
        textwrap.dedent(f"""\
        [[inputs]]
        path = "{source / "m.jsonl"}"
        kind = "math-reasoning-v1"
        [references.documents]
        path = "tables/documents.jsonl"
        """)
    )
    config = load_campaign(config_file)
    for out in (campaign, tmp_path, campaign / "tables"):
        with pytest.raises(UnsafeOutputError, match="which this command reads"):
            run(config, out, force=True)
    assert config_file.exists()
    assert (campaign / "tables" / "documents.jsonl").exists()
    assert run(config.override(**{"engine.workers": 1}), campaign / "out").manifest


def test_the_lineage_key_file_is_never_touched(tmp_path: Path) -> None:
    """The lineage key file was missing from the paths a run protects: in a directory
    named like a dead command's leftover beside OUT it was deleted with it, and at OUT's
    lock path, holding 32 digits, it was taken for a lock, overwritten and deleted.
    Without it no keyed run made with it can be verified."""
    (tmp_path / "m.jsonl").write_bytes(MATH.read_bytes())
    leftover = tmp_path / ".out.rowgate-tmp-4000000"  # a pid above pid_max: never alive
    leftover.mkdir()
    key = "0123456789abcdef" * 4
    places = {
        "out": leftover / "lineage.key",
        "out2": tmp_path / ".out2.rowgate-lock",
    }
    for out, key_file in places.items():
        key_file.write_text(key)
        config_file = tmp_path / f"{out}.toml"
        config_file.write_text(
            textwrap.dedent(f"""\
            [[inputs]]
            path = "m.jsonl"
            kind = "math-reasoning-v1"
            [lineage]
            key_file = "{key_file}"
            """)
        )
        config = load_campaign(config_file).override(**{"engine.workers": 1})
        if out == "out":  # the leftover holding it is left alone; the run goes on
            assert run(config, tmp_path / out).manifest["lineage"]["mode"] == "hmac-sha256"
        else:
            with pytest.raises(UnsafeOutputError, match=r"lock file .* which this command reads"):
                run(config, tmp_path / out)
            assert not (tmp_path / out).exists()
        assert key_file.read_text() == key


def test_dedupe_and_report_refuse_their_input_as_out(tmp_path: Path) -> None:
    run(_config(MATH), tmp_path / "r")
    accepted = tmp_path / "r" / "accepted"
    before = _snapshot(tmp_path / "r")
    commands = [
        ["dedupe", str(accepted), "--out", str(accepted), "--force"],
        [*_report(tmp_path / "r"), "--out", str(tmp_path / "r" / "cal"), "--force"],
    ]
    for args in commands:
        result = runner.invoke(app, args)
        assert result.exit_code == 2, result.output
        assert "which this command reads" in result.output
    assert _snapshot(tmp_path / "r") == before


def test_force_never_replaces_a_table_a_reports_directory_reaches_through_a_link(
    tmp_path: Path,
) -> None:
    """A report's DATA directory holding a link to a table of the old OUT: ``--force``
    replaced that table, the rows being read (only the directory was protected; found
    by the data-safety red team). Every file the directory holds is protected now."""
    run(_config(MATH), tmp_path / "r")
    old = tmp_path / "rep"
    assert runner.invoke(app, [*_report(tmp_path / "r"), "--out", str(old)]).exit_code == 0
    table = sorted(old.glob("*.parquet"))[0]
    before = table.read_bytes()
    data = tmp_path / "ds"
    data.mkdir()
    (data / table.name).symlink_to(table)
    result = runner.invoke(app, [*_report(data), "--out", str(old), "--force"])
    assert result.exit_code == 2, result.output
    assert "which this command reads" in result.output
    assert table.read_bytes() == before


# --- 9. --force replaces only a directory rowgate wrote -------------------------------


def test_force_refuses_a_file_or_a_link_and_leaves_no_trace(tmp_path: Path) -> None:
    """Issue 15 item 9: a file or a symlink as OUT with --force exited 4 *and* published
    the output, leaving the original as ``.NAME.rowgate-tmp-PID-old``; it is refused
    before any work (exit 2), the original untouched, nothing beside it."""
    (tmp_path / "f").write_text("mine\n")
    target = _rowgate_out(tmp_path / "target", "old")
    (tmp_path / "link").symlink_to(target)
    before = _snapshot(tmp_path)
    for name, message in (("f", "is a file"), ("link", "symbolic link")):
        result = runner.invoke(
            app,
            [
                "run",
                str(MATH),
                "--kind",
                "math-reasoning-v1",
                "--out",
                str(tmp_path / name),
                "--force",
                "--quiet",
            ],
        )
        assert result.exit_code == 2, result.output
        assert message in result.output
    assert _snapshot(tmp_path) == before
    assert (tmp_path / "f").is_file()
    assert (tmp_path / "link").is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f", "link", "target"]


def test_force_refuses_a_directory_rowgate_did_not_write(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "manifest.json").write_text('{"format": "someone-else/1"}')
    for out in (mine, fake):
        with (
            pytest.raises(UnsafeOutputError, match="rowgate did not write"),
            atomic_directory(out, force=True) as tmp,
        ):
            (tmp / "x").write_text("new")
    assert (mine / "thesis.tex").read_text() == "years of work"
    with pytest.raises(OutputExistsError, match="--force"), atomic_directory(mine, force=False):
        pass
    empty = tmp_path / "empty"
    empty.mkdir()
    with atomic_directory(empty, force=True) as tmp:  # nothing to lose
        (tmp / "x").write_text("new")
    assert (empty / "x").read_text() == "new"


def test_force_never_deletes_what_a_user_put_in_a_rowgate_out(tmp_path: Path) -> None:
    """--force replaced the whole of a rowgate OUT, so a file or a directory a user had
    put in it (notes, a report written into OUT/report) was deleted with it. Now such an
    OUT is refused (exit 2), every entry rowgate did not write is named, nothing moves;
    with the entries moved out, the same command replaces it."""
    out = tmp_path / "r"
    run(_config(MATH), out)
    before = _snapshot(out)
    (out / "notes.md").write_text("my notes")
    (out / "accepted" / "mine.parquet").write_bytes(b"not rowgate's")
    (out / "calibration").mkdir()
    (out / "calibration" / "report.json").write_text("{}")
    args = ["run", str(MATH), "--kind", "math-reasoning-v1", "--out", str(out), "--force", "-q"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    message = " ".join(result.output.split())
    assert "holds 3 entries rowgate did not write" in message
    for entry in ("accepted/mine.parquet", "calibration/", "notes.md"):
        assert entry in message
    assert (out / "notes.md").read_text() == "my notes"
    assert (out / "calibration" / "report.json").read_text() == "{}"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".r.")]
    for name in ("notes.md", "accepted/mine.parquet", "calibration/report.json"):
        (out / name).unlink()
    (out / "calibration").rmdir()
    assert _snapshot(out) == before
    assert runner.invoke(app, args).exit_code == 0
    assert outdir.foreign_entries(out) == []


def test_an_out_named_by_a_dot_or_under_a_file_is_refused_saying_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--out . --force`` inside an old output was refused naming rowgate's own lock
    (``..rowgate-lock``, made inside OUT) as an entry the user put there; ``--out
    afile/sub`` said "afile: File exists". Each is refused (exit 2) saying what is wrong,
    nothing written."""
    data = tmp_path / "in.parquet"
    pl.DataFrame({"q": ["a", "a", "b"]}).write_parquet(data)
    old = tmp_path / "dA"
    assert (
        runner.invoke(app, ["dedupe", str(data), "--text", "q", "--out", str(old)]).exit_code == 0
    )
    before = _snapshot(tmp_path)
    monkeypatch.chdir(old)
    for given, named in ((".", "'.'"), ("..", "'..'")):
        args = ["dedupe", str(data), "--text", "q", "--out", given, "--force"]
        result = runner.invoke(app, args)
        assert result.exit_code == 2, result.output
        message = " ".join(result.output.split())
        assert f"--out {given} names a directory by {named}, not by its name" in message
        assert "rowgate-lock" not in message
        assert _snapshot(tmp_path) == before
        assert sorted(p.name for p in tmp_path.iterdir()) == ["dA", "in.parquet"]
    # run made OUT's path absolute first, so "." went through as the directory's name
    result = runner.invoke(app, ["run", str(DATA / "math-reasoning-v1.jsonl"), "--out", "."])
    assert result.exit_code == 2, result.output
    assert "--out . names a directory by '.', not by its name" in " ".join(result.output.split())
    assert _snapshot(tmp_path) == before
    (tmp_path / "afile").write_text("mine")
    for given in ("afile/sub", "afile/x/sub"):
        args = ["dedupe", str(data), "--text", "q", "--out", str(tmp_path / given)]
        result = runner.invoke(app, args)
        assert result.exit_code == 2, result.output
        message = " ".join(result.output.split())
        assert f"{tmp_path / 'afile'} is not a directory, so OUT cannot be made in it" in message
        assert "File exists" not in message
    assert (tmp_path / "afile").read_text() == "mine"


def test_every_command_can_replace_its_own_output(tmp_path: Path) -> None:
    """run, dedupe and report outputs each prove they are rowgate's (manifest.json,
    summary.json, report.json name a rowgate format) and hold only what they wrote:
    --force replaces them."""
    run(_config(MATH), tmp_path / "r")
    run(_config(MATH), tmp_path / "r", force=True)
    assert verify_run(tmp_path / "r").ok
    commands = {
        "d": ["dedupe", str(tmp_path / "r" / "accepted")],
        "c": _report(tmp_path / "r"),
    }
    for name, args in commands.items():
        for _ in range(2):
            result = runner.invoke(app, [*args, "--out", str(tmp_path / name), "--force"])
            assert result.exit_code == 0, result.output
        assert written_by_rowgate(tmp_path / name)
        assert outdir.foreign_entries(tmp_path / name) == []
    assert json.loads((tmp_path / "d" / "summary.json").read_text())["format"] == (
        "rowgate-dedupe/1"
    )


# --- 4, 5. names that polars or UTF-8 cannot take as they are -------------------------


def test_out_name_with_glob_characters(tmp_path: Path) -> None:
    """Issue 15 item 4: ``--out 'o[1]'`` crashed after the whole gate (polars read the
    staging path as a glob); every staged and output path is now read as a file."""
    out = tmp_path / "o[1]*?"
    result = run(_config(MATH), out)
    assert result.manifest["conservation"]["ok"]
    assert verify_run(out).ok
    assert (out / "report.html").is_file()


def test_non_utf8_input_name(tmp_path: Path) -> None:
    """Issue 15 item 5: an input named with a byte that is not UTF-8 crashed the write
    phase (UnicodeEncodeError). ``_source`` and the manifest write the byte as ``\\xff``;
    the manifest keeps the exact resolved path in hex, and verify finds the input."""
    name = os.fsdecode(b"bad\xff.jsonl")
    source = tmp_path / name
    source.write_bytes(MATH.read_bytes())
    out = tmp_path / "out"
    run(_config(source), out)
    manifest = load_manifest(out)
    (entry,) = manifest["inputs"]
    assert entry["path"].endswith("bad\\xff.jsonl")
    assert os.fsdecode(bytes.fromhex(entry["resolved_hex"])) == str(source.resolve())
    files = [out / f["path"] for f in manifest["outputs"]]
    sources = pl.concat([pl.read_parquet(f, columns=["_source"]) for f in files]).unique()
    assert sources["_source"].to_list() == [entry["path"]]
    assert verify_run(out).ok


def test_non_utf8_out_name_is_a_usage_error(tmp_path: Path) -> None:
    """An OUT (or a parent of it) named with a byte that is not UTF-8 crashed after the
    whole gate (pyarrow and polars write by UTF-8 paths only): an internal error, exit 4.
    It is now refused before any work (exit 2), naming the byte as ``\\xff``."""
    parquet = tmp_path / "f.parquet"
    pl.DataFrame({"question": ["a b c"]}).write_parquet(parquet)
    run_out = tmp_path / os.fsdecode(b"o\xff")
    dedupe_out = tmp_path / os.fsdecode(b"p\xfe") / "out"
    commands = [
        ["run", str(MATH), "--kind", "math-reasoning-v1", "--workers", "1", "--out", str(run_out)],
        ["dedupe", str(parquet), "--text", "question", "--out", str(dedupe_out)],
    ]
    for args in commands:
        result = runner.invoke(app, args)
        assert result.exit_code == 2, result.output
        assert "is not valid UTF-8" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.parquet"]


# --- 10. one command at a time on one OUT ---------------------------------------------


def test_a_second_run_on_the_same_out_fails_at_once(tmp_path: Path) -> None:
    """Issue 15 item 10: two runs to one OUT both exited 0 and one output silently
    replaced the other. A run started while another holds OUT fails before any work."""
    out = tmp_path / "out"
    raised: list[BaseException] = []

    def second(phase: str) -> None:
        if phase == "gate":
            try:
                run(_config(MATH), out)
            except OutputBusyError as exc:
                raised.append(exc)

    run(_config(MATH), out, observer=RunObserver(on_phase=second))
    assert len(raised) == 1
    assert "being written by another rowgate command" in str(raised[0])
    assert verify_run(out).ok
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # lock file removed


def test_the_lock_holds_across_processes(tmp_path: Path) -> None:
    out = tmp_path / "out"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; from pipeline.output.outdir import claim_output\n"
            "with claim_output(Path(sys.argv[1]), force=False):\n"
            "    print('held', flush=True); sys.stdin.read()",
            str(out),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == b"held\n"
        result = runner.invoke(
            app, ["run", str(MATH), "--kind", "math-reasoning-v1", "--out", str(out), "-q"]
        )
        assert result.exit_code == 4, result.output
        assert f"process {holder.pid}" in result.output
        assert not out.exists()
    finally:
        holder.communicate(b"")
    with claim_output(out, force=False):  # released with its holder
        pass


# --- 11. a kill at every step of a replace --------------------------------------------

_KILLED_PUBLISH = """
import os, signal, sys
from pathlib import Path
from pipeline.output import outdir
step, fallback, out = sys.argv[1], sys.argv[2] == "fallback", Path(sys.argv[3])
if fallback:
    outdir._renameat2 = None
def kill_at(name):
    if name == step:
        os.kill(os.getpid(), signal.SIGKILL)
outdir._step = kill_at
with outdir.atomic_directory(out, force=True) as tmp:
    (tmp / "manifest.json").write_text(
        '{"format": "rowgate-run/1", "artifacts": [{"path": "data.txt"}]}'
    )
    (tmp / "data.txt").write_text("new")
    kill_at("writing")
"""


def _killed_publish(out: Path, step: str, mode: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _KILLED_PUBLISH, step, mode, str(out)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert proc.returncode == -signal.SIGKILL


@pytest.mark.parametrize(
    ("mode", "step", "survivor"),
    [
        ("exchange", "writing", "old"),
        ("exchange", "complete", "old"),
        ("exchange", "exchanged", "new"),
        ("fallback", "writing", "old"),
        ("fallback", "complete", "old"),
        ("fallback", "moved-aside", "old"),  # neither at OUT: the next command restores
        ("fallback", "published", "new"),
    ],
)
def test_a_kill_at_any_step_of_a_replace_loses_nothing(
    tmp_path: Path, mode: str, step: str, survivor: str
) -> None:
    """Issue 15 item 11: a kill between the two renames of --force lost both the old and
    the new OUT (the next run deleted both). Now the next command that claims OUT finds
    the old one or the new one, whole, and no leftover."""
    if mode == "exchange" and outdir._renameat2 is None:
        pytest.skip("renameat2 is not available here: the fallback is tested instead")
    out = _rowgate_out(tmp_path / "out", "old")
    _killed_publish(out, step, mode)
    with claim_output(out, force=True):
        assert (out / "data.txt").read_text() == survivor
        assert sorted(p.name for p in tmp_path.iterdir()) == [".out.rowgate-lock", "out"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def _reaped() -> int:
    """The pid of a process that has exited (and been waited for)."""
    proc = subprocess.Popen([sys.executable, "-c", ""])
    proc.wait()
    return proc.pid


def test_the_old_out_moved_aside_by_a_dead_command_is_restored(tmp_path: Path) -> None:
    """What a kill between the two renames of --force leaves (any version): the old OUT
    under ``.out.rowgate-tmp-PID-old``, the complete new one under ``...-PID``, no OUT.
    The next command used to delete both; it now puts the old OUT back."""
    pid = _reaped()
    old = _rowgate_out(tmp_path / f".out.rowgate-tmp-{pid}-old", "old")
    _rowgate_out(tmp_path / f".out.rowgate-tmp-{pid}", "new")
    out = tmp_path / "out"
    with pytest.raises(OutputExistsError), atomic_directory(out, force=False) as tmp:
        (tmp / "data.txt").write_text("third")
    assert (out / "data.txt").read_text() == "old"
    assert not old.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_an_error_between_the_renames_puts_the_old_out_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exception (Ctrl-C, a failed rename) after the fallback moved the old OUT aside:
    the command fails and the old OUT is back in place at once."""
    out = _rowgate_out(tmp_path / "out", "old")

    def interrupt(name: str) -> None:
        if name == "moved-aside":
            raise KeyboardInterrupt

    monkeypatch.setattr(outdir, "_renameat2", None)
    monkeypatch.setattr(outdir, "_step", interrupt)
    with pytest.raises(KeyboardInterrupt), atomic_directory(out, force=True) as tmp:
        (tmp / "data.txt").write_text("new")
    assert (out / "data.txt").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_the_clean_up_of_leftovers_never_touches_an_input(tmp_path: Path) -> None:
    """A dead command's hidden sibling of OUT was removed whole before anything else, even
    when this command reads an input inside it (a user taking a file from a leftover):
    the run deleted its own input, then failed (exit 4). A file or a link of a leftover's
    name (rowgate makes only directories) failed every later command on that OUT."""
    pid = _reaped()
    leftover = tmp_path / f".out.rowgate-tmp-{pid}"
    leftover.mkdir()
    source = leftover / "a.jsonl"
    source.write_bytes(MATH.read_bytes())
    result = run(_config(source), tmp_path / "out")
    assert result.manifest["conservation"]["ok"]
    assert source.read_bytes() == MATH.read_bytes()
    stray = tmp_path / f".o2.rowgate-tmp-{pid}"
    stray.write_text("mine")
    assert run(_config(MATH), tmp_path / "o2").manifest["conservation"]["ok"]
    assert stray.read_text() == "mine"


def test_a_live_process_leftovers_are_never_touched(tmp_path: Path) -> None:
    out = tmp_path / "out"
    live = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=-1)
    try:
        building = tmp_path / f".out.rowgate-tmp-{live.pid}"
        moved = _rowgate_out(tmp_path / f".out.rowgate-tmp-{live.pid}-old", "old")
        building.mkdir()
        with atomic_directory(out, force=False) as tmp:
            (tmp / "manifest.json").write_text('{"format": "rowgate-run/1"}')
        assert building.is_dir()
        assert (moved / "data.txt").read_text() == "old"
    finally:
        live.communicate(b"")


def test_a_killed_run_between_the_renames_is_restored(tmp_path: Path) -> None:
    """End to end: ``rowgate run --force`` killed after moving the old OUT aside (the
    fallback's first rename). OUT is gone until the next command, which puts the old
    run back: it verifies, and a run without --force is refused."""
    out = tmp_path / "out"
    run(_config(MATH), out)
    script = (
        "import os, signal, sys\n"
        "from pipeline.output import outdir\n"
        "from pipeline.cli import main\n"
        "outdir._renameat2 = None\n"
        "outdir._step = lambda n: n == 'moved-aside' and os.kill(os.getpid(), signal.SIGKILL)\n"
        "sys.argv = ['rowgate', *sys.argv[1:]]\n"
        "main()\n"
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            script,
            "run",
            str(MATH),
            "--kind",
            "math-reasoning-v1",
            "--out",
            str(out),
            "--force",
            "--quiet",
            "--workers",
            "1",
        ],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert proc.returncode == -signal.SIGKILL
    assert not out.exists()
    assert [p.name for p in tmp_path.glob(".out.rowgate-tmp-*-old")]
    with pytest.raises(OutputExistsError):
        run(_config(MATH), out)
    assert verify_run(out).ok
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


# --- the lock and the temporary directory beside OUT are never a user's file ---------


def test_a_file_at_the_lock_path_is_never_written_or_deleted(tmp_path: Path) -> None:
    """The lock ``.NAME.rowgate-lock`` was opened without O_EXCL, truncated, written with
    the pid and removed whatever was at its path: an input named like it was gated as the
    pid text and then deleted (exit 0); a hard link there truncated a user's file. Now an
    input at that path is refused as what the command reads, and anything at it that is
    not a rowgate lock (a hard link, other text, a link, a directory) is refused, exit 2:
    nothing is written or removed."""
    lock = tmp_path / ".o.rowgate-lock"
    lock.write_bytes(MATH.read_bytes())
    args = ["run", str(lock), "--kind", "math-reasoning-v1", "--out", str(tmp_path / "o"), "-q"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "the lock file of --out" in result.output
    assert "which this command reads" in result.output
    assert lock.read_bytes() == MATH.read_bytes()
    mine = tmp_path / "mine.txt"
    mine.write_text("years of work")
    os.link(mine, tmp_path / ".hard.rowgate-lock")
    (tmp_path / ".text.rowgate-lock").write_text("my notes\n")
    (tmp_path / ".link.rowgate-lock").symlink_to(mine)
    (tmp_path / ".dir.rowgate-lock").mkdir()
    before = _snapshot(tmp_path)
    for name in ("hard", "text", "link", "dir"):
        with pytest.raises(UnsafeOutputError, match="is not a rowgate lock file"):
            run(_config(MATH), tmp_path / name)
        assert not (tmp_path / name).exists()
    assert _snapshot(tmp_path) == before
    assert (tmp_path / ".link.rowgate-lock").is_symlink()
    assert os.stat(mine).st_nlink == 2


@pytest.mark.parametrize("content", [b"", b"4242\n", b"4242"])
def test_a_killed_commands_lock_is_taken_over(tmp_path: Path, content: bytes) -> None:
    """A lock left by a killed command (its pid, or empty: killed as it wrote it) is
    rowgate's: the next command takes it and removes it when done."""
    (tmp_path / ".out.rowgate-lock").write_bytes(content)
    with atomic_directory(tmp_path / "out", force=False) as tmp:
        (tmp / "manifest.json").write_text('{"format": "rowgate-run/1"}')
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_the_lock_is_removed_only_while_its_path_names_it(tmp_path: Path) -> None:
    """Released, the lock is unlinked only if its path still names the file the command
    locked: a file put there meanwhile is not the command's to remove."""
    lock = tmp_path / ".out.rowgate-lock"
    with claim_output(tmp_path / "out", force=False):
        lock.unlink()
        lock.write_text("mine")
    assert lock.read_text() == "mine"


def test_a_path_at_the_temporary_directory_is_never_removed(tmp_path: Path) -> None:
    """This command's temporary directory ``.NAME.rowgate-tmp-PID`` was removed whole if
    anything was at its path, even a directory holding the input being read (the run
    deleted its input, then failed, exit 4). Now an input there, a file or a link of that
    name is refused (exit 2) and left as it is; a directory of that name holding nothing
    the command reads is a dead command's leftover (its pid reused) and is removed."""
    staging = tmp_path / f".out.rowgate-tmp-{os.getpid()}"
    staging.mkdir()
    source = staging / "a.jsonl"
    source.write_bytes(MATH.read_bytes())
    with pytest.raises(UnsafeOutputError, match="which this command reads"):
        run(_config(source), tmp_path / "out")
    assert source.read_bytes() == MATH.read_bytes()
    source.unlink()
    assert run(_config(MATH), tmp_path / "out").manifest["conservation"]["ok"]
    assert not staging.exists()
    (tmp_path / f".f.rowgate-tmp-{os.getpid()}").write_text("mine")
    (tmp_path / f".l.rowgate-tmp-{os.getpid()}").symlink_to(MATH)
    for name, what in (("f", "a file"), ("l", "a symbolic link")):
        with pytest.raises(UnsafeOutputError, match=f"is already there \\({what}\\)"):
            run(_config(MATH), tmp_path / name)
        assert os.path.lexists(tmp_path / f".{name}.rowgate-tmp-{os.getpid()}")
        assert not (tmp_path / name).exists()


def test_staging_refuses_a_path_that_appeared_after_the_claim(tmp_path: Path) -> None:
    staging = tmp_path / f".out.rowgate-tmp-{os.getpid()}"
    with claim_output(tmp_path / "out", force=False) as claim:
        assert isinstance(claim, outdir.OutputClaim)
        staging.write_text("mine")
        with pytest.raises(UnsafeOutputError, match="a file"), claim.staging():
            pass
    assert staging.read_text() == "mine"


# --- one output file ------------------------------------------------------------------


def test_atomic_file_never_replaces_what_it_reads_or_a_file_that_appeared(
    tmp_path: Path,
) -> None:
    """An output file is checked before the block and written under a hidden sibling:
    never over a path the command reads (nor the same file under another name), never
    over a file that appeared meanwhile without ``force``; a failure leaves nothing."""
    source = tmp_path / "in.jsonl"
    source.write_text("input\n")
    os.link(source, tmp_path / "hard.jsonl")
    for out in ("in.jsonl", "hard.jsonl"):
        for force in (False, True):
            with (
                pytest.raises(UnsafeOutputError, match=r"\bis .*which this command reads"),
                outdir.atomic_file(tmp_path / out, force=force, protect=[source]),
            ):
                pass
    out = tmp_path / "out.jsonl"

    def appear(tmp: Path) -> None:
        tmp.write_text("new\n")
        out.write_text("appeared\n")

    def interrupted(tmp: Path) -> None:
        tmp.write_text("half")
        raise KeyboardInterrupt

    with pytest.raises(OutputExistsError), outdir.atomic_file(out, force=False) as tmp:
        appear(tmp)
    assert out.read_text() == "appeared\n"
    with pytest.raises(KeyboardInterrupt), outdir.atomic_file(out, force=True) as tmp:
        interrupted(tmp)
    assert out.read_text() == "appeared\n"
    with outdir.atomic_file(out, force=True) as tmp:
        tmp.write_text("new\n")
    assert out.read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hard.jsonl", "in.jsonl", "out.jsonl"]
    assert source.read_text() == "input\n"


def test_atomic_file_removes_killed_commands_parts_only(tmp_path: Path) -> None:
    """A command killed while it wrote ``--out FILE`` left its hidden part beside it; the
    next command on FILE removes it, but never a live command's part, a link, a
    directory or a path it reads."""
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    dead_pid, live_pid = int(dead.stdout), os.getppid()
    out = tmp_path / "scores.jsonl"
    killed = tmp_path / f".scores.jsonl.rowgate-part-{dead_pid}-0a1b2c3d"
    live = tmp_path / f".scores.jsonl.rowgate-part-{live_pid}-0a1b2c3d"
    read = tmp_path / f".scores.jsonl.rowgate-part-{dead_pid}-ffffffff"
    linked = tmp_path / f".scores.jsonl.rowgate-part-{dead_pid}-00000000"
    other = tmp_path / f".scores.jsonl.rowgate-part-{dead_pid}-notours"
    for path in (killed, live, read, other):
        path.write_text("half")
    linked.symlink_to(read)
    with outdir.atomic_file(out, force=False, protect=[read]) as tmp:
        tmp.write_text("scores\n")
    assert out.read_text() == "scores\n"
    assert not killed.exists()
    for kept in (live, read, other):
        assert kept.exists(), kept
    assert linked.is_symlink()


def test_atomic_file_keeps_the_replaced_file_s_permissions(tmp_path: Path) -> None:
    """A file replaced with ``force`` is a new file: it took the umask's mode, so a
    shared, group-readable scores file became private (or the reverse)."""
    out = tmp_path / "scores.jsonl"
    out.write_text("old\n")
    out.chmod(0o640)
    with outdir.atomic_file(out, force=True) as tmp:
        tmp.write_text("new\n")
    assert out.read_text() == "new\n"
    assert stat.S_IMODE(out.stat().st_mode) == 0o640
