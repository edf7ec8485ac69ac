"""RFC 8785 canonical JSON: conformance data, number formatting, the fast path."""

from __future__ import annotations

import json
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.records import canonical
from pipeline.records.canonical import CanonicalJSONError, canonical_json, canonical_json_fast
from tests.strategies import JSON_VALUES


def test_rfc8785_test_data(conformance: Path) -> None:
    inputs = sorted((conformance / "jcs" / "input").glob("*.json"))
    assert inputs
    for path in inputs:
        expected = (conformance / "jcs" / "output" / path.name).read_bytes()
        value = json.loads(path.read_bytes())
        assert canonical_json(value) == expected, path.name
        assert canonical_json_fast(value) == expected, path.name


@pytest.mark.parametrize(
    ("number", "text"),
    [
        (0.0, "0"),
        (-0.0, "0"),
        (1.0, "1"),
        (1e21, "1e+21"),
        (1e20, "100000000000000000000"),
        (123456789012345680000.0, "123456789012345680000"),
        (1e-6, "0.000001"),
        (1e-7, "1e-7"),
        (-1.5e-7, "-1.5e-7"),
        (5e-324, "5e-324"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        (0.1, "0.1"),
        (333333333.3333333, "333333333.3333333"),
        (9007199254740992.0, "9007199254740992"),
    ],
)
def test_es6_number_serialisation(number: float, text: str) -> None:
    assert canonical_json(number) == text.encode()


def test_integers_are_exact_beyond_2_53() -> None:
    """rowgate's documented deviation: distinct integers never share a canonical form."""
    assert canonical_json(2**53 + 1) == b"9007199254740993"
    assert canonical_json(2**53 + 1) != canonical_json(2**53)


def test_the_fast_path_writes_integers_beyond_64_bits_as_the_definition_does() -> None:
    """orjson cannot write them (it raised TypeError: a row holding one made verify say
    the manifest was mangled); the fast path hands such a value to the definition."""
    value = {"n": [2**64, -(2**63) - 1, 2**70], "x": 0.5}
    assert (
        canonical_json_fast(value)
        == b'{"n":[18446744073709551616,-9223372036854775809,1180591620717411303424],"x":0.5}'
    )
    assert canonical_json_fast(value) == canonical_json(value)
    assert canonical_json_fast({"n": 2**64}, slow=False) == b'{"n":18446744073709551616}'


def test_keys_sort_by_utf16_code_units() -> None:
    # U+1F600 (surrogates D83D DE00) sorts before U+FFFF in UTF-16, after it by code point.
    value = {"\uffff": 1, "\U0001f600": 2, "a": 3}
    assert canonical_json(value) == '{"a":3,"\U0001f600":2,"\uffff":1}'.encode()
    assert canonical_json_fast(value) == canonical_json(value)


def test_non_finite_has_no_form() -> None:
    with pytest.raises(CanonicalJSONError):
        canonical_json(float("nan"))


@given(JSON_VALUES)
def test_fast_path_is_byte_identical(value: object) -> None:
    assert canonical_json_fast(value) == canonical_json(value)


@given(JSON_VALUES)
def test_canonical_form_is_a_fixed_point(value: object) -> None:
    """Parsing the canonical form and canonicalising again changes nothing (numbers may
    come back as int where the double is integral: JSON has one number type)."""
    text = canonical_json(value)
    assert canonical_json(json.loads(text)) == text
    assert json.loads(text, parse_int=float) == json.loads(json.dumps(value), parse_int=float)


@given(st.dictionaries(st.text(), st.integers(-10, 10)))
def test_key_order_does_not_matter(value: dict[str, int]) -> None:
    reordered = dict(reversed(list(value.items())))
    assert canonical_json(reordered) == canonical_json(value)


_FLOAT_DOCS = st.recursive(
    st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(2**63), 2**63 - 1) | st.text(),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.text(st.characters(max_codepoint=0xDFFF, exclude_categories=("Cs",))),
            children,
            max_size=4,
        )
    ),
    max_leaves=16,
)


@given(value=_FLOAT_DOCS)
def test_floats_take_orjson_with_the_definitions_numbers(value: object) -> None:
    """Documents with floats (e.g. AutoQA evaluations) no longer fall back to the
    pure-Python definition: each float is written by the definition's number formatting
    and handed to orjson pre-serialised; the bytes are the definition's."""
    expected = canonical_json(value)
    with mock.patch.object(canonical, "canonical_json", _definition_not_called):
        assert canonical_json_fast(value) == expected


def _definition_not_called(value: object) -> bytes:
    raise AssertionError("the pure-Python definition ran")
