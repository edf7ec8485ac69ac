"""Near-duplicate candidates found partition by partition on the engine, never holding
every row's signature in one process: a shuffle through staged files, as a map-reduce.

The gate's workers stage each row's MinHash signature (:mod:`pipeline.dedupe.row_keys`).
The caller knows which rows take part as *texts* (one row of each group of equal keys:
a run's first accepted row of each normalised key, or of each fingerprint with that
rule off; every row where no rule groups them) and each text's survivor rank (with a
rule by a column of numbers, a pair: its value's order key and its place, :class:`Ranks`,
so that no rank of every row is made); that is staged as a text map beside each shard's
staged rows (:func:`write_text_map`, 16 bytes a row, 24 with order keys), a shard at a
time from the texts' exceptions, the rows that share a group
(:class:`SparseTexts`, :func:`stage_sparse_texts`: a run's dedupe stage and ``rowgate
dedupe`` hold nothing of every row for it).
Then, on the engine (:meth:`NearSearch.search`):

1. **shuffle**, a task per shard (:func:`shuffle_step`): the LSH band keys of the
   shard's texts, from their signatures, as one entry (band, key, text, rank; and order
   key) per band, staged ordered by partition (``key % partitions``) and band, a record
   batch per partition;
2. **candidates**, a task per partition (:func:`candidate_step`): partition ``p``'s
   batch of every shard's entries (read alone), band by band, paired up among the texts
   that share a key (:func:`~pipeline.dedupe.minhash.band_candidates`), by their ranks
   among the band's entries where texts are ranked by order keys.

Equal keys always fall in one partition, so every bucket is whole in one task and the
union of the tasks' pairs is exactly the pairs of the whole run: the result is the same
for any partition count, worker count and engine (a test compares 1, 7 and 64
partitions with the stage computing everything in one process).

Memory and I/O: a shuffle task holds one shard's entries; a candidate task reads its
partition's batch of every shard's entries (~64 MiB in all) and copies out and sorts one
band of them at a time, and the parent holds only the pairs returned. (A memory map of
each shard's entries kept ~3 times the partition's pages resident: the page cache's
pages around each page touched; ~400 MB a task at 3 M texts.) Copying out the whole
partition and sorting it by band peaked at ~3 times the partition's bytes of the task's
own memory, which grew with the run until the partitions reached their size (~200 MB a
task at 1.2 GB of pairwise rows against ~80 MB at 300 MB). Each entry is written once
and read once; a candidate task opens every shard's entries file, so the count
(:func:`partition_count`, ~64 MiB of entries a partition, a multiple of the workers)
also sets how many small reads there are (shards × partitions).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final, NamedTuple

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa

from pipeline.core.arrays import distinct_union, places_in
from pipeline.dedupe import near_check
from pipeline.dedupe.minhash import LshParams, band_candidates, band_keys, decoded_pairs
from pipeline.dedupe.near_check import (
    CheckRanges,
    TextSource,
    addresses_stem,
    check_step,
    sets_step,
)
from pipeline.dedupe.row_keys import SHINGLED, SIGNATURE
from pipeline.engines import Engine, Progress, Step
from pipeline.storage import RunStorage

__all__ = [
    "NULL_TIE",
    "PARTITION_BYTES",
    "CandidateSearch",
    "NearSearch",
    "Ranking",
    "Ranks",
    "SparseTexts",
    "candidate_step",
    "partition_count",
    "partitions_for",
    "shuffle_step",
    "stage_sparse_texts",
    "text_map_stem",
    "write_text_map",
]

I64 = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]
F64 = npt.NDArray[np.float64]

#: A partition's entries, about: (band, key, text, rank) per text and band.
PARTITION_BYTES: Final = 64 << 20
_ENTRY_BYTES: Final = 26
_ORDER_BYTES: Final = 8
#: the text map's columns: a staged row's text id (-1: takes no part) and its rank (its
#: tie, and with a survivor rule by a column of numbers, its order key:
#: :class:`Ranks`); and with the band and band key, the entries'
_TEXT: Final = "_text"
_RANK: Final = "_text_rank"
_ORDER: Final = "_text_order"
_BAND: Final = "_band"
_KEY: Final = "_key"


def text_map_stem(kind: str) -> str:
    """The staged stem of a shard's text map of ``kind`` (row-aligned with its rows)."""
    return f"{kind}.near-texts"


def partition_count(
    texts: int,
    params: LshParams,
    workers: int,
    shards: int,
    given: int | None,
    ordered: bool = False,
) -> int:
    """The candidate search's partitions (:func:`partitions_for` its entries, a text's
    per band, each with an order key where texts are ``ordered`` by them), no more than
    its texts."""
    entry = _ENTRY_BYTES + (_ORDER_BYTES if ordered else 0)
    return partitions_for(texts * params.bands * entry, workers, shards, given, texts)


def partitions_for(
    entry_bytes: int, workers: int, shards: int, given: int | None, most: int
) -> int:
    """A shuffle's partition count: ``given`` when set, but no more than ``most`` (the
    rows or texts it sorts: more partitions hold nothing, or a few entries each, and
    cost every shard a record batch and every partition task a read of every shard:
    ``partitions = 65536`` on 10 rows in 5 shards took 168 s against 1.4 s with 8, and
    460 lines in 43 shards ran for over 600 s, against 3.3 s unset); else enough
    partitions for at most ~:data:`PARTITION_BYTES` of entries each, as a multiple of the
    workers that run at once, so that they finish together (3 partitions on 2 workers
    took two tasks' time, against half of 4). No more workers count than the shuffle
    has ``shards``: a one-shard run given six workers made six partitions, and the
    engine started a process for each."""
    if given is not None:
        return max(min(given, most), 1)
    workers = max(min(workers, shards), 1)
    return max(math.ceil(entry_bytes / PARTITION_BYTES / workers), 1) * workers


def write_text_map(
    storage: RunStorage, kind: str, shard: int, text: I64, rank: I64, order: U64 | None = None
) -> None:
    """Stage one shard's text map: for each staged row of ``kind``, in order, its text id
    (-1 for a row that takes no part) and that text's survivor rank: ``rank`` (its tie)
    and, for ranks by order keys, ``order`` (:class:`Ranks`)."""
    columns = {_TEXT: pa.array(text, pa.int64()), _RANK: pa.array(rank, pa.int64())}
    if order is not None:
        columns[_ORDER] = pa.array(order, pa.uint64())
    storage.stage_table(shard, text_map_stem(kind), pa.table(columns))


#: a row without a value of a survivor rule's column (null, NaN) ranks after every row
#: with one: its tie is its place with this bit set (places stay far below it)
NULL_TIE: Final = 1 << 62


class Ranks(NamedTuple):
    """Survivor ranks of some rows, compared as (``keys``, ``ties``): the smaller ranks
    first, as :func:`~pipeline.dedupe.table.survivor_rank` orders every row. ``keys``
    ``None``: the ties alone, distinct (a place, a place reversed, or a rank among every
    row); else each row's value's order key
    (:func:`~pipeline.dedupe.table.order_keys`) and its place (:data:`NULL_TIE` set
    where it has no value), which order the rows with no rank of every row."""

    keys: U64 | None
    ties: I64

    def order(self) -> I64:
        """The rows' positions in rank order."""
        if self.keys is None:
            return np.argsort(self.ties, kind="stable").astype(np.int64)
        return np.lexsort((self.ties, self.keys)).astype(np.int64)

    def take(self, at: I64) -> Ranks:
        return Ranks(None if self.keys is None else self.keys[at], self.ties[at])


#: the survivor ranks of the rows at some places (ascending)
Ranking = Callable[[I64], Ranks]


@dataclass(frozen=True)
class SparseTexts:
    """The texts of a run's taking rows described by their exceptions: every taking row
    is a text (its place among them, ``p``, is its *stored row*) except the ``excluded``
    places (each a later row of a group whose first row is the text), and a text's id
    is its place less the excluded places before it, so texts are numbered in stored
    order. A text's survivor rank is ``rank(p)``, or the best of its group's where its
    place is among ``grouped`` (``best``, in the same order). Every array here grows with
    the rows that share a group, not with the run."""

    excluded: I64  # ascending
    grouped: I64  # ascending: the first place of each group of several rows
    best: Ranks
    rank: Ranking

    @property
    def ordered(self) -> bool:
        """Whether the texts are ranked by order keys (:class:`Ranks`)."""
        return self.best.keys is not None

    def ids(self, places: I64) -> I64:
        """The text id of each place (-1 where it is excluded)."""
        at, hit = _sought(self.excluded, places)
        return np.where(hit, -1, places - at)

    def places(self, ids: I64) -> I64:
        """The stored row of each text id (:meth:`ids` inverted)."""
        before = self.excluded - np.arange(len(self.excluded), dtype=np.int64)
        return ids + np.searchsorted(before, ids, side="right")

    def ranks(self, places: I64) -> Ranks:
        """The survivor rank of the texts at ``places`` (ascending)."""
        own = self.rank(places)
        ranks = Ranks(None if own.keys is None else np.array(own.keys), np.array(own.ties))
        if (ranks.keys is None) != (self.best.keys is None):
            raise AssertionError("texts ranked two ways")  # never expected
        at, hit = _sought(self.grouped, places)
        ranks.ties[hit] = self.best.ties[at[hit]]
        if ranks.keys is not None and self.best.keys is not None:
            ranks.keys[hit] = self.best.keys[at[hit]]
        return ranks


def _sought(among: I64, values: I64) -> tuple[I64, npt.NDArray[np.bool_]]:
    """Where each of ``values`` falls in ``among`` (ascending), and whether it is there."""
    at = np.searchsorted(among, values)
    hit = at < len(among)
    hit[hit] = among[at[hit]] == values[hit]
    return at, hit


def _text_maps(
    storage: RunStorage,
    kind: str,
    shards: tuple[tuple[int, int], ...],
    taking: npt.NDArray[np.bool_] | None,
    texts: SparseTexts,
) -> Iterator[tuple[int, slice, npt.NDArray[np.bool_], I64, I64]]:
    """Stage each shard's text map (:func:`write_text_map`) from ``texts``, a shard at a
    time; yield, after each, the shard, its rows' slice, which of them take part, their
    stored rows and their text ids."""
    lo = placed = 0
    for shard, size in shards:
        took = _took(taking, lo, size)
        at = np.arange(placed, placed + int(took.sum()), dtype=np.int64)
        ids = texts.ids(at)
        text = np.full(size, -1, np.int64)
        rank = np.full(size, -1, np.int64)
        text[took] = ids
        ranks = texts.ranks(at)
        rank[took] = np.where(ids >= 0, ranks.ties, -1)
        order = None
        if ranks.keys is not None:
            order = np.zeros(size, np.uint64)
            order[took] = np.where(ids >= 0, ranks.keys, 0)
        del ranks
        write_text_map(storage, kind, shard, text, rank, order)
        yield shard, slice(lo, lo + size), took, at, ids
        lo, placed = lo + size, placed + len(at)


def _took(taking: npt.NDArray[np.bool_] | None, lo: int, size: int) -> npt.NDArray[np.bool_]:
    """Which of the ``size`` staged rows from ``lo`` take part (``taking`` ``None``:
    every staged row)."""
    return np.ones(size, np.bool_) if taking is None else taking[lo : lo + size]


def stage_sparse_texts(
    storage: RunStorage,
    kind: str,
    shards: tuple[tuple[int, int], ...],
    taking: npt.NDArray[np.bool_] | None,
    lines: pl.Series | None,
    texts: SparseTexts,
) -> int:
    """Stage each shard's text map and the texts' addresses (a row per text id: its
    ``_shard``, ``_shard_line`` and stored row), a shard at a time, for
    :meth:`NearSearch.search`; returns how many texts there are. ``taking`` and
    ``lines``: every staged row of the ``shards`` (shard, rows), in order; ``None``:
    every staged row takes part, and each shard's rows are its lines from 0 (as
    ``rowgate dedupe`` stages a dataset's rows: no array of every row)."""
    schema = pa.schema(
        [("_shard", pa.int32()), ("_shard_line", pa.int64()), (near_check.STORED, pa.int64())]
    )
    with storage.whole_writer(addresses_stem(kind), schema) as addresses:
        for shard, rows, took, at, ids in _text_maps(storage, kind, shards, taking, texts):
            kept = ids >= 0
            size = rows.stop - rows.start
            shard_lines = (
                np.arange(size) if lines is None else lines.slice(rows.start, size).to_numpy()
            )
            columns = [np.full(int(kept.sum()), shard, np.int32), shard_lines[took][kept], at[kept]]
            addresses.write_batch(pa.record_batch(columns, schema=schema))
    count = sum(size for _, size in shards) if taking is None else int(taking.sum())
    return count - len(texts.excluded)


@dataclass(frozen=True)
class NearSearch:
    """Where the near candidates of one kind are found: the ``engine`` and ``storage``,
    the ``shards`` whose row keys are staged (shard, staged rows), in the order of the
    rows, the LSH parameters, and what sets the partition count (``workers``; a given
    ``partitions`` wins)."""

    engine: Engine
    storage: RunStorage
    kind: str
    shards: tuple[tuple[int, int], ...]
    params: LshParams
    workers: int
    partitions: int | None = None
    #: whether the texts are ranked by order keys (:attr:`SparseTexts.ordered`)
    ordered: bool = False

    def search(
        self,
        taking: npt.NDArray[np.bool_] | None,
        texts: int,
        source: TextSource,
        on_stage: Callable[[str], None] = lambda name: None,
    ) -> tuple[I64, I64, F64, int]:
        """The near pairs among ``texts`` texts whose text maps (:func:`write_text_map`,
        one per shard) and addresses (a row per text id, staged as
        :func:`~pipeline.dedupe.near_check.addresses_stem`) are staged already
        (:func:`stage_sparse_texts`): the candidate pairs whose exact similarity reaches
        the threshold, as sorted (better, worse) text ids, their similarities, and how
        many distinct candidate pairs there were. ``taking``: which staged rows take part
        (in shard order; ``None``: every one); the texts are read through ``source``. Engine
        tasks: one per shard (the shuffle), one per partition (the candidates, staged),
        one per run of shards (the candidate texts' shingle sets, staged) and one per
        range of pair codes (the check, :mod:`pipeline.dedupe.near_check`). The driver
        never holds the candidate pairs."""
        sizes = [size for _, size in self.shards]
        starts, lo, placed = [], 0, 0  # each shard's first stored row
        for size in sizes:
            starts.append(placed)
            lo, placed = lo + size, placed + int(_took(taking, lo, size).sum())
        count = partition_count(
            texts, self.params, self.workers, len(self.shards), self.partitions, self.ordered
        )
        firsts = near_check.set_groups(sizes, self.workers)
        search = CandidateSearch(
            self.storage,
            self.kind,
            tuple(shard for shard, _ in self.shards),
            self.params,
            texts,
            count,
            near_check.SAMPLE_EVERY,
            tuple(starts[first] for first in firsts),
        )
        on_stage(f"{self.kind}: dedupe: candidates ({count} partitions)")
        self.engine.map(shuffle_step(search), search.shards)
        found = self.engine.map(candidate_step(search), range(count))
        total = sum(codes for codes, _ in found)
        samples = [sample for _, sample in found]
        ranges = near_check.code_ranges(samples, total, self.workers, search.sample_every)
        check = CheckRanges(
            self.storage,
            self.kind,
            count,
            texts,
            source,
            self.params,
            (near_check.BLOCK_TEXTS, near_check.BLOCK_PAIRS),
            search.set_starts,
        )
        if total:
            on_stage(f"{self.kind}: dedupe: candidate texts' shingle sets ({len(firsts)} tasks)")
            self.engine.map(sets_step(check), range(len(firsts)))
        on_stage(f"{self.kind}: dedupe: exact check ({len(ranges)} range{'s' * (len(ranges) > 1)})")
        checked = self.engine.map(check_step(check), ranges)
        codes = np.concatenate([c for _, c, _ in checked]) if checked else np.zeros(0, np.uint64)
        better, worse = decoded_pairs(codes, texts)
        similarity = np.concatenate([v for _, _, v in checked]) if checked else np.zeros(0)
        candidates = sum(n for n, _, _ in checked)
        return better, worse, similarity, candidates


@dataclass(frozen=True)
class CandidateSearch:
    """What every task needs: where the staged signatures and text maps are
    (the shards of ``kind``), the LSH parameters, the number of texts (pair codes are
    ``better * texts + worse``) and the partition count."""

    storage: RunStorage
    kind: str
    shards: tuple[int, ...]
    params: LshParams
    texts: int
    partitions: int
    #: a candidate task returns every this-many-th of its codes (ranges are cut at them)
    sample_every: int
    #: where each near sets task's texts begin (their first stored row): a candidate
    #: task stages its texts by sets task (:func:`~pipeline.dedupe.near_check.set_groups`)
    set_starts: tuple[int, ...]


def shuffle_step(search: CandidateSearch) -> Step[CandidateSearch, int, int]:
    """The step whose task ``shard`` stages that shard's entries ordered by partition
    and band (returns how many)."""
    return Step(_init, (search,), _shuffle_shard)


def candidate_step(search: CandidateSearch) -> Step[CandidateSearch, int, tuple[int, U64]]:
    """The step whose task ``p`` stages partition ``p``'s candidate pair codes, sorted
    and distinct (after :func:`shuffle_step` ran over every shard), and returns how many
    and a sample of them (:func:`~pipeline.dedupe.near_check.stage_codes`)."""
    return Step(_init, (search,), _partition_candidates)


def _init(search: CandidateSearch) -> CandidateSearch:
    return search


def _entries_stem(kind: str) -> str:
    return f"{kind}.near-entries"


def _shuffle_shard(search: CandidateSearch, shard: int, progress: Progress) -> int:
    """One (band, key, text, rank) entry per band of each of the shard's texts (with its
    order key where texts are ranked by them), staged ordered by partition and band, a
    record batch per partition (empty ones too)."""
    text, rank, order_key, keys = _shard_entries(search, shard)
    bands, partitions = search.params.bands, search.partitions
    key = keys.reshape(-1)  # text-major: entry i * bands + b
    partition = key % np.uint64(partitions)
    band = np.tile(np.arange(bands, dtype=np.int16), len(text))
    order = np.lexsort((band, partition))  # by partition, then band: a band is one range
    starts = np.searchsorted(partition[order], np.arange(partitions + 1, dtype=np.uint64))
    columns = {
        _BAND: pa.array(band[order]),
        _KEY: pa.array(key[order]),
        _TEXT: pa.array(np.repeat(text, bands)[order]),
        _RANK: pa.array(np.repeat(rank, bands)[order]),
    }
    if order_key is not None:
        columns[_ORDER] = pa.array(np.repeat(order_key, bands)[order])
    entries = pa.record_batch(columns)
    search.storage.stage_partitions(shard, _entries_stem(search.kind), entries, starts.tolist())
    return len(key)


def _partition_candidates(
    search: CandidateSearch, partition: int, progress: Progress
) -> tuple[int, U64]:
    """The candidate pair codes of the entries in ``partition``, from every shard's
    staged entries (that partition's record batch of each, read alone), band by band
    (a band's entries are copied out of the batches and sorted, then freed, and its
    pairs merged into the distinct codes so far: a pair whose texts share keys in many
    bands is held once, not once a band); staged."""
    slices = [_partition_slice(search, shard, partition) for shard in search.shards]
    ordered = {_ORDER in part.schema.names for part, _ in slices}
    if len(ordered) > 1:
        raise AssertionError(f"partition {partition}: entries ranked two ways")
    codes = np.zeros(0, np.uint64)
    for band in range(search.params.bands if slices else 0):
        ranges = [part.slice(at[band], at[band + 1] - at[band]) for part, at in slices]
        key: U64 = np.concatenate([r[_KEY].to_numpy() for r in ranges])
        text: I64 = np.concatenate([r[_TEXT].to_numpy() for r in ranges])
        rank: I64 = np.concatenate([r[_RANK].to_numpy() for r in ranges])
        if True in ordered:  # by order keys, then ties: their order among these entries
            keys: U64 = np.concatenate([r[_ORDER].to_numpy() for r in ranges])
            rank = places_in(Ranks(keys, rank).order())
            del keys
        if len(key) > 1:
            found = band_candidates(key, text, rank, search.texts, search.params.max_bucket)
            codes = distinct_union(codes, found)
            del found
    return near_check.stage_codes(
        search.storage,
        search.kind,
        partition,
        codes,
        search.sample_every,
        search.texts,
        search.set_starts,
    )


def _partition_slice(
    search: CandidateSearch, shard: int, partition: int
) -> tuple[pa.RecordBatch, I64]:
    """One shard's entries in ``partition`` and where each band starts in them (bands +
    1 offsets: the shuffle ordered a partition's entries by band). Read, not mapped:
    a map of the file kept ~3 times the partition's pages resident (the page cache's
    pages around each one touched), ~400 MB a task at 3 M texts against 63 MB read."""
    part = search.storage.staged_partition(shard, _entries_stem(search.kind), partition)
    bands = np.arange(search.params.bands + 1)
    return part, np.searchsorted(part[_BAND].to_numpy(), bands).astype(np.int64)


def _shard_entries(search: CandidateSearch, shard: int) -> tuple[I64, I64, U64 | None, U64]:
    """The texts of one shard that take part and have shingles: their ids, ranks (ties,
    and order keys where texts are ranked by them: :class:`Ranks`) and band keys (texts
    × bands), from the signatures the gate staged."""
    storage = search.storage
    stem = storage.row_keys_stem(search.kind)
    keys = storage.staged_table(shard, stem).select([SIGNATURE, SHINGLED])
    texts = storage.staged_table(shard, text_map_stem(search.kind))
    if keys.num_rows != texts.num_rows:
        raise AssertionError(f"shard {shard}: row keys and text map are out of step")
    text = texts[_TEXT].to_numpy()
    active = (text >= 0) & keys[SHINGLED].to_numpy()
    permutations = search.params.permutations
    # the signatures' values straight from the memory-mapped batches (a list column
    # through polars cost ~4 times as much: ~2 µs a row)
    values = [chunk.flatten().to_numpy() for chunk in keys[SIGNATURE].chunks]
    flat = np.concatenate(values) if values else np.zeros(0, np.uint32)
    sig = flat.reshape(-1, permutations)[active]
    order = texts[_ORDER].to_numpy()[active] if _ORDER in texts.column_names else None
    return (
        text[active].astype(np.int64),
        texts[_RANK].to_numpy()[active].astype(np.int64),
        order,
        np.ascontiguousarray(band_keys(np.ascontiguousarray(sig.T), search.params).T),
    )
