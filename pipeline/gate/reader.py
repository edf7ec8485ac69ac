"""Reading inputs: files → shards → bounded batches of lines with their byte offsets.

A line is the bytes between two ``\\n`` (the ``\\n`` excluded); a final line without
``\\n`` is still a line; a file ending in ``\\n`` has no empty last line (DESIGN §3.1).
Plain files are cut into byte-range shards on line boundaries. A compressed file (gzip,
zstd, recognised by its magic bytes) cannot be entered in the middle: when a run gives a
spill directory, its decompressed stream is cut on line boundaries into plain spill
files, one per shard, so that several workers gate it (otherwise it is one shard).
Offsets are positions in the decompressed stream either way. Memory stays bounded
whatever the line length: a line longer than the limit is streamed through SHA-256 and
never held whole. It stays bounded whatever the stream too: every read of a compressed
input decompresses at most :data:`CHUNK_BYTES`, and a stream may produce at most
:meth:`InputFile.max_stream_bytes` bytes in all (``limits.max_decompressed_bytes`` and
``limits.max_expansion_ratio``), so a decompression bomb is an :class:`InputError`, not
an exhausted machine or disk.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import sys
import typing
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

from pipeline.core.errors import InputError
from pipeline.core.limits import BATCH_BYTES, MAX_DECOMPRESSED_BYTES, MAX_EXPANSION_RATIO

if sys.version_info >= (3, 14):
    from compression import zstd
else:  # the standard library's API, backported
    from backports import zstd

__all__ = [
    "JSONL_SUFFIXES",
    "DecompressionLimitError",
    "InputError",
    "InputFile",
    "LineBatch",
    "Shard",
    "detect_compression",
    "fetch_lines",
    "iter_shards",
    "jsonl_named",
    "open_stream",
    "plan_shards",
    "read_batches",
    "refuse_same_files",
]

CHUNK_BYTES: Final = 4 << 20
#: A stream is never refused for its ratio before it has produced this much: a small file
#: of repetitive lines may compress far beyond any real export, harmlessly.
RATIO_EXEMPT_BYTES: Final = 64 << 20
#: magic bytes of the formats rowgate reads, and of those it names and refuses (gzip's
#: third byte is its only method, deflate: ``1f 8b`` alone also starts garbage)
_MAGICS: Final = (
    (b"\x1f\x8b\x08", "gzip"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"PK\x03\x04", "zip"),
    (b"\x04\x22\x4d\x18", "lz4"),
    (b"7z\xbc\xaf\x27\x1c", "7z"),
)
#: after ``BZh`` and the block size digit: a block's magic (pi), or the end of an empty stream
_BZIP2_BLOCKS: Final = (b"\x31\x41\x59\x26\x53\x59", b"\x17\x72\x45\x38\x50\x90")
_SNIFF_BYTES: Final = 16
#: the formats refused, with the command that decompresses each
_UNREAD_FORMATS: Final = {
    "bzip2": "bunzip2 -k",
    "xz": "unxz -k",
    "zip": "unzip",
    "lz4": "unlz4",
    "7z": "7z x",
}
_SUFFIXES: Final = (
    (".gz", "gzip"),
    (".zst", "zstd"),
    (".zstd", "zstd"),
    (".bz2", "bzip2"),
    (".xz", "xz"),
    (".zip", "zip"),
    (".lz4", "lz4"),
)
#: File names read as JSONL when a directory is given as an input.
JSONL_SUFFIXES: Final = (
    ".jsonl",
    ".jsonl.gz",
    ".jsonl.zst",
    ".ndjson",
    ".ndjson.gz",
    ".ndjson.zst",
)


def jsonl_named(name: str) -> bool:
    """Whether a directory's entry ``name`` is a JSONL export's, whatever its case and
    its compression suffix (``a.JSONL``, ``b.jsonl.bz2``): taken as an input, it is read,
    or refused for a format rowgate does not read (:func:`detect_compression`), never
    left out without a word (a directory of ``.jsonl.bz2`` files gated none of them and
    said nothing)."""
    lower = name.lower()
    return any(
        lower.endswith(stem + suffix)
        for stem in (".jsonl", ".ndjson")
        for suffix in ("", *(s for s, _ in _SUFFIXES))
    )


@dataclass(frozen=True)
class InputFile:
    """One input of a run. ``index`` is its place in the stable order key."""

    index: int
    path: str  # as given by the user, in its lineage form: the ``_source`` column
    resolved: str
    size: int
    compression: str  # "none", "gzip" or "zstd"
    kind: str | None = None
    split: str | None = None
    #: Bounds of a compressed input's decompressed stream (:meth:`max_stream_bytes`).
    max_decompressed_bytes: int = MAX_DECOMPRESSED_BYTES
    max_expansion_ratio: int = MAX_EXPANSION_RATIO

    def max_stream_bytes(self) -> tuple[int, str]:
        """The most bytes this input's decompressed stream may hold, and the setting that
        says so: ``limits.max_decompressed_bytes``, or ``limits.max_expansion_ratio``
        times the file's size (not below :data:`RATIO_EXEMPT_BYTES`), whichever is lower."""
        by_ratio = max(RATIO_EXEMPT_BYTES, self.max_expansion_ratio * self.size)
        if by_ratio < self.max_decompressed_bytes:
            return by_ratio, "max_expansion_ratio"
        return self.max_decompressed_bytes, "max_decompressed_bytes"

    @property
    def expected_bytes(self) -> int:
        """Bytes of lines the input holds: its size, but for a compressed stream, whose
        decompressed size is unknown until read, 4× the file (a typical JSONL ratio)."""
        return self.size if self.compression == "none" else 4 * self.size


@dataclass(frozen=True)
class Shard:
    """Bytes ``[start, end)`` of one input (``end=None``: to the end of the stream).

    ``spill`` names a plain file holding exactly those bytes of a compressed input's
    decompressed stream (:func:`plan_shards`); it is read instead of the input.
    """

    index: int
    input: InputFile
    start: int = 0
    end: int | None = None
    spill: str | None = None

    @property
    def expected_bytes(self) -> int:
        """Bytes of lines the shard holds: exact, but for a whole compressed stream
        (:attr:`InputFile.expected_bytes`). For giving the largest shards to workers first."""
        if self.end is None:
            return self.input.expected_bytes - self.start
        return self.end - self.start


@dataclass
class LineBatch:
    """Consecutive lines of a shard. ``first_line`` is the 1-based shard line number of
    ``lines[0]``. Lines over the byte limit appear as ``b""`` with their true length and
    SHA-256 in ``oversized``."""

    first_line: int
    offsets: list[int] = field(default_factory=list)
    lines: list[bytes] = field(default_factory=list)
    oversized: dict[int, tuple[int, str]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.lines)

    def add_oversized(self, offset: int, length: int, sha256: str) -> None:
        self.oversized[len(self.lines)] = (length, sha256)
        self.offsets.append(offset)
        self.lines.append(b"")


def refuse_same_files(paths: typing.Iterable[tuple[str, str | Path]]) -> None:
    """An :class:`InputError` when two inputs (``(name as given, path)``) are one file.

    Names that differ can still be one file (``a.jsonl`` and ``./a.jsonl``, a symbolic
    link, a hard link, a directory and a file in it): read twice, each of its lines would
    end in two output rows. Files are compared by device and inode, as the system does.
    """
    seen: dict[tuple[int, int], str] = {}
    for given, path in paths:
        stat = Path(path).stat()
        identity = (stat.st_dev, stat.st_ino)
        if identity in seen:
            raise InputError(
                f"{given}: is the same file as {seen[identity]} (given twice, by another "
                "name or a link); give each file once"
            )
        seen[identity] = given


def detect_compression(path: str | Path) -> str:
    """``"gzip"``, ``"zstd"`` or ``"none"``, by the file's magic bytes whatever its name.

    Any other compressed format (bzip2, xz, zip, lz4, 7z) is an :class:`InputError` naming
    it: read as text, every line would be rejected as invalid UTF-8 and the run would
    succeed. A suffix that promises compression the bytes do not have is an error too. The
    magics cannot start a JSONL file (gzip's and zstd's are not UTF-8 text; the others
    are followed by bytes no JSON line holds), so a plain export is never misread.
    """
    name = str(path)
    try:
        with open(path, "rb") as fh:
            head = fh.read(_SNIFF_BYTES)
    except OSError as exc:  # unreadable (permissions): the input's error, exit 3
        raise InputError(f"{name}: cannot read: {exc.strerror}") from None
    found = _sniff(head)
    encoding = _wide_encoding(head)
    if encoding is not None:
        raise InputError(
            f"{name}: {encoding} text; rowgate reads UTF-8 JSONL: re-encode it first "
            f"(iconv -f {encoding} -t UTF-8)"
        )
    if found in _UNREAD_FORMATS:
        raise InputError(
            f"{name}: {found}-compressed; rowgate reads plain, gzip and zstd JSONL: "
            f"decompress it first ({_UNREAD_FORMATS[found]}) or recompress it with zstd"
        )
    if found != "none":
        return found
    claimed = next((c for suffix, c in _SUFFIXES if name.endswith(suffix)), "none")
    if claimed != "none":
        raise InputError(f"{name}: named as {claimed} but is not {claimed}-compressed")
    return "none"


def _wide_encoding(head: bytes) -> str | None:
    """``"UTF-32"`` or ``"UTF-16"`` when a file's first bytes are such text: a byte-order
    mark, or ASCII text whose every character is one byte and three NULs (UTF-32) or one
    byte and a NUL (UTF-16); a JSON line opens with ``{``, never a NUL. Read as UTF-8,
    every line was rejected (``json.syntax``: NULs are valid UTF-8) and the run succeeded;
    refused instead, as a compressed format rowgate does not read is. UTF-32 is looked for
    first: its little-endian mark begins with UTF-16's, and a UTF-32 export was called
    UTF-16, whose ``iconv`` then garbled it."""
    if head[:4] in (b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff"):
        return "UTF-32"
    if head[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return "UTF-16"
    # whole characters only: a file shorter than the sniff (`{}` and a newline in UTF-32
    # is 12 bytes) is judged by what it holds, two characters at least
    wide = len(head) - len(head) % 4
    if wide >= 8 and any(_one_byte_in(head[:wide], 4, at) for at in (0, 3)):
        return "UTF-32"
    if len(head) >= 8 and any(_one_byte_in(head[:8], 2, at) for at in (0, 1)):
        return "UTF-16"
    return None


def _one_byte_in(head: bytes, width: int, at: int) -> bool:
    """Whether every ``width``-byte unit of ``head`` holds a byte at ``at`` and NULs elsewhere."""
    units = [head[i : i + width] for i in range(0, len(head), width)]
    return all(u[at] and not any(u[:at] + u[at + 1 :]) for u in units)


def _sniff(head: bytes) -> str:
    for magic, found in _MAGICS:
        if head.startswith(magic):
            return found
    if head[:3] == b"BZh" and head[3:4].isdigit() and head[4:10] in _BZIP2_BLOCKS:
        return "bzip2"
    # a zstd skippable frame (magic 0x184D2A50..5F, little-endian) may open a zstd stream
    # (metadata some writers put first); its first byte, "P".."_", cannot start a JSON line
    if len(head) >= 4 and 0x50 <= head[0] <= 0x5F and head[1:4] == b"\x2a\x4d\x18":
        return "zstd"
    return "none"


class DecompressionLimitError(InputError):
    """A compressed input decompresses to more than its bound (a decompression bomb)."""


class _BoundedStream(io.RawIOBase):
    """A compressed input's decompressed bytes, at most :data:`CHUNK_BYTES` per read and
    :meth:`InputFile.max_stream_bytes` in all (one byte more raises
    :class:`DecompressionLimitError`).

    The per-read bound is the decompressor's own (``max_length``: gzip's and zstd's
    ``read(n)`` return at most ``n`` bytes), so memory holds one read whatever the
    ratio: a whole compressed chunk was decompressed at once before (a 2 GB zstd bomb of
    62 KB took 2.25 GB). Both decompressors read on across members or frames and raise
    ``EOFError`` for a stream that ends inside one.
    """

    def __init__(self, input_file: InputFile) -> None:
        self._input = input_file
        self._limit, self._setting = input_file.max_stream_bytes()
        self._produced = 0
        self._inner: io.BufferedIOBase
        if input_file.compression == "gzip":
            self._inner = gzip.GzipFile(input_file.resolved, "rb")
        else:
            self._inner = zstd.ZstdFile(input_file.resolved, "rb")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: typing.Any) -> int:
        # one byte past the bound, so that reaching it exactly is not an error
        size = min(len(buffer), CHUNK_BYTES, self._limit - self._produced + 1)
        n = self._inner.readinto(memoryview(buffer)[:size])
        self._produced += n
        if self._produced > self._limit:
            raise self._refusal()
        return n

    def _refusal(self) -> DecompressionLimitError:
        source = self._input
        setting = f"limits.{self._setting}"
        if self._setting == "max_expansion_ratio":
            why = (
                f"over {source.max_expansion_ratio}x its {source.size:,} compressed bytes "
                f"({setting} = {source.max_expansion_ratio})"
            )
        else:
            why = f"{setting} = {self._limit:,}"
        return DecompressionLimitError(
            f"{source.path}: the {source.compression} stream decompresses to more than "
            f"{self._limit:,} bytes, {why}: refused as a possible decompression bomb; "
            f"if the input is trusted, raise {setting} in the campaign config's [limits]"
        )

    def close(self) -> None:
        self._inner.close()
        super().close()


def open_stream(input_file: InputFile) -> IO[bytes]:
    """The decompressed byte stream of an input (bounded: :class:`_BoundedStream`)."""
    if input_file.compression == "none":
        return open(input_file.resolved, "rb")
    return io.BufferedReader(_BoundedStream(input_file), buffer_size=CHUNK_BYTES)


def _next_boundary(fh: IO[bytes], target: int, size: int) -> int:
    """The first position >= target that starts a line (or ``size``)."""
    if target >= size:
        return size
    fh.seek(target - 1)
    position = target - 1
    while True:
        window = fh.read(1 << 16)
        if not window:
            return size
        found = window.find(b"\n")
        if found >= 0:
            return position + found + 1
        position += len(window)


def plain_shard_count(input_file: InputFile, shard_bytes: int) -> int:
    """How many shards :func:`plan_shards` cuts an uncompressed input into."""
    return -(-input_file.size // shard_bytes)


def plan_shards(
    inputs: list[InputFile], shard_bytes: int, spill_dir: Path | None = None
) -> list[Shard]:
    """Every shard of the inputs (:func:`iter_shards`), once all are cut."""
    return list(iter_shards(inputs, shard_bytes, spill_dir))


def iter_shards(
    inputs: list[InputFile], shard_bytes: int, spill_dir: Path | None = None
) -> Iterator[Shard]:
    """Cut inputs into shards, yielding each as soon as it is cut. The shards depend only
    on file contents, ``shard_bytes`` and whether there is a ``spill_dir``.

    With ``spill_dir``, a compressed input is decompressed once, here, into spill files of
    about ``shard_bytes`` each (:func:`_spill`; a corrupt stream raises
    :class:`InputError`), each yielded when written, so that workers gate the first
    pieces while the rest of the stream is decompressed; without, it is one shard, read
    by one worker.

    A plain file is cut into the fewest shards of at most about ``shard_bytes``, all of
    about the same size: 500 MB at 64 MiB is 8 shards of 62.5 MB, not 7 full ones and a
    small eighth. Workers then finish together: a small last shard left one of two
    cores idle for half a shard's time at the end of the gate and of the write phase.
    """
    index = 0
    for input_file in inputs:
        if input_file.compression != "none":
            if spill_dir is None:
                yield Shard(index, input_file)
                index += 1
            else:
                for shard in _spill(input_file, shard_bytes, spill_dir, index):
                    yield shard
                    index += 1
            continue
        count = plain_shard_count(input_file, shard_bytes)
        start = 0
        with open(input_file.resolved, "rb") as fh:
            for i in range(1, count + 1):
                # cut near i/count of the file (not a step after the last cut: no drift);
                # a long line may already have carried the last cut past this target
                target = input_file.size * i // count
                if target <= start:
                    continue
                end = _next_boundary(fh, target, input_file.size)
                yield Shard(index, input_file, start, end)
                index += 1
                start = end


def _spill(
    input_file: InputFile, shard_bytes: int, directory: Path, first_index: int
) -> Iterator[Shard]:
    """Shards of a compressed input: its decompressed stream cut at the first line start
    at or after every ``shard_bytes`` since the last cut, each piece copied (in chunks:
    memory stays bounded) to a plain file in ``directory`` and yielded once complete.
    Workers, and the writer's re-reads of late rejections, then seek in plain files
    instead of decompressing.
    """
    directory.mkdir(parents=True, exist_ok=True)
    pieces = 0
    start = position = 0  # the open piece's first byte; the stream bytes copied so far
    out: IO[bytes] | None = None
    try:
        with _decoding(input_file), open_stream(input_file) as stream:
            while chunk := stream.read(CHUNK_BYTES):
                base, at = position, 0  # stream position of chunk[0]; next byte to copy
                while at < len(chunk):
                    if out is None:
                        name = f"{input_file.index:05d}-{pieces:05d}.jsonl"
                        out = open(directory / name, "wb")  # noqa: SIM115 - closed below
                    # the piece ends after the first "\n" at or after start + shard_bytes - 1
                    cut = chunk.find(b"\n", max(at, start + shard_bytes - 1 - base))
                    stop = len(chunk) if cut < 0 else cut + 1
                    out.write(memoryview(chunk)[at:stop])
                    position, at = base + stop, stop
                    if cut >= 0:
                        out.close()
                        yield Shard(first_index + pieces, input_file, start, position, out.name)
                        out, start, pieces = None, position, pieces + 1
            if out is not None:
                out.close()
                yield Shard(first_index + pieces, input_file, start, position, out.name)
                out = None
    finally:
        if out is not None:
            out.close()


def read_batches(
    shard: Shard,
    max_line_bytes: int,
    batch_lines: int,
    batch_bytes: int = BATCH_BYTES,
    line_hasher: Callable[[], Any] = hashlib.sha256,
) -> Iterator[LineBatch]:
    """Yield the shard's lines in batches of at most ``batch_lines`` lines, each ending
    once it holds ``batch_bytes`` bytes of lines (so at most that plus one line).

    A line over ``max_line_bytes`` is not held: its length and digest are, the digest
    computed as it streams by with ``line_hasher`` (the run's ``_raw_sha256``:
    :meth:`pipeline.records.lineage.LineageDigest.hasher`).

    A corrupt compressed stream raises :class:`InputError`: an operational failure of the
    run, not a row rejection.
    """
    batch = LineBatch(first_line=1)
    held = 0  # bytes of the lines the batch holds (an over-long line is not held)
    for offset, line, oversized in _lines(shard, max_line_bytes, line_hasher):
        if len(batch) >= batch_lines or held >= batch_bytes:
            yield batch
            batch, held = LineBatch(first_line=batch.first_line + len(batch)), 0
        if oversized is None:
            batch.offsets.append(offset)
            batch.lines.append(line)
            held += len(line)
        else:
            batch.add_oversized(offset, *oversized)
    if batch.lines:
        yield batch


#: One line: its offset, its bytes (``b""`` when over the limit), and for a line over
#: the limit its (length, SHA-256).
_Line = tuple[int, bytes, tuple[int, str] | None]


def _lines(shard: Shard, max_line_bytes: int, hasher: Callable[[], Any]) -> Iterator[_Line]:
    """The shard's lines, read from its spill file or its input's stream."""
    if shard.spill is not None:
        assert shard.end is not None
        with open(shard.spill, "rb") as spilled:
            yield from _split_lines(
                spilled, shard.start, shard.end - shard.start, max_line_bytes, hasher
            )
        return
    with _decoding(shard.input), open_stream(shard.input) as stream:
        if shard.start:
            stream.seek(shard.start)
        remaining = None if shard.end is None else shard.end - shard.start
        yield from _split_lines(stream, shard.start, remaining, max_line_bytes, hasher)


@contextlib.contextmanager
def _decoding(input_file: InputFile) -> Iterator[None]:
    """Report a corrupt compressed stream (bad data, a truncated member or frame) as an
    :class:`InputError` naming the input."""
    try:
        yield
    except (EOFError, zlib.error, zstd.ZstdError, gzip.BadGzipFile) as exc:
        raise InputError(
            f"{input_file.path}: corrupt {input_file.compression} stream ({exc})"
        ) from None


def _split_lines(
    stream: IO[bytes],
    position: int,
    remaining: int | None,
    max_line_bytes: int,
    new_hasher: Callable[[], Any],
) -> Iterator[_Line]:
    pending = b""
    # While inside an over-long line: (hasher, bytes so far, its start offset).
    streaming: tuple[Any, int, int] | None = None

    while True:
        size = CHUNK_BYTES if remaining is None else min(CHUNK_BYTES, remaining)
        chunk = stream.read(size) if size else b""
        if not chunk:
            break
        if remaining is not None:
            remaining -= len(chunk)
        if streaming is not None:
            hasher, length, start = streaming
            cut = chunk.find(b"\n")
            if cut < 0:
                hasher.update(chunk)
                streaming = (hasher, length + len(chunk), start)
                continue
            hasher.update(chunk[:cut])
            length += cut
            yield start, b"", (length, hasher.hexdigest())
            position = start + length + 1
            chunk = chunk[cut + 1 :]
            streaming = None
        data = pending + chunk if pending else chunk
        parts = data.split(b"\n")
        pending = parts.pop()
        for line in parts:
            if len(line) > max_line_bytes:
                whole = new_hasher()
                whole.update(line)
                yield position, b"", (len(line), whole.hexdigest())
            else:
                yield position, line, None
            position += len(line) + 1
        if len(pending) > max_line_bytes:
            streaming = (new_hasher(), len(pending), position)
            streaming[0].update(pending)
            pending = b""
    if streaming is not None:
        hasher, length, start = streaming
        yield start, b"", (length, hasher.hexdigest())
    elif pending:
        yield position, pending, None


def fetch_lines(shard: Shard, offsets: list[int], max_line_bytes: int) -> dict[int, bytes | None]:
    """The lines of ``shard`` starting at ``offsets`` (``None`` for a line over the limit).

    Plain files and spill files seek; a whole compressed stream is read through once.
    """
    wanted = set(offsets)
    found: dict[int, bytes | None] = {}
    input_file = shard.input
    if input_file.compression == "none" or shard.spill is not None:
        path, base = (shard.spill, shard.start) if shard.spill else (input_file.resolved, 0)
        with open(path, "rb") as fh:
            for offset in sorted(wanted):
                fh.seek(offset - base)
                line = fh.readline(max_line_bytes + 1)
                if line.endswith(b"\n"):
                    line = line[:-1]
                found[offset] = None if len(line) > max_line_bytes else line
        return found
    for batch in read_batches(Shard(0, input_file), max_line_bytes, 1 << 16):
        for i, offset in enumerate(batch.offsets):
            if offset in wanted:
                found[offset] = None if i in batch.oversized else batch.lines[i]
        if len(found) == len(wanted):
            break
    return found
