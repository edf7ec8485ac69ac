"""Row-local dedupe keys, computed where the rows are: each row's normalised key digest
and the MinHash signature of its key text, per gate batch, in the gate's worker
processes (:mod:`pipeline.gate.staging` stages them beside a shard's rows). The dedupe
stage reads them instead of normalising and shingling every row in the parent on one core.

Both are functions of the row alone: the digest is the SHA-256 of the row's normalised
key (:func:`~pipeline.dedupe.keys.key_columns`), so equal digests are equal keys as
surely as equal content fingerprints are equal content; a signature depends only on its
own text, however texts are batched (:func:`~pipeline.dedupe.minhash.signatures`). So
the decisions are those of the stage's own computation, which stays the reference path
(and the path of ``rowgate dedupe`` on existing datasets, which have no gate).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa
import xxhash

from pipeline.core.config import DedupeSettings
from pipeline.dedupe.keys import DedupeKey, key_columns, normalised_parts, text_columns
from pipeline.dedupe.minhash import LshParams, signatures
from pipeline.dedupe.normalise import Normalisation

I64 = npt.NDArray[np.int64]

__all__ = [
    "NORMALISED",
    "SHINGLED",
    "SIGNATURE",
    "RowKeys",
    "SignatureMemo",
    "digest_bytes",
    "row_keys",
    "sha256s",
]

#: SHA-256 of the row's normalised key (``[dedupe] normalised``)
NORMALISED: Final = "_normalised_sha256"
#: the MinHash signature of the row's key text, ``permutations`` values (``[dedupe] near``)
SIGNATURE: Final = "_minhash"
#: whether the key text has a shingle at all (without one a row has no near duplicates)
SHINGLED: Final = "_shingled"


#: key bytes (the payload columns, as polars estimates them) whose keys are computed at a
#: time: a slice's normalised texts, tokens and shingles are transient and take many times
#: its bytes. A gate batch (16 MiB, 4,931 pairwise rows) at once raised a worker's peak by
#: 145 MB; 1,024 rows (2.7 MB) at a time, by 65 MB, for the same CPU. Bytes, not rows: 1,024
#: short texts (60 bytes) a slice cost 1.5 µs a row more than 65,536. A row's keys depend on
#: that row alone, so the slicing changes no key. With the signatures compiled
#: (:mod:`~pipeline.dedupe.kernels`), 2 MiB slices took the same time as 4 MiB (50 µs a row
#: of 3.3 KB) and lowered each worker's peak by ~12 MB; 1 MiB cost 18 % more time.
SLICE_BYTES: Final = 2 << 20


def row_keys(
    batch: pa.RecordBatch | pl.DataFrame,
    key: DedupeKey,
    settings: DedupeSettings,
    memo: SignatureMemo | None = None,
) -> pa.RecordBatch:
    """The row keys of ``batch``'s rows (the key's payload columns, named as the JSON
    members the key reads), in its order: the columns the enabled rules read, computed
    about :data:`SLICE_BYTES` of rows at a time. With a ``memo`` (one per shard or task),
    a key text seen before in it is not signed again."""
    frame = batch if isinstance(batch, pl.DataFrame) else pl.from_arrow(batch)
    assert isinstance(frame, pl.DataFrame)
    step = max(1, int(SLICE_BYTES * frame.height // max(frame.estimated_size(), 1)))
    if frame.height <= step:
        return _slice_keys(frame, key, settings, memo)
    slices = [
        _slice_keys(frame.slice(lo, step), key, settings, memo)
        for lo in range(0, frame.height, step)
    ]
    return pa.Table.from_batches(slices).combine_chunks().to_batches()[0]


def _slice_keys(
    frame: pl.DataFrame, key: DedupeKey, settings: DedupeSettings, memo: SignatureMemo | None
) -> pa.RecordBatch:
    normalisation = Normalisation.from_settings(settings)
    # each field normalised once, for both the key and the text
    frame = frame.select(normalised_parts(key, normalisation))
    parts = [pl.col(name) for name in frame.columns]
    columns: dict[str, pa.Array] = {}
    if settings.normalised:
        keys = frame.select(key_columns(key, normalisation, parts=parts, absent=True)).to_series()
        columns[NORMALISED] = sha256s(keys.to_arrow())
    if settings.near:
        texts = frame.select(text_columns(key, normalisation, parts=parts)).to_series()
        params = LshParams.from_settings(settings)
        if memo is None:
            sig, has = signatures(texts, params)
            sig = np.ascontiguousarray(sig.T)
        elif memo.params != params:
            raise ValueError("a signature memo is for the settings it was made with")
        else:
            sig, has = memo.signatures(texts)
        values = pa.array(sig.reshape(-1), pa.uint32())
        columns[SIGNATURE] = pa.FixedSizeListArray.from_arrays(values, settings.permutations)
        columns[SHINGLED] = pa.array(has, pa.bool_())
    return pa.RecordBatch.from_pydict(columns)


#: what a :class:`SignatureMemo` holds, its index included: 12,945 texts at 128 permutations
MEMO_BYTES: Final = 8 << 20
#: a remembered text's share of the memo's index besides its signature: its 16-byte
#: digest as a bytes object, its slot as an int and the dict's entry (measured: 133 bytes)
_ENTRY_BYTES: Final = 136


class SignatureMemo:
    """The MinHash signatures of key texts signed before, by each text's 128-bit xxh3
    digest: a text repeated within a shard or task (retries, copies: what dedupe is for)
    is tokenised, shingled and signed once. A signature depends on its text alone, so a
    remembered one is the one signing would give; two texts would have to share all
    128 bits for a row to get another's, and even then the pair's exact Jaccard check
    reads the texts themselves. Holds at most :data:`MEMO_BYTES`, index included; when a
    slice's new texts would not fit, it starts over with that slice's."""

    def __init__(self, params: LshParams) -> None:
        self.params = params
        self._capacity = max(1, MEMO_BYTES // (4 * params.permutations + _ENTRY_BYTES))
        self._sig = np.empty((self._capacity, params.permutations), np.uint32)
        self._has = np.empty(self._capacity, np.bool_)
        self._index: dict[bytes | None, int] = {}

    def signatures(self, texts: pl.Series) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.bool_]]:
        """Signatures (texts × permutations) and which texts have shingles, as
        :func:`~pipeline.dedupe.minhash.signatures` gives them (transposed)."""
        params = self.params
        if len(texts) > self._capacity:
            sig, has = signatures(texts, params)
            return np.ascontiguousarray(sig.T), has
        digests = _xxh128s(texts.to_arrow())
        at, new = self._place(digests)
        if len(self._index) > self._capacity:  # this slice's new texts do not fit: start over
            self._index.clear()
            at, new = self._place(digests)
        if new:
            fresh = texts if len(new) == len(texts) else texts.gather(new)
            sig, has = signatures(fresh, params)
            taken = slice(len(self._index) - len(new), len(self._index))  # the last slots
            self._sig[taken] = sig.T
            self._has[taken] = has
        return self._sig[at], self._has[at]

    def _place(self, digests: list[bytes | None]) -> tuple[npt.NDArray[np.int64], list[int]]:
        """Each text's slot, the new texts given the next free ones; and the rows of the
        new texts (each text's first), to be signed."""
        index = self._index
        known = len(index)
        at = np.empty(len(digests), np.int64)
        new: list[int] = []
        for row, digest in enumerate(digests):
            slot = index.get(digest)
            if slot is None:
                slot = index[digest] = known + len(new)
                new.append(row)
            at[row] = slot
        return at, new


def sha256s(texts: pa.Array) -> pa.Array:
    """The SHA-256 of each string's UTF-8 bytes (null for null)."""
    sha256 = hashlib.sha256
    return pa.array(_each_string(texts, lambda b: sha256(b).digest()), pa.binary(32))


def digest_bytes(digests: pl.Series, to: pa.DataType | None = None) -> pa.Array:
    """SHA-256 digests written as 64 hex digits (the gate writes them in lowercase), as
    their 32 bytes: equal digests stay equal, and order as their hex digits do. ``to``:
    ``binary(32)`` by default; variable-width binary where many are null (a null takes
    4 bytes there, not 32)."""
    return digests.cast(pl.String).str.decode("hex").to_arrow().cast(to or pa.binary(32))


def _xxh128s(texts: pa.Array) -> list[bytes | None]:
    """The 128-bit xxh3 digest of each string's UTF-8 bytes (None for null)."""
    return _each_string(texts, xxhash.xxh3_128_digest)


def _each_string(texts: pa.Array, digest: Callable[[memoryview], bytes]) -> list[bytes | None]:
    """``digest`` of each string's UTF-8 bytes (None for null), read where Arrow holds
    them: no Python string per row (2 or 4 bytes a character for non-ASCII text) and no
    encoding back to UTF-8."""
    texts = texts.cast(pa.large_string())
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    _, offsets_buffer, data_buffer = texts.buffers()
    n = len(texts)
    offsets = np.frombuffer(offsets_buffer, np.int64)[texts.offset : texts.offset + n + 1].tolist()
    data = memoryview(data_buffer if data_buffer is not None else b"")
    valid = texts.is_valid().to_pylist() if texts.null_count else [True] * n
    return [digest(data[offsets[i] : offsets[i + 1]]) if valid[i] else None for i in range(n)]


@dataclass(frozen=True)
class RowKeys:
    """What the gate's row keys give the matching, for a frame of rows (positions in it
    are row ids): the ``normalised`` groups lined up with the rows (ids from 0: rows
    share one when their normalised digests are equal), when that rule is on, and the
    ``exact`` groups (their content fingerprints'), found on the engine by grouping
    checks; and for the near rule, ``near(groups, rows, rank)``: the near pairs among the
    texts (``rows[i]`` is text ``i``'s row, ``rank[i]`` its survivor rank; ``groups[r]``
    is row ``r``'s normalised group, which is its text when ``rows[groups[r]] == r``),
    found and checked on the engine (among more rows than the frame's, where it holds only
    those that take part; ``None`` where no search ran, as for fewer than two rows): the
    candidate pairs whose exact Jaccard similarity
    reaches the threshold as sorted (better, worse) text ids, their similarities and
    how many candidate pairs there were, as
    :func:`~pipeline.dedupe.minhash.candidate_pairs` and
    :func:`~pipeline.dedupe.minhash.verified_pairs` give them; ``signatures(rows)``
    gives the signatures (permutations × rows) of some rows (the verified pairs').

    ``lineage(rows)`` gives the ``_source``, ``_line`` and ``_record_sha256`` of some
    rows (those a pointer or a cluster names): then the frame need not hold them for
    every row. ``weight``: how many rows each row stands for (its own and those it
    leads, which take no part: :class:`~pipeline.dedupe.participants.Participants`).
    ``rank``: the rows' survivor ranks among them (0 first), where they were ranked
    outside the frame (by order keys on disk: ``rowgate dedupe``), so that the frame need
    not hold the survivor rule's column."""

    normalised: I64 | None
    near: Callable[[I64, I64, I64], tuple[I64, I64, npt.NDArray[np.float64], int]] | None
    signatures: Callable[[I64], npt.NDArray[np.uint32]] | None
    exact: I64 | None = None
    lineage: Callable[[I64], pl.DataFrame] | None = None
    weight: I64 | None = None
    rank: I64 | None = None
