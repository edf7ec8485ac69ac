"""The dedupe stage decides among the rows that take part (found by hash-first checks
and the near search on the engine) as the reference path decides among every accepted
row (the stage computing everything from the key texts, taken when
``GlobalContext.has_row_keys`` is false): every Parquet file and the whole manifest but
its timings, on the inputs a red-team review tried: quarantined first rows of groups,
protected and unlabelled splits and inputs out of path order, pw-decide-row's ``meta``
stored apart, one text copied many times past ``max_bucket``, zero to two accepted rows,
survivor rules by place and by column (struct fields, nulls, ties), and random
campaigns (290 of them were run during the review, all equal)."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.core.config import CampaignConfig, InputSpec
from pipeline.decide import context as global_phase
from pipeline.decide.context import GlobalContext
from pipeline.decide.stages import dedupe
from pipeline.dedupe import table
from pipeline.jobs.run import run
from pipeline.testing.corpus import LabelledRow, duplicate_corpus
from pipeline.testing.synthetic import _dump, make_record
from tests.decide.test_dedupe_stage import QuarantineOriginals, _outputs, _templated

KIND = "pairwise-v2"
PW = "pw-decide-row-1"


@pytest.fixture(scope="module")
def corpus() -> list[LabelledRow]:
    return list(duplicate_corpus(700, seed=21, duplicate_rate=0.35))


def _write(path: Path, lines: Sequence[bytes]) -> Path:
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def _manifest_without_timings(manifest: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in manifest.items() if k != "timings"}


def _assert_parity(
    config: CampaignConfig,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    stages: Sequence[Callable[[], Any]] = (),
    *,
    colliding: bool = False,
) -> dict[str, Any]:
    """Run ``config`` through the participants path and the reference path (and, with
    ``colliding``, with every fingerprint and digest hash colliding); every Parquet file
    and the whole manifest but its timings must be the same. Returns the notes."""
    if stages:
        monkeypatch.setattr(global_phase, "GLOBAL_STAGES", [*stages, *global_phase.GLOBAL_STAGES])

    def outcome(name: str) -> tuple[dict[str, bytes], dict[str, Any]]:
        result = run(config, tmp_path / name, force=True)
        return _outputs(tmp_path / name), _manifest_without_timings(result.manifest)

    staged: list[bool] = []
    has_row_keys = GlobalContext.has_row_keys

    def spy(ctx: GlobalContext, kind: str) -> bool:
        staged.append(has_row_keys(ctx, kind))
        return staged[-1]

    with monkeypatch.context() as patched:
        patched.setattr(GlobalContext, "has_row_keys", spy)
        gated, gated_manifest = outcome("gated")
    with monkeypatch.context() as patched:
        patched.setattr(GlobalContext, "has_row_keys", lambda ctx, kind: False)
        reference, reference_manifest = outcome("reference")
    # the participants path read the gate's row keys wherever a text rule is on
    reads_texts = config.dedupe.normalised or config.dedupe.near
    assert not reads_texts or (staged and all(staged))
    assert gated_manifest["global"]["dedupe"] == reference_manifest["global"]["dedupe"]
    assert gated_manifest == reference_manifest
    assert gated.keys() == reference.keys()
    for name in gated:
        assert gated[name] == reference[name], name
    if colliding:
        with monkeypatch.context() as patched:
            patched.setattr(dedupe, "_hashed", lambda key: pl.lit(0, pl.UInt64))
            collided, collided_manifest = outcome("colliding")
        assert collided_manifest == reference_manifest
        assert collided == reference
    return dict(reference_manifest["global"]["dedupe"])


def _one_text(copies: int, corpus: list[LabelledRow]) -> list[bytes]:
    """One pairwise row and ``copies`` copies under their own task ids: a third exact,
    a third a normalised copy (response B in capitals), a third a near variant (a word
    of response A replaced by one of five fillers); ratings tie in pairs."""
    record = orjson.loads(next(r for r in corpus if r.label == "original").line)
    words = record["response_a"].split(" ")
    lines = []
    for k in range(copies):
        copy = dict(record, task_id=f"one-text-{k}")
        if k % 3 == 1:
            copy["response_b"] = record["response_b"].upper()
        if k % 3 == 2:
            changed = list(words)
            changed[k % len(words)] = f"zz{k % 5}"
            copy["response_a"] = " ".join(changed)
        copy["ratings"] = dict(record["ratings"], factuality=1 + k % 2)
        lines.append(orjson.dumps(copy))
    return lines


def _config(*inputs: InputSpec, **overrides: Any) -> CampaignConfig:
    return CampaignConfig(inputs=inputs).override(
        **{"dedupe.normalised": True, "dedupe.near": True, "engine.workers": 1, **overrides}
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "campaign",
    [
        "normalised and near without exact, survivor last, buckets of 2",
        "every rule, survivor last (exact groups led by their last), small shards",
        "near without normalised, survivor by a struct field with ties, buckets of 2",
        "normalised without exact or near",
        "survivor by a nullable column (golden_patch), buckets of 2",
        "survivor min:_record_sha256, small shards, threshold 0.5",
    ],
)
def test_modes_and_survivor_rules(
    corpus: list[LabelledRow], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, campaign: str
) -> None:
    rows = [r.line for r in [*corpus, *_templated(corpus)]]
    source = InputSpec(str(_write(tmp_path / "c.jsonl", rows)))
    campaigns: dict[str, dict[str, Any]] = {
        "normalised and near without exact, survivor last, buckets of 2": {
            "dedupe.exact": False, "dedupe.survivor": "last", "dedupe.max_bucket": 2,
        },
        "every rule, survivor last (exact groups led by their last), small shards": {
            "dedupe.survivor": "last", "engine.shard_bytes": 48 * 1024,
        },
        "near without normalised, survivor by a struct field with ties, buckets of 2": {
            "dedupe.normalised": False,
            "dedupe.survivor": "max:ratings.factuality",
            "dedupe.max_bucket": 2,
        },
        "normalised without exact or near": {"dedupe.exact": False, "dedupe.near": False},
        "survivor by a nullable column (golden_patch), buckets of 2": {
            "dedupe.survivor": "max:golden_patch", "dedupe.max_bucket": 2,
        },
        "survivor min:_record_sha256, small shards, threshold 0.5": {
            "dedupe.survivor": "min:_record_sha256",
            "dedupe.threshold": 0.5,
            "engine.shard_bytes": 48 * 1024,
        },
    }  # fmt: skip
    notes = _assert_parity(_config(source, **campaigns[campaign]), tmp_path, monkeypatch)
    assert notes[KIND]["removed"] > 0


#: survivor values where every order key meets an edge: -0.0 and 0.0 tie, NaN and null
#: rank last; with ``max:``, the least Int64's key is that of a row without a value
_EDGES: dict[str, tuple[pl.DataType, list[Any]]] = {
    "floats": (pl.Float64(), [-0.0, 0.0, float("nan"), None, float("-inf")]),
    "int64 extremes": (pl.Int64(), [-(2**63), 2**63 - 1, None, 0, -(2**63)]),
    "uint64 extremes": (pl.UInt64(), [2**64 - 1, 0, None, 1, 2**64 - 1]),
    "booleans": (pl.Boolean(), [True, None, False, True, False]),
    "text": (pl.String(), ["b", "", None, "é", "b"]),
}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("edges", "direction"),
    [
        ("floats", "max"),
        ("floats", "min"),
        ("int64 extremes", "max"),  # the least Int64's key is a missing value's
        ("uint64 extremes", "min"),  # the greatest UInt64's key is a missing value's
        ("booleans", "max"),  # False's key is a missing value's
        ("text", "max"),  # by its dense rank, from a sort cut into three ranges of values
    ],
)
def test_survivor_ranks_by_order_keys(
    corpus: list[LabelledRow],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    direction: str,
    edges: str,
) -> None:
    """With the near rule on, a survivor rule by a column of numbers ranks the texts by
    their values' order keys and places, not by a rank among every accepted row: the
    same decisions as the reference path's ranks, where a value is -0.0 or 0.0, NaN,
    null, or an extreme integer whose key is a missing value's; a column of text, by
    its values' dense ranks from a sort on disk, cut into as many ranges of values as
    partitions (``text_order_keys``), ties and nulls among them. Buckets of 2 cut by
    rank; the ranked column's values are made from ``ratings.factuality`` (1-5) on
    every path (a group's rows, the texts, the reference's every row)."""
    dtype, values = _EDGES[edges]
    read = table.survivor_value

    def edged(column: str) -> pl.Expr:
        return read(column).replace_strict(list(range(1, 6)), values, return_dtype=dtype)

    monkeypatch.setattr(dedupe, "survivor_value", edged)
    monkeypatch.setattr(table, "survivor_value", edged)
    keyed: list[bool] = []
    ranking = dedupe._column_ranking

    def spy(*args: Any) -> Any:
        found = ranking(*args)
        keyed.append(found(np.zeros(0, np.int64)).keys is not None)
        return found

    monkeypatch.setattr(dedupe, "_column_ranking", spy)
    copies = [orjson.loads(line) for line in _one_text(60, corpus)]
    for k, copy in enumerate(copies):  # every value among one text's copies, in turn
        copy["ratings"]["factuality"] = 1 + k * 2 % 5
    rows = [r.line for r in [*corpus, *_templated(corpus)]] + [orjson.dumps(c) for c in copies]
    source = InputSpec(str(_write(tmp_path / "c.jsonl", rows)))
    overrides = {
        "dedupe.survivor": f"{direction}:ratings.factuality",
        "dedupe.max_bucket": 2,
        "engine.shard_bytes": 48 * 1024,
        "engine.partitions": 3,
    }
    notes = _assert_parity(_config(source, **overrides), tmp_path, monkeypatch)
    assert keyed  # ranked by order keys, not among every row
    assert all(keyed)
    assert notes[KIND]["removed"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("near_only", [False, True])
def test_groups_whose_first_rows_are_quarantined(
    corpus: list[LabelledRow], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, near_only: bool
) -> None:
    """Originals quarantined before dedupe: their copies' fingerprints and digests repeat
    among every row but not among the accepted ones, and a group's first row (its text
    in the reference) is not accepted. Every hash colliding too."""
    held = sorted({r.source for r in corpus if r.expected is not None})[::2]
    source = InputSpec(str(_write(tmp_path / "c.jsonl", [r.line for r in corpus])))
    overrides = {"dedupe.normalised": False} if near_only else {}
    notes = _assert_parity(
        _config(source, **overrides),
        tmp_path,
        monkeypatch,
        [lambda: QuarantineOriginals([s + 1 for s in held])],
        colliding=True,
    )
    assert notes[KIND]["rows"] < len(corpus)
    assert notes[KIND]["near"]["verified_pairs"] > 0


@pytest.mark.slow
def test_protected_splits_unlabelled_inputs_and_path_order(
    corpus: list[LabelledRow], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three inputs listed out of path order (the order key sorts them by path), two of
    them protected splits and one unlabelled, small shards on two workers: contamination,
    protected overlap between the protected splits and straddling task groups."""
    rows = [r.line for r in corpus]
    thirds = [rows[i::3] for i in range(3)]
    # the same task in two splits: a second annotation, not a duplicate
    donor = orjson.loads(rows[1])
    second = dict(
        orjson.loads(rows[0]), response_a=donor["response_a"], response_b=donor["response_b"]
    )
    thirds[1].append(orjson.dumps(second))
    specs = (
        InputSpec(str(_write(tmp_path / "z-train.jsonl", thirds[0])), split="train"),
        InputSpec(str(_write(tmp_path / "m-none.jsonl", thirds[1]))),
        InputSpec(str(_write(tmp_path / "a-eval.jsonl", thirds[2])), split="eval"),
    )
    config = _config(*specs).override(
        **{
            "dedupe.protected_splits": ("eval", "train"),
            "dedupe.max_bucket": 2,
            "engine.workers": 2,
            "engine.shard_bytes": 64 * 1024,
            "rules.disabled": ("cross.idempotency_conflict",),
        }
    )
    notes = _assert_parity(config, tmp_path, monkeypatch)
    assert notes[KIND]["protected_overlap_rows"] > 0


def _pw_rows(count: int, seed: int) -> list[bytes]:
    """pw-decide-row-1 records and copies under new sessions: some exact, some with the
    state's text in capitals (normalised), some a word longer (near); ``meta`` varies."""
    rng = random.Random(seed)
    lines = []
    for i in range(count):
        record = make_record(PW, rng, i)
        lines.append(_dump(record))
        if rng.random() < 0.5:
            copy = orjson.loads(orjson.dumps(record))
            copy["receipt"] += 10_000_000
            copy["session"] += "x"
            copy["opening_message_id"] += "x"
            if copy["host"] == "coordinator":
                copy["root_session"] = copy["session"]
            text = copy["state"]["user"]["text"]
            k = rng.random()
            if k < 0.3:
                copy["state"]["user"]["text"] = text.upper()
            elif k < 0.6:
                copy["state"]["user"]["text"] = text + " " + " ".join(text.split(" ")[:3])
            copy["meta"] = {"task": f"t-{(i * 3) % 11}", "group": f"g-{i % 4}"}
            lines.append(_dump(copy))
    return lines


@pytest.mark.slow
@pytest.mark.parametrize("normalised", [True, False])
def test_pw_decide_row_meta_apart_across_splits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, normalised: bool
) -> None:
    """pw-decide-row-1 stores ``meta`` apart as ``_meta``: a survivor by it, its split
    groups (``meta.task``, ``meta.group``) across a protected eval split."""
    lines = _pw_rows(240, seed=5)
    half = len(lines) // 2
    specs = (
        InputSpec(str(_write(tmp_path / "a.jsonl", lines[:half])), split="train"),
        InputSpec(str(_write(tmp_path / "b.jsonl", lines[half:])), split="eval"),
    )
    config = _config(*specs).override(
        **{
            "dedupe.normalised": normalised,
            "dedupe.protected_splits": ("eval",),
            "dedupe.survivor": "max:meta",
            "dedupe.max_bucket": 2,
        }
    )
    notes = _assert_parity(config, tmp_path, monkeypatch)
    assert notes[PW]["removed"] > 0
    assert notes[PW]["straddling_groups"] > 0


@pytest.mark.slow
@pytest.mark.parametrize(
    "campaign",
    [
        "every rule",
        "buckets of 2, survivor ties, small shards",
        "no exact, last",
        "every rule, last",
        "no normalised",
    ],
)
def test_one_text_copied_many_times(
    corpus: list[LabelledRow], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, campaign: str
) -> None:
    """Nearly every accepted row a duplicate of one text: every row takes part, and
    the LSH buckets are far larger than ``max_bucket``."""
    source = InputSpec(str(_write(tmp_path / "c.jsonl", _one_text(80, corpus))))
    campaigns: dict[str, dict[str, Any]] = {
        "every rule": {},
        "buckets of 2, survivor ties, small shards": {
            "dedupe.max_bucket": 2,
            "dedupe.survivor": "max:ratings.factuality",
            "engine.shard_bytes": 16 * 1024,
        },
        "no exact, last": {
            "dedupe.exact": False,
            "dedupe.survivor": "last",
            "dedupe.max_bucket": 2,
        },
        "every rule, last": {"dedupe.survivor": "last", "engine.shard_bytes": 16 * 1024},
        "no normalised": {"dedupe.normalised": False, "dedupe.max_bucket": 2},
    }
    config = _config(source, **campaigns[campaign])
    notes = _assert_parity(config, tmp_path, monkeypatch, colliding=True)
    assert notes[KIND]["removed"] == 79


@pytest.mark.slow
@pytest.mark.parametrize("accepted", [0, 1, 2])
def test_few_accepted_rows(
    corpus: list[LabelledRow], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, accepted: int
) -> None:
    """Every row but ``accepted`` of them quarantined before dedupe (two accepted rows
    of one normalised group: one text, no pair)."""
    lines = _one_text(12, corpus)
    source = InputSpec(str(_write(tmp_path / "c.jsonl", lines)))
    held = list(range(accepted + 1, len(lines) + 1))
    notes = _assert_parity(
        _config(source), tmp_path, monkeypatch, [lambda: QuarantineOriginals(held)]
    )
    assert notes[KIND]["rows"] == accepted
    assert ("near" in notes[KIND]) == (accepted > 1)


def _fuzzed_rows(rng: random.Random, corpus: list[LabelledRow]) -> list[bytes]:
    originals = [orjson.loads(r.line) for r in corpus if r.label == "original"]
    rows = []
    for n, record in enumerate(rng.sample(originals, 10)):
        rows.append(record)
        words = record["response_a"].split(" ")
        for k in range(rng.randint(0, 7)):
            copy = dict(record, task_id=f"{record['task_id']}-{n}-{k}")
            change = rng.random()
            if change < 0.25:
                pass  # exact
            elif change < 0.45:
                copy["response_b"] = record["response_b"].upper()  # normalised
            else:  # near, sometimes normalised too
                changed = list(words)
                changed[rng.randrange(len(words))] = f"zz{rng.randint(0, 3)}"
                copy["response_a"] = " ".join(changed)
                if rng.random() < 0.3:
                    copy["response_b"] = record["response_b"].upper()
            copy["ratings"] = dict(record["ratings"], factuality=rng.choice([1, 1, 2, 5]))
            if rng.random() < 0.3:
                copy["golden_patch"] = rng.choice([None, "a", "b"])
            rows.append(copy)
    rng.shuffle(rows)
    return [orjson.dumps(r) for r in rows]


@pytest.mark.slow
@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(seed=st.integers(0, 2**32 - 1))
def test_random_campaigns(
    corpus: list[LabelledRow], tmp_path_factory: pytest.TempPathFactory, seed: int
) -> None:
    """Random rules, survivor rules, bucket sizes, thresholds, inputs, splits (labelled,
    protected, unlabelled), shard sizes, partition counts and quarantined rows. (290
    such campaigns were run during the review, all equal.)"""
    rng = random.Random(seed)
    tmp_path = tmp_path_factory.mktemp("random")
    lines = _fuzzed_rows(rng, corpus)
    count = rng.choice([1, 2, 3])
    labelled = rng.random() < 0.5
    specs = tuple(
        InputSpec(
            str(_write(tmp_path / f"in{rng.randint(0, 9)}{i}.jsonl", lines[i::count])),
            split=rng.choice(["train", "eval", None]) if labelled else None,
        )
        for i in range(count)
    )
    overrides: dict[str, Any] = {
        "dedupe.exact": rng.random() < 0.7,
        "dedupe.normalised": rng.random() < 0.6,
        "dedupe.near": rng.random() < 0.8,
        "dedupe.max_bucket": rng.choice([2, 3, 100]),
        "dedupe.threshold": rng.choice([0.5, 0.7, 0.8]),
        "dedupe.survivor": rng.choice(
            ["first", "last", "max:ratings.factuality", "min:golden_patch", "min:_record_sha256"]
        ),
        "engine.shard_bytes": rng.choice([16 * 1024, 1 << 20]),
    }
    splits = sorted({s.split for s in specs if s.split is not None})
    if splits and rng.random() < 0.7:
        overrides["dedupe.protected_splits"] = tuple(
            rng.sample(splits, rng.randint(1, len(splits)))
        )
    partitions = rng.choice([None, 1, 3, 16])
    if partitions is not None:
        overrides["engine.partitions"] = partitions
    held = rng.sample(range(1, len(lines) + 1), rng.randint(0, len(lines) // 4))
    stages = [lambda: QuarantineOriginals(held)] if held else []
    with pytest.MonkeyPatch.context() as monkeypatch:
        _assert_parity(_config(*specs, **overrides), tmp_path, monkeypatch, stages)
