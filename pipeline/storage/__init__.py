"""Where a run's files are written and read back.

Every Parquet file a run publishes is written by :func:`write_table` (or the writer's
streamed parts, with :func:`writer_options`) and described by a :class:`WrittenFile`: its
path relative to the output directory, rows, size and SHA-256 as written.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.core.config import CampaignConfig
from pipeline.records.lineage import file_sha256

__all__ = ["WrittenFile", "write_table", "writer_options"]


@dataclass(frozen=True)
class WrittenFile:
    path: str  # relative to the output directory
    disposition: str
    kind: str | None
    rows: int
    bytes: int
    sha256: str

    @classmethod
    def of(
        cls, out: Path, relative: str, disposition: str, kind: str | None, rows: int
    ) -> WrittenFile:
        """The manifest entry of a finished file: its size and SHA-256 as written."""
        path = out / relative
        return cls(relative, disposition, kind, rows, path.stat().st_size, file_sha256(path))


def writer_options(config: CampaignConfig) -> dict[str, object]:
    return {
        "compression": config.output.compression,
        "compression_level": config.output.compression_level,
    }


def write_table(
    table: pa.Table,
    out: Path,
    relative: str,
    disposition: str,
    kind: str | None,
    config: CampaignConfig,
) -> WrittenFile:
    """Write one Parquet file with the campaign's settings; return its manifest entry."""
    path = out / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, str(path), **writer_options(config))
    return WrittenFile.of(out, relative, disposition, kind, table.num_rows)
