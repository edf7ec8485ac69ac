"""The dedupe stage end to end: a labelled corpus, outputs, splits, determinism."""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import orjson
import polars as pl
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.core.config import CampaignConfig, ConfigError, InputSpec
from pipeline.decide import context as global_phase
from pipeline.decide.context import GlobalContext, OutputColumn
from pipeline.decide.stages import dedupe
from pipeline.decide.stages.dedupe import Dedupe
from pipeline.dedupe import near_check
from pipeline.dedupe.splits import straddling_groups
from pipeline.dedupe.table import RemovedRows, match_duplicates
from pipeline.jobs.run import run
from pipeline.kinds import get_kind
from pipeline.output.verify import verify_run
from pipeline.testing.corpus import LabelledRow, duplicate_corpus
from tests.conftest import DATA
from tests.dedupe_helpers import write_lines

KIND = "pairwise-v2"


@pytest.fixture(scope="module")
def corpus() -> list[LabelledRow]:
    return list(duplicate_corpus(1500, seed=21, duplicate_rate=0.35))


@pytest.fixture(scope="module")
def corpus_run(
    corpus: list[LabelledRow], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("corpus")
    source = write_lines(root / "corpus.jsonl", corpus)
    config = CampaignConfig(inputs=(InputSpec(str(source)),)).override(
        **{"engine.workers": 1, "dedupe.normalised": True, "dedupe.near": True}
    )
    result = run(config, root / "out")
    return root / "out", result.manifest


def _duplicates(out: Path) -> pl.DataFrame:
    return pl.read_parquet(out / "duplicates" / KIND).with_columns(
        row=pl.col("_line") - 1, kept_row=pl.col("_duplicate_of").struct.field("_line") - 1
    )


@pytest.mark.slow
def test_exact_and_normalised_detection_is_exact(
    corpus: list[LabelledRow], corpus_run: tuple[Path, dict]
) -> None:
    out, _ = corpus_run
    removed = {r["row"]: r for r in _duplicates(out).iter_rows(named=True)}
    for rule in ("exact", "normalised"):
        expected = {i for i, r in enumerate(corpus) if r.expected == rule}
        found = {i for i, r in removed.items() if r["_dedupe_rule"] == rule}
        assert expected, rule
        assert found == expected, rule
        assert all(removed[i]["kept_row"] == corpus[i].source for i in expected)
    assert not any(r.label == "original" for i, r in enumerate(corpus) if i in removed)


def test_near_duplicate_precision_and_recall(
    corpus: list[LabelledRow], corpus_run: tuple[Path, dict]
) -> None:
    out, _ = corpus_run
    near = _duplicates(out).filter(pl.col("_dedupe_rule") == "near")
    positives = {i for i, r in enumerate(corpus) if r.expected == "near"}
    found = set(near["row"].to_list())
    true = {r["row"] for r in near.iter_rows(named=True) if r["row"] in positives
            and r["kept_row"] == corpus[r["row"]].source}  # fmt: skip
    precision, recall = len(true) / len(found), len(true) / len(positives)
    assert len(positives) > 50
    assert precision >= 0.95, precision
    assert recall >= 0.95, recall
    assert (near["_similarity_verified"] >= 0.8).all()
    assert near["_similarity_estimated"].is_not_null().all()
    # far variants (planted Jaccard ≤ 0.65) are all kept
    assert not any(corpus[i].label == "far" for i in found)


def test_duplicates_files_clusters_and_manifest(corpus_run: tuple[Path, dict]) -> None:
    out, manifest = corpus_run
    duplicates = _duplicates(out)
    accepted = pl.read_parquet(out / "accepted" / KIND)
    assert {"_duplicate_of", "_dedupe_rule", "_dedupe_cluster", "_similarity_estimated",
            "_similarity_verified"} <= set(duplicates.columns)  # fmt: skip
    assert "_duplicate_of" not in accepted.columns
    # every pointer names an accepted row, by source, line and record hash
    kept = duplicates.select(
        _line=pl.col("_duplicate_of").struct.field("_line"),
        _record_sha256=pl.col("_duplicate_of").struct.field("_record_sha256"),
    )
    assert kept.join(accepted, on=["_line", "_record_sha256"], how="anti").height == 0
    codes = [r[-1]["code"] for r in duplicates["_reasons"].to_list()]
    assert codes == [f"dedupe.{rule}" for rule in duplicates["_dedupe_rule"].to_list()]
    clusters = pl.read_parquet(out / "dedupe" / "clusters" / f"{KIND}.parquet")
    sizes = duplicates.group_by("_dedupe_cluster").len()
    joined = clusters.join(sizes, left_on="cluster", right_on="_dedupe_cluster")
    assert joined.height == clusters.height
    assert (joined["size"] == joined["len"] + 1).all()
    notes = manifest["global"]["dedupe"][KIND]
    assert notes["removed"] == duplicates.height
    assert manifest["counts"]["by_reason"]["duplicate"]["dedupe.near"] == notes["by_rule"]["near"]
    assert {a["path"] for a in manifest["artifacts"]} == {
        f"dedupe/clusters/{KIND}.parquet", f"dedupe/split_groups/{KIND}.parquet",
    }  # fmt: skip
    report = verify_run(out)
    assert report.ok, report.problems


class QuarantineOriginals:
    """Quarantines every original that has a planted copy, before dedupe runs."""

    name = "hold"
    order = 100

    def __init__(self, lines: Sequence[int]) -> None:
        self.lines = list(lines)

    def enabled(self, config: CampaignConfig) -> bool:
        return True

    def output_columns(self, ctx: GlobalContext, kind: str) -> Sequence[OutputColumn]:
        return []

    def decide(self, ctx: GlobalContext, kind: str, rows: pl.DataFrame) -> pl.DataFrame | None:
        return (
            ctx.with_lineage(rows)
            .filter(pl.col("_line").is_in(self.lines))
            .select("_shard", "_shard_line", _disposition=pl.lit("quarantined"))
        )


def test_only_accepted_rows_take_part(
    corpus: list[LabelledRow], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = corpus[:300]
    held = sorted({r.source for r in rows if r.expected == "exact"})
    monkeypatch.setattr(
        global_phase, "GLOBAL_STAGES", [lambda: QuarantineOriginals([s + 1 for s in held]), Dedupe]
    )
    groups: list[Any] = []

    def match_spy(frame: pl.DataFrame, *args: Any, **kwargs: Any) -> Any:
        groups.append((args[3].exact, args[3].weight))  # the row keys' exact groups
        return match_duplicates(frame, *args, **kwargs)

    monkeypatch.setattr(dedupe, "match_duplicates", match_spy)
    source = write_lines(tmp_path / "c.jsonl", rows)
    run(CampaignConfig(inputs=(InputSpec(str(source)),)), tmp_path / "out")
    quarantined = pl.read_parquet(tmp_path / "out" / "quarantined" / KIND)
    assert sorted(quarantined["_line"].to_list()) == [s + 1 for s in held]
    duplicates = _duplicates(tmp_path / "out")
    # a quarantined row is never a survivor: no pointer names it
    assert not set(duplicates["kept_row"].to_list()) & set(held)
    # nor a reason to match a row: a copy of a quarantined row alone takes no part (an
    # exact group's leader stands for the rows it leads, which take no part themselves)
    ((exact, weight),) = groups
    assert len(exact) > 0
    assert np.bincount(exact, weight).min() >= 2


def _second_annotations(rows: list[LabelledRow], others: list[LabelledRow]) -> list[LabelledRow]:
    """The same tasks with another candidate pair: same task id, not a duplicate."""
    out = []
    for row, other in zip(rows, others, strict=True):
        record = orjson.loads(row.line)
        donor = orjson.loads(other.line)
        record["response_a"], record["response_b"] = donor["response_a"], donor["response_b"]
        out.append(LabelledRow(orjson.dumps(record), "original"))
    return out


def _split_inputs(tmp_path: Path, corpus: list[LabelledRow]) -> CampaignConfig:
    train = write_lines(tmp_path / "train.jsonl", corpus[:400])
    # eval: fresh rows, 40 rows copied from train (some of them variants), and second
    # annotations of 20 train tasks, which share their task ids across the splits
    originals = [r for r in corpus[300:400] if r.label == "original"][:20]
    donors = [r for r in corpus[600:900] if r.label == "original"][:20]
    second = _second_annotations(originals, donors)
    eval_ = write_lines(tmp_path / "eval.jsonl", corpus[400:600] + corpus[:40] + second)
    return CampaignConfig(
        inputs=(InputSpec(str(train), split="train"), InputSpec(str(eval_), split="eval")),
        dedupe=CampaignConfig().dedupe.__class__(
            protected_splits=("eval",), normalised=True, near=True
        ),
        # one task annotated twice is a conflict under the default rules; this campaign
        # treats task ids as tasks, not submissions, so the split report can show them
        rules=CampaignConfig().rules.__class__(disabled=("cross.idempotency_conflict",)),
    ).validate()


@pytest.mark.slow
def test_contamination_removes_train_copies_of_eval_rows(
    corpus: list[LabelledRow], tmp_path: Path
) -> None:
    config = _split_inputs(tmp_path, corpus)
    found: list[pl.DataFrame] = []
    candidates = dedupe._straddling_candidates

    def spy(*given: Any) -> pl.DataFrame:
        found.append(candidates(*given))
        return found[-1]

    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(dedupe, "_straddling_candidates", spy)
        result = run(config, tmp_path / "out")
    duplicates = pl.read_parquet(tmp_path / "out" / "duplicates" / KIND)
    eval_path = config.inputs[1].path
    contaminated = duplicates.filter(pl.col("_dedupe_rule") == "contamination")
    assert contaminated.height >= 40
    assert (contaminated["_source"] != eval_path).all()
    assert (contaminated["_duplicate_of"].struct.field("_source") == eval_path).all()
    # every row of the protected split is kept unless it duplicates another eval row
    from_eval = duplicates.filter(pl.col("_source") == eval_path)
    assert (from_eval["_duplicate_of"].struct.field("_source") == eval_path).all()
    assert "dedupe.contamination" in result.manifest["counts"]["by_reason"]["duplicate"]
    # second annotations share task ids across splits: reported, not removed
    accepted = pl.read_parquet(tmp_path / "out" / "accepted" / KIND)
    flagged = accepted.filter(
        pl.col("_reasons")
        .list.eval(pl.element().struct.field("code") == "dedupe.split_group")
        .list.any()
    )
    groups = pl.read_parquet(tmp_path / "out" / "dedupe" / "split_groups" / f"{KIND}.parquet")
    assert groups.height > 0
    assert set(flagged["task_id"].to_list()) == set(groups["value"].to_list())
    assert result.manifest["global"]["dedupe"][KIND]["straddling_groups"] == groups.height
    # the groups were found among the few rows a varying check on the engine named (a
    # task id in both splits), not among every accepted row
    (named,) = found
    assert flagged.height <= named.height < accepted.height
    assert set(flagged["task_id"].to_list()) <= set(named["task_id"].to_list())
    assert set(named["_split"].to_list()) == {"train", "eval"}


def _train_and_eval(tmp_path: Path, lines: list[bytes]) -> tuple[Any, pl.DataFrame]:
    """A run of pw-decide-row ``lines``, the first half labelled train and the rest
    eval; its result and split-groups table."""
    half = len(lines) // 2
    (tmp_path / "a.jsonl").write_bytes(b"".join(line + b"\n" for line in lines[:half]))
    (tmp_path / "b.jsonl").write_bytes(b"".join(line + b"\n" for line in lines[half:]))
    config = CampaignConfig(
        inputs=(
            InputSpec(str(tmp_path / "a.jsonl"), split="train"),
            InputSpec(str(tmp_path / "b.jsonl"), split="eval"),
        )
    )
    result = run(config, tmp_path / "out")
    table = pl.read_parquet(
        tmp_path / "out" / "dedupe" / "split_groups" / "pw-decide-row-1.parquet"
    )
    return result, table


@pytest.mark.slow
def test_pw_decide_meta_groups_straddling_splits_are_reported(tmp_path: Path) -> None:
    from pipeline.testing.synthetic import export_lines

    lines = list(export_lines("pw-decide-row-1", 40, seed=3))
    result, groups = _train_and_eval(tmp_path, lines)
    # synthetic meta: task t-(i % 7), group g-(i % 5): all of them straddle
    assert set(groups["field"].to_list()) == {"meta.task", "meta.group"}
    assert groups.height == 7 + 5
    # one reason per straddling field: every row has a straddling task and group
    assert result.manifest["counts"]["by_reason"]["accepted"]["dedupe.split_group"] == 2 * 40


def test_a_meta_object_holding_no_value_names_no_group_in_a_run(tmp_path: Path) -> None:
    """In a run, pw-decide-row's ``meta`` is JSON text (``_meta``): ``meta.group`` set to
    ``{}`` or ``{"a": {}}`` in rows of two splits names no group, as the same objects in
    a struct column do in ``rowgate dedupe``; the string ``"{}"`` and an object holding
    a value still name one, and only those rows are flagged."""
    from pipeline.testing.synthetic import export_lines

    groups = [{}, {"a": {}}, "{}", {"a": {"b": 1}}]
    lines = []
    for i, line in enumerate(export_lines("pw-decide-row-1", 8, seed=3)):
        record = orjson.loads(line)
        record["meta"] = {"group": groups[i % 4]}
        lines.append(orjson.dumps(record))
    result, table = _train_and_eval(tmp_path, lines)
    assert sorted(table.select("field", "value").rows()) == [
        ("meta.group", '{"a":{"b":1}}'),
        ("meta.group", "{}"),
    ]
    assert result.manifest["counts"]["by_reason"]["accepted"]["dedupe.split_group"] == 4


_BASELINE: dict[str, dict[str, bytes]] = {}


def _outputs(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*.parquet"))}


@pytest.mark.slow
@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    order=st.permutations([0, 1, 2]),
    workers=st.sampled_from([1, 2]),
)
def test_outputs_do_not_depend_on_workers_or_input_order(
    corpus: list[LabelledRow], tmp_path: Path, order: list[int], workers: int
) -> None:
    root = tmp_path / "inputs"
    root.mkdir(exist_ok=True)
    parts = [corpus[:200], corpus[200:350], corpus[350:500]]
    specs = [
        InputSpec(
            str(write_lines(root / f"part{i}.jsonl", rows)), split=("eval" if i == 2 else "train")
        )
        for i, rows in enumerate(parts)
    ]
    config = CampaignConfig(
        inputs=tuple(specs[i] for i in order),
        dedupe=CampaignConfig().dedupe.__class__(
            protected_splits=("eval",), normalised=True, near=True
        ),
    ).override(**{"engine.workers": workers, "engine.shard_bytes": 64 * 1024})
    out = tmp_path / f"out-{workers}-{''.join(map(str, order))}"
    run(config, out, force=True)
    files = _outputs(out)
    assert any(name.startswith("duplicates/") for name in files)
    baseline = _BASELINE.setdefault(str(root), files)
    assert files == baseline


def _exact_only(config: CampaignConfig) -> CampaignConfig:
    return config.override(**{"dedupe.normalised": False, "dedupe.near": False})


@pytest.mark.slow
@pytest.mark.parametrize(
    "campaign",
    [
        "one split",
        "protected eval split",
        "survivor last",
        "survivor and groups on digests",
        "survivor by a column, protected eval split",
    ],
)
def test_fingerprint_hashing_decides_like_every_row_taking_part(
    corpus: list[LabelledRow], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, campaign: str
) -> None:
    """With exact duplicates only, only rows whose fingerprint hash repeats are read and
    matched. Outputs, tables and manifest notes are those of matching every accepted row,
    and stay so when every fingerprint hash collides."""

    if "protected eval split" in campaign:
        config = _exact_only(_split_inputs(tmp_path, corpus))
        if "by a column" in campaign:  # a copy's task id ("dup-...") ranks before its original's
            config = config.override(**{"dedupe.survivor": "min:task_id"})
    else:
        source = write_lines(tmp_path / "c.jsonl", corpus[:600])
        config = _exact_only(CampaignConfig(inputs=(InputSpec(str(source)),)))
        if campaign == "survivor last":
            config = config.override(**{"dedupe.survivor": "last"})
        if campaign == "survivor and groups on digests":  # columns the stage reads anyway
            config = config.override(
                **{
                    "dedupe.survivor": "min:_record_sha256",
                    "dedupe.split_groups": {KIND: ("_content_sha256",)},
                }
            )

    def outcome(name: str) -> tuple[dict[str, bytes], dict]:
        result = run(config, tmp_path / name)
        return _outputs(tmp_path / name), result.manifest["global"]["dedupe"]

    hashed, hashed_notes = outcome("hashed")
    assert hashed_notes[KIND]["removed"] > 0
    if "protected eval split" in campaign:
        assert hashed_notes[KIND]["straddling_groups"] > 0
        assert hashed_notes[KIND]["by_rule"]["contamination"] > 0
    with monkeypatch.context() as patched:
        patched.setattr(dedupe, "_participants", lambda *args: None)
        every, every_notes = outcome("every")
    with monkeypatch.context() as patched:
        patched.setattr(dedupe, "_hashed", lambda key: pl.lit(0, pl.UInt64))
        colliding, colliding_notes = outcome("colliding")
    assert hashed_notes == every_notes == colliding_notes
    assert hashed.keys() == every.keys() == colliding.keys()
    for name in hashed:
        assert hashed[name] == every[name] == colliding[name], name


def _templated(corpus: list[LabelledRow]) -> list[LabelledRow]:
    """Near variants of a few originals, a word apart, many to an LSH bucket, and
    normalised copies of some after them (whose group's best rank is then another row's
    under some survivor rules)."""
    rows, copies = [], []
    for n, original in enumerate([r for r in corpus if r.label == "original"][:4]):
        record = orjson.loads(original.line)
        words = record["response_a"].split(" ")
        for k in range(12):
            text = " ".join([*words[:k], f"zz{k}", *words[k + 1 :]])
            # another submission: its own task id
            variant = dict(record, response_a=text, task_id=f"templated-{n}-{k}")
            rows.append(LabelledRow(orjson.dumps(variant), "templated"))
            if k % 3 == 0:
                upper = variant["response_b"].upper()
                copy = dict(variant, response_b=upper, task_id=f"templated-{n}-{k}-copy")
                copies.append(LabelledRow(orjson.dumps(copy), "templated"))
    return rows + copies


@pytest.mark.slow
@pytest.mark.parametrize(
    "campaign",
    [
        "normalised and near",
        "protected eval split",
        "near only",
        "normalised only",
        "near without exact",
        "survivor by a column, small buckets",
        "survivor last, small buckets",
        "survivor by a column, protected eval split",
    ],
)
def test_gate_row_keys_decide_like_the_stage_computing_them(
    corpus: list[LabelledRow], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, campaign: str
) -> None:
    """The gate computes each row's normalised key digest and MinHash signature in its
    workers; the stage reads them instead of the key texts. Outputs, tables and manifest
    notes are those of the stage computing them (the reference path, taken when no row
    keys are staged, as for ``rowgate dedupe`` on existing datasets)."""
    if "protected eval split" in campaign:
        config = _split_inputs(tmp_path, corpus)
        if "by a column" in campaign:  # a copy's task id ("dup-...") ranks before its original's
            config = config.override(**{"dedupe.survivor": "min:task_id"})
    else:
        source = write_lines(tmp_path / "c.jsonl", corpus[:700])
        config = CampaignConfig(inputs=(InputSpec(str(source)),)).override(
            **{"dedupe.normalised": True, "dedupe.near": True}
        )
        if campaign == "near only":
            config = config.override(**{"dedupe.normalised": False})
        if campaign == "normalised only":
            config = config.override(**{"dedupe.near": False})
        if "small buckets" in campaign:
            templated = [*corpus[:700], *_templated(corpus)]
            source = write_lines(tmp_path / "c.jsonl", templated)
            config = config.override(inputs=(InputSpec(str(source)),))
        if campaign == "near without exact":
            config = config.override(**{"dedupe.normalised": False, "dedupe.exact": False})
        # a bucket's pairs are taken in survivor rank order past ``max_bucket`` members:
        # each text's rank (its group's best) decides which pairs are candidates
        if campaign == "survivor by a column, small buckets":
            config = config.override(
                **{"dedupe.survivor": "max:_record_sha256", "dedupe.max_bucket": 2}
            )
        if campaign == "survivor last, small buckets":
            config = config.override(**{"dedupe.survivor": "last", "dedupe.max_bucket": 2})
    config = config.override(**{"engine.workers": 2, "engine.shard_bytes": 96 * 1024})
    staged: list[bool] = []
    has_row_keys = GlobalContext.has_row_keys

    def spy(ctx: GlobalContext, kind: str) -> bool:
        staged.append(has_row_keys(ctx, kind))
        return staged[-1]

    def outcome(name: str) -> tuple[dict[str, bytes], dict]:
        result = run(config, tmp_path / name)
        return _outputs(tmp_path / name), result.manifest["global"]["dedupe"]

    with monkeypatch.context() as patched:
        patched.setattr(GlobalContext, "has_row_keys", lambda ctx, kind: False)
        reference, reference_notes = outcome("reference")
    rules = reference_notes[KIND]["by_rule"]
    assert rules["normalised" if campaign == "normalised only" else "near"] > 0
    if "protected eval split" in campaign:
        assert rules["contamination"] > 0
    # the near rule's candidates are found partition by partition on the engine, and
    # checked there a range of pair codes at a time, each range a block of pairs at a
    # time: (partitions, codes a sample is taken every, codes a range, texts a block),
    # where 2 texts a block is a pair a block
    cuts = [(None, None, None, None), (1, 1, 3, 2), (7, 2, 5, 5), (64, None, None, None)]
    ranged: list[int] = []
    code_ranges = near_check.code_ranges

    def ranges_spy(*args: Any) -> list[tuple[int, int]]:
        found = code_ranges(*args)
        ranged.append(len(found))
        return found

    for count, every, codes, texts in cuts if campaign == "normalised and near" else cuts[:1]:
        if count is not None:
            config = config.override(**{"engine.partitions": count})
        with monkeypatch.context() as patched:
            patched.setattr(GlobalContext, "has_row_keys", spy)
            patched.setattr(near_check, "code_ranges", ranges_spy)
            if every is not None:
                patched.setattr(near_check, "SAMPLE_EVERY", every)
                patched.setattr(near_check, "RANGE_CODES", codes)
                patched.setattr(near_check, "BLOCK_TEXTS", texts)
            gated, gated_notes = outcome(f"gated-{count}")
        assert staged.pop() is True
        if campaign != "normalised only":
            assert ranged.pop() > (5 if every else 0)
        assert gated_notes == reference_notes
        assert gated.keys() == reference.keys()
        for name in gated:
            assert gated[name] == reference[name], (count, name)
    # Groups are found on 64-bit hashes of the digests, then on the digests themselves,
    # and the matching sees only the rows that share one or a near pair; with hashes that
    # all collide the digests find the same rows, to the same outputs.
    seen: list[int] = []

    def match_spy(frame: pl.DataFrame, *args: object, **kwargs: object) -> object:
        seen.append(frame.height)
        return match_duplicates(frame, *args, **kwargs)

    rows = reference_notes[KIND]["rows"]
    with monkeypatch.context() as patched:
        patched.setattr(dedupe, "match_duplicates", match_spy)
        outcome("spied")
    participants = seen.pop()
    assert 0 < participants < rows
    with monkeypatch.context() as patched:
        patched.setattr(dedupe, "_hashed", lambda key: pl.lit(0, pl.UInt64))
        patched.setattr(dedupe, "match_duplicates", match_spy)
        colliding, colliding_notes = outcome("colliding")
    assert seen.pop() == participants
    assert colliding_notes == reference_notes
    assert colliding == reference


@pytest.mark.parametrize("rows", ["no duplicates", "one row", "one row kept"])
def test_a_run_with_nothing_to_match_reports_like_the_reference(
    corpus: list[LabelledRow], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rows: str
) -> None:
    """The matching sees only the rows that take part, which may be none: its near
    statistics are still those of the search among every accepted row (the candidates
    and rounds), as the reference path reports them over every row; a run of one
    accepted row reports no search."""
    originals = [r for r in corpus if r.label == "original"]
    chosen = {"no duplicates": originals[:200], "one row": originals[:1]}.get(rows)
    if chosen is None:  # two rows, one rejected: a single accepted row
        chosen = [originals[0], LabelledRow(b'{"not": "a pairwise row"}', "broken")]
    source = write_lines(tmp_path / "c.jsonl", chosen)
    config = CampaignConfig(inputs=(InputSpec(str(source)),)).override(
        **{"dedupe.normalised": True, "dedupe.near": True}
    )

    def outcome(name: str) -> tuple[dict[str, bytes], dict]:
        result = run(config, tmp_path / name)
        return _outputs(tmp_path / name), result.manifest["global"]["dedupe"]

    gated, gated_notes = outcome("gated")
    with monkeypatch.context() as patched:
        patched.setattr(GlobalContext, "has_row_keys", lambda ctx, kind: False)
        reference, reference_notes = outcome("reference")
    assert gated_notes == reference_notes
    assert ("near" in gated_notes[KIND]) == (rows == "no duplicates")
    assert gated_notes[KIND]["removed"] == 0
    assert gated == reference


@pytest.mark.parametrize("near", [False, True])
@pytest.mark.parametrize(
    ("kind", "rule", "message"),
    [
        ("pw-decide-row-1", "max:meta.task", "'meta' is a String column, not a struct"),
        ("pairwise-v2", "max:ratings.nope", "the struct 'ratings' has no field 'nope'"),
        ("pairwise-v2", "min:nope", "pairwise-v2 has no column 'nope'"),
    ],
)
def test_a_survivor_field_that_is_none_is_a_config_error(
    tmp_path: Path, kind: str, rule: str, message: str, near: bool
) -> None:
    """A survivor rule naming a field of a JSON text column (pw-decide-row's ``meta``)
    or one a struct lacks crashed the run (exit 4, a polars error) with or without the
    near rule; it is a config error naming the setting, as a missing column is."""
    name = {"pw-decide-row-1": "pw-decide-row-1.jsonl.zst", "pairwise-v2": "pairwise-v2.jsonl"}
    config = CampaignConfig(inputs=(InputSpec(str(DATA / name[kind]), kind),)).override(
        **{"dedupe.survivor": rule, "dedupe.near": near, "dedupe.normalised": near}
    )
    with pytest.raises(ConfigError) as raised:
        run(config, tmp_path / "out")
    assert message in str(raised.value)
    assert not (tmp_path / "out").exists()


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_accepted_rows_name_the_accepted_rows_keys_and_shards(data: st.DataObject) -> None:
    """The accepted rows by their places among them: the keys of those places (in any
    order, or ascending), and the shards holding one, as a copy of the accepted rows'
    keys gives them, with blocks of any size; a place past them is refused."""
    shards = data.draw(st.lists(st.integers(0, 6), min_size=1, max_size=40))
    state = pl.DataFrame(
        {"_shard": shards, "_shard_line": list(range(len(shards)))},
        schema={"_shard": pl.Int32, "_shard_line": pl.Int64},
    )
    accepting = pl.Series(
        data.draw(st.lists(st.booleans(), min_size=len(shards), max_size=len(shards)))
    )
    copied = state.filter(accepting)
    places = np.array(data.draw(st.lists(st.integers(0, max(copied.height - 1, 0)))), np.int64)
    for block in (1, 3, 8, 1 << 16):
        with mock.patch.object(dedupe, "_BLOCK", block):
            accepted = dedupe.AcceptedRows.of(state, accepting)
            assert accepted.height == copied.height
            assert accepted.keys().equals(copied)
            if copied.height:
                assert accepted.keys(places).equals(copied[places])
                assert accepted.keys(np.sort(places)).equals(copied[np.sort(places)])
            with pytest.raises(IndexError):
                accepted.keys(np.array([copied.height], np.int64))
            assert accepted.shards() == set(copied["_shard"].to_list())


def test_an_accepted_row_without_a_fingerprint_takes_the_reference_path(
    corpus: list[LabelledRow], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where an accepted row has no content fingerprint (a kind may give none), the
    fingerprints cannot decide exact duplicates: the stage matches every accepted row on
    the key's columns (the reference path). With every accepted row's, it groups only
    the rows that share one."""
    source = write_lines(tmp_path / "c.jsonl", corpus[:200])
    config = _exact_only(CampaignConfig(inputs=(InputSpec(str(source)),))).override(
        **{"engine.workers": 1}  # one shard, gated in this process: the patch below holds
    )
    taken: list[object] = []
    participants = dedupe._participants

    def recorded(*args: Any) -> object:
        taken.append(participants(*args))
        return taken[-1]

    monkeypatch.setattr(dedupe, "_participants", recorded)
    printed_run = run(config, tmp_path / "printed").manifest["global"]["dedupe"][KIND]
    kind = type(get_kind(KIND))
    printed = kind.fingerprint_and_profile

    def unprinted(self: Any, record: dict[str, Any], key: bytes | None = None) -> Any:
        return None, printed(self, record, key)[1]

    monkeypatch.setattr(kind, "fingerprint_and_profile", unprinted)
    unprinted_run = run(config, tmp_path / "unprinted").manifest["global"]["dedupe"][KIND]
    assert unprinted_run["removed"] == printed_run["removed"] > 0
    assert len(taken) == 2
    assert taken[0] is not None
    assert taken[1] is None


def test_any_accepted_reads_each_shard_against_its_own_rows() -> None:
    """Whether an expression holds for an accepted row, read a shard at a time: each
    shard's values against that shard's rows of the mask (a null is no)."""

    class Shards:
        def aligned(self, kind: str, rows: pl.DataFrame, exprs: Any) -> Any:
            yield pl.DataFrame({"_v": [False, False, False]})
            yield pl.DataFrame({"_v": [False, True, None, False]})

    ctx: Any = Shards()
    accepting = np.array([True, True, True, True, False, True, True])
    # the second shard's true row is not accepted; the first shard's row at its place is
    assert not dedupe._any_accepted(ctx, KIND, pl.DataFrame(), accepting, pl.lit(True))
    accepting[4] = True
    assert dedupe._any_accepted(ctx, KIND, pl.DataFrame(), accepting, pl.lit(True))


@pytest.mark.parametrize("path", ["gate's row keys", "reference"])
def test_a_step_split_in_two_is_not_a_normalised_duplicate(
    path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two derivations whose steps, joined by a newline, are one text (``x = 1``,
    ``y = 2`` against ``x = 1⏎y = 2``) are different records: the normalised rule keeps
    both (it removed the second), on the gate's row keys and on the reference path.
    The near rule, which compares their words, finds them alike."""
    import random

    from pipeline.testing.synthetic import make_record

    record = make_record("math-reasoning-v1", random.Random(3), 1)
    record["derivation"] = ["x = 1", "y = 2", *record["derivation"]]
    merged = dict(record, task_id="merged", derivation=["x = 1\ny = 2", *record["derivation"][2:]])
    source = tmp_path / "steps.jsonl"
    source.write_bytes(orjson.dumps(record) + b"\n" + orjson.dumps(merged) + b"\n")
    if path == "reference":
        monkeypatch.setattr(GlobalContext, "has_row_keys", lambda ctx, kind: False)
    spec = InputSpec(str(source), kind="math-reasoning-v1")
    config = CampaignConfig(inputs=(spec,)).override(**{"dedupe.normalised": True})
    counts = run(config, tmp_path / "normalised").manifest["counts"]["by_disposition"]
    assert counts == {"accepted": 2}
    near = config.override(**{"dedupe.near": True, "dedupe.threshold": 0.9})
    manifest = run(near, tmp_path / "near").manifest
    assert manifest["global"]["dedupe"]["math-reasoning-v1"]["by_rule"]["near"] == 1
    assert manifest["counts"]["by_disposition"] == {"accepted": 1, "duplicate": 1}
    # the input is read, never written
    assert source.read_bytes() == orjson.dumps(record) + b"\n" + orjson.dumps(merged) + b"\n"


@pytest.mark.parametrize("survivor", ["first", "max:ratings.style"])
def test_rows_led_by_their_group_s_best_land_once_and_leave_the_inputs_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, survivor: str
) -> None:
    """Copies under their own task ids, three to a content (their styles rated 3, 5 and
    5), in a train and a protected eval input: the rows each group's best-ranked row
    leads (its first; by the rating, its second, the first of the two rated 5) take no
    part in the matching (and wait for their decisions in a memory-mapped file, as the
    kept rows' lineage does from the matching on), yet every input line lands in
    exactly one output, the run
    verifies, the leaders are kept, each led row points at its group's kept row, and
    the inputs' bytes are untouched."""
    import hashlib

    from pipeline.testing.synthetic import export_lines

    originals = list(export_lines(KIND, 12, seed=9))
    inputs = []
    for split, part in (("train", originals[:8]), ("eval", originals[4:])):
        lines = [
            orjson.dumps(
                {
                    **(record := orjson.loads(line)),
                    "task_id": f"{split}-{n}-{copy}",
                    "ratings": {**record["ratings"], "style": (3, 5, 5)[copy]},
                }
            )
            for n, line in enumerate(part)
            for copy in range(3)
        ]
        inputs.append(
            write_lines(tmp_path / f"{split}.jsonl", [LabelledRow(x, "x") for x in lines])
        )
    before = [hashlib.sha256(p.read_bytes()).hexdigest() for p in inputs]
    led: list[int] = []
    leaders = dedupe._leaders

    def spy(*args: Any) -> Any:
        taking, found, exact = leaders(*args)
        led.append(0 if found is None else len(found.rows))
        return taking, found, exact

    monkeypatch.setattr(dedupe, "_leaders", spy)
    mapped: list[bool] = []
    led_mapped = dedupe._led_mapped

    def map_spy(*args: Any) -> Any:
        staged = led_mapped(*args)
        # the staged file's pages, not the driver's memory: read-only views of the map
        mapped.append(not (staged.rows.flags.writeable or staged.leaders.flags.writeable))
        return staged

    monkeypatch.setattr(dedupe, "_led_mapped", map_spy)
    staged: dict[str, int] = {}
    mapped_parts = dedupe._mapped_parts

    def parts_spy(ctx: Any, stem: str, parts: Any) -> Any:
        table = mapped_parts(ctx, stem, parts)
        staged[stem] = table.num_rows
        if stem.endswith(".kept"):  # each path as its place among the inputs'
            assert pa.types.is_dictionary(table.schema.field("_source").type)
        return table

    monkeypatch.setattr(dedupe, "_mapped_parts", parts_spy)
    config = CampaignConfig(
        inputs=(InputSpec(str(inputs[0]), split="train"), InputSpec(str(inputs[1]), split="eval"))
    ).override(**{"dedupe.protected_splits": ("eval",), "dedupe.survivor": survivor})
    run(config, tmp_path / "out")
    assert led  # the stage asked for leaders
    assert led[0] > 0  # rows were led, not matched
    assert mapped == [True]  # and waited for their decisions in a mapped file
    clusters = pl.read_parquet(tmp_path / "out" / "dedupe" / "clusters" / f"{KIND}.parquet")
    # the kept rows' lineage, staged and mapped: a row a cluster
    assert staged == {f"{KIND}.led": 2 * (8 + 8), f"{KIND}.kept": clusters.height}
    frames = [pl.read_parquet(p) for p in sorted((tmp_path / "out").rglob("part-*.parquet"))]
    landed = pl.concat([f.select("_source", "_line") for f in frames], how="vertical_relaxed")
    assert landed.height == 3 * (8 + 8)
    assert landed.n_unique() == landed.height
    assert verify_run(tmp_path / "out").ok
    removed = pl.read_parquet(tmp_path / "out" / "duplicates" / KIND)
    named = ["_source", "_line", "_record_sha256"]
    kept = pl.read_parquet(tmp_path / "out" / "accepted" / KIND).select(named)
    pointers = removed.select(pl.col("_duplicate_of").struct.field(*named))
    # eval (protected) keeps one of each of its 8 contents; train keeps one of each of
    # the 4 contents eval lacks, and its copies of eval's are contamination
    assert kept.height == 8 + 4
    task_ids = pl.read_parquet(tmp_path / "out" / "accepted" / KIND)["task_id"]
    assert {t.rsplit("-", 1)[1] for t in task_ids} == {"0" if survivor == "first" else "1"}
    rules = removed["_dedupe_rule"].value_counts().sort("_dedupe_rule").rows()
    assert rules == [("contamination", 4 * 3), ("exact", 8 * 2 + 4 * 2)]
    assert pointers.join(kept, on=named, how="anti").height == 0
    assert [hashlib.sha256(p.read_bytes()).hexdigest() for p in inputs] == before


def test_a_part_of_the_decisions_is_let_go_before_the_next_is_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The stage's decisions come a part at a time, and the driver stages each and keeps
    its keys and dispositions alone: the stage holds neither a part nor the verdicts it
    was made from while it makes the next (~13 MB a part of 65,536 removed rows)."""
    monkeypatch.setattr(dedupe, "DECISION_ROWS", 2)
    state = pl.DataFrame(
        {
            "_shard": pl.Series([0] * 6, dtype=pl.Int32),
            "_shard_line": pl.Series(range(6), dtype=pl.Int64),
            "_disposition": pl.Series(["accepted"] * 6, dtype=global_phase.DISPOSITIONS),
        }
    )
    made: list[weakref.ref[pl.DataFrame]] = []
    alive: list[bool] = []

    def build(lo: int, hi: int) -> pl.DataFrame:
        alive.append(any(ref() is not None for ref in made))
        reason = {"code": "dedupe.exact", "path": "", "detail": "same content fingerprint"}
        verdicts = pl.DataFrame(
            {"_dedupe_rule": ["exact"] * (hi - lo), "_reason": [reason] * (hi - lo)}
        )
        made.append(weakref.ref(verdicts))
        return verdicts

    accepted = dedupe.AcceptedRows.masked(state, np.ones(6, np.bool_))
    removed = RemovedRows(np.arange(6, dtype=np.int64), build)
    groups = straddling_groups(pl.DataFrame(schema={"_row": pl.Int64, "_split": pl.String}), ())
    lines = []
    for part in dedupe._decisions(accepted, removed, groups):
        made.append(weakref.ref(part))
        lines += part["_shard_line"].to_list()
        assert part["_reasons_add"].list.len().to_list() == [1] * part.height
        del part  # as the driver keeps only what it retains of a part
    assert lines == list(range(6))
    assert alive == [False, False, False]
