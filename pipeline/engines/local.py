"""The local engine: worker processes on this machine, or the calling process for one.

One pool serves every phase of a run (``with LocalEngine(n) as engine``): starting a
``spawn`` worker costs ~0.5 s of imports, paid once per worker, not once per phase. A
worker builds each step's state once (``init``) and keeps it for later tasks of that
step. :meth:`LocalEngine.start` spawns the workers early and builds the states of the
steps it is given in each of them, so that cost overlaps the caller's own start-up work
(the run's preflight) instead of following it. Workers are started with ``spawn`` so
nothing the parent holds (polars' thread pool, open files) leaks into them. After every
task a worker hands freed memory back (:func:`release_memory`). Progress travels on a
queue as (bytes, lines) increments tagged with their map, which waits for every report
its tasks sent before it returns (a late one was counted in the next map's progress),
drops those still on their way once it raised, and raises its callback's error; results
come back through futures and are returned in task order. A crashed worker fails the
whole run (DESIGN §3.6): operational failures never become rejections.

Workers never outlive the parent (DESIGN §3.12): each dies as soon as the parent does,
however it died (:func:`_die_with_parent`). An interruption of the caller (Ctrl-C, or the
CLI's SIGTERM, anything that is not an ``Exception``) kills the running workers and waits
for them to be gone before it propagates, so nothing a task writes outlives the call.
The engine starts no more workers than it has tasks (:meth:`LocalEngine.start`).
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import multiprocessing.connection
import os
import queue
import signal
import sys
import threading
from collections.abc import Callable, Generator, Iterable
from concurrent.futures import FIRST_EXCEPTION, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.context import SpawnContext, SpawnProcess
from types import TracebackType
from typing import Any, Final, NoReturn, TypeVar

from pipeline.core.allocator import arrow_pool_chosen, tasks_in_this_process, worker_allocator
from pipeline.core.config import EngineSettings
from pipeline.engines.base import Engine, EngineError, Progress, Step, register_engine

__all__ = ["LocalEngine", "release_memory", "step_state", "worker_environment"]

S = TypeVar("S")
T = TypeVar("T")
R = TypeVar("R")


#: (init, run) names -> (the init args, the state they built), in each worker
_STATES: dict[tuple[str, str], tuple[tuple[Any, ...], Any]] = {}
_QUEUE: Any = None


def _glibc() -> Any:
    """glibc, for ``malloc_trim``; ``None`` elsewhere (musl, macOS)."""
    if sys.platform != "linux":
        return None
    try:
        libc = ctypes.CDLL(None)
    except OSError:  # pragma: no cover - no dynamic loader
        return None
    if not hasattr(libc, "malloc_trim"):
        return None
    libc.malloc_trim.argtypes = [ctypes.c_size_t]
    libc.malloc_trim.restype = ctypes.c_int
    return libc


_LIBC: Final = _glibc()


def _step_key(step: Step[Any, Any, Any]) -> tuple[str, str]:
    return (
        f"{step.init.__module__}.{step.init.__qualname__}",
        f"{step.run.__module__}.{step.run.__qualname__}",
    )


#: Linux ``prctl`` option: the signal the kernel sends this process when its parent dies
_PR_SET_PDEATHSIG: Final = 1
#: How long a map waits for its tasks' last progress reports after their results
_REPORTS_WAIT_S: Final = 10.0
#: How often a worker's watchdog also compares its parent pid (its main wait, on the
#: parent's sentinel, returns as soon as the parent dies)
_WATCH_SECONDS: Final = 1.0


class _WorkerProcess(SpawnProcess):
    """A pool worker. It records whether the main thread starts it: Linux's parent-death
    signal fires when the *thread* that forked a process ends, not its process, so only a
    worker forked by the main thread (which lives as long as the process) may ask for it.
    The pool forks a worker in the thread that submits a task when no worker is idle.
    The attribute travels to the worker with the pickled process object."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.forked_by_main_thread = threading.current_thread() is threading.main_thread()

    def _bootstrap(self, parent_sentinel: int | None = None) -> NoReturn:
        """Run the worker, then leave as ``fork``'s children do (``os._exit``), without the
        interpreter's finalization: with pyarrow and numpy loaded it took ~0.3 s per
        worker, which the pool's shutdown waited for at the end of every run. What the
        worker owes its parent is flushed before: ``_bootstrap`` runs multiprocessing's
        exit function (the progress queue's feeder thread is joined), the threads' atexit
        hooks and flushes stdout and stderr; the results travel on a queue that writes
        synchronously."""
        # typeshed does not declare the private method this overrides
        exitcode: int = super()._bootstrap(parent_sentinel)  # type: ignore[misc]
        os._exit(exitcode)


class _WorkerContext(SpawnContext):
    """``spawn``, with :class:`_WorkerProcess` as the process class."""

    Process = _WorkerProcess


def _set_parent_death_signal() -> None:
    """Ask Linux to SIGKILL this process when the thread that forked it ends."""
    if sys.platform != "linux":
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(ctypes.c_int(_PR_SET_PDEATHSIG), ctypes.c_ulong(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - no prctl: the watchdog remains
        return


def _watch_parent(parent: multiprocessing.process.BaseProcess) -> None:
    """Exit this worker once its parent is gone: the parent's sentinel (a pipe only the
    parent holds open) becomes readable when it dies; the parent pid is compared too."""
    sentinel = parent.sentinel
    while not multiprocessing.connection.wait([sentinel], timeout=_WATCH_SECONDS):
        if os.getppid() != parent.pid:
            break
    os._exit(1)


def _die_with_parent() -> None:
    """Bind this worker's life to its parent's: a kernel parent-death signal where the
    platform has one (Linux), and a watchdog thread everywhere, so that a parent killed
    with SIGKILL leaves no worker gating into its temporary directory."""
    parent = multiprocessing.parent_process()
    if parent is None:  # not a spawned worker
        return
    if getattr(multiprocessing.current_process(), "forked_by_main_thread", False):
        _set_parent_death_signal()
    if os.getppid() != parent.pid:  # the parent died before the signal was set
        os._exit(1)
    threading.Thread(
        target=_watch_parent, args=(parent,), name="rowgate-parent-watch", daemon=True
    ).start()


def _worker_init(
    progress_queue: Any, warm: tuple[Step[Any, Any, Any], ...], allocator: dict[str, str]
) -> None:
    global _QUEUE
    # before any step loads polars (its allocator reads this at its first allocation);
    # set here, not through the parent's environment, which the parent's polars may not
    # have read yet (pipeline.core.allocator)
    os.environ.update(allocator)
    _die_with_parent()
    # Ctrl-C reaches the whole process group; the parent handles it and stops the workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _QUEUE = progress_queue
    for step in warm:
        # A failure here is left to the step's first task, which runs init again and
        # raises it where the caller waits for a result.
        with contextlib.suppress(Exception):
            step_state(step)


def _no_report(nbytes: int, nlines: int) -> None:
    """The progress callback of a map given none."""


def _spawned() -> None:
    """A no-op task: submitting one per worker makes the pool start them all now."""


def step_state(step: Step[Any, Any, Any]) -> Any:
    """The worker's state for ``step``, built on first use or when its args changed (the
    scoring stage maps one step per record kind, each with its own settings)."""
    key = _step_key(step)
    found = _STATES.get(key)
    if found is None or found[0] != step.init_args:
        found = _STATES[key] = (step.init_args, step.init(*step.init_args))
    return found[1]


def _worker_run(step: Step[Any, Any, Any], task: Any, call: int) -> tuple[Any, int]:
    """The task's result, and how many progress reports it sent (tagged with its map
    ``call``: the parent waits for that many before the map returns)."""
    sent = 0

    def report(nbytes: int, nlines: int) -> None:
        nonlocal sent
        _QUEUE.put((call, nbytes, nlines))
        sent += 1

    try:
        return step.run(step_state(step), task, report), sent
    finally:
        release_memory()


def release_memory() -> None:
    """Give memory a finished task freed back to the system.

    Measured on a gate shard of a 500 MB export: a worker that has gated a 64 MB shard
    keeps ~200 MB resident although it holds ~60 MB: glibc keeps the freed 3 KB row
    strings and Arrow's allocator its freed pages. Idle workers keeping that through the
    parent's global phase made the run's peak grow with the input (the parent's share is
    the part that does grow). Releasing costs ~10 ms per task, mostly ``malloc_trim``
    (which, since glibc 2.8, returns whole free pages from every arena, not only the top
    of the heap). pyarrow's documentation warns that ``release_unused`` "could be
    expensive": here it takes ~1 ms, and interleaved A/B runs showed no change in wall time.
    """
    pyarrow = sys.modules.get("pyarrow")
    if pyarrow is not None:
        pyarrow.default_memory_pool().release_unused()
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


#: Arrow's allocator for the workers, unless the user chose one
#: (``ARROW_DEFAULT_MEMORY_POOL``, which pyarrow reads when it is imported; the parent's
#: own, glibc's, set by the command line, is not a choice: :mod:`pipeline.core.allocator`).
#: Steps run inline (one worker) use the calling process's pool.
#:
#: Profile-guided: pyarrow's default on Linux is mimalloc, which keeps the pages a task
#: freed. A worker writing a 64 MB shard's Parquet peaked 136 MB above its baseline with
#: it, 39 MB with jemalloc, which Arrow configures to release dirty pages right away
#: (``pyarrow.jemalloc_set_decay_ms``: "A value of 0 (the default)", since ARROW-6910).
#: The run's peak on a 500 MB export fell from 749–765 to 616–620 MB (the workers' from
#: 240 to 202 MB); wall time stayed within the machine's noise in interleaved A/B runs.
_WORKER_ARROW_POOL: Final = "jemalloc"


def worker_environment() -> dict[str, str]:
    """Environment variables the workers need set when they start: Arrow's allocator, and
    polars' with its own defaults (the parent's releases memory at once:
    :mod:`pipeline.core.allocator`). Ray sets them all for its workers; the local engine
    sets Arrow's in the environment it starts workers with and polars' in each worker
    (:func:`_worker_init`)."""
    return {**_arrow_environment(), **worker_allocator()}


def _arrow_environment() -> dict[str, str]:
    import pyarrow

    if arrow_pool_chosen():
        return {}
    if _WORKER_ARROW_POOL not in pyarrow.supported_memory_backends():
        return {}
    return {"ARROW_DEFAULT_MEMORY_POOL": _WORKER_ARROW_POOL}


@register_engine("local")
class LocalEngine(Engine):
    """Runs steps over tasks; use as a context manager so the worker pool is reused.

    Its calls (:meth:`start`, :meth:`map`, :meth:`close`) are made from one thread at a
    time: a :meth:`start` on one thread and a :meth:`map` on another both set up the
    pool, unguarded (a test that did so saw one worker run both of a map's tasks in
    turn). Any thread may make them; a worker a thread other than the main one started
    is guarded by the watchdog alone (:func:`_die_with_parent`)."""

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError("workers must be at least 1")
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None
        self._queue: Any = None
        self._report: Progress = _no_report
        #: what the current map's progress callback raised, raised by the map
        self._report_error: Exception | None = None
        #: the current map's number (moved on as each map ends), and how many of its
        #: progress reports have arrived
        self._call = 0
        self._received = 0
        self._arrived = threading.Condition()
        self._stop = threading.Event()
        self._drainer: threading.Thread | None = None
        self._warm: tuple[Step[Any, Any, Any], ...] = ()
        #: the most workers the current pool may run (:meth:`_allow`)
        self._allowed = 0
        #: this process's values of the variables the workers' environment overrides,
        #: while it carries theirs (from the first pool until close())
        self._saved_environment: dict[str, str | None] | None = None

    @classmethod
    def from_settings(cls, settings: EngineSettings, shards: int | None = None) -> LocalEngine:
        """``engine.workers`` processes (by default one per core, no more than ``shards``)."""
        return cls(settings.resolved_workers(shards))

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is not None and not isinstance(exc, Exception):
            self._kill_workers()  # interrupted: no task may outlive the caller's clean-up
        self.close()

    def start(self, *warm: Step[Any, Any, Any], tasks: int | None = None) -> None:
        """Start workers now, without waiting for them, each building the state of every
        ``warm`` step as it starts. Optional: :meth:`map` starts them when needed.
        A ``warm`` init that fails is retried (and raises) by the step's first task.

        ``tasks`` is how many tasks the first :meth:`map` will have, when the caller
        knows: no more workers than that start (``--workers 30`` on a one-shard export
        started 30 processes, 1.95 GB, for one task). Unknown (``None``), one starts now
        and the others as tasks arrive: a map never starts more workers than it was
        given tasks."""
        if self.workers == 1 or self._pool is not None:
            return
        count = min(self.workers, 1 if tasks is None else tasks)
        if count < 1:
            return
        self._warm = warm
        pool = self._ensure_pool()
        self._allow(count)
        for _ in range(count):
            pool.submit(_spawned)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        for name, value in (self._saved_environment or {}).items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved_environment = None
        if self._drainer is not None:
            self._stop.set()
            self._drainer.join()
            self._drainer = None
            self._queue.close()

    def map(
        self,
        step: Step[S, T, R],
        tasks: Iterable[T],
        progress: Progress | None = None,
        cost: Callable[[T], int] | None = None,
    ) -> list[R]:
        """Run ``step`` over ``tasks``; results in task order.

        ``cost`` orders submission largest-first (fewer idle workers at the end), after
        reading every task. Without it each task is submitted as ``tasks`` yields it, so
        the workers start while a slow producer (a compressed input being decompressed
        into shards) still works, and a failed task stops the producer early. Neither
        changes results, which are keyed by task position. When a task or the producer
        fails, the tasks already running finish before the error is raised, and a
        producer that is a generator is closed: nothing the step or the producer writes
        outlives the call.
        """
        with self._arrived:
            self._report = progress or _no_report
            self._received = 0
            self._report_error = None
        try:
            if self.workers == 1:
                with tasks_in_this_process():
                    state = step.init(*step.init_args)
                    inline: list[R] = []
                    for task in tasks:
                        inline.append(step.run(state, task, self._report))
                        release_memory()
                return inline
            return self._map_pool(step, tasks, cost)
        finally:
            if isinstance(tasks, Generator):
                tasks.close()  # a no-op once it is exhausted
            with self._arrived:
                # the next map's number: reports still on their way (a failed map's) are
                # dropped, not counted in its progress
                self._call += 1

    def _map_pool(
        self, step: Step[S, T, R], tasks: Iterable[T], cost: Callable[[T], int] | None
    ) -> list[R]:
        pool = self._ensure_pool()
        if cost is None:
            submissions: Iterable[tuple[int, T]] = enumerate(tasks)
        else:
            listed = list(tasks)
            order = sorted(range(len(listed)), key=lambda i: -cost(listed[i]))
            submissions = ((i, listed[i]) for i in order)
            self._allow(len(listed))
        failed = threading.Event()

        def note(future: Future[Any]) -> None:
            if not future.cancelled() and future.exception() is not None:
                failed.set()

        futures: dict[Future[Any], int] = {}
        try:
            for i, task in submissions:
                self._allow(len(futures) + 1)
                future = pool.submit(_worker_run, step, task, self._call)
                future.add_done_callback(note)
                futures[future] = i
                if failed.is_set():
                    break  # read no further: the producer may be decompressing a stream
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            for future in done:
                error = future.exception()
                if error is not None:
                    raise error
        except BaseException as exc:
            if not isinstance(exc, Exception):
                self._kill_workers()  # interrupted: stop now rather than after the tasks
                raise
            for future in futures:
                future.cancel()
            wait(futures)
            if isinstance(exc, BrokenProcessPool):
                self._pool = None
                raise EngineError("a worker process died (killed or out of memory)") from exc
            raise
        results: list[Any] = [None] * len(futures)
        sent = 0
        for future, i in futures.items():
            results[i], reports = future.result()
            sent += reports
        with self._arrived:
            # a report travels apart from its result; a worker's feeder thread sends it
            # soon after (a killed worker's may never come: progress is no result)
            self._arrived.wait_for(
                lambda: self._received >= sent or not self._draining(), timeout=_REPORTS_WAIT_S
            )
            if self._report_error is not None:
                raise self._report_error
        return results

    def _allow(self, count: int) -> None:
        """Let the pool run up to ``count`` workers (at most ``workers``), never fewer
        than it was allowed before.

        The pool starts a worker whenever a task is submitted while none is idle, up to
        its maximum: a worker still starting, or one whose last result is not yet
        counted, is not idle, so a one-task map after :meth:`start` started a second
        worker. Only a maximum that grows with the tasks bounds the workers by them.
        """
        allowed = min(self.workers, count)
        if self._pool is not None and allowed > self._allowed:
            self._allowed = allowed
            # No public way to grow a pool's maximum; the attribute is its only bound.
            self._pool._max_workers = allowed  # type: ignore[attr-defined]

    def _kill_workers(self) -> None:
        """Kill every worker and wait until each is gone (their tasks with them).

        The pool then fails its pending futures as broken. None of them may have been
        cancelled first: Python 3.11's pool raises ``InvalidStateError`` in its manager
        thread when it fails a cancelled future.
        """
        pool, self._pool = self._pool, None
        if pool is None:
            return
        # No public way to stop running tasks before Python 3.14's kill_workers().
        processes = list((getattr(pool, "_processes", None) or {}).values())
        for process in processes:
            process.kill()
        for process in processes:
            process.join()
        pool.shutdown(wait=True)

    def _ensure_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            # Workers are spawned as tasks arrive and inherit this process's environment:
            # it carries theirs until close(), also across a pool replaced after a crash.
            if self._saved_environment is None:
                overrides = _arrow_environment()
                self._saved_environment = {k: os.environ.get(k) for k in overrides}
                os.environ.update(overrides)
            context = _WorkerContext()
            self._queue = context.Queue()
            self._stop.clear()
            self._drainer = threading.Thread(
                target=self._drain, name="rowgate-progress", daemon=True
            )
            self._drainer.start()
            self._pool = ProcessPoolExecutor(
                max_workers=self.workers,  # sizes its queue of calls
                mp_context=context,
                initializer=_worker_init,
                initargs=(self._queue, self._warm, worker_allocator()),
            )
            self._allowed = 0
            self._pool._max_workers = 0  # type: ignore[attr-defined]  # see _allow()
        return self._pool

    def _drain(self) -> None:
        while not self._stop.is_set() or not self._queue.empty():
            try:
                call, nbytes, nlines = self._queue.get(timeout=0.1)
            except queue.Empty:
                continue
            except (EOFError, OSError):
                return
            with self._arrived:
                if call != self._call:
                    continue  # a map's that returned or raised: dropped
                report = self._report
            try:
                report(nbytes, nlines)  # outside the lock: a slow callback holds no map
            except Exception as exc:  # the caller's callback: its map raises it
                with self._arrived:
                    if call == self._call:
                        self._report_error = self._report_error or exc
                        self._report = _no_report
            with self._arrived:
                if call == self._call:
                    self._received += 1
                self._arrived.notify_all()

    def _draining(self) -> bool:
        return self._drainer is not None and self._drainer.is_alive()
