"""Risk-coverage metrics: the torch-uncertainty reference under rowgate's convention,
tie grouping, target lookups, and properties (AURC ≥ its optimum, order invariance).

torch-uncertainty ``tests/metrics/classification/test_risk_coverage.py::test_compute_binary``:
binary probs [.1, .2, .3, .4, .2] with targets [0, 0, 1, 1, 0] expect
``(0*0.4 + 0.25*0.2/2 + 0.25*0.2 + 0.15*0.2/2) / 0.8 = 0.1125``. Its AURC turns a binary
prob p into two-class probabilities [1 - p, p]: confidence max(p, 1 - p) = [.9, .8, .7, .6, .8],
prediction argmax = class 0 everywhere, errors [0, 0, 1, 1, 0]. Ranked by confidence the
risks are 0, 0, 0, 1/4, 2/5. torch-uncertainty integrates them by the trapezoid rule over
coverage 1/5..1 and divides by 1 - 1/n: 0.1125. rowgate's AURC is the mean of risks
(0 + 0 + 0 + .25 + .4) / 5 = 0.13; the difference is the integration rule only, and
converting rowgate's curve with the trapezoid rule gives back 0.1125 exactly.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from pipeline.reports.bootstrap import resample_chunks, slice_generator
from pipeline.reports.selective import (
    optimal_aurc,
    resampled_selective,
    risk_coverage_curve,
    selective_metrics,
    tie_groups,
)

PROBS = np.array([0.1, 0.2, 0.3, 0.4, 0.2])
TARGETS = np.array([0, 0, 1, 1, 0])


def _torch_uncertainty_inputs() -> tuple[np.ndarray, np.ndarray]:
    two_class = np.stack([1 - PROBS, PROBS], axis=-1)
    confidence = two_class.max(axis=-1)
    wrong = (two_class.argmax(axis=-1) != TARGETS).astype(float)
    return confidence, wrong


def _metrics(confidence: np.ndarray, wrong: np.ndarray, coverages=(), risks=()):  # type: ignore[no-untyped-def]
    identity = np.arange(confidence.size)[None, :]
    return resampled_selective(identity, tie_groups(confidence), wrong, coverages, risks)


def test_torch_uncertainty_aurc_vector_under_rowgate_convention() -> None:
    confidence, wrong = _torch_uncertainty_inputs()
    assert wrong.tolist() == [0, 0, 1, 1, 0]
    m = _metrics(confidence, wrong)
    assert float(m.aurc[0]) == pytest.approx(0.13)
    # E-AURC against the empirical optimum (risks 0, 0, 0, 1/4, 2/5): this ranking is optimal
    assert float(m.aurc_optimal[0]) == pytest.approx(0.13)
    assert float(m.e_aurc[0]) == pytest.approx(0.0, abs=1e-12)


def test_torch_uncertainty_value_is_the_trapezoid_of_the_same_curve() -> None:
    confidence, wrong = _torch_uncertainty_inputs()
    curve = risk_coverage_curve(confidence, wrong)
    n = confidence.size
    # the .8 tie holds two correct rows, so per-row risks equal the grouped curve here
    per_row = np.repeat(curve.risk, np.diff(np.concatenate([[0], curve.selected])).astype(int))
    assert per_row.tolist() == pytest.approx([0, 0, 0, 0.25, 0.4])
    aurc = float(_metrics(confidence, wrong).aurc[0])
    trapezoid = (n * aurc - (per_row[0] + per_row[-1]) / 2) / (n - 1)
    expected = (0 * 0.4 + 0.25 * 0.2 / 2 + 0.25 * 0.2 + 0.15 * 0.2 / 2) / 0.8
    assert trapezoid == pytest.approx(expected) == pytest.approx(0.1125)


def test_torch_uncertainty_risk_at_coverage_and_coverage_at_risk() -> None:
    """RiskAtxCov(0.5) on targets [0, 0, 1, 1, 1] is 1/3 there; with ties grouped the
    smallest selection reaching 50 % coverage is the first three rows (coverage 0.6),
    whose risk is 1/3 as well. CovAtxRisk(0.5) on [0, 0, 1, 1, 0] is 1 (full coverage)."""
    two_class = np.stack([1 - PROBS, PROBS], axis=-1)
    confidence = two_class.max(axis=-1)
    wrong = (two_class.argmax(axis=-1) != np.array([0, 0, 1, 1, 1])).astype(float)
    m = _metrics(confidence, wrong, coverages=(0.5,), risks=(0.5,))
    assert float(m.risk_at_coverage[0, 0]) == pytest.approx(1 / 3)
    assert float(m.achieved_coverage[0, 0]) == pytest.approx(0.6)
    confidence, wrong = _torch_uncertainty_inputs()
    m = _metrics(confidence, wrong, risks=(0.5,))
    assert float(m.coverage_at_risk[0, 0]) == 1.0


def test_ties_are_grouped() -> None:
    """Two rows tied at 0.8, one right and one wrong: no threshold selects only the right
    one, so both rows get the tie group's risk (1/3), whatever the row order."""
    confidence = np.array([0.9, 0.8, 0.8, 0.1])
    for wrong in (np.array([0.0, 0.0, 1.0, 1.0]), np.array([0.0, 1.0, 0.0, 1.0])):
        curve = risk_coverage_curve(confidence, wrong)
        assert curve.coverage.tolist() == [0.25, 0.75, 1.0]
        assert curve.risk.tolist() == pytest.approx([0.0, 1 / 3, 0.5])
        assert float(_metrics(confidence, wrong).aurc[0]) == pytest.approx((0 + 2 / 3 + 0.5) / 4)


def test_coverage_at_risk_reports_the_threshold() -> None:
    confidence = np.array([0.95, 0.9, 0.8, 0.7, 0.6])
    wrong = np.array([0.0, 0.0, 0.0, 1.0, 1.0])
    groups = tie_groups(confidence)
    m = _metrics(confidence, wrong, coverages=(0.8, 1.0), risks=(0.0, 0.25, 0.5))
    assert m.coverage_at_risk[0].tolist() == pytest.approx([0.6, 0.8, 1.0])
    assert [groups.threshold[g] for g in m.group_at_risk[0]] == [0.8, 0.7, 0.6]
    assert m.risk_at_coverage[0].tolist() == pytest.approx([0.25, 0.4])


def test_no_selection_reaches_the_target_risk() -> None:
    m = _metrics(np.array([0.9, 0.1]), np.array([1.0, 0.0]), risks=(0.1,))
    assert float(m.coverage_at_risk[0, 0]) == 0.0
    assert int(m.group_at_risk[0, 0]) == -1


@pytest.mark.parametrize(("n", "m", "expected"), [(5, 0, 0.0), (5, 5, 1.0), (4, 1, 0.25 / 4)])
def test_optimal_aurc(n: int, m: int, expected: float) -> None:
    assert float(optimal_aurc(n, m)) == pytest.approx(expected)


@st.composite
def ranked(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    n = draw(st.integers(1, 50))
    # few distinct values so ties are common
    confidence = draw(
        hnp.arrays(np.float64, n, elements=st.sampled_from([0.0, 0.2, 0.5, 0.7, 1.0]))
    )
    wrong = draw(hnp.arrays(np.float64, n, elements=st.sampled_from([0.0, 1.0])))
    return confidence, wrong


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(ranked())
def test_aurc_is_at_least_its_optimum_and_at_most_one(data: tuple[np.ndarray, np.ndarray]) -> None:
    confidence, wrong = data
    m = _metrics(confidence, wrong)
    assert float(m.aurc_optimal[0]) - 1e-12 <= float(m.aurc[0]) <= 1.0 + 1e-12
    assert float(m.e_aurc[0]) >= -1e-12


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(ranked(), st.randoms(use_true_random=False))
def test_metrics_do_not_depend_on_row_order(data: tuple[np.ndarray, np.ndarray], random) -> None:  # type: ignore[no-untyped-def]
    confidence, wrong = data
    order = list(range(confidence.size))
    random.shuffle(order)
    a = _metrics(confidence, wrong, (0.5, 1.0), (0.1,))
    b = _metrics(confidence[order], wrong[order], (0.5, 1.0), (0.1,))
    assert float(a.aurc[0]) == pytest.approx(float(b.aurc[0]))
    np.testing.assert_allclose(a.risk_at_coverage, b.risk_at_coverage)
    np.testing.assert_allclose(a.coverage_at_risk, b.coverage_at_risk)


@settings(max_examples=100, deadline=None)
@given(ranked(), st.integers(0, 2**32))
def test_resampled_metrics_match_materialised_resamples(
    data: tuple[np.ndarray, np.ndarray], seed: int
) -> None:
    confidence, wrong = data
    indices = np.random.default_rng(seed).integers(0, confidence.size, size=(4, confidence.size))
    fast = resampled_selective(indices, tie_groups(confidence), wrong, (0.5, 0.9), (0.2,))
    for r, row in enumerate(indices):
        slow = _metrics(confidence[row], wrong[row], (0.5, 0.9), (0.2,))
        assert fast.aurc[r] == pytest.approx(float(slow.aurc[0]))
        assert fast.e_aurc[r] == pytest.approx(float(slow.e_aurc[0]))
        np.testing.assert_allclose(fast.risk_at_coverage[r], slow.risk_at_coverage[0])
        np.testing.assert_allclose(fast.coverage_at_risk[r], slow.coverage_at_risk[0])


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 200), st.integers(1, 50), st.integers(0, 2**63 - 1))
def test_bootstrap_draws_are_deterministic(n: int, resamples: int, seed: int) -> None:
    first = list(resample_chunks(n, resamples, slice_generator(seed, "all")))
    again = list(resample_chunks(n, resamples, slice_generator(seed, "all")))
    assert all((a == b).all() for a, b in zip(first, again, strict=True))
    other = list(resample_chunks(n, resamples, slice_generator(seed, "model=x")))
    assert sum(c.shape[0] for c in other) == resamples


def test_selective_metrics_accepts_batches() -> None:
    count = np.array([[1.0, 2.0], [3.0, 0.0]])
    errors = np.array([[0.0, 1.0], [1.0, 0.0]])
    m = selective_metrics(count, errors, (1.0,), (0.5,))
    assert m.aurc.shape == (2,)
    assert m.risk_at_coverage[:, 0].tolist() == pytest.approx([1 / 3, 1 / 3])
