"""What one gated row costs, part by part: the floor under ``rowgate run`` in Python.

    python benchmarks/gate_floor.py                    # 8,192 lines of a pairwise-v2 export
    python benchmarks/gate_floor.py --keep /tmp/x.jsonl --lines 20000
    python benchmarks/gate_floor.py --layout json      # lines as json.dumps writes them

Times each piece of work the gate does for a valid row, in isolation and with the very
functions the gate calls, then the whole ``Gate.gate_batch`` per row. The pieces the
contract requires of every row (strict parse, the pinned schema through fastjsonschema,
three SHA-256 digests, Arrow columns) form a floor that no reordering of Python code can
go under; the script projects that floor onto the export of ``--project-mb`` MB on
``--workers`` cores, next to a bare parse (orjson alone) for scale.

It answers "how far can the gate get without leaving Python", which is what issue 3's
targets (≤ 1.5× DuckDB's bare conversion, ≥ 20× the seed 000 reference path) turn on.

The kind's record rules are timed both ways: per row in Python (the reference), and as
the gate runs them, the rules' batch forms over the Arrow columns and then the Python rules
they did not clear; the whole ``gate_batch`` is also timed with the batch forms off.

It also prices keyed lineage (``[lineage] key_env``): the raw line's and the content
fingerprint's HMAC-SHA-256 against their SHA-256, and the whole ``gate_batch`` with a
random key against it without, timed alternately in the same run.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import os
import secrets
import tempfile
from collections.abc import Callable
from pathlib import Path

import orjson
import pyarrow as pa
from harness import LAYOUTS, fastest, table, write_export

from pipeline.core.config import CampaignConfig
from pipeline.gate.gate import Gate
from pipeline.gate.reader import LineBatch
from pipeline.kinds import KINDS
from pipeline.kinds.rules import check_record, pending_rules
from pipeline.records.strict_json import parse_fast

KIND = "pairwise-v2"


def best_of(fn: Callable[[], object], rows: int, repeat: int = 5) -> float:
    """Best wall time per row in µs over ``repeat`` runs (the least disturbed one)."""
    return fastest(fn, repeat) / rows * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=8192, help="lines timed")
    parser.add_argument("--keep", type=Path, help="read lines from / keep the export here")
    parser.add_argument("--workers", type=int, default=2, help="cores in the projection")
    parser.add_argument("--project-mb", type=float, default=500.0)
    parser.add_argument("--layout", choices=LAYOUTS, default="orjson", help="the lines' layout")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="rowgate-floor-") as tmp:
        path = args.keep or Path(tmp) / "export.jsonl"
        if not path.exists():
            write_export(path, args.lines * 3400 / 1e6 + 1, layout=args.layout)
        with open(path, "rb") as fh:
            lines = [line.rstrip(b"\n") for _, line in zip(range(args.lines), fh, strict=False)]

    gate = Gate(CampaignConfig())
    kind = KINDS[KIND]
    kind_gate = gate.kind_gate(kind)
    validate = kind_gate.entry.validate
    # The valid rows, and the lines that carry them, as the fast path sees them.
    good: list[bytes] = []
    records: list[dict[str, object]] = []
    for line in lines:
        record = parse_fast(line)
        try:
            validate(record)
        except Exception:  # defective lines are not timed here
            continue
        good.append(line)
        records.append(record)
    n = len(records)
    mean_bytes = sum(map(len, good)) / n
    layout = kind_gate.layout
    sha256, loads, dumps = hashlib.sha256, orjson.loads, orjson.dumps
    sort_keys = orjson.OPT_SORT_KEYS
    ctx = gate.rule_context

    required = {
        "SHA-256 of the raw line": lambda: [sha256(x).hexdigest() for x in good],
        "strict parse (parse_fast: orjson + proof)": lambda: [parse_fast(x) for x in good],
        "fastjsonschema validate": lambda: [validate(r) for r in records],
        "canonical JSON + SHA-256": lambda: [
            sha256(dumps(r, option=sort_keys)).hexdigest() for r in records
        ],
        "content fingerprint (SHA-256)": lambda: [kind.fingerprint(r) for r in records],
        "Arrow columns": lambda: [
            pa.array([r.get(name) for r in records], type=f.type) for name, f in layout.sources
        ],
    }
    os.environ["ROWGATE_BENCH_LINEAGE_KEY"] = secrets.token_hex(32)
    keyed_gate = Gate(CampaignConfig().override(**{"lineage.key_env": "ROWGATE_BENCH_LINEAGE_KEY"}))
    key = keyed_gate.lineage.key
    names = [name for name, _ in layout.sources]

    def batch_forms() -> list[object]:
        """The rules as the gate runs them: batch forms over the columns, then the Python
        rules they did not clear (the columns are the Arrow piece above, built once)."""
        pending = pending_rules(KIND, pa.RecordBatch.from_arrays(columns, names=names), ctx)
        assert pending is not None
        return [check_record(KIND, r, ctx, p) for r, p in zip(records, pending, strict=True)]

    columns = required["Arrow columns"]()
    optional = {
        "  of which orjson.loads alone": lambda: [loads(x) for x in good],
        f"{KIND} record rules, per row in Python": lambda: [
            check_record(KIND, r, ctx) for r in records
        ],
        f"{KIND} record rules, batch forms + the rest": batch_forms,
        "keyed: HMAC-SHA-256 of the raw line": lambda: [
            hmac.digest(key, x, "sha256").hex() for x in good
        ],
        "keyed: content fingerprint (HMAC)": lambda: [
            kind.fingerprint_and_profile(r, key) for r in records
        ],
    }
    costs = {name: best_of(fn, n) for name, fn in (required | optional).items()}
    batch = LineBatch(first_line=1, offsets=list(range(n)), lines=good)
    per_row_gate = Gate(CampaignConfig(), batch_rules=False)
    whole = keyed = per_row = float("inf")
    for _ in range(5):  # alternately, so that all see the same machine
        whole = min(whole, best_of(lambda: gate.gate_batch(batch), n, repeat=1))
        keyed = min(keyed, best_of(lambda: keyed_gate.gate_batch(batch), n, repeat=1))
        per_row = min(per_row, best_of(lambda: per_row_gate.gate_batch(batch), n, repeat=1))
    floor = sum(costs[name] for name in required)

    rows = [
        [name, f"{us:.2f}", "required" if name in required else ""] for name, us in costs.items()
    ]
    rows.append(["sum of the required pieces (the floor)", f"{floor:.2f}", ""])
    rows.append(["Gate.gate_batch, whole, per row", f"{whole:.2f}", f"{whole / floor:.2f}x floor"])
    rows.append(
        ["Gate.gate_batch, rules per row only", f"{per_row:.2f}", f"{per_row / whole:.3f}x"]
    )
    rows.append(
        ["Gate.gate_batch, keyed lineage, per row", f"{keyed:.2f}", f"{keyed / whole:.3f}x"]
    )
    print(f"{n:,} valid rows of {mean_bytes:,.0f} B, timed alone (best of 5), µs per row\n")
    print(table(rows, ["piece", "µs/row", ""]))

    projected_rows = args.project_mb * 1e6 / (mean_bytes + 1)
    print(
        f"\nprojected onto {args.project_mb:.0f} MB ({projected_rows:,.0f} rows) on {args.workers} cores:"
    )
    for label, us in (
        ("bare orjson.loads", costs["  of which orjson.loads alone"]),
        ("the floor", floor),
        ("gate_batch today", whole),
    ):
        seconds = projected_rows * us / 1e6 / args.workers
        print(f"  {label:<20} {seconds:6.2f} s")


if __name__ == "__main__":
    main()
