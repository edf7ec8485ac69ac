"""Regenerate the bundled sample exports in data/ (deterministic: same bytes every time).

    python data/generate.py            # write them into data/
    python data/generate.py --check    # write nothing: exit 1 if data/ is not what it writes

The test suite runs ``--check``: a change to the generators (a new rule's violation, a
new defect class) must come with the samples it makes, or the samples stop showing it.

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

import argparse
import copy
import gzip
import hashlib
import json
import random
import sys
import tempfile
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


def reference_tables(root: Path) -> None:
    with open(root / "documents.jsonl", "w", encoding="utf-8") as fh:
        for doc_id, text in DOCUMENTS.items():
            row = {"id": doc_id, "sha256": hashlib.sha256(text.encode()).hexdigest(), "text": text}
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    with open(root / "authorised-documents.jsonl", "w", encoding="utf-8") as fh:
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


def autoqa_files(root: Path) -> None:
    with open(root / "autoqa-contracts.jsonl", "w", encoding="utf-8") as fh:
        for contract in AUTOQA_CONTRACTS:
            fh.write(json.dumps(contract, ensure_ascii=False) + "\n")
    (root / f"{AUTOQA}.jsonl").write_bytes(b"".join(line + b"\n" for line in autoqa_sample()))


def write_samples(root: Path) -> list[str]:
    """Write every sample file into ``root``; their names."""
    autoqa_files(root)
    reference_tables(root)
    names = ["autoqa-contracts.jsonl", f"{AUTOQA}.jsonl", "documents.jsonl"]
    names.append("authorised-documents.jsonl")
    for seed, kind in enumerate(KINDS):
        data = b"".join(line + b"\n" for line in sample(kind, seed))
        if kind == "agent-trace-v1":
            name, data = f"{kind}.jsonl.gz", gzip.compress(data, mtime=0)
        elif kind == "pw-decide-row-1":
            name, data = f"{kind}.jsonl.zst", zstandard.ZstdCompressor(level=10).compress(data)
        else:
            name = f"{kind}.jsonl"
        (root / name).write_bytes(data)
        names.append(name)
    return names


def _content(path: Path) -> bytes | None:
    """A sample's lines (decompressed: compressors' bytes differ between builds of zlib
    and zstd, the lines must not); None when there is no such file."""
    if not path.is_file():
        return None
    data = path.read_bytes()
    if path.name.endswith(".gz"):
        return gzip.decompress(data)
    if path.name.endswith(".zst"):
        return zstandard.ZstdDecompressor().decompress(data, max_output_size=1 << 30)
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Regenerate the bundled samples in data/.")
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 naming each file of data/ whose lines differ from "
        "what this script writes",
    )
    args = parser.parse_args(argv)
    if not args.check:
        for name in write_samples(HERE):
            print(name, hashlib.sha256((HERE / name).read_bytes()).hexdigest())
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        names = write_samples(Path(tmp))
        stale = [n for n in names if _content(HERE / n) != _content(Path(tmp) / n)]
    for name in stale:
        print(f"data/{name} differs from what data/generate.py writes", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
