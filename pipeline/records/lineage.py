"""Lineage: the columns that tie every output row to the exact bytes it came from (DESIGN §3.5).

Three different commitments, never substituted for one another:

* ``_raw_sha256``: SHA-256 of the line's exact bytes (``\\n`` excluded);
* ``_record_sha256``: SHA-256 of the record's RFC 8785 canonical JSON, as stored;
* ``_content_sha256``: a record kind's :class:`ContentFingerprint`, a length-prefixed,
  domain-separated encoding of its declared content fields (seed 002), with
  ``_content_profile`` naming the profile (its domain) that produced it.

``_sanitizer`` names the sanitizer version that examined what a row stores (seed 002: the
receipt binds the "sanitizer version"); null where sanitization did not run.

The two digests of what the *input* held, ``_raw_sha256`` and ``_content_sha256``, are
plain SHA-256 by default. With a campaign key (``[lineage] key_env`` or ``key_file``,
:class:`LineageDigest`) they are HMAC-SHA-256 under that key, so that a value sanitization
redacted cannot be recovered by hashing guesses (a phone number, a short token) against
the lineage of a stored row; the manifest records only the mode and a key id.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pyarrow as pa

from pipeline.core.config import CampaignConfig, ConfigError
from pipeline.core.errors import InputError
from pipeline.core.files import read_regular
from pipeline.core.reasons import REASONS_TYPE
from pipeline.records.canonical import canonical_json, canonical_json_fast

__all__ = [
    "LINEAGE_FIELDS",
    "PLAIN",
    "SHA256_HEX",
    "ContentFingerprint",
    "FileStamp",
    "LineageDigest",
    "LineageKeyError",
    "exact_path",
    "file_sha256",
    "path_hex",
    "raw_sha256",
    "record_sha256",
    "source_name",
]

#: Lineage columns, in output order, after the payload columns.
LINEAGE_FIELDS: Final = (
    pa.field("_source", pa.string(), nullable=False),
    pa.field("_line", pa.int64(), nullable=False),
    pa.field("_offset", pa.int64(), nullable=False),
    pa.field("_raw_sha256", pa.string(), nullable=False),
    pa.field("_record_sha256", pa.string()),
    pa.field("_content_sha256", pa.string()),
    pa.field("_content_profile", pa.string()),
    pa.field("_kind", pa.string()),
    pa.field("_schema_sha256", pa.string()),
    pa.field("_sanitizer", pa.string()),
    pa.field("_reasons", REASONS_TYPE, nullable=False),
)
LINEAGE_NAMES: Final = tuple(f.name for f in LINEAGE_FIELDS)
#: A lineage digest as rowgate writes it (``_record_sha256``, ``_content_sha256``...): a
#: SHA-256 in lower-case hex, as a regex over the whole value
SHA256_HEX: Final = r"^[0-9a-f]{64}$"


def raw_sha256(line: bytes) -> str:
    return hashlib.sha256(line).hexdigest()


def _hmac_sha256(key: bytes, data: bytes) -> str:
    return hmac.digest(key, data, "sha256").hex()


#: Prefix of the bytes a key id is the SHA-256 of (never the key: see :attr:`key_id`).
KEY_ID_DOMAIN: Final = b"rowgate:lineage-key-id:v1\x00"
#: Shortest key accepted, in bytes (after surrounding whitespace is removed): 32
#: characters, e.g. ``openssl rand -hex 16`` (128 bits), or 32 raw bytes.
MIN_KEY_BYTES: Final = 32


class LineageKeyError(ConfigError):
    """The campaign's lineage key cannot be read or is too short (never showing it)."""


@dataclass(frozen=True)
class LineageDigest:
    """How ``_raw_sha256`` and ``_content_sha256`` are computed for a run: SHA-256, or
    HMAC-SHA-256 under the campaign's key (``[lineage]``).

    The key is held here only: never in the config object, the manifest, a message or a
    ``repr``. Build one per process with :meth:`of` (workers read the key themselves).
    """

    key: bytes | None = field(default=None, repr=False)
    #: hex digest of one bytes value (bound once: the gate calls it for every line)
    hexdigest: Callable[[bytes], str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        digest = raw_sha256 if self.key is None else functools.partial(_hmac_sha256, self.key)
        object.__setattr__(self, "hexdigest", digest)

    @property
    def mode(self) -> str:
        """``sha256`` or ``hmac-sha256`` (the manifest's ``lineage.mode``)."""
        return "sha256" if self.key is None else "hmac-sha256"

    @property
    def key_id(self) -> str | None:
        """First 16 hex digits of SHA-256(:data:`KEY_ID_DOMAIN` + key): names the key in
        the manifest so ``rowgate verify`` can tell a wrong key from a changed file,
        without revealing it (the key has at least 128 bits; the domain keeps this
        digest from being any other use's hash of the key)."""
        if self.key is None:
            return None
        return hashlib.sha256(KEY_ID_DOMAIN + self.key).hexdigest()[:16]

    def hasher(self) -> Any:
        """A fresh incremental hasher (``update``/``hexdigest``) of the same digest, for a
        line too long to be held (:mod:`pipeline.gate.reader`)."""
        if self.key is None:
            return hashlib.sha256()
        return hmac.new(self.key, digestmod=hashlib.sha256)

    def describe(self) -> dict[str, str | None]:
        """The manifest's ``lineage`` record: mode and key id, never the key."""
        return {"mode": self.mode, "key_id": self.key_id}

    @classmethod
    def of(cls, config: CampaignConfig) -> LineageDigest:
        """The run's digest: keyed when ``[lineage]`` names a key (read now, from the
        environment variable or the file), plain otherwise."""
        settings = config.lineage
        if settings.key_env is not None:
            value = os.environ.get(settings.key_env)
            if not value:
                raise LineageKeyError(
                    f"lineage.key_env: the environment variable {settings.key_env} holding "
                    "the lineage key is not set (or empty)"
                )
            return cls(_checked_key(os.fsencode(value), f"${settings.key_env}"))
        if settings.key_file is not None:
            path = config.resolve_path(settings.key_file)
            what = f"lineage.key_file: cannot read the lineage key file {path}"
            data = read_regular(path, what, error=LineageKeyError)
            return cls(_checked_key(data, str(path)))
        return PLAIN


def _checked_key(data: bytes, where: str) -> bytes:
    key = data.strip()
    if len(key) < MIN_KEY_BYTES:
        raise LineageKeyError(
            f"the lineage key in {where} is {len(key)} bytes long; at least "
            f"{MIN_KEY_BYTES} are needed (e.g. the output of `openssl rand -hex 32`)"
        )
    return key


#: Plain SHA-256 lineage (no ``[lineage]`` key): what every run did before keys existed.
PLAIN: Final = LineageDigest()


def source_name(path: str) -> str:
    """An input path as lineage records it (``_source``, the manifest, reports): the path
    itself when it is valid UTF-8; otherwise each byte that is not UTF-8 is written as
    ``\\xNN`` (Python's ``backslashreplace``), because Parquet and JSON strings must be
    UTF-8. A run refuses two inputs whose names would then be equal, and its manifest keeps
    the exact bytes of such an input's resolved path (``resolved_hex``)."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def path_hex(path: str) -> str | None:
    """The exact bytes, in hex, of a path that is not UTF-8: the manifest keeps them
    beside the path's lineage form (:func:`source_name`), which names no file. None for
    a UTF-8 path, which its lineage form names exactly (a manifest then holds no hex)."""
    return None if source_name(path) == path else os.fsencode(path).hex()


def exact_path(lineage: str, exact: str | None) -> str:
    """The path a manifest records as ``lineage`` (its lineage form) and, when it is not
    UTF-8, as ``exact`` (:func:`path_hex`). Bytes whose lineage form is not ``lineage``
    are a :class:`ValueError` (a mangled manifest): they would name another file than
    the one the manifest names, and verify would re-hash that file instead."""
    if exact is None:
        return lineage
    path = os.fsdecode(bytes.fromhex(exact))
    if source_name(path) != lineage:
        raise ValueError(f"{exact!r} are not the bytes of {lineage!r}")
    return path


def file_sha256(path: str | Path) -> str:
    """SHA-256 hex of a file's bytes, read in 4 MiB chunks (inputs, outputs, tables).

    hashlib releases the GIL on large updates, so this can run beside other threads.
    """
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class FileStamp:
    """A file's identity and state (device, inode, size, modification and change times),
    taken before a command reads it: :meth:`check`, once every read is done, refuses the
    command when the bytes read cannot all be one file's. A command opens an input
    several times (its digest, each shard or slice, the rows written again), each by
    path. The change time is the kernel's: a writer that puts the modification time back
    (``touch -d``) moves it. What it cannot see: a rewrite of the same size within the
    file system's timestamp granularity (1-2 s on some network and FAT file systems;
    nanoseconds on ext4, XFS, btrfs, tmpfs), which only hashing the file again would."""

    path: str
    #: the file as the command's messages name it
    name: str
    device: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, path: str | Path, name: str | None = None, *, size: int | None = None) -> FileStamp:
        """The stamp of the file at ``path`` now; ``size``: the size the command planned
        by, when it read it before (a run cuts its shards at it)."""
        found = os.stat(path)
        return cls(
            str(path),
            str(path) if name is None else name,
            found.st_dev,
            found.st_ino,
            found.st_size if size is None else size,
            found.st_mtime_ns,
            found.st_ctime_ns,
        )

    def change(self) -> str | None:
        """How the file differs from this stamp now, in words; None if it does not."""
        try:
            now = FileStamp.of(self.path)
        except OSError as exc:
            return f"gone: {exc.strerror}"
        if (now.device, now.inode) != (self.device, self.inode):
            return "replaced by another file"
        if now.size != self.size:
            return f"{self.size:,} bytes when the command began, {now.size:,} at its end"
        if (now.mtime_ns, now.ctime_ns) != (self.mtime_ns, self.ctime_ns):
            return "modified"
        return None

    def check(self, reader: str) -> None:
        """Raise :class:`InputError` when the file changed while ``reader`` (the run,
        dedupe, the report) read it: its outputs would describe no one file."""
        change = self.change()
        if change is not None:
            raise InputError(
                f"{self.name}: changed while {reader} read it ({change}); nothing was "
                "written: run again once nothing writes to it"
            )


def check_pin(what: str, actual: str, pinned: str | None, error: type[Exception]) -> None:
    """Raise ``error`` when a file's SHA-256 is not the one the campaign pins (one message
    for schemas, rubrics, policies, the sanitize policy and reference tables)."""
    if pinned is not None and pinned != actual:
        raise error(f"{what} digest {actual} does not match the pinned {pinned}")


def record_sha256(record: Any, *, reference: bool = False) -> str:
    """SHA-256 hex of the canonical JSON of ``record``.

    ``reference=True`` always uses the defining implementation (the per-line reference
    path); otherwise orjson is used where it is provably byte-identical.
    """
    data = canonical_json(record) if reference else canonical_json_fast(record)
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class ContentFingerprint:
    """A domain-separated, length-prefixed SHA-256 over a tuple of strings (seed 002).

    Each field is UTF-8 encoded and preceded by its byte length as eight big-endian
    bytes, so ("ab", "c") and ("a", "bc") differ. Structured values enter as their
    canonical JSON text (:meth:`json_field`).
    """

    domain: bytes

    @functools.cached_property  # read for every accepted row; the dataclass has no slots
    def profile(self) -> str:
        """The profile's name: its domain without the terminating NUL, e.g.
        ``ARCV:pairwise-content:v1`` (the ``_content_profile`` column)."""
        return self.domain.rstrip(b"\x00").decode("ascii")

    def digest(self, fields: Iterable[str], key: bytes | None = None) -> str:
        """SHA-256 of the encoding; HMAC-SHA-256 under ``key`` when one is given."""
        # One buffer and one hash call: per-field update() calls cost twice as much on
        # 3 KB rows (profiled), and this runs for every accepted line.
        parts = [self.domain]
        for value in fields:
            if type(value) is not str:
                raise TypeError("content fields must be strings")
            encoded = value.encode("utf-8", errors="strict")
            parts.append(len(encoded).to_bytes(8, "big"))
            parts.append(encoded)
        if key is not None:
            return _hmac_sha256(key, b"".join(parts))
        return hashlib.sha256(b"".join(parts)).hexdigest()

    @staticmethod
    def json_field(value: Any) -> str:
        return canonical_json_fast(value).decode("utf-8")


#: The seed 002 reference profile, for a decisive single-user-turn pairwise comparison.
PAIRWISE_CONTENT_V1: Final = ContentFingerprint(b"ARCV:pairwise-content:v1\x00")
