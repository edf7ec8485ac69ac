"""One run's storage: its temporary output root, the staging area inside it, and every
file the run writes there or reads back (:class:`RunStorage`).

The gate writes staged rows through it, the global phase reads them through it (its
stages only through :class:`~pipeline.decide.context.GlobalContext`), and the writer
reads them and writes the published Parquet files through it. Nothing else in a run
builds a path under the output root.
"""

from __future__ import annotations

import itertools
import shutil
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from pipeline.core.config import CampaignConfig
from pipeline.records.lineage import file_sha256

if TYPE_CHECKING:
    import polars as pl

__all__ = [
    "REJECTED_STEM",
    "ROW_GROUP_ROWS",
    "STAGING_DIR",
    "RunStorage",
    "WrittenFile",
    "parquet_batches",
    "writer_options",
]

#: The staging area's directory under the output root; removed before OUT is published.
STAGING_DIR: Final = "_staging"
#: The staged stem of a shard's lines the gate rejected (the other stems are kinds, and
#: kinds' row keys).
REJECTED_STEM: Final = "rejected"
#: A kind's stem plus this names its row keys (:meth:`RunStorage.row_keys_stem`).
ROW_KEYS_SUFFIX: Final = ".row-keys"
#: the staged stem's suffix of a shard's global decisions of a kind
DECISIONS_SUFFIX: Final = ".decisions"
#: Rows per Parquet row group of a published file: the writer's parts
#: (:mod:`pipeline.output.writer`) and the whole-run artifacts. A reader of one then
#: holds a row group, not the whole table (a dedupe cluster table has a row per cluster:
#: as many as half the rows of a run).
ROW_GROUP_ROWS: Final = 4096


@dataclass(frozen=True)
class WrittenFile:
    path: str  # relative to the output directory
    disposition: str
    kind: str | None
    rows: int
    bytes: int
    sha256: str


def parquet_batches(
    path: str | Path, columns: list[str] | None = None, batch_size: int = 1 << 16
) -> Iterator[pa.RecordBatch]:
    """A Parquet file's ``columns`` (all: ``None``), ``batch_size`` rows at a time, holding
    a row group's pages, not the file. pyarrow's ``ParquetFile`` pre-buffers by default:
    its reader first read the columns of every row group into memory, so a run's report
    held the whole of a cluster table (a row per cluster: 10.6 MB of a 9.8 MB file of
    233,557 clusters, against 1.5 MB without), and a reader of any file the whole file."""
    parquet = pq.ParquetFile(path, pre_buffer=False)
    yield from parquet.iter_batches(batch_size=batch_size, columns=columns)


def writer_options(config: CampaignConfig) -> dict[str, object]:
    """The Parquet writer's settings for a campaign (``[output]``)."""
    return {
        "compression": config.output.compression,
        "compression_level": config.output.compression_level,
    }


@dataclass(frozen=True)
class RunStorage:
    """Where one run's files live: ``root`` is its temporary output directory, renamed
    into place as ``OUT`` once the run is complete (:mod:`pipeline.output.outdir`).

    Layout under ``root``::

        _staging/<shard>/<stem>.arrow   a shard's gated rows of one kind (``stem`` is the
                                        kind, ``/`` written ``_``) or ``rejected``; or
                                        a kind's row keys (``<kind>.row-keys``), its
                                        submissions as sent (``<kind>.submissions``,
                                        with sanitization on), or
                                        its global decisions (``<kind>.decisions``), or
                                        a global stage's per-shard input to its
                                        tasks (``<kind>.near-texts``)
                                        (Arrow IPC files, one record batch per gate batch)
        _staging/<shard>/<stem>.parts   a shard's entries of a shuffle, by partition
                                        (:meth:`stage_partitions`): near dedupe's
                                        (``<kind>.near-entries``), a hash-first or
                                        grouping check's (``<kind>.hash-<check>``)
        _staging/<partition>/<stem>.arrow
                                        a near candidate task's pair codes, sorted
                                        (``<kind>.near-codes``), under its partition's
                                        number, and (``.parts``) the texts they name by
                                        sets task (``<kind>.near-ids``); or a near sets
                                        task's shingle sets (``<kind>.near-sets``), under
                                        its own number (:mod:`pipeline.dedupe.near_check`)
        _staging/<stem>.arrow           a table of the whole run (:meth:`stage_whole`):
                                        where each near text is stored
                                        (``<kind>.near-text-addresses``); the
                                        global phase's keys of every row of a kind
                                        (``<kind>.state``, memory-mapped); the rows
                                        dedupe's exact groups' leaders lead
                                        (``<kind>.led``, memory-mapped)
        _staging/<stem>/                a step's files of the whole run
                                        (:meth:`whole_directory`): a survivor column
                                        of text's sorted runs and order keys
                                        (``<kind>.text-order``, the keys memory-mapped)
        _staging/spill/                 compressed inputs decompressed, a file per shard
        <relative>                      the published files (``accepted/<kind>/part-…``,
                                        artifacts such as ``dedupe/clusters/<kind>.parquet``)

    The object is small, immutable and picklable: the tasks that cross process
    boundaries (the gate's, the writer's, a stage's per-shard step) carry it, and the
    worker reads and writes through it. Paths are never patterns: OUT's name may hold
    ``[``, ``*`` or ``?`` (polars globs the paths it scans unless told not to).

    Only local paths today: an OUT on an object store is written here, in a local work
    directory, and uploaded once complete (:mod:`pipeline.output.remote`). A root on a
    filesystem pyarrow understands (an object-store URI, ``s3://bucket/run``) would need: a ``pyarrow.fs.FileSystem`` resolved from the
    URI (``FileSystem.from_uri``) kept beside the root path (pyarrow's filesystems
    pickle); every open through it (``open_output_stream`` for staged IPC files and
    Parquet parts, ``open_input_file`` for staged batches) instead of ``open``/``mkdir``
    (an object store has no directories); polars scans given the URI with
    ``storage_options``; digests computed from the bytes as they are written, since
    :func:`~pipeline.records.lineage.file_sha256` re-reads a local file; staging removed
    by deleting the prefix; the spill directory kept on the parent's local disk (the
    shard reader opens spill files by path); and a publish step other than the atomic
    directory rename of :mod:`pipeline.output.outdir` (object stores cannot rename a
    prefix), e.g. the manifest written last as the commit marker.
    """

    root: Path

    # -- the staging area ------------------------------------------------------------

    @property
    def staging_root(self) -> Path:
        return self.root / STAGING_DIR

    def spill_dir(self) -> Path:
        """Where compressed inputs are decompressed to, one plain file per shard."""
        return self.staging_root / "spill"

    def staged_path(self, shard: int, stem: str) -> Path:
        """Where a shard's staged rows of one kind (or ``rejected``) live."""
        return self.staging_root / f"{shard:05d}" / f"{stem.replace('/', '_')}.arrow"

    def stage_writer(self, shard: int, stem: str, schema: pa.Schema) -> ipc.RecordBatchFileWriter:
        """A new staged file for a shard's rows of one kind (or ``rejected``); the
        caller writes its batches and closes it."""
        path = self.staged_path(shard, stem)
        path.parent.mkdir(parents=True, exist_ok=True)
        return ipc.new_file(str(path), schema)

    def stage_table(
        self, shard: int, stem: str, table: pa.Table, batch_rows: int | None = None
    ) -> None:
        """Stage a whole table for a shard at once (e.g. a stage's per-shard input to the
        engine's tasks, such as the near-dedupe text map), in record batches of at most
        ``batch_rows`` rows where given (:meth:`staged_batches` reads one at a time)."""
        with self.stage_writer(shard, stem, table.schema) as writer:
            writer.write_table(table, max_chunksize=batch_rows)

    def stage_whole(self, stem: str, table: pa.Table) -> None:
        """Stage a table that belongs to the whole run, not to a shard (e.g. where each
        near-dedupe text is stored, for the near candidate and sets tasks)."""
        with self.whole_writer(stem, table.schema) as writer:
            writer.write_table(table)

    def whole_writer(self, stem: str, schema: pa.Schema) -> ipc.RecordBatchFileWriter:
        """A new staged table of the whole run (:meth:`stage_whole`), written a batch at
        a time by the caller, who closes it. An earlier file of that name is unlinked
        first, not truncated: a map of it (:meth:`whole_table`) keeps its pages."""
        path = self._whole_path(stem)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        return ipc.new_file(str(path), schema)

    def whole_table(self, stem: str) -> pa.Table:
        """A table :meth:`stage_whole` staged, memory-mapped (a take reads its pages)."""
        with ipc.open_file(pa.memory_map(str(self._whole_path(stem)))) as reader:
            return reader.read_all()

    def whole_directory(self, stem: str) -> Path:
        """A directory of the whole run's, for a step that writes files of its own (a
        survivor column of text's sorted runs and order keys, ``<kind>.text-order``)."""
        return self.staging_root / stem.replace("/", "_")

    def _whole_path(self, stem: str) -> Path:
        return self.staging_root / f"{stem.replace('/', '_')}.arrow"

    def staged_table(self, shard: int, stem: str) -> pa.Table:
        """A staged file as one memory-mapped table: nothing is read until used, so a
        slice of it reads only its own pages."""
        with ipc.open_file(pa.memory_map(str(self.staged_path(shard, stem)))) as reader:
            return reader.read_all()

    def row_keys_stem(self, kind: str) -> str:
        """The staged stem of a shard's row keys of ``kind`` (the dedupe keys the gate
        computes per row, :mod:`pipeline.dedupe.row_keys`), one row per staged row of the
        kind, in the same order; the writer never reads it."""
        return f"{kind}{ROW_KEYS_SUFFIX}"

    def submissions_stem(self, kind: str) -> str:
        """The staged stem of a shard's submissions of ``kind`` as sent (with
        sanitization on: each staged row's key and body digests before redaction, which
        the replay rule compares; :data:`~pipeline.gate.gate.SUBMISSION_SCHEMA`), one row
        per staged row of the kind, in the same order; the writer never reads it."""
        return f"{kind}.submissions"

    def state_stem(self, kind: str) -> str:
        """The staged stem of the whole run's table of every staged row's keys of
        ``kind`` (``_shard``, ``_shard_line``; a record batch per shard), which the global
        phase's state memory-maps (:meth:`~pipeline.decide.context.GlobalContext.state`)."""
        return f"{kind}.state"

    def led_stem(self, kind: str) -> str:
        """The staged stem of the whole run's table of the rows of ``kind`` that dedupe's
        exact groups' leaders lead, each with its leader (places: ``rows`` in the state,
        ``leaders`` among the rows the matching decides), which the dedupe stage
        memory-maps until it has staged their decisions."""
        return f"{kind}.led"

    def kept_stem(self, kind: str) -> str:
        """The staged stem of the whole run's table of the lineage of each row of
        ``kind`` that dedupe keeps in favour of others (``_source``, ``_line``,
        ``_record_sha256``, in cluster order), which the dedupe stage memory-maps until
        it has written its cluster table and staged its decisions."""
        return f"{kind}.kept"

    def decisions_stem(self, kind: str) -> str:
        """The staged stem of a shard's decisions of ``kind``: the global phase's merged
        decisions for its rows (:mod:`pipeline.decide.by_shard`), which its write task
        overlays on the staged rows."""
        return f"{kind}{DECISIONS_SUFFIX}"

    def stage_decisions_stem(self, kind: str, stage: int) -> str:
        """The staged stem of one part of a whole-run stage's decisions for a shard's
        rows of ``kind`` (the ``stage``-th part the kind's stages made), which the
        shard's merge task reads (:mod:`pipeline.decide.by_shard`)."""
        return f"{kind}{DECISIONS_SUFFIX}-{stage}"

    def has_staged(self, shard: int, stem: str) -> bool:
        return self.staged_path(shard, stem).exists()

    def scan_staged(self, shard: int, stem: str) -> pl.LazyFrame:
        """A shard's staged rows of one kind as a polars scan (memory-mapped, so a
        projection reads only its columns)."""
        import polars as pl  # here: the gate's workers, which import this module, never need it

        return pl.scan_ipc(self.staged_path(shard, stem), glob=False)

    def staged_batches(self, shard: int, stem: str) -> Iterator[pa.Table]:
        """A staged table one record batch at a time, each read into memory and freed
        after use (a memory map would keep every page it has read resident to the end)."""
        with ipc.open_file(pa.OSFile(str(self.staged_path(shard, stem)))) as reader:
            for i in range(reader.num_record_batches):
                yield pa.Table.from_batches([reader.get_batch(i)])

    def stage_partitions(
        self, shard: int, stem: str, entries: pa.RecordBatch, starts: Sequence[int]
    ) -> None:
        """Stage one task's entries of a shuffle (a shard's, or a candidate task's) cut
        into partitions: partition ``p`` is ``entries[starts[p]:starts[p + 1]]``, read
        alone by :meth:`staged_partition`. The file: the schema's IPC message, each
        partition's record batch as an IPC message, then the offsets where each begins
        and the last ends, and their count, as little-endian int64.

        Not an Arrow IPC file: a shuffle reads every task's file once per partition, and
        the IPC file's footer names every batch, so each read parsed a footer of all the
        partitions: ~106 µs a (partition, file) pair at 2,400 partitions, where reading
        two offsets costs ~32 (``benchmarks/shuffle_reads.py``), and a shuffle has files ×
        partitions pairs (36 M at 1 TB: docs/scale.md)."""
        if any(pa.types.is_dictionary(f.type) for f in entries.schema):
            raise TypeError(f"{stem}: a shuffle's entries hold no dictionary column")
        path = self._partitions_path(shard, stem)
        path.parent.mkdir(parents=True, exist_ok=True)
        with pa.OSFile(str(path), "wb") as out:
            offsets = [out.write(entries.schema.serialize())]
            for lo, hi in itertools.pairwise(starts):
                offsets.append(offsets[-1] + out.write(entries.slice(lo, hi - lo).serialize()))
            out.write(struct.pack(f"<{len(offsets) + 1}q", *offsets, len(offsets)))

    def staged_partition(self, shard: int, stem: str, partition: int) -> pa.RecordBatch:
        """One partition of a task's staged shuffle entries (:meth:`stage_partitions`),
        read into memory: its own bytes, the schema and two offsets."""
        with pa.OSFile(str(self._partitions_path(shard, stem))) as source:
            table = source.size() - 8
            (count,) = struct.unpack("<q", source.read_at(8, table))
            if not 0 <= partition < count - 1:
                raise IndexError(f"{stem}: partition {partition} of {count - 1}")
            table -= 8 * count
            (schema_end,) = struct.unpack("<q", source.read_at(8, table))
            lo, hi = struct.unpack("<2q", source.read_at(16, table + 8 * partition))
            schema = ipc.read_schema(pa.py_buffer(source.read_at(schema_end, 0)))
            source.seek(lo)
            return ipc.read_record_batch(source.read_buffer(hi - lo), schema)

    def _partitions_path(self, shard: int, stem: str) -> Path:
        return self.staged_path(shard, stem).with_suffix(".parts")

    def staged_column_batches(
        self, shard: int, stem: str, columns: Sequence[str]
    ) -> Iterator[pa.RecordBatch]:
        """Some columns of a staged table, one record batch at a time, each through a
        memory map of its own: only that batch's pages of those columns are read, and
        they leave the process's memory with the batch (one map for the whole file kept
        every page it had read resident to the end)."""
        path = str(self.staged_path(shard, stem))
        with ipc.open_file(pa.memory_map(path)) as reader:
            count = reader.num_record_batches
        for i in range(count):
            with ipc.open_file(pa.memory_map(path)) as reader:
                yield reader.get_batch(i).select(list(columns))

    def rejected_batches(self, shard: int) -> Iterator[pa.Table]:
        """A shard's lines the gate rejected, in line order, a staged batch at a time
        (none staged: none). Never the whole shard at once: a shard of blank lines holds
        millions."""
        if self.has_staged(shard, REJECTED_STEM):
            yield from self.staged_batches(shard, REJECTED_STEM)

    def remove_staging(self) -> None:
        """Delete the staging area (spill files included) before OUT is published."""
        shutil.rmtree(self.staging_root, ignore_errors=True)

    # -- published files -------------------------------------------------------------

    def write_table(
        self,
        table: pa.Table | Iterable[pa.Table],
        relative: str,
        disposition: str,
        kind: str | None,
        config: CampaignConfig,
    ) -> WrittenFile:
        """Write one Parquet file with the campaign's settings, in row groups of
        :data:`ROW_GROUP_ROWS` rows; return its manifest entry. ``table`` may come as
        parts (at least one, each of the first's schema), each written as it is made: a
        table made a part at a time is never whole in memory."""
        rows, writer = 0, None
        try:
            for part in [table] if isinstance(table, pa.Table) else table:
                if writer is None:
                    writer = self.parquet_writer(relative, part.schema, config)
                writer.write_table(part, row_group_size=ROW_GROUP_ROWS)
                rows += part.num_rows
        finally:
            if writer is not None:
                writer.close()
        if writer is None:
            raise ValueError(f"{relative}: no table to write")
        return self.written(relative, disposition, kind, rows)

    def parquet_writer(
        self, relative: str, schema: pa.Schema, config: CampaignConfig
    ) -> pq.ParquetWriter:
        """A Parquet file written in row groups (the writer's parts); once it is closed,
        :meth:`written` describes it."""
        return pq.ParquetWriter(str(self._published(relative)), schema, **writer_options(config))

    def written(self, relative: str, disposition: str, kind: str | None, rows: int) -> WrittenFile:
        """The manifest entry of a finished file: its size and SHA-256 as written."""
        path = self.root / relative
        return WrittenFile(
            relative, disposition, kind, rows, path.stat().st_size, file_sha256(path)
        )

    def _published(self, relative: str) -> Path:
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        return path
