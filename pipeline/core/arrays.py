"""Array helpers the phases share.

numpy 2.4's ``np.unique`` finds an integer array's distinct values by hashing them, unless
asked for the inverse too: on millions of values that is ~50 times slower than sorting
them (1.5 M uint64: 0.73 s against 0.02 s; 30 M: 38 s against 2.8 s, measured here). The
near candidate search deduplicates tens of millions of pair codes this way on texts that
share templates.

:func:`distinct` sorts with polars: numpy's sort of 64-bit integers took ~3.5 times as
long on one thread (6 M random uint64: 0.38 s against 0.10 s); on 64,222 templated
pw-decide-row rows (2.8 M candidate pairs, the codes deduplicated band by band)
``rowgate dedupe`` went from 6.7 to 5.6 s.

``np.isin`` of millions of values in more than a few (~75 for 1 M) sorts both arrays
together: ~25 bytes a value, for a mask of one. :func:`isin` finds each value by a binary
search among the few, a chunk at a time.
"""

from __future__ import annotations

from typing import Any, Final, TypeVar, cast

import numpy as np
import numpy.typing as npt
import polars as pl

__all__ = [
    "detached",
    "distinct",
    "distinct_places",
    "distinct_union",
    "isin",
    "places_in",
    "ragged_arange",
    "sort_pairs",
]

G = TypeVar("G", bound=np.generic)


def distinct(values: npt.NDArray[G]) -> npt.NDArray[G]:
    """The sorted distinct values of an array (flattened), as ``np.unique(values)`` gives
    them: by a sort for integers; by ``np.unique`` for any other kind (NaNs, objects)."""
    if values.dtype.kind not in "iub":
        return np.unique(values)
    # polars' sort: 64-bit integers sorted ~3.5 times as fast as numpy's, on one thread
    ordered = pl.Series(values.ravel()).sort().to_numpy()
    keep = np.ones(len(ordered), dtype=np.bool_)
    keep[1:] = ordered[1:] != ordered[:-1]
    return ordered[keep]


def distinct_places(values: npt.NDArray[G]) -> tuple[npt.NDArray[G], npt.NDArray[np.int64]]:
    """The sorted distinct values of integers and each value's place among them, as
    ``np.unique(values, return_inverse=True)`` gives them: by polars' dense rank, ~3
    times as fast on one thread as :func:`distinct` and a binary search of each value
    (524,288 text ids of a near check's pairs: 20 ms against 58 ms)."""
    ranked = pl.Series(values.ravel()).rank("dense")
    places = ranked.to_numpy().astype(np.int64)
    places -= 1  # in place: a third array of every value, for a moment, otherwise
    found = np.empty(int(places.max()) + 1 if len(places) else 0, values.dtype)
    found[places] = values.ravel()
    return found, places


def distinct_union(known: npt.NDArray[G], more: npt.NDArray[G]) -> npt.NDArray[G]:
    """``distinct(concatenate([known, more]))`` of integers, for ``known`` already sorted and
    distinct: the distinct values of ``more`` that ``known`` lacks, found by a binary
    search each, inserted in place. Holds ``known``, the result and ``more``'s own arrays:
    a 32 M-value union a band at a time peaked at ~3.5 times ``known`` when the two were
    concatenated and sorted (a sort that merges two sorted runs), at ~2 times now. The two
    must be of one type: a binary search across types compares as floats, and the
    insertion would cast ``more`` to ``known``'s type unchecked."""
    if known.dtype != more.dtype:
        raise TypeError(f"distinct_union of {known.dtype} and {more.dtype}")
    more = distinct(more)
    at = np.searchsorted(known, more)
    if len(known):
        new = (at == len(known)) | (known[np.minimum(at, len(known) - 1)] != more)
        at, more = at[new], more[new]
    return np.insert(known, at, more)


#: values :func:`isin` looks up at once (8 bytes each of positions)
_LOOKUP: Final = 1 << 16


def isin(values: npt.NDArray[Any], among: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
    """``np.isin(values, among)`` (flattened ``among``), for many values among fewer:
    ``among``'s distinct values sorted once and each value found by a binary search,
    ``_LOOKUP`` values at a time (their positions: 8 bytes each), instead of numpy's sort
    of both arrays together. Arrays of different types go to ``np.isin`` (a binary
    search would compare them as floats)."""
    if values.dtype != among.dtype:
        return np.isin(values, among)
    keys = distinct(among)
    found = np.zeros(values.shape, dtype=np.bool_)
    if len(keys) == 0:
        return found
    flat, out = values.reshape(-1), found.reshape(-1)
    for lo in range(0, len(flat), _LOOKUP):
        part = flat[lo : lo + _LOOKUP]
        at = np.searchsorted(keys, part)
        np.minimum(at, len(keys) - 1, out=at)
        out[lo : lo + len(part)] = keys[at] == part
    return found


#: places written at a time by :func:`places_in`
_PLACES_BLOCK: Final = 1 << 16


def places_in(order: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
    """Each item's place in ``order`` (a permutation: the items' positions in some
    order), its inverse: an item's rank in that order. Written a block at a time, with
    no second array of every place."""
    places = np.empty(len(order), np.int64)
    for lo in range(0, len(order), _PLACES_BLOCK):
        part = order[lo : lo + _PLACES_BLOCK]
        places[part] = np.arange(lo, lo + len(part), dtype=np.int64)
    return places


def ragged_arange(counts: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """``concat(arange(c) for c in counts)``, vectorised: the place of each item of a
    ragged array within its row, for rows of ``counts`` items."""
    total = int(counts.sum())
    starts = np.cumsum(counts) - counts
    return np.arange(total, dtype=np.int64) - np.repeat(starts, counts)


def sort_pairs(keys: npt.NDArray[np.int64], values: npt.NDArray[np.int64], bound: int) -> None:
    """Sort ``keys`` (distinct, in ``[0, bound)``) in place, and ``values`` (in ``[0,
    bound)``, lined up with them) into their order in place: packed into ``keys`` as one
    64-bit number a pair (a key's bits above its value's) and sorted there, where two
    numbers below ``bound`` fit in 63 bits (below 2**31 each: no array beside the two);
    else by an argsort, 16 bytes a pair more. A key found twice is refused (after the
    sort: its neighbour is equal)."""
    if keys.dtype != np.int64 or values.dtype != np.int64:
        raise TypeError(f"sort_pairs sorts int64 arrays: not {keys.dtype} and {values.dtype}")
    if len(keys) != len(values):
        raise ValueError(f"{len(keys)} keys, {len(values)} values")
    if not len(keys):
        return
    for name, array in (("key", keys), ("value", values)):
        if int(array.min()) < 0 or int(array.max()) >= bound:
            raise ValueError(f"a {name} outside [0, {bound})")
    bits = max(bound - 1, 1).bit_length()
    if 2 * bits <= 63:
        keys <<= bits
        keys |= values
        keys.sort()
        np.bitwise_and(keys, (1 << bits) - 1, out=values)
        keys >>= bits
    else:
        order = np.argsort(keys)
        keys[:] = keys[order]
        values[:] = values[order]
    if bool((keys[1:] == keys[:-1]).any()):
        raise ValueError("a key found twice")


def detached(rows: pl.DataFrame) -> pl.DataFrame:
    """``rows`` in buffers of their own. A gather, filter or sort of polars text (string
    views) shares the text buffers of the frame it came from, so a few rows kept from
    each of many slices held every slice's texts: ``rowgate dedupe``'s write step grew
    ~190 bytes a row of the dataset, and the samples of a survivor column of text's
    sort held the whole column (~330 bytes a row of 300-byte texts). Copied through
    Arrow's own types and back to the same polars types: the same values and types."""
    table = rows.to_arrow(compat_level=pl.CompatLevel.oldest())  # the texts copied out
    return cast(pl.DataFrame, pl.from_arrow(table, schema=rows.schema, rechunk=False))
