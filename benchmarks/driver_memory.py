"""What the driver (the process running ``rowgate run``) holds per row, step by step.

    python benchmarks/driver_memory.py                       # 250,000 and 1,000,000 rows
    python benchmarks/driver_memory.py --rows 20000,80000 --shard-mb 4   # quick
    python benchmarks/driver_memory.py --near                # with --near --normalised
    python benchmarks/driver_memory.py --duplicates 0.3      # a retry-heavy export
    python benchmarks/driver_memory.py --copies 0.5          # half the rows dedupe's copies
    python benchmarks/driver_memory.py --copies 0.5 --survivor last   # dedupe keeps the last
    python benchmarks/driver_memory.py --reviews 3           # three reviews an item, scored

For each size, a pairwise-v2 export of that many rows (~1.2 KB each: the scale
benchmark's generator, 3 % defects and 3 % repeats, or ``--duplicates`` of them; with
``--copies``, that share of the lines an earlier line's content under a task id of its
own, which dedupe removes and the replay rule does not see; with ``--reviews``, runs of
that many lines reviews of one item, scored with code-review-v1 and its review policy)
is run
once by a child process that samples its own anonymous memory (``RssAnon``) every 2 ms,
with the allocators set as the command line sets them, and reads each step of the global
phase off the run's progress hooks. It prints, per step, the peak at each size and the
growth per row between the sizes: what a driver must be sized for, beyond what it holds
at any size (docs/scale.md, "Memory"). It then prints the peak of the driver's
file-backed pages (``RssFile``) in the global phase: the staged files it maps, the
state's keys among them, which the kernel evicts and reads again when memory runs short,
and the libraries' code. The global phase runs in the driver; the workers' memory is the
scale benchmark's (``bench_scale.py``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import orjson
from harness import StepSampler, process_rss, table, write_export

#: bytes a row of the generated pairwise-v2 export (size 1), to size it in rows
ROW_BYTES = 1221
GATE = "gate"
MB = 1 << 20
#: the engine's shard size; a run of one shard is gated in the driver itself
SHARD_MB = 64


#: with ``--reviews``: the reviews scored as the bundled rubric campaign scores them
#: (code-review-v1), its review policy applied
RUBRIC_CAMPAIGN = Path(__file__).resolve().parents[1] / "data" / "campaign-pairwise-rubric.toml"


def child(
    export: Path,
    out: Path,
    near: bool,
    shard_mb: float,
    survivor: str,
    result: Path,
    scored: bool = False,
    partitions: int | None = None,
) -> None:
    """Run the export in this process; write each step's peak ``RssAnon`` and the global
    phase's peak ``RssFile`` to ``result``."""
    from pipeline.core.allocator import apply_parent_allocator, hand_back_large_blocks

    apply_parent_allocator()  # as the command line does, before polars and pyarrow load
    hand_back_large_blocks()
    from pipeline.core.config import load_campaign
    from pipeline.jobs.run import RunObserver, run

    campaign = out.parent / "campaign.toml"
    campaign.write_text(
        f'[[inputs]]\npath = "{export}"\nkind = "pairwise-v2"\n\n'
        f"[dedupe]\nnear = {str(near).lower()}\nnormalised = {str(near).lower()}\n"
        f"survivor = {json.dumps(survivor)}\n\n"
        f"[engine]\nshard_bytes = {int(shard_mb * MB)}\n"
        + (f"partitions = {partitions}\n" if partitions else "")
    )
    config = load_campaign(campaign)
    if scored:
        bundled = load_campaign(RUBRIC_CAMPAIGN)
        scoring = {k: replace(s, review_policy="apply") for k, s in bundled.scoring.items()}
        config = replace(config, scoring=scoring, rubrics=bundled.rubrics).validate()
    with StepSampler(process_rss) as sampler:

        def step(name: str) -> None:
            # a step's task count ("candidates (8 partitions)") depends on the size
            sampler.step(re.sub(r" \(\d+ \w+\)$", "", name))

        observer = RunObserver(on_phase=step, on_stage=step)
        manifest = run(config, out, force=True, observer=observer).manifest
    peaks: dict[str, int] = {}
    files = 0  # the global phase's peak RssFile
    for name, inside in sampler.by_step():
        peaks[name] = max(peaks.get(name, 0), max(anon for anon, _ in inside))
        if ": " in name:
            files = max(files, max(file for _, file in inside))
    rows = manifest["conservation"]["lines_read"]
    result.write_text(json.dumps({"rows": rows, "peaks": peaks, "files": files}))


@dataclass
class Measured:
    lines: int
    #: each step's peak RssAnon, in bytes
    peaks: dict[str, int]
    #: the global phase's peak RssFile, in bytes
    files: int


def copying(rate: float) -> Callable[[bytes, int], bytes] | None:
    """A ``write_export`` transform that makes ``rate`` of the lines copies of the last
    line it kept, each under its own task id: exact duplicates for dedupe, in runs of
    ~1 / (1 - rate) rows, that no cross-record rule rejects (a retry repeats its task id)."""
    if not rate:
        return None
    last: dict[str, Any] = {}

    def rewrite(record: dict[str, Any], number: int) -> dict[str, Any] | None:
        if last and (number * 2654435761) % 1000 < rate * 1000:
            return {**last, "task_id": record["task_id"]}
        last.clear()
        last.update(record)
        return None

    return _records(rewrite)


def reviewing(per_item: int) -> Callable[[bytes, int], bytes] | None:
    """A ``write_export`` transform that makes each run of ``per_item`` lines reviews of
    one item: the run's first line's conversation and candidates, each line with its
    own task id and ratings (so some reviews vote against, and the replay rule sees no
    retry), and four in five with the item's preference (the others their own: some
    items contradicted, or disagreeing)."""
    if per_item < 2:
        return None
    item: dict[str, Any] = {}
    shared = ("messages", "response_a", "response_b", "preference", "rationale")

    def rewrite(record: dict[str, Any], number: int) -> dict[str, Any] | None:
        if number % per_item == 0 or not item:
            item.clear()
            item.update({k: record.get(k) for k in shared})
            return None
        agrees = (number * 2654435761) % 5 != 0
        return {**record, **item, **({} if agrees else {"preference": record.get("preference")})}

    return _records(rewrite)


def _records(
    rewrite: Callable[[dict[str, Any], int], dict[str, Any] | None],
) -> Callable[[bytes, int], bytes]:
    """A ``write_export`` transform that rewrites each line's record (``rewrite``'s
    record, or the line as it is where it gives None); a planted defect, or a line that
    is no record with a task id, passes as it is (the gate rejects it)."""

    def transform(line: bytes, number: int) -> bytes:
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            return line
        if not isinstance(record, dict) or "task_id" not in record:
            return line
        changed = rewrite(record, number)
        return line if changed is None else orjson.dumps(changed)

    return transform


def _measure(
    rows: int,
    near: bool,
    shard_mb: float,
    duplicates: float,
    copies: float,
    survivor: str,
    tmp: Path,
    reviews: int = 0,
    partitions: int | None = None,
) -> Measured:
    export = tmp / f"export-{rows}.jsonl"
    megabytes = rows * ROW_BYTES / 1e6
    transform = reviewing(reviews) if reviews else copying(copies)
    write_export(export, megabytes, size=1, duplicate_rate=duplicates, transform=transform)
    result = tmp / "result.json"
    command = [sys.executable, __file__, "--child", str(export), str(tmp / "out"), str(result)]
    options = ["--shard-mb", str(shard_mb), "--survivor", survivor, *(["--near"] if near else [])]
    options += ["--scored"] if reviews else []
    options += ["--partitions", str(partitions)] if partitions else []
    subprocess.run([*command, *options], check=True)
    shutil.rmtree(tmp / "out", ignore_errors=True)
    measured = json.loads(result.read_text())
    return Measured(measured["rows"], measured["peaks"], measured["files"])


def _report(small: Measured, large: Measured, mode: str) -> str:
    """Each step's peak at both sizes and the growth a row between them; then the
    global phase's (its steps are named ``<kind>: <stage>``)."""
    grown = large.lines - small.lines
    rows = []
    for name, b in large.peaks.items():
        a = small.peaks.get(name)
        rows.append([name, "" if a is None else f"{a / MB:.0f}", f"{b / MB:.0f}",
                     "" if a is None else f"{(b - a) / grown:.0f}"])  # fmt: skip
    header = ["step", f"peak MB, {small.lines:,}", f"peak MB, {large.lines:,}", "bytes a row"]
    peak = [max(v for k, v in m.peaks.items() if ": " in k) for m in (small, large)]
    return (
        f"pairwise-v2, {mode}: {small.lines:,} and {large.lines:,} lines; the driver's RssAnon\n"
        f"{table(rows, header)}\n\n"
        f"the global phase's peak: {peak[0] / MB:.0f} and {peak[1] / MB:.0f} MB, "
        f"{(peak[1] - peak[0]) / grown:.0f} bytes a row between the sizes; "
        f"{(peak[1] - large.peaks[GATE]) / MB:.0f} MB above the gate phase's level "
        f"at {large.lines:,} lines\n"
        f"the global phase's file-backed pages (RssFile: the staged files it maps, the "
        f"state's keys among them, and the libraries): peak {small.files / MB:.0f} and "
        f"{large.files / MB:.0f} MB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="250000,1000000", help="two sizes, in rows")
    parser.add_argument("--near", action="store_true", help="with --near --normalised")
    parser.add_argument(
        "--duplicates", type=float, default=0.03, help="the rate of repeated lines (0.03)"
    )
    parser.add_argument(
        "--copies",
        type=float,
        default=0.0,
        help="the share of lines that repeat an earlier line's content under their own task id",
    )
    parser.add_argument("--survivor", default="first", help="dedupe's survivor rule (first)")
    parser.add_argument(
        "--reviews",
        type=int,
        default=0,
        help="runs of this many lines reviews of one item, scored with code-review-v1 and "
        "its review policy (three reviews an item, two accept votes)",
    )
    parser.add_argument("--scored", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--partitions",
        type=int,
        default=None,
        help="engine.partitions: every shuffle's, and a survivor column of text's ranges "
        "(default: from the bytes, one at these sizes)",
    )
    parser.add_argument("--tmp", type=Path, default=None, help="where the exports go")
    parser.add_argument(
        "--shard-mb", type=float, default=SHARD_MB, help="engine.shard_bytes, in MiB (default 64)"
    )
    parser.add_argument(
        "--child", nargs=3, metavar=("EXPORT", "OUT", "RESULT"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.child:
        export, out, result = map(Path, args.child)
        child(
            export,
            out,
            args.near,
            args.shard_mb,
            args.survivor,
            result,
            args.scored,
            args.partitions,
        )
        return
    if not 0 <= args.copies < 1:
        parser.error("--copies: a share in [0, 1)")
    if args.reviews and args.copies:
        parser.error("--reviews and --copies: one or the other")
    sizes = [int(n) for n in args.rows.split(",")]
    least = math.ceil(2 * args.shard_mb * MB / ROW_BYTES)
    if len(sizes) != 2 or not least <= sizes[0] < sizes[1]:
        parser.error(
            f"--rows: two sizes, the smaller first, each of two shards at least ({least:,} rows)"
        )
    load = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="driver-memory-", dir=args.tmp))
    try:
        given = (args.near, args.shard_mb, args.duplicates, args.copies, args.survivor)
        small, large = (_measure(n, *given, tmp, args.reviews, args.partitions) for n in sizes)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    mode = "near+normalised" if args.near else "plain"
    copied = f", {args.copies:.0%} copies" if args.copies else ""
    copied += f", survivor {args.survivor}" if args.survivor != "first" else ""
    copied += f", {args.reviews} reviews an item, scored" if args.reviews else ""
    copied += f", {args.partitions} partitions" if args.partitions else ""
    print(_report(small, large, f"{mode}, {args.duplicates:.0%} repeated lines{copied}"))
    print(f"load average (1, 5, 15 min) before {load}, after {os.getloadavg()}")


if __name__ == "__main__":
    main()
