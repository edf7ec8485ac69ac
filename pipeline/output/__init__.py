"""Phase 3, the output: staged rows + decisions → the published run directory.

:mod:`~pipeline.output.writer` writes the Parquet parts per disposition,
:mod:`~pipeline.output.manifest` the manifest, :mod:`~pipeline.output.outdir` claims and
publishes the output directory atomically, :mod:`~pipeline.output.verify` re-derives a
published run from its inputs.

May import: :mod:`pipeline.decide` and everything below it.
"""
