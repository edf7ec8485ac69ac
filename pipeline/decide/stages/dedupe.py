"""The dedupe stage (order 200): exact, normalised and near duplicates and split
contamination among the rows still accepted after the cross-record rules.

Removed rows become ``duplicate`` and land in ``duplicates/<kind>/`` with
``_duplicate_of`` (the kept row's source, line and record SHA-256), ``_dedupe_rule``,
``_dedupe_cluster`` and, for near matches, ``_similarity_estimated`` /
``_similarity_verified``; their reason is ``dedupe.<rule>``. Rows of a task or ``meta``
group that straddles splits stay accepted with the reason ``dedupe.split_group``. Whole-run
tables: ``dedupe/clusters/<kind>.parquet`` and ``dedupe/split_groups/<kind>.parquet``.

With exact duplicates only (the default), a row whose fingerprint no other accepted row
shares can be neither removed nor kept over a duplicate, so only rows whose fingerprint
hash repeats are read and matched (:func:`_repeated_fingerprints`); the others count in
the statistics, and in split groups when the kind's rows come from several splits. The
normalised and near rules compare key texts, so with either on every row is read (its
group ranks; the matching then decides among the rows that share a group or a near
pair, :func:`~pipeline.dedupe.clusters.find_duplicates`): the
gate's workers computed each row's normalised key digest and MinHash signature
(:mod:`pipeline.dedupe.row_keys`, read through :meth:`GlobalContext.row_keys`), and the
stage reads those; the near candidates are found and checked on the engine, whose sets
tasks read the candidates' texts once (:class:`StagedTexts`).
Without staged row keys the stage computes them from the key texts (the reference path).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, cast

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa

from pipeline.core.config import CampaignConfig, ConfigError, DedupeSettings
from pipeline.core.reasons import DEDUPE_CODES, DEDUPE_SPLIT_GROUP, Disposition
from pipeline.decide.context import (
    DEDUPE_RULE,
    DUPLICATE_OF,
    KEYS,
    GlobalContext,
    OutputColumn,
    register_stage,
    staged_rows,
)
from pipeline.decide.repeats import dense_ranks, digest_prefix, repeated
from pipeline.dedupe.keys import DedupeKey, text_columns
from pipeline.dedupe.minhash import LshParams
from pipeline.dedupe.near_check import STORED
from pipeline.dedupe.normalise import Normalisation
from pipeline.dedupe.partitions import NearSearch
from pipeline.dedupe.row_keys import NORMALISED, SIGNATURE, RowKeys
from pipeline.dedupe.table import group_fields, match_duplicates, required_columns
from pipeline.kinds import get_kind
from pipeline.storage import RunStorage

__all__ = ["Dedupe"]

I64 = npt.NDArray[np.int64]

_ON_DUPLICATES: Final = frozenset({Disposition.DUPLICATE})
#: staged lineage the stage reads for its rows: exact groups, and what pointers name
_DIGESTS: Final = ("_content_sha256", "_record_sha256")
#: the 64-bit prefix of a row's normalised key digest, read for every row
_NORMALISED_PREFIX: Final = "_normalised_prefix"


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

    def decide(self, ctx: GlobalContext, kind: str, rows: pl.DataFrame) -> pl.DataFrame | None:
        settings = ctx.config.dedupe
        key = get_kind(kind).dedupe_key()
        # rejected and quarantined rows never take part, not even as survivors; row ids
        # are places among the accepted rows
        is_accepted = rows["_disposition"] == Disposition.ACCEPTED.value
        # the gate's row keys stand in for the key texts (normalised and near rules)
        keyed = _keyed(ctx, kind, key is not None)
        accepted = rows.select(KEYS).filter(is_accepted)
        split = ctx.split().alias("_split")
        splits = {ctx.shards[s].input.split for s in accepted["_shard"].unique()} - {None}
        # Keys name JSON members; a kind may store one apart under another column name
        # (pw-decide-row's ``meta`` is the ``_meta`` column).
        apart = get_kind(kind).apart
        back = {column: member for member, column in apart.items()}
        exact, digests = _digests(ctx, kind, keyed, rows, is_accepted, accepted)
        columns = [*_payload_columns(ctx, kind, key, not keyed, len(splits) > 1), *digests]
        fields = group_fields(key, settings, kind)
        ctx.on_stage(f"{kind}: dedupe: read keys")
        participants = (
            _repeated_fingerprints(ctx, kind, rows, is_accepted, accepted)
            if _exact_only(settings)
            else None
        )
        part = accepted if participants is None else participants
        # without row keys the rows taking part carry their lineage (with them, only the
        # few rows pointers and clusters name are read: every row's was ~40 bytes a row)
        part = part if keyed else ctx.with_lineage(part).drop("_input")
        if participants is None:  # every accepted row takes part, with its payload
            frame = part.hstack(_payload(ctx, kind, rows, is_accepted, columns))
        else:
            frame = _fetched(ctx, kind, part, columns)
        frame = frame.with_columns(split).rename(back, strict=False)
        row_keys = None
        if keyed and key is not None:
            row_keys = _row_keys(ctx, kind, key, rows, is_accepted, frame, exact)
        ctx.on_stage(f"{kind}: dedupe: match")
        matches = match_duplicates(frame, key, settings, kind, row_keys)
        ctx.on_stage(f"{kind}: dedupe: clusters")
        if participants is None:
            everyone = frame if len(splits) > 1 else pl.DataFrame(schema={"_split": pl.String})
        else:
            # the removed rows' places among all accepted rows, which are the row ids
            matches.removed = matches.removed.placed(frame["_place"].cast(pl.Int64).to_numpy())
            if len(splits) > 1:  # a task (or group) of rows matched or not may straddle
                roots = {apart.get(f, f) for f in map(_root, fields)}
                grouping = _payload(
                    ctx, kind, rows, is_accepted, [c for c in columns if c in roots]
                )
                everyone = pl.concat(
                    [accepted.select(split), grouping.rename(back, strict=False)],
                    how="horizontal",
                )
            else:
                everyone = pl.DataFrame(schema={"_split": pl.String})
        outcome = matches.complete(everyone, fields, accepted.height)
        ctx.write_artifact(f"dedupe/clusters/{kind}.parquet", outcome.clusters.to_arrow(), kind)
        ctx.write_artifact(
            f"dedupe/split_groups/{kind}.parquet",
            outcome.groups.drop("_row").unique(["field", "value"], maintain_order=True).to_arrow(),
            kind,
        )
        ctx.notes.setdefault(self.name, {})[kind] = outcome.stats
        keys = accepted.select(KEYS)
        verdicts = outcome.removed.frame()
        removed = pl.concat(
            [keys[verdicts["_row"]], verdicts.drop("_row")], how="horizontal"
        ).select(
            pl.exclude("_reason"),
            _disposition=pl.lit(Disposition.DUPLICATE.value),
            _reasons_add=pl.concat_list("_reason"),
        )
        flagged = pl.concat(
            [keys[outcome.flagged["_row"]], outcome.flagged.select(_reasons_add="_reasons")],
            how="horizontal",
        )
        decided = pl.concat([removed, flagged], how="diagonal_relaxed")
        return decided if decided.height else None


def _keyed(ctx: GlobalContext, kind: str, keyed: bool) -> bool:
    """Whether the normalised and near rules read the gate's row keys: when either rule
    is on, the kind has a key, and the gate staged them."""
    return keyed and not _exact_only(ctx.config.dedupe) and ctx.has_row_keys(kind)


def _payload_columns(
    ctx: GlobalContext, kind: str, key: DedupeKey | None, texts: bool, splits: bool
) -> list[str]:
    """The staged payload columns the matching reads (:func:`required_columns`, as the
    kind stages them); the split groups' fields only when the rows are of several
    ``splits`` (else no group can straddle splits). A configured column the kind lacks
    is an error either way."""
    settings, apart = ctx.config.dedupe, get_kind(kind).apart
    wanted = [apart.get(c, c) for c in required_columns(key, settings, kind, texts=texts)]
    available = _available(ctx, kind, wanted)
    if splits:
        return available
    alone = {
        apart.get(c, c) for c in required_columns(key, settings, kind, texts=texts, groups=False)
    }
    return [c for c in available if c in alone]


def _digests(
    ctx: GlobalContext,
    kind: str,
    keyed: bool,
    rows: pl.DataFrame,
    is_accepted: pl.Series,
    accepted: pl.DataFrame,
) -> tuple[npt.NDArray[np.int64] | None, tuple[str, ...]]:
    """The exact groups, if ranked here, and the digests every row taking part is read
    with (exact groups; the kept row a pointer names: they are not state columns). With
    the gate's row keys (``keyed``), the exact groups are ranked on a 64-bit prefix of the
    fingerprints (:func:`_exact_ranks`) and the record digests are read for the rows a
    pointer or a cluster names: 8 bytes a row instead of two 64-character strings."""
    if not keyed:
        return None, _DIGESTS
    if not ctx.config.dedupe.exact:
        return None, ()
    exact = _exact_ranks(ctx, kind, rows, is_accepted, accepted)
    return exact, ("_content_sha256",) if exact is None else ()


def _exact_only(settings: DedupeSettings) -> bool:
    """Whether only equal fingerprints can make rows duplicates (no normalised or near
    rule, which compare key texts): then a row whose fingerprint is unique takes no part."""
    return settings.exact and not settings.normalised and not settings.near


def _repeated_fingerprints(
    ctx: GlobalContext,
    kind: str,
    rows: pl.DataFrame,
    is_accepted: pl.Series,
    accepted: pl.DataFrame,
) -> pl.DataFrame | None:
    """The ``accepted`` rows whose content fingerprint another accepted row may share, with
    their ``_place`` among them; ``None`` if a row has no fingerprint (then key columns
    decide, over every row).

    Profile-guided: the digests and payload of every accepted row, joined to the state,
    were the global phase's largest working set (~480 bytes per row, 285 MB at 600k rows;
    now 40 MB). Rows are grouped on a 64-bit hash of the fingerprint instead
    (:mod:`pipeline.decide.repeats`) and only rows whose hash repeats (duplicates, and the rare
    collision) are read in full and matched on the exact digest, so a collision can never
    invent a duplicate."""
    unprinted = _values(ctx, kind, rows, is_accepted, {"_u": pl.col("_content_sha256").is_null()})
    if unprinted["_u"].any():
        return None
    del unprinted
    # found among every row on the engine; a hash that repeats among the accepted rows
    # repeats among them all, so the accepted rows found are checked again among
    # themselves (few)
    found, groups = ctx.repeats(kind, rows, "fingerprints", _fingerprint_hash())
    accepting = is_accepted.to_numpy()
    shared = found & accepting
    among_accepted = np.zeros(rows.height, np.bool_)
    among_accepted[shared] = repeated(groups[shared[found]]).to_numpy()
    taken = among_accepted[accepting]
    # the places of the rows taken alone: numbering every accepted row first copied them all
    place = pl.Series("_place", np.flatnonzero(taken), pl.UInt32)
    return accepted.filter(taken).insert_column(0, place)


def _fingerprint_hash() -> pl.Expr:
    return pl.col("_content_sha256").hash(5)


def _fingerprint_prefix() -> pl.Expr:
    """The fingerprint's first 64 bits: its lowercase hex digits order as its value does."""
    return pl.col("_content_sha256").str.slice(0, 16).str.to_integer(base=16, dtype=pl.UInt64)


def _digest_prefix() -> pl.Expr:
    """The normalised key digest's first 64 bits (:func:`digest_prefix`)."""
    return digest_prefix(NORMALISED)


def _exact_ranks(
    ctx: GlobalContext,
    kind: str,
    rows: pl.DataFrame,
    is_accepted: pl.Series,
    accepted: pl.DataFrame,
) -> npt.NDArray[np.int64] | None:
    """The accepted rows' exact groups: the dense ranks of their content fingerprints,
    as :func:`~pipeline.dedupe.table.match_duplicates` computes them from the digests,
    ranked on the fingerprints' prefixes (:func:`~pipeline.decide.repeats.dense_ranks`);
    ``None`` if a row has no fingerprint or one that is not a lowercase hex digest (then
    the digests decide)."""
    found = _values(
        ctx,
        kind,
        rows,
        is_accepted,
        {
            # (a prefix of a digest that is not one is never read: 0, not null)
            "_prefix": _fingerprint_prefix().fill_null(0),
            "_hex": pl.col("_content_sha256").str.contains("^[0-9a-f]{64}$").fill_null(False),
        },
    )
    if not found["_hex"].all():
        return None
    keys = accepted.select(KEYS)
    return dense_ranks(
        found["_prefix"],
        lambda at: _fetched(ctx, kind, keys[at], ["_content_sha256"])["_content_sha256"],
    )


def _normalised_ranks(
    ctx: GlobalContext,
    kind: str,
    rows: pl.DataFrame,
    is_accepted: pl.Series,
    frame: pl.DataFrame,
) -> pl.Series:
    """The accepted rows' normalised groups: the dense ranks of their normalised key
    digests, ranked on the digests' prefixes; the digests themselves if one is missing."""
    stem = ctx.storage.row_keys_stem(kind)
    prefix = _digest_prefix()
    found = _values(
        ctx,
        kind,
        rows,
        is_accepted,
        {_NORMALISED_PREFIX: prefix.fill_null(0), "_missing": prefix.is_null()},
        stem=stem,
    )
    if found.pop("_missing").any():
        whole = ctx.row_keys(kind, [NORMALISED])
        assert whole is not None  # the prefixes were read from them
        return whole[NORMALISED].filter(is_accepted)
    keys = frame.select(KEYS)

    def digests(at: npt.NDArray[np.int64]) -> pl.Series:
        return _fetched(ctx, kind, keys[at], [NORMALISED], stem)[NORMALISED]

    return pl.Series(NORMALISED, dense_ranks(found.pop(_NORMALISED_PREFIX), digests))


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


def _values(
    ctx: GlobalContext,
    kind: str,
    rows: pl.DataFrame,
    is_accepted: pl.Series,
    exprs: Mapping[str, pl.Expr],
    stem: str | None = None,
) -> dict[str, npt.NDArray[Any]]:
    """Expressions over the staged rows (or ``stem``'s: :meth:`GlobalContext.values`),
    the accepted rows' values only."""
    accepted = is_accepted.to_numpy()
    found = ctx.values(kind, rows, exprs, stem=stem)
    if accepted.all():  # every row: no copy
        return found
    return {name: found.pop(name)[accepted] for name in list(found)}


def _row_keys(
    ctx: GlobalContext,
    kind: str,
    key: DedupeKey,
    rows: pl.DataFrame,
    is_accepted: pl.Series,
    frame: pl.DataFrame,
    exact: npt.NDArray[np.int64] | None,
) -> RowKeys:
    """The gate's row keys of the accepted rows (``frame``'s rows, in order): the
    normalised groups ranked here, the near pairs found and checked on the engine
    (:mod:`pipeline.dedupe.partitions`, :mod:`pipeline.dedupe.near_check`), and the
    signatures and record digests of only the rows asked for (the verified pairs'; the
    rows pointers name). ``exact``: the exact groups (:func:`_exact_ranks`), if ranked."""
    stem = ctx.storage.row_keys_stem(kind)
    apart = get_kind(kind).apart
    columns = _available(ctx, kind, [apart.get(c, c) for c in key.columns])

    def signatures(at: npt.NDArray[np.int64]) -> npt.NDArray[np.uint32]:
        found = _fetched(ctx, kind, frame.select(KEYS)[at], [SIGNATURE], stem)
        permutations = ctx.config.dedupe.permutations
        values = found[SIGNATURE].to_numpy().astype(np.uint32).reshape(len(at), permutations)
        return np.ascontiguousarray(values.T)

    def near(
        groups: npt.NDArray[np.int64],
        text_rows: npt.NDArray[np.int64],
        text_rank: npt.NDArray[np.int64],
    ) -> tuple[I64, I64, npt.NDArray[np.float64], int]:
        return _near_pairs(
            ctx, kind, columns, rows, is_accepted, frame, groups, text_rows, text_rank
        )

    def lineage(at: npt.NDArray[np.int64]) -> pl.DataFrame:
        named = frame.select(KEYS)[at]
        digests = _fetched(ctx, kind, named, ["_record_sha256"])
        return ctx.with_lineage(named).select("_source", "_line", digests["_record_sha256"])

    normalised = None
    if ctx.config.dedupe.normalised:
        normalised = _normalised_ranks(ctx, kind, rows, is_accepted, frame)
    else:  # the near rule's tasks pair the text maps with the row keys by position
        ctx.values(kind, rows, {}, stem=stem)
    on = ctx.config.dedupe.near
    return RowKeys(normalised, near if on else None, signatures if on else None, exact, lineage)


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


def _near_pairs(
    ctx: GlobalContext,
    kind: str,
    columns: Sequence[str],
    rows: pl.DataFrame,
    is_accepted: pl.Series,
    frame: pl.DataFrame,
    groups: I64,
    text_rows: I64,
    text_rank: I64,
) -> tuple[I64, I64, npt.NDArray[np.float64], int]:
    """The near pairs among the texts (``text_rows``: each text's place among the
    accepted rows, ``frame``'s; ``groups``: each accepted row's normalised group, which
    is its text if it is the text's row), found and checked on the engine
    (:meth:`~pipeline.dedupe.partitions.NearSearch.verified`): a text map staged per
    shard, built a shard at a time (24 bytes a row for the whole run's rows at once,
    ~11 MB of the parent's peak at 440 K rows). A shard's rows are one run of the
    state's rows: counted as such (grouping every row by its shard took ~36 MB, the
    near run's peak, at 1 M rows). The sets tasks read the candidates' texts from the
    staged rows (:class:`StagedTexts`: their payload ``columns``) at each text's shard
    and line."""
    shards = rows["_shard"].rle().struct.unnest()
    engine = ctx.config.engine
    settings = ctx.config.dedupe
    search = NearSearch(
        ctx.engine,
        ctx.storage,
        kind,
        tuple(zip(shards["value"].to_list(), shards["len"].to_list(), strict=True)),
        LshParams.from_settings(settings),
        engine.resolved_workers(),
        engine.partitions,
    )
    source = StagedTexts(ctx.storage, kind, tuple(columns), Normalisation.from_settings(settings))
    addresses = frame.select(KEYS)[text_rows].with_columns(pl.Series(STORED, text_rows))
    return search.verified(
        is_accepted.to_numpy(),
        groups,
        text_rows,
        text_rank,
        addresses.to_arrow(),
        source,
        ctx.on_stage,
    )


def _fetched(
    ctx: GlobalContext,
    kind: str,
    rows: pl.DataFrame,
    columns: Sequence[str],
    stem: str | None = None,
) -> pl.DataFrame:
    """``rows`` (a few) with their staged ``columns``, in the order of ``rows``; ``stem``:
    from another file staged beside the kind's rows (:meth:`GlobalContext.fetch`)."""
    payload = ctx.fetch(kind, rows.select(KEYS), columns, stem)
    return rows.join(payload, on=list(KEYS), how="left", maintain_order="left")


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
