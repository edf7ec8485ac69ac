"""The global phase's end, a task per shard on the engine: the row-local stages (scoring,
the policy) and the merge of every stage's decisions into the table the writer reads.

A stage whose decision for a row reads that row alone (its staged values, its state and
its reasons so far) declares ``row_local = True``. The stages after the last one that is
not row-local run here, a shard at a time: each task is given its shard's state (after
the whole-run stages), those stages' decisions for its rows, and a context of its shard
alone (:meth:`GlobalContext.evaluate` reads that shard, ``ctx.engine`` runs in the task's
process). It runs the stages in order, merges the shard's decisions and stages the merged
table beside the shard's rows (:meth:`RunStorage.decisions_stem`), where the write task
reads it; the driver receives each stage's note for the shard and makes the run's
(``combine_notes``).

Why: run in the driver over every row, the scores, the policy's columns and the merge of
every row's decisions were ~3.9 KB a row of the driver's memory (on a 400 MB pairwise
export scored with code-review-v1: 547 MB of anonymous memory at 119,811 rows against
208 MB at 29,941), and the write tasks carried every row's decisions. A task now holds
one shard's, and the driver none. The decisions are those of the whole-run computation:
a row-local stage's decision for a row does not depend on the other rows, and a merge
groups decisions by row (tests compare every output byte).

The whole-run stages' decisions reach the tasks through the staging area: the driver
stages each stage's decisions a shard at a time beside the shard's rows and lets them
go, as each stage makes them (:class:`DecisionStaging`). Carried in the tasks, they were held
three times over while the tasks ran (the frames, their partition by shard and each
task's copy): the merge was the run's peak where most rows were duplicates (376 against
233 MB at 400,000 rows, 93 % duplicates).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import numpy as np
import polars as pl

from pipeline.core.config import CampaignConfig
from pipeline.core.errors import RowgateError
from pipeline.decide.columns import OutputColumn
from pipeline.decide.context import (
    GlobalContext,
    GlobalStage,
    by_shard,
    merge_decisions,
    run_stages,
    shard_runs,
)
from pipeline.engines import Progress, Step
from pipeline.engines.local import LocalEngine
from pipeline.gate.reader import Shard
from pipeline.gate.staging import ShardSummary
from pipeline.storage import RunStorage

__all__ = [
    "DecisionStaging",
    "RowLocalStage",
    "StagedDecisions",
    "decide_by_shard",
    "row_local_from",
    "summed_counts",
]


class RowLocalStage(GlobalStage, Protocol):
    """A stage that sets ``row_local = True`` (:class:`GlobalStage`)."""

    row_local: bool

    def combine_notes(self, parts: Sequence[Any]) -> Any:
        """The run's note of a kind from its shards' notes, in shard order."""
        ...


def row_local_from(stages: Sequence[GlobalStage]) -> int:
    """Where the trailing run of row-local stages begins (``len(stages)``: none)."""
    at = len(stages)
    while at and getattr(stages[at - 1], "row_local", False):
        at -= 1
    return at


@dataclass(frozen=True)
class _Settings:
    """What every task of one kind shares (compared by value: the engine's contract)."""

    config: CampaignConfig
    storage: RunStorage
    kind: str
    #: the row-local stages' classes, instantiated in each worker (plug-ins: importable)
    stages: tuple[type, ...]
    carried: frozenset[str]
    columns: tuple[OutputColumn, ...]


#: A stage's decisions for a shard: its columns (an empty frame) and each of its parts
#: that decided rows of the shard, as (stem, the part's columns).
StagePart = tuple[pl.DataFrame, tuple[tuple[str, pl.DataFrame], ...]]


@dataclass(frozen=True)
class StagedDecisions:
    """The whole-run stages' decisions of a kind, staged a shard at a time as the stages
    made them (:class:`DecisionStaging`): for each stage that decided rows, in stage
    order, its columns (an empty frame: the merge's output columns are those of every
    stage) and its parts, each a stem, the part's columns and the shards it decided
    rows of."""

    kind: str
    empty: tuple[pl.DataFrame, ...]
    parts: tuple[tuple[tuple[str, pl.DataFrame, frozenset[int]], ...], ...]

    def decides(self, shard: int) -> bool:
        """Whether any stage decided a row of ``shard``."""
        return any(shard in shards for parts in self.parts for _, _, shards in parts)

    def of(self, shard: int) -> tuple[StagePart, ...]:
        """Each stage's decisions for ``shard``: its columns and the parts that decided
        rows of the shard (none: the stage decided none of them)."""
        return tuple(
            (empty, tuple((stem, columns) for stem, columns, shards in parts if shard in shards))
            for empty, parts in zip(self.empty, self.parts, strict=True)
        )


class DecisionStaging:
    """Stages a kind's whole-run decisions as the stages make them, a part at a time
    (:func:`~pipeline.decide.context.run_stages`' ``stage_part``): each part a shard at a
    time beside the shard's rows, gathered out of the part and converted to Arrow alone,
    so that the file holds its own rows' bytes (a polars gather shares the frame's
    string buffers; Arrow's large strings copy only the part's). A stage may make its
    decisions a slice at a time (dedupe's removed rows): the driver then holds one slice
    of them, not all."""

    def __init__(self, storage: RunStorage, kind: str) -> None:
        self.storage = storage
        self.kind = kind
        self._parts: dict[int, list[tuple[str, pl.DataFrame, frozenset[int]]]] = {}
        self._count = 0

    def stage(self, stage: int, part: pl.DataFrame) -> None:
        """Stage ``part``, decisions the ``stage``-th stage made (its parts come in order)."""
        stem = self.storage.stage_decisions_stem(self.kind, self._count)
        self._count += 1
        in_shard = part["_shard"].to_numpy()
        order = np.argsort(in_shard, kind="stable")
        ordered = in_shard[order]
        starts: list[int] = (
            np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]]).tolist() if len(order) else []
        )
        for lo, hi in itertools.pairwise([*starts, len(order)]):
            self.storage.stage_table(int(ordered[lo]), stem, part[order[lo:hi]].to_arrow())
        shards = frozenset(int(ordered[lo]) for lo in starts)
        self._parts.setdefault(stage, []).append((stem, part.clear(), shards))

    def staged(self) -> StagedDecisions:
        """What was staged, stage by stage in stage order."""
        stages = [tuple(self._parts[i]) for i in sorted(self._parts)]
        empty = [
            pl.concat([columns for _, columns, _ in parts], how="diagonal_relaxed")
            for parts in stages
        ]
        return StagedDecisions(self.kind, tuple(empty), tuple(stages))


def _staged_part(
    storage: RunStorage, shard: int, empty: pl.DataFrame, parts: Sequence[tuple[str, pl.DataFrame]]
) -> pl.DataFrame:
    """One stage's decisions for ``shard``, as the stage made them: its parts' rows in
    the order they were made, with the stage's columns."""
    frames = []
    for stem, columns in parts:
        frame = cast(pl.DataFrame, pl.from_arrow(storage.staged_table(shard, stem)))
        if frame.schema != columns.schema:
            raise AssertionError(f"a staged decisions frame changed type through Arrow: {stem}")
        frames.append(frame)
    if len(frames) == 1 and frames[0].schema == empty.schema:
        return frames[0]
    merged = pl.concat([empty, *frames], how="diagonal_relaxed")
    if merged.schema != empty.schema:
        raise AssertionError(f"a stage's staged parts do not give its columns: {parts}")
    return merged


@dataclass(frozen=True)
class _ShardTask:
    shard: Shard
    summary: ShardSummary
    line_base: int
    #: the shard's state after the whole-run stages (None: no row-local stage runs)
    state: pl.DataFrame | None
    #: each whole-run stage's decisions for the shard's rows, in stage order: its
    #: columns and where they are staged (:meth:`StagedDecisions.of`)
    decided: tuple[StagePart, ...]


@dataclass(frozen=True)
class _ShardOutcome:
    #: each row-local stage's note for the shard, by stage name
    notes: dict[str, Any]
    #: seconds each row-local stage took, by stage name
    seconds: dict[str, float]
    #: whether a decisions table was staged for the shard
    staged: bool
    #: what a stage refused the run for on this shard's rows (a binding that failed on
    #: a value), raised by the driver for the first shard in input order that has one
    error: RowgateError | None = None


def decide_by_shard(
    ctx: GlobalContext,
    kind: str,
    stages: Sequence[GlobalStage],
    current: pl.DataFrame,
    decided: StagedDecisions,
    columns: Sequence[OutputColumn],
    timings: dict[str, float],
) -> tuple[int, ...]:
    """Run the row-local ``stages`` over ``current`` (the kind's state after the others,
    whose decisions are ``decided``) and stage each shard's merged decisions; the shards
    that have a decisions table. Adds the stages' seconds (summed over the tasks) to
    ``timings`` and their notes to ``ctx.notes``."""
    if not stages and not decided.parts:
        return ()
    settings = _Settings(
        ctx.config,
        ctx.storage,
        kind,
        tuple(type(stage) for stage in stages),
        frozenset(c.name for c in columns if c.carried),
        tuple(columns),
    )
    tasks = list(_tasks(ctx, bool(stages), current, decided))
    outcomes = ctx.engine.map(Step(_init, (settings,), _decide_shard), tasks)
    # every task ran: the error is the first shard's, not the first to arrive
    failed = next((o.error for o in outcomes if o.error is not None), None)
    if failed is not None:
        raise failed
    for stage in stages:
        timings[stage.name] = timings.get(stage.name, 0.0) + sum(
            o.seconds.get(stage.name, 0.0) for o in outcomes
        )
        parts = [o.notes[stage.name] for o in outcomes if stage.name in o.notes]
        if parts:
            note = cast(RowLocalStage, stage).combine_notes(parts)
            ctx.notes.setdefault(stage.name, {})[kind] = note
    return tuple(t.shard.index for t, o in zip(tasks, outcomes, strict=True) if o.staged)


def _tasks(
    ctx: GlobalContext,
    with_state: bool,
    current: pl.DataFrame,
    decided: StagedDecisions,
) -> Iterator[_ShardTask]:
    """A task per shard of the kind (only those with decisions when no stage runs)."""
    kind = decided.kind
    shards, bounds = shard_runs(current)
    starts = {
        int(shard): (int(lo), int(hi - lo))
        for shard, lo, hi in zip(shards, bounds[:-1], bounds[1:], strict=True)
    }
    for summary in ctx.summaries:
        if kind not in summary.kinds:
            continue
        shard = summary.shard
        if not with_state and not decided.decides(shard):
            continue
        lo, n = starts.get(shard, (0, 0))
        yield _ShardTask(
            ctx.shards[shard],
            summary,
            ctx.line_bases[shard],
            current.slice(lo, n) if with_state else None,
            decided.of(shard),
        )


def _init(settings: _Settings) -> tuple[_Settings, list[GlobalStage]]:
    return settings, [cls() for cls in settings.stages]


def _decide_shard(
    state: tuple[_Settings, list[GlobalStage]], task: _ShardTask, progress: Progress
) -> _ShardOutcome:
    """One shard: the row-local stages over its state, then its decisions merged and
    staged (:mod:`pipeline.decide.by_shard`)."""
    settings, stages = state
    kind, shard = settings.kind, task.summary.shard
    ctx = GlobalContext(
        settings.config,
        settings.storage,
        (task.shard,),
        (task.summary,),
        {shard: task.line_base},
        LocalEngine(1),
    )
    frames = [_staged_part(settings.storage, shard, *part) for part in task.decided]
    seconds: dict[str, float] = {}
    try:
        if task.state is not None:  # a task of row-local stages carries the state
            run_stages(
                ctx, kind, stages, task.state, frames, settings.carried, seconds, read_after=False
            )
    except RowgateError as error:
        return _ShardOutcome({}, {}, False, error)
    if ctx.artifacts or set(ctx.notes) - {s.name for s in stages}:
        raise AssertionError("a row-local stage wrote a whole-run table or another's note")
    notes = {name: note[kind] for name, note in ctx.notes.items() if kind in note}
    staged = False
    if any(frame.height for frame in frames):
        table = by_shard(merge_decisions(frames), list(settings.columns))[shard]
        settings.storage.stage_table(shard, settings.storage.decisions_stem(kind), table)
        staged = True
    return _ShardOutcome(notes, seconds, staged)


def summed_counts(parts: Sequence[Mapping[str, int]]) -> dict[str, int]:
    """Counts by key summed over ``parts``, in key order (how the notes list them)."""
    total: dict[str, int] = {}
    for part in parts:
        for key, n in part.items():
            total[key] = total.get(key, 0) + n
    return dict(sorted(total.items()))
