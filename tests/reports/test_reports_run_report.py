"""``OUT/report.html`` of a run: listed in the manifest and verified, readable without
Parquet, degrading gracefully, deterministic, and free of record values."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.config import CampaignConfig, InputSpec, load_campaign
from pipeline.core.reasons import REASONS_TYPE, Disposition
from pipeline.decide import context as global_phase
from pipeline.decide.context import GlobalContext, OutputColumn
from pipeline.jobs.run import run
from pipeline.output.verify import verify_run
from pipeline.reports import run_report, svg
from pipeline.reports.run_report import render_run_report
from tests.conftest import DATA

SECRET = "sk-live-7f3a9c1e5b2d4a6f8e0c"  # planted in record values; must never reach the page


def _campaign(tmp_path: Path) -> CampaignConfig:
    """One export whose accepted, rejected and duplicate-marked rows all hold SECRET."""
    good = {
        "task_id": "t",
        "problem": SECRET,
        "assumptions": [],
        "derivation": [SECRET],
        "final_answer": SECRET,
        "reasoning_score": 2,
    }
    lines = [json.dumps(good | {"task_id": f"t{i}"}) for i in range(6)]
    lines += [
        json.dumps(good | {"task_id": 5, "extra": SECRET}),  # schema violations
        '{"task_id": "' + SECRET + '", "task_id": "x"}',  # duplicate key
        '{"problem": "' + SECRET + '", ',  # syntax
    ]
    source = tmp_path / "math.jsonl"
    source.write_text("\n".join(lines) + "\n")
    return CampaignConfig(inputs=(InputSpec(str(source), "math-reasoning-v1"),)).override(
        **{"engine.workers": 1}
    )


class MarkDuplicatesAndScore:
    """Stands in for dedupe and scoring: every third accepted row is a duplicate, every
    row gets a ``_score``, and a cluster table with a payload column is written."""

    name = "stand-in"
    order = 200

    def enabled(self, config: CampaignConfig) -> bool:
        return True

    def output_columns(self, ctx: GlobalContext, kind: str) -> Sequence[OutputColumn]:
        keep = frozenset({Disposition.ACCEPTED, Disposition.DUPLICATE})
        return [OutputColumn("_score", pa.float64(), keep)]

    def decide(self, ctx: GlobalContext, kind: str, rows: pl.DataFrame) -> pl.DataFrame | None:
        accepted = rows.filter(pl.col("_disposition") == "accepted").with_row_index("n")
        clusters = pa.table(
            {
                "cluster_id": [0, 1],
                "size": [3, 1],
                "kept": [{"_source": "x.jsonl", "_line": 1}, {"_source": "x.jsonl", "_line": 2}],
                "text": [SECRET, SECRET],
                "rule": ["exact", "exact"],
            }
        )
        ctx.write_artifact(f"dedupe/{kind}.parquet", clusters, kind)
        third = pl.col("n") % 3 == 2
        return accepted.select(
            "_shard",
            "_shard_line",
            _score=pl.col("n").cast(pl.Float64) / 10,
            _disposition=pl.when(third).then(pl.lit("duplicate")),
            _reasons_add=pl.when(third).then(
                pl.concat_list(
                    pl.struct(
                        code=pl.lit("dedupe.exact"), path=pl.lit(""), detail=pl.lit("same content")
                    )
                )
            ),
        )


@pytest.fixture(scope="module")
def sample_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("run") / "out"
    run(load_campaign(DATA / "campaign.toml").override(**{"engine.workers": 1}), out)
    return out


@pytest.mark.slow
def test_run_writes_a_verified_report(sample_run: Path) -> None:
    manifest = json.loads((sample_run / "manifest.json").read_text())
    (entry,) = manifest["reports"]
    assert entry["path"] == "report.html"
    assert entry["bytes"] == (sample_run / "report.html").stat().st_size
    assert all(o["path"] != "report.html" for o in manifest["outputs"])
    assert verify_run(sample_run).ok


def test_a_changed_report_fails_verification(sample_run: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    copy.mkdir()
    for path in sample_run.rglob("*"):
        target = copy / path.relative_to(sample_run)
        if path.is_dir():
            target.mkdir(exist_ok=True)
        else:
            target.write_bytes(path.read_bytes())
    (copy / "report.html").write_text("<html>changed</html>")
    report = verify_run(copy)
    assert not report.ok
    assert any("report.html" in p for p in report.problems)


def test_report_shows_dispositions_reasons_and_examples(sample_run: Path) -> None:
    page = (sample_run / "report.html").read_text()
    manifest = json.loads((sample_run / "manifest.json").read_text())
    for code in manifest["counts"]["by_reason"]["rejected"]:
        assert code in page
    assert "pairwise-v2.jsonl:" in page  # an example as file:line
    assert "No score columns" in page
    # the dedupe stage ran and found nothing: its 14 empty tables (7 kinds × clusters and
    # split groups) are not drawn, one line says so
    dedupe = [a for a in manifest["artifacts"] if a["path"].startswith("dedupe/")]
    assert len(dedupe) == 14
    assert all(a["rows"] == 0 for a in dedupe)
    assert "Nothing found in dedupe/clusters/ (7 empty table(s)) and " in page
    assert "dedupe/split_groups/ (7 empty table(s))" in page
    section = page[page.index("<h2>Duplicate clusters") : page.index("<h2>Score")]
    assert "<table" not in section
    assert "<figure" not in section
    # the charts are SVG: stacked dispositions and reason codes
    assert page.count('src="data:image/svg+xml;base64,') == 2
    assert "data:image/png" not in page


def test_reasons_table_is_complete_and_grouped_by_family(sample_run: Path) -> None:
    page = (sample_run / "report.html").read_text()
    manifest = json.loads((sample_run / "manifest.json").read_text())
    by_reason = manifest["counts"]["by_reason"]
    table = page[page.index("<h2>Reasons") : page.index("<h2>Duplicate")]
    rows = table.count("<tr><td>")
    assert rows == sum(len(codes) for codes in by_reason.values())  # one row per code
    families = {c.rpartition(".")[0] for codes in by_reason.values() for c in codes}
    assert table.count('<tr class="group">') == len(families)
    assert "semantic.pairwise-v2 · 9 row(s), 9 code(s)" in table


@pytest.mark.slow
def test_run_never_imports_matplotlib(tmp_path: Path) -> None:
    """`rowgate run` draws its report without matplotlib (it cost ~1 s per run)."""
    code = (
        "import sys\n"
        "from pipeline.cli import main\n"
        f"sys.argv = ['rowgate', 'run', '--config', {str(DATA / 'campaign.toml')!r}, "
        f"'--out', {str(tmp_path / 'out')!r}, '--workers', '1', '--quiet']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as exit:\n"
        "    assert not exit.code, exit.code\n"
        "print('matplotlib' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "out" / "report.html").is_file()
    assert done.stdout.strip() == "False"


def test_report_degrades_and_never_shows_values(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = _campaign(tmp_path)
    plain = run(config, tmp_path / "plain")
    monkeypatch.setattr(global_phase, "GLOBAL_STAGES", [MarkDuplicatesAndScore])
    staged = run(config, tmp_path / "staged")
    for result in (plain, staged):
        for path in result.out.rglob("*"):
            if path.suffix in (".html", ".json"):
                assert SECRET not in path.read_text(), path
    page = (tmp_path / "staged" / "report.html").read_text()
    assert "dedupe/math-reasoning-v1.parquet" in page
    assert "kept._source" in page
    assert "columns not shown (may hold record text): text" in page
    assert "_score" in page
    assert "dedupe.exact" in page
    assert "same content" in page
    assert verify_run(tmp_path / "staged").ok


@pytest.mark.slow
def test_report_is_deterministic_across_workers(tmp_path: Path) -> None:
    config = _campaign(tmp_path)
    one = run(config, tmp_path / "one")
    two = run(config.override(**{"engine.workers": 2}), tmp_path / "two")
    assert (one.out / "report.html").read_bytes() == (two.out / "report.html").read_bytes()
    assert render_run_report(one.out, one.manifest) == (one.out / "report.html").read_text()


_RENDER_TWICE = """
import json, resource, sys
from pathlib import Path
from pipeline.reports.run_report import render_run_report

peaks = []
for out in sys.argv[1:]:
    render_run_report(Path(out), json.loads((Path(out) / "manifest.json").read_text()))
    peaks.append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
print(peaks[1] - peaks[0])
"""


def _blank_line_run(out: Path, rows: int) -> Path:
    """An OUT as a run of ``rows`` blank lines leaves it: one rejected part (row groups
    of 4096 rows), each row carrying one reason, and the manifest the report reads."""
    (out / "rejected").mkdir(parents=True)
    reason = pa.array(
        [[{"code": "line.blank", "path": "", "detail": "empty or whitespace-only line"}]],
        REASONS_TYPE,
    )
    table = pa.table(
        {
            "_source": pa.repeat(pa.scalar("in.jsonl.gz"), rows),
            "_line": pa.array(range(1, rows + 1), pa.int64()),
            "_kind": pa.nulls(rows, pa.string()),
            "_reasons": reason.take(pa.array([0] * rows)),
        }
    )
    pq.write_table(table, out / "rejected" / "part-00000.parquet", row_group_size=4096)
    output = {"path": "rejected/part-00000.parquet", "disposition": "rejected", "kind": None}
    manifest = {
        "campaign": "blank",
        "counts": {
            "lines": rows,
            "by_disposition": {"rejected": rows},
            "by_reason": {"rejected": {"line.blank": rows}},
        },
        "conservation": {"ok": True},
        "inputs": [
            {
                "index": 0,
                "path": "in.jsonl.gz",
                "bytes": 1,
                "lines": rows,
                "sha256": "0" * 64,
                "compression": "gzip",
            },
        ],
        "outputs": [output | {"rows": rows, "bytes": 1, "sha256": "0" * 64}],
    }
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


def test_report_memory_does_not_grow_with_the_rows(tmp_path: Path) -> None:
    """The report collected every reason row of the run to pick three examples per code
    (~0.16 KB a row: 272 MB for a million blank lines, in the parent); it now reads a row
    group at a time and keeps only the examples. Rendering a million more rows costs
    (nearly) nothing more at the peak."""
    small = _blank_line_run(tmp_path / "small", 100_000)
    large = _blank_line_run(tmp_path / "large", 1_100_000)
    measured = subprocess.run(
        [sys.executable, "-c", _RENDER_TWICE, str(small), str(large)],
        capture_output=True,
        text=True,
        check=True,
    )
    growth = int(measured.stdout.split()[-1])
    assert growth < 48 << 20, f"{growth >> 20} MB more for 1M more rows"
    page = render_run_report(large, json.loads((large / "manifest.json").read_text()))
    assert "in.jsonl.gz:1 — empty or whitespace-only line; in.jsonl.gz:2" in page


def test_score_columns_without_values_draw_no_histogram(tmp_path: Path) -> None:
    """A score column whose rows are all null gets one line, not a 'no values' chart."""
    (tmp_path / "accepted").mkdir()
    pl.DataFrame(
        {"_source": ["a.jsonl"] * 2, "_line": [1, 2], "_score": [None, None]},
        schema_overrides={"_score": pl.Float64},
    ).write_parquet(tmp_path / "accepted" / "part-0.parquet")
    pl.DataFrame({"_source": ["a.jsonl"], "_line": [3], "_score": [0.5]}).write_parquet(
        tmp_path / "accepted" / "part-1.parquet"
    )
    entry = {"disposition": "accepted", "rows": 2}
    outputs = [
        entry | {"path": "accepted/part-0.parquet", "kind": "empty-kind"},
        entry | {"path": "accepted/part-1.parquet", "kind": "scored-kind"},
    ]
    section = run_report._scores(tmp_path, outputs)
    assert section.count("<figure>") == 1  # scored-kind only
    assert "No score values in: empty-kind: _score." in section
    assert "<td>empty-kind</td>" not in section


_VALUES = st.one_of(
    st.integers(-5, 40).map(float),
    st.floats(allow_nan=True, allow_infinity=True, width=32),
    st.sampled_from([math.nan, math.inf, -math.inf]),
)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_scores_read_in_batches_chart_and_sum_up_as_all_at_once(data: st.DataObject) -> None:
    """The score section reads the outputs a batch at a time, summing each column up per
    disposition and counting its histogram over the range those sums give: the chart is
    the one drawn from every value at once, byte for byte, and the table's rows, min and
    max are numpy's over every value (NaN where one is; the mean to rounding)."""
    groups = data.draw(
        st.dictionaries(
            st.sampled_from(["accepted", "quarantined", "duplicates"]),
            st.lists(_VALUES, max_size=40),
            min_size=1,
        ),
        label="groups",
    )
    summaries, pieces = {}, {}
    for name, values in groups.items():
        array = np.array(values, dtype=np.float64)
        cuts = sorted(data.draw(st.lists(st.integers(0, len(array)), max_size=3), label="cuts"))
        pieces[name] = np.split(array, cuts)
        summary = run_report._Summary()
        for piece in pieces[name]:
            summary.add(piece)
        summaries[name] = summary
    binned = run_report._binned(summaries)
    whole = {name: np.array(values) for name, values in groups.items() if values}
    if binned is None:
        assert not whole
        return
    for name, parts in pieces.items():
        for piece in parts if name in binned.counts else ():
            counted = np.histogram(piece[np.isfinite(piece)], bins=binned.edges)[0]
            np.add(binned.counts[name], counted, out=binned.counts[name])
    assert svg.binned_histogram_chart("t", binned, "u") == svg.histogram_chart("t", whole, "u")
    for name, values in whole.items():
        rows, mean, low, high = summaries[name].row()
        with np.errstate(all="ignore"):
            expected = (values.mean(), values.min(), values.max())
        assert rows == values.size
        assert [low, high] == pytest.approx(list(expected[1:]), nan_ok=True)
        assert mean == pytest.approx(expected[0], rel=1e-9, nan_ok=True)


def test_the_largest_clusters_are_kept_a_batch_at_a_time_as_sorted_whole(tmp_path: Path) -> None:
    """The report's largest clusters are read a batch at a time, keeping the largest so
    far: the rows shown are those of sorting the whole table (ties in file order, a null
    size first, as polars sorts it), across batches."""
    rows = 150_000  # three of pyarrow's batches
    rng = np.random.default_rng(3)
    sizes: list[int | None] = rng.integers(2, 40, rows).tolist()
    for at in rng.choice(rows, 5, replace=False):
        sizes[at] = None
    table = pl.DataFrame(
        {"cluster": np.arange(rows), "size": pl.Series(sizes, dtype=pl.Int64)}
    ).with_columns(kept=pl.struct(line=pl.col("cluster") * 2))
    table.write_parquet(tmp_path / "clusters.parquet", row_group_size=50_000)
    columns = [pl.col("cluster"), pl.col("size"), pl.col("kept").struct.field("line").alias("k")]
    whole = (
        table.select(columns)
        .sort("size", descending=True, maintain_order=True)
        .head(run_report.TOP_CLUSTERS)
    )
    assert run_report._largest(tmp_path / "clusters.parquet", columns, "size").equals(whole)
    assert whole["size"].null_count() == min(5, run_report.TOP_CLUSTERS)
