"""Staging: the gate phase's output, one directory of Arrow IPC files per shard.

``_staging/<shard>/<kind>.arrow`` holds a kind's gated rows (payload + lineage) and
``_staging/<shard>/rejected.arrow`` the lines the gate rejected. The global phase reads
compact key columns from these files (memory-mapped, column-projected); the writer turns
them into the final Parquet parts. ``_staging/spill/`` holds the decompressed pieces of
compressed inputs (:func:`pipeline.gate.reader.plan_shards`). Staging lives inside the run's
temporary directory and is deleted before the output is renamed into place.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

import pyarrow as pa
import pyarrow.ipc as ipc

from pipeline.core.config import CampaignConfig
from pipeline.engines import Progress, Step
from pipeline.gate.gate import Gate
from pipeline.gate.reader import Shard, read_batches
from pipeline.kinds import KINDS

if TYPE_CHECKING:
    import polars as pl

__all__ = [
    "REJECTED_STEM",
    "ShardSummary",
    "gate_step",
    "rejected_batches",
    "scan_staged",
    "spill_dir",
    "staged_batches",
    "staged_path",
]

REJECTED_STEM: Final = "rejected"
STAGING_DIR: Final = "_staging"


def spill_dir(root: Path) -> Path:
    """Where compressed inputs are decompressed to, one plain file per shard."""
    return root / STAGING_DIR / "spill"


def staged_path(root: Path, shard_index: int, stem: str) -> Path:
    """Where a shard's staged rows of one kind (or ``rejected``) live."""
    return root / STAGING_DIR / f"{shard_index:05d}" / f"{stem.replace('/', '_')}.arrow"


def scan_staged(root: Path, shard_index: int, stem: str) -> pl.LazyFrame:
    """A shard's staged rows of one kind as a polars scan. The path is never a pattern:
    OUT's name may hold ``[``, ``*`` or ``?`` (polars globs paths by default)."""
    import polars as pl  # here: the gate's workers, which import this module, never need it

    return pl.scan_ipc(staged_path(root, shard_index, stem), glob=False)


@dataclass
class ShardSummary:
    """What gating one shard produced (small: it travels back to the parent)."""

    shard: int
    lines: int = 0
    bytes: int = 0
    kinds: list[str] = field(default_factory=list)
    has_rejected: bool = False
    #: (gate disposition, first reason code) -> lines
    counts: Counter[tuple[str, str]] = field(default_factory=Counter)


@dataclass(frozen=True)
class GateTask:
    shard: Shard
    root: Path


def _init_gate(config: CampaignConfig) -> Gate:
    """A worker's gate, with the schemas of the kinds the inputs declare compiled now
    (during the engine's warm start); routed kinds compile on their first line."""
    gate = Gate(config)
    for kind_id in sorted({spec.kind for spec in config.inputs if spec.kind in KINDS}):
        gate.kind_gate(KINDS[kind_id])
    return gate


def _gate_shard(gate: Gate, task: GateTask, progress: Progress) -> ShardSummary:
    limits = gate.config.limits
    summary = ShardSummary(task.shard.index)
    writers: dict[str, ipc.RecordBatchFileWriter] = {}

    def write(stem: str, batch: pa.RecordBatch) -> None:
        writer = writers.get(stem)
        if writer is None:
            path = staged_path(task.root, task.shard.index, stem)
            path.parent.mkdir(parents=True, exist_ok=True)
            writer = writers[stem] = ipc.new_file(str(path), batch.schema)
        writer.write_batch(batch)

    try:
        for batch in read_batches(
            task.shard,
            limits.max_line_bytes,
            gate.config.engine.batch_lines,
            gate.config.engine.batch_bytes,
            gate.lineage.hasher,
        ):
            gated = gate.gate_batch(batch, task.shard.input.kind)
            for kind_id, record_batch in gated.kinds.items():
                write(kind_id, record_batch)
            if gated.rejected is not None:
                write(REJECTED_STEM, gated.rejected)
            summary.counts.update(gated.counts)
            nbytes = sum(len(line) for line in batch.lines) + len(batch.lines)
            nbytes += sum(length for length, _ in batch.oversized.values())
            summary.lines += len(batch)
            summary.bytes += nbytes
            progress(nbytes, len(batch))
    finally:
        for writer in writers.values():
            writer.close()
    summary.kinds = sorted(k for k in writers if k != REJECTED_STEM)
    summary.has_rejected = REJECTED_STEM in writers
    return summary


def gate_step(config: CampaignConfig) -> Step[Gate, GateTask, ShardSummary]:
    """The gate phase as an engine step."""
    return Step(_init_gate, (config,), _gate_shard)


def staged_batches(root: Path, shard_index: int, stem: str) -> Iterator[pa.Table]:
    """A staged table one record batch at a time, each read into memory and freed after
    use (a memory map would keep every page it has read resident to the end)."""
    with ipc.open_file(pa.OSFile(str(staged_path(root, shard_index, stem)))) as reader:
        for i in range(reader.num_record_batches):
            yield pa.Table.from_batches([reader.get_batch(i)])


def rejected_batches(root: Path, shard_index: int) -> Iterator[pa.Table]:
    """A shard's lines the gate rejected, in line order, a staged batch at a time (none
    staged: none). Never the whole shard at once: a shard of blank lines holds millions."""
    if staged_path(root, shard_index, REJECTED_STEM).exists():
        yield from staged_batches(root, shard_index, REJECTED_STEM)
