"""``rowgate reasons``: the catalogue of every reason code a run can write."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Group
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from pipeline.cli._common import out

app = typer.Typer(help="The reason codes rows can carry.", no_args_is_help=True)


@app.command("list")
def list_command(
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help="Print a JSON list of {code, disposition, owner, meaning, spec}."
        ),
    ] = False,
    markdown: Annotated[
        bool,
        typer.Option("--markdown", help="Print the catalogue tables of docs/reason-codes.md."),
    ] = False,
) -> None:
    """Print every reason code with its disposition (rejected, quarantined, duplicate or
    informational), the module that emits it, its meaning and the spec it comes from,
    sorted by code. A pattern such as schema.<keyword> stands for one code per name."""
    # lazy: the catalogue's module loads pyarrow (the reasons' Arrow type)
    from pipeline.core.reasons import FAMILIES
    from pipeline.jobs.reasons import catalogue_markdown, reason_codes

    if as_json and markdown:
        raise typer.BadParameter("--json and --markdown are exclusive")
    if markdown:
        out.print(catalogue_markdown(), end="")
        return
    entries = reason_codes()
    if as_json:
        out.print_json(json.dumps([e.as_dict() for e in entries]))
        return
    # One table per family; a code's meaning, spec and owner sit under it, so nothing
    # is cut whatever the terminal's width.
    for i, (family, emitted_by) in enumerate(FAMILIES.items()):
        if i:
            out.print()
        table = Table(
            "code", "disposition", title=f"{family}.*: {emitted_by}", title_justify="left", box=None
        )
        table.columns[1].no_wrap = True
        for e in (e for e in entries if e.family == family):
            about = Padding(Text(f"{e.meaning}\n{e.spec.value}; {e.owner}"), (0, 0, 0, 2))
            table.add_row(Group(Text(e.code, style="bold"), about), e.disposition.value)
        out.print(table)
