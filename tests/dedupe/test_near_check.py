"""The near rule's exact check cut into ranges of pair codes and blocks of pairs
(:mod:`pipeline.dedupe.near_check`); that the cuts' checks decide as one check over
every pair does is proved on whole runs (``tests/decide/test_dedupe_stage.py``,
``tests/jobs/test_dataset_keys.py``)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.dedupe import minhash, near_check
from pipeline.dedupe.minhash import LshParams, exact_similarities
from pipeline.dedupe.near_check import (
    STORED,
    CheckRanges,
    blocks,
    check_step,
    code_ranges,
    set_groups,
)
from pipeline.storage import RunStorage


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), max_size=120),
    st.integers(1, 12),
    st.integers(1, 50),
)
def test_blocks_cover_the_pairs_within_their_bounds(
    pairs: list[tuple[int, int]], texts: int, most: int
) -> None:
    """Consecutive ranges that cover every pair once; each holds at most ``most`` pairs
    and names at most ``texts`` texts, unless it is one pair; and a block stops only
    where taking an eighth of its size more pairs (at least one) would break a bound."""
    ordered = sorted(set(pairs))
    left = np.array([a for a, _ in ordered], np.int64)
    right = np.array([b for _, b in ordered], np.int64)
    cut = blocks(left, right, texts, most)
    assert [lo for lo, _ in cut] == [0, *(hi for _, hi in cut[:-1])][: len(cut)]
    assert (cut[-1][1] if cut else 0) == len(ordered)

    def named(lo: int, hi: int) -> int:
        return len(set(left[lo:hi].tolist()) | set(right[lo:hi].tolist()))

    for lo, hi in cut:
        assert 0 < hi - lo <= most
        assert hi - lo == 1 or named(lo, hi) <= texts
        if hi < len(ordered) and hi - lo < most:  # stopped by the texts it names
            assert named(lo, hi + max((hi - lo) // 8, 1)) > texts


def test_pairs_that_share_their_better_text_fill_a_block() -> None:
    """A star of pairs (one text against many) names one text more than its pairs: a
    block takes nearly as many pairs as its texts allow, not half."""
    left = np.zeros(1000, np.int64)
    right = np.arange(1, 1001, dtype=np.int64)
    cut = blocks(left, right, 300, 1 << 20)
    assert all(263 <= hi - lo <= 299 for lo, hi in cut[:-1])  # within an eighth of 299
    assert blocks(left, right, 4096, 100) == [(i, min(i + 100, 1000)) for i in range(0, 1000, 100)]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.lists(st.integers(0, 2**64 - 1), max_size=60).map(lambda v: sorted(set(v))),
        max_size=5,
    ),
    st.integers(1, 8),
    st.integers(1, 4),
    st.integers(1, 20),
)
def test_code_ranges_cover_every_code_once(
    tasks: list[list[int]], every: int, workers: int, per_range: int
) -> None:
    """Consecutive [lo, hi) ranges from 0 to 2**64, each cut at a sample, no more than
    the codes need at ``RANGE_CODES`` a range (or the workers); each holds at most its
    share of the samples, and one more per task, times ``every`` codes."""
    samples = [np.array(codes[every - 1 :: every], np.uint64) for codes in tasks]
    total = sum(len(codes) for codes in tasks)
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(near_check, "RANGE_CODES", per_range)
        ranges = code_ranges(samples, total, workers, every)
    assert ranges[0][0] == 0
    assert ranges[-1][1] == 2**64
    assert all(lo < hi for lo, hi in ranges)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    merged = sorted(int(v) for part in samples for v in part)
    assert {hi for _, hi in ranges[:-1]} <= set(merged)
    wanted = max(-(-total // per_range), min(workers, total // every), 1)
    assert len(ranges) <= wanted
    if len(set(merged) - {0}) >= wanted - 1 and len(set(merged)) == len(merged):
        assert len(ranges) == wanted  # distinct samples: every cut is taken
    share = -(-len(merged) // wanted) + len(tasks)
    for lo, hi in ranges:
        assert sum(lo <= c < hi for codes in tasks for c in codes) <= share * every


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 50), max_size=30), st.integers(1, 8), st.integers(1, 100))
def test_set_groups_cut_the_shards_into_runs(rows: list[int], workers: int, per: int) -> None:
    """Runs of consecutive shards that cover them all, a run per worker where the
    shards allow, and about ``SETS_ROWS`` rows each."""
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(near_check, "SETS_ROWS", per)
        firsts = set_groups(rows, workers)
    if not rows:
        assert firsts == []
        return
    assert firsts[0] == 0
    assert firsts == sorted(set(firsts))
    assert firsts[-1] < len(rows)
    wanted = min(max(-(-sum(rows) // per), workers), len(rows))
    assert len(firsts) <= wanted
    if len(set(rows)) == 1 and rows[0]:
        assert len(firsts) == wanted
    if len(rows) == 2 and min(rows) and workers == 2 and sum(rows) <= per:
        assert firsts == [0, 1]  # two slices of unequal sizes, two workers
    ends = [*firsts[1:], len(rows)]
    share = -(-sum(rows) // wanted)
    for lo, hi in zip(firsts, ends, strict=True):  # a run stops at the shard that fills it
        assert sum(rows[lo:hi]) <= share + max(rows)


@dataclass(frozen=True)
class _Listed:
    """Texts by their place in a list (a :class:`~pipeline.dedupe.near_check.TextSource`)."""

    listed: tuple[str, ...]

    def texts_at(self, at: list[int]) -> pl.Series:
        return pl.Series("_text", [self.listed[i] for i in at], pl.String)

    def texts(self, addresses: pa.Table) -> pl.Series:
        return self.texts_at(addresses["_i"].to_pylist())


def test_the_range_tasks_keep_what_one_check_of_every_pair_keeps(tmp_path: Path) -> None:
    """Every pair of 12 texts but the last's, its codes split over three candidate tasks
    that share some (a pair found in several partitions), the texts stored in reverse
    and their sets staged by two tasks, checked a range of codes at a time and a block of five texts at a
    time: the pairs kept, their similarities and the candidate count are those of one
    check of every pair, and the last text, which no pair names, has no set staged. Two
    of the texts are exactly at the threshold (4 of 5 shingles shared: 0.8), and are
    kept: their pair's code is the last, after pairs whose sketches do not agree in its
    range. Each staged sketch is its text's."""
    words = [f"w{i}" for i in range(30)]
    texts = (
        *(" ".join(words[i : i + 12]) for i in range(10, 14)),
        *(" ".join(words[i : i + 9]) for i in range(1, 6)),
        " ".join(words[:8]),  # 4 shingles of 5 words
        " ".join(words[:9]),  # 5 shingles, the 4 above among them: Jaccard 0.8
        " ".join(words[14:26]),
    )
    n = len(texts)
    left, right = (
        np.array(side, np.int64)
        for side in zip(*itertools.combinations(range(n - 1), 2), strict=True)
    )
    codes = left.astype(np.uint64) * np.uint64(n) + right.astype(np.uint64)
    params = LshParams()
    source = _Listed(texts)
    reference = exact_similarities(left, right, lambda at: source.texts_at(at.tolist()), params)
    assert reference[-1] == params.threshold  # texts 9 and 10
    storage = RunStorage(tmp_path)
    ids = np.arange(n, dtype=np.int64)
    storage.stage_whole(near_check.addresses_stem("k"), pa.table({"_i": ids, STORED: ids[::-1]}))
    starts = (0, 8)  # two sets tasks: rows 0-7 (texts 11-4) and 8-11 (texts 3-0)
    parts = [codes[0::2], codes[1::2], codes[::3]]  # all of them, some twice; each sorted
    found = [
        near_check.stage_codes(storage, "k", p, part, 2, n, starts) for p, part in enumerate(parts)
    ]
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(near_check, "RANGE_CODES", 9)
        ranges = code_ranges([sample for _, sample in found], len(codes), 2, 2)
    assert len(ranges) > 3
    task = CheckRanges(storage, "k", len(parts), n, source, params, (5, 1 << 20), starts)
    with pytest.MonkeyPatch.context() as patched:  # a record batch of sets per 2 texts
        patched.setattr(minhash, "_VERIFY_FIRST_TEXTS", 2)
        patched.setattr(minhash, "_VERIFY_BYTES", 1)
        staged = [near_check.stage_sets(task, group) for group in range(len(starts))]
    assert staged == [7, 4]  # text 11 is in no pair
    # each text's sketch, made once by its sets task, is its set's: what a check task compares
    rows = np.arange(1, n, dtype=np.int64)
    sets, sketches = (
        near_check._gathered_sets(task, rows),
        near_check._gathered_sketches(task, rows),
    )
    assert (sketches == minhash.set_sketches([sets], params)).all()
    assert len({row.tobytes() for row in sketches}) == n - 1
    step = check_step(task)
    state = step.init(*step.init_args)
    blocked: list[int] = []
    gathered: list[int] = []
    check_block, gathered_sketches = near_check._check_block, near_check._gathered_sketches

    def counting(task, addresses, left, right):  # type: ignore[no-untyped-def]
        blocked.append(len(left))
        return check_block(task, addresses, left, right)

    def sketching(task, stored):  # type: ignore[no-untyped-def]
        gathered.append(len(stored))
        return gathered_sketches(task, stored)

    with pytest.MonkeyPatch.context() as patched:  # sketches compared 4 pairs at a time
        patched.setattr(near_check, "SKETCH_BYTES", 4 * 2 * params.permutations)
        patched.setattr(near_check, "_check_block", counting)
        patched.setattr(near_check, "_gathered_sketches", sketching)
        checked = [step.run(state, bounds, lambda *_: None) for bounds in ranges]
    assert len(gathered) == sum(-(-count // 4) for count, _, _ in checked)
    assert max(gathered) <= 8
    # only the pairs whose sketches agree enough reach a block, which gathers their sets
    # (text t is stored at row n - 1 - t, its sketch gathered above at n - 2 - t)
    agree = minhash.agreeing(sketches, n - 2 - left, n - 2 - right, params)
    assert 0 < sum(blocked) == agree.sum() < len(codes)
    assert sum(count for count, _, _ in checked) == len(codes)
    kept = np.concatenate([c for _, c, _ in checked])
    similarity = np.concatenate([s for _, _, s in checked])
    expected = np.flatnonzero(reference >= params.threshold)
    assert kept.tolist() == codes[expected].tolist()
    assert similarity.tolist() == reference[expected].tolist()
    assert codes[-1] in kept
