"""What a command does, end to end: :mod:`~pipeline.jobs.run` (gate → decide → output),
:mod:`~pipeline.jobs.scan` (what sanitization would redact),
:mod:`~pipeline.jobs.dedupe` (dedupe existing Parquet datasets) and
:mod:`~pipeline.jobs.reasons` (the reason catalogue with every plug-in registered).

May import every phase and :mod:`pipeline.reports`; only the command line and the
public API import it.
"""
