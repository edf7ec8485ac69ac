"""A survivor column of text's order keys, from an external sort by ranges of values,
order the rows as the in-memory rank of every row does (ties and nulls in their order),
however the values come in blocks and however many ranges they are cut into."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pipeline.dedupe import survivor_keys
from pipeline.dedupe.participants import mapped_ranking
from pipeline.dedupe.survivor_keys import mapped_order_keys, text_order_keys
from pipeline.dedupe.table import MISSING_KEY, ranked_values
from pipeline.engines.local import LocalEngine

_TEXTS = ["", "a", "a\x00", "ab", "b", "B", "é", "zz", "aa"]
#: one worker: the ranges ranked in this process, in turn
_INLINE = LocalEngine(1)


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
            _blocks(column, cuts), len(column), direction, tmp_path / direction, _INLINE, partitions
        )
        assert np.array_equal(_ranks_by_keys(keys), ranked_values(column, direction))
        assert (keys == MISSING_KEY).tolist() == column.is_null().to_list()


def test_many_ranges_over_many_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """200,003 texts of 5,000 values (every eleventh null) in 13 blocks, cut into ranges
    of ~64 KB: dozens of ranges, each value's rows in one, the ranges' ranks following
    one another; the runs are removed once ranked."""
    monkeypatch.setattr(survivor_keys, "PARTITION_BYTES", 1 << 16)
    ids = np.random.default_rng(8).integers(0, 5_000, 200_003)
    column = pl.select(pl.format("task-{}", pl.Series(ids))).to_series()
    column = column.scatter(np.arange(0, 200_003, 11), None)
    sliced: list[tuple[int, int]] = []
    cut = survivor_keys._slice

    def spy(path: Path, lo: int, hi: int) -> object:
        sliced.append((lo, hi))
        return cut(path, lo, hi)

    ranked: list[int] = []
    rank = survivor_keys._rank_range

    def ranking(ranges: object, task: survivor_keys._Range, progress: object) -> int:
        ranked.append(task.p)
        return rank(ranges, task, progress)  # type: ignore[arg-type]

    monkeypatch.setattr(survivor_keys, "_slice", spy)
    monkeypatch.setattr(survivor_keys, "_rank_range", ranking)
    for direction in ("max", "min"):
        sliced.clear()
        ranked.clear()
        blocks = _blocks(column, list(range(0, 200_003, 15_384)))
        keys = text_order_keys(blocks, len(column), direction, tmp_path, _INLINE)
        assert np.array_equal(_ranks_by_keys(keys), ranked_values(column, direction))
        assert ranked == list(range(len(ranked)))
        assert len(ranked) > 20
        assert max(hi - lo for lo, hi in sliced) < 2 * 200_003 / len(ranked) / 13 + 1024
        assert not (tmp_path / "runs").exists()


def test_ranges_ranked_on_the_engine_give_the_same_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each range of values a task on the engine's workers (its ranks written beside its
    rows' places, offset by the driver in the ranges' order, read back a block of 1,000
    at a time): the keys are those of ranges ranked in turn in this process, whatever the ranges'
    finishing order."""
    monkeypatch.setattr(survivor_keys, "BLOCK", 1_000)
    ids = np.random.default_rng(3).integers(0, 3_000, 50_000)
    column = pl.select(pl.format("id-{}", pl.Series(ids))).to_series()
    column = column.scatter(np.arange(0, 50_000, 7), None)
    blocks = list(range(0, 50_000, 6_000))
    with LocalEngine(2) as engine:
        mapped: list[int] = []
        run_map = engine.map

        def recording(step: Any, tasks: Any, *args: Any) -> Any:
            mapped.append(len(tasks))
            return run_map(step, tasks, *args)

        engine.map = recording  # type: ignore[method-assign]
        for direction in ("max", "min"):
            alone = text_order_keys(
                _blocks(column, blocks), len(column), direction, tmp_path / "alone", _INLINE, 9
            )
            shared = text_order_keys(
                _blocks(column, blocks), len(column), direction, tmp_path / "engine", engine, 9
            )
            assert np.array_equal(shared, alone)
            assert np.array_equal(_ranks_by_keys(shared), ranked_values(column, direction))
            assert not (tmp_path / "engine" / "runs").exists()
        assert mapped == [9, 9]  # every range a task, in both directions


def test_a_wrong_count_of_values_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="more than 2 values"):
        text_order_keys([pl.Series(["a", "b", "c"])], 2, "max", tmp_path, _INLINE)
    with pytest.raises(ValueError, match="2 values, not 3"):
        text_order_keys([pl.Series(["a", "b"])], 3, "max", tmp_path, _INLINE)


_KEYED = {
    "Float64": (pl.Float64, [-0.0, 0.0, float("nan"), None, float("-inf"), 1.5]),
    "Int64": (pl.Int64, [-(2**63), 2**63 - 1, None, 0]),
    "Boolean": (pl.Boolean, [True, None, False]),
}


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@example("Int64", [2, 0, 1, 0], [1])  # null before the least Int64, whose key is a null's
@given(
    st.sampled_from(list(_KEYED)),
    st.lists(st.integers(0, 5), max_size=40),
    st.lists(st.integers(0, 40), max_size=4),
)
def test_mapped_keys_order_rows_as_every_row_is_ranked(
    tmp_path: Path, dtype: str, picks: list[int], cuts: list[int]
) -> None:
    """A column with order keys, written a block at a time with which values are
    missing: by key, missing, then place, the rows order as the rank of every row."""
    kind, choices = _KEYED[dtype]
    column = pl.Series([choices[p % len(choices)] for p in picks], dtype=kind)
    for direction in ("max", "min"):
        keys, missing = mapped_order_keys(
            _blocks(column, cuts), len(column), direction, tmp_path / direction
        )
        ranks = mapped_ranking(keys, missing)(np.arange(len(column), dtype=np.int64))
        placed = np.empty(len(column), np.int64)
        placed[ranks.order()] = np.arange(len(column))
        assert np.array_equal(placed, ranked_values(column, direction))


def test_a_column_without_order_keys_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="has no order keys"):
        mapped_order_keys([pl.Series(["a"])], 1, "max", tmp_path)


def test_the_samples_hold_no_block_of_texts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A block's samples are copied out of its text buffers (a gather of polars' string
    views shares them): kept as they came, 20 blocks' samples held every block's texts."""
    held: list[int] = []
    splitters = survivor_keys._splitters

    def spy(samples: list[pl.Series], partitions: int) -> pl.Series:
        held.append(sum(_held_bytes(s) for s in samples))
        return splitters(samples, partitions)

    monkeypatch.setattr(survivor_keys, "_splitters", spy)
    rng = np.random.default_rng(3)
    blocks = [
        pl.Series([f"{rng.integers(0, 10**9):09d}" + "x" * 300 for _ in range(2_000)])
        for _ in range(20)
    ]
    text_order_keys(blocks, 40_000, "min", tmp_path, _INLINE)
    texts = sum(_held_bytes(b) for b in blocks)  # ~6 MB
    assert held[0] < texts / 10


def _held_bytes(values: pl.Series) -> int:
    """The bytes of every buffer ``values`` holds, shared ones whole."""
    return int(values.to_arrow(compat_level=pl.CompatLevel.newest()).get_total_buffer_size())
