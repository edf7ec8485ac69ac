"""``OUT/report.html``: a run explained to a person, without opening Parquet.

Rendered from the run's (temporary) output directory and its manifest just before the
manifest is written, and recorded in the manifest under ``reports`` with its SHA-256
(``rowgate verify`` checks it). It shows counts per kind and disposition, the top reason
codes with example line numbers, duplicate clusters when a ``dedupe/`` artifact exists,
and score distributions when the outputs carry score columns; it says so when a section
has nothing to show, so it works with whatever stages a run had.

Record values never reach the page: it reads only lineage columns (``_source``,
``_line``, ``_kind``), ``_reasons`` (codes, safe field paths and value-free details, by
the :class:`~pipeline.core.reasons.Reason` contract), numeric score columns that rowgate
added (``_``-prefixed), and columns of ``dedupe/`` tables that are numeric or whose names
say they hold lineage, rules or digests. Never ``_raw``, never a payload column.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, cast

import numpy as np
import numpy.typing as npt
import polars as pl

from pipeline.reports import html, svg
from pipeline.storage import ROW_GROUP_ROWS, parquet_batches

if TYPE_CHECKING:
    from polars._typing import PolarsDataType

__all__ = ["RUN_REPORT_NAME", "render_run_report", "write_run_report"]

RUN_REPORT_NAME: Final = "report.html"
#: reason codes drawn in the chart (the table lists every code), and examples per code
TOP_REASONS: Final = 20
EXAMPLES_PER_REASON: Final = 3
#: largest clusters listed per dedupe table
TOP_CLUSTERS: Final = 10
_DISPOSITIONS: Final = ("accepted", "quarantined", "duplicate", "rejected")
#: string columns of a dedupe/ table that may be shown: lineage, rules, digests, ids
_SAFE_TEXT: Final = re.compile(r"(source|line|rule|kind|split|sha256|digest|cluster|_id$|^id$)")
_SCORE: Final = re.compile(r"score")
#: rows of an output read at a time for the reasons' examples: a scored row holds a
#: few reasons with their details, exploded here (pyarrow's 65,536 rows a batch took
#: ~110 MB at the report's peak with code-review-v1's reasons; 8,192 take ~1/8 of it)
_REASON_BATCH_ROWS: Final = 8192
#: a score histogram's bins (:func:`~pipeline.reports.svg.histogram_chart`'s default)
_BINS: Final = 30
#: one colour per disposition in every chart (matplotlib's tab10, as the tables' order)
_COLOURS: Final = {
    "accepted": svg.TAB10[2],
    "quarantined": svg.TAB10[1],
    "duplicate": svg.TAB10[4],
    "rejected": svg.TAB10[3],
}


def write_run_report(out: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """Write ``out/report.html`` and return its manifest entry ``{path, bytes, sha256}``."""
    data = render_run_report(out, manifest).encode("utf-8")
    (out / RUN_REPORT_NAME).write_bytes(data)
    return {"path": RUN_REPORT_NAME, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def render_run_report(out: Path, manifest: dict[str, Any]) -> str:
    """The run report of the run in ``out`` described by ``manifest``, as HTML text."""
    counts = manifest["counts"]
    conservation = manifest["conservation"]
    subtitle = (
        f"campaign {manifest.get('campaign') or '(unnamed)'} · {counts['lines']:,} lines from "
        f"{len(manifest['inputs'])} input(s) · conservation "
        + ("ok" if conservation["ok"] else "FAILED")
        + f" · config {str(manifest.get('config_sha256') or 'defaults')[:12]}"
    )
    outputs = manifest["outputs"]
    sections = [
        _dispositions(out, manifest),
        _reasons(out, manifest),
        _duplicates(out, manifest),
        _scores(out, outputs),
        _inputs(manifest),
    ]
    return html.page("rowgate run report", subtitle, sections)


def _files(out: Path, entries: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in entries if (out / e["path"]).is_file()]


def _dispositions(out: Path, manifest: dict[str, Any]) -> str:
    counts = manifest["counts"]
    total = counts["lines"] or 1
    rows = [
        [d, counts["by_disposition"].get(d, 0), f"{counts['by_disposition'].get(d, 0) / total:.1%}"]
        for d in _DISPOSITIONS
    ]
    by_kind: dict[str, dict[str, int]] = {}
    for entry in manifest["outputs"]:
        if entry["disposition"] == "rejected":
            continue
        kind = entry["kind"] or "(none)"
        by_kind.setdefault(kind, {}).setdefault(entry["disposition"], 0)
        by_kind[kind][entry["disposition"]] += entry["rows"]
    for entry in _files(out, manifest["outputs"]):
        if entry["disposition"] != "rejected":
            continue
        # a row group at a time: a shard of blank lines holds millions of rejected rows
        for batch in parquet_batches(out / entry["path"], ["_kind"]):
            for counted in batch.column(0).value_counts().to_pylist():
                counts = by_kind.setdefault(counted["values"] or "(not routed)", {})
                counts["rejected"] = counts.get("rejected", 0) + counted["counts"]
    kinds = sorted(by_kind)
    table_rows = [[k, *(by_kind[k].get(d, 0) for d in _DISPOSITIONS)] for k in kinds]
    parts = [
        html.table(["disposition", "rows", "share"], rows),
        html.table(["kind", *_DISPOSITIONS], table_rows),
    ]
    if kinds:
        chart = svg.stacked_bar_chart(
            "rows per kind and disposition",
            kinds,
            {d: [by_kind[k].get(d, 0) for k in kinds] for d in _DISPOSITIONS},
            "rows",
            colours=_COLOURS,
        )
        parts.append(html.svg_image(chart, "rows per kind and disposition"))
    return html.section("Dispositions", *parts)


_EXAMPLE_COLUMNS: Final = ("disposition", "code", "_input", "_line", "_source", "path", "detail")


def _reason_examples(out: Path, manifest: dict[str, Any]) -> pl.DataFrame:
    """The first :data:`EXAMPLES_PER_REASON` reasons of each (disposition, code) in the
    order key, as (disposition, code, _input, _line, _source, path, detail).

    Read :data:`_REASON_BATCH_ROWS` rows at a time, keeping only the examples found so
    far: memory holds a batch and the examples, not every reason of the run (the report
    collected them all, ~0.4 KB a row: 5M blank lines took 1.9 GB in the parent)."""
    order = {entry["path"]: entry["index"] for entry in manifest["inputs"]}
    kept = pl.DataFrame(
        schema={
            "disposition": pl.String, "code": pl.String, "_input": pl.Int64,
            "_line": pl.Int64, "_source": pl.String, "path": pl.String, "detail": pl.String,
        }
    )  # fmt: skip
    for entry in _files(out, manifest["outputs"]):
        path = out / entry["path"]
        for batch in parquet_batches(path, ["_source", "_line", "_reasons"], _REASON_BATCH_ROWS):
            found = (
                cast(pl.DataFrame, pl.from_arrow(batch))
                .filter(pl.col("_reasons").list.len() > 0)
                .explode("_reasons")
                .unnest("_reasons")
            )
            if not found.height:
                continue
            found = found.with_columns(
                disposition=pl.lit(entry["disposition"]),
                _input=pl.col("_source").replace_strict(
                    order, default=len(order), return_dtype=pl.Int64
                ),
                _line=pl.col("_line").cast(pl.Int64),
            ).select(_EXAMPLE_COLUMNS)
            kept = (
                pl.concat([kept, found])
                .sort("_input", "_line", maintain_order=True)
                .group_by("disposition", "code", maintain_order=True)
                .head(EXAMPLES_PER_REASON)
            )
    return kept.sort("_input", "_line", maintain_order=True)


def _reasons(out: Path, manifest: dict[str, Any]) -> str:
    by_reason = manifest["counts"]["by_reason"]
    ranked = sorted(
        ((code, n, d) for d, codes in by_reason.items() for code, n in codes.items()),
        key=lambda item: (-item[1], item[0], item[2]),
    )
    if not ranked:
        return html.section(
            "Reasons", "<p>No row carries a reason: every line was accepted clean.</p>"
        )
    examples: dict[tuple[str, str], list[str]] = {}
    for d, code, source, line, path, detail in (
        _reason_examples(out, manifest)
        .select("disposition", "code", "_source", "_line", "path", "detail")
        .iter_rows()
    ):
        where = f"{source}:{line}" + (f" {path}" if path else "")
        examples.setdefault((d, code), []).append(where + (f" — {detail}" if detail else ""))
    top = ranked[:TOP_REASONS]
    chart = svg.bar_chart(
        f"top {len(top)} reason codes" if len(ranked) > len(top) else "reason codes",
        [f"{c} ({d})" for c, _, d in top],
        [n for _, n, _ in top],
        "rows",
        colour=_COLOURS["rejected"],
    )
    return html.section(
        "Reasons",
        "<p>Examples are the first rows in input order: file:line, the field path, and the "
        "rule's own explanation (never the value).</p>",
        _reason_table(ranked, examples),
        html.svg_image(chart, "rows per reason code"),
    )


def _reason_table(
    ranked: list[tuple[str, int, str]], examples: dict[tuple[str, str], list[str]]
) -> str:
    """Every reason code, under its family (``json``, ``schema``, ``semantic.<kind>`` …),
    families by their rows and codes by theirs, so the table stays complete and short."""
    families: dict[str, list[tuple[str, int, str]]] = {}
    for code, n, d in ranked:
        families.setdefault(code.rpartition(".")[0] or code, []).append((code, n, d))
    groups = []
    for family, members in sorted(families.items(), key=lambda f: -sum(n for _, n, _ in f[1])):
        total = sum(n for _, n, _ in members)
        heading = f"{family} · {total:,} row(s), {len(members)} code(s)"
        rows = [[code, d, n, "; ".join(examples.get((d, code), []))] for code, n, d in members]
        groups.append((heading, rows))
    return html.grouped_table(
        ["reason", "disposition", "rows", "examples"], groups, css_class="notes"
    )


def _is_safe(label: str, dtype: PolarsDataType) -> bool:
    if dtype.is_numeric() or dtype == pl.Boolean:
        return True
    return dtype == pl.String and _SAFE_TEXT.search(label.lower()) is not None


def _safe_columns(schema: pl.Schema) -> tuple[list[pl.Expr], list[str]]:
    """Columns of a dedupe/ table that cannot hold record text (struct fields flattened),
    and the labels of those left out."""
    chosen: list[pl.Expr] = []
    hidden: list[str] = []
    for name, dtype in schema.items():
        if isinstance(dtype, pl.Struct):
            for f in dtype.fields:
                label = f"{name}.{f.name}"
                if _is_safe(label, f.dtype):
                    chosen.append(pl.col(name).struct.field(f.name).alias(label))
                else:
                    hidden.append(label)
        elif _is_safe(name, dtype):
            chosen.append(pl.col(name))
        else:
            hidden.append(name)
    return chosen, hidden


def _duplicates(out: Path, manifest: dict[str, Any]) -> str:
    artifacts = [
        a for a in _files(out, manifest.get("artifacts", [])) if a["path"].startswith("dedupe/")
    ]
    duplicate_rows = manifest["counts"]["by_disposition"].get("duplicate", 0)
    if not artifacts:
        return html.section(
            "Duplicate clusters",
            f"<p>{duplicate_rows:,} rows were removed as duplicates. This run wrote no "
            "<code>dedupe/</code> cluster table (deduplication did not run or keeps none).</p>",
        )
    parts = [f"<p>{duplicate_rows:,} rows were removed as duplicates.</p>"]
    empty: dict[str, int] = {}
    for artifact in artifacts:
        if artifact["rows"] == 0:
            folder = artifact["path"].rpartition("/")[0]
            empty[folder] = empty.get(folder, 0) + 1
            continue
        frame = pl.scan_parquet(out / artifact["path"], glob=False)
        schema = frame.collect_schema()
        columns, hidden = _safe_columns(schema)
        size = next((n for n, t in schema.items() if "size" in n.lower() and t.is_integer()), None)
        if size is not None and columns:
            top = _largest(out / artifact["path"], columns, size)
        else:
            shown = frame.select(columns) if columns else frame.select(pl.len().alias("rows"))
            top = shown.head(TOP_CLUSTERS).collect()
        note = (
            f'<p class="meta">{artifact["path"]}: {artifact["rows"]:,} rows'
            + (f", largest {TOP_CLUSTERS} by {size}" if size else f", first {TOP_CLUSTERS}")
            + (f"; columns not shown (may hold record text): {', '.join(hidden)}" if hidden else "")
            + "</p>"
        )
        parts += [note, html.table(top.columns, top.rows())]
        if size is not None:
            binned = _column_histogram(out / artifact["path"], size, "clusters")
            if binned is not None:
                chart = svg.binned_histogram_chart(
                    f"cluster sizes ({artifact['path']})", binned, size
                )
                parts.append(html.svg_image(chart, "cluster size distribution"))
    if empty:
        listed = " and ".join(f"{folder}/ ({n} empty table(s))" for folder, n in empty.items())
        parts.append(f'<p class="meta">Nothing found in {listed}; empty tables are not shown.</p>')
    return html.section("Duplicate clusters", *parts)


def _score_columns(schema: pl.Schema) -> list[tuple[str, pl.Expr]]:
    found = []
    for name, dtype in schema.items():
        if not name.startswith("_"):
            continue  # payload columns are the record's own data, never plotted
        if dtype.is_numeric() and _SCORE.search(name) and name not in ("_line", "_offset"):
            found.append((name, pl.col(name)))
        elif isinstance(dtype, pl.Struct):
            for field in dtype.fields:
                label = f"{name}.{field.name}"
                if field.dtype.is_numeric() and _SCORE.search(label):
                    found.append((label, pl.col(name).struct.field(field.name)))
    return found


#: a score column of one kind: (kind, the column's label)
_Key = tuple[str, str]


@dataclass
class _Summary:
    """One kind's score column in one disposition, read a batch at a time: its values
    (not null) for the table, and its finite values for the histogram."""

    count: int = 0
    total: float = 0.0
    nan: bool = False
    low: float = math.inf
    high: float = -math.inf
    finite: int = 0
    finite_low: float = math.inf
    finite_high: float = -math.inf
    integer: bool = True

    def add(self, values: npt.NDArray[np.float64]) -> None:
        self.count += values.size
        with np.errstate(invalid="ignore"):  # inf and -inf sum to NaN, as numpy's mean
            self.total += float(values.sum())
        self.nan |= bool(np.isnan(values).any())
        numbers = values[~np.isnan(values)]
        if numbers.size:
            self.low, self.high = min(self.low, numbers.min()), max(self.high, numbers.max())
        finite = values[np.isfinite(values)]
        if finite.size:
            self.finite += finite.size
            self.finite_low = min(self.finite_low, float(finite.min()))
            self.finite_high = max(self.finite_high, float(finite.max()))
            self.integer &= bool(np.all(finite == np.round(finite)))

    def row(self) -> tuple[int, float, float, float]:
        """Rows, mean, min and max, as numpy gives them over every value (NaN if any is)."""
        if self.nan:
            return self.count, math.nan, math.nan, math.nan
        return self.count, self.total / self.count, float(self.low), float(self.high)


def _score_batches(
    out: Path, outputs: list[dict[str, Any]]
) -> Iterator[tuple[str, str, pl.DataFrame]]:
    """Each scored output's score columns (as Float64, by label) a row group at a time,
    with its kind and disposition: the outputs' scores are never all in memory (they
    were ~280 bytes a row of the report's peak with code-review-v1's scores)."""
    for entry in _files(out, outputs):
        if entry["disposition"] == "rejected":
            continue
        columns = _score_columns(pl.scan_parquet(out / entry["path"], glob=False).collect_schema())
        if not columns:
            continue
        roots = sorted({r for _, expr in columns for r in expr.meta.root_names()})
        exprs = [expr.cast(pl.Float64).alias(label) for label, expr in columns]
        for batch in parquet_batches(out / entry["path"], roots):
            frame = cast(pl.DataFrame, pl.from_arrow(batch))
            yield entry["kind"] or "(none)", entry["disposition"], frame.select(exprs)


def _scores(out: Path, outputs: list[dict[str, Any]]) -> str:
    """Each score column's rows, mean, min and max per kind and disposition, and its
    histogram: read twice a batch at a time, for the summaries and then the counts in
    each bin of the range they give."""
    summaries: dict[_Key, dict[str, _Summary]] = {}
    for kind, disposition, got in _score_batches(out, outputs):
        for label in got.columns:
            summary = summaries.setdefault((kind, label), {}).setdefault(disposition, _Summary())
            summary.add(got[label].drop_nulls().to_numpy())
    if not summaries:
        return html.section(
            "Score distributions",
            "<p>No score columns in this run's outputs (rubric scoring did not run).</p>",
        )
    charted = {key: _binned(groups) for key, groups in summaries.items()}
    for kind, disposition, got in _score_batches(out, outputs):
        for label in got.columns:
            binned = charted[(kind, label)]
            if binned is not None and disposition in binned.counts:
                _count(binned, disposition, got[label].drop_nulls().to_numpy())
    parts = []
    rows = []
    without: list[str] = []
    for (kind, label), by_disposition in sorted(summaries.items()):
        groups = {d: summary for d, summary in by_disposition.items() if summary.count}
        binned = charted[(kind, label)]
        if binned is None:
            without.append(f"{kind}: {label}")
            continue
        for d, summary in groups.items():
            rows.append([kind, label, d, *summary.row()])
        chart = svg.binned_histogram_chart(f"{kind}: {label}", binned, label, colours=_COLOURS)
        parts.append(html.svg_image(chart, f"distribution of {label} for {kind}"))
    shown = []
    if rows:
        shown = [
            html.table(["kind", "column", "disposition", "rows", "mean", "min", "max"], rows),
            f'<div class="figures">{"".join(parts)}</div>',
        ]
    if without:
        shown.append(f'<p class="meta">No score values in: {", ".join(without)}.</p>')
    return html.section("Score distributions", *shown)


def _largest(path: Path, columns: list[pl.Expr], size: str) -> pl.DataFrame:
    """The :data:`TOP_CLUSTERS` rows of a Parquet table with the largest ``size`` (ties
    in file order), as ``columns`` show them: read a row group at a time, keeping the
    largest so far (sorting the table whole held the shown columns of every cluster, a row
    per cluster; pyarrow's batches of 65,536 rows held +41 MB on 233,557 clusters, a row
    group's +16 MB). The kept rows come before a batch's and the sort is stable, so the rows
    kept are those of the whole table's sort."""
    roots = sorted({root for expr in columns for root in expr.meta.root_names()})
    kept = None
    for batch in parquet_batches(path, roots, ROW_GROUP_ROWS):
        part = cast(pl.DataFrame, pl.from_arrow(batch)).select(columns)
        joined = part if kept is None else pl.concat([kept, part])
        kept = joined.sort(size, descending=True, maintain_order=True).head(TOP_CLUSTERS)
    if kept is None:  # no batch: the table's columns, no row
        return pl.scan_parquet(path, glob=False).select(columns).head(0).collect()
    return kept


def _column_histogram(path: Path, column: str, name: str) -> svg.Binned | None:
    """The histogram of a Parquet file's numeric ``column`` (its values that are not
    null) as one group ``name``, read a batch at a time, twice (as :func:`_scores`);
    ``None`` where it has no value. A dedupe cluster table has a row per cluster: as
    many as half the rows of a run."""

    def batches() -> Iterator[npt.NDArray[np.float64]]:
        for batch in parquet_batches(path, [column], ROW_GROUP_ROWS):
            values = cast(pl.DataFrame, pl.from_arrow(batch))[column].drop_nulls()
            yield values.cast(pl.Float64).to_numpy()

    summary = _Summary()
    for values in batches():
        summary.add(values)
    binned = _binned({name: summary})
    if binned is not None and name in binned.counts:
        for values in batches():
            _count(binned, name, values)
    return binned


def _count(binned: svg.Binned, name: str, values: npt.NDArray[np.float64]) -> None:
    """Add ``values``' finite ones to group ``name``'s counts in ``binned``'s bins."""
    counts = np.histogram(values[np.isfinite(values)], bins=binned.edges)[0]
    np.add(binned.counts[name], counts, out=binned.counts[name])


def _binned(by_disposition: dict[str, _Summary]) -> svg.Binned | None:
    """The histogram's edges over the dispositions' finite values (as
    :func:`~pipeline.reports.svg.histogram_chart` finds them), its counts still zero;
    ``None`` where no disposition has a value."""
    groups = {d: summary for d, summary in by_disposition.items() if summary.count}
    if not groups:
        return None
    finite = [summary for summary in groups.values() if summary.finite]
    integer = bool(finite) and all(summary.integer for summary in finite)
    low = min((s.finite_low for s in finite), default=0.0)
    high = max((s.finite_high for s in finite), default=0.0)
    edges = svg.histogram_edges(low, high, _BINS, integer=integer, empty=not finite)
    counts = {d: np.zeros(len(edges) - 1, np.int64) for d, s in groups.items() if s.finite}
    return svg.Binned(edges, counts, {d: s.finite for d, s in groups.items()}, integer)


def _inputs(manifest: dict[str, Any]) -> str:
    inputs = [
        [
            e["path"],
            e.get("kind") or "(by record)",
            e.get("split") or "",
            e["compression"],
            e["bytes"],
            e["lines"],
            e["sha256"],
        ]
        for e in manifest["inputs"]
    ]
    schemas = [
        [k, v.get("title", ""), v["sha256"]] for k, v in sorted(manifest.get("schemas", {}).items())
    ]
    artifacts = [
        [a["path"], a.get("kind") or "", a["rows"], a["sha256"]]
        for a in manifest.get("artifacts", [])
    ]
    parts = [
        html.table(
            ["input", "kind", "split", "compression", "bytes", "lines", "sha256"],
            inputs,
            css_class="notes",
        ),
        html.table(["kind", "schema", "sha256"], schemas, css_class="notes"),
    ]
    if artifacts:
        parts.append(
            html.table(["artifact", "kind", "rows", "sha256"], artifacts, css_class="notes")
        )
    notes = manifest.get("global") or {}
    if notes:
        parts.append(
            "<details><summary>stage notes</summary><pre>"
            + html.escape(json.dumps(notes, indent=2, ensure_ascii=False, sort_keys=True))
            + "</pre></details>"
        )
    parts.append(
        '<p class="meta">Every output file, its SHA-256, the effective config, versions and '
        "timings are in manifest.json; <code>rowgate verify</code> re-checks them.</p>"
    )
    return html.section("Inputs, schemas and artifacts", *parts)
