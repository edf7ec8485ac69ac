"""Selective prediction: risk-coverage curves, AURC, E-AURC, risk at a coverage, coverage
at a risk, and abstention operating points (seed 003 §13.5, DESIGN §3.11).

Rows are accepted from the most confident down: a threshold ``t`` selects every row with
``confidence >= t``. Coverage is the selected fraction, risk the error rate among the
selected. Conventions (also written into every report):

* **ties are grouped**: no threshold can split rows of equal confidence, so the curve has
  one point per distinct confidence, at the end of its tie group;
* **AURC is the mean of risks**: each row contributes the risk of the smallest selection
  that includes it (the end of its tie group), ``AURC = (1/n) Σ_i risk(end of group(i))``.
  Without ties this is Geifman & El-Yaniv's ``(1/n) Σ_k risk@k``, the right-endpoint
  Riemann sum of the curve over coverage;
* **E-AURC = AURC − AURC*** with AURC* the empirical optimum: the same rows ranked with
  every correct row first, ``AURC* = (1/n) Σ_{k>n−m} (k − (n − m)) / k`` for m errors
  (the exact finite sum, not the ``r + (1 − r) ln(1 − r)`` approximation);
* **risk at coverage c** is the risk of the smallest achievable selection with coverage
  ≥ c; the achieved coverage is reported beside it;
* **coverage at risk r** is the largest achievable coverage whose risk is ≤ r, with the
  threshold that selects it; 0 (and no threshold) when no selection reaches r.

The functions taking ``(..., groups)`` arrays reduce along the last axis, so the
bootstrap evaluates many resamples per call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from pipeline.reports.bootstrap import resampled_split_counts

__all__ = [
    "RISK_TOLERANCE",
    "RiskCoverageCurve",
    "SelectiveMetrics",
    "TieGroups",
    "optimal_aurc",
    "resampled_operating_point",
    "resampled_selective",
    "risk_coverage_curve",
    "selective_metrics",
    "tie_groups",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: Slack when comparing a computed risk with a target (float rounding of e/k).
RISK_TOLERANCE: Final = 1e-12


@dataclass(frozen=True)
class TieGroups:
    """Rows grouped by equal confidence, groups in descending confidence order."""

    #: per row: its group, 0 for the most confident
    group: IntArray
    #: per group: the confidence shared by its rows (the group's threshold)
    threshold: FloatArray

    @property
    def size(self) -> int:
        return int(self.threshold.size)


def tie_groups(confidence: FloatArray) -> TieGroups:
    """Group rows by equal confidence.

    Examples
    --------
    >>> g = tie_groups(np.array([0.9, 0.8, 0.7, 0.6, 0.8]))
    >>> g.group.tolist(), g.threshold.tolist()
    ([0, 1, 2, 3, 1], [0.9, 0.8, 0.7, 0.6])
    """
    negated, inverse = np.unique(-confidence, return_inverse=True)
    return TieGroups(inverse.astype(np.int64).reshape(-1), (-negated).astype(np.float64))


def optimal_aurc(n: int, errors: FloatArray | int) -> FloatArray:
    """AURC of the oracle ranking (all correct rows first) for ``errors`` of ``n`` wrong.

    Examples
    --------
    >>> round(float(optimal_aurc(5, 2)), 12)  # risks 0, 0, 0, 1/4, 2/5
    0.13
    """
    m = np.rint(np.asarray(errors, dtype=np.float64)).astype(np.int64)
    if n <= 0:
        return np.full(m.shape, np.nan)
    harmonic = np.concatenate([[0.0], np.cumsum(1.0 / np.arange(1, n + 1))])
    correct = n - m
    return np.asarray((m - correct * (harmonic[n] - harmonic[correct])) / n, dtype=np.float64)


@dataclass(frozen=True)
class SelectiveMetrics:
    """Scalar summaries of a risk-coverage curve; leading axes index resamples."""

    aurc: FloatArray
    aurc_optimal: FloatArray
    e_aurc: FloatArray
    #: ``(..., coverages)``: risk of the smallest selection reaching each coverage
    risk_at_coverage: FloatArray
    #: ``(..., coverages)``: the coverage that selection actually has
    achieved_coverage: FloatArray
    #: ``(..., risks)``: largest coverage whose risk is within each target (0 if none)
    coverage_at_risk: FloatArray
    #: ``(..., risks)``: the tie group selected last at that coverage; -1 if none
    group_at_risk: IntArray


def selective_metrics(
    count: FloatArray,
    errors: FloatArray,
    coverages: tuple[float, ...],
    target_risks: tuple[float, ...],
) -> SelectiveMetrics:
    """Summaries from per-tie-group row and error counts (groups in descending confidence).

    Examples
    --------
    The torch-uncertainty AURC test vector (see ``tests/reports/test_reports_selective.py``):

    >>> g = tie_groups(np.array([0.9, 0.8, 0.7, 0.6, 0.8]))
    >>> wrong = np.array([0.0, 0.0, 1.0, 1.0, 0.0])
    >>> count = np.bincount(g.group).astype(float)
    >>> errs = np.bincount(g.group, weights=wrong)
    >>> m = selective_metrics(count, errs, (0.5, 1.0), (0.0,))
    >>> round(float(m.aurc), 6), m.risk_at_coverage.tolist(), m.coverage_at_risk.tolist()
    (0.13, [0.0, 0.4], [0.6])
    """
    n = count.sum(axis=-1)
    selected = np.cumsum(count, axis=-1)
    wrong = np.cumsum(errors, axis=-1)
    risk = np.zeros_like(wrong)
    np.divide(wrong, selected, out=risk, where=selected > 0)
    aurc = _safe_divide((count * risk).sum(axis=-1), n)
    total_errors = wrong[..., -1]
    n_rows = int(np.rint(np.max(n))) if n.size else 0
    optimum = optimal_aurc(n_rows, total_errors)

    groups = selected.shape[-1]
    risk_at = []
    achieved = []
    for coverage in coverages:
        needed = np.ceil(coverage * n - 1e-9)
        # `selected` rises along the last axis: counting the entries below the need finds
        # the first group reaching it (a searchsorted per row, in one vectorised pass)
        below = np.count_nonzero(selected < needed[..., None], axis=-1)
        first = np.minimum(below, groups - 1)[..., None]
        risk_at.append(np.take_along_axis(risk, first, axis=-1)[..., 0])
        achieved.append(_safe_divide(np.take_along_axis(selected, first, axis=-1)[..., 0], n))

    # Risk is not monotone in coverage, its suffix minimum is: the last group whose risk is
    # within a target is the last whose suffix minimum is. Groups before any selected row
    # (only in resamples) can never qualify.
    qualifying = np.where(selected > 0, risk, np.inf)
    suffix_min = np.minimum.accumulate(qualifying[..., ::-1], axis=-1)[..., ::-1]
    coverage_at = []
    group_at = []
    for target in target_risks:
        last = np.count_nonzero(suffix_min <= target + RISK_TOLERANCE, axis=-1) - 1
        found = last >= 0
        reached = np.take_along_axis(selected, np.maximum(last, 0)[..., None], axis=-1)[..., 0]
        coverage_at.append(np.where(found, _safe_divide(reached, n), 0.0))
        group_at.append(np.where(found, last, -1))

    return SelectiveMetrics(
        aurc=aurc,
        aurc_optimal=optimum,
        e_aurc=aurc - optimum,
        risk_at_coverage=np.stack(risk_at, axis=-1) if risk_at else np.zeros((*n.shape, 0)),
        achieved_coverage=np.stack(achieved, axis=-1) if achieved else np.zeros((*n.shape, 0)),
        coverage_at_risk=np.stack(coverage_at, axis=-1) if coverage_at else np.zeros((*n.shape, 0)),
        group_at_risk=np.stack(group_at, axis=-1).astype(np.int64)
        if group_at
        else np.zeros((*n.shape, 0), dtype=np.int64),
    )


@dataclass(frozen=True)
class RiskCoverageCurve:
    """One point per tie group: select every row with ``confidence >= threshold``."""

    threshold: FloatArray
    selected: FloatArray
    errors: FloatArray
    coverage: FloatArray
    risk: FloatArray
    #: risk of the oracle ranking at the same coverage
    optimal_risk: FloatArray


def risk_coverage_curve(confidence: FloatArray, wrong: FloatArray) -> RiskCoverageCurve:
    """The risk-coverage curve with ties grouped.

    Examples
    --------
    >>> c = risk_coverage_curve(np.array([0.9, 0.8, 0.7, 0.8]), np.array([0.0, 1, 1, 0]))
    >>> c.coverage.tolist(), c.risk.tolist()
    ([0.25, 0.75, 1.0], [0.0, 0.3333333333333333, 0.5])
    """
    groups = tie_groups(confidence)
    count = np.bincount(groups.group, minlength=groups.size).astype(np.float64)
    errs = np.bincount(groups.group, weights=wrong, minlength=groups.size).astype(np.float64)
    selected = np.cumsum(count)
    errors = np.cumsum(errs)
    n = float(confidence.size)
    total_errors = float(errors[-1]) if errors.size else 0.0
    return RiskCoverageCurve(
        threshold=groups.threshold,
        selected=selected,
        errors=errors,
        coverage=selected / n if n else selected,
        risk=_safe_divide(errors, selected),
        optimal_risk=_safe_divide(np.maximum(selected - (n - total_errors), 0.0), selected),
    )


def resampled_selective(
    indices: IntArray,
    groups: TieGroups,
    wrong: FloatArray,
    coverages: tuple[float, ...],
    target_risks: tuple[float, ...],
) -> SelectiveMetrics:
    """:func:`selective_metrics` of each resample in ``indices`` (``(k, n)``).

    Resampled rows keep their original tie groups, so a resample only re-counts rows and
    errors per group: no sort per resample.
    """
    count, errors, _ = resampled_split_counts(
        indices, groups.group, groups.size, wrong.astype(np.int64)
    )
    return selective_metrics(count, errors, coverages, target_risks)


def resampled_operating_point(
    indices: IntArray, selected: FloatArray, wrong_selected: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """Coverage and risk of each resample; risk is NaN where nothing was selected."""
    n = indices.shape[1]
    chosen = selected[indices].sum(axis=1)
    wrong = wrong_selected[indices].sum(axis=1)
    return chosen / n, _safe_divide(wrong, chosen)


def _safe_divide(numerator: FloatArray, denominator: FloatArray) -> FloatArray:
    numerator = np.asarray(numerator, dtype=np.float64)
    denominator = np.asarray(denominator, dtype=np.float64)
    out = np.full(np.broadcast(numerator, denominator).shape, np.nan)
    np.divide(numerator, denominator, out=out, where=denominator > 0)
    return out
