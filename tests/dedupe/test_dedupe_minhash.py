"""Shingles, MinHash signatures, LSH candidates and the exact Jaccard check."""

from __future__ import annotations

import itertools
import random

import numpy as np
import numpy.typing as npt
import polars as pl
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.config import DedupeSettings
from pipeline.dedupe import minhash
from pipeline.dedupe.minhash import LshParams, choose_bands, jaccard, near_pairs, shingle_hashes
from pipeline.testing.corpus import shingle_jaccard

WORDS = ["alpha", "beta", "gamma", "delta", "données", "straße", "数据", "x1", "y_2", "z"]
PARAMS = LshParams.from_settings(DedupeSettings())


def test_bands_are_chosen_for_the_target_recall() -> None:
    assert choose_bands(0.8, 128, 0.99) == (21, 6)
    assert (PARAMS.bands, PARAMS.rows) == (21, 6)
    for threshold in (0.5, 0.7, 0.8, 0.9, 0.95):
        bands, rows = choose_bands(threshold, 128, 0.99)
        assert bands * rows <= 128
        assert 1 - (1 - threshold**rows) ** bands >= 0.99
    explicit = LshParams.from_settings(DedupeSettings(bands=16))
    assert (explicit.bands, explicit.rows) == (16, 8)


def test_permutations_are_fixed_by_the_seed() -> None:
    assert minhash._splitmix64(0)[1] == 0xE220A8397B1DCDAF  # the reference sequence
    a, b = PARAMS.permutation_coefficients()
    again = PARAMS.permutation_coefficients()
    assert (a == again[0]).all()
    assert (b == again[1]).all()
    assert (a % 2 == 1).all()
    # pinned: a change here changes every estimated similarity rowgate writes
    assert a[:3].tolist() == [2298633409, 1703865447, 4214379871]
    other = LshParams(seed=2).permutation_coefficients()
    assert (a != other[0]).any()


def test_shingle_counts_short_and_empty_texts() -> None:
    texts = pl.Series(["a b c d e f g", "a b", "", "   ", "one"])
    sh = shingle_hashes(texts, 5, 1)
    assert sh.counts.tolist() == [3, 1, 0, 0, 1]
    # "a b" is one shingle of its two tokens: not the same as "a b c d e"
    assert sh.hashes[3] not in sh.hashes[:3]


def test_shingles_do_not_depend_on_batching() -> None:
    rng = random.Random(1)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 40))) for _ in range(50)]
    whole = shingle_hashes(pl.Series(texts), 5, 1)
    for i, text in enumerate(texts):
        alone = shingle_hashes(pl.Series([text]), 5, 1)
        assert (alone.hashes == whole.hashes[whole.offsets[i] : whole.offsets[i + 1]]).all()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from(WORDS), min_size=0, max_size=30),
    st.lists(st.sampled_from(WORDS), min_size=0, max_size=30),
    st.integers(min_value=1, max_value=6),
)
def test_verified_similarity_is_the_exact_jaccard(a: list[str], b: list[str], size: int) -> None:
    texts = pl.Series([" ".join(a), " ".join(b)])
    params = LshParams(shingle_size=size)
    got = jaccard(texts, np.array([0]), np.array([1]), params)[0]
    assert got == shingle_jaccard(texts[0], texts[1], size)


def _variant(tokens: list[str], edits: int, rng: random.Random) -> list[str]:
    out = list(tokens)
    for i in rng.sample(range(len(out)), edits):
        out[i] = f"new{rng.randint(0, 10**6)}"
    return out


def test_estimates_track_the_verified_similarity() -> None:
    rng = random.Random(7)
    texts, left, right = [], [], []
    for _ in range(200):
        base = [rng.choice(WORDS) + str(rng.randint(0, 50)) for _ in range(200)]
        texts += [" ".join(base), " ".join(_variant(base, rng.randint(0, 40), rng))]
        left.append(len(texts) - 2)
        right.append(len(texts) - 1)
    series = pl.Series(texts)
    sig, _ = minhash.signatures(series, PARAMS)
    estimated = minhash.estimated_similarity(sig, np.array(left), np.array(right))
    exact = jaccard(series, np.array(left), np.array(right), PARAMS)
    error = estimated - exact
    assert abs(error.mean()) < 0.01  # unbiased
    assert np.abs(error).mean() < 0.04  # ≈ sqrt(J(1-J)/128)


def test_near_pairs_drop_lsh_false_positives_and_keep_true_pairs() -> None:
    rng = random.Random(3)
    texts, truth = [], set()
    for _ in range(150):
        base = [rng.choice(WORDS) + str(rng.randint(0, 99)) for _ in range(120)]
        texts.append(" ".join(base))
        texts += [" ".join(_variant(base, edits, rng)) for edits in (2, 25)]
    series = pl.Series(texts)
    for i in range(len(texts)):
        for j in range(i + 1, min(i + 3, len(texts))):
            if shingle_jaccard(texts[i], texts[j]) >= PARAMS.threshold:
                truth.add((i, j))
    found = near_pairs(series, np.arange(len(texts), dtype=np.int64), PARAMS)
    pairs = set(zip(found.left.tolist(), found.right.tolist(), strict=True))
    assert truth <= pairs
    assert (found.verified >= PARAMS.threshold).all()
    assert found.candidates >= len(pairs)
    assert all(shingle_jaccard(texts[i], texts[j]) >= PARAMS.threshold for i, j in pairs)


def test_the_agreement_floor_is_the_binomial_tail_at_the_threshold() -> None:
    """A pair at the threshold agrees on fewer signature values than the floor with a
    chance of at most 1e-9, and on at most the floor itself with more (exact fractions)."""
    from fractions import Fraction
    from math import comb

    for permutations, threshold in [
        (128, Fraction(4, 5)),
        (64, Fraction(1, 2)),
        (256, Fraction(9, 10)),
    ]:
        params = LshParams(threshold=float(threshold), permutations=permutations)
        floor = params.agreement_floor

        def below(k: int, n: int = permutations, t: Fraction = threshold) -> Fraction:
            return sum((comb(n, i) * t**i * (1 - t) ** (n - i) for i in range(k)), Fraction(0))

        assert below(floor) <= Fraction(1, 10**9) < below(floor + 1)
    assert LshParams().agreement_floor == 73
    assert LshParams(threshold=1.0).agreement_floor == 128


def test_set_signatures_are_the_texts_signatures() -> None:
    """Signatures computed from the shingle sets the check holds (distinct hashes, cut
    into pieces) are those the gate computes from the texts: empty, short and repeating
    texts included."""
    rng = random.Random(11)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 60))) for _ in range(300)]
    texts += ["", None, "one", "a a a a a a a a a a a a", "x y"]
    series = pl.Series(texts)
    expected, has = minhash.signatures(series, PARAMS)
    sets = minhash._shingle_sets(series, PARAMS)
    pieces = [minhash._SetParts.of(sets).joined()]
    assert (minhash.set_signatures(pieces, PARAMS) == expected.T).all()
    halves = [minhash._SetParts.of(minhash._shingle_sets(part, PARAMS)).joined()
              for part in (series[:150], series[150:])]  # fmt: skip
    assert (minhash.set_signatures(halves, PARAMS) == expected.T).all()
    assert not has[-5]
    assert not has[-4]


def test_only_pairs_whose_signatures_agree_enough_are_compared(monkeypatch) -> None:
    """Candidate pairs far below the threshold (LSH's false positives on templated
    texts) are dropped on their signatures (their values' low bytes) before the join
    that compares their sets;
    every pair at or above the threshold is still found, with its exact similarity."""
    rng = random.Random(13)
    texts, left, right = [], [], []
    for _ in range(200):
        base = [rng.choice(WORDS) + str(rng.randint(0, 50)) for _ in range(120)]
        texts += [" ".join(base), " ".join(_variant(base, rng.choice([1, 3, 30, 60]), rng))]
        left.append(len(texts) - 2)
        right.append(len(texts) - 1)
    series = pl.Series(texts)
    pairs = np.array(left), np.array(right)
    exact = jaccard(series, *pairs, PARAMS)
    compared: list[int] = []
    block = minhash._jaccard_block

    def counting(sets, lhs, rhs):  # type: ignore[no-untyped-def]
        compared.append(len(lhs))
        return block(sets, lhs, rhs)

    monkeypatch.setattr(minhash, "_jaccard_block", counting)
    got = minhash.exact_similarities(*pairs, series.gather, PARAMS)
    sig, _ = minhash.signatures(series, PARAMS)
    low_bytes = (sig.astype(np.uint8)[:, pairs[0]] == sig.astype(np.uint8)[:, pairs[1]]).sum(0)
    agreeing = low_bytes >= PARAMS.agreement_floor
    # the values' low bytes agree wherever the values do: no pair the values keep is lost
    assert (agreeing >= (minhash.estimated_similarity(sig, *pairs) * 128 >= 73)).all()
    assert 0 < sum(compared) == agreeing.sum() < len(left)
    assert (got[agreeing] == exact[agreeing]).all()
    assert (got[~agreeing] == 0).all()
    assert (exact[~agreeing] < PARAMS.threshold).all()
    near = exact >= PARAMS.threshold
    assert near.sum() > 50
    assert (got[near] == exact[near]).all()


def test_the_exact_check_reads_its_texts_once_in_order_a_piece_at_a_time(monkeypatch) -> None:
    rng = random.Random(5)
    texts = []
    for _ in range(60):
        base = [rng.choice(WORDS) + str(rng.randint(0, 99)) for _ in range(80)]
        texts += [
            " ".join(base),
            " ".join(_variant(base, 3, rng)),
            " ".join(_variant(base, 30, rng)),
        ]
    series = pl.Series(texts)
    sig, has = minhash.signatures(series, PARAMS)
    left, right = minhash.candidate_pairs(sig, has, np.arange(len(texts), dtype=np.int64), PARAMS)
    asked: list[np.ndarray] = []

    def texts_of(ids: np.ndarray) -> pl.Series:
        asked.append(ids.copy())
        return series.gather(ids)

    # ~4 texts of ~600 bytes a read
    monkeypatch.setattr(minhash, "_VERIFY_FIRST_TEXTS", 3)
    monkeypatch.setattr(minhash, "_VERIFY_BYTES", 2500)
    monkeypatch.setattr(minhash, "_JOINED_HASHES", 0)  # the pieces' sets kept apart
    monkeypatch.setattr(minhash, "_PAIR_BLOCK", 7)  # the pairs checked in blocks
    found = minhash.verified_pairs(left, right, texts_of, lambda at: sig[:, at], PARAMS)
    exact = jaccard(series, left, right, PARAMS)
    keep = exact >= PARAMS.threshold
    assert (found.left == left[keep]).all()
    assert (found.right == right[keep]).all()
    assert (found.verified == exact[keep]).all()
    assert found.candidates == len(left)
    assert keep.any()
    assert not keep.all()
    assert len(asked) > 10
    assert max(len(ids) for ids in asked) <= 5
    involved = np.unique(np.concatenate([left, right]))
    assert (np.concatenate(asked) == involved).all()
    # asked for in the order they are stored in, when told where that is
    stored = np.random.default_rng(1).permutation(len(texts))
    asked.clear()
    again = minhash.verified_pairs(
        left, right, texts_of, lambda at: sig[:, at], PARAMS, stored=stored
    )
    assert (np.concatenate(asked) == involved[np.argsort(stored[involved])]).all()
    for name in ("left", "right", "verified", "estimated"):
        assert (getattr(again, name) == getattr(found, name)).all()
    # a piece grows at most twofold, however short the texts before it
    asked.clear()
    short = pl.Series(["a b"] * 40 + texts[: len(texts) - 40])
    minhash.verified_pairs(
        left,
        right,
        lambda ids: short.gather(asked.append(ids) or ids),
        lambda at: sig[:, at],
        PARAMS,
    )
    sizes = [len(ids) for ids in asked]
    assert all(b <= 2 * a for a, b in itertools.pairwise(sizes))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 30), max_size=12), max_size=20),
    st.integers(0, 2**64 - 1),
    st.integers(0, 63),
)
def test_shingle_sets_keep_each_texts_distinct_hashes_in_first_seen_order(
    sets: list[list[int]], base: int, shift: int
) -> None:
    # hashes that differ in their low bits only: the sort key of the texts and the
    # hashes' high bits sees many of them equal, and only the whole hashes tell them apart
    hashes = [[(base + (v << shift)) % 2**64 for v in values] for values in sets]
    flat = np.array([h for values in hashes for h in values], dtype=np.uint64)
    offsets = np.cumsum([0, *(len(values) for values in hashes)]).astype(np.int64)
    got = minhash._unique_sets(minhash.Shingles(flat, offsets))
    expected = [list(dict.fromkeys(values)) for values in hashes]
    assert got.counts.tolist() == [len(values) for values in expected]
    assert got.hashes.tolist() == [h for values in expected for h in values]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 9)), max_size=40),
    st.integers(1, 5),
    st.integers(1, 9),
)
def test_band_candidates_pair_each_run_of_equal_keys(
    entries: list[tuple[int, int]], max_bucket: int, block: int
) -> None:
    """Each member (key, rank) meets every later one of its key's run, ordered by rank
    then member, if it is among the run's first ``max_bucket``; the codes come in that
    order, however many pairs are made at a time."""
    texts = len(entries) + 1
    members = np.arange(len(entries), dtype=np.int64)[::-1].copy()
    keys = np.array([key for key, _ in entries], np.uint64)
    rank = np.array([r for _, r in entries], np.int64)
    ordered = sorted(range(len(entries)), key=lambda i: (entries[i][0], entries[i][1], i))
    expected = []
    for _, run in itertools.groupby(ordered, key=lambda i: entries[i][0]):
        run_members = [int(members[i]) for i in run]
        for at, better in enumerate(run_members[:max_bucket]):
            expected += [better * texts + worse for worse in run_members[at + 1 :]]
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(minhash, "_PAIR_BLOCK", block)
        found = minhash.band_candidates(keys, members, rank, texts, max_bucket)
    assert found.dtype == np.uint64
    assert found.tolist() == expected


def test_a_huge_bucket_is_compared_star_wise() -> None:
    same = " ".join(f"w{i}" for i in range(50))
    series = pl.Series([same] * 30)
    small = LshParams(max_bucket=3)
    found = near_pairs(series, np.arange(30, dtype=np.int64), small)
    # each of the 30 texts meets the first 3 by rank, not all 435 pairs
    assert len(found.left) == 3 * 29 - 3
    assert set(found.left.tolist()) == {0, 1, 2}


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.none()
        | st.text(alphabet=st.characters(max_codepoint=0x3100) | st.sampled_from(" \t\n.,_-"))
        | st.lists(st.sampled_from(WORDS), max_size=12).map(" ".join),
        max_size=15,
    )
)
def test_tokens_are_the_texts_word_runs(texts: list[str | None]) -> None:
    """The tokens are exactly ``\\w+``'s matches (polars' own regex), in order."""
    series = pl.Series(texts, dtype=pl.String)
    flat, lengths = minhash._tokens(series)
    expected = series.str.extract_all(r"\w+").to_list()
    assert lengths.tolist() == [len(tokens or []) for tokens in expected]
    assert flat.to_list() == [token for tokens in expected for token in tokens or []]


def test_signatures_do_not_depend_on_the_permutation_blocks(monkeypatch) -> None:
    """Texts permuted a few shingles' block at a time give every text's own minima (the
    vectorised path's blocks: the compiled one has none)."""
    rng = random.Random(2)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 30))) for _ in range(40)]
    whole, has = minhash.signatures(pl.Series(texts), PARAMS, compiled=False)
    a, b = PARAMS.permutation_coefficients()
    for i, text in enumerate(texts):
        x = (shingle_hashes(pl.Series([text]), 5, 1).hashes >> np.uint64(32)).astype(np.uint32)
        assert has[i] == bool(len(x))
        if len(x):
            assert (whole[:, i] == (x[None, :] * a[:, None] + b[:, None]).min(axis=1)).all()
    monkeypatch.setattr(minhash, "_BLOCK_SHINGLES", 7)
    blocked, _ = minhash.signatures(pl.Series(texts), PARAMS, compiled=False)
    assert (blocked == whole).all()


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.lists(st.sampled_from(WORDS), max_size=12).map(" ".join), max_size=12),
    st.integers(min_value=1, max_value=6),
)
def test_shingle_hashes_are_each_windows_hash(texts: list[str], size: int) -> None:
    """Each text's shingles, one per run of ``size`` tokens (one of all its tokens when it
    has fewer), hashed one text at a time in plain Python."""
    mask = (1 << 64) - 1

    def mix(x: int) -> int:
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & mask
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & mask
        return x ^ (x >> 31)

    sh = shingle_hashes(pl.Series(texts, dtype=pl.String), size, 1)
    for i, text in enumerate(texts):
        tokens = [xxhash.xxh3_64_intdigest(t.encode(), 1) for t in text.split()]
        starts = range(max(len(tokens) - size + 1, 1)) if tokens else range(0)
        expected = []
        for start in starts:
            h = 0
            for j, token in enumerate(tokens[start : start + size]):
                h = token if j == 0 else (h * 0x9E3779B97F4A7C15 + token) & mask
            expected.append(mix(h))
        assert sh.hashes[sh.offsets[i] : sh.offsets[i + 1]].tolist() == expected


def test_partitions_are_a_multiple_of_the_workers_of_at_most_their_bytes() -> None:
    from pipeline.dedupe.partitions import (
        _ENTRY_BYTES,
        _ORDER_BYTES,
        PARTITION_BYTES,
        partition_count,
    )

    for texts, workers, ordered in itertools.product(
        (0, 1, 10_000, 338_000, 3_000_000), (1, 2, 3, 8), (False, True)
    ):
        # an entry of texts ranked by order keys carries its key too
        entry = _ENTRY_BYTES + (_ORDER_BYTES if ordered else 0)
        count = partition_count(texts, PARAMS, workers, 100, None, ordered)
        assert count % workers == 0
        assert count >= workers
        assert texts * PARAMS.bands * entry / count <= PARTITION_BYTES
        fewer = count - workers
        assert fewer == 0 or texts * PARAMS.bands * entry / fewer > PARTITION_BYTES
    assert partition_count(10, PARAMS, 2, 100, 7) == 7
    # a count given is taken up to the texts: more hold a few entries each, or none
    assert partition_count(30, PARAMS, 2, 100, 65536) == 30
    assert partition_count(0, PARAMS, 2, 100, 65536) == 1
    # no more workers at once than shards: one shard of few texts is one partition
    assert partition_count(10, PARAMS, 6, 1, None) == 1
    assert partition_count(10, PARAMS, 6, 4, None) == 4


@given(
    st.lists(st.booleans(), max_size=60),
    st.lists(st.integers(0, 1000), max_size=60),
    st.booleans(),
)
def test_sparse_texts_number_the_rows_that_are_texts_in_order(
    later: list[bool], values: list[int], keyed: bool
) -> None:
    """A run's texts are described by their exceptions: a row's text id is its place
    among the texts (-1 for a later row of a group), ``places`` inverts ``ids``, and a
    group's first row takes the group's best rank (its key too, where ranks are keyed)."""
    from pipeline.dedupe.partitions import Ranks, SparseTexts

    places = np.arange(len(later), dtype=np.int64)
    excluded = places[np.array(later, dtype=np.bool_)]
    texts = places[~np.array(later, dtype=np.bool_)]
    grouped = texts[: len(texts) // 2]
    best = np.array(values[: len(grouped)] + [0] * (len(grouped) - len(values)), np.int64)

    def keys_of(at: npt.NDArray[np.int64]) -> npt.NDArray[np.uint64] | None:
        return (at * 7 % 5).astype(np.uint64) if keyed else None

    best_ranks = Ranks(keys_of(best), best)
    sparse = SparseTexts(excluded, grouped, best_ranks, lambda at: Ranks(keys_of(at), at + 5000))
    ids = sparse.ids(places)
    assert ids.tolist() == [
        -1 if is_later else int(np.sum(~np.array(later[:p], dtype=np.bool_)))
        for p, is_later in enumerate(later)
    ]
    assert sparse.places(np.arange(len(texts), dtype=np.int64)).tolist() == texts.tolist()
    ranks = dict(zip(grouped.tolist(), best.tolist(), strict=True))
    found = sparse.ranks(texts)
    assert found.ties.tolist() == [ranks.get(int(p), int(p) + 5000) for p in texts]
    wanted = keys_of(np.array([ranks.get(int(p), int(p)) for p in texts], np.int64))
    assert (found.keys is None) == (wanted is None)
    if found.keys is not None and wanted is not None:
        assert found.keys.tolist() == wanted.tolist()
