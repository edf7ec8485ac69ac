"""Throughput of ``rowgate run`` with redaction off and on, side by side, in one run.

    python benchmarks/bench_sanitize.py --mb 64 [--plant 0.05] [--workers 2]

Generates a synthetic pairwise-v2 export of about ``--mb`` megabytes in a temporary
directory (``pipeline.testing.synthetic.export_lines``); ``--plant`` is the share of rows that
get one planted value of every category (``pipeline.testing.synthetic.plant_pii``), so the "on"
run does real redaction work, not only scanning. Each configuration runs ``--repeat``
times; the best wall time is reported (the machine is shared).
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import orjson
from harness import write_export

from pipeline.core.config import CampaignConfig, InputSpec, SanitizeSettings
from pipeline.jobs.run import run
from pipeline.testing.synthetic import plant_pii


def planting(share: float, seed: int = 0) -> Callable[[bytes, int], bytes]:
    """A line transform planting one value of every PII category in ``share`` of rows."""
    rng = random.Random(seed + 1)

    def plant(line: bytes, number: int) -> bytes:
        if rng.random() >= share:
            return line
        record, _ = plant_pii(orjson.loads(line), rng, number)
        return orjson.dumps(record)

    return plant


def measure(config: CampaignConfig, out: Path, repeat: int) -> tuple[float, dict[str, int]]:
    best = float("inf")
    counts: dict[str, int] = {}
    for _ in range(repeat):
        started = time.perf_counter()
        result = run(config, out, force=True)
        best = min(best, time.perf_counter() - started)
        counts = result.manifest["counts"]["by_disposition"]
    return best, counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=32.0, help="export size in MB")
    parser.add_argument("--plant", type=float, default=0.05, help="share of rows with PII")
    parser.add_argument("--workers", type=int, default=None, help="default: available cores")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="rowgate-bench-") as tmp:
        root = Path(tmp)
        export = root / "pairwise.jsonl"
        size, rows = write_export(
            export,
            args.mb,
            size=1,
            defect_rate=0.0,
            duplicate_rate=0.0,
            transform=planting(args.plant),
        )
        base = CampaignConfig(inputs=(InputSpec(str(export), "pairwise-v2"),))
        if args.workers is not None:
            base = base.override(**{"engine.workers": args.workers})
        workers = base.engine.resolved_workers()
        print(
            f"pairwise-v2 export: {size / 1e6:.1f} MB, {rows:,} rows, "
            f"{args.plant:.0%} with planted PII, {workers} worker(s), best of {args.repeat}"
        )
        print(f"{'redaction':<10} {'seconds':>8} {'MB/s':>8} {'rows/s':>10}  dispositions")
        results = {}
        for label, enabled in (("off", False), ("on", True)):
            config = base.override(sanitize=SanitizeSettings(enabled=enabled))
            seconds, counts = measure(config, root / f"out-{label}", args.repeat)
            results[label] = seconds
            print(
                f"{label:<10} {seconds:>8.2f} {size / 1e6 / seconds:>8.1f} "
                f"{rows / seconds:>10,.0f}  {counts}"
            )
        print(f"on/off throughput ratio: {results['off'] / results['on']:.2f}")


if __name__ == "__main__":
    main()
