"""Scoring bindings that fail on a row's value: refused before any work where their types
say so, otherwise a clear error naming the binding; never a traceback, never a value."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import polars as pl
import pytest

from pipeline.core.config import ConfigError, load_campaign
from pipeline.core.expression_errors import failure_kind
from pipeline.jobs.run import run
from tests.conftest import ROOT
from tests.decide.stages.test_rubric_stages import campaign, record

#: planted in one row's rationale; an unbalanced parenthesis is not a valid regex
SECRET = "sk-live-PLANTED-4f1c9e"
CODE = (
    "code = \"COALESCE(golden_patch, CASE preference WHEN 'A' THEN response_a "
    "WHEN 'B' THEN response_b END)\""
)


def _planted_campaign(tmp_path: Path, old: str = "", new: str = "", extra: str = "") -> Path:
    path = campaign(tmp_path, extra=extra)
    if old:
        assert old in path.read_text()
        path.write_text(path.read_text().replace(old, new))
    planted = record("planted", rationale=f"Response A is better ({SECRET} see the tests")
    with open(tmp_path / "crafted.jsonl", "ab") as fh:
        fh.write(orjson.dumps(planted) + b"\n")
    return path


def _rowgate(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *arguments],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize(
    ("old", "new", "extra", "key"),
    [
        # evaluated by the scoring stage in this process
        ("", "", "\n[scoring.\"pairwise-v2\".applies]\ncorrectness = \"REGEXP_LIKE('x', rationale)\"\n",
         "scoring.pairwise-v2.applies.correctness"),
        # evaluated by the built-in gates' step in a worker process
        (CODE, "code = \"CASE WHEN REGEXP_LIKE('x', rationale) THEN response_a END\"", "",
         "scoring.pairwise-v2.code"),
    ],
    ids=["applies", "code"],
)  # fmt: skip
def test_a_binding_failing_on_a_value_names_itself_never_the_value(
    tmp_path: Path, old: str, new: str, extra: str, key: str
) -> None:
    """It passed the start-up checks, then crashed the run with a traceback whose polars
    message quoted the record values that failed (here, a secret in a rationale)."""
    config = _planted_campaign(tmp_path, old, new, extra)
    out = tmp_path / "out"
    done = _rowgate("run", "--config", str(config), "--out", str(out), "--workers", "2")
    assert done.returncode == 3, done.stderr
    assert SECRET not in done.stderr + done.stdout
    assert "Traceback" not in done.stderr
    assert key in done.stderr
    assert "REGEXP_LIKE('x', rationale)" in done.stderr
    assert "code-review-v1" in done.stderr
    assert "not a valid regular expression" in done.stderr
    assert not out.exists()
    assert not list(tmp_path.glob(".out.rowgate-tmp-*"))


@pytest.mark.parametrize(
    "source",
    ["CAST(rationale AS DOUBLE)", "rationale::int", "CAST(ratings.factuality AS TINYINT)"],
)
def test_a_cast_that_can_fail_on_a_value_is_refused_before_any_work(
    tmp_path: Path, source: str
) -> None:
    """A strict cast of text, or to a narrower integer, stops the run at the first value
    that does not convert, after the whole gate: refused at start-up, for TRY_CAST."""
    path = _planted_campaign(
        tmp_path, 'correctness = "ratings.factuality"', f'correctness = "{source}"'
    )
    with pytest.raises(ConfigError, match=r"criteria\.correctness: .* use TRY_CAST"):
        run(load_campaign(path), tmp_path / "out")
    assert not (tmp_path / "out").exists()
    done = _rowgate("run", "--config", str(path), "--out", str(tmp_path / "out"))
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "TRY_CAST" in done.stderr


def test_try_cast_and_lossless_casts_are_accepted(tmp_path: Path) -> None:
    """TRY_CAST is the drop-in for a cast that may fail: a value that does not convert is
    null, so the criterion is unknown for that row, never a pass."""
    path = _planted_campaign(
        tmp_path,
        'correctness = "ratings.factuality"',
        'correctness = "TRY_CAST(rationale AS DOUBLE) + CAST(ratings.factuality AS DOUBLE)"',
    )
    result = run(load_campaign(path), tmp_path / "out")
    states = result.manifest["global"]["scoring"]["pairwise-v2"]["states"]
    assert states["_criterion_correctness_state"] == {"unknown": 9}  # every gated row


def test_failure_kind_withholds_the_values_polars_quotes() -> None:
    frame = pl.DataFrame({"text": [SECRET, f"({SECRET}"]})
    for expr, expected in [
        (pl.col("text").cast(pl.Float64), "does not convert from str to f64"),
        (pl.lit("x").str.contains(pl.col("text")), "not a valid regular expression"),
    ]:
        with pytest.raises(pl.exceptions.PolarsError) as raised:
            frame.select(expr)
        assert SECRET in str(raised.value)  # what reached stderr before
        kind = failure_kind(raised.value)
        assert SECRET not in kind
        assert expected in kind


def test_two_bindings_failing_in_two_shards_name_the_first_shards(tmp_path: Path) -> None:
    """Scoring runs a shard at a time: every shard's task runs to its end, and the error
    raised is the first shard's (input order), whichever task failed first, for any
    worker count. An applies binding fails on a '[' in the first shard, a criterion on a
    '(' in the last."""
    first = "REGEXP_LIKE('x', REPLACE(REPLACE(rationale, '(', ''), '[', '('))"
    last = "CASE WHEN REGEXP_LIKE('x', REPLACE(rationale, '[', '')) THEN 5 ELSE 1 END"
    path = campaign(tmp_path, extra=f'\n[scoring."pairwise-v2".applies]\nreadability = "{first}"\n')
    path.write_text(
        path.read_text().replace('correctness = "ratings.factuality"', f'correctness = "{last}"')
        + "\n[engine]\nshard_bytes = 4096\n"
    )
    filler = [record(f"filler-{i}") for i in range(30)]
    rows = [record("early", rationale="Response A is better: it keeps the [first order."), *filler]
    rows.append(record("late", rationale="Response A is better: it keeps the (first order."))
    (tmp_path / "crafted.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    messages = set()
    for workers in (1, 2, 2):
        out = tmp_path / f"out{workers}"
        done = _rowgate("run", "--config", str(path), "--out", str(out), "--workers", str(workers))
        assert done.returncode == 3, done.stderr
        assert not out.exists()
        messages.add(done.stderr.strip().splitlines()[-1])
    [message] = messages
    assert "scoring.pairwise-v2.applies.readability" in message


@pytest.mark.parametrize(
    ("source", "what"),
    [
        ("ratings.factuality - AVG(ratings.factuality) + 3", "an aggregate"),
        ("MAX(ratings.factuality) OVER (PARTITION BY preference)", "a window function"),
        ("LAG(ratings.factuality) OVER (ORDER BY task_id)", "a window function"),
        ("RANK() OVER (ORDER BY ratings.style)", ""),
        ("ratings.factuality - QUANTILE_CONT(ratings.factuality, 0.5) + 3", "polars' Quantile"),
        ("COVAR(ratings.factuality, ratings.style) + ratings.factuality", "polars'"),
        ("CORR(ratings.factuality, ratings.style) + 3", "polars' Correlation"),
        ("LENGTH(STRING_AGG(rationale, ','))", "an aggregate"),
        ("COUNT(*)", "COUNT"),
        ("ROW_NUMBER() OVER ()", "polars' Range"),
    ],
)
def test_a_binding_reading_other_rows_is_refused_before_any_work(
    tmp_path: Path, source: str, what: str
) -> None:
    """Rows are scored a staged batch at a time: an aggregate or a window would give a
    row a value that depends on the rows the gate staged beside it."""
    path = _planted_campaign(
        tmp_path, 'correctness = "ratings.factuality"', f'correctness = "{source}"'
    )
    with pytest.raises(ConfigError, match=rf"criteria\.correctness: .* reads other rows \({what}"):
        run(load_campaign(path), tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "source",
    [
        "(ratings.factuality + ratings.reasoning) / 3",
        "COALESCE(ratings.factuality, 1)",
        "CASE WHEN LENGTH(rationale) > 3 THEN ratings.style ELSE 1 END",
        "GREATEST(ratings.style, 2)",
        "ARRAY_LENGTH(ARRAY_UNIQUE(messages)) + 2",
        # words that name polars' cross-row nodes, as text and as a pattern
        "CASE WHEN rationale = 'Len' OR rationale = 'Filter' OR STARTS_WITH(rationale, 'Sort') "
        "THEN 1 ELSE 4 END",
        "CASE WHEN COLUMNS('^preference$') = 'A' THEN 5 ELSE 1 END",
    ],
)
def test_a_binding_reading_its_own_row_is_not_refused(tmp_path: Path, source: str) -> None:
    """Functions of the row's own values, a list's own elements included, are not taken
    for aggregates."""
    path = _planted_campaign(
        tmp_path, 'correctness = "ratings.factuality"', f'correctness = "{source}"'
    )
    result = run(load_campaign(path), tmp_path / "out")
    assert result.manifest["counts"]["lines"] > 0
