"""Where a run's files are written and read back: one :class:`RunStorage` object owns
the run's temporary output root, the staging area inside it (the gate's Arrow files,
spilled inputs) and the published Parquet files, each described by a
:class:`WrittenFile` (its path relative to the output directory, rows, size and SHA-256
as written).

May import: :mod:`pipeline.records` and :mod:`pipeline.core`. Never the phases that
use it (gate, decide, output) or the engines.
"""

from __future__ import annotations

from pipeline.storage.run_storage import (
    REJECTED_STEM,
    ROW_GROUP_ROWS,
    STAGING_DIR,
    RunStorage,
    WrittenFile,
    parquet_batches,
    writer_options,
)

__all__ = [
    "REJECTED_STEM",
    "ROW_GROUP_ROWS",
    "STAGING_DIR",
    "RunStorage",
    "WrittenFile",
    "parquet_batches",
    "writer_options",
]
