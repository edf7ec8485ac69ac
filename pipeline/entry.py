"""The ``rowgate`` console script's target, kept free of imports at load time.

Worker processes are started with ``spawn``, which re-imports the parent's main module
in every worker: for the console script, that is the module named here. Importing the
command line (typer, rich, polars, every command) there cost each worker ~0.35 s of CPU
and ~100 MB before it gated a line, so this module defers it to the call.

SIGTERM (``kill``, a container or job scheduler stopping the command) unwinds the command
like Ctrl-C does: the workers are killed, the temporary output directory (staging, spill
files) is removed, and nothing is published. The command exits with 143 (128 + SIGTERM,
what shells and schedulers expect of a terminated process), after Ctrl-C with 130.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType
from typing import Final

#: 128 + SIGTERM
EXIT_TERMINATED: Final = 143


class Terminated(BaseException):
    """SIGTERM arrived. Not an ``Exception``: like ``KeyboardInterrupt``, it passes every
    handler of operational errors and runs every clean-up on its way out."""


def _terminate(signum: int, frame: FrameType | None) -> None:
    # A second SIGTERM must not interrupt the clean-up the first one started.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Terminated


def main() -> None:
    signal.signal(signal.SIGTERM, _terminate)
    from pipeline.cli import main as cli_main

    try:
        cli_main()
    except Terminated:
        print("error: terminated (SIGTERM)", file=sys.stderr)
        sys.exit(EXIT_TERMINATED)
