"""The write phase's memory: what it holds per shard does not grow with the shard's rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.core.config import CampaignConfig, InputSpec
from pipeline.jobs.run import run
from pipeline.output import writer


def test_rejected_rows_are_written_a_staged_batch_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shard's rejected rows were read whole and sorted with the global phase's
    rejections before the first was written: ~0.4 KB a row, and a shard of blank lines
    holds millions (5M blank lines took 1.96 GB). Now the gate's rejections stream a
    staged batch at a time, merged in line order with the late ones (which the global
    phase found, and which are all held): no table written holds more than a batch of
    the gate's rejections and those late rows."""
    good = {
        "problem": "p",
        "assumptions": [],
        "derivation": ["d"],
        "final_answer": "a",
        "reasoning_score": 2,
    }
    lines = []
    for i in range(1500):
        if i % 3:
            lines.append("")  # line.blank, rejected by the gate
        elif i % 300 == 0 and i:  # a task id seen before, another body: rejected late
            lines.append(json.dumps(good | {"task_id": "t0", "problem": f"p{i}"}))
        else:
            lines.append(json.dumps(good | {"task_id": f"t{i}"}))
    source = tmp_path / "m.jsonl"
    source.write_text("\n".join(lines) + "\n")
    config = CampaignConfig(inputs=(InputSpec(str(source), "math-reasoning-v1"),)).override(
        **{"engine.workers": 1, "engine.batch_lines": 50}
    )
    written: list[int] = []
    original = writer._Parts.write

    def spy(self: Any, relative: str, disposition: str, kind: Any, table: pa.Table) -> None:
        if relative.startswith("rejected/"):
            written.append(table.num_rows)
        original(self, relative, disposition, kind, table)

    monkeypatch.setattr(writer._Parts, "write", spy)
    out = tmp_path / "out"
    manifest = run(config, out).manifest
    reasons = manifest["counts"]["by_reason"]["rejected"]
    late = reasons.pop("cross.idempotency_conflict")
    assert late >= 4
    assert reasons == {"line.blank": 1000}
    assert sum(written) == 1000 + late
    assert max(written) <= 50 + late
    rejected = pq.read_table(out / "rejected" / "part-00000.parquet")
    assert rejected["_line"].to_pylist() == sorted(rejected["_line"].to_pylist())
