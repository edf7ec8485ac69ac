"""Shared CLI plumbing: consoles, exit codes, turning library errors into messages.

The consoles never interpret what they print: no rich markup (``[/x]`` in a path is
text, not a closing tag) and no emoji codes (``file.zst:100:`` is a line number, not
💯). Styled words are :func:`styled` ``Text`` objects, never markup in a string.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, NoReturn

import typer
from rich.console import Console
from rich.text import Text

from pipeline.core.errors import (
    EXIT_FAILED,
    EXIT_INPUT,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    INTERRUPTED,
    RowgateError,
)
from pipeline.output.remote import RemoteOut, output_target, work_directory

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
    "terminal_text",
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


#: what a message may not write to the terminal as it is: C0 controls but the tab (the
#: newline too), DEL, C1 controls, the bidirectional overrides, and lone surrogates (a
#: path's bytes that are not UTF-8, as Python decodes them)
_UNSHOWN: Final = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def terminal_text(message: str) -> str:
    """``message`` with every character the terminal would act on written as an escape
    (``\\u001b``, ``\\n``): a path naming an escape sequence cleared the screen or
    coloured what followed, and one holding a newline forged a message line. A byte of a
    path that is not UTF-8 is written ``\\xNN``, as the manifest and lineage name it
    (:func:`~pipeline.records.lineage.source_name`): it was printed ``\\udcNN``."""
    return _UNSHOWN.sub(_escaped, message)


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    if "\udc80" <= char <= "\udcff":  # os.fsdecode's escape of a byte 0x80-0xff
        return f"\\x{ord(char) - 0xDC00:02x}"
    return json.dumps(char)[1:-1]


def fail(message: str, code: int, items: Sequence[str] = ()) -> NoReturn:
    """Print ``message`` as an error, then each of ``items`` (the problems it lists) on
    its own indented line, and exit with ``code``. Only those are lines: a newline
    inside any of them, as a path or name may hold, is printed as an escape."""
    text = "\n  ".join(terminal_text(line) for line in (message, *items))
    err.print(styled("error:", "bold red"), text)
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
        head, *items = exc.lines
        fail(head, exc.exit_code, items)
    except OSError as exc:
        fail(os_error_message(exc, writing), EXIT_FAILED)
    except KeyboardInterrupt:
        err.print(INTERRUPTED)
        sys.exit(EXIT_INTERRUPTED)


def out_option(what: str) -> Any:
    """The ``--out`` option of a command that publishes ``what``."""
    return typer.Option(
        "--out",
        "-o",
        help=f"{what}, or an object-store URI such as s3://bucket/prefix (uploaded once complete).",
    )


def output_argument(text: str) -> Path | RemoteOut:
    """``--out`` as given: a local path, or an object-store URI
    (:func:`pipeline.output.remote.output_target`); a URI rowgate cannot write exits 2."""
    with library_errors():
        return output_target(text)
    raise AssertionError("unreachable: library_errors exits")  # pragma: no cover


def writing_directory(out_dir: Path | RemoteOut) -> str:
    """What a command that publishes ``out_dir`` atomically is writing while it works."""
    if isinstance(out_dir, RemoteOut):
        return f"{out_dir}'s work directory (in {work_directory()}, uploaded once complete)"
    return f"{out_dir}'s temporary directory (beside it, in {out_dir.parent})"


def located(out_dir: Path | RemoteOut, relative: str) -> str:
    """Where a file of an output is, for messages."""
    where = out_dir.join(relative) if isinstance(out_dir, RemoteOut) else str(out_dir / relative)
    return terminal_text(where)
