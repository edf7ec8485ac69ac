"""Reports: calibration and risk-coverage over evaluation tables, and the run report.

* :mod:`~pipeline.reports.calibration`, :mod:`~pipeline.reports.selective`,
  :mod:`~pipeline.reports.bootstrap`: the metrics, vectorised with numpy;
* :mod:`~pipeline.reports.evaluation`: rows → slices → metric tables
  (:func:`evaluate`), :mod:`~pipeline.reports.evaluation_output` writes them;
* :mod:`~pipeline.reports.conventions`: every convention, written into each report;
* :mod:`~pipeline.reports.plots`, :mod:`~pipeline.reports.html`: PNG figures (matplotlib)
  and self-contained HTML;
* :mod:`~pipeline.reports.svg`: the run report's charts, hand-drawn SVG;
* :mod:`~pipeline.reports.run_report`: ``OUT/report.html`` of a run.

Import the modules themselves: this package re-exports nothing, so that ``rowgate run``
(which needs only the run report) never loads the evaluation code or matplotlib.
"""

__all__: list[str] = []
