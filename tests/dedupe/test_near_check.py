"""The near rule's exact check cut into blocks of pairs (:mod:`pipeline.dedupe.near_check`);
that the blocks' checks decide as one check over every pair does is proved on whole runs
(``tests/decide/test_dedupe_stage.py``, ``tests/jobs/test_dataset_keys.py``)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.dedupe.near_check import blocks


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
