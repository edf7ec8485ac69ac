"""The global phase's tasks per shard (pipeline.decide.by_shard): what each carries."""

from __future__ import annotations

import pickle
from types import SimpleNamespace
from typing import Any, cast

import polars as pl
import pytest

from pipeline.decide import by_shard
from pipeline.decide.context import DISPOSITIONS, GlobalContext


@pytest.mark.parametrize("in_shard_order", [False, True])
def test_a_shard_task_carries_its_own_rows_and_no_others_bytes(in_shard_order: bool) -> None:
    """A shard's part of a stage's decisions was cut from the frame of every row, whose
    buffers it shared: pickled to its task, it carried every duplicate's pointer strings
    (~190 KB a task at 60,000 rows, for its 30), and, cut as a slice (a frame in shard
    order), every row's reasons. Now about its own rows' bytes; a stage with no row in
    the shard still gives a frame, for its columns."""
    shards, rows = 40, 40_000
    lines = pl.int_range(0, rows, eager=True)
    shard = lines // (rows // (shards - 1) + 1) if in_shard_order else lines % (shards - 1)
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
    tasks = list(by_shard._tasks(cast(GlobalContext, ctx), "k", True, state, [decided]))
    assert [t.summary.shard for t in tasks] == list(range(shards))
    whole = len(pickle.dumps(decided))
    for task in tasks:
        shard = task.summary.shard
        [mine] = task.decided
        assert mine.equals(decided.filter(pl.col("_shard") == shard))
        assert mine.schema == decided.schema
        assert task.state is not None
        assert task.state.equals(state.filter(pl.col("_shard") == shard))
        assert len(pickle.dumps(task.decided)) < 3 * whole / shards + 4096
