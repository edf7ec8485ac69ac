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

from pipeline.core.config import DedupeSettings
from pipeline.dedupe.keys import DedupeKey, key_columns, normalised_parts, text_columns
from pipeline.dedupe.minhash import LshParams, signatures
from pipeline.dedupe.normalise import Normalisation

__all__ = ["NORMALISED", "SHINGLED", "SIGNATURE", "RowKeys", "row_keys"]

#: SHA-256 of the row's normalised key (``[dedupe] normalised``)
NORMALISED: Final = "_normalised_sha256"
#: the MinHash signature of the row's key text, ``permutations`` values (``[dedupe] near``)
SIGNATURE: Final = "_minhash"
#: whether the key text has a shingle at all (without one a row has no near duplicates)
SHINGLED: Final = "_shingled"


def row_keys(batch: pa.RecordBatch, key: DedupeKey, settings: DedupeSettings) -> pa.RecordBatch:
    """The row keys of ``batch``'s rows (the key's payload columns, named as the JSON
    members the key reads), in its order: the columns the enabled rules read."""
    frame = pl.from_arrow(batch)
    assert isinstance(frame, pl.DataFrame)
    normalisation = Normalisation.from_settings(settings)
    # each field normalised once, for both the key and the text
    frame = frame.select(normalised_parts(key, normalisation))
    parts = [pl.col(name) for name in frame.columns]
    columns: dict[str, pa.Array] = {}
    if settings.normalised:
        keys = frame.select(key_columns(key, normalisation, parts=parts)).to_series().to_list()
        columns[NORMALISED] = pa.array(
            [None if k is None else hashlib.sha256(k.encode("utf-8")).digest() for k in keys],
            pa.binary(32),
        )
    if settings.near:
        texts = frame.select(text_columns(key, normalisation, parts=parts)).to_series()
        sig, has = signatures(texts, LshParams.from_settings(settings))
        values = pa.array(np.ascontiguousarray(sig.T).reshape(-1), pa.uint32())
        columns[SIGNATURE] = pa.FixedSizeListArray.from_arrays(values, settings.permutations)
        columns[SHINGLED] = pa.array(has, pa.bool_())
    return pa.RecordBatch.from_pydict(columns)


@dataclass(frozen=True)
class RowKeys:
    """Row keys lined up with a frame of rows (see the module docstring): ``normalised``
    digests, ``signatures`` (permutations × rows) and ``shingled``, each present when its
    rule is on; ``texts(rows)`` gives the normalised key texts of some rows (the exact
    Jaccard check reads the candidates' texts only)."""

    normalised: pl.Series | None
    signatures: npt.NDArray[np.uint32] | None
    shingled: npt.NDArray[np.bool_] | None
    texts: Callable[[npt.NDArray[np.int64]], pl.Series]

    @classmethod
    def from_frame(
        cls, frame: pl.DataFrame, texts: Callable[[npt.NDArray[np.int64]], pl.Series]
    ) -> RowKeys:
        """From the staged columns of :func:`row_keys` (those present)."""
        sig = shingled = None
        if SIGNATURE in frame.columns:
            sig = np.ascontiguousarray(frame[SIGNATURE].to_numpy().astype(np.uint32).T)
            shingled = frame[SHINGLED].to_numpy().astype(np.bool_)
        normalised = frame[NORMALISED] if NORMALISED in frame.columns else None
        return cls(normalised, sig, shingled, texts)
