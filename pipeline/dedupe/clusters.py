"""Who duplicates whom: survivors, removals and clusters from group ids and near pairs.

Input: the rows in the stable order key, each with a survivor rank, an exact group, a
normalised group (which is also its text for near detection), and a partition (0:
unprotected splits; 1…: one per protected split). Output: for every removed row the kept
row it duplicates, the rule, and for near matches the estimated and verified similarity;
clusters of one kept row and the rows removed in its favour.

Only a row that shares its exact or normalised group with another row, or whose text has
a verified near pair, can be removed or have a row removed in its favour: the decision
runs over those rows alone (:func:`find_duplicates`). And the rows of one exact group in
one split are decided as one: its best-ranked row decides for them (it is their
representative), the others are removed in its favour or follow it where it goes (below).
The decision's arrays grow with the representatives (the distinct contents taking
part, per split); what grows with the rows that take part is their row ids and
representatives (16 bytes a row), and the verdicts asked for a slice at a time
(:class:`Duplicates`).

Semantics, in this order:

1. Inside each protected split: exact groups keep their best-ranked row; then normalised
   groups among the survivors; then near duplicates (below).
2. Contamination: a row of an unprotected split that matches a *kept* row of a protected
   split (same exact or normalised group, or a verified near pair) is removed in its
   favour (``contamination``). Protected rows are never removed for another split.
3. The remaining unprotected rows (every unprotected split together) as in 1.

Near duplicates are greedy in rank order: a row is removed only when its verified
similarity to a better-ranked *kept* row reaches the threshold, so every removal names a
kept row it really resembles (no transitive chains A~B~C removing C for A). Computed in
vectorised rounds: each round settles every row whose better-ranked neighbours are settled.

Why a representative decides for its group's rows: rows of one exact group have one
normalised group and one text, so every rule sees them alike. In a protected split the
group keeps its best-ranked row and removes the others in its favour (``exact``), whatever
happens to that row after; outside the protected splits contamination finds the same
kept protected row for each of them (its candidates are found by their groups and text),
and when none is found the group's best-ranked row of the unprotected splits keeps them.
So a removed representative's verdict (kept row, rule, match, similarities, cluster) is
each of its rows', and a kept representative keeps its rows by ``exact``. One
representative per split rather than per partition keeps each cluster's splits (a
partition of the unprotected splits holds several) in the representatives; the exact
rule then decides between the representatives of a group, as between its rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import polars as pl

from pipeline.core.arrays import distinct, isin
from pipeline.dedupe.minhash import NearPairs

__all__ = ["RULES", "Decided", "Duplicates", "Followed", "Verdicts", "decide", "find_duplicates"]

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

#: Rule codes, weakest evidence last: a row removed through a chain gets the last rule.
RULES: Final = ("", "exact", "normalised", "near", "contamination")
EXACT, NORMALISED, NEAR, CONTAMINATION = 1, 2, 3, 4


@dataclass
class Decided:
    """Per row decided (``rows``: their row ids, ascending): ``kept`` is the row id of the
    kept row a removed row duplicates (-1: not removed), ``rule`` a :data:`RULES` index,
    ``match`` the rule by which a contaminated row matched (exact/normalised/near),
    similarities NaN unless a near pair links the row to its kept row; ``cluster``
    numbers kept rows that have duplicates, in stable order. A row that is not
    decided is kept, with no cluster."""

    rows: I64
    kept: I64
    rule: npt.NDArray[np.int8]
    match: npt.NDArray[np.int8]
    estimated: F64
    verified: F64
    cluster: I64
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def removed(self) -> npt.NDArray[np.bool_]:
        return self.kept >= 0


class Verdicts:
    """Verdicts read from representatives' (:attr:`Duplicates.by_rep`), a row at a time
    by its place ``at``: a row whose verdict follows its representative's (the
    representative itself, or a row of a removed one) has that one's kept row and rule;
    any other is kept's removal in its favour by ``exact``. Its match, similarities and
    cluster are its representative's. What differs is which rows follow
    (:meth:`_follows`): :class:`Duplicates` for the rows that take part, :class:`Followed`
    for rows led by one of them."""

    def _follows(self, at: I64) -> tuple[Decided, I64, npt.NDArray[np.bool_]]:
        """The representatives' decision, the representatives of the rows at ``at``,
        and whether each row's verdict is its representative's."""
        raise NotImplementedError

    def kept_at(self, at: I64) -> I64:
        by_rep, rep, follows = self._follows(at)
        return np.where(follows, by_rep.kept[rep], by_rep.rows[rep])

    def rule_at(self, at: I64) -> npt.NDArray[np.int8]:
        by_rep, rep, follows = self._follows(at)
        return np.where(follows, by_rep.rule[rep], np.int8(EXACT)).astype(np.int8)

    def match_at(self, at: I64) -> npt.NDArray[np.int8]:
        by_rep, rep, _ = self._follows(at)
        return by_rep.match[rep]  # a kept representative's: none

    def estimated_at(self, at: I64) -> F64:
        by_rep, rep, _ = self._follows(at)
        return by_rep.estimated[rep]

    def verified_at(self, at: I64) -> F64:
        by_rep, rep, _ = self._follows(at)
        return by_rep.verified[rep]

    def cluster_at(self, at: I64) -> I64:
        by_rep, rep, _ = self._follows(at)
        return by_rep.cluster[rep]


@dataclass
class Duplicates(Verdicts):
    """The decision over the rows that take part (``rows``: their row ids, ascending), made
    by their representatives (see the module docstring): ``rep`` is each row's
    representative, a place in ``by_rep``, the decision over the representatives (its
    ``rows`` and ``kept`` are row ids, its clusters numbered over every row), and
    ``count`` how many rows each represents. A row's verdict is asked for by its place
    among ``rows`` (:meth:`kept_at` and the others), a slice at a time: a
    :class:`Decided` over every row that takes part held ~42 bytes a row, and its
    decision's temporaries ~100 more."""

    rows: I64
    rep: I64
    by_rep: Decided
    count: I64
    stats: dict[str, Any] = field(default_factory=dict)

    def _follows(self, at: I64) -> tuple[Decided, I64, npt.NDArray[np.bool_]]:
        """Whether each row's verdict is its representative's: the representative
        itself, or a row of one that is removed (a kept one keeps its other rows, by
        ``exact``)."""
        rep = self.rep[at]
        follows = (self.by_rep.rows[rep] == self.rows[at]) | (self.by_rep.kept[rep] >= 0)
        return self.by_rep, rep, follows

    def removed_at(self, at: I64) -> npt.NDArray[np.bool_]:
        rep = self.rep[at]
        removed: npt.NDArray[np.bool_] = self.by_rep.kept[rep] >= 0
        removed |= self.by_rep.rows[rep] != self.rows[at]
        return removed

    def keepers(self) -> I64:
        """The kept rows that have duplicates (row ids, ascending: in cluster order)."""
        return self.by_rep.rows[(self.by_rep.kept < 0) & (self.by_rep.cluster >= 0)]

    def removed_by_rule(self) -> I64:
        """How many rows each rule removed (indexed by :data:`RULES`)."""
        by_rep = self.by_rep
        gone = by_rep.kept >= 0
        counts = np.bincount(by_rep.rule[gone], weights=self.count[gone], minlength=len(RULES))
        counts[EXACT] += int((self.count[~gone] - 1).sum())
        return counts.astype(np.int64)

    @property
    def removed(self) -> npt.NDArray[np.bool_]:
        return self.removed_at(np.arange(len(self.rows), dtype=np.int64))

    def verdicts(self) -> Decided:
        """Every row's verdict at once (for tests and small tables)."""
        every = np.arange(len(self.rows), dtype=np.int64)
        return Decided(
            self.rows,
            self.kept_at(every),
            self.rule_at(every),
            self.match_at(every),
            self.estimated_at(every),
            self.verified_at(every),
            self.cluster_at(every),
            self.stats,
        )


@dataclass(frozen=True)
class Followed(Verdicts):
    """The verdicts of rows that took no part in the decision but follow a row that did
    (each led by it: its exact group's first row in their split, whose weight counts
    them): their leaders are at ``lead`` (places among :attr:`Duplicates.rows`). A
    follower is removed: in its leader's favour by ``exact`` where the leader is kept,
    else as its leader is (its kept row, rule, match, similarities and cluster), as a
    row a representative represents is (:class:`Duplicates`)."""

    found: Duplicates
    lead: I64

    def _follows(self, at: I64) -> tuple[Decided, I64, npt.NDArray[np.bool_]]:
        by_rep = self.found.by_rep
        rep = self.found.rep[self.lead[at]]
        return by_rep, rep, by_rep.kept[rep] >= 0


def _group_stage(
    rows: I64, ids: I64, rank: I64, target: I64, rule: npt.NDArray[np.int8], code: int
) -> I64:
    """Keep the best-ranked row of each id among ``rows`` (ascending); point the others
    at it. Where no id repeats, every row is kept, with no sort (its arrays were ~50
    bytes a row at the matching's peak)."""
    if _alone(ids, rows):
        return rows
    order = np.lexsort((rank[rows], ids[rows]))
    ordered = rows[order]
    sorted_ids = ids[ordered]
    first = np.ones(len(ordered), dtype=np.bool_)
    first[1:] = sorted_ids[1:] != sorted_ids[:-1]
    survivor = ordered[first][np.cumsum(first) - 1]
    removed = ~first
    target[ordered[removed]] = survivor[removed]
    rule[ordered[removed]] = code
    return np.sort(ordered[first])


def _edges_between(rows: I64, text: I64, edges: pl.DataFrame) -> pl.DataFrame:
    """Near pairs whose both texts belong to ``rows`` (one row per text), as row pairs."""
    of_text = pl.DataFrame({"text": text[rows], "row": rows})
    return (
        edges.join(of_text.rename({"text": "a", "row": "u"}), on="a")
        .join(of_text.rename({"text": "b", "row": "v"}), on="b")
        .select("u", "v", "estimated", "verified")
    )


def _near_stage(
    rows: I64,
    text: I64,
    rank: I64,
    edges: pl.DataFrame,
    target: I64,
    rule: npt.NDArray[np.int8],
) -> int:
    """Greedy maximal independent set in rank order over verified near pairs."""
    pairs = _edges_between(rows, text, edges)
    if pairs.height == 0:
        return 0
    u, v = pairs["u"].to_numpy(), pairs["v"].to_numpy()
    swap = rank[u] > rank[v]
    src, dst = np.where(swap, v, u), np.where(swap, u, v)
    nodes = distinct(np.concatenate([src, dst]))
    ls = np.searchsorted(nodes, src)
    ld = np.searchsorted(nodes, dst)
    status = np.zeros(len(nodes), np.int8)  # 0 undecided, 1 kept, 2 removed
    rounds = 0
    while (status == 0).any():
        rounds += 1
        undecided = status == 0
        blocked = np.bincount(ld[status[ls] == 0], minlength=len(nodes)) > 0
        beaten = np.bincount(ld[status[ls] == 1], minlength=len(nodes)) > 0
        status[undecided & beaten] = 2
        status[undecided & ~beaten & ~blocked] = 1
    # each removed row points at its best-ranked kept neighbour
    winning = (status[ls] == 1) & (status[ld] == 2)
    w_src, w_dst = src[winning], dst[winning]
    order = np.lexsort((rank[w_src], w_dst))
    w_src, w_dst = w_src[order], w_dst[order]
    first = np.ones(len(w_dst), dtype=np.bool_)
    first[1:] = w_dst[1:] != w_dst[:-1]
    target[w_dst[first]] = w_src[first]
    rule[w_dst[first]] = NEAR
    return rounds


def _dedupe_partition(
    rows: I64,
    exact: I64,
    normalised: I64,
    rank: I64,
    edges: pl.DataFrame | None,
    target: I64,
    rule: npt.NDArray[np.int8],
) -> int:
    survivors = _group_stage(rows, exact, rank, target, rule, EXACT)
    survivors = _group_stage(survivors, normalised, rank, target, rule, NORMALISED)
    if edges is None:
        return 0
    return _near_stage(survivors, normalised, rank, edges, target, rule)


def _resolve(target: I64) -> I64:
    """Follow pointers to the kept row at the end of each chain."""
    final = target.copy()
    while True:
        removed = final >= 0
        nxt = np.where(removed, target[np.maximum(final, 0)], -1)
        move = removed & (nxt >= 0)
        if not move.any():
            return final
        final[move] = nxt[move]


def _contamination(
    unprotected: I64,
    protected_kept: I64,
    exact: I64,
    normalised: I64,
    rank: I64,
    edges: pl.DataFrame | None,
    target: I64,
    rule: npt.NDArray[np.int8],
    match: npt.NDArray[np.int8],
    final: I64,
    protected_rows: I64,
) -> None:
    """Point unprotected rows that match a kept protected row at it."""
    if not len(unprotected) or not len(protected_rows):
        return
    kept_of = final[protected_rows]
    kept_of = np.where(kept_of >= 0, kept_of, protected_rows)
    # a row equal to a protected row removed in the split's own dedupe matches its kept
    # row as that row does: an exact copy of a near duplicate is a near match of it. It is
    # ranked with a similarity of 1 (to the copy), so among near matches it goes before a
    # direct near pair to another kept row; its reported similarity is the chain's.
    prot = pl.DataFrame(
        {
            "exact": exact[protected_rows],
            "norm": normalised[protected_rows],
            "kept": kept_of,
            "kept_rank": rank[kept_of],
            "via": _chain_rules(target, rule)[protected_rows],
        }
    )
    mine = pl.DataFrame(
        {"row": unprotected, "exact": exact[unprotected], "norm": normalised[unprotected]}
    )
    found = [
        mine.join(prot.select(group, "kept", "kept_rank", "via"), on=group).select(
            "row",
            "kept",
            "kept_rank",
            priority=pl.max_horizontal(pl.lit(priority), "via"),
            verified=pl.lit(1.0),
        )
        for group, priority in (("exact", EXACT), ("norm", NORMALISED))
    ]
    if edges is not None and len(protected_kept):
        kept_text = pl.DataFrame(
            {
                "b": normalised[protected_kept],
                "kept": protected_kept,
                "kept_rank": rank[protected_kept],
            }
        )
        found.append(
            mine.join(edges, left_on="norm", right_on="a")
            .join(kept_text, on="b")
            .select("row", "kept", "kept_rank", priority=pl.lit(NEAR), verified="verified")
        )
    best = (
        pl.concat(found, how="vertical_relaxed")
        .sort(
            ["row", "priority", "verified", "kept_rank"],
            descending=[False, False, True, False],
        )
        .unique("row", keep="first", maintain_order=True)
    )
    rows = best["row"].to_numpy()
    target[rows] = best["kept"].to_numpy()
    rule[rows] = CONTAMINATION
    match[rows] = best["priority"].to_numpy().astype(np.int8)


def _chain_rules(target: I64, rule: npt.NDArray[np.int8]) -> npt.NDArray[np.int8]:
    """Each row's rule toward its final kept row: a chain exact → normalised → near is
    as strong as its weakest link, the largest code (0: a kept row)."""
    chained = rule.copy()
    walk = target.copy()
    while (walk >= 0).any():
        step = walk >= 0
        chained[step] = np.maximum(chained[step], rule[walk[step]])
        walk[step] = target[walk[step]]
    return chained


def _symmetric_edges(near: NearPairs) -> pl.DataFrame:
    a = pl.DataFrame(
        {"a": near.left, "b": near.right, "estimated": near.estimated, "verified": near.verified}
    )
    return pl.concat([a, a.select(a="b", b="a", estimated="estimated", verified="verified")])


def find_duplicates(
    rank: I64,
    exact: I64,
    normalised: I64,
    partition: I64,
    near: NearPairs | None,
    split: I64 | None = None,
    weight: I64 | None = None,
) -> Duplicates:
    """Decide every row (see the module docstring): the rows that can take part
    (:func:`_participants`) are decided by their representatives, each exact group's
    best-ranked row in each split (``split``: dense ids; none: one split), among
    themselves (:func:`decide`), as every row would be among all. ``normalised`` ids
    index the texts ``near`` was computed over. ``weight``: how many rows each row
    stands for, where the rows it represents are not given (:class:`Followed` decides
    them): itself and those."""
    rows = _participants(exact, normalised, near, weight)
    rep, reps = _representatives(rows, rank, exact, partition, split)
    if len(reps) == len(rows) == len(rank):
        # every row takes part and represents itself (a run's exact groups, led on the
        # engine): its row id, its representative and that one's row id are one array,
        # and its count is its weight (8 bytes a row beside the weight, not 32)
        rep = at = rows
        count = np.ones(len(rows), np.int64) if weight is None else weight
        # decided as given: each key gathered at ``at`` was a copy (32 bytes a row)
        by_rep = decide(rank, exact, normalised, partition, near)
    else:
        at = rows[reps]
        weights = None if weight is None else weight[rows]
        count = np.bincount(rep, weights, minlength=len(at)).astype(np.int64)
        by_rep = decide(rank[at], exact[at], normalised[at], partition[at], near)
    del reps
    by_rep.kept = np.where(by_rep.kept >= 0, at[np.maximum(by_rep.kept, 0)], -1)
    by_rep.rows = at
    by_rep.cluster = _clusters(by_rep, count)
    stats = {**by_rep.stats, "clusters": int(by_rep.cluster.max(initial=-1)) + 1}
    return Duplicates(rows, rep, by_rep, count, stats)


def _representatives(
    rows: I64, rank: I64, exact: I64, partition: I64, split: I64 | None
) -> tuple[I64, I64]:
    """Each of ``rows``' representative (a place among the representatives) and the
    representatives' places among ``rows`` (ascending): the best-ranked row of each
    exact group, partition and split. A partition or split of every row orders nothing
    and is left out of the sort (three 8-byte keys of every row taking part, and their
    sorted copies, where a dataset has no splits). Where no two rows share an exact
    group (a run's leaders in one split), each represents itself, with no sort (its
    arrays were ~70 bytes a row at the matching's peak)."""
    if _alone(exact, rows):
        alone = np.arange(len(rows), dtype=np.int64)
        return alone, alone
    varied = [k for k in (partition, split) if k is not None and len(k) and k.min() != k.max()]
    keys = [exact[rows], *(key[rows] for key in varied)]
    order = np.lexsort((rank[rows], *reversed(keys)))
    first = np.zeros(len(order), np.bool_)
    first[:1] = True
    for key in keys:
        ordered = key[order]
        first[1:] |= ordered[1:] != ordered[:-1]
    del keys, ordered
    group = np.cumsum(first) - 1
    reps = order[first]
    by_place = np.argsort(reps)
    renumbered = np.empty(len(reps), np.int64)
    renumbered[by_place] = np.arange(len(reps), dtype=np.int64)
    rep = np.empty(len(rows), np.int64)
    rep[order] = renumbered[group]
    return rep, reps[by_place]


def _alone(ids: I64, rows: I64) -> bool:
    """Whether no two of ``rows`` share an id, counted where the ids are dense ranks
    (each below their count, as the matching's groups are); any other ids (a caller's
    hashes, negative ids) are ``False``: the caller sorts them."""
    at = ids[rows]
    if not len(at):
        return True
    if int(at.min()) < 0 or int(at.max()) >= len(ids):
        return False
    return int(np.bincount(at).max()) == 1


def _clusters(by_rep: Decided, count: I64) -> I64:
    """The clusters over every row: a kept representative that keeps another
    representative or a row it represents holds one, numbered in row order; a removed
    one is in its kept row's."""
    kept = by_rep.kept < 0
    holds = kept & ((by_rep.cluster >= 0) | (count > 1))
    cluster = np.full(len(count), -1, np.int64)
    cluster[holds] = np.arange(int(holds.sum()), dtype=np.int64)
    gone = np.flatnonzero(~kept)
    cluster[gone] = cluster[np.searchsorted(by_rep.rows, by_rep.kept[gone])]
    return cluster


def _participants(exact: I64, normalised: I64, near: NearPairs | None, weight: I64 | None) -> I64:
    """The rows that share an exact or a normalised group, or stand for more rows than
    their own (``weight``), or whose text is in a near pair, ascending (group ids and
    texts are dense ranks: counted, not sorted)."""
    taking_part = np.bincount(exact)[exact] > 1
    if weight is not None:
        taking_part |= weight > 1
    taking_part |= np.bincount(normalised)[normalised] > 1
    if near is not None:
        taking_part |= isin(normalised, np.concatenate([near.left, near.right]))
    return np.flatnonzero(taking_part).astype(np.int64)


def decide(
    rank: I64, exact: I64, normalised: I64, partition: I64, near: NearPairs | None
) -> Decided:
    """Decide every row given, among them alone (``rows`` and ``kept`` are their
    places): :func:`find_duplicates` over its representatives, and its reference over
    every row in tests."""
    n = len(rank)
    target = np.full(n, -1, np.int64)
    rule = np.zeros(n, np.int8)
    match = np.zeros(n, np.int8)
    edges = _symmetric_edges(near) if near is not None else None
    stats: dict[str, Any] = {"near_rounds": 0}
    protected = sorted(int(p) for p in np.unique(partition) if p > 0)
    for p in protected:
        rows = np.flatnonzero(partition == p).astype(np.int64)
        stats["near_rounds"] += _dedupe_partition(
            rows, exact, normalised, rank, edges, target, rule
        )
    final = _resolve(target)
    protected_rows = np.flatnonzero(partition > 0).astype(np.int64)
    protected_kept = protected_rows[final[protected_rows] < 0]
    unprotected = np.flatnonzero(partition == 0).astype(np.int64)
    _contamination(
        unprotected, protected_kept, exact, normalised, rank, edges,
        target, rule, match, final, protected_rows,
    )  # fmt: skip
    remaining = unprotected[target[unprotected] < 0]
    del final, unprotected, protected_rows  # not read again: 16 bytes a row
    stats["near_rounds"] += _dedupe_partition(
        remaining, exact, normalised, rank, edges, target, rule
    )
    stats["protected_overlap_rows"] = _protected_overlap(
        protected_kept, partition, normalised, edges
    )
    return _finish(target, rule, match, normalised, edges, stats)


def _protected_overlap(
    kept: I64, partition: I64, normalised: I64, edges: pl.DataFrame | None
) -> int:
    """Kept protected rows with an equal or near row kept in another protected split
    (reported only: neither may be removed)."""
    if not len(kept):
        return 0
    rows = pl.DataFrame({"row": kept, "norm": normalised[kept], "part": partition[kept]})
    pairs = rows.join(rows, on="norm", suffix="_o")
    if edges is not None:
        near = rows.join(edges, left_on="norm", right_on="a").join(
            rows.rename({"row": "row_o", "norm": "b", "part": "part_o"}), on="b"
        )
        pairs = pl.concat(
            [pairs.select("row", "part", "part_o"), near.select("row", "part", "part_o")]
        )
    return int(pairs.filter(pl.col("part") != pl.col("part_o"))["row"].n_unique())


def _finish(
    target: I64,
    rule: npt.NDArray[np.int8],
    match: npt.NDArray[np.int8],
    normalised: I64,
    edges: pl.DataFrame | None,
    stats: dict[str, Any],
) -> Decided:
    n = len(target)
    final = _resolve(target)
    final_rule = _chain_rules(target, rule)
    removed = np.flatnonzero(final >= 0)
    linked = removed[normalised[removed] != normalised[final[removed]]]
    # NaN throughout where no near pair links a row to its kept row: one value read as
    # every row's (16 bytes a row less through the verdicts; read, never written)
    estimated = verified = np.broadcast_to(np.float64(np.nan), n)
    if edges is not None and len(linked):
        estimated, verified = np.full(n, np.nan), np.full(n, np.nan)
        found = pl.DataFrame(
            {"row": linked, "a": normalised[linked], "b": normalised[final[linked]]}
        ).join(edges, on=["a", "b"], how="left", maintain_order="left")
        estimated[linked] = found["estimated"].fill_null(np.nan).to_numpy()
        verified[linked] = found["verified"].fill_null(np.nan).to_numpy()
    kept_rows = distinct(final[removed])
    cluster = np.full(n, -1, np.int64)
    cluster[kept_rows] = np.arange(len(kept_rows))
    cluster[removed] = cluster[final[removed]]
    stats["clusters"] = len(kept_rows)
    return Decided(
        np.arange(n, dtype=np.int64), final, final_rule, match, estimated, verified, cluster, stats
    )
