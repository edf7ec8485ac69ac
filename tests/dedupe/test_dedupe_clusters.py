"""Survivors, greedy near removal, chains, contamination and survivor rules; the
decision over the rows that take part equals the decision over every row."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from dataclasses import dataclass
from unittest import mock

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from pipeline.core.config import ConfigError, DedupeSettings
from pipeline.dedupe import table
from pipeline.dedupe.clusters import RULES, Decided, Duplicates, Followed, decide
from pipeline.dedupe.clusters import find_duplicates as find_among_participants
from pipeline.dedupe.minhash import NearPairs
from pipeline.dedupe.table import (
    ClusterTable,
    RemovedRows,
    _digests_text,
    _kept_lineage,
    match_duplicates,
    survivor_rank,
)


def _ids(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def _near(*pairs: tuple[int, int, float]) -> NearPairs:
    left = _ids(*(p[0] for p in pairs))
    right = _ids(*(p[1] for p in pairs))
    verified = np.array([p[2] for p in pairs], dtype=np.float64)
    return NearPairs(left, right, verified - 0.01, verified, len(pairs))


@dataclass
class _PerRow:
    """A :class:`Duplicates` spread over every row (a row that took no part is kept)."""

    kept: np.ndarray
    rule: np.ndarray
    match: np.ndarray
    estimated: np.ndarray
    verified: np.ndarray
    cluster: np.ndarray
    stats: dict[str, object]

    @property
    def removed(self) -> np.ndarray:
        return self.kept >= 0


def _per_row(duplicates: Duplicates, n: int) -> _PerRow:
    found = duplicates.verdicts()

    def spread(values: np.ndarray, fill: float) -> np.ndarray:
        out = np.full(n, fill, dtype=values.dtype)
        out[found.rows] = values
        return out

    return _PerRow(
        spread(found.kept, -1), spread(found.rule, 0), spread(found.match, 0),
        spread(found.estimated, np.nan), spread(found.verified, np.nan),
        spread(found.cluster, -1), found.stats,
    )  # fmt: skip


def find_duplicates(rank, exact, normalised, partition, near) -> _PerRow:  # type: ignore[no-untyped-def]
    return _per_row(find_among_participants(rank, exact, normalised, partition, near), len(rank))


def _rules(found: _PerRow) -> list[str]:
    return [RULES[r] for r in found.rule]


def test_groups_keep_their_best_ranked_row() -> None:
    # rows 0,2 exact copies; row 3 a normalised copy of 1; rank prefers later rows
    exact = _ids(0, 1, 0, 2)
    normalised = _ids(0, 1, 0, 1)
    rank = _ids(3, 2, 1, 0)
    found = find_duplicates(rank, exact, normalised, _ids(0, 0, 0, 0), None)
    assert found.kept.tolist() == [2, 3, -1, -1]
    assert _rules(found) == ["exact", "normalised", "", ""]
    assert found.cluster.tolist() == [0, 1, 0, 1]


def test_near_removal_is_greedy_not_transitive() -> None:
    # 0~1 and 1~2 but not 0~2: 1 goes (similar to kept 0), 2 stays (only like removed 1)
    ids = _ids(0, 1, 2)
    found = find_duplicates(ids, ids, ids, _ids(0, 0, 0), _near((0, 1, 0.9), (1, 2, 0.85)))
    assert found.kept.tolist() == [-1, 0, -1]
    assert found.verified[1] == pytest.approx(0.9)
    assert found.estimated[1] == pytest.approx(0.89)  # its pair's estimate (``_near``)
    assert np.isnan(found.verified[0])
    assert np.isnan(found.verified[2])


def test_a_removed_row_points_at_the_best_ranked_kept_neighbour() -> None:
    ids = _ids(0, 1, 2)
    found = find_duplicates(ids, ids, ids, _ids(0, 0, 0), _near((0, 2, 0.81), (1, 2, 0.99)))
    # 0 and 1 are not alike: both kept; 2 is like both and points at 0, the first
    assert found.kept.tolist() == [-1, -1, 0]
    assert found.verified[2] == pytest.approx(0.81)


def test_chains_end_at_a_kept_row_with_the_weakest_rule() -> None:
    # row 2 is an exact copy of row 1, which is a near duplicate of row 0
    exact = _ids(0, 1, 1)
    found = find_duplicates(_ids(0, 1, 2), exact, exact, _ids(0, 0, 0), _near((0, 1, 0.9)))
    assert found.kept.tolist() == [-1, 0, 0]
    assert _rules(found) == ["", "near", "near"]
    assert found.verified[2] == pytest.approx(0.9)


def test_contamination_removes_from_the_unprotected_split_only() -> None:
    # rows 0-2 train (partition 0), rows 3-5 eval (partition 1, protected)
    exact = _ids(0, 1, 2, 0, 3, 3)
    normalised = _ids(0, 1, 2, 0, 3, 3)
    partition = _ids(0, 0, 0, 1, 1, 1)
    near = _near((1, 3, 0.95))  # train row 1's text is near eval's text 3
    found = find_duplicates(_ids(0, 1, 2, 3, 4, 5), exact, normalised, partition, near)
    assert _rules(found) == ["contamination", "contamination", "", "", "", "exact"]
    assert found.kept.tolist() == [3, 4, -1, -1, -1, 4]
    assert found.match[:2].tolist() == [1, 3]
    assert found.verified[1] == pytest.approx(0.95)
    assert not found.removed[3:5].any()


def test_a_copy_of_a_removed_protected_row_matches_its_kept_row_as_that_row_does() -> None:
    """Eval row 1 is a near duplicate of eval row 0 (removed in eval's own dedupe); train
    row 2 is an exact copy of row 1. It was removed for row 0 as an *exact* match (its
    reason said "exact match: verified Jaccard 0.81"): it is a near match of row 0."""
    exact = _ids(0, 1, 1)
    partition = _ids(1, 1, 0)
    found = find_duplicates(_ids(0, 1, 2), exact, exact, partition, _near((0, 1, 0.81)))
    assert found.kept.tolist() == [-1, 0, 0]
    assert _rules(found) == ["", "near", "contamination"]
    assert RULES[found.match[2]] == "near"
    assert found.verified[2] == pytest.approx(0.81)
    # an exact copy of a kept protected row is still an exact match
    found = find_duplicates(_ids(0, 1), _ids(0, 0), _ids(0, 0), _ids(1, 0), None)
    assert RULES[found.match[1]] == "exact"


def test_protected_splits_never_lose_rows_to_each_other() -> None:
    ids = _ids(0, 0, 0)
    found = find_duplicates(_ids(0, 1, 2), ids, ids, _ids(1, 2, 0), None)
    assert _rules(found) == ["", "", "contamination"]
    assert found.kept.tolist() == [-1, -1, 0]
    assert found.stats["protected_overlap_rows"] == 2


def test_survivor_rules() -> None:
    frame = pl.DataFrame(
        {"score": [3, None, 5, 5], "ratings": [{"style": 1}, {"style": 4}, {"style": 2}, None]}
    )
    assert survivor_rank(frame, "first", "k").tolist() == [0, 1, 2, 3]
    assert survivor_rank(frame, "last", "k").tolist() == [3, 2, 1, 0]
    # highest first, ties by order key, nulls last
    assert survivor_rank(frame, "max:score", "k").tolist() == [2, 3, 0, 1]
    assert survivor_rank(frame, "min:score", "k").tolist() == [0, 3, 1, 2]
    assert survivor_rank(frame, "max:ratings.style", "k").tolist() == [2, 0, 1, 3]
    with pytest.raises(ConfigError, match="no column 'missing'"):
        survivor_rank(frame, "max:missing", "k")


def test_a_nan_survivor_value_ranks_as_no_value() -> None:
    """A NaN (a foreign Parquet file's; JSON has none) comes last, as a null does:
    polars sorts it above every number, so ``max:`` kept it over 2.0."""
    frame = pl.DataFrame({"score": [1.0, float("nan"), 2.0, None, float("inf")]})
    assert survivor_rank(frame, "max:score", "k").tolist() == [2, 3, 1, 4, 0]
    assert survivor_rank(frame, "min:score", "k").tolist() == [0, 3, 1, 4, 2]


_EDGE_VALUES: dict[str, tuple[pl.DataType, list[object]]] = {
    "Float64": (pl.Float64(), [0.0, -0.0, 1.5, -1.5, None, float("nan"), float("inf"), 1e-300]),
    "Float32": (pl.Float32(), [0.0, -0.0, 1.5, None, float("nan"), float("-inf")]),
    "Int64": (pl.Int64(), [-(2**63), 2**63 - 1, 0, -1, None]),
    "Int8": (pl.Int8(), [-128, 127, 0, None]),
    "UInt64": (pl.UInt64(), [0, 2**64 - 1, 1, None]),
    "Boolean": (pl.Boolean(), [True, False, None]),
    "Date": (pl.Date(), [dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(1970, 1, 1), None]),
    "Datetime": (pl.Datetime("ns"), [dt.datetime(1700, 1, 1), dt.datetime(2020, 1, 1), None]),
    "Duration": (pl.Duration("us"), [dt.timedelta(days=-5), dt.timedelta(0), None]),
    "Time": (pl.Time(), [dt.time(0), dt.time(23, 59), None]),
}


@settings(max_examples=60, deadline=None)
@example("Float64", "min", [0, 1])  # 0.0, then -0.0: a tie, in their order
@example("Int64", "max", [4, 0])  # null, then the least Int64: a missing value's key
@given(
    st.sampled_from(list(_EDGE_VALUES)),
    st.sampled_from(["max", "min"]),
    st.lists(st.integers(0, 7), max_size=14),
)
def test_order_keys_rank_as_every_row_is_ranked(
    dtype: str, direction: str, picks: list[int]
) -> None:
    """Each value's order key, then its place (a missing value's marked), orders the
    rows as polars' sort of the values and their places ranks them (the survivor order
    every path ranks rows in): ties by place, -0.0 as 0.0, NaN and null last, and the
    extreme integers whose keys are a missing value's. :func:`ranked_values`, which
    ranks by the keys, gives the same ranks."""
    from pipeline.dedupe.participants import keyed_ranks

    kind, choices = _EDGE_VALUES[dtype]
    values = pl.Series([choices[p % len(choices)] for p in picks], dtype=kind)
    wanted = table._sorted_ranks(values, direction).tolist()
    ranks = keyed_ranks(values, np.arange(len(values), dtype=np.int64), direction)
    assert ranks is not None
    order = ranks.order()
    dense = np.empty(len(values), np.int64)
    dense[order] = np.arange(len(values))
    assert dense.tolist() == wanted
    assert table.ranked_values(values, direction).tolist() == wanted


def test_ranks_by_order_keys_keep_ties_in_order_at_any_size() -> None:
    """Many ties over more rows than a block of places written at a time: the keys'
    sort keeps each tie's rows in their order, as polars' sort by place does."""
    values = pl.Series(np.random.default_rng(7).integers(0, 3, 200_003))
    values = values.scatter(np.arange(0, 200_003, 11), None)  # nulls: ties too
    for direction in ("max", "min"):
        wanted = table._sorted_ranks(values, direction)
        assert np.array_equal(table.ranked_values(values, direction), wanted)


@settings(max_examples=60, deadline=None)
@example(["b", None, "a", "b", None], True)
@given(st.lists(st.sampled_from(["a", "b", "", "ab", "é", "B", None]), max_size=25), st.booleans())
def test_text_ranks_as_sorted_by_value_and_place(values: list[str | None], binary: bool) -> None:
    """Text (and bytes) are ranked by polars' ordinal rank, nulls after: the order of
    polars' sort of the values and their places (ties and nulls in their order)."""
    column = pl.Series(values, dtype=pl.String)
    column = column.cast(pl.Binary) if binary else column
    for direction in ("max", "min"):
        wanted = table._sorted_ranks(column, direction).tolist()
        assert table.ranked_values(column, direction).tolist() == wanted


def test_text_ranks_keep_ties_in_order_at_any_size() -> None:
    """200,003 texts of 1,000 values, every eleventh null."""
    ids = np.random.default_rng(8).integers(0, 1_000, 200_003)
    column = pl.select(pl.format("task-{}", pl.Series(ids))).to_series()
    column = column.scatter(np.arange(0, 200_003, 11), None)
    for direction in ("max", "min"):
        wanted = table._sorted_ranks(column, direction)
        assert np.array_equal(table.ranked_values(column, direction), wanted)


def test_text_has_no_order_keys() -> None:
    """A column of text (or another type without a 64-bit order) is ranked among every
    row instead."""
    from pipeline.dedupe.participants import keyed_ranks

    for values in (pl.Series(["b", "a"]), pl.Series([None, None]), pl.Series([[1], [2]])):
        assert keyed_ranks(values, np.arange(2, dtype=np.int64), "max") is None


@pytest.mark.parametrize("rows", [0, 1])
def test_tiny_tables(rows: int) -> None:
    import random

    from pipeline.core.config import DedupeSettings
    from pipeline.dedupe.table import dedupe_table
    from pipeline.kinds import get_kind
    from pipeline.testing.synthetic import make_record
    from tests.dedupe_helpers import kind_frame

    records = [make_record("pairwise-v2", random.Random(i), i) for i in range(rows)]
    frame = kind_frame("pairwise-v2", records).with_columns(
        _source=pl.lit("x"),
        _line=pl.int_range(1, rows + 1, dtype=pl.Int64),
        _record_sha256=pl.lit("r"),
        _content_sha256=pl.lit("c"),
        _split=pl.lit(None, pl.String),
    )
    outcome = dedupe_table(frame, get_kind("pairwise-v2").dedupe_key(), DedupeSettings(), "k")
    assert len(outcome.removed) == 0
    assert outcome.clusters.height == 0
    assert outcome.stats["rows"] == rows


def test_the_cluster_table_has_one_schema_with_or_without_clusters() -> None:
    """An empty cluster table is typed as a full one (its ``rules`` were a list of
    nulls), so tables of several runs or kinds concatenate."""
    import random

    from pipeline.core.config import DedupeSettings
    from pipeline.dedupe.table import dedupe_table
    from pipeline.kinds import get_kind
    from pipeline.testing.synthetic import make_record
    from tests.dedupe_helpers import kind_frame

    records = [make_record("pairwise-v2", random.Random(i), i) for i in range(3)]
    frame = kind_frame("pairwise-v2", records).with_columns(
        _source=pl.lit("x"),
        _line=pl.int_range(1, 4, dtype=pl.Int64),
        _record_sha256=pl.lit("r"),
        _split=pl.lit(None, pl.String),
    )
    key, settings = get_kind("pairwise-v2").dedupe_key(), DedupeSettings()
    copies = dedupe_table(frame.with_columns(_content_sha256=pl.lit("c")), key, settings, "k")
    distinct = frame.with_columns(_content_sha256=pl.format("c{}", pl.col("_line")))
    alone = dedupe_table(distinct, key, settings, "k")
    assert copies.clusters.height == 1
    assert alone.clusters.height == 0
    assert alone.clusters.frame().schema == copies.clusters.frame().schema
    assert copies.clusters.frame()["rules"].to_list() == [["exact"]]


def test_a_cluster_names_its_kept_row_and_the_rules_that_removed_the_others() -> None:
    """Each cluster's ``kept`` is its kept row's lineage and ``rules`` the rules of its
    removed rows, sorted: an exact copy, a copy in other case and a near copy of a
    row make one cluster, an exact copy of another row a second one."""
    import copy
    import random

    from pipeline.core.config import DedupeSettings
    from pipeline.dedupe.table import dedupe_table
    from pipeline.kinds import get_kind
    from pipeline.testing.synthetic import make_record
    from tests.dedupe_helpers import kind_frame

    other, kept = (make_record("pairwise-v2", random.Random(i), i) for i in (7, 1))
    upper, near = copy.deepcopy(kept), copy.deepcopy(kept)
    upper["response_a"] = upper["response_a"].upper()
    near["response_b"] += "\n    return acc"
    records = [other, kept, copy.deepcopy(kept), upper, near, copy.deepcopy(other)]
    frame = kind_frame("pairwise-v2", records).with_columns(
        _source=pl.format("in-{}.jsonl", pl.int_range(6)),
        _line=pl.int_range(10, 16, dtype=pl.Int64),
        _record_sha256=pl.format("r{}", pl.int_range(6)),
        _content_sha256=pl.Series(["c0", "c1", "c1", "c3", "c4", "c0"]),
        _split=pl.lit(None, pl.String),
    )
    settings = DedupeSettings(normalised=True, near=True, threshold=0.7)
    outcome = dedupe_table(frame, get_kind("pairwise-v2").dedupe_key(), settings, "k")
    first, second = outcome.clusters.frame().to_dicts()
    assert first["kept"] == {"source": "in-0.jsonl", "line": 10, "record_sha256": "r0"}
    assert (first["size"], first["rules"]) == (2, ["exact"])
    assert second["kept"] == {"source": "in-1.jsonl", "line": 11, "record_sha256": "r1"}
    assert (second["size"], second["rules"]) == (4, ["exact", "near", "normalised"])


def test_rows_that_share_nothing_take_no_part() -> None:
    # rows 0 and 3 share a group, 1 and 4 are a near pair, 2 and 5 are alone
    exact = _ids(0, 1, 2, 0, 3, 4)
    found = find_among_participants(
        _ids(0, 1, 2, 3, 4, 5), exact, exact, _ids(0, 0, 0, 0, 0, 0), _near((1, 3, 0.9))
    )
    assert found.rows.tolist() == [0, 1, 3, 4]
    assert found.verdicts().kept.tolist() == [-1, -1, 0, 1]


@st.composite
def _runs(draw: st.DrawFn) -> tuple[np.ndarray, ...]:
    n = draw(st.integers(1, 40))
    exact = np.unique(
        draw(st.lists(st.integers(0, n), min_size=n, max_size=n)), return_inverse=True
    )[1]
    # a normalised group is a union of exact groups
    merged = np.array(draw(st.lists(st.integers(0, n), min_size=n + 1, max_size=n + 1)))
    normalised = np.unique(merged[exact], return_inverse=True)[1]
    texts = int(normalised.max()) + 1
    pairs = draw(
        st.lists(st.tuples(st.integers(0, texts - 1), st.integers(0, texts - 1)), max_size=12)
    )
    pairs = sorted({(min(a, b), max(a, b)) for a, b in pairs if a != b})
    near = _near(*((a, b, draw(st.floats(0.8, 1.0))) for a, b in pairs)) if pairs else None
    rank = np.array(draw(st.permutations(range(n))), dtype=np.int64)
    partition = np.array(draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)), dtype=np.int64)
    # the unprotected partition (0) holds several splits; a protected one is its split
    unprotected = np.array(draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)))
    split = np.where(partition == 0, unprotected, 2 + partition).astype(np.int64)
    return rank, exact.astype(np.int64), normalised.astype(np.int64), partition, near, split


@settings(max_examples=300, deadline=None)
@given(_runs())
def test_the_participants_are_decided_as_among_every_row(run: tuple[np.ndarray, ...]) -> None:
    """The rows that take part, each exact group's rows in a split decided by their
    best-ranked row, are decided as every row is, each alone."""
    rank, exact, normalised, partition, near, split = run
    ours = _per_row(
        find_among_participants(rank, exact, normalised, partition, near, split), len(rank)
    )
    every = decide(rank, exact, normalised, partition, near)
    assert every.rows.tolist() == list(range(len(rank)))
    for name in ("kept", "rule", "match", "cluster", "estimated", "verified"):
        np.testing.assert_array_equal(getattr(ours, name), getattr(every, name), err_msg=name)
    assert ours.stats == every.stats


def _clusters_of_every_row(
    frame: pl.DataFrame, found: Decided, splits: pl.Series, kind: str
) -> pl.DataFrame:
    """The cluster table made from a frame of every member, as it was before the
    representatives: the reference."""
    at = np.flatnonzero(found.cluster >= 0)
    members = found.rows[at]
    is_kept = found.kept[at] < 0
    table = pl.DataFrame(
        {
            "cluster": found.cluster[at],
            "kept": is_kept,
            "rule": found.rule[at],
            "split": splits.gather(members) if len(members) else pl.Series([], dtype=pl.String),
        }
    )
    named = frame.select("_source", "_line", "_record_sha256")[members[is_kept]]
    kept = table.filter("kept").select(
        "cluster",
        kept=pl.struct(
            source=named["_source"],
            line=named["_line"].cast(pl.Int64),
            record_sha256=named["_record_sha256"].cast(pl.String),
        ),
        kept_split="split",
    )
    summary = table.group_by("cluster").agg(
        size=pl.len().cast(pl.Int64),
        rules=pl.col("rule")
        .filter(~pl.col("kept"))
        .unique()
        .replace_strict(dict(enumerate(RULES)), return_dtype=pl.String)
        .sort(),
        splits=pl.col("split").drop_nulls().unique().sort(),
    )
    return (
        kept.join(summary, on="cluster")
        .sort("cluster")
        .select("cluster", kind=pl.lit(kind), size="size", kept="kept",
                kept_split="kept_split", rules="rules", splits="splits")
    )  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(_runs())
def test_clusters_and_counts_from_representatives_are_every_rows(
    run: tuple[np.ndarray, ...],
) -> None:
    """The cluster table, the counts by rule and the kept rows that pointers name, made
    from the representatives and how many rows each represents, are those of every row."""
    rank, exact, normalised, partition, near, split = run
    n = len(rank)
    names = {0: None, 1: "train", 2: "dev", 3: "eval", 4: "test"}
    splits = pl.Series("_split", [names[int(s)] for s in split], dtype=pl.String)
    frame = pl.DataFrame(
        {
            "_source": [f"in-{i % 3}.jsonl" for i in range(n)],
            "_line": list(range(1, n + 1)),
            "_record_sha256": [f"{i:064x}" for i in range(n)],
        }
    )
    ours = find_among_participants(rank, exact, normalised, partition, near, split)
    every = decide(rank, exact, normalised, partition, near)
    table = ClusterTable(ours, splits, "k", _kept_lineage(frame, ours.keepers(), None))
    whole = table.frame()
    assert_frame_equal(whole, _clusters_of_every_row(frame, every, splits, "k"))
    # made a few clusters at a time (as a run writes it), the same rows
    for clusters in (1, 2, 3):
        parts = list(table.parts(clusters))
        assert len(parts) == max(1, -(-whole.height // clusters))
        assert_frame_equal(pl.concat(parts), whole)
    removed = every.rule[every.removed]
    assert ours.removed_by_rule().tolist() == [int((removed == c).sum()) for c in range(len(RULES))]
    assert ours.keepers().tolist() == sorted(set(every.kept[every.removed].tolist()))


@settings(max_examples=300, deadline=None)
@given(_runs())
def test_leaders_standing_for_the_rows_they_lead_decide_as_every_row(
    run: tuple[np.ndarray, ...],
) -> None:
    """Each exact group's best-ranked row in each split given alone, standing for its
    group's rows in that split (``weight``), and the others given their verdict from it
    (:class:`Followed`): every row's verdict, the counts by rule and the clusters are the
    decision over every row's. (A run leads a group's rows by their first, with the
    survivor rule ``first``: its best-ranked.)"""
    rank, exact, normalised, partition, near, split = run
    n = len(rank)
    order = np.lexsort((rank, split, exact))
    key = exact * (int(split.max()) + 1) + split
    first = np.r_[True, key[order][1:] != key[order][:-1]]
    leader_of = np.empty(n, np.int64)
    leader_of[order] = order[first][np.cumsum(first) - 1]
    leaders = np.flatnonzero(leader_of == np.arange(n))
    weight = np.bincount(leader_of, minlength=n)[leaders]
    ours = find_among_participants(
        rank[leaders], exact[leaders], normalised[leaders], partition[leaders], near,
        split[leaders], weight,
    )  # fmt: skip
    every = decide(rank, exact, normalised, partition, near)
    # the leaders' verdicts, and the others' from their leaders (row ids: leaders' places)
    followers = np.flatnonzero(leader_of != np.arange(n))
    lead = np.searchsorted(ours.rows, np.searchsorted(leaders, leader_of[followers]))
    view = Followed(ours, lead)
    at = np.arange(len(followers), dtype=np.int64)
    kept = np.full(n, -1, np.int64)
    rule = np.zeros(n, np.int8)
    cluster = np.full(n, -1, np.int64)
    verdicts = ours.verdicts()
    kept[leaders[verdicts.rows]] = np.where(verdicts.kept >= 0, leaders[verdicts.kept], -1)
    rule[leaders[verdicts.rows]] = verdicts.rule
    cluster[leaders[verdicts.rows]] = verdicts.cluster
    kept[followers] = leaders[view.kept_at(at)]
    rule[followers] = view.rule_at(at)
    cluster[followers] = view.cluster_at(at)
    verified = np.full(n, np.nan)
    verified[leaders[verdicts.rows]] = verdicts.verified
    verified[followers] = view.verified_at(at)
    np.testing.assert_array_equal(verified, every.verified)
    np.testing.assert_array_equal(kept, every.kept)
    np.testing.assert_array_equal(rule, every.rule)
    np.testing.assert_array_equal(cluster, every.cluster)
    removed = every.rule[every.removed]
    assert ours.removed_by_rule().tolist() == [int((removed == c).sum()) for c in range(len(RULES))]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(0, 60), unique=True, max_size=40),
    st.lists(st.integers(0, 2), min_size=40, max_size=40),
    st.integers(1, 7),
)
def test_merged_removed_rows_build_each_slice_from_their_parts(
    rows: list[int], part: list[int], step: int
) -> None:
    """Removed rows of several parts merged: their rows ascending, and every slice's
    verdicts those its rows' parts build for them, whatever slices are asked for."""
    values = np.array(rows, np.int64)
    owner = np.array(part[: len(rows)], np.int64)
    parts = []
    for i in range(3):
        mine = np.sort(values[owner == i])
        # a part's verdict names its row and its part, built for removed rows [lo, hi)
        parts.append(
            RemovedRows(
                mine,
                lambda lo, hi, mine=mine, i=i: pl.DataFrame(
                    {"row": mine[lo:hi], "part": [i] * (hi - lo)},
                    schema={"row": pl.Int64, "part": pl.Int64},
                ),
            )
        )
    merged = RemovedRows.merged(parts)
    order = np.argsort(values)
    assert merged.rows.tolist() == values[order].tolist()
    for lo in range(0, len(rows), step):
        hi = min(lo + step, len(rows))
        built = merged.slice(lo, hi)
        assert built["_row"].to_list() == built["row"].to_list() == values[order][lo:hi].tolist()
        assert built["part"].to_list() == owner[order][lo:hi].tolist()


_DIGESTS = st.binary(min_size=32, max_size=32).map(bytes.hex)


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        st.lists(_DIGESTS, max_size=12),
        st.lists(st.one_of(st.none(), st.text(max_size=70), _DIGESTS, _DIGESTS.map(str.upper))),
    ),
    st.data(),
)
def test_the_kept_rows_digests_read_back_as_they_were(
    digests: list[str | None], data: st.DataObject
) -> None:
    """The kept rows' ``_record_sha256`` are held as 32 bytes each where every one is a
    SHA-256 in lower-case hex, and read back (whole, gathered, sliced) as the same text;
    any other text (a dataset's own: upper case, not a digest, null) is kept as it is.
    Given a holder (the dedupe stage stages and maps them), the parts read go to it as
    they are read, and read back the same."""
    n = len(digests)
    frame = pl.DataFrame(
        {
            "_source": ["in.jsonl"] * n,
            "_line": list(range(1, n + 1)),
            "_record_sha256": digests,
        },
        schema={"_source": pl.String, "_line": pl.Int64, "_record_sha256": pl.String},
    )
    every = np.arange(n, dtype=np.int64)
    kept = _kept_lineage(frame, every, None)
    held = kept.slice(0, n)["_record_sha256"]
    compact = all(d is not None and re.fullmatch("[0-9a-f]{64}", d) for d in digests)
    assert (held.dtype == pl.Array(pl.UInt8, 32)) == compact
    # read through the rows' lineage a few at a time (a part of digests beside one
    # of other texts: every part as text), the same lineage; and, where they are
    # digests, kept by a holder as they are read (as the stage stages them)
    rows = data.draw(st.integers(1, 4))
    given: list[pa.Table] = []

    def hold(parts: Iterator[pa.Table]) -> pa.Table:
        given.extend(parts)
        return pa.concat_tables(given)

    with mock.patch.object(table, "LINEAGE_ROWS", rows):
        read = _kept_lineage(frame.clear(), every, lambda at: frame[at])
        held_by = (
            _kept_lineage(frame.clear(), every, lambda at: frame[at], hold) if compact else read
        )
    assert len(given) == (max(1, -(-n // rows)) if compact else 0)
    assert all(part.schema.field("_source").type == pa.large_string() for part in given)
    for parts in (read, held_by):
        whole = parts.slice(0, n)
        as_text = pl.col("_source").cast(pl.String), _digests_text(whole["_record_sha256"])
        assert_frame_equal(whole.with_columns(as_text), frame)
    assert _digests_text(held).to_list() == digests
    at = data.draw(st.lists(st.integers(0, max(n - 1, 0)), max_size=n))
    gathered = np.array(at, np.int64)
    for lineage in (kept, held_by):
        assert _digests_text(lineage.at(gathered)["_record_sha256"]).to_list() == [
            digests[i] for i in at
        ]
        lo = data.draw(st.integers(0, n))
        assert (
            _digests_text(lineage.slice(lo, 3)["_record_sha256"]).to_list() == digests[lo : lo + 3]
        )


def test_rows_led_are_removed_as_their_leaders_decide_and_named_by_their_own_places() -> None:
    """Rows that took no part, each led by a row that did: removed in its favour where it
    is kept, else as it is (the same kept row and rule); each verdict under the row's own
    place. Leaders and rows of different lengths, or rows that do not ascend (verdicts
    are merged by row), are refused."""
    frame = pl.DataFrame(
        {
            "_content_sha256": ["a" * 64, "a" * 64, "b" * 64, "b" * 64],
            "_source": ["in.jsonl"] * 4,
            "_line": [1, 2, 3, 4],
            "_record_sha256": [f"{i:064x}" for i in range(4)],
        }
    )
    matches = match_duplicates(frame, None, DedupeSettings(), "k")  # rows 1 and 3 removed
    followed = matches.followed(np.array([0, 1, 3, 2]), np.array([5, 9, 12, 20])).frame()
    assert followed["_row"].to_list() == [5, 9, 12, 20]
    assert followed["_dedupe_rule"].to_list() == ["exact"] * 4
    kept = [{"_source": "in.jsonl", "_line": n, "_record_sha256": f"{n - 1:064x}"} for n in (1, 3)]
    assert followed["_duplicate_of"].to_list() == [kept[0], kept[0], kept[1], kept[1]]
    assert followed["_dedupe_cluster"].n_unique() == 2
    with pytest.raises(ValueError, match="2 rows led, 1 leaders"):
        matches.followed(np.array([0]), np.array([5, 6]))
    with pytest.raises(ValueError, match="do not ascend"):
        matches.followed(np.array([0, 0]), np.array([7, 5]))


def test_rows_that_each_take_part_and_represent_themselves_are_one_array() -> None:
    """Where every row given takes part and represents itself (a run's exact groups'
    leaders, each standing for the rows it leads), its row id, its representative and
    that one's row id are one array and its count is its weight; with no near pair, the
    similarities are one NaN read as every row's. The decision is the one made where a
    row takes no part (the general path: a row of its own group, weight 1, first)."""
    rank = np.array([3, 0, 4, 1, 5, 2], np.int64)
    exact = np.arange(6, dtype=np.int64)
    normalised = np.array([0, 0, 1, 2, 1, 2], np.int64)
    partition = np.array([0, 0, 1, 0, 1, 0], np.int64)
    weight = np.array([2, 1, 3, 1, 1, 4], np.int64)
    found = find_among_participants(rank, exact, normalised, partition, None, None, weight)
    assert found.rep is found.rows
    assert found.by_rep.rows is found.rows
    assert found.count is weight
    for similarity in (found.by_rep.estimated, found.by_rep.verified):
        assert similarity.strides == (0,)
        assert np.isnan(similarity).all()
    alone = [np.insert(a, 0, v) for a, v in ((rank, 6), (exact + 1, 0), (normalised, 3))]
    general = find_among_participants(
        *alone, np.insert(partition, 0, 0), None, None, np.insert(weight, 0, 1)
    )
    assert general.rows.tolist() == (found.rows + 1).tolist()  # the first takes no part
    at = np.arange(6, dtype=np.int64)
    kept = general.kept_at(at)
    np.testing.assert_array_equal(found.kept_at(at), np.where(kept >= 0, kept - 1, -1))
    for ask in ("rule_at", "match_at", "cluster_at", "estimated_at", "verified_at"):
        np.testing.assert_array_equal(getattr(found, ask)(at), getattr(general, ask)(at))
    assert found.removed_by_rule().tolist() == general.removed_by_rule().tolist()
    np.testing.assert_array_equal(found.keepers(), general.keepers() - 1)
    assert (found.kept_at(at) >= 0).any()  # rows are removed: the test decides


@pytest.mark.parametrize(
    "ids", [[-1, -1, 5, 6, 5], [1 << 40, 1 << 40, 3, 4, 3], [0, 0, 1, 2, 1]], ids=str
)
def test_groups_of_any_integer_ids_decide_as_their_dense_ranks(ids: list[int]) -> None:
    """The matching counts its groups where they are dense ranks (no sort where no group
    holds two rows); any other ids, which a caller of :func:`decide` may give, are
    sorted as before, never counted (a count of hash-like ids would be terabytes)."""
    given = np.array(ids, np.int64)
    dense = np.unique(given, return_inverse=True)[1].astype(np.int64)
    rank, partition = np.arange(5, dtype=np.int64), np.zeros(5, np.int64)
    found, expected = (decide(rank, x, x, partition, None) for x in (given, dense))
    assert found.kept.tolist() == expected.kept.tolist() == [-1, 0, -1, -1, 2]
    assert found.rule.tolist() == expected.rule.tolist()
