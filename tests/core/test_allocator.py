"""glibc's mapping threshold: the parent hands freed arrays back to the system."""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

import pytest

from pipeline.core import allocator
from tests.conftest import ROOT, python_script

glibc = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
    reason="glibc's malloc only",
)

# A 24 MB array mapped and freed raises glibc's threshold above its size; the next one
# then comes from the heap, and a small allocation after it keeps the freed middle
# resident. Prints the kB still resident after the second array is freed.
_RETAINED = """
import numpy as np

def anon():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1])

def retained():
    first = np.ones(3_000_000)
    del first
    before = anon()
    second = np.ones(3_000_000)
    pin = np.ones(1000)
    del second
    return anon() - before
"""

_DIRECT = (
    _RETAINED
    + """
import sys
from pipeline.core.allocator import hand_back_large_blocks
if sys.argv[1] == "held":
    print(hand_back_large_blocks())
print(retained())
"""
)


def _environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"}


@glibc
def test_a_freed_array_is_handed_back_once_the_threshold_is_held() -> None:
    """Without the call, glibc keeps a freed 24 MB array resident (its threshold raised
    by the first array); with it, the array is unmapped when freed."""
    default = python_script(_DIRECT, "default", env=_environment())
    held = python_script(_DIRECT, "held", env=_environment())
    assert default.returncode == 0, default.stderr
    assert held.returncode == 0, held.stderr
    assert int(default.stdout) > 20_000  # kB: the check can fail
    was_set, retained = held.stdout.split()
    assert was_set == "True"
    assert int(retained) < 1_000


_COMMAND = (
    _RETAINED
    + """
import atexit, sys

atexit.register(lambda: print("retained:", retained(), file=sys.stderr))
sys.argv = ["rowgate", "run", *sys.argv[1:]]
from pipeline.entry import main
main()
"""
)


@glibc
def test_the_command_holds_the_threshold(tmp_path: Path) -> None:
    """The command line holds it in the parent before any command runs."""
    math = ROOT / "data" / "math-reasoning-v1.jsonl"
    arguments = [str(math), "--kind", "math-reasoning-v1", "--out", str(tmp_path / "o"), "-q"]
    done = python_script(_COMMAND, *arguments, env=_environment(), timeout=300)
    assert done.returncode == 0, done.stderr
    assert int(done.stderr.splitlines()[-1].removeprefix("retained: ")) < 1_000


def test_a_threshold_the_user_gave_glibc_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    assert allocator.hand_back_large_blocks() is False


def test_nothing_changes_off_linux(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    monkeypatch.setattr(allocator.sys, "platform", "darwin")
    assert allocator.hand_back_large_blocks() is False


# kB an 8 MB array leaves resident once freed: held, none (it is unmapped); while tasks
# run in this process, all of it (kept in the heap for the next task to take); held again
# after, none. Prints whether the threshold was held, then the three.
_TASKS = (
    _RETAINED
    + """
from pipeline.core import allocator

def kept():
    before = anon()
    block = np.ones(1_000_000)
    del block
    return anon() - before

print(allocator.hand_back_large_blocks())
held = kept()
with allocator.tasks_in_this_process():
    with allocator.tasks_in_this_process():  # a task running tasks of its own
        pass
    in_tasks = kept()
print(held, in_tasks, kept())
"""
)


@glibc
def test_tasks_run_in_the_parent_keep_freed_blocks_for_the_next() -> None:
    """While the parent runs tasks itself, a freed array stays in the heap for the next
    to take instead of being unmapped and faulted in again (the check can fail: held,
    it is unmapped), also after a nested block ended; after, the threshold is held
    again."""
    done = python_script(_TASKS, env=_environment())
    assert done.returncode == 0, done.stderr
    was_set, counts = done.stdout.splitlines()
    held, in_tasks, after = map(int, counts.split())
    assert was_set == "True"
    assert held < 1_000
    assert in_tasks > 7_000
    assert after < 1_000


def test_the_local_engine_runs_tasks_in_the_parent_under_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With one worker the engine runs each task inside ``tasks_in_this_process``."""
    import contextlib
    from collections.abc import Iterator

    from pipeline.engines import local
    from pipeline.engines.base import Step

    inside: list[bool] = [False]

    @contextlib.contextmanager
    def recording() -> Iterator[None]:
        inside[0] = True
        try:
            yield
        finally:
            inside[0] = False

    def run(state: None, task: int, progress: object) -> bool:
        return inside[0]

    monkeypatch.setattr(local, "tasks_in_this_process", recording)
    with local.LocalEngine(1) as engine:
        assert engine.map(Step(lambda: None, (), run), [1, 2]) == [True, True]
    assert inside == [False]
