"""Row keys computed per gate batch equal the keys computed over the whole kind."""

from __future__ import annotations

import hashlib
import itertools

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.config import DedupeSettings
from pipeline.dedupe import minhash
from pipeline.dedupe import row_keys as row_keys_module
from pipeline.dedupe.keys import DedupeKey, KeyField, key_columns, text_columns
from pipeline.dedupe.minhash import LshParams, near_pairs, signatures, verified_pairs
from pipeline.dedupe.normalise import Normalisation
from pipeline.dedupe.row_keys import NORMALISED, SHINGLED, SIGNATURE, SignatureMemo, row_keys
from pipeline.dedupe.table import dense_ids
from pipeline.kinds import get_kind

WORDS = ["alpha", "beta", "gamma", "Delta", "données", "STRASSE", "straße", "数据", "x1", "  "]
SETTINGS = DedupeSettings(normalised=True, near=True)
PARAMS = LshParams.from_settings(SETTINGS)

texts_strategy = st.lists(
    st.lists(st.sampled_from(WORDS), max_size=14).map(" ".join), min_size=1, max_size=30
)


@settings(max_examples=60, deadline=None)
@given(texts=texts_strategy, cuts=st.lists(st.integers(0, 30), max_size=4))
def test_signatures_per_batch_equal_signatures_over_all_texts(
    texts: list[str], cuts: list[int]
) -> None:
    """A text's signature depends on that text alone: batches (the gate's), including
    texts without a token or shorter than a shingle, give the whole kind's signatures."""
    series = pl.Series(texts, dtype=pl.String)
    whole, has = signatures(series, PARAMS)
    bounds = sorted({0, len(texts), *(min(c, len(texts)) for c in cuts)})
    parts = [signatures(series.slice(lo, hi - lo), PARAMS) for lo, hi in itertools.pairwise(bounds)]
    assert np.array_equal(np.hstack([p[0] for p in parts]), whole)
    assert np.array_equal(np.concatenate([p[1] for p in parts]), has)


@pytest.mark.parametrize("compiled", [False, True])
def test_signatures_do_not_depend_on_the_chunk_size(
    monkeypatch: pytest.MonkeyPatch, compiled: bool
) -> None:
    """signatures() tokenises in chunks of texts; a chunk of one text changes nothing."""
    rng = np.random.default_rng(5)
    texts = pl.Series([" ".join(rng.choice(WORDS, rng.integers(0, 40))) for _ in range(300)])
    whole, has = signatures(texts, PARAMS, compiled=compiled)
    monkeypatch.setattr(minhash, "_CHUNK_TOKENS", 7)
    chunked, chunked_has = signatures(texts, PARAMS, compiled=compiled)
    assert np.array_equal(whole, chunked)
    assert np.array_equal(has, chunked_has)


def _pairwise_rows() -> pa.RecordBatch:
    turn = {"role": "user", "content": "Fix the BUG  in parse()"}
    rows = [
        {"messages": [turn], "response_a": "Use a guard.", "response_b": "Rewrite it all."},
        {"messages": [turn], "response_a": "rewrite it all.", "response_b": "use a  GUARD."},
        {"messages": [], "response_a": "", "response_b": ""},
    ]
    return pa.RecordBatch.from_pylist(rows)


def test_row_keys_are_the_digest_and_signature_of_each_rows_key() -> None:
    key = get_kind("pairwise-v2").dedupe_key()
    assert key is not None
    batch = _pairwise_rows()
    frame = pl.from_arrow(batch)
    assert isinstance(frame, pl.DataFrame)
    normalisation = Normalisation.from_settings(SETTINGS)
    keys = row_keys(batch.select(list(key.columns)), key, SETTINGS)
    expected = [
        hashlib.sha256(k.encode()).digest()
        for k in frame.select(key_columns(key, normalisation)).to_series()
    ]
    assert keys.column(NORMALISED).to_pylist() == expected
    assert expected[0] == expected[1]  # A/B swapped, case and whitespace: one key
    sig, has = signatures(frame.select(text_columns(key, normalisation)).to_series(), PARAMS)
    staged = np.stack(keys.column(SIGNATURE).to_numpy(zero_copy_only=False)).T
    assert np.array_equal(staged, sig)
    assert keys.schema.field(SIGNATURE).type == pa.list_(pa.uint32(), PARAMS.permutations)
    assert keys.column(SHINGLED).to_pylist() == [True, True, False]
    assert has.tolist() == [True, True, False]
    only_near = row_keys(batch.select(list(key.columns)), key, DedupeSettings(near=True))
    assert NORMALISED not in only_near.schema.names


def test_row_keys_in_slices_equal_the_keys_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """row_keys computes a batch SLICE_BYTES at a time; slices of about 7 rows over 50
    rows give the keys of the whole batch, in its order."""
    key = get_kind("pairwise-v2").dedupe_key()
    assert key is not None
    rng = np.random.default_rng(11)
    rows = [
        {
            "messages": [{"role": "user", "content": " ".join(rng.choice(WORDS, 9))}],
            "response_a": " ".join(rng.choice(WORDS, rng.integers(0, 12))),
            "response_b": " ".join(rng.choice(WORDS, 6)),
        }
        for _ in range(50)
    ]
    batch = pa.RecordBatch.from_pylist(rows)
    whole = row_keys(batch, key, SETTINGS)
    frame = pl.from_arrow(batch)
    assert isinstance(frame, pl.DataFrame)
    monkeypatch.setattr(row_keys_module, "SLICE_BYTES", frame.estimated_size() * 7 // 50)
    sliced = row_keys(batch, key, SETTINGS)
    assert sliced.num_rows == 50
    assert sliced.equals(whole)
    assert len(set(whole.column(NORMALISED).to_pylist())) > 40  # not one key repeated


def count_signing(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts, from now on, the texts row keys sign (one entry a call)."""
    signed: list[int] = []

    def counting(texts: pl.Series, params: LshParams) -> tuple[np.ndarray, np.ndarray]:
        signed.append(len(texts))
        return signatures(texts, params)

    monkeypatch.setattr(row_keys_module, "signatures", counting)
    return signed


def memo_bytes(texts: int) -> int:
    """The :data:`~pipeline.dedupe.row_keys.MEMO_BYTES` of a memo of ``texts`` texts."""
    return texts * (4 * PARAMS.permutations + row_keys_module._ENTRY_BYTES)


@settings(max_examples=40, deadline=None)
@given(
    batches=st.lists(
        st.lists(
            st.sampled_from(["a b c d e f", "x", "", "données  STRASSE 数据 x1"])
            | st.text(max_size=20),
            max_size=12,
        ),
        min_size=1,
        max_size=5,
    ),
    memo_texts=st.sampled_from([1, 3, 16384]),
)
def test_a_signature_memo_gives_the_signatures_signing_gives(
    batches: list[list[str]], memo_texts: int
) -> None:
    """Batches of a shard through one memo (repeated texts, empty texts, a memo that
    fills and starts over, a batch larger than it) give every text's own signature."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(row_keys_module, "MEMO_BYTES", memo_bytes(memo_texts))
        memo = SignatureMemo(PARAMS)
    for texts in batches:
        series = pl.Series(texts, dtype=pl.String)
        sig, has = signatures(series, PARAMS)
        remembered, remembered_has = memo.signatures(series)
        assert np.array_equal(remembered, sig.T)
        assert np.array_equal(remembered_has, has)


def test_a_signature_memo_that_starts_over_keeps_each_texts_own_signature(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """3,000 texts (1,000 distinct, repeated out of order) in batches of 250 through a
    memo of 300 texts, which fills and starts over: each row has its own text's
    signature, and the memo signed fewer texts than there are rows."""
    rng = np.random.default_rng(3)
    distinct = [f"text {i} " + " ".join(rng.choice(WORDS, 8)) for i in range(1000)]
    texts = pl.Series([distinct[i] for i in rng.integers(0, 1000, 3000)])
    expected, expected_has = signatures(texts, PARAMS)
    monkeypatch.setattr(row_keys_module, "MEMO_BYTES", memo_bytes(300))
    memo = SignatureMemo(PARAMS)
    signed = count_signing(monkeypatch)
    parts = [memo.signatures(texts.slice(lo, 250)) for lo in range(0, 3000, 250)]
    assert np.array_equal(np.vstack([p[0] for p in parts]), expected.T)
    assert np.array_equal(np.concatenate([p[1] for p in parts]), expected_has)
    assert 1000 <= sum(signed) < 3000


def test_a_signature_memo_that_holds_the_texts_never_starts_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """250 distinct texts, then 4,000 of them in random order, in slices of 100 through
    a memo of 300 texts: each text is signed once, though every slice is more than the
    room left (a memo that started over whenever a slice might not fit signed them again
    and again)."""
    rng = np.random.default_rng(5)
    distinct = [f"text {i} " + " ".join(rng.choice(WORDS, 6)) for i in range(250)]
    order = np.concatenate([np.arange(250), rng.integers(0, 250, 4000)])
    texts = pl.Series([distinct[i] for i in order])
    expected, _ = signatures(texts, PARAMS)
    monkeypatch.setattr(row_keys_module, "MEMO_BYTES", memo_bytes(300))
    memo = SignatureMemo(PARAMS)
    signed = count_signing(monkeypatch)
    parts = [memo.signatures(texts.slice(lo, 100))[0] for lo in range(0, len(texts), 100)]
    assert np.array_equal(np.vstack(parts), expected.T)
    assert sum(signed) == 250


def test_a_signature_memo_signs_a_repeated_text_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Row keys through a memo sign each distinct text once, across slices and calls,
    and equal the keys without one."""
    key = get_kind("pairwise-v2").dedupe_key()
    assert key is not None
    rows = [
        {
            "messages": [{"role": "user", "content": "q"}],
            "response_a": f"answer {i % 5}",
            "response_b": "no",
        }
        for i in range(40)
    ]
    batch = pa.RecordBatch.from_pylist(rows)
    monkeypatch.setattr(row_keys_module, "SLICE_BYTES", 1)  # a row at a time
    without = row_keys(batch, key, SETTINGS)
    signed = count_signing(monkeypatch)
    memo = SignatureMemo(PARAMS)
    first = row_keys(batch, key, SETTINGS, memo)
    again = row_keys(batch, key, SETTINGS, memo)
    assert first.equals(without)
    assert again.equals(without)
    assert signed == [1] * 5  # each distinct text once (a row a slice); none after
    with pytest.raises(ValueError, match="memo"):
        row_keys(batch, key, DedupeSettings(near=True, permutations=64), memo)


@settings(max_examples=40, deadline=None)
@given(
    texts=texts_strategy,
    partitions=st.sampled_from([1, 2, 7, 64]),
    max_bucket=st.sampled_from([2, 3, 200]),
)
def test_candidates_by_partition_and_fetched_signatures_equal_near_pairs(
    texts: list[str], partitions: int, max_bucket: int
) -> None:
    """The stage's path: band keys from the gate, candidates found partition by
    partition (:mod:`pipeline.dedupe.partitions`), the candidates' texts and signatures
    fetched, finds the pairs, similarities and candidate count of computing everything
    from the texts, for any partition count and with capped buckets."""
    small = LshParams(
        threshold=0.5, shingle_size=2, permutations=32, bands=16, rows=2, max_bucket=max_bucket
    )
    series = pl.Series(texts, dtype=pl.String)
    rank = np.arange(len(texts), dtype=np.int64)[::-1].copy()
    reference = near_pairs(series, rank, small)
    sig, has = signatures(series, small)
    keys = minhash.band_keys(sig, small)
    active = np.flatnonzero(has)
    codes = []
    for partition in range(partitions):
        for band in range(small.bands):
            mine = active[keys[band, active] % np.uint64(partitions) == partition]
            codes.append(
                minhash.band_candidates(keys[band, mine], mine, rank[mine], len(texts), max_bucket)
            )
    left, right = minhash.pairs_of_codes(codes, len(texts))
    assert np.array_equal(
        np.stack([left, right]), np.stack(minhash.candidate_pairs(sig, has, rank, small))
    )
    asked: list[int] = []

    def texts_of(at: np.ndarray) -> pl.Series:
        asked.extend(at.tolist())
        return series.gather(at)

    got = verified_pairs(left, right, texts_of, lambda at: sig[:, at], small)
    for field in ("left", "right", "estimated", "verified"):
        assert np.array_equal(getattr(got, field), getattr(reference, field)), field
    assert got.candidates == reference.candidates
    assert len(asked) == len(set(asked))  # each candidate's text once


def test_a_row_with_no_key_has_no_digest_and_a_group_of_its_own() -> None:
    """A row whose key fields are all null has no key (``key_columns(absent=True)``): the
    gate stages no digest for it, and the matching gives it a group of its own, as the
    stage's own key path does (:func:`pipeline.dedupe.table.dense_ids`)."""
    key = DedupeKey(
        "columns t, k",
        ("t", "k"),
        (KeyField("t", pl.col("t")), KeyField("k", pl.col("k"), prose=False)),
    )
    batch = pa.record_batch(
        {"t": [None, None, "A b", "a  B", None], "k": [None, None, None, None, "x"]}
    )
    digests = row_keys(batch, key, DedupeSettings(normalised=True))[NORMALISED].to_pylist()
    assert digests[:2] == [None, None]
    assert digests[2] == digests[3] is not None
    assert digests[4] is not None
    staged = dense_ids(pl.DataFrame({"k": pl.Series(digests, dtype=pl.Binary)}), pl.col("k"))
    frame = pl.from_arrow(batch)
    assert isinstance(frame, pl.DataFrame)
    own = dense_ids(frame, key_columns(key, Normalisation.from_settings(SETTINGS), absent=True))
    for ids in (staged, own):
        assert len(set(ids[[0, 1, 2, 4]].tolist())) == 4  # the two keyless rows apart
        assert ids[2] == ids[3]
        assert sorted(set(ids.tolist())) == list(range(4))  # dense, from 0
