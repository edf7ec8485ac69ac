"""Strict JSON parsing: JSONTestSuite conformance, pinned i_ decisions, edge cases."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.reasons import RejectLine
from pipeline.records.strict_json import (
    LONG_DIGITS,
    PARSER_DEPTH,
    LocatedReject,
    StrictParser,
    check_limits,
    has_float,
    measure,
    nesting_depth,
    parse_fast,
    parse_object,
    parse_value,
)
from pipeline.testing.synthetic import json_dumps_layout
from tests.strategies import INT64, JSON_VALUES, KEYS, TEXT

# RFC 8259 allows repeated keys (these are y_ files); rowgate's contract rejects them
# (DESIGN §3.2, seed 000 "Reject duplicate JSON keys before validation"). They must
# parse grammatically and then fail with exactly json.duplicate_key.
DUPLICATE_KEY_Y = {"y_object_duplicated_key.json", "y_object_duplicated_key_and_value.json"}

# The implementation-defined cases: rowgate's documented decision for each (strict: reject).
I_DECISIONS = {
    "i_number_double_huge_neg_exp.json": "json.number_range",  # underflows to 0
    "i_number_huge_exp.json": "json.non_finite",
    "i_number_neg_int_huge_exp.json": "json.non_finite",
    "i_number_pos_double_huge_exp.json": "json.non_finite",
    "i_number_real_neg_overflow.json": "json.non_finite",
    "i_number_real_pos_overflow.json": "json.non_finite",
    "i_number_real_underflow.json": "json.number_range",
    "i_number_too_big_neg_int.json": "json.number_range",
    "i_number_too_big_pos_int.json": "json.number_range",
    "i_number_very_big_negative_int.json": "json.number_range",
    "i_object_key_lone_2nd_surrogate.json": "json.invalid_surrogate",
    "i_string_1st_surrogate_but_2nd_missing.json": "json.invalid_surrogate",
    "i_string_1st_valid_surrogate_2nd_invalid.json": "json.invalid_surrogate",
    "i_string_UTF-16LE_with_BOM.json": "json.invalid_utf8",
    "i_string_UTF-8_invalid_sequence.json": "json.invalid_utf8",
    "i_string_UTF8_surrogate_U+D800.json": "json.invalid_utf8",
    "i_string_incomplete_surrogate_and_escape_valid.json": "json.invalid_surrogate",
    "i_string_incomplete_surrogate_pair.json": "json.invalid_surrogate",
    "i_string_incomplete_surrogates_escape_valid.json": "json.invalid_surrogate",
    "i_string_invalid_lonely_surrogate.json": "json.invalid_surrogate",
    "i_string_invalid_surrogate.json": "json.invalid_surrogate",
    "i_string_invalid_utf-8.json": "json.invalid_utf8",
    "i_string_inverted_surrogates_U+1D11E.json": "json.invalid_surrogate",
    "i_string_iso_latin_1.json": "json.invalid_utf8",
    "i_string_lone_second_surrogate.json": "json.invalid_surrogate",
    "i_string_lone_utf8_continuation_byte.json": "json.invalid_utf8",
    "i_string_not_in_unicode_range.json": "json.invalid_utf8",
    "i_string_overlong_sequence_2_bytes.json": "json.invalid_utf8",
    "i_string_overlong_sequence_6_bytes.json": "json.invalid_utf8",
    "i_string_overlong_sequence_6_bytes_null.json": "json.invalid_utf8",
    "i_string_truncated-utf-8.json": "json.invalid_utf8",
    "i_string_utf16BE_no_BOM.json": "json.invalid_utf8",
    "i_string_utf16LE_no_BOM.json": "json.invalid_utf8",
    "i_structure_500_nested_arrays.json": "json.too_deep",  # default limit 64
    "i_structure_UTF-8_BOM_empty_object.json": "json.syntax",
}


def _suite(conformance: Path, prefix: str) -> list[Path]:
    files = sorted((conformance / "json-parsing").glob(f"{prefix}_*.json"))
    assert files, "empty JSONTestSuite directory"
    return files


def _code(data: bytes) -> str | None:
    """The reason code for one suite file (a line is the file without a final newline)."""
    try:
        check_limits(parse_value(data), max_depth=64, max_items=10_000)
    except RejectLine as exc:
        return exc.reason.code
    return None


def test_every_y_file_parses(conformance: Path) -> None:
    for path in _suite(conformance, "y"):
        code = _code(path.read_bytes())
        if path.name in DUPLICATE_KEY_Y:
            assert code == "json.duplicate_key", path.name
        else:
            assert code is None, (path.name, code)


def test_every_n_file_is_rejected(conformance: Path) -> None:
    for path in _suite(conformance, "n"):
        assert _code(path.read_bytes()) is not None, path.name


def test_every_i_file_has_a_pinned_decision(conformance: Path) -> None:
    found = {p.name for p in _suite(conformance, "i")}
    assert found == set(I_DECISIONS), "a new i_ file needs a documented decision"
    for path in _suite(conformance, "i"):
        assert _code(path.read_bytes()) == I_DECISIONS[path.name], path.name


@pytest.mark.parametrize(
    ("line", "code"),
    [
        (b"", "line.blank"),
        (b"  \t\r", "line.blank"),
        (b'{"a":1,"a":1}', "json.duplicate_key"),
        (b'{"a":{"b":[{"c":1,"c":2}]}}', "json.duplicate_key"),
        (b'{"a":NaN}', "json.non_finite"),
        (b'{"a":-Infinity}', "json.non_finite"),
        (b'{"a":1e400}', "json.non_finite"),
        (b'{"a":-1e400}', "json.non_finite"),
        (b'{"a":9223372036854775808}', "json.number_range"),
        (b'{"a":-9223372036854775809}', "json.number_range"),
        (b'{"a":1e-400}', "json.number_range"),
        (b'{"a":"\\ud800"}', "json.invalid_surrogate"),
        (b'{"\\udc00":1}', "json.invalid_surrogate"),
        (b'{"a":"\xed\xa0\x80"}', "json.invalid_utf8"),  # UTF-8-encoded surrogate
        (b'{"a":"\xc0\xaf"}', "json.invalid_utf8"),  # overlong
        (b'\xef\xbb\xbf{"a":1}', "json.syntax"),  # BOM
        (b'{"a":1} {"b":2}', "json.syntax"),
        (b'{"a":1,}', "json.syntax"),
        (b'{"a":1} // c', "json.syntax"),
        (b'{"a":"x\ty"}', "json.syntax"),  # raw control character in a string
    ],
)
def test_reason_codes(line: bytes, code: str) -> None:
    with pytest.raises(RejectLine) as caught:
        parse_value(line)
    assert caught.value.reason.code == code


@pytest.mark.parametrize(
    ("line", "code", "detail"),
    [
        # not JSON, whatever the hooks met before the scanner stopped (issue: hooks raised)
        (b'{"problem":{"x":1,"x":2},"task_id":', "json.syntax", "Expecting value at column 36"),
        (b'{"problem":NaN,', "json.syntax", None),
        (b'{"problem":1e400,"task_id"', "json.syntax", None),
        (b'{"problem":123456789012345678901234,', "json.syntax", None),
        (b'{"problem":1e-400,]', "json.syntax", None),
        # several findings: the first of the documented order
        (b'{"task_id":"a","task_id":"b","problem":NaN}', "json.duplicate_key", None),
        (b"[99999999999999999999, NaN]", "json.non_finite", None),
        (b'{"a":"\\ud800","b":1e400}', "json.non_finite", None),
        # Python's message already ends in "at"
        (b'{"a":"x\x01"}', "json.syntax", "Invalid control character at column 8"),
    ],
)
def test_a_line_gets_the_first_reason_of_the_documented_order(
    line: bytes, code: str, detail: str | None
) -> None:
    with pytest.raises(RejectLine) as caught:
        parse_value(line)
    assert caught.value.reason.code == code
    if detail is not None:
        assert caught.value.reason.detail == detail


def _at_depth(frames: int, line: bytes) -> str:
    """The code the strict parser gives ``line`` when called ``frames`` frames deeper."""
    if frames:
        return _at_depth(frames - 1, line)
    try:
        parse_value(line)
    except RejectLine as exc:
        return exc.reason.code
    return "ok"


@pytest.mark.parametrize(
    "levels", [PARSER_DEPTH - 1, PARSER_DEPTH, PARSER_DEPTH + 1, 800, 975, 5000]
)
def test_deep_lines_get_one_code_however_deep_the_caller_is(levels: int) -> None:
    """A line nested ~950 levels was json.too_deep gated in the command's process and
    json.not_object in a worker: the scanner's recursion budget is what the caller's
    stack leaves. Beyond PARSER_DEPTH a line is json.too_deep before it is parsed."""
    for line in (
        b"[" * levels + b"]" * levels,
        b"[" * levels,
        b'{"a":' * levels + b"1" + b"}" * levels,
    ):
        found = {_at_depth(frames, line) for frames in (0, 150, 300)}
        assert len(found) == 1, (levels, found)
        if levels > PARSER_DEPTH:
            assert found == {"json.too_deep"}
    # brackets inside strings do not nest
    assert parse_value(b'{"a":"' + b"[" * 5000 + b'"}') == {"a": "[" * 5000}


@given(JSON_VALUES)
def test_the_depth_read_off_the_bytes_is_the_values_in_any_layout(value: object) -> None:
    """The depth bound reads a line's bytes without parsing it: for a JSON line it must
    be the value's depth, brackets and escaped quotes inside strings left out."""
    for line in (orjson.dumps(value), json.dumps(value).encode()):
        assert nesting_depth(line) == measure(value)[0]


def test_the_depth_of_a_hostile_line_is_read_in_linear_time() -> None:
    """An unclosed string of escaped quotes before many brackets: a regex over strings
    restarted at every quote (~8 s for 32 KB, hours for a megabyte). The brackets are
    inside the string, and the line is json.syntax."""
    line = b'["' + b'\\"' * 200_000 + b"[" * 600
    assert nesting_depth(line) == 1
    with pytest.raises(RejectLine) as caught:
        parse_value(line)
    assert caught.value.reason.code == "json.syntax"


def test_int64_bounds_are_inclusive() -> None:
    assert parse_value(b'{"a":9223372036854775807,"b":-9223372036854775808}') == {
        "a": 2**63 - 1,
        "b": -(2**63),
    }


@pytest.mark.parametrize("digits", [20, 4300, 4301, 5000, 100_000])
@pytest.mark.parametrize("sign", ["", "-"])
def test_huge_integers_are_out_of_range_not_a_crash(digits: int, sign: str) -> None:
    """An integer of 4301+ digits crashed the run: Python refuses to convert it
    (``sys.get_int_max_str_digits``) and the ValueError escaped as a traceback."""
    number = (sign + "9" * digits).encode()
    for line in (b'{"a":' + number + b"}", b'{"a": [1, {"b": ' + number + b"}]}"):
        with pytest.raises(RejectLine) as caught:
            parse_value(line)
        assert caught.value.reason.code == "json.number_range"
        assert parse_fast(line) is None  # orjson reads it as an infinite double: not proven


def test_zero_literals_are_not_underflow() -> None:
    assert parse_value(b'{"a":0.0,"b":-0e10,"c":0E-400}') == {"a": 0.0, "b": -0.0, "c": 0.0}


def test_escaped_surrogate_pair_is_valid() -> None:
    assert parse_value(b'{"a":"\\ud83d\\ude00","b":"\\\\ud800"}') == {"a": "😀", "b": "\\ud800"}


def test_not_object_and_limits() -> None:
    with pytest.raises(RejectLine) as caught:
        parse_object(b"[1,2]", 64, 100)
    assert caught.value.reason.code == "json.not_object"
    with pytest.raises(RejectLine) as caught:
        parse_object(b'{"a":' + b"[" * 5 + b"]" * 5 + b"}", 5, 100)
    assert caught.value.reason.code == "json.too_deep"
    assert parse_object(b'{"a":' + b"[" * 4 + b"]" * 4 + b"}", 5, 100)
    with pytest.raises(RejectLine) as caught:
        parse_object(b'{"a":[1,2,3,4]}', 64, 3)
    assert caught.value.reason.code == "json.too_many_items"
    with pytest.raises(RejectLine) as caught:
        parse_object(b"[" * 100_000, 64, 100)
    assert caught.value.reason.code in ("json.too_deep", "json.syntax")


def test_measure_convention() -> None:
    assert measure(1) == (0, 0)
    assert measure({}) == (1, 0)
    assert measure({"a": [1, 2, 3]}) == (2, 3)
    assert measure([[], {"a": {"b": 1}}]) == (3, 2)
    deep: list[object] = []
    for _ in range(4999):
        deep = [deep, 1]
    assert measure({"a": deep}) == (5001, 2)  # iterative: no recursion limit


def test_float_flag_tracks_number_literals() -> None:
    parser = StrictParser()
    parser.parse(b'{"a":1,"b":"1.5"}')
    assert not parser.saw_float
    parser.parse(b'{"a":1.0}')
    assert parser.saw_float


@given(JSON_VALUES)
def test_round_trip_of_valid_json(value: object) -> None:
    """Any value orjson writes (no duplicate keys, finite) parses back to itself."""
    line = orjson.dumps(value)
    assert parse_value(line) == json.loads(line)


@given(
    st.dictionaries(st.text(max_size=3), st.integers(-100, 100), min_size=1, max_size=4), st.data()
)
def test_duplicate_key_at_any_depth(obj: dict[str, int], data: st.DataObject) -> None:
    key = data.draw(st.sampled_from(sorted(obj)))
    body = orjson.dumps(obj)[:-1] + b"," + orjson.dumps(key) + b":0}"
    depth = data.draw(st.integers(0, 4))
    line = b'{"w":' * depth + body + b"}" * depth
    with pytest.raises(LocatedReject) as caught:
        parse_value(line)
    assert caught.value.reason.code == "json.duplicate_key"
    assert caught.value.location is not None  # issue 17: where, for the gate's safe path
    assert caught.value.location.parts == ("w",) * depth + (key,)


def test_fast_parser_takes_its_own_compact_form() -> None:
    value = {"b": [1, "\u00e9", {"c": None}], "a": True, "f": 1.5}
    assert parse_fast(orjson.dumps(value)) == value
    assert parse_fast(b'{"a":1,"a":2}') is None  # duplicate: re-serialises shorter
    assert parse_fast(b'{"a":"\\ud800"}') is None
    assert parse_fast(b'{"a":1e400}') is None
    assert parse_fast(b'{"a":1e-400}') is None  # underflow re-serialises as 0.0
    assert has_float({"a": [1, {"b": 2.0}]})
    assert not has_float({"a": [1, {"b": "2.0"}], "c": None})


def test_fast_parser_counts_members_in_other_layouts() -> None:
    """json.dumps' default layout takes the fast path; what the count cannot prove
    (a repeated key, an escaped colon, a float, an integer beyond int64) does not."""
    value = {"a:b": [1, "x: y", {"c": None}], "d": "\u00e9:"}
    for line in (json.dumps(value).encode(), json.dumps(value, indent=None).encode()):
        assert orjson.dumps(value) != line
        assert parse_fast(line) == value
    assert parse_fast(b'{"a": 1, "a": 2}') is None
    assert parse_fast(b'{"a": "x:y", "a": "z"}') is None  # the lost string's colon counts
    assert parse_fast(b'{"\\u0061": {"b": 1}, "a": 2}') is None  # a repeat spelled otherwise
    assert parse_fast(b'{"a": "\\u003a", "b": 1}') is None  # escaped colon: not counted
    assert parse_fast(b'{"a": 1, "a": 2, "b": "\\u003a"}') is None  # ...which would hide this
    assert parse_fast(b'{"a": 1.5}') is None
    assert parse_fast(b'{"a": 1e-400}') is None
    assert parse_fast(b'{"a": 18446744073709551615}') is None
    assert parse_fast(b'{"a": 100000000000000000000}') is None  # orjson: a float
    assert parse_fast(b'{"a": 9223372036854775807, "b": -0}') == {"a": 2**63 - 1, "b": 0}


def _layout(value: object, data: st.DataObject) -> str:
    """``value`` as JSON text with drawn whitespace, escapes and repeated keys."""
    space = st.sampled_from(["", " ", "  ", "\t", "\r"])
    if isinstance(value, dict):
        members = [(k, _layout(v, data)) for k, v in value.items()]
        if members and data.draw(st.integers(0, 3)) == 0:  # a repeated key, anywhere
            key = data.draw(st.sampled_from([k for k, _ in members]))
            at = data.draw(st.integers(0, len(members)))
            members.insert(at, (key, _layout(data.draw(JSON_VALUES), data)))
        body = ",".join(
            data.draw(space) + _layout(k, data) + data.draw(space) + ":" + data.draw(space) + v
            for k, v in members
        )
        return "{" + body + data.draw(space) + "}"
    if isinstance(value, list):
        return "[" + ",".join(data.draw(space) + _layout(v, data) for v in value) + "]"
    if isinstance(value, str):
        text = json.dumps(value, ensure_ascii=data.draw(st.booleans()))
        if data.draw(st.integers(0, 4)) == 0:
            text = text.replace(":", "\\u003a")
        return text
    return json.dumps(value)


# Objects whose strings and keys are rich in colons, quotes and backslashes, floats rarer.
_PUNCTUATED = st.text(st.sampled_from(':"\\ /aé\U0001f600\x1f'), max_size=6)
_LAYOUT_VALUES = st.recursive(
    st.none() | st.booleans() | INT64 | _PUNCTUATED | TEXT | st.just(0.5),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(_PUNCTUATED | KEYS, children, max_size=4)
    ),
    max_leaves=12,
)


@pytest.mark.slow
@settings(max_examples=400)
@given(st.dictionaries(_PUNCTUATED | KEYS, _LAYOUT_VALUES, min_size=1, max_size=5), st.data())
def test_fast_parser_agrees_with_the_strict_parser_in_any_layout(
    value: object, data: st.DataObject
) -> None:
    """Whatever the layout, a value the fast parser returns is the strict parser's, to
    the type (``1`` is not ``1.0``); a line it cannot prove is left to the strict one."""
    line = (_layout(value, data) + data.draw(st.sampled_from(["", " "]))).encode()
    fast = parse_fast(line)
    if fast is None:
        return
    assert orjson.dumps(fast) == orjson.dumps(parse_value(line)), line


@given(JSON_VALUES)
def test_fast_parser_agrees_with_the_strict_parser(value: object) -> None:
    line = orjson.dumps(value)
    fast = parse_fast(line)
    if fast is not None:
        assert fast == parse_value(line)


def test_fast_parser_never_disagrees_with_the_strict_one_on_the_suite(conformance: Path) -> None:
    """Every JSONTestSuite file, in its own layout and in json.dumps' (repeats kept): the
    fast parser returns the strict parser's value, to the type, or leaves the file to it.
    Integers beyond int64 in orjson's compact form are the caller's check (LONG_DIGITS),
    as in the gate."""
    taken = 0
    for path in sorted((conformance / "json-parsing").glob("*.json")):
        data = path.read_bytes()
        for line in {data, json_dumps_layout(data)}:
            fast = parse_fast(line)
            if fast is None or LONG_DIGITS.search(line):
                continue
            taken += 1
            assert orjson.dumps(fast) == orjson.dumps(parse_value(line)), path.name
    assert taken > 100  # the fast path was exercised, in both layouts


@pytest.mark.parametrize(
    ("line", "code", "parts"),
    [
        (b'{"a":1,"a":1}', "json.duplicate_key", ("a",)),
        (b'{"a":{"b":[{"c":1,"c":2}]}}', "json.duplicate_key", ("a", "b", 0, "c")),
        # the inner object closes first: the strict parser stops there
        (b'{"a":[7,{"b":1,"b":2}],"a":3}', "json.duplicate_key", ("a", 1, "b")),
        (b'{"a":{"b":NaN}}', "json.non_finite", ("a", "b")),
        (b"[1,[2,-Infinity]]", "json.non_finite", (1, 1)),
        (b'{"a":[1e400]}', "json.non_finite", ("a", 0)),
        # a line holding both is json.duplicate_key, the code checked first, though the
        # number is read before the object repeating its key closes
        (b'{"a":NaN,"a":1}', "json.duplicate_key", ("a",)),
        (b'{"a":1,"a":{"x":NaN}}', "json.duplicate_key", ("a",)),
        (b'{"a":1e400,"b":[{"c":1,"c":2}]}', "json.duplicate_key", ("b", 0, "c")),
    ],
)
def test_repeated_keys_and_non_finite_numbers_are_located(
    line: bytes, code: str, parts: tuple[str | int, ...]
) -> None:
    """Issue 17: json.duplicate_key and json.non_finite gave no path. The parser now
    says where it stopped (raw parts, for the gate to render safely with the schema)."""
    with pytest.raises(LocatedReject) as caught:
        parse_value(line)
    assert caught.value.reason.code == code
    assert caught.value.location is not None
    assert caught.value.location.parts == parts
