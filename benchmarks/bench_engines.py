"""The local engine against the Ray engine, on the same inputs, interleaved, in one run.

    python benchmarks/bench_engines.py                  # bundled campaign + ≈ 200 MB export
    python benchmarks/bench_engines.py --size-mb 50     # quicker
    python benchmarks/bench_engines.py --repeat 5       # median of 5 per engine and input

Measured per engine and input: the median wall time and the median peak RSS of the whole
process tree of ``rowgate run`` (for Ray: the driver, the local Ray it starts — GCS,
raylet, agents — and its workers). Runs alternate between the engines, so a busy machine
slows both alike. Needs the ``ray`` extra. The export is generated in a temporary
directory and deleted afterwards.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from harness import Measurement, measure, python, table, write_export

ROOT = Path(__file__).resolve().parent.parent
ENGINES = ("local", "ray")


def run_command(engine: str, config: str, inputs: list[str], out: Path, workers: int) -> list[str]:
    """``rowgate run`` with ``engine``: until the run chooses its engine by ``engine.name``,
    the Ray engine is put where the run builds the local one."""
    code = f"""
import sys
from pathlib import Path
from pipeline.core.config import CampaignConfig, InputSpec, load_campaign
from pipeline.jobs import run as run_module
config = load_campaign(Path({config!r})) if {config!r} else CampaignConfig(
    inputs=tuple(InputSpec(p, "pairwise-v2") for p in {inputs!r}))
config = config.override(**{{"engine.workers": {workers}}})
if {engine!r} == "ray":
    from pipeline.engines.ray import RayEngine
    run_module.LocalEngine = RayEngine
run_module.run(config, Path({str(out)!r}))
"""
    return python(code)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--size-mb", type=float, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rowgate-bench-engines-") as tmp:
        work = Path(tmp)
        export = work / "export.jsonl"
        nbytes, lines = write_export(export, args.size_mb)
        cases = {
            "bundled campaign": (str(ROOT / "data" / "campaign.toml"), []),
            f"pairwise-v2 {nbytes / 1e6:.0f} MB, {lines} lines": ("", [str(export)]),
        }
        found: dict[tuple[str, str], list[Measurement]] = {}
        failed: dict[tuple[str, str], int] = {}
        for number, (case, (config, inputs)) in enumerate(cases.items()):
            for attempt in range(args.repeat):
                for engine in ENGINES:
                    out = work / f"out-{number}-{engine}-{attempt}"
                    command = run_command(engine, config, inputs, out, args.workers)
                    measured = measure(engine, command)
                    if measured.returncode != 0:  # e.g. Ray's start timed out: say so, go on
                        print(f"{case}, {engine}: failed: {measured.error}", file=sys.stderr)
                        failed[(case, engine)] = failed.get((case, engine), 0) + 1
                        continue
                    found.setdefault((case, engine), []).append(measured)
                    print(f"{case}, {engine}: {measured.seconds:.1f} s", file=sys.stderr)
        rows = []
        for (case, engine), runs in found.items():
            wall = statistics.median(m.seconds for m in runs)
            rss = statistics.median(m.peak_rss for m in runs)
            spread = f"{min(m.seconds for m in runs):.1f}-{max(m.seconds for m in runs):.1f}"
            rows.append((case, engine, len(runs), f"{wall:.1f}", spread, f"{rss / 1e6:.0f}"))
        print(f"workers={args.workers}, median of the runs that completed")
        print(table(rows, ("input", "engine", "runs", "wall s", "range s", "peak RSS MB")))
        for (case, engine), count in failed.items():
            print(f"{case}, {engine}: {count} run(s) failed")


if __name__ == "__main__":
    main()
