"""Evaluation reports end to end in the library: expressions, validation, slices,
warnings, bootstrap determinism, the pw-decide-row preset, and where rows come from."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from pipeline.core.config import ConfigError, load_campaign
from pipeline.gate.reader import InputError
from pipeline.jobs.run import run
from pipeline.output.outdir import OutputExistsError
from pipeline.reports.evaluation import EvaluationReport, evaluate, slice_label
from pipeline.reports.evaluation_output import report_document, write_evaluation
from pipeline.reports.settings import ReportSettings
from pipeline.reports.sources import LoadedTable, load_table, named_paths
from tests.conftest import DATA


def _table(**columns: object) -> LoadedTable:
    return LoadedTable(pl.LazyFrame(columns), [], "parquet")


def _evaluate(table: LoadedTable, **settings: object) -> EvaluationReport:
    return evaluate(table, ReportSettings(**settings).validate())  # type: ignore[arg-type]


def _synthetic(n: int = 2000, seed: int = 1) -> LoadedTable:
    rng = np.random.default_rng(seed)
    p = rng.uniform(0, 1, n).round(2)
    return _table(
        p=p,
        ok=rng.random(n) < p,
        model=rng.choice(["a", "b"], n),
        pct=(p * 100).round(),
        tags=[["x"]] * n,
    )


@pytest.fixture(scope="module")
def sample_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("run") / "out"
    config = load_campaign(DATA / "campaign.toml").override(**{"engine.workers": 1})
    run(config, out)
    return out


def test_torchmetrics_vector_through_the_report() -> None:
    table = _table(p=[0.25, 0.25, 0.55, 0.75, 0.75], y=[0, 0, 1, 1, 1])
    report = _evaluate(table, confidence="p", correct="y", bins=2, bootstrap=0)
    summary = report.slices[0].summary
    assert round(summary["ece_equal_width"], 4) == 0.29
    assert round(summary["rmsce"], 4) == 0.2918
    assert round(summary["mce"], 4) == 0.3167
    bins = report.bins_table().filter(pl.col("scheme") == "equal_width")
    assert bins.select("lower", "upper", "closed", "n").rows() == [
        (0.0, 0.5, "both", 2),
        (0.5, 1.0, "right", 3),
    ]
    assert summary["ece_equal_width_low"] is None  # bootstrap=0: no intervals


def test_extreme_confidences_in_the_bins_table() -> None:
    report = _evaluate(
        _table(p=[0.0, 0.0, 1.0, 1.0, 1.0], y=[False, True, True, True, False]),
        confidence="p",
        correct="y",
        bins=10,
        bootstrap=0,
    )
    bins = report.bins_table().filter(pl.col("scheme") == "equal_width")["n"].to_list()
    assert bins[0] == 2
    assert bins[-1] == 3
    assert sum(bins[1:-1]) == 0


def test_sql_expressions_and_struct_fields() -> None:
    table = _table(
        out=[{"p": 0.9, "label": "x"}, {"p": 0.2, "label": "y"}, {"p": 0.6, "label": "x"}],
        gold=["x", "x", "x"],
    )
    report = _evaluate(
        table, confidence="out.p * 1.0", correct="out.label = gold", by=("out.label",), bootstrap=0
    )
    assert [s.label for s in report.slices] == ["all", "out.label=x", "out.label=y"]
    assert report.slices[0].summary["accuracy"] == pytest.approx(2 / 3)


@pytest.mark.parametrize(
    ("settings", "error", "message"),
    [
        ({"confidence": "nope", "correct": "ok"}, ConfigError, "nope"),
        ({"confidence": "p +", "correct": "ok"}, ConfigError, "cannot parse"),
        ({"confidence": "model", "correct": "ok"}, ConfigError, "numeric"),
        ({"confidence": "p", "correct": "model"}, ConfigError, "boolean or 0/1"),
        ({"confidence": "pct", "correct": "ok"}, InputError, "outside [0, 1]"),
        ({"confidence": "p", "correct": "pct"}, InputError, "neither 0 nor 1"),
        ({"confidence": "p", "correct": "ok", "where": "p > 5"}, InputError, "no rows"),
        ({"confidence": "p", "correct": "ok", "by": ("tags",)}, ConfigError, "scalar values"),
    ],
)
def test_bad_expressions_and_values_are_explained(
    settings: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message.replace("[", r"\[")):
        _evaluate(_synthetic(50), bootstrap=0, **settings)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"confidence": "pp", "correct": "ok"},
            "--confidence 'pp': the table has no column 'pp'; did you mean 'p'",
        ),
        (
            {"confidence": "p", "correct": "okk = true"},
            "--correct 'okk = true': the table has no column 'okk'; did you mean 'ok'",
        ),
        (
            {"confidence": "p", "correct": "ok", "by": ("modle",)},
            "--by 'modle': the table has no column 'modle'; did you mean 'model'",
        ),
        (
            {"confidence": "p", "correct": "ok", "where": "nope > 1"},
            "--where 'nope > 1': the table has no column 'nope'",
        ),
    ],
)
def test_a_mistyped_column_is_named_with_a_suggestion(
    settings: dict[str, object], message: str
) -> None:
    """One line naming the flag, the missing column and close names; never polars' plan."""
    with pytest.raises(ConfigError) as caught:
        _evaluate(_synthetic(50), bootstrap=0, **settings)
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)
    assert "RESOLVING" not in str(caught.value)


def test_an_evaluation_failure_quotes_no_value() -> None:
    """A cast that fails on the data: polars quotes the failing values; rowgate does not."""
    table = _table(p=["0.5", "s3cr3t-value"], ok=[True, False])
    with pytest.raises(InputError) as caught:
        _evaluate(table, confidence="CAST(p AS DOUBLE)", correct="ok", bootstrap=0)
    assert "s3cr3t" not in str(caught.value)
    assert "check the types" in str(caught.value)


def test_any_score_ranks_for_selective_only() -> None:
    report = _evaluate(
        _synthetic(400), confidence="pct", correct="ok", calibration=False, bootstrap=0
    )
    assert "ece_equal_width" not in report.slices[0].summary
    assert 0 <= report.slices[0].summary["aurc"] <= 1


def test_nan_confidence_is_an_input_error() -> None:
    with pytest.raises(InputError, match="NaN"):
        _evaluate(_table(p=[0.5, float("nan")], y=[1, 0]), confidence="p", correct="y")


def test_null_rows_are_dropped_and_counted() -> None:
    report = _evaluate(
        _table(p=[0.5, None, 0.7, 0.8], y=[1, 1, None, 0]), confidence="p", correct="y", bootstrap=0
    )
    assert report.data["rows_dropped_null"] == 2
    assert report.data["rows_evaluated"] == 2


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"correct": "y"}, "exactly one"),
        ({"confidence": "p", "selected": "s", "correct": "y"}, "exactly one"),
        ({"confidence": "p"}, "correct"),
        ({"selected": "s", "correct": "y"}, "calibration needs"),
        ({"confidence": "p", "correct": "y", "bins": 0}, "bins"),
        ({"confidence": "p", "correct": "y", "bootstrap": -1}, "bootstrap"),
        ({"confidence": "p", "correct": "y", "coverages": (0.0,)}, "coverages"),
        ({"confidence": "p", "correct": "y", "target_risks": (1.5,)}, "target_risks"),
        ({"confidence": "p", "correct": "y", "level": 1.0}, "level"),
        ({"confidence": "p", "correct": "y", "by": ("m", "m")}, "distinct"),
        ({"preset": "nope", "calibration": False}, "unknown preset"),
        ({"preset": "pw-decide-row"}, "no confidence"),
        ({"preset": "pw-decide-row", "calibration": False, "correct": "y"}, "drop correct"),
    ],
)
def test_settings_validation(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ReportSettings(**settings).validate()  # type: ignore[arg-type]


def test_warnings_for_small_single_confidence_all_correct_and_all_wrong() -> None:
    n_big = 400
    rng = np.random.default_rng(3)
    groups = ["big"] * n_big + ["same"] * 10 + ["right"] * 10 + ["wrong"] * 10
    p = np.concatenate([rng.uniform(0, 1, n_big), np.full(10, 0.7), rng.uniform(0, 1, 20)])
    ok = np.concatenate([rng.random(n_big) < 0.5, [True, False] * 5, np.ones(10), np.zeros(10)])
    report = _evaluate(
        _table(g=groups, p=p, ok=ok.astype(bool)),
        confidence="p",
        correct="ok",
        by=("g",),
        bootstrap=0,
    )
    codes = {s.label: sorted(w["code"] for w in s.warnings) for s in report.slices}
    assert codes == {
        "all": [],
        "g=big": [],
        "g=right": ["all_correct", "small_slice"],
        "g=same": ["single_confidence", "small_slice"],
        "g=wrong": ["all_wrong", "small_slice"],
    }
    assert report.summary_table().filter(pl.col("slice") == "g=same")["warnings"].to_list() == [
        ["small_slice", "single_confidence"]
    ]


def test_bootstrap_is_deterministic_and_seeded(tmp_path: Path) -> None:
    settings = ReportSettings(confidence="p", correct="ok", by=("model",), bootstrap=200)
    first = evaluate(_synthetic(), settings.validate()).summary_table()
    again = evaluate(_synthetic(), settings.validate()).summary_table()
    other = evaluate(_synthetic(), dataclasses.replace(settings, seed=1).validate()).summary_table()
    assert first.equals(again)
    assert not first.equals(other)
    # point estimates do not depend on the seed, only intervals do
    assert first["ece_equal_width"].equals(other["ece_equal_width"])
    low, point, high = (
        first.row(0, named=True)["brier_low"],
        first["brier"][0],
        first["brier_high"][0],
    )
    assert low <= point <= high


def test_slice_intervals_do_not_move_when_slices_are_added() -> None:
    base = ReportSettings(confidence="p", correct="ok", bootstrap=100).validate()
    alone = evaluate(_synthetic(), base).summary_table().row(0, named=True)
    sliced = evaluate(_synthetic(), dataclasses.replace(base, by=("model",))).summary_table()
    assert sliced.row(0, named=True)["aurc_low"] == alone["aurc_low"]


@pytest.mark.slow
def test_written_report_is_strict_json_with_conventions(tmp_path: Path) -> None:
    report = _evaluate(_synthetic(500), confidence="p", correct="ok", by=("model",), bootstrap=50)
    paths = write_evaluation(report, tmp_path / "r")
    assert paths == [
        "bins.parquet",
        "rc_curve.parquet",
        "report.html",
        "report.json",
        "summary.parquet",
        "targets.parquet",
    ]
    document = json.loads((tmp_path / "r" / "report.json").read_text(), parse_constant=_reject)
    conventions = document["conventions"]
    assert "right" in conventions["calibration"]["bins"]["closed"]
    assert conventions["intervals"]["bootstrap"]["seed"] == 0
    assert conventions["intervals"]["bootstrap"]["percentiles"] == [2.5, 97.5]
    assert "mean of risks" in conventions["risk_coverage"]["aurc"]
    assert "grouped" in conventions["risk_coverage"]["ties"]
    assert [s["slice"] for s in document["slices"]] == ["all", "model=a", "model=b"]
    summary = pl.read_parquet(tmp_path / "r" / "summary.parquet")
    assert summary.height == 3
    curve = pl.read_parquet(tmp_path / "r" / "rc_curve.parquet")
    assert curve.filter(pl.col("slice") == "all")["coverage"].max() == 1.0
    with pytest.raises(OutputExistsError, match="--force"):
        write_evaluation(report, tmp_path / "r")
    write_evaluation(report, tmp_path / "r", force=True)


def _reject(constant: str) -> None:
    raise AssertionError(f"report.json holds {constant}")


@pytest.mark.slow
def test_pw_decide_row_preset_against_a_per_row_reference(sample_run: Path) -> None:
    settings = ReportSettings(
        preset="pw-decide-row", calibration=False, by=("host",), bootstrap=100
    )
    report = evaluate(load_table(str(sample_run), kind=settings.source_kind), settings.validate())
    rows = pl.read_parquet(sample_run / "accepted" / "pw-decide-row-1").to_dicts()
    for s in report.slices:
        mine = [r for r in rows if s.label == "all" or s.keys["host"] == r["host"]]
        answered = [r for r in mine if r["engine"]["state"] == "answered"]
        missed = [
            r for r in answered if not set(r["labels"]["tools"]) <= set(r["engine"]["preloaded"])
        ]
        assert s.summary["n"] == len(mine)
        assert s.summary["selected"] == len(answered)
        assert s.summary["errors"] == len(missed)
        assert s.summary["coverage"] == pytest.approx(len(answered) / len(mine))
        assert s.summary["risk"] == pytest.approx(len(missed) / len(answered))
        assert s.summary["risk_low"] <= s.summary["risk"] <= s.summary["risk_high"]
    assert report.preset is not None
    assert report.data["run_kind"] == "pw-decide-row-1"


def test_none_selected_warning() -> None:
    report = _evaluate(
        _table(s=[False] * 3, y=[True] * 3),
        selected="s",
        correct="y",
        calibration=False,
        bootstrap=10,
    )
    assert "none_selected" in {w["code"] for w in report.warnings}
    assert report.slices[0].summary["risk"] is None


def test_run_directory_with_several_kinds_needs_a_kind(sample_run: Path) -> None:
    with pytest.raises(ConfigError, match="choose one with --kind"):
        load_table(str(sample_run))
    with pytest.raises(InputError, match="no accepted rows of kind"):
        load_table(str(sample_run), kind="nope")
    table = load_table(str(sample_run), kind="math-reasoning-v1")
    assert table.run_kind == "math-reasoning-v1"


def test_jsonl_is_read_strictly(tmp_path: Path) -> None:
    good = tmp_path / "eval.jsonl"
    good.write_text('{"p": 0.9, "ok": true}\n{"p": 0.1, "ok": false}\n')
    assert load_table(str(good)).frame.collect().height == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"p": 0.9, "ok": true}\n{"p": 0.1, "p": 0.2, "ok": false}\n')
    with pytest.raises(InputError, match=r"bad.jsonl:2: json.duplicate_key"):
        load_table(str(bad))
    nan = tmp_path / "nan.jsonl"
    nan.write_text('{"p": NaN, "ok": true}\n')
    with pytest.raises(InputError, match=r"json\.non_finite"):
        load_table(str(nan))


def test_sources_globs_directories_and_formats(tmp_path: Path) -> None:
    frame = pl.DataFrame({"p": [0.5], "ok": [True]})
    frame.write_parquet(tmp_path / "a.parquet")
    frame.write_parquet(tmp_path / "b.parquet")
    assert load_table(str(tmp_path / "*.parquet")).frame.collect().height == 2
    assert load_table(str(tmp_path)).frame.collect().height == 2
    (tmp_path / "c.jsonl").write_text('{"p": 0.5, "ok": true}\n')
    with pytest.raises(InputError, match="mixes Parquet and JSONL"):
        load_table(str(tmp_path / "*"))
    with pytest.raises(InputError, match="no such file"):
        load_table(str(tmp_path / "missing.parquet"))
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(InputError, match="not a Parquet or JSONL"):
        load_table(str(tmp_path / "notes.txt"))


def test_an_existing_file_is_read_as_itself_never_as_a_glob(tmp_path: Path) -> None:
    """Paths are never globs: ``[a].parquet`` was tried as a pattern first and read
    ``a.parquet`` (7 rows) instead of itself (100 rows). Only a DATA that names nothing
    is a pattern."""
    pl.DataFrame({"p": [0.9] * 100, "ok": [True] * 100}).write_parquet(tmp_path / "[a].parquet")
    pl.DataFrame({"p": [0.9] * 7, "ok": [False] * 7}).write_parquet(tmp_path / "a.parquet")
    table = load_table(str(tmp_path / "[a].parquet"))
    assert table.files == [str(tmp_path / "[a].parquet")]
    assert table.frame.collect().height == 100
    assert named_paths(str(tmp_path / "[a].parquet")) == [tmp_path / "[a].parquet"]
    (tmp_path / "[a].parquet").unlink()  # now it names nothing: the pattern
    assert load_table(str(tmp_path / "[a].parquet")).frame.collect().height == 7
    assert named_paths(str(tmp_path / "[a].parquet")) == [tmp_path / "a.parquet"]
    assert named_paths(str(tmp_path / "missing.parquet")) == []
    # a name no file matches as a pattern: its columns were read through the pattern,
    # which named nothing ("not a readable Parquet file")
    pl.DataFrame({"p": [0.5] * 3, "ok": [True] * 3}).write_parquet(tmp_path / "b[1].parquet")
    assert load_table(str(tmp_path / "b[1].parquet")).frame.collect().height == 3


def test_a_file_changed_between_its_digest_and_its_rows_is_refused(tmp_path: Path) -> None:
    """A report hashes its files, then reads their rows: a file rewritten in between gave
    a report whose ``files_sha256`` named bytes its numbers did not come from."""
    path = tmp_path / "scores.parquet"
    pl.DataFrame({"p": [0.9] * 10, "ok": [True] * 10}).write_parquet(path)
    table = load_table(str(path))
    pl.DataFrame({"p": [0.1] * 10, "ok": [False] * 10}).write_parquet(path)
    settings = ReportSettings(confidence="p", correct="ok", bootstrap=0).validate()
    with pytest.raises(InputError, match="changed while the report read it"):
        evaluate(table, settings)
    assert evaluate(load_table(str(path)), settings).slices[0].summary["accuracy"] == 0


def test_a_directory_holding_parquet_and_jsonl_is_refused(tmp_path: Path) -> None:
    """As a glob matching both is: a directory holding both used to read its Parquet files
    only, leaving the JSONL rows out of the report without a word."""
    pl.DataFrame({"p": [0.5], "ok": [True]}).write_parquet(tmp_path / "a.parquet")
    (tmp_path / "b.jsonl").write_text('{"p": 0.5, "ok": false}\n')
    (tmp_path / "notes.txt").write_text("not data: ignored in a directory")
    with pytest.raises(InputError, match=r"mixes Parquet and JSONL files.*\*\*/\*\.parquet"):
        load_table(str(tmp_path))
    (tmp_path / "a.parquet").unlink()
    assert load_table(str(tmp_path)).frame.collect().height == 1


@pytest.mark.slow
def test_many_slices_draw_only_the_largest(tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    n = 900
    table = _table(p=rng.uniform(0, 1, n), ok=rng.random(n) < 0.5, g=rng.integers(0, 30, n))
    settings = ReportSettings(
        confidence="p", correct="ok", by=("g",), bootstrap=0, max_plotted_slices=4
    )
    report = evaluate(table, settings.validate())
    write_evaluation(report, tmp_path / "r")
    page = (tmp_path / "r" / "report.html").read_text()
    assert len(report.slices) == 31
    assert page.count("reliability diagram of") == 4
    assert "27 smaller slice(s) are not drawn" in page
    assert pl.read_parquet(tmp_path / "r" / "summary.parquet").height == 31


def test_report_json_carries_its_creation_time_and_input_digest(tmp_path: Path) -> None:
    """The AutoQA evaluation contract §13.2: a calibration profile identifies its date and
    the data it was measured on."""
    rows = pl.DataFrame({"p": [0.2, 0.4, 0.6, 0.8] * 10, "ok": [False, True, True, True] * 10})
    rows.head(20).write_parquet(tmp_path / "a.parquet")
    rows.tail(20).write_parquet(tmp_path / "b.parquet")
    settings = {"confidence": "p", "correct": "ok", "bootstrap": 0, "bins": 2}
    before = datetime.now(UTC).replace(microsecond=0)
    report = _evaluate(load_table(str(tmp_path)), **settings)
    document = report_document(report, {})
    after = datetime.now(UTC)
    created = datetime.fromisoformat(document["created"])
    assert document["created"].endswith("Z")
    assert before <= created <= after
    data = document["data"]
    digests = [
        hashlib.sha256((tmp_path / n).read_bytes()).hexdigest() for n in ("a.parquet", "b.parquet")
    ]
    assert data["files_sha256"] == digests
    assert (
        data["input_sha256"]
        == hashlib.sha256(json.dumps(digests, separators=(",", ":")).encode()).hexdigest()
    )
    # Other bytes, another digest, even under the same names.
    rows.head(21).write_parquet(tmp_path / "a.parquet")
    again = report_document(_evaluate(load_table(str(tmp_path)), **settings), {})
    assert again["data"]["input_sha256"] != data["input_sha256"]


def test_parquet_files_of_different_schemas_are_named(tmp_path: Path) -> None:
    """Files of one table with a column missing or of another type failed when the
    expressions were evaluated, and the message blamed the expressions."""
    pl.DataFrame({"confidence": [0.9], "correct": [True]}).write_parquet(tmp_path / "a.parquet")
    pl.DataFrame({"correct": [False], "confidence": [0.2]}).write_parquet(tmp_path / "b.parquet")
    assert load_table(str(tmp_path / "*.parquet")).frame.collect().height == 2  # any order
    pl.DataFrame({"confidence": ["0.4"], "correct": [True]}).write_parquet(tmp_path / "c.parquet")
    with pytest.raises(
        InputError, match=r"c\.parquet: column 'confidence' is String, in .*a\.parquet Float64"
    ):
        load_table(str(tmp_path / "*.parquet"))
    (tmp_path / "c.parquet").unlink()
    pl.DataFrame({"confidence": [0.4]}).write_parquet(tmp_path / "d.parquet")
    with pytest.raises(
        InputError, match=r"d\.parquet: has no column 'correct', which .*a\.parquet has"
    ):
        load_table(str(tmp_path / "*.parquet"))


def test_an_unreadable_parquet_file_is_an_input_error_naming_it(tmp_path: Path) -> None:
    """An empty, a truncated or a non-Parquet file was an internal error (exit 4); a page
    that does not decode was blamed on the report's expressions."""
    pl.DataFrame({"p": [0.2], "y": [1]}).write_parquet(tmp_path / "a.parquet")
    (tmp_path / "b.parquet").write_bytes(b"")
    with pytest.raises(InputError, match=r"b\.parquet: not a readable Parquet file"):
        load_table(str(tmp_path))
    (tmp_path / "b.parquet").write_bytes(b"PAR1" + bytes(range(256)) * 4)
    with pytest.raises(InputError, match=r"b\.parquet: not a readable Parquet file"):
        load_table(str(tmp_path / "b.parquet"))
    # a compressed data page corrupted inside: the footer reads, the page does not
    rows = pl.DataFrame({"p": [0.1, 0.2, 0.3] * 20_000, "y": [0, 1, 1] * 20_000})
    rows.write_parquet(tmp_path / "b.parquet", compression="zstd", statistics=False)
    damaged = bytearray((tmp_path / "b.parquet").read_bytes())
    damaged[44:244] = bytes(b ^ 0x5A for b in damaged[44:244])
    (tmp_path / "b.parquet").write_bytes(bytes(damaged))
    table = load_table(str(tmp_path))  # named, though polars' message names no file
    with pytest.raises(InputError, match=r"b\.parquet: cannot read the table: parquet"):
        _evaluate(table, confidence="p", correct="y", bootstrap=0)


def test_empty_data_is_refused_not_read_as_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pl.DataFrame({"p": [0.2], "y": [1]}).write_parquet(tmp_path / "a.parquet")
    monkeypatch.chdir(tmp_path)
    for data in ("", "  "):
        with pytest.raises(InputError, match="DATA is empty"):
            load_table(data)


def test_slices_with_lookalike_values_keep_apart() -> None:
    """Labels were ``by=value`` joined by ", ": a value holding ", b=" or the text "null"
    gave two slices one label, and the bins, curve and targets tables, keyed by it, mixed
    them."""
    table = _table(
        p=[0.2, 0.9, 0.4, 0.7],
        y=[1, 0, 1, 1],
        a=["1, b=2", "1", "x", "x"],
        b=["3", "2, b=3", None, "null"],
    )
    report = _evaluate(table, confidence="p", correct="y", by=("a", "b"), bootstrap=0)
    labels = [s.label for s in report.slices]
    assert labels == ["all", 'a=1, b="2, b=3"', 'a="1, b=2", b=3', 'a=x, b="null"', "a=x, b=null"]
    assert slice_label({"g": "x\x07"}) == 'g="x\\u0007"'  # a control character, escaped
    assert slice_label({"g": "x\ty"}) == 'g="x\\ty"'
    assert slice_label({"g": ""}) == 'g=""'
    assert slice_label({"g": "gpt 4 turbo"}) == "g=gpt 4 turbo"
    curve = report.curve_table()
    assert curve.group_by("slice", maintain_order=True).len()["len"].to_list() == [4, 1, 1, 1, 1]
    assert report.bins_table()["slice"].n_unique() == 5


@pytest.mark.parametrize("mode", ["confidence", "selected"])
def test_a_slice_named_like_a_summary_column_is_refused(mode: str) -> None:
    """``--by n`` overwrote summary.parquet's ``n`` with the slice values."""
    table = _table(p=[0.2, 0.9], y=[1, 0], n=["a", "b"], slice=["c", "d"], s=[True, False])
    expression: dict[str, object] = (
        {"confidence": "p"} if mode == "confidence" else {"selected": "s", "calibration": False}
    )
    for by in ("n", "slice", "warnings"):
        with pytest.raises(ConfigError, match=f"by: '{by}' is also the name of a summary column"):
            _evaluate(table, correct="y", by=(by,), bootstrap=0, **expression)
    report = _evaluate(table, correct="y", by=("CAST(n AS VARCHAR)",), bootstrap=0, **expression)
    assert report.summary_table()["n"].to_list() == [2, 1, 1]


def test_the_reserved_names_are_the_summary_columns() -> None:
    """The names a --by may not take are exactly summary.parquet's own columns, in each
    mode (``report selective`` refused ``--by brier``, a column it does not write)."""
    from pipeline.reports import evaluation

    table = _table(p=[0.2, 0.9, 0.5], y=[1, 0, 1], s=[True, False, True], brier=["a", "b", "a"])
    for settings, reserved in (
        ({"confidence": "p"}, evaluation._CALIBRATION_SUMMARY),
        ({"confidence": "p", "calibration": False}, evaluation._SELECTIVE_SUMMARY),
        ({"selected": "s", "calibration": False}, evaluation._OPERATING_SUMMARY),
    ):
        report = _evaluate(table, correct="y", bootstrap=0, **settings)
        assert set(report.summary_table().columns) == reserved
    sliced = _evaluate(table, confidence="p", correct="y", calibration=False, by=("brier",))
    assert sliced.summary_table()["brier"].to_list() == [None, "a", "b"]


def test_object_valued_slices_are_refused_and_values_never_merge() -> None:
    """Two objects whose fields print alike without quotes ({"1","2","3"}) were one
    slice; the error of a value that cannot be text quoted the values."""
    table = _table(
        p=[0.2, 0.9],
        y=[1, 0],
        o=[{"a": '1","2', "b": "3"}, {"a": "1", "b": '2","3'}],
        secret=[{"t": "SECRET-TOKEN", "u": None}, {"t": "x", "u": None}],
    )
    for by in ("o", "secret"):
        with pytest.raises(ConfigError, match=f"by '{by}': slices need scalar values") as caught:
            _evaluate(table, confidence="p", correct="y", by=(by,), bootstrap=0)
        assert "SECRET" not in str(caught.value)
    # scalar values are cut on the values themselves: each its own slice
    table = _table(p=[0.2, 0.9, 0.4], y=[1, 0, 1], f=[0.1, 0.30000000000000004, 0.3])
    report = _evaluate(table, confidence="p", correct="y", by=("f",), bootstrap=0)
    assert [s.summary["n"] for s in report.slices] == [3, 1, 1, 1]
    table = _table(p=[0.2, 0.9], y=[1, 0], g=[-0.0, 0.0])  # one value, one slice: g=0.0
    report = _evaluate(table, confidence="p", correct="y", by=("g",), bootstrap=0)
    assert [s.label for s in report.slices] == ["all", "g=0.0"]


@pytest.mark.parametrize("selected", [False, True])
def test_intervals_do_not_depend_on_the_order_rows_are_read(selected: bool) -> None:
    """The bootstrap drew row positions: the same rows shuffled gave other intervals."""
    rows = _synthetic(3000).frame.collect()
    shuffled = rows.sample(fraction=1.0, shuffle=True, seed=7)
    assert not rows.equals(shuffled)
    settings: dict[str, object] = {"correct": "ok", "by": ("model",), "bootstrap": 200}
    settings |= {"selected": "p > 0.5", "calibration": False} if selected else {"confidence": "p"}
    first, second = (
        _evaluate(LoadedTable(frame.lazy(), [], "parquet"), **settings).summary_table()
        for frame in (rows, shuffled)
    )
    assert first.equals(second)


def test_integer_scores_a_float_cannot_tell_apart_are_refused() -> None:
    """Int64 scores past 2**53 were cast to floats and merged into one tie group."""
    table = _table(p=[2**53, 2**53 + 1, 5], y=[1, 0, 1])
    with pytest.raises(InputError, match="its 3 distinct Int64 values are 2 as 64-bit floats"):
        _evaluate(table, confidence="p", correct="y", calibration=False, bootstrap=0)
    table = _table(p=[2**53, 2**53 + 2, 5], y=[1, 0, 1])  # each a float of its own
    report = _evaluate(table, confidence="p", correct="y", calibration=False, bootstrap=0)
    assert report.slices[0].summary["aurc"] == pytest.approx((1 + 1 / 2 + 1 / 3) / 3)


def test_negative_zero_is_the_threshold_zero_in_any_row_order() -> None:
    for order in ([0.0, -0.0], [-0.0, 0.0]):
        table = _table(p=order, y=[1, 0])
        report = _evaluate(table, confidence="p", correct="y", calibration=False, bootstrap=0)
        assert [math.copysign(1, t) for t in report.curve_table()["threshold"]] == [1.0]


def test_a_character_the_font_lacks_is_drawn_without_a_warning() -> None:
    """Each CJK character or emoji of a slice value printed a matplotlib warning on stderr."""
    import warnings

    from pipeline.reports import plots

    figure = plots.bar_figure("模型 😀", ["模型", "x\x07"], [1.0, 2.0], "rows")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert plots.figure_png(figure).startswith(b"\x89PNG")
