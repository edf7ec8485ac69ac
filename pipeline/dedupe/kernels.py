"""MinHash signing compiled with numba: the same signatures as
:func:`pipeline.dedupe.minhash.signatures`' vectorised path, four times faster (12.0
against 47.7 µs a row of 2.5 KB in ``benchmarks/near_keys.py``; ``docs/scale.md`` gives
the scale benchmark's figures).

The vectorised path tokenises with polars (a regex, a split, a categorical), hashes each
distinct token in Python, and takes each permutation's minimum with a numpy pass per
permutation: every step a pass over every token or shingle of a chunk. Here one pass over
a text's UTF-8 bytes finds its tokens and hashes each (:func:`~pipeline.dedupe._jit.xxh3`),
and a second runs over its shingles once, every permutation's minimum kept in registers.
Nothing is approximated, so the vectorised path stays the reference (tests compare the two
over random Unicode texts, and that xxh3 with ``xxhash`` over every length class):

* a token is a maximal run of the regex class ``\\w`` (polars' regex, as the vectorised
  path's): the code points in it are read off that regex once a process
  (:func:`_word_table`);
* a token's hash is ``xxh3_64`` of its UTF-8 bytes with the seed, as ``xxhash`` gives it:
  written here for tokens up to 240 bytes, and left to ``xxhash`` for longer ones (rare:
  a run of word characters that long);
* the shingles, their mixing and the permutations are the vectorised path's, in 64- and
  32-bit wrapping arithmetic;
* bytes that are not UTF-8 (Arrow's strings are, but a malformed import is not checked)
  are no word, and read nothing beyond their text or the table.

The kernels are compiled on first use in a process, and cached on disk by numba
(``cache=True``: in the package's ``__pycache__``, or numba's user cache where that is not
writable), so a process after the first loads them.
"""

from __future__ import annotations

import functools
import operator
from typing import Final

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa
import xxhash

__all__ = ["signatures"]

U32 = npt.NDArray[np.uint32]


def signatures(
    texts: pl.Series, shingle_size: int, seed: int, a: U32, b: U32
) -> tuple[U32, npt.NDArray[np.bool_]]:
    """MinHash signatures of ``texts`` (permutations ``x ↦ a·x + b``), shape
    (permutations, texts), and which texts have shingles: those of
    :func:`pipeline.dedupe.minhash.signatures`. A text without a token (or null) has
    none, and its signature is every value's maximum."""
    shingle_size, seed = operator.index(shingle_size), operator.index(seed)
    if not 1 <= shingle_size <= _LARGEST_SHINGLE:
        raise ValueError(f"a shingle is 1 to {_LARGEST_SHINGLE} tokens, not {shingle_size}")
    if not 0 <= seed < 1 << 64:
        raise ValueError(f"the seed is a 64-bit unsigned integer, not {seed}")
    from pipeline.dedupe import _jit  # numba, imported on first use

    array = texts.to_arrow().cast(pa.large_string())
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    n = len(array)
    _, offsets_buffer, data_buffer = array.buffers()
    offsets = np.frombuffer(offsets_buffer, np.int64)[array.offset : array.offset + n + 1]
    data = (
        np.frombuffer(data_buffer, np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    )
    valid = array.is_valid().to_numpy(zero_copy_only=False)
    size = int(offsets[-1] - offsets[0])
    # a token takes a byte, and a text's tokens are apart: at most (bytes + 1) // 2 a text
    hashes = np.empty(size // 2 + n + 1, np.uint64)
    counts = np.zeros(n, np.int64)
    # (token, start, length) of each token longer than xxh3 is written for here
    long_tokens = np.empty(3 * (size // (_jit.LONGEST + 1) + 1), np.int64)
    tokens, longs = _jit.token_hashes(
        data,
        offsets,
        valid,
        _word_table(),
        _jit.xxh3_keys(seed),
        hashes,
        counts,
        long_tokens,
    )
    for i in range(0, 3 * longs, 3):
        token, start, length = long_tokens[i : i + 3]
        hashes[token] = xxhash.xxh3_64_intdigest(data[start : start + length].tobytes(), seed)
    out = np.empty((len(a), n), np.uint32)
    _jit.minima(hashes[:tokens], counts, shingle_size, a, b, out)
    return out, counts > 0


@functools.cache
def _word_table() -> npt.NDArray[np.uint8]:
    """1 at each code point polars' regex counts as ``\\w`` (the vectorised path's tokens),
    read off the regex itself once a process (~0.2 s): the code points but the surrogates,
    65,536 at a time in one string whose non-word characters it replaces with U+0000
    (itself no word character). At once, the strings' copies raised a worker's resident
    memory by 29 MB; by 7 this way."""
    from pipeline.dedupe._jit import WORD_TABLE

    table = np.zeros(WORD_TABLE, np.uint8)
    for start in range(0, 0x110000, _TABLE_STEP):
        codes = np.arange(start, start + _TABLE_STEP, dtype=np.uint32)
        codes = codes[(codes < 0xD800) | (codes > 0xDFFF)]
        marked = pl.Series([codes.tobytes().decode("utf-32-le")]).str.replace_all(r"\W", "\x00")
        table[codes] = np.frombuffer(marked.item().encode("utf-32-le"), np.uint32) != 0
    return table


#: the kernel's shingle size is a signed 64-bit integer (the settings allow 1 to 64)
_LARGEST_SHINGLE: Final = (1 << 63) - 1
#: code points read off the regex at a time (:func:`_word_table`)
_TABLE_STEP: Final = 1 << 16
