"""``rowgate scan``: report what sanitization would redact, without writing records."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from pipeline.cli._common import library_errors, out
from pipeline.core.config import CampaignConfig, InputSpec, load_campaign


def scan_command(
    inputs: Annotated[
        list[str],
        typer.Argument(help="JSONL files (.jsonl, .jsonl.gz, .jsonl.zst) or directories of them."),
    ],
    config_file: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="Campaign config (TOML); its [sanitize] policy."),
    ] = None,
    kind: Annotated[
        str | None, typer.Option(help="Record kind of the inputs given on the command line.")
    ] = None,
    max_line_bytes: Annotated[
        int | None,
        typer.Option(help="Longest line read, in bytes (limits.max_line_bytes)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Count what sanitization would redact, per record kind, field path and category,
    and what would be quarantined or lose its raw bytes. Uses the campaign's policy
    (enabled or not) or rowgate's built-in one; prints counts, never a matched value."""
    from pipeline.jobs.scan import scan_inputs

    with library_errors():
        config = load_campaign(config_file) if config_file else CampaignConfig()
        specs = tuple(InputSpec(path, kind) for path in inputs)
        config = dataclasses.replace(config, inputs=specs, base_dir=".").validate()
        if max_line_bytes is not None:
            config = config.override(**{"limits.max_line_bytes": max_line_bytes})
        report = scan_inputs(config)
    data = report.as_dict()
    if as_json:
        out.print_json(json.dumps(data))
        return
    table = Table("kind", "field", "category", "redactions", title="would be redacted", box=None)
    for row in data["redacted"]:
        table.add_row(row["kind"], row["path"], row["category"], f"{row['count']:,}")
    out.print(table if data["redacted"] else "nothing would be redacted")
    if data["allowed"]:
        allowed = Table(
            "kind", "field", "category", "kept", title="authorised exceptions", box=None
        )
        for row in data["allowed"]:
            allowed.add_row(row["kind"], row["path"], row["category"], f"{row['count']:,}")
        out.print(allowed)
    if data["quarantined"]:
        quarantine = Table("kind", "reason", "records", title="would be quarantined", box=None)
        for row in data["quarantined"]:
            quarantine.add_row(row["kind"], row["code"], f"{row['records']:,}")
        out.print(quarantine)
    records = sum(data["records_with_redactions"].values())
    out.print(
        f"{data['lines']:,} lines; {records:,} records with redactions; "
        f"{data['rejected_raw_withheld']:,} rejected lines would have _raw withheld "
        f"(policy {data['policy']['policy_version']}, sha256 {data['policy']['policy_sha256'][:12]}…)"
    )
