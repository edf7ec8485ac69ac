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

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import polars as pl

from pipeline.core.arrays import isin

__all__ = ["repeated", "run_starts", "varying"]


def run_starts(frame: pl.DataFrame, columns: Sequence[str]) -> npt.NDArray[np.int64]:
    """Where each run of rows with equal ``columns`` begins in ``frame`` (sorted on them;
    a null equals a null): the rows sorted into runs, as the review stage's items are,
    are counted and pointed at by array, with no hash table."""
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
