"""End to end: determinism across worker counts, atomic output, conservation, verify."""

from __future__ import annotations

import gzip
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pyarrow.parquet as pq
import pytest
import zstandard
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.core.config import CampaignConfig, InputSpec, load_campaign
from pipeline.jobs.run import InputError, RunObserver, run
from pipeline.output import writer
from pipeline.output.manifest import load_manifest
from pipeline.output.outdir import OutputExistsError, UnsafeOutputError
from pipeline.output.verify import verify_run
from pipeline.testing.synthetic import export_lines
from tests.conftest import DATA


def _export(path: Path, kind: str, count: int, seed: int) -> Path:
    with open(path, "wb") as fh:
        for line in export_lines(kind, count, seed=seed, defect_rate=0.08, duplicate_rate=0.05):
            fh.write(line + b"\n")
    return path


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> CampaignConfig:
    root = tmp_path_factory.mktemp("inputs")
    pairwise = _export(root / "pairwise.jsonl", "pairwise-v2", 600, 1)
    decide = _export(root / "decide.jsonl", "pw-decide-row-1", 300, 2)
    return CampaignConfig(inputs=(InputSpec(str(pairwise)), InputSpec(str(decide)))).override(
        **{"engine.shard_bytes": 64 * 1024}
    )


def _parquet_bytes(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*.parquet"))}


@pytest.mark.slow
def test_worker_counts_give_byte_identical_output(inputs: CampaignConfig, tmp_path: Path) -> None:
    one = run(inputs.override(**{"engine.workers": 1}), tmp_path / "w1")
    two = run(inputs.override(**{"engine.workers": 2}), tmp_path / "w2")
    files = _parquet_bytes(tmp_path / "w1")
    assert len(files) > 4
    assert files == _parquet_bytes(tmp_path / "w2")
    assert one.manifest["outputs"] == two.manifest["outputs"]


@pytest.mark.slow
@pytest.mark.parametrize("group_rows", [5, 4096])
def test_parts_do_not_depend_on_the_batch_size(
    inputs: CampaignConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, group_rows: int
) -> None:
    """The write phase streams staged batches into its parts, cut into row groups by row
    count alone: the files are byte-identical whatever ``engine.batch_lines`` and
    ``engine.batch_bytes`` are, with
    duplicates and rejections landing in every batch, and only the last row group of a
    part is short."""
    monkeypatch.setattr(writer, "ROW_GROUP_ROWS", group_rows)
    outputs = []
    for batch, batch_bytes in ((4096, 1 << 24), (7, 1 << 24), (3, 1 << 24), (4096, 5000)):
        config = inputs.override(
            **{"engine.workers": 1, "engine.batch_lines": batch, "engine.batch_bytes": batch_bytes}
        )
        outputs.append(run(config, tmp_path / f"b{batch}-{batch_bytes}").manifest["outputs"])
    files = _parquet_bytes(tmp_path / f"b4096-{1 << 24}")
    assert {p.split("/")[0] for p in files} >= {"accepted", "duplicates", "rejected"}
    for other in (f"b7-{1 << 24}", f"b3-{1 << 24}", "b4096-5000"):  # 5000 B: ~2 lines a batch
        assert _parquet_bytes(tmp_path / other) == files
    assert outputs[0] == outputs[1] == outputs[2] == outputs[3]
    for path in sorted((tmp_path / f"b7-{1 << 24}" / "accepted").rglob("*.parquet")):
        meta = pq.ParquetFile(path).metadata
        sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        assert sizes[:-1] == [group_rows] * (len(sizes) - 1)
        assert 0 < sizes[-1] <= group_rows


def test_a_failing_write_raises_its_own_error_and_leaves_no_output(
    inputs: CampaignConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure after some of a shard's parts are open (streamed writes) surfaces as
    itself, and OUT never appears."""
    original, calls = writer._write_batch, []

    def failing(*args: Any) -> Any:
        calls.append(1)
        if len(calls) == 3:
            raise OSError("No space left on device")
        return original(*args)

    monkeypatch.setattr(writer, "_write_batch", failing)
    config = inputs.override(**{"engine.workers": 1, "engine.batch_lines": 7})
    with pytest.raises(OSError, match="No space left"):
        run(config, tmp_path / "out")
    assert len(calls) == 3
    assert not (tmp_path / "out").exists()


def _rows_by_disposition(out: Path) -> dict[str, pl.DataFrame]:
    """Every output row, per disposition directory, in line order, without ``_source``."""
    found: dict[str, list[pl.DataFrame]] = {}
    for path in sorted(out.rglob("*.parquet")):
        if path.relative_to(out).parts[0] != "dedupe":
            found.setdefault(path.relative_to(out).parts[0], []).append(pl.read_parquet(path))
    rows = {d: pl.concat(frames, how="diagonal").sort("_line") for d, frames in found.items()}
    for d, frame in rows.items():
        if "_duplicate_of" in frame.columns:  # it names the survivor's _source too
            survivor = pl.col("_duplicate_of").struct
            frame = frame.with_columns(
                survivor.field("_line").alias("_dup_line"),
                survivor.field("_record_sha256").alias("_dup_sha256"),
            ).drop("_duplicate_of")
        rows[d] = frame.drop("_source")
    return rows


@pytest.mark.slow
@pytest.mark.parametrize("codec", ["gzip", "zstd"])
def test_a_compressed_input_is_spilled_and_gated_like_its_plain_file(
    inputs: CampaignConfig, tmp_path: Path, codec: str
) -> None:
    """One compressed file is cut into spill shards that several workers gate; its rows
    (lineage, hashes, reasons, raw bytes of late rejections) are the plain file's."""
    data = Path(inputs.inputs[0].path).read_bytes()
    # a same-key, other-body line at the end: the global phase rejects both rows, and
    # their raw bytes are read back from the spill files
    first = orjson.loads(data.split(b"\n", 1)[0])
    data += orjson.dumps({**first, "rationale": first["rationale"] + " Changed."}) + b"\n"
    plain = tmp_path / "in.jsonl"
    plain.write_bytes(data)
    packed = tmp_path / ("in.jsonl.gz" if codec == "gzip" else "in.jsonl.zst")
    packed.write_bytes(
        gzip.compress(data) if codec == "gzip" else zstandard.ZstdCompressor().compress(data)
    )
    config = inputs.override(inputs=(InputSpec(str(packed)),))
    one = run(config.override(**{"engine.workers": 1}), tmp_path / "w1")
    run(config.override(**{"engine.workers": 2}), tmp_path / "w2")
    assert len(one.manifest["shards"]) > 4
    assert _parquet_bytes(tmp_path / "w1") == _parquet_bytes(tmp_path / "w2")
    # nothing is left behind: no temporary directory, no spill file
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["in.jsonl", packed.name, "w1", "w2"]
    )
    assert not list((tmp_path / "w1").rglob("*.jsonl"))
    whole = run(config.override(**{"engine.spill_compressed": False}), tmp_path / "whole")
    assert len(whole.manifest["shards"]) == 1
    assert (
        _rows_by_disposition(tmp_path / "whole").keys()
        == _rows_by_disposition(tmp_path / "w1").keys()
    )
    reference = inputs.override(inputs=(InputSpec(str(plain)),), **{"engine.workers": 1})
    run(reference, tmp_path / "plain")
    expected = _rows_by_disposition(tmp_path / "plain")
    late = expected["rejected"].filter(pl.col("_kind").is_not_null() & pl.col("_raw").is_not_null())
    assert late.height >= 2  # the conflict, with its bytes
    got = _rows_by_disposition(tmp_path / "w1")
    assert got.keys() == expected.keys()
    for disposition, rows in expected.items():
        assert got[disposition].equals(rows), disposition


@pytest.mark.slow
def test_a_corrupt_compressed_input_fails_before_any_output(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"a":1}\n' * 20_000)[:-12] + b"garbage-tail")
    config = CampaignConfig(inputs=(InputSpec(str(path)),)).override(**{"engine.shard_bytes": 4096})
    with pytest.raises(InputError, match="corrupt gzip stream"):
        run(config, tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl.gz"]


@pytest.mark.slow
def test_input_order_does_not_change_output(inputs: CampaignConfig, tmp_path: Path) -> None:
    reordered = inputs.override(inputs=tuple(reversed(inputs.inputs)))
    run(inputs.override(**{"engine.workers": 1}), tmp_path / "a")
    run(reordered.override(**{"engine.workers": 1}), tmp_path / "b")
    assert _parquet_bytes(tmp_path / "a") == _parquet_bytes(tmp_path / "b")


@pytest.mark.slow
def test_every_line_lands_in_exactly_one_output(inputs: CampaignConfig, tmp_path: Path) -> None:
    result = run(inputs.override(**{"engine.workers": 2}), tmp_path / "out")
    manifest = result.manifest
    assert manifest["conservation"] == {"lines_read": 900, "rows_written": 900, "ok": True}
    # manifest outputs only: artifacts (e.g. dedupe clusters) are tables about rows
    rows = pl.concat(
        [
            pl.read_parquet(tmp_path / "out" / f["path"], columns=["_source", "_line"])
            for f in manifest["outputs"]
        ]
    )
    for entry in manifest["inputs"]:
        lines = rows.filter(pl.col("_source") == entry["path"])["_line"].sort().to_list()
        assert lines == list(range(1, entry["lines"] + 1))
    assert sum(manifest["counts"]["by_disposition"].values()) == rows.height


@pytest.mark.slow
def test_sample_data_conservation(tmp_path: Path) -> None:
    config = load_campaign(DATA / "campaign.toml").override(**{"engine.workers": 1})
    result = run(config, tmp_path / "samples")
    raw_lines = 0
    for entry in result.manifest["inputs"]:
        path = DATA / entry["path"]
        if path.suffix == ".gz":
            import gzip

            data = gzip.decompress(path.read_bytes())
        elif path.suffix == ".zst":
            import zstandard

            data = zstandard.ZstdDecompressor().decompressobj().decompress(path.read_bytes())
        else:
            data = path.read_bytes()
        raw_lines += data.count(b"\n")
        assert entry["lines"] == data.count(b"\n")
    assert result.manifest["counts"]["lines"] == raw_lines
    written = sum(
        pl.read_parquet(tmp_path / "samples" / f["path"]).height for f in result.manifest["outputs"]
    )
    assert written == raw_lines
    assert verify_run(tmp_path / "samples").ok


def test_a_campaign_under_a_directory_whose_name_is_not_utf8_runs_and_verifies(
    tmp_path: Path,
) -> None:
    """The bundled campaign copied into ``caf\\xe9`` (byte 0xE9, not UTF-8) failed after
    the whole run, exit 4: its pinned reference tables were hashed at their paths' lineage
    form (``caf\\xe9`` as text), which names no file. They are hashed where they are, and
    the manifest keeps each one's exact bytes (``path_hex``) beside that form, and the
    config's (``config_hex``): the run exits 0, verify finds every file and passes, and
    fails naming a reference table changed since."""
    here = tmp_path / os.fsdecode(b"caf\xe9")
    here.mkdir()
    for source in DATA.iterdir():
        if source.is_file():
            shutil.copy(source, here / source.name)
    out = tmp_path / "out"
    runner = CliRunner()
    config = str(here / "campaign.toml")
    result = runner.invoke(app, ["run", "--config", config, "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    manifest = load_manifest(out)
    table = here / "authorised-documents.jsonl"
    (entry,) = [e for e in manifest["pinned"] if e["name"] == "authorised_documents"]
    assert entry["path"] == str(tmp_path / "caf\\xe9" / table.name)
    assert os.fsdecode(bytes.fromhex(entry["path_hex"])) == str(table)
    assert os.fsdecode(bytes.fromhex(manifest["config_hex"]["source_path"])) == config
    verified = runner.invoke(app, ["verify", str(out)])
    assert verified.exit_code == 0, verified.output
    assert "no longer there" not in verified.output  # the config file was re-hashed
    with open(table, "ab") as fh:
        fh.write(b"\n")
    changed = runner.invoke(app, ["verify", str(out)])
    assert changed.exit_code == 1, changed.output
    assert f"reference table authorised_documents ({entry['path']}): changed" in changed.output


def test_verify_passes_then_catches_changed_bytes(inputs: CampaignConfig, tmp_path: Path) -> None:
    source = tmp_path / "pairwise.jsonl"
    shutil.copy(inputs.inputs[0].path, source)
    out = tmp_path / "out"
    run(CampaignConfig(inputs=(InputSpec(str(source)),)), out)
    report = verify_run(out)
    assert report.ok, report.problems
    assert report.checked["lines"] == 600

    # one output byte
    part = sorted(out.rglob("accepted/*/*.parquet"))[0]
    pristine = part.read_bytes()
    for position in (8, len(pristine) // 2, len(pristine) - 10):
        flipped = bytearray(pristine)
        flipped[position] ^= 0x01
        part.write_bytes(bytes(flipped))
        assert not verify_run(out).ok, position
    part.write_bytes(pristine)
    assert verify_run(out).ok

    # one source byte
    original = source.read_bytes()
    changed = bytearray(original)
    changed[100] = ord("#") if changed[100] != ord("#") else ord("%")
    source.write_bytes(bytes(changed))
    report = verify_run(out)
    assert not report.ok
    assert any("pairwise.jsonl" in p for p in report.problems)
    source.write_bytes(original)
    assert verify_run(out).ok


@pytest.mark.slow
def test_existing_output_needs_force(inputs: CampaignConfig, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(OutputExistsError, match="exists"):
        run(inputs, out)
    assert (out / "keep.txt").exists()
    # --force replaces only what rowgate wrote: a user's directory is never deleted
    with pytest.raises(UnsafeOutputError, match="rowgate did not write"):
        run(inputs, out, force=True)
    assert (out / "keep.txt").read_text() == "mine"
    (out / "keep.txt").unlink()  # an empty directory holds nothing to lose
    run(inputs.override(**{"engine.workers": 1}), out, force=True)
    assert load_manifest(out)["conservation"]["ok"]
    run(inputs.override(**{"engine.workers": 1}), out, force=True)  # its own output
    assert load_manifest(out)["conservation"]["ok"]


@pytest.mark.slow
def test_killed_run_leaves_no_output(tmp_path: Path) -> None:
    """SIGKILL at several moments: OUT never exists half-written; the next run cleans up."""
    big = _export(tmp_path / "big.jsonl", "pairwise-v2", 12_000, 3)
    out = tmp_path / "out"
    outcomes: list[int] = []
    for delay in (0.3, 1.0, 2.0):
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pipeline",
                "run",
                str(big),
                "--out",
                str(out),
                "--workers",
                "2",
                "--quiet",
            ],
            start_new_session=True,
        )
        deadline = time.monotonic() + 30
        while not list(tmp_path.glob(".out.rowgate-tmp-*")) and time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            time.sleep(0.01)
        time.sleep(delay)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        outcomes.append(proc.returncode)
        # Either OUT does not exist, or it is complete: the kill may land after the
        # rename that publishes it and before the process exits.
        if out.exists():
            assert verify_run(out).ok
            shutil.rmtree(out)
        else:
            assert proc.returncode != 0
    assert -signal.SIGKILL in outcomes  # at least one kill landed mid-run
    run(CampaignConfig(inputs=(InputSpec(str(big)),)).override(**{"engine.workers": 1}), out)
    assert not list(tmp_path.glob(".out.rowgate-tmp-*"))


def test_default_workers_never_outnumber_the_shards(tmp_path: Path) -> None:
    """By default one worker per core, but no more than uncompressed inputs have shards:
    a one-shard export is gated in this process instead of starting idle workers. A
    configured count is kept; a compressed input gets every core when it is spilled
    (shards known only as it is decompressed), and one worker when it is not."""
    from pipeline.jobs.run import _known_shards, expand_inputs

    plain = tmp_path / "a.jsonl"
    plain.write_bytes(b"".join(line + b"\n" for line in export_lines("pairwise-v2", 40, seed=3)))
    packed = tmp_path / "b.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    cores = CampaignConfig().engine.resolved_workers()

    def workers(path: Path, **settings: Any) -> int:
        config = CampaignConfig(inputs=(InputSpec(str(path)),)).override(**settings)
        return config.engine.resolved_workers(
            _known_shards(config, expand_inputs(config.inputs, config))
        )

    assert workers(plain) == 1
    third = plain.stat().st_size // 3 + 1
    assert workers(plain, **{"engine.shard_bytes": third}) == min(cores, 3)
    assert workers(plain, **{"engine.workers": 2}) == 2
    assert workers(packed) == cores
    assert workers(packed, **{"engine.spill_compressed": False}) == 1


@pytest.mark.slow
@pytest.mark.parametrize("compressed", [False, True])
def test_progress_totals_and_advances_by_the_bytes_of_lines(
    inputs: CampaignConfig, tmp_path: Path, compressed: bool
) -> None:
    """The observer's total is the inputs' bytes (estimated at 4× a compressed file), and
    the gate's progress adds up to exactly the bytes of lines read, newlines included."""
    given = [Path(spec.path) for spec in inputs.inputs]
    paths = given
    if compressed:
        paths = [tmp_path / f"{p.name}.gz" for p in given]
        for src, dst in zip(given, paths, strict=True):
            dst.write_bytes(gzip.compress(src.read_bytes()))
    totals: list[int] = []
    advanced: list[int] = []
    observer = RunObserver(
        on_start=totals.append, on_progress=lambda nbytes, nlines: advanced.append(nbytes)
    )
    config = inputs.override(inputs=tuple(InputSpec(str(p)) for p in paths))
    run(config, tmp_path / "out", observer=observer)
    size = sum(p.stat().st_size for p in paths)
    assert totals == [4 * size if compressed else size]
    assert sum(advanced) == sum(p.stat().st_size for p in given)


def test_the_observer_sees_every_phase_and_global_stage_in_order(tmp_path: Path) -> None:
    """Issue 17: with dedupe on, the bar sat at the gate's 100 % through the global phase
    (timer frozen: it looked hung) and the write phase re-showed the gate's numbers. Each
    phase now reports its own steps: the global phase each stage as it begins, the write
    phase its shard count and then each shard's rows as its parts are written."""
    path = _export(tmp_path / "pairwise.jsonl", "pairwise-v2", 60, seed=5)
    config = CampaignConfig(inputs=(InputSpec(str(path)),)).override(
        **{"engine.shard_bytes": path.stat().st_size // 3 + 1, "engine.workers": 2}
        | {"dedupe.normalised": True, "dedupe.near": True}
    )
    events: list[tuple[str, Any]] = []
    observer = RunObserver(
        on_phase=lambda name: events.append(("phase", name)),
        on_stage=lambda name: events.append(("stage", name)),
        on_write_start=lambda shards: events.append(("write_start", shards)),
        on_written=lambda rows: events.append(("written", rows)),
    )
    result = run(config, tmp_path / "out", observer=observer)
    phases = [name for event, name in events if event == "phase"]
    assert phases == ["gate", "global", "write", "report"]
    between = events[events.index(("phase", "global")) : events.index(("phase", "write"))]
    stages = [name for event, name in between if event == "stage"]
    assert stages[0] == "pairwise-v2: read"
    assert "pairwise-v2: cross_rules" in stages
    dedupe = stages.index("pairwise-v2: dedupe")
    assert stages[dedupe + 1 : dedupe + 6] == [
        "pairwise-v2: dedupe: read keys",
        "pairwise-v2: dedupe: candidates (2 partitions)",  # one per worker, at least
        "pairwise-v2: dedupe: exact check (1 range)",  # few candidates: one task
        "pairwise-v2: dedupe: match",
        "pairwise-v2: dedupe: clusters",
    ]
    after_write = events[events.index(("phase", "write")) + 1 : events.index(("phase", "report"))]
    assert after_write[0] == ("write_start", 3)
    written = [rows for event, rows in after_write[1:] if event == "written"]
    assert len(written) == len(after_write) - 1 == 3
    assert sum(written) == result.manifest["counts"]["lines"]


# -- keyed lineage ([lineage] key_env / key_file) -------------------------------------------

LINEAGE_KEY = "f00dfeedc0ffee0123456789abcdef0123456789abcdef"


def _all_text(out: Path) -> str:
    """Every value of every output file as text (Parquet decoded), the manifest, the report."""
    parts = [p.read_text("utf-8") for p in out.rglob("*") if p.suffix in (".json", ".html")]
    parts += [str(pq.read_table(p).to_pylist()) for p in out.rglob("*.parquet")]
    return "\n".join(parts)


def test_a_keyed_run_hmacs_its_lineage_and_verify_needs_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``_raw_sha256`` (over-long lines too) and ``_content_sha256`` are HMAC-SHA-256 under
    the campaign key; the manifest holds the mode and key id, never the key; verify
    passes with the key, names the variable when it is missing, and reports a wrong key
    as a mismatch."""
    import hashlib
    import hmac

    from pipeline.kinds import KINDS
    from pipeline.records.lineage import KEY_ID_DOMAIN, LineageKeyError

    export = _export(tmp_path / "pairwise.jsonl", "pairwise-v2", 40, 7)
    with open(export, "ab") as fh:
        fh.write(b'{"task_id": "' + b"x" * 5000 + b'"}\n')
    lines = export.read_bytes().split(b"\n")[:-1]
    monkeypatch.setenv("ROWGATE_TEST_LINEAGE_KEY", LINEAGE_KEY)
    config = CampaignConfig(inputs=(InputSpec(str(export), "pairwise-v2"),)).override(
        **{"lineage.key_env": "ROWGATE_TEST_LINEAGE_KEY", "limits.max_line_bytes": 4096}
    )
    result = run(config, tmp_path / "out")
    key = LINEAGE_KEY.encode()
    assert result.manifest["lineage"] == {
        "mode": "hmac-sha256",
        "key_id": hashlib.sha256(KEY_ID_DOMAIN + key).hexdigest()[:16],
    }
    rows = pl.concat(
        [
            pl.read_parquet(p)
            for p in sorted((tmp_path / "out").rglob("*.parquet"))
            if p.parent.name != "clusters" and "split_groups" not in p.parts
        ],
        how="diagonal_relaxed",
    )
    assert rows.height == len(lines)
    for line_no, raw_sha in zip(rows["_line"], rows["_raw_sha256"], strict=True):
        line = lines[line_no - 1]
        assert raw_sha == hmac.new(key, line, "sha256").hexdigest(), line_no
        assert raw_sha != hashlib.sha256(line).hexdigest()
    kept = rows.filter(pl.col("_content_sha256").is_not_null())
    assert kept.height > 30
    kind = KINDS["pairwise-v2"]
    for line_no, content in zip(kept["_line"], kept["_content_sha256"], strict=True):
        record = orjson.loads(lines[line_no - 1])
        assert content == kind.fingerprint_and_profile(record, key)[0]
        assert content != kind.fingerprint_and_profile(record)[0]
    assert LINEAGE_KEY not in _all_text(tmp_path / "out")

    assert verify_run(tmp_path / "out").ok
    monkeypatch.setenv("ROWGATE_TEST_LINEAGE_KEY", LINEAGE_KEY[::-1])
    report = verify_run(tmp_path / "out")
    assert not report.ok
    assert "is not the one the run used" in report.problems[0]
    assert LINEAGE_KEY not in str(report.problems)
    assert LINEAGE_KEY[::-1] not in str(report.problems)
    monkeypatch.delenv("ROWGATE_TEST_LINEAGE_KEY")
    with pytest.raises(LineageKeyError, match="ROWGATE_TEST_LINEAGE_KEY"):
        verify_run(tmp_path / "out")


def test_a_missing_lineage_key_fails_before_any_work(tmp_path: Path) -> None:
    export = _export(tmp_path / "pairwise.jsonl", "pairwise-v2", 5, 7)
    key_file = tmp_path / "absent.key"
    config = CampaignConfig(inputs=(InputSpec(str(export), "pairwise-v2"),)).override(
        **{"lineage.key_file": str(key_file)}
    )
    from pipeline.records.lineage import LineageKeyError

    with pytest.raises(LineageKeyError, match=f"lineage key file {key_file}"):
        run(config, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_an_unkeyed_run_records_no_lineage_mode(inputs: CampaignConfig, tmp_path: Path) -> None:
    """An unkeyed run's manifest and effective config are those of a run made before
    keyed lineage existed (no ``lineage`` entry), so its outputs stay byte-identical."""
    result = run(inputs.override(**{"engine.workers": 1}), tmp_path / "out")
    assert "lineage" not in result.manifest
    assert "lineage" not in result.manifest["config"]


def test_the_run_module_leaves_the_later_phases_libraries_to_run() -> None:
    """The parent imported polars, the global stages, the rubrics and the report (~0.5 s
    of CPU) before ``run`` started the workers; ``run`` imports them once they start."""
    later = (
        "polars",
        "pipeline.decide.context",
        "pipeline.output.writer",
        "pipeline.reports.run_report",
        "pipeline.rubrics.campaign",
    )
    code = f"import sys, pipeline.jobs.run\nprint([m for m in {later!r} if m in sys.modules])"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"


def _append(path: Path) -> None:
    with path.open("ab") as fh:
        fh.write(path.read_bytes()[:200])


def _replace(path: Path) -> None:
    new = path.with_suffix(".new")
    new.write_bytes(path.read_bytes())
    new.replace(path)


def _touch(path: Path) -> None:
    os.utime(path, ns=(0, path.stat().st_mtime_ns + 1_000_000))


def _rewrite_keeping_the_time(path: Path) -> None:
    """Same size, other bytes, and the modification time put back: the change time
    (the kernel's, which no one can set) still moves."""
    before = path.stat()
    data = path.read_bytes()
    path.write_bytes(data[:10] + bytes([data[10] ^ 1]) + data[11:])
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (_append, "[0-9,]+ bytes when the command began, [0-9,]+ at its end"),
        (_replace, "replaced by another file"),
        (_touch, "modified"),
        (_rewrite_keeping_the_time, "modified"),
    ],
    ids=["appended", "replaced", "rewritten in place", "rewritten, its time put back"],
)
def test_an_input_changed_while_the_run_reads_it_fails_the_run(
    tmp_path: Path, change: Any, said: str
) -> None:
    """An input replaced or appended to during a run (the data-safety red team): the
    manifest named the old size and the new file's SHA-256, one row held a line cut at
    the old size, conservation said "ok", and the run exited 0. A change between the
    plan and the end of every read is now an input error, and nothing is published."""
    given = tmp_path / "math.jsonl"
    given.write_bytes((DATA / "math-reasoning-v1.jsonl").read_bytes())
    config = CampaignConfig(inputs=(InputSpec(str(given), kind="math-reasoning-v1"),))

    def during(phase: str) -> None:
        if phase == "global":
            change(given)

    with pytest.raises(InputError, match=f"changed while the run read it \\({said}"):
        run(config, tmp_path / "out", observer=RunObserver(on_phase=during))
    assert not (tmp_path / "out").exists()
    assert run(config, tmp_path / "out").manifest["conservation"]["ok"]
