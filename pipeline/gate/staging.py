"""The gate phase as an engine step: each shard's lines gated into the staging area.

A shard's gated rows are staged per kind, and the lines the gate rejected apart, as
Arrow IPC files written through the run's :class:`~pipeline.storage.RunStorage` (which
owns the layout, ``_staging/<shard>/<kind>.arrow``). The global phase reads compact key
columns from them; the writer turns them into the final Parquet parts. Staging lives
inside the run's temporary directory and is deleted before the output is renamed into
place.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.ipc as ipc

from pipeline.core.config import CampaignConfig
from pipeline.engines import Progress, Step
from pipeline.gate.gate import Gate
from pipeline.gate.reader import Shard, read_batches
from pipeline.kinds import KINDS
from pipeline.storage import REJECTED_STEM, RunStorage

if TYPE_CHECKING:
    from pipeline.dedupe.row_keys import SignatureMemo

__all__ = ["GateTask", "ShardSummary", "gate_step"]


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
    storage: RunStorage


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
    memos: dict[str, SignatureMemo] = {}  # a kind's signature memo, for the shard

    def write(stem: str, batch: pa.RecordBatch) -> None:
        writer = writers.get(stem)
        if writer is None:
            writer = task.storage.stage_writer(task.shard.index, stem, batch.schema)
            writers[stem] = writer
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
                keys = _row_keys(gate.config, kind_id, record_batch, memos)
                if keys is not None:
                    write(task.storage.row_keys_stem(kind_id), keys)
            for kind_id, submitted in gated.submitted.items():
                write(task.storage.submissions_stem(kind_id), submitted)
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
    summary.kinds = sorted(k for k in writers if k != REJECTED_STEM and k in KINDS)
    summary.has_rejected = REJECTED_STEM in writers
    return summary


def _row_keys(
    config: CampaignConfig, kind_id: str, batch: pa.RecordBatch, memos: dict[str, SignatureMemo]
) -> pa.RecordBatch | None:
    """The dedupe row keys of a kind's staged batch, where the campaign's dedupe reads
    them (normalised or near rules on, and the kind has a duplicate key): computed here,
    in parallel, not for every row in the parent (:mod:`pipeline.dedupe.row_keys`).
    ``memos``: each kind's signature memo in this shard, made here on first use."""
    settings = config.dedupe
    if not (settings.enabled and (settings.normalised or settings.near)):
        return None  # then the gate never imports polars (below)
    kind = KINDS[kind_id]
    key = kind.dedupe_key()
    if key is None:
        return None
    from pipeline.dedupe.minhash import LshParams
    from pipeline.dedupe.row_keys import SignatureMemo, row_keys

    # the key names JSON members; a kind stores some apart under another column name
    back = {column: member for member, column in kind.apart.items()}
    present = [c for c in (kind.apart.get(c, c) for c in key.columns) if c in batch.schema.names]
    payload = batch.select(present).rename_columns([back.get(c, c) for c in present])
    if settings.near and kind_id not in memos:
        memos[kind_id] = SignatureMemo(LshParams.from_settings(settings))
    keys = row_keys(payload, key, settings, memos.get(kind_id))
    shard_line = batch.column(batch.schema.get_field_index("_shard_line"))
    return pa.RecordBatch.from_arrays(
        [shard_line, *keys.columns], names=["_shard_line", *keys.schema.names]
    )


def gate_step(config: CampaignConfig) -> Step[Gate, GateTask, ShardSummary]:
    """The gate phase as an engine step."""
    return Step(_init_gate, (config,), _gate_shard)
