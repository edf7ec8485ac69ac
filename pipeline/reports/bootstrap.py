"""Percentile bootstrap shared by every report metric: deterministic, chunked resampling.

A resample is a row of indices drawn with replacement. Metrics never loop over
resamples: they turn a chunk of resamples into per-resample group sums with one
``np.bincount`` (:func:`resampled_group_sums`) and reduce along the last axis. Chunks
hold at most about :data:`CHUNK_CELLS` indices, so memory stays bounded for any n and B.

Each slice draws from its own generator, seeded from ``(seed, SHA-256 of the slice
label)``: the same seed gives the same intervals, and adding a slice to a report never
moves the intervals of another.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from statistics import NormalDist
from typing import Final

import numpy as np
import numpy.typing as npt

__all__ = [
    "CHUNK_CELLS",
    "interval_percentiles",
    "normal_quantile",
    "percentile_interval",
    "resample_chunks",
    "resampled_group_sums",
    "resampled_split_counts",
    "slice_generator",
]

#: Indices held at once while resampling (16 MiB of int64).
CHUNK_CELLS: Final = 1 << 21

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def slice_generator(seed: int, label: str) -> np.random.Generator:
    """The generator for one slice's resamples.

    Parameters
    ----------
    seed
        The report's bootstrap seed (non-negative).
    label
        The slice label, e.g. ``"all"`` or ``"model=m1"``.

    Examples
    --------
    >>> a = slice_generator(0, "all").integers(0, 10, 3)
    >>> b = slice_generator(0, "all").integers(0, 10, 3)
    >>> bool((a == b).all())
    True
    """
    digest = hashlib.sha256(label.encode("utf-8")).digest()
    return np.random.default_rng([seed, int.from_bytes(digest[:8], "little")])


def resample_chunks(n: int, resamples: int, rng: np.random.Generator) -> Iterator[IntArray]:
    """Yield ``(k, n)`` index arrays, ``resamples`` rows in all, drawn uniformly with
    replacement from ``range(n)``.

    Examples
    --------
    >>> chunks = list(resample_chunks(4, 3, slice_generator(0, "all")))
    >>> sum(c.shape[0] for c in chunks), chunks[0].shape[1]
    (3, 4)
    """
    if n <= 0 or resamples <= 0:
        return
    per_chunk = max(1, CHUNK_CELLS // n)
    done = 0
    while done < resamples:
        k = min(per_chunk, resamples - done)
        yield rng.integers(0, n, size=(k, n), dtype=np.int64)
        done += k


def resampled_group_sums(
    indices: IntArray,
    groups: IntArray,
    n_groups: int,
    *weights: FloatArray | None,
) -> list[FloatArray]:
    """Per resample and group, the number (weight ``None``) or weighted sum of drawn rows.

    Every requested sum shares one gather of the group keys, the costly part.

    Parameters
    ----------
    indices
        ``(k, n)`` row indices, one resample per row.
    groups
        Group id in ``[0, n_groups)`` of every original row.
    n_groups
        Number of groups.
    weights
        One entry per sum wanted: a value per original row, or ``None`` to count rows.

    Returns
    -------
    One ``(k, n_groups)`` float array per entry of ``weights``.

    Examples
    --------
    >>> idx = np.array([[0, 0, 2], [1, 2, 2]])
    >>> counts, sums = resampled_group_sums(idx, np.array([0, 1, 1]), 2, None, np.array([1.0, 2.0, 3.0]))
    >>> counts
    array([[2., 1.],
           [0., 3.]])
    >>> sums
    array([[2., 3.],
           [0., 8.]])
    """
    k = indices.shape[0]
    flat = _flat_keys(indices, groups, n_groups)
    return [
        np.bincount(flat, weights=None if w is None else w[indices].ravel(), minlength=k * n_groups)
        .astype(np.float64, copy=False)
        .reshape(k, n_groups)
        for w in weights
    ]


def resampled_split_counts(
    indices: IntArray,
    groups: IntArray,
    n_groups: int,
    flag: IntArray,
    *weights: FloatArray,
) -> tuple[FloatArray, FloatArray, list[FloatArray]]:
    """Per resample and group: rows drawn, rows drawn with ``flag`` set (0/1), and the
    weighted sums of ``weights``.

    The counts come from one unweighted ``bincount`` over ``group * 2 + flag``, cheaper
    than a second pass with the flag as a weight.

    Examples
    --------
    >>> idx = np.array([[0, 0, 2]])
    >>> count, flagged, _ = resampled_split_counts(idx, np.array([0, 1, 1]), 2, np.array([1, 0, 1]))
    >>> count, flagged
    (array([[2., 1.]]), array([[2., 1.]]))
    """
    k = indices.shape[0]
    both, *summed = resampled_group_sums(indices, groups * 2 + flag, 2 * n_groups, None, *weights)
    pairs = both.reshape(k, n_groups, 2)
    return (
        pairs.sum(axis=-1),
        pairs[..., 1].copy(),
        [s.reshape(k, n_groups, 2).sum(axis=-1) for s in summed],
    )


def _flat_keys(indices: IntArray, groups: IntArray, n_groups: int) -> IntArray:
    k = indices.shape[0]
    flat = groups[indices]
    flat += (np.arange(k, dtype=np.int64) * n_groups)[:, None]
    return flat.ravel()


def normal_quantile(level: float) -> float:
    """The two-sided standard normal quantile for a confidence level (1.96 for 0.95)."""
    return NormalDist().inv_cdf(0.5 + level / 2)


def percentile_interval(values: FloatArray, level: float) -> tuple[float | None, float | None]:
    """Percentile interval of bootstrap replicates (numpy's default linear interpolation).

    Non-finite replicates (a statistic undefined in that resample) are left out; with
    none left the interval is undefined.

    Examples
    --------
    >>> percentile_interval(np.arange(101, dtype=float), 0.9)
    (5.0, 95.0)
    """
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return None, None
    low, high = np.percentile(finite, interval_percentiles(level))
    return float(low), float(high)


def interval_percentiles(level: float) -> tuple[float, float]:
    """The two percentiles of a central interval, e.g. (2.5, 97.5) for 0.95.

    Rounded so that float noise in ``1 - level`` never shifts a percentile.
    """
    tail = round((1.0 - level) * 50.0, 10)
    return tail, round(100.0 - tail, 10)
