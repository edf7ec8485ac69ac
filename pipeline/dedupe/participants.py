"""The rows that take part in dedupe, found without a value of every row in one process.

Only a row that shares its exact or normalised group with another row, or whose text is
in a verified near pair, can be removed or have a row removed in its favour
(:func:`~pipeline.dedupe.clusters.find_duplicates` decides among those rows alone, as it
would among all). Grouping checks on the engine give the rows that share a digest and
each one's group (:class:`Shared`); the near search on the engine gives the verified
pairs, over texts described by their exceptions
(:class:`~pipeline.dedupe.partitions.SparseTexts`, :func:`sparse_texts`). Both a run's
dedupe stage (:mod:`pipeline.decide.stages.dedupe`) and ``rowgate dedupe``
(:mod:`pipeline.jobs.dataset_keys`) find their rows so, and give the matching their
keys (:func:`participant_keys`): every array here grows with the rows that take part,
not with the rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import numpy as np
import numpy.typing as npt
import polars as pl

from pipeline.core.arrays import distinct, distinct_union, places_in
from pipeline.dedupe.partitions import NULL_TIE, Ranking, Ranks, SparseTexts
from pipeline.dedupe.row_keys import RowKeys
from pipeline.dedupe.table import MISSING_KEY, group_texts, order_keys

__all__ = [
    "NONE_SHARED",
    "Led",
    "NearPlaces",
    "Participants",
    "Shared",
    "dense_ranking",
    "keyed_ranks",
    "mapped_ranking",
    "participant_keys",
    "sparse_texts",
    "survivor_ranks",
]

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]


class Shared(NamedTuple):
    """The rows that share a key (a digest) with another row: their places, ascending,
    and their groups (dense, numbered as the groups' first rows come); where the rows
    of a group in one split are led by their first (a run's exact groups), only the
    leaders, and how many rows each leads (``led``, itself included)."""

    places: I64
    ids: I64
    led: I64 | None = None

    @classmethod
    def of(cls, places: I64, labels: npt.NDArray[Any], led: I64 | None = None) -> Shared:
        """The rows at ``places`` (ascending, each sharing its group with another of
        them, or leading another row), grouped by ``labels`` (one a row, lined up with
        ``places``), which order as their groups' first rows do (a group's first row,
        or its encoding)."""
        return cls(places, np.unique(labels, return_inverse=True)[1].astype(np.int64), led)


NONE_SHARED: Final = Shared(np.zeros(0, np.int64), np.zeros(0, np.int64))


@dataclass(frozen=True)
class Led:
    """The rows another row leads, which take no part in the matching (with the exact
    rule on, an exact group's rows in one split are led by their best-ranked by the
    survivor rule: :attr:`~pipeline.decide.partitioned.HashCheck.leads`): their places,
    ascending (in a run's state; among a dataset's rows), and each one's leader's place
    among the rows that take part, or among those the matching decides (its row ids;
    each one's verdict is made from its leader's:
    :class:`~pipeline.dedupe.clusters.Followed`). The leaders' groups, found with them
    (a :class:`Shared` with how many rows each leads), are given beside them: they are
    the participants' exact groups (:meth:`Participants.of`), and held here too they
    were 24 bytes a leader through the matching."""

    rows: I64
    leaders: I64


class NearPlaces(NamedTuple):
    """The near rule's verified pairs as places (better, worse), their similarities,
    and how many distinct candidate pairs there were, verified or not."""

    better: I64
    worse: I64
    similarity: F64
    candidates: int


@dataclass(frozen=True)
class Participants:
    """The rows that take part: their ``places``, ascending; their exact and normalised
    groups (dense ids, lined up with ``places``: a row that shares neither is a group of
    its own), for the rules that are on; and the near rule's pairs, if it ran."""

    places: I64
    exact: I64 | None
    normalised: I64 | None
    near: NearPlaces | None
    #: how many rows each row stands for, itself included, where exact groups were
    #: found led (:attr:`Shared.led`): its own and the rows it leads
    weight: I64 | None = None

    @classmethod
    def of(
        cls, exact: Shared | None, normalised: Shared | None, near: NearPlaces | None
    ) -> Participants:
        """The rows that share a group of a rule that is on (``None``: off), or whose
        text is in a near pair."""
        parts = [s.places for s in (exact, normalised) if s is not None]
        if near is not None:
            parts += [near.better, near.worse]
        places = distinct(np.concatenate([np.zeros(0, np.int64), *parts]))
        weight = None
        if exact is not None and exact.led is not None:
            weight = np.ones(len(places), np.int64)
            weight[np.searchsorted(places, exact.places)] = exact.led
        return cls(
            places,
            _ids(places, exact) if exact is not None else None,
            _ids(places, normalised) if normalised is not None else None,
            near,
            weight,
        )


def _ids(places: I64, found: Shared) -> I64:
    """The groups of the rows at ``places`` (ascending): ``found``'s for the rows it
    holds, a group of its own for each other row (numbered after them)."""
    ids = np.full(len(places), -1, np.int64)
    ids[np.searchsorted(places, found.places)] = found.ids
    alone = np.flatnonzero(ids < 0)
    ids[alone] = int(found.ids.max(initial=-1)) + 1 + np.arange(len(alone), dtype=np.int64)
    return ids


def survivor_ranks(rule: str, count: int, by_column: Callable[[], Ranking]) -> Ranking:
    """Each place's survivor rank among ``count`` rows, as
    :func:`~pipeline.dedupe.table.survivor_rank` orders every row: its place
    (``first``), the places reversed (``last``), or ``by_column()``'s ranks."""
    if rule == "first":
        return lambda places: Ranks(None, places)
    if rule == "last":
        return lambda places: Ranks(None, count - 1 - places)
    return by_column()


def dense_ranking(ranks: I64) -> Ranking:
    """The ranks of every row (:func:`~pipeline.dedupe.table.survivor_rank`), by place."""
    return lambda places: Ranks(None, ranks[places])


def keyed_ranks(values: pl.Series, places: I64, direction: str) -> Ranks | None:
    """The survivor ranks of the rows at ``places`` by a ``max:`` or ``min:`` rule, from
    their ``values`` alone (lined up with them): each value's order key and the row's
    place (:class:`Ranks`). ``None`` where the column's type has no order keys (text:
    :func:`mapped_ranking`; another type: ranked among every row, :func:`dense_ranking`)."""
    keyed = order_keys(values, direction)
    if keyed is None:
        return None
    keys, missing = keyed
    return _keyed(keys, missing, places)


def mapped_ranking(
    keys: npt.NDArray[np.uint64], missing: npt.NDArray[np.bool_] | None = None
) -> Ranking:
    """The survivor ranks of the rows at some places from every row's order key and
    whether its value is ``missing`` (memory-mapped, :mod:`pipeline.dedupe.survivor_keys`:
    only the rows asked for are read); ``missing`` ``None`` where no value's key is
    :data:`~pipeline.dedupe.table.MISSING_KEY`, a missing value's (a column of text's)."""

    def ranking(places: I64) -> Ranks:
        found = np.array(keys[places], np.uint64)
        absent = found == MISSING_KEY if missing is None else np.array(missing[places])
        return _keyed(found, absent, places)

    return ranking


def _keyed(keys: npt.NDArray[np.uint64], missing: npt.NDArray[np.bool_], places: I64) -> Ranks:
    """:class:`Ranks` of the rows at ``places`` by their values' order ``keys``: ties by
    place, with :data:`NULL_TIE` set where a value is ``missing``."""
    ties = np.array(places, np.int64)
    ties[missing] |= NULL_TIE
    return Ranks(keys, ties)


def sparse_texts(grouped: Shared, rank: Ranking, led: I64 | None = None) -> SparseTexts:
    """The near rule's texts: every row but the later rows of each group of ``grouped``
    (the rows that share their normalised digest, or their fingerprint with that rule
    off) and the rows ``led`` (ascending: :attr:`Led.rows`, where the rows are every
    row of a dataset), each ranked by ``rank`` (a group's text by its group's best
    rank). A row led shares its leader's key, so its leader, or another row of the
    group, is its text."""
    empty = np.zeros(0, np.int64)
    excluded = empty
    firsts = empty
    best = rank(empty)
    if len(grouped.places):
        places, ids = grouped.places, grouped.ids
        ranks = rank(places)
        order = ranks.order()  # the grouped rows' ranks among them, then each group's best
        first, best_among = group_texts(ids, places_in(order))
        later = first[ids] != np.arange(len(places))
        several = np.bincount(ids) > 1
        firsts = places[first[several]]
        by_place = np.argsort(firsts)  # the texts in place order, however groups are numbered
        excluded, firsts = places[later], firsts[by_place]
        best = ranks.take(order[best_among[several][by_place]])
    if led is not None and len(led):
        excluded = distinct_union(excluded, led)
    return SparseTexts(excluded, firsts, best, rank)


def participant_keys(
    found: Participants,
    signatures: Callable[[I64], npt.NDArray[np.uint32]] | None,
    lineage: Callable[[I64], pl.DataFrame],
) -> RowKeys:
    """What the matching reads of the rows taking part (positions among
    ``found.places`` are their row ids): their groups, and their near pairs between
    their groups' texts; ``signatures`` (permutations × rows) and ``lineage`` of some of
    them, by those positions (the verified pairs', and the rows a pointer or a cluster
    names)."""
    if found.near is None:
        return RowKeys(found.normalised, None, None, found.exact, lineage, found.weight)
    better, worse, similarity, candidates = found.near
    places = found.places

    def near(groups: I64, text_rows: I64, text_rank: I64) -> tuple[I64, I64, F64, int]:
        # a pair's texts are the first rows of their groups, which take part whole
        at = [np.searchsorted(places, side) for side in (better, worse)]
        if not all((text_rows[groups[i]] == i).all() for i in at):
            raise AssertionError("a near pair names a row that is not its group's text")
        left, right = groups[at[0]], groups[at[1]]
        order = np.lexsort((right, left))
        return left[order], right[order], similarity[order], candidates

    return RowKeys(found.normalised, near, signatures, found.exact, lineage, found.weight)
