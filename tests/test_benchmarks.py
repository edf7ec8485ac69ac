"""The benchmark scripts that need no peer installed still run (they are not timed here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _gate_floor(*arguments: str) -> subprocess.CompletedProcess[str]:
    """benchmarks/gate_floor.py on 300 lines, with ``arguments``; it must succeed."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gate_floor.py"), "--lines", "300", *arguments],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done


def test_gate_floor_runs_on_a_small_export() -> None:
    done = _gate_floor()
    assert "sum of the required pieces (the floor)" in done.stdout
    assert "gate_batch today" in done.stdout


def test_gate_floor_runs_on_the_json_dumps_layout(tmp_path: Path) -> None:
    export = tmp_path / "export.jsonl"
    done = _gate_floor("--layout", "json", "--keep", str(export))
    assert "gate_batch today" in done.stdout
    first = export.read_bytes().split(b"\n", 1)[0]
    assert b'": ' in first  # json.dumps' separator after a key


def test_dedupe_near_runs_without_its_peers() -> None:
    """benchmarks/dedupe_near.py with datasketch and datatrove skipped: rowgate's row of
    the table, with pair and cluster accuracies against the planted pairs."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "dedupe_near.py"), "--size-mb", "0.5",
         "--skip-datasketch", "--skip-datatrove"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    header, _rule, *rows = done.stdout.splitlines()[-3:]
    assert "cluster recall" in header
    assert "cluster precision" in header
    assert rows[0].split()[0] == "rowgate"


def test_bench_scale_runs_every_mode_and_size(tmp_path: Path) -> None:
    """bench_scale on a 1 MB export and twice it, local engine: every run succeeds and
    every target is computed (none is n/a). One worker: the steps run in the parent, no
    spawned workers to start."""
    results = tmp_path / "scale.json"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_scale.py"),
            *("--size-mb", "1", "--sizes", "1,2", "--skip-ray", "--workers", "1"),
            *("--tmp", str(tmp_path), "--json", str(results)),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "parent peak RSS MB" in done.stdout
    assert "1× local: near CPU / plain CPU" in done.stdout
    document = json.loads(results.read_text("utf-8"))
    runs = {(r["size"], r["engine"], r["mode"]): r for r in document["runs"]}
    assert set(runs) == {
        (size, "local", mode) for size in (1, 2) for mode in ("plain", "near+normalised")
    }
    for run in runs.values():
        assert run["measurement"]["returncode"] == 0
        assert run["measurement"]["parent_peak_rss"] > 0
        # the CPU of the run (the parent alone, with one worker) is counted
        assert run["measurement"]["cpu_seconds"] > 0
        assert run["lines"] == sum(run["by_disposition"].values())
    # the 2× export is generated at twice the size, not copied (a copy would make half
    # of its lines duplicates): its duplicate share stays that of a generated export
    one, two = runs[(1, "local", "plain")], runs[(2, "local", "plain")]
    assert two["lines"] > 1.5 * one["lines"]
    assert two["by_disposition"]["duplicate"] / two["lines"] < 0.2
    names = [t["name"] for t in document["targets"]]
    assert "1× local: near tree peak RSS" in names
    assert "2×/1× local near+normalised: parent peak RSS" in names
    assert all(t["passed"] is not None for t in document["targets"])
    assert list(tmp_path.iterdir()) == [results]  # its temporary directory is gone
