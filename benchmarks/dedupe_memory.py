"""What ``rowgate dedupe`` holds in the process that runs it, step by step, at two sizes.

    python benchmarks/dedupe_memory.py                      # 250,000 and 1,000,000 rows
    python benchmarks/dedupe_memory.py --rows 20000,80000   # quick
    python benchmarks/dedupe_memory.py --near               # with --near --normalised
    python benchmarks/dedupe_memory.py --copies 0.1         # a tenth of the rows copies
    python benchmarks/dedupe_memory.py --survivor last      # the survivor rule (default first)

For each size, a Parquet dataset of that many rows (four files; a text column of 45
words, ~300 bytes, and an id), ``--copies`` of them (default half) a copy of an earlier
row's text, is deduplicated on its text column by a child process that samples its own
anonymous memory (``RssAnon``) every 2 ms, with the allocators set as the command line
sets them, and reads each step off ``dedupe_dataset``'s ``on_stage`` hook. It prints, per
step, the peak at each size and the growth per row between the sizes: what the process
that runs ``rowgate dedupe`` must be sized for (docs/scale.md, "Memory"). The row keys,
the grouping checks and the near search run on the engine's workers; their memory is not
in these figures.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from harness import StepSampler, process_rss, table

MB = 1 << 20
#: words of the generated texts' vocabulary, and words a text
VOCABULARY = 20_000
WORDS = 45


def write_dataset(root: Path, rows: int, copies: float, seed: int = 5) -> None:
    """Four Parquet files of ``rows`` rows in all: ``q``, a text of :data:`WORDS` words
    (each row's own, or, for ``copies`` of the rows, an earlier row's), and ``id``."""
    import polars as pl  # here: the child sets polars' allocator before polars loads

    rng = np.random.default_rng(seed)
    words = np.array([f"w{i}" for i in range(VOCABULARY)])
    own = max(1, round(rows * (1 - copies)))
    texts = pl.Series(
        "q", [" ".join(words[rng.integers(0, VOCABULARY, WORDS)]) for _ in range(own)]
    )
    source = np.concatenate([np.arange(own), rng.integers(0, own, rows - own)])
    rng.shuffle(source[own // 4 :])  # the copies spread through the files
    frame = pl.DataFrame({"q": texts.gather(source), "id": np.arange(rows)})
    root.mkdir(parents=True)
    for i in range(4):
        part = frame.slice(i * rows // 4, (i + 1) * rows // 4 - i * rows // 4)
        part.write_parquet(root / f"part-{i}.parquet", row_group_size=65_536)


def child(dataset: Path, out: Path, near: bool, survivor: str, result: Path) -> None:
    """Deduplicate ``dataset`` in this process; write each step's peak ``RssAnon``."""
    from pipeline.core.allocator import apply_parent_allocator, hand_back_large_blocks

    apply_parent_allocator()  # as the command line does, before polars and pyarrow load
    hand_back_large_blocks()
    from pipeline.core.config import DedupeSettings
    from pipeline.jobs.dedupe import DatasetInput, dedupe_dataset

    settings = DedupeSettings(near=near, normalised=near, survivor=survivor)
    with StepSampler(lambda: process_rss()[0]) as sampler:
        summary = dedupe_dataset(
            [DatasetInput(str(dataset))], out, settings, text_columns=["q"], on_stage=sampler.step
        ).summary
    peaks: dict[str, int] = {}
    for name, inside in sampler.by_step():
        peaks[name] = max(peaks.get(name, 0), max(inside))
    counts = summary["counts"]
    result.write_text(json.dumps({"rows": counts["rows"], "removed": counts["duplicates"],
                                  "peaks": peaks}))  # fmt: skip


def _measure(rows: int, near: bool, copies: float, survivor: str, tmp: Path) -> dict[str, Any]:
    dataset = tmp / f"dataset-{rows}"
    write_dataset(dataset, rows, copies)
    result = tmp / "result.json"
    command = [sys.executable, __file__, "--child", str(dataset), str(tmp / "out"), str(result)]
    options = ["--survivor", survivor, *(["--near"] if near else [])]
    subprocess.run([*command, *options], check=True)
    shutil.rmtree(tmp / "out")
    shutil.rmtree(dataset)
    measured: dict[str, Any] = json.loads(result.read_text())
    return measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="250000,1000000", help="two sizes, in rows")
    parser.add_argument("--near", action="store_true", help="with --near --normalised")
    parser.add_argument("--copies", type=float, default=0.5, help="share of rows copies")
    parser.add_argument("--survivor", default="first", help="the survivor rule (default first)")
    parser.add_argument("--tmp", type=Path, default=None, help="where the datasets go")
    parser.add_argument("--child", nargs=3, metavar=("DATASET", "OUT", "RESULT"),
                        help=argparse.SUPPRESS)  # fmt: skip
    args = parser.parse_args()
    if args.child:
        dataset, out, result = (Path(p) for p in args.child)
        child(dataset, out, args.near, args.survivor, result)
        return
    sizes = [int(n) for n in args.rows.split(",")]
    if len(sizes) != 2 or sizes[0] >= sizes[1]:
        parser.error("--rows: two sizes, the smaller first")
    with tempfile.TemporaryDirectory(prefix="rowgate-dedupe-memory-", dir=args.tmp) as name:
        small, large = (
            _measure(n, args.near, args.copies, args.survivor, Path(name)) for n in sizes
        )
    grown = large["rows"] - small["rows"]
    a, b = small["peaks"], large["peaks"]
    rows = [
        [step, f"{a[step] / MB:.0f}" if step in a else "", f"{peak / MB:.0f}",
         f"{(peak - a[step]) / grown:.0f}" if step in a else ""]
        for step, peak in b.items()
    ]  # fmt: skip
    mode = ("--near --normalised" if args.near else "exact") + f", survivor {args.survivor}"
    print(
        f"rowgate dedupe ({mode}): {small['rows']:,} and {large['rows']:,} rows, "
        f"{small['removed']:,} and {large['removed']:,} removed; the process's RssAnon"
    )
    header = ["step", f"peak MB, {small['rows']:,}", f"peak MB, {large['rows']:,}", "bytes a row"]
    print(table(rows, header))


if __name__ == "__main__":
    main()
