"""``rowgate verify DIR``: re-check a run's outputs against its manifest and sources."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pipeline.cli._common import EXIT_MISMATCH, err, library_errors, out, styled


def verify_command(
    directory: Annotated[Path, typer.Argument(help="A run's output directory.")],
    sources: Annotated[
        Path | None,
        typer.Option(help="Look inputs up under this directory instead of their recorded paths."),
    ] = None,
) -> None:
    """Recompute everything the manifest claims: input and output digests, every lineage
    hash and offset, conservation of lines, counts per disposition and reason, the config
    digest, every pinned file the run read, report.html (rendered again); report files OUT
    should not hold. Exits 1 on any mismatch."""
    # lazy: pyarrow, numpy and the gate load only when this command runs
    from pipeline.output.verify import verify_run
    from pipeline.reports.run_report import render_run_report

    with library_errors():
        report = verify_run(directory, sources, render_report=render_run_report)
    checked = ", ".join(f"{n} {what}" for what, n in sorted(report.checked.items()))
    for note in report.notes:
        err.print(styled("note:", "yellow"), note)
    if report.ok:
        out.print(styled("verified", "green"), f"{directory}: {checked}")
        return
    for problem in report.problems:
        err.print(styled("mismatch:", "red"), problem)
    err.print(styled("verification failed", "bold red"), f"({checked})")
    raise typer.Exit(EXIT_MISMATCH)
