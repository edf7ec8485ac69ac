"""Dedupe one kind's rows: keys → groups → near pairs → decisions, as polars frames.

Used by the run's global stage (:mod:`pipeline.decide.stages.dedupe`) and by ``rowgate dedupe``
on existing Parquet (:mod:`pipeline.jobs.dedupe`). The input frame holds the rows that
take part, in the stable order key, with ``_split`` and the survivor and split-group
fields; with the gate's row keys (:class:`~pipeline.dedupe.row_keys.RowKeys`) nothing
else, the groups and the lineage pointers and clusters name being read through them;
without, the key's payload columns and the lineage a pointer names (``_source``,
``_line``, ``_record_sha256``; ``_content_sha256`` when known). Positions in that frame
are the row identities throughout; the matching's own arrays hold only the rows that
can take part (:func:`~pipeline.dedupe.clusters.find_duplicates`).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa

from pipeline.core.arrays import places_in
from pipeline.core.config import ConfigError, DedupeSettings
from pipeline.core.reasons import DEDUPE_CODES
from pipeline.dedupe.clusters import (
    CONTAMINATION,
    EXACT,
    NEAR,
    RULES,
    Duplicates,
    Followed,
    Verdicts,
    find_duplicates,
)
from pipeline.dedupe.keys import DedupeKey, key_columns, text_columns
from pipeline.dedupe.minhash import LshParams, NearPairs, estimated_pairs, near_pairs
from pipeline.dedupe.normalise import Normalisation
from pipeline.dedupe.row_keys import RowKeys
from pipeline.dedupe.splits import SplitGroups, straddling_groups
from pipeline.records.lineage import SHA256_HEX
from pipeline.storage import ROW_GROUP_ROWS

I64 = npt.NDArray[np.int64]

__all__ = [
    "CLUSTER_PART_ROWS",
    "ClusterTable",
    "DedupeOutcome",
    "Holder",
    "KeptLineage",
    "Matches",
    "RemovedRows",
    "check_survivor_column",
    "dedupe_table",
    "dense_ids",
    "group_texts",
    "has_order_keys",
    "match_duplicates",
    "order_keys",
    "ranked",
    "ranked_values",
    "required_columns",
    "splits_of",
    "survivor_rank",
    "survivor_value",
]

#: Clusters made at a time into a run's cluster table (:meth:`ClusterTable.parts`): a
#: multiple of a row group's rows, so the file's row groups are the same for any part
#: size. A part of 65,536 clusters (its frames, its Arrow copy and the writer's pages)
#: was ~30 MB of the dedupe stage's peak on an export of 233,557 clusters.
CLUSTER_PART_ROWS: Final = 4 * ROW_GROUP_ROWS

#: removal rule -> its reason code, ``dedupe.<rule>`` (a rule the catalogue lacks fails here)
_CODES: Final = {rule: DEDUPE_CODES[rule] for rule in RULES[1:]}
_MATCH: Final = {1: "exact", 2: "normalised", 3: "near"}


@dataclass(frozen=True)
class RemovedRows:
    """The removed rows' verdicts, built a slice at a time (:meth:`slice`): one row per
    removed position (``_row``) with the output columns and ``_reason`` (``{code, path,
    detail}``). ``rows``: the removed positions, ascending. A dataset of 1 M rows, nearly
    all duplicates, held ~0.9 KB a removed row when every verdict was built at once."""

    rows: I64
    build: Callable[[int, int], pl.DataFrame]  # removed rows [lo, hi)'s verdicts, no _row

    def __len__(self) -> int:
        return len(self.rows)

    def slice(self, lo: int, hi: int) -> pl.DataFrame:
        """The verdicts of removed rows ``lo`` to ``hi`` (indices into :attr:`rows`)."""
        verdicts = self.build(lo, hi)
        return verdicts.insert_column(0, pl.Series("_row", self.rows[lo:hi], pl.Int64))

    def frame(self) -> pl.DataFrame:
        """Every removed row's verdict at once."""
        return self.slice(0, len(self.rows))

    def placed(self, place: I64) -> RemovedRows:
        """The same verdicts at other positions: removed row ``r`` at ``place[r]`` (in
        ascending order where ``place`` ascends)."""
        return RemovedRows(place[self.rows], self.build)

    @classmethod
    def merged(cls, parts: Sequence[RemovedRows]) -> RemovedRows:
        """The verdicts of ``parts`` (no row in two) as one, their rows ascending, still
        built a slice at a time: a slice is its parts' slices, interleaved. Holds 16
        bytes a removed row: the rows, and where each part's stand among them."""
        some = [part for part in parts if len(part)]
        if len(some) <= 1:
            return some[0] if some else parts[0]
        parts = some
        rows = np.concatenate([part.rows for part in parts])
        order = np.argsort(rows, kind="stable")
        if np.any(rows[order[1:]] == rows[order[:-1]]):
            raise AssertionError("a row removed by two parts")  # never expected
        part_of = np.repeat(np.arange(len(parts)), [len(part) for part in parts])[order]
        # a part's rows ascend: its i-th row is the i-th of its places in the merged order
        places = [np.flatnonzero(part_of == i) for i in range(len(parts))]
        del part_of

        def build(lo: int, hi: int) -> pl.DataFrame:
            frames, gather, done = [], np.empty(hi - lo, np.int64), 0
            for part, at in zip(parts, places, strict=True):
                a, b = (int(i) for i in np.searchsorted(at, [lo, hi]))
                frames.append(part.build(a, b))
                gather[at[a:b] - lo] = done + np.arange(b - a)
                done += b - a
            return pl.concat(frames)[gather]

        return cls(rows[order], build)


@dataclass
class DedupeOutcome:
    """``removed``: the removed rows' verdicts; ``clusters``: one row per kept row that
    has duplicates; ``groups``: the straddling groups and the rows in them (which get a
    straddling-group reason); ``stats``: counts and parameters for the manifest."""

    removed: RemovedRows
    clusters: ClusterTable
    groups: SplitGroups
    stats: dict[str, Any] = field(default_factory=dict)


def _column_root(path: str) -> str:
    return path.split(".", 1)[0]


def required_columns(
    key: DedupeKey | None,
    settings: DedupeSettings,
    kind: str,
    *,
    texts: bool = True,
    groups: bool = True,
) -> list[str]:
    """Payload columns :func:`dedupe_table` reads for a kind (key texts only when a rule
    that reads them is on: exact duplicates need only the fingerprints; none with
    ``texts=False``, when the gate's row keys stand in for them; the split groups' fields
    unless ``groups=False``, when the rows are of one split and no group can straddle)."""
    texts = texts and key is not None and (settings.normalised or settings.near)
    columns = list(key.columns) if texts and key is not None else []
    rule = settings.survivor_rule(kind)
    if ":" in rule:
        columns.append(_column_root(rule.split(":", 1)[1]))
    if groups:
        columns += [_column_root(p) for p in group_fields(key, settings, kind)]
    return list(dict.fromkeys(columns))


def group_fields(key: DedupeKey | None, settings: DedupeSettings, kind: str) -> tuple[str, ...]:
    if kind in settings.split_groups:
        return settings.split_groups[kind]
    return key.split_groups if key is not None else ("task_id",)


def survivor_rank(frame: pl.DataFrame, rule: str, kind: str) -> npt.NDArray[np.int64]:
    """Each row's place in the survivor order (0 is kept first); ties by order key."""
    direction, _, column = rule.partition(":")
    if column:
        check_survivor_column(column, frame.schema, kind)
    return ranked(direction, frame.height, lambda: frame.select(_v=survivor_value(column))["_v"])


def ranked(direction: str, count: int, values: Callable[[], pl.Series]) -> npt.NDArray[np.int64]:
    """The places in the survivor order (0 is kept first) of ``count`` rows in the
    order key, by a survivor rule's ``direction``: their order (``first``), reversed
    (``last``), or their ``values()`` (``max``, ``min``: :func:`ranked_values`)."""
    order = np.arange(count, dtype=np.int64)
    if direction == "first":
        return order
    if direction == "last":
        return count - 1 - order
    return ranked_values(values(), direction)


def check_survivor_column(column: str, schema: pl.Schema, kind: str) -> None:
    """Refuse a survivor rule's column the kind lacks, or a field of it that is none: a
    struct's fields rank rows, a JSON text column's (pw-decide-row's ``meta``) do not,
    and asking for one crashed the run (exit 4) where it now names the setting."""
    root, *rest = column.split(".")
    if root not in schema:
        raise ConfigError(f"dedupe.survivor: {kind} has no column {column!r}")
    dtype: Any = schema[root]
    for i, name in enumerate(rest):
        fields = {f.name: f.dtype for f in dtype.fields} if isinstance(dtype, pl.Struct) else {}
        if name not in fields:
            holder = ".".join([root, *rest[:i]])
            if isinstance(dtype, pl.Struct):
                raise ConfigError(
                    f"dedupe.survivor: {kind}: the struct {holder!r} has no field {name!r}"
                )
            raise ConfigError(
                f"dedupe.survivor: {kind}: {holder!r} is a {dtype} column, not a struct: "
                f"{column!r} names no field to rank rows by"
            )
        dtype = fields[name]


def survivor_value(column: str) -> pl.Expr:
    """A survivor rule's column (dotted: a struct's field) as the rows are ranked by."""
    root, *rest = column.split(".")
    value = pl.col(root)
    for name in rest:
        value = value.struct.field(name)
    return value


def ranked_values(values: pl.Series, direction: str) -> npt.NDArray[np.int64]:
    """Each value's place in the survivor order of a ``max:`` or ``min:`` rule: by value
    (descending for ``max``), rows without one last, ties in their order. A column with
    order keys (:func:`order_keys`) is ranked by them, then whether a value is missing,
    then place (one stable sort of 8-byte keys: ~22–34 bytes a row at its peak and 4–6
    times as fast as polars' sort by value and row index, ~80 bytes a row, measured over
    5 M values); text by polars' ordinal rank (:func:`_ordinal_ranks`); another type by
    polars' sort (:func:`_sorted_ranks`)."""
    keyed = order_keys(values, direction)
    if keyed is None and values.dtype in (pl.String, pl.Binary):
        return _ordinal_ranks(values, direction)
    if keyed is None:
        return _sorted_ranks(values, direction)
    keys, missing = keyed
    order = np.lexsort((missing, keys))  # stable: ties in their order
    del keys, missing
    return places_in(order)


def _ordinal_ranks(values: pl.Series, direction: str) -> npt.NDArray[np.int64]:
    """:func:`ranked_values` of text (or bytes) by polars' ordinal rank, whose ties are in
    their order, the values without a rank (nulls) after, in theirs: over 2 M texts
    ~45–52 bytes a row at its peak against ~85 for :func:`_sorted_ranks`, in the same
    time."""
    ranks = values.rank("ordinal", descending=direction == "max")  # from 1; null: none
    missing = ranks.is_null().to_numpy()
    rank = ranks.fill_null(0).cast(pl.Int64).to_numpy(writable=True)
    del ranks
    rank -= 1
    if missing.any():
        rank[missing] = len(values) - int(missing.sum()) + np.arange(int(missing.sum()))
    return rank


def _sorted_ranks(values: pl.Series, direction: str) -> npt.NDArray[np.int64]:
    """:func:`ranked_values` by polars' sort of the values and their places (any type)."""
    if values.dtype.is_float():
        # a NaN has no value to rank by: last, as a null (polars sorts it above +inf,
        # so ``max:`` kept a NaN row over one scored 2.0)
        values = values.fill_nan(None)
    ranked = (
        pl.DataFrame({"_v": values})
        .with_row_index("_i")
        .sort(["_v", "_i"], descending=[direction == "max", False], nulls_last=True)
    )
    return places_in(ranked["_i"].to_numpy())


#: the 64-bit key of a value :func:`ranked_values` ranks last (a null, or NaN): also some
#: values' (with ``max:``, the least ``Int64``, ``UInt64``'s 0 and ``False``; with
#: ``min:``, the greatest ``Int64`` or ``UInt64``), so a row without a value is told
#: apart by its tie (:data:`~pipeline.dedupe.partitions.NULL_TIE`)
MISSING_KEY: Final = np.uint64(np.iinfo(np.uint64).max)
_SIGN: Final = np.uint64(1 << 63)


def has_order_keys(dtype: pl.DataType) -> bool:
    """Whether :func:`order_keys` orders a column of ``dtype`` (numbers of up to 64 bits,
    booleans, dates, times and durations)."""
    wide = dtype in (pl.Int128, getattr(pl, "UInt128", pl.Int128))
    return (
        (dtype.is_integer() and not wide)
        or dtype.is_float()
        or dtype.is_temporal()
        or (dtype == pl.Boolean)
    )


def order_keys(
    values: pl.Series, direction: str
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.bool_]] | None:
    """Each value as a 64-bit key in the survivor order of a ``max:`` or ``min:`` rule
    (:func:`ranked_values`: equal values, equal keys; a smaller key ranks first), and
    which values are missing (null or NaN, ranked last: :data:`MISSING_KEY`), for a
    column whose values such keys order exactly (:func:`has_order_keys`): rows are then
    ranked by their keys, then their order, with no sort of every row. ``None`` for a
    column of another type (text: its values need not fit 64 bits)."""
    if not has_order_keys(values.dtype):
        return None
    if values.dtype.is_temporal():
        values = values.to_physical()
    if values.dtype == pl.Boolean or values.dtype.is_unsigned_integer():
        keys = values.cast(pl.UInt64).fill_null(0).to_numpy()
    elif values.dtype.is_integer():
        keys = values.cast(pl.Int64).fill_null(0).to_numpy().view(np.uint64) ^ _SIGN
    else:
        values = values.cast(pl.Float64).fill_nan(None)
        # -0.0 and 0.0 are equal values (ties, in their order), so one key: + 0.0
        bits = (values.fill_null(0.0).to_numpy() + 0.0).view(np.uint64)
        keys = np.where(bits & _SIGN, ~bits, bits | _SIGN)  # IEEE order as unsigned
    missing = values.is_null().to_numpy()
    keys = np.asarray(keys, np.uint64)
    if not keys.flags.writeable:  # polars' own buffer
        keys = keys.copy()
    if direction == "max":
        np.invert(keys, out=keys)
    keys[missing] = MISSING_KEY
    return keys, missing


def dense_ids(frame: pl.DataFrame, expr: pl.Expr) -> npt.NDArray[np.int64]:
    """Group ids from 0: rows with equal values share one; a null (a row with no key,
    :func:`~pipeline.dedupe.keys.key_columns`' ``absent``) is a group of its own, after
    the others, in row order."""
    ranks = frame.select(expr.rank("dense")).to_series()
    nulls = ranks.is_null().to_numpy()
    ids = ranks.fill_null(0).to_numpy().astype(np.int64) - 1
    if nulls.any():
        ids[nulls] = int(ids.max(initial=-1)) + 1 + np.arange(int(nulls.sum()), dtype=np.int64)
    return ids


def dedupe_table(
    frame: pl.DataFrame,
    key: DedupeKey | None,
    settings: DedupeSettings,
    kind: str,
) -> DedupeOutcome:
    """Decide the duplicates among ``frame``'s rows (see the module docstring)."""
    matches = match_duplicates(frame, key, settings, kind)
    rows = frame.with_columns(_split=splits_of(frame))
    return matches.complete(rows, group_fields(key, settings, kind), frame.height)


@dataclass
class Matches:
    """The duplicates :func:`match_duplicates` found, before split groups and stats.
    ``removed`` is :attr:`DedupeOutcome.removed`; ``found`` holds the rows that took part."""

    found: Duplicates
    near: NearPairs | None
    removed: RemovedRows
    clusters: ClusterTable
    key: DedupeKey | None
    settings: DedupeSettings
    #: the verdicts of removed rows, as :attr:`removed` holds them (:func:`_removed_rows`)
    verdicts: Callable[[Verdicts, I64, I64 | None], RemovedRows]

    def followed(self, lead: I64, rows: I64) -> RemovedRows:
        """The verdicts of ``rows`` (ascending), which took no part but follow the rows
        at ``lead`` (places among the rows that did, one a row:
        :class:`~pipeline.dedupe.clusters.Followed`), all removed. Holds ``lead`` and
        ``rows`` alone: the rows' places in ``lead`` as an array too, and ``lead`` beside
        the leaders' places it was found from, were 16 bytes a led row more while the
        cluster table was made."""
        if len(lead) != len(rows):
            raise ValueError(f"{len(rows)} rows led, {len(lead)} leaders")
        if not bool((rows[1:] > rows[:-1]).all()):
            raise ValueError("the rows led do not ascend")  # verdicts are merged by row
        return self.verdicts(Followed(self.found, lead), rows, None)

    def complete(self, rows: pl.DataFrame, fields: Sequence[str], count: int) -> DedupeOutcome:
        """The outcome, given the rows split groups are found among (``_split`` and the
        group ``fields``, and their row ids as ``_row``, or, without it, row ids in order:
        the frame's, or every row when the matching saw only some; none when no group can
        straddle splits) and how many rows took part."""
        if "_row" not in rows.columns:
            rows = rows.with_row_index("_row")
        kept = rows.with_columns(pl.col("_row").cast(pl.Int64)).filter(
            ~pl.col("_row").is_in(pl.Series(self.removed.rows).implode())
        )
        groups = straddling_groups(kept, fields)
        normalisation = Normalisation.from_settings(self.settings)
        params = LshParams.from_settings(self.settings)
        stats = _stats(self.found, self.near, params, normalisation, self.key, groups, count)
        return DedupeOutcome(self.removed, self.clusters, groups, stats)


def splits_of(frame: pl.DataFrame) -> pl.Series:
    """Each row's split (null throughout when the frame has none)."""
    if "_split" in frame.columns:
        return frame["_split"]
    return pl.Series("_split", [None] * frame.height, dtype=pl.String)


def match_duplicates(
    frame: pl.DataFrame,
    key: DedupeKey | None,
    settings: DedupeSettings,
    kind: str,
    row_keys: RowKeys | None = None,
    hold: Holder | None = None,
) -> Matches:
    """Exact, normalised and near duplicates and contamination among ``frame``'s rows.

    ``row_keys``, lined up with ``frame``, are the normalised digests and signatures the
    gate computed (:mod:`pipeline.dedupe.row_keys`); without them (or without one of
    them) they are computed here from the key's payload columns in ``frame``. ``hold``
    keeps the kept rows' lineage read through them (:func:`_kept_lineage`): in memory
    without."""
    n = frame.height
    normalisation = Normalisation.from_settings(settings)
    params = LshParams.from_settings(settings)
    if row_keys is not None and row_keys.rank is not None:
        rank = row_keys.rank
    else:
        rank = survivor_rank(frame, settings.survivor_rule(kind), kind)
    if not settings.exact:
        exact = np.arange(n, dtype=np.int64)
    elif row_keys is not None and row_keys.exact is not None:
        exact = row_keys.exact
    elif "_content_sha256" in frame.columns and frame["_content_sha256"].null_count() == 0:
        exact = dense_ids(frame, pl.col("_content_sha256"))
    elif key is not None:
        exact = dense_ids(frame, key_columns(key, None, absent=True))
    else:
        raise ConfigError(f"{kind}: no content fingerprint and no key columns to dedupe on")
    if settings.normalised and key is not None:
        if row_keys is not None and row_keys.normalised is not None:
            normalised = row_keys.normalised
        else:
            normalised = dense_ids(frame, key_columns(key, normalisation, absent=True))
    else:
        normalised = exact
    near: NearPairs | None = None
    # given pairs were searched for among more rows than ``frame`` may hold
    searched = row_keys is not None and row_keys.near is not None
    if settings.near and key is not None and (n > 1 or searched):
        first_rows, text_rank = group_texts(normalised, rank)
        if row_keys is not None and row_keys.near is not None:
            signatures_of = row_keys.signatures
            assert signatures_of is not None
            left, right, verified, candidates = row_keys.near(normalised, first_rows, text_rank)
            near = estimated_pairs(
                left,
                right,
                verified,
                candidates,
                lambda texts: signatures_of(first_rows[texts]),
                stored=first_rows,  # a text's id is its normalised key's rank
            )
        else:
            texts = frame[first_rows].select(text_columns(key, normalisation))
            near = near_pairs(texts.to_series(), text_rank, params)
    splits = splits_of(frame)
    protected = {name: i + 1 for i, name in enumerate(settings.protected_splits)}
    partition = splits.replace_strict(protected, default=0, return_dtype=pl.Int64).to_numpy()
    # each row's split as a number (none when no row has one)
    split = None
    if splits.null_count() < len(splits):
        split = splits.rank("dense").fill_null(0).to_numpy().astype(np.int64)
    weight = row_keys.weight if row_keys is not None else None
    found = find_duplicates(rank, exact, normalised, partition, near, split, weight)
    del split
    lineage = row_keys.lineage if row_keys is not None else None
    kept = _kept_lineage(frame, found.keepers(), lineage, hold)
    verdicts = functools.partial(
        _removed_rows, splits=splits, key=key, normalisation=normalisation, params=params,
        kept_lineage=kept,
    )  # fmt: skip
    removed = np.flatnonzero(found.removed)
    removed_rows = verdicts(found, found.rows[removed], removed)
    clusters = ClusterTable(found, splits, kind, kept)
    return Matches(found, near, removed_rows, clusters, key, settings, verdicts)


def group_texts(groups: I64, rank: I64) -> tuple[I64, I64]:
    """Each normalised group's text for near detection (its members have one normalised
    text): the group's first row, and the group's best survivor rank."""
    count = int(groups.max(initial=-1)) + 1
    first = np.full(count, len(groups), dtype=np.int64)
    np.minimum.at(first, groups, np.arange(len(groups), dtype=np.int64))
    best = np.full(count, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(best, groups, rank)
    return first, best


#: keeps a table given in parts (its parts' schema alike) and gives it back whole: in
#: memory, or staged and memory-mapped (the dedupe stage's, :func:`_kept_lineage`)
Holder = Callable[[Iterator[pa.Table]], pa.Table]


@dataclass(frozen=True)
class KeptLineage:
    """``_source``, ``_line`` and ``_record_sha256`` of each kept row that has
    duplicates, in cluster order (:func:`_kept_lineage`), as an Arrow table: in memory,
    or over a staged file's pages, of which a gather reads its rows' alone."""

    table: pa.Table

    @property
    def height(self) -> int:
        return int(self.table.num_rows)

    def at(self, clusters: I64) -> pl.DataFrame:
        """The lineage of the kept rows of ``clusters``, in their order."""
        return _frame(self.table.take(pa.array(clusters, pa.int64())))

    def slice(self, lo: int, length: int) -> pl.DataFrame:
        """The lineage of clusters ``lo`` to ``lo + length``."""
        return _frame(self.table.slice(lo, length))


def _frame(table: pa.Table) -> pl.DataFrame:
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)  # a table's: never a series
    return frame


def _kept_lineage(
    frame: pl.DataFrame,
    keepers: I64,
    lineage: Callable[[I64], pl.DataFrame] | None,
    hold: Holder | None = None,
) -> KeptLineage:
    """``_source``, ``_line`` and ``_record_sha256`` of the kept rows that have duplicates
    (``keepers``, in cluster order), read once for the removed rows' pointers and the
    cluster table, and for those rows only (``lineage``, :data:`LINEAGE_ROWS` of them at
    a time: they ascend, so each read is of a few shards) when the frame does not hold
    them. Each digest is held as its 32 bytes (:func:`_digests_held`), ``_source``
    categorical in memory (the inputs' paths, a few): read twice and as text, the kept
    rows' lineage was ~175 bytes a cluster of the dedupe stage's peak. ``hold`` keeps
    what ``lineage`` reads a part at a time (the dedupe stage stages and maps it: held,
    it was ~44 bytes a cluster of the driver's memory from the matching to the
    decisions); its parts hold the digests as bytes (every digest of a run is a
    SHA-256), ``_source`` as text (a part's categories are its own)."""
    columns = ("_source", "_line", "_record_sha256")
    if lineage is None:
        return KeptLineage(_lineage_held(frame.select(columns)[keepers]).to_arrow())
    reads = range(0, max(len(keepers), 1), LINEAGE_ROWS)
    read = (lineage(keepers[lo : lo + LINEAGE_ROWS]) for lo in reads)
    if hold is not None:
        return KeptLineage(hold(_lineage_held(part, categorical=False).to_arrow() for part in read))
    parts = [_lineage_held(part) for part in read]
    if len({part.schema["_record_sha256"] for part in parts}) > 1:  # a part's not digests
        parts = [p.with_columns(_digests_text(p["_record_sha256"])) for p in parts]
    return KeptLineage(pl.concat(parts).to_arrow())


#: the kept rows' lineage is read this many rows at a time (:func:`_kept_lineage`): read
#: at once, their text was ~170 bytes a cluster above what is held; 65,536 at a time
#: were ~13 MB of the dedupe stage's peak on an export of half copies
LINEAGE_ROWS: Final = 1 << 14


def _lineage_held(named: pl.DataFrame, *, categorical: bool = True) -> pl.DataFrame:
    source = pl.col("_source").cast(pl.Categorical if categorical else pl.String)
    return named.select(source, "_line", _digests_held(named["_record_sha256"]))


#: a digest held as its 32 bytes (:func:`_digests_held`)
_DIGEST: Final = pl.Array(pl.UInt8, 32)


def _digests_held(digests: pl.Series) -> pl.Series:
    """``digests`` (``_record_sha256``) as each digest's 32 bytes, where every one is
    a SHA-256 in lower-case hex (a run's always are); as they are otherwise (a dataset
    ``rowgate dedupe`` reads may hold any text there). As text, a digest was ~80 bytes
    held (its 64 characters and a 16-byte view): the kept rows' lineage was the largest
    array of the dedupe stage's peak where half the rows were copies (17 MB for 233,557
    clusters of 1 M rows)."""
    if (
        digests.dtype != pl.String
        or digests.null_count()
        or not digests.str.contains(SHA256_HEX).all()
    ):
        return digests  # a null, or a text that is not a digest: kept as it is
    return digests.str.decode("hex").bin.reinterpret(dtype=_DIGEST)


def _digests_text(held: pl.Series) -> pl.Series:
    """The digests :func:`_digests_held` holds, as text again (lower-case hex)."""
    if held.dtype != _DIGEST:
        return held.cast(pl.String)
    raw = np.ascontiguousarray(held.to_numpy(), dtype=np.uint8)
    fixed = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(32), len(held), [None, pa.py_buffer(raw)]
    )
    text = pl.Series(held.name, fixed.cast(pa.binary())).bin.encode("hex")
    return text.cast(pl.String)


def _removed_rows(
    found: Verdicts,
    rows: I64,
    removed: I64 | None,
    *,
    splits: pl.Series,
    key: DedupeKey | None,
    normalisation: Normalisation,
    params: LshParams,
    kept_lineage: KeptLineage,
) -> RemovedRows:
    """The verdicts of removed ``rows`` (``found``'s at ``removed``; ``None``: the
    i-th row's at i), built when asked for: what is held is the decision
    (:class:`~pipeline.dedupe.clusters.Duplicates`, or rows that follow it:
    :class:`~pipeline.dedupe.clusters.Followed`), the removed rows' places and the
    lineage of each kept row that has duplicates, in cluster order (:func:`_kept_lineage`):
    a removed row's cluster is its kept row's, so it names the kept row's lineage (the
    kept rows' places, searched for it, were 8 bytes a cluster more)."""
    described = key.description if key is not None else "key"

    def build(lo: int, hi: int) -> pl.DataFrame:
        at = np.arange(lo, hi, dtype=np.int64) if removed is None else removed[lo:hi]
        kept = found.kept_at(at)
        target = kept_lineage.at(found.cluster_at(at))
        return _verdicts(found, at, kept, target, splits, described, normalisation, params)

    return RemovedRows(rows, build)


def _verdicts(
    found: Verdicts,
    at: I64,
    kept: I64,
    target: pl.DataFrame,
    splits: pl.Series,
    described: str,
    normalisation: Normalisation,
    params: LshParams,
) -> pl.DataFrame:
    """The verdicts of the participants ``at`` (removed, in favour of rows ``kept``, whose
    lineage is ``target``)."""
    rule = [RULES[int(code)] for code in found.rule_at(at)]
    out = pl.DataFrame(
        {
            "_dedupe_rule": pl.Series(rule, dtype=pl.String),
            "_dedupe_cluster": found.cluster_at(at),
            "_similarity_estimated": found.estimated_at(at),
            "_similarity_verified": found.verified_at(at),
            "_match": found.match_at(at).astype(np.int64),
            "_kept_split": splits.gather(kept) if len(kept) else pl.Series([], dtype=pl.String),
        }
    ).with_columns(
        pl.col("_similarity_estimated", "_similarity_verified").fill_nan(None),
        _duplicate_of=pl.struct(
            _source=target["_source"].cast(pl.String),
            _line=target["_line"].cast(pl.Int64),
            _record_sha256=_digests_text(target["_record_sha256"]),
        ),
    )
    similarity = pl.format(
        "verified Jaccard {} (MinHash estimate {})",
        pl.col("_similarity_verified").round(3),
        pl.col("_similarity_estimated").round(3),
    )
    detail = (
        pl.when(pl.col("_dedupe_rule") == "exact")
        .then(pl.lit("same content fingerprint as the kept row"))
        .when(pl.col("_dedupe_rule") == "normalised")
        .then(pl.lit(f"same {described} as the kept row after {normalisation.describe()}"))
        .when(pl.col("_dedupe_rule") == RULES[NEAR])
        .then(
            pl.format(
                "near duplicate of the kept row: {} ≥ {}", similarity, pl.lit(params.threshold)
            )
        )
        .otherwise(
            pl.format(
                "duplicates a kept row of protected split '{}' ({} match{})",
                pl.col("_kept_split"),
                pl.col("_match").replace_strict(_MATCH, default="", return_dtype=pl.String),
                pl.when(pl.col("_similarity_verified").is_not_null())
                .then(pl.format(": {}", similarity))
                .otherwise(pl.lit("")),
            )
        )
    )
    return out.with_columns(
        _reason=pl.struct(
            code=pl.col("_dedupe_rule").replace_strict(_CODES, return_dtype=pl.String),
            path=pl.lit(""),
            detail=detail,
        )
    ).drop("_match", "_kept_split")


@dataclass(frozen=True)
class ClusterTable:
    """One row per cluster: its kept row's lineage and split, its size, the rules that
    removed its other rows and the splits of its rows; made a range of clusters at a
    time (:meth:`parts`) or whole (:meth:`frame`), the same rows either way.

    Only the kept rows' lineage is read (``kept``, in cluster order: :func:`_kept_lineage`),
    and rules stay codes until each cluster's are collected: reading every member's
    lineage and naming every member's rule took ~100 bytes a member (+206 MB on 3 M
    copies of 500 texts, the command's peak). Made from the representatives, each
    counting the rows it represents (which share its split, its rule and its cluster;
    a kept one's are removed by ``exact``): a frame of every member was ~30 bytes a
    member. Made whole, the table was ~175 bytes a cluster of the dedupe stage's peak
    (233,557 clusters of 1 M rows, half of them copies)."""

    found: Duplicates
    splits: pl.Series
    kind: str
    kept: KeptLineage

    @property
    def height(self) -> int:
        return self.kept.height

    def frame(self) -> pl.DataFrame:
        """Every cluster's row, in cluster order."""
        return _clusters_frame(self, self._members(), 0, self.height)

    def parts(self, clusters: int) -> Iterator[pl.DataFrame]:
        """The rows of ``clusters`` clusters at a time, in cluster order; one part (of
        none) where there is no cluster."""
        members = self._members()
        cluster = self.found.by_rep.cluster[members]
        by_cluster = np.argsort(cluster, kind="stable")
        starts = np.arange(0, max(self.height, 1), clusters)
        bounds = np.searchsorted(cluster[by_cluster], [*starts, self.height])
        for lo, (first, last) in zip(starts, itertools.pairwise(bounds), strict=True):
            part = members[by_cluster[first:last]]
            yield _clusters_frame(self, part, int(lo), min(int(lo) + clusters, self.height))

    def _members(self) -> I64:
        """The representatives in a cluster, ascending."""
        return np.flatnonzero(self.found.by_rep.cluster >= 0)


def _clusters_frame(table: ClusterTable, at: I64, lo: int, hi: int) -> pl.DataFrame:
    """The rows of clusters ``lo`` to ``hi``, made from the representatives ``at`` that
    are in them: each cluster's kept one comes in cluster order, the order of ``kept``'s
    rows (the others' order changes nothing: they are counted and collected)."""
    by_rep, count = table.found.by_rep, table.found.count
    is_kept = by_rep.kept[at] < 0
    keeps = at[is_kept & (count[at] > 1)]  # and removes the rows it represents
    rows = np.concatenate([by_rep.rows[at], by_rep.rows[keeps]])
    members = pl.DataFrame(
        {
            "cluster": np.concatenate([by_rep.cluster[at], by_rep.cluster[keeps]]),
            "kept": np.concatenate([is_kept, np.zeros(len(keeps), np.bool_)]),
            "rule": np.concatenate([by_rep.rule[at], np.full(len(keeps), EXACT, np.int8)]),
            "rows": np.concatenate([np.where(is_kept, 1, count[at]), count[keeps] - 1]),
            "split": table.splits.gather(rows) if len(rows) else pl.Series([], dtype=pl.String),
        }
    )
    named = table.kept.slice(lo, hi - lo)
    kept = members.filter("kept").select(
        "cluster",
        kept=pl.struct(
            source=named["_source"].cast(pl.String),
            line=named["_line"].cast(pl.Int64),
            record_sha256=_digests_text(named["_record_sha256"]),
        ),
        kept_split="split",
    )
    names = pl.col("rule").replace_strict(dict(enumerate(RULES)), return_dtype=pl.String)
    # each cluster's distinct rules and splits, sorted, as plain columns gathered into
    # lists (a list made by an expression in each group was ~500 bytes a cluster of the
    # stage's peak: 40 MB a part of 65,536 clusters)
    removed = members.filter(~pl.col("kept")).select("cluster", rules=names)
    splits = members.filter(pl.col("split").is_not_null()).select("cluster", splits="split")
    summary = members.group_by("cluster").agg(size=pl.col("rows").sum().cast(pl.Int64))
    for listed, name in ((removed, "rules"), (splits, "splits")):
        distinct = listed.unique().sort("cluster", name)
        collected = distinct.group_by("cluster", maintain_order=True).agg(name)
        summary = summary.join(collected, on="cluster", how="left").with_columns(
            pl.col(name).fill_null(pl.lit([], pl.List(pl.String)))
        )
    return (
        kept.join(summary, on="cluster")
        .sort("cluster")
        .select(
            "cluster",
            kind=pl.lit(table.kind),
            size="size",
            kept="kept",
            kept_split="kept_split",
            rules="rules",
            splits="splits",
        )
    )


def _stats(
    found: Duplicates,
    near: NearPairs | None,
    params: LshParams,
    normalisation: Normalisation,
    key: DedupeKey | None,
    groups: SplitGroups,
    n: int,
) -> dict[str, Any]:
    removed = found.removed_by_rule()
    by_rule = {RULES[c]: int(removed[c]) for c in range(1, len(RULES))}
    stats: dict[str, Any] = {
        "rows": n,
        "removed": int(removed.sum()),
        "by_rule": by_rule,
        "clusters": found.stats.get("clusters", 0),
        "key": key.description if key is not None else "content fingerprint",
        "normalisation": normalisation.describe(),
        "protected_overlap_rows": found.stats.get("protected_overlap_rows", 0),
        "contaminated": by_rule[RULES[CONTAMINATION]],
        "straddling_groups": groups.table().height,
    }
    if near is not None:
        stats["near"] = {
            "threshold": params.threshold,
            "shingle_size": params.shingle_size,
            "permutations": params.permutations,
            "bands": params.bands,
            "rows_per_band": params.rows,
            "candidate_probability_at_threshold": round(
                params.candidate_probability(params.threshold), 4
            ),
            "candidate_pairs": near.candidates,
            "verified_pairs": len(near.left),
            "rounds": found.stats.get("near_rounds", 0),
        }
    return stats
