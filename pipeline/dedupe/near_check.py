"""The near rule's exact check on the engine: the candidate pairs' exact Jaccard
similarities computed a block of pairs at a time, each block by a task that reads its
own texts, so no process holds the shingle sets of every candidate text.

The driver cuts the candidate pairs (sorted) into blocks of consecutive pairs, each
naming at most :data:`BLOCK_TEXTS` distinct texts and :data:`BLOCK_PAIRS` pairs
(:func:`blocks`), and stages each block: where its texts are (their *addresses*, in
the order they are stored: a run's shard and line, a dataset's row) and its pairs as
places among them. A task per block reads its texts through the caller's
:class:`TextSource`, shingles them and compares its pairs
(:func:`~pipeline.dedupe.minhash.exact_similarities`), and returns only the pairs that
reach the threshold. A pair's similarity depends on its two texts alone, so the pairs
kept are the same for any cut into blocks, any worker count and any engine.

Memory: a task holds its block's texts' shingle sets (8 bytes a distinct shingle: ~26
MB for 32,768 texts of 100 shingles) and the check's join of ``_VERIFY_CHUNK`` hashes a
side (~100 MB); the driver holds the pairs (16 bytes each) and what the tasks return.
A text named by several blocks is read by each of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa

from pipeline.core.arrays import distinct
from pipeline.dedupe.minhash import LshParams, exact_similarities
from pipeline.engines import Engine, Progress, Step
from pipeline.storage import RunStorage

__all__ = ["BLOCK_PAIRS", "BLOCK_TEXTS", "NearCheck", "TextSource", "blocks"]

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

#: Distinct texts a block names at most (its task holds their shingle sets)
BLOCK_TEXTS: Final = 1 << 15
#: Pairs a block holds at most
BLOCK_PAIRS: Final = 1 << 20
#: the staged columns of a block's pairs: their texts' places among its addresses
_LEFT: Final = "_left"
_RIGHT: Final = "_right"


def blocks(left: I64, right: I64, texts: int, pairs: int) -> list[tuple[int, int]]:
    """[lo, hi) ranges of consecutive pairs that cover them all, each naming at most
    ``texts`` distinct texts (but a block of one pair, which names two) and holding at
    most ``pairs`` pairs. A block grows by doubling while it fits, then by halving the
    step until it is within an eighth of its size of the first size that does not fit:
    pairs sorted by their better text share it, so a block names far fewer texts than
    twice its pairs."""
    cut: list[tuple[int, int]] = []
    n, lo = len(left), 0
    while lo < n:
        size = min(max(min(texts // 2, pairs), 1), n - lo)  # any k pairs name ≤ 2k texts
        bad = 0  # the size found not to fit (0: none yet)
        while size < min(pairs, n - lo):
            wider = min(2 * size, pairs, n - lo)
            if _named(left, right, lo, lo + wider) > texts:
                bad = wider
                break
            size = wider
        while bad and bad - size > max(size // 8, 1):
            middle = (size + bad) // 2
            if _named(left, right, lo, lo + middle) > texts:
                bad = middle
            else:
                size = middle
        cut.append((lo, lo + size))
        lo += size
    return cut


def _named(left: I64, right: I64, lo: int, hi: int) -> int:
    """How many distinct texts the pairs [lo, hi) name."""
    return len(distinct(np.concatenate([left[lo:hi], right[lo:hi]])))


class TextSource(Protocol):
    """Where a check task reads texts: picklable, compared by value (a worker keeps it).
    ``texts(addresses)``: the normalised key texts at ``addresses`` (a table the
    caller's ``addresses`` made), in their order."""

    def texts(self, addresses: pa.Table) -> pl.Series: ...


@dataclass(frozen=True, eq=False)
class NearCheck:
    """The exact check of one stem's candidates (a run's kind, a dataset), on the
    ``engine``, its blocks staged in ``storage``. ``addresses(rows)``: where the texts
    of some rows are, a table with a row per text (in the driver); ``source`` reads
    texts from such a table (in a task); ``params`` gives the threshold. Called with
    each pair's two texts as rows (in stored order), it gives the places (ascending) of
    the pairs whose exact similarity reaches the threshold, and those similarities
    (:attr:`~pipeline.dedupe.row_keys.RowKeys.check`)."""

    engine: Engine
    storage: RunStorage
    stem: str
    addresses: Callable[[I64], pa.Table]
    source: TextSource
    params: LshParams

    def __call__(self, left: I64, right: I64, stored: I64) -> tuple[I64, F64]:
        """``left``/``right``: each pair's two texts (ids); ``stored[text]``: the row
        that text is read from (the order they are stored in)."""
        cut = blocks(left, right, BLOCK_TEXTS, BLOCK_PAIRS)
        for index, (lo, hi) in enumerate(cut):
            named = distinct(np.concatenate([left[lo:hi], right[lo:hi]]))
            rows = stored[named]
            order = np.argsort(rows, kind="stable")  # the block's texts in stored order
            place = np.empty(len(named), np.int64)
            place[order] = np.arange(len(named), dtype=np.int64)
            pairs = pa.table(
                {
                    _LEFT: pa.array(place[np.searchsorted(named, left[lo:hi])], pa.int64()),
                    _RIGHT: pa.array(place[np.searchsorted(named, right[lo:hi])], pa.int64()),
                }
            )
            self.storage.stage_table(index, _texts_stem(self.stem), self.addresses(rows[order]))
            self.storage.stage_table(index, _pairs_stem(self.stem), pairs)
        task = _CheckTask(self.storage, self.stem, self.source, self.params)
        found = self.engine.map(Step(_init, (task,), _check_block), range(len(cut)))
        places = [at + lo for (lo, _), (at, _) in zip(cut, found, strict=True)]
        values = [similarity for _, similarity in found]
        if not places:
            return np.zeros(0, np.int64), np.zeros(0, np.float64)
        return np.concatenate(places), np.concatenate(values)


@dataclass(frozen=True)
class _CheckTask:
    """What every check task needs (compared by value: a worker keeps it as its state)."""

    storage: RunStorage
    stem: str
    source: TextSource
    params: LshParams


def _texts_stem(stem: str) -> str:
    return f"{stem}.near-check-texts"


def _pairs_stem(stem: str) -> str:
    return f"{stem}.near-check-pairs"


def _init(task: _CheckTask) -> _CheckTask:
    return task


def _check_block(task: _CheckTask, block: int, progress: Progress) -> tuple[I64, F64]:
    """Block ``block``'s pairs that reach the threshold (places in the block) and their
    exact similarities."""
    addresses = task.storage.staged_table(block, _texts_stem(task.stem))
    pairs = task.storage.staged_table(block, _pairs_stem(task.stem))
    left, right = pairs[_LEFT].to_numpy(), pairs[_RIGHT].to_numpy()

    def texts_of(at: I64) -> pl.Series:
        return task.source.texts(addresses.take(pa.array(at, pa.int64())))

    similarity = exact_similarities(left, right, texts_of, task.params)
    keep = np.flatnonzero(similarity >= task.params.threshold)
    return keep.astype(np.int64), similarity[keep]
