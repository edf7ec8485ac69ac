"""The numba kernels of :mod:`pipeline.dedupe.kernels`, which imports this module (and so
numba) on first use only.

Compiling them takes ~5–8 s, once: numba caches them on disk (``cache=True``), and a
process after the first loads them in ~0.5 s, numba's import included. They are at module
level for that: functions made inside a function were compiled again in every process."""

from __future__ import annotations

from typing import Final

import numba
import numpy as np
import numpy.typing as npt

__all__ = ["LONGEST", "SECRET", "WORD_TABLE", "minima", "token_hashes", "xxh3", "xxh3_keys"]

#: the longest token :func:`xxh3` hashes (xxh3's short and mid-size inputs); the caller
#: hashes longer ones with ``xxhash``
LONGEST: Final = 240
#: entries of the word table: every code point a 4-byte sequence's bits can spell (what is
#: not UTF-8 reads no further than the table, and is no word)
WORD_TABLE: Final = 1 << 21
#: xxh3's default secret, the part inputs of up to 240 bytes read (136 bytes)
SECRET: Final = np.frombuffer(
    bytes.fromhex(
        "b8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671f"
        "cb79e64eccc0e578825ad07dccff7221b8084674f743248ee03590e6813a264c"
        "3c2852bb91c300cb88d0658b1b532ea371644897a20df94e3819ef46a9deacd8"
        "a8fa763fe39c343ff9dcbbc7c70b4f1d8a51e04bcdb45931c89f7ec9d9787364"
        "eac5ac8334d3ebc3"
    ),
    np.uint8,
)

U8 = npt.NDArray[np.uint8]
U32 = npt.NDArray[np.uint32]
U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]

_jit = numba.njit(cache=True, nogil=True)
#: a helper compiled into its callers: a call passing arrays counts their references,
#: which cost more than the helper's work (the token pass took 14.9 µs a row of 2.6 KB
#: with xxh3 called, 6.3 with it compiled in)
_inline = numba.njit(cache=True, nogil=True, inline="always")
_u64 = np.uint64
_PRIME64_1: Final = _u64(0x9E3779B185EBCA87)
_PRIME64_2: Final = _u64(0xC2B2AE3D27D4EB4F)
_PRIME64_3: Final = _u64(0x165667B19E3779F9)
_PRIME_MX1: Final = _u64(0x165667919E3779F9)
_PRIME_MX2: Final = _u64(0x9FB21C651E98DF25)
#: the shingle combination and splitmix64's finaliser (:mod:`pipeline.dedupe.minhash`)
_GOLDEN: Final = _u64(0x9E3779B97F4A7C15)
_MIX1: Final = _u64(0xBF58476D1CE4E5B9)
_MIX2: Final = _u64(0x94D049BB133111EB)
_LOW32: Final = _u64(0xFFFFFFFF)


def xxh3_keys(seed: int) -> U64:
    """What :func:`xxh3` reads of the secret, with ``seed`` mixed in as xxh3 mixes it,
    computed once a seed: ``[0]`` the bitflip of 1 to 3 bytes, ``[1]`` of 4 to 8, ``[2]``
    and ``[3]`` of 9 to 16; and for each secret offset ``s`` up to 120, ``[4 + 2s]`` and
    ``[5 + 2s]`` the two words a 16-byte mix at ``s`` keys its input with."""
    mask = (1 << 64) - 1
    secret = SECRET.tobytes()

    def word(at: int, size: int = 8) -> int:
        return int.from_bytes(secret[at : at + size], "little")

    low = seed & 0xFFFFFFFF
    swapped = int.from_bytes(low.to_bytes(4, "little"), "big")
    keys = [
        ((word(0, 4) ^ word(4, 4)) + seed) & mask,
        ((word(8) ^ word(16)) - (seed ^ (swapped << 32))) & mask,
        ((word(24) ^ word(32)) + seed) & mask,
        ((word(40) ^ word(48)) - seed) & mask,
    ]
    for at in range(121):
        keys += [(word(at) + seed) & mask, (word(at + 8) - seed) & mask]
    return np.array(keys, np.uint64)


@_inline
def _read32(data: U8, at: int) -> np.uint64:
    """The 4 bytes at ``at``, little-endian."""
    return (
        _u64(data[at])
        | (_u64(data[at + 1]) << _u64(8))
        | (_u64(data[at + 2]) << _u64(16))
        | (_u64(data[at + 3]) << _u64(24))
    )


@_inline
def _read64(data: U8, at: int) -> np.uint64:
    """The 8 bytes at ``at``, little-endian."""
    return _read32(data, at) | (_read32(data, at + 4) << _u64(32))


@_inline
def _swap64(x: np.uint64) -> np.uint64:
    x = ((x & _u64(0x00FF00FF00FF00FF)) << _u64(8)) | ((x >> _u64(8)) & _u64(0x00FF00FF00FF00FF))
    x = ((x & _u64(0x0000FFFF0000FFFF)) << _u64(16)) | ((x >> _u64(16)) & _u64(0x0000FFFF0000FFFF))
    return (x << _u64(32)) | (x >> _u64(32))


@_inline
def _mul128_fold64(x: np.uint64, y: np.uint64) -> np.uint64:
    lo_lo = (x & _LOW32) * (y & _LOW32)
    hi_lo = (x >> _u64(32)) * (y & _LOW32)
    lo_hi = (x & _LOW32) * (y >> _u64(32))
    hi_hi = (x >> _u64(32)) * (y >> _u64(32))
    cross = (lo_lo >> _u64(32)) + (hi_lo & _LOW32) + lo_hi
    upper = (hi_lo >> _u64(32)) + (cross >> _u64(32)) + hi_hi
    lower = (cross << _u64(32)) | (lo_lo & _LOW32)
    return lower ^ upper


@_inline
def _avalanche3(h: np.uint64) -> np.uint64:
    h ^= h >> _u64(37)
    h *= _PRIME_MX1
    return h ^ (h >> _u64(32))


@_inline
def _avalanche64(h: np.uint64) -> np.uint64:
    h ^= h >> _u64(33)
    h *= _PRIME64_2
    h ^= h >> _u64(29)
    h *= _PRIME64_3
    return h ^ (h >> _u64(32))


@_inline
def _rotl(x: np.uint64, r: int) -> np.uint64:
    return (x << _u64(r)) | (x >> _u64(64 - r))


@_inline
def _rrmxmx(h: np.uint64, length: np.uint64) -> np.uint64:
    h ^= _rotl(h, 49) ^ _rotl(h, 24)
    h *= _PRIME_MX2
    h ^= (h >> _u64(35)) + length
    h *= _PRIME_MX2
    return h ^ (h >> _u64(28))


# called, not compiled into xxh3: tokens of more than 16 bytes are few, and compiling
# its eight call sites in would lengthen the one-time compile
@_jit
def _mix16(data: U8, at: int, keys: U64, s: int) -> np.uint64:
    lo = _read64(data, at) ^ keys[4 + 2 * s]
    hi = _read64(data, at + 8) ^ keys[5 + 2 * s]
    return _mul128_fold64(lo, hi)


@_inline
def xxh3(data: U8, at: int, n: int, keys: U64) -> np.uint64:
    """``xxh3_64`` of the ``n`` bytes of ``data`` at ``at``, 1 to :data:`LONGEST` of them,
    with the seed of ``keys`` (:func:`xxh3_keys`): the reference implementation's short
    and mid-size paths, in its scalar arithmetic (tests compare it with ``xxhash``)."""
    length = _u64(n)
    if n <= 3:
        combined = (
            (_u64(data[at]) << _u64(16))
            | (_u64(data[at + (n >> 1)]) << _u64(24))
            | _u64(data[at + n - 1])
            | (length << _u64(8))
        )
        return _avalanche64(combined ^ keys[0])
    if n <= 8:
        keyed = (_read32(data, at + n - 4) + (_read32(data, at) << _u64(32))) ^ keys[1]
        return _rrmxmx(keyed, length)
    if n <= 16:
        lo = _read64(data, at) ^ keys[2]
        hi = _read64(data, at + n - 8) ^ keys[3]
        return _avalanche3(length + _swap64(lo) + hi + _mul128_fold64(lo, hi))
    acc = length * _PRIME64_1
    if n <= 128:
        if n > 32:
            if n > 64:
                if n > 96:
                    acc += _mix16(data, at + 48, keys, 96)
                    acc += _mix16(data, at + n - 64, keys, 112)
                acc += _mix16(data, at + 32, keys, 64)
                acc += _mix16(data, at + n - 48, keys, 80)
            acc += _mix16(data, at + 16, keys, 32)
            acc += _mix16(data, at + n - 32, keys, 48)
        acc += _mix16(data, at, keys, 0)
        acc += _mix16(data, at + n - 16, keys, 16)
        return _avalanche3(acc)
    for i in range(8):
        acc += _mix16(data, at + 16 * i, keys, 16 * i)
    acc = _avalanche3(acc)
    for i in range(8, n // 16):
        acc += _mix16(data, at + 16 * i, keys, 16 * (i - 8) + 3)
    acc += _mix16(data, at + n - 16, keys, 119)
    return _avalanche3(acc)


@_jit
def token_hashes(
    data: U8,
    offsets: I64,
    valid: npt.NDArray[np.bool_],
    word: U8,
    keys: U64,
    hashes: U64,
    counts: I64,
    long_tokens: I64,
) -> tuple[int, int]:
    """Each valid text's tokens (text ``t``: the UTF-8 bytes ``data[offsets[t]:offsets[t +
    1]]``; a token: a maximal run of code points ``word`` marks, a table of
    :data:`WORD_TABLE` entries), hashed in order into ``hashes`` (:func:`xxh3` with
    ``keys``) and counted into ``counts``. A token longer than :data:`LONGEST` is left
    for the caller, as (its place in ``hashes``, start, length) in ``long_tokens``.
    Returns how many tokens and how many such long ones."""
    tokens = 0
    longs = 0
    for t in range(len(counts)):
        if not valid[t]:
            continue
        first = tokens
        start = -1
        i = offsets[t]
        end = offsets[t + 1]
        while i <= end:
            is_word = False
            width = 1
            if i < end:
                byte = data[i]
                if byte < 0x80:
                    is_word = word[byte] != 0
                else:
                    width = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
                    # a sequence cut short by the text's end (not UTF-8, which Arrow's
                    # strings are) is read as a byte of no word. Each width written out:
                    # a loop over the continuation bytes took the signatures from 12.2-13.2
                    # to 13.6-14.1 µs a row (benchmarks/near_keys.py), a helper ~20 % more
                    if i + width > end:
                        width = 1
                    elif width == 2:
                        code = (np.int64(byte & 0x1F) << 6) | np.int64(data[i + 1] & 0x3F)
                        is_word = word[code] != 0
                    elif width == 3:
                        code = (
                            (np.int64(byte & 0x0F) << 12)
                            | (np.int64(data[i + 1] & 0x3F) << 6)
                            | np.int64(data[i + 2] & 0x3F)
                        )
                        is_word = word[code] != 0
                    else:
                        code = (
                            (np.int64(byte & 0x07) << 18)
                            | (np.int64(data[i + 1] & 0x3F) << 12)
                            | (np.int64(data[i + 2] & 0x3F) << 6)
                            | np.int64(data[i + 3] & 0x3F)
                        )
                        is_word = word[code] != 0
            if is_word:
                if start < 0:
                    start = i
            elif start >= 0:
                n = i - start
                if n <= LONGEST:
                    hashes[tokens] = xxh3(data, start, n, keys)
                else:
                    long_tokens[3 * longs] = tokens
                    long_tokens[3 * longs + 1] = start
                    long_tokens[3 * longs + 2] = n
                    longs += 1
                tokens += 1
                start = -1
            i += width
        counts[t] = tokens - first
    return tokens, longs


@_jit
def minima(hashes: U64, counts: I64, size: int, a: U32, b: U32, out: U32) -> None:
    """Each text's MinHash signature into ``out`` (permutations × texts): text ``t`` owns
    the next ``counts[t]`` token ``hashes``; its shingles are the runs of ``size`` of them
    (one of all, when fewer), combined and mixed as :func:`~pipeline.dedupe.minhash.
    shingle_hashes` does; each permutation's value is its minimum of ``a·x + b mod 2**32``
    over the shingles' high 32 bits ``x``. A text without a token gets every maximum."""
    permutations = len(a)
    low = np.empty(permutations, np.uint32)
    first = 0
    for t in range(len(counts)):
        k = counts[t]
        for p in range(permutations):
            low[p] = 0xFFFFFFFF
        width = min(size, k)
        for i in range(max(k - size + 1, 1) if k else 0):
            h = hashes[first + i]
            for j in range(1, width):
                h = h * _GOLDEN + hashes[first + i + j]
            h ^= h >> _u64(30)
            h *= _MIX1
            h ^= h >> _u64(27)
            h *= _MIX2
            h ^= h >> _u64(31)
            x = np.uint32(h >> _u64(32))
            for p in range(permutations):
                v = np.uint32(a[p] * x + b[p])
                if v < low[p]:
                    low[p] = v
        for p in range(permutations):
            out[p, t] = low[p]
        first += k
