"""End to end: a sample export with planted secrets run through the real pipeline; not
one planted value may appear in any byte of the output directory, in any decoded
Parquet value, in the manifest or in what the CLI prints. And ``rowgate scan``."""

from __future__ import annotations

import hashlib
import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import pipeline.decide.context as global_phase
from pipeline.cli import app
from pipeline.core.config import load_campaign
from pipeline.decide.context import GlobalContext, OutputColumn
from pipeline.jobs.run import run
from pipeline.output.manifest import load_manifest
from pipeline.output.verify import verify_run
from pipeline.records.schemas import SchemaRegistry
from pipeline.sanitize import Sanitizer, load_policy
from pipeline.sanitize.policy import DEFAULT_POLICY
from pipeline.testing.synthetic import (
    DEFECTS,
    make_record,
    planted_secrets,
)
from tests.secret_helpers import decoded_texts, planted_pairwise

runner = CliRunner()


def _sample(root: Path) -> tuple[Path, list[str]]:
    """Exports of three kinds with secrets planted everywhere a contributor could put
    them: free text, code, evidence quotes, free-form maps, member names, schema-invalid
    and unparseable lines (also hidden behind JSON escapes)."""
    rng = random.Random(2024)
    pairwise, secrets = planted_pairwise(rng, 120)  # and every rejection class, secrets in
    extra = planted_secrets(rng, 900)
    secrets += [extra["email"], extra["phone"].replace("+1 ", "").replace("-", ""), extra["aws"]]
    example = make_record("pairwise-v2", rng, 901)
    pairwise += [
        # quarantined: the phone number is a bare literal in code, its redaction breaks it
        orjson.dumps({**example, "response_a": f"PHONE = {secrets[-2]}\n"}),
        # quarantined: a key as task id; the redacted id fails the schema's pattern
        orjson.dumps({**example, "task_id": extra["aws"]}),
        # rejected, secret hidden behind escapes of an unparseable line
        b'{"rationale": "' + extra["email"].replace("@", "\\u0040").encode() + b'",,}',
    ]
    qa_secrets = planted_secrets(rng, 902)
    qa = make_record("grounded-qa-v1", rng, 902)
    qa.update(
        abstain=False,
        answer=f"Ask {qa_secrets['email']}",
        citations=[
            {
                "document_id": "doc-001",
                "document_sha256": "0" * 64,
                "start": 0,
                "end": 30,
                "quote": f"SSN {qa_secrets['ssn']} on file",
            }
        ],
    )
    secrets += [qa_secrets["email"], qa_secrets["ssn"]]
    decide_secrets = planted_secrets(rng, 903)
    decide = make_record("pw-decide-row-1", rng, 903)
    decide["state"] = {
        **decide["state"],
        "env": {"DB_PASSWORD": decide_secrets["password"], "HOME": "/root"},
        "user": {"text": f"my key is {decide_secrets['openai']}"},
    }
    second = decide_secrets["email"].replace("ana.", "bo.")
    decide["meta"] = {decide_secrets["email"]: "owner", second: "viewer"}  # names collide
    secrets += [
        decide_secrets["password"],
        decide_secrets["openai"],
        decide_secrets["email"],
        second,
    ]
    root.mkdir(parents=True, exist_ok=True)
    (root / "pairwise.jsonl").write_bytes(b"\n".join(pairwise) + b"\n")
    (root / "qa.jsonl").write_bytes(orjson.dumps(qa) + b"\n")
    (root / "decide.jsonl").write_bytes(orjson.dumps(decide) + b"\n")
    campaign = root / "campaign.toml"
    campaign.write_text(
        'name = "pii"\n'
        '[[inputs]]\npath = "pairwise.jsonl"\nkind = "pairwise-v2"\n'
        '[[inputs]]\npath = "qa.jsonl"\nkind = "grounded-qa-v1"\n'
        '[[inputs]]\npath = "decide.jsonl"\nkind = "pw-decide-row-1"\n'
        "[engine]\nworkers = 1\nshard_bytes = 16384\n"
        "[sanitize]\nenabled = true\n"
    )
    return campaign, sorted(set(secrets))


class _RejectSome:
    """A stand-in global stage rejecting every 3rd accepted row, so the writer
    re-reads raw bytes of rows the gate had sanitized."""

    name = "test-late-reject"
    order = 900

    def enabled(self, config: Any) -> bool:
        return True

    def output_columns(self, ctx: GlobalContext, kind: str) -> list[OutputColumn]:
        return []

    def decide(self, ctx: GlobalContext, kind: str, rows: pl.DataFrame) -> pl.DataFrame | None:
        chosen = (
            ctx.with_lineage(rows)
            .filter((pl.col("_disposition") == "accepted") & (pl.col("_line") % 3 == 0))
            .select("_shard", "_shard_line")
        )
        reason = [{"code": "cross.test", "path": "", "detail": "late rejection"}]
        return chosen.with_columns(
            _disposition=pl.lit("rejected"),
            _reasons_add=pl.Series(
                [reason] * chosen.height,
                dtype=pl.List(
                    pl.Struct({"code": pl.String, "path": pl.String, "detail": pl.String})
                ),
            ),
        )


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    return _sample(tmp_path_factory.mktemp("pii"))


def _assert_no_secret(out: Path, secrets: list[str], printed: str) -> int:
    files = [p for p in out.rglob("*") if p.is_file()]
    assert files
    for path in files:
        data = path.read_bytes()
        for secret in secrets:
            assert secret.encode() not in data, (path.name, "raw bytes")
    decoded = 0
    for path in out.rglob("*.parquet"):
        table = pq.read_table(path)
        text = "\n".join(decoded_texts(table.to_pylist()))
        text += str(pq.ParquetFile(path).metadata.to_dict())  # statistics, key-value meta
        for secret in secrets:
            assert secret not in text, (path.name, "decoded values")
        decoded += table.num_rows
    for secret in secrets:
        assert secret not in printed, "CLI output"
    return decoded


@pytest.mark.slow
def test_no_planted_secret_reaches_any_output(
    sample: tuple[Path, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the CLI (so its printed output is checked too), zstd-compressed Parquet:
    every file's bytes and every decoded value."""
    campaign, secrets = sample
    assert len(secrets) > 500
    monkeypatch.setattr(global_phase, "GLOBAL_STAGES", [*global_phase.GLOBAL_STAGES, _RejectSome])
    out = tmp_path / "out"
    result = runner.invoke(
        app,
        ["run", "--config", str(campaign), "--out", str(out)],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    rows = _assert_no_secret(out, secrets, result.output)
    manifest = load_manifest(out)
    assert rows == manifest["counts"]["lines"]

    # the run did redact, quarantine, withhold and late-reject
    by_reason = manifest["counts"]["by_reason"]
    assert by_reason["accepted"]["pii.redacted"] > 50
    assert {
        "pii.code_broken",
        "pii.evidence_changed",
        "pii.key_collision",
        "pii.schema_invalid",
    } <= set(by_reason["quarantined"])
    assert by_reason["rejected"]["pii.raw_withheld"] >= len(DEFECTS)
    assert by_reason["rejected"]["cross.test"] > 0
    assert manifest["sanitize"]["policy_sha256"] == load_policy(DEFAULT_POLICY).sha256
    assert manifest["sanitize"]["sanitizer_version"]
    assert manifest["config"]["sanitize"]["enabled"] is True

    # lineage: _raw_sha256 commits to the input bytes, even where _raw is withheld
    source = (campaign.parent / "pairwise.jsonl").read_bytes().split(b"\n")
    rejected = pl.read_parquet(out / "rejected")
    withheld = rejected.filter(pl.col("_raw").is_null() & (pl.col("_source") == "pairwise.jsonl"))
    assert withheld.height >= len(DEFECTS)
    for line, sha in zip(withheld["_line"], withheld["_raw_sha256"], strict=True):
        assert hashlib.sha256(source[line - 1]).hexdigest() == sha
    late = rejected.filter(
        pl.col("_reasons").list.eval(pl.element().struct.field("code") == "cross.test").list.any()
    )
    # Re-read raw bytes of sanitized rows are withheld; those of clean rows are kept.
    assert 0 < late["_raw"].null_count() < late.height

    report = verify_run(out)
    assert report.ok, report.problems


@pytest.mark.slow
def test_uncompressed_output_bytes_are_clean(
    sample: tuple[Path, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Uncompressed Parquet: every string the files hold is visible in their bytes."""
    campaign, secrets = sample
    monkeypatch.setattr(global_phase, "GLOBAL_STAGES", [*global_phase.GLOBAL_STAGES, _RejectSome])
    config = load_campaign(campaign).override(**{"output.compression": "none"})
    run(config, tmp_path / "plain")
    _assert_no_secret(tmp_path / "plain", secrets, "")
    assert verify_run(tmp_path / "plain").ok


def test_sanitization_off_keeps_everything(sample: tuple[Path, list[str]], tmp_path: Path) -> None:
    """The control: without sanitization the same secrets are in the output (so the
    test above is not passing because the sample is clean)."""
    campaign, secrets = sample
    config = load_campaign(campaign).override(
        **{"sanitize.enabled": False, "output.compression": "none"}
    )
    run(config, tmp_path / "off")
    blob = b"".join(p.read_bytes() for p in (tmp_path / "off").rglob("*.parquet"))
    assert sum(s.encode() in blob for s in secrets) > len(secrets) // 2
    assert load_manifest(tmp_path / "off")["sanitize"] is None


def test_scan_reports_counts_and_paths_only(sample: tuple[Path, list[str]]) -> None:
    campaign, secrets = sample
    root = campaign.parent
    result = runner.invoke(
        app, ["scan", str(root / "pairwise.jsonl"), "--kind", "pairwise-v2", "--json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    found = {(r["path"], r["category"]) for r in report["redacted"]}
    assert ("$.rationale", "email") in found
    assert ("$.messages[*].content", "bearer_token") in found
    assert ("$.response_b", "api_key") in found
    assert report["quarantined"] == [
        {"kind": "pairwise-v2", "code": "pii.code_broken", "records": 1},
        {"kind": "pairwise-v2", "code": "pii.schema_invalid", "records": 1},
    ]
    assert report["rejected_raw_withheld"] >= len(DEFECTS)
    for secret in secrets:
        assert secret not in result.output
    table = runner.invoke(
        app, ["scan", "--config", str(campaign), str(root / "qa.jsonl"), "--kind", "grounded-qa-v1"]
    )
    assert table.exit_code == 0, table.output
    assert "pii.evidence_changed" in table.output
    assert "would be redacted" in table.output


def test_scan_errors_have_documented_exit_codes(tmp_path: Path) -> None:
    assert runner.invoke(app, ["scan", str(tmp_path / "missing.jsonl")]).exit_code == 3
    bad = tmp_path / "campaign.toml"
    bad.write_text('[sanitize]\npolicy = "nope.toml"\n')
    (tmp_path / "a.jsonl").write_text("{}\n")
    result = runner.invoke(app, ["scan", "--config", str(bad), str(tmp_path / "a.jsonl")])
    assert result.exit_code == 2
    assert "cannot read" in result.output


def _policy_command(
    tmp_path: Path, command: str, policy: str, record: dict[str, Any], kind: str
) -> list[str]:
    """``run`` (into tmp_path/out) or ``scan`` of one record under a sanitizing campaign
    whose policy file holds ``policy``: the command's arguments."""
    (tmp_path / "policy.toml").write_text(policy)
    campaign = tmp_path / "campaign.toml"
    campaign.write_text('[sanitize]\nenabled = true\npolicy = "policy.toml"\n')
    (tmp_path / "a.jsonl").write_bytes(orjson.dumps(record) + b"\n")
    out = ["--out", str(tmp_path / "out")] if command == "run" else []
    return [command, "--config", str(campaign), *out, "--kind", kind, str(tmp_path / "a.jsonl")]


@pytest.mark.parametrize("command", ["run", "scan"])
def test_a_policy_with_an_empty_secret_name_exits_2_at_once(tmp_path: Path, command: str) -> None:
    """``secret_fields = [""]`` made both commands spin at 100% CPU for ever (red team);
    a subprocess with a timeout, so that a regression fails instead of hanging."""
    record = make_record("math-reasoning-v1", random.Random(0), 0)
    record["problem"] = "the api_key = 'sk-live-abcdef0123456789' is set"
    args = _policy_command(tmp_path, command, 'secret_fields = [""]\n', record, "math-reasoning-v1")
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 2, done.stderr
    assert "error: policy.secret_fields[0]: '' is not a field name" in done.stderr


@pytest.mark.parametrize("command", ["run", "scan"])
def test_a_selector_naming_nothing_fails_the_command(tmp_path: Path, command: str) -> None:
    """``$.messages.content`` (for ``$.messages[*].content``) passed the schema check,
    scanned nothing, and the run stored an e-mail, a phone number and an SSN as written
    (red team)."""
    record = make_record("pairwise-v2", random.Random(0), 0)
    record["messages"][0]["content"] = "mail jane.roe@corp-mail.de, SSN 123-45-6789"
    policy = '[kinds.pairwise-v2]\nfields = ["$.rationale", "$.messages.content"]\n'
    result = runner.invoke(app, _policy_command(tmp_path, command, policy, record, "pairwise-v2"))
    assert result.exit_code == 2, result.output
    assert (
        "policy.kinds.pairwise-v2.fields[1]: $.messages.content: $.messages is an array: it has"
        " no members (its elements: $.messages[*])"
    ) in result.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["run", "scan"])
def test_a_misspelt_kind_in_the_policy_fails_the_command(tmp_path: Path, command: str) -> None:
    """Checked before any line is read, also by ``scan`` for a kind no input holds."""
    record = make_record("math-reasoning-v1", random.Random(0), 0)
    policy = '[kinds.pairwse-v2]\nfields = ["$.rationale"]\n'
    args = _policy_command(tmp_path, command, policy, record, "math-reasoning-v1")
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "policy.kinds.pairwse-v2: unknown record kind (known: agent-trace-v1," in result.output


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80))
def test_sanitizer_never_raises(text: str) -> None:
    """No exception can carry a matched value out: the sanitizer raises none on any
    text (validators' own errors, which quote their input, are caught inside)."""
    sanitizer = Sanitizer(load_policy(DEFAULT_POLICY))
    entry = SchemaRegistry().get("math-reasoning-v1")
    record = make_record("math-reasoning-v1", random.Random(0), 0)
    record["problem"] = text
    record["assumptions"] = [text + " 81.2.69.160", "Bearer " + text]
    sanitizer.for_kind("math-reasoning-v1", entry).inspect(record)
    sanitizer.raw_reason(text.encode("utf-8", "surrogatepass"))
