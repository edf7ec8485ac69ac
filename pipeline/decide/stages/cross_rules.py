"""Cross-record rules (DESIGN §3.9): invariants between rows of the whole run, in polars.

They run first in the global phase (order 100), over every staged row of a kind from
every shard, so their result cannot depend on how the run was sharded or on the order
of input files (the order key sorts inputs by path). The rules run in the order of the
table below, each over the rows the ones before it left in (a row a rule rejects or
removes takes no part in the rules after it; a quarantined row does). Each rule returns
findings (row keys, code, detail, disposition); the stage folds them per row, worst
disposition wins (rejected > quarantined > duplicate) and every code is kept. A rule may give a finding
another code and disposition of its own family (``cross.retry``, a duplicate pointing at
the row it repeats in ``_duplicate_of``); disabling the rule disables both. A rule's
findings are compact (keys, code, numbers); the texts of their reasons and pointers are
made a part at a time (:data:`PART_ROWS` findings) as the driver stages them. A rule
that finds many rows returns its findings as parts read from what the engine staged
(:class:`FoundParts`: the replay rule's), and the stage holds a part of them at a time.

=============================== ======================= =====================================
code                            kinds                   finding
=============================== ======================= =====================================
``cross.idempotency_conflict``  every kind with a key   a later body of a submission key differs from the
                                                        first's (input order): that later row rejected
``cross.retry``                 every kind with a key   a later row repeats the first's body: a duplicate of it
``cross.contradictory_preference`` pairwise-v2          one comparison, opposite preferences: quarantined
``cross.session_model_conflict`` pw-decide-row-1        rows of one session name different models
``cross.worker_root_missing``   pw-decide-row-1         a worker's root_session is no coordinator session
``cross.autoqa_profile_conflict`` autoqa-eval-1         documents describe one calibration profile
                                                        differently: all of them quarantined
``cross.autoqa_case_conflict``  autoqa-eval-1           documents give one case id different case
                                                        hashes: all of them quarantined
=============================== ======================= =====================================
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt
import polars as pl

from pipeline.core.config import CampaignConfig
from pipeline.core.reasons import (
    CATALOGUE,
    Disposition,
    ReasonCodeError,
    ReasonDisposition,
    Spec,
)
from pipeline.decide.context import (
    DEDUPE_RULE,
    DISPOSITIONS,
    DUPLICATE_OF,
    KEYS,
    PART_ROWS,
    Decisions,
    GlobalContext,
    Grouped,
    LaterRows,
    OutputColumn,
    advanced,
    keys_of,
    placer,
    register_stage,
    repeated_keys,
)
from pipeline.dedupe.keys import key_columns
from pipeline.kinds import KINDS

__all__ = ["CONFLICT", "CROSS_RULES", "RETRY", "CrossRules", "FoundParts"]

#: Seed 002's IDEMPOTENCY_CONFLICT: a later, different body of one submission key.
CONFLICT: Final = "cross.idempotency_conflict"
#: Seed 002's "identical authenticated retry": removed as a duplicate of the first row.
RETRY: Final = "cross.retry"
#: the disposition of a finding with a code its rule gives it (see :func:`cross_rule`)
_OWN_CODES: dict[str, Disposition] = {}
_FAMILY: Final = "cross."

#: worst first: the disposition a row ends with when several rules fire
_SEVERITY: Final = {
    Disposition.REJECTED.value: 3,
    Disposition.QUARANTINED.value: 2,
    Disposition.DUPLICATE.value: 1,
}


@dataclass(frozen=True)
class FoundParts:
    """A rule's findings as parts, read again each time :attr:`read` is called (the same
    parts each time; a row in one of them only): a rule that finds many rows returns
    them so (the replay rule: from what its grouping check's partition tasks staged,
    :class:`~pipeline.decide.context.LaterRows`), and the stage holds a part at a time."""

    read: Callable[[], Iterator[pl.DataFrame]]


Finder = Callable[[GlobalContext, str, pl.DataFrame], pl.DataFrame | FoundParts | None]
#: makes a part of a rule's findings whole: adds their ``_detail`` and a duplicate's
#: ``_duplicate_of``, from the compact columns its finder returned
Finisher = Callable[[GlobalContext, str, pl.DataFrame], pl.DataFrame]


@dataclass(frozen=True)
class CrossRule:
    code: str
    #: what a row the rule finds becomes
    disposition: Disposition
    #: the kinds it applies to; ``None``: every kind
    kinds: frozenset[str] | None
    find: Finder
    #: the codes of its own a finding may carry instead of ``code``
    own: tuple[str, ...] = ()
    #: makes a part of its findings whole (``None``: its finder returns them whole)
    finish: Finisher | None = None


CROSS_RULES: list[CrossRule] = []


def cross_rule(
    code: str,
    disposition: Disposition,
    kinds: Sequence[str] | None = None,
    *,
    meaning: str,
    spec: Spec,
    own: Mapping[str, tuple[Disposition, str]] | None = None,
    finish: Finisher | None = None,
) -> Callable[[Finder], Finder]:
    """Register a finder returning the rows it finds (``_shard``, ``_shard_line``) with a
    ``_detail``, as one frame or as parts (:class:`FoundParts`); its docstring cites the
    seed it enforces. Its ``cross.*`` code goes into
    the reason catalogue with ``meaning`` (one line) and ``spec``. A finder may also return
    a ``_code`` per row (one of its ``own`` codes, each declared with its disposition and
    meaning; null: the rule's).

    A rule that finds many rows (the replay rule: every retry of a duplicate-heavy
    export) returns instead compact columns of its own, and ``finish(ctx, kind, part)``
    makes a part of them whole: their ``_detail`` and, for duplicates, ``_duplicate_of``
    (the kept row). The stage holds the compact findings and finishes
    :data:`PART_ROWS` of them at a time (``_code`` then an enum of the cross codes)."""

    def register(finder: Finder) -> Finder:
        if not (finder.__doc__ or "").strip():
            raise ValueError(f"cross rule {code} needs a docstring citing its seed")
        codes = {code: (disposition, meaning), **(own or {})}
        for name, (effect, means) in codes.items():
            if not name.startswith(_FAMILY):
                raise ReasonCodeError(f"cross rule code {name!r} is not a cross.* code")
            CATALOGUE.declare(
                name,
                ReasonDisposition.of(effect),
                owner=finder.__module__,
                meaning=means,
                spec=spec,
            )
        _OWN_CODES.update({name: effect for name, (effect, _) in (own or {}).items()})
        scope = frozenset(kinds) if kinds is not None else None
        rule = CrossRule(code, disposition, scope, finder, tuple(own or ()), finish)
        CROSS_RULES.append(rule)
        return finder

    return register


#: what a row the stage has removed (by an earlier rule) has become: it takes no part in
#: the rules after it (a rejected conflicting body is no session's model, no comparison's
#: preference); a quarantined row is held for a person and still takes part
_REMOVED: Final = (Disposition.REJECTED.value, Disposition.DUPLICATE.value)


def _removed(rows: pl.DataFrame) -> npt.NDArray[np.bool_]:
    """Which of the state's rows take no part in a rule (the gate or a rule before
    removed them), as the mask a check leaves out: one byte a row (negating the live
    rows' mask was a second)."""
    removed: npt.NDArray[np.bool_] = rows["_disposition"].is_in(_REMOVED).to_numpy()
    return removed


#: the staged rows the gate left in: a hash-first check reads only these (a row the gate
#: rejected takes part in no rule, and its payload may be missing)
_GATE_LIVE: Final = ~pl.col("_disposition").is_in(_REMOVED)


def _found(
    ctx: GlobalContext,
    kind: str,
    rows: pl.DataFrame,
    name: str,
    group: pl.Expr,
    *,
    value: pl.Expr | None = None,
    where: pl.Expr | None = None,
) -> npt.NDArray[np.bool_]:
    """Which of ``rows`` take part in the rule (no rule before removed them) and share
    their ``group`` hash with another row the gate left in, or, given ``value``, whose
    group holds more than one value (:meth:`GlobalContext.repeats`, partition by
    partition on the engine): the rows a rule then reads in full, and decides on exact
    values, so a hash collision never invents a finding. Two values of a group that
    collide in 64 bits would hide one (odds 2**-64 a pair)."""
    taking_part = _GATE_LIVE if where is None else _GATE_LIVE & where
    found, _ = ctx.repeats(kind, rows, name, group, value=value, where=taking_part)
    # the rows found that a rule before removed, read for those rows alone (a mask of
    # every row's, and the two combined, were two bytes a row more)
    at = np.flatnonzero(found)
    found[at] = ~rows["_disposition"].gather(at).is_in(_REMOVED).to_numpy()
    return found


def _key_columns(kind: str) -> list[str]:
    return list(KINDS[kind].idempotency_key)


def _group_hash(value: pl.Expr) -> pl.Expr:
    """A 64-bit hash of what a rule groups rows on (a session, a profile id), before the
    exact check."""
    return value.hash()


def _key_hash(keys: Sequence[str]) -> pl.Expr:
    """A 64-bit hash of a submission key: what rows are grouped on before the exact check."""
    return pl.struct(keys).hash(4)


def _split_numbers(ctx: GlobalContext, *shards: pl.Series) -> list[npt.NDArray[np.int64]]:
    """The split of each row of ``shards`` (series of shard numbers) as a number
    (:meth:`GlobalContext.split_numbers`), no label being one more: equal labels (no
    label among them) equal numbers. A shard the run does not hold is refused."""
    by_shard = ctx.split_numbers()
    unlabelled = len(by_shard)  # past every label's number
    numbers = np.full(max(by_shard, default=-1) + 1, -1, np.int64)
    for shard, number in by_shard.items():
        numbers[shard] = unlabelled if number is None else number
    split = [numbers[s.to_numpy().astype(np.int64)] for s in shards]
    if any(bool((s < 0).any()) for s in split):
        raise AssertionError("a row of a shard the run does not hold")
    return split


def _submission_groups(
    ctx: GlobalContext,
    kind: str,
    rows: pl.DataFrame,
    keys: Sequence[str],
    removed: npt.NDArray[np.bool_],
) -> LaterRows:
    """The replay rule's grouping check: the later rows of each submission key another
    row shares, each with its key's first row, whether its body is that row's, and its
    key's counts, staged by the engine (:meth:`GlobalContext.later_rows`). With
    sanitization on, keys and bodies as sent, which the gate staged beside the rows (a
    row per staged row, every one live at the gate): redaction makes different keys, and
    different bodies, one (:meth:`~pipeline.gate.gate.Gate._submission`)."""
    if ctx.config.sanitize.enabled:
        return ctx.later_rows(
            kind,
            rows,
            "submission-keys",
            pl.col("_submission_key"),
            _key_hash(["_submission_key"]),
            body=pl.col("_submission_body"),
            left_out=removed,
            stem=ctx.storage.submissions_stem(kind),
        )
    return ctx.later_rows(
        kind,
        rows,
        "submission-keys",
        pl.struct(keys).struct.json_encode(),  # exact; a null key part equals a null
        _key_hash(keys),
        body=pl.col("_record_sha256").str.decode("hex"),  # its 32 bytes
        where=_GATE_LIVE,
        left_out=removed,
    )


def _replays(ctx: GlobalContext, kind: str, part: pl.DataFrame) -> pl.DataFrame:
    """A part of the replay rule's findings made whole: a conflict's detail (its key's
    ``_rows`` and ``_conflicts``), and a retry's pointer to the kept row (``_kept_shard``,
    ``_kept_line``): its lineage and digest."""
    kept = part.select(_shard="_kept_shard", _shard_line="_kept_line")
    if ctx.config.sanitize.enabled:
        # With sanitization on a retry is the same body as sent, and its record as
        # stored may differ (two member names that redact to one tag keep the value
        # written last): the kept row's own digest, each original read once.
        originals = ctx.fetched(kind, kept.unique(maintain_order=True), ["_record_sha256"])
        digests = kept.join(originals, on=list(KEYS), how="left", maintain_order="left")
        digest = digests["_record_sha256"]
    else:
        # a retry's record is its original's (the same ``_record_sha256``): the retry's
        # own digest, read beside it (the originals' read and joined held ~170 bytes a
        # retry more: 93 against 88 MB at 1 M rows with 3 % repeats)
        digest = ctx.fetched(kind, keys_of(part), ["_record_sha256"])["_record_sha256"]
    kept = ctx.with_lineage(kept).select("_source", "_line", _record_sha256=digest)
    differs = pl.col("_code") == CONFLICT
    return part.with_columns(
        _detail=pl.when(differs)
        .then(
            pl.format(
                "this body differs from the first of {} rows with this submission key "
                "(the first stays; {} later bodies differ)",
                "_rows",
                "_conflicts",
            )
        )
        .otherwise(pl.lit("an identical retry of the first row with this submission key")),
        _duplicate_of=pl.when(differs).then(None).otherwise(pl.struct(kept)),
    )


@cross_rule(
    CONFLICT,
    Disposition.REJECTED,
    meaning="a later row of a submission key whose body differs from the first row's "
    "(the first stays)",
    spec=Spec.ARCV_GATEWAY,
    own={
        RETRY: (
            Disposition.DUPLICATE,
            "a later row of a submission key with the first row's body, in its split: a "
            "duplicate of the first",
        )
    },
    finish=_replays,
)
def idempotency_conflict(
    ctx: GlobalContext, kind: str, rows: pl.DataFrame
) -> pl.DataFrame | FoundParts | None:
    """Seed 002: "identical authenticated retry -> return original receipt/status; same
    operation, conflicting body -> IDEMPOTENCY_CONFLICT". Among the rows sharing a
    submission key (``task_id``; ``(session, receipt)`` for pw-decide-row) the first in
    the order key (input, line) is the original and keeps whatever it has; a later row
    with the same body (``_record_sha256``: the canonical JSON of the record as stored, so
    key order and insignificant whitespace do not make a body differ) is its retry, a
    duplicate of it (``cross.retry``), when both are of one split (a copy in another split
    is dedupe's: ``dedupe.contamination`` keeps a protected split's rows); a later row with
    another body is rejected. With sanitization on, keys and bodies are compared as sent,
    before redaction (:meth:`~pipeline.gate.gate.Gate._submission`)."""
    keys = _key_columns(kind)
    if not keys:
        return None
    # Only keys that occur more than once can conflict. A grouping check on the engine
    # finds, partition by partition, the later rows of each key another row shares
    # (grouped first on its 64-bit hash: a collision never joins two keys), each with
    # the key's first row in the order key (its original), whether its body (the record
    # digest) is the original's, and the key's counts, and stages them; the driver reads
    # them a block of shards at a time (_replay_parts). Reading every sharing row's keys
    # and digests and sorting them here held ~230 bytes each (~390 a retry on an export
    # of 30 % retries); the later rows received from the engine, ~60 a retry.
    removed = _removed(rows)  # by the gate or a rule before: no part in this
    later = _submission_groups(ctx, kind, rows, keys, removed)
    del removed
    if not len(later):
        return None
    return FoundParts(lambda: _replay_parts(ctx, later))


def _replay_parts(ctx: GlobalContext, later: LaterRows) -> Iterator[pl.DataFrame]:
    """The replay rule's findings, compact, a part of the later rows at a time: a later
    row of another body is a conflict, and of its key's first row's body a retry of it
    (``_kept_shard``, ``_kept_line``) where both are of one split. The same body in
    another split than the original's is no retry but a copy across splits: dedupe's
    contamination rule decides it, and keeps a protected split's rows. The texts of a
    reason and a retry's pointer are made a part at a time (:func:`_replays`): made for
    every finding at once they held ~250 bytes a retry at the stage's peak (300,115
    retries of a duplicate-heavy export)."""
    for part in later.parts():
        split, first_split = _split_numbers(ctx, part["_shard"], part["_first_shard"])
        same = part["_same"].to_numpy()
        decided = ~same | (split == first_split)
        code = pl.when(pl.col("_same")).then(pl.lit(RETRY)).otherwise(pl.lit(CONFLICT))
        yield part.filter(decided).select(
            *KEYS,
            _code=code,
            _rows=pl.col("_rows"),
            _conflicts=pl.col("_conflicts"),
            _kept_shard=pl.col("_first_shard"),
            _kept_line=pl.col("_first_line"),
        )


@cross_rule(
    "cross.contradictory_preference",
    Disposition.QUARANTINED,
    ["pairwise-v2"],
    meaning="the same conversation and pair of responses (either A/B order) preferred both "
    "ways: a person adjudicates",
    spec=Spec.ARCV_SCHEMAS,
)
def contradictory_preference(
    ctx: GlobalContext, kind: str, rows: pl.DataFrame
) -> pl.DataFrame | None:
    """Seed 000: "Validate ... task identity ... and rationale consistency outside structural
    validation"; DESIGN §3.9: "same comparison with opposite preferences". The same
    conversation and the same pair of responses (in either A/B order) preferred both ways:
    a person adjudicates (seed 000's review policy: "disagreement_action": "adjudicate")."""
    # First, on the engine, the decisive rows of comparisons whose 64-bit hash holds
    # two preferred responses' hashes (a varying check: hashes only, as every rule's
    # first step): in most exports none, or a few. Then a grouping check on the engine
    # over those rows alone (ctx.groups; the others are left out before any text is
    # built): the exact comparison grouped on its SHA-256, and each later row of a
    # comparison told whether it prefers the side its first row prefers; a comparison
    # where one does not is preferred both ways. No text reaches the driver: reading
    # the candidates' texts into it held ~1.9 KB a row where an item's reviews prefer
    # both ways (every row a candidate).
    decisive = pl.col("preference").is_in(["A", "B"]).fill_null(False)
    preferred = pl.when(pl.col("preference") == "A").then("response_a").otherwise("response_b")
    # Hashed where the texts are, never copied: the messages' roles and contents are
    # what conversation_key() reads; the pair's hash is the same in either A/B order.
    turn = pl.element().struct
    conversation = pl.col("messages").list.eval(
        pl.struct(turn.field("role"), turn.field("content"))
    )
    pair = pl.col("response_a").hash(2) ^ pl.col("response_b").hash(2)
    preferred_hash = (
        pl.when(pl.col("preference") == "A")
        .then(pl.col("response_a").hash(3))
        .otherwise(pl.col("response_b").hash(3))
    )
    hashed = pl.struct(conversation.hash(1), pair).hash(4)
    candidates = _found(
        ctx, kind, rows, "comparisons", hashed, value=preferred_hash, where=decisive
    )
    if not candidates.any():
        return None
    # the exact comparison: what the review policy's items are, the conversation and
    # the unordered pair, each part length-prefixed
    subject = KINDS[kind].review_subject()
    assert subject is not None  # the rule's kind, pairwise-v2, reviews one
    comparison = key_columns(subject, None)
    # the side preferred, of the pair's two texts (one text twice: always the lower)
    low = pl.min_horizontal("response_a", "response_b")
    side = pl.when(preferred == low).then(pl.lit("<")).otherwise(pl.lit(">"))
    grouped = ctx.groups(
        kind,
        rows,
        "comparisons-exact",
        comparison,
        hashed,
        where=_GATE_LIVE & decisive,
        # every row no candidate (a rule before removed some); negated in place: the
        # candidates are not read again
        left_out=np.logical_not(candidates, out=candidates),
        body=side,
        digested=True,
    )
    return _contradicted(ctx, kind, rows, grouped)


def _contradicted(
    ctx: GlobalContext, kind: str, rows: pl.DataFrame, grouped: Grouped
) -> pl.DataFrame | None:
    """The rows of every comparison preferred both ways (one of its later rows prefers
    the side its first row does not: ``grouped``, the contradiction rule's grouping
    check), its later rows and its first, each told how many rows the comparison has."""
    assert grouped.same is not None  # a check with a body tells it
    later = np.flatnonzero(grouped.found)
    contradicted = np.unique(grouped.groups[~grouped.same])
    if not len(contradicted):
        return None
    # every row of a contradicted comparison: its later rows, and its first
    in_one = np.isin(grouped.groups, contradicted)
    groups, counts = np.unique(grouped.groups[in_one], return_counts=True)
    size = dict(zip(groups.tolist(), (counts + 1).tolist(), strict=True))
    found = pl.concat(
        [
            keys_of(rows)[later[in_one]].with_columns(_group=grouped.groups[in_one]),
            ctx.first_rows(kind, contradicted).with_columns(_group=contradicted),
        ]
    ).sort(KEYS)
    return found.select(
        "_shard",
        "_shard_line",
        _detail=pl.format(
            "{} rows prefer opposite responses of one comparison",
            pl.col("_group").replace_strict(size, return_dtype=pl.Int64),
        ),
    )


@cross_rule(
    "cross.session_model_conflict",
    Disposition.REJECTED,
    ["pw-decide-row-1"],
    meaning="the rows of one session name different models",
    spec=Spec.PW_DECIDE_ROW,
)
def session_model_conflict(
    ctx: GlobalContext, kind: str, rows: pl.DataFrame
) -> pl.DataFrame | None:
    """Seed 004, model: "The model that made most of the session's calls": one value per
    session, so rows of one session naming different models cannot all be right."""
    # the sessions naming more than one model found on hashes (a row's values are never
    # all read into the driver: ~280 bytes a row), their rows read and compared exactly
    session, model = pl.col("session"), pl.col("model")
    found = _found(ctx, kind, rows, "session-models", _group_hash(session), value=model.hash())
    if not found.any():
        return None
    payload = ctx.fetch(kind, keys_of(rows, found), ["session", "model"])
    return _differing(payload, session, model, "{} models named for one session")


@cross_rule(
    "cross.worker_root_missing",
    Disposition.REJECTED,
    ["pw-decide-row-1"],
    meaning="a worker's root_session is no coordinator session of the run (one whose "
    "every row the gate or a cross rule rejected does not count)",
    spec=Spec.PW_DECIDE_ROW,
)
def worker_root_missing(ctx: GlobalContext, kind: str, rows: pl.DataFrame) -> pl.DataFrame | None:
    """Seed 004, root_session: "the coordinator session a worker leg belongs to": a worker
    row's root session must be the session of some coordinator row of the export."""
    host, root = pl.col("host"), pl.col("root_session")
    coordinator, worker = host == "coordinator", host == "worker"
    # A coordinator offers its session and a worker seeks its root: the workers whose
    # root no coordinator offers are found on the engine, partition by partition, on the
    # exact sessions (nearly every row is a coordinator or a matched worker: reading
    # theirs took ~90 bytes a row in the driver). A row an earlier rule removed neither
    # offers nor seeks.
    named = pl.when(coordinator).then(pl.col("session")).otherwise(root)
    orphan = ctx.unmatched(
        kind,
        rows,
        "worker-roots",
        named,
        worker,
        where=_GATE_LIVE & (coordinator | worker) & named.is_not_null(),
        left_out=_removed(rows),
    )
    orphans = keys_of(rows, orphan)
    return orphans.select(
        *KEYS,
        _detail=pl.lit("root_session names no coordinator session of this run that a rule left in"),
    )


def _differing(payload: pl.DataFrame, key: pl.Expr, value: pl.Expr, detail: str) -> pl.DataFrame:
    """Rows whose ``value`` differs from another row's with the same ``key``; ``detail``
    formats how many values the key has."""
    count = pl.col("_value").n_unique().over("_key")
    found = payload.with_columns(_key=key, _value=value).filter(count > 1)
    return found.select("_shard", "_shard_line", _detail=pl.format(detail, count))


def _conflicting(
    ctx: GlobalContext,
    kind: str,
    rows: pl.DataFrame,
    column: str,
    key: str,
    what: str,
    sets: Sequence[str] = (),
) -> pl.DataFrame | None:
    """Rows whose struct ``column`` shares its ``key`` field with another row's but not
    its other fields (compared as JSON text of the struct; the list fields named in
    ``sets`` as sets: sorted, each value once)."""
    value = pl.col(column)
    compared = (
        value.struct.with_fields([pl.field(name).list.unique().list.sort() for name in sets])
        if sets
        else value
    ).struct.json_encode()
    # found on hashes and read alone, as the session-model rule's
    found = _found(
        ctx,
        kind,
        rows,
        f"{column}-{key}",
        _group_hash(value.struct.field(key)),
        value=compared.hash(),
        where=value.is_not_null(),
    )
    if not found.any():
        return None
    payload = ctx.fetch(kind, keys_of(rows, found), [column])
    return _differing(
        payload, value.struct.field(key), compared, f"{{}} different {what} under one {key}"
    )


@cross_rule(
    "cross.autoqa_profile_conflict",
    Disposition.QUARANTINED,
    ["autoqa-eval-1"],
    meaning="documents describe one `calibrationProfile.profileId` differently (model, prompt, contract, slice, method or sample size)",
    spec=Spec.AUTOQA,
)
def autoqa_profile_conflict(
    ctx: GlobalContext, kind: str, rows: pl.DataFrame
) -> pl.DataFrame | None:
    """AutoQA contract §21: "every calibration profile is compatible with the model,
    prompt, contract, and criterion slice" and §13.2 (a profile identifies its model and
    prompt configuration, contract version, criterion slice, method and sample size): one
    profile id is one profile, so documents describing it differently cannot all be
    right; a person decides which (quarantine)."""
    # "the criterion slice the profile was fitted on": a set, in any order
    return _conflicting(
        ctx, kind, rows, "calibrationProfile", "profileId", "descriptions", ("criterionIds",)
    )


@cross_rule(
    "cross.autoqa_case_conflict",
    Disposition.QUARANTINED,
    ["autoqa-eval-1"],
    meaning="documents give one `caseRef.caseId` different `caseSha256`",
    spec=Spec.AUTOQA,
)
def autoqa_case_conflict(ctx: GlobalContext, kind: str, rows: pl.DataFrame) -> pl.DataFrame | None:
    """AutoQA contract §9: "A case input freezes the evaluation object" and §17 ("exact
    case hash"): evaluations of one case id name one case hash; different hashes mean the
    case changed under its id, and which evaluation saw the right case is unknown."""
    return _conflicting(ctx, kind, rows, "caseRef", "caseId", "case hashes")


@register_stage
class CrossRules:
    """The cross-record rules as one global stage."""

    name = "cross_rules"
    order = 100

    @property
    def reason_codes(self) -> tuple[str, ...]:
        return tuple(code for rule in CROSS_RULES for code in (rule.code, *rule.own))

    def enabled(self, config: CampaignConfig) -> bool:
        return True

    def output_columns(self, ctx: GlobalContext, kind: str) -> Sequence[OutputColumn]:
        if not _key_columns(kind) or CONFLICT in ctx.config.rules.disabled:
            return []
        return [DUPLICATE_OF, DEDUPE_RULE]  # retries, as the dedupe stage writes its own

    def decide(self, ctx: GlobalContext, kind: str, rows: pl.DataFrame) -> Decisions:
        """The rules in order, each over the rows the ones before it left in: a rejected
        replay (a conflicting body) no longer counts in the rules after it, where it made
        its original contradict it, or its session name two models. The findings are
        held compact, and made whole a part at a time (:func:`_decisions`)."""
        disabled = set(ctx.config.rules.disabled)
        codes = pl.Enum(self.reason_codes)
        found: list[tuple[CrossRule, FoundParts, int]] = []
        overlap: _Overlap | None = None
        for rule in CROSS_RULES:
            if rule.code in disabled or (rule.kinds is not None and kind not in rule.kinds):
                continue
            hits = rule.find(ctx, kind, rows)
            if hits is None:
                continue
            coded = _coded(rule, hits, codes)
            overlap = overlap or _Overlap(rows)
            before = overlap.found
            rows = advanced(rows, _removing(coded, overlap), set())
            if overlap.found > before:
                found.append((rule, coded, overlap.found - before))
        return _decisions(ctx, kind, found, overlap) if overlap and found else None


def _coded(rule: CrossRule, hits: pl.DataFrame | FoundParts, codes: pl.Enum) -> FoundParts:
    """``rule``'s findings (a frame, or parts), each part's codes as ``codes`` and each
    row's disposition (the rule's, or its own code's)."""
    parts = hits if isinstance(hits, FoundParts) else FoundParts(lambda: iter((hits,)))

    def read() -> Iterator[pl.DataFrame]:
        for part in parts.read():
            if not part.height:
                continue
            code = pl.col("_code") if "_code" in part.columns else pl.lit(None, pl.String)
            code = code.fill_null(pl.lit(rule.code))
            disposition = code.replace_strict(
                _OWN_CODES, default=rule.disposition.value, return_dtype=pl.String
            )
            yield part.with_columns(
                _code=code.cast(codes), _disposition=disposition.cast(DISPOSITIONS)
            )

    return FoundParts(read)


def _removing(coded: FoundParts, overlap: _Overlap) -> Iterator[pl.DataFrame]:
    """The rows a rule's findings (``coded``) remove (rejected, or duplicates), each
    once, a part at a time; every finding told to ``overlap``."""
    for part in coded.read():
        overlap.add(part)
        removed = part.select(*KEYS, "_disposition").filter(pl.col("_disposition").is_in(_REMOVED))
        yield removed.filter(~repeated_keys(removed, every=False))


class _Overlap:
    """Which of the state's rows more than one finding names (several rules', or one
    rule's twice), told the findings a part at a time: two bits a row of the state, each
    part's rows placed among the state's (:func:`~pipeline.decide.context.placer`).
    Sorting every finding's keys at once held ~25 bytes a finding (the replay rule's
    300,115 retries of a duplicate-heavy export)."""

    def __init__(self, rows: pl.DataFrame) -> None:
        self.place = placer(rows)
        self.seen = np.zeros((rows.height + 7) // 8, np.uint8)
        self.twice = np.zeros_like(self.seen)
        #: the findings told
        self.found = 0

    def add(self, part: pl.DataFrame) -> None:
        """Tell the findings of ``part`` (one rule's)."""
        self.found += part.height
        # a row this part names twice is told once: :meth:`several` finds it in the part
        again = repeated_keys(part, every=False)
        at = self.place(keys_of(part, ~again) if again.any() else keys_of(part))
        byte, bit = at >> 3, _bits(at)
        np.bitwise_or.at(self.twice, byte, self.seen[byte] & bit)
        np.bitwise_or.at(self.seen, byte, bit)

    def several(self, part: pl.DataFrame) -> npt.NDArray[np.bool_]:
        """Which rows of ``part`` (told before) more than one finding names."""
        mask = repeated_keys(part)
        once = np.flatnonzero(~mask)
        at = self.place(keys_of(part, ~mask) if mask.any() else keys_of(part))
        mask[once] = (self.twice[at >> 3] & _bits(at)) != 0
        return mask


def _bits(at: npt.NDArray[np.int64]) -> npt.NDArray[np.uint8]:
    """Each place's bit within its byte."""
    bits: npt.NDArray[np.uint8] = np.left_shift(1, at & 7).astype(np.uint8)
    return bits


def _decisions(
    ctx: GlobalContext,
    kind: str,
    found: list[tuple[CrossRule, FoundParts, int]],
    overlap: _Overlap,
) -> Iterator[pl.DataFrame]:
    """One decision a row from the rules' findings (each rule's, in rule order, read
    again a part at a time): the most severe disposition, every rule's reason, and a
    retry's pointer. A row one rule found (nearly every row) is made whole and decided
    :data:`PART_ROWS` at a time; the rows several rules found (``overlap``) are then
    sorted and merged (:func:`_merged`). Sorting and grouping every finding held ~240
    bytes a finding at the stage's peak (300,115 retries of a duplicate-heavy export),
    and every finding made whole at once ~250. Each rule's parts are read again as
    many as they were (``found``'s counts): parts that changed between two reads
    would decide other rows than those the rules after it saw removed."""
    merged = []
    for rule, hits, count in found:
        read = 0
        for part in hits.read():
            read += part.height
            of_several = overlap.several(part)
            once = part.filter(~of_several) if of_several.any() else part
            for lo in range(0, once.height, PART_ROWS):
                yield _reasoned(_finished(ctx, kind, rule, once.slice(lo, PART_ROWS)))
            del once
            if of_several.any():
                merged.append(_finished(ctx, kind, rule, part.filter(of_several)))
        if read != count:
            raise AssertionError(f"{rule.code}: {count} findings told, {read} read again")
    if merged:
        yield _merged(pl.concat(merged, how="diagonal_relaxed"))


def _finished(ctx: GlobalContext, kind: str, rule: CrossRule, part: pl.DataFrame) -> pl.DataFrame:
    """A part of ``rule``'s findings made whole (:attr:`CrossRule.finish`), its codes and
    dispositions as text."""
    whole = part if rule.finish is None else rule.finish(ctx, kind, part)
    return whole.with_columns(
        pl.col("_code").cast(pl.String), pl.col("_disposition").cast(pl.String)
    )


def _reason() -> pl.Expr:
    return pl.struct(code=pl.col("_code"), path=pl.lit(""), detail=pl.col("_detail"))


def _pointer(hits: pl.DataFrame) -> list[pl.Expr]:
    """A retry's pointer to the row kept, and its rule, where ``hits`` hold pointers."""
    if "_duplicate_of" not in hits.columns:
        return []
    rule = pl.when(pl.col("_duplicate_of").is_not_null()).then(pl.lit("retry"))
    return [pl.col("_duplicate_of"), rule.alias(DEDUPE_RULE.name)]


def _reasoned(hits: pl.DataFrame) -> pl.DataFrame:
    """The decisions of rows one rule found (``hits``, made whole): each its finding."""
    return hits.select(
        *KEYS, "_disposition", pl.concat_list(_reason()).alias("_reasons_add"), *_pointer(hits)
    )


def _merged(hits: pl.DataFrame) -> pl.DataFrame:
    """The decisions of rows several rules found (``hits``, made whole): the most severe
    disposition, every rule's reason (by code), and a retry's pointer."""
    return (
        hits.with_columns(
            _severity=pl.col("_disposition").replace_strict(_SEVERITY, return_dtype=pl.Int8)
        )
        .sort(["_shard", "_shard_line", "_code"])
        .group_by(["_shard", "_shard_line"], maintain_order=True)
        .agg(
            pl.col("_disposition").sort_by("_severity").last(),
            _reason().alias("_reasons_add"),
            *(p.drop_nulls().first() for p in _pointer(hits)),
        )
    )
