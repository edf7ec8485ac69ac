"""``rowgate rubrics``: ARI replication rubric envelopes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pipeline.cli._common import EXIT_MISMATCH, err, library_errors, out
from pipeline.config import CampaignConfig, load_campaign
from pipeline.envelope import check_envelope
from pipeline.reasons import Disposition

app = typer.Typer(help="ARI replication rubric envelopes.", no_args_is_help=True)


@app.command("check")
def check_command(
    file: Annotated[Path, typer.Argument(help="One envelope (a JSON document, any formatting).")],
    config_file: Annotated[
        Path | None, typer.Option("--config", "-c", help="Campaign config (TOML).")
    ] = None,
) -> None:
    """Validate one envelope: strict JSON, the schema its `schema_version`/`version` names,
    rubric_sha256, node ids, leaf-only fields, weights, flagged-leaf share. Exit 0 when valid
    (warnings allowed), 1 otherwise."""
    with library_errors():
        config = load_campaign(config_file) if config_file else CampaignConfig()
        outcome = check_envelope(file, config)
    verdict = "valid" if outcome.disposition is Disposition.ACCEPTED else "invalid"
    for reason in outcome.reasons:
        err.print(f"  {reason.code} {reason.path} {reason.detail}".rstrip(), highlight=False)
    out.print(f"{file}: {verdict} ({outcome.kind or 'unrouted'})", highlight=False)
    if verdict != "valid":
        raise typer.Exit(EXIT_MISMATCH)
