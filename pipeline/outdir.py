"""Atomic output directories: everything is written into a hidden sibling and renamed
into place only when complete, so a crashed or killed command never leaves a partial
output (DESIGN §3.7). A later command removes a dead process's leftover sibling.

Used by every command that writes a directory: ``run``, ``dedupe``, ``report``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

__all__ = ["OutputExistsError", "atomic_directory"]

_MARKER: Final = ".rowgate-tmp-"


class OutputExistsError(RuntimeError):
    """The output directory exists and the caller did not ask to replace it."""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _siblings(out: Path) -> str:
    return f".{out.name}{_MARKER}"


def _prepare(out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    prefix = _siblings(out)
    for stale in out.parent.glob(prefix + "*"):
        pid = stale.name.removeprefix(prefix).removesuffix("-old")
        if pid.isdigit() and not _pid_alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)
    tmp = out.parent / f"{prefix}{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    return tmp


def _publish(tmp: Path, out: Path) -> None:
    if out.exists():
        old = out.parent / f"{_siblings(out)}{os.getpid()}-old"
        out.rename(old)
        tmp.rename(out)
        shutil.rmtree(old)
    else:
        tmp.rename(out)


@contextmanager
def atomic_directory(out: Path, *, force: bool) -> Iterator[Path]:
    """Yield a temporary directory that becomes ``out`` when the block completes.

    Raises :class:`OutputExistsError` before any work when ``out`` exists and ``force``
    is false; on any exception the temporary directory is removed and ``out`` untouched.
    """
    if out.exists() and not force:
        raise OutputExistsError(f"{out} exists; pass --force to replace it")
    tmp = _prepare(out)
    try:
        yield tmp
        _publish(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
