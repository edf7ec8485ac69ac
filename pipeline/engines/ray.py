"""The Ray engine: a step's tasks as Ray tasks, on a local Ray or on a cluster.

Same contract as :class:`~pipeline.engines.local.LocalEngine`: ``map(step, tasks,
progress, cost)`` returns results in task order, a worker builds a step's state once
(``init``) and keeps it for its later tasks, and a failure leaves nothing running. Each
task is a Ray task (not an actor): Ray schedules it on any free CPU of the cluster and,
when the worker process running it dies (killed, out of memory, its node lost), runs it
again, up to ``max_retries`` times; the steps are idempotent (a gate or write task
rewrites the same files). A task that still cannot complete is an :class:`EngineError`
(the CLI's exit 4); an exception the step itself raises propagates unchanged, as with the
local engine, and is never retried. A Ray worker process runs one task at a time and is
reused for later ones, so the per-process state cache of the local workers
(:func:`pipeline.engines.local.step_state`) serves here unchanged.

Progress: a task's (bytes, lines) increments travel back with its result and are reported
when it completes (summed: one call per task), so a retried task is never counted twice.

Where Ray runs: ``address`` (or ``RAY_ADDRESS``) joins an existing cluster (``ray start
--head`` / ``ray start --address``); without one, a private local Ray is started with
``num_cpus=workers`` (``address="local"``: never a cluster some other program started on
this machine) and shut down by :meth:`RayEngine.close`. Its dashboard and usage stats are
off and worker output is not forwarded to this process. Every node must see the run's
staging and output directories at the same path (a shared filesystem): see docs/scale.md.

Only this module imports ray (the optional ``rowgate[ray]`` extra). Ray's documentation
relied on: ``ray.init`` (address resolution, "local", ``num_cpus``, ``include_dashboard``,
``log_to_driver``; it replaces the driver's SIGTERM handler, and ``ray.shutdown`` resets
the signal to its default action: both are undone here), task fault tolerance
(``max_retries`` retries system failures; application errors arrive as
``RayTaskError`` with the original exception as ``cause``), ``ray.cancel`` (a pending
task is not run; a running one gets ``KeyboardInterrupt``, or exits with ``force``;
cancelled tasks are not retried) and usage stats (``RAY_USAGE_STATS_ENABLED=0``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
from collections.abc import Callable, Generator, Iterable, Iterator
from types import TracebackType
from typing import Any, Final, TypeVar

import ray
import ray.exceptions

from pipeline.core.config import EngineSettings, check_ray_address
from pipeline.engines.base import Engine, EngineError, Progress, Step, register_engine
from pipeline.engines.local import release_memory, step_state, worker_environment

__all__ = ["RayEngine"]

S = TypeVar("S")
T = TypeVar("T")
R = TypeVar("R")

#: How often Ray runs a task again after the worker process running it died.
DEFAULT_MAX_RETRIES: Final = 3
#: How long a cancelled map waits for its running tasks to stop before it gives up.
_CANCEL_PATIENCE_S: Final = 60.0
#: starts of a private local Ray before the run fails (a cluster is joined once)
_LOCAL_START_ATTEMPTS: Final = 2
#: How long the driver tries to open a connection to a cluster's address before Ray
#: does: Ray retries an address nothing answers at for minutes, with signals held.
_REACH_TIMEOUT_S: Final = 10.0


def _check_reachable(address: str, endpoint: tuple[str, int]) -> None:
    """An :class:`EngineError` unless something accepts a connection at ``address``'s
    host and port (``endpoint``). Ray kept retrying an address nothing answered at
    (still after 5 minutes), and the driver held SIGTERM and Ctrl-C throughout (acted on
    once Ray returns)."""
    try:
        with socket.create_connection(endpoint, _REACH_TIMEOUT_S):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise EngineError(f"cannot reach the Ray cluster at {address}: {reason}") from None


def _run_task(step: Step[Any, Any, Any], task: Any) -> tuple[Any, tuple[int, int] | None]:
    """One task in a Ray worker: the step's result and its summed progress, if any."""
    totals: list[int] = []

    def report(nbytes: int, nlines: int) -> None:
        if not totals:
            totals.extend((0, 0))
        totals[0] += nbytes
        totals[1] += nlines

    try:
        result = step.run(step_state(step), task, report)
    finally:
        release_memory()
    return result, (totals[0], totals[1]) if totals else None


_REMOTE: Final = ray.remote(_run_task)

#: How long the driver waits on Ray at a time, so that a held signal is acted on promptly.
_POLL_S: Final = 0.25
#: The signals held while the driver is inside Ray (see :func:`_signals_held`).
_HELD: Final = (signal.SIGTERM, signal.SIGINT)


def _init_ray(kwargs: dict[str, Any], attempts: int, where: str) -> None:
    """``ray.init(**kwargs)``, up to ``attempts`` times; the caller's handlers kept."""
    with _signals_held() as arrived:
        for attempt in range(1, attempts + 1):
            try:
                ray.init(**kwargs)
                return
            except SystemExit as exc:
                # Ray's SIGTERM handler, which ray.init puts in place of the one held
                # here, ends the start with sys.exit(SIGTERM) (the run exited 15, with
                # no message): the signal arrived, and is acted on as the caller's
                # handler would once its handlers are back
                if exc.code != signal.SIGTERM:
                    raise
                ray.shutdown()  # the processes the start left running
                arrived.append(signal.SIGTERM)
                return
            except Exception as exc:  # Ray raises bare Exception, e.g. a slow raylet
                ray.shutdown()  # the processes a failed start left running
                if attempt == attempts:
                    tries = f" ({attempts} attempts)" if attempts > 1 else ""
                    raise EngineError(f"cannot start or reach {where}{tries}: {exc}") from exc


@contextlib.contextmanager
def _signals_held() -> Iterator[list[int]]:
    """Hold SIGTERM and SIGINT while the driver is inside Ray; then act on one that arrived
    as the caller's handler would. Yields the signals that arrived so far.

    Python runs a handler wherever the interpreter polls for signals, and Ray's blocking
    calls poll from C++. A handler's exception raised there comes out as a ``SystemError``
    and leaves Ray's task table inconsistent: a later ``ray.cancel`` fails Ray's own check
    (task_manager.cc, "Tried to complete task that was not pending") and ends the process
    with exit 1, no clean-up run (seen here, Ray 2.60). Held, a handler only records.

    Putting the caller's handlers back also undoes what Ray does to them: ``ray.init``
    replaces the SIGTERM handler with one that exits at once, and ``ray.shutdown`` resets
    the signal to its default action underneath Python (which still reports the handler).
    Only the main thread has signal handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield []  # only the main thread runs handlers
        return
    arrived: list[int] = []
    previous: dict[int, Any] = {}
    for signum in _HELD:
        handler = signal.getsignal(signum)
        if handler is not None:  # None: installed outside Python, cannot be put back
            previous[signum] = handler
            signal.signal(signum, lambda number, frame: arrived.append(number))
    try:
        yield arrived
    finally:
        for number, kept in previous.items():
            signal.signal(number, kept)
        if arrived:
            handler = previous[arrived[0]]
            if callable(handler):
                handler(arrived[0], None)  # the CLI's raises Terminated, Python's KeyboardInterrupt
            elif handler == signal.SIG_DFL:
                signal.raise_signal(arrived[0])


@register_engine("ray")
class RayEngine(Engine):
    """Runs steps over tasks as Ray tasks; use as a context manager so Ray is shut down
    (when this engine started it) and no task outlives the caller."""

    def __init__(
        self, workers: int, address: str | None = None, *, max_retries: int = DEFAULT_MAX_RETRIES
    ) -> None:
        if workers < 1:
            raise ValueError("workers must be at least 1")
        if max_retries < 0:
            raise ValueError("max_retries must be at least 0")
        self.workers = workers
        #: the cluster to join; ``None``: a private local Ray of ``workers`` CPUs
        self.address = address or os.environ.get("RAY_ADDRESS") or None
        #: its host and port (``None``: no address, or ``auto``/``local``, Ray's to resolve)
        self._endpoint = None
        if self.address is not None:
            where = "engine.address" if address else "RAY_ADDRESS"
            self._endpoint = check_ray_address(self.address, where)
        self.max_retries = max_retries
        #: whether this engine started Ray (and so shuts it down)
        self._owns_ray = False
        #: the running map's unfinished tasks, for an interruption to stop
        self._pending: dict[Any, int] = {}

    @classmethod
    def from_settings(cls, settings: EngineSettings, shards: int | None = None) -> RayEngine:
        """``engine.workers`` CPUs for a private local Ray (by default one per core, no
        more than ``shards``), or the cluster ``engine.address`` or ``RAY_ADDRESS`` names."""
        return cls(
            settings.resolved_workers(shards), settings.address, max_retries=settings.max_retries
        )

    def __enter__(self) -> RayEngine:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is not None and not isinstance(exc, Exception):
            self._stop(self._pending, force=True)
        self.close()

    def start(self, *warm: Step[Any, Any, Any], tasks: int | None = None) -> None:
        """Connect to Ray now (starting a local one when no cluster is given), so that
        the first :meth:`map` does not wait for it. ``warm`` and ``tasks`` are accepted
        for the engine contract: Ray starts its workers itself, and each builds a step's
        state on its first task of that step."""
        self._connect()

    def close(self) -> None:
        if self._owns_ray:
            self._owns_ray = False
            with _signals_held():
                ray.shutdown()

    def map(
        self,
        step: Step[S, T, R],
        tasks: Iterable[T],
        progress: Progress | None = None,
        cost: Callable[[T], int] | None = None,
    ) -> list[R]:
        """Run ``step`` over ``tasks``; results in task order.

        As :meth:`LocalEngine.map <pipeline.engines.local.LocalEngine.map>`: ``cost``
        submits largest-first after reading every task; without it tasks are submitted as
        ``tasks`` yields them and a failure stops reading it. On a failure the tasks not
        yet started are cancelled and the running ones interrupted, and the call returns
        only once none runs; a producer that is a generator is closed.
        """
        report = progress or (lambda nbytes, nlines: None)
        try:
            self._connect()
            return self._map(step, tasks, report, cost)
        finally:
            if isinstance(tasks, Generator):
                tasks.close()  # a no-op once it is exhausted

    def _map(
        self,
        step: Step[S, T, R],
        tasks: Iterable[T],
        report: Progress,
        cost: Callable[[T], int] | None,
    ) -> list[R]:
        remote = _REMOTE.options(num_cpus=1, max_retries=self.max_retries, retry_exceptions=False)
        if cost is None:
            submissions: Iterable[tuple[int, T]] = enumerate(tasks)
        else:
            listed = list(tasks)
            order = sorted(range(len(listed)), key=lambda i: -cost(listed[i]))
            submissions = ((i, listed[i]) for i in order)
        pending = self._pending = {}
        results: dict[int, Any] = {}
        try:
            with _signals_held():
                step_ref = ray.put(step)  # one copy in the object store, not one per task
            submitted = 0
            for i, task in submissions:
                pending[remote.remote(step_ref, task)] = i
                submitted += 1
                # a failed task raises here: the producer, which may be decompressing a
                # stream into spill files, is read no further
                self._collect(pending, results, report, block=False)
            while pending:
                self._collect(pending, results, report, block=True)
        except BaseException as exc:
            self._stop(pending, force=not isinstance(exc, Exception))
            raise
        finally:
            self._pending = {}
        return [results[i] for i in range(submitted)]

    def _collect(
        self, pending: dict[Any, int], results: dict[int, Any], report: Progress, *, block: bool
    ) -> None:
        """Take the finished tasks' results (waiting for one when ``block``); raise the
        first failure."""
        with _signals_held() as arrived:
            if block:
                ready: list[Any] = []
                while not ready and not arrived:
                    ready, _ = ray.wait(list(pending), num_returns=1, timeout=_POLL_S)
            else:
                ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0)
            for ref in ready:
                i = pending.pop(ref)
                value, increments = self._result(ref)
                results[i] = value
                if increments is not None:
                    report(*increments)

    def _result(self, ref: Any) -> tuple[Any, tuple[int, int] | None]:
        try:
            found: tuple[Any, tuple[int, int] | None] = ray.get(ref)
        except ray.exceptions.RayTaskError as exc:
            cause = exc.cause
            if isinstance(cause, Exception) and not isinstance(cause, ray.exceptions.RayError):
                raise cause from None  # the step's own error, as the local engine raises it
            raise EngineError(f"a Ray task failed: {type(cause).__name__}") from exc
        except ray.exceptions.RayError as exc:
            raise EngineError(
                f"a Ray task could not complete after {self.max_retries} retries "
                f"({type(exc).__name__}: its worker process or node died)"
            ) from exc
        return found

    def _stop(self, pending: dict[Any, int], *, force: bool) -> None:
        """Cancel every unfinished task and wait until none runs. ``force`` kills the
        worker processes running them (an interruption) instead of interrupting the
        tasks (a failure elsewhere: they may close their files first)."""
        refs = list(pending)
        if not refs:
            return
        with _signals_held():  # a second Ctrl-C is acted on once the tasks are stopped
            for ref in refs:
                ray.cancel(ref, force=force)
            ray.wait(refs, num_returns=len(refs), timeout=_CANCEL_PATIENCE_S)
        pending.clear()

    def _connect(self) -> None:
        """Join the configured cluster, or start a private local Ray; once."""
        if ray.is_initialized():
            return  # this process is connected already (by this engine, or its caller)
        kwargs: dict[str, Any] = {
            "log_to_driver": False,
            # Ray's own warnings (e.g. that token authentication is on) are not the
            # user's concern; its errors still show.
            "logging_level": logging.ERROR,
            "runtime_env": {"env_vars": worker_environment()},
        }
        if self.address is None:
            kwargs.update(address="local", num_cpus=self.workers, include_dashboard=False)
        else:
            kwargs.update(address=self.address)
        usage = os.environ.get("RAY_USAGE_STATS_ENABLED")
        os.environ["RAY_USAGE_STATS_ENABLED"] = usage if usage is not None else "0"
        # a private local Ray gets another start: its raylet has 30 s (fixed in Ray) to
        # register, which a loaded machine misses now and then (seen here, load 7-17)
        attempts = _LOCAL_START_ATTEMPTS if self.address is None else 1
        where = f"the Ray cluster at {self.address}" if self.address else "a local Ray"
        if self.address is not None and self._endpoint is not None:
            _check_reachable(self.address, self._endpoint)
        try:
            _init_ray(kwargs, attempts, where)
        finally:
            if usage is None:
                os.environ.pop("RAY_USAGE_STATS_ENABLED", None)
        self._owns_ray = self.address is None
