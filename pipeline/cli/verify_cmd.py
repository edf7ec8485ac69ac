"""``rowgate verify DIR``: re-check a run's outputs against its manifest and sources."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pipeline.cli._common import EXIT_MISMATCH, err, library_errors, out
from pipeline.verify import verify_run


def verify_command(
    directory: Annotated[Path, typer.Argument(help="A run's output directory.")],
    sources: Annotated[
        Path | None,
        typer.Option(help="Look inputs up under this directory instead of their recorded paths."),
    ] = None,
) -> None:
    """Re-read the sources named in the manifest and check every lineage hash, offset,
    output digest and the conservation of lines. Exits 1 on any mismatch."""
    with library_errors():
        report = verify_run(directory, sources)
    checked = ", ".join(f"{n} {what}" for what, n in sorted(report.checked.items()))
    if report.ok:
        out.print(f"[green]verified[/] {directory}: {checked}")
        return
    for problem in report.problems:
        err.print(f"[red]mismatch:[/] {problem}", highlight=False)
    err.print(f"[bold red]verification failed[/] ({checked})")
    raise typer.Exit(EXIT_MISMATCH)
