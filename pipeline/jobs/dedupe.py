"""``rowgate dedupe``: the dedupe stage's decisions on existing Parquet datasets.

A dataset produced elsewhere (or a run's ``accepted/<kind>/``) is read whole, deduped with
a record kind's key or with explicit text/key columns, and written as::

    OUT/kept.parquet          rows kept, columns as read
    OUT/duplicates.parquet    rows removed + _duplicate_of, _dedupe_rule, _dedupe_cluster,
                              _similarity_estimated, _similarity_verified, _dedupe_reason
    OUT/clusters.parquet      one row per kept row that has duplicates
    OUT/split_groups.parquet  task / meta groups found in more than one split
    OUT/summary.json          format, inputs (path, bytes, SHA-256, rows), settings, counts

The order key is (input path as given, sorted; row); rows keep ``_source``/``_line`` when
the dataset is rowgate output, else they get the file path and 1-based row number.
``OUT`` appears atomically, as a run's output does.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import polars as pl

from pipeline.core.config import ConfigError, DedupeSettings
from pipeline.dedupe.keys import DedupeKey, KeyField
from pipeline.dedupe.table import dedupe_table
from pipeline.gate.reader import JSONL_SUFFIXES, InputError, refuse_same_files
from pipeline.kinds import KINDS, UnknownKindError, get_kind
from pipeline.output.manifest import MANIFEST_NAME, ManifestError, load_manifest
from pipeline.output.outdir import OutputClaim, claim_output
from pipeline.records.lineage import file_sha256

__all__ = ["DEDUPE_FORMAT", "DatasetInput", "DatasetResult", "dedupe_dataset"]

#: ``summary.json``'s format: it also proves that rowgate wrote OUT (:mod:`pipeline.output.outdir`)
DEDUPE_FORMAT: Final = "rowgate-dedupe/1"

_OUTPUT_COLUMNS: Final = (
    "_duplicate_of",
    "_dedupe_rule",
    "_dedupe_cluster",
    "_similarity_estimated",
    "_similarity_verified",
)
#: columns the dedupe stage adds to the rows it reads (a row's split, its row id): a dataset
#: holding one is refused, since its values would be overwritten and then dropped
_RESERVED_COLUMNS: Final = ("_split", "_row")


@dataclass(frozen=True)
class DatasetInput:
    """A Parquet file or a directory of them, optionally labelled with a split."""

    path: str
    split: str | None = None


@dataclass
class DatasetResult:
    out: Path
    summary: dict[str, Any]


def _expand(inputs: Sequence[DatasetInput]) -> list[DatasetInput]:
    files: dict[str, DatasetInput] = {}
    for given in inputs:
        path = Path(given.path)
        if path.is_dir():
            found = [DatasetInput(str(p), given.split) for p in _dataset_files(path)]
        elif path.is_file():
            _refuse_jsonl(path)
            found = [given]
        else:
            raise InputError(f"{given.path}: no such file or directory")
        for item in found:
            if item.path in files:
                raise InputError(f"{item.path}: given more than once")
            files[item.path] = item
    refuse_same_files((p, p) for p in files)
    return [files[p] for p in sorted(files)]


def _dataset_files(directory: Path) -> list[Path]:
    """The Parquet files a directory stands for. A run's output directory stands for the
    ``accepted`` parts its manifest lists: its other tables (rejected, duplicates, dedupe
    clusters) are no data, and a file the manifest does not list is no part of the run."""
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
    else:
        members = sorted(directory.rglob("*.parquet"))
    if not members:
        raise InputError(f"{directory}: directory holds no .parquet files")
    return members


def _refuse_jsonl(path: Path) -> None:
    if path.name.endswith(JSONL_SUFFIXES):
        raise InputError(
            f"{path}: rowgate dedupe reads Parquet; gate JSONL first with "
            f"`rowgate run {path} --kind KIND --out OUT` (a run dedupes its rows as it goes), "
            "then `rowgate dedupe OUT` for a further pass"
        )


def _column_key(text: Sequence[str], keys: Sequence[str]) -> DedupeKey:
    """A key from explicit columns: text columns are normalised and shingled, key columns
    compared exactly (any type, as text)."""
    return DedupeKey(
        "columns " + ", ".join([*text, *keys]),
        tuple(dict.fromkeys([*text, *keys])),
        (
            *(KeyField(c, pl.col(c).cast(pl.String)) for c in text),
            *(KeyField(c, pl.col(c).cast(pl.String), prose=False) for c in keys),
        ),
    )


def _resolve_key(
    frame: pl.DataFrame, kind: str | None, text: Sequence[str], keys: Sequence[str]
) -> tuple[str, DedupeKey | None, bool]:
    """(kind name, key, whether ``_content_sha256`` may serve as the exact key)."""
    if text or keys:
        return kind or "columns", _column_key(text, keys), False
    if kind is None and "_kind" in frame.columns:
        found = frame["_kind"].drop_nulls().unique().to_list()
        if len(found) == 1:
            kind = str(found[0])
    if kind is None:
        raise ConfigError(
            "dedupe: give --kind, or --text/--key columns (the dataset names no single _kind)"
        )
    if kind not in KINDS:
        raise InputError(str(UnknownKindError(kind)))
    return kind, get_kind(kind).dedupe_key(), True


def _check_comparable(frame: pl.DataFrame, key: DedupeKey | None, rule: str) -> None:
    """An :class:`InputError` naming a key column that cannot be read as text (a list,
    bytes that are not UTF-8) or a survivor field that does not exist; the dedupe would
    otherwise fail inside polars (an internal error). Only types are named: a polars
    message may quote a value."""
    probes = [(f.name, f.expr) for f in key.fields] if key is not None else []
    if ":" in rule:
        root, *rest = rule.split(":", 1)[1].split(".")
        value = pl.col(root)
        for field_name in rest:
            value = value.struct.field(field_name)
        probes.append((f"dedupe.survivor {rule}", value))
    for label, expr in probes:
        try:
            frame.select(expr)
        except pl.exceptions.PolarsError:
            types = ", ".join(f"{c}: {frame.schema[c]}" for c in expr.meta.root_names())
            raise InputError(
                f"dedupe: {label} cannot be compared ({types}); a key is read as text, a "
                "survivor field must exist"
            ) from None


def _read(files: list[DatasetInput]) -> tuple[pl.DataFrame, list[dict[str, Any]]]:
    frames, listed = [], []
    for item in files:
        try:
            frame = pl.read_parquet(item.path, glob=False)  # a file: its name is no pattern
        except (pl.exceptions.PolarsError, OSError) as exc:
            raise InputError(f"{item.path}: not a readable Parquet file ({exc})") from None
        reserved = [c for c in _RESERVED_COLUMNS if c in frame.columns]
        if reserved:
            raise InputError(
                f"{item.path}: has a column named {reserved[0]!r}, which rowgate dedupe uses "
                "for its own bookkeeping; rename that column first"
            )
        lineage = {}
        half = [c for c in ("_source", "_line") if c in frame.columns]
        if len(half) == 1:
            # lineage is both columns; one alone is the dataset's own data, never overwritten
            other = "_line" if half == ["_source"] else "_source"
            raise InputError(
                f"{item.path}: has a column {half[0]!r} but no {other!r}: rowgate dedupe "
                "writes its lineage as that pair; rename the column first"
            )
        if len(half) == 2 and not (
            frame.schema["_source"] == pl.String and frame.schema["_line"].is_integer()
        ):
            raise InputError(
                f"{item.path}: its '_source' and '_line' columns are not lineage (a string "
                "and an integer): rename them first"
            )
        if not half:
            lineage = {
                "_source": pl.lit(item.path),
                "_line": pl.int_range(1, frame.height + 1, dtype=pl.Int64),
            }
        if "_record_sha256" not in frame.columns:
            lineage["_record_sha256"] = pl.lit(None, pl.String)
        # an earlier dedupe's verdicts describe another dataset: this run writes its own
        stale = [c for c in (*_OUTPUT_COLUMNS, "_dedupe_reason") if c in frame.columns]
        frames.append(frame.drop(stale).with_columns(**lineage))
        listed.append(
            {
                "path": item.path,
                "split": item.split,
                "rows": frame.height,
                "bytes": os.path.getsize(item.path),
                "sha256": file_sha256(item.path),
            }
        )
    try:
        combined = pl.concat(frames, how="diagonal_relaxed")
    except pl.exceptions.PolarsError as exc:
        raise InputError(f"the inputs do not share compatible columns ({exc})") from None
    splits = pl.Series(
        [item.split for item, f in zip(files, frames, strict=True) for _ in range(f.height)],
        dtype=pl.String,
    )
    return combined.with_columns(_split=splits), listed


def dedupe_dataset(
    inputs: Sequence[DatasetInput],
    out: Path,
    settings: DedupeSettings,
    *,
    kind: str | None = None,
    text_columns: Sequence[str] = (),
    key_columns: Sequence[str] = (),
    force: bool = False,
) -> DatasetResult:
    """Dedupe Parquet ``inputs`` into ``out`` (see the module docstring)."""
    settings.validate("dedupe")
    if not inputs:
        raise ConfigError("dedupe: no inputs")
    protect = [Path(given.path) for given in inputs]
    with claim_output(out, force=force, protect=protect) as claim:
        return _dedupe(claim, inputs, settings, kind, text_columns, key_columns)


def _dedupe(
    claim: OutputClaim,
    inputs: Sequence[DatasetInput],
    settings: DedupeSettings,
    kind: str | None,
    text_columns: Sequence[str],
    key_columns: Sequence[str],
) -> DatasetResult:
    files = _expand(inputs)
    frame, listed = _read(files)
    labelled = {f.split for f in files}
    for split in settings.protected_splits:
        if split not in labelled:
            raise ConfigError(f"dedupe.protected_splits: no input is labelled with split {split!r}")
    name, key, fingerprint = _resolve_key(frame, kind, text_columns, key_columns)
    # group fields (task_id, meta) are optional: absent columns are simply not checked
    needed = list(key.columns) if key is not None else []
    rule = settings.survivor_rule(name)
    if ":" in rule:
        needed.append(rule.split(":", 1)[1].split(".", 1)[0])
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise InputError(f"dedupe: the inputs have no column {missing[0]!r} ({name})")
    # a kind's key reads rowgate output, whose types its schema fixed: only columns named
    # on the command line are probed (a probe is one more pass over each key column)
    _check_comparable(frame, None if fingerprint else key, rule)
    work = frame if fingerprint else frame.drop("_content_sha256", strict=False)
    outcome = dedupe_table(work, key, settings, name)
    removed_rows = outcome.removed["_row"].to_numpy()
    # typed: a Series of no rows (every input empty) would otherwise have no dtype to negate
    is_removed = pl.Series([False] * frame.height, dtype=pl.Boolean)
    is_removed[removed_rows] = True
    original = frame.drop("_split")
    kept = original.filter(~is_removed)
    duplicates = pl.concat(
        [
            original[removed_rows],
            outcome.removed.select(*_OUTPUT_COLUMNS, _dedupe_reason="_reason"),
        ],
        how="horizontal",
    )
    if kept.height + duplicates.height != frame.height:
        raise AssertionError("dedupe lost rows")  # conservation; never expected
    summary = {
        "format": DEDUPE_FORMAT,
        "inputs": listed,
        "kind": name,
        "settings": dataclasses.asdict(settings),
        "counts": {"rows": frame.height, "kept": kept.height, "duplicates": duplicates.height},
        "dedupe": outcome.stats,
    }
    with claim.staging() as tmp:
        kept.write_parquet(tmp / "kept.parquet")
        duplicates.write_parquet(tmp / "duplicates.parquet")
        outcome.clusters.write_parquet(tmp / "clusters.parquet")
        outcome.groups.drop("_row").unique(["field", "value"], maintain_order=True).write_parquet(
            tmp / "split_groups.parquet"
        )
        (tmp / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return DatasetResult(claim.out, summary)
