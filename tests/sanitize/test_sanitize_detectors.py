"""Detectors, per category: positives, look-alike negatives, context, adversarial inputs."""

from __future__ import annotations

import time

import phonenumbers
import pytest

from pipeline.sanitize.categories import Category
from pipeline.sanitize.detectors import (
    PARSE_BUDGET,
    SecretNames,
    TextScanner,
    is_placeholder,
    valid_cpf,
    valid_dni,
    valid_ssn,
)
from pipeline.sanitize.policy import load_policy
from pipeline.sanitize.sanitizer import DEFAULT_POLICY

NAMES = SecretNames(load_policy(DEFAULT_POLICY).secret_fields)
SCANNER = TextScanner(frozenset(Category), ("US",), NAMES)


def found(text: str) -> list[tuple[str, str]]:
    """(category, matched text) of every detection, sorted by position."""
    return [
        (d.category.value, text[d.start : d.end])
        for d in sorted(SCANNER.scan(text), key=lambda d: (d.start, d.end, d.category))
    ]


def categories(text: str) -> set[str]:
    return {c for c, _ in found(text)}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("write to jane.roe@corp-mail.de today", "jane.roe@corp-mail.de"),
        ("<first.last+tag@sub.example-corp.co.uk>", "first.last+tag@sub.example-corp.co.uk"),
        ("mailto:ops@mycompany.io.", "ops@mycompany.io"),
        # internationalised (RFC 6531 local part, IDN domain and TLD)
        ("contact 用户@例子.广告 please", "用户@例子.广告"),
        ("écrire à josé.müller@bücher.de", "josé.müller@bücher.de"),
        ("punycode a@xn--bcher-kva.example-tld.xn--p1ai", "a@xn--bcher-kva.example-tld.xn--p1ai"),
        # a trailing label that cannot end a domain is cut off, the address still found
        ("see a@corp-mail.com.1 now", "a@corp-mail.com"),
        # an underscore inside a domain's label (no host name, but real mail domains)
        ("mail a@foo_bar.com now", "a@foo_bar.com"),
        ("mail j.roe@mail_srv.corp-mail.de.", "j.roe@mail_srv.corp-mail.de"),
        ("mail a@foo_bar.com_x", "a@foo_bar.com"),  # a top-level label holds none
    ],
)
def test_email_positives(text: str, expected: str) -> None:
    assert ("email", expected) in found(text)


@pytest.mark.parametrize(
    "text",
    [
        "npm install lodash@4.17.21",  # package@version
        "icon@2x.png and logo@3x.png",  # retina asset names
        "@property\ndef name(self): ...",  # decorators
        "a@b is not an address, nor is a@b.c",  # no dot / one-letter TLD
        "x@-bad-.com",
        "user..name@corp-mail.de",  # consecutive dots in the local part
        "a" * 65 + "@corp-mail.de",  # local part longer than 64
        "foo@bar and a@foo_bar",  # no dot and top-level label, underscores or not
        "a@__init__.py",  # a label neither starts nor ends with '_'
    ],
)
def test_email_negatives(text: str) -> None:
    assert "email" not in categories(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("call (202) 555-0143 today", "(202) 555-0143"),
        ("call +44 20 7946 0958.", "+44 20 7946 0958"),
        ("tel:+14155552671", "+14155552671"),
        ("office 415.555.2671", "415.555.2671"),
        ("+33 1 42 68 53 00 is Paris", "+33 1 42 68 53 00"),
        # adjacent numbers in one run of digits and spaces are cut apart
        ("202 555 0143 12 items", "202 555 0143"),
        ("12 202 555 0143", "202 555 0143"),
        ("电话：202-555-0143", "202-555-0143"),
        # a parenthesis glued to other digits cuts the run too; "(0)1" is one group
        ("+1 415-555-9522(202", "+1 415-555-9522"),
        ("+1 415-555-9522)202 x", "+1 415-555-9522"),
        ("ref 202)415-555-9522", "415-555-9522"),
        ("+33(0)1 42 68 53 00 is Paris", "+33(0)1 42 68 53 00"),
    ],
)
def test_phone_positives(text: str, expected: str) -> None:
    assert ("phone", expected) in found(text)


@pytest.mark.parametrize(
    "text",
    [
        "released 2024-01-15 at 10:30",  # ISO date
        "on 15.01.2024 we shipped",  # European date
        "task-2025550143 failed",  # a task id with a dialable-looking number
        "order #2025550143",
        "id 2025550143x",
        "timestamp 1700000000000",
        "pi is 3.14159265358979",
        "version 10.0.19041.1234",
        "counts 1 2 3 4 5 6 7 8 9",
    ],
)
def test_phone_negatives(text: str) -> None:
    assert "phone" not in categories(text)


def test_phone_candidates_are_validated_by_phonenumbers() -> None:
    # 555-0100..0199 are fictional *and* 123 is no US area code: rejected by validation.
    assert not phonenumbers.is_valid_number(phonenumbers.parse("123-456-7890", "US"))
    assert "phone" not in categories("dial 123-456-7890")


def test_phone_invalid_in_context_is_uncertain() -> None:
    [d] = SCANNER.scan("call me: 555 1234 567")
    assert d.category is Category.PHONE
    assert not d.certain


@pytest.mark.parametrize(
    ("text", "category", "expected"),
    [
        ("Contact _alice.smith@gmail.com_ now", "email", "alice.smith@gmail.com"),
        ("__alice.smith@gmail.com__", "email", "alice.smith@gmail.com"),
        ("alice.smith@gmail.com_ ok", "email", "alice.smith@gmail.com"),
        ("Contact _a@foo_bar.com_ now", "email", "a@foo_bar.com"),
        ("mail _alice@gmail.com today", "email", "_alice@gmail.com"),  # '_' starts a local part
        ("Call _202-555-0143_ today", "phone", "202-555-0143"),
        ("Call __202 555 0143__ today", "phone", "202 555 0143"),
        ("SSN _123-45-6789_", "national_id", "123-45-6789"),
        ("ssn _078051121_", "national_id", "078051121"),  # undashed, after the word
        ("SSN: __078 05 1121__", "national_id", "078 05 1121"),
        ("cpf _11144477735_", "national_id", "11144477735"),
        ("CPF __111.444.777-35__", "national_id", "111.444.777-35"),
        ("DNI _12345678Z_", "national_id", "12345678Z"),
        ("at _8.8.8.8_ now", "ipv4", "8.8.8.8"),
        ("at _2001:4860:4860::8888_ now", "ipv6", "2001:4860:4860::8888"),
    ],
)
def test_markdown_emphasis_underscores_are_not_part_of_a_value(
    text: str, category: str, expected: str
) -> None:
    # Red team: "_alice.smith@gmail.com_" kept its address (the domain read "com_", no
    # TLD) and "_202-555-0143_" its number (glued to an identifier by the underscore).
    assert found(text) == [(category, expected)]


@pytest.mark.parametrize(
    "text",
    [
        "task_2025550143 x",
        "id 2025550143_x",
        "ref x__123-45-6789",
        "v_8.8.8.8",
        "ssn_078051121",
        "ssn _078051121_x",
        "cpf_11144477735",
        "ref _078051121_",  # nine digits are an SSN only after the word
    ],
)
def test_underscores_between_words_still_glue_an_identifier(text: str) -> None:
    assert found(text) == []


@pytest.mark.parametrize(
    ("text", "category", "expected"),
    [
        ("server at 8.8.8.8, port 53", "ipv4", "8.8.8.8"),
        ("from 81.2.69.160.", "ipv4", "81.2.69.160"),
        ("v6 2001:4860:4860::8888 is public", "ipv6", "2001:4860:4860::8888"),
        ("link-local fe80::1ff:fe23:4567:890a%eth0", "ipv6", "fe80::1ff:fe23:4567:890a"),
        ("[2a00:1450:4001:82b::200e]:443", "ipv6", "2a00:1450:4001:82b::200e"),
        ("mapped ::ffff:81.2.69.160", "ipv6", "::ffff:81.2.69.160"),
    ],
)
def test_ip_positives(text: str, category: str, expected: str) -> None:
    assert (category, expected) in found(text)


@pytest.mark.parametrize(
    "text",
    [
        "version 1.2.3.4 of the tool",  # a version, by context
        "pip install pkg==1.2.3.4",
        "v1.2.3.4",
        "1.2.3 and 1.2.3.4.5",  # three parts; five parts
        "256.1.1.1 and 01.2.3.4",  # out of range; leading zero
        "x[1::2] and a[::3]",  # Python slices
        "std::vector, crate::io",  # scope operators
        "12:30:45 and aa:bb:cc:dd:ee:ff",  # a time; a MAC address
    ],
)
def test_ip_negatives(text: str) -> None:
    assert not categories(text) & {"ipv4", "ipv6"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("SSN 123-45-6789", "123-45-6789"),
        ("ssn: 078051121", "078051121"),  # undelimited, only after the word
        ("social security number 219 09 9998", "219 09 9998"),
        ("CPF 111.444.777-35", "111.444.777-35"),
        ("cpf: 11144477735", "11144477735"),
        ("DNI 12345678Z", "12345678Z"),
        ("NIE X1234567L", "X1234567L"),
        ("nie Y-1234567-X", "Y-1234567-X"),
    ],
)
def test_national_id_positives(text: str, expected: str) -> None:
    assert ("national_id", expected) in found(text)


@pytest.mark.parametrize(
    "digits",
    ["000123456", "666123456", "900123456", "999123456", "123004567", "123450000"],
)
def test_ssn_invalid_ranges(digits: str) -> None:
    assert not valid_ssn(digits)
    dashed = f"{digits[:3]}-{digits[3:5]}-{digits[5:]}"
    assert "national_id" not in categories(f"ticket {dashed} closed")
    # With the word in front it is personal data typed wrong: redacted, but uncertain.
    [d] = SCANNER.scan(f"SSN: {dashed}")
    assert not d.certain


def test_checksums() -> None:
    assert valid_cpf("11144477735")
    assert not valid_cpf("11144477736")
    assert not valid_cpf("11111111111")  # all-equal digits are never issued
    assert valid_dni("12345678Z")
    assert not valid_dni("12345678A")
    assert valid_dni("X1234567L")
    assert valid_ssn("123456789")


@pytest.mark.parametrize(
    "text",
    [
        "build 12345678A",  # DNI shape, wrong letter, no context
        "ref 111.444.777-36",  # CPF shape, wrong check digits
        "serial 12345678",
        "sha 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    ],
)
def test_national_id_negatives(text: str) -> None:
    assert "national_id" not in categories(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("key sk-proj-abc123DEF456ghi789JKL012mno", "sk-proj-abc123DEF456ghi789JKL012mno"),
        ("sk-ant-api03-AbCdEf0123456789AbCdEf01", "sk-ant-api03-AbCdEf0123456789AbCdEf01"),
        ("token ghp_" + "a1B2" * 9, "ghp_" + "a1B2" * 9),
        ("github_pat_11ABCDEFG0123456789_abcdefghij", "github_pat_11ABCDEFG0123456789_abcdefghij"),
        ("id AKIAIOSFODNN7EXAMPLE here", "AKIAIOSFODNN7EXAMPLE"),
        ("sts ASIAY34FZKBOKMUTVV7A", "ASIAY34FZKBOKMUTVV7A"),
        ("stripe sk_live_4eC39HqLyjWDarjtT1zdp7dc", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
        ("slack xoxb-123456789012-abcdefABCDEF", "xoxb-123456789012-abcdefABCDEF"),
        ("AIzaSyA1234567890abcdefghijklmnopqrstuv", "AIzaSyA1234567890abcdefghijklmnopqrstuv"),
        # secret-named assignments: quoted anywhere, unquoted as NAME=value or a header
        ('password = "hunter2"', "hunter2"),
        ("{'client_secret': 'abc'}", "abc"),
        ('"apiKey": "k-93jd8"', "k-93jd8"),
        ("export OPENAI_API_KEY=abc123xyz789", "abc123xyz789"),
        ("https://x.test/cb?access_token=ya29a0AfH6SM", "ya29a0AfH6SM"),
        ("X-Api-Key: 9f8e7d6c5b4a", "9f8e7d6c5b4a"),
    ],
)
def test_api_key_positives(text: str, expected: str) -> None:
    assert ("api_key", expected) in found(text)


@pytest.mark.parametrize(
    "text",
    [
        "task-sk-0001 and sk-learn-pipeline-cookbook-v",  # inside ids; a slug
        "AKIAIOSFODNN7EXAMPLEX",  # 21 characters: not an access key id
        "token = next(tokens)",  # code, not a value
        "password = get_password()",
        'api_key = os.environ["API_KEY"]',
        'token: "${GITHUB_TOKEN}"',  # a reference, not a secret
        'password = "****"',
        "max_tokens=4096 token_type=bearer",  # not secret names
        "api_key: SecretStr",  # a type annotation
    ],
)
def test_api_key_negatives(text: str) -> None:
    assert "api_key" not in categories(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Authorization: Bearer abc.DEF-123_xyz", "abc.DEF-123_xyz"),
        ('headers={"authorization": "bearer Zm9vYmFyYmF6"}', "Zm9vYmFyYmF6"),
        ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA=="),
        ("curl -H 'Authorization: token 4f9a1c0b7e'", "4f9a1c0b7e"),
        (
            "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.sflKxwRJSMeKKF2QT4fwpMeJf36POk6y",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.sflKxwRJSMeKKF2QT4fwpMeJf36POk6y",
        ),
        ("postgres://app:s3cr3t-Pw@db.internal:5432/x", "s3cr3t-Pw"),
    ],
)
def test_bearer_positives(text: str, expected: str) -> None:
    assert ("bearer_token", expected) in found(text)


@pytest.mark.parametrize(
    "text",
    [
        "Bearer tokens are sent in a header",
        "use bearer authentication",
        'headers = {"Authorization": f"Bearer {token}"}',
        "postgres://app:${PASSWORD}@db/x",
        "https://example.org/path:with:colons@x",
    ],
)
def test_bearer_negatives(text: str) -> None:
    assert "bearer_token" not in categories(text)


def test_secret_names() -> None:
    secret = NAMES.is_secret
    assert all(map(secret, ["api_key", "apiKey", "X-Api-Key", "github_token", "DB_PASSWORD"]))
    assert not any(map(secret, ["max_tokens", "token_type", "tokenizer", "monkey", "keys"]))


def test_placeholders_and_tags() -> None:
    assert is_placeholder("")
    assert is_placeholder("********")
    assert is_placeholder("${API_KEY}")
    assert is_placeholder("<your key here>")
    assert is_placeholder("[REDACTED_PII:API_KEY]")
    assert not is_placeholder("hunter2")
    assert SCANNER.scan("[REDACTED_PII:EMAIL] [REDACTED_PII:PHONE]") == []


# -- adversarial inputs: every pattern stays linear ------------------------------------

ADVERSARIAL = {
    "word run": "a" * 300_000,
    "word run then at": "a" * 300_000 + "@",
    "dotted local": "a." * 150_000 + "@x",
    "dotted domain": "x@" + "a." * 150_000,
    "many ats": "a@b." * 75_000,
    "digits": "1" * 300_000,
    "digit groups": "12 " * 100_000,
    "phone pairs": "(202) 555-01 " * 30_000,
    "dotted digits": "1." * 150_000,
    "dashes": "1-" * 150_000,
    "colons": ":" * 300_000,
    "hex colons": "a:" * 150_000,
    "double colons": "1::" * 100_000,
    "key prefixes": "sk-" * 100_000,
    "key bodies": "sk-" + "a" * 300_000,
    "aws": "AKIA" * 75_000,
    "bearer": "Bearer " * 45_000,
    "bearer body": "Bearer " + "a1" * 150_000,
    "assignments": "token=" * 50_000,
    "quotes": 'password="' * 30_000,
    "urls": "://a:" * 60_000,
    "jwt": "eyJ" * 100_000,
    "ssn words": "ssn " * 75_000,
    "tags": "[REDACTED_PII:EMAIL]" * 15_000,
    "unicode": "数据🙂" * 100_000,
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_adversarial_inputs_finish_quickly(name: str) -> None:
    """Inputs of ~300 KB shaped to trigger backtracking; a quadratic or exponential
    pattern would take minutes to hours here. The bound is generous (not a benchmark)."""
    text = ADVERSARIAL[name]
    started = time.perf_counter()
    SCANNER.scan(text)
    assert time.perf_counter() - started < 10


def test_phone_parse_budget_turns_into_uncertainty() -> None:
    text = " ".join(f"(212) 55{n % 10}-01{n % 100:02d} x" for n in range(PARSE_BUDGET * 2))
    detections = [d for d in SCANNER.scan(text) if d.category is Category.PHONE]
    assert detections
    assert any(not d.certain for d in detections) or len(detections) <= PARSE_BUDGET


def test_a_name_with_no_last_word_searches_for_nothing() -> None:
    """An empty search word is found at every byte: ``secret_fields = [""]`` spun for ever
    (the policy loader refuses it now; the detectors never search for it either)."""
    from pipeline.sanitize.detectors import SecretNames

    assert SecretNames(["", "api_key", "token_"]).triggers == (b"key",)
