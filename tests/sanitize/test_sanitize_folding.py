"""Unicode spellings of a value: fullwidth forms, other digits, invisible characters."""

from __future__ import annotations

import random
import sys
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.records.schemas import SchemaRegistry
from pipeline.sanitize import Sanitizer, load_policy
from pipeline.sanitize.folding import fold
from pipeline.sanitize.policy import DEFAULT_POLICY
from pipeline.testing.synthetic import make_record
from tests.sanitize.test_sanitize_detectors import NAMES, SCANNER, found

SANITIZER = Sanitizer(load_policy(DEFAULT_POLICY))
MATH = SANITIZER.for_kind("math-reasoning-v1", SchemaRegistry().get("math-reasoning-v1"))


@pytest.mark.parametrize(
    ("text", "category", "expected"),
    [
        # red team: each kept as written, no pii.* reason
        ("mail alice.smith＠gmail.com", "email", "alice.smith＠gmail.com"),
        ("Call ２０２-５５５-０１４３", "phone", "２０２-５５５-０１４３"),
        ("My SSN is １２３-４５-６７８９", "national_id", "１２３-４５-６７８９"),
        ("Call ٢٠٢٥٥٥٠١٤٣", "phone", "٢٠٢٥٥٥٠١٤٣"),
        ("mail alice.smith\u200b@gmail.com", "email", "alice.smith\u200b@gmail.com"),
        ("mail alice.smith\u00ad@gmail.com", "email", "alice.smith\u00ad@gmail.com"),
        ("Call 202\u200b555\u200b0143", "phone", "202\u200b555\u200b0143"),
        # the same idea, elsewhere
        ("Call 202–555–0143", "phone", "202–555–0143"),  # en dashes
        ("Call ۲۰۲-۵۵۵-۰۱۴۳", "phone", "۲۰۲-۵۵۵-۰۱۴۳"),  # Persian digits
        ("mail ａｌｉｃｅ＠ｇｍａｉｌ．ｃｏｍ now", "email", "ａｌｉｃｅ＠ｇｍａｉｌ．ｃｏｍ"),
        ("at ８.８.８.８ now", "ipv4", "８.８.８.８"),
        ('ｐａｓｓｗｏｒｄ = "hunter2"', "api_key", "hunter2"),
        ("key sk-proj-abc123DEF456\u2060ghi789JKL012mno", "api_key", None),
    ],
)
def test_unicode_spellings_are_detected_where_they_are_written(
    text: str, category: str, expected: str | None
) -> None:
    spans = [(c, value) for c, value in found(text) if c == category]
    if expected is None:
        expected = text.split(" ", 1)[1]
    assert (category, expected) in spans


def test_a_span_covers_whole_characters() -> None:
    # U+248F reads "8.": the address ends inside it, so the whole character is redacted.
    assert found("ip 8.8.8.⒏ x") == [("ipv4", "8.8.8.⒏")]
    assert ("ipv4", "⒏⒏⒏8") in found("ip ⒏⒏⒏8")


def test_folded_names_are_secret_names() -> None:
    assert NAMES.is_secret("ｐａｓｓｗｏｒｄ")
    assert NAMES.is_secret("db_pass\u200bword")
    assert not NAMES.is_secret("ｍａｘ_ｔｏｋｅｎｓ")


def test_records_are_redacted_exactly_and_stay_redacted() -> None:
    record = make_record("math-reasoning-v1", random.Random(0), 0)
    record["problem"] = "Ask alice.smith＠gmail.com or call ２０２-５５５-０１４３ (x\u200by)."
    record["assumptions"] = ["ssn １２３-４５-６７８９", "⒏⒏⒏8"]
    result = MATH.inspect(record)
    assert not result.problems
    assert result.record["problem"] == (
        "Ask [REDACTED_PII:EMAIL] or call [REDACTED_PII:PHONE] (x\u200by)."
    )
    assert result.record["assumptions"] == ["ssn [REDACTED_PII:NATIONAL_ID]", "[REDACTED_PII:IPV4]"]
    again = MATH.inspect(result.record)
    assert again.record is result.record
    assert not again.redacted


def test_a_folded_secret_name_makes_its_value_a_secret() -> None:
    kind = "pw-decide-row-1"
    record = make_record(kind, random.Random(0), 0)
    record["meta"] = {"ｐａｓｓｗｏｒｄ": "hunter2", "api\u200b_key": "k"}
    result = SANITIZER.for_kind(kind, SchemaRegistry().get(kind)).inspect(record)
    assert result.record["meta"] == {
        "ｐａｓｓｗｏｒｄ": "[REDACTED_PII:API_KEY]",
        "api\u200b_key": "[REDACTED_PII:API_KEY]",
    }


def test_text_that_needs_no_folding_is_not_folded() -> None:
    assert fold("plain ASCII text, 202-555-0143") is None
    assert fold("café 数据 Ünïcödé 🙂") is None
    assert SCANNER.scan("café 数据 Ünïcödé 🙂") == []


def test_every_dash_folds_to_a_hyphen() -> None:
    dashes = [chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Pd"]
    for dash in dashes:
        if dash != "-":
            view = fold(f"1{dash}2")
            assert view is not None, hex(ord(dash))
            assert view.text == "1-2", hex(ord(dash))


@pytest.mark.parametrize("stop", ["\u3002", "\uff0e", "\uff61"])
def test_ideographic_full_stops_are_a_mail_domains_dots(stop: str) -> None:
    """IDNA reads U+3002, U+FF0E and U+FF61 in a domain as dots; NFKC keeps U+3002 (and
    makes U+FF61 one), so 'alice@gmail。com' was stored as written. An exception's
    domain is read through them too: 'user@example。com' stays."""
    written = f"alice@gmail{stop}com"
    assert ("email", written) in found(f"mail {written} now")
    record = make_record("math-reasoning-v1", random.Random(0), 0)
    record["problem"] = f"Mail {written} or user@example{stop}com."
    result = MATH.inspect(record)
    assert result.record["problem"] == f"Mail [REDACTED_PII:EMAIL] or user@example{stop}com."


def test_a_sentences_ideographic_full_stop_folds_nothing() -> None:
    """A Japanese or Chinese sentence ends with U+3002: only one in a domain (after '@'
    and a label) folds the text."""
    assert fold("今日は晴れです。明日は雨が降るでしょう。") is None
    assert fold("メールは alice@gmail。com まで。") is not None


@pytest.mark.parametrize(
    ("text", "category", "value"),
    [
        ("mail jose\u0301@gmail.com now", "email", "jose\u0301@gmail.com"),
        ("mail jo\u0301se\u0300@gmail.com now", "email", "jo\u0301se\u0300@gmail.com"),
        ("mail alice@gma\u0301il.com now", "email", "alice@gma\u0301il.com"),
        ("Call 202\u0301-555-0143 now", "phone", "202\u0301-555-0143"),
        ("Call 202-\u20dd555-0143 now", "phone", "202-\u20dd555-0143"),
        ("SSN 123-4\u1dc05-6789 here", "national_id", "123-4\u1dc05-6789"),
    ],
)
def test_combining_diacritics_inside_a_value_are_read_through(
    text: str, category: str, value: str
) -> None:
    """A decomposed accent inside a value hid it ('jose\u0301@gmail.com' stayed as
    written) or cut it ('Call 202\u0301-555-0143' kept '202\u0301-'): the folded view
    drops the combining diacritics where one stands inside a value, and the detection
    covers the value as written."""
    assert (category, value) in found(text)
    record = make_record("math-reasoning-v1", random.Random(0), 0)
    record["problem"] = text
    redacted = MATH.inspect(record).record["problem"]
    assert redacted == text.replace(value, f"[REDACTED_PII:{category.upper()}]")


def test_marks_of_words_fold_nothing() -> None:
    """Devanagari's vowel signs and Arabic's harakat are letters of their words, and an
    accent in a word is no value: none of these texts is folded (scanned twice)."""
    for text in (
        "यह एक परीक्षण वाक्य है जिसमें मात्राएँ हैं, जैसे कि विद्यालय। alice@gmail.com 2025",
        "هَذِهِ جُمْلَةٌ تَجْرِيبِيَّةٌ مَعَ الحَرَكَاتِ alice@gmail.com 2025",
        unicodedata.normalize("NFD", "Le café était très agréable, appelez le 01 42 68 53 00"),
        "Tiếng Việt có nhiều dấu thanh, 2025",
    ):
        assert fold(text) is None, text


_WIDE = {chr(c): chr(c + 0xFEE0) for c in range(0x21, 0x7F)}  # ASCII → fullwidth
_INVISIBLE = ["\u200b", "\u200c", "\u200d", "\u2060", "\u00ad", "\ufeff"]
_VALUES = [
    ("email", "alice.smith@gmail.com"),
    ("phone", "(202) 555-0143"),
    ("national_id", "123-45-6789"),
    ("ipv4", "81.2.69.160"),
]


@settings(max_examples=200)
@given(
    which=st.sampled_from(_VALUES),
    disguises=st.lists(st.tuples(st.integers(0, 40), st.booleans(), st.integers(0, 5))),
)
def test_a_disguised_value_is_found_whole(
    which: tuple[str, str], disguises: list[tuple[int, bool, int]]
) -> None:
    """Any mix of fullwidth characters and invisible ones inside a value: the detection
    covers the value as written, every character of it."""
    category, value = which
    chars = list(value)
    for position, wide, invisible in disguises:
        i = position % len(chars)
        if wide:
            chars[i] = "".join(_WIDE.get(c, c) for c in chars[i])
        else:
            chars[i] = chars[i] + _INVISIBLE[invisible]
    written = "".join(chars).rstrip("".join(_INVISIBLE))
    text = f"reach {written} today"
    spans = {(d.start, d.end) for d in SCANNER.scan(text) if d.category.value == category}
    start = text.index(written)
    assert any(s <= start and start + len(written) <= e for s, e in spans), spans


def test_a_dash_is_folded_only_beside_a_digit() -> None:
    """Prose writes em dashes; folding every text holding one scanned most model output
    twice. A dash can join a number only beside a digit."""
    assert fold("this — that, and “quotes”") is None
    assert fold("Call 202—555—0143") is not None
    assert ("phone", "202—555—0143") in found("Call 202—555—0143 now")
