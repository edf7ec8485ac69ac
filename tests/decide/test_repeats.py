"""The sort-based grouping of :mod:`pipeline.decide.repeats` against a plain reference."""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np
import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.decide import repeats
from pipeline.decide.repeats import dense_ranks, repeated, varying

# few distinct values, so that repeats are common; the extremes of the 64-bit range too
_VALUES = st.lists(st.sampled_from([0, 1, 2, 7, 2**63, 2**64 - 1]), max_size=40)


@given(_VALUES)
def test_repeated_marks_every_occurrence_of_a_repeated_value(values: list[int]) -> None:
    counts = Counter(values)
    mask = repeated(pl.Series("h", values, dtype=pl.UInt64))
    assert mask.to_list() == [counts[v] > 1 for v in values]


@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from([0, 5, 2**64 - 1])), max_size=40))
def test_varying_marks_every_row_of_a_group_with_two_values(rows: list[tuple[int, int]]) -> None:
    seen: defaultdict[int, set[int]] = defaultdict(set)
    for group, value in rows:
        seen[group].add(value)
    groups = pl.Series("g", [g for g, _ in rows], dtype=pl.UInt64)
    values = pl.Series("v", [v for _, v in rows], dtype=pl.UInt64)
    assert varying(groups, values).to_list() == [len(seen[g]) > 1 for g, _ in rows]


def test_empty_and_single() -> None:
    assert repeated(pl.Series([], dtype=pl.UInt64)).to_list() == []
    assert repeated(pl.Series([3], dtype=pl.UInt64)).to_list() == [False]
    empty = pl.Series([], dtype=pl.UInt64)
    assert varying(empty, empty).to_list() == []


# digests whose prefixes collide (one hex digit of prefix: 16 values), in any order
_DIGESTS = st.lists(st.text("0a1f", min_size=3, max_size=3), max_size=40)


@given(_DIGESTS, st.sampled_from([1, 2, 3, 1 << 17]))
def test_dense_ranks_on_prefixes_are_the_ranks_of_the_values(values: list[str], chunk: int) -> None:
    """Ranks found on a 64-bit prefix (here the first hex digit: most prefixes are
    shared) are the dense ranks of the values themselves: equal values share one,
    different values never do, in the values' order; only rows whose prefix repeats are
    read in full (in ascending row order, ``chunk`` rows at a time when checked)."""
    series = pl.Series("d", values, dtype=pl.String)
    prefixes = series.str.slice(0, 1).str.to_integer(base=16, dtype=pl.UInt64)
    asked: list[int] = []

    def exact(rows: np.ndarray) -> pl.Series:
        assert (np.diff(rows) > 0).all()
        asked.extend(rows.tolist())
        return series.gather(rows)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(repeats, "_CHECK_ROWS", chunk)
        ranks = dense_ranks(prefixes, exact)
    assert ranks.tolist() == (series.rank("dense") - 1).to_list()
    counts = Counter(v[0] for v in values)
    assert sorted(set(asked)) == [i for i, v in enumerate(values) if counts[v[0]] > 1]


def test_a_prefix_of_one_value_is_not_ranked() -> None:
    """Rows whose shared prefix stands for one value are checked, not ranked: the only
    rows read twice are those of the prefix that stands for two values."""
    values = ["a1", "b1", "a1", "a2", "b1", "c1", "a1"]
    series = pl.Series("d", values)
    prefixes = series.str.slice(0, 1).replace_strict(
        {"a": 0, "b": 1, "c": 2}, return_dtype=pl.UInt64
    )
    reads: list[list[int]] = []

    def exact(rows: np.ndarray) -> pl.Series:
        reads.append(rows.tolist())
        return series.gather(rows)

    ranks = dense_ranks(prefixes, exact)
    assert ranks.tolist() == (series.rank("dense") - 1).to_list()
    assert reads == [[0, 1, 2, 3, 4, 6], [0, 2, 3, 6]]


@pytest.mark.parametrize("values", [[None, "a"], ["a", None], ["a", None, "a"]])
def test_a_prefix_shared_by_a_null_and_a_value_stands_for_two(values: list[str | None]) -> None:
    """A null read under a shared prefix is a value of its own: the prefix's rows are
    ranked, not taken for copies of one value."""
    series = pl.Series("d", values, dtype=pl.String)
    shared = np.arange(len(values), dtype=np.int64)
    prefix = np.zeros(len(values), dtype=np.uint64)
    mixed = repeats._mixed(shared, prefix, series.gather)
    assert mixed.tolist() == shared.tolist()
