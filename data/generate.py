"""Regenerate the bundled sample exports in data/ (deterministic: same bytes every time).

    python data/generate.py

Each kind gets a file of valid records plus: one line of every gate-level defect class,
one record breaking each of the kind's semantic rules, and records breaking its
cross-record rules (retries, idempotency conflicts, contradictions). Two samples are
compressed to exercise .gz and .zst reading. The reference tables the sample campaign
pins (documents, authorised document ids) are written here too.

The AutoQA evaluation sample (``autoqa-eval-1.jsonl``, its contracts table and its own
campaign, ``campaign-autoqa.toml``) plants one document per record rule and per cross
rule of the kind; a planted document's ``evaluationId`` names the code it must get.
"""

from __future__ import annotations

import copy
import gzip
import hashlib
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import orjson
import zstandard

from pipeline.testing.synthetic import (
    AUTOQA_CONTRACTS,
    DEFECTS,
    DOCUMENTS,
    RULE_VIOLATIONS,
    defect_line,
    export_lines,
    make_record,
)

HERE = Path(__file__).resolve().parent
KINDS = (
    "pairwise-v2",
    "agent-trace-v1",
    "grounded-qa-v1",
    "math-reasoning-v1",
    "pw-decide-row-1",
    "ari-replication-rubric-3",
    "ari-replication-rubric-v2",
)


def _pairwise_cross(rng: random.Random) -> list[dict[str, Any]]:
    base = make_record("pairwise-v2", rng, 20_000)
    base.update(
        preference="A", golden_patch=None, rationale="Response A is better because it keeps order."
    )
    conflict = {**base, "rationale": "Response A is better because it keeps the first occurrence."}
    swapped = {
        **base,
        "task_id": "task-contra-1",
        "response_a": base["response_b"],
        "response_b": base["response_a"],
    }  # same comparison, A/B swapped, still "A": prefers the other response
    return [base, conflict, swapped]


def _trace_cross(rng: random.Random) -> list[dict[str, Any]]:
    base = make_record("agent-trace-v1", rng, 20_000)
    return [base, {**base, "final_answer": base["final_answer"] + " (edited)"}]


def _decide_cross(rng: random.Random) -> list[dict[str, Any]]:
    orphan = make_record("pw-decide-row-1", rng, 20_001)
    orphan.update(host="worker", session="s-20001", root_session="s-99999")
    first = make_record("pw-decide-row-1", rng, 20_004)
    first.update(host="coordinator", session="s-20004", root_session="s-20004")
    other_model = copy.deepcopy(first)
    other_model.update(receipt=first["receipt"] + 1, model="example-model-2")
    same_receipt = copy.deepcopy(first)
    same_receipt["labels"]["requested_names"] = ["edit"]
    return [orphan, first, other_model, same_receipt]


def _ari_bad(kind: str) -> Callable[[random.Random], list[dict[str, Any]]]:
    def build(rng: random.Random) -> list[dict[str, Any]]:
        bad_digest = make_record(kind, rng, 30_000)
        bad_digest["rubric_sha256"] = "0" * 64
        repeated_id = make_record(kind, rng, 30_001)
        repeated_id["rubric"]["sub_tasks"][1]["id"] = repeated_id["rubric"]["sub_tasks"][0]["id"]
        return [bad_digest, repeated_id]

    return build


CROSS: dict[str, Callable[[random.Random], list[dict[str, Any]]]] = {
    "pairwise-v2": _pairwise_cross,
    "agent-trace-v1": _trace_cross,
    "pw-decide-row-1": _decide_cross,
    "ari-replication-rubric-3": _ari_bad("ari-replication-rubric-3"),
    "ari-replication-rubric-v2": _ari_bad("ari-replication-rubric-v2"),
}


def sample(kind: str, seed: int, count: int = 120) -> list[bytes]:
    small = kind.startswith("ari-")
    lines = list(
        export_lines(kind, 12 if small else count, seed=seed, duplicate_rate=0.0 if small else 0.03)
    )
    rng = random.Random(seed + 1000)
    extra: list[bytes] = []
    if not small:
        extra += [
            defect_line(d, make_record(kind, rng, 10_000 + n))
            for n, d in enumerate(sorted(DEFECTS))
        ]
    extra += [
        orjson.dumps(build(40_000 + n))
        # numbered among the bundled kinds' rules only, so a kind with its own sample
        # (AutoQA) leaves these files as they were
        for n, (code, build) in enumerate(
            sorted(c for c in RULE_VIOLATIONS.items() if c[0].split(".")[1] in KINDS)
        )
        if code.split(".")[1] == kind
    ]
    extra += [orjson.dumps(r) for r in CROSS.get(kind, lambda _: [])(rng)]
    for line in extra:
        lines.insert(rng.randrange(len(lines) + 1), line)
    return lines


def reference_tables() -> None:
    with open(HERE / "documents.jsonl", "w", encoding="utf-8") as fh:
        for doc_id, text in DOCUMENTS.items():
            row = {"id": doc_id, "sha256": hashlib.sha256(text.encode()).hexdigest(), "text": text}
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    with open(HERE / "authorised-documents.jsonl", "w", encoding="utf-8") as fh:
        for doc_id in DOCUMENTS:
            fh.write(json.dumps({"id": doc_id}) + "\n")


AUTOQA: Final = "autoqa-eval-1"


def autoqa_sample(valid: int = 12) -> list[bytes]:
    """Valid evaluations, one planted per rule of the kind (``planted.<code>``) and two
    per cross rule (``planted.<code>.<n>``), in a fixed shuffled order."""
    rng = random.Random(2026)
    records = [make_record(AUTOQA, rng, n) for n in range(valid)]
    prefix = f"semantic.{AUTOQA}."
    for n, (code, build) in enumerate(sorted(RULE_VIOLATIONS.items())):
        if code.startswith(prefix):
            records.append({**build(50_000 + n), "evaluationId": f"planted.{code}"})
    profile = make_record(AUTOQA, rng, 60_000)
    profile["calibrationProfile"]["profileId"] = "calib-code-review-2026-06"
    other_profile = copy.deepcopy(make_record(AUTOQA, rng, 60_001))
    other_profile["calibrationProfile"].update(
        profileId="calib-code-review-2026-06", sampleSize=900
    )
    case = make_record(AUTOQA, rng, 60_002)
    other_case = copy.deepcopy(make_record(AUTOQA, rng, 60_003))
    other_case["caseRef"]["caseId"] = case["caseRef"]["caseId"]
    for code, pair in (
        ("cross.autoqa_profile_conflict", (profile, other_profile)),
        ("cross.autoqa_case_conflict", (case, other_case)),
    ):
        records += [{**r, "evaluationId": f"planted.{code}.{n}"} for n, r in enumerate(pair, 1)]
    rng.shuffle(records)
    return [orjson.dumps(r) for r in records]


def autoqa_files() -> None:
    with open(HERE / "autoqa-contracts.jsonl", "w", encoding="utf-8") as fh:
        for contract in AUTOQA_CONTRACTS:
            fh.write(json.dumps(contract, ensure_ascii=False) + "\n")
    (HERE / f"{AUTOQA}.jsonl").write_bytes(b"".join(line + b"\n" for line in autoqa_sample()))
    print(
        "autoqa-contracts.jsonl",
        hashlib.sha256((HERE / "autoqa-contracts.jsonl").read_bytes()).hexdigest(),
    )


def main() -> None:
    autoqa_files()
    reference_tables()
    for seed, kind in enumerate(KINDS):
        data = b"".join(line + b"\n" for line in sample(kind, seed))
        if kind == "agent-trace-v1":
            (HERE / f"{kind}.jsonl.gz").write_bytes(gzip.compress(data, mtime=0))
        elif kind == "pw-decide-row-1":
            compressed = zstandard.ZstdCompressor(level=10).compress(data)
            (HERE / f"{kind}.jsonl.zst").write_bytes(compressed)
        else:
            (HERE / f"{kind}.jsonl").write_bytes(data)
    for name in ("documents.jsonl", "authorised-documents.jsonl"):
        print(name, hashlib.sha256((HERE / name).read_bytes()).hexdigest())


if __name__ == "__main__":
    main()
