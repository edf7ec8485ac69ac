"""``rowgate report``: calibration and risk-coverage reports over evaluation tables.

``report calibration`` needs a confidence in [0, 1] and writes calibration and selective
prediction; ``report selective`` ranks any score (or takes the system's own abstention,
e.g. ``--preset pw-decide-row``) and writes selective prediction only.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from pipeline.cli._common import (
    err,
    library_errors,
    located,
    out,
    out_option,
    output_argument,
    styled,
    writing_directory,
)
from pipeline.output.outdir import claim_output
from pipeline.reports.presets import PRESETS
from pipeline.reports.settings import ReportSettings

if TYPE_CHECKING:
    from pipeline.reports.evaluation import EvaluationReport

__all__ = ["app"]

app = typer.Typer(
    name="report",
    help="Calibration and risk-coverage reports over a run's output or any Parquet/JSONL table.",
    no_args_is_help=True,
)

DataArgument = Annotated[
    str,
    typer.Argument(
        help="A run's output directory, a directory, a glob, or a Parquet / JSONL file.",
        show_default=False,
    ),
]
OutOption = Annotated[str, out_option("Report directory (written atomically)")]
ByOption = Annotated[
    list[str] | None,
    typer.Option("--by", help="Slice by this column or SQL expression (repeatable)."),
]
WhereOption = Annotated[
    str | None, typer.Option(help="Keep only rows where this SQL expression is true.")
]
KindOption = Annotated[
    str | None, typer.Option(help="Record kind to read from a run directory's accepted/.")
]
BootstrapOption = Annotated[
    int | None, typer.Option(help="Bootstrap resamples (default 1000; 0: no intervals).")
]
SeedOption = Annotated[int | None, typer.Option(help="Bootstrap seed (default 0).")]
LevelOption = Annotated[float | None, typer.Option(help="Interval level (default 0.95).")]
CoverageOption = Annotated[
    list[float] | None,
    typer.Option(
        "--coverage", help="Report risk at this coverage (repeatable; default .5 .8 .9 1)."
    ),
]
TargetRiskOption = Annotated[
    list[float] | None,
    typer.Option(
        "--target-risk", help="Report coverage at this risk (repeatable; default .01 .02 .05 .1)."
    ),
]
ForceOption = Annotated[bool, typer.Option(help="Replace an existing report directory.")]
QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help="No summary table.")]


@app.command("calibration")
def calibration_command(
    data: DataArgument,
    out_dir: OutOption,
    confidence: Annotated[
        str | None, typer.Option(help="Confidence in [0, 1]: a column or SQL expression.")
    ] = None,
    correct: Annotated[
        str | None, typer.Option(help="Whether the row is correct (boolean or 0/1).")
    ] = None,
    preset: Annotated[
        str | None,
        typer.Option(
            help="Instead of --confidence and --correct: a named definition with a confidence "
            f"({', '.join(sorted(n for n, p in PRESETS.items() if p.confidence is not None))})."
        ),
    ] = None,
    by: ByOption = None,
    bins: Annotated[int | None, typer.Option(help="Equal-width bins (default 15).")] = None,
    bootstrap: BootstrapOption = None,
    seed: SeedOption = None,
    level: LevelOption = None,
    coverage: CoverageOption = None,
    target_risk: TargetRiskOption = None,
    where: WhereOption = None,
    kind: KindOption = None,
    force: ForceOption = False,
    quiet: QuietOption = False,
) -> None:
    """Calibration (ECE equal-width and equal-mass, MCE, RMSCE, Brier, reliability bins)
    and selective prediction (risk-coverage, AURC, E-AURC) per slice, with bootstrap
    intervals. Writes report.json, summary/bins/rc_curve/targets Parquet and report.html."""
    given = {
        "preset": preset,
        "confidence": confidence,
        "correct": correct,
        "by": tuple(by) if by else None,
        "bins": bins,
        "bootstrap": bootstrap,
        "seed": seed,
        "level": level,
        "coverages": tuple(coverage) if coverage else None,
        "target_risks": tuple(target_risk) if target_risk else None,
        "where": where,
        "kind": kind,
    }
    _report(data, given, out_dir, force, quiet)


@app.command("selective")
def selective_command(
    data: DataArgument,
    out_dir: OutOption,
    preset: Annotated[
        str | None,
        typer.Option(
            help=f"A named definition of selection and correctness ({', '.join(sorted(PRESETS))})."
        ),
    ] = None,
    confidence: Annotated[
        str | None, typer.Option(help="Any score, higher = more confident (ranks rows).")
    ] = None,
    selected: Annotated[
        str | None,
        typer.Option(help="Instead of a score: whether the system answered the row (boolean)."),
    ] = None,
    correct: Annotated[
        str | None, typer.Option(help="Whether the row is correct (boolean or 0/1).")
    ] = None,
    by: ByOption = None,
    bootstrap: BootstrapOption = None,
    seed: SeedOption = None,
    level: LevelOption = None,
    coverage: CoverageOption = None,
    target_risk: TargetRiskOption = None,
    where: WhereOption = None,
    kind: KindOption = None,
    force: ForceOption = False,
    quiet: QuietOption = False,
) -> None:
    """Selective prediction only: a risk-coverage curve from a score, or, with --selected
    or --preset, the operating point of the system's own abstention (coverage = share
    answered, risk = error rate among answered) per slice, with bootstrap intervals."""
    given = {
        "preset": preset,
        "confidence": confidence,
        "selected": selected,
        "correct": correct,
        "calibration": False,
        "by": tuple(by) if by else None,
        "bootstrap": bootstrap,
        "seed": seed,
        "level": level,
        "coverages": tuple(coverage) if coverage else None,
        "target_risks": tuple(target_risk) if target_risk else None,
        "where": where,
        "kind": kind,
    }
    _report(data, given, out_dir, force, quiet)


def _report(data: str, given: dict[str, Any], out_arg: str, force: bool, quiet: bool) -> None:
    # imported here, not at the top: they load matplotlib, which every other command
    # (and `rowgate --help`) would otherwise pay for at start-up
    from pipeline.reports.evaluation import evaluate
    from pipeline.reports.evaluation_output import write_evaluation
    from pipeline.reports.sources import load_table, named_paths

    started = time.perf_counter()
    out_dir = output_argument(out_arg)
    read = named_paths(data)  # what load_table reads: --out may not overlap it
    with (
        library_errors(writing_directory(out_dir)),
        claim_output(out_dir, force=force, protect=read) as claim,
    ):
        # unset flags keep the library's defaults: they are defined once, in ReportSettings
        settings = ReportSettings(**{k: v for k, v in given.items() if v is not None}).validate()
        report = evaluate(load_table(data, kind=settings.source_kind), settings)
        write_evaluation(report, claim)
    _print_warnings(report.warnings)
    if not quiet:
        _summary(report)
    out.print(
        f"wrote {located(out_dir, 'report.html')}, report.json and tables for "
        f"{report.data['rows_evaluated']:,} rows in {time.perf_counter() - started:.2f} s",
    )


#: the slices a warning code is printed for on the terminal; report.json lists them all
WARNINGS_SHOWN = 5


def _print_warnings(warnings: list[dict[str, str]]) -> None:
    """Each warning on stderr, but at most :data:`WARNINGS_SHOWN` slices of a code, then
    how many more: a report sliced by a column of 5,000 values printed 5,000 lines."""
    by_code: dict[str, list[dict[str, str]]] = {}
    for warning in warnings:
        by_code.setdefault(warning["code"], []).append(warning)
    for code, found in by_code.items():
        for warning in found[:WARNINGS_SHOWN]:
            err.print(
                styled("warning:", "yellow"),
                f"{warning['slice']}: {code} ({warning['message']})",
            )
        if len(found) > WARNINGS_SHOWN:
            err.print(
                styled("warning:", "yellow"),
                f"{code} in {len(found) - WARNINGS_SHOWN:,} more slices "
                "(report.json lists every warning)",
            )


def _summary(report: EvaluationReport) -> None:
    if report.settings.mode == "scored":
        names = ["n", "accuracy", "ece_equal_width", "brier", "aurc", "e_aurc"]
    else:
        names = ["n", "selected", "coverage", "risk", "risk_low", "risk_high"]
    # a metric the report does not compute (calibration of a raw score) is no column of dashes
    names = [n for n in names if any(s.summary.get(n) is not None for s in report.slices)]
    table = Table("slice", *names, box=None)
    for s in report.slices:
        cells = []
        for name in names:
            value = s.summary.get(name)
            if value is None:
                cells.append("–")
            elif isinstance(value, int):
                cells.append(f"{value:,}")
            else:
                cells.append(f"{value:.4f}")
        table.add_row(s.label, *cells)
    out.print(table)
