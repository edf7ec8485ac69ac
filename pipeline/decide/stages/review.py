"""Review policy stage (order 150): a rubric's ``review_policy`` applied across records.

Seed 000's rubric carries ``"review_policy": {"independent_reviews": 3,
"minimum_accept_votes": 2, "disagreement_action": "adjudicate"}`` and its processing order
runs "independent review" after the cross-record invariants. For a kind scored with such a
rubric (``[scoring.<kind>]``, unless it sets ``review_policy = "record"``):

* a **review** is a row still accepted after the cross-record rules (a retry or a
  conflicting body of one submission is out by then, so one assignment counts once; a
  quarantined row is not counted); the reviews of one **item** are the rows with equal
  :meth:`~pipeline.kinds.base.RecordKind.review_subject` (pairwise: the conversation and
  the unordered pair of candidates) in one split: each split's reviews are counted alone
  (each split needs its own), and no row is removed for a row of another split (only
  dedupe's contamination rule acts across splits, on copies);
* a review is an **accept vote** when its own scores — the criteria bindings read from
  the row, the reviewer's ratings — meet every criterion's minimum and the weighted
  acceptance score (:func:`~pipeline.rubrics.scoring.score_frame` with the gates left
  out: they judge the proposed code, not the reviewer, and the scoring stage runs them);
* accept votes **agree** when they give the same verdict: the same content fingerprint
  (pairwise: the same preferred response, or the same tie/neither label, and the same
  patch).

Too few reviews, fewer accept votes than the minimum, or accept votes that disagree → every
review of the item gets ``review.<disagreement_action>`` (``adjudicate`` and ``escalate``
are quarantined for a person, ``reject`` rejected). Otherwise the first accept vote in the
order key (input, line) is kept and the item's other reviews become its duplicates
(``review.agreeing``, ``review.outvoted``; ``_dedupe_rule = "review"``). It runs before
dedupe, which would otherwise remove agreeing reviews as exact duplicates (they share the
content fingerprint) before they were counted, and before scoring, which then scores the
kept row.

Hash-first like the cross-record rules: rows are grouped on a 64-bit hash of the subject,
and only rows whose hash repeats are compared on the subject's SHA-256 (as exact dedupe
compares content fingerprints: a 32-byte digest staged, not the subject's text),
partition by partition on the engine (:meth:`~pipeline.decide.context.GlobalContext.groups`),
so a collision of the 64-bit hash never merges two items; the driver holds an item id a
review, not its subject.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final, cast

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa

from pipeline.core.config import CampaignConfig
from pipeline.core.reasons import REVIEW_ACTIONS, REVIEW_AGREEING, REVIEW_OUTVOTED, Disposition
from pipeline.decide.context import (
    DEDUPE_RULE,
    DUPLICATE_OF,
    KEYS,
    PART_ROWS,
    Decisions,
    GlobalContext,
    OutputColumn,
    keys_of,
    lines_by_shard,
    register_stage,
)
from pipeline.decide.partitioned import (
    ShardTask,
    evaluate_shard,
    partition_count,
    partition_order,
    shard_tasks,
    task_lines,
)
from pipeline.decide.repeats import run_starts
from pipeline.dedupe.keys import DedupeKey, key_columns
from pipeline.dedupe.row_keys import digest_bytes, sha256s
from pipeline.engines import Progress, Step
from pipeline.kinds import get_kind
from pipeline.rubrics.bindings import ScoringPlan
from pipeline.rubrics.campaign import criteria_inputs, review_policy_of, scoring_plan
from pipeline.rubrics.model import ReviewPolicy, State
from pipeline.rubrics.scoring import WEIGHTED_STATE, score_frame
from pipeline.storage import RunStorage

__all__ = ["ReviewStage"]

_GROUP: Final = "_subject"
#: an item: its split and its subject. Reviews are counted within a split: reviews of
#: one subject in two splits counted together removed a protected split's rows as
#: agreeing with another split's, and counted one submission twice when a copy of it was
#: in another split (no retry there).
_ITEM: Final = ("_split", _GROUP)


@register_stage
class ReviewStage:
    name = "review"
    order = 150
    reason_codes = (REVIEW_AGREEING, REVIEW_OUTVOTED, *(c for c, _ in REVIEW_ACTIONS.values()))

    def __init__(self) -> None:
        self._found: dict[str, tuple[ScoringPlan, ReviewPolicy] | None] = {}

    def enabled(self, config: CampaignConfig) -> bool:
        return bool(config.scoring)

    def policy(self, ctx: GlobalContext, kind: str) -> tuple[ScoringPlan, ReviewPolicy] | None:
        if kind not in self._found:
            plan = scoring_plan(ctx.config, kind)
            policy = review_policy_of(ctx.config, kind, plan)
            self._found[kind] = (plan, policy) if plan is not None and policy else None
        return self._found[kind]

    def output_columns(self, ctx: GlobalContext, kind: str) -> Sequence[OutputColumn]:
        return [DUPLICATE_OF, DEDUPE_RULE] if self.policy(ctx, kind) else []

    def decide(self, ctx: GlobalContext, kind: str, rows: pl.DataFrame) -> Decisions:
        found = self.policy(ctx, kind)
        if found is None:
            plan = scoring_plan(ctx.config, kind)
            if plan is not None and plan.rubric.review_policy is not None:
                ctx.notes.setdefault(self.name, {})[kind] = {
                    **plan.rubric.review_policy.describe(),
                    "applied": False,
                }
            return None
        _, policy = found
        subject = get_kind(kind).review_subject()
        assert subject is not None  # review_policy_of refused the kind otherwise
        counts, decisions = _items_on_engine(ctx, kind, subject, rows, policy)
        if not counts["reviews"]:
            return None
        code, _ = REVIEW_ACTIONS[policy.disagreement_action]
        decided = {
            code: counts["refused"],
            REVIEW_AGREEING: counts["agreeing"],
            REVIEW_OUTVOTED: counts["outvoted"],
        }
        ctx.notes.setdefault(self.name, {})[kind] = {
            **policy.describe(),
            "applied": True,
            "reviews": counts["reviews"],
            "accept_votes": counts["accept_votes"],
            "decided": dict(sorted((c, n) for c, n in decided.items() if n)),
        }
        return decisions if any(decided.values()) else None


#: what the review stage counts of a kind's reviews (the manifest's notes)
_COUNTS: Final = ("reviews", "accept_votes", "refused", "agreeing", "outvoted")


def _items_in_driver(
    ctx: GlobalContext, kind: str, subject: DedupeKey, rows: pl.DataFrame, policy: ReviewPolicy
) -> tuple[dict[str, int], Iterator[pl.DataFrame]]:
    """The reference path (tests): every review's vote, item and fingerprint gathered in
    the driver, the items decided there (:func:`_decide`): ~300 bytes a review that
    shares its subject at the stage's peak. The counts of :data:`_COUNTS`, and the
    decisions."""
    votes = _votes(ctx, kind, rows)
    if votes.height == 0:
        return dict.fromkeys(_COUNTS, 0), iter(())
    decided = _decide(_reviews(ctx, kind, subject, rows, votes), ctx.order_key(), policy)
    counts = {
        "reviews": votes.height,
        "accept_votes": int(votes["_vote"].sum()),
        **_decided_counts(decided),
    }
    kept = ctx.with_lineage(decided.reviews[decided.kept_rows].select(KEYS))
    return counts, _decisions(decided, ctx.fetched(kind, kept, ["_record_sha256"]), policy)


def _decided_counts(decided: _Decided) -> dict[str, int]:
    return {
        "refused": int(decided.refused.sum()),
        "agreeing": int((~decided.refused & decided.vote).sum()),
        "outvoted": int((~decided.refused & ~decided.vote).sum()),
    }


def _items_on_engine(
    ctx: GlobalContext, kind: str, subject: DedupeKey, rows: pl.DataFrame, policy: ReviewPolicy
) -> tuple[dict[str, int], Iterator[pl.DataFrame]]:
    """Every accepted row is a review; its items are decided on the engine, partition
    by partition, and the driver holds a part of the decisions at a time: the counts of
    :data:`_COUNTS`, and the decisions, read back a partition at a time.

    A task per shard (:func:`_stage_entries`) computes its accepted rows' votes (each
    reads its row alone) and stages each review's line, subject digest, vote, content
    fingerprint (an accept vote's) and record digest by its subject's 64-bit hash, so
    that every review of an item lands in one partition. A task per partition
    (:func:`_decide_partition`) gathers its reviews in the stable order key and decides
    its items with :func:`_decide`, as the driver decides every item on the reference
    path (:func:`_items_in_driver`), and stages its decided reviews, each with the
    keys and record digest of the kept review it duplicates. Every review's vote, split,
    item and fingerprint in the driver held ~300 bytes a review that shares its
    subject."""
    is_accepted = (rows["_disposition"] == Disposition.ACCEPTED.value).to_numpy()
    shards = ctx.shards_of(kind)
    if not shards or not is_accepted.any():
        return dict.fromkeys(_COUNTS, 0), iter(())
    labels = {s.index: s.input.split for s in ctx.shards}
    engine = ctx.config.engine
    count = partition_count(
        int(is_accepted.sum()), _ENTRY_WORDS, engine.resolved_workers(), len(shards),
        engine.partitions,
    )  # fmt: skip
    settings = _ItemSettings(
        ctx.config, ctx.storage, kind, shards, tuple(labels[s] for s in shards), count, policy
    )
    tasks = shard_tasks(shards, lines_by_shard(rows, is_accepted))
    ctx.engine.map(Step(_entries_init, (settings,), _stage_entries), tasks)
    counted = ctx.engine.map(Step(_init, (settings,), _decide_partition), range(count))
    counts = {name: sum(c[name] for c in counted) for name in _COUNTS}
    return counts, _staged_decisions(ctx, settings)


#: a review's staged entry, in 8-byte words (its line, 8; its subject digest, 32; its
#: vote; for an accept vote its content fingerprint, 32, and an offset, 4; its record
#: digest, 32): a partition's share
_ENTRY_WORDS: Final = 14


@dataclass(frozen=True)
class _ItemSettings:
    """What every task of one kind's review items shares (compared by value: the
    engine's contract): the kind's shards in the stable order key, each one's split
    label, and the partition count."""

    config: CampaignConfig
    storage: RunStorage
    kind: str
    shards: tuple[int, ...]
    splits: tuple[str | None, ...]
    partitions: int
    policy: ReviewPolicy

    @property
    def entries(self) -> str:
        """The staged stem of a shard's review entries, by partition."""
        return f"{self.kind}.review-entries"

    @property
    def decided(self) -> str:
        """The staged stem of a partition's decided reviews."""
        return f"{self.kind}.review-decided"


#: a review entry's subject (its key's text, digested when staged) and its 64-bit hash
_SUBJECT_TEXT: Final = "_subject_text"
_SUBJECT_HASH: Final = "_subject_hash"


def _init(settings: _ItemSettings) -> _ItemSettings:
    return settings


def _entries_init(
    settings: _ItemSettings,
) -> tuple[_ItemSettings, ScoringPlan, dict[str, pl.Expr]]:
    """The kind's plan and what a shard's entries read (once a worker): the criteria,
    the subject and its hash, and the row's digests."""
    _, plan, exprs = _vote_init(_VoteSettings(settings.config, settings.storage, settings.kind))
    subject = get_kind(settings.kind).review_subject()
    assert subject is not None
    key = key_columns(subject, None)
    # a review without a subject is an item alone: spread by its line, not one hash
    spread = pl.when(key.is_null()).then(pl.col("_shard_line").hash(7))
    exprs = {
        **exprs,
        _SUBJECT_TEXT: key,
        _SUBJECT_HASH: spread.otherwise(_subject_hash(subject)),
        "_content_sha256": pl.col("_content_sha256"),
        "_record_sha256": pl.col("_record_sha256"),
    }
    return settings, plan, exprs


def _stage_entries(
    state: tuple[_ItemSettings, ScoringPlan, dict[str, pl.Expr]],
    task: ShardTask,
    progress: Progress,
) -> int:
    """Stage one shard's reviews (its accepted rows: the lines its task carries) by
    partition: each one's line, subject digest (null: none), vote, content fingerprint
    (an accept vote's; null otherwise: only accept votes' verdicts are compared) and
    record digest. Returns how many."""
    settings, plan, exprs = state
    # the task's lines alone: its shard's reviews
    within = task_lines(task).to_numpy()
    observed = evaluate_shard(settings.storage, task[0], settings.kind, exprs, within=within)
    voted = _voted(plan, observed)
    vote = voted["_vote"]
    hashes = voted[_SUBJECT_HASH].to_numpy().astype(np.uint64, copy=False)
    order, starts = partition_order(hashes, settings.partitions)
    fingerprint = voted.select(pl.when(vote).then(pl.col("_content_sha256").cast(pl.String)))
    entries = {
        "_shard_line": pa.array(voted["_shard_line"].to_numpy()[order], pa.int64()),
        _GROUP: sha256s(voted[_SUBJECT_TEXT].cast(pl.String).gather(order).to_arrow()),
        "_vote": vote.gather(order).to_arrow(),
        # the digests as their 32 bytes: as text, two were 136 of an entry's ~177 bytes
        "_content_sha256": digest_bytes(fingerprint.to_series().gather(order), pa.binary()),
        "_record_sha256": digest_bytes(voted["_record_sha256"].gather(order)),
    }
    batch = pa.record_batch(entries)
    settings.storage.stage_partitions(task[0], settings.entries, batch, starts)
    return int(batch.num_rows)


def _decide_partition(
    settings: _ItemSettings, partition: int, progress: Progress
) -> dict[str, int]:
    """Decide the items of one partition (its entries of every shard, read alone: every
    review of an item is here) in the stable order key, as :func:`_decide` decides every
    item; stage its decided reviews (:func:`_decided_table`); return its counts."""
    batches = [
        settings.storage.staged_partition(s, settings.entries, partition) for s in settings.shards
    ]
    sizes = [b.num_rows for b in batches]
    frames = [cast(pl.DataFrame, pl.from_arrow(b)) for b in batches]
    reviews = pl.concat(frames, how="vertical_relaxed").with_columns(
        _shard=pl.Series(np.repeat(np.array(settings.shards, np.int32), sizes)),
        # each shard's label, gathered (a numpy array of labels is of objects, and
        # polars casts none to text when the first is None)
        _split=pl.Series(settings.splits, dtype=pl.String).gather(
            np.repeat(np.arange(len(sizes)), sizes)
        ),
        _at=pl.int_range(pl.len(), dtype=pl.Int64),  # the entries' order: the order key
    )
    if reviews.height == 0:
        return dict.fromkeys(_COUNTS, 0)
    decided = _decide(reviews, [pl.col("_at")], settings.policy)
    if len(decided.rows):
        settings.storage.stage_table(
            partition, settings.decided, _decided_table(decided).to_arrow(), batch_rows=PART_ROWS
        )
    accepts = int(reviews["_vote"].sum())
    return {"reviews": reviews.height, "accept_votes": accepts, **_decided_counts(decided)}


def _decided_table(decided: _Decided) -> pl.DataFrame:
    """A partition's decided reviews: their keys, whether their item is refused, their
    vote, their item's counts, and the kept review each duplicates (its keys and record
    digest; null: none)."""
    kept = decided.reviews[decided.kept_rows].select(
        _kept_shard="_shard", _kept_line="_shard_line", _kept_record="_record_sha256"
    )
    none = len(kept)  # the null row after them
    kept = pl.concat([kept, kept.clear(1)])
    counts = decided.counts
    return (
        keys_of(decided.reviews)[decided.rows]
        .hstack(kept[np.where(decided.pointer < 0, none, decided.pointer)])
        .with_columns(
            _refused=decided.refused,
            _vote=decided.vote,
            _reviews=counts[:, 0],
            _accepts=counts[:, 1],
            _verdicts=counts[:, 2],
        )
    )


def _staged_decisions(ctx: GlobalContext, settings: _ItemSettings) -> Iterator[pl.DataFrame]:
    """The decided reviews, a staged batch (at most :data:`PART_ROWS` of a partition's) at a
    time, each with its pointer to the kept review (lineage from the kept review's
    keys). A partition's read whole and made a polars frame held every one of its
    decided reviews while its parts were made."""
    for partition in range(settings.partitions):
        if not settings.storage.has_staged(partition, settings.decided):
            continue
        for batch in settings.storage.staged_batches(partition, settings.decided):
            part = cast(pl.DataFrame, pl.from_arrow(batch))
            keys = part.select(_shard="_kept_shard", _shard_line="_kept_line")
            hexed = part["_kept_record"].bin.encode("hex")  # staged as its bytes
            kept = ctx.with_lineage(keys).with_columns(_record_sha256=hexed)
            pointer = kept.select(
                pl.struct(_source="_source", _line="_line", _record_sha256="_record_sha256")
            ).to_series()
            yield _decision_rows(
                part.drop("_kept_shard", "_kept_line", "_kept_record").with_columns(
                    _duplicate_of=pointer
                ),
                policy=settings.policy,
            )


def _subject_hash(subject: DedupeKey) -> pl.Expr:
    """A 64-bit hash of a row's subject: what reviews are grouped on before the exact check."""
    return key_columns(subject, None).hash(6)


def _votes(ctx: GlobalContext, kind: str, rows: pl.DataFrame) -> pl.DataFrame:
    """The accepted rows (``_shard``, ``_shard_line``) with their subject hash and
    ``_vote``: whether their own criteria scores meet every minimum and the weighted
    acceptance score.

    A row's vote reads that row alone, so the votes are computed a shard at a time on
    the engine (:func:`_shard_votes`), and the driver receives each accepted row's
    subject hash and vote: scoring every accepted row here took ~1.15 KB a row (230 MB
    above the state at 200,000 pairwise-v2 rows)."""
    is_accepted = (rows["_disposition"] == Disposition.ACCEPTED.value).to_numpy()
    accepted = keys_of(rows, is_accepted)
    shards = ctx.shards_of(kind)
    tasks = shard_tasks(shards, lines_by_shard(rows, is_accepted))
    settings = _VoteSettings(ctx.config, ctx.storage, kind)
    voted = ctx.engine.map(Step(_vote_init, (settings,), _shard_votes), tasks)
    votes = pl.concat(
        [v.with_columns(_shard=pl.lit(s, pl.Int32)) for s, v in zip(shards, voted, strict=True)]
    ).select(*KEYS, "_vote")
    if not keys_of(votes).equals(accepted):
        raise AssertionError("staged rows and the global state are out of step")
    return votes


@dataclass(frozen=True)
class _VoteSettings:
    """What every vote task of one kind shares (compared by value: the engine's contract)."""

    config: CampaignConfig
    storage: RunStorage
    kind: str


def _vote_init(settings: _VoteSettings) -> tuple[_VoteSettings, ScoringPlan, dict[str, pl.Expr]]:
    """The kind's plan and the expressions a shard's votes read (once a worker)."""
    plan = scoring_plan(settings.config, settings.kind)
    subject = get_kind(settings.kind).review_subject()
    assert plan is not None  # the stage runs only then
    assert subject is not None
    return settings, plan, criteria_inputs(plan)


def _shard_votes(
    state: tuple[_VoteSettings, ScoringPlan, dict[str, pl.Expr]],
    task: ShardTask,
    progress: Progress,
) -> pl.DataFrame:
    """One shard's accepted rows (the lines its task carries), in line order: their
    ``_shard_line``, subject hash and vote."""
    settings, plan, exprs = state
    # the task's lines alone: its shard's reviews
    within = task_lines(task).to_numpy()
    observed = evaluate_shard(settings.storage, task[0], settings.kind, exprs, within=within)
    return _voted(plan, observed).select("_shard_line", "_vote")


def _voted(plan: ScoringPlan, observed: pl.DataFrame) -> pl.DataFrame:
    """``observed`` (the criteria's inputs of some reviews, and other columns, passed
    through) with ``_vote``: whether each review's own criteria scores meet every
    minimum and the weighted acceptance score (the gates left out: they judge the
    proposed code, not the reviewer)."""
    gates = frozenset(g.name for g in plan.rubric.gates)
    scored = score_frame(plan.rubric, observed, not_applicable_gates=gates)
    met = [State.MET.value, State.NOT_APPLICABLE.value]
    criteria = [c for c in scored.columns if c.startswith("_criterion_") and c.endswith("_state")]
    vote = (pl.col(WEIGHTED_STATE) == State.MET.value) & pl.all_horizontal(
        [pl.col(c).is_in(met) for c in criteria] or [pl.lit(True)]
    )
    return scored.with_columns(vote.fill_null(False).alias("_vote"))


def _reviews(
    ctx: GlobalContext, kind: str, subject: DedupeKey, rows: pl.DataFrame, votes: pl.DataFrame
) -> pl.DataFrame:
    """Every review (``votes``' rows) with its split and, where another review shares
    its exact subject, its item (``_subject``: the subject's first review, compared
    partition by partition on the engine: :meth:`GlobalContext.groups`) and, for an
    accept vote, its content fingerprint; null where the review is an item alone. The
    subjects' texts (a pairwise subject is the conversation and both responses) read
    into the driver held ~2.2 KB a review that shares its subject."""
    accepted = (rows["_disposition"] == Disposition.ACCEPTED.value).to_numpy()
    shared, items, _ = ctx.groups(
        kind,
        rows,
        "review-subjects",
        key_columns(subject, None),
        _subject_hash(subject),
        where=pl.col("_disposition") == Disposition.ACCEPTED.value,  # the gate's
        left_out=~accepted,  # removed by the rules since
        digested=True,  # a subject's SHA-256, not its text (~780 bytes a pairwise subject)
    )
    of_votes = shared[accepted]
    if not np.array_equal(np.flatnonzero(shared), np.flatnonzero(accepted)[of_votes]):
        raise AssertionError("a review's item was found among rows that are no reviews")
    item = np.zeros(votes.height, np.uint64)
    item[of_votes] = items
    reviews = votes.select(
        *KEYS,
        "_vote",
        _subject=pl.when(pl.Series(of_votes)).then(pl.Series(item)),
        _split=ctx.split(),
    )
    asked = pl.Series(of_votes) & reviews["_vote"]
    voters = ctx.fetched(kind, reviews.filter(asked), ["_content_sha256"])
    return pl.concat([voters, reviews.filter(~asked)], how="diagonal_relaxed")


@dataclass(frozen=True)
class _Decided:
    """What a review policy decides, by array over ``rows`` (places in ``reviews``: each
    decided review once): whether its item is ``refused`` (too few reviews or accept
    votes, or votes that disagree), its ``vote``, its item's counts, and ``pointer``,
    its place in ``kept_rows`` (the kept reviews a decided one duplicates; -1: none)."""

    reviews: pl.DataFrame
    rows: npt.NDArray[np.int64]
    refused: npt.NDArray[np.bool_]
    vote: npt.NDArray[np.bool_]
    counts: npt.NDArray[np.int64]  # reviews, accept votes, verdicts (rows × 3)
    pointer: npt.NDArray[np.int64]
    kept_rows: npt.NDArray[np.int64]


def _decide(reviews: pl.DataFrame, order: Sequence[pl.Expr], policy: ReviewPolicy) -> _Decided:
    """The policy over ``reviews`` (``_shard``, ``_shard_line``, ``_vote``, ``_split``,
    ``_subject``, ``_content_sha256``): sorted by item, then the order key ``order``, so
    an item's reviews are one run and its kept review is its first accept vote; counts,
    kept reviews and verdicts are arrays over the runs (window functions over the items'
    strings each built a hash table of every review: ~1.25 KB a review with the
    decisions, at the stage's peak). A review without a subject is an item alone."""
    reviews = reviews.sort([*map(pl.col, _ITEM), *order], nulls_last=True)
    n = reviews.height
    alone = np.flatnonzero(reviews[_GROUP].is_null().to_numpy())
    starts = np.union1d(run_starts(reviews, _ITEM), alone)
    sizes = np.diff(np.r_[starts, n])
    item = np.repeat(np.arange(len(starts)), sizes)
    vote = reviews["_vote"].fill_null(False).to_numpy()
    accepts = np.add.reduceat(vote.astype(np.int64), starts)
    voters = np.flatnonzero(vote)
    voted_items, first = np.unique(item[voters], return_index=True)
    kept = np.full(len(starts), -1, np.int64)
    kept[voted_items] = voters[first]  # each item's first accept vote in the order key
    verdicts = np.zeros(len(starts), np.int64)
    if len(voters):  # distinct fingerprints among an item's accept votes (a null is one)
        given = pl.DataFrame(
            {"_item": item[voters], "_v": reviews["_content_sha256"].gather(voters)}
        ).sort("_item", "_v", nulls_last=True)
        np.add.at(verdicts, given["_item"].to_numpy()[run_starts(given, ["_item", "_v"])], 1)
    refused = (
        (sizes < policy.independent_reviews)
        | (accepts < policy.minimum_accept_votes)
        | (verdicts > 1)
    )[item]
    is_kept = np.zeros(n, np.bool_)
    is_kept[kept[kept >= 0]] = True
    rows = np.flatnonzero(refused | ~is_kept)
    target = np.where(refused[rows], -1, kept[item[rows]])
    # the kept reviews a decided one duplicates, in the stable order key (as read)
    kept_rows = np.unique(target[target >= 0])
    kept_keys = keys_of(reviews)[kept_rows]
    kept_rows = kept_rows[np.lexsort((kept_keys["_shard_line"], kept_keys["_shard"]))]
    place = np.full(n, -1, np.int64)
    place[kept_rows] = np.arange(len(kept_rows))
    pointer = np.where(target >= 0, place[np.maximum(target, 0)], -1)
    counts = np.stack([sizes, accepts, verdicts], axis=1)[item[rows]]
    return _Decided(reviews, rows, refused[rows], vote[rows], counts, pointer, kept_rows)


def _decisions(
    decided: _Decided, lineage: pl.DataFrame, policy: ReviewPolicy
) -> Iterator[pl.DataFrame]:
    """The decided reviews' rows, :data:`PART_ROWS` at a time (the driver stages each
    as it comes): ``lineage`` is each kept review's (``_source``, ``_line``,
    ``_record_sha256``), in the order of ``decided.kept_rows``."""
    pointers = lineage.select(
        pl.struct(_source="_source", _line="_line", _record_sha256="_record_sha256")
    ).to_series()
    pointers = pointers.extend(pl.Series([None], dtype=pointers.dtype))  # -1: none
    keys = keys_of(decided.reviews)
    for lo in range(0, len(decided.rows), PART_ROWS):
        at = slice(lo, lo + PART_ROWS)
        counts = decided.counts[at]
        yield _decision_rows(
            keys[decided.rows[at]].with_columns(
                _refused=decided.refused[at],
                _vote=decided.vote[at],
                _reviews=counts[:, 0],
                _accepts=counts[:, 1],
                _verdicts=counts[:, 2],
                _duplicate_of=pointers.gather(decided.pointer[at]),
            ),
            policy,
        )


def _decision_rows(decided: pl.DataFrame, policy: ReviewPolicy) -> pl.DataFrame:
    """The decisions of reviews ``decided`` (their keys, ``_refused``, ``_vote``, their
    item's ``_reviews``, ``_accepts`` and ``_verdicts``, and ``_duplicate_of``, the kept
    review's lineage): each one's disposition, reason, pointer and rule."""
    code, disposition = REVIEW_ACTIONS[policy.disagreement_action]
    asks = (
        f"the rubric's review policy asks for {policy.independent_reviews} independent "
        f"reviews and {policy.minimum_accept_votes} accept votes that agree"
    )
    return decided.select(
        *KEYS,
        _disposition=pl.when("_refused")
        .then(pl.lit(disposition))
        .otherwise(pl.lit(Disposition.DUPLICATE.value)),
        _reasons_add=pl.concat_list(
            pl.struct(
                code=pl.when("_refused")
                .then(pl.lit(code))
                .when("_vote")
                .then(pl.lit(REVIEW_AGREEING))
                .otherwise(pl.lit(REVIEW_OUTVOTED)),
                path=pl.lit(""),
                detail=pl.when("_refused")
                .then(
                    pl.format(
                        "{} reviews of this item, {} accept votes, {} verdicts among them; " + asks,
                        "_reviews",
                        "_accepts",
                        "_verdicts",
                    )
                )
                .when("_vote")
                .then(pl.lit("an accepting review agreeing with the kept one"))
                .otherwise(pl.lit("a review that did not vote accept; the item's votes agree")),
            )
        ),
        _duplicate_of=pl.when("_refused").then(None).otherwise("_duplicate_of"),
        _dedupe_rule=pl.when("_refused").then(None).otherwise(pl.lit("review")),
    )
