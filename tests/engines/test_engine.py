"""The local engine: results in task order, states built once per worker, early start."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.core.allocator import ALLOCATOR_VARIABLE, RELEASE_AT_ONCE, worker_allocator
from pipeline.engines import LocalEngine, Progress, Step, local


def _init_logged(log: str, fail: bool) -> str:
    """A step state that leaves one line in ``log`` per build (per worker process)."""
    with open(log, "a") as fh:
        fh.write(f"{os.getpid()}\n")
    if fail:
        raise ValueError("this state cannot be built")
    return f"state-of-{os.getpid()}"


def _run_square(state: str, task: int, progress: Progress) -> tuple[int, str]:
    return task * task, state


def _builds(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


@pytest.mark.parametrize("workers", [1, 2])
def test_results_come_back_in_task_order(tmp_path: Path, workers: int) -> None:
    step = Step(_init_logged, (str(tmp_path / "log"), False), _run_square)
    with LocalEngine(workers) as engine:
        results = engine.map(step, list(range(12)), cost=lambda task: task % 5)
    assert [square for square, _ in results] == [n * n for n in range(12)]
    # one state per worker process, reused for every later task of the step
    assert len(_builds(tmp_path / "log")) == len({state for _, state in results}) <= workers


def test_start_builds_warm_states_before_any_task(tmp_path: Path) -> None:
    log = tmp_path / "log"
    step = Step(_init_logged, (str(log), False), _run_square)
    with LocalEngine(2) as engine:
        engine.start(step, tasks=6)
        deadline = time.monotonic() + 60
        while len(_builds(log)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(set(_builds(log))) == 2  # both workers built it, before any map
        results = engine.map(step, list(range(6)))
    assert len(_builds(log)) == 2  # tasks reused the warm states
    assert {state for _, state in results} <= {f"state-of-{pid}" for pid in _builds(log)}


def test_a_warm_state_that_fails_is_raised_by_the_first_task(tmp_path: Path) -> None:
    step = Step(_init_logged, (str(tmp_path / "log"), True), _run_square)
    with LocalEngine(2) as engine:
        engine.start(step)
        with pytest.raises(ValueError, match="cannot be built"):
            engine.map(step, [1, 2, 3])


def _init_tag(tag: str) -> str:
    return tag


def _run_tagged(state: str, task: int, progress: Progress) -> str:
    return state


def test_a_step_with_other_args_gets_its_own_state() -> None:
    """One pool serves steps that share functions but not arguments (the scoring stage
    maps one step per kind): a worker must not reuse the state of the earlier args."""
    with LocalEngine(2) as engine:
        first = engine.map(Step(_init_tag, ("A",), _run_tagged), list(range(6)))
        second = engine.map(Step(_init_tag, ("B",), _run_tagged), list(range(6)))
        again = engine.map(Step(_init_tag, ("A",), _run_tagged), list(range(6)))
    assert (first, second, again) == (["A"] * 6, ["B"] * 6, ["A"] * 6)


def _init_atexit(marker: str) -> None:
    """Leave ``marker`` behind when the interpreter finalizes this process."""
    import atexit

    atexit.register(Path(marker).touch)


def _run_reporting(state: None, task: int, progress: Progress) -> int:
    progress(task, 1)
    return task


def test_workers_leave_without_the_interpreters_finalization(tmp_path: Path) -> None:
    """A worker's interpreter finalization (~0.3 s with pyarrow loaded) was paid by every
    run's end, where the pool's shutdown waits for its workers: they now leave as
    ``fork``'s children do, after flushing what they owe the parent (results, progress)."""
    marker = tmp_path / "finalized"
    reported: list[tuple[int, int]] = []
    with LocalEngine(2) as engine:
        step = Step(_init_atexit, (str(marker),), _run_reporting)
        results = engine.map(step, list(range(8)), lambda b, n: reported.append((b, n)))
    assert results == list(range(8))
    assert sorted(reported) == [(task, 1) for task in range(8)]  # every report arrived
    assert not marker.exists()


#: blocks a fragmenting task leaves alive, as gating leaves a few objects among many freed
_KEPT: list[bytes] = []


def _rss_anon() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no RssAnon in /proc/self/status")


def _init_nothing() -> None:
    return None


def _fragment(state: None, task: int, progress: Progress) -> int:
    """Free ~60 MB of 2 KB blocks with one block in 32 kept alive among them: a heap the
    C allocator cannot shrink by itself. Returns the resident memory it leaves."""
    blocks = [bytes(2048) for _ in range(32_000)]
    _KEPT.extend(blocks[::32])
    del blocks
    return _rss_anon()


@pytest.mark.skipif(
    not os.path.exists("/proc/self/status") or local._LIBC is None,
    reason="reads Linux /proc; needs glibc's malloc_trim",
)
def test_memory_a_task_freed_is_handed_back() -> None:
    """Idle workers kept what gating had freed (~140 MB each) through the global phase;
    the engine releases it after every task."""
    with LocalEngine(1) as engine:  # the inline path
        [left] = engine.map(Step(_init_nothing, (), _fragment), [0])
    assert left - _rss_anon() > 30_000_000
    # what a worker process runs for each task, called here to see its memory
    left, _ = local._worker_run(Step(_init_nothing, (), _fragment), 0, 1)
    assert left - _rss_anon() > 30_000_000
    _KEPT.clear()


def _arrow_pool(state: None, task: int, progress: Progress) -> tuple[str, str | None]:
    import pyarrow

    return pyarrow.default_memory_pool().backend_name, os.environ.get("ARROW_DEFAULT_MEMORY_POOL")


def _die(state: None, task: int, progress: Progress) -> None:
    os._exit(3)


@pytest.mark.slow
def test_workers_allocate_from_a_pool_that_returns_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers get Arrow's jemalloc pool (it returns freed pages at once; pyarrow's
    default here, mimalloc, kept ~100 MB per writing worker), this process's environment
    is left as it was, and a pool the user chose is kept."""
    import pyarrow

    if "jemalloc" not in pyarrow.supported_memory_backends():
        pytest.skip("this pyarrow has no jemalloc")
    monkeypatch.delenv("ARROW_DEFAULT_MEMORY_POOL", raising=False)
    with LocalEngine(2) as engine:
        pools = engine.map(Step(_init_nothing, (), _arrow_pool), [0, 1])
    assert pools == [("jemalloc", "jemalloc")] * 2
    assert "ARROW_DEFAULT_MEMORY_POOL" not in os.environ
    # a worker that dies breaks the pool; the engine's next map replaces it, and close()
    # still restores this process's environment
    with LocalEngine(2) as engine:
        with pytest.raises(local.EngineError, match="died"):
            engine.map(Step(_init_nothing, (), _die), [0, 1])
        pools = engine.map(Step(_init_nothing, (), _arrow_pool), [0, 1])
    assert pools == [("jemalloc", "jemalloc")] * 2
    assert "ARROW_DEFAULT_MEMORY_POOL" not in os.environ
    monkeypatch.setenv("ARROW_DEFAULT_MEMORY_POOL", "system")
    with LocalEngine(2) as engine:
        pools = engine.map(Step(_init_nothing, (), _arrow_pool), [0, 1])
    assert pools == [("system", "system")] * 2
    assert os.environ["ARROW_DEFAULT_MEMORY_POOL"] == "system"


def _polars_allocator(state: None, task: int, progress: Progress) -> str | None:
    return os.environ.get(ALLOCATOR_VARIABLE)


@pytest.mark.slow
def test_workers_keep_jemallocs_defaults_for_polars_and_the_parent_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The parent's polars allocator hands memory back at once (pipeline.core.allocator);
    the workers get jemalloc's defaults, set in each worker as it starts: set through this
    process's environment while they started, it was what a parent that had not
    allocated yet read for itself."""
    monkeypatch.setenv(ALLOCATOR_VARIABLE, RELEASE_AT_ONCE)  # as the command line sets it
    with LocalEngine(2) as engine:
        assert os.environ[ALLOCATOR_VARIABLE] == RELEASE_AT_ONCE
        found = engine.map(Step(_init_nothing, (), _polars_allocator), [0, 1])
        assert os.environ[ALLOCATOR_VARIABLE] == RELEASE_AT_ONCE
    assert found == [worker_allocator()[ALLOCATOR_VARIABLE]] * 2


def _run_marking(state: str, task: tuple[str, int], progress: Progress) -> int:
    """Leave ``<dir>/started-<n>``, take a moment, then leave ``<dir>/done-<n>``."""
    directory, n = task
    Path(directory, f"started-{n}").touch()
    time.sleep(0.3)
    Path(directory, f"done-{n}").touch()
    return n


def _wait_for(path: Path, seconds: float = 20) -> bool:
    deadline = time.monotonic() + seconds
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return path.exists()


def test_tasks_are_submitted_as_a_producer_yields_them(tmp_path: Path) -> None:
    """Without ``cost``, a task runs while the producer is still working on the next
    (a compressed input being cut into shards): map does not read the producer first."""
    seen_running = []

    def produce() -> Iterator[tuple[str, int]]:
        for n in range(3):
            yield str(tmp_path), n
            seen_running.append(_wait_for(tmp_path / f"started-{n}"))
            if not seen_running[-1]:
                return  # map waits for the producer: stop, so the test fails at once

    step = Step(_init_logged, (str(tmp_path / "log"), False), _run_marking)
    with LocalEngine(2) as engine:
        assert engine.map(step, produce()) == [0, 1, 2]
    assert seen_running == [True, True, True]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_failing_producer_lets_running_tasks_finish_first(tmp_path: Path, workers: int) -> None:
    """The error is raised only once no task runs: a step writing into the caller's
    directory must not outlive map (the run then removes that directory). With one
    worker the task runs inline, so this checks only that the error comes through."""

    def produce() -> Iterator[tuple[str, int]]:
        yield str(tmp_path), 0
        assert _wait_for(tmp_path / "started-0")
        raise ValueError("corrupt stream")

    step = Step(_init_logged, (str(tmp_path / "log"), False), _run_marking)
    with LocalEngine(workers) as engine:
        with pytest.raises(ValueError, match="corrupt stream"):
            engine.map(step, produce())
        assert (tmp_path / "done-0").exists()  # before the pool is shut down


def _run_failing_first(state: str, task: tuple[str, int], progress: Progress) -> int:
    if task[1] == 0:
        raise ValueError("task 0 fails")
    return task[1]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_failed_task_stops_and_closes_the_producer(tmp_path: Path, workers: int) -> None:
    """After a task fails, map reads no more tasks (the producer may be decompressing a
    large stream for nothing) and closes it, so that it releases its files."""
    drawn = []
    closed = []

    def produce() -> Iterator[tuple[str, int]]:
        try:
            for n in range(600):  # up to 30 s: a slow start of the workers still passes
                drawn.append(n)
                yield str(tmp_path), n
                time.sleep(0.05)
        finally:
            closed.append(True)

    step = Step(_init_logged, (str(tmp_path / "log"), False), _run_failing_first)
    with LocalEngine(workers) as engine, pytest.raises(ValueError, match="task 0 fails"):
        engine.map(step, produce())
    assert len(drawn) < 600
    assert closed == [True]


def test_no_more_workers_start_than_there_are_tasks(tmp_path: Path) -> None:
    """``--workers 30`` on a one-shard export started 30 processes (1.95 GB) for one
    task: start() starts as many workers as the caller says tasks will come (one when it
    cannot say), and a map starts no more than it was given tasks."""
    for start in ({"tasks": 1}, {}):
        log = tmp_path / f"log-{len(start)}"
        step = Step(_init_logged, (str(log), False), _run_square)
        with LocalEngine(4) as engine:
            engine.start(step, **start)
            assert engine.map(step, [3]) == [(9, f"state-of-{_builds(log)[0]}")]
        # close() waits for every started worker, and each built the warm state first
        assert len(_builds(log)) == 1
    log = tmp_path / "log-map"
    with LocalEngine(6) as engine:
        engine.map(Step(_init_logged, (str(log), False), _run_square), [1, 2])
    assert len(_builds(log)) <= 2


def _run_until_killed(state: str, task: tuple[str, int], progress: Progress) -> int:
    """Leave ``<dir>/started-<n>`` holding this worker's pid, then work for a long while."""
    directory, n = task
    Path(directory, f"started-{n}").write_text(str(os.getpid()))
    time.sleep(30)
    Path(directory, f"done-{n}").touch()
    return n


def _gone(pid: int) -> bool:
    """The process has exited (a zombie not yet reaped counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
def test_an_interruption_kills_the_running_tasks(tmp_path: Path) -> None:
    """Ctrl-C or SIGTERM (anything not an ``Exception``) must not wait for running tasks:
    the run removes its temporary directory next, and a task still writing there would
    leave it behind. The workers are gone when the interruption leaves map."""

    def produce() -> Iterator[tuple[str, int]]:
        yield str(tmp_path), 0
        assert _wait_for(tmp_path / "started-0", 60)
        raise KeyboardInterrupt

    step = Step(_init_logged, (str(tmp_path / "log"), False), _run_until_killed)
    with LocalEngine(2) as engine, pytest.raises(KeyboardInterrupt):
        engine.map(step, produce())
    assert _gone(int((tmp_path / "started-0").read_text()))
    assert not (tmp_path / "done-0").exists()


def _pid(state: None, task: int, progress: Progress) -> int:
    time.sleep(0.2)  # long enough for the other worker to take the next task
    return os.getpid()


def test_workers_outlive_the_thread_that_started_them() -> None:
    """Linux's parent-death signal fires when the *thread* that forked a process ends; the
    pool forks workers in whichever thread submits. Workers a short-lived thread started
    must keep serving the engine after that thread has ended."""
    with LocalEngine(2) as engine:
        first: list[int] = []
        thread = threading.Thread(
            target=lambda: first.extend(engine.map(Step(_init_nothing, (), _pid), [0, 1]))
        )
        thread.start()
        thread.join()
        time.sleep(0.5)  # a signal sent at the thread's end would have landed by now
        again = engine.map(Step(_init_nothing, (), _pid), [0, 1, 2, 3])
    assert len(set(first)) == 2
    assert set(again) == set(first)


_ORPHAN_SCRIPT = """
import sys, threading, time
from pipeline.engines import LocalEngine, Step
from tests.engines.test_engine import _init_nothing, _pid_then_sleep

engine = LocalEngine(2)
if sys.argv[1] == "thread":  # forked by a thread: no parent-death signal, the watchdog
    # joined before the map: a start and a map at once from two threads both set up the
    # pool (LocalEngine's docstring), and one worker then ran both tasks, a minute apart
    step = Step(_init_nothing, (), _pid_then_sleep)
    starter = threading.Thread(target=engine.start, args=(step,), kwargs={"tasks": 2})
    starter.start()
    starter.join()
engine.map(Step(_init_nothing, (), _pid_then_sleep), [0, 1])
"""


def _pid_then_sleep(state: None, task: int, progress: Progress) -> int:
    # one write: print() writes the number and the newline apart, and with an unbuffered
    # stdout (PYTHONUNBUFFERED) the two workers' pieces interleaved on the pipe
    sys.stdout.write(f"{os.getpid()}\n")
    sys.stdout.flush()
    time.sleep(60)
    return task


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
@pytest.mark.parametrize("forked_by", ["main", "thread"])
def test_workers_die_with_a_killed_parent(tmp_path: Path, forked_by: str) -> None:
    """kill -9 of the parent: its workers kept gating, then blocked forever on a pipe.
    Now each dies with it (Linux's parent-death signal; a watchdog thread everywhere,
    the only guard of a worker a thread other than the main one started)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _ORPHAN_SCRIPT, forked_by],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.stdout is not None
    try:
        workers = {int(proc.stdout.readline()) for _ in range(2)}
        assert len(workers) == 2  # a task each, both asleep
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 30
        while not all(_gone(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(_gone(pid) for pid in workers)
    finally:
        proc.stdout.close()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the orphans of a failed test


def _run_reporting_late(state: None, task: int, progress: Progress) -> int:
    for _ in range(50):
        progress(task, 1)
    return task


def test_every_progress_report_is_counted_in_its_own_map(monkeypatch: pytest.MonkeyPatch) -> None:
    """A map's reports travel apart from its results: the map waits for every one its
    tasks sent, so none of them is counted in the next map's progress. (The wait's bound,
    for a worker killed before its reports left, is lifted: a loaded machine can hold a
    worker's sending thread back for seconds.)"""
    monkeypatch.setattr(local, "_REPORTS_WAIT_S", 3600.0)
    with LocalEngine(2) as engine:
        for round_ in range(5):
            reported: list[tuple[int, int]] = []
            step = Step(_init_nothing, (), _run_reporting_late)
            tasks = [round_ * 10 + i for i in range(6)]
            engine.map(step, tasks, lambda b, n, seen=reported: seen.append((b, n)))
            assert sorted(reported) == sorted((t, 1) for t in tasks for _ in range(50))


def _run_failing_or_reporting(state: None, task: int, progress: Progress) -> int:
    if task == 0:
        time.sleep(0.2)
        raise ValueError("task 0 fails")
    for _ in range(2000):
        progress(task, 1)
    return task


def test_a_failed_maps_late_reports_reach_no_callback() -> None:
    """Once a map raised, reports its other tasks still send are dropped: none reaches
    its callback after it raised, nor the next map's."""
    reported: list[tuple[int, int]] = []
    with LocalEngine(2) as engine:
        step = Step(_init_nothing, (), _run_failing_or_reporting)
        with pytest.raises(ValueError, match="task 0 fails"):
            engine.map(step, [0, 1, 2, 3], lambda b, n: reported.append((b, n)))
        at_raise = len(reported)
        later: list[tuple[int, int]] = []
        engine.map(Step(_init_nothing, (), _run_reporting), [7], lambda b, n: later.append((b, n)))
        time.sleep(0.5)
    assert len(reported) == at_raise
    assert later == [(7, 1)]


def test_a_progress_callback_that_raises_fails_its_map_and_holds_no_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A callback's error is raised by its map once the tasks are done; the reports keep
    flowing, so the next map neither waits for them nor loses its own."""
    monkeypatch.setattr(local, "_REPORTS_WAIT_S", 3600.0)

    def fails(nbytes: int, nlines: int) -> None:
        raise RuntimeError("a broken progress bar")

    outcome: list[object] = []

    def maps() -> None:
        with LocalEngine(2) as engine:
            step = Step(_init_nothing, (), _run_reporting_late)
            try:
                engine.map(step, [1, 2, 3], fails)
            except RuntimeError as exc:
                outcome.append(str(exc))
            reported: list[tuple[int, int]] = []
            outcome.append(engine.map(step, [4, 5], lambda b, n: reported.append((b, n))))
            outcome.append(len(reported))

    worker = threading.Thread(target=maps, daemon=True)
    worker.start()
    worker.join(timeout=120)  # a hang, not a duration: waiting for lost reports takes an hour
    assert outcome == ["a broken progress bar", [4, 5], 100]
