"""The ``rowgate`` command line: a thin layer that parses flags into a config and calls
the library. One command per module; validation lives in the library, not here.

Exit codes (also in the README):

== =================================================================
0  success (``run``: the run completed, whatever the dispositions)
1  ``verify`` found a mismatch; ``rubrics check`` found an invalid file
2  usage or config error (bad flag, unknown config key, bad value); an OUT that is,
   holds or lies inside an input or the config; ``--force`` on a path rowgate did not write
3  input error: missing input, unknown kind, corrupt or over-expanding compressed
   stream, refused or mismatched schema (or one the Arrow layout cannot hold), rubric or
   policy; a malformed rubric tree or grades file; a scoring binding that fails on a
   row's value
4  the command failed (a worker died, OUT exists without ``--force`` or is held by
   another command, disk error, an internal error); nothing was written
5  ``run``: OUT was written, but the rejected and quarantined share of lines exceeds
   ``--max-rejected-share`` (``run.max_rejected_share``)
130  interrupted by Ctrl-C; 143 by SIGTERM (workers stopped, temporary files removed)
== =================================================================

Each library error states its code (``exit_code``, :mod:`pipeline.core.errors`);
:func:`pipeline.cli._common.library_errors` maps by it.
"""

from __future__ import annotations

import typer

from pipeline.cli import (
    dedupe_cmd,
    reasons_cmd,
    report_cmd,
    rubrics_cmd,
    run_cmd,
    scan_cmd,
    schemas_cmd,
    verify_cmd,
)

__all__ = ["app", "main"]

app = typer.Typer(
    name="rowgate",
    help="Gate JSONL training and evaluation exports into validated, lineage-carrying Parquet.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
)
app.command("run")(run_cmd.run_command)
app.command("verify")(verify_cmd.verify_command)
app.command("dedupe")(dedupe_cmd.dedupe_command)
app.command("scan")(scan_cmd.scan_command)
app.add_typer(schemas_cmd.app, name="schemas")
app.add_typer(rubrics_cmd.app, name="rubrics")
app.add_typer(report_cmd.app, name="report")
app.add_typer(reasons_cmd.app, name="reasons")


def main() -> None:
    app()
