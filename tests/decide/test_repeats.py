"""The sort-based grouping of :mod:`pipeline.decide.repeats` against a plain reference."""

from __future__ import annotations

from collections import Counter, defaultdict

import polars as pl
from hypothesis import given
from hypothesis import strategies as st

from pipeline.decide.repeats import repeated, varying

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
