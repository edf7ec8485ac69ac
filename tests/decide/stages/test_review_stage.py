"""The review stage (150): a rubric's review_policy applied across the reviews of one item."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any, Final

import orjson
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.config import CampaignConfig, ConfigError, load_campaign
from pipeline.core.reasons import REVIEW_ACTIONS
from pipeline.decide.stages import review
from pipeline.dedupe.keys import DedupeKey
from pipeline.jobs.run import run
from pipeline.rubrics.model import RUBRIC_DIR, ReviewPolicy, RubricError, load_rubric
from pipeline.storage import RunStorage
from tests.decide.stages.test_rubric_stages import record

LOW = {"factuality": 2, "reasoning": 5, "instruction_adherence": 5, "style": 5}
OTHER = "def unique_values(values):\n    return sorted(set(values))\n"

CAMPAIGN = """
[[inputs]]
path = "reviews.jsonl"
kind = "pairwise-v2"

[scoring."pairwise-v2"]
rubric = "code-review-v1"
code = "COALESCE(golden_patch, CASE preference WHEN 'A' THEN response_a WHEN 'B' THEN response_b END)"

[scoring."pairwise-v2".criteria]
correctness = "ratings.factuality"
instruction_adherence = "ratings.instruction_adherence"
reasoning_evidence = "ratings.reasoning"
readability = "ratings.style"

[scoring."pairwise-v2".gates]
syntax_valid = "builtin"
"""


def _item(n: int) -> dict[str, Any]:
    """What one item's reviews share: its conversation and candidates."""
    return {"messages": [{"role": "user", "content": f"Remove duplicates, keep order ({n})."}]}


def _swapped(row: dict[str, Any]) -> dict[str, Any]:
    """The same review with A and B exchanged: the same item, the same verdict."""
    flipped = {"A": "B", "B": "A"}
    return {
        **row,
        "response_a": row["response_b"],
        "response_b": row["response_a"],
        "preference": flipped.get(row["preference"], row["preference"]),
        "rationale": "Response B preserves insertion order; A does not.",
    }


# (review, expected outcome: directory and review.* codes)
REVIEWS: list[tuple[dict[str, Any], tuple[str, list[str]]]] = [
    # three agreeing accept votes, one in the other A/B order: one kept, two duplicates
    (record("x-1", **_item(1)), ("accepted", [])),
    (_swapped(record("x-2", **_item(1))), ("duplicates", ["review.agreeing"])),
    (record("x-3", **_item(1)), ("duplicates", ["review.agreeing"])),
    # two accept votes and one review whose ratings fall below a minimum: outvoted
    (record("y-1", LOW, **_item(2)), ("duplicates", ["review.outvoted"])),
    (record("y-2", **_item(2)), ("accepted", [])),
    (record("y-3", **_item(2)), ("duplicates", ["review.agreeing"])),
    # two reviews where three are asked for
    (record("z-1", **_item(3)), ("quarantined", ["review.adjudicate"])),
    (record("z-2", **_item(3)), ("quarantined", ["review.adjudicate"])),
    # three accept votes that disagree: A, A, and a tie
    (record("w-1", **_item(4)), ("quarantined", ["review.adjudicate"])),
    (record("w-2", **_item(4)), ("quarantined", ["review.adjudicate"])),
    (
        record("w-3", preference="tie", rationale="Both keep the order.", **_item(4)),
        ("quarantined", ["review.adjudicate"]),
    ),
    # three reviews, one accept vote
    (record("v-1", **_item(5)), ("quarantined", ["review.adjudicate"])),
    (record("v-2", LOW, **_item(5)), ("quarantined", ["review.adjudicate"])),
    (record("v-3", LOW, **_item(5)), ("quarantined", ["review.adjudicate"])),
    # one review alone
    (record("u-1", **_item(6)), ("quarantined", ["review.adjudicate"])),
    # the same conversation with another pair of candidates is another item
    (record("t-1", response_b=OTHER, **_item(1)), ("quarantined", ["review.adjudicate"])),
]


def _campaign(tmp_path: Path, reviews: list[dict[str, Any]], extra: str = "") -> CampaignConfig:
    (tmp_path / "reviews.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in reviews))
    (tmp_path / "campaign.toml").write_text(CAMPAIGN + extra)
    return load_campaign(tmp_path / "campaign.toml")


def _outcomes(out: Path) -> pl.DataFrame:
    frames = []
    for entry in json.loads((out / "manifest.json").read_text())["outputs"]:
        directory = entry["path"].split("/")[0]
        if directory in ("accepted", "rejected", "quarantined", "duplicates"):
            frame = pl.read_parquet(out / entry["path"])
            pointer = ["_duplicate_of", "_dedupe_rule"] if directory == "duplicates" else []
            frames.append(
                frame.select("_line", "_reasons", *pointer).with_columns(_dir=pl.lit(directory))
            )
    return pl.concat(frames, how="diagonal_relaxed").sort("_line")


def _review_codes(frame: pl.DataFrame) -> list[tuple[str, list[str]]]:
    return [
        (d, [r["code"] for r in reasons if r["code"].startswith("review.")])
        for d, reasons in zip(frame["_dir"], frame["_reasons"], strict=True)
    ]


@pytest.mark.parametrize("workers", [1, 2])
def test_reviews_of_one_item_are_counted_voted_and_collapsed(tmp_path: Path, workers: int) -> None:
    """Seed 000's review_policy (3 independent reviews, 2 accept votes, adjudicate) on the
    reviews of one pair. Before, it was parsed and never applied: every row stood alone."""
    config = _campaign(tmp_path, [r for r, _ in REVIEWS]).override(
        **{"engine.workers": workers, "engine.shard_bytes": 4096}
    )
    out = tmp_path / "out"
    run(config, out)
    rows = _outcomes(out)
    assert _review_codes(rows) == [expected for _, expected in REVIEWS]
    duplicates = rows.filter(pl.col("_dir") == "duplicates")
    # every duplicate points at its item's kept row: the first accept vote in input order
    pointers = zip(duplicates["_line"], duplicates["_duplicate_of"], strict=True)
    assert {line: kept["_line"] for line, kept in pointers} == {2: 1, 3: 1, 4: 5, 6: 5}
    assert set(duplicates["_dedupe_rule"]) == {"review"}
    adjudicated = rows.filter(pl.col("_dir") == "quarantined")["_reasons"][0]
    detail = next(r["detail"] for r in adjudicated if r["code"] == "review.adjudicate")
    assert detail.startswith("2 reviews of this item, 2 accept votes, 1 verdicts among them")


def test_reviews_are_counted_within_a_split(tmp_path: Path) -> None:
    """An item reviewed in two splits: train's two reviews and eval's one were counted as
    one item's three, and eval's review became a duplicate of train's, though eval is
    protected (found by the rules red team); and a copy of a train review in eval (no
    retry across splits) counted one submission twice. Each split's reviews now stand
    alone; copies across splits are dedupe's."""
    train = [record("r-1", **_item(1)), record("r-2", **_item(1)), record("c-1", **_item(2))]
    train += [record("c-2", **_item(2)), record("c-3", **_item(2))]
    evaluation = [record("e-1", **_item(1)), record("c-1", **_item(2))]
    (tmp_path / "a.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in train))
    (tmp_path / "b.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in evaluation))
    inputs = '[[inputs]]\npath = "a.jsonl"\nkind = "pairwise-v2"\nsplit = "train"\n'
    inputs += '[[inputs]]\npath = "b.jsonl"\nkind = "pairwise-v2"\nsplit = "eval"\n'
    campaign = CAMPAIGN.split("[scoring.", 1)[1]
    (tmp_path / "campaign.toml").write_text(
        inputs + "[scoring." + campaign + '[dedupe]\nprotected_splits = ["eval"]\n'
    )
    out = tmp_path / "out"
    run(load_campaign(tmp_path / "campaign.toml"), out)
    found: dict[tuple[str, int], str] = {}
    for entry in json.loads((out / "manifest.json").read_text())["outputs"]:
        frame = pl.read_parquet(out / entry["path"])
        for source, line in zip(frame["_source"], frame["_line"], strict=True):
            found[(Path(source).name, line)] = entry["path"].split("/")[0]
    assert found == {
        # item 1: two reviews in train, one in eval, where three are asked for
        ("a.jsonl", 1): "quarantined",
        ("a.jsonl", 2): "quarantined",
        ("b.jsonl", 1): "quarantined",
        # item 2: three agreeing reviews in train; eval's copy of one is its own item
        ("a.jsonl", 3): "accepted",
        ("a.jsonl", 4): "duplicates",
        ("a.jsonl", 5): "duplicates",
        ("b.jsonl", 2): "quarantined",
    }


def test_the_kept_row_is_scored_and_the_duplicates_are_not(tmp_path: Path) -> None:
    """The review stage runs before dedupe (agreeing reviews share a content fingerprint
    and would be removed as exact duplicates before being counted) and before scoring."""
    config = _campaign(tmp_path, [r for r, _ in REVIEWS[:3]])
    run(config, tmp_path / "out")
    accepted = pl.read_parquet(tmp_path / "out" / "accepted")
    assert accepted.select("_line", "_rubric", "_gate_syntax_valid").rows() == [
        (1, "code-review-v1", "met")
    ]
    duplicates = pl.read_parquet(tmp_path / "out" / "duplicates")
    assert "_rubric" not in duplicates.columns
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["counts"]["by_reason"]["duplicate"] == {"review.agreeing": 2}
    assert manifest["global"]["review"]["pairwise-v2"] == {
        "independent_reviews": 3,
        "minimum_accept_votes": 2,
        "disagreement_action": "adjudicate",
        "applied": True,
        "reviews": 3,
        "accept_votes": 3,
        "decided": {"review.agreeing": 2},
    }


def test_reject_action_and_record_mode(tmp_path: Path) -> None:
    rubric = json.loads((RUBRIC_DIR / "code-review-v1.json").read_text())
    rubric["review_policy"]["disagreement_action"] = "reject"
    rubrics = tmp_path / "rubrics"
    rubrics.mkdir()
    (rubrics / "code-review-v1.json").write_text(json.dumps(rubric))
    reviews = [r for r, _ in REVIEWS[6:8]]  # two reviews: too few
    config = _campaign(tmp_path, reviews, '\n[rubrics]\ndirectory = "rubrics"\n')
    run(config, tmp_path / "out")
    rows = _outcomes(tmp_path / "out")
    assert _review_codes(rows) == [("rejected", ["review.reject"])] * 2
    recorded = config.override(scoring={"pairwise-v2": _with(config, review_policy="record")})
    run(recorded, tmp_path / "recorded")
    # recorded, not applied: each row stands alone, and dedupe removes the second as before
    recorded_rows = _outcomes(tmp_path / "recorded")
    assert [[r["code"] for r in reasons] for reasons in recorded_rows["_reasons"]][1] == [
        "dedupe.exact"
    ]
    assert _review_codes(recorded_rows) == [("accepted", []), ("duplicates", [])]


def _with(config: CampaignConfig, **changes: Any) -> Any:
    import dataclasses

    return dataclasses.replace(config.scoring["pairwise-v2"], **changes)


def test_a_review_policy_on_a_kind_without_shared_items_fails_before_any_work(
    tmp_path: Path,
) -> None:
    (tmp_path / "m.jsonl").write_bytes(b"{}\n")
    (tmp_path / "campaign.toml").write_text(
        '[[inputs]]\npath = "m.jsonl"\nkind = "math-reasoning-v1"\n'
        '[scoring."math-reasoning-v1"]\nrubric = "code-review-v1"\ncode = "final_answer"\n'
    )
    config = load_campaign(tmp_path / "campaign.toml")
    with pytest.raises(ConfigError, match='review no shared item; set review_policy = "record"'):
        run(config, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    with pytest.raises(ConfigError, match="review_policy: 'sometimes' is not one of"):
        config.override(scoring={"math-reasoning-v1": _with_kind(config, "sometimes")})


def _with_kind(config: CampaignConfig, mode: str) -> Any:
    import dataclasses

    return dataclasses.replace(config.scoring["math-reasoning-v1"], review_policy=mode)


def test_rubric_refuses_more_accept_votes_than_reviews(tmp_path: Path) -> None:
    rubric = json.loads((RUBRIC_DIR / "code-review-v1.json").read_text())
    rubric["review_policy"]["minimum_accept_votes"] = 4
    path = tmp_path / "code-review-v1.json"
    path.write_text(json.dumps(rubric))
    with pytest.raises(RubricError, match="minimum_accept_votes: 4 is more than the 3"):
        load_rubric(path)
    described = load_rubric(RUBRIC_DIR / "code-review-v1.json").describe()["review_policy"]
    assert described == {
        "independent_reviews": 3,
        "minimum_accept_votes": 2,
        "disagreement_action": "adjudicate",
    }


def test_subject_hash_collisions_never_merge_items(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reviews are partitioned by a 64-bit hash of their subject; when every subject
    collides (one partition holds every review), the exact subjects still decide, as
    their SHA-256s, not their texts; the entries' digests are staged as their bytes. (One worker: the tasks run in this process, where
    the hash is replaced.)"""
    reviews = [r for r, _ in REVIEWS]
    alone = {"engine.workers": 1, "engine.partitions": 7}
    run(_campaign(tmp_path, reviews).override(**alone), tmp_path / "hashed")
    hashed: list[DedupeKey] = []

    def colliding_hash(subject: DedupeKey) -> pl.Expr:
        hashed.append(subject)
        return pl.lit(0, pl.UInt64)

    staged: list[pa.RecordBatch] = []
    stage_partitions = RunStorage.stage_partitions

    def spy(storage: RunStorage, shard: int, stem: str, entries: Any, starts: Any) -> None:
        if stem.endswith(".review-entries"):
            staged.append(entries)
            assert starts[1:] == [len(entries)] * 7  # every review in the first partition
        stage_partitions(storage, shard, stem, entries, starts)

    monkeypatch.setattr(review, "_subject_hash", colliding_hash)
    monkeypatch.setattr(RunStorage, "stage_partitions", spy)
    run(_campaign(tmp_path, reviews).override(**alone), tmp_path / "colliding")
    assert hashed  # the entries were hashed with it
    assert staged
    assert {b.schema.field("_subject").type for b in staged} == {pa.binary(32)}
    # the digests too are staged as their 32 bytes
    assert {b.schema.field("_record_sha256").type for b in staged} == {pa.binary(32)}
    fingerprints = pa.concat_arrays([b["_content_sha256"] for b in staged])
    assert set(pc.binary_length(fingerprints).drop_null().to_pylist()) == {32}
    colliding = _review_codes(_outcomes(tmp_path / "colliding"))
    assert colliding == _review_codes(_outcomes(tmp_path / "hashed"))
    assert colliding == [expected for _, expected in REVIEWS]


def _window_reference(reviews: pl.DataFrame, policy: ReviewPolicy) -> pl.DataFrame:
    """The policy as the stage decided it before (window functions over every review, in
    the order key): the reference the sorted, array-based decision is held to. A review
    without a subject was given one of its own."""
    code, disposition = REVIEW_ACTIONS[policy.disagreement_action]
    reviews = reviews.sort("_input", "_line").with_columns(
        pl.col("_subject").fill_null(pl.format("row {}:{}", "_shard", "_shard_line"))
    )
    group = [pl.col("_split"), pl.col("_subject")]
    counted = reviews.with_columns(
        _reviews=pl.len().over(group),
        _accepts=pl.col("_vote").sum().over(group),
        _verdicts=pl.col("_content_sha256")
        .filter(pl.col("_vote"))
        .n_unique()
        .over(group)
        .fill_null(0),
        _kept=pl.col("_vote") & (pl.col("_vote").cum_sum().over(group) == 1),
    )
    refused = (
        (pl.col("_reviews") < policy.independent_reviews)
        | (pl.col("_accepts") < policy.minimum_accept_votes)
        | (pl.col("_verdicts") > 1)
    )
    first = counted.filter("_kept").select(
        "_split",
        "_subject",
        _duplicate_of=pl.struct(_source="_source", _line="_line", _record_sha256="_record_sha256"),
    )
    decided = counted.join(
        first, on=["_split", "_subject"], how="left", maintain_order="left", nulls_equal=True
    ).with_columns(_refused=refused)
    return decided.filter(pl.col("_refused") | ~pl.col("_kept")).select(
        "_shard",
        "_shard_line",
        _disposition=pl.when("_refused").then(pl.lit(disposition)).otherwise(pl.lit("duplicate")),
        _code=pl.when("_refused")
        .then(pl.lit(code))
        .when("_vote")
        .then(pl.lit("review.agreeing"))
        .otherwise(pl.lit("review.outvoted")),
        _counts=pl.format("{} {} {}", "_reviews", "_accepts", "_verdicts"),
        _duplicate_of=pl.when("_refused").then(None).otherwise("_duplicate_of"),
        _dedupe_rule=pl.when("_refused").then(None).otherwise(pl.lit("review")),
    )


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([None, "train", "test"]),
            st.sampled_from([None, "s1", "s2", "s3"]),
            st.sampled_from([None, "c1", "c2"]),
            st.booleans(),
        ),
        max_size=40,
    ),
    st.integers(1, 3),
    st.integers(0, 3),
    st.sampled_from(["adjudicate", "reject"]),
    st.randoms(use_true_random=False),
)
def test_review_decisions_are_the_window_functions_over_every_review(
    given_rows: list[tuple[str | None, str | None, str | None, bool]],
    independent: int,
    minimum: int,
    action: str,
    rng: Any,
) -> None:
    """The sorted, array-based decision (``_decide``, then ``_decisions``) against the
    window functions it replaced, on reviews given in any order: the same reviews
    decided, with the same dispositions, codes, counts, pointers to the kept review and
    rules. Nulls: a review with no subject is an item alone; a null split is one split;
    a null fingerprint is one verdict."""
    policy = ReviewPolicy(independent, minimum, action)
    rows = [
        {
            "_shard": i % 3,
            "_shard_line": i,
            "_input": i % 3 // 2,
            "_line": 100 * (i % 3) + i,
            "_source": f"in-{i % 3 // 2}",
            "_record_sha256": f"r{i}",
            "_split": split,
            "_subject": subject,
            "_content_sha256": content,
            "_vote": vote,
        }
        for i, (split, subject, content, vote) in enumerate(given_rows)
    ]
    rng.shuffle(rows)
    reviews = pl.DataFrame(rows, schema=_REVIEW_SCHEMA)
    expected = _window_reference(reviews, policy).sort("_shard", "_shard_line").to_dicts()
    decided = review._decide(reviews, [pl.col("_input"), pl.col("_line")], policy)
    lineage = decided.reviews[decided.kept_rows].select("_source", "_line", "_record_sha256")
    got = []
    for part in review._decisions(decided, lineage, policy):
        for row in part.to_dicts():
            ((reason),) = row.pop("_reasons_add")
            counts = re.match(
                r"(\d+) reviews of this item, (\d+) accept votes, (\d+) verd", reason["detail"]
            )
            row["_code"] = reason["code"]
            row["_counts"] = " ".join(counts.groups()) if counts else None
            got.append(row)
    got.sort(key=lambda row: (row["_shard"], row["_shard_line"]))
    for row in expected:
        if row["_dedupe_rule"] is not None:
            row["_counts"] = None  # told only for a refused item
    assert got == expected


_REVIEW_SCHEMA: Final = {
    "_shard": pl.Int32,
    "_shard_line": pl.Int64,
    "_input": pl.Int32,
    "_line": pl.Int64,
    "_source": pl.String,
    "_record_sha256": pl.String,
    "_split": pl.String,
    "_subject": pl.String,
    "_content_sha256": pl.String,
    "_vote": pl.Boolean,
}


def _review_corpus(items: int, seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Reviews of ``items`` items in a train and an eval file, spread through them: one
    to four reviews an item, a fifth of them rated below a minimum, some preferring a
    tie (a verdict of its own) or given in the other A/B order (the same verdict); an
    item's reviews may fall in both splits."""
    rng = random.Random(seed)
    train: list[dict[str, Any]] = []
    evaluation: list[dict[str, Any]] = []
    for n in range(items):
        for k in range(rng.randint(1, 4)):
            row = record(f"i{n}-{k}", LOW if rng.random() < 0.2 else None, **_item(n))
            roll = rng.random()
            if roll < 0.1:
                row = {**row, "preference": "tie", "rationale": "Both keep the order."}
            elif roll < 0.3:
                row = _swapped(row)
            (evaluation if rng.random() < 0.25 else train).append(row)
    rng.shuffle(train)
    rng.shuffle(evaluation)
    return train, evaluation


@pytest.mark.parametrize(
    ("workers", "partitions", "first"),
    [(1, 1, "train"), (2, 7, "train"), (2, 64, "train"), (1, 7, None)],
)
def test_items_decided_on_the_engine_are_the_driver_s_decisions(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    workers: int,
    partitions: int,
    first: str | None,
) -> None:
    """Each partition task decides the items whose reviews it holds; the outputs (every
    Parquet file, byte for byte) and the stage's notes are those of deciding every item
    in the driver (the reference path), at any worker and partition count, over small
    shards, two splits (the first input's unlabelled in one case: a partition task
    labelled its reviews through a numpy array of objects, and failed where the first
    was None) and every kind of item: kept with agreeing and outvoted reviews, too few
    reviews, too few accept votes, votes that disagree."""
    train, evaluation = _review_corpus(150, seed=workers * 100 + partitions)
    for name, rows in (("a.jsonl", train), ("b.jsonl", evaluation)):
        (tmp_path / name).write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    labelled = f'split = "{first}"\n' if first else ""
    inputs = '[[inputs]]\npath = "a.jsonl"\nkind = "pairwise-v2"\n' + labelled
    inputs += '[[inputs]]\npath = "b.jsonl"\nkind = "pairwise-v2"\nsplit = "eval"\n'
    (tmp_path / "campaign.toml").write_text(
        inputs + "[scoring." + CAMPAIGN.split("[scoring.", 1)[1]
    )
    config = load_campaign(tmp_path / "campaign.toml").override(
        **{
            "engine.workers": workers,
            "engine.partitions": partitions,
            "engine.shard_bytes": 8 * 1024,
        }
    )

    def outcome(name: str) -> tuple[dict[str, bytes], Any]:
        result = run(config, tmp_path / name)
        files = {
            p.relative_to(tmp_path / name).as_posix(): p.read_bytes()
            for p in sorted((tmp_path / name).rglob("*.parquet"))
        }
        return files, result.manifest["global"]["review"]

    inputs = {name: (tmp_path / name).read_bytes() for name in ("a.jsonl", "b.jsonl")}
    engine, engine_notes = outcome("engine")
    # every input line lands in exactly one output, and the inputs are untouched
    parts = sorted((tmp_path / "engine").rglob("part-*.parquet"))
    landed = pl.concat([pl.read_parquet(p).select("_source", "_line") for p in parts])
    assert landed.height == len(train) + len(evaluation) == landed.n_unique()
    assert {name: (tmp_path / name).read_bytes() for name in inputs} == inputs
    with monkeypatch.context() as patched:
        patched.setattr(review, "_items_on_engine", review._items_in_driver)
        driver, driver_notes = outcome("driver")
    decided = engine_notes["pairwise-v2"]["decided"]
    assert set(decided) == {"review.adjudicate", "review.agreeing", "review.outvoted"}
    assert min(decided.values()) > 10
    assert engine_notes == driver_notes
    assert engine.keys() == driver.keys()
    for name in engine:
        assert engine[name] == driver[name], name
