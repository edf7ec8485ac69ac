"""The global phase: decisions that need the whole run, vectorised in polars (DESIGN §1).

It never re-parses JSON. It reads compact key columns of every shard's staged rows,
runs the registered :class:`GlobalStage` plug-ins in order (cross-record rules, then
dedupe, then scoring and policy), and hands the writer one decision table per kind.
Each stage sees the dispositions left by the stages before it and returns decisions
only for rows it changes or annotates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

import polars as pl
import pyarrow as pa

from pipeline.config import CampaignConfig
from pipeline.reader import Shard
from pipeline.reasons import REASONS_TYPE
from pipeline.staging import ShardSummary, staged_path

__all__ = ["GLOBAL_STAGES", "GlobalContext", "GlobalStage", "register_stage", "run_global"]

DECISION_KEYS: Final = ("_shard", "_shard_line")


@dataclass(frozen=True)
class GlobalContext:
    config: CampaignConfig
    root: Path
    shards: Sequence[Shard]
    summaries: Sequence[ShardSummary]
    line_bases: Sequence[int]

    def kinds(self) -> list[str]:
        return sorted({k for s in self.summaries for k in s.kinds})

    def scan(self, kind: str, columns: Sequence[str]) -> pl.DataFrame:
        """Columns of every staged row of ``kind``, in the stable order key, with
        ``_shard``, ``_shard_line``, ``_input``, ``_line``, ``_source`` and ``_disposition``."""
        frames = []
        for summary in self.summaries:
            if kind not in summary.kinds:
                continue
            shard = self.shards[summary.shard]
            wanted = list(dict.fromkeys(["_shard_line", "_disposition", *columns]))
            frame = pl.scan_ipc(staged_path(self.root, summary.shard, kind)).select(wanted)
            frames.append(
                frame.with_columns(
                    _shard=pl.lit(summary.shard, pl.Int32),
                    _input=pl.lit(shard.input.index, pl.Int32),
                    _source=pl.lit(shard.input.path),
                    _line=pl.col("_shard_line") + self.line_bases[summary.shard],
                )
            )
        if not frames:
            return pl.DataFrame()
        return pl.concat(frames).collect()


class GlobalStage(Protocol):
    """A whole-run decision step. ``decide`` returns rows keyed by ``_shard`` and
    ``_shard_line`` with any of: ``_disposition`` (new), ``_reasons_add`` (list of
    reason structs), and extra ``_``-prefixed columns for the output."""

    name: str

    def decide(
        self, ctx: GlobalContext, kind: str, current: pl.DataFrame
    ) -> pl.DataFrame | None: ...


GLOBAL_STAGES: list[GlobalStage] = []


def register_stage(stage: GlobalStage) -> GlobalStage:
    GLOBAL_STAGES.append(stage)
    return stage


def _empty_decisions() -> pl.DataFrame:
    return pl.DataFrame(
        schema={"_shard": pl.Int32, "_shard_line": pl.Int64, "_disposition": pl.String}
    )


def run_global(
    ctx: GlobalContext, stages: Sequence[GlobalStage] | None = None
) -> dict[str, dict[int, pa.Table]]:
    """Run the stages; return decisions per kind, split per shard for the writer."""
    stages = GLOBAL_STAGES if stages is None else stages
    result: dict[str, dict[int, pa.Table]] = {}
    for kind in ctx.kinds():
        if not stages:
            continue
        current = ctx.scan(kind, [])
        decisions = _empty_decisions()
        for stage in stages:
            decided = stage.decide(ctx, kind, current)
            if decided is None or decided.height == 0:
                continue
            decisions = _overlay(decisions, decided)
            current = _apply(current, decided)
        if decisions.height:
            result[kind] = _split_by_shard(decisions)
    return result


def _overlay(decisions: pl.DataFrame, new: pl.DataFrame) -> pl.DataFrame:
    merged = pl.concat([decisions, new], how="diagonal_relaxed")
    aggregations: list[Any] = [pl.col("_disposition").drop_nulls().last()]
    if "_reasons_add" in merged.columns:
        aggregations.append(
            pl.col("_reasons_add").drop_nulls().explode().drop_nulls().alias("_reasons_add")
        )
    extras = [
        c for c in merged.columns if c not in (*DECISION_KEYS, "_disposition", "_reasons_add")
    ]
    aggregations += [pl.col(c).drop_nulls().first() for c in extras]
    return merged.group_by(list(DECISION_KEYS), maintain_order=True).agg(aggregations)


def _apply(current: pl.DataFrame, decided: pl.DataFrame) -> pl.DataFrame:
    if "_disposition" not in decided.columns:
        return current
    updates = decided.select([*DECISION_KEYS, pl.col("_disposition").alias("_new")]).drop_nulls(
        "_new"
    )
    return (
        current.join(updates, on=list(DECISION_KEYS), how="left", maintain_order="left")
        .with_columns(pl.coalesce("_new", "_disposition").alias("_disposition"))
        .drop("_new")
    )


def _split_by_shard(decisions: pl.DataFrame) -> dict[int, pa.Table]:
    if "_reasons_add" not in decisions.columns:
        decisions = decisions.with_columns(pl.lit(None).alias("_reasons_add"))
    out: dict[int, pa.Table] = {}
    for (shard,), part in (
        decisions.sort(list(DECISION_KEYS)).partition_by("_shard", as_dict=True).items()
    ):
        table = part.drop("_shard").to_arrow()
        table = table.set_column(
            table.schema.get_field_index("_shard_line"),
            "_shard_line",
            table["_shard_line"].cast(pa.int64()),
        )
        table = table.set_column(
            table.schema.get_field_index("_disposition"),
            "_disposition",
            table["_disposition"].cast(pa.string()),
        )
        reasons = table["_reasons_add"]
        table = table.set_column(
            table.schema.get_field_index("_reasons_add"),
            "_reasons_add",
            pa.array(reasons.to_pylist(), REASONS_TYPE),
        )
        out[int(shard)] = table
    return out
