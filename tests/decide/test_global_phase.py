"""The global phase: stages see the whole run, decisions reach the right output files."""

from __future__ import annotations

import dataclasses
import itertools
import math
import pickle
import types
import unittest.mock
import weakref
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar, cast

import numpy as np
import orjson
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.core.config import CampaignConfig, InputSpec
from pipeline.core.reasons import Disposition
from pipeline.decide import context as global_phase
from pipeline.decide import partitioned
from pipeline.decide.context import DISPOSITIONS, KEYS, GlobalContext, OutputColumn
from pipeline.decide.partitioned import (
    BODY,
    GROUP,
    LEADERS,
    SEEKS,
    TEXT,
    VALUE,
    Followers,
    Found,
    HashCheck,
    first_rows,
    group_places,
    line_set,
    shard_tasks,
    task_lines,
)
from pipeline.decide.repeats import repeated, varying
from pipeline.engines import Step
from pipeline.jobs.run import run
from pipeline.output.verify import verify_run
from pipeline.storage import RunStorage
from pipeline.testing.synthetic import export_lines


class FlagEveryThird:
    """Quarantines every third accepted pairwise row (by order key), marks the rest."""

    name = "flag"
    order = 1
    given: ClassVar[list[list[str]]] = []

    def enabled(self, config: CampaignConfig) -> bool:
        return True

    def output_columns(self, ctx: GlobalContext, kind: str) -> Sequence[OutputColumn]:
        return [
            OutputColumn(
                "_mark", pa.int64(), frozenset({Disposition.ACCEPTED, Disposition.QUARANTINED})
            )
        ]

    def decide(self, ctx: GlobalContext, kind: str, rows: pl.DataFrame) -> pl.DataFrame | None:
        self.given.append(rows.columns)
        rows = ctx.with_lineage(rows)
        assert rows["_line"].is_sorted() or rows["_input"].n_unique() > 1
        accepted = rows.filter(pl.col("_disposition") == "accepted").with_row_index("n")
        ctx.write_artifact(
            f"flag/{kind}.parquet", accepted.select("_source", "_line").to_arrow(), kind
        )
        ctx.notes["flag"] = {"rows": accepted.height}
        return accepted.select(
            "_shard",
            "_shard_line",
            _mark=pl.col("_line"),
            _disposition=pl.when(pl.col("n") % 3 == 0).then(pl.lit("quarantined")),
            _reasons_add=pl.when(pl.col("n") % 3 == 0).then(
                pl.concat_list(
                    pl.struct(
                        code=pl.lit("test.third"), path=pl.lit(""), detail=pl.lit("every third")
                    )
                )
            ),
        )


class RejectFirst:
    """Rejects the first still-accepted row: it must reach rejected/ with its raw bytes."""

    name = "reject"
    order = 2

    def enabled(self, config: CampaignConfig) -> bool:
        return True

    def output_columns(self, ctx: GlobalContext, kind: str) -> Sequence[OutputColumn]:
        return [OutputColumn("_why", pa.string(), frozenset({Disposition.REJECTED}))]

    def decide(self, ctx: GlobalContext, kind: str, rows: pl.DataFrame) -> pl.DataFrame | None:
        first = rows.filter(pl.col("_disposition") == "accepted").head(1)
        return first.select(
            "_shard",
            "_shard_line",
            _disposition=pl.lit("rejected"),
            _why=pl.lit("first"),
            _reasons_add=pl.concat_list(
                pl.struct(code=pl.lit("test.first"), path=pl.lit(""), detail=pl.lit(""))
            ),
        )


class ReadCodes:
    """Keeps the reason codes it is given (it asks for them), and adds one of its own to
    the rows the stages before it added to, for the stage after it."""

    name = "codes"
    order = 3
    reads_reason_codes = True
    seen: ClassVar[list[pl.DataFrame]] = []

    def enabled(self, config: CampaignConfig) -> bool:
        return True

    def output_columns(self, ctx: GlobalContext, kind: str) -> Sequence[OutputColumn]:
        return []

    def decide(self, ctx: GlobalContext, kind: str, rows: pl.DataFrame) -> pl.DataFrame | None:
        self.seen.append(ctx.with_lineage(rows).select("_line", "_reason_codes"))
        tests = pl.col("_reason_codes").list.eval(pl.element().str.starts_with("test.")).list.any()
        return rows.filter(tests).select(
            "_shard",
            "_shard_line",
            _reasons_add=pl.concat_list(
                pl.struct(code=pl.lit("test.codes"), path=pl.lit(""), detail=pl.lit(""))
            ),
        )


class ReadCodesAgain(ReadCodes):
    name = "codes-again"
    order = 4


@pytest.fixture
def stages(monkeypatch: pytest.MonkeyPatch) -> None:
    # The stage plug-ins register themselves on first import (the run's preflight imports
    # them): import them now, so they cannot register into the replaced list.
    import pipeline.decide.stages  # noqa: F401

    monkeypatch.setattr(global_phase, "GLOBAL_STAGES", [FlagEveryThird, RejectFirst])


@pytest.fixture
def coded_stages(monkeypatch: pytest.MonkeyPatch) -> None:
    """The two stages above, then two that ask for the reason codes."""
    import pipeline.decide.stages  # noqa: F401

    monkeypatch.setattr(
        global_phase, "GLOBAL_STAGES", [FlagEveryThird, RejectFirst, ReadCodes, ReadCodesAgain]
    )
    ReadCodes.seen.clear()
    FlagEveryThird.given.clear()


@pytest.mark.slow
def test_decisions_reach_outputs(stages: None, tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_bytes(
        b"".join(
            line + b"\n" for line in export_lines("pairwise-v2", 300, seed=5, defect_rate=0.05)
        )
    )
    config = CampaignConfig(inputs=(InputSpec(str(source)),)).override(
        **{"engine.shard_bytes": 32 * 1024}
    )
    results = {}
    for workers in (1, 2):
        out = tmp_path / f"out{workers}"
        results[workers] = run(config.override(**{"engine.workers": workers}), out)
    files = {
        p.relative_to(tmp_path / "out1").as_posix(): p.read_bytes()
        for p in (tmp_path / "out1").rglob("*.parquet")
    }
    assert files == {
        p.relative_to(tmp_path / "out2").as_posix(): p.read_bytes()
        for p in (tmp_path / "out2").rglob("*.parquet")
    }

    out = tmp_path / "out1"
    accepted = pl.read_parquet(out / "accepted" / "pairwise-v2")
    quarantined = pl.read_parquet(out / "quarantined" / "pairwise-v2")
    rejected = pl.read_parquet(out / "rejected")
    assert accepted["_mark"].to_list() == accepted["_line"].to_list()
    assert "_why" not in accepted.columns
    assert quarantined.height > 0
    assert all(r[-1]["code"] == "test.third" for r in quarantined["_reasons"].to_list())
    late = rejected.filter(pl.col("_why") == "first")
    assert late.height == 1
    assert late["_reasons"].to_list()[0][-1]["code"] == "test.first"
    raw = late["_raw"][0]
    lines = source.read_bytes().split(b"\n")
    assert raw == lines[late["_line"][0] - 1]
    assert (
        pq.read_schema(next((out / "rejected").glob("*.parquet"))).field("_why").type == pa.string()
    )
    manifest = results[1].manifest
    assert [a["path"] for a in manifest["artifacts"]] == ["flag/pairwise-v2.parquet"]
    assert (
        manifest["global"]["flag"]["rows"]
        == pl.read_parquet(out / "flag" / "pairwise-v2.parquet").height
    )
    report = verify_run(out)
    assert report.ok, report.problems
    counts = results[1].manifest["counts"]
    assert counts["by_reason"]["quarantined"]["test.third"] == quarantined.height
    assert sum(counts["by_disposition"].values()) == 300


def test_a_stage_that_asks_is_given_every_reason_code_so_far(
    coded_stages: None, tmp_path: Path
) -> None:
    """A stage that asks for the reason codes gets every row's so far, in order: the
    gate's, then each earlier stage's; the others get the state without them."""
    lines = []
    for i, line in enumerate(export_lines("pairwise-v2", 300, seed=5, defect_rate=0.05)):
        record = _record(line)
        if i % 10 == 0 and record is not None and record.get("preference") == "A":
            # the rationale calls the other response better: the gate quarantines the row
            record["rationale"] = "Response B is better: it covers the edge cases well."
            line = orjson.dumps(record)
        lines.append(line + b"\n")
    source = tmp_path / "in.jsonl"
    source.write_bytes(b"".join(lines))
    out = tmp_path / "out"
    run(CampaignConfig(inputs=(InputSpec(str(source)),)), out)
    accepted = pl.read_parquet(out / "accepted" / "pairwise-v2")
    quarantined = pl.read_parquet(out / "quarantined" / "pairwise-v2")
    rejected = pl.read_parquet(out / "rejected")
    assert FlagEveryThird.given
    assert all(
        columns == ["_shard", "_shard_line", "_disposition"] for columns in FlagEveryThird.given
    )
    written = pl.concat(
        [accepted, quarantined, rejected.filter(pl.col("_kind") == "pairwise-v2")],
        how="diagonal_relaxed",
    ).select("_line", _codes=pl.col("_reasons").list.eval(pl.element().struct.field("code")))
    # each ReadCodes stage adds test.codes after the stages before it added a test.* code:
    # the first saw none of them, the second the first's
    codes = pl.col("_codes")
    once = codes.list.eval(pl.element().filter(pl.element() != "test.codes"))
    twice = pl.when(codes.list.last() == "test.codes").then(codes.list.head(codes.list.len() - 1))
    assert len(ReadCodes.seen) == 2
    for seen, expected in zip(ReadCodes.seen, (once, twice.otherwise(codes)), strict=True):
        joined = seen.join(written, on="_line", how="left")
        # (the lines the gate rejected before staging them are no rows of the state)
        assert joined.height > 280
        assert joined["_codes"].null_count() == 0
        assert joined.select((pl.col("_reason_codes") == expected).all()).item()
        gate = pl.col("_reason_codes").list.eval(~pl.element().str.starts_with("test."))
        assert joined.filter(gate.list.any()).height > 0  # the gate's codes are among them


def _record(line: bytes) -> dict[str, Any] | None:
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return record if isinstance(record, dict) else None


class ProbeReads:
    """Asks ``fetch`` and ``with_lineage`` for some rows and keeps what they gave beside
    what the staged files hold, read whole (decides nothing)."""

    name = "probe"
    order = 1
    seen: ClassVar[list[tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame]]] = []
    evaluated: ClassVar[list[tuple[pl.DataFrame, pl.DataFrame]]] = []
    #: ``values``, and whether each misaligned rows was refused
    valued: ClassVar[list[tuple[dict[str, Any], list[bool]]]] = []

    def enabled(self, config: CampaignConfig) -> bool:
        return True

    def output_columns(self, ctx: GlobalContext, kind: str) -> Sequence[OutputColumn]:
        return []

    def decide(self, ctx: GlobalContext, kind: str, rows: pl.DataFrame) -> pl.DataFrame | None:
        keys = rows.select("_shard", "_shard_line").gather_every(7)
        # a line asked twice, and a line no staged row has: the one row, and nothing
        asked = pl.concat(
            [keys, keys.head(3), keys.head(1).with_columns(_shard_line=pl.lit(10**9, pl.Int64))]
        )
        columns = ["task_id", "messages", "_record_sha256"]
        fetched = ctx.fetch(kind, asked, columns)
        whole = pl.concat(
            ctx.staged(s.shard, kind)
            .select("_shard_line", *columns)
            .with_columns(_shard=pl.lit(s.shard, pl.Int32))
            .collect()
            for s in ctx.summaries
            if kind in s.kinds
        )
        expected = whole.join(keys, on=["_shard", "_shard_line"], how="semi", maintain_order="left")
        lineage = ctx.with_lineage(keys).select("_input", "_source", "_line")
        truth = ctx.fetch(kind, keys, ["_offset"])  # where each line starts in the input
        self.seen.append((fetched, expected, lineage, truth))
        exprs = {"_h": pl.col("messages").hash(1), "_n": pl.col("response_a").str.len_bytes()}
        # the same expressions over each shard's staged rows read whole
        whole_shards = pl.concat(
            ctx.staged(s.shard, kind)
            .select(
                pl.lit(s.shard, pl.Int32).alias("_shard"),
                "_shard_line",
                *(e.alias(name) for name, e in exprs.items()),
            )
            .collect()
            for s in ctx.summaries
            if kind in s.kinds
        )
        self.evaluated.append((whole_shards, pl.concat(ctx.evaluate(kind, exprs))))
        misaligned = [
            rows.slice(1),
            rows.head(rows.height - 1),
            rows.reverse(),
            rows.with_columns(_shard=pl.col("_shard") + 1),  # the lines, in other shards
            pl.concat([rows, rows.tail(1)]),  # a row more than staged
        ]
        refused = [
            _refuses(lambda wrong=wrong: ctx.values(kind, wrong, exprs), AssertionError)
            for wrong in misaligned
        ]
        # a null would become a float or an object in numpy: refused, never cast
        nullable = {"_n": pl.when(pl.col("_shard_line") % 5 != 3).then(pl.col("_shard_line"))}
        refused.append(_refuses(lambda: ctx.values(kind, rows, nullable), ValueError))
        self.valued.append((ctx.values(kind, rows, exprs), refused))
        return None


class ProbeRepeats:
    """Finds repeated and varying hashes with ``repeats`` (on the engine, at several
    partition counts) and with :mod:`pipeline.decide.repeats` over every row's values
    (decides nothing)."""

    name = "probe-repeats"
    order = 1
    #: (expected mask, expected groups, got mask, got groups) per check and count
    found: ClassVar[list[tuple[Any, Any, Any, Any]]] = []
    refused: ClassVar[list[str]] = []

    def enabled(self, config: CampaignConfig) -> bool:
        return True

    def output_columns(self, ctx: GlobalContext, kind: str) -> Sequence[OutputColumn]:
        return []

    def decide(self, ctx: GlobalContext, kind: str, rows: pl.DataFrame) -> pl.DataFrame | None:
        natural = pl.col("task_id").hash(1)  # repeats where a task repeats (retries)
        few = pl.col("task_id").hash(1) % 5  # five groups: every row repeats
        value = pl.col("preference").hash(2)
        where = pl.col("_shard_line") % 5 != 3
        for group in (natural, few):
            got = ctx.values(kind, rows, {"g": group, "v": value, "w": where})
            repeats = repeated(got["g"]).to_numpy()
            varies = np.zeros(rows.height, np.bool_)
            varies[got["w"]] = varying(got["g"][got["w"]], got["v"][got["w"]]).to_numpy()
            for count in (1, 7, 64):
                at = dataclasses.replace(
                    ctx, config=ctx.config.override(**{"engine.partitions": count})
                )
                mask, groups = at.repeats(kind, rows, "probe", group)
                self.found.append((repeats, got["g"][repeats], mask, groups))
                mask, groups = at.repeats(kind, rows, "probe", group, value=value, where=where)
                self.found.append((varies, got["g"][varies], mask, groups))
            # a null hash is refused (numpy would make the column floats, and round
            # distinct hashes to one)
            nullable = pl.when(pl.col("_shard_line") % 5 != 3).then(group)
            try:
                ctx.repeats(kind, rows, "probe", nullable)
            except Exception as error:
                self.refused.append(str(error))
            # a state in another order: the mask and groups in its order
            shuffled = np.random.default_rng(5).permutation(rows.height)
            mask, groups = ctx.repeats(kind, rows[shuffled], "probe", group)
            self.found.append(
                (repeats[shuffled], got["g"][shuffled][repeats[shuffled]], mask, groups)
            )
        self._unmatched(ctx, kind, rows)
        self._groups(ctx, kind, rows)
        return None

    def _groups(self, ctx: GlobalContext, kind: str, rows: pl.DataFrame) -> None:
        """``groups`` against exact grouping over every row's values: the rows where
        ``where`` holds and the key is not null, but those left out, whose key another
        of them shares, each with its key's first such row (keys hashed to few groups,
        so many hashes repeat over distinct keys); and, given a body, only the later
        rows of each key, each telling whether its body is its first row's (a null body
        is nobody's), and (``later_rows``: staged by the partition tasks, read a block of
        shards at a time, in the rows' order) each later row's first row, whether its
        body is that row's, how many rows its key has and how many of them are later
        rows whose body is not the first's."""
        line = pl.col("_shard_line")
        key = pl.when(line % 13 != 4).then(line % 11).cast(pl.String)
        body = pl.when(line % 17 != 2).then((line // 11) % 3).cast(pl.String)
        where = line % 5 != 3
        lines = rows["_shard_line"].to_numpy()
        part = (lines % 5 != 3) & (lines % 7 != 0) & (lines % 13 != 4)
        left_out = lines % 7 == 0
        keys = lines % 11
        bodies = np.where(lines % 17 != 2, (lines // 11) % 3, -1)  # -1: null
        first: dict[int, int] = {}
        for i in np.flatnonzero(part):
            first.setdefault(int(keys[i]), int(i))
        counts = Counter(keys[part].tolist())
        expected = part & np.array([counts.get(int(k), 0) > 1 for k in keys])
        firsts = np.array([first[int(k)] for k in keys[expected]], np.int64)
        same = (bodies[expected] == bodies[firsts]) & (bodies[expected] != -1)
        is_first = np.zeros(rows.height, np.bool_)
        is_first[list(first.values())] = True
        later = expected & ~is_first
        of_later = ~is_first[expected]  # the later rows among the expected
        assert same[of_later].any()
        assert not same[of_later].all()
        assert (expected & is_first).any()
        differing = Counter(keys[expected][of_later & ~same].tolist())
        key_rows = np.array([counts[int(k)] for k in keys[later]], np.uint32)
        conflicts = np.array([differing.get(int(k), 0) for k in keys[later]], np.uint32)
        assert (key_rows > 2).any()
        assert (conflicts > 0).any()
        assert (conflicts < key_rows - 1).any()
        shards = ctx.shards_of(kind)
        for count, digested in ((1, False), (7, False), (7, True), (64, False), (64, True)):
            at = dataclasses.replace(
                ctx, config=ctx.config.override(**{"engine.partitions": count})
            )
            wanted = rows.select(KEYS)[firsts].to_numpy().astype(np.int64)
            check = (kind, rows, "probe", key, key.hash() % 3)
            # the groups; then each row found also telling whether its body is its first's
            for bodies_of in (None, body):
                mask, groups, told = at.groups(
                    *check, where=where, left_out=left_out, body=bodies_of, digested=digested
                )
                # digested: the staged keys are their SHA-256s, not the keys
                staged = _shuffled(ctx.storage, shards[0], f"{kind}.hash-probe")["_text"]
                assert {len(k) for k in staged.to_pylist()} == ({32} if digested else {1, 2})
                shard, line = first_rows(shards, groups)
                got = np.stack([shard, line], axis=1)
                if bodies_of is not None:
                    self.found.append((later, wanted[of_later], mask, got))
                    self.found.append((later, same[of_later], mask, told))
                    if digested:
                        continue
                    # staged by the partition tasks, read a block of shards at a time
                    block = 7 if count == 7 else partitioned.FOLLOWER_ROWS
                    # at 64 partitions, their files merged into two first
                    mapped = 2 if count == 64 else partitioned.MAPPED_FILES
                    merging = unittest.mock.patch.object(partitioned, "MAPPED_FILES", mapped)
                    with unittest.mock.patch.object(partitioned, "FOLLOWER_ROWS", block), merging:
                        staged_later = at.later_rows(
                            *check, body=body, where=where, left_out=left_out
                        )
                        parts = list(staged_later.parts())
                    assert len(parts) > (3 if block == 7 else 0)
                    read = pl.concat(parts)
                    assert read.height == len(staged_later)
                    at_rows = (
                        rows.with_row_index("_i")
                        .join(read, on=list(KEYS), how="inner", maintain_order="right")
                        .sort("_i")
                    )
                    places = at_rows["_i"].to_numpy()
                    assert read.height == at_rows.height  # every row read is a row
                    assert (np.diff(places) > 0).all()  # in the rows' order, each once
                    mask = np.zeros(rows.height, np.bool_)
                    mask[places] = True
                    kept = at_rows.select("_first_shard", "_first_line").to_numpy()
                    self.found.append((later, wanted[of_later], mask, kept.astype(np.int64)))
                    self.found.append((later, same[of_later], mask, at_rows["_same"].to_numpy()))
                    self.found.append((later, key_rows, mask, at_rows["_rows"].to_numpy()))
                    self.found.append((later, conflicts, mask, at_rows["_conflicts"].to_numpy()))
                else:
                    self.found.append((expected, wanted, mask, got))
                    assert told is None

    def _unmatched(self, ctx: GlobalContext, kind: str, rows: pl.DataFrame) -> None:
        """``unmatched`` against the anti-join over every row's values: the rows where
        ``where`` holds, but those left out, seek a key or offer one; a seeking row's
        residue mod 29 is offered (mod 23) unless it is 23 or more."""
        line = pl.col("_shard_line")
        seeks = line % 3 == 0
        key = pl.when(seeks).then(line % 29).otherwise(line % 23).cast(pl.String)
        where = line % 5 != 3
        got = ctx.values(kind, rows, {"k": key, "s": seeks, "w": where})
        left_out = (rows["_shard_line"] % 7 == 0).to_numpy()
        part = got["w"] & ~left_out
        offered = np.unique(got["k"][part & ~got["s"]])
        expected = part & got["s"] & ~np.isin(got["k"], offered)
        for count in (1, 7, 64):
            at = dataclasses.replace(
                ctx, config=ctx.config.override(**{"engine.partitions": count})
            )
            mask = at.unmatched(kind, rows, "probe", key, seeks, where=where, left_out=left_out)
            self.found.append((expected, None, mask, None))


def _refuses(call: Callable[[], object], error: type[Exception]) -> bool:
    """Whether ``call`` raises ``error``."""
    try:
        call()
    except error:
        return True
    return False


def _shuffled(storage: RunStorage, shard: int, stem: str) -> pa.Table:
    """Every partition of a shard's staged shuffle entries, in partition order."""
    parts = []
    for partition in itertools.count():
        try:
            parts.append(storage.staged_partition(shard, stem, partition))
        except IndexError:
            return pa.Table.from_batches(parts)
    raise AssertionError("unreachable")


@pytest.mark.parametrize("workers", [1, 2])
def test_repeats_on_the_engine_find_what_every_row_would(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, workers: int
) -> None:
    """``repeats`` finds, partition by partition on the engine, the rows whose hash
    repeats (or whose group's value varies, among the rows ``where`` holds) that the
    check over every row's values finds, with their groups, at any partition count."""
    import pipeline.decide.stages  # noqa: F401

    monkeypatch.setattr(global_phase, "GLOBAL_STAGES", [ProbeRepeats])
    ProbeRepeats.found.clear()
    ProbeRepeats.refused.clear()
    source = tmp_path / "in.jsonl"
    source.write_bytes(
        b"".join(
            line + b"\n"
            for line in export_lines(
                "pairwise-v2", 400, seed=3, defect_rate=0.05, duplicate_rate=0.1
            )
        )
    )
    config = CampaignConfig(inputs=(InputSpec(str(source)),)).override(
        **{"engine.shard_bytes": 96 * 1024, "engine.batch_lines": 16, "engine.workers": workers}
    )
    run(config, tmp_path / "out")
    assert len(ProbeRepeats.found) == 44
    assert len(ProbeRepeats.refused) == 2
    assert all("hash is null" in message for message in ProbeRepeats.refused)
    # natural groups: the retries repeat, and none varies; five groups: every row
    # repeats, and the rows where ``where`` holds vary; some rows seek what none offers
    found = [int(e.sum()) > 0 for e, *_ in ProbeRepeats.found]
    assert found == [True, False] * 3 + [True] * 38
    for expected, groups, mask, got in ProbeRepeats.found:
        assert np.array_equal(mask, expected)
        assert groups is None or np.array_equal(got, groups)
    assert ProbeRepeats.found[-1][0].sum() > 100  # groups found, of several keys each


def test_a_hash_check_is_refused_expressions_it_cannot_run(tmp_path: Path) -> None:
    """A check is repeats (a group), varying (and a value), grouping (and a key, and
    optionally a body) or matching (a key and who seeks it); any other set of
    expressions is refused before a task runs."""
    storage = RunStorage(tmp_path)
    group, text = pl.col("a").hash(), pl.col("a").cast(pl.String)
    for exprs in (
        {VALUE: group},
        {GROUP: group, SEEKS: pl.lit(True)},
        {GROUP: group, BODY: text},
        {GROUP: group, VALUE: group, TEXT: text},
        {GROUP: group, TEXT: text, SEEKS: pl.lit(True), BODY: text},
        {GROUP: group, VALUE: group, TEXT: text, SEEKS: pl.lit(True)},
    ):
        with pytest.raises(ValueError, match="a hash check's expressions are"):
            HashCheck.of(storage, "k", "n", (0,), exprs, partitions=1)


@pytest.mark.parametrize("workers", [1, 2])
def test_fetch_and_lineage_read_the_rows_asked_for(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, workers: int
) -> None:
    """``fetch`` takes the rows asked for out of the memory-mapped staged files (each
    once, in file order, of several Arrow batches a shard): they equal the staged rows
    read whole; ``with_lineage`` gives rows their input, source and line from their
    shard: those of the input line at each row's staged byte offset."""
    import pipeline.decide.stages  # noqa: F401

    monkeypatch.setattr(global_phase, "GLOBAL_STAGES", [ProbeReads])
    ProbeReads.seen.clear()
    ProbeReads.evaluated.clear()
    ProbeReads.valued.clear()
    source = tmp_path / "in.jsonl"
    source.write_bytes(
        b"".join(
            line + b"\n" for line in export_lines("pairwise-v2", 400, seed=3, defect_rate=0.05)
        )
    )
    config = CampaignConfig(inputs=(InputSpec(str(source)),)).override(
        **{"engine.shard_bytes": 96 * 1024, "engine.batch_lines": 16, "engine.workers": workers}
    )
    run(config, tmp_path / "out")
    [(fetched, expected, lineage, truth)] = ProbeReads.seen
    assert fetched["_shard"].n_unique() > 1
    assert expected.height > 20
    assert fetched.select(expected.columns).schema == expected.schema
    assert fetched.select(expected.columns).equals(expected)
    assert truth.select("_shard", "_shard_line").equals(expected.select("_shard", "_shard_line"))
    data = source.read_bytes()
    lines = [data[:offset].count(b"\n") + 1 for offset in truth["_offset"]]
    assert lineage.to_dict(as_series=False) == {
        "_input": [0] * len(lines),
        "_source": [str(source)] * len(lines),
        "_line": lines,
    }
    # expressions evaluated a staged batch at a time give the values of the shard read whole
    [(by_shard, by_batch)] = ProbeReads.evaluated
    assert by_shard.height > 100
    assert by_batch.equals(by_shard)
    # values: the same values as arrays lined up with the state's rows, which must be
    # every staged row in order (misaligned rows are refused, never read as others')
    [(values, refused)] = ProbeReads.valued
    for name in ("_h", "_n"):
        assert values[name].tolist() == by_shard[name].to_list()
    assert refused == [True] * 6


def _advance_by_join(
    current: pl.DataFrame, decided: pl.DataFrame, carried: set[str]
) -> pl.DataFrame:
    """The state's update as a join of every row (the reference :func:`advance` replaced)."""
    extras = [c for c in decided.columns if c in carried]
    current = current.drop([c for c in extras if c in current.columns])
    update = decided.select(
        "_shard",
        "_shard_line",
        (
            pl.col("_disposition") if "_disposition" in decided.columns else pl.lit(None, pl.String)
        ).alias("_new"),
        (
            pl.col("_reasons_add").list.eval(pl.element().struct.field("code"))
            if "_reasons_add" in decided.columns
            else pl.lit(None, pl.List(pl.String))
        ).alias("_new_codes"),
        *extras,
    )
    return (
        current.join(update, on=["_shard", "_shard_line"], how="left", maintain_order="left")
        .with_columns(
            _disposition=pl.coalesce(pl.col("_new").cast(DISPOSITIONS), "_disposition"),
            _reason_codes=pl.when(pl.col("_new_codes").is_null())
            .then(pl.col("_reason_codes"))
            .otherwise(pl.concat_list("_reason_codes", "_new_codes")),
        )
        .drop("_new", "_new_codes")
    )


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_the_state_is_updated_as_a_join_of_every_row_would(data: st.DataObject) -> None:
    """Dispositions, reasons and carried columns land on the decided rows, whatever rows
    a stage decides and in whatever order the state holds them; other columns stay out."""
    keys = data.draw(
        st.lists(st.tuples(st.integers(0, 5), st.integers(1, 1 << 40)), min_size=1, unique=True)
    )
    if data.draw(st.booleans()):
        keys.sort()
    current = pl.DataFrame(
        {
            "_shard": [k[0] for k in keys],
            "_shard_line": [k[1] for k in keys],
            "_disposition": ["accepted"] * len(keys),
            "_reason_codes": [["x.old"] if i % 3 == 0 else [] for i in range(len(keys))],
        },
        schema_overrides={
            "_shard": pl.Int32,
            "_disposition": DISPOSITIONS,
            "_reason_codes": pl.List(pl.String),
        },
    )
    chosen = data.draw(st.lists(st.sampled_from(keys), unique=True))
    reason = pl.struct(code=pl.lit("y.new"), path=pl.lit(""), detail=pl.lit(""))
    decided = pl.DataFrame(
        {"_shard": [k[0] for k in chosen], "_shard_line": [k[1] for k in chosen]},
        schema={"_shard": pl.Int32, "_shard_line": pl.Int64},
    ).with_columns(
        # a stage may add a reason without changing the disposition (null)
        _disposition=pl.when(pl.col("_shard_line") % 3 > 0).then(pl.lit("quarantined")),
        _reasons_add=pl.concat_list(reason),
        _kept=pl.col("_shard_line") * 2,
        _dropped=pl.lit("not carried"),
    )
    for columns in (["_disposition", "_reasons_add"], ["_reasons_add"], ["_disposition"], []):
        frame = decided.drop([c for c in ("_disposition", "_reasons_add") if c not in columns])
        got = global_phase.advance(current, frame, {"_kept"})
        assert got.equals(_advance_by_join(current, frame, {"_kept"}))
        assert "_dropped" not in got.columns


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_a_stage_applied_a_part_at_a_time_is_applied_as_all_its_parts_at_once(
    data: st.DataObject,
) -> None:
    """A stage's decisions applied to the state as they come (held while few, then
    scattered into one copy of the dispositions, a few parts at a time) give the state
    :func:`advance` gives for all of them at once, carried columns and reasons
    included; a row decided in two parts is refused either way, whatever it carries."""
    keys = data.draw(
        st.lists(st.tuples(st.integers(0, 5), st.integers(1, 1 << 40)), min_size=1, unique=True)
    )
    keys.sort()
    current = pl.DataFrame(
        {
            "_shard": [k[0] for k in keys],
            "_shard_line": [k[1] for k in keys],
            "_disposition": ["accepted"] * len(keys),
        },
        schema_overrides={"_shard": pl.Int32, "_disposition": DISPOSITIONS},
    )
    if data.draw(st.booleans()):  # a state a stage that reads them is given
        current = current.with_columns(
            _reason_codes=pl.Series([["x.old"]] * len(keys), dtype=pl.List(pl.String))
        )
    chosen = data.draw(st.permutations(range(len(keys))))[: data.draw(st.integers(0, len(keys)))]
    reason = pl.struct(code=pl.lit("y.new"), path=pl.lit(""), detail=pl.lit(""))
    decided = (
        current[list(chosen)]
        .select(KEYS)
        .with_columns(
            _disposition=pl.when(pl.col("_shard_line") % 3 > 0)
            .then(pl.lit("quarantined"))
            .otherwise(pl.when(pl.col("_shard_line") % 3 == 0).then(pl.lit("duplicate")))
            .cast(DISPOSITIONS),
            _reasons_add=pl.concat_list(reason),
        )
    )
    carried = {"_kept"} if data.draw(st.booleans()) else set()
    if carried:
        decided = decided.with_columns(_kept=pl.col("_shard_line") * 2)
    cuts = sorted(data.draw(st.lists(st.integers(0, decided.height), max_size=4)))
    parts = [decided[lo:hi] for lo, hi in itertools.pairwise([0, *cuts, decided.height])]
    held = data.draw(st.sampled_from([1, 2, 16, 1 << 40]))
    scattered = data.draw(st.sampled_from([1, 3, 1 << 19]))
    # no row decided: the state as it was (run_stages skips a stage that decides none)
    expected = global_phase.advance(current, decided, carried) if decided.height else current
    with (
        unittest.mock.patch.object(global_phase, "_HELD_SHARE", held),
        unittest.mock.patch.object(global_phase, "_SCATTER_ROWS", scattered),
    ):
        advancing = global_phase._Advancing(current, carried)
        for part in parts:
            if part.height:
                advancing.add(part)
        assert advancing.state().equals(expected)
        if decided.height:
            for twice in (decided, decided.select(KEYS)):  # whatever the row carries
                call = lambda twice=twice: _advanced(current, [twice, twice.tail(1)])  # noqa: E731
                assert _refuses(call, AssertionError)


def _advanced(current: pl.DataFrame, parts: Sequence[pl.DataFrame]) -> pl.DataFrame:
    advancing = global_phase._Advancing(current, set())
    for part in parts:
        advancing.add(part)
    return advancing.state()


def test_a_stage_s_parts_are_placed_with_the_state_s_shard_runs_read_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Scattering a stage's parts reads the state's shard runs once, not once a part:
    each read is a pass over every row of the state, and a stage makes a part of
    every 65,536 rows it decides."""
    shards = np.repeat(np.arange(8, dtype=np.int32), 1000)
    current = pl.DataFrame(
        {"_shard": shards, "_shard_line": np.tile(np.arange(1000, dtype=np.int64), 8)}
    ).with_columns(_disposition=pl.lit("accepted").cast(DISPOSITIONS))
    decided = current[::2].select(KEYS).with_columns(_disposition=pl.lit("duplicate"))
    reads = []
    runs = global_phase.shard_runs
    monkeypatch.setattr(global_phase, "shard_runs", lambda rows: reads.append(1) or runs(rows))
    monkeypatch.setattr(global_phase, "_SCATTER_ROWS", 100)
    advancing = global_phase._Advancing(current, set())
    for lo in range(0, decided.height, 50):
        advancing.add(decided.slice(lo, 50))
    assert advancing.state().equals(global_phase.advance(current, decided, set()))
    assert len(reads) == 2  # the scatter's, and advance's above


@settings(max_examples=80, deadline=None)
@given(st.sets(st.integers(0, 5000)), st.integers(0, 3))
def test_a_tasks_lines_are_the_lines_it_was_given(lines: set[int], shard: int) -> None:
    """A shard task carries a set of its lines as a bitmap or as values, whichever is
    smaller, and gives back the same lines: a few far apart as values, many as a
    bitmap (1/8 byte a line of the shard)."""
    given = np.array(sorted(lines), np.int64)
    encoded = line_set(np.random.default_rng(shard).permutation(given))
    [task] = shard_tasks([shard], {shard: encoded})
    assert task[0] == shard
    assert sorted(task_lines(task).to_list()) == sorted(lines)
    assert len(encoded) <= 1 + 8 * len(lines)
    if lines:
        assert len(encoded) <= 1 + max(lines) // 8 + 1 or len(encoded) == 1 + 8 * len(lines)
    assert task_lines((shard, b"")).len() == 0


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 1 << 40)), max_size=40))
def test_repeated_keys_are_those_polars_finds(keys: list[tuple[int, int]]) -> None:
    """The rows that share their keys with another row, and each of those but the first,
    as polars finds them by hashing the keys."""
    frame = pl.DataFrame(
        {"_shard": [k[0] for k in keys], "_shard_line": [k[1] for k in keys]},
        schema={"_shard": pl.Int32, "_shard_line": pl.Int64},
    )
    every = frame.select(pl.struct(KEYS).is_duplicated()).to_series().to_numpy()
    later = ~frame.select(pl.struct(KEYS).is_first_distinct()).to_series().to_numpy()
    assert np.array_equal(global_phase.repeated_keys(frame), every)
    assert np.array_equal(global_phase.repeated_keys(frame, every=False), later)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_places_find_each_decided_row_in_the_state(data: st.DataObject) -> None:
    """A decided row's place in the state: its offset in a shard whose lines are
    consecutive, else read a shard at a time, in a state in the order key; by sorting
    every key otherwise; a row the state lacks, or a row decided twice, is refused."""
    # lines from a few (a shard's often consecutive: placed by their offsets) or far apart
    lines = st.integers(0, 12) if data.draw(st.booleans()) else st.integers(1, 1 << 40)
    keys = sorted(data.draw(st.lists(st.tuples(st.integers(0, 5), lines), min_size=1, unique=True)))
    state = pl.DataFrame(
        {"_shard": [k[0] for k in keys], "_shard_line": [k[1] for k in keys]},
        schema={"_shard": pl.Int32, "_shard_line": pl.Int64},
    )
    if data.draw(st.booleans()):  # one chunk a shard, as the state is read
        state = pl.concat([part for _, part in state.group_by("_shard", maintain_order=True)])
    chosen = data.draw(st.lists(st.integers(0, len(keys) - 1), unique=True))
    decided = state[chosen]
    expected = np.array(chosen, dtype=np.int64)
    assert np.array_equal(global_phase._places(state, decided), expected)
    assert np.array_equal(global_phase._places_sorting(state, decided), expected)
    shuffled = state.sample(fraction=1.0, shuffle=True, seed=data.draw(st.integers(0, 9)))
    at = global_phase._places(shuffled, decided)
    assert shuffled[at].equals(decided)
    missing = [
        decided.with_columns(_shard=pl.lit(9, pl.Int32)),  # a shard the state lacks
        decided.with_columns(_shard_line=pl.col("_shard_line") + (1 << 41)),
        decided.with_columns(_shard_line=pl.col("_shard_line") - (1 << 41)),
        pl.concat([decided, decided.head(1)]),  # a row twice
    ]
    for wrong in missing if chosen else []:
        for state_in in (state, shuffled):
            call = lambda state_in=state_in, wrong=wrong: global_phase._places(state_in, wrong)  # noqa: E731
            assert _refuses(call, AssertionError)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_merging_a_shard_at_a_time_gives_the_merge_of_every_row(data: st.DataObject) -> None:
    """The decisions' merge runs in a task per shard (pipeline.decide.by_shard), over each
    stage's frame cut to the shard (kept when empty, for its columns): each shard's
    table is the one the merge of every row gives for it."""
    reason = pl.struct(code=pl.lit("y.new"), path=pl.lit(""), detail=pl.lit(""))
    columns = [
        OutputColumn("_kept", pa.int64(), frozenset({Disposition.ACCEPTED})),
        OutputColumn("_noted", pa.string(), frozenset({Disposition.ACCEPTED})),
    ]
    frames = []
    for stage in range(data.draw(st.integers(1, 4))):
        keys = data.draw(
            st.lists(st.tuples(st.integers(0, 4), st.integers(0, 30)), unique=True, max_size=25)
        )
        frame = pl.DataFrame(
            {"_shard": [k[0] for k in keys], "_shard_line": [k[1] for k in keys]},
            schema={"_shard": pl.Int32, "_shard_line": pl.Int64},
        )
        made = {
            "_disposition": pl.when(pl.col("_shard_line") % 2 == stage % 2).then(
                pl.lit(["quarantined", "duplicate", "rejected", "accepted"][stage])
            ),
            "_reasons_add": pl.when(pl.col("_shard_line") % 3 > 0).then(pl.concat_list(reason)),
            "_kept": pl.col("_shard_line") * (stage + 1),
            "_noted": pl.lit(f"stage {stage}"),
        }
        chosen = data.draw(st.lists(st.sampled_from(sorted(made)), unique=True))
        frames.append(frame.with_columns(**{name: made[name] for name in chosen}))
    whole = global_phase.by_shard(global_phase.merge_decisions(frames), columns)
    for shard in range(5):
        cut = [f.filter(pl.col("_shard") == shard) for f in frames]
        if not any(f.height for f in cut):
            assert shard not in whole
            continue
        alone = global_phase.by_shard(global_phase.merge_decisions(cut), columns)
        assert alone[shard].equals(whole[shard])


def test_a_shuffle_task_carries_only_its_own_shards_lines_left_out(tmp_path: Path) -> None:
    """The check goes with every task; the lines left out (rows an earlier rule
    removed: as many as a third of the rows, in a run of retries) go each with its own
    shard's shuffle task alone, never with the check to every task."""
    seen: list[tuple[Any, list[object]]] = []

    class Recording:
        def map(self, step: Step[Any, Any, Any], tasks: Any, *args: object) -> list[Any]:
            seen.append((step, list(tasks)))
            empty = np.zeros(0, np.int64)
            return [Found(empty.astype(np.int32), empty, empty.astype(np.uint64))]

    key = pl.col("a").cast(pl.String)
    exprs = {GROUP: key.hash(), TEXT: key, SEEKS: pl.lit(True)}
    check = HashCheck.of(RunStorage(tmp_path), "k", "n", (0, 1, 2), exprs, partitions=1)
    lines = {0: np.arange(100_000, dtype=np.int64), 2: np.array([70_000], np.int64)}
    left_out = {shard: line_set(values) for shard, values in lines.items()}
    check.run(cast(Any, Recording()), left_out)
    (shuffle, tasks), (_, partitions) = seen
    assert tasks == [(0, left_out[0]), (1, b""), (2, left_out[2])]
    assert len(left_out[0]) == 1 + 100_000 // 8  # a bitmap: many lines
    assert len(left_out[2]) == 1 + 8  # a value: one line far in
    assert partitions == [0]
    assert len(pickle.dumps(shuffle.init_args)) < 4096  # no shard's lines in the check


def test_a_group_place_holds_its_shard_and_line_or_is_refused() -> None:
    """A grouping check's group packs the first row's shard position and line in 64
    bits: decoded back to the same row, and a line or shard count past them refused
    rather than wrapped into another row's id."""
    lines = np.array([0, 7, (1 << 40) - 1, 3], np.int64)
    places = group_places([2, 0, 2], lines)
    shards, back = first_rows((5, 9, 11), places)
    assert shards.tolist() == [5, 5, 11, 11]
    assert back.tolist() == lines.tolist()
    with pytest.raises(ValueError, match="past a group's 64 bits"):
        group_places([1], np.array([1 << 40], np.int64))
    with pytest.raises(ValueError, match="past a group's 64 bits"):
        group_places([0] * (1 << 24), np.zeros(0, np.int64))


def test_fetched_sets_staged_columns_beside_the_rows_asked_for() -> None:
    """``fetched``: the staged columns in the order of the rows asked for (set beside
    rows in file order, joined to rows in another), and a row the files lack is an
    error, never a null."""
    staged = pl.DataFrame(
        {"_shard": [0, 0, 1], "_shard_line": [1, 4, 2], "v": ["a", "b", "c"]},
        schema_overrides={"_shard": pl.Int32},
    )

    def fetch(kind: str, keys: pl.DataFrame, columns: list[str], stem: object) -> pl.DataFrame:
        return keys.join(staged, on=list(KEYS)).sort(list(KEYS))  # file order, as read

    ctx = types.SimpleNamespace(fetch=fetch)
    rows = staged.select(KEYS).with_columns(n=pl.Series([10, 20, 30]))
    in_order = GlobalContext.fetched(ctx, "k", rows, ["v"])  # type: ignore[arg-type]
    assert in_order["v"].to_list() == ["a", "b", "c"]
    assert in_order["n"].to_list() == [10, 20, 30]
    shuffled = GlobalContext.fetched(ctx, "k", rows[[2, 0, 1]], ["v"])  # type: ignore[arg-type]
    assert shuffled["v"].to_list() == ["c", "a", "b"]
    extra = pl.DataFrame({"_shard": [1], "_shard_line": [9], "n": [40]}).cast({"_shard": pl.Int32})
    with pytest.raises(AssertionError, match="4 rows asked for, 3 read"):
        GlobalContext.fetched(ctx, "k", pl.concat([rows, extra]), ["v"])  # type: ignore[arg-type]


def test_keys_of_shares_the_states_buffers_and_copies_only_the_rows_asked_for() -> None:
    """The keys of every row share the state's buffers (an eager select copied them all:
    12 bytes a row of the state); with a mask, they are the masked rows' keys."""
    staged = pl.DataFrame({"_shard_line": np.arange(4) * 3, "x": 1.0})
    # as GlobalContext.scan reads the state: a shard at a time, its number a literal
    parts = [
        staged.lazy()
        .with_columns(_shard=pl.lit(shard, pl.Int32))
        .select("_shard", "_shard_line", "x")
        .collect()
        for shard in range(3)
    ]
    state = pl.concat(parts, rechunk=False)
    keys = global_phase.keys_of(state)
    assert keys.columns == ["_shard", "_shard_line"]
    for name in keys.columns:
        assert keys[name].n_chunks() == state[name].n_chunks()
        for ours, theirs in zip(keys[name].get_chunks(), state[name].get_chunks(), strict=True):
            assert _address(ours) == _address(theirs)
    mask = np.arange(12) % 5 == 0
    assert global_phase.keys_of(state, mask).equals(
        state.filter(mask).select("_shard", "_shard_line")
    )
    assert global_phase.keys_of(state, pl.Series(mask)).height == 3


def test_advance_shares_the_columns_it_does_not_change() -> None:
    """A stage's dispositions rebuild the state's disposition alone, and a carried column
    it replaces that column alone: the keys stay the state's buffers (an eager drop, of
    no column or of the replaced one, copied every row's)."""
    staged = pl.DataFrame({"_shard_line": np.arange(6), "_disposition": "accepted"})
    state = pl.concat(
        [
            staged.lazy()
            .with_columns(
                _shard=pl.lit(shard, pl.Int32),
                _disposition=pl.col("_disposition").cast(DISPOSITIONS),
                _kept=pl.lit(0.0),  # a carried column, as scoring's
            )
            .select(*global_phase.KEYS, "_disposition", "_kept")
            .collect()
            for shard in range(2)
        ],
        rechunk=False,
    )
    decided = pl.DataFrame(
        {"_shard": [1], "_shard_line": [2], "_disposition": ["rejected"]},
        schema={"_shard": pl.Int32, "_shard_line": pl.Int64, "_disposition": pl.String},
    )
    advanced = global_phase.advance(state, decided, set())
    assert advanced["_disposition"].to_list() == ["accepted"] * 8 + ["rejected"] + ["accepted"] * 3
    replaced = global_phase.advance(state, decided.with_columns(_kept=pl.lit(1.0)), {"_kept"})
    assert replaced["_kept"].to_list() == [None] * 8 + [1.0] + [None] * 3
    for name in global_phase.KEYS:
        for frame in (advanced, replaced):
            assert [_address(c) for c in frame[name].get_chunks()] == [
                _address(c) for c in state[name].get_chunks()
            ]


def _address(chunk: pl.Series) -> int:
    """Where a one-chunk series' values live (its Arrow view is zero-copy)."""
    return int(chunk.to_arrow().buffers()[1].address)


def _mapped_ranges(name: str) -> list[tuple[int, int]]:
    """The address ranges at which this process maps a file whose name ends ``name``."""
    ranges = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            if len(fields) >= 6 and fields[5].endswith(name):
                start, end = (int(a, 16) for a in fields[0].split("-"))
                ranges.append((start, end))
    return ranges


class ProbeState:
    """Keeps the state it is given, the staged rows' own keys and dispositions (read as
    ``scan`` reads them), and whether each chunk of the state's keys lies in a mapping of
    the kind's state file (decides nothing)."""

    name = "probe-state"
    order = 1
    seen: ClassVar[dict[str, tuple[pl.DataFrame, pl.DataFrame, list[bool]]]] = {}

    def enabled(self, config: CampaignConfig) -> bool:
        return True

    def output_columns(self, ctx: GlobalContext, kind: str) -> Sequence[OutputColumn]:
        return []

    def decide(self, ctx: GlobalContext, kind: str, rows: pl.DataFrame) -> None:
        ranges = _mapped_ranges(f"/{ctx.storage.state_stem(kind)}.arrow")
        mapped = [
            any(lo <= _address(chunk) < hi for lo, hi in ranges)
            for name in KEYS
            for chunk in rows[name].get_chunks()
        ]
        self.seen[kind] = (rows, ctx.scan(kind), mapped)


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs /proc/self/maps (Linux)")
def test_the_state_is_every_staged_row_with_its_keys_mapped_from_the_staging_area(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The state a stage is given is every staged row of its kind, with the gate's
    dispositions, in the stable order key, one chunk a shard; its keys are pages of the
    kind's state file in the staging area, not the driver's own memory."""
    monkeypatch.setattr(global_phase, "GLOBAL_STAGES", [ProbeState])
    ProbeState.seen.clear()
    inputs = []
    for kind, seed in (("pairwise-v2", 5), ("grounded-qa-v1", 6)):
        source = tmp_path / f"{kind}.jsonl"
        lines = export_lines(kind, 300, seed=seed, defect_rate=0.1)
        source.write_bytes(b"".join(line + b"\n" for line in lines))
        inputs.append(InputSpec(str(source), kind=kind))
    # two kinds routed line by line, interleaved: shards that hold rows of both
    mixed = zip(
        export_lines("ari-replication-rubric-3", 200, seed=7, defect_rate=0.1),
        export_lines("ari-replication-rubric-v2", 200, seed=8, defect_rate=0.1),
        strict=True,
    )
    (tmp_path / "ari.jsonl").write_bytes(b"".join(a + b"\n" + b + b"\n" for a, b in mixed))
    inputs.append(InputSpec(str(tmp_path / "ari.jsonl")))
    config = CampaignConfig(inputs=tuple(inputs)).override(
        **{"engine.shard_bytes": 64 * 1024, "engine.batch_lines": 16, "engine.workers": 2}
    )
    run(config, tmp_path / "out")
    assert sorted(ProbeState.seen) == [
        "ari-replication-rubric-3",
        "ari-replication-rubric-v2",
        "grounded-qa-v1",
        "pairwise-v2",
    ]
    shards = [set(state["_shard"].to_list()) for state, _, _ in ProbeState.seen.values()]
    assert any(a & b for a, b in itertools.combinations(shards, 2))  # a shard of two kinds
    dispositions = set()
    for state, staged, mapped in ProbeState.seen.values():
        assert state.columns == list(global_phase.STATE_COLUMNS)
        assert state.schema == staged.schema
        assert state.equals(staged)
        assert state["_shard"].n_unique() > 1
        assert state["_shard_line"].n_chunks() == state["_shard"].n_unique()
        dispositions |= set(state["_disposition"].to_list())
        assert mapped
        assert all(mapped)
    assert len(dispositions) > 1  # the gate's, held beside the keys


def test_a_checks_partitions_are_at_most_its_rows() -> None:
    """A count given is taken up to the rows a check reads: a partition past them holds
    nothing (65,536 on 10 rows in 5 shards took 168 s against 1.4 s with 8)."""
    from pipeline.decide.partitioned import partition_count

    assert partition_count(10, 1, 2, 5, 65536) == 10
    assert partition_count(10, 1, 2, 5, 7) == 7
    assert partition_count(0, 1, 2, 5, 64) == 1
    assert partition_count(10, 1, 2, 5, None) == 2  # unset: a multiple of the workers


class ProbeLed:
    """Leads the rows of each key in each split with ``led_groups`` (on the engine, at
    several partition counts) and over every row's values here (decides nothing)."""

    name = "probe-led"
    order = 1
    #: (expected, got) per partition count: leaders, their groups, how many each
    #: leads, and each follower with its leader (places among the rows)
    found: ClassVar[list[tuple[Any, Any]]] = []

    def enabled(self, config: CampaignConfig) -> bool:
        return True

    def output_columns(self, ctx: GlobalContext, kind: str) -> Sequence[OutputColumn]:
        return []

    def decide(self, ctx: GlobalContext, kind: str, rows: pl.DataFrame) -> pl.DataFrame | None:
        # eleven keys, one held by a single row; every seventh row left out
        line = pl.col("_shard_line")
        key = pl.when(line == 5).then(pl.lit("alone")).otherwise((line % 11).cast(pl.String))
        left_out = (rows["_shard_line"] % 7 == 0).to_numpy()
        got = ctx.values(kind, rows, {"k": key})
        split = rows["_shard"].replace_strict(ctx.split_numbers(), default=None).to_list()
        # a survivor value with ties (across shards too), nulls and NaNs, which rank last
        value = (
            pl.when(line % 13 == 0)
            .then(None)
            .when(line % 17 == 0)
            .then(float("nan"))
            .otherwise((line * 7919 % 5).cast(pl.Float64))
        )
        read = ctx.values(kind, rows, {"v": value.fill_null(0.0), "null": value.is_null()})
        values = [None if n else v for v, n in zip(read["v"], read["null"], strict=True)]

        def rank_key(leader: str, i: int) -> tuple[Any, ...]:
            v = values[i]
            if leader in ("first", "last"):
                return (i if leader == "first" else -i,)
            if v is None or math.isnan(v):
                return (1, 0.0, i)
            return (0, -v if leader == "max" else v, i)

        for leader in LEADERS:  # led by the best-ranked row of a key and split
            leaders: dict[tuple[str, Any], int] = {}
            keys: dict[str, list[int]] = {}
            for i, k in enumerate(got["k"]):
                if not left_out[i]:
                    keys.setdefault(k, []).append(i)
                    best = leaders.get((k, split[i]))
                    if best is None or rank_key(leader, i) < rank_key(leader, best):
                        leaders[(k, split[i])] = i
            shared = {k for k, members in keys.items() if len(members) > 1}
            lead = {i: leaders[(got["k"][i], split[i])] for k in shared for i in keys[k]}
            led = Counter(lead.values())
            first = {k: keys[k][0] for k in shared}
            expected = (
                sorted(led),
                [first[got["k"][i]] for i in sorted(led)],
                [led[i] for i in sorted(led)],
                sorted((i, j) for i, j in lead.items() if i != j),
            )
            for count in (1, 7, 64):
                at = dataclasses.replace(
                    ctx, config=ctx.config.override(**{"engine.partitions": count})
                )
                grouped, following = at.led_groups(
                    kind,
                    rows,
                    "probe",
                    key,
                    key.hash(),
                    left_out=left_out,
                    leader=leader,
                    rank=value if leader in ("max", "min") else None,
                )
                places = np.flatnonzero(grouped.found)
                shard, line_of = first_rows(ctx.shards_of(kind), grouped.groups)
                group_rows = _places_of(rows, shard, line_of)
                assert (np.diff(following.followers) > 0).all()  # the rows led ascend
                pairs = zip(following.followers.tolist(), following.leaders.tolist(), strict=True)
                self.found.append(
                    (
                        expected,
                        (places.tolist(), group_rows, following.led.tolist(), sorted(pairs)),
                    )
                )
        return None


def _places_of(rows: pl.DataFrame, shards: Any, lines: Any) -> list[int]:
    """The places among ``rows`` of the rows at ``shards`` and ``lines``."""
    at = {
        (s, n): i for i, (s, n) in enumerate(zip(rows["_shard"], rows["_shard_line"], strict=True))
    }
    return [at[(int(s), int(n))] for s, n in zip(shards, lines, strict=True)]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_led_check_leads_each_keys_rows_in_a_split_by_their_first(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, workers: int
) -> None:
    """``led_groups`` finds, partition by partition on the engine, the best-ranked row
    of each key in each split (an unlabelled input is a split of its own) by each
    survivor rule (its first, its last, its best by a value with ties, nulls and NaNs),
    among the keys two rows share, the rows left out taking no part: each leader with
    its key's first row as its group and how many rows it leads, and every other row of
    those keys with its leader, as over every row's values, at any partition count. The
    rows led are staged by the partition tasks and read back a few at a time."""
    import pipeline.decide.stages  # noqa: F401

    monkeypatch.setattr(global_phase, "GLOBAL_STAGES", [ProbeLed])
    monkeypatch.setattr(partitioned, "FOLLOWER_ROWS", 7)  # many slices, a leader in several
    ProbeLed.found.clear()
    lines = list(export_lines("pairwise-v2", 240, seed=5))
    specs = []
    for i, split in enumerate(("train", "eval", None, "train")):
        path = tmp_path / f"in{i}.jsonl"
        path.write_bytes(b"".join(line + b"\n" for line in lines[i::4]))
        specs.append(InputSpec(str(path), split=split))
    config = CampaignConfig(inputs=tuple(specs)).override(
        **{"engine.shard_bytes": 48 * 1024, "engine.workers": workers}
    )
    run(config, tmp_path / "out")
    assert len(ProbeLed.found) == 3 * len(LEADERS)
    for expected, got in ProbeLed.found:
        assert got == expected
    by_leader = ProbeLed.found[::3]  # first, last, max, min
    for found in by_leader:
        leaders, _, led, followers = found[0]
        assert len(leaders) > 11
        assert max(led) > 2
        assert len(followers) > 100
    assert len({tuple(found[0][0]) for found in by_leader}) == len(LEADERS)  # other leaders


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.data())
def test_the_rows_led_are_placed_a_block_of_shards_at_a_time_from_every_partition(
    tmp_path: Path, data: st.DataObject
) -> None:
    """Staged by partition (each file in the shards' order, each row with its leader's
    place among its partition's rows found), the rows led come back ascending with their
    leaders (``bases`` moving each file's to the rows found before it), every shard's
    rows placed in one call, a block of shards of about ``FOLLOWER_ROWS`` at a time;
    with more files than ``MAPPED_FILES``, merged that many at a time first."""

    shards = (3, 5, 8, 9)  # the check's shards; a state place is shard * 100 + line
    storage = RunStorage(tmp_path / data.draw(st.uuids()).hex)
    files = data.draw(st.integers(1, 4))
    everything = data.draw(
        st.lists(st.tuples(st.integers(0, 3), st.integers(0, 99)), unique=True, max_size=40)
    )
    parts, bases, found = [], [], 0
    found_at = np.arange(4 * 5, dtype=np.int64) * 7  # the rows found's places
    pairs = []
    for p in range(files):
        mine = sorted(everything[p::files])
        leaders = data.draw(st.integers(1, 5))  # this partition's rows found
        leader = [data.draw(st.integers(0, leaders - 1)) for _ in mine]
        pairs += [
            (shards[s] * 100 + line, int(found_at[found + lead]))
            for (s, line), lead in zip(mine, leader, strict=True)
        ]
        if mine:
            stem = f"k.hash-probe.led-{p}"
            storage.stage_whole(
                stem,
                pa.table(
                    {
                        "_position": np.array([s for s, _ in mine], np.int32),
                        "_shard_line": np.array([line for _, line in mine], np.int64),
                        "_leader": np.array(leader, np.int64),
                    }
                ),
            )
            parts.append(Followers((stem,), (len(mine),)))
        else:
            parts.append(Followers())
        bases.append(found)
        found += leaders
    following = Followers.of(parts, bases)
    calls: list[list[int]] = []

    def rows_at(shard: np.ndarray, line: np.ndarray) -> np.ndarray:
        calls.append(shard.tolist())
        return shard.astype(np.int64) * 100 + line

    block = data.draw(st.integers(1, 12))
    mapped = data.draw(st.integers(2, 4))  # fewer than the files: merged first
    # in the stable order key as they are placed: no sort after
    unsorted = unittest.mock.patch.object(partitioned, "sort_pairs", side_effect=AssertionError)
    merging = unittest.mock.patch.object(partitioned, "MAPPED_FILES", mapped)
    with unittest.mock.patch.object(partitioned, "FOLLOWER_ROWS", block), unsorted, merging:
        rows, led_by = following.placed(storage, shards, rows_at, lambda at: found_at[at], 1000)
    assert list(zip(rows.tolist(), led_by.tolist(), strict=True)) == sorted(pairs)
    # every shard's rows in one call, the calls in the shards' order
    assert all(call == sorted(call) for call in calls)
    called = [shard for call in calls for shard in dict.fromkeys(call)]
    assert called == sorted(set(called))
    assert all(len(call) <= block or len(set(call)) == 1 for call in calls)


def test_a_stage_s_part_is_let_go_before_its_next_is_made() -> None:
    """The driver stages a stage's decisions a part at a time and keeps only their keys
    and dispositions: no part is held while the stage makes the next (a part of
    dedupe's decisions is ~13 MB of pointers and reasons)."""
    import weakref

    made: list[weakref.ref[pl.DataFrame]] = []
    alive: list[bool] = []

    class Parts:
        name = "parts"
        order = 1

        def decide(self, ctx: object, kind: str, rows: pl.DataFrame) -> Any:
            for line in range(3):
                alive.append(bool(made) and made[-1]() is not None)
                part = pl.DataFrame(
                    {
                        "_shard": pl.Series([0], dtype=pl.Int32),
                        "_shard_line": pl.Series([line], dtype=pl.Int64),
                        "_disposition": pl.Series(["duplicate"], dtype=DISPOSITIONS),
                        "_pointer": ["a path and a digest"],
                    }
                )
                made.append(weakref.ref(part))
                yield part
                del part

    state = pl.DataFrame(
        {
            "_shard": pl.Series([0, 0, 0], dtype=pl.Int32),
            "_shard_line": pl.Series([0, 1, 2], dtype=pl.Int64),
            "_disposition": pl.Series(["accepted"] * 3, dtype=DISPOSITIONS),
        }
    )
    staged: list[int] = []
    after = global_phase.run_stages(
        cast(GlobalContext, types.SimpleNamespace(on_stage=lambda name: None)),
        "k",
        [cast(global_phase.GlobalStage, Parts())],
        state,
        [],
        set(),
        {},
        read_after=True,
        stage_part=lambda i, part: staged.append(part.height),
    )
    assert staged == [1, 1, 1]
    assert after["_disposition"].to_list() == ["duplicate"] * 3
    assert alive == [False, False, False]
