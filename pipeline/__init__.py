"""rowgate: gate JSONL exports into typed Parquet with lineage (DESIGN §1-§2).

The packages follow a line's flow. The gate: :mod:`~pipeline.reader`,
:mod:`~pipeline.strict_json`, :mod:`~pipeline.schemas`, :mod:`~pipeline.gate`,
:mod:`~pipeline.kinds` (one plug-in per record kind). The global phase:
:mod:`~pipeline.global_phase` and its :mod:`~pipeline.stages` (cross-record rules,
:mod:`~pipeline.dedupe`, :mod:`~pipeline.rubrics` scoring, the decision policy). The output:
:mod:`~pipeline.writer`, :mod:`~pipeline.manifest`, :mod:`~pipeline.verify`. Where steps run:
:mod:`~pipeline.engines`. A whole run: :func:`pipeline.run.run`; the command line:
:mod:`~pipeline.cli`.

A regular package, not a namespace: another distribution's ``pipeline`` on the path cannot
merge into or shadow this one. Import the modules themselves: this package re-exports
nothing, so that a worker importing the gate never loads the command line or polars.
"""

__all__: list[str] = []
