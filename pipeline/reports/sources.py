"""Where a report's rows come from: a run directory, a glob, a Parquet or a JSONL table.

``DATA`` may be

* a run's output directory (it holds ``manifest.json``): the accepted rows of one kind,
  ``accepted/<kind>/*.parquet``;
* any other directory: every Parquet or JSONL file under it (not both: a directory
  holding both is refused, as a glob matching both is, never half read);
* a glob (``exports/*.parquet``) or a single file.

A file or directory that exists is read as itself, whatever its name holds: ``[a].parquet``
is that file, never the pattern matching ``a.parquet`` (paths are never globs). Only a
``DATA`` that names nothing is expanded as a glob (:func:`named_paths`, which the command
line also protects from ``--out``).

JSONL is read with rowgate's strict parser first (duplicate keys, NaN, lone surrogates,
lossy numbers are errors that name the file and line, never the value), then handed to
polars, which would otherwise accept what the gate rejects (DESIGN §4).

Every file is hashed when it is opened, so the report can say exactly what it evaluated
(the AutoQA evaluation contract §13.2): ``input_sha256`` is the SHA-256 of the RFC 8785
canonical JSON of the files' SHA-256 digests in the report's file order, so it names the
bytes evaluated, not where they were.
"""

from __future__ import annotations

import glob
import hashlib
import io
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import polars as pl
import pyarrow as pa

from pipeline.core.config import ConfigError, Limits
from pipeline.core.expression_errors import first_line
from pipeline.core.files import input_type
from pipeline.core.reasons import RejectLine
from pipeline.gate.reader import (
    JSONL_SUFFIXES,
    InputError,
    InputFile,
    Shard,
    detect_compression,
    jsonl_named,
    read_batches,
)
from pipeline.output.manifest import MANIFEST_NAME, load_manifest
from pipeline.records.canonical import canonical_json
from pipeline.records.lineage import FileStamp, file_sha256
from pipeline.records.strict_json import parse_object
from pipeline.storage import parquet_batches

__all__ = ["JSONL_SUFFIXES", "PARQUET_SUFFIXES", "LoadedTable", "load_table", "named_paths"]

PARQUET_SUFFIXES: Final = (".parquet",)
_GLOB_CHARS: Final = frozenset("*?[")


@dataclass
class LoadedTable:
    """The rows to evaluate, lazily, and where they came from."""

    frame: pl.LazyFrame
    files: list[str]
    format: str  # "parquet" or "jsonl"
    #: set when DATA is a run directory: the kind read from it
    run_kind: str | None = None
    notes: list[str] = field(default_factory=list)
    #: SHA-256 of each file, in ``files`` order (empty for rows given as a frame)
    sha256: list[str] = field(default_factory=list)
    #: each file's stamp, taken before its digest (:meth:`check_unchanged`)
    stamps: list[FileStamp] = field(default_factory=list)

    def check_unchanged(self) -> None:
        """Refuse rows read from a file that changed while it was read: its digest is
        computed first and its rows read later, so a file rewritten in between gave a
        report whose ``files_sha256`` named other bytes than its numbers came from."""
        for stamp in self.stamps:
            stamp.check("the report")

    @property
    def input_sha256(self) -> str | None:
        """The digest of everything read (see the module docstring); None without files."""
        if not self.sha256:
            return None
        return hashlib.sha256(canonical_json(self.sha256)).hexdigest()

    def describe(self) -> dict[str, object]:
        return {
            "format": self.format,
            "files": self.files,
            "run_kind": self.run_kind,
            "files_sha256": self.sha256,
            "input_sha256": self.input_sha256,
        }


def named_paths(data: str) -> list[Path]:
    """The paths ``data`` names, which ``--out`` may not overlap: itself when anything
    exists at that path (a file or directory whose name holds ``[``, ``*`` or ``?`` is
    read as itself: before, the pattern was tried first, and ``[a].parquet`` read
    ``a.parquet``), with every file a directory holds (a link in it to a table of the old
    OUT was replaced with ``--force``); else, when it holds a glob character, the
    pattern's matches, sorted; else none."""
    if os.path.lexists(data):
        path = Path(data)
        return [path, *sorted(path.rglob("*"))] if path.is_dir() else [path]
    if _GLOB_CHARS & set(data):
        return sorted(Path(p) for p in glob.glob(data, recursive=True))
    return []


def load_table(data: str, *, kind: str | None = None, limits: Limits | None = None) -> LoadedTable:
    """Open ``data`` for a report (see the module docstring for what it may be).

    Raises
    ------
    InputError
        Nothing readable at ``data``, mixed formats, or a JSONL line that is not strict JSON.
    ConfigError
        A run directory holds several kinds and ``kind`` does not choose one.
    """
    limits = limits or Limits()
    if not data.strip():  # Path("") is the working directory: never read it unasked
        raise InputError("DATA is empty: give a run directory, a directory, a glob or a file")
    path = Path(data)
    run_kind = None
    if not os.path.lexists(data):  # nothing there: a pattern's matches (named_paths)
        if not _GLOB_CHARS & set(data):
            raise InputError(f"{data}: no such file or directory")
        files = [p for p in named_paths(data) if input_type(p, str(p)) == "file"]
    elif input_type(path, data) == "file":  # a FIFO, socket, device or dead link: refused
        files = [path]
    elif (path / MANIFEST_NAME).is_file():
        files, run_kind = _run_files(path, kind)
    else:  # what is named like a table must be one: a FIFO is refused, never skipped
        found = sorted(p for p in path.rglob("*") if _format(p) is not None)
        files = [p for p in found if input_type(p, str(p)) == "file"]
    if not files:
        raise InputError(f"{data}: no Parquet or JSONL files found")
    formats = {_format(p) for p in files}
    if None in formats:
        odd = next(p for p in files if _format(p) is None)
        raise InputError(f"{odd}: not a Parquet or JSONL file (by its suffix)")
    if len(formats) > 1:  # never half read (a directory took its Parquet files alone)
        glob_hint = f" with a glob ('{path / '**' / '*.parquet'}')" if path.is_dir() else ""
        raise InputError(f"{data}: mixes Parquet and JSONL files; give one format{glob_hint}")
    names = [str(p) for p in files]
    stamps = [FileStamp.of(name) for name in names]
    digests = [file_sha256(p) for p in files]
    if formats == {"parquet"}:
        _check_one_schema(files)
        frame = pl.scan_parquet(names, glob=False)
        return LoadedTable(frame, names, "parquet", run_kind, sha256=digests, stamps=stamps)
    frame = _read_jsonl(files, limits).lazy()
    return LoadedTable(frame, names, "jsonl", run_kind, sha256=digests, stamps=stamps)


def _check_one_schema(files: list[Path]) -> None:
    """The Parquet files of one table must hold the same columns of the same types (in
    any order): otherwise reading them failed later, and the error blamed the report's
    expressions, not the file that differs."""
    first = _parquet_schema(files[0])
    for other in files[1:]:
        schema = _parquet_schema(other)
        if schema == first:  # as mappings: the columns' order may differ
            continue
        missing = [c for c in first if c not in schema]
        extra = [c for c in schema if c not in first]
        if missing or extra:
            column, there, absent = (
                (missing[0], files[0], other) if missing else (extra[0], other, files[0])
            )
            raise InputError(
                f"{absent}: has no column {column!r}, which {there} has; the files of one "
                "table must hold the same columns"
            )
        column = next(c for c in first if schema[c] != first[c])
        raise InputError(
            f"{other}: column {column!r} is {schema[column]}, in {files[0]} {first[column]}; "
            "the files of one table must hold the same column types"
        )


def first_unreadable(files: Sequence[str]) -> str | None:
    """The first of ``files`` (Parquet) with a page that does not decode, read a batch at
    a time (memory: one batch); ``None`` if every page decodes. For the message of a
    read that failed, which polars gives without the file's name."""
    for name in files:
        try:
            for _ in parquet_batches(name):
                pass
        except (pa.ArrowException, OSError):
            return name
    return None


def _parquet_schema(path: Path) -> dict[str, pl.DataType]:
    """The columns of one Parquet file, or an input error naming it (empty, truncated,
    not Parquet): its footer holds no record values, so polars' message is kept."""
    try:  # the path itself, never a pattern: ``read_parquet_schema`` expands globs
        return dict(pl.scan_parquet(path, glob=False).collect_schema())
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise InputError(f"{path}: not a readable Parquet file: {first_line(exc)}") from None


def _format(path: Path) -> str | None:
    name = path.name
    if name.endswith(PARQUET_SUFFIXES):
        return "parquet"
    if jsonl_named(name):  # any case, any compression suffix: read, or refused by name
        return "jsonl"
    return None


def _run_files(directory: Path, kind: str | None) -> tuple[list[Path], str]:
    manifest = load_manifest(directory)
    by_kind: dict[str, list[Path]] = {}
    for entry in manifest["outputs"]:
        if entry.get("disposition") == "accepted" and entry.get("kind"):
            by_kind.setdefault(entry["kind"], []).append(directory / entry["path"])
    if not by_kind:
        raise InputError(f"{directory}: the run accepted no rows")
    if kind is None:
        if len(by_kind) > 1:
            raise ConfigError(
                f"kind: {directory} holds accepted rows of several kinds "
                f"({', '.join(sorted(by_kind))}); choose one with --kind"
            )
        kind = next(iter(by_kind))
    if kind not in by_kind:
        raise InputError(
            f"{directory}: no accepted rows of kind {kind!r} (found: {', '.join(sorted(by_kind))})"
        )
    return sorted(by_kind[kind]), kind


def _read_jsonl(files: list[Path], limits: Limits) -> pl.DataFrame:
    frames = []
    for index, path in enumerate(files):
        source = InputFile(
            index, str(path), str(path.resolve()), path.stat().st_size, detect_compression(path)
        )
        lines: list[bytes] = []
        for batch in read_batches(Shard(0, source), limits.max_line_bytes, 1 << 14):
            for i, line in enumerate(batch.lines):
                number = batch.first_line + i
                if i in batch.oversized:
                    raise InputError(
                        f"{path}:{number}: line.too_large (over {limits.max_line_bytes} bytes)"
                    )
                try:
                    parse_object(line, limits.max_depth, limits.max_items)
                except RejectLine as exc:
                    reason = exc.reason
                    raise InputError(f"{path}:{number}: {reason.code} ({reason.detail})") from None
                lines.append(line)
        if not lines:
            continue
        try:
            frames.append(pl.read_ndjson(io.BytesIO(b"\n".join(lines)), infer_schema_length=None))
        except pl.exceptions.PolarsError as exc:
            raise InputError(f"{path}: cannot be read as one table: {exc}") from None
    if not frames:
        raise InputError(f"{', '.join(map(str, files))}: no rows")
    try:
        return pl.concat(frames, how="diagonal_relaxed")
    except pl.exceptions.PolarsError as exc:
        raise InputError(f"JSONL files do not share compatible columns: {exc}") from None
