"""Outputs on an object store (pipeline.output.remote): the same bytes as a local OUT,
uploaded with the proof last, never over an existing output, and nothing left behind
when an upload fails."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pyarrow.fs as pafs
import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.core.errors import EXIT_FAILED, EXIT_USAGE
from pipeline.output import remote
from pipeline.output.outdir import OutputExistsError
from pipeline.output.remote import OutputURIError, RemoteOut, output_target
from tests.conftest import DATA
from tests.output.object_store import MemoryStore
from tests.parity import output_digests

runner = CliRunner()
MATH = ["run", str(DATA / "math-reasoning-v1.jsonl"), "--kind", "math-reasoning-v1"]


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> MemoryStore:
    """``mem://KEY`` names KEY in one in-memory store; the work directory is watched."""
    memory = MemoryStore()
    filesystem = pafs.PyFileSystem(memory)

    def resolve(uri: str) -> tuple[pafs.FileSystem, str]:
        assert uri.startswith("mem://")
        return filesystem, uri.removeprefix("mem://").rstrip("/")

    monkeypatch.setattr(remote, "_resolver", resolve)
    monkeypatch.setenv(remote.WORK_DIR_ENV, str(tmp_path / "work"))
    return memory


def _download(memory: MemoryStore, prefix: str, into: Path) -> Path:
    for key, data in memory.objects.items():
        if key.startswith(prefix + "/"):
            target = into / key[len(prefix) + 1 :]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
    return into


def test_output_targets() -> None:
    assert output_target("out/run") == Path("out/run")
    assert output_target("/data/run") == Path("/data/run")
    assert output_target("file:///data/my%20run") == Path("/data/my run")
    assert output_target("s3://bucket/run") == RemoteOut("s3://bucket/run")
    assert output_target("gs://bucket/a/b/") == RemoteOut("gs://bucket/a/b/")
    assert RemoteOut("s3://b/run/?region=x").join("a/b.json") == "s3://b/run/a/b.json"
    with pytest.raises(OutputURIError, match="this machine"):
        output_target("file://elsewhere/data/run")


def test_an_unknown_scheme_or_a_bare_bucket_exits_2(tmp_path: Path) -> None:
    for uri, why in (("nosuch://bucket/run", "not a filesystem"), ("mock://", "empty")):
        result = runner.invoke(app, [*MATH, "--out", uri])
        assert result.exit_code == EXIT_USAGE, result.output
        assert why in result.output


def test_a_prefix_a_store_could_resolve_elsewhere_is_refused(store: MemoryStore) -> None:
    store.objects["bucket/run/manifest.json"] = b"{}"
    for uri, why in (
        ("mem://bucket", "names a bucket"),
        ("mem://bucket/x/../run", "'..'"),
        ("mem://bucket//run", "empty"),
        ("mem://bucket/./run", "'.'"),
    ):
        result = runner.invoke(app, [*MATH, "--out", uri])
        assert result.exit_code == EXIT_USAGE, result.output
        assert why in result.output
    assert store.committed == []


def test_messages_never_show_a_uris_credentials_or_query() -> None:
    out = RemoteOut("s3://KEY:SECRET@bucket/run?region=x&secret_key=S")
    assert str(out) == "s3://bucket/run"
    assert out.join("report.html") == "s3://bucket/run/report.html"


@pytest.mark.slow
def test_a_run_on_an_object_store_holds_the_local_runs_bytes(
    store: MemoryStore, tmp_path: Path
) -> None:
    config = ["run", "--config", str(DATA / "campaign.toml"), "--workers", "1"]
    local = tmp_path / "local"
    assert runner.invoke(app, [*config, "--out", str(local)]).exit_code == 0
    result = runner.invoke(app, [*config, "--out", "mem://bucket/runs/one"])
    assert result.exit_code == 0, result.output
    assert "mem://bucket/runs/one/report.html" in result.stdout
    assert store.committed[-1] == "bucket/runs/one/manifest.json"  # the proof, last
    assert len(store.committed) == len(set(store.committed))  # each object written once
    copy = _download(store, "bucket/runs/one", tmp_path / "copy")
    assert output_digests(copy) == output_digests(local)
    assert list((tmp_path / "work").iterdir()) == []  # the work directory is removed

    verified = runner.invoke(app, ["verify", "mem://bucket/runs/one"])
    assert verified.exit_code == 0, verified.output
    part = next(k for k in store.objects if k.endswith(".parquet") and "/accepted/" in k)
    store.objects[part] = store.objects[part][:-1] + b"\0"
    assert runner.invoke(app, ["verify", "mem://bucket/runs/one"]).exit_code == 1
    assert list((tmp_path / "work").iterdir()) == []


def test_an_existing_output_is_never_replaced(store: MemoryStore) -> None:
    store.objects["bucket/run/manifest.json"] = b'{"format": "rowgate-run/1"}'
    before = dict(store.objects)
    result = runner.invoke(app, [*MATH, "--out", "mem://bucket/run"])
    assert result.exit_code == EXIT_FAILED
    assert "holds 1 object;" in result.output
    assert "empty prefix" in result.output
    forced = runner.invoke(app, [*MATH, "--out", "mem://bucket/run", "--force"])
    assert forced.exit_code == EXIT_USAGE
    assert "does not replace" in forced.output
    assert store.objects == before
    assert store.committed == []  # refused before any write
    # an object at OUT's own key is refused too
    store.objects["bucket/file"] = b"x"
    assert runner.invoke(app, [*MATH, "--out", "mem://bucket/file"]).exit_code == EXIT_FAILED


@pytest.mark.parametrize("failing", [3, 5, "proof"])
def test_a_failed_upload_leaves_no_output(
    store: MemoryStore, tmp_path: Path, failing: int | str
) -> None:
    # the probe and the claim's marker are uploads 1 and 2; the output's files follow,
    # the proof last
    assert runner.invoke(app, [*MATH, "--out", str(tmp_path / "local")]).exit_code == 0
    files = [p for p in (tmp_path / "local").rglob("*") if p.is_file()]
    store.fail_upload = 2 + len(files) if failing == "proof" else int(failing)
    result = runner.invoke(app, [*MATH, "--out", "mem://bucket/run"])
    assert result.exit_code == EXIT_FAILED, result.output
    assert "injected" in result.output
    assert store.objects == {}  # every uploaded object deleted, the proof never written
    assert "bucket/run/manifest.json" not in store.committed
    assert list((tmp_path / "work").iterdir()) == []


def test_a_store_that_refuses_writes_or_deletes_fails_before_any_work(
    store: MemoryStore, tmp_path: Path
) -> None:
    store.fail_upload = 1
    result = runner.invoke(app, [*MATH, "--out", "mem://bucket/run"])
    assert result.exit_code == EXIT_FAILED, result.output
    assert "cannot write under mem://bucket/run" in result.output
    assert not (tmp_path / "work").exists()  # refused before the run began
    store.fail_upload, store.refuse_deletes = None, True
    result = runner.invoke(app, [*MATH, "--out", "mem://bucket/run"])
    assert result.exit_code == EXIT_FAILED, result.output
    assert "cannot delete under mem://bucket/run" in result.output
    assert not (tmp_path / "work").exists()
    assert list(store.objects) == [next(k for k in store.committed if "-probe" in k)]


def test_another_writer_under_the_prefix_blocks_the_commit(store: MemoryStore) -> None:
    def intrude(key: str) -> None:
        if key.endswith(".parquet") and "bucket/run/theirs.txt" not in store.objects:
            store.objects["bucket/run/theirs.txt"] = b"another command's file"

    store.on_commit = intrude
    result = runner.invoke(app, [*MATH, "--out", "mem://bucket/run"])
    assert result.exit_code == EXIT_FAILED, result.output
    assert "changed while this command uploaded" in result.output
    assert "theirs.txt" in result.output
    # nothing is deleted (the same names may be another writer's), nothing committed
    assert store.objects["bucket/run/theirs.txt"] == b"another command's file"
    assert "bucket/run/manifest.json" not in store.objects
    assert any(key.endswith(".parquet") for key in store.objects)
    assert not any(".rowgate-claim-" in key for key in store.objects)


def test_an_object_rewritten_under_the_prefix_blocks_the_commit(store: MemoryStore) -> None:
    def rewrite(key: str) -> None:
        if key.endswith("clusters/math-reasoning-v1.parquet"):
            store.objects[key] = b"another writer's bytes"

    store.on_commit = rewrite
    result = runner.invoke(app, [*MATH, "--out", "mem://bucket/run"])
    assert result.exit_code == EXIT_FAILED, result.output
    assert "clusters/math-reasoning-v1.parquet" in result.output
    assert "bucket/run/manifest.json" not in store.objects


def test_a_claimed_prefix_is_refused_to_a_second_command(store: MemoryStore) -> None:
    out = RemoteOut("mem://bucket/run")
    with remote.claim_remote(out, force=False) as first:
        second = remote.claim_remote(out, force=False)
        with pytest.raises(OutputExistsError, match="holds 1 object"):
            second.__enter__()
        assert first.marker in store.objects
    assert store.objects == {}  # the marker leaves with the claim

    def race(key: str) -> None:  # another command's marker lands beside ours
        if ".rowgate-claim-" in key and "bucket/run/.rowgate-claim-other" not in store.objects:
            store.objects["bucket/run/.rowgate-claim-other"] = b""

    store.on_commit = race
    racing = remote.claim_remote(out, force=False)
    with pytest.raises(OutputExistsError, match="another command is writing there"):
        racing.__enter__()
    assert list(store.objects) == ["bucket/run/.rowgate-claim-other"]


def test_verify_refuses_object_names_outside_the_output(store: MemoryStore, tmp_path: Path) -> None:
    store.objects["bucket/run/manifest.json"] = b"{}"
    store.objects["bucket/run/../../escaped"] = b"x"
    result = runner.invoke(app, ["verify", "mem://bucket/run"])
    assert result.exit_code == EXIT_USAGE, result.output
    assert "not an output's" in result.output
    assert not list(tmp_path.rglob("escaped"))


def test_dedupe_publishes_to_an_object_store(store: MemoryStore, tmp_path: Path) -> None:
    run_out = tmp_path / "run"
    assert runner.invoke(app, [*MATH, "--out", str(run_out)]).exit_code == 0
    parts = sorted(str(p) for p in (run_out / "accepted").rglob("*.parquet"))
    local = runner.invoke(app, ["dedupe", *parts, "--out", str(tmp_path / "dd")])
    assert local.exit_code == 0, local.output
    result = runner.invoke(app, ["dedupe", *parts, "--out", "mem://bucket/dd"])
    assert result.exit_code == 0, result.output
    assert store.committed[-1] == "bucket/dd/summary.json"
    copy = _download(store, "bucket/dd", tmp_path / "dd-copy")
    for path in (tmp_path / "dd").iterdir():
        assert (copy / path.name).read_bytes() == path.read_bytes(), path.name
    summary = json.loads(store.objects["bucket/dd/summary.json"])
    assert summary["format"] == "rowgate-dedupe/1"


def test_a_killed_commands_work_directory_is_removed_by_the_next(
    store: MemoryStore, tmp_path: Path
) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # its pid is free: nothing of this host runs as it
    host = socket.gethostname()
    work = tmp_path / "work"
    left = {
        "killed": work / f".rowgate-out-{dead.pid}-{host}-abc123",
        "killed-verify": work / f".rowgate-verify-{dead.pid}-{host}-abc123",
        "another host's": work / f".rowgate-out-{dead.pid}-{host}x-abc123",
        "a live one": work / f".rowgate-out-{os.getpid()}-{host}-abc123",
        "not rowgate's": work / f"rowgate-out-{dead.pid}-{host}-abc123",
    }
    for directory in left.values():
        (directory / "_staging").mkdir(parents=True)
    assert runner.invoke(app, [*MATH, "--out", "mem://bucket/run"]).exit_code == 0
    assert not left["killed"].exists()
    assert left["killed-verify"].exists()  # only verify sweeps its own
    assert runner.invoke(app, ["verify", "mem://bucket/run"]).exit_code == 0
    assert not left["killed-verify"].exists()
    kept = sorted(p.name for p in work.iterdir())
    assert kept == sorted(left[k].name for k in ("another host's", "a live one", "not rowgate's"))


def test_the_work_directorys_clean_up_never_removes_an_input(
    store: MemoryStore, tmp_path: Path
) -> None:
    """An input a user took from a dead command's work directory (or put there) was
    deleted with it by the next command's clean-up, before it read the input ("No such
    file or directory"); for a local OUT the clean-up already left such a leftover
    alone. Now it does for an object-store OUT too, with run, dedupe and verify."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = socket.gethostname()
    work = tmp_path / "work"
    left = work / f".rowgate-out-{dead.pid}-{host}-abc123"
    left.mkdir(parents=True)
    given = left / "math.jsonl"
    given.write_bytes((DATA / "math-reasoning-v1.jsonl").read_bytes())
    run = ["run", str(given), "--kind", "math-reasoning-v1", "--out", "mem://bucket/run"]
    result = runner.invoke(app, run)
    assert result.exit_code == 0, result.output
    assert given.read_bytes() == (DATA / "math-reasoning-v1.jsonl").read_bytes()
    checked = work / f".rowgate-verify-{dead.pid}-{host}-abc123"
    (checked / "sources").mkdir(parents=True)
    (checked / "sources" / "math.jsonl").write_bytes(given.read_bytes())
    result = runner.invoke(
        app, ["verify", "mem://bucket/run", "--sources", str(checked / "sources")]
    )
    assert result.exit_code == 0, result.output
    assert (checked / "sources" / "math.jsonl").exists()


def test_verifys_clean_up_never_removes_a_file_the_manifest_names(
    store: MemoryStore, tmp_path: Path
) -> None:
    """verify's clean-up protected only ``--sources``: an input read at its recorded
    path, inside a dead verify's leftover, was deleted before verify read it. It now
    runs once the manifest names what verify reads; other leftovers still go."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = socket.gethostname()
    work = tmp_path / "work"
    holding = work / f".rowgate-verify-{dead.pid}-{host}-abc123"
    empty = work / f".rowgate-verify-{dead.pid}-{host}-def456"
    holding.mkdir(parents=True)
    empty.mkdir()
    given = holding / "math.jsonl"
    given.write_bytes((DATA / "math-reasoning-v1.jsonl").read_bytes())
    run = ["run", str(given), "--kind", "math-reasoning-v1", "--out", "mem://bucket/run"]
    assert runner.invoke(app, run).exit_code == 0
    result = runner.invoke(app, ["verify", "mem://bucket/run"])
    assert result.exit_code == 0, result.output
    assert given.read_bytes() == (DATA / "math-reasoning-v1.jsonl").read_bytes()
    assert not empty.exists()
    assert [p.name for p in work.iterdir() if p.name.startswith(".rowgate-verify-")] == [
        holding.name
    ]


def test_report_publishes_to_an_object_store(store: MemoryStore, tmp_path: Path) -> None:
    scores = tmp_path / "scores.jsonl"
    rows = [{"p": (i % 10) / 10, "y": int(i % 3 != 0)} for i in range(60)]
    scores.write_text("".join(json.dumps(r) + "\n" for r in rows))
    command = ["report", "calibration", str(scores), "--confidence", "p", "--correct", "y = 1"]
    result = runner.invoke(app, [*command, "--out", "mem://bucket/rep", "--bootstrap", "20"])
    assert result.exit_code == 0, result.output
    assert "mem://bucket/rep/report.html" in result.output
    assert store.committed[-1] == "bucket/rep/report.json"
    names = sorted(k.removeprefix("bucket/rep/") for k in store.objects)
    assert "report.html" in names
    assert "summary.parquet" in names
    document = json.loads(store.objects["bucket/rep/report.json"])
    assert document["format"] == "rowgate-report/1"
