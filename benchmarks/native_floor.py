"""What a native gate could reach: DuckDB doing the per-line work rowgate's contract asks.

    python benchmarks/native_floor.py                      # ≈ 500 MB pairwise-v2 export
    python benchmarks/native_floor.py --keep /tmp/x.jsonl --size-mb 100

``gate_floor.py`` shows the Python gate's floor is above issue 3's target (≤ 1.5× DuckDB's
bare conversion). This script estimates the floor of the alternative, a gate outside
Python, with a native engine already at hand, on the same file and in the same run:

* **bare**: DuckDB ``read_json`` → Parquet, the issue's yardstick;
* **contract work**: DuckDB reads the lines, hashes each one three times with SHA-256
  (rowgate's raw, record and content digests all cover about a line's bytes), parses
  it into the kind's typed struct, and writes Parquet: the contract's per-row work
  natively, less the schema's constraints and the kind's rules;
* DuckDB's SHA-256 (in software) and OpenSSL's through ``hashlib`` (SHA-NI where the
  CPU has it), each over the whole file, so the projection can swap one for the other.

Projection: contract work − 3 × DuckDB's hashing + 3 × OpenSSL's hashing over the cores.
It is an estimate of what a native gate could do, not a measurement of one, and a
slightly optimistic one: DuckDB skips the lines it cannot read or that are not JSON (a
few percent here; rowgate hashes every line), and OpenSSL is timed on one large buffer
and assumed to scale perfectly over the cores. Needs the ``bench`` extra (duckdb).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import tempfile
from pathlib import Path

import duckdb
from harness import fastest, table, write_export

#: pairwise-v2 as a DuckDB struct (what ``json_transform`` parses each line into)
STRUCT = (
    '{"task_id":"VARCHAR","messages":[{"role":"VARCHAR","content":"VARCHAR"}],'
    '"response_a":"VARCHAR","response_b":"VARCHAR","preference":"VARCHAR",'
    '"rationale":"VARCHAR","golden_patch":"VARCHAR","schema_version":"VARCHAR",'
    '"rubric_version":"VARCHAR","ratings":{"factuality":"BIGINT","reasoning":"BIGINT",'
    '"instruction_adherence":"BIGINT","style":"BIGINT"}}'
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=500.0)
    parser.add_argument("--keep", type=Path, help="reuse/keep the export at this path")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))

    with tempfile.TemporaryDirectory(prefix="rowgate-native-") as tmp_name:
        tmp = Path(tmp_name)
        path = args.keep or tmp / "export.jsonl"
        if not path.exists():
            write_export(path, args.size_mb)
        size = path.stat().st_size
        con = duckdb.connect()
        lines = (
            f"read_csv('{path}', columns={{'line': 'VARCHAR'}}, delim='\\x01', quote='', "
            "escape='', header=false, ignore_errors=true)"
        )
        # The three digests hash different bytes in rowgate; suffixes keep DuckDB from
        # computing one digest three times.
        contract = (
            f"COPY (SELECT sha256(line) AS raw, sha256(line || 'r') AS record, "
            f"sha256(line || 'c') AS content, json_transform(line, '{STRUCT}') AS row "
            f"FROM {lines} WHERE json_valid(line)) TO '{tmp / 'contract.parquet'}' "
            "(FORMAT parquet)"
        )
        bare = (
            f"COPY (SELECT * FROM read_json('{path}', ignore_errors=true)) "
            f"TO '{tmp / 'bare.parquet'}' (FORMAT parquet)"
        )
        t_bare = fastest(lambda: con.execute(bare), args.repeat)
        t_contract = fastest(lambda: con.execute(contract), args.repeat)
        t_read = fastest(lambda: con.execute(f"SELECT sum(length(line)) FROM {lines}"), args.repeat)
        t_sha = fastest(
            lambda: con.execute(f"SELECT sum(length(sha256(line))) FROM {lines}"), args.repeat
        )
        duck_hash = max(t_sha - t_read, 0.0)  # one SHA-256 pass over every line, all cores
        data = path.read_bytes()
        openssl_hash = fastest(lambda: hashlib.sha256(data).digest(), args.repeat) / cores
        projected = t_contract - 3 * duck_hash + 3 * openssl_hash

    rows = [
        ("DuckDB read_json → Parquet (bare)", f"{t_bare:.2f}", "1.00×"),
        ("DuckDB lines → 3 × SHA-256 + typed parse → Parquet", f"{t_contract:.2f}",
         f"{t_contract / t_bare:.2f}×"),
        ("  of which one SHA-256 pass (DuckDB, software)", f"{duck_hash:.2f}", ""),
        (f"  one SHA-256 pass (OpenSSL, over {cores} cores)", f"{openssl_hash:.2f}", ""),
        ("projected native gate (OpenSSL hashing)", f"{projected:.2f}",
         f"{projected / t_bare:.2f}×"),
    ]  # fmt: skip
    print(f"export: {size / 1e6:.0f} MB\n")
    print(table(rows, ("work", "wall s", "vs bare")))


if __name__ == "__main__":
    main()
