"""The dedupe stage (order 200): exact, normalised and near duplicates and split
contamination among the rows still accepted after the cross-record rules.

Removed rows become ``duplicate`` and land in ``duplicates/<kind>/`` with
``_duplicate_of`` (the kept row's source, line and record SHA-256), ``_dedupe_rule``,
``_dedupe_cluster`` and, for near matches, ``_similarity_estimated`` /
``_similarity_verified``; their reason is ``dedupe.<rule>``. Rows of a task or ``meta``
group that straddles splits stay accepted with the reason ``dedupe.split_group``. Whole-run
tables: ``dedupe/clusters/<kind>.parquet`` and ``dedupe/split_groups/<kind>.parquet``.

Only a row that shares its content fingerprint or normalised key digest with another
accepted row, or whose key text has a verified near pair, can be removed or have a row
removed in its favour; the matching decides among those rows alone
(:func:`~pipeline.dedupe.clusters.find_duplicates`), and they are found without holding
a value of every row in the driver (:func:`_participants`): hash-first checks on the
engine find the rows whose fingerprint or digest hash repeats (with the exact rule, only
the best-ranked row of each fingerprint in each split, which leads the others and
decides for them: :func:`_leaders`), and the near rule's
candidates are found and checked on the engine, over texts described by their
exceptions (:class:`~pipeline.dedupe.partitions.SparseTexts`), whose sets tasks read the
candidates' texts once (:class:`StagedTexts`); only a survivor rule by a column of text,
with the near rule on, reads that column of every row (:func:`_near_places`; a column of
numbers is read a shard at a time as the texts are staged, each value's order key its
rank). The gate's
workers computed each row's normalised key digest and MinHash signature
(:mod:`pipeline.dedupe.row_keys`); the other rows count in the statistics, and in split
groups when the kind's rows come from several splits. Without staged row keys the stage
computes them from the key texts of every accepted row (the reference path, which
matches every accepted row).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, cast

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.core.config import CampaignConfig, ConfigError, DedupeSettings
from pipeline.core.reasons import DEDUPE_CODES, DEDUPE_SPLIT_GROUP, Disposition
from pipeline.decide.context import (
    ARTIFACT_ROWS,
    DEDUPE_RULE,
    DUPLICATE_OF,
    KEYS,
    Decisions,
    GlobalContext,
    OutputColumn,
    keys_of,
    register_stage,
    shard_runs,
    staged_rows,
)
from pipeline.dedupe.keys import DedupeKey, text_columns
from pipeline.dedupe.minhash import LshParams
from pipeline.dedupe.normalise import Normalisation
from pipeline.dedupe.participants import (
    NONE_SHARED,
    Led,
    NearPlaces,
    Participants,
    Shared,
    dense_ranking,
    keyed_ranks,
    mapped_ranking,
    participant_keys,
    sparse_texts,
    survivor_ranks,
)
from pipeline.dedupe.partitions import NearSearch, Ranking, Ranks, stage_sparse_texts
from pipeline.dedupe.row_keys import NORMALISED, SIGNATURE, RowKeys
from pipeline.dedupe.splits import SplitGroups, field_expr
from pipeline.dedupe.survivor_keys import text_order_keys
from pipeline.dedupe.table import (
    RemovedRows,
    check_survivor_column,
    group_fields,
    has_order_keys,
    match_duplicates,
    ranked_values,
    required_columns,
    survivor_value,
)
from pipeline.kinds import get_kind
from pipeline.storage import RunStorage

__all__ = ["Dedupe"]

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

_ON_DUPLICATES: Final = frozenset({Disposition.DUPLICATE})
#: the stage's decisions are made and staged this many rows at a time: a part's making
#: and staging peaks ~300 bytes a row above what the stage holds (a part of 65,536 rows,
#: ~20 MB, was the run's peak on an export of half copies, at any size). The cluster
#: table is made a row group of its file at a time (:data:`ARTIFACT_ROWS` clusters: a
#: part of 16,384 was ~1 KB a cluster for the moment it was made)
DECISION_ROWS: Final = 16_384
#: staged lineage the stage reads for its rows: exact groups, and what pointers name
_DIGESTS: Final = ("_content_sha256", "_record_sha256")


@register_stage
class Dedupe:
    name = "dedupe"
    order = 200
    reason_codes = (*DEDUPE_CODES.values(), DEDUPE_SPLIT_GROUP)

    def enabled(self, config: CampaignConfig) -> bool:
        return config.dedupe.enabled

    def output_columns(self, ctx: GlobalContext, kind: str) -> Sequence[OutputColumn]:
        return [
            DUPLICATE_OF,  # shared with the cross-record rules' retries
            DEDUPE_RULE,
            OutputColumn("_dedupe_cluster", pa.int64(), _ON_DUPLICATES),
            OutputColumn("_similarity_estimated", pa.float64(), _ON_DUPLICATES),
            OutputColumn("_similarity_verified", pa.float64(), _ON_DUPLICATES),
        ]

    def decide(self, ctx: GlobalContext, kind: str, rows: pl.DataFrame) -> Decisions:
        settings = ctx.config.dedupe
        key = get_kind(kind).dedupe_key()
        # rejected and quarantined rows never take part, not even as survivors; row ids
        # are places among the accepted rows
        is_accepted = rows["_disposition"] == Disposition.ACCEPTED.value
        accepted = AcceptedRows.of(rows, is_accepted)
        count = accepted.height
        split = ctx.split().alias("_split")
        several = _several_splits(ctx, accepted)
        # Keys name JSON members; a kind may store one apart under another column name
        # (pw-decide-row's ``meta`` is the ``_meta`` column).
        apart = get_kind(kind).apart
        back = {column: member for member, column in apart.items()}
        fields = group_fields(key, settings, kind)
        ctx.on_stage(f"{kind}: dedupe: read keys")
        # the gate's row keys stand in for the key texts (normalised and near rules)
        found, led = None, None
        if not _reads_texts(settings, key) or ctx.has_row_keys(kind):
            # the rows another leads leave the rows taking part (from here, ``accepted``)
            accepted, led, exact = _leaders(ctx, kind, rows, accepted)
            found = _participants(ctx, kind, key, rows, accepted, exact)
            del exact  # the participants' exact groups (their own arrays) from here
            if found is None:  # every accepted row takes part (the reference path)
                accepted, led = AcceptedRows.of(rows, is_accepted), None
            elif led is not None:  # mapped from a staged file until their decisions
                led = _led_mapped(ctx, kind, led, found.places)
        # the split groups' fields only where the matching's rows find them (the
        # reference path: every accepted row; else _straddling_candidates reads them)
        grouping = found is None and several
        columns = _payload_columns(ctx, kind, key, found is None, grouping)
        if found is None:  # every accepted row takes part, with its payload and lineage
            part = ctx.with_lineage(accepted.keys()).drop("_input")
            frame = part.hstack(_payload(ctx, kind, rows, is_accepted, [*columns, *_DIGESTS]))
        else:  # the digests and lineage are read through the row keys (_row_keys)
            named = accepted.keys(found.places)
            frame = ctx.fetched(kind, named, columns) if columns else named
            del named
        frame = frame.with_columns(split).rename(back, strict=False)
        row_keys = _row_keys(ctx, kind, frame, found) if found is not None else None
        ctx.on_stage(f"{kind}: dedupe: match")
        # the kept rows' lineage, read through the row keys, staged and mapped
        hold = functools.partial(_lineage_mapped, ctx, kind)
        matches = match_duplicates(frame, key, settings, kind, row_keys, hold)
        ctx.on_stage(f"{kind}: dedupe: clusters")
        # the matching holds its decision: of the rows that took part, only their places
        # among the accepted rows are read on (their groups and keys, held through the
        # cluster table, were ~40 bytes a row that took part)
        places = None if found is None else found.places
        del found, row_keys
        everyone = pl.DataFrame(schema={"_split": pl.String})
        if places is None:
            everyone = frame if several else everyone
        else:
            # the removed rows' places among all rows taking part (the accepted rows
            # but those led), which are the row ids
            matches.removed = matches.removed.placed(places)
            if several:  # a task (or group) of rows matched or not may straddle
                everyone = _straddling_candidates(ctx, kind, rows, accepted, fields)
        del frame, places
        followed = None
        if led is not None:  # the rows led, named by their places in the state
            followed = matches.followed(led.leaders, led.rows)
            led = None
        outcome = matches.complete(everyone, fields, count)
        clusters = (part.to_arrow() for part in outcome.clusters.parts(ARTIFACT_ROWS))
        ctx.write_artifact(f"dedupe/clusters/{kind}.parquet", clusters, kind)
        ctx.write_artifact(
            f"dedupe/split_groups/{kind}.parquet",
            outcome.groups.table().to_arrow(),
            kind,
        )
        ctx.notes.setdefault(self.name, {})[kind] = outcome.stats
        return _decisions(accepted, outcome.removed, outcome.groups, followed)


#: the accepted rows are counted a block of this many rows of the state at a time
_BLOCK: Final = 1 << 16


@dataclass(frozen=True)
class AcceptedRows:
    """The state's accepted rows, named by their places among them (the matching's row
    ids), from a mask over the state (1 byte a row, which the stage reads anyway) and the
    count of accepted rows before each block of :data:`_BLOCK` rows (8 bytes a block): a
    place is found in its block's mask. The places the stage asks for ascend (the rows
    taking part, the removed rows, the candidates of split groups), so each block is
    searched about once a pass. Every accepted row's place in the state, held instead,
    was the stage's largest array of every row (4 bytes a row)."""

    state: pl.DataFrame
    mask: npt.NDArray[np.bool_]
    #: the accepted rows before each block, then every accepted row
    before: I64

    @classmethod
    def of(cls, state: pl.DataFrame, is_accepted: pl.Series) -> AcceptedRows:
        return cls.masked(state, is_accepted.to_numpy())

    @classmethod
    def masked(cls, state: pl.DataFrame, mask: npt.NDArray[np.bool_]) -> AcceptedRows:
        """The rows of ``state`` where ``mask`` holds (held, not copied)."""
        # counted a block at a time: a sum over the blocks at once (``reduceat`` with an
        # int64 dtype) cast the whole mask to int64 first, 8 bytes a row for a moment
        counts = [np.count_nonzero(mask[lo : lo + _BLOCK]) for lo in range(0, len(mask), _BLOCK)]
        before = np.zeros(len(counts) + 1, np.int64)
        np.cumsum(counts, out=before[1:])
        return cls(state, mask, before)

    @property
    def height(self) -> int:
        return int(self.before[-1])

    def places(self, at: I64) -> I64:
        """The state's rows of the accepted rows at ``at`` (places among them), in
        their order."""
        at = np.asarray(at, np.int64)
        if not len(at):
            return at
        if int(at.min()) < 0 or int(at.max()) >= self.height:
            raise IndexError(f"an accepted row past the {self.height} there are")
        block = np.searchsorted(self.before, at, side="right") - 1
        order = None if bool((block[1:] >= block[:-1]).all()) else np.argsort(block, kind="stable")
        blocks = block if order is None else block[order]
        wanted = at if order is None else at[order]
        found = np.empty(len(at), np.int64)
        bounds = [0, *(np.flatnonzero(np.diff(blocks)) + 1).tolist(), len(at)]
        for lo, hi in itertools.pairwise(bounds):
            b = int(blocks[lo])
            within = np.flatnonzero(self.mask[b * _BLOCK : (b + 1) * _BLOCK])
            found[lo:hi] = b * _BLOCK + within[wanted[lo:hi] - self.before[b]]
        if order is None:
            return found
        placed = np.empty_like(found)
        placed[order] = found
        return placed

    def leaving_out(self, rows: I64) -> AcceptedRows:
        """The accepted rows but the state's ``rows``, in this object's mask: taken, not
        copied (a mask of every row, 1 byte a row); this object is left with its count
        alone (:attr:`height`)."""
        self.mask[rows] = False
        return AcceptedRows.masked(self.state, self.mask)

    def keys(self, places: I64 | None = None) -> pl.DataFrame:
        """The keys (``_shard``, ``_shard_line``) of the accepted rows at ``places`` (of
        every accepted row without)."""
        if places is None:
            return keys_of(self.state, self.mask)
        return keys_of(self.state)[self.places(places)]

    def shards(self) -> set[int]:
        """The shards that hold an accepted row, read off the state's runs of shards."""
        shards, bounds = shard_runs(self.state)
        if not len(shards):
            return set()
        holding = np.logical_or.reduceat(self.mask, bounds[:-1])  # runs are never empty
        return set(shards[holding].tolist())


def _several_splits(ctx: GlobalContext, accepted: AcceptedRows) -> bool:
    """Whether the accepted rows come from shards of more than one split label: only
    then can a split group straddle splits. The state's shards are read only where the
    run's inputs have several labels."""
    if len({s.input.split for s in ctx.shards} - {None}) < 2:
        return False
    return len({ctx.shards[s].input.split for s in accepted.shards()} - {None}) > 1


def _straddling_candidates(
    ctx: GlobalContext,
    kind: str,
    rows: pl.DataFrame,
    accepted: AcceptedRows,
    fields: Sequence[str],
) -> pl.DataFrame:
    """The accepted rows a straddling group can hold: those whose value of a split-group
    field is found in more than one split among every staged row (a varying check on the
    engine per field, :meth:`GlobalContext.repeats`: the field's hash grouped, the
    split's number the value), with ``_row`` (their places among the accepted rows),
    ``_split`` and the fields' columns (by their members' names). The split groups found
    among them are those found among every accepted row: every row of a value found in
    two splits is here. Every accepted row's fields read and grouped here held ~530
    bytes a row (1,000,000 pw-decide-row rows in two splits, three fields)."""
    apart = get_kind(kind).apart
    schema = ctx.staged_schema(kind)
    split = pl.col("_shard").replace_strict(ctx.split_numbers(), return_dtype=pl.UInt64)
    hit = np.zeros(rows.height, np.bool_)
    roots = set()
    for i, path in enumerate(fields):
        root = _root(path)
        stored = apart.get(root, root)
        value = field_expr(stored + path[len(root) :], schema)
        if value is None:  # the kind stages no such column: no group
            continue
        roots.add(stored)
        where = value.is_not_null() & split.is_not_null()
        found, _ = ctx.repeats(
            kind, rows, f"split-group-{i}", value.hash(), value=split, where=where
        )
        hit |= found
    places = np.flatnonzero(hit[accepted.mask])
    candidates = accepted.keys(places)
    candidates = ctx.fetched(kind, candidates, sorted(roots)) if roots else candidates
    back = {column: member for member, column in apart.items()}
    return candidates.select(
        pl.Series("_row", places, pl.Int64), ctx.split().alias("_split"), *sorted(roots)
    ).rename(back, strict=False)


def _decisions(
    accepted: AcceptedRows,
    removed: RemovedRows,
    groups: SplitGroups,
    followed: RemovedRows | None = None,
) -> Iterator[pl.DataFrame]:
    """The stage's decisions, made :data:`DECISION_ROWS` removed rows at a time (then the
    rows of split groups, flagged, as many at a time), for ``accepted`` rows (row ids
    are places among them). The driver stages each slice as it comes and keeps
    its rows' keys, dispositions and reason codes: every removed row's verdict at once
    (its pointer to the kept row, with a path and a digest, and its reason) was ~160
    bytes a removed row at the stage's peak (57 MB for 359,577 removed rows of a
    duplicate-heavy export), and every flagged row's reasons at once ~200 bytes a row."""
    parts: list[tuple[RemovedRows, Callable[[I64], pl.DataFrame]]] = [(removed, accepted.keys)]
    if followed is not None:  # the rows led, named by their places in the state
        parts.append((followed, lambda at: keys_of(accepted.state)[at]))
    for verdicts_of, keys_at in parts:
        for lo in range(0, len(verdicts_of), DECISION_ROWS):
            verdicts = verdicts_of.slice(lo, min(lo + DECISION_ROWS, len(verdicts_of)))
            keys = keys_at(verdicts["_row"].to_numpy())
            part = pl.concat([keys, verdicts.drop("_row")], how="horizontal").select(
                pl.exclude("_reason"),
                _disposition=pl.lit(Disposition.DUPLICATE.value),
                _reasons_add=pl.concat_list("_reason"),
            )
            # none of it held while the next part is made (~13 MB a part: its pointers'
            # paths and digests and its reasons, whose buffers the part shares)
            del verdicts, keys
            yield part
            del part
    for flagged in groups.flagged(DECISION_ROWS):
        yield pl.concat(
            [accepted.keys(flagged["_row"].to_numpy()), flagged.select(_reasons_add="_reasons")],
            how="horizontal",
        )


def _reads_texts(settings: DedupeSettings, key: DedupeKey | None) -> bool:
    """Whether a rule that compares key texts is on (the normalised or near rule, for a
    kind that has a key): without the gate's row keys, the stage computes them from
    the texts of every accepted row (the reference path)."""
    return key is not None and (settings.normalised or settings.near)


def _payload_columns(
    ctx: GlobalContext, kind: str, key: DedupeKey | None, texts: bool, splits: bool
) -> list[str]:
    """The staged payload columns the matching reads (:func:`required_columns`, as the
    kind stages them); the split groups' fields only when the rows are of several
    ``splits`` (else no group can straddle splits). With ``texts`` (every accepted row
    read: the reference path, or an accepted row without a fingerprint), the key's
    columns too: where a row has no fingerprint they decide exact duplicates, as in
    ``rowgate dedupe``. A configured column the kind lacks is an error either way."""
    settings, apart = ctx.config.dedupe, get_kind(kind).apart
    # the key columns decide exact duplicates where a row has no fingerprint
    keyed = list(key.columns) if texts and key is not None and settings.exact else []
    read = required_columns(key, settings, kind, texts=texts)
    available = _available(ctx, kind, list(dict.fromkeys(apart.get(c, c) for c in [*read, *keyed])))
    if splits:
        return available
    alone = required_columns(key, settings, kind, texts=texts, groups=False)
    return [c for c in available if c in {apart.get(c, c) for c in [*alone, *keyed]}]


def _leaders(
    ctx: GlobalContext, kind: str, rows: pl.DataFrame, accepted: AcceptedRows
) -> tuple[AcceptedRows, Led | None, Shared | None]:
    """The accepted rows that take part in the matching, those that do not because
    another row leads them, and the leaders' exact groups: with the exact rule on, the
    rows of a content fingerprint in one split are led by their best-ranked by the
    survivor rule (their first, their last, or their best by a column's value:
    :meth:`GlobalContext.led_groups`, on the engine, which ranks a group's rows as the
    matching ranks every row): each is
    removed in its leader's favour, or as its leader is
    (:class:`~pipeline.dedupe.clusters.Followed`), which is the verdict the matching
    gives a row its representative represents, so the matching holds the leaders
    alone, each counting the rows it leads. Every row of an exact group in the matching
    held ~120 bytes at the dedupe stage's peak; a row led holds 16. ``None``s: every
    accepted row takes part (a row has no fingerprint)."""
    settings = ctx.config.dedupe
    if not settings.exact:
        return accepted, None, None
    if _any_accepted(ctx, kind, rows, accepted.mask, pl.col("_content_sha256").is_null()):
        return accepted, None, None
    rule = settings.survivor_rule(kind)
    leader, _, column = rule.partition(":")
    # its 32 bytes (the gate writes it in lowercase hex: one text a digest)
    fingerprint = pl.col("_content_sha256").str.decode("hex")
    grouped, (counts, followers, leaders) = ctx.led_groups(
        kind,
        rows,
        "fingerprints",
        fingerprint,
        _hashed(fingerprint),
        left_out=~accepted.mask,
        leader=leader,
        rank=_survivor_expr(ctx, kind, column) if column else None,
    )
    if (grouped.found & ~accepted.mask).any():
        raise AssertionError(f"{kind}: fingerprints: a row left out was found")
    # the rows led ascend, each with its leader's place in the state
    taking = accepted.leaving_out(followers)
    places = np.flatnonzero(grouped.found[taking.mask]).astype(np.int64)
    _placed_among(leaders, np.flatnonzero(grouped.found), places)
    exact = Shared.of(places, grouped.groups, counts)
    return taking, Led(followers, leaders), exact


def _placed_among(rows: I64, known: I64, places: I64) -> None:
    """Each of ``rows`` (each one of ``known``, ascending) as the place ``places`` gives
    that one (lined up with ``known``), in place, a slice at a time: the leaders' places
    in the state as their places among the rows taking part, with nothing beside the
    rows led but a slice's (every row led's leader placed among the accepted rows at
    once, by a sort of their blocks, held ~30 bytes a row led of temporaries at the
    keys' read peak)."""
    for lo in range(0, len(rows), DECISION_ROWS):
        part = rows[lo : lo + DECISION_ROWS]
        at = np.searchsorted(known, part)
        if not bool((at < len(known)).all()) or bool((known[at] != part).any()):
            raise AssertionError("a row led by a row that is not found")  # never expected
        part[:] = places[at]


def _led_mapped(ctx: GlobalContext, kind: str, led: Led, places: I64) -> Led:
    """The rows ``led`` with each one's leader's place among the rows the matching
    decides (``places``: theirs among the accepted rows, where ``led`` has the
    leaders'), staged and memory-mapped (:meth:`RunStorage.led_stem`): pages of a file,
    which the kernel may evict and read again, as the state's keys are. Held in the
    driver's memory from the leaders' check to their decisions, the rows led were 16
    bytes each through the matching, the cluster table and the decisions."""
    leaders = led.leaders  # each leader's place among the rows the matching decides
    for lo in range(0, len(leaders), DECISION_ROWS):  # in place: no second array of them
        part = leaders[lo : lo + DECISION_ROWS]
        part[:] = np.searchsorted(places, part)
    table = pa.table({"rows": led.rows, "leaders": leaders})
    del led, leaders
    mapped = _mapped_parts(ctx, ctx.storage.led_stem(kind), iter([table]))
    return Led(*(_mapped(mapped[name]) for name in ("rows", "leaders")))


def _lineage_mapped(ctx: GlobalContext, kind: str, parts: Iterator[pa.Table]) -> pa.Table:
    """The kept rows' lineage (:class:`~pipeline.dedupe.table.KeptLineage`), read a part
    at a time, staged and memory-mapped (:meth:`RunStorage.kept_stem`), each
    ``_source`` as its place among the run's inputs' paths (one dictionary for every
    part: 4 bytes a kept row of the file, not its path's). Held in the driver's memory,
    it was ~44 bytes a cluster from the matching to the decisions."""
    paths = pa.array(sorted({s.input.path for s in ctx.shards}), pa.large_string())

    def encoded() -> Iterator[pa.Table]:
        for part in parts:
            codes = pc.index_in(part["_source"], value_set=paths).combine_chunks()
            if codes.null_count:
                raise AssertionError(f"{kind}: a kept row of none of the run's inputs")
            source = pa.DictionaryArray.from_arrays(codes, paths)
            yield part.set_column(part.schema.get_field_index("_source"), "_source", source)

    return _mapped_parts(ctx, ctx.storage.kept_stem(kind), encoded())


def _mapped_parts(ctx: GlobalContext, stem: str, parts: Iterator[pa.Table]) -> pa.Table:
    """``parts`` (one or more, of one schema) staged as the whole run's ``stem``, a part
    at a time as they come, and given back memory-mapped (:meth:`RunStorage.whole_table`):
    the pages of a file, which the kernel may evict and read again, as the state's keys
    are, rather than the driver's own memory."""
    first = next(parts)
    with ctx.storage.whole_writer(stem, first.schema) as writer:
        writer.write_table(first)
        del first
        for part in parts:
            writer.write_table(part)
    return ctx.storage.whole_table(stem)


def _mapped(column: pa.ChunkedArray) -> I64:
    """A staged column of integers as an array over the file's pages (one record batch:
    no copy); a copy where it has none or several."""
    if column.num_chunks == 1:
        return cast(I64, column.chunk(0).to_numpy(zero_copy_only=True))
    return cast(I64, column.to_numpy())


def _participants(
    ctx: GlobalContext,
    kind: str,
    key: DedupeKey | None,
    rows: pl.DataFrame,
    accepted: AcceptedRows,
    exact: Shared | None = None,
) -> Participants | None:
    """The accepted rows that can be removed or have a row removed in their favour,
    found without a value of every row in the driver: the leaders of the exact groups
    (``exact``, :func:`_leaders`), the rows whose normalised key digest another accepted
    row shares (a grouping check on the engine, :func:`_shared`, which gives each such
    row its group), and those whose text has a verified near pair (:func:`_near_places`,
    which alone may read a value of every row: a survivor rule's column of text). ``None`` when
    a row has no fingerprint (no leaders with the exact rule on): then key columns
    decide, over every row.

    The matching decides among these rows as it would among all
    (:func:`~pipeline.dedupe.clusters.find_duplicates` takes the same rows from every
    row's groups): a row that shares no group and no pair is kept and named by nothing.
    Ranking every accepted row's digests in the driver (their prefixes, ranks and the
    sort's temporaries) and matching every accepted row raised the stage's peak by ~60
    bytes a row more, with near and normalised dedupe on (at a million rows); reading
    each participant's digests to group them, ~100 bytes a participant more."""
    settings = ctx.config.dedupe
    accepting = accepted.mask
    stem = ctx.storage.row_keys_stem(kind)
    if not settings.exact:
        exact = None
    elif exact is None:  # a row without a fingerprint (:func:`_leaders` found it)
        return None
    normalised = None
    if settings.normalised and key is not None:
        digest = pl.col(NORMALISED)
        normalised = _shared(ctx, kind, rows, accepting, "normalised", digest, stem)
    near = None
    if settings.near and key is not None and accepted.height > 1:  # one row has no pair
        # a text is a normalised group's first row (an exact group's, with that rule
        # off; with both off, every row is a text: no row is grouped)
        grouped = normalised or exact or NONE_SHARED
        _check_row_keys_line_up(ctx, kind, rows)
        near = _near_places(ctx, kind, key, rows, accepted, grouped)
    return Participants.of(exact, normalised, near)


def _shared(
    ctx: GlobalContext,
    kind: str,
    rows: pl.DataFrame,
    accepting: npt.NDArray[np.bool_],
    name: str,
    key: pl.Expr,
    stem: str | None = None,
) -> Shared:
    """The accepted rows whose ``key`` (a digest, read from ``stem``'s file when given)
    another accepted row shares, and their groups. Grouped on the engine among the
    accepted rows whose key is present (:meth:`GlobalContext.groups`: first on the key's
    64-bit hash, then on the key itself; the other rows left out by a bitmap of their
    lines a shard). Grouped among every row, the check found every retry with its
    original (~550,000 rows of an export of 30 % retries) for the driver to drop."""
    found, groups, _ = ctx.groups(
        kind, rows, name, key, _hashed(key), stem=stem, left_out=~accepting
    )
    if (found & ~accepting).any():
        raise AssertionError(f"{kind}: {name}: a row left out was found")
    return Shared.of(np.flatnonzero(found[accepting]).astype(np.int64), groups)


def _hashed(key: pl.Expr) -> pl.Expr:
    """The 64-bit hash a grouping check groups ``key`` by first."""
    return key.hash(5)


def _check_row_keys_line_up(ctx: GlobalContext, kind: str, rows: pl.DataFrame) -> None:
    """Refuse row keys that do not line up with the kind's staged rows, row for row: the
    near rule's text maps are read beside them by position
    (:meth:`GlobalContext.values` checks each shard's lines against the state's)."""
    ctx.values(kind, rows, {}, stem=ctx.storage.row_keys_stem(kind))


def _near_places(
    ctx: GlobalContext,
    kind: str,
    key: DedupeKey,
    rows: pl.DataFrame,
    accepted: AcceptedRows,
    grouped: Shared,
) -> NearPlaces:
    """The near rule's verified pairs as places among the accepted rows, found and
    checked on the engine (:meth:`~pipeline.dedupe.partitions.NearSearch.search`). The
    texts are the accepted rows but the later rows of each group (``grouped``:
    :func:`~pipeline.dedupe.participants.sparse_texts`), each ranked by the survivor
    rule (its group's best rank): the text maps and addresses are staged a shard at a
    time, never an array of every row's text. A survivor rule by a column reads that
    column for the rows it ranks (:func:`_column_ranking`); by a column of text, for
    every accepted row: the one value of every row this stage may hold."""
    settings = ctx.config.dedupe
    rule = settings.survivor_rule(kind)
    accepting = accepted.mask
    by_column = functools.partial(_column_ranking, ctx, kind, rows, accepted, rule)
    texts = sparse_texts(grouped, survivor_ranks(rule, accepted.height, by_column))
    shards, bounds = shard_runs(rows)
    search = NearSearch(
        ctx.engine,
        ctx.storage,
        kind,
        tuple(zip(shards.tolist(), np.diff(bounds).tolist(), strict=True)),
        LshParams.from_settings(settings),
        ctx.config.engine.resolved_workers(),
        ctx.config.engine.partitions,
        texts.ordered,
    )
    count = stage_sparse_texts(
        ctx.storage, kind, search.shards, accepting, rows["_shard_line"], texts
    )
    columns = _available(ctx, kind, [get_kind(kind).apart.get(c, c) for c in key.columns])
    source = StagedTexts(ctx.storage, kind, tuple(columns), Normalisation.from_settings(settings))
    better, worse, similarity, candidates = search.search(accepting, count, source, ctx.on_stage)
    return NearPlaces(texts.places(better), texts.places(worse), similarity, candidates)


def _column_ranking(
    ctx: GlobalContext,
    kind: str,
    rows: pl.DataFrame,
    accepted: AcceptedRows,
    rule: str,
) -> Ranking:
    """The accepted rows' survivor ranks by a column (``rule``: ``max:``/``min:`` it), in
    :func:`~pipeline.dedupe.table.survivor_rank`'s order over every accepted row. For a
    column of numbers, booleans, dates, times or durations, each row's value's order key and its
    place (:func:`~pipeline.dedupe.participants.keyed_ranks`), read for the rows asked
    for alone: a shard's as its text map is staged, the groups' rows. Ranked among
    every accepted row instead (a sort of every row's value, with its temporaries),
    they were ~100 bytes a row at the stage's peak, and 8 a row held through the
    search. For a column of another type (text), that rank: the column's rule field
    of every accepted row, read a shard at a time (reading the whole column, a struct
    of every rating, and taking the field here held ~110 bytes a row)."""
    direction, column = rule.split(":", 1)
    value = _survivor_expr(ctx, kind, column)
    dtype = pl.DataFrame(schema=ctx.staged_schema(kind)).select(_v=value).schema["_v"]
    if dtype in (pl.String, pl.Binary):
        return mapped_ranking(_text_keys(ctx, kind, rows, accepted, value, direction))
    if not has_order_keys(dtype):
        values = _payload(ctx, kind, rows, pl.Series(accepted.mask), {"_v": value})["_v"]
        return dense_ranking(ranked_values(values, direction))
    root = _root(column)
    stored = get_kind(kind).apart.get(root, root)

    def ranking(places: I64) -> Ranks:
        values = ctx.fetched(kind, accepted.keys(places), [stored]).select(_v=value)["_v"]
        ranks = keyed_ranks(values, places, direction)
        if ranks is None:
            raise AssertionError(f"{kind}: {column} read as {values.dtype}, not {dtype}")
        return ranks

    return ranking


def _text_keys(
    ctx: GlobalContext,
    kind: str,
    rows: pl.DataFrame,
    accepted: AcceptedRows,
    value: pl.Expr,
    direction: str,
) -> npt.NDArray[np.uint64]:
    """Every accepted row's order key by a survivor column of text (``value``), from an
    external sort of the column (:func:`~pipeline.dedupe.survivor_keys.text_order_keys`) read
    a shard at a time, its ranges of values ranked on the engine: a memory-mapped array,
    8 bytes a row of file pages."""
    mask = accepted.mask

    def blocks() -> Iterator[pl.Series]:
        at = 0
        for frame in ctx.aligned(kind, rows, {"_v": value}):
            n = frame.height
            yield frame["_v"].filter(pl.Series(mask[at : at + n]))
            at += n

    directory = ctx.storage.whole_directory(f"{kind}.text-order")
    partitions = ctx.config.engine.partitions
    return text_order_keys(blocks(), accepted.height, direction, directory, ctx.engine, partitions)


def _survivor_expr(ctx: GlobalContext, kind: str, column: str) -> pl.Expr:
    """A survivor rule's ``column`` (dotted: a struct's field) over the kind's staged
    rows (a member stored apart under its column's name); a column the kind lacks, or a
    field of it that is none, is a config error here, in the driver."""
    root = _root(column)
    apart = get_kind(kind).apart
    stored = apart.get(root, root)
    _available(ctx, kind, [stored])  # a column it lacks: refused
    back = {c: member for member, c in apart.items()}
    schema = ctx.staged_schema(kind)
    check_survivor_column(column, pl.Schema({back.get(n, n): t for n, t in schema.items()}), kind)
    return survivor_value(stored + column[len(root) :])


def _payload(
    ctx: GlobalContext,
    kind: str,
    rows: pl.DataFrame,
    is_accepted: pl.Series,
    columns: Sequence[str] | Mapping[str, pl.Expr],
) -> pl.DataFrame:
    """Staged ``columns`` (or expressions over them) of the accepted rows, read shard by
    shard, in their order. Every staged row of the kind is in ``rows``, in the stable order
    key, as shards are read: the results line up with ``rows`` with no join (a join of
    every row on its key cost ~250 bytes per row of hash tables)."""
    exprs = columns if isinstance(columns, Mapping) else {c: pl.col(c) for c in columns}
    return pl.concat(ctx.aligned(kind, rows, exprs)).filter(is_accepted)


def _any_accepted(
    ctx: GlobalContext,
    kind: str,
    rows: pl.DataFrame,
    accepting: npt.NDArray[np.bool_],
    expr: pl.Expr,
) -> bool:
    """Whether ``expr`` (a boolean) holds for an accepted row, read a shard at a time:
    never a value of every row (:meth:`GlobalContext.aligned`)."""
    found, at = False, 0
    for frame in ctx.aligned(kind, rows, {"_v": expr}):
        n = frame.height
        found |= bool((frame["_v"].fill_null(False).to_numpy() & accepting[at : at + n]).any())
        at += n
    return found


def _row_keys(ctx: GlobalContext, kind: str, frame: pl.DataFrame, found: Participants) -> RowKeys:
    """The gate's row keys of the rows taking part (``frame``'s, in order:
    :func:`~pipeline.dedupe.participants.participant_keys`), the lineage and signatures
    of only the rows asked for (those a pointer or a cluster names; the verified
    pairs'). Every participant's two digests and lineage in the frame held ~150 bytes a
    row through the matching (~58 MB at 388,000 rows of a duplicate-heavy export), and
    reading their digests to rank them ~100 bytes a row more."""
    permutations = ctx.config.dedupe.permutations
    stem = ctx.storage.row_keys_stem(kind)
    keys = keys_of(frame)

    def lineage(at: I64) -> pl.DataFrame:
        return ctx.fetched(kind, ctx.with_lineage(keys[at]), ["_record_sha256"])

    def signatures(at: I64) -> npt.NDArray[np.uint32]:
        values = ctx.fetched(kind, keys[at], [SIGNATURE], stem)[SIGNATURE].to_numpy()
        values = values.astype(np.uint32).reshape(len(at), permutations)
        return np.ascontiguousarray(values.T)

    return participant_keys(found, signatures, lineage)


@dataclass(frozen=True)
class StagedTexts:
    """The normalised key texts of a kind's staged rows, read where the run's storage
    is (the driver, or a near sets task: :class:`~pipeline.dedupe.near_check.TextSource`)
    from the staged payload ``columns`` (the kind's column names)."""

    storage: RunStorage
    kind: str
    columns: tuple[str, ...]
    normalisation: Normalisation

    def texts(self, addresses: pa.Table) -> pl.Series:
        """The texts of the rows ``addresses`` name (``_shard``, ``_shard_line``), in
        their order."""
        kind = get_kind(self.kind)
        key = kind.dedupe_key()
        if key is None:
            raise ValueError(f"{self.kind} has no duplicate key")
        wanted = cast(pl.DataFrame, pl.from_arrow(addresses)).select(KEYS)
        if wanted.height == 0:
            return pl.Series("_text", [], pl.String)
        found = staged_rows(self.storage, self.kind, wanted, self.columns)
        rows = wanted.join(found, on=list(KEYS), how="left", maintain_order="left")
        back = {column: member for member, column in kind.apart.items()}
        return (
            rows.rename(back, strict=False)
            .select(text_columns(key, self.normalisation))
            .to_series()
        )


def _root(path: str) -> str:
    return path.split(".", 1)[0]


def _available(ctx: GlobalContext, kind: str, wanted: list[str]) -> list[str]:
    """The wanted payload columns the kind stages; a configured one it lacks is an error."""
    staged = set(ctx.staged_columns(kind))
    settings = ctx.config.dedupe
    configured = {settings.survivor_rule(kind).partition(":")[2].split(".")[0]}
    configured |= {path.split(".")[0] for path in settings.split_groups.get(kind, ())}
    for column in wanted:
        if column not in staged and column in configured:
            raise ConfigError(f"dedupe: {kind} has no column {column!r}")
    return [c for c in wanted if c in staged]
