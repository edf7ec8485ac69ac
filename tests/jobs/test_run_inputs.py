"""A run's inputs: what expand_inputs accepts, and hostile inputs refused as input errors.

Every refusal here is an :class:`InputError` (exit 3) naming the input, raised before
anything is published: a decompression bomb, a FIFO, a symbolic link loop, an empty
input path.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import threading
from pathlib import Path

import pytest
import zstandard
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.core.config import CampaignConfig, ConfigError, InputSpec, load_campaign
from pipeline.gate.reader import DecompressionLimitError, InputError
from pipeline.jobs.run import expand_inputs, run
from pipeline.output.verify import verify_run
from tests.cli.test_cli_rubrics import ENVELOPE
from tests.conftest import DATA

runner = CliRunner()


def _config(*paths: Path | str, **changes: object) -> CampaignConfig:
    specs = tuple(InputSpec(str(p), "math-reasoning-v1") for p in paths)
    return CampaignConfig(inputs=specs).override(**changes)


@pytest.mark.parametrize("suffix", [".gz", ".zst"])
@pytest.mark.parametrize("spill", [True, False])
def test_a_decompression_bomb_fails_the_run_before_any_output(
    tmp_path: Path, suffix: str, spill: bool
) -> None:
    """run reads the config's limits: a stream past limits.max_decompressed_bytes fails
    the run with an input error naming the file and the setting (spilled in the parent
    or read whole by the gate), and publishes nothing."""
    rows = (DATA / "math-reasoning-v1.jsonl").read_bytes()
    data = rows + b"0" * (2 << 20)  # a last line of 2 MiB: past the limit
    packed = gzip.compress(data) if suffix == ".gz" else zstandard.compress(data)
    bomb = tmp_path / f"bomb.jsonl{suffix}"
    bomb.write_bytes(packed)
    config = _config(
        bomb,
        **{
            "limits.max_decompressed_bytes": 1 << 20,
            "engine.spill_compressed": spill,
            "engine.workers": 1,
        },
    )
    with pytest.raises(DecompressionLimitError, match=f"{bomb}: the .* limits.max_decompressed"):
        run(config, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    roomy = config.override(**{"limits.max_decompressed_bytes": 4 << 20})
    assert run(roomy, tmp_path / "out").manifest["conservation"]["ok"]


def test_scan_and_run_refuse_a_bomb_with_exit_3(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.jsonl.zst"
    bomb.write_bytes(zstandard.compress(bytes(3 << 20)))
    config = tmp_path / "c.toml"
    config.write_text("[limits]\nmax_decompressed_bytes = 2097152\n")
    for args in (
        [
            "run",
            str(bomb),
            "--kind",
            "math-reasoning-v1",
            "-c",
            str(config),
            "--out",
            "o",
            "-q",
            "--workers",
            "1",
        ],
        ["scan", str(bomb), "--kind", "math-reasoning-v1", "-c", str(config)],
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 3, result.output
        assert "limits.max_decompressed_bytes" in result.output
        assert str(bomb) in result.output.replace("\n", "")


def test_a_fifo_input_is_refused_without_opening_it(tmp_path: Path) -> None:
    """A FIFO was reported as "no such file or directory"; opening one blocks until
    something writes to it. It is refused by its file type, and so is one in an input
    directory (which was skipped silently)."""
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    outcome: list[BaseException] = []

    def expand(path: Path) -> None:
        try:
            expand_inputs(_config(path).inputs, _config(path))
        except BaseException as exc:
            outcome.append(exc)

    for given in (fifo, tmp_path):
        worker = threading.Thread(target=expand, args=(given,), daemon=True)
        worker.start()
        worker.join(timeout=30)
        assert not worker.is_alive(), "opened the FIFO"
        error = outcome.pop()
        assert isinstance(error, InputError)
        assert f"{fifo}: is a FIFO (named pipe), not a regular file" in str(error)
        assert "copy it to a file first" in str(error)


#: each command given a FIFO (``FIFO``), in a file's place or inside a directory
#: (``DIR``); the exit code and what the message calls the path
_FIFO_COMMANDS: list[tuple[list[str], int, str]] = [
    (["rubrics", "check", "FIFO"], 3, "FIFO"),
    (["rubrics", "check", "-c", "FIFO", "ENVELOPE"], 2, "cannot read config FIFO"),
    (["rubrics", "score", "ENVELOPE", "FIFO"], 3, "cannot read grades FIFO"),
    (["rubrics", "score", "FIFO", "GRADES"], 3, "cannot read FIFO"),
    (["run", "-c", "FIFO", "--out", "OUT"], 2, "cannot read config FIFO"),
    (
        [
            "report",
            "calibration",
            "FIFO.parquet",
            "--confidence",
            "c",
            "--correct",
            "k",
            "--out",
            "OUT",
        ],
        3,
        "FIFO.parquet",
    ),
    (
        ["report", "calibration", "DIR", "--confidence", "c", "--correct", "k", "--out", "OUT"],
        3,
        "DIR/x.parquet",
    ),
    (["dedupe", "FIFO.parquet", "--text", "t", "--out", "OUT"], 3, "FIFO.parquet"),
    (["dedupe", "DIR", "--text", "t", "--out", "OUT"], 3, "DIR/x.parquet"),
]


@pytest.mark.parametrize(("args", "code", "named"), _FIFO_COMMANDS, ids=lambda v: str(v))
def test_every_command_refuses_a_fifo_without_opening_it(
    tmp_path: Path, args: list[str], code: int, named: str
) -> None:
    """`rubrics check`, `rubrics score` and `run -c` opened a FIFO and waited forever for
    a writer; `report` and `dedupe` said "no such file or directory" of one, and skipped
    one in a directory. Each says what it is, found by its file type, as a run's input."""
    places = {
        "FIFO.parquet": tmp_path / "pipe.parquet",
        "FIFO": tmp_path / "pipe",
        "DIR": tmp_path / "d",
        "OUT": tmp_path / "out",
        "ENVELOPE": tmp_path / "envelope.json",
        "GRADES": tmp_path / "grades.jsonl",
    }
    places["DIR"].mkdir()
    fifos = [places["FIFO.parquet"], places["FIFO"], places["DIR"] / "x.parquet"]
    for fifo in fifos:
        os.mkfifo(fifo)
    places["ENVELOPE"].write_text(json.dumps(ENVELOPE))
    places["GRADES"].write_text('{"submission": "s", "leaf_id": "x", "score": 1}\n')
    argv = [str(places[a]) if a in places else a for a in args]
    results: list[object] = []
    worker = threading.Thread(target=lambda: results.append(runner.invoke(app, argv)), daemon=True)
    worker.start()
    worker.join(timeout=30)
    if worker.is_alive():
        for fifo in fifos:  # a writer lets the blocked reader go
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("opened the FIFO")
    result = results[0]
    assert result.exit_code == code, result.output  # type: ignore[attr-defined]
    shown = named
    for name in ("FIFO.parquet", "FIFO", "DIR"):
        shown = shown.replace(name, str(places[name]))
    assert f"{shown}: is a FIFO (named pipe), not a regular file" in result.output  # type: ignore[attr-defined]
    assert not places["OUT"].exists()


def test_symbolic_links_that_reach_no_file_are_named(tmp_path: Path) -> None:
    """A symbolic link loop was "no such file or directory", and was skipped silently
    inside an input directory, as was a broken link."""
    loop = tmp_path / "loop.jsonl"
    loop.symlink_to(loop)
    with pytest.raises(InputError, match=f"{loop}: a symbolic link loop"):
        expand_inputs(_config(loop).inputs, _config(loop))
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "a.jsonl").write_bytes((DATA / "math-reasoning-v1.jsonl").read_bytes())
    (folder / "notes.txt").symlink_to(folder / "notes.txt")  # not an input: ignored
    assert len(expand_inputs(_config(folder).inputs, _config(folder))) == 1
    (folder / "b.jsonl").symlink_to(tmp_path / "absent.jsonl")
    with pytest.raises(InputError, match=r"b\.jsonl: a broken symbolic link"):
        expand_inputs(_config(folder).inputs, _config(folder))
    (folder / "b.jsonl").unlink()
    (folder / "c.jsonl").mkdir()
    with pytest.raises(InputError, match=r"c\.jsonl: is a directory, not a file"):
        expand_inputs(_config(folder).inputs, _config(folder))
    with pytest.raises(InputError, match=f"{tmp_path / 'absent'}: no such file or directory"):
        expand_inputs(_config(tmp_path / "absent").inputs, _config(tmp_path / "absent"))


def test_an_empty_input_path_is_a_config_error(tmp_path: Path) -> None:
    """``path = ""`` in [[inputs]] read every JSONL file in the config's directory."""
    (tmp_path / "a.jsonl").write_bytes((DATA / "math-reasoning-v1.jsonl").read_bytes())
    config = tmp_path / "c.toml"
    config.write_text('[[inputs]]\npath = ""\nkind = "math-reasoning-v1"\n')
    with pytest.raises(ConfigError, match=r"inputs\[0\]\.path: must not be empty"):
        load_campaign(config)
    result = runner.invoke(app, ["run", "", "--kind", "math-reasoning-v1", "--out", "o"])
    assert result.exit_code == 2, result.output
    assert "must not be empty" in result.output


def test_verify_reads_the_inputs_under_the_runs_own_limits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that raised limits.max_expansion_ratio read a highly compressed input; verify
    re-reads it under the same bounds, never refusing what the run accepted."""
    monkeypatch.setattr("pipeline.gate.reader.RATIO_EXEMPT_BYTES", 1 << 10)
    rows = (DATA / "math-reasoning-v1.jsonl").read_bytes()
    packed = tmp_path / "dense.jsonl.zst"
    packed.write_bytes(zstandard.compress(rows + b"0" * (4 << 20)))  # far past 100x
    config = _config(packed, **{"limits.max_expansion_ratio": 100_000, "engine.workers": 1})
    out = tmp_path / "out"
    assert run(config, out).manifest["conservation"]["ok"]
    report = verify_run(out)
    assert report.ok, report.problems


def test_a_bzip2_export_is_refused_and_a_misnamed_gzip_is_read(tmp_path: Path) -> None:
    """Compression is read from the bytes: a .jsonl.bz2 was read as text (every line
    json.invalid_utf8, exit 0); a gzip export named .jsonl is gated like its plain bytes."""
    import bz2

    rows = (DATA / "math-reasoning-v1.jsonl").read_bytes()
    packed = tmp_path / "export.jsonl.bz2"
    packed.write_bytes(bz2.compress(rows))
    refused = runner.invoke(
        app, ["run", str(packed), "--kind", "math-reasoning-v1", "--out", str(tmp_path / "o")]
    )
    assert refused.exit_code == 3, refused.output
    assert "bzip2-compressed" in refused.output
    assert not (tmp_path / "o").exists()
    plain, misnamed = tmp_path / "plain.jsonl", tmp_path / "gz.jsonl"
    plain.write_bytes(rows)
    misnamed.write_bytes(gzip.compress(rows))
    counts = [
        run(_config(path, **{"engine.workers": 1}), tmp_path / path.stem).manifest["counts"]
        for path in (plain, misnamed)
    ]
    assert counts[0] == counts[1]


def test_a_directory_reads_every_jsonl_named_export_or_refuses_it(tmp_path: Path) -> None:
    """A directory input took only lower-case ``.jsonl``/``.ndjson`` names: ``c.JSONL``
    and ``b.jsonl.bz2`` were left out without a word (10 lines of 30 gated, exit 0),
    where the ``.bz2`` named alone is refused. Now every JSONL-named entry is an input:
    read, or refused by its format."""
    import bz2

    lines = (DATA / "math-reasoning-v1.jsonl").read_bytes().splitlines(keepends=True)
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "a.jsonl").write_bytes(b"".join(lines[:10]))
    (folder / "c.JSONL").write_bytes(b"".join(lines[10:20]))
    (folder / "notes.txt").write_text("not an export")
    (folder / "b.jsonl.bz2").write_bytes(bz2.compress(b"".join(lines[20:30])))
    refused = runner.invoke(
        app, ["run", str(folder), "--kind", "math-reasoning-v1", "--out", str(tmp_path / "o")]
    )
    assert refused.exit_code == 3, refused.output
    assert "b.jsonl.bz2: bzip2-compressed" in refused.output
    assert not (tmp_path / "o").exists()
    (folder / "b.jsonl.bz2").unlink()
    inputs = expand_inputs(_config(folder).inputs, _config(folder))
    assert [Path(i.path).name for i in inputs] == ["a.jsonl", "c.JSONL"]
    result = run(_config(folder, **{"engine.workers": 1}), tmp_path / "o")
    assert result.manifest["counts"]["lines"] == 20


@pytest.mark.parametrize("where", ["file", "directory"])
def test_an_unreadable_input_is_an_input_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """A file or directory without read permission failed the run as an internal error
    (exit 4, ``PermissionError``); it is the input's error (exit 3), named."""
    from pipeline.gate import reader

    path = tmp_path / "x.jsonl"
    path.write_bytes((DATA / "math-reasoning-v1.jsonl").read_bytes())

    def denied(*args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied")

    if where == "file":
        monkeypatch.setattr(reader, "open", denied, raising=False)
        given = path
    else:
        monkeypatch.setattr(Path, "iterdir", denied)
        given = tmp_path
    with pytest.raises(InputError, match=r": cannot read: Permission denied"):
        expand_inputs(_config(given).inputs, _config(given))
    assert InputError.exit_code == 3


def test_one_file_under_two_names_is_refused(tmp_path: Path) -> None:
    """Only identical path strings were caught: ``./a.jsonl``, a symbolic link, a hard
    link or a file also in a given directory was read twice, each line ending in two rows
    (the second copy removed as a duplicate, or rejected twice)."""
    folder = tmp_path / "d"
    folder.mkdir()
    real = folder / "a.jsonl"
    real.write_bytes((DATA / "math-reasoning-v1.jsonl").read_bytes())
    (tmp_path / "link.jsonl").symlink_to(real)
    os.link(real, tmp_path / "hard.jsonl")
    for other in (
        f"{tmp_path}/./d/a.jsonl",
        str(tmp_path / "link.jsonl"),
        str(tmp_path / "hard.jsonl"),
    ):
        config = _config(real, other)
        with pytest.raises(InputError, match="is the same file as"):
            expand_inputs(config.inputs, config)
    config = _config(folder, f"{tmp_path}/./d/a.jsonl")
    with pytest.raises(InputError, match="is the same file as"):
        expand_inputs(config.inputs, config)
    out = tmp_path / "out"
    result = runner.invoke(
        app,
        ["run", "--split", f"train={real}", "--split", f"eval={tmp_path / 'link.jsonl'}",
         "--kind", "math-reasoning-v1", "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 3, result.output
    assert "is the same file as" in result.output
    assert not out.exists()


def test_a_bad_kind_or_schema_setting_is_named_before_any_work(tmp_path: Path) -> None:
    """An unknown kind said which kind but not which input; a schemas.directory that does
    not exist said "no schema 'agent-trace-v1' in …" (exit 3); a pin for no schema did
    not say it was a pin."""
    math = DATA / "math-reasoning-v1.jsonl"
    unknown = CampaignConfig(inputs=(InputSpec(str(math), "nope"),))
    with pytest.raises(InputError, match=rf"^{re.escape(str(math))}: unknown record kind 'nope'"):
        run(unknown, tmp_path / "a")
    missing = _config(math, **{"schemas.directory": str(tmp_path / "nope")})
    with pytest.raises(ConfigError, match=r"^schemas\.directory: .*nope: no such directory$"):
        run(missing, tmp_path / "b")
    pinned = _config(math, **{"schemas.pins": {"nokind": "0" * 64}})
    with pytest.raises(InputError, match=r"^schemas\.pins\.nokind: no schema 'nokind'"):
        run(pinned, tmp_path / "c")
    assert list(tmp_path.iterdir()) == []
