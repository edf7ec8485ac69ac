"""The write phase's memory: what it holds per shard does not grow with the shard's rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.core.config import CampaignConfig, InputSpec
from pipeline.jobs.run import run
from pipeline.output import writer
from pipeline.testing.synthetic import export_lines
from tests.parity import output_digests


def test_rejected_rows_are_written_a_staged_batch_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shard's rejected rows were read whole and sorted with the global phase's
    rejections before the first was written: ~0.4 KB a row, and a shard of blank lines
    holds millions (5M blank lines took 1.96 GB). Now the gate's rejections stream a
    staged batch at a time, merged in line order with the late ones (which the global
    phase found, and which are all held): no table written holds more than a batch of
    the gate's rejections and those late rows."""
    good = {
        "problem": "p",
        "assumptions": [],
        "derivation": ["d"],
        "final_answer": "a",
        "reasoning_score": 2,
    }
    lines = []
    for i in range(1500):
        if i % 3:
            lines.append("")  # line.blank, rejected by the gate
        elif i % 300 == 0 and i:  # a task id seen before, another body: rejected late
            lines.append(json.dumps(good | {"task_id": "t0", "problem": f"p{i}"}))
        else:
            lines.append(json.dumps(good | {"task_id": f"t{i}"}))
    source = tmp_path / "m.jsonl"
    source.write_text("\n".join(lines) + "\n")
    config = CampaignConfig(inputs=(InputSpec(str(source), "math-reasoning-v1"),)).override(
        **{"engine.workers": 1, "engine.batch_lines": 50}
    )
    written: list[int] = []
    original = writer._Parts.write

    def spy(self: Any, relative: str, disposition: str, kind: Any, table: pa.Table) -> None:
        if relative.startswith("rejected/"):
            written.append(table.num_rows)
        original(self, relative, disposition, kind, table)

    monkeypatch.setattr(writer._Parts, "write", spy)
    out = tmp_path / "out"
    manifest = run(config, out).manifest
    reasons = manifest["counts"]["by_reason"]["rejected"]
    late = reasons.pop("cross.idempotency_conflict")
    assert late >= 4
    assert reasons == {"line.blank": 1000}
    assert sum(written) == 1000 + late
    assert max(written) <= 50 + late
    rejected = pq.read_table(out / "rejected" / "part-00000.parquet")
    assert rejected["_line"].to_pylist() == sorted(rejected["_line"].to_pylist())


@pytest.mark.parametrize("sanitize", [True, False])
def test_every_row_names_the_sanitizer_version_where_sanitization_ran(
    tmp_path: Path, sanitize: bool
) -> None:
    """``_sanitizer`` (seed 002: the receipt binds the "sanitizer version"): with
    sanitization on, every row whose record or raw bytes went through the sanitizer
    carries its version (accepted, duplicate, rejected by the gate or late, as
    ``cross.idempotency_conflict``); a line over the byte limit is never held, so never
    sanitized: null. With sanitization off the column is there, all null."""
    import polars as pl

    from pipeline.output.verify import verify_run
    from pipeline.sanitize import SANITIZER_VERSION

    good = {
        "problem": "p",
        "assumptions": [],
        "derivation": ["d"],
        "final_answer": "call me at 555-0100",
        "reasoning_score": 2,
    }
    lines = [
        json.dumps(good | {"task_id": "t0"}),
        json.dumps(good | {"task_id": "t0"}),  # identical retry: a duplicate
        json.dumps(good | {"task_id": "t0", "problem": "other"}),  # conflict: rejected late
        json.dumps(good | {"task_id": "t1"}),
        "{not json",  # rejected by the gate, raw bytes screened
        json.dumps(good | {"task_id": "t2", "problem": "x" * 5000}),  # line.too_large
    ]
    export = tmp_path / "math.jsonl"
    export.write_text("\n".join(lines) + "\n")
    config = CampaignConfig(inputs=(InputSpec(str(export), "math-reasoning-v1"),)).override(
        **{"sanitize.enabled": sanitize, "limits.max_line_bytes": 4096, "engine.workers": 1}
    )
    run(config, tmp_path / "out")
    rows = pl.concat(
        [
            pl.read_parquet(p).select("_line", "_sanitizer", "_reasons")
            for p in sorted((tmp_path / "out").glob("*/**/part-*.parquet"))
        ]
    ).sort("_line")
    assert rows.height == len(lines)
    codes = [[reason["code"] for reason in row] for row in rows["_reasons"].to_list()]
    first = [row[0] if row else "" for row in codes]
    assert "line.too_large" in first
    assert any("cross.idempotency_conflict" in row for row in codes)
    expected = [
        None if not sanitize or code == "line.too_large" else SANITIZER_VERSION for code in first
    ]
    assert rows["_sanitizer"].to_list() == expected
    assert verify_run(tmp_path / "out").ok


def test_appended_reasons_equal_the_row_by_row_merge() -> None:
    """The writer appends the global phase's reasons only to the rows that gain one
    (the others are taken as they are): differential against the merge it replaced,
    every row's old reasons + its new ones (null or empty: none), across chunks."""
    from pipeline.core.reasons import REASONS_TYPE

    def reason(code: str) -> dict[str, str]:
        return {"code": code, "path": "/x", "detail": ""}

    old_rows = [[reason("a")], [], [reason("b"), reason("c")], [], [reason("d")]]
    new_rows: list[list[dict[str, str]] | None] = [
        None,
        [reason("cross.retry")],
        [],
        [reason("e"), reason("f")],
        [reason("g")],
    ]
    old = pa.chunked_array(
        [pa.array(old_rows[:2], REASONS_TYPE), pa.array(old_rows[2:], REASONS_TYPE)]
    )
    new = pa.chunked_array([pa.array(new_rows, REASONS_TYPE)])
    merged = writer._append_reasons(old, new)
    expected = [o + (n or []) for o, n in zip(old_rows, new_rows, strict=True)]
    assert merged.type == REASONS_TYPE
    assert merged.to_pylist() == expected


def test_the_write_step_does_not_import_polars_in_a_gate_worker() -> None:
    """A worker that gated its shards (no polars) imported polars at its first write
    task, ~0.3-0.4 s each, because the task's output columns were defined beside the
    global phase's polars code: unpickling a write task must not import polars."""
    import pickle
    import subprocess
    import sys

    from pipeline.decide.context import DUPLICATE_OF

    payload = pickle.dumps([DUPLICATE_OF])
    code = (
        "import pickle, sys\n"
        "import pipeline.gate.staging\n"
        "from pipeline.output.writer import write_step\n"
        f"pickle.loads({payload!r})\n"
        "sys.exit(1 if 'polars' in sys.modules else 0)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, check=False)
    assert done.returncode == 0, done.stderr.decode()


def test_parquet_bytes_do_not_change_with_the_batch_size(tmp_path: Path) -> None:
    """Arrow's Parquet writer falls back from dictionary to plain encoding once a
    column's dictionary passes 1 MiB in a row group, checked at the end of each chunk it
    is given: written a staged batch at a time, long texts (accepted rows' responses,
    rejected rows' raw lines) were encoded otherwise at 100 lines a batch than at 4,096,
    and the files' digests changed. Each row group is now one chunk."""
    lines = list(export_lines("pairwise-v2", 1000, seed=1, size=4))
    broken = [line[:-1] + b",}" for line in export_lines("pairwise-v2", 400, seed=2, size=5)]
    path = tmp_path / "pw.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines + broken))
    digests = []
    for batch_lines in (4096, 100, 7):
        config = CampaignConfig(inputs=(InputSpec(str(path), "pairwise-v2"),)).override(
            **{"engine.workers": 1, "engine.batch_lines": batch_lines}
        )
        out = tmp_path / f"out-{batch_lines}"
        run(config, out)
        digests.append(output_digests(out))
        digests[-1].pop("manifest.json")  # it names the batch size
    accepted = pq.ParquetFile(out / "accepted/pairwise-v2/part-00000.parquet").metadata
    assert accepted.row_group(0).num_rows > 512  # several batches in one row group
    assert pq.read_table(out / "rejected/part-00000.parquet").num_rows == 400
    assert digests[0] == digests[1] == digests[2]


def test_a_row_group_too_large_for_one_chunk_is_written_as_it_came(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Arrow joins at most 2 GiB of text into one array (a nested column fails to join:
    ``offset overflow``), so a row group that large is written a batch at a time rather
    than failing the run at its end; smaller ones are joined."""
    batches = [pa.table({"m": pa.array([["x" * 100]] * 10)}) for _ in range(3)]
    group = pa.concat_tables(batches)
    assert group["m"].num_chunks == 3
    assert writer._one_chunk(group)["m"].num_chunks == 1
    monkeypatch.setattr(writer, "_ONE_CHUNK_BYTES", group.nbytes)
    assert writer._one_chunk(group)["m"].num_chunks == 3
