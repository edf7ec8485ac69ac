"""Outputs on a filesystem pyarrow understands other than the local one: an object store
(``s3://bucket/prefix``, ``gs://…``, ``abfs://…``) or HDFS (``hdfs://…``), named by URI.

An object store cannot rename a prefix, so the atomic publish of
:mod:`pipeline.output.outdir` is not available there. A command whose OUT is such a URI
(:class:`RemoteOut`) works instead in a private local directory
(:func:`work_directory`), exactly as it would beside a local OUT, and publishes the
complete result by uploading it (:class:`RemoteClaim`):

- before any work, OUT's prefix must hold no object: rowgate never replaces or adds to an
  output on an object store, ``--force`` included (it could not do so atomically; a
  crash halfway would lose the old output with no new one in its place);
- every file but the output's proof (``manifest.json``, ``summary.json`` or
  ``report.json``, which names the files the output holds) is uploaded first; the prefix
  is then listed, and only when it holds exactly those files at their sizes is the proof
  written, last: the proof is the commit marker, and an output without one is refused by
  ``rowgate verify`` and by every later command that would replace it;
- if anything fails before the proof is written, every object the command uploaded is
  deleted (best effort) and the command fails (exit 4): no OUT.

Object stores offer no lock, so two commands publishing to the same prefix at once are
not kept apart as the local lock keeps them; the listing before the proof catches one
that wrote files of its own, and then neither commits. The bytes, the manifest included,
are those a local OUT would hold: the work directory is the run's OUT until the upload.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Final

from pipeline.core.errors import EXIT_FAILED, EXIT_USAGE, RowgateError
from pipeline.output.outdir import PROOFS, OutputExistsError, pid_alive

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
        return self.uri

    def join(self, relative: str) -> str:
        """Where a file of the output is, for messages (without the URI's query)."""
        return f"{self.uri.partition('?')[0].rstrip('/')}/{relative}"

    def resolve(self) -> tuple[pafs.FileSystem, str]:
        """The filesystem and the path of OUT's prefix in it."""
        return _resolver(self.uri)


#: where a command writes its output: a local directory, or a prefix on an object store
Out = Path | RemoteOut


def output_target(text: str) -> Out:
    """``--out`` as given: a local path, or a :class:`RemoteOut` for a URI (``file://``
    URIs are local paths, published atomically as any other)."""
    match = _SCHEME.match(text)
    if match is None:
        return Path(text)
    if match.group(1).lower() == "file":
        from urllib.parse import unquote, urlparse

        parsed = urlparse(text)
        if parsed.netloc not in ("", "localhost"):
            raise OutputURIError(f"{text}: a file:// URI names a path on this machine")
        return Path(unquote(parsed.path))
    return RemoteOut(text)


def _from_uri(uri: str) -> tuple[pafs.FileSystem, str]:
    import pyarrow as pa
    import pyarrow.fs as pafs

    try:
        filesystem, path = pafs.FileSystem.from_uri(uri)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as exc:
        raise OutputURIError(f"{uri}: not a filesystem pyarrow can open ({exc})") from None
    path = path.rstrip("/")
    if not path:
        raise OutputURIError(f"{uri}: names no bucket or path to write into")
    return filesystem, path


#: resolves a URI; tests put an in-memory object store here
_resolver: Callable[[str], tuple[pafs.FileSystem, str]] = _from_uri


def work_directory() -> Path:
    """Where a command with an object-store OUT works: ``$ROWGATE_WORK_DIR``, else the
    system's temporary directory."""
    return Path(os.environ.get(WORK_DIR_ENV) or tempfile.gettempdir())


def private_directory(purpose: str) -> Path:
    """A new empty directory in the work directory, named for ``purpose``, this process
    and this host (``.rowgate-out-PID-HOST-…``); first removes the ones this host's dead
    processes left (a killed command cannot remove its own). Another host's are never
    touched: the work directory may be shared, and its processes are not visible here."""
    work = work_directory()
    work.mkdir(parents=True, exist_ok=True)
    prefix, host = f".rowgate-{purpose}-", socket.gethostname()
    for entry in work.iterdir():
        if not entry.name.startswith(prefix) or not entry.is_dir() or entry.is_symlink():
            continue
        pid, _, rest = entry.name[len(prefix) :].partition("-")
        # mkdtemp's random suffix holds no "-": the host is everything before the last one
        if rest.rpartition("-")[0] != host or not pid.isdigit() or int(pid) == os.getpid():
            continue
        if not pid_alive(int(pid)):
            shutil.rmtree(entry, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-{host}-", dir=work))


# --- claiming and publishing --------------------------------------------------------


def _objects(filesystem: pafs.FileSystem, root: str) -> dict[str, int]:
    """Every object under ``root``, by its path relative to it, with its size."""
    import pyarrow.fs as pafs

    if filesystem.get_file_info(root).type == pafs.FileType.File:
        return {"": filesystem.get_file_info(root).size}
    selector = pafs.FileSelector(root, recursive=True, allow_not_found=True)
    return {
        info.path[len(root) + 1 :]: info.size
        for info in filesystem.get_file_info(selector)
        if info.type == pafs.FileType.File
    }


@dataclass(frozen=True)
class RemoteClaim:
    """An output prefix on an object store, checked empty (:func:`claim_remote`)."""

    out: RemoteOut
    filesystem: Any  # a pyarrow.fs.FileSystem (pickles; only the parent uses it)
    path: str
    force: bool

    @contextmanager
    def staging(self) -> Iterator[Path]:
        """Yield an empty private work directory; when the block completes its files are
        uploaded to OUT, the proof last. It is removed in every case."""
        tmp = private_directory("out")
        try:
            yield tmp
            upload(tmp, self.filesystem, self.path, self.out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def claim_remote(out: RemoteOut, *, force: bool) -> Iterator[RemoteClaim]:
    """Check, before any work, that OUT's prefix holds no object (see the module
    docstring); raises :class:`~pipeline.output.outdir.OutputExistsError` if it does, and
    :class:`OutputURIError` with ``force`` (nothing is replaced on an object store)."""
    filesystem, path = out.resolve()
    existing = _objects(filesystem, path)
    if existing:
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
    _probe(filesystem, path, out)
    yield RemoteClaim(out, filesystem, path, force)


def _probe(filesystem: pafs.FileSystem, root: str, out: RemoteOut) -> None:
    """Write and delete one empty object under OUT, before any work: a missing bucket,
    missing credentials or a missing permission (a failed upload must delete what it
    wrote) fails the command now, not after the run."""
    probe = f"{root}/.rowgate-probe-{os.getpid()}-{socket.gethostname()}"
    try:
        with filesystem.open_output_stream(probe):
            pass
    except OSError as exc:
        raise RemotePublishError(f"cannot write under {out}: {exc}") from None
    try:
        filesystem.delete_file(probe)
    except OSError as exc:
        raise RemotePublishError(
            f"cannot delete under {out} ({exc}): rowgate needs it to remove what a failed "
            f"upload wrote; delete {probe} by hand"
        ) from None


def upload(tmp: Path, filesystem: pafs.FileSystem, root: str, out: RemoteOut) -> None:
    """Upload every file under ``tmp`` to ``root``, the proof last, once a listing shows
    exactly the uploaded files; on failure delete every object uploaded."""
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
        with ThreadPoolExecutor(_UPLOADS) as pool:
            list(pool.map(send, rest))
        expected = {rel: files[rel].stat().st_size for rel in rest}
        found = _objects(filesystem, root)
        if found != expected:
            others = sorted(set(found) - set(expected)) or sorted(
                rel for rel in expected if found.get(rel) != expected[rel]
            )
            raise RemotePublishError(
                f"{out} changed while this command uploaded to it ({others[0]!r}: another "
                "command may be writing there); nothing was published"
            )
        send(proofs[0])
    except BaseException:
        for relative in sent:
            with suppress(OSError):
                filesystem.delete_file(f"{root}/{relative}")
        raise


def _copy(source: Path, filesystem: pafs.FileSystem, destination: str) -> None:
    with source.open("rb") as src, filesystem.open_output_stream(destination) as dst:
        while block := src.read(_COPY_BYTES):
            dst.write(block)


def download(out: RemoteOut, into: Path) -> None:
    """Copy every object under OUT into the empty directory ``into`` (for ``rowgate
    verify``, which reads a local copy)."""
    filesystem, root = out.resolve()
    objects = _objects(filesystem, root)
    if not objects or "" in objects:
        raise OutputURIError(f"{out} holds no output (no object under the prefix)")
    for relative in sorted(objects):
        target = into / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        with filesystem.open_input_stream(f"{root}/{relative}") as src, target.open("wb") as dst:
            while block := src.read(_COPY_BYTES):
                dst.write(block)
