"""The writer: staged rows + global decisions → final Parquet parts, one per shard.

For each shard it applies the global phase's decisions (final disposition, added
reasons, extra columns), adds the lineage columns that are constant per shard
(``_source``, ``_kind``), need the shard's line base (``_line``) or follow from the
campaign (``_sanitizer``), and splits rows by disposition (DESIGN §3.7)::

    accepted/<kind>/part-<shard>.parquet      quarantined/<kind>/part-<shard>.parquet
    duplicates/<kind>/part-<shard>.parquet    rejected/part-<shard>.parquet

Part names depend on the shard, shards depend only on the inputs and
``engine.shard_bytes``, and row groups only on row counts, so the files are
byte-identical for any worker count, ``engine.batch_lines`` and ``engine.batch_bytes``.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.core.config import CampaignConfig
from pipeline.core.reasons import REASONS_TYPE, Disposition
from pipeline.decide.columns import OutputColumn
from pipeline.engines import Progress, Step
from pipeline.gate.gate import GATE_FIELDS, REJECTED_FIELDS
from pipeline.gate.reader import Shard, fetch_lines
from pipeline.records.lineage import LINEAGE_FIELDS, LINEAGE_NAMES
from pipeline.storage import ROW_GROUP_ROWS, RunStorage, WrittenFile

__all__ = [
    "DISPOSITION_DIRS",
    "OutputColumn",
    "WriteSummary",
    "WriteTask",
    "WrittenFile",
    "part_schema",
    "write_step",
]

DISPOSITION_DIRS: Final = {
    Disposition.ACCEPTED: "accepted",
    Disposition.QUARANTINED: "quarantined",
    Disposition.DUPLICATE: "duplicates",
    Disposition.REJECTED: "rejected",
}
_INTERNAL: Final = ("_shard_line", "_disposition")


@dataclass
class WriteSummary:
    shard: int
    files: list[WrittenFile] = field(default_factory=list)
    #: disposition -> rows
    rows: Counter[str] = field(default_factory=Counter)
    #: (disposition, reason code) -> rows carrying that code
    reasons: Counter[tuple[str, str]] = field(default_factory=Counter)


@dataclass(frozen=True)
class WriteTask:
    shard: Shard
    line_base: int
    storage: RunStorage
    kinds: tuple[str, ...]
    #: the kinds whose global decisions for this shard are staged
    #: (:meth:`RunStorage.decisions_stem`)
    decided: tuple[str, ...]
    #: extra output columns declared by the global stages, per kind
    columns: dict[str, list[OutputColumn]]
    #: extra columns of rejected/ (the same for every kind)
    rejected_columns: list[OutputColumn]


def _constant(value: str | None, n: int) -> pa.Array:
    return pa.repeat(pa.scalar(value, pa.string()), n)


def _apply_decisions(
    table: pa.Table, decisions: pa.Table | None, columns: list[OutputColumn]
) -> pa.Table:
    """Overlay the global phase's decisions (keyed by ``_shard_line``) on staged rows and
    append every declared extra column (null where a row has no decision)."""
    if decisions is None or decisions.num_rows == 0:
        for c in columns:
            table = table.append_column(pa.field(c.name, c.type), pa.nulls(table.num_rows, c.type))
        return table
    index = pc.index_in(table["_shard_line"], value_set=decisions["_shard_line"])
    disposition = pc.coalesce(decisions["_disposition"].take(index), table["_disposition"])
    table = table.set_column(
        table.schema.get_field_index("_disposition"), "_disposition", disposition
    )
    added = decisions["_reasons_add"].take(index)
    if pc.any(pc.greater(pc.list_value_length(added), 0)).as_py():
        position = table.schema.get_field_index("_reasons")
        table = table.set_column(position, "_reasons", _append_reasons(table["_reasons"], added))
    for c in columns:
        table = table.append_column(pa.field(c.name, c.type), decisions[c.name].take(index))
    return table


def _append_reasons(reasons: pa.ChunkedArray, added: pa.ChunkedArray) -> pa.Array:
    """``reasons`` with ``added`` appended row by row (null or empty: unchanged).

    Only the rows that gain a reason go through Python (a few percent: the duplicates
    and the rows a cross rule or the policy flagged); the others are taken as they are,
    where turning the whole column into Python lists and back cost ~7 % of the write
    phase."""
    gains = pc.indices_nonzero(pc.fill_null(pc.greater(pc.list_value_length(added), 0), False))
    rows = gains.to_pylist()
    merged = [
        old + new
        for old, new in zip(
            reasons.take(gains).to_pylist(), added.take(gains).to_pylist(), strict=True
        )
    ]
    n = len(reasons)
    selector = list(range(n))
    for k, row in enumerate(rows):
        selector[row] = n + k
    whole = pa.concat_arrays([*reasons.cast(REASONS_TYPE).chunks, pa.array(merged, REASONS_TYPE)])
    return whole.take(pa.array(selector, pa.int64()))


def sanitizer_version(config: CampaignConfig) -> str | None:
    """The ``_sanitizer`` of the rows sanitization ran on: its version when it is on."""
    if not config.sanitize.enabled:
        return None
    from pipeline.sanitize.sanitizer import SANITIZER_VERSION

    return SANITIZER_VERSION


def _sanitizer_column(table: pa.Table, version: str | None, kind: str | None) -> pa.Array:
    """``version`` on every row but those the sanitizer never sees (a rejected line over
    the byte limit: :data:`~pipeline.sanitize.sanitizer.UNSANITIZED_CODES`)."""
    n = table.num_rows
    if version is None or kind is not None or not n:
        return _constant(version, n)  # a typed row's record went through the sanitizer
    from pipeline.sanitize.sanitizer import UNSANITIZED_CODES

    first = pc.struct_field(pc.list_element(table["_reasons"], 0), "code")
    unseen = pc.is_in(first, value_set=pa.array(sorted(UNSANITIZED_CODES), pa.string()))
    return pc.if_else(unseen, pa.scalar(None, pa.string()), pa.scalar(version, pa.string()))


def _with_lineage(
    table: pa.Table, source: str, line_base: int, kind: str | None, sanitizer: str | None
) -> pa.Table:
    """Add ``_source``, ``_line``, ``_kind``, ``_sanitizer``; order columns as the output
    contract says (``kind`` is None for ``rejected/``)."""
    n = table.num_rows
    line = pc.add(table["_shard_line"], pa.scalar(line_base, pa.int64()))
    table = table.append_column("_source", _constant(source, n))
    table = table.append_column("_line", line)
    table = table.append_column("_sanitizer", _sanitizer_column(table, sanitizer, kind))
    if "_kind" not in table.column_names:
        table = table.append_column("_kind", _constant(kind, n))
    lineage = set(LINEAGE_NAMES)
    head = [c for c in table.column_names if c not in lineage and not c.startswith("_")]
    extras = [
        c
        for c in table.column_names
        if c.startswith("_") and c not in lineage and c not in _INTERNAL
    ]
    ordered = table.select(
        [*head, *LINEAGE_NAMES, *extras, *(c for c in _INTERNAL if c in table.column_names)]
    )
    lineage_fields = {f.name: f for f in LINEAGE_FIELDS}
    schema = pa.schema([lineage_fields.get(f.name, f) for f in ordered.schema])
    return ordered.cast(schema)


def _rejected_layout(columns: list[OutputColumn]) -> pa.Schema:
    return pa.schema([*REJECTED_FIELDS, *(pa.field(c.name, c.type) for c in columns)])


def _unwritten(columns: list[OutputColumn], disposition: Disposition) -> list[str]:
    """The columns of a kind's rows (decisions applied) its part of ``disposition`` drops:
    the internal ones, and the extra columns declared for other dispositions."""
    return [*_INTERNAL, *(c.name for c in columns if disposition not in c.dispositions)]


def part_schema(
    payload: list[pa.Field], kind: str | None, disposition: Disposition, columns: list[OutputColumn]
) -> pa.Schema:
    """The Arrow schema of a part of ``disposition`` and ``kind`` (None: ``rejected/``)
    a run writes: ``payload`` is the kind's layout (:class:`RecordLayout.fields`),
    ``columns`` the extra columns the global stages declare for the kind (or for
    ``rejected/``). It is what the writer's own steps make of no rows, so that ``rowgate
    verify`` compares each part with what a run writes, not with a copy of the layout."""
    if kind is None:
        empty = _rejected_layout(columns).empty_table()
        return _with_lineage(empty, "", 0, None, None).drop_columns(["_shard_line"]).schema
    staged = _apply_decisions(pa.schema([*payload, *GATE_FIELDS]).empty_table(), None, columns)
    table = _with_lineage(staged, "", 0, kind, None)
    return table.drop_columns(_unwritten(columns, disposition)).schema


def _to_rejected(table: pa.Table, task: WriteTask, config: CampaignConfig) -> pa.Table:
    """Rows the global phase rejected, in the ``rejected/`` layout, raw bytes re-read.

    With sanitization on, the re-read bytes are the unsanitized input: they go through
    the same raw rule as the gate's rejected lines (pipeline.sanitize.raw)."""
    offsets = table["_offset"].to_pylist()
    raw = fetch_lines(task.shard, offsets, config.limits.max_line_bytes)
    layout = _rejected_layout(task.rejected_columns)
    columns = {name: table[name] for name in layout.names if name in table.column_names}
    lines = [raw[o] for o in offsets]
    if config.sanitize.enabled:
        lines, reasons = _withhold_raw(lines, table["_reasons"].to_pylist(), config)
        columns["_reasons"] = pa.array(reasons, REASONS_TYPE)
    columns["_raw"] = pa.array(lines, pa.binary())
    # Another kind may declare rejected/ columns this kind does not have: null here.
    return pa.table(
        [columns.get(f.name, pa.nulls(table.num_rows, f.type)) for f in layout], schema=layout
    )


def _withhold_raw(
    lines: list[bytes | None], reasons: list[list[dict[str, str]]], config: CampaignConfig
) -> tuple[list[bytes | None], list[list[dict[str, str]]]]:
    from pipeline.sanitize import Sanitizer

    sanitizer = Sanitizer.from_config(config)
    assert sanitizer is not None
    kept: list[bytes | None] = []
    for line, row in zip(lines, reasons, strict=True):
        withheld = sanitizer.raw_reason(line) if line is not None else None
        kept.append(None if withheld is not None else line)
        if withheld is not None:
            row.append(withheld.as_row())
    return kept, reasons


@dataclass
class _Part:
    writer: pq.ParquetWriter
    disposition: str
    kind: str | None
    rows: int = 0
    #: rows not yet written: fewer than a row group
    pending: list[pa.Table] = field(default_factory=list)


#: A row group is joined into one chunk below this many bytes: Arrow's 32-bit offsets
#: hold no more text in one array (a nested one fails to join: ``offset overflow``)
_ONE_CHUNK_BYTES: Final = (1 << 31) - (1 << 20)


def _one_chunk(group: pa.Table) -> pa.Table:
    """``group`` (a row group's rows) as one chunk, unless it holds 2 GiB or more (4,096
    rows of ~512 KB: a line may be 8 MiB): then as it came, a chunk per staged batch, and
    its bytes may follow ``engine.batch_lines`` (docs/outputs.md)."""
    if group.nbytes >= _ONE_CHUNK_BYTES:
        return group
    return group.combine_chunks()


class _Parts:
    """The Parquet parts of one shard, written as staged batches arrive, in row groups
    of :data:`~pipeline.storage.ROW_GROUP_ROWS` rows, each part opened on its first row.
    Parts are cut into row groups by row count alone, and each row group is written as
    one Arrow chunk (:meth:`_flush`), so the files depend on the shards, never on the
    batch size or the worker count.

    The write phase holds a row group's worth of rows per part, not the whole shard (the
    rows the global phase rejects are the exception: they are gathered per shard, to be
    written in line order with the gate's). On 64 MiB shards of 3.3 KB rows a worker's
    peak there fell from ~280 MB to ~220 MB, below its gate-phase peak, and the run's
    from 0.87 to 0.73 GB on 500 MB. The cost, measured: files 1 % larger (five row
    groups instead of one); the write phase's time stayed within the machine's noise
    in an interleaved A/B.
    """

    def __init__(self, storage: RunStorage, config: CampaignConfig, summary: WriteSummary) -> None:
        self.storage = storage
        self.config = config
        self.summary = summary
        self.open: dict[str, _Part] = {}

    def write(self, relative: str, disposition: str, kind: str | None, table: pa.Table) -> None:
        part = self.open.get(relative)
        if part is None:
            writer = self.storage.parquet_writer(relative, table.schema, self.config)
            part = self.open[relative] = _Part(writer, disposition, kind)
        part.pending.append(table)
        if sum(t.num_rows for t in part.pending) >= ROW_GROUP_ROWS:
            self._flush(part, final=False)
        self.summary.rows[disposition] += table.num_rows
        codes = pc.struct_field(pc.list_flatten(table["_reasons"]), "code")
        for code, count in zip(*_value_counts(codes), strict=True):
            self.summary.reasons[(disposition, code)] += count

    @staticmethod
    def _flush(part: _Part, *, final: bool) -> None:
        """Write the pending rows in whole row groups (all of them when ``final``), each
        row group as one chunk (:func:`_one_chunk`).

        Arrow's Parquet writer checks a column's dictionary against its page limit (1
        MiB) at the end of each chunk it is given, as well as every 1,024 rows, and
        falls back to plain encoding there: written chunk by chunk (a chunk per staged
        batch), a column whose distinct values pass 1 MiB in a row group was encoded
        otherwise, and the file's bytes changed with ``engine.batch_lines`` (two texts
        of 3,000 rows: 273,739 against 276,694 bytes at 4,096 and 100 lines a batch). A
        row group's copy as one chunk costs a row group's memory."""
        pending = pa.concat_tables(part.pending)
        whole = pending.num_rows if final else pending.num_rows // ROW_GROUP_ROWS * ROW_GROUP_ROWS
        for start in range(0, whole, ROW_GROUP_ROWS):
            group = _one_chunk(pending.slice(start, min(ROW_GROUP_ROWS, whole - start)))
            part.writer.write_table(group, row_group_size=ROW_GROUP_ROWS)
        part.rows += whole
        rest = pending.slice(whole)
        part.pending = [rest] if rest.num_rows else []

    def abort(self) -> None:
        """Close the writers after a failure (the run's output is discarded anyway)."""
        for part in self.open.values():
            with contextlib.suppress(Exception):
                part.writer.close()
        self.open.clear()

    def close(self) -> None:
        """Finish every part and list it, with its size and digest, in the summary."""
        for relative, part in self.open.items():
            if part.pending:
                self._flush(part, final=True)
            part.writer.close()
            self.summary.files.append(
                self.storage.written(relative, part.disposition, part.kind, part.rows)
            )
        self.open.clear()


def _value_counts(values: pa.ChunkedArray | pa.Array) -> tuple[list[str], list[int]]:
    counts = pc.value_counts(values)
    return counts.field("values").to_pylist(), counts.field("counts").to_pylist()


def _write_shard(config: CampaignConfig, task: WriteTask, progress: Progress) -> WriteSummary:
    summary = WriteSummary(task.shard.index)
    part = f"part-{task.shard.index:05d}.parquet"
    parts = _Parts(task.storage, config, summary)
    layout = _rejected_layout(task.rejected_columns).names
    try:
        late_parts = []
        sanitizer = sanitizer_version(config)
        for kind in task.kinds:
            late = []
            decisions = (
                task.storage.staged_table(task.shard.index, task.storage.decisions_stem(kind))
                if kind in task.decided
                else None
            )
            for staged in task.storage.staged_batches(task.shard.index, kind):
                rows = _write_batch(parts, staged, decisions, task, kind, part, sanitizer)
                if rows is not None:
                    late.append(rows.select([c for c in layout if c in rows.column_names]))
            if late:
                # once per kind: re-reading raw lines can mean decompressing the stream
                late_parts.append(_to_rejected(pa.concat_tables(late), task, config))
        late_rejected = pa.concat_tables(late_parts).sort_by("_shard_line") if late_parts else None
        for rows in _rejected_in_line_order(task, late_rejected):
            table = _with_lineage(
                rows, task.shard.input.path, task.line_base, None, sanitizer
            ).drop_columns(["_shard_line"])
            parts.write(f"rejected/{part}", Disposition.REJECTED.value, None, table)
        parts.close()
    except BaseException:
        parts.abort()
        raise
    progress(0, sum(summary.rows.values()))
    return summary


def _rejected_in_line_order(task: WriteTask, late: pa.Table | None) -> Iterator[pa.Table]:
    """The shard's rejected rows in line order: the gate's, a staged batch at a time,
    merged with ``late`` (the rows the global phase rejected, sorted by line).

    The gate's rejections were read whole and sorted with the late ones: ~0.4 KB a
    row for the whole shard (a shard of blank lines holds up to 64 Mi rows)."""
    taken = 0
    for batch in task.storage.rejected_batches(task.shard.index):
        for c in task.rejected_columns:
            batch = batch.append_column(pa.field(c.name, c.type), pa.nulls(batch.num_rows, c.type))
        if late is not None and taken < late.num_rows and batch.num_rows:
            last = batch["_shard_line"][-1]
            before = pc.sum(pc.less_equal(late["_shard_line"].slice(taken), last)).as_py() or 0
            if before:
                batch = pa.concat_tables([batch, late.slice(taken, before)]).sort_by("_shard_line")
                taken += before
        if batch.num_rows:
            yield batch
    if late is not None and taken < late.num_rows:
        yield late.slice(taken)


def _write_batch(
    parts: _Parts,
    staged: pa.Table,
    decisions: pa.Table | None,
    task: WriteTask,
    kind: str,
    part: str,
    sanitizer: str | None,
) -> pa.Table | None:
    """Write one staged batch's kept rows to their parts, with the shard's ``decisions``
    of ``kind`` applied; return the rows the global phase rejected (they go to
    ``rejected/`` with the gate's, in line order)."""
    columns = task.columns.get(kind, [])
    staged = _apply_decisions(staged, decisions, columns)
    disposition = staged["_disposition"]
    counts = dict(zip(*_value_counts(disposition), strict=True))
    for outcome in (Disposition.ACCEPTED, Disposition.QUARANTINED, Disposition.DUPLICATE):
        n = counts.get(outcome.value, 0)
        if not n:
            continue
        # Most batches go to one disposition whole: no filter, no copy of their columns.
        rows = (
            staged if n == staged.num_rows else staged.filter(pc.equal(disposition, outcome.value))
        )
        table = _with_lineage(rows, task.shard.input.path, task.line_base, kind, sanitizer)
        table = table.drop_columns(_unwritten(columns, outcome))
        parts.write(f"{DISPOSITION_DIRS[outcome]}/{kind}/{part}", outcome.value, kind, table)
    if not counts.get(Disposition.REJECTED.value, 0):
        return None
    late = staged.filter(pc.equal(disposition, Disposition.REJECTED.value))
    return late.append_column("_kind", _constant(kind, late.num_rows))


def _init_writer(config: CampaignConfig) -> CampaignConfig:
    return config


def write_step(config: CampaignConfig) -> Step[CampaignConfig, WriteTask, WriteSummary]:
    """The write phase as an engine step."""
    return Step(_init_writer, (config,), _write_shard)
