"""The local engine: worker processes on this machine, or the calling process for one.

Each worker builds its step state once (``init``), then runs tasks. Workers are started
with ``spawn`` so nothing the parent holds (polars' thread pool, open files) leaks into
them. Progress travels on a queue as (bytes, lines) increments; results come back
through futures and are returned in task order. A crashed worker fails the whole run
(DESIGN §3.6): operational failures are never turned into row rejections.
"""

from __future__ import annotations

import multiprocessing
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Generic, TypeVar

__all__ = ["EngineError", "LocalEngine", "Progress", "Step"]

S = TypeVar("S")
T = TypeVar("T")
R = TypeVar("R")

#: Called with (bytes, lines) as work advances.
Progress = Callable[[int, int], None]


class EngineError(RuntimeError):
    """A worker failed for an operational reason; the run cannot complete."""


class Step(Generic[S, T, R]):
    """A picklable unit of work: ``init(*args)`` once per worker, then ``run(state, task,
    progress)`` per task. ``init`` and ``run`` must be module-level functions."""

    def __init__(
        self, init: Callable[..., S], init_args: tuple[Any, ...], run: Callable[[S, T, Progress], R]
    ) -> None:
        self.init = init
        self.init_args = init_args
        self.run = run


_STATE: Any = None
_QUEUE: Any = None


def _worker_init(init: Callable[..., Any], args: tuple[Any, ...], progress_queue: Any) -> None:
    global _STATE, _QUEUE
    _STATE = init(*args)
    _QUEUE = progress_queue


def _report(nbytes: int, nlines: int) -> None:
    _QUEUE.put((nbytes, nlines))


def _worker_run(run: Callable[[Any, Any, Progress], Any], task: Any) -> Any:
    return run(_STATE, task, _report)


class LocalEngine:
    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError("workers must be at least 1")
        self.workers = workers

    def map(
        self,
        step: Step[S, T, R],
        tasks: Sequence[T],
        progress: Progress | None = None,
        cost: Callable[[T], int] | None = None,
    ) -> list[R]:
        """Run ``step`` over ``tasks``; results in task order.

        ``cost`` orders submission largest-first (fewer idle workers at the end); it
        never changes results, which are keyed by task position.
        """
        report: Progress = progress or (lambda nbytes, nlines: None)
        if self.workers == 1 or len(tasks) <= 1:
            state = step.init(*step.init_args)
            return [step.run(state, task, report) for task in tasks]
        return self._map_pool(step, tasks, report, cost)

    def _map_pool(
        self,
        step: Step[S, T, R],
        tasks: Sequence[T],
        report: Progress,
        cost: Callable[[T], int] | None,
    ) -> list[R]:
        context = multiprocessing.get_context("spawn")
        progress_queue = context.Queue()
        stop = threading.Event()

        def drain() -> None:
            while not stop.is_set() or not progress_queue.empty():
                try:
                    nbytes, nlines = progress_queue.get(timeout=0.1)
                except queue.Empty:
                    continue
                report(nbytes, nlines)

        drainer = threading.Thread(target=drain, name="rowgate-progress", daemon=True)
        drainer.start()
        order = sorted(range(len(tasks)), key=lambda i: -cost(tasks[i]) if cost else i)
        results: list[Any] = [None] * len(tasks)
        try:
            with ProcessPoolExecutor(
                max_workers=min(self.workers, len(tasks)),
                mp_context=context,
                initializer=_worker_init,
                initargs=(step.init, step.init_args, progress_queue),
            ) as pool:
                futures: dict[Future[Any], int] = {
                    pool.submit(_worker_run, step.run, tasks[i]): i for i in order
                }
                done, _ = wait(futures, return_when=FIRST_EXCEPTION)
                for future in done:
                    error = future.exception()
                    if error is not None:
                        for other in futures:
                            other.cancel()
                        if isinstance(error, BrokenProcessPool):
                            raise EngineError(
                                "a worker process died (killed or out of memory)"
                            ) from error
                        raise error
                for future, i in futures.items():
                    results[i] = future.result()
        except BrokenProcessPool as exc:
            raise EngineError("a worker process died (killed or out of memory)") from exc
        finally:
            stop.set()
            drainer.join()
            progress_queue.close()
        return results
