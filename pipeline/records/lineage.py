"""Lineage: the columns that tie every output row to the exact bytes it came from (DESIGN §3.5).

Three different commitments, never substituted for one another:

* ``_raw_sha256``: SHA-256 of the line's exact bytes (``\\n`` excluded);
* ``_record_sha256``: SHA-256 of the record's RFC 8785 canonical JSON, as stored;
* ``_content_sha256``: a record kind's :class:`ContentFingerprint`, a length-prefixed,
  domain-separated encoding of its declared content fields (seed 002), with
  ``_content_profile`` naming the profile (its domain) that produced it.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pyarrow as pa

from pipeline.core.reasons import REASONS_TYPE
from pipeline.records.canonical import canonical_json, canonical_json_fast

__all__ = [
    "LINEAGE_FIELDS",
    "ContentFingerprint",
    "file_sha256",
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
    pa.field("_reasons", REASONS_TYPE, nullable=False),
)
LINEAGE_NAMES: Final = tuple(f.name for f in LINEAGE_FIELDS)


def raw_sha256(line: bytes) -> str:
    return hashlib.sha256(line).hexdigest()


def source_name(path: str) -> str:
    """An input path as lineage records it (``_source``, the manifest, reports): the path
    itself when it is valid UTF-8; otherwise each byte that is not UTF-8 is written as
    ``\\xNN`` (Python's ``backslashreplace``), because Parquet and JSON strings must be
    UTF-8. A run refuses two inputs whose names would then be equal, and its manifest keeps
    the exact bytes of such an input's resolved path (``resolved_hex``)."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def file_sha256(path: str | Path) -> str:
    """SHA-256 hex of a file's bytes, read in 4 MiB chunks (inputs, outputs, tables).

    hashlib releases the GIL on large updates, so this can run beside other threads.
    """
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


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

    def digest(self, fields: Iterable[str]) -> str:
        # One buffer and one hash call: per-field update() calls cost twice as much on
        # 3 KB rows (profiled), and this runs for every accepted line.
        parts = [self.domain]
        for value in fields:
            if type(value) is not str:
                raise TypeError("content fields must be strings")
            encoded = value.encode("utf-8", errors="strict")
            parts.append(len(encoded).to_bytes(8, "big"))
            parts.append(encoded)
        return hashlib.sha256(b"".join(parts)).hexdigest()

    @staticmethod
    def json_field(value: Any) -> str:
        return canonical_json_fast(value).decode("utf-8")


#: The seed 002 reference profile, for a decisive single-user-turn pairwise comparison.
PAIRWISE_CONTENT_V1: Final = ContentFingerprint(b"ARCV:pairwise-content:v1\x00")
