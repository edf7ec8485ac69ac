"""Global phase: later stages read earlier stages' carried columns (only those: the state
holds a column for every row); ``evaluate`` reads payload shard by shard; a rejected/
column one kind declares is null for the other kinds."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import polars as pl
import pyarrow as pa
import pytest

from pipeline.core.config import CampaignConfig, InputSpec
from pipeline.core.reasons import Disposition
from pipeline.decide import context as global_phase
from pipeline.decide.context import GlobalContext, OutputColumn
from pipeline.jobs.run import run
from pipeline.testing.synthetic import export_lines

BOTH = frozenset({Disposition.ACCEPTED, Disposition.REJECTED})


class MarkPairwise:
    """Writes the factuality rating (read with ``evaluate``) of every pairwise row."""

    name = "mark"
    order = 1
    carried = True

    def enabled(self, config: CampaignConfig) -> bool:
        return True

    def output_columns(self, ctx: GlobalContext, kind: str) -> Sequence[OutputColumn]:
        if kind != "pairwise-v2":
            return []
        return [OutputColumn("_mark", pa.int64(), BOTH, carried=self.carried)]

    def decide(self, ctx: GlobalContext, kind: str, rows: pl.DataFrame) -> pl.DataFrame | None:
        if kind != "pairwise-v2":
            return None
        frames = list(ctx.evaluate(kind, {"_mark": pl.col("ratings").struct.field("factuality")}))
        assert len(frames) == len([s for s in ctx.summaries if kind in s.kinds]) > 1
        marks = pl.concat(frames)
        assert marks.columns == ["_shard", "_shard_line", "_mark"]
        assert marks.height == rows.height
        return marks


class RejectByMark:
    """Reads ``_mark`` left by the stage before; rejects pairwise rows marked 1, and the
    first row of every other kind (which has no ``_mark`` column on rejected/)."""

    name = "reject"
    order = 2

    def enabled(self, config: CampaignConfig) -> bool:
        return True

    def output_columns(self, ctx: GlobalContext, kind: str) -> Sequence[OutputColumn]:
        return []

    def decide(self, ctx: GlobalContext, kind: str, rows: pl.DataFrame) -> pl.DataFrame | None:
        if kind == "pairwise-v2":
            chosen = rows.filter(pl.col("_mark") == 1)
        else:
            assert "_mark" not in rows.columns
            chosen = rows.head(1)
        return chosen.select(
            "_shard",
            "_shard_line",
            _disposition=pl.lit(Disposition.REJECTED.value),
            _reasons_add=pl.concat_list(
                pl.struct(code=pl.lit("test.marked"), path=pl.lit(""), detail=pl.lit(""))
            ),
        )


def test_stages_see_earlier_columns(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(global_phase, "GLOBAL_STAGES", [MarkPairwise, RejectByMark])
    pairwise, math = tmp_path / "pairwise.jsonl", tmp_path / "math.jsonl"
    pairwise.write_bytes(b"".join(line + b"\n" for line in export_lines("pairwise-v2", 80, seed=3)))
    math.write_bytes(
        b"".join(line + b"\n" for line in export_lines("math-reasoning-v1", 10, seed=3))
    )
    config = CampaignConfig(
        inputs=(InputSpec(str(pairwise)), InputSpec(str(math), "math-reasoning-v1"))
    ).override(**{"engine.shard_bytes": 16 * 1024, "engine.workers": 1})
    run(config, tmp_path / "out")
    accepted = pl.read_parquet(tmp_path / "out" / "accepted" / "pairwise-v2")
    rejected = pl.read_parquet(tmp_path / "out" / "rejected")
    assert accepted.height > 0
    assert accepted["_mark"].to_list() == accepted["ratings"].struct.field("factuality").to_list()
    assert 1 not in accepted["_mark"].to_list()
    late = rejected.filter(
        pl.col("_reasons").list.eval(pl.element().struct.field("code")).list.contains("test.marked")
    )
    assert set(late["_kind"]) == {"pairwise-v2", "math-reasoning-v1"}
    assert late.filter(pl.col("_kind") == "math-reasoning-v1")["_mark"].to_list() == [None]
    assert set(late.filter(pl.col("_kind") == "pairwise-v2")["_mark"]) == {1}


class MarkUncarried(MarkPairwise):
    carried = False


class SeesNoMark:
    name = "check"
    order = 2
    seen: ClassVar[list[list[str]]] = []

    def enabled(self, config: CampaignConfig) -> bool:
        return True

    def output_columns(self, ctx: GlobalContext, kind: str) -> Sequence[OutputColumn]:
        return []

    def decide(self, ctx: GlobalContext, kind: str, rows: pl.DataFrame) -> pl.DataFrame | None:
        SeesNoMark.seen.append(rows.columns)
        return None


def test_a_column_no_later_stage_reads_is_not_held_in_the_state(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A stage's output column not declared ``carried`` reaches the output files, not the
    state later stages see (a retry's pointer, on every row, cost ~11 bytes a row)."""
    monkeypatch.setattr(global_phase, "GLOBAL_STAGES", [MarkUncarried, SeesNoMark])
    pairwise = tmp_path / "pairwise.jsonl"
    pairwise.write_bytes(b"".join(line + b"\n" for line in export_lines("pairwise-v2", 40, seed=3)))
    config = CampaignConfig(inputs=(InputSpec(str(pairwise)),)).override(
        **{"engine.shard_bytes": 16 * 1024, "engine.workers": 1}
    )
    SeesNoMark.seen.clear()
    run(config, tmp_path / "out")
    assert SeesNoMark.seen
    assert all("_mark" not in columns for columns in SeesNoMark.seen)
    accepted = pl.read_parquet(tmp_path / "out" / "accepted" / "pairwise-v2")
    assert accepted["_mark"].to_list() == accepted["ratings"].struct.field("factuality").to_list()
