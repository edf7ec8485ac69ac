"""Sanitizing records: field selection, secret-named fields, authorised exceptions,
re-validation and quarantine, policy errors, the gate's two paths."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.config import CampaignConfig, ConfigError, SanitizeSettings, load_campaign
from pipeline.core.reasons import Disposition
from pipeline.gate.gate import Gate
from pipeline.gate.reader import LineBatch
from pipeline.kinds import KINDS
from pipeline.records.schemas import SchemaRegistry
from pipeline.sanitize import Category, Sanitizer, load_policy
from pipeline.sanitize.detectors import SecretNames
from pipeline.sanitize.policy import DEFAULT_POLICY
from pipeline.testing.synthetic import DEFECTS, GENERATORS, defect_line, make_record, plant_pii

EXAMPLE = json.loads(
    (Path(__file__).resolve().parents[1] / "fixtures" / "seed000_annotation.json").read_text(
        "utf-8"
    )
)
REGISTRY = SchemaRegistry()
DEFAULT = Sanitizer(load_policy(DEFAULT_POLICY))


def inspect(kind: str, record: dict[str, Any], sanitizer: Sanitizer = DEFAULT) -> Any:
    return sanitizer.for_kind(kind, REGISTRY.get(kind)).inspect(record)


def policy_file(tmp_path: Path, text: str) -> Sanitizer:
    path = tmp_path / "policy.toml"
    path.write_text(text)
    return Sanitizer(load_policy(path))


def codes(result: Any) -> list[str]:
    return [r.code for r in result.reasons()]


def test_clean_record_is_the_same_object() -> None:
    result = inspect("pairwise-v2", EXAMPLE)
    assert result.record is EXAMPLE
    assert not result.redacted
    assert not result.problems


def test_redaction_counts_by_safe_path_and_never_mutates_input() -> None:
    record = {
        **EXAMPLE,
        "messages": [{"role": "user", "content": "I am jane.roe@corp-mail.de, +1 415-555-2671"}],
        "rationale": "Key AKIAIOSFODNN7EXAMPLE leaked. SSN 123-45-6789.",
    }
    before = orjson.dumps(record)
    result = inspect("pairwise-v2", record)
    assert orjson.dumps(record) == before
    assert result.record["messages"][0]["content"] == (
        "I am [REDACTED_PII:EMAIL], [REDACTED_PII:PHONE]"
    )
    assert result.redacted == {
        ("$.messages[0].content", Category.EMAIL): 1,
        ("$.messages[0].content", Category.PHONE): 1,
        ("$.rationale", Category.API_KEY): 1,
        ("$.rationale", Category.NATIONAL_ID): 1,
    }
    assert [(r.code, r.path, r.detail) for r in result.reasons()] == [
        ("pii.redacted", "$.messages[0].content", "email=1 phone=1"),
        ("pii.redacted", "$.rationale", "api_key=1 national_id=1"),
    ]
    assert not result.quarantined


def test_secret_named_fields_are_secrets_whole() -> None:
    record = make_record("pw-decide-row-1", random.Random(1), 1)
    record["state"] = {
        "env": {"DB_PASSWORD": "correct horse battery", "githubToken": "x1", "HOME": "/root"},
        "headers": {"Authorization": "Basic abc", "X-Api-Key": "${KEY}"},
        "credentials": [{"user": "bob"}],
    }
    result = inspect("pw-decide-row-1", record)
    state = result.record["state"]
    assert state["env"] == {
        "DB_PASSWORD": "[REDACTED_PII:API_KEY]",
        "githubToken": "[REDACTED_PII:API_KEY]",
        "HOME": "/root",
    }
    assert state["headers"] == {
        "Authorization": "[REDACTED_PII:BEARER_TOKEN]",
        "X-Api-Key": "${KEY}",  # a reference, not a secret
    }
    assert state["credentials"] == [{"user": "[REDACTED_PII:API_KEY]"}]
    # Undeclared member names never appear in paths: below a free-form object every
    # member step is written '*'; an index is shown, as everywhere.
    assert {path for path, _ in result.redacted} == {"$.state.*.*", "$.state.*[0].*"}


def test_member_names_are_scanned_and_collisions_quarantine() -> None:
    record = make_record("pw-decide-row-1", random.Random(2), 2)
    record["meta"] = {"ann@corp-mail.de": "admin", "bob@corp-mail.de": "viewer", "k": "v"}
    result = inspect("pw-decide-row-1", record)
    assert result.record["meta"] == {"[REDACTED_PII:EMAIL]": "admin", "k": "v"}
    assert result.quarantined
    assert "pii.key_collision" in codes(result)


@pytest.mark.parametrize("selector", ["$.meta", "$.meta.*", "$.*", "$"])
def test_member_names_a_selector_covers_are_scanned(tmp_path: Path, selector: str) -> None:
    # Red team: with "$.meta.*" the member names of meta were never scanned (the walk
    # scanned names only below a member selected whole), so an address as a key stayed.
    sanitizer = policy_file(tmp_path, f'[kinds.pw-decide-row-1]\nfields = ["{selector}"]\n')
    record = make_record("pw-decide-row-1", random.Random(2), 2)
    record["meta"] = {"alice.smith@gmail.com": "owner", "k": "v"}
    result = inspect("pw-decide-row-1", record, sanitizer)
    assert result.record["meta"] == {"[REDACTED_PII:EMAIL]": "owner", "k": "v"}


def test_member_names_a_wildcard_matches_are_scanned(tmp_path: Path) -> None:
    sanitizer = policy_file(tmp_path, '[kinds.pw-decide-row-1]\nfields = ["$.meta.*.x"]\n')
    record = make_record("pw-decide-row-1", random.Random(2), 2)
    record["meta"] = {"alice.smith@gmail.com": {"x": "bob@corp-mail.de", "y": "carol@corp.de"}}
    result = inspect("pw-decide-row-1", record, sanitizer)
    assert result.record["meta"] == {
        "[REDACTED_PII:EMAIL]": {"x": "[REDACTED_PII:EMAIL]", "y": "carol@corp.de"}
    }


def test_only_selected_fields_are_scanned(tmp_path: Path) -> None:
    sanitizer = policy_file(
        tmp_path,
        '[kinds.pairwise-v2]\nfields = ["$.rationale"]\ncode_fields = []\n',
    )
    record = {**EXAMPLE, "rationale": "mail jane@corp-mail.de", "response_a": "jane@corp-mail.de"}
    result = inspect("pairwise-v2", record, sanitizer)
    assert result.record["rationale"] == "mail [REDACTED_PII:EMAIL]"
    assert result.record["response_a"] == "jane@corp-mail.de"


def test_kinds_the_policy_does_not_list_are_scanned_whole(tmp_path: Path) -> None:
    sanitizer = policy_file(
        tmp_path, '[kinds.pairwise-v2]\nfields = ["$.task_id"]\ncode_fields = []\n'
    )
    record = make_record("math-reasoning-v1", random.Random(0), 0)
    record["problem"] = "call 415-555-2671"
    assert inspect("math-reasoning-v1", record, sanitizer).redacted
    assert not inspect("pairwise-v2", {**EXAMPLE, "rationale": "415-555-2671"}, sanitizer).redacted


OFF = r"to sanitize nothing, set \[sanitize\] enabled = false in the campaign config$"
LET_STAY = (
    r"an empty list scans nothing; to let this kind's values stay as written, name it in an"
    r" \[\[exceptions\]\] entry \(kinds = \['pairwise-v2'\], every category\); " + OFF
)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("categories = []", r"policy\.categories: an empty list scans for nothing .*; " + OFF),
        ("[kinds.pairwise-v2]\nfields = []", r"policy\.kinds\.pairwise-v2\.fields: " + LET_STAY),
        (
            "[kinds.pairwise-v2]\ncategories = []",
            r"policy\.kinds\.pairwise-v2\.categories: " + LET_STAY,
        ),
        (
            '[[exceptions]]\nname = "x"\ncategories = []',
            r"policy\.exceptions\[0\]\.categories: an empty list lets nothing stay$",
        ),
        (
            '[[exceptions]]\nname = "x"\ncategories = ["ipv4"]\nwhen = { path = "$.domain", in = [] }',
            r"policy\.exceptions\[0\]\.when\.in: an empty list matches no record$",
        ),
    ],
)
def test_an_empty_list_that_would_scan_or_allow_nothing_is_refused(
    tmp_path: Path, text: str, message: str
) -> None:
    """``fields = []`` or ``categories = []`` loaded and scanned nothing, in silence (red
    team); the error says how to leave values as written on purpose."""
    path = tmp_path / "policy.toml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError, match="^" + message):
        load_policy(path)


def test_an_exception_with_every_category_lets_a_kinds_values_stay(tmp_path: Path) -> None:
    """What the empty-list errors advise instead: values stay, the record is unchanged."""
    every = ", ".join(f'"{c.value}"' for c in Category)
    sanitizer = policy_file(
        tmp_path,
        f'[[exceptions]]\nname = "clean"\nkinds = ["pairwise-v2"]\ncategories = [{every}]\n',
    )
    record = {**EXAMPLE, "rationale": "jane@corp-mail.de 415-555-2671 api_key=sk-abcdef0123456789"}
    result = inspect("pairwise-v2", record, sanitizer)
    assert result.record == record
    assert not result.redacted
    assert not result.problems


def test_categories_per_kind(tmp_path: Path) -> None:
    sanitizer = policy_file(tmp_path, '[kinds.pairwise-v2]\ncategories = ["email"]\n')
    record = {**EXAMPLE, "rationale": "jane@corp-mail.de 415-555-2671 8.8.8.8"}
    result = inspect("pairwise-v2", record, sanitizer)
    assert result.record["rationale"] == "[REDACTED_PII:EMAIL] 415-555-2671 8.8.8.8"


def test_documentation_values_stay_under_the_default_policy() -> None:
    text = "see user@example.com at 192.0.2.10 or 2001:db8::1, localhost 127.0.0.1"
    result = inspect("pairwise-v2", {**EXAMPLE, "rationale": text})
    assert result.record["rationale"] == text
    assert sum(result.allowed.values()) == 4
    # Outside the reserved ranges the same shapes are redacted.
    real = inspect("pairwise-v2", {**EXAMPLE, "rationale": "user@corp-mail.de at 81.2.69.160"})
    assert real.record["rationale"] == "[REDACTED_PII:EMAIL] at [REDACTED_PII:IPV4]"


def test_documentation_values_stay_in_any_spelling_that_reads_the_same() -> None:
    # Red team: fullwidth and invisible-character spellings of documentation values were
    # redacted (the exception read the value as written, the detector folded).
    text = "see ｕｓｅｒ＠ｅｘａｍｐｌｅ．ｃｏｍ at １９２．０．２．１０ or ops@exa\u200bmple.org"
    result = inspect("pairwise-v2", {**EXAMPLE, "rationale": text})
    assert result.record["rationale"] == text
    assert sum(result.allowed.values()) == 3
    real = inspect(
        "pairwise-v2", {**EXAMPLE, "rationale": "ｕｓｅｒ＠ｇｍａｉｌ．ｃｏｍ ８.８.８.８"}
    )
    assert real.record["rationale"] == "[REDACTED_PII:EMAIL] [REDACTED_PII:IPV4]"


def test_an_underscore_in_a_domain_is_redacted_and_documentation_stays() -> None:
    # Red team: "a@foo_bar.com" was stored as written (a domain ended at its first '_').
    text = "a@foo_bar.com, _b@mail_srv.example.com_"
    result = inspect("pairwise-v2", {**EXAMPLE, "rationale": text})
    assert result.record["rationale"] == "[REDACTED_PII:EMAIL], _b@mail_srv.example.com_"
    assert sum(result.allowed.values()) == 1


NETWORKING = """
[kinds.grounded-qa-v1]
evidence_fields = ["$.citations[*].quote"]

[[exceptions]]
name = "ips-in-clinical-answers"
categories = ["ipv4", "ipv6"]
kinds = ["grounded-qa-v1"]
fields = ["$.answer"]
when = { path = "$.domain", in = ["clinical_qa"] }
"""


def test_authorised_exception_by_kind_field_and_record_condition(tmp_path: Path) -> None:
    sanitizer = policy_file(tmp_path, NETWORKING)
    record = make_record("grounded-qa-v1", random.Random(4), 4)
    record.update(domain="clinical_qa", question="ip 81.2.69.160?", answer="81.2.69.160")
    result = inspect("grounded-qa-v1", record, sanitizer)
    assert result.record["answer"] == "81.2.69.160"  # authorised: this kind, field, domain
    assert result.record["question"] == "ip [REDACTED_PII:IPV4]?"  # not this field
    record["domain"] = "general_rag"
    assert inspect("grounded-qa-v1", record, sanitizer).record["answer"] == "[REDACTED_PII:IPV4]"


def test_redacted_evidence_quarantines() -> None:
    record = make_record("grounded-qa-v1", random.Random(5), 5)
    record["abstain"] = False
    record["citations"] = [
        {
            "document_id": "doc-001",
            "document_sha256": "0" * 64,
            "start": 0,
            "end": 22,
            "quote": "write to ana@corp.de!",
        }
    ]
    result = inspect("grounded-qa-v1", record)
    assert result.quarantined
    assert codes(result)[0] == "pii.evidence_changed"
    assert result.problems[0].path == "$.citations[0].quote"


def test_redaction_that_breaks_code_quarantines_and_one_that_does_not_accepts() -> None:
    broken = inspect("pairwise-v2", {**EXAMPLE, "response_a": "PHONE = 4155552671\n"})
    assert codes(broken)[0] == "pii.code_broken"
    fine = inspect("pairwise-v2", {**EXAMPLE, "response_a": 'PHONE = "415-555-2671"\n'})
    assert not fine.quarantined
    assert fine.record["response_a"] == 'PHONE = "[REDACTED_PII:PHONE]"\n'
    fenced = 'Use this:\n```python\nhost = 81.2.69.160\n```\nor ```json\n{"ip": 4155552671}\n```'
    result = inspect("pairwise-v2", {**EXAMPLE, "response_a": fenced})
    # Neither block parsed before redaction (the IP literal is a syntax error already;
    # JSON holds a number): only blocks that parsed are held to it.
    assert codes(result) == ["pii.code_broken", "pii.redacted"]
    # Code that never parsed is not held to parsing afterwards.
    diff = inspect("pairwise-v2", {**EXAMPLE, "golden_patch": "--- a\n+++ b\n+ip = 81.2.69.160"})
    assert not diff.quarantined


def test_redaction_that_breaks_the_schema_quarantines() -> None:
    result = inspect("pairwise-v2", {**EXAMPLE, "task_id": "AKIAIOSFODNN7EXAMPLE"})
    assert result.quarantined
    assert [(r.code, r.path) for r in result.problems] == [("pii.schema_invalid", "$.task_id")]
    assert result.record["task_id"] == "[REDACTED_PII:API_KEY]"


def test_uncertain_detection_quarantines() -> None:
    result = inspect("pairwise-v2", {**EXAMPLE, "rationale": "SSN: 000-12-3456 typo?"})
    assert result.record["rationale"] == "SSN: [REDACTED_PII:NATIONAL_ID] typo?"
    assert codes(result)[0] == "pii.uncertain"


@pytest.mark.parametrize("kind", sorted(GENERATORS))
def test_synthetic_records_of_every_kind_are_clean(kind: str) -> None:
    rng = random.Random(11)
    for i in range(30):
        result = inspect(kind, make_record(kind, rng, i))
        assert not result.redacted, (kind, i, result.redacted)


RECORD_TEXT = st.lists(
    st.sampled_from(
        [
            "jane.roe@corp-mail.de",
            "+1 415-555-2671",
            "81.2.69.160",
            "SSN 123-45-6789",
            "Bearer abcDEF123456",
            'password = "x"',
            "[REDACTED_PII:EMAIL]",
            "2001:4860::8888",
            " ",
            "\n",
            "ok",
            "-",
        ]
    ),
    max_size=8,
).map("".join)


@settings(max_examples=100, deadline=None)
@given(RECORD_TEXT, RECORD_TEXT, RECORD_TEXT)
def test_record_sanitization_is_idempotent(rationale: str, content: str, key: str) -> None:
    record = {**EXAMPLE, "rationale": rationale, "messages": [{"role": "user", "content": content}]}
    once = inspect("pairwise-v2", record)
    twice = inspect("pairwise-v2", once.record)
    assert twice.record == once.record
    assert not twice.redacted
    meta_record = make_record("pw-decide-row-1", random.Random(0), 0)
    meta_record["meta"] = {key: content, "token": rationale}
    first = inspect("pw-decide-row-1", meta_record)
    assert inspect("pw-decide-row-1", first.record).record == first.record


# -- policy errors -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("categorys = []", "policy.categorys: unknown key"),
        ('categories = ["emails"]', "unknown category 'emails'"),
        ("[kinds.pairwise-v2]\nfeilds = []", "policy.kinds.pairwise-v2.feilds: unknown key"),
        ('[kinds.pairwise-v2]\nfields = ["response_a"]', "starts with '\\$'"),
        ('[kinds.pairwise-v2]\nfields = ["$.response a"]', "expected .name"),
        ('rejected_raw = "sometimes"', "rejected_raw"),
        (
            '[[exceptions]]\nname = "x"\ncategories = ["ipv4"]\nnetworks = ["1.2.3.4/40"]',
            "networks",
        ),
        ('[[exceptions]]\nname = "x"', "needs a name and categories"),
        (
            '[[exceptions]]\nname = "x"\ncategories = ["email"]\nemail_domains = ["a.org", 1]',
            r"^policy\.exceptions\[0\]\.email_domains\[1\]: expected a string$",
        ),
        (
            '[[exceptions]]\nname = "x"\ncategories = ["email"]\nemail_domains = ["."]',
            r"^policy\.exceptions\[0\]\.email_domains\[0\]: '\.' is not a domain name$",
        ),
        (
            '[[exceptions]]\nname = "x"\ncategories = ["email"]\nemail_domains = ["@a.org"]',
            r"^policy\.exceptions\[0\]\.email_domains\[0\]: '@a\.org' is not a domain name$",
        ),
    ],
)
def test_policy_errors_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_policy(path)


@pytest.mark.parametrize("name", ["", "-", " ", "token_", "api key-", "$", "a.b."])
def test_a_secret_name_without_a_last_word_is_refused(tmp_path: Path, name: str) -> None:
    """The detectors search free text for a secret name's last word; ``secret_fields =
    [""]`` (or ``["-"]``, ``["token_"]``) made it empty, ``bytes.find(b"", i)`` returns
    ``i`` and ``rowgate run`` and ``rowgate scan`` spun forever (red team)."""
    path = tmp_path / "policy.toml"
    path.write_text(f'secret_fields = ["api_key", {json.dumps(name)}]\n')
    with pytest.raises(ConfigError, match=r"policy\.secret_fields\[1\]: .* is not a field name"):
        load_policy(path)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=12))
def test_every_accepted_secret_name_has_a_search_word(
    tmp_path_factory: pytest.TempPathFactory, name: str
) -> None:
    """No secret name a policy accepts gives the detectors an empty word to search for."""
    path = tmp_path_factory.mktemp("policy") / "policy.toml"
    path.write_text(f"secret_fields = [{json.dumps(name)}]\n")
    try:
        policy = load_policy(path)
    except ConfigError:
        return
    assert all(SecretNames(policy.secret_fields).triggers)


@pytest.mark.parametrize(
    ("regions", "message"),
    [
        (
            '["UK"]',
            r"\[0\]: 'UK' is not an ISO 3166-1 alpha-2 region code the phone library knows \(the United Kingdom is 'GB'\) \(known: AC, AD, .*, GB, .*, ZW\)$",
        ),
        ('["US", "ZZ"]', r"\[1\]: 'ZZ' is not an ISO 3166-1 alpha-2 region code"),
        ('[""]', r"\[0\]: '' is not an ISO 3166-1 alpha-2 region code"),
        ('["de"]', r"\[0\]: 'de' is not .* knows \(upper case: 'DE'\)"),
    ],
)
def test_an_unknown_phone_region_is_refused(tmp_path: Path, regions: str, message: str) -> None:
    """``phone_regions = ["UK"]`` loaded, and phonenumbers, which knows no region "UK",
    then validated no number written without +country code: national-number detection
    was off without a word (red team)."""
    path = tmp_path / "policy.toml"
    path.write_text(f"phone_regions = {regions}\n")
    with pytest.raises(ConfigError, match=r"^policy\.phone_regions" + message):
        load_policy(path)


def test_phone_regions_read_national_numbers(tmp_path: Path) -> None:
    sanitizer = policy_file(tmp_path, 'phone_regions = ["GB", "DE"]\n')
    record = {**EXAMPLE, "rationale": "ring 020 7946 0018 or 030 901820"}
    result = inspect("pairwise-v2", record, sanitizer)
    assert result.record["rationale"] == "ring [REDACTED_PII:PHONE] or [REDACTED_PII:PHONE]"


ALL_KINDS = {kind: REGISTRY.get(kind) for kind in ("grounded-qa-v1", "pairwise-v2")}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[kinds.pairwise-v2]\nfields = ["$"]\n[kinds.pairwse-v2]\nfields = ["$.rationale"]',
            r"policy\.kinds\.pairwse-v2: unknown record kind \(known: grounded-qa-v1, pairwise-v2\)$",
        ),
        (
            '[[exceptions]]\nname = "x"\ncategories = ["ipv4"]\nkinds = ["pairwise-v2", "no-such-kind"]',
            r"policy\.exceptions\[0\]\.kinds\[1\]: unknown record kind 'no-such-kind' \(known: grounded-qa-v1, pairwise-v2\)$",
        ),
    ],
)
def test_a_kind_the_policy_names_must_exist(tmp_path: Path, text: str, message: str) -> None:
    """A misspelt ``[kinds.pairwse-v2]`` was ignored (the kind was scanned under other
    settings) and an exception for ``no-such-kind`` let nothing stay, both in silence
    (red team)."""
    sanitizer = policy_file(tmp_path, text)
    with pytest.raises(
        ConfigError, match=f"^sanitize policy {tmp_path / 'policy.toml'}: {message}"
    ):
        sanitizer.check(ALL_KINDS)


def test_a_policy_naming_known_kinds_passes_the_check(tmp_path: Path) -> None:
    policy_file(tmp_path, NETWORKING).check(ALL_KINDS)
    DEFAULT.check({kind: REGISTRY.get(kind) for kind in KINDS})


@pytest.mark.parametrize(
    ("when", "message"),
    [
        (
            'kinds = ["grounded-qa-v1"]\nwhen = { path = "$.nope", in = ["x"] }',
            r"policy\.exceptions\[0\]\.when\.path \(kind grounded-qa-v1\): \$\.nope: \$ has no"
            r" member 'nope'$",
        ),
        (
            'kinds = ["grounded-qa-v1"]\nwhen = { path = "$.citations", in = ["x"] }',
            r"policy\.exceptions\[0\]\.when\.path \(kind grounded-qa-v1\): \$\.citations is an"
            r" array, not a string$",
        ),
        (
            'when = { path = "$.domain", in = ["networking"] }',
            r"policy\.exceptions\[0\]\.when\.path \(kind pairwise-v2: the exception names no"
            r" kinds\): \$\.domain: \$ has no member 'domain'$",
        ),
    ],
)
def test_a_record_condition_is_checked_against_the_schema(
    tmp_path: Path, when: str, message: str
) -> None:
    """``when = { path = "$.nope", ... }`` was never checked: the condition never held
    and the exception let nothing stay, in silence (red team)."""
    sanitizer = policy_file(
        tmp_path, f'[[exceptions]]\nname = "x"\ncategories = ["ipv4"]\n{when}\n'
    )
    with pytest.raises(
        ConfigError, match=f"^sanitize policy {tmp_path / 'policy.toml'}: {message}"
    ):
        sanitizer.check(ALL_KINDS)


def test_selectors_are_checked_against_the_schema(tmp_path: Path) -> None:
    sanitizer = policy_file(tmp_path, '[kinds.pairwise-v2]\nfields = ["$.respnse_a"]\n')
    with pytest.raises(ConfigError, match="has no member 'respnse_a'"):
        sanitizer.for_kind("pairwise-v2", REGISTRY.get("pairwise-v2"))


def test_campaign_config_enables_pins_and_resolves_the_policy(tmp_path: Path) -> None:
    (tmp_path / "pii.toml").write_bytes(DEFAULT_POLICY.read_bytes())
    campaign = tmp_path / "campaign.toml"
    campaign.write_text('[sanitize]\nenabled = true\npolicy = "pii.toml"\n')
    config = load_campaign(campaign)
    assert config.sanitize.policy == str(tmp_path / "pii.toml")
    gate = Gate(config)
    assert gate.sanitizer is not None
    assert gate.sanitizer.policy.sha256 == load_policy(DEFAULT_POLICY).sha256
    campaign.write_text(
        f'[sanitize]\nenabled = true\npolicy = "pii.toml"\npolicy_sha256 = "{"0" * 64}"\n'
    )
    with pytest.raises(ConfigError, match="policy_sha256"):
        Gate(load_campaign(campaign))
    campaign.write_text('[sanitize]\nenabled = "yes"\n')
    with pytest.raises(ConfigError, match=r"sanitize\.enabled: expected bool"):
        load_campaign(campaign)


def test_sanitization_is_off_by_default() -> None:
    assert Gate(CampaignConfig()).sanitizer is None


# -- the gate: both paths agree with sanitization on -------------------------------------

GATE = Gate(CampaignConfig(sanitize=SanitizeSettings(enabled=True)))


def _corpus() -> list[bytes]:
    rng = random.Random(21)
    lines = []
    for i in range(60):
        record = make_record("pairwise-v2", rng, i)
        if i % 3 == 0:
            record, _ = plant_pii(record, rng, i)
        lines.append(orjson.dumps(record))
    lines += [
        defect_line(d, plant_pii(make_record("pairwise-v2", rng, 99), rng, 99)[0])
        for d in sorted(DEFECTS)
    ]
    lines += [
        orjson.dumps({**EXAMPLE, "response_a": "X = 4155552671\n"}),  # quarantined: code
        orjson.dumps({**EXAMPLE, "task_id": "AKIAIOSFODNN7EXAMPLE"}),  # quarantined: schema
        orjson.dumps({**EXAMPLE, "preference": "C", "rationale": "a@corp-mail.de"}),
        b'{"rationale": "ana\\u0040corp-mail.de",,}',
        b"x" * 70_000,
    ]
    return lines


def test_fast_path_matches_reference_path_with_sanitization() -> None:
    lines = _corpus()
    gated = GATE.gate_batch(LineBatch(first_line=1, offsets=list(range(len(lines))), lines=lines))
    fast: dict[int, tuple[Any, ...]] = {}
    for table in gated.kinds.values():
        for row in table.to_pylist():
            fast[row["_shard_line"]] = (
                row["_disposition"], [(r["code"], r["path"], r["detail"]) for r in row["_reasons"]],
                row["_raw_sha256"], row["_record_sha256"], row["_content_sha256"],
            )  # fmt: skip
    assert gated.rejected is not None
    raw_kept = {}
    for row in gated.rejected.to_pylist():
        fast[row["_shard_line"]] = (
            "rejected", [(r["code"], r["path"], r["detail"]) for r in row["_reasons"]],
            row["_raw_sha256"], row["_record_sha256"], None,
        )  # fmt: skip
        raw_kept[row["_shard_line"]] = row["_raw"] is not None
    dispositions = set()
    for n, line in enumerate(lines, 1):
        ref = GATE.gate_line(line)
        assert fast[n] == (
            ref.disposition.value, [(r.code, r.path, r.detail) for r in ref.reasons],
            ref.raw_sha256, ref.record_sha256, ref.content_sha256,
        ), n  # fmt: skip
        if ref.disposition is Disposition.REJECTED and n in raw_kept:
            assert raw_kept[n] == (not ref.raw_withheld), n
        dispositions.add(ref.disposition)
    assert dispositions == {Disposition.ACCEPTED, Disposition.QUARANTINED, Disposition.REJECTED}
    assert any(not kept for kept in raw_kept.values())
    assert any(kept for kept in raw_kept.values())


def test_hashes_commit_to_the_sanitized_record_and_the_raw_bytes() -> None:
    import hashlib

    from pipeline.records.canonical import canonical_json

    record, _ = plant_pii(dict(EXAMPLE), random.Random(1), 1)
    line = orjson.dumps(record)
    outcome = GATE.gate_line(line)
    assert outcome.record is not None
    assert outcome.raw_sha256 == hashlib.sha256(line).hexdigest()
    assert outcome.record_sha256 == hashlib.sha256(canonical_json(outcome.record)).hexdigest()
    assert outcome.record_sha256 != hashlib.sha256(canonical_json(record)).hexdigest()


def test_a_policy_file_with_a_huge_integer_is_a_config_error(tmp_path: Path) -> None:
    """tomllib's int() of 4301+ digits raised a ValueError: a traceback, not a named error."""
    from pipeline.sanitize.policy import load_policy

    policy = tmp_path / "p.toml"
    policy.write_text("version = " + "7" * 5000 + "\n")
    with pytest.raises(ConfigError, match=f"sanitize policy {policy}: .*more than 4300 digits"):
        load_policy(policy)
