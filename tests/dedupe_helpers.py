"""Helpers for the dedupe tests: typed frames of records, labelled corpora on disk."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa

from pipeline.core.config import CampaignConfig
from pipeline.gate.gate import Gate
from pipeline.kinds import get_kind
from pipeline.testing.corpus import LabelledRow


def kind_frame(kind: str, records: Sequence[dict[str, Any]]) -> pl.DataFrame:
    """The typed payload columns the gate would stage for ``records``."""
    layout = Gate(CampaignConfig()).kind_gate(get_kind(kind)).layout
    table = pa.Table.from_arrays(layout.columns(records), schema=pa.schema(layout.fields))
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return frame


def write_lines(path: Path, rows: Sequence[LabelledRow]) -> Path:
    path.write_bytes(b"".join(r.line + b"\n" for r in rows))
    return path
