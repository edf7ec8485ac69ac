"""The near rule's exact check on the engine: the candidate pairs are deduplicated and
checked by tasks, a range of pair codes each, so no process holds every candidate pair
or the shingle sets of every candidate text, and each text is read and shingled once.

The driver stages where each text is stored (its *address*: a run's shard and line, a
dataset's row; and its row, the order texts are stored in), and cuts the shards into
runs for the sets tasks (:func:`set_groups`: about :data:`SETS_ROWS` rows, and a task
per worker where the shards allow). Each candidate task (:mod:`pipeline.dedupe.partitions`)
stages its partition's distinct pair codes (``better * texts + worse``), sorted, and the
distinct texts they name with their rows, a record batch per sets task
(:func:`stage_codes`), and returns how many codes and every :data:`SAMPLE_EVERY`-th of
them. From those samples the driver cuts the codes' space into ranges of about
:data:`RANGE_CODES` codes (:func:`code_ranges`). Then:

1. **sets**, a task per run of shards (:func:`stage_sets`): its batch of each candidate
   task's texts, deduplicated (a text several partitions name comes once), read in
   stored order through the caller's :class:`TextSource` (one read of each shard),
   shingled, and their shingle sets staged by row, a record batch per piece of texts
   read;
2. **check**, a task per range of codes (:func:`check_step`):

   a. reads its range of every partition's codes (a pair found by bands in several
      partitions is there several times) and keeps the distinct ones: the range's
      candidate pairs, counted once;
   b. compares their texts' sketches (their signatures' low bytes, made once by the
      sets task), :data:`SKETCH_BYTES` of them at a time, gathered from the memory-mapped
      files of the sets tasks that staged them, and keeps the pairs whose signatures
      agree enough (:func:`~pipeline.dedupe.minhash.agreeing`): on templated texts
      nearly every candidate is far from near, and no set of its texts is gathered;
   c. cuts those into blocks of consecutive pairs that name at most
      :data:`BLOCK_TEXTS` distinct texts and hold at most :data:`BLOCK_PAIRS` pairs
      (:func:`blocks`); for each block, gathers its texts' shingle sets and compares
      the pairs (:func:`~pipeline.dedupe.minhash.set_similarities`: the reference
      path's comparison of the same sets, after the same agreement);
   d. returns its count and the codes and similarities of the pairs that reach the
      threshold.

Every code falls in one range and a pair's similarity depends on its two texts alone,
so the pairs kept and the candidate count are the same for any partition count, range
cut, block cut, worker count and engine; the ranges are in code order, so the pairs
come back sorted as the driver would sort them. The sets are staged first because a
block names texts from all over the input (a pair's texts may lie anywhere; for
``rowgate dedupe`` text ids are ranks of digests): a block that read its own texts read
nearly every shard, so many blocks read the input many times.

Memory: the driver holds the samples, the ranges and the verified pairs; a sets task,
its candidate texts' ids and rows (16 bytes each, a copy for each partition that names
a text while it deduplicates them) and one piece of texts (~32 MB), its tokens and sets; a
check task, its range's codes (~8 bytes each, twice while deduplicating), the sketches
of the texts of some of its pairs (:data:`SKETCH_BYTES`: 64 MB), a
block's shingle sets (~120 MB for 32,768 texts of ~450 shingles) and the check's join of
``_VERIFY_CHUNK`` hashes a side (~100 MB). Staged: 16 bytes a distinct text per
partition that names it, each read once (by its sets task), and 8 bytes a distinct
shingle of each candidate text (1.15 to 1.3 times its text, measured) and 128 bytes of
sketch (at 128 permutations). Made by each block instead, the sketches cost most of the
check: a text is named by ~100 blocks where its pairs spread over the codes (960,858
pw-decide-row rows: 214 of 333 s with one worker). Gathered by each block with the sets,
before the sketches were compared, the sets of pairs that were then not compared took
~45 s of the check's ~100 s there (one worker; cutting the ranges into blocks, whose
every pair named a new text, another ~22 s).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa

from pipeline.core.arrays import distinct, distinct_places, distinct_union, ragged_arange
from pipeline.dedupe.minhash import (
    LshParams,
    Shingles,
    agreeing,
    decoded_pairs,
    set_similarities,
    set_sketches,
    shingle_set_pieces,
)
from pipeline.engines import Progress, Step
from pipeline.storage import RunStorage

__all__ = [
    "BLOCK_PAIRS",
    "BLOCK_TEXTS",
    "RANGE_CODES",
    "SAMPLE_EVERY",
    "SETS_ROWS",
    "SKETCH_BYTES",
    "STORED",
    "CheckRanges",
    "TextSource",
    "addresses_stem",
    "blocks",
    "check_step",
    "code_ranges",
    "set_groups",
    "sets_step",
    "stage_codes",
    "stage_sets",
]

I64 = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]
F64 = npt.NDArray[np.float64]
U8 = npt.NDArray[np.uint8]

#: Distinct texts a block names at most (its task holds their shingle sets)
BLOCK_TEXTS: Final = 1 << 15
#: Pairs a block holds at most
BLOCK_PAIRS: Final = 1 << 20
#: Bytes of sketches a check task gathers at once to compare candidate pairs, before a
#: block gathers the sets of those that agree enough: a pair names at most two texts of
#: ``permutations`` bytes each, so 262,144 pairs at a time at 128 permutations, 32,768
#: at 1,024
SKETCH_BYTES: Final = 1 << 26
#: Codes a range holds, about (a check task reads them all: 8 bytes each)
RANGE_CODES: Final = 1 << 22
#: Rows (of the shards' text maps) a sets task covers, about
SETS_ROWS: Final = 1 << 20
#: A candidate task returns every this-many-th of its codes, from which ranges are cut
SAMPLE_EVERY: Final = 1 << 12
#: the address table's column of each text's row (the order texts are stored in)
STORED: Final = "_stored"
_CODE: Final = "_code"
#: the staged texts a partition's codes name, and a sets task's candidate texts' sets
_ID: Final = "_text_id"
_SHINGLES: Final = "_shingles"
#: a text's signature's low bytes (:func:`~pipeline.dedupe.minhash.set_sketches`),
#: made once by its sets task: a check task gathers them for a chunk of its pairs at a
#: time (:func:`_agreeing`)
_SKETCH: Final = "_sketch"


class TextSource(Protocol):
    """Where a sets task reads texts: picklable, compared by value (a worker keeps it).
    ``texts(addresses)``: the normalised key texts at ``addresses`` (rows of the address
    table the driver staged, in stored order), in their order."""

    def texts(self, addresses: pa.Table) -> pl.Series: ...


def _codes_stem(stem: str) -> str:
    """The staged stem of a candidate task's sorted distinct pair codes."""
    return f"{stem}.near-codes"


def _ids_stem(stem: str) -> str:
    return f"{stem}.near-ids"


def _sets_stem(stem: str) -> str:
    return f"{stem}.near-sets"


def addresses_stem(stem: str) -> str:
    """The staged stem of the whole run's text addresses (a row per text id)."""
    return f"{stem}.near-text-addresses"


def code_ranges(samples: list[U64], total: int, workers: int, every: int) -> list[tuple[int, int]]:
    """[lo, hi) ranges of pair codes that cover every code (from 0 to ``2**64``), cut at
    the candidate tasks' ``samples`` (every ``every``-th of each task's sorted codes) so
    that each holds about :data:`RANGE_CODES` of the ``total`` codes, and at least as
    many ranges as ``workers`` where there are samples enough (so that they run
    together). Two cuts at one sample make one range."""
    wanted = max(-(-total // RANGE_CODES), min(workers, total // every), 1)
    merged = np.sort(np.concatenate(samples)) if samples else np.zeros(0, np.uint64)
    cuts: list[int] = []
    if wanted > 1 and len(merged):
        at = (np.arange(1, wanted) * len(merged)) // wanted
        cuts = sorted({int(merged[i]) for i in at} - {0})
    bounds = [0, *cuts, 1 << 64]
    return list(itertools.pairwise(bounds))


def blocks(left: I64, right: I64, texts: int, pairs: int) -> list[tuple[int, int]]:
    """[lo, hi) ranges of consecutive pairs that cover them all, each naming at most
    ``texts`` distinct texts (but a block of one pair, which names two) and holding at
    most ``pairs`` pairs. A block grows by doubling while it fits, then by halving the
    step until it is within an eighth of its size of the first size that does not fit:
    pairs sorted by their better text share it, so a block names far fewer texts than
    twice its pairs."""
    cut: list[tuple[int, int]] = []
    n, lo = len(left), 0
    while lo < n:
        size = min(max(min(texts // 2, pairs), 1), n - lo)  # any k pairs name ≤ 2k texts
        bad = 0  # the size found not to fit (0: none yet)
        while size < min(pairs, n - lo):
            wider = min(2 * size, pairs, n - lo)
            if _named(left, right, lo, lo + wider) > texts:
                bad = wider
                break
            size = wider
        while bad and bad - size > max(size // 8, 1):
            middle = (size + bad) // 2
            if _named(left, right, lo, lo + middle) > texts:
                bad = middle
            else:
                size = middle
        cut.append((lo, lo + size))
        lo += size
    return cut


def _named(left: I64, right: I64, lo: int, hi: int) -> int:
    """How many distinct texts the pairs [lo, hi) name."""
    return len(distinct(np.concatenate([left[lo:hi], right[lo:hi]])))


def stage_codes(
    storage: RunStorage,
    stem: str,
    partition: int,
    codes: U64,
    every: int,
    texts: int,
    starts: Sequence[int],
) -> tuple[int, U64]:
    """Stage a candidate task's sorted distinct ``codes`` (of ``texts`` texts), and the
    distinct texts they name with their :data:`STORED` rows, a record batch per sets task
    (whose rows begin at ``starts``: the texts stored there); return how many codes, and
    every ``every``-th of them (the samples ranges are cut at). So a sets task reads its
    own batch of each candidate task's texts, and the texts are read once in all."""
    storage.stage_table(partition, _codes_stem(stem), pa.table({_CODE: pa.array(codes)}))
    named = _texts_named(codes, texts)
    addresses = storage.whole_table(addresses_stem(stem))
    stored = addresses[STORED].take(pa.array(named, pa.int64())).to_numpy()
    owner = np.searchsorted(np.array(starts, np.int64), stored, side="right") - 1
    order = np.argsort(owner, kind="stable")
    bounds = np.searchsorted(owner[order], np.arange(len(starts) + 1)).tolist()
    texts_stored = pa.record_batch({_ID: named[order], STORED: stored[order]})
    storage.stage_partitions(partition, _ids_stem(stem), texts_stored, bounds)
    return len(codes), codes[every - 1 :: every].copy()


def _texts_named(codes: U64, texts: int) -> I64:
    """The distinct texts that sorted ``codes`` name, decoded :data:`BLOCK_PAIRS` codes at
    a time (decoding all at once held 16 bytes a code: 512 MB more at the peak of a
    candidate task with 32 M codes)."""
    named = np.zeros(0, np.int64)
    for lo in range(0, len(codes), BLOCK_PAIRS):
        better, worse = decoded_pairs(codes[lo : lo + BLOCK_PAIRS], texts)
        named = distinct_union(named, np.concatenate([better, worse]))
    return named


@dataclass(frozen=True)
class CheckRanges:
    """What every sets and check task needs (compared by value: a worker keeps it):
    where the candidate tasks' codes are (``stem``, ``partitions``), how many texts there
    are (codes are ``better * texts + worse``), the staged addresses of the texts, read
    through ``source``, ``params`` (the threshold), a block's bounds (texts, pairs:
    :data:`BLOCK_TEXTS`, :data:`BLOCK_PAIRS`), and where each sets task's texts begin
    (``starts``: the first :data:`STORED` row of each; :func:`set_groups`)."""

    storage: RunStorage
    stem: str
    partitions: int
    texts: int
    source: TextSource
    params: LshParams
    block: tuple[int, int]
    starts: tuple[int, ...]


def set_groups(rows: Sequence[int], workers: int) -> list[int]:
    """Where each sets task's run of consecutive shards begins (places among shards of
    ``rows`` rows each): about :data:`SETS_ROWS` rows a task, and as many tasks as
    ``workers`` where the shards' sizes allow (runs are cut at the shard boundary nearest
    each share, so shards of very unequal sizes give fewer). A task per shard cost a text
    read and a search of every partition's list of texts per shard, however few of its
    texts were candidates: ~8 ms a shard (898 shards of 16 KB: 11 s of sets tasks,
    where the check's blocks had read the same texts in 1 s)."""
    total = sum(rows)
    wanted = min(max(-(-total // SETS_ROWS), workers, 1), max(len(rows), 1))
    ends = np.cumsum(rows)
    cuts = {0}
    for share in range(1, wanted):
        target = -(-share * total // wanted)
        at = int(np.searchsorted(ends, target))  # the shard whose rows reach it
        cuts.add(at if target - (ends[at] - rows[at]) <= ends[at] - target else at + 1)
    return sorted(cut for cut in cuts if cut < len(rows)) if rows else []


def sets_step(ranges: CheckRanges) -> Step[CheckRanges, int, int]:
    """The step whose task ``group`` stages the shingle sets of the candidate texts stored
    from row ``starts[group]`` on (:func:`stage_sets`; after every candidate task staged
    its texts), and returns how many."""
    return Step(_init, (ranges,), _stage_group)


def _stage_group(task: CheckRanges, group: int, progress: Progress) -> int:
    return stage_sets(task, group)


def stage_sets(task: CheckRanges, group: int) -> int:
    """Stage the shingle sets of sets task ``group``'s candidate texts (its batch of each
    candidate task's texts), by their :data:`STORED` rows, a record batch per piece of
    texts read in stored order through the task's source (16,384 texts, then ~32 MB);
    return how many."""
    parts = [
        task.storage.staged_partition(partition, _ids_stem(task.stem), group)
        for partition in range(task.partitions)
    ]
    stored = np.concatenate([part[STORED].to_numpy() for part in parts])
    ids = np.concatenate([part[_ID].to_numpy() for part in parts])
    del parts
    order = np.argsort(stored, kind="stable")
    stored, ids = stored[order], ids[order]
    first = np.ones(len(stored), np.bool_)  # a text several candidate tasks name, once
    first[1:] = stored[1:] != stored[:-1]
    stored, candidates = stored[first], ids[first]
    if not len(candidates):
        return 0
    found = task.storage.whole_table(addresses_stem(task.stem)).take(pa.array(candidates))

    def texts_of(at: I64) -> pl.Series:
        return task.source.texts(found.take(pa.array(at, pa.int64())))

    width = task.params.permutations
    schema = pa.schema(
        [
            (STORED, pa.int64()),
            (_SHINGLES, pa.large_list(pa.uint64())),
            (_SKETCH, pa.binary(width)),
        ]
    )
    done = 0
    with task.storage.stage_writer(group, _sets_stem(task.stem), schema) as out:
        for sets in shingle_set_pieces(np.arange(len(candidates)), texts_of, task.params):
            shingles = pa.LargeListArray.from_arrays(pa.array(sets.offsets), pa.array(sets.hashes))
            piece = pa.array(stored[done : done + len(sets.offsets) - 1])
            sketch = set_sketches([sets], task.params)
            sketches = pa.FixedSizeBinaryArray.from_buffers(
                pa.binary(width), len(piece), [None, pa.py_buffer(sketch.tobytes())]
            )
            out.write_batch(pa.record_batch([piece, shingles, sketches], schema=schema))
            done += len(piece)
    return len(candidates)


def check_step(ranges: CheckRanges) -> Step[CheckRanges, tuple[int, int], tuple[int, U64, F64]]:
    """The step whose task ``(lo, hi)`` returns the count of distinct candidate codes in
    that range and the codes and similarities of those that reach the threshold."""
    return Step(_init, (ranges,), _check_range)


def _init(ranges: CheckRanges) -> CheckRanges:
    return ranges


def _check_range(
    task: CheckRanges, bounds: tuple[int, int], progress: Progress
) -> tuple[int, U64, F64]:
    """The candidate pairs with codes in ``bounds``: how many, and those that verify."""
    codes = _range_codes(task, *bounds)
    left, right = decoded_pairs(codes, task.texts)
    addresses = task.storage.whole_table(addresses_stem(task.stem))
    # on templated texts nearly every candidate is far from near: its texts' sketches
    # drop it before any shingle set is gathered
    checked = _agreeing(task, addresses, left, right)
    left, right = left[checked], right[checked]
    kept: list[I64] = []
    values: list[F64] = []
    for lo, hi in blocks(left, right, *task.block):
        at, similarity = _check_block(task, addresses, left[lo:hi], right[lo:hi])
        kept.append(checked[at + lo])
        values.append(similarity)
    keep = np.concatenate(kept) if kept else np.zeros(0, np.int64)
    return len(codes), codes[keep], np.concatenate(values) if values else np.zeros(0)


def _range_codes(task: CheckRanges, lo: int, hi: int) -> U64:
    """The distinct codes in [lo, hi) of every candidate task, sorted: each task's are
    sorted, so its range is found by a binary search of its memory-mapped codes."""
    parts = []
    for partition in range(task.partitions):
        table = task.storage.staged_table(partition, _codes_stem(task.stem))
        codes = table[_CODE].to_numpy()
        first = int(np.searchsorted(codes, np.uint64(lo)))
        last = int(np.searchsorted(codes, np.uint64(hi))) if hi < 1 << 64 else len(codes)
        parts.append(np.array(codes[first:last]))  # a copy: the map's pages are let go
    return distinct(np.concatenate(parts)) if parts else np.zeros(0, np.uint64)


def _agreeing(task: CheckRanges, addresses: pa.Table, left: I64, right: I64) -> I64:
    """The places of the pairs whose texts' sketches agree enough for their sets to be
    compared (:func:`~pipeline.dedupe.minhash.agreeing`), as many pairs at a time as
    name :data:`SKETCH_BYTES` of sketches at most: where they are far from near
    (templated texts), no set is gathered."""
    found = [np.zeros(0, np.int64)]
    step = max(SKETCH_BYTES // (2 * task.params.permutations), 1)
    for lo in range(0, len(left), step):
        hi = lo + step
        stored, at_left, at_right = _stored_places(addresses, left[lo:hi], right[lo:hi])
        sketches = _gathered_sketches(task, stored)
        found.append(np.flatnonzero(agreeing(sketches, at_left, at_right, task.params)) + lo)
    return np.concatenate(found)


def _check_block(task: CheckRanges, addresses: pa.Table, left: I64, right: I64) -> tuple[I64, F64]:
    """A block's pairs (text ids) that reach the threshold (places in the block) and
    their similarities: its texts' staged sets gathered in stored order."""
    stored, at_left, at_right = _stored_places(addresses, left, right)
    similarity = set_similarities(_gathered_sets(task, stored), at_left, at_right)
    keep = np.flatnonzero(similarity >= task.params.threshold)
    return keep.astype(np.int64), similarity[keep]


def _stored_places(addresses: pa.Table, left: I64, right: I64) -> tuple[I64, I64, I64]:
    """The rows the pairs' distinct texts are stored at, sorted, and the places among
    them of each pair's left and right text."""
    named, places = distinct_places(np.concatenate([left, right]))
    stored = addresses[STORED].take(pa.array(named, pa.int64())).to_numpy()
    order = np.argsort(stored, kind="stable")
    place = np.empty(len(named), np.int64)
    place[order] = np.arange(len(named), dtype=np.int64)
    return stored[order], place[places[: len(left)]], place[places[len(left) :]]


def _gathered_sketches(task: CheckRanges, stored: I64) -> U8:
    """The staged sketches of the texts stored at rows ``stored`` (sorted), in that
    order."""
    sketches = np.empty((len(stored), task.params.permutations), np.uint8)
    for lo, hi, at, _, sketch in _pieces(task, stored):
        sketches[lo:hi] = _piece_sketches(sketch)[at]
    return sketches


def _gathered_sets(task: CheckRanges, stored: I64) -> Shingles:
    """The staged shingle sets of the texts stored at rows ``stored`` (sorted), in that
    order."""
    counts = np.zeros(len(stored), np.int64)
    hashes: list[U64] = []
    for lo, hi, at, sets, _ in _pieces(task, stored):
        count, found = _piece_sets(sets, at)
        counts[lo:hi] = count
        hashes.append(found)
    offsets = np.zeros(len(stored) + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    return Shingles(np.concatenate(hashes) if hashes else np.zeros(0, np.uint64), offsets)


def _pieces(task: CheckRanges, stored: I64) -> Iterator[tuple[int, int, I64, pa.Array, pa.Array]]:
    """Where the texts stored at rows ``stored`` (sorted) were staged, in the
    memory-mapped files of the sets tasks that staged them (each text's task by its row,
    its piece, a record batch, by the pieces' first rows): for each piece that holds
    some, their span [lo, hi) of ``stored``, their places in the piece, and the piece's
    sets and sketches."""
    owner = np.searchsorted(np.array(task.starts, np.int64), stored, side="right") - 1
    bounds = np.searchsorted(owner, np.arange(len(task.starts) + 1))
    for group in np.flatnonzero(np.diff(bounds)).tolist():
        table = task.storage.staged_table(group, _sets_stem(task.stem))
        rows, sets, sketch = table[STORED].chunks, table[_SHINGLES].chunks, table[_SKETCH].chunks
        firsts = np.array([chunk[0].as_py() for chunk in rows], np.int64)
        lo = int(bounds[group])
        wanted = stored[lo : int(bounds[group + 1])]
        piece = np.searchsorted(firsts, wanted, side="right") - 1
        if len(piece) and piece[0] < 0:
            raise AssertionError("the near check asked for a text that has no staged set")
        edges = np.searchsorted(piece, np.arange(len(rows) + 1)).tolist()
        for index, (first, last) in enumerate(itertools.pairwise(edges)):
            if first < last:
                at = _piece_places(rows[index], wanted[first:last])
                yield lo + first, lo + last, at, sets[index], sketch[index]


def _piece_places(rows: pa.Array, wanted: I64) -> I64:
    """The places of the texts at rows ``wanted`` (sorted) in one staged piece (its
    ``rows``, sorted), found by a binary search."""
    keys = rows.to_numpy()
    if not _found(keys, wanted).all():
        raise AssertionError("the near check asked for a text that has no staged set")
    places: I64 = np.searchsorted(keys, wanted)
    return places


def _piece_sketches(sketches: pa.FixedSizeBinaryArray) -> npt.NDArray[np.uint8]:
    """A staged piece's sketches as rows of bytes (texts × permutations), unread."""
    width = sketches.type.byte_width
    data = np.frombuffer(sketches.buffers()[1], np.uint8)
    start = sketches.offset * width
    return data[start : start + len(sketches) * width].reshape(len(sketches), width)


def _piece_sets(sets: pa.Array, at: I64) -> tuple[I64, U64]:
    """The sizes and hashes of the sets at places ``at`` in one staged piece."""
    offsets = sets.offsets.to_numpy()
    begin, count = offsets[at], offsets[at + 1] - offsets[at]
    return count, sets.values.to_numpy()[np.repeat(begin, count) + ragged_arange(count)]


def _found(among: npt.NDArray[np.int64], values: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
    """Whether each of ``values`` is in ``among`` (sorted), by a binary search of each."""
    if not len(among):
        return np.zeros(len(values), np.bool_)
    at = np.minimum(np.searchsorted(among, values), len(among) - 1)
    found: npt.NDArray[np.bool_] = among[at] == values
    return found
