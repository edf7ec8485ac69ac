"""``rowgate dedupe``: the dedupe stage's decisions on existing Parquet datasets.

A dataset produced elsewhere (or a run's ``accepted/<kind>/``) is deduped with a record
kind's key or with explicit text/key columns, and written as::

    OUT/kept.parquet          rows kept, columns as read
    OUT/duplicates.parquet    rows removed + _duplicate_of, _dedupe_rule, _dedupe_cluster,
                              _similarity_estimated, _similarity_verified, _dedupe_reason
    OUT/clusters.parquet      one row per kept row that has duplicates
    OUT/split_groups.parquet  task / meta groups found in more than one split
    OUT/summary.json          format, inputs (path, bytes, SHA-256, rows), settings, counts

Such an OUT given as a dataset stands for its ``kept.parquet`` (:func:`_dataset_files`),
as a run's OUT stands for its accepted parts. The order key is (input path as given,
sorted; row); rows keep ``_source``/``_line`` when the dataset is rowgate output, else
they get the file path and 1-based row number.
``OUT`` appears atomically, as a run's output does.

Memory: whenever a rule is on, each row's keys are staged a slice at a time by the
engine's workers (:mod:`pipeline.jobs.dataset_keys`, as the gate does for a run: the key
columns are read only by the rules that need them, the fingerprints alone by exact
dedupe on them); the exact and normalised groups are found and the near candidates
found and checked on the engine, and the decision holds only the rows that take part
(:mod:`pipeline.dedupe.participants`), reading back the verified pairs' signatures and
the lineage of the rows pointers name. Of every row it holds the split label, and a
survivor rule's column only where its type has no order keys (:class:`_SurvivorColumn`:
otherwise each row's order key is a memory-mapped file's); for several splits, the rows
a split group can hold are found on the engine too
(:func:`~pipeline.jobs.dataset_keys.split_group_rows`). The rows
themselves are then copied to ``kept.parquet`` and ``duplicates.parquet`` a slice of a
file at a time (:data:`_WRITE_BYTES` and :data:`_WRITE_ROWS`, whole row groups).
Partitioning the decision itself is the scale issue's (docs/scale.md).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.core.arrays import detached, places_in
from pipeline.core.config import ConfigError, DedupeSettings, EngineSettings
from pipeline.core.files import input_type
from pipeline.dedupe.keys import DedupeKey
from pipeline.dedupe.participants import dense_ranking, mapped_ranking, survivor_ranks
from pipeline.dedupe.partitions import Ranking
from pipeline.dedupe.splits import field_expr
from pipeline.dedupe.survivor_keys import mapped_order_keys, text_order_keys
from pipeline.dedupe.table import (
    CLUSTER_PART_ROWS,
    DedupeOutcome,
    RemovedRows,
    dedupe_table,
    group_fields,
    has_order_keys,
    match_duplicates,
    required_columns,
    survivor_rank,
    survivor_value,
)
from pipeline.engines import Engine, get_engine
from pipeline.gate.reader import JSONL_SUFFIXES, InputError, refuse_same_files
from pipeline.jobs.dataset_keys import (
    KEY_SLICE_BYTES,
    KEY_SLICE_ROWS,
    DatasetKeys,
    KeySlice,
    KeyTask,
    check_comparable,
    fitted,
    made_lineage,
    resolved_key,
    split_group_rows,
    staged_keys,
)
from pipeline.kinds import KINDS, UnknownKindError, check_kind_names, get_kind
from pipeline.output.manifest import MANIFEST_NAME, ManifestError, load_manifest
from pipeline.output.outdir import OutputClaim, claim_output, output_format
from pipeline.output.remote import RemoteClaim, RemoteOut
from pipeline.records.lineage import SHA256_HEX, FileStamp, file_sha256
from pipeline.storage import RunStorage

__all__ = ["DEDUPE_FORMAT", "DatasetInput", "DatasetResult", "dedupe_dataset"]

#: ``summary.json``'s format: it also proves that rowgate wrote OUT (:mod:`pipeline.output.outdir`)
DEDUPE_FORMAT: Final = "rowgate-dedupe/1"
#: The name the ``--text``/``--key`` columns' key goes by where a config table is keyed
#: by record kind (``[dedupe.split_groups] columns = ["meta"]``), and in the summary
COLUMNS: Final = "columns"

#: the rows a dedupe's OUT kept (what it stands for as a dataset)
_KEPT: Final = "kept.parquet"
#: the rows it removed, each with its verdict columns
_DUPLICATES: Final = "duplicates.parquet"

_OUTPUT_COLUMNS: Final = (
    "_duplicate_of",
    "_dedupe_rule",
    "_dedupe_cluster",
    "_similarity_estimated",
    "_similarity_verified",
)
#: about how many bytes of one input (decoded) are copied to the outputs at a time: whole
#: row groups, as many as fit (at least one)
_WRITE_BYTES: Final = 8 << 20
#: ...and at most this many rows (a larger row group in pieces of as many): the metadata's sizes
#: are encoded sizes, and a dictionary-encoded column of repeated texts decodes to far
#: more (7 groups of 100,000 rows, 0.2 MB each by the metadata, were one 700,000-row
#: slice of ~280 MB)
_WRITE_ROWS: Final = 1 << 16
#: a column that holds a file's row count while none of its columns is read
_PLACEHOLDER: Final = "__rowgate_rows"
#: columns the dedupe stage adds to the rows it reads (a row's split, its row id) and the
#: placeholder: a dataset holding one is refused, since its values would be overwritten
#: and then dropped
_RESERVED_COLUMNS: Final = ("_split", "_row", _PLACEHOLDER)
#: the content fingerprint's column
_FINGERPRINT: Final = "_content_sha256"
#: lineage and digests the decision reads when a dataset has them
_DECISION_EXTRAS: Final = ("_source", "_line", "_record_sha256", "_kind")


@dataclass(frozen=True)
class DatasetInput:
    """A Parquet file or a directory of them, optionally labelled with a split."""

    path: str
    split: str | None = None


@dataclass
class DatasetResult:
    out: Path | RemoteOut
    summary: dict[str, Any]


def _expand(inputs: Sequence[DatasetInput]) -> list[DatasetInput]:
    files: dict[str, DatasetInput] = {}
    for given in inputs:
        path = Path(given.path)
        if input_type(path, given.path) == "directory":  # a FIFO or device: refused
            found = [DatasetInput(str(p), given.split) for p in _dataset_files(path)]
        else:
            _refuse_jsonl(path)
            found = [given]
        for item in found:
            if item.path in files:
                raise InputError(f"{item.path}: given more than once")
            files[item.path] = item
    refuse_same_files((p, p) for p in files)
    return [files[p] for p in sorted(files)]


def _dataset_files(directory: Path) -> list[Path]:
    """The Parquet files a directory stands for. A run's output directory stands for the
    ``accepted`` parts its manifest lists: its other tables (rejected, duplicates, dedupe
    clusters) are no data, and a file the manifest does not list is no part of the run.
    An earlier dedupe's output (its ``summary.json`` names a ``rowgate-dedupe/`` format)
    stands for its ``kept.parquet``, the rows it kept: its duplicates, clusters and split
    groups are its bookkeeping (before, they were read as rows, ``_source`` the table)."""
    if (output_format(directory) or "").startswith(DEDUPE_FORMAT.split("/")[0] + "/"):
        kept = directory / _KEPT
        if not kept.is_file():
            raise InputError(f"{directory}: a rowgate dedupe output without its {_KEPT}")
        return [kept]
    if (directory / MANIFEST_NAME).is_file():
        manifest = load_manifest(directory)
        try:
            members = sorted(
                directory / entry["path"]
                for entry in manifest["outputs"]
                if entry["disposition"] == "accepted"
            )
        except (KeyError, TypeError) as exc:
            raise ManifestError(
                f"{directory / MANIFEST_NAME} lacks or mangles its list of outputs ({exc!r})"
            ) from None
    else:  # a FIFO named like a table is refused, never opened nor skipped
        # in any case (``a.PARQUET`` was left out without a word), as a run's JSONL names
        found = sorted(p for p in directory.rglob("*") if p.name.lower().endswith(".parquet"))
        members = [p for p in found if input_type(p, str(p)) == "file"]
    if not members:
        raise InputError(f"{directory}: directory holds no .parquet files (in any case)")
    return members


def _refuse_jsonl(path: Path) -> None:
    if path.name.endswith(JSONL_SUFFIXES):
        raise InputError(
            f"{path}: rowgate dedupe reads Parquet; gate JSONL first with "
            f"`rowgate run {path} --kind KIND --out OUT` (a run dedupes its rows as it goes), "
            "then `rowgate dedupe OUT` for a further pass"
        )


def _resolve_key(
    files: list[DatasetInput],
    schemas: list[pl.Schema],
    kind: str | None,
    text: Sequence[str],
    keys: Sequence[str],
) -> tuple[str, DedupeKey | None, bool]:
    """(kind name, key, whether ``_content_sha256`` may serve as the exact key)."""
    if text or keys:
        return kind or COLUMNS, resolved_key(kind, text, keys), False
    if kind is None:
        found = {
            value
            for item, schema in zip(files, schemas, strict=True)
            if "_kind" in schema
            for value in pl.scan_parquet(item.path, glob=False)
            .select(pl.col("_kind").drop_nulls().unique())
            .collect()["_kind"]
            .to_list()
        }
        if len(found) == 1:
            kind = str(found.pop())
    if kind is None:
        raise ConfigError(
            "dedupe: give --kind, or --text/--key columns (the dataset names no single _kind)"
        )
    if kind not in KINDS:
        raise InputError(str(UnknownKindError(kind)))
    return kind, get_kind(kind).dedupe_key(), True


def _schema(item: DatasetInput) -> pl.Schema:
    """One input's columns, as polars reads them, checked for the columns dedupe writes
    itself (its bookkeeping, its lineage pair)."""
    try:
        schema = pl.scan_parquet(item.path, glob=False).collect_schema()  # a file: no pattern
        # a type polars names but cannot hold (a decimal of more than 38 digits) fails
        # only when a frame is made of it: an internal error, exit 4
        pl.DataFrame(schema=schema)
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise InputError(f"{item.path}: not a readable Parquet file ({exc})") from None
    reserved = [c for c in _RESERVED_COLUMNS if c in schema]
    if reserved:
        raise InputError(
            f"{item.path}: has a column named {reserved[0]!r}, which rowgate dedupe uses "
            "for its own bookkeeping; rename that column first"
        )
    half = [c for c in ("_source", "_line") if c in schema]
    if len(half) == 1:
        # lineage is both columns; one alone is the dataset's own data, never overwritten
        other = "_line" if half == ["_source"] else "_source"
        raise InputError(
            f"{item.path}: has a column {half[0]!r} but no {other!r}: rowgate dedupe "
            "writes its lineage as that pair; rename the column first"
        )
    if len(half) == 2 and not (schema["_source"] == pl.String and schema["_line"].is_integer()):
        raise InputError(
            f"{item.path}: its '_source' and '_line' columns are not lineage (a string "
            f"and an integer; they are {schema['_source']} and {schema['_line']}): rename "
            "them first"
        )
    if "_record_sha256" in schema and schema["_record_sha256"] not in (pl.String, pl.Null):
        # pointers name a kept row by it: a digest of another type cannot be one
        raise InputError(
            f"{item.path}: its '_record_sha256' column is not lineage (a string of hex "
            f"digits; it is {schema['_record_sha256']}): rename it first"
        )
    return pl.Schema(schema)


def _rows(
    item: DatasetInput,
    schema: pl.Schema,
    columns: Sequence[str] | None,
    rows: tuple[int, int] | None = None,
    *,
    lineage: bool = True,
) -> pl.DataFrame:
    """One input's rows (``rows``: the slice (first, count) of them, else all), with
    ``columns`` (else all), its lineage (its own, else the file's path and 1-based row
    number) and without an earlier dedupe's verdicts. The lineage is added after the
    slice: computed before it, the slice was no longer pushed down into the read, and
    every slice read the whole file."""
    stale = {*_OUTPUT_COLUMNS, "_dedupe_reason"}
    present = [c for c in schema if (columns is None or c in columns) and c not in stale]
    first, count = rows if rows is not None else (0, None)
    try:
        if present:
            scan = pl.scan_parquet(item.path, glob=False).select(present)  # a file: no pattern
            frame = (scan if count is None else scan.slice(first, count)).collect()
        else:  # no column to read (none wanted, or only old verdicts): the rows still count
            total = pq.read_metadata(item.path).num_rows - first
            height = total if count is None else min(count, total)
            frame = pl.DataFrame({_PLACEHOLDER: np.zeros(max(height, 0), np.int8)})
    except (pl.exceptions.PolarsError, OSError, pa.ArrowException) as exc:
        raise InputError(f"{item.path}: not a readable Parquet file ({exc})") from None
    if not lineage:
        return frame.drop(_PLACEHOLDER, strict=False)
    lines = pl.int_range(first + 1, first + frame.height + 1, dtype=pl.Int64)
    made = made_lineage(schema.names(), item.path, lines)
    return frame.with_columns(**made).drop(_PLACEHOLDER, strict=False)


def _read(
    files: list[DatasetInput],
    schemas: list[pl.Schema],
    columns: Sequence[str],
    *,
    lineage: bool = True,
) -> tuple[pl.DataFrame, list[int]]:
    """The ``columns`` the decision reads of every row, with ``_split`` and (unless not
    ``lineage``) lineage, and each input's number of rows."""
    frames = [
        _rows(item, schema, columns, lineage=lineage).with_columns(
            _split=pl.lit(item.split, pl.String)
        )
        for item, schema in zip(files, schemas, strict=True)
    ]
    return _combined(frames, files), [f.height for f in frames]


def _combined(frames: list[pl.DataFrame], files: list[DatasetInput]) -> pl.DataFrame:
    """The inputs' frames as one (a column one lacks is null in its rows; a type widened
    to the common one, which changes no value: :func:`_refuse_changed_values`), or an
    :class:`InputError` naming the first input whose columns do not fit those before it."""
    try:
        return pl.concat(frames, how="diagonal_relaxed")
    except pl.exceptions.PolarsError as exc:
        for i in range(1, len(frames)):
            try:
                pl.concat([f.head(0) for f in frames[: i + 1]], how="diagonal_relaxed")
            except pl.exceptions.PolarsError as first:
                raise InputError(
                    f"{files[i].path}: its columns do not fit the inputs' before it ({first})"
                ) from None
        raise InputError(f"the inputs do not share compatible columns ({exc})") from None


def _refuse_changed_values(files: list[DatasetInput], schemas: list[pl.Schema]) -> None:
    """Before any work, an :class:`InputError` naming the first input and column whose
    values the inputs' common type for that column would change (:func:`fitted`: an
    integer above 2**53 where another input holds floats). Only the columns an input
    holds in another type than the common one are read, a piece at a time; the reads
    that widen a column later (the key tasks, the split groups' checks, the copy) check
    it again."""
    layout = _combined([pl.DataFrame(schema=schema) for schema in schemas], files).schema
    for item, schema in zip(files, schemas, strict=True):
        changed = [c for c, dtype in schema.items() if layout[c] != dtype]
        if not changed:
            continue
        common = pl.DataFrame(schema={c: layout[c] for c in changed})
        for lo, length in _pieces(item.path):
            fitted(common, _rows(item, schema, changed, (lo, length), lineage=False), item.path)


def _listed(files: list[DatasetInput], rows: list[int]) -> list[dict[str, Any]]:
    """The inputs as the summary lists them (each file hashed once, after the reads)."""
    return [
        {
            "path": item.path,
            "split": item.split,
            "rows": count,
            "bytes": os.path.getsize(item.path),
            "sha256": file_sha256(item.path),
        }
        for item, count in zip(files, rows, strict=True)
    ]


def _columns_read(
    schemas: list[pl.Schema],
    key: DedupeKey | None,
    settings: DedupeSettings,
    name: str,
    fingerprint: bool,
    *,
    texts: bool = True,
) -> list[str]:
    """The columns the decision reads, of those the inputs have: the payload the
    matching needs (:func:`~pipeline.dedupe.table.required_columns`), the key columns
    when no fingerprint stands for them (in every input), the fingerprint when it may,
    and lineage. A member the kind stores apart is read by its column's name
    (:func:`_apart`)."""
    apart = _apart(name, schemas)
    wanted = [apart.get(c, c) for c in required_columns(key, settings, name, texts=texts)]
    # the key columns decide exact duplicates where an input has no fingerprint (unless
    # the key tasks stage their digests: ``texts=False``)
    unprinted = not (fingerprint and all("_content_sha256" in s for s in schemas))
    if texts and key is not None and unprinted:
        wanted += list(key.columns)
    if fingerprint:
        wanted.append("_content_sha256")
    wanted += _DECISION_EXTRAS
    available = {c for schema in schemas for c in schema}
    return [c for c in dict.fromkeys(wanted) if c in available]


def _apart(name: str, schemas: list[pl.Schema]) -> dict[str, str]:
    """The kind's members stored apart under another column name
    (:attr:`~pipeline.kinds.base.RecordKind.apart`: pw-decide-row's ``meta`` is the
    ``_meta`` column of a run's output) that the inputs hold so, by member: the split
    groups name members (``meta.group``), and a run's dedupe stage reads them by those
    names. Read by the member's name, they were not found, and no ``meta`` group was
    ever checked."""
    if name not in KINDS:
        return {}
    return {
        member: column
        for member, column in get_kind(name).apart.items()
        if any(column in s for s in schemas) and not any(member in s for s in schemas)
    }


def _needs_key_columns(frame: pl.DataFrame, key: DedupeKey) -> bool:
    """Whether exact duplicates must be found on the key columns, not read yet: some row
    of an input with a fingerprint column has none."""
    unread = any(c not in frame.columns for c in key.columns)
    unprinted = "_content_sha256" not in frame.columns or frame["_content_sha256"].null_count() > 0
    return unread and unprinted


def _write_rows(
    files: list[DatasetInput], schemas: list[pl.Schema], removed: RemovedRows, tmp: Path
) -> tuple[int, int]:
    """Copy every input row to ``kept.parquet`` or, with its verdict columns, to
    ``duplicates.parquet`` (``removed``: the verdicts by row id, ascending, built for one
    slice at a time), a slice of a file at a time, in the order key; the columns are
    those of all inputs together (a column one input lacks is null in its rows).
    Returns (kept, duplicates) counts, read from the files written (a row the copy
    lost fails the caller's conservation check, whatever the copy counted)."""
    empty = [_rows(f, s, None, (0, 0)) for f, s in zip(files, schemas, strict=True)]
    layout = _combined(empty, files)
    # pyarrow has no 128-bit integer (polars' common type of Int64 and UInt64)
    wide = pl.col(pl.Int128).cast(pl.Decimal(38, 0))
    layout = layout.with_columns(wide)
    rows = removed.rows
    if np.any(rows[1:] <= rows[:-1]):
        raise AssertionError("removed rows out of order")  # never expected

    def verdicts(lo: int, hi: int) -> pl.DataFrame:
        return removed.slice(lo, hi).select(*_OUTPUT_COLUMNS, _dedupe_reason="_reason")

    kept_out = _writer(tmp / _KEPT, layout)
    duplicates_out = _writer(tmp / _DUPLICATES, layout.hstack(verdicts(0, 0)))
    base = done = 0
    # a slice is written (compressed, on one core) while the next is read and decoded:
    # both release the GIL (8.1 -> 6.3 s for 338 K rows); at most two slices are held
    writing: Future[None] | None = None
    kept_groups, removed_groups = _RowGroups(), _RowGroups()
    with kept_out, duplicates_out, ThreadPoolExecutor(1) as writer:
        for item, schema in zip(files, schemas, strict=True):
            size = 0
            for lo, length in _pieces(item.path):
                part = _rows(item, schema, None, (lo, length))
                if part.schema != layout.schema:  # another input's columns, or wider types
                    part = fitted(layout, part, item.path).with_columns(wide)
                hit = rows[(rows >= base + lo) & (rows < base + lo + part.height)] - base - lo
                found = part[hit].hstack(verdicts(done, done + len(hit)))
                height = part.height
                if len(hit):
                    is_removed = np.zeros(part.height, np.bool_)
                    is_removed[hit] = True
                    part = part.filter(~is_removed)
                part, found = _owned(part, height), _owned(found, height)
                ready = (kept_groups.add(part), removed_groups.add(found))
                if ready[0] is not None or ready[1] is not None:
                    if writing is not None:
                        writing.result()
                    writing = writer.submit(
                        _write_slice, kept_out, ready[0], duplicates_out, ready[1]
                    )
                done, size = done + len(hit), size + length
            base += size
        if writing is not None:
            writing.result()
        _write_slice(kept_out, kept_groups.take(), duplicates_out, removed_groups.take())
    return pq.read_metadata(tmp / _KEPT).num_rows, pq.read_metadata(tmp / _DUPLICATES).num_rows


def _owned(rows: pl.DataFrame, height: int) -> pl.DataFrame:
    """``rows`` (some of a slice of ``height`` rows) in buffers of their own where they
    are fewer than half of it: a gather or filter of a slice shares the slice's text
    buffers (polars' string views), so the few rows of each slice held for a row group
    held every slice read until it was written (~18 MB a slice of 65,536 rows of ~300
    bytes for its 2,000 duplicates: `rowgate dedupe` grew ~190 bytes a row of the dataset
    where 3 % of the rows were duplicates) (:func:`~pipeline.core.arrays.detached`: the
    same values and types; a row group is written from one chunk either way:
    :meth:`_RowGroups.take`)."""
    if not rows.height or 2 * rows.height >= height:
        return rows
    return detached(rows)


def _pieces(path: str) -> Iterator[tuple[int, int]]:
    """(first row, rows) of one input's pieces as they are copied: whole row groups of
    about :data:`_WRITE_BYTES` by the metadata and at most :data:`_WRITE_ROWS` rows, and
    a larger row group in pieces of :data:`_WRITE_ROWS` rows (held whole, a group of
    960,858 pw-decide-row rows took 2.2 GB decoded)."""
    for lo, length, _ in _slices(path, _WRITE_BYTES, _WRITE_ROWS):
        for first in range(lo, lo + length, _WRITE_ROWS):
            yield first, min(_WRITE_ROWS, lo + length - first)


def _write_slice(
    kept_out: pq.ParquetWriter,
    kept: pl.DataFrame | None,
    removed_out: pq.ParquetWriter,
    removed: pl.DataFrame | None,
) -> None:
    if removed is not None:
        removed_out.write_table(removed.to_arrow())
    if kept is not None:
        kept_out.write_table(kept.to_arrow())


class _RowGroups:
    """Rows bound for one output file, gathered into row groups of about
    :data:`_WRITE_BYTES` or :data:`_WRITE_ROWS`, whichever comes first, whatever slices
    they were read in: 500 kept rows of 3 M are one group, not one per slice read."""

    def __init__(self) -> None:
        self._frames: list[pl.DataFrame] = []
        self._rows = self._bytes = 0

    def add(self, frame: pl.DataFrame) -> pl.DataFrame | None:
        """Hold ``frame``'s rows; a row group to write once the held rows fill one."""
        if frame.height:
            self._frames.append(frame)
            self._rows += frame.height
            self._bytes += int(frame.estimated_size())
        if self._rows >= _WRITE_ROWS or self._bytes >= _WRITE_BYTES:
            return self.take()
        return None

    def take(self) -> pl.DataFrame | None:
        """The rows held, as one frame of one chunk (none held: None), and hold none: a
        row group is written as one batch, whatever slices its rows came from and
        however they were copied (:func:`_owned`), so its bytes depend on its rows
        alone."""
        if not self._frames:
            return None
        frame = pl.concat(self._frames, rechunk=True)
        self._frames, self._rows, self._bytes = [], 0, 0
        return frame


def _slices(path: str, nbytes: int, max_rows: int | None = None) -> list[tuple[int, int, int]]:
    """(first row, rows, bytes) of one input's slices: consecutive whole row groups of
    about ``nbytes`` by the metadata and at most ``max_rows`` rows (a larger group alone),
    so that no group is read twice."""
    try:
        metadata = pq.read_metadata(path)
    except (OSError, pa.ArrowException) as exc:
        raise InputError(f"{path}: not a readable Parquet file ({exc})") from None
    slices: list[tuple[int, int, int]] = []
    start = rows = size = 0
    for i in range(metadata.num_row_groups):
        group = metadata.row_group(i)
        too_long = max_rows is not None and rows + group.num_rows > max_rows
        if rows and (size + group.total_byte_size > nbytes or too_long):
            slices.append((start, rows, size))
            start, rows, size = start + rows, 0, 0
        rows, size = rows + group.num_rows, size + group.total_byte_size
    if rows:
        slices.append((start, rows, size))
    return slices


def _decide(
    tmp: Path,
    files: list[DatasetInput],
    schemas: list[pl.Schema],
    settings: DedupeSettings,
    keyed: tuple[str, DedupeKey | None, bool, tuple[tuple[str, ...], tuple[str, ...]]],
    engine: EngineSettings,
    on_stage: Callable[[str], None],
) -> tuple[DedupeOutcome, list[int]]:
    """The decision, and each input's rows. ``keyed``: the kind's name, its key, whether
    the fingerprint may stand for it, and the ``--text`` and ``--key`` columns. Where a
    rule is on, the row keys are staged under ``tmp`` (deleted after) and the decision's
    frame holds neither the key texts, nor the fingerprints, nor lineage (read for the
    rows a pointer names)."""
    name, key, fingerprint, (text_columns, key_columns) = keyed
    printed = fingerprint and all("_content_sha256" in schema for schema in schemas)
    staged = key is not None and _stages_row_keys(settings) and _textual(schemas)
    exact = _exact_digests(files, settings, printed) if staged else None
    columns = _columns_read(schemas, key, settings, name, fingerprint, texts=not staged)
    apart = _apart(name, schemas)
    survivor = None
    if staged:  # only the survivor field (the key tasks read the split groups')
        held = required_columns(key, settings, name, texts=False, groups=False)
        held = [apart.get(c, c) for c in held]
        columns = [c for c in columns if c in held]
        survivor = _SurvivorColumn.of(files, schemas, apart, settings.survivor_rule(name))
        if survivor is not None:  # read a piece at a time, not held
            columns = []
    frame, counts = _read(files, schemas, columns, lineage=not staged)
    if not staged and key is not None and _needs_key_columns(frame, key):  # rare
        frame, counts = _read(files, schemas, [*columns, *key.columns])
    # the member beside its column (shared, not copied): the split groups name the member,
    # a survivor rule may name the column (``max:_meta``)
    frame = frame.with_columns(pl.col(c).alias(m) for m, c in apart.items() if c in frame.columns)
    # a kind's key reads rowgate output, whose types its schema fixed: only columns named
    # on the command line are probed (a probe is one more pass over each key column; the
    # key tasks probe their slices when the key columns are not read here)
    checked = frame if survivor is None else survivor.layout
    check_comparable(checked, None if fingerprint or staged else key, settings.survivor_rule(name))
    if not staged:
        on_stage("dedupe: match")
        return dedupe_table(frame, key, settings, name), counts
    assert key is not None
    job = DatasetKeys(
        RunStorage(tmp),
        name,
        text_columns,
        key_columns,
        _key_layout(files, schemas, key),
        settings,
        exact,
        probe=not fingerprint,
    )
    if _several_splits(files):
        job = _grouping(job, files, schemas, group_fields(key, settings, name), apart)
    outcome = _staged_outcome(job, files, schemas, frame, key, name, engine, on_stage, survivor)
    job.storage.remove_staging()
    return outcome, counts


@dataclass(frozen=True)
class _SurvivorColumn:
    """A survivor rule's column (``max:``/``min:``) of a type with order keys on disk
    (:mod:`pipeline.dedupe.survivor_keys`: numbers, booleans, dates, times, durations and
    text), read a piece of an input at a time (:func:`_pieces`), never held for every
    row: each row's order key is written to a memory-mapped file (:meth:`ranking`), and
    the rows that take part are ranked by their keys (``RowKeys.rank``). Held
    instead, the column cost its values of every row (~9 bytes a row for a column of
    numbers, more for text) and ~50 more while polars ranked them."""

    files: list[DatasetInput]
    schemas: list[pl.Schema]
    #: no rows: the column read, in the inputs' common type, and the member it is where
    #: the kind stores one apart (:func:`_apart`), as the rule names either
    layout: pl.DataFrame
    rule: str
    #: whether the rule's value is text (ranked by a sort on disk), else numbers and the
    #: like (ranked by their order keys)
    text: bool

    @classmethod
    def of(
        cls,
        files: list[DatasetInput],
        schemas: list[pl.Schema],
        apart: dict[str, str],
        rule: str,
    ) -> _SurvivorColumn | None:
        """The rule's column, or ``None``: a rule by place, a column none of the inputs
        has or of another type (a struct, a decimal, a categorical: held and ranked in
        memory), or one the rule cannot read (refused by :func:`check_comparable`)."""
        if ":" not in rule:
            return None
        root = rule.split(":", 1)[1].split(".")[0]
        stored = apart.get(root, root)
        if not any(stored in schema for schema in schemas):
            return None
        empty = [pl.DataFrame(schema={stored: s[stored]} if stored in s else {}) for s in schemas]
        layout = _combined(empty, files)
        layout = layout.with_columns(pl.col(c).alias(m) for m, c in apart.items() if c == stored)
        try:
            dtype = layout.select(survivor_value(rule.split(":", 1)[1])).to_series().dtype
        except pl.exceptions.PolarsError:
            return None
        text = dtype in (pl.String, pl.Binary)
        if not text and not has_order_keys(dtype):
            return None
        return cls(files, schemas, layout, rule, text)

    def ranking(
        self, count: int, directory: Path, partitions: int | None, engine: Engine
    ) -> Ranking:
        """Each row's survivor rank, by place among the ``count`` rows: its value's order
        key (a text's from a sort on disk cut into ``partitions`` ranges of values, if
        given, each ranked on ``engine``) and its place, the keys memory-mapped in
        ``directory``."""
        direction, column = self.rule.split(":", 1)
        values = (piece.select(survivor_value(column)).to_series() for piece in self._pieces())
        if self.text:
            keys = text_order_keys(values, count, direction, directory, engine, partitions)
            return mapped_ranking(keys)
        return mapped_ranking(*mapped_order_keys(values, count, direction, directory))

    def _pieces(self) -> Iterator[pl.DataFrame]:
        """The column of every row, a piece of an input at a time, in the inputs' common
        type (an input without it: nulls)."""
        stored = self.layout.columns[0]
        common = self.layout.select(stored)
        for item, schema in zip(self.files, self.schemas, strict=True):
            for first, length in _pieces(item.path):
                if stored in schema:
                    piece = _rows(item, schema, [stored], (first, length), lineage=False)
                    piece = fitted(common, piece, item.path)
                else:
                    piece = common.clear(length)
                yield piece.with_columns(pl.col(stored).alias(m) for m in self.layout.columns[1:])


def _stages_row_keys(settings: DedupeSettings) -> bool:
    """Whether the row keys are staged on the engine (:mod:`pipeline.jobs.dataset_keys`):
    whenever a rule is on. Otherwise (and in the tests' reference runs) the decision
    reads every row's key columns, or fingerprints, and lineage
    (:func:`~pipeline.dedupe.table.dedupe_table`): exact dedupe on fingerprints so held
    ~300 bytes a row at its peak (960,858 rows: 350 MB)."""
    return settings.exact or settings.normalised or settings.near


def _textual(schemas: list[pl.Schema]) -> bool:
    """Whether each input's content fingerprints, where it has them, are text (a string,
    a categorical) or nothing (a column of nulls alone): what the key tasks stage. Those
    of another type (bytes, numbers: a dataset made elsewhere) are compared by value over
    every row, in one process (the reference path)."""
    text = (pl.String, pl.Categorical, pl.Enum, pl.Null)
    return all(isinstance(s[_FINGERPRINT], text) for s in schemas if _FINGERPRINT in s)


def _exact_digests(
    files: list[DatasetInput], settings: DedupeSettings, printed: bool
) -> str | None:
    """What the key tasks stage for the exact rule (:class:`DatasetKeys`): ``"key"``, the
    raw key's digest, where an input has no fingerprint column or a row none (the
    fingerprint then stands for no row's key, as in the matching over every row);
    ``"fingerprint"`` where every row has one of 64 lowercase hex digits (its bytes);
    ``"fingerprint text"`` where (foreign data) one is of another form: then the
    fingerprints are compared as the texts they are, by their SHA-256; ``None`` when
    the rule is off. The fingerprints are counted in a streaming pass over that one
    column."""
    if not settings.exact:
        return None
    if not printed:
        return "key"
    fingerprint = pl.col(_FINGERPRINT).cast(pl.String)  # a categorical, or nulls alone
    nulls = malformed = 0
    for item in files:
        try:
            found = (
                pl.scan_parquet(item.path, glob=False)
                .select(
                    nulls=fingerprint.null_count(),
                    malformed=fingerprint.str.contains(SHA256_HEX).not_().sum(),
                )
                .collect(engine="streaming")
            )
        except (pl.exceptions.PolarsError, OSError) as exc:
            raise InputError(f"{item.path}: not a readable Parquet file ({exc})") from None
        nulls, malformed = nulls + int(found["nulls"][0]), malformed + int(found["malformed"][0])
    if nulls:
        return "key"
    return "fingerprint text" if malformed else "fingerprint"


def _key_tasks(
    files: list[DatasetInput],
    schemas: list[pl.Schema],
    key: DedupeKey,
    grouping: Sequence[str] = (),
) -> list[KeyTask]:
    """The key tasks: whole row groups of about :data:`KEY_SLICE_BYTES`, cut to at most
    :data:`KEY_SLICE_ROWS` rows each; consecutive small ones (small files) of one split
    joined up to those bounds (a task's rows are of one split: a led check labels rows
    by their task). ``grouping``: the columns the split groups' fields read."""
    tasks: list[KeyTask] = []
    pieces: list[KeySlice] = []
    rows = size = 0
    for item, schema in zip(files, schemas, strict=True):
        columns = tuple(c for c in key.columns if c in schema)
        for lo, length, nbytes in _slices(item.path, KEY_SLICE_BYTES):
            for first in range(lo, lo + length, KEY_SLICE_ROWS):
                count = min(KEY_SLICE_ROWS, lo + length - first)
                share = nbytes * count // length
                full = rows + count > KEY_SLICE_ROWS or size + share > KEY_SLICE_BYTES
                if pieces and (full or pieces[-1].split != item.split):  # a task, a split
                    tasks.append(KeyTask(len(tasks), tuple(pieces)))
                    pieces, rows, size = [], 0, 0
                pieces.append(
                    KeySlice(
                        item.path,
                        first,
                        count,
                        columns,
                        _lineage_of(schema),
                        item.split,
                        tuple(c for c in grouping if c in schema),
                    )
                )
                rows, size = rows + count, size + share
    if pieces:
        tasks.append(KeyTask(len(tasks), tuple(pieces)))
    return tasks


def _lineage_of(schema: pl.Schema) -> tuple[str, ...]:
    """The lineage columns an input's rows keep (as :func:`_rows` reads them)."""
    own = ("_source", "_line") if "_source" in schema else ()
    return (*own, *(("_record_sha256",) if "_record_sha256" in schema else ()))


def _key_layout(files: list[DatasetInput], schemas: list[pl.Schema], key: DedupeKey) -> pl.Schema:
    """The key columns' unified types over the inputs (those one frame of them holds)."""
    empty = [pl.DataFrame(schema={c: s[c] for c in key.columns if c in s}) for s in schemas]
    return _combined(empty, files).select(key.columns).schema


def _staged_outcome(
    job: DatasetKeys,
    files: list[DatasetInput],
    schemas: list[pl.Schema],
    frame: pl.DataFrame,
    key: DedupeKey,
    name: str,
    engine_settings: EngineSettings,
    on_stage: Callable[[str], None],
    survivor: _SurvivorColumn | None = None,
) -> DedupeOutcome:
    """The decision with the row keys staged on the engine, slice by slice
    (:mod:`pipeline.jobs.dataset_keys`), among the rows that take part alone: ``frame``
    holds no key text, only the survivor field, or, where the ``survivor`` column is read
    a piece at a time, not that either (each row's order key is then a file's, which
    ranks the rows that take part); where the inputs are of several
    splits, the split groups are found among the rows the engine names."""
    stored = dict(job.apart)
    grouping = [stored.get(c, c) for c in job.grouping.names()]
    tasks = _key_tasks(files, schemas, key, grouping)
    rule = job.settings.survivor_rule(name)

    def by_column() -> Ranking:
        if survivor is None:
            return dense_ranking(survivor_rank(frame, rule, name))
        directory = job.storage.whole_directory("dataset.survivor-keys")
        return survivor.ranking(frame.height, directory, engine_settings.partitions, engine)

    everyone = pl.DataFrame(schema={"_split": pl.String})
    with get_engine(engine_settings.name).from_settings(engine_settings, len(tasks)) as engine:
        rank = survivor_ranks(rule, frame.height, by_column)
        on_stage("dedupe: row keys")
        found, keys, led = staged_keys(
            engine,
            job.storage,
            job,
            tasks,
            engine_settings,
            rank,
            rule.partition(":")[0],
        )
        if job.fields:  # a group of rows matched or not may straddle splits
            everyone = split_group_rows(engine, job.storage, job, tasks, engine_settings)
    on_stage("dedupe: match")
    if survivor is not None:  # the rows taking part ranked by their keys, not read again
        keys = dataclasses.replace(keys, rank=places_in(rank(found.places).order()))
    matches = match_duplicates(frame[found.places], key, job.settings, name, keys)
    # the removed rows' places among every row, which are the row ids
    matches.removed = matches.removed.placed(found.places)
    if led is not None:  # the rows led: removed as their leaders decide
        followed = matches.followed(np.searchsorted(found.places, led.leaders), led.rows)
        matches.removed = RemovedRows.merged([matches.removed, followed])
    return matches.complete(everyone, group_fields(key, job.settings, name), frame.height)


def _grouping(
    job: DatasetKeys,
    files: list[DatasetInput],
    schemas: list[pl.Schema],
    fields: Sequence[str],
    apart: dict[str, str],
) -> DatasetKeys:
    """``job`` with the split groups' ``fields`` for the key tasks to hash: the columns
    they read (stored apart under another name, read by it), in their types unified over
    the inputs and by the members' names, and the split labels."""
    roots = dict.fromkeys(apart.get(r, r) for r in (p.split(".", 1)[0] for p in fields))
    empty = [pl.DataFrame(schema={c: s[c] for c in roots if c in s}) for s in schemas]
    layout = _combined(empty, files).schema
    back = {column: member for member, column in apart.items()}
    grouping = pl.Schema({back.get(c, c): t for c, t in layout.items()})
    for path in fields:  # a field that reads a list: refused here, not in a key task
        field_expr(path, grouping)
    return dataclasses.replace(
        job,
        fields=tuple(fields),
        grouping=grouping,
        splits=tuple(sorted({f.split for f in files if f.split is not None})),
        apart=tuple(apart.items()),
    )


def _several_splits(files: list[DatasetInput]) -> bool:
    """Whether the inputs are labelled with more than one split (else no group can
    straddle splits)."""
    return len({f.split for f in files} - {None}) > 1


def _writer(path: Path, layout: pl.DataFrame) -> pq.ParquetWriter:
    return pq.ParquetWriter(path, layout.to_arrow().schema, compression="zstd")


def _write_parts(path: Path, parts: Iterator[pl.DataFrame]) -> None:
    """Write a table of ``parts`` (one at least), each made as the one before is written,
    a row group each: the cluster table whole, with its kept rows' lineage, was the
    command's peak on a dataset of many clusters (351 MB at 315,866 clusters, ~180 MB
    above the matching's)."""
    first = next(parts)
    with _writer(path, first.head(0)) as writer:
        writer.write_table(first.to_arrow(), row_group_size=max(first.height, 1))
        del first
        for part in parts:
            writer.write_table(part.to_arrow(), row_group_size=max(part.height, 1))


def dedupe_dataset(
    inputs: Sequence[DatasetInput],
    out: Path | RemoteOut,
    settings: DedupeSettings,
    *,
    kind: str | None = None,
    text_columns: Sequence[str] = (),
    key_columns: Sequence[str] = (),
    force: bool = False,
    engine: EngineSettings | None = None,
    on_stage: Callable[[str], None] = lambda name: None,
) -> DatasetResult:
    """Dedupe Parquet ``inputs`` into ``out`` (see the module docstring); ``engine``:
    where the row keys are computed (default: the local engine, a worker per core);
    ``on_stage``: told the name of each step as it begins (``dedupe: row keys``,
    ``dedupe: match``, ``dedupe: write``, ``dedupe: clusters``)."""
    settings.validate("dedupe")
    check_kind_names(settings.survivor_by_kind, "dedupe.survivor_by_kind", (COLUMNS,))
    check_kind_names(settings.split_groups, "dedupe.split_groups", (COLUMNS,))
    if not inputs:
        raise ConfigError("dedupe: no inputs")
    files = _expand(inputs)
    # every file read, as given and as a directory expands to it: a link inside a
    # directory to a file of the old OUT was replaced with --force (only the directory
    # was protected)
    protect = [*(Path(given.path) for given in inputs), *(Path(f.path) for f in files)]
    stamps = [FileStamp.of(f.path) for f in files]
    with claim_output(out, force=force, protect=protect) as claim:
        return _dedupe(
            claim,
            files,
            settings,
            kind,
            text_columns,
            key_columns,
            engine or EngineSettings(),
            stamps,
            on_stage,
        )


def _dedupe(
    claim: OutputClaim | RemoteClaim,
    files: list[DatasetInput],
    settings: DedupeSettings,
    kind: str | None,
    text_columns: Sequence[str],
    key_columns: Sequence[str],
    engine: EngineSettings,
    stamps: list[FileStamp],
    on_stage: Callable[[str], None],
) -> DatasetResult:
    """``files``: the inputs, expanded (:func:`_expand`), each stamped before any read."""
    schemas = [_schema(f) for f in files]
    _refuse_changed_values(files, schemas)
    labelled = {f.split for f in files}
    for split in settings.protected_splits:
        if split not in labelled:
            raise ConfigError(f"dedupe.protected_splits: no input is labelled with split {split!r}")
    name, key, fingerprint = _resolve_key(files, schemas, kind, text_columns, key_columns)
    # group fields (task_id, meta) are optional: absent columns are simply not checked
    needed = list(key.columns) if key is not None else []
    rule = settings.survivor_rule(name)
    if ":" in rule:
        needed.append(rule.split(":", 1)[1].split(".", 1)[0])
    stale = [c for c in needed if c in (*_OUTPUT_COLUMNS, "_dedupe_reason")]
    if stale:
        raise InputError(
            f"dedupe: {stale[0]!r} is an earlier dedupe's verdict, which this one replaces: "
            "it cannot be a key or survivor column"
        )
    available = {c for schema in schemas for c in schema}
    missing = [c for c in needed if c not in available]
    if missing:
        raise InputError(f"dedupe: the inputs have no column {missing[0]!r} ({name})")
    with claim.staging() as tmp:
        columns = (tuple(text_columns), tuple(key_columns))
        keyed = (name, key, fingerprint, columns)
        outcome, counts = _decide(tmp, files, schemas, settings, keyed, engine, on_stage)
        listed, rows = _listed(files, counts), sum(counts)
        on_stage("dedupe: write")
        kept, duplicates = _write_rows(files, schemas, outcome.removed, tmp)
        # before counting: a file changed since its keys were read holds other rows
        for stamp in stamps:
            stamp.check("dedupe")
        if kept + duplicates != rows:
            raise AssertionError("dedupe lost rows")  # conservation; never expected
        summary = {
            "format": DEDUPE_FORMAT,
            "inputs": listed,
            "kind": name,
            "settings": dataclasses.asdict(settings),
            "counts": {"rows": rows, "kept": kept, "duplicates": duplicates},
            "dedupe": outcome.stats,
        }
        on_stage("dedupe: clusters")
        _write_parts(tmp / "clusters.parquet", outcome.clusters.parts(CLUSTER_PART_ROWS))
        outcome.groups.table().write_parquet(tmp / "split_groups.parquet")
        (tmp / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return DatasetResult(claim.out, summary)
