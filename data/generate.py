"""Regenerate the bundled sample exports in data/ (deterministic: same bytes every time).

    python data/generate.py

Each kind gets a file of valid records with a few exact duplicates and one line of every
gate-level defect class; two samples are compressed to exercise .gz and .zst reading.
"""

from __future__ import annotations

import gzip
import random
from pathlib import Path

import zstandard

from pipeline.synthetic import DEFECTS, defect_line, export_lines, make_record

HERE = Path(__file__).resolve().parent
KINDS = ("pairwise-v2", "agent-trace-v1", "grounded-qa-v1", "math-reasoning-v1", "pw-decide-row-1")


def sample(kind: str, seed: int, count: int = 120) -> list[bytes]:
    lines = list(export_lines(kind, count, seed=seed, duplicate_rate=0.03))
    rng = random.Random(seed + 1000)
    for n, defect in enumerate(sorted(DEFECTS)):
        position = rng.randrange(len(lines) + 1)
        lines.insert(position, defect_line(defect, make_record(kind, rng, 10_000 + n)))
    return lines


def main() -> None:
    for seed, kind in enumerate(KINDS):
        data = b"".join(line + b"\n" for line in sample(kind, seed))
        if kind == "agent-trace-v1":
            (HERE / f"{kind}.jsonl.gz").write_bytes(gzip.compress(data, mtime=0))
        elif kind == "pw-decide-row-1":
            (HERE / f"{kind}.jsonl.zst").write_bytes(
                zstandard.ZstdCompressor(level=10).compress(data)
            )
        else:
            (HERE / f"{kind}.jsonl").write_bytes(data)


if __name__ == "__main__":
    main()
