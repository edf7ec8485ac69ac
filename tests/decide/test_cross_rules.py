"""Cross-record rules: each rule end to end, and invariance under sharding and file order."""

from __future__ import annotations

import copy
import dataclasses
import gzip
import hashlib
import random
import re
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.core.config import CampaignConfig, ConfigError, InputSpec, load_campaign
from pipeline.decide import partitioned
from pipeline.decide.stages import cross_rules
from pipeline.jobs.run import run
from pipeline.output import writer
from pipeline.output.verify import verify_run
from pipeline.records.lineage import record_sha256
from pipeline.testing.synthetic import decide_rows_with_conflicts, make_record
from tests.conftest import DATA


def _lines(records: list[dict[str, Any]]) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


def _run(
    tmp_path: Path,
    files: dict[str, list[dict[str, Any]]],
    kind: str | None = None,
    workers: int = 1,
    name: str = "out",
    settings: dict[str, Any] | None = None,
) -> pl.DataFrame:
    specs = []
    for filename, records in files.items():
        (tmp_path / filename).write_bytes(_lines(records))
        specs.append(InputSpec(str(tmp_path / filename), kind))
    config = CampaignConfig(inputs=tuple(specs)).override(
        **{"engine.workers": workers, "engine.shard_bytes": 8192, **(settings or {})}
    )
    out = tmp_path / name
    result = run(config, out)
    frames = []
    for entry in result.manifest["outputs"]:
        path = out / entry["path"]
        disposition = path.relative_to(out).parts[0]
        frame = pl.read_parquet(path)
        columns = ["_source", "_line", "_raw_sha256", "_reasons"] + (
            ["_duplicate_of"] if "_duplicate_of" in frame.columns else []
        )
        frames.append(frame.select(columns).with_columns(_dir=pl.lit(disposition)))
    return pl.concat(frames, how="diagonal_relaxed").sort("_source", "_line")


def _codes(frame: pl.DataFrame) -> list[tuple[str, list[str]]]:
    return [
        (d, sorted(r["code"] for r in reasons))
        for d, reasons in zip(frame["_dir"], frame["_reasons"], strict=True)
    ]


def _details(frame: pl.DataFrame) -> list[list[str]]:
    return [sorted(r["detail"] for r in reasons) for reasons in frame["_reasons"]]


def _pairwise(i: int, **changes: Any) -> dict[str, Any]:
    record = make_record("pairwise-v2", random.Random(i), i)
    record.update(
        preference="A", golden_patch=None, rationale="Response A is better because it keeps order."
    )
    record.update(changes)
    return record


@pytest.mark.parametrize("dedupe", [True, False])
def test_retry_is_a_duplicate_of_the_first(tmp_path: Path, dedupe: bool) -> None:
    """Seed 002: "identical authenticated retry -> return original receipt/status": the
    same key with the same body is one admission whether or not dedupe runs; the retry
    points at the first row (the original)."""
    first = _pairwise(1)
    # the same record written with other key order and spacing is the same body
    reordered = orjson.dumps(dict(reversed(list(first.items())))).replace(b",", b", ")
    (tmp_path / "a.jsonl").write_bytes(_lines([first, _pairwise(2)]) + reordered + b"\n")
    config = CampaignConfig(inputs=(InputSpec(str(tmp_path / "a.jsonl")),)).override(
        **{"dedupe.enabled": dedupe}
    )
    run(config, tmp_path / "out")
    accepted = pl.read_parquet(tmp_path / "out" / "accepted")
    assert accepted["_line"].to_list() == [1, 2]
    retry = pl.read_parquet(tmp_path / "out" / "duplicates")
    assert retry["_line"].to_list() == [3]
    assert [r["code"] for r in retry["_reasons"][0]] == ["cross.retry"]
    assert retry["_dedupe_rule"].to_list() == ["retry"]
    assert retry["_duplicate_of"][0] == {
        "_source": str(tmp_path / "a.jsonl"),
        "_line": 1,
        "_record_sha256": record_sha256(first),
    }


def test_a_copy_in_a_protected_split_is_no_retry(tmp_path: Path) -> None:
    """The same row in train (first in input order) and in a protected eval split is a
    copy across splits, not a retry: the eval row stays and the train row goes as
    dedupe.contamination. (Replay marked the eval row a retry and removed it.)"""
    shared = _pairwise(1)
    (tmp_path / "a-train.jsonl").write_bytes(_lines([shared, _pairwise(2)]))
    (tmp_path / "b-eval.jsonl").write_bytes(_lines([shared, _pairwise(3)]))
    config = CampaignConfig(
        inputs=(
            InputSpec(str(tmp_path / "a-train.jsonl"), split="train"),
            InputSpec(str(tmp_path / "b-eval.jsonl"), split="eval"),
        )
    ).override(**{"dedupe.protected_splits": ("eval",)})
    run(config, tmp_path / "out")
    accepted = pl.read_parquet(tmp_path / "out" / "accepted")
    kept = sorted(zip(accepted["_source"], accepted["_line"], strict=True))
    assert (str(tmp_path / "b-eval.jsonl"), 1) in kept
    removed = pl.read_parquet(tmp_path / "out" / "duplicates")
    assert removed["_source"].to_list() == [str(tmp_path / "a-train.jsonl")]
    assert removed["_dedupe_rule"].to_list() == ["contamination"]


def test_replay_admits_the_original_counts_a_retry_once_and_rejects_a_conflict(
    tmp_path: Path,
) -> None:
    """Seed 002's replay control on its own example: the original, an identical retry, and
    the same ``task_id`` with another rationale. Before: all three rejected as
    ``cross.idempotency_conflict``. Now the first (in input order) is admitted, the retry
    is its duplicate and only the conflicting later body is rejected."""
    original = {
        "task_id": "order-001",
        "messages": [
            {
                "role": "user",
                "content": "Remove duplicate hashable list values while preserving first "
                "occurrence order in Python.",
            }
        ],
        "response_a": "def unique_values(values):\n    return list(dict.fromkeys(values))",
        "response_b": "def unique_values(values):\n    return list(set(values))",
        "preference": "A",
        "rationale": "Response A preserves insertion order. Response B removes duplicates "
        "but does not guarantee the requested order.",
        "golden_patch": None,
        "schema_version": "pairwise-v2",
        "rubric_version": "code-review-v1",
        "ratings": {"factuality": 5, "reasoning": 4, "instruction_adherence": 5, "style": 4},
    }
    conflicting = {**original, "rationale": "Response A keeps the order the task asks for."}
    rows = _run(tmp_path, {"a.jsonl": [original, original, conflicting]}, kind="pairwise-v2")
    assert _codes(rows) == [
        ("accepted", []),
        ("duplicates", ["cross.retry"]),
        ("rejected", ["cross.idempotency_conflict"]),
    ]
    assert rows["_duplicate_of"][1]["_line"] == 1
    raw = pl.read_parquet(tmp_path / "out" / "rejected")["_raw"].to_list()
    assert raw == [orjson.dumps(conflicting)]  # re-read from the source


def _trace(i: int, **changes: Any) -> dict[str, Any]:
    return {**make_record("agent-trace-v1", random.Random(i), i), **changes}


@pytest.mark.parametrize("workers", [1, 2])
def test_with_sanitization_submissions_are_compared_as_sent(tmp_path: Path, workers: int) -> None:
    """Redaction makes different values one placeholder; the replay rule compares what
    was sent. Two task ids that are e-mail addresses were one ``[REDACTED_PII:EMAIL]``
    key, so a different submission with the same body was removed as the first's retry
    (and with another body rejected as a conflict); a later body that differs from its
    key's first only in a redacted value was a retry, where the submitter sent a
    conflicting body. A true retry of a redacted row stays a retry of it."""
    email = "leak.{}@gmail.com"
    rows = [
        _trace(1, task_id=email.format("one")),
        _trace(1, task_id=email.format("two")),  # same body, another key as sent
        _trace(2, task_id=email.format("three")),  # another body, another key
        _trace(4, final_answer=f"Write to {email.format('x')}."),
        _trace(4, final_answer=f"Write to {email.format('y')}."),  # a conflict as sent
        _trace(5, final_answer=f"Write to {email.format('z')}."),
        _trace(6),
    ]
    rows.append(dict(reversed(list(rows[5].items()))))  # a retry of a redacted row
    settings = {"sanitize.enabled": True, "dedupe.enabled": False, "engine.shard_bytes": 4096}
    found = _run(tmp_path, {"a.jsonl": rows}, "agent-trace-v1", workers, settings=settings)
    assert found.height == len(rows)  # every line lands once
    assert (tmp_path / "a.jsonl").read_bytes() == _lines(rows)  # the input untouched
    # kept: accepted, or quarantined where a trace names documents and the run has no
    # authorised-documents table
    decided = [
        (
            "kept" if d in ("accepted", "quarantined") else d,
            [c for c in c if c.startswith("cross.")],
        )
        for d, c in _codes(found)
    ]
    kept = ("kept", [])
    assert decided == [
        kept,
        kept,
        kept,
        kept,
        ("rejected", ["cross.idempotency_conflict"]),
        kept,
        kept,
        ("duplicates", ["cross.retry"]),
    ]
    assert [("pii.redacted" in codes) for _, codes in _codes(found)] == [True] * 6 + [False, True]
    stored = pl.concat(
        pl.read_parquet(path).select("_line", "_record_sha256")
        for path in (tmp_path / "out").glob("[aq]*/*/*.parquet")  # accepted, quarantined
    ).filter(pl.col("_line") == 6)
    assert found["_duplicate_of"][7] == {
        "_source": str(tmp_path / "a.jsonl"),
        "_line": 6,
        "_record_sha256": stored["_record_sha256"][0],  # the row as stored, redacted
    }
    # the same lines without sanitization: what was sent is what is stored
    plain = _run(tmp_path, {"a.jsonl": rows}, "agent-trace-v1", workers, name="plain")
    assert [(d, [c for c in c if c.startswith("cross.")]) for d, c in _codes(plain)] == [
        (d, [c for c in c if c.startswith("cross.")]) for d, c in _codes(found)
    ]


def test_a_retry_points_at_its_originals_record_as_stored(tmp_path: Path) -> None:
    """With sanitization on, a retry is the same body as sent, and its record as stored
    can differ from its original's: two member names that redact to one tag keep the
    value written last (``pii.key_collision``), so the order they were written in
    decides. The retry's pointer names the original's ``_record_sha256`` (it named the
    retry's own, and ``rowgate verify`` refused the output)."""
    record = make_record("pw-decide-row-1", random.Random(1), 1)
    record.update(host="coordinator", root_session=record["session"])
    first, retry = copy.deepcopy(record), copy.deepcopy(record)
    first["labels"]["skill_scores"] = {"alice@acme.io": 1, "bob@acme.io": 2}
    retry["labels"]["skill_scores"] = {"bob@acme.io": 2, "alice@acme.io": 1}
    (tmp_path / "a.jsonl").write_bytes(_lines([first, retry]))
    config = CampaignConfig(inputs=(InputSpec(str(tmp_path / "a.jsonl"), "pw-decide-row-1"),))
    run(config.override(**{"sanitize.enabled": True}), tmp_path / "out")
    kept = pl.read_parquet(tmp_path / "out" / "quarantined")
    removed = pl.read_parquet(tmp_path / "out" / "duplicates")
    assert [r["code"] for r in removed["_reasons"][0]][-1] == "cross.retry"
    assert removed["_record_sha256"][0] != kept["_record_sha256"][0]  # stored apart
    assert removed["_duplicate_of"][0] == {
        "_source": str(tmp_path / "a.jsonl"),
        "_line": 1,
        "_record_sha256": kept["_record_sha256"][0],
    }
    assert verify_run(tmp_path / "out").ok  # every line lands once, lineage included
    assert (tmp_path / "a.jsonl").read_bytes() == _lines([first, retry])  # untouched


def test_the_original_is_first_in_input_order_whatever_the_shards(tmp_path: Path) -> None:
    """The original is the first row of the key in the order key (inputs sorted by path,
    then line), not the first a worker finishes: ``b.jsonl``, given first, holds the later
    body after many shards' worth of rows."""
    first = _pairwise(1)
    edited = {**first, "rationale": first["rationale"] + " Also clearer."}
    filler = [_pairwise(i) for i in range(10, 40)]
    files = {"b.jsonl": [edited, *filler], "a.jsonl": [first]}
    for workers in (1, 2):
        rows = _run(tmp_path, files, workers=workers, name=f"w{workers}")
        by_file = {
            (Path(s).name, d, tuple(c))
            for s, (d, c) in zip(rows["_source"], _codes(rows), strict=True)
            if s.endswith("a.jsonl") or d != "accepted"
        }
        assert by_file == {
            ("a.jsonl", "accepted", ()),
            ("b.jsonl", "rejected", ("cross.idempotency_conflict",)),
        }


def test_idempotency_conflict_survives_key_hash_collisions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows are grouped on a 64-bit key hash first: when every key collides, the exact
    keys still decide, so distinct submissions are never called a conflict."""
    first, second = _pairwise(1), _pairwise(2)
    edited = {**first, "rationale": first["rationale"] + " Also clearer."}
    second_edited = {**second, "rationale": second["rationale"] + " Also shorter."}
    files = {
        "a.jsonl": [first, second, _pairwise(3)],
        "b.jsonl": [edited, first, second_edited],
    }
    hashed = _run(tmp_path, files, name="hashed")
    conflict = ("rejected", ["cross.idempotency_conflict"])
    accepted = ("accepted", [])
    assert _codes(hashed) == [accepted] * 3 + [conflict, ("duplicates", ["cross.retry"]), conflict]
    details = _details(hashed)
    assert details[3] == [
        "this body differs from the first of 3 rows with this submission key "
        "(the first stays; 1 later bodies differ)"
    ]
    assert details[5] == [
        "this body differs from the first of 2 rows with this submission key "
        "(the first stays; 1 later bodies differ)"
    ]
    monkeypatch.setattr(cross_rules, "_key_hash", lambda keys: pl.lit(0, pl.UInt64))
    colliding = _run(tmp_path, files, name="colliding")
    assert _codes(colliding) == _codes(hashed)
    assert _details(colliding) == details  # counted per exact key, not per hash


def test_late_rejections_reread_raw_lines_once_per_shard_and_kind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows the global phase rejects get their raw bytes re-read from the input. With
    them spread over many staged batches, that is one read per shard and kind: for an
    unspilled compressed input every read decompresses the stream from its start."""
    records = [_pairwise(i) for i in range(6)]
    conflicts = [{**r, "rationale": r["rationale"] + " Revised."} for r in records[:3]]
    path = tmp_path / "a.jsonl.gz"
    path.write_bytes(gzip.compress(_lines([*records, *conflicts])))
    reads = []
    original = writer.fetch_lines

    def counted(*args: Any) -> Any:
        reads.append(args[1])
        return original(*args)

    monkeypatch.setattr(writer, "fetch_lines", counted)
    config = CampaignConfig(inputs=(InputSpec(str(path)),)).override(
        **{"engine.workers": 1, "engine.batch_lines": 2, "engine.spill_compressed": False}
    )
    run(config, tmp_path / "out")
    assert len(reads) == 1
    assert len(reads[0]) == 3  # every conflicting row, from two batches
    rejected = pl.read_parquet(tmp_path / "out" / "rejected")
    assert sorted(rejected["_raw"].to_list()) == sorted(_lines(conflicts).splitlines())


def test_contradictory_preference_is_quarantined(tmp_path: Path) -> None:
    base = _pairwise(1)
    swapped = {
        **base,
        "task_id": "other",
        "response_a": base["response_b"],
        "response_b": base["response_a"],
    }
    agreeing = {
        **base,
        "task_id": "third",
        "response_a": base["response_b"],
        "response_b": base["response_a"],
        "preference": "B",
        "rationale": "Response B is better because it keeps order.",
    }
    rows = _run(tmp_path, {"a.jsonl": [base, swapped, agreeing]})
    assert _codes(rows) == [
        ("quarantined", ["cross.contradictory_preference"]),
        ("quarantined", ["cross.contradictory_preference"]),
        ("quarantined", ["cross.contradictory_preference"]),
    ]
    rows = _run(tmp_path, {"c.jsonl": [base, agreeing]}, name="agree")
    # the same judgment with A and B swapped is the same content: a duplicate, no conflict
    assert _codes(rows) == [("accepted", []), ("duplicates", ["dedupe.exact"])]


def _decide(i: int, **changes: Any) -> dict[str, Any]:
    record = copy.deepcopy(make_record("pw-decide-row-1", random.Random(i), i))
    record.update(changes)
    return record


def test_pw_decide_row_cross_rules(tmp_path: Path) -> None:
    coordinator = _decide(0, host="coordinator", session="s-1", root_session="s-1")
    worker = _decide(1, host="worker", session="s-2", root_session="s-1")
    orphan = _decide(2, host="worker", session="s-3", root_session="s-404")
    other_model = _decide(
        3, host="worker", session="s-2", root_session="s-1", model="another-model", receipt=99
    )
    # the coordinator lives in another file: the rule sees the whole run
    rows = _run(tmp_path, {"b.jsonl": [worker, orphan, other_model], "a.jsonl": [coordinator]})
    assert _codes(rows) == [
        ("accepted", []),
        ("rejected", ["cross.session_model_conflict"]),
        ("rejected", ["cross.worker_root_missing"]),
        ("rejected", ["cross.session_model_conflict"]),
    ]


def test_a_rejected_replay_takes_no_part_in_the_rules_after_it(tmp_path: Path) -> None:
    """A later body of a submission key is rejected and its original stays (the replay
    rule's contract). The rejected body still counted in the rules after it: its original
    was quarantined as contradicting it, or rejected for naming another model than it."""
    original = _pairwise(1)
    flipped = {**original, "preference": "B", "rationale": "Response B is better, it is short."}
    rows = _run(tmp_path, {"a.jsonl": [original, flipped]})
    assert _codes(rows) == [("accepted", []), ("rejected", ["cross.idempotency_conflict"])]
    first = _decide(0, host="coordinator", session="s1", root_session="s1", receipt=1)
    other_model = {**first, "model": "other-model"}
    rows = _run(tmp_path, {"b.jsonl": [first, other_model]}, name="decide")
    assert _codes(rows) == [("accepted", []), ("rejected", ["cross.idempotency_conflict"])]
    # a conflict that is no replay (another receipt) is still one
    receipt = {**other_model, "receipt": 2}
    rows = _run(tmp_path, {"c.jsonl": [first, receipt]}, name="model")
    assert _codes(rows) == [("rejected", ["cross.session_model_conflict"])] * 2


def test_a_worker_whose_coordinator_every_rule_rejected_has_no_root(tmp_path: Path) -> None:
    """A worker whose coordinator the gate rejected was cross.worker_root_missing; one
    whose coordinator's rows a cross rule all rejected was accepted. Both are now."""
    coordinator = _decide(0, host="coordinator", session="s3", root_session="s3", receipt=1)
    conflicting = {**coordinator, "receipt": 2, "model": "other-model"}
    worker = _decide(1, host="worker", session="w3", root_session="s3", receipt=3)
    rows = _run(tmp_path, {"a.jsonl": [coordinator, conflicting, worker]})
    assert _codes(rows) == [
        ("rejected", ["cross.session_model_conflict"]),
        ("rejected", ["cross.session_model_conflict"]),
        ("rejected", ["cross.worker_root_missing"]),
    ]


def test_session_receipt_is_the_submission_key(tmp_path: Path) -> None:
    row = _decide(0, host="coordinator", session="s-1", root_session="s-1")
    changed = copy.deepcopy(row)
    changed["labels"]["requested_names"] = ["edit"]
    rows = _run(
        tmp_path,
        {
            "a.jsonl": [
                row,
                changed,
                _decide(0, host="coordinator", session="s-1", root_session="s-1", receipt=7),
            ]
        },
    )
    # the first body stays; the third row, another receipt with the first's content, is
    # an exact duplicate of it (dedupe's content fingerprint leaves the receipt out)
    assert _codes(rows) == [
        ("accepted", []),
        ("rejected", ["cross.idempotency_conflict"]),
        ("duplicates", ["dedupe.exact"]),
    ]


def _conflicting(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The two bodies of the corpus's one conflicting submission key."""
    return [r for r in records if r["task_id"] == _pairwise(5)["task_id"]]


def _corpus() -> list[dict[str, Any]]:
    rng = random.Random(11)
    records = [_pairwise(i) for i in range(30)]
    records += [
        records[3],
        records[7],
        {**records[5], "rationale": "Response A is better: it is simply correct."},
    ]
    base = records[10]
    records.append(
        {
            **base,
            "task_id": "contra",
            "response_a": base["response_b"],
            "response_b": base["response_a"],
        }
    )
    rng.shuffle(records)
    return records


@pytest.mark.slow
@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.data())
def test_same_result_for_any_file_split_order_and_workers(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    """The multiset of (line bytes, disposition, reasons) does not depend on how the lines
    are spread over files, on file names/order, or on the worker count."""
    records = _corpus()
    expected = None
    for attempt in range(2):
        tmp = tmp_path_factory.mktemp("split")
        files = data.draw(st.integers(1, 4), label="files")
        assignment = data.draw(
            st.lists(st.integers(0, files - 1), min_size=len(records), max_size=len(records)),
            label="assign",
        )
        names = data.draw(st.permutations([f"f{i}.jsonl" for i in range(files)]), label="names")
        split: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
        for record, target in zip(records, assignment, strict=True):
            split[names[target]].append(record)
        split = {k: v for k, v in split.items() if v}
        rows = _run(tmp, split, workers=1 + attempt)
        # Which of two bodies of one key is the original follows the input order (the
        # order key), so it is checked on its own; everything else is a multiset.
        bodies = {hashlib.sha256(orjson.dumps(r)).hexdigest() for r in _conflicting(records)}
        ordered = rows.sort(pl.col("_source"), "_line")
        replay = [
            d
            for sha, (d, _) in zip(ordered["_raw_sha256"], _codes(ordered), strict=True)
            if sha in bodies
        ]
        assert replay == ["accepted", "rejected"]
        outcome = Counter(
            (sha, d, tuple(c))
            for sha, (d, c) in zip(rows["_raw_sha256"], _codes(rows), strict=True)
            if sha not in bodies
        )
        if expected is None:
            expected = outcome
        assert outcome == expected


def test_disabling_a_rules_own_finding_names_the_rule(tmp_path: Path) -> None:
    """``cross.retry`` is listed by ``rowgate reasons`` but is the replay rule's finding:
    disabling it alone said "unknown rule code"."""
    (tmp_path / "a.jsonl").write_bytes(_lines([_pairwise(1)]))
    config = CampaignConfig(inputs=(InputSpec(str(tmp_path / "a.jsonl")),))
    owned = re.escape("'cross.retry' is a finding of the rule 'cross.idempotency_conflict'")
    with pytest.raises(ConfigError, match=owned):
        run(config.override(**{"rules.disabled": ("cross.retry",)}), tmp_path / "out")
    with pytest.raises(ConfigError, match=re.escape("unknown rule code 'cross.nope'")):
        run(config.override(**{"rules.disabled": ("cross.nope",)}), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def _session_rules_oracle(records: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """What the session-model and worker-root rules decide, computed in Python over
    every row: the gate rejects a coordinator whose root is not its session (and a
    worker that is its own root); of the rows left, those of a session naming two models
    are rejected; of the rows left then, a worker whose root is no coordinator's session."""
    gated = [(r["host"] == "coordinator") != (r["root_session"] == r["session"]) for r in records]
    models: dict[str, set[str]] = {}
    for r, rejected in zip(records, gated, strict=True):
        if not rejected:
            models.setdefault(r["session"], set()).add(r["model"])
    conflict = [
        not g and len(models[r["session"]]) > 1 for r, g in zip(records, gated, strict=True)
    ]
    left = [not g and not c for g, c in zip(gated, conflict, strict=True)]
    roots = {
        r["session"]
        for r, ok in zip(records, left, strict=True)
        if ok and r["host"] == "coordinator"
    }
    expected = []
    for r, g, c in zip(records, gated, conflict, strict=True):
        if g:
            expected.append(("rejected", []))
        elif c:
            expected.append(("rejected", ["cross.session_model_conflict"]))
        elif r["host"] == "worker" and r["root_session"] not in roots:
            expected.append(("rejected", ["cross.worker_root_missing"]))
        else:
            expected.append(("accepted", []))
    return expected


@pytest.mark.parametrize(
    ("workers", "partitions", "colliding"), [(1, 1, False), (2, 7, False), (1, 64, True)]
)
def test_session_rules_decide_as_over_every_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int, partitions: int, colliding: bool
) -> None:
    """The session-model and worker-root rules find their rows on hashes, partition by
    partition on the engine, and read only those rows: they decide as the rules over
    every row do, for any partition and worker count, and when every session's hash
    collides (the exact sessions decide)."""
    records = decide_rows_with_conflicts(400, seed=9)
    expected = _session_rules_oracle(records)
    found = Counter(codes[0] if codes else d for d, codes in expected)
    assert found["cross.session_model_conflict"] > 10
    assert found["cross.worker_root_missing"] > 10
    assert found["rejected"] > 10  # by the gate, and naming another model
    if colliding:
        monkeypatch.setattr(cross_rules, "_group_hash", lambda value: pl.lit(0, pl.UInt64))
    rows = _run(
        tmp_path,
        {"a.jsonl": records},
        workers=workers,
        settings={"engine.partitions": partitions},
    )
    cross = [(d, [c for c in codes if c.startswith("cross.")]) for d, codes in _codes(rows)]
    assert cross == expected


def test_autoqa_conflicts_decide_on_exact_values_when_hashes_collide(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Documents of one profile id or case id that describe it differently are
    quarantined, found on hashes first: with every id's hash colliding, the exact ids
    still decide (no finding invented across ids)."""
    campaign = load_campaign(DATA / "campaign-autoqa.toml")
    docs = [make_record("autoqa-eval-1", random.Random(i), i) for i in range(6)]
    docs[1]["calibrationProfile"]["sampleSize"] += 1  # one profile, two descriptions
    for doc in docs[2:]:
        doc["calibrationProfile"]["profileId"] = "calib-other"
    docs[3]["caseRef"] = dict(docs[2]["caseRef"])  # one case, one hash: no conflict
    docs[4]["caseRef"] = {**docs[5]["caseRef"], "caseSha256": "0" * 64}  # one case, two hashes
    (tmp_path / "a.jsonl").write_bytes(_lines(docs))
    config = dataclasses.replace(
        campaign, inputs=(InputSpec(str(tmp_path / "a.jsonl"), "autoqa-eval-1"),)
    )
    outcomes = []
    for name in ("hashed", "colliding"):
        if name == "colliding":
            monkeypatch.setattr(cross_rules, "_group_hash", lambda value: pl.lit(0, pl.UInt64))
        run(config, tmp_path / name)
        table = pl.read_parquet(tmp_path / name / "quarantined")
        outcomes.append(
            sorted(
                (line, sorted(r["code"] for r in reasons))
                for line, reasons in zip(table["_line"], table["_reasons"].to_list(), strict=True)
            )
        )
    assert outcomes[0] == [
        (1, ["cross.autoqa_profile_conflict"]),
        (2, ["cross.autoqa_profile_conflict"]),
        (5, ["cross.autoqa_case_conflict"]),
        (6, ["cross.autoqa_case_conflict"]),
    ]
    assert outcomes[1] == outcomes[0]


def _replay_oracle(
    files: dict[str, tuple[str | None, list[dict[str, Any] | bytes]]], root: Path
) -> dict[tuple[str, int], tuple[str, list[str], Any]]:
    """What the replay rule decides, row by row over every row (the spec, in Python):
    among the rows the gate left in that share a task id, the first in input order is
    the original; a later one with another body is a conflict, counted per key; one
    with the same body in the original's split is its retry, pointing at it; one in
    another split is left (dedupe's). Lines given as bytes are rejected at the gate."""
    rows: dict[str, list[tuple[str, int, str, str | None]]] = {}
    for name, (split, lines) in files.items():
        for line, record in enumerate(lines, 1):
            if isinstance(record, dict):
                key = record["task_id"]
                rows.setdefault(key, []).append((name, line, record_sha256(record), split))
    decided: dict[tuple[str, int], tuple[str, list[str], Any]] = {}
    for group in rows.values():
        (source, line, digest, split), later = group[0], group[1:]
        conflicts = sum(d != digest for _, _, d, _ in later)
        for name, at, other, other_split in later:
            where = str(root / name)
            if other != digest:
                detail = (
                    f"this body differs from the first of {len(group)} rows with this "
                    f"submission key (the first stays; {conflicts} later bodies differ)"
                )
                decided[(where, at)] = ("rejected", ["cross.idempotency_conflict"], detail)
            elif other_split == split:
                pointer = {"_source": str(root / source), "_line": line, "_record_sha256": digest}
                decided[(where, at)] = ("duplicates", ["cross.retry"], pointer)
    return decided


@pytest.mark.parametrize(("collide", "part_rows"), [(False, None), (True, None), (False, 7)])
@pytest.mark.parametrize("seed", [0, 1])
def test_replay_rule_decides_as_over_every_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, collide: bool, part_rows: int | None
) -> None:
    """The replay rule against a Python oracle over every row, on four inputs of two
    splits and none (an input without a label is of one split with the others without
    one, and of another than the labelled ones'): retries (the same body, its keys in
    another order: the same record digest), conflicts (up to three bodies a key), copies
    into the other split, and rows the gate rejects that share a task id, whose keys are
    read, found and decided a group at a time; with every key's hash colliding too (then the exact keys alone decide), and
    with the findings made whole 7 at a time (a reason's text and a retry's pointer are
    made a part at a time) and the later rows the engine staged read a block of about 5
    at a time."""
    if part_rows is not None:
        monkeypatch.setattr(cross_rules, "PART_ROWS", part_rows)
        monkeypatch.setattr(partitioned, "FOLLOWER_ROWS", 5)  # the later rows read 5 at a time
    rng = random.Random(seed)
    base = [_pairwise(i) for i in range(30)]
    files: dict[str, tuple[str | None, list[dict[str, Any] | bytes]]] = {}
    inputs = (("a.jsonl", "train"), ("b.jsonl", "test"), ("c.jsonl", "train"), ("d.jsonl", None))
    for name, split in inputs:
        lines: list[dict[str, Any] | bytes] = []
        for _ in range(70):
            record = dict(reversed(rng.choice(base).items()))  # same body, keys reordered
            if rng.random() < 0.3:
                record["rationale"] += f" Revised {rng.randint(1, 2)}."
            if rng.random() < 0.08:  # rejected by the gate: takes no part
                bad = {**record, "preference": 7}
                lines.append(orjson.dumps(bad))
                continue
            lines.append(record)
        files[name] = (split, lines)
    specs = []
    for name, (split, lines) in files.items():
        body = b"".join((r if isinstance(r, bytes) else orjson.dumps(r)) + b"\n" for r in lines)
        (tmp_path / name).write_bytes(body)
        specs.append(InputSpec(str(tmp_path / name), "pairwise-v2", split))
    if collide:
        monkeypatch.setattr(cross_rules, "_key_hash", lambda keys: pl.lit(0, pl.UInt64))
    config = CampaignConfig(inputs=tuple(specs)).override(
        **{"engine.workers": 1, "engine.shard_bytes": 8192, "dedupe.exact": False}
    )
    result = run(config, tmp_path / "out")
    expected = _replay_oracle(files, tmp_path)
    assert sum(code == ["cross.retry"] for _, code, _ in expected.values()) > 10
    assert sum(code != ["cross.retry"] for _, code, _ in expected.values()) > 10
    seen = 0
    for entry in result.manifest["outputs"]:
        frame = pl.read_parquet(tmp_path / "out" / entry["path"])
        folder = Path(entry["path"]).parts[0]
        for row in frame.iter_rows(named=True):
            codes = sorted(r["code"] for r in row["_reasons"] if r["code"].startswith("cross."))
            found = expected.get((row["_source"], row["_line"]))
            if found is None:
                assert not codes, row
                continue
            seen += 1
            assert (folder, codes) == found[:2], row
            if folder == "duplicates":
                assert row["_duplicate_of"] == found[2]
            else:
                assert [r["detail"] for r in row["_reasons"]] == [found[2]]
    assert seen == len(expected)


@pytest.mark.parametrize(("workers", "partitions"), [(1, 1), (2, 7), (2, 64)])
def test_contradictions_are_the_comparisons_preferred_both_ways(
    tmp_path: Path, workers: int, partitions: int
) -> None:
    """Reviews of 120 comparisons (one to four each, in either A/B order, preferring A,
    B or a tie; some comparisons of one text twice, some sharing a conversation with
    another pair), over two files of small shards: exactly the decisive rows of every
    comparison preferred both ways are quarantined, each told its comparison's rows, as
    over every row's texts, at any worker and partition count."""
    rng = random.Random(partitions)
    records = []
    for n in range(120):
        base = _pairwise(n)
        if n % 10 == 0:  # one text twice: whichever side is preferred, it is that text
            base = {**base, "response_b": base["response_a"]}
        if n % 7 == 0:  # the previous comparison's conversation, another pair
            base = {**base, "messages": _pairwise(n - 1)["messages"]}
        for k in range(rng.randint(1, 4)):
            row = {**base, "task_id": f"c{n}-{k}"}
            if rng.random() < 0.3:
                row.update(response_a=base["response_b"], response_b=base["response_a"])
            roll = rng.random()
            row["preference"] = "A" if roll < 0.45 else "B" if roll < 0.9 else "tie"
            records.append(row)
    rng.shuffle(records)
    files = {"a.jsonl": records[:200], "b.jsonl": records[200:]}
    settings = {"engine.partitions": partitions}
    rows = _run(tmp_path, files, workers=workers, settings=settings)
    # every input line lands in exactly one output, and the inputs are untouched
    assert rows.height == len(records) == rows.select("_source", "_line").n_unique()
    assert all((tmp_path / name).read_bytes() == _lines(part) for name, part in files.items())
    comparisons: dict[Any, list[tuple[str, int, str]]] = {}
    for name, part in files.items():
        for line, record in enumerate(part, 1):
            if record["preference"] not in ("A", "B"):
                continue
            a, b = record["response_a"], record["response_b"]
            turns = tuple((m["role"], m["content"]) for m in record["messages"])
            preferred = a if record["preference"] == "A" else b
            comparisons.setdefault((turns, min(a, b), max(a, b)), []).append(
                (name, line, preferred)
            )
    expected = {
        (name, line): f"{len(members)} rows prefer opposite responses of one comparison"
        for members in comparisons.values()
        if len({preferred for _, _, preferred in members}) > 1
        for name, line, _ in members
    }
    got = {
        (Path(source).name, line): reason["detail"]
        for source, line, reasons in rows.select("_source", "_line", "_reasons").iter_rows()
        for reason in reasons
        if reason["code"] == "cross.contradictory_preference"
    }
    assert len(expected) > 100
    assert any(len(m) > 2 for m in comparisons.values())
    assert got == expected


def test_rows_several_rules_find_are_merged_whichever_parts_they_come_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two rules over one kind's 60 rows, each in 8 KiB shards: the first rejects every
    third row, its findings in parts of up to 4 rows (``FoundParts``), and the second,
    given the rows after the first, quarantines every fourth row as one frame, naming
    every twelfth twice. A row one rule found has that rule's finding alone; a row
    several found (or one twice) the worst disposition and every finding, each once a
    time it was found; the second rule sees the first's rows as rejected."""
    rejecting, quarantining = cross_rules.CONFLICT, "cross.contradictory_preference"
    seen: list[int] = []

    def every_third(ctx: Any, kind: str, rows: pl.DataFrame) -> cross_rules.FoundParts:
        ordered = rows.with_row_index("_i").filter(pl.col("_i") % 3 == 0)
        found = ordered.select("_shard", "_shard_line", _detail=pl.lit("third"))
        return cross_rules.FoundParts(
            lambda: (found.slice(lo, 4) for lo in range(0, found.height, 4))
        )

    def every_fourth(ctx: Any, kind: str, rows: pl.DataFrame) -> pl.DataFrame:
        indexed = rows.with_row_index("_i")
        seen.extend(indexed.filter(pl.col("_disposition") == "rejected")["_i"].to_list())
        found = indexed.filter(pl.col("_i") % 4 == 0)
        twice = found.filter(pl.col("_i") % 12 == 0)
        return pl.concat([found, twice]).select("_shard", "_shard_line", _detail=pl.lit("fourth"))

    rules = [
        cross_rules.CrossRule(rejecting, cross_rules.Disposition.REJECTED, None, every_third),
        cross_rules.CrossRule(
            quarantining, cross_rules.Disposition.QUARANTINED, None, every_fourth
        ),
    ]
    monkeypatch.setattr(cross_rules, "CROSS_RULES", rules)
    records = [_pairwise(i) for i in range(60)]
    frame = _run(tmp_path, {"a.jsonl": records}, "pairwise-v2", settings={"dedupe.exact": False})
    assert frame["_line"].to_list() == list(range(1, 61))
    assert seen == list(range(0, 60, 3))
    for i, (folder, codes) in enumerate(_codes(frame)):
        wanted = [rejecting] * (i % 3 == 0) + [quarantining] * ((i % 4 == 0) + (i % 12 == 0))
        assert codes == sorted(wanted), i
        assert folder == ("rejected" if i % 3 == 0 else "quarantined" if i % 4 == 0 else "accepted")


def test_a_rule_whose_parts_read_again_differ_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rule's parts are read once to remove its rows for the rules after it and again
    to make its decisions: parts that read differently the second time (a generator
    read once) are refused, never decided short."""

    def once(ctx: Any, kind: str, rows: pl.DataFrame) -> cross_rules.FoundParts:
        found = rows.head(6).select("_shard", "_shard_line", _detail=pl.lit("once"))
        parts = iter([found.head(3), found.tail(3)])
        return cross_rules.FoundParts(lambda: parts)

    rule = cross_rules.CrossRule(cross_rules.CONFLICT, cross_rules.Disposition.REJECTED, None, once)
    monkeypatch.setattr(cross_rules, "CROSS_RULES", [rule])
    with pytest.raises(AssertionError, match="6 findings told, 0 read again"):
        _run(tmp_path, {"a.jsonl": [_pairwise(i) for i in range(10)]}, "pairwise-v2")
