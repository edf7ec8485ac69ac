"""What one gated row costs, part by part: the floor under ``rowgate run`` in Python.

    python benchmarks/gate_floor.py                    # 8,192 lines of a pairwise-v2 export
    python benchmarks/gate_floor.py --keep /tmp/x.jsonl --lines 20000
    python benchmarks/gate_floor.py --layout json      # lines as json.dumps writes them
    python benchmarks/gate_floor.py --rounds 15 --repeat 2

Times each piece of work the gate does for a valid row, in isolation and with the very
functions the gate calls, then the whole ``Gate.gate_batch`` per row. The pieces the
contract requires of every row (strict parse, the pinned schema through fastjsonschema,
three SHA-256 digests, Arrow columns) form a floor that no reordering of Python code can
go under; the script projects that floor onto the export of ``--project-mb`` MB on
``--workers`` cores, next to a bare parse (orjson alone) for scale.

It answers "how far can the gate get without leaving Python", which is what the throughput
issue's targets turn on, one of them measured here: ``Gate.gate_batch`` per row within
1.25× of its floor.

The measurement runs in ``--rounds`` rounds. A round times every piece and every whole
``gate_batch`` below (best of ``--repeat`` passes, each pass calling each of them once,
the order reversed every other round), so that a drift of the machine reaches the floor
and the gate alike. The ratio gate/floor is taken within each round, and the target is
judged on its median over the rounds, printed with its quartiles and range: on a shared
machine one best-of run spreads wider than the target's margin. The table gives each
piece's median over the rounds and its range.

The Arrow columns are timed with the parse that gives their records, as one required
piece ("strict parse, then Arrow columns"): a string orjson decodes from escapes (the
``json.dumps`` layout writes every non-ASCII character as ``\\uXXXX``) has no UTF-8 form
until the first conversion makes one, which CPython then keeps on the string; the gate
pays that once a row, and timing the columns alone over records converted on the pass
before left it out of the floor (3.3 against 8.6 µs a row in that layout, 3.5 against
3.9 in orjson's, which keeps the UTF-8 it read).

The kind's record rules are timed both ways: per row in Python (the reference), and as
the gate runs them, the rules' batch forms over the Arrow columns and then the Python rules
they did not clear; the whole ``gate_batch`` is also timed with the batch forms off.

It also prices keyed lineage (``[lineage] key_env``): the raw line's and the content
fingerprint's HMAC-SHA-256 against their SHA-256, and the whole ``gate_batch`` with a
random key against it without, each ratio taken within a round like the floor's.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import os
import secrets
import statistics
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson
import pyarrow as pa
from harness import LAYOUTS, fastest_each, positive, table, write_export

from pipeline.core.config import CampaignConfig
from pipeline.gate.gate import Gate
from pipeline.gate.reader import LineBatch
from pipeline.kinds import KINDS
from pipeline.kinds.rules import check_record, pending_rules
from pipeline.records.strict_json import parse_fast

KIND = "pairwise-v2"
#: the throughput issue's target (docs/performance.md): ``Gate.gate_batch`` per row
#: within this many times its floor
FLOOR_TARGET = 1.25
WHOLE = "Gate.gate_batch, whole, per row"
PER_ROW = "Gate.gate_batch, rules per row only"
KEYED = "Gate.gate_batch, keyed lineage, per row"


@dataclass(frozen=True)
class Spread:
    """One figure measured once per round, over the rounds."""

    values: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def quartiles(self) -> tuple[float, float]:
        if len(self.values) < 2:
            return self.values[0], self.values[0]
        low, _, high = statistics.quantiles(self.values, n=4, method="inclusive")
        return low, high

    def describe(self) -> str:
        low, high = self.quartiles
        rounds = f"{len(self.values)} round" + ("s" if len(self.values) > 1 else "")
        return (
            f"median of {rounds} (quartiles {low:.2f}–{high:.2f}, "
            f"range {min(self.values):.2f}–{max(self.values):.2f})"
        )


def ratio_over_rounds(numerator: Sequence[float], denominator: Sequence[float]) -> Spread:
    """``numerator / denominator`` taken within each round, where both were timed side by
    side, so that a drift of the machine between rounds cancels; then over the rounds."""
    if not numerator or len(numerator) != len(denominator):
        raise ValueError(
            f"a ratio over rounds needs as many rounds on each side, at least one "
            f"(got {len(numerator)} and {len(denominator)})"
        )
    return Spread(tuple(a / b for a, b in zip(numerator, denominator, strict=True)))


def floor_per_round(
    per_round: Mapping[str, Sequence[float]], required: Sequence[str]
) -> list[float]:
    """The floor of each round: the sum of the required pieces timed in that round."""
    rounds = {len(per_round[name]) for name in required}
    if len(rounds) != 1:
        raise ValueError(f"the required pieces were timed in different numbers of rounds: {rounds}")
    return [sum(per_round[name][i] for name in required) for i in range(rounds.pop())]


def target_line(ratio: Spread, limit: float = FLOOR_TARGET) -> str:
    """The target judged on the median ratio, as the other benchmarks print theirs."""
    verdict = "PASS" if ratio.median <= limit else "FAIL"
    return (
        f"gate_batch / floor = {ratio.median:.3f}×  {ratio.describe()}"
        f"   (target ≤ {limit:g}×)  {verdict}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=8192, help="lines timed")
    parser.add_argument("--keep", type=Path, help="read lines from / keep the export here")
    parser.add_argument("--workers", type=int, default=2, help="cores in the projection")
    parser.add_argument("--project-mb", type=float, default=500.0)
    parser.add_argument("--layout", choices=LAYOUTS, default="orjson", help="the lines' layout")
    parser.add_argument(
        "--rounds", type=positive, default=7, help="rounds; the ratios are their medians"
    )
    parser.add_argument(
        "--repeat", type=positive, default=3, help="passes within a round; each keeps its best"
    )
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

    def arrow(rows: list[dict[str, object]]) -> list[pa.Array]:
        return [pa.array([r.get(name) for r in rows], type=f.type) for name, f in layout.sources]

    required = {
        "SHA-256 of the raw line": lambda: [sha256(x).hexdigest() for x in good],
        "strict parse, then Arrow columns": lambda: arrow([parse_fast(x) for x in good]),
        "fastjsonschema validate": lambda: [validate(r) for r in records],
        "canonical JSON + SHA-256": lambda: [
            sha256(dumps(r, option=sort_keys)).hexdigest() for r in records
        ],
        "content fingerprint (SHA-256)": lambda: [kind.fingerprint(r) for r in records],
    }
    os.environ["ROWGATE_BENCH_LINEAGE_KEY"] = secrets.token_hex(32)
    keyed_gate = Gate(CampaignConfig().override(**{"lineage.key_env": "ROWGATE_BENCH_LINEAGE_KEY"}))
    key = keyed_gate.lineage.key
    names = [name for name, _ in layout.sources]

    def batch_forms() -> list[object]:
        """The rules as the gate runs them: batch forms over the columns, then the Python
        rules they did not clear (the columns built once, as the gate builds them)."""
        pending = pending_rules(KIND, pa.RecordBatch.from_arrays(columns, names=names), ctx)
        assert pending is not None
        return [check_record(KIND, r, ctx, p) for r, p in zip(records, pending, strict=True)]

    columns = arrow(records)
    optional = {
        "  of which the strict parse (parse_fast: orjson + proof)": lambda: [
            parse_fast(x) for x in good
        ],
        "  of which orjson.loads alone": lambda: [loads(x) for x in good],
        "  Arrow columns alone, of records converted before": lambda: arrow(records),
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
    batch = LineBatch(first_line=1, offsets=list(range(n)), lines=good)
    per_row_gate = Gate(CampaignConfig(), batch_rules=False)
    gates: dict[str, Callable[[], object]] = {
        WHOLE: lambda: gate.gate_batch(batch),
        PER_ROW: lambda: per_row_gate.gate_batch(batch),
        KEYED: lambda: keyed_gate.gate_batch(batch),
    }
    for fn in gates.values():  # so that no round pays a gate's first-call set-up
        fn()
    # the whole gate_batch right after the floor's pieces, the rest after them: the two
    # sides of the target's ratio as close in time as a pass allows
    timed = list((required | {WHOLE: gates[WHOLE]} | optional | gates).items())
    per_round: dict[str, list[float]] = {name: [] for name, _ in timed}
    for i in range(args.rounds):
        # every other round the other way round: neither side always runs first
        order = timed if i % 2 == 0 else timed[::-1]
        for name, seconds in fastest_each(dict(order), args.repeat).items():
            per_round[name].append(seconds / n * 1e6)
    floors = floor_per_round(per_round, list(required))
    floor_ratio = ratio_over_rounds(per_round[WHOLE], floors)

    def row(name: str, values: Sequence[float], note: str) -> list[str]:
        median = statistics.median(values)
        return [name, f"{median:.2f}", f"{min(values):.2f}–{max(values):.2f}", note]

    rows = [
        row(name, per_round[name], "required" if name in required else "")
        for name in required | optional
    ]
    rows.append(row("sum of the required pieces (the floor)", floors, ""))
    rows.append(row(WHOLE, per_round[WHOLE], f"{floor_ratio.median:.2f}x floor"))
    for name in (PER_ROW, KEYED):
        ratio = ratio_over_rounds(per_round[name], per_round[WHOLE]).median
        rows.append(row(name, per_round[name], f"{ratio:.3f}x whole"))
    print(
        f"{n:,} valid rows of {mean_bytes:,.0f} B, µs per row: medians of {args.rounds} rounds, "
        f"each timing every piece and gate_batch (best of {args.repeat}, interleaved)"
    )
    print("(the floor and the ratios are taken within each round, then their medians)\n")
    print(table(rows, ["piece", "µs/row", "range", ""]))
    print("\ngate_batch / floor per round: " + " ".join(f"{r:.2f}" for r in floor_ratio.values))
    print(target_line(floor_ratio))

    projected_rows = args.project_mb * 1e6 / (mean_bytes + 1)
    print(
        f"\nprojected onto {args.project_mb:.0f} MB ({projected_rows:,.0f} rows) on {args.workers} cores:"
    )
    for label, values in (
        ("bare orjson.loads", per_round["  of which orjson.loads alone"]),
        ("the floor", floors),
        ("gate_batch today", per_round[WHOLE]),
    ):
        us = statistics.median(values)
        seconds = projected_rows * us / 1e6 / args.workers
        print(f"  {label:<20} {seconds:6.2f} s")


if __name__ == "__main__":
    main()
