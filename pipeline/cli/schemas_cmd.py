"""``rowgate schemas``: inspect the pinned schema registry."""

from __future__ import annotations

import typer

from pipeline.cli._common import library_errors, out

app = typer.Typer(help="Inspect the schema registry.", no_args_is_help=True)


@app.command("list")
def list_command() -> None:
    """Print every schema's stable id, SHA-256 and title."""
    # lazy: the schema compiler and the reason catalogue (pyarrow) load only for this command
    from pipeline.records.schemas import SchemaRegistry

    with library_errors():
        registry = SchemaRegistry()
        entries = [registry.get(schema_id) for schema_id in registry.ids()]
    width = max((len(e.id) for e in entries), default=0)
    # Plain lines, not a table: a digest must never be truncated to fit a terminal.
    for entry in entries:
        out.print(f"{entry.id:<{width}}  {entry.sha256}  {entry.title}", highlight=False)
