"""The bundled samples in data/ are what data/generate.py writes, byte for byte.

A rule added to the generators (``semantic.pairwise-v2.aggregate_size``) once left the
samples without its violation: the README's "one line of every defect class" was no
longer true, and regenerating them changed two files nobody had asked to change."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def test_the_bundled_samples_are_what_the_generator_writes() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "data" / "generate.py"), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr


def test_the_generator_writes_nothing_when_asked_for_help() -> None:
    """``generate.py --help`` rewrote data/ (it read no argument)."""
    before = {p.name: p.stat().st_mtime_ns for p in (ROOT / "data").iterdir() if p.is_file()}
    done = subprocess.run(
        [sys.executable, str(ROOT / "data" / "generate.py"), "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0
    assert "--check" in done.stdout
    after = {p.name: p.stat().st_mtime_ns for p in (ROOT / "data").iterdir() if p.is_file()}
    assert after == before
