"""The ``rowgate`` console script's target, kept free of imports at load time.

Worker processes are started with ``spawn``, which re-imports the parent's main module
in every worker: for the console script, that is the module named here. Importing the
command line (typer, rich, polars, every command) there cost each worker ~0.35 s of CPU
and ~100 MB before it gated a line, so this module defers it to the call.

SIGTERM (``kill``, a container or job scheduler stopping the command) unwinds the command
like Ctrl-C does: the workers are killed, the temporary output directory (staging, spill
files) is removed, and nothing is published. The command exits with 143 (128 + SIGTERM,
what shells and schedulers expect of a terminated process), after Ctrl-C with 130.

A :class:`~pipeline.core.errors.RowgateError` that a command did not turn into a message
is reported like one (its message names no record value) with its class's exit code. Any
other exception is a defect of rowgate (a Rust panic in polars or pyarrow included, which
pyo3 raises as a ``BaseException``): it is reported by its class and where it was
raised, exit 4, without its message or a traceback's, since polars and pyarrow quote the
values they failed on (a record value may be a secret).
"""

from __future__ import annotations

import signal
import sys
from types import FrameType
from typing import Final

# these modules import nothing else (~1 ms): only the command line is deferred
from pipeline.core import signals
from pipeline.core.allocator import apply_parent_allocator, hand_back_large_blocks
from pipeline.core.errors import EXIT_FAILED, EXIT_INTERRUPTED, INTERRUPTED, RowgateError
from pipeline.core.signals import Terminated

__all__ = ["EXIT_INTERRUPTED", "EXIT_TERMINATED", "Terminated", "main"]

#: 128 + SIGTERM
EXIT_TERMINATED: Final = 143
#: innermost frames printed for a defect
_DEFECT_FRAMES: Final = 8


def _terminate(signum: int, frame: FrameType | None) -> None:
    # A second SIGTERM must not interrupt the clean-up the first one started.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # recorded: a library may turn Terminated into another exception (Ray's blocking
    # calls poll for signals from C++ and raise their own), and Python loses it where it
    # lands in a weakref callback (an import): nothing is published after it
    # (pipeline.core.signals)
    signals.record(signum)
    raise Terminated


def main() -> None:
    signals.clear()
    signal.signal(signal.SIGTERM, _terminate)
    # before polars and pyarrow load (the command line imports them): they read these once
    apply_parent_allocator()
    # numpy's large arrays unmapped when freed (glibc): pipeline.core.allocator
    hand_back_large_blocks()
    try:
        # inside: a signal while the command line loads ends like one during the command
        from pipeline.cli import main as cli_main

        cli_main()
    except BaseException as error:
        # after SIGTERM, a command that did not complete was terminated, whatever the
        # exception its unwinding ended in
        if signals.received() and not (isinstance(error, SystemExit) and error.code in (0, None)):
            _exit_terminated()
        if isinstance(error, RowgateError):
            print(f"error: {error}", file=sys.stderr)
            sys.exit(error.exit_code)
        if isinstance(error, KeyboardInterrupt):  # before a command took it (loading)
            print(INTERRUPTED, file=sys.stderr)
            sys.exit(EXIT_INTERRUPTED)
        if not isinstance(error, SystemExit | Terminated):
            _report_defect(error)  # a Rust panic (pyo3's PanicException) is no Exception
            sys.exit(EXIT_FAILED)
        raise


def _exit_terminated() -> None:
    print("error: terminated (SIGTERM)", file=sys.stderr)
    sys.exit(EXIT_TERMINATED)


def _report_defect(error: BaseException) -> None:
    """Where an unexpected exception was raised, by file, line and function only."""
    import traceback

    kind = type(error)
    print(
        f"error: internal error {kind.__module__}.{kind.__qualname__} (its message is "
        "withheld: it may quote record values); please report it with these lines:",
        file=sys.stderr,
    )
    for frame in traceback.extract_tb(error.__traceback__)[-_DEFECT_FRAMES:]:
        print(f"  {frame.filename}:{frame.lineno} in {frame.name}", file=sys.stderr)
