"""The evaluation report's numbers: rows → slices → calibration and selective metrics.

:func:`evaluate` resolves the settings' expressions against the table, drops and counts
rows it cannot use, validates what is left (confidence finite and, for calibration, in
[0, 1]; correctness boolean or 0/1), and computes every slice with vectorised numpy:
point estimates, then bootstrap replicates of the same statistics in chunks. It returns
plain tables (polars) and dictionaries; writing them is
:mod:`pipeline.reports.evaluation_output`'s job.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import polars as pl

from pipeline.core.config import ConfigError, did_you_mean
from pipeline.core.expression_errors import EVALUATION_ERRORS, failure_kind, first_line
from pipeline.gate.reader import InputError
from pipeline.reports.bootstrap import (
    normal_quantile,
    percentile_interval,
    resample_chunks,
    slice_generator,
)
from pipeline.reports.calibration import (
    assign_bins,
    brier_score,
    calibration_errors,
    equal_mass_edges,
    equal_width_edges,
    reliability_bins,
    resampled_calibration,
    wilson_interval,
)
from pipeline.reports.presets import PRESETS, Preset
from pipeline.reports.selective import (
    RiskCoverageCurve,
    SelectiveMetrics,
    TieGroups,
    resampled_operating_point,
    resampled_selective,
    risk_coverage_curve,
    tie_groups,
)
from pipeline.reports.settings import ReportSettings
from pipeline.reports.sources import LoadedTable, first_unreadable

__all__ = ["EvaluationReport", "SliceResult", "evaluate", "slice_label"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

OVERALL: Final = "all"
_CONFIDENCE: Final = "__rowgate_confidence"
_CORRECT: Final = "__rowgate_correct"
_SELECTED: Final = "__rowgate_selected"
_BY: Final = "__rowgate_by_"
_ENDS: Final = ("", "_low", "_high")  # a metric and its interval


@dataclass
class SliceResult:
    """One slice: its identity, summary numbers, and the arrays the plots need."""

    label: str
    keys: dict[str, str | None]
    summary: dict[str, Any]
    warnings: list[dict[str, str]] = field(default_factory=list)
    #: rows of the bins table (both schemes)
    bins: list[dict[str, Any]] = field(default_factory=list)
    curve: RiskCoverageCurve | None = None
    #: rows of the targets table (risk at coverage, coverage at risk)
    targets: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class EvaluationReport:
    """Everything a report writes, computed; see :func:`evaluate`."""

    settings: ReportSettings
    preset: Preset | None
    data: dict[str, Any]
    slices: list[SliceResult]

    @property
    def warnings(self) -> list[dict[str, str]]:
        return [w for s in self.slices for w in s.warnings]

    def summary_table(self) -> pl.DataFrame:
        """One row per slice (``all`` first)."""
        by = list(self.settings.by)
        rows = [
            {"slice": s.label, **{b: s.keys.get(b) for b in by}, **s.summary}
            | {"warnings": [w["code"] for w in s.warnings]}
            for s in self.slices
        ]
        schema: dict[str, Any] = {"slice": pl.String, **dict.fromkeys(by, pl.String)}
        for name, value in self.slices[0].summary.items():
            schema[name] = pl.Int64 if isinstance(value, int) else pl.Float64
        schema["warnings"] = pl.List(pl.String)
        return pl.DataFrame(rows, schema=schema, orient="row")

    def bins_table(self) -> pl.DataFrame:
        rows = [row for s in self.slices for row in s.bins]
        return pl.DataFrame(rows, schema=_BINS_SCHEMA, orient="row")

    def curve_table(self) -> pl.DataFrame:
        frames = [
            pl.DataFrame(
                {
                    "slice": [s.label] * s.curve.threshold.size,
                    "threshold": s.curve.threshold,
                    "selected": s.curve.selected.astype(np.int64),
                    "errors": s.curve.errors.astype(np.int64),
                    "coverage": s.curve.coverage,
                    "risk": s.curve.risk,
                    "optimal_risk": s.curve.optimal_risk,
                },
                schema=_CURVE_SCHEMA,
            )
            for s in self.slices
            if s.curve is not None
        ]
        return pl.concat(frames) if frames else pl.DataFrame(schema=_CURVE_SCHEMA)

    def targets_table(self) -> pl.DataFrame:
        rows = [row for s in self.slices for row in s.targets]
        return pl.DataFrame(rows, schema=_TARGETS_SCHEMA, orient="row")


#: summary.parquet's columns beside the --by ones, by mode (a --by may not take one)
_SELECTIVE_SUMMARY: Final = frozenset(
    {"slice", "warnings", "n", "accuracy", "mean_confidence", "aurc_optimal"}
    | {f"{m}{end}" for m in ("aurc", "e_aurc") for end in _ENDS}
)
_CALIBRATION_SUMMARY: Final = _SELECTIVE_SUMMARY | frozenset(
    {"ece_equal_mass", "mce", "rmsce", "equal_mass_bins"}
    | {f"{m}{end}" for m in ("ece_equal_width", "brier") for end in _ENDS}
)
_OPERATING_SUMMARY: Final = frozenset(
    {"slice", "warnings", "n", "selected", "errors"}
    | {f"{m}{end}" for m in ("coverage", "risk") for end in _ENDS}
    | {f"{m}_wilson{end}" for m in ("coverage", "risk") for end in _ENDS[1:]}
)

_BINS_SCHEMA: Final = {
    "slice": pl.String,
    "scheme": pl.String,
    "bin": pl.Int64,
    "lower": pl.Float64,
    "upper": pl.Float64,
    "closed": pl.String,
    "n": pl.Int64,
    "mean_confidence": pl.Float64,
    "accuracy": pl.Float64,
    "wilson_low": pl.Float64,
    "wilson_high": pl.Float64,
}
_CURVE_SCHEMA: Final = {
    "slice": pl.String,
    "threshold": pl.Float64,
    "selected": pl.Int64,
    "errors": pl.Int64,
    "coverage": pl.Float64,
    "risk": pl.Float64,
    "optimal_risk": pl.Float64,
}
_TARGETS_SCHEMA: Final = {
    "slice": pl.String,
    "metric": pl.String,
    "target": pl.Float64,
    "value": pl.Float64,
    "low": pl.Float64,
    "high": pl.Float64,
    "achieved_coverage": pl.Float64,
    "threshold": pl.Float64,
}


def evaluate(table: LoadedTable, settings: ReportSettings) -> EvaluationReport:
    """Compute an evaluation report over ``table``.

    Parameters
    ----------
    table
        Rows from :func:`pipeline.reports.sources.load_table`.
    settings
        Validated settings (:meth:`ReportSettings.validate`).

    Raises
    ------
    ConfigError
        An expression does not parse or names a missing column, or has the wrong type.
    InputError
        The data cannot be evaluated: no rows, a confidence outside [0, 1], NaN, ...

    Examples
    --------
    >>> from pipeline.reports.sources import LoadedTable
    >>> rows = pl.LazyFrame({"p": [0.25, 0.25, 0.55, 0.75, 0.75], "y": [0, 0, 1, 1, 1]})
    >>> s = ReportSettings(confidence="p", correct="y", bins=2, bootstrap=0).validate()
    >>> report = evaluate(LoadedTable(rows, [], "parquet"), s)
    >>> round(report.slices[0].summary["ece_equal_width"], 4)
    0.29
    """
    preset = PRESETS[settings.preset] if settings.preset else None
    summary_columns = (
        _OPERATING_SUMMARY
        if settings.mode != "scored"
        else _CALIBRATION_SUMMARY
        if settings.calibration
        else _SELECTIVE_SUMMARY
    )
    clash = next((b for b in settings.by if b in summary_columns), None)
    if clash is not None:  # summary.parquet holds a column per --by beside its own
        raise ConfigError(
            f"by: {clash!r} is also the name of a summary column; slice by an expression "
            f'of it instead, e.g. --by "CAST({clash} AS VARCHAR)"'
        )
    rows, data = _collect(table, settings, preset)
    table.check_unchanged()  # every row is read: they are the files the digests name
    # A slice's rows in an order of their values alone, so that its bootstrap draws, and
    # so its intervals, depend on the rows and not on the order they were read in.
    metric = _CONFIDENCE if settings.mode == "scored" else _SELECTED
    rows = rows.sort([metric, _CORRECT])
    z = normal_quantile(settings.level)
    by_names = [f"{_BY}{i}" for i in range(len(settings.by))]
    parts: list[tuple[str, dict[str, str | None], pl.DataFrame]] = [(OVERALL, {}, rows)]
    if by_names:
        parts += _slices(rows, settings.by, by_names)
    slices = []
    for label, keys, part in parts:
        if settings.mode == "scored":
            result = _scored_slice(label, keys, part, settings, z)
        else:
            result = _operating_point_slice(label, keys, part, settings, z)
        slices.append(result)
    return EvaluationReport(settings, preset, data, slices)


def _slices(
    rows: pl.DataFrame, by: Sequence[str], by_names: list[str]
) -> list[tuple[str, dict[str, str | None], pl.DataFrame]]:
    """One part per distinct ``by`` values, in their order (nulls last), each with its
    label and its values as text. Parts are cut on the values themselves, never on their
    text, which two values may share (an object's fields printed without their quotes:
    ``{"1","2","3"}`` from two different objects merged their slices)."""
    for text, name in zip(by, by_names, strict=True):
        dtype = rows.schema[name]
        if dtype.is_nested() or dtype in (pl.Binary, pl.Object):
            raise ConfigError(
                f"by {text!r}: slices need scalar values (text, numbers, booleans, dates), "
                f"got {dtype}; slice by one of its fields"
            )
    # -0.0 is 0.0 (polars groups them; the slice was named by whichever sorted first)
    zeros = [_unsigned_zero(pl.col(name)) for name in by_names if rows.schema[name].is_float()]
    try:
        ordered = rows.with_columns(zeros).sort(by_names, nulls_last=True, maintain_order=True)
        cut = ordered.partition_by(by_names, maintain_order=True, as_dict=True).values()
        texts = [part.head(1).select(pl.col(by_names).cast(pl.String)).row(0) for part in cut]
    except EVALUATION_ERRORS as exc:
        raise ConfigError(
            f"by: cannot name the slices by their values: {failure_kind(exc)}"
        ) from None
    parts = []
    for values, part in zip(texts, cut, strict=True):
        keys = dict(zip(by, values, strict=True))
        parts.append((slice_label(keys), keys, part))
    labels = [label for label, _, _ in parts]
    if len(set(labels)) != len(labels):
        raise ConfigError(
            "by: two slices' values read alike as text; slice by an expression that tells "
            "them apart"
        )
    return parts


def slice_label(keys: dict[str, str | None]) -> str:
    """A slice's name, ``by=value, …``, told apart from every other slice's.

    A value is written as it is where it cannot be misread, else as a JSON string: empty,
    ``null`` (the text; a null value is written ``null``), or holding a comma, an equals
    sign, a quote, a control character or whitespace other than single spaces between
    words. The tables key their rows by this name, and the bootstrap seeds by it.

    Examples
    --------
    >>> slice_label({"model": "m1", "split": None})
    'model=m1, split=null'
    >>> slice_label({"a": "1, b=2", "b": "null"})
    'a="1, b=2", b="null"'
    """
    return ", ".join(f"{by}={_label_value(value)}" for by, value in keys.items())


def _label_value(value: str | None) -> str:
    if value is None:
        return "null"
    if value != "null" and value.isprintable() and _PLAIN_VALUE.fullmatch(value):
        return value
    return json.dumps(value, ensure_ascii=False)


_PLAIN_VALUE: Final = re.compile(r'[^\s",=]+(?: [^\s",=]+)*')


def _expression(text: str, setting: str, columns: pl.Schema) -> pl.Expr:
    """``text`` as a column or a polars SQL expression, resolved against the table's columns."""
    if text in columns:
        return pl.col(text)
    try:
        expression = pl.sql_expr(text)
    except Exception as exc:  # polars raises several SQL error types; all mean "bad text"
        raise ConfigError(
            f"--{setting}: cannot parse {text!r} as a column or SQL expression: {first_line(exc)}"
        ) from None
    try:  # resolves names and types on the schema alone, reading no row
        pl.LazyFrame(schema=columns).select(expression).collect_schema()
    except pl.exceptions.ColumnNotFoundError as exc:
        missing = _MISSING_COLUMN.search(str(exc))
        name = missing.group(1) if missing else text
        hint = did_you_mean(name, columns, n=3)
        raise ConfigError(
            f"--{setting} {text!r}: the table has no column {name!r}{hint} "
            f"(columns: {', '.join(columns)})"
        ) from None
    except pl.exceptions.PolarsError as exc:
        raise ConfigError(
            f"--{setting} {text!r} does not fit the table: {first_line(exc)}"
        ) from None
    return expression


_MISSING_COLUMN: Final = re.compile(r'unable to find column "([^"]*)"')
#: how polars begins an error from its Parquet reader (a page it cannot decode)
_UNREADABLE_FILE: Final = "parquet:"


def _collect(
    table: LoadedTable, settings: ReportSettings, preset: Preset | None
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Resolve expressions, collect only the columns needed, drop and count null rows."""
    frame = table.frame
    try:
        if preset is not None and preset.rows is not None:
            frame = preset.rows(frame)
        columns = frame.collect_schema()
    except pl.exceptions.PolarsError as exc:
        what = f"the rows of preset {preset.name}" if preset is not None else "the table"
        raise InputError(f"cannot read {what}: {first_line(exc)}") from None
    selections: list[pl.Expr] = [
        _expression(text, "by", columns).alias(f"{_BY}{i}") for i, text in enumerate(settings.by)
    ]
    if preset is not None:
        if preset.confidence is not None:
            selections.append(preset.confidence().alias(_CONFIDENCE))
        if preset.selected is not None:
            selections.append(preset.selected().alias(_SELECTED))
        selections.append(preset.correct().alias(_CORRECT))
    else:
        assert settings.correct is not None  # validated
        selections.append(_expression(settings.correct, "correct", columns).alias(_CORRECT))
        if settings.confidence is not None:
            confidence = _expression(settings.confidence, "confidence", columns)
            selections.append(confidence.alias(_CONFIDENCE))
        if settings.selected is not None:
            selected = _expression(settings.selected, "selected", columns)
            selections.append(selected.alias(_SELECTED))
    try:
        read = frame.select(pl.len()).collect().item()
        if settings.where:
            frame = frame.filter(_expression(settings.where, "where", columns))
        rows = frame.select(selections).collect()
    except EVALUATION_ERRORS as exc:
        if isinstance(exc, OSError) or str(exc).startswith(_UNREADABLE_FILE):
            # the files, not the expressions: a corrupt page, a file gone since it was hashed
            bad = first_unreadable(table.files) if table.format == "parquet" else None
            where = f"{bad}: " if bad else ""
            raise InputError(f"{where}cannot read the table: {first_line(exc)}") from None
        raise InputError(
            f"cannot evaluate the expressions over the table: {failure_kind(exc)}; "
            "check the types of the columns they use"
        ) from None
    after_where = rows.height
    rows = _typed(rows, settings)
    if _SELECTED in rows.columns:
        usable = pl.col(_SELECTED).is_not_null() & (
            pl.col(_CORRECT).is_not_null() | ~pl.col(_SELECTED)
        )
        rows = rows.filter(usable).with_columns(pl.col(_CORRECT).fill_null(True))
    else:
        rows = rows.drop_nulls([_CONFIDENCE, _CORRECT])
    dropped = after_where - rows.height
    if rows.height == 0:
        raise InputError(
            f"no rows to evaluate ({read} read, {after_where} after --where, "
            f"{dropped} with a null confidence or correctness)"
        )
    _check_values(rows, settings)
    data = table.describe() | {
        "rows_read": read,
        "rows_after_where": after_where,
        "rows_dropped_null": dropped,
        "rows_evaluated": rows.height,
    }
    return rows, data


def _typed(rows: pl.DataFrame, settings: ReportSettings) -> pl.DataFrame:
    """Cast confidence to Float64 and correctness/selection to Boolean, or explain why not."""
    casts = []
    if _CONFIDENCE in rows.columns:
        dtype = rows.schema[_CONFIDENCE]
        if not (dtype.is_numeric() or dtype == pl.Null):
            raise ConfigError(f"confidence: must be numeric, got {dtype}")
        if not dtype.is_float():  # integers past 2**53, long decimals: ranks must not merge
            distinct = rows[_CONFIDENCE].n_unique()
            as_floats = rows[_CONFIDENCE].cast(pl.Float64).n_unique()
            if as_floats < distinct:
                raise InputError(
                    f"confidence: its {distinct} distinct {dtype} values are {as_floats} as "
                    "64-bit floats, which rowgate ranks by; give a confidence whose values "
                    "a float holds apart"
                )
        # -0.0 becomes 0.0: the two are one threshold, whichever a tie group meets first
        casts.append(_unsigned_zero(pl.col(_CONFIDENCE).cast(pl.Float64)))
    for name, setting in ((_CORRECT, "correct"), (_SELECTED, "selected")):
        if name not in rows.columns:
            continue
        dtype = rows.schema[name]
        if dtype == pl.Boolean or dtype == pl.Null:
            casts.append(pl.col(name).cast(pl.Boolean))
            continue
        if not dtype.is_numeric():
            raise ConfigError(f"{setting}: must be boolean or 0/1, got {dtype}")
        value = pl.col(name).cast(pl.Float64)
        bad = rows.filter(value.is_not_null() & ~value.is_in([0.0, 1.0])).height
        if bad:
            raise InputError(f"{setting}: {bad} rows are neither 0 nor 1")
        casts.append(pl.col(name).cast(pl.Float64).cast(pl.Boolean))
    return rows.with_columns(casts)


def _unsigned_zero(value: pl.Expr) -> pl.Expr:
    """``value`` with -0.0 as 0.0, under its own name (polars folds ``x + 0.0`` away, so
    the zero is written out)."""
    return pl.when(value == 0.0).then(0.0).otherwise(value).alias(value.meta.output_name())


def _check_values(rows: pl.DataFrame, settings: ReportSettings) -> None:
    if _CONFIDENCE not in rows.columns:
        return
    confidence = pl.col(_CONFIDENCE)
    nonfinite = rows.filter(~confidence.is_finite()).height
    if nonfinite:
        raise InputError(f"confidence: {nonfinite} rows are NaN or infinite")
    if settings.calibration:
        outside = rows.filter((confidence < 0) | (confidence > 1)).height
        if outside:
            raise InputError(
                f"confidence: {outside} rows lie outside [0, 1]; calibration needs "
                "probabilities (use `rowgate report selective` to rank arbitrary scores)"
            )


def _scored_slice(
    label: str,
    keys: dict[str, str | None],
    part: pl.DataFrame,
    settings: ReportSettings,
    z: float,
) -> SliceResult:
    confidence = part[_CONFIDENCE].to_numpy().astype(np.float64)
    correct = part[_CORRECT].cast(pl.Float64).to_numpy()
    wrong = 1.0 - correct
    n = confidence.size
    summary: dict[str, Any] = {
        "n": n,
        "accuracy": float(correct.mean()),
        "mean_confidence": float(confidence.mean()),
    }
    result = SliceResult(label, keys, summary)
    rng = slice_generator(settings.seed, label)
    bin_index = None
    if settings.calibration:
        bin_index = _calibration_point(result, confidence, correct, settings, z)
    groups = tie_groups(confidence)
    identity = np.arange(n, dtype=np.int64)[None, :]
    point = resampled_selective(identity, groups, wrong, settings.coverages, settings.target_risks)
    summary |= {
        "aurc": float(point.aurc[0]),
        "aurc_optimal": float(point.aurc_optimal[0]),
        "e_aurc": float(point.e_aurc[0]),
    }
    result.curve = risk_coverage_curve(confidence, wrong)
    drawn = _bootstrap_replicates(confidence, correct, wrong, groups, bin_index, settings, rng)
    _add_intervals(summary, drawn, settings.level)
    result.targets = _target_rows(label, point, groups, drawn, settings)
    errors = int(np.rint(wrong.sum()))
    result.warnings = _warnings(label, n, n - errors, errors, settings)
    if groups.size == 1:
        result.warnings.append(
            _warning(
                label,
                "single_confidence",
                "every row has the same confidence: "
                "no ranking, the risk-coverage curve is a single point",
            )
        )
    return result


def _calibration_point(
    result: SliceResult,
    confidence: FloatArray,
    correct: FloatArray,
    settings: ReportSettings,
    z: float,
) -> IntArray:
    """Add the slice's calibration numbers to its summary and its reliability bins (both
    schemes) to its bins; return each row's equal-width bin, which the bootstrap reuses."""
    width_edges = equal_width_edges(settings.bins)
    width = reliability_bins(confidence, correct, width_edges)
    mass = reliability_bins(confidence, correct, equal_mass_edges(confidence, settings.bins))
    width_errors = calibration_errors(width.count, width.sum_confidence, width.sum_correct)
    mass_errors = calibration_errors(mass.count, mass.sum_confidence, mass.sum_correct)
    result.summary |= {
        "ece_equal_width": float(width_errors.ece),
        "ece_equal_mass": float(mass_errors.ece),
        "mce": float(width_errors.mce),
        "rmsce": float(width_errors.rmsce),
        "brier": brier_score(confidence, correct),
        "equal_mass_bins": int(mass.count.size),
    }
    for scheme, bins in (("equal_width", width), ("equal_mass", mass)):
        result.bins += _bin_rows(
            result.label,
            scheme,
            bins.edges,
            bins.count,
            bins.sum_correct,
            bins.mean_confidence,
            bins.accuracy,
            z,
        )
    return assign_bins(confidence, width_edges)


def _bootstrap_replicates(
    confidence: FloatArray,
    correct: FloatArray,
    wrong: FloatArray,
    groups: TieGroups,
    bin_index: IntArray | None,
    settings: ReportSettings,
    rng: np.random.Generator,
) -> dict[str, FloatArray]:
    """Every bootstrap replicate of the slice's statistics, by name (empty without a
    bootstrap); resampled in chunks, calibration only when ``bin_index`` is given."""
    replicates: dict[str, list[FloatArray]] = {}
    for indices in resample_chunks(confidence.size, settings.bootstrap, rng):
        if bin_index is not None:
            for name, values in resampled_calibration(
                indices, confidence, correct, bin_index, settings.bins
            ).items():
                replicates.setdefault(name, []).append(values)
        metrics = resampled_selective(
            indices, groups, wrong, settings.coverages, settings.target_risks
        )
        replicates.setdefault("aurc", []).append(metrics.aurc)
        replicates.setdefault("e_aurc", []).append(metrics.e_aurc)
        replicates.setdefault("risk_at_coverage", []).append(metrics.risk_at_coverage)
        replicates.setdefault("coverage_at_risk", []).append(metrics.coverage_at_risk)
    return {name: np.concatenate(chunks) for name, chunks in replicates.items()}


def _add_intervals(summary: dict[str, Any], drawn: dict[str, FloatArray], level: float) -> None:
    """``<metric>_low`` and ``<metric>_high`` for each summary metric that has intervals."""
    interval_of = {"ece_equal_width": "ece", "brier": "brier", "aurc": "aurc", "e_aurc": "e_aurc"}
    for column, name in interval_of.items():
        if column not in summary:
            continue
        low, high = percentile_interval(drawn[name], level) if drawn else (None, None)
        summary[f"{column}_low"], summary[f"{column}_high"] = _nan(low), _nan(high)


def _target_rows(
    label: str,
    point: SelectiveMetrics,
    groups: TieGroups,
    drawn: dict[str, FloatArray],
    settings: ReportSettings,
) -> list[dict[str, Any]]:
    """Rows of the targets table: risk at each coverage, then coverage at each risk."""
    rows = []
    for i, target in enumerate(settings.coverages):
        low, high = (
            percentile_interval(drawn["risk_at_coverage"][:, i], settings.level)
            if drawn
            else (None, None)
        )
        rows.append(
            {
                "slice": label,
                "metric": "risk_at_coverage",
                "target": target,
                "value": float(point.risk_at_coverage[0, i]),
                "low": low,
                "high": high,
                "achieved_coverage": float(point.achieved_coverage[0, i]),
                "threshold": None,
            }
        )
    for i, target in enumerate(settings.target_risks):
        low, high = (
            percentile_interval(drawn["coverage_at_risk"][:, i], settings.level)
            if drawn
            else (None, None)
        )
        group = int(point.group_at_risk[0, i])
        rows.append(
            {
                "slice": label,
                "metric": "coverage_at_risk",
                "target": target,
                "value": float(point.coverage_at_risk[0, i]),
                "low": low,
                "high": high,
                "achieved_coverage": None,
                "threshold": float(groups.threshold[group]) if group >= 0 else None,
            }
        )
    return rows


def _operating_point_slice(
    label: str,
    keys: dict[str, str | None],
    part: pl.DataFrame,
    settings: ReportSettings,
    z: float,
) -> SliceResult:
    selected = part[_SELECTED].cast(pl.Float64).to_numpy()
    wrong_selected = selected * (1.0 - part[_CORRECT].cast(pl.Float64).to_numpy())
    n = selected.size
    chosen = int(selected.sum())
    errors = int(wrong_selected.sum())
    coverage_low, coverage_high = wilson_interval(np.array([chosen]), np.array([n]), z)
    risk_low, risk_high = wilson_interval(np.array([errors]), np.array([chosen]), z)
    summary: dict[str, Any] = {
        "n": n,
        "selected": chosen,
        "errors": errors,
        "coverage": chosen / n,
        "risk": errors / chosen if chosen else None,
        "coverage_wilson_low": float(coverage_low[0]),
        "coverage_wilson_high": float(coverage_high[0]),
        "risk_wilson_low": float(risk_low[0]),
        "risk_wilson_high": float(risk_high[0]),
    }
    coverages: list[FloatArray] = []
    risks: list[FloatArray] = []
    rng = slice_generator(settings.seed, label)
    for indices in resample_chunks(n, settings.bootstrap, rng):
        coverage, risk = resampled_operating_point(indices, selected, wrong_selected)
        coverages.append(coverage)
        risks.append(risk)
    for name, values in (("coverage", coverages), ("risk", risks)):
        low, high = (
            percentile_interval(np.concatenate(values), settings.level) if values else (None, None)
        )
        summary[f"{name}_low"], summary[f"{name}_high"] = _nan(low), _nan(high)
    result = SliceResult(label, keys, summary)
    result.warnings = _warnings(label, n, chosen - errors, errors, settings)
    if chosen == 0:
        result.warnings.append(
            _warning(label, "none_selected", "no row was selected: risk is undefined")
        )
    return result


def _warnings(
    label: str, n: int, correct: int, wrong: int, settings: ReportSettings
) -> list[dict[str, str]]:
    found = []
    if n < settings.min_slice_rows:
        found.append(
            _warning(
                label, "small_slice", f"n = {n} < {settings.min_slice_rows}: intervals are wide"
            )
        )
    if correct + wrong > 0 and wrong == 0:
        found.append(
            _warning(label, "all_correct", "no errors: ECE and risk only measure confidence")
        )
    if correct + wrong > 0 and correct == 0:
        found.append(_warning(label, "all_wrong", "no correct rows"))
    return found


def _warning(label: str, code: str, message: str) -> dict[str, str]:
    return {"slice": label, "code": code, "message": message}


def _bin_rows(
    label: str,
    scheme: str,
    edges: FloatArray,
    count: FloatArray,
    sum_correct: FloatArray,
    mean_confidence: FloatArray,
    accuracy: FloatArray,
    z: float,
) -> list[dict[str, Any]]:
    low, high = wilson_interval(sum_correct, count, z)
    return [
        {
            "slice": label,
            "scheme": scheme,
            "bin": b,
            "lower": float(edges[b]),
            "upper": float(edges[b + 1]),
            "closed": "both" if b == 0 else "right",
            "n": int(count[b]),
            "mean_confidence": _nan(mean_confidence[b]),
            "accuracy": _nan(accuracy[b]),
            "wilson_low": _nan(low[b]),
            "wilson_high": _nan(high[b]),
        }
        for b in range(count.size)
    ]


def _nan(value: float | np.floating[Any] | None) -> float | None:
    """``None`` for an undefined number: report.json is strict JSON (no NaN)."""
    if value is None or not math.isfinite(float(value)):
        return None
    return float(value)
