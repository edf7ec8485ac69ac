"""Which rows repeat, found by sorting 64-bit hashes: the first step of every hash-first
check of the global phase (retries and conflicts, contradictions, exact duplicates).

Such a check hashes a key per row, shard by shard, keeps the rows whose hash repeats (a
few percent) and decides those on the exact values, so a collision can never invent or
hide a finding. This first step runs over every row of the run, so its memory is what
grows with the input. Measured at 600k rows of random 64-bit hashes: polars'
``is_duplicated`` takes 37 MB above its input, a polars sort 22 MB, a numpy sort order
and the values in it 10 MB (~17 bytes per row), and :func:`repeated`'s sorted copy and
lookups 5.5 MB (~9); ``n_unique().over(a, b)`` took 93 MB for what :func:`varying`
does in 17 MB.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final, cast

import numpy as np
import numpy.typing as npt
import polars as pl

from pipeline.core.arrays import isin

__all__ = ["dense_ranks", "repeated", "run_starts", "varying"]


def run_starts(frame: pl.DataFrame, columns: Sequence[str]) -> npt.NDArray[np.int64]:
    """Where each run of rows with equal ``columns`` begins in ``frame`` (sorted on them;
    a null equals a null): the rows sorted into runs, as the replay rule's keys and the
    review stage's items are, are counted and pointed at by array, with no hash table."""
    new = pl.any_horizontal(pl.col(c).ne_missing(pl.col(c).shift()) for c in columns)
    starts = frame.select(new).to_series().to_numpy().copy()
    starts[:1] = True  # the first row, whose values may all be null (as its shift's)
    return np.flatnonzero(starts)


def repeated(values: pl.Series | npt.NDArray[np.generic]) -> pl.Series:
    """A mask, in ``values``' order, of the values that occur more than once: a sorted
    copy finds the repeated values (few), and each value is looked up among them
    (:func:`~pipeline.core.arrays.isin`). A sort order and the values in it took ~8
    bytes a row more (51 against 28 MB at 3 M rows)."""
    array = _array(values)
    ranked = np.sort(array)
    twice = ranked[1:][ranked[1:] == ranked[:-1]]
    del ranked
    return pl.Series(_name(values), isin(array, twice))


def _array(values: pl.Series | npt.NDArray[np.generic]) -> npt.NDArray[np.generic]:
    return values if isinstance(values, np.ndarray) else values.to_numpy()


def _name(values: pl.Series | npt.NDArray[np.generic]) -> str:
    return "" if isinstance(values, np.ndarray) else values.name


def _sorted_repeats(
    array: npt.NDArray[np.generic],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """``array``'s stable sort order; whether each sorted value equals the one before it
    (one shorter); and whether each sorted value occurs more than once."""
    order = np.argsort(array, kind="stable")
    ranked = array[order]
    same = ranked[1:] == ranked[:-1]
    del ranked
    twice = np.zeros(len(array), dtype=bool)
    twice[1:] |= same
    twice[:-1] |= same
    return order, same, twice


def varying(
    groups: pl.Series | npt.NDArray[np.generic], values: pl.Series | npt.NDArray[np.generic]
) -> pl.Series:
    """A mask, in the rows' order, of the rows whose group (equal ``groups``) holds more
    than one distinct value of ``values``. Only a group of several rows can, so those
    rows (nearly always few) are found first (:func:`repeated`) and sorted alone: a sort
    of every row by group and value took ~24 bytes a row more."""
    group, value = _array(groups), _array(values)
    shared = repeated(group).to_numpy()
    group_shared, value_shared = group[shared], value[shared]
    del shared
    order = np.lexsort((value_shared, group_shared))
    group_sorted, value_sorted = group_shared[order], value_shared[order]
    del order, group_shared, value_shared
    # sorted by group then value: a group varies where its value changes inside it
    changes = (group_sorted[1:] == group_sorted[:-1]) & (value_sorted[1:] != value_sorted[:-1])
    del value_sorted
    return pl.Series(_name(groups), isin(group, group_sorted[1:][changes]))


def digest_prefix(column: str) -> pl.Expr:
    """A binary digest's first 64 bits, big-endian: they order as its bytes (the prefixes
    :func:`dense_ranks` ranks on); null for a null digest."""
    return pl.col(column).bin.head(8).bin.reinterpret(dtype=pl.UInt64, endianness="big")


def dense_ranks(
    prefixes: pl.Series | npt.NDArray[np.uint64],
    exact: Callable[[npt.NDArray[np.int64]], pl.Series],
) -> npt.NDArray[np.int64]:
    """Each row's dense rank (from 0) among long values (64-character digests), known by
    an order-preserving 64-bit prefix: ``prefixes`` (no nulls), and ``exact(rows)`` the
    values of those rows, read only where a prefix repeats. The ranks are those of the
    values themselves (``rank("dense") - 1``): rows share one when their values are equal,
    whatever the prefixes, and the order is the values' order. 8 bytes a row instead of
    the values (80 bytes a row as polars strings) and their sort: rows whose prefix
    repeats are read a chunk at a time to check that their values are equal too, and only
    the values of a prefix that stands for more than one value are ranked.

    One sort of the prefixes finds the repeated ones and, where each prefix stands for
    one value (nearly always), gives the ranks (~35 bytes a row at its peak); a prefix
    of several values is ordered by its values in a second sort."""
    prefix = cast(npt.NDArray[np.uint64], _array(prefixes))
    order, same, shared = _sorted_repeats(prefix)
    rows = order[shared]  # in prefix order, and in row order within a prefix
    del shared
    # equal prefixes: told apart (and ordered) by the values, where they differ at all
    mixed = _mixed(rows, prefix, exact) if len(rows) else rows
    if len(mixed):
        del order, same
        return _ranked_within(prefix, mixed, exact)
    new = np.ones(len(prefix), dtype=np.int64)
    new[1:] = ~same
    np.cumsum(new, out=new)
    new -= 1
    ranks = np.empty(len(prefix), dtype=np.int64)
    ranks[order] = new
    return ranks


def _ranked_within(
    prefix: npt.NDArray[np.uint64],
    mixed: npt.NDArray[np.int64],
    exact: Callable[[npt.NDArray[np.int64]], pl.Series],
) -> npt.NDArray[np.int64]:
    """Dense ranks by prefix, then by value among the ``mixed`` rows (those of a prefix
    that stands for more than one value)."""
    within = np.zeros(len(prefix), dtype=np.int64)
    within[mixed] = exact(mixed).rank("dense").to_numpy()
    order = np.lexsort((within, prefix))
    ordered, tie = prefix[order], within[order]
    new = np.ones(len(order), dtype=np.int64)
    new[1:] = (ordered[1:] != ordered[:-1]) | (tie[1:] != tie[:-1])
    ranks = np.empty(len(order), dtype=np.int64)
    ranks[order] = np.cumsum(new) - 1
    return ranks


#: rows whose values :func:`_mixed` reads at a time
_CHECK_ROWS: Final = 1 << 17


def _mixed(
    order: npt.NDArray[np.int64],
    prefix: npt.NDArray[np.uint64],
    exact: Callable[[npt.NDArray[np.int64]], pl.Series],
) -> npt.NDArray[np.int64]:
    """The rows among ``order`` (rows whose prefix repeats, sorted by prefix, a prefix's
    rows ascending) whose prefix stands for more than one value, ascending: each
    prefix's rows are read in turn (a chunk of rows at a time, each chunk read in row
    order) and compared with the row before them. Where every repeated prefix is one
    value (a dataset of copies: 1 M rows of 500 texts), nothing is ranked; before, every
    such row's value was read and ranked at once (~260 bytes a row)."""
    keys = prefix[order]
    same_prefix = np.zeros(len(order), dtype=np.bool_)
    same_prefix[1:] = keys[1:] == keys[:-1]
    differs = np.zeros(len(order), dtype=np.bool_)
    previous = None
    for lo in range(0, len(order), _CHECK_ROWS):
        rows = order[lo : lo + _CHECK_ROWS]
        ascending = np.sort(rows)
        values = exact(ascending).gather(np.searchsorted(ascending, rows))
        if previous is not None:
            values = pl.concat([previous, values])
        # differs[i]: row order[i]'s value is not row order[i - 1]'s (a null is a value)
        step = values.slice(1).ne_missing(values.slice(0, len(values) - 1)).to_numpy()
        differs[lo + len(rows) - len(step) : lo + len(rows)] = step
        previous = values.slice(len(values) - 1)
    differs &= same_prefix
    if not differs.any():
        return np.zeros(0, dtype=np.int64)
    run = np.cumsum(~same_prefix) - 1
    return np.sort(order[np.isin(run, run[differs])])
