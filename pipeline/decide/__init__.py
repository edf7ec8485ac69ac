"""Phase 2, the global phase: decisions that need more than one line.

:mod:`~pipeline.decide.context` reads the staged rows' key columns and runs the registered
stages in order (:mod:`~pipeline.decide.stages`: cross-record rules, review policy,
dedupe, rubric scoring, the decision policy); each returns per-row decisions (a final
disposition, reasons, extra columns) that the writer applies.

May import: :mod:`pipeline.rubrics` and everything below it (gate, kinds, dedupe,
sanitize, storage, engines, records, core). Never the output or the jobs.
"""
