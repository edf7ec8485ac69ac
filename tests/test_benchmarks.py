"""The benchmark scripts that need no peer installed still run (they are not timed here)."""

from __future__ import annotations

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
