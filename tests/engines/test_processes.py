"""A run's worker processes: how many start, and that none outlives the command, whether
the command is killed with SIGKILL or stopped with SIGTERM in the middle of the gate."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pipeline.testing.synthetic import export_lines
from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="finds workers in /proc")

#: A bound for "soon": the workers die within milliseconds; a loaded machine may be slow.
_PATIENCE = 30.0


def _state(pid: int) -> str | None:
    """The process's state letter, ``None`` once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return None


def _gone(pid: int) -> bool:
    return _state(pid) in (None, "Z", "X")  # a zombie has exited


def _workers(parent: int) -> set[int]:
    """The pool workers ``parent`` has running (not its resource tracker)."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            if ppid != parent:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                if b"spawn_main" in fh.read():
                    found.add(int(entry))
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            continue
    return found


def _wait(condition: Callable[[], object], seconds: float = _PATIENCE) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return bool(condition())


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """~24 MB of pairwise lines: many 1 MB shards, seconds of gating for two workers."""
    lines = b"".join(line + b"\n" for line in export_lines("pairwise-v2", 400, seed=5, size=3))
    path = tmp_path_factory.mktemp("big") / "big.jsonl"
    with open(path, "wb") as fh:
        for _ in range(-(-24_000_000 // len(lines))):
            fh.write(lines)
    return path


@contextlib.contextmanager
def _run(*arguments: str, stderr: Path | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """``rowgate run`` in its own session; whatever it leaves running is killed after.
    Its stderr goes to a file: orphaned workers would hold a pipe open forever."""
    with open(stderr or os.devnull, "wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pipeline", "run", "--quiet", *arguments],
            cwd=ROOT,
            start_new_session=True,
            stderr=sink,
        )
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # orphans of a failed test
        proc.wait()


def _mid_gate(proc: subprocess.Popen[bytes], tmp_path: Path) -> tuple[set[int], Path]:
    """The run's two workers and its temporary directory, once both work and the first
    shard's rows are staged."""

    def gating() -> bool:
        staged = tmp_path.glob(".out.rowgate-tmp-*/_staging/*/*.arrow")
        return any(staged) and len(_workers(proc.pid)) == 2

    assert _wait(lambda: gating() or proc.poll() is not None)
    assert proc.poll() is None, "the run ended before the test could stop it"
    [tmp] = tmp_path.glob(".out.rowgate-tmp-*")
    return _workers(proc.pid), tmp


def _size(directory: Path) -> int:
    total = 0
    for path in directory.rglob("*"):
        with contextlib.suppress(FileNotFoundError):
            total += path.stat().st_size
    return total


def _arguments(big: Path, tmp_path: Path) -> list[str]:
    config = tmp_path / "engine.toml"
    config.write_text("[engine]\nshard_bytes = 1048576\n")
    out = tmp_path / "out"
    return [str(big), "--kind", "pairwise-v2", "--config", str(config), "--out", str(out)]


def test_kill_9_of_the_parent_takes_its_workers(big: Path, tmp_path: Path) -> None:
    """kill -9 mid-gate: the workers kept gating into the temporary directory (103 → 298
    MB), then blocked forever on a pipe. Now they die with the parent and nothing writes
    there any more; the next run to the same OUT removes the directory."""
    with _run(*_arguments(big, tmp_path), "--workers", "2") as proc:
        workers, tmp = _mid_gate(proc, tmp_path)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert _wait(lambda: all(_gone(pid) for pid in workers))
        size = _size(tmp)
        time.sleep(0.5)
        assert _size(tmp) == size
    assert not (tmp_path / "out").exists()


def test_sigterm_cleans_up_like_ctrl_c(big: Path, tmp_path: Path) -> None:
    """SIGTERM mid-gate killed the parent outright: workers orphaned, the temporary
    directory (staging, spill files) left behind. Now the command stops its workers,
    removes the directory, says so in one line (no traceback) and exits 143."""
    log = tmp_path / "stderr"
    with _run(*_arguments(big, tmp_path), "--workers", "2", stderr=log) as proc:
        workers, _ = _mid_gate(proc, tmp_path)
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=_PATIENCE) == 143
        assert all(_gone(pid) for pid in workers)
    stderr = log.read_text()
    assert "terminated" in stderr
    assert "Traceback" not in stderr
    assert not list(tmp_path.glob(".out.rowgate-tmp-*"))
    assert not (tmp_path / "out").exists()


def test_more_workers_than_shards_start_no_more_than_the_shards(tmp_path: Path) -> None:
    """``--workers 30`` on a one-shard export started 30 processes (1.95 GB)."""
    small = tmp_path / "small.jsonl"
    small.write_bytes(b"".join(line + b"\n" for line in export_lines("pairwise-v2", 60, seed=2)))
    seen: set[int] = set()
    with _run(
        str(small), "--kind", "pairwise-v2", "--out", str(tmp_path / "out"), "--workers", "6"
    ) as proc:
        while proc.poll() is None:
            seen |= _workers(proc.pid)
            time.sleep(0.01)
        assert proc.returncode == 0
    assert len(seen) == 1
