"""``distinct``: ``np.unique``'s sorted distinct values, by a sort for integers."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from pipeline.core.arrays import distinct

_INTEGERS = st.sampled_from([np.int8, np.int32, np.int64, np.uint32, np.uint64, np.bool_])


@given(hnp.arrays(_INTEGERS, hnp.array_shapes(min_dims=1, max_dims=2, min_side=0, max_side=40)))
def test_distinct_is_numpy_unique_for_integers(values: np.ndarray) -> None:
    found = distinct(values)
    expected = np.unique(values)
    assert found.dtype == expected.dtype
    assert np.array_equal(found, expected)


def test_other_kinds_are_numpy_unique_nans_included() -> None:
    values = np.array([2.0, np.nan, 1.0, np.nan, 2.0])
    assert np.array_equal(distinct(values), np.unique(values), equal_nan=True)
    assert np.isnan(distinct(values)).sum() == 1
