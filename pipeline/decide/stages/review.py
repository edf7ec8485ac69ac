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
from typing import Final

import numpy as np
import numpy.typing as npt
import polars as pl

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
from pipeline.decide.partitioned import ShardTask, evaluate_shard, shard_tasks, task_lines
from pipeline.decide.repeats import run_starts
from pipeline.dedupe.keys import DedupeKey, key_columns
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
        votes = _votes(ctx, kind, rows)
        if votes.height == 0:
            return None
        decided = _decide(_reviews(ctx, kind, subject, rows, votes), ctx.order_key(), policy)
        code, _ = REVIEW_ACTIONS[policy.disagreement_action]
        counts = {
            code: int(decided.refused.sum()),
            REVIEW_AGREEING: int((~decided.refused & decided.vote).sum()),
            REVIEW_OUTVOTED: int((~decided.refused & ~decided.vote).sum()),
        }
        ctx.notes.setdefault(self.name, {})[kind] = {
            **policy.describe(),
            "applied": True,
            "reviews": votes.height,
            "accept_votes": int(votes["_vote"].sum()),
            "decided": dict(sorted((c, n) for c, n in counts.items() if n)),
        }
        if not len(decided.rows):
            return None
        kept = ctx.with_lineage(decided.reviews[decided.kept_rows].select(KEYS))
        return _decisions(decided, ctx.fetched(kind, kept, ["_record_sha256"]), policy)


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
    observed = evaluate_shard(settings.storage, task[0], settings.kind, exprs).filter(
        pl.col("_shard_line").is_in(task_lines(task).implode())
    )
    gates = frozenset(g.name for g in plan.rubric.gates)
    scored = score_frame(plan.rubric, observed, not_applicable_gates=gates)
    met = [State.MET.value, State.NOT_APPLICABLE.value]
    criteria = [c for c in scored.columns if c.startswith("_criterion_") and c.endswith("_state")]
    vote = (pl.col(WEIGHTED_STATE) == State.MET.value) & pl.all_horizontal(
        [pl.col(c).is_in(met) for c in criteria] or [pl.lit(True)]
    )
    return scored.select("_shard_line", vote.fill_null(False).alias("_vote"))


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
    code, disposition = REVIEW_ACTIONS[policy.disagreement_action]
    asks = (
        f"the rubric's review policy asks for {policy.independent_reviews} independent "
        f"reviews and {policy.minimum_accept_votes} accept votes that agree"
    )
    pointers = lineage.select(
        pl.struct(_source="_source", _line="_line", _record_sha256="_record_sha256")
    ).to_series()
    pointers = pointers.extend(pl.Series([None], dtype=pointers.dtype))  # -1: none
    keys = keys_of(decided.reviews)
    for lo in range(0, len(decided.rows), PART_ROWS):
        at = slice(lo, lo + PART_ROWS)
        counts = decided.counts[at]
        yield (
            keys[decided.rows[at]]
            .with_columns(
                _refused=decided.refused[at],
                _vote=decided.vote[at],
                _reviews=counts[:, 0],
                _accepts=counts[:, 1],
                _verdicts=counts[:, 2],
                _duplicate_of=pointers.gather(decided.pointer[at]),
            )
            .select(
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
                                "{} reviews of this item, {} accept votes, {} verdicts among "
                                "them; " + asks,
                                "_reviews",
                                "_accepts",
                                "_verdicts",
                            )
                        )
                        .when("_vote")
                        .then(pl.lit("an accepting review agreeing with the kept one"))
                        .otherwise(
                            pl.lit("a review that did not vote accept; the item's votes agree")
                        ),
                    )
                ),
                _duplicate_of=pl.when("_refused").then(None).otherwise("_duplicate_of"),
                _dedupe_rule=pl.when("_refused").then(None).otherwise(pl.lit("review")),
            )
        )
