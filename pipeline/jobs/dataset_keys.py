"""``rowgate dedupe``'s row keys: computed slice by slice on the engine, as the gate
computes a run's, and staged; the decision then reads them instead of every row's key
texts.

A dataset's inputs are cut into slices of whole row groups (about :data:`KEY_SLICE_BYTES`
each by the files' metadata), cut again to at most :data:`KEY_SLICE_ROWS` rows; each is a
task. It reads the key columns of its rows (where a rule reads them) and stages their
row keys (:func:`~pipeline.dedupe.row_keys.row_keys`: the normalised key's digest, the
MinHash signature of the key text) and the exact key's digest (the raw key's SHA-256,
or the content fingerprint's bytes). Grouping checks on the engine then find the rows
whose digest another row shares (:func:`_grouped`), and the near candidates are found
partition by partition and checked a range of them at a time on the engine
(:class:`~pipeline.dedupe.partitions.NearSearch`, :mod:`pipeline.dedupe.near_check`,
whose sets tasks read the candidates' texts once: :class:`DatasetTexts`): the parent
holds only the rows that take part (:mod:`pipeline.dedupe.participants`), never the
texts, and reads back only the verified pairs' signatures and the lineage of the rows
pointers name.
The decisions are those of the matching over the texts themselves
(:func:`~pipeline.dedupe.table.dedupe_table`): equal digests are equal keys, and a
signature depends on its own text alone.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa

from pipeline.core.arrays import distinct
from pipeline.core.config import DedupeSettings, EngineSettings
from pipeline.decide.partitioned import (
    GROUP,
    RANK,
    TEXT,
    VALUE,
    WHERE,
    Followers,
    Found,
    HashCheck,
    first_rows,
    line_set,
    partition_count,
)
from pipeline.dedupe.keys import DedupeKey, KeyField, key_columns, text_columns
from pipeline.dedupe.minhash import LshParams
from pipeline.dedupe.near_check import STORED
from pipeline.dedupe.normalise import Normalisation
from pipeline.dedupe.participants import (
    NONE_SHARED,
    Led,
    NearPlaces,
    Participants,
    Shared,
    participant_keys,
    sparse_texts,
)
from pipeline.dedupe.partitions import (
    NULL_TIE,
    NearSearch,
    Ranking,
    SparseTexts,
    stage_sparse_texts,
)
from pipeline.dedupe.row_keys import (
    NORMALISED,
    SIGNATURE,
    RowKeys,
    SignatureMemo,
    digest_bytes,
    row_keys,
    sha256s,
)
from pipeline.dedupe.splits import field_expr
from pipeline.engines import Engine, Progress, Step
from pipeline.gate.reader import InputError
from pipeline.kinds import get_kind
from pipeline.storage import RunStorage

__all__ = [
    "KEY_SLICE_BYTES",
    "KEY_SLICE_ROWS",
    "DatasetKeys",
    "KeySlice",
    "KeyTask",
    "check_comparable",
    "fitted",
    "made_lineage",
    "resolved_key",
    "split_group_rows",
    "staged_keys",
]

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

#: about how many bytes of one input (decoded) a key task reads: whole row groups. Over a
#: run's 84,470 accepted pairwise rows (65 MB of Parquet, 2 workers, two runs each), 32 MiB
#: against 64 lowered ``rowgate dedupe --near --normalised``'s tree peak from 887–890 to
#: 842–847 MB, in 6.2–6.3 s against 6.6–6.8 (16 MiB: 820–836 MB, 6.4 s)
KEY_SLICE_BYTES: Final = 32 << 20
#: ...and at most this many rows: a dictionary-encoded column of repeated texts takes few
#: bytes in the file's metadata and many once decoded (a slice then cuts a row group)
KEY_SLICE_ROWS: Final = 1 << 16
#: the exact key's digest: the SHA-256 of a row's raw key (where no fingerprint stands for
#: it), or its content fingerprint's 32 bytes
EXACT: Final = "_exact_sha256"
#: the lineage a row keeps when its input has it (else its file and 1-based row number)
LINEAGE: Final = ("_source", "_line", "_record_sha256")
_LINEAGE_TYPES: Final = pl.Schema(
    {"_source": pl.String, "_line": pl.Int64, "_record_sha256": pl.String}
)
_FINGERPRINT: Final = "_content_sha256"
#: rows whose keys are computed at a time (as the gate's batches: ``engine.batch_lines``)
_BATCH_ROWS: Final = 4096
#: the exact rule's digests read from the content fingerprints (:attr:`DatasetKeys.exact`)
_PRINTED: Final = ("fingerprint", "fingerprint text")
#: the staged stem of the row keys (a dataset is of one kind, or of columns)
_STEM: Final = "dataset"
#: where a survivor rule by a column leads exact groups (:attr:`DatasetKeys.ranked`):
#: the staged stem of each task's survivor ranks, which the deciding process stages
#: before the key tasks run, and the row keys' column each key task copies them to
_RANKS: Final = "dataset.ranks"
_RANK: Final = "_survivor_rank"


def resolved_key(kind: str | None, text: Sequence[str], keys: Sequence[str]) -> DedupeKey:
    """The key of explicit columns (text columns are normalised and shingled, key columns
    compared exactly by every rule, near included, any type as text), else ``kind``'s."""
    if text or keys:
        return DedupeKey(
            "columns " + ", ".join([*text, *keys]),
            tuple(dict.fromkeys([*text, *keys])),
            (
                *(KeyField(c, pl.col(c).cast(pl.String)) for c in text),
                *(KeyField(c, pl.col(c).cast(pl.String), prose=False, exact=True) for c in keys),
            ),
        )
    assert kind is not None
    key = get_kind(kind).dedupe_key()
    assert key is not None
    return key


def check_comparable(frame: pl.DataFrame, key: DedupeKey | None, rule: str) -> None:
    """An :class:`InputError` naming a key column that cannot be read as text (a list,
    a struct, bytes that are not UTF-8) or a survivor field that does not exist; the
    dedupe would otherwise fail inside polars (an internal error). A struct's text is not
    its value: polars writes ``{"a": "x\",\"y", "b": "z"}`` and ``{"a": "x", "b":
    "y\",\"z"}`` alike (``{"x","y","z"}``), as a list of two strings and one of one,
    so two rows that differ were one exact key, and one was removed. Only types are
    named: a polars message may quote a value."""
    for field in key.fields if key is not None else ():
        for column in field.expr.meta.root_names():
            dtype = frame.schema.get(column)
            if dtype is not None and dtype.is_nested():
                raise InputError(
                    f"dedupe: {field.name} cannot be compared ({column}: {dtype}); a key is "
                    "read as text, and a list's or a struct's text is not its value: name "
                    "a text, number or date column"
                )
    probes = [(f.name, f.expr) for f in key.fields] if key is not None else []
    if ":" in rule:
        root, *rest = rule.split(":", 1)[1].split(".")
        value = pl.col(root)
        for field_name in rest:
            value = value.struct.field(field_name)
        probes.append((f"dedupe.survivor {rule}", value))
    for label, expr in probes:
        try:
            frame.select(expr)
        except pl.exceptions.PolarsError:
            types = ", ".join(f"{c}: {frame.schema[c]}" for c in expr.meta.root_names())
            raise InputError(
                f"dedupe: {label} cannot be compared ({types}); a key is read as text, a "
                "survivor field must exist"
            ) from None


@dataclass(frozen=True)
class KeySlice:
    """Rows [first, first + rows) of the input at ``path``."""

    path: str
    first: int
    rows: int
    #: the key columns this input has (the others are null in its rows)
    columns: tuple[str, ...]
    #: the columns of :data:`LINEAGE` this input has
    lineage: tuple[str, ...] = ()
    #: the input's split label, and the columns the split groups' fields read that it has
    split: str | None = None
    grouping: tuple[str, ...] = ()


@dataclass(frozen=True)
class KeyTask:
    """One task: consecutive slices (many small files make one task: a task each cost
    ~10 ms), staged together as shard ``shard``."""

    shard: int
    pieces: tuple[KeySlice, ...]

    @property
    def rows(self) -> int:
        return sum(piece.rows for piece in self.pieces)

    @property
    def split(self) -> str | None:
        """The split of the task's rows (its slices are of one: :func:`~pipeline.jobs.
        dedupe._key_tasks`)."""
        splits = {piece.split for piece in self.pieces}
        if len(splits) != 1:
            raise AssertionError(f"key task {self.shard}: slices of several splits")  # never
        return splits.pop()

    def located(self, local: I64) -> list[tuple[KeySlice, I64, I64]]:
        """(slice, the rows' places in it, their places in ``local``) of each slice that
        holds some of the task's rows ``local``."""
        starts = np.cumsum([0, *(piece.rows for piece in self.pieces)])
        return [(self.pieces[i], at, place) for i, at, place in _located(starts, local)]


def _located(starts: I64, rows: I64) -> list[tuple[int, I64, I64]]:
    """(part, the rows' places in it, their places in ``rows``) of each part that holds
    some of ``rows`` (part ``i`` holds [starts[i], starts[i + 1]))."""
    which = np.searchsorted(starts, rows, side="right") - 1
    return [
        (int(i), rows[which == i] - starts[i], np.flatnonzero(which == i)) for i in np.unique(which)
    ]


@dataclass(frozen=True)
class DatasetKeys:
    """What every key task needs: the key (rebuilt in the worker from ``kind`` or the
    columns, as polars expressions do not cross processes), the settings, the key
    columns' unified types (``layout``: an input may lack a column, or hold a narrower
    type), whether to stage the raw key's digest, and the storage."""

    storage: RunStorage
    kind: str | None
    text_columns: tuple[str, ...]
    key_columns: tuple[str, ...]
    layout: pl.Schema
    settings: DedupeSettings
    #: what the exact digests are: ``"key"`` (the raw key's), ``"fingerprint"`` (every
    #: row's content fingerprint, 64 lowercase hex digits, as its 32 bytes),
    #: ``"fingerprint text"`` (the SHA-256 of every row's fingerprint, of another form:
    #: compared as the text it is) or ``None`` (the rule is off)
    exact: str | None
    #: whether the key fields are probed (columns named on the command line; a kind's
    #: key reads rowgate output, whose types its schema fixed)
    probe: bool
    #: where the inputs are of several splits: the split groups' fields (members' names),
    #: the columns they read (unified types, by members' names), the split labels
    #: (sorted: a row's split is staged as its place among them), and the members a kind
    #: stores apart (member, column)
    fields: tuple[str, ...] = ()
    grouping: pl.Schema = dataclasses.field(default_factory=pl.Schema)
    splits: tuple[str, ...] = ()
    apart: tuple[tuple[str, str], ...] = ()
    #: whether each task's survivor ranks are staged (:data:`_RANKS`) for its row keys
    #: to hold: a survivor rule by a column, which the led check ranks a group's rows by
    ranked: bool = False

    def key(self) -> DedupeKey:
        return resolved_key(self.kind, self.text_columns, self.key_columns)


def key_step(job: DatasetKeys) -> Step[DatasetKeys, KeyTask, int]:
    """The step whose task stages its slices' row keys (returns their rows)."""
    return Step(_init, (job,), _stage_slice)


def _init(job: DatasetKeys) -> DatasetKeys:
    return job


def _read_columns(task: KeySlice, columns: Sequence[str]) -> pl.DataFrame:
    """``columns`` of the slice's rows, as the input holds them."""
    try:
        scan = pl.scan_parquet(task.path, glob=False).select(columns)  # a file: no pattern
        return scan.slice(task.first, task.rows).collect()
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise InputError(f"{task.path}: not a readable Parquet file ({exc})") from None


def fitted(layout: pl.DataFrame, part: pl.DataFrame, path: str) -> pl.DataFrame:
    """``part``'s rows in ``layout``'s columns and types (the inputs' common ones; a
    column ``part`` lacks is null in its rows), or an :class:`InputError` naming the input
    and a column whose values the common type cannot hold exactly: a 64-bit integer
    above 2**53 in a column another input holds as floats would compare equal to its
    neighbour and be written as another number, a float beside a struct would become a
    struct. A value is held exactly when casting it back gives it again (null and NaN
    included)."""
    try:
        made = pl.concat([layout, part], how="diagonal_relaxed").select(layout.columns)
    except pl.exceptions.PolarsError as exc:
        raise InputError(f"{path}: its columns do not fit the other inputs' ({exc})") from None
    for name, dtype in part.schema.items():
        common = made.schema[name]
        if common != dtype and (
            _as_text(dtype, common) or not _held_exactly(part[name], made[name])
        ):
            raise InputError(
                f"{path}: its column {name!r} ({dtype}) does not fit the type the inputs "
                f"share for it ({common}) without changing a value; give every input "
                "the same type for it"
            )
    return made


def _as_text(dtype: pl.DataType, common: pl.DataType) -> bool:
    """Whether a number, date or boolean would be held as text beside another input's
    strings: written back it is the same number, but as text it compares by its
    characters (a survivor rule ``max:`` kept "9" over 10) and is written as a string."""
    scalar = dtype.is_numeric() or dtype.is_temporal() or dtype == pl.Boolean
    return scalar and common in (pl.String, pl.Categorical)


def _held_exactly(original: pl.Series, widened: pl.Series) -> bool:
    try:
        back = widened.cast(original.dtype, strict=False)
    except pl.exceptions.PolarsError:
        return False
    return back.dtype == original.dtype and bool(back.eq_missing(original).all())


def _slice_frame(job: DatasetKeys, task: KeySlice) -> pl.DataFrame:
    """The key columns of the slice's rows, in the layout's columns and types."""
    layout = pl.DataFrame(schema=job.layout)
    if not task.columns:  # an input with none of the key columns: no row has a key
        return layout.clear(task.rows)
    part = _read_columns(task, task.columns)
    if part.schema != job.layout:
        part = fitted(layout, part, task.path)
    if job.probe:
        check_comparable(part, job.key(), "first")
    return part


def _span_frame(job: DatasetKeys, task: KeySlice, local: I64) -> pl.DataFrame:
    """The key columns of some of the slice's rows (``local``: their places in it), read
    from the span of rows they lie in: the near check's sets task asks for its slice's
    candidate texts in stored order, a piece at a time, so each row is read once."""
    first = int(local.min())
    span = replace(task, first=task.first + first, rows=int(local.max()) + 1 - first)
    return _slice_frame(job, span)[local - first]


def _stage_slice(job: DatasetKeys, task: KeyTask, progress: Progress) -> int:
    """Stage the row keys of the task's rows, :data:`_BATCH_ROWS` at a time (the
    normalised texts and tokens of a whole slice took ~7 times its bytes). The key
    columns are read only where a rule reads them (not for exact dedupe on content
    fingerprints)."""
    frame = None
    if job.settings.normalised or job.settings.near or job.exact == "key":
        frame = pl.concat([_slice_frame(job, piece) for piece in task.pieces])
    printed = None
    if job.exact in _PRINTED:
        # a categorical, or nulls alone, as text
        read = [_read_columns(piece, (_FINGERPRINT,))[_FINGERPRINT] for piece in task.pieces]
        printed = pl.concat([column.cast(pl.String) for column in read])
    stem = job.storage.row_keys_stem(_STEM)
    memo = SignatureMemo(LshParams.from_settings(job.settings)) if job.settings.near else None
    height = frame.height if frame is not None else len(printed) if printed is not None else 0
    grouped = _group_hashes(job, task) if job.fields else None
    ranks = job.storage.staged_table(task.shard, _RANKS)[_RANK] if job.ranked else None
    writer = None
    try:
        for lo in range(0, height, _BATCH_ROWS):
            rows = frame.slice(lo, _BATCH_ROWS) if frame is not None else None
            fingerprints = printed.slice(lo, _BATCH_ROWS) if printed is not None else None
            batch = _batch_keys(job, rows, fingerprints, memo)
            # each row's place in the task: the grouping checks name rows by it
            lines = pa.array(np.arange(lo, min(lo + _BATCH_ROWS, height), dtype=np.int64))
            batch = batch.append_column("_shard_line", lines)
            if grouped is not None:
                for column in grouped.slice(lo, _BATCH_ROWS).iter_columns():
                    batch = batch.append_column(column.name, column.to_arrow())
            if ranks is not None:
                batch = batch.append_column(_RANK, ranks.slice(lo, _BATCH_ROWS))
            if writer is None:
                writer = job.storage.stage_writer(task.shard, stem, batch.schema)
            writer.write_table(batch)
            progress(0, len(lines))
    finally:
        if writer is not None:
            writer.close()
    return height


#: a row's split, staged as its place among the split labels (null: none)
_SPLIT: Final = "_split_number"


def _group_field(i: int) -> str:
    """The staged column of the ``i``-th split-group field's hash (null: no value)."""
    return f"_split_group_{i}"


def _group_frame(job: DatasetKeys, piece: KeySlice, local: I64 | None = None) -> pl.DataFrame:
    """The columns the split groups' fields read of a slice's rows (``local``: of those
    of its rows; else all), by the members' names and in their unified types, and each
    row's ``_split`` (the input's label)."""
    rows = piece.rows if local is None else len(local)
    split = pl.repeat(piece.split, rows, dtype=pl.String, eager=True).alias("_split")
    if not piece.grouping:  # none of the columns (a frame of none has no rows)
        nulls = [pl.lit(None, dtype).alias(c) for c, dtype in job.grouping.items()]
        return pl.DataFrame([split]).select(*nulls, "_split")
    read = _read_columns(piece, piece.grouping)
    read = read[local] if local is not None else read
    read = read.rename({c: m for m, c in job.apart if c in read.columns})
    part = fitted(pl.DataFrame(schema=job.grouping), read, piece.path)
    return part.with_columns(split)


def _group_hashes(job: DatasetKeys, task: KeyTask) -> pl.DataFrame:
    """Each of the task's rows' split number and hash of each split-group field's value
    (null where the field has none), for the varying checks (:func:`split_group_rows`)."""
    numbers = {label: i for i, label in enumerate(job.splits)}
    parts = []
    for piece in task.pieces:
        frame = _group_frame(job, piece)
        hashes = {}
        for i, path in enumerate(job.fields):
            value = field_expr(path, frame.schema)
            if value is None:
                hashes[_group_field(i)] = pl.lit(None, pl.UInt64)
            else:
                hashes[_group_field(i)] = pl.when(value.is_not_null()).then(value.hash())
        number = numbers.get(piece.split) if piece.split is not None else None
        # with_columns: a literal for every row (select would give it once)
        columns = frame.with_columns(pl.lit(number, pl.UInt64).alias(_SPLIT), **hashes)
        parts.append(columns.select(_SPLIT, *hashes))
    return pl.concat(parts)


def split_group_rows(
    engine: Engine,
    storage: RunStorage,
    job: DatasetKeys,
    tasks: Sequence[KeyTask],
    engine_settings: EngineSettings,
) -> pl.DataFrame:
    """The rows a split group can hold: those whose value of a split-group field is found
    in more than one split (a varying check on the engine per field: the value's hash
    grouped, the split's number the value), with ``_row`` (their places among every
    task's rows), ``_split`` and the columns the fields read, by the members' names. The
    groups found among them are those found among every row: every row of a value found
    in two splits is here. Every row's fields in the deciding process held them all."""
    found = []
    for i in range(len(job.fields)):
        group = pl.col(_group_field(i))
        exprs = {
            GROUP: group,
            VALUE: pl.col(_SPLIT),
            WHERE: group.is_not_null() & pl.col(_SPLIT).is_not_null(),
        }
        name = f"split-group-{i}"
        rows, placed = _checked(engine, storage, tasks, name, exprs, 2, engine_settings)
        found.append(placed(rows.shards, rows.lines))
    places = distinct(np.concatenate([np.zeros(0, np.int64), *found]))
    empty = pl.DataFrame(schema=job.grouping).with_columns(_split=pl.lit(None, pl.String))
    frame = _rows_of(tasks, places, functools.partial(_group_frame, job), empty)
    return frame.insert_column(0, pl.Series("_row", places, pl.Int64))


def _batch_keys(
    job: DatasetKeys,
    frame: pl.DataFrame | None,
    printed: pl.Series | None,
    memo: SignatureMemo | None,
) -> pa.Table:
    """The row keys of some rows: those the enabled rules read (``memo``: the task's),
    from their key columns (``frame``) and content fingerprints (``printed``)."""
    key = job.key()
    columns: dict[str, pa.Array] = {}
    if job.settings.normalised or job.settings.near:
        assert frame is not None
        keys = row_keys(frame, key, job.settings, memo)
        columns = dict(zip(keys.schema.names, keys.columns, strict=True))
    if job.exact == "key":
        assert frame is not None
        raw = frame.select(key_columns(key, None, absent=True)).to_series()
        columns[EXACT] = sha256s(raw.to_arrow())
    elif job.exact == "fingerprint":  # hex to its bytes: the same order, 32 bytes
        assert printed is not None
        columns[EXACT] = digest_bytes(printed)
    elif job.exact == "fingerprint text":
        assert printed is not None
        columns[EXACT] = sha256s(printed.to_arrow())
    return pa.table(columns)


def _checked(
    engine: Engine,
    storage: RunStorage,
    tasks: Sequence[KeyTask],
    name: str,
    exprs: dict[str, pl.Expr],
    hashes: int,
    engine_settings: EngineSettings,
    *,
    left_out: Mapping[int, bytes] | None = None,
    leads: Sequence[int] = (),
    leader: str = "first",
) -> tuple[Found, Callable[[npt.NDArray[np.int32], I64], I64]]:
    """Run a check of ``exprs`` over the tasks' staged row keys on the engine, partition
    by partition (:class:`~pipeline.decide.partitioned.HashCheck`, its entries sized at
    ``hashes`` 8-byte values a row); the rows found, and what turns a shard and line
    into a place among every task's rows. No task (no row): nothing found. ``left_out``:
    each task's lines that take no part (:func:`_lines_of`); ``leads``: a led check's
    label of each task (:attr:`~pipeline.decide.partitioned.HashCheck.leads`), its rows
    led by the ``leader`` of a key and label (its best-ranked by the survivor rule)."""
    shards = tuple(task.shard for task in tasks)
    starts = np.cumsum([0, *(task.rows for task in tasks)])

    def placed(shard: npt.NDArray[np.int32], line: I64) -> I64:
        at: I64 = starts[np.searchsorted(shards, shard)] + line
        return at

    if not tasks:  # a check of no shard has no partition to run
        none = np.zeros(0, np.int64)
        nothing = Found(
            none.astype(np.int32), none, none.astype(np.uint64), None, none, Followers()
        )
        return nothing, placed
    count = partition_count(
        int(starts[-1]), hashes, engine_settings.resolved_workers(), len(shards),
        engine_settings.partitions,
    )  # fmt: skip
    source = storage.row_keys_stem(_STEM)
    check = HashCheck.of(
        storage,
        _STEM,
        name,
        shards,
        exprs,
        partitions=count,
        source=source,
        leads=leads,
        leader=leader,
    )
    return check.run(engine, left_out), placed


def _grouped(
    engine: Engine,
    storage: RunStorage,
    tasks: Sequence[KeyTask],
    name: str,
    engine_settings: EngineSettings,
    *,
    left_out: Mapping[int, bytes] | None = None,
) -> Shared:
    """The rows (places among every task's rows) whose staged digest (``name``,
    binary(32); null for a row with no key) another row shares, and their groups,
    numbered as the groups' first rows come; the rows ``left_out`` (:func:`_lines_of`)
    take no part. Grouped on the engine, partition by
    partition (a grouping check, first on a 64-bit hash, then on the digests
    themselves: :func:`_checked`): the driver holds only the rows found. Every row's
    group here (ids, a mark and a count) held ~25 bytes a row, and ranking every row's
    digest prefixes ~40 bytes a row, for each rule."""
    exprs = _digest_exprs(name)
    found, placed = _checked(
        engine, storage, tasks, name, exprs, 1 + 4, engine_settings, left_out=left_out
    )
    shards = tuple(task.shard for task in tasks)
    return _numbered(placed(found.shards, found.lines), placed(*first_rows(shards, found.groups)))


def _led_groups(
    engine: Engine,
    storage: RunStorage,
    tasks: Sequence[KeyTask],
    engine_settings: EngineSettings,
    *,
    leader: str,
) -> tuple[Shared, Led]:
    """The exact rule's groups with their rows in each split led by their best-ranked
    by the survivor rule (``leader``: their first, their last, or, for a rule by a
    column, ``max`` or ``min``, the least of the survivor ranks staged with the row keys,
    :attr:`DatasetKeys.ranked`). Found on the engine (a led grouping check of
    :data:`EXACT`, each task's
    split its label): the leaders of the digests another row shares, numbered as
    :func:`_grouped` numbers groups, each with how many rows it leads; and the rows
    led, each with its leader. Only the leaders take part in the matching; the driver
    holds two places a row led (a run's dedupe held ~120 bytes a row of an exact group
    at its peak)."""
    splits = sorted({task.split for task in tasks if task.split is not None})
    leads = [-1 if task.split is None else splits.index(task.split) for task in tasks]
    exprs = _digest_exprs(EXACT)
    if leader in ("max", "min"):  # the ranks say which is best, whatever the direction
        exprs[RANK], leader = pl.col(_RANK), "min"
    hashes = 1 + 4 + (1 if RANK in exprs else 0)  # a digest's hash and bytes, a rank
    found, placed = _checked(
        engine, storage, tasks, EXACT, exprs, hashes, engine_settings, leads=leads, leader=leader
    )
    if found.led is None or found.followers is None:
        raise AssertionError("a led check gave no leaders")  # never expected
    shards = tuple(task.shard for task in tasks)
    places = placed(found.shards, found.lines)
    exact = _numbered(places, placed(*first_rows(shards, found.groups)), found.led)
    following = found.followers
    del found
    rows, leaders = following.placed(
        storage,
        shards,
        placed,
        lambda found_at: places[found_at],  # a leader is a row found
        sum(task.rows for task in tasks),
    )
    return exact, Led(rows, leaders)


def _stage_ranks(storage: RunStorage, tasks: Sequence[KeyTask], rank: Ranking) -> None:
    """Stage each task's rows' survivor ranks (``rank``, by place among every task's
    rows), for its key task to copy beside its row keys (:data:`_RANKS`): a rank among
    every row (:func:`~pipeline.dedupe.participants.dense_ranking`), or an order key, null
    where the value is missing (:func:`~pipeline.dedupe.participants.mapped_ranking`),
    which the led check ranks as :func:`~pipeline.dedupe.table.ranked_values` does, by
    key, then missing, then place: the order of the keys and their places."""
    lo = 0
    for task in tasks:
        ranks = rank(np.arange(lo, lo + task.rows, dtype=np.int64))
        if ranks.keys is None:
            column = pa.array(ranks.ties, pa.int64())
        else:
            missing = (ranks.ties & NULL_TIE) != 0
            column = pa.array(ranks.keys, pa.uint64(), mask=missing)
        storage.stage_table(task.shard, _RANKS, pa.table({_RANK: column}))
        lo += task.rows


def _digest_exprs(name: str) -> dict[str, pl.Expr]:
    """A grouping check's expressions over a staged digest (null: a row with no key)."""
    digest = pl.col(name)
    return {GROUP: _hashed(digest), TEXT: digest, WHERE: digest.is_not_null()}


def _numbered(places: I64, firsts: I64, led: I64 | None = None) -> Shared:
    """The rows found at ``places`` (in no order), each with its group's first row's
    place and how many rows it leads (``led``, lined up with them), as :class:`Shared`:
    groups numbered as their first rows come (a first row need not be found: a led
    check's leaders may be their splits' last rows)."""
    order = np.argsort(places)
    return Shared.of(places[order], firsts[order], None if led is None else led[order])


def _lines_of(tasks: Sequence[KeyTask], rows: I64) -> dict[int, bytes]:
    """The lines of ``rows`` (places among every task's rows, ascending) by task, as a
    check's tasks carry them (:func:`~pipeline.decide.partitioned.line_set`)."""
    starts = np.cumsum([0, *(task.rows for task in tasks)])
    bounds = np.searchsorted(rows, starts)
    return {
        task.shard: line_set(rows[bounds[i] : bounds[i + 1]] - starts[i])
        for i, task in enumerate(tasks)
        if bounds[i + 1] > bounds[i]
    }


def _hashed(digest: pl.Expr) -> pl.Expr:
    """The 64-bit hash a grouping check groups a digest by first."""
    return digest.hash(5)


def made_lineage(present: Collection[str], path: str, lines: pl.Expr) -> dict[str, pl.Expr]:
    """The lineage columns a row of the input at ``path`` is given where the input has
    none (``present``: its columns): its file and 1-based row number (``lines``), and no
    record digest. The rows' lineage wherever they are read (the copy to the outputs, the
    rows pointers name)."""
    made: dict[str, pl.Expr] = {}
    if "_source" not in present:
        made = {"_source": pl.lit(path, pl.String), "_line": lines}
    if "_record_sha256" not in present:
        made["_record_sha256"] = pl.lit(None, pl.String)
    return made


def _lineage(task: KeySlice, local: I64) -> pl.DataFrame:
    """:data:`LINEAGE` of some of the slice's rows (``local``: their places in it)."""
    found = _read_columns(task, task.lineage)[local] if task.lineage else pl.DataFrame()
    lines = pl.lit(pl.Series(task.first + local + 1, dtype=pl.Int64))
    made = made_lineage(found.columns, task.path, lines)
    rows = pl.DataFrame({"_rows": local}).hstack(found).with_columns(**made)
    return rows.select(LINEAGE).cast(_LINEAGE_TYPES)


def staged_keys(
    engine: Engine,
    storage: RunStorage,
    job: DatasetKeys,
    tasks: Sequence[KeyTask],
    engine_settings: EngineSettings,
    rank: Ranking,
    leader: str,
) -> tuple[Participants, RowKeys, Led | None]:
    """Stage every task's row keys on ``engine``, find the rows that take part (of the
    rows of ``tasks``, in order: :mod:`~pipeline.dedupe.participants`) with their
    groups and near pairs, and give the matching what it reads of them
    (:class:`~pipeline.dedupe.row_keys.RowKeys`, positions among the participants are
    row ids). ``rank``: each row's survivor rank, by place. ``leader`` (the survivor
    rule's direction: ``first``, ``last``, ``max`` or ``min``): with the exact rule on,
    each exact group's rows in a split are led by their best-ranked
    (:func:`_led_groups`; by a column, the ranks ``rank`` gives, staged a task at a
    time for the key tasks to copy beside the row keys), and the rows led (returned)
    take no part: not in the normalised groups, not as near texts."""
    if job.exact and leader in ("max", "min"):
        job = replace(job, ranked=True)
        _stage_ranks(storage, tasks, rank)
    counted = engine.map(key_step(job), tasks)
    stem = storage.row_keys_stem(_STEM)
    staged = [storage.staged_table(task.shard, stem) for task in tasks]
    for task, rows, table in zip(tasks, counted, staged, strict=True):
        if not rows == table.num_rows == task.rows:  # the arrays below line up by position
            first = task.pieces[0]
            raise InputError(
                f"{first.path}: rows from {first.first} read as {rows}, not {task.rows}"
            )
    settings = job.settings
    exact, led, left_out = None, None, None
    if job.exact:
        exact, led = _led_groups(engine, storage, tasks, engine_settings, leader=leader)
        left_out = _lines_of(tasks, led.rows)
    normalised = None
    if settings.normalised:
        normalised = _grouped(
            engine, storage, tasks, NORMALISED, engine_settings, left_out=left_out
        )
    near = None
    if settings.near and sum(task.rows for task in tasks) > 1:  # one row has no pair
        # a text is a normalised group's first row (an exact group's, with that rule
        # off; with both off, every row is a text), never a row led
        grouped = normalised or exact or NONE_SHARED
        texts = sparse_texts(grouped, rank, None if led is None else led.rows)
        near = _near_places(engine, storage, job, tasks, engine_settings, texts)
    found = Participants.of(exact, normalised, near)
    starts = np.cumsum([0, *(task.rows for task in tasks)])

    def signatures(at: I64) -> npt.NDArray[np.uint32]:
        out = np.empty((settings.permutations, len(at)), np.uint32)
        for i, local, place in _located(starts, found.places[at]):
            values = staged[i][SIGNATURE].take(pa.array(local)).combine_chunks()
            out[:, place] = values.flatten().to_numpy().reshape(len(local), -1).T
        return out

    def lineage(at: I64) -> pl.DataFrame:
        return _rows_of(tasks, found.places[at], _lineage, pl.DataFrame(schema=_LINEAGE_TYPES))

    keys = participant_keys(found, signatures if near is not None else None, lineage)
    return found, keys, led


def _near_places(
    engine: Engine,
    storage: RunStorage,
    job: DatasetKeys,
    tasks: Sequence[KeyTask],
    engine_settings: EngineSettings,
    texts: SparseTexts,
) -> NearPlaces:
    """The near rule's verified pairs among ``texts`` as places among every task's rows,
    found and checked on the engine (:meth:`~pipeline.dedupe.partitions.NearSearch.search`):
    the text maps and the texts' addresses are staged a task at a time, and the sets
    tasks read the candidates' texts from the inputs (:class:`DatasetTexts`)."""
    search = NearSearch(
        engine,
        storage,
        _STEM,
        tuple((task.shard, task.rows) for task in tasks),
        LshParams.from_settings(job.settings),
        engine_settings.resolved_workers(),
        engine_settings.partitions,
        texts.ordered,
    )
    # every row takes part, each task's rows staged as its lines from 0
    count = stage_sparse_texts(storage, _STEM, search.shards, None, None, texts)
    source = DatasetTexts(job, tuple(tasks))
    better, worse, similarity, candidates = search.search(None, count, source)
    return NearPlaces(texts.places(better), texts.places(worse), similarity, candidates)


def _rows_of(
    tasks: Sequence[KeyTask],
    rows: I64,
    read: Callable[[KeySlice, I64], pl.DataFrame],
    empty: pl.DataFrame,
) -> pl.DataFrame:
    """``read(slice, places in it)`` of each slice's rows among ``rows`` (places among
    every task's rows), in the order of ``rows``."""
    starts = np.cumsum([0, *(task.rows for task in tasks)])
    parts, order = [], []
    for i, local, place in _located(starts, rows):
        for piece, at, inner in tasks[i].located(local):
            parts.append(read(piece, at))
            order.append(place[inner])
    return _in_order(parts, order, len(rows), empty)


@dataclass(frozen=True)
class DatasetTexts:
    """The normalised key texts of a dataset's rows, read from its slices wherever the
    job's tasks can read them (the driver, or a near sets task:
    :class:`~pipeline.dedupe.near_check.TextSource`)."""

    job: DatasetKeys
    tasks: tuple[KeyTask, ...]

    def texts(self, addresses: pa.Table) -> pl.Series:
        """The texts of the rows ``addresses`` name (their stored rows, which are places
        among every task's rows: every row takes part), in their order."""
        rows = addresses[STORED].to_numpy()
        read = functools.partial(_span_frame, self.job)
        frame = _rows_of(self.tasks, rows, read, pl.DataFrame(schema=self.job.layout))
        key = self.job.key()
        normalisation = Normalisation.from_settings(self.job.settings)
        return frame.select(text_columns(key, normalisation)).to_series()


def _in_order(
    parts: list[pl.DataFrame], order: list[I64], n: int, empty: pl.DataFrame
) -> pl.DataFrame:
    """The rows of ``parts`` (each the rows of one slice, at places ``order`` of the
    ``n`` rows asked for) in the order asked for."""
    if not parts:
        return empty
    back = np.empty(n, np.int64)  # the concatenated row of each row asked for
    back[np.concatenate(order)] = np.arange(n)
    return pl.concat(parts)[back]
