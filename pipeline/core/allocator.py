"""How rowgate's processes ask polars', Arrow's and glibc's allocators to hand freed
memory back.

polars allocates through its own jemalloc, configured by ``_RJEM_MALLOC_CONF`` when the
library loads (pola-rs/polars#23128). jemalloc's defaults keep freed pages resident for
seconds (``dirty_decay_ms``, 10 s) and longer (``muzzy_decay_ms``), so memory a step of
the global phase freed still counted when the next one peaked: the parent's peak grew
with the run (measured on the scale benchmark's plain runs, 300 MB and 1.2 GB exports:
324 and 387 MB, 1.19×; with near and normalised dedupe 327 and 424 MB, 1.30×). Released
at once (decay 0, what Arrow configures its own jemalloc with since ARROW-6910), the same
runs peaked at 311 and 337 MB (1.08×) and 311 and 339 MB (1.09×).

Only the parent's: the command line (:mod:`pipeline.entry`) sets it before polars is
imported, and the engines give their workers jemalloc's defaults back (the local engine
in each worker as it starts, never through the parent's environment: jemalloc reads the
variable at its first allocation, not at import, so a parent that had not allocated yet
took the workers' value while they started, and peaked at 403 MB instead of 339 on the
1.2 GB export; Ray through the workers' runtime environment:
:func:`pipeline.engines.local.worker_environment`). In the workers, releasing at once cost
~1.6 s more system CPU on a 300 MB run with near and normalised dedupe (+8 % CPU; every
gate batch's polars work frees and takes pages again), for a process-tree peak already
under its target. A value the user set is kept, for every process.

Arrow's pool: pyarrow's default here, mimalloc, keeps freed memory for a second or more,
so the parent's report phase grew by ~16 MB a rejected file it read; the parent uses
glibc's pool (:data:`PARENT_ARROW_POOL`, whose large blocks the threshold below hands
back), the workers Arrow's jemalloc (:mod:`pipeline.engines.local`). A pool the user
chose (``ARROW_DEFAULT_MEMORY_POOL``) is every process's.

numpy's arrays (the global phase's and ``rowgate dedupe``'s ranks, masks and matching
arrays) come from glibc's ``malloc``, which maps a large allocation on its own and unmaps
it when freed, but raises that threshold to the size of each mapped block freed (up to
32 MiB): after the first such free, arrays of a few MB come from the heap, whose freed
middle is never handed back. On 3,000,000 rows of 500 texts ``rowgate dedupe`` peaked at
867 MB, 713 MB with the threshold held at 1 MiB (:func:`hand_back_large_blocks`), in the
same time. The parent holds it there, but while it runs an engine's tasks itself (one
worker: :func:`tasks_in_this_process`); a threshold the user gave glibc
(``MALLOC_MMAP_THRESHOLD_``) is kept.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import Final, cast

__all__ = [
    "ALLOCATOR_VARIABLE",
    "ARROW_POOL_VARIABLE",
    "MMAP_THRESHOLD",
    "PARENT_ARROW_POOL",
    "RELEASE_AT_ONCE",
    "apply_parent_allocator",
    "arrow_pool_chosen",
    "hand_back_large_blocks",
    "parent_allocator",
    "tasks_in_this_process",
    "worker_allocator",
]

#: polars' jemalloc reads its options from this variable (jemalloc's ``MALLOC_CONF``
#: under the prefix the Rust crate gives its symbols)
ALLOCATOR_VARIABLE: Final = "_RJEM_MALLOC_CONF"
#: freed pages go back to the system at once
RELEASE_AT_ONCE: Final = "dirty_decay_ms:0,muzzy_decay_ms:0"
#: the value this process started with: the user's choice, if any (the command line then
#: sets the parent's own)
_CHOSEN: Final = os.environ.get(ALLOCATOR_VARIABLE)


#: pyarrow's variable naming the allocator of Arrow's default memory pool, read when
#: pyarrow is imported
ARROW_POOL_VARIABLE: Final = "ARROW_DEFAULT_MEMORY_POOL"
#: the parent's Arrow pool: glibc's, whose large blocks this process hands back at once
#: (:func:`hand_back_large_blocks`). pyarrow's default here, mimalloc, kept what it freed
#: for a second or more (``purge_delay``), so the report phase, reading the rejected rows'
#: reasons one file after another, kept growing.
PARENT_ARROW_POOL: Final = "system"
#: what :func:`apply_parent_allocator` set in this process's environment
_set_here: dict[str, str] = {}


def parent_allocator() -> dict[str, str]:
    """The variables for the parent process: polars' (the user's value, else
    :data:`RELEASE_AT_ONCE`), and Arrow's pool (:data:`PARENT_ARROW_POOL`, unless the
    user chose one)."""
    found = {ALLOCATOR_VARIABLE: RELEASE_AT_ONCE if _CHOSEN is None else _CHOSEN}
    if ARROW_POOL_VARIABLE not in os.environ:
        found[ARROW_POOL_VARIABLE] = PARENT_ARROW_POOL
    return found


def apply_parent_allocator() -> None:
    """Set :func:`parent_allocator`'s variables in this process's environment (before
    polars and pyarrow load: they read them once), remembering which it set."""
    found = parent_allocator()
    os.environ.update(found)
    _set_here.update(found)


def arrow_pool_chosen() -> bool:
    """Whether Arrow's pool in the environment is the user's choice, not the parent's
    own (:func:`apply_parent_allocator`): the workers then keep it."""
    value = os.environ.get(ARROW_POOL_VARIABLE)
    return value is not None and value != _set_here.get(ARROW_POOL_VARIABLE)


def worker_allocator() -> dict[str, str]:
    """The variable for workers: the user's value, else jemalloc's defaults (empty)."""
    return {ALLOCATOR_VARIABLE: "" if _CHOSEN is None else _CHOSEN}


#: glibc: an allocation of this size or more is mapped on its own and unmapped when freed
MMAP_THRESHOLD: Final = 1 << 20
#: glibc's variable for the threshold, read when the process starts
_MALLOC_VARIABLE: Final = "MALLOC_MMAP_THRESHOLD_"
#: ``mallopt``'s parameter number for it (malloc.h)
_M_MMAP_THRESHOLD: Final = -3


#: ``mallopt``'s parameter number for the trim threshold (malloc.h): free memory at the
#: heap's top above it is handed back
_M_TRIM_THRESHOLD: Final = -1
#: glibc's trim threshold while the mapping threshold is set by hand (malloc.h's default)
_TRIM_THRESHOLD: Final = 128 << 10
#: the mapping threshold while the parent runs tasks itself: the most glibc's raising
#: reaches in a worker (``DEFAULT_MMAP_THRESHOLD_MAX`` on 64-bit), with the trim threshold
#: twice it, as the raising sets it
TASK_MMAP_THRESHOLD: Final = 32 << 20
#: whether this process holds the threshold (:func:`hand_back_large_blocks`)
_held = False
#: how many :func:`tasks_in_this_process` blocks this process is inside
_inside = 0


def _mallopt() -> Callable[[int, int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        return cast(Callable[[int, int], int], ctypes.CDLL(None).mallopt)
    except (OSError, AttributeError):
        return None


def hand_back_large_blocks() -> bool:
    """Hold glibc's mapping threshold at :data:`MMAP_THRESHOLD` in this process (setting
    it turns off the raising), unless the user set one; whether it was set. Elsewhere
    than glibc (``mallopt`` absent, or musl's, which does nothing) nothing changes."""
    global _held
    mallopt = None if _MALLOC_VARIABLE in os.environ else _mallopt()
    _held = mallopt is not None and bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    return _held


@contextlib.contextmanager
def tasks_in_this_process() -> Iterator[None]:
    """While the parent runs an engine's tasks itself (one worker), glibc's thresholds as a
    worker's reach them; held again after. A task's arrays of a few MB then come from the
    heap and are taken again without faulting their pages in (the engine hands the heap
    back after each task): on a 100 MB export gated in the parent with near and
    normalised dedupe, ~300,000 fewer page faults and ~0.5 s less system time. Nothing
    changes where this process does not hold the threshold. Nested (a task that runs
    tasks of its own in this process, as the global phase's shard tasks run scoring's
    code gates), only the outermost sets and restores them."""
    global _inside
    mallopt = _mallopt() if _held and not _inside else None
    _inside += 1
    try:
        if mallopt is None:
            yield
            return
        mallopt(_M_MMAP_THRESHOLD, TASK_MMAP_THRESHOLD)
        mallopt(_M_TRIM_THRESHOLD, 2 * TASK_MMAP_THRESHOLD)
        try:
            yield
        finally:
            mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD)
            mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    finally:
        _inside -= 1
