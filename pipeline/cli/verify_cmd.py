"""``rowgate verify DIR``: re-check a run's outputs against its manifest and sources."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from pipeline.cli._common import (
    EXIT_MISMATCH,
    err,
    library_errors,
    out,
    output_argument,
    styled,
    terminal_text,
)
from pipeline.output.remote import RemoteOut, download, private_directory, sweep_leftovers


def verify_command(
    given: Annotated[
        str,
        typer.Argument(
            help="A run's output directory, or its object-store URI (s3://bucket/prefix).",
            metavar="DIRECTORY",
        ),
    ],
    sources: Annotated[
        Path | None,
        typer.Option(help="Look inputs up under this directory instead of their recorded paths."),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=256,
            help="Processes that check the rows and lines (default: one per core, one per "
            "64 MB of inputs and outputs at most).",
        ),
    ] = None,
) -> None:
    """Recompute everything the manifest claims: input and output digests, every lineage
    hash and offset, conservation of lines, counts per disposition and reason, the config
    digest, every pinned file the run read, report.html (rendered again); report files OUT
    should not hold. Exits 1 on any mismatch."""
    # lazy: pyarrow, numpy and the gate load only when this command runs
    from pipeline.output.verify import verify_run
    from pipeline.reports.run_report import render_run_report

    directory = output_argument(given)
    with library_errors(), _local_copy(directory, sources) as local:
        report = verify_run(local, sources, render_report=render_run_report, workers=workers)
    checked = ", ".join(f"{n} {what}" for what, n in sorted(report.checked.items()))
    for note in report.notes:
        err.print(styled("note:", "yellow"), terminal_text(note))
    if report.ok:
        out.print(styled("verified", "green"), f"{terminal_text(str(directory))}: {checked}")
        return
    for problem in report.problems:
        err.print(styled("mismatch:", "red"), terminal_text(problem))
    err.print(styled("verification failed", "bold red"), f"({checked})")
    raise typer.Exit(EXIT_MISMATCH)


@contextmanager
def _local_copy(directory: Path | RemoteOut, sources: Path | None) -> Iterator[Path]:
    """The output to verify on this machine: a local OUT itself; an object-store OUT
    copied whole into the work directory first (removed afterwards), so that every
    byte verify reads is a byte the store holds. Dead commands' leftovers there are
    removed once the copy's manifest names what verify reads, which they may hold."""
    from pipeline.output.verify import read_paths

    if isinstance(directory, Path):
        yield directory
        return
    local = private_directory("verify", sweep=False)
    try:
        download(directory, local)
        reads = read_paths(local, sources)
        if reads is not None:
            sweep_leftovers("verify", [*reads, *([sources] if sources is not None else [])])
        yield local
    finally:
        shutil.rmtree(local, ignore_errors=True)
