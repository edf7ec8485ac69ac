"""``rowgate run``: gate inputs into an output directory, with progress and a summary."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TransferSpeedColumn,
)
from rich.table import Table

from pipeline.cli._common import (
    EXIT_REJECTED_SHARE,
    err,
    library_errors,
    located,
    out,
    out_option,
    output_argument,
    styled,
    terminal_text,
    writing_directory,
)
from pipeline.core.config import CampaignConfig, InputSpec, load_campaign
from pipeline.output.remote import RemoteOut

if TYPE_CHECKING:
    from pipeline.jobs.run import RunObserver, RunResult

_SplitOption = Annotated[
    list[str] | None,
    typer.Option(
        help="SPLIT=PATH: an input labelled with a split, e.g. eval=b.jsonl (repeatable)."
    ),
]
_ProtectOption = Annotated[
    list[str] | None,
    typer.Option(
        help="A split whose rows are never removed for appearing in another split; "
        "their copies elsewhere are removed as dedupe.contamination (repeatable)."
    ),
]
_EngineOption = Annotated[
    str | None,
    typer.Option(help="Where steps run: local (default) or ray (pip install 'rowgate[ray]')."),
]
_RayAddressOption = Annotated[
    str | None,
    typer.Option(help="The Ray cluster to join (default: RAY_ADDRESS, else a local Ray)."),
]


def run_command(
    out_arg: Annotated[str, out_option("Output directory (created atomically)")],
    config_file: Annotated[
        Path | None, typer.Option("--config", "-c", help="Campaign config (TOML).")
    ] = None,
    kind: Annotated[
        str | None, typer.Option(help="Record kind of the inputs given on the command line.")
    ] = None,
    workers: Annotated[
        int | None, typer.Option(help="Worker processes (default: available cores).")
    ] = None,
    engine: _EngineOption = None,
    ray_address: _RayAddressOption = None,
    force: Annotated[bool, typer.Option(help="Replace an existing output directory.")] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No progress bar or summary.")
    ] = False,
    split: _SplitOption = None,
    protect: _ProtectOption = None,
    normalised: Annotated[
        bool | None,
        typer.Option(
            "--normalised/--no-normalised",
            help="Remove normalised duplicates (NFC, case, whitespace); default: the config's.",
        ),
    ] = None,
    near: Annotated[
        bool | None,
        typer.Option(
            "--near/--no-near",
            help="Remove near duplicates (MinHash LSH, dedupe.threshold); default: the config's.",
        ),
    ] = None,
    max_line_bytes: Annotated[
        int | None,
        typer.Option(
            help="Longest line accepted, in bytes (limits.max_line_bytes); longer lines "
            "are rejected as line.too_large."
        ),
    ] = None,
    max_rejected_share: Annotated[
        float | None,
        typer.Option(
            help="Exit 5 (after writing OUT) when more than this share (0..1) of the lines "
            "is rejected or quarantined (run.max_rejected_share)."
        ),
    ] = None,
    inputs: Annotated[
        list[str] | None,
        typer.Argument(help="JSONL files (.jsonl, .jsonl.gz, .jsonl.zst) or directories of them."),
    ] = None,
) -> None:
    """Gate every line of the inputs: accepted rows become typed Parquet with SHA-256
    lineage; every other line lands in rejected/ (or quarantined/, duplicates/) with its
    reasons. Writes OUT/manifest.json; `rowgate verify OUT` re-checks it all."""
    out_dir = output_argument(out_arg)
    with library_errors(writing_directory(out_dir)):
        flags = {
            "dedupe.normalised": normalised,
            "dedupe.near": near,
            "limits.max_line_bytes": max_line_bytes,
            "run.max_rejected_share": max_rejected_share,
            "engine.name": engine,
            "engine.address": ray_address,
        }
        config = _run_config(config_file, kind, inputs, split, protect, workers, flags)
        # lazy: the run's libraries (pyarrow, polars) stay out of --help and other commands
        from pipeline.jobs.run import run

        with _progress(quiet) as observer:
            result = run(config, out_dir, force=force, observer=observer)
    if not quiet:
        _summary(result.manifest, out_dir)
    if result.over_rejected_share:
        _exit_over_rejected_share(result, out_dir)


def _run_config(
    config_file: Path | None,
    kind: str | None,
    inputs: list[str] | None,
    split: list[str] | None,
    protect: list[str] | None,
    workers: int | None,
    flags: Mapping[str, object | None],
) -> CampaignConfig:
    """The campaign config with the command line's inputs and settings, validated.

    Inputs on the command line replace the config's; ``--kind`` alone re-declares the
    config's inputs' kind. A flag left unset (``None``) keeps the config's value.
    """
    config = load_campaign(config_file) if config_file else CampaignConfig()
    if inputs or split:
        specs = tuple(InputSpec(path, kind) for path in inputs or [])
        specs += tuple(InputSpec.labelled(option, kind) for option in split or [])
        config = dataclasses.replace(config, inputs=specs, base_dir=".")
    elif kind is not None:
        config = dataclasses.replace(
            config, inputs=tuple(dataclasses.replace(s, kind=kind) for s in config.inputs)
        )
    if protect:
        config = config.override(**{"dedupe.protected_splits": tuple(protect)})
    if workers is not None:
        config = config.override(**{"engine.workers": workers})
    for key, flag in flags.items():
        if flag is not None:
            config = config.override(**{key: flag})
    return config.validate()


def _exit_over_rejected_share(result: RunResult, out_dir: Path | RemoteOut) -> NoReturn:
    """Say that too many lines were rejected or quarantined, and exit 5 (OUT stays)."""
    limit = result.manifest["config"]["run"]["max_rejected_share"]
    err.print(
        styled("error:", "bold red"),
        f"{result.rejected_share:.1%} of the lines were rejected or quarantined, more "
        f"than run.max_rejected_share {limit:g} ({terminal_text(str(out_dir))} was written)",
    )
    raise typer.Exit(EXIT_REJECTED_SHARE)


class _progress:
    """Progress that stays quiet off a terminal, one display per phase: the gate's bar
    (bytes, bytes/s, lines/s); the global phase's current step with a spinner and a
    running clock (it has no byte count to show); the write phase's shards and rows."""

    def __init__(self, quiet: bool, console: Console = err) -> None:
        self.enabled = not quiet and console.is_terminal
        self.console = console
        self.current: Progress | None = None
        self.task: Any = None
        self.lines = 0
        self.rows = 0

    def _show(self, *columns: ProgressColumn, description: str, **task: Any) -> None:
        """Stop the current display (its last state stays on screen), start the next."""
        if self.current is not None:
            self.current.stop()
        self.current = Progress(
            *columns, console=self.console, disable=not self.enabled, transient=False
        )
        self.current.start()
        self.task = self.current.add_task(description, **task)

    def __enter__(self) -> RunObserver:
        from pipeline.jobs.run import RunObserver  # lazy: see run_command

        self._show(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TextColumn("{task.fields[lines]:,} lines · {task.fields[rate]:,.0f} lines/s"),
            TimeElapsedColumn(),
            description="gate",
            total=None,
            lines=0,
            rate=0.0,
        )

        def on_start(total_bytes: int) -> None:
            self._update(total=total_bytes)

        def on_progress(nbytes: int, nlines: int) -> None:
            self.lines += nlines if nbytes else 0
            assert self.current is not None
            elapsed = self.current.tasks[0].elapsed or 1e-9
            self._update(advance=nbytes, lines=self.lines, rate=self.lines / elapsed)

        def on_phase(name: str) -> None:
            if name == "global":
                self._show(
                    TextColumn("[bold]global"),
                    SpinnerColumn(),
                    TextColumn("{task.description}", markup=False),
                    TimeElapsedColumn(),
                    description="starting",
                    total=None,
                )
            elif name == "write":
                self._show(
                    TextColumn("[bold]write"),
                    BarColumn(),
                    MofNCompleteColumn(),
                    TextColumn("shards · {task.fields[rows]:,} rows"),
                    TimeElapsedColumn(),
                    description="write",
                    total=None,
                    rows=0,
                )

        def on_stage(name: str) -> None:
            self._update(description=name)

        def on_write_start(shards: int) -> None:
            self._update(total=shards)

        def on_written(rows: int) -> None:
            self.rows += rows
            self._update(advance=1, rows=self.rows)

        return RunObserver(on_start, on_progress, on_phase, on_stage, on_write_start, on_written)

    def _update(self, **changes: Any) -> None:
        assert self.current is not None
        self.current.update(self.task, **changes)

    def __exit__(self, *exc: object) -> None:
        if self.current is not None:
            self.current.stop()


def _summary(manifest: dict[str, Any], out_dir: Path | RemoteOut) -> None:
    counts = manifest["counts"]
    total = counts["lines"] or 1
    table = Table(
        "disposition",
        "rows",
        "share",
        title=f"rowgate run → {terminal_text(str(out_dir))}",
        box=None,
    )
    for disposition in ("accepted", "quarantined", "duplicate", "rejected"):
        n = counts["by_disposition"].get(disposition, 0)
        table.add_row(disposition, f"{n:,}", f"{n / total:.1%}")
    out.print(table)
    reasons = sorted(
        ((code, n, d) for d, by_code in counts["by_reason"].items() for code, n in by_code.items()),
        key=lambda item: (-item[1], item[0]),
    )
    if reasons:
        top = Table("reason", "rows", "disposition", title="reasons", box=None)
        for code, n, disposition in reasons:
            top.add_row(code, f"{n:,}", disposition)
        out.print(top)
    timings = manifest.get("timings", {})
    out.print(
        f"{counts['lines']:,} lines from {len(manifest['inputs'])} input(s) in "
        f"{timings.get('total_s', 0):.2f} s; conservation",
        styled("ok", "green") if manifest["conservation"]["ok"] else styled("FAILED", "red"),
    )
    for report in manifest.get("reports", []):
        out.print(f"report: {located(out_dir, report['path'])}")
    from pipeline.cli.hints import run_hints  # lazy: it loads the reason catalogue (pyarrow)

    for hint in run_hints(manifest):
        out.print(styled("hint:", "bold yellow"), hint)
