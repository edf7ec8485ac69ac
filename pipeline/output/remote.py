"""Outputs on a filesystem pyarrow understands other than the local one: an object store
(``s3://bucket/prefix``, ``gs://…``, ``abfs://…``) or HDFS (``hdfs://…``), named by URI.

An object store cannot rename a prefix, so the atomic publish of
:mod:`pipeline.output.outdir` is not available there. A command whose OUT is such a URI
(:class:`RemoteOut`) works instead in a private local directory
(:func:`work_directory`), exactly as it would beside a local OUT, and publishes the
complete result by uploading it (:class:`RemoteClaim`):

- before any work, OUT's prefix must hold no object: rowgate never replaces or adds to an
  output on an object store, ``--force`` included (it could not do so atomically; a
  crash halfway would lose the old output with no new one). An empty probe object is
  written and deleted there (a missing bucket, credentials or permission fails now, not
  after the run), and an empty claim object is written and kept until the commit, so a
  second command finds the prefix taken;
- every file but the output's proof (``manifest.json``, ``summary.json`` or
  ``report.json``, which names the files the output holds) is uploaded first; the prefix
  is then listed, and only when it holds exactly those files at their sizes and the
  claim are the claim deleted and the proof written, last: the proof is the commit
  marker, and an output without one is refused by ``rowgate verify`` and by every later
  command that would write there;
- if an upload fails first, the uploads not started are cancelled and every object the
  command uploaded is deleted (best effort); if the listing shows another writer's
  objects, nothing is deleted (the same names may hold that writer's bytes now). Either
  way the command fails (exit 4): no OUT.

The bytes, the manifest included, are those a local OUT would hold: the work directory
is the run's OUT until the upload.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Final

from pipeline.core import signals
from pipeline.core.errors import EXIT_FAILED, EXIT_USAGE, RowgateError
from pipeline.output.outdir import PROOFS, OutputExistsError, meets_a_read_path, pid_alive

if TYPE_CHECKING:
    import pyarrow.fs as pafs

__all__ = [
    "WORK_DIR_ENV",
    "Out",
    "OutputURIError",
    "RemoteClaim",
    "RemoteOut",
    "RemotePublishError",
    "claim_remote",
    "download",
    "output_target",
    "private_directory",
    "sweep_leftovers",
    "work_directory",
]

#: where a command with an object-store OUT works before it uploads (default: the
#: system's temporary directory); on a Ray cluster, a path every node shares
WORK_DIR_ENV: Final = "ROWGATE_WORK_DIR"
#: files uploaded at once (an object store's latency, not its bandwidth, bounds one)
_UPLOADS: Final = 8
_COPY_BYTES: Final = 8 << 20
_SCHEME: Final = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


class OutputURIError(RowgateError, ValueError):
    """OUT's URI names no filesystem pyarrow can open, or one rowgate will not write."""

    exit_code: ClassVar[int] = EXIT_USAGE


class RemotePublishError(RowgateError, RuntimeError):
    """The upload could not be committed: OUT's prefix changed while it ran."""

    exit_code: ClassVar[int] = EXIT_FAILED


@dataclass(frozen=True)
class RemoteOut:
    """An OUT given as a URI other than ``file://``; resolved to a filesystem only when a
    command claims it (pyarrow loads then, not at the command line's start-up)."""

    uri: str

    def __str__(self) -> str:
        """The URI for messages: without credentials (``user:secret@``) or query."""
        from urllib.parse import urlsplit

        parts = urlsplit(self.uri)
        return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"

    def join(self, relative: str) -> str:
        """Where a file of the output is, for messages."""
        return f"{str(self).rstrip('/')}/{relative}"

    def resolve(self) -> tuple[pafs.FileSystem, str]:
        """The filesystem and the path of OUT's prefix in it: refused (exit 2) when
        it has an empty, ``.`` or ``..`` segment (a store may resolve them where the
        listing did not look) or names a bucket's root."""
        filesystem, path = _resolver(self.uri)
        segments = path.split("/")
        if any(s in ("", ".", "..") for s in segments):
            raise OutputURIError(f"{self}: a path with an empty, '.' or '..' segment")
        if len(segments) < 2:
            raise OutputURIError(f"{self}: names a bucket, not a prefix in it")
        return filesystem, path


#: where a command writes its output: a local directory, or a prefix on an object store
Out = Path | RemoteOut


def output_target(text: str) -> Out:
    """``--out`` as given: a local path, or a :class:`RemoteOut` for a URI (``file://``
    URIs are local paths, published atomically as any other)."""
    match = _SCHEME.match(text)
    if match is None:
        return Path(text)
    if match.group(1).lower() in ("file", "local"):  # pyarrow's local filesystem
        from urllib.parse import unquote, urlsplit

        parsed = urlsplit(text)
        if parsed.netloc not in ("", "localhost"):
            raise OutputURIError(f"{text}: a {parsed.scheme}:// URI names a path on this machine")
        if not parsed.path or parsed.query or parsed.fragment:
            raise OutputURIError(f"{text}: give a path, without '?' or '#'")
        return Path(unquote(parsed.path))
    return RemoteOut(text)


def _from_uri(uri: str) -> tuple[pafs.FileSystem, str]:
    import pyarrow as pa
    import pyarrow.fs as pafs

    try:
        filesystem, path = pafs.FileSystem.from_uri(uri)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError):
        shown = RemoteOut(uri)
        raise OutputURIError(f"{shown}: not a filesystem pyarrow can open") from None
    return filesystem, path.rstrip("/")


#: resolves a URI; tests put an in-memory object store here
_resolver: Callable[[str], tuple[pafs.FileSystem, str]] = _from_uri


def work_directory() -> Path:
    """Where a command with an object-store OUT works: ``$ROWGATE_WORK_DIR``, else the
    system's temporary directory."""
    return Path(os.environ.get(WORK_DIR_ENV) or tempfile.gettempdir())


def private_directory(purpose: str, protect: Iterable[Path] = (), *, sweep: bool = True) -> Path:
    """A new empty directory in the work directory, named for ``purpose``, this process
    and this host (``.rowgate-out-PID-HOST-…``); first, unless ``sweep`` is false,
    removes what this host's dead processes left (:func:`sweep_leftovers`)."""
    work = work_directory()
    work.mkdir(parents=True, exist_ok=True)
    if sweep:
        sweep_leftovers(purpose, protect)
    prefix, host = f".rowgate-{purpose}-", socket.gethostname()
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-{host}-", dir=work))


def sweep_leftovers(purpose: str, protect: Iterable[Path]) -> None:
    """Remove the ``purpose`` directories this host's dead processes left in the work
    directory (a killed command cannot remove its own), but never one that is, holds or
    lies inside a path in ``protect`` (what the command reads: an input a user took from
    a leftover was deleted with it). Another host's are never touched: the work
    directory may be shared, and its processes are not visible here."""
    work = work_directory()
    prefix, host = f".rowgate-{purpose}-", socket.gethostname()
    protect = list(protect)
    for entry in work.iterdir():
        if not entry.name.startswith(prefix) or not entry.is_dir() or entry.is_symlink():
            continue
        if meets_a_read_path(entry, protect):
            continue
        pid, _, rest = entry.name[len(prefix) :].partition("-")
        # mkdtemp's random suffix holds no "-": the host is everything before the last one
        if rest.rpartition("-")[0] != host or not pid.isdigit() or int(pid) == os.getpid():
            continue
        if not pid_alive(int(pid)):
            shutil.rmtree(entry, ignore_errors=True)


# --- claiming and publishing --------------------------------------------------------


def _objects(filesystem: pafs.FileSystem, root: str) -> dict[str, int]:
    """Every object under ``root``, by its path relative to it, with its size."""
    import pyarrow.fs as pafs

    info = filesystem.get_file_info(root)
    if info.type == pafs.FileType.File:
        return {"": info.size}
    selector = pafs.FileSelector(root, recursive=True, allow_not_found=True)
    return {
        info.path[len(root) + 1 :]: info.size
        for info in filesystem.get_file_info(selector)
        if info.type == pafs.FileType.File
    }


@dataclass(frozen=True)
class RemoteClaim:
    """An output prefix on an object store, checked empty and marked as this command's
    by ``marker``, an empty object under it (:func:`claim_remote`)."""

    out: RemoteOut
    filesystem: Any  # a pyarrow.fs.FileSystem (pickles; only the parent uses it)
    path: str
    marker: str
    #: what the command reads: the work directory's clean-up leaves it alone
    protect: tuple[Path, ...] = ()

    @contextmanager
    def staging(self) -> Iterator[Path]:
        """Yield an empty private work directory; when the block completes its files are
        uploaded to OUT, the proof last. It is removed in every case."""
        signals.check()
        tmp = private_directory("out", self.protect)
        try:
            yield tmp
            signals.check()  # once SIGTERM arrived, nothing is uploaded
            upload(tmp, self)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def claim_remote(
    out: RemoteOut, *, force: bool, protect: Iterable[Path] = ()
) -> Iterator[RemoteClaim]:
    """Check, before any work, that OUT's prefix holds no object (see the module
    docstring), then mark it as this command's for the whole command (``protect``: what
    it reads, which its work directory's clean-up never removes); raises
    :class:`~pipeline.output.outdir.OutputExistsError` if it holds one,
    :class:`OutputURIError` with ``force`` (nothing is replaced on an object store) and
    :class:`RemotePublishError` when the store refuses to write or delete there."""
    import pyarrow.fs as pafs

    filesystem, path = out.resolve()
    _refuse_existing(_objects(filesystem, path), out, force)
    marker = f"{path}/.rowgate-claim-{os.getpid()}-{socket.gethostname()}-{uuid.uuid4().hex}"
    _write_and_delete(filesystem, f"{marker}-probe", out)
    _write_empty(filesystem, marker, out)
    try:
        others = sorted(set(_objects(filesystem, path)) - {marker[len(path) + 1 :]})
        if others:  # another command claimed it at the same moment: neither goes on
            raise OutputExistsError(f"{out}: another command is writing there ({others[0]})")
        yield RemoteClaim(out, filesystem, path, marker, tuple(protect))
    finally:
        if filesystem.get_file_info(marker).type != pafs.FileType.NotFound:
            with suppress(OSError):
                filesystem.delete_file(marker)


def _refuse_existing(existing: dict[str, int], out: RemoteOut, force: bool) -> None:
    if not existing:
        return
    count = len(existing)
    what = "is an object" if "" in existing else f"holds {count:,} object{'s' * (count > 1)}"
    if force:
        raise OutputURIError(
            f"{out} {what}: rowgate does not replace an output on an object store, "
            "--force included (it cannot swap one atomically); delete it or choose "
            "another prefix"
        )
    raise OutputExistsError(
        f"{out} {what}; rowgate writes only to an empty prefix on an object store"
    )


def _write_empty(filesystem: pafs.FileSystem, key: str, out: RemoteOut) -> None:
    try:
        with filesystem.open_output_stream(key):
            pass
    except OSError as exc:
        raise RemotePublishError(f"cannot write under {out}: {exc}") from None


def _write_and_delete(filesystem: pafs.FileSystem, key: str, out: RemoteOut) -> None:
    """A missing bucket, credentials or permission (a failed upload must delete what it
    wrote) fails the command before any work, not after the run."""
    _write_empty(filesystem, key, out)
    try:
        filesystem.delete_file(key)
    except OSError as exc:
        raise RemotePublishError(
            f"cannot delete under {out} ({exc}): rowgate needs it to remove what a failed "
            f"upload wrote; delete {key.rpartition('/')[2]} there by hand"
        ) from None


def upload(tmp: Path, claim: RemoteClaim) -> None:
    """Upload every file under ``tmp`` to the claimed prefix, the proof last, once a
    listing shows exactly the uploaded files and the claim's marker; on failure delete
    every object uploaded, unless another writer's objects are there too (then the
    same names may be theirs: nothing is deleted but the marker)."""
    filesystem, root, out = claim.filesystem, claim.path, claim.out
    files = {p.relative_to(tmp).as_posix(): p for p in sorted(tmp.rglob("*")) if p.is_file()}
    proofs = [rel for rel in files if rel in PROOFS]
    if len(proofs) != 1:  # every command writes one: the commit marker
        raise RemotePublishError(f"cannot publish to {out}: the output's proofs are {proofs}")
    rest = [rel for rel in files if rel not in PROOFS]
    sent: list[str] = []

    def send(relative: str) -> None:
        sent.append(relative)  # before the first byte: a failure may leave part of it
        try:
            _copy(files[relative], filesystem, f"{root}/{relative}")
        except OSError as exc:
            raise RemotePublishError(
                f"uploading {out.join(relative)} failed ({exc}); nothing was published"
            ) from None

    try:
        _send_all(send, rest)
        expected = {rel: files[rel].stat().st_size for rel in rest}
        expected[claim.marker[len(root) + 1 :]] = 0
        found = _objects(filesystem, root)
        if found != expected:
            sent.clear()  # the same names may now be another writer's: delete none
            others = sorted(set(found) - set(expected)) or sorted(
                rel for rel in expected if found.get(rel) != expected[rel]
            )
            raise RemotePublishError(
                f"{out} changed while this command uploaded to it ({others[0]!r}: another "
                "writer is there); nothing was published, and nothing deleted"
            )
        filesystem.delete_file(claim.marker)
        send(proofs[0])
    except BaseException:
        for relative in sent:
            with suppress(OSError):
                filesystem.delete_file(f"{root}/{relative}")
        raise


def _send_all(send: Callable[[str], None], files: list[str]) -> None:
    """``send`` each file, :data:`_UPLOADS` at a time; after a failure none is started."""
    pool = ThreadPoolExecutor(_UPLOADS)
    try:
        for future in [pool.submit(send, relative) for relative in files]:
            future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _copy(source: Path, filesystem: pafs.FileSystem, destination: str) -> None:
    with source.open("rb") as src, filesystem.open_output_stream(destination) as dst:
        shutil.copyfileobj(src, dst, _COPY_BYTES)


def download(out: RemoteOut, into: Path) -> None:
    """Copy every object under OUT into the empty directory ``into`` (for ``rowgate
    verify``, which reads a local copy)."""
    filesystem, root = out.resolve()
    objects = _objects(filesystem, root)
    if not objects or "" in objects:
        raise OutputURIError(f"{out} holds no output (no object under the prefix)")
    for relative in sorted(objects):
        if any(part in ("", ".", "..") for part in relative.split("/")):
            raise OutputURIError(f"{out} holds an object named {relative!r}: not an output's")
        target = into / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        with filesystem.open_input_stream(f"{root}/{relative}") as src, target.open("wb") as dst:
            shutil.copyfileobj(src, dst, _COPY_BYTES)
