"""The run's storage object: the staging layout, reading staged rows back (never as a
glob pattern), published files with their digests, and crossing process boundaries."""

from __future__ import annotations

import hashlib
import itertools
import pickle
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.core.config import CampaignConfig
from pipeline.storage import REJECTED_STEM, STAGING_DIR, RunStorage, parquet_batches


def _stage(storage: RunStorage, shard: int, stem: str, batches: list[list[int]]) -> None:
    schema = pa.schema([pa.field("_shard_line", pa.int64())])
    with storage.stage_writer(shard, stem, schema) as writer:
        for lines in batches:
            writer.write_batch(pa.record_batch([pa.array(lines, pa.int64())], schema=schema))


def test_the_staging_layout(tmp_path: Path) -> None:
    storage = RunStorage(tmp_path)
    assert storage.staging_root == tmp_path / STAGING_DIR == tmp_path / "_staging"
    assert storage.spill_dir() == tmp_path / "_staging" / "spill"
    assert storage.staged_path(3, "pairwise-v2") == tmp_path / "_staging/00003/pairwise-v2.arrow"
    # a kind name holding "/" stays one file name
    assert storage.staged_path(12, "a/b") == tmp_path / "_staging/00012/a_b.arrow"
    _stage(storage, 3, "pairwise-v2", [[0, 1], [2]])
    assert (tmp_path / "_staging/00003/pairwise-v2.arrow").is_file()
    assert storage.has_staged(3, "pairwise-v2")
    assert not storage.has_staged(3, REJECTED_STEM)


def test_staged_rows_read_back_batch_by_batch_and_as_a_scan(tmp_path: Path) -> None:
    storage = RunStorage(tmp_path)
    _stage(storage, 0, "k", [[0, 1], [2]])
    _stage(storage, 0, REJECTED_STEM, [[5], [6, 7]])
    batches = [t["_shard_line"].to_pylist() for t in storage.staged_batches(0, "k")]
    assert batches == [[0, 1], [2]]  # one table per staged batch, never the whole shard
    assert storage.scan_staged(0, "k").collect()["_shard_line"].to_list() == [0, 1, 2]
    rejected = [t["_shard_line"].to_pylist() for t in storage.rejected_batches(0)]
    assert rejected == [[5], [6, 7]]
    assert list(storage.rejected_batches(1)) == []  # nothing rejected: nothing staged


@pytest.mark.parametrize(
    "column",
    [
        pa.array(range(7), pa.uint64()),
        pa.array([f"key {i}" * i for i in range(7)], pa.large_string()),
        pa.array([f"key {i}" * i for i in range(7)], pa.string_view()),
        pa.array([bytes([i]) * 32 for i in range(7)], pa.binary(32)),
        pa.array([i % 2 == 0 for i in range(7)], pa.bool_()),
    ],
    ids=["uint64", "large_string", "string_view", "binary32", "bool"],
)
def test_a_shuffle_partition_reads_alone(tmp_path: Path, column: pa.Array) -> None:
    """A task's shuffle entries cut into partitions (an empty one keeps its place), each
    read back alone as the slice it was, of every type a shuffle stages."""
    storage = RunStorage(tmp_path)
    entries = pa.record_batch({"_shard_line": pa.array(range(7), pa.int64()), "v": column})
    starts = [0, 2, 2, 6, 7]
    storage.stage_partitions(3, "k.entries", entries, starts)
    for p, (lo, hi) in enumerate(itertools.pairwise(starts)):
        read = storage.staged_partition(3, "k.entries", p)
        assert read.equals(entries.slice(lo, hi - lo)), p
        assert read.schema == entries.schema
    for outside in (-1, 4):
        with pytest.raises(IndexError, match=f"partition {outside} of 4"):
            storage.staged_partition(3, "k.entries", outside)
    storage.stage_partitions(4, "k.entries", entries.slice(0, 0), [0])  # none
    with pytest.raises(IndexError):
        storage.staged_partition(4, "k.entries", 0)
    dictionary = pa.record_batch({"v": pa.array(["a"]).dictionary_encode()})
    with pytest.raises(TypeError, match="no dictionary column"):
        storage.stage_partitions(5, "k.entries", dictionary, [0, 1])


@pytest.mark.parametrize("name", ["out[1]", "out*", "out?"])
def test_staged_paths_are_never_patterns(tmp_path: Path, name: str) -> None:
    """A root whose name holds ``[``, ``*`` or ``?`` is read as the name it is: as a
    glob, ``out[1]`` names ``out1`` (and ``out*``/``out?`` match ``out1`` too)."""
    storage = RunStorage(tmp_path / name)
    decoy = RunStorage(tmp_path / "out1")
    _stage(storage, 0, "k", [[1, 2, 3]])
    _stage(decoy, 0, "k", [[99]])
    assert storage.scan_staged(0, "k").collect()["_shard_line"].to_list() == [1, 2, 3]
    assert [t.num_rows for t in storage.staged_batches(0, "k")] == [3]


def test_removing_staging_keeps_the_published_files(tmp_path: Path) -> None:
    storage = RunStorage(tmp_path)
    _stage(storage, 0, "k", [[1]])
    storage.spill_dir().mkdir()
    written = storage.write_table(
        pa.table({"x": [1, 2]}), "accepted/k/part-00000.parquet", "accepted", "k", CampaignConfig()
    )
    storage.remove_staging()
    assert not (tmp_path / "_staging").exists()
    assert [p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.parquet")] == [
        written.path
    ]


def test_published_files_are_described_as_written(tmp_path: Path) -> None:
    storage = RunStorage(tmp_path / "out[x]")
    config = CampaignConfig().override(**{"output.compression": "gzip"})
    table = pa.table({"x": list(range(10))})
    whole = storage.write_table(table, "dedupe/clusters/k.parquet", "artifact", "k", config)
    writer = storage.parquet_writer("accepted/k/part-00001.parquet", table.schema, config)
    writer.write_table(table.slice(0, 4))
    writer.write_table(table.slice(4))
    writer.close()
    part = storage.written("accepted/k/part-00001.parquet", "accepted", "k", 10)
    for entry in (whole, part):
        path = storage.root / entry.path
        assert entry.rows == 10
        assert entry.kind == "k"
        assert entry.bytes == path.stat().st_size
        assert entry.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
        metadata = pq.ParquetFile(path).metadata
        assert metadata.row_group(0).column(0).compression == "GZIP"  # the campaign's codec
    assert pq.read_table(storage.root / part.path).equals(table)


def test_the_storage_object_crosses_process_boundaries(tmp_path: Path) -> None:
    """Tasks carry it to the workers: it pickles, and compares by value (a worker keeps
    a step's state while the step's arguments compare equal)."""
    storage = RunStorage(tmp_path / "out[1]")
    copy = pickle.loads(pickle.dumps(storage))
    assert copy == storage
    assert copy.staged_path(1, "k") == storage.staged_path(1, "k")


def test_a_whole_run_table_written_again_leaves_a_map_of_the_old_one_whole(
    tmp_path: Path,
) -> None:
    """A whole-run table staged again is a new file: a table mapped from the old one (the
    global phase's state keys) still reads the old rows, never a truncated file's pages."""
    storage = RunStorage(tmp_path)
    storage.stage_whole("k.state", pa.table({"x": list(range(100_000))}))
    old = storage.whole_table("k.state")
    path = tmp_path / STAGING_DIR / "k.state.arrow"
    before = path.stat().st_ino
    storage.stage_whole("k.state", pa.table({"x": [7]}))
    # a new file (checked first: reading a truncated file's map kills the process)
    assert path.stat().st_ino != before
    assert old.column("x").to_pylist() == list(range(100_000))
    assert storage.whole_table("k.state").column("x").to_pylist() == [7]


def test_a_table_written_in_parts_is_the_whole_tables_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A published table is cut into row groups of ``ROW_GROUP_ROWS`` rows, whether it
    comes whole or in parts of whole row groups (the cluster table, made a part at a
    time): the same file either way, and no part is left out of its count."""
    from pipeline.storage import run_storage

    monkeypatch.setattr(run_storage, "ROW_GROUP_ROWS", 4)
    storage = RunStorage(tmp_path)
    config = CampaignConfig()
    table = pa.table({"x": list(range(10)), "y": [str(i) for i in range(10)]})
    whole = storage.write_table(table, "whole.parquet", "artifact", "k", config)
    parts = (table.slice(lo, 8) for lo in (0, 8))
    parted = storage.write_table(parts, "parts.parquet", "artifact", "k", config)
    assert (whole.rows, parted.rows) == (10, 10)
    assert whole.sha256 == parted.sha256
    metadata = pq.ParquetFile(tmp_path / "parts.parquet").metadata
    assert [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)] == [4, 4, 2]
    with pytest.raises(ValueError, match="no table to write"):
        storage.write_table(iter(()), "none.parquet", "artifact", "k", config)


def test_parquet_batches_hold_a_row_group_not_the_file(tmp_path: Path) -> None:
    """A Parquet file read a batch at a time holds about a row group's pages: pyarrow's
    reader pre-buffers every row group's columns by default, which held the whole of a
    run's cluster table (a row per cluster) while the report read it."""
    rng = np.random.default_rng(7)
    values = [rng.bytes(256) for _ in range(32_768)]  # 8 MiB that do not compress
    table = pa.table({"x": pa.array(values, pa.binary()), "n": pa.array(range(32_768))})
    path = tmp_path / "table.parquet"
    pq.write_table(table, path, row_group_size=1024, compression="none")
    before = pa.total_allocated_bytes()
    batches = parquet_batches(path, ["x", "n"], 1024)
    first = next(batches)
    held = pa.total_allocated_bytes() - before
    assert held < path.stat().st_size / 8, f"{held:,} bytes held for a file of 32 row groups"
    assert pa.Table.from_batches([first, *batches]).equals(table)
    # one column, and batches that cut row groups
    assert pa.Table.from_batches(list(parquet_batches(path, ["n"], 700))).equals(
        table.select(["n"])
    )
