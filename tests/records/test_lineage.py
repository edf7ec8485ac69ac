"""Content fingerprints: the seed 002 reference profile and rowgate's other domains."""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.core.config import CampaignConfig, LineageSettings
from pipeline.kinds import KINDS
from pipeline.records.lineage import (
    KEY_ID_DOMAIN,
    PAIRWISE_CONTENT_V1,
    PLAIN,
    LineageDigest,
    LineageKeyError,
    raw_sha256,
    record_sha256,
)

EXAMPLE = json.loads(
    (Path(__file__).resolve().parents[1] / "fixtures" / "seed000_annotation.json").read_text(
        "utf-8"
    )
)

# -- the seed 002 reference function, verbatim --------------------------------------------
DOMAIN = b"ARCV:pairwise-content:v1\x00"


def payload_hash(prompt: str, response_chosen: str, response_rejected: str, patch: str = "") -> str:
    digest = hashlib.sha256(DOMAIN)
    for value in (prompt, response_chosen, response_rejected, patch):
        if not isinstance(value, str):
            raise TypeError("Content fields must be strings")
        encoded = value.encode("utf-8", errors="strict")
        if len(encoded) >= 2**64:
            raise ValueError("Field exceeds encoding limit")
        digest.update(len(encoded).to_bytes(8, "big"))
        digest.update(encoded)
    return digest.hexdigest()


# ------------------------------------------------------------------------------------------


def ours(*fields: str) -> str:
    return PAIRWISE_CONTENT_V1.digest(fields)


def test_seed_002_assertions() -> None:
    assert ours("ab", "c", "", "") != ours("a", "bc", "", "")
    assert ours("task", "better", "worse", "") == payload_hash("task", "better", "worse", "")
    assert ours("task", "better", "worse", "") != ours("task", "worse", "better", "")


@given(st.text(), st.text(), st.text(), st.text())
def test_profile_equals_the_seed_function(a: str, b: str, c: str, d: str) -> None:
    assert ours(a, b, c, d) == payload_hash(a, b, c, d)


def test_seed_000_example_fingerprint() -> None:
    expected = payload_hash(
        EXAMPLE["messages"][0]["content"], EXAMPLE["response_a"], EXAMPLE["response_b"]
    )
    assert KINDS["pairwise-v2"].fingerprint(EXAMPLE) == expected
    assert expected == "0cf9c43c7e10c09239a6371f0a689a1acece7d5cecad924ec8686dc4484d26de"


def test_preference_b_swaps_chosen_and_rejected() -> None:
    flipped = {**EXAMPLE, "preference": "B"}
    assert KINDS["pairwise-v2"].fingerprint(flipped) == payload_hash(
        EXAMPLE["messages"][0]["content"], EXAMPLE["response_b"], EXAMPLE["response_a"]
    )


def test_ties_use_their_own_domain_and_ignore_ab_order() -> None:
    kind = KINDS["pairwise-v2"]
    tie = {**EXAMPLE, "preference": "tie"}
    swapped = {**tie, "response_a": EXAMPLE["response_b"], "response_b": EXAMPLE["response_a"]}
    assert kind.fingerprint(tie) == kind.fingerprint(swapped)
    assert kind.fingerprint(tie) != kind.fingerprint(EXAMPLE)
    neither = {**tie, "preference": "neither", "golden_patch": "def unique_values(v): ..."}
    assert kind.fingerprint(neither) != kind.fingerprint(tie)


def test_multi_turn_commits_to_the_whole_context() -> None:
    kind = KINDS["pairwise-v2"]
    system = {"role": "system", "content": "be brief"}
    multi = {**EXAMPLE, "messages": [system, *EXAMPLE["messages"]]}
    other = {**EXAMPLE, "messages": [{**system, "content": "be verbose"}, *EXAMPLE["messages"]]}
    assert kind.fingerprint(multi) != kind.fingerprint(EXAMPLE)
    assert kind.fingerprint(multi) != kind.fingerprint(other)


def test_fingerprint_ignores_ratings_and_rationale_but_record_hash_does_not() -> None:
    kind = KINDS["pairwise-v2"]
    edited = {
        **EXAMPLE,
        "rationale": EXAMPLE["rationale"] + " Also faster.",
        "ratings": {**EXAMPLE["ratings"], "style": 1},
    }
    assert kind.fingerprint(edited) == kind.fingerprint(EXAMPLE)
    assert record_sha256(edited) != record_sha256(EXAMPLE)


def test_hashes_are_different_commitments() -> None:
    line = json.dumps(EXAMPLE).encode()
    assert raw_sha256(line) != record_sha256(EXAMPLE)
    assert (
        record_sha256(EXAMPLE)
        == record_sha256(json.loads(line))
        == record_sha256(EXAMPLE, reference=True)
    )


def test_every_row_names_the_profile_that_hashed_it(tmp_path: Path) -> None:
    """Seed 002 defines a single-turn profile and asks for separate ones for multi-turn
    tasks and for ties; DESIGN §3.5. Before, ``_content_sha256`` did not say which profile
    produced it, so two equal-looking digests could not be told apart by their encoding."""
    import random

    import orjson
    import polars as pl

    from pipeline.core.config import CampaignConfig, InputSpec
    from pipeline.jobs.run import run
    from pipeline.testing.synthetic import make_record

    system = {"role": "system", "content": "be brief"}
    rows = {
        "ARCV:pairwise-content:v1": EXAMPLE,
        "rowgate:pairwise-content-multiturn:v1": {
            **EXAMPLE,
            "task_id": "multi",
            "messages": [system, *EXAMPLE["messages"]],
        },
        "rowgate:pairwise-content-unranked:v1": {
            **EXAMPLE,
            "task_id": "tie",
            "preference": "tie",
            "rationale": "Both responses remove the duplicates well.",
        },
    }
    kind = KINDS["pairwise-v2"]
    for profile, row in rows.items():
        assert kind.fingerprint_and_profile(row) == (kind.fingerprint(row), profile)
    # a row a semantic rule rejects keeps its lineage too
    rejected = {**EXAMPLE, "task_id": "bad", "response_b": EXAMPLE["response_a"]}
    (tmp_path / "p.jsonl").write_bytes(
        b"".join(orjson.dumps(r) + b"\n" for r in [*rows.values(), rejected])
    )
    trace = make_record("agent-trace-v1", random.Random(1), 1)
    (tmp_path / "t.jsonl").write_bytes(orjson.dumps(trace) + b"\n")
    config = CampaignConfig(
        inputs=(
            InputSpec(str(tmp_path / "p.jsonl"), "pairwise-v2"),
            InputSpec(str(tmp_path / "t.jsonl"), "agent-trace-v1"),
        )
    )
    run(config, tmp_path / "out")
    accepted = pl.read_parquet(tmp_path / "out" / "accepted" / "pairwise-v2")
    columns = accepted.columns
    assert columns.index("_content_profile") == columns.index("_content_sha256") + 1
    assert accepted["_content_profile"].to_list() == list(rows)
    (trace_part,) = (tmp_path / "out").glob("*/agent-trace-v1/*.parquet")
    traces = pl.read_parquet(trace_part)
    assert traces["_content_profile"].to_list() == ["rowgate:agent-trace-content:v1"]
    bad = pl.read_parquet(tmp_path / "out" / "rejected")
    assert bad["_content_profile"].to_list() == ["ARCV:pairwise-content:v1"]


# -- keyed lineage --------------------------------------------------------------------------

KEY = b"0123456789abcdef0123456789abcdef-lineage"


def _keyed(monkeypatch: pytest.MonkeyPatch, value: str) -> LineageDigest:
    monkeypatch.setenv("ROWGATE_TEST_LINEAGE_KEY", value)
    settings = LineageSettings(key_env="ROWGATE_TEST_LINEAGE_KEY")
    return LineageDigest.of(CampaignConfig(lineage=settings))


def test_unkeyed_lineage_is_plain_sha256() -> None:
    digest = LineageDigest.of(CampaignConfig())
    assert digest is PLAIN
    assert digest.describe() == {"mode": "sha256", "key_id": None}
    assert digest.hexdigest(b"line") == hashlib.sha256(b"line").hexdigest()


def test_keyed_lineage_is_hmac_sha256_under_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    digest = _keyed(monkeypatch, "  " + KEY.decode() + "\n")  # surrounding whitespace ignored
    line = b'{"task_id":"t1","phone":"555-0100"}'
    want = hmac.new(KEY, line, hashlib.sha256).hexdigest()
    assert digest.hexdigest(line) == want != hashlib.sha256(line).hexdigest()
    streamed = digest.hasher()
    streamed.update(line[:7])
    streamed.update(line[7:])
    assert streamed.hexdigest() == want
    assert digest.describe() == {
        "mode": "hmac-sha256",
        "key_id": hashlib.sha256(KEY_ID_DOMAIN + KEY).hexdigest()[:16],
    }
    assert KEY.decode() not in repr(digest)


def test_the_content_fingerprint_is_keyed_too() -> None:
    fields = ("task", "better", "worse", "")
    encoding = DOMAIN + b"".join(len(f).to_bytes(8, "big") + f.encode() for f in fields)
    assert PAIRWISE_CONTENT_V1.digest(fields) == payload_hash(*fields)
    assert PAIRWISE_CONTENT_V1.digest(fields, KEY) == hmac.new(KEY, encoding, "sha256").hexdigest()
    kind = KINDS["pairwise-v2"]
    plain, profile = kind.fingerprint_and_profile(EXAMPLE)
    keyed = kind.fingerprint_and_profile(EXAMPLE, KEY)
    assert keyed[1] == profile
    assert keyed[0] != plain


def test_a_missing_or_short_key_is_an_error_naming_where_never_showing_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("ROWGATE_TEST_LINEAGE_KEY", raising=False)
    settings = LineageSettings(key_env="ROWGATE_TEST_LINEAGE_KEY")
    with pytest.raises(LineageKeyError, match="environment variable ROWGATE_TEST_LINEAGE_KEY"):
        LineageDigest.of(CampaignConfig(lineage=settings))
    short = "s3cr3t-but-short"
    with pytest.raises(LineageKeyError, match="16 bytes long; at least 32") as caught:
        _keyed(monkeypatch, short)
    assert short not in str(caught.value)
    missing = tmp_path / "absent.key"
    with pytest.raises(LineageKeyError, match=f"lineage key file {missing}"):
        LineageDigest.of(CampaignConfig(lineage=LineageSettings(key_file=str(missing))))
    (tmp_path / "lineage.key").write_bytes(KEY + b"\n")
    from_file = LineageDigest.of(
        CampaignConfig(lineage=LineageSettings(key_file="lineage.key"), base_dir=str(tmp_path))
    )
    assert from_file.key == KEY
