"""A row's own value of an expression: the same whatever rows are evaluated beside it.

rowgate evaluates expressions over staged rows a few batches at a time (the global
phase's hash-first checks, the dedupe stage's reads, the campaign's scoring bindings),
and how the gate cut the rows into batches depends on the shard size, the batch size,
the worker count and the engine. So an expression's value for a row must read that row
alone, and be computed alike whatever rows stand beside it (:func:`row_values`).

rowgate's own expressions are written so. A campaign's bindings are refused when they
are not: by name, reading polars' expression tree (``_other_rows`` in
:mod:`pipeline.rubrics.bindings`), and, whatever the names, by evaluating the binding
over sample rows of its kind's layout, each row alone and all together
(:func:`changes_beside_others`): a polars release that adds or renames a function that
reads other rows is still caught.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final, cast

import polars as pl
import pyarrow as pa

__all__ = ["changes_beside_others", "row_values", "sample_rows"]

#: :func:`sample_rows`' row count: two rows null, the others cycling through a few
#: values each (so window partitions hold several rows and aggregates differ from a
#: row's own value)
SAMPLE_ROWS: Final = 8


def row_values(batch: pa.RecordBatch, exprs: Mapping[str, pl.Expr]) -> pl.DataFrame:
    """Each of ``exprs`` (each value reading its row alone) over ``batch``'s rows, a
    column each, computed alike for every row whatever rows stand beside it.

    polars divides a column by a constant by multiplying with its reciprocal, except
    where it holds the column as a single value (a frame of one row), where it divides;
    the two differ in the last bit for about a third of quotients (``10 / 3``:
    3.333333333333333 beside other rows, 3.3333333333333335 alone; pola-rs/polars#20038
    and #27753, kept as designed). So a binding such as ``(a + b + c) / 3`` gave a row
    another score, and a score at a criterion's minimum another state, when the gate
    staged it in a batch of its own. A lone row is therefore evaluated beside a copy of
    itself, taken in Arrow (copies made in polars stay single values).

    This holds for the frame's rows. Inside an expression, a list evaluated element by
    element (``list.eval``) is one frame per row's list: an element alone in its list
    divides otherwise than one beside others. Bindings cannot express that (SQL's list
    functions do no arithmetic per element), and rowgate's own list evaluations do none."""
    alone = batch.num_rows == 1
    rows = batch.take(pa.array([0, 0])) if alone else batch
    frame = cast(pl.DataFrame, pl.from_arrow(rows))
    # with_columns: a literal's value for every row (select would give it once)
    values = frame.with_columns(*(expr.alias(name) for name, expr in exprs.items()))
    values = values.select(list(exprs))
    return values.head(1) if alone else values


def changes_beside_others(expr: pl.Expr, rows: pa.RecordBatch) -> int | None:
    """The first of ``rows`` whose value of ``expr`` (:func:`row_values`) evaluated
    alone is not its value beside the others, else ``None``: an expression that reads
    other rows (an aggregate, a window, a shift, a fill from the row before, ...) gives
    one, whatever polars names it. ``None`` too where the expression fails on these rows
    (this cannot tell; the run still stops, naming it, should it fail on a record)."""
    try:
        together = row_values(rows, {"v": expr})
        for row in range(rows.num_rows):
            alone = row_values(rows.slice(row, 1), {"v": expr})
            if not alone.equals(together.slice(row, 1), null_equal=True):
                return row
    except pl.exceptions.PolarsError:
        return None
    return None


def sample_rows(fields: Sequence[pa.Field], rows: int = SAMPLE_ROWS) -> pa.RecordBatch | None:
    """``rows`` rows of a layout's ``fields`` for :func:`changes_beside_others`: every
    value set but in two rows (null at the top level: one amid the others, and the
    last), each column cycling through a few values (ints, floats, texts, lists of 0 to
    3 elements, maps), shifted column by column; ``None`` for a layout holding a type it
    cannot make."""
    try:
        columns = [_sample(f.type, rows, salt) for salt, f in enumerate(fields)]
    except (TypeError, pa.ArrowException):
        return None
    return pa.record_batch(columns, schema=pa.schema(list(fields)))


_INTEGERS: Final = (3, 1, 7, 0, 12)
_FLOATS: Final = (2.5, -0.75, 10 / 3, 0.0, 1e6)
_TEXTS: Final = ("b", "A a", "", "zé 10")
_LENGTHS: Final = (2, 0, 1, 3, 1)


def _null_rows(rows: int) -> set[int]:
    """The rows :func:`sample_rows` leaves null: one amid the others (a fill or an
    interpolation from the rows around it changes it) and the last."""
    return {rows // 2 - 1, rows - 1}


def _sample(dtype: pa.DataType, rows: int, salt: int) -> pa.Array:
    """``rows`` values of ``dtype``, those of :func:`_null_rows` null (nested values:
    theirs too)."""
    valid = [row not in _null_rows(rows) for row in range(rows)]
    mask = pa.array([not ok for ok in valid])
    if pa.types.is_struct(dtype):
        children = [_sample(f.type, rows, salt + k + 1) for k, f in enumerate(dtype)]
        return pa.StructArray.from_arrays(children, fields=list(dtype), mask=mask)
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype) or pa.types.is_map(dtype):
        lengths = [_LENGTHS[(r + salt) % len(_LENGTHS)] if valid[r] else 0 for r in range(rows)]
        offsets = pa.array([sum(lengths[:r]) for r in range(rows + 1)], pa.int32())
        total = sum(lengths)
        if pa.types.is_map(dtype):
            keys = pa.array([f"k{j % 3}" for j in range(total)], dtype.key_type)
            items = _sample(dtype.item_type, total + 1, salt + 2).slice(0, total)
            return pa.MapArray.from_arrays(offsets, keys, items, type=dtype, mask=mask)
        values = _sample(dtype.value_type, total + 1, salt + 2).slice(0, total)
        if pa.types.is_large_list(dtype):
            return pa.LargeListArray.from_arrays(
                offsets.cast(pa.int64()), values, type=dtype, mask=mask
            )
        return pa.ListArray.from_arrays(offsets, values, type=dtype, mask=mask)
    if pa.types.is_null(dtype):
        return pa.nulls(rows)
    if pa.types.is_boolean(dtype):
        plain: list[object] = [(r + salt) % 2 == 0 for r in range(rows)]
    elif pa.types.is_floating(dtype):
        plain = [_FLOATS[(r + salt) % len(_FLOATS)] for r in range(rows)]
    elif pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        plain = [_TEXTS[(r + salt) % len(_TEXTS)] for r in range(rows)]
    elif pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype):
        plain = [_TEXTS[(r + salt) % len(_TEXTS)].encode() for r in range(rows)]
    elif pa.types.is_integer(dtype):
        plain = [_INTEGERS[(r + salt) % len(_INTEGERS)] for r in range(rows)]
    else:  # temporal and decimal types, from integers
        integers = [
            _INTEGERS[(r + salt) % len(_INTEGERS)] if valid[r] else None for r in range(rows)
        ]
        width = pa.int32() if pa.types.is_date32(dtype) or pa.types.is_time32(dtype) else pa.int64()
        return pa.array(integers, width).cast(dtype)
    return pa.array([value if ok else None for value, ok in zip(plain, valid, strict=True)], dtype)
