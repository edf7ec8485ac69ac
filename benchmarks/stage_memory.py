"""What the driver holds while a whole-run stage's decisions are applied to the state.

    python benchmarks/stage_memory.py                         # 4 M and 16 M rows
    python benchmarks/stage_memory.py --rows 1000000 --decided 0.1

For each size, a child process makes a state of that many rows (64 shards, each
shard's lines far apart, as where the gate rejected lines between them) and runs
``run_stages`` over a stage that decides ``--decided`` of its rows, in parts of
65,536 (as dedupe's removed rows and the review stage's decided reviews come), and a
stage after it (so that the state is advanced), and checks that the rows decided, and
they alone, are duplicates in the state after. It samples its own anonymous memory
(``RssAnon``) every 2 ms and prints the peak above the state, the seconds, and the
bytes a decided row and a row of the state. docs/scale-measurements.md ("A stage's
decisions applied as they come"). It measures no target.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from harness import process_rss

SHARDS = 64
PART = 65_536


def child(rows: int, share: float) -> None:
    """Run the stages in this process and print 'peak_bytes seconds decided rows'."""
    from pipeline.core.allocator import apply_parent_allocator, hand_back_large_blocks

    apply_parent_allocator()  # as the command line does, before polars and pyarrow load
    hand_back_large_blocks()
    import numpy as np
    import polars as pl

    from pipeline.decide.context import DISPOSITIONS, run_stages

    per = rows // SHARDS
    state = pl.concat(
        [
            pl.DataFrame({"_shard": np.full(per, s, np.int32), "_shard_line": np.arange(per) * 3})
            for s in range(SHARDS)
        ],
        rechunk=False,  # a chunk a shard, as the state is read
    ).with_columns(_disposition=pl.lit("accepted").cast(DISPOSITIONS))
    picked = np.sort(
        np.random.default_rng(0).permutation(state.height)[: int(state.height * share)]
    )

    class Deciding:
        name = "deciding"

        def decide(self, ctx: Any, kind: str, rows: pl.DataFrame) -> Iterator[pl.DataFrame]:
            duplicate = pl.lit("duplicate").cast(DISPOSITIONS)
            for lo in range(0, len(picked), PART):
                keys = state[picked[lo : lo + PART]].select("_shard", "_shard_line")
                yield keys.with_columns(_disposition=duplicate)

    class After:
        name = "after"

        def decide(self, ctx: Any, kind: str, rows: pl.DataFrame) -> None:
            return None

    class Context:
        def on_stage(self, name: str) -> None:
            pass

    peak, done = [0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], process_rss()[0])
            time.sleep(0.002)

    base = process_rss()[0]
    sampler = threading.Thread(target=sample)
    sampler.start()
    started = time.perf_counter()
    stages: list[Any] = [Deciding(), After()]
    after = run_stages(Context(), "k", stages, state, [], set(), {}, read_after=False,
                       stage_part=lambda i, part: None)  # fmt: skip
    seconds = time.perf_counter() - started
    done.set()
    sampler.join()
    removed = np.flatnonzero((after["_disposition"] == "duplicate").to_numpy())
    if not np.array_equal(removed, picked):
        raise AssertionError("the state after the stage is not the rows it decided")
    print(peak[0] - base, seconds, len(picked), state.height)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="4000000,16000000", help="state sizes, comma-separated")
    parser.add_argument("--decided", type=float, default=0.66, help="share of the rows decided")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(int(args.child[0]), float(args.child[1]))
        return
    print(
        "rows of the state  decided     peak above the state  seconds  bytes a decided row  bytes a row"
    )
    for rows in (int(r) for r in args.rows.split(",")):
        out = subprocess.run(
            [sys.executable, __file__, "--child", str(rows), str(args.decided)],
            check=True, capture_output=True, text=True,
        ).stdout.split()  # fmt: skip
        peak, seconds, decided, rows = int(out[0]), float(out[1]), int(out[2]), int(out[3])
        print(
            f"{rows:>17,}  {decided:>10,}  {peak / 2**20:>17,.0f} MB  {seconds:>7.1f}"
            f"  {peak / max(decided, 1):>19.1f}  {peak / rows:>11.1f}"
        )


if __name__ == "__main__":
    main()
