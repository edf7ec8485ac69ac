"""rowgate's scale targets: a run with and without near and normalised dedupe, on a
generated export and on four times it, per engine, in one run.

    python benchmarks/bench_scale.py                   # ≈ 300 MB and 1.2 GB pairwise-v2 exports
    python benchmarks/bench_scale.py --size-mb 20      # quick
    python benchmarks/bench_scale.py --sizes 1         # the 1× export only (no growth targets)
    python benchmarks/bench_scale.py --skip-ray        # the local engine only
    python benchmarks/bench_scale.py --json out.json   # the results as JSON too
    python benchmarks/bench_scale.py --repeat 3        # each run three times, interleaved

For every size, engine and mode, ``rowgate run`` (``python -m pipeline run``) once:
plain, and with ``--near --normalised``. Measured: wall time, the peak RSS of rowgate's
parent process alone (the driver: where the global phase runs) and of its whole process
tree (for Ray: with the local Ray it starts), the lines read and what became of them, and
the run's phase timings from its manifest. With ``--repeat N`` each run is made N times,
the modes taking turns (plain, near, plain, near, …), and a run's figures are its fastest
wall and CPU time (the harness's rule: other work on the machine only ever adds time)
and its largest peaks (memory: the worst seen); every try's wall is listed beside them.
One try each sits inside this machine's run-to-run spread: the gate's near work has
measured 62.5 and 79.2 CPU seconds on the same 4× export in two sessions. Then the
scale issue's targets, each with the measured value and PASS or FAIL:

* near+normalised wall ≤ 2.0 × the plain wall on the same file (per size and engine);
* process-tree peak RSS ≤ 1 GB at 1× with near dedupe on;
* k× input (4× by default): peak RSS ≤ 1.1 × the 1× figure, wall ≤ 1.1·k × (4.4 × at 4×).

The k× export is generated at k times the size (write_export's size parameter), not by
concatenating the 1× export: copies would all be exact duplicates. Each 20,000-line
block has its own seed, so every size has the same defect and duplicate rates. The Ray
engine runs when ``import ray`` works and ``--skip-ray`` is not given. Exports and
outputs go to a temporary directory under ``--tmp`` and are deleted afterwards. A run
that fails makes the script exit 1; a target that is missed does not.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness import Measurement, measure, positive, table, write_export

MODES = {"plain": [], "near+normalised": ["--near", "--normalised"]}
#: signs a text once, so that numba compiles the near rule's kernels (once an install,
#: ~5–8 s in each gate worker) before any try, not in the first near one
_SIGN_ONCE = (
    "import polars as pl\n"
    "from pipeline.dedupe.minhash import LshParams, signatures\n"
    "signatures(pl.Series(['a b c d e']), LshParams())"
)
#: the issue's targets (docs/scale.md)
NEAR_OVER_PLAIN = 2.0
TREE_RSS_1X = 1e9
MEMORY_GROWTH = 1.1
TIME_GROWTH_PER_SIZE = 1.1


@dataclass
class Run:
    size: int
    engine: str
    mode: str
    measurement: Measurement
    lines: int = 0
    by_disposition: dict[str, int] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    #: the wall time of each try, in the order made (one unless ``--repeat``)
    walls: list[float] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.measurement.returncode == 0


def combined(tries: list[Run]) -> Run:
    """One run's figures from its tries (the same size, engine and mode): a failed try
    stands for them all; else the fastest wall and CPU time, with the fastest try's
    counts and phase timings, and the largest peaks."""
    failed = [t for t in tries if not t.ok]
    best = failed[0] if failed else min(tries, key=lambda t: t.measurement.seconds)
    m = best.measurement
    measurement = Measurement(
        m.name,
        m.seconds,
        max(t.measurement.peak_rss for t in tries),
        m.returncode,
        m.error,
        max(t.measurement.parent_peak_rss for t in tries),
        min(t.measurement.cpu_seconds for t in tries) if not failed else m.cpu_seconds,
    )
    walls = [t.measurement.seconds for t in tries]
    return Run(
        best.size, best.engine, best.mode, measurement, best.lines,
        best.by_disposition, best.timings, walls,
    )  # fmt: skip


@dataclass
class Target:
    name: str
    value: float | None
    limit: float
    unit: str

    @property
    def passed(self) -> bool | None:
        return None if self.value is None else self.value <= self.limit

    def line(self) -> str:
        if self.value is None:
            return f"{self.name}: n/a (a run failed or was not measured)   (target ≤ {self.limit:g}{self.unit})"
        verdict = "PASS" if self.passed else "FAIL"
        return f"{self.name}: {self.value:.2f}{self.unit}   (target ≤ {self.limit:g}{self.unit})  {verdict}"


def ray_works() -> bool:
    """Whether ``import ray`` works in this Python (checked in a child: the benchmark
    itself never loads ray)."""
    done = subprocess.run(
        [sys.executable, "-c", "import ray"], capture_output=True, check=False, timeout=300
    )
    return done.returncode == 0


def run_once(
    export: Path, out: Path, size: int, engine: str, mode: str, workers: int | None
) -> Run:
    command = [sys.executable, "-m", "pipeline", "run", str(export), "--out", str(out)]
    command += ["--quiet", "--force", "--engine", engine, *MODES[mode]]
    if workers:
        command += ["--workers", str(workers)]
    # the children import this tree's pipeline, whatever directory the script runs from
    root = str(Path(__file__).resolve().parent.parent)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
    }
    m = measure(f"{size}× {engine} {mode}", command, env=env)
    run = Run(size, engine, mode, m, walls=[m.seconds])
    if m.returncode == 0:
        manifest = json.loads((out / "manifest.json").read_text("utf-8"))
        run.lines = manifest["counts"]["lines"]
        run.by_disposition = manifest["counts"]["by_disposition"]
        run.timings = manifest["timings"]
    shutil.rmtree(out, ignore_errors=True)
    return run


def targets(runs: list[Run]) -> list[Target]:
    """The issue's targets over ``runs``; a ratio with a failed (or unmeasured) run in it
    is n/a."""
    found = {(r.size, r.engine, r.mode): r for r in runs}

    def ratio(
        top: tuple[int, str, str], bottom: tuple[int, str, str], attribute: str
    ) -> float | None:
        a, b = found.get(top), found.get(bottom)
        if a is None or b is None or not (a.ok and b.ok):
            return None
        denominator = float(getattr(b.measurement, attribute))
        return float(getattr(a.measurement, attribute)) / denominator if denominator else None

    result: list[Target] = []
    sizes = sorted({r.size for r in runs})
    near = "near+normalised"
    for engine in dict.fromkeys(r.engine for r in runs):
        result.extend(
            Target(
                f"{size}× {engine}: near wall / plain wall",
                ratio((size, engine, near), (size, engine, "plain"), "seconds"),
                NEAR_OVER_PLAIN,
                "×",
            )
            for size in sizes
        )
        if 1 not in sizes:
            continue
        one = found[(1, engine, near)]
        result.append(
            Target(
                f"1× {engine}: near tree peak RSS",
                one.measurement.peak_rss / 1e9 if one.ok else None,
                TREE_RSS_1X / 1e9,
                " GB",
            )
        )
        for size in sizes[1:]:
            for mode in MODES:
                big, small = (size, engine, mode), (1, engine, mode)
                prefix = f"{size}×/1× {engine} {mode}"
                result += [
                    Target(f"{prefix}: tree peak RSS", ratio(big, small, "peak_rss"), MEMORY_GROWTH, "×"),
                    Target(f"{prefix}: parent peak RSS", ratio(big, small, "parent_peak_rss"), MEMORY_GROWTH, "×"),
                    Target(f"{prefix}: wall", ratio(big, small, "seconds"), TIME_GROWTH_PER_SIZE * size, "×"),
                ]  # fmt: skip
    return result


def cpu_ratios(runs: list[Run]) -> list[str]:
    """Near CPU over plain CPU per size and engine, beside the wall target: on a machine
    other work loads, the CPU seconds of the two runs compare more steadily than their
    walls (information, not a target)."""
    found = {(r.size, r.engine, r.mode): r for r in runs if r.ok}
    lines = []
    for size, engine, mode in found:
        near, plain = found[size, engine, mode], found.get((size, engine, "plain"))
        if mode == "plain" or plain is None or not plain.measurement.cpu_seconds:
            continue
        ratio = near.measurement.cpu_seconds / plain.measurement.cpu_seconds
        lines.append(f"{size}× {engine}: near CPU / plain CPU: {ratio:.2f}×   (information)")
    return lines


def row(r: Run) -> tuple[object, ...]:
    m = r.measurement
    if not r.ok:
        return (f"{r.size}×", r.engine, r.mode, f"{m.seconds:.1f}", "", "", "", "", "", "", "", "",
                "", f"exit {m.returncode}: {m.error}")  # fmt: skip
    d = r.by_disposition
    return (
        f"{r.size}×",
        r.engine,
        r.mode,
        f"{m.seconds:.1f}",
        f"{m.cpu_seconds:.1f}",
        f"{m.parent_peak_rss / 1e6:,.0f}",
        f"{m.peak_rss / 1e6:,.0f}",
        f"{r.lines:,}",
        f"{d.get('accepted', 0):,}",
        f"{d.get('duplicate', 0):,}",
        f"{r.timings.get('gate_s', 0):.1f}",
        f"{r.timings.get('global_s', 0):.1f}",
        f"{r.timings.get('write_s', 0):.1f}",
        " / ".join(f"{w:.1f}" for w in r.walls),
    )


HEADER = (
    "size", "engine", "mode", "wall s", "CPU s", "parent peak RSS MB", "tree peak RSS MB", "rows",
    "accepted", "duplicate", "gate s", "global s", "write s", "each try's wall s",
)  # fmt: skip


def parse_sizes(text: str) -> list[int]:
    try:
        sizes = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of whole multiples: {text!r}") from None
    if not sizes or sizes[0] < 1:
        raise argparse.ArgumentTypeError(f"sizes are multiples ≥ 1 of --size-mb: {text!r}")
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size-mb", type=float, default=300.0, help="the 1× export's size")
    parser.add_argument(
        "--sizes", type=parse_sizes, default=[1, 4], help="multiples of --size-mb (default 1,4)"
    )
    parser.add_argument("--workers", type=int, default=None, help="default: available cores")
    parser.add_argument(
        "--repeat", type=positive, default=1, help="tries of each run, interleaved (default 1)"
    )
    parser.add_argument("--skip-ray", action="store_true", help="the local engine only")
    parser.add_argument("--tmp", type=Path, default=None, help="where the temporary directory goes")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()

    engines = ["local"]
    if not args.skip_ray:
        if ray_works():
            engines.append("ray")
        else:
            print("ray is not installed here: the local engine only")
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", _SIGN_ONCE], check=True, timeout=600)
    print(
        f"MinHash kernels compiled or loaded from numba's cache in "
        f"{time.perf_counter() - started:.1f} s: no try below compiles them",
        flush=True,
    )
    load_before = os.getloadavg()
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="rowgate-bench-scale-", dir=args.tmp) as tmp_name:
        tmp = Path(tmp_name)
        for size in args.sizes:
            export = tmp / f"{size}x.jsonl"
            started = time.perf_counter()
            nbytes, lines = write_export(export, size * args.size_mb)
            print(
                f"{size}× export: {nbytes / 1e6:,.0f} MB, {lines:,} lines "
                f"(generated in {time.perf_counter() - started:.0f} s)",
                flush=True,
            )
            tries: dict[tuple[str, str], list[Run]] = {}
            for _ in range(args.repeat):
                for engine in engines:
                    for mode in MODES:
                        made = run_once(export, tmp / "out", size, engine, mode, args.workers)
                        tries.setdefault((engine, mode), []).append(made)
            runs.extend(combined(each) for each in tries.values())
            export.unlink()
    load_after = os.getloadavg()

    print()
    print(table([row(r) for r in runs], HEADER))
    print()
    checks = targets(runs)
    for target in checks:
        print(target.line())
    for line in cpu_ratios(runs):
        print(line)
    print()
    print(
        f"{os.cpu_count()} CPUs; load average (1, 5, 15 min) "
        f"before {', '.join(f'{x:.2f}' for x in load_before)}, "
        f"after {', '.join(f'{x:.2f}' for x in load_after)}"
    )
    if args.json is not None:
        document = {
            "size_mb": args.size_mb,
            "sizes": args.sizes,
            "repeat": args.repeat,
            "cpus": os.cpu_count(),
            "load_before": load_before,
            "load_after": load_after,
            "runs": [asdict(r) for r in runs],
            "targets": [{**asdict(t), "passed": t.passed} for t in checks],
        }
        args.json.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", "utf-8")
    if not all(r.ok for r in runs):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
