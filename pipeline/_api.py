"""The public API's functions (``pipeline.__all__``): thin, documented doors into the library.

Each delegates to the module that owns the work (:mod:`pipeline.core.config`, :mod:`pipeline.jobs.run`,
:mod:`pipeline.output.verify`, :mod:`pipeline.reports`); this module only gives them stable names,
docstrings, and figures that render as PNG wherever they are displayed. ``import pipeline``
does not load it: :mod:`pipeline` lists the public names and resolves them on first use.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
from matplotlib.figure import Figure

from pipeline.core import config as _config
from pipeline.core.reasons import Disposition
from pipeline.gate.reader import InputError
from pipeline.jobs import run as _run
from pipeline.output import manifest as _manifest
from pipeline.output import verify as _verify
from pipeline.reports import plots
from pipeline.reports.evaluation import EvaluationReport, SliceResult
from pipeline.reports.evaluation import evaluate as _evaluate
from pipeline.reports.run_report import render_run_report
from pipeline.reports.settings import ReportSettings
from pipeline.reports.sources import LoadedTable, load_table


def load_campaign(path: str | Path) -> _config.CampaignConfig:
    """Load and validate a campaign TOML file.

    Relative paths inside the file (inputs, reference tables, schema and rubric
    directories) are resolved against the file's directory. Override single values with
    ``config.override(**{"engine.workers": 1})``, as the CLI's flags do.

    Raises
    ------
    ConfigError
        The file cannot be read, is not TOML, or holds an unknown key or a bad value
        (the message names its dotted path).

    Examples
    --------
    >>> import pipeline
    >>> config = pipeline.load_campaign("data/campaign.toml")
    >>> config.override(**{"engine.workers": 1}).engine.workers
    1
    """
    return _config.load_campaign(path)


def run_campaign(
    config: _config.CampaignConfig, out: str | Path, *, force: bool = False
) -> _run.RunResult:
    """Gate every input of ``config`` and write the run to ``out``, atomically.

    ``out`` appears only when the run is complete (``manifest.json``, ``accepted/``,
    ``rejected/``, ``quarantined/``, ``duplicates/``, ``report.html``); with ``force``
    an existing run directory (one rowgate wrote) is replaced.

    Returns
    -------
    RunResult
        ``out``, the manifest written (counts per disposition and reason, every output
        file) and per-shard summaries.

    Raises
    ------
    ConfigError, InputError, RunError
        A bad setting, an unreadable input, or a run that could not complete; nothing
        is written then.

    Notes
    -----
    Worker processes are spawned and import the main module again: call this under
    ``if __name__ == "__main__":`` in a script (a notebook needs no guard).

    Examples
    --------
    >>> import pipeline
    >>> config = pipeline.load_campaign("data/campaign.toml")
    >>> result = pipeline.run_campaign(config, "out")  # doctest: +SKIP
    >>> result.manifest["conservation"]["ok"]  # doctest: +SKIP
    True
    """
    return _run.run(config, Path(out), force=force)


def verify_run(out: str | Path, sources: str | Path | None = None) -> _verify.VerifyReport:
    """Recompute what the manifest of the run in ``out`` claims, as ``rowgate verify``.

    Checks input and output hashes, counts and conservation, lineage, the config digest,
    every pinned file and ``report.html`` (rendered again). ``sources`` is where to look
    for the inputs when they moved.

    Returns
    -------
    VerifyReport
        ``ok``, the ``problems`` found, ``notes`` on what could not be checked and the
        tally of what was.

    Examples
    --------
    >>> import pipeline
    >>> report = pipeline.verify_run("out")  # doctest: +SKIP
    >>> report.ok, report.problems  # doctest: +SKIP
    (True, [])
    """
    return _verify.verify_run(
        Path(out), None if sources is None else Path(sources), render_report=render_run_report
    )


def read_manifest(out: str | Path) -> dict[str, Any]:
    """The ``manifest.json`` of the run in ``out``, parsed.

    Raises
    ------
    ManifestError
        ``out`` holds no readable ``rowgate-run/1`` manifest.

    Examples
    --------
    >>> import pipeline
    >>> manifest = pipeline.read_manifest("out")  # doctest: +SKIP
    >>> manifest["counts"]["lines"] == manifest["conservation"]["lines"]  # doctest: +SKIP
    True
    """
    return _manifest.load_manifest(Path(out))


def scan_outputs(out: str | Path, disposition: str, kind: str | None = None) -> pl.LazyFrame:
    """The rows of one disposition of the run in ``out`` (and of one ``kind``), lazily.

    ``disposition`` is ``accepted``, ``rejected``, ``quarantined`` or ``duplicate``. Reads
    exactly the Parquet files the manifest lists, so a file OUT should not hold is never
    read. Rejected rows carry ``_reasons`` and ``_raw`` (the exact line bytes, to repair a
    line; it may hold secrets, so do not print it).

    Raises
    ------
    ValueError
        An unknown disposition, or several kinds of that disposition and no ``kind``
        (each kind has its own columns).
    InputError
        The run wrote no rows of that disposition (and kind).

    Examples
    --------
    >>> import pipeline
    >>> rejected = pipeline.scan_outputs("out", "rejected")  # doctest: +SKIP
    >>> reasons = rejected.select("_reasons").explode("_reasons").unnest("_reasons")  # doctest: +SKIP
    >>> reasons.group_by("code").len().collect()  # doctest: +SKIP
    """
    known = [d.value for d in Disposition]
    if disposition not in known:
        raise ValueError(f"disposition: {disposition!r} is not one of {', '.join(known)}")
    out = Path(out)
    found = [
        entry
        for entry in read_manifest(out)["outputs"]
        if entry.get("disposition") == disposition and (kind is None or entry.get("kind") == kind)
    ]
    kinds = sorted({entry.get("kind") or "" for entry in found})
    if kind is None and len(kinds) > 1:
        raise ValueError(
            f"kind: {out} holds {disposition} rows of several kinds ({', '.join(kinds)}); "
            "choose one"
        )
    if not found:
        wanted = disposition + (f" {kind}" if kind else "")
        raise InputError(f"{out}: the run wrote no {wanted} rows")
    return pl.scan_parquet(sorted(str(out / entry["path"]) for entry in found), glob=False)


def evaluate(
    data: str | Path | pl.DataFrame | pl.LazyFrame,
    settings: ReportSettings | None = None,
    **options: Any,
) -> EvaluationReport:
    """Calibration and risk-coverage numbers over ``data``, as ``rowgate report``.

    Parameters
    ----------
    data
        A run directory (its accepted rows of one kind), a Parquet or JSONL file, a
        directory or glob of them, or a polars frame.
    settings, **options
        A :class:`~pipeline.reports.settings.ReportSettings`, or its fields as keywords:
        ``confidence`` and ``correct`` (scored), ``selected`` and ``correct`` (the
        system's own abstention), or a ``preset`` (``autoqa-criteria`` is scored,
        ``pw-decide-row`` an abstention), ``by``, ``bins``, ``bootstrap``, ...

    Returns
    -------
    EvaluationReport
        ``slices`` (``all`` first, then one per ``by`` value) and the tables
        ``summary_table()``, ``bins_table()``, ``curve_table()``, ``targets_table()``.

    Raises
    ------
    ConfigError
        A bad setting or an expression that does not fit the data.
    InputError
        No rows to evaluate, or values out of range.

    Examples
    --------
    >>> import pipeline, polars as pl
    >>> rows = pl.DataFrame({"p": [0.25, 0.25, 0.55, 0.75, 0.75], "y": [0, 0, 1, 1, 1]})
    >>> report = pipeline.evaluate(rows, confidence="p", correct="y", bins=2, bootstrap=0)
    >>> round(report.slices[0].summary["ece_equal_width"], 4)
    0.29
    """
    if settings is not None and options:
        raise TypeError("give settings or keyword options, not both")
    settings = (settings or ReportSettings(**options)).validate()
    if isinstance(data, pl.DataFrame | pl.LazyFrame):
        table = LoadedTable(data.lazy(), [], "frame")
    else:
        table = load_table(str(data), kind=settings.source_kind)
    return _evaluate(table, settings)


@dataclass(frozen=True)
class ReportFigure:
    """A report figure: the matplotlib :class:`~matplotlib.figure.Figure` and its PNG.

    Displayed by Jupyter (or anything that reads ``_repr_png_``) as a PNG image, whatever
    the matplotlib backend, drawn the way the reports draw it (text literally, no
    ``$...$`` mathtext, deterministic bytes). No pyplot figure is ever opened.

    Examples
    --------
    >>> import pipeline
    >>> chart = pipeline.bar_figure("reasons", ["json.syntax"], [3], "rows")
    >>> chart.png()[:4]
    b'\\x89PNG'
    >>> chart.figure.axes[0].get_title()
    'reasons'
    """

    figure: Figure

    def png(self) -> bytes:
        """The figure as PNG bytes."""
        return plots.figure_png(self.figure)

    def save(self, path: str | Path) -> Path:
        """Write the PNG to ``path`` and return it."""
        path = Path(path)
        path.write_bytes(self.png())
        return path

    def _repr_png_(self) -> bytes:
        return self.png()


def bar_figure(
    title: str, labels: Sequence[str], values: Sequence[float], xlabel: str
) -> ReportFigure:
    """Horizontal bars, the first label on top (e.g. rows per reason code).

    Examples
    --------
    >>> import pipeline
    >>> pipeline.bar_figure("rejected lines", ["json.syntax", "schema.required"], [3, 1], "rows")
    ReportFigure(figure=<Figure size 700x184 with 1 Axes>)
    """
    return ReportFigure(plots.bar_figure(title, labels, values, xlabel))


def _slice(report: EvaluationReport, label: str) -> SliceResult:
    for found in report.slices:
        if found.label == label:
            return found
    known = ", ".join(s.label for s in report.slices)
    raise ValueError(f"no slice {label!r} in the report (slices: {known})")


def reliability_figure(report: EvaluationReport, label: str = "all") -> ReportFigure:
    """The reliability diagram of the slice ``label`` of a scored report (equal-width bins).

    Examples
    --------
    >>> import pipeline, polars as pl
    >>> rows = pl.DataFrame({"p": [0.25, 0.25, 0.55, 0.75, 0.75], "y": [0, 0, 1, 1, 1]})
    >>> report = pipeline.evaluate(rows, confidence="p", correct="y", bins=2, bootstrap=0)
    >>> len(pipeline.reliability_figure(report).figure.axes)
    2
    """
    chosen = _slice(report, label)
    if not report.settings.calibration:
        raise ValueError("the report has no calibration section (calibration=False)")
    rows = [b for b in chosen.bins if b["scheme"] == "equal_width"]
    keys = ("lower", "upper", "n", "mean_confidence", "accuracy", "wilson_low", "wilson_high")
    summary = chosen.summary
    title = f"{chosen.label}: ECE {summary['ece_equal_width']:.3f}, n = {summary['n']:,}"
    return ReportFigure(plots.reliability_figure(title, *[[b[k] for b in rows] for k in keys]))


def risk_coverage_figure(
    report: EvaluationReport, title: str = "risk-coverage (ties grouped)"
) -> ReportFigure:
    """Risk against coverage for every slice of a scored report, the optimal ranking of
    the whole data dashed.

    Examples
    --------
    >>> import pipeline, polars as pl
    >>> rows = pl.DataFrame({"p": [0.25, 0.25, 0.55, 0.75, 0.75], "y": [0, 0, 1, 1, 1]})
    >>> report = pipeline.evaluate(rows, confidence="p", correct="y", bins=2, bootstrap=0)
    >>> pipeline.risk_coverage_figure(report).figure.axes[0].get_xlabel()
    'coverage'
    """
    overall = report.slices[0]
    if overall.curve is None:
        raise ValueError("the report has no risk-coverage curve (it is not scored)")
    curves = [(s.label, s.curve.coverage, s.curve.risk) for s in report.slices if s.curve]
    optimal = (overall.curve.coverage, overall.curve.optimal_risk)
    return ReportFigure(plots.risk_coverage_figure(title, curves, optimal))


def operating_points_figure(report: EvaluationReport) -> ReportFigure:
    """Each slice of a report as a point on the risk-coverage plane, with its bootstrap
    intervals (the operating-point mode, e.g. the ``pw-decide-row`` preset).

    Examples
    --------
    >>> import pipeline, polars as pl
    >>> rows = pl.DataFrame({"s": [True, True, False, True], "y": [1, 0, 1, 1]})
    >>> report = pipeline.evaluate(rows, selected="s", correct="y", calibration=False, bootstrap=0)
    >>> pipeline.operating_points_figure(report).figure.axes[0].get_xlabel()
    'coverage (share answered)'
    """
    slices = report.slices

    def column(name: str) -> list[Any]:
        return [s.summary.get(name) for s in slices]

    return ReportFigure(
        plots.operating_points_figure(
            [s.label for s in slices],
            column("coverage"),
            column("risk"),
            (column("coverage_low"), column("coverage_high")),
            (column("risk_low"), column("risk_high")),
        )
    )
