"""Shared CLI plumbing: consoles, exit codes, turning library errors into messages.

The consoles never interpret what they print: no rich markup (``[/x]`` in a path is
text, not a closing tag) and no emoji codes (``file.zst:100:`` is a line number, not
💯). Styled words are :func:`styled` ``Text`` objects, never markup in a string.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final, NoReturn

import typer
from rich.console import Console
from rich.text import Text

from pipeline.core.errors import EXIT_FAILED, EXIT_INPUT, EXIT_USAGE, RowgateError

__all__ = [
    "EXIT_FAILED",
    "EXIT_INPUT",
    "EXIT_MISMATCH",
    "EXIT_REJECTED_SHARE",
    "EXIT_USAGE",
    "err",
    "fail",
    "library_errors",
    "os_error_message",
    "out",
    "styled",
    "writing_directory",
]

EXIT_MISMATCH: Final = 1
#: ``run --max-rejected-share``: OUT was written, but too many lines failed the gate
EXIT_REJECTED_SHARE: Final = 5


def _console(*, stderr: bool) -> Console:
    return Console(stderr=stderr, soft_wrap=True, markup=False, emoji=False, highlight=False)


out = _console(stderr=False)
err = _console(stderr=True)


def styled(word: str, style: str) -> Text:
    """A styled label to print beside plain text: ``err.print(styled("error:", "red"), msg)``."""
    return Text(word, style=style)


def fail(message: str, code: int) -> NoReturn:
    err.print(styled("error:", "bold red"), message)
    raise typer.Exit(code)


def os_error_message(exc: OSError, writing: str | None = None) -> str:
    """What failed and where: ``PATH: reason``, or for an error that names no file (a
    full disk while a worker writes a Parquet part), ``reason while writing WHAT``."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    if exc.filename is not None:
        where = exc.filename
        if exc.filename2 is not None:
            where = f"{where} → {exc.filename2}"
        return f"{where}: {reason}"
    return f"{reason} while writing {writing}" if writing else reason


@contextmanager
def library_errors(writing: str | None = None) -> Iterator[None]:
    """Map library exceptions to messages and documented exit codes.

    A :class:`~pipeline.core.errors.RowgateError` exits with its class's ``exit_code``
    (the hierarchy is drawn in :mod:`pipeline.core.errors`); its message names no record
    value, so it is printed as it is.

    ``writing`` says what the command writes (e.g. "OUT's temporary directory beside
    it, in PARENT"), for an operating-system error that names no file.
    """
    try:
        yield
    except RowgateError as exc:
        fail(str(exc), exc.exit_code)
    except OSError as exc:
        fail(os_error_message(exc, writing), EXIT_FAILED)
    except KeyboardInterrupt:
        err.print("interrupted; no output was written")
        sys.exit(130)


def writing_directory(out_dir: Path) -> str:
    """What a command that publishes ``out_dir`` atomically is writing while it works."""
    return f"{out_dir}'s temporary directory (beside it, in {out_dir.parent})"
