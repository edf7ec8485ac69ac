"""Near-duplicate candidates found partition by partition on the engine, never holding
every row's signature in one process.

The gate's workers stage each row's LSH band keys (:mod:`pipeline.dedupe.row_keys`).
The dedupe stage knows which rows take part as *texts* (the first accepted row of each
normalised key) and each text's survivor rank; it writes that as a text map beside each
shard's staged rows (:func:`write_text_map`, 16 bytes a row), and the engine runs one
task per partition (:func:`candidate_step`). Task ``p`` reads, shard by shard, the band
keys and text map of every staged row, keeps the entries whose key falls in its
partition (``key % partitions == p``), and pairs up the texts that share a band key
(:func:`~pipeline.dedupe.minhash.band_candidates`). Equal keys always fall in one
partition, so every bucket is whole in one task and the union of the tasks' pairs is
exactly the pairs of the whole run: the result is the same for any partition count,
worker count and engine (a test compares 1, 7 and 64 partitions with the stage that
computes everything in one process).

Memory: a task holds its partition's entries, 24 bytes (key, text, rank) per (text,
band) in it, plus one shard's band keys while reading; the parent holds only the pairs
returned. Each task reads every shard's band keys (memory-mapped, one column), so the
read volume grows with the partition count: the count is chosen from the entries'
bytes (:func:`partition_count`, ~64 MiB a partition, at least one per worker), not
set high. Writing the entries to per-partition spill files from the gate would read
each byte once; the partition of a key is fixed only once the run knows its size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from pipeline.dedupe.minhash import LshParams, band_candidates
from pipeline.dedupe.row_keys import BANDS, SHINGLED
from pipeline.engines import Progress, Step
from pipeline.storage import RunStorage

__all__ = [
    "PARTITION_BYTES",
    "CandidateSearch",
    "candidate_step",
    "partition_count",
    "text_map_stem",
    "write_text_map",
]

I64 = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]

#: A partition's entries, about: (key, text, rank) of 8 bytes each per text and band.
PARTITION_BYTES: Final = 64 << 20
_ENTRY_BYTES: Final = 24
#: the text map's columns: a staged row's text id (-1: takes no part) and its rank
_TEXT: Final = "_text"
_RANK: Final = "_text_rank"


def text_map_stem(kind: str) -> str:
    """The staged stem of a shard's text map of ``kind`` (row-aligned with its rows)."""
    return f"{kind}.near-texts"


def partition_count(texts: int, params: LshParams, workers: int, given: int | None) -> int:
    """``given`` when set; else enough partitions for ~:data:`PARTITION_BYTES` of
    entries each, and at least one per worker."""
    if given is not None:
        return given
    entries = texts * params.bands * _ENTRY_BYTES
    return max(workers, math.ceil(entries / PARTITION_BYTES), 1)


def write_text_map(storage: RunStorage, kind: str, shard: int, text: I64, rank: I64) -> None:
    """Stage one shard's text map: for each staged row of ``kind``, in order, its text id
    (-1 for a row that takes no part) and that text's survivor rank."""
    table = pa.table({_TEXT: pa.array(text, pa.int64()), _RANK: pa.array(rank, pa.int64())})
    storage.stage_table(shard, text_map_stem(kind), table)


@dataclass(frozen=True)
class CandidateSearch:
    """What every partition task needs: where the staged band keys and text maps are
    (the shards of ``kind``), the LSH parameters, the number of texts (pair codes are
    ``better * texts + worse``) and the partition count."""

    storage: RunStorage
    kind: str
    shards: tuple[int, ...]
    params: LshParams
    texts: int
    partitions: int


def candidate_step(search: CandidateSearch) -> Step[CandidateSearch, int, U64]:
    """The step whose task ``p`` returns partition ``p``'s candidate pair codes."""
    return Step(_init, (search,), _partition_candidates)


def _init(search: CandidateSearch) -> CandidateSearch:
    return search


def _partition_candidates(search: CandidateSearch, partition: int, progress: Progress) -> U64:
    bands = search.params.bands
    keys: list[list[U64]] = [[] for _ in range(bands)]
    texts: list[list[I64]] = [[] for _ in range(bands)]
    ranks: list[list[I64]] = [[] for _ in range(bands)]
    for shard in search.shards:
        text, rank, band_keys = _shard_entries(search, shard)
        mine = band_keys % np.uint64(search.partitions) == np.uint64(partition)
        for band in range(bands):
            chosen = mine[:, band]
            keys[band].append(band_keys[chosen, band])
            texts[band].append(text[chosen])
            ranks[band].append(rank[chosen])
    found = [
        band_candidates(
            np.concatenate(keys[band]),
            np.concatenate(texts[band]),
            np.concatenate(ranks[band]),
            search.texts,
            search.params.max_bucket,
        )
        for band in range(bands)
    ]
    return np.unique(np.concatenate(found)) if found else np.zeros(0, np.uint64)


def _shard_entries(search: CandidateSearch, shard: int) -> tuple[I64, I64, U64]:
    """The texts of one shard that take part and have shingles: their ids, ranks and
    band keys (texts × bands)."""
    storage = search.storage
    stem = storage.row_keys_stem(search.kind)
    keys = storage.scan_staged(shard, stem).select(BANDS, SHINGLED).collect()
    texts = storage.scan_staged(shard, text_map_stem(search.kind)).collect()
    if keys.height != texts.height:
        raise AssertionError(f"shard {shard}: row keys and text map are out of step")
    text = texts[_TEXT].to_numpy()
    active = (text >= 0) & keys[SHINGLED].to_numpy()
    band_keys = keys[BANDS].to_numpy().astype(np.uint64).reshape(-1, search.params.bands)
    return (
        text[active].astype(np.int64),
        texts[_RANK].to_numpy()[active].astype(np.int64),
        band_keys[active],
    )
