"""Near duplicates: word shingles → MinHash signatures → LSH bands → exact Jaccard check.

Everything is vectorised over whole chunks of texts (polars for tokenising, numpy for
hashing, signatures and banding); Python loops run over permutations, bands and chunks,
never over rows or pairs. :func:`signatures` runs compiled kernels by default
(:mod:`pipeline.dedupe.kernels`), this module's vectorised path being their reference.
Results are deterministic: token hashes are xxhash with a fixed seed, the permutations
come from a splitmix64 sequence of that seed, and every sort is stable and ranked by the
survivor order.

* A text's shingles are its runs of ``shingle_size`` consecutive word tokens (``\\w+``);
  a text with fewer tokens has one shingle; a text with none has no near duplicates.
* A shingle hashes to 64 bits (xxh3 per token, combined and mixed with splitmix64). The
  MinHash permutations are ``x ↦ a·x + b mod 2**32`` (odd ``a``: bijections of the
  32-bit space) on the high 32 bits.
* LSH: ``bands`` bands of ``rows`` signature values; rows sharing a band are candidates.
* Every candidate pair whose signatures agree on at least
  :attr:`LshParams.agreement_floor` values (73 of 128 at the threshold 0.8: a pair at
  the threshold shows fewer with a chance of at most 1e-9; counted on the values' low
  bytes, which agree wherever the values do) gets its exact Jaccard
  similarity over the 64-bit shingle sets; only pairs at or above the threshold are near
  duplicates (LSH false positives are dropped). The estimated similarity (share of
  equal signature values) is kept beside it.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt
import polars as pl
import xxhash

from pipeline.core.arrays import distinct, isin, ragged_arange
from pipeline.core.config import DedupeSettings
from pipeline.dedupe import kernels

__all__ = [
    "LshParams",
    "NearPairs",
    "Shingles",
    "agreeing",
    "band_candidates",
    "band_keys",
    "candidate_pairs",
    "choose_bands",
    "decoded_pairs",
    "estimated_pairs",
    "exact_similarities",
    "near_pairs",
    "pairs_of_codes",
    "set_similarities",
    "set_sketches",
    "shingle_hashes",
    "shingle_set_pieces",
    "signatures",
    "verified_pairs",
]

U64 = npt.NDArray[np.uint64]
U32 = npt.NDArray[np.uint32]
U8 = npt.NDArray[np.uint8]
I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

#: What separates tokens (``\w+`` runs) other than single spaces: each run of it becomes a
#: space, and the tokens are then the pieces between spaces (:func:`_tokens`).
_NOT_TOKEN: Final = r"[^\w ]+"
#: Texts tokenised together: bounds the memory of exploded tokens and keeps the
#: signature loop's working set in cache.
_CHUNK_TOKENS: Final = 1 << 20
#: Shingles permuted at once: a block and its permuted copy (512 KiB) stay in a core's
#: cache through the permutations.
_BLOCK_SHINGLES: Final = 1 << 16
#: Texts the exact check reads at once (:func:`verified_pairs`): as many as make about
#: ``_VERIFY_BYTES`` at the mean size of the last piece read (the first time, a number),
#: at most twice the last piece's and ``_VERIFY_MAX_TEXTS``.
_VERIFY_BYTES: Final = 32 << 20
_VERIFY_FIRST_TEXTS: Final = 1 << 14
_VERIFY_MAX_TEXTS: Final = 1 << 17
#: Shingle hashes up to which the pieces' sets are copied into one (128 MB): a lookup
#: across pieces costs a sort of each chunk's places, which made 79.8 M candidate pairs
#: of templated texts (~5 G hashes gathered) ~15 % slower; above it, the copy's memory
#: matters more.
_JOINED_HASHES: Final = 1 << 24
#: Candidate pairs whose per-pair arrays (costs, chunk bounds) are built at once
_PAIR_BLOCK: Final = 1 << 20
#: Shingle hashes gathered at once, a side, when verifying candidate pairs: the join
#: that counts the shared ones peaks at ~200 bytes a hash. 9,000 rows of similar texts
#: (661,763 candidate pairs) peaked at 613 MB with 4 M at once, at 257 MB with 512 K,
#: in the same time.
_VERIFY_CHUNK: Final = 1 << 19
#: The chance, at most, that a pair whose Jaccard similarity is the threshold has
#: signatures agreeing on fewer values than :meth:`LshParams.agreement_floor`, which are
#: then not checked exactly (LSH itself misses such a pair with ~1.7e-3 at the defaults)
_MISSED_AT_THRESHOLD: Final = 1e-9
_GOLDEN: Final = 0x9E3779B97F4A7C15
_MASK64: Final = (1 << 64) - 1


def _splitmix64(state: int) -> tuple[int, int]:
    """One step of splitmix64 in Python integers (the permutation seeds)."""
    state = (state + _GOLDEN) & _MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return state, z ^ (z >> 31)


def _mix(x: U64) -> U64:
    """splitmix64's finaliser over an array (wrapping uint64 arithmetic)."""
    x = x ^ (x >> np.uint64(30))  # a new array: the caller's stays as it is
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


def choose_bands(threshold: float, permutations: int, target_recall: float) -> tuple[int, int]:
    """(bands, rows): the most rows per band (fewest false candidates) such that a pair
    whose Jaccard equals ``threshold`` becomes a candidate with probability at least
    ``target_recall``: ``1 - (1 - t**rows)**bands``."""
    for rows in range(permutations, 0, -1):
        bands = permutations // rows
        if 1.0 - (1.0 - threshold**rows) ** bands >= target_recall:
            return bands, rows
    return permutations, 1


@functools.cache
def _agreement_floor(permutations: int, threshold: float) -> int:
    """The largest ``k`` with ``P(Binomial(permutations, threshold) < k)`` at most
    :data:`_MISSED_AT_THRESHOLD` (every value agrees at the threshold 1)."""
    if threshold >= 1.0:
        return permutations
    n, below = permutations, 0.0
    for k in range(n + 1):
        log_p = (
            math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
            + k * math.log(threshold) + (n - k) * math.log1p(-threshold)
        )  # fmt: skip
        below += math.exp(log_p)
        if below > _MISSED_AT_THRESHOLD:
            return k
    return n


@dataclass(frozen=True)
class LshParams:
    threshold: float = 0.8
    shingle_size: int = 5
    permutations: int = 128
    bands: int = 21
    rows: int = 6
    seed: int = 1
    max_bucket: int = 200

    @classmethod
    def from_settings(cls, settings: DedupeSettings) -> LshParams:
        if settings.bands is None:
            bands, rows = choose_bands(
                settings.threshold, settings.permutations, settings.target_recall
            )
        else:
            bands, rows = settings.bands, settings.permutations // settings.bands
        return cls(
            threshold=settings.threshold,
            shingle_size=settings.shingle_size,
            permutations=settings.permutations,
            bands=bands,
            rows=rows,
            seed=settings.seed,
            max_bucket=settings.max_bucket,
        )

    def candidate_probability(self, similarity: float) -> float:
        """Probability that a pair with this Jaccard similarity shares a band."""
        return float(1.0 - (1.0 - similarity**self.rows) ** self.bands)

    @property
    def agreement_floor(self) -> int:
        """The fewest equal signature values a candidate pair shows for its exact check
        to run: a pair of Jaccard similarity ``J`` agrees on each value with probability
        ``J``, so one at the threshold or above shows fewer with probability at most
        :data:`_MISSED_AT_THRESHOLD` (a binomial tail; sharing a band only adds equal
        values). 73 of 128 at the threshold 0.8."""
        return _agreement_floor(self.permutations, self.threshold)

    def permutation_coefficients(self) -> tuple[U32, U32]:
        """(a, b) of the ``permutations`` affine maps, from the seed; ``a`` odd."""
        state = self.seed
        a, b = [], []
        for _ in range(self.permutations):
            state, x = _splitmix64(state)
            a.append((x & 0xFFFFFFFF) | 1)
            b.append(x >> 32)
        return np.array(a, dtype=np.uint32), np.array(b, dtype=np.uint32)


@dataclass(frozen=True)
class Shingles:
    """Shingle hashes of a batch of texts in CSR form: text ``i`` owns
    ``hashes[offsets[i]:offsets[i + 1]]`` (empty for a text without tokens)."""

    hashes: U64
    offsets: I64

    @property
    def counts(self) -> I64:
        return np.diff(self.offsets)


def _tokens(texts: pl.Series) -> tuple[pl.Series, I64]:
    """Every text's tokens, its runs of ``\\w`` characters, in order, as one series, and
    each text's count (0 for null). Once each run of characters that are neither word
    characters nor a space is a space, the tokens are exactly the pieces between spaces
    that are not empty. Most separators are single spaces, which the regex then never
    matches: ~18 µs a row of 2.5 K characters against ~21 for ``str.extract_all(r"\\w+")``."""
    pieces = texts.str.replace_all(_NOT_TOKEN, " ").str.split(" ")
    # a text gives at least one piece (null, or "" for a text with no token)
    per_text = pieces.list.len().fill_null(1).to_numpy().astype(np.int64)
    flat = pieces.explode()
    token = (flat.str.len_bytes() > 0).fill_null(False)
    starts = np.cumsum(per_text) - per_text
    lengths = np.add.reduceat(token.to_numpy().astype(np.int64), starts) if len(starts) else starts
    return flat.filter(token), lengths


def shingle_hashes(texts: pl.Series, shingle_size: int, seed: int) -> Shingles:
    """The 64-bit shingle hashes of each text (see the module docstring)."""
    flat, lengths = _tokens(texts)
    if len(flat) == 0:
        return Shingles(np.zeros(0, np.uint64), np.zeros(len(texts) + 1, np.int64))
    # each token's place in the chunk's vocabulary: its code in categories of its own,
    # whose strings come in the order of their codes (read while the coded tokens hold
    # the categories: they are freed with the last series that uses them)
    categories = pl.Categories.random()
    coded = flat.cast(pl.Categorical(categories))
    vocabulary = categories.to_series().to_list()
    codes = coded.to_physical().to_numpy()
    del coded
    if len(vocabulary) <= int(codes.max()) or None in vocabulary:
        raise AssertionError("a token's category has no string")
    # xxhash per distinct token only: a chunk repeats its vocabulary many times over
    digests = np.fromiter(
        (xxhash.xxh3_64_intdigest(t.encode("utf-8"), seed) for t in vocabulary),
        dtype=np.uint64,
        count=len(vocabulary),
    )
    token_hash = digests[codes]
    kept = lengths[lengths > 0]
    starts = np.cumsum(kept) - kept
    size = shingle_size
    total = len(token_hash)
    multiplier = np.uint64(_GOLDEN)
    # windows over the whole token stream; only those inside one text are used below
    combined = token_hash.copy()
    for j in range(1, min(size, total)):
        head = combined[: total - j]
        np.multiply(head, multiplier, out=head)
        np.add(head, token_hash[j:], out=head)
    shingles_per_text = np.maximum(kept - size + 1, 1)
    # a window starts at each token but a text's last size - 1 (one at a short text's first)
    ends = starts + kept
    cut = np.zeros(total + 1, np.int32)
    cut[np.maximum(ends - size + 1, starts + 1)] += 1
    cut[ends] -= 1
    windows = combined[np.cumsum(cut[:-1]) == 0]
    # a text shorter than one shingle is one shingle of all its tokens
    short = np.flatnonzero(kept < size)
    if len(short):
        at = (np.cumsum(shingles_per_text) - shingles_per_text)[short]
        acc = token_hash[starts[short]]
        for j in range(1, size):
            more = j < kept[short]
            nxt = token_hash[np.minimum(starts[short] + j, total - 1)]
            acc = np.where(more, acc * multiplier + nxt, acc)
        windows[at] = acc
    hashes = _mix(windows)
    counts = np.zeros(len(texts), np.int64)
    counts[lengths > 0] = shingles_per_text
    offsets = np.zeros(len(texts) + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    return Shingles(hashes, offsets)


def _chunks(texts: pl.Series) -> Iterator[tuple[int, int]]:
    """[start, end) ranges of texts holding at most ``_CHUNK_TOKENS`` tokens each (or
    one text)."""
    # a bound read off the lengths alone: a token and the separator after it take at
    # least two bytes (counting spaces cost 8 µs a row of 2.3 K characters)
    estimate = ((texts.str.len_bytes().fill_null(0) + 1) // 2).to_numpy()
    bounds = np.cumsum(estimate)
    start, n = 0, len(texts)
    while start < n:
        base = bounds[start - 1] if start else 0
        end = int(np.searchsorted(bounds, base + _CHUNK_TOKENS, side="right"))
        end = max(end, start + 1)
        yield start, min(end, n)
        start = end


def signatures(
    texts: pl.Series, params: LshParams, *, compiled: bool = True
) -> tuple[U32, npt.NDArray[np.bool_]]:
    """MinHash signatures, shape (permutations, texts), and which texts have shingles.
    ``compiled``: by the numba kernels (:mod:`pipeline.dedupe.kernels`), or by this
    module's vectorised path, which is the reference (tests hold the two equal)."""
    n = len(texts)
    a, b = params.permutation_coefficients()
    out = np.full((params.permutations, n), np.iinfo(np.uint32).max, dtype=np.uint32)
    has = np.zeros(n, dtype=np.bool_)
    for lo, hi in _chunks(texts):
        chunk = texts.slice(lo, hi - lo)
        if compiled:
            out[:, lo:hi], has[lo:hi] = kernels.signatures(
                chunk, params.shingle_size, params.seed, a, b
            )
            continue
        sh = shingle_hashes(chunk, params.shingle_size, params.seed)
        nonempty, minima = _text_minima(sh, a, b)
        has[lo + nonempty] = True
        out[:, lo + nonempty] = minima
    return out, has


def _text_minima(sh: Shingles, a: U32, b: U32) -> tuple[I64, U32]:
    """The texts of ``sh`` that have shingles, and their signatures (permutations ×
    those texts): each permutation's minimum over a text's high 32 bits of hashes (a
    repeated shingle changes no minimum, so a text's set gives its text's)."""
    nonempty = np.flatnonzero(sh.counts > 0)
    if not len(nonempty):
        return nonempty, np.zeros((len(a), 0), np.uint32)
    x = (sh.hashes >> np.uint64(32)).astype(np.uint32)
    return nonempty, _minima(x, sh.offsets[nonempty], a, b)


def _minima(x: U32, starts: I64, a: U32, b: U32) -> U32:
    """Each permutation's minimum over each text's shingles (text ``i`` owns
    ``x[starts[i]:starts[i + 1]]``, the last to the end), shape (permutations, texts),
    a block of texts at a time: a block's shingles and their permuted copy stay in the
    core's cache across the permutations (2.3 times faster than blocks of 1 M)."""
    texts = len(starts)
    minima = np.empty((len(a), texts), dtype=np.uint32)
    bounds = np.append(starts, len(x))
    first = 0
    while first < texts:
        end = int(np.searchsorted(bounds, bounds[first] + _BLOCK_SHINGLES, side="right")) - 1
        end = min(max(end, first + 1), texts)
        block = x[bounds[first] : bounds[end]]
        offsets = bounds[first:end] - bounds[first]
        permuted = np.empty_like(block)
        for p in range(len(a)):
            np.multiply(block, a[p], out=permuted)
            np.add(permuted, b[p], out=permuted)
            minima[p, first:end] = np.minimum.reduceat(permuted, offsets)
        first = end
    return minima


def band_keys(sig: U32, params: LshParams) -> U64:
    """The LSH band keys of signatures (permutations × texts): one 64-bit key per band and
    text, shape (bands, texts). A text's keys depend on its signature alone, so the gate
    computes them per batch (:mod:`pipeline.dedupe.row_keys`)."""
    keys = np.empty((params.bands, sig.shape[1]), dtype=np.uint64)
    for band in range(params.bands):
        keys[band] = _band_key(sig[band * params.rows : (band + 1) * params.rows])
    return keys


def _band_key(band: U32) -> U64:
    """One 64-bit key per column of a band (rows × texts)."""
    key = np.zeros(band.shape[1], dtype=np.uint64)
    for row in band:
        key = _mix(key * np.uint64(_GOLDEN) + row.astype(np.uint64))
    return key


def band_candidates(keys: U64, members: I64, rank: I64, texts: int, max_bucket: int) -> U64:
    """The candidate pairs one band gives among ``members`` (text ids, with their band
    ``keys`` and survivor ``rank``), as codes ``better * texts + worse``: the pairs
    (earlier, later) inside each run of equal keys, members ordered by key, then rank. A
    run longer than ``max_bucket`` is compared star-wise: each member only with the
    run's first ``max_bucket`` members. Every pair comes from one run of equal keys, so
    the members may be split by key (partitions) and the union of the parts' codes is
    the whole band's.

    The pairs are made :data:`_PAIR_BLOCK` at a time into the codes: making them all at
    once held ~48 bytes a pair (the pairs' places, their members, the codes), 1.1 GB for
    one band of 24 M pairs of templated texts; now the codes' 8 and a block's."""
    n = len(keys)
    if n < 2:
        return np.zeros(0, np.uint64)
    order = np.lexsort((rank, keys))
    members, keys = members[order], keys[order]
    boundary = np.ones(n, dtype=np.bool_)
    boundary[1:] = keys[1:] != keys[:-1]
    run_start = np.flatnonzero(boundary)
    run_len = np.diff(np.append(run_start, n))
    size_of = np.repeat(run_len, run_len)
    pos = np.arange(n, dtype=np.int64) - np.repeat(run_start, run_len)
    partners = np.where(pos < max_bucket, size_of - 1 - pos, 0).astype(np.int64)
    del boundary, size_of, pos
    ends = np.cumsum(partners)
    codes = np.empty(int(ends[-1]), np.uint64)
    lo = 0
    while lo < n:
        done = int(ends[lo - 1]) if lo else 0
        hi = max(int(np.searchsorted(ends, done + _PAIR_BLOCK, side="right")), lo + 1)
        left = np.repeat(np.arange(lo, hi, dtype=np.int64), partners[lo:hi])
        right = left + 1 + ragged_arange(partners[lo:hi])
        block = codes[done : int(ends[hi - 1])]
        np.multiply(members[left].astype(np.uint64), np.uint64(texts), out=block)
        block += members[right].astype(np.uint64)
        lo = hi
    return codes


def pairs_of_codes(codes: list[U64], texts: int) -> tuple[I64, I64]:
    """Distinct (better, worse) text pairs from :func:`band_candidates`' codes, sorted."""
    if not codes:
        empty = np.zeros(0, np.int64)
        return empty, empty
    return decoded_pairs(distinct(np.concatenate(codes)), texts)


def decoded_pairs(codes: U64, texts: int) -> tuple[I64, I64]:
    """The (better, worse) text ids of pair codes ``better * texts + worse``, by one
    ``divmod``; the ids, far below 2**63, are read as signed integers without a copy."""
    better, worse = np.divmod(codes, np.uint64(texts))
    return better.view(np.int64), worse.view(np.int64)


def candidate_pairs(
    sig: U32, has: npt.NDArray[np.bool_], rank: I64, params: LshParams
) -> tuple[I64, I64]:
    """Distinct candidate pairs (better-ranked text, worse-ranked text)."""
    active = np.flatnonzero(has).astype(np.int64)
    n = len(rank)
    found = []
    for band in range(params.bands):
        keys = _band_key(sig[band * params.rows : (band + 1) * params.rows, active])
        found.append(band_candidates(keys, active, rank[active], n, params.max_bucket))
    return pairs_of_codes([codes for codes in found if len(codes)], n)


def _shingle_sets(texts: pl.Series, params: LshParams) -> list[Shingles]:
    """Each text's distinct shingle hashes (:func:`_unique_sets`), shingled a chunk of
    texts at a time (:func:`_chunks`): the tokens and windows of one chunk at once, never
    of all the texts. A part per chunk (:class:`_SetParts`)."""
    return [
        _unique_sets(shingle_hashes(texts.slice(lo, hi - lo), params.shingle_size, params.seed))
        for lo, hi in _chunks(texts)
    ]


@dataclass(frozen=True)
class _SetParts:
    """The shingle sets of consecutive runs of texts, as those of all of them, without
    copying the runs' hashes into one array (that copy doubled the sets at its peak)."""

    parts: tuple[Shingles, ...]
    #: each text's first hash, over all the parts (texts + 1)
    offsets: I64
    #: where each part's hashes begin among all of them
    first: I64

    @classmethod
    def of(cls, parts: Sequence[Shingles]) -> _SetParts:
        counts = [part.counts for part in parts]
        offsets = np.zeros(sum(len(c) for c in counts) + 1, np.int64)
        if counts:
            np.cumsum(np.concatenate(counts), out=offsets[1:])
        sizes = [len(part.hashes) for part in parts]
        first = np.cumsum([0, *sizes[:-1]]).astype(np.int64) if sizes else np.zeros(0, np.int64)
        return cls(tuple(parts), offsets, first)

    @property
    def counts(self) -> I64:
        return np.diff(self.offsets)

    def joined(self) -> Shingles:
        """The parts as one (a copy: for the few parts of one piece of texts)."""
        if len(self.parts) == 1:
            return self.parts[0]
        hashes = [part.hashes for part in self.parts]
        return Shingles(np.concatenate(hashes) if hashes else np.zeros(0, np.uint64), self.offsets)

    def take(self, index: I64) -> U64:
        """The hashes at places ``index`` among all of them."""
        if len(self.parts) == 1:
            return self.parts[0].hashes[index]
        # grouped by part with one sort of small integers (radix), not a pass per part
        small = np.uint16 if len(self.parts) < 1 << 16 else np.int64
        part = (np.searchsorted(self.first, index, side="right") - 1).astype(small)
        order = np.argsort(part, kind="stable")
        bounds = np.concatenate([[0], np.cumsum(np.bincount(part, minlength=len(self.parts)))])
        out = np.empty(len(index), np.uint64)
        for i, shingles in enumerate(self.parts):
            at = order[bounds[i] : bounds[i + 1]]
            out[at] = shingles.hashes[index[at] - self.first[i]]
        return out


def _unique_sets(sh: Shingles) -> Shingles:
    """Each text's distinct shingle hashes, in the order they first occur.

    Most texts repeat no shingle. One sort of a 64-bit key per shingle (the text in the
    high bits, the hash's high bits below it) finds the texts that may: only those texts'
    shingles are sorted by text and whole hash to drop the repeats. Sorting every
    shingle by (text, hash) took 8.2 of the 53 s of a 3 M-row near dedupe."""
    texts = len(sh.offsets) - 1
    if len(sh.hashes) < 2:
        return sh
    owner = np.repeat(np.arange(texts, dtype=np.uint64), sh.counts)
    bits = max(texts - 1, 1).bit_length()
    key = (owner << np.uint64(64 - bits)) | (sh.hashes >> np.uint64(bits))
    key.sort()
    clash = key[1:] == key[:-1]
    if not clash.any():
        return sh
    suspects = distinct(key[1:][clash] >> np.uint64(64 - bits))
    del key, clash
    at = np.flatnonzero(isin(owner, suspects))
    order = at[np.lexsort((at, sh.hashes[at], owner[at]))]
    hashes, owners = sh.hashes[order], owner[order]
    repeat = np.zeros(len(order), dtype=np.bool_)
    repeat[1:] = (hashes[1:] == hashes[:-1]) & (owners[1:] == owners[:-1])
    keep = np.ones(len(sh.hashes), dtype=np.bool_)
    keep[order[repeat]] = False
    counts = np.bincount(owner[keep].astype(np.int64), minlength=texts).astype(np.int64)
    offsets = np.zeros(texts + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    return Shingles(sh.hashes[keep], offsets)


def _gather(sets: _SetParts, texts: I64) -> tuple[I64, U64]:
    """(pair index, shingle hash) for the sets of ``texts`` (one text per pair)."""
    counts = sets.counts[texts]
    index = np.repeat(sets.offsets[texts], counts) + ragged_arange(counts)
    return np.repeat(np.arange(len(texts), dtype=np.int64), counts), sets.take(index)


def jaccard(texts: pl.Series, left: I64, right: I64, params: LshParams) -> F64:
    """Exact Jaccard similarity of the shingle sets of each pair of texts."""
    if not len(left):
        return np.zeros(0, np.float64)
    involved, local_left, local_right = _in_order(left, right, None)
    sets = _SetParts.of(_shingle_sets(texts.gather(involved), params))
    return _jaccard_of_sets(sets, local_left, local_right)


def _jaccard_of_sets(
    sets: _SetParts, left: I64, right: I64, params: LshParams | None = None
) -> F64:
    """Exact Jaccard similarity of each pair of ``sets``: the shared hashes are counted
    by a join of ``_VERIFY_CHUNK`` hashes a side at a time. With ``params``, a pair whose
    signatures (the sets', as the gate's: :func:`set_signatures`) agree on fewer than
    :attr:`LshParams.agreement_floor` values (counted on their low bytes: :func:`agreeing`)
    is not compared and gets 0: below the threshold, but for a chance of at most
    :data:`_MISSED_AT_THRESHOLD`. On templated texts nearly every candidate pair can be
    such a pair (the join cost ~26 ns a hash)."""
    result = np.zeros(len(left), np.float64)
    # each value's low byte: equal wherever the values are, so a pair's count only
    # rises (the floor's bound holds); a quarter of the bytes to hold and compare, the
    # 32-bit values made a part (a piece of texts read) at a time
    sketches = set_sketches(sets.parts, params) if params is not None else None
    for start in range(0, len(left), _PAIR_BLOCK):
        stop = min(start + _PAIR_BLOCK, len(left))
        block_left, block_right = left[start:stop], right[start:stop]
        if params is None or sketches is None:  # every pair compared
            result[start:stop] = _jaccard_block(sets, block_left, block_right)
            continue
        checked = np.flatnonzero(agreeing(sketches, block_left, block_right, params))
        result[start + checked] = _jaccard_block(sets, block_left[checked], block_right[checked])
    return result


def set_signatures(parts: Sequence[Shingles], params: LshParams) -> U32:
    """The MinHash signatures of the texts whose shingle sets are ``parts``, in order, a
    row per text (texts × permutations: a pair's two rows are compared whole): those
    :func:`signatures` gives the texts (a minimum is the same over a text's distinct
    shingles); a text with none has every value the largest."""
    a, b = params.permutation_coefficients()
    texts = sum(len(part.offsets) - 1 for part in parts)
    out = np.full((texts, params.permutations), np.iinfo(np.uint32).max, dtype=np.uint32)
    first = 0
    for part in parts:
        nonempty, minima = _text_minima(part, a, b)
        out[first + nonempty] = minima.T
        first += len(part.offsets) - 1
    return out


def set_sketches(parts: Sequence[Shingles], params: LshParams) -> U8:
    """The low bytes of :func:`set_signatures` (texts × permutations), the 32-bit values
    made a part at a time: what the exact check compares."""
    made = [set_signatures([part], params).astype(np.uint8) for part in parts]
    return np.concatenate(made) if made else np.zeros((0, params.permutations), np.uint8)


def agreeing(sketches: U8, left: I64, right: I64, params: LshParams) -> npt.NDArray[np.bool_]:
    """Whether each pair (``left[i]``, ``right[i]``, places among the rows of
    ``sketches``: :func:`set_sketches`) agrees on :attr:`LshParams.agreement_floor`
    values or more: the pairs whose sets are compared exactly, the others below the
    threshold but for a chance of at most :data:`_MISSED_AT_THRESHOLD`."""
    found: npt.NDArray[np.bool_] = _agreements(sketches, left, right) >= params.agreement_floor
    return found


def _agreements(rows: U32 | U8, left: I64, right: I64) -> I64:
    """How many signature values each pair's two texts share (``rows``: a signature per
    text, or its values' low bytes). Rows gathered whole and compared as bytes: 1 M pairs
    of 32,768 texts took 1.63 s as a column per text gathered from permutations × texts,
    0.58 s as 32-bit rows, 0.09 s as their low bytes (quiet machine, best of three)."""
    out = np.zeros(len(left), np.int64)
    step = 1 << 14
    for lo in range(0, len(left), step):
        hi = lo + step
        equal = rows[left[lo:hi]] == rows[right[lo:hi]]
        out[lo:hi] = equal.view(np.uint8).sum(axis=1, dtype=np.int64)
    return out


def _jaccard_block(sets: _SetParts, left: I64, right: I64) -> F64:
    """:func:`_jaccard_of_sets` of a block of pairs: their costs and chunks are a
    block's arrays, not arrays over every candidate pair."""
    sizes = sets.counts
    result = np.zeros(len(left), np.float64)
    cost = sizes[left] + sizes[right]
    bounds = np.searchsorted(np.cumsum(cost), np.arange(0, int(cost.sum()), _VERIFY_CHUNK))
    edges = [*sorted(set(bounds.tolist()) | {0}), len(left)]
    for lo, hi in itertools.pairwise(edges):
        if lo == hi:
            continue
        lp, lh = _gather(sets, left[lo:hi])
        rp, rh = _gather(sets, right[lo:hi])
        shared = (
            pl.DataFrame({"p": lp, "h": lh})
            .join(pl.DataFrame({"p": rp, "h": rh}), on=["p", "h"], how="semi")
            .group_by("p")
            .len()
        )
        inter = np.zeros(hi - lo, np.int64)
        inter[shared["p"].to_numpy()] = shared["len"].to_numpy()
        union = sizes[left[lo:hi]] + sizes[right[lo:hi]] - inter
        result[lo:hi] = np.where(union > 0, inter / np.maximum(union, 1), 0.0)
    return result


@dataclass(frozen=True)
class NearPairs:
    """Verified near-duplicate pairs of texts: ``left`` is the better-ranked text."""

    left: I64
    right: I64
    estimated: F64
    verified: F64
    candidates: int


def estimated_similarity(sig: U32, left: I64, right: I64) -> F64:
    """Share of equal signature values per pair."""
    out: F64 = _agreements(np.ascontiguousarray(sig.T), left, right) / sig.shape[0]
    return out


def near_pairs(texts: pl.Series, rank: I64, params: LshParams) -> NearPairs:
    """Near-duplicate pairs among ``texts`` (one per distinct normalised key)."""
    sig, has = signatures(texts, params)
    left, right = candidate_pairs(sig, has, rank, params)
    return verified_pairs(left, right, texts.gather, lambda at: sig[:, at], params)


def verified_pairs(
    left: I64,
    right: I64,
    texts_of: Callable[[I64], pl.Series],
    signatures_of: Callable[[I64], U32],
    params: LshParams,
    stored: I64 | None = None,
) -> NearPairs:
    """The candidate pairs (text ids) whose exact Jaccard similarity reaches the
    threshold, with their estimated similarity. ``texts_of(ids)`` and
    ``signatures_of(ids)`` (permutations × ids) give what the check reads of the texts
    involved, the only ones it reads: candidates and signatures may come from elsewhere
    (the gate's, per batch: a text's signature depends on that text alone). ``stored``:
    where each text is stored (its row), the order to ask for them in (else their ids')."""
    similarity = exact_similarities(left, right, texts_of, params, stored)
    keep = np.flatnonzero(similarity >= params.threshold)
    return estimated_pairs(
        left[keep], right[keep], similarity[keep], len(left), signatures_of, stored
    )


def estimated_pairs(
    left: I64,
    right: I64,
    verified: F64,
    candidates: int,
    signatures_of: Callable[[I64], U32],
    stored: I64 | None = None,
) -> NearPairs:
    """The verified pairs (text ids, their exact similarities, out of ``candidates``)
    with their estimated similarity, from the signatures of their texts only
    (``signatures_of`` and ``stored`` as for :func:`verified_pairs`)."""
    involved, local_left, local_right = _in_order(left, right, stored)
    sig = signatures_of(involved)
    estimated = estimated_similarity(sig, local_left, local_right)
    return NearPairs(left, right, estimated, verified, candidates)


def exact_similarities(
    left: I64,
    right: I64,
    texts_of: Callable[[I64], pl.Series],
    params: LshParams,
    stored: I64 | None = None,
) -> F64:
    """The exact Jaccard similarity of each pair of texts (ids; ``texts_of`` and
    ``stored`` as for :func:`verified_pairs`) whose signatures agree on at least
    :attr:`LshParams.agreement_floor` values, else 0 (:func:`_jaccard_of_sets`). A pair's
    value depends on its two texts alone, so any split of the pairs gives the same values.

    The texts are asked for in ``stored`` order, ~``_VERIFY_BYTES`` at a time, so each piece
    is a run of the stored rows and each is read once; only their shingle sets are kept
    (8 bytes a distinct shingle), and their signatures' low bytes (128 bytes a text).
    Shingling every involved text at once held their
    texts, tokens and windows together: 3 M rows of short similar texts (2,984,746
    candidate pairs) peaked at 2.9 GB."""
    if not len(left):
        return np.zeros(0, np.float64)
    involved, local_left, local_right = _in_order(left, right, stored)
    sets = _SetParts.of(list(shingle_set_pieces(involved, texts_of, params)))
    if len(sets.parts) > 1 and sets.offsets[-1] <= _JOINED_HASHES:
        sets = _SetParts.of([sets.joined()])
    return _jaccard_of_sets(sets, local_left, local_right, params)


def shingle_set_pieces(
    ids: I64, texts_of: Callable[[I64], pl.Series], params: LshParams
) -> Iterator[Shingles]:
    """The distinct shingle hashes of the texts ``ids``, in their order, a piece of
    consecutive texts at a time (``texts_of`` as for :func:`verified_pairs`): what the
    exact check compares, for :func:`set_similarities` to compare elsewhere. The texts
    are asked for ~``_VERIFY_BYTES`` at a time, and only each piece's sets are kept."""
    lo, count = 0, _VERIFY_FIRST_TEXTS
    while lo < len(ids):
        texts = texts_of(ids[lo : lo + count])
        yield _SetParts.of(_shingle_sets(texts, params)).joined()
        lo += count
        # as many texts as make _VERIFY_BYTES at the mean size of the last piece; at
        # most twice as many as it, and _VERIFY_MAX_TEXTS, should the texts grow
        mean = max(int(texts.str.len_bytes().fill_null(0).sum()) // max(len(texts), 1), 1)
        count = min(max(_VERIFY_BYTES // mean, 1), 2 * count, _VERIFY_MAX_TEXTS)


def set_similarities(sets: Shingles, left: I64, right: I64) -> F64:
    """The exact Jaccard similarity of every pair (``left[i]``, ``right[i]``) of ``sets``
    (places among them), none skipped: the caller keeps first the pairs whose sketches
    :func:`agreeing` keeps, and for those this is what :func:`exact_similarities` gives
    the texts they are the :func:`shingle_set_pieces` of."""
    return _jaccard_of_sets(_SetParts.of([sets]), left, right)


def _in_order(left: I64, right: I64, stored: I64 | None) -> tuple[I64, I64, I64]:
    """The distinct texts of the pairs, in the order of ``stored`` (their rows; else of
    their ids), and the places among them of each pair's left and right text. Each side
    is deduplicated on its own and the places are read off a table by text id: sorting
    the two sides together with ``np.unique``'s inverse held ~5 copies of the pairs."""
    involved = distinct(np.concatenate([distinct(left), distinct(right)])).astype(np.int64)
    if stored is not None:
        involved = involved[np.argsort(stored[involved], kind="stable")]
    place = np.zeros(int(involved.max()) + 1 if len(involved) else 0, np.int64)
    place[involved] = np.arange(len(involved), dtype=np.int64)
    return involved, place[left], place[right]
