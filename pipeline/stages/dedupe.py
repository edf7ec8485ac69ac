"""The dedupe stage (order 200): exact, normalised and near duplicates and split
contamination among the rows still accepted after the cross-record rules.

Removed rows become ``duplicate`` and land in ``duplicates/<kind>/`` with
``_duplicate_of`` (the kept row's source, line and record SHA-256), ``_dedupe_rule``,
``_dedupe_cluster`` and, for near matches, ``_similarity_estimated`` /
``_similarity_verified``; their reason is ``dedupe.<rule>``. Rows of a task or ``meta``
group that straddles splits stay accepted with the reason ``dedupe.split_group``. Whole-run
tables: ``dedupe/clusters/<kind>.parquet`` and ``dedupe/split_groups/<kind>.parquet``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import polars as pl
import pyarrow as pa

from pipeline.config import CampaignConfig, ConfigError
from pipeline.dedupe.table import dedupe_table, required_columns
from pipeline.global_phase import DUPLICATE_OF, KEYS, GlobalContext, register_stage
from pipeline.kinds import get_kind
from pipeline.reasons import Disposition
from pipeline.staging import staged_path
from pipeline.writer import OutputColumn

__all__ = ["Dedupe"]

_ON_DUPLICATES: Final = frozenset({Disposition.DUPLICATE})
#: staged lineage the stage reads for its rows: exact groups, and what pointers name
_DIGESTS: Final = ("_content_sha256", "_record_sha256")


@register_stage
class Dedupe:
    name = "dedupe"
    order = 200

    def enabled(self, config: CampaignConfig) -> bool:
        return config.dedupe.enabled

    def output_columns(self, ctx: GlobalContext, kind: str) -> Sequence[OutputColumn]:
        return [
            DUPLICATE_OF,  # shared with the cross-record rules' retries
            OutputColumn("_dedupe_rule", pa.string(), _ON_DUPLICATES),
            OutputColumn("_dedupe_cluster", pa.int64(), _ON_DUPLICATES),
            OutputColumn("_similarity_estimated", pa.float64(), _ON_DUPLICATES),
            OutputColumn("_similarity_verified", pa.float64(), _ON_DUPLICATES),
        ]

    def decide(self, ctx: GlobalContext, kind: str, rows: pl.DataFrame) -> pl.DataFrame | None:
        settings = ctx.config.dedupe
        key = get_kind(kind).dedupe_key()
        # rejected and quarantined rows never take part, not even as survivors
        accepted = rows.filter(pl.col("_disposition") == Disposition.ACCEPTED.value)
        # Keys name JSON members; a kind may store one apart under another column name
        # (pw-decide-row's ``meta`` is the ``_meta`` column).
        apart = get_kind(kind).apart
        wanted = [apart.get(c, c) for c in required_columns(key, settings, kind)]
        # the digests (exact groups; the kept row a pointer names) are not state columns
        columns = [*_available(ctx, kind, wanted), *_DIGESTS]
        back = {column: member for member, column in apart.items() if column in columns}
        payload = pl.concat(ctx.evaluate(kind, {c: pl.col(c) for c in columns})).rename(back)
        accepted = accepted.join(payload, on=list(KEYS), how="left", maintain_order="left")
        split_of = {shard.input.index: shard.input.split for shard in ctx.shards}
        frame = accepted.with_columns(
            _split=pl.col("_input").replace_strict(split_of, return_dtype=pl.String)
        )
        outcome = dedupe_table(frame, key, settings, kind)
        ctx.write_artifact(f"dedupe/clusters/{kind}.parquet", outcome.clusters.to_arrow(), kind)
        ctx.write_artifact(
            f"dedupe/split_groups/{kind}.parquet",
            outcome.groups.drop("_row").unique(["field", "value"], maintain_order=True).to_arrow(),
            kind,
        )
        ctx.notes.setdefault(self.name, {})[kind] = outcome.stats
        keys = (
            frame.select(*KEYS).with_row_index("_row").with_columns(pl.col("_row").cast(pl.Int64))
        )
        removed = (
            outcome.removed.join(keys, on="_row", how="left", maintain_order="left")
            .with_columns(
                _disposition=pl.lit(Disposition.DUPLICATE.value),
                _reasons_add=pl.concat_list("_reason"),
            )
            .drop("_row", "_reason")
        )
        flagged = outcome.flagged.join(keys, on="_row", how="left", maintain_order="left").select(
            *KEYS, _reasons_add="_reasons"
        )
        decided = pl.concat([removed, flagged], how="diagonal_relaxed")
        return decided if decided.height else None


def _available(ctx: GlobalContext, kind: str, wanted: list[str]) -> list[str]:
    """The wanted payload columns the kind stages; a configured one it lacks is an error."""
    summary = next(s for s in ctx.summaries if kind in s.kinds)
    staged = set(pl.scan_ipc(staged_path(ctx.root, summary.shard, kind)).collect_schema().names())
    settings = ctx.config.dedupe
    configured = {settings.survivor_rule(kind).partition(":")[2].split(".")[0]}
    configured |= {path.split(".")[0] for path in settings.split_groups.get(kind, ())}
    for column in wanted:
        if column not in staged and column in configured:
            raise ConfigError(f"dedupe: {kind} has no column {column!r}")
    return [c for c in wanted if c in staged]
