"""The global phase: decisions that need the whole run, vectorised in polars (DESIGN §1).

It never re-parses JSON. It reads compact columns of every shard's staged rows
(memory-mapped Arrow IPC), runs the registered :class:`GlobalStage` plug-ins in order
(cross-record rules, then dedupe, then scoring and policy), and hands the writer one
decision table per kind and shard. Each stage sees the dispositions left by the stages
before it (and every reason code so far, if it asks: ``reads_reason_codes``), and the
extra columns they returned that are declared ``carried`` (the policy reads the scores),
and returns rows only for what it changes or annotates.

A stage's result is a polars frame keyed by ``_shard`` and ``_shard_line`` with any of:

* ``_disposition``: the row's new disposition (a :class:`Disposition` value);
* ``_reasons_add``: reasons to append, a list of ``{code, path, detail}`` structs;
* the extra output columns the stage declared in :meth:`GlobalStage.output_columns`.

Memory: the whole-run stages run in the parent over every row of the run, so what they
hold per row is what grows with the input. The row-local stages after them (scoring, the
policy) and the merge of every stage's decisions run a task per shard on the engine
(:mod:`pipeline.decide.by_shard`): their scores and decisions never reach the parent.
The state is :data:`STATE_COLUMNS` (13 bytes a row; a stage that reads the reason codes
is given them, built for it alone: :data:`REASON_CODES`), and its keys, 12 of them, are
pages of a file in the staging area that the driver maps (:meth:`GlobalContext.state`),
not its own memory. A stage finds the few rows a check needs on 64-bit hashes,
partition by partition on the engine
(:meth:`GlobalContext.repeats`, :mod:`pipeline.decide.partitioned`; an anti-join on
exact keys: :meth:`GlobalContext.unmatched`; exact groups: :meth:`GlobalContext.groups`),
or reads values shard by shard
(:meth:`GlobalContext.evaluate`; lined up with its rows: :meth:`GlobalContext.values`),
and reads the rows found in full (:meth:`GlobalContext.fetch`, which takes them alone out
of the staged files). Stages name rows by their keys taken out of the state
(:func:`keys_of`), never by a copy of every row's. The global phase holds ~2 bytes of
its own memory for every row (the dispositions, 1, and a stage's masks over the rows)
and more for each row a whole-run stage reads in full or decides (a duplicate, a
retry): ~6 bytes a row in all on 1,000,000 pairwise-v2 rows with 3 % repeats, with or
without near and normalised dedupe, ~14 with 30 % retries
(``benchmarks/driver_memory.py``; 26–27 with the keys held; polars' allocator returns
freed pages at once: :mod:`pipeline.core.allocator`).
docs/scale.md ("Memory") and docs/scale-measurements.md ("The driver's memory, per
row", "Duplicate-heavy exports") give each structure's bytes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, NamedTuple, Protocol, TypeAlias, cast

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa

from pipeline.core.arrays import distinct
from pipeline.core.config import CampaignConfig
from pipeline.core.reasons import CATALOGUE, REASONS_TYPE, Disposition
from pipeline.decide.columns import OutputColumn
from pipeline.decide.partitioned import (
    BODY,
    GROUP,
    LATER_COLUMNS,
    RANK,
    SEEKS,
    TEXT,
    VALUE,
    WHERE,
    Followers,
    Found,
    HashCheck,
    StagedRows,
    evaluate_shard,
    first_rows,
    line_set,
    partition_count,
)
from pipeline.engines import Engine
from pipeline.gate.reader import Shard
from pipeline.gate.staging import ShardSummary
from pipeline.storage import ROW_GROUP_ROWS, RunStorage, WrittenFile

__all__ = [
    "ARTIFACT_ROWS",
    "DEDUPE_RULE",
    "DISPOSITIONS",
    "DUPLICATE_OF",
    "GLOBAL_STAGES",
    "PART_ROWS",
    "REASON_CODES",
    "Decisions",
    "Following",
    "GlobalContext",
    "GlobalResult",
    "GlobalStage",
    "Grouped",
    "LaterRows",
    "OutputColumn",
    "advanced",
    "declared_columns",
    "keys_of",
    "lines_by_shard",
    "placer",
    "register_stage",
    "repeated_keys",
    "run_global",
    "shard_runs",
    "staged_rows",
]

KEYS: Final = ("_shard", "_shard_line")
#: Columns every stage finds in the frame it is given. The parent holds them for every
#: staged row through the whole phase, so they are the compact ones: a stage that needs
#: the digests (two 64-character strings, 3/4 of this state when it held them) or
#: payload columns reads them itself (:meth:`GlobalContext.evaluate`, ``fetch``, ``scan``),
#: and a row's input, source and line follow from its shard
#: (:meth:`GlobalContext.with_lineage`, :meth:`GlobalContext.split`): held for every row
#: they were 34 of the state's 62 bytes a row.
STATE_COLUMNS: Final = ("_shard", "_shard_line", "_disposition")
#: What a stage's ``decide`` returns: its decisions (one row per decided row, by
#: :data:`KEYS`), all at once or a part at a time, or none.
Decisions: TypeAlias = pl.DataFrame | Iterator[pl.DataFrame] | None
#: Decided rows a stage that makes its decisions a part at a time puts in a part (dedupe's
#: removed rows, the review stage's decided reviews)
PART_ROWS: Final = 65_536
#: The rows of a whole-run table's row group (:meth:`GlobalContext.write_artifact`): a
#: stage that makes a table a part at a time makes a row group at a time at least
ARTIFACT_ROWS: Final = ROW_GROUP_ROWS
#: Every row's reason codes so far (the gate's, then each earlier stage's, in order), in
#: the state given a stage whose ``reads_reason_codes`` is true (the policy's), and built
#: for it alone: held through the phase, their offsets were 8 of the state's 21 bytes a
#: row, rebuilt by every stage that added a reason.
REASON_CODES: Final = "_reason_codes"
#: The state's ``_disposition``: an enum of the dispositions, one byte a row (a string
#: column took 16: polars' string views)
DISPOSITIONS: Final = pl.Enum([d.value for d in Disposition])


#: DESIGN §3.6: a duplicate points at the kept row's ``_source``, ``_line`` and
#: ``_record_sha256``. Shared by every stage that removes duplicates (retries, dedupe).
DUPLICATE_OF: Final = OutputColumn(
    "_duplicate_of",
    pa.struct(
        [
            pa.field("_source", pa.string()),
            pa.field("_line", pa.int64()),
            pa.field("_record_sha256", pa.string()),
        ]
    ),
    frozenset({Disposition.DUPLICATE}),
)
#: The rule that made a row a duplicate (``exact``, ``near``, ... ; ``retry`` for a
#: replayed submission), shared like :data:`DUPLICATE_OF`.
DEDUPE_RULE: Final = OutputColumn("_dedupe_rule", pa.string(), frozenset({Disposition.DUPLICATE}))


class Grouped(NamedTuple):
    """What a hash check found (:meth:`GlobalContext.groups`): a mask over the rows,
    each found row's group, and, for a grouping check with a body (which finds a key's
    later rows only), whether each found row's body is its group's first row's; the found
    rows' in the rows' order."""

    found: npt.NDArray[np.bool_]
    groups: npt.NDArray[np.uint64]
    same: npt.NDArray[np.bool_] | None


@dataclass(frozen=True)
class LaterRows:
    """The later rows of each key another row shares, as a staged grouping check found
    them (:meth:`GlobalContext.later_rows`), read a part at a time (:meth:`parts`) from
    what its partition tasks staged: the driver holds a part, not every row found."""

    storage: RunStorage
    #: the check's shards, in the stable order key
    shards: tuple[int, ...]
    staged: StagedRows

    def __len__(self) -> int:
        return len(self.staged)

    def parts(self) -> Iterator[pl.DataFrame]:
        """The rows found, in the stable order key, a block of shards at a time (about
        :data:`~pipeline.decide.partitioned.FOLLOWER_ROWS` rows a part): each row's keys
        (``_shard``, ``_shard_line``), its key's first row's (``_first_shard``,
        ``_first_line``), whether its body is that row's (``_same``), how many rows its
        key has (``_rows``, its first included) and how many of them are later rows whose
        body is not the first's (``_conflicts``), counted by the partition task that holds
        every row of the key."""
        shard_of = np.asarray(self.shards, np.int32)  # a position's shard
        for block, _ in self.staged.blocks(self.storage, len(self.shards), LATER_COLUMNS):
            first_shard, first_line = first_rows(self.shards, block["_first"])
            yield pl.DataFrame(
                {
                    "_shard": shard_of[block["_position"]],
                    "_shard_line": block["_shard_line"],
                    "_first_shard": first_shard,
                    "_first_line": first_line,
                    "_same": block["_same"],
                    "_rows": block["_rows"],
                    "_conflicts": block["_conflicts"],
                }
            )


class Following(NamedTuple):
    """What a led check found beside its leaders (:meth:`GlobalContext.led_groups`):
    how many rows each found row leads, itself included (in the rows' order, as
    :attr:`Grouped.groups`), and the rows it does not find but gives a leader, with
    their leaders, as places among the rows, ascending by the rows led."""

    led: npt.NDArray[np.int64]
    followers: npt.NDArray[np.int64]
    leaders: npt.NDArray[np.int64]


@dataclass(frozen=True)
class GlobalContext:
    """What a stage sees of the run. Stages reach staged rows only through it
    (:meth:`evaluate`, :meth:`fetch`, :meth:`scan`, :meth:`staged`), never by a path: the
    run's :attr:`storage` owns where they are. A stage that fans work out to the engine
    gives its step :attr:`storage` (picklable) and reads through it in the worker."""

    config: CampaignConfig
    storage: RunStorage
    shards: Sequence[Shard]
    summaries: Sequence[ShardSummary]
    #: the line number before each shard's first line, within its input (by shard index)
    line_bases: Sequence[int] | Mapping[int, int]
    #: the run's worker pool, for stages that fan work out per shard
    engine: Engine
    #: whole-run tables stages wrote (e.g. a duplicate-cluster table), for the manifest
    artifacts: list[WrittenFile] = field(default_factory=list)
    #: facts stages record for the manifest (e.g. rubric digests), by stage name
    notes: dict[str, Any] = field(default_factory=dict)
    #: told each step as it begins, for a progress display: :func:`run_global` reports
    #: ``KIND: read``, ``KIND: STAGE``, then ``KIND: ROW-LOCAL STAGES, merge`` (a shard
    #: at a time: ``KIND: scoring, policy, merge``); a long stage may report its own
    #: steps (``KIND: dedupe: match``)
    on_stage: Callable[[str], None] = lambda name: None

    def write_artifact(
        self, relative: str, table: pa.Table | Iterable[pa.Table], kind: str | None = None
    ) -> WrittenFile:
        """Write a whole-run Parquet table under the output directory (deterministically)
        and list it in the manifest, e.g. ``write_artifact("dedupe/clusters.parquet", t)``;
        or its parts in turn, each made as the one before is written
        (:meth:`RunStorage.write_table`)."""
        written = self.storage.write_table(table, relative, "artifact", kind, self.config)
        self.artifacts.append(written)
        return written

    def kinds(self) -> list[str]:
        return sorted({k for s in self.summaries for k in s.kinds})

    def split(self) -> pl.Expr:
        """A row's split label (``--split``, ``[[inputs]] split``), from its ``_shard``
        column: its shard's input's."""
        splits = {shard.index: shard.input.split for shard in self.shards}
        return pl.col("_shard").replace_strict(splits, return_dtype=pl.String)

    def split_numbers(self) -> dict[int, int | None]:
        """Each shard's split label as a number, by shard index: its place among the
        run's labels, sorted (``None``: no label). Equal labels, equal numbers: a split
        compared or hashed without its text."""
        labels = sorted({s.input.split for s in self.shards if s.input.split is not None})
        return {
            s.index: None if s.input.split is None else labels.index(s.input.split)
            for s in self.shards
        }

    def staged(self, shard: int, kind: str) -> pl.LazyFrame:
        """One shard's staged rows of ``kind`` as a lazy scan (project what you need)."""
        return self.storage.scan_staged(shard, kind)

    def staged_columns(self, kind: str) -> list[str]:
        """The columns staged for ``kind`` (the same in every shard: one Arrow layout)."""
        return self.staged_schema(kind).names()

    def staged_schema(self, kind: str) -> pl.Schema:
        """The schema staged for ``kind`` (the same in every shard: one Arrow layout)."""
        shard = self.shards_of(kind)[0]
        return self.staged(shard, kind).collect_schema()

    def evaluate(
        self,
        kind: str,
        exprs: Mapping[str, pl.Expr],
        *,
        stem: str | None = None,
    ) -> Iterator[pl.DataFrame]:
        """Evaluate expressions over the staged payload of ``kind`` one shard at a time,
        in the stable order key: frames of ``_shard``, ``_shard_line`` and one column per
        expression. Each expression's value for a row must read that row alone: they are
        evaluated a staged batch at a time, so the columns they read take a batch's
        memory, and a row's value does not depend on the rows beside it (``evaluate_shard``
        in :mod:`pipeline.decide.partitioned`; ``row_values`` in :mod:`pipeline.core.row_local`).

        ``stem``: over a file staged beside the kind's rows (its row keys) instead."""
        for summary in self.summaries:
            if kind in summary.kinds:
                yield evaluate_shard(self.storage, summary.shard, stem or kind, exprs)

    def aligned(
        self, kind: str, rows: pl.DataFrame, exprs: Mapping[str, pl.Expr]
    ) -> Iterator[pl.DataFrame]:
        """:meth:`evaluate` for a stage's ``rows`` of ``kind`` (every staged row, in the
        stable order key): each shard's values alone, without its keys, checked to line
        up with ``rows`` as they come."""
        return _aligned(self.evaluate(kind, exprs), rows)

    def values(
        self,
        kind: str,
        rows: pl.DataFrame,
        exprs: Mapping[str, pl.Expr],
        *,
        stem: str | None = None,
    ) -> dict[str, npt.NDArray[Any]]:
        """Each expression's value for every one of ``rows`` as one numpy array, filled
        shard by shard (:meth:`aligned`).

        For the hash-first checks: the values alone, lined up with the rows, and never
        the frame of every row's keys and values. The checks' working sets were a frame
        per shard and their concatenation, keys included (~56 bytes a row for two
        hashes); a row's keys are read off ``rows`` for the few rows found. ``stem``: as for
        :meth:`evaluate`. An expression must give no null (fill
        them): numpy has none for integers, and polars would give floats or objects."""
        found = {name: np.empty(0) for name in exprs}
        at = 0
        for frame in _aligned(self.evaluate(kind, exprs, stem=stem), rows):
            for name in exprs:
                if frame[name].null_count():
                    raise ValueError(f"{name}: a value is null (values holds no nulls)")
                column = frame[name].to_numpy()
                if at == 0:
                    found[name] = np.empty(rows.height, column.dtype)
                found[name][at : at + frame.height] = column
            at += frame.height
        return found

    def repeats(
        self,
        kind: str,
        rows: pl.DataFrame,
        name: str,
        group: pl.Expr,
        *,
        value: pl.Expr | None = None,
        where: pl.Expr | None = None,
        stem: str | None = None,
    ) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.uint64]]:
        """Which of ``rows`` (every staged row of ``kind``, in the stable order key) share
        their ``group`` (a 64-bit hash) with another row, or, given ``value`` (a hash
        too), whose group holds more than one value; only rows where ``where`` holds take
        part. A mask over ``rows``, and the group of each row found, in their order.
        ``stem``: the expressions read a file staged beside the rows (as for
        :meth:`evaluate`).

        Found partition by partition on the engine (:mod:`pipeline.decide.partitioned`,
        ``name`` naming the check's staged entries): the driver holds the rows found and
        the mask, not every row's hashes (8 to 17 bytes a row, and a sort of them)."""
        exprs = {GROUP: group, **({VALUE: value} if value is not None else {})}
        if where is not None:
            exprs[WHERE] = where
        hashes = len(exprs) - (where is not None)
        ran = self._run_check(kind, rows, name, exprs, hashes, stem=stem)
        (found, groups, _), _ = self._placed(rows, ran)
        return found, groups

    def unmatched(
        self,
        kind: str,
        rows: pl.DataFrame,
        name: str,
        key: pl.Expr,
        seeks: pl.Expr,
        *,
        where: pl.Expr,
        left_out: npt.NDArray[np.bool_],
    ) -> npt.NDArray[np.bool_]:
        """Which of ``rows`` (as for :meth:`repeats`) seek (``seeks``) a ``key`` that no
        row offers (one where ``seeks`` is false): an anti-join on the exact keys (a
        string, never null where ``where`` holds), partition by partition on the engine
        (their hash partitions them). Only rows where ``where`` holds take part, and none
        of the rows where ``left_out`` holds (a mask over ``rows``), whatever ``where``
        says.

        The driver holds the rows found and the mask; a find task one partition's keys
        (a key, its hash and line: counted as 32 bytes a key to size the partitions)."""
        exprs = {GROUP: key.hash(), TEXT: key, SEEKS: seeks, WHERE: where}
        lines = lines_by_shard(rows, left_out)
        ran = self._run_check(kind, rows, name, exprs, 1 + 4, lines=lines)
        return self._placed(rows, ran)[0].found

    def groups(
        self,
        kind: str,
        rows: pl.DataFrame,
        name: str,
        key: pl.Expr,
        hashed: pl.Expr,
        *,
        where: pl.Expr | None = None,
        left_out: npt.NDArray[np.bool_] | None = None,
        body: pl.Expr | None = None,
        stem: str | None = None,
        digested: bool = False,
    ) -> Grouped:
        """Which of ``rows`` (as for :meth:`repeats`) share their exact ``key`` (a
        string or bytes; a row where it is null takes no part), grouped first on
        ``hashed`` (its 64-bit hash), with another row where ``where`` holds, none where
        ``left_out`` holds (a mask over ``rows``) taking part; and each found row's
        group, in the rows' order: its key's first row in the stable order key, encoded
        (:func:`~pipeline.decide.partitioned.first_rows` reads it; groups order as their
        first rows do). ``body`` (a string or bytes): only the later rows of a key are
        found, not its first, each telling whether its body is its key's first row's (a
        null body is nobody's): a retry's original is found as its group alone.
        ``stem``: the expressions read a file staged beside the rows (as for
        :meth:`evaluate`); ``digested``: keys (strings) are staged and compared as their
        SHA-256, as content fingerprints are (a long text's 32 bytes). Compared
        partition by partition on the engine: the driver holds a group a row found, not
        the keys."""
        ran = self._grouping(
            kind, rows, name, key, hashed, where, left_out, body, stem, digested=digested
        )
        return self._placed(rows, ran)[0]

    def later_rows(
        self,
        kind: str,
        rows: pl.DataFrame,
        name: str,
        key: pl.Expr,
        hashed: pl.Expr,
        *,
        body: pl.Expr,
        where: pl.Expr | None = None,
        left_out: npt.NDArray[np.bool_] | None = None,
        stem: str | None = None,
    ) -> LaterRows:
        """The rows :meth:`groups` with a ``body`` finds (the later rows of each key
        another row shares), each with its key's first row, whether its body is that
        row's, and its key's counts, staged by the partition tasks, which hold every row
        of a key, and read a part at a time (:class:`LaterRows`). Received and placed
        among ``rows``, with counts made in the driver, they held ~60 bytes a row found
        (an export of 30 % retries: the cross-record rules' peak)."""
        shards, found = self._grouping(
            kind, rows, name, key, hashed, where, left_out, body, stem, staged=True
        )
        assert found.later is not None  # a staged check stages its rows
        return LaterRows(self.storage, shards, found.later)

    def _grouping(
        self,
        kind: str,
        rows: pl.DataFrame,
        name: str,
        key: pl.Expr,
        hashed: pl.Expr,
        where: pl.Expr | None,
        left_out: npt.NDArray[np.bool_] | None,
        body: pl.Expr | None,
        stem: str | None,
        *,
        digested: bool = False,
        staged: bool = False,
    ) -> tuple[tuple[int, ...], Found]:
        """Run the grouping check of :meth:`groups` and :meth:`later_rows`."""
        present = key.is_not_null()
        exprs = {GROUP: hashed, TEXT: key, WHERE: present if where is None else where & present}
        if body is not None:
            exprs[BODY] = body
        return self._run_check(
            kind,
            rows,
            name,
            exprs,
            1 + 4 + (4 if body is not None else 0),  # a key, its hash, a digest: 32 bytes
            stem=stem,
            lines=lines_by_shard(rows, left_out) if left_out is not None else None,
            digested=digested,
            staged=staged,
        )

    def led_groups(
        self,
        kind: str,
        rows: pl.DataFrame,
        name: str,
        key: pl.Expr,
        hashed: pl.Expr,
        *,
        left_out: npt.NDArray[np.bool_],
        leader: str = "first",
        rank: pl.Expr | None = None,
    ) -> tuple[Grouped, Following]:
        """As :meth:`groups` without a body, but the rows of a key in one split (or in
        no split) are led by their best-ranked (``leader``: their first in the stable
        order key, their last, or their best by ``rank``'s value, ``max`` or ``min``, as
        the survivor rules rank rows): only the leaders of
        the keys another row shares are found, each with its group and how many rows it
        leads (itself included); the rows they lead come apart, each with its leader
        (:class:`Following`: places among ``rows``). The driver holds two places a row
        led, not the row's group and a place among those found."""
        splits = self.split_numbers()
        leads = [-1 if (split := splits[s]) is None else split for s in self.shards_of(kind)]
        exprs = {GROUP: hashed, TEXT: key, WHERE: key.is_not_null()}
        if rank is not None:
            exprs[RANK] = rank
        lines = lines_by_shard(rows, left_out)
        # a key's hash and 32 bytes, and a rank's value (a number; a short text)
        hashes = 1 + 4 + (1 if rank is not None else 0)
        ran = self._run_check(
            kind, rows, name, exprs, hashes, lines=lines, leads=leads, leader=leader
        )
        grouped, following = self._placed(rows, ran)
        if following is None:
            raise AssertionError(f"{kind}: {name}: a led check gave no leaders")
        return grouped, following

    def first_rows(self, kind: str, groups: npt.NDArray[np.uint64]) -> pl.DataFrame:
        """The keys (``_shard``, ``_shard_line``) of each of ``groups``' first rows (a
        grouping check's groups of ``kind``'s rows, :meth:`groups`), in their order."""
        return _keys_frame(*first_rows(self.shards_of(kind), groups))

    def shards_of(self, kind: str) -> tuple[int, ...]:
        """The shards that hold rows of ``kind``, in the stable order key."""
        return tuple(s.shard for s in self.summaries if kind in s.kinds)

    def _placed(
        self, rows: pl.DataFrame, ran: tuple[tuple[int, ...], Found]
    ) -> tuple[Grouped, Following | None]:
        """What a check found (``ran``: :meth:`_run_check`) among ``rows``: a mask over
        them and the found rows' groups (and whether each one's body is its group's first
        row's; a led check's: how many rows each leads, and the rows led), in the rows'
        order."""
        shards, found = ran
        at = _places(rows, _keys_frame(found.shards, found.lines))
        groups, same, led, following = found.groups, found.same, found.led, found.followers
        del found  # the rows' keys: 12 bytes a row found
        mask = np.zeros(rows.height, np.bool_)
        mask[at] = True
        order = np.argsort(at)  # the rows' order
        if led is None or following is None:
            ordered = Grouped(mask, groups[order], None if same is None else same[order])
            return ordered, None
        place = placer(rows)
        followers, leaders = following.placed(
            self.storage,
            shards,
            lambda shards, lines: place(_keys_frame(shards, lines)),
            lambda found_at: at[found_at],  # a leader is a row found: placed already
            rows.height,
        )
        return Grouped(mask, groups[order], None), Following(led[order], followers, leaders)

    def _run_check(
        self,
        kind: str,
        rows: pl.DataFrame,
        name: str,
        exprs: dict[str, pl.Expr],
        hashes: int,
        *,
        stem: str | None = None,
        lines: Mapping[int, bytes] | None = None,
        digested: bool = False,
        leads: Sequence[int] = (),
        leader: str = "first",
        staged: bool = False,
    ) -> tuple[tuple[int, ...], Found]:
        """Run a :class:`HashCheck` of ``exprs`` over ``kind``'s rows (entries of
        ``hashes`` 8-byte values a row, to size its partitions): its shards and what it
        found (nothing where no shard holds the kind). ``lines``: each shard's lines
        that take no part (:func:`lines_by_shard`)."""
        engine = self.config.engine
        shards = self.shards_of(kind)
        if not shards:
            empty = np.zeros(0, np.int64)
            bodied = BODY in exprs and not staged
            return (), Found(
                empty.astype(np.int32),
                empty,
                empty.astype(np.uint64),
                np.zeros(0, np.bool_) if bodied else None,
                empty if leads else None,
                Followers() if leads else None,
                StagedRows() if staged else None,
            )
        count = partition_count(
            rows.height, hashes, engine.resolved_workers(), len(shards), engine.partitions
        )
        check = HashCheck.of(
            self.storage,
            kind,
            name,
            shards,
            exprs,
            partitions=count,
            source=stem,
            digested=digested,
            leads=leads,
            leader=leader,
            staged=staged,
        )
        return check.shards, check.run(self.engine, lines)

    def has_row_keys(self, kind: str) -> bool:
        """Whether the gate computed dedupe row keys for ``kind`` (in every shard of it)."""
        stem = self.storage.row_keys_stem(kind)
        shards = self.shards_of(kind)
        return bool(shards) and all(self.storage.has_staged(s, stem) for s in shards)

    def with_lineage(self, frame: pl.DataFrame) -> pl.DataFrame:
        """``frame`` (a few rows, with ``_shard`` and ``_shard_line``) with the state's
        ``_input``, ``_source`` and ``_line`` of its rows, from the shards they are in:
        joining the few rows to the state instead costs a hash table of every row."""
        sources = {s.index: s.input.path for s in self.shards}
        at_input, at_line = self.order_key()
        return frame.with_columns(
            _input=at_input,
            _source=pl.col("_shard").replace_strict(sources, return_dtype=pl.String),
            _line=at_line,
        )

    def order_key(self) -> tuple[pl.Expr, pl.Expr]:
        """A row's input and line (the run's order key), from its ``_shard`` and
        ``_shard_line``."""
        shard = pl.col("_shard")
        inputs = {s.index: s.input.index for s in self.shards}
        line_bases = {s.index: self.line_bases[s.index] for s in self.shards}
        return (
            shard.replace_strict(inputs, return_dtype=pl.Int32),
            pl.col("_shard_line") + shard.replace_strict(line_bases, return_dtype=pl.Int64),
        )

    def fetch(
        self, kind: str, keys: pl.DataFrame, columns: Sequence[str], stem: str | None = None
    ) -> pl.DataFrame:
        """Staged ``columns`` of the rows named by ``keys`` (``_shard``, ``_shard_line``),
        read shard by shard: for the few rows a hash-first check needs in full. ``stem``:
        read them from another file staged beside the kind's rows (its row keys)."""

        if keys.height == 0:
            shard = self.shards_of(kind)[0]
            return _staged_shard_rows(self.storage, shard, stem or kind, None, columns)
        return staged_rows(self.storage, kind, keys, columns, stem)

    def fetched(
        self, kind: str, rows: pl.DataFrame, columns: Sequence[str], stem: str | None = None
    ) -> pl.DataFrame:
        """``rows`` (a few, each once: their keys and any other columns) with their
        staged ``columns`` beside them, in the order of ``rows`` (:meth:`fetch`). Rows in
        the stable order key come back from the staged files in their own order and are
        set beside them: a join held a hash table of the rows and a copy of both frames
        at once (dedupe's peak where most rows are duplicates); rows in another order
        are joined. A row the staged files lack is an error, never a null."""
        payload = self.fetch(kind, keys_of(rows), columns, stem)
        if payload.height != rows.height:
            raise AssertionError(f"{kind}: {rows.height} rows asked for, {payload.height} read")
        aligned = keys_of(payload).equals(keys_of(rows))
        if aligned and set(payload.columns) & set(rows.columns) == set(KEYS):
            return rows.hstack(payload.drop(KEYS).get_columns())
        return rows.join(payload, on=list(KEYS), how="left", maintain_order="left")

    def state(self, kind: str) -> pl.DataFrame:
        """The kind's state (:data:`STATE_COLUMNS`) of every staged row, in the stable
        order key, one chunk per shard.

        Its keys (12 of its 13 bytes a row) are written to a table of the run's staging
        area (:meth:`RunStorage.state_stem`), a shard at a time, and memory-mapped
        (:meth:`RunStorage.whole_table`): they are pages of a file, which the kernel may
        evict and read again when memory runs short, not the driver's anonymous memory
        (on a staging area on disk: on tmpfs they are memory all the same). The
        dispositions, which stages replace, are held (1 byte a row). Collected as
        :meth:`scan` collects them, the keys were the state's 12 bytes a row of anonymous
        memory through the phase."""
        stem = self.storage.state_stem(kind)
        schema = pa.schema([("_shard", pa.int32()), ("_shard_line", pa.int64())])
        dispositions = []
        with self.storage.whole_writer(stem, schema) as writer:
            for summary in self.summaries:
                if kind not in summary.kinds:
                    continue
                staged = self.staged(summary.shard, kind).select(
                    "_shard_line", pl.col("_disposition").cast(DISPOSITIONS)
                )
                frame = staged.collect()
                shard = pa.array(np.full(frame.height, summary.shard, np.int32))
                writer.write_batch(
                    pa.record_batch([shard, frame["_shard_line"].to_arrow()], schema=schema)
                )
                dispositions.append(frame["_disposition"])
        if not dispositions:
            return pl.DataFrame()
        keys = cast(pl.DataFrame, pl.from_arrow(self.storage.whole_table(stem), rechunk=False))
        return keys.with_columns(pl.concat(dispositions, rechunk=False))

    def scan(
        self, kind: str, columns: Sequence[str] = (), *, reason_codes: bool = False
    ) -> pl.DataFrame:
        """Staged columns of every row of ``kind`` in the stable order key, with the
        state columns (:data:`STATE_COLUMNS`); ``reason_codes``: and the codes of the
        reasons the gate gave each row (:data:`REASON_CODES`).

        Collected shard by shard and kept as one chunk per shard: collecting the shards'
        scans at once, into one chunk, took twice the result's size above it (34 against
        18 MB for 349k rows of state), which polars' allocator then kept."""
        frames = []
        staged = ["_shard_line", "_disposition", *(["_reasons"] if reason_codes else [])]
        head = [*STATE_COLUMNS, *([REASON_CODES] if reason_codes else [])]
        for summary in self.summaries:
            if kind not in summary.kinds:
                continue
            wanted = list(dict.fromkeys([*staged, *columns]))
            frame = self.staged(summary.shard, kind).select(wanted)
            frames.append(
                frame.with_columns(
                    _shard=pl.lit(summary.shard, pl.Int32),
                    _disposition=pl.col("_disposition").cast(DISPOSITIONS),
                    **({REASON_CODES: _codes(pl.col("_reasons"))} if reason_codes else {}),
                )
                .select([*head, *(c for c in columns if c not in head)])
                .collect()
            )
        if not frames:
            return pl.DataFrame()
        return pl.concat(frames, rechunk=False)


def keys_of(
    rows: pl.DataFrame, where: npt.NDArray[np.bool_] | pl.Series | None = None
) -> pl.DataFrame:
    """The keys (``_shard``, ``_shard_line``) of ``rows`` where ``where`` holds (of every
    row without it), copying only those rows' keys. Taken by name, the keys share the
    state's buffers; an eager ``select`` of them runs as a query that copies every row's
    (12 bytes a row of the state with polars 2, each time a rule took its rows' keys)."""
    keys = rows[list(KEYS)]
    return keys if where is None else keys.filter(where)


def shard_runs(rows: pl.DataFrame) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The runs of ``rows`` (a state, or frames keyed like it) that hold one shard each,
    in their order (the state's shards are one run each, in the order key): each run's
    shard, and the runs' bounds (run ``i`` is rows ``bounds[i]:bounds[i + 1]``)."""
    runs = rows["_shard"].rle()
    bounds = np.zeros(len(runs) + 1, np.int64)
    np.cumsum(runs.struct.field("len").to_numpy(), out=bounds[1:])
    return runs.struct.field("value").to_numpy().astype(np.int64), bounds


def lines_by_shard(rows: pl.DataFrame, where: npt.NDArray[np.bool_]) -> dict[int, bytes]:
    """The lines of ``rows`` (a state) where ``where`` holds, by shard, as a shard task
    carries them (:func:`~pipeline.decide.partitioned.line_set`), taken a shard's run of
    rows at a time: a bitmap or int64 values, whichever is smaller, where the lines'
    keys copied out of the state and their values held ~20 bytes a line at once."""
    shards, bounds = shard_runs(rows)
    found: dict[int, list[npt.NDArray[np.int64]]] = {}
    for shard, lo, hi in zip(
        shards.tolist(), bounds[:-1].tolist(), bounds[1:].tolist(), strict=True
    ):
        taken = where[lo:hi]
        if taken.any():
            lines = rows["_shard_line"].slice(lo, hi - lo).to_numpy()
            found.setdefault(shard, []).append(lines[taken].astype(np.int64, copy=False))
    return {shard: line_set(np.concatenate(parts)) for shard, parts in found.items()}


def _codes(reasons: pl.Expr) -> pl.Expr:
    """The codes of a list of reasons (``{code, path, detail}`` structs)."""
    return reasons.list.eval(pl.element().struct.field("code"))


def _aligned(frames: Iterable[pl.DataFrame], rows: pl.DataFrame) -> Iterator[pl.DataFrame]:
    """``frames`` (a shard's keys and values each, in the stable order key) without their
    keys, each checked to line up with the next of ``rows`` as it comes; and all of them
    with all of ``rows``."""
    lines, shards = rows["_shard_line"], rows["_shard"]
    at = 0
    for frame in frames:
        n = frame.height
        if at + n > rows.height or not (
            frame["_shard_line"].equals(lines.slice(at, n))
            and frame["_shard"].equals(shards.slice(at, n), check_dtypes=False)
        ):
            raise AssertionError("staged rows and the global state are out of step")
        at += n
        yield frame.drop(KEYS)
    if at != rows.height:
        raise AssertionError("staged rows and the global state are out of step")


def staged_rows(
    storage: RunStorage,
    kind: str,
    keys: pl.DataFrame,
    columns: Sequence[str],
    stem: str | None = None,
) -> pl.DataFrame:
    """Staged ``columns`` (and ``_shard``, ``_shard_line``) of the rows named by ``keys``
    (some of them), shard by shard in the order the shards first appear in ``keys``,
    each shard's rows in file order: what :meth:`GlobalContext.fetch` reads, for any
    process that has the run's storage (a task on the engine)."""
    groups = keys.partition_by("_shard", as_dict=True).items()
    return pl.concat(
        [
            _staged_shard_rows(storage, int(shard), stem or kind, wanted["_shard_line"], columns)
            for (shard,), wanted in groups
        ]
    )


def _staged_shard_rows(
    storage: RunStorage, shard: int, stem: str, lines: pl.Series | None, columns: Sequence[str]
) -> pl.DataFrame:
    """One shard's staged rows whose ``_shard_line`` is in ``lines`` (:func:`_take`)."""
    table = storage.staged_table(shard, stem).select(list(dict.fromkeys(["_shard_line", *columns])))
    found = cast(pl.DataFrame, pl.from_arrow(_take(table, lines)))
    return found.with_columns(_shard=pl.lit(shard, pl.Int32))


def _take(table: pa.Table, lines: pl.Series | None) -> pa.Table:
    """The rows of a staged table (memory-mapped) whose ``_shard_line`` is in ``lines``
    (none: no rows), in the file's order, copied out of it batch by batch.

    Only those rows are read: polars scanning the columns and filtering them read the
    shard's columns whole (~77 MB of texts a 64 MiB shard, for a few rows), and a take
    over the whole (chunked) table concatenates nested columns first (measured: 48 MB
    more anonymous memory over 18 shards of texts than taking batch by batch)."""
    asked = distinct(lines.to_numpy()) if lines is not None else np.empty(0, np.int64)
    parts = []
    for batch in table.to_batches():
        at = np.flatnonzero(np.isin(batch.column("_shard_line").to_numpy(), asked))
        if len(at):
            parts.append(batch.take(pa.array(at, pa.int64())))
    return pa.Table.from_batches(parts, schema=table.schema)


class GlobalStage(Protocol):
    """A whole-run decision step, registered with :func:`register_stage`.

    Stages run in ascending ``order`` (rules 100, review 150, dedupe 200, scoring 300,
    policy 400). A stage that reads the rows' reason codes so far sets the class
    attribute ``reads_reason_codes = True`` (optional; default false: the state it is
    given has no :data:`REASON_CODES`).

    A stage whose decision for a row reads that row alone (its staged values, state and
    reasons so far) sets ``row_local = True`` (optional; default false). The row-local
    stages after the last stage that is not run a shard at a time on the engine
    (:mod:`pipeline.decide.by_shard`): ``decide`` is given one shard's state and a
    context of that shard alone, in a worker, so the class must be importable there (a
    module's, not a function's). Its note goes in ``ctx.notes[name][kind]`` and nowhere
    else, and it then has ``combine_notes(parts)``, which makes the run's note from the
    shards' (in shard order; a shard whose ``decide`` made none gives none).
    """

    name: str
    order: int

    @property
    def reason_codes(self) -> Sequence[str]:
        """Every reason code the stage may add; each is in the reason catalogue
        (:data:`pipeline.core.reasons.CATALOGUE`), or :func:`register_stage` refuses it."""
        ...

    def enabled(self, config: CampaignConfig) -> bool:
        """Whether the campaign asks for this stage."""
        ...

    def output_columns(self, ctx: GlobalContext, kind: str) -> Sequence[OutputColumn]:
        """The extra columns this stage writes for ``kind`` (may be empty)."""
        ...

    def decide(self, ctx: GlobalContext, kind: str, rows: pl.DataFrame) -> Decisions:
        """Decisions for ``rows`` (the kind's current state, see :data:`STATE_COLUMNS`;
        with :data:`REASON_CODES` for a stage whose class sets ``reads_reason_codes =
        True``, an optional attribute: a stage without it that reads them finds no
        such column): a frame, or frames made one after another, each row in one (the
        driver stages each as it comes and lets it go: :func:`run_stages`)."""
        ...


GLOBAL_STAGES: list[Callable[[], GlobalStage]] = []


def register_stage(factory: Callable[[], GlobalStage]) -> Callable[[], GlobalStage]:
    """Register a stage factory (stages run by ``order``), refusing a stage that names a
    reason code the catalogue does not declare."""
    for code in factory().reason_codes:
        CATALOGUE.require(code)
    GLOBAL_STAGES.append(factory)
    return factory


@dataclass
class GlobalResult:
    """What the writer needs: which shards have a decisions table staged, per kind
    (:meth:`RunStorage.decisions_stem`), and the declared columns."""

    decided: dict[str, tuple[int, ...]] = field(default_factory=dict)
    columns: dict[str, list[OutputColumn]] = field(default_factory=dict)
    #: stage name -> seconds (a row-local stage's summed over its shards' tasks)
    timings: dict[str, float] = field(default_factory=dict)


def _enabled(config: CampaignConfig, stages: Sequence[GlobalStage] | None) -> list[GlobalStage]:
    """The stages a run of ``config`` runs, in order (``None``: every registered one)."""
    if stages is None:
        import pipeline.decide.stages  # noqa: F401 - discovers and registers the stage plug-ins

        stages = sorted((factory() for factory in GLOBAL_STAGES), key=lambda s: s.order)
    return [s for s in stages if s.enabled(config)]


def _kind_columns(
    ctx: GlobalContext, kind: str, stages: Sequence[GlobalStage]
) -> list[OutputColumn]:
    """The extra columns ``stages`` declare for ``kind``, in their order, each once."""
    columns: list[OutputColumn] = []
    for stage in stages:
        for column in stage.output_columns(ctx, kind):
            same_name = [c for c in columns if c.name == column.name]
            if same_name and same_name[0] != column:
                raise ValueError(f"{kind}: stages declare {column.name!r} differently")
            if not same_name:
                columns.append(column)
    return columns


def declared_columns(config: CampaignConfig, kinds: Iterable[str]) -> dict[str, list[OutputColumn]]:
    """The extra columns a run of ``config`` declares for each of ``kinds``, found as
    :func:`run_global` finds them: ``rowgate verify`` compares each part's columns with
    them. A stage declares its columns from the config alone, so the context it is
    given here holds no rows, no storage to read and an engine never started."""
    from pipeline.engines.local import LocalEngine

    ctx = GlobalContext(config, RunStorage(Path(os.devnull)), (), (), (), LocalEngine(1))
    stages = _enabled(config, None)
    return {kind: _kind_columns(ctx, kind, stages) for kind in kinds}


def run_global(ctx: GlobalContext, stages: Sequence[GlobalStage] | None = None) -> GlobalResult:
    """Run the enabled stages over every kind, in order, telling ``ctx.on_stage`` each:
    the whole-run stages here, then the row-local ones and the merge a shard at a time
    on the engine (:mod:`pipeline.decide.by_shard`)."""
    from pipeline.decide.by_shard import DecisionStaging, decide_by_shard, row_local_from

    stages = _enabled(ctx.config, stages)
    whole_run, row_local = stages[: row_local_from(stages)], stages[row_local_from(stages) :]
    result = GlobalResult()
    for kind in ctx.kinds():
        columns = _kind_columns(ctx, kind, stages)
        result.columns[kind] = columns
        if not stages:
            continue
        ctx.on_stage(f"{kind}: read")
        staging = DecisionStaging(ctx.storage, kind)
        current = run_stages(
            ctx,
            kind,
            whole_run,
            ctx.state(kind),
            [],
            {c.name for c in columns if c.carried},
            result.timings,
            read_after=bool(row_local),
            stage_part=staging.stage,
        )
        ctx.on_stage(f"{kind}: {', '.join([*(s.name for s in row_local), 'merge'])}")
        result.decided[kind] = decide_by_shard(
            ctx, kind, row_local, current, staging.staged(), columns, result.timings
        )
    _check_rejected_columns(result.columns)
    return result


def run_stages(
    ctx: GlobalContext,
    kind: str,
    stages: Sequence[GlobalStage],
    current: pl.DataFrame,
    decided: list[pl.DataFrame],
    carried: Set[str],
    seconds: dict[str, float],
    *,
    read_after: bool,
    stage_part: Callable[[int, pl.DataFrame], None] | None = None,
) -> pl.DataFrame:
    """Run ``stages`` in order over ``current`` (the kind's state), telling
    ``ctx.on_stage`` each: each stage's decisions are appended to ``decided`` (the
    earlier stages' first) and its seconds added to ``seconds``; the state after them.
    The state is advanced by a stage's decisions only for the stages after it
    (``read_after``: more stages read it once these are done).

    ``stage_part(i, part)`` (the driver's) stages each part of the ``i``-th stage's
    decisions as the stage makes it (:class:`~pipeline.decide.by_shard.DecisionStaging`);
    ``decided`` then holds only what the stages after it read of them (:func:`_retained`),
    and a stage's decisions only while a stage after it reads the reason codes: held
    through the stages after them, a duplicate-heavy export's retries (their keys,
    dispositions and codes) were ~45 bytes each through dedupe. Otherwise the state is
    advanced a part at a time (:class:`_Advancing`)."""
    for i, stage in enumerate(stages):
        codes_read = any(getattr(s, "reads_reason_codes", False) for s in stages[i + 1 :])
        ctx.on_stage(f"{kind}: {stage.name}")
        started = time.perf_counter()
        given = (
            with_reason_codes(ctx, kind, current, decided)
            if getattr(stage, "reads_reason_codes", False)
            else current
        )
        holds_all = stage_part is None or codes_read
        applies = read_after or i + 1 < len(stages)
        advancing = _Advancing(current, carried) if applies and not holds_all else None
        held: list[pl.DataFrame] = []
        for part in _parts(stage.decide(ctx, kind, given)):
            if stage_part is not None:
                stage_part(i, part)
                part = _retained(part, carried, codes=codes_read)
            if advancing is not None:
                advancing.add(part)
            elif holds_all:
                held.append(part)
        del given
        seconds[stage.name] = seconds.get(stage.name, 0.0) + time.perf_counter() - started
        if advancing is not None:
            current = advancing.state()
            del advancing
        if not held:
            continue
        made = pl.concat(held, how="diagonal_relaxed")  # one part: that part, not a copy
        del held
        decided.append(made)
        if applies:
            current = advance(current, made, carried)
        del made  # not held through the next stage (an export of 30 % retries: ~5 MB at 1 M rows)
    return current


def _parts(made: Decisions) -> Iterator[pl.DataFrame]:
    """A stage's decisions, a part at a time (those that decide rows)."""
    if made is None:
        return
    for part in (made,) if isinstance(made, pl.DataFrame) else made:
        if part.height:
            yield part
        del part  # not held while the stage makes its next part


def _retained(part: pl.DataFrame, carried: Set[str], *, codes: bool) -> pl.DataFrame:
    """What the stages after one read of its decisions (:func:`advance`,
    :func:`with_reason_codes`): the rows' keys, dispositions, carried columns and, where
    a stage after it reads them (``codes``), reason codes; not the reasons' paths and
    details nor the other columns (a removed row's pointer to the row kept: a path and a
    digest)."""
    # the disposition as its enum: one byte a row held, not a string's 16 and more
    keep = [
        pl.col(c).cast(DISPOSITIONS) if c == "_disposition" else pl.col(c)
        for c in part.columns
        if c in (*KEYS, "_disposition") or c in carried
    ]
    if not codes or "_reasons_add" not in part.columns:
        return part.select(keep)
    reasons = part.schema["_reasons_add"]
    inner = reasons.inner if isinstance(reasons, pl.List) else None
    if not isinstance(inner, pl.Struct) or "code" not in {f.name for f in inner.fields}:
        return part.select(*keep, "_reasons_add")  # no reason to read a code of (yet)
    code = pl.struct(code=pl.element().struct.field("code"))
    return part.select(*keep, pl.col("_reasons_add").list.eval(code))


def with_reason_codes(
    ctx: GlobalContext, kind: str, current: pl.DataFrame, decided: Sequence[pl.DataFrame]
) -> pl.DataFrame:
    """The state with every row's reason codes: the gate's, then those the stages before
    added (``decided``, in stage order), as :func:`advance` places them."""
    codes = ctx.scan(kind, reason_codes=True).select(*KEYS, REASON_CODES)
    for frame in decided:
        if "_reasons_add" in frame.columns:
            codes = advance(codes, frame.select(*KEYS, "_reasons_add"), set())
    if not keys_of(codes).equals(keys_of(current)):
        raise AssertionError("the reason codes do not line up with the state")
    return current.with_columns(codes[REASON_CODES])


def advance(current: pl.DataFrame, decided: pl.DataFrame, carried: Set[str]) -> pl.DataFrame:
    """Apply one stage's dispositions, reasons and carried columns to the running state
    (the reasons to its :data:`REASON_CODES` when it has them).

    Only the columns that change are rebuilt, from each decided row's place in the state
    (:func:`_places`): the dispositions by a scatter, the reason codes and carried columns
    by a gather; the others are shared with the state before, and a column no later stage
    reads is not added. Measured on a 3 M-row state, 3 % of rows decided: 111 MB above the
    state at the peak, against 252 MB for the join of every row to the decisions this
    replaced (344 MB when it also added a retry's pointer column)."""
    extras = [c for c in decided.columns if c in carried]
    if any(c in current.columns for c in extras):  # taken by name: a drop copies the rest
        current = current[[c for c in current.columns if c not in extras]]
    reasons = "_reasons_add" in decided.columns and REASON_CODES in current.columns
    at = _places(current, decided)  # a row the state lacks, or one decided twice: refused
    if not (extras or reasons or "_disposition" in decided.columns):
        return current
    updates: list[pl.Series | pl.Expr] = []
    if "_disposition" in decided.columns:
        new = decided["_disposition"]
        disposition = current["_disposition"].clone()  # scatter writes into its series
        disposition.scatter(at[new.is_not_null().to_numpy()], new.drop_nulls().cast(DISPOSITIONS))
        updates.append(disposition)
    if extras or reasons:
        codes = _codes(pl.col("_reasons_add"))
        changes = decided.select(*extras, *([codes.alias("_new_codes")] if reasons else []))
        aligned = changes.select(pl.all().gather(_spread(at, current.height)))
        updates += [aligned[c] for c in extras]
    if reasons:
        added = aligned["_new_codes"]
        updates.append(
            pl.when(added.is_null())
            .then(pl.col(REASON_CODES))
            .otherwise(pl.concat_list(REASON_CODES, added))
            .alias(REASON_CODES)
        )
    return current.with_columns(updates)


def advanced(
    current: pl.DataFrame, parts: Iterable[pl.DataFrame], carried: Set[str]
) -> pl.DataFrame:
    """The state after decisions that come a part at a time (``parts``: a row decided
    once in all of them), applied as they come (:class:`_Advancing`) as :func:`advance`
    applies them all."""
    advancing = _Advancing(current, carried)
    for part in parts:
        if part.height:
            advancing.add(part)
    return advancing.state()


class _Advancing:
    """One stage's decisions applied to the state as :func:`advance` applies them all,
    without holding them all when they are many: its parts (their keys, dispositions
    and carried columns: :func:`_retained`) are held until they decide more than one
    row in :data:`_HELD_SHARE` of the state; from then on their dispositions are
    scattered, :data:`_SCATTER_ROWS` at a time, into one copy of the state's
    dispositions (1 byte a row), and a bit a row records the rows decided, so that a
    row decided twice, in one part or in two, is still found; their places are found
    with the state's shard runs read once (:class:`_Places`). A stage that decides few
    rows holds their ~13 bytes each, less than the copy. Held to the end and
    concatenated, a stage's decided rows were ~41 bytes each above the state, ~4 a row
    of the state now (two rows in three decided, 16 M rows:
    ``benchmarks/stage_memory.py``). Carried columns, and the reasons where the state
    holds :data:`REASON_CODES`, are gathered when the stage ends. A state out of the
    order key holds every part, as before."""

    def __init__(self, current: pl.DataFrame, carried: Set[str]) -> None:
        self.current = current
        self.carried = carried
        self.held: list[pl.DataFrame] = []
        self.held_rows = 0
        self.flush_rows = 0  # set when scattering starts
        self.places: _Places | None = None
        self.disposition: pl.Series | None = None
        self.decided = np.zeros(0, np.uint8)
        self.extras: list[pl.DataFrame] = []

    def add(self, part: pl.DataFrame) -> None:
        self.held.append(part)
        self.held_rows += part.height
        if self.disposition is None:
            if self.held_rows * _HELD_SHARE <= self.current.height or self.places is not None:
                return  # few rows yet, or a state out of order (held)
            self.places = _Places(self.current)
            if not self.places.ordered:
                return
            self.disposition = self.current["_disposition"].clone()  # scatter writes into it
            self.decided = np.zeros((self.current.height + 7) // 8, np.uint8)
            self.flush_rows = max(_SCATTER_ROWS, _SCATTER_PER_RUN * len(self.places.length))
        if self.held_rows >= self.flush_rows:
            self._flush()

    def _flush(self) -> None:
        """Scatter the parts held, together."""
        if self.held:
            made = pl.concat(self.held, how="diagonal_relaxed")
            self.held, self.held_rows = [], 0
            self._scatter(made)

    def _scatter(self, part: pl.DataFrame) -> None:
        assert self.disposition is not None
        assert self.places is not None
        at = self.places.find(part)
        if at is None:  # a shard's lines out of order: sorted for this part
            at = _places_sorting(self.current, part)
        byte, bit = at >> 3, np.left_shift(1, at & 7).astype(np.uint8)
        if bool((self.decided[byte] & bit).any()):
            raise AssertionError("a stage decided a row twice")
        np.bitwise_or.at(self.decided, byte, bit)
        if "_disposition" in part.columns:
            new = part["_disposition"]
            where = at[new.is_not_null().to_numpy()]
            self.disposition.scatter(where, new.drop_nulls().cast(DISPOSITIONS))
        codes = REASON_CODES in self.current.columns
        extras = [c for c in part.columns if c in self.carried or (codes and c == "_reasons_add")]
        if extras:
            self.extras.append(part.select(*KEYS, *extras))

    def state(self) -> pl.DataFrame:
        """The state after the stage."""
        if self.disposition is not None:
            self._flush()
        if self.disposition is None:
            if not self.held:
                return self.current
            made = pl.concat(self.held, how="diagonal_relaxed")
            return advance(self.current, made, self.carried)
        current = self.current.with_columns(self.disposition)
        if self.extras:
            made = pl.concat(self.extras, how="diagonal_relaxed")
            current = advance(current, made, self.carried)
        return current


#: :class:`_Advancing` holds a stage's decided rows until they are more than one row
#: of the state in this many
_HELD_SHARE: Final = 16
#: and then scatters them this many at a time, or this many a shard of the state where
#: that is more: rows of shards whose lines are not consecutive are found a shard at a
#: time (:class:`_Places`), ~27 µs a shard, so ~0.2 µs a row at 128 a shard (held:
#: ~13 bytes a row, ~27 MB for the ~16,000 shards of 1 TB)
_SCATTER_ROWS: Final = PART_ROWS
_SCATTER_PER_RUN: Final = 128


def _keys_frame(shards: npt.NDArray[np.int32], lines: npt.NDArray[np.int64]) -> pl.DataFrame:
    return pl.DataFrame(
        {"_shard": shards, "_shard_line": lines},
        schema={"_shard": pl.Int32, "_shard_line": pl.Int64},
    )


def _places(current: pl.DataFrame, decided: pl.DataFrame) -> npt.NDArray[np.int64]:
    """Each decided row's place in the state (:class:`_Places`; a state out of order is
    sorted first: :func:`_places_sorting`)."""
    return placer(current)(decided)


def placer(current: pl.DataFrame) -> Callable[[pl.DataFrame], npt.NDArray[np.int64]]:
    """:func:`_places` for frame after frame of decided rows (each placed once) in one
    state, whose runs are read once (:class:`_Places`), not once a frame."""
    places = _Places(current)

    def place(decided: pl.DataFrame) -> npt.NDArray[np.int64]:
        at = places.find(decided)
        return _places_sorting(current, decided) if at is None else at

    return place


class _Places:
    """Decided rows' places in one state, for one frame or for part after part. The state
    is in the order key: each shard's rows are one run, the runs in shard order, and a
    shard's lines ascend (each run is checked once, the first time a row of it is
    asked for). Where a run's lines are consecutive (a shard of one kind, its every line
    staged: the common case), a row's place is its run's start plus its line's offset,
    found for every row at once; elsewhere by a binary search among its shard's lines,
    read a shard at a time. A loop over the shards for each part of a stage's decisions
    cost ~27 µs a shard a part (4.6 s for 41 parts over 4,096 shards, against 0.9 s for
    them all at once), and reading the runs again a part ~4 ns a row of the state a part.
    Keys of every row at once (three 8-byte arrays) were the plain run's peak."""

    def __init__(self, current: pl.DataFrame) -> None:
        self.lines = current["_shard_line"]
        self.run_shard, self.run_start = shard_runs(current)
        self.ordered = bool((self.run_shard[1:] > self.run_shard[:-1]).all())
        self.length = np.diff(self.run_start)
        self.first = self.lines.gather(self.run_start[:-1]).to_numpy().astype(np.int64)
        last = self.lines.gather(self.run_start[1:] - 1).to_numpy().astype(np.int64)
        # strictly ascending (checked below) from first to last: every line between
        self.consecutive = last - self.first == self.length - 1
        self.checked = np.zeros(len(self.run_shard), np.bool_)

    def find(self, decided: pl.DataFrame) -> npt.NDArray[np.int64] | None:
        """``decided``'s places, or None where the state is out of order."""
        if not self.ordered:
            return None
        shard = decided["_shard"].to_numpy().astype(np.int64)
        line = decided["_shard_line"].to_numpy().astype(np.int64, copy=False)
        run = np.searchsorted(self.run_shard, shard)
        known = run < len(self.run_shard)
        known[known] = self.run_shard[run[known]] == shard[known]
        if not known.all():
            raise AssertionError("a stage decided a row of a shard the state does not hold")
        touched = np.zeros(len(self.checked), np.bool_)
        touched[run] = True
        for r in np.flatnonzero(touched & ~self.checked).tolist():
            lines = self.lines.slice(int(self.run_start[r]), int(self.length[r])).to_numpy()
            if not bool((lines[1:] > lines[:-1]).all()):
                self.ordered = False
                return None
            self.checked[r] = True
        if not self.consecutive.any():  # every run searched: no place to compute
            return self._searched(run, line)
        at = self.run_start[run] + line - self.first[run]
        dense = self.consecutive[run]
        if not bool(((line >= self.first[run]) & (at < self.run_start[run + 1]))[dense].all()):
            raise AssertionError("a stage decided a row the state does not hold")
        ordered = np.sort(at[dense])
        if bool((ordered[1:] == ordered[:-1]).any()):
            raise AssertionError("a stage decided a row twice")
        del ordered
        sparse = np.flatnonzero(~dense)
        if len(sparse):
            at[sparse] = self._searched(run[sparse], line[sparse])
        return at

    def _searched(
        self, run: npt.NDArray[np.int64], line: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.int64]:
        """The places of rows of runs whose lines are not consecutive, by a binary search
        among each run's lines."""
        by_run = np.argsort(run, kind="stable")
        bounds = np.flatnonzero(np.diff(run[by_run])) + 1
        at = np.empty(len(run), np.int64)
        for rows in np.split(by_run, bounds) if len(by_run) else []:
            r = int(run[rows[0]])
            lo = int(self.run_start[r])
            lines = self.lines.slice(lo, int(self.length[r])).to_numpy()
            wanted = line[rows]
            place = np.searchsorted(lines, wanted)
            found = place < len(lines)
            found[found] = lines[place[found]] == wanted[found]
            if not found.all():
                raise AssertionError("a stage decided a row the state does not hold")
            at[rows] = lo + place
            place.sort()  # in place: this run's places are set
            if bool((place[1:] == place[:-1]).any()):
                raise AssertionError("a stage decided a row twice")
        return at


def _places_sorting(current: pl.DataFrame, decided: pl.DataFrame) -> npt.NDArray[np.int64]:
    """:func:`_places` for a state in any order: every row's (shard, line) key, sorted
    where it is not, and a binary search of each decided row's."""
    state, wanted = _key_codes(current, decided)
    order = None if bool((state[1:] > state[:-1]).all()) else np.argsort(state, kind="stable")
    ordered = state if order is None else state[order]
    at: npt.NDArray[np.int64] = np.searchsorted(ordered, wanted)
    found: npt.NDArray[np.bool_] = at < len(ordered)
    found[found] = ordered[at[found]] == wanted[found]
    if not found.all() or len(distinct(at)) != len(at):
        raise AssertionError("a stage decided a row the state does not hold, or one twice")
    return at if order is None else order[at]


def _key_codes(*frames: pl.DataFrame) -> list[npt.NDArray[np.int64]]:
    """Each row's keys (``_shard``, ``_shard_line``) as one 64-bit code that orders as
    the keys do, alike across ``frames``."""
    shards = [f["_shard"].to_numpy().astype(np.int64) for f in frames]
    lines = [f["_shard_line"].to_numpy().astype(np.int64) for f in frames]
    line_bits = max(int(a.max(initial=0)) for a in lines).bit_length()
    if max(int(a.max(initial=0)) for a in shards).bit_length() + line_bits > 63:
        raise AssertionError("shard and line numbers beyond 63 bits")
    return [(shard << line_bits) | line for shard, line in zip(shards, lines, strict=True)]


def repeated_keys(frame: pl.DataFrame, *, every: bool = True) -> npt.NDArray[np.bool_]:
    """Which rows of ``frame`` share their keys (``_shard``, ``_shard_line``) with another
    of its rows: each of them (``every``, as ``pl.struct(KEYS).is_duplicated()``), or
    each but the first (the rows ``unique(KEYS, keep="first")`` leaves out). Found by a
    stable sort of one code a row (~25 bytes a row for the moment): polars' hash table
    of the keys held ~150 bytes a row (45 MB over 300,115 retries)."""
    (codes,) = _key_codes(frame)
    order = np.argsort(codes, kind="stable")
    ordered = codes[order]
    same = ordered[1:] == ordered[:-1]  # order[i + 1] repeats order[i]
    found = np.zeros(len(codes), np.bool_)
    found[order[1:][same]] = True
    if every:
        found[order[:-1][same]] = True
    return found


def _spread(at: npt.NDArray[np.int64], rows: int) -> pl.Series:
    """For each of ``rows`` state rows, the decided row placed there (``at``), or null."""
    where = np.zeros(rows, dtype=np.uint32)
    where[at] = np.arange(len(at), dtype=np.uint32)
    taken = np.zeros(rows, dtype=np.bool_)
    taken[at] = True
    return cast(pl.Series, pl.from_arrow(pa.array(where, mask=~taken)))


def merge_decisions(frames: list[pl.DataFrame]) -> pl.DataFrame:
    """One row per key: the last disposition set, all reasons in stage order, columns."""
    tagged = [f.with_columns(_stage=pl.lit(i, pl.Int32)) for i, f in enumerate(frames)]
    merged = pl.concat(tagged, how="diagonal_relaxed").sort([*KEYS, "_stage"])
    extras = [
        c for c in merged.columns if c not in (*KEYS, "_stage", "_disposition", "_reasons_add")
    ]
    aggregations = [
        pl.col("_disposition").drop_nulls().last()
        if "_disposition" in merged.columns
        else pl.lit(None, pl.String).alias("_disposition"),
        *(pl.col(c).drop_nulls().first() for c in extras),
    ]
    if "_reasons_add" in merged.columns:
        aggregations.append(
            pl.col("_reasons_add").drop_nulls().explode().drop_nulls().alias("_reasons_add")
        )
    return merged.group_by(list(KEYS), maintain_order=True).agg(aggregations)


def by_shard(decisions: pl.DataFrame, columns: list[OutputColumn]) -> dict[int, pa.Table]:
    """Split decisions per shard as Arrow tables with exact types for the writer."""
    fields = [
        pa.field("_shard_line", pa.int64()),
        pa.field("_disposition", pa.string()),
        pa.field("_reasons_add", REASONS_TYPE),
        *(pa.field(c.name, c.type) for c in columns),
    ]
    out: dict[int, pa.Table] = {}
    for (shard,), part in decisions.sort(list(KEYS)).partition_by("_shard", as_dict=True).items():
        arrow = part.to_arrow()
        arrays = []
        for f in fields:
            if f.name not in arrow.column_names:
                arrays.append(pa.nulls(part.height, f.type))
            elif f.name == "_reasons_add":
                # empty lists and nulls both mean "nothing added"
                arrays.append(pa.array([r or [] for r in arrow[f.name].to_pylist()], f.type))
            else:
                arrays.append(arrow[f.name].cast(f.type))
        out[int(shard)] = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
    return out


def _check_rejected_columns(columns: dict[str, list[OutputColumn]]) -> None:
    seen: dict[str, pa.DataType] = {}
    for kind_columns in columns.values():
        for c in kind_columns:
            if Disposition.REJECTED in c.dispositions:
                if c.name in seen and seen[c.name] != c.type:
                    raise ValueError(f"column {c.name!r} on rejected/ has different types per kind")
                seen[c.name] = c.type


def rejected_columns(columns: dict[str, list[OutputColumn]]) -> list[OutputColumn]:
    """The extra columns of ``rejected/``: those any kind declares for it, by name."""
    found: dict[str, OutputColumn] = {}
    for kind in sorted(columns):
        for c in columns[kind]:
            if Disposition.REJECTED in c.dispositions:
                found.setdefault(c.name, c)
    return [found[name] for name in sorted(found)]
