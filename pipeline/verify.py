"""``rowgate verify``: re-check a finished run against its manifest and its sources.

Checks, each reported with what it found (never with record values):

1. every output file listed in the manifest exists with its size, SHA-256 and row count,
   and no unlisted Parquet file sits in the output;
2. every input still has its size and SHA-256;
3. conservation: every line of every input appears in exactly one output row;
4. lineage: each row's ``_offset`` and ``_raw_sha256`` match the source bytes at that
   line (re-read and re-hashed), and a rejected row's ``_raw`` hashes to its
   ``_raw_sha256``;
5. each typed row decodes to a record whose canonical JSON hashes to ``_record_sha256``,
   whose fingerprint is ``_content_sha256``, validated by the schema whose digest the
   manifest records (a row quarantined with ``pii.schema_invalid`` says its redacted
   record fails that schema: there the schema digest is checked, not the validity);
6. the manifest's counts per disposition equal the rows in the files;
7. every report the manifest lists (``report.html``) has its size and SHA-256.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import polars as pl
import pyarrow.parquet as pq

from pipeline.arrow_mapping import derive_layout
from pipeline.canonical import canonical_json
from pipeline.kinds import KINDS
from pipeline.lineage import file_sha256
from pipeline.manifest import load_manifest
from pipeline.reader import InputFile, Shard, read_batches
from pipeline.reasons import PII_SCHEMA_INVALID
from pipeline.schemas import SCHEMA_DIR, SchemaError, load_schema

__all__ = ["VerifyReport", "verify_run"]

_MAX_LISTED: Final = 20


@dataclass
class VerifyReport:
    problems: list[str] = field(default_factory=list)
    checked: Counter[str] = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        return not self.problems

    def problem(self, message: str) -> None:
        if len(self.problems) < _MAX_LISTED:
            self.problems.append(message)
        elif len(self.problems) == _MAX_LISTED:
            self.problems.append("… further problems not listed")


def _check_files(out: Path, manifest: dict[str, Any], report: VerifyReport) -> list[dict[str, Any]]:
    good = []
    listed = {entry["path"] for entry in [*manifest["outputs"], *manifest.get("artifacts", [])]}
    for stray in sorted(p.relative_to(out).as_posix() for p in out.rglob("*.parquet")):
        if stray not in listed:
            report.problem(f"{stray}: Parquet file not listed in the manifest")
    for entry in [*manifest["outputs"], *manifest.get("artifacts", [])]:
        path = out / entry["path"]
        report.checked["output files"] += 1
        if not path.is_file():
            report.problem(f"{entry['path']}: missing")
            continue
        if path.stat().st_size != entry["bytes"] or file_sha256(path) != entry["sha256"]:
            report.problem(f"{entry['path']}: bytes differ from the manifest's SHA-256")
            continue
        rows = pq.ParquetFile(path).metadata.num_rows
        if rows != entry["rows"]:
            report.problem(f"{entry['path']}: {rows} rows, manifest says {entry['rows']}")
            continue
        if entry in manifest["outputs"]:
            good.append(entry)
    return good


def _check_reports(out: Path, manifest: dict[str, Any], report: VerifyReport) -> None:
    for entry in manifest.get("reports", []):
        path = out / entry["path"]
        report.checked["reports"] += 1
        if not path.is_file():
            report.problem(f"{entry['path']}: missing")
        elif path.stat().st_size != entry["bytes"] or file_sha256(path) != entry["sha256"]:
            report.problem(f"{entry['path']}: bytes differ from the manifest's SHA-256")


def _source_path(entry: dict[str, Any], sources: Path | None) -> Path:
    if sources is not None:
        return sources / str(entry["path"])
    # a path that is not UTF-8 is recorded in its lineage form, and exactly in hex
    exact = entry.get("resolved_hex")
    resolved = Path(os.fsdecode(bytes.fromhex(exact)) if exact else str(entry["resolved"]))
    return resolved if resolved.exists() else Path(str(entry["path"]))


def _check_inputs(
    manifest: dict[str, Any], sources: Path | None, report: VerifyReport
) -> dict[str, InputFile]:
    found = {}
    for entry in manifest["inputs"]:
        path = _source_path(entry, sources)
        report.checked["inputs"] += 1
        if not path.is_file():
            report.problem(f"input {entry['path']}: not found at {path}")
            continue
        if path.stat().st_size != entry["bytes"] or file_sha256(path) != entry["sha256"]:
            report.problem(f"input {entry['path']}: bytes differ from the manifest's SHA-256")
        found[entry["path"]] = InputFile(
            entry["index"],
            entry["path"],
            str(path),
            entry["bytes"],
            entry["compression"],
            entry["kind"],
        )
    return found


def _lineage(out: Path, files: list[dict[str, Any]]) -> pl.DataFrame:
    frames = [
        pl.read_parquet(
            out / f["path"], columns=["_source", "_line", "_offset", "_raw_sha256"], glob=False
        ).with_columns(_file=pl.lit(f["path"]))
        for f in files
    ]
    if not frames:
        return pl.DataFrame(
            schema={
                "_source": pl.String,
                "_line": pl.Int64,
                "_offset": pl.Int64,
                "_raw_sha256": pl.String,
                "_file": pl.String,
            }
        )
    return pl.concat(frames).sort("_source", "_line")


def _check_lineage(
    rows: pl.DataFrame, manifest: dict[str, Any], inputs: dict[str, InputFile], report: VerifyReport
) -> None:
    max_line_bytes = manifest["config"]["limits"]["max_line_bytes"]
    for entry in manifest["inputs"]:
        mine = rows.filter(pl.col("_source") == entry["path"])
        expected = entry["lines"]
        counts = mine.group_by("_line").len().filter(pl.col("len") > 1)
        if counts.height:
            report.problem(
                f"input {entry['path']}: {counts.height} lines appear in more than one output row"
            )
        lines = mine["_line"].unique()
        if mine.height != expected or (
            lines.len() and (lines.min() != 1 or lines.max() != expected)
        ):
            report.problem(
                f"input {entry['path']}: {mine.height} output rows for {expected} lines "
                "(conservation broken)"
            )
            continue
        source = inputs.get(entry["path"])
        if source is None:
            continue
        offsets, shas = mine["_offset"].to_list(), mine["_raw_sha256"].to_list()
        seen = 0
        for batch in read_batches(Shard(0, source), max_line_bytes, 1 << 14):
            seen += len(batch)
            for i, line in enumerate(batch.lines):
                n = batch.first_line + i
                if n > expected:
                    break
                sha = (
                    batch.oversized[i][1]
                    if i in batch.oversized
                    else hashlib.sha256(line).hexdigest()
                )
                report.checked["lines"] += 1
                if batch.offsets[i] != offsets[n - 1] or sha != shas[n - 1]:
                    report.problem(
                        f"{entry['path']}:{n}: offset or raw SHA-256 does not match the source"
                    )
        if seen != expected:
            report.problem(
                f"input {entry['path']}: source has {seen} lines, manifest says {expected}"
            )


def _check_records(
    out: Path, files: list[dict[str, Any]], manifest: dict[str, Any], report: VerifyReport
) -> None:
    layouts = {}
    for kind_id, info in manifest["schemas"].items():
        path = Path(info.get("path") or SCHEMA_DIR / info["file"])
        try:
            entry = load_schema(path, kind_id)
        except (OSError, SchemaError) as exc:
            report.problem(f"schema {kind_id}: cannot load ({exc})")
            continue
        if entry.sha256 != info["sha256"]:
            report.problem(f"schema {kind_id}: {path} changed since the run (digest differs)")
            continue
        layouts[kind_id] = (derive_layout(entry.schema, KINDS[kind_id].apart), entry)
    for f in files:
        table = pq.read_table(out / f["path"])
        if f["kind"] is None:
            for raw, sha in zip(
                table["_raw"].to_pylist(), table["_raw_sha256"].to_pylist(), strict=True
            ):
                report.checked["raw lines"] += 1
                if raw is not None and hashlib.sha256(raw).hexdigest() != sha:
                    report.problem(f"{f['path']}: a _raw value does not hash to its _raw_sha256")
            continue
        if f["kind"] not in layouts:
            continue
        layout, entry = layouts[f["kind"]]
        kind = KINDS[f["kind"]]
        for row in table.to_pylist():
            record = layout.decode_row(row)
            report.checked["records"] += 1
            where = f"{f['path']} line {row['_source']}:{row['_line']}"
            if hashlib.sha256(canonical_json(record)).hexdigest() != row["_record_sha256"]:
                report.problem(f"{where}: record does not hash to _record_sha256")
            elif row["_schema_sha256"] != entry.sha256 or (
                entry.errors(record) and not _redaction_broke_schema(row, f["disposition"])
            ):
                report.problem(f"{where}: record is not valid under the recorded schema")
            elif kind.fingerprint(record) != row["_content_sha256"]:
                report.problem(f"{where}: content fingerprint does not match _content_sha256")


def _redaction_broke_schema(row: dict[str, Any], disposition: str) -> bool:
    return disposition == "quarantined" and any(
        r["code"] == PII_SCHEMA_INVALID for r in row["_reasons"]
    )


def verify_run(out: Path, sources: Path | None = None) -> VerifyReport:
    """Verify the run in ``out``; ``sources`` overrides where inputs are looked up."""
    report = VerifyReport()
    manifest = load_manifest(out)
    files = _check_files(out, manifest, report)
    _check_reports(out, manifest, report)
    inputs = _check_inputs(manifest, sources, report)
    rows = _lineage(out, files)
    _check_lineage(rows, manifest, inputs, report)
    _check_records(out, files, manifest, report)
    by_disposition: Counter[str] = Counter()
    for f in files:
        by_disposition[f["disposition"]] += f["rows"]
    if dict(by_disposition) != {k: v for k, v in manifest["counts"]["by_disposition"].items() if v}:
        report.problem("manifest counts per disposition differ from the rows in the output files")
    if not manifest["conservation"]["ok"]:
        report.problem("the manifest records a failed conservation check")
    return report
