"""The ``rowgate`` console script's target, kept free of imports at load time.

Worker processes are started with ``spawn``, which re-imports the parent's main module
in every worker: for the console script, that is the module named here. Importing the
command line (typer, rich, polars, every command) there cost each worker ~0.35 s of CPU
and ~100 MB before it gated a line, so this module defers it to the call.
"""

from __future__ import annotations


def main() -> None:
    from pipeline.cli import main as cli_main

    cli_main()
