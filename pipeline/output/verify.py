"""``rowgate verify``: recompute everything a run's manifest claims; trust none of it.

The manifest is a claim, never evidence. Each check recomputes a fact from the bytes on
disk and reports what differs (never a record value):

1. layout: OUT holds ``manifest.json``, the files the manifest lists and the directories
   leading to them, nothing else: any other file, directory (empty ones too) or symbolic
   link is reported; a listed path must be a plain relative path of the layout
   (``accepted/<kind>/part-N.parquet``, ``rejected/part-N.parquet``, …);
2. every listed output, artifact and report has its size and SHA-256, and each Parquet
   file its row count and the configured compression, each output part the Arrow schema
   a run writes for its disposition and kind (:func:`~pipeline.output.writer.part_schema`,
   with the columns the config's global stages declare); a file whose rows cannot be read
   or decoded is a problem naming it, never a mangled manifest; ``report.html`` is the
   page the manifest and the outputs render (last, when the caller passes the renderer
   and all else verified: :mod:`pipeline.reports` lies above this layer);
3. every input still has its size and SHA-256, and the compression its bytes show;
4. config: the effective config's digest is recomputed from the manifest's own content,
   the config file re-hashed when it is still there, and each pin the config holds
   equals the digest recorded for that file;
5. pinned files: every schema, rubric, decision policy, reference table and
   sanitization policy the run read is re-hashed (their list is derived from the
   config, not taken from the manifest);
6. lineage and conservation, streamed: every line of every input (re-read and
   re-hashed) appears in exactly one output row, with its ``_offset`` and
   ``_raw_sha256``; no row names a line twice, a line beyond the input or another file;
   each line is gated again and its row holds what the gate decides (:class:`_Regate`);
7. records: each row's ``_sanitizer`` is the manifest's sanitizer version where
   sanitization ran, null elsewhere; each typed row decodes to a record whose canonical
   JSON hashes to ``_record_sha256``, whose fingerprint is ``_content_sha256``, valid
   under the schema the manifest records (a row quarantined with ``pii.schema_invalid`` says its redacted
   record fails that schema: there only the digest is checked); a rejected row's
   ``_raw`` hashes to its ``_raw_sha256``, and is null only where a reason says why;
8. duplicates: each removed row's ``_duplicate_of`` names another row OUT holds (a
   retry's original may itself be a duplicate), with the ``_record_sha256`` it names;
9. counts: per disposition and per reason, recomputed from the rows themselves (the
   disposition is the file's directory); ``counts.lines`` and the conservation record
   recomputed from the sources.

A keyed run (``[lineage]``) is verified with the same key, read from the same environment
variable or file: ``_raw_sha256`` and ``_content_sha256`` are recomputed as HMAC-SHA-256.
A missing key is an error naming where it was looked for; a key whose id is not the
manifest's is a mismatch, and nothing else is checked with it.

Memory stays bounded on large outputs: files are read a row group at a time, and the
lineage check walks each input's lines and the rows naming them together, in line
order, holding only the files whose line range is current.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.core.config import (
    CampaignConfig,
    ConfigError,
    EngineSettings,
    Limits,
    LineageSettings,
    recorded_config,
)
from pipeline.core.errors import RowgateError
from pipeline.core.reasons import (
    LINE_TOO_LARGE,
    PII_RAW_WITHHELD,
    PII_SCHEMA_INVALID,
    REASONS_TYPE,
    Disposition,
)
from pipeline.decide.columns import OutputColumn
from pipeline.engines import Engine, Progress, Step
from pipeline.engines.local import LocalEngine
from pipeline.gate.arrow_mapping import RecordLayout, derive_layout
from pipeline.gate.gate import Gate
from pipeline.gate.reader import (
    InputError,
    InputFile,
    LineBatch,
    Shard,
    detect_compression,
    jsonl_named,
    read_batches,
)
from pipeline.kinds import KINDS
from pipeline.output.manifest import (
    MANIFEST_NAME,
    ManifestError,
    dependency_versions,
    effective_config_sha256,
    exact_config,
    load_manifest,
    pinned_files,
)
from pipeline.output.outdir import FILE_SECTIONS, unexpected_entries
from pipeline.output.writer import part_schema
from pipeline.records.canonical import CANONICALIZATION, canonical_json_fast
from pipeline.records.lineage import (
    LINEAGE_FIELDS,
    LineageDigest,
    exact_path,
    file_sha256,
    source_name,
)
from pipeline.records.schemas import SCHEMA_DIR, SchemaEntry, SchemaError, load_schema
from pipeline.storage import parquet_batches

__all__ = ["RenderReport", "VerifyReport", "read_paths", "verify_run"]

#: renders a run's ``report.html`` from OUT and its manifest: the caller passes
#: :func:`pipeline.reports.run_report.render_run_report` (a layer above this one)
RenderReport = Callable[[Path, dict[str, Any]], str]

_MAX_LISTED: Final = 20
_LINEAGE: Final = ["_source", "_line", "_offset", "_raw_sha256", "_record_sha256"]
_LINEAGE_SCHEMA: Final = pa.schema([f for f in LINEAGE_FIELDS if f.name in _LINEAGE])
#: what the gate decided for a line, as its row holds it (compared with the line gated
#: again: :class:`_Regate`); ``_withheld``: the row's ``_raw`` is null (rejected/ only)
_GATED: Final = ["_kind", "_schema_sha256", "_content_sha256", "_reasons"]
#: what decides how a line is gated besides rowgate's own code: the interpreter (its json
#: scanner, regexes and Unicode data), parsers, validator, hashes and phone numbers
_GATE_DEPENDENCIES: Final = (
    "python",
    "rowgate",
    "orjson",
    "fastjsonschema",
    "xxhash",
    "phonenumbers",
)
_GATED_SCHEMA: Final = pa.schema(
    [*((name, pa.string()) for name in _GATED[:-1]), ("_reasons", REASONS_TYPE)]
)
_RUN_REPORT: Final = "report.html"
#: rows per batch read from a Parquet file (the writer's row groups hold 4096)
_BATCH_ROWS: Final = 4096
#: lines of an input compared at a time with the rows naming them (at most
#: ``BATCH_BYTES`` of line bytes too: :func:`read_batches`)
_WINDOW_LINES: Final = 1 << 14
_PART: Final = re.compile(
    r"(?:(?P<dir>accepted|quarantined|duplicates)/(?P<kind>[^/]+)|rejected)/part-\d{5,}\.parquet"
)
_DISPOSITION_OF_DIR: Final = {
    "accepted": "accepted",
    "quarantined": "quarantined",
    "duplicates": "duplicate",
    None: "rejected",
}
#: config codec → the names Parquet metadata may give it (pyarrow versions differ for lz4)
_CODECS: Final = {"none": {"UNCOMPRESSED"}, "lz4": {"LZ4", "LZ4_RAW"}}


@dataclass
class VerifyReport:
    problems: list[str] = field(default_factory=list)
    #: what could not be checked and why (not a mismatch), e.g. a config file moved away
    notes: list[str] = field(default_factory=list)
    checked: Counter[str] = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        return not self.problems

    def problem(self, message: str) -> None:
        if len(self.problems) < _MAX_LISTED:
            self.problems.append(message)
        elif len(self.problems) == _MAX_LISTED:
            self.problems.append("… further problems not listed")

    def add(self, part: VerifyReport) -> None:
        """What a task found, after what was found before it."""
        for message in part.problems:
            self.problem(message)
        self.notes.extend(part.notes)
        self.checked.update(part.checked)


@dataclass(frozen=True)
class _Output:
    """A listed Parquet output whose bytes match the manifest, and what its path says."""

    path: str
    disposition: str
    kind: str | None
    #: whether its rows are checked as records: not when its schema is not the one a run
    #: writes (they still count, and their lineage is checked)
    rows_checked: bool = True


@dataclass
class _Pointers:
    """The rows the ``_duplicate_of`` of removed rows name, as sorted keys (the input's
    position in the manifest, never its recorded ``index``, and the line: :func:`_keys`),
    each with the ``_record_sha256`` it names and whether another row with that key has
    been found; one array entry per removed row."""

    #: the manifest's input paths, in its order
    inputs: pa.Array
    keys: np.ndarray[Any, Any]
    shas: np.ndarray[Any, Any]
    found: np.ndarray[Any, Any]
    #: the key of the removed row each pointer belongs to (a row never names itself)
    owners: np.ndarray[Any, Any]


@dataclass
class _Tally:
    """What the rows of the output files say, recomputed."""

    rows: Counter[str] = field(default_factory=Counter)
    reasons: dict[str, Counter[str]] = field(default_factory=dict)
    #: input path → [(first line, last line, file)] of the files holding its rows
    files_of: dict[str, list[tuple[int, int, str]]] = field(default_factory=dict)
    #: _source values that name no input → rows
    strangers: Counter[str] = field(default_factory=Counter)
    pointers: _Pointers | None = None
    #: input path → lines whose row holds no ``_raw`` because the line is too large: the
    #: lineage check reads each and compares its length with the limit
    too_large: dict[str, set[int]] = field(default_factory=dict)

    def add(self, part: _Tally) -> None:
        """A file's tally (:func:`_scan_task`), after the files before it."""
        self.rows.update(part.rows)
        for disposition, counts in part.reasons.items():
            self.reasons.setdefault(disposition, Counter()).update(counts)
        self.strangers.update(part.strangers)
        for source, files in part.files_of.items():
            self.files_of.setdefault(source, []).extend(files)
        for source, lines in part.too_large.items():
            self.too_large.setdefault(source, set()).update(lines)


@dataclass(frozen=True)
class _Work:
    """What every verify task is given: OUT, its manifest, the kinds whose schemas the
    command checked and loaded, and whether it could build the run's gate (:class:`_Worker`
    builds its own from them, once a worker)."""

    out: Path
    manifest: dict[str, Any] = field(hash=False)
    kinds: frozenset[str]
    regate: bool

    @property
    def args(self) -> tuple[Any, ...]:
        return (str(self.out), self.manifest, self.kinds, self.regate)


class _Worker:
    """A worker's state for the tasks of a verify: the schemas' layouts (read again and
    held to their recorded digests), the lineage digest (its key read here, never sent),
    the run's sanitizer version, and the run's gate, built on its first use."""

    def __init__(
        self, out: str, manifest: dict[str, Any], kinds: frozenset[str], regate: bool
    ) -> None:
        scratch = VerifyReport()  # what they say was said by the command itself
        self.out, self.manifest, self.kinds, self.regate = Path(out), manifest, kinds, regate
        self.layouts = _schemas(manifest, scratch)
        self.inputs = {entry["path"] for entry in manifest["inputs"]}
        sanitize = manifest["sanitize"]
        self.sanitizer: str | None = sanitize["sanitizer_version"] if sanitize else None
        self.digest = _lineage_digest(manifest, scratch)
        self._gate: Gate | None = None

    def gate(self) -> Gate | None:
        if self._gate is None and self.regate:
            self._gate = _gate_of(self.manifest)
        return self._gate


# -- 1, 2: layout and files ------------------------------------------------------------


def _plain_relative(path: Any) -> bool:
    if not isinstance(path, str) or not path or "\\" in path:
        return False
    pure = PurePosixPath(path)
    return (
        not pure.is_absolute()
        and str(pure) == path
        and all(part not in ("", ".", "..") for part in pure.parts)
    )


def _listed(manifest: dict[str, Any], report: VerifyReport) -> dict[str, dict[str, Any]]:
    """Every file the manifest lists, by path; paths that could leave OUT are refused."""
    listed: dict[str, dict[str, Any]] = {}
    for section in FILE_SECTIONS:
        for entry in manifest.get(section, []):
            path = entry["path"]
            if not _plain_relative(path) or path == MANIFEST_NAME:
                report.problem(f"manifest {section}: {path!r} is not a path inside OUT")
            elif path in listed:
                report.problem(f"manifest {section}: {path} is listed twice")
            elif section == "outputs" and not _PART.fullmatch(path):
                report.problem(f"manifest outputs: {path} is not a path of the output layout")
            else:
                listed[path] = entry | {"section": section}
    return listed


def _check_layout(out: Path, listed: dict[str, Any], report: VerifyReport) -> None:
    """Report every file, directory or link in OUT that the manifest does not account for."""
    for relative, is_dir, link in unexpected_entries(out, {*listed, MANIFEST_NAME}):
        if link:
            report.problem(f"{relative}: a symbolic link in OUT (rowgate writes none)")
        elif is_dir:
            report.problem(f"{relative}/: a directory the manifest does not account for")
        else:
            report.problem(f"{relative}: a file the manifest does not list")


def _check_files(
    out: Path, manifest: dict[str, Any], listed: dict[str, dict[str, Any]], report: VerifyReport
) -> list[_Output]:
    codec = manifest["config"]["output"]["compression"]
    allowed = _CODECS.get(codec, {codec.upper()})
    good = []
    for path, entry in listed.items():
        where = out / path
        report.checked["reports" if entry["section"] == "reports" else "output files"] += 1
        if where.is_symlink() or not where.is_file():
            if not where.is_symlink():
                report.problem(f"{path}: missing")
            continue
        if where.stat().st_size != entry["bytes"] or file_sha256(where) != entry["sha256"]:
            report.problem(f"{path}: bytes differ from the manifest's SHA-256")
            continue
        if entry["section"] == "reports":
            continue
        try:
            metadata = pq.ParquetFile(where).metadata
        except (OSError, pa.ArrowException) as exc:
            report.problem(f"{path}: not a readable Parquet file ({type(exc).__name__})")
            continue
        if metadata.num_rows != entry["rows"]:
            report.problem(f"{path}: {metadata.num_rows} rows, manifest says {entry['rows']}")
            continue
        codecs = {
            metadata.row_group(g).column(c).compression
            for g in range(metadata.num_row_groups)
            for c in range(metadata.num_columns)
        }
        if codecs - allowed:
            report.problem(
                f"{path}: compressed with {', '.join(sorted(codecs))}, the config says {codec}"
            )
        if entry["section"] != "outputs":
            continue
        match = _PART.fullmatch(path)
        assert match is not None  # _listed refused other output paths
        disposition, kind = _DISPOSITION_OF_DIR[match["dir"]], match["kind"]
        if entry.get("disposition") != disposition or entry.get("kind") != kind:
            report.problem(
                f"{path}: manifest says disposition {entry.get('disposition')!r} and kind "
                f"{entry.get('kind')!r}, the path says {disposition!r} and {kind!r}"
            )
        if kind is not None and kind not in KINDS:
            report.problem(f"{path}: {kind!r} is no record kind")
            continue
        good.append(_Output(path, disposition, kind))
    return good


# -- 3: inputs -------------------------------------------------------------------------


def _entries_of(directory: Path) -> list[Path]:
    """A directory's entries; none when it is not there (its inputs are reported missing)."""
    try:
        return list(directory.iterdir())
    except OSError:
        return []


def _source_path(entry: dict[str, Any], sources: Path | None) -> Path:
    """Where an input is now: its resolved path (else its path as given); under
    ``sources``, its path as given below that directory (an absolute one: the longest
    of its tails there)."""
    # a path that is not UTF-8 is recorded in its lineage form, and exactly in hex
    exact = entry.get("resolved_hex")
    resolved = Path(os.fsdecode(bytes.fromhex(exact)) if exact else str(entry["resolved"]))
    if sources is None:
        return resolved if resolved.exists() else Path(str(entry["path"]))
    given = PurePosixPath(str(entry["path"]))
    parts = list(given.parts)
    if source_name(resolved.name) == given.name:
        # a name that is not UTF-8 is in the given path only in its lineage form: its
        # exact bytes are the resolved path's
        parts[-1] = resolved.name
    if not given.is_absolute():
        return sources.joinpath(*parts)
    # an absolute path: the longest of its tails below DIR that is there (the whole of it,
    # ..., its directory and name, its name alone: the input's digest is checked anyway)
    tails = [sources.joinpath(*parts[k:]) for k in range(1, len(parts))]
    return next((tail for tail in tails if tail.exists()), tails[-1])


def _stream_limits(manifest: dict[str, Any], given: InputFile, report: VerifyReport) -> InputFile:
    """``given`` under the run's own decompression bounds: what the run read under raised
    limits, verify reads too (an older manifest: the defaults). A bound no run could have
    had (edited into the manifest) is a problem, and the default is used instead: read
    under it, an input would fail as a decompression bomb (exit 3) instead."""
    limits = manifest["config"].get("limits", {})
    bounds = {}
    for name in ("max_decompressed_bytes", "max_expansion_ratio"):
        value = limits.get(name, getattr(given, name))
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"limits.{name}")  # a mangled manifest, as any wrong form
        try:
            Limits(**{name: value}).validate("limits")
        except ConfigError as exc:
            report.problem(f"manifest config: {exc}; inputs read under the default")
            value = getattr(given, name)
        bounds[name] = value
    return dataclasses.replace(given, **bounds)


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
        same = path.stat().st_size == entry["bytes"] and file_sha256(path) == entry["sha256"]
        if not same:
            report.problem(f"input {entry['path']}: bytes differ from the manifest's SHA-256")
        # the run's bytes: read as the run did (as they show), not as the manifest now says
        compression = detect_compression(path) if same else entry["compression"]
        if compression != entry["compression"]:
            report.problem(
                f"input {entry['path']}: compression {compression!r} by its bytes, the "
                f"manifest says {entry['compression']!r}"
            )
        given = InputFile(
            entry["index"], entry["path"], str(path), entry["bytes"], compression, entry["kind"]
        )
        found[entry["path"]] = _stream_limits(manifest, given, report)
    return found


def _check_input_specs(
    manifest: dict[str, Any], sources: Path | None, report: VerifyReport
) -> None:
    """The run's inputs are the inputs its effective config names, and only those: a
    file the config names is the input of that path, a directory its JSONL-named entries
    (``DIR/NAME``), as the directory holds them now. An input dropped from ``inputs``
    with its rows left no trace that the lineage check, which walks ``inputs``, could
    find."""
    entries = {entry["path"]: entry for entry in manifest["inputs"]}
    claimed: set[str] = set()
    for spec in manifest["config"]["inputs"]:
        given = spec["path"]
        members = (
            [given]
            if given in entries
            else [p for p in entries if str(Path(given) / Path(p).name) == p]
        )
        if not members:
            report.problem(f"input {given}, which the config names, is not an input of the run")
        elif members != [given]:  # a directory: every export it holds is an input
            directory = _source_path(entries[members[0]], sources).parent
            names = {Path(p).name for p in members}
            held = sorted(
                name
                for name in (source_name(e.name) for e in _entries_of(directory))
                if jsonl_named(name) and name not in names
            )
            if held:
                report.problem(
                    f"input directory {given} holds {held[0]}, which is no input of the run "
                    f"({len(held)} such; added since the run, or dropped from its inputs)"
                )
        claimed.update(members)
    for path in entries:
        if path not in claimed:
            report.problem(f"input {path}: the config names no such input")


# -- 4, 5: config and pinned files -----------------------------------------------------


def _check_config(manifest: dict[str, Any], report: VerifyReport) -> None:
    config = manifest["config"]
    report.checked["config"] += 1
    canonicalization = manifest.get("canonicalization")
    if canonicalization is None:
        report.notes.append(
            "manifest names no canonicalization (written by an older rowgate): digests "
            f"recomputed with {CANONICALIZATION['version']}"
        )
    elif canonicalization.get("version") != CANONICALIZATION["version"]:
        report.problem(
            f"manifest canonicalization {canonicalization.get('version')!r}: this rowgate "
            f"implements {CANONICALIZATION['version']!r}, its digests cannot be recomputed"
        )
    recorded = manifest.get("config_effective_sha256")
    if recorded is None:
        report.problem(
            "manifest records no digest of its effective config (written by an older "
            "rowgate): run again to verify the config"
        )
    elif effective_config_sha256(config) != recorded:
        report.problem("manifest config: its values differ from the effective config's digest")
    if config.get("source_sha256") != manifest["config_sha256"]:
        report.problem("manifest: config_sha256 differs from the config's source_sha256")
    source = config.get("source_path")  # its lineage form; the file is at its exact bytes
    if source is not None and manifest["config_sha256"] is not None:
        exact = exact_config(manifest)["source_path"]
        if not Path(exact).is_file():
            report.notes.append(f"config file {source} is no longer there: not re-hashed")
        elif file_sha256(exact) != manifest["config_sha256"]:
            report.problem(f"config file {source} changed since the run (digest differs)")
    if bool(config["sanitize"]["enabled"]) != (manifest.get("sanitize") is not None):
        report.problem("manifest: sanitization recorded differently in config and sanitize")


def _pins(manifest: dict[str, Any]) -> dict[tuple[str, str], str]:
    """(role, name) → the digest the config pins for that file."""
    config = manifest["config"]
    pins = {("rubric", r): d for r, d in config["rubrics"]["pins"].items()}
    pins |= {("policy", k): p["sha256"] for k, p in config["policy"].items() if p["sha256"]}
    pins |= {
        ("reference_table", n): t["sha256"]
        for n, t in config["references"].items()
        if t is not None and t["sha256"]
    }
    pins |= {("schema", s): d for s, d in config["schemas"]["pins"].items()}
    if config["sanitize"]["policy_sha256"]:
        pins[("sanitize_policy", "sanitize")] = config["sanitize"]["policy_sha256"]
    return pins


def _check_pinned(manifest: dict[str, Any], report: VerifyReport) -> None:
    pins = _pins(manifest)
    recorded = manifest.get("pinned")
    if recorded is None:
        report.problem(
            "manifest records no digests of the rubrics, policies, reference tables and "
            "sanitization policy (written by an older rowgate): run again to verify them"
        )
        return
    by_key = {(e["role"], e["name"], e["path"]): e["sha256"] for e in recorded}
    # a file rowgate ships (a bundled rubric) lies where this install keeps it, which is
    # not where the install that made the run kept it: matched by role and name alone
    by_name: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for e in recorded:
        by_name.setdefault((e["role"], e["name"]), []).append(e)
    # Loaded-time digests the run also recorded must tell the same story.
    stated = {
        ("sanitize_policy", "sanitize"): (manifest.get("sanitize") or {}).get("policy_sha256")
    }
    notes = manifest.get("global", {})
    for scoring in notes.get("scoring", {}).values():
        stated[("rubric", scoring["rubric"]["id"])] = scoring["rubric"]["sha256"]
    stated |= {("policy", k): p["sha256"] for k, p in notes.get("policy", {}).items()}
    for entry, where in _pinned(manifest):
        role, name, path = entry["role"], entry["name"], entry["path"]
        report.checked["pinned files"] += 1
        digest = by_key.get((role, name, path))
        label = f"{role.replace('_', ' ')} {name} ({path})"
        moved = by_name.get((role, name), [])
        if digest is None and len(moved) == 1:
            digest = moved[0]["sha256"]
            report.notes.append(
                f"{label}: recorded at {moved[0]['path']} (another install or checkout of "
                "rowgate made the run): re-hashed here"
            )
        if digest is None:
            report.problem(f"{label}: the manifest records no digest for it")
            continue
        for claim in (pins.get((role, name)), stated.get((role, name))):
            if claim is not None and claim != digest:
                report.problem(
                    f"{label}: the run's pin or loaded digest differs from the one recorded"
                )
        if not Path(where).is_file():
            report.problem(f"{label}: not found (the run read it)")
        elif file_sha256(where) != digest:
            report.problem(f"{label}: changed since the run (digest differs)")


def _pinned(manifest: dict[str, Any]) -> list[tuple[dict[str, str], str]]:
    """Each pinned file the run's config derives (:func:`pinned_files` of its exact
    config, :func:`exact_config`) as the manifest names it (``{role, name, path}``, the
    path in its lineage form), and where it is read: at the exact bytes the manifest's
    entry of that name and path records (``path_hex``), else where the config puts it.

    The list is the config's, never the manifest's; only where a path that is not UTF-8
    lies is taken from the entry that names it (the sanitization policy rowgate ships is
    named by the manifest's ``sanitize`` block, which holds its lineage form alone)."""
    exact = {
        (e["role"], e["name"], e["path"]): e.get("path_hex") for e in manifest.get("pinned") or []
    }
    found = []
    for entry in pinned_files({**manifest, "config": exact_config(manifest)}):
        named = {**entry, "path": source_name(entry["path"])}
        recorded = exact.get((named["role"], named["name"], named["path"]))
        where = entry["path"] if recorded is None else exact_path(named["path"], recorded)
        found.append((named, where))
    return found


def _schema_path(info: dict[str, Any]) -> Path:
    """Where a schema the manifest lists is read: its recorded path (at its exact bytes
    when that is not UTF-8, ``path_hex``), else the file rowgate ships (an older
    manifest)."""
    if not info.get("path"):
        return SCHEMA_DIR / str(info["file"])
    return Path(exact_path(info["path"], info.get("path_hex")))


def _schemas(
    manifest: dict[str, Any], report: VerifyReport
) -> dict[str, tuple[RecordLayout, SchemaEntry]]:
    layouts = {}
    pins = _pins(manifest)
    for kind_id, info in manifest["schemas"].items():
        path = _schema_path(info)
        report.checked["pinned files"] += 1
        if kind_id not in KINDS:
            report.problem(f"schema {kind_id}: no such record kind")
            continue
        pin = pins.get(("schema", kind_id))
        if pin is not None and pin != info["sha256"]:
            report.problem(f"schema {kind_id}: the config's pin differs from the digest recorded")
        try:
            entry = load_schema(path, kind_id)
        except (OSError, SchemaError) as exc:
            report.problem(f"schema {kind_id}: cannot load ({exc})")
            continue
        if entry.sha256 != info["sha256"]:
            report.problem(
                f"schema {kind_id}: {source_name(str(path))} changed since the run (digest differs)"
            )
            continue
        layouts[kind_id] = (derive_layout(entry.schema, KINDS[kind_id].apart), entry)
    return layouts


# -- 2: each part's Arrow schema -------------------------------------------------------


def _declared(
    manifest: dict[str, Any], report: VerifyReport
) -> dict[str, list[OutputColumn]] | None:
    """The extra columns the run's global stages declare for each kind the manifest names,
    derived from the config it records as a run derives them (a rubric's scores, the
    policy's decisions, dedupe's pointers). None, with the problem reported, when the
    config or a file it names no longer yields them."""
    from pipeline.decide.context import declared_columns  # polars: load when needed

    try:
        config = recorded_config(exact_config(manifest))
        return declared_columns(config, sorted(manifest["schemas"]))
    except (RowgateError, OSError) as exc:
        report.problem(
            f"manifest config: the columns its global stages declare cannot be derived ({exc}); "
            "the parts' columns are not checked"
        )
        return None


def _schema_difference(found: pa.Schema, wanted: pa.Schema) -> str | None:
    """How ``found`` differs from ``wanted`` (names, order, types, nullability, field and
    schema metadata), or None. A list's item is named as Parquet names it on reading
    (``element``, where the writer's Arrow says ``item``): types compare without it."""
    unwritten = [name for name in found.names if name not in wanted.names]
    if unwritten:
        return f"column(s) {', '.join(map(repr, unwritten))}, which a run does not write there"
    absent = [name for name in wanted.names if name not in found.names]
    if absent:
        return f"no column(s) {', '.join(map(repr, absent))}"
    if found.names != wanted.names:
        return "its columns in another order than a run writes them (or one twice)"
    for have, want in zip(found, wanted, strict=True):
        if not have.type.equals(want.type):
            return f"column {have.name!r} of type {have.type}, where a run writes {want.type}"
        if have.nullable != want.nullable:
            state = "nullable" if have.nullable else "not null"
            return f"column {have.name!r} {state}, where a run writes it otherwise"
        if (have.metadata or {}) != (want.metadata or {}):
            return f"column {have.name!r} with metadata a run does not write"
    if (found.metadata or {}) != (wanted.metadata or {}):
        return "key-value metadata a run does not write"
    return None


def _wanted_schema(
    f: _Output,
    found: pa.Schema,
    layouts: dict[str, tuple[RecordLayout, SchemaEntry]],
    declared: dict[str, list[OutputColumn]],
    typed: set[str],
) -> pa.Schema:
    """The schema a run writes for ``f``. ``rejected/`` carries the columns every kind
    with staged rows declares for it: the kinds with a typed part at least, and a kind
    whose rows the gate rejected whole may add its own (they are only recognised here:
    each is declared with one type for every kind)."""
    from pipeline.decide.context import rejected_columns  # polars: load when needed

    if f.kind is not None:
        columns = declared[f.kind]
        return part_schema(layouts[f.kind][0].fields, f.kind, Disposition(f.disposition), columns)
    kinds = typed | {
        kind
        for kind, columns in declared.items()
        if all(c.name in found.names for c in columns if Disposition.REJECTED in c.dispositions)
    }
    columns = rejected_columns({kind: declared[kind] for kind in kinds})
    return part_schema([], None, Disposition.REJECTED, columns)


def _other_versions(manifest: dict[str, Any], versions: dict[str, str]) -> list[str]:
    """Those of ``versions`` (name → this process's version) the run was made with
    another version of, sorted."""
    recorded = manifest.get("versions", {})
    return sorted(name for name, version in versions.items() if recorded.get(name) != version)


def _check_part_schemas(
    out: Path,
    files: list[_Output],
    layouts: dict[str, tuple[RecordLayout, SchemaEntry]],
    declared: dict[str, list[OutputColumn]] | None,
    report: VerifyReport,
    manifest: dict[str, Any],
) -> list[_Output]:
    """Each part's Arrow schema against the one a run writes for its disposition and kind
    (decoding rows reads only the layout's columns: an added column, or a part rewritten
    with other types, passed); the parts whose schema differs are left out of the row
    checks as records (they still count, and their lineage is checked). Not compared for
    a run made by another rowgate or pyarrow, whose writer may write other columns (a
    note: every part's digest was checked)."""
    if declared is None:
        return files  # already reported: the declared columns cannot be derived
    mine = dependency_versions()
    differ = _other_versions(manifest, {n: mine[n] for n in ("rowgate", "pyarrow") if n in mine})
    if differ:
        report.notes.append(
            f"part schemas not compared: the run was made with other versions of "
            f"{', '.join(differ)} (their writer may write other columns; every part's "
            "digest was checked)"
        )
        return files
    typed = {f.kind for f in files if f.kind is not None}
    good = []
    for f in files:
        if f.kind is not None and f.kind not in layouts:
            good.append(f)  # already reported: its kind's schema
            continue
        report.checked["part schemas"] += 1
        found = pq.read_schema(out / f.path)
        wanted = _wanted_schema(f, found, layouts, declared, typed)
        difference = _schema_difference(found, wanted)
        if difference is not None:
            report.problem(f"{f.path}: {difference}")
        good.append(f if difference is None else dataclasses.replace(f, rows_checked=False))
    return good


# -- 7, 8: rows, records and counts (one pass per file) --------------------------------


class _Unreadable(Exception):
    """A listed Parquet file whose rows cannot be read (its bytes are the ones the
    manifest names: rewritten and resealed); a problem with that file, not the manifest."""


#: what reading or decoding a file's rows may raise on bytes no run wrote (a
#: ``RowgateError`` is re-raised first: it says itself what is wrong)
_UNDECODABLE: Final = (_Unreadable, OSError, pa.ArrowException, ValueError, TypeError, KeyError)


def _batches(path: Path, columns: list[str] | None = None) -> Iterator[pa.Table]:
    # read without pyarrow's pre-buffering (its default, which reads every row group
    # first): with it, reading a 1M-row part raised peak memory by ~120 MB, and more on
    # larger parts; without it by ~45 MB on 1M rows and on 2M rows
    try:
        for batch in parquet_batches(path, columns, _BATCH_ROWS):
            yield pa.Table.from_batches([batch])
    except (OSError, pa.ArrowException) as exc:
        raise _Unreadable(type(exc).__name__) from exc


def _unreadable(path: str, exc: Exception) -> str:
    cause = exc.__cause__ if isinstance(exc, _Unreadable) and exc.__cause__ else exc
    return f"{path}: its rows cannot be read or decoded ({type(cause).__name__})"


def _scan_files(
    engine: Engine, work: _Work, files: list[_Output], tally: _Tally, report: VerifyReport
) -> None:
    """Every part's rows, a task a file on ``engine`` (each file's tally and problems
    come back and are added up in the files' order); a file whose rows cannot be read
    or decoded is a problem naming it (its lines are then missing from the lineage
    check). Then the rows ``_duplicate_of`` pointers name are matched, a file at a time."""
    found = engine.map(
        Step(_Worker, work.args, _scan_task), files, cost=lambda f: _size(work.out / f.path)
    )
    for part, problems in found:
        tally.add(part)
        report.add(problems)
    if tally.pointers is not None and len(tally.pointers.keys):
        for f in files:
            try:
                for table in _batches(work.out / f.path, ["_source", "_line", "_record_sha256"]):
                    _match_pointers(f, table, tally.pointers, report)
            except _UNDECODABLE:
                continue  # the scan named the file


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _scan_task(worker: _Worker, f: _Output, progress: Progress) -> tuple[_Tally, VerifyReport]:
    """One file's rows checked in a worker: its tally and problems."""
    tally, report = _Tally(), VerifyReport()
    if f.kind in worker.kinds and f.kind not in worker.layouts:
        report.problem(f"schema {f.kind}: changed while verify read it")
    try:
        _scan_file(worker, f, tally, report)
    except RowgateError:
        raise
    except _UNDECODABLE as exc:
        report.problem(_unreadable(f.path, exc))
    return tally, report


def _scan_file(worker: _Worker, f: _Output, tally: _Tally, report: VerifyReport) -> None:
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    checkable = f.rows_checked and (f.kind is None or f.kind in worker.layouts)
    for table in _batches(worker.out / f.path):
        tally.rows[f.disposition] += table.num_rows
        codes = pc.struct_field(pc.list_flatten(table["_reasons"]), "code")
        counts = pc.value_counts(codes)
        mine = tally.reasons.setdefault(f.disposition, Counter())
        for code, n in zip(
            counts.field("values").to_pylist(), counts.field("counts").to_pylist(), strict=True
        ):
            mine[code] += n
        grouped = table.group_by("_source").aggregate([("_line", "min"), ("_line", "max")])
        for source, low, high in zip(
            grouped["_source"].to_pylist(),
            grouped["_line_min"].to_pylist(),
            grouped["_line_max"].to_pylist(),
            strict=True,
        ):
            if source not in worker.inputs:
                tally.strangers[source] += pc.sum(pc.equal(table["_source"], source)).as_py()
                continue
            first.setdefault(source, low)
            last[source] = max(last.get(source, high), high)
        if checkable and worker.digest is not None:
            sanitized = worker.sanitizer is not None
            _check_rows(f, table, worker.layouts, report, worker.digest, tally, sanitized)
            _check_sanitizer(f, table, worker.sanitizer, report)
    for source, line in first.items():
        tally.files_of.setdefault(source, []).append((line, last[source], f.path))


def _check_rows(
    f: _Output,
    table: pa.Table,
    layouts: dict[str, tuple[RecordLayout, SchemaEntry]],
    report: VerifyReport,
    digest: LineageDigest,
    tally: _Tally,
    sanitized: bool,
) -> None:
    if f.kind is None:
        # A rejected row's _raw is null for a line too large to hold (its length is read
        # again) or bytes withheld for a secret (in a run that sanitizes); any other null
        # _raw lost the line's bytes.
        columns = ("_raw", "_raw_sha256", "_source", "_line")
        for row, (raw, sha, source, line) in enumerate(
            zip(*(table[c].to_pylist() for c in columns), strict=True)
        ):
            report.checked["raw lines"] += 1
            why = {r["code"] for r in table["_reasons"][row].as_py()} if raw is None else set()
            if LINE_TOO_LARGE in why:  # the lineage check reads the line's length
                tally.too_large.setdefault(source, set()).add(line)
            elif raw is None and not (sanitized and PII_RAW_WITHHELD in why):
                report.problem(
                    f"{f.path} line {source}:{line}: _raw is null, but no reason says why "
                    f"({LINE_TOO_LARGE}, or {PII_RAW_WITHHELD} in a run that sanitizes)"
                )
            elif raw is not None and digest.hexdigest(raw) != sha:
                report.problem(f"{f.path}: a _raw value does not hash to its _raw_sha256")
        return
    layout, entry = layouts[f.kind]
    kind = KINDS[f.kind]
    for row in table.to_pylist():
        record = layout.decode_row(row)
        report.checked["records"] += 1
        where = f"{f.path} line {row['_source']}:{row['_line']}"
        if row["_kind"] != f.kind:
            report.problem(f"{where}: _kind is not the kind of its directory")
        elif hashlib.sha256(canonical_json_fast(record)).hexdigest() != row["_record_sha256"]:
            report.problem(f"{where}: record does not hash to _record_sha256")
        elif row["_schema_sha256"] != entry.sha256 or (
            entry.errors(record) and not _redaction_broke_schema(row, f.disposition)
        ):
            report.problem(f"{where}: record is not valid under the recorded schema")
        elif kind.fingerprint_and_profile(record, digest.key) != (
            row["_content_sha256"],
            row.get("_content_profile"),
        ):
            report.problem(
                f"{where}: content fingerprint does not match _content_sha256 and _content_profile"
            )


def _check_sanitizer(
    f: _Output, table: pa.Table, sanitizer: str | None, report: VerifyReport
) -> None:
    """``_sanitizer`` re-derived: the manifest's sanitizer version on every row but a
    line the sanitizer never sees (``UNSANITIZED_CODES``), null when sanitization was off."""
    from pipeline.sanitize.sanitizer import UNSANITIZED_CODES  # detectors: load when needed

    if "_sanitizer" not in table.column_names:
        report.problem(f"{f.path}: no _sanitizer column")
        return
    for reasons, found in zip(
        table["_reasons"].to_pylist(), table["_sanitizer"].to_pylist(), strict=True
    ):
        unseen = f.kind is None and bool(reasons) and reasons[0]["code"] in UNSANITIZED_CODES
        if found != (None if unseen else sanitizer):
            report.problem(f"{f.path}: a row's _sanitizer is not the run's sanitizer version")
            return


def _redaction_broke_schema(row: dict[str, Any], disposition: str) -> bool:
    return disposition == "quarantined" and any(
        r["code"] == PII_SCHEMA_INVALID for r in row["_reasons"]
    )


def _keys(sources: pa.Array, lines: pa.Array, inputs: pa.Array) -> np.ndarray[Any, Any]:
    """One 64-bit key per (source, line): the source's position in ``inputs`` (the
    manifest's input paths) above the line; negative for a source that is no input."""
    index = pc.index_in(sources, value_set=inputs).fill_null(-1).to_numpy().astype(np.int64)
    line = lines.fill_null(0).to_numpy().astype(np.int64)
    keys: np.ndarray[Any, Any] = (index << 40) | line
    return keys


def _duplicate_pointers(
    out: Path, files: list[_Output], inputs: list[dict[str, Any]], report: VerifyReport
) -> _Pointers:
    """What every removed row's ``_duplicate_of`` names (read before the other files, so
    that the rows they name are matched as those files stream by)."""
    paths = pa.array([entry["path"] for entry in inputs], pa.string())
    keys: list[np.ndarray[Any, Any]] = []
    shas: list[np.ndarray[Any, Any]] = []
    owners: list[np.ndarray[Any, Any]] = []
    for f in files:
        # a global stage that names no kept row writes no such column (none of rowgate's)
        if (
            f.disposition != "duplicate"
            or not f.rows_checked
            or "_duplicate_of" not in pq.read_schema(out / f.path).names
        ):
            continue
        try:
            tables = list(_batches(out / f.path, ["_duplicate_of", "_source", "_line"]))
        except _Unreadable as exc:
            report.problem(_unreadable(f.path, exc))
            continue
        for table in tables:
            owners.append(_keys(table["_source"], table["_line"], paths))
            named = table["_duplicate_of"]
            named_keys = _keys(
                pc.struct_field(named, "_source"), pc.struct_field(named, "_line"), paths
            )
            if bool(np.any(named_keys < 0)) or named.null_count:
                report.problem(f"{f.path}: a _duplicate_of names no line of an input")
            keys.append(named_keys)
            digests = pc.struct_field(named, "_record_sha256").to_pylist()
            # fixed width, 64 bytes a digest: no Python object per removed row is kept
            shas.append(np.asarray([(d or "").encode("ascii", "replace") for d in digests], "S64"))
    joined = np.concatenate(keys) if keys else np.empty(0, np.int64)
    order = np.argsort(joined, kind="stable")
    return _Pointers(
        paths,
        joined[order],
        (np.concatenate(shas) if shas else np.empty(0, "S64"))[order],
        np.zeros(len(joined), dtype=bool),
        (np.concatenate(owners) if owners else np.empty(0, np.int64))[order],
    )


def _match_pointers(f: _Output, table: pa.Table, pointers: _Pointers, report: VerifyReport) -> None:
    """Mark the removed rows whose ``_duplicate_of`` names a row of ``table``; a row named
    with another ``_record_sha256`` is a problem. The row named may itself be removed: a
    retry (``cross.retry``) names its original, which dedupe may then find a duplicate of
    an earlier row."""
    if not len(pointers.keys):
        return
    keys = _keys(table["_source"], table["_line"], pointers.inputs)
    low = np.searchsorted(pointers.keys, keys, side="left")
    high = np.searchsorted(pointers.keys, keys, side="right")
    named_rows = np.nonzero((high > low) & (keys >= 0))[0]
    if not len(named_rows):
        return
    shas = table["_record_sha256"].take(pa.array(named_rows)).to_pylist()
    for row, sha in zip(named_rows, shas, strict=True):
        named = slice(int(low[row]), int(high[row]))
        pointers.found[named] |= pointers.owners[named] != keys[row]
        if bool(np.any(pointers.shas[named] != (sha or "").encode("ascii", "replace"))):
            report.problem(
                f"{f.path} line {table['_source'][int(row)]}:{table['_line'][int(row)]}: a "
                "_duplicate_of names this row with another _record_sha256"
            )


def _check_pointers(pointers: _Pointers, report: VerifyReport) -> None:
    if len(pointers.keys):
        report.checked["duplicate pointers"] += len(pointers.keys)
    missing = int(np.count_nonzero(~pointers.found))
    if missing:
        report.problem(
            f"{missing} removed row(s) name in _duplicate_of a row no output holds (or themselves)"
        )


# -- 6: lineage and conservation -------------------------------------------------------


class _Disorder(Exception):
    """An output file's rows of one input are not in line order (the writer's order)."""


class _FileRows:
    """One output file's rows of one input, in line order, read a batch at a time."""

    def __init__(self, path: Path, source: str, lowest: int = -(2**63)) -> None:
        """``lowest``: rows naming a line below it are another task's (they are still
        read, so that the file's line order is checked whole)."""
        self.path, self.source, self.lowest = path, source, lowest
        self.rejected = path.parent.name == "rejected"
        raw = ["_raw"] if self.rejected else []
        self._batches = _batches(path, [*_LINEAGE, *_GATED, *raw])
        self._held: pa.Table | None = None
        self._last = 0
        self.done = False

    def _next(self) -> pa.Table | None:
        for table in self._batches:
            try:  # the types the rows of every file are compared in
                gated = table.select(_GATED).cast(_GATED_SCHEMA)
                withheld = pc.is_null(table["_raw"]) if self.rejected else None
                table = table.select(_LINEAGE).cast(_LINEAGE_SCHEMA)
            except (KeyError, pa.ArrowException) as exc:
                raise _Unreadable(type(exc).__name__) from exc
            for name in _GATED:
                table = table.append_column(name, gated[name])
            table = table.append_column(
                "_withheld", withheld if withheld is not None else pa.nulls(len(table), pa.bool_())
            ).append_column("_rejected", pa.repeat(pa.scalar(self.rejected), len(table)))
            table = table.filter(pc.equal(table["_source"], self.source))
            if not table.num_rows:
                continue
            lines = table["_line"].to_numpy()
            if lines[0] < self._last or (len(lines) > 1 and bool(np.any(np.diff(lines) < 0))):
                raise _Disorder(self.path.name)
            self._last = int(lines[-1])
            if lines[0] < self.lowest:
                table = table.slice(int(np.searchsorted(lines, self.lowest)))
                if not table.num_rows:
                    continue
            return table
        self.done = True
        return None

    def take_through(self, last: int) -> list[pa.Table]:
        """Rows naming lines up to ``last``; the rest stays for the next window."""
        taken = []
        while not self.done:
            if self._held is None:
                self._held = self._next()
                if self._held is None:
                    break
            cut = int(np.searchsorted(self._held["_line"].to_numpy(), last, side="right"))
            taken.append(self._held.slice(0, cut))
            if cut < self._held.num_rows:
                self._held = self._held.slice(cut)
                break
            self._held = None
        return taken

    def rest(self) -> int:
        rows = 0 if self._held is None else self._held.num_rows
        while (table := self._next()) is not None:
            rows += table.num_rows
        return rows


@dataclass
class _Window:
    first: int
    last: int
    offsets: list[int] | None = None
    shas: list[str] | None = None
    #: the lines themselves, gated again (:class:`_Regate`); None when they are not
    lines: list[bytes] | None = None
    #: the numbers of the lines over the byte limit
    oversized: frozenset[int] = frozenset()


def _source_windows(
    part: Shard, base: int, max_line_bytes: int, report: VerifyReport, digest: LineageDigest
) -> Iterator[_Window]:
    """A part of an input's lines (bytes ``[start, end)``, after line ``base``) a window
    at a time: offsets, raw digests and the lines."""
    batches = read_batches(part, max_line_bytes, _WINDOW_LINES, line_hasher=digest.hasher)
    for batch in batches:
        if not len(batch):
            continue
        shas = [
            batch.oversized[i][1] if i in batch.oversized else digest.hexdigest(line)
            for i, line in enumerate(batch.lines)
        ]
        report.checked["lines"] += len(batch)
        first = base + batch.first_line
        yield _Window(
            first,
            first + len(batch) - 1,
            list(batch.offsets),
            shas,
            list(batch.lines),
            frozenset(first + i for i in batch.oversized),
        )


class _Regate:
    """The run's gate, built from the config the manifest records, and the kind the
    input declares: each line is gated again and its row must hold what the gate
    decides: the routed kind and schema, the record's digests (as sanitized, where the
    run sanitizes), the gate's reasons first among the row's, the rejected/ directory
    for a line the gate rejects, and a null ``_raw`` exactly where the sanitizer
    withholds the line's bytes. A sanitized run's records were not tied to their lines
    (a redaction undone, or an unredacted row edited, passed), nor were a rejected
    row's ``_kind`` and ``_schema_sha256``, nor a ``pii.raw_withheld`` beside the bytes
    of a line holding no secret."""

    def __init__(self, gate: Gate, declared: str | None) -> None:
        self.gate, self.declared = gate, declared

    def outcomes(self, window: _Window) -> dict[int, dict[str, Any]]:
        """What the gate decides for each line of ``window``, by line number, as the
        row of each would hold it (plus ``_rejected``). The batch path the run took,
        which a test holds to the reference path: 107 against 220 µs a line."""
        assert window.lines is not None
        assert window.offsets is not None
        gated = self.gate.gate_batch(
            LineBatch(window.first, window.offsets, window.lines), self.declared
        )
        found: dict[int, dict[str, Any]] = {}
        for kind, batch in gated.kinds.items():
            for row in batch.select(["_shard_line", *_GATED[1:], "_record_sha256"]).to_pylist():
                found[row["_shard_line"]] = {**row, "_kind": kind, "_rejected": False}
        if gated.rejected is not None:
            rejected = gated.rejected
            withheld = pc.is_null(rejected.column("_raw")).to_pylist()
            columns = ["_shard_line", *_GATED, "_record_sha256"]
            for row, held in zip(rejected.select(columns).to_pylist(), withheld, strict=True):
                found[row["_shard_line"]] = {**row, "_rejected": True, "_withheld": held}
        return found

    def problem(self, line: bytes, row: dict[str, Any], gated: dict[str, Any]) -> str | None:
        """What the row holds that the line gated again (``gated``) does not give."""
        if gated["_rejected"] and not row["_rejected"]:
            return "the gate rejects the line, but its row is not in rejected/"
        for columns, what in _DERIVED:
            if any(row[c] != gated[c] for c in columns):
                return what
        # codes and paths: a detail is prose, which a later rowgate may word otherwise
        codes = [(r["code"], r["path"]) for r in gated["_reasons"] or []]
        held = [(r["code"], r["path"]) for r in row["_reasons"] or []]
        if held[: len(codes)] != codes:
            return "the row's reasons do not begin with the gate's reasons for its line"
        if row["_rejected"] and LINE_TOO_LARGE not in {code for code, _ in codes}:
            if gated["_rejected"]:  # the gate screened the line's bytes already
                withheld = gated["_withheld"]
            else:  # rejected by a later stage: the writer screens its bytes, as here
                sanitizer = self.gate.sanitizer
                withheld = sanitizer is not None and sanitizer.raw_reason(line) is not None
            if bool(row["_withheld"]) != withheld:
                return (
                    "the row's _raw is null though the line holds no secret"
                    if row["_withheld"]
                    else "the row's _raw holds a line whose bytes the policy withholds"
                )
        return None


#: what a row holds that the gate derives from its line, and the problem a difference is
_DERIVED: Final = (
    (
        ("_kind", "_schema_sha256"),
        "the row's _kind or _schema_sha256 is not what the gate gives its line",
    ),
    (
        ("_record_sha256", "_content_sha256"),
        "the row's record is not the record its line holds",
    ),
)


def _numbered_windows(lines: int) -> Iterator[_Window]:
    for first in range(1, lines + 1, _WINDOW_LINES):
        yield _Window(first, min(lines, first + _WINDOW_LINES - 1))


@dataclass
class _LineFaults:
    twice: int = 0
    first_twice: int | None = None
    missing: int = 0
    first_missing: int | None = None
    #: rows naming a line number below 1
    invalid: int = 0

    def add(self, later: _LineFaults) -> None:
        """The faults of a later stretch of the same input's lines."""
        self.twice += later.twice
        self.missing += later.missing
        self.invalid += later.invalid
        self.first_twice = self.first_twice or later.first_twice
        self.first_missing = self.first_missing or later.first_missing


def _check_window(
    name: str,
    window: _Window,
    parts: list[pa.Table],
    faults: _LineFaults,
    report: VerifyReport,
    regate: _Regate | None,
) -> None:
    rows = pa.concat_tables(parts) if parts else None
    if rows is not None and rows.num_rows:
        order = np.argsort(rows["_line"].to_numpy(), kind="stable")
        rows = rows.take(pa.array(order))
        lines = rows["_line"].to_numpy()
    else:
        lines = np.empty(0, dtype=np.int64)
    if len(lines) and lines[0] < window.first:  # only line numbers below 1 get here
        below = int(np.searchsorted(lines, window.first))
        faults.invalid += below
        rows, lines = rows.slice(below) if rows is not None else rows, lines[below:]
    expected = np.arange(window.first, window.last + 1, dtype=np.int64)
    if not np.array_equal(lines, expected):
        repeated = np.unique(lines[1:][np.diff(lines) == 0])
        absent = np.setdiff1d(expected, lines, assume_unique=True)
        if len(repeated):
            faults.twice += len(repeated)
            faults.first_twice = faults.first_twice or int(repeated[0])
        if len(absent):
            faults.missing += len(absent)
            faults.first_missing = faults.first_missing or int(absent[0])
    if window.offsets is None or window.shas is None or rows is None or not rows.num_rows:
        return
    keep = np.ones(len(lines), dtype=bool)
    keep[1:] = np.diff(lines) != 0  # a line named twice is reported above, compared once
    at = lines[keep] - window.first
    offsets = rows["_offset"].to_numpy()[keep]
    shas = np.asarray(rows["_raw_sha256"].to_pylist(), dtype=object)[keep]
    want_offsets = np.asarray(window.offsets, dtype=np.int64)[at]
    want_shas = np.asarray(window.shas, dtype=object)[at]
    for i in np.nonzero((offsets != want_offsets) | (shas != want_shas))[0]:
        report.problem(
            f"{name}:{int(lines[keep][i])}: offset or raw SHA-256 does not match the source"
        )
    if window.lines is None or regate is None:
        return
    facts = rows.select(["_rejected", "_withheld", "_record_sha256", *_GATED]).to_pylist()
    outcomes = regate.outcomes(window)
    for place, row in zip(at.tolist(), np.flatnonzero(keep).tolist(), strict=True):
        if window.first + place in window.oversized:
            continue  # never held: its length and digest are checked above
        gated = outcomes.get(window.first + place)
        found = (
            "the gate gives its line no row"
            if gated is None
            else regate.problem(window.lines[place], facts[row], gated)
        )
        if found is not None:
            report.problem(f"{name}:{window.first + place}: {found}")


@dataclass(frozen=True)
class _InputLineage:
    """A part of an input's lineage check, as a task: its manifest entry, the file it is
    read from (None: not found, then only its numbered lines are walked), its bytes
    ``[start, end)`` (``end`` None: to the end) and the line before them (``base``), the
    output files that may hold rows of those lines (first line, last line, path), and
    whether it is the input's last part (rows beyond the input's lines are counted there)."""

    entry: dict[str, Any] = field(hash=False)
    source: InputFile | None
    files: tuple[tuple[int, int, str], ...]
    start: int = 0
    end: int | None = None
    base: int = 0
    last: bool = True

    @property
    def cost(self) -> int:
        if self.source is None:
            return 0
        return (self.source.size if self.end is None else self.end) - self.start


@dataclass
class _PartLines:
    """What a part's walk found about its lines, for its input's summary
    (:func:`_summary`): the lines it read, the faults among their rows, the rows
    beyond the input (its last part only) and the lines over the byte limit; ``failed``
    when it could not be walked (a problem says why)."""

    lines: int = 0
    faults: _LineFaults = field(default_factory=lambda: _LineFaults())
    beyond: int = 0
    oversized: frozenset[int] = frozenset()
    failed: bool = False


def _check_lineage(
    engine: Engine,
    work: _Work,
    inputs: dict[str, InputFile],
    tally: _Tally,
    report: VerifyReport,
) -> int:
    """Walk each input's lines with the rows naming them on ``engine``, a task a shard of
    the run where the manifest's shards allow (:func:`_shard_walks`), else a task an
    input; return the lines read. What the tasks find is added up in line order, as one
    walk of the whole input finds it: an input stops at its first walk that cannot go on,
    and one whose shards' line bases are not its lines' (a forged manifest) is walked
    again whole, after a problem naming the shard."""
    entries = work.manifest["inputs"]
    walks: list[list[_InputLineage]] = []
    for entry in entries:
        files = tuple(sorted(tally.files_of.get(entry["path"], [])))
        walks.append(_shard_walks(work.manifest, entry, inputs.get(entry["path"]), files))
    step = Step(_Worker, work.args, _lineage_task)
    flat = [walk for mine in walks for walk in mine]
    results = iter(engine.map(step, flat, cost=lambda t: t.cost))
    found = [[(walk, *next(results)) for walk in mine] for mine in walks]
    misnumbered = {i: _misnumbered(mine) for i, mine in enumerate(found)}
    again = [i for i, why in misnumbered.items() if why is not None]
    wholes = [_whole_walk(walks[i]) for i in again]
    for i, whole, (problems, part) in zip(again, wholes, engine.map(step, wholes), strict=True):
        found[i] = [(whole, problems, part)]
    lines_read = 0
    for i, entry in enumerate(entries):
        if misnumbered[i] is not None:
            report.problem(f"input {entry['path']}: {misnumbered[i]}")
        for _, problems, part in found[i]:
            report.add(problems)
            if part.failed:
                break  # the whole input's walk stops there too
        else:
            lines_read += _summary(entry, inputs.get(entry["path"]), found[i], tally, report)
    for stranger, rows in sorted(tally.strangers.items()):
        report.problem(f"{rows} output row(s) name {stranger!r}, which is no input of the run")
    return lines_read


def _whole_walk(walks: list[_InputLineage]) -> _InputLineage:
    """One walk of the input the ``walks`` cut into shards, over all its files."""
    first = walks[0]
    files = sorted({f for walk in walks for f in walk.files})
    return _InputLineage(first.entry, first.source, tuple(files))


def _shard_walks(
    manifest: dict[str, Any],
    entry: dict[str, Any],
    source: InputFile | None,
    files: tuple[tuple[int, int, str], ...],
) -> list[_InputLineage]:
    """An input's lineage tasks: one a shard of the run where the shards the manifest
    records for it (integers) cut its bytes into consecutive ranges, each beginning a
    line (their line bases are checked against the lines read, :func:`_misnumbered`);
    else, and for a compressed or missing input, one walk of the whole input. The last
    shard's walk reads to the end of the file as it is now (bytes appended since the run
    are read, as a whole walk reads them). ``files``: (first line, last line, path) of
    the files holding the input's rows, sorted."""
    whole = [_InputLineage(entry, source, files)]
    if source is None or source.compression != "none":
        return whole
    shards = [
        s
        for s in manifest["shards"]
        if isinstance(s, dict)
        and s.get("input") == entry["index"]
        and all(type(s.get(k)) is int for k in ("start", "end", "line_base"))
    ]
    shards.sort(key=lambda s: s["start"])
    ends = [s["start"] for s in shards[1:]] + [source.size]
    if len(shards) < 2 or shards[0]["start"] != 0 or [s["end"] for s in shards] != ends:
        return whole
    if not _at_line_starts(source, [s["start"] for s in shards[1:]]):
        return whole
    walks: list[_InputLineage] = []
    active: list[tuple[int, int, str]] = []
    taken = 0
    for i, shard in enumerate(shards):
        low = shard["line_base"] + 1
        last = i + 1 == len(shards)
        high = None if last else shards[i + 1]["line_base"]
        while taken < len(files) and (high is None or files[taken][0] <= high):
            active.append(files[taken])
            taken += 1
        # the files with a row in the shard's lines (the first shard's: below 1 too)
        active = [f for f in active if f[1] >= low or i == 0]
        end = None if last else shard["end"]
        walks.append(
            _InputLineage(entry, source, tuple(active), shard["start"], end, low - 1, last)
        )
    return walks


def _at_line_starts(source: InputFile, starts: list[int]) -> bool:
    """Whether each offset in ``starts`` follows a newline of ``source``."""
    try:
        with open(source.resolved, "rb") as fh:
            for start in starts:
                fh.seek(start - 1)
                if fh.read(1) != b"\n":
                    return False
    except OSError:
        return False
    return True


def _lineage_task(
    worker: _Worker, task: _InputLineage, progress: Progress
) -> tuple[VerifyReport, _PartLines]:
    """One part of an input walked with the rows naming its lines, in a worker: the
    problems found and what its input's summary needs."""
    report = VerifyReport()
    if worker.digest is None:
        report.problem("lineage key: a worker of this verify read another key than the run's")
        return report, _PartLines(failed=True)
    gate = worker.gate()
    regate = _Regate(gate, task.entry.get("kind")) if gate is not None else None
    return report, _walk(worker, task, regate, report)


def _walk(
    worker: _Worker, task: _InputLineage, regate: _Regate | None, report: VerifyReport
) -> _PartLines:
    """The lineage check of one part of an input (:func:`_check_lineage`)."""
    entry, source, limits = task.entry, task.source, worker.manifest["config"]["limits"]
    assert worker.digest is not None
    name = entry["path"]
    pending = list(task.files)
    active: list[_FileRows] = []
    found = _PartLines()
    windows = (
        _source_windows(
            Shard(0, source, task.start, task.end),
            task.base,
            limits["max_line_bytes"],
            report,
            worker.digest,
        )
        if source is not None
        else _numbered_windows(entry["lines"])
    )
    seen = task.base
    # the first part counts rows naming a line below 1; the others leave rows below
    # their first line to the part before
    lowest = task.base + 1 if task.base else -(2**63)
    oversized: set[int] = set()
    try:
        for window in windows:
            seen = window.last
            oversized |= window.oversized
            while pending and pending[0][0] <= window.last:
                active.append(_FileRows(worker.out / pending.pop(0)[2], name, lowest))
            tables = [t for rows in active for t in rows.take_through(window.last)]
            active = [rows for rows in active if not rows.done]
            _check_window(name, window, tables, found.faults, report, regate)
        if task.last:
            found.beyond = sum(rows.rest() for rows in active)
            found.beyond += sum(
                _FileRows(worker.out / path, name, lowest).rest() for *_, path in pending
            )
    except _Disorder as exc:
        report.problem(f"input {name}: rows of {exc} are not in line order")
        found.failed = True
    except InputError as exc:  # a changed input read as the run read it: a mismatch
        report.problem(f"input {name}: cannot be read as the run read it: {exc}")
        found.failed = True
    except _Unreadable as exc:
        report.problem(f"input {name}: {_unreadable('a file holding its rows', exc)}")
        found.failed = True
    found.lines, found.oversized = seen - task.base, frozenset(oversized)
    return found


def _misnumbered(parts: list[tuple[_InputLineage, VerifyReport, _PartLines]]) -> str | None:
    """Where a part's line base (the manifest's) is not the count of the lines the parts
    before it read; None when every base is."""
    read = 0
    for task, _, part in parts:
        if part.failed:
            return None  # its problem says why; the lines after it are not counted
        if task.base != read:
            return (
                f"the manifest's shard starting at byte {task.start} follows line "
                f"{task.base}, but the lines before it are {read}"
            )
        read += part.lines
    return None


def _summary(
    entry: dict[str, Any],
    source: InputFile | None,
    walks: list[tuple[_InputLineage, VerifyReport, _PartLines]],
    tally: _Tally,
    report: VerifyReport,
) -> int:
    """One input's lines as its walks found them, said where they are wrong; the lines
    read."""
    name, parts = entry["path"], [part for _, _, part in walks]
    faults = _LineFaults()
    for part in parts:
        faults.add(part.faults)
    seen = sum(part.lines for part in parts)
    beyond = parts[-1].beyond
    if faults.twice:
        report.problem(
            f"input {name}: {faults.twice} line(s) appear in more than one output row "
            f"(first: line {faults.first_twice})"
        )
    if faults.missing:
        report.problem(
            f"input {name}: {faults.missing} line(s) appear in no output row "
            f"(first: line {faults.first_missing}; conservation broken)"
        )
    if faults.invalid:
        report.problem(f"input {name}: {faults.invalid} output row(s) name a line below 1")
    if beyond:
        report.problem(
            f"input {name}: {beyond} output row(s) name lines beyond its last line {seen}"
        )
    claimed = tally.too_large.get(name, set()).difference(*(part.oversized for part in parts))
    if source is not None and claimed:
        report.problem(
            f"input {name}: {len(claimed)} row(s) withhold _raw as {LINE_TOO_LARGE}, but "
            f"the line is within the limit (first: line {min(claimed)})"
        )
    if source is not None and seen != entry["lines"]:
        report.problem(f"input {name}: source has {seen} lines, manifest says {entry['lines']}")
    return seen


def _gate_buildable(manifest: dict[str, Any], report: VerifyReport) -> bool:
    """Whether the run's gate can be built from the config the manifest records (its
    schemas, reference tables and sanitization policy re-read: check 5 re-hashed them);
    when it cannot, said as a problem. Built whatever versions the manifest names: that
    a forger can edit them is no reason to check less (a note names them)."""
    mine = dependency_versions()
    differ = _other_versions(manifest, {n: mine[n] for n in _GATE_DEPENDENCIES if n in mine})
    if differ:  # gated again all the same: a manifest's versions are no reason to check less
        report.notes.append(
            f"the run was made with other versions of {', '.join(differ)}: a line the gate "
            "now decides otherwise is a mismatch here; verify with those versions to tell "
            "a change of version from a change of the files"
        )
    from pipeline.sanitize import SANITIZER_VERSION  # detectors: load when needed

    recorded = (manifest.get("sanitize") or {}).get("sanitizer_version", SANITIZER_VERSION)
    if recorded != SANITIZER_VERSION:
        report.notes.append(
            f"the run's sanitizer is {recorded}, this rowgate's {SANITIZER_VERSION}: a "
            "record the newer one redacts otherwise is a mismatch here"
        )
    try:
        _gate_of(manifest)
    except (RowgateError, OSError) as exc:
        report.problem(f"cannot gate the inputs again to compare the rows with: {exc}")
        return False
    return True


#: the gate last built (:func:`_gate_of`), by the config it was built from
_GATES: dict[str, Gate] = {}


def _gate_of(manifest: dict[str, Any]) -> Gate:
    """The run's gate, from the config the manifest records; the command's own and a
    worker's are built once (with one worker, the command is the worker)."""
    config = exact_config(manifest)  # the files it reads are at their exact bytes
    key = json.dumps(config, sort_keys=True)
    if key not in _GATES:
        _GATES.clear()
        _GATES[key] = Gate(recorded_config(config))
    return _GATES[key]


def _check_counts(
    manifest: dict[str, Any], tally: _Tally, lines: int, report: VerifyReport
) -> None:
    counts = manifest["counts"]
    if {d: n for d, n in counts["by_disposition"].items() if n} != +tally.rows:
        report.problem("manifest counts per disposition differ from the rows in the output files")
    found = {d: dict(c) for d, c in tally.reasons.items() if c}
    if {d: c for d, c in counts["by_reason"].items() if c} != found:
        report.problem("manifest counts per reason differ from the reasons in the output files")
    written = sum(tally.rows.values())
    conservation = manifest["conservation"]
    recomputed = {"lines_read": lines, "rows_written": written, "ok": lines == written}
    if counts["lines"] != lines or any(conservation.get(k) != v for k, v in recomputed.items()):
        report.problem(
            f"manifest conservation record differs from the files: {lines} lines read, "
            f"{written} rows written"
        )


def _check_run_report(
    out: Path, manifest: dict[str, Any], render: RenderReport, report: VerifyReport
) -> None:
    """``report.html`` re-rendered from the manifest and outputs just verified: a page
    edited and resealed with its new digest, or a manifest field it shows (the campaign,
    an input's kind or split, the stage notes) edited, renders otherwise."""
    if not any(e["path"] == _RUN_REPORT for e in manifest.get("reports", [])):
        report.problem(f"{_RUN_REPORT}: the manifest lists none (every run writes one)")
        return
    # the page is rowgate's (and its libraries') rendering: another version may render
    # the same run otherwise, which says nothing about the run (its digest was checked)
    differ = _other_versions(manifest, dependency_versions())
    if differ:
        report.notes.append(
            f"{_RUN_REPORT} not rendered again: the run was made with other versions of "
            f"{', '.join(differ)} (its digest was checked)"
        )
        return
    if render(out, manifest).encode("utf-8") != (out / _RUN_REPORT).read_bytes():
        report.problem(
            f"{_RUN_REPORT}: not the page the manifest and the outputs render (edited since "
            "the run, or a manifest field it shows was)"
        )


def _lineage_digest(manifest: dict[str, Any], report: VerifyReport) -> LineageDigest | None:
    """The digest the run's lineage was computed with: plain SHA-256, or HMAC under the
    key its config names, read from the same environment variable or file (a missing key
    raises :class:`~pipeline.records.lineage.LineageKeyError`). ``None``, with the
    problem reported, when that key is not the run's (its key id differs)."""
    config = exact_config(manifest)  # a key file is read at its exact bytes
    settings = LineageSettings(**config["lineage"]) if "lineage" in config else LineageSettings()
    digest = LineageDigest.of(CampaignConfig(lineage=settings, base_dir=config["base_dir"]))
    recorded = manifest.get("lineage", {"mode": "sha256", "key_id": None})
    if (digest.mode, digest.key_id) != (recorded["mode"], recorded["key_id"]):
        where = f"${settings.key_env}" if settings.key_env else source_name(str(settings.key_file))
        report.problem(
            f"lineage key: the key in {where} (key id {digest.key_id}) is not the one the run "
            f"used (key id {recorded['key_id']}, mode {recorded['mode']}); lineage hashes "
            "cannot be checked with it"
        )
        return None
    if digest.key is not None:
        report.checked["lineage key"] += 1
    return digest


def verify_run(
    out: Path,
    sources: Path | None = None,
    *,
    render_report: RenderReport | None = None,
    workers: int | None = None,
) -> VerifyReport:
    """Verify the run in ``out``; ``sources`` overrides where inputs are looked up.

    The output files' rows and each input's lines are checked by tasks on ``workers``
    local processes (None: :func:`verify_workers`); the findings are the same for any
    number. With ``render_report``, ``report.html`` is rendered again once everything
    else verified, and must be the page OUT holds."""
    report = VerifyReport()
    manifest = load_manifest(out)
    _GATES.clear()  # a gate is built again for each verify: its files may have changed
    try:
        digest = _lineage_digest(manifest, report)
        if digest is None:
            return report  # the wrong key: every lineage hash would differ
        listed = _listed(manifest, report)
        _check_layout(out, listed, report)
        files = _check_files(out, manifest, listed, report)
        _check_config(manifest, report)
        _check_input_specs(manifest, sources, report)
        _check_pinned(manifest, report)
        layouts = _schemas(manifest, report)
        declared = _declared(manifest, report)
        files = _check_part_schemas(out, files, layouts, declared, report, manifest)
        inputs = _check_inputs(manifest, sources, report)
        pointers = _duplicate_pointers(out, files, manifest["inputs"], report)
        tally = _Tally(pointers=pointers)
        work = _Work(out, manifest, frozenset(layouts), _gate_buildable(manifest, report))
        count = workers if workers is not None else verify_workers(manifest, files, out)
        with LocalEngine(max(1, min(count, max(len(files), len(inputs))))) as engine:
            _scan_files(engine, work, files, tally, report)
            _check_pointers(pointers, report)
            lines = _check_lineage(engine, work, inputs, tally, report)
        _check_counts(manifest, tally, lines, report)
        if render_report is not None and report.ok:
            _check_run_report(out, manifest, render_report, report)
    except RowgateError:
        raise  # already says what is wrong (a missing lineage key is a ValueError too)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        # ValueError: a field of the wrong form (``resolved_hex`` not hex, a limit not a number)
        raise ManifestError(
            f"{out / MANIFEST_NAME} lacks or mangles a field verify needs ({exc!r})"
        ) from None
    finally:
        _GATES.clear()
    return report


def read_paths(out: Path, sources: Path | None) -> list[Path] | None:
    """Every file besides OUT that verifying ``out`` reads: its inputs (looked up as
    :func:`verify_run` looks them up), the config, the pinned files and the schemas;
    None when the manifest cannot say (a clean-up must then remove nothing)."""
    try:
        manifest = load_manifest(out)
        found = [_source_path(entry, sources) for entry in manifest["inputs"]]
        source = exact_config(manifest).get("source_path")
        found += [Path(source)] if source is not None else []
        found += [Path(where) for _, where in _pinned(manifest)]
        found += [_schema_path(info) for info in manifest["schemas"].values()]
    except (RowgateError, KeyError, TypeError, AttributeError, ValueError):
        return None
    return found


#: bytes of inputs and output files a verify worker is started for: starting one costs
#: about half a second of imports, about what checking ~5 MB of rows takes
_WORKER_BYTES: Final = 64 << 20


def verify_workers(manifest: dict[str, Any], files: list[_Output], out: Path) -> int:
    """How many processes verify a run by default: one per available core (as a run's
    default), but one per :data:`_WORKER_BYTES` of its inputs and output files at most,
    so that a small run is verified in this process alone."""
    total = sum(int(entry.get("bytes") or 0) for entry in manifest["inputs"])
    total += sum(_size(out / f.path) for f in files)
    return EngineSettings().resolved_workers(max(1, total // _WORKER_BYTES))
