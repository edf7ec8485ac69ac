"""rowgate: gate JSONL exports into typed Parquet with lineage (DESIGN §1-§2).

The public API, for running a campaign and reading what it wrote from Python (a notebook,
a script); documented in ``docs/api.md``:

* :func:`load_campaign`, :func:`run_campaign`, :func:`verify_run`: a run, as
  ``rowgate run`` and ``rowgate verify``;
* :func:`read_manifest`, :func:`scan_outputs`: a run's manifest and its rows per
  disposition, as polars frames;
* :func:`evaluate` and the figures :func:`reliability_figure`,
  :func:`risk_coverage_figure`, :func:`operating_points_figure`, :func:`bar_figure`
  (each a :class:`ReportFigure`, shown as PNG in Jupyter): calibration and risk-coverage
  numbers, as ``rowgate report``.

Everything else is internal and may change. The packages follow a line's flow, gate →
decide → output (docs/architecture.md): :mod:`~pipeline.gate` reads and gates every line
with the record :mod:`~pipeline.kinds`; :mod:`~pipeline.decide` runs the global phase's
stages (cross-record rules, review, :mod:`~pipeline.dedupe`, :mod:`~pipeline.rubrics`
scoring, the decision policy); :mod:`~pipeline.output` writes, publishes and verifies a
run; :mod:`~pipeline.jobs` drives them for each command of :mod:`~pipeline.cli`. Below
them: :mod:`~pipeline.records` (strict and canonical JSON, schemas, lineage),
:mod:`~pipeline.storage`, :mod:`~pipeline.engines` and :mod:`~pipeline.core`.

A regular package, not a namespace: another distribution's ``pipeline`` on the path cannot
merge into or shadow this one. The public names load on first use (module ``__getattr__``):
a worker process importing the gate never loads polars, pyarrow or the command line. No
public name equals a submodule's (``run_campaign``, not ``run``: ``pipeline.jobs.run`` is the
module).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pipeline._api import (
        ReportFigure,
        bar_figure,
        evaluate,
        load_campaign,
        operating_points_figure,
        read_manifest,
        reliability_figure,
        risk_coverage_figure,
        run_campaign,
        scan_outputs,
        verify_run,
    )

__all__ = [
    "ReportFigure",
    "bar_figure",
    "evaluate",
    "load_campaign",
    "operating_points_figure",
    "read_manifest",
    "reliability_figure",
    "risk_coverage_figure",
    "run_campaign",
    "scan_outputs",
    "verify_run",
]


def __getattr__(name: str) -> Any:
    # Only the public names: a submodule (pipeline.jobs.run, ...) is found by the import system
    # before this is asked, and anything else must stay an AttributeError.
    if name in __all__:
        value = getattr(importlib.import_module("pipeline._api"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
