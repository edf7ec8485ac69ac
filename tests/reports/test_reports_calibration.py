"""Calibration metrics against published reference values, bin edge cases, properties.

References (values copied from the projects' own docs/tests, not recomputed by us):

* torchmetrics ``binary_calibration_error`` docstring: preds [.25, .25, .55, .75, .75],
  target [0, 0, 1, 1, 1], n_bins=2 → l1 0.2900, l2 0.2918, max 0.3167. Its binary
  update is ``confidences, accuracies = preds, target``: the confidence is the
  positive-class probability and "correct" is the label, *not* max(p, 1 - p) against
  (p > .5) == target (that reading gives 0.29 / 0.29 / 0.29, so it cannot be what the
  docstring computes). The multiclass docstring (top-label max prob) is checked too.
* scikit-learn ``calibration_curve`` docstring: n_bins=3 → prob_true [0, .5, 1],
  prob_pred [.2, .525, .85].
* scikit-learn ``brier_score_loss`` docstring: [0, 1, 1, 0] vs [.1, .9, .8, .3] → 0.0375.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from matplotlib.backends.backend_agg import FigureCanvasAgg

from pipeline.reports import plots
from pipeline.reports.calibration import (
    assign_bins,
    brier_score,
    calibration_errors,
    equal_mass_edges,
    equal_width_edges,
    reliability_bins,
    resampled_calibration,
    wilson_interval,
)

Z95 = 1.959963984540054


def _errors(confidence: list[float], correct: list[float], bins: int) -> tuple[float, float, float]:
    b = reliability_bins(
        np.array(confidence), np.array(correct, dtype=float), equal_width_edges(bins)
    )
    e = calibration_errors(b.count, b.sum_confidence, b.sum_correct)
    return float(e.ece), float(e.rmsce), float(e.mce)


def test_torchmetrics_binary_docstring_vector() -> None:
    ece, rmsce, mce = _errors([0.25, 0.25, 0.55, 0.75, 0.75], [0, 0, 1, 1, 1], bins=2)
    assert round(ece, 4) == 0.29
    assert round(rmsce, 4) == 0.2918
    assert round(mce, 4) == 0.3167


def test_torchmetrics_binary_is_not_top_label_max_p() -> None:
    """max(p, 1-p) against (p > .5) == target gives a different MCE: documents why
    rowgate (like torchmetrics) takes the given confidence and outcome as they are."""
    p = np.array([0.25, 0.25, 0.55, 0.75, 0.75])
    target = np.array([0, 0, 1, 1, 1])
    top = np.maximum(p, 1 - p)
    hit = ((p > 0.5) == target).astype(float)
    _, _, mce = _errors(top.tolist(), hit.tolist(), bins=2)
    assert round(mce, 4) == 0.29 != 0.3167


def test_torchmetrics_multiclass_docstring_vector() -> None:
    probs = np.array(
        [[0.25, 0.20, 0.55], [0.55, 0.05, 0.40], [0.10, 0.30, 0.60], [0.90, 0.05, 0.05]]
    )
    target = np.array([0, 1, 2, 0])
    confidence = probs.max(axis=1)
    correct = (probs.argmax(axis=1) == target).astype(float)
    ece, rmsce, mce = _errors(confidence.tolist(), correct.tolist(), bins=3)
    assert (round(ece, 4), round(rmsce, 4), round(mce, 4)) == (0.2, 0.2082, 0.2333)


def test_sklearn_calibration_curve_docstring() -> None:
    y_true = np.array([0, 0, 0, 0, 1, 1, 1, 1, 1], dtype=float)
    y_pred = np.array([0.1, 0.2, 0.3, 0.4, 0.65, 0.7, 0.8, 0.9, 1.0])
    b = reliability_bins(y_pred, y_true, equal_width_edges(3))
    nonempty = b.count > 0
    np.testing.assert_allclose(b.accuracy[nonempty], [0.0, 0.5, 1.0])
    np.testing.assert_allclose(b.mean_confidence[nonempty], [0.2, 0.525, 0.85])


def test_sklearn_brier_docstring() -> None:
    y_true = np.array([0, 1, 1, 0], dtype=float)
    y_prob = np.array([0.1, 0.9, 0.8, 0.3])
    assert brier_score(y_prob, y_true) == pytest.approx(0.0375)


def test_confidence_one_lands_in_last_bin_and_zero_in_first() -> None:
    for bins in (1, 2, 10, 15, 100):
        edges = equal_width_edges(bins)
        index = assign_bins(np.array([0.0, 1.0]), edges)
        assert index.tolist() == [0, bins - 1]
    b = reliability_bins(
        np.array([0.0, 1.0, 1.0]), np.array([0.0, 1.0, 1.0]), equal_width_edges(10)
    )
    assert (b.count[0], b.count[-1], b.count[1:-1].sum()) == (1, 2, 0)


def test_inner_edges_are_right_closed() -> None:
    edges = equal_width_edges(4)
    # 0.25 and 0.5 belong to the bin below them; a hair above goes up
    assert assign_bins(np.array([0.25, 0.5, 0.75]), edges).tolist() == [0, 1, 2]
    assert assign_bins(np.nextafter(np.array([0.25, 0.5, 0.75]), 1), edges).tolist() == [1, 2, 3]


def test_equal_mass_edges_hold_ties_together() -> None:
    confidence = np.array([0.2, 0.2, 0.2, 0.2, 0.9, 0.9])
    edges = equal_mass_edges(confidence, 3)
    b = reliability_bins(confidence, np.ones(6), edges)
    assert edges.tolist() == [0.2, 0.2, 0.9]
    assert b.count.tolist() == [4, 2]


def test_equal_mass_bins_split_distinct_values_evenly() -> None:
    confidence = np.arange(1, 101) / 100
    b = reliability_bins(confidence, np.ones(100), equal_mass_edges(confidence, 4))
    assert b.count.tolist() == [25, 25, 25, 25]


def test_wilson_interval_reference() -> None:
    # Wilson (1927) / Agresti & Coull (1998): 8 of 10 at 95 % → [0.4902, 0.9433]
    low, high = wilson_interval(np.array([8.0]), np.array([10.0]), Z95)
    assert (round(float(low[0]), 4), round(float(high[0]), 4)) == (0.4902, 0.9433)
    low, high = wilson_interval(np.array([0.0]), np.array([0.0]), Z95)
    assert np.isnan([low[0], high[0]]).all()


unit = st.floats(0.0, 1.0, allow_nan=False)


@st.composite
def scored(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    n = draw(st.integers(1, 60))
    confidence = draw(hnp.arrays(np.float64, n, elements=unit))
    correct = draw(hnp.arrays(np.float64, n, elements=st.sampled_from([0.0, 1.0])))
    return confidence, correct


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(scored(), st.integers(1, 20))
def test_errors_are_bounded_and_ordered(data: tuple[np.ndarray, np.ndarray], bins: int) -> None:
    confidence, correct = data
    b = reliability_bins(confidence, correct, equal_width_edges(bins))
    e = calibration_errors(b.count, b.sum_confidence, b.sum_correct)
    eps = 1e-12
    assert -eps <= e.ece <= e.rmsce + eps <= e.mce + 2 * eps <= 1 + 3 * eps
    assert 0.0 <= brier_score(confidence, correct) <= 1.0
    assert b.count.sum() == confidence.size


@settings(max_examples=200, deadline=None)
@given(scored(), st.integers(1, 20))
def test_binning_matches_a_per_row_reference(
    data: tuple[np.ndarray, np.ndarray], bins: int
) -> None:
    confidence, _ = data
    edges = equal_width_edges(bins)
    expected = []
    for c in confidence.tolist():
        if c <= edges[1]:
            expected.append(0)
        else:
            expected.append(next(i for i in range(bins) if edges[i] < c <= edges[i + 1]))
    assert assign_bins(confidence, edges).tolist() == expected


@settings(max_examples=100, deadline=None)
@given(scored(), st.integers(1, 10), st.integers(0, 2**32))
def test_resampled_calibration_matches_direct_computation(
    data: tuple[np.ndarray, np.ndarray], bins: int, seed: int
) -> None:
    """The bincount shortcut equals recomputing ECE and Brier on each materialised resample."""
    confidence, correct = data
    edges = equal_width_edges(bins)
    indices = np.random.default_rng(seed).integers(0, confidence.size, size=(5, confidence.size))
    fast = resampled_calibration(indices, confidence, correct, assign_bins(confidence, edges), bins)
    for r, row in enumerate(indices):
        b = reliability_bins(confidence[row], correct[row], edges)
        e = calibration_errors(b.count, b.sum_confidence, b.sum_correct)
        assert fast["ece"][r] == pytest.approx(float(e.ece), abs=1e-12)
        assert fast["brier"][r] == pytest.approx(
            brier_score(confidence[row], correct[row]), abs=1e-12
        )


def test_risk_coverage_legend_covers_no_curve() -> None:
    """The legend sits outside the axes: inside, its corner covered the first curve."""
    curves = [(f"s{i}", [0.01, 0.5, 1.0], [0.4, 0.2, 0.3]) for i in range(5)]
    figure = plots.risk_coverage_figure("rc", curves, ([0.5, 1.0], [0.0, 0.3]))
    FigureCanvasAgg(figure).draw()  # lays the figure out as the report's PNG is
    (axes,) = figure.axes
    legend = axes.get_legend()
    assert legend is not None
    assert not legend.get_window_extent().overlaps(axes.get_window_extent())


def test_reliability_legend_covers_no_bin() -> None:
    """The legend sits below both axes: inside, it hid the low-confidence bins."""
    figure = plots.reliability_figure(
        "all", [0, 0.5], [0.5, 1], [2, 3], [0.25, 0.68], [0, 1], [0, 0.44], [0.66, 1]
    )
    FigureCanvasAgg(figure).draw()
    (legend,) = figure.legends
    for axes in figure.axes:
        assert not legend.get_window_extent().overlaps(axes.get_window_extent())
