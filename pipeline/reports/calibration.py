"""Calibration metrics over (confidence, correct) pairs: reliability bins, ECE, MCE,
RMSCE, Brier, Wilson intervals (DESIGN §3.11).

Conventions (also written into every report, see :mod:`pipeline.reports.conventions`):

* bins are right-closed, ``(lower, upper]``, except the first, which is closed on both
  sides so that confidence 0.0 lands in it; confidence 1.0 lands in the last bin. A value
  equal to an inner edge belongs to the bin below it (scikit-learn's
  ``calibration_curve`` and torchmetrics' ``bucketize`` bins agree);
* equal-width edges are ``numpy.linspace(0, 1, bins + 1)``; equal-mass edges are the
  smallest confidence followed by the ``inverted_cdf`` quantiles at levels ``k / bins``,
  repeated edges merged, so tied confidences never straddle two bins;
* ECE = Σ_b (n_b / n) · |acc_b − conf_b|, MCE = max over non-empty bins, RMSCE =
  sqrt(Σ_b (n_b / n) · (acc_b − conf_b)²), all on the equal-width bins (ECE also on the
  equal-mass bins); Brier = mean((confidence − correct)²).

Every function works on whole arrays; the ones taking ``(..., bins)`` arrays reduce along
the last axis so the bootstrap can evaluate thousands of resamples at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from pipeline.reports.bootstrap import resampled_split_counts

__all__ = [
    "CalibrationErrors",
    "ReliabilityBins",
    "assign_bins",
    "brier_score",
    "calibration_errors",
    "equal_mass_edges",
    "equal_width_edges",
    "reliability_bins",
    "resampled_calibration",
    "wilson_interval",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def equal_width_edges(bins: int) -> FloatArray:
    """``bins + 1`` equally spaced edges over [0, 1].

    Examples
    --------
    >>> equal_width_edges(4).tolist()
    [0.0, 0.25, 0.5, 0.75, 1.0]
    """
    return np.linspace(0.0, 1.0, bins + 1)


def equal_mass_edges(confidence: FloatArray, bins: int) -> FloatArray:
    """Edges putting about ``n / bins`` confidences in each right-closed bin.

    The upper edges are confidences themselves, the ``inverted_cdf`` quantiles at levels
    ``k / bins`` (k = 1..bins), so the bin ``(q_{k-1}, q_k]`` holds exactly the rows whose
    empirical CDF rises between the two levels; the lower edge of the first bin is the
    smallest confidence. Repeated upper edges are merged, so tied confidences never
    straddle two bins and heavy ties give fewer bins; the first bin may be a single point.

    Examples
    --------
    >>> equal_mass_edges(np.array([0.1, 0.2, 0.3, 0.4]), 2).tolist()
    [0.1, 0.2, 0.4]
    >>> equal_mass_edges(np.array([0.2, 0.2, 0.2, 0.9]), 3).tolist()
    [0.2, 0.2, 0.9]
    >>> equal_mass_edges(np.array([0.7, 0.7, 0.7]), 5).tolist()
    [0.7, 0.7]
    """
    if confidence.size == 0:
        return np.array([0.0, 1.0])
    levels = np.linspace(0.0, 1.0, bins + 1)[1:]
    upper = np.unique(np.quantile(confidence, levels, method="inverted_cdf"))
    return np.concatenate([[confidence.min()], upper]).astype(np.float64)


def assign_bins(confidence: FloatArray, edges: FloatArray) -> IntArray:
    """Bin index of every confidence under the right-closed convention.

    Examples
    --------
    >>> assign_bins(np.array([0.0, 0.5, 0.50001, 1.0]), equal_width_edges(2)).tolist()
    [0, 0, 1, 1]
    """
    # side="left" finds i with edges[i-1] < c <= edges[i]: right-closed bins. Values at
    # the first edge give 0 and are clipped into the first bin (closed on both sides).
    index = np.searchsorted(edges, confidence, side="left") - 1
    return np.clip(index, 0, edges.size - 2).astype(np.int64)


def wilson_interval(
    successes: FloatArray, trials: FloatArray, z: float
) -> tuple[FloatArray, FloatArray]:
    """Wilson score interval for a binomial proportion; NaN where ``trials`` is 0.

    Examples
    --------
    >>> low, high = wilson_interval(np.array([0.0]), np.array([10.0]), 1.959963984540054)
    >>> round(float(low[0]), 4), round(float(high[0]), 4)
    (0.0, 0.2775)
    """
    successes = np.asarray(successes, dtype=np.float64)
    trials = np.asarray(trials, dtype=np.float64)
    has = trials > 0
    safe = np.where(has, trials, 1.0)
    p = successes / safe
    z2 = z * z
    denominator = 1.0 + z2 / safe
    centre = (p + z2 / (2.0 * safe)) / denominator
    half = z * np.sqrt(np.maximum(p * (1.0 - p) / safe + z2 / (4.0 * safe * safe), 0.0))
    half /= denominator
    low = np.where(has, np.clip(centre - half, 0.0, 1.0), np.nan)
    high = np.where(has, np.clip(centre + half, 0.0, 1.0), np.nan)
    return low, high


@dataclass(frozen=True)
class ReliabilityBins:
    """Per-bin counts and sums of one set of bins (the reliability diagram's data)."""

    edges: FloatArray
    count: FloatArray
    sum_confidence: FloatArray
    sum_correct: FloatArray

    @property
    def mean_confidence(self) -> FloatArray:
        """Mean confidence per bin; NaN for an empty bin."""
        return _ratio(self.sum_confidence, self.count)

    @property
    def accuracy(self) -> FloatArray:
        """Fraction correct per bin; NaN for an empty bin."""
        return _ratio(self.sum_correct, self.count)


def reliability_bins(
    confidence: FloatArray, correct: FloatArray, edges: FloatArray
) -> ReliabilityBins:
    """Count and sum confidences and outcomes per bin.

    Examples
    --------
    >>> b = reliability_bins(np.array([0.25, 0.75]), np.array([0.0, 1.0]), equal_width_edges(2))
    >>> b.count.tolist(), b.accuracy.tolist()
    ([1.0, 1.0], [0.0, 1.0])
    """
    index = assign_bins(confidence, edges)
    n_bins = edges.size - 1
    return ReliabilityBins(
        edges=edges,
        count=np.bincount(index, minlength=n_bins).astype(np.float64),
        sum_confidence=np.bincount(index, weights=confidence, minlength=n_bins).astype(np.float64),
        sum_correct=np.bincount(index, weights=correct, minlength=n_bins).astype(np.float64),
    )


@dataclass(frozen=True)
class CalibrationErrors:
    """ECE, MCE and RMSCE, each of shape ``(...)`` (one per resample, or a scalar)."""

    ece: FloatArray
    mce: FloatArray
    rmsce: FloatArray


def calibration_errors(
    count: FloatArray, sum_confidence: FloatArray, sum_correct: FloatArray
) -> CalibrationErrors:
    """Calibration errors from per-bin counts and sums, reduced along the last axis.

    Examples
    --------
    The torchmetrics ``binary_calibration_error`` docstring vector, two bins:

    >>> conf = np.array([0.25, 0.25, 0.55, 0.75, 0.75]); ok = np.array([0.0, 0, 1, 1, 1])
    >>> b = reliability_bins(conf, ok, equal_width_edges(2))
    >>> e = calibration_errors(b.count, b.sum_confidence, b.sum_correct)
    >>> round(float(e.ece), 4), round(float(e.rmsce), 4), round(float(e.mce), 4)
    (0.29, 0.2918, 0.3167)
    """
    total = count.sum(axis=-1)
    gap = _ratio(np.abs(sum_confidence - sum_correct), count, fill=0.0)
    weighted = count * gap
    ece = _ratio(weighted.sum(axis=-1), total)
    rmsce = np.sqrt(_ratio((weighted * gap).sum(axis=-1), total))
    # empty bins have gap 0, so they never win the maximum
    mce = gap.max(axis=-1)
    return CalibrationErrors(ece=ece, mce=mce, rmsce=rmsce)


def brier_score(confidence: FloatArray, correct: FloatArray) -> float:
    """Mean squared difference between confidence and outcome.

    Examples
    --------
    The scikit-learn ``brier_score_loss`` docstring example:

    >>> round(brier_score(np.array([0.1, 0.9, 0.8, 0.3]), np.array([0.0, 1, 1, 0])), 12)
    0.0375
    """
    if confidence.size == 0:
        return float("nan")
    return float(np.mean((confidence - correct) ** 2))


def resampled_calibration(
    indices: IntArray,
    confidence: FloatArray,
    correct: FloatArray,
    bin_index: IntArray,
    n_bins: int,
) -> dict[str, FloatArray]:
    """Equal-width ECE and Brier of each resample in ``indices`` (``(k, n)``).

    ``bin_index`` is :func:`assign_bins` of the original rows under fixed edges, so a
    resample only re-counts: a few ``bincount`` calls, no sort and no loop.
    """
    count, sum_correct, (sum_confidence,) = resampled_split_counts(
        indices, bin_index, n_bins, correct.astype(np.int64), confidence
    )
    errors = calibration_errors(count, sum_confidence, sum_correct)
    squared = (confidence - correct) ** 2
    return {"ece": errors.ece, "brier": squared[indices].mean(axis=1)}


def _ratio(numerator: FloatArray, denominator: FloatArray, fill: float = np.nan) -> FloatArray:
    numerator = np.asarray(numerator, dtype=np.float64)
    denominator = np.asarray(denominator, dtype=np.float64)
    out = np.full(np.broadcast(numerator, denominator).shape, fill, dtype=np.float64)
    np.divide(numerator, denominator, out=out, where=denominator > 0)
    return out
