"""Groups that straddle splits: a task or a ``meta`` group with rows in two splits.

Seed 004: ``meta`` is producer metadata that "consumers may group by … but never train
on"; a prompt group or task split across train and eval leaks even when no single row is
duplicated. Such groups are reported, not removed: every row of a straddling group gets the
reason ``dedupe.split_group`` (its disposition is unchanged) and the groups are listed in a
table, because which side should give way is a curation decision, not a rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

__all__ = ["field_expr", "straddling_groups"]


def field_expr(path: str, schema: pl.Schema) -> pl.Expr | None:
    """A dotted field path as a string expression: struct fields are followed, a JSON-text
    column (``meta``) is read with a JSON path. ``None`` when the column is absent."""
    root, *rest = path.split(".")
    if root not in schema:
        return None
    expr = pl.col(root)
    dtype: Any = schema[root]
    for i, name in enumerate(rest):
        if isinstance(dtype, pl.Struct):
            expr = expr.struct.field(name)
            dtype = {f.name: f.dtype for f in dtype.fields}.get(name, pl.Null())
        else:
            return expr.cast(pl.String).str.json_path_match("$." + ".".join(rest[i:]))
    return expr.cast(pl.String)


def straddling_groups(frame: pl.DataFrame, fields: Sequence[str]) -> pl.DataFrame:
    """Rows of ``frame`` (with ``_row`` and ``_split``) whose value of one of ``fields``
    occurs in more than one split: columns ``_row``, ``field``, ``value``, ``splits``."""
    empty = pl.DataFrame(
        schema={
            "_row": pl.Int64,
            "field": pl.String,
            "value": pl.String,
            "splits": pl.List(pl.String),
        }
    )
    labelled = frame.filter(pl.col("_split").is_not_null())
    if labelled["_split"].n_unique() < 2:
        return empty
    found = [empty]
    for path in fields:
        expr = field_expr(path, labelled.schema)
        if expr is None:
            continue
        values = labelled.select("_row", "_split", value=expr).filter(pl.col("value").is_not_null())
        groups = (
            values.group_by("value")
            .agg(splits=pl.col("_split").unique().sort())
            .filter(pl.col("splits").list.len() > 1)
        )
        found.append(
            values.join(groups, on="value").select(
                "_row", field=pl.lit(path), value="value", splits="splits"
            )
        )
    return pl.concat(found).sort("_row", "field")
