"""``distinct``: ``np.unique``'s sorted distinct values, by a sort for integers;
``distinct_places``: those with each value's place among them (``np.unique``'s
inverse); ``distinct_union``: those of two arrays, the first already distinct;
``isin``: ``np.isin`` by binary searches among the distinct values looked for;
``places_in``: a permutation inverted; ``ragged_arange``: each item's place in its row;
``sort_pairs``: keys sorted in place, their values with them."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from pipeline.core import arrays
from pipeline.core.arrays import (
    distinct,
    distinct_places,
    distinct_union,
    isin,
    places_in,
    ragged_arange,
    sort_pairs,
)

_INTEGERS = st.sampled_from([np.int8, np.int32, np.int64, np.uint32, np.uint64, np.bool_])


@given(hnp.arrays(_INTEGERS, hnp.array_shapes(min_dims=1, max_dims=2, min_side=0, max_side=40)))
def test_distinct_is_numpy_unique_for_integers(values: np.ndarray) -> None:
    found = distinct(values)
    expected = np.unique(values)
    assert found.dtype == expected.dtype
    assert np.array_equal(found, expected)


@given(st.lists(st.integers(-(2**63), 2**63 - 1) | st.integers(0, 9), max_size=80))
def test_distinct_places_is_numpy_unique_with_its_inverse(values: list[int]) -> None:
    found, places = distinct_places(np.array(values, np.int64))
    expected, inverse = np.unique(np.array(values, np.int64), return_inverse=True)
    assert found.dtype == places.dtype == np.int64
    assert found.tolist() == expected.tolist()
    assert places.tolist() == inverse.tolist()


@given(st.lists(st.integers(0, 2**64 - 1) | st.integers(0, 9), max_size=80))
def test_distinct_places_of_unsigned_codes_is_numpy_unique_with_its_inverse(
    values: list[int],
) -> None:
    """A grouping check's group codes (shard and line in 64 unsigned bits), as the led
    check places each leader once."""
    found, places = distinct_places(np.array(values, np.uint64))
    expected, inverse = np.unique(np.array(values, np.uint64), return_inverse=True)
    assert found.dtype == np.uint64
    assert places.dtype == np.int64
    assert found.tolist() == expected.tolist()
    assert places.tolist() == inverse.tolist()


@given(
    st.sampled_from([np.int64, np.uint64, np.uint32]),
    st.lists(st.integers(0, 60), max_size=80),
    st.lists(st.integers(0, 60), max_size=80),
)
def test_distinct_union_is_numpy_union1d(dtype: type, known: list[int], more: list[int]) -> None:
    first = np.unique(np.array(known, dtype))
    found = distinct_union(first, np.array(more, dtype))
    expected = np.union1d(first, np.array(more, dtype))
    assert found.dtype == expected.dtype
    assert np.array_equal(found, expected)


def test_distinct_union_refuses_two_types() -> None:
    """A binary search of uint64 among int64 compares them as floats: 2**53 + 1 falls
    between 2**53 and 2**53 + 2 unsorted."""
    known = np.array([2**53, 2**53 + 2], np.uint64)
    with pytest.raises(TypeError, match="uint64 and int64"):
        distinct_union(known, np.array([2**53 + 1], np.int64))


@given(st.lists(st.integers(0, 6), max_size=20))
def test_ragged_arange_numbers_each_rows_items(counts: list[int]) -> None:
    expected = [place for count in counts for place in range(count)]
    assert ragged_arange(np.array(counts, np.int64)).tolist() == expected


def test_other_kinds_are_numpy_unique_nans_included() -> None:
    values = np.array([2.0, np.nan, 1.0, np.nan, 2.0])
    assert np.array_equal(distinct(values), np.unique(values), equal_nan=True)
    assert np.isnan(distinct(values)).sum() == 1


@given(
    hnp.arrays(_INTEGERS, hnp.array_shapes(min_dims=1, max_dims=2, min_side=0, max_side=40)),
    st.data(),
    st.integers(min_value=1, max_value=7),
)
def test_isin_is_numpy_isin(values: np.ndarray, data: st.DataObject, lookup: int) -> None:
    among = data.draw(hnp.arrays(values.dtype, st.integers(0, 12)))
    if values.size and data.draw(st.booleans()):  # some of the values themselves
        among = np.concatenate([among, values.reshape(-1)[: data.draw(st.integers(0, 5))]])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(arrays, "_LOOKUP", lookup)  # several chunks
        found = isin(values, among)
    assert found.shape == values.shape
    assert np.array_equal(found, np.isin(values, among))


def test_isin_of_other_kinds_and_types_is_numpy_isin() -> None:
    floats = np.array([1.0, np.nan, 2.5, -0.0])
    assert np.array_equal(isin(floats, np.array([np.nan, 0.0, 2.5])), [False, False, True, True])
    # uint64 beyond int64, against int64: compared exactly, never as floats
    big = np.array([2**63 + 1, 2**63], dtype=np.uint64)
    assert np.array_equal(isin(big, np.array([-1], dtype=np.int64)), np.isin(big, [-1]))
    assert np.array_equal(isin(big, np.array([2**63], dtype=np.uint64)), [False, True])


@given(
    (st.integers(1, 2**31) | st.integers(2**31 + 1, 2**32) | st.integers(2**32, 2**62)).flatmap(
        lambda bound: st.tuples(
            st.just(bound),
            st.lists(st.integers(0, bound - 1), unique=True, max_size=60).flatmap(
                lambda keys: st.tuples(
                    st.just(keys),
                    st.lists(st.integers(0, bound - 1), min_size=len(keys), max_size=len(keys)),
                )
            ),
        )
    )
)
def test_sort_pairs_sorts_the_keys_in_place_and_takes_the_values_with_them(
    drawn: tuple[int, tuple[list[int], list[int]]],
) -> None:
    """Packed into one 64-bit number a pair where two fit in 63 bits (a bound below
    2**31), else by an argsort: the keys ascend and each value is its key's, in the
    arrays given."""
    bound, (keys, values) = drawn
    k, v = np.array(keys, np.int64), np.array(values, np.int64)
    sort_pairs(k, v, bound)
    assert k.tolist() == sorted(keys)
    assert v.tolist() == [values[keys.index(key)] for key in sorted(keys)]


def test_sort_pairs_refuses_a_key_twice_or_outside_the_bound() -> None:
    """And arrays of another type than int64 (packed int32 keys would overflow)."""
    with pytest.raises(TypeError, match="int64"):
        sort_pairs(np.array([3, 1], np.int32), np.array([0, 1]), 10)
    with pytest.raises(TypeError, match="int64"):
        sort_pairs(np.array([3, 1]), np.array([0, 1], np.uint64), 10)
    for bound in (10, 2**40):  # packed, and by an argsort
        with pytest.raises(ValueError, match="twice"):
            sort_pairs(np.array([3, 1, 3]), np.array([0, 1, 2]), bound)
        with pytest.raises(ValueError, match="outside"):
            sort_pairs(np.array([3, bound]), np.array([0, 1]), bound)
        with pytest.raises(ValueError, match="outside"):
            sort_pairs(np.array([3, 1]), np.array([-1, 1]), bound)


@pytest.mark.parametrize("size", [0, 1, 7, (1 << 16) + 3])
def test_places_in_inverts_an_order(size: int) -> None:
    """Each item's place in a permutation, across the blocks it is written in."""
    order = np.random.default_rng(size).permutation(size)
    places = places_in(order)
    assert places.dtype == np.int64
    assert np.array_equal(order[places], np.arange(size))
    assert np.array_equal(places[order], np.arange(size))
