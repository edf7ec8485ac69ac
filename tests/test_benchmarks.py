"""The benchmark scripts that need no peer installed still run (they are not timed here)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_gate_floor_runs_on_a_small_export() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gate_floor.py"), "--lines", "300"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "sum of the required pieces (the floor)" in done.stdout
    assert "gate_batch today" in done.stdout
