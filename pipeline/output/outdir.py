"""Output directories that never lose a byte (DESIGN §3.7, §3.14).

A command that writes a directory ``OUT`` first *claims* it (:func:`claim_output`), for
the whole command:

- it takes a lock beside OUT (``.NAME.rowgate-lock``, ``flock``): a second command on
  the same OUT fails at once with :class:`OutputBusyError`. The lock file is written and
  removed, so only rowgate's own is ever opened there (created with ``O_EXCL``, or a
  small regular file of one link holding a process number: a killed command's); anything
  else at that path, or a path the command reads, is refused (:class:`UnsafeOutputError`);
- it recovers what a killed command left beside OUT (below);
- it refuses, before any work, an OUT that is, contains or lies inside a path the
  command reads (:class:`UnsafeOutputError`), an OUT that exists without ``force``
  (:class:`OutputExistsError`) and, even with ``force``, an OUT that is a file, a
  symbolic link or a directory rowgate did not write (its ``manifest.json``,
  ``report.json`` or ``summary.json`` names a ``rowgate-*`` format; an empty directory
  holds nothing to lose), or one that holds anything besides what that output wrote (a
  file a user put in OUT is never deleted: :func:`foreign_entries`).

Everything is then written into a hidden sibling ``.NAME.rowgate-tmp-PID`` that becomes
OUT only when complete (:meth:`OutputClaim.staging`); if something is still at that path
once dead commands' leftovers are removed (a file, a link, a directory holding an input),
the command is refused, and nothing there is removed. Replacing an old OUT is crash-safe
at every point: on Linux the two directories are swapped in one atomic
``renameat2(RENAME_EXCHANGE)``; elsewhere the old OUT is first renamed to
``.NAME.rowgate-tmp-PID-old``, and a later command that finds it with no OUT beside it
(the publisher died between the two renames) renames it back. A leftover is recovered
only when the process that made it is dead; a live one's is never touched.

A command that writes one file (``rowgate rubrics score --out FILE``) uses
:func:`atomic_file`: the same refusals of what it reads and of an existing OUT, and a
hidden sibling renamed over OUT once complete.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import re
import secrets
import shutil
import stat
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, ClassVar, Final

from pipeline.core import signals
from pipeline.core.errors import EXIT_FAILED, EXIT_USAGE, RowgateError

if TYPE_CHECKING:
    from pipeline.output.remote import RemoteClaim, RemoteOut

__all__ = [
    "FILE_SECTIONS",
    "PROOFS",
    "OutputBusyError",
    "OutputClaim",
    "OutputExistsError",
    "UnsafeOutputError",
    "atomic_directory",
    "atomic_file",
    "check_out_name",
    "claim_output",
    "foreign_entries",
    "output_format",
    "pid_alive",
    "unexpected_entries",
    "written_by_rowgate",
]

_MARKER: Final = ".rowgate-tmp-"
_OLD: Final = "-old"
_LOCK: Final = ".rowgate-lock"
#: an output file is written under ``.NAME.rowgate-part-PID-RANDOM`` beside it
_PART: Final = ".rowgate-part-"
#: the most bytes a lock file holds (a process number and a newline)
_LOCK_MAX_BYTES: Final = 32
#: files whose ``format`` (``rowgate-run/1``, ``rowgate-report/1``, ``rowgate-dedupe/1``)
#: proves that rowgate wrote the directory holding them
PROOFS: Final = ("manifest.json", "report.json", "summary.json")
_PROOF_MAX_BYTES: Final = 256 << 20
#: a run manifest's lists of the files the run wrote (``{path, bytes, sha256, ...}``
#: each): with ``manifest.json`` itself, they account for everything in OUT (defined here,
#: not in :mod:`pipeline.output.manifest`, which loads pyarrow: the command line imports
#: this module at start-up)
FILE_SECTIONS: Final = ("outputs", "artifacts", "reports")
#: the files ``rowgate dedupe`` writes (pipeline.jobs.dedupe), beside its summary.json
_DEDUPE_FILES: Final = (
    "summary.json",
    "kept.parquet",
    "duplicates.parquet",
    "clusters.parquet",
    "split_groups.parquet",
)
#: how many of the entries rowgate did not write a refusal names
_FOREIGN_SHOWN: Final = 3


#: Called with the name of each step of a publish (``complete``, ``exchanged``,
#: ``moved-aside``, ``published``): tests kill the process there to prove that every
#: point is recoverable.
def _step(name: str) -> None:
    pass


class OutputExistsError(RowgateError, RuntimeError):
    """The output directory exists and the caller did not ask to replace it."""

    exit_code: ClassVar[int] = EXIT_FAILED


class UnsafeOutputError(RowgateError, ValueError):
    """OUT cannot be written without risking a user's data: it is, contains or lies inside
    a path the command reads, or ``--force`` would replace something rowgate did not write."""

    # a wrong --out, refused before any work; its content is not the problem (that would
    # be an input error)
    exit_code: ClassVar[int] = EXIT_USAGE


class OutputBusyError(RowgateError, RuntimeError):
    """Another command holds the lock on this output directory."""

    exit_code: ClassVar[int] = EXIT_FAILED


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _prefix(out: Path) -> str:
    return f".{out.name}{_MARKER}"


# --- atomic renames ----------------------------------------------------------------

_AT_FDCWD: Final = -100
_RENAME_NOREPLACE: Final = 1
_RENAME_EXCHANGE: Final = 2


def _load_renameat2() -> Callable[[str, str, int], int] | None:
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):  # not glibc ≥ 2.28 / not Linux
        return None
    function.argtypes = [
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    ]
    function.restype = ctypes.c_int

    def call(src: str, dst: str, flags: int) -> int:
        if function(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), flags) == 0:
            return 0
        return ctypes.get_errno()

    return call


#: ``renameat2`` when the C library has it; tests set it to None to prove the fallback
_renameat2 = _load_renameat2()
_UNSUPPORTED: Final = frozenset({errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP})


def _exchange(a: Path, b: Path) -> bool:
    """Swap two directories atomically; False when this system or file system cannot."""
    if _renameat2 is None:
        return False
    code = _renameat2(str(a), str(b), _RENAME_EXCHANGE)
    if code in _UNSUPPORTED:
        return False
    if code:
        raise OSError(code, os.strerror(code), str(b))
    return True


def _rename_new(src: Path, dst: Path) -> None:
    """Rename ``src`` to ``dst`` only if nothing is at ``dst`` (a plain rename would
    silently replace an empty directory someone created meanwhile)."""
    code = _renameat2(str(src), str(dst), _RENAME_NOREPLACE) if _renameat2 else errno.ENOSYS
    if code in _UNSUPPORTED:
        if os.path.lexists(dst):
            code = errno.EEXIST
        else:
            src.rename(dst)
            return
    if code == errno.EEXIST:
        raise OutputExistsError(f"{dst} appeared while the command ran; nothing was replaced")
    if code:
        raise OSError(code, os.strerror(code), str(dst))


# --- what OUT may be ---------------------------------------------------------------


def written_by_rowgate(directory: Path) -> bool:
    """Whether ``directory`` is a real directory that rowgate wrote, or empty."""
    if directory.is_symlink() or not directory.is_dir():
        return False
    return not any(directory.iterdir()) or _proof(directory) is not None


def output_format(directory: Path) -> str | None:
    """The format rowgate wrote ``directory`` in (``rowgate-dedupe/1``, a run's
    ``rowgate-run/…``), read from its proof; None where rowgate wrote no output."""
    proof = _proof(directory)
    return None if proof is None else str(proof[1]["format"])


def _proof(directory: Path) -> tuple[str, dict[str, Any]] | None:
    """The first of ``PROOFS`` in ``directory`` that names a rowgate format, read."""
    if directory.is_symlink() or not directory.is_dir():
        return None
    for name in PROOFS:
        proof = directory / name
        try:
            if proof.is_symlink() or proof.stat().st_size > _PROOF_MAX_BYTES:
                continue
            document = json.loads(proof.read_bytes())
        except (OSError, ValueError):
            continue
        if isinstance(document, dict) and str(document.get("format", "")).startswith("rowgate-"):
            return name, document
    return None


def _written_files(name: str, document: dict[str, Any]) -> set[str]:
    """The files (paths relative to OUT) of the output that ``document``, its proof
    ``name``, describes: a run's manifest lists them; a dedupe output and an evaluation
    report write fixed names (the latter names its tables in ``report.json``)."""
    if name == "summary.json":
        return set(_DEDUPE_FILES)
    if name == "report.json":
        tables = document.get("tables")
        named = tables.values() if isinstance(tables, dict) else ()
        return {"report.json", "report.html"} | {t for t in named if isinstance(t, str)}
    listed = {name}
    for section in FILE_SECTIONS:
        entries = document.get(section)
        for entry in entries if isinstance(entries, list) else ():
            if isinstance(entry, dict) and isinstance(entry.get("path"), str):
                listed.add(entry["path"])
    return listed


def foreign_entries(out: Path) -> list[str]:
    """What in the rowgate output ``out`` rowgate did not write (paths relative to it, a
    directory with a trailing ``/``; links too, since rowgate writes none): replacing
    ``out`` would delete them. An output without a readable proof is all foreign."""
    proof = _proof(out)
    written = _written_files(*proof) if proof is not None else set()
    return [
        f"{relative}/" if is_dir else relative
        for relative, is_dir, _ in unexpected_entries(out, written)
    ]


def unexpected_entries(out: Path, files: set[str]) -> Iterator[tuple[str, bool, bool]]:
    """Each entry of ``out`` that is neither one of ``files`` (paths relative to it) nor
    a directory holding one, or that is a link (rowgate writes none), in walk order:
    (path relative to ``out``, whether a directory, whether a link). Such a directory is
    not walked into."""
    parents = {str(p) for path in files for p in PurePosixPath(path).parents} - {"."}
    for directory, dirs, names in os.walk(out):
        here = Path(directory).relative_to(out)
        kept = []  # the directories walked into
        for name in sorted(dirs):
            relative, link = (here / name).as_posix(), os.path.islink(os.path.join(directory, name))
            if relative in parents and not link:
                kept.append(name)
            else:
                yield relative, True, link
        dirs[:] = kept
        for name in sorted(names):
            relative, link = (here / name).as_posix(), os.path.islink(os.path.join(directory, name))
            if relative not in files or link:
                yield relative, False, link


def _inside(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


def meets_a_read_path(entry: Path, protected: Iterable[Path]) -> bool:
    """Whether ``entry`` is, holds or lies inside a path in ``protected`` (real paths):
    a clean-up leaves such an entry alone, whatever its name says. A user who opened a
    dead command's leftover to take an input from it must not lose that input."""
    where = os.path.realpath(entry)
    reads = (os.path.realpath(p) for p in protected if os.path.lexists(p))
    return any(_inside(path, where) or _inside(where, path) for path in reads)


def _check_utf8(out: Path, what: str = "an output directory") -> None:
    """Refuse an OUT whose path is not UTF-8: Arrow and polars write files only by UTF-8
    paths, so the run would fail in its first write (an internal error) after the gate."""
    path = os.fsencode(out.absolute())
    try:
        path.decode("utf-8")
    except UnicodeDecodeError:
        shown = path.decode("utf-8", "backslashreplace")
        raise UnsafeOutputError(
            f"--out {shown}: the path is not valid UTF-8, and Parquet files are written by "
            f"UTF-8 paths only; choose {what} whose path is UTF-8"
        ) from None


def _node(path: str | Path) -> tuple[int, int] | None:
    """The file ``path`` names (device, inode), links followed; None if none."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def _relation(target: Path, protected: Iterable[Path]) -> tuple[str, Path] | None:
    """How the path a command writes, ``target``, meets the first path in ``protected``
    it overlaps: it ``is`` it (by its real path, or the same file under another name: a
    hard link), ``contains`` it or ``lies inside`` it; None when it meets none."""
    where = {os.path.join(os.path.realpath(target.parent), target.name), os.path.realpath(target)}
    node = _node(target)
    for given in protected:
        if not os.path.lexists(given):
            continue
        path = os.path.realpath(given)
        if node is not None and node == _node(path):
            return "is", given
        for place in where:
            if place == path:
                return "is", given
            if _inside(path, place):
                return "contains", given
            if os.path.isdir(path) and _inside(place, path):
                return "lies inside", given
    return None


def _check_overlap(out: Path, protected: Iterable[Path]) -> None:
    """Refuse an OUT that is, contains or lies inside a path the command reads."""
    found = _relation(out, protected)
    if found is not None:
        relation, given = found
        raise UnsafeOutputError(
            f"--out {out} {relation} {given}, which this command reads; choose an "
            "output directory outside every input (and not holding the config file "
            "or what it names)"
        )


def check_out_name(out: Path) -> None:
    """Refuse an OUT given as ``.`` or ``..`` (its last part): its lock and temporary
    directory, which go beside OUT in its parent, would be made inside it, and the swap
    renames OUT by its name. Before, ``--out . --force`` in an old output was refused
    naming the lock as an entry the user had put there. A command that makes OUT's path
    absolute first (``run``: its workers may start elsewhere) asks this of the path as
    given."""
    if out.name in ("", ".", ".."):
        raise UnsafeOutputError(
            f"--out {out} names a directory by {out.name or '.'!r}, not by its name: rowgate "
            "locks and replaces OUT from its parent; give its path by name (e.g. "
            f"{Path(os.path.abspath(out))})"
        )


def _make_parent(out: Path) -> None:
    """Make OUT's parent directories; a file in their place is named as what it is (it
    was "afile: File exists" for ``--out afile/sub``)."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        for parent in reversed(out.parents):
            if os.path.lexists(parent) and not parent.is_dir():
                raise UnsafeOutputError(
                    f"--out {out}: {parent} is not a directory, so OUT cannot be made in it"
                ) from None
        raise


def _exists_to_replace(out: Path, force: bool, what: str, noun: str) -> bool:
    """Whether ``out`` exists, to be replaced: refused when it does without ``force``, or
    is a link (``--force`` replaces only ``what``: the ``noun`` itself)."""
    if not os.path.lexists(out):
        return False
    if not force:
        raise OutputExistsError(f"{out} exists; pass --force to replace it")
    if out.is_symlink():
        raise UnsafeOutputError(
            f"--out {out} is a symbolic link; --force replaces only {what}: give the "
            f"{noun} itself, or remove the link"
        )
    return True


def _check_replaceable(out: Path, force: bool) -> None:
    if not _exists_to_replace(out, force, "a directory rowgate wrote", "directory"):
        return
    if not out.is_dir():
        raise UnsafeOutputError(
            f"--out {out} is a file, not an output directory; --force does not replace it"
        )
    if not written_by_rowgate(out):
        raise UnsafeOutputError(
            f"--out {out} is a directory rowgate did not write (no rowgate manifest in it); "
            "--force replaces only rowgate's own output: choose another directory"
        )
    foreign = foreign_entries(out)
    if foreign:
        shown = ", ".join(foreign[:_FOREIGN_SHOWN]) + (", …" if foreign[_FOREIGN_SHOWN:] else "")
        entries, them = ("entry", "it") if len(foreign) == 1 else ("entries", "them")
        raise UnsafeOutputError(
            f"--out {out} holds {len(foreign)} {entries} rowgate did not write ({shown}); "
            f"--force would delete {them}: move {them} out of the directory, or choose "
            "another one"
        )


# --- the lock and the recovery of dead commands' leftovers -------------------------


def _lock_path(out: Path) -> Path:
    return out.parent / f".{out.name}{_LOCK}"


def _check_lock_unread(out: Path, protected: Iterable[Path]) -> None:
    """Refuse a lock path that is a path the command reads: the lock is truncated,
    written and removed (an input named like it was read as the pid, then deleted)."""
    path = _lock_path(out)
    found = _relation(path, protected)
    if found is not None:
        relation, given = found
        raise UnsafeOutputError(
            f"{path}, the lock file of --out {out}, {relation} {given}, which this command "
            "reads; move it away, or choose another output directory"
        )


def _not_a_lock(path: Path) -> UnsafeOutputError:
    return UnsafeOutputError(
        f"{path} is not a rowgate lock file (a lock is a small file holding a process "
        "number), and the lock is written and removed there; move it away, or choose "
        "another output directory"
    )


def _is_lock(fd: int) -> bool:
    """Whether the open file ``fd`` is one rowgate's lock can be: a regular file of one
    link (none once its holder removed it), empty or holding a process number."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1 or info.st_size > _LOCK_MAX_BYTES:
        return False
    return re.fullmatch(rb"(?:[0-9]+\n?)?", os.pread(fd, _LOCK_MAX_BYTES + 1, 0)) is not None


def _open_lock(path: Path) -> int | None:
    """Create the lock file, or open the one another rowgate command left (a killed one's
    is taken over); None when it vanished as it was opened.

    Anything else at that path (a user's file, a hard link to one, a link, a directory)
    is refused: the lock is truncated and removed, which before happened to whatever was
    there."""
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        pass
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            raise _not_a_lock(path)
        fd = os.open(path, flags | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    if not _is_lock(fd):
        os.close(fd)
        raise _not_a_lock(path)
    return fd


def _names(path: Path, fd: int) -> bool:
    """Whether ``path`` still names the file open as ``fd``."""
    try:
        current = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (current.st_dev, current.st_ino) == (mine.st_dev, mine.st_ino)


def _take_lock(out: Path, path: Path) -> int:
    """The lock file ``path`` of ``out``, open and locked (``flock``)."""
    for _ in range(20):
        fd = _open_lock(path)
        if fd is None:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            os.close(fd)
            raise OutputBusyError(
                f"{out} is being written by another rowgate command"
                + (f" (process {holder})" if holder.isdigit() else "")
                + f"; wait for it to finish, or choose another output directory ({path})"
            ) from None
        if _names(path, fd):
            return fd
        os.close(fd)  # the previous holder removed this file as we opened it: take the new one
    raise OutputBusyError(f"{out}: could not take the lock {path}")


@contextmanager
def _locked(out: Path) -> Iterator[None]:
    """Hold ``.NAME.rowgate-lock`` beside ``out``; removed on release (a killed
    holder's lock file is released by the kernel and taken again by the next command),
    only if that path still names the lock: never another file put there meanwhile."""
    path = _lock_path(out)
    fd = _take_lock(out, path)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        try:
            if _names(path, fd):
                path.unlink()
        finally:
            os.close(fd)


def _leftovers(out: Path, protected: Iterable[Path] = ()) -> list[tuple[Path, int, bool]]:
    """Dead processes' hidden siblings of ``out``: (path, pid, is an old OUT).

    Only directories are rowgate's (a file or a link of that name is not), and never one
    that is, holds or lies inside a path the command reads: a user who opened a leftover
    to take an input from it must not lose that input to the clean-up."""
    prefix = _prefix(out)
    protected = list(protected)
    found = []
    for entry in out.parent.iterdir():
        if not entry.name.startswith(prefix) or entry.is_symlink() or not entry.is_dir():
            continue
        if meets_a_read_path(entry, protected):
            continue
        rest = entry.name.removeprefix(prefix)
        old = rest.endswith(_OLD)
        pid = rest.removesuffix(_OLD)
        # this process has no sibling of OUT yet when it recovers: one with its pid is a
        # dead process's whose pid was reused
        if pid.isdigit() and (int(pid) == os.getpid() or not pid_alive(int(pid))):
            found.append((entry, int(pid), old))
    return found


def _recover(out: Path, protected: Iterable[Path] = ()) -> None:
    """Finish what killed commands left: put back an old OUT that was moved aside when no
    new one was published, and remove every other leftover (under the lock)."""
    leftovers = _leftovers(out, protected)
    olds = sorted(
        (path for path, _, old in leftovers if old), key=lambda p: p.stat().st_mtime, reverse=True
    )
    if olds and not os.path.lexists(out):
        _rename_new(olds.pop(0), out)
    if _proof(out) is None:  # not rowgate's new OUT: an old one may be the only copy
        olds = []
    for path in olds + [path for path, _, old in leftovers if not old]:
        shutil.rmtree(path)


# --- claiming and publishing --------------------------------------------------------


def _staging_path(out: Path) -> Path:
    return out.parent / f"{_prefix(out)}{os.getpid()}"


def _check_staging_free(out: Path, protected: Iterable[Path]) -> None:
    """Refuse to stage OUT when something is still at this command's temporary path once
    dead commands' leftovers are removed: a file or a link (rowgate makes only a
    directory there), or a directory that is, holds or lies inside a path the command
    reads. It is never removed: before, it was, whole, with the input in it."""
    tmp = _staging_path(out)
    if not os.path.lexists(tmp):
        return
    found = _relation(tmp, protected)
    if tmp.is_symlink():
        what = "a symbolic link"
    elif found is not None:
        what = f"a directory that {found[0]} {found[1]}, which this command reads"
    else:
        what = "a directory" if tmp.is_dir() else "a file"
    raise UnsafeOutputError(
        f"{tmp}, the temporary directory of --out {out}, is already there ({what}), and "
        "rowgate never removes what it did not make: move it away, or choose another "
        "output directory"
    )


@dataclass(frozen=True)
class OutputClaim:
    """A locked, checked output directory (:func:`claim_output`)."""

    out: Path
    force: bool
    #: the paths the command reads
    protect: tuple[Path, ...] = ()

    @contextmanager
    def staging(self) -> Iterator[Path]:
        """Yield an empty hidden sibling that replaces OUT when the block completes; on
        any exception it is removed and OUT is left as it was."""
        signals.check()
        tmp = _staging_path(self.out)
        _check_staging_free(self.out, self.protect)
        tmp.mkdir()
        try:
            yield tmp
            signals.check()  # once SIGTERM arrived, nothing is published
            self._publish(tmp)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def _publish(self, tmp: Path) -> None:
        out = self.out
        _step("complete")
        if not os.path.lexists(out):
            _rename_new(tmp, out)
            _step("published")
            return
        _check_replaceable(out, self.force)  # OUT may have appeared during the command
        # Once the new OUT is in place the command has succeeded: removing the old one is
        # best effort (what is left is a dead process's leftover for the next command).
        if _exchange(tmp, out):
            _step("exchanged")
            shutil.rmtree(tmp, ignore_errors=True)  # the old OUT, now under the temporary name
            return
        old = out.parent / f"{_prefix(out)}{os.getpid()}{_OLD}"
        out.rename(old)
        try:
            _step("moved-aside")
            _rename_new(tmp, out)
        except BaseException:
            if not os.path.lexists(out):
                old.rename(out)  # put the old OUT back
            raise
        _step("published")
        shutil.rmtree(old, ignore_errors=True)


@contextmanager
def claim_output(
    out: Path | RemoteOut, *, force: bool, protect: Iterable[Path] = ()
) -> Iterator[OutputClaim | RemoteClaim]:
    """Lock and check ``out`` for the whole command (see the module docstring).

    Raises, before any work: :class:`UnsafeOutputError` (OUT's path is not UTF-8; OUT
    is, contains or lies inside a path in ``protect``; ``force`` would replace a file,
    a link or a directory rowgate did not write; or the lock or the temporary directory
    beside OUT would be something rowgate did not make, or a path in ``protect``),
    :class:`OutputExistsError` (OUT exists, no ``force``), :class:`OutputBusyError`
    (another command holds OUT).

    An OUT on an object store (:class:`~pipeline.output.remote.RemoteOut`) is claimed by
    :func:`~pipeline.output.remote.claim_remote` instead: the command works in a local
    directory and uploads the result, never over an existing output.
    """
    if not isinstance(out, Path):
        from pipeline.output.remote import claim_remote

        with claim_remote(out, force=force, protect=protect) as remote:
            yield remote
        return
    protect = list(protect)
    _check_utf8(out)
    check_out_name(out)
    _check_overlap(out, protect)
    _check_lock_unread(out, protect)
    _make_parent(out)
    with _locked(out):
        _recover(out, protect)
        _check_replaceable(out, force)
        _check_staging_free(out, protect)
        yield OutputClaim(out, force, tuple(protect))


@contextmanager
def atomic_directory(
    out: Path | RemoteOut, *, force: bool, protect: Iterable[Path] = ()
) -> Iterator[Path]:
    """:func:`claim_output` and :meth:`OutputClaim.staging` in one: a temporary directory
    that becomes ``out`` when the block completes."""
    with claim_output(out, force=force, protect=protect) as claim, claim.staging() as tmp:
        yield tmp


# --- one output file ---------------------------------------------------------------


def _check_file(out: Path, force: bool, protected: Iterable[Path]) -> None:
    """Refuse an output file that is, contains or lies inside a path the command reads
    (even with ``force``: a score written over its own grades lost them), one that exists
    without ``force`` and, even with it, a link or anything but a regular file."""
    found = _relation(out, protected)
    if found is not None:
        relation, given = found
        raise UnsafeOutputError(
            f"--out {out} {relation} {given}, which this command reads; --force never "
            "replaces an input: choose another output file"
        )
    if not _exists_to_replace(out, force, "a file", "file"):
        return
    if not out.is_file():
        raise UnsafeOutputError(
            f"--out {out} is not a regular file (a directory?); --force replaces only a file"
        )


_PART_NAME: Final = re.compile(r"([0-9]+)-[0-9a-f]{8}")


def _remove_dead_parts(out: Path, protected: Iterable[Path]) -> None:
    """Remove what killed commands left beside the file ``out``: regular files named
    ``.NAME.rowgate-part-PID-XXXXXXXX`` whose process is dead, never a link, a directory,
    a live command's file or a path the command reads."""
    prefix = f".{out.name}{_PART}"
    reads = {os.path.realpath(p) for p in protected if os.path.lexists(p)}
    for entry in out.parent.iterdir():
        rest = entry.name.removeprefix(prefix)
        found = _PART_NAME.fullmatch(rest) if rest != entry.name else None
        if found is None or entry.is_symlink() or not entry.is_file():
            continue
        pid = int(found.group(1))
        if os.path.realpath(entry) in reads or (pid != os.getpid() and pid_alive(pid)):
            continue
        entry.unlink(missing_ok=True)


def _new_sibling(out: Path) -> Path:
    """A new empty hidden file beside ``out``, made with ``O_EXCL``: whatever is already
    at a name, even a dead command's leftover, is never written over."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(10):
        tmp = out.parent / f".{out.name}{_PART}{os.getpid()}-{secrets.token_hex(4)}"
        try:
            os.close(os.open(tmp, flags, 0o666))
        except FileExistsError:
            continue
        return tmp
    raise FileExistsError(errno.EEXIST, "no free temporary name beside it", str(out))


def _publish_file(tmp: Path, out: Path, force: bool, protected: Iterable[Path]) -> None:
    """Move the complete ``tmp`` to ``out``, flushed to disk first: never over a file that
    appeared meanwhile without ``force``; with it, after ``out`` is checked again, with
    the replaced file's permissions (its owner is the command's: a new file)."""
    fd = os.open(tmp, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    if not os.path.lexists(out):
        _rename_new(tmp, out)
        return
    _check_file(out, force, protected)  # OUT may have appeared or changed meanwhile
    os.chmod(tmp, stat.S_IMODE(os.stat(out).st_mode))  # the file replaced keeps its mode
    os.replace(tmp, out)


@contextmanager
def atomic_file(out: Path, *, force: bool, protect: Iterable[Path] = ()) -> Iterator[Path]:
    """Yield a new empty hidden sibling of the file ``out`` that replaces it, in one
    rename, when the block completes; on any exception it is removed and ``out`` is left
    as it was (a kill leaves at most the sibling, ``.NAME.rowgate-part-PID-…``, which the
    next command on ``out`` removes: :func:`_remove_dead_parts`).

    Raises, before the block: :class:`UnsafeOutputError` (``out``'s path is not UTF-8;
    ``out`` is, contains or lies inside a path in ``protect``, by its real path or as the
    same file under another name, even with ``force``; ``force`` would replace a link or
    a directory), :class:`OutputExistsError` (``out`` exists, no ``force``).
    """
    protect = list(protect)
    _check_utf8(out, "an output file")
    _check_file(out, force, protect)
    _remove_dead_parts(out, protect)
    signals.check()
    tmp = _new_sibling(out)
    try:
        yield tmp
        signals.check()  # once SIGTERM arrived, nothing is published
        _publish_file(tmp, out, force, protect)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
