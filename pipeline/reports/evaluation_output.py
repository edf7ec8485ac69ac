"""Writing an evaluation report: ``report.json``, Parquet tables and ``report.html``.

::

    OUT/report.json         format, creation time, data (with the digest of every file
                            read), settings, expressions, conventions, versions, warnings,
                            and every slice's numbers (strict JSON: no NaN)
    OUT/summary.parquet     one row per slice
    OUT/bins.parquet        reliability bins of both schemes (scored reports)
    OUT/rc_curve.parquet    the risk-coverage curve of every slice (scored reports)
    OUT/targets.parquet     risk at coverage and coverage at risk (scored reports)
    OUT/report.html         the same, with plots, in one self-contained file

``OUT`` is written under a hidden sibling and renamed into place when complete, as a
run's output is.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, Final

from pipeline.output.manifest import dependency_versions
from pipeline.output.outdir import OutputClaim, atomic_directory
from pipeline.output.remote import RemoteClaim
from pipeline.reports import html, plots
from pipeline.reports.conventions import evaluation_conventions
from pipeline.reports.evaluation import EvaluationReport, SliceResult

__all__ = ["REPORT_FORMAT", "render_evaluation_html", "report_document", "write_evaluation"]

REPORT_FORMAT: Final = "rowgate-report/1"


def write_evaluation(
    report: EvaluationReport, out: Path | OutputClaim | RemoteClaim, *, force: bool = False
) -> list[str]:
    """Write every file of ``report`` into ``out`` atomically; return the names of the
    files written.

    ``out`` may be an output directory the command has already claimed
    (:func:`pipeline.output.outdir.claim_output`, which then decides on replacing it; on
    an object store, uploads it).

    Raises
    ------
    OutputExistsError
        ``out`` exists and ``force`` is false.
    """
    if isinstance(out, OutputClaim | RemoteClaim):
        staging = out.staging()
    else:
        staging = atomic_directory(out, force=force)
    with staging as tmp:
        tables = {"summary": report.summary_table()}
        if report.settings.mode == "scored":
            if report.settings.calibration:
                tables["bins"] = report.bins_table()
            tables["rc_curve"] = report.curve_table()
            tables["targets"] = report.targets_table()
        for name, frame in tables.items():
            frame.write_parquet(tmp / f"{name}.parquet", compression="zstd", statistics=True)
        document = report_document(report, {name: f"{name}.parquet" for name in tables})
        (tmp / "report.json").write_text(
            json.dumps(document, indent=2, allow_nan=False, ensure_ascii=False) + "\n", "utf-8"
        )
        (tmp / "report.html").write_text(render_evaluation_html(report, document), "utf-8")
        return sorted(p.name for p in tmp.iterdir())


def report_document(
    report: EvaluationReport, tables: dict[str, str], created: datetime | None = None
) -> dict[str, Any]:
    """The content of ``report.json``. ``created`` (default: now) is when the report was
    made, in UTC; ``data.input_sha256`` the digest of what it read (the AutoQA evaluation
    contract §13.2: a calibration profile identifies its date and data)."""
    settings = report.settings
    preset = report.preset
    versions = dependency_versions()
    created = created or datetime.now(UTC)
    document: dict[str, Any] = _jsonable(
        {
            "format": REPORT_FORMAT,
            "created": created.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
            "mode": settings.mode,
            "data": report.data,
            "settings": {
                "bins": settings.bins,
                "bootstrap": settings.bootstrap,
                "seed": settings.seed,
                "level": settings.level,
                "coverages": list(settings.coverages),
                "target_risks": list(settings.target_risks),
                "calibration": settings.calibration,
                "min_slice_rows": settings.min_slice_rows,
                "kind": settings.kind,
            },
            "expressions": {
                "confidence": preset.confidence_definition if preset else settings.confidence,
                "correct": preset.correct_definition if preset else settings.correct,
                "selected": preset.selected_definition if preset else settings.selected,
                "by": list(settings.by),
                "where": settings.where,
            },
            "preset": None
            if preset is None
            else {
                "name": preset.name,
                "kind": preset.kind,
                "description": preset.description,
                "rows": preset.rows_definition,
                "notes": list(preset.notes),
            },
            "conventions": evaluation_conventions(settings),
            "versions": versions,
            "warnings": report.warnings,
            "tables": tables,
            "slices": [_slice_document(s) for s in report.slices],
        }
    )
    return document


def _slice_document(result: SliceResult) -> dict[str, Any]:
    targets: dict[str, list[dict[str, Any]]] = {}
    for row in result.targets:
        entry = {k: v for k, v in row.items() if k not in ("slice", "metric") and v is not None}
        targets.setdefault(row["metric"], []).append(entry)
    return {"slice": result.label, "keys": result.keys, **result.summary, **targets}


def _jsonable(value: Any) -> Any:
    """Replace non-finite floats (undefined numbers) by null, recursively."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def _plotted(report: EvaluationReport) -> list[SliceResult]:
    """The slices drawn: the whole data and the largest others (ties by label order),
    in the report's own order (the tables' order), so every plot lists them alike."""
    overall, *rest = report.slices
    largest = sorted(rest, key=lambda s: -int(s.summary["n"]))
    drawn = {id(s) for s in largest[: report.settings.max_plotted_slices - 1]}
    return [overall, *(s for s in rest if id(s) in drawn)]


def _subtitle(report: EvaluationReport) -> str:
    """What was evaluated against what, in words, then the rows and slices."""
    settings = report.settings
    correct = report.preset.correct_definition if report.preset else settings.correct
    if settings.mode == "scored":
        what = "calibration and risk-coverage" if settings.calibration else "risk-coverage"
        confidence = report.preset.confidence_definition if report.preset else settings.confidence
        measured = f"{what} of {confidence} against {correct}"
    else:
        selected = report.preset.selected_definition if report.preset else settings.selected
        measured = f"coverage and risk of the rows where {selected}, against {correct}"
    data = report.data
    files = data.get("files") or []
    shown = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
    return (
        measured
        + f" · {data['rows_evaluated']:,} rows from {shown or 'a table'}"
        + (f" · preset {report.preset.name}" if report.preset else "")
        + f" · {len(report.slices)} slice(s)"
    )


def _interval(summary: dict[str, Any], name: str) -> str:
    low, high = summary.get(f"{name}_low"), summary.get(f"{name}_high")
    if low is None or high is None:
        return "–"
    return f"[{html.cell(low)}, {html.cell(high)}]"


def render_evaluation_html(report: EvaluationReport, document: dict[str, Any]) -> str:
    """The self-contained HTML page of an evaluation report."""
    settings = report.settings
    plotted = _plotted(report)
    subtitle = _subtitle(report)
    sections = []
    if report.preset is not None:
        notes = "".join(f"<li>{html.escape(n)}</li>" for n in report.preset.notes)
        label, definition = map(html.escape, report.preset.measured)
        sections.append(
            html.section(
                f"Preset {report.preset.name}",
                f"<p>{html.escape(report.preset.description)}</p>",
                f"<p>{label}: <code>{definition}</code>; "
                f"correct: <code>{html.escape(report.preset.correct_definition)}</code></p>",
                f"<ul>{notes}</ul>",
            )
        )
    if report.warnings:
        items = "".join(
            f"<li><b>{html.escape(w['slice'])}</b>: <code>{html.escape(w['code'])}</code> — "
            f"{html.escape(w['message'])}</li>"
            for w in report.warnings
        )
        sections.append(html.section("Warnings", f'<div class="warn"><ul>{items}</ul></div>'))
    if settings.mode == "scored":
        sections += _scored_sections(report, plotted)
    else:
        sections += _operating_point_sections(report, plotted)
    hidden = len(report.slices) - len(plotted)
    if hidden > 0:
        sections.append(
            f'<p class="meta">{hidden} smaller slice(s) are not drawn; every slice is in '
            "the tables and in report.json.</p>"
        )
    sections.append(_conventions_section(document))
    return html.page("rowgate evaluation report", subtitle, sections)


def _conventions_section(document: dict[str, Any]) -> str:
    """Expressions and settings as a table; the conventions, data and versions (long JSON)
    folded away and in ``report.json`` beside the page."""
    rows = [
        [name, value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)]
        for group in ("expressions", "settings")
        for name, value in document[group].items()
        if value not in (None, [])
    ]
    raw = json.dumps(
        {k: document[k] for k in ("data", "conventions", "versions")}, indent=2, ensure_ascii=False
    )
    return html.section(
        "Conventions and settings",
        '<p>Every number above depends only on these; all of them are in <a href="report.json">'
        "report.json</a> beside this page.</p>",
        html.table(["setting", "value"], rows),
        "<details><summary>data, conventions and versions (JSON)</summary><pre>"
        + html.escape(raw)
        + "</pre></details>",
    )


def _percent(level: float) -> str:
    """The interval level as given, never rounded to ``100%``.

    Examples
    --------
    >>> _percent(0.95), _percent(0.999), _percent(0.99999999999), _percent(0.07)
    ('95%', '99.9%', '99.999999999%', '7%')
    """
    return f"{(Decimal(repr(level)) * 100).normalize():f}%"


def _targets_table(report: EvaluationReport, metric: str, label: str) -> str:
    """One row per slice, one column per target: the value, its interval on a second line,
    and the achieved coverage or the confidence threshold on a third."""
    level = _percent(report.settings.level)
    targets = sorted(
        {t["target"] for s in report.slices for t in s.targets if t["metric"] == metric}
    )
    rows = []
    for s in report.slices:
        by_target = {t["target"]: t for t in s.targets if t["metric"] == metric}
        row: list[object] = [s.label]
        for target in targets:
            t = by_target.get(target)
            if t is None or t["value"] is None:
                row.append("–")
                continue
            lines = [html.cell(t["value"])]
            if t["low"] is not None:
                lines.append(f"[{html.cell(t['low'])}, {html.cell(t['high'])}]")
            if t["achieved_coverage"] is not None and metric == "risk_at_coverage":
                lines.append(f"at {html.cell(t['achieved_coverage'])}")
            elif t["threshold"] is not None:
                lines.append(f"≥ {html.cell(t['threshold'])}")
            row.append("\n".join(lines))
        rows.append(row)
    columns = ["slice", *(f"{label} {target:g}" for target in targets)]
    caption = f"value, {level} interval, and " + (
        "the coverage achieved" if metric == "risk_at_coverage" else "the confidence threshold"
    )
    return html.table(columns, rows, css_class="stacked") + f'<p class="meta">{caption}</p>'


def _scored_sections(report: EvaluationReport, plotted: list[SliceResult]) -> list[str]:
    sections = [
        _scored_summary_section(report),
        html.section(
            "Selective prediction targets",
            _targets_table(report, "risk_at_coverage", "risk at coverage"),
            _targets_table(report, "coverage_at_risk", "coverage at risk"),
        ),
        _slice_figures_section(report, plotted),
    ]
    if report.settings.calibration:
        sections.append(_reliability_section(report, plotted))
    return sections


def _scored_summary_section(report: EvaluationReport) -> str:
    """One row per slice: the point estimates, each interval beside its metric."""
    settings = report.settings
    calibration = settings.calibration
    columns = ["slice", "n", "accuracy", "mean confidence"]
    if calibration:
        columns += [
            "ECE (equal width)",
            "95 % CI",
            "ECE (equal mass)",
            "MCE",
            "RMSCE",
            "Brier",
            "95 % CI",
        ]
    columns += ["AURC", "95 % CI", "E-AURC", "95 % CI"]
    rows = []
    for s in report.slices:
        m = s.summary
        row: list[object] = [s.label, m["n"], m["accuracy"], m["mean_confidence"]]
        if calibration:
            row += [
                m["ece_equal_width"],
                _interval(m, "ece_equal_width"),
                m["ece_equal_mass"],
                m["mce"],
                m["rmsce"],
                m["brier"],
                _interval(m, "brier"),
            ]
        row += [m["aurc"], _interval(m, "aurc"), m["e_aurc"], _interval(m, "e_aurc")]
        rows.append(row)
    level = _percent(settings.level)
    columns = [c.replace("95 %", level) for c in columns]
    return html.section("Summary", html.table(columns, rows))


def _forest_panel(
    title: str, name: str, plotted: list[SliceResult]
) -> tuple[str, list[Any], list[Any], list[Any]]:
    """A forest plot's panel: the summary metric ``name`` of each plotted slice with its
    interval (``None`` where there is none)."""
    return (
        title,
        [s.summary[name] for s in plotted],
        [s.summary.get(f"{name}_low") for s in plotted],
        [s.summary.get(f"{name}_high") for s in plotted],
    )


def _slice_figures_section(report: EvaluationReport, plotted: list[SliceResult]) -> str:
    """The forest plot of ECE and AURC per slice, and the risk-coverage curves."""
    level = _percent(report.settings.level)
    panels = []
    if report.settings.calibration:
        panels.append(_forest_panel("ECE (equal width)", "ece_equal_width", plotted))
    panels.append(_forest_panel("AURC", "aurc", plotted))
    forest = plots.forest_figure([s.label for s in plotted], panels)
    figures = [
        html.image(
            plots.figure_png(forest),
            "forest plot of ECE and AURC per slice",
            f"per slice, {level} bootstrap intervals; dotted: all rows",
        )
    ]
    overall = report.slices[0]
    assert overall.curve is not None  # every scored slice has a curve
    curves = [(s.label, s.curve.coverage, s.curve.risk) for s in plotted if s.curve is not None]
    rc = plots.risk_coverage_figure(
        "risk-coverage (ties grouped)", curves, (overall.curve.coverage, overall.curve.optimal_risk)
    )
    figures.append(
        html.image(
            plots.figure_png(rc), "risk-coverage curves", "dashed: the optimal ranking of all rows"
        )
    )
    return html.section(
        "Per slice and risk-coverage", f'<div class="figures">{"".join(figures)}</div>'
    )


def _reliability_section(report: EvaluationReport, plotted: list[SliceResult]) -> str:
    """A reliability diagram (equal-width bins) per plotted slice."""
    diagrams = []
    for s in plotted:
        rows = [b for b in s.bins if b["scheme"] == "equal_width"]
        figure = plots.reliability_figure(
            f"{s.label}: ECE {s.summary['ece_equal_width']:.3f}, n = {s.summary['n']:,}",
            [b["lower"] for b in rows],
            [b["upper"] for b in rows],
            [b["n"] for b in rows],
            [b["mean_confidence"] for b in rows],
            [b["accuracy"] for b in rows],
            [b["wilson_low"] for b in rows],
            [b["wilson_high"] for b in rows],
        )
        diagrams.append(html.image(plots.figure_png(figure), f"reliability diagram of {s.label}"))
    return html.section(
        "Reliability diagrams (equal-width bins)",
        f'<p class="meta">{report.settings.bins} bins, right-closed; error bars are '
        f"{_percent(report.settings.level)} Wilson intervals of each bin's accuracy.</p>",
        f'<div class="figures">{"".join(diagrams)}</div>',
    )


def _operating_point_sections(report: EvaluationReport, plotted: list[SliceResult]) -> list[str]:
    level = _percent(report.settings.level)
    rows = [
        [
            s.label,
            s.summary["n"],
            s.summary["selected"],
            s.summary["errors"],
            s.summary["coverage"],
            _interval(s.summary, "coverage"),
            s.summary["risk"],
            _interval(s.summary, "risk"),
            f"[{html.cell(s.summary['risk_wilson_low'])}, {html.cell(s.summary['risk_wilson_high'])}]",
        ]
        for s in report.slices
    ]
    summary = html.table(
        [
            "slice",
            "n",
            "selected",
            "wrong",
            "coverage",
            f"{level} CI",
            "risk",
            f"{level} CI",
            "Wilson",
        ],
        rows,
    )
    points = plots.operating_points_figure(
        [s.label for s in plotted],
        [s.summary["coverage"] for s in plotted],
        [s.summary["risk"] for s in plotted],
        (
            [s.summary.get("coverage_low") for s in plotted],
            [s.summary.get("coverage_high") for s in plotted],
        ),
        (
            [s.summary.get("risk_low") for s in plotted],
            [s.summary.get("risk_high") for s in plotted],
        ),
    )
    forest = plots.forest_figure(
        [s.label for s in plotted],
        [_forest_panel(name, name, plotted) for name in ("coverage", "risk")],
    )
    figures = [
        html.image(
            plots.figure_png(points),
            "risk against coverage per slice",
            f"{level} bootstrap intervals",
        ),
        html.image(plots.figure_png(forest), "forest plot of coverage and risk per slice"),
    ]
    return [
        html.section("Summary", summary),
        html.section("Operating points", f'<div class="figures">{"".join(figures)}</div>'),
    ]
