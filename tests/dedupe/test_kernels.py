"""The compiled MinHash kernels give the vectorised path's signatures, bit for bit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.config import DedupeSettings
from pipeline.dedupe import _jit, kernels
from pipeline.dedupe.minhash import LshParams, signatures

PARAMS = LshParams.from_settings(DedupeSettings())
WORDS = ["alpha", "données", "straße", "数据", "x1", "y_2", "ǅ", "١٢٣", "a\u0301", "z" * 300]


def test_xxh3_is_xxhash_s_for_every_length_it_is_written_for() -> None:
    """Every length from 1 (a token's least) to :data:`_jit.LONGEST` (each of xxh3's
    length classes and their edges), at an offset into the buffer, with seeds of every
    size."""
    rng = np.random.default_rng(3)
    buffer = rng.integers(0, 256, _jit.LONGEST + 16, dtype=np.uint8)
    for seed in (0, 1, 0x5C09E, 2**32 - 1, 2**32, 0x0123456789ABCDEF, 2**63 + 12345, 2**64 - 1):
        keys = _jit.xxh3_keys(seed)
        for length in range(1, _jit.LONGEST + 1):
            at = length % 7
            got = _jit.xxh3(buffer, at, length, keys)
            expected = xxhash.xxh3_64_intdigest(buffer[at : at + length].tobytes(), seed)
            assert int(got) == expected, (seed, length)


def test_the_word_table_is_polars_regex_class() -> None:
    """A code point is in a token exactly where polars' ``\\w`` matches it alone."""
    codes = np.arange(0x110000)
    codes = codes[(codes < 0xD800) | (codes > 0xDFFF)]
    matches = pl.Series([chr(c) for c in codes.tolist()]).str.contains(r"^\w$").to_numpy()
    assert np.array_equal(kernels._word_table()[codes].astype(bool), matches)
    assert kernels._word_table()[0xD800:0xE000].sum() == 0


texts = st.lists(
    st.none()
    | st.text(alphabet=st.characters(codec="utf-8") | st.sampled_from(" \t\n.,_-"), max_size=60)
    | st.lists(st.sampled_from(WORDS), max_size=14).map(" ".join)
    | st.lists(st.text(alphabet="ab_9é", min_size=1, max_size=300), max_size=4).map("--".join),
    max_size=20,
)


@settings(max_examples=300, deadline=None)
@given(texts, st.integers(1, 6), st.integers(0, 2**64 - 1), st.sampled_from([1, 7, 128]))
def test_compiled_signatures_are_the_vectorised_path_s(
    batch: list[str | None], shingle_size: int, seed: int, permutations: int
) -> None:
    """Any Unicode text, null, empty, shorter than a shingle, or with tokens longer than
    the compiled xxh3 takes (left to xxhash), gives the reference path's signature."""
    params = LshParams(shingle_size=shingle_size, seed=seed, permutations=permutations)
    series = pl.Series(batch, dtype=pl.String)
    reference, reference_has = signatures(series, params, compiled=False)
    compiled, has = signatures(series, params, compiled=True)
    assert np.array_equal(has, reference_has)
    assert np.array_equal(compiled, reference)


def test_a_slice_of_texts_is_signed_as_its_texts() -> None:
    """A series sliced from another is signed as its own texts."""
    params = LshParams(shingle_size=3, seed=7)
    whole = pl.Series(["alpha beta gamma", None, "数据 données x1", "z " * 9, "b c"])
    part = whole.slice(1, 3)
    compiled, has = kernels.signatures(part, 3, 7, *params.permutation_coefficients())
    reference, reference_has = signatures(pl.Series(part.to_list()), params, compiled=False)
    assert np.array_equal(compiled, reference)
    assert has.tolist() == reference_has.tolist() == [False, True, True]


@pytest.mark.parametrize("text", ["", " ", "\u0301", "__", "a" * 241, "é" * 500 + " b"])
def test_edge_texts_are_signed_as_the_vectorised_path_signs_them(text: str) -> None:
    series = pl.Series([text, text + " " + text])
    assert np.array_equal(
        signatures(series, PARAMS, compiled=True)[0],
        signatures(series, PARAMS, compiled=False)[0],
    )


_NOT_UTF8 = """
import numpy as np, xxhash
from pipeline.dedupe import _jit, kernels
data = np.frombuffer(b"ab \\xf7\\xbf\\xbf\\xbf cd \\xe2", np.uint8)
hashes, counts, long_tokens = np.zeros(8, np.uint64), np.zeros(1, np.int64), np.zeros(3, np.int64)
made = _jit.token_hashes(data, np.array([0, len(data)]), np.ones(1, bool), kernels._word_table(),
                         _jit.xxh3_keys(5), hashes, counts, long_tokens)
assert made == (2, 0), made
assert hashes[:2].tolist() == [xxhash.xxh3_64_intdigest(t, 5) for t in (b"ab", b"cd")]
"""


def test_bytes_that_are_not_utf8_are_no_word_and_read_nothing_beyond_the_text(
    tmp_path: Path,
) -> None:
    """Arrow's strings are UTF-8, but a malformed import is not checked: a lead byte that
    spells no code point (its bits reach past Unicode: the table covers them), or a
    sequence cut short by the text's end (here the buffer's), is a byte of no word. Run
    with numba's bounds checks on (compiled apart, in a cache of its own), so that a read
    past the table or the text fails instead of reading what lies there."""
    env = dict(os.environ, NUMBA_BOUNDSCHECK="1", NUMBA_CACHE_DIR=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-c", _NOT_UTF8], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize(("shingle_size", "seed"), [(0, 1), (2**63, 1), (5, -1), (5, 2**64)])
def test_a_shingle_size_or_seed_out_of_range_is_refused(shingle_size: int, seed: int) -> None:
    """Not wrapped around into the kernel's 64-bit integers (a shingle size of 2**63 read
    past the texts' tokens)."""
    with pytest.raises(ValueError, match=r"shingle|seed"):
        kernels.signatures(
            pl.Series(["a b c"]), shingle_size, seed, *PARAMS.permutation_coefficients()
        )


def test_a_numpy_integer_seed_is_a_seed() -> None:
    a, b = PARAMS.permutation_coefficients()
    assert np.array_equal(
        kernels.signatures(pl.Series(["a b c d e f"]), np.int64(5), np.uint64(1), a, b)[0],
        kernels.signatures(pl.Series(["a b c d e f"]), 5, 1, a, b)[0],
    )
