"""A survivor column of text's order keys, from an external sort by ranges of values,
order the rows as the in-memory rank of every row does (ties and nulls in their order),
however the values come in blocks and however many ranges they are cut into."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pipeline.dedupe import text_order
from pipeline.dedupe.participants import mapped_ranking
from pipeline.dedupe.table import MISSING_KEY, ranked_values
from pipeline.dedupe.text_order import text_order_keys

_TEXTS = ["", "a", "a\x00", "ab", "b", "B", "é", "zz", "aa"]


def _ranks_by_keys(keys: np.ndarray) -> np.ndarray:
    """Each row's place in the order of (key, place), as the candidate tasks and a
    group's best compare texts (:func:`mapped_ranking`)."""
    ranks = mapped_ranking(keys)(np.arange(len(keys), dtype=np.int64))
    order = ranks.order()
    placed = np.empty(len(keys), np.int64)
    placed[order] = np.arange(len(keys))
    return placed


def _blocks(values: pl.Series, cuts: list[int]) -> list[pl.Series]:
    edges = [0, *sorted(c % (len(values) + 1) for c in cuts), len(values)]
    return [values[lo:hi] for lo, hi in itertools.pairwise(edges)]


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@example(["b", "a", None, "b", "a"], [2], 3, False)  # a tie across blocks and ranges
@example(["a", "a\x00", "a", None], [1, 3], 2, True)
@given(
    st.lists(st.one_of(st.sampled_from([*_TEXTS, None]), st.text(max_size=4)), max_size=60),
    st.lists(st.integers(0, 60), max_size=5),
    st.integers(1, 9),
    st.booleans(),
)
def test_keys_order_rows_as_every_row_is_ranked(
    tmp_path: Path, values: list[str | None], cuts: list[int], partitions: int, binary: bool
) -> None:
    column = pl.Series(values, dtype=pl.String)
    column = column.cast(pl.Binary) if binary else column
    for direction in ("max", "min"):
        keys = text_order_keys(
            _blocks(column, cuts), len(column), direction, tmp_path / direction, partitions
        )
        assert np.array_equal(_ranks_by_keys(keys), ranked_values(column, direction))
        assert (keys == MISSING_KEY).tolist() == column.is_null().to_list()


def test_many_ranges_over_many_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """200,003 texts of 5,000 values (every eleventh null) in 13 blocks, cut into ranges
    of ~64 KB: dozens of ranges, each value's rows in one, the ranges' ranks following
    one another; the runs are removed once ranked."""
    monkeypatch.setattr(text_order, "PARTITION_BYTES", 1 << 16)
    ids = np.random.default_rng(8).integers(0, 5_000, 200_003)
    column = pl.select(pl.format("task-{}", pl.Series(ids))).to_series()
    column = column.scatter(np.arange(0, 200_003, 11), None)
    sliced: list[tuple[int, int]] = []
    cut = text_order._slice

    def spy(path: Path, lo: int, hi: int) -> object:
        sliced.append((lo, hi))
        return cut(path, lo, hi)

    monkeypatch.setattr(text_order, "_slice", spy)
    for direction in ("max", "min"):
        sliced.clear()
        blocks = _blocks(column, list(range(0, 200_003, 15_384)))
        keys = text_order_keys(blocks, len(column), direction, tmp_path, None)
        assert np.array_equal(_ranks_by_keys(keys), ranked_values(column, direction))
        ranges = len(sliced) // 13
        assert ranges > 20
        assert max(hi - lo for lo, hi in sliced) < 2 * 200_003 / ranges / 13 + 1024
        assert not (tmp_path / "runs").exists()


def test_a_wrong_count_of_values_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="more than 2 values"):
        text_order_keys([pl.Series(["a", "b", "c"])], 2, "max", tmp_path)
    with pytest.raises(ValueError, match="2 values, not 3"):
        text_order_keys([pl.Series(["a", "b"])], 3, "max", tmp_path)
