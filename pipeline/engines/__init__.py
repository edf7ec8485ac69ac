"""Engines: where steps run. An engine maps a step over tasks and knows nothing about
what the step does (the gate, the writer); steps know nothing about where they run.
Only :mod:`pipeline.engines.ray` (optional) may import ray."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from pipeline.engines.local import EngineError, LocalEngine, Progress, Step

__all__ = ["Engine", "EngineError", "LocalEngine", "Progress", "Step"]

T = TypeVar("T")
R = TypeVar("R")


class Engine(Protocol):
    """What the run and its stages need of an engine: a step mapped over tasks, results
    in task order (:meth:`LocalEngine.map` documents the contract)."""

    def map(
        self,
        step: Step[Any, T, R],
        tasks: Sequence[T],
        progress: Progress | None = None,
        cost: Callable[[T], int] | None = None,
    ) -> list[R]: ...
