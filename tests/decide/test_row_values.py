"""A row's value of an expression does not depend on the rows staged beside it
(:func:`pipeline.core.row_local.row_values`, :func:`evaluate_shard`): polars divides
a column by a constant by multiplying with its reciprocal, except where it holds the
column as one value (a frame of one row), where it divides."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.core.row_local import row_values
from pipeline.decide import partitioned
from pipeline.decide.partitioned import evaluate_shard
from pipeline.storage import RunStorage

EXPRS = {
    "q": (pl.col("a") + pl.col("b")) / 3,  # a quotient by a constant
    "n": pl.lit(None, pl.Float64),  # a literal: a value for every row, not once
}


def _beside_others(a: list[int], b: list[int]) -> pl.DataFrame:
    """The expressions over every row at once: what a row gets beside other rows."""
    table = pa.table({"a": pa.array(a * 2, pa.int64()), "b": pa.array(b * 2, pa.int64())})
    return row_values(table.to_batches()[0], EXPRS).head(len(a))


def _staged(tmp_path: Path, a: list[int], b: list[int], sizes: list[int]) -> pl.DataFrame:
    """``evaluate_shard`` over one shard staged in batches of ``sizes`` rows."""
    storage = RunStorage(tmp_path)
    schema = pa.schema([("_shard_line", pa.int64()), ("a", pa.int64()), ("b", pa.int64())])
    with storage.stage_writer(0, "k", schema) as writer:
        start = 0
        for size in sizes:
            writer.write_batch(
                pa.record_batch(
                    [
                        pa.array(range(start + 1, start + size + 1), pa.int64()),
                        pa.array(a[start : start + size], pa.int64()),
                        pa.array(b[start : start + size], pa.int64()),
                    ],
                    schema=schema,
                )
            )
            start += size
    return evaluate_shard(storage, 0, "k", EXPRS)


@pytest.mark.parametrize("together", [1, 4096])
def test_a_row_staged_alone_gets_the_value_it_gets_beside_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, together: int
) -> None:
    """Batches evaluated one at a time (``together``: 1 row at least), or several as
    one."""
    monkeypatch.setattr(partitioned, "_EVALUATED_ROWS", together)
    a, b = [5, 7, 10, 5, 14, 1, 2, 3, 4, 20], [0, 0, 0, 0, 0, 1, 1, 1, 1, 0]
    # the premise: polars gives 5 / 3 another last bit in a frame of one row
    alone = pl.DataFrame({"a": [5], "b": [0]}).select(EXPRS["q"]).item()
    assert alone != _beside_others(a, b)["q"][0] == 1.6666666666666665
    got = _staged(tmp_path, a, b, [1, 3, 1, 5])
    assert got["_shard"].to_list() == [0] * 10
    assert got["_shard_line"].to_list() == list(range(1, 11))
    assert got["q"].to_list() == _beside_others(a, b)["q"].to_list()
    assert got["n"].to_list() == [None] * 10


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(st.tuples(st.integers(-50, 50), st.integers(-50, 50)), min_size=1, max_size=30),
    st.data(),
)
def test_values_are_the_same_for_any_batching(
    tmp_path_factory: pytest.TempPathFactory,
    rows: list[tuple[int, int]],
    data: st.DataObject,
) -> None:
    a, b = [r[0] for r in rows], [r[1] for r in rows]
    cuts = data.draw(st.lists(st.integers(1, len(rows)), unique=True, max_size=len(rows)))
    bounds = [0, *sorted(set(cuts) - {len(rows)}), len(rows)]
    sizes = [hi - lo for lo, hi in itertools.pairwise(bounds)]
    got = _staged(tmp_path_factory.mktemp("staged"), a, b, sizes)
    assert got["q"].to_list() == _beside_others(a, b)["q"].to_list()


def test_a_shard_of_one_row_gets_the_value_it_gets_beside_others(tmp_path: Path) -> None:
    got = _staged(tmp_path, [5], [0], [1])
    assert got["q"].to_list() == _beside_others([5], [0])["q"].to_list() == [1.6666666666666665]


def test_small_batches_are_evaluated_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """polars' cost per call made a shard of one-row batches ~20 times slower: batches
    are joined up to ``_EVALUATED_ROWS`` rows (a larger one alone), in order."""
    monkeypatch.setattr(partitioned, "_EVALUATED_ROWS", 4)
    batches = [
        pa.record_batch({"x": pa.array(range(n), pa.int64())}) for n in (1, 1, 1, 2, 7, 1, 0, 2)
    ]
    pieces = list(partitioned._pieces(batches))
    assert [p.num_rows for p in pieces] == [5, 7, 3]
    assert pa.Table.from_batches(pieces).equals(pa.Table.from_batches(batches))


def test_an_expression_may_read_its_shard(tmp_path: Path) -> None:
    """``_shard`` is no staged column, yet an expression may read it (what a row's input
    and split are known by): each row gets its shard's number, in a file of rows and in
    a file of none."""
    storage = RunStorage(tmp_path)
    schema = pa.schema([("_shard_line", pa.int64()), ("a", pa.int64())])
    for shard, lines in ((3, [1, 2]), (4, [])):
        table = pa.table([pa.array(lines, pa.int64()), pa.array(lines, pa.int64())], schema=schema)
        storage.stage_table(shard, "k", table)
    exprs = {"split": pl.col("_shard").replace_strict({3: "train", 4: "eval"}), "a": pl.col("a")}
    got = evaluate_shard(storage, 3, "k", exprs)
    assert got.select("split", "a").rows() == [("train", 1), ("train", 2)]
    none = evaluate_shard(storage, 4, "k", exprs)
    assert none.height == 0
    assert none.columns == ["_shard", "_shard_line", "split", "a"]


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    sizes=st.lists(st.integers(0, 6), min_size=1, max_size=5),
    within=st.none() | st.sets(st.integers(0, 32)),
    without=st.none() | st.sets(st.integers(0, 32)),
)
def test_rows_left_out_before_evaluating_are_the_rows_filtered_after(
    tmp_path: Path, sizes: list[int], within: set[int] | None, without: set[int] | None
) -> None:
    """``within`` and ``without`` leave rows out before the expressions run: the rows,
    values and types of evaluating every row and filtering after, in line order, and a
    typed empty frame where no row is left (a fallback once evaluated every row)."""
    total = sum(sizes)
    a, b = list(range(total)), [2 * n + 1 for n in range(total)]
    every = _staged(tmp_path, a, b, sizes)
    lines = pl.col("_shard_line")
    expected = every.filter(
        (lines.is_in(sorted(within)) if within is not None else pl.lit(True))
        & (~lines.is_in(sorted(without)) if without is not None else pl.lit(True))
    )
    as_array = [None if s is None else np.array(sorted(s), np.int64) for s in (within, without)]
    got = evaluate_shard(
        RunStorage(tmp_path), 0, "k", EXPRS, within=as_array[0], without=as_array[1]
    )
    assert got.schema == every.schema
    assert got.equals(expected)
