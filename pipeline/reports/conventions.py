"""The conventions behind every number of an evaluation report, as data.

Libraries disagree on bin edges, on where confidence 1.0 goes, on how AURC treats ties
and integrates the curve. rowgate fixes one answer for each, and writes this dictionary
into every ``report.json`` (and the HTML page), so a number can be compared with another
tool's by reading how both were computed.
"""

from __future__ import annotations

from typing import Any

from pipeline.reports.bootstrap import interval_percentiles, normal_quantile
from pipeline.reports.selective import RISK_TOLERANCE
from pipeline.reports.settings import ReportSettings

__all__ = ["evaluation_conventions"]


def evaluation_conventions(settings: ReportSettings) -> dict[str, Any]:
    """Every convention the report's numbers depend on, filled in with its settings."""
    low, high = interval_percentiles(settings.level)
    conventions: dict[str, Any] = {
        "rows": (
            "one row per record after --where; rows whose confidence or correctness is null "
            "are dropped and counted (data.rows_dropped_null). correct is boolean or 0/1; "
            "error = 1 - correct"
        ),
        "slices": (
            "'all' is every evaluated row; each --by expression adds one slice per distinct "
            "value (null is its own slice, labelled null). Slices are computed and "
            "resampled independently"
        ),
        "warnings": {
            "small_slice": f"n < {settings.min_slice_rows}",
            "single_confidence": "every row of the slice has the same confidence",
            "all_correct": "no errors in the slice (among selected rows for abstention)",
            "all_wrong": "no correct rows in the slice (among selected rows for abstention)",
            "none_selected": "abstention: the slice selected no row, risk is undefined",
        },
        "intervals": {
            "bootstrap": {
                "method": "percentile",
                "resamples": settings.bootstrap,
                "seed": settings.seed,
                "level": settings.level,
                "percentiles": [low, high],
                "interpolation": "numpy.percentile default ('linear')",
                "unit": "rows of the slice, drawn uniformly with replacement, n per resample",
                "generator": (
                    "numpy.random.default_rng([seed, int.from_bytes(sha256(slice label)[:8], "
                    "'little')]), integers(0, n, size=(k, n)) in chunks of at most 2**21 "
                    "indices, so intervals depend on the seed and the slice label only"
                ),
                "undefined": "replicates where a statistic is undefined are left out",
            },
            "wilson": {
                "level": settings.level,
                "z": normal_quantile(settings.level),
                "used_for": "accuracy per reliability bin; coverage and risk of abstention",
            },
        },
    }
    if settings.mode == "scored":
        conventions["confidence"] = (
            "higher means more confident; calibration needs it in [0, 1]; the "
            "risk-coverage curve uses only its order"
        )
        if settings.calibration:
            conventions["calibration"] = _calibration(settings)
        conventions["risk_coverage"] = _risk_coverage()
    else:
        conventions["abstention"] = {
            "coverage": "selected rows / rows (the system's own decision to answer)",
            "risk": "selected rows that are wrong / selected rows; undefined if none selected",
            "no_curve": "without a confidence there is one operating point per slice",
        }
    return conventions


def _calibration(settings: ReportSettings) -> dict[str, Any]:
    return {
        "bins": {
            "equal_width": {
                "count": settings.bins,
                "edges": "numpy.linspace(0, 1, bins + 1)",
            },
            "equal_mass": {
                "target_count": settings.bins,
                "edges": (
                    "[min(confidence)] + unique(numpy.quantile(confidence, "
                    "numpy.linspace(0, 1, bins + 1)[1:], method='inverted_cdf')): repeated "
                    "edges merge, so ties never straddle bins and there may be fewer bins "
                    "(summary column equal_mass_bins); the first bin may be one point"
                ),
            },
            "closed": (
                "right: (lower, upper]; the first bin is closed on both sides, so "
                "confidence 0.0 is in the first bin and 1.0 in the last; a confidence equal "
                "to an inner edge belongs to the lower bin"
            ),
            "assignment": "numpy.searchsorted(edges, confidence, side='left') - 1, clipped",
            "empty_bins": "kept in the bins table with n = 0; they add nothing to any error",
        },
        "ece": "sum over bins of (n_b / n) * |accuracy_b - mean_confidence_b|",
        "ece_equal_mass": "the same sum over the equal-mass bins",
        "mce": "max over non-empty equal-width bins of |accuracy_b - mean_confidence_b|",
        "rmsce": "sqrt(sum over equal-width bins of (n_b / n) * (accuracy_b - mean_confidence_b)**2)",
        "brier": "mean over rows of (confidence - correct)**2",
        "bootstrapped": ["ece_equal_width", "brier"],
        "compare": {
            "torchmetrics binary_calibration_error": (
                "same numbers with preds = confidence of the positive class and target = "
                "correct, n_bins = bins (its norm l1 = ece, l2 = rmsce, max = mce); it bins "
                "with torch.bucketize, also right-closed"
            ),
            "sklearn calibration_curve": (
                "strategy='uniform' gives the non-empty rows of the equal-width bins table "
                "(prob_pred = mean_confidence, prob_true = accuracy); its 'quantile' "
                "strategy uses linear percentiles, so equal-mass edges can differ"
            ),
        },
    }


def _risk_coverage() -> dict[str, Any]:
    return {
        "selection": "a threshold t selects every row with confidence >= t",
        "ties": (
            "grouped: rows of equal confidence are selected together, so the curve has one "
            "point per distinct confidence"
        ),
        "coverage": "selected rows / n",
        "risk": "errors among selected rows / selected rows",
        "aurc": (
            "mean of risks: (1/n) * sum over rows of the risk at the end of the row's tie "
            "group; without ties (1/n) * sum_k risk@k, the right-endpoint sum over coverage"
        ),
        "aurc_optimal": (
            "empirical optimum for the slice's m errors: (1/n) * sum_{k=n-m+1..n} (k - (n - m)) / k"
        ),
        "e_aurc": "aurc - aurc_optimal",
        "risk_at_coverage": (
            "risk of the smallest achievable selection with coverage >= target; its coverage "
            "is reported as achieved_coverage"
        ),
        "coverage_at_risk": (
            "largest achievable coverage whose risk <= target (+"
            f"{RISK_TOLERANCE:g} for float rounding), with the threshold selecting it; "
            "0 with no threshold when none qualifies"
        ),
        "bootstrapped": ["aurc", "e_aurc", "risk_at_coverage", "coverage_at_risk"],
        "compare": {
            "torch-uncertainty AURC": (
                "integrates risk@k by the trapezoid rule from coverage 1/n to 1 and divides "
                "by 1 - 1/n, without grouping ties: "
                "(n * aurc - (risk@1 + risk@n) / 2) / (n - 1) when confidences are distinct"
            ),
            "Geifman & El-Yaniv (2018) AURC": "the same mean of risks when there are no ties",
        },
    }
