"""``rowgate dedupe``: dedupe existing Parquet datasets (a run's output or anyone's)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from pipeline.cli._common import (
    library_errors,
    out,
    out_option,
    output_argument,
    terminal_text,
    writing_directory,
)
from pipeline.core.config import CampaignConfig, DedupeSettings, InputSpec, load_campaign
from pipeline.output.remote import RemoteOut

if TYPE_CHECKING:
    from pipeline.jobs.dedupe import DatasetInput


_ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="Campaign config: its [dedupe] and [engine] tables."),
]
_WorkersOption = Annotated[
    int | None,
    typer.Option(
        help="Worker processes that read the key columns and stage the row keys "
        "(default: one per core, or the config's [engine] workers)."
    ),
]


def _rule_help(rule: str, what: str) -> str:
    """A rule that is on without a config, and with one as in a run."""
    return (
        f"{what} duplicates (default: on; with --config, the config's [dedupe] {rule}, "
        "off unless it turns it on, as in a run)."
    )


_NormalisedOption = Annotated[
    bool | None,
    typer.Option("--normalised/--no-normalised", help=_rule_help("normalised", "Normalised")),
]
_NearOption = Annotated[
    bool | None, typer.Option("--near/--no-near", help=_rule_help("near", "Near"))
]

_KEY_HELP = (
    "A column compared exactly by every rule, near included: duplicates share it "
    "(repeatable; with or instead of --text)."
)


def dedupe_command(
    out_arg: Annotated[str, out_option("Output directory (atomic)")],
    inputs: Annotated[
        list[str] | None,
        typer.Argument(help="Parquet files or directories of them (no split label)."),
    ] = None,
    split: Annotated[
        list[str] | None,
        typer.Option(help="SPLIT=PATH: a Parquet input labelled with a split (repeatable)."),
    ] = None,
    protect: Annotated[
        list[str] | None,
        typer.Option(help="A split never deduped against another (e.g. eval; repeatable)."),
    ] = None,
    kind: Annotated[
        str | None, typer.Option(help="Record kind whose key to use (default: the _kind column).")
    ] = None,
    text: Annotated[
        list[str] | None,
        typer.Option(help="A text column: normalised, shingled (repeatable; instead of --kind)."),
    ] = None,
    key: Annotated[
        list[str] | None,
        typer.Option(help=_KEY_HELP),
    ] = None,
    config_file: _ConfigOption = None,
    threshold: Annotated[
        float | None,
        typer.Option(
            help="Near-duplicate Jaccard threshold in (0, 1] "
            f"(default: {DedupeSettings.threshold}, or the config's [dedupe] threshold)."
        ),
    ] = None,
    survivor: Annotated[
        str | None,
        typer.Option(
            help="Which row of a duplicate group is kept: first or last (input order), "
            "max:COLUMN or min:COLUMN "
            f"(default: {DedupeSettings.survivor}, or the config's [dedupe] survivor)."
        ),
    ] = None,
    normalised: _NormalisedOption = None,
    near: _NearOption = None,
    workers: _WorkersOption = None,
    force: Annotated[bool, typer.Option(help="Replace an existing output directory.")] = False,
) -> None:
    """Remove exact, normalised and near duplicates and split contamination from Parquet
    datasets; write kept.parquet, duplicates.parquet (each removal explained),
    clusters.parquet and summary.json."""
    # lazy: polars and the dedupe tables load only when this command runs
    from pipeline.jobs.dedupe import dedupe_dataset

    out_dir = output_argument(out_arg)
    with library_errors(writing_directory(out_dir)):
        config = _dedupe_config(
            config_file, normalised, near, threshold, survivor, protect, workers
        )
        result = dedupe_dataset(
            _dataset_inputs(inputs, split),
            out_dir,
            config.dedupe,
            kind=kind,
            text_columns=tuple(text or ()),
            key_columns=tuple(key or ()),
            force=force,
            engine=config.engine,
        )
    _print_summary(result.summary, out_dir)


def _dedupe_config(
    config_file: Path | None,
    normalised: bool | None,
    near: bool | None,
    threshold: float | None,
    survivor: str | None,
    protect: list[str] | None,
    workers: int | None,
) -> CampaignConfig:
    """The campaign config (its inputs dropped) with the command line's dedupe settings
    and worker count."""
    config = load_campaign(config_file) if config_file else CampaignConfig()
    # a run's switch: a config that keeps a run from deduping (to dedupe its output
    # later with the same settings) still dedupes here, and its summary says so
    changes: dict[str, object] = {"dedupe.enabled": True}
    # This command exists to dedupe: without a config, every rule is on (a run keeps
    # the costly normalised and near rules opt-in, see DedupeSettings).
    for name, flag in (("normalised", normalised), ("near", near)):
        if flag is not None or config_file is None:
            changes[f"dedupe.{name}"] = True if flag is None else flag
    if threshold is not None:
        changes["dedupe.threshold"] = threshold
    if survivor is not None:
        changes["dedupe.survivor"] = survivor
    if protect:
        changes["dedupe.protected_splits"] = tuple(protect)
    if workers is not None:
        changes["engine.workers"] = workers
    return dataclasses.replace(config, inputs=()).override(**changes)


def _dataset_inputs(inputs: list[str] | None, split: list[str] | None) -> list[DatasetInput]:
    """The unlabelled inputs, then the ``SPLIT=PATH`` ones."""
    from pipeline.jobs.dedupe import DatasetInput  # lazy: see dedupe_command

    given = [DatasetInput(p) for p in inputs or []]
    for option in split or []:
        spec = InputSpec.labelled(option)
        given.append(DatasetInput(spec.path, spec.split))
    return given


def _print_summary(summary: dict[str, Any], out_dir: Path | RemoteOut) -> None:
    """Rows removed per rule (``off`` for a rule not on: a config's ``[dedupe]`` keeps
    normalised and near off unless it turns them on), then the totals."""
    counts = summary["counts"]
    settings = summary["settings"]
    table = Table("rule", "rows", title=f"rowgate dedupe → {terminal_text(str(out_dir))}", box=None)
    for rule, n in summary["dedupe"]["by_rule"].items():
        table.add_row(rule, "off" if settings.get(rule) is False else f"{n:,}")
    out.print(table)
    out.print(
        f"{counts['rows']:,} rows: {counts['kept']:,} kept, {counts['duplicates']:,} duplicates"
        f" in {summary['dedupe']['clusters']:,} clusters"
    )
