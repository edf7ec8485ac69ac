"""The engine contract: what the run and its stages need of wherever steps run.

An :class:`Engine` maps a :class:`Step` over tasks and returns the results in task
order; it knows nothing about what the step does. Engines are plug-ins, registered by
name with :func:`register_engine` and chosen by the config's ``engine.name``
(:func:`get_engine`), as record kinds and global stages are. A module defining an engine
registers it when imported; :mod:`pipeline.engines` imports the built-in ones.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any, ClassVar, Final, Generic, Self, TypeVar

from pipeline.core.config import ConfigError, EngineSettings, did_you_mean
from pipeline.core.errors import EXIT_FAILED, RowgateError

__all__ = [
    "ENGINES",
    "LAZY_ENGINES",
    "Engine",
    "EngineError",
    "Progress",
    "Step",
    "get_engine",
    "register_engine",
]

S = TypeVar("S")
T = TypeVar("T")
R = TypeVar("R")
E = TypeVar("E", bound=type["Engine"])

#: Called with (bytes, lines) as work advances.
Progress = Callable[[int, int], None]


class EngineError(RowgateError, RuntimeError):
    """A worker failed for an operational reason; the run cannot complete."""

    exit_code: ClassVar[int] = EXIT_FAILED


class Step(Generic[S, T, R]):
    """A picklable unit of work: ``init(*args)`` once per worker, then ``run(state, task,
    progress)`` per task. ``init`` and ``run`` must be module-level functions; ``args``
    must compare by value (dataclasses, tuples, strings): a worker keeps one state per
    (init, run) and builds it again when a later step brings different ``args``.

    Tasks and ``args`` travel to other processes (and, on a cluster, other machines):
    they name data by the run's storage object (:class:`pipeline.storage.RunStorage`),
    never by a path only this process can open."""

    def __init__(
        self, init: Callable[..., S], init_args: tuple[Any, ...], run: Callable[[S, T, Progress], R]
    ) -> None:
        self.init = init
        self.init_args = init_args
        self.run = run


class Engine(ABC):
    """Where a run's steps run. Use as a context manager: the engine's resources (a
    worker pool, a cluster connection) live until the block ends, so one start serves
    every phase of a run (gate, global stages, write)."""

    #: the name it is registered under (:func:`register_engine`)
    name: ClassVar[str]

    @classmethod
    @abstractmethod
    def from_settings(cls, settings: EngineSettings, shards: int | None = None) -> Self:
        """The engine the config's ``[engine]`` section asks for; ``shards`` is how many
        gate tasks the run will have when that is known before gating."""

    # B027: optional hooks, empty on purpose: an engine with nothing to start or
    # release (an inline one) need not override them
    def start(self, *warm: Step[Any, Any, Any], tasks: int | None = None) -> None:  # noqa: B027
        """Optionally acquire resources now, preparing each ``warm`` step (its state) so
        that the cost overlaps the caller's own start-up work; ``tasks`` is how many
        tasks the first :meth:`map` will have, when known. :meth:`map` starts what it
        needs if this was not called; the default does nothing."""

    def close(self) -> None:  # noqa: B027
        """Release the engine's resources; :meth:`map` may not be called afterwards."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @abstractmethod
    def map(
        self,
        step: Step[S, T, R],
        tasks: Iterable[T],
        progress: Progress | None = None,
        cost: Callable[[T], int] | None = None,
    ) -> list[R]:
        """Run ``step`` over ``tasks``; results in task order, whatever order the tasks
        ran in. ``progress`` receives the steps' (bytes, lines) reports; ``cost`` may
        order submission (largest first) and never changes the results. A failed task
        fails the call (an operational failure is an :class:`EngineError`) after the
        tasks already running have finished: nothing a task writes outlives the call."""


#: Engines by name, in registration order.
ENGINES: dict[str, type[Engine]] = {}


def register_engine(name: str) -> Callable[[E], E]:
    """Class decorator: make an :class:`Engine` available as ``engine.name = NAME``."""

    def register(cls: E) -> E:
        if name in ENGINES:
            raise ValueError(f"engine {name!r} registered twice")
        cls.name = name
        ENGINES[name] = cls
        return cls

    return register


#: Engines whose module imports a client library that rowgate does not require: imported
#: (and so registered) only when a run names them, with the extra that installs it.
LAZY_ENGINES: Final = {"ray": ("pipeline.engines.ray", "ray")}


def get_engine(name: str) -> type[Engine]:
    """The engine registered as ``name`` (a lazy one is imported first); an unknown name,
    or a lazy one whose library is missing, is a :class:`ConfigError` of ``engine.name``."""
    if name not in ENGINES and name in LAZY_ENGINES:
        module, extra = LAZY_ENGINES[name]
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            raise ConfigError(
                f"engine.name: the {name} engine needs {exc.name}: pip install 'rowgate[{extra}]'"
            ) from None
    try:
        return ENGINES[name]
    except KeyError:
        known = sorted({*ENGINES, *LAZY_ENGINES})
        raise ConfigError(
            f"engine.name: unknown engine {name!r} (known: {', '.join(known)})"
            f"{did_you_mean(name, known)}"
        ) from None
