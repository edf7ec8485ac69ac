"""A run, end to end: shards → gate (parallel) → global → write (parallel) → manifest.

Shards are gated as they are cut (a compressed input is cut while it is decompressed).

This module imports what it needs to start the workers; the libraries of the later
phases (polars, the global stages, the writer, the rubrics, the report) are imported by
:func:`run` once the workers are starting, so that their import overlaps the workers'.

The output directory appears atomically (:mod:`pipeline.output.outdir`): a crashed or killed run
never leaves a partial ``OUT``.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Final, TypeVar, cast

from pipeline.core.config import CampaignConfig, ConfigError, InputSpec
from pipeline.core.errors import EXIT_FAILED, RowgateError
from pipeline.core.files import input_type
from pipeline.engines import get_engine
from pipeline.gate.gate import Gate
from pipeline.gate.reader import (
    JSONL_SUFFIXES,
    InputError,
    InputFile,
    Shard,
    detect_compression,
    iter_shards,
    jsonl_named,
    plain_shard_count,
    refuse_same_files,
)
from pipeline.gate.staging import GateTask, ShardSummary, gate_step
from pipeline.kinds import KINDS, UnknownKindError, check_kind_names
from pipeline.output.manifest import (
    MANIFEST_FORMAT,
    config_hex,
    dependency_versions,
    pinned_digests,
    write_manifest,
)
from pipeline.output.outdir import check_out_name, claim_output
from pipeline.output.remote import Out
from pipeline.records.lineage import FileStamp, file_sha256, path_hex, source_name
from pipeline.records.schemas import SchemaError
from pipeline.storage import RunStorage

if TYPE_CHECKING:
    from pipeline.decide.context import GlobalResult
    from pipeline.output.writer import WriteSummary, WriteTask

__all__ = ["InputError", "RunError", "RunObserver", "RunResult", "expand_inputs", "run"]


T = TypeVar("T")


class RunError(RowgateError, RuntimeError):
    """The run could not complete; nothing was written to the output directory."""

    exit_code: ClassVar[int] = EXIT_FAILED


@dataclass
class RunObserver:
    """Hooks for a front end (the CLI's progress bar); all optional."""

    #: called once before gating with the bytes of lines expected (estimated for
    #: compressed inputs: their shards are cut while they are gated)
    on_start: Callable[[int], None] = lambda total_bytes: None
    #: the gate's progress: bytes and lines gated since the last call
    on_progress: Callable[[int, int], None] = lambda nbytes, nlines: None
    #: a phase begins: ``gate``, ``global``, ``write``, then ``report``
    on_phase: Callable[[str], None] = lambda name: None
    #: a step of the global phase begins, e.g. ``pairwise-v2: dedupe``
    #: (:attr:`pipeline.decide.context.GlobalContext.on_stage`)
    on_stage: Callable[[str], None] = lambda name: None
    #: the write phase's shards to write, given once when it begins
    on_write_start: Callable[[int], None] = lambda shards: None
    #: a shard's output parts are written, with its rows
    on_written: Callable[[int], None] = lambda rows: None


@dataclass
class RunResult:
    out: Out
    manifest: dict[str, Any]
    summaries: list[ShardSummary] = field(default_factory=list)

    @property
    def rejected_share(self) -> float:
        """The share of the run's lines that were rejected or quarantined."""
        counts = self.manifest["counts"]
        lines = counts["lines"]
        by_disposition = counts["by_disposition"]
        failed = by_disposition.get("rejected", 0) + by_disposition.get("quarantined", 0)
        return failed / lines if lines else 0.0

    @property
    def over_rejected_share(self) -> bool:
        """Whether :attr:`rejected_share` exceeds the config's ``run.max_rejected_share``."""
        limit = self.manifest["config"]["run"]["max_rejected_share"]
        return limit is not None and self.rejected_share > limit


def expand_inputs(specs: tuple[InputSpec, ...], config: CampaignConfig) -> list[InputFile]:
    """Resolve input specs (a directory stands for its JSONL files) into the order key.

    Inputs are ordered by the path as given, so the order key (input, line) and
    everything that depends on it do not change with the order of arguments. An input,
    or a JSONL-named entry of an input directory, that is not a regular file is an
    error saying what it is (:func:`_input_type`); it is never skipped, and never opened.
    """
    expanded: list[InputSpec] = []
    for spec in specs:
        path = config.resolve(spec)
        found = _input_type(path, spec.path)
        if found == "directory":
            members = sorted(p for p in _entries(path, spec.path) if jsonl_named(p.name))
            for member in members:
                given = str(Path(spec.path) / member.name)
                if _input_type(member, given) == "directory":
                    raise InputError(
                        f"{given}: is a directory, not a file (input directories are not "
                        "read recursively)"
                    )
            if not members:
                raise InputError(
                    f"{spec.path}: directory holds no {', '.join(JSONL_SUFFIXES)} files "
                    "(in any case)"
                )
            expanded += [
                InputSpec(str(Path(spec.path) / p.name), spec.kind, spec.split) for p in members
            ]
        else:
            expanded.append(spec)
    by_path: dict[str, InputSpec] = {}
    for spec in expanded:
        if spec.path in by_path:
            raise InputError(f"{spec.path}: given more than once")
        if spec.kind is not None and spec.kind not in KINDS:
            raise InputError(f"{spec.path}: {UnknownKindError(spec.kind)}")
        by_path[spec.path] = spec
    limits = config.limits
    inputs = []
    for index, given in enumerate(sorted(by_path)):
        spec = by_path[given]
        resolved = config.resolve(spec)
        inputs.append(
            InputFile(
                index=index,
                path=source_name(spec.path),
                resolved=str(resolved.resolve()),
                size=resolved.stat().st_size,
                compression=detect_compression(resolved),
                kind=spec.kind,
                split=spec.split,
                max_decompressed_bytes=limits.max_decompressed_bytes,
                max_expansion_ratio=limits.max_expansion_ratio,
            )
        )
    refuse_same_files((f.path, f.resolved) for f in inputs)
    if len({f.path for f in inputs}) < len(inputs):
        raise InputError(
            "two inputs have the same name once bytes that are not UTF-8 are written as "
            "\\xNN (their lineage would be ambiguous); rename one"
        )
    return inputs


def _entries(directory: Path, given: str) -> list[Path]:
    """An input directory's entries; an unreadable one is the input's error (exit 3)."""
    try:
        return list(directory.iterdir())
    except OSError as exc:
        raise InputError(f"{given}: cannot read: {exc.strerror}") from None


def _input_type(path: Path, given: str) -> str:
    """``"file"`` or ``"directory"``; anything else is an :class:`InputError` saying what
    the path is (:func:`~pipeline.core.files.input_type`: found by ``stat`` alone, as
    opening a FIFO blocks until something writes to it).

    A FIFO, socket or device is refused rather than read: a run reads each input more
    than once (its SHA-256 while it is gated; the writer re-reads lines the global phase
    rejects; ``verify`` re-reads all of it), and a pipe's bytes can be read only once,
    so its lineage could never be checked. Copy the stream to a file first.
    """
    return input_type(path, given, reason=_READ_MORE_THAN_ONCE)


#: why a run refuses an input that is not a regular file
_READ_MORE_THAN_ONCE: Final = (
    "rowgate reads every input more than once (to hash it, to gate it, to verify it); "
    "copy it to a file first"
)


def _absolute(out: Out) -> Out:
    """A local OUT made absolute (staged paths travel to workers, which on a cluster start
    elsewhere), once its name as given is checked: "." made absolute would name the
    directory by its name."""
    if not isinstance(out, Path):
        return out
    check_out_name(out)
    return Path(os.path.abspath(out))


def _stamps(inputs: list[InputFile]) -> list[FileStamp]:
    """Each input's stamp as the run plans it, at the size its shards are cut at: checked
    once every byte has been read. Shards are cut at that size, workers and the digest
    thread each open the input by path, and the writer reads rejected lines again, so a
    file replaced, appended to or rewritten meanwhile gave lines of neither file, a
    digest of the new one and a manifest calling it conserved."""
    return [FileStamp.of(f.resolved, f.path, size=f.size) for f in inputs]


def _hash_inputs(inputs: list[InputFile]) -> Future[dict[int, str]]:
    """Hash whole input files in a thread while workers gate them."""
    future: Future[dict[int, str]] = Future()

    def work() -> None:
        try:
            future.set_result({f.index: file_sha256(f.resolved) for f in inputs})
        except BaseException as exc:
            future.set_exception(exc)

    threading.Thread(target=work, name="rowgate-input-sha256", daemon=True).start()
    return future


def _preflight(config: CampaignConfig) -> Gate:
    """Load every schema, pin, reference table, rubric and policy a run may need, and check
    the rule codes the campaign disables, so that any of them fails before any work."""
    from pipeline.decide.stages.cross_rules import CROSS_RULES
    from pipeline.kinds.rules import RULES
    from pipeline.rubrics.campaign import load_campaign_rubrics
    from pipeline.rubrics.model import RubricError

    known = {r.code for rules in RULES.values() for r in rules} | {
        rule.code for rule in CROSS_RULES
    }
    unknown = sorted(set(config.rules.disabled) - known)
    owners = {own: rule.code for rule in CROSS_RULES for own in rule.own}
    if unknown and unknown[0] in owners:
        raise ConfigError(
            f"rules.disabled: {unknown[0]!r} is a finding of the rule "
            f"{owners[unknown[0]]!r}, which cannot be disabled alone: disable that rule "
            "(both go) or leave it"
        )
    if unknown:
        raise ConfigError(f"rules.disabled: unknown rule code {unknown[0]!r}")
    check_kind_names(config.dedupe.survivor_by_kind, "dedupe.survivor_by_kind")
    check_kind_names(config.dedupe.split_groups, "dedupe.split_groups")
    given = config.schemas.directory
    if given and not (directory := config.resolve_path(given)).is_dir():
        raise ConfigError(f"schemas.directory: {directory}: no such directory")
    gate = Gate(config)
    for schema_id in config.schemas.pins:
        try:
            gate.registry.get(schema_id)
        except SchemaError as exc:
            head, *items = exc.lines
            raise InputError.listing(f"schemas.pins.{schema_id}: {head}", *items) from None
    try:
        entries = {kind_id: gate.kind_gate(KINDS[kind_id]).entry for kind_id in sorted(KINDS)}
        if gate.sanitizer is not None:  # a policy naming no kind or no field fails here
            gate.sanitizer.check(entries)
    except SchemaError as exc:
        raise InputError.listing(*exc.lines) from None
    try:
        # Rubric pins, bindings and policies fail the run here, before any line is read.
        load_campaign_rubrics(config, gate)
    except RubricError as exc:
        raise InputError.listing(*exc.lines) from None
    return gate


def run(
    config: CampaignConfig, out: Out, *, force: bool = False, observer: RunObserver | None = None
) -> RunResult:
    """Run a campaign over its inputs and write ``out`` atomically (on an object store:
    uploaded once complete, :mod:`pipeline.output.remote`)."""
    out = _absolute(out)
    observer = observer or RunObserver()
    started = time.perf_counter()
    if not config.inputs:
        raise ConfigError("no inputs: give input paths or [[inputs]] in the campaign config")
    engine_type = get_engine(config.engine.name)
    inputs = expand_inputs(config.inputs, config)
    stamps = _stamps(inputs)
    timings: dict[str, float] = {}
    known_shards = _known_shards(config, inputs)
    with (
        claim_output(out, force=force, protect=_read_paths(config, inputs)) as claim,
        engine_type.from_settings(config.engine, known_shards) as engine,
    ):
        # Workers start (imports, the gate, declared kinds' schemas) during the preflight,
        # no more of them than there are shards to gate.
        engine.start(gate_step(config), tasks=known_shards)
        # Measured: importing these before the workers started delayed them by ~0.5 s.
        from pipeline.decide.context import GlobalContext, run_global
        from pipeline.output.writer import write_step
        from pipeline.reports.run_report import write_run_report

        gate = _preflight(config)
        with claim.staging() as tmp:
            storage = RunStorage(tmp)
            digests = _hash_inputs(inputs)
            observer.on_start(sum(f.expected_bytes for f in inputs))
            observer.on_phase("gate")
            t0 = time.perf_counter()
            shards: list[Shard] = []
            gate_tasks, cost = _gate_tasks(config, inputs, storage, shards)
            summaries = engine.map(gate_step(config), gate_tasks, observer.on_progress, cost)
            timings["gate_s"] = time.perf_counter() - t0

            line_bases = _line_bases(shards, summaries)
            observer.on_phase("global")
            t0 = time.perf_counter()
            global_ctx = GlobalContext(
                config, storage, shards, summaries, line_bases, engine, on_stage=observer.on_stage
            )
            outcome = run_global(global_ctx)
            timings["global_s"] = time.perf_counter() - t0
            timings.update({f"global.{name}_s": s for name, s in outcome.timings.items()})

            observer.on_phase("write")
            t0 = time.perf_counter()
            tasks = _write_tasks(storage, shards, summaries, line_bases, outcome)
            observer.on_write_start(len(tasks))
            # the writer reports (0, rows) once per shard, when its parts are written
            writes = engine.map(
                write_step(config), tasks, lambda _, rows: observer.on_written(rows)
            )
            timings["write_s"] = time.perf_counter() - t0
            storage.remove_staging()

            observer.on_phase("report")
            input_digests = digests.result()
            for stamp in stamps:
                stamp.check("the run")
            exact = _manifest(
                config, inputs, shards, summaries, line_bases, writes, input_digests, gate
            )
            manifest, pinned = _recorded(exact)
            timings["total_s"] = time.perf_counter() - started
            manifest["timings"] = {k: round(v, 3) for k, v in timings.items()}
            if not manifest["conservation"]["ok"]:
                raise RunError("conservation check failed: lines read and rows written differ")
            manifest["artifacts"] = sorted(
                (vars(f) for f in global_ctx.artifacts), key=lambda f: f["path"]
            )
            # a stage's note names the files it read (a decision policy's): in lineage form
            manifest["global"] = _lineage_form(global_ctx.notes)
            manifest["reports"] = [write_run_report(tmp, manifest)]
            write_manifest(tmp, manifest, pinned)
    return RunResult(out, manifest, summaries)


def _read_paths(config: CampaignConfig, inputs: list[InputFile]) -> list[Path]:
    """Every path a run reads: OUT may not be, contain or lie inside one of them
    (:func:`pipeline.output.outdir.claim_output`)."""
    named = [config.source_path, config.schemas.directory, config.rubrics.directory]
    named += [config.sanitize.policy, *(p.file for p in config.policy.values())]
    named.append(config.lineage.key_file)  # without it, no keyed run made with it verifies
    references = config.references
    named += [
        t.path
        for t in (references.documents, references.authorised_documents, references.contracts)
        if t
    ]
    return [
        *(config.resolve(spec) for spec in config.inputs),
        *(Path(f.resolved) for f in inputs),
        *(config.resolve_path(p) for p in named if p),
    ]


def _exact_bytes(path: str, key: str) -> dict[str, str]:
    """``{key: hex}``, the exact bytes of a path that is not UTF-8 (:func:`path_hex`), for
    a manifest entry that names it in its lineage form; nothing for a UTF-8 path."""
    exact = path_hex(path)
    return {} if exact is None else {key: exact}


def _gate_tasks(
    config: CampaignConfig, inputs: list[InputFile], storage: RunStorage, shards: list[Shard]
) -> tuple[Iterable[GateTask], Callable[[GateTask], int] | None]:
    """The gate phase's tasks, one per shard (each appended to ``shards`` when cut), and
    the cost that orders them, if any (:meth:`pipeline.engines.Engine.map`).

    Compressed inputs are decompressed into spill files of ``engine.shard_bytes`` (so
    that several workers gate one; staging, spills included, goes before OUT is
    published), and each shard is handed to the workers as soon as its spill file is
    written: on a 500 MB export as one .zst, spilling took 0.9-1.5 s during which the
    workers had nothing to do. Otherwise every shard is cut at once, so the tasks are
    given largest-first (``cost``): a small shard last leaves less idle time at the end.
    """
    spill = storage.spill_dir() if config.engine.spill_compressed else None

    def tasks() -> Iterator[GateTask]:
        for shard in iter_shards(inputs, config.engine.shard_bytes, spill):
            shards.append(shard)
            yield GateTask(shard, storage)

    if _known_shards(config, inputs) is None:
        return tasks(), None
    return list(tasks()), lambda task: task.shard.expected_bytes


def _known_shards(config: CampaignConfig, inputs: list[InputFile]) -> int | None:
    """How many shards the inputs are cut into, when that is known before gating: not
    when a compressed input is spilled (its shards are cut as it is decompressed).

    Starting a worker costs ~0.6 s (spawn, imports, the gate's schemas), so by default a
    run starts no more workers than it has shards: an export of one shard is gated in
    this process (a 50-line run took 1.8 s with two workers, 0.9 s now)."""
    count = 0
    for input_file in inputs:
        if input_file.compression == "none":
            count += plain_shard_count(input_file, config.engine.shard_bytes)
        elif config.engine.spill_compressed:
            return None
        else:
            count += 1  # the whole stream, read by one worker
    return count


def _line_bases(shards: list[Shard], summaries: list[ShardSummary]) -> list[int]:
    """Line number before each shard's first line, within its input."""
    bases = [0] * len(shards)
    running: Counter[int] = Counter()
    for shard, summary in zip(shards, summaries, strict=True):
        bases[shard.index] = running[shard.input.index]
        running[shard.input.index] += summary.lines
    return bases


def _write_tasks(
    storage: RunStorage,
    shards: list[Shard],
    summaries: list[ShardSummary],
    line_bases: list[int],
    outcome: GlobalResult,
) -> list[WriteTask]:
    """One write task per gated shard, carrying the global phase's decisions for it."""
    from pipeline.decide.context import rejected_columns
    from pipeline.output.writer import WriteTask

    extra_rejected = rejected_columns(outcome.columns)
    return [
        WriteTask(
            shard=shards[s.shard],
            line_base=line_bases[s.shard],
            storage=storage,
            kinds=tuple(s.kinds),
            decided=tuple(k for k, shards in outcome.decided.items() if s.shard in shards),
            columns=outcome.columns,
            rejected_columns=extra_rejected,
        )
        for s in summaries
    ]


def _input_entry(f: InputFile, sha256: str, lines: int) -> dict[str, Any]:
    """An input as the manifest lists it: where it is, its exact bytes' digest, its lines."""
    return {
        "index": f.index,
        "path": f.path,
        "resolved": source_name(f.resolved),
        **_exact_bytes(f.resolved, "resolved_hex"),
        "bytes": f.size,
        "sha256": sha256,
        "compression": f.compression,
        "kind": f.kind,
        "split": f.split,
        "lines": lines,
    }


def _schema_entry(gate: Gate, kind_id: str) -> dict[str, str]:
    """The pinned schema a kind's rows were gated with, as the manifest names it (a
    directory of schemas under one whose name is not UTF-8: with its exact bytes)."""
    entry = gate.kind_gate(KINDS[kind_id]).entry
    return {
        "sha256": entry.sha256,
        "title": entry.title,
        "file": entry.path.name,
        "path": str(entry.path),
        **_exact_bytes(str(entry.path), "path_hex"),
    }


def _manifest(
    config: CampaignConfig,
    inputs: list[InputFile],
    shards: list[Shard],
    summaries: list[ShardSummary],
    line_bases: list[int],
    writes: list[WriteSummary],
    input_digests: dict[int, str],
    gate: Gate,
) -> dict[str, Any]:
    lines_by_input: Counter[int] = Counter()
    for shard, summary in zip(shards, summaries, strict=True):
        lines_by_input[shard.input.index] += summary.lines
    by_disposition: Counter[str] = Counter()
    by_reason: dict[str, Counter[str]] = {}
    files = []
    for write in writes:
        by_disposition.update(write.rows)
        for (disposition, code), count in write.reasons.items():
            by_reason.setdefault(disposition, Counter())[code] += count
        files += [vars(f) for f in write.files]
    lines_read = sum(lines_by_input.values())
    rows_written = sum(by_disposition.values())
    used_kinds = sorted(
        {k for s in summaries for k in s.kinds} | {f.kind for f in inputs if f.kind}
    )
    effective = config.as_dict()
    exact = config_hex(effective)
    return {
        "format": MANIFEST_FORMAT,
        "campaign": config.name,
        "inputs": [
            _input_entry(f, input_digests[f.index], lines_by_input[f.index]) for f in inputs
        ],
        "config": effective,
        # only where a setting is not UTF-8: a UTF-8 config's manifest reads as it did
        **({"config_hex": exact} if exact else {}),
        "config_sha256": config.source_sha256,
        "sanitize": gate.sanitizer.describe() if gate.sanitizer is not None else None,
        # only a keyed run says so: an unkeyed run's manifest reads as it did before
        **({"lineage": gate.lineage.describe()} if config.lineage.keyed else {}),
        "schemas": {kind_id: _schema_entry(gate, kind_id) for kind_id in used_kinds},
        "versions": dependency_versions(),
        "shards": [
            {
                "index": s.index,
                "input": s.input.index,
                "start": s.start,
                "end": s.end,
                "lines": summary.lines,
                "line_base": line_bases[s.index],
            }
            for s, summary in zip(shards, summaries, strict=True)
        ],
        "counts": {
            "lines": lines_read,
            "by_disposition": {d: by_disposition[d] for d in sorted(by_disposition)},
            "by_reason": {d: dict(sorted(c.items())) for d, c in sorted(by_reason.items())},
        },
        "conservation": {
            "lines_read": lines_read,
            "rows_written": rows_written,
            "ok": lines_read == rows_written,
        },
        "outputs": sorted(files, key=lambda f: f["path"]),
    }


def _recorded(exact: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """The run's manifest as JSON holds it (:func:`_lineage_form`), and its pinned files'
    entries (:func:`~pipeline.output.manifest.pinned_digests`), derived from the manifest
    before that form: they are hashed at their real paths, which the lineage form of one
    that is not UTF-8 does not name (the run read them there, and failed after all its
    work when it hashed them at that form)."""
    return _lineage_form(exact), pinned_digests(exact)


def _lineage_form(value: T) -> T:
    """``value`` with every string in its lineage form (:func:`source_name`): a path that
    is not UTF-8 (an input's, the config's) cannot be written as JSON otherwise."""
    if isinstance(value, str):
        return cast(T, source_name(value))
    if isinstance(value, dict):
        return cast(T, {_lineage_form(k): _lineage_form(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return cast(T, [_lineage_form(v) for v in value])
    return value
