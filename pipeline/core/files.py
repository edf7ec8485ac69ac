"""What a path a command reads is, found by ``stat`` alone, before anything opens it.

Opening a FIFO blocks until something writes to it, so a command given one (an input,
a config, a rubric envelope, grades) waited forever. Every path rowgate reads is looked
at here first: a FIFO, socket or device is refused with an error saying what it is, as a
symbolic link loop or a broken link is, never opened and never skipped silently.
"""

from __future__ import annotations

import errno
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Final, Literal

from pipeline.core.errors import InputError, RowgateError

__all__ = ["COPY_FIRST", "NOT_FILES", "input_type", "read_regular", "refuse_special"]

#: What an input that is not a regular file is, by its ``stat`` file type.
NOT_FILES: Final = {
    stat.S_IFIFO: "FIFO (named pipe)",
    stat.S_IFSOCK: "socket",
    stat.S_IFCHR: "character device",
    stat.S_IFBLK: "block device",
}

#: why a special file is refused, unless the caller says more
COPY_FIRST: Final = "copy it to a file first"


def input_type(
    path: Path,
    given: str,
    *,
    reason: str = COPY_FIRST,
    error: Callable[[str], RowgateError] = InputError,
) -> Literal["file", "directory"]:
    """``"file"`` or ``"directory"`` (following symbolic links); anything else is an
    ``error`` (:class:`InputError` unless told) naming ``given`` and saying what the path
    is: missing, a link loop, a broken link, unreadable, or a FIFO, socket or device (then
    followed by ``reason``). Nothing is opened."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise error(f"{given}: a symbolic link loop (it never reaches a file)") from None
        if exc.errno == errno.ENOENT and path.is_symlink():
            raise error(f"{given}: a broken symbolic link (its target does not exist)") from None
        if exc.errno == errno.ENOENT:
            raise error(f"{given}: no such file or directory") from None
        raise error(f"{given}: cannot read: {exc.strerror}") from None
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISREG(mode):
        return "file"
    kind = NOT_FILES.get(stat.S_IFMT(mode), "special file")
    raise error(f"{given}: is a {kind}, not a regular file: {reason}")


def refuse_special(
    path: Path,
    given: str | None = None,
    *,
    reason: str = COPY_FIRST,
    error: Callable[[str], RowgateError] = InputError,
) -> None:
    """Refuse ``path`` if it exists and is neither a regular file nor a directory (a FIFO,
    socket or device: see :func:`input_type`), before a command that reads it once opens
    it; a missing or unreadable path is left to the read, which says so in its own words."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return
    if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
        input_type(path, str(path) if given is None else given, reason=reason, error=error)


def read_regular(
    path: Path, what: str, *, error: Callable[[str], RowgateError] = InputError
) -> bytes:
    """The bytes of the file at ``path``, read once: a FIFO, socket or device is refused
    first, never opened (:func:`refuse_special`); a read that fails is ``error`` saying
    ``what: <reason>``. ``what`` names the file as the caller's messages do."""
    refuse_special(path, what, error=error)
    try:
        return path.read_bytes()
    except OSError as exc:
        raise error(f"{what}: {exc.strerror}") from None
