"""The global phase's tasks per shard (pipeline.decide.by_shard): what each carries."""

from __future__ import annotations

import pickle
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import polars as pl
import pytest

from pipeline.decide import by_shard
from pipeline.decide.context import DISPOSITIONS, GlobalContext
from pipeline.storage import RunStorage


@pytest.mark.parametrize("in_shard_order", [False, True])
def test_a_shard_task_reads_its_own_rows_and_no_others_bytes(
    in_shard_order: bool, tmp_path: Path
) -> None:
    """The whole-run stages' decisions are staged a shard at a time and let go by the
    driver; a shard's task carries only where its part is. A part cut from the frame of
    every row shared its buffers: pickled to its task, it carried every duplicate's
    pointer strings (~190 KB a task at 60,000 rows, for its 30), and, cut as a slice (a
    frame in shard order), every row's reasons. A staged part holds about its own rows'
    bytes; a stage with no row in the shard still gives a frame, for its columns."""
    shards, rows = 40, 40_000
    lines = pl.int_range(0, rows, eager=True)
    shard = lines // (rows // (shards - 2) + 1) if in_shard_order else lines % (shards - 2)
    decided = pl.DataFrame({"_shard": shard.cast(pl.Int32), "_line": lines})
    if in_shard_order:
        decided = decided.set_sorted("_shard")  # partition_by then slices
    decided = decided.select(
        "_shard",
        _shard_line=pl.col("_line").cast(pl.Int64),
        _dedupe_rule=pl.lit("near"),
        _duplicate_of=pl.struct(
            _source=pl.lit("/data/exports/" + "x" * 60) + pl.col("_line").cast(pl.String),
            _line=pl.col("_line"),
        ),
        _reasons_add=pl.concat_list(
            pl.struct(code=pl.lit("dedupe.near"), detail=pl.format("of line {}", "_line"))
        ),
    )
    other = decided.filter(pl.col("_shard") == 3).select("_shard", "_shard_line")
    state = pl.DataFrame(
        {"_shard": pl.Series([s for s in range(shards) for _ in range(3)], dtype=pl.Int32)}
    ).with_columns(
        _shard_line=pl.int_range(0, 3 * shards, dtype=pl.Int64),
        _disposition=pl.lit("accepted", DISPOSITIONS),
    )
    ctx: Any = SimpleNamespace(
        summaries=[SimpleNamespace(shard=s, kinds=("k",)) for s in range(shards)],
        shards={s: f"shard {s}" for s in range(shards)},
        line_bases=dict.fromkeys(range(shards), 0),
    )
    storage = RunStorage(tmp_path)
    staging = by_shard.DecisionStaging(storage, "k")
    staging.stage(0, decided)
    staging.stage(2, other)  # stage 1 decided nothing
    staged = staging.staged()
    tasks = list(by_shard._tasks(cast(GlobalContext, ctx), True, state, staged))
    assert [t.summary.shard for t in tasks] == list(range(shards))
    whole = decided.to_arrow().nbytes
    for task in tasks:
        shard = task.summary.shard
        mine, theirs = (by_shard._staged_part(storage, shard, *part) for part in task.decided)
        assert mine.equals(decided.filter(pl.col("_shard") == shard))
        assert mine.schema == decided.schema
        assert theirs.equals(other.filter(pl.col("_shard") == shard))
        assert theirs.schema == other.schema
        assert task.state is not None
        assert task.state.equals(state.filter(pl.col("_shard") == shard))
        assert len(pickle.dumps(task.decided)) < 4096  # columns and a stem, no rows
        parts, empty = task.decided[0][1], shard >= shards - 2
        assert (not parts) == empty  # the last two shards have no decided row
        for stem, _ in parts:
            assert storage.staged_table(shard, stem).nbytes < 2 * whole / (shards - 2)


def test_a_stage_made_in_parts_gives_each_shard_the_frame_made_whole(tmp_path: Path) -> None:
    """A stage may make its decisions a part at a time (dedupe's removed rows a slice at a
    time, then the rows it flags, with fewer columns): each shard's task reads its parts
    as one frame, the rows in the order made and the stage's columns, which is what
    the stage's frame made whole gives the shard. Parts cut a shard's rows apart."""
    rows = 5_000
    removed = pl.DataFrame(
        {"_shard": pl.int_range(0, rows, eager=True).cast(pl.Int32) // 700}
    ).with_columns(
        _shard_line=pl.int_range(0, rows, dtype=pl.Int64) * 2,
        _dedupe_cluster=pl.int_range(0, rows, dtype=pl.Int64) % 17,
        _disposition=pl.lit("duplicate"),
        _reasons_add=pl.concat_list(pl.struct(code=pl.lit("dedupe.exact"), detail=pl.lit("d"))),
    )
    flagged = removed.select(
        "_shard",
        _shard_line=pl.col("_shard_line") + 1,
        _reasons_add=pl.concat_list(pl.struct(code=pl.lit("dedupe.split"), detail=pl.lit("s"))),
    ).gather_every(3)
    whole = pl.concat([removed, flagged], how="diagonal_relaxed")
    staging = by_shard.DecisionStaging(RunStorage(tmp_path), "k")
    for lo in range(0, rows, 1_024):  # slices end inside shards
        staging.stage(0, removed.slice(lo, 1_024))
    staging.stage(0, flagged)
    staged = staging.staged()
    assert [e.schema for e in staged.empty] == [whole.schema]
    for shard in range(rows // 700 + 2):
        ((empty, parts),) = staged.of(shard)
        own = [i for i in range(rows) if i // 700 == shard]
        slices = {i // 1_024 for i in own} | (
            {"flagged"} if any(i % 3 == 0 for i in own) else set()
        )
        assert len(parts) == len(slices)  # only the parts holding its rows
        mine = by_shard._staged_part(staging.storage, shard, empty, parts)
        assert mine.equals(whole.filter(pl.col("_shard") == shard)), shard
        assert staged.decides(shard) == (shard <= rows // 700)


def test_the_driver_keeps_keys_dispositions_carried_columns_and_codes() -> None:
    """What the driver keeps of a part it staged (``_retained``): what later stages read
    (keys, dispositions, carried columns, and reason codes where a later stage reads
    them), not the reasons' paths and details nor other columns; a plug-in's reasons
    that hold no code (empty lists, no type) stay as they are."""
    from pipeline.decide.context import _retained

    part = pl.DataFrame(
        {
            "_shard": [0, 1],
            "_shard_line": [5, 6],
            "_disposition": ["duplicate", None],
            "_score": [0.5, 0.25],
            "_duplicate_of": ["a", "b"],
            "_reasons_add": [[{"code": "x.y", "path": "$.a", "detail": "long"}], []],
        }
    )
    kept = _retained(part, {"_score"}, codes=True)
    assert kept.columns == ["_shard", "_shard_line", "_disposition", "_score", "_reasons_add"]
    assert kept["_reasons_add"].to_list() == [[{"code": "x.y"}], []]
    untyped = pl.DataFrame({"_shard": [0], "_shard_line": [1], "_reasons_add": [[]]})
    assert _retained(untyped, set(), codes=True).equals(untyped)
    assert _retained(part, {"_score"}, codes=False).equals(
        part.drop("_duplicate_of", "_reasons_add")
    )
