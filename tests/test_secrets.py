"""Record values never leak: reasons, paths, raw bytes of rejected lines, and the outputs.

Unit tests of each rule first; the last test plants secrets in every field type and
encoding, runs the CLI, and greps every output for them.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pipeline.config import CampaignConfig, SanitizeSettings
from pipeline.gate import Gate
from pipeline.reader import LineBatch
from pipeline.reasons import Disposition
from pipeline.schemas import SchemaRegistry, instance_parts
from tests.conftest import DATA

FIXTURES = Path(__file__).parent / "fixtures"
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
    ],
)
def test_a_rejected_line_without_a_secret_keeps_its_raw_bytes(line: bytes) -> None:
    codes, kept = _raw_kept(line)
    assert "pii.raw_withheld" not in codes
    assert kept


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
        ("pii.redacted", "$.meta.*.*.*"),
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
