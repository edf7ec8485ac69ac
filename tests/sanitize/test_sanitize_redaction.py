"""Redaction of one string: overlap merge, priorities, full spans, tags, idempotence."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.sanitize.categories import TAG_PATTERN, Category, tag
from pipeline.sanitize.detectors import Detection, SecretNames, TextScanner
from pipeline.sanitize.policy import load_policy
from pipeline.sanitize.redaction import Redacted, merge, redact
from pipeline.sanitize.sanitizer import DEFAULT_POLICY
from pipeline.testing.synthetic import planted_secrets

SCANNER = TextScanner(
    frozenset(Category), ("US",), SecretNames(load_policy(DEFAULT_POLICY).secret_fields)
)


def _keep_all(text: str, found: list[Detection]) -> tuple[list[Detection], list[Detection]]:
    return found, []


def redact_text(text: str) -> Redacted | None:
    return redact(text, SCANNER.scan(text), SCANNER.scan, _keep_all, max_passes=4)


def sanitize(text: str) -> str:
    result = redact_text(text)
    return text if result is None else result.text


def test_clean_text_is_returned_untouched() -> None:
    assert redact_text("def unique(values):\n    return list(dict.fromkeys(values))") is None


def test_full_span_replacement_with_canonical_tags() -> None:
    text = "mail jane.roe@corp-mail.de, call (202) 555-0143, SSN 123-45-6789."
    assert sanitize(text) == (
        "mail [REDACTED_PII:EMAIL], call [REDACTED_PII:PHONE], SSN [REDACTED_PII:NATIONAL_ID]."
    )


def test_every_category_has_the_seed_tag() -> None:
    assert {tag(c) for c in Category} == {
        "[REDACTED_PII:EMAIL]",
        "[REDACTED_PII:PHONE]",
        "[REDACTED_PII:IPV4]",
        "[REDACTED_PII:IPV6]",
        "[REDACTED_PII:NATIONAL_ID]",
        "[REDACTED_PII:API_KEY]",
        "[REDACTED_PII:BEARER_TOKEN]",
    }


def test_credentials_win_overlaps_and_the_union_is_replaced() -> None:
    # The URL password overlaps an address-shaped "s3cret@db.internal": one span, the
    # credential's tag, nothing of either left.
    text = "dsn postgres://app:s3cret@db.internal/x"
    assert sanitize(text) == "dsn postgres://app:[REDACTED_PII:BEARER_TOKEN]/x"
    # An IPv4 inside an IPv4-mapped IPv6 literal: the more specific IPv6 wins.
    assert sanitize("from ::ffff:81.2.69.160 today") == "from [REDACTED_PII:IPV6] today"


def test_merge_priority_and_union() -> None:
    merged = merge(
        [
            Detection(5, 20, Category.PHONE),
            Detection(10, 30, Category.API_KEY),
            Detection(28, 40, Category.EMAIL),
            Detection(40, 45, Category.IPV4),  # touches, does not overlap
        ]
    )
    assert merged == [Detection(5, 40, Category.API_KEY), Detection(40, 45, Category.IPV4)]


@given(st.randoms(use_true_random=False))
def test_merge_is_independent_of_detection_order(rng: random.Random) -> None:
    detections = [
        Detection(s, s + rng.randint(1, 12), rng.choice(list(Category)), rng.random() < 0.8)
        for s in (rng.randint(0, 60) for _ in range(rng.randint(0, 12)))
    ]
    shuffled = list(detections)
    rng.shuffle(shuffled)
    assert merge(detections) == merge(shuffled)


def test_contributor_tags_are_not_receipts() -> None:
    # A typed tag does not vouch for the rest of the text...
    text = "[REDACTED_PII:EMAIL] jane.roe@corp-mail.de"
    result = redact_text(text)
    assert result is not None
    assert result.text == "[REDACTED_PII:EMAIL] [REDACTED_PII:EMAIL]"
    assert result.redacted == {Category.EMAIL: 1}  # only what the scan found counts
    # ... but stays as written, and so does anything tag-shaped.
    for typed in (
        "[REDACTED_PII:PHONE]",
        "[REDACTED_PII:FOO]",
        "[REDACTED_PII:EMAIL",
        "REDACTED_PII:API_KEY]",
    ):
        assert sanitize(f"see {typed} here") == f"see {typed} here"
    # A secret-named value that is already a tag is not redacted again.
    assert sanitize('password = "[REDACTED_PII:API_KEY]"') == 'password = "[REDACTED_PII:API_KEY]"'


def test_detection_overlapping_a_tag_covers_it_whole() -> None:
    text = "a [REDACTED_PII:EMAIL]xyz"
    result = redact(
        text,
        [Detection(10, 25, Category.API_KEY)],
        lambda t: [],
        _keep_all,
        max_passes=4,
    )
    assert result is not None
    assert result.text == "a [REDACTED_PII:API_KEY]"
    assert TAG_PATTERN.fullmatch(result.text[2:])


def test_replacement_can_expose_a_new_candidate_and_the_fixpoint_takes_it() -> None:
    calls = []

    def rescan(text: str) -> list[Detection]:
        calls.append(text)
        return [] if len(calls) > 1 else [Detection(0, 1, Category.PHONE)]

    result = redact("0123456789", [Detection(2, 5, Category.EMAIL)], rescan, _keep_all, 4)
    assert result is not None
    assert result.text == "[REDACTED_PII:PHONE]1[REDACTED_PII:EMAIL]56789"
    assert result.redacted == {Category.EMAIL: 1, Category.PHONE: 1}
    assert result.stable


def test_a_string_that_never_settles_is_reported_unstable() -> None:
    def rescan(text: str) -> list[Detection]:  # always one more character to take
        inside = {i for m in TAG_PATTERN.finditer(text) for i in range(*m.span())}
        start = next(i for i in range(len(text)) if i not in inside)
        return [Detection(start, start + 1, Category.PHONE)]

    result = redact("abcdef", rescan("abcdef"), rescan, _keep_all, max_passes=3)
    assert result is not None
    assert not result.stable


# -- idempotence, property-tested --------------------------------------------------------

# Values that identify themselves; a bare bearer token or password is only recognisable
# from its context ("Bearer …", "password = …"), which the fragments below provide.
_SECRETS = [
    v
    for i in range(3)
    for k, v in planted_secrets(random.Random(i), i).items()
    if k not in ("bearer", "password")
]
_FRAGMENTS = st.sampled_from(
    [
        *_SECRETS,
        "Bearer ",
        "Authorization: ",
        'password = "',
        '"',
        "API_KEY=",
        "SSN ",
        "call ",
        "@",
        ".",
        ":",
        "::",
        "-",
        " ",
        "\n",
        "(",
        ")",
        "+1 ",
        "202",
        "555",
        "0143",
        "2024-01-15",
        "task-0001234",
        "v1.2.3.4",
        "192.0.2.1",
        "jane@example.com",
        "[REDACTED_PII:EMAIL]",
        "[REDACTED_PII:PHONE",
        "REDACTED_PII:API_KEY]",
        "sk-",
        "ghp_",
        "AKIA",
        "eyJ",
        "://u:",
        "数据",
        "🙂",
    ]
)
TEXTS = st.lists(st.one_of(_FRAGMENTS, st.text(max_size=6)), max_size=14).map("".join)


@settings(max_examples=300, deadline=None)
@given(TEXTS)
def test_sanitize_is_idempotent(text: str) -> None:
    once = redact_text(text)
    if once is None:
        return
    if not once.stable:
        # only a chain longer than the passes (each item found once the one before it
        # became a tag) may be unstable: more passes reach the fixpoint
        assert redact(text, SCANNER.scan(text), SCANNER.scan, _keep_all, max_passes=16).stable
        return
    assert sanitize(once.text) == once.text
    assert not SCANNER.scan(once.text)  # nothing left to find


def test_a_chain_longer_than_the_passes_is_unstable_but_leaves_nothing_found() -> None:
    """Five numbers, each found only once the one before it became a tag (a phone's
    digits run into the next): four passes do not reach the fixpoint, so the string is
    reported unstable (its record is quarantined), and what the last scan found is
    redacted too: a quarantined record is stored. Found by Hypothesis; before, the fifth
    (an IPv6 address without its first digit) stayed in the text."""
    text = "+1 415-555-9522+1 415-555-95222a00:1450:45bf::2807+1 415-555-95222a00:1450:45bf::2807"
    once = redact_text(text)
    assert once is not None
    assert not once.stable
    assert "1450" not in once.text
    assert not SCANNER.scan(once.text)
    assert redact(text, SCANNER.scan(text), SCANNER.scan, _keep_all, max_passes=5).stable


def _delimited(text: str, secret: str) -> bool:
    start = text.index(secret)
    end = start + len(secret)
    before = text[start - 1] if start else " "
    after = text[end] if end < len(text) else " "
    return not (before.isalnum() or before in "_-.+@:/") and not (
        after.isalnum() or after in "_-.@:/"
    )


@settings(max_examples=300, deadline=None)
@given(TEXTS)
def test_no_delimited_planted_secret_survives(text: str) -> None:
    """A planted value with a non-word character (or nothing) on each side is always
    redacted; glued to other text it may read as something else (a longer number)."""
    out = sanitize(text)
    for secret in _SECRETS:
        if text.count(secret) == 1 and _delimited(text, secret):
            assert secret not in out, (secret, text)


@pytest.mark.parametrize(
    "text",
    ["(+1 415-555-9522", "(+1 415-555-9522)", "call (+1 415-555-9522).", "+1 +1 415-555-9522"],
)
def test_international_phone_after_a_paren_or_a_plus_is_redacted(text: str) -> None:
    """Regression (found by hypothesis): a run was looked for from the '(' or an earlier
    '+', where the phone pattern cannot match, so the number itself was never tried."""
    out = sanitize(text)
    assert "415-555-9522" not in out
    assert "[REDACTED_PII:PHONE]" in out


@pytest.mark.parametrize("glue", ["(", ")", "(202", ")202", "(202) x", "((("])
def test_phone_glued_to_digits_by_a_parenthesis_is_redacted(glue: str) -> None:
    """Regression (found by hypothesis): runs were cut at whitespace only, so
    "+1 415-555-9522(202" was one 13-digit chunk no phone number validates, and the
    number was stored as written."""
    out = sanitize(f"+1 415-555-9522{glue}")
    assert "415-555-9522" not in out
    assert out.startswith("[REDACTED_PII:PHONE]")


def test_phone_followed_by_a_delimiter_and_a_word_is_redacted() -> None:
    """Regression (found by hypothesis): "9522(" then a word used to count as glued."""
    assert "415-555-9522" not in sanitize("+1 415-555-9522(REDACTED_PII:API_KEY]")


@pytest.mark.parametrize("mark", ["\u0301", "\u0301\u0323", "\ufe0f", "\u20dd", "\u0903"])
def test_combining_marks_after_a_value_are_redacted_with_it(mark: str) -> None:
    # Red team: "alice@gmail.com\u0301" became "[REDACTED_PII:EMAIL]\u0301" (the accent of
    # the value's last character left on the tag). Marks before a value are not its own.
    text = f"cafe\u0301 alice@gmail.com{mark} or call 202-555-0143{mark}, ok{mark}"
    expected = f"cafe\u0301 [REDACTED_PII:EMAIL] or call [REDACTED_PII:PHONE], ok{mark}"
    assert sanitize(text) == expected
    assert sanitize(expected) == expected
