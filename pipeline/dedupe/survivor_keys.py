"""Every row's order key by a survivor column, on disk: a memory-mapped file a row's key
is read from, where ranking every row in memory held ~50 bytes a row.

A column of numbers, booleans, dates, times or durations has a 64-bit order key per
value (:func:`~pipeline.dedupe.table.order_keys`), computed a block at a time
(:func:`mapped_order_keys`). A text has no such key of its own: its key is its value's
dense rank among every row's, found without every row's value in memory at once
(:func:`text_order_keys`):

1. each block of values (a shard's accepted rows) is sorted and written as a *run*, and
   every ``stride``-th value of it kept as a sample (regular sampling);
2. the samples give ``partitions - 1`` splitters; in each sorted run, a range of values
   (a partition) is a contiguous slice, found by a binary search for each splitter;
3. each partition is a task on the engine (:func:`_rank_range`, in parallel, each
   holding one): the slices of every run are read and ranked (dense: equal values share
   a rank), and the ranks written beside their rows' places; then, partition by
   partition in order, the driver offsets each partition's ranks by the previous
   partitions' distinct values and writes them to a memory-mapped array of a key per
   row (8 bytes a row of file pages, read back for the rows asked for).

Equal values fall in one partition (a splitter puts them on its one side), so the keys are
the values' dense ranks among every row: by key, then place, rows order exactly as
:func:`~pipeline.dedupe.table.ranked_values` orders them. A partition holds at most about
its share of the values plus ``stride`` per run (the sampling's bound); a value repeated
more often than that is one partition however large.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa
import pyarrow.ipc as ipc

from pipeline.core.arrays import detached
from pipeline.dedupe.partitions import PARTITION_BYTES
from pipeline.dedupe.table import MISSING_KEY, order_keys
from pipeline.engines import Engine, Progress, Step

__all__ = ["mapped_order_keys", "text_order_keys"]

U64 = npt.NDArray[np.uint64]
Bools = npt.NDArray[np.bool_]

#: the most rows between two samples of a run (fewer in a run of under 64 × this rows,
#: which gives at least 64 samples): ~8 MB of samples at 300 M rows of 30-byte texts
STRIDE: Final = 1024
#: the rows of a range's ranks the driver reads and places at a time (~1 MB)
BLOCK: Final = 65_536
_VALUE, _PLACE = "_v", "_p"


def text_order_keys(
    blocks: Iterable[pl.Series],
    count: int,
    direction: str,
    directory: Path,
    engine: Engine,
    partitions: int | None = None,
) -> U64:
    """Each of ``count`` values' order key by a ``max:`` or ``min:`` rule: its dense rank
    among the values (descending for ``max``), :data:`~pipeline.dedupe.table.MISSING_KEY`
    for a null. ``blocks`` are the values in order, a block at a time (each held while it
    is sorted); ``directory`` (made here, in the staging area where ``engine``'s workers
    read it; its runs removed once ranked) holds the runs and the keys, returned as a
    memory-mapped array. ``partitions``: how many ranges of values (else enough for
    ~:data:`~pipeline.dedupe.partitions.PARTITION_BYTES` of rows each), each ranked by a
    task on ``engine``."""
    directory.mkdir(parents=True, exist_ok=True)
    keys = _mapped(directory / "keys.npy", count, np.uint64)
    runs = directory / "runs"
    runs.mkdir(exist_ok=True)
    paths: list[Path] = []
    samples: list[pl.Series] = []
    size = 0
    for at, values in _placed(blocks, count):
        n = len(values)
        keys[at : at + n][values.is_null().to_numpy()] = MISSING_KEY
        run = (
            pl.DataFrame({_VALUE: values, _PLACE: np.arange(at, at + n, dtype=np.int64)})
            .filter(pl.col(_VALUE).is_not_null())
            .sort(_VALUE)
        )
        if not run.height:
            continue
        stride = max(1, min(STRIDE, run.height // 64))
        # copied out: a gather shares the block's text buffers, and held every block's
        sample = run.select(pl.col(_VALUE).gather_every(stride, offset=stride - 1))
        samples.append(detached(sample).to_series())
        size += int(run.estimated_size())
        paths.append(runs / f"{len(paths):06d}.arrow")
        written = run.to_arrow()
        del run
        with ipc.new_file(str(paths[-1]), written.schema) as writer:
            writer.write_table(written)
        del written
    splitters = _splitters(samples, partitions or math.ceil(size / PARTITION_BYTES))
    del samples
    bounds = [_bounds(path, splitters) for path in paths]
    ranges = _Ranges(tuple(str(path) for path in paths), str(runs))
    tasks = [
        _Range(p, tuple(b[p] for b in bounds), tuple(b[p + 1] for b in bounds))
        for p in range(len(splitters) + 1)
    ]
    distinct = engine.map(Step(_init, (ranges,), _rank_range), tasks)
    ranked = 0  # the distinct values of the partitions before
    for task, found in zip(tasks, distinct, strict=True):
        if not found:
            continue
        for places, dense in _ranked(runs, task.p):
            dense += np.uint64(ranked)
            if direction == "max":
                dense = MISSING_KEY - np.uint64(1) - dense
            keys[places] = dense
        ranked += found
    shutil.rmtree(runs)
    keys.flush()
    return keys


@dataclass(frozen=True)
class _Ranges:
    """Every run of a sort (its path in the staging area) and where the ranks go."""

    paths: tuple[str, ...]
    directory: str


@dataclass(frozen=True)
class _Range:
    """Partition ``p``: rows ``lo[r]:hi[r]`` of each run ``r``."""

    p: int
    lo: tuple[int, ...]
    hi: tuple[int, ...]


def _init(ranges: _Ranges) -> _Ranges:
    return ranges


def _rank_range(ranges: _Ranges, task: _Range, progress: Progress) -> int:
    """Partition ``task.p``'s values ranked (dense, from 0) and written beside their
    rows' places (:func:`_ranked` reads them); returns how many distinct values it has."""
    pieces = [
        _slice(Path(path), lo, hi)
        for path, lo, hi in zip(ranges.paths, task.lo, task.hi, strict=True)
        if hi > lo
    ]
    if not pieces:
        return 0
    part = pl.from_arrow(pa.concat_tables(pieces))
    assert isinstance(part, pl.DataFrame)
    del pieces
    dense = part[_VALUE].rank("dense").cast(pl.UInt64).to_numpy(writable=True)  # from 1
    dense -= np.uint64(1)
    places, ranks = _rank_files(Path(ranges.directory), task.p)
    np.save(places, part[_PLACE].to_numpy())
    np.save(ranks, dense)
    return int(dense.max()) + 1


def _ranked(runs: Path, p: int) -> Iterator[tuple[npt.NDArray[np.int64], U64]]:
    """Partition ``p``'s rows' places and ranks, as :func:`_rank_range` wrote them, read
    through memory maps :data:`BLOCK` rows at a time (each block's ranks a copy)."""
    places, ranks = (np.load(path, mmap_mode="r") for path in _rank_files(runs, p))
    for lo in range(0, len(places), BLOCK):
        yield places[lo : lo + BLOCK], ranks[lo : lo + BLOCK].copy()


def _rank_files(runs: Path, p: int) -> tuple[Path, Path]:
    """Where partition ``p``'s rows' places and their ranks are written."""
    return runs / f"rank-{p:06d}.places.npy", runs / f"rank-{p:06d}.ranks.npy"


def mapped_order_keys(
    blocks: Iterable[pl.Series], count: int, direction: str, directory: Path
) -> tuple[U64, Bools]:
    """Each of ``count`` values' order key by a ``max:`` or ``min:`` rule
    (:func:`~pipeline.dedupe.table.order_keys`: a column that has them), and which are
    missing (a value's key may be a missing value's), as two memory-mapped arrays in
    ``directory`` (9 bytes a row of file pages), filled a block at a time."""
    directory.mkdir(parents=True, exist_ok=True)
    keys = _mapped(directory / "keys.npy", count, np.uint64)
    missing = _mapped(directory / "missing.npy", count, np.bool_)
    for at, values in _placed(blocks, count):
        keyed = order_keys(values, direction)
        if keyed is None:
            raise TypeError(f"a column of {values.dtype} has no order keys")
        keys[at : at + len(values)], missing[at : at + len(values)] = keyed
    keys.flush()
    missing.flush()
    return keys, missing


def _placed(blocks: Iterable[pl.Series], count: int) -> Iterator[tuple[int, pl.Series]]:
    """Each block with the place of its first value, the blocks holding ``count`` values
    in all (else a :class:`ValueError`, once more come or once they end)."""
    at = 0
    for values in blocks:
        if at + len(values) > count:
            raise ValueError(f"more than {count} values")
        yield at, values
        at += len(values)
    if at != count:
        raise ValueError(f"{at} values, not {count}")


def _mapped(path: Path, count: int, dtype: type[np.generic]) -> np.memmap:
    """A new memory-mapped array of ``count`` values in ``path``; an earlier file there is
    unlinked first, not truncated: a map of it keeps its pages."""
    path.unlink(missing_ok=True)
    return np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=(count,))


def _splitters(samples: list[pl.Series], partitions: int) -> pl.Series:
    """``partitions - 1`` values, ascending and distinct, that cut the sampled values
    into as many ranges of about equal counts (fewer where values repeat)."""
    if not samples or partitions <= 1:
        return pl.Series(_VALUE, [], samples[0].dtype if samples else pl.String)
    pooled = pl.concat(samples).sort()
    at = [len(pooled) * k // partitions for k in range(1, partitions)]
    return pooled.gather(at).unique(maintain_order=True)


def _bounds(path: Path, splitters: pl.Series) -> list[int]:
    """Where each range of values begins in a sorted run, and where the last ends: a
    value equal to a splitter is in the range it begins."""
    with pa.memory_map(str(path)) as source:
        run = ipc.open_file(source).read_all()
        values = pl.Series(_VALUE, run.column(_VALUE))
        cut = values.search_sorted(splitters, side="left").to_list() if len(splitters) else []
        return [0, *cut, len(values)]


def _slice(path: Path, lo: int, hi: int) -> pa.Table:
    """Rows ``lo:hi`` of a run, through a memory map of its own: only their pages are
    read, and the map goes with the last of them."""
    with pa.memory_map(str(path)) as source:
        return ipc.open_file(source).read_all().slice(lo, hi - lo)
