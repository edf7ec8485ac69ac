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
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import numpy as np
import polars as pl
import pyarrow as pa

from pipeline.core.config import CampaignConfig
from pipeline.core.errors import RowgateError
from pipeline.decide.columns import OutputColumn
from pipeline.decide.context import (
    GlobalContext,
    GlobalStage,
    by_shard,
    merge_decisions,
    run_stages,
)
from pipeline.engines import Progress, Step
from pipeline.engines.local import LocalEngine
from pipeline.gate.reader import Shard
from pipeline.gate.staging import ShardSummary
from pipeline.storage import RunStorage

__all__ = ["RowLocalStage", "decide_by_shard", "row_local_from", "summed_counts"]


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


@dataclass(frozen=True)
class _ShardTask:
    shard: Shard
    summary: ShardSummary
    line_base: int
    #: the shard's state after the whole-run stages (None: no row-local stage runs)
    state: pl.DataFrame | None
    #: each whole-run stage's decisions for the shard's rows, in stage order (may be empty)
    decided: tuple[pl.DataFrame, ...]


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
    decided: Sequence[pl.DataFrame],
    columns: Sequence[OutputColumn],
    timings: dict[str, float],
) -> tuple[int, ...]:
    """Run the row-local ``stages`` over ``current`` (the kind's state after the others,
    whose decisions are ``decided``) and stage each shard's merged decisions; the shards
    that have a decisions table. Adds the stages' seconds (summed over the tasks) to
    ``timings`` and their notes to ``ctx.notes``."""
    if not stages and not any(frame.height for frame in decided):
        return ()
    settings = _Settings(
        ctx.config,
        ctx.storage,
        kind,
        tuple(type(stage) for stage in stages),
        frozenset(c.name for c in columns if c.carried),
        tuple(columns),
    )
    tasks = list(_tasks(ctx, kind, bool(stages), current, decided))
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
    kind: str,
    with_state: bool,
    current: pl.DataFrame,
    decided: Sequence[pl.DataFrame],
) -> Iterator[_ShardTask]:
    """A task per shard of ``kind`` (only those with decisions when no stage runs)."""
    parts = [frame.partition_by("_shard", as_dict=True) for frame in decided]
    runs = current["_shard"].rle()
    starts: dict[int, tuple[int, int]] = {}
    at = 0
    for shard, length in zip(runs.struct.field("value"), runs.struct.field("len"), strict=True):
        starts[int(shard)] = (at, int(length))
        at += int(length)
    for summary in ctx.summaries:
        if kind not in summary.kinds:
            continue
        shard = summary.shard
        # a stage's frame with no row in the shard is kept for its columns: the merge's
        # output columns are those of every frame
        mine = tuple(
            _own_buffers(part.get((shard,), frame.clear()))
            for part, frame in zip(parts, decided, strict=True)
        )
        if not with_state and not any(frame.height for frame in mine):
            continue
        lo, n = starts.get(shard, (0, 0))
        yield _ShardTask(
            ctx.shards[shard],
            summary,
            ctx.line_bases[shard],
            current.slice(lo, n) if with_state else None,
            mine,
        )


def _own_buffers(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` holding only its own rows' bytes. A frame cut from another (a partition)
    shares the whole frame's buffers, and pickling it to a task sent them all: every task
    of a 60,000-row run with near dedupe carried ~190 KB of every duplicate's pointer
    strings, for its 30 rows. A slice's lists keep their offsets into the whole child
    array even through Arrow; Arrow's take copies every column's values row by row."""
    table = frame.to_arrow()
    rows = pa.array(np.arange(table.num_rows, dtype=np.int64))
    copied = cast(pl.DataFrame, pl.from_arrow(table.take(rows)))
    if copied.schema != frame.schema:
        raise AssertionError(f"a decisions frame changed type through Arrow: {frame.schema}")
    return copied


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
    frames = list(task.decided)
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
