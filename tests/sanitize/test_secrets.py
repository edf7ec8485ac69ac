"""Record values never leak: reasons, paths, raw bytes of rejected lines, and the outputs.

Unit tests of each rule first; the last test plants secrets in every field type and
encoding, runs the CLI, and greps every output for them.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pyarrow.parquet as pq
import pytest

from pipeline.core.config import CampaignConfig, SanitizeSettings
from pipeline.core.reasons import Disposition
from pipeline.gate.gate import Gate
from pipeline.gate.reader import LineBatch
from pipeline.records.schemas import SchemaRegistry, instance_parts
from pipeline.testing.synthetic import DEFECTS, make_record, planted_secrets
from tests.conftest import DATA
from tests.secret_helpers import decoded_texts, planted_pairwise

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SANITIZING = Gate(CampaignConfig(sanitize=SanitizeSettings(enabled=True)))
EMAIL = "john.smith@corp-mail.io"
KEY = "84736251"


def _decide_row() -> dict[str, Any]:
    record: dict[str, Any] = json.loads((FIXTURES / "pw_decide_row.json").read_text("utf-8"))
    return record


# -- paths: a map key is one `*` whatever it holds ---------------------------------------


@pytest.mark.parametrize(
    "key", ["a.b.c", "guide.with.dots", "a[0]", "x]y", "", "a..b", "[1].b", "."]
)
def test_a_map_key_is_one_star_whatever_it_holds(key: str) -> None:
    # Issue 15 item 17: fastjsonschema splits its error path on '.', '[' and ']', so a map
    # key "a.b.c" under labels.guides gave "$.labels.guides.*.*.*" (the key's shape).
    entry = SchemaRegistry().get("pw-decide-row-1")
    record = _decide_row()
    record["labels"]["guides"] = {key: "not a boolean"}
    record["labels"]["requests"][0]["scores"] = {key: 7}
    paths = {(r.code, r.path) for r in entry.errors(record)}
    assert ("schema.type", "$.labels.guides.*") in paths
    assert ("schema.maximum", "$.labels.requests[0].scores.*") in paths


def test_instance_parts_reads_the_error_name_against_the_record() -> None:
    record = {"m": {"a": {"b": 1}, "a.b": {"c": [0, {"d.e": 2}]}}}
    assert instance_parts(record, "data.m.a.b.c[1].d.e") == ["m", "a.b", "c", 1, "d.e"]
    assert instance_parts(record, "data.m.a.b") == ["m", "a", "b"]
    assert instance_parts(record, "data") == []
    # A name the record cannot resolve stops at the deepest resolved container.
    assert instance_parts(record, "data.m.zz.y") == ["m"]


# -- plots: every user-supplied string is drawn literally --------------------------------

MATH_LABELS = ["$5-$10 plan", r"$\frac{$", "$x^2$", r"a\$b $", r"$\frac{"]


def _figures(labels: list[str]) -> list[Any]:
    from pipeline.reports import plots

    n = len(labels)
    return [
        plots.reliability_figure(
            labels[1], [0, 0.5], [0.5, 1], [2, 3], [0.25, 0.7], [0, 1], [0, 0.4], [0.6, 1]
        ),
        plots.risk_coverage_figure(labels[0], [(s, [0.5, 1], [0, 0.5]) for s in labels]),
        plots.forest_figure(labels, [(labels[2], [0.1] * n, [0.05] * n, [0.2] * n)]),
        plots.operating_points_figure(
            labels, [0.5] * n, [0.1] * n, ([0.4] * n, [0.6] * n), ([0.05] * n, [0.2] * n)
        ),
        plots.bar_figure(labels[3], labels, [1.0] * n, labels[0]),
    ]


def test_plots_draw_dollar_signs_literally(monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 15 item 6: a `--by` value "$\frac{" crashed `report calibration` (mathtext
    # parse error); "$5-$10 plan" was silently drawn as the formula "5 − 10 plan".
    import matplotlib.mathtext
    from matplotlib.text import Text

    from pipeline.reports import plots

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a plot label went through the mathtext parser")

    monkeypatch.setattr(matplotlib.mathtext.MathTextParser, "parse", refuse)
    drawn: list[str] = []
    original = Text.draw

    def record(self: Text, renderer: Any) -> None:
        if self.get_visible() and self.get_text():
            drawn.append(self.get_text())
            assert not self.get_usetex()
            assert self._preprocess_math(self.get_text()) == (self.get_text(), False)
        original(self, renderer)

    monkeypatch.setattr(Text, "draw", record)
    for figure in _figures(MATH_LABELS):
        assert plots.figure_png(figure).startswith(b"\x89PNG")
    for label in MATH_LABELS:
        assert label in drawn, (label, drawn)


@pytest.mark.slow
def test_a_report_sliced_by_values_with_dollar_signs(tmp_path: Path) -> None:
    import polars as pl
    from typer.testing import CliRunner

    from pipeline.cli import app

    data = tmp_path / "eval.parquet"
    pl.DataFrame(
        {
            "prob": [0.1 * (i % 10) + 0.05 for i in range(400)],
            "label": [i % 3 != 0 for i in range(400)],
            "plan": [["$5-$10 plan", r"$\frac{$", "$x^2$", "free"][i % 4] for i in range(400)],
        }
    ).write_parquet(data)
    for command in ("calibration", "selective"):
        out = tmp_path / command
        result = CliRunner().invoke(
            app,
            [
                "report",
                command,
                str(data),
                "--confidence",
                "prob",
                "--correct",
                "label",
                "--by",
                "plan",
                "--out",
                str(out),
                "--bootstrap",
                "0",
                "-q",
            ],
        )
        assert result.exit_code == 0, result.output
        assert "$5-$10 plan" in (out / "report.html").read_text()


# -- raw bytes of rejected lines: every reading is screened ------------------------------

MATH = (
    '{"task_id":"math-000000","problem":"Compute %s","assumptions":[],"derivation":["a"],'
    '"final_answer":"2464","reasoning_score":2}'
)
_UTF16 = (MATH % f"and mail {EMAIL}").encode("utf-16-le")


def _raw_kept(line: bytes, kind: str | None = "math-reasoning-v1") -> tuple[list[str], bool]:
    """Both gate paths: the reasons of the per-line path, and whether the batch path
    stores ``_raw`` (they must agree on withholding)."""
    outcome = SANITIZING.gate_line(line, kind)
    gated = SANITIZING.gate_batch(LineBatch(1, [0], [line]), kind)
    assert outcome.disposition is Disposition.REJECTED
    assert gated.rejected is not None
    kept = gated.rejected.column("_raw")[0].as_py() is not None
    assert kept == (not outcome.raw_withheld)
    return [r.code for r in outcome.reasons], kept


@pytest.mark.parametrize(
    "line",
    [
        # an invalid byte, or a raw NUL, inside an address (json.invalid_utf8 / json.syntax)
        (MATH % "mail john.smith@corp-\xffmail.io").encode("latin-1"),
        (MATH % "mail john.sm\xffith@corp-mail.io").encode("latin-1"),
        (MATH % "mail john.smith@corp-\x00mail.io").encode(),
        # UTF-16 (both orders, with a byte-order mark, and cut one byte off as splitting a
        # UTF-16LE stream on b"\n" leaves every line after the first) and UTF-32
        _UTF16,
        (MATH % f"and mail {EMAIL}").encode("utf-16-be"),
        (MATH % f"and mail {EMAIL}").encode("utf-16"),
        b"\x00" + _UTF16,
        (MATH % f"and mail {EMAIL}").encode("utf-32"),
        # non-ASCII text in UTF-16: only a real UTF-16 decoding reads the address
        (MATH % "γράψε στο δοκιμή@corp-mail.io").encode("utf-16-le"),
        # a number under a secret-named member, in a line that parses and one that does not
        b'{"task_id":"m-1","password": 84736251}',
        b'{"task_id":"m-1","password": 84736251,,}',
        b'{"task_id":"m-1","db":{"password": 84736251.5}}',
        b'{"task_id":"m-1","credentials":[84736251]}',
        # a secret name spelled with an escape or split by an invalid byte
        b'{"task_id":"m-1","pass\\u0077ord": 84736251}',
        b'{"task_id":"m-1","pass\xffword": 84736251}',
        b'{"task_id":"m-1","api_key": hunter2hunter2}',
        # red team: a container under a secret name, a name padded with blanks, a long
        # value, a line cut inside the value (each in a line that does not parse)
        b'{"task_id":"m-1","credentials":{"username":"bob","value":"hunter2xyz9"},,}',
        b'{"task_id":"m-1","api_key":["sekr3tvalue9"],,}',
        b'{"task_id":"m-1","credentials":{"user":{"pin":"hunter2xyz9"',
        b'{"task_id":"m-1","password"' + b" " * 100 + b': "hunter2xyz9",,}',
        b'{"task_id":"m-1","password": "' + b"x9" * 2500 + b'",,}',
        b'{"task_id":"m-1","password ": "hunter2xyz9",,}',
        b'{"task_id":"m-1","password": "hunter2xyz9',
        b'{"task_id":"m-1","' + b"x" * 300 + b'_password": 84736251,,}',
        # red team: Unicode spellings of a value, or of a secret name
        (MATH % "mail alice.smith＠gmail.com").encode()[:-1],
        (MATH % "Call ٢٠٢٥٥٥٠١٤٣").encode()[:-1],
        (MATH % "mail alice.smith\u200b@gmail.com").encode()[:-1],
        '{"task_id":"m-1","ｐａｓｓｗｏｒｄ": "hunter2xyz9",,}'.encode(),
        b'{"task_id":"m-1","pass\\u200bword": "hunter2xyz9",,}',
    ],
)
def test_a_rejected_line_holding_a_secret_loses_its_raw_bytes(line: bytes) -> None:
    # Issue 15 item 13: with sanitization on, these rejected lines kept their secret in _raw.
    codes, kept = _raw_kept(line)
    assert "pii.raw_withheld" in codes
    assert not kept


@pytest.mark.parametrize(
    "line",
    [
        b'{"task_id":"m-1","max_tokens": 100, "token_type": "bearer",,}',
        b'{"task_id":"m-1","password": "", "token": null, "secret": true, "auth": "***"}',
        (MATH % "nothing personal here").encode("utf-16"),
        (MATH % "nothing \xff personal").encode("latin-1"),
        # member names in a container are no values; placeholders and literals no secrets
        b'{"task_id":"m-1","credentials":{"user":null,"pin":"***"},"token":[],,}',
        b'{"task_id":"m-1","keyboard": "qwerty1234", "token_count": 12,,}',
    ],
)
def test_a_rejected_line_without_a_secret_keeps_its_raw_bytes(line: bytes) -> None:
    codes, kept = _raw_kept(line)
    assert "pii.raw_withheld" not in codes
    assert kept


RAW_ADVERSARIAL = {
    "names": b'{"password' + b'"password' * 200_000,
    "padded name": b'"' + b" password" * 200_000 + b'": 1',
    "blanks": b'"password' + b" " * 1_000_000,
    "opened containers": b'"password": [' * 100_000,
    "nested members": b'"password": {"password": {' * 50_000,
    "members": b'"password":' * 100_000,
    "escapes": b'"password": "\\' * 100_000,
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(RAW_ADVERSARIAL))
def test_the_raw_screen_stays_linear(name: str) -> None:
    """Lines of about a megabyte shaped to make the member rule re-read what it read
    (unbounded names, blanks and values; containers in containers). Generous bound."""
    started = time.perf_counter()
    assert SANITIZING.sanitizer is not None
    SANITIZING.sanitizer.raw.findings(RAW_ADVERSARIAL[name])
    assert time.perf_counter() - started < 20


def _decide_line() -> dict[str, Any]:
    first = subprocess.run(
        ["zstd", "-dc", str(DATA / "pw-decide-row-1.jsonl.zst")], capture_output=True, check=True
    ).stdout.split(b"\n", 1)[0]
    record: dict[str, Any] = json.loads(first)
    return record


def test_a_number_under_a_secret_named_member_is_redacted() -> None:
    # Issue 15 item 13 ("password": 84736251): only strings were secrets whole; a number
    # under a secret-named member of an accepted record was stored as it was.
    record = _decide_line()
    assert SANITIZING.gate_line(json.dumps(record).encode()).disposition is Disposition.ACCEPTED
    record["meta"]["password"] = 84736251
    record["meta"]["db"] = {"api_key": [1234567.5, True, None]}
    outcome = SANITIZING.gate_line(json.dumps(record).encode())
    assert outcome.disposition is Disposition.ACCEPTED
    assert outcome.record is not None
    meta = outcome.record["meta"]
    assert meta["password"] == "[REDACTED_PII:API_KEY]"
    assert meta["db"] == {"api_key": ["[REDACTED_PII:API_KEY]", True, None]}  # no secret in a bool
    assert {(r.code, r.path) for r in outcome.reasons} == {
        ("pii.redacted", "$.meta.*"),
        ("pii.redacted", "$.meta.*.*[0]"),  # an index is shown, a member name never
    }


def test_a_secret_number_the_schema_allows_no_tag_for_rejects_the_record() -> None:
    # A score map keyed by a secret-looking name: the tag cannot stand in for the number,
    # and a quarantined record is stored whole, so the record is rejected, raw withheld.
    record = _decide_line()
    record["labels"]["requests"][0]["scores"] = {"password": 3}
    line = json.dumps(record).encode()
    codes, kept = _raw_kept(line, None)
    assert codes[0] == "pii.unredactable"
    assert "pii.raw_withheld" in codes
    assert not kept


# -- end to end: secrets planted in every field type and encoding ------------------------

_RUBRIC_CAMPAIGN = (DATA / "campaign-pairwise-rubric.toml").read_text("utf-8")


def _planted_export(root: Path) -> tuple[dict[str, str], list[str]]:
    """Inputs of three kinds with secrets in string fields, member names, numbers under
    secret-named members, nested maps, map keys with dots, and rejected lines of every
    defect class and encoding. Returns the inputs (path → kind) and every planted value."""
    rng = random.Random(15)
    pairwise, planted = planted_pairwise(rng, 40)  # and a line of every defect class
    pairwise.append(pairwise[0])  # a retry of a row holding secrets: cross.retry
    copy = orjson.loads(pairwise[0])  # its content under another task id: dedupe.exact
    copy["task_id"] = f"{copy['task_id']}-copy"
    pairwise.append(orjson.dumps(copy))
    conflict = orjson.loads(pairwise[2])  # same task id, another body: cross.idempotency_conflict
    conflict["rationale"] += " Also ask ines.conflict.qwxz@mail-7.corp-example.de."
    planted.append("ines.conflict.qwxz@mail-7.corp-example.de")
    pairwise.append(orjson.dumps(conflict))
    wide = planted_secrets(rng, 900)
    planted += [wide["email"], wide["github"], wide["openai"], KEY, EMAIL]
    base = make_record("pairwise-v2", rng, 900)
    text = orjson.dumps({**base, "rationale": f"Write to {wide['email']} or {EMAIL}."}).decode()
    pairwise += [
        text.encode("utf-16-le"),
        text.encode("utf-16"),
        text.encode("utf-16-be"),
        text.encode("utf-32"),
        text.replace(EMAIL, "john.smith@corp-\xffmail.io").encode("latin-1", "ignore"),
        text.replace(EMAIL, "john.smith@corp-\x00mail.io").encode(),
        orjson.dumps({**base, "password": int(KEY)})[:-1] + b",}",  # a number, unparseable
        orjson.dumps({**base, "api_key": int(KEY), "token": wide["github"]}),  # schema-invalid
        # an address behind JSON escapes, in a line that does not parse
        b'{"rationale": "' + wide["email"].replace("@", "\\u0040").encode() + b'",,}',
    ]
    math = []
    math_secret = planted_secrets(rng, 901)
    planted += [math_secret["email"], math_secret["aws"]]
    record = make_record("math-reasoning-v1", rng, 901)
    math.append(orjson.dumps({**record, "problem": f"Mail {math_secret['email']} the answer"}))
    # rejected by a semantic rule (a blank step), a secret in another field
    math.append(orjson.dumps({**record, "task_id": "math-777777", "derivation": [" "],
                              "final_answer": f"key {math_secret['aws']}"}))  # fmt: skip
    decide_secret = planted_secrets(rng, 902)
    decide = make_record("pw-decide-row-1", rng, 902)
    decide["meta"] = {
        **decide["meta"],
        "password": int(KEY) + 1,  # a number under a secret-named member
        "db": {"credentials": {"token": decide_secret["github"], "port": 5432}},  # nested
        decide_secret["email"]: "owner",  # a member name
    }
    planted += [str(int(KEY) + 1), decide_secret["github"], decide_secret["email"]]
    guides = make_record("pw-decide-row-1", rng, 903)
    # a map key with dots (an address), its value of the wrong type: schema.type
    guides["labels"] = {**guides["labels"], "guides": {decide_secret["email"]: 7}}
    root.mkdir(parents=True, exist_ok=True)
    (root / "pairwise.jsonl").write_bytes(b"\n".join(pairwise) + b"\n")
    (root / "math.jsonl").write_bytes(b"\n".join(math) + b"\n")
    (root / "decide.jsonl").write_bytes(orjson.dumps(decide) + b"\n" + orjson.dumps(guides))
    inputs = {"pairwise.jsonl": "pairwise-v2", "math.jsonl": "math-reasoning-v1",
              "decide.jsonl": "pw-decide-row-1"}  # fmt: skip
    return inputs, sorted(set(planted))


def _campaign(root: Path, inputs: dict[str, str], sanitize: bool) -> Path:
    """The pairwise rubric campaign (rubric.* and policy.* reasons) over the planted inputs."""
    scoring = _RUBRIC_CAMPAIGN.partition("[rubrics.pins]")[2]
    scoring = scoring.replace('"../rubrics/', f'"{(DATA.parent / "rubrics").as_posix()}/')
    text = 'name = "planted"\n' + "".join(
        f'[[inputs]]\npath = "{path}"\nkind = "{kind}"\n' for path, kind in inputs.items()
    )
    text += f"[sanitize]\nenabled = {str(sanitize).lower()}\n[rubrics.pins]{scoring}"
    path = root / f"campaign-{sanitize}.toml"
    path.write_text(text, "utf-8")
    return path


def _cli(*args: str) -> tuple[int, str, str]:
    """The real command line, so stdout and stderr are seen apart, as a user sees them."""
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", *args],
        capture_output=True,
        env={**os.environ, "COLUMNS": "250", "PYTHONPATH": str(Path(__file__).parents[1])},
        check=False,
    )
    return (
        done.returncode,
        done.stdout.decode("utf-8", "replace"),
        done.stderr.decode("utf-8", "replace"),
    )


def _leaks(text: str, secrets: list[str]) -> list[str]:
    return [s for s in secrets if s in text]


@pytest.fixture(scope="module")
def planted_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("planted-inputs")
    inputs, planted = _planted_export(root)
    runs: dict[str, Any] = {"planted": planted}
    for sanitize in (False, True):
        out = tmp_path_factory.mktemp(f"planted-out-{sanitize}") / "out"
        config = _campaign(root, inputs, sanitize)
        printed = [_cli("run", "--config", str(config), "--out", str(out))]
        assert printed[0][0] == 0, printed[0]
        printed.append(_cli("verify", str(out)))
        assert printed[-1][0] == 0, printed[-1]
        if sanitize:  # scan reads the policy whether sanitization is on or not
            for path, kind in inputs.items():
                printed.append(_cli("scan", str(root / path), "--kind", kind, "-c", str(config)))
                assert printed[-1][0] == 0, printed[-1]
            printed.append(_cli("scan", str(root / "pairwise.jsonl"), "--kind", "pairwise-v2",
                                "-c", str(config), "--json"))  # fmt: skip
            assert printed[-1][0] == 0, printed[-1]
        runs[str(sanitize)] = (out, printed)
    return runs


def _reason_rows(out: Path) -> list[dict[str, str]]:
    rows = []
    for path in out.rglob("*.parquet"):
        table = pq.read_table(path)
        if "_reasons" in table.column_names:
            rows += [r for reasons in table.column("_reasons").to_pylist() for r in reasons or []]
    return rows


@pytest.mark.slow
@pytest.mark.parametrize("sanitize", [False, True])
def test_reasons_manifest_report_and_terminal_never_carry_record_values(
    planted_runs: dict[str, Any], sanitize: bool
) -> None:
    """Whether sanitization is on or off: no planted value in any reason (code, path,
    detail) of any Parquet file, in manifest.json, in report.html, or in what `run`,
    `verify` and `scan` print on stdout or stderr."""
    out, printed = planted_runs[str(sanitize)]
    planted = planted_runs["planted"]
    reasons = _reason_rows(out)
    codes = {r["code"] for r in reasons}
    # the run exercised every family of reasons the promise covers
    assert {"json.invalid_utf8", "json.syntax", "schema.type", "cross.idempotency_conflict",
            "cross.retry", "dedupe.exact",
            "semantic.math-reasoning-v1.non_blank_steps"} <= codes  # fmt: skip
    assert any(c.startswith("rubric.") for c in codes)
    assert any(c.startswith("policy.") for c in codes)
    for reason in reasons:
        text = f"{reason['code']} {reason['path']} {reason['detail']}"
        assert not _leaks(text, planted), reason
        assert " scored " not in text, reason  # rubric details quoted the row's score
        assert ": found " not in text, reason  # and the gate's evidence
    guide_paths = {r["path"] for r in reasons if r["path"].startswith("$.labels.guides")}
    assert guide_paths == {"$.labels.guides.*"}  # a key with dots is one '*'
    for name in ("manifest.json", "report.html"):
        assert not _leaks((out / name).read_text("utf-8"), planted), name
    for _, stdout, stderr in printed:
        assert not _leaks(stdout, planted), stdout
        assert not _leaks(stderr, planted), stderr


@pytest.mark.slow
def test_with_sanitization_on_no_output_carries_a_planted_secret(
    planted_runs: dict[str, Any],
) -> None:
    """Sanitization on: every file's bytes, every decoded Parquet value of every column
    (``_raw`` read in every encoding), the manifest, the report and the terminal."""
    out, printed = planted_runs["True"]
    secrets = planted_runs["planted"]
    files = [p for p in out.rglob("*") if p.is_file()]
    for path in files:
        data = path.read_bytes()
        assert not [s for s in secrets if s.encode() in data], path
    rows = 0
    for path in out.rglob("*.parquet"):
        table = pq.read_table(path)
        rows += table.num_rows
        text = "\n".join(decoded_texts(table.to_pylist()))
        text += str(pq.ParquetFile(path).metadata.to_dict())
        assert not _leaks(text, secrets), path
    assert rows
    rejected = pl.read_parquet(out / "rejected")
    withheld = rejected.filter(pl.col("_raw").is_null())
    assert withheld.height >= len(DEFECTS) + 8  # every defect class and every encoding
    for _, stdout, stderr in printed:
        assert not _leaks(stdout + stderr, secrets)


@pytest.mark.slow
def test_with_sanitization_off_rows_keep_their_values(planted_runs: dict[str, Any]) -> None:
    """The promise is exact: without sanitization, accepted rows and rejected lines' raw
    bytes carry what the input held (the run keeps data; only reasons, manifest, report
    and terminal are value-free)."""
    out, _ = planted_runs["False"]
    accepted = "\n".join(decoded_texts(pq.read_table(out / "accepted").to_pylist()))
    raw = "\n".join(decoded_texts(pl.read_parquet(out / "rejected")["_raw"].to_list()))
    assert EMAIL in raw
    assert _leaks(accepted, planted_runs["planted"])


def test_only_a_refused_number_rejects_a_record(tmp_path: Path) -> None:
    """A schema failure elsewhere (a redacted string under its minLength) stays a
    quarantine; only a failure where a number became the tag rejects the record."""
    from pipeline.records.schemas import load_schema
    from pipeline.sanitize import RecordSanitizer, load_policy
    from pipeline.sanitize.policy import DEFAULT_POLICY

    path = tmp_path / "probe.schema.json"
    path.write_text(
        json.dumps(
            {
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "properties": {
                    "owner": {"type": "string", "minLength": 21},
                    "meta": {"type": "object"},
                    "pins": {"type": "object", "additionalProperties": {"type": "integer"}},
                },
            }
        )
    )
    sanitizer = RecordSanitizer(load_policy(DEFAULT_POLICY), "probe", load_schema(path, "probe"))
    free = sanitizer.inspect({"owner": EMAIL, "meta": {"password": 84736251}})
    assert free.record["meta"] == {"password": "[REDACTED_PII:API_KEY]"}
    assert {(p.code, p.path) for p in free.problems} == {("pii.schema_invalid", "$.owner")}
    assert free.quarantined
    assert not free.rejected
    typed = sanitizer.inspect({"pins": {"db_password": 84736251}})
    assert {(p.code, p.path) for p in typed.problems} == {("pii.unredactable", "$.pins.*")}
    assert typed.rejected
