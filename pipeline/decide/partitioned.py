"""The hash-first checks partition by partition on the engine: the rows whose 64-bit
hash another row shares (:func:`~pipeline.decide.repeats.repeated`), or whose group
holds more than one value (:func:`~pipeline.decide.repeats.varying`), found without
every row's hash in the driver; the rows that seek a key no other row offers, on the
exact keys (a partitioned anti-join: the worker-root rule's); and the rows whose exact
key another row shares, each with its key's first row (exact groups: the review
stage's items), or only the later rows of each such key, each telling whether a second
value (a body) is its first row's too (the replay rule's retries and conflicts), or only
the best-ranked row of each such key in each split, each with the rows it leads
(dedupe's exact groups: :attr:`HashCheck.leads`). A
shuffle through staged files, as near dedupe's candidate search
(:mod:`pipeline.dedupe.partitions`):

1. **shuffle**, a task per shard (:func:`_shuffle_shard`): the check's expressions over
   the shard's staged rows (:func:`evaluate_shard`), the rows kept where ``where`` holds,
   staged as (line, group hash, value hash; or key and whether it seeks) ordered by
   partition (``group % partitions``), a record batch per partition;
2. **find**, a task per partition (:func:`_partition_rows`): that partition's batch of
   every shard (read alone), and the rows of it whose group repeats (or varies; or that
   seek a key no row of it offers).

Equal groups fall in one partition, so each task sees every row of its groups and the
union of the tasks' rows is exactly the rows the check over every row would find: the
same for any partition count, worker count and engine (a test compares them with
:mod:`pipeline.decide.repeats` over every row). The driver holds only the rows found
(their shard, line and group hash) and a mask over its rows; a led check's rows led
and a staged check's later rows it does not hold at all: the partition tasks stage
them, and the driver reads them a block of shards at a time (:class:`StagedRows`). A
shuffle task holds one shard's hashes, a find task one partition's (with one worker
the engine runs the tasks in the driver, a task at a time: one partition's entries,
~64 MiB at most). The hashes
of one row are computed in one process and compared across processes, so every
process runs the same polars (its ``hash`` is stable within a version).
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa

from pipeline.core.arrays import sort_pairs
from pipeline.core.row_local import row_values
from pipeline.decide.repeats import repeated, varying
from pipeline.dedupe.partitions import partitions_for
from pipeline.dedupe.row_keys import sha256s
from pipeline.dedupe.table import ranked
from pipeline.engines import Engine, Progress, Step
from pipeline.storage import RunStorage

__all__ = [
    "BODY",
    "FOLLOWER_ROWS",
    "GROUP",
    "LATER_COLUMNS",
    "LEADERS",
    "RANK",
    "SEEKS",
    "TEXT",
    "VALUE",
    "WHERE",
    "Followers",
    "Found",
    "HashCheck",
    "StagedRows",
    "evaluate_shard",
    "first_rows",
    "group_places",
    "line_set",
    "partition_count",
    "partition_order",
    "shard_tasks",
    "task_lines",
]

I64 = npt.NDArray[np.int64]
U32 = npt.NDArray[np.uint32]
U64 = npt.NDArray[np.uint64]
#: a task of one shard: its index and a set of its lines (:func:`line_set`)
ShardTask = tuple[int, bytes]

#: The check's expressions, by name: the group's 64-bit hash; for a varying check, the
#: value's (neither may be null: refused); and, optionally, which rows take part (a
#: boolean; null: not).
GROUP: Final = "_group"
VALUE: Final = "_value"
WHERE: Final = "_where"
#: A matching check's instead of a value: the exact key (a string, or bytes: a digest;
#: hashed as its group; never null where ``where`` holds), and whether the row seeks it
#: (true) or offers it.
#: A grouping check has the key alone: the rows whose exact key another row shares.
TEXT: Final = "_text"
SEEKS: Final = "_seeks"
#: A grouping check's second exact value, optional (a string or bytes; null equals
#: nothing): the check then finds only the later rows of each key another row shares,
#: each telling whether its body is its key's first row's, the first row being their
#: group (the replay rule's retries: a record digest under a submission key).
BODY: Final = "_body"
#: A led check's value its rows are ranked by (:attr:`HashCheck.leader` ``max`` or
#: ``min``): any type :func:`~pipeline.dedupe.table.ranked_values` orders; a null or NaN
#: ranks last.
RANK: Final = "_rank"
#: Which row of a key and label leads, as the survivor rules name them: its first or
#: last in the stable order key, or its best by :data:`RANK` (``max``, ``min``; ties
#: by that order).
LEADERS: Final = ("first", "last", "max", "min")
#: A grouping check's group of a row found: its key's first row in the stable order key,
#: as its shard's position among the check's shards and its line (:func:`first_rows`).
_LINE_BITS: Final = 40


#: Consecutive staged batches are evaluated together until they hold this many rows or
#: bytes: each polars call costs ~0.9 ms, so a shard staged in batches of one row took
#: ~20 times as long as read whole
_EVALUATED_ROWS: Final = 4096
_EVALUATED_BYTES: Final = 16 << 20


def evaluate_shard(
    storage: RunStorage,
    shard: int,
    stem: str,
    exprs: Mapping[str, pl.Expr],
    *,
    within: I64 | None = None,
    without: I64 | None = None,
) -> pl.DataFrame:
    """``exprs`` over one shard's staged file ``stem``: a frame of ``_shard``,
    ``_shard_line`` and one column per expression, in line order. An expression may read
    ``_shard`` (the shard's number: what a row's input and split are known by).

    Each expression's value for a row reads that row alone (every expression rowgate
    evaluates here, the campaign's bindings included), so the file is read a few staged
    batches at a time (:data:`_EVALUATED_ROWS`): the columns read take that much memory,
    not a shard's (the contradiction rule's texts: ~100 MB of a 67 MB shard, half as
    polars holds them and half the mapped file's pages), and each piece is evaluated by
    :func:`~pipeline.core.row_local.row_values`. Only the rows of lines ``within`` (where
    given) and of none of the lines ``without`` are evaluated: as an expression reads its
    row alone, leaving a row out first is leaving its values out after, without the
    cost of computing them (a long text built for a few rows found)."""
    frames = []
    columns = _read_columns(storage, shard, stem, exprs)
    by_shard = "_shard" in columns
    columns = [c for c in columns if c != "_shard"]
    batches = storage.staged_column_batches(shard, stem, columns)
    for piece in _pieces(batches):
        # copied: a column still pointing into the batch's map would keep every page
        # the expressions read resident
        lines = np.array(piece.column("_shard_line"), dtype=np.int64)
        if within is not None or without is not None:
            kept = np.ones(len(lines), np.bool_)
            if within is not None:
                kept &= np.isin(lines, within)
            if without is not None:
                kept &= ~np.isin(lines, without)
            if not kept.any():
                continue
            piece, lines = piece.filter(pa.array(kept)), lines[kept]
        if by_shard:
            piece = piece.append_column("_shard", pa.array(np.full(len(lines), shard, np.int32)))
        values = row_values(piece, exprs)
        frames.append(
            values.select(
                pl.lit(shard, pl.Int32).alias("_shard"),
                pl.Series("_shard_line", lines),
                pl.all(),
            )
        )
    if frames:
        return pl.concat(frames)
    # no batch, or no row evaluated: the empty frame, typed
    return (
        storage.scan_staged(shard, stem)
        .head(0)
        .with_columns(pl.lit(shard, pl.Int32).alias("_shard"))  # an expression may read it
        .select(
            "_shard",
            pl.col("_shard_line"),
            *(expr.alias(name) for name, expr in exprs.items()),
        )
        .collect()
    )


def _read_columns(
    storage: RunStorage, shard: int, stem: str, exprs: Mapping[str, pl.Expr]
) -> list[str]:
    """The staged columns ``exprs`` read: those they name, or every column where one
    selects columns by pattern (``COLUMNS('^pref')``: polars names no root column)."""
    if any('"Selector"' in e.meta.serialize(format="json") for e in exprs.values()):
        return list(storage.staged_table(shard, stem).schema.names)
    return sorted({"_shard_line"} | {c for e in exprs.values() for c in e.meta.root_names()})


def _pieces(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Consecutive ``batches`` as one, up to :data:`_EVALUATED_ROWS` rows or
    :data:`_EVALUATED_BYTES` bytes at a time (a batch larger than that alone)."""
    pending: list[pa.RecordBatch] = []
    rows = size = 0
    for batch in batches:
        pending.append(batch)
        rows, size = rows + batch.num_rows, size + batch.nbytes
        if rows >= _EVALUATED_ROWS or size >= _EVALUATED_BYTES:
            yield _joined(pending)
            pending, rows, size = [], 0, 0
    if pending:
        yield _joined(pending)


def _joined(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    """``batches`` as one; a lone batch as it is (joining copies it)."""
    return batches[0] if len(batches) == 1 else pa.concat_batches(batches)


@dataclass(frozen=True)
class Found:
    """The rows a check found: their shards, lines and group hashes, in no order."""

    shards: npt.NDArray[np.int32]
    lines: I64
    groups: U64
    #: a grouping check's with a :data:`BODY`: whether each row's body is its group's
    #: first row's
    same: npt.NDArray[np.bool_] | None = None
    #: a led check's (:attr:`HashCheck.leads`): how many rows each row found leads, itself
    #: included, and the rows it leads, apart
    led: npt.NDArray[np.int64] | None = None
    followers: Followers | None = None
    #: a staged check's (:attr:`HashCheck.staged`): the later rows it found, staged by
    #: the partition tasks instead (``shards``, ``lines`` and ``groups`` then empty)
    later: StagedRows | None = None


#: the staged files :meth:`StagedRows.blocks` maps at once: more are first merged, this
#: many into one (a process may hold 65,530 maps by default, Linux's
#: ``vm.max_map_count``: measured, the 65,269th map of a staged file failed)
MAPPED_FILES: Final = 4096
#: a merged file's column: the place of the file each row came from
_FILE: Final = "_file"
#: the rows a driver reads at a time of what a check's partition tasks staged
#: (:meth:`StagedRows.blocks`): a block of shards' rows from every partition's file, a
#: shard's at least
FOLLOWER_ROWS: Final = 1 << 16


@dataclass(frozen=True)
class StagedRows:
    """Rows a check's partition tasks staged instead of returning them (a file of the
    whole run's staging area each, ``stems``, of ``counts`` rows), each with its shard's
    position among the check's shards (``_position``) and its line, in that order (the
    entries' order: the stable order key). Read a block of shards at a time from every
    file (:meth:`blocks`), the driver holds a block's rows, not every row's."""

    stems: tuple[str, ...] = ()
    counts: tuple[int, ...] = ()

    @classmethod
    def joined(cls, parts: Iterable[StagedRows]) -> StagedRows:
        """``parts``' files as one set, in their order."""
        files = [
            (stem, count)
            for part in parts
            for stem, count in zip(part.stems, part.counts, strict=True)
        ]
        return cls(tuple(s for s, _ in files), tuple(c for _, c in files))

    def __len__(self) -> int:
        return sum(self.counts)

    def blocks(
        self, storage: RunStorage, shards: int, columns: Sequence[str]
    ) -> Iterator[tuple[dict[str, npt.NDArray[Any]], I64]]:
        """The staged rows' ``columns`` (``_position`` and ``_shard_line`` always; a
        check of ``shards`` shards), a block of shards at a time: each block's rows of
        about :data:`FOLLOWER_ROWS` from every file, in the stable order key, and each
        row's file (its place in :attr:`stems`). The files are memory-mapped, and each
        file's piece of a block is found by a binary search on its positions, so a
        shard's rows are read once however many files hold them. More files than
        :data:`MAPPED_FILES` are first merged, that many at a time (:meth:`_merged`)."""
        names = list(dict.fromkeys(["_position", "_shard_line", *columns]))
        if len(self.stems) <= MAPPED_FILES:
            yield from self._mapped_blocks(storage, shards, names)
            return
        merged = self._merged(storage, shards, names)
        for block, _ in merged._mapped_blocks(storage, shards, [*names, _FILE]):
            files = block.pop(_FILE)
            yield block, files

    def _mapped_blocks(
        self, storage: RunStorage, shards: int, names: list[str]
    ) -> Iterator[tuple[dict[str, npt.NDArray[Any]], I64]]:
        """:meth:`blocks` of every file mapped at once, read a record batch at a time: a
        file written a block at a time (a merged one) is many batches, whose positions,
        joined, were a copy of every row's (4 bytes a row); each batch's are the file's
        pages."""
        pieces = [
            (i, pa.Table.from_batches([batch]))
            for i, stem in enumerate(self.stems)
            for batch in storage.whole_table(stem).to_batches()
            if batch.num_rows
        ]
        positions = [_column(table, "_position") for _, table in pieces]
        if any(bool((p[1:] < p[:-1]).any()) for p in positions):
            raise AssertionError("a partition's staged rows out of the shards' order")
        per_shard = np.zeros(shards, np.int64)
        for position in positions:
            per_shard += np.bincount(position, minlength=shards)
        lowest = np.array([int(p[0]) for p in positions], np.int64)
        highest = np.array([int(p[-1]) for p in positions], np.int64)
        for first, last in _blocks(per_shard, FOLLOWER_ROWS):
            got = []
            for k in np.flatnonzero((lowest < last) & (highest >= first)).tolist():
                (i, table), position = pieces[k], positions[k]
                a, b = (int(j) for j in np.searchsorted(position, [first, last]))
                if b > a:
                    got.append((i, table.slice(a, b - a)))
            block = {n: np.concatenate([_column(t, n) for _, t in got]) for n in names}
            files = np.repeat([i for i, _ in got], [t.num_rows for _, t in got]).astype(np.int64)
            del got
            # a block's rows in the stable order key
            order = np.lexsort((block["_shard_line"], block["_position"]))
            yield {n: block[n][order] for n in names}, files[order]

    def _merged(self, storage: RunStorage, shards: int, names: list[str]) -> StagedRows:
        """The files merged into at most :data:`MAPPED_FILES`, each of consecutive files
        (as many as a merged file takes) read a block at a time and staged in the
        stable order key, each row with its file's place among :attr:`stems`
        (``_file``)."""
        size = -(-len(self.stems) // MAPPED_FILES)  # files a merged file takes
        if size > MAPPED_FILES:
            raise ValueError(f"{len(self.stems)} staged files: more than {MAPPED_FILES}**2")
        schema = storage.whole_table(self.stems[0]).schema
        merged = pa.schema([*(schema.field(n) for n in names), pa.field(_FILE, pa.int64())])
        stems, counts = [], []
        for lo in range(0, len(self.stems), size):
            group = StagedRows(self.stems[lo : lo + size], self.counts[lo : lo + size])
            stem = f"{group.stems[0]}.merged"
            with storage.whole_writer(stem, merged) as writer:
                for block, files in group._mapped_blocks(storage, shards, names):
                    columns = [*(block[n] for n in names), lo + files]
                    writer.write_batch(pa.record_batch(columns, schema=merged))
            stems.append(stem)
            counts.append(len(group))
        return StagedRows(tuple(stems), tuple(counts))


@dataclass(frozen=True)
class Followers(StagedRows):
    """The rows a led check (:attr:`HashCheck.leads`) does not find but gives their
    leader, staged by the partition task that found them (:class:`StagedRows`), each
    with its leader's place among the rows the partition found (``_leader``; ``bases``:
    the rows the partitions before found, in the order :meth:`HashCheck.run` joins
    them). Returned through the engine, every row led was received at once (20 bytes,
    and as much again while the partitions' were joined) and placed at once (~40 bytes
    of temporaries): the keys' read peak of a run's dedupe on an export of half
    copies."""

    bases: tuple[int, ...] = ()

    @classmethod
    def of(cls, parts: Sequence[Followers], bases: Sequence[int]) -> Followers:
        """``parts`` (a partition's each), whose partitions found ``bases`` rows before."""
        files = [(f, base) for f, base in zip(parts, bases, strict=True) if f.stems]
        joined = StagedRows.joined(f for f, _ in files)
        return cls(joined.stems, joined.counts, tuple(b for f, b in files for _ in f.stems))

    def placed(
        self,
        storage: RunStorage,
        shards: Sequence[int],
        rows_at: Callable[[npt.NDArray[np.int32], I64], I64],
        leaders_at: Callable[[I64], I64],
        bound: int,
    ) -> tuple[I64, I64]:
        """Each row led's place and its leader's (``rows_at`` their shards and lines,
        ``leaders_at`` their leaders' places among the rows found: places below
        ``bound``), ascending by the row's. Read a block of the check's ``shards`` at a
        time (:meth:`StagedRows.blocks`) into the two arrays, 16 bytes a row led: each
        block's rows are placed at once, so the state's run of each shard is read once
        however many files hold its rows (placed a file's slice at a time, a slice read
        the runs of every shard it touched: at 16,384 shards, ~0.15 s a slice). Where
        the rows do not come out ascending (a state out of the order key), the two are
        sorted together in place (:func:`~pipeline.core.arrays.sort_pairs`)."""
        rows, leaders = np.empty(len(self), np.int64), np.empty(len(self), np.int64)
        shard_of = np.asarray(shards, np.int32)  # a position's shard
        bases = np.asarray(self.bases, np.int64)
        lo = 0
        for block, files in self.blocks(storage, len(shards), ["_leader"]):
            hi = lo + len(files)
            rows[lo:hi] = rows_at(shard_of[block["_position"]], block["_shard_line"])
            leaders[lo:hi] = leaders_at(bases[files] + block["_leader"])
            lo = hi
        if lo != len(rows):
            raise AssertionError(f"{lo} rows led read of {len(rows)} staged")  # never expected
        if len(rows) > 1 and not bool((rows[1:] > rows[:-1]).all()):
            sort_pairs(rows, leaders, bound)
        return rows, leaders


def _blocks(counts: I64, rows: int) -> Iterator[tuple[int, int]]:
    """Consecutive ranges ``[first, last)`` of the items ``counts`` counts (shards, rows
    led in each) of about ``rows`` rows each: an item that has more alone; none of no
    row."""
    cumulative = np.cumsum(counts)
    first = 0
    while first < len(counts):
        before = int(cumulative[first - 1]) if first else 0
        last = int(np.searchsorted(cumulative, before + rows, side="right"))
        last = max(last, first + 1)
        if int(cumulative[last - 1]) > before:
            yield first, last
        first = last


def _column(table: pa.Table, name: str) -> npt.NDArray[np.int64]:
    """A staged column of integers as an array (over the file's pages where it is one
    chunk)."""
    return np.asarray(table[name].to_numpy())


#: a staged file of rows led (:class:`Followers`): its shard's position among the
#: check's shards, its line and its leader's place among the partition's rows found
_FOLLOWER_COLUMNS: Final = ("_position", "_shard_line", "_leader")
#: a staged check's file of later rows (:attr:`HashCheck.staged`): its shard's position
#: and line, its key's first row (its group: :func:`first_rows`), whether its body is
#: that row's, how many rows its key has and how many of its later rows' bodies differ
LATER_COLUMNS: Final = ("_position", "_shard_line", "_first", "_same", "_rows", "_conflicts")


@dataclass(frozen=True)
class HashCheck:
    """One check, as every task needs it: where the kind's rows are staged (``shards``,
    in the stable order key), its expressions serialized (they travel to the workers and
    compare by value), and the partition count."""

    storage: RunStorage
    kind: str
    name: str
    shards: tuple[int, ...]
    exprs: tuple[tuple[str, bytes], ...]
    partitions: int
    #: the staged stem the expressions read: the kind's rows, or a file staged beside
    #: them (its row keys)
    source: str = ""
    #: the keys (:data:`TEXT`) are staged and compared as their SHA-256 (32 bytes), not
    #: as they are (a long text: a review's subject)
    digested: bool = False
    #: a grouping check's label of each of ``shards`` (a split's): where given, the rows
    #: of a key that share a label are led by their first, and only the leaders of
    #: the keys another row shares are found, each with how many rows it leads; the
    #: others are returned apart with their leader (:class:`Followers`)
    leads: tuple[int, ...] = ()
    #: which row of a key and label leads (:data:`LEADERS`): the survivor rule's
    #: best-ranked row
    leader: str = "first"
    #: a grouping check with a body: its partition tasks stage the later rows they find
    #: (:data:`LATER_COLUMNS`: with their keys' counts) for the driver to read a block of
    #: shards at a time (:attr:`Found.later`), instead of returning them
    staged: bool = False

    @classmethod
    def of(
        cls,
        storage: RunStorage,
        kind: str,
        name: str,
        shards: tuple[int, ...],
        exprs: Mapping[str, pl.Expr],
        *,
        partitions: int,
        source: str | None = None,
        digested: bool = False,
        leads: Sequence[int] = (),
        leader: str = "first",
        staged: bool = False,
    ) -> HashCheck:
        """The check of ``exprs`` (by :data:`GROUP`, :data:`VALUE` or :data:`TEXT` and
        :data:`SEEKS` or :data:`BODY`, :data:`WHERE`) over ``kind``'s rows in ``shards``
        (or over ``source``, a stem staged beside them), its entries staged as
        ``<kind>.hash-<name>``; ``digested``: the keys (strings) as their SHA-256;
        ``leads``: a grouping check's label of each shard (:attr:`leads`), its rows led by
        the ``leader`` of a key and label (:data:`LEADERS`; ``max`` and ``min`` rank
        them by a :data:`RANK` expression); ``staged``: a grouping check with a body
        stages the later rows it finds (:attr:`staged`)."""
        allowed = (
            {GROUP},
            {GROUP, VALUE},
            {GROUP, TEXT},
            {GROUP, TEXT, SEEKS},
            {GROUP, TEXT, BODY},
        )
        shape = set(exprs) - {WHERE}
        if shape - {RANK} not in allowed:
            raise ValueError(
                f"a hash check's expressions are {GROUP}, optionally {VALUE} or {TEXT} "
                f"(and {SEEKS} or {BODY}), and optionally {WHERE}: not {sorted(exprs)}"
            )
        if leader not in LEADERS:
            raise ValueError(f"a led check's leader is one of {LEADERS}: not {leader!r}")
        ranked = leader in ("max", "min")
        led = {GROUP, TEXT, RANK} if ranked else {GROUP, TEXT}
        if (RANK in shape or leads) and (not leads or shape != led or len(leads) != len(shards)):
            raise ValueError(
                f"a led check groups by a key alone ({RANK} too where max or min leads), "
                "with a label for each shard"
            )
        if staged and shape != {GROUP, TEXT, BODY}:
            raise ValueError("a staged check is a grouping check with a body")
        serialized = tuple((n, e.meta.serialize(format="binary")) for n, e in exprs.items())
        return cls(
            storage,
            kind,
            name,
            shards,
            serialized,
            partitions,
            source or kind,
            digested,
            tuple(leads),
            leader,
            staged,
        )

    @property
    def varying(self) -> bool:
        """Whether the check finds varying groups (it has a value), not repeats."""
        return any(name == VALUE for name, _ in self.exprs)

    @property
    def matching(self) -> bool:
        """Whether the check finds the rows seeking a key no row offers."""
        return any(name == SEEKS for name, _ in self.exprs)

    @property
    def grouping(self) -> bool:
        """Whether the check finds the rows whose exact key another row shares, each
        with its key's first row as its group (:func:`first_rows`)."""
        return any(name == TEXT for name, _ in self.exprs) and not self.matching

    @property
    def stem(self) -> str:
        """The staged stem of a shard's entries of this check."""
        return f"{self.kind}.hash-{self.name}"

    def expressions(self) -> dict[str, pl.Expr]:
        """The check's expressions, deserialized (in a worker: once a task)."""
        return {n: pl.Expr.deserialize(io.BytesIO(b), format="binary") for n, b in self.exprs}

    @property
    def bodied(self) -> bool:
        """Whether the grouping check finds only the later rows of a key, each telling
        whether its body is its group's first row's."""
        return any(name == BODY for name, _ in self.exprs)

    def run(self, engine: Engine, lines: Mapping[int, bytes] | None = None) -> Found:
        """The rows the check finds, from a shuffle task per shard and a find task per
        partition on ``engine``; no row of a shard's ``lines`` takes part (each shuffle
        task is given its shard's alone: the check goes with every task)."""
        engine.map(Step(_init, (self,), _shuffle_shard), shard_tasks(self.shards, lines))
        found = engine.map(Step(_init, (self,), _partition_rows), range(self.partitions))
        same = [f.same for f in found if f.same is not None]
        led = [f.led for f in found if f.led is not None]
        return Found(
            np.concatenate([f.shards for f in found]),
            np.concatenate([f.lines for f in found]),
            np.concatenate([f.groups for f in found]),
            np.concatenate(same) if self.bodied and not self.staged else None,
            np.concatenate(led) if self.leads else None,
            Followers.of(
                [f.followers or Followers() for f in found],
                np.cumsum([0, *(len(f.lines) for f in found)])[:-1].tolist(),
            )
            if self.leads
            else None,
            StagedRows.joined(f.later for f in found if f.later is not None)
            if self.staged
            else None,
        )


def shard_tasks(shards: Sequence[int], lines: Mapping[int, bytes] | None) -> list[ShardTask]:
    """A task per shard: the shard and its own set of ``lines`` (:func:`line_set`; none:
    empty). A step goes with every task, so lines of every shard put on it would be sent
    once a shard; each task carries its own (:func:`task_lines` reads them)."""
    given = lines or {}
    return [(s, given.get(s, b"")) for s in shards]


def line_set(lines: I64) -> bytes:
    """Distinct ``lines`` of one shard as a task carries them: a bitmap over the line
    numbers or the lines as int64 values, whichever is smaller. A bitmap holds a shard's
    set at 1/8 byte a line of it, however many lines the set has: the rows a check
    leaves out (the gate's rejects, a rule's removed rows, dedupe's rows no longer
    accepted) cost 8 bytes each as values."""
    if not len(lines):
        return b""
    top = int(lines.max())
    if top // 8 + 1 < 8 * len(lines):
        bits = np.zeros(top + 1, np.bool_)
        bits[lines] = True
        return b"B" + np.packbits(bits).tobytes()
    return b"L" + np.asarray(lines, np.int64).tobytes()


def task_lines(task: ShardTask) -> pl.Series:
    """The lines a :func:`shard_tasks` task carries, ascending where a bitmap carried
    them."""
    data = task[1]
    if not data:
        return pl.Series("_shard_line", [], pl.Int64)
    body = np.frombuffer(data, np.uint8)[1:]
    if data[:1] == b"B":
        return pl.Series("_shard_line", np.flatnonzero(np.unpackbits(body)).astype(np.int64))
    return pl.Series("_shard_line", body.copy().view(np.int64))  # copied: aligned


def partition_count(rows: int, hashes: int, workers: int, shards: int, given: int | None) -> int:
    """A check's partitions: :func:`~pipeline.dedupe.partitions.partitions_for` its
    entries, ``rows`` × a line and ``hashes`` hashes (8 bytes each), no more than its
    rows."""
    return partitions_for(rows * 8 * (1 + hashes), workers, shards, given, rows)


def partition_order(hashes: U64, partitions: int) -> tuple[I64, list[int]]:
    """The order that puts a shuffle task's entries by partition (``hash % partitions``;
    within one, as they came), and where each partition's entries start and the last
    ends, as :meth:`~pipeline.storage.RunStorage.stage_partitions` takes them."""
    partition = hashes % np.uint64(partitions)
    order = np.argsort(partition, kind="stable")
    starts = np.searchsorted(partition[order], np.arange(partitions + 1, dtype=np.uint64))
    return order, starts.tolist()


def _init(check: HashCheck) -> HashCheck:
    return check


def _shuffle_shard(check: HashCheck, task: ShardTask, progress: Progress) -> int:
    """Stage the shard's (line, group, value) entries where ``where`` holds, but its
    lines left out (:func:`shard_tasks`), ordered by partition, a record batch per
    partition (empty ones too); returns how many."""
    shard, lines = task
    left_out = task_lines(task).to_numpy() if lines else None
    frame = evaluate_shard(
        check.storage, shard, check.source, check.expressions(), without=left_out
    )
    if WHERE in frame.columns:
        frame = frame.filter(pl.col(WHERE).fill_null(False))
    for name in (GROUP, VALUE, TEXT):
        if name in frame.columns and frame[name].null_count():
            # numpy has no null integer: the column would become floats, whose
            # rounding makes distinct hashes equal
            raise ValueError(f"{check.kind}: {check.name}: a {name} hash is null")
    group = frame[GROUP].to_numpy().astype(np.uint64, copy=False)
    order, starts = partition_order(group, check.partitions)
    columns = {
        "_shard_line": pa.array(frame["_shard_line"].to_numpy()[order], pa.int64()),
        GROUP: pa.array(group[order], pa.uint64()),
    }
    if check.varying:
        value = frame[VALUE].to_numpy().astype(np.uint64, copy=False)
        columns[VALUE] = pa.array(value[order], pa.uint64())
    if check.matching or check.grouping:
        text = _key_text(frame[TEXT]).gather(order).to_arrow()
        columns[TEXT] = sha256s(text) if check.digested else text
    if check.bodied:
        columns[BODY] = _key_text(frame[BODY]).gather(order).to_arrow()
    if check.matching:
        columns[SEEKS] = pa.array(frame[SEEKS].fill_null(False).to_numpy()[order], pa.bool_())
    if RANK in frame.columns:
        columns[RANK] = frame[RANK].gather(order).to_arrow()
    check.storage.stage_partitions(shard, check.stem, pa.record_batch(columns), starts)
    return len(group)


def _partition_rows(check: HashCheck, partition: int, progress: Progress) -> Found:
    """The rows of ``partition`` (its batch of every shard's entries, read alone) whose
    group another row shares, or, for a varying check, holds another value (a matching
    check: that seek a key none offers; a grouping check: whose key another row shares,
    with its first row as their group, and with a body only the later rows of a key,
    each telling whether its body is the first row's)."""
    entries = _Entries.read(check, partition)
    batches, sizes, group, lines = entries
    same = None
    if check.varying:
        value: U64 = np.concatenate([b[VALUE].to_numpy() for b in batches])
        hit = varying(group, value).to_numpy()
    elif check.matching:
        hit = _unmatched(batches)
    elif check.leads:
        return _led_rows(check, partition, entries)
    elif check.staged:
        return _later_rows(check, partition, entries)
    elif check.grouping:
        hit, group, same, _ = _exact_groups(batches, group, group_places(sizes, lines))
    else:
        hit = repeated(group).to_numpy()
    shards = np.repeat(np.array(check.shards, np.int32), sizes)
    return Found(shards[hit], lines[hit], group[hit], None if same is None else same[hit])


class _Entries(NamedTuple):
    """A partition's entries of every shard (:func:`_shuffle_shard`): a batch a shard,
    in the check's shard order (the stable order key), their sizes, and their groups
    and lines joined."""

    batches: list[pa.RecordBatch]
    sizes: list[int]
    group: U64
    lines: I64

    @classmethod
    def read(cls, check: HashCheck, partition: int) -> _Entries:
        """``partition``'s batch of every shard's entries, each read alone."""
        stem = check.stem
        batches = [check.storage.staged_partition(s, stem, partition) for s in check.shards]
        group: U64 = np.concatenate([b[GROUP].to_numpy() for b in batches])
        lines: I64 = np.concatenate([b["_shard_line"].to_numpy() for b in batches])
        return cls(batches, [b.num_rows for b in batches], group, lines)


def _later_rows(check: HashCheck, partition: int, entries: _Entries) -> Found:
    """A staged check's partition (:attr:`HashCheck.staged`): the later rows of each key
    another row shares, with their keys' first rows, whether their bodies are those
    rows', and their keys' counts (:func:`_exact_groups`), staged in the entries' order
    (the stable order key) for the driver to read a block of shards at a time
    (:class:`StagedRows`). Returned through the engine, every row found was received at
    once (33 bytes, and as much again while the partitions' were joined) and placed
    among the state's rows at once: the cross-record rules' peak on an export of 30 %
    retries."""
    batches, sizes, group, lines = entries
    hit, first, same, counts = _exact_groups(
        batches, group, group_places(sizes, lines), counted=True
    )
    assert same is not None  # a check with a body tells it
    assert counts is not None  # and counted
    at = np.flatnonzero(hit)
    empty = np.zeros(0, np.int64)
    found = Found(empty.astype(np.int32), empty, empty.astype(np.uint64), later=StagedRows())
    if not len(at):
        return found
    stem = f"{check.stem}.later-{partition}"
    position = np.repeat(np.arange(len(sizes), dtype=np.int32), sizes)[at]
    columns = (position, lines[at], first[at], same[at], counts[0][at], counts[1][at])
    check.storage.stage_whole(stem, pa.table(dict(zip(LATER_COLUMNS, columns, strict=True))))
    return dataclasses.replace(found, later=StagedRows((stem,), (len(at),)))


def _led_rows(check: HashCheck, partition: int, entries: _Entries) -> Found:
    """A led check's partition (:attr:`HashCheck.leads`): of the keys another row
    shares, each label's best-ranked row (the leader, :attr:`HashCheck.leader`: entries
    are in the stable order key, which breaks ties), its group (its key's first row's
    place) and how many rows of its key and label it leads; the others apart, each with
    its leader's place among the rows found here, staged in the entries' order for the
    driver to read a block of shards at a time (:class:`Followers`). Only keys whose
    hash repeats are compared (equal keys share a partition)."""
    batches, sizes, group, lines = entries
    shards = np.repeat(np.array(check.shards, np.int32), sizes)
    place = group_places(sizes, lines)
    at = np.flatnonzero(repeated(group).to_numpy())
    label = np.repeat(np.array(check.leads, np.int64), sizes)[at]
    text = pl.concat([_key_text(pl.Series(b[TEXT])) for b in batches]).gather(at)
    rank = _ranks(check.leader, batches, at)
    i = pl.col("i")
    found = (
        pl.DataFrame({"t": text, "s": label, "r": rank})
        .with_row_index("i")
        .select(
            first=i.first().over("t"),
            rows=i.count().over("t"),
            best=pl.col("r").min().over("t", "s"),
            led=i.count().over("t", "s"),
        )
    )
    first, rows, best, led = (found[c].to_numpy().astype(np.int64) for c in found.columns)
    by_rank = np.empty(len(at), np.int64)
    by_rank[rank] = np.arange(len(at), dtype=np.int64)
    lead = by_rank[best]
    shared = rows > 1
    leader = shared & (lead == np.arange(len(at)))
    follower = shared & ~leader
    hit, follows = at[leader], at[follower]
    followers = Followers()
    if len(follows):
        stem = f"{check.stem}.led-{partition}"
        # in the entries' order (the stable order key), each with its leader's place
        # among the rows found here (the leaders, in that order too)
        of_leader = np.cumsum(leader) - 1
        position = np.repeat(np.arange(len(sizes), dtype=np.int32), sizes)[follows]
        columns = (position, lines[follows], of_leader[lead[follower]])
        check.storage.stage_whole(
            stem, pa.table(dict(zip(_FOLLOWER_COLUMNS, columns, strict=True)))
        )
        followers = Followers((stem,), (len(follows),))
    return Found(shards[hit], lines[hit], place[at[first[leader]]], None, led[leader], followers)


def _ranks(leader: str, batches: list[pa.RecordBatch], at: I64) -> I64:
    """The survivor ranks (0 the best; distinct) of a led partition's entries ``at``, in
    the stable order key: by their order (``first``, ``last``) or by their :data:`RANK`
    values (``max``, ``min``), ties by order, as :func:`~pipeline.dedupe.table.ranked`
    ranks every row (:func:`~pipeline.dedupe.table.survivor_rank`): the same order
    restricted to these entries."""

    def values() -> pl.Series:
        # a type every shard's fits (a shard whose values are all null may stage them
        # untyped)
        frames = [pl.DataFrame([pl.Series("v", b[RANK])]) for b in batches]
        return pl.concat(frames, how="vertical_relaxed")["v"].gather(at)

    return ranked(leader, len(at), values)


def _exact_groups(
    batches: list[pa.RecordBatch], group: U64, place: U64, *, counted: bool = False
) -> tuple[npt.NDArray[np.bool_], U64, npt.NDArray[np.bool_] | None, tuple[U32, U32] | None]:
    """Which rows of a partition's ``batches`` share their exact key with another (equal
    keys share a partition; only keys whose hash repeats are compared), each row's
    group: the ``place`` of its key's first row (the entries are in the stable order key:
    the shards' batches in shard order, a shard's lines ascending). Where the batches
    hold a :data:`BODY`, only the later rows of a key are found, each telling whether its
    body is its key's first row's (the first row is their group), and, ``counted``, how
    many rows its key has and how many of them are later rows whose body is not the
    first's (the replay rule's detail: counted in the driver, by numbering every later
    row's key, they held ~27 bytes a retry at the cross-record rules' peak)."""
    bodied = BODY in batches[0].schema.names
    hit = repeated(group).to_numpy()
    if not hit.any():
        if not bodied:
            return hit, group, None, None
        none = np.zeros(len(hit), np.uint32)
        return hit, group, np.zeros(len(hit), np.bool_), (none, none) if counted else None
    at = np.flatnonzero(hit)
    text = pl.concat([_key_text(pl.Series(b[TEXT])) for b in batches]).gather(at)
    first = pl.DataFrame({"t": text}).with_row_index("i").select(pl.col("i").first().over("t"))
    firsts = at[first.to_series().to_numpy().astype(np.int64)]
    shared = firsts != at  # not the first of its key
    keyed = np.zeros(len(hit), np.bool_)
    keyed[at] = shared
    groups = group.copy()
    groups[at] = place[firsts]
    if not bodied:
        keyed[firsts[shared]] = True  # a first row another row shares
        return keyed, groups, None, None
    body = pl.concat([_key_text(pl.Series(b[BODY])) for b in batches])
    same = np.zeros(len(hit), np.bool_)
    same[at] = (body.gather(at) == body.gather(firsts)).fill_null(False).to_numpy()
    if not counted:
        return keyed, groups, same, None
    differs = pl.Series(shared & ~same[at])  # a later row whose body is not the first's
    tallied = pl.DataFrame({"t": text, "d": differs}).select(
        n=pl.len().over("t"), d=pl.col("d").sum().over("t")
    )
    key_rows, conflicts = np.zeros(len(hit), np.uint32), np.zeros(len(hit), np.uint32)
    key_rows[at], conflicts[at] = tallied["n"].to_numpy(), tallied["d"].to_numpy()
    return keyed, groups, same, (key_rows, conflicts)


def _key_text(keys: pl.Series) -> pl.Series:
    """Exact keys as one type whatever their batch's (a string view, a large string):
    strings as strings, bytes (a digest) as bytes."""
    return keys if keys.dtype == pl.Binary else keys.cast(pl.String)


def group_places(sizes: Sequence[int], lines: I64) -> U64:
    """Each entry's place as a grouping check's group: its shard's position (entries
    come ``sizes`` a shard, in the check's shard order) and its line, in 64 bits; a line
    or a shard count the bits cannot hold is refused, never wrapped into another's."""
    top = int(lines.max()) if len(lines) else 0
    if top < 0 or top >> _LINE_BITS or len(sizes) >> (64 - _LINE_BITS):
        raise ValueError(f"{len(sizes)} shards or line {top}: past a group's 64 bits")
    position = np.repeat(np.arange(len(sizes), dtype=np.uint64), sizes)
    place: U64 = (position << np.uint64(_LINE_BITS)) | lines.astype(np.uint64)
    return place


def first_rows(shards: Sequence[int], groups: U64) -> tuple[npt.NDArray[np.int32], I64]:
    """A grouping check's groups as their first rows' shards and lines."""
    positions = (groups >> np.uint64(_LINE_BITS)).astype(np.int64)
    lines = (groups & np.uint64((1 << _LINE_BITS) - 1)).astype(np.int64)
    return np.asarray(shards, np.int32)[positions], lines


def _unmatched(batches: list[pa.RecordBatch]) -> npt.NDArray[np.bool_]:
    """Which rows of a partition's ``batches`` seek a key that none of them offers,
    compared on the keys themselves (equal keys share a partition)."""
    seeks = np.concatenate([b[SEEKS].to_numpy(zero_copy_only=False) for b in batches])
    text = pl.concat([_key_text(pl.Series(b[TEXT])) for b in batches])
    offered = text.filter(pl.Series(~seeks)).unique()
    matched: npt.NDArray[np.bool_] = text.is_in(offered.implode()).to_numpy()
    return seeks & ~matched
